import FoldtableServer
import FoldtableStore

/// Opens the configured store: SQLite under `--data-dir` (the default), or memory with `--memory`.
enum StorageSetup {
    struct Opened {
        let store: SessionStore
        let log: EventLog
        let names: [String]
        /// Stops the store's thread after everything queued is written (SQLite only).
        let close: () -> Void
    }

    /// Fails with one line naming the problem (unwritable directory, newer schema, ...).
    static func open(_ config: ServerConfig, queue: ServiceQueue) throws(StoreError) -> Opened {
        if config.memoryOnly {
            let memory = MemoryStore(keepEvents: config.historyEvents, queue: queue)
            return Opened(store: memory, log: memory, names: [], close: {})
        }
        let sqlite = try SQLiteStore(
            directory: config.dataDirectory, synchronous: config.synchronous == .full ? .full : .normal, keepEvents: config.historyEvents,
            limits: config.tableLimits, post: { queue.post($0) })
        return Opened(store: sqlite, log: sqlite, names: try sqlite.sessionNames(), close: { sqlite.close() })
    }
}
