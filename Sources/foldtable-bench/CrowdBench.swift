// foldtable-bench fanout --crowd: one process of a crowd run, where one session's members are
// more than one process may hold sockets for (20,000 open files here) and are spread over
// several foldtabled nodes (Tests/bench/crowd.sh starts one watcher per node and one author).
//
//   watcher  --clients N (all on its --url), joins them at once, then receives until
//            --stop-file appears; with --reconnect-url, a client whose node went away reconnects
//            with the web client's backoff and jitter (web/protocol.js: 400 ms doubling to 10 s,
//            times 0.75 to 1) to one of those URLs and joins again, as a load balancer would
//            send it to a node still up.
//   author   one client that adds a small collapsed section, then toggles it --toggles times,
//            one every --toggle-interval seconds: expand, collapse, expand, ... (each a real
//            ordered event to every member); with --redis, what Redis spent per change.
//
// Processes share no memory, so each change's id is its send time on CLOCK_MONOTONIC (one clock
// for every process of the machine): any watcher knows a delivery's latency from the event
// alone. With --record FILE a process writes what it saw, one line each, for crowd.py:
//   J <start ns> <all welcomed ns> <clients> <all saw everyone ns, 0: not within 30 s>
//   D <send ns> <receive ns>                      one delivery of a toggle
//   L <close ns>                                  one client lost (its node went away)
//   R <close ns> <welcomed again ns>              one client back after its node went away
//   K <send ns>                                   (author) one toggle sent
import Glibc

/// What one process of a crowd run does.
enum CrowdRole: String {
    case author
    case watcher
}

/// A crowd run's own bookkeeping (kept in ``FanoutLoad``).
struct CrowdState {
    /// Every delivery: the toggle's send time and when it came.
    var deliveries: [(sent: UInt64, received: UInt64)] = []
    /// Clients that reconnect to `reconnectEndpoints` (their node went away).
    var moved: [Bool] = []
    /// When each lost client is due to connect again (0: not waiting), its attempt, and when it
    /// lost its connection (0: connected).
    var due: [UInt64] = []
    var attempts: [Int] = []
    var lostAt: [UInt64] = []
    var waiting: [Int] = []
    /// Clients back after a loss: when they lost the connection and when they were welcomed.
    var rejoins: [(lost: UInt64, welcomed: UInt64)] = []
    /// Every loss (a client lost twice counts twice).
    var losses: [UInt64] = []
    var lost = 0
    /// Reconnects that failed (refused, or an upgrade answered with an error) and were tried again.
    var failedReconnects = 0
    /// Toggles the author sent (their send times).
    var sentToggles: [UInt64] = []
    var random: UInt64 = 0x2545_F491_4F6C_DD1D

    /// A number in [0, 1) (xorshift: the jitter needs no quality, only spread).
    mutating func nextUnit() -> Double {
        random ^= random << 13
        random ^= random >> 7
        random ^= random << 17
        return Double(random >> 11) / Double(1 << 53)
    }
}

extension FanoutLoad {
    /// The server client `index` connects to now: its own node, or after its node went away one
    /// of the reconnect URLs.
    func endpoint(_ index: Int) -> (host: String, port: UInt16, path: String) {
        if !crowd.moved.isEmpty && crowd.moved[index] {
            // Each attempt at the next node, as a load balancer skips one that refused.
            let attempt = crowd.attempts.isEmpty ? 0 : crowd.attempts[index]
            return options.reconnectEndpoints[(index + attempt) % options.reconnectEndpoints.count]
        }
        return options.endpoint(index)
    }

    /// A connect or upgrade that failed: the end of the run, unless lost clients reconnect.
    mutating func connectFailed(_ index: Int, _ reason: String) {
        guard !options.reconnectEndpoints.isEmpty, crowd.lostAt.count == clients, crowd.lostAt[index] != 0 else {
            fail("client \(index): \(reason)")
        }
        if crowd.failedReconnects == 0 { printError("client \(index): a reconnect failed: \(reason)") }
        crowd.failedReconnects += 1
        markClosed(index, code: 1006)
    }

