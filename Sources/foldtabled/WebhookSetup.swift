import FoldtableServer
import FoldtableWebhook

/// Sessions' webhooks, wired when this node stores its sessions itself (SQLite or memory): the
/// libcurl sender with the operator's address policy, and the deliveries the store remembers
/// (a restart goes on from each receiver's cursor). With --redis nothing is wired and the API
/// refuses webhooks (see SessionAPI's webhook routes).
enum WebhookSetup {
    static func start(
        _ config: ServerConfig, storage: StorageSetup.Opened, hub: Hub, post: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void
    ) throws(StoreError) {
        guard let store = storage.webhookStore, let eventLog = storage.eventLog else { return }
        let policy: WebhookAddressPolicy
        do {
            policy = try WebhookAddressPolicy(allowing: config.webhookAllow)
        } catch {
            // Checked with the other settings before start; kept so a refusal can never pass silently.
            throw StoreError.unavailable(error.message)
        }
        let sender = try CurlSender(
            policy: policy, connectTimeoutMs: config.webhookConnectMs, timeoutMs: config.webhookTimeoutMs,
            maxConnections: config.webhookMaxConnections,
            post: post)
        let limits = WebhookState.Limits(
            maxBacklogEvents: UInt64(config.webhookBacklogBound), pauseAfterMs: UInt64(config.webhookPauseSecs) * 1_000,
            backoff: WebhookBackoff(baseMs: 1_000, maxMs: UInt64(config.webhookRetryMaxMs)))
        let webhooks = Webhooks(
            hub: hub, store: store, eventLog: eventLog, sender: sender,
            settings: Webhooks.Settings(limits: limits, policy: policy, maxSessions: config.webhookMaxSessions))
        hub.webhooks = webhooks
        try webhooks.start()
    }
}
