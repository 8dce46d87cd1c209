import FoldtableCore
import Foundation

/// Every setting of `foldtabled`, with its unit, default and the reason for the default.
/// ``keys`` names each one once for every source: a `--config` file, `FOLDTABLE_*` environment
/// variables and flags, read in that order, later ones winning (see
/// ``parse(arguments:environment:readFile:)``). Adding a setting is a property here and an entry there.
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
    /// Accept RFC 7692 permessage-deflate from clients that offer it (browsers and most client
    /// libraries do). Default off: a compressing connection costs CPU for every message sent and
    /// holds a zlib context (about 150 KB resident once it has been sent anything), against
    /// about 7 times fewer bytes on the wire for row data (README, Benchmarks). Worth it on slow
    /// or metered networks with big sections; on a LAN or with thousands of idle members, not.
    public var permessageDeflate = false
    /// Origins (e.g. `https://tables.example.com`) allowed to open WebSockets besides same-origin
    /// pages and clients that send no Origin. Default none (Centrifugo's rule; RFC 6455 §10.2).
    public var allowedOrigins: [String] = []
    /// Origins (e.g. `https://blog.example.com`) whose pages may embed tables: they may load the
    /// web client's module scripts cross-origin (`/embed.js` and what it imports get
    /// `Access-Control-Allow-Origin` for them) and, like ``allowedOrigins``, open WebSockets, but
    /// not call the HTTP API (an embedded table needs only the WebSocket). Default none: no other
    /// site can run the scripts, as before.
    public var embedOrigins: [String] = []
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
    /// flag (its value shows in `ps`) or a config file (often readable by others, and copied).
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
    /// The Redis through which this node shares its sessions with other nodes
    /// (`redis://[[user]:password@]host[:port][/db]`): each session is a stream of change
    /// requests and a snapshot there, and SQLite is not used for sessions. Default empty: every
    /// session is this node's own, in SQLite (or memory).
    public var redis = ""
    /// Instead of ``redis``: a Redis Cluster's seed nodes
    /// (`[redis://[[user]:password@]]host:port[,host:port...]`): each session's keys share one hash
    /// slot, so it lives on one shard, and sessions spread over the shards. Default empty: none.
    public var redisCluster = ""
    /// This node's id among the nodes sharing ``redis``: it qualifies authors
    /// (`<node>.c<connection>`) and says which node answers a request. Default empty: the host name.
    public var nodeID = ""
    /// With ``redis``: milliseconds between two heartbeats of this node's presence (its members'
    /// count and first names per shared session). Default 1,000: members of other nodes appear
    /// and leave within about two of these, for one script per beat for all its sessions.
    public var presenceHeartbeatMs = 1_000
    /// With ``redis``: milliseconds a node's members stay in other nodes' presence after its last
    /// heartbeat. Default 5,000: five beats, so a slow beat or two never blinks anyone out, while
    /// the members of a node that died (kill -9, a lost machine) are gone within five seconds.
    public var presenceExpiryMs = 5_000
    /// SQLite's `synchronous` setting. Default `full`: every commit is synced to disk before its
    /// changes are acknowledged, so an acknowledged change survives a power loss. `normal` syncs
    /// only at checkpoints of the WAL: it survives a crash of the process (kill -9) but may lose
    /// the last acknowledged changes on power loss, in exchange for fewer fsyncs.
    public var synchronous = Synchronous.full
    /// Committed events between two checkpoints of a session's table. Default 1,000: start-up and
    /// reload replay at most this many events, and a checkpoint's cost (the whole table written)
    /// is spread over that many changes. A session's first checkpoint comes up to half of this
    /// early, by an amount its name fixes, so sessions that start together do not all checkpoint
    /// in one group commit.
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
    /// Largest body of an HTTP request to the API, in bytes. Default 4 MiB: what the server
    /// exports with its defaults must import back, and the demo session's export (its 50,000-row
    /// large section, `demoLargeRows`) is about 2.7 MB, so 4 MiB takes it with half as much again
    /// to spare. Since a body is held whole in memory until it is answered, the cap bounds what
    /// one request can make the server hold (with ``maxHTTPRequestsPerIP`` at its default, 256
    /// MiB from one address at worst). A larger `Content-Length` gets 413, naming this setting,
    /// before any of the body is read.
    public var maxHTTPBodyBytes = 4_194_304
    /// HTTP API requests a second from one client address, sustained. Default 50: far above a
    /// script's or a dashboard's pace, while one address cannot keep the server busy with finds
    /// and exports; past it come 429 answers with `Retry-After`.
    public var apiRatePerSec = 50
    /// HTTP API requests one client address may make at once above the rate. Default 100.
    public var apiBurst = 100
    /// HTTP requests from one client address being answered at once (waiting for their answer,
    /// or being written to a client that reads slowly). Default 64: what a busy office behind one
    /// NAT address needs, while one address cannot hold hundreds of answers open; more get 429.
    public var maxHTTPRequestsPerIP = 64
    /// An HTTP answer is dropped when its client takes fewer bytes a second than this, averaged
    /// over ``httpSendWindowSecs``. Default 8,192 (a very slow mobile link still passes): a client
    /// that reads a large export a few bytes at a time would otherwise hold its connection for
    /// hours. 0 = no minimum (an answer that makes no progress for two windows is still dropped).
    public var httpMinSendBytesPerSec = 8_192
    /// Idle seconds before a ping. Default 25: under nginx's 60 s proxy_read_timeout.
    public var pingIntervalSecs = 25
    /// Seconds without any valid traffic (pongs included) before hanging up. Default 35
    /// (ping interval + 10 s for the pong).
    public var hangupSecs = 35
    /// Seconds a queue may make no progress before the connection is closed. Default 30.
    public var sendStallSecs = 30
    /// Seconds over which an HTTP answer's send rate is averaged (see ``httpMinSendBytesPerSec``);
    /// an answer that makes no progress at all for two of these is dropped. Default 30: long enough
    /// that a burst of network trouble does not cut a download, short enough that a stalled client
    /// lets go within a minute.
    public var httpSendWindowSecs = 30
    /// A connection must `join` within this many milliseconds of opening. Default 10,000,
    /// absolute from open: a flood of other messages does not extend it.
    public var joinTimeoutMs = 10_000
    /// Events kept per session for resume. Default 300 (Centrifugo's history size); older
    /// `since` values get a fresh welcome.
    public var historyEvents = 300
    /// Events the stored log keeps per session at or before its newest checkpoint for the
    /// history (`history` message, `GET .../events`), on top of every event after it. Default
    /// 1,000: a working day of a busy table's edits, at about 200 bytes an event about 200 KiB
    /// a session on disk, while every stored session's live log stays small enough for the
    /// journal to keep compact. The larger of this and ``historyEvents`` is kept; a load reads
    /// only the resume window.
    public var historyKeepEvents = 1_000
    /// Addresses (CIDRs) and host names webhooks may reach besides public addresses. Default
    /// none: a session owner chooses a webhook's URL, and must not reach the host's loopback,
    /// its private networks or a cloud metadata address through it.
    public var webhookAllow: [String] = []
    /// Milliseconds a webhook POST may take to connect (TCP and TLS). Default 5,000.
    public var webhookConnectMs = 5_000
    /// Milliseconds a webhook POST may take in all. Default 10,000: a receiver should answer
    /// at once and work later; one that stalls holds its session's next delivery.
    public var webhookTimeoutMs = 10_000
    /// Longest wait between two tries of a failing webhook delivery, in milliseconds. Default
    /// 300,000 (waits double from 1 s up to 5 minutes).
    public var webhookRetryMaxMs = 300_000
    /// Undelivered changes past which a session's webhook is paused. Default 1,000: what the
    /// stored log keeps before a checkpoint (--history-keep-events), so every one is still there
    /// to deliver. Bounded by what the log keeps: see ``webhookBacklogBound``.
    public var webhookBacklogEvents = 1_000

    /// The backlog a webhook may really have: ``webhookBacklogEvents``, but never more than the
    /// larger of --history-events and --history-keep-events (the log must still hold every
    /// undelivered change). A bound, not a refusal: a server that keeps a short history starts
    /// without anyone having to think of webhooks.
    public var webhookBacklogBound: Int { min(webhookBacklogEvents, max(historyEvents, historyKeepEvents)) }
    /// Seconds a webhook may fail every try before it is paused. Default 86,400 (a day).
    public var webhookPauseSecs = 86_400
    /// Connections webhook POSTs may hold open at once, all receivers together. Default 64:
    /// each is a socket (and TLS state) of this process; more transfers wait their turn.
    public var webhookMaxConnections = 64
    /// Sessions on this node that may have a webhook. Default 1,000: each one holds a page of
    /// events and may hold a connection; a PUT beyond is refused (`limit_reached`).
    public var webhookMaxSessions = 1_000
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
    /// Sessions of more than 1,000 members gather one interval longer per 1,000, up to 500 ms, so
    /// a member gets at most about two presence messages a second however large the crowd.
    public var presenceIntervalMs = 100
    /// Members a session lists by name. Default 200: past it, welcomes list 200 and presence
    /// diffs carry the count and a sample, so a room of 10,000 costs no more per member.
    public var presenceListMax = 200
    /// Back malloc's memory with transparent huge pages (glibc's `glibc.malloc.hugetlb=1`,
    /// which `foldtabled` sets by running itself again at start: glibc reads it only then).
    /// Default off. At a thousand busy sessions the working set is hundreds of MB touched at
    /// random, and with 4 KiB pages each such touch may also miss the TLB. With huge pages the
    /// store's steady-state acknowledged changes were 3% higher (median of 20 alternated pairs,
    /// 12 of them favouring huge pages: inside this VM's noise; Tests/bench/HISTORY.md, thirteenth
    /// round), while resident memory under that load grew by 45% (a huge page stays whole while
    /// any of it is in use). A gain that uncertain does not pay for memory that certain by
    /// default. Only the kernel's THP mode `madvise` (Debian's) needs asking: under `always`
    /// every process gets huge pages anyway, under `never` none. No effect either when `GLIBC_TUNABLES` already
    /// names the tunable, or for a process started with privileges (setuid, file capabilities),
    /// for which the loader erases it.
    public var hugePages = false
    /// Sessions kept at once. Default 10,000: bounds memory against clients inventing names.
    public var maxSessions = 10_000
    /// Resident memory, in MiB, past which joins and new sessions are refused (`limit_reached`,
    /// counted in `/metrics`) instead of the process growing until the kernel kills it and every
    /// session with it. Default 0: no budget (set it below the machine's or the container's limit).
    public var memoryBudgetMB = 0
    /// Refused messages in a row before the connection is closed (4500). Default 50.
    public var maxConsecutiveErrors = 50
    /// Rows in the demo session's large section. Default 50,000.
    public var demoLargeRows = 50_000
    /// Sessions made at start from files, `NAME=PATH` each (a `.csv` table, else the JSON
    /// snapshot document), when no session of that name exists yet: the seeds' table from a
    /// plist. Default none. A file that cannot be read or imported stops start-up, naming it.
    public var loadTables: [String] = []
    /// Log verbosity: error, warning, info, debug. Default error (quiet).
    public var logLevel = Log.Level.error
    /// Size limits of every table.
    public var tableLimits = TableLimits()

    public init() {}

    /// SQLite `synchronous` modes offered (see ``synchronous``).
    public enum Synchronous: String, Sendable, Equatable {
        case full, normal
    }

    /// Every key, once, in the order `--help` and README show them. Each entry is the key's
    /// only description: its flag and file name, environment name, accepted values, help line,
    /// and the property it sets; the default is the property's initial value above.
    public static let keys: [ConfigKey] = [
        .text(
            "host", .network, "ADDR", \.host, accepts: "address or name", mayBeEmpty: false, "address to bind; loopback until you choose otherwise"),
        .number("port", .network, \.port, 0...65_535, "TCP port; 0 picks a free one (the start line prints it)"),
        .text("web-root", .network, "DIR", \.webRoot, accepts: "path", mayBeEmpty: true, "the web client's directory (empty: serve no files)"),
        .path(
            "tls-cert", .network, \.tlsCertPath,
            "PEM certificate: the same port speaks HTTPS/WSS; needs --tls-key, and an unreadable file stops start-up"),
        .path("tls-key", .network, \.tlsKeyPath, "PEM private key of --tls-cert"),
        .switch(
            "permessage-deflate", .network, \.permessageDeflate,
            "compress messages for clients that offer permessage-deflate: fewer bytes on the wire, but CPU per message and a zlib context (~150 KB) per such connection"
        ),

        .list(
            "allowed-origins", .access, \.allowedOrigins,
            "extra browser origins allowed to connect (same-origin pages on an accepted Host, and clients without Origin, always are)"),
        .list(
            "embed-origins", .access, \.embedOrigins,
            "origins of sites that may embed tables (`<fold-table>` from `/embed.js`): they may load the web client's scripts (CORS) and connect"),
        .list(
            "public-url", .access, \.publicURLs,
            "URLs people reach the server at (e.g. https://tables.example.com): their host names are accepted in Host, their origins may connect"
        ),
        .list(
            "trusted-proxies", .access, \.trustedProxies,
            "proxy addresses whose X-Forwarded-For names the real client (logs, per-address limits); a proxy on the same machine works as it is"),
        .path(
            "token-secret-file", .access, \.tokenSecretFile,
            "file holding the token secret (at least 32 bytes): every join then needs a signed token; none means open mode"),
        .secret(
            "token-secret", .access, \.tokenSecret, sources: .environment,
            refusal:
                "the token secret is never read from a flag (ps shows flags) or a config file (often readable by others, and copied around): put it alone in a file named by --token-secret-file, or set FOLDTABLE_TOKEN_SECRET",
            "the token secret itself, instead of --token-secret-file (never a flag or a config file)"),
        .switch(
            "open", .access, \.open, "allow open mode (no tokens: anyone who reaches the port may change every session) on a non-loopback --host"),
        .number(
            "token-grace-secs", .access, \.tokenGraceSecs, 1...3_600, unit: "seconds",
            "time a member has to send a fresh token after its token expired (then 4002)"),

        .number("change-rate", .limits, \.changeRatePerSec, 1...1_000_000, unit: "a second", "changes a second per connection (rate_limited beyond)"),
        .number("change-burst", .limits, \.changeBurst, 1...1_000_000, "changes a connection may make at once above --change-rate"),
        .number("max-connections-per-ip", .limits, \.maxConnectionsPerIP, 1...1_000_000, "WebSockets from one client address (HTTP 429 beyond)"),
        .number(
            "max-connections", .limits, \.maxConnections, 0...10_000_000,
            "WebSockets in all, 0 = the open-file limit less 64 (HTTP 503 beyond); the soft open-file limit is raised to the hard one at start"),
        .number(
            "max-message-bytes", .limits, \.maxMessageBytes, 256...16 * 1_048_576, unit: "bytes", "largest incoming message (close 1009 beyond)"),
        .number(
            "max-queue-bytes", .limits, \.maxQueueBytes, 4_096...1_073_741_824, unit: "bytes",
            "outbound bytes queued per client before it is closed as slow (4000)"),
        .number(
            "max-batch-bytes", .limits, \.maxBatchBytes, 1_024...16 * 1_048_576, unit: "bytes",
            "queued messages are joined into one frame up to this size"),
        .number(
            "max-http-body-bytes", .limits, \.maxHTTPBodyBytes, 0...64 * 1_048_576, unit: "bytes",
            "largest HTTP request body the API takes (413 beyond, before any of it is read); the default takes back the demo session's own export (about 2.7 MB); a body is held whole until it is answered, so this bounds what one request costs; 0 = no bodies"
        ),
        .number(
            "api-rate", .limits, \.apiRatePerSec, 1...1_000_000, unit: "a second",
            "HTTP API requests a second per client address (429 with Retry-After beyond)"),
        .number("api-burst", .limits, \.apiBurst, 1...1_000_000, "HTTP API requests a client address may make at once above --api-rate"),
        .number(
            "max-http-requests-per-ip", .limits, \.maxHTTPRequestsPerIP, 1...1_000_000,
            "HTTP requests from one client address being answered at once, slow downloads included (429 beyond)"),
        .number(
            "http-min-send-rate", .limits, \.httpMinSendBytesPerSec, 0...1_073_741_824, unit: "bytes a second",
            "an HTTP answer whose client takes less than this, averaged over --http-send-window-secs, is dropped; 0 = no minimum"),

        .number(
            "ping-interval-secs", .timing, \.pingIntervalSecs, 1...3_600, unit: "seconds",
            "idle seconds before a ping (under nginx's 60 s read timeout)"),
        .number(
            "hangup-secs", .timing, \.hangupSecs, 2...7_200, unit: "seconds",
            "seconds without traffic (pongs included) before hanging up; more than --ping-interval-secs"),
        .number("send-stall-secs", .timing, \.sendStallSecs, 1...3_600, unit: "seconds", "seconds a client's queue may make no progress"),
        .number(
            "http-send-window-secs", .timing, \.httpSendWindowSecs, 1...3_600, unit: "seconds",
            "window over which an HTTP answer's send rate is averaged; an answer without any progress for two windows is dropped"),
        .number(
            "join-timeout-ms", .timing, \.joinTimeoutMs, 100...600_000, unit: "milliseconds",
            "a connection must join within this time, absolute from open (then 4001)"),
        .number(
            "stream-timeout-secs", .timing, \.streamTimeoutSecs, 1...3_600, unit: "seconds",
            "a client must take a section's row stream within this time, else it is closed as slow (changes to a streaming section wait for it)"),

        .switch("memory", .storage, \.memoryOnly, "keep sessions in memory only, for throwaway use: nothing survives a restart"),
        .text(
            "data-dir", .storage, "DIR", \.dataDirectory, accepts: "path", mayBeEmpty: false,
            "directory of the SQLite database foldtable.db (created if only it is missing; unwritable = exit 1 naming it)"),
        .choice(
            "synchronous", .storage, "MODE", \.synchronous, [("full", .full), ("normal", .normal)],
            "full: every commit is synced to disk before its changes are acknowledged (survives power loss); normal: survives a crash of the process, may lose the last acknowledged changes on power loss"
        ),
        .redisURL(
            "redis", .storage, \.redis,
            "share sessions with other foldtabled nodes through this Redis: one stream of changes and one snapshot per session, every node applies them in the same order (see README, More than one machine); empty = sessions are this node's own"
        ),
        .redisNodes(
            "redis-cluster", .storage, \.redisCluster,
            "instead of --redis: share sessions through a Redis Cluster reached at these seed nodes; each session lives on the shard of its hash slot (see README, More than one machine); empty = none"
        ),
        .text(
            "node-id", .storage, "ID", \.nodeID, accepts: "1 to 64 letters, digits, _ or -", mayBeEmpty: true,
            "this node's id among the nodes sharing --redis, unique among them (clients see authors as ID.cN); empty = the host name"),
        .number(
            "presence-heartbeat-ms", .storage, \.presenceHeartbeatMs, 50...60_000, unit: "milliseconds",
            "with --redis: how often this node shares its members of each session (count and first names); other nodes see joins and leaves within about two of these"
        ),
        .number(
            "presence-expiry-ms", .storage, \.presenceExpiryMs, 100...600_000, unit: "milliseconds",
            "with --redis: a node's members leave other nodes' presence this long after its last heartbeat (a node that died); more than --presence-heartbeat-ms"
        ),
        .number(
            "checkpoint-events", .storage, \.checkpointEvents, 1...1_000_000,
            "committed events between two checkpoints of a session's table (bounds replay at load)"),
        .number(
            "idle-evict-secs", .storage, \.idleEvictSecs, 1...604_800, unit: "seconds",
            "a session without members this long is written out and dropped from memory; the next join loads it"),
        .number(
            "history-events", .storage, \.historyEvents, 0...100_000,
            "events kept per session for resume (in memory, and in the stored log before the newest checkpoint)"),
        .number(
            "history-keep-events", .storage, \.historyKeepEvents, 0...1_000_000,
            "events the stored log keeps per session before its newest checkpoint for history (GET .../events, the history message), on top of those after it; with --redis, history is the last --history-events events instead"
        ),
        .list(
            "webhook-allow", .access, \.webhookAllow,
            "CIDRs (127.0.0.1/32, 10.0.0.0/8, fd00::/8) and host names webhooks may reach besides public addresses (default none: no loopback, private, link-local, CGNAT or multicast address)"
        ),
        .number(
            "webhook-connect-ms", .timing, \.webhookConnectMs, 100...60_000, unit: "milliseconds",
            "a webhook POST that has not connected (TCP and TLS) in this time fails and is retried"),
        .number(
            "webhook-timeout-ms", .timing, \.webhookTimeoutMs, 100...300_000, unit: "milliseconds",
            "a webhook POST not answered in this time fails and is retried (a receiver should answer at once)"),
        .number(
            "webhook-retry-max-ms", .timing, \.webhookRetryMaxMs, 100...86_400_000, unit: "milliseconds",
            "longest wait between tries of a failing webhook delivery (waits double from 1 s, with jitter)"),
        .number(
            "webhook-backlog-events", .storage, \.webhookBacklogEvents, 1...1_000_000,
            "undelivered changes past which a session's webhook is paused (bounded by the larger of --history-events and --history-keep-events, so the log still holds each)"
        ),
        .number(
            "webhook-pause-secs", .timing, \.webhookPauseSecs, 1...2_592_000, unit: "seconds",
            "a webhook whose receiver failed every try for this long is paused until an owner resumes it"),
        .number(
            "webhook-max-connections", .limits, \.webhookMaxConnections, 1...10_000,
            "connections webhook POSTs hold open at once, all receivers together (more wait their turn)"),
        .number(
            "webhook-max-sessions", .limits, \.webhookMaxSessions, 1...1_000_000,
            "sessions on this node that may have a webhook (a PUT beyond is refused with limit_reached)"),

        .switch(
            "huge-pages", .limits, \.hugePages,
            "back malloc's memory with transparent huge pages (the server runs itself again with GLIBC_TUNABLES set): fewer TLB misses under heavy load, for more resident memory"
        ),
        .number(
            "memory-budget-mb", .limits, \.memoryBudgetMB, 0...1_048_576, unit: "MiB",
            "resident memory past which joins and new sessions are refused with limit_reached (counted in /metrics); 0 = no budget"),
        .number(
            "max-sessions", .tables, \.maxSessions, 1...10_000_000,
            "sessions held in memory at once (stored ones do not count; a quiet one is evicted to make room)"),
        .number("max-sections", .tables, \.tableLimits.maxSections, 1...100_000, "sections in one table"),
        .number("max-rows-per-section", .tables, \.tableLimits.maxRowsPerSection, 1...10_000_000, "rows in one section"),
        .number(
            "busy-threshold-ms", .tables, \.busyThresholdMs, 0...TableLimits().maxBusyThresholdMs, unit: "milliseconds",
            "work on a section longer than this shows it busy (new sessions and the demo); tables turn it off with showBusyIndicator"),
        .number("welcome-row-budget", .tables, \.welcomeRowBudget, 0...1_000_000, "rows sent inline in a welcome; larger expanded sections stream"),
        .number("row-chunk-rows", .tables, \.rowChunkRows, 1...100_000, "rows per streamed chunk"),
        .number(
            "presence-interval-ms", .tables, \.presenceIntervalMs, 0...60_000, unit: "milliseconds",
            "joins, leaves and renames within it reach members as one presence diff (0: each alone); one interval longer per 1,000 members, up to 500 ms"
        ),
        .number(
            "presence-list-max", .tables, \.presenceListMax, 1...100_000,
            "members a session lists by name; past it welcomes list that many and diffs carry the count and a sample"),
        .number("demo-large-rows", .tables, \.demoLargeRows, 0...1_000_000, "rows of the demo session's large section"),
        .list(
            "load", .tables, \.loadTables,
            "sessions made at start from files, NAME=PATH each (PATH a .csv table or a .json snapshot document), when no session of that name exists yet"
        ),

        .choice(
            "log-level", .logging, "LEVEL", \.logLevel, [("error", .error), ("warning", .warning), ("info", .info), ("debug", .debug)],
            "one key=value line per event on stderr, never message bodies or tokens"),
    ]

    /// Environment variables named `FOLDTABLE_*` that are not keys, and who reads them. Settings
    /// ignore these; any other `FOLDTABLE_*` name is refused, so a misspelt setting cannot
    /// silently leave its default in place. Whoever adds such a variable adds it here.
    public static let otherEnvironmentVariables: [(name: String, readBy: String)] = [
        ("FOLDTABLE_CONFIG", "foldtabled: the config file, when no --config is given"),
        ("FOLDTABLE_HUGE_PAGES_RAN_AGAIN", "foldtabled: set while it runs itself again for --huge-pages, so that it does so once"),
        ("FOLDTABLE_TOKEN", "the terminal client foldtable: its token"),
        ("FOLDTABLE_LWS_LOG", "the terminal client foldtable: libwebsockets' log level"),
        ("FOLDTABLE_BIN", "the test suites: the foldtabled binary"),
        ("FOLDTABLE_ECHO_BIN", "the test suites: the foldtable-echo binary"),
        ("FOLDTABLE_CLIENT_BIN", "the test suites: the foldtable binary"),
        ("FOLDTABLE_CRASH_ROUNDS", "the crash test: its number of rounds"),
        ("FOLDTABLE_CRASH_SEED", "the crash test: the seed to replay"),
        ("FOLDTABLE_SCREENSHOT_OUT", "the browser suite: where README's screenshot goes"),
    ]

    /// The key named `name` (a flag without `--`, or a file's key).
    public static func key(named name: String) -> ConfigKey? { keyIndex[name] }

    private static let keyIndex = Dictionary(uniqueKeysWithValues: keys.map { ($0.name, $0) })

    /// Why a configuration was refused: one line per problem, for the operator.
    public struct Invalid: Error, Equatable, CustomStringConvertible {
        /// Each problem found, in the order found.
        public var problems: [String]
        /// The command line itself could not be read (an unknown flag, a missing value): exit
        /// status 2, where a bad setting is 1.
        public var isUsage: Bool
        public var description: String { problems.joined(separator: "\n") }
        public init(_ description: String, usage: Bool = false) { self.init([description], usage: usage) }
        public init(_ problems: [String], usage: Bool = false) {
            self.problems = problems
            self.isUsage = usage
        }
    }

    /// Checks settings against each other; throws every problem found.
    public func validate() throws(Invalid) {
        let found = problems()
        if !found.isEmpty { throw Invalid(found) }
    }

    /// What ``validate()`` refuses, one line each.
    public func problems() -> [String] {
        var found: [String] = []
        if (tlsCertPath == nil) != (tlsKeyPath == nil) {
            found.append("--tls-cert and --tls-key go together: give both or neither")
        }
        if hangupSecs <= pingIntervalSecs {
            found.append("--hangup-secs (\(hangupSecs)) must be more than --ping-interval-secs (\(pingIntervalSecs))")
        }
        if host.isEmpty { found.append("--host must not be empty") }
        if tokenSecretFile == nil && tokenSecret == nil && !open && !host.isEmpty && !Self.isLoopback(host) {
            found.append(
                "--host \(host) in open mode would let anyone who reaches it change every session: set a token secret (--token-secret-file or FOLDTABLE_TOKEN_SECRET) or pass --open"
            )
        }
        if tokenSecretFile == nil && tokenSecret == nil && !open {
            // A public name in Host means the internet reaches the server through a proxy on
            // loopback: as open to everyone as a public bind, so it takes the same `--open`.
            for url in publicURLs where Self.namesPublicHost(url) {
                found.append(
                    "--public-url \(url) in open mode would let anyone who reaches that name change and delete every session: set a token secret (--token-secret-file or FOLDTABLE_TOKEN_SECRET) or pass --open"
                )
            }
        }
        for item in loadTables {
            let parts = item.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count != 2 || !JoinRequest.isValidSessionName(parts[0]) || parts[1].isEmpty {
                found.append("--load \(item) must be NAME=PATH with NAME of 1 to 64 letters, digits, _ or -")
            }
        }
        if !nodeID.isEmpty && !JoinRequest.isValidSessionName(nodeID) {
            found.append("--node-id \(nodeID) must be 1 to 64 letters, digits, _ or -")
        }
        if presenceExpiryMs <= presenceHeartbeatMs {
            found.append(
                "--presence-expiry-ms (\(presenceExpiryMs)) must be more than --presence-heartbeat-ms (\(presenceHeartbeatMs)): members would blink out between beats"
            )
        }
        if !redis.isEmpty && memoryOnly {
            found.append("--redis and --memory exclude each other: with --redis, sessions live in Redis")
        }
        do {
            _ = try WebhookAddressPolicy(allowing: webhookAllow)
        } catch {
            found.append(error.message)
        }
        if !redisCluster.isEmpty && !redis.isEmpty {
            found.append("--redis and --redis-cluster exclude each other: give one Redis, or the seed nodes of one cluster")
        }
        if !redisCluster.isEmpty && memoryOnly {
            found.append("--redis-cluster and --memory exclude each other: with --redis-cluster, sessions live in Redis")
        }
        // Withdrawn tokens are shared through one Redis only so far: on a cluster a token
        // withdrawn on one node would still open sessions on the others.
        if !redisCluster.isEmpty && (tokenSecretFile != nil || tokenSecret != nil) {
            found.append(
                "--redis-cluster does not take tokens yet: withdrawn tokens are not shared across a cluster's nodes (use --redis for a server with tokens)"
            )
        }
        for url in publicURLs where !(url.hasPrefix("http://") || url.hasPrefix("https://")) || RequestPolicy.authority(ofURL: url) == nil {
            found.append("--public-url \(url) must look like https://tables.example.com")
        }
        for origin in embedOrigins {
            if !Self.isPlainOrigin(origin) {
                found.append("--embed-origins \(origin) must be an origin alone, like https://blog.example.com (no path, no *)")
            } else if let written = Self.originAsBrowsersSendIt(origin) {
                found.append("--embed-origins \(origin) never matches: browsers send it as \(written) (drop a default or empty port)")
            }
        }
        for origin in allowedOrigins where origin != "*" {
            if let written = Self.originAsBrowsersSendIt(origin) {
                found.append("--allowed-origins \(origin) never matches: browsers send it as \(written) (drop a default or empty port)")
            }
        }
        return found
    }

    /// How a browser writes `origin` in its Origin header when that differs from `origin` only by
    /// its port, else nil: browsers leave out the scheme's default port (80 for http, 443 for
    /// https) and never send an empty one, so `https://blog.example.com:443` or
    /// `https://blog.example.com:` as written would match no request at all.
    static func originAsBrowsersSendIt(_ origin: String) -> String? {
        let defaultPort: Substring
        if origin.hasPrefix("https://") {
            defaultPort = "443"
        } else if origin.hasPrefix("http://") {
            defaultPort = "80"
        } else {
            return nil
        }
        guard let authority = RequestPolicy.authority(ofURL: origin) else { return nil }
        // The port follows the last colon, past an IPv6 literal's closing bracket if there is one.
        let hostEnd = authority.lastIndex(of: "]") ?? authority.startIndex
        guard let colon = authority[hostEnd...].lastIndex(of: ":") else { return nil }
        if authority.hasPrefix("["), !authority[..<colon].hasSuffix("]") { return nil }
        if !authority.hasPrefix("["), authority[..<colon].contains(":") { return nil }  // a bare IPv6 literal
        var port = authority[authority.index(after: colon)...]
        // Browsers also write the port as a number: "0443" goes out as 443, then as nothing.
        while port.count > 1, port.first == "0" { port = port.dropFirst() }
        guard port.isEmpty || port == defaultPort else { return nil }
        let scheme = origin.hasPrefix("https://") ? "https://" : "http://"
        return scheme + authority[..<colon]
    }

    /// Whether `text` is `http(s)://authority` and nothing more: what a browser sends as Origin.
    static func isPlainOrigin(_ text: String) -> Bool {
        guard text.hasPrefix("http://") || text.hasPrefix("https://"), let authority = RequestPolicy.authority(ofURL: text) else { return false }
        let scheme = text.hasPrefix("https://") ? "https://" : "http://"
        return text.utf8.count == scheme.utf8.count + authority.utf8.count && !authority.contains("*") && !authority.contains("@")
    }

    /// Whether `url`'s host is a name other than `localhost` (not an IP literal): one people on
    /// other machines may be sent to. A URL that is not well formed is reported on its own.
    static func namesPublicHost(_ url: String) -> Bool {
        guard let authority = RequestPolicy.authority(ofURL: url) else { return false }
        let name = RequestPolicy.hostPart(of: authority)
        return !name.isEmpty && name != "localhost" && !RequestPolicy.isIPLiteral(name)
    }

    /// Whether `host` binds loopback only.
    public static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}
