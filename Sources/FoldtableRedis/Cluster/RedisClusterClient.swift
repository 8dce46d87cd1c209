import Dispatch
import Glibc
import Synchronization

/// A client of a Redis Cluster, on top of one ``RedisClient`` per master (hiredis 0.14 knows
/// nothing of clusters): it learns the slot map with `CLUSTER SLOTS`, sends each command to the
/// master of its slot, follows `MOVED`, `ASK` and `TRYAGAIN` (``RedisClusterRoute``), and
/// refreshes the map when a redirection or an unreachable master shows it is out of date.
///
/// Callers name the slot of each command (`RedisHashSlot.slot(of:)` of its key): every key of a
/// session shares its hash tag, so a session's commands, pipelines and transactions have one.
/// The guarantees of ``RedisClient`` hold per master: pipelining (commands queued together go in
/// one round trip), and never sending a command twice. A redirected command did not run, so it
/// is sent again where the cluster says; a transaction refused for a redirection (`EXECABORT`:
/// nothing ran) is sent again whole.
///
/// Commands sent before the first map is known wait for it; if no seed answers they fail with
/// ``RedisError/notConnected(_:)``, like commands of a ``RedisClient`` without a connection.
/// Completions run through `deliver`, as with ``RedisClient``.
public final class RedisClusterClient: Sendable {
    /// Where the cluster is, and how to talk to each of its masters.
    public struct Options: Sendable {
        /// Nodes asked for the slot map (any node of the cluster answers for all of it).
        public var seeds: [RedisNodeAddress]
        /// For every master's connection: credentials, timeouts, backoff, client name. Its host
        /// and port are replaced by each master's; the database is always 0 (a cluster has one).
        public var node: RedisClient.Options
        /// Redirections one command follows before it fails. Default 5.
        public var maxRedirections = 5

        public init(seeds: [RedisNodeAddress], node: RedisClient.Options) {
            self.seeds = seeds
            self.node = node
        }

        /// Reads `[redis://[[user]:password@]]host[:port][,host[:port]...]` (`--redis-cluster`): the
        /// seeds, and the credentials every master is asked with (as in a Redis URL, percent
        /// encoded). Throws one line naming what is wrong.
        public init(parsing text: String) throws(RedisURL.ParseError) {
            var rest = Substring(text)
            if rest.hasPrefix("redis://") { rest = rest.dropFirst("redis://".count) }
            if text.contains("://") && !text.hasPrefix("redis://") {
                throw RedisURL.ParseError(message: "a Redis Cluster's nodes are host:port,... or redis://[[user]:password@]host:port,...")
            }
            var credentials = ""
            if let at = rest.lastIndex(of: "@") {
                credentials = String(rest[...at])
                rest = rest[rest.index(after: at)...]
            }
            var seeds: [RedisNodeAddress] = []
            for item in rest.split(separator: ",", omittingEmptySubsequences: false) {
                let trimmed = item.trimmingPrefixAndSuffix(" ")
                // Each node read as a Redis URL's host and port: the same rules (IPv6 in brackets, port 6379 by default).
                let url = try RedisURL(parsing: "redis://" + trimmed)
                guard !trimmed.isEmpty, !trimmed.contains("/") else {
                    throw RedisURL.ParseError(message: "\"\(trimmed)\" is not host:port (no database: a cluster has only 0)")
                }
                seeds.append(RedisNodeAddress(host: url.host, port: url.port))
            }
            guard !seeds.isEmpty else { throw RedisURL.ParseError(message: "a Redis Cluster needs at least one host:port") }
            let first = seeds[0]
            self.init(seeds: seeds, node: RedisClient.Options(url: try RedisURL(parsing: "redis://" + credentials + first.description)))
        }
    }

    private struct State {
        var map = RedisSlotMap()
        /// A map was read at least once.
        var known = false
        var clients: [RedisNodeAddress: RedisClient] = [:]
        var refreshing = false
        /// Sends made before the first map, run when it comes (or failed when it cannot).
        var waiting: [@Sendable (RedisError?) -> Void] = []
        var refreshes: UInt64 = 0
        var closed = false
        /// Each master's connection state, as its client last reported it.
        var nodeStates: [RedisNodeAddress: RedisClient.State] = [:]
        /// Refreshes failed in a row, for the retry's backoff.
        var failedRefreshes = 0
        /// A timer will call ``refresh()``: one at a time, however many ask.
        var refreshScheduled = false
        /// When the last refresh started (monotonic ms), for the rate limit.
        var refreshStartedAt: UInt64?
    }

