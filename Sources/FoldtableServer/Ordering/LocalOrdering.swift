import FoldtableCore

/// Sessions this node holds alone: stored in its ``SessionStore`` (a checkpoint per session)
/// and ``EventLog`` (the events after it), SQLite or memory, each ordered by a ``LocalOrder``.
final class LocalOrdering: SessionOrdering {
    private let store: SessionStore
    private let eventLog: EventLog
    /// Names of every stored session (resident or not).
    private(set) var names: Set<String>
    /// The hub served (it holds this ordering).
    private weak var hub: Hub?

    /// `store` and `eventLog` (usually one object) hold `names` already.
    init(store: SessionStore, eventLog: EventLog, names: [String]) {
        self.store = store
        self.eventLog = eventLog
        self.names = Set(names)
    }

    func attach(_ hub: Hub) { self.hub = hub }

    var notReady: String? { nil }

    func mayExist(_ name: String) -> Bool { names.contains(name) }

    func withListing(_ body: @escaping () -> Void) { body() }

    func members(ofAbsent name: String) -> Int { 0 }

    func stop(completion: @escaping () -> Void) { completion() }

    /// From the event log: as far back as ``ServerConfig/historyKeepEvents`` keeps it.
    func history(of session: TableSession, before: UInt64?, limit: Int, completion: @escaping (Result<HistoryPage, ProtocolError>) -> Void) {
        eventLog.history(session: session.name, before: before, limit: limit) { result in
            switch result {
            case .success(let page): completion(.success(page))
            // Not stored yet (its creation is still on its way to the store): nothing committed.
            case .failure(.conflict): completion(.success(HistoryPage(events: [], more: false)))
            case .failure: completion(.failure(ProtocolError(.storageUnavailable, "the history could not be read; retry later")))
            }
        }
    }

    func open(_ name: String, create: Table?, completion: @escaping (Result<TableSession, ProtocolError>) -> Void) {
        guard let hub else { return }
        guard names.contains(name) else {
            guard let create else {
                return completion(.failure(.noSession(named: name)))
            }
            return completion(.success(make(name, table: create, hub: hub)))
        }
        store.load(name) { [self] result in
            switch result {
            case .success(let stored?):
                do throws(StoreError) {
                    let session = try restore(stored, hub: hub)
                    hub.log(.info, "session_loaded", ["session": name, "seq": String(session.core.committed.seq)])
                    completion(.success(session))
                } catch {
                    hub.log(.error, "session_load_failed", ["session": name, "reason": error.description])
                    completion(.failure(ProtocolError(.storageUnavailable, "the session could not be loaded")))
                }
            case .success(nil):
                // Deleted meanwhile. Not made again here: whoever waits may not be allowed to
                // create (a viewer's join).
                completion(.failure(.noSession(named: name)))
            case .failure(let error):
                hub.log(.error, "session_load_failed", ["session": name, "reason": error.description])
                completion(.failure(.sessionNotLoaded))
            }
        }
    }

    func createIfAbsent(_ name: String, table: Table, made: @escaping (Result<Bool, ProtocolError>) -> Void) {
        guard let hub, !names.contains(name), !hub.holds(name) else { return made(.success(false)) }
        make(name, table: table, hub: hub)
        made(.success(true))
    }

    func create(_ name: String, table: Table, completion: @escaping (Result<Void, ProtocolError>) -> Void) {
        guard let hub else { return }
        // The store answers later, on the service thread, once `created` is set.
        var created: TableSession?
        created = make(name, table: table, hub: hub) { [self] result in
            if case .failure = result, let session = created, session.isResident, session.core.isQuiet {
                // Nothing half-made: a session the store did not take is not kept in memory either.
                hub.drop(session)
                names.remove(name)
            }
            completion(result.mapError { _ in ProtocolError(.storageUnavailable, "the session could not be stored; retry later") })
        }
    }

    func delete(_ session: TableSession, completion: @escaping (Result<Void, ProtocolError>) -> Void) {
        store.delete(session.name) { [self] result in
            switch result {
            case .failure(let error):
                hub?.log(.warning, "delete_failed", ["session": session.name, "reason": error.description])
                completion(.failure(ProtocolError(.storageUnavailable, "the session could not be deleted; retry later")))
            case .success:
                names.remove(session.name)
                completion(.success(()))
            }
        }
    }

    /// A new session holding `table`, held by the hub at once and stored in the background
    /// (`stored` hears how that went).
    @discardableResult
    private func make(
        _ name: String, table: Table, hub: Hub, stored: ((Result<Void, StoreError>) -> Void)? = nil
    ) -> TableSession {
        let epoch = hub.makeEpoch()
        let made = session(SessionCore(name: name, epoch: epoch, table: table, settings: hub.sessionSettings, order: LocalOrder()), hub: hub)
        names.insert(name)
        hub.adopt(made)
        store.create(StoredSession(name: name, epoch: epoch, checkpoint: table)) { [hub] result in
            if case .failure(let error) = result { hub.log(.error, "session_create_failed", ["session": name, "reason": error.description]) }
            stored?(result)
        }
        hub.log(.info, "session_created", ["session": name])
        return made
    }

    /// Rebuilds a session from its checkpoint and the events logged after it.
    private func restore(_ stored: StoredSession, hub: Hub) throws(StoreError) -> TableSession {
        var table = stored.checkpoint
        for logged in stored.events where logged.event.seq > table.seq {
            do {
                try table.applyCommitted(logged.event, request: logged.request)
            } catch {
                throw .corrupt("event \(logged.event.seq) does not replay: \(error.message)")
            }
        }
        let core = SessionCore(
            name: stored.name, epoch: stored.epoch, table: table, recent: stored.events, checkpointSeq: stored.checkpoint.seq,
            savedViews: stored.views, settings: hub.sessionSettings, order: LocalOrder())
        return session(core, hub: hub)
    }

    private func session(_ core: SessionCore, hub: Hub) -> TableSession {
        let driver = LocalOrderDriver(store: store, eventLog: eventLog, metrics: hub.metrics, log: hub.logger, webhooks: hub.webhooks)
        return TableSession(core: core, hub: hub, driver: driver)
    }
}
