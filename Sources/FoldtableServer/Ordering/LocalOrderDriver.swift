import FoldtableCore

/// Drives a ``LocalOrder``: its appends go to the ``EventLog`` and its checkpoints to the
/// ``SessionStore``; each finished append comes back as ``SessionInput/committed(generation:through:)``
/// or ``SessionInput/commitFailed(generation:_:)``.
final class LocalOrderDriver: OrderDriver, LogAppender {
    private let store: SessionStore
    private let eventLog: EventLog
    private let metrics: Metrics
    private let log: Log
    /// Told of each durable append (nil: no webhooks on this node).
    private weak var webhooks: Webhooks?
    /// The session driven (it holds this driver).
    private weak var session: TableSession?
    /// The same, held while appends are in flight: the log holds this driver until each
    /// finishes, and its author must still hear, even of a session deleted meanwhile.
    private var pinned: TableSession?

    /// This session's appends to the event log not finished yet, oldest first from
    /// `persistsHead`, `persistsCount` of them (the log finishes them in order): what each
    /// finish reports to the core. A queue here instead of a closure per append, which cost an
    /// allocation per change.
    ///
    /// A ring in memory of its own (doubled when full), not an array: every access to an array
    /// property costs a runtime exclusivity check, while a pointer and plain integers are proved
    /// exclusive. `PendingPersist` is trivial, so slots need no deinitializing.
    private var persists = UnsafeMutablePointer<PendingPersist>.allocate(capacity: 4)
    private var persistsCapacity = 4
    private var persistsHead = 0
    private var persistsCount = 0
    /// The events of the appends in flight that carry them (`PendingPersist.handsEvents`),
    /// oldest first: handed to the session's webhook when durable, so that it needs no read of
    /// the log. Empty and untouched when the session has no webhook.
    private var handedEvents: [[LoggedEvent]] = []

    /// One append to the event log in flight.
    private struct PendingPersist {
        var generation: UInt64
        var count: Int
        var start: MonotonicTime
        /// Its events wait in `handedEvents` (the session had a webhook when it was made).
        var handsEvents: Bool
    }

    init(store: SessionStore, eventLog: EventLog, metrics: Metrics, log: Log, webhooks: Webhooks? = nil) {
        self.store = store
        self.eventLog = eventLog
        self.metrics = metrics
        self.log = log
        self.webhooks = webhooks
    }

    deinit {
        persists.deallocate()
    }

    func attach(_ session: TableSession) { self.session = session }

    func detached() {}

    func perform(_ effect: SessionEffect, applied: MonotonicTime?) {
        guard let session else { return }
        switch effect {
        case .persist(let events, let generation):
            if persistsCount == 0 { pinned = session }
            let hands = webhooks?.isSet(session.name) ?? false
            if hands { handedEvents.append(events) }
            pushPersist(PendingPersist(generation: generation, count: events.count, start: applied ?? MonotonicTime.now, handsEvents: hands))
            eventLog.append(session: session.name, events: events, appender: self)
        case .checkpoint(let table):
            let name = session.name
            // Private views go with it when they changed since the store last held them (read
            // here, where they are current: the effect is performed in the turn it was made).
            let saved = session.core.viewsUnsaved ? session.core.savedViews : nil
            store.saveCheckpoint(name, table: table, views: saved?.views) { [log, weak session] result in
                switch result {
                case .success:
                    if let saved { session?.viewsStored(revision: saved.revision) }
                case .failure(let error):
                    log(.warning, "checkpoint_failed", ["session": name, "reason": error.description])
                }
            }
        default:
            break
        }
    }

    private func pushPersist(_ persist: PendingPersist) {
        if persistsCount == persistsCapacity {
            let grown = UnsafeMutablePointer<PendingPersist>.allocate(capacity: persistsCapacity * 2)
            for index in 0..<persistsCount {
                (grown + index).initialize(to: persists[(persistsHead + index) % persistsCapacity])
            }
            persists.deallocate()
            persists = grown
            persistsHead = 0
            persistsCapacity *= 2
        }
        (persists + (persistsHead + persistsCount) % persistsCapacity).initialize(to: persist)
        persistsCount += 1
    }

    /// The oldest unfinished append, taken off the ring.
    private func popPersist() -> PendingPersist? {
        guard persistsCount > 0 else { return nil }
        let persist = persists[persistsHead]
        persistsHead = (persistsHead + 1) % persistsCapacity
        persistsCount -= 1
        return persist
    }

    /// The log now holds (or refused) this session's oldest unfinished append.
    func appendFinished(_ result: Result<UInt64, StoreError>) {
        guard let session = pinned, let persist = popPersist() else { return }
        if persistsCount == 0 { pinned = nil }
        // One reading for the commit latency and the core's time of the commit.
        let finished = MonotonicTime.now
        let handed = persist.handsEvents && !handedEvents.isEmpty ? handedEvents.removeFirst() : []
        metrics.commitLatency.observe(persist.start.seconds(until: finished))
        switch result {
        case .success(let seq):
            session.handle(.committed(generation: persist.generation, through: seq), now: session.transport.milliseconds(at: finished))
            webhooks?.committed(session.name, through: seq, events: handed.map(\.event))
        case .failure(let error):
            if case .conflict = error { rebaseLog(session) }
            session.handle(.commitFailed(generation: persist.generation, error))
        }
    }

    /// The log does not hold what the committed table says it does (its `create` failed on a
    /// full disk, say): store the committed table as the session's new start, so the appends
    /// that follow (queued after this) have something to follow. Members saw only committed
    /// changes, so nothing they saw is lost; the epoch stays.
    private func rebaseLog(_ session: TableSession) {
        guard session.isResident else { return }
        let name = session.name
        let seq = session.core.committed.seq
        let saved = session.core.savedViews
        let stored = StoredSession(name: name, epoch: session.core.epoch, checkpoint: session.core.committedWithChangeIds, views: saved.views)
        store.create(stored) { [log, weak session] result in
            switch result {
            case .success: session?.viewsStored(revision: saved.revision)
            case .failure(let error): log(.warning, "log_rebase_failed", ["session": name, "reason": error.description])
            }
        }
        session.checkpointTaken(at: seq)
        log(.warning, "log_rebased", ["session": name, "seq": String(seq)])
    }
}