    /// Refreshes start at most this often: a burst of redirections reads the map once.
    static let refreshGapMs: UInt64 = 250
    /// The longest wait before a failed refresh is tried again.
    static let refreshRetryMaxMs: UInt64 = 5_000

    private let options: Options
    private let deliver: RedisClient.Deliver
    private let stateChanged: @Sendable (RedisNodeAddress, RedisClient.State) -> Void
    private let aggregateChanged: @Sendable (RedisClient.State) -> Void
    private let state = Mutex(State())
    /// The last state ``aggregateChanged`` was told (taken before `state`, never after).
    private let reported = Mutex<RedisClient.State?>(nil)

    /// Starts reading the slot map at once. `stateChanged` hears each master connection's
    /// transitions; `aggregateChanged` the cluster's as one: connected while the map is known and
    /// every master that serves slots is connected (delivered like completions).
    public init(
        _ options: Options, deliver: @escaping RedisClient.Deliver = { $0() },
        stateChanged: @escaping @Sendable (RedisNodeAddress, RedisClient.State) -> Void = { _, _ in },
        aggregateChanged: @escaping @Sendable (RedisClient.State) -> Void = { _ in }
    ) {
        self.options = options
        self.deliver = deliver
        self.aggregateChanged = aggregateChanged
        self.stateChanged = stateChanged
        refresh()
    }

    /// Tells ``aggregateChanged`` when the cluster's state as one changed: a master that serves
    /// slots and is not connected makes it disconnected, naming that master. Only transitions,
    /// like ``RedisClient``'s reports. Worked out and told under `reported`: masters report from
    /// their own threads, and two reports told outside a lock could arrive in the wrong order
    /// (a stale "disconnected" after "connected" would leave the cluster unavailable).
    private func reportAggregate() {
        reported.withLock { last in
            let now = state.withLock { state -> RedisClient.State in
                guard state.known else { return .disconnected(reason: "no slot map yet") }
                for master in state.map.servingMasters.sorted(by: { $0.description < $1.description }) {
                    switch state.nodeStates[master] {
                    case .connected?: continue
                    case .disconnected(let why)?: return .disconnected(reason: "\(master): \(why)")
                    case nil: return .disconnected(reason: "\(master): not connected yet")
                    }
                }
                return .connected
            }
            let changed: Bool
            switch (last, now) {
            case (.connected?, .connected), (.disconnected?, .disconnected): changed = false
            default: changed = true
            }
            guard changed else { return }
            last = now
            aggregateChanged(now)
        }
    }

    deinit {
        close()
    }

    /// The slot map as last read (and corrected by `MOVED`s since).
    public var slotMap: RedisSlotMap { state.withLock { $0.map } }

    /// Completed refreshes of the map (for tests and `/metrics`).
    public var refreshes: UInt64 { state.withLock { $0.refreshes } }

    /// The client of `node` (made, and connecting, on first use).
    public func client(for node: RedisNodeAddress) -> RedisClient {
        let report: @Sendable (RedisNodeAddress, RedisClient.State) -> Void = { [weak self] node, nodeState in
            guard let self else { return }
            state.withLock { $0.nodeStates[node] = nodeState }
            stateChanged(node, nodeState)
            reportAggregate()
        }
        return state.withLock { state in Self.client(for: node, in: &state, options: options, deliver: deliver, stateChanged: report) }
    }

    private static func client(
        for node: RedisNodeAddress, in state: inout State, options: Options, deliver: @escaping RedisClient.Deliver,
        stateChanged: @escaping @Sendable (RedisNodeAddress, RedisClient.State) -> Void
    ) -> RedisClient {
        if let made = state.clients[node] { return made }
        var nodeOptions = options.node
        nodeOptions.url.host = node.host
        nodeOptions.url.port = node.port
        nodeOptions.url.database = 0
        // After close() nothing may start a connection: a client closed from the start, with no
        // thread. (One made, then closed here, under this lock, waited for its worker thread,
        // which could at that moment be reporting "connected" through `report`, which takes the
        // same lock: the two waited for each other for ever.)
        guard !state.closed else { return RedisClient(closed: nodeOptions, deliver: deliver) }
        let made = RedisClient(nodeOptions, deliver: deliver, stateChanged: { stateChanged(node, $0) })
        state.clients[node] = made
        return made
    }

    /// Sends `command`, whose keys are in `slot`, to that slot's master.
    public func send(_ command: RedisCommand, slot: Int, completion: @escaping RedisClient.Completion) {
        route(
            slot: slot,
            attempt: { client, asking, done in
                guard asking else { return client.send(command, completion: done) }
                client.send([RedisCommand("ASKING"), command]) { results in done(results.last ?? .failure(.closed)) }
            }, decide: { $0 }, finish: completion)
    }

