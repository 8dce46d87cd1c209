/// Makes signed tokens (a port, like ``TokenVerifier``: the HMAC implementation lives in
/// FoldtableAuth, so the server never touches OpenSSL). The invites API mints through it; the
/// secret never leaves it.
public protocol TokenSigner: Sendable {
    /// A token granting `grant` (its `sessions` nil: every session).
    func sign(_ grant: AccessGrant) -> String
}
