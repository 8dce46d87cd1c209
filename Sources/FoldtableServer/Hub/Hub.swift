import FoldtableCore
import Glibc

/// The node's local hub: every connected client and every resident session, driven by transport
/// events on one service thread (centrifuge's Hub; the transport is the ``Transport`` port, and
/// who orders and keeps sessions the `SessionOrdering` port).
///
/// Sessions are resident while they have members or work in progress; a session quiet for
/// `idleEvictSecs` is saved and dropped from memory, and opened again by the next join.
/// `maxSessions` counts resident sessions.
///
/// In three files by concern: this one (sessions resident, loading and eviction, timers),
/// `Hub+Messages.swift` (connections and what clients send) and `Hub+Sessions.swift` (creating,
/// deleting and listing sessions for clients and the HTTP API).
public final class Hub: TransportDelegate {
    let config: ServerConfig
    let transport: Transport
    /// Who orders and keeps the sessions: this node's store, or a broker shared with others.
    let ordering: SessionOrdering
    let logger: Log
    /// Checks tokens; `nil` = open mode (no tokens, everyone edits).
    let verifier: TokenVerifier?
    /// Minting invites and withdrawing tokens (``enableInvites(signer:ledger:)``); `nil`: tokens
    /// cannot be withdrawn and the invites API answers 404.
    var invites: InviteDesk?
    /// Wall-clock seconds since 1970, for token expiry.
    let clock: () -> UInt64

    var clients = ConnectionMap<ClientState>()
    /// The client whose change the hub is handing to its session, while it does: the session's
    /// `accepted` for it then needs no lookup in `clients`.
    var receiving: ClientState?
    /// Sessions whose changes of this turn wait for its end to go to the log
    /// (``transportTurnEnded()``).
    var handOversDue: [TableSession] = []
    var sessions: [String: TableSession] = [:]
    /// Sessions being opened, with what waits for each (joins, API calls).
    var loading: [String: [(Result<TableSession, ProtocolError>) -> Void]] = [:]
    /// HTTP API changes waiting for their commit, by request number.
    var apiRequests: [UInt64: (Result<UInt64, ProtocolError>, _ created: String?) -> Void] = [:]
    /// The key of the row or section an HTTP API change created, from its event, until the
    /// change is answered (``SessionEffect/created(request:key:)`` comes just before the answer).
    var apiCreatedKeys: [UInt64: String] = [:]
    var nextAPIRequest: UInt64 = 0
    /// `list` answer cache, rebuilt only after a session is created or deleted.
    var sortedNames: [String]?
    private var timers: [UInt64: TimerAction] = [:]
    private var nextTimerToken: UInt64 = 1
    /// Names session incarnations (random in production, fixed in tests).
    let makeEpoch: () -> String
    /// The HTTP endpoints the hub answers (health checks now, the API later).
    public let http: HTTPRouter

    /// What a timer is for.
    enum TimerAction {
        case joinDeadline(connection: UInt64)
        /// The member's token expires (then: its grace period ends).
        case tokenExpiry(connection: UInt64)
        case tokenGrace(connection: UInt64)
        case session(name: String, SessionTimer)
        case evict(name: String)
        /// Work of the session ordering's, later (a heartbeat, a retry).
        case later(() -> Void)
    }

