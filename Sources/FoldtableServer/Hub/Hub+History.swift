import FoldtableCore

// MARK: - History: who changed what, and when

extension Hub {
    /// A member's `history` message: a page of the joined session's committed events, newest
    /// first, from where the session's ordering keeps them (the store's log on one node). Any
    /// role may read it. A read of the store, so it counts against the change rate as a find does.
    func sendHistory(_ client: ClientState, before: UInt64?, limit: Int, id: String?) {
        let connection = client.connection
        guard let session = client.session else { return refuse(connection, ProtocolError(.notJoined, "join a session first"), id: id) }
        // A page is read from the store (on its writer thread, between commits) or decoded from
        // memory: a few a second is what a page needs, and a member asking more often must not
        // cost every session's commits. Changes keep their own budget.
        let now = transport.nowMilliseconds()
        guard client.historyReads.take(now: now), client.changes.take(now: now) else {
            return refuse(
                connection, ProtocolError(.rateLimited, "more than \(ClientState.historyReadsPerSec) history pages a second; slow down"), id: id)
        }
        ordering.history(of: session, before: before, limit: limit) { [self] result in
            // The answer comes later: the member may have left meanwhile.
            guard clients[connection.id] === client, client.session === session else { return }
            switch result {
            case .success(let page):
                let reply = OutboundMessage(EventHistory.message(id: id, events: page.events, more: page.more))
                metrics.sent(reply, to: 1)
                transport.send(reply, to: connection)
            case .failure(let error):
                refuse(connection, error, id: id)
            }
        }
    }

    /// A page of session `name`'s history for the HTTP API (`session_not_found` when it does not exist).
    func history(
        ofSession name: String, before: UInt64?, limit: Int, completion: @escaping (Result<HistoryPage, ProtocolError>) -> Void
    ) {
        withSession(name, create: false) { [self] result in
            switch result {
            case .success(let session): ordering.history(of: session, before: before, limit: limit, completion: completion)
            case .failure(let error): completion(.failure(error))
            }
        }
    }
}
