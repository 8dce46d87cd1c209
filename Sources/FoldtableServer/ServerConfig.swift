import FoldtableCore
import Foundation

/// Every setting of `foldtabled`, with its unit, default and the reason for the default.
/// Set from flags or `FOLDTABLE_*` environment variables (see ``parse(arguments:environment:)``).
public struct ServerConfig: Sendable, Equatable {
    /// Address to bind. Default 127.0.0.1: reachable only from this machine until you choose
    /// otherwise (put nginx in front for the world).
    public var host = "127.0.0.1"
    /// TCP port. Default 8080; 0 picks a free one (printed at start).
    public var port = 8080
    /// Directory of the web client. Default `web`.
    public var webRoot = "web"
    /// PEM certificate and key; both set = HTTPS/WSS on the same port. Default none.
    public var tlsCertPath: String?
    public var tlsKeyPath: String?
    /// Origins (e.g. `https://tables.example.com`) allowed to open WebSockets besides same-origin
    /// pages and clients that send no Origin. Default none (Centrifugo's rule; RFC 6455 §10.2).
    public var allowedOrigins: [String] = []
    /// The URLs people reach this server at (e.g. `https://tables.example.com`), comma-separated:
    /// their host names are accepted in Host headers and their origins may open WebSockets.
    /// Default none: only IP literals and `localhost` (a DNS-rebinding page has neither).
    public var publicURLs: [String] = []
    /// Addresses of reverse proxies whose `X-Forwarded-For` names the real client (for logs and
    /// per-address limits). Default loopback (127.0.0.1, ::1): a proxy on the same machine, the
    /// usual nginx set-up, works without configuration; remote peers' headers are never believed.
    public var trustedProxies: [String] = ["127.0.0.1", "::1"]
    /// A file holding the token secret (at least 32 bytes; surrounding whitespace is ignored).
    /// With a secret, every join needs a signed token. Default none (open mode). The secret
    /// itself may come from the environment variable `FOLDTABLE_TOKEN_SECRET`, never from a
    /// flag: a flag's value shows in `ps`.
    public var tokenSecretFile: String?
    /// The secret from `FOLDTABLE_TOKEN_SECRET`, if set. Never logged.
    public var tokenSecret: String?
    /// Open mode (no token secret) on an address other than loopback: everyone who reaches the
    /// port may read and change every session. Off by default, so that takes a deliberate
    /// `--open`.
    public var open = false
    /// After a token expires, seconds a member has to send a fresh one (`auth`) before it is
    /// closed with 4002. Default 30.
    public var tokenGraceSecs = 30
    /// Changes a connection may make per second, sustained. Default 1,000: far above a person's
    /// pace and room for an import script, while one connection cannot flood a session; past it
    /// come `rate_limited` replies, and a connection that keeps going is closed (4500).
    public var changeRatePerSec = 1_000
    /// Changes a connection may make at once above the rate. Default 2,000 (an offline queue
    /// flushed on reconnect).
    public var changeBurst = 2_000
    /// WebSocket connections from one client address. Default 256 (a school or office behind
    /// one NAT address still fits); more get HTTP 429.
    public var maxConnectionsPerIP = 256
    /// WebSocket connections in all; more get HTTP 503. Default 0: as many as the open-file
    /// limit allows (the server raises its soft limit to the hard one at start), less 64 for the
    /// database, the web files and the listening socket.
    public var maxConnections = 0
    /// Keep sessions in memory only (throwaway use: nothing survives a restart). Default off:
    /// sessions live in SQLite under ``dataDirectory``.
    public var memoryOnly = false
    /// Where the SQLite database (`foldtable.db` and its WAL) lives. Default `data`, relative to
    /// the working directory; created when its parent exists.
    public var dataDirectory = "data"
    /// SQLite's `synchronous` setting. Default `full`: every commit is synced to disk before its
    /// changes are acknowledged, so an acknowledged change survives a power loss. `normal` syncs
    /// only at checkpoints of the WAL: it survives a crash of the process (kill -9) but may lose
    /// the last acknowledged changes on power loss, in exchange for fewer fsyncs.
    public var synchronous = Synchronous.full
    /// Committed events between two checkpoints of a session's table. Default 1,000: start-up and
    /// reload replay at most this many events, and a checkpoint's cost (the whole table written)
    /// is spread over that many changes.
    public var checkpointEvents = 1_000
    /// Seconds a session may sit without members before it is written out and dropped from
    /// memory (the next join loads it again). Default 300.
    public var idleEvictSecs = 300
    /// Work on a section longer than this shows it busy, in milliseconds. Default 500 (the
    /// original busy indicator's 0.5 s), at most `TableLimits.maxBusyThresholdMs` (60 s). Applies
    /// to new sessions and the demo. To show no busy indicator at all, a table turns its
    /// `showBusyIndicator` option off; a large threshold is not the way.
    public var busyThresholdMs = 500
    /// Largest incoming message, in bytes. Default 64 KiB (Centrifugo's): a change is tiny.
    public var maxMessageBytes = 65_536
    /// Outbound bytes queued per client before it is closed as slow (4000). Default 1 MiB
    /// (Centrifugo's). Row streams pace themselves below ``streamLowMarkBytes``.
    public var maxQueueBytes = 1_048_576
    /// Queued messages are joined into one frame up to this many bytes. Default 64 KiB.
    public var maxBatchBytes = 65_536
    /// Idle seconds before a ping. Default 25: under nginx's 60 s proxy_read_timeout.
    public var pingIntervalSecs = 25
    /// Seconds without any valid traffic (pongs included) before hanging up. Default 35
    /// (ping interval + 10 s for the pong).
    public var hangupSecs = 35
    /// Seconds a queue may make no progress before the connection is closed. Default 30.
    public var sendStallSecs = 30
    /// A connection must `join` within this many milliseconds of opening. Default 10,000,
    /// absolute from open: a flood of other messages does not extend it.
    public var joinTimeoutMs = 10_000
    /// Events kept per session for resume. Default 300 (Centrifugo's history size); older
    /// `since` values get a fresh welcome.
    public var historyEvents = 300
    /// Rows per `rows` chunk. Default 500 (about 25 KiB): big sections never become one frame.
    public var rowChunkRows = 500
    /// A row stream refills a client's queue while it holds at most this many bytes: a quarter of
    /// ``maxQueueBytes``, at most 256 KiB. Keeps every member busy without holding a whole
    /// section per client, and far from the slow-consumer cap.
    public var streamLowMarkBytes: Int { min(262_144, maxQueueBytes / 4) }
    /// A member must take a row stream within this many seconds of joining it, else it is closed
    /// as slow (4000). Default 15: changes to a streaming section wait for it, so one member that
    /// stops reading must not hold the session longer than that.
    public var streamTimeoutSecs = 15
    /// Welcome messages carry at most this many rows inline (the rest stream). Default 2,000.
    public var welcomeRowBudget = 2_000
    /// Milliseconds over which joins, leaves and renames are gathered into one presence diff per
    /// session. Default 100: a storm of N joins costs each member one message per interval, not
    /// N; short enough that people see each other arrive at once. 0 sends each change alone.
    public var presenceIntervalMs = 100
    /// Members a session lists by name. Default 200: past it, welcomes list 200 and presence
    /// diffs carry the count and a sample, so a room of 10,000 costs no more per member.
    public var presenceListMax = 200
    /// Sessions kept at once. Default 10,000: bounds memory against clients inventing names.
    public var maxSessions = 10_000
    /// Refused messages in a row before the connection is closed (4500). Default 50.
    public var maxConsecutiveErrors = 50
    /// Rows in the demo session's large section. Default 50,000.
    public var demoLargeRows = 50_000
    /// Log verbosity: error, warning, info, debug. Default error (quiet).
    public var logLevel = Log.Level.error
    /// Size limits of every table.
    public var tableLimits = TableLimits()

