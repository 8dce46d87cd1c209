import FoldtableCore

/// The decisions of one shared table, as a pure state machine: inputs in, effects out.
///
/// No I/O, no clock (every input carries `now`), no transport: a `TableSession` performs the
/// effects. Two parts, each a pure state machine of its own:
///
/// - the session's ``SessionOrder``, which decides the order of changes: a ``LocalOrder`` over
///   this node's event log, or a ``StreamOrder`` over a broker's stream shared by several
///   nodes. Chosen once, when the session is opened;
/// - the ``SessionRoom``, which does what follows once a change is ordered, the same for both:
///   members, presence, row streams and busy sections, history, broadcast.
///
/// This type only routes: member inputs to the room, changes and the order's own reports to
/// the order, and, when the room freed what changes were waiting for (a member left, a row
/// stream ended), a drain of the order.
public struct SessionCore {
    /// What the core needs from the server's configuration.
    /// What the core needs from the server's configuration.
    public struct Settings: Sendable {
        /// Events kept in memory for resume.
        public var historyEvents = 300
        /// Rows and bytes a welcome may carry inline; the rest streams.
        public var welcomeRowBudget = 2_000
        public var welcomeByteBudget = 262_144
        /// Milliseconds a member may take to receive a stream before it is closed as slow.
        public var streamTimeoutMs: UInt64 = 15_000
        /// Changes waiting behind busy sections before new ones are refused.
        public var maxPendingChanges = 10_000
        /// A checkpoint is asked for after this many committed events.
        public var checkpointEvents = 1_000
        /// Whether a session opened by this node takes its first checkpoint up to half of
        /// `checkpointEvents` early, by an amount fixed by its name. Sessions that start together
        /// and change at the same pace (a class, a benchmark, a restart) would otherwise all take
        /// their checkpoint in the same group commit: with 1,000 sessions that is a thousand
        /// tables encoded and written at once, and every author's ack waited two seconds behind
        /// them. Staggered once, they stay apart. Off by default so a core's checkpoints fall at
        /// exact multiples (tests); the hub turns it on.
        public var staggersCheckpoints = false
        /// Whether a member's change goes to the log in an append of its own as soon as it is
        /// applied. A driver that knows when a burst of messages ends (the transport's turn)
        /// turns it off and sends ``SessionInput/handOver`` after the burst: the changes a
        /// client sends together (its changes in flight, in one read) then share one append,
        /// one commit report and one trip through the core. A caller of the HTTP API is always
        /// handed over at once: nothing else comes in its burst.
        public var handsOverAtOnce = true
        /// A row chunk holds at most this many rows and about this many bytes. An expanded
        /// section that fits one chunk is sent with its event, to everyone at once; a larger one
        /// streams, paced per member, and changes touching it wait for the stream.
        public var chunkRows = 500
        public var chunkBytes = 65_536
        /// A member's queue is refilled with row chunks while it holds at most this many bytes
        /// (the hub's `streamLowMarkBytes`): a stream up to this size is handed over at once.
        public var streamRefillBytes = 262_144
        /// The pace, in bytes a second, a row stream is expected to reach even a slow member at:
        /// a stream larger than what this pace covers within the table's busy threshold is shown
        /// busy as it starts. A `busy` decided later would queue behind the rows already in a
        /// member's queue and socket (megabytes), and reach a slow reader after its rows.
        public var streamExpectedBytesPerSec = 1_048_576
        /// Whether busy lasts until members' peers took their rows, not only until every chunk
        /// is queued: a slow reader's last rows can sit megabytes deep in its socket, and the
        /// others would see busy end a second before it has them. The driver then watches such
        /// members (``SessionEffect/awaitFlush(section:seq:member:)``). Off by default, so a
        /// core's busy ends with its stream (tests); the hub turns it on.
        public var busyAwaitsPeers = false
        /// Joins, leaves and renames within this many milliseconds go to members as one
        /// `presence` diff (0: each at once, still one message per member per change).
        public var presenceIntervalMs: UInt64 = 100
        /// Members a session lists by name; past it, welcomes list this many and diffs carry the
        /// count and a sample, so presence costs no more per member in a room of 10,000.
        public var presenceListMax = 200
        /// Changes each author can take back (0: no undo), and authors a session remembers
        /// changes of (the one idle longest is forgotten first): see `UndoHistory`.
        public var undoDepth = 50
        public var undoAuthors = 256
        /// The Unix time in milliseconds minus the inputs' `now` (a monotonic clock), as the hub
        /// read both once: an order stamps each event it commits with `now` plus this
        /// (`TableEvent.time`), with no clock read of its own per change. `nil`: events carry no
        /// time (cores under test that compare bytes).
        public var unixOffsetMs: Int64?

