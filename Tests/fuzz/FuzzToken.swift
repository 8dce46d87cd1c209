// libFuzzer target for token verification and its claims (HMACTokens.verify; issue 29).
//
// Not a SwiftPM target: Tests/fuzz/run.sh builds FoldtableCore, FoldtableServer and
// FoldtableAuth (OpenSSL's libcrypto through the COpenSSL module map) instrumented with
// -enable-testing and links this file against them.
//
// The first byte of an input picks what the rest is:
// - 0: a whole token, as a client sends it (arbitrary bytes; almost always refused);
// - 1: the claims (the JWT payload), signed here with the test secret under the usual header, so
//   the claim parser is reached whatever the bytes are;
// - 2: the header, signed here with valid claims, so `alg` and the header's JSON are reached.
// The target traps (a libFuzzer crash) when one of these does not hold:
// - nothing traps, whatever the token;
// - a verified token is at most `maxTokenBytes`, its signature is the HMAC of its first two
//   parts, and its grant is within the documented bounds: a non-empty user, a name of 1 to 64
//   bytes or none, an `exp` after the clock (less the leeway), an `nbf` not after it;
// - the grant, signed again by `sign`, verifies to the same grant;
// - a verified token with one character of its signature changed is refused (base64url has
//   one encoding per value, so a signature cannot be altered without changing its bytes);
// - base64url decodes what it encodes.

@testable import FoldtableAuth
@testable import FoldtableCore
@testable import FoldtableServer

/// 32 bytes, the least the server accepts.
private let secret = Array("fuzz-secret-fuzz-secret-fuzz-sec".utf8)
private let tokens = HMACTokens(secret: secret)
/// The verifying clock: 2027-01-15, seconds since 1970.
private let now: UInt64 = 1_800_000_000
private let header = Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)
private let claims = Array(#"{"sub":"u1","name":"Ana","sessions":["s","*"],"role":"editor","exp":1800000600,"nbf":1799999000}"#.utf8)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzToken(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = UnsafeBufferPointer(start: data, count: size)
    guard let mode = input.first else { return 0 }
    let rest = Array(input.dropFirst())
    let token: String
    switch mode % 3 {
    case 0: token = String(decoding: rest, as: UTF8.self)
    case 1: token = signed(header: header, payload: rest)
    default: token = signed(header: rest, payload: claims)
    }
    require(Base64URL.decode(Base64URL.encode(rest).utf8) == rest, "base64url does not round-trip \(rest.count) bytes")

    switch tokens.verify(token, now: now) {
    case .failure(let refusal):
        require(!refusal.message.isEmpty, "a refusal without a message: \(refusal.reason)")
    case .success(let grant):
        checkVerified(token, grant)
    }
    return 0
}

/// `header.payload.signature`, signed with the test secret.
private func signed(header: [UInt8], payload: [UInt8]) -> String {
    let signedPart = Base64URL.encode(header) + "." + Base64URL.encode(payload)
    return signedPart + "." + Base64URL.encode(HMACTokens.hmac(secret, Array(signedPart.utf8)))
}

private func checkVerified(_ token: String, _ grant: AccessGrant) {
    require(token.utf8.count <= HMACTokens.maxTokenBytes, "verified a token of \(token.utf8.count) bytes")
    let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
    require(parts.count == 3, "verified a token of \(parts.count) parts")
    let signedPart = Array(token.utf8.prefix(parts[0].count + 1 + parts[1].count))
    require(Base64URL.decode(parts[2]) == HMACTokens.hmac(secret, signedPart), "verified a token whose signature is not the HMAC")

    // The grant's documented bounds.
    require(!grant.user.isEmpty, "verified a grant without a user")
    if let name = grant.name {
        require((1...64).contains(name.utf8.count), "verified a name of \(name.utf8.count) bytes")
    }
    require(grant.expires > 0 && grant.expires + HMACTokens.leewaySeconds > now, "verified a token that expired at \(grant.expires)")
    if let payload = Base64URL.decode(parts[1]), let reader = try? FieldReader(JSONParser.parse(payload)),
        case .integer(let nbf)? = reader.value("nbf"), nbf > 0
    {
        require(UInt64(nbf) <= now + HMACTokens.leewaySeconds, "verified a token valid only from \(nbf)")
    }

    // Signed again, the grant verifies to itself.
    let again = tokens.sign(
        user: grant.user, name: grant.name, sessions: grant.sessions.map { $0.sorted() } ?? ["*"], role: grant.role, expires: grant.expires)
    switch tokens.verify(again, now: now) {
    case .success(let regranted): require(regranted == grant, "the grant signed again verifies to \(regranted), not \(grant)")
    case .failure(let refusal): fatalError("fuzz invariant: the grant signed again is refused: \(refusal.message)")
    }

    // One character of the signature changed: refused. The last character carries the bits
    // that must be zero, the first does not.
    let signature = Array(parts[2])
    for position in [0, signature.count - 1] where signature.indices.contains(position) {
        var altered = signature
        altered[position] = altered[position] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let forged = String(decoding: signedPart + [UInt8(ascii: ".")] + altered, as: UTF8.self)
        if case .success = tokens.verify(forged, now: now) {
            fatalError("fuzz invariant: a signature altered at \(position) still verifies")
        }
    }
}
