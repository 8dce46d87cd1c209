import FoldtableCore
import FoldtableServer
import Glibc
import Synchronization

/// The `Broker` port on Redis: one stream of requests per session
/// (`foldtable:{name}:stream`) and one snapshot hash beside it (`foldtable:{name}:snapshot`:
/// the covered stream ID, the epoch, the table as `TableCheckpoint` writes it, and the events
/// before it members may resume from, as `HistoryCoding` writes them). The braces
/// keep a session's keys in one hash slot, so its scripts run in one place.
///
/// Two ``RedisClient``s, each with a thread of its own: one for commands (appends, opens,
/// snapshots), one for the reader, whose `XREAD BLOCK` holds its connection. Nothing here
/// waits on the service thread: completions and deliveries come back through `post` (the
/// transport's service queue). The reader's loop runs on the reader client's thread; it
/// decodes entries there and posts them, in stream order, per session.
///
/// `@unchecked Sendable`: the reader's thread touches only `positions` (behind its lock) and
/// immutable settings; `followers` and `nextToken` are used on the service thread only (calls
/// of the port, and work the reader posts there).
public final class RedisBroker: Broker, @unchecked Sendable {
    /// How the reader reads.
    public struct Reading: Sendable {
        /// Milliseconds an `XREAD` waits for new entries: also how long a session newly
        /// followed may wait before it is read (it joins the next read). Default 1,000.
        public var blockMs: UInt64 = 1_000
        /// Entries per stream per read. Default 1,000.
        public var count = 1_000
        /// Milliseconds between reads while Redis cannot be reached. Default 250.
        public var retryMs: UInt64 = 250

        public init() {}
    }

    public typealias Post = @Sendable (@escaping @Sendable () -> Void) -> Void

    private let commands: RedisClient
    private let reader: RedisClient
    private let post: Post
    private let limits: TableLimits
    private let reading: Reading
    /// What the reader reads, shared by the service thread (follow, unfollow) and the reader's
    /// thread (the loop): each followed stream's key and last ID read.
    private let positions: Mutex<ReadState>
    /// Service thread only: where each session's entries go.
    private var followers: [String: Follower] = [:]
    private var nextToken: UInt64 = 0
    /// Reports entries that do not decode (dropped on every node alike) and read failures.
    private let report: @Sendable (_ event: String, _ fields: [(String, String)]) -> Void
    /// Presence across nodes: heartbeats over the commands client.
    private let presence: RedisPresence

    private struct Follower {
        let token: UInt64
        let deliver: ([SequencedRequest]) -> Void
        let caughtUp: () -> Void
    }

    private struct ReadState: Sendable {
        var streams: [String: (after: StreamID, token: UInt64)] = [:]
        var running = false
        var closed = false
    }

    public init(
        _ options: RedisClient.Options, limits: TableLimits, reading: Reading = Reading(), post: @escaping Post,
        report: @escaping @Sendable (_ event: String, _ fields: [(String, String)]) -> Void = { _, _ in },
        stateChanged: @escaping @Sendable (RedisClient.State) -> Void = { _ in }
    ) {
        var commandOptions = options
        commandOptions.clientName = options.clientName.map { $0 + "-commands" }
        var readerOptions = options
        readerOptions.clientName = options.clientName.map { $0 + "-reader" }
        commands = RedisClient(commandOptions, deliver: post, stateChanged: stateChanged)
        // The reader's completions run on its own thread: the loop issues the next read there.
        reader = RedisClient(readerOptions)
        self.post = post
        self.limits = limits
        self.reading = reading
        self.report = report
        positions = Mutex(ReadState())
        presence = RedisPresence(commands: commands, report: report)
    }

    deinit {
        close()
    }

    /// Stops the reader and both clients (shutdown).
    public func close() {
        positions.withLock { $0.closed = true }
        reader.close()
        commands.close()
    }

    static func streamKey(_ session: String) -> String { "foldtable:{\(session)}:stream" }
    static func snapshotKey(_ session: String) -> String { "foldtable:{\(session)}:snapshot" }

    // MARK: - Appending

    public func append(session: String, request: SequencedRequest, completion: @escaping (Result<Void, BrokerError>) -> Void) {
        let carried = ServiceThreadOnly(completion)
        commands.xadd(Self.streamKey(session), fields: [StreamField("req", RequestCoding.encode(request))]) { result in
            carried.value(result.map { _ in () }.mapError { BrokerError($0.description, mayHaveRun: $0.mayHaveRun) })
        }
    }

    // MARK: - Opening

