import Dispatch
import FoldtableCore
import FoldtableServer
import Glibc
import Synchronization

/// The `Broker` port on Redis: one stream of requests per session
/// (`foldtable:{name}:stream`) and one snapshot hash beside it (`foldtable:{name}:snapshot`:
/// the covered stream ID, the epoch, the table as `TableCheckpoint` writes it, and the events
/// before it members may resume from, as `HistoryCoding` writes them, and the number of the
/// covered entry) and a counter (`foldtable:{name}:count`) that numbers the entries: each entry
/// holds its request (`req`) and its number (`n`, one more than the entry before), given by the
/// append's script. The braces keep a session's keys in one hash slot, so its scripts run in
/// one place.
///
/// Why numbers: `XREAD` from an ID that was trimmed away starts at the oldest entry left,
/// without a word. A node that fell behind while connected (stopped, or reading slower than
/// the others write) by more than the entries a snapshot keeps would skip entries. With
/// numbers the reader sees it in what it reads anyway (no extra command per read): an entry
/// whose number is not the last one's plus one ends the follow, and the hub resumes, which
/// reloads the session from the snapshot. Entries without a number (written before numbers)
/// are not checked.
///
/// Two ``RedisClient``s, each with a thread of its own: one for commands (appends, opens,
/// snapshots), one for the reader, whose `XREAD BLOCK` holds its connection. Nothing here
/// waits on the service thread: completions and deliveries come back through `post` (the
/// transport's service queue). The reader's loop runs on the reader client's thread; it
/// decodes entries there and posts them, in stream order, per session.
///
/// While either client is disconnected the broker is unavailable (``isAvailable``): the reader
/// forgets every followed stream the moment its connection drops, so nothing is read after a
/// reconnect before the hub has checked, with ``resume(session:after:epoch:create:completion:)``,
/// that each stream still continues from what it was delivered, and followed it again.
///
/// `@unchecked Sendable`: the reader's thread touches only `positions` and `counts` (behind
/// their locks) and immutable settings; `followers`, `appendsWaiting`, `nextToken` and the connection states are
/// used on the service thread only (calls of the port, and work posted there).
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

    private let commands: any RedisCommands
    /// Reads the streams: one client whose `XREAD BLOCK` holds its connection, or under a
    /// cluster a client per master (see ``readCluster(_:master:)``).
    private let reader: Reader
    private enum Reader {
        case single(RedisClient)
        case cluster(RedisClusterClient)
    }
    /// Under a cluster, the commands' client (for the bells rung after appends).
    private let clusterCommands: RedisClusterClient?
    /// Under a cluster: each master's two connections, up or not, for ``isAvailable(session:)``.
    /// Written by the clients' reports (any thread), so behind a lock of its own.
    private let masters = Mutex<[RedisNodeAddress: (commands: Bool, reader: Bool)]>([:])
    private let post: Post
    private let limits: TableLimits
    private let reading: Reading
    /// What the reader reads, shared by the service thread (follow, unfollow) and the reader's
    /// thread (the loop): each followed stream's key and last ID read.
    private let positions: Mutex<ReadState>
    /// Service thread only: appends made during this turn (see ``flushAppends()``).
    private var appendsWaiting: [WaitingAppend] = []
    /// Service thread only: where each session's entries go.
    private var followers: [String: Follower] = [:]
    private var nextToken: UInt64 = 0
    /// Reports entries that do not decode (dropped on every node alike) and read failures.
    private let report: @Sendable (_ event: String, _ fields: [(String, String)]) -> Void
    /// Told of each change of the broker's availability (service thread), with why it is down.
    private let stateChanged: @Sendable (RedisClient.State) -> Void
    /// Service thread only: each client's state (both start disconnected, until they connect).
    private var commandsState = RedisClient.State.disconnected(reason: "not connected yet")
    private var readerState = RedisClient.State.disconnected(reason: "not connected yet")
    /// Service thread only, under a cluster: each master's availability as last told to the hub,
    /// one posted transition at a time (see ``mastersChanged(_:available:)``).
    private var mastersTold: [RedisNodeAddress: Bool] = [:]
    public private(set) var isAvailable = false
    private var everAvailable = false
    public var availabilityChanged: ((Bool) -> Void)?
    private let counts = Mutex(Counts())

    /// What `/metrics` reports of the broker.
    public struct Counts: Sendable, Equatable {
        /// Times the broker became available again after being unavailable.
        public var reconnects: UInt64 = 0
        /// Appends that failed (nothing appended, or an unknown outcome).
        public var failedAppends: UInt64 = 0
        /// Reads of the streams that failed, and opens or resumes of a session that failed.
        public var failedReads: UInt64 = 0
        /// Stream entries that did not decode (dropped on every node alike).
        public var droppedEntries: UInt64 = 0
    }

    public var counters: Counts { counts.withLock { $0 } }
    /// Presence across nodes: heartbeats over the commands client.
    private let presence: RedisPresence
    /// Under a cluster: a timer will look again for the master of a stream whose slot had none.
    private let homelessRetry = Mutex(false)

    private struct Follower {
        let token: UInt64
        let deliver: ([SequencedRequest]) -> Void
        let caughtUp: (String) -> Void
        let fellBehind: () -> Void
    }

    private struct ReadState: Sendable {
        /// `number`: that of the entry at `after`, which the next entry read must continue
        /// (`nil`: not checked until a numbered entry is read).
        var streams: [String: (after: StreamID, token: UInt64, number: UInt64?)] = [:]
        var running = false
        var closed = false
        /// Under a cluster: the masters whose read loop runs, and the last bell entry each read.
        var masters: Set<RedisNodeAddress> = []
        var bells: [RedisNodeAddress: StreamID] = [:]
    }

    /// A broker on one Redis.
    public convenience init(
        _ options: RedisClient.Options, limits: TableLimits, reading: Reading = Reading(), post: @escaping Post,
        report: @escaping @Sendable (_ event: String, _ fields: [(String, String)]) -> Void = { _, _ in },
        stateChanged: @escaping @Sendable (RedisClient.State) -> Void = { _ in }
    ) {
        self.init(single: options, cluster: nil, limits: limits, reading: reading, post: post, report: report, stateChanged: stateChanged)
    }

    /// A broker on a Redis Cluster: each session's commands go to the master of its hash slot,
    /// and each master's streams are read on a connection of their own. Available while every
    /// master that serves slots is connected.
    public convenience init(
        cluster options: RedisClusterClient.Options, limits: TableLimits, reading: Reading = Reading(), post: @escaping Post,
        report: @escaping @Sendable (_ event: String, _ fields: [(String, String)]) -> Void = { _, _ in },
        stateChanged: @escaping @Sendable (RedisClient.State) -> Void = { _ in }
    ) {
        self.init(single: nil, cluster: options, limits: limits, reading: reading, post: post, report: report, stateChanged: stateChanged)
    }

    private init(
        single: RedisClient.Options?, cluster: RedisClusterClient.Options?, limits: TableLimits, reading: Reading, post: @escaping Post,
        report: @escaping @Sendable (_ event: String, _ fields: [(String, String)]) -> Void,
        stateChanged: @escaping @Sendable (RedisClient.State) -> Void
    ) {
        // The clients are made before `self` is whole: their state reports find it through `link`.
        let link = Link()
        if let cluster {
            var commandOptions = cluster
            commandOptions.node.clientName = cluster.node.clientName.map { $0 + "-commands" }
            var readerOptions = cluster
            readerOptions.node.clientName = cluster.node.clientName.map { $0 + "-reader" }
            let clusterCommands = RedisClusterClient(
                commandOptions, deliver: post, stateChanged: { node, state in link.masterChanged(node, commands: state == .connected) },
                aggregateChanged: { state in link.commandsChanged(state) })
            commands = clusterCommands
            self.clusterCommands = clusterCommands
            reader = .cluster(
                RedisClusterClient(
                    readerOptions, stateChanged: { node, state in link.masterChanged(node, reader: state == .connected) },
                    aggregateChanged: { state in link.readerChanged(state) }))
        } else {
            let options = single ?? RedisClient.Options(url: RedisURL(host: "127.0.0.1"))
            var commandOptions = options
            commandOptions.clientName = options.clientName.map { $0 + "-commands" }
            var readerOptions = options
            readerOptions.clientName = options.clientName.map { $0 + "-reader" }
            commands = RedisClient(commandOptions, deliver: post, stateChanged: { state in link.commandsChanged(state) })
            clusterCommands = nil
            // The reader's completions (and state reports) run on its own thread: the loop issues
            // the next read there.
            reader = .single(RedisClient(readerOptions, stateChanged: { state in link.readerChanged(state) }))
        }
        self.stateChanged = stateChanged
        self.post = post
        self.limits = limits
        self.reading = reading
        self.report = report
        positions = Mutex(ReadState())
        presence = RedisPresence(commands: commands, bySlot: cluster != nil, report: report)
        link.set(self)
    }

    /// A weak way back to the broker for its clients' state reports. The clients connect as
    /// soon as they are made, before the broker is whole, and report each transition once, so a
    /// report made before ``set(_:)`` is kept and passed on then (lost, the broker would stay
    /// unavailable until a reconnect: a node that never becomes writable). Reports are passed
    /// on under the lock, so a later report cannot be overtaken by an early one.
    ///
    /// The lock is a pthread mutex, not `Synchronization.Mutex`: a report reaches the broker's
    /// own properties inside it (its `post`, written by `init` on another thread before
    /// ``set(_:)``), and ThreadSanitizer sees the order a pthread mutex gives but not Mutex's
    /// (`Tests/sanitizers/tsan.supp`), so it reported that read as a race in a CI run.
    private final class Link: @unchecked Sendable {
        // @unchecked: `held` is only touched in `withLock`.
        private struct Held {
            weak var broker: RedisBroker?
            var set = false
            var readerBeforeSet: RedisClient.State?
            /// The commands client's early report, until the service thread takes it.
            var commandsBeforeSet: RedisClient.State?
            /// Under a cluster: each master's connections as reported, kept from the first
            /// report on (also those made before the broker is whole).
            var masters: [RedisNodeAddress: (commands: Bool, reader: Bool)] = [:]
        }
        private var held = Held()
        private let lock: UnsafeMutablePointer<pthread_mutex_t> = {
            let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
            pthread_mutex_init(lock, nil)
            return lock
        }()

        deinit {
            pthread_mutex_destroy(lock)
            lock.deallocate()
        }

        private func withLock<Result>(_ body: (inout Held) -> Result) -> Result {
            pthread_mutex_lock(lock)
            defer { pthread_mutex_unlock(lock) }
            return body(&held)
        }

        func set(_ broker: RedisBroker) {
            let replayCommands = withLock { state -> Bool in
                state.broker = broker
                state.set = true
                broker.masters.withLock { $0 = state.masters }
                // Masters that reported before the broker existed are told like later ones.
                for (node, entry) in state.masters {
                    let available = entry.commands && entry.reader
                    broker.post { [weak broker] in broker?.mastersChanged(node, available: available) }
                }
                if let early = state.readerBeforeSet { broker.readerChanged(early) }
                state.readerBeforeSet = nil
                return state.commandsBeforeSet != nil
            }
            // The commands client's reports run on the service thread (through `post`).
            if replayCommands { broker.post { [self] in replayCommandsReport() } }
        }

        /// Any client's thread (or the service thread): one master's connection of a cluster
        /// went up or down. The broker forgets the streams of a master whose reader went down
        /// (its thread, at once) and re-reads its sessions' availability (service thread).
        func masterChanged(_ node: RedisNodeAddress, commands: Bool? = nil, reader: Bool? = nil) {
            withLock { held in
                var entry = held.masters[node] ?? (false, false)
                if let commands { entry.commands = commands }
                if let reader { entry.reader = reader }
                held.masters[node] = entry
                guard let broker = held.broker else { return }
                broker.masters.withLock { $0 = held.masters }
                if reader == false { broker.forgetStreams(of: node) }
                // The transition as it was here, not the state when the post runs: a reader that
                // dropped and came back before then must still be seen down, then up, so its
                // sessions resume (their streams were just forgotten).
                let available = entry.commands && entry.reader
                broker.post { [weak broker] in broker?.mastersChanged(node, available: available) }
            }
        }

        /// Reader's thread.
        func readerChanged(_ state: RedisClient.State) {
            withLock { held in
                if !held.set { held.readerBeforeSet = state }
                held.broker?.readerChanged(state)
            }
        }

        /// Service thread.
        func commandsChanged(_ state: RedisClient.State) {
            withLock { held in
                guard held.set else {
                    held.commandsBeforeSet = state
                    return
                }
                held.commandsBeforeSet = nil
                held.broker?.commandsChanged(state)
            }
        }

        /// Service thread: the early report, unless a later one came first.
        private func replayCommandsReport() {
            withLock { held in
                guard let early = held.commandsBeforeSet else { return }
                held.commandsBeforeSet = nil
                held.broker?.commandsChanged(early)
            }
        }
    }

    /// Service thread: the commands client's state changed.
    private func commandsChanged(_ state: RedisClient.State) {
        commandsState = state
        availabilityMayHaveChanged()
    }

    /// Reader's thread: a lost connection forgets every followed stream at once, before any
    /// read on a new connection (the hub checks each stream still continues, then follows again).
    private func readerChanged(_ state: RedisClient.State) {
        // Under a cluster each master's streams are forgotten with its own connection (`forgetStreams(of:)`).
        if case .disconnected = state, case .single = reader { positions.withLock { $0.streams.removeAll() } }
        post { [weak self] in
            guard let self else { return }
            readerState = state
            availabilityMayHaveChanged()
        }
    }

    /// Under a cluster, `node`'s reader connection went down: its streams are forgotten at once,
    /// before any read on a new connection, as one Redis' are (see ``readerChanged(_:)``).
    private func forgetStreams(of node: RedisNodeAddress) {
        guard case .cluster(let cluster) = reader else { return }
        let map = cluster.slotMap
        positions.withLock { state in
            state.streams = state.streams.filter { map.owner(ofKey: Self.streamKey($0.key)) != node }
        }
    }

    /// Service thread: a master's connection changed; sessions whose availability changed with
    /// it are told (the hub asks ``isAvailable(session:)`` of each).
    private func mastersChanged(_ node: RedisNodeAddress, available: Bool) {
        mastersTold[node] = available
        guard clusterCommands != nil, isAvailable || everAvailable else { return }
        availabilityChanged?(isAvailable)
    }

    /// Under a cluster, its slot map as the commands' client holds it; `nil` on one Redis.
    public var clusterSlotMap: RedisSlotMap? { clusterCommands?.slotMap }

    /// Whether `session` can be appended to and read now: under a cluster, whether both
    /// connections to the master of its slot are up (a shard that is down makes only its own
    /// sessions read-only); on one Redis, ``isAvailable``.
    public func isAvailable(session: String) -> Bool {
        guard let clusterCommands else { return isAvailable }
        guard let owner = clusterCommands.slotMap.owner(ofKey: Self.streamKey(session)) else { return false }
        return mastersTold[owner] ?? false
    }

    private func availabilityMayHaveChanged() {
        let available = commandsState == .connected && readerState == .connected
        guard available != isAvailable else { return }
        isAvailable = available
        if available {
            if everAvailable { counts.withLock { $0.reconnects += 1 } }
            everAvailable = true
            stateChanged(.connected)
        } else {
            var reasons: [String] = []
            if case .disconnected(let reason) = commandsState { reasons.append("commands: \(reason)") }
            if case .disconnected(let reason) = readerState { reasons.append("reader: \(reason)") }
            stateChanged(.disconnected(reason: reasons.joined(separator: "; ")))
        }
        availabilityChanged?(available)
    }

    deinit {
        close()
    }

    /// The commands connection and the service thread's queue, for what shares them
    /// (``RedisInvites``).
    var commandsClient: any RedisCommands { commands }
    var postToService: Post { post }

    /// Stops the reader and both clients (shutdown).
    public func close() {
        positions.withLock { $0.closed = true }
        switch reader {
        case .single(let client): client.close()
        case .cluster(let client): client.close()
        }
        commands.close()
    }

    static func streamKey(_ session: String) -> String { "foldtable:{\(session)}:stream" }
    static func snapshotKey(_ session: String) -> String { "foldtable:{\(session)}:snapshot" }
    static func countKey(_ session: String) -> String { "foldtable:{\(session)}:count" }

    // MARK: - Appending

    /// Numbers the entry and appends it (`KEYS[1]` the counter, `KEYS[2]` the stream). A
    /// counter that starts again at 1 while the stream holds numbered entries (its key alone was
    /// lost) goes on from the stream's last number instead, so numbers never go back.
    private static let appendScript = RedisScript(
        """
        local n = redis.call('INCR', KEYS[1])
        if n == 1 then
          local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
          if last then
            for i = 1, #last[2], 2 do
              if last[2][i] == 'n' then
                n = tonumber(last[2][i + 1]) + 1
                redis.call('SET', KEYS[1], n)
              end
            end
          end
        end
        return redis.call('XADD', KEYS[2], '*', 'n', n, 'req', ARGV[1])
        """)

    /// Queues the append; it is sent at the end of this turn of the service thread, with every
    /// other append of the turn in one transaction (see `flushAppends`).
    public func append(session: String, request: SequencedRequest, completion: @escaping (Result<String, BrokerError>) -> Void) {
        let command = RedisCommand(
            script: Self.appendScript, keys: [Self.countKey(session), Self.streamKey(session)], arguments: [RequestCoding.encode(request)])
        appendsWaiting.append(WaitingAppend(command: command, completion: ServiceThreadOnly(completion)))
        // Posted work runs after what the service thread is doing now (every member's frame
        // read in this turn), so the appends of one turn go to Redis together.
        if appendsWaiting.count == 1 { post { self.flushAppends() } }
    }

    /// An append made this turn, not yet handed to the commands client.
    private struct WaitingAppend {
        let command: RedisCommand
        let completion: ServiceThreadOnly<(Result<String, BrokerError>) -> Void>
    }

    /// Service thread: the appends of a turn in one transaction, so the readers (this node's and
    /// every other node's) get them in one `XREAD` reply: one post, one apply and one frame
    /// per member for all of them, where one append at a time woke the reader for the first
    /// alone (Redis answers a blocked `XREAD` after each command, and a script is one). Each
    /// append keeps its own reply (its ID, or its error) and completion.
    private func flushAppends() {
        let batch = appendsWaiting
        appendsWaiting = []
        guard !batch.isEmpty else { return }
        let completions = ServiceThreadOnly(batch.map(\.completion.value))
        let finish: @Sendable ([Result<RedisReply, RedisError>]) -> Void = { [weak self] results in
            for (completion, result) in zip(completions.value, results) {
                let replied = result.flatMap { reply -> Result<RedisReply, RedisError> in
                    if case .error(let message) = reply { return .failure(.server(message)) }
                    return .success(reply)
                }
                if case .failure = replied { self?.counts.withLock { $0.failedAppends += 1 } }
                completion(
                    replied.mapError { BrokerError($0.description, mayHaveRun: $0.mayHaveRun) }.flatMap { reply in
                        guard let id = reply.string.flatMap(StreamID.init) else {
                            return .failure(BrokerError("the append did not answer a stream ID"))
                        }
                        return .success(id.description)
                    })
            }
        }
        if batch.count == 1 {
            commands.send([batch[0].command], completion: finish)
        } else {
            commands.transaction(batch.map(\.command), completion: finish)
        }
        if let clusterCommands { ringBells(clusterCommands, slots: Set(batch.map(\.command.slot))) }
    }

    // MARK: - Opening

    /// Creates the snapshot when asked and none exists, then returns it with every entry after
    /// the ID it covers, in one script: nothing can be trimmed between the two reads.
    /// A snapshot made here covers no entry: its number is the one before the stream's first
    /// entry (all of them come after it), or the counter's when the stream is empty.
    private static let openScript = RedisScript(
        """
        local created = 0
        if redis.call('EXISTS', KEYS[1]) == 0 then
          if ARGV[1] == '' then return false end
          redis.call('HSET', KEYS[1], 'ms', '0', 'sq', '0', 'epoch', ARGV[1], 'table', ARGV[2])
        \(numberBeforeStream)
          created = 1
        end
        local s = redis.call('HMGET', KEYS[1], 'ms', 'sq', 'epoch', 'table', 'history', 'n')
        local entries = redis.call('XRANGE', KEYS[2], '(' .. s[1] .. '-' .. s[2], '+')
        return {s[1], s[2], s[3], s[4], entries, created, s[5] or '', s[6] or ''}
        """)

    /// Lua: sets the snapshot's `n` (`KEYS[1]`) to the number before the stream's (`KEYS[2]`)
    /// first entry, or to the counter (`KEYS[3]`, 0 if none) when the stream is empty; no `n`
    /// when that first entry has none.
    private static let numberBeforeStream = """
          local first = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)[1]
          if first then
            for i = 1, #first[2], 2 do
              if first[2][i] == 'n' then redis.call('HSET', KEYS[1], 'n', tonumber(first[2][i + 1]) - 1) end
            end
          else
            redis.call('HSET', KEYS[1], 'n', redis.call('GET', KEYS[3]) or '0')
          end
        """

    public func open(session: String, create: BrokeredSession?, completion: @escaping (Result<BrokeredSession?, BrokerError>) -> Void) {
        let carried = ServiceThreadOnly(completion)
        let fresh: [any RedisArgument] = create.map { [$0.epoch, TableCheckpoint.encode($0.table)] } ?? ["", ""]
        let limits = limits
        let report = report
        let sessionCounts = presence.counts
        commands.evaluate(Self.openScript, keys: [Self.snapshotKey(session), Self.streamKey(session), Self.countKey(session)], arguments: fresh) {
            [weak self] result in
            if case .failure = result { self?.counts.withLock { $0.failedReads += 1 } }
            // Listed by every node from now on (again, if it was made before the listing existed).
            if case .success(let reply) = result, reply != .null { sessionCounts.register(session) }
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
    /// Internal, not private: the Redis fuzz target (Tests/fuzz/FuzzRedis.swift) decodes replies with it.
    static func opened(_ reply: RedisReply, limits: TableLimits, historyDropped: () -> Void) throws(BrokerError) -> BrokeredSession? {
        if reply == .null { return nil }
        // The position's parts are checked for range here, not converted later: a negative one
        // (a damaged key, another version's script) would trap in UInt64(_:).
        guard let parts = reply.elements, parts.count == 8, let ms = parts[0].integer.flatMap(UInt64.init(exactly:)),
            let sq = parts[1].integer.flatMap(UInt64.init(exactly:)), let epoch = parts[2].string,
            case .bulk(let tableBytes) = parts[3], let entries = StreamEntry.list(parts[4]), let created = parts[5].integer,
            case .bulk(let historyBytes) = parts[6], let number = parts[7].string
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
        let position = ms == 0 && sq == 0 ? "" : StreamID(milliseconds: ms, sequence: sq).description
        var history: [HistoryEntry] = []
        do {
            history = try HistoryCoding.decode(historyBytes)
        } catch {
            historyDropped()
        }
        var session = BrokeredSession(epoch: epoch, table: table, position: position, requests: requests, history: history)
        session.number = UInt64(number)
        session.created = created == 1
        return session
    }

    // Internal, not private: the Redis fuzz target (Tests/fuzz/FuzzRedis.swift) decodes replies with it.
    static func decode(_ entry: StreamEntry, limits: TableLimits) throws(ProtocolError) -> SequencedRequest {
        guard let bytes = entry["req"] else { throw ProtocolError(.invalidValue, "the entry has no request", field: "req") }
        var request = try RequestCoding.decode(bytes, position: entry.id.description, limits: limits)
        request.number = number(entry)
        return request
    }

    /// The entry's number (`n`), `nil` when it has none (written before entries were numbered).
    static func number(_ entry: StreamEntry) -> UInt64? {
        guard let digits = entry["n"], !digits.isEmpty, digits.count <= 19 else { return nil }
        var value: UInt64 = 0
        for digit in digits {
            guard digit >= 0x30, digit <= 0x39 else { return nil }
            value = value * 10 + UInt64(digit - 0x30)
        }
        return value
    }

    // MARK: - Resuming after an outage

    /// Whether the stream continues from the follower's position (`ARGV[1]-ARGV[2]`) in its
    /// epoch (`ARGV[3]`): 0 when it does; else the session as `openScript` returns it, after
    /// making it from `ARGV[4]` (a new epoch) and `ARGV[5]` (the node's table) when Redis lost
    /// it (-1 when it did and `ARGV[5]` is empty: the table is sent only then), or taking the
    /// new epoch when Redis lost entries the follower applied (its snapshot covers less than the
    /// follower's position, and that position is gone from the stream).
    /// A position still in the stream means nothing after it was trimmed (trimming cuts a
    /// prefix); position 0-0 continues while the snapshot covers nothing (nothing was trimmed).
    private static let resumeScript = RedisScript(
        """
        local created = 0
        if redis.call('EXISTS', KEYS[1]) == 0 then
          if ARGV[5] == '' then return -1 end
          redis.call('HSET', KEYS[1], 'ms', '0', 'sq', '0', 'epoch', ARGV[4], 'table', ARGV[5])
        \(numberBeforeStream)
          created = 1
        else
          local s = redis.call('HMGET', KEYS[1], 'ms', 'sq', 'epoch')
          local ams = tonumber(ARGV[1])
          local asq = tonumber(ARGV[2])
          local sms = tonumber(s[1])
          local ssq = tonumber(s[2])
          if s[3] == ARGV[3] then
            if ams == 0 and asq == 0 then
              if sms == 0 and ssq == 0 then return 0 end
            else
              local at = ARGV[1] .. '-' .. ARGV[2]
              if #redis.call('XRANGE', KEYS[2], at, at) == 1 then return 0 end
            end
            if sms < ams or (sms == ams and ssq < asq) then redis.call('HSET', KEYS[1], 'epoch', ARGV[4]) end
          end
        end
        local s = redis.call('HMGET', KEYS[1], 'ms', 'sq', 'epoch', 'table', 'history', 'n')
        local entries = redis.call('XRANGE', KEYS[2], '(' .. s[1] .. '-' .. s[2], '+')
        return {s[1], s[2], s[3], s[4], entries, created, s[5] or '', s[6] or ''}
        """)

    public func resume(
        session: String, after position: String, epoch: String, create: BrokeredSession,
        completion: @escaping (Result<BrokeredSession?, BrokerError>) -> Void
    ) {
        resume(session: session, after: StreamID(position) ?? .zero, epoch: epoch, create: create, table: nil, ServiceThreadOnly(completion))
    }

    /// First without the table (a reconnect checks every session the node holds, and encoding
    /// each table would cost its size every time); again with it only when Redis lost the session.
    private func resume(
        session: String, after: StreamID, epoch: String, create: BrokeredSession, table: [UInt8]?,
        _ carried: ServiceThreadOnly<(Result<BrokeredSession?, BrokerError>) -> Void>
    ) {
        let limits = limits
        let report = report
        let arguments: [any RedisArgument] = [after.milliseconds, after.sequence, epoch, create.epoch, table ?? []]
        commands.evaluate(
            Self.resumeScript, keys: [Self.snapshotKey(session), Self.streamKey(session), Self.countKey(session)], arguments: arguments
        ) {
            [weak self] result in
            if case .failure = result { self?.counts.withLock { $0.failedReads += 1 } }
            if case .success(let reply) = result, reply.integer == -1, table == nil, let self {
                // The commands client delivers on the service thread, which owns the table.
                return self.resume(
                    session: session, after: after, epoch: epoch, create: create, table: TableCheckpoint.encode(create.table), carried)
            }
            carried.value(
                result.mapError { BrokerError($0.description) }.flatMap { reply in
                    if reply.integer == 0 { return .success(nil) }
                    return Result { () throws(BrokerError) -> BrokeredSession? in
                        try Self.opened(reply, limits: limits) { report("history_dropped", [("session", session)]) }
                    }
                })
        }
    }

    // MARK: - Snapshots

    /// Writes the snapshot (table and history in one `HSET`) when it covers a later ID than the
    /// stored one, then trims the stream to `keep` entries before that ID (and everything after it).
    /// The snapshot records the number of the covered entry (`n`; none when that entry has none).
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
        local number = nil
        if older[1] and older[1][1] == ARGV[1] .. '-' .. ARGV[2] then
          for i = 1, #older[1][2], 2 do
            if older[1][2][i] == 'n' then number = older[1][2][i + 1] end
          end
        end
        if number then redis.call('HSET', KEYS[1], 'n', number) else redis.call('HDEL', KEYS[1], 'n') end
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

    /// Under a cluster: one entry on the bell of each master that got appends, after them on the
    /// same connection. A master's reader blocks on its bell (an `XREAD` takes keys of one slot
    /// only, so it cannot block on all its sessions' streams at once) and reads the streams when
    /// it rings. A bell lost (a node that died between the append and the bell) costs a delay of
    /// at most ``Reading/blockMs``: every read that times out reads all the streams anyway.
    private func ringBells(_ cluster: RedisClusterClient, slots: Set<Int>) {
        let map = cluster.slotMap
        var rung = Set<String>()
        for slot in slots {
            guard let master = map.owner(of: slot), let bell = Self.bellKey(of: master, in: map), rung.insert(bell).inserted else { continue }
            cluster.send(RedisCommand("XADD", bell, "MAXLEN", "~", 1_000, "*", "s", slot)) { _ in }
        }
    }

    /// The bell of `master`: a key whose hash tag falls in the lowest slot it serves.
    static func bellKey(of master: RedisNodeAddress, in map: RedisSlotMap) -> String? {
        map.firstSlot(of: master).map { "foldtable:{\(RedisClusterTags.tag(for: $0))}:bell" }
    }

    public func follow(
        session: String, after position: String, number: UInt64?, deliver: @escaping ([SequencedRequest]) -> Void,
        caughtUp: @escaping (String) -> Void, fellBehind: @escaping () -> Void
    ) {
        nextToken += 1
        let token = nextToken
        followers[session] = Follower(token: token, deliver: deliver, caughtUp: caughtUp, fellBehind: fellBehind)
        let after = StreamID(position) ?? .zero
        let start = positions.withLock { state -> Bool in
            state.streams[session] = (after, token, number)
            guard !state.running, !state.closed else { return false }
            state.running = true
            return true
        }
        switch reader {
        case .single: if start { read() }
        case .cluster(let cluster): startClusterLoops(cluster)
        }
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
        guard let snapshot, case .single(let reader) = reader else { return }
        let keys = snapshot.map { (Self.streamKey($0.session), $0.after) }
        reader.xread(keys, count: reading.count, blockMs: reading.blockMs) { [weak self] result in
            self?.readDone(result, snapshot)
        }
    }

    /// Reader's thread: decodes what came, posts it (one post for the whole read), reads again.
    private func readDone(_ result: Result<[StreamBatch], RedisError>, _ streams: [(session: String, after: StreamID, token: UInt64)]) {
        switch result {
        case .failure(let error):
            if case .closed = error { return }
            counts.withLock { $0.failedReads += 1 }
            report("read_failed", [("reason", error.description)])
            usleep(UInt32(min(reading.retryMs, 10_000) * 1_000))
        case .success(let batches):
            decodeAndPost(batches, streams)
        }
        read()
    }

    /// Reader's thread: decodes what a read found in `streams` and posts it (one post for the
    /// whole read).
    private func decodeAndPost(_ batches: [StreamBatch], _ streams: [(session: String, after: StreamID, token: UInt64)]) {
        let byKey = Dictionary(batches.map { ($0.key, $0.entries) }, uniquingKeysWith: { $1 })
        var reads: [Read] = []
        reads.reserveCapacity(streams.count)
        for stream in streams {
            let entries = byKey[Self.streamKey(stream.session)] ?? []
            // Only for streams still followed as read: a lost connection forgot them all
            // (see `readerChanged`), and what a read on a new connection found waits for
            // the hub's check that the stream continues. An entry not numbered on from the
            // one before ends the follow: the entries between were trimmed before this read.
            let kept = positions.withLock { state -> (count: Int, number: UInt64?)? in
                // From where this read started only: under a cluster, two masters' loops
                // may both read a stream whose slot just moved, and one of them is too late.
                guard let followed = state.streams[stream.session], followed.token == stream.token, followed.after == stream.after
                else { return nil }
                var number = followed.number
                for (index, entry) in entries.enumerated() {
                    let next = Self.number(entry)
                    if let number, let next, next != number &+ 1 {
                        state.streams[stream.session] = nil
                        return (index, number)
                    }
                    number = next
                }
                if let last = entries.last?.id { state.streams[stream.session] = (last, followed.token, number) }
                return (entries.count, number)
            }
            guard let kept else { continue }
            let gap = kept.count < entries.count
            if gap {
                report(
                    "stream_gap",
                    [
                        ("session", stream.session), ("after", (kept.count == 0 ? stream.after : entries[kept.count - 1].id).description),
                        ("expected", String((kept.number ?? 0) &+ 1)), ("found", Self.number(entries[kept.count]).map(String.init) ?? ""),
                    ])
            }
            var requests: [SequencedRequest] = []
            requests.reserveCapacity(kept.count)
            for entry in entries[..<kept.count] {
                do {
                    requests.append(try Self.decode(entry, limits: limits))
                } catch {
                    counts.withLock { $0.droppedEntries += 1 }
                    report("entry_dropped", [("session", stream.session), ("id", entry.id.description), ("reason", error.message)])
                }
            }
            let through = (entries.last?.id ?? stream.after).description
            reads.append(
                Read(
                    session: stream.session, token: stream.token, requests: requests, atEnd: !gap && entries.count < reading.count,
                    through: through, fellBehind: gap))
        }
        if !reads.isEmpty {
            let done = reads
            post { [weak self] in self?.delivered(done) }
        }
    }

    // MARK: - Reading a cluster

    /// Starts the read loop of every master that serves a followed stream and has none running;
    /// again after ``Reading/retryMs`` while some stream's slot has no known master.
    private func startClusterLoops(_ cluster: RedisClusterClient) {
        let map = cluster.slotMap
        let (start, homeless) = positions.withLock { state -> ([RedisNodeAddress], Bool) in
            guard !state.closed else { return ([], false) }
            var wanted = Set<RedisNodeAddress>()
            var homeless = false
            for session in state.streams.keys {
                if let owner = map.owner(ofKey: Self.streamKey(session)) { wanted.insert(owner) } else { homeless = true }
            }
            let new = wanted.subtracting(state.masters)
            state.masters.formUnion(new)
            return (Array(new), homeless)
        }
        for master in start { readCluster(cluster, master: master) }
        // Every read turn of every master comes here: one retry timer per broker, not one per turn.
        let retry =
            homeless
            && homelessRetry.withLock { scheduled in
                guard !scheduled else { return false }
                scheduled = true
                return true
            }
        if retry {
            cluster.refresh()
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(min(reading.retryMs, 10_000)))) { [weak self] in
                guard let self else { return }
                homelessRetry.withLock { $0 = false }
                startClusterLoops(cluster)
            }
        }
    }

    /// One turn of `master`'s read loop (on that master's reader thread after the first): one
    /// pipeline of an `XREAD` per hash slot of the streams it serves (no block), then an
    /// `XREAD BLOCK` of its bell from the last entry read, which answers at once when an append
    /// rang it since. The loop ends when the master serves no followed stream.
    private func readCluster(_ cluster: RedisClusterClient, master: RedisNodeAddress) {
        let map = cluster.slotMap
        let snapshot = positions.withLock { state -> (streams: [(session: String, after: StreamID, token: UInt64)], bell: StreamID)? in
            let mine = state.streams.filter { map.owner(ofKey: Self.streamKey($0.key)) == master }
            guard !state.closed, !mine.isEmpty else {
                state.masters.remove(master)
                return nil
            }
            return (mine.map { ($0.key, $0.value.after, $0.value.token) }.sorted { $0.session < $1.session }, state.bells[master] ?? .zero)
        }
        guard let snapshot else { return }
        var groups: [Int: [(session: String, after: StreamID, token: UInt64)]] = [:]
        for stream in snapshot.streams { groups[RedisHashSlot.slot(of: stream.session), default: []].append(stream) }
        let ordered = groups.keys.sorted().compactMap { groups[$0] }
        var pipeline: [RedisCommand] = ordered.map { group in
            var arguments: [[UInt8]] = ["XREAD".redisBytes, "COUNT".redisBytes, reading.count.redisBytes, "STREAMS".redisBytes]
            arguments += group.map { Self.streamKey($0.session).redisBytes }
            arguments += group.map(\.after.redisBytes)
            return RedisCommand(arguments: arguments)
        }
        let bell = Self.bellKey(of: master, in: map)
        if let bell {
            pipeline.append(
                RedisCommand(
                    arguments: ["XREAD", "COUNT", "100", "BLOCK", String(reading.blockMs), "STREAMS", bell].map(\.redisBytes) + [
                        snapshot.bell.redisBytes
                    ],
                    blockMs: reading.blockMs))
        }
        cluster.client(for: master).send(pipeline) { [weak self] results in
            self?.readClusterDone(cluster, master: master, groups: ordered, bellRead: bell != nil, results)
        }
    }

    /// Reader's thread (of `master`): delivers what each slot's read found, notes the bell, and
    /// reads again. A slot answered with a redirection moved: the map is read again, and its
    /// streams join the loop of their new master.
    private func readClusterDone(
        _ cluster: RedisClusterClient, master: RedisNodeAddress, groups: [[(session: String, after: StreamID, token: UInt64)]], bellRead: Bool,
        _ results: [Result<RedisReply, RedisError>]
    ) {
        var batches: [StreamBatch] = []
        var read: [(session: String, after: StreamID, token: UInt64)] = []
        var failure: RedisError?
        var moved = false
        for (group, result) in zip(groups, results) {
            switch result {
            case .success(.error(let message)):
                if RedisRedirection(message) != nil || message.hasPrefix("CLUSTERDOWN") || message.hasPrefix("TRYAGAIN") {
                    moved = true
                } else {
                    failure = .server(message)
                }
            case .success(let reply):
                guard let found = RedisClient.streamBatches(reply) else {
                    failure = .unexpectedReply("XREAD answered \(reply.summary)")
                    continue
                }
                batches += found
                read += group
            case .failure(let error):
                failure = error
            }
        }
        if bellRead, results.count == groups.count + 1 {
            switch results[groups.count] {
            case .success(.error(let message)):
                // The bell's slot moved (a map older than the cluster's): read as a group's
                // redirection, so the map is read again and the loop waits, instead of asking the
                // same master for the same bell at once, again and again.
                if RedisRedirection(message) != nil || message.hasPrefix("CLUSTERDOWN") || message.hasPrefix("TRYAGAIN") {
                    moved = true
                } else {
                    failure = .server(message)
                }
            case .success(let reply):
                if let last = RedisClient.streamBatches(reply)?.first?.entries.last?.id { positions.withLock { $0.bells[master] = last } }
            case .failure(let error):
                failure = error
            }
        }
        if let failure {
            if case .closed = failure { return }
            counts.withLock { $0.failedReads += 1 }
            report("read_failed", [("redis", master.description), ("reason", failure.description)])
        }
        if !read.isEmpty { decodeAndPost(batches, read) }
        if moved { cluster.refresh() }
        if failure != nil || moved || !bellRead { usleep(UInt32(min(reading.retryMs, 10_000) * 1_000)) }
        readCluster(cluster, master: master)
        startClusterLoops(cluster)
    }

    /// What one read found in one stream.
    private struct Read: Sendable {
        let session: String
        let token: UInt64
        let requests: [SequencedRequest]
        /// The read found the stream's end, `through` that position.
        let atEnd: Bool
        let through: String
        /// The stream was trimmed past what was read before: no longer followed.
        let fellBehind: Bool
    }

    /// Service thread: hands a read's requests to each session that still follows its stream.
    private func delivered(_ reads: [Read]) {
        for read in reads {
            if !read.requests.isEmpty, let follower = followers[read.session], follower.token == read.token { follower.deliver(read.requests) }
            if read.atEnd, let follower = followers[read.session], follower.token == read.token { follower.caughtUp(read.through) }
            if read.fellBehind, let follower = followers[read.session], follower.token == read.token { follower.fellBehind() }
        }
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
