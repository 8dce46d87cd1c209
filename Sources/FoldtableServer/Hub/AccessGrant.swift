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
    /// The token's id (`jti`): what withdraws it. `nil` for a token made without one, which
    /// stays valid until it expires.
    public var id: String?
    /// What the token was made for (`label`), shown to owners beside its members.
    public var label: String?
    /// Whether the token is a link many people may open (`"shared": true`: an invite): then
    /// its `sub` names the link, not a person, so each connection is its own author for change
    /// ids and undo, and no view is kept for the `sub` (two guests must not undo each other's
    /// changes or share a private view).
    public var shared: Bool

    public init(
        user: String, name: String?, sessions: Set<String>?, role: Role, expires: UInt64, id: String? = nil, label: String? = nil,
        shared: Bool = false
    ) {
        self.user = user
        self.name = name
        self.sessions = sessions
        self.role = role
        self.expires = expires
        self.id = id
        self.label = label
        self.shared = shared
    }

    /// A token id is at most this long: it is kept in the withdrawn list and travels in paths.
    public static let maxIdBytes = 64
    /// A label is at most this long (a few words: who or what the token is for).
    public static let maxLabelBytes = 128

    /// Whether `text` can be a token id (`jti`): 1 to ``maxIdBytes`` letters, digits, `_` or `-`
    /// (it travels in URL paths: `DELETE .../invites/ID`).
    public static func isValidId(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= maxIdBytes
            && text.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
            }
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
        /// An owner withdrew the token (its `jti`) before it expired.
        case withdrawn
    }

    public var reason: Reason
    public var message: String

    public init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }
}
