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
        // Files written on Windows end lines with \r\n, which Swift reads as one Character.
        let lines = text.split(omittingEmptySubsequences: false) { $0 == "\n" || $0 == "\r\n" }
        for (index, raw) in lines.enumerated() {
            let line = index + 1
            let rest = raw.drop(while: \.isWhitespace)
            if rest.isEmpty || rest.first == "#" { continue }
            guard let equals = rest.firstIndex(of: "=") else {
                let word = rest.prefix { !$0.isWhitespace }
                malformed.append(Malformed(line: line, reason: "expected \"key = value\", found \"\(word)\" alone"))
                continue
            }
            let key = String(rest[..<equals].trimmingSuffix(while: \.isWhitespace))
            guard !key.isEmpty else {
                malformed.append(Malformed(line: line, reason: "expected a key before \"=\""))
                continue
            }
            guard !key.contains(where: \.isWhitespace) else {
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
        if !value.isEmpty && !value.contains(where: { $0.isWhitespace || $0 == "\"" }) && value.first != "#" { return value }
        return "\"" + value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    private struct Problem: Error {
        let reason: String
    }

    /// The value after `=`: quoted, or up to a comment, without surrounding spaces.
    private static func value(_ text: Substring) -> Result<String, Problem> {
        let text = text.drop(while: \.isWhitespace)
        guard text.first == "\"" else {
            var end = text.endIndex
            var previous: Character = " "
            for index in text.indices {
                if text[index] == "#" && previous.isWhitespace {
                    end = index
                    break
                }
                previous = text[index]
            }
            return .success(String(text[..<end].trimmingSuffix(while: \.isWhitespace)))
        }
        var value = ""
        var index = text.index(after: text.startIndex)
        while index < text.endIndex {
            let character = text[index]
            if character == "\"" {
                let after = text[text.index(after: index)...].drop(while: \.isWhitespace)
                guard after.isEmpty || after.first == "#" else {
                    return .failure(Problem(reason: "unexpected text after the closing quote"))
                }
                return .success(value)
            }
            if character == "\\", text.index(after: index) < text.endIndex, "\"\\".contains(text[text.index(after: index)]) {
                index = text.index(after: index)
            }
            value.append(text[index])
            index = text.index(after: index)
        }
        return .failure(Problem(reason: "the quoted value has no closing quote"))
    }
}

extension Substring {
    fileprivate func trimmingSuffix(while predicate: (Character) -> Bool) -> Substring {
        var end = endIndex
        while end > startIndex, predicate(self[index(before: end)]) { end = index(before: end) }
        return self[startIndex..<end]
    }
}
