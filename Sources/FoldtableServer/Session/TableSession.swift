import FoldtableCore

/// Drives one ``SessionCore``: feeds it inputs one at a time and performs the effects it returns
/// on the transport and the hub's timers; the effects of its order (appends, checkpoints,
/// snapshots) go to the order's `OrderDriver`. Holds no decisions of its own, only the
/// I/O-shaped state the core leaves out: row streams' chunk cursors and timer tokens.
///
/// Runs on the transport's service thread only.
final class TableSession {
    let name: String
    private(set) var core: SessionCore
    private unowned let hub: Hub
    /// The hub's metrics, held here: reached through the unowned `hub` they cost a checked
    /// retain of the hub for each commit report.
    private let metrics: Metrics
    /// The hub's transport, held here: read through the unowned `hub` it was retained and
    /// released around every call of `handle`, while a `let` of `self` needs neither.
    let transport: Transport
    /// Performs what the session's order asks (appends, checkpoints, snapshots).
    private let driver: OrderDriver
    /// Row streams under way, by section key.
    private var rowStreams: [String: RowStream] = [:]
    private var timerTokens: [SessionTimer: UInt64] = [:]
    /// Members of busy sections whose final chunks are written but maybe not yet taken by their
    /// peers (see ``SessionEffect/awaitFlush(section:seq:member:)``), looked at on one timer.
    private var awaitingFlush: [(section: String, seq: UInt64, connection: Connection, since: UInt64)] = []
    private var flushPollArmed = false
    /// Inputs waiting while effects of an earlier one are performed: effects can cause inputs
    /// (a stream delivered at once, a store completion), and the core takes one at a time.
    private var inputs: [SessionInput] = []
    /// `inputs.count`, kept apart: the compiler proves a plain Int's accesses exclusive and so
    /// checks nothing at run time, while each access to the array costs a dynamic exclusivity
    /// check; `handle` reads this one instead (inputs rarely wait).
    private var waitingInputs = 0
    private var handling = false
    /// The effects of the input being performed: one buffer kept for every input (emptied,
    /// its capacity kept), not an array allocated per input.
    private var effects: [SessionEffect] = []
    /// Where acks are encoded, emptied for each (its capacity kept). Swapped out for a call of
    /// `handle` like `effects`, so each ack needs no access to the property (and its check);
    /// a swap moves it without the retain and release that taking it out of an optional and
    /// assigning it back cost.
    private var ackBuffer = JSONWriter(capacity: 64)
    /// The eviction timer while the session is quiet.
    var evictionTimer: UInt64?
    /// When the turn's first change that waits for the turn's end to go to the log was applied:
    /// where the commit clock of the turn's append starts. Cleared when the turn's hand-over
    /// runs, so it also marks that the hub will send one. (A commit that hands the changes over
    /// earlier leaves it set: a later change of the same turn is then timed from it, at most a
    /// turn early.)
    private var handOverSince: MonotonicTime?
    /// A shared session: its members joined, left or were renamed since the last heartbeat (the
    /// hub then hands the broker the node's members again; otherwise the beat only refreshes).
    var presenceDirty = false

    init(core: SessionCore, hub: Hub, driver: OrderDriver) {
        self.name = core.name
        self.core = core
        self.hub = hub
        self.metrics = hub.metrics
        self.transport = hub.transport
        self.driver = driver
        driver.attach(self)
    }

    /// Whether this session is the one the hub holds under its name (not one deleted or
    /// evicted meanwhile).
    var isResident: Bool { hub.isResident(self) }

    /// Notes that the committed table was saved at `seq` outside the order's own checkpoints.
    func checkpointTaken(at seq: UInt64) { core.checkpointTaken(at: seq) }

    /// The store holds the private views as of `revision` (see ``SessionCore/savedViews``).
    func viewsStored(revision: UInt64) { core.viewsStored(revision: revision) }

    /// Saves the committed table now (a checkpoint or a snapshot, as the order keeps them), and
    /// private views that changed since they were stored: a private toggle is no event, so
    /// views may be all there is to save.
    func save() {
        guard core.eventsSinceCheckpoint > 0 || core.viewsUnsaved else { return }
        driver.perform(core.save, applied: nil)
    }

    /// The session leaves memory: what its order's driver follows stops.
    func detach() { driver.detached() }

    var memberCount: Int { core.memberCount }

