import FoldtableCore
import Glibc

/// The node's local hub: every connected client and every resident session, driven by transport
/// events on one service thread (centrifuge's Hub; the transport is the Transport port, storage
/// the SessionStore and EventLog ports).
///
/// Sessions are resident while they have members or work in progress; a session quiet for
/// `idleEvictSecs` is checkpointed and dropped from memory, and loaded again (checkpoint plus
/// log) by the next join. `maxSessions` counts resident sessions.
public final class Hub: TransportDelegate {
    let config: ServerConfig
    let transport: Transport
    let store: SessionStore
    let eventLog: EventLog
    /// The order of sessions shared with other nodes; `nil`: every session is this node's own.
    var broker: Broker? { cluster?.broker }
    let cluster: Cluster?
    let logger: Log
    /// Checks tokens; `nil` = open mode (no tokens, everyone edits).
    let verifier: TokenVerifier?
    /// Wall-clock seconds since 1970, for token expiry.
    let clock: () -> UInt64

    private var clients = ConnectionMap<ClientState>()
    /// The client whose change the hub is handing to its session, while it does: the session's
    /// `accepted` for it then needs no lookup in `clients`.
    private var receiving: ClientState?
    /// Sessions whose changes of this turn wait for its end to go to the log
    /// (``transportTurnEnded()``).
    private var handOversDue: [TableSession] = []
    private var sessions: [String: TableSession] = [:]
    /// Names of every stored session (resident or not), for `list`.
    private var storedNames: Set<String>
    /// Sessions being loaded from the store, with the joins waiting for them.
    /// Sessions being loaded from the store, with what waits for each (joins, API calls).
    private var loading: [String: [(Result<TableSession, ProtocolError>) -> Void]] = [:]
    /// HTTP API changes waiting for their commit, by request number.
    private var apiRequests: [UInt64: (Result<UInt64, ProtocolError>) -> Void] = [:]
    private var nextAPIRequest: UInt64 = 0
    /// `list` answer cache, rebuilt only after a session is created or deleted.
    private var sortedNames: [String]?
    /// With a cluster: the members other nodes hold of every shared session, as the broker last
    /// gave them (``PresenceBroker/sharedSessions(excluding:completion:)``), for the sessions
    /// this node does not hold. Read again by the first listing after each heartbeat, so
    /// listing costs at most one broker read per heartbeat, however many ask.
    private var clusterCounts: [String: Int] = [:]
    private var clusterCountsFresh = false
    /// Listings waiting for that read.
    private var clusterCountsWaiters: [() -> Void] = []
    private var timers: [UInt64: TimerAction] = [:]
    private var nextTimerToken: UInt64 = 1
    private let makeEpoch: () -> String
    /// Shared sessions opened so far, and this process's random name: request origins of a
    /// shared session's core are made unique from them.
    private var sharedOpens: UInt64 = 0
    private let incarnation = Hub.randomEpoch()
    /// Set by ``leaveClusterPresence(completion:)``: the node is stopping and beats no more.
    private var presenceStopped = false
    /// The HTTP endpoints the hub answers (health checks now, the API later).
    public let http: HTTPRouter

    /// What a timer is for.
    enum TimerAction: Equatable {
        case joinDeadline(connection: UInt64)
        /// The member's token expires (then: its grace period ends).
        case tokenExpiry(connection: UInt64)
        case tokenGrace(connection: UInt64)
        case session(name: String, SessionTimer)
        case evict(name: String)
        /// Bring a shared session back in step with its stream again (the last try failed).
        case resume(name: String)
        /// This node's presence heartbeat (with a cluster).
        case presenceBeat
    }

    /// A hub over `store` and `eventLog` (usually one object), which hold `storedNames` already.
    /// `makeEpoch` names session incarnations (random in production, fixed in tests). `ready`
    /// answers `/readyz` (foldtabled asks its ``StoreMonitor``); the hub itself is ready as soon
    /// as the transport hands it requests.
    public init(
        config: ServerConfig, transport: Transport, store: SessionStore, eventLog: EventLog, storedNames: [String], log: Log,
        verifier: TokenVerifier? = nil, clock: @escaping () -> UInt64 = Hub.wallClock, makeEpoch: @escaping () -> String = Hub.randomEpoch,
        ready: @escaping () -> Bool = { true }, residentBytes: @escaping () -> Int = { 0 }, cluster: Cluster? = nil
    ) {
        self.cluster = cluster
        self.residentBytes = residentBytes
        self.verifier = verifier
        self.clock = clock
        self.config = config
        messageLimits = Hub.messageLimits(config)
        self.transport = transport
        finder = RowFinder(serviceQueue: transport.serviceQueue)
        self.store = store
        self.eventLog = eventLog
        self.storedNames = Set(storedNames)
        self.logger = log
        self.makeEpoch = makeEpoch
        http = HTTPRouter(policy: RequestPolicy(config))
        http.addHealthChecks(notReady: { [weak self] in
            if !ready() { return "storage unavailable" }
            if let broker = self?.broker, !broker.isAvailable { return "shared storage (redis) unavailable: shared sessions are read-only" }
            return nil
        })
        cluster?.broker.availabilityChanged = { [weak self] available in self?.brokerAvailability(available) }
        registerGauges()
        api = SessionAPI(hub: self, policy: RequestPolicy(config))
        api?.install(on: http)
        http.add("GET", "/metrics") { [metrics] _, respond in
            respond(
                HTTPResponse(status: 200, headers: ["Content-Type": "text/plain; version=0.0.4; charset=utf-8"], body: Array(metrics.render().utf8)))
        }
        if cluster != nil { _ = armTimer(.presenceBeat, milliseconds: UInt64(config.presenceHeartbeatMs)) }
    }

    /// The HTTP API under /api/v1 (set once `self` exists: it holds the hub).
    private var api: SessionAPI?
    /// Where members' and the API's finds run (off the service thread for large tables).
    let finder: RowFinder

    /// What `/metrics` reports; counted on the service thread as things happen.
    public let metrics = Metrics()
    /// The process's resident memory in bytes (foldtabled reads /proc; tests inject it).
    private let residentBytes: () -> Int

