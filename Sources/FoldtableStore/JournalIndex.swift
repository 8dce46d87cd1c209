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

    private(set) var runs: [String: Run] = [:]
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
    mutating func appended(_ session: String, seq: UInt64, row: Int64) {
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
    mutating func prune(_ session: String, through seq: UInt64) {
        guard var run = runs[session], seq >= run.firstSeq else { return }
        runs[session] = nil
        let drop = Int(min(UInt64(run.rows.count), seq - run.firstSeq + 1))
        run.rows.removeFirst(drop)
        run.firstSeq += UInt64(drop)
        liveCount -= drop
        runs[session] = run
        lowestIsStale = true
    }

    /// Forgets every event of `session`; returns their rows, for deleting.
    mutating func remove(_ session: String) -> [Int64] {
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

    /// What a session still needs, as its row in `sessions` says.
    struct Need {
        /// The first seq kept (for resume) and the last logged one.
        var keepFrom: UInt64
        var last: UInt64
        /// Rows at or below this one are from an earlier session of the same name.
        var afterRow: Int64
    }

    /// Builds the index from the journal's rows given in rowid order: for each session, the run
    /// of consecutive events that ends at its last seq, starts no earlier than `keepFrom` and was
    /// written after the session was created. Other rows (pruned, or an earlier session's) are
    /// not live. One pass, no sorting: a session's live rowids increase with its seq.
    init(needs: [String: Need], journal: (_ found: (_ row: Int64, _ session: String, _ seq: UInt64) -> Void) throws(SQLiteError) -> Void)
        throws(SQLiteError)
    {
        var building: [String: Run] = [:]
        try journal { row, session, seq in
            guard let need = needs[session], row > need.afterRow, seq >= need.keepFrom, seq <= need.last else { return }
            if var run = building.removeValue(forKey: session), run.endSeq == seq {
                run.rows.append(row)
                building[session] = run
            } else {
                // A gap: only a run that reaches the last seq counts, so start again here.
                building[session] = Run(firstSeq: seq, rows: [row])
            }
        }
        for (session, run) in building where run.endSeq == (needs[session]?.last ?? 0) + 1 {
            runs[session] = run
            liveCount += run.rows.count
        }
        lowestIsStale = true
    }

    init() {}
}