    /// Feeds `input` to the core and performs its effects (and those of any input they cause),
    /// in order. Never re-entered: inputs raised meanwhile wait their turn.
    ///
    /// `now`: the transport's clock (``Transport/nowMilliseconds()``) as the caller read it just
    /// before (the hub, for a change's rate limit), so the core's time costs no second reading;
    /// `nil` reads it here. An input that has to wait reads its own when its turn comes.
    func handle(_ input: SessionInput, now: UInt64? = nil) {
        guard !handling else {
            inputs.append(input)
            waitingInputs += 1
            return
        }
        handling = true
        defer { handling = false }
        // One strong reference for the whole loop: every read of the unowned property checks
        // and retains (16 reads per acknowledged change before, 4 now).
        let hub = self.hub
        let transport = self.transport
        // Taken out while performed (performing may feed inputs, never re-enter this loop):
        // swapped with empty placeholders (a writer of capacity 0 allocates nothing).
        var effects: [SessionEffect] = []
        swap(&effects, &self.effects)
        var ackBuffer = JSONWriter(capacity: 0)
        swap(&ackBuffer, &self.ackBuffer)
        // The first input as given (borrowed), not copied into the queue and out again: most
        // calls bring one input, and a copy retains every string and array it carries.
        var quiet = run(input, now: now, hub: hub, transport: transport, effects: &effects, ackBuffer: &ackBuffer)
        if waitingInputs > 0 {
            var next = 0
            while next < inputs.count {
                let queued = inputs[next]
                next += 1
                quiet = run(queued, now: nil, hub: hub, transport: transport, effects: &effects, ackBuffer: &ackBuffer)
            }
            inputs.removeAll(keepingCapacity: true)
            waitingInputs = 0
        }
        swap(&effects, &self.effects)
        swap(&ackBuffer, &self.ackBuffer)
        hub.sessionSettled(self, quiet: quiet)
    }

    /// One input through the core, then its effects performed (and `effects` emptied). Returns
    /// whether the core is quiet after it (performing effects never changes that: whatever
    /// would comes back as another input). `now`: see ``handle(_:now:)``.
    private func run(
        _ input: SessionInput, now given: UInt64?, hub: Hub, transport: Transport, effects: inout [SessionEffect], ackBuffer: inout JSONWriter
    ) -> Bool {
        // One access to the core (`handle` and what is read after it).
        let outcome: (quiet: Bool, published: UInt64)
        // When the change was applied: the start of the commit clock of the append it causes
        // (performed right after, or at the turn's end with `handOverSince`), so that clock
        // needs no reading of its own.
        var applied: MonotonicTime?
        switch input {
        case .join, .leave, .rename:
            presenceDirty = true
            outcome = Self.handle(input, now: given ?? transport.nowMilliseconds(), core: &core, into: &effects)
        case .change, .apiChange, .undo:
            let start = MonotonicTime.now
            let now = given ?? transport.milliseconds(at: start) ?? transport.nowMilliseconds()
            outcome = Self.handle(input, now: now, core: &core, into: &effects)
            let end = MonotonicTime.now
            metrics.applyLatency.observe(start.seconds(until: end))
            applied = end
            // The change waits for the rest of its read: the hub hands this session's changes
            // of the turn to the log together when the turn ends.
            if handOverSince == nil && core.awaitsHandOver {
                handOverSince = end
                hub.handOverAtTurnEnd(self)
            }
        case .handOver:
            outcome = Self.handle(input, now: given ?? transport.nowMilliseconds(), core: &core, into: &effects)
            applied = handOverSince
            handOverSince = nil
        case .reload:
            // A reload replaces the table: nothing of it was applied here.
            outcome = (Self.handle(input, now: given ?? transport.nowMilliseconds(), core: &core, into: &effects).quiet, 0)
        default:
            outcome = Self.handle(input, now: given ?? transport.nowMilliseconds(), core: &core, into: &effects)
        }
        // Changes count when they become visible: a log's commit, or a stream's entry applied.
        if outcome.published > 0 { metrics.changesApplied += outcome.published }
        perform(&effects, hub: hub, transport: transport, ackBuffer: &ackBuffer, applied: applied)
        return outcome.quiet
    }

