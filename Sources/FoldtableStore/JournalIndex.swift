/// Where each session's live events sit in the journal, kept in the writer's memory.
///
/// The journal is one append-order table (rowid order, no index by session): a commit writes
/// about as many pages as its events weigh, however many sessions it touches. Reading one
/// session back needs its rows, which this index gives without an on-disk index that every
/// append would have to update (one B-tree leaf per session touched: the cost the journal is
/// there to avoid). It is built by one scan when the store opens, updated by every write, and
/// rebuilt from the database after a rolled-back transaction (its updates are not transactional).
///
/// "Live" events are those a session still needs: after its checkpoint (to replay) and up to
/// `keepEvents` before it (for resume). Rows of a session are kept in seq order, and their rowids
/// increase with seq (relocation moves a session's rows together), so the session's oldest row
/// is its first one.
struct JournalIndex {
    /// The rows of one session's consecutive live events: `rows[i]` holds seq `firstSeq + i`.
    struct Run {
        var firstSeq: UInt64
        var rows: [Int64]

        var endSeq: UInt64 { firstSeq + UInt64(rows.count) }
    }

    /// A stored session's checkpoint seq and the seq of its last logged event (what an append
    /// must follow). Kept here, not read and written in `sessions` on every append: the
    /// journal's own rows say where each session's log ends.
    struct Head: Equatable {
        var checkpoint: UInt64
        var last: UInt64
    }

    /// One stored session: its head and its live rows (none: an empty run after `last`). One
    /// entry per session, so an append costs one lookup of the name.
    struct SessionLog {
        var head: Head
        var run: Run

        /// Adds event `seq` at `row`; returns how many live rows it dropped (a `seq` that does
        /// not follow the run starts a new one: the log checks order, this only records it).
        mutating func append(seq: UInt64, row: Int64) -> Int {
            head.last = seq
            if run.endSeq == seq {
                run.rows.append(row)
                return 0
            }
            let dropped = run.rows.count
            run = Run(firstSeq: seq, rows: [row])
            return dropped
        }
    }

    private var logs: [String: SessionLog] = [:]
    /// Live events over every session.
    private(set) var liveCount = 0
    /// The smallest rowid any session still needs, recomputed only when it may have moved.
    private var cachedLowest: Int64?
    private var lowestIsStale = false

    /// The session's head, `nil` when it is not stored.
    func head(of session: String) -> Head? { logs[session]?.head }

    /// The smallest live rowid, `nil` when no session has live events.
    mutating func lowestLiveRow() -> Int64? {
        if lowestIsStale {
            cachedLowest = logs.values.compactMap(\.run.rows.first).min()
            lowestIsStale = false
        }
        return cachedLowest
    }

    /// Notes a new session (or one replaced under its name, after ``remove(_:)``) at `seq`.
    mutating func created(_ session: String, at seq: UInt64) {
        liveCount -= logs[session]?.run.rows.count ?? 0
        logs[session] = SessionLog(head: Head(checkpoint: seq, last: seq), run: Run(firstSeq: seq + 1, rows: []))
        lowestIsStale = true
    }

    /// Notes a checkpoint at `seq`; events at or before `pruneThrough` are no longer live.
    mutating func checkpointed(_ session: String, at seq: UInt64, pruneThrough: UInt64?) {
        guard var log = logs.removeValue(forKey: session) else { return }
        log.head.checkpoint = seq
        if let pruneThrough, pruneThrough >= log.run.firstSeq {
            let drop = Int(min(UInt64(log.run.rows.count), pruneThrough - log.run.firstSeq + 1))
            log.run.rows.removeFirst(drop)
            log.run.firstSeq += UInt64(drop)
            liveCount -= drop
            lowestIsStale = true
        }
        logs[session] = log
    }

    /// Where a stored session sits in the index, `nil` when it is not stored: valid until a
    /// session is created or removed. An append looks its session's name up once, for its check
    /// and for noting its rows.
    typealias Slot = Dictionary<String, SessionLog>.Index

