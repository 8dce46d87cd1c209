import FoldtableCore
import FoldtableServer

/// The SQL behind each store operation, on the writer's connection, and the in-memory index of
/// the journal (see ``JournalIndex``) that goes with it.
///
/// Write operations run inside the batch's transaction opened by ``StoreWriter``. They return a
/// `Result` for what concerns the operation alone (`.conflict`: nothing was written) and throw
/// ``SQLiteError`` for what concerns the whole transaction (the batch is rolled back). Conflicts
/// are checked against each session's head in ``JournalIndex``, which takes every write at once
/// (so a check sees the batch's earlier writes) and is rebuilt from the database after a
/// rollback (so it never keeps what the disk does not have).
final class SessionTables {
    let database: SQLiteDatabase
    /// How many events at or before a checkpoint the log keeps for resuming clients.
    let keepEvents: UInt64
    let limits: TableLimits

    /// Where each session's live events sit in the journal (see ``JournalIndex``).
    private var index = JournalIndex()
    /// False until built, and after a rolled-back transaction (the index's updates are not undone
    /// with it): the next operation rebuilds it from the database.
    private var indexIsValid = false
    /// The journal's smallest and largest rowids (the smallest may be below a hole). The newest
    /// row is never deleted, so rowids only grow.
    private var oldestRow: Int64 = 1
    private var newestRow: Int64 = 0
    /// Rows the journal may hold beyond twice the live events before sessions holding its tail
    /// are moved to its head. A variable for tests.
    var journalSlack: Int64 = 65_536
    /// Dead rows at the journal's tail deleted together (one DELETE per this many appends at most).
    var truncateStep: Int64 = 4_096
    /// The journal's insert (see `insertStatement()`), and buffers every append reuses: the
    /// entry being encoded, the rows written.
    private var insert: SQLiteStatement?
    private var entryBuffer = JSONWriter(capacity: 512)
    private var appendedRows: [Int64] = []

    init(database: SQLiteDatabase, keepEvents: Int, limits: TableLimits) {
        self.database = database
        self.keepEvents = UInt64(max(0, keepEvents))
        self.limits = limits
    }

    // MARK: - The journal's index

    /// Reads what every session still needs and scans the journal once (rowids, sessions and
    /// seqs: the entries themselves stay on disk) to build ``JournalIndex``.
    func loadIndex() throws(SQLiteError) {
        var stored: [String: JournalIndex.Stored] = [:]
        let sessions = try database.statement("SELECT name, checkpoint_seq, last_seq, first_row FROM sessions")
        defer { sessions.reset() }
        while try sessions.step() {
            guard let name = sessions.text(0) else { continue }
            let checkpoint = sessions.uint64(1)
            stored[name] = JournalIndex.Stored(
                checkpoint: checkpoint, last: sessions.uint64(2), keepFrom: keepFrom(checkpoint: checkpoint), afterRow: sessions.int64(3))
        }
        sessions.reset()
        let scan = try database.statement("SELECT id, session, seq FROM journal ORDER BY id")
        defer { scan.reset() }
        let built = try JournalIndex(sessions: stored) { found throws(SQLiteError) in
            while try scan.step() {
                if let session = scan.text(1) { found(scan.int64(0), session, scan.uint64(2)) }
            }
        }
        scan.reset()
        // max() and min() of an empty table are NULL, read as 0.
        newestRow = try database.scalarInt("SELECT max(id) FROM journal") ?? 0
        oldestRow = newestRow == 0 ? 1 : (try database.scalarInt("SELECT min(id) FROM journal") ?? 1)
        index = built
        indexIsValid = true
    }

    /// Marks the index as out of step with the database (a transaction was rolled back).
    func invalidateIndex() {
        indexIsValid = false
    }

    private func ensureIndex() throws(SQLiteError) {
        if !indexIsValid { try loadIndex() }
    }

    /// The first seq a session with its checkpoint at `checkpoint` still needs.
    private func keepFrom(checkpoint: UInt64) -> UInt64 {
        checkpoint > keepEvents ? checkpoint - keepEvents + 1 : 1
    }

    /// Keeps the journal bounded, inside the batch's transaction: deletes the rows below the
    /// oldest live one; and when the journal spans more than twice the live events (plus
    /// `journalSlack`), because sessions that stopped writing hold its tail, moves those
    /// sessions' live rows to its head so the tail can go. Moving copies at most the live
    /// events, and happens only after the journal grew by more than that, so each event is
    /// written at most about twice on average.
    func compactJournal() throws(SQLiteError) {
        try ensureIndex()
        try truncateJournal()
        let span = newestRow - oldestRow + 1
        guard span > 2 * Int64(index.liveCount) + journalSlack else { return }
        let cut = oldestRow + span / 2
        for session in index.sessions(withRowsBelow: cut) { try relocate(session) }
        try truncateJournal()
    }

