import Foundation

/// One setting of `foldtabled`, as every source spells it: `--NAME` on the command line,
/// `NAME = VALUE` in a `--config` file, `FOLDTABLE_NAME` (upper case, `_` for `-`) in the
/// environment. It knows which text it takes and how that text becomes part of a
/// ``ServerConfig``. ``ServerConfig/keys`` lists every key once; the parser, `--help` and
/// README's tables are all made from that list, so they cannot disagree.
public struct ConfigKey: Sendable {
    /// Headings of `--help` and of README's tables, in the order shown.
    public enum Group: String, Sendable, CaseIterable {
        case network = "Network"
        case access = "Access"
        case limits = "Limits"
        case timing = "Timing"
        case storage = "Storage"
        case tables = "Sessions and tables"
        case logging = "Logging"
    }

    /// Where a key's value may come from.
    public struct Sources: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        public static let file = Sources(rawValue: 1)
        public static let environment = Sources(rawValue: 2)
        public static let flag = Sources(rawValue: 4)
        public static let all: Sources = [.file, .environment, .flag]
    }

    /// Why a text is not a value of a key. `reason` completes a sentence that starts with where
    /// the text came from: "--port" + " must be a whole number from 0 to 65535, not \"x\"".
    public struct BadValue: Error, Equatable {
        public let reason: String
        public init(_ reason: String) { self.reason = reason }
    }

    /// The flag without `--`, which is also the key in a config file (`max-sessions`).
    public let name: String
    public let group: Group
    /// How `--help` shows the flag's value (`N`, `FILE`, `LIST`); empty for a switch.
    public let placeholder: String
    /// The values taken, for `--help` and README (`0-65535`, `1-3600 seconds`, `full or normal`).
    public let accepts: String
    /// What the key does, in one sentence.
    public let help: String
    /// Where a value may come from; everything else is refused with ``refusal``.
    public let sources: Sources
    /// Why a source outside ``sources`` is refused.
    public let refusal: String
    /// A switch: as a flag its presence means true (`--memory`), and `--memory=false` turns it
    /// off; files and the environment say `true` or `false`.
    public let isSwitch: Bool
    /// Its value is never printed (the token secret).
    public let isSecret: Bool
    /// Parses `text` and stores it in the config.
    let apply: @Sendable (inout ServerConfig, String) throws(BadValue) -> Void
    /// The value in a config, as text this key accepts ("" for none).
    let read: @Sendable (ServerConfig) -> String

    /// `--name`.
    public var flag: String { "--\(name)" }

    /// `FOLDTABLE_NAME`: upper case, `_` for `-`.
    public var environmentName: String {
        "FOLDTABLE_" + String(name.uppercased().map { $0 == "-" ? "_" : $0 })
    }

    /// The value in `config` as text this key accepts ("" when unset). Secrets read as "".
    public func value(in config: ServerConfig) -> String { isSecret ? "" : read(config) }

    /// The built-in default as people read it: "none" when empty.
    public var defaultText: String {
        let text = value(in: ServerConfig())
        return text.isEmpty ? "none" : text
    }

    /// Sets the key in `config` from `text`, or says why `text` is no value of it.
    public func set(_ text: String, in config: inout ServerConfig) throws(BadValue) {
        try apply(&config, text)
    }

    /// Whether `config` holds a value for this key (also a secret, which ``value(in:)`` hides).
    func isSet(in config: ServerConfig) -> Bool { !read(config).isEmpty }
}

// The kinds of key: each constructor is the one place its kind's text is parsed and written.
extension ConfigKey {
    private init(
        _ name: String, _ group: Group, placeholder: String, accepts: String, help: String, sources: Sources = .all,
        refusal: String = "", isSwitch: Bool = false, isSecret: Bool = false,
        apply: @escaping @Sendable (inout ServerConfig, String) throws(BadValue) -> Void, read: @escaping @Sendable (ServerConfig) -> String
    ) {
        self.name = name
        self.group = group
        self.placeholder = placeholder
        self.accepts = accepts
        self.help = help
        self.sources = sources
        self.refusal = refusal
        self.isSwitch = isSwitch
        self.isSecret = isSecret
        self.apply = apply
        self.read = read
    }

    /// A whole number within `range`, in `unit` (seconds, bytes, ...) when it has one.
    static func number(
        _ name: String, _ group: Group, _ keyPath: WritableKeyPath<ServerConfig, Int> & Sendable, _ range: ClosedRange<Int>,
        unit: String? = nil, _ help: String
    ) -> ConfigKey {
        let span = "\(range.lowerBound)-\(range.upperBound)"
        return ConfigKey(
            name, group, placeholder: "N", accepts: unit.map { "\(span) \($0)" } ?? span, help: help,
            apply: { config, text throws(BadValue) in
                guard let number = Int(text), range.contains(number) else {
                    throw BadValue("must be a whole number from \(range.lowerBound) to \(range.upperBound), not \"\(text)\"")
                }
                config[keyPath: keyPath] = number
            },
            read: { String($0[keyPath: keyPath]) })
    }

    /// Free text such as `accepts`; `mayBeEmpty` says whether "" is a value (and what it
    /// means, in `help`).
    static func text(
        _ name: String, _ group: Group, _ placeholder: String, _ keyPath: WritableKeyPath<ServerConfig, String> & Sendable, accepts: String,
        mayBeEmpty: Bool, _ help: String
    ) -> ConfigKey {
        ConfigKey(
            name, group, placeholder: placeholder, accepts: accepts + (mayBeEmpty ? "" : ", not empty"), help: help,
            apply: { config, text throws(BadValue) in
                guard mayBeEmpty || !text.isEmpty else { throw BadValue("must not be empty") }
                config[keyPath: keyPath] = text
            },
            read: { $0[keyPath: keyPath] })
    }

