import FoldtableCore

/// This node orders the session's changes, over its ``EventLog`` (SQLite or memory).
///
/// - `head` is the sequencer. A change is validated and applied to it at once, so the next
///   change sees it, and its event goes to the log (`persist`): at once, or with the other
///   changes of its read at `handOver` (``SessionCore/Settings/handsOverAtOnce``).
/// - The room's `committed` table is what members see. An event is applied to it, broadcast,
///   remembered for resume and acknowledged only when the log reports it durable (`committed`).
/// - When an append fails, `head` goes back to `committed` and every author of a lost change
///   gets `storage_unavailable`: nothing is half-applied.
///
/// Changes touching a section whose rows are streaming (or about to, when an uncommitted event
/// expands it) wait in arrival order, and every change behind a waiting one waits too, so the
/// session keeps one order and no member gets rows of a stale expansion.
public struct LocalOrder: SessionOrder {
    /// The table with every change applied, committed or not: what new changes are checked against.
    public private(set) var head = Table()

    /// A change applied to `head` and waiting for the log. Its event and encoding are the log's
    /// (in `unpersisted`, then `persisting`): held once, not copied per change.
    private struct InFlight {
        var seq: UInt64
        /// The head's id-window digest of the request (`nil` without a change id): the committed
        /// replica takes it instead of encoding the request again.
        var requestDigest: UInt64?
        /// Who to answer when it commits or fails (`nil`: a member that has left).
        var author: ChangeOrigin?
        /// Sections this event expands that are too large for one chunk: they will stream.
        var streams: [String]
        /// The event's ``TableEvent/sectionsNeedingRows``, found once when it was applied.
        var needingRows: [String]
    }
    private var inFlight: [InFlight] = []
    /// Events applied to `head` and not yet handed to the log.
    private var unpersisted: [LoggedEvent] = []
    /// The appends handed to the log (the same arrays the log got: shared, not copied) whose
    /// events are not all published yet, oldest first; `persistingNext` is the next event to
    /// publish in the first. With `unpersisted` after them, the events of `inFlight`, in order.
    private var persisting: [[LoggedEvent]] = []
    private var persistingNext = 0
    /// Counts appends; a failure moves to the next one so that late reports of abandoned
    /// appends are recognised and ignored.
    private var generation: UInt64 = 0
    /// Retries of a change still in flight: acknowledged when it commits.
    private var waitingAcks: [UInt64: [(origin: ChangeOrigin, id: String)]] = [:]
    /// Sections expanded by events in flight, with how many: their streams have not started yet,
    /// but changes touching them must wait as if they had.
    private var expandingInFlight: [String: Int] = [:]
    /// Changes waiting behind busy sections, in arrival order.
    private var pending = WaitingQueue<ChangeRequest>()
    /// `committed.seq` at the last checkpoint asked for.
    private var checkpointSeq: UInt64 = 0
    /// How many events before `checkpointEvents` the next checkpoint comes (see
    /// ``SessionCore/Settings/staggersCheckpoints``): set from the name when the session opens,
    /// 0 after the first checkpoint.
    private var checkpointStagger: UInt64 = 0

    public init() {}

    public mutating func open(_ room: inout SessionRoom, checkpointSeq: UInt64) {
        head = room.committed
        // The committed table keeps no change-id window of its own: it is read from the head's
        // when saved (`savedTable`) or when a rollback makes it the head again. One ring per
        // session, not two.
        room.committed.stopKeepingChangeIds()
        head.changeIdsCommitted(through: room.committed.seq)
        self.checkpointSeq = checkpointSeq
        if room.settings.staggersCheckpoints {
            checkpointStagger = Self.stagger(name: room.name, checkpointEvents: room.settings.checkpointEvents)
        }
    }

    public var isQuiet: Bool { inFlight.isEmpty && unpersisted.isEmpty && pending.isEmpty }
    /// One node holds the session: its views go with its checkpoints (see `LocalOrderDriver`).
    public var keepsViews: Bool { true }
    /// Whether changes applied to `head` wait for ``SessionInput/handOver`` to go to the log
    /// (only with ``SessionCore/Settings/handsOverAtOnce`` off).
    public var awaitsHandOver: Bool { !unpersisted.isEmpty }

    /// The committed table with its change-id window, the newest ids at or before its seq (read
    /// from the head, without copying it): what a checkpoint saves, so that a retry after a
    /// reload is acknowledged, not applied again.
    public func savedTable(_ room: SessionRoom) -> Table { room.committed.withChangeIds(of: head) }
    public func save(_ room: SessionRoom) -> SessionEffect { .checkpoint(savedTable(room)) }
    public func eventsSinceCheckpoint(_ room: SessionRoom) -> UInt64 { room.committed.seq - checkpointSeq }
    public mutating func checkpointTaken(at seq: UInt64) { checkpointSeq = max(checkpointSeq, seq) }

