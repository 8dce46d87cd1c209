import FoldtableCore

/// Sessions shared with other nodes through a ``Broker`` (Redis): opened from the broker's
/// snapshot and stream, each ordered by a ``StreamOrder`` whose `StreamOrderDriver` follows
/// the stream. Also this node's side of the cluster: presence heartbeats, the member counts
/// other nodes hold for listings, and the broker's availability (shared sessions turn
/// read-only while it is away, and are brought back in step when it returns).
///
/// Nothing here needs this node's SQLite store: the broker holds every shared session.
final class StreamOrdering: SessionOrdering {
    private let cluster: Cluster
    private var broker: Broker { cluster.broker }
    /// The hub served (it holds this ordering).
    private weak var hub: Hub?
    /// The drivers of the resident shared sessions, by name.
    private var drivers: [String: StreamOrderDriver] = [:]
    /// Every shared session this node knows of: opened here, or listed by the broker.
    private(set) var names: Set<String> = []
    /// The members other nodes hold of every shared session, as the broker last gave them
    /// (``PresenceBroker/sharedSessions(excluding:completion:)``), for the sessions this node
    /// does not hold. Read again by the first listing after each heartbeat, so listing costs at
    /// most one broker read per heartbeat, however many ask.
    private var counts: [String: Int] = [:]
    private var countsFresh = false
    /// Listings waiting for that read.
    private var countsWaiters: [() -> Void] = []
    /// Shared sessions opened so far, and this process's random name: request origins of a
    /// shared session's order are made unique from them.
    private var opens: UInt64 = 0
    private let incarnation = Hub.randomEpoch()
    /// Set by ``stop(completion:)``: the node is stopping and beats no more.
    private var stopped = false

    init(_ cluster: Cluster) {
        self.cluster = cluster
    }

    func attach(_ hub: Hub) {
        self.hub = hub
        broker.availabilityChanged = { [weak self] available in self?.availabilityChanged(available) }
        hub.afterMilliseconds(UInt64(hub.config.presenceHeartbeatMs)) { [weak self] in self?.beat() }
    }

    /// Events kept for resume: how much of a stream a snapshot keeps behind it.
    var historyEvents: Int { hub?.config.historyEvents ?? 0 }
    func makeEpoch() -> String { hub?.makeEpoch() ?? Hub.randomEpoch() }
    func log(_ level: Log.Level, _ event: String, _ fields: KeyValuePairs<String, String>) { hub?.logger(level, event, fields) }

    var notReady: String? {
        broker.isAvailable ? nil : "shared storage (redis) unavailable: shared sessions are read-only"
    }

    /// Any name: only the broker knows whether another node made it.
    func mayExist(_ name: String) -> Bool { true }

    /// From the events the session keeps for resume (the last ``ServerConfig/historyEvents``,
    /// which a snapshot carries to the next node that opens it): the stream itself is trimmed
    /// behind the snapshots, so nothing older is kept anywhere.
    func history(of session: TableSession, before: UInt64?, limit: Int, completion: @escaping (Result<HistoryPage, ProtocolError>) -> Void) {
        let limits = JSONParser.Limits(maxDepth: 32, maxStringBytes: max(hub?.config.tableLimits.maxTextBytes ?? 0, 4_096))
        // Only the run that decodes back from the newest: an entry that does not (it was written
        // by a newer node) ends what can be listed without a gap.
        // Entries past `before` are skipped by their seq, and no more than the page (and one to
        // tell whether more are kept) is decoded: a viewer asking again and again costs a page
        // each time, not every event the session keeps.
        var kept: [TableEvent] = []
        for entry in session.core.recentHistory.reversed() {
            if let before, entry.seq >= before { continue }
            guard let value = try? JSONParser.parse(entry.message, limits: limits), let event = try? ServerMessage.decodeEvent(value) else { break }
            kept.append(event)
            if kept.count > limit { break }
        }
        completion(.success(HistoryPage.of(kept.reversed(), before: before, limit: limit)))
    }

    func open(_ name: String, create: Table?, completion: @escaping (Result<TableSession, ProtocolError>) -> Void) {
        guard let hub else { return }
        let fresh = create.map { BrokeredSession(epoch: hub.makeEpoch(), table: $0, position: "", requests: []) }
        broker.open(session: name, create: fresh) { [self] result in
            switch result {
            case .success(let opened?):
                completion(.success(hub.resident(name) ?? follow(opened, name: name, hub: hub)))
            case .success(nil):
                completion(.failure(.noSession(named: name)))
            case .failure(let error):
                hub.log(.error, "session_load_failed", ["session": name, "reason": error.description])
                completion(.failure(.sessionNotLoaded))
            }
        }
    }

    func createIfAbsent(_ name: String, table: Table, made: @escaping (Result<Bool, ProtocolError>) -> Void) {
        // Whichever node writes it first makes it; the others open that one.
        hub?.withSession(name, creating: table) { [self] result in
            made(result.map { drivers[$0.name]?.createdHere == true })
        }
    }

