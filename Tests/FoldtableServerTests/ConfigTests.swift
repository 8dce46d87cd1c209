import Foundation
import Testing

@testable import FoldtableServer

/// Parses with `file` as the text of the config file `f.conf` (no disk involved).
private func parse(
    _ arguments: [String], environment: [String: String] = [:], file: String? = nil
) throws(ServerConfig.Invalid) -> ServerConfig.Parsed {
    try ServerConfig.parse(
        arguments: arguments, environment: environment,
        readFile: { path in
            guard path == "f.conf", let file else { return .failure(ServerConfig.Invalid("config \(path): no such file")) }
            return .success(file)
        })
}

/// The configuration parsed, or the problems' lines.
private func config(_ arguments: [String], environment: [String: String] = [:], file: String? = nil) -> Result<ServerConfig, ServerConfig.Invalid> {
    do {
        switch try parse(arguments, environment: environment, file: file) {
        case .run(let config), .check(let config, _): return .success(config)
        case .help, .helpMarkdown, .helpEnvironment: return .failure(ServerConfig.Invalid("help"))
        }
    } catch {
        return .failure(error)
    }
}

private func problems(_ arguments: [String], environment: [String: String] = [:], file: String? = nil) -> [String] {
    if case .failure(let invalid) = config(arguments, environment: environment, file: file) { return invalid.problems }
    return []
}

@Suite struct ConfigSources {
    @Test func fileValueIsOverriddenByEnvironmentAndFlag() throws {
        let file = "port = 1\nmax-sessions = 11\nlog-level = info\n"
        let fromFile = try config(["--config", "f.conf"], file: file).get()
        #expect(fromFile.port == 1 && fromFile.maxSessions == 11 && fromFile.logLevel == .info)
        let environment = ["FOLDTABLE_PORT": "2", "FOLDTABLE_MAX_SESSIONS": "22"]
        let fromEnvironment = try config(["--config", "f.conf"], environment: environment, file: file).get()
        #expect(fromEnvironment.port == 2 && fromEnvironment.maxSessions == 22 && fromEnvironment.logLevel == .info)
        let fromFlag = try config(["--config", "f.conf", "--port", "3"], environment: environment, file: file).get()
        #expect(fromFlag.port == 3 && fromFlag.maxSessions == 22 && fromFlag.logLevel == .info)
    }

    @Test func theLastOfARepeatedFlagWins() throws {
        #expect(try config(["--port", "1", "--port=2"]).get().port == 2)
    }

    @Test func fileTakesCommentsBlankLinesAndQuotedValues() throws {
        let file = """
            # foldtabled.conf

               port = 9000   # after a space, a comment
            web-root = "/srv/my web #1"
            public-url = https://a.example.com/#not-a-comment
            open = true
            tls-cert = "say \\"hi\\" \\\\ bye"\r
            tls-key=key.pem
            """
        let parsed = try config(["--config", "f.conf"], file: file).get()
        #expect(parsed.port == 9_000)
        #expect(parsed.webRoot == "/srv/my web #1")
        #expect(parsed.publicURLs == ["https://a.example.com/#not-a-comment"])
        #expect(parsed.tlsCertPath == #"say "hi" \ bye"#)
        #expect(parsed.tlsKeyPath == "key.pem")
    }

