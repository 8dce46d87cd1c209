import FoldtableCore

/// One shared table and the clients in it: applies every change in one order, broadcasts each
/// event once to every member, streams rows of expanded sections and reports busy sections.
///
/// Runs on the transport's service thread only.
final class TableSession {
    let name: String
    /// This incarnation of the session; `since` values from another epoch cannot resume.
    let epoch: String
    private(set) var table: Table
    private(set) var members: [ClientState] = []
    /// Member connections in join order: the broadcast list, rebuilt on join and leave only.
    private var connections: [Connection] = []
    /// The last events, encoded, for resume.
    private var history: [(seq: UInt64, message: OutboundMessage, expanded: [String])] = []
    private var historyStart = 0
    /// Row streams in progress, by section key. A section with a stream is "in work": changes
    /// that touch it wait in `pending` until the stream completes.
    private var streams: [String: RowStream] = [:]
    private var pending: [(change: Change, id: String?, author: Author, client: ClientState?)] = []
    private var pendingStart = 0
    /// True while `drainPending` runs (it must not be re-entered).
    private var draining = false
    /// Sections members were told are busy.
    private(set) var busySections: Set<String> = []

    private unowned let hub: Hub
    private var transport: Transport { hub.transport }
    private var config: ServerConfig { hub.config }

    init(name: String, epoch: String, table: Table, hub: Hub) {
        self.name = name
        self.epoch = epoch
        self.table = table
        self.hub = hub
    }

    var memberCount: Int { members.count }

    // MARK: - Membership

    /// Adds `client` and sends it the session: a resume with the missed events when `request`
    /// can resume, else a welcome snapshot. Tells the other members.
    func join(_ client: ClientState, request: JoinRequest) {
        client.joined(self, as: request.name)
        let others = connections
        members.append(client)
        connections.append(client.connection)
        let presence = members.map(\.author)
        if let since = request.since, request.epoch == epoch, let missed = events(after: since) {
            transport.send(
                OutboundMessage(ServerMessage.resume(session: name, client: client.author, epoch: epoch, seq: table.seq, presence: presence)),
                to: client.connection)
            for key in busySections.sorted() {
                transport.send(OutboundMessage(ServerMessage.busy(section: key, busy: true)), to: client.connection)
            }
            var expanded: Set<String> = []
            for event in missed {
                transport.send(event.message, to: client.connection)
                expanded.formUnion(event.expanded)
            }
            for section in table.sections where expanded.contains(section.key) && !section.collapsed {
                stream(section, to: client)
            }
        } else {
            // Rows go inline while both budgets last (rows, and bytes: the welcome is one frame).
            var rowBudget = config.welcomeRowBudget
            var byteBudget = config.streamLowMarkBytes
            var inline: Set<String> = []
            var later: [Section] = []
            for section in table.sections where !section.collapsed {
                let bytes = section.rows.count <= rowBudget ? RowStream.estimatedBytes(section.rows[...]) : Int.max
                if streams[section.key] == nil && section.rows.count <= rowBudget && bytes <= byteBudget {
                    rowBudget -= section.rows.count
                    byteBudget -= bytes
                    inline.insert(section.key)
                } else {
                    later.append(section)
                }
            }
            let snapshot = TableSnapshot(table, rows: .sections(inline), busy: { self.busySections.contains($0) })
            let welcome = ServerMessage.welcome(
                session: name, client: client.author, epoch: epoch, snapshot: snapshot, presence: presence,
                recovered: request.since == nil ? nil : false)
            transport.send(OutboundMessage(welcome), to: client.connection)
            for section in later { stream(section, to: client) }
        }
        transport.broadcast(OutboundMessage(ServerMessage.presence(.joined, member: client.author, count: members.count)), to: others)
    }

    /// Removes a member that closed; tells the others.
    func leave(_ client: ClientState) {
        guard let index = members.firstIndex(where: { $0 === client }) else { return }
        members.remove(at: index)
        connections.remove(at: index)
        for key in client.streams {
            guard let stream = streams[key] else { continue }
            stream.remove(client)
            if stream.isFinished { finish(stream) }
        }
        transport.broadcast(OutboundMessage(ServerMessage.presence(.left, member: client.author, count: members.count)), to: connections)
        drainPending()
    }

    /// A member changed its display name; everyone (the member too) is told.
    func rename(_ client: ClientState, to name: String) {
        client.name = name
        transport.broadcast(OutboundMessage(ServerMessage.presence(.renamed, member: client.author, count: members.count)), to: connections)
    }

