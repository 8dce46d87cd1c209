// What Redis spends on the changes of a cross-node fan-out run (`--redis HOST:PORT`): its INFO
// counters read at the window's start and end (CPU, commands, network bytes, AOF bytes, XADD
// calls), the bench stream's memory per entry, and the append round trip a client sees while the
// nodes load Redis (a probe thread XADDing a copy of the latest bench entry to a stream of its own
// every few milliseconds). A small blocking RESP client of its own: the bench links no hiredis.
import Foundation
import Synchronization

/// One RESP reply, as far as the bench needs to read it.
enum RedisReply {
    case text(String)
    case integer(Int)
    case array([RedisReply])
    case null
    case error(String)

    var string: String? {
        if case .text(let value) = self { return value }
        return nil
    }
    var integer: Int? {
        if case .integer(let value) = self { return value }
        return nil
    }
}

/// A blocking connection to Redis over TCP; commands are sent as RESP arrays.
final class BenchRedisConnection {
    private let fd: Int32
    private var buffer: [UInt8] = []
    private var position = 0
    /// Bytes sent and received so far (the probe's own traffic is taken out of the nodes').
    private(set) var sentBytes = 0
    private(set) var receivedBytes = 0

    init?(host: String, port: UInt16) {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            close(fd)
            return nil
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(fd)
            return nil
        }
    }

    deinit { close(fd) }

    /// Sends one command and reads its reply; `nil` when the connection failed.
    func command(_ arguments: [String]) -> RedisReply? {
        var request = Array("*\(arguments.count)\r\n".utf8)
        for argument in arguments {
            request += Array("$\(argument.utf8.count)\r\n".utf8) + Array(argument.utf8) + [13, 10]
        }
        var sent = 0
        while sent < request.count {
            let count = request.withUnsafeBytes {
                send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL))  // safe: non-empty (sent < count)
            }
            guard count > 0 else { return nil }
            sent += count
        }
        sentBytes += sent
        return reply()
    }

    private func line() -> String? {
        while true {
            if let end = buffer[position...].firstIndex(of: 10), end > position, buffer[end - 1] == 13 {
                let text = String(decoding: buffer[position..<(end - 1)], as: UTF8.self)
                position = end + 1
                return text
            }
            guard fill() else { return nil }
        }
    }

    private func bytes(_ count: Int) -> [UInt8]? {
        while buffer.count - position < count + 2 {
            guard fill() else { return nil }
        }
        let value = Array(buffer[position..<(position + count)])
        position += count + 2
        return value
    }

    private func fill() -> Bool {
        if position > 0 {
            buffer.removeFirst(position)
            position = 0
        }
        var chunk = [UInt8](repeating: 0, count: 65536)
        let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return false }
        buffer += chunk[0..<count]
        receivedBytes += count
        return true
    }

    private func reply() -> RedisReply? {
        guard let head = line(), let kind = head.first else { return nil }
        let rest = String(head.dropFirst())
        switch kind {
        case "+": return .text(rest)
        case "-": return .error(rest)
        case ":": return Int(rest).map(RedisReply.integer)
        case "$":
            guard let length = Int(rest) else { return nil }
            if length < 0 { return .null }
            return bytes(length).map { .text(String(decoding: $0, as: UTF8.self)) }
        case "*":
            guard let count = Int(rest) else { return nil }
            if count < 0 { return .null }
            var items: [RedisReply] = []
            for _ in 0..<count {
                guard let item = reply() else { return nil }
                items.append(item)
            }
            return .array(items)
        default: return nil
        }
    }
}

/// INFO's counters at one moment.
struct RedisCounters {
    var cpuSeconds = 0.0
    var commands = 0
    var inputBytes = 0
    var outputBytes = 0
    var aofBytes = 0
    /// Per command (lowercase name): calls and microseconds spent in it.
    var commandStats: [String: (calls: Int, usec: Int)] = [:]

    init?(_ connection: BenchRedisConnection) {
        guard let info = connection.command(["INFO", "all"])?.string else { return nil }
        for line in info.split(whereSeparator: \.isNewline) {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let key = line[..<colon]
            let value = line[line.index(after: colon)...]
            switch key {
            case "used_cpu_sys", "used_cpu_user": cpuSeconds += Double(value) ?? 0
            case "total_commands_processed": commands = Int(value) ?? 0
            case "total_net_input_bytes": inputBytes = Int(value) ?? 0
            case "total_net_output_bytes": outputBytes = Int(value) ?? 0
            case "aof_current_size": aofBytes = Int(value) ?? 0
            default:
                guard key.hasPrefix("cmdstat_") else { continue }
                var calls = 0
                var usec = 0
                for field in value.split(separator: ",") {
                    let pair = field.split(separator: "=")
                    guard pair.count == 2 else { continue }
                    if pair[0] == "calls" { calls = Int(pair[1]) ?? 0 }
                    if pair[0] == "usec" { usec = Int(pair[1]) ?? 0 }
                }
                commandStats[String(key.dropFirst("cmdstat_".count))] = (calls, usec)
            }
        }
    }
}

/// The append round trip under load: a thread XADDing a copy of a real entry to a stream of its
/// own (trimmed to 1,000 entries) every `interval` until stopped.
final class AppendProbe: Sendable {
    private let stopped = Atomic<Bool>(false)
    private let samples = Mutex<[UInt64]>([])
    private let finished = Atomic<Bool>(false)
    private let traffic = Mutex<(sent: Int, received: Int)>((0, 0))

