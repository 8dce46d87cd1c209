import FoldtableCore

/// The decisions of one shared table, as a pure state machine: inputs in, effects out.
///
/// No I/O, no clock (every input carries `now`), no transport: a `TableSession` performs the
/// effects. That is what lets a log sit between deciding a change and its effects:
///
/// - `head` is the sequencer. A change is validated and applied to it at once, so the next
///   change sees it, and its event goes to the log (`persist`): at once, or with the other
///   changes of its read at `handOver` (``Settings/handsOverAtOnce``).
/// - `committed` is what members see. An event is applied to it, broadcast, remembered for resume
///   and acknowledged only when the log reports it durable (`committed`). Welcomes, resumes and
///   row streams all come from `committed`, so nobody ever sees a change the log could still lose.
/// - When an append fails, `head` goes back to `committed` and every author of a lost change
///   gets `storage_unavailable`: nothing is half-applied.
///
/// Changes touching a section whose rows are streaming (or about to, when an uncommitted event
/// expands it) wait in arrival order, and every change behind a waiting one waits too, so the
/// session keeps one order and no member gets rows of a stale expansion.
public struct SessionCore {
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
        /// Joins, leaves and renames within this many milliseconds go to members as one
        /// `presence` diff (0: each at once, still one message per member per change).
        public var presenceIntervalMs: UInt64 = 100
        /// Members a session lists by name; past it, welcomes list this many and diffs carry the
        /// count and a sample, so presence costs no more per member in a room of 10,000.
        public var presenceListMax = 200

