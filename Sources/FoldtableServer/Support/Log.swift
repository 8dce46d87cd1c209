import Foundation

/// Quiet-by-default logging: one `key=value` line per event on standard error. Never logs tokens
/// or message bodies; callers pass only identifiers, codes and counts.
public struct Log: Sendable {
    public enum Level: Int, Sendable, Comparable {
        case error = 0
        case warning, info, debug
        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    public var level: Level

    public init(level: Level) { self.level = level }

    /// Fields are built only when the line is written: a quiet server pays nothing for debug
    /// lines on its hot path.
    public func callAsFunction(_ level: Level, _ event: String, _ fields: @autoclosure () -> KeyValuePairs<String, String> = [:]) {
        guard level <= self.level else { return }
        write(level, event, fields().map { ($0.key, $0.value) })
    }

    /// The same, with fields as a list (built only when the line is written).
    public func callAsFunction(_ level: Level, _ event: String, pairs: () -> [(String, String)]) {
        guard level <= self.level else { return }
        write(level, event, pairs())
    }

    private func write(_ level: Level, _ event: String, _ fields: [(String, String)]) {
        FileHandle.standardError.write(Data(Self.line(level, event, fields).utf8))
    }

    /// One event as one line, newline included. Every value is escaped (`Log.field`), so a value
    /// from a client (a token's name, a path) can neither end the line nor forge another.
    static func line(_ level: Level, _ event: String, _ fields: [(String, String)]) -> String {
        var line = "level=\(level) event=\(field(event))"
        for (key, value) in fields {
            line += " \(field(key))=\(field(value))"
        }
        return line + "\n"
    }

    /// A value made safe for a `key=value` line: line breaks and other control characters (C0,
    /// DEL, C1, U+2028, U+2029) and backslashes are escaped (`\n`, `\u{85}`), then a value with
    /// a space, a quote or `=` is quoted (its quotes becoming `'`) so it stays one field.
    static func field(_ value: String) -> String {
        var escaped = String.UnicodeScalarView()
        var quoted = false
        for scalar in value.unicodeScalars {
            switch scalar.value {
            case 0x0A: escaped.append(contentsOf: #"\n"#.unicodeScalars)
            case 0x0D: escaped.append(contentsOf: #"\r"#.unicodeScalars)
            case 0x09: escaped.append(contentsOf: #"\t"#.unicodeScalars)
            case 0x5C: escaped.append(contentsOf: #"\\"#.unicodeScalars)
            case 0x00..<0x20, 0x7F...0x9F, 0x2028, 0x2029:
                escaped.append(contentsOf: "\\u{\(String(scalar.value, radix: 16))}".unicodeScalars)
            case 0x20, 0x3D:
                quoted = true
                escaped.append(scalar)
            case 0x22:
                quoted = true
                escaped.append("'")
            default: escaped.append(scalar)
            }
        }
        return quoted ? "\"" + String(escaped) + "\"" : String(escaped)
    }
}
