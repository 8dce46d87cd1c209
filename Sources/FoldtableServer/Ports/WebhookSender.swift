/// One POST of a webhook: everything the HTTP client needs, signing included (the client signs
/// each attempt with the time it is made, as the Standard Webhooks convention has it).
public struct WebhookRequest: Sendable {
    public var url: String
    /// `webhook-id`: the same for every attempt of this message.
    public var id: String
    public var body: [UInt8]
    /// The HMAC-SHA256 key (the secret's decoded bytes).
    public var key: [UInt8]
    /// The session and seq, for the client's log lines.
    public var session: String
    public var seq: UInt64

    public init(url: String, id: String, body: [UInt8], key: [UInt8], session: String, seq: UInt64) {
        self.url = url
        self.id = id
        self.body = body
        self.key = key
        self.session = session
        self.seq = seq
    }
}

/// How one attempt ended.
public enum WebhookResult: Sendable, Equatable {
    /// The receiver answered with this status (2xx: delivered; anything else: failed).
    case answered(status: Int)
    /// The connection was refused by the address policy (``WebhookAddressPolicy``) after DNS:
    /// the category of the address it resolved to.
    case refused(address: String, WebhookAddressPolicy.Category)
    /// No answer: connection refused, DNS failure, TLS failure, timeout (the client's message).
    case unreachable(String)
    /// The whole attempt ran out of time.
    case timedOut

    /// Whether the receiver took the message.
    public var isDelivered: Bool {
        if case .answered(let status) = self { return (200...299).contains(status) }
        return false
    }

    /// A short label for logs and metrics.
    public var reason: String {
        switch self {
        case .answered(let status): return "status_\(status)"
        case .refused(_, let category): return "refused_\(category.rawValue)"
        case .unreachable: return "unreachable"
        case .timedOut: return "timeout"
        }
    }
}

/// The HTTP client webhooks are POSTed with. Called on the service thread; `completion` runs on
/// the service thread later (never inside the call). The client bounds each attempt's time
/// (connect and total), follows no redirect, speaks only http and https, and connects only
/// where its address policy allows.
public protocol WebhookSender: AnyObject {
    func send(_ request: WebhookRequest, completion: @escaping (WebhookResult) -> Void)
}