        public init() {}
    }

    /// What follows a change once it is ordered.
    public private(set) var room: SessionRoom
    /// Who orders the session's changes.
    public private(set) var order: any SessionOrder

    /// A session holding `table`, fully committed, with `recent` (committed events up to
    /// `table.seq`, oldest first) available for resume; or, for a session opened from a broker,
    /// `history` (the events saved with its snapshot): only its consecutive run ending at
    /// `table.seq` is kept, so resume never skips an event. `checkpointSeq`: the seq of the
    /// stored checkpoint or snapshot (default: `table.seq`). `savedViews`: the private views
    /// stored with the session, given back to their users when they join.
    public init(
        name: String, epoch: String, table: Table, recent: [LoggedEvent] = [], history: [HistoryEntry] = [], checkpointSeq: UInt64? = nil,
        savedViews: SavedViews = SavedViews(), settings: Settings, order: any SessionOrder = LocalOrder()
    ) {
        room = SessionRoom(
            name: name, epoch: epoch, table: table, recent: recent, history: history, savedViews: savedViews, settings: settings)
        self.order = order
        self.order.open(&room, checkpointSeq: checkpointSeq ?? table.seq)
    }

    public var name: String { room.name }
    public var epoch: String { room.epoch }
    public var settings: Settings { room.settings }
    /// The table as it is durable: what members see.
    public var committed: Table { room.committed }
    /// ``committed`` with its change-id window: what a checkpoint, a snapshot or a session
    /// written out saves, so that a retry after a reload is acknowledged, not applied again.
    public var committedWithChangeIds: Table { order.savedTable(room) }
    public var memberCount: Int { room.memberCount }
    /// Members of the session on every node: this node's and those other nodes share.
    public var clusterMemberCount: Int { room.clusterMemberCount }
    /// This node's members as it shares them with other nodes.
    public var localPresence: (count: Int, first: [Author]) { room.localPresence }
    /// Sections members were told are busy.
    public var busySections: Set<String> { room.busySections }
    /// The committed events kept for resume, oldest first.
    public var recentHistory: [HistoryEntry] { room.recentHistory }
    /// True when nothing is waiting, in flight or streaming: the session may be put away.
    public var isQuiet: Bool { room.isQuiet && order.isQuiet }
    /// Whether changes wait for ``SessionInput/handOver`` to go to the log.
    public var awaitsHandOver: Bool { order.awaitsHandOver }
    /// Whether a read reaching the stream's end settles anything.
    public var waitsForCatchUp: Bool { order.waitsForCatchUp }
    /// Committed events not yet covered by a checkpoint or snapshot.
    public var eventsSinceCheckpoint: UInt64 { order.eventsSinceCheckpoint(room) }
    /// What saving the session now writes (a checkpoint, or a snapshot): see ``SessionOrder/save(_:)``.
    public var save: SessionEffect { order.save(room) }

    /// Notes that a checkpoint of `committed` at `seq` was taken by the driver itself (on eviction).
    public mutating func checkpointTaken(at seq: UInt64) { order.checkpointTaken(at: seq) }