    @Test func unknownKeyInFileNamesTheLine() {
        #expect(
            problems(["--config", "f.conf"], file: "port = 1\n\nmax-sesions = 5\n") == [
                #"config f.conf:3: unknown key "max-sesions" (did you mean max-sessions?)"#
            ])
        #expect(problems(["--config", "f.conf"], file: "frobnicate = 5") == [#"config f.conf:1: unknown key "frobnicate""#])
    }

    @Test func duplicateKeyIsRefused() {
        #expect(problems(["--config", "f.conf"], file: "port = 1\n# again\nport = 1\n") == ["config f.conf:3: port is set twice (first on line 1)"])
    }

    @Test func malformedLinesAndBadValuesNameTheirLines() {
        let file = "memory\nport = high\n= 3\nhost name = x\nweb-root = \"open\nsynchronous = fast\nlog-level = \"info\" loud\n"
        #expect(
            problems(["--config", "f.conf"], file: file) == [
                #"config f.conf:1: expected "key = value", found "memory" alone"#,
                #"config f.conf:2: port must be a whole number from 0 to 65535, not "high""#,
                #"config f.conf:3: expected a key before "=""#,
                #"config f.conf:4: expected "key = value": a key has no spaces ("host name")"#,
                "config f.conf:5: the quoted value has no closing quote",
                #"config f.conf:6: synchronous must be full or normal, not "fast""#,
                "config f.conf:7: unexpected text after the closing quote",
            ])
    }

    @Test func tokenSecretInFileIsRefusedWithoutEchoingIt() {
        let secret = "a-secret-that-must-never-be-printed-0123456789"
        let found = problems(["--config", "f.conf"], file: "token-secret = \(secret)\n")
        #expect(found.count == 1)
        #expect(found.first?.hasPrefix("config f.conf:1: token-secret: the token secret is never read from") == true)
        #expect(found.first?.contains("token-secret-file") == true && found.first?.contains("FOLDTABLE_TOKEN_SECRET") == true)
        #expect(found.first?.contains(secret) == false)
    }

    @Test func tokenSecretFlagIsRefusedWithoutEchoingIt() {
        let secret = "a-secret-that-must-never-be-printed-0123456789"
        for arguments in [["--token-secret", secret], ["--token-secret=\(secret)"]] {
            let found = problems(arguments)
            #expect(found.count == 1 && found.first?.hasPrefix("--token-secret: ") == true, "\(found)")
            #expect(found.first?.contains(secret) == false)
        }
    }

    @Test func tokenSecretComesFromTheEnvironmentAndAFileMayNameItsFile() throws {
        let secret = String(repeating: "s", count: 40)
        #expect(try config([], environment: ["FOLDTABLE_TOKEN_SECRET": secret]).get().tokenSecret == secret)
        #expect(try config([], environment: ["FOLDTABLE_TOKEN_SECRET": ""]).get().tokenSecret == nil)
        #expect(
            try config(["--config", "f.conf"], file: "token-secret-file = /etc/foldtable/secret").get().tokenSecretFile == "/etc/foldtable/secret")
    }

    @Test func everyProblemGetsItsOwnLineInSourceOrder() {
        let found = problems(
            ["--config", "f.conf", "--hangup-secs", "x"], environment: ["FOLDTABLE_PORT": "high", "FOLDTABLE_NOPE": "1"],
            file: "max-sessions = 0\nnope = 1\n")
        #expect(
            found == [
                #"config f.conf:1: max-sessions must be a whole number from 1 to 10000000, not "0""#,
                #"config f.conf:2: unknown key "nope""#,
                "FOLDTABLE_NOPE is not a setting of foldtabled (see --help)",
                #"FOLDTABLE_PORT must be a whole number from 0 to 65535, not "high""#,
                #"--hangup-secs must be a whole number from 2 to 7200, not "x""#,
            ])
    }

    @Test func settingsThatGoTogetherAreCheckedAfterEverySource() {
        #expect(problems(["--config", "f.conf"], file: "host = 0.0.0.0").first?.contains("--open") == true)
        #expect(problems(["--config", "f.conf", "--open"], file: "host = 0.0.0.0") == [])
        #expect(problems(["--config", "f.conf"], environment: ["FOLDTABLE_OPEN": "true"], file: "host = 0.0.0.0\nopen = false") == [])
        #expect(problems(["--config", "f.conf", "--ping-interval-secs", "10"], file: "hangup-secs = 5").count == 1)
        // A heartbeat expiring before the next beat would blink every other node's members out.
        #expect(problems(["--config", "f.conf", "--presence-expiry-ms", "1000"], file: "presence-heartbeat-ms = 1000").count == 1)
        #expect(problems(["--config", "f.conf", "--presence-expiry-ms", "1001"], file: "presence-heartbeat-ms = 1000") == [])
    }

    @Test func aPublicURLNamingAHostNeedsATokenSecretOrOpenLikeAPublicBind() {
        let refused = problems(["--public-url", "https://tables.example.com"])
        #expect(refused.count == 1)
        #expect(refused.first?.contains("--public-url https://tables.example.com in open mode") == true)
        #expect(refused.first?.contains("--open") == true)
        #expect(problems(["--public-url", "https://tables.example.com", "--open"]) == [])
        #expect(problems(["--public-url", "https://tables.example.com", "--token-secret-file", "/run/secrets/token"]) == [])
        // Addresses and localhost name no public host: nothing more is asked of them.
        #expect(problems(["--public-url", "https://127.0.0.1:8443,http://localhost:8080,https://[::1]:8443"]) == [])
    }

    @Test func aMissingConfigFileIsAnError() {
        #expect(problems(["--config", "missing.conf"]) == ["config missing.conf: no such file"])
    }

    @Test func theRealFileReaderSaysWhyItCannotRead() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("foldtable-config-\(UInt64.random(in: 0...UInt64.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("f.conf")
        try Data("port = 7\n".utf8).write(to: file)
        guard case .run(let parsed) = try ServerConfig.parse(arguments: ["--config", file.path]) else { throw ServerConfig.Invalid("not run") }
        #expect(parsed.port == 7)
        #expect(throws: ServerConfig.Invalid("config \(directory.path): cannot read it (a directory, or not readable by this user)")) {
            try ServerConfig.parse(arguments: ["--config", directory.path])
        }
        try Data([0x70, 0xff, 0xfe]).write(to: file)
        #expect(throws: ServerConfig.Invalid("config \(file.path): not UTF-8 text")) { try ServerConfig.parse(arguments: ["--config", file.path]) }
    }

    @Test func theEnvironmentMayNameTheFileAndTheFlagWins() throws {
        #expect(try config([], environment: ["FOLDTABLE_CONFIG": "f.conf"], file: "port = 5").get().port == 5)
        #expect(
            problems(["--config", "other.conf"], environment: ["FOLDTABLE_CONFIG": "f.conf"], file: "port = 5") == ["config other.conf: no such file"]
        )
    }

    @Test func aConfigFileCannotNameAnotherNorSpellKeysAsFlags() {
        #expect(
            problems(["--config", "f.conf"], file: "config = other.conf\n--port = 1") == [
                "config f.conf:1: a config file cannot name another",
                #"config f.conf:2: write keys without "--", as in "port = ...""#,
            ])
    }

    @Test func anEmptyValueUnsetsAPathAnEarlierSourceSet() throws {
        let parsed = try config(
            ["--config", "f.conf", "--tls-cert="], environment: ["FOLDTABLE_TLS_KEY": ""], file: "tls-cert = a.pem\ntls-key = a.key"
        )
        .get()
        #expect(parsed.tlsCertPath == nil && parsed.tlsKeyPath == nil)
    }

    @Test func unknownEnvironmentVariablesAreRefusedButOtherProgramsOnesAreNot() {
        #expect(
            problems([], environment: ["FOLDTABLE_MAX_SESION": "3"]) == [
                "FOLDTABLE_MAX_SESION is not a setting of foldtabled (did you mean FOLDTABLE_MAX_SESSIONS?)"
            ])
        var others: [String: String] = [:]
        for (name, _) in ServerConfig.otherEnvironmentVariables where name != "FOLDTABLE_CONFIG" { others[name] = "x" }
        #expect(problems([], environment: others.merging(["PATH": "/bin", "foldtable_port": "x"]) { a, _ in a }) == [])
    }

    @Test func switchesArePresenceAsFlagsAndTrueOrFalseElsewhere() throws {
        #expect(try config(["--memory"]).get().memoryOnly)
        #expect(try config(["--memory", "--memory=false"]).get().memoryOnly == false)
        #expect(try config(["--config", "f.conf"], file: "memory = true").get().memoryOnly)
        #expect(try config(["--config", "f.conf", "--memory=false"], file: "memory = true").get().memoryOnly == false)
        #expect(try config([], environment: ["FOLDTABLE_MEMORY": "false"]).get().memoryOnly == false)
        #expect(problems([], environment: ["FOLDTABLE_OPEN": "maybe"]) == [#"FOLDTABLE_OPEN must be true or false, not "maybe""#])
        // A switch's presence does not take the next word: it stays an argument of its own.
        #expect(try config(["--memory", "--port", "4"]).get().port == 4)
    }

    @Test func commandLineMistakesAreUsageErrorsWithAHint() {
        let cases: [([String], String)] = [
            (["--no-memory"], "unknown option --no-memory: a switch is turned off with --memory=false"),
            (["--memory", "false"], #"unexpected argument "false": a switch takes its value after =, as in --memory=false"#),
            (["--max-sesions", "3"], "unknown option --max-sesions (did you mean --max-sessions?)"),
            (["--frobnicate", "1", "--also-unknown"], "unknown option --frobnicate (see --help)"),
            (["--port"], "--port needs a value"),
            (["--config"], "--config needs a value"),
            (["--check-config=yes"], "--check-config takes no value"),
            (["stray"], #"unexpected argument "stray" (see --help)"#),
        ]
        for (arguments, line) in cases {
            #expect(throws: ServerConfig.Invalid(line, usage: true), "\(arguments)") { try parse(arguments) }
        }
        // A bad value of a real flag is a bad setting, not a misuse of the command line.
        #expect(throws: ServerConfig.Invalid(#"--port must be a whole number from 0 to 65535, not "x""#)) { try parse(["--port", "x"]) }
    }

    @Test func helpWinsOverEverythingElse() throws {
        #expect(try parse(["--frobnicate", "--help"]) == .help)
        #expect(try parse(["-h"]) == .help)
        #expect(try parse(["--help-markdown"]) == .helpMarkdown)
    }

    @Test func checkConfigSaysWhereEachValueCameFrom() throws {
        let parsed = try parse(
            ["--check-config", "--config", "f.conf", "--log-level", "debug"], environment: ["FOLDTABLE_PORT": "2"], file: "port = 1\nmemory = true")
        guard case .check(let config, let sources) = parsed else { throw ServerConfig.Invalid("not check") }
        #expect(sources == ["port": "FOLDTABLE_PORT", "memory": "f.conf:2", "log-level": "--log-level"])
        let text = config.settingsText(sources: sources)
        #expect(text.contains("\nport = 2 "))
        #expect(text.contains("# FOLDTABLE_PORT\n"))
        #expect(text.contains("# f.conf:2\n"))
        #expect(text.contains("host = 127.0.0.1"))
    }

    @Test func effectiveSettingsReadBackAsTheSameConfig() throws {
        let secret = "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t"
        let arguments = [
            "--port", "0", "--web-root", "my web", "--allowed-origins", "https://a.example, https://b.example", "--memory",
            "--synchronous", "normal", "--max-sections", "7", "--tls-cert", "c.pem", "--tls-key", "k\"ey.pem",
        ]
        let original = try config(arguments, environment: ["FOLDTABLE_TOKEN_SECRET": secret]).get()
        let text = original.settingsText(sources: [:])
        #expect(!text.contains(secret))
        #expect(text.contains("# token-secret: set"))
        var readBack = try config(["--config", "f.conf"], file: text).get()
        readBack.tokenSecret = original.tokenSecret
        #expect(readBack == original)
    }

    /// Found by the config fuzz target: the file was read as Characters, so a quote or a
    /// backslash followed by a combining mark or a joiner was not seen as one, and a value
    /// written with `ConfigFile.quoted` read back differently (or not at all).
    @Test func quotedValuesWithCombiningMarksAndJoinersReadBackTheSame() {
        for value in ["a\\\u{200D}\"\u{301} b", "\"\u{301}x", "#\u{301} c", "x \u{301}", "tab\there\u{200D}", "back\\", "plain"] {
            let file = ConfigFile(text: "key = \(ConfigFile.quoted(value))\r\nother = 1")
            #expect(file.malformed.isEmpty, "\(value.debugDescription)")
            #expect(file.entries.map(\.value) == [value, "1"], "\(value.debugDescription)")
        }
        // Read as written: a quote with a mark after it still opens a quoted value.
        #expect(ConfigFile(text: "key = \"\u{301}a\"").entries.first?.value == "\u{301}a")
    }

    /// Found by the config fuzz target: the lines were padded to the longest by UTF-16 length
    /// while measured in Characters, so the longest line lost its last character (the closing
    /// quote) when its value held a combining mark or an emoji, and the file did not read back.
    @Test func effectiveSettingsWithCombiningMarksAndEmojiReadBackAsTheSameConfig() throws {
        // Longer than any other line, so that it sets the width.
        let long = String(repeating: "long-directory-name-", count: 8)
        for dataDir in ["/var/lib/\(long) \u{301}x\" \\", "/srv/\(long)\u{1F44D}\u{1F44D}\u{1F44D}"] {
            let original = try config(["--data-dir", dataDir]).get()
            let text = original.settingsText(sources: ["data-dir": "--data-dir"])
            let readBack = try config(["--config", "f.conf"], file: text).get()
            #expect(readBack.dataDirectory == dataDir)
            #expect(readBack == original)
        }
    }
}

@Suite struct EmbedOriginSettings {
    @Test func embedOriginsAreOriginsAloneAndAnythingElseStopsStartUp() {
        #expect(problems(["--embed-origins", "https://blog.example.com, http://127.0.0.2:8000"]) == [])
        for bad in [
            "blog.example.com", "https://blog.example.com/", "https://blog.example.com/page", "*", "https://*.example.com", "ftp://x.example",
        ] {
            #expect(
                problems(["--embed-origins", bad]) == [
                    "--embed-origins \(bad) must be an origin alone, like https://blog.example.com (no path, no *)"
                ],
                "\(bad)")
        }
    }

    @Test func anOriginWithADefaultOrEmptyPortStopsStartUpSayingHowBrowsersWriteIt() {
        for (given, written) in [
            ("https://blog.example.com:443", "https://blog.example.com"), ("http://blog.example.com:80", "http://blog.example.com"),
            ("https://blog.example.com:", "https://blog.example.com"), ("https://blog.example.com:0443", "https://blog.example.com"),
            ("https://[::1]:443", "https://[::1]"),
        ] {
            for key in ["embed-origins", "allowed-origins"] {
                #expect(
                    problems(["--\(key)", given]) == [
                        "--\(key) \(given) never matches: browsers send it as \(written) (drop a default or empty port)"
                    ],
                    "\(key) \(given)")
            }
        }
        // Another scheme's default port, or any other port, is sent as written.
        let kept = "https://blog.example.com:80, http://blog.example.com:443, http://127.0.0.2:8000, https://[::1]:8443"
        #expect(problems(["--embed-origins", kept]) == [])
        #expect(problems(["--allowed-origins", kept + ", *"]) == [])
    }
}

