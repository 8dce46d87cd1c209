import FoldtableCore

/// What happens in a session after a change is ordered, the same whoever ordered it: members
/// and their welcomes, presence, row streams and busy sections, the history members resume
/// from, and the broadcast of every committed event. A pure state machine like the rest of the
/// ``SessionCore``: inputs carry `now`, effects come back in order.
///
/// `committed` is the table members see: an order applies an event to it (or has it applied)
/// and then `announce(_:_:author:retries:streamed:needingRows:into:)`s it. Welcomes, resumes
/// and row streams all come from `committed`, so nobody ever sees a change that is not durable.
///
/// Kept in three files by concern: this one (members, answers, broadcast, history),
/// `SessionRoom+Streams.swift` (row streams and busy) and `SessionRoom+Presence.swift`.
public struct SessionRoom {
    public let name: String
    /// Names this incarnation of the session's history; a stream order gives it a new one when
    /// it reloads from a broker that lost what it had applied.
    public internal(set) var epoch: String
    public let settings: SessionCore.Settings
    /// Qualifies members' client ids: `"<node>."` when several nodes share the session (or two
    /// nodes' `c5` would be one author), empty on one node. Set by the order when it opens.
    var clientPrefix = ""
    /// This node's id among the nodes sharing the session ("" on one node): its own entry in
    /// other nodes' presence is not another node's.
    var node = ""
    /// The table as it is durable: what members see.
    public internal(set) var committed: Table

    struct Member {
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
        /// Whose changes it makes (`ChangeIdScope`): what its undo and saved view belong to.
        let scope: String
        /// Its private view (section key -> collapsed), or `nil` in the shared view.
        var view: [String: Bool]?
    }
    var members = ConnectionMap<Member>()
    /// How many members are in a private view: events need a look at their views only then.
    var privateMembers = 0
    /// The private views of token users who left or reconnected (by scope, `u:<sub>`), to give
    /// back when they join again. See ``SessionRoom/setView(_:of:now:into:)``. Stored with the
    /// session by an order that keeps them (``SessionOrder/keepsViews``), see ``viewsRevision``.
    var savedViews: [String: [String: Bool]] = [:] {
        didSet { viewsRevision &+= 1 }
    }
    /// Counts changes to `savedViews`, so a save writes them only when they changed since the
    /// last one stored (``viewsStoredRevision``): a private toggle costs a count, not a write.
    private(set) var viewsRevision: UInt64 = 0
    /// The `viewsRevision` the store last reported it holds (the views the session was opened
    /// with: 0).
    var viewsStoredRevision: UInt64 = 0
    /// Every author's changes that can be undone here.
    var undo: UndoHistory
    /// Member connections in join order: the broadcast list, changed on join and leave only.
    private(set) var connections: [Connection] = []

    /// The last committed events, encoded, for resume (a ring). Their bytes, not the message
    /// that was broadcast: that one holds the transport's frame, which would go back to the
    /// transport's pool only when the event left history; a thousand busy sessions' histories
    /// held that many frames, and the pool cycled through them cold. The first resume that
    /// needs an event makes a message of it, and later resumes share it.
    private var history: [Remembered] = []
    private var historyStart = 0

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

    struct Stream {
        let seq: UInt64
        /// Members still receiving rows, with when they joined the stream (ms).
        var members: [UInt64: (connection: Connection, joinedAt: UInt64)] = [:]
        var busyShown = false
        var busyArmed = false
        var deadlineArmed = false
        /// Members that have every chunk queued while the section is busy, whose peers have not
        /// yet taken them all: busy lasts until they have (see `SessionRoom+Streams.swift`).
        var flushing: Set<UInt64> = []
        /// A stream for members catching up (a welcome, a resume, a private view), not for an
        /// expansion everyone sees: busy is told to its own members only, each of whom hears it
        /// end right behind its own last chunk. Others have the rows already: a member joining
        /// must not make every header in the room flash busy (one join would cost a message to
        /// every member, and a room filling up N^2).
        var catchUp = false
        /// Whether busy was told to this catch-up stream's members.
        var busyTold = false
    }
    var streams: [String: Stream] = [:]
    /// Busy sections whose streams ended (changes to them go on) while some members' rows are
    /// still on their way: by section, the stream's seq and those members.
    var busyTails: [String: (seq: UInt64, members: Set<UInt64>)] = [:]
    /// Sections members were told are busy.
    public internal(set) var busySections: Set<String> = []

