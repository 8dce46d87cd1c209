import FoldtableCore

/// The node's local hub: every connected client and every session, driven by transport events
/// on one service thread (centrifuge's Hub; the transport is the Transport port).
public final class Hub: TransportDelegate {
    let config: ServerConfig
    let transport: Transport
    let logger: Log
    /// Changes waiting behind busy sections, per session, before new ones are refused.
    let maxPendingChanges = 10_000

    private var clients: [UInt64: ClientState] = [:]
    private var sessions: [String: TableSession] = [:]
    /// Sessions by name for `list`, rebuilt only after a session is created.
    private var sortedSessions: [TableSession]?
    private var timers: [UInt64: TimerAction] = [:]
    private var nextTimerToken: UInt64 = 1
    private let makeEpoch: () -> String

    /// What a timer is for.
    enum TimerAction: Equatable {
        case joinDeadline(connection: UInt64)
        case busy(session: String, section: String, seq: UInt64)
        case streamDeadline(session: String, section: String, seq: UInt64)
    }

    /// A hub with the `demo` session in place. `makeEpoch` names session incarnations (random
    /// in production, fixed in tests).
    public init(config: ServerConfig, transport: Transport, log: Log, makeEpoch: @escaping () -> String = Hub.randomEpoch) {
        self.config = config
        self.transport = transport
        self.logger = log
        self.makeEpoch = makeEpoch
        var options = TableOptions()
        options.busyThresholdMs = config.busyThresholdMs
        var demo = DemoTable.make(options: options, largeRows: config.demoLargeRows)
        if demo.sections.contains(where: { $0.rows.count > config.tableLimits.maxRowsPerSection }) {
            demo = DemoTable.make(options: options, largeRows: config.tableLimits.maxRowsPerSection)
        }
        sessions["demo"] = TableSession(name: "demo", epoch: makeEpoch(), table: demo, hub: self)
    }

    /// Eight random hex digits.
    public static func randomEpoch() -> String {
        let value = UInt32.random(in: .min ... .max)
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: 8 - hex.count) + hex
    }

    /// Members per session, for tests and metrics.
    public var sessionMembers: [String: Int] { sessions.mapValues(\.memberCount) }

    func log(_ level: Log.Level, _ event: String, _ fields: @autoclosure () -> KeyValuePairs<String, String> = [:]) {
        logger(level, event, fields())
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
            guard let client = clients[id], client.session == nil else { return }
            client.joinTimer = nil
            log(.info, "close", ["client": client.clientId, "code": String(CloseCode.joinTimeout), "reason": "join timeout"])
            transport.close(client.connection, code: CloseCode.joinTimeout, reason: "no join in time")
        case .busy(let session, let section, let seq):
            sessions[session]?.busyThresholdPassed(section: section, seq: seq)
        case .streamDeadline(let session, let section, let seq):
            sessions[session]?.streamDeadlinePassed(section: section, seq: seq)
        }
    }

    // MARK: - Transport events

    public func connectionOpened(_ connection: Connection, peer: String) {
        let client = ClientState(connection: connection)
        clients[connection.id] = client
        client.joinTimer = armTimer(.joinDeadline(connection: connection.id), milliseconds: UInt64(config.joinTimeoutMs))
        log(.info, "open", ["client": client.clientId, "peer": peer])
    }

    public func connectionClosed(_ connection: Connection, code: Int) {
        guard let client = clients.removeValue(forKey: connection.id) else { return }
        if let timer = client.joinTimer { cancelTimer(timer) }
        let session = client.session
        client.markClosed()
        session?.leave(client)
        log(.info, "closed", ["client": client.clientId, "code": String(code)])
    }

    public func connectionDrained(_ connection: Connection) {
        guard let client = clients[connection.id] else { return }
        client.session?.drained(client)
    }

    public func connectionReceived(_ connection: Connection, message: UnsafeRawBufferPointer) {
        guard let client = clients[connection.id] else { return }
        let (result, id) = ClientMessage.decode(message, limits: messageLimits)
        switch result {
        case .failure(let error):
            refuse(client, error, id: id)
        case .success(.list):
            if sortedSessions == nil { sortedSessions = sessions.values.sorted { $0.name < $1.name } }
            let list = (sortedSessions ?? []).prefix(1_000).map { (name: $0.name, members: $0.memberCount) }
            transport.send(OutboundMessage(ServerMessage.sessions(Array(list))), to: connection)
        case .success(.join(let request)):
            join(client, request)
        case .success(.rename(let name)):
            guard let session = client.session else {
                refuse(client, ProtocolError(.notJoined, "join a session first"), id: id)
                return
            }
            client.consecutiveErrors = 0
            session.rename(client, to: name)
        case .success(.change(let change, let id)):
            guard let session = client.session else {
                refuse(client, ProtocolError(.notJoined, "join a session first"), id: id)
                return
            }
            session.submit(change, id: id, from: client)
        }
    }

    private var messageLimits: ClientMessage.Limits {
        var limits = ClientMessage.Limits()
        limits.json.maxStringBytes = max(config.tableLimits.maxTextBytes, 4_096)
        return limits
    }

    private func join(_ client: ClientState, _ request: JoinRequest) {
        guard client.session == nil else {
            refuse(client, ProtocolError(.alreadyJoined, "this connection already joined a session", field: "session"), id: nil)
            return
        }
        let session: TableSession
        if let existing = sessions[request.session] {
            session = existing
        } else {
            guard sessions.count < config.maxSessions else {
                refuse(
                    client, ProtocolError(.limitReached, "the server holds its maximum of \(config.maxSessions) sessions", field: "session"), id: nil)
                return
            }
            var options = TableOptions()
            options.busyThresholdMs = config.busyThresholdMs
            session = TableSession(
                name: request.session, epoch: makeEpoch(), table: Table(options: options, limits: config.tableLimits), hub: self)
            sessions[request.session] = session
            sortedSessions = nil
            log(.info, "session_created", ["session": request.session])
        }
        client.consecutiveErrors = 0
        if let timer = client.joinTimer {
            cancelTimer(timer)
            client.joinTimer = nil
        }
        session.join(client, request: request)
        log(.info, "join", ["client": client.clientId, "session": request.session, "resume": request.since == nil ? "no" : "yes"])
    }

    /// An error reply; past `maxConsecutiveErrors` in a row, a close.
    func refuse(_ client: ClientState, _ error: ProtocolError, id: String?) {
        transport.send(OutboundMessage(ServerMessage.error(error, id: id)), to: client.connection)
        client.consecutiveErrors += 1
        if client.consecutiveErrors >= config.maxConsecutiveErrors {
            log(.info, "close", ["client": client.clientId, "code": String(CloseCode.tooManyErrors), "reason": "too many errors"])
            transport.close(client.connection, code: CloseCode.tooManyErrors, reason: "too many refused messages")
        }
    }
}