    /// Whether the memory budget (``ServerConfig/memoryBudgetMB``) is spent: then joins and new
    /// sessions are refused, so the process degrades for newcomers instead of dying for everyone.
    private func overMemoryBudget() -> Bool {
        guard config.memoryBudgetMB > 0 else { return false }
        let resident = residentBytes()
        guard resident > config.memoryBudgetMB * 1_048_576 else { return false }
        metrics.memoryRefusals += 1
        log(.warning, "memory_budget", ["resident_mb": String(resident / 1_048_576), "budget_mb": String(config.memoryBudgetMB)])
        return true
    }

    private var memoryBudgetRefusal: ProtocolError {
        ProtocolError(.limitReached, "the server is at its memory budget; try again later")
    }

    private func registerGauges() {
        metrics.gauge("foldtable_connections", "Open WebSocket connections.") { [unowned self] in Double(clients.count) }
        metrics.gauge("foldtable_sessions_resident", "Sessions in memory.") { [unowned self] in Double(sessions.count) }
        metrics.gauge("foldtable_sessions_stored", "Sessions in the store.") { [unowned self] in Double(storedNames.count) }
        metrics.gauge("foldtable_members", "Members of all sessions.") { [unowned self] in Double(sessions.values.reduce(0) { $0 + $1.memberCount }) }
        metrics.gauge("foldtable_resident_bytes", "Resident memory of the process.") { [unowned self] in Double(residentBytes()) }
        metrics.gauge("foldtable_busy_sections", "Sections shown busy to their members.") { [unowned self] in
            Double(sessions.values.reduce(0) { $0 + $1.core.busySections.count })
        }
    }

