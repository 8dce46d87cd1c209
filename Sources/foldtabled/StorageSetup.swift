import FoldtableServer

/// Opens the configured store: SQLite under `--data-dir`, or memory with `--memory`.
enum StorageSetup {
    struct Opened {
        let store: SessionStore
        let log: EventLog
        let names: [String]
    }

    static func open(_ config: ServerConfig, queue: ServiceQueue) -> Opened {
        let memory = MemoryStore(keepEvents: config.historyEvents, queue: queue)
        return Opened(store: memory, log: memory, names: [])
    }
}
