import FoldtableCore

// MARK: - Invites, withdrawn tokens and members

extension Hub {
    /// Turns on minting and withdrawing: reads the withdrawn ids `ledger` keeps (blocking, at
    /// start-up, before serving) and follows what other nodes withdraw from now on.
    public func enableInvites(signer: TokenSigner, ledger: InviteLedger) throws(StoreError) {
        let desk = InviteDesk(signer: signer, ledger: ledger)
        let now = clock()
        for (id, until) in try ledger.withdrawnTokens(now: now) { desk.withdrawn.add(id, until: until, now: now) }
        invites = desk
        metrics.counter("foldtable_withdrawn_token_refusals_total", "Tokens refused because their id was withdrawn.") {
            Double(desk.refusals)
        }
        metrics.gauge("foldtable_withdrawn_tokens", "Token ids kept withdrawn until their tokens expire.") { Double(desk.withdrawn.count) }
        ledger.follow { [weak self] withdrawn in self?.tokensWithdrawn(withdrawn) }
    }

    /// A fresh token id (`jti`): 128 random bits in hex, unguessable, for invites and
    /// `foldtabled token`.
    public static func randomTokenId() -> String {
        var generator = SystemRandomNumberGenerator()
        var id = ""
        for _ in 0..<2 {
            let hex = String(generator.next() as UInt64, radix: 16)
            id += String(repeating: "0", count: 16 - hex.count) + hex
        }
        return id
    }

    /// The grant in `token`, as the verifier reads it, refused also when its id was withdrawn.
    /// Every place that takes a token (joins, `auth`, `list`, the HTTP API) asks here.
    func verifyToken(_ token: String, with verifier: TokenVerifier) -> Result<AccessGrant, TokenRefusal> {
        let result = verifier.verify(token, now: clock())
        if case .success(let grant) = result, let id = grant.id, let desk = invites, desk.withdrawn.contains(id, now: clock()) {
            desk.refusals += 1
            return .failure(TokenRefusal(.withdrawn, "the token was withdrawn"))
        }
        return result
    }

    /// Ids withdrawn (here or on another node): each is kept, and every member connected with
    /// one of them is closed with 4503.
    func tokensWithdrawn(_ withdrawn: [String: UInt64]) {
        guard let desk = invites, !withdrawn.isEmpty else { return }
        let now = clock()
        for (id, until) in withdrawn { desk.withdrawn.add(id, until: until, now: now) }
        let closing = clients.values.filter { client in client.grant?.id.map { withdrawn[$0] != nil } ?? false }
        for client in closing where client.isOpen {
            log(.info, "close", ["client": client.clientId, "code": String(CloseCode.tokenWithdrawn), "reason": "token withdrawn"])
            transport.close(client.connection, code: CloseCode.tokenWithdrawn, reason: "token withdrawn")
        }
    }

    /// Mints a token for `session` with `role` that ends `expiresIn` seconds from now, keeps its
    /// invite (never the token), and answers both.
    func mintInvite(
        session: String, role: Role, expiresIn: Int64, label: String, by creator: String, callerExpires: UInt64? = nil,
        completion: @escaping (Result<(Invite, String), ProtocolError>) -> Void
    ) {
        guard let desk = invites else { return completion(.failure(Self.noInvites)) }
        let now = clock()
        guard desk.withdrawn.hasRoom(now: now) else {
            return completion(
                .failure(ProtocolError(.limitReached, "the list of withdrawn tokens is full; no invite can be minted until some expire")))
        }
        desk.ledger.invites(session: session, now: now) { [self] listed in
            switch listed {
            case .failure(let error): return completion(.failure(storageFailure(error)))
            case .success(let live) where live.count + desk.withdrawnCount(of: session, now: now) >= InviteDesk.maxLivePerSession:
                return completion(
                    .failure(
                        ProtocolError(
                            .limitReached,
                            "session \(session) has \(InviteDesk.maxLivePerSession) invites live or withdrawn and not yet expired; wait for some to expire"
                        )))
            case .success: break
            }
            let id = InviteDesk.newId()
            // Never beyond the minting token's own end: a leaked owner link withdrawn later must
            // not have minted itself a longer life.
            let expires = min(now + UInt64(clamping: expiresIn), callerExpires ?? UInt64.max)
            let invite = Invite(id: id, session: session, role: role, label: label, created: now, expires: expires, createdBy: creator)
            let grant = AccessGrant(
                user: "invite-\(id)", name: nil, sessions: [session], role: role, expires: expires, id: id, label: label.isEmpty ? nil : label,
                shared: true)
            desk.ledger.record(invite) { [self] recorded in
                switch recorded {
                case .success: completion(.success((invite, desk.signer.sign(grant))))
                case .failure(let error): completion(.failure(storageFailure(error)))
                }
            }
            log(.info, "invite", ["session": session, "id": id, "role": role.rawValue])
        }
    }

