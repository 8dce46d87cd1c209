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
    /// How many events at or before a checkpoint the log keeps: for resuming clients and for
    /// history, whichever needs more.
    let keepEvents: UInt64
    /// How many of those a load reads (the resume window): a history bound larger than it costs
    /// the journal's room, not every session's load.
    let resumeEvents: UInt64
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
    /// Events (live or not) in each row from `oldestRow` on, in rowid order from
    /// `rowEventsStart`, and their sum: how much the journal holds, for `compactJournal`.
    private var rowEvents: [(row: Int64, events: Int)] = []
    private var rowEventsStart = 0
    private var journalEvents = 0
    /// How many times the live events the journal may hold (plus `journalSlack`) before the
    /// sessions holding its tail are moved to its head. Sessions that all write at one pace
    /// already keep it at about twice: a session about to checkpoint holds its
    /// `keepEvents + checkpointEvents` newest events' worth of every session's rows, against
    /// `keepEvents + checkpointEvents / 2` live on average (in the acks benchmark 1.3M events
    /// held, 650k live). At twice, relocation ran on every commit, moving sessions a few events
    /// before their checkpoint would have freed the tail anyway: 10% of the writer.
    static let journalGrowth = 3
    /// Events the journal may hold beyond `journalGrowth` times the live events. A variable for
    /// tests.
    var journalSlack = 65_536
    /// Dead rows at the journal's tail deleted together (one DELETE per this many commits at most).
    var truncateStep: Int64 = 64
    /// Events a commit may relocate at least, whatever it appended (see `compactJournal`). A
    /// variable for tests.
    var relocationAllowance = 1_024
    /// Events appended since the last `compactJournal`: what the commit's relocations may spend
    /// twice over.
    private var appendedSinceCompaction = 0
    /// The row the current transaction's writes go to, until `flushRow()` inserts it: its runs
    /// (the `runs` column, a JSON array of `[session, first seq, count, bytes]`, without its
    /// closing bracket) and every run's entries joined by newlines (`entries`).
    private var rowRuns = JSONWriter(capacity: 1_024)
    private var rowEntries = JSONWriter(capacity: 8_192)
    private var rowRunCount = 0
    private var rowEventCount = 0
    /// The last run of the row being built, while an append of the same session can still
    /// extend it (see `extendLastRun`): its session, where its numbers start in `rowRuns`, and
    /// its first seq, count and entries' length.
    private var lastRun: (session: String, numbersAt: Int, firstSeq: UInt64, count: Int, length: Int)?
    /// A row is inserted once its entries pass this many bytes, even mid-transaction, so that a
    /// row stays about one 4 KiB page. Reading a session's events fetches each of its runs with
    /// `substr`, which loads the whole row: with a row per commit (a thousand sessions' events,
    /// ~250 KiB in overflow pages) loading one session after a restart read every row of the
    /// log whole, 4× slower than rows of one event (200 sessions loaded at once: 8.4 s against
    /// 2.1 s). At about a page a row the insert is still shared by a dozen events or so.
    static let rowLimit = 3_072
    /// The journal's insert (see `insertStatement()`).
    private var insert: SQLiteStatement?

    init(database: SQLiteDatabase, keepEvents: Int, historyKeepEvents: Int = 0, limits: TableLimits) {
        self.database = database
        self.keepEvents = UInt64(max(0, keepEvents, historyKeepEvents))
        self.resumeEvents = UInt64(max(0, keepEvents))
        self.limits = limits
    }

    // MARK: - The journal's index

    /// Reads what every session still needs and scans the journal once (rowids and each row's
    /// runs: the entries themselves stay on disk) to build ``JournalIndex``.
    func loadIndex() throws(SQLiteError) {
        discardRow()
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
        let scan = try database.statement("SELECT id, runs FROM journal ORDER BY id")
        defer { scan.reset() }
        var counted: [(row: Int64, events: Int)] = []
        let built = try JournalIndex(sessions: stored) { found throws(SQLiteError) in
            while try scan.step() {
                let row = scan.int64(0)
                // A row whose runs cannot be read counts for none of its sessions: their logs then
                // have a gap, which `load` reports as corrupt.
                let runs = Self.runs(of: scan.blob(1), row: row)
                for (session, segment) in runs { found(session, segment) }
                counted.append((row, runs.reduce(0) { $0 + Int($1.segment.count) }))
            }
        }
        scan.reset()
        // max() and min() of an empty table are NULL, read as 0.
        newestRow = try database.scalarInt("SELECT max(id) FROM journal") ?? 0
        oldestRow = newestRow == 0 ? 1 : (try database.scalarInt("SELECT min(id) FROM journal") ?? 1)
        rowEvents = counted
        rowEventsStart = 0
        journalEvents = counted.reduce(0) { $0 + $1.events }
        index = built
        indexIsValid = true
    }

    /// The runs a row's `runs` column lists, with where their entries sit in its `entries`
    /// (one after another, a newline between two); none when the column is not such a list.
    static func runs(of column: [UInt8], row: Int64) -> [(session: String, segment: JournalIndex.Segment)] {
        guard case .array(let items)? = try? JSONParser.parse(column, limits: JSONParser.Limits(maxDepth: 3, maxStringBytes: 1 << 16))
        else { return [] }
        var runs: [(session: String, segment: JournalIndex.Segment)] = []
        var offset = 0
        for item in items {
            guard case .array(let fields) = item, fields.count == 4, case .string(let session) = fields[0],
                case .integer(let seq) = fields[1], seq >= 0, case .integer(let count) = fields[2], count >= 1, count <= UInt32.max,
                case .integer(let length) = fields[3], length >= 0, length <= Int64(UInt32.max) - Int64(offset)
            else { return [] }
            runs.append(
                (session, JournalIndex.Segment(row: row, firstSeq: UInt64(seq), count: UInt32(count), offset: UInt32(offset), length: UInt32(length)))
            )
            offset += Int(length) + 1
        }
        return runs
    }

    /// Marks the index as out of step with the database (a transaction was rolled back), and
    /// drops the row being built with it.
    func invalidateIndex() {
        indexIsValid = false
        discardRow()
    }

    private func ensureIndex() throws(SQLiteError) {
        if !indexIsValid { try loadIndex() }
    }

    /// The first seq a session with its checkpoint at `checkpoint` still needs.
    private func keepFrom(checkpoint: UInt64) -> UInt64 {
        checkpoint > keepEvents ? checkpoint - keepEvents + 1 : 1
    }

    /// Ends the transaction's writes to the journal, inside it: inserts the row its appends
    /// built, then keeps the journal bounded: deletes the rows below the oldest live one; and
    /// when the journal holds more than `journalGrowth` times the live events (plus
    /// `journalSlack`), because sessions that stopped writing (or write slowly) hold its tail,
    /// copies those sessions' live events to its head so the tail can go. Moving copies at most
    /// the live events, and happens only after the journal grew by twice that or more, so each
    /// event is written at most about one and a half times on average.
    ///
    /// The sessions holding the tail are moved oldest first, a few a commit: at most twice the
    /// events the commit appended (at least `relocationAllowance`), which is more than the
    /// journal grew by, so it still shrinks to its bound. Moving every session below the
    /// journal's middle at once (as before) copied up to half the live events in one commit: with
    /// 1,000 sessions of uneven pace it held every ack for a second.
    func compactJournal() throws(SQLiteError) {
        try ensureIndex()
        try flushRow()
        try truncateJournal()
        let budget = max(relocationAllowance, 2 * appendedSinceCompaction)
        appendedSinceCompaction = 0
        guard journalEvents > Self.journalGrowth * index.liveEvents + journalSlack else { return }
        // Sessions below the journal's middle: the rest are not what holds it long.
        let cut = oldestRow + (newestRow - oldestRow + 1) / 2
        var moved = 0
        for session in index.sessionsHoldingTheTail(below: cut, untilEvents: budget) {
            moved += try relocate(session)
        }
        guard moved > 0 else { return }
        try flushRow()
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
        while rowEventsStart < rowEvents.count && rowEvents[rowEventsStart].row < needed {
            journalEvents -= rowEvents[rowEventsStart].events
            rowEventsStart += 1
        }
        if rowEventsStart > 1_024 && rowEventsStart * 2 > rowEvents.count {
            rowEvents.removeFirst(rowEventsStart)
            rowEventsStart = 0
        }
    }

    /// Copies the live events of `session` into one run of the row being built, in seq order,
    /// and points the index there; returns how many it copied. The originals stay until
    /// truncation: a scan finds the copy after them, starting at or before the seq they reached,
    /// and starts the session's run again there (see ``JournalIndex``).
    private func relocate(_ session: String) throws(SQLiteError) -> Int {
        let (first, segments) = index.rows(of: session, after: 0)
        guard let last = segments.last?.endSeq else { return 0 }
        var pieces: [ArraySlice<UInt8>] = []
        for segment in segments {
            // A row missing or damaged: leave the session where it is, for `load` to report.
            guard case .success(let entries) = try entries(of: segment, session: session) else { return 0 }
            pieces += entries.dropFirst(Int(first > segment.firstSeq ? first - segment.firstSeq : 0))
        }
        let moved = try addRun(session: session, firstSeq: first, count: Int(last - first)) { entries in
            for (offset, piece) in pieces.enumerated() {
                if offset > 0 { entries.byte(UInt8(ascii: "\n")) }
                entries.raw(Array(piece))
            }
        }
        index.moved(session, to: moved)
        return Int(last - first)
    }

    // MARK: - The row being built

    /// Adds a run of `count` events of `session` from `firstSeq` to the row being built, its
    /// entries written by `write` (joined by newlines); returns where it sits. Inserts the row
    /// first when it is full.
    private func addRun(
        session: String, firstSeq: UInt64, count: Int, extendable: Bool = false, entries write: (inout JSONWriter) -> Void
    ) throws(SQLiteError) -> JournalIndex.Segment {
        if rowEntries.count > Self.rowLimit { try flushRow() }
        // The buffers are worked on as locals and put back once: every access to a stored
        // property of this class is an exclusivity check.
        var runs = JSONWriter(capacity: 0)
        var entries = JSONWriter(capacity: 0)
        swap(&runs, &rowRuns)
        swap(&entries, &rowEntries)
        defer {
            swap(&runs, &rowRuns)
            swap(&entries, &rowEntries)
        }
        if rowRunCount > 0 {
            runs.byte(UInt8(ascii: ","))
            // A newline cannot occur inside an entry (see `TableCheckpoint.encodeEntry`), so it
            // separates them, and runs.
            entries.byte(UInt8(ascii: "\n"))
        } else {
            runs.byte(UInt8(ascii: "["))
        }
        let offset = entries.count
        write(&entries)
        let length = entries.count - offset
        runs.byte(UInt8(ascii: "["))
        runs.string(session)
        // Only an append's run may be extended by the next append (see `extendLastRun`).
        lastRun = extendable ? (session, runs.count, firstSeq, count, length) : nil
        Self.writeNumbers(firstSeq, UInt64(count), UInt64(length), into: &runs)
        rowRunCount += 1
        rowEventCount += count
        return JournalIndex.Segment(row: newestRow + 1, firstSeq: firstSeq, count: UInt32(count), offset: UInt32(offset), length: UInt32(length))
    }

    /// `,a,b,c]`: a run's first seq, count and bytes, closing its list entry.
    private static func writeNumbers(_ a: UInt64, _ b: UInt64, _ c: UInt64, into out: inout JSONWriter) {
        out.byte(UInt8(ascii: ","))
        out.integer(a)
        out.byte(UInt8(ascii: ","))
        out.integer(b)
        out.byte(UInt8(ascii: ","))
        out.integer(c)
        out.byte(UInt8(ascii: "]"))
    }

    /// Inserts the row being built, if it holds a run, as the journal's newest (the rowid its
    /// runs were given).
    private func flushRow() throws(SQLiteError) {
        guard rowRunCount > 0 else { return }
        let insert = try insertStatement()
        // Rewound, never reset: nothing bound points into our memory after the step (see
        // `step(binding:to:)`), and the next row binds every parameter anew.
        defer { insert.rewind() }
        let row = newestRow + 1
        try insert.bind(1, row)
        rowRuns.byte(UInt8(ascii: "]"))
        try insert.bind(2, text: rowRuns.bytes)
        try insert.step(binding: 3, to: rowEntries.bytes)
        newestRow = row
        oldestRow = min(oldestRow, row)
        rowEvents.append((row, rowEventCount))
        journalEvents += rowEventCount
        discardRow()
    }

    /// Empties the row being built, keeping its buffers.
    private func discardRow() {
        rowRuns.removeAll()
        rowEntries.removeAll()
        rowRunCount = 0
        rowEventCount = 0
        lastRun = nil
    }

    /// The journal's insert, prepared once: looking it up in the connection's cache by its SQL
    /// hashed the whole text on every use.
    private func insertStatement() throws(SQLiteError) -> SQLiteStatement {
        if let insert { return insert }
        let prepared = try database.statement("INSERT INTO journal(id, runs, entries) VALUES (?1, ?2, ?3)")
        insert = prepared
        return prepared
    }

    /// The entries of `events`, joined by newlines, read where they are. Not taken out of the
    /// array (reversed, then popped): the session still holds the same array until its commit
    /// is reported (it publishes those events then), so reversing it copied the whole batch on
    /// this thread, every event's strings and arrays retained, then released: 4% of the core in
    /// a steady acks run (`_consumeAndCreateNew`). Nor is an event handed to `encodeEntry` when
    /// its entry is its bytes alone: that copied it (every string and array in it retained, then
    /// released: 7% of this thread; `foldtable-bench store` 2.71 → 2.47 µs an event).
    private static func writeEntries(_ events: [LoggedEvent], into entries: inout JSONWriter) {
        for index in events.indices {
            if index > 0 { entries.byte(UInt8(ascii: "\n")) }
            // Most entries are the event's bytes: written without reading the event (see
            // `LoggedEvent.entryIsEncoded`).
            if events[index].entryIsEncoded, let eventBytes = events[index].encoded {
                TableCheckpoint.encodeEntry(eventBytes: eventBytes, changeId: events[index].event.changeId, into: &entries)
            } else {
                TableCheckpoint.encodeEntry(events[index].event, request: events[index].request, encodedEvent: events[index].encoded, into: &entries)
            }
        }
    }

    // MARK: - Writes (inside a transaction)

    /// Adds the events to the transaction's journal row as one run, and writes nothing else: the
    /// session's row in `sessions` is not touched (its head is in the index, and the journal says
    /// where the log ends when the store opens), so a commit touching 1,000 sessions inserts one
    /// row and nothing per session.
    func append(session: String, events: [LoggedEvent]) throws(SQLiteError) -> Result<UInt64, StoreError> {
        try ensureIndex()
        guard let slot = index.slot(of: session) else {
            return .failure(.conflict("session \"\(session)\" is not stored"))
        }
        let last = index.head(at: slot).last
        // Checked through the buffer, not `for logged in events`: that copied each event (a
        // retain and release of every string and array in it) to read its seq.
        let checked = events.withUnsafeBufferPointer { buffer -> Result<UInt64, StoreError>? in
            guard let first = buffer.first?.event.seq else { return .success(last) }
            guard first == last &+ 1 else {
                return .failure(.conflict("event \(first) of \"\(session)\" does not follow \(last)"))
            }
            for offset in buffer.indices where buffer[offset].event.seq != first &+ UInt64(offset) {
                return .failure(.conflict("events of \"\(session)\" are not consecutive at \(buffer[offset].event.seq)"))
            }
            return nil
        }
        if let checked { return checked }
        let first = last &+ 1
        let count = events.count
        appendedSinceCompaction += count
        if extendLastRun(of: session, at: slot, firstSeq: first, events) {
            return .success(first &+ UInt64(count - 1))
        }
        let segment = try addRun(session: session, firstSeq: first, count: count, extendable: true) { entries in
            Self.writeEntries(events, into: &entries)
        }
        index.appended(at: slot, segment)
        return .success(first &+ UInt64(count - 1))
    }

    /// Adds `events` to the row's last run when it is the same session's and they follow it:
    /// a session's changes that arrive together (a client's several in flight, answered by one
    /// commit and sent again at once) are appended one by one, and most follow their session's
    /// previous append in the queue (73% in the acks benchmark). One run instead of one each
    /// keeps the session's segments few, and reading the session back (a load after a restart
    /// or an eviction) reads a row per segment: a third as many. On the writer an extension
    /// costs about what a new run does.
    /// `false` (nothing written) when the events need a run of their own.
    private func extendLastRun(of session: String, at slot: JournalIndex.Slot, firstSeq: UInt64, _ events: [LoggedEvent]) -> Bool {
        guard rowRunCount > 0, let run = lastRun, run.firstSeq &+ UInt64(run.count) == firstSeq, rowEntries.count <= Self.rowLimit,
            run.session == session
        else { return false }
        let count = run.count + events.count
        var entries = JSONWriter(capacity: 0)
        swap(&entries, &rowEntries)
        let before = entries.count
        // Entries are joined by newlines within a run as between runs.
        entries.byte(UInt8(ascii: "\n"))
        Self.writeEntries(events, into: &entries)
        let length = run.length + entries.count - before
        // The index confirms the session's last segment is this run; if not, the entries go.
        let extended = index.extendLastSegment(
            at: slot, inRow: newestRow + 1, from: firstSeq, by: UInt32(events.count), length: UInt32(length))
        if !extended { entries.truncate(to: before) }
        swap(&entries, &rowEntries)
        guard extended else { return false }
        // The run's numbers are rewritten in place: they end the row's list so far.
        var runs = JSONWriter(capacity: 0)
        swap(&runs, &rowRuns)
        runs.truncate(to: run.numbersAt)
        Self.writeNumbers(run.firstSeq, UInt64(count), UInt64(length), into: &runs)
        swap(&runs, &rowRuns)
        rowEventCount += events.count
        lastRun = (session, run.numbersAt, run.firstSeq, count, length)
        return true
    }

    func create(_ session: StoredSession) throws(SQLiteError) -> Result<Void, StoreError> {
        guard session.events.isEmpty else {
            return .failure(.conflict("a new session \"\(session.name)\" must not carry events"))
        }
        try ensureIndex()
        // The row being built may hold runs of an earlier session of this name: inserted first,
        // it falls at or below `first_row`.
        try flushRow()
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
        try writeViews(session.name, session.views)
        try deleteChangeIds(of: session.name)
        try addChangeIds(session.name, session.checkpoint.rememberedChanges, through: seq)
        try deleteEvents(of: session.name)
        index.created(session.name, at: seq)
        return .success(())
    }

    func saveCheckpoint(_ name: String, table: Table, views: SavedViews? = nil) throws(SQLiteError) -> Result<Void, StoreError> {
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
        if let views { try writeViews(name, views) }
        // The window's new slice: the ids remembered since the stored checkpoint (every earlier
        // one is in an earlier slice); then the slices wholly older than the window go.
        try addChangeIds(name, table.rememberedChanges(after: head.checkpoint), through: table.seq)
        try deleteChangeIds(of: name, before: table.oldestRememberedSeq)
        // Keep `keepEvents` events at or before the checkpoint for resume and history, and every one after
        // it. The rows stay in the journal until it is truncated behind every session's oldest.
        index.checkpointed(name, at: table.seq, pruneThrough: table.seq > keepEvents ? table.seq - keepEvents : nil)
        return .success(())
    }

    /// The checkpoint lives in a table of its own: SQLite rewrites a whole row, overflow pages
    /// and all, on update, and a session's row is read on every load and rewritten on every
    /// checkpoint. Without the change-id window, which `change_ids` keeps in slices.
    private func writeCheckpoint(_ name: String, _ table: Table) throws(SQLiteError) {
        let write = try database.statement("INSERT OR REPLACE INTO checkpoints(session, data) VALUES (?1, ?2)")
        defer { write.reset() }
        try write.bind(1, name)
        try write.bind(2, TableCheckpoint.encode(table, changeIds: false))
        try write.step()
    }

    /// The session's saved private views, in `saved_views` beside its checkpoint (no row when
    /// there are none): only written when they changed (see ``saveCheckpoint(_:table:views:)``).
    private func writeViews(_ name: String, _ views: SavedViews) throws(SQLiteError) {
        if views.isEmpty {
            let remove = try database.statement("DELETE FROM saved_views WHERE session = ?1")
            defer { remove.reset() }
            try remove.bind(1, name)
            try remove.step()
            return
        }
        let write = try database.statement("INSERT OR REPLACE INTO saved_views(session, data) VALUES (?1, ?2)")
        defer { write.reset() }
        try write.bind(1, name)
        try write.bind(2, views.encoded())
        try write.step()
    }

    /// The session's saved private views (empty when it has none).
    private func views(of name: String) throws(SQLiteError) -> Result<SavedViews, StoreError> {
        let select = try database.statement("SELECT data FROM saved_views WHERE session = ?1")
        defer { select.reset() }
        try select.bind(1, name)
        guard try select.step() else { return .success(SavedViews()) }
        do {
            return .success(try SavedViews(decoding: select.blob(0)))
        } catch {
            return .failure(.corrupt("saved views of \"\(name)\": \(error.message)"))
        }
    }

    /// Stores `changes` (oldest first, every seq at most `through`) as a slice of the session's
    /// change-id window; nothing when there are none.
    private func addChangeIds(_ name: String, _ changes: [Table.RememberedChange], through seq: UInt64) throws(SQLiteError) {
        guard !changes.isEmpty else { return }
        let write = try database.statement("INSERT OR REPLACE INTO change_ids(session, through_seq, ids) VALUES (?1, ?2, ?3)")
        defer { write.reset() }
        try write.bind(1, name)
        try write.bind(2, seq)
        try write.bind(3, TableCheckpoint.encodeChangeIds(changes))
        try write.step()
    }

    /// Deletes the session's slices whose every id is older than `oldest` (the window's oldest
    /// seq), or all of them when `oldest` is nil (the window is empty, or the session goes).
    private func deleteChangeIds(of name: String, before oldest: UInt64? = nil) throws(SQLiteError) {
        let remove = try database.statement("DELETE FROM change_ids WHERE session = ?1 AND through_seq < ?2")
        defer { remove.reset() }
        try remove.bind(1, name)
        try remove.bind(2, oldest ?? UInt64(Int64.max))
        try remove.step()
    }

    /// The session's change-id window from its slices, oldest first, up to the checkpoint at
    /// `seq` (the log's events after it remember their own ids again when they are replayed).
    private func changeIds(of name: String, through seq: UInt64) throws(SQLiteError) -> Result<[Table.RememberedChange], StoreError> {
        let select = try database.statement("SELECT ids FROM change_ids WHERE session = ?1 ORDER BY through_seq")
        defer { select.reset() }
        try select.bind(1, name)
        var changes: [Table.RememberedChange] = []
        while try select.step() {
            do {
                changes += try TableCheckpoint.decodeChangeIds(select.blob(0), limits: limits)
            } catch {
                return .failure(.corrupt("change ids of \"\(name)\": \(error.message)"))
            }
        }
        guard zip(changes, changes.dropFirst()).allSatisfy({ $0.seq < $1.seq }), (changes.last?.seq ?? 0) <= seq else {
            return .failure(.corrupt("the change ids of \"\(name)\" are not in order up to its checkpoint \(seq)"))
        }
        return .success(changes)
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
        try writeViews(name, SavedViews())
        try deleteChangeIds(of: name)
        try deleteEvents(of: name)
        // The session's webhook goes with it, in the same transaction.
        let removeWebhook = try database.statement("DELETE FROM webhooks WHERE session = ?1")
        defer { removeWebhook.reset() }
        try removeWebhook.bind(1, name)
        try removeWebhook.step()
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

        var checkpoint: Table
        do {
            checkpoint = try TableCheckpoint.decode(bytes, limits: limits)
        } catch {
            return .failure(.corrupt("checkpoint of \"\(name)\": \(error.message)"))
        }
        guard checkpoint.seq == checkpointSeq else {
            return .failure(.corrupt("checkpoint of \"\(name)\" is at \(checkpoint.seq), its row says \(checkpointSeq)"))
        }
        switch try changeIds(of: name, through: checkpointSeq) {
        case .success(let changes):
            // Past the window's size, the oldest are pushed out exactly as when they were applied.
            if !changes.isEmpty { checkpoint.restoreRemembered(changes) }
        case .failure(let error): return .failure(error)
        }
        let events: [LoggedEvent]
        // From the resume window on: older events kept for history are not needed to open it.
        switch try self.events(of: name, after: checkpointSeq > resumeEvents ? checkpointSeq - resumeEvents : 0) {
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
        let views: SavedViews
        switch try self.views(of: name) {
        case .success(let found): views = found
        case .failure(let error): return .failure(error)
        }
        return .success(StoredSession(name: name, epoch: epoch, checkpoint: checkpoint, events: events, views: views))
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

    /// Up to `limit` live events of `session` before seq `before` (`nil`: the newest), newest
    /// first, with whether older ones are live: the history kept (`keepEvents` at or before the
    /// checkpoint, and every event after it). Reads only the rows holding the page.
    func history(session: String, before: UInt64?, limit: Int) throws(SQLiteError) -> Result<HistoryPage, StoreError> {
        try ensureIndex()
        guard let head = index.head(of: session) else {
            return .failure(.conflict("session \"\(session)\" is not stored"))
        }
        let oldest = index.rows(of: session, after: 0).firstSeq
        // The newest seq wanted, and the oldest: `limit` of them, or as far as the log reaches.
        let newest = min(head.last, (before ?? UInt64.max) &- 1)
        guard before != 0, newest >= oldest, limit > 0 else { return .success(HistoryPage(events: [], more: false)) }
        let from = max(oldest, newest >= UInt64(limit) ? newest - UInt64(limit) + 1 : 1)
        let events: [LoggedEvent]
        switch try self.events(of: session, after: from - 1, through: newest) {
        case .success(let found): events = found
        case .failure(let error): return .failure(error)
        }
        return .success(HistoryPage(events: events.reversed().map(\.event), more: from > oldest))
    }

    // MARK: - Helpers

    /// Every live event of `name` after `seq` (up to `through`), read through the index (a run
    /// from the first event wanted), decoded, checked to be consecutive.
    private func events(of name: String, after seq: UInt64, through last: UInt64 = .max) throws(SQLiteError) -> Result<[LoggedEvent], StoreError> {
        try ensureIndex()
        let (firstSeq, segments) = index.rows(of: name, after: seq)
        var events: [LoggedEvent] = []
        var expected = firstSeq
        for segment in segments where expected <= last {
            guard segment.firstSeq <= expected, expected < segment.endSeq else {
                return .failure(.corrupt("the log of \"\(name)\" skips from \(expected - 1) to \(segment.firstSeq)"))
            }
            let entries: [ArraySlice<UInt8>]
            switch try self.entries(of: segment, session: name) {
            case .success(let found): entries = found
            case .failure(let error): return .failure(error)
            }
            for bytes in entries.dropFirst(Int(expected - segment.firstSeq)) where expected <= last {
                let entry: (event: TableEvent, request: Change?)
                do {
                    entry = try TableCheckpoint.decodeEntry(bytes, limits: limits)
                } catch {
                    return .failure(.corrupt("event \(expected) of \"\(name)\": \(error.message)"))
                }
                guard entry.event.seq == expected else {
                    return .failure(.corrupt("event \(expected) of \"\(name)\" holds seq \(entry.event.seq)"))
                }
                events.append(LoggedEvent(event: entry.event, request: entry.request))
                expected += 1
            }
        }
        return .success(events)
    }

    /// The entries of one run, read from its row's `entries` by offset (only its bytes are
    /// copied out), one per event.
    private func entries(of segment: JournalIndex.Segment, session name: String) throws(SQLiteError) -> Result<[ArraySlice<UInt8>], StoreError> {
        let select = try database.statement("SELECT substr(entries, ?2, ?3) FROM journal WHERE id = ?1")
        defer { select.reset() }
        try select.bind(1, segment.row)
        // substr counts from 1, in bytes for a blob.
        try select.bind(2, Int64(segment.offset) + 1)
        try select.bind(3, Int64(segment.length))
        guard try select.step() else {
            return .failure(.corrupt("event \(segment.firstSeq) of \"\(name)\" is missing from the journal"))
        }
        let bytes = select.blob(0)
        // An entry never holds a raw newline (see `TableCheckpoint.encodeEntry`).
        let entries = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        guard bytes.count == segment.length, entries.count == segment.count else {
            return .failure(
                .corrupt(
                    "the run of events \(segment.firstSeq)... of \"\(name)\" holds \(entries.count) entries in \(bytes.count) bytes, not \(segment.count) in \(segment.length)"
                ))
        }
        return .success(entries)
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

    /// Forgets the session's events: a row holds other sessions' too, so they stay on disk until
    /// the journal is truncated behind them (a session created again under the name never sees
    /// them: rows at or below its `first_row` are an earlier session's).
    private func deleteEvents(of name: String) throws(SQLiteError) {
        try ensureIndex()
        index.remove(name)
    }
}
