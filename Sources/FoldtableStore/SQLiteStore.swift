import CSQLite
import FoldtableCore
import FoldtableServer
import Glibc
import Synchronization

/// Sessions and their event logs in one SQLite database, `<directory>/foldtable.db`.
///
/// Threading: every method is called on the service thread and returns at once, except
/// ``sessionNames()``, ``flush()``, ``backup(to:)`` and ``close()``, which block. The work runs on
/// one writer thread that owns the connection (see ``StoreWriter``); results come back through
/// `post`, in call order. Appends queued in the same loop turn share one commit.
///
/// Errors: anything SQLite refuses (disk full, I/O error, locked, read-only, cannot open) fails the
/// operation, and every other write committed with it, with ``StoreError/unavailable(_:)``
/// carrying SQLite's message; nothing is reported as stored that was not committed. The store
/// keeps going: the next batch tries again, and succeeds once the condition clears.
///
/// Durability: WAL, with `synchronous=FULL` by default (a commit is fsynced before it is
/// reported: survives power loss). ``Synchronous/normal`` survives a crash of the process but may
/// lose the last commits on power loss.
public final class SQLiteStore: SessionStore, EventLog {
    /// SQLite's `synchronous` setting under WAL.
    public enum Synchronous: Sendable {
        /// Sync the WAL on every commit: an acknowledged change survives power loss.
        case full
        /// Sync only at checkpoints: survives a process crash, may lose recent commits on power loss.
        case normal
    }

    /// The database file's name inside the data directory.
    public static let fileName = "foldtable.db"

    /// The database file, `<directory>/foldtable.db`.
    public let path: String

    let writer: StoreWriter
    /// Operations asked during the current turn of the service loop (see `submit`).
    private let outbox = Mutex<[StoreOperation]>([])
    let post: @Sendable (@escaping @Sendable () -> Void) -> Void
    /// Hands the writer's outcomes to appenders and completions on the service thread.
    private let deliveries = StoreDeliveries()

    /// How long a statement waits for another connection's lock before failing with "busy".
    /// Short: the service must answer (with an error) rather than stall behind a stuck process.
    static let busyTimeoutMs = 1_000

    /// Bytes a page of a database this store creates (see `init`).
    static let pageSize = 16_384

    /// WAL bytes after which a commit copies the WAL back into the database (see `init`).
    static let walCheckpointBytes = 40 << 20

