/// What a member may do in a session.
public enum Role: String, Sendable, Comparable, CaseIterable {
    /// Sees the table; changes nothing.
    case viewer
    /// Changes the table.
    case editor
    /// Also changes the table's options and deletes the session.
    case owner

    private var rank: Int {
        switch self {
        case .viewer: return 0
        case .editor: return 1
        case .owner: return 2
        }
    }

    public static func < (lhs: Role, rhs: Role) -> Bool { lhs.rank < rhs.rank }
}

/// What a verified token grants its bearer.
public struct AccessGrant: Equatable, Sendable {
    /// The user id (`sub`).
    public var user: String
    /// The display name the token sets (`name`), overriding the one the client asks for.
    public var name: String?
    /// Session names the token opens; `nil` = every session (`"*"`).
    public var sessions: Set<String>?
    public var role: Role
    /// When the grant ends, in seconds since 1970 (`exp`).
    public var expires: UInt64

    public init(user: String, name: String?, sessions: Set<String>?, role: Role, expires: UInt64) {
        self.user = user
        self.name = name
        self.sessions = sessions
        self.role = role
        self.expires = expires
    }

    /// Whether the grant opens `session`.
    public func allows(_ session: String) -> Bool { sessions?.contains(session) ?? true }
}

/// Checks bearer tokens (a port: the HMAC implementation lives in FoldtableAuth, so the server
/// never touches OpenSSL).
public protocol TokenVerifier: Sendable {
    /// The grant in `token`, checked against the clock at `now` (seconds since 1970).
    func verify(_ token: String, now: UInt64) -> Result<AccessGrant, TokenRefusal>
}

/// Why a token was refused: one short sentence for the client, never the token itself.
public struct TokenRefusal: Error, Equatable, Sendable {
    public enum Reason: String, Sendable {
        case malformed, badSignature, unsupportedAlgorithm, expired, notYetValid, tooLarge, missingClaim
    }

    public var reason: Reason
    public var message: String

    public init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }
}