    func slot(of session: String) -> Slot? { logs.index(forKey: session) }

    func head(at slot: Slot) -> Head { logs.values[slot].head }

    /// Notes that events `firstSeq`, `firstSeq + 1`, ... of the session at `slot` were written
    /// at `rows`, in place through the dictionary's values (no copy of the rows).
    mutating func appended(at slot: Slot, firstSeq: UInt64, rows: [Int64]) {
        var dropped = 0
        for (offset, row) in rows.enumerated() {
            dropped += logs.values[slot].append(seq: firstSeq &+ UInt64(offset), row: row)
        }
        liveCount += rows.count - dropped
        if dropped > 0 || cachedLowest == nil { lowestIsStale = true }
    }

    /// Forgets `session` and every event of it; returns their rows, for deleting.
    mutating func remove(_ session: String) -> [Int64] {
        guard let log = logs.removeValue(forKey: session) else { return [] }
        liveCount -= log.run.rows.count
        lowestIsStale = true
        return log.run.rows
    }

    /// Notes that `session`'s run now lives at `rows` (relocated, same seqs, same order).
    mutating func moved(_ session: String, to rows: [Int64]) {
        guard logs[session]?.run.rows.count == rows.count else { return }
        logs[session]?.run.rows = rows
        lowestIsStale = true
    }

    /// The rows of `session`'s events after `seq`, oldest first, with the seq of the first.
    func rows(of session: String, after seq: UInt64) -> (firstSeq: UInt64, rows: ArraySlice<Int64>) {
        guard let run = logs[session]?.run else { return (seq + 1, []) }
        let skip = seq >= run.firstSeq ? Int(min(UInt64(run.rows.count), seq - run.firstSeq + 1)) : 0
        return (run.firstSeq + UInt64(skip), run.rows[skip...])
    }

    /// Sessions whose oldest live row is below `row`: the ones holding the journal's tail.
    func sessions(withRowsBelow row: Int64) -> [String] {
        logs.compactMap { name, log in (log.run.rows.first ?? .max) < row ? name : nil }.sorted()
    }

    /// A session as its row in `sessions` says.
    struct Stored {
        var checkpoint: UInt64
        /// The last seq as of the row's last write (creation or checkpoint): the journal may
        /// hold later events, never fewer.
        var last: UInt64
        /// The first seq still kept (for resume).
        var keepFrom: UInt64
        /// Rows at or below this one are from an earlier session of the same name.
        var afterRow: Int64
    }

    /// Builds the index from the journal's rows given in rowid order: for each session, its
    /// latest run of consecutive events written after it was created and no older than
    /// `keepFrom`; the log's head is where that run ends (or the stored `last`, if that is
    /// further: then events are missing, which `load` reports). Other rows (pruned, or an
    /// earlier session's) are not live. One pass, no sorting: a session's live rowids increase
    /// with its seq.
    init(sessions: [String: Stored], journal: (_ found: (_ row: Int64, _ session: String, _ seq: UInt64) -> Void) throws(SQLiteError) -> Void)
        throws(SQLiteError)
    {
        var building: [String: Run] = [:]
        try journal { row, session, seq in
            guard let stored = sessions[session], row > stored.afterRow, seq >= stored.keepFrom else { return }
            if var run = building.removeValue(forKey: session), run.endSeq == seq {
                run.rows.append(row)
                building[session] = run
            } else {
                // A gap: only the run reaching the log's end counts, so start again here.
                building[session] = Run(firstSeq: seq, rows: [row])
            }
        }
        for (session, stored) in sessions {
            var log = SessionLog(head: Head(checkpoint: stored.checkpoint, last: stored.last), run: Run(firstSeq: stored.last + 1, rows: []))
            if let run = building[session], !run.rows.isEmpty {
                log.head.last = max(log.head.last, run.endSeq - 1)
                log.run = run
                liveCount += run.rows.count
            }
            logs[session] = log
        }
        lowestIsStale = true
    }

    init() {}
}
