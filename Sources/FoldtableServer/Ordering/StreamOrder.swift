import FoldtableCore

/// The session's stream in a ``Broker``, shared by several nodes, orders its changes.
///
/// A change is appended as a request (``SessionEffect/append(_:)``), and every node applies the
/// requests it reads, in stream order, to the room's `committed` table, so all produce the same
/// events, refusals and seqs; only the node that made a request answers its author. The stream
/// is the sequencer, so there is no head and nothing to roll back: what this order keeps is
/// this node's requests not applied yet (`awaiting`), appends of unknown outcome, requests read
/// and waiting behind a row stream, and joins waiting for the stream to reach their `since`.
public struct StreamOrder: SessionOrder {
    /// This node's id in authors (`<node>.c<connection>`).
    public let node: String
    /// Names this node in request origins: unique to this order, since request numbers start at
    /// 1 with each, and a late entry of an earlier one must not be taken for one of this one's.
    public let origin: String

    /// This node's requests appended (or being appended) and not applied yet, by origin number,
    /// with who to answer.
    private var awaiting: [UInt64: Awaiting] = [:]

    private struct Awaiting {
        var origin: ChangeOrigin
        var id: String?
        /// ``Table/digest(_:)`` of the change, with an id: tells it from another change with the
        /// same id when its outcome is read from the change-id window (0 without an id).
        var digest: UInt64
        /// The committed seq when it was appended: if the order applied it, it is after this.
        var after: UInt64
        /// Where the append put it, once its reply came.
        var position: String?
        /// Whose change it is for undo (``ChangeRequest/scope``).
        var scope: String?
        /// For an undo or redo: the record it applies.
        var undoing: UndoRecord?
    }

    /// What became of a request of this node's that no read will deliver.
    private enum Outcome {
        case applied(seq: UInt64)
        case notApplied(ProtocolError)
        case unknown
    }

    /// Undo and redo requests held until the same author's requests before them are applied
    /// (or refused): an undo resolves to the author's latest change this node has applied, so
    /// one sent right behind a change must wait for that change to come back from the stream,
    /// or it would take back the one before. In arrival order.
    private var undosHeld: [ChangeRequest] = []
    /// Whether changes may be appended: false while the broker is unavailable (read-only).
    private var writable = true
    /// Requests whose append failed with an unknown outcome, with how many more reads to the
    /// stream's end they wait for their entry before their author is told it failed.
    private var uncertain: [UInt64: Int] = [:]
    private var requestsMade: UInt64 = 0
    /// Requests read from the stream, waiting in stream order (behind busy sections).
    private var sequencedPending = WaitingQueue<SequencedRequest>()
    /// The stream position of the last request applied ("" before any).
    public private(set) var appliedPosition = ""
    /// `committed.seq` at the last snapshot asked for.
    private var checkpointSeq: UInt64 = 0
    /// Joins resuming from a `since` this node has not applied yet (the member saw it on a node
    /// whose reader was ahead), in arrival order, with how many more reads to the stream's end
    /// they wait for it, and the changes their members sent meanwhile.
    private var joinsWaiting: [WaitingJoin] = []

    private struct WaitingJoin {
        let connection: Connection
        let request: JoinRequest
        let role: String?
        let scope: String?
        var reads: Int
        var changes: [(change: Change, id: String?)] = []
    }

    /// `node` names this node in authors; `origin` (default: `node`) in request origins.
    public init(node: String, origin: String? = nil, position: String = "") {
        self.node = node
        self.origin = origin ?? node
        self.appliedPosition = position
    }

    public mutating func open(_ room: inout SessionRoom, checkpointSeq: UInt64) {
        room.clientPrefix = node + "."
        room.node = node
        self.checkpointSeq = checkpointSeq
    }

    /// Nothing appended and unapplied, nothing read and waiting.
    public var isQuiet: Bool { awaiting.isEmpty && sequencedPending.isEmpty && joinsWaiting.isEmpty && undosHeld.isEmpty }
    /// This node has requests appended and not yet applied, or joins waiting for the stream.
    public var waitsForCatchUp: Bool { !awaiting.isEmpty || !joinsWaiting.isEmpty }

