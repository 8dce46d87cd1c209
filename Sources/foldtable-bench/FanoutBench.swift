// foldtable-bench fanout: one session of N WebSocket clients, one author keeping K changes in
// flight; counts deliveries at every client and the latency from the author's send to each
// receipt. Runs against foldtabled (`--kind foldtable`) or against libwebsockets-test-server's
// broadcast lws-mirror-protocol (`--kind mirror`), the reference measured in the same run.
//
//   foldtable-bench fanout --url ws://127.0.0.1:PORT/ws --kind foldtable|mirror [--clients 1000]
//       [--in-flight 20] [--seconds 10] [--warmup 1] [--payload-bytes 140] [--server-pid PID]
//
// Client 0 is the author (and a member like every other). The author sends a new change each
// time one of its own comes back to it, so exactly K are in flight; at the end it stops sending
// and waits (bounded) for the last ones to reach everybody.
//   foldtable: `{"type":"set","section":"s1","collapsed":true,"id":"<n>"}` on a collapsed section:
//              every one is a real ordered event broadcast to all members.
//   mirror:    `n:<n>` padded to --payload-bytes (the size of foldtabled's event), broadcast as is.
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
}

struct FanoutOptions {
    var host = "127.0.0.1"
    var port: UInt16 = 0
    var path = "/"
    var kind = FanoutKind.foldtable
    var clients = 1000
    var inFlight = 20
    var seconds = 10.0
    var warmup = 1.0
    var connectBatch = 100
    var payloadBytes = 140
    var serverPID: Int32?
    var session = "bench"
    /// Every client an author counting acks (see the file comment), in `sessions` sessions
    /// (client n in session n % sessions; 0 = a session per client).
    var everyClientAuthors = false
    var sessions = 0

    var subprotocol: String? { kind == .mirror ? "lws-mirror-protocol" : nil }