@Suite struct ConfigKeyTable {
    @Test func everyKeyHasOneNameAndEnvironmentName() {
        let names = ServerConfig.keys.map(\.name)
        #expect(Set(names).count == names.count)
        #expect(Set(ServerConfig.keys.map(\.environmentName)).count == names.count)
        for key in ServerConfig.keys {
            #expect(key.name.allSatisfy { $0.isLowercase || $0.isNumber || $0 == "-" }, "\(key.name)")
            #expect(!key.help.isEmpty && !key.help.contains("\n"), "\(key.name)")
            #expect(!ServerConfig.otherEnvironmentVariables.contains { $0.name == key.environmentName }, "\(key.name)")
        }
        #expect(ServerConfig.key(named: "max-sessions")?.environmentName == "FOLDTABLE_MAX_SESSIONS")
    }

    @Test func everyKeyTakesBackItsOwnDefault() throws {
        for key in ServerConfig.keys where !key.isSecret {
            var config = ServerConfig()
            try key.set(key.value(in: config), in: &config)
            #expect(config == ServerConfig(), "\(key.name)")
        }
    }

    @Test func everyKeySetsItsOwnProperty() throws {
        // A value other than the default for each kind of key: a table entry pointing at the wrong
        // property shows up as a second key with the same value, or as the default unchanged.
        for key in ServerConfig.keys where !key.isSecret {
            var config = ServerConfig()
            let other =
                switch key.placeholder {
                case "": key.value(in: config) == "true" ? "false" : "true"
                case "N": "\(Self.someNumber(key))"
                case "MODE": "normal"
                case "LEVEL": "debug"
                case "URL": "redis://x.example:6380/2"
                default: "x.example"
                }
            try key.set(other, in: &config)
            #expect(key.value(in: config) == other, "\(key.name)")
            let changed = ServerConfig.keys.filter { $0.value(in: config) != $0.value(in: ServerConfig()) }.map(\.name)
            #expect(changed == [key.name], "\(key.name) changed \(changed)")
        }
    }

