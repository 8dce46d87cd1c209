import FoldtableCore

// MARK: - Connections and what clients send

extension Hub {
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
                    guard case .success(let granted) = verifyToken(token, with: verifier) else {
                        return refuse(connection, ProtocolError(.unauthorized, "the token is not valid", field: "token"), id: nil)
                    }
                    grant = granted
                }
                guard grant != nil else { return refuse(connection, ProtocolError(.unauthorized, "list needs a token", field: "token"), id: nil) }
            }
            let allowed = grant
            ordering.withListing { [self] in
                guard clients[connection.id] === client else { return }
                if sortedNames == nil { sortedNames = ordering.names.union(sessions.keys).sorted() }
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
            // A viewer may collapse and expand in a view of its own (the session refuses it in
            // the shared view), never change the table.
            let viewOnly = client.role < .editor
            guard !viewOnly || change.isCollapseOnly else {
                return refuse(connection, ProtocolError(.forbidden, "a viewer cannot change the table"), id: id)
            }
            // One reading of the clock for the rate limit and the core's `now`.
            let now = transport.nowMilliseconds()
            guard client.changes.take(now: now) else { return refuse(connection, rateLimited, id: id) }
            guard let key = changeKey(id, of: client) else { return }
            receiving = client
            session.handle(viewOnly ? .privateChange(change, id: key, from: connection) : .change(change, id: key, from: connection), now: now)
            receiving = nil
        case .success(.undo(let redo, let id)):
            guard let session = client.session else { return refuse(connection, ProtocolError(.notJoined, "join a session first"), id: id) }
            guard client.role >= .editor else { return refuse(connection, ProtocolError(.forbidden, "a viewer cannot change the table"), id: id) }
            let now = transport.nowMilliseconds()
            guard client.changes.take(now: now) else { return refuse(connection, rateLimited, id: id) }
            guard let key = changeKey(id, of: client) else { return }
            receiving = client
            session.handle(.undo(redo: redo, id: key, from: connection), now: now)
            receiving = nil
        case .success(.view(let isPrivate, let collapsed)):
            guard let session = client.session else { return refuse(connection, ProtocolError(.notJoined, "join a session first"), id: id) }
            let now = transport.nowMilliseconds()
            guard client.changes.take(now: now) else { return refuse(connection, rateLimited, id: id) }
            session.handle(.view(private: isPrivate, collapsed: collapsed, from: connection), now: now)
        case .success(.find(let query, let limit, let id)):
            // A read any member may make; it scans the whole table, so it counts against the
            // same rate limit as a change.
            guard let session = client.session else { return refuse(connection, ProtocolError(.notJoined, "join a session first"), id: id) }
            guard client.changes.take(now: transport.nowMilliseconds()) else { return refuse(connection, rateLimited, id: id) }
            session.handle(.find(query: query, limit: limit, id: id, from: connection))
        case .success(.history(let before, let limit, let id)):
            sendHistory(client, before: before, limit: limit, id: id)
        case .success(.deleteSession):
            guard let session = client.session else { return refuse(connection, ProtocolError(.notJoined, "join a session first"), id: id) }
            guard client.role >= .owner else { return refuse(connection, ProtocolError(.forbidden, "only an owner deletes the session"), id: id) }
            delete(session, by: client, id: id)
        }
    }

    /// The key a member's change id is held under (the id is the author's own: the session's
    /// window holds it under the author's scope): `.some(nil)` without an id, `nil` when the id
    /// cannot be one (refused here).
    private func changeKey(_ id: String?, of client: ClientState) -> String?? {
        guard let id else { return .some(nil) }
        do {
            return .some(try ChangeIdScope.key(id, scope: client.idScope))
        } catch {
            refuse(client.connection, error, id: id)
            return nil
        }
    }

    private var rateLimited: ProtocolError {
        ProtocolError(.rateLimited, "more than \(config.changeRatePerSec) changes a second; slow down")
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
            switch verifyToken(token, with: verifier) {
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
        // A shared link's `sub` names the link, not a person: its members are told apart like
        // open mode's, by the scope they declare (else their connection).
        let person = client.grant.flatMap { $0.shared ? nil : $0.user }
        client.idScope = ChangeIdScope.of(member: person, declared: request.idScope, connection: client.connection.id)
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
        session.handle(.join(client.connection, request, role: verifier == nil ? nil : client.role.rawValue, scope: client.idScope))
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
        let end = grant.expires.addingReportingOverflow(Self.tokenLeewaySeconds)
        let seconds = end.overflow ? UInt64.max - now : end.partialValue > now ? end.partialValue - now : 0
        let milliseconds = seconds.multipliedReportingOverflow(by: 1_000)
        client.tokenTimer = armTimer(
            .tokenExpiry(connection: client.connection.id), milliseconds: milliseconds.overflow ? .max : milliseconds.partialValue)
    }

    /// Tokens are accepted this long past their `exp` (clocks differ); so is a member's session.
    static let tokenLeewaySeconds: UInt64 = 60

    /// A fresh token from a member: same session, new expiry (and role, if it changed).
    private func reauthorize(_ client: ClientState, _ token: String) {
        guard let verifier else {
            return refuse(client.connection, ProtocolError(.invalidValue, "this server takes no tokens", field: "token"), id: nil)
        }
        guard let session = client.session else { return refuse(client.connection, ProtocolError(.notJoined, "join a session first"), id: nil) }
        guard case .success(let grant) = verifyToken(token, with: verifier), grant.allows(session.name) else {
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
