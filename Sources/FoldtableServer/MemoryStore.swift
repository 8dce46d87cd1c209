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

    /// `keepEvents`: events kept before the newest checkpoint, for resume.
    public init(keepEvents: Int, queue: ServiceQueue) {
        self.keepEvents = keepEvents
        self.queue = queue
    }

    private func later<T>(_ completion: @escaping (T) -> Void, _ result: T) {
        let box = ServiceThreadOnly((completion, result))
        // Posted, not called: the port promises completions never run inside the call.
        queue.post { box.value.0(box.value.1) }
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

    public func saveCheckpoint(_ name: String, table: Table, completion: @escaping (Result<Void, StoreError>) -> Void) {
        if let failWrites { return later(completion, .failure(failWrites)) }
        guard var stored = sessions[name], table.seq <= lastSeq(stored) else {
            return later(completion, .failure(.conflict("no session \(name) at \(table.seq)")))
        }
        stored.checkpoint = table
        let keepFrom = table.seq > UInt64(keepEvents) ? table.seq - UInt64(keepEvents) : 0
        stored.events.removeAll { $0.event.seq <= keepFrom }
        sessions[name] = stored
        later(completion, .success(()))
    }

    public func delete(_ name: String, completion: @escaping (Result<Void, StoreError>) -> Void) {
        if let failWrites { return later(completion, .failure(failWrites)) }
        sessions[name] = nil
        later(completion, .success(()))
    }

    public func flush() {}

    public func append(session name: String, events: [LoggedEvent], completion: @escaping (Result<UInt64, StoreError>) -> Void) {
        if let failWrites { return later(completion, .failure(failWrites)) }
        guard let index = sessions.index(forKey: name) else { return later(completion, .failure(.conflict("no session \(name)"))) }
        // Worked on in place through the dictionary's values, never copied out and back: a copy
        // of a stored session retains its whole checkpoint table, and copying the log back would
        // copy every event.
        later(completion, Self.append(events, to: &sessions.values[index], keepEvents: keepEvents))
    }

    private static func append(_ events: [LoggedEvent], to stored: inout StoredSession, keepEvents: Int) -> Result<UInt64, StoreError> {
        let last = stored.events.last?.event.seq ?? stored.checkpoint.seq
        guard let first = events.first else { return .failure(.conflict("nothing to append to \(stored.name)")) }
        guard first.event.seq == last + 1 else { return .failure(.conflict("event \(first.event.seq) does not follow \(last)")) }
        // Without the encoded bytes the caller may carry: a cache, not worth its memory here.
        for logged in events { stored.events.append(LoggedEvent(event: logged.event, request: logged.request)) }
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

    private func lastSeq(_ stored: StoredSession) -> UInt64 { stored.events.last?.event.seq ?? stored.checkpoint.seq }
}