    /// Runs `script` on the master of its keys' slot (`keys` must share one slot).
    public func evaluate(_ script: RedisScript, keys: [String], arguments: [any RedisArgument], completion: @escaping RedisClient.Completion) {
        send(
            RedisCommand(script: script, keys: keys, arguments: arguments), slot: keys.first.map(RedisHashSlot.slot(of:)) ?? 0, completion: completion
        )
    }

    /// Sends `commands`, all with keys in `slot`, as one transaction on its master (see
    /// ``RedisClient/transaction(_:completion:)``); sent again whole when refused for a
    /// redirection, which means none of them ran.
    public func transaction(
        _ commands: [RedisCommand], slot: Int, completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void
    ) {
        guard !commands.isEmpty else { return completion([]) }
        let count = commands.count
        route(
            slot: slot,
            attempt: { client, asking, done in
                guard asking else { return client.transaction(commands, completion: done) }
                // ASKING holds for the whole MULTI ... EXEC (Redis keeps the flag inside a transaction).
                client.send([RedisCommand("ASKING"), RedisCommand("MULTI")] + commands + [RedisCommand("EXEC")]) { results in
                    done(RedisClient.transactionResults(Array(results.dropFirst()), count: count))
                }
            },
            decide: Self.decidingResult,
            finish: { results in
                // A route that failed before any reply has one failure: every command gets it.
                completion(results.count == count ? results : Array(repeating: results.first ?? .failure(.closed), count: count))
            })
    }

    /// The result a transaction's route follows: the first redirection (or `TRYAGAIN`,
    /// `CLUSTERDOWN`) among its commands' results, else the first result.
    static func decidingResult(_ results: [Result<RedisReply, RedisError>]) -> Result<RedisReply, RedisError> {
        for result in results {
            switch result {
            case .success(.error(let message)), .failure(.server(let message)):
                if RedisRedirection(message) != nil || message.hasPrefix("TRYAGAIN") || message.hasPrefix("CLUSTERDOWN") { return result }
            default: continue
            }
        }
        return results.first ?? .failure(.closed)
    }

    /// Drives a ``RedisClusterRoute``: `attempt` sends to a client (after `ASKING` when asked),
    /// `decide` picks the result the route reads, `finish` gets the outcome.
    private func route<Outcome: Sendable>(
        slot: Int, attempt: @escaping @Sendable (RedisClient, Bool, @escaping @Sendable (Outcome) -> Void) -> Void,
        decide: @escaping @Sendable (Outcome) -> Result<RedisReply, RedisError>, finish: @escaping @Sendable (Outcome) -> Void
    ) where Outcome: FailableOutcome {
        let start: @Sendable (RedisError?) -> Void = { [self] error in
            if let error { return deliver { finish(Outcome(failure: error)) } }
            var route = RedisClusterRoute(slot: slot, maxRedirections: options.maxRedirections)
            let step = state.withLock { route.start($0.map) }
            follow(route, step, attempt: attempt, decide: decide, finish: finish)
        }
        let now = state.withLock { state -> RedisError?? in
            if state.closed { return .some(.closed) }
            if state.known { return .some(nil) }
            state.waiting.append(start)
            return .none
        }
        if let now {
            start(now)
        } else {
            // No map yet (no seed answered at start): this send asks again, and the next
            // refresh's end, read or failed, runs or fails it: nothing waits without bound.
            refresh()
        }
    }