    /// Opens or creates `<directory>/foldtable.db` and starts the writer thread.
    ///
    /// Fails fast, with one line naming the path, when the directory is missing (and cannot be
    /// made), is not a directory or is not writable, when the database cannot be opened or
    /// written, or when it is from a newer schema. A missing directory is created only when its
    /// parent exists (like `mkdir`, not `mkdir -p`): a typo in a deep path should be an error,
    /// not a new tree.
    ///
    /// A database restored from ``backup(to:)`` gives every session a new epoch here, once.
    ///
    /// - Parameters:
    ///   - keepEvents: how many events at or before a checkpoint the log keeps for resume (what
    ///     loading a session reads).
    ///   - historyKeepEvents: how many it keeps for history (``history(session:before:limit:completion:)``);
    ///     the log keeps the larger of the two.
    ///   - limits: the limits stored tables are decoded with.
    ///   - post: hands a closure to the service thread (the transport's `post`); completions run
    ///     inside it. It must not run the closure inline on the calling thread.
    public init(
        directory: String, synchronous: Synchronous = .full, keepEvents: Int, historyKeepEvents: Int = 0, limits: TableLimits,
        post: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void
    ) throws(StoreError) {
        let directory = Self.trimmingTrailingSlashes(directory)
        try Self.prepareDirectory(directory)
        let path = (directory == "/" ? "" : directory) + "/" + Self.fileName
        self.path = path
        self.post = post

        let database: SQLiteDatabase
        do {
            database = try SQLiteDatabase(path: path)
        } catch {
            throw StoreError.unavailable("cannot open the database \(path): \(error)")
        }
        guard !database.isReadOnly else {
            throw StoreError.unavailable("the database \(path) is read-only")
        }
        do throws(SQLiteError) {
            try database.exec("PRAGMA busy_timeout = \(Self.busyTimeoutMs)")
            // 16 KiB pages for a new database (an existing one keeps its own: a WAL database's
            // page size is fixed once created). SQLite writes a WAL frame, and the checkpoint
            // reads and writes a page, a syscall a page: under 1,000 busy sessions, 0.20 writes
            // per acknowledged change with 4 KiB pages, 0.055 with 16 KiB, for 6% more bytes
            // (partly filled pages are written whole), and the writer took 18% less time an
            // event (`foldtable-bench store`, 1.46 -> 1.19 µs). 64 KiB pages were slower.
            try database.exec("PRAGMA page_size = \(Self.pageSize)")
            let mode = try database.scalarText("PRAGMA journal_mode = WAL")
            guard mode?.lowercased() == "wal" else {
                throw SQLiteError(code: SQLITE_ERROR, message: "journal mode stays \(mode ?? "unknown"), not WAL")
            }
            try database.exec("PRAGMA synchronous = \(synchronous == .full ? "FULL" : "NORMAL")")
            // 32 MiB of page cache (the default is 2 MiB): the sessions' rows and the log's newest
            // pages stay in memory instead of being read back with a syscall on every append.
            try database.exec("PRAGMA cache_size = -32768")
            // Copy the WAL back into the database every 40 MiB (10,000 pages of 4 KiB) instead of
            // SQLite's 1,000 pages: sessions' newest log pages are rewritten by every append, and
            // a checkpoint copies each page once however often it changed since the last one.
            // Counted in pages, so divided by the database's own page size.
            let pageSize = max(512, Int(try database.scalarInt("PRAGMA page_size") ?? 4_096))
            try database.exec("PRAGMA wal_autocheckpoint = \(Self.walCheckpointBytes / pageSize)")
            // Freed pages go to the free list as they are, SQLite's own default: Debian builds
            // SQLite with SECURE_DELETE, which zeroes every freed page and so writes it to the WAL
            // once more. The journal frees as many rows as it takes, so that was 18% of the
            // writer's time (`foldtable-bench store`: 2.35 → 1.92 µs an event) and kept the WAL
            // three times longer. Deleted bytes stay in free pages until reused (README, Storage).
            try database.exec("PRAGMA secure_delete = OFF")
        } catch {
            throw StoreError.unavailable("cannot set up the database \(path): \(error)")
        }
        try Migrations.migrate(database, now: String(time(nil)))

        let tables = SessionTables(database: database, keepEvents: keepEvents, historyKeepEvents: historyKeepEvents, limits: limits)
        do {
            try tables.rotateEpochsIfAsked()
        } catch {
            throw StoreError.unavailable("cannot give the sessions of the restored database \(path) new epochs: \(error)")
        }
        do {
            try tables.loadIndex()
        } catch {
            throw StoreError.unavailable("cannot read the journal of \(path): \(error)")
        }
        let deliveries = self.deliveries
        writer = StoreWriter(tables: tables) { batch in post { deliveries.run(batch) } }
        writer.start()
    }

    deinit {
        writer.close()
    }

    /// Runs what is queued, stops the writer thread and closes the database. Later calls fail
    /// with ``StoreError/unavailable(_:)``. Blocks until the thread is gone. Call it at shutdown:
    /// `deinit` does the same, but `post` often captures what owns the store, so the store may
    /// never be released before the process ends.
    public func close() {
        handOver()
        writer.close()
    }

    // MARK: - SessionStore

    /// Names of every stored session, sorted. Blocks until every earlier operation ran.
    public func sessionNames() throws(StoreError) -> [String] {
        let slot = ResultSlot<Result<[String], StoreError>>()
        guard
            writer.enqueue(
                .barrier { tables in
                    let result: Result<[String], StoreError>
                    do throws(SQLiteError) {
                        result = .success(try tables.sessionNames())
                    } catch {
                        result = .failure(error.storeError)
                    }
                    slot.set(result)
                })
        else { throw closedError }
        writer.flush()
        guard let result = slot.get() else { throw closedError }
        return try result.get()
    }

