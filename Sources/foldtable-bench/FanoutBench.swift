// foldtable-bench fanout: S sessions (rooms) of WebSocket clients, N in all, one author in
// each keeping K changes in flight; counts deliveries at every client and the latency from the
// author's send to each receipt. Runs against foldtabled (`--kind foldtable`), against
// libwebsockets-test-server's broadcast lws-mirror-protocol (`--kind mirror`), or against a
// plain broadcast server (`--kind broadcast`: Tests/bench/peers, Node `ws` and Python
// `websockets`): the peers measured in the same run.
//
//   foldtable-bench fanout --url ws://127.0.0.1:PORT/ws --kind foldtable|mirror|broadcast
//       [--clients 1000] [--sessions 1] [--in-flight 20] [--seconds 10] [--warmup 1]
//       [--payload-bytes 140] [--server-pid PID] [--redis HOST:PORT [--redis-pid PID]]
//
// Cross-node runs: `--url` given once per node spreads the clients over them (client n connects
// to URL n % U), `--server-pid` once per node sums their CPU (and prints each), and `--redis`
// reads what Redis spends per appended change (RedisStats.swift). Presence is then complete for
// a client when it counts everyone in its session or everyone of its session on its own node.
//
// Client n is in session n % S; clients 0..<S are the authors (and members like every other).
// An author sends a new change each time one of its own comes back to it, so exactly K are in
// flight per author; at the end it stops sending and waits (bounded) for the last ones to reach
// everybody. The session is `<session>-<s>` for foldtabled, the URL path `/<session>-<s>` for a
// broadcast peer and `?mirror=<session>-<s>` for the mirror (at most 10 of them: its limit).
//   foldtable: `{"type":"toggle","section":"s1","id":"<n>"}` on a section of two rows the
//              author adds first: expand, collapse, expand, ...; every one a real ordered event
//              broadcast to all members (who hold the rows already, so no rows follow).
//   peers:     `n:<n>` padded to --payload-bytes (the size of foldtabled's event), broadcast as is.
//
// With `--expand SECTION` (foldtable) the load is a large expansion instead: once everyone has
// joined, client 0 toggles SECTION (collapsed) and the run ends when every client holds the final
// chunk of its rows; per-client completion times give p50/p99. A peer gets the same bytes
// (`--expand-messages M --expand-bytes B`, B in all, as foldtabled sent them to one client) from
// the author at once, and a client is done when B bytes have reached it.
//
// With `--every-client-authors` (foldtable only) the load is acknowledged changes instead of
// fan-out: client n joins session `<session>-<n % S>` (`--sessions S`, default one per client),
// adds a section of its own with two rows, keeps K toggles of it in flight (expand, collapse,
// expand, ...) and counts its acks; throughput is acks per second and latency is from send to
// ack. This is the load a store's commit path feels. Members also receive the events of the
// other authors of their session.
import Glibc

enum FanoutKind: String {
    case foldtable
    case mirror
    /// A server that sends every message to every client of the room named by the URL path.
    case broadcast
}

struct FanoutOptions {
    /// Where clients connect: client n to `endpoints[n % endpoints.count]`.
    var endpoints: [(host: String, port: UInt16, path: String)] = []
    var kind = FanoutKind.foldtable
    var clients = 1000
    var inFlight = 20
    var seconds = 10.0
    var warmup = 1.0
    var connectBatch = 100
    var payloadBytes = 140
    /// Every server process (one per node); the first is the one whose memory is reported.
    var serverPIDs: [Int32] = []
    var serverPID: Int32? { serverPIDs.first }
    /// --redis: the Redis whose costs per change are reported, and its process.
    var redisHost: String?
    var redisPort: UInt16 = 0
    var redisPID: Int32?
    var session = "bench"
    /// Every client an author counting acks (see the file comment), in `sessions` sessions
    /// (client n in session n % sessions; 0 = a session per client).
    var everyClientAuthors = false
    var sessions = 0
    /// --expand: the section to expand (foldtable); the bytes and messages a peer relays instead.
    var expandSection: String?
    var expandBytes = 0
    var expandMessages = 0
    var expandTimeout = 60.0
    /// --idle: seconds every client stays joined and silent (answering pings) before the
    /// changes start: what members who only watch cost the server.
    var idleSeconds = 0.0
    /// --join-over: seconds over which the clients' connects are spread evenly (0: all at once,
    /// `connectBatch` at a time), as members of a real session arrive.
    var joinOverSeconds = 0.0
    /// --crowd: one process of a crowd run (CrowdBench.swift) and its settings.
    var crowd: CrowdRole?
    var toggles = 10
    var toggleInterval = 1.0
    var reconnectEndpoints: [(host: String, port: UInt16, path: String)] = []
    var stopFile: String?
    var recordFile: String?
    var crowdTimeout = 600.0
    /// --crowd-members: the session's members over every node; a watcher's client sees everyone
    /// when a presence diff counts at least this many.
    var crowdMembers = Int.max

    var subprotocol: String? { kind == .mirror ? "lws-mirror-protocol" : nil }

    static let usage = """
        usage: foldtable-bench fanout --url ws://127.0.0.1:PORT/PATH --kind foldtable|mirror|broadcast
                 [--clients N (1000)] [--in-flight K (20)] [--seconds S (10)] [--warmup S (1)]
                 [--connect-batch N (100)] [--payload-bytes B (140, peers)] [--server-pid PID]
                 (--url and --server-pid once per node of a cluster) [--redis HOST:PORT] [--redis-pid PID]
                 [--sessions N (fan-out: 1, one author each; acks: one per client)]
                 [--every-client-authors (foldtable: acks per second)]
                 [--expand SECTION (foldtable) | --expand-bytes B --expand-messages M (peers)]
                 [--expand-timeout S (60)] [--idle S (0: after the joins, S seconds of silence)]
                 [--join-over S (0: connects spread evenly over S seconds)]
                 [--crowd author|watcher (CrowdBench.swift) [--toggles N (10)] [--toggle-interval S (1)]
                  [--reconnect-url URL (repeatable)] [--stop-file PATH] [--record PATH] [--crowd-timeout S (600)]
                  [--crowd-members N (watcher: the session's members on every node)]]
        """

