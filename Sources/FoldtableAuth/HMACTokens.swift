import COpenSSL
import FoldtableCore
import FoldtableServer

/// JSON Web Tokens signed with HMAC-SHA256 (HS256 only), verified and issued with OpenSSL.
///
/// Refused: any `alg` but `HS256` (`none` included), a bad signature (compared in constant time),
/// a token over `maxTokenBytes`, malformed base64url or JSON, a missing or wrong-typed claim, an
/// `exp` in the past or an `nbf` in the future beyond `leewaySeconds`.
///
/// Claims: `sub` (user id), `name` (display name, optional), `sessions` (names, or `"*"` for
/// every session), `role` (`viewer`, `editor`, `owner`), `exp` (required), `nbf` (optional),
/// `shared` (optional, `true` for a link many people open: see `AccessGrant.shared`),
/// `jti` (the token's id, optional: see `AccessGrant.isValidId`;
/// what an owner withdraws it by) and `label` (optional, up to `AccessGrant.maxLabelBytes`).
public struct HMACTokens: TokenVerifier {
    /// Tokens longer than this are refused before any decoding. 4 KiB: a token rides in a join
    /// message (64 KiB at most) and in headers.
    public static let maxTokenBytes = 4_096
    /// Clock difference tolerated on `exp` and `nbf`, in seconds.
    public static let leewaySeconds: UInt64 = 60

    private let secret: [UInt8]

    /// `secret`: at least 32 bytes (a shorter key weakens HMAC-SHA256); checked by the caller.
    public init(secret: [UInt8]) {
        self.secret = secret
    }

