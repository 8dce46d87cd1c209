import FoldtableCore
import Foundation

/// A webhook's target as an owner gives it: `http://` or `https://`, a host, an optional port
/// and path; no user info (credentials would sit in logs and exports), no fragment.
public struct WebhookURL: Sendable, Equatable {
    /// The URL as given (what is stored, shown and requested).
    public var text: String
    /// The host, lowercased, brackets off.
    public var host: String

    /// URLs longer than this are refused: they are stored, listed and logged.
    public static let maxBytes = 2_048

    /// Reads `text`, or throws an `invalid_value` error naming the field `url`.
    public init(_ text: String) throws(ProtocolError) {
        func refuse(_ why: String) -> ProtocolError { ProtocolError(.invalidValue, "url \(why)", field: "url") }
        guard !text.isEmpty, text.utf8.count <= Self.maxBytes else { throw refuse("must be 1 to \(Self.maxBytes) bytes") }
        guard text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { throw refuse("must be ASCII without spaces or control characters") }
        let lower = text.lowercased()
        let rest: Substring
        if lower.hasPrefix("https://") {
            rest = text.dropFirst("https://".count)
        } else if lower.hasPrefix("http://") {
            rest = text.dropFirst("http://".count)
        } else {
            throw refuse("must start with https:// or http://")
        }
        guard !text.contains("#") else { throw refuse("must not have a fragment") }
        let authority = rest.prefix { $0 != "/" && $0 != "?" }
        guard !authority.contains("@") else { throw refuse("must not carry a user name or password") }
        guard let host = HostSyntax.host(ofAuthority: String(authority)) else { throw refuse("has no valid host[:port]") }
        self.text = text
        self.host = host
    }

    /// Why the policy refuses the URL's host, when it is an address literal the policy refuses;
    /// `nil` for a name (judged after DNS, at delivery) or an allowed address.
    public func literalRefusal(_ policy: WebhookAddressPolicy) -> WebhookAddressPolicy.Category? {
        guard !policy.allowsHost(host), let address = WebhookAddressPolicy.parseAddress(host) else {
            // `localhost` is a name, but one that never leaves the host: judged as loopback now,
            // not only at delivery.
            if host == "localhost" || host.hasSuffix(".localhost"), !policy.allowsHost(host) {
                return policy.refusal(of: [127, 0, 0, 1])
            }
            return nil
        }
        return policy.refusal(of: address)
    }
}