    static func parse(_ arguments: [String]) -> FanoutOptions {
        var options = FanoutOptions()
        var sawURL = false
        var index = 0
        func value() -> String {
            guard index + 1 < arguments.count else { fail("\(arguments[index]) needs a value\n\(usage)") }
            index += 1
            return arguments[index]
        }
        func number(_ text: String) -> Int {
            guard let parsed = Int(text), parsed > 0 else { fail("not a positive number: \(text)") }
            return parsed
        }
        func seconds(_ text: String) -> Double {
            guard let parsed = Double(text), parsed >= 0 else { fail("not a number of seconds: \(text)") }
            return parsed
        }
        while index < arguments.count {
            switch arguments[index] {
            case "--url":
                options.setURL(value())
                sawURL = true
            case "--kind":
                let text = value()
                guard let kind = FanoutKind(rawValue: text) else { fail("--kind must be foldtable, mirror or broadcast, not \(text)") }
                options.kind = kind
            case "--clients": options.clients = number(value())
            case "--in-flight": options.inFlight = number(value())
            case "--seconds": options.seconds = seconds(value())
            case "--warmup": options.warmup = seconds(value())
            case "--connect-batch": options.connectBatch = number(value())
            case "--payload-bytes": options.payloadBytes = max(16, number(value()))
            case "--server-pid": options.serverPIDs.append(Int32(number(value())))
            case "--redis":
                let text = value()
                guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else {
                    fail("--redis must be HOST:PORT, not \(text)")
                }
                options.redisHost = String(text[..<colon])
                options.redisPort = port
            case "--redis-pid": options.redisPID = Int32(number(value()))
            case "--session": options.session = value()
            case "--every-client-authors": options.everyClientAuthors = true
            case "--sessions": options.sessions = number(value())
            case "--expand": options.expandSection = value()
            case "--expand-bytes": options.expandBytes = number(value())
            case "--expand-messages": options.expandMessages = number(value())
            case "--expand-timeout": options.expandTimeout = seconds(value())
            case "--idle": options.idleSeconds = seconds(value())
            case "--join-over": options.joinOverSeconds = seconds(value())
            case "--crowd":
                let text = value()
                guard let role = CrowdRole(rawValue: text) else { fail("--crowd must be author or watcher, not \(text)") }
                options.crowd = role
            case "--toggles": options.toggles = number(value())
            case "--toggle-interval": options.toggleInterval = seconds(value())
            case "--reconnect-url":
                var other = FanoutOptions()
                other.setURL(value())
                options.reconnectEndpoints += other.endpoints
            case "--stop-file": options.stopFile = value()
            case "--record": options.recordFile = value()
            case "--crowd-timeout": options.crowdTimeout = seconds(value())
            case "--crowd-members": options.crowdMembers = number(value())
            default: fail("unknown argument \(arguments[index])\n\(usage)")
            }
            index += 1
        }
        if !sawURL { fail("--url is required\n\(usage)") }
        if options.seconds <= 0 { fail("--seconds must be more than 0") }
        if options.everyClientAuthors && options.kind != .foldtable { fail("--every-client-authors needs --kind foldtable") }
        if options.crowd != nil && (options.kind != .foldtable || options.everyClientAuthors || options.sessions > 1 || options.expandSection != nil)
        {
            fail("--crowd is one foldtable session, without --every-client-authors, --sessions or --expand")
        }
        if !options.everyClientAuthors && options.sessions > 0 && options.clients % options.sessions != 0 {
            fail("--clients must be a multiple of --sessions (every session the same size)")
        }
        if options.kind == .mirror && !options.everyClientAuthors && options.sessions > 10 {
            fail("the mirror has at most 10 instances (MAX_MIRROR_INSTANCES): --sessions \(options.sessions) cannot run against it")
        }
        if options.kind == .foldtable ? options.expandBytes > 0 : options.expandSection != nil {
            fail("--expand is for foldtable, --expand-bytes and --expand-messages for the peers")
        }
        if options.kind != .foldtable && (options.expandBytes > 0) != (options.expandMessages > 0) {
            fail("--expand-bytes and --expand-messages go together")
        }
        return options
    }

    /// `ws://HOST:PORT/PATH`, HOST an IPv4 literal.
    mutating func setURL(_ url: String) {
        guard url.hasPrefix("ws://") else { fail("--url must start with ws:// (\(url))") }
        let rest = url.dropFirst(5)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[..<slash]
        guard let colon = authority.lastIndex(of: ":"), let parsed = UInt16(authority[authority.index(after: colon)...]) else {
            fail("--url needs an explicit port (\(url))")
        }
        endpoints.append((String(authority[..<colon]), parsed, slash == rest.endIndex ? "/" : String(rest[slash...])))
    }

    /// The server client `index` connects to.
    func endpoint(_ index: Int) -> (host: String, port: UInt16, path: String) { endpoints[index % endpoints.count] }
}

/// Latency histogram: 1 µs buckets below 100 ms, then 1 ms buckets up to 100 s.
struct LatencyHistogram {
    static let fineBuckets = 100_000
    static let coarseBuckets = 100_000
    let counts: UnsafeMutablePointer<Int>
    var total = 0

    init() {
        counts = .allocate(capacity: Self.fineBuckets + Self.coarseBuckets)
        counts.initialize(repeating: 0, count: Self.fineBuckets + Self.coarseBuckets)
    }

    @inline(__always)
    mutating func record(nanoseconds: UInt64) {
        let micros = Int(nanoseconds / 1_000)
        let bucket =
            micros < Self.fineBuckets
            ? micros : Self.fineBuckets + min(micros / 1_000 - Self.fineBuckets / 1_000, Self.coarseBuckets - 1)
        counts[bucket] += 1
        total += 1
    }

    /// The latency (ms) below which `fraction` of the samples fall.
    func percentileMilliseconds(_ fraction: Double) -> Double {
        guard total > 0 else { return .nan }
        let rank = max(1, Int((fraction * Double(total)).rounded(.up)))
        var seen = 0
        for bucket in 0..<(Self.fineBuckets + Self.coarseBuckets) {
            seen += counts[bucket]
            if seen >= rank {
                if bucket < Self.fineBuckets { return (Double(bucket) + 0.5) / 1_000 }
                return Double(bucket - Self.fineBuckets + Self.fineBuckets / 1_000) + 0.5
            }
        }
        return .nan
    }
}

/// CPU seconds (user + system) a process has used, from /proc/PID/stat.
func processCPUSeconds(_ pid: Int32) -> Double? {
    let fd = open("/proc/\(pid)/stat", O_RDONLY)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 4096)
    let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
    guard count > 0 else { return nil }
    let text = String(decoding: buffer[0..<count], as: UTF8.self)
    guard let close = text.lastIndex(of: ")") else { return nil }
    // After "pid (comm) ": state is field 3, utime field 14, stime field 15.
    let fields = text[text.index(after: close)...].split(separator: " ")
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// Resident and peak resident memory of a process in KiB (VmRSS and VmHWM of
/// /proc/PID/status); nil when the process is gone.
func residentKiB(_ pid: Int32) -> (now: Int, peak: Int)? {
    let fd = open("/proc/\(pid)/status", O_RDONLY)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 8192)
    let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
    guard count > 0 else { return nil }
    var now: Int?
    var peak: Int?
    for line in String(decoding: buffer[0..<count], as: UTF8.self).split(separator: "\n") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true).flatMap { $0.split(separator: "\t") }
        guard fields.count >= 2, let value = Int(fields[1]) else { continue }
        if fields[0] == "VmRSS:" { now = value }
        if fields[0] == "VmHWM:" { peak = value }
    }
    guard let now, let peak else { return nil }
    return (now, peak)
}