    private func truncateJournal() throws(SQLiteError) {
        // Never the newest row: rowids must keep growing (SQLite gives a new row the largest
        // rowid plus one), or a session's `first_row` could cover rows written after it.
        let needed = min(index.lowestLiveRow() ?? newestRow, newestRow)
        guard needed - oldestRow >= truncateStep else { return }
        let truncate = try database.statement("DELETE FROM journal WHERE id < ?1")
        defer { truncate.reset() }
        try truncate.bind(1, needed)
        try truncate.step()
        oldestRow = needed
    }

    /// Copies every live row of `session` to the journal's head, in seq order, and deletes the
    /// originals (so a scan never finds two rows of one seq).
    private func relocate(_ session: String) throws(SQLiteError) {
        let copy = try database.statement("INSERT INTO journal(session, seq, entry) SELECT session, seq, entry FROM journal WHERE id = ?1")
        defer { copy.reset() }
        let remove = try database.statement("DELETE FROM journal WHERE id = ?1")
        defer { remove.reset() }
        var moved: [Int64] = []
        for row in index.rows(of: session, after: 0).rows {
            copy.reset()
            try copy.bind(1, row)
            try copy.step()
            let copied = database.lastInsertRowid
            guard copied > newestRow else {
                // The row was missing: leave it to `load`, which reports the gap as corrupt.
                moved.append(row)
                continue
            }
            newestRow = copied
            moved.append(copied)
            remove.reset()
            try remove.bind(1, row)
            try remove.step()
        }
        index.moved(session, to: moved)
    }

    // MARK: - Writes (inside a transaction)

    /// Writes only journal rows: the session's row in `sessions` is not touched (its head is in
    /// the index, and the journal says where the log ends when the store opens), so a commit
    /// touching 1,000 sessions writes their events and nothing per session.
    func append(session: String, events: [LoggedEvent]) throws(SQLiteError) -> Result<UInt64, StoreError> {
        try ensureIndex()
        guard let slot = index.slot(of: session) else {
            return .failure(.conflict("session \"\(session)\" is not stored"))
        }
        let last = index.head(at: slot).last
        // Through the buffer, not `for logged in events` or the array's subscript: those copied
        // each event (a retain and release of every string and array in it) to read it.
        return try events.withUnsafeBufferPointer { events throws(SQLiteError) in
            guard let first = events.first?.event.seq else { return .success(last) }
            guard first == last &+ 1 else {
                return .failure(.conflict("event \(first) of \"\(session)\" does not follow \(last)"))
            }
            for offset in events.indices where events[offset].event.seq != first &+ UInt64(offset) {
                return .failure(.conflict("events of \"\(session)\" are not consecutive at \(events[offset].event.seq)"))
            }
            try insert(events, of: session)
            index.appended(at: slot, firstSeq: first, rows: appendedRows)
            return .success(first &+ UInt64(events.count - 1))
        }
    }

    /// Writes `events` to the journal, their rows into `appendedRows`.
    private func insert(_ events: UnsafeBufferPointer<LoggedEvent>, of session: String) throws(SQLiteError) {
        let insert = try insertStatement()
        // Rewound, never reset (which also clears the bindings, freeing SQLite's copy of the
        // name): the session stays bound for the whole append (one copy of the name), the seq
        // and entry are bound anew for each, and nothing bound points into our memory after a
        // step (see `step(binding:to:)`), so the bindings may stay until the next append.
        defer { insert.rewind() }
        try insert.bind(1, session)
        // The buffers and bounds are worked on as locals and put back once: every access to a
        // stored property of this class is an exclusivity check.
        var entry = JSONWriter(capacity: 0)
        var rows: [Int64] = []
        swap(&entry, &entryBuffer)
        swap(&rows, &appendedRows)
        var newest = newestRow
        var oldest = oldestRow
        defer {
            swap(&entry, &entryBuffer)
            swap(&rows, &appendedRows)
            newestRow = newest
            oldestRow = oldest
        }
        rows.removeAll(keepingCapacity: true)
        for logged in events.indices {
            insert.rewind()
            try insert.bind(2, events[logged].event.seq)
            entry.bytes.removeAll(keepingCapacity: true)
            TableCheckpoint.encodeEntry(events[logged].event, request: events[logged].request, encodedEvent: events[logged].encoded, into: &entry)
            try insert.step(binding: 3, to: entry.bytes)
            let row = database.lastInsertRowid
            newest = max(newest, row)
            oldest = min(oldest, row)
            rows.append(row)
        }
    }

    /// The journal's insert, prepared once: looking it up in the connection's cache by its SQL
    /// hashed the whole text on every append.
    private func insertStatement() throws(SQLiteError) -> SQLiteStatement {
        if let insert { return insert }
        let prepared = try database.statement("INSERT INTO journal(session, seq, entry) VALUES (?1, ?2, ?3)")
        insert = prepared
        return prepared
    }