    /// The committed table is the sequencer and keeps its own change-id window.
    public func savedTable(_ room: SessionRoom) -> Table { room.committed }
    public func save(_ room: SessionRoom) -> SessionEffect {
        .snapshot(room.committed, position: appliedPosition, history: room.recentHistory)
    }
    public func eventsSinceCheckpoint(_ room: SessionRoom) -> UInt64 { room.committed.seq - checkpointSeq }
    public mutating func checkpointTaken(at seq: UInt64) { checkpointSeq = max(checkpointSeq, seq) }

    public mutating func handle(_ input: SessionInput, _ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        switch input {
        case .sequenced(let requests):
            sequencedPending.append(contentsOf: requests)
            drain(&room, into: &effects)
        case .appendFailed(let number, let error): appendFailed(number, error, &room, into: &effects)
        case .appended(let number, let position): awaiting[number]?.position = position
        case .caughtUp(let through): caughtUp(through: through, &room, into: &effects)
        case .brokerAvailable(let available): writable = available
        case .reload(let epoch, let table, let position, let history):
            reload(epoch: epoch, table: table, position: position, history: history, &room, into: &effects)
        default: break
        }
        if !undosHeld.isEmpty { releaseHeldUndos(&room, into: &effects) }
    }

    // MARK: - Joins ahead of this node

    /// A resume from a `since` past what this node applied, of this session's epoch: the member
    /// saw it on another node whose reader was ahead. The join waits until this node applied
    /// it, or two reads to the stream's end (the second begun after the join) did not bring it
    /// (a `since` nobody reached): then it goes on, as a fresh welcome.
    public mutating func holdsJoin(_ connection: Connection, _ request: JoinRequest, role: String?, scope: String?, _ room: SessionRoom) -> Bool {
        guard let since = request.since, request.epoch == room.epoch, since > room.committed.seq,
            !room.isMember(connection), !joinsWaiting.contains(where: { $0.connection == connection })
        else { return false }
        joinsWaiting.append(WaitingJoin(connection: connection, request: request, role: role, scope: scope, reads: 2))
        return true
    }

    public mutating func holdsChange(_ change: Change, id: String?, from connection: Connection) -> Bool {
        guard !joinsWaiting.isEmpty, let index = joinsWaiting.firstIndex(where: { $0.connection == connection }) else { return false }
        joinsWaiting[index].changes.append((change, id))
        return true
    }

    public mutating func forget(_ connection: Connection) {
        if !joinsWaiting.isEmpty, let index = joinsWaiting.firstIndex(where: { $0.connection == connection }) { joinsWaiting.remove(at: index) }
    }

    /// Lets in the waiting joins whose `since` is applied now or whose reads are spent, in
    /// arrival order, then submits the changes their members sent meanwhile.
    private mutating func admitWaitingJoins(_ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        guard !joinsWaiting.isEmpty else { return }
        var still: [WaitingJoin] = []
        var admitted: [WaitingJoin] = []
        for waiting in joinsWaiting {
            if waiting.reads <= 0 || (waiting.request.since ?? 0) <= room.committed.seq { admitted.append(waiting) } else { still.append(waiting) }
        }
        joinsWaiting = still
        for waiting in admitted {
            room.join(waiting.connection, waiting.request, role: waiting.role, scope: waiting.scope, now: room.now, into: &effects)
            for sent in waiting.changes {
                guard let author = room.author(of: waiting.connection) else { break }
                submit(
                    ChangeRequest(
                        change: sent.change, id: sent.id, author: author, origin: .member(waiting.connection), scope: waiting.scope),
                    &room, into: &effects)
            }
        }
    }

    // MARK: - Appends