    /// Creates the snapshot when asked and none exists, then returns it with every entry after
    /// the ID it covers, in one script: nothing can be trimmed between the two reads.
    private static let openScript = RedisScript(
        """
        local created = 0
        if redis.call('EXISTS', KEYS[1]) == 0 then
          if ARGV[1] == '' then return false end
          redis.call('HSET', KEYS[1], 'ms', '0', 'sq', '0', 'epoch', ARGV[1], 'table', ARGV[2])
          created = 1
        end
        local s = redis.call('HMGET', KEYS[1], 'ms', 'sq', 'epoch', 'table', 'history')
        local entries = redis.call('XRANGE', KEYS[2], '(' .. s[1] .. '-' .. s[2], '+')
        return {s[1], s[2], s[3], s[4], entries, created, s[5] or ''}
        """)

    public func open(session: String, create: BrokeredSession?, completion: @escaping (Result<BrokeredSession?, BrokerError>) -> Void) {
        let carried = ServiceThreadOnly(completion)
        let fresh: [any RedisArgument] = create.map { [$0.epoch, TableCheckpoint.encode($0.table)] } ?? ["", ""]
        let limits = limits
        let report = report
        let counts = presence.counts
        commands.evaluate(Self.openScript, keys: [Self.snapshotKey(session), Self.streamKey(session)], arguments: fresh) { result in
            // Listed by every node from now on (again, if it was made before the listing existed).
            if case .success(let reply) = result, reply != .null { counts.register(session) }
            carried.value(
                result.mapError { BrokerError($0.description) }.flatMap { reply in
                    Result { () throws(BrokerError) -> BrokeredSession? in
                        try Self.opened(reply, limits: limits) { report("history_dropped", [("session", session)]) }
                    }
                })
        }
    }

    /// `historyDropped`: the snapshot's history did not decode; the session opens without it
    /// (members resuming from before the open get a fresh welcome), not with a wrong one.
    private static func opened(_ reply: RedisReply, limits: TableLimits, historyDropped: () -> Void) throws(BrokerError) -> BrokeredSession? {
        if reply == .null { return nil }
        guard let parts = reply.elements, parts.count == 7, let ms = parts[0].integer, let sq = parts[1].integer, let epoch = parts[2].string,
            case .bulk(let tableBytes) = parts[3], let entries = StreamEntry.list(parts[4]), let created = parts[5].integer,
            case .bulk(let historyBytes) = parts[6]
        else { throw BrokerError("the snapshot of the session is not in the expected form") }
        let table: Table
        do {
            table = try TableCheckpoint.decode(tableBytes, limits: limits)
        } catch {
            throw BrokerError("the snapshot of the session does not decode: \(error.message)")
        }
        var requests: [SequencedRequest] = []
        for entry in entries {
            guard let request = try? decode(entry, limits: limits) else { continue }
            requests.append(request)
        }
        let position = ms == 0 && sq == 0 ? "" : StreamID(milliseconds: UInt64(ms), sequence: UInt64(sq)).description
        var history: [HistoryEntry] = []
        do {
            history = try HistoryCoding.decode(historyBytes)
        } catch {
            historyDropped()
        }
        var session = BrokeredSession(epoch: epoch, table: table, position: position, requests: requests, history: history)
        session.created = created == 1
        return session
    }

    private static func decode(_ entry: StreamEntry, limits: TableLimits) throws(ProtocolError) -> SequencedRequest {
        guard let bytes = entry["req"] else { throw ProtocolError(.invalidValue, "the entry has no request", field: "req") }
        return try RequestCoding.decode(bytes, position: entry.id.description, limits: limits)
    }

    // MARK: - Snapshots

    /// Writes the snapshot (table and history in one `HSET`) when it covers a later ID than the
    /// stored one, then trims the stream to `keep` entries before that ID (and everything after it).
    private static let snapshotScript = RedisScript(
        """
        local ms = tonumber(redis.call('HGET', KEYS[1], 'ms') or '-1')
        local sq = tonumber(redis.call('HGET', KEYS[1], 'sq') or '-1')
        local nms = tonumber(ARGV[1])
        local nsq = tonumber(ARGV[2])
        if not (nms > ms or (nms == ms and nsq > sq)) then return 0 end
        redis.call('HSET', KEYS[1], 'ms', ARGV[1], 'sq', ARGV[2], 'epoch', ARGV[3], 'table', ARGV[4], 'history', ARGV[6])
        local keep = tonumber(ARGV[5])
        local older = redis.call('XREVRANGE', KEYS[2], ARGV[1] .. '-' .. ARGV[2], '-', 'COUNT', keep + 1)
        if #older > keep then redis.call('XTRIM', KEYS[2], 'MINID', older[#older][1]) end
        return 1
        """)