    /// Token users' private views, to store with the session, and which change of them they are.
    public var savedViews: (views: SavedViews, revision: UInt64) { (SavedViews(room.savedViews), room.viewsRevision) }
    /// Whether the order keeps private views with the session and they changed since the store
    /// last reported holding them: then a save writes them, even with no event to checkpoint.
    /// (A crash loses what changed since; a clean eviction or stop saves them.)
    public var viewsUnsaved: Bool { order.keepsViews && room.viewsRevision != room.viewsStoredRevision }
    /// The store holds the views as of `revision` (``savedViews``).
    public mutating func viewsStored(revision: UInt64) { room.viewsStoredRevision = max(room.viewsStoredRevision, revision) }

    /// Takes one input; returns what to do, in order.
    public mutating func handle(_ input: SessionInput, now: UInt64) -> [SessionEffect] {
        var effects: [SessionEffect] = []
        // A change makes two (accepted, persist), its commit two or more (broadcast, ack):
        // one allocation instead of growing from one.
        effects.reserveCapacity(4)
        handle(input, now: now, into: &effects)
        return effects
    }

    /// Takes one input; appends what to do, in order, to `effects` (a driver's buffer, reused
    /// from input to input so that no input allocates an array of effects).
    public mutating func handle(_ input: SessionInput, now: UInt64, into effects: inout [SessionEffect]) {
        room.now = now
        switch input {
        case .change(let change, let id, let connection):
            if order.holdsChange(change, id: id, from: connection) { break }
            guard let author = room.author(of: connection) else { break }
            // In a private view, collapsing and expanding change what this member sees only.
            if change.isCollapseOnly && room.isPrivate(connection) {
                room.changeView(change, id: id, of: connection, now: now, into: &effects)
                break
            }
            order.submit(
                ChangeRequest(change: change, id: id, author: author, origin: .member(connection), scope: room.scope(of: connection)), &room,
                into: &effects)
        case .privateChange(let change, let id, let connection):
            if room.isPrivate(connection) {
                room.changeView(change, id: id, of: connection, now: now, into: &effects)
            } else if room.isMember(connection) {
                let refusal = ProtocolError(.forbidden, "a viewer cannot change the table; switch to your own view to collapse for yourself")
                effects.append(.refuse(connection, refusal, id: id.map(ChangeIdScope.id(ofKey:))))
            }
        case .undo(let redo, let id, let connection):
            let request = Change.undo(.request(redo: redo))
            if order.holdsChange(request, id: id, from: connection) { break }
            guard let author = room.author(of: connection) else { break }
            order.submit(
                ChangeRequest(change: request, id: id, author: author, origin: .member(connection), scope: room.scope(of: connection)), &room,
                into: &effects)
        case .view(let isPrivate, let collapsed, let connection):
            room.setView(isPrivate ? (collapsed ?? []) : nil, of: connection, now: now, into: &effects)
        case .apiChange(let change, let id, let author, let request):
            order.submit(ChangeRequest(change: change, id: id, author: author, origin: .api(request)), &room, into: &effects)
        case .join(let connection, let request, let role, let scope):
            if !order.holdsJoin(connection, request, role: role, scope: scope, room) {
                room.join(connection, request, role: role, scope: scope, now: now, into: &effects)
            }
        case .leave(let connection):
            order.forget(connection)
            room.leave(connection, into: &effects)
        case .rename(let connection, let name): room.rename(connection, to: name, into: &effects)
        case .streamDelivered(let section, let seq, let connection): room.delivered(section, seq: seq, to: connection, into: &effects)
        case .streamFlushed(let section, let seq, let connection): room.flushed(section, seq: seq, to: connection, into: &effects)
        case .timer(let timer): room.fire(timer, now: now, into: &effects)
        case .find(let query, let limit, let id, let connection): room.find(query, limit: limit, id: id, from: connection, into: &effects)
        case .remotePresence(let nodes): room.remotePresence(nodes, into: &effects)
        case .handOver, .committed, .commitFailed, .sequenced, .appendFailed, .appended, .caughtUp, .brokerAvailable, .reload:
            order.handle(input, &room, into: &effects)
        }
        // Until nothing more is freed: a drain may end a stream in turn (one nobody is left to take).
        while room.mayDrain {
            room.mayDrain = false
            order.drain(&room, into: &effects)
        }
    }
}
