import Foundation

/// Signs a webhook message the Standard Webhooks way: `v1,` and the base64 of
/// HMAC-SHA256(key, `id.timestamp.body`), sent as `webhook-signature` beside `webhook-id` and
/// `webhook-timestamp`, so receivers can verify with the convention's libraries.
public enum WebhookSignature {
    /// The `webhook-signature` value for message `id` sent at `timestamp` (Unix seconds).
    public static func sign(key: [UInt8], id: String, timestamp: UInt64, body: [UInt8]) -> String {
        var message = Array(id.utf8)
        message.append(UInt8(ascii: "."))
        message += Array(String(timestamp).utf8)
        message.append(UInt8(ascii: "."))
        message += body
        return "v1," + Data(HMACTokens.hmac(key, message)).base64EncodedString()
    }
}
