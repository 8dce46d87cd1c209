import FoldtableCore

/// Watches what the store reports, for readiness (`/readyz`): it stands between the hub and a
/// store, passes every call through unchanged and notes the outcomes.
///
/// The store is unavailable from a failure of kind ``StoreError/unavailable(_:)`` (the disk or
/// database refused: full, read-only, I/O error, locked) until a write succeeds again, or until
/// `failureWindowMs` pass without another such failure. The window matters: a node taken out of
/// rotation gets no writes, so "until a write succeeds" alone could keep it out forever; after
/// the window it is offered traffic again, and a store still failing takes it out at once.
/// Conflicts and corrupt data concern one session, not the store: they leave it available.
///
/// Appends are not wrapped one by one: the monitor is the log's ``EventLog/appendObserver`` and
/// notes each outcome as it is delivered (a wrapping closure per append was an allocation and
/// a call more on every change).
///
/// Service thread only, like the store calls it forwards.
public final class StoreMonitor: SessionStore, EventLog, LogAppender {
    private let store: SessionStore
    private let log: EventLog
    private let clock: () -> UInt64
    private let failureWindowMs: UInt64
    /// When the last unavailable failure was reported (monotonic ms), while it still counts.
    private var failedAt: UInt64?

    /// `clock` is monotonic milliseconds (the transport's).
    public init(store: SessionStore, log: EventLog, clock: @escaping () -> UInt64, failureWindowMs: UInt64 = 10_000) {
        self.store = store
        self.log = log
        self.clock = clock
        self.failureWindowMs = failureWindowMs
        log.appendObserver = self
    }

    /// Whether the store answers: no unavailable failure since the last successful write, within
    /// the window.
    public var isAvailable: Bool {
        guard let failedAt else { return true }
        return clock() &- failedAt >= failureWindowMs
    }

    private func noted<T>(_ result: Result<T, StoreError>, write: Bool) -> Result<T, StoreError> {
        switch result {
        case .failure(.unavailable): failedAt = clock()
        case .success where write: failedAt = nil
        default: break
        }
        return result
    }

    // MARK: - SessionStore

    public func sessionNames() throws(StoreError) -> [String] { try store.sessionNames() }

    public func load(_ name: String, completion: @escaping (Result<StoredSession?, StoreError>) -> Void) {
        store.load(name) { [self] result in completion(noted(result, write: false)) }
    }

    public func create(_ session: StoredSession, completion: @escaping (Result<Void, StoreError>) -> Void) {
        store.create(session) { [self] result in completion(noted(result, write: true)) }
    }

    public func saveCheckpoint(_ name: String, table: Table, views: SavedViews?, completion: @escaping (Result<Void, StoreError>) -> Void) {
        store.saveCheckpoint(name, table: table, views: views) { [self] result in completion(noted(result, write: true)) }
    }

    public func delete(_ name: String, completion: @escaping (Result<Void, StoreError>) -> Void) {
        store.delete(name) { [self] result in completion(noted(result, write: true)) }
    }

    public func flush() { store.flush() }

    // MARK: - EventLog

    public func append(session: String, events: [LoggedEvent], appender: LogAppender) {
        log.append(session: session, events: events, appender: appender)
    }

    /// Whoever watches the monitor's appends in turn (nobody, in foldtabled).
    public var appendObserver: LogAppender? {
        get { observer }
        set { observer = newValue }
    }
    /// Private storage behind `appendObserver`: read for every append, and a public stored
    /// property costs a runtime exclusivity check per read where a private one is proved exclusive.
    private weak var observer: LogAppender?

    /// As the log's observer: notes one append's outcome, before its appender hears of it.
    public func appendFinished(_ result: Result<UInt64, StoreError>) {
        // Noted first, not as the argument of an optional call (skipped without an observer).
        let result = noted(result, write: true)
        observer?.appendFinished(result)
    }

    public func read(session: String, after seq: UInt64, completion: @escaping (Result<[LoggedEvent]?, StoreError>) -> Void) {
        log.read(session: session, after: seq) { [self] result in completion(noted(result, write: false)) }
    }

    public func history(session: String, before: UInt64?, limit: Int, completion: @escaping (Result<HistoryPage, StoreError>) -> Void) {
        log.history(session: session, before: before, limit: limit) { [self] result in completion(noted(result, write: false)) }
    }
}
