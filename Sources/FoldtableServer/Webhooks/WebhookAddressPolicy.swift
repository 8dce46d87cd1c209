import FoldtableCore
import Foundation

/// Which addresses a webhook may connect to: the SSRF guard.
///
/// A webhook's URL is chosen by a session's owner, not by the operator, so a request to it must
/// not reach what only the server's host can reach (a metadata service on 169.254.169.254, an
/// admin port on loopback, the office network). By default only public addresses are allowed;
/// `--webhook-allow` lists the CIDRs (and host names) the operator lets through besides.
///
/// Checked twice: on the URL's host when it is an address literal (a PUT is refused at once), and
/// on the address actually connected to, after DNS (the HTTP client asks before each connect), so
/// a name that resolves, or later rebinds, to a refused address still fails.
///
/// Public is not enough: this host's own addresses (``HostAddresses``) are refused too, as
/// `local`, since a POST to them reaches the host itself, past any firewall in front of it.
public struct WebhookAddressPolicy: Sendable, Equatable {
    /// Why an address is not public. `nil` from ``category(of:)``: a public address.
    public enum Category: String, Sendable, Equatable {
        case unspecified, loopback, `private`
        case linkLocal = "link_local"
        case sharedCGNAT = "cgnat"
        case multicast, reserved
        /// One of this host's own addresses (``HostAddresses``), public or not.
        case local
    }

    /// One allowed range: an IPv4 (4 bytes) or IPv6 (16 bytes) prefix.
    public struct Range: Sendable, Equatable {
        public var prefix: [UInt8]
        public var bits: Int