    func create(_ name: String, table: Table, completion: @escaping (Result<Void, ProtocolError>) -> Void) {
        hub?.withSession(name, creating: table) { [self] result in
            switch result {
            case .success(let session) where drivers[session.name]?.createdHere == true: completion(.success(()))
            case .success: completion(.failure(ProtocolError(.duplicateKey, "a session named \"\(name)\" exists", field: "name")))
            case .failure(let error): completion(.failure(error))
            }
        }
    }

    func delete(_ session: TableSession, completion: @escaping (Result<Void, ProtocolError>) -> Void) {
        completion(.failure(ProtocolError(.invalidValue, "a session shared with other nodes cannot be deleted yet")))
    }

    /// A resident session for `opened`, brought up to the stream's end as read, then following it.
    private func follow(_ opened: BrokeredSession, name: String, hub: Hub) -> TableSession {
        opens += 1
        let origin = "\(cluster.node)/\(incarnation)-\(opens)"
        let core = SessionCore(
            name: name, epoch: opened.epoch, table: opened.table, history: opened.history, settings: hub.sessionSettings,
            order: StreamOrder(node: cluster.node, origin: origin, position: opened.position))
        let driver = StreamOrderDriver(ordering: self, broker: broker, metrics: hub.metrics, origin: origin, opened: opened)
        let session = TableSession(core: core, hub: hub, driver: driver)
        drivers[name] = driver
        names.insert(name)
        hub.adopt(session)
        // Writable even if the broker is not (yet) available: the open went through Redis, so
        // appends can be made; the reader applies them once it is connected. Read-only follows
        // the broker's transitions (availabilityChanged), and a resume follows each return.
        driver.start(with: opened.requests)
        hub.log(
            .info, "session_loaded",
            ["session": name, "seq": String(core.committed.seq), "requests": String(opened.requests.count), "history": String(opened.history.count)])
        // Opened for nobody yet (the demo at start, an API call): its idle clock starts now.
        hub.sessionSettled(session)
        return session
    }

    /// A shared session left this node (evicted): its members leave the other nodes' presence.
    func left(_ name: String) {
        drivers[name] = nil
        broker.leavePresence(node: cluster.node, session: name)
    }

    /// Tries to bring `name` back in step with its stream again in a second (the last try failed).
    func resumeLater(_ name: String) {
        hub?.afterMilliseconds(1_000) { [weak self] in
            guard let self, broker.isAvailable(session: name), let driver = drivers[name] else { return }
            driver.resume()
        }
    }

    /// The broker became available or unavailable: shared sessions turn read-only or writable,
    /// and when it is back each is brought back in step with its stream.
    private func availabilityChanged(_ available: Bool) {
        log(available ? .info : .warning, available ? "shared_writable" : "shared_read_only", ["sessions": String(drivers.count)])
        for name in drivers.keys.sorted() {
            drivers[name]?.availabilityChanged(broker.isAvailable(session: name))
        }
    }

    // MARK: - Presence and listings

    /// One presence heartbeat: every resident shared session's members go to the broker (only
    /// those that changed since the last beat, the rest are a refresh), and what other nodes
    /// hold comes back into each session as ``SessionInput/remotePresence(_:)``.
    private func beat() {
        guard let hub, !stopped else { return }
        hub.afterMilliseconds(UInt64(hub.config.presenceHeartbeatMs)) { [weak self] in self?.beat() }
        // Other nodes' counts may have changed at their beats: the next listing reads them again.
        countsFresh = false
        var beats: [PresenceBeat] = []
        beats.reserveCapacity(drivers.count)
        for session in hub.residentSessionList {
            beats.append(PresenceBeat(session: session.name, members: session.presenceDirty ? session.core.localPresence : nil))
            session.presenceDirty = false
        }
        broker.beat(node: cluster.node, expiryMs: UInt64(hub.config.presenceExpiryMs), beats) { [weak hub] name, others in
            hub?.resident(name)?.handle(.remotePresence(others))
        }
    }

    /// A normal stop: this node's members leave every other node's presence now instead of at
    /// the expiry bound, and no heartbeat follows.
    func stop(completion: @escaping () -> Void) {
        stopped = true
        broker.leaveAllPresence(node: cluster.node, completion: completion)
    }

    func members(ofAbsent name: String) -> Int { counts[name] ?? 0 }

    /// At once when other nodes' counts were read since the last heartbeat; otherwise after one
    /// read of the broker (shared by every listing meanwhile). A read that fails leaves the last
    /// counts in place: the listing is answered with them.
    func withListing(_ body: @escaping () -> Void) {
        guard !countsFresh else { return body() }
        countsWaiters.append(body)
        guard countsWaiters.count == 1 else { return }
        broker.sharedSessions(excluding: cluster.node) { [self] result in
            switch result {
            case .success(let read):
                counts = read
                countsFresh = true
                // Shared sessions made on other nodes are listed here too.
                let unknown = read.keys.filter { !names.contains($0) }
                if !unknown.isEmpty {
                    names.formUnion(unknown)
                    hub?.namesChanged()
                }
            case .failure(let error):
                log(.warning, "list_counts_failed", ["reason": error.description])
            }
            let waiting = countsWaiters
            countsWaiters = []
            for waiter in waiting { waiter() }
        }
    }
}
