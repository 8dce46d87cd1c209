/// Where a Redis server is: `redis://[[user]:password@]host[:port][/db]`.
///
/// `rediss://` (Redis over TLS) is refused: hiredis 0.14.1, the version Debian 12 ships, has no
/// TLS at all (it came with hiredis 1.0 as a separate library). A clear refusal at start-up beats
/// a connection that silently sends the password in clear text.
public struct RedisURL: Equatable, Sendable, CustomStringConvertible {
    /// A host name, an IPv4 address or an IPv6 address (without its brackets).
    public var host: String
    /// Default 6379.
    public var port: Int
    /// The logical database selected after connecting. Default 0.
    public var database: Int
    /// For `AUTH username password` (Redis 6 ACLs); `nil` with a password alone: `AUTH password`.
    public var username: String?
    public var password: String?

    public init(host: String, port: Int = 6379, database: Int = 0, username: String? = nil, password: String? = nil) {
        self.host = host
        self.port = port
        self.database = database
        self.username = username
        self.password = password
    }

    /// Why a URL was refused; `message` is one line naming what is wrong.
    public struct ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    /// Reads `text`; throws one clear line for anything it cannot use.
    public init(parsing text: String) throws(ParseError) {
        guard let schemeEnd = text.range(of: "://") else {
            throw ParseError(message: "\"\(Self.redacted(text))\" is not a Redis URL (redis://host:port/db)")
        }
        let scheme = text[..<schemeEnd.lowerBound].lowercased()
        switch scheme {
        case "redis": break
        case "rediss":
            throw ParseError(
                message: "rediss:// (TLS) is not possible: hiredis 0.14.1 has no TLS; "
                    + "reach Redis over a private network or a local TLS tunnel (stunnel, spiped) with redis://")
        default:
            throw ParseError(message: "unsupported scheme \"\(scheme)://\" (only redis://host:port/db)")
        }
        var rest = text[schemeEnd.upperBound...]
        if rest.contains("?") || rest.contains("#") {
            throw ParseError(message: "a Redis URL takes no query or fragment (redis://host:port/db)")
        }
        // Credentials end at the last "@": a password may hold "@" only percent-encoded, but
        // taking the last one keeps a stray one in the password rather than in the host.
        var username: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = credentials.firstIndex(of: ":") {
                let user = try Self.percentDecoded(credentials[..<colon])
                username = user.isEmpty ? nil : user
                password = try Self.percentDecoded(credentials[credentials.index(after: colon)...])
            } else {
                // `redis://secret@host` is how many tools write a password alone.
                password = try Self.percentDecoded(credentials)
            }
            if password?.isEmpty == true { password = nil }
        }
        let authority: Substring
        let path: Substring
        if let slash = rest.firstIndex(of: "/") {
            authority = rest[..<slash]
            path = rest[rest.index(after: slash)...]
        } else {
            authority = rest
            path = ""
        }
        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw ParseError(message: "unclosed \"[\" in the host of the Redis URL") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw ParseError(message: "unexpected \"\(after)\" after the host of the Redis URL") }
                portText = after.dropFirst()
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        } else {
            host = authority
        }
        guard !host.isEmpty else { throw ParseError(message: "the Redis URL names no host (redis://host:port/db)") }
        var port = 6379
        if let portText {
            guard let value = Int(portText), (1...65_535).contains(value) else {
                throw ParseError(message: "port \"\(portText)\" of the Redis URL is not a number from 1 to 65535")
            }
            port = value
        }
        var database = 0
        if !path.isEmpty {
            guard let value = Int(path), value >= 0, value <= Int(Int32.max) else {
                throw ParseError(message: "database \"\(path)\" of the Redis URL is not a number (redis://host:port/0)")
            }
            database = value
        }
        self.init(host: String(host), port: port, database: database, username: username, password: password)
    }

    /// The URL with the password replaced by `***`: for logs and error messages.
    public var description: String {
        var credentials = ""
        if password != nil {
            credentials = "\(username ?? ""):***@"
        } else if let username {
            credentials = "\(username)@"
        }
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "redis://\(credentials)\(shownHost):\(port)/\(database)"
    }

    /// `text` with anything between "://" and "@" hidden, for an error about a URL that did not parse.
    private static func redacted(_ text: String) -> String {
        guard let at = text.lastIndex(of: "@") else { return text }
        guard let schemeEnd = text.range(of: "://"), at > schemeEnd.upperBound else { return "***" + String(text[at...]) }
        return String(text[..<schemeEnd.upperBound]) + "***" + String(text[at...])
    }

    private static func percentDecoded(_ text: Substring) throws(ParseError) -> String {
        var bytes: [UInt8] = []
        var index = text.utf8.startIndex
        let utf8 = text.utf8
        while index < utf8.endIndex {
            let byte = utf8[index]
            if byte == UInt8(ascii: "%") {
                let first = utf8.index(after: index)
                guard first < utf8.endIndex, utf8.index(after: first) < utf8.endIndex,
                    let high = hexValue(utf8[first]), let low = hexValue(utf8[utf8.index(after: first)])
                else {
                    throw ParseError(message: "a bad %-escape in the credentials of the Redis URL")
                }
                bytes.append(high << 4 | low)
                index = utf8.index(first, offsetBy: 2)
            } else {
                bytes.append(byte)
                index = utf8.index(after: index)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