        /// Whether `address` (of the same family) falls in the range.
        public func contains(_ address: [UInt8]) -> Bool {
            guard address.count == prefix.count else { return false }
            var left = bits
            for (have, want) in zip(address, prefix) {
                guard left > 0 else { return true }
                let take = min(8, left)
                let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - take))
                if have & mask != want & mask { return false }
                left -= take
            }
            return true
        }
    }

    /// CIDRs allowed whatever their category.
    public private(set) var ranges: [Range] = []
    /// Host names (lowercased) whose URLs are allowed whatever they resolve to: the operator
    /// vouches for the name.
    public private(set) var hosts: Set<String> = []
    /// This host's own addresses, refused unless a range lists them.
    public let ownAddresses: HostAddresses

    /// Only public addresses that are not this host's own (`ownAddresses`).
    public init(ownAddresses: HostAddresses = HostAddresses()) {
        self.ownAddresses = ownAddresses
    }

    public static func == (left: Self, right: Self) -> Bool {
        left.ranges == right.ranges && left.hosts == right.hosts && left.ownAddresses === right.ownAddresses
    }

    /// From `--webhook-allow` items: `127.0.0.1/32`, `10.0.0.0/8`, `::1/128`, an address alone
    /// (a /32 or /128), or a host name. Throws a line naming the first item it cannot read.
    public init(allowing items: [String], ownAddresses: HostAddresses = HostAddresses()) throws(ProtocolError) {
        self.ownAddresses = ownAddresses
        for item in items {
            let text = item.trimmingCharacters(in: .whitespaces)
            let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            if let address = Self.parseAddress(parts[0]) {
                let most = address.count * 8
                var bits = most
                if parts.count == 2 {
                    guard let given = Int(parts[1]), (0...most).contains(given) else {
                        throw ProtocolError(.invalidValue, "--webhook-allow \(item): the prefix length must be 0 to \(most)", field: "webhook-allow")
                    }
                    bits = given
                }
                ranges.append(Range(prefix: address, bits: bits))
            } else if parts.count == 1, HostSyntax.isDNSName(Array(text.utf8)[...]) {
                hosts.insert(text.lowercased())
            } else {
                throw ProtocolError(
                    .invalidValue, "--webhook-allow \(item) is neither a CIDR (10.0.0.0/8, ::1/128) nor a host name", field: "webhook-allow")
            }
        }
    }

    /// Whether the URL host `host` is one the operator listed by name.
    public func allowsHost(_ host: String) -> Bool { hosts.contains(host.lowercased()) }

    /// Why `address` (4 or 16 bytes) may not be connected to, or `nil` when it may: a public
    /// address, or one in a listed range. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is
    /// judged as the IPv4 address it carries, against both families' ranges; so are the IPv4
    /// addresses inside 6to4 (`2002::/16`) and NAT64 (`64:ff9b::/96`) addresses. An address
    /// otherwise public is refused as `local` when it is one of this host's own.
    public func refusal(of address: [UInt8]) -> Category? {
        if ranges.contains(where: { $0.contains(address) }) { return nil }
        let inner = Self.embeddedIPv4(address)
        if let inner, ranges.contains(where: { $0.contains(inner) }) { return nil }
        if let category = Self.category(of: address) { return category }
        if ownAddresses.contains(address) || inner.map(ownAddresses.contains) == true { return .local }
        return nil
    }

    /// The category of an address that is not public, or `nil` for a public one.
    public static func category(of address: [UInt8]) -> Category? {
        if let inner = mappedIPv4(address) { return category(of: inner) }
        if address.count == 4 {
            let (a, b) = (address[0], address[1])
            if address == [0, 0, 0, 0] { return .unspecified }
            if a == 127 { return .loopback }
            if a == 10 || (a == 172 && (16...31).contains(b)) || (a == 192 && b == 168) { return .private }
            if a == 169 && b == 254 { return .linkLocal }
            if a == 100 && (64...127).contains(b) { return .sharedCGNAT }
            if (224...239).contains(a) { return .multicast }
            // 0/8 ("this network"), 240/4 (reserved, and the broadcast address).
            if a == 0 || a >= 240 { return .reserved }
            // RFC 6890's other special-purpose blocks: IETF protocol assignments 192.0.0/24,
            // documentation (192.0.2/24, 198.51.100/24, 203.0.113/24), benchmarking 198.18/15,
            // the 6to4 relay anycast 192.88.99/24.
            let c = address[2]
            if a == 192 && b == 0 && (c == 0 || c == 2) { return .reserved }
            if a == 198 && (b == 18 || b == 19) { return .reserved }
            if (a == 198 && b == 51 && c == 100) || (a == 203 && b == 0 && c == 113) || (a == 192 && b == 88 && c == 99) { return .reserved }
            return nil
        }
        guard address.count == 16 else { return .reserved }
        if address.allSatisfy({ $0 == 0 }) { return .unspecified }
        if address.prefix(15).allSatisfy({ $0 == 0 }) && address[15] == 1 { return .loopback }
        if address[0] & 0xFE == 0xFC { return .private }
        if address[0] == 0xFE && address[1] & 0xC0 == 0x80 { return .linkLocal }
        // Site-local fec0::/10: deprecated, but still a network's own.
        if address[0] == 0xFE && address[1] & 0xC0 == 0xC0 { return .private }
        if address[0] == 0xFF { return .multicast }
        // 6to4 and well-known NAT64 carry an IPv4 address that the packet reaches in the end.
        if let inner = embeddedIPv4(address) { return category(of: inner) }
        // NAT64's local-use 64:ff9b:1::/48 translates to whatever the site chose: not judged.
        if address.starts(with: [0x00, 0x64, 0xFF, 0x9B, 0x00, 0x01]) { return .reserved }
        // ::/96 (IPv4-compatible, deprecated) and the rest of ::/8 are not routable.
        if address[0] == 0 { return .reserved }
        // Teredo 2001::/32 (tunnels to an address it does not show), documentation 2001:db8::/32,
        // discard-only 100::/64.
        if address.starts(with: [0x20, 0x01, 0x00, 0x00]) || address.starts(with: [0x20, 0x01, 0x0D, 0xB8]) { return .reserved }
        if address.starts(with: [0x01, 0x00, 0, 0, 0, 0, 0, 0]) { return .reserved }
        return nil
    }

    /// The IPv4 address an IPv6 address leads to: inside `::ffff:a.b.c.d` (mapped), 6to4
    /// `2002:AABB:CCDD::/48` or the well-known NAT64 prefix `64:ff9b::/96`; else nil.
    static func embeddedIPv4(_ address: [UInt8]) -> [UInt8]? {
        if let mapped = mappedIPv4(address) { return mapped }
        guard address.count == 16 else { return nil }
        if address[0] == 0x20 && address[1] == 0x02 { return Array(address[2..<6]) }
        if address.starts(with: [0x00, 0x64, 0xFF, 0x9B]) && address[4..<12].allSatisfy({ $0 == 0 }) { return Array(address[12...]) }
        return nil
    }

    /// The IPv4 address inside `::ffff:a.b.c.d`, else nil.
    static func mappedIPv4(_ address: [UInt8]) -> [UInt8]? {
        guard address.count == 16, address.prefix(10).allSatisfy({ $0 == 0 }), address[10] == 0xFF, address[11] == 0xFF else { return nil }
        return Array(address[12...])
    }

    /// The bytes of an IPv4 (`a.b.c.d`) or IPv6 literal (brackets allowed), else nil.
    public static func parseAddress(_ text: String) -> [UInt8]? {
        var text = Substring(text)
        if text.hasPrefix("[") && text.hasSuffix("]") { text = text.dropFirst().dropLast() }
        if let v4 = parseIPv4(text) { return v4 }
        return parseIPv6(text)
    }

    private static func parseIPv4(_ text: Substring) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var bytes: [UInt8] = []
        for part in parts {
            // Decimal only, no leading zeros: "010" is octal to some resolvers.
            guard !part.isEmpty, part.count <= 3, part.allSatisfy(\.isASCIIDigit), part == "0" || !part.hasPrefix("0"),
                let value = UInt8(part)
            else { return nil }
            bytes.append(value)
        }
        return bytes
    }

    private static func parseIPv6(_ text: Substring) -> [UInt8]? {
        guard text.contains(":"), text.utf8.count <= 45 else { return nil }
        let halves = text.components(separatedBy: "::")
        guard halves.count <= 2 else { return nil }
        func groups(_ part: String) -> [UInt8]? {
            guard !part.isEmpty else { return [] }
            var out: [UInt8] = []
            let pieces = part.split(separator: ":", omittingEmptySubsequences: false)
            for (index, piece) in pieces.enumerated() {
                if index == pieces.count - 1, piece.contains("."), let v4 = parseIPv4(piece) {
                    out += v4
                    continue
                }
                guard (1...4).contains(piece.count), let value = UInt16(piece, radix: 16) else { return nil }
                out += [UInt8(value >> 8), UInt8(value & 0xFF)]
            }
            return out
        }
        guard let head = groups(halves[0]) else { return nil }
        if halves.count == 1 { return head.count == 16 ? head : nil }
        guard let tail = groups(halves[1]), head.count + tail.count <= 14 else { return nil }
        return head + [UInt8](repeating: 0, count: 16 - head.count - tail.count) + tail
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