    /// A hub whose sessions `ordering` opens and orders (see `SessionOrdering`: made by
    /// `local(store:eventLog:names:)` or `shared(_:)`). `makeEpoch` names session
    /// incarnations (random in production, fixed in tests). `ready` answers `/readyz`
    /// (foldtabled asks its ``StoreMonitor``); the hub itself is ready as soon as the transport
    /// hands it requests.
    public init(
        config: ServerConfig, transport: Transport, ordering: SessionOrderingChoice, log: Log, verifier: TokenVerifier? = nil,
        clock: @escaping () -> UInt64 = Hub.wallClock, makeEpoch: @escaping () -> String = Hub.randomEpoch, ready: @escaping () -> Bool = { true },
        residentBytes: @escaping () -> Int = { 0 }
    ) {
        self.ordering = ordering.ordering
        self.residentBytes = residentBytes
        self.verifier = verifier
        self.clock = clock
        self.config = config
        messageLimits = Hub.messageLimits(config)
        self.transport = transport
        finder = RowFinder(serviceQueue: transport.serviceQueue)
        self.logger = log
        self.makeEpoch = makeEpoch
        http = HTTPRouter(policy: RequestPolicy(config))
        http.addHealthChecks(notReady: { [weak self] in
            if !ready() { return "storage unavailable" }
            return self?.ordering.notReady
        })
        registerGauges()
        api = SessionAPI(hub: self, policy: RequestPolicy.api(config))
        api?.install(on: http)
        http.add("GET", "/metrics") { [metrics] _, respond in
            respond(
                HTTPResponse(status: 200, headers: ["Content-Type": "text/plain; version=0.0.4; charset=utf-8"], body: Array(metrics.render().utf8)))
        }
        self.ordering.attach(self)
    }

    /// The HTTP API under /api/v1 (set once `self` exists: it holds the hub).
    private(set) var api: SessionAPI?
    /// Sessions' webhooks (set by foldtabled before serving); nil where they are not offered
    /// (with --redis: the API's webhook routes refuse, 501).
    public var webhooks: Webhooks?
    /// Where members' and the API's finds run (off the service thread for large tables).
    let finder: RowFinder

    /// What `/metrics` reports; counted on the service thread as things happen.
    public let metrics = Metrics()
    /// The process's resident memory in bytes (foldtabled reads /proc; tests inject it).
    private let residentBytes: () -> Int

    /// Whether the memory budget (``ServerConfig/memoryBudgetMB``) is spent: then joins and new
    /// sessions are refused, so the process degrades for newcomers instead of dying for everyone.
    func overMemoryBudget() -> Bool {
        guard config.memoryBudgetMB > 0 else { return false }
        let resident = residentBytes()
        guard resident > config.memoryBudgetMB * 1_048_576 else { return false }
        metrics.memoryRefusals += 1
        log(.warning, "memory_budget", ["resident_mb": String(resident / 1_048_576), "budget_mb": String(config.memoryBudgetMB)])
        return true
    }

    var memoryBudgetRefusal: ProtocolError {
        ProtocolError(.limitReached, "the server is at its memory budget; try again later")
    }