    // MARK: - Changes

    /// Applies `change` now, or after the streams of the sections it touches complete (in the
    /// order changes arrived: once one waits, every later one waits behind it).
    func submit(_ change: Change, id: String?, from client: ClientState) {
        guard pending.count - pendingStart < hub.maxPendingChanges else {
            hub.refuse(client, ProtocolError(.limitReached, "the session has too many changes waiting; retry shortly"), id: id)
            return
        }
        pending.append((change, id, client.author, client))
        drainPending()
    }

    private func mustWait(_ change: Change) -> Bool {
        guard !streams.isEmpty else { return false }
        switch table.scope(of: change) {
        case .table: return true
        case .sections(let keys): return keys.contains { streams[$0] != nil }
        }
    }

    private func apply(_ change: Change, id: String?, author: Author, client: ClientState?) {
        let outcome: ApplyOutcome
        do {
            outcome = try table.apply(change, by: author, changeId: id)
        } catch {
            if let client, client.isOpen, client.session === self { hub.refuse(client, error, id: id) }
            return
        }
        switch outcome {
        case .duplicate(let event):
            if let id, let client, client.isOpen, client.session === self {
                transport.send(OutboundMessage(ServerMessage.ack(id: id, seq: event.seq)), to: client.connection)
            }
        case .applied(let event):
            if let client, client.isOpen { client.consecutiveErrors = 0 }
            let message = OutboundMessage(ServerMessage.event(event))
            transport.broadcast(message, to: connections)
            remember(event.seq, message, expanded: event.expandedSections)
            if let id, let client, client.isOpen, client.session === self {
                transport.send(OutboundMessage(ServerMessage.ack(id: id, seq: event.seq)), to: client.connection)
            }
            hub.log(.debug, "change", ["session": name, "seq": String(event.seq), "type": event.change.typeName])
            for key in event.expandedSections {
                if let section = table.section(key) { stream(section, toAllAt: event.seq) }
            }
        }
    }

    /// Applies waiting changes in order until one must wait. Never re-entered: a stream that
    /// finishes while a change is being applied (and would drain again) is picked up by the loop
    /// already running, so the stack stays flat however many changes wait, and no change is
    /// applied in the middle of another.
    private func drainPending() {
        guard !draining else { return }
        draining = true
        defer { draining = false }
        while pendingStart < pending.count {
            let next = pending[pendingStart]
            if mustWait(next.change) { break }
            pendingStart += 1
            apply(next.change, id: next.id, author: next.author, client: next.client)
        }
        if pendingStart == pending.count {
            pending.removeAll(keepingCapacity: true)
            pendingStart = 0
        } else if pendingStart > 1_024 && pendingStart * 2 > pending.count {
            pending.removeFirst(pendingStart)
            pendingStart = 0
        }
    }

    // MARK: - Row streams and busy state

    /// Streams a section just expanded at `seq` to every member.
    private func stream(_ section: Section, toAllAt seq: UInt64) {
        let stream = makeStream(section, seq: seq)
        let now = transport.nowMilliseconds()
        for member in members { stream.add(member, at: now) }
        start(stream)
    }

    /// Streams an expanded section to one member that joined: into the stream already under way,
    /// or a new one at the current sequence number.
    private func stream(_ section: Section, to client: ClientState) {
        if let running = streams[section.key] {
            running.add(client, at: transport.nowMilliseconds())
            running.pump(client, transport: transport, lowMark: config.streamLowMarkBytes)
            if running.isFinished { finish(running) }
            return
        }
        let stream = makeStream(section, seq: table.seq)
        stream.add(client, at: transport.nowMilliseconds())
        start(stream)
    }

    private func makeStream(_ section: Section, seq: UInt64) -> RowStream {
        // Chunks stay well under the refill mark, so one chunk never passes a member's queue cap.
        RowStream(section: section, seq: seq, chunkRows: config.rowChunkRows, chunkBytes: min(config.maxBatchBytes, config.streamLowMarkBytes))
    }

