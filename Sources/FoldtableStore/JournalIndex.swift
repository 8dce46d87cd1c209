/// Where each session's live events sit in the journal, kept in the writer's memory.
///
/// The journal is one append-order table (rowid order, no index by session), whose rows hold a
/// commit's events, every session's, about a page of them a row: a commit writes about as many
/// pages as its events weigh, however many sessions it touches, and costs an insert a page. Reading one session back needs
/// where its events sit, which this index gives without an on-disk index that every append
/// would have to update (one B-tree leaf per session touched: the cost the journal is there to
/// avoid). It is built by one scan when the store opens, updated by every write, and
/// rebuilt from the database after a rolled-back transaction (its updates are not transactional).
///
/// "Live" events are those a session still needs: after its checkpoint (to replay) and up to
/// `keepEvents` before it (for resume and history). A row holds runs of consecutive events, each of one
/// session (an append's, or a relocated session's); a session's live runs are kept in seq order,
/// and their rowids increase with seq (relocation copies a session's live events into one run at
/// the head), so the session's oldest row is its first one. A row stays while any session needs
/// any of its events.
struct JournalIndex {
    /// One run of a session in a journal row: the `count` events from `firstSeq`, whose entries
    /// are the `length` bytes at `offset` in the row's `entries`.
    struct Segment {
        var row: Int64
        var firstSeq: UInt64
        var count: UInt32
        var offset: UInt32
        var length: UInt32

        var endSeq: UInt64 { firstSeq &+ UInt64(count) }
    }

    /// One session's consecutive live events, `firstSeq` up to `endSeq` (excluded), held by
    /// `segments` in seq (and rowid) order. `firstSeq` may fall inside the first segment: the
    /// events before it there are no longer live.
    struct Run {
        var firstSeq: UInt64
        var segments: [Segment]

        var endSeq: UInt64 { segments.last?.endSeq ?? firstSeq }

        var events: Int { Int(endSeq - firstSeq) }

        /// Where the segment holding `seq` (`firstSeq <= seq < endSeq`) sits in `segments`.
        func segmentIndex(holding seq: UInt64) -> Int {
            // Binary search: a session may hold thousands of rows, and a resume reads from
            // anywhere among them.
            var low = 0
            var high = segments.count - 1
            while low < high {
                let middle = (low + high + 1) / 2
                if segments[middle].firstSeq <= seq { low = middle } else { high = middle - 1 }
            }
            return low
        }
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

        /// Adds `segment`; returns how many live events it dropped (a segment that does not
        /// follow the run starts a new one: the log checks order, this only records it).
        mutating func append(_ segment: Segment) -> Int {
            head.last = segment.endSeq &- 1
            if run.endSeq == segment.firstSeq {
                run.segments.append(segment)
                return 0
            }
            let dropped = run.events
            run = Run(firstSeq: segment.firstSeq, segments: [segment])
            return dropped
        }
    }

    private var logs: [String: SessionLog] = [:]
    /// Live events over every session.
    private(set) var liveEvents = 0
    /// The smallest rowid any session still needs, recomputed only when it may have moved.
    private var cachedLowest: Int64?
    private var lowestIsStale = false

    /// The session's head, `nil` when it is not stored.
    func head(of session: String) -> Head? { logs[session]?.head }

    /// The smallest live rowid, `nil` when no session has live events.
    mutating func lowestLiveRow() -> Int64? {
        if lowestIsStale {
            // A loop, not `compactMap(\.run.segments.first?.row).min()`: the key path was
            // projected generically for each of the sessions (5% of the writer in a steady run of
            // 1,000 sessions, where a checkpoint or a relocation asks again every commit), into
            // an array made for the purpose.
            var lowest: Int64?
            for log in logs.values {
                if let row = log.run.segments.first?.row, row < lowest ?? .max { lowest = row }
            }
            cachedLowest = lowest
            lowestIsStale = false
        }
        return cachedLowest
    }

    /// Notes a new session (or one replaced under its name, after ``remove(_:)``) at `seq`.
    mutating func created(_ session: String, at seq: UInt64) {
        liveEvents -= logs[session]?.run.events ?? 0
        logs[session] = SessionLog(head: Head(checkpoint: seq, last: seq), run: Run(firstSeq: seq + 1, segments: []))
        lowestIsStale = true
    }

    /// Notes a checkpoint at `seq`; events at or before `pruneThrough` are no longer live.
    mutating func checkpointed(_ session: String, at seq: UInt64, pruneThrough: UInt64?) {
        guard var log = logs.removeValue(forKey: session) else { return }
        log.head.checkpoint = seq
        if let pruneThrough, pruneThrough >= log.run.firstSeq {
            let end = log.run.endSeq
            // Rows whose every event is at or before `pruneThrough` go; a row with later events
            // stays whole, its first events no longer live.
            let drop = log.run.segments.prefix { $0.endSeq &- 1 <= pruneThrough }.count
            log.run.segments.removeFirst(drop)
            let first = min(pruneThrough + 1, end)
            liveEvents -= Int(first - log.run.firstSeq)
            log.run.firstSeq = first
            if drop > 0 { lowestIsStale = true }
        }
        logs[session] = log
    }