    public func saveSnapshot(session: String, epoch: String, table: Table, position: String, history: [HistoryEntry], keep: Int) {
        guard let covered = StreamID(position) else { return }
        let report = report
        commands.evaluate(
            Self.snapshotScript, keys: [Self.snapshotKey(session), Self.streamKey(session)],
            arguments: [covered.milliseconds, covered.sequence, epoch, TableCheckpoint.encode(table), max(0, keep), HistoryCoding.encode(history)]
        ) { result in
            if case .failure(let error) = result { report("snapshot_failed", [("session", session), ("reason", error.description)]) }
        }
    }

    // MARK: - Reading

    public func follow(
        session: String, after position: String, deliver: @escaping ([SequencedRequest]) -> Void, caughtUp: @escaping () -> Void
    ) {
        nextToken += 1
        let token = nextToken
        followers[session] = Follower(token: token, deliver: deliver, caughtUp: caughtUp)
        let after = StreamID(position) ?? .zero
        let start = positions.withLock { state -> Bool in
            state.streams[session] = (after, token)
            guard !state.running, !state.closed else { return false }
            state.running = true
            return true
        }
        if start { read() }
    }

    public func unfollow(session: String) {
        followers[session] = nil
        positions.withLock { _ = $0.streams.removeValue(forKey: session) }
    }

    /// One turn of the reader's loop: any thread (the follower's first, then the reader's own).
    private func read() {
        let snapshot = positions.withLock { state -> [(session: String, after: StreamID, token: UInt64)]? in
            guard !state.closed, !state.streams.isEmpty else {
                state.running = false
                return nil
            }
            return state.streams.map { ($0.key, $0.value.after, $0.value.token) }.sorted { $0.session < $1.session }
        }
        guard let snapshot else { return }
        let keys = snapshot.map { (Self.streamKey($0.session), $0.after) }
        reader.xread(keys, count: reading.count, blockMs: reading.blockMs) { [weak self] result in
            self?.readDone(result, snapshot)
        }
    }

    /// Reader's thread: decodes what came, posts it per session, reads again.
    private func readDone(_ result: Result<[StreamBatch], RedisError>, _ streams: [(session: String, after: StreamID, token: UInt64)]) {
        switch result {
        case .failure(let error):
            if case .closed = error { return }
            report("read_failed", [("reason", error.description)])
            usleep(UInt32(min(reading.retryMs, 10_000) * 1_000))
        case .success(let batches):
            let byKey = Dictionary(batches.map { ($0.key, $0.entries) }, uniquingKeysWith: { $1 })
            for stream in streams {
                let entries = byKey[Self.streamKey(stream.session)] ?? []
                var requests: [SequencedRequest] = []
                requests.reserveCapacity(entries.count)
                for entry in entries {
                    do {
                        requests.append(try Self.decode(entry, limits: limits))
                    } catch {
                        report("entry_dropped", [("session", stream.session), ("id", entry.id.description), ("reason", error.message)])
                    }
                }
                if let last = entries.last?.id {
                    positions.withLock { state in
                        if state.streams[stream.session]?.token == stream.token { state.streams[stream.session]?.after = last }
                    }
                }
                let atEnd = entries.count < reading.count
                let session = stream.session
                let token = stream.token
                let decoded = requests
                post { [weak self] in self?.delivered(session, token: token, decoded, atEnd: atEnd) }
            }
        }
        read()
    }

    /// Service thread: hands a read's requests to the session, if it still follows that stream.
    private func delivered(_ session: String, token: UInt64, _ requests: [SequencedRequest], atEnd: Bool) {
        if !requests.isEmpty, let follower = followers[session], follower.token == token { follower.deliver(requests) }
        if atEnd, let follower = followers[session], follower.token == token { follower.caughtUp() }
    }
}

// MARK: - Presence

extension RedisBroker {
    public func beat(
        node: String, expiryMs: UInt64, _ beats: [PresenceBeat], deliver: @escaping (_ session: String, _ others: [NodePresence]) -> Void
    ) {
        presence.beat(node: node, expiryMs: expiryMs, beats, deliver: deliver)
    }

    public func leavePresence(node: String, session: String) {
        presence.leave(node: node, session: session)
    }

    public func leaveAllPresence(node: String, completion: @escaping () -> Void) {
        presence.leaveAll(node: node, completion: completion)
    }

    public func sharedSessions(excluding node: String, completion: @escaping (Result<[String: Int], BrokerError>) -> Void) {
        presence.counts.read(excluding: node, completion: completion)
    }
}
