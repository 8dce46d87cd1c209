/// Which HTTP requests and WebSocket upgrades the server answers, decided from their headers
/// before anything else happens: pure, so every rule is tested without sockets.
///
/// - **Host** must name this server: an IP literal (a DNS-rebinding attack needs a name),
///   `localhost`, the bound host, or a host of `--public-url`. Anything else gets 421: a page
///   on `evil.example` whose name was rebound to 127.0.0.1 cannot reach the server.
/// - **Origin**, when sent (browsers), must be an allowed origin (`--allowed-origins`, the
///   `--public-url`s, and for WebSockets only also `--embed-origins`) or the page's own origin,
///   which then carries an allowed Host. Comparing Origin with Host alone is not enough: after a
///   rebinding both come from the attacker.
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

    /// The policy a configuration asks for WebSocket upgrades: a site that embeds a table must
    /// also reach it, so an embed origin is an allowed one here.
    public init(_ config: ServerConfig) {
        self.init(config, embedding: true)
    }

    /// The policy a configuration asks for the HTTP API: as for WebSockets, but without the embed
    /// origins. An embedded table only needs the WebSocket; a page on a listed blog sending
    /// `POST /api/...` (a no-cors fetch needs no preflight) must not fold or delete sessions.
    public static func api(_ config: ServerConfig) -> RequestPolicy {
        RequestPolicy(config, embedding: false)
    }

    private init(_ config: ServerConfig, embedding: Bool) {
        var names: Set<String> = []
        var origins = Set(config.allowedOrigins)
        if embedding { origins.formUnion(config.embedOrigins.map(Self.origin(ofURL:))) }
        if !Self.isIPLiteral(config.host) { names.insert(config.host) }
        for url in config.publicURLs {
            if let authority = Self.authority(ofURL: url) {
                names.insert(Self.hostPart(of: authority))
                origins.insert(Self.origin(ofURL: url))
            }
        }
        self.init(hostNames: names, origins: origins, trustedProxies: Set(config.trustedProxies))
    }

    /// Whether a request with this Host header is for this server. A Host that is not ASCII
    /// host grammar (a combining mark, a full-width digit, a port past 65535) is refused.
    public func allowsHost(_ host: String?) -> Bool {
        guard let host, let name = HostSyntax.host(ofAuthority: host) else { return false }
        return HostSyntax.isIPLiteral(name) || name == "localhost" || hostNames.contains(name)
    }

    /// Whether an upgrade with these Origin and Host headers may proceed (Host is checked too).
    /// Compared as ASCII bytes: an Origin that is not visible ASCII matches nothing.
    public func allowsOrigin(_ origin: String?, host: String?) -> Bool {
        guard allowsHost(host) else { return false }
        guard let origin else { return true }  // not a browser: nothing to hijack
        if origins.contains("*") { return true }
        let bytes = Array(origin.utf8)
        guard !bytes.isEmpty, bytes.allSatisfy(HostSyntax.isVisibleASCII) else { return false }
        if origins.contains(origin) { return true }
        guard let host, let schemeEnd = Self.schemeEnd(bytes) else { return false }
        return bytes[schemeEnd...].map(HostSyntax.lowercased) == host.utf8.map(HostSyntax.lowercased)
    }

    /// The client's address: the peer's, or the proxy's account of it when the peer is trusted
    /// and its last `X-Forwarded-For` entry is an IP literal (anything else: the peer's).
    public func clientAddress(peer: String, forwardedFor: String?) -> String {
        guard trustedProxies.contains(peer), let forwardedFor else { return peer }
        let bytes = Array(forwardedFor.utf8)
        var last = bytes[(bytes.lastIndex(of: UInt8(ascii: ",")).map { $0 + 1 } ?? 0)...]
        while let first = last.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { last = last.dropFirst() }
        while let end = last.last, end == UInt8(ascii: " ") || end == UInt8(ascii: "\t") { last = last.dropLast() }
        guard HostSyntax.isIPv4(last) || HostSyntax.isIPv6(last) else { return peer }
        return String(decoding: last, as: UTF8.self)
    }

    // MARK: - Parsing

    /// `host` of `host:port`, `[v6]:port`, `host` (brackets kept off an IPv6 literal), or the
    /// authority itself when it is not well formed.
    static func hostPart(of authority: String) -> String {
        HostSyntax.host(ofAuthority: authority) ?? authority
    }

    /// The authority of `scheme://authority/...`, ASCII-lowercased; `nil` without `://`, with an
    /// empty authority, or with bytes that are not visible ASCII.
    static func authority(ofURL url: String) -> String? {
        let bytes = Array(url.utf8)
        guard let start = schemeEnd(bytes) else { return nil }
        let authority = bytes[start...].prefix { $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }
        guard !authority.isEmpty, authority.allSatisfy(HostSyntax.isVisibleASCII) else { return nil }
        return String(decoding: authority.map(HostSyntax.lowercased), as: UTF8.self)
    }

    /// `scheme://authority` of a URL, the form of an Origin header.
    public static func origin(ofURL url: String) -> String {
        let bytes = Array(url.utf8)
        guard let start = schemeEnd(bytes), let authority = authority(ofURL: url) else { return url }
        return String(decoding: bytes[..<(start - 3)].map(HostSyntax.lowercased), as: UTF8.self) + "://" + authority
    }

    /// The index just past the first `://`, if any.
    private static func schemeEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 3 else { return nil }
        for index in 0...(bytes.count - 3)
        where bytes[index] == UInt8(ascii: ":") && bytes[index + 1] == UInt8(ascii: "/") && bytes[index + 2] == UInt8(ascii: "/") {
            return index + 3
        }
        return nil
    }

    /// A dotted IPv4 address or an IPv6 literal, read as ASCII bytes.
    static func isIPLiteral(_ text: some StringProtocol) -> Bool { HostSyntax.isIPLiteral(text) }
}
