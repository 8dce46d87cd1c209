import FoldtableCore
import FoldtableServer

/// The SQL behind each store operation, on the writer's connection.
///
/// Write operations run inside the batch's transaction opened by ``StoreWriter``. They return a
/// `Result` for what concerns the operation alone (`.conflict`: nothing was written) and throw
/// ``SQLiteError`` for what concerns the whole transaction (the batch is rolled back). Conflicts
/// are checked against the database inside the transaction, so they see the batch's earlier
/// writes, and a rollback undoes those automatically: no in-memory copy of `last_seq` can drift
/// from the disk.
final class SessionTables {
    let database: SQLiteDatabase
    /// How many events at or before a checkpoint the log keeps for resuming clients.
    let keepEvents: UInt64
    let limits: TableLimits

    init(database: SQLiteDatabase, keepEvents: Int, limits: TableLimits) {
        self.database = database
        self.keepEvents = UInt64(max(0, keepEvents))
        self.limits = limits
    }

    // MARK: - Writes (inside a transaction)

    func append(session: String, events: [LoggedEvent]) throws(SQLiteError) -> Result<UInt64, StoreError> {
        guard let head = try heads(of: session) else {
            return .failure(.conflict("session \"\(session)\" is not stored"))
        }
        guard let first = events.first else { return .success(head.last) }
        guard first.event.seq == head.last &+ 1 else {
            return .failure(.conflict("event \(first.event.seq) of \"\(session)\" does not follow \(head.last)"))
        }
        for (offset, logged) in events.enumerated() where logged.event.seq != first.event.seq &+ UInt64(offset) {
            return .failure(.conflict("events of \"\(session)\" are not consecutive at \(logged.event.seq)"))
        }
        // OR REPLACE: `last_seq` is the truth; a stray row past it (never written by this code)
        // must not wedge the session with constraint errors forever.
        let insert = try database.statement("INSERT OR REPLACE INTO events(session, seq, entry) VALUES (?1, ?2, ?3)")
        defer { insert.reset() }
        for logged in events {
            insert.reset()
            try insert.bind(1, session)
            try insert.bind(2, logged.event.seq)
            try insert.bind(3, TableCheckpoint.encodeEntry(logged.event, request: logged.request))
            try insert.step()
        }
        let last = first.event.seq &+ UInt64(events.count - 1)
        let update = try database.statement("UPDATE sessions SET last_seq = ?2 WHERE name = ?1")
        defer { update.reset() }
        try update.bind(1, session)
        try update.bind(2, last)
        try update.step()
        return .success(last)
    }

    func create(_ session: StoredSession) throws(SQLiteError) -> Result<Void, StoreError> {
        guard session.events.isEmpty else {
            return .failure(.conflict("a new session \"\(session.name)\" must not carry events"))
        }
        let seq = session.checkpoint.seq
        let upsert = try database.statement("INSERT OR REPLACE INTO sessions(name, epoch, checkpoint_seq, last_seq) VALUES (?1, ?2, ?3, ?3)")
        defer { upsert.reset() }
        try upsert.bind(1, session.name)
        try upsert.bind(2, session.epoch)
        try upsert.bind(3, seq)
        try upsert.step()
        try writeCheckpoint(session.name, session.checkpoint)
        try deleteEvents(of: session.name)
        return .success(())
    }

    func saveCheckpoint(_ name: String, table: Table) throws(SQLiteError) -> Result<Void, StoreError> {
        guard let head = try heads(of: name) else {
            return .failure(.conflict("session \"\(name)\" is not stored"))
        }
        guard table.seq <= head.last else {
            return .failure(.conflict("checkpoint \(table.seq) of \"\(name)\" is past the log's last event \(head.last)"))
        }
        // An older checkpoint than the stored one could need events already pruned.
        guard table.seq >= head.checkpoint else {
            return .failure(.conflict("checkpoint \(table.seq) of \"\(name)\" is older than the stored \(head.checkpoint)"))
        }
        let update = try database.statement("UPDATE sessions SET checkpoint_seq = ?2 WHERE name = ?1")
        defer { update.reset() }
        try update.bind(1, name)
        try update.bind(2, table.seq)
        try update.step()
        try writeCheckpoint(name, table)
        // Keep `keepEvents` events at or before the checkpoint for resume, and every one after it.
        if table.seq > keepEvents {
            let prune = try database.statement("DELETE FROM events WHERE session = ?1 AND seq <= ?2")
            defer { prune.reset() }
            try prune.bind(1, name)
            try prune.bind(2, table.seq - keepEvents)
            try prune.step()
        }
        return .success(())
    }

