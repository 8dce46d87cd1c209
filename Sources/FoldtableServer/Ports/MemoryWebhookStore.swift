/// The in-memory ``WebhookStore``: `--memory` (where nothing survives a restart anyway) and the
/// tests. Completions are posted to the service queue, never run inside the call.
public final class MemoryWebhookStore: WebhookStore {
    public private(set) var stored: [String: StoredWebhook] = [:]
    private let queue: ServiceQueue
    /// When set, every write fails with this error (tests of storage faults).
    public var failWrites: StoreError?

    public init(queue: ServiceQueue, webhooks: [StoredWebhook] = []) {
        self.queue = queue
        for webhook in webhooks { stored[webhook.session] = webhook }
    }

    public func webhooks() throws(StoreError) -> [StoredWebhook] { stored.keys.sorted().compactMap { stored[$0] } }

    public func saveWebhook(_ webhook: StoredWebhook, completion: @escaping (Result<Void, StoreError>) -> Void) {
        if failWrites == nil { stored[webhook.session] = webhook }
        later(completion)
    }

    public func saveWebhookCursor(
        session: String, epoch: String, delivered: UInt64, paused: String?, completion: @escaping (Result<Void, StoreError>) -> Void
    ) {
        if failWrites == nil, stored[session]?.epoch == epoch {
            stored[session]?.delivered = delivered
            stored[session]?.paused = paused
        }
        later(completion)
    }

    public func deleteWebhook(session: String, completion: @escaping (Result<Void, StoreError>) -> Void) {
        if failWrites == nil { stored[session] = nil }
        later(completion)
    }

    private func later(_ completion: @escaping (Result<Void, StoreError>) -> Void) {
        let result: Result<Void, StoreError> = failWrites.map { .failure($0) } ?? .success(())
        let work = ServiceThreadOnly(completion)
        queue.post { work.value(result) }
    }
}