    /// Seconds since 1970.
    public static func wallClock() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return UInt64(max(0, spec.tv_sec))
    }

    /// Eight random hex digits.
    public static func randomEpoch() -> String {
        let value = UInt32.random(in: .min ... .max)
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: 8 - hex.count) + hex
    }

    /// Members per resident session, for tests and metrics.
    public var sessionMembers: [String: Int] { sessions.mapValues(\.memberCount) }
    /// Names of the sessions held in memory now.
    public var residentSessions: Set<String> { Set(sessions.keys) }

    func log(_ level: Log.Level, _ event: String, _ fields: @autoclosure () -> KeyValuePairs<String, String> = [:]) {
        logger(level, event, fields())
    }

    /// Creates session `name` holding `table` when no session of that name is stored (the demo,
    /// tables loaded from files at start-up). Returns false when one exists already.
    @discardableResult
    public func createSessionIfAbsent(_ name: String, table: Table) -> Bool {
        if let cluster {
            // Whichever node writes it first makes it; the others open that one.
            openShared(name, create: table, cluster) { _ in }
            return true
        }
        guard !storedNames.contains(name), sessions[name] == nil else { return false }
        _ = createSession(name, table: table)
        return true
    }

    private func createSession(_ name: String, table: Table, stored: ((Result<Void, StoreError>) -> Void)? = nil) -> TableSession {
        let epoch = makeEpoch()
        store.create(StoredSession(name: name, epoch: epoch, checkpoint: table)) { [self] result in
            if case .failure(let error) = result { log(.error, "session_create_failed", ["session": name, "reason": error.description]) }
            stored?(result)
        }
        storedNames.insert(name)
        sortedNames = nil
        let session = TableSession(core: SessionCore(name: name, epoch: epoch, table: table, settings: sessionSettings), hub: self)
        sessions[name] = session
        log(.info, "session_created", ["session": name])
        return session
    }

    private var sessionSettings: SessionCore.Settings {
        var settings = SessionCore.Settings()
        settings.historyEvents = config.historyEvents
        settings.welcomeRowBudget = config.welcomeRowBudget
        settings.presenceIntervalMs = UInt64(config.presenceIntervalMs)
        settings.presenceListMax = config.presenceListMax
        settings.welcomeByteBudget = config.streamLowMarkBytes
        settings.streamTimeoutMs = UInt64(config.streamTimeoutSecs) * 1_000
        settings.checkpointEvents = config.checkpointEvents
        settings.staggersCheckpoints = true
        // A transport that reports its turns lets a session's changes of one read share an append.
        settings.handsOverAtOnce = !transport.endsTurns
        settings.chunkRows = config.rowChunkRows
        // Chunks stay well under the refill mark, so one chunk never passes a member's queue cap.
        settings.chunkBytes = min(config.maxBatchBytes, config.streamLowMarkBytes)
        return settings
    }

    private var newTable: Table {
        var options = TableOptions()
        options.busyThresholdMs = config.busyThresholdMs
        return Table(options: options, limits: config.tableLimits)
    }

    // MARK: - Timers

    func armTimer(_ action: TimerAction, milliseconds: UInt64) -> UInt64 {
        let token = nextTimerToken
        nextTimerToken += 1
        timers[token] = action
        transport.armTimer(token: token, milliseconds: milliseconds)
        return token
    }

    func cancelTimer(_ token: UInt64) {
        timers[token] = nil
        transport.cancelTimer(token: token)
    }

    public func timerFired(_ token: UInt64) {
        guard let action = timers.removeValue(forKey: token) else { return }
        switch action {
        case .joinDeadline(let id):
            guard let client = clients[id], client.session == nil, !client.joining else { return }
            client.joinTimer = nil
            log(.info, "close", ["client": client.clientId, "code": String(CloseCode.joinTimeout), "reason": "join timeout"])
            transport.close(client.connection, code: CloseCode.joinTimeout, reason: "no join in time")
        case .tokenExpiry(let id):
            guard let client = clients[id], client.tokenTimer == token else { return }
            transport.send(
                OutboundMessage(
                    ServerMessage.error(
                        ProtocolError(.tokenExpired, "the token expired: send a fresh one with auth within \(config.tokenGraceSecs) s"), id: nil)),
                to: client.connection)
            client.tokenTimer = armTimer(.tokenGrace(connection: id), milliseconds: UInt64(config.tokenGraceSecs) * 1_000)
        case .tokenGrace(let id):
            guard let client = clients[id], client.tokenTimer == token else { return }
            client.tokenTimer = nil
            log(.info, "close", ["client": client.clientId, "code": String(CloseCode.tokenExpired), "reason": "token expired"])
            transport.close(client.connection, code: CloseCode.tokenExpired, reason: "token expired: fetch a new one")
        case .session(let name, let timer):
            sessions[name]?.timerFired(timer, token: token)
        case .evict(let name):
            guard let session = sessions[name], session.evictionTimer == token else { return }
            session.evictionTimer = nil
            evict(session)
        case .resume(let name):
            guard let session = sessions[name], let cluster, cluster.broker.isAvailable else { return }
            resume(session, cluster)
        case .presenceBeat:
            presenceBeat()
            _ = armTimer(.presenceBeat, milliseconds: UInt64(config.presenceHeartbeatMs))
        }
    }

    // MARK: - Session lifecycle

    /// Whether `session` is the one held under its name (not one deleted or evicted meanwhile).
    func isResident(_ session: TableSession) -> Bool { sessions[session.name] === session }

    /// Called after a session handled its inputs: a session left quiet starts its idle clock.
    func sessionSettled(_ session: TableSession) { sessionSettled(session, quiet: session.core.isQuiet) }

    /// The same with `quiet` (`session.core.isQuiet`) told by the session, which read it while
    /// it held its core anyway.
    func sessionSettled(_ session: TableSession, quiet: Bool) {
        // Nothing to arm or cancel (a busy session without a timer: every change): no lookup
        // of the session by name.
        guard quiet != (session.evictionTimer != nil) else { return }
        guard sessions[session.name] === session else { return }
        if quiet {
            if session.evictionTimer == nil {
                session.evictionTimer = armTimer(.evict(name: session.name), milliseconds: UInt64(config.idleEvictSecs) * 1_000)
            }
        } else if let timer = session.evictionTimer {
            cancelTimer(timer)
            session.evictionTimer = nil
        }
    }

    /// Drops a quiet session from memory. Everything it holds is in the log already; the
    /// checkpoint only makes the next load replay less.
    private func evict(_ session: TableSession) {
        guard session.core.isQuiet, sessions[session.name] === session else { return }
        if let timer = session.evictionTimer { cancelTimer(timer) }
        if let broker {
            // The stream holds everything; a snapshot only makes the next open read less.
            if session.core.eventsSinceCheckpoint > 0 {
                broker.saveSnapshot(
                    session: session.name, epoch: session.epoch, table: session.core.committedWithChangeIds, position: session.core.appliedPosition,
                    history: session.core.recentHistory, keep: config.historyEvents)
            }
            broker.unfollow(session: session.name)
            if let cluster { broker.leavePresence(node: cluster.node, session: session.name) }
            sessions[session.name] = nil
            log(.info, "session_evicted", ["session": session.name])
            return
        }
        if session.core.eventsSinceCheckpoint > 0 {
            store.saveCheckpoint(session.name, table: session.core.committedWithChangeIds) { [self, name = session.name] result in
                if case .failure(let error) = result { log(.warning, "checkpoint_failed", ["session": name, "reason": error.description]) }
            }
        }
        sessions[session.name] = nil
        log(.info, "session_evicted", ["session": session.name])
    }

    /// Room for one more resident session: evicts a quiet one when at the limit.
    private func makeRoom() -> Bool {
        if sessions.count < config.maxSessions { return true }
        guard let quiet = sessions.values.first(where: { $0.core.isQuiet }) else { return false }
        evict(quiet)
        return sessions.count < config.maxSessions
    }

    private func loaded(_ name: String, _ result: Result<StoredSession?, StoreError>) {
        let waiting = loading.removeValue(forKey: name) ?? []
        let session: TableSession
        switch result {
        case .success(let stored?) where sessions[name] == nil:
            do {
                session = try restore(stored)
            } catch {
                log(.error, "session_load_failed", ["session": name, "reason": error.description])
                for waiter in waiting { waiter(.failure(ProtocolError(.storageUnavailable, "the session could not be loaded"))) }
                return
            }
            sessions[name] = session
            log(.info, "session_loaded", ["session": name, "seq": String(session.core.committed.seq)])
        case .success:
            // Deleted meanwhile, or loaded by another path: a resident session, else none. Not
            // made again here: whoever waits may not be allowed to create (a viewer's join).
            guard let resident = sessions[name] else {
                for waiter in waiting { waiter(.failure(ProtocolError(.sessionNotFound, "no session is named \"\(name)\"", field: "session"))) }
                return
            }
            session = resident
        case .failure(let error):
            log(.error, "session_load_failed", ["session": name, "reason": error.description])
            for waiter in waiting { waiter(.failure(ProtocolError(.storageUnavailable, "the session could not be loaded; retry later"))) }
            return
        }
        for waiter in waiting { waiter(.success(session)) }
    }

    /// The session `name`: resident, loaded from the store, or (with `create`) made empty when it
    /// exists nowhere. `body` runs at once or when the load is done, on the service thread.
    func withSession(_ name: String, create: Bool, _ body: @escaping (Result<TableSession, ProtocolError>) -> Void) {
        if let session = sessions[name] { return body(.success(session)) }
        if let cluster { return openShared(name, create: create ? newTable : nil, cluster, body) }
        guard create || storedNames.contains(name) else {
            return body(.failure(ProtocolError(.sessionNotFound, "no session is named \"\(name)\"", field: "session")))
        }
        guard makeRoom() else {
            return body(.failure(ProtocolError(.limitReached, "the server holds its maximum of \(config.maxSessions) sessions", field: "session")))
        }
        guard storedNames.contains(name) else { return body(.success(createSession(name, table: newTable))) }
        if loading[name] != nil {
            loading[name]?.append(body)
            return
        }
        loading[name] = [body]
        store.load(name) { [self] result in loaded(name, result) }
    }

    /// A change from the HTTP API, as `author`, into session `name` (which must exist), applied
    /// in the session's one order like a member's; `completion` gets the seq it is durable at
    /// (after the commit), or why not. `id` (the Idempotency-Key) makes retries safe.
    public func submitAPIChange(
        _ change: Change, id: String?, author: Author, session name: String, completion: @escaping (Result<UInt64, ProtocolError>) -> Void
    ) {
        withSession(name, create: false) { [self] result in
            switch result {
            case .failure(let error): completion(.failure(error))
            case .success(let session):
                nextAPIRequest += 1
                apiRequests[nextAPIRequest] = completion
                session.handle(.apiChange(change, id: id, author: author, request: nextAPIRequest))
            }
        }
    }

    /// A session answered an HTTP API change.
    func apiAnswered(_ request: UInt64, _ result: Result<UInt64, ProtocolError>) {
        apiRequests.removeValue(forKey: request)?(result)
    }

    /// Rebuilds a session from its checkpoint and the events logged after it.
    private func restore(_ stored: StoredSession) throws(StoreError) -> TableSession {
        var table = stored.checkpoint
        for logged in stored.events where logged.event.seq > table.seq {
            do {
                try table.applyCommitted(logged.event, request: logged.request)
            } catch {
                throw .corrupt("event \(logged.event.seq) does not replay: \(error.message)")
            }
        }
        let core = SessionCore(
            name: stored.name, epoch: stored.epoch, table: table, recent: stored.events, checkpointSeq: stored.checkpoint.seq,
            settings: sessionSettings)
        return TableSession(core: core, hub: self)
    }

    private func failJoin(_ client: ClientState, _ error: ProtocolError) {
        client.joining = false
        guard client.isOpen else { return }
        refuse(client.connection, error, id: nil)
    }

    // MARK: - Transport events

    public func connectionOpened(_ connection: Connection, peer: String) {
        let client = ClientState(
            connection: connection,
            changes: TokenBucket(ratePerSecond: config.changeRatePerSec, burst: config.changeBurst, now: transport.nowMilliseconds()))
        clients[connection.id] = client
        client.joinTimer = armTimer(.joinDeadline(connection: connection.id), milliseconds: UInt64(config.joinTimeoutMs))
        log(.info, "open", ["client": client.clientId, "peer": peer])
    }

    public func connectionClosed(_ connection: Connection, code: Int) {
        guard let client = clients.removeValue(forKey: connection.id) else { return }
        metrics.closesByCode[code, default: 0] += 1
        if let timer = client.joinTimer { cancelTimer(timer) }
        if let timer = client.tokenTimer { cancelTimer(timer) }
        client.markClosed()
        client.session?.handle(.leave(connection))
        client.session = nil
        log(.info, "closed", ["client": client.clientId, "code": String(code)])
    }

    /// `session` holds changes of this turn that go to the log when the turn ends (once a turn).
    func handOverAtTurnEnd(_ session: TableSession) {
        handOversDue.append(session)
    }

    /// Every session that took changes in this turn hands them to the log, one append each: a
    /// client's changes in flight arrive in one read, and share one append, one commit report
    /// and one trip through the core instead of one each.
    public func transportTurnEnded() {
        var due: [TableSession] = []
        // Until none is due: a session asking during a hand-over is not left for the next turn,
        // which may be a sleep away.
        while !handOversDue.isEmpty {
            swap(&due, &handOversDue)
            for session in due { session.handle(.handOver) }
            due.removeAll(keepingCapacity: true)
        }
        // The storage back for the next turn.
        swap(&due, &handOversDue)
    }

    public func connectionDrained(_ connection: Connection) {
        guard let client = clients[connection.id] else { return }
        client.session?.drained(connection)
    }

    public func connectionReceived(_ connection: Connection, message: UnsafeRawBufferPointer) {
        guard let client = clients[connection.id] else { return }
        metrics.messagesIn += 1
        if client.joining { return holdWhileJoining(client, message) }
        handle(client, message)
    }

    /// At most this many messages, and ``heldWhileJoiningMaxBytes`` bytes, wait for a join to
    /// finish (a session loading from the store or from Redis): what a client sends at once
    /// after `join` fits, and nothing before the welcome grows without bound (Hocuspocus holds
    /// 1,000 messages or 5 MiB before authentication).
    static let heldWhileJoiningMax = 1_000
    static let heldWhileJoiningMaxBytes = 5 << 20

    /// Keeps a message that came during the join for ``releaseHeld(_:)``; past the bounds it is
    /// refused (`limit_reached`, nothing of it applied) and the socket stays open.
    private func holdWhileJoining(_ client: ClientState, _ message: UnsafeRawBufferPointer) {
        guard client.heldWhileJoining.count < Self.heldWhileJoiningMax,
            client.heldWhileJoiningBytes + message.count <= Self.heldWhileJoiningMaxBytes
        else {
            let id = ClientMessage.decode(message, limits: messageLimits).1
            return refuse(
                client.connection, ProtocolError(.limitReached, "too many messages before the welcome; wait for it and send again"), id: id)
        }
        client.heldWhileJoining.append(Array(message))
        client.heldWhileJoiningBytes += message.count
    }

    /// The join is done (welcomed or refused): what came meanwhile is handled now, in order.
    private func releaseHeld(_ client: ClientState) {
        guard !client.heldWhileJoining.isEmpty else { return }
        let held = client.heldWhileJoining
        client.heldWhileJoining = []
        client.heldWhileJoiningBytes = 0
        for (index, message) in held.enumerated() {
            guard client.isOpen, clients[client.connection.id] === client else { return }
            // A held `join` that starts another load: the rest waits for that one in turn.
            if client.joining {
                client.heldWhileJoining = Array(held[index...])
                client.heldWhileJoiningBytes = client.heldWhileJoining.reduce(0) { $0 + $1.count }
                return
            }
            message.withUnsafeBytes { handle(client, $0) }
        }
    }

    private func handle(_ client: ClientState, _ message: UnsafeRawBufferPointer) {
        let connection = client.connection
        let (result, id) = ClientMessage.decode(message, limits: messageLimits)
        // Consumed: a change moves from the decoded message into the session's input instead of
        // being copied (retaining each string) and both destroyed.
        switch consume result {
        case .failure(let error):
            refuse(connection, error, id: id)
        case .success(.list(let token)):
            var grant = client.grant
            if let verifier {
                if let token {
                    guard case .success(let granted) = verifier.verify(token, now: clock()) else {
                        return refuse(connection, ProtocolError(.unauthorized, "the token is not valid", field: "token"), id: nil)
                    }
                    grant = granted
                }
                guard grant != nil else { return refuse(connection, ProtocolError(.unauthorized, "list needs a token", field: "token"), id: nil) }
            }
            let allowed = grant
            withClusterCounts { [self] in
                guard clients[connection.id] === client else { return }
                if sortedNames == nil { sortedNames = storedNames.union(sessions.keys).sorted() }
                let visible = (sortedNames ?? []).lazy.filter { allowed?.allows($0) ?? true }.prefix(1_000)
                let list = visible.map { (name: $0, members: self.listedMembers($0)) }
                transport.send(OutboundMessage(ServerMessage.sessions(Array(list))), to: connection)
            }
        case .success(.join(let request)):
            join(client, request)
        case .success(.auth(let token)):
            reauthorize(client, token)
        case .success(.rename(let name)):
            guard let session = client.session else { return refuse(connection, ProtocolError(.notJoined, "join a session first"), id: id) }
            // A token that names its bearer fixes the name others see on every change; one
            // without `name` leaves it to the member (as the join's name was).
            guard client.grant?.name == nil else {
                return refuse(connection, ProtocolError(.forbidden, "your name comes from your token", field: "name"), id: id)
            }
            guard client.changes.take(now: transport.nowMilliseconds()) else { return refuse(connection, rateLimited, id: id) }
            client.consecutiveErrors = 0
            session.handle(.rename(connection, name: name))
        case .success(.change(let change, let id)):
            guard let session = client.session else { return refuse(connection, ProtocolError(.notJoined, "join a session first"), id: id) }
            if case .setOptions = change, client.role < .owner {
                return refuse(connection, ProtocolError(.forbidden, "only an owner changes the table's options"), id: id)
            }
            guard client.role >= .editor else { return refuse(connection, ProtocolError(.forbidden, "a viewer cannot change the table"), id: id) }
            // One reading of the clock for the rate limit and the core's `now`.
            let now = transport.nowMilliseconds()
            guard client.changes.take(now: now) else { return refuse(connection, rateLimited, id: id) }
            // The id is the author's own: the session's window holds it under the author's scope.
            var key: String?
            if let id {
                do {
                    key = try ChangeIdScope.key(id, scope: client.idScope)
                } catch {
                    return refuse(connection, error, id: id)
                }
            }
            receiving = client
            session.handle(.change(change, id: key, from: connection), now: now)
            receiving = nil
        case .success(.find(let query, let limit, let id)):
            // A read any member may make; it scans the whole table, so it counts against the
            // same rate limit as a change.
            guard let session = client.session else { return refuse(connection, ProtocolError(.notJoined, "join a session first"), id: id) }
            guard client.changes.take(now: transport.nowMilliseconds()) else { return refuse(connection, rateLimited, id: id) }
            session.handle(.find(query: query, limit: limit, id: id, from: connection))
        case .success(.deleteSession):
            guard let session = client.session else { return refuse(connection, ProtocolError(.notJoined, "join a session first"), id: id) }
            guard client.role >= .owner else { return refuse(connection, ProtocolError(.forbidden, "only an owner deletes the session"), id: id) }
            delete(session, by: client, id: id)
        }
    }

    // MARK: - HTTP

    public func claimsHTTPPath(_ path: String) -> Bool { http.claims(path) }

    /// Routes the request; the answer goes back through the transport whenever the route gives
    /// it. One debug line per answer (method, path, status: never the query, headers or body).
    public func httpRequest(_ request: HTTPRequest) {
        http.handle(request) { [self] response in
            metrics.httpRequests[response.status, default: 0] += 1
            let delivered = transport.respond(to: request.id, with: response)
            log(
                .debug, "http",
                [
                    "method": request.method, "path": Self.loggable(request.path), "status": String(response.status), "peer": request.peer,
                    "delivered": delivered ? "yes" : "no",
                ])
        }
    }

    /// A client's text cut to 200 characters for a log line (`Log` escapes its control
    /// characters, a decoded %0A among them, as it does every value's).
    static func loggable(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.prefix(200)))
    }

    public func httpRequestAbandoned(_ id: UInt64) {
        log(.debug, "http_abandoned", ["request": String(id)])
    }

    private var rateLimited: ProtocolError {
        ProtocolError(.rateLimited, "more than \(config.changeRatePerSec) changes a second; slow down")
    }

    /// What client messages are decoded with: made once from `config` (reading it through a
    /// computed property copied the whole configuration, retains and all, for every message).
    let messageLimits: ClientMessage.Limits

    private static func messageLimits(_ config: ServerConfig) -> ClientMessage.Limits {
        var limits = ClientMessage.Limits()
        // Room for a token over its 4 KiB limit, so it is refused as unauthorized (a token), not
        // as too_long (a message); table text is checked against its own, smaller limit.
        limits.json.maxStringBytes = max(config.tableLimits.maxTextBytes, 8_192)
        return limits
    }

    private func join(_ client: ClientState, _ request: JoinRequest) {
        guard client.session == nil, !client.joining else {
            refuse(client.connection, ProtocolError(.alreadyJoined, "this connection already joined a session", field: "session"), id: nil)
            return
        }
        guard !overMemoryBudget() else { return refuse(client.connection, memoryBudgetRefusal, id: nil) }
        var request = request
        if let verifier {
            guard let token = request.token else { return unauthorized(client, "this server needs a token to join") }
            switch verifier.verify(token, now: clock()) {
            case .failure(let refusal):
                return unauthorized(client, refusal.message)
            case .success(let grant):
                guard grant.allows(request.session) else { return unauthorized(client, "the token does not open session \(request.session)") }
                client.grant = grant
                client.role = grant.role
                if let name = grant.name { request.name = name }
                armTokenExpiry(client, grant)
            }
        }
        if let timer = client.joinTimer {
            cancelTimer(timer)
            client.joinTimer = nil
        }
        client.consecutiveErrors = 0
        client.joining = true
        client.idScope = ChangeIdScope.of(member: client.grant?.user, declared: request.idScope, connection: client.connection.id)
        // Only who may make a session, and means to: a viewer's join (or a lookup like
        // `foldtable get`) of a missing name must not leave an empty session behind, nor bring
        // back one an owner just deleted. Everyone is an owner in open mode.
        let create = request.create && client.role >= .owner
        withSession(request.session, create: create) { [self] result in
            switch result {
            case .success(let session):
                client.joining = false
                if client.isOpen { enter(client, session, request) }
            case .failure(let error):
                failJoin(client, error)
            }
            releaseHeld(client)
        }
    }

    private func enter(_ client: ClientState, _ session: TableSession, _ request: JoinRequest) {
        client.session = session
        session.handle(.join(client.connection, request, role: verifier == nil ? nil : client.role.rawValue))
        log(.info, "join", ["client": client.clientId, "session": request.session, "resume": request.since == nil ? "no" : "yes"])
    }

    /// A join that cannot be allowed: an error reply, then a close telling the client not to
    /// retry with the same token.
    private func unauthorized(_ client: ClientState, _ message: String) {
        transport.send(OutboundMessage(ServerMessage.error(ProtocolError(.unauthorized, message, field: "token"), id: nil)), to: client.connection)
        log(.info, "close", ["client": client.clientId, "code": String(CloseCode.unauthorized), "reason": "unauthorized"])
        transport.close(client.connection, code: CloseCode.unauthorized, reason: "unauthorized")
    }

    /// The token's end (plus the verifier's leeway) arms the expiry warning.
    private func armTokenExpiry(_ client: ClientState, _ grant: AccessGrant) {
        if let timer = client.tokenTimer { cancelTimer(timer) }
        let now = clock()
        // Saturating: `exp` is the token's (up to 2^63-1), so the sum and the product may overflow;
        // a far-off end only needs a far-off timer (the transport clamps it further).
        let end = grant.expires.addingReportingOverflow(tokenLeewaySeconds)
        let seconds = end.overflow ? UInt64.max - now : end.partialValue > now ? end.partialValue - now : 0
        let milliseconds = seconds.multipliedReportingOverflow(by: 1_000)
        client.tokenTimer = armTimer(
            .tokenExpiry(connection: client.connection.id), milliseconds: milliseconds.overflow ? .max : milliseconds.partialValue)
    }

    /// Tokens are accepted this long past their `exp` (clocks differ); so is a member's session.
    private let tokenLeewaySeconds: UInt64 = 60

    /// A fresh token from a member: same session, new expiry (and role, if it changed).
    private func reauthorize(_ client: ClientState, _ token: String) {
        guard let verifier else {
            return refuse(client.connection, ProtocolError(.invalidValue, "this server takes no tokens", field: "token"), id: nil)
        }
        guard let session = client.session else { return refuse(client.connection, ProtocolError(.notJoined, "join a session first"), id: nil) }
        guard case .success(let grant) = verifier.verify(token, now: clock()), grant.allows(session.name) else {
            return refuse(client.connection, ProtocolError(.unauthorized, "the token is not valid for this session", field: "token"), id: nil)
        }
        // A fresh token renews who joined; it does not make the connection someone else (whose
        // change ids, name and presence were set at the join): that takes a join of its own.
        guard grant.user == client.grant?.user else {
            return refuse(
                client.connection, ProtocolError(.unauthorized, "the token is for another user; join again to be them", field: "token"), id: nil)
        }
        client.grant = grant
        client.role = grant.role
        client.consecutiveErrors = 0
        armTokenExpiry(client, grant)
        transport.send(OutboundMessage(ServerMessage.authorized(role: grant.role.rawValue, expires: grant.expires)), to: client.connection)
    }

    /// Deletes a session and its history once the store has; every member is closed with 4501.
    private func delete(_ session: TableSession, by client: ClientState, id: String?) {
        deleteSession(session, by: client.clientId) { [self] result in
            if case .failure(let error) = result, client.isOpen { refuse(client.connection, error, id: id) }
        }
    }

    /// Deletes `session` and its history; once the store has, every member is closed with 4501.
    /// `by` names who asked, for the log.
    func deleteSession(_ session: TableSession, by: String, completion: @escaping (Result<Void, ProtocolError>) -> Void) {
        guard cluster == nil else {
            return completion(.failure(ProtocolError(.invalidValue, "a session shared with other nodes cannot be deleted yet")))
        }
        // Changes of this turn that wait for its end go to the log first, as they arrived:
        // committed, then deleted with the session, rather than refused behind the delete.
        if session.core.awaitsHandOver { session.handle(.handOver) }
        store.delete(session.name) { [self] result in
            switch result {
            case .failure(let error):
                log(.warning, "delete_failed", ["session": session.name, "reason": error.description])
                completion(.failure(ProtocolError(.storageUnavailable, "the session could not be deleted; retry later")))
            case .success:
                if sessions[session.name] === session { sessions[session.name] = nil }
                if let timer = session.evictionTimer { cancelTimer(timer) }
                storedNames.remove(session.name)
                sortedNames = nil
                for member in clients.values where member.session === session {
                    transport.close(member.connection, code: CloseCode.sessionDeleted, reason: "the session was deleted")
                }
                log(.info, "session_deleted", ["session": session.name, "by": by])
                completion(.success(()))
            }
        }
    }

    /// Creates session `name` holding `table` (the HTTP API's import), answering once the store
    /// has it; refused when a session of that name exists.
    func createSession(_ name: String, table: Table, completion: @escaping (Result<Void, ProtocolError>) -> Void) {
        guard sessions[name] == nil, !storedNames.contains(name), loading[name] == nil else {
            return completion(.failure(ProtocolError(.duplicateKey, "a session named \"\(name)\" exists", field: "name")))
        }
        guard !overMemoryBudget() else { return completion(.failure(memoryBudgetRefusal)) }
        guard makeRoom() else {
            return completion(.failure(ProtocolError(.limitReached, "the server holds its maximum of \(config.maxSessions) sessions", field: "name")))
        }
        if let cluster {
            return openShared(name, create: table, cluster) { result in
                switch result {
                case .success(let session) where session.createdHere: completion(.success(()))
                case .success: completion(.failure(ProtocolError(.duplicateKey, "a session named \"\(name)\" exists", field: "name")))
                case .failure(let error): completion(.failure(error))
                }
            }
        }
        var created: TableSession?
        created = createSession(name, table: table) { [self] result in
            if case .failure = result, let session = created, sessions[name] === session, session.core.isQuiet {
                // Nothing half-made: a session the store did not take is not kept in memory either.
                sessions[name] = nil
                storedNames.remove(name)
                sortedNames = nil
            }
            completion(result.mapError { _ in ProtocolError(.storageUnavailable, "the session could not be stored; retry later") })
        }
    }

    /// Every session's name (stored or resident, sorted; with a cluster also every shared
    /// session other nodes made), with its member count (cluster-wide with a cluster: see
    /// ``withClusterCounts(_:)``) and its section count when it is in memory (a stored one is not
    /// loaded just to count).
    func sessionSummaries(visibleTo grant: AccessGrant?) -> [(name: String, members: Int, sections: Int?)] {
        if sortedNames == nil { sortedNames = storedNames.union(sessions.keys).sorted() }
        return (sortedNames ?? []).filter { grant?.allows($0) ?? true }.map { name in
            (name, listedMembers(name), sessions[name]?.core.committed.sections.count)
        }
    }

    /// Members of session `name` as `list` shows them: a resident session's own count (this
    /// node's members now, other nodes' as of the last presence read); any other the members
    /// other nodes hold, as the broker last said (this node holds none of them).
    private func listedMembers(_ name: String) -> Int {
        if let session = sessions[name] { return session.core.clusterMemberCount }
        return clusterCounts[name] ?? 0
    }

    /// Runs `body` once ``sessionSummaries(visibleTo:)`` answers for the cluster: at once on a
    /// single node, or when other nodes' counts were read since the last heartbeat; otherwise
    /// after one read of the broker (shared by every listing meanwhile), on the service thread.
    /// A read that fails leaves the last counts in place: the listing is answered with them.
    func withClusterCounts(_ body: @escaping () -> Void) {
        guard let cluster, !clusterCountsFresh else { return body() }
        clusterCountsWaiters.append(body)
        guard clusterCountsWaiters.count == 1 else { return }
        cluster.broker.sharedSessions(excluding: cluster.node) { [self] result in
            switch result {
            case .success(let counts):
                clusterCounts = counts
                clusterCountsFresh = true
                // Shared sessions made on other nodes are listed here too.
                let unknown = counts.keys.filter { !storedNames.contains($0) }
                if !unknown.isEmpty {
                    storedNames.formUnion(unknown)
                    sortedNames = nil
                }
            case .failure(let error):
                log(.warning, "list_counts_failed", ["reason": error.description])
            }
            let waiting = clusterCountsWaiters
            clusterCountsWaiters = []
            for waiter in waiting { waiter() }
        }
    }

    /// A change of `connection` was accepted: its run of refusals is over. Usually the client
    /// whose message is being received: then no lookup.
    func accepted(_ connection: Connection) {
        if let client = receiving, client.connection == connection {
            client.consecutiveErrors = 0
        } else {
            clients[connection.id]?.consecutiveErrors = 0
        }
    }

    /// Whether `connection` is still open: an answer computed elsewhere (a find) may outlive it,
    /// and a closed connection's transport handle must not be used.
    func isOpen(_ connection: Connection) -> Bool { clients[connection.id] != nil }

    /// An error reply; past `maxConsecutiveErrors` in a row, a close.
    func refuse(_ connection: Connection, _ error: ProtocolError, id: String?) {
        guard let client = clients[connection.id] else { return }
        metrics.errorsByCode[error.code.rawValue, default: 0] += 1
        let reply = OutboundMessage(ServerMessage.error(error, id: id))
        metrics.sent(reply, to: 1)
        transport.send(reply, to: connection)
        client.consecutiveErrors += 1
        if client.consecutiveErrors >= config.maxConsecutiveErrors {
            log(.info, "close", ["client": client.clientId, "code": String(CloseCode.tooManyErrors), "reason": "too many errors"])
            transport.close(connection, code: CloseCode.tooManyErrors, reason: "too many refused messages")
        }
    }
}