    private func follow<Outcome: Sendable>(
        _ route: RedisClusterRoute, _ step: RedisClusterRoute.Step,
        attempt: @escaping @Sendable (RedisClient, Bool, @escaping @Sendable (Outcome) -> Void) -> Void,
        decide: @escaping @Sendable (Outcome) -> Result<RedisReply, RedisError>, finish: @escaping @Sendable (Outcome) -> Void
    ) where Outcome: FailableOutcome {
        switch step {
        case .finished:
            if route.mapIsStale { refresh() }
        case .failed(let error):
            if route.mapIsStale { refresh() }
            deliver { finish(Outcome(failure: error)) }
        case .send(let node, let asking, let delayMs):
            let send: @Sendable () -> Void = { [self] in
                let client = self.client(for: node)
                attempt(client, asking) { [self] outcome in
                    var route = route
                    let next = state.withLock { route.next(after: decide(outcome), map: &$0.map) }
                    if case .finished = next { finish(outcome) }
                    follow(route, next, attempt: attempt, decide: decide, finish: finish)
                }
            }
            if delayMs == 0 {
                send()
            } else {
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(delayMs)), execute: send)
            }
        }
    }

    /// Reads the slot map again (unless a read is under way): from the masters known, then the
    /// seeds, the first that answers. Sends waiting for a first map go on when it comes.
    /// At most one starts per `refreshGapMs` (250 ms); one asked sooner runs when the gap is over.
    public func refresh() {
        let now = Self.monotonicMs()
        var laterMs: UInt64?
        let candidates = state.withLock { state -> [RedisNodeAddress]? in
            guard !state.refreshing, !state.closed else { return nil }
            if let started = state.refreshStartedAt, now < started + Self.refreshGapMs {
                if !state.refreshScheduled {
                    state.refreshScheduled = true
                    laterMs = started + Self.refreshGapMs - now
                }
                return nil
            }
            state.refreshing = true
            state.refreshStartedAt = now
            var seen = Set<RedisNodeAddress>()
            return (state.map.masters + options.seeds).filter { seen.insert($0).inserted }
        }
        if let laterMs { refresh(afterMs: laterMs) }
        guard let candidates else { return }
        ask(candidates[...])
    }

    /// Calls ``refresh()`` after `delayMs` (``State/refreshScheduled`` is set by the caller).
    private func refresh(afterMs delayMs: UInt64) {
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(delayMs))) { [weak self] in
            guard let self else { return }
            state.withLock { $0.refreshScheduled = false }
            refresh()
        }
    }

    private static func monotonicMs() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) * 1_000 + UInt64(spec.tv_nsec) / 1_000_000
    }

    private func ask(_ candidates: ArraySlice<RedisNodeAddress>) {
        guard let node = candidates.first else { return refreshed(nil) }
        client(for: node).send(RedisCommand("CLUSTER", "SLOTS")) { [self] result in
            if case .success(let reply) = result, let map = try? RedisSlotMap(clusterSlots: reply, asked: node), !map.masters.isEmpty {
                refreshed(map)
            } else {
                ask(candidates.dropFirst())
            }
        }
    }

    private func refreshed(_ map: RedisSlotMap?) {
        var retryMs: UInt64?
        let waiting = state.withLock { state -> [@Sendable (RedisError?) -> Void] in
            state.refreshing = false
            if let map {
                state.map = map
                state.known = true
                state.refreshes += 1
                state.failedRefreshes = 0
            } else if !state.closed {
                // Nothing answered (the cluster is not up yet, or cut off): tried again with
                // backoff, so a node started before its cluster still finds it.
                state.failedRefreshes += 1
                if !state.refreshScheduled {
                    state.refreshScheduled = true
                    let shift = UInt64(min(state.failedRefreshes - 1, 5))
                    retryMs = min(Self.refreshGapMs << shift, Self.refreshRetryMaxMs)
                }
            }
            let waiting = state.waiting
            state.waiting = []
            return waiting
        }
        if let retryMs { refresh(afterMs: retryMs) }
        let error: RedisError? = map == nil ? .notConnected("no node of the Redis Cluster answered CLUSTER SLOTS") : nil
        for start in waiting { start(error) }
        if let map {
            // Every master gets its connection now, so the aggregate state covers them all.
            for master in map.servingMasters { _ = client(for: master) }
        }
        reportAggregate()
    }

    /// Closes every master's client (what is queued fails with ``RedisError/closed``).
    public func close() {
        let (clients, waiting) = state.withLock { state in
            state.closed = true
            defer {
                state.clients = [:]
                state.waiting = []
            }
            return (Array(state.clients.values), state.waiting)
        }
        for client in clients { client.close() }
        for start in waiting { start(.closed) }
    }
}

extension Substring {
    /// Without leading and trailing `character`s.
    fileprivate func trimmingPrefixAndSuffix(_ character: Character) -> Substring {
        var trimmed = self
        while trimmed.first == character { trimmed = trimmed.dropFirst() }
        while trimmed.last == character { trimmed = trimmed.dropLast() }
        return trimmed
    }
}

/// An outcome a failed route can produce without a reply: one result, or one per command.
protocol FailableOutcome {
    init(failure: RedisError)
}

extension Result: FailableOutcome where Success == RedisReply, Failure == RedisError {
    init(failure: RedisError) { self = .failure(failure) }
}

extension Array: FailableOutcome where Element == Result<RedisReply, RedisError> {
    /// One failure for the whole transaction; ``RedisClusterClient/transaction(_:slot:completion:)``
    /// hands it to every command.
    init(failure: RedisError) { self = [.failure(failure)] }
}
