import Foundation

/// The lines of a `--config` file, read for their shape only; which keys exist and what values
/// they take is ``ServerConfig/keys``' business.
///
/// The format: one `key = value` a line, keys as the flags without `--`; blank lines and
/// comments (`#` at the start of a line, or after a space outside quotes) are skipped; a value
/// may be in double quotes (then `\"` and `\\` stand for `"` and `\`), and must be to keep a
/// ` #` or surrounding spaces. Nothing else: no sections, no includes, no variables.
public struct ConfigFile: Equatable, Sendable {
    /// One `key = value` line.
    public struct Entry: Equatable, Sendable {
        public var key: String
        public var value: String
        /// 1-based, as editors count.
        public var line: Int
    }

    /// A line that is not `key = value`, and why.
    public struct Malformed: Equatable, Sendable {
        public var line: Int
        public var reason: String
    }

    public var entries: [Entry] = []
    public var malformed: [Malformed] = []

    /// Splits `text` into entries and malformed lines.
    public init(text: String) {
        // Read as Unicode scalars, not Characters: a quote, a backslash, "=" or "#" followed by a
        // combining mark or a joiner is one Character in Swift, and would not be seen as itself.
        let lines = text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false)
        for (index, raw) in lines.enumerated() {
            let line = index + 1
            // Files written on Windows end lines with \r\n.
            let content = index < lines.count - 1 && raw.last == "\r" ? raw.dropLast() : raw
            let rest = content.drop(while: Self.isSpace)
            if rest.isEmpty || rest.first == "#" { continue }
            guard let equals = rest.firstIndex(of: "=") else {
                let word = String(Substring(rest.prefix { !Self.isSpace($0) }))
                malformed.append(Malformed(line: line, reason: "expected \"key = value\", found \"\(word)\" alone"))
                continue
            }
            let keyScalars = rest[..<equals].trimmingSuffix(while: Self.isSpace)
            let key = String(Substring(keyScalars))
            guard !key.isEmpty else {
                malformed.append(Malformed(line: line, reason: "expected a key before \"=\""))
                continue
            }
            guard !keyScalars.contains(where: Self.isSpace) else {
                malformed.append(Malformed(line: line, reason: "expected \"key = value\": a key has no spaces (\"\(key)\")"))
                continue
            }
            switch Self.value(rest[rest.index(after: equals)...]) {
            case .success(let value): entries.append(Entry(key: key, value: value, line: line))
            case .failure(let problem): malformed.append(Malformed(line: line, reason: problem.reason))
            }
        }
    }

    /// `value` as a file holds it: bare when that reads back the same, else in double quotes.
    public static func quoted(_ value: String) -> String {
        let scalars = value.unicodeScalars
        if !scalars.isEmpty && !scalars.contains(where: { isSpace($0) || $0 == "\"" }) && scalars.first != "#" { return value }
        var out = String.UnicodeScalarView()
        out.append("\"")
        for scalar in scalars {
            if scalar == "\"" || scalar == "\\" { out.append("\\") }
            out.append(scalar)
        }
        out.append("\"")
        return String(out)
    }

    private struct Problem: Error {
        let reason: String
    }

    private static func isSpace(_ scalar: Unicode.Scalar) -> Bool { scalar.properties.isWhitespace }

    /// The value after `=`: quoted, or up to a comment, without surrounding spaces.
    private static func value(_ text: Substring.UnicodeScalarView) -> Result<String, Problem> {
        let text = text.drop(while: isSpace)
        guard text.first == "\"" else {
            var end = text.endIndex
            var previous: Unicode.Scalar = " "
            for index in text.indices {
                if text[index] == "#" && isSpace(previous) {
                    end = index
                    break
                }
                previous = text[index]
            }
            return .success(String(Substring(text[..<end].trimmingSuffix(while: isSpace))))
        }
        var value = String.UnicodeScalarView()
        var index = text.index(after: text.startIndex)
        while index < text.endIndex {
            let scalar = text[index]
            if scalar == "\"" {
                let after = text[text.index(after: index)...].drop(while: isSpace)
                guard after.isEmpty || after.first == "#" else {
                    return .failure(Problem(reason: "unexpected text after the closing quote"))
                }
                return .success(String(value))
            }
            let next = text.index(after: index)
            if scalar == "\\", next < text.endIndex, text[next] == "\"" || text[next] == "\\" {
                index = next
            }
            value.append(text[index])
            index = text.index(after: index)
        }
        return .failure(Problem(reason: "the quoted value has no closing quote"))
    }
}

extension Substring.UnicodeScalarView {
    fileprivate func trimmingSuffix(while predicate: (Unicode.Scalar) -> Bool) -> Substring.UnicodeScalarView {
        var end = endIndex
        while end > startIndex, predicate(self[index(before: end)]) { end = index(before: end) }
        return self[startIndex..<end]
    }
}