    func create(_ session: StoredSession) throws(SQLiteError) -> Result<Void, StoreError> {
        guard session.events.isEmpty else {
            return .failure(.conflict("a new session \"\(session.name)\" must not carry events"))
        }
        try ensureIndex()
        let seq = session.checkpoint.seq
        let upsert = try database.statement(
            "INSERT OR REPLACE INTO sessions(name, epoch, checkpoint_seq, last_seq, first_row) VALUES (?1, ?2, ?3, ?3, ?4)")
        defer { upsert.reset() }
        try upsert.bind(1, session.name)
        try upsert.bind(2, session.epoch)
        try upsert.bind(3, seq)
        try upsert.bind(4, newestRow)
        try upsert.step()
        try writeCheckpoint(session.name, session.checkpoint)
        try deleteEvents(of: session.name)
        index.created(session.name, at: seq)
        return .success(())
    }

    func saveCheckpoint(_ name: String, table: Table) throws(SQLiteError) -> Result<Void, StoreError> {
        try ensureIndex()
        guard let head = index.head(of: name) else {
            return .failure(.conflict("session \"\(name)\" is not stored"))
        }
        guard table.seq <= head.last else {
            return .failure(.conflict("checkpoint \(table.seq) of \"\(name)\" is past the log's last event \(head.last)"))
        }
        // An older checkpoint than the stored one could need events already pruned.
        guard table.seq >= head.checkpoint else {
            return .failure(.conflict("checkpoint \(table.seq) of \"\(name)\" is older than the stored \(head.checkpoint)"))
        }
        // `last_seq` is brought up to date here too: cheap, and it lets a reader of the file
        // alone see roughly where each log is.
        let update = try database.statement("UPDATE sessions SET checkpoint_seq = ?2, last_seq = ?3 WHERE name = ?1")
        defer { update.reset() }
        try update.bind(1, name)
        try update.bind(2, table.seq)
        try update.bind(3, head.last)
        try update.step()
        try writeCheckpoint(name, table)
        // Keep `keepEvents` events at or before the checkpoint for resume, and every one after
        // it. The rows stay in the journal until it is truncated behind every session's oldest.
        index.checkpointed(name, at: table.seq, pruneThrough: table.seq > keepEvents ? table.seq - keepEvents : nil)
        return .success(())
    }

    /// The checkpoint lives in a table of its own: SQLite rewrites a whole row, overflow pages
    /// and all, on update, and a session's row is read on every load and rewritten on every
    /// checkpoint.
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
        try ensureIndex()
        let select = try database.statement(
            "SELECT s.epoch, c.data, s.checkpoint_seq FROM sessions s LEFT JOIN checkpoints c ON c.session = s.name WHERE s.name = ?1")
        defer { select.reset() }
        try select.bind(1, name)
        guard try select.step() else { return .success(nil) }
        let epoch = select.text(0) ?? ""
        let bytes = select.blob(1)
        let checkpointSeq = select.uint64(2)
        select.reset()
        // The index's head: `last_seq` in the row is only as of the last checkpoint.
        let lastSeq = index.head(of: name)?.last ?? checkpointSeq

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
        try ensureIndex()
        guard let head = index.head(of: session) else {
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

    /// Every live event of `name` after `seq`, read by rowid through the index, decoded, checked
    /// to be the session's and consecutive.
    private func events(of name: String, after seq: UInt64) throws(SQLiteError) -> Result<[LoggedEvent], StoreError> {
        try ensureIndex()
        let select = try database.statement("SELECT session, seq, entry FROM journal WHERE id = ?1")
        defer { select.reset() }
        let (firstSeq, rows) = index.rows(of: name, after: seq)
        var events: [LoggedEvent] = []
        events.reserveCapacity(rows.count)
        var expected = firstSeq
        for row in rows {
            select.reset()
            try select.bind(1, row)
            guard try select.step(), select.text(0) == name else {
                return .failure(.corrupt("event \(expected) of \"\(name)\" is missing from the journal"))
            }
            let stored = select.uint64(1)
            guard stored == expected else {
                return .failure(.corrupt("the log of \"\(name)\" skips from \(expected - 1) to \(stored)"))
            }
            let entry: (event: TableEvent, request: Change?)
            do {
                entry = try TableCheckpoint.decodeEntry(select.blob(2), limits: limits)
            } catch {
                return .failure(.corrupt("event \(stored) of \"\(name)\": \(error.message)"))
            }
            guard entry.event.seq == stored else {
                return .failure(.corrupt("event \(stored) of \"\(name)\" holds seq \(entry.event.seq)"))
            }
            events.append(LoggedEvent(event: entry.event, request: entry.request))
            expected += 1
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

    /// Deletes the session's live rows by rowid (its dead ones go when the journal is truncated).
    private func deleteEvents(of name: String) throws(SQLiteError) {
        try ensureIndex()
        let remove = try database.statement("DELETE FROM journal WHERE id = ?1")
        defer { remove.reset() }
        // Never the newest row, like truncation: rowids must keep growing for `first_row`.
        for row in index.remove(name) where row != newestRow {
            remove.reset()
            try remove.bind(1, row)
            try remove.step()
        }
    }
}
