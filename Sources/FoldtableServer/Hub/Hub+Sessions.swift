import FoldtableCore

// MARK: - Sessions for clients and the HTTP API: changes, creating, deleting, listing

extension Hub {
    /// A change from the HTTP API, as `author`, into session `name` (which must exist), applied
    /// in the session's one order like a member's; `completion` gets the seq it is durable at
    /// (after the commit), or why not. `id` (the Idempotency-Key) makes retries safe.
    public func submitAPIChange(
        _ change: Change, id: String?, author: Author, session name: String, completion: @escaping (Result<UInt64, ProtocolError>) -> Void
    ) {
        submitAPIChange(change, id: id, author: author, session: name, answer: { result, _ in completion(result) })
    }

    /// As ``submitAPIChange(_:id:author:session:completion:)``; `answer` also gets the key of the
    /// row or section an `addRow` or `addSection` created (the caller's, or the one the table
    /// chose), when its event is at hand: always for the request that made the change and for
    /// retries answered with it, not for a retry answered later from the change-id window.
    public func submitAPIChange(
        _ change: Change, id: String?, author: Author, session name: String,
        answer: @escaping (Result<UInt64, ProtocolError>, _ created: String?) -> Void
    ) {
        withSession(name, create: false) { [self] result in
            switch result {
            case .failure(let error): answer(.failure(error), nil)
            case .success(let session):
                nextAPIRequest += 1
                apiRequests[nextAPIRequest] = answer
                session.handle(.apiChange(change, id: id, author: author, request: nextAPIRequest))
            }
        }
    }

    /// A session answered an HTTP API change.
    func apiAnswered(_ request: UInt64, _ result: Result<UInt64, ProtocolError>) {
        let created = apiCreatedKeys.removeValue(forKey: request)
        apiRequests.removeValue(forKey: request)?(result, created)
    }

    /// The HTTP API change `request` created a row or section keyed `key` (its answer follows).
    func apiCreated(_ request: UInt64, key: String) {
        guard apiRequests[request] != nil else { return }
        apiCreatedKeys[request] = key
    }

    /// Deletes `session` and its history; once the store has, every member is closed with 4501.
    /// `by` names who asked, for the log.
    func deleteSession(_ session: TableSession, by: String, completion: @escaping (Result<Void, ProtocolError>) -> Void) {
        // Changes of this turn that wait for its end go to the log first, as they arrived:
        // committed, then deleted with the session, rather than refused behind the delete.
        if session.core.awaitsHandOver { session.handle(.handOver) }
        ordering.delete(session) { [self] result in
            if case .failure(let error) = result { return completion(.failure(error)) }
            drop(session)
            webhooks?.sessionDeleted(session.name)
            for member in clients.values where member.session === session {
                transport.close(member.connection, code: CloseCode.sessionDeleted, reason: "the session was deleted")
            }
            log(.info, "session_deleted", ["session": session.name, "by": by])
            completion(.success(()))
        }
    }

    /// Creates session `name` holding `table` (the HTTP API's import), answering once it is
    /// stored; refused when a session of that name exists.
    func createSession(_ name: String, table: Table, completion: @escaping (Result<Void, ProtocolError>) -> Void) {
        guard sessions[name] == nil, !ordering.names.contains(name), loading[name] == nil else {
            return completion(.failure(ProtocolError(.duplicateKey, "a session named \"\(name)\" exists", field: "name")))
        }
        guard !overMemoryBudget() else { return completion(.failure(memoryBudgetRefusal)) }
        guard makeRoom() else {
            return completion(.failure(ProtocolError(.limitReached, "the server holds its maximum of \(config.maxSessions) sessions", field: "name")))
        }
        ordering.create(name, table: table, completion: completion)
    }

    /// Every session's name (stored or resident, sorted; with a broker also every shared
    /// session other nodes made), with its member count (on every node: see
    /// `SessionOrdering/withListing(_:)`) and its section count when it is in memory (a stored
    /// one is not loaded just to count).
    func sessionSummaries(visibleTo grant: AccessGrant?) -> [(name: String, members: Int, sections: Int?)] {
        if sortedNames == nil { sortedNames = ordering.names.union(sessions.keys).sorted() }
        return (sortedNames ?? []).filter { grant?.allows($0) ?? true }.map { name in
            (name, listedMembers(name), sessions[name]?.core.committed.sections.count)
        }
    }

    /// Members of session `name` as `list` shows them: a resident session's own count (this
    /// node's members now, other nodes' as of the last presence read); any other the members
    /// other nodes hold, as the ordering last read them (this node holds none of them).
    func listedMembers(_ name: String) -> Int {
        if let session = sessions[name] { return session.core.clusterMemberCount }
        return ordering.members(ofAbsent: name)
    }

    /// Runs `body` once ``sessionSummaries(visibleTo:)`` can answer for every node.
    func withListing(_ body: @escaping () -> Void) { ordering.withListing(body) }

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
}