    static let usage = """
        usage: foldtable-bench fanout --url ws://127.0.0.1:PORT/PATH --kind foldtable|mirror
                 [--clients N (1000)] [--in-flight K (20)] [--seconds S (10)] [--warmup S (1)]
                 [--connect-batch N (100)] [--payload-bytes B (140, mirror)] [--server-pid PID]
                 [--every-client-authors (foldtable: acks per second)] [--sessions N (one per client)]
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
                guard let kind = FanoutKind(rawValue: text) else { fail("--kind must be foldtable or mirror, not \(text)") }
                options.kind = kind
            case "--clients": options.clients = number(value())
            case "--in-flight": options.inFlight = number(value())
            case "--seconds": options.seconds = seconds(value())
            case "--warmup": options.warmup = seconds(value())
            case "--connect-batch": options.connectBatch = number(value())
            case "--payload-bytes": options.payloadBytes = max(16, number(value()))
            case "--server-pid": options.serverPID = Int32(number(value()))
            case "--session": options.session = value()
            case "--every-client-authors": options.everyClientAuthors = true
            case "--sessions": options.sessions = number(value())
            default: fail("unknown argument \(arguments[index])\n\(usage)")
            }
            index += 1
        }
        if !sawURL { fail("--url is required\n\(usage)") }
        if options.seconds <= 0 { fail("--seconds must be more than 0") }
        if options.everyClientAuthors && options.kind != .foldtable { fail("--every-client-authors needs --kind foldtable") }
        return options
    }

    /// `ws://HOST:PORT/PATH`, HOST an IPv4 literal.
    mutating func setURL(_ url: String) {
        guard url.hasPrefix("ws://") else { fail("--url must start with ws:// (\(url))") }
        let rest = url.dropFirst(5)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[..<slash]
        path = slash == rest.endIndex ? "/" : String(rest[slash...])
        guard let colon = authority.lastIndex(of: ":"), let parsed = UInt16(authority[authority.index(after: colon)...]) else {
            fail("--url needs an explicit port (\(url))")
        }
        host = String(authority[..<colon])
        port = parsed
    }
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
    var lastActivity: UInt64 = 0

    // Setup progress.
    var welcomed = 0
    var presenceSeen = 0
    /// Clients a presence diff told that the whole room is there (see `seesEveryone`).
    var seeingEveryone = 0
    var setupSeen = 0
    var serverErrors = 0

    // The author's changes: send times indexed by change number.
    let sendTimes: UnsafeMutablePointer<UInt64>
    let sendCapacity = 1 << 22
    var sent = 0
    var nextExpected = 0
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
    }

    var clients: Int { options.clients }
    var sessionCount: Int { options.sessions > 0 ? min(options.sessions, options.clients) : options.clients }

    // MARK: messages

    /// Called once a connection has completed its upgrade.
    mutating func didOpen(_ index: Int) {
        guard options.kind == .foldtable else { return }
        let session = options.everyClientAuthors ? "\(options.session)-\(index % sessionCount)" : options.session
        var join = Array(#"{"type":"join","session":"\#(session)","name":"c\#(index)"}"#.utf8)
        join.withUnsafeMutableBufferPointer { queueFrame(index, opcode: 0x1, payload: $0.baseAddress!, count: $0.count) }
        flush(index)
    }

    @inline(__always)
    mutating func onMessage(_ index: Int, _ payload: UnsafeMutablePointer<UInt8>, _ count: Int, now: UInt64) {
        switch options.kind {
        case .foldtable: onFoldtableMessage(index, payload, count, now: now)
        case .mirror: onMirrorMessage(index, payload, count, now: now)
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
                if length > 0 { unexpected += 1 }
                continue
            }
            switch line[9] {
            case UInt8(ascii: "e") where line[10] == UInt8(ascii: "v"):  // event
                deliveredBytes += length + 1
                if options.everyClientAuthors {
                    deliveries += 1
                } else {
                    onDelivery(index, changeNumber(line, length), now: now)
                }
            case UInt8(ascii: "a"):  // ack: the author's own event is what completes a change
                // {"type":"ack","id":"<n>",...
                if options.everyClientAuthors && length > 20 { onAck(index, digits(line + 20, length - 20, terminator: nil), now: now) }
            case UInt8(ascii: "p"):
                // {"type":"presence","count":N,...: one diff per interval, N = members now.
                presenceSeen += 1
                if length > 27, !connections[index].seesEveryone, digits(line + 27, length - 27, terminator: 0x2C) == clients {
                    connections[index].seesEveryone = true
                    seeingEveryone += 1
                }
            case UInt8(ascii: "w"):
                if !connections[index].welcomed {
                    connections[index].welcomed = true
                    welcomed += 1
                }
            case UInt8(ascii: "e"):
                if serverErrors == 0 {
                    printError("client \(index) got: \(String(decoding: UnsafeBufferPointer(start: line, count: length), as: UTF8.self))")
                }
                serverErrors += 1
            default:
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

    /// One mirror message: `n:<n>` then padding, or the setup message.
    @inline(__always)
    private mutating func onMirrorMessage(_ index: Int, _ payload: UnsafeMutablePointer<UInt8>, _ count: Int, now: UInt64) {
        guard count > 2, payload[0] == UInt8(ascii: "n"), payload[1] == UInt8(ascii: ":") else {
            unexpected += 1
            return
        }
        deliveredBytes += count
        onDelivery(index, digits(payload + 2, count - 2, terminator: UInt8(ascii: " ")), now: now)
    }

    @inline(__always)
    private mutating func onDelivery(_ index: Int, _ number: Int, now: UInt64) {
        guard number >= 0, number < sent else {
            if number == -1 { setupSeen += 1 } else { unexpected += 1 }
            return
        }
        deliveries += 1
        if now >= windowStart {
            if now <= windowEnd { windowDeliveries += 1 }
            histogram.record(nanoseconds: now &- sendTimes[number])
        }
        if index == 0 {
            // Both servers deliver in order: anything older still outstanding was lost.
            if number >= nextExpected {
                lostChanges += number - nextExpected
                nextExpected = number + 1
            }
            if now >= windowStart && now <= windowEnd { windowChanges += 1 }
            refill(now: now)
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

    /// Queues changes on the author until K are in flight (sent by the caller's flush).
    private mutating func refill(now: UInt64) {
        guard sending, now < windowEnd else { return }
        while sent - nextExpected < options.inFlight && sent < sendCapacity {
            queueChange(sent)
            sent += 1
        }
    }

    private mutating func queueChange(_ number: Int) {
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
            put(#"{"type":"set","section":"s1","collapsed":true,"id":""#)
            putNumber(number)
            put(#""}"#)
        case .mirror:
            put("n:")
            putNumber(number)
            while length < options.payloadBytes {
                scratch[length] = UInt8(ascii: " ")
                length += 1
            }
        }
        sendTimes[number] = monotonicNanos()
        queueFrame(0, opcode: 0x1, payload: scratch, count: length)
    }

    // MARK: phases

    /// Polls until `done` or `timeout` seconds pass; with `quiet`, also stops after that many
    /// seconds without any input. Returns whether `done` held.
    @discardableResult
    private mutating func pollUntil(timeout: Double, quiet: Double? = nil, _ done: (FanoutLoad) -> Bool) -> Bool {
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

    /// Connects and (foldtable) joins every client, at most `connectBatch` handshakes at a time.
    private mutating func connectAll() {
        var next = 0
        let deadline = monotonicNanos() + 60_000_000_000
        while opened < clients || (options.kind == .foldtable && welcomed < clients) {
            while handshaking < options.connectBatch && next < clients {
                startConnect(next)
                handshaking += 1
                next += 1
            }
            poll(timeoutMilliseconds: 20)
            if closedCount > 0 { fail("a client closed while connecting (\(opened) open, \(welcomed) welcomed)") }
            if monotonicNanos() > deadline { fail("connecting took over 60 s (\(opened) open, \(welcomed) welcomed)") }
        }
    }

    private mutating func sendSetup() {
        if options.everyClientAuthors {
            // Each client's own session gets a collapsed section with a few rows to toggle.
            for index in 0..<clients {
                for text in [
                    #"{"type":"addSection","title":"Bench \#(index)","key":"s\#(index)","collapsed":true,"id":"setup\#(index)"}"#,
                    #"{"type":"addRow","section":"s\#(index)","row":{"label":"one","value":"1"},"id":"setupa\#(index)"}"#,
                    #"{"type":"addRow","section":"s\#(index)","row":{"label":"two","value":"2"},"id":"setupb\#(index)"}"#,
                ] {
                    var message = Array(text.utf8)
                    message.withUnsafeMutableBufferPointer { queueFrame(index, opcode: 0x1, payload: $0.baseAddress!, count: $0.count) }
                }
                flush(index)
            }
            return
        }
        switch options.kind {
        case .foldtable:
            var message = Array(#"{"type":"addSection","title":"Bench","key":"s1","collapsed":true,"id":"setup"}"#.utf8)
            message.withUnsafeMutableBufferPointer { queueFrame(0, opcode: 0x1, payload: $0.baseAddress!, count: $0.count) }
        case .mirror:
            var message = Array("n:setup".utf8)
            message.withUnsafeMutableBufferPointer { queueFrame(0, opcode: 0x1, payload: $0.baseAddress!, count: $0.count) }
        }
        flush(0)
    }

    mutating func run() -> Int32 {
        let kind = options.kind.rawValue
        let startedAt = monotonicNanos()
        connectAll()
        let connectSeconds = Double(monotonicNanos() - startedAt) / 1e9
        if options.kind == .foldtable && !options.everyClientAuthors {
            // Joins reach members as presence diffs (one per session per interval): the join
            // phase is over when every client has heard that all of them are there.
            let everyone = clients
            if !pollUntil(timeout: 30, { $0.seeingEveryone >= everyone }) {
                printError("presence incomplete: \(seeingEveryone) of \(clients) clients heard of everyone")
            }
        }
        sendSetup()
        let setupExpected = options.everyClientAuthors ? 3 * clients : clients
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
            refill(now: begin)
            flush(0)
        }
        var startSampled = false
        var serverCPUStart: Double?
        var serverSchedulerStart: (cpu: Double, wait: Double)?
        var ownCPUStart = 0.0
        var ownSchedulerStart: (cpu: Double, wait: Double)?
        while true {
            let now = monotonicNanos()
            if !startSampled && now >= windowStart {
                startSampled = true
                serverCPUStart = options.serverPID.flatMap(processCPUSeconds)
                serverSchedulerStart = options.serverPID.flatMap(schedulerSeconds)
                ownCPUStart = ownCPUSeconds()
                ownSchedulerStart = schedulerSeconds(getpid())
            }
            if now >= windowEnd { break }
            poll(timeoutMilliseconds: Int32(min(20, (windowEnd - now) / 1_000_000 + 1)))
        }
        sending = false
        let serverCPUEnd = options.serverPID.flatMap(processCPUSeconds)
        let serverSchedulerEnd = options.serverPID.flatMap(schedulerSeconds)
        let ownCPU = ownCPUSeconds() - ownCPUStart
        let ownSchedulerEnd = schedulerSeconds(getpid())
        let inWindowSent = sent

        if options.everyClientAuthors { return reportAcks(serverSchedulerStart, serverCPUStart, ownCPUStart) }

        // Drain: the author's last changes to everybody, bounded.
        let expectedAll = sent * clients
        let drained = pollUntil(timeout: 5, quiet: 1) {
            $0.nextExpected >= $0.sent && $0.deliveries + $0.lostChanges * $0.clients >= expectedAll
        }

        let seconds = options.seconds
        let changesPerSecond = Double(windowChanges) / seconds
        let deliveriesPerSecond = Double(windowDeliveries) / seconds
        let dropped = expectedAll - deliveries
        var line = "fanout \(kind): clients=\(clients) in_flight=\(options.inFlight)"
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
            line += " server_cpu=\(Int((100 * serverCPU / seconds).rounded()))%"
        }
        line += " gen_cpu=\(Int((100 * ownCPU / seconds).rounded()))%"
        if let serverCPU, serverCPU > 0 {
            // Robust on a shared machine: what one second of server CPU delivers.
            line += " deliveries/server_cpu_s=\(Int((Double(windowDeliveries) / serverCPU).rounded()))"
        }
        emit(line)
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