    /// `core.handle`, then `core.isQuiet` and how many events became visible, inside one
    /// exclusive access to `core` (the inout): one runtime check instead of several.
    @inline(__always)
    private static func handle(
        _ input: SessionInput, now: UInt64, core: inout SessionCore, into effects: inout [SessionEffect]
    ) -> (quiet: Bool, published: UInt64) {
        let before = core.room.committed.seq
        core.handle(input, now: now, into: &effects)
        let after = core.room.committed.seq
        return (core.isQuiet, after > before ? after - before : 0)
    }

    /// Performs `effects` in order and empties it (its capacity kept). Each effect is moved
    /// out of the buffer, not copied: reading `effects[index]` copies it (retaining everything
    /// it holds, then destroying the copy) because the compiler cannot prove that performing
    /// leaves the array alone. It does: the array is `handle`'s local (taken out of `self`) and
    /// a re-entrant `handle` only queues its input. The buffer is reversed in place (a pointer
    /// swap for the usual two) and each effect taken off its end by `popLast`, which moves it
    /// out and shortens the array: nothing is left behind to destroy. (Moved-out slots refilled
    /// with a placeholder would each cost a destroy through `SessionEffect`'s value witness, and
    /// `removeAll` goes through the generic `replaceSubrange`.)
    /// `applied`: when the input's change was applied, if it was one (see `run`).
    private func perform(
        _ effects: inout [SessionEffect], hub: Hub, transport: Transport, ackBuffer: inout JSONWriter, applied: MonotonicTime?
    ) {
        if effects.count > 1 {
            effects.withUnsafeMutableBufferPointer { buffer in
                guard let base = buffer.baseAddress else { return }
                var low = 0
                var high = buffer.count - 1
                while low < high {
                    // Moves only: the effects' references are neither retained nor released.
                    let first = (base + low).move()
                    (base + low).moveInitialize(from: base + high, count: 1)
                    (base + high).initialize(to: first)
                    low += 1
                    high -= 1
                }
            }
        }
        while let effect = effects.popLast() {
            perform(effect, hub: hub, transport: transport, ackBuffer: &ackBuffer, applied: applied)
        }
    }

    /// A member's queue drained: refill it from every stream it is in.
    func drained(_ connection: Connection) {
        for stream in rowStreams.values where stream.contains(connection) {
            pump(stream, connection)
        }
    }

    private func pump(_ stream: RowStream, _ connection: Connection) {
        if stream.pump(connection, transport: transport, lowMark: hub.config.streamLowMarkBytes) {
            handle(.streamDelivered(section: stream.section, seq: stream.seq, to: connection))
        }
    }

    /// How often members whose rows may still sit in their sockets are looked at again, in ms:
    /// the transport says when its own queue drains, but not when the kernel's does.
    private static let flushPollMilliseconds: UInt64 = 25

    /// Reports ``SessionInput/streamFlushed(section:seq:to:)`` once the member's peer has taken
    /// all but about one chunk of what was sent to it (not exactly all: events and pings keep
    /// coming in a lively session, and a busy section must not wait for a quiet socket); else
    /// looks again with the others on one timer of the session's, not one per member.
    private func awaitFlush(_ key: String, seq: UInt64, _ connection: Connection, since: UInt64) {
        if !reportIfFlushed(key, seq: seq, connection, since: since) {
            awaitingFlush.append((key, seq, connection, since))
            armFlushPoll()
        }
    }

    /// Whether the wait for `connection`'s peer is over, reporting it if so. Gives up after the
    /// stream timeout: a peer that stops reading must not keep a section busy.
    private func reportIfFlushed(_ key: String, seq: UInt64, _ connection: Connection, since: UInt64) -> Bool {
        // A connection that closed leaves the session, and its leave ends the wait.
        guard hub.isOpen(connection) else { return true }
        let config = hub.config
        let now = transport.nowMilliseconds()
        let gaveUp = now >= since && now - since >= UInt64(config.streamTimeoutSecs) * 1_000
        guard gaveUp || transport.unflushedBytes(connection) <= min(config.maxBatchBytes, config.streamLowMarkBytes) else { return false }
        handle(.streamFlushed(section: key, seq: seq, to: connection))
        return true
    }