// MARK: - Sessions shared with other nodes

extension Hub {
    /// A request origin no earlier open of a session on this node (in this process or an
    /// earlier one with the same node id) used: `<node>/<process incarnation>-<open number>`.
    private func nextSharedOrigin(_ cluster: Cluster) -> String {
        sharedOpens += 1
        return "\(cluster.node)/\(incarnation)-\(sharedOpens)"
    }

    /// Opens session `name` from the broker (creating it holding `create` when nobody has),
    /// applies the requests after its snapshot, and follows its stream while it is resident.
    fileprivate func openShared(
        _ name: String, create: Table?, _ cluster: Cluster, _ body: @escaping (Result<TableSession, ProtocolError>) -> Void
    ) {
        if let session = sessions[name] { return body(.success(session)) }
        if loading[name] != nil {
            loading[name]?.append(body)
            return
        }
        guard makeRoom() else {
            return body(.failure(ProtocolError(.limitReached, "the server holds its maximum of \(config.maxSessions) sessions", field: "session")))
        }
        loading[name] = [body]
        let epoch = makeEpoch()
        let fresh = create.map { BrokeredSession(epoch: epoch, table: $0, position: "", requests: []) }
        cluster.broker.open(session: name, create: fresh) { [self] result in
            let waiting = loading.removeValue(forKey: name) ?? []
            let outcome: Result<TableSession, ProtocolError>
            switch result {
            case .success(let opened?):
                outcome = .success(sessions[name] ?? follow(opened, name: name, cluster))
            case .success(nil):
                outcome = .failure(ProtocolError(.sessionNotFound, "no session is named \"\(name)\"", field: "session"))
            case .failure(let error):
                log(.error, "session_load_failed", ["session": name, "reason": error.description])
                outcome = .failure(ProtocolError(.storageUnavailable, "the session could not be loaded; retry later"))
            }
            for waiter in waiting { waiter(outcome) }
        }
    }

