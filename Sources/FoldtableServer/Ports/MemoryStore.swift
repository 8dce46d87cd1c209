import FoldtableCore

/// The in-memory ``SessionStore`` and ``EventLog``: `--memory`, and the hub's tests.
///
/// Keeps what a durable store would (checkpoints and a bounded log per session) in this process,
/// so eviction, reload, resume and delete behave exactly as with SQLite, minus surviving a
/// restart. Completions are posted to the service queue, never run inside the call, as the
/// ports require.
public final class MemoryStore: SessionStore, EventLog {
    private var sessions: [String: StoredSession] = [:]
    private let keepEvents: Int
    private let queue: ServiceQueue
    /// When set, every write fails with this error (tests of storage faults).
    public var failWrites: StoreError?
    public weak var appendObserver: LogAppender?

    /// An outcome waiting to be handed over on a later turn.
    private enum Delivery {
        case appended(LogAppender, Result<UInt64, StoreError>)
        case other(() -> Void)
    }
    /// Outcomes not handed over yet, in call order, and an emptied array kept for the next turn.
    /// One posted closure hands over a whole turn's outcomes: a box and a closure posted per
    /// append were most of what an append cost here.
    private var pending: [Delivery] = []
    private var spare: [Delivery] = []

    /// `keepEvents`: events kept before the newest checkpoint, for resume and history (the
    /// larger of the two bounds).
    public init(keepEvents: Int, queue: ServiceQueue) {
        self.keepEvents = keepEvents
        self.queue = queue
    }

    private func later<T>(_ completion: @escaping (T) -> Void, _ result: T) {
        deliver(.other { completion(result) })
    }

    private func deliver(_ delivery: Delivery) {
        pending.append(delivery)
        guard pending.count == 1 else { return }
        // Posted, not called: the port promises completions never run inside the call. The box
        // only carries the store to the service thread it is already on.
        let store = ServiceThreadOnly(self)
        queue.post { store.value.handOver() }
    }

    /// Runs the outcomes pending now; those they cause wait for the next post.
    private func handOver() {
        var batch: [Delivery] = []
        swap(&batch, &spare)
        swap(&batch, &pending)
        for delivery in batch {
            switch delivery {
            case .appended(let appender, let result):
                appendObserver?.appendFinished(result)
                appender.appendFinished(result)
            case .other(let body):
                body()
            }
        }
        batch.removeAll(keepingCapacity: true)
        if spare.capacity < batch.capacity { swap(&spare, &batch) }
    }

    public func sessionNames() throws(StoreError) -> [String] { sessions.keys.sorted() }

    public func load(_ name: String, completion: @escaping (Result<StoredSession?, StoreError>) -> Void) {
        later(completion, .success(sessions[name]))
    }

    public func create(_ session: StoredSession, completion: @escaping (Result<Void, StoreError>) -> Void) {
        if let failWrites { return later(completion, .failure(failWrites)) }
        var stored = session
        stored.events = []
        sessions[session.name] = stored
        later(completion, .success(()))
    }

    public func saveCheckpoint(_ name: String, table: Table, views: SavedViews?, completion: @escaping (Result<Void, StoreError>) -> Void) {
        if let failWrites { return later(completion, .failure(failWrites)) }
        guard let index = sessions.index(forKey: name), table.seq <= lastSeq(sessions.values[index]) else {
            return later(completion, .failure(.conflict("no session \(name) at \(table.seq)")))
        }
        // In place, like `append`: a copy taken out of the dictionary shares the log's storage,
        // so pruning it copied every event the session keeps.
        sessions.values[index].checkpoint = table
        if let views { sessions.values[index].views = views }
        let keepFrom = table.seq > UInt64(keepEvents) ? table.seq - UInt64(keepEvents) : 0
        // The log is in seq order: what goes is a prefix, removed without moving the rest one
        // by one (`removeAll(where:)` copied every kept event).
        let drop = sessions.values[index].events.prefix { $0.event.seq <= keepFrom }.count
        sessions.values[index].events.removeFirst(drop)
        later(completion, .success(()))
    }

    public func delete(_ name: String, completion: @escaping (Result<Void, StoreError>) -> Void) {
        if let failWrites { return later(completion, .failure(failWrites)) }
        sessions[name] = nil
        later(completion, .success(()))
    }

    public func flush() {}

    public func append(session name: String, events: [LoggedEvent], appender: LogAppender) {
        if let failWrites { return deliver(.appended(appender, .failure(failWrites))) }
        guard let index = sessions.index(forKey: name) else {
            return deliver(.appended(appender, .failure(.conflict("no session \(name)"))))
        }
        // Worked on in place through the dictionary's values, never copied out and back: a copy
        // of a stored session retains its whole checkpoint table, and copying the log back would
        // copy every event.
        deliver(.appended(appender, Self.append(events, to: &sessions.values[index], keepEvents: keepEvents)))
    }

    private static func append(_ events: [LoggedEvent], to stored: inout StoredSession, keepEvents: Int) -> Result<UInt64, StoreError> {
        let last = stored.events.last?.event.seq ?? stored.checkpoint.seq
        guard let first = events.first else { return .failure(.conflict("nothing to append to \(stored.name)")) }
        guard first.event.seq == last + 1 else { return .failure(.conflict("event \(first.event.seq) does not follow \(last)")) }
        // Without the encoded bytes the caller may carry: a cache, not worth its memory here.
        // Copied in bulk and the cache dropped in place: building each event anew copied it twice.
        let start = stored.events.count
        stored.events.append(contentsOf: events)
        for index in start..<stored.events.count { stored.events[index].encoded = nil }
        // Bounded like the SQLite log: what the checkpoint covers beyond the resume window goes,
        // in steps of keepEvents so the front of the array moves rarely.
        let checkpointSeq = stored.checkpoint.seq
        let keepFrom = checkpointSeq > UInt64(keepEvents) ? checkpointSeq - UInt64(keepEvents) : 0
        if let oldest = stored.events.first?.event.seq, oldest <= keepFrom, keepFrom - oldest >= UInt64(keepEvents) {
            stored.events.removeFirst(Int(keepFrom - oldest + 1))
        }
        return .success(events[events.count - 1].event.seq)
    }

    public func read(session name: String, after seq: UInt64, completion: @escaping (Result<[LoggedEvent]?, StoreError>) -> Void) {
        guard let stored = sessions[name] else { return later(completion, .success(nil)) }
        let last = lastSeq(stored)
        if seq >= last { return later(completion, .success(seq == last ? [] : nil)) }
        guard let oldest = stored.events.first?.event.seq, oldest <= seq + 1 else { return later(completion, .success(nil)) }
        later(completion, .success(Array(stored.events.drop { $0.event.seq <= seq })))
    }

    public func history(session name: String, before: UInt64?, limit: Int, completion: @escaping (Result<HistoryPage, StoreError>) -> Void) {
        guard let stored = sessions[name] else { return later(completion, .failure(.conflict("no session \(name)"))) }
        later(completion, .success(HistoryPage.of(stored.events.lazy.map(\.event), before: before, limit: limit)))
    }

    private func lastSeq(_ stored: StoredSession) -> UInt64 { stored.events.last?.event.seq ?? stored.checkpoint.seq }
}