    public mutating func handle(_ input: SessionInput, _ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        switch input {
        case .handOver: handOver(into: &effects)
        case .committed(let generation, let seq): commit(generation: generation, through: seq, &room, into: &effects)
        case .commitFailed(let generation, let error): rollBack(generation: generation, error, &room, into: &effects)
        default: break
        }
    }

    /// How early (in events, below half of `checkpointEvents`) the first checkpoint of the session
    /// `name` comes: FNV-1a of the name, so the same session staggers the same way in every
    /// process (the standard `Hasher` is seeded per process) and no randomness enters the core.
    static func stagger(name: String, checkpointEvents: Int) -> UInt64 {
        let span = UInt64(max(1, checkpointEvents / 2))
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in name.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        return hash % span
    }

    // MARK: - Changes

    public mutating func submit(_ change: ChangeRequest, _ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        guard pending.count < room.settings.maxPendingChanges else {
            room.refuse(
                change.origin, ProtocolError(.limitReached, "the session has too many changes waiting; retry shortly"), id: change.id, into: &effects)
            return
        }
        if pending.isEmpty && !mustWait(change, room) {
            // Nothing waits ahead of it (almost always): applied from here, not copied into the
            // queue and out again. Its origin is present: every caller just checked.
            // A member's change may wait for the rest of its burst (`handOver`); an API one never.
            var waits = !room.settings.handsOverAtOnce
            if case .api = change.origin { waits = false }
            apply(change, originPresent: true, &room, into: &effects)
            if !waits { handOver(into: &effects) }
            return
        }
        pending.append(change)
        drain(&room, into: &effects)
    }

    /// Whether the head's section `key` is expanded and too large for one chunk: its rows, once
    /// an event expanding it commits, will stream. Read in place, without a copy of the section.
    private func willStream(_ key: String, _ room: SessionRoom) -> Bool {
        guard let position = head.position(ofSection: key) else { return false }
        return !head.sections[position].collapsed && !room.fitsOneChunk(head.sections[position])
    }

    private func mustWait(_ request: ChangeRequest, _ room: SessionRoom) -> Bool {
        guard room.hasStreams || !expandingInFlight.isEmpty else { return false }
        var change = request.change
        // An undo waits only for what the change it would take back touches.
        if case .undo(let ask) = change, ask.isRequest, let scope = request.scope, let record = room.undo.next(redo: ask.redo, of: scope) {
            change = .undo(record.change(redo: ask.redo, on: head))
        }
        switch head.scope(of: change) {
        case .table: return true
        case .sections(let keys): return keys.contains { room.isStreaming($0) || expandingInFlight[$0] != nil }
        }
    }

    /// Applies waiting changes to `head` in order until one must wait, then hands the new events
    /// to the log in one append.
    public mutating func drain(_ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        while let next = pending.front, !mustWait(next, room) {
            pending.removeFront()
            apply(next, &room, into: &effects)
        }
        pending.compact()
        handOver(into: &effects)
    }

    /// Hands the events applied since the last append to the log in one append.
    private mutating func handOver(into effects: inout [SessionEffect]) {
        guard !unpersisted.isEmpty else { return }
        // Moved into the effect: keeping the array's capacity here would allocate a new buffer
        // anyway (the effect holds the old one), and copy nothing less.
        var batch: [LoggedEvent] = []
        swap(&batch, &unpersisted)
        persisting.append(batch)
        effects.append(.persist(batch, generation: generation))
    }

    /// `originPresent`: the caller knows the change's origin can be answered (no member lookup).
    private mutating func apply(_ change: ChangeRequest, originPresent: Bool = false, _ room: inout SessionRoom, into effects: inout [SessionEffect])
    {
        if case .undo(let ask) = change.change, ask.isRequest { return applyUndo(change, redo: ask.redo, &room, into: &effects) }
        // A member's change is recorded for its undo: what it overwrites is read first (cheap:
        // nothing for a toggle, shared values otherwise).
        let prelude = change.scope != nil && room.undo.depth > 0 ? head.undoPrelude(for: change.change) : .notRecorded
        apply(change, prelude: prelude, undoing: nil, originPresent: originPresent, &room, into: &effects)
    }

