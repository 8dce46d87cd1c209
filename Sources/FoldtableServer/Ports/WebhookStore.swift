/// A session's webhook as the store keeps it: where it goes, how it is signed, and how far the
/// receiver got.
public struct StoredWebhook: Sendable, Equatable {
    public var session: String
    public var url: String
    /// `whsec_...`: kept to sign, never listed.
    public var secret: String
    /// The session's epoch when the webhook was set (the middle part of `webhook-id`).
    public var epoch: String
    /// The last seq the receiver acknowledged.
    public var delivered: UInt64
    /// Why deliveries are paused (``WebhookState/Pause``'s raw value), or nil.
    public var paused: String?

    public init(session: String, url: String, secret: String, epoch: String, delivered: UInt64, paused: String? = nil) {
        self.session = session
        self.url = url
        self.secret = secret
        self.epoch = epoch
        self.delivered = delivered
        self.paused = paused
    }
}

/// Where webhooks and their cursors live between processes (SQLite beside the sessions, or
/// memory). Same threading as ``SessionStore``: called on the service thread, completions later
/// on the service thread, in call order. A session's webhook goes when the session is deleted
/// (the store removes it in the same write).
public protocol WebhookStore: AnyObject {
    /// Every stored webhook. Called once at start-up; may block.
    func webhooks() throws(StoreError) -> [StoredWebhook]
    /// Stores `webhook`, replacing the session's previous one; a store that keeps sessions
    /// writes nothing when the session is gone or has another epoch (deleted meanwhile).
    func saveWebhook(_ webhook: StoredWebhook, completion: @escaping (Result<Void, StoreError>) -> Void)
    /// Moves a session's cursor (and pause) without touching the rest, when its webhook was set
    /// in `epoch` (not one of a later session of that name).
    func saveWebhookCursor(
        session: String, epoch: String, delivered: UInt64, paused: String?, completion: @escaping (Result<Void, StoreError>) -> Void)
    /// Removes a session's webhook (success when there was none).
    func deleteWebhook(session: String, completion: @escaping (Result<Void, StoreError>) -> Void)
}
