/// A `ws://` or `wss://` address of a foldtabled WebSocket endpoint, checked strictly.
///
/// Parsed here (not by libwebsockets) so that a mistyped address fails before any connection
/// with one line that says what is wrong, and so the rules are testable without a network.
public struct ServerURL: Equatable, Sendable, CustomStringConvertible {
    /// `wss://`.
    public var tls: Bool
    /// A host name, an IPv4 address, or an IPv6 address without its brackets.
    public var host: String
    public var port: Int
    /// Starts with `/`; includes the query, if any. `/ws` when the URL has no path.
    public var path: String

    public init(tls: Bool, host: String, port: Int, path: String) {
        self.tls = tls
        self.host = host
        self.port = port
        self.path = path
    }

    public var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        let defaultPort = port == (tls ? 443 : 80)
        return "\(tls ? "wss" : "ws")://\(shownHost)\(defaultPort ? "" : ":\(port)")\(path)"
    }

    /// Parses `text`, or says in one sentence why it is not a usable address.
    public static func parse(_ text: String) throws(UsageError) -> ServerURL {
        func bad(_ why: String) -> UsageError { UsageError("bad URL \"\(DisplayText.sanitize(String(text.prefix(200))))\": \(why)") }
        guard let colon = text.firstIndex(of: ":"), text[colon...].hasPrefix("://") else {
            throw bad("it must start with ws:// or wss://")
        }
        let tls: Bool
        switch text[..<colon].lowercased() {
        case "ws": tls = false
        case "wss": tls = true
        case "http", "https": throw bad("use ws:// or wss:// (the WebSocket endpoint, e.g. ws://host:8080/ws)")
        default: throw bad("it must start with ws:// or wss://")
        }
        let rest = text[text.index(colon, offsetBy: 3)...]
        guard !rest.contains(where: { $0.isWhitespace || $0.asciiValue.map { $0 < 0x20 || $0 == 0x7F } == true }) else {
            throw bad("it contains spaces or control characters")
        }
        if rest.contains("#") { throw bad("it must not have a #fragment") }
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        var path = String(rest[authorityEnd...])
        if path.isEmpty {
            path = "/ws"
        } else if path.hasPrefix("?") {
            path = "/ws" + path
        }
        if authority.contains("@") { throw bad("user names and passwords are not supported") }

        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw bad("an IPv6 address lacks its closing ]") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw bad("unexpected text after the IPv6 address") }
                portText = after.dropFirst()
            }
            guard !host.isEmpty, host.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else {
                throw bad("\"\(host)\" is not an IPv6 address")
            }
        } else {
            if let colon = authority.firstIndex(of: ":") {
                host = authority[..<colon]
                portText = authority[authority.index(after: colon)...]
            } else {
                host = authority
            }
            guard !host.isEmpty else { throw bad("the host is missing") }
            guard host.utf8.count <= 253,
                host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "." || $0 == "_") })
            else {
                throw bad("\"\(host)\" is not a host name")
            }
        }
        var port = tls ? 443 : 80
        if let portText {
            guard let number = Int(portText), portText.allSatisfy(\.isASCII), (1...65_535).contains(number) else {
                throw bad("the port must be a number from 1 to 65535")
            }
            port = number
        }
        guard path.utf8.count <= 2_000 else { throw bad("the path is too long") }
        return ServerURL(tls: tls, host: String(host), port: port, path: path)
    }
}