    /// An author's undo (or redo), resolved at its turn against the head, from the author's
    /// records: then applied like any change (a retry of its id is acknowledged, not resolved again).
    private mutating func applyUndo(_ request: ChangeRequest, redo: Bool, _ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        if let id = request.id, let earlier = head.remembered(id) {
            guard earlier.digest == Table.digest(request.change) else {
                return room.refuse(request.origin, UndoHistory.idReused(id), id: id, into: &effects)
            }
            return answerDuplicate(request, seq: earlier.seq, origin: room.present(request.origin), &room, into: &effects)
        }
        guard let scope = request.scope, let record = room.undo.next(redo: redo, of: scope) else {
            return room.refuse(request.origin, UndoHistory.nothingLeft(redo: redo), id: request.id, into: &effects)
        }
        if record.tooLarge, let scope = request.scope {
            room.undo.drop(redo: redo, of: record.seq, by: scope)
            return room.refuse(request.origin, UndoHistory.tooLarge(record), id: request.id, into: &effects)
        }
        if record.kind == "setOptions" && !room.mayChangeOptions(request.origin) {
            return room.refuse(request.origin, UndoHistory.ownerOnly, id: request.id, into: &effects)
        }
        var resolved = request
        resolved.change = .undo(record.change(redo: redo, on: head))
        apply(resolved, prelude: .notRecorded, undoing: record, &room, into: &effects)
    }

    private mutating func answerDuplicate(
        _ change: ChangeRequest, seq: UInt64, origin: ChangeOrigin?, _ room: inout SessionRoom, into effects: inout [SessionEffect]
    ) {
        guard let id = change.id, let origin else { return }
        if seq <= room.committed.seq {
            room.acknowledge(origin, id: id, seq: seq, into: &effects)
        } else {
            waitingAcks[seq, default: []].append((origin, id))
        }
    }

    /// `prelude`: what the change overwrites, for its undo record (``UndoPrelude/notRecorded``:
    /// none). `undoing`: the record an undo or redo applies, moved once it is applied.
    private mutating func apply(
        _ change: ChangeRequest, prelude: UndoPrelude, undoing: UndoRecord?, originPresent: Bool = false, _ room: inout SessionRoom,
        into effects: inout [SessionEffect]
    ) {
        let origin = originPresent ? change.origin : room.present(change.origin)
        let outcome: ApplyOutcome
        // The digest the head's id window keeps for the change id: the committed replica takes it.
        let digest: UInt64?
        do {
            (outcome, digest) = try head.applyGivingDigest(change.change, by: change.author, changeId: change.id)
        } catch {
            room.refuse(change.origin, error, id: change.id, into: &effects)
            return
        }
        // Consumed: the event is moved out of the outcome and into the log's entry, not copied.
        switch consume outcome {
        case .duplicate(let seq):
            answerDuplicate(change, seq: seq, origin: origin, &room, into: &effects)
        case .applied(var event):
            // When it commits, near enough: the log's commit follows within the turn, and the
            // time must be in the bytes the log writes (they are what members get).
            event.time = room.unixTime
            if case .member(let connection)? = origin { effects.append(.accepted(connection)) }
            // Recorded when applied to the head, not when committed: an undo sent right after a
            // change must find it. A failed append forgets every record (``rollBack``).
            if let scope = change.scope {
                if let undoing, case .undo(let undo) = event.change {
                    room.undo.applied(redo: undo.redo, of: undoing.seq, by: scope)
                } else if let record = head.undoRecord(for: event, prelude: prelude) {
                    room.undo.recorded(record, by: scope)
                }
            }
            let needingRows = event.sectionsNeedingRows
            // The head holds the section as it will be committed at this seq, so whether it fits
            // one chunk is known now; only sections that will stream make later changes wait.
            var streamed: [String] = []
            for key in needingRows where willStream(key, room) { streamed.append(key) }
            for key in streamed { expandingInFlight[key, default: 0] += 1 }
            // Encoded once, here: the same bytes go to the log and, once committed, to members.
            let encoded = ServerMessage.event(event)
            inFlight.append(InFlight(seq: event.seq, requestDigest: digest, author: origin, streams: streamed, needingRows: needingRows))
            unpersisted.append(LoggedEvent(event: consume event, request: change.id == nil ? nil : change.change, encoded: encoded))
        }
    }

    // MARK: - The log's reports