    private func start(_ stream: RowStream) {
        if let running = streams[stream.section] {
            // Changes touching a streaming section wait, so this should not happen; if it does,
            // the newer expansion wins and the older stream's members move to it.
            for (_, cursor) in running.cursors {
                running.remove(cursor.client)
                stream.add(cursor.client, at: transport.nowMilliseconds())
            }
            stream.busyShown = running.busyShown
            if let timer = running.busyTimer { hub.cancelTimer(timer) }
            if let timer = running.deadlineTimer { hub.cancelTimer(timer) }
        }
        streams[stream.section] = stream
        for (_, cursor) in stream.cursors { stream.pump(cursor.client, transport: transport, lowMark: config.streamLowMarkBytes) }
        if stream.isFinished {
            finish(stream)
            return
        }
        let threshold = table.options.busyThresholdMs
        if threshold == 0 {
            showBusy(stream)
        } else if !stream.busyShown {
            stream.busyTimer = hub.armTimer(.busy(session: name, section: stream.section, seq: stream.seq), milliseconds: UInt64(threshold))
        }
        armDeadline(stream)
    }

    /// Members must take a stream's rows within `streamTimeoutSecs` of joining it: changes to the
    /// section wait for the stream, so one member that stops reading must not hold the session.
    private func armDeadline(_ stream: RowStream) {
        guard let earliest = stream.earliestJoin else { return }
        let due = earliest + UInt64(config.streamTimeoutSecs) * 1_000
        let now = transport.nowMilliseconds()
        stream.deadlineTimer = hub.armTimer(
            .streamDeadline(session: name, section: stream.section, seq: stream.seq), milliseconds: due > now ? due - now : 0)
    }

    /// The stream deadline of `section` passed: members still behind are closed as slow.
    func streamDeadlinePassed(section: String, seq: UInt64) {
        guard let stream = streams[section], stream.seq == seq else { return }
        stream.deadlineTimer = nil
        let now = transport.nowMilliseconds()
        let timeout = UInt64(config.streamTimeoutSecs) * 1_000
        for (_, cursor) in stream.cursors where cursor.joinedAt + timeout <= now {
            stream.remove(cursor.client)
            hub.log(.info, "close", ["client": cursor.client.clientId, "code": String(CloseCode.slowConsumer), "reason": "row stream timeout"])
            transport.close(cursor.client.connection, code: CloseCode.slowConsumer, reason: "too slow to take a row stream")
        }
        if stream.isFinished {
            finish(stream)
        } else {
            armDeadline(stream)
        }
    }

    /// A member's queue drained: refill it from every stream it is in.
    func drained(_ client: ClientState) {
        for key in client.streams {
            guard let stream = streams[key] else { continue }
            stream.pump(client, transport: transport, lowMark: config.streamLowMarkBytes)
            if stream.isFinished { finish(stream) }
        }
    }

    /// The busy threshold passed for the stream of `section` started at `seq`.
    func busyThresholdPassed(section: String, seq: UInt64) {
        guard let stream = streams[section], stream.seq == seq else { return }
        stream.busyTimer = nil
        showBusy(stream)
    }

    private func showBusy(_ stream: RowStream) {
        guard !stream.busyShown else { return }
        stream.busyShown = true
        busySections.insert(stream.section)
        transport.broadcast(OutboundMessage(ServerMessage.busy(section: stream.section, busy: true)), to: connections)
        hub.log(.info, "busy", ["session": name, "section": stream.section])
    }

    private func finish(_ stream: RowStream) {
        guard streams[stream.section] === stream else { return }
        streams[stream.section] = nil
        if let timer = stream.busyTimer { hub.cancelTimer(timer) }
        if let timer = stream.deadlineTimer { hub.cancelTimer(timer) }
        if stream.busyShown {
            busySections.remove(stream.section)
            transport.broadcast(OutboundMessage(ServerMessage.busy(section: stream.section, busy: false)), to: connections)
        }
        drainPending()
    }

    // MARK: - History

    private func remember(_ seq: UInt64, _ message: OutboundMessage, expanded: [String]) {
        guard config.historyEvents > 0 else { return }
        if history.count < config.historyEvents {
            history.append((seq, message, expanded))
        } else {
            history[historyStart] = (seq, message, expanded)
            historyStart = (historyStart + 1) % history.count
        }
    }

    /// The encoded events after `since` in order, or `nil` when history no longer reaches back.
    private func events(after since: UInt64) -> [(seq: UInt64, message: OutboundMessage, expanded: [String])]? {
        guard since <= table.seq else { return nil }
        let missing = Int(table.seq - since)
        if missing == 0 { return [] }
        guard missing <= history.count else { return nil }
        let ordered = history[historyStart...] + history[..<historyStart]
        return Array(ordered.suffix(missing))
    }
}
