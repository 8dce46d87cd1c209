import FoldtableCore
import FoldtableServer

/// A completion on its way from the service thread to the writer thread and back.
///
/// `@unchecked Sendable` is safe because the closure is created on the service thread and only
/// ever called there (inside the closure given to `post`); the writer thread only carries the box
/// and never calls or inspects `body`. The closures capture service-thread objects, which is why
/// they are not `Sendable` themselves.
final class CompletionBox<Value: Sendable>: @unchecked Sendable {
    /// Dropped once called, so that what the closure captures (service-thread objects, perhaps
    /// the last reference to the hub or this store) is released on the service thread, never on
    /// the writer thread that may hold the box a moment longer.
    private var body: ((Result<Value, StoreError>) -> Void)?

    init(_ body: @escaping (Result<Value, StoreError>) -> Void) {
        self.body = body
    }

    /// Call only on the service thread, once.
    func callAsFunction(_ result: Result<Value, StoreError>) {
        let body = self.body
        self.body = nil
        body?(result)
    }
}

/// An append's ``LogAppender`` on its way to the writer thread and back, kept alive by one
/// reference taken on the service thread when the append is asked and given back there once
/// its outcome is delivered.
///
/// The writer thread never owns a reference: if it held the last one, the appender (a session)
/// would be freed there, and with it what only the service thread may touch (the transport's
/// frames keep a plain C reference count). `@unchecked Sendable` for the same reason: the
/// appender is only used on the service thread.
struct CarriedAppender: @unchecked Sendable {
    private unowned(unsafe) let appender: LogAppender

    /// Service thread: takes the reference that ``deliver(_:)`` gives back.
    init(retaining appender: LogAppender) {
        _ = Unmanaged.passRetained(appender as AnyObject)
        self.appender = appender
    }

    /// Service thread, exactly once per carried appender (every append gets one outcome).
    func deliver(_ result: Result<UInt64, StoreError>) {
        appender.appendFinished(result)
        Unmanaged.passUnretained(appender as AnyObject).release()
    }
}

/// An outcome on its way back to the service thread: an append's for its appender (no closure
/// per append: thousands a second), or any other operation's completion, ready to call.
enum StoreDelivery: Sendable {
    case appended(CarriedAppender, Result<UInt64, StoreError>)
    case completion(@Sendable () -> Void)
}

/// Hands outcomes to whoever asked, on the service thread: appends' to the log's observer, then
/// to their appender; the rest to their completion.
///
/// `@unchecked Sendable`: the writer thread only carries it into the closure it posts; the
/// observer is read and written on the service thread only.
final class StoreDeliveries: @unchecked Sendable {
    /// ``EventLog/appendObserver``.
    weak var observer: LogAppender?

    /// Service thread only.
    func run(_ deliveries: [StoreDelivery]) {
        for delivery in deliveries {
            switch delivery {
            case .appended(let appender, let result):
                observer?.appendFinished(result)
                appender.deliver(result)
            case .completion(let body):
                body()
            }
        }
    }
}

/// One request queued for the writer thread. Payloads are values, so they cross threads as they
/// are; encoding to storage bytes happens on the writer, off the service thread.
enum StoreOperation: Sendable {
    case load(String, CompletionBox<StoredSession?>)
    case read(String, after: UInt64, CompletionBox<[LoggedEvent]?>)
    case history(String, before: UInt64?, limit: Int, CompletionBox<HistoryPage>)
    case append(String, [LoggedEvent], CarriedAppender)
    case create(StoredSession, CompletionBox<Void>)
    case saveCheckpoint(String, Table, SavedViews?, CompletionBox<Void>)
    case delete(String, CompletionBox<Void>)
    /// A webhook's row written in the batch's transaction (see `SQLiteStore+Webhooks`): a
    /// cursor moved by a delivery rides in the next group commit instead of syncing on its own.
    case webhook(@Sendable (SQLiteDatabase) throws(SQLiteError) -> Void, CompletionBox<Void>)
    /// Runs `body` on the writer thread in queue order, outside any transaction (start-up reads,
    /// tests). Nothing is posted.
    case barrier(@Sendable (SessionTables) -> Void)

    /// Whether the operation writes, and so joins the batch's transaction.
    var writes: Bool {
        switch self {
        case .append, .create, .saveCheckpoint, .delete, .webhook: return true
        case .load, .read, .history, .barrier: return false
        }
    }

    /// The delivery of `error` to this operation's completion, to run on the service thread.
    func failure(_ error: StoreError) -> StoreDelivery? {
        switch self {
        case .load(_, let completion): return .completion { completion(.failure(error)) }
        case .read(_, _, let completion): return .completion { completion(.failure(error)) }
        case .history(_, _, _, let completion): return .completion { completion(.failure(error)) }
        case .append(_, _, let appender): return .appended(appender, .failure(error))
        case .create(_, let completion): return .completion { completion(.failure(error)) }
        case .saveCheckpoint(_, _, _, let completion): return .completion { completion(.failure(error)) }
        case .delete(_, let completion): return .completion { completion(.failure(error)) }
        case .webhook(_, let completion): return .completion { completion(.failure(error)) }
        case .barrier: return nil
        }
    }
}
