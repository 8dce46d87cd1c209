import FoldtableCore
import Foundation

/// A webhook's target as an owner gives it: `http://` or `https://`, a host, an optional port
/// and path; no user info (credentials would sit in logs and exports), no fragment.
public struct WebhookURL: Sendable, Equatable {
    /// The URL as given (what is stored, shown and requested).
    public var text: String
    /// The host, lowercased, brackets off; a numeric IPv4 host in any form a resolver takes
    /// (`127.1`, `2130706433`, `0x7f.1`) written as its dotted decimal address.
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
        guard var host = HostSyntax.host(ofAuthority: String(authority)) else { throw refuse("has no valid host[:port]") }
        // A host ending in a number is an IPv4 address to URL parsers and to the resolver curl
        // uses (inet_aton): judged now as the address it is, not as a name to look up.
        if !host.contains(":"), Self.endsInANumber(host) {
            guard let address = Self.numericIPv4(host) else { throw refuse("has a host that ends in a number but is no IPv4 address") }
            host = address.map(String.init).joined(separator: ".")
        }
        self.text = text
        self.host = host
    }

    /// Whether the host's last label (a trailing dot aside) is all decimal digits or `0x` and
    /// hex digits: the WHATWG URL standard's test for an IPv4 host.
    static func endsInANumber(_ host: String) -> Bool {
        var labels = host.split(separator: ".", omittingEmptySubsequences: false)
        if labels.count > 1, labels.last?.isEmpty == true { labels.removeLast() }
        guard let last = labels.last, !last.isEmpty else { return false }
        if last.allSatisfy({ $0.isASCII && $0.isNumber }) { return true }
        let lower = last.lowercased()
        return lower.hasPrefix("0x") && lower.dropFirst(2).allSatisfy(\.isHexDigit)
    }

    /// The IPv4 address of a numeric host as the WHATWG URL standard (and inet_aton) reads it:
    /// one to four parts, each decimal, octal (a leading `0`) or hex (`0x`), the last filling the
    /// bytes left (`127.1` is 127.0.0.1, `2130706433` too); nil when it is none.
    static func numericIPv4(_ host: String) -> [UInt8]? {
        var labels = host.split(separator: ".", omittingEmptySubsequences: false)
        if labels.count > 1, labels.last?.isEmpty == true { labels.removeLast() }
        guard (1...4).contains(labels.count) else { return nil }
        var numbers: [UInt64] = []
        for label in labels {
            let lower = label.lowercased()
            let value: UInt64?
            // 20 digits at most: no part of a valid address is longer, and UInt64 holds them.
            guard !lower.isEmpty, lower.count <= 20 else { return nil }
            if lower.hasPrefix("0x") {
                value = lower.count == 2 ? 0 : UInt64(lower.dropFirst(2), radix: 16)
            } else if lower.count > 1 && lower.hasPrefix("0") {
                value = UInt64(lower.dropFirst(), radix: 8)
            } else {
                value = UInt64(lower, radix: 10)
            }
            guard let value else { return nil }
            numbers.append(value)
        }
        guard let last = numbers.popLast(), numbers.allSatisfy({ $0 <= 255 }) else { return nil }
        // The last part fills the 4 - (parts before it) bytes left.
        let lastBytes = 4 - numbers.count
        guard last < (UInt64(1) << (8 * UInt64(lastBytes))) else { return nil }
        var bytes = numbers.map { UInt8($0) }  // safe: each is at most 255, checked above
        for index in (0..<lastBytes).reversed() {
            bytes.append(UInt8(truncatingIfNeeded: last >> (8 * UInt64(index))))
        }
        return bytes
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