    /// The log made events up to `seq` durable: they become visible, in order.
    private mutating func commit(generation: UInt64, through seq: UInt64, _ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        guard generation == self.generation else { return }
        // Published from local arrays: an element of `self.inFlight` or of an append passed to
        // a mutating method would be copied (every string and array in it retained, then released).
        var entries: [InFlight] = []
        swap(&entries, &inFlight)
        var batches: [[LoggedEvent]] = []
        swap(&batches, &persisting)
        var done = 0
        var batch = 0
        // Only what was handed to the log can be durable: the loop stops at the end of the appends.
        while done < entries.count && entries[done].seq <= seq && batch < batches.count {
            publish(entries[done], batches[batch][persistingNext], &room, into: &effects)
            done += 1
            persistingNext += 1
            if persistingNext == batches[batch].count {
                batch += 1
                persistingNext = 0
            }
        }
        // All of them (almost always): the buffers come back, emptied, for the next changes.
        if done == entries.count { entries.removeAll(keepingCapacity: true) } else { entries.removeFirst(done) }
        if batch > 0 && unpersisted.capacity == 0 {
            // A published append's buffer, emptied, takes the next events: when the log has let
            // go of it too, no allocation per append (otherwise `removeAll` allocates one, as
            // the first append to an empty array would).
            var recycled: [LoggedEvent] = []
            swap(&recycled, &batches[batch - 1])
            recycled.removeAll(keepingCapacity: true)
            unpersisted = recycled
        }
        if batch == batches.count { batches.removeAll(keepingCapacity: true) } else { batches.removeFirst(batch) }
        swap(&entries, &inFlight)
        swap(&batches, &persisting)
        if done > 0 { head.changeIdsCommitted(through: room.committed.seq) }
        checkpointIfDue(room, into: &effects)
        drain(&room, into: &effects)
    }

    /// Asks for a checkpoint every `checkpointEvents` committed events.
    private mutating func checkpointIfDue(_ room: SessionRoom, into effects: inout [SessionEffect]) {
        guard room.committed.seq - checkpointSeq + checkpointStagger >= UInt64(max(1, room.settings.checkpointEvents)) else { return }
        checkpointSeq = room.committed.seq
        checkpointStagger = 0
        effects.append(.checkpoint(savedTable(room)))
    }

    /// Whether the committed replica compares each event it reproduces with the head's: in debug
    /// builds (every test), not in release, where it cost about a tenth of a change's time.
    #if DEBUG
        static let verifiesReplica = true
    #else
        static let verifiesReplica = false
    #endif

    /// `logged`: the entry's event as the log got it.
    private mutating func publish(
        _ entry: borrowing InFlight, _ logged: borrowing LoggedEvent, _ room: inout SessionRoom, into effects: inout [SessionEffect]
    ) {
        do {
            try room.committed.applyCommitted(logged.event, requestDigest: entry.requestDigest, verify: Self.verifiesReplica)
        } catch {
            // The head produced this event from the same state: a mismatch is a bug in the core.
            let seq = entry.seq
            effects.append(.log(.error, "replica_mismatch", { [("seq", String(seq)), ("reason", error.message)] }))
        }
        for key in entry.streams {
            let left = (expandingInFlight[key] ?? 1) - 1
            expandingInFlight[key] = left > 0 ? left : nil
        }
        // Retries are rare: no hashing of the seq when there are none.
        let retries = waitingAcks.isEmpty ? [] : waitingAcks.removeValue(forKey: entry.seq) ?? []
        // Always encoded here (in `apply`); the fallback only keeps this total.
        let message = OutboundMessage(logged.encoded ?? ServerMessage.event(logged.event))
        room.announce(
            logged.event, message, author: entry.author, retries: retries, streamed: entry.streams, needingRows: entry.needingRows,
            into: &effects)
    }

    /// An append failed: every change not yet durable is lost, those still waiting for their
    /// hand-over too (they were decided on the lost head). `head` returns to `committed` and each
    /// author hears so; changes queued and not yet applied (`pending`) are tried again.
    private mutating func rollBack(generation: UInt64, _ error: StoreError, _ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        guard generation == self.generation else { return }
        self.generation += 1
        let refusal = ProtocolError(.storageUnavailable, "the change could not be stored; it was not applied, retry later")
        // The events of `inFlight`, in the same order: the rest of the appends, then what was not handed over.
        var events: [LoggedEvent] = []
        for (index, batch) in persisting.enumerated() { events += batch[(index == 0 ? persistingNext : 0)...] }
        events += unpersisted
        for (entry, logged) in zip(inFlight, events) {
            if let author = entry.author { room.refuse(author, refusal, id: logged.event.changeId, into: &effects) }
            for retry in waitingAcks.removeValue(forKey: entry.seq) ?? [] {
                room.refuse(retry.origin, refusal, id: retry.id, into: &effects)
            }
        }
        let lost = inFlight.count
        effects.append(.log(.warning, "commit_failed", { [("lost", String(lost)), ("reason", error.description)] }))
        inFlight.removeAll()
        unpersisted.removeAll()
        persisting.removeAll()
        persistingNext = 0
        expandingInFlight.removeAll()
        // Records of lost changes (and moves of lost undos) cannot be told from the others.
        room.undo.removeAll()
        // The committed table with its ids: those of the lost changes are forgotten with them.
        head = savedTable(room)
        head.changeIdsCommitted(through: room.committed.seq)
        drain(&room, into: &effects)
    }
}
