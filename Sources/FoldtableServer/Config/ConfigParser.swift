import Foundation

extension ServerConfig {
    /// What the command line asked for.
    public enum Parsed: Equatable {
        /// Serve with this configuration.
        case run(ServerConfig)
        /// `--check-config`: the configuration is valid; `sources` says where each key that is
        /// not at its default got its value (`FILE:LINE`, `FOLDTABLE_PORT`, `--port`).
        case check(ServerConfig, sources: [String: String])
        /// `--help`.
        case help
        /// `--help-markdown`: README's tables of keys.
        case helpMarkdown
        /// `--help-env`: every key as a commented `FOLDTABLE_*` line (deploy/foldtabled.env.example).
        case helpEnvironment
    }

    /// Reads, each overriding the one before: the defaults, the `--config` file (or the file
    /// named by `FOLDTABLE_CONFIG`), `FOLDTABLE_*` environment variables, flags. Then validates.
    ///
    /// Every problem is reported, one line each, not just the first. Refused: unknown keys in
    /// the file and unknown flags (a typo must not leave a default in place unnoticed), unknown
    /// `FOLDTABLE_*` variables except ``otherEnvironmentVariables`` (the same, for environment
    /// files), a key given twice in the file (which line was meant?), and a key from a source it
    /// is not read from (the token secret). A flag given twice takes the last, so a wrapper
    /// script may append to a command line. `readFile` is for tests.
    public static func parse(
        arguments: [String], environment: [String: String] = [:], readFile: (String) -> Result<String, Invalid> = Self.readConfigFile
    ) throws(Invalid) -> Parsed {
        let command = try CommandLineFlags(arguments)
        if command.help { return .help }
        if command.helpMarkdown { return .helpMarkdown }
        if command.helpEnvironment { return .helpEnvironment }
        var loader = Loader()
        if let path = command.configPath ?? environment["FOLDTABLE_CONFIG"].flatMap({ $0.isEmpty ? nil : $0 }) {
            switch readFile(path) {
            case .success(let text): loader.read(ConfigFile(text: text), path: path)
            case .failure(let invalid): loader.problems += invalid.problems
            }
        }
        loader.read(environment: environment)
        for (key, value) in command.settings {
            loader.set(key, value, from: .flag, named: key.flag, subject: key.flag)
        }
        if loader.problems.isEmpty { loader.problems = loader.config.problems() }
        guard loader.problems.isEmpty else { throw Invalid(loader.problems) }
        return command.check ? .check(loader.config, sources: loader.sources) : .run(loader.config)
    }

    /// The text of the config file at `path`, or one line saying why there is none.
    public static func readConfigFile(_ path: String) -> Result<String, Invalid> {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            return .failure(Invalid("config \(path): no such file"))
        }
        guard !isDirectory.boolValue, let data = FileManager.default.contents(atPath: path) else {
            return .failure(Invalid("config \(path): cannot read it (a directory, or not readable by this user)"))
        }
        guard let text = String(data: data, encoding: .utf8) else { return .failure(Invalid("config \(path): not UTF-8 text")) }
        return .success(text)
    }

    /// The key whose name is closest to `name`, if one is close enough to be a typo of it.
    static func nearestKey(to name: String) -> ConfigKey? {
        let candidates = keys.map { ($0, editDistance(name, $0.name)) }.filter { $0.1 <= max(1, name.count / 4) }
        return candidates.min { $0.1 < $1.1 }?.0
    }

    /// Levenshtein distance: edits (insert, delete, replace a character) from `a` to `b`.
    private static func editDistance(_ a: String, _ b: String) -> Int {
        let target = Array(b)
        var previous = Array(0...target.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1]
            for (j, y) in target.enumerated() {
                current.append(min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1)))
            }
            previous = current
        }
        return previous[target.count]
    }
}

/// The command line taken apart: which keys it sets, in order, and the few options that are
/// not settings (`--config`, `--check-config`, `--help`, `--help-markdown`).
private struct CommandLineFlags {
    var settings: [(ConfigKey, String)] = []
    var configPath: String?
    var check = false
    var help = false
    var helpMarkdown = false
    var helpEnvironment = false