    /// A normal stop: this node's members leave every other node's presence now instead of at
    /// the expiry bound, and no heartbeat follows. `completion` runs on the service thread.
    public func leaveClusterPresence(completion: @escaping () -> Void) {
        guard let cluster else { return completion() }
        presenceStopped = true
        cluster.broker.leaveAllPresence(node: cluster.node, completion: completion)
    }

    /// One presence heartbeat: every resident shared session's members go to the broker (only
    /// those that changed since the last beat, the rest are a refresh), and what other nodes
    /// hold comes back into each session as ``SessionInput/remotePresence(_:)``.
    fileprivate func presenceBeat() {
        guard let cluster, !presenceStopped else { return }
        // Other nodes' counts may have changed at their beats: the next listing reads them again.
        clusterCountsFresh = false
        var beats: [PresenceBeat] = []
        beats.reserveCapacity(sessions.count)
        for session in sessions.values {
            beats.append(PresenceBeat(session: session.name, members: session.presenceDirty ? session.core.localPresence : nil))
            session.presenceDirty = false
        }
        cluster.broker.beat(node: cluster.node, expiryMs: UInt64(config.presenceExpiryMs), beats) { [weak self] name, others in
            guard let session = self?.sessions[name] else { return }
            session.handle(.remotePresence(others))
        }
    }