/// On-CPU and run-queue-wait seconds of every thread of a process, from
/// /proc/PID/task/*/schedstat; nil where the kernel has no schedstat. The wait shows when the
/// process was runnable but another one had its CPU (this machine may be shared).
func schedulerSeconds(_ pid: Int32) -> (cpu: Double, wait: Double)? {
    guard let directory = opendir("/proc/\(pid)/task") else { return nil }
    defer { closedir(directory) }
    var cpu = 0.0
    var wait = 0.0
    var found = false
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        guard let first = name.utf8.first, first >= 0x30 && first <= 0x39 else { continue }
        let fd = open("/proc/\(pid)/task/\(name)/schedstat", O_RDONLY)
        guard fd >= 0 else { continue }
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard count > 0 else { continue }
        let fields = String(decoding: buffer[0..<count], as: UTF8.self).split(separator: " ")
        guard fields.count >= 2, let running = Double(fields[0]), let waiting = Double(fields[1]) else { continue }
        cpu += running / 1e9
        wait += waiting / 1e9
        found = true
    }
    return found ? (cpu, wait) : nil
}

func ownCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    let user = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
    let system = Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    return user + system
}

/// `value` with `digits` decimals, without Foundation.
func fixed(_ value: Double, _ digits: Int) -> String {
    guard value.isFinite else { return "nan" }
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let scaled = Int((abs(value) * scale).rounded())
    let whole = scaled / Int(scale)
    var fraction = String(scaled % Int(scale))
    while fraction.count < digits { fraction = "0" + fraction }
    return (value < 0 ? "-" : "") + String(whole) + (digits > 0 ? "." + fraction : "")
}

struct FanoutLoad {
    let options: FanoutOptions
    let connections: UnsafeMutablePointer<Connection>
    let epoll: Epoll
    var expectedAccept: [String]
    var maskState: UInt64 = 0x9E37_79B9_7F4A_7C15

    // Connection bookkeeping.
    var handshaking = 0
    var opened = 0
    var closedCount = 0
    var protocolErrors = 0
    var pingsAnswered = 0
    var lastActivity: UInt64 = 0

    // Setup progress.
    var welcomed = 0
    var presenceSeen = 0
    /// Clients a presence diff told that the whole room is there (see `seesEveryone`).
    var seeingEveryone = 0
    var setupSeen = 0
    var serverErrors = 0

    // The authors' changes: send times indexed by change number (numbered across all authors),
    // and per author (client a < S) a ring of the K numbers in flight, oldest first.
    let sendTimes: UnsafeMutablePointer<UInt64>
    let sendCapacity = 1 << 22
    var sent = 0
    let inFlightRing: UnsafeMutablePointer<Int>
    let ringHead: UnsafeMutablePointer<Int>
    let ringCount: UnsafeMutablePointer<Int>
    var outstanding = 0
    var lostChanges = 0
    var sending = false
    /// Scratch space for one change message.
    let scratch: UnsafeMutablePointer<UInt8>

    // --every-client-authors: per client, changes sent and acknowledged, and the send times of
    // the ones in flight (a ring of K per client).
    var authorSent: [Int] = []
    var authorAcked: [Int] = []
    var ackSendTimes: UnsafeMutablePointer<UInt64>
    var windowAcks = 0
    var acks = 0

    // Measurement: deliveries received in [windowStart, windowEnd] count for throughput; latency
    // counts every delivery received from windowStart on (including the final drain).
    var windowStart = UInt64.max
    var windowEnd = UInt64.max
    var deliveries = 0
    var windowDeliveries = 0
    var windowChanges = 0
    var deliveredBytes = 0
    var unexpected = 0
    var histogram = LatencyHistogram()

    // --expand: when the author sent it, clients that hold every row, and what client 0 got.
    var expandStart: UInt64 = 0
    var expandDone = 0
    var expandLastDone: UInt64 = 0
    var expandMessagesDelivered = 0
    var expandBytesDelivered = 0
    var expandFirstClientMessages = 0
    var expandFirstClientBytes = 0
    let expandPrefix: [UInt8]

    /// --crowd: deliveries by send time, lost clients and their reconnects.
    var crowd = CrowdState()

