import CSQLite
import FoldtableServer
import Synchronization

/// Webhooks in the `webhooks` table (schema version 7), written by the store's writer thread in
/// queue order with every other operation, inside the same group commit as the appends of that
/// turn. A change's commit carries nothing for webhooks; a cursor save is a write of its own,
/// which ``Webhooks`` makes at most once a second per busy webhook (it splits no group commit
/// while changes are stored, but may cost a sync when none are).
extension SQLiteStore: WebhookStore {
    public func webhooks() throws(StoreError) -> [StoredWebhook] {
        let slot = WebhookSlot()
        submit(
            .barrier { tables in
                do throws(SQLiteError) {
                    // A row whose session is gone or was made again (another epoch) belongs to
                    // nothing: a PUT that raced a delete before the store refused such writes.
                    try tables.database.exec(
                        "DELETE FROM webhooks WHERE NOT EXISTS (SELECT 1 FROM sessions WHERE sessions.name = webhooks.session AND sessions.epoch = webhooks.epoch)"
                    )
                    let select = try tables.database.prepareUncached(
                        "SELECT session, url, secret, epoch, delivered, paused FROM webhooks ORDER BY session")
                    defer { select.finalize() }
                    var found: [StoredWebhook] = []
                    while try select.step() {
                        found.append(
                            StoredWebhook(
                                session: select.text(0) ?? "", url: select.text(1) ?? "", secret: select.text(2) ?? "", epoch: select.text(3) ?? "",
                                delivered: select.uint64(4), paused: select.isNull(5) ? nil : select.text(5)))
                    }
                    slot.set(.success(found))
                } catch {
                    slot.set(.failure(error.storeError))
                }
            })
        flush()
        guard let result = slot.get() else { throw StoreError.unavailable("the store \(path) is closed") }
        return try result.get()
    }

    public func saveWebhook(_ webhook: StoredWebhook, completion: @escaping (Result<Void, StoreError>) -> Void) {
        write(completion) { database throws(SQLiteError) in
            let insert = try database.statement(
                // Only for the session as it is stored now: a delete queued before this wins.
                "INSERT OR REPLACE INTO webhooks(session, url, secret, epoch, delivered, paused) SELECT ?1, ?2, ?3, ?4, ?5, ?6"
                    + " WHERE EXISTS (SELECT 1 FROM sessions WHERE name = ?1 AND epoch = ?4)")
            defer { insert.reset() }
            try insert.bind(1, webhook.session)
            try insert.bind(2, webhook.url)
            try insert.bind(3, webhook.secret)
            try insert.bind(4, webhook.epoch)
            try insert.bind(5, webhook.delivered)
            if let paused = webhook.paused { try insert.bind(6, paused) }
            try insert.step()
        }
    }

    public func saveWebhookCursor(
        session: String, epoch: String, delivered: UInt64, paused: String?, completion: @escaping (Result<Void, StoreError>) -> Void
    ) {
        write(completion) { database throws(SQLiteError) in
            let update = try database.statement("UPDATE webhooks SET delivered = ?2, paused = ?3 WHERE session = ?1 AND epoch = ?4")
            defer { update.reset() }
            try update.bind(1, session)
            try update.bind(2, delivered)
            if let paused { try update.bind(3, paused) }
            try update.bind(4, epoch)
            try update.step()
        }
    }

    public func deleteWebhook(session: String, completion: @escaping (Result<Void, StoreError>) -> Void) {
        write(completion) { database throws(SQLiteError) in
            let remove = try database.statement("DELETE FROM webhooks WHERE session = ?1")
            defer { remove.reset() }
            try remove.bind(1, session)
            try remove.step()
        }
    }

    /// Runs `body` in the writer's next write transaction, after everything asked before it,
    /// and hands its outcome to `completion` on the service thread.
    private func write(
        _ completion: @escaping (Result<Void, StoreError>) -> Void, _ body: @escaping @Sendable (SQLiteDatabase) throws(SQLiteError) -> Void
    ) {
        submit(.webhook(body, CompletionBox(completion)))
    }
}

/// The start-up read's result, handed from the writer thread to the caller waiting in `flush`.
private final class WebhookSlot: Sendable {
    private let state = Mutex<Result<[StoredWebhook], StoreError>?>(nil)

    func set(_ value: Result<[StoredWebhook], StoreError>) { state.withLock { $0 = value } }
    func get() -> Result<[StoredWebhook], StoreError>? { state.withLock { $0 } }
}