    private static func someNumber(_ key: ConfigKey) -> Int {
        let bounds = key.accepts.split(separator: " ")[0].split(separator: "-").compactMap { Int($0) }
        let current = Int(key.value(in: ServerConfig())) ?? 0
        return bounds[0] == current ? bounds[0] + 1 : bounds[0]
    }

    @Test func everyFlagOfEarlierReleasesIsStillAKey() {
        let flags = [
            "host", "port", "web-root", "tls-cert", "tls-key", "allowed-origins", "public-url", "trusted-proxies", "token-secret-file", "open",
            "token-grace-secs", "change-rate", "change-burst", "max-connections-per-ip", "max-connections", "memory", "data-dir", "synchronous",
            "checkpoint-events", "idle-evict-secs", "busy-threshold-ms", "max-message-bytes", "max-queue-bytes", "max-batch-bytes",
            "ping-interval-secs", "hangup-secs", "send-stall-secs", "join-timeout-ms", "history-events", "row-chunk-rows", "stream-timeout-secs",
            "welcome-row-budget", "presence-interval-ms", "presence-list-max", "max-sessions", "max-sections", "max-rows-per-section",
            "demo-large-rows", "log-level",
        ]
        for flag in flags {
            #expect(ServerConfig.key(named: flag)?.sources.contains(.flag) == true, "--\(flag)")
        }
    }

