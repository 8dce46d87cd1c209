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
        var line = "level=\(level) event=\(event)"
        for (key, value) in fields {
            let quoted =
                value.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" }) ? "\"\(value.replacingOccurrences(of: "\"", with: "'"))\"" : value
            line += " \(key)=\(quoted)"
        }
        line += "\n"
        FileHandle.standardError.write(Data(line.utf8))
    }
}
