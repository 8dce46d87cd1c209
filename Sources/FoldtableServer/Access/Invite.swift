import FoldtableCore

/// A token an owner minted through the invites API (`POST /api/v1/sessions/N/invites`), as
/// the server keeps it for listing and withdrawing: never the token itself, which the server
/// can make again from these fields and its secret but never needs to.
public struct Invite: Equatable, Sendable {
    /// The token's `jti`.
    public var id: String
    /// The one session the token opens.
    public var session: String
    public var role: Role
    /// What the owner wrote to recognise it ("" when none).
    public var label: String
    /// When it was minted and when it expires, in seconds since 1970.
    public var created: UInt64
    public var expires: UInt64
    /// Who minted it: the minting token's `sub`.
    public var createdBy: String

    public init(id: String, session: String, role: Role, label: String, created: UInt64, expires: UInt64, createdBy: String) {
        self.id = id
        self.session = session
        self.role = role
        self.label = label
        self.created = created
        self.expires = expires
        self.createdBy = createdBy
    }

    /// `{"id":..,"role":..,"label":..,"created":N,"expires":N,"createdBy":..}`: what the API
    /// lists and Redis keeps of an invite (never a token).
    public var json: [UInt8] {
        var out = JSONWriter(capacity: 128 + label.utf8.count)
        out.raw("{\"id\":")
        out.string(id)
        writeFields(into: &out)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// The fields after the id, each after a comma: for an answer that adds its own (the token
    /// a mint answers with).
    public func writeFields(into out: inout JSONWriter) {
        out.nextKey("role")
        out.string(role.rawValue)
        out.nextKey("label")
        out.string(label)
        out.nextKey("created")
        out.integer(created)
        out.nextKey("expires")
        out.integer(expires)
        out.nextKey("createdBy")
        out.string(createdBy)
    }
}