    /// The session and every event its log still holds.
    public func load(_ name: String, completion: @escaping (Result<StoredSession?, StoreError>) -> Void) {
        submit(.load(name, CompletionBox(completion)))
    }

    /// Stores a new session (its `events` must be empty), replacing one of the same name and its log.
    public func create(_ session: StoredSession, completion: @escaping (Result<Void, StoreError>) -> Void) {
        submit(.create(session, CompletionBox(completion)))
    }

    /// Saves `table` as the checkpoint (`.conflict` when it is past the log's last event or older
    /// than the stored checkpoint), with `views` when given (`nil`: the stored ones stay), then
    /// forgets events at or before `table.seq - keepEvents`.
    public func saveCheckpoint(_ name: String, table: Table, views: SavedViews?, completion: @escaping (Result<Void, StoreError>) -> Void) {
        submit(.saveCheckpoint(name, table, views, CompletionBox(completion)))
    }

    /// Removes the session and its log (success when there was none).
    public func delete(_ name: String, completion: @escaping (Result<Void, StoreError>) -> Void) {
        submit(.delete(name, CompletionBox(completion)))
    }

    /// Blocks until every operation asked so far ran and its completion was posted.
    public func flush() {
        handOver()
        writer.flush()
    }

    // MARK: - EventLog

    /// Appends consecutive events following the log's last one; `.conflict` (nothing written) when
    /// the session is not stored or the events do not follow.
    public func append(session: String, events: [LoggedEvent], appender: LogAppender) {
        submit(.append(session, events, CarriedAppender(retaining: appender)))
    }

    /// Told of every append's outcome first (the store's monitor).
    public var appendObserver: LogAppender? {
        get { deliveries.observer }
        set { deliveries.observer = newValue }
    }

    /// The events after `seq`: `[]` at the head, `nil` when the log no longer reaches `seq + 1`
    /// (or `seq` is past the head: another history), `.conflict` when the session is not stored.
    public func read(session: String, after seq: UInt64, completion: @escaping (Result<[LoggedEvent]?, StoreError>) -> Void) {
        submit(.read(session, after: seq, CompletionBox(completion)))
    }

    /// Up to `limit` events before seq `before` (`nil`: the newest), newest first, as far back
    /// as the log keeps them; `.conflict` when the session is not stored.
    public func history(session: String, before: UInt64?, limit: Int, completion: @escaping (Result<HistoryPage, StoreError>) -> Void) {
        submit(.history(session, before: before, limit: limit, CompletionBox(completion)))
    }

    // MARK: - Backup

    /// Copies the database to `path`, a file that must not exist yet, with SQLite's online backup
    /// (a consistent snapshot, taken from a connection of its own: the writer goes on serving).
    /// The copy is marked so that when a store is opened on it, every session gets a new epoch.
    /// Blocks the calling thread for the copy; any thread may call it.
    public func backup(to path: String) throws(StoreError) {
        try StoreBackup.copy(from: self.path, to: path, busyTimeoutMs: Self.busyTimeoutMs)
    }

    /// The same for the database in `directory`, without opening a store on it (so a running
    /// server keeps its writer): what `foldtabled backup DEST` does.
    public static func backup(directory: String, to path: String) throws(StoreError) {
        let source = (directory == "/" ? "" : trimmingTrailingSlashes(directory)) + "/" + fileName
        guard access(source, R_OK) == 0 else {
            throw StoreError.unavailable("there is no readable database at \(source)")
        }
        try StoreBackup.copy(from: source, to: path, busyTimeoutMs: busyTimeoutMs)
    }

    // MARK: - Internals