        public init() {}
    }

    /// Who orders a session's changes.
    public enum Sequencing: Sendable, Equatable {
        /// This core (one node): changes are applied to `head` at once and the log confirms.
        case local
        /// The session's stream, shared by several nodes (a ``Broker``): a change is appended as
        /// a request, and every node applies the requests it reads in stream order to
        /// `committed`, so all produce the same events, refusals and seqs. `node` names this
        /// node in authors (`<node>.c<connection>`); `origin` (default: `node`) in request
        /// origins, where it must be unique to this core: request numbers start at 1 with each
        /// core, and a late entry of an earlier core must not be taken for one of this core's.
        case stream(node: String, origin: String? = nil)
    }

    public let name: String
    /// Names this incarnation of the session's history; a stream-ordered session gets a new one
    /// when it reloads from a broker that lost what it had applied (``SessionInput/reload(epoch:table:position:history:)``).
    public private(set) var epoch: String
    public let settings: Settings
    public let sequencing: Sequencing
    /// The table with every change applied, committed or not: what new changes are checked against.
    /// Unused by a stream-ordered session (empty there): the stream is its sequencer.
    public private(set) var head: Table
    /// The table as the log has made it durable: what members see. A local session's keeps no
    /// change-id window (the head's holds the ids): what is saved is ``committedWithChangeIds``.
    public private(set) var committed: Table
    /// ``committed`` with its change-id window, the newest ids at or before its seq (a local
    /// session's read from the head, without copying it): what a checkpoint or a session
    /// written out saves, so that a retry after a reload is acknowledged, not applied again.
    public var committedWithChangeIds: Table {
        sequencing == .local ? committed.withChangeIds(of: head) : committed
    }

    private struct Member {
        let connection: Connection
        var author: Author
        /// The role told in its welcome (`nil` in open mode), told again in a fresh one.
        let role: String?
        /// Sections whose row streams this member is in.
        var streams: Set<String> = []
        /// Sections whose complete rows this member holds: given in its welcome, delivered by a
        /// stream or sent with an expansion. Clients keep complete rows while a section is
        /// collapsed and events keep them current, so expanding it again sends only the event.
        /// Empty for most members most of the time, so it costs nothing per idle member.
        var held: Set<String> = []
    }
    private var members = ConnectionMap<Member>()
    /// Member connections in join order: the broadcast list, changed on join and leave only.
    private(set) var connections: [Connection] = []

    /// Who asked for a change, to be answered: a member over its connection, or a caller of the
    /// HTTP API by its request number.
    private enum Origin {
        case member(Connection)
        case api(UInt64)
    }

    /// A change applied to `head` and waiting for the log. Its event and encoding are the log's
    /// (in `unpersisted`, then `persisting`): held once, not copied per change.
    private struct InFlight {
        var seq: UInt64
        /// The head's id-window digest of the request (`nil` without a change id): the committed
        /// replica takes it instead of encoding the request again.
        var requestDigest: UInt64?
        /// Who to answer when it commits or fails (`nil`: a member that has left).
        var author: Origin?
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
    private var waitingAcks: [UInt64: [(origin: Origin, id: String)]] = [:]
    /// Sections expanded by events in flight, with how many: their streams have not started yet,
    /// but changes touching them must wait as if they had.
    private var expandingInFlight: [String: Int] = [:]

    private struct Pending {
        var change: Change
        var id: String?
        var author: Author
        var origin: Origin
    }
    private var pending: [Pending] = []
    private var pendingStart = 0

    /// The last committed events, encoded, for resume (a ring). Their bytes, not the message
    /// that was broadcast: that one holds the transport's frame, which then went back to the
    /// transport's pool only when the event left history, 300 events later: a thousand busy
    /// sessions' histories held 300,000 frames, and the pool cycled through them cold. The
    /// first resume that needs an event makes a message of it, and later resumes share it.
    private var history: [Remembered] = []

    /// One event kept for resume.
    private struct Remembered {
        var seq: UInt64
        var bytes: [UInt8]
        /// The event's ``TableEvent/sectionsNeedingRows``.
        var expanded: [String]
        /// The message resumes send, once one needed it: a storm of reconnects then sends each
        /// missed event as one shared frame, not a copy per member.
        var message: OutboundMessage?
    }
    private var historyStart = 0

    private struct Stream {
        let seq: UInt64
        /// Members still receiving rows, with when they joined the stream (ms).
        var members: [UInt64: (connection: Connection, joinedAt: UInt64)] = [:]
        var busyShown = false
        var busyArmed = false
        var deadlineArmed = false
    }
    private var streams: [String: Stream] = [:]
    /// Sections members were told are busy.
    public private(set) var busySections: Set<String> = []
    /// `committed.seq` at the last checkpoint asked for.
    private var checkpointSeq: UInt64
    /// How many events before `checkpointEvents` the next checkpoint comes (see
    /// ``Settings/staggersCheckpoints``): set from the name when the core is made, 0 after the
    /// first checkpoint.
    private var checkpointStagger: UInt64 = 0

    /// Presence changes since the last diff: who joined (connection ids, in order), who was
    /// renamed, the client ids of who left.
    private var presenceJoined: [UInt64] = []
    private var presenceRenamed: [UInt64] = []
    private var presenceLeft: [String] = []
    private var presenceArmed = false
    /// Whether members may hold an exact list: false once the session went past the threshold
    /// or a welcome listed only part of it, until a diff sends the whole list again.
    private var presenceListExact = true
    /// A shared session: the members other nodes hold (by node id, sorted), as they share them,
    /// and how many in all. Only what a node shares is kept: its count and its first
    /// `presenceListMax` members, so a session of 10,000 costs each node no more than 200 per node.
    private var remote: [NodePresence] = []
    private var remoteCount = 0
    /// Whether every other node listed all its members (false past a node's own list maximum).
    private var remoteExact = true
    /// Members of other nodes who joined or were renamed since the last diff; who left goes to
    /// `presenceLeft` like a local leave. `presenceRemoteCounted`: the count changed without a
    /// name to show for it (past the threshold, or only in another node's count).
    private var presenceRemoteJoined: [Author] = []
    private var presenceRemoteRenamed: [Author] = []
    private var presenceRemoteCounted = false

    /// Stream-ordered sessions only (see ``Sequencing``): this node's requests appended (or
    /// being appended) and not applied yet, by origin number, with who to answer.
    private var awaiting: [UInt64: Awaiting] = [:]

    private struct Awaiting {
        var origin: Origin
        var id: String?
        /// ``Table/digest(_:)`` of the change, with an id: tells it from another change with the
        /// same id when its outcome is read from the change-id window (0 without an id).
        var digest: UInt64
        /// The committed seq when it was appended: if the order applied it, it is after this.
        var after: UInt64
        /// Where the append put it, once its reply came.
        var position: String?
    }

    /// What became of a request of this node's that no read will deliver.
    private enum Outcome {
        case applied(seq: UInt64)
        case notApplied(ProtocolError)
        case unknown
    }

    /// Whether changes may be appended: false while the broker is unavailable (read-only).
    private var writable = true
    /// Requests whose append failed with an unknown outcome, with how many more reads to the
    /// stream's end they wait for their entry before their author is told it failed.
    private var uncertain: [UInt64: Int] = [:]
    private var requestsMade: UInt64 = 0
    /// Requests read from the stream, waiting in stream order (behind busy sections).
    private var sequencedPending: [SequencedRequest] = []
    private var sequencedStart = 0
    /// The stream position of the last request applied ("" before any).
    public private(set) var appliedPosition = ""
    /// Joins resuming from a `since` this node has not applied yet (the member saw it on a node
    /// whose reader was ahead), in arrival order, with how many more reads to the stream's end
    /// they wait for it, and the changes their members sent meanwhile.
    private var joinsWaiting: [WaitingJoin] = []

    private struct WaitingJoin {
        let connection: Connection
        let request: JoinRequest
        let role: String?
        var reads: Int
        var changes: [(change: Change, id: String?)] = []
    }
    /// The `now` of the input being handled, for work started by a drain.
    private var now: UInt64 = 0

    /// A session holding `table`, fully committed, with `recent` (committed events up to
    /// `table.seq`, oldest first) available for resume; or, for a session opened from a broker,
    /// `history` (the events saved with its snapshot): only its consecutive run ending at
    /// `table.seq` is kept, so resume never skips an event.
    public init(
        name: String, epoch: String, table: Table, recent: [LoggedEvent] = [], history: [HistoryEntry] = [], checkpointSeq: UInt64? = nil,
        settings: Settings, sequencing: Sequencing = .local
    ) {
        self.name = name
        self.epoch = epoch
        self.settings = settings
        self.sequencing = sequencing
        // A stream-ordered session applies to `committed` only; an empty head holds no copy.
        self.head = sequencing == .local ? table : Table(options: table.options, limits: table.limits)
        self.committed = table
        // A local session looks change ids up in `head` only, and its committed table keeps no
        // id window of its own: it is read from the head's when saved (`committedWithChangeIds`)
        // or when a rollback makes it the head again. One ring per session, not two. A
        // stream-ordered session's committed table is its sequencer and keeps its own.
        if sequencing == .local {
            committed.stopKeepingChangeIds()
            head.changeIdsCommitted(through: table.seq)
        }
        self.checkpointSeq = checkpointSeq ?? table.seq
        if settings.staggersCheckpoints, sequencing == .local {
            checkpointStagger = Self.stagger(name: name, checkpointEvents: settings.checkpointEvents)
        }
        for logged in recent.suffix(settings.historyEvents) where logged.event.seq <= table.seq {
            remember(logged.event.seq, ServerMessage.event(logged.event), expanded: logged.event.sectionsNeedingRows)
        }
        remember(history, upTo: table.seq)
    }

    /// Keeps for resume the run of consecutive seqs of `history` that ends at `seq`.
    private mutating func remember(_ history: [HistoryEntry], upTo seq: UInt64) {
        // The run of consecutive seqs ending at `seq`, counted from the end.
        var run = 0
        for entry in history.reversed() {
            guard UInt64(run) < seq, entry.seq == seq - UInt64(run) else { break }
            run += 1
        }
        for entry in history.suffix(min(run, settings.historyEvents)) {
            remember(entry.seq, entry.message, expanded: entry.expanded)
        }
    }

    public var memberCount: Int { members.count }
    /// Members of the session on every node: this node's and those other nodes share.
    public var clusterMemberCount: Int { members.count + remoteCount }
    /// This node's members as it shares them with other nodes: how many, and the first
    /// `presenceListMax` in join order.
    public var localPresence: (count: Int, first: [Author]) {
        (members.count, connections.prefix(settings.presenceListMax).compactMap { members[$0.id]?.author })
    }
    /// True when nothing is waiting, in flight or streaming: the session may be put away.
    public var isQuiet: Bool {
        members.isEmpty && inFlight.isEmpty && unpersisted.isEmpty && pending.count == pendingStart && streams.isEmpty && streamQuiet
    }
    /// Whether changes applied to `head` wait for ``SessionInput/handOver`` to go to the log
    /// (only with ``Settings/handsOverAtOnce`` off).
    public var awaitsHandOver: Bool { !unpersisted.isEmpty }
    /// Committed events not yet covered by a checkpoint.
    public var eventsSinceCheckpoint: UInt64 { committed.seq - checkpointSeq }

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
        self.now = now
        switch input {
        case .join(let connection, let request, let role):
            if !waitForStream(connection, request, role: role) { join(connection, request, role: role, now: now, into: &effects) }
        case .leave(let connection):
            if let index = joinsWaiting.firstIndex(where: { $0.connection == connection }) { joinsWaiting.remove(at: index) }
            leave(connection, into: &effects)
        case .rename(let connection, let name): rename(connection, to: name, into: &effects)
        case .change(let change, let id, let connection):
            if let index = joinsWaiting.firstIndex(where: { $0.connection == connection }) {
                joinsWaiting[index].changes.append((change, id))
                break
            }
            guard let member = members[connection.id] else { break }
            submit(Pending(change: change, id: id, author: member.author, origin: .member(connection)), into: &effects)
        case .apiChange(let change, let id, let author, let request):
            submit(Pending(change: change, id: id, author: author, origin: .api(request)), into: &effects)
        case .handOver: handOver(into: &effects)
        case .committed(let generation, let seq): commit(generation: generation, through: seq, now: now, into: &effects)
        case .commitFailed(let generation, let error): rollBack(generation: generation, error, into: &effects)
        case .streamDelivered(let section, let seq, let connection): delivered(section, seq: seq, to: connection, into: &effects)
        case .timer(let timer): fire(timer, now: now, into: &effects)
        case .find(let query, let limit, let id, let connection):
            // Committed rows only, like everything members see.
            guard members.contains(connection.id) else { break }
            effects.append(.find(query: query, in: committed, limit: limit, id: id, to: connection))
        case .sequenced(let requests): receive(requests, into: &effects)
        case .appendFailed(let number, let error): appendFailed(number, error, into: &effects)
        case .appended(let number, let position): awaiting[number]?.position = position
        case .caughtUp(let through): caughtUp(through: through, into: &effects)
        case .brokerAvailable(let available): writable = available
        case .reload(let epoch, let table, let position, let history):
            reload(epoch: epoch, table: table, position: position, history: history, now: now, into: &effects)
        case .remotePresence(let nodes): remotePresence(nodes, into: &effects)
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

    /// Notes that a checkpoint of `committed` at `seq` was asked for by the driver itself (on eviction).
    public mutating func checkpointTaken(at seq: UInt64) { checkpointSeq = max(checkpointSeq, seq) }

    // MARK: - Membership

    private mutating func join(_ connection: Connection, _ request: JoinRequest, role: String?, now: UInt64, into effects: inout [SessionEffect]) {
        guard !members.contains(connection.id) else { return }
        let author = Author(client: clientID(of: connection), name: request.name)
        members[connection.id] = Member(connection: connection, author: author, role: role)
        connections.append(connection)
        let presence = listedMembers()
        if presence.count < clusterMemberCount { presenceListExact = false }
        if let since = request.since, request.epoch == epoch, let missed = events(after: since) {
            effects.append(
                .send(
                    OutboundMessage(
                        ServerMessage.resume(
                            session: name, client: author, epoch: epoch, seq: committed.seq, presence: presence, presenceCount: clusterMemberCount,
                            role: role)),
                    to: connection))
            for key in busySections.sorted() {
                effects.append(.send(OutboundMessage(ServerMessage.busy(section: key, busy: true)), to: connection))
            }
            var expanded: Set<String> = []
            for event in missed {
                effects.append(.send(event.message, to: connection))
                expanded.formUnion(event.expanded)
            }
            for section in committed.sections where expanded.contains(section.key) && !section.collapsed {
                stream(section, to: connection, now: now, into: &effects)
            }
        } else {
            welcome(
                connection, author: author, presence: presence, recovered: request.since == nil ? nil : false, role: role, now: now, into: &effects)
        }
        presenceJoined.append(connection.id)
        presenceChanged(into: &effects)
    }

    /// The whole committed table to one member (rows inline while the budgets last, the rest
    /// streamed), with the presence list.
    private mutating func welcome(
        _ connection: Connection, author: Author, presence: [Author], recovered: Bool?, role: String?, now: UInt64,
        into effects: inout [SessionEffect]
    ) {
        // Rows go inline while both budgets last (rows, and bytes: the welcome is one frame).
        var rowBudget = settings.welcomeRowBudget
        var byteBudget = settings.welcomeByteBudget
        var inline: Set<String> = []
        var later: [Section] = []
        for section in committed.sections where !section.collapsed {
            let bytes = section.rows.count <= rowBudget ? RowStream.estimatedBytes(section.rows[...]) : Int.max
            if streams[section.key] == nil && section.rows.count <= rowBudget && bytes <= byteBudget {
                rowBudget -= section.rows.count
                byteBudget -= bytes
                inline.insert(section.key)
            } else {
                later.append(section)
            }
        }
        let busy = busySections
        let snapshot = TableSnapshot(committed, rows: .sections(inline), busy: { busy.contains($0) })
        let welcome = ServerMessage.welcome(
            session: name, client: author, epoch: epoch, snapshot: snapshot, presence: presence, presenceCount: clusterMemberCount,
            recovered: recovered, role: role)
        effects.append(.send(OutboundMessage(welcome), to: connection))
        members[connection.id]?.held = inline
        for section in later { stream(section, to: connection, now: now, into: &effects) }
    }

    private mutating func leave(_ connection: Connection, into effects: inout [SessionEffect]) {
        guard let member = members.removeValue(forKey: connection.id) else { return }
        if let index = connections.firstIndex(of: connection) { connections.remove(at: index) }
        for key in member.streams.sorted() {
            effects.append(.leaveStream(section: key, member: connection))
            streams[key]?.members[connection.id] = nil
            finishIfDone(key, into: &effects)
        }
        presenceLeft.append(member.author.client)
        presenceChanged(into: &effects)
        drainPending(into: &effects)
    }

    private mutating func rename(_ connection: Connection, to name: String, into effects: inout [SessionEffect]) {
        guard members.contains(connection.id) else { return }
        members[connection.id]?.author.name = name
        presenceRenamed.append(connection.id)
        presenceChanged(into: &effects)
    }

    /// A join, leave or rename happened: the diff goes out now or when the interval ends.
    private mutating func presenceChanged(into effects: inout [SessionEffect]) {
        if !presenceComplete { presenceListExact = false }
        if settings.presenceIntervalMs == 0 {
            flushPresence(into: &effects)
        } else if !presenceArmed {
            presenceArmed = true
            effects.append(.armTimer(.presence, milliseconds: settings.presenceIntervalMs))
        }
    }

    /// Sends one diff of what changed since the last to every member.
    private mutating func flushPresence(into effects: inout [SessionEffect]) {
        presenceArmed = false
        defer {
            presenceJoined.removeAll()
            presenceRenamed.removeAll()
            presenceLeft.removeAll()
            presenceRemoteJoined.removeAll()
            presenceRemoteRenamed.removeAll()
            presenceRemoteCounted = false
        }
        guard !connections.isEmpty,
            !(presenceJoined.isEmpty && presenceRenamed.isEmpty && presenceLeft.isEmpty && presenceRemoteJoined.isEmpty
                && presenceRemoteRenamed.isEmpty && !presenceRemoteCounted)
        else { return }
        // Someone who joined and left within the interval is not listed as joined, but as left:
        // a welcome sent meanwhile may have listed them.
        let joined = presenceJoined.compactMap { members[$0]?.author } + presenceRemoteJoined
        let diff: PresenceDiff
        if !presenceComplete {
            diff = PresenceDiff(count: clusterMemberCount, complete: false, joined: Array(joined.prefix(PresenceDiff.sampleLimit)))
        } else if !presenceListExact {
            presenceListExact = true
            diff = PresenceDiff(count: clusterMemberCount, complete: true, members: listedMembers())
        } else {
            let fresh = Set(presenceJoined)
            var seen: Set<UInt64> = []
            let renamed = presenceRenamed.filter { !fresh.contains($0) && seen.insert($0).inserted }.compactMap { members[$0]?.author }
            diff = PresenceDiff(
                count: clusterMemberCount, complete: true, joined: joined, renamed: renamed + presenceRemoteRenamed, left: presenceLeft)
        }
        effects.append(.broadcast(OutboundMessage(diff.encoded), to: connections))
    }

    // MARK: - Changes

    private mutating func submit(_ change: Pending, into effects: inout [SessionEffect]) {
        if case .stream(let node, let origin) = sequencing { return appendRequest(change, node: origin ?? node, into: &effects) }
        guard pending.count - pendingStart < settings.maxPendingChanges else {
            refuse(
                change.origin, ProtocolError(.limitReached, "the session has too many changes waiting; retry shortly"), id: change.id, into: &effects)
            return
        }
        if pendingStart == pending.count && !mustWait(change.change) {
            // Nothing waits ahead of it (almost always): applied from here, not copied into the
            // queue and out again. Its origin is present: every caller just checked.
            // A member's change may wait for the rest of its burst (`handOver`); an API one never.
            var waits = !settings.handsOverAtOnce
            if case .api = change.origin { waits = false }
            apply(change, originPresent: true, into: &effects)
            if !waits { handOver(into: &effects) }
            return
        }
        pending.append(change)
        drainPending(into: &effects)
    }

    /// `origin` if it can still be answered: API callers always, members while they are here.
    private func present(_ origin: Origin) -> Origin? {
        if case .member(let connection) = origin, !members.contains(connection.id) { return nil }
        return origin
    }

    /// `id`: the change's key (``ChangeIdScope``); the reply names the id as its author sent it.
    private func refuse(_ origin: Origin, _ error: ProtocolError, id: String?, into effects: inout [SessionEffect]) {
        switch present(origin) {
        case .member(let connection)?: effects.append(.refuse(connection, error, id: id.map(ChangeIdScope.id(ofKey:))))
        case .api(let request)?: effects.append(.answer(request: request, .failure(error)))
        case nil: break
        }
    }

    /// Change `id` (when the author gave one; its key, ``ChangeIdScope``) is durable as event `seq`:
    /// the ack names the id as its author sent it.
    private func acknowledge(_ origin: Origin, id: String?, seq: UInt64, into effects: inout [SessionEffect]) {
        switch present(origin) {
        case .member(let connection)?: if let id { effects.append(.ack(connection, id: ChangeIdScope.id(ofKey: id), seq: seq)) }
        case .api(let request)?: effects.append(.answer(request: request, .success(seq)))
        case nil: break
        }
    }

    /// Whether the head's section `key` is expanded and too large for one chunk: its rows, once
    /// an event expanding it commits, will stream. Read in place, without a copy of the section.
    private func willStream(_ key: String) -> Bool {
        guard let position = head.position(ofSection: key) else { return false }
        return !head.sections[position].collapsed && !fitsOneChunk(head.sections[position])
    }

    private func mustWait(_ change: Change) -> Bool {
        guard !streams.isEmpty || !expandingInFlight.isEmpty else { return false }
        switch head.scope(of: change) {
        case .table: return true
        case .sections(let keys): return keys.contains { streams[$0] != nil || expandingInFlight[$0] != nil }
        }
    }

    /// Applies waiting changes to `head` in order until one must wait, then hands the new events
    /// to the log in one append.
    private mutating func drainPending(into effects: inout [SessionEffect]) {
        if case .stream = sequencing { return drainSequenced(into: &effects) }
        while pendingStart < pending.count {
            let next = pending[pendingStart]
            if mustWait(next.change) { break }
            pendingStart += 1
            apply(next, into: &effects)
        }
        Self.compact(&pending, start: &pendingStart)
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
    private mutating func apply(_ change: Pending, originPresent: Bool = false, into effects: inout [SessionEffect]) {
        let origin = originPresent ? change.origin : present(change.origin)
        let outcome: ApplyOutcome
        // The digest the head's id window keeps for the change id: the committed replica takes it.
        let digest: UInt64?
        do {
            (outcome, digest) = try head.applyGivingDigest(change.change, by: change.author, changeId: change.id)
        } catch {
            refuse(change.origin, error, id: change.id, into: &effects)
            return
        }
        // Consumed: the event is moved out of the outcome and into the log's entry, not copied.
        switch consume outcome {
        case .duplicate(let seq):
            guard let id = change.id, let origin else { return }
            if seq <= committed.seq {
                acknowledge(origin, id: id, seq: seq, into: &effects)
            } else {
                waitingAcks[seq, default: []].append((origin, id))
            }
        case .applied(let event):
            if case .member(let connection)? = origin { effects.append(.accepted(connection)) }
            let needingRows = event.sectionsNeedingRows
            // The head holds the section as it will be committed at this seq, so whether it fits
            // one chunk is known now; only sections that will stream make later changes wait.
            var streamed: [String] = []
            for key in needingRows where willStream(key) { streamed.append(key) }
            for key in streamed { expandingInFlight[key, default: 0] += 1 }
            // Encoded once, here: the same bytes go to the log and, once committed, to members.
            let encoded = ServerMessage.event(event)
            inFlight.append(InFlight(seq: event.seq, requestDigest: digest, author: origin, streams: streamed, needingRows: needingRows))
            unpersisted.append(LoggedEvent(event: consume event, request: change.id == nil ? nil : change.change, encoded: encoded))
        }
    }

    /// The log made events up to `seq` durable: they become visible, in order.
    private mutating func commit(generation: UInt64, through seq: UInt64, now: UInt64, into effects: inout [SessionEffect]) {
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
            publish(entries[done], batches[batch][persistingNext], now: now, into: &effects)
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
        if done > 0 && sequencing == .local { head.changeIdsCommitted(through: committed.seq) }
        checkpointIfDue(into: &effects)
        drainPending(into: &effects)
    }

    /// Drops the handled front of a queue (`start` is its first unhandled element) when that
    /// is all of it, or more than half of a long one: a queue never moves per element.
    private static func compact<Element>(_ queue: inout [Element], start: inout Int) {
        if start == queue.count {
            queue.removeAll(keepingCapacity: true)
            start = 0
        } else if start > 1_024 && start * 2 > queue.count {
            queue.removeFirst(start)
            start = 0
        }
    }

    /// Asks for a checkpoint (a snapshot, for a stream-ordered session) every
    /// `checkpointEvents` committed events.
    private mutating func checkpointIfDue(into effects: inout [SessionEffect]) {
        guard committed.seq - checkpointSeq + checkpointStagger >= UInt64(max(1, settings.checkpointEvents)) else { return }
        checkpointSeq = committed.seq
        checkpointStagger = 0
        if case .stream = sequencing {
            effects.append(.snapshot(committed, position: appliedPosition, history: recentHistory))
        } else {
            effects.append(.checkpoint(committedWithChangeIds))
        }
    }

    /// `logged`: the entry's event as the log got it.
    private mutating func publish(_ entry: borrowing InFlight, _ logged: borrowing LoggedEvent, now: UInt64, into effects: inout [SessionEffect]) {
        do {
            try committed.applyCommitted(logged.event, requestDigest: entry.requestDigest, verify: Self.verifiesReplica)
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
        announce(
            logged.event, message, author: entry.author, retries: retries, streamed: entry.streams, needingRows: entry.needingRows,
            into: &effects)
    }

    /// What follows once the committed table took `event` (from the log, or from a session's
    /// stream): members see it, history keeps it, its author (and retries of the same change)
    /// hear, and members lacking the rows of a section it expands get them: in a stream for the
    /// sections in `streamed` (`nil`: those too large for one chunk), else in one chunk.
    private mutating func announce(
        _ event: TableEvent, _ message: OutboundMessage, author: Origin?, retries: [(origin: Origin, id: String)] = [], streamed: [String]?,
        needingRows: [String]? = nil, into effects: inout [SessionEffect]
    ) {
        effects.append(.broadcast(message, to: connections))
        if case .addSection(let added) = event.change, let key = added.key {
            // Everyone now holds the new section whole: it has no rows yet.
            for connection in connections { members[connection.id]?.held.insert(key) }
        }
        for key in event.reloadedSections {
            // Its rows were replaced: nobody holds them any more.
            for connection in connections { members[connection.id]?.held.remove(key) }
        }
        // Computed once (when the event was applied, if it was here): a getter that builds an array.
        let needingRows = needingRows ?? event.sectionsNeedingRows
        remember(event.seq, message.bytes, expanded: needingRows)
        if let author { acknowledge(author, id: event.changeId, seq: event.seq, into: &effects) }
        for retry in retries {
            acknowledge(retry.origin, id: retry.id, seq: event.seq, into: &effects)
        }
        for key in needingRows {
            // Read in place: a copy of the section (`committed.section(_:)`) retains all its parts.
            guard let position = committed.position(ofSection: key) else { continue }
            // An empty section needs no rows: every client's row count for it is already 0.
            guard !committed.sections[position].collapsed, !committed.sections[position].rows.isEmpty else { continue }
            // Only members that lack the rows get them; the others already show them.
            let lacking = connections.filter { members[$0.id]?.held.contains(key) == false }
            guard !lacking.isEmpty else { continue }
            if streamed.map({ $0.contains(key) }) ?? !fitsOneChunk(committed.sections[position]) {
                startStream(committed.sections[position], seq: event.seq, to: lacking, now: now, into: &effects)
            } else {
                // One chunk, encoded once, right behind the event: nothing to pace or wait for.
                let rows = ServerMessage.rows(
                    section: key, seq: event.seq, from: 0, total: committed.sections[position].rows.count,
                    rows: committed.sections[position].rows[...], final: true)
                effects.append(.broadcast(OutboundMessage(rows), to: lacking))
                for connection in lacking { members[connection.id]?.held.insert(key) }
            }
        }
    }

    /// Whether a section's rows go in one chunk (then they are sent with the event that expands it).
    private func fitsOneChunk(_ section: Section) -> Bool {
        section.rows.count <= settings.chunkRows && RowStream.estimatedBytes(section.rows[...]) <= settings.chunkBytes
    }

    /// An append failed: every change not yet durable is lost, those still waiting for their
    /// hand-over too (they were decided on the lost head). `head` returns to `committed` and each
    /// author hears so; changes queued and not yet applied (`pending`) are tried again.
    private mutating func rollBack(generation: UInt64, _ error: StoreError, into effects: inout [SessionEffect]) {
        guard generation == self.generation else { return }
        self.generation += 1
        let refusal = ProtocolError(.storageUnavailable, "the change could not be stored; it was not applied, retry later")
        // The events of `inFlight`, in the same order: the rest of the appends, then what was not handed over.
        var events: [LoggedEvent] = []
        for (index, batch) in persisting.enumerated() { events += batch[(index == 0 ? persistingNext : 0)...] }
        events += unpersisted
        for (entry, logged) in zip(inFlight, events) {
            if let author = entry.author { refuse(author, refusal, id: logged.event.changeId, into: &effects) }
            for retry in waitingAcks.removeValue(forKey: entry.seq) ?? [] {
                refuse(retry.origin, refusal, id: retry.id, into: &effects)
            }
        }
        let lost = inFlight.count
        effects.append(.log(.warning, "commit_failed", { [("lost", String(lost)), ("reason", error.description)] }))
        inFlight.removeAll()
        unpersisted.removeAll()
        persisting.removeAll()
        persistingNext = 0
        expandingInFlight.removeAll()
        // The committed table with its ids: those of the lost changes are forgotten with them.
        head = committedWithChangeIds
        head.changeIdsCommitted(through: committed.seq)
        drainPending(into: &effects)
    }

    // MARK: - Row streams and busy state

    /// Streams an expanded section to `recipients` (the members that lack its rows).
    private mutating func startStream(
        _ section: Section, seq: UInt64, to recipients: [Connection], now: UInt64, into effects: inout [SessionEffect]
    ) {
        if let running = streams[section.key] {
            // Changes touching a streaming section wait, so this should not happen; if it does,
            // the newer expansion replaces the older stream and its members move over.
            effects.append(.endStream(section: section.key))
            if running.busyArmed { effects.append(.cancelTimer(.busy(section: section.key, seq: running.seq))) }
            if running.deadlineArmed { effects.append(.cancelTimer(.streamDeadline(section: section.key, seq: running.seq))) }
        }
        var stream = Stream(seq: seq)
        stream.busyShown = streams[section.key]?.busyShown ?? false
        for connection in recipients {
            stream.members[connection.id] = (connection, now)
            members[connection.id]?.streams.insert(section.key)
        }
        streams[section.key] = stream
        guard !recipients.isEmpty else {
            finishIfDone(section.key, into: &effects)
            return
        }
        // Busy first: with a threshold of 0 members hear it before the first chunk, not after.
        armBusyAndDeadline(section.key, now: now, into: &effects)
        effects.append(.startStream(section, seq: seq, to: recipients))
    }

    /// Streams an expanded section to one member: into the stream already under way, or a new
    /// one at the committed sequence number.
    private mutating func stream(_ section: Section, to connection: Connection, now: UInt64, into effects: inout [SessionEffect]) {
        members[connection.id]?.streams.insert(section.key)
        if let running = streams[section.key] {
            streams[section.key]?.members[connection.id] = (connection, now)
            effects.append(.joinStream(section: section.key, seq: running.seq, member: connection))
            return
        }
        var stream = Stream(seq: committed.seq)
        stream.members[connection.id] = (connection, now)
        streams[section.key] = stream
        armBusyAndDeadline(section.key, now: now, into: &effects)
        effects.append(.startStream(section, seq: committed.seq, to: [connection]))
    }

    private mutating func armBusyAndDeadline(_ key: String, now: UInt64, into effects: inout [SessionEffect]) {
        guard let stream = streams[key] else { return }
        let options = committed.options
        // A table with `showBusyIndicator` off gets no timer and no `busy`: only the deadline.
        if options.showBusyIndicator {
            if options.busyThresholdMs == 0 {
                showBusy(key, into: &effects)
            } else if !stream.busyShown && !stream.busyArmed {
                streams[key]?.busyArmed = true
                effects.append(.armTimer(.busy(section: key, seq: stream.seq), milliseconds: UInt64(options.busyThresholdMs)))
            }
        }
        armDeadline(key, now: now, into: &effects)
    }

    /// Members must take a stream's rows within `streamTimeoutMs` of joining it: changes to the
    /// section wait for the stream, so one member that stops reading must not hold the session.
    private mutating func armDeadline(_ key: String, now: UInt64, into effects: inout [SessionEffect]) {
        guard let stream = streams[key], !stream.deadlineArmed, let earliest = stream.members.values.map(\.joinedAt).min() else { return }
        let due = earliest + settings.streamTimeoutMs
        streams[key]?.deadlineArmed = true
        effects.append(.armTimer(.streamDeadline(section: key, seq: stream.seq), milliseconds: due > now ? due - now : 0))
    }

    private mutating func delivered(_ key: String, seq: UInt64, to connection: Connection, into effects: inout [SessionEffect]) {
        guard let stream = streams[key], stream.seq == seq, stream.members[connection.id] != nil else { return }
        streams[key]?.members[connection.id] = nil
        members[connection.id]?.streams.remove(key)
        members[connection.id]?.held.insert(key)
        finishIfDone(key, into: &effects)
    }

    private mutating func fire(_ timer: SessionTimer, now: UInt64, into effects: inout [SessionEffect]) {
        switch timer {
        case .busy(let key, let seq):
            guard let stream = streams[key], stream.seq == seq else { return }
            streams[key]?.busyArmed = false
            showBusy(key, into: &effects)
        case .presence:
            flushPresence(into: &effects)
        case .streamDeadline(let key, let seq):
            guard let stream = streams[key], stream.seq == seq else { return }
            streams[key]?.deadlineArmed = false
            for (id, member) in stream.members.sorted(by: { $0.key < $1.key }) where member.joinedAt + settings.streamTimeoutMs <= now {
                streams[key]?.members[id] = nil
                members[id]?.streams.remove(key)
                effects.append(.leaveStream(section: key, member: member.connection))
                effects.append(
                    .log(.info, "close", { [("client", "c\(id)"), ("code", String(CloseCode.slowConsumer)), ("reason", "row stream timeout")] }))
                effects.append(.close(member.connection, code: CloseCode.slowConsumer, reason: "too slow to take a row stream"))
            }
            if !finishIfDone(key, into: &effects) { armDeadline(key, now: now, into: &effects) }
        }
    }

    private mutating func showBusy(_ key: String, into effects: inout [SessionEffect]) {
        // `setOptions` waits for every stream, so the option cannot change under a running one;
        // checked here too so that no path can announce busy for a table that turned it off.
        guard let stream = streams[key], !stream.busyShown, committed.options.showBusyIndicator else { return }
        streams[key]?.busyShown = true
        busySections.insert(key)
        effects.append(.broadcast(OutboundMessage(ServerMessage.busy(section: key, busy: true)), to: connections))
        effects.append(.log(.info, "busy", { [("section", key)] }))
    }

    /// Ends the stream of `key` when no member is still receiving it; then waiting changes run.
    @discardableResult
    private mutating func finishIfDone(_ key: String, into effects: inout [SessionEffect]) -> Bool {
        guard let stream = streams[key], stream.members.isEmpty else { return false }
        streams[key] = nil
        effects.append(.endStream(section: key))
        if stream.busyArmed { effects.append(.cancelTimer(.busy(section: key, seq: stream.seq))) }
        if stream.deadlineArmed { effects.append(.cancelTimer(.streamDeadline(section: key, seq: stream.seq))) }
        if stream.busyShown {
            busySections.remove(key)
            effects.append(.broadcast(OutboundMessage(ServerMessage.busy(section: key, busy: false)), to: connections))
        }
        drainPending(into: &effects)
        return true
    }

    // MARK: - History

    private mutating func remember(_ seq: UInt64, _ bytes: [UInt8], expanded: [String]) {
        guard settings.historyEvents > 0 else { return }
        let remembered = Remembered(seq: seq, bytes: bytes, expanded: expanded)
        if history.count < settings.historyEvents {
            history.append(remembered)
        } else {
            history[historyStart] = remembered
            historyStart = (historyStart + 1) % history.count
        }
    }

    /// Whether the committed replica compares each event it reproduces with the head's: in debug
    /// builds (every test), not in release, where it cost about a tenth of a change's time.
    #if DEBUG
        static let verifiesReplica = true
    #else
        static let verifiesReplica = false
    #endif

    /// The committed events kept for resume, oldest first: what a snapshot saves with the table
    /// (``HistoryEntry``), so a node opening the session from it resumes members as this one would.
    public var recentHistory: [HistoryEntry] {
        (history[historyStart...] + history[..<historyStart]).map { HistoryEntry(seq: $0.seq, message: $0.bytes, expanded: $0.expanded) }
    }

    /// The committed events after `since` in order, as messages to send, or `nil` when history
    /// no longer reaches back. Makes the message of each event that has none yet, and keeps it.
    private mutating func events(after since: UInt64) -> [(message: OutboundMessage, expanded: [String])]? {
        guard since <= committed.seq else { return nil }
        let missing = Int(committed.seq - since)
        if missing == 0 { return [] }
        guard missing <= history.count else { return nil }
        var events: [(message: OutboundMessage, expanded: [String])] = []
        events.reserveCapacity(missing)
        for offset in (history.count - missing)..<history.count {
            let index = (historyStart + offset) % history.count
            let message = history[index].message ?? OutboundMessage(history[index].bytes)
            history[index].message = message
            events.append((message, history[index].expanded))
        }
        return events
    }
}

// MARK: - Stream-ordered sessions

extension SessionCore {
    /// Nothing appended and unapplied, nothing read and waiting.
    private var streamQuiet: Bool { awaiting.isEmpty && sequencedStart == sequencedPending.count && joinsWaiting.isEmpty }

    /// A resume from a `since` past what this node applied, of this session's epoch: the member
    /// saw it on another node whose reader was ahead. The join waits until this node applied
    /// it, or two reads to the stream's end (the second begun after the join) did not bring it
    /// (a `since` nobody reached): then it goes on, as a fresh welcome.
    private mutating func waitForStream(_ connection: Connection, _ request: JoinRequest, role: String?) -> Bool {
        guard case .stream = sequencing, let since = request.since, request.epoch == epoch, since > committed.seq,
            !members.contains(connection.id), !joinsWaiting.contains(where: { $0.connection == connection })
        else { return false }
        joinsWaiting.append(WaitingJoin(connection: connection, request: request, role: role, reads: 2))
        return true
    }

    /// Lets in the waiting joins whose `since` is applied now or whose reads are spent, in
    /// arrival order, then submits the changes their members sent meanwhile.
    private mutating func admitWaitingJoins(into effects: inout [SessionEffect]) {
        guard !joinsWaiting.isEmpty else { return }
        var still: [WaitingJoin] = []
        var admitted: [WaitingJoin] = []
        for waiting in joinsWaiting {
            if waiting.reads <= 0 || (waiting.request.since ?? 0) <= committed.seq { admitted.append(waiting) } else { still.append(waiting) }
        }
        joinsWaiting = still
        for waiting in admitted {
            join(waiting.connection, waiting.request, role: waiting.role, now: now, into: &effects)
            for sent in waiting.changes {
                guard let member = members[waiting.connection.id] else { break }
                submit(Pending(change: sent.change, id: sent.id, author: member.author, origin: .member(waiting.connection)), into: &effects)
            }
        }
    }

    /// Whether a read reaching the stream's end settles anything (``SessionInput/caughtUp(through:)``):
    /// this node has requests appended and not yet applied, or joins waiting for the stream.
    public var waitsForCatchUp: Bool { !awaiting.isEmpty || !joinsWaiting.isEmpty }

    /// Starts again from `table` at `position`: streams end, history is what the snapshot
    /// carries (`history`: resumes from before it get a fresh welcome), and every member gets a
    /// fresh welcome. In a new epoch the outcome of this core's waiting requests cannot be
    /// known: their authors are told they failed (a retry with the same change id is
    /// acknowledged if one landed after all).
    private mutating func reload(
        epoch: String, table: Table, position: String, history: [HistoryEntry], now: UInt64, into effects: inout [SessionEffect]
    ) {
        for (key, stream) in streams.sorted(by: { $0.key < $1.key }) {
            effects.append(.endStream(section: key))
            if stream.busyArmed { effects.append(.cancelTimer(.busy(section: key, seq: stream.seq))) }
            if stream.deadlineArmed { effects.append(.cancelTimer(.streamDeadline(section: key, seq: stream.seq))) }
        }
        streams.removeAll()
        busySections.removeAll()
        sequencedPending.removeAll()
        sequencedStart = 0
        let newEpoch = epoch != self.epoch
        let from = committed.seq
        let previous = self.epoch
        self.epoch = epoch
        committed = table
        appliedPosition = position
        checkpointSeq = table.seq
        self.history.removeAll()
        historyStart = 0
        remember(history, upTo: table.seq)
        let presence = listedMembers()
        for connection in connections {
            guard let member = members[connection.id] else { continue }
            members[connection.id]?.streams = []
            members[connection.id]?.held = []
            welcome(connection, author: member.author, presence: presence, recovered: nil, role: member.role, now: now, into: &effects)
        }
        // Requests the table now covers will never be read: the snapshot's position is at or
        // past theirs (in a new epoch, none of the old stream will be). Their outcome is in the
        // table's change-id window; answered after the welcome that shows it.
        let covered = awaiting.filter { newEpoch || $0.value.position.map { !StreamPosition.precedes(position, $0) } ?? false }
        for number in covered.keys.sorted() {
            guard let waiting = awaiting.removeValue(forKey: number) else { continue }
            uncertain[number] = nil
            settle(waiting, unread: Self.notAppended, into: &effects)
        }
        effects.append(
            .log(
                .warning, "session_reloaded",
                { [("from_seq", String(from)), ("seq", String(table.seq)), ("epoch_changed", epoch == previous ? "no" : "yes")] }))
    }

    /// The client id members are known by: node-qualified when several nodes share the session,
    /// or two nodes' `c5` would be one author.
    private func clientID(of connection: Connection) -> String {
        if case .stream(let node, _) = sequencing { return "\(node).c\(connection.id)" }
        return "c\(connection.id)"
    }

    /// A change becomes a request for the stream; only the order decides what it meets, so
    /// nothing is checked against the table here.
    private mutating func appendRequest(_ change: Pending, node: String, into effects: inout [SessionEffect]) {
        guard writable else {
            // Applying it here alone would fork the order: refused, as with a failed append.
            refuse(change.origin, Self.readOnly, id: change.id, into: &effects)
            return
        }
        guard awaiting.count < settings.maxPendingChanges else {
            refuse(
                change.origin, ProtocolError(.limitReached, "the session has too many changes waiting; retry shortly"), id: change.id, into: &effects)
            return
        }
        requestsMade += 1
        awaiting[requestsMade] = Awaiting(
            origin: change.origin, id: change.id, digest: change.id == nil ? 0 : Table.digest(change.change), after: committed.seq)
        let origin = RequestOrigin(node: node, number: requestsMade)
        effects.append(.append(SequencedRequest(change: change.change, id: change.id, author: change.author, origin: origin)))
    }

    private mutating func appendFailed(_ number: UInt64, _ error: BrokerError, into effects: inout [SessionEffect]) {
        guard let waiting = awaiting[number] else { return }
        if error.mayHaveRun {
            // Its entry may still come; two reads to the stream's end, the second begun after
            // this report, settle whether it landed.
            uncertain[number] = 2
            effects.append(.log(.warning, "append_uncertain", { [("reason", error.reason)] }))
            return
        }
        awaiting[number] = nil
        refuse(waiting.origin, Self.notAppended, id: waiting.id, into: &effects)
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

    /// A read reached the stream's end: requests of unknown outcome not seen by now did not land
    /// (a retry with the same change id is acknowledged with the original seq if one did after all).
    private mutating func caughtUp(through: String, into effects: inout [SessionEffect]) {
        if !joinsWaiting.isEmpty {
            for index in joinsWaiting.indices { joinsWaiting[index].reads -= 1 }
            admitWaitingJoins(into: &effects)
        }
        if sequencedStart == sequencedPending.count {
            // Everything read is applied: a request appended at or before `through` and still
            // waiting was dropped by every reader (its entry did not decode).
            // (Or a reload's snapshot covered it: ``settle(_:unread:into:)`` reads the window.)
            let dropped = awaiting.filter { $0.value.position.map { !StreamPosition.precedes(through, $0) } ?? false }.keys.sorted()
            for number in dropped {
                guard let waiting = awaiting.removeValue(forKey: number) else { continue }
                if settle(waiting, unread: Self.notReadBack, into: &effects) {
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
            settle(waiting, unread: Self.notAppended, into: &effects)
        }
    }

    /// Answers a request of this node's that no read will deliver: the committed table's
    /// change-id window says whether the order applied it (acknowledged with its seq), and, when
    /// it holds every id since the request was made, that it did not (`unread`, or `id_reused`
    /// when another change holds the id). Never "not applied" for a change that was: without an
    /// id, or with ids pushed out of the window since, the outcome is unknown and said so.
    /// Returns whether it was answered as not applied.
    @discardableResult
    private mutating func settle(_ waiting: Awaiting, unread: ProtocolError, into effects: inout [SessionEffect]) -> Bool {
        switch outcome(of: waiting, unread: unread) {
        case .applied(let seq):
            acknowledge(waiting.origin, id: waiting.id, seq: seq, into: &effects)
            return false
        case .notApplied(let error):
            refuse(waiting.origin, error, id: waiting.id, into: &effects)
            return true
        case .unknown:
            refuse(waiting.origin, Self.outcomeUnknown, id: waiting.id, into: &effects)
            return false
        }
    }

    private func outcome(of waiting: Awaiting, unread: ProtocolError) -> Outcome {
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

    private mutating func receive(_ requests: [SequencedRequest], into effects: inout [SessionEffect]) {
        sequencedPending.append(contentsOf: requests)
        drainSequenced(into: &effects)
    }

    /// Whether a request must wait: it touches a section whose rows are streaming.
    private func sequencedMustWait(_ change: Change) -> Bool {
        guard !streams.isEmpty else { return false }
        switch committed.scope(of: change) {
        case .table: return true
        case .sections(let keys): return keys.contains { streams[$0] != nil }
        }
    }

    /// Applies waiting requests in stream order until one must wait.
    private mutating func drainSequenced(into effects: inout [SessionEffect]) {
        let before = committed.seq
        while sequencedStart < sequencedPending.count {
            let next = sequencedPending[sequencedStart]
            if sequencedMustWait(next.change) { break }
            sequencedStart += 1
            applySequenced(next, into: &effects)
        }
        Self.compact(&sequencedPending, start: &sequencedStart)
        if committed.seq > before { admitWaitingJoins(into: &effects) }
        checkpointIfDue(into: &effects)
    }

    /// One request in stream order: the same event or refusal on every node; only its origin
    /// node answers the author.
    private mutating func applySequenced(_ request: SequencedRequest, into effects: inout [SessionEffect]) {
        var waiting: Awaiting?
        if case .stream(let node, let origin) = sequencing, request.origin.node == origin ?? node {
            waiting = awaiting.removeValue(forKey: request.origin.number)
            uncertain[request.origin.number] = nil
        }
        appliedPosition = request.position
        let outcome: ApplyOutcome
        do {
            outcome = try committed.apply(request.change, by: request.author, changeId: request.id)
        } catch {
            if let waiting { refuse(waiting.origin, error, id: request.id, into: &effects) }
            return
        }
        switch outcome {
        case .duplicate(let seq):
            if let waiting { acknowledge(waiting.origin, id: request.id, seq: seq, into: &effects) }
        case .applied(let event):
            if case .member(let connection)? = waiting.flatMap({ present($0.origin) }) { effects.append(.accepted(connection)) }
            announce(event, OutboundMessage(ServerMessage.event(event)), author: waiting?.origin, streamed: nil, into: &effects)
        }
    }
}

// MARK: - Presence across nodes

extension SessionCore {
    /// Whether members may hold every member's name: the whole cluster is within the list
    /// maximum and every other node listed all of its own.
    private var presenceComplete: Bool { clusterMemberCount <= settings.presenceListMax && remoteExact }

    /// Who a welcome or a full list names: this node's members in join order, then other nodes'
    /// (node by node, as they list them), at most `presenceListMax` in all.
    private func listedMembers() -> [Author] {
        var listed = localPresence.first
        for node in remote where listed.count < settings.presenceListMax {
            listed.append(contentsOf: node.members.prefix(settings.presenceListMax - listed.count))
        }
        return listed
    }

    /// Other nodes' members changed (a heartbeat read a new version, or a node expired or left):
    /// who joined, left or was renamed there goes into the next diff like a local change. Costs
    /// the names other nodes list (at most `presenceListMax` each), never the members they hold.
    private mutating func remotePresence(_ nodes: [NodePresence], into effects: inout [SessionEffect]) {
        var own = ""
        if case .stream(let node, _) = sequencing { own = node }
        let fresh = nodes.filter { $0.count > 0 && $0.node != own }.sorted { $0.node < $1.node }
        guard fresh != remote else { return }
        var before: [String: String] = [:]
        for node in remote {
            for author in node.members { before[author.client] = author.name }
        }
        var present: Set<String> = []
        var joined: [Author] = []
        var renamed = false
        for node in fresh {
            for author in node.members {
                present.insert(author.client)
                guard let name = before[author.client] else {
                    joined.append(author)
                    continue
                }
                guard name != author.name else { continue }
                renamed = true
                if let index = presenceRemoteJoined.firstIndex(where: { $0.client == author.client }) {
                    presenceRemoteJoined[index] = author
                } else {
                    presenceRemoteRenamed.removeAll { $0.client == author.client }
                    presenceRemoteRenamed.append(author)
                }
            }
        }
        var gone: [String] = []
        for node in remote {
            for author in node.members where !present.contains(author.client) { gone.append(author.client) }
        }
        let countBefore = remoteCount
        remote = fresh
        remoteCount = fresh.reduce(0) { $0 + $1.count }
        remoteExact = fresh.allSatisfy(\.isExact)
        presenceRemoteJoined.append(contentsOf: joined)
        if !gone.isEmpty {
            let left = Set(gone)
            presenceRemoteJoined.removeAll { left.contains($0.client) }
            presenceRemoteRenamed.removeAll { left.contains($0.client) }
            presenceLeft.append(contentsOf: gone)
        }
        let counted = remoteCount != countBefore
        if counted { presenceRemoteCounted = true }
        guard counted || renamed || !joined.isEmpty || !gone.isEmpty else { return }
        presenceChanged(into: &effects)
    }
}