    /// Called by `markClosed`: a watcher's client whose node went away waits and reconnects.
    mutating func crowdLost(_ index: Int, now: UInt64) {
        guard options.crowd == .watcher, !options.reconnectEndpoints.isEmpty, crowd.due.count == clients else { return }
        let connection = connections + index
        if connection.pointee.welcomed {
            connection.pointee.welcomed = false
            welcomed -= 1
        }
        if crowd.lostAt[index] == 0 {
            crowd.lostAt[index] = now
            crowd.lost += 1
            crowd.losses.append(now)
        }
        crowd.moved[index] = true
        // web/protocol.js: min(10 s, 400 ms · 2^attempt) · (0.75 + random / 4).
        let attempt = crowd.attempts[index]
        crowd.attempts[index] = attempt + 1
        let base = min(10_000.0, 400.0 * Double(1 << min(attempt, 10)))
        let delayMs = base * (0.75 + crowd.nextUnit() / 4)
        crowd.due[index] = now + UInt64(delayMs * 1e6)
        crowd.waiting.append(index)
    }

    /// Starts the reconnects that are due.
    private mutating func reconnectDue(now: UInt64) {
        guard !crowd.waiting.isEmpty else { return }
        let waiting = crowd.waiting
        crowd.waiting = []
        var still: [Int] = []
        for index in waiting {
            guard crowd.due[index] <= now else {
                still.append(index)
                continue
            }
            crowd.due[index] = 0
            let connection = connections + index
            connection.pointee.state = .idle
            connection.pointee.inputUsed = 0
            connection.pointee.outputUsed = 0
            connection.pointee.outputSent = 0
            connection.pointee.fragmentUsed = 0
            connection.pointee.watchingWrites = false
            handshaking += 1
            startConnect(index)
        }
        // A connect that failed at once is already waiting again (crowdLost appended it).
        crowd.waiting += still
    }

    /// A client was welcomed: after a loss, it is back.
    mutating func crowdWelcomed(_ index: Int, now: UInt64) {
        guard crowd.lostAt.count == clients, crowd.lostAt[index] != 0 else { return }
        crowd.rejoins.append((crowd.lostAt[index], now))
        crowd.lostAt[index] = 0
        crowd.attempts[index] = 0
    }

    /// One event of a crowd run: its id is the toggle's send time (the setup's ids are not numbers).
    @inline(__always)
    mutating func crowdDelivery(_ index: Int, _ number: Int, now: UInt64) {
        guard number >= 0 else {
            if number == -1 { setupSeen += 1 } else { unexpected += 1 }
            return
        }
        deliveries += 1
        crowd.deliveries.append((UInt64(number), now))
        histogram.record(nanoseconds: now &- UInt64(number))
    }

    /// Runs one process of a crowd run; returns the exit status.
    mutating func runCrowd(_ role: CrowdRole) -> Int32 {
        switch role {
        case .author: return runCrowdAuthor()
        case .watcher: return runCrowdWatcher()
        }
    }