    /// A resident session for `opened`, brought up to the stream's end as read, then following it.
    private func follow(_ opened: BrokeredSession, name: String, _ cluster: Cluster) -> TableSession {
        let core = SessionCore(
            name: name, epoch: opened.epoch, table: opened.table, history: opened.history, settings: sessionSettings,
            sequencing: .stream(node: cluster.node, origin: nextSharedOrigin(cluster)))
        let session = TableSession(core: core, hub: self)
        session.createdHere = opened.created
        sessions[name] = session
        storedNames.insert(name)
        sortedNames = nil
        // Writable even if the broker is not (yet) available: the open went through Redis, so
        // appends can be made; the reader applies them once it is connected. Read-only follows
        // the broker's transitions (brokerAvailability), and a resume follows each return.
        if !opened.requests.isEmpty { session.handle(.sequenced(opened.requests)) }
        session.deliveredPosition = opened.requests.last?.position ?? opened.position
        session.deliveredNumber = opened.requests.last.map(\.number) ?? opened.number
        followStream(session, cluster)
        log(
            .info, "session_loaded",
            ["session": name, "seq": String(core.committed.seq), "requests": String(opened.requests.count), "history": String(opened.history.count)])
        // Opened for nobody yet (the demo at start, an API call): its idle clock starts now.
        sessionSettled(session)
        return session
    }