    /// Presence changes since the last diff: who joined (connection ids, in order), who was
    /// renamed, the client ids of who left.
    var presenceJoined: [UInt64] = []
    var presenceRenamed: [UInt64] = []
    var presenceLeft: [String] = []
    var presenceArmed = false
    /// Whether members may hold an exact list: false once the session went past the threshold
    /// or a welcome listed only part of it, until a diff sends the whole list again.
    var presenceListExact = true
    /// A shared session: the members other nodes hold (by node id, sorted), as they share them,
    /// and how many in all. Only what a node shares is kept: its count and its first
    /// `presenceListMax` members, so a session of 10,000 costs each node no more than 200 per node.
    var remote: [NodePresence] = []
    var remoteCount = 0
    /// Whether every other node listed all its members (false past a node's own list maximum).
    var remoteExact = true
    /// Members of other nodes who joined or were renamed since the last diff; who left goes to
    /// `presenceLeft` like a local leave. `presenceRemoteCounted`: the count changed without a
    /// name to show for it (past the threshold, or only in another node's count).
    var presenceRemoteJoined: [Author] = []
    var presenceRemoteRenamed: [Author] = []
    var presenceRemoteCounted = false

    /// Set when a member left or a row stream ended: changes an order holds back behind them
    /// may go on. The ``SessionCore`` drains its order and clears it.
    var mayDrain = false
    /// The `now` of the input being handled, for work started by a drain.
    var now: UInt64 = 0