    private mutating func runCrowdWatcher() -> Int32 {
        crowd.moved = Array(repeating: false, count: clients)
        crowd.due = Array(repeating: 0, count: clients)
        crowd.attempts = Array(repeating: 0, count: clients)
        crowd.lostAt = Array(repeating: 0, count: clients)
        crowd.deliveries.reserveCapacity(clients * 32)
        var record: [String] = []
        let memoryBefore = options.serverPID.flatMap(residentKiB)
        let cpuStart = serverCPUSeconds()
        let ownStart = ownCPUSeconds()
        let start = monotonicNanos()
        connectAll()
        let joined = monotonicNanos()
        // Presence: each node counts its own members and hears the others' counts through Redis
        // beats; every client here has seen everyone when a diff counted the whole session.
        var seen: UInt64 = 0
        if options.crowdMembers != Int.max {
            let everyone = clients
            if pollUntil(timeout: 30, { $0.seeingEveryone >= everyone }) { seen = monotonicNanos() }
        }
        record.append("J \(start) \(joined) \(clients) \(seen)")
        var line = "crowd watcher: joins: clients=\(clients) welcomed_s=\(fixed(Double(joined - start) / 1e9, 2))"
        line += seen > 0 ? " everyone_seen_s=\(fixed(Double(seen - start) / 1e9, 2))" : " everyone_seen_s=never"
        // Presence diffs per member while the crowd arrived: what the gather bounds.
        line += " presence_per_member=\(fixed(Double(presenceSeen) / Double(max(1, clients)), 1))"
        if let before = cpuStart, let after = serverCPUSeconds() { line += " node_cpu_s=\(fixed(after - before, 2))" }
        line += " gen_cpu_s=\(fixed(ownCPUSeconds() - ownStart, 2))"
        if let before = memoryBefore, let after = options.serverPID.flatMap(residentKiB) {
            line += " rss_before_mb=\(fixed(Double(before.now) / 1024, 1)) rss_joined_mb=\(fixed(Double(after.now) / 1024, 1))"
            line += " per_member_kib=\(fixed(Double(after.now - before.now) / Double(clients), 1))"
        }
        emit(line)

        // Receive until the script says the author is done, then a second more for stragglers.
        let deadline = monotonicNanos() + UInt64(options.crowdTimeout * 1e9)
        var lastCheck: UInt64 = 0
        var allBack = false
        while true {
            let now = monotonicNanos()
            if now >= deadline {
                printError("no --stop-file within \(Int(options.crowdTimeout)) s")
                break
            }
            if now - lastCheck > 100_000_000 {
                lastCheck = now
                if let stop = options.stopFile, access(stop, F_OK) == 0 { break }
            }
            reconnectDue(now: now)
            poll(timeoutMilliseconds: 20)
            if crowd.lost > 0 && !allBack && crowd.rejoins.count == crowd.lost {
                allBack = true
                let first = crowd.rejoins.map(\.lost).min() ?? now
                emit("crowd watcher: all back: lost=\(crowd.lost) seconds=\(fixed(Double(monotonicNanos() - first) / 1e9, 2))")
            }
        }
        pollUntil(timeout: 3, quiet: 1) { _ in false }

        for delivery in crowd.deliveries { record.append("D \(delivery.sent) \(delivery.received)") }
        for lost in crowd.losses { record.append("L \(lost)") }
        for rejoin in crowd.rejoins { record.append("R \(rejoin.lost) \(rejoin.welcomed)") }
        writeRecord(record)
        let back = crowd.rejoins.count
        var summary = "crowd watcher: deliveries=\(deliveries) p50=\(fixed(histogram.percentileMilliseconds(0.5), 2))ms"
        summary +=
            " p99=\(fixed(histogram.percentileMilliseconds(0.99), 2))ms lost=\(crowd.lost) back=\(back) closed=\(closedCount) failed_reconnects=\(crowd.failedReconnects)"
        summary += " server_errors=\(serverErrors) unexpected=\(unexpected)"
        emit(summary)
        // A close on a node that stayed up (no reconnect URLs) is a broken run.
        let unexpectedCloses = options.reconnectEndpoints.isEmpty && closedCount > 0
        return serverErrors == 0 && back == crowd.lost && deliveries > 0 && !unexpectedCloses ? 0 : 1
    }

