/// Change ids (and the HTTP API's `Idempotency-Key`s) belong to their author: a session's id
/// window holds each one as a *key*, the author's scope and the id together (`scope/id`), so
/// the same id sent by two authors is two changes, and nobody can use up or be acknowledged for
/// another's id. Events show the id as its author sent it, never the scope: seeing another's
/// id gives nothing to use.
///
/// The scope is folded into the key rather than kept in a second index: the window stays one
/// hash table, and a lookup costs one string a little longer than the id. An id holds only
/// letters, digits and `_ - . :` (checked here, before the scope is added), so the key's last
/// `/` ends the scope, whatever the scope holds.
///
/// Scopes: `u:<sub>` for a member or API caller with a token (the same user on every
/// connection, so a retry after a reconnect is recognised); in open mode `k:<idScope>` for a
/// client that sent an ``JoinRequest/idScope`` (its own random string, kept across reconnects),
/// else `c:<connection>` (this connection only), and `api` for every HTTP caller (nobody is
/// identified there: they share one scope).
public enum ChangeIdScope {
    /// Between the scope and the id in a key.
    static let separator = UInt8(ascii: "/")

    /// The key of change id `id` sent by the author whose scope is `scope`, or why `id` is not
    /// a change id (1 to 64 letters, digits and `_ - . :`, the rule of table keys).
    public static func key(_ id: String, scope: String, limits: TableLimits = TableLimits()) throws(ProtocolError) -> String {
        try Table.checkChangeId(limits: limits, id)
        return scope + "/" + id
    }

    /// The id as its author sent it: the part of `key` after its last `/` (all of it when it
    /// has none: an id from before scopes, or a table used on its own).
    public static func id(ofKey key: String) -> String {
        let utf8 = key.utf8
        guard let last = utf8.lastIndex(of: separator) else { return key }
        // After an ASCII byte: a character boundary.
        return String(key[utf8.index(after: last)...])
    }

    /// Whether `key` holds a scope (a `/`): what a log writes beside the event, whose `id` shows
    /// only the part after it.
    public static func hasScope(_ key: String) -> Bool {
        key.utf8.contains(separator)
    }

    /// The scope of a member: its token's `sub` when it has a token, else the `idScope` it
    /// declared, else its connection.
    public static func of(member user: String?, declared: String?, connection: UInt64) -> String {
        if let user { return "u:" + user }
        if let declared { return "k:" + declared }
        return "c:\(connection)"
    }

    /// The scope of an HTTP API caller: its token's `sub`, or the one scope of open mode's
    /// anonymous callers.
    public static func of(caller user: String?) -> String {
        user.map { "u:" + $0 } ?? "api"
    }
}
