import Foundation

extension ServerConfig {
    /// `foldtabled --help`: the commands, how sources combine, then every key by group with its
    /// values, default and environment variable.
    public static var usage: String {
        var lines = [
            "usage: foldtabled [--config FILE] [options]                  serve",
            "       foldtabled --check-config [--config FILE] [options]   check the settings, print them, exit",
            "       foldtabled backup DEST [--config FILE] [--data-dir DIR]  online copy of the database (DEST must not exist)",
            "       foldtabled token --session NAME ... (token --help)     print a signed token",
            "       foldtabled --help-markdown                             the settings as README's tables",
            "",
            "Settings are read from, each overriding the one before: the defaults; the --config FILE (or",
            "FOLDTABLE_CONFIG), of \"key = value\" lines with the keys below (no --); the environment variable",
            "shown for each key; the flags. A switch (--memory, --open) needs no value as a flag;",
            "--memory=false, or false in the file or the environment, turns it off.",
        ]
        for group in ConfigKey.Group.allCases {
            lines += ["", "\(group.rawValue):"]
            for key in keys where key.group == group {
                let name =
                    key.sources.contains(.flag) ? [key.flag, key.placeholder].filter { !$0.isEmpty }.joined(separator: " ") : key.environmentName
                let details = [key.accepts, key.isSecret ? "" : "default \(key.defaultText)", detailSource(key)].filter { !$0.isEmpty }
                let help = wrap(key.help, width: 100 - helpColumn)
                lines.append("  " + name.padding(toLength: helpColumn - 2, withPad: " ", startingAt: 0) + help[0])
                lines += (help.dropFirst() + [details.joined(separator: "; ")]).map { String(repeating: " ", count: helpColumn) + $0 }
            }
        }
        lines += ["", "  --help                      show this and exit"]
        return lines.joined(separator: "\n")
    }

    /// `foldtabled --help-markdown`: README's tables of keys, one per group, and the other
    /// `FOLDTABLE_*` names. README holds exactly this text between its settings markers.
    public static var markdownTable: String {
        var lines: [String] = []
        for group in ConfigKey.Group.allCases {
            lines += ["", "#### \(group.rawValue)", "", "| Flag / key | Environment | Default | Values | Meaning |", "|---|---|---|---|---|"]
            for key in keys where key.group == group {
                let flag = key.sources.contains(.flag) ? "`\(key.flag)`" : "—"
                let environment = "`\(key.environmentName)`" + (key.sources == .environment ? " only" : "")
                let cells = [flag, environment, key.isSecret ? "none" : key.defaultText, key.accepts, key.help]
                lines.append("| " + cells.map { $0.replacingOccurrences(of: "|", with: "\\|") }.joined(separator: " | ") + " |")
            }
        }
        lines += ["", "Other `FOLDTABLE_*` variables, which are not settings (any other name is refused):", ""]
        lines += otherEnvironmentVariables.map { "- `\($0.name)`: \($0.readBy)" }
        // Starts with a blank line, so the tables stand apart from the marker above them.
        return lines.joined(separator: "\n")
    }

    /// Every key with its value in this config as `key = value` lines (a valid config file),
    /// each with a comment saying where the value came from (`sources` from
    /// ``Parsed/check(_:sources:)``; a key not in it has its default). A secret shows only
    /// whether it is set, as a comment, since no file may hold it.
    public func settingsText(sources: [String: String]) -> String {
        let lines = Self.keys.map { key -> (String, String) in
            let origin = sources[key.name] ?? "default"
            if key.isSecret { return ("# \(key.name): \(key.isSet(in: self) ? "set" : "not set")", key.isSet(in: self) ? origin : "") }
            return ("\(key.name) = \(ConfigFile.quoted(key.value(in: self)))", origin)
        }
        let width = lines.map(\.0.count).max() ?? 0
        return lines.map { $0.1.isEmpty ? $0.0 : $0.0.padding(toLength: width, withPad: " ", startingAt: 0) + "  # " + $0.1 }.joined(
            separator: "\n")
    }

    /// Where the help text of a key starts on its line.
    private static let helpColumn = 30

    private static func detailSource(_ key: ConfigKey) -> String {
        key.sources == .all ? key.environmentName : key.sources == .environment ? "environment only" : ""
    }

    /// Words of `text` in lines of at most `width` characters (a longer word keeps its own line).
    private static func wrap(_ text: String, width: Int) -> [String] {
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ") {
            if !line.isEmpty && line.count + 1 + word.count > width {
                lines.append(line)
                line = ""
            }
            line += (line.isEmpty ? "" : " ") + word
        }
        return lines + [line]
    }
}