    /// A change becomes a request for the stream; only the order decides what it meets, so
    /// nothing is checked against the table here.
    public mutating func submit(_ change: ChangeRequest, _ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        var change = change
        var undoing: UndoRecord?
        if case .undo(let ask) = change.change, ask.isRequest {
            if awaiting.values.contains(where: { $0.scope == change.scope }) || undosHeld.contains(where: { $0.scope == change.scope }) {
                guard undosHeld.count < room.settings.maxPendingChanges else {
                    return room.refuse(
                        change.origin, ProtocolError(.limitReached, "the session has too many changes waiting; retry shortly"), id: change.id,
                        into: &effects)
                }
                undosHeld.append(change)
                return
            }
            // Resolved here, against what this node applied: the request goes to the stream
            // whole, with what it expects, so every node applies it or refuses it alike.
            if let id = change.id, let earlier = room.committed.remembered(id) {
                guard earlier.digest == Table.digest(change.change) else {
                    return room.refuse(change.origin, UndoHistory.idReused(id), id: id, into: &effects)
                }
                room.acknowledge(change.origin, id: id, seq: earlier.seq, into: &effects)
                return
            }
            guard let scope = change.scope, let record = room.undo.next(redo: ask.redo, of: scope) else {
                room.refuse(change.origin, UndoHistory.nothingLeft(redo: ask.redo), id: change.id, into: &effects)
                return
            }
            if record.tooLarge, let scope = change.scope {
                room.undo.drop(redo: ask.redo, of: record.seq, by: scope)
                return room.refuse(change.origin, UndoHistory.tooLarge(record), id: change.id, into: &effects)
            }
            if record.kind == "setOptions" && !room.mayChangeOptions(change.origin) {
                return room.refuse(change.origin, UndoHistory.ownerOnly, id: change.id, into: &effects)
            }
            change.change = .undo(record.change(redo: ask.redo, on: room.committed))
            undoing = record
        }
        guard writable else {
            // Applying it here alone would fork the order: refused, as with a failed append.
            room.refuse(change.origin, Self.readOnly, id: change.id, into: &effects)
            return
        }
        guard awaiting.count < room.settings.maxPendingChanges else {
            room.refuse(
                change.origin, ProtocolError(.limitReached, "the session has too many changes waiting; retry shortly"), id: change.id, into: &effects)
            return
        }
        requestsMade += 1
        awaiting[requestsMade] = Awaiting(
            origin: change.origin, id: change.id, digest: change.id == nil ? 0 : Table.digest(change.change), after: room.committed.seq,
            scope: change.scope, undoing: undoing)
        let origin = RequestOrigin(node: origin, number: requestsMade)
        effects.append(.append(SequencedRequest(change: change.change, id: change.id, author: change.author, origin: origin)))
    }

    /// Submits the held undos whose authors have nothing of theirs left in flight, in order.
    private mutating func releaseHeldUndos(_ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        var held: [ChangeRequest] = []
        swap(&held, &undosHeld)
        for request in held {
            // An earlier one submitted now is awaited; one held again keeps those after it held.
            let busy = awaiting.values.contains { $0.scope == request.scope } || undosHeld.contains { $0.scope == request.scope }
            if busy { undosHeld.append(request) } else { submit(request, &room, into: &effects) }
        }
    }

    private mutating func appendFailed(_ number: UInt64, _ error: BrokerError, _ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        guard let waiting = awaiting[number] else { return }
        if error.mayHaveRun {
            // Its entry may still come; two reads to the stream's end, the second begun after
            // this report, settle whether it landed.
            uncertain[number] = 2
            effects.append(.log(.warning, "append_uncertain", { [("reason", error.reason)] }))
            return
        }
        awaiting[number] = nil
        room.refuse(waiting.origin, Self.notAppended, id: waiting.id, into: &effects)
        effects.append(.log(.warning, "append_failed", { [("reason", error.reason)] }))
    }

    private static var readOnly: ProtocolError {
        ProtocolError(
            .storageUnavailable, "the session is read-only while its shared storage cannot be reached; the change was not applied, retry later")
    }

    private static var notReadBack: ProtocolError {
        ProtocolError(.storageUnavailable, "the change was stored but could not be read back, so no node applied it; retry later")
    }