    /// A room holding `table`, with `recent` (committed events up to `table.seq`, oldest first)
    /// or `history` (the events a broker saved with its snapshot) kept for resume.
    init(
        name: String, epoch: String, table: Table, recent: [LoggedEvent], history: [HistoryEntry], savedViews: SavedViews = SavedViews(),
        settings: SessionCore.Settings
    ) {
        self.name = name
        self.epoch = epoch
        self.settings = settings
        self.committed = table
        self.undo = UndoHistory(depth: settings.undoDepth, authors: settings.undoAuthors)
        // Set in the initializer: no `didSet`, so the views opened with count as stored.
        self.savedViews = savedViews.byScope
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
    /// No members and no row streams.
    var isQuiet: Bool { members.isEmpty && streams.isEmpty }

    /// Whether `connection` is a member.
    func isMember(_ connection: Connection) -> Bool { members.contains(connection.id) }
    /// The author `connection` joined as, if it is a member.
    func author(of connection: Connection) -> Author? { members[connection.id]?.author }

    /// A member looks for rows: in the committed table only, like everything members see.
    func find(_ query: String, limit: Int, id: String?, from connection: Connection, into effects: inout [SessionEffect]) {
        guard members.contains(connection.id) else { return }
        effects.append(.find(query: query, in: committed, limit: limit, id: id, to: connection))
    }

    // MARK: - Membership

    mutating func join(
        _ connection: Connection, _ request: JoinRequest, role: String?, scope: String? = nil, now: UInt64, into effects: inout [SessionEffect]
    ) {
        guard !members.contains(connection.id) else { return }
        let author = Author(client: clientPrefix + "c\(connection.id)", name: request.name)
        members[connection.id] = Member(connection: connection, author: author, role: role, scope: scope ?? "c:\(connection.id)")
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
        restoreSavedView(of: connection, now: now, into: &effects)
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

    mutating func leave(_ connection: Connection, into effects: inout [SessionEffect]) {
        guard let member = members.removeValue(forKey: connection.id) else { return }
        if let view = member.view {
            privateMembers -= 1
            saveView(view, of: member.scope)
        }
        if let index = connections.firstIndex(of: connection) { connections.remove(at: index) }
        for key in member.streams.sorted() {
            effects.append(.leaveStream(section: key, member: connection))
            streams[key]?.members[connection.id] = nil
            finishIfDone(key, into: &effects)
        }
        forgetFlushes(of: connection, into: &effects)
        presenceLeft.append(member.author.client)
        presenceChanged(into: &effects)
        mayDrain = true
    }

    mutating func rename(_ connection: Connection, to name: String, into effects: inout [SessionEffect]) {
        guard members.contains(connection.id) else { return }
        members[connection.id]?.author.name = name
        presenceRenamed.append(connection.id)
        presenceChanged(into: &effects)
    }

    // MARK: - Answers

    /// `origin` if it can still be answered: API callers always, members while they are here.
    func present(_ origin: ChangeOrigin) -> ChangeOrigin? {
        if case .member(let connection) = origin, !members.contains(connection.id) { return nil }
        return origin
    }

    /// `id`: the change's key (`ChangeIdScope`); the reply names the id as its author sent it.
    func refuse(_ origin: ChangeOrigin, _ error: ProtocolError, id: String?, into effects: inout [SessionEffect]) {
        switch present(origin) {
        case .member(let connection)?: effects.append(.refuse(connection, error, id: id.map(ChangeIdScope.id(ofKey:))))
        case .api(let request)?: effects.append(.answer(request: request, .failure(error)))
        case nil: break
        }
    }

    /// Change `id` (when the author gave one; its key, `ChangeIdScope`) is durable as event `seq`:
    /// the ack names the id as its author sent it. `created`: the key of the row or section the
    /// change added, when the event is at hand (an API caller is told it).
    func acknowledge(_ origin: ChangeOrigin, id: String?, seq: UInt64, created: String? = nil, into effects: inout [SessionEffect]) {
        switch present(origin) {
        case .member(let connection)?: if let id { effects.append(.ack(connection, id: ChangeIdScope.id(ofKey: id), seq: seq)) }
        case .api(let request)?:
            if let created { effects.append(.created(request: request, key: created)) }
            effects.append(.answer(request: request, .success(seq)))
        case nil: break
        }
    }

    // MARK: - Committed events

    /// What follows once the committed table took `event` (from the log, or from a session's
    /// stream): members see it, history keeps it, its author (and retries of the same change)
    /// hear, and members lacking the rows of a section it expands get them: in a stream for the
    /// sections in `streamed` (`nil`: those too large for one chunk), else in one chunk.
    mutating func announce(
        _ event: TableEvent, _ message: OutboundMessage, author: ChangeOrigin?, retries: [(origin: ChangeOrigin, id: String)] = [],
        streamed: [String]?,
        needingRows: [String]? = nil, into effects: inout [SessionEffect]
    ) {
        effects.append(.broadcast(message, to: connections))
        for key in event.addedSections {
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
        let created = event.change.createdKey
        if let author { acknowledge(author, id: event.changeId, seq: event.seq, created: created, into: &effects) }
        for retry in retries {
            acknowledge(retry.origin, id: retry.id, seq: event.seq, created: created, into: &effects)
        }
        for key in needingRows {
            // Read in place: a copy of the section (`committed.section(_:)`) retains all its parts.
            guard let position = committed.position(ofSection: key) else { continue }
            // An empty section needs no rows: every client's row count for it is already 0.
            guard !committed.sections[position].collapsed, !committed.sections[position].rows.isEmpty else { continue }
            // Only members that lack the rows get them; the others already show them. A member
            // in a private view gets rows for what its own view shows (below).
            let lacking = connections.filter { members[$0.id].map { !$0.held.contains(key) && $0.view == nil } ?? false }
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
        if privateMembers > 0 { followPrivateViews(event, into: &effects) }
    }

    /// Whether a section's rows go in one chunk (then they are sent with the event that expands it).
    func fitsOneChunk(_ section: Section) -> Bool {
        section.rows.count <= settings.chunkRows && RowStream.estimatedBytes(section.rows[...]) <= settings.chunkBytes
    }

    /// An append failed: every change not yet durable is lost, those still waiting for their

    /// Starts again from `table` in `epoch` (a stream order's reload): streams end, history is
    /// `history` (resumes from before it get a fresh welcome), and every member gets a fresh
    /// welcome.
    mutating func restart(epoch: String, table: Table, history: [HistoryEntry], into effects: inout [SessionEffect]) {
        endAllStreams(into: &effects)
        self.epoch = epoch
        committed = table
        self.history.removeAll()
        historyStart = 0
        remember(history, upTo: table.seq)
        let presence = listedMembers()
        for connection in connections {
            guard let member = members[connection.id] else { continue }
            members[connection.id]?.streams = []
            members[connection.id]?.held = []
            welcome(connection, author: member.author, presence: presence, recovered: nil, role: member.role, now: now, into: &effects)
            // A private view stays private: told again, with the rows it shows.
            if member.view != nil { setView([], of: connection, now: now, into: &effects) }
        }
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