    /// Follows the stream of `session` from the last position delivered to it.
    /// `checked`: whether the broker checks the entries continue `deliveredNumber` (not after a
    /// resume that found the stream continuing although its numbers did not: see `resume`).
    private func followStream(_ session: TableSession, _ cluster: Cluster, checked: Bool = true) {
        cluster.broker.follow(
            session: session.name, after: session.deliveredPosition, number: checked ? session.deliveredNumber : nil,
            deliver: { [weak self, weak session] requests in
                guard let self, let session, isResident(session), let last = requests.last else { return }
                session.deliveredPosition = last.position
                session.deliveredNumber = last.number
                session.handle(.sequenced(requests))
            },
            caughtUp: { [weak self, weak session] through in
                // Only a session with requests of its own waiting has anything to settle.
                guard let self, let session, isResident(session), session.core.waitsForCatchUp else { return }
                session.handle(.caughtUp(through: through))
            },
            fellBehind: { [weak self, weak session] in
                // The stream was trimmed past what this node applied: the resume finds that
                // position gone and reloads the session from the snapshot (same epoch). The
                // cluster is the hub's, not captured: the broker keeps this closure, and the
                // cluster holds the broker (a cycle LeakSanitizer reports).
                guard let self, let session, let cluster = self.cluster, isResident(session) else { return }
                log(.warning, "session_fell_behind", ["session": session.name, "position": session.deliveredPosition])
                resume(session, cluster, afterGap: true)
            })
    }