    public init() {}

    /// SQLite `synchronous` modes offered (see ``synchronous``).
    public enum Synchronous: String, Sendable, Equatable {
        case full, normal
    }

    /// Every flag with its default and meaning, for `--help`.
    public static let usage = """
        usage: foldtabled [options]    (every option also reads FOLDTABLE_<NAME>, e.g. FOLDTABLE_PORT)
               foldtabled backup DEST [--data-dir DIR]    online copy of the database (DEST must not exist)
          --host ADDR                 address to bind (127.0.0.1)
          --port N                    TCP port, 0 = any free port (8080)
          --web-root DIR              web client directory (web)
          --tls-cert FILE             PEM certificate: serve HTTPS/WSS (none)
          --tls-key FILE              PEM private key for --tls-cert (none)
          --allowed-origins LIST      comma-separated extra origins allowed to connect (none)
          --public-url LIST           URLs people use to reach this server: their hosts and origins are accepted (none)
          --trusted-proxies LIST      proxy addresses whose X-Forwarded-For is believed (127.0.0.1,::1)
          --token-secret-file FILE    token secret (or FOLDTABLE_TOKEN_SECRET): joins need signed tokens (none: open)
          --open                      allow open mode (no tokens) on a non-loopback address (off)
          --token-grace-secs N        time to send a fresh token after one expires (30)
          --change-rate N             changes per second per connection (1000)
          --change-burst N            changes at once above the rate (2000)
          --max-connections-per-ip N  WebSockets from one client address (256)
          --max-connections N         WebSockets in all, 0 = the open-file limit less 64 (0)
          --memory                    keep sessions in memory only: nothing survives a restart (off)
          --data-dir DIR              directory of the SQLite database (data)
          --synchronous MODE          full (survives power loss) or normal (survives crashes) (full)
          --checkpoint-events N       committed events between table checkpoints (1000)
          --idle-evict-secs N         seconds without members before a session leaves memory (300)
          --busy-threshold-ms N       show a section busy after N ms of work (500)
          --max-message-bytes N       largest incoming message (65536)
          --max-queue-bytes N         outbound queue per client before closing it as slow (1048576)
          --max-batch-bytes N         largest batched outgoing frame (65536)
          --ping-interval-secs N      idle seconds before a ping (25)
          --hangup-secs N             seconds without traffic before hanging up (35)
          --send-stall-secs N         seconds a queue may make no progress (30)
          --join-timeout-ms N         time to join after connecting (10000)
          --history-events N          events kept per session for resume (300)
          --row-chunk-rows N          rows per streamed chunk (500)
          --stream-timeout-secs N     time a client may take to receive a row stream (15)
          --welcome-row-budget N      rows sent inline in a welcome (2000)
          --presence-interval-ms N    joins and leaves gathered into one presence diff (100)
          --presence-list-max N       members listed by name; past it only a count (200)
          --max-sessions N            sessions kept at once (10000)
          --max-sections N            sections per table (1000)
          --max-rows-per-section N    rows per section (200000)
          --demo-large-rows N         rows in the demo's large section (50000)
          --log-level LEVEL           error, warning, info or debug (error)
          --help                      show this and exit
        """