    @Test func helpListsEveryKeyWithItsDefaultAndEnvironmentName() {
        let help = ServerConfig.usage
        for key in ServerConfig.keys {
            #expect(help.contains(key.environmentName), "\(key.name)")
            if key.sources.contains(.flag) { #expect(help.contains("  \(key.flag)"), "\(key.name)") }
            if !key.isSecret { #expect(help.contains("default \(key.defaultText)"), "\(key.name)") }
        }
        #expect(help.split(separator: "\n").allSatisfy { $0.count <= 120 })
    }

    @Test func theEnvironmentFileExampleIsTheKeyTable() throws {
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("deploy/foldtabled.env.example")
        let text = try String(contentsOf: example, encoding: .utf8)
        #expect(
            text == ServerConfig.environmentExample + "\n", "deploy/foldtabled.env.example differs from ServerConfig.keys: run `make readme-config`")
    }

    @Test func readmeTablesAreTheKeyTable() throws {
        let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("README.md")
        let lines = try String(contentsOf: readme, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        let begin = try #require(lines.firstIndex { $0.hasPrefix("<!-- settings: begin") }, "README has no settings: begin marker")
        let end = try #require(lines.firstIndex { $0.hasPrefix("<!-- settings: end") }, "README has no settings: end marker")
        let tables = lines[(begin + 1)..<end].joined(separator: "\n")
        #expect(tables == ServerConfig.markdownTable, "README's settings differ from ServerConfig.keys: run `make readme-config`")
    }
}

@Suite struct RedisClusterSetting {
    @Test func oneRedisOrOneClusterNeverBoth() {
        #expect(problems(["--redis-cluster", "127.0.0.1:7000,127.0.0.1:7001"]).isEmpty)
        #expect(
            problems(["--redis", "redis://127.0.0.1:6379", "--redis-cluster", "127.0.0.1:7000"]) == [
                "--redis and --redis-cluster exclude each other: give one Redis, or the seed nodes of one cluster"
            ])
        #expect(problems(["--redis-cluster", "127.0.0.1:7000", "--memory"]).contains { $0.contains("--redis-cluster and --memory") })
        #expect(problems(["--redis-cluster", "rediss://127.0.0.1:7000"]).contains { $0.contains("hiredis 0.14 has no TLS") })
    }

    @Test func aClusterTakesNoTokensYetBecauseWithdrawalsWouldNotReachEveryNode() {
        #expect(
            problems(["--redis-cluster", "127.0.0.1:7000", "--token-secret-file", "/etc/foldtable/secret"]).contains {
                $0.contains("--redis-cluster does not take tokens yet")
            })
        #expect(problems(["--redis", "redis://127.0.0.1:6379", "--token-secret-file", "/etc/foldtable/secret"]).isEmpty)
    }
}
