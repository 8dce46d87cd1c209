import FoldtableCore

/// One committed event as a log holds it.
public struct LoggedEvent: Equatable, Sendable {
    public var event: TableEvent {
        didSet { entryIsEncoded = Self.entryIsEncoded(event, request, encoded) }
    }
    /// The change as its author sent it, when the author gave a change id (the id window must
    /// tell a retry from a different change that reuses the id). `nil` otherwise.
    public var request: Change? {
        didSet { entryIsEncoded = Self.entryIsEncoded(event, request, encoded) }
    }
    /// The event as members receive it (`ServerMessage.event(_:)`), when it was encoded
    /// already: a log stores these bytes instead of encoding the event a second time. Only a
    /// cache of `event`, so equality ignores it.
    public var encoded: [UInt8]? {
        didSet { entryIsEncoded = Self.entryIsEncoded(event, request, encoded) }
    }
    /// Whether a log's entry for this event is `encoded` and nothing more
    /// (`TableCheckpoint.entryIsEventBytes(_:request:)`). Found where the event is made, so
    /// that the log's thread writes such an entry without reading the event: handing the event
    /// to a function copied it first (every string and array in it retained, then released),
    /// and the event's parts were made on another thread and are cold in this one's cache.
    public private(set) var entryIsEncoded: Bool

    private static func entryIsEncoded(_ event: TableEvent, _ request: Change?, _ encoded: [UInt8]?) -> Bool {
        encoded != nil && TableCheckpoint.entryIsEventBytes(event, request: request)
    }

    public static func == (lhs: LoggedEvent, rhs: LoggedEvent) -> Bool {
        lhs.event == rhs.event && lhs.request == rhs.request
    }
}

// In an extension, so that the struct keeps its memberwise initializer: delegating to it builds
// the value whole. Assigning the properties one by one in the initializer built it in a stack
// slot that the optimizer could not promote, and returned it with a full copy (every string
// and array in the event retained) and a destroy of the slot, on the service thread for every
// change (read in the SIL and the disassembly of `SessionCore.apply`).
extension LoggedEvent {
    public init(event: TableEvent, request: Change? = nil, encoded: [UInt8]? = nil) {
        // Found first: the event's last use is then its move into place, not a copy.
        let entryIsEncoded = Self.entryIsEncoded(event, request, encoded)
        self.init(event: event, request: request, encoded: encoded, entryIsEncoded: entryIsEncoded)
    }
}

/// A session as a store holds it.
public struct StoredSession: Sendable {
    public var name: String
    /// The session's incarnation: stays across restarts, changes when the session is deleted and
    /// created again or restored from a backup, so `since` values of another history cannot resume.
    public var epoch: String
    /// The table at the newest checkpoint, its change-id window included.
    public var checkpoint: Table
    /// The log's events a session needs to open, oldest first: those after the checkpoint (to
    /// replay) and up to the resume window before it (for resume; the log may keep more before
    /// it for history, read with ``EventLog/history(session:before:limit:completion:)``).
    /// Sequence numbers are consecutive.
    public var events: [LoggedEvent]
    /// Token users' private views as of the newest save that carried them (empty: none, or
    /// stored by a build that kept none).
    public var views: SavedViews

    public init(name: String, epoch: String, checkpoint: Table, events: [LoggedEvent] = [], views: SavedViews = SavedViews()) {
        self.name = name
        self.epoch = epoch
        self.checkpoint = checkpoint
        self.events = events
        self.views = views
    }
}

/// Why a store could not do what was asked. The hub turns every case into a
/// `storage_unavailable` error reply; nothing is acknowledged that was not committed.
public enum StoreError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The disk or database refused (full, I/O error, locked, read-only). May pass.
    case unavailable(String)
    /// The events do not follow what the log holds for the session (an earlier append of the
    /// same session failed, or the session is gone). The appender must reload before writing.
    case conflict(String)
    /// Stored data could not be decoded.
    case corrupt(String)

    public var description: String {
        switch self {
        case .unavailable(let why): return "storage unavailable: \(why)"
        case .conflict(let why): return "storage conflict: \(why)"
        case .corrupt(let why): return "stored data is corrupt: \(why)"
        }
    }
}