    private func registerGauges() {
        metrics.gauge("foldtable_connections", "Open WebSocket connections.") { [unowned self] in Double(clients.count) }
        metrics.gauge("foldtable_sessions_resident", "Sessions in memory.") { [unowned self] in Double(sessions.count) }
        metrics.gauge("foldtable_sessions_stored", "Sessions in the store.") { [unowned self] in Double(ordering.names.count) }
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

    /// Creates session `name` holding `table` when no session of that name exists (the demo,
    /// tables loaded from files at start-up). `made` hears whether it was made here (false: a
    /// session of that name existed and was left as it is), or why that is not known.
    public func createSessionIfAbsent(_ name: String, table: Table, made: @escaping (Result<Bool, ProtocolError>) -> Void = { _ in }) {
        ordering.createIfAbsent(name, table: table, made: made)
    }

    /// A normal stop: whatever other nodes hold of this one (its members in their presence) is
    /// taken back now, not when it expires. `completion` runs on the service thread.
    /// Sessions whose private views changed since they were stored save them first (the log
    /// holds every event already; views are no events): the store's close waits for the writes.
    public func stop(completion: @escaping () -> Void) {
        for session in sessions.values where session.core.viewsUnsaved { session.save() }
        ordering.stop(completion: completion)
    }

    /// What every session's core is made with.
    var sessionSettings: SessionCore.Settings {
        var settings = SessionCore.Settings()
        settings.historyEvents = config.historyEvents
        settings.welcomeRowBudget = config.welcomeRowBudget
        settings.presenceIntervalMs = UInt64(config.presenceIntervalMs)
        settings.presenceListMax = config.presenceListMax
        settings.welcomeByteBudget = config.streamLowMarkBytes
        settings.streamTimeoutMs = UInt64(config.streamTimeoutSecs) * 1_000
        settings.checkpointEvents = config.checkpointEvents
        settings.staggersCheckpoints = true
        settings.unixOffsetMs = UnixClock.offsetMilliseconds(monotonic: transport.nowMilliseconds())
        // A transport that reports its turns lets a session's changes of one read share an append.
        settings.handsOverAtOnce = !transport.endsTurns
        settings.chunkRows = config.rowChunkRows
        // Chunks stay well under the refill mark, so one chunk never passes a member's queue cap.
        settings.chunkBytes = min(config.maxBatchBytes, config.streamLowMarkBytes)
        settings.streamRefillBytes = config.streamLowMarkBytes
        settings.busyAwaitsPeers = true
        return settings
    }

    var newTable: Table {
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

    /// Runs `work` on the service thread in `milliseconds` (for the session ordering).
    func afterMilliseconds(_ milliseconds: UInt64, _ work: @escaping () -> Void) {
        _ = armTimer(.later(work), milliseconds: milliseconds)
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
        case .later(let work):
            work()
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

    /// Drops a quiet session from memory. Everything it holds is stored already; a checkpoint
    /// (or snapshot) only makes the next open read less.
    private func evict(_ session: TableSession) {
        guard session.core.isQuiet, sessions[session.name] === session else { return }
        if let timer = session.evictionTimer { cancelTimer(timer) }
        session.save()
        session.detach()
        sessions[session.name] = nil
        log(.info, "session_evicted", ["session": session.name])
    }

    /// Room for one more resident session: evicts a quiet one when at the limit.
    func makeRoom() -> Bool {
        if sessions.count < config.maxSessions { return true }
        guard let quiet = sessions.values.first(where: { $0.core.isQuiet }) else { return false }
        evict(quiet)
        return sessions.count < config.maxSessions
    }

    /// The session `name`: resident, opened by the ordering, or (with `create`) made empty when it
    /// exists nowhere. `body` runs at once or when the open is done, on the service thread.
    func withSession(_ name: String, create: Bool, _ body: @escaping (Result<TableSession, ProtocolError>) -> Void) {
        withSession(name, creating: create ? newTable : nil, body)
    }

    /// The same, made holding `table` when it exists nowhere (`nil`: not made).
    func withSession(_ name: String, creating table: Table?, _ body: @escaping (Result<TableSession, ProtocolError>) -> Void) {
        if let session = sessions[name] { return body(.success(session)) }
        if loading[name] != nil {
            loading[name]?.append(body)
            return
        }
        guard table != nil || ordering.mayExist(name) else {
            return body(.failure(.noSession(named: name)))
        }
        guard makeRoom() else {
            return body(.failure(ProtocolError(.limitReached, "the server holds its maximum of \(config.maxSessions) sessions", field: "session")))
        }
        loading[name] = [body]
        ordering.open(name, create: table) { [self] result in
            let waiting = loading.removeValue(forKey: name) ?? []
            // Held already if the ordering adopted it while opening (or another path made it).
            let outcome = result.map { opened in sessions[name] ?? adopt(opened) }
            for waiter in waiting { waiter(outcome) }
        }
    }

    /// Holds `session` under its name (the ordering made or opened it).
    @discardableResult
    func adopt(_ session: TableSession) -> TableSession {
        sessions[session.name] = session
        sortedNames = nil
        return session
    }

    /// Lets go of `session` (the store did not take it, or it was deleted).
    func drop(_ session: TableSession) {
        if let timer = session.evictionTimer { cancelTimer(timer) }
        session.evictionTimer = nil
        sortedNames = nil
        guard sessions[session.name] === session else { return }
        sessions[session.name] = nil
        session.detach()
    }

    /// Whether a session named `name` is held in memory.
    func holds(_ name: String) -> Bool { sessions[name] != nil }
    /// The session held under `name`, if any.
    func resident(_ name: String) -> TableSession? { sessions[name] }
    /// Every session held in memory, by name.
    var residentSessionList: [TableSession] { sessions.keys.sorted().compactMap { sessions[$0] } }
    /// The ordering learned of session names (another node made them): listings are made anew.
    func namesChanged() { sortedNames = nil }

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

}
