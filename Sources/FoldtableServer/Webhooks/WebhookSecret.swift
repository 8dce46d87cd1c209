import FoldtableCore
import Foundation

/// A webhook's signing secret in the Standard Webhooks form: `whsec_` and the base64 of 24 to 64
/// random bytes; the HMAC key is the decoded bytes.
public struct WebhookSecret: Sendable, Equatable {
    /// The text form (`whsec_...`): what the owner gets once and the store keeps.
    public var text: String
    /// The HMAC-SHA256 key.
    public var key: [UInt8]

    public static let prefix = "whsec_"
    /// Key bytes allowed: below 24 (192 bits) is weak, and the convention caps it at 64.
    public static let keyBytes = 24...64
    /// Bytes of a generated key.
    public static let generatedBytes = 32

    /// Reads a given secret, or throws an `invalid_value` error naming the field `secret`.
    public init(_ text: String) throws(ProtocolError) {
        let refusal = ProtocolError(
            .invalidValue, "secret must be whsec_ followed by the base64 of \(Self.keyBytes.lowerBound) to \(Self.keyBytes.upperBound) bytes",
            field: "secret")
        guard text.hasPrefix(Self.prefix), text.utf8.count <= 200, let key = Data(base64Encoded: String(text.dropFirst(Self.prefix.count))),
            Self.keyBytes.contains(key.count)
        else { throw refusal }
        self.text = text
        self.key = Array(key)
    }

    /// A new random secret (the system's generator: getrandom).
    public static func generate() -> WebhookSecret {
        var generator = SystemRandomNumberGenerator()
        let key = (0..<generatedBytes).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return WebhookSecret(text: prefix + Data(key).base64EncodedString(), key: key)
    }

    private init(text: String, key: [UInt8]) {
        self.text = text
        self.key = key
    }
}
