/// Which HTTP requests and WebSocket upgrades the server answers, decided from their headers
/// before anything else happens: pure, so every rule is tested without sockets.
///
/// - **Host** must name this server: an IP literal (a DNS-rebinding attack needs a name),
///   `localhost`, the bound host, or a host of `--public-url`. Anything else gets 421: a page
///   on `evil.example` whose name was rebound to 127.0.0.1 cannot reach the server.
/// - **Origin**, when sent (browsers), must be an allowed origin (`--allowed-origins`, the
///   `--public-url`s) or the page's own origin, which then carries an allowed Host. Comparing
///   Origin with Host alone is not enough: after a rebinding both come from the attacker.
/// - The client's **address** is the TCP peer's, or, when the peer is a trusted proxy, the last
///   address of its `X-Forwarded-For` (the one that proxy saw).
public struct RequestPolicy: Sendable, Equatable {
    /// Host names (lowercase, no port) besides IP literals and `localhost`.
    public var hostNames: Set<String>
    /// Origins allowed besides the page's own (`scheme://host[:port]`, as browsers send them).
    public var origins: Set<String>
    /// Proxies whose `X-Forwarded-For` is believed.
    public var trustedProxies: Set<String>

    public init(hostNames: Set<String> = [], origins: Set<String> = [], trustedProxies: Set<String> = []) {
        self.hostNames = Set(hostNames.map { $0.lowercased() })
        self.origins = origins
        self.trustedProxies = trustedProxies
    }

    /// The policy a configuration asks for.
    public init(_ config: ServerConfig) {
        var names: Set<String> = []
        var origins = Set(config.allowedOrigins)
        if !Self.isIPLiteral(config.host) { names.insert(config.host) }
        for url in config.publicURLs {
            if let authority = Self.authority(ofURL: url) {
                names.insert(Self.hostPart(of: authority))
                origins.insert(Self.origin(ofURL: url))
            }
        }
        self.init(hostNames: names, origins: origins, trustedProxies: Set(config.trustedProxies))
    }

    /// Whether a request with this Host header is for this server.
    public func allowsHost(_ host: String?) -> Bool {
        guard let host, !host.isEmpty, host.utf8.count <= 255 else { return false }
        let name = Self.hostPart(of: host.lowercased())
        return Self.isIPLiteral(name) || name == "localhost" || hostNames.contains(name)
    }

    /// Whether an upgrade with these Origin and Host headers may proceed (Host is checked too).
    public func allowsOrigin(_ origin: String?, host: String?) -> Bool {
        guard allowsHost(host) else { return false }
        guard let origin else { return true }  // not a browser: nothing to hijack
        if origins.contains(origin) || origins.contains("*") { return true }
        guard let host, let schemeEnd = origin.range(of: "://") else { return false }
        return origin[schemeEnd.upperBound...].lowercased() == host.lowercased()
    }

    /// The client's address: the peer's, or the proxy's account of it when the peer is trusted.
    public func clientAddress(peer: String, forwardedFor: String?) -> String {
        guard trustedProxies.contains(peer), let forwardedFor,
            let last = forwardedFor.split(separator: ",").last?.trimmingWhitespace, Self.isIPLiteral(last)
        else { return peer }
        return last
    }

    // MARK: - Parsing

    /// `host` of `host:port`, `[v6]:port`, `host` (brackets kept off an IPv6 literal).
    static func hostPart(of authority: String) -> String {
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
            return String(authority[authority.index(after: authority.startIndex)..<close])
        }
        if authority.filter({ $0 == ":" }).count > 1 { return authority }  // a bare IPv6 literal
        return authority.split(separator: ":", maxSplits: 1).first.map(String.init) ?? authority
    }

    static func authority(ofURL url: String) -> String? {
        guard let schemeEnd = url.range(of: "://") else { return nil }
        let rest = url[schemeEnd.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        return authority.isEmpty ? nil : String(authority).lowercased()
    }

    /// `scheme://authority` of a URL, the form of an Origin header.
    static func origin(ofURL url: String) -> String {
        guard let schemeEnd = url.range(of: "://"), let authority = authority(ofURL: url) else { return url }
        return url[..<schemeEnd.lowerBound].lowercased() + "://" + authority
    }

    /// A dotted IPv4 address or an IPv6 literal (hex groups and colons, optionally with a
    /// dotted IPv4 tail).
    static func isIPLiteral(_ text: some StringProtocol) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        if parts.count == 4 && parts.allSatisfy({ part in part.count <= 3 && !part.isEmpty && part.allSatisfy(\.isASCIIDigit) && Int(part)! <= 255 })
        {
            return true
        }
        guard text.contains(":") else { return false }
        return text.allSatisfy { $0 == ":" || $0 == "." || $0.isHexDigit }
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}

extension Substring {
    fileprivate var trimmingWhitespace: String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