    /// Starts the probe; `nil` when Redis cannot be reached.
    init?(host: String, port: UInt16, fields: [String], interval: Double) {
        guard let connection = BenchRedisConnection(host: host, port: port) else { return nil }
        let probe = UnsafeSendable(connection)
        Thread.detachNewThread { [self] in
            let arguments = ["XADD", "foldtable-bench:probe", "MAXLEN", "~", "1000", "*"] + fields
            while !stopped.load(ordering: .relaxed) {
                let start = monotonicNanos()
                guard probe.value.command(arguments) != nil else { break }
                let elapsed = monotonicNanos() - start
                samples.withLock { $0.append(elapsed) }
                usleep(UInt32(interval * 1e6))
            }
            traffic.withLock { $0 = (probe.value.sentBytes, probe.value.receivedBytes) }
            _ = probe.value.command(["DEL", "foldtable-bench:probe"])
            finished.store(true, ordering: .releasing)
        }
    }

    /// Stops the probe (waits for its last append); the round trips in nanoseconds and the
    /// bytes its appends sent and received.
    func stop() -> (samples: [UInt64], sent: Int, received: Int) {
        stopped.store(true, ordering: .relaxed)
        while !finished.load(ordering: .acquiring) { usleep(1_000) }
        let bytes = traffic.withLock { $0 }
        return (samples.withLock { $0 }, bytes.sent, bytes.received)
    }
}

/// A value handed to one other thread that alone uses it from then on.
struct UnsafeSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// `--redis`: counters at the window's start, the probe during it, and the line at its end.
struct RedisWindow {
    let connection: BenchRedisConnection
    let start: RedisCounters
    let pid: Int32?
    let schedulerStart: (cpu: Double, wait: Double)?
    let probe: AppendProbe?
    let streamKey: String

    /// Reads the counters and starts the probe with a copy of the stream's latest entry.
    init?(host: String, port: UInt16, pid: Int32?, session: String) {
        guard let connection = BenchRedisConnection(host: host, port: port), let start = RedisCounters(connection) else {
            printError("redis: cannot read INFO from \(host):\(port)")
            return nil
        }
        self.connection = connection
        self.start = start
        self.pid = pid
        schedulerStart = pid.flatMap(schedulerSeconds)
        streamKey = "foldtable:{\(session)}:stream"
        var fields = ["req", "probe"]
        if case .array(let entries) = connection.command(["XREVRANGE", streamKey, "+", "-", "COUNT", "1"]),
            case .array(let entry) = entries.first, entry.count == 2, case .array(let pairs) = entry[1]
        {
            fields = pairs.compactMap(\.string)
        }
        probe = AppendProbe(host: host, port: port, fields: fields, interval: 0.005)
    }

    /// The `redis:` line: what Redis spent in the window, in all and per appended change.
    func report(seconds: Double, kind: String) -> String {
        let probed = probe?.stop() ?? (samples: [], sent: 0, received: 0)
        let samples = probed.samples.sorted()
        guard let end = RedisCounters(connection) else { return "fanout \(kind): redis: INFO failed at the end" }
        let appends = (end.commandStats["xadd"]?.calls ?? 0) - (start.commandStats["xadd"]?.calls ?? 0) - samples.count
        let perChange = Double(max(1, appends))
        var cpu = end.cpuSeconds - start.cpuSeconds
        var line = "fanout \(kind): redis: appends=\(appends)"
        if let begin = schedulerStart, let pid, let finish = schedulerSeconds(pid) {
            // schedstat is finer than INFO's used_cpu (and says how long Redis waited for a CPU).
            cpu = finish.cpu - begin.cpu
            line += " redis_waiting=\(Int((100 * (finish.wait - begin.wait) / seconds).rounded()))%"
        }
        line += " redis_cpu_s=\(fixed(cpu, 2)) redis_cpu=\(Int((100 * cpu / seconds).rounded()))%"
        line += " redis_cpu_us/change=\(fixed(1e6 * cpu / perChange, 1))"
        // The probe's own commands and bytes are not the nodes': taken out of the per-change
        // figures (its DEL at the end counts as one command; its AOF share as the bytes it sent,
        // which is what Redis logs for an XADD give or take the ID).
        line += " commands/change=\(fixed(Double(end.commands - start.commands - samples.count - 1) / perChange, 2))"
        line += " in_bytes/change=\(Int((Double(end.inputBytes - start.inputBytes - probed.sent) / perChange).rounded()))"
        line += " out_bytes/change=\(Int((Double(end.outputBytes - start.outputBytes - probed.received) / perChange).rounded()))"
        if end.aofBytes > 0 {
            line += " aof_bytes/change=\(Int((Double(end.aofBytes - start.aofBytes - probed.sent) / perChange).rounded()))"
        }
        if let memory = connection.command(["MEMORY", "USAGE", streamKey, "SAMPLES", "0"])?.integer,
            let length = connection.command(["XLEN", streamKey])?.integer, length > 0
        {
            line += " stream_bytes/entry=\(memory / length) stream_entries=\(length)"
        }
        var calls: [String] = []
        for (name, stats) in end.commandStats.sorted(by: { $0.key < $1.key }) {
            let before = start.commandStats[name] ?? (0, 0)
            let count = stats.calls - before.calls
            guard count > 0, name != "info", name != "xrevrange", name != "memory|usage", name != "xlen" else { continue }
            calls.append("\(name):\(count)/\(stats.usec - before.usec)us")
        }
        line += " calls=" + calls.joined(separator: ",")
        if !samples.isEmpty {
            func percentile(_ fraction: Double) -> Double {
                Double(samples[min(samples.count - 1, Int(fraction * Double(samples.count)))]) / 1e6
            }
            line += " append_rtt_p50=\(fixed(percentile(0.5), 2))ms append_rtt_p99=\(fixed(percentile(0.99), 2))ms"
            line += " probes=\(samples.count)"
        }
        return line
    }
}