    /// A file's path, or none: an empty value unsets one set by an earlier source.
    static func path(_ name: String, _ group: Group, _ keyPath: WritableKeyPath<ServerConfig, String?> & Sendable, _ help: String) -> ConfigKey {
        ConfigKey(
            name, group, placeholder: "FILE", accepts: "path (empty: none)", help: help,
            apply: { config, text throws(BadValue) in config[keyPath: keyPath] = text.isEmpty ? nil : text },
            read: { $0[keyPath: keyPath] ?? "" })
    }

    /// Comma-separated items; spaces around them and empty items are dropped.
    static func list(_ name: String, _ group: Group, _ keyPath: WritableKeyPath<ServerConfig, [String]> & Sendable, _ help: String) -> ConfigKey {
        ConfigKey(
            name, group, placeholder: "LIST", accepts: "comma-separated", help: help,
            apply: { config, text throws(BadValue) in
                config[keyPath: keyPath] = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            },
            read: { $0[keyPath: keyPath].joined(separator: ",") })
    }

    /// On or off. Also takes 1/0 and yes/no, which environment files often use.
    static func `switch`(_ name: String, _ group: Group, _ keyPath: WritableKeyPath<ServerConfig, Bool> & Sendable, _ help: String) -> ConfigKey {
        ConfigKey(
            name, group, placeholder: "", accepts: "true or false", help: help, isSwitch: true,
            apply: { config, text throws(BadValue) in
                switch text {
                case "true", "1", "yes": config[keyPath: keyPath] = true
                case "false", "0", "no": config[keyPath: keyPath] = false
                default: throw BadValue("must be true or false, not \"\(text)\"")
                }
            },
            read: { $0[keyPath: keyPath] ? "true" : "false" })
    }

    /// One of a few names.
    static func choice<Value: Equatable & Sendable>(
        _ name: String, _ group: Group, _ placeholder: String, _ keyPath: WritableKeyPath<ServerConfig, Value> & Sendable,
        _ choices: [(name: String, value: Value)], _ help: String
    ) -> ConfigKey {
        let names = choices.map(\.name)
        let spoken = names.count < 2 ? names.joined() : names.dropLast().joined(separator: ", ") + " or " + names.last!  // safe: count >= 2 here
        return ConfigKey(
            name, group, placeholder: placeholder, accepts: spoken, help: help,
            apply: { config, text throws(BadValue) in
                guard let choice = choices.first(where: { $0.name == text }) else { throw BadValue("must be \(spoken), not \"\(text)\"") }
                config[keyPath: keyPath] = choice.value
            },
            read: { config in choices.first { $0.value == config[keyPath: keyPath] }?.name ?? "" })
    }

    /// A Redis URL, or none. Only its scheme is checked here (foldtabled reads the whole URL at
    /// start, with the Redis client's parser). Shown with its user and password left out.
    static func redisURL(_ name: String, _ group: Group, _ keyPath: WritableKeyPath<ServerConfig, String> & Sendable, _ help: String) -> ConfigKey {
        ConfigKey(
            name, group, placeholder: "URL", accepts: "redis://[[user]:password@]host[:port][/db] (empty: none)", help: help,
            apply: { config, text throws(BadValue) in
                guard text.isEmpty || text.hasPrefix("redis://") else {
                    throw BadValue("must be a redis:// URL (rediss:// is not supported: hiredis 0.14 has no TLS)")
                }
                config[keyPath: keyPath] = text
            },
            read: { config in
                let url = config[keyPath: keyPath]
                guard let at = url.lastIndex(of: "@") else { return url }
                return "redis://***" + url[at...]
            })
    }

    /// A Redis Cluster's seed nodes, with the credentials of a Redis URL, or none. Only the
    /// scheme is checked here (foldtabled reads the whole value at start). Shown without the
    /// user and password, like ``redisURL(_:_:_:_:)``.
    static func redisNodes(_ name: String, _ group: Group, _ keyPath: WritableKeyPath<ServerConfig, String> & Sendable, _ help: String) -> ConfigKey {
        ConfigKey(
            name, group, placeholder: "NODES", accepts: "[redis://[user:password@]]host:port,...", help: help,
            apply: { config, text throws(BadValue) in
                guard !text.contains("://") || text.hasPrefix("redis://") else {
                    throw BadValue("must be host:port,... or a redis:// URL with them (rediss:// is not supported: hiredis 0.14 has no TLS)")
                }
                config[keyPath: keyPath] = text
            },
            read: { config in
                let nodes = config[keyPath: keyPath]
                guard let at = nodes.lastIndex(of: "@") else { return nodes }
                return "redis://***" + nodes[at...]
            })
    }

    /// A secret, taken only from `sources` (never echoed back, not even in an error).
    static func secret(
        _ name: String, _ group: Group, _ keyPath: WritableKeyPath<ServerConfig, String?> & Sendable, sources: Sources, refusal: String,
        _ help: String
    ) -> ConfigKey {
        ConfigKey(
            name, group, placeholder: "SECRET", accepts: "at least 32 bytes", help: help, sources: sources, refusal: refusal, isSecret: true,
            apply: { config, text throws(BadValue) in config[keyPath: keyPath] = text.isEmpty ? nil : text },
            read: { $0[keyPath: keyPath] ?? "" })
    }
}
