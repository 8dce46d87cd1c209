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

    private(set) var runs: [String: Run] = [:]
    /// Every stored session's head, live events or not.
    private(set) var heads: [String: Head] = [:]
    /// Live events over every session.
    private(set) var liveCount = 0
    /// The smallest rowid any session still needs, recomputed only when it may have moved.
    private var cachedLowest: Int64?
    private var lowestIsStale = false

    /// The smallest live rowid, `nil` when no session has live events.
    mutating func lowestLiveRow() -> Int64? {
        if lowestIsStale {
            cachedLowest = runs.values.compactMap(\.rows.first).min()
            lowestIsStale = false
        }
        return cachedLowest
    }

    /// Notes that event `seq` of `session` was written at `row`. Events come in seq order; one
    /// that does not follow the session's run starts a new run (the log checks order itself).
    /// Notes a new session (or one replaced under its name) at `seq`, with no events.
    mutating func created(_ session: String, at seq: UInt64) {
        heads[session] = Head(checkpoint: seq, last: seq)
    }

    /// Notes a checkpoint at `seq`; events at or before `pruneThrough` are no longer live.
    mutating func checkpointed(_ session: String, at seq: UInt64, pruneThrough: UInt64?) {
        heads[session]?.checkpoint = seq
        if let pruneThrough { prune(session, through: pruneThrough) }
    }

    mutating func appended(_ session: String, seq: UInt64, row: Int64) {
        heads[session]?.last = seq
        if var run = runs[session], run.endSeq == seq {
            // Taken out and put back so the array is not copied on write.
            runs[session] = nil
            run.rows.append(row)
            runs[session] = run
        } else {
            liveCount -= runs[session]?.rows.count ?? 0
            runs[session] = Run(firstSeq: seq, rows: [row])
            lowestIsStale = true
        }
        liveCount += 1
        if cachedLowest == nil { lowestIsStale = true }
    }

    /// Forgets the events of `session` at or before `seq` (a checkpoint made them unneeded).
    private mutating func prune(_ session: String, through seq: UInt64) {
        guard var run = runs[session], seq >= run.firstSeq else { return }
        runs[session] = nil
        let drop = Int(min(UInt64(run.rows.count), seq - run.firstSeq + 1))
        run.rows.removeFirst(drop)
        run.firstSeq += UInt64(drop)
        liveCount -= drop
        runs[session] = run
        lowestIsStale = true
    }

    /// Forgets `session` and every event of it; returns their rows, for deleting.
    mutating func remove(_ session: String) -> [Int64] {
        heads[session] = nil
        guard let run = runs.removeValue(forKey: session) else { return [] }
        liveCount -= run.rows.count
        lowestIsStale = true
        return run.rows
    }

    /// Notes that `session`'s run now lives at `rows` (relocated, same seqs, same order).
    mutating func moved(_ session: String, to rows: [Int64]) {
        guard let run = runs[session], run.rows.count == rows.count else { return }
        runs[session] = Run(firstSeq: run.firstSeq, rows: rows)
        lowestIsStale = true
    }

    /// The rows of `session`'s events after `seq`, oldest first, with the seq of the first.
    func rows(of session: String, after seq: UInt64) -> (firstSeq: UInt64, rows: ArraySlice<Int64>) {
        guard let run = runs[session] else { return (seq + 1, []) }
        let skip = seq >= run.firstSeq ? Int(min(UInt64(run.rows.count), seq - run.firstSeq + 1)) : 0
        return (run.firstSeq + UInt64(skip), run.rows[skip...])
    }

    /// Sessions whose oldest live row is below `row`: the ones holding the journal's tail.
    func sessions(withRowsBelow row: Int64) -> [String] {
        runs.compactMap { name, run in (run.rows.first ?? .max) < row ? name : nil }.sorted()
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
            var head = Head(checkpoint: stored.checkpoint, last: stored.last)
            if let run = building[session], !run.rows.isEmpty {
                head.last = max(head.last, run.endSeq - 1)
                runs[session] = run
                liveCount += run.rows.count
            }
            heads[session] = head
        }
        lowestIsStale = true
    }

    init() {}
}