    /// The broker became available or unavailable: shared sessions turn read-only or writable,
    /// and when it is back each is brought back in step with its stream.
    fileprivate func brokerAvailability(_ available: Bool) {
        guard let cluster else { return }
        log(available ? .info : .warning, available ? "shared_writable" : "shared_read_only", ["sessions": String(sessions.count)])
        for session in sessions.values.sorted(by: { $0.name < $1.name }) {
            session.handle(.brokerAvailable(available))
            if available { resume(session, cluster) }
        }
    }

    /// Asks the broker whether the stream of `session` continues from what it was delivered:
    /// then follows on from there (entries other nodes appended meanwhile are applied in
    /// order); else reloads it from what the broker holds (members get a fresh welcome). Should
    /// Redis have lost the session altogether, this node's committed table makes it again, in a
    /// new epoch (the first node to do so wins; the others reload that one).
    ///
    /// `afterGap`: the broker found the entries after the delivered one not numbered on from it.
    /// Should the stream still hold that entry (so nothing was trimmed past it: the numbers
    /// themselves went wrong), following goes on unchecked rather than resuming again forever.
    fileprivate func resume(_ session: TableSession, _ cluster: Cluster, afterGap: Bool = false) {
        let fresh = BrokeredSession(epoch: makeEpoch(), table: session.core.committedWithChangeIds, position: "", requests: [])
        session.resumes += 1
        let attempt = session.resumes
        cluster.broker.resume(session: session.name, after: session.deliveredPosition, epoch: session.epoch, create: fresh) {
            [self] result in
            guard isResident(session), session.resumes == attempt else { return }
            switch result {
            case .success(nil):
                cluster.broker.unfollow(session: session.name)
                followStream(session, cluster, checked: !afterGap)
                log(.info, "session_resumed", ["session": session.name, "position": session.deliveredPosition])
            case .success(let opened?):
                cluster.broker.unfollow(session: session.name)
                metrics.sessionReloads += 1
                session.handle(.reload(epoch: opened.epoch, table: opened.table, position: opened.position, history: opened.history))
                session.deliveredPosition = opened.requests.last?.position ?? opened.position
                session.deliveredNumber = opened.requests.last.map(\.number) ?? opened.number
                if !opened.requests.isEmpty { session.handle(.sequenced(opened.requests)) }
                followStream(session, cluster)
            case .failure(let error):
                log(.warning, "session_resume_failed", ["session": session.name, "reason": error.description])
                // Tried again at the next reconnect, or in a second while the broker is up.
                if cluster.broker.isAvailable { _ = armTimer(.resume(name: session.name), milliseconds: 1_000) }
            }
        }
    }
}