    /// The checkpoint lives in a table of its own: a session's row is read and rewritten on
    /// every append (`last_seq`), and SQLite rewrites a whole row, overflow pages and all, on
    /// update; with the blob beside it every append would rewrite the whole table's checkpoint.
    private func writeCheckpoint(_ name: String, _ table: Table) throws(SQLiteError) {
        let write = try database.statement("INSERT OR REPLACE INTO checkpoints(session, data) VALUES (?1, ?2)")
        defer { write.reset() }
        try write.bind(1, name)
        try write.bind(2, TableCheckpoint.encode(table))
        try write.step()
    }

    func delete(_ name: String) throws(SQLiteError) -> Result<Void, StoreError> {
        let remove = try database.statement("DELETE FROM sessions WHERE name = ?1")
        defer { remove.reset() }
        try remove.bind(1, name)
        try remove.step()
        let removeCheckpoint = try database.statement("DELETE FROM checkpoints WHERE session = ?1")
        defer { removeCheckpoint.reset() }
        try removeCheckpoint.bind(1, name)
        try removeCheckpoint.step()
        try deleteEvents(of: name)
        return .success(())
    }

    /// Gives every session a new epoch: run once when a restored backup is first opened, so
    /// clients holding a `since` of the history that went on after the backup cannot resume.
    func rotateEpochsIfAsked() throws(SQLiteError) {
        let flag = try database.statement("SELECT value FROM meta WHERE key = 'rotate_epochs'")
        let asked = try flag.step() && flag.text(0) == "1"
        flag.reset()
        guard asked else { return }
        try database.exec("BEGIN IMMEDIATE")
        do throws(SQLiteError) {
            let names = try sessionNames()
            let update = try database.statement("UPDATE sessions SET epoch = ?2 WHERE name = ?1")
            defer { update.reset() }
            let epochs = try currentEpochs()
            for name in names {
                update.reset()
                try update.bind(1, name)
                try update.bind(2, Self.newEpoch(differentFrom: epochs[name]))
                try update.step()
            }
            try database.exec("DELETE FROM meta WHERE key = 'rotate_epochs'")
            try database.exec("COMMIT")
        } catch {
            if !database.isAutocommit { try? database.exec("ROLLBACK") }
            throw error
        }
    }

    /// 8 random hex digits, the form epochs take.
    static func newEpoch(differentFrom old: String? = nil) -> String {
        while true {
            let digits = String(UInt32.random(in: 0...UInt32.max), radix: 16)
            let epoch = String(repeating: "0", count: 8 - digits.count) + digits
            if epoch != old { return epoch }
        }
    }

    // MARK: - Reads

    func sessionNames() throws(SQLiteError) -> [String] {
        let select = try database.statement("SELECT name FROM sessions ORDER BY name")
        defer { select.reset() }
        var names: [String] = []
        while try select.step() {
            if let name = select.text(0) { names.append(name) }
        }
        return names
    }