/// Where sessions live between processes: tables at checkpoints, keyed by session name.
///
/// Every method is called on the service thread and returns at once; `completion` runs later on
/// the service thread (never inside the call), in the order the calls were made. An
/// implementation that does I/O does it on threads of its own and hands results back through the
/// ``Transport/post(_:)`` it was given.
public protocol SessionStore: AnyObject {
    /// Names of every stored session, sorted. Called once at start-up, before serving.
    func sessionNames() throws(StoreError) -> [String]
    /// The session with `name` (checkpoint and log), or `nil` when none is stored.
    func load(_ name: String, completion: @escaping (Result<StoredSession?, StoreError>) -> Void)
    /// Stores a new session: `session.checkpoint` is its table (and `session.views` its saved
    /// views), `session.events` must be empty. Replaces a stored session of the same name, with
    /// its log and views.
    func create(_ session: StoredSession, completion: @escaping (Result<Void, StoreError>) -> Void)
    /// Saves `table` as the session's checkpoint and lets the log forget what it no longer needs
    /// (events at or before `table.seq` beyond the resume and history windows). `views`, when
    /// given, replace the session's saved views in the same write; `nil` keeps the stored ones
    /// (they did not change since, and may weigh far more than the table).
    func saveCheckpoint(_ name: String, table: Table, views: SavedViews?, completion: @escaping (Result<Void, StoreError>) -> Void)
    /// Removes the session and its log.
    func delete(_ name: String, completion: @escaping (Result<Void, StoreError>) -> Void)
    /// Blocks until everything asked so far is committed or failed (and its completion posted).
    /// For shutdown only: it is the one call allowed to wait.
    func flush()
}

/// The ordered, durable log of each session's events.
///
/// Designed for two kinds of sequencer. On one node (SQLite, memory) the session's table is the
/// sequencer: it assigns `seq` and the log confirms. When several nodes share a session (Redis
/// Streams), the log is the sequencer: entries are ordered by the stream, every node applies them
/// in that order, and the seq the append's completion carries is the one the order assigned.
/// Either way nothing is acknowledged or broadcast before the append's completion reports it.
public protocol EventLog: AnyObject {
    /// Appends consecutive events of one session. The first must follow the last event the log
    /// holds for `session` (else `.conflict`, and nothing is written). `appender` is told on the
    /// service thread once they are durable, with the seq of the last event (see
    /// ``LogAppender``). Appends made in one turn of the loop may share one commit (group
    /// commit): a failed commit fails every append in it, a conflict only its own.
    ///
    /// An object, not a closure per call: a session appends on every turn it changes, and a
    /// closure (with the store's own wrapping of it) was several allocations per append.
    func append(session: String, events: [LoggedEvent], appender: LogAppender)
    /// The logged events of `session` after `seq`, oldest first; `nil` when the log no longer
    /// reaches back to `seq + 1` (the caller then sends a fresh welcome).
    func read(session: String, after seq: UInt64, completion: @escaping (Result<[LoggedEvent]?, StoreError>) -> Void)
    /// Up to `limit` logged events of `session` before seq `before` (`nil`: the newest), newest
    /// first, as far back as the log keeps them (its history bound: ``ServerConfig/historyKeepEvents``
    /// at or before the newest checkpoint, and every event after it); `.conflict` when the
    /// session is not stored.
    func history(session: String, before: UInt64?, limit: Int, completion: @escaping (Result<HistoryPage, StoreError>) -> Void)
    /// Told of every append's outcome, in order, just before the append's own appender (the
    /// ``StoreMonitor`` watching the log for readiness). Not retained: its owner keeps it alive.
    var appendObserver: LogAppender? { get set }
}

/// Who is told how its appends to an ``EventLog`` went: usually a session, the same object for
/// every append it makes.
///
/// Called on the service thread, never inside ``EventLog/append(session:events:appender:)``,
/// once per append, in the order the appends were made. The log keeps the appender alive until
/// then.
public protocol LogAppender: AnyObject {
    /// `result`: the seq of the append's last event, or why nothing of it is stored.
    func appendFinished(_ result: Result<UInt64, StoreError>)
}

extension SessionStore {
    /// ``saveCheckpoint(_:table:views:completion:)`` keeping the stored views.
    public func saveCheckpoint(_ name: String, table: Table, completion: @escaping (Result<Void, StoreError>) -> Void) {
        saveCheckpoint(name, table: table, views: nil, completion: completion)
    }
}

extension EventLog {
    /// ``append(session:events:appender:)`` with a closure: for tests and rare callers (one
    /// allocation per call, which the sessions' appends avoid).
    public func append(session: String, events: [LoggedEvent], completion: @escaping (Result<UInt64, StoreError>) -> Void) {
        append(session: session, events: events, appender: ClosureAppender(completion))
    }
}

/// A closure as a ``LogAppender``.
private final class ClosureAppender: LogAppender {
    private let body: (Result<UInt64, StoreError>) -> Void

    init(_ body: @escaping (Result<UInt64, StoreError>) -> Void) {
        self.body = body
    }

    func appendFinished(_ result: Result<UInt64, StoreError>) { body(result) }
}