    public func verify(_ token: String, now: UInt64) -> Result<AccessGrant, TokenRefusal> {
        guard token.utf8.count <= Self.maxTokenBytes else { return .failure(TokenRefusal(.tooLarge, "the token is too large")) }
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(parts[0]), let payloadBytes = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2])
        else { return .failure(TokenRefusal(.malformed, "the token is not a JWT")) }
        guard let header = try? FieldReader(JSONParser.parse(headerBytes)), case .string(let algorithm)? = header.value("alg") else {
            return .failure(TokenRefusal(.malformed, "the token's header is not valid"))
        }
        guard algorithm == "HS256" else {
            return .failure(TokenRefusal(.unsupportedAlgorithm, "only HS256 tokens are accepted"))
        }
        let signed = Array(token.utf8.prefix(parts[0].count + 1 + parts[1].count))
        let expected = Self.hmac(secret, signed)
        guard signature.count == expected.count, CRYPTO_memcmp(signature, expected, expected.count) == 0 else {
            return .failure(TokenRefusal(.badSignature, "the token's signature does not match"))
        }
        guard let claims = try? FieldReader(JSONParser.parse(payloadBytes)) else {
            return .failure(TokenRefusal(.malformed, "the token's claims are not valid JSON"))
        }
        return grant(claims, now: now)
    }

    private func grant(_ claims: FieldReader, now: UInt64) -> Result<AccessGrant, TokenRefusal> {
        func missing(_ name: String) -> Result<AccessGrant, TokenRefusal> {
            .failure(TokenRefusal(.missingClaim, "the token lacks a valid \(name) claim"))
        }
        guard case .string(let user)? = claims.value("sub"), !user.isEmpty else { return missing("sub") }
        guard case .string(let roleName)? = claims.value("role"), let role = Role(rawValue: roleName) else { return missing("role") }
        guard case .integer(let exp)? = claims.value("exp"), exp > 0 else { return missing("exp") }
        var name: String?
        switch claims.value("name") {
        case .none: name = nil
        case .string(let text)? where !text.isEmpty && text.utf8.count <= 64: name = text
        default: return missing("name")
        }
        var id: String?
        switch claims.value("jti") {
        case .none: id = nil
        case .string(let text)? where AccessGrant.isValidId(text): id = text
        default: return missing("jti")
        }
        var label: String?
        switch claims.value("label") {
        case .none: label = nil
        case .string(let text)? where text.utf8.count <= AccessGrant.maxLabelBytes: label = text
        default: return missing("label")
        }
        var shared = false
        switch claims.value("shared") {
        case .none: break
        case .bool(let flag)?: shared = flag
        default: return missing("shared")
        }
        var sessions: Set<String>? = []
        guard case .array(let list)? = claims.value("sessions") else { return missing("sessions") }
        for element in list {
            guard case .string(let session) = element else { return missing("sessions") }
            if session == "*" { sessions = nil } else { sessions?.insert(session) }
        }
        // Saturating sums: `exp` and `nbf` come from the token (up to 2^63-1), `now` from the caller.
        let latestStart = now.addingReportingOverflow(Self.leewaySeconds)
        if case .integer(let nbf)? = claims.value("nbf"), nbf > 0, !latestStart.overflow, UInt64(nbf) > latestStart.partialValue {
            return .failure(TokenRefusal(.notYetValid, "the token is not valid yet"))
        } else if let nbf = claims.value("nbf"), !(nbf.isInteger) {
            return missing("nbf")
        }
        let end = UInt64(exp).addingReportingOverflow(Self.leewaySeconds)
        guard end.overflow || end.partialValue > now else { return .failure(TokenRefusal(.expired, "the token has expired")) }
        return .success(
            AccessGrant(user: user, name: name, sessions: sessions, role: role, expires: UInt64(exp), id: id, label: label, shared: shared))
    }

    /// Issues a token (for `foldtabled token`, the invites API, tests and self-hosters' scripts).
    public func sign(
        user: String, name: String?, sessions: [String], role: Role, expires: UInt64, notBefore: UInt64? = nil, id: String? = nil,
        label: String? = nil, shared: Bool = false
    ) -> String {
        var payload = JSONWriter(capacity: 128)
        payload.raw("{\"sub\":")
        payload.string(user)
        if let name {
            payload.nextKey("name")
            payload.string(name)
        }
        payload.nextKey("sessions")
        payload.byte(UInt8(ascii: "["))
        for (index, session) in sessions.enumerated() {
            if index > 0 { payload.byte(UInt8(ascii: ",")) }
            payload.string(session)
        }
        payload.byte(UInt8(ascii: "]"))
        payload.nextKey("role")
        payload.string(role.rawValue)
        payload.nextKey("exp")
        payload.integer(expires)
        if let notBefore {
            payload.nextKey("nbf")
            payload.integer(notBefore)
        }
        if let id {
            payload.nextKey("jti")
            payload.string(id)
        }
        if let label {
            payload.nextKey("label")
            payload.string(label)
        }
        if shared {
            payload.nextKey("shared")
            payload.bool(true)
        }
        payload.byte(UInt8(ascii: "}"))
        let signed = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "." + Base64URL.encode(payload.bytes)
        return signed + "." + Base64URL.encode(Self.hmac(secret, Array(signed.utf8)))
    }

    /// HMAC-SHA256 of `message` with `key`, through OpenSSL.
    static func hmac(_ key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let ok = key.withUnsafeBytes { keyBytes in
            message.withUnsafeBytes { messageBytes in
                HMAC(
                    EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count), messageBytes.baseAddress?.assumingMemoryBound(to: UInt8.self),
                    messageBytes.count, &digest, &length) != nil
            }
        }
        // HMAC fails only on allocation failure; an empty digest then never matches a signature.
        return ok ? Array(digest.prefix(Int(length))) : []
    }
}

extension JSONValue {
    fileprivate var isInteger: Bool {
        if case .integer = self { return true }
        return false
    }
}

extension HMACTokens: TokenSigner {
    /// The grant as a token: its sessions sorted (or `*`), its id and label as `jti` and `label`.
    public func sign(_ grant: AccessGrant) -> String {
        sign(
            user: grant.user, name: grant.name, sessions: grant.sessions.map { $0.sorted() } ?? ["*"], role: grant.role, expires: grant.expires,
            id: grant.id, label: grant.label, shared: grant.shared)
    }
}
