import FoldtableRedis
import FoldtableServer
import FoldtableStore

/// Who orders and keeps the sessions, decided here once from the settings: with `--redis`
/// every session is shared through Redis (opened, ordered and snapshotted there: no local store
/// is opened at all); otherwise they are this node's own, in SQLite under `--data-dir` (the
/// default) or in memory with `--memory`.
enum StorageSetup {
    struct Opened {
        /// What the hub is made with.
        let ordering: SessionOrderingChoice
        /// Whether storage takes writes now (`/readyz`); a broker's availability the ordering tells itself.
        let ready: () -> Bool
        /// With `--redis`: this node's id and broker, for metrics and the start line.
        let cluster: Cluster?
        /// Writes what is queued and stops the store's thread (SQLite only).
        let close: () -> Void
        /// Where invites and withdrawn token ids are kept: beside the sessions (Redis, SQLite or
        /// memory, whichever holds them).
        let invites: InviteLedger
        /// Where sessions' webhooks and cursors are kept, and the log they deliver from: nil
        /// with --redis (no node alone delivers a shared session's changes).
        var webhookStore: WebhookStore? = nil
        var eventLog: EventLog? = nil
    }

    /// Fails with one line naming the problem (unwritable directory, newer schema, ...).
    static func open(_ config: ServerConfig, transport: Transport) throws(StoreError) -> Opened {
        if let cluster = ClusterSetup.cluster(config, transport: transport) {
            // `cluster` is made with a RedisBroker (the only broker foldtabled has) from a URL the
            // config check read already.
            let invites: InviteLedger
            if let broker = cluster.broker as? RedisBroker, let url = try? RedisURL(parsing: config.redis) {
                invites = RedisInvites(broker: broker, options: RedisClient.Options(url: url))
            } else {
                invites = MemoryInviteLedger(queue: transport.serviceQueue)
            }
            return Opened(ordering: .shared(cluster), ready: { true }, cluster: cluster, close: {}, invites: invites)
        }
        let queue = transport.serviceQueue
        let store: SessionStore & EventLog
        let webhookStore: WebhookStore
        let names: [String]
        let close: () -> Void
        let invites: InviteLedger
        if config.memoryOnly {
            store = MemoryStore(keepEvents: max(config.historyEvents, config.historyKeepEvents), queue: queue)
            webhookStore = MemoryWebhookStore(queue: queue)
            (names, close) = ([], {})
            invites = MemoryInviteLedger(queue: queue)
        } else {
            let sqlite = try SQLiteStore(
                directory: config.dataDirectory, synchronous: config.synchronous == .full ? .full : .normal, keepEvents: config.historyEvents,
                historyKeepEvents: config.historyKeepEvents, limits: config.tableLimits, post: { queue.post($0) })
            store = sqlite
            invites = sqlite
            webhookStore = sqlite
            (names, close) = (
                try sqlite.sessionNames(),
                {
                    sqlite.flush()
                    sqlite.close()
                }
            )
        }
        // Between the hub and the store: notes the store's failures, so /readyz can say so.
        let monitor = StoreMonitor(store: store, log: store, clock: { transport.nowMilliseconds() })
        return Opened(
            ordering: .local(store: monitor, eventLog: monitor, names: names), ready: { monitor.isAvailable }, cluster: nil, close: close,
            invites: invites, webhookStore: webhookStore, eventLog: monitor)
    }
}
