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
        let presence = members.map(\.member)
        if let since = request.since, request.epoch == epoch, let missed = events(after: since) {
            transport.send(
                OutboundMessage(ServerMessage.resume(session: name, client: client.author, epoch: epoch, seq: table.seq, presence: presence)),
                to: client.connection)
            var expanded: Set<String> = []
            for event in missed {
                transport.send(event.message, to: client.connection)
                expanded.formUnion(event.expanded)
            }
            for section in table.sections where expanded.contains(section.key) && !section.collapsed {
                stream(section, to: client)
            }
        } else {
            var budget = config.welcomeRowBudget
            var inline: Set<String> = []
            var later: [Section] = []
            for section in table.sections where !section.collapsed {
                if streams[section.key] == nil && section.rows.count <= budget {
                    budget -= section.rows.count
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
        transport.broadcast(OutboundMessage(ServerMessage.presence(.joined, member: client.member, count: members.count)), to: others)
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
        transport.broadcast(OutboundMessage(ServerMessage.presence(.left, member: client.member, count: members.count)), to: connections)
        drainPending()
    }

    /// A member changed its display name; everyone (the member too) is told.
    func rename(_ client: ClientState, to name: String) {
        client.name = name
        transport.broadcast(OutboundMessage(ServerMessage.presence(.renamed, member: client.member, count: members.count)), to: connections)
    }

    // MARK: - Changes

    /// Applies `change` now, or after the streams of the sections it touches complete (in the
    /// order changes arrived: once one waits, every later one waits behind it).
    func submit(_ change: Change, id: String?, from client: ClientState) {
        if pendingStart < pending.count || mustWait(change) {
            guard pending.count - pendingStart < hub.maxPendingChanges else {
                transport.send(
                    OutboundMessage(
                        ServerMessage.error(ProtocolError(.limitReached, "the session has too many changes waiting; retry shortly"), id: id)),
                    to: client.connection)
                return
            }
            pending.append((change, id, client.author, client))
            return
        }
        apply(change, id: id, author: client.author, client: client)
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
            if let client, client.isOpen, client.session === self {
                transport.send(OutboundMessage(ServerMessage.error(error, id: id)), to: client.connection)
            }
            return
        }
        switch outcome {
        case .duplicate(let event):
            if let id, let client, client.isOpen, client.session === self {
                transport.send(OutboundMessage(ServerMessage.ack(id: id, seq: event.seq)), to: client.connection)
            }
        case .applied(let event):
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

    private func drainPending() {
        while pendingStart < pending.count {
            let next = pending[pendingStart]
            if mustWait(next.change) { break }
            pendingStart += 1
            apply(next.change, id: next.id, author: next.author, client: next.client)
        }
        if pendingStart == pending.count {
            pending.removeAll(keepingCapacity: true)
            pendingStart = 0
        }
    }

    // MARK: - Row streams and busy state

    /// Streams a section just expanded at `seq` to every member.
    private func stream(_ section: Section, toAllAt seq: UInt64) {
        let stream = RowStream(section: section, seq: seq, chunkRows: config.rowChunkRows)
        for member in members { stream.add(member) }
        start(stream)
    }

    /// Streams an expanded section to one member that joined: into the stream already under way,
    /// or a new one at the current sequence number.
    private func stream(_ section: Section, to client: ClientState) {
        if let running = streams[section.key] {
            running.add(client)
            running.pump(client, transport: transport, lowMark: config.streamLowMarkBytes)
            if running.isFinished { finish(running) }
            return
        }
        let stream = RowStream(section: section, seq: table.seq, chunkRows: config.rowChunkRows)
        stream.add(client)
        start(stream)
    }

    private func start(_ stream: RowStream) {
        streams[stream.section] = stream
        for (_, cursor) in stream.cursors { stream.pump(cursor.client, transport: transport, lowMark: config.streamLowMarkBytes) }
        if stream.isFinished {
            finish(stream)
            return
        }
        let threshold = table.options.busyThresholdMs
        if threshold == 0 {
            showBusy(stream)
        } else {
            stream.busyTimer = hub.armTimer(.busy(session: name, section: stream.section, seq: stream.seq), milliseconds: UInt64(threshold))
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
