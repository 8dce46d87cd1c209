import FoldtableCore
import FoldtableServer

/// Invites and withdrawn token ids in the same database as the sessions (schema version 6), so
/// a withdrawal survives a restart with the sessions it protects, and a backup copies both.
///
/// Each call runs on the writer thread in queue order, outside the batches' transactions: every
/// write is one statement (or two that may each stand alone), atomic by itself. Expired rows
/// are deleted as new ones are written, so neither table outgrows what is still in force.
extension SQLiteStore: InviteLedger {
    public func withdrawnTokens(now: UInt64) throws(StoreError) -> [String: UInt64] {
        let slot = ResultSlot<Result<[String: UInt64], StoreError>>()
        guard
            writer.enqueue(
                .barrier { tables in
                    do throws(SQLiteError) {
                        let read = try tables.database.statement("SELECT id, until FROM withdrawn_tokens WHERE until > ?1")
                        defer { read.reset() }
                        try read.bind(1, now)
                        var found: [String: UInt64] = [:]
                        while try read.step() {
                            if let id = read.text(0) { found[id] = read.uint64(1) }
                        }
                        slot.set(.success(found))
                    } catch {
                        slot.set(.failure(error.storeError))
                    }
                })
        else { throw StoreError.unavailable("the store \(path) is closed") }
        writer.flush()
        guard let result = slot.get() else { throw StoreError.unavailable("the store \(path) is closed") }
        return try result.get()
    }

    public func record(_ invite: Invite, completion: @escaping (Result<Void, StoreError>) -> Void) {
        onWriter(completion) { database throws(SQLiteError) in
            let prune = try database.statement("DELETE FROM invites WHERE expires <= ?1")
            defer { prune.reset() }
            try prune.bind(1, invite.created)
            _ = try prune.step()
            let insert = try database.statement(
                "INSERT OR REPLACE INTO invites(id, session, role, label, created, expires, created_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")
            defer { insert.reset() }
            try insert.bind(1, invite.id)
            try insert.bind(2, invite.session)
            try insert.bind(3, invite.role.rawValue)
            try insert.bind(4, invite.label)
            try insert.bind(5, invite.created)
            try insert.bind(6, invite.expires)
            try insert.bind(7, invite.createdBy)
            _ = try insert.step()
        }
    }

    public func invites(session: String, now: UInt64, completion: @escaping (Result<[Invite], StoreError>) -> Void) {
        onWriter(completion) { database throws(SQLiteError) in
            let read = try database.statement(
                """
                SELECT id, role, label, created, expires, created_by FROM invites
                WHERE session = ?1 AND expires > ?2 AND id NOT IN (SELECT id FROM withdrawn_tokens WHERE until > ?2)
                ORDER BY created, id
                """)
            defer { read.reset() }
            try read.bind(1, session)
            try read.bind(2, now)
            var found: [Invite] = []
            while try read.step() {
                // A row this build did not write (a role it does not know) is left out, not guessed at.
                guard let id = read.text(0), let role = read.text(1).flatMap(Role.init(rawValue:)) else { continue }
                found.append(
                    Invite(
                        id: id, session: session, role: role, label: read.text(2) ?? "", created: read.uint64(3), expires: read.uint64(4),
                        createdBy: read.text(5) ?? ""))
            }
            return found
        }
    }

    public func withdraw(id: String, session: String, until: UInt64, completion: @escaping (Result<Void, StoreError>) -> Void) {
        let now = Hub.wallClock()
        onWriter(completion) { database throws(SQLiteError) in
            let prune = try database.statement("DELETE FROM withdrawn_tokens WHERE until <= ?1")
            defer { prune.reset() }
            try prune.bind(1, now)
            _ = try prune.step()
            let insert = try database.statement(
                "INSERT INTO withdrawn_tokens(id, until) VALUES (?1, ?2) ON CONFLICT(id) DO UPDATE SET until = max(until, excluded.until)")
            defer { insert.reset() }
            try insert.bind(1, id)
            try insert.bind(2, until)
            _ = try insert.step()
            // The invite is withdrawn now: its row has nothing left to list.
            let forget = try database.statement("DELETE FROM invites WHERE id = ?1")
            defer { forget.reset() }
            try forget.bind(1, id)
            _ = try forget.step()
        }
    }

    /// Nothing to follow: no other process writes this database while this one serves.
    public func follow(_ withdrawn: @escaping ([String: UInt64]) -> Void) {}

    /// Runs `body` on the writer thread and hands its outcome to `completion` on the service thread.
    private func onWriter<Value: Sendable>(
        _ completion: @escaping (Result<Value, StoreError>) -> Void, _ body: @escaping @Sendable (SQLiteDatabase) throws(SQLiteError) -> Value
    ) {
        let box = CompletionBox(completion)
        let post = self.post
        let queued = writer.enqueue(
            .barrier { tables in
                let result: Result<Value, StoreError>
                do throws(SQLiteError) {
                    result = .success(try body(tables.database))
                } catch {
                    result = .failure(error.storeError)
                }
                post { box(result) }
            })
        if !queued {
            let path = self.path
            post { box(.failure(.unavailable("the store \(path) is closed"))) }
        }
    }
}