    private func armFlushPoll() {
        guard !flushPollArmed else { return }
        flushPollArmed = true
        _ = hub.armTimer(
            .later { [weak self] in
                guard let self else { return }
                self.flushPollArmed = false
                // Taken out first: a report runs the core, which may ask to await another member.
                let waiting = self.awaitingFlush
                self.awaitingFlush = []
                for entry in waiting where !self.reportIfFlushed(entry.section, seq: entry.seq, entry.connection, since: entry.since) {
                    self.awaitingFlush.append(entry)
                }
                if !self.awaitingFlush.isEmpty { self.armFlushPoll() }
            }, milliseconds: Self.flushPollMilliseconds)
    }

    /// `hub` and `transport`: this session's, held by the caller for its loop; `ackBuffer`
    /// the session's, taken out for it; `applied`: when the (first) change that caused `effect`
    /// was applied, if one did (this turn: it starts the commit clock of the append it causes).
    private func perform(_ effect: SessionEffect, hub: Hub, transport: Transport, ackBuffer: inout JSONWriter, applied: MonotonicTime?) {
        switch effect {
        case .send(let message, let connection):
            hub.metrics.sent(message, to: 1)
            transport.send(message, to: connection)
        case .broadcast(let message, let connections):
            hub.metrics.sent(message, to: connections.count)
            let start = MonotonicTime.now
            transport.broadcast(message, to: connections)
            hub.metrics.fanoutLatency.observe(Metrics.seconds(since: start))
        case .accepted(let connection):
            hub.accepted(connection)
        case .ack(let connection, let id, let seq):
            // Into one reused buffer, then the transport's frame: an ack is one allocation. The
            // writer is emptied and read in place (through `bytes` each ack would trim its room,
            // regrow it and copy the array's reference twice).
            ackBuffer.removeAll()
            ServerMessage.ack(id: id, seq: seq, into: &ackBuffer)
            hub.metrics.sent(bytes: ackBuffer.count, to: 1)
            ackBuffer.withUnsafeBytes { transport.send(bytes: $0, to: connection) }
        case .refuse(let connection, let error, let id):
            hub.refuse(connection, error, id: id)
        case .answer(let request, let result):
            hub.apiAnswered(request, result)
        case .created(let request, let key):
            hub.apiCreated(request, key: key)
        case .persist, .checkpoint, .append, .snapshot:
            driver.perform(effect, applied: applied)
        case .find(let query, let table, let limit, let id, let connection):
            let started = hub.finder.find(query, in: table, limit: limit, for: "c\(connection.id)") { [hub] matches, truncated in
                guard hub.isOpen(connection) else { return }
                let found = OutboundMessage(ServerMessage.found(id: id, query: query, matches: matches, truncated: truncated))
                hub.metrics.sent(found, to: 1)
                hub.transport.send(found, to: connection)
            }
            if !started { hub.refuse(connection, RowFinder.busy, id: id) }
        case .startStream(let section, let seq, let connections):
            let stream = RowStream(
                section: section, seq: seq, chunkRows: hub.config.rowChunkRows,
                // Chunks stay well under the refill mark, so one chunk never passes a member's queue cap.
                chunkBytes: min(hub.config.maxBatchBytes, hub.config.streamLowMarkBytes))
            rowStreams[section.key] = stream
            for connection in connections { stream.add(connection) }
            for connection in connections { pump(stream, connection) }
        case .joinStream(let key, let seq, let connection):
            guard let stream = rowStreams[key], stream.seq == seq else { return }
            stream.add(connection)
            pump(stream, connection)
        case .leaveStream(let key, let connection):
            rowStreams[key]?.remove(connection)
        case .endStream(let key):
            rowStreams[key] = nil
        case .awaitFlush(let key, let seq, let connection):
            awaitFlush(key, seq: seq, connection, since: transport.nowMilliseconds())
        case .armTimer(let timer, let milliseconds):
            if let old = timerTokens[timer] { hub.cancelTimer(old) }
            timerTokens[timer] = hub.armTimer(.session(name: name, timer), milliseconds: milliseconds)
        case .cancelTimer(let timer):
            if let token = timerTokens.removeValue(forKey: timer) { hub.cancelTimer(token) }
        case .close(let connection, let code, let reason):
            transport.close(connection, code: code, reason: reason)
        case .log(let level, let event, let fields):
            hub.logger(level, event, pairs: { [("session", name)] + fields() })
        }
    }

    /// A timer of this session fired (the hub looked it up by token).
    func timerFired(_ timer: SessionTimer, token: UInt64) {
        guard timerTokens[timer] == token else { return }
        timerTokens[timer] = nil
        handle(.timer(timer))
    }
}