    private static var outcomeUnknown: ProtocolError {
        ProtocolError(
            .outcomeUnknown,
            "the session was reloaded from shared storage and whether this change was applied cannot be told (send changes with an id): read the table before retrying"
        )
    }

    private static var notAppended: ProtocolError {
        ProtocolError(.storageUnavailable, "the change could not be stored; it was not applied, retry later")
    }

    // MARK: - Reads

    /// A read reached the stream's end: requests of unknown outcome not seen by now did not land
    /// (a retry with the same change id is acknowledged with the original seq if one did after all).
    private mutating func caughtUp(through: String, _ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        if !joinsWaiting.isEmpty {
            for index in joinsWaiting.indices { joinsWaiting[index].reads -= 1 }
            admitWaitingJoins(&room, into: &effects)
        }
        if sequencedPending.isEmpty {
            // Everything read is applied: a request appended at or before `through` and still
            // waiting was dropped by every reader (its entry did not decode).
            // (Or a reload's snapshot covered it: ``settle(_:unread:_:into:)`` reads the window.)
            let dropped = awaiting.filter { $0.value.position.map { !StreamPosition.precedes(through, $0) } ?? false }.keys.sorted()
            for number in dropped {
                guard let waiting = awaiting.removeValue(forKey: number) else { continue }
                if settle(waiting, unread: Self.notReadBack, room, into: &effects) {
                    effects.append(.log(.warning, "request_dropped", { [("position", waiting.position ?? "")] }))
                }
            }
        }
        guard !uncertain.isEmpty else { return }
        for number in uncertain.keys.sorted() {
            let left = uncertain[number, default: 1] - 1
            if left > 0 {
                uncertain[number] = left
                continue
            }
            uncertain[number] = nil
            guard let waiting = awaiting.removeValue(forKey: number) else { continue }
            settle(waiting, unread: Self.notAppended, room, into: &effects)
        }
    }

    /// Answers a request of this node's that no read will deliver: the committed table's
    /// change-id window says whether the order applied it (acknowledged with its seq), and, when
    /// it holds every id since the request was made, that it did not (`unread`, or `id_reused`
    /// when another change holds the id). Never "not applied" for a change that was: without an
    /// id, or with ids pushed out of the window since, the outcome is unknown and said so.
    /// Returns whether it was answered as not applied.
    @discardableResult
    private func settle(_ waiting: Awaiting, unread: ProtocolError, _ room: SessionRoom, into effects: inout [SessionEffect]) -> Bool {
        switch outcome(of: waiting, unread: unread, room.committed) {
        case .applied(let seq):
            room.acknowledge(waiting.origin, id: waiting.id, seq: seq, into: &effects)
            return false
        case .notApplied(let error):
            room.refuse(waiting.origin, error, id: waiting.id, into: &effects)
            return true
        case .unknown:
            room.refuse(waiting.origin, Self.outcomeUnknown, id: waiting.id, into: &effects)
            return false
        }
    }

    private func outcome(of waiting: Awaiting, unread: ProtocolError, _ committed: Table) -> Outcome {
        guard let id = waiting.id else { return .unknown }
        // Held with the same digest: applied (as this request, or as an earlier one it retries).
        if let remembered = committed.remembered(id) {
            guard remembered.digest == waiting.digest else {
                return .notApplied(
                    ProtocolError(
                        .idReused, "the change id \"\(ChangeIdScope.id(ofKey: id).prefix(64))\" was used for a different change", field: "id"))
            }
            return .applied(seq: remembered.seq)
        }
        return committed.remembersEveryId(after: waiting.after) ? .notApplied(unread) : .unknown
    }

    /// Whether a request must wait: it touches a section whose rows are streaming.
    private func mustWait(_ change: Change, _ room: SessionRoom) -> Bool {
        guard room.hasStreams else { return false }
        switch room.committed.scope(of: change) {
        case .table: return true
        case .sections(let keys): return keys.contains { room.isStreaming($0) }
        }
    }