    func load(_ name: String) throws(SQLiteError) -> Result<StoredSession?, StoreError> {
        let select = try database.statement(
            "SELECT s.epoch, c.data, s.checkpoint_seq, s.last_seq FROM sessions s LEFT JOIN checkpoints c ON c.session = s.name WHERE s.name = ?1")
        defer { select.reset() }
        try select.bind(1, name)
        guard try select.step() else { return .success(nil) }
        let epoch = select.text(0) ?? ""
        let bytes = select.blob(1)
        let checkpointSeq = select.uint64(2)
        let lastSeq = select.uint64(3)
        select.reset()

        let checkpoint: Table
        do {
            checkpoint = try TableCheckpoint.decode(bytes, limits: limits)
        } catch {
            return .failure(.corrupt("checkpoint of \"\(name)\": \(error.message)"))
        }
        guard checkpoint.seq == checkpointSeq else {
            return .failure(.corrupt("checkpoint of \"\(name)\" is at \(checkpoint.seq), its row says \(checkpointSeq)"))
        }
        let events: [LoggedEvent]
        switch try self.events(of: name, after: 0) {
        case .success(let found): events = found
        case .failure(let error): return .failure(error)
        }
        // The log must run without gaps from at or before the checkpoint to `last_seq`, or the
        // table cannot be brought to its head.
        if let first = events.first?.event.seq, let last = events.last?.event.seq {
            guard first <= checkpointSeq &+ 1, last == lastSeq else {
                return .failure(.corrupt("the log of \"\(name)\" holds \(first)...\(last), not up to \(lastSeq) from \(checkpointSeq)"))
            }
        } else if lastSeq != checkpointSeq {
            return .failure(.corrupt("the log of \"\(name)\" is empty but its last event is \(lastSeq), its checkpoint \(checkpointSeq)"))
        }
        return .success(StoredSession(name: name, epoch: epoch, checkpoint: checkpoint, events: events))
    }

    func read(session: String, after seq: UInt64) throws(SQLiteError) -> Result<[LoggedEvent]?, StoreError> {
        guard let head = try heads(of: session) else {
            return .failure(.conflict("session \"\(session)\" is not stored"))
        }
        if seq == head.last { return .success([]) }
        // A `since` past the head belongs to another history: nothing to resume from.
        if seq > head.last { return .success(nil) }
        let events: [LoggedEvent]
        switch try self.events(of: session, after: seq) {
        case .success(let found): events = found
        case .failure(let error): return .failure(error)
        }
        guard let first = events.first, first.event.seq == seq + 1 else { return .success(nil) }
        guard events[events.count - 1].event.seq == head.last else {
            return .failure(.corrupt("the log of \"\(session)\" ends at \(events[events.count - 1].event.seq), not \(head.last)"))
        }
        return .success(events)
    }

    // MARK: - Helpers

    /// The session's checkpoint seq and last logged seq, or `nil` when it is not stored.
    private func heads(of name: String) throws(SQLiteError) -> (checkpoint: UInt64, last: UInt64)? {
        let select = try database.statement("SELECT checkpoint_seq, last_seq FROM sessions WHERE name = ?1")
        defer { select.reset() }
        try select.bind(1, name)
        guard try select.step() else { return nil }
        return (select.uint64(0), select.uint64(1))
    }

    /// Every stored event of `name` after `seq`, decoded, checked to be consecutive.
    private func events(of name: String, after seq: UInt64) throws(SQLiteError) -> Result<[LoggedEvent], StoreError> {
        let select = try database.statement("SELECT seq, entry FROM events WHERE session = ?1 AND seq > ?2 ORDER BY seq")
        defer { select.reset() }
        try select.bind(1, name)
        try select.bind(2, seq)
        var events: [LoggedEvent] = []
        while try select.step() {
            let stored = select.uint64(0)
            let entry: (event: TableEvent, request: Change?)
            do {
                entry = try TableCheckpoint.decodeEntry(select.blob(1), limits: limits)
            } catch {
                return .failure(.corrupt("event \(stored) of \"\(name)\": \(error.message)"))
            }
            guard entry.event.seq == stored else {
                return .failure(.corrupt("event \(stored) of \"\(name)\" holds seq \(entry.event.seq)"))
            }
            if let previous = events.last, previous.event.seq &+ 1 != stored {
                return .failure(.corrupt("the log of \"\(name)\" skips from \(previous.event.seq) to \(stored)"))
            }
            events.append(LoggedEvent(event: entry.event, request: entry.request))
        }
        return .success(events)
    }

    private func currentEpochs() throws(SQLiteError) -> [String: String] {
        let select = try database.statement("SELECT name, epoch FROM sessions")
        defer { select.reset() }
        var epochs: [String: String] = [:]
        while try select.step() {
            if let name = select.text(0) { epochs[name] = select.text(1) }
        }
        return epochs
    }

    private func deleteEvents(of name: String) throws(SQLiteError) {
        let remove = try database.statement("DELETE FROM events WHERE session = ?1")
        defer { remove.reset() }
        try remove.bind(1, name)
        try remove.step()
    }
}