    /// Runs `body` on the writer thread after everything queued before it. For tests.
    func runOnWriter(_ body: @escaping @Sendable (SessionTables) -> Void) {
        _ = writer.enqueue(.barrier(body))
    }

    private var closedError: StoreError { .unavailable("the store \(path) is closed") }

    /// Collects operations until the current turn of the service loop ends, then hands them to
    /// the writer together (one lock, one wake-up). Handing each one over at once would wake the
    /// writer per append: on a busy core that preempts the service thread and commits batches of
    /// one, which is what group commit is there to avoid.
    func submit(_ operation: StoreOperation) {
        let first = outbox.withLock { outbox in
            outbox.append(operation)
            return outbox.count == 1
        }
        guard first else { return }
        // The box only carries the store to `handOver`, which is thread-safe (the outbox is a
        // Mutex, the writer locks its queue), whichever thread `post` runs it on.
        let store = ServiceThreadOnly(self)
        // Runs after everything the loop is doing now (the port's completions are posted the
        // same way, so ordering between operations is kept).
        post { store.value.handOver() }
    }

    private func handOver() {
        let writer = self.writer
        // Queued while the outbox is still locked: a `flush()` on another thread that finds the
        // outbox empty then also finds these operations at the writer, instead of returning
        // between the taking and the queueing. (The writer never takes this lock: no lock order
        // to break.)
        let refused = outbox.withLock { outbox -> [StoreOperation] in
            guard !outbox.isEmpty else { return [] }
            // Taken by the writer, usually by swapping arrays (its queue is empty between
            // batches): the outbox gets the writer's emptied storage for the next turn. Through a
            // local: the Mutex's value is only touched in this body (see Tests/sanitizers/tsan.supp).
            var taken: [StoreOperation] = []
            swap(&taken, &outbox)
            guard writer.enqueue(taking: &taken) else { return taken }
            swap(&taken, &outbox)
            return []
        }
        let failures = refused.compactMap { $0.failure(closedError) }
        guard !failures.isEmpty else { return }
        let deliveries = self.deliveries
        post { deliveries.run(failures) }
    }

    private static func trimmingTrailingSlashes(_ directory: String) -> String {
        var trimmed = Substring(directory)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        return trimmed.isEmpty ? "." : String(trimmed)
    }

    /// Checks that `directory` is a writable directory, creating it when only it is missing.
    private static func prepareDirectory(_ directory: String) throws(StoreError) {
        var info = stat()
        if stat(directory, &info) != 0 {
            let reason = errno
            guard reason == ENOENT else {
                throw StoreError.unavailable("cannot reach the data directory \(directory): \(describe(reason))")
            }
            // 0o750: tables are the users' data; the group may read for backups.
            guard mkdir(directory, 0o750) == 0 else {
                let why = errno == ENOENT ? "it does not exist, nor does its parent" : describe(errno)
                throw StoreError.unavailable("cannot create the data directory \(directory): \(why)")
            }
            return
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw StoreError.unavailable("the data directory \(directory) is not a directory")
        }
        // SQLite creates -wal and -shm files next to the database, so the directory itself
        // must be writable, not only the file.
        guard access(directory, W_OK | X_OK) == 0 else {
            throw StoreError.unavailable("the data directory \(directory) is not writable: \(describe(errno))")
        }
    }

    private static func describe(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}

extension SQLiteError {
    /// How a failure of SQLite is reported to the hub: damaged files are `.corrupt`; everything
    /// else (full, I/O, busy, locked, read-only, cannot open, ...) is `.unavailable`, which may pass.
    var storeError: StoreError {
        switch primaryCode {
        case SQLITE_CORRUPT, SQLITE_NOTADB: return .corrupt(description)
        default: return .unavailable(description)
        }
    }
}

/// A result handed from the writer thread to a caller that waits for it.
final class ResultSlot<Value: Sendable>: Sendable {
    private let state = Mutex<Value?>(nil)

    func set(_ value: Value) {
        state.withLock { $0 = value }
    }

    func get() -> Value? {
        state.withLock { $0 }
    }
}