    /// Applies waiting requests in stream order until one must wait.
    public mutating func drain(_ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        let before = room.committed.seq
        while let next = sequencedPending.front, !mustWait(next.change, room) {
            sequencedPending.removeFront()
            apply(next, &room, into: &effects)
        }
        sequencedPending.compact()
        if room.committed.seq > before { admitWaitingJoins(&room, into: &effects) }
        checkpointIfDue(room, into: &effects)
    }

    /// Asks for a snapshot every `checkpointEvents` committed events.
    private mutating func checkpointIfDue(_ room: SessionRoom, into effects: inout [SessionEffect]) {
        guard room.committed.seq - checkpointSeq >= UInt64(max(1, room.settings.checkpointEvents)) else { return }
        checkpointSeq = room.committed.seq
        effects.append(save(room))
    }

    /// One request in stream order: the same event or refusal on every node; only its origin
    /// node answers the author.
    private mutating func apply(_ request: SequencedRequest, _ room: inout SessionRoom, into effects: inout [SessionEffect]) {
        var waiting: Awaiting?
        if request.origin.node == origin {
            waiting = awaiting.removeValue(forKey: request.origin.number)
            uncertain[request.origin.number] = nil
        }
        appliedPosition = request.position
        // This node's own member's change: recorded for its undo (what it overwrites is read first).
        let recording = waiting?.scope != nil && waiting?.undoing == nil && room.undo.depth > 0
        let prelude = recording ? room.committed.undoPrelude(for: request.change) : .notRecorded
        let outcome: ApplyOutcome
        do {
            outcome = try room.committed.apply(request.change, by: request.author, changeId: request.id)
        } catch {
            if let waiting { room.refuse(waiting.origin, error, id: request.id, into: &effects) }
            return
        }
        switch outcome {
        case .duplicate(let seq):
            if let waiting { room.acknowledge(waiting.origin, id: request.id, seq: seq, into: &effects) }
        case .applied(var event):
            // The stream's own clock: every node reads the same entry, so stamps it the same.
            event.time = StreamPosition.milliseconds(of: request.position)
            if let waiting, let scope = waiting.scope {
                if let record = waiting.undoing, case .undo(let undo) = event.change {
                    room.undo.applied(redo: undo.redo, of: record.seq, by: scope)
                } else if let record = room.committed.undoRecord(for: event, prelude: prelude) {
                    room.undo.recorded(record, by: scope)
                }
            }
            if case .member(let connection)? = waiting.flatMap({ room.present($0.origin) }) { effects.append(.accepted(connection)) }
            room.announce(event, OutboundMessage(ServerMessage.event(event)), author: waiting?.origin, streamed: nil, into: &effects)
        }
    }

    // MARK: - Reload

    /// Starts again from `table` at `position`: the room restarts from it (streams end, every
    /// member gets a fresh welcome). Requests of this node's that the table now covers are
    /// answered from its change-id window; in a new epoch their outcome may not be known.
    private mutating func reload(
        epoch: String, table: Table, position: String, history: [HistoryEntry], _ room: inout SessionRoom, into effects: inout [SessionEffect]
    ) {
        sequencedPending.removeAll()
        let newEpoch = epoch != room.epoch
        let from = room.committed.seq
        appliedPosition = position
        checkpointSeq = table.seq
        room.restart(epoch: epoch, table: table, history: history, into: &effects)
        // Requests the table now covers will never be read: the snapshot's position is at or
        // past theirs (in a new epoch, none of the old stream will be). Their outcome is in the
        // table's change-id window; answered after the welcome that shows it.
        let covered = awaiting.filter { newEpoch || $0.value.position.map { !StreamPosition.precedes(position, $0) } ?? false }
        for number in covered.keys.sorted() {
            guard let waiting = awaiting.removeValue(forKey: number) else { continue }
            uncertain[number] = nil
            settle(waiting, unread: Self.notAppended, room, into: &effects)
        }
        effects.append(
            .log(
                .warning, "session_reloaded",
                { [("from_seq", String(from)), ("seq", String(table.seq)), ("epoch_changed", newEpoch ? "yes" : "no")] }))
    }
}