    init(options: FanoutOptions) {
        self.options = options
        Self.raiseFileLimit(to: options.clients + 256)
        connections = .allocate(capacity: options.clients)
        for index in 0..<options.clients {
            (connections + index).initialize(to: Connection(inputCapacity: 64 * 1024, outputCapacity: 1024))
        }
        epoll = Epoll(capacity: 1024)
        expectedAccept = Array(repeating: "", count: options.clients)
        sendTimes = .allocate(capacity: sendCapacity)
        sendTimes.initialize(repeating: 0, count: sendCapacity)
        scratch = .allocate(capacity: max(256, options.payloadBytes + 64))
        let ring = options.everyClientAuthors ? options.clients * options.inFlight : 1
        ackSendTimes = .allocate(capacity: ring)
        ackSendTimes.initialize(repeating: 0, count: ring)
        if options.everyClientAuthors {
            authorSent = Array(repeating: 0, count: options.clients)
            authorAcked = Array(repeating: 0, count: options.clients)
        }
        let authors = options.everyClientAuthors ? 1 : max(1, min(options.sessions, options.clients))
        inFlightRing = .allocate(capacity: authors * options.inFlight)
        inFlightRing.initialize(repeating: 0, count: authors * options.inFlight)
        ringHead = .allocate(capacity: authors)
        ringHead.initialize(repeating: 0, count: authors)
        ringCount = .allocate(capacity: authors)
        ringCount.initialize(repeating: 0, count: authors)
        expandPrefix = Array(#"{"type":"rows","section":"\#(options.expandSection ?? "")","#.utf8)
    }

    var clients: Int { options.clients }
    /// Sessions: acks, one per client unless --sessions; fan-out, 1 unless --sessions.
    var sessionCount: Int {
        if options.everyClientAuthors { return options.sessions > 0 ? min(options.sessions, options.clients) : options.clients }
        return max(1, min(options.sessions, options.clients))
    }
    /// Members of each fan-out session (--clients is a multiple of --sessions).
    var sessionSize: Int { clients / sessionCount }
    var expanding: Bool { options.expandSection != nil || options.expandBytes > 0 }

    /// Members of client `index`'s session connected to its node (all of them with one URL):
    /// what a node's own presence counts while presence is per node.
    func membersOnNode(_ index: Int) -> Int {
        let nodes = options.endpoints.count
        guard nodes > 1 else { return sessionSize }
        // Clients j with j % S == index % S and j % U == index % U: one residue modulo lcm(S, U).
        let s = sessionCount
        var a = s
        var b = nodes
        while b != 0 { (a, b) = (b, a % b) }
        let period = s / a * nodes
        let first = (0..<period).first { $0 % s == index % s && $0 % nodes == index % nodes } ?? 0
        return first < clients ? (clients - 1 - first) / period + 1 : 0
    }

    /// The session (foldtable) or room (peers) of client `index`.
    func sessionName(_ index: Int) -> String {
        if options.everyClientAuthors || sessionCount > 1 { return "\(options.session)-\(index % sessionCount)" }
        return options.session
    }

    /// The upgrade request's path: a peer's room is its path, a mirror instance its `mirror` argument.
    func requestPath(_ index: Int) -> String {
        let path = options.endpoint(index).path
        guard sessionCount > 1 else { return path }
        switch options.kind {
        case .foldtable: return path
        case .mirror: return path + (path.contains("?") ? "&" : "?") + "mirror=" + sessionName(index)
        case .broadcast: return "/" + sessionName(index)
        }
    }

    // MARK: messages

    /// Called once a connection has completed its upgrade.
    mutating func didOpen(_ index: Int) {
        guard options.kind == .foldtable else { return }
        let session = sessionName(index)
        var join = Array(#"{"type":"join","session":"\#(session)","name":"c\#(index)","create":true}"#.utf8)
        join.withUnsafeMutableBufferPointer {
            queueFrame(index, opcode: 0x1, payload: $0.baseAddress!, count: $0.count)  // safe: a join is never empty
        }
        flush(index)
    }

    @inline(__always)
    mutating func onMessage(_ index: Int, _ payload: UnsafeMutablePointer<UInt8>, _ count: Int, now: UInt64) {
        switch options.kind {
        case .foldtable: onFoldtableMessage(index, payload, count, now: now)
        case .mirror, .broadcast: onPeerMessage(index, payload, count, now: now)
        }
    }

    /// One foldtabled message: one or more JSON objects, one per line, each starting with
    /// `{"type":"` (the server's encoder writes `type` first). Only events are looked into.
    @inline(__always)
    private mutating func onFoldtableMessage(_ index: Int, _ payload: UnsafeMutablePointer<UInt8>, _ count: Int, now: UInt64) {
        var position = 0
        while position < count {
            let line = payload + position
            var length = count - position
            if let newline = memchr(line, 10, length) {
                length = newline.assumingMemoryBound(to: UInt8.self) - line
            }
            position += length + 1
            guard length > 16, line[0] == 0x7B, line[8] == 0x22 else {  // {"type":"
                if length > 0 && unexpected == 0 {
                    printError(
                        "client \(index): unexpected: \(String(decoding: UnsafeBufferPointer(start: line, count: min(length, 120)), as: UTF8.self))")
                }
                if length > 0 { unexpected += 1 }
                continue
            }
            switch line[9] {
            case UInt8(ascii: "e") where line[10] == UInt8(ascii: "v"):  // event
                deliveredBytes += length + 1
                if options.everyClientAuthors {
                    deliveries += 1
                } else {
                    let number = changeNumber(line, length)
                    if number == -2 && unexpected == 0 {
                        printError(
                            "client \(index): an event without an id: \(String(decoding: UnsafeBufferPointer(start: line, count: min(length, 200)), as: UTF8.self))"
                        )
                    }
                    onDelivery(index, number, now: now)
                }
            case UInt8(ascii: "a"):  // ack: the author's own event is what completes a change
                // {"type":"ack","id":"<n>",...
                if options.everyClientAuthors && length > 20 { onAck(index, digits(line + 20, length - 20, terminator: nil), now: now) }
            case UInt8(ascii: "p"):
                // {"type":"presence","count":N,...: one diff per interval, N = members now.
                presenceSeen += 1
                if length > 27, !connections[index].seesEveryone,
                    case let count = digits(line + 27, length - 27, terminator: 0x2C),
                    options.crowd == nil ? count == sessionSize || count == membersOnNode(index) : count >= options.crowdMembers
                {
                    connections[index].seesEveryone = true
                    seeingEveryone += 1
                }
            case UInt8(ascii: "r") where line[10] == UInt8(ascii: "o"):  // rows
                // A crowd member that joins again while the section is expanded gets its rows.
                if expanding { onExpandRows(index, line, length, now: now) } else if options.crowd == nil { unexpected += 1 }
            case UInt8(ascii: "b") where line[10] == UInt8(ascii: "u"):  // busy (a large expansion)
                break
            case UInt8(ascii: "w"):
                if !connections[index].welcomed {
                    connections[index].welcomed = true
                    welcomed += 1
                    if options.crowd != nil { crowdWelcomed(index, now: now) }
                }
            case UInt8(ascii: "e"):
                if serverErrors == 0 {
                    printError("client \(index) got: \(String(decoding: UnsafeBufferPointer(start: line, count: length), as: UTF8.self))")
                }
                serverErrors += 1
            default:
                if unexpected == 0 {
                    printError(
                        "client \(index): unexpected: \(String(decoding: UnsafeBufferPointer(start: line, count: min(length, 120)), as: UTF8.self))")
                }
                unexpected += 1
            }
        }
    }

    /// The number in an event's `"id":"<n>"`, -1 when the id is not a number (the setup change),
    /// -2 when there is no id.
    @inline(__always)
    private func changeNumber(_ line: UnsafeMutablePointer<UInt8>, _ length: Int) -> Int {
        // Fast path: the encoder writes `"by":{...}` (flat) right before `"id"`, so the first
        // '}' (found with SIMD memchr) is followed by `,"id":"`.
        if let brace = memchr(line + 15, 0x7D, length - 15) {
            let after = brace.assumingMemoryBound(to: UInt8.self) + 1
            let rest = length - (after - line)
            if rest > 7 && after[0] == 0x2C && after[1] == 0x22 && after[2] == 0x69 && after[3] == 0x64 && after[4] == 0x22
                && after[5] == 0x3A && after[6] == 0x22
            {
                return digits(after + 7, rest - 7, terminator: 0x22)
            }
        }
        // Any other field order: scan.
        var position = 15
        while position + 6 < length {
            if line[position] == 0x22 && line[position + 1] == 0x69 && line[position + 2] == 0x64 && line[position + 3] == 0x22
                && line[position + 4] == 0x3A && line[position + 5] == 0x22
            {
                return digits(line + position + 6, length - position - 6, terminator: 0x22)
            }
            position += 1
        }
        return -2
    }

    @inline(__always)
    private func digits(_ text: UnsafeMutablePointer<UInt8>, _ length: Int, terminator: UInt8?) -> Int {
        var value = 0
        var position = 0
        while position < length {
            let byte = text[position]
            if byte >= 0x30 && byte <= 0x39 {
                value = value * 10 + Int(byte - 0x30)
            } else {
                return position > 0 && (terminator == nil || byte == terminator) ? value : -1
            }
            position += 1
        }
        return position > 0 && terminator == nil ? value : -1
    }

    /// A `rows` message of the expanded section: done at its final chunk.
    private mutating func onExpandRows(_ index: Int, _ line: UnsafeMutablePointer<UInt8>, _ length: Int, now: UInt64) {
        guard length > expandPrefix.count, memcmp(line, expandPrefix, expandPrefix.count) == 0 else {
            unexpected += 1
            return
        }
        expandMessagesDelivered += 1
        if index == 0 {
            expandFirstClientMessages += 1
            expandFirstClientBytes += length
        }
        let final = Array(#""final":true}"#.utf8)
        if length > final.count, memcmp(line + length - final.count, final, final.count) == 0, !connections[index].expandComplete {
            completeExpansion(index, now: now)
        }
    }

    private mutating func completeExpansion(_ index: Int, now: UInt64) {
        connections[index].expandComplete = true
        expandDone += 1
        expandLastDone = now
        histogram.record(nanoseconds: now &- expandStart)
    }

    /// One peer message: `n:<n>` then padding, or the setup message; during --expand, bytes.
    @inline(__always)
    private mutating func onPeerMessage(_ index: Int, _ payload: UnsafeMutablePointer<UInt8>, _ count: Int, now: UInt64) {
        if expanding {
            // Counted in whole messages of the author's size: the mirror relays a large message
            // in pieces of its receive buffer, each one a message of its own.
            expandBytesDelivered += count
            if index == 0 {
                expandFirstClientMessages += 1
                expandFirstClientBytes += count
            }
            connections[index].expandReceived += count
            if !connections[index].expandComplete && connections[index].expandReceived >= expandPeerTotalBytes {
                completeExpansion(index, now: now)
            }
            return
        }
        guard count > 2, payload[0] == UInt8(ascii: "n"), payload[1] == UInt8(ascii: ":") else {
            unexpected += 1
            return
        }
        deliveredBytes += count
        onDelivery(index, digits(payload + 2, count - 2, terminator: UInt8(ascii: " ")), now: now)
    }

    @inline(__always)
    private mutating func onDelivery(_ index: Int, _ number: Int, now: UInt64) {
        if options.crowd != nil { return crowdDelivery(index, number, now: now) }
        guard number >= 0, number < sent else {
            if number == -1 { setupSeen += 1 } else { unexpected += 1 }
            return
        }
        deliveries += 1
        if now >= windowStart {
            if now <= windowEnd { windowDeliveries += 1 }
            histogram.record(nanoseconds: now &- sendTimes[number])
        }
        if index < sessionCount {
            // An author's own change came back: it is no longer in flight. Every server delivers
            // in order, so any older one still in the ring was lost.
            let ring = inFlightRing + index * options.inFlight
            guard ringCount[index] > 0, ring[ringHead[index]] <= number else { return }
            while ringCount[index] > 0 {
                let oldest = ring[ringHead[index]]
                ringHead[index] = (ringHead[index] + 1) % options.inFlight
                ringCount[index] -= 1
                outstanding -= 1
                if oldest == number { break }
                lostChanges += 1
            }
            if now >= windowStart && now <= windowEnd { windowChanges += 1 }
            refill(index, now: now)
        }
    }

    /// --every-client-authors: client `index` got the ack of its change `number`.
    @inline(__always)
    private mutating func onAck(_ index: Int, _ number: Int, now: UInt64) {
        guard number >= 0 else {
            setupSeen += 1
            return
        }
        acks += 1
        authorAcked[index] += 1
        if now >= windowStart {
            if now <= windowEnd { windowAcks += 1 }
            histogram.record(nanoseconds: now &- ackSendTimes[index * options.inFlight + number % options.inFlight])
        }
        refillAuthor(index, now: now)
    }

    private mutating func refillAuthor(_ index: Int, now: UInt64) {
        guard sending, now < windowEnd else { return }
        while authorSent[index] - authorAcked[index] < options.inFlight {
            let number = authorSent[index]
            authorSent[index] += 1
            // A real toggle: every other change expands the section, the rest collapse it.
            var length = 0
            for byte in #"{"type":"toggle","section":"s"#.utf8 {
                scratch[length] = byte
                length += 1
            }
            for byte in String(index).utf8 {
                scratch[length] = byte
                length += 1
            }
            for byte in #"","id":""#.utf8 {
                scratch[length] = byte
                length += 1
            }
            // Ids are unique within a session: the change number, then the author's index.
            for byte in "\(number)x\(index)".utf8 {
                scratch[length] = byte
                length += 1
            }
            scratch[length] = 0x22
            scratch[length + 1] = 0x7D
            length += 2
            ackSendTimes[index * options.inFlight + number % options.inFlight] = monotonicNanos()
            queueFrame(index, opcode: 0x1, payload: scratch, count: length)
        }
    }

    /// Queues changes on author `author` until K are in flight (sent by the caller's flush).
    private mutating func refill(_ author: Int, now: UInt64) {
        guard sending, now < windowEnd else { return }
        let ring = inFlightRing + author * options.inFlight
        while ringCount[author] < options.inFlight && sent < sendCapacity {
            ring[(ringHead[author] + ringCount[author]) % options.inFlight] = sent
            ringCount[author] += 1
            outstanding += 1
            queueChange(author, sent)
            sent += 1
        }
    }

    private mutating func queueChange(_ author: Int, _ number: Int) {
        var length = 0
        func put(_ text: StaticString) {
            memcpy(scratch + length, text.utf8Start, text.utf8CodeUnitCount)
            length += text.utf8CodeUnitCount
        }
        func putNumber(_ value: Int) {
            var digits = 1
            var rest = value / 10
            while rest > 0 {
                digits += 1
                rest /= 10
            }
            var remaining = value
            for offset in stride(from: digits - 1, through: 0, by: -1) {
                scratch[length + offset] = UInt8(0x30 + remaining % 10)
                remaining /= 10
            }
            length += digits
        }
        switch options.kind {
        case .foldtable:
            // A real toggle: the section is collapsed at first, so even numbers expand it.
            put(#"{"type":"toggle","section":"s1","id":""#)
            putNumber(number)
            put(#""}"#)
        case .mirror, .broadcast:
            put("n:")
            putNumber(number)
            while length < options.payloadBytes {
                scratch[length] = UInt8(ascii: " ")
                length += 1
            }
        }
        sendTimes[number] = monotonicNanos()
        queueFrame(author, opcode: 0x1, payload: scratch, count: length)
    }

    // MARK: phases

    /// Polls until `done` or `timeout` seconds pass; with `quiet`, also stops after that many
    /// seconds without any input. Returns whether `done` held.
    @discardableResult
    mutating func pollUntil(timeout: Double, quiet: Double? = nil, _ done: (FanoutLoad) -> Bool) -> Bool {
        let deadline = monotonicNanos() + UInt64(timeout * 1e9)
        lastActivity = monotonicNanos()
        while !done(self) {
            let now = monotonicNanos()
            if now >= deadline { return false }
            if let quiet, now - lastActivity >= UInt64(quiet * 1e9) { return false }
            poll(timeoutMilliseconds: 20)
        }
        return true
    }

    /// Every client joined and silent for `--idle` seconds, answering the server's pings: the
    /// server's CPU in that time is what watching members cost it (keepalive, timers, polling).
    private mutating func runIdle() {
        let cpuStart = serverCPUSeconds()
        let pingsStart = pingsAnswered
        let seconds = options.idleSeconds
        pollUntil(timeout: seconds) { _ in false }
        var line = "fanout \(options.kind.rawValue): idle: clients=\(clients) seconds=\(fixed(seconds, 1))"
        if let start = cpuStart, let end = serverCPUSeconds() {
            line += " server_cpu_s=\(fixed(end - start, 2)) server_cpu=\(fixed(100 * (end - start) / seconds, 1))%"
        }
        line += " pings=\(pingsAnswered - pingsStart) open=\(opened)"
        emit(line)
        if closedCount > 0 { fail("\(closedCount) clients were closed while idle") }
    }

    /// Connects and (foldtable) joins every client, at most `connectBatch` handshakes at a time.
    mutating func connectAll() {
        var next = 0
        let start = monotonicNanos()
        let spread = UInt64(options.joinOverSeconds * 1e9)
        let deadline = start + 60_000_000_000 + spread
        while opened < clients || (options.kind == .foldtable && welcomed < clients) {
            let now = monotonicNanos()
            while handshaking < options.connectBatch && next < clients && now - start >= spread * UInt64(next) / UInt64(clients) {
                startConnect(next)
                handshaking += 1
                next += 1
            }
            poll(timeoutMilliseconds: 20)
            if closedCount > 0 { fail("a client closed while connecting (\(opened) open, \(welcomed) welcomed)") }
            if monotonicNanos() > deadline { fail("connecting took over 60 s (\(opened) open, \(welcomed) welcomed)") }
        }
    }

    mutating func sendSetup() {
        if options.everyClientAuthors {
            // Each client's own session gets a collapsed section with a few rows to toggle.
            for index in 0..<clients {
                for text in [
                    #"{"type":"addSection","title":"Bench \#(index)","key":"s\#(index)","collapsed":true,"id":"setup\#(index)"}"#,
                    #"{"type":"addRow","section":"s\#(index)","row":{"label":"one","value":"1"},"id":"setupa\#(index)"}"#,
                    #"{"type":"addRow","section":"s\#(index)","row":{"label":"two","value":"2"},"id":"setupb\#(index)"}"#,
                ] {
                    var message = Array(text.utf8)
                    message.withUnsafeMutableBufferPointer {
                        queueFrame(index, opcode: 0x1, payload: $0.baseAddress!, count: $0.count)  // safe: a message is never empty
                    }
                }
                flush(index)
            }
            return
        }
        // Each author's session gets a small collapsed section to toggle: every member is there
        // when its rows are added, so members hold them and a toggle is one event to each.
        let texts =
            options.kind == .foldtable
            ? [
                #"{"type":"addSection","title":"Bench","key":"s1","collapsed":true,"id":"setup"}"#,
                #"{"type":"addRow","section":"s1","row":{"label":"one","value":"1"},"id":"setupa"}"#,
                #"{"type":"addRow","section":"s1","row":{"label":"two","value":"2"},"id":"setupb"}"#,
            ] : ["n:setup"]
        for author in 0..<sessionCount {
            for text in texts {
                var message = Array(text.utf8)
                message.withUnsafeMutableBufferPointer {
                    queueFrame(author, opcode: 0x1, payload: $0.baseAddress!, count: $0.count)  // safe: a message is never empty
                }
            }
            flush(author)
        }
    }

    /// Bytes of one message of a peer's expansion, and of all of them.
    var expandMessageBytes: Int { (options.expandBytes + options.expandMessages - 1) / max(1, options.expandMessages) }
    var expandPeerTotalBytes: Int { expandMessageBytes * options.expandMessages }

    /// Server CPU seconds so far: schedstat (ns) where there is one, else /proc/PID/stat.
    func serverCPUSeconds() -> Double? {
        guard let pid = options.serverPID else { return nil }
        return schedulerSeconds(pid)?.cpu ?? processCPUSeconds(pid)
    }

    mutating func run() -> Int32 {
        if let role = options.crowd { return runCrowd(role) }
        let kind = options.kind.rawValue
        let memoryBefore = options.serverPID.flatMap(residentKiB)
        let joinCPUStart = serverCPUSeconds()
        let joinOwnCPUStart = ownCPUSeconds()
        let startedAt = monotonicNanos()
        connectAll()
        let connectSeconds = Double(monotonicNanos() - startedAt) / 1e9
        if options.kind == .foldtable && !options.everyClientAuthors {
            // Joins reach members as presence diffs (one per session per interval): the join
            // phase is over when every client has heard that all of its session is there.
            let everyone = clients
            if !pollUntil(timeout: 30, { $0.seeingEveryone >= everyone }) {
                printError("presence incomplete: \(seeingEveryone) of \(clients) clients heard of everyone")
            }
        }
        let presenceSeconds = Double(monotonicNanos() - startedAt) / 1e9
        if !options.everyClientAuthors, let before = memoryBefore, let joined = options.serverPID.flatMap(residentKiB) {
            // What the members cost the server: resident memory with everyone there, less before.
            var line = "fanout \(kind): joins: clients=\(clients) sessions=\(sessionCount) welcomed_s=\(fixed(connectSeconds, 2))"
            line += " presence_s=\(fixed(presenceSeconds, 2))"
            if let start = joinCPUStart, let end = serverCPUSeconds() { line += " server_cpu_s=\(fixed(end - start, 2))" }
            line += " gen_cpu_s=\(fixed(ownCPUSeconds() - joinOwnCPUStart, 2))"
            line += " rss_before_mb=\(fixed(Double(before.now) / 1024, 1)) rss_joined_mb=\(fixed(Double(joined.now) / 1024, 1))"
            line += " per_member_kib=\(fixed(Double(joined.now - before.now) / Double(clients), 1))"
            emit(line)
        }
        if options.idleSeconds > 0 { runIdle() }
        if expanding { return runExpansion() }
        sendSetup()
        let setupExpected = options.everyClientAuthors || options.kind == .foldtable ? 3 * clients : clients
        if !pollUntil(timeout: 30, { $0.setupSeen >= setupExpected }) {
            fail("the setup messages reached \(setupSeen) of \(setupExpected)")
        }
        pollUntil(timeout: 0.2) { _ in false }  // let any stragglers settle
        let setupSeconds = Double(monotonicNanos() - startedAt) / 1e9

        // Measure.
        let begin = monotonicNanos()
        windowStart = begin + UInt64(options.warmup * 1e9)
        windowEnd = windowStart + UInt64(options.seconds * 1e9)
        sending = true
        if options.everyClientAuthors {
            for index in 0..<clients {
                refillAuthor(index, now: begin)
                flush(index)
            }
        } else {
            for author in 0..<sessionCount {
                refill(author, now: begin)
                flush(author)
            }
        }
        var startSampled = false
        var serverCPUStart: Double?
        var serverSchedulerStart: (cpu: Double, wait: Double)?
        var ownCPUStart = 0.0
        var ownSchedulerStart: (cpu: Double, wait: Double)?
        var nodesStart: [(cpu: Double, wait: Double)?] = []
        var redisWindow: RedisWindow?
        while true {
            let now = monotonicNanos()
            if !startSampled && now >= windowStart {
                startSampled = true
                serverCPUStart = options.serverPID.flatMap(processCPUSeconds)
                serverSchedulerStart = options.serverPID.flatMap(schedulerSeconds)
                nodesStart = options.serverPIDs.map(schedulerSeconds)
                if let host = options.redisHost {
                    redisWindow = RedisWindow(host: host, port: options.redisPort, pid: options.redisPID, session: options.session)
                }
                ownCPUStart = ownCPUSeconds()
                ownSchedulerStart = schedulerSeconds(getpid())
            }
            if now >= windowEnd { break }
            poll(timeoutMilliseconds: Int32(min(20, (windowEnd - now) / 1_000_000 + 1)))
        }
        sending = false
        let serverCPUEnd = options.serverPID.flatMap(processCPUSeconds)
        var serverSchedulerEnd = options.serverPID.flatMap(schedulerSeconds)
        let nodesEnd = options.serverPIDs.map(schedulerSeconds)
        let redisLine = redisWindow?.report(seconds: options.seconds, kind: options.kind.rawValue)
        let ownCPU = ownCPUSeconds() - ownCPUStart
        let ownSchedulerEnd = schedulerSeconds(getpid())
        var nodesLine: String?
        if options.serverPIDs.count > 1, !options.everyClientAuthors, nodesStart.count == nodesEnd.count {
            // Several nodes: the server figures below are their sums; each one's share here.
            var line = "fanout \(kind): nodes:"
            var sum = (cpu: 0.0, wait: 0.0)
            for (number, (start, end)) in zip(nodesStart, nodesEnd).enumerated() {
                guard let start, let end else { continue }
                sum.cpu += end.cpu - start.cpu
                sum.wait += end.wait - start.wait
                line += " node\(number)_cpu_s=\(fixed(end.cpu - start.cpu, 2))"
                line += " node\(number)_waiting=\(Int((100 * (end.wait - start.wait) / options.seconds).rounded()))%"
            }
            nodesLine = line
            serverSchedulerStart = (0, 0)
            serverSchedulerEnd = sum
        }
        let inWindowSent = sent

        if options.everyClientAuthors { return reportAcks(serverSchedulerStart, serverCPUStart, ownCPUStart) }

        // Drain: the author's last changes to everybody, bounded.
        let expectedAll = sent * sessionSize
        let drained = pollUntil(timeout: 5, quiet: 1) {
            $0.outstanding == 0 && $0.deliveries + $0.lostChanges * $0.sessionSize >= expectedAll
        }

        let seconds = options.seconds
        let changesPerSecond = Double(windowChanges) / seconds
        let deliveriesPerSecond = Double(windowDeliveries) / seconds
        let dropped = expectedAll - deliveries
        var line = "fanout \(kind): clients=\(clients) sessions=\(sessionCount) in_flight=\(options.inFlight)"
        line += " changes/s=\(Int(changesPerSecond.rounded())) deliveries/s=\(Int(deliveriesPerSecond.rounded()))"
        line += " p50=\(fixed(histogram.percentileMilliseconds(0.5), 2))ms p99=\(fixed(histogram.percentileMilliseconds(0.99), 2))ms"
        line += " dropped=\(dropped)"
        // Server CPU: schedstat (ns) where there is one, else /proc/PID/stat (clock ticks).
        var serverCPU: Double?
        if let start = serverSchedulerStart, let end = serverSchedulerEnd {
            serverCPU = end.cpu - start.cpu
        } else if let start = serverCPUStart, let end = serverCPUEnd {
            serverCPU = end - start
        }
        if let serverCPU {
            line += " server_cpu_s=\(fixed(serverCPU, 2)) server_cpu=\(Int((100 * serverCPU / seconds).rounded()))%"
        }
        if let memory = options.serverPID.flatMap(residentKiB) { line += " server_peak_rss_mb=\(fixed(Double(memory.peak) / 1024, 1))" }
        if let start = serverSchedulerStart, let end = serverSchedulerEnd {
            // Runnable but off its CPU: another process had it (a shared machine), so the
            // figure is low for a reason that is not the server's.
            line += " server_waiting=\(Int((100 * (end.wait - start.wait) / seconds).rounded()))%"
        }
        line += " gen_cpu_s=\(fixed(ownCPU, 2)) gen_cpu=\(Int((100 * ownCPU / seconds).rounded()))%"
        if let serverCPU, serverCPU > 0 {
            // Robust on a shared machine: what one second of server CPU delivers.
            line += " deliveries/server_cpu_s=\(Int((Double(windowDeliveries) / serverCPU).rounded()))"
        }
        emit(line)
        if let nodesLine { emit(nodesLine) }
        if let redisLine { emit(redisLine) }
        func percent(_ value: Double) -> String { "\(Int((100 * value / seconds).rounded()))%" }
        var scheduler = "fanout \(kind): scheduler:"
        if let start = serverSchedulerStart, let end = serverSchedulerEnd {
            scheduler += " server on-cpu=\(percent(end.cpu - start.cpu)) runnable-but-waiting=\(percent(end.wait - start.wait)),"
        }
        if let start = ownSchedulerStart, let end = ownSchedulerEnd {
            scheduler += " generator on-cpu=\(percent(end.cpu - start.cpu)) runnable-but-waiting=\(percent(end.wait - start.wait))"
        }
        scheduler += " (a waiting share means another process had the CPU)"
        emit(scheduler)
        var detail = "fanout \(kind): detail: sent=\(inWindowSent) deliveries=\(deliveries) lost_changes=\(lostChanges)"
        detail += " closed=\(closedCount) server_errors=\(serverErrors) unexpected=\(unexpected)"
        detail += " bytes/delivery=\(deliveries > 0 ? deliveredBytes / deliveries : 0) drained=\(drained)"
        detail += " setup=\(fixed(setupSeconds, 1))s (connect \(fixed(connectSeconds, 1))s)"
        emit(detail)
        return closedCount == 0 && windowDeliveries > 0 ? 0 : 1
    }
}

extension FanoutLoad {
    /// --expand: once everyone is there, one expansion of the large section (foldtable) or the
    /// same bytes from the author (peers); waits (bounded) until every client has all of it.
    fileprivate mutating func runExpansion() -> Int32 {
        let kind = options.kind.rawValue
        pollUntil(timeout: 0.2) { _ in false }  // let the welcomes and presence settle
        let serverCPUStart = serverCPUSeconds()
        let serverWaitStart = options.serverPID.flatMap(schedulerSeconds)?.wait
        let ownCPUStart = ownCPUSeconds()
        expandStart = monotonicNanos()
        if let section = options.expandSection {
            var message = Array(#"{"type":"toggle","section":"\#(section)","id":"expand"}"#.utf8)
            message.withUnsafeMutableBufferPointer {
                queueFrame(0, opcode: 0x1, payload: $0.baseAddress!, count: $0.count)  // safe: a message is never empty
            }
        } else {
            let size = expandMessageBytes
            let message = UnsafeMutablePointer<UInt8>.allocate(capacity: size)
            defer { message.deallocate() }
            message.initialize(repeating: UInt8(ascii: " "), count: size)
            for number in 0..<options.expandMessages {
                var prefix = Array("n:\(number)".utf8)
                prefix.withUnsafeMutableBufferPointer { _ = memcpy(message, $0.baseAddress!, min($0.count, size)) }  // safe: "n:N" is never empty
                queueFrame(0, opcode: 0x1, payload: message, count: size)
            }
        }
        flush(0)
        let everyone = clients
        let complete = pollUntil(timeout: options.expandTimeout) { $0.expandDone >= everyone }
        let end = complete ? expandLastDone : monotonicNanos()
        let elapsed = Double(end - expandStart) / 1e9
        let serverCPU = serverCPUSeconds().flatMap { now in serverCPUStart.map { now - $0 } }
        let ownCPU = ownCPUSeconds() - ownCPUStart
        if options.kind != .foldtable { expandMessagesDelivered = expandBytesDelivered / max(1, expandMessageBytes) }
        var line = "expand \(kind): clients=\(clients) complete=\(expandDone)/\(clients)"
        line += complete ? " all_s=\(fixed(elapsed, 3))" : " all_s=timeout(\(fixed(options.expandTimeout, 0))s)"
        line += " deliveries/s=\(Int((Double(expandMessagesDelivered) / elapsed).rounded()))"
        line += " p50=\(fixed(histogram.percentileMilliseconds(0.5), 1))ms p99=\(fixed(histogram.percentileMilliseconds(0.99), 1))ms"
        if let serverCPU { line += " server_cpu_s=\(fixed(serverCPU, 2))" }
        if let memory = options.serverPID.flatMap(residentKiB) { line += " server_peak_rss_mb=\(fixed(Double(memory.peak) / 1024, 1))" }
        if let start = serverWaitStart, let end = options.serverPID.flatMap(schedulerSeconds)?.wait {
            line += " server_waiting=\(Int((100 * (end - start) / elapsed).rounded()))%"
        }
        line += " gen_cpu_s=\(fixed(ownCPU, 2)) gen_cpu=\(Int((100 * ownCPU / elapsed).rounded()))%"
        emit(line)
        var detail = "expand \(kind): detail: messages_to_client0=\(expandFirstClientMessages) bytes_to_client0=\(expandFirstClientBytes)"
        detail += " deliveries=\(expandMessagesDelivered) closed=\(closedCount) server_errors=\(serverErrors) unexpected=\(unexpected)"
        emit(detail)
        return complete && closedCount == 0 && serverErrors == 0 ? 0 : 1
    }

    /// The end of an --every-client-authors run: waits (bounded) for outstanding acks, prints.
    fileprivate mutating func reportAcks(
        _ serverSchedulerStart: (cpu: Double, wait: Double)?, _ serverCPUStart: Double?, _ ownCPUStart: Double
    ) -> Int32 {
        let seconds = options.seconds
        var serverCPU: Double?
        if let start = serverSchedulerStart, let end = options.serverPID.flatMap(schedulerSeconds) {
            serverCPU = end.cpu - start.cpu
        } else if let start = serverCPUStart, let end = options.serverPID.flatMap(processCPUSeconds) {
            serverCPU = end - start
        }
        let ownCPU = ownCPUSeconds() - ownCPUStart
        let drained = pollUntil(timeout: 5, quiet: 1) { load in
            (0..<load.clients).allSatisfy { load.authorAcked[$0] >= load.authorSent[$0] }
        }
        let outstanding = (0..<clients).reduce(0) { $0 + authorSent[$1] - authorAcked[$1] }
        var line = "acks foldtable: clients=\(clients) sessions=\(sessionCount) in_flight=\(options.inFlight)"
        line += " acks/s=\(Int((Double(windowAcks) / seconds).rounded()))"
        line += " p50=\(fixed(histogram.percentileMilliseconds(0.5), 2))ms p99=\(fixed(histogram.percentileMilliseconds(0.99), 2))ms"
        line += " unacked=\(outstanding)"
        if let serverCPU {
            line += " server_cpu=\(Int((100 * serverCPU / seconds).rounded()))%"
            if serverCPU > 0 { line += " acks/server_cpu_s=\(Int((Double(windowAcks) / serverCPU).rounded()))" }
        }
        line += " gen_cpu=\(Int((100 * ownCPU / seconds).rounded()))%"
        emit(line)
        emit("acks foldtable: detail: acks=\(acks) events=\(deliveries) closed=\(closedCount) server_errors=\(serverErrors) drained=\(drained)")
        return closedCount == 0 && serverErrors == 0 && windowAcks > 0 ? 0 : 1
    }
}

/// Entry point of `foldtable-bench fanout ...`; returns the exit status.
func runFanout(arguments: [String]) -> Int32 {
    signal(SIGPIPE, SIG_IGN)
    var load = FanoutLoad(options: FanoutOptions.parse(arguments))
    return load.run()
}