    /// Why a configuration was refused: one line for the operator.
    public struct Invalid: Error, Equatable, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    /// What the command line asked for.
    public enum Parsed: Equatable {
        case run(ServerConfig)
        case help
    }

    /// Reads `FOLDTABLE_*` environment variables, then flags (which win), then validates.
    /// Unknown flags are errors; unknown environment variables are ignored, since the environment
    /// is shared with other programs (test harnesses set FOLDTABLE_BIN, for one).
    public static func parse(arguments: [String], environment: [String: String] = [:]) throws(Invalid) -> Parsed {
        var config = ServerConfig()
        for (name, value) in environment.sorted(by: { $0.key < $1.key }) where name.hasPrefix("FOLDTABLE_") {
            if name == "FOLDTABLE_TOKEN_SECRET" {
                config.tokenSecret = value.isEmpty ? nil : value
                continue
            }
            let option = name.dropFirst("FOLDTABLE_".count).lowercased().replacingOccurrences(of: "_", with: "-")
            do {
                _ = try config.set(option, value)
            } catch {
                throw Invalid("\(name): \(error.description)")
            }
        }
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--help" || argument == "-h" { return .help }
            guard argument.hasPrefix("--") else { throw Invalid("unexpected argument \"\(argument)\" (see --help)") }
            var name = String(argument.dropFirst(2))
            var value: String
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            } else if name == "memory" || name == "open" {
                value = "true"
            } else {
                guard index < arguments.count else { throw Invalid("--\(name) needs a value") }
                value = arguments[index]
                index += 1
            }
            guard try config.set(name, value) else { throw Invalid("unknown option --\(name) (see --help)") }
        }
        try config.validate()
        return .run(config)
    }

    /// Sets one option; returns false when there is no option of that name.
    private mutating func set(_ name: String, _ value: String) throws(Invalid) -> Bool {
        func list(_ text: String) -> [String] {
            text.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        func integer(_ range: ClosedRange<Int>) throws(Invalid) -> Int {
            guard let number = Int(value), range.contains(number) else {
                throw Invalid("--\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), not \"\(value)\"")
            }
            return number
        }
        switch name {
        case "host": host = value
        case "port": port = try integer(0...65_535)
        case "web-root": webRoot = value
        case "tls-cert": tlsCertPath = value.isEmpty ? nil : value
        case "tls-key": tlsKeyPath = value.isEmpty ? nil : value
        case "allowed-origins": allowedOrigins = list(value)
        case "memory":
            switch value {
            case "true", "1", "yes": memoryOnly = true
            case "false", "0", "no": memoryOnly = false
            default: throw Invalid("--memory takes no value (FOLDTABLE_MEMORY: true or false), not \"\(value)\"")
            }
        case "public-url": publicURLs = list(value)
        case "trusted-proxies": trustedProxies = list(value)
        case "token-secret-file": tokenSecretFile = value.isEmpty ? nil : value
        case "token-secret":
            throw Invalid("the token secret is read from --token-secret-file or FOLDTABLE_TOKEN_SECRET, never from a flag (ps shows flags)")
        case "open":
            switch value {
            case "true", "1", "yes": open = true
            case "false", "0", "no": open = false
            default: throw Invalid("--open takes no value (FOLDTABLE_OPEN: true or false), not \"\(value)\"")
            }
        case "token-grace-secs": tokenGraceSecs = try integer(1...3_600)
        case "change-rate": changeRatePerSec = try integer(1...1_000_000)
        case "change-burst": changeBurst = try integer(1...1_000_000)
        case "max-connections-per-ip": maxConnectionsPerIP = try integer(1...1_000_000)
        case "max-connections": maxConnections = try integer(0...10_000_000)
        case "data-dir":
            guard !value.isEmpty else { throw Invalid("--data-dir must not be empty") }
            dataDirectory = value
        case "synchronous":
            guard let mode = Synchronous(rawValue: value) else { throw Invalid("--synchronous must be full or normal, not \"\(value)\"") }
            synchronous = mode
        case "checkpoint-events": checkpointEvents = try integer(1...1_000_000)
        case "idle-evict-secs": idleEvictSecs = try integer(1...604_800)
        case "busy-threshold-ms": busyThresholdMs = try integer(0...tableLimits.maxBusyThresholdMs)
        case "max-message-bytes": maxMessageBytes = try integer(256...16 * 1_048_576)
        case "max-queue-bytes": maxQueueBytes = try integer(4_096...1_073_741_824)
        case "max-batch-bytes": maxBatchBytes = try integer(1_024...16 * 1_048_576)
        case "ping-interval-secs": pingIntervalSecs = try integer(1...3_600)
        case "hangup-secs": hangupSecs = try integer(2...7_200)
        case "send-stall-secs": sendStallSecs = try integer(1...3_600)
        case "join-timeout-ms": joinTimeoutMs = try integer(100...600_000)
        case "history-events": historyEvents = try integer(0...100_000)
        case "row-chunk-rows": rowChunkRows = try integer(1...100_000)
        case "stream-timeout-secs": streamTimeoutSecs = try integer(1...3_600)
        case "welcome-row-budget": welcomeRowBudget = try integer(0...1_000_000)
        case "presence-interval-ms": presenceIntervalMs = try integer(0...60_000)
        case "presence-list-max": presenceListMax = try integer(1...100_000)
        case "max-sessions": maxSessions = try integer(1...10_000_000)
        case "max-sections": tableLimits.maxSections = try integer(1...100_000)
        case "max-rows-per-section": tableLimits.maxRowsPerSection = try integer(1...10_000_000)
        case "demo-large-rows": demoLargeRows = try integer(0...1_000_000)
        case "log-level":
            switch value {
            case "error": logLevel = .error
            case "warning": logLevel = .warning
            case "info": logLevel = .info
            case "debug": logLevel = .debug
            default: throw Invalid("--log-level must be error, warning, info or debug, not \"\(value)\"")
            }
        default: return false
        }
        return true
    }

    /// Checks settings against each other.
    public func validate() throws(Invalid) {
        if (tlsCertPath == nil) != (tlsKeyPath == nil) {
            throw Invalid("--tls-cert and --tls-key go together: give both or neither")
        }
        if hangupSecs <= pingIntervalSecs {
            throw Invalid("--hangup-secs (\(hangupSecs)) must be more than --ping-interval-secs (\(pingIntervalSecs))")
        }
        if host.isEmpty { throw Invalid("--host must not be empty") }
        if tokenSecretFile == nil && tokenSecret == nil && !open && !Self.isLoopback(host) {
            throw Invalid(
                "--host \(host) in open mode would let anyone who reaches it change every session: set a token secret (--token-secret-file or FOLDTABLE_TOKEN_SECRET) or pass --open"
            )
        }
        for url in publicURLs where !(url.hasPrefix("http://") || url.hasPrefix("https://")) || RequestPolicy.authority(ofURL: url) == nil {
            throw Invalid("--public-url \(url) must look like https://tables.example.com")
        }
    }

    /// Whether `host` binds loopback only.
    public static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}