    private mutating func runCrowdAuthor() -> Int32 {
        connectAll()
        sendSetup()
        if !pollUntil(timeout: 30, { $0.setupSeen >= 3 }) { fail("the setup changes did not come back") }
        // Redis' own background (every node's presence beats, bell reads) in a quiet window as
        // long as the toggles' one, so what a change costs is the difference: commands Redis was
        // sent (an EVALSHA is one), its CPU, its bytes out.
        let redis = options.redisHost.flatMap { BenchRedisConnection(host: $0, port: options.redisPort) }
        let window = Double(options.toggles) * options.toggleInterval
        // Two seconds first: the author's own join reaches every node's presence beats.
        pollUntil(timeout: 2) { _ in false }
        var quiet: (start: RedisCounters, end: RedisCounters)?
        var quietCPU = 0.0
        if let redis, let start = RedisCounters(redis) {
            let cpuStart = redisCPUSeconds() ?? start.cpuSeconds
            pollUntil(timeout: window) { _ in false }
            if let end = RedisCounters(redis) {
                quiet = (start, end)
                quietCPU = (redisCPUSeconds() ?? end.cpuSeconds) - cpuStart
            }
        }
        let redisStart = redis.flatMap { RedisCounters($0) }
        let redisCPUStart = redisCPUSeconds() ?? redisStart?.cpuSeconds ?? 0
        let nodesStart = options.serverPIDs.map(schedulerSeconds)
        emit("crowd author: toggling")
        let begin = monotonicNanos()
        let interval = UInt64(options.toggleInterval * 1e9)
        for toggle in 0..<options.toggles {
            let due = begin + UInt64(toggle) * interval
            while monotonicNanos() < due { poll(timeoutMilliseconds: Int32(max(1, min(20, (due - monotonicNanos()) / 1_000_000)))) }
            let now = monotonicNanos()
            crowd.sentToggles.append(now)
            var message = Array(#"{"type":"toggle","section":"s1","id":"\#(now)"}"#.utf8)
            message.withUnsafeMutableBufferPointer {
                queueFrame(0, opcode: 0x1, payload: $0.baseAddress!, count: $0.count)  // safe: a message is never empty
            }
            flush(0)
        }
        // The last toggle's interval runs out too, so both Redis windows are as long.
        let end = begin + UInt64(options.toggles) * interval
        while monotonicNanos() < end { poll(timeoutMilliseconds: 20) }
        let redisEnd = redis.flatMap { RedisCounters($0) }
        let busyCPU = (redisCPUSeconds() ?? redisEnd?.cpuSeconds ?? 0) - redisCPUStart
        let toggles = options.toggles
        pollUntil(timeout: 10) { $0.deliveries >= toggles }
        let seconds = Double(end - begin) / 1e9
        var line = "crowd author: toggles=\(options.toggles) back=\(deliveries) seconds=\(fixed(seconds, 1))"
        line += " own_p50=\(fixed(histogram.percentileMilliseconds(0.5), 2))ms own_p99=\(fixed(histogram.percentileMilliseconds(0.99), 2))ms"
        for (number, (start, end)) in zip(nodesStart, options.serverPIDs.map(schedulerSeconds)).enumerated() {
            guard let start, let end else {
                line += " node\(number)_cpu_s=gone"
                continue
            }
            line += " node\(number)_cpu_s=\(fixed(end.cpu - start.cpu, 2))"
        }
        emit(line)
        if let quiet, let redisStart, let redisEnd {
            let changes = Double(options.toggles)
            let quietCommands = Double(quiet.end.commands - quiet.start.commands - 1)
            let busyCommands = Double(redisEnd.commands - redisStart.commands - 1)
            var redisLine = "crowd author: redis: quiet_commands/s=\(fixed(quietCommands / window, 1))"
            redisLine += " commands/change=\(fixed((busyCommands - quietCommands) / changes, 1))"
            redisLine += " cpu_us/change=\(fixed(1e6 * (busyCPU - quietCPU) / changes, 0))"
            let busyOut = redisEnd.outputBytes - redisStart.outputBytes
            let quietOut = quiet.end.outputBytes - quiet.start.outputBytes
            redisLine += " out_bytes/change=\(fixed(Double(busyOut - quietOut) / changes, 0))"
            redisLine += " quiet_cpu=\(fixed(100 * quietCPU / window, 1))%"
            emit(redisLine)
        }
        writeRecord(crowd.sentToggles.map { "K \($0)" })
        return serverErrors == 0 && deliveries >= toggles ? 0 : 1
    }

    /// Redis' CPU so far from its schedstat (finer than INFO's), when --redis-pid names it.
    private func redisCPUSeconds() -> Double? { options.redisPID.flatMap(schedulerSeconds)?.cpu }

    /// Writes `lines` to --record, if given.
    private func writeRecord(_ lines: [String]) {
        guard let path = options.recordFile else { return }
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { fail("cannot write \(path): errno \(errno)") }
        defer { close(fd) }
        var chunk = ""
        for line in lines {
            chunk += line
            chunk += "\n"
            if chunk.utf8.count > 1 << 20 {
                emit(String(chunk.dropLast()), to: fd)
                chunk = ""
            }
        }
        if !chunk.isEmpty { emit(String(chunk.dropLast()), to: fd) }
    }
}
