/// The ASCII grammar of hosts, ports and addresses in request headers (RFC 3986 §3.2.2), read as
/// bytes: a header is hostile input, and in Swift `"1\u{301}"` is one `Character` that sorts
/// between "0" and "9" without being a digit, so grammar read as `Character`s lets non-ASCII
/// through to code that trusted it (a trap then ends every session). Anything not ASCII fails.
enum HostSyntax {
    /// The longest authority (`host[:port]`) read: a DNS name is at most 253 bytes.
    static let maxAuthorityBytes = 255

    /// The host of an authority: `host`, `host:port`, `[v6]`, `[v6]:port`, or a bare IPv6
    /// literal; ASCII-lowercased, brackets off. `nil` unless every part is well formed: an IPv4
    /// dotted quad, an IPv6 literal or a DNS name, and a port of 1–5 digits up to 65535.
    static func host(ofAuthority text: String) -> String? {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty, bytes.count <= maxAuthorityBytes else { return nil }
        let host: ArraySlice<UInt8>
        var port: ArraySlice<UInt8>?
        if bytes[0] == UInt8(ascii: "[") {
            guard let close = bytes.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            host = bytes[1..<close]
            let rest = bytes[(close + 1)...]
            if let first = rest.first {
                guard first == UInt8(ascii: ":") else { return nil }
                port = rest.dropFirst()
            }
            guard isIPv6(host) else { return nil }
        } else if bytes.count(where: { $0 == UInt8(ascii: ":") }) > 1 {
            host = bytes[...]  // a bare IPv6 literal (as `--host ::` is written)
            guard isIPv6(host) else { return nil }
        } else {
            if let colon = bytes.firstIndex(of: UInt8(ascii: ":")) {
                host = bytes[..<colon]
                port = bytes[(colon + 1)...]
            } else {
                host = bytes[...]
            }
            guard isIPv4(host) || isDNSName(host) else { return nil }
        }
        if let port, !isPort(port) { return nil }
        return String(decoding: host.map(lowercased), as: UTF8.self)
    }

    /// An IPv4 dotted quad or an IPv6 literal (no brackets).
    static func isIPLiteral(_ text: some StringProtocol) -> Bool {
        let bytes = Array(text.utf8)[...]
        return isIPv4(bytes) || isIPv6(bytes)
    }

    /// Four parts of 1–3 ASCII digits, each at most 255.
    static func isIPv4(_ bytes: ArraySlice<UInt8>) -> Bool {
        guard bytes.count <= 15 else { return false }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy(isOctet)
    }

    /// 1–3 ASCII digits worth at most 255 (three digits cannot overflow the sum).
    private static func isOctet(_ part: ArraySlice<UInt8>) -> Bool {
        guard (1...3).contains(part.count), part.allSatisfy(isDigit) else { return false }
        return part.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) } <= 255
    }

    /// RFC 4291 §2.2 text: eight groups of 1–4 hex digits, at most one `::` standing for one or
    /// more zero groups, and optionally an IPv4 dotted quad for the last two groups.
    static func isIPv6(_ bytes: ArraySlice<UInt8>) -> Bool {
        guard (2...45).contains(bytes.count) else { return false }
        let colon = UInt8(ascii: ":")
        var double: Int?
        var index = bytes.startIndex
        while index < bytes.endIndex - 1 {
            if bytes[index] == colon && bytes[index + 1] == colon {
                guard double == nil else { return false }  // a second `::`
                double = index
                index += 2
            } else {
                index += 1
            }
        }
        func groups(_ side: ArraySlice<UInt8>, last: Bool) -> Int? {
            if side.isEmpty { return 0 }
            let parts = side.split(separator: colon, omittingEmptySubsequences: false)
            var count = 0
            for (position, part) in parts.enumerated() {
                if last && position == parts.count - 1 && part.contains(UInt8(ascii: ".")) {
                    guard isIPv4(part) else { return nil }
                    count += 2
                } else {
                    guard (1...4).contains(part.count), part.allSatisfy(isHexDigit) else { return nil }
                    count += 1
                }
            }
            return count
        }
        if let double {
            guard let head = groups(bytes[..<double], last: false), let tail = groups(bytes[(double + 2)...], last: true) else { return false }
            return head + tail <= 7
        }
        return groups(bytes, last: true) == 8
    }

    /// Dot-separated labels of 1–63 ASCII letters, digits, `-` or `_`, 253 bytes at most; no
    /// empty label (so no leading, trailing or doubled dot).
    static func isDNSName(_ bytes: ArraySlice<UInt8>) -> Bool {
        guard (1...253).contains(bytes.count) else { return false }
        return bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false).allSatisfy { label in
            (1...63).contains(label.count)
                && label.allSatisfy { isDigit($0) || isLetter($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") }
        }
    }

    /// 1–5 ASCII digits worth at most 65535 (five digits cannot overflow an `Int`).
    static func isPort(_ bytes: ArraySlice<UInt8>) -> Bool {
        guard (1...5).contains(bytes.count), bytes.allSatisfy(isDigit) else { return false }
        return bytes.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) } <= 65_535
    }

    static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    static func isHexDigit(_ byte: UInt8) -> Bool {
        isDigit(byte) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "f")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "F"))
    }

    static func isLetter(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
    }

    /// ASCII-only lowercasing: other bytes stay as they are.
    static func lowercased(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 32 : byte
    }

    /// Printable ASCII without space (0x21–0x7E): what an Origin or a URL may hold.
    static func isVisibleASCII(_ byte: UInt8) -> Bool { byte > 0x20 && byte < 0x7F }
}