    /// Stops at the first problem: past an unknown flag the rest cannot be read reliably (is the
    /// next word its value or the next argument?). `--help` anywhere wins over problems.
    init(_ arguments: [String]) throws(ServerConfig.Invalid) {
        if arguments.contains("--help") || arguments.contains("-h") {
            help = true
            return
        }
        var index = 0
        func refuse(_ problem: String) -> ServerConfig.Invalid { ServerConfig.Invalid(problem, usage: true) }
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("--"), argument.count > 2 else {
                let previous = index >= 2 ? arguments[index - 2] : ""
                if ["true", "false"].contains(argument), ServerConfig.key(named: String(previous.dropFirst(2)))?.isSwitch == true {
                    throw refuse("unexpected argument \"\(argument)\": a switch takes its value after =, as in \(previous)=\(argument)")
                }
                throw refuse("unexpected argument \"\(argument)\" (see --help)")
            }
            var name = String(argument.dropFirst(2))
            var value: String?
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if name == "check-config" || name == "help-markdown" || name == "help-env" {
                guard value == nil else { throw refuse("--\(name) takes no value") }
                switch name {
                case "check-config": check = true
                case "help-markdown": helpMarkdown = true
                default: helpEnvironment = true
                }
                continue
            }
            let key = ServerConfig.key(named: name)
            if key == nil && name != "config" { throw refuse(Self.unknown(name)) }
            if value == nil && key?.isSwitch != true {
                guard index < arguments.count else { throw refuse("--\(name) needs a value") }
                value = arguments[index]
                index += 1
            }
            if let key {
                settings.append((key, value ?? "true"))
            } else {
                configPath = value
            }
        }
    }

    private static func unknown(_ name: String) -> String {
        if name.hasPrefix("no-"), let key = ServerConfig.key(named: String(name.dropFirst(3))), key.isSwitch {
            return "unknown option --\(name): a switch is turned off with \(key.flag)=false"
        }
        if let near = ServerConfig.nearestKey(to: name) { return "unknown option --\(name) (did you mean \(near.flag)?)" }
        return "unknown option --\(name) (see --help)"
    }
}

/// Applies the sources one after the other, remembering where each value came from and every
/// problem.
private struct Loader {
    var config = ServerConfig()
    var sources: [String: String] = [:]
    var problems: [String] = []

    mutating func read(_ file: ConfigFile, path: String) {
        var firstLine: [String: Int] = [:]
        var items: [(line: Int, text: String)] = file.malformed.map { ($0.line, "config \(path):\($0.line): \($0.reason)") }
        for entry in file.entries {
            let place = "config \(path):\(entry.line):"
            if entry.key == "config" {
                items.append((entry.line, "\(place) a config file cannot name another"))
            } else if entry.key.hasPrefix("--") {
                items.append((entry.line, "\(place) write keys without \"--\", as in \"\(entry.key.dropFirst(2)) = ...\""))
            } else if let key = ServerConfig.key(named: entry.key) {
                if let first = firstLine[entry.key] {
                    items.append((entry.line, "\(place) \(entry.key) is set twice (first on line \(first))"))
                    continue
                }
                firstLine[entry.key] = entry.line
                if let problem = apply(key, entry.value, from: .file, named: "\(path):\(entry.line)", subject: "\(place) \(key.name)") {
                    items.append((entry.line, problem))
                }
            } else {
                let hint = ServerConfig.nearestKey(to: entry.key).map { " (did you mean \($0.name)?)" } ?? ""
                items.append((entry.line, "\(place) unknown key \"\(entry.key)\"\(hint)"))
            }
        }
        // In line order, as someone fixing the file reads it.
        problems += items.sorted { $0.line < $1.line }.map(\.text)
    }

    mutating func read(environment: [String: String]) {
        let others = Set(ServerConfig.otherEnvironmentVariables.map(\.name))
        let byName = Dictionary(uniqueKeysWithValues: ServerConfig.keys.map { ($0.environmentName, $0) })
        for (name, value) in environment.sorted(by: { $0.key < $1.key }) where name.hasPrefix("FOLDTABLE_") && !others.contains(name) {
            if let key = byName[name] {
                set(key, value, from: .environment, named: name, subject: name)
            } else {
                let near = ServerConfig.nearestKey(to: name.dropFirst("FOLDTABLE_".count).lowercased().replacingOccurrences(of: "_", with: "-"))
                problems.append("\(name) is not a setting of foldtabled" + (near.map { " (did you mean \($0.environmentName)?)" } ?? " (see --help)"))
            }
        }
    }

    /// Sets `key` from a source of kind `kind` called `source` (`FILE:LINE`, `FOLDTABLE_X`,
    /// `--x`); a problem is a line starting with `subject`.
    mutating func set(_ key: ConfigKey, _ value: String, from kind: ConfigKey.Sources, named source: String, subject: String) {
        if let problem = apply(key, value, from: kind, named: source, subject: subject) { problems.append(problem) }
    }

    /// ``set(_:_:from:named:subject:)``, returning the problem instead of keeping it.
    private mutating func apply(_ key: ConfigKey, _ value: String, from kind: ConfigKey.Sources, named source: String, subject: String) -> String? {
        guard key.sources.contains(kind) else { return "\(subject): \(key.refusal)" }
        do {
            try key.set(value, in: &config)
        } catch {
            return "\(subject) \(error.reason)"
        }
        sources[key.name] = source
        return nil
    }
}