    /// The session's live invites.
    func listInvites(session: String, completion: @escaping (Result<[Invite], ProtocolError>) -> Void) {
        guard let desk = invites else { return completion(.failure(Self.noInvites)) }
        desk.ledger.invites(session: session, now: clock()) { [self] result in completion(result.mapError(storageFailure)) }
    }

    /// Withdraws token `id`: an invite of `session`, or (for a caller whose grant opens every
    /// session as an owner) any id, such as one `foldtabled token --jti` printed. Answers false
    /// when the id is neither.
    func withdrawToken(id: String, session: String, caller: AccessGrant?, completion: @escaping (Result<Bool, ProtocolError>) -> Void) {
        guard let desk = invites else { return completion(.failure(Self.noInvites)) }
        let now = clock()
        desk.ledger.invites(session: session, now: now) { [self] listed in
            let invite: Invite?
            switch listed {
            case .failure(let error): return completion(.failure(storageFailure(error)))
            case .success(let live): invite = live.first { $0.id == id }
            }
            // An id the session never minted could be any token's: only an owner of every
            // session may withdraw that, or an owner of one session could shut out another's.
            guard invite != nil || (caller.map { $0.sessions == nil && $0.role == .owner } ?? false) else { return completion(.success(false)) }
            let until = (invite.map { $0.expires } ?? now + InviteDesk.unknownKeepSeconds) + Self.tokenLeewaySeconds
            // Refused here at once, before the ledger answers, and never for want of room: a
            // withdrawal that waited or failed would leave a leaked token working. If the write
            // fails the id stays refused on this node and the owner is told to retry.
            if invite != nil { desk.noteWithdrawn(id, of: session, until: until) }
            tokensWithdrawn([id: until])
            desk.ledger.withdraw(id: id, session: session, until: until) { [self] result in
                switch result {
                case .failure(let error): completion(.failure(storageFailure(error)))
                case .success:
                    log(.info, "withdraw", ["session": session, "id": id])
                    completion(.success(true))
                }
            }
        }
    }

    /// One member of a session as the members API lists it.
    struct MemberListing {
        var client: String
        var name: String
        /// `nil` for another node's member (presence carries names only) and in open mode.
        var role: Role?
        /// The node it is connected to ("" without `--redis`).
        var node: String
        /// The id of the token it joined with, when it has one, and that token's label.
        var token: String?
        var label: String?
    }

    /// Who is in `session`: this node's members with their roles, then the members other nodes
    /// list in presence (the first `presenceListMax` of each node). Empty when the session is
    /// not resident here (nobody is in it on this node).
    func members(of name: String) -> [MemberListing] {
        guard let session = sessions[name] else { return [] }
        let room = session.core.room
        var listed: [MemberListing] = []
        for client in clients.values where client.session === session {
            guard let author = room.author(of: client.connection) else { continue }
            listed.append(
                MemberListing(
                    client: author.client, name: author.name, role: verifier == nil ? nil : client.role, node: room.node, token: client.grant?.id,
                    label: client.grant?.label))
        }
        listed.sort { $0.client < $1.client }
        for node in room.remote {
            for author in node.members {
                listed.append(MemberListing(client: author.client, name: author.name, role: nil, node: node.node, token: nil, label: nil))
            }
        }
        return listed
    }

    /// Closes this node's member `client` of `session` with 4504; false when there is none.
    func removeMember(_ client: String, of name: String) -> Bool {
        guard let session = sessions[name] else { return false }
        // Listed as the room names it (`a.c7` under --redis: node `a`), or as the hub does (`c7`).
        let found = clients.values.first {
            $0.session === session && (session.core.room.author(of: $0.connection)?.client == client || $0.clientId == client)
        }
        guard let member = found, member.isOpen else { return false }
        log(.info, "close", ["client": member.clientId, "code": String(CloseCode.removed), "reason": "removed by an owner"])
        transport.close(member.connection, code: CloseCode.removed, reason: "removed by an owner")
        return true
    }

    private static var noInvites: ProtocolError {
        ProtocolError(.invalidValue, "this server has no token secret: invites need tokens (--token-secret-file)")
    }

    /// What the caller is told when the ledger failed (the cause goes to the log, not to it).
    private func storageFailure(_ error: StoreError) -> ProtocolError {
        log(.warning, "invite_storage_failed", ["reason": error.description])
        return ProtocolError(.storageUnavailable, "the invite list could not be read or written; try again")
    }
}