    /// Where a stored session sits in the index, `nil` when it is not stored: valid until a
    /// session is created or removed. An append looks its session's name up once, for its check
    /// and for noting its rows.
    typealias Slot = Dictionary<String, SessionLog>.Index

    func slot(of session: String) -> Slot? { logs.index(forKey: session) }

    func head(at slot: Slot) -> Head { logs.values[slot].head }

    /// Notes that the session at `slot` appended `segment`, in place through the dictionary's
    /// values (no copy of the session's segments).
    mutating func appended(at slot: Slot, _ segment: Segment) {
        let dropped = logs.values[slot].append(segment)
        liveEvents += Int(segment.count) - dropped
        if dropped > 0 || cachedLowest == nil { lowestIsStale = true }
    }

    /// Adds `count` events from `seq` to the last segment of the session at `slot`, its entries
    /// now `length` bytes, if that segment is in row `row` and ends at `seq`; `false` (nothing
    /// changed) otherwise.
    mutating func extendLastSegment(at slot: Slot, inRow row: Int64, from seq: UInt64, by count: UInt32, length: UInt32) -> Bool {
        guard let last = logs.values[slot].run.segments.last, last.row == row, last.endSeq == seq else { return false }
        logs.values[slot].run.segments[logs.values[slot].run.segments.count - 1].count += count
        logs.values[slot].run.segments[logs.values[slot].run.segments.count - 1].length = length
        logs.values[slot].head.last = seq &+ UInt64(count) &- 1
        liveEvents += Int(count)
        return true
    }

    /// Forgets `session` and every event of it.
    mutating func remove(_ session: String) {
        guard let log = logs.removeValue(forKey: session) else { return }
        liveEvents -= log.run.events
        lowestIsStale = true
    }

    /// Notes that `session`'s live events (all of them, same seqs) now sit in one run,
    /// `segment`.
    mutating func moved(_ session: String, to segment: Segment) {
        guard let slot = logs.index(forKey: session), logs.values[slot].run.firstSeq == segment.firstSeq,
            logs.values[slot].run.endSeq == segment.endSeq
        else { return }
        logs.values[slot].run.segments = [segment]
        lowestIsStale = true
    }

    /// The live rows of `session` holding its events after `seq`, oldest first, with the first
    /// such event's seq (which may sit inside the first row: the row's earlier events are to be
    /// skipped). No rows when there are no such events.
    func rows(of session: String, after seq: UInt64) -> (firstSeq: UInt64, segments: ArraySlice<Segment>) {
        guard let run = logs[session]?.run else { return (seq + 1, []) }
        let first = max(run.firstSeq, seq &+ 1)
        guard first < run.endSeq else { return (first, []) }
        return (first, run.segments[run.segmentIndex(holding: first)...])
    }

    /// The sessions holding the journal's tail: those whose first live row is below `row`,
    /// oldest first row first, as many as hold `untilEvents` live events (at least one). Ties go
    /// by name, so the order does not depend on the dictionary's.
    func sessionsHoldingTheTail(below row: Int64, untilEvents budget: Int) -> [String] {
        var holding: [(row: Int64, name: String, events: Int)] = []
        for (name, log) in logs {
            if let first = log.run.segments.first?.row, first < row { holding.append((first, name, log.run.events)) }
        }
        holding.sort { ($0.row, $0.name) < ($1.row, $1.name) }
        var chosen: [String] = []
        var events = 0
        for session in holding {
            guard chosen.isEmpty || events + session.events <= budget else { break }
            chosen.append(session.name)
            events += session.events
        }
        return chosen
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

    /// Builds the index from the journal's runs given in rowid order: for each session, its
    /// latest run of consecutive events written after it was created and reaching `keepFrom`
    /// (from there on); the log's head is where that run ends (or the stored `last`, if that is
    /// further: then events are missing, which `load` reports). Other runs (pruned, an earlier
    /// session's, or copies a relocation superseded) are not live. One pass, no sorting: a
    /// session's live rowids increase with its seq, and a relocated copy (starting at or before
    /// the seq its session reached) starts the run again.
    init(sessions: [String: Stored], journal: (_ found: (_ session: String, _ segment: Segment) -> Void) throws(SQLiteError) -> Void)
        throws(SQLiteError)
    {
        var building: [String: Run] = [:]
        try journal { session, segment in
            let seq = segment.firstSeq
            guard let stored = sessions[session], segment.row > stored.afterRow, segment.endSeq > stored.keepFrom else { return }
            if var run = building.removeValue(forKey: session), run.endSeq == seq {
                run.segments.append(segment)
                building[session] = run
            } else {
                // A gap: only the run reaching the log's end counts, so start again here.
                building[session] = Run(firstSeq: max(seq, stored.keepFrom), segments: [segment])
            }
        }
        for (session, stored) in sessions {
            var log = SessionLog(
                head: Head(checkpoint: stored.checkpoint, last: stored.last), run: Run(firstSeq: stored.last + 1, segments: []))
            if let run = building[session], !run.segments.isEmpty {
                log.head.last = max(log.head.last, run.endSeq - 1)
                log.run = run
                liveEvents += run.events
            }
            logs[session] = log
        }
        lowestIsStale = true
    }

    init() {}
}
