import FoldtableServer
import Testing

@testable import FoldtableAuth

@Suite struct Tokens {
    let tokens = HMACTokens(secret: Array("a test secret of at least thirty-two bytes".utf8))
    let now: UInt64 = 1_800_000_000

    func token(role: Role = .editor, sessions: [String] = ["demo"], expires: UInt64? = nil, notBefore: UInt64? = nil) -> String {
        tokens.sign(user: "u1", name: "ana", sessions: sessions, role: role, expires: expires ?? now + 3_600, notBefore: notBefore)
    }

    func reason(_ token: String) -> TokenRefusal.Reason? {
        if case .failure(let refusal) = tokens.verify(token, now: now) { return refusal.reason }
        return nil
    }

    /// `header.payload` signed with the test secret, whatever they say.
    func forge(header: String, payload: String) -> String {
        let signed = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
        return signed + "." + Base64URL.encode(HMACTokens.hmac(Array("a test secret of at least thirty-two bytes".utf8), Array(signed.utf8)))
    }

    @Test func hmacMatchesRFC4231TestCase2() {
        let mac = HMACTokens.hmac(Array("Jefe".utf8), Array("what do ya want for nothing?".utf8))
        let hex = mac.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
        #expect(hex == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test func aSignedTokenGrantsItsClaims() throws {
        let grant = try tokens.verify(token(role: .owner, sessions: ["demo", "plan"]), now: now).get()
        #expect(grant == AccessGrant(user: "u1", name: "ana", sessions: ["demo", "plan"], role: .owner, expires: now + 3_600))
        #expect(grant.allows("plan") && !grant.allows("other"))
    }

    @Test func aStarOpensEverySession() throws {
        #expect(try tokens.verify(token(sessions: ["*"]), now: now).get().allows("anything"))
    }

    @Test func aForgedSignatureIsRefused() {
        let other = HMACTokens(secret: Array("another secret, also thirty-two bytes long".utf8))
        let forged = other.sign(user: "u1", name: nil, sessions: ["demo"], role: .owner, expires: now + 60)
        #expect(reason(forged) == .badSignature)
        var flipped = Array(token().utf8)
        flipped[flipped.count - 2] = flipped[flipped.count - 2] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        #expect(reason(String(decoding: flipped, as: UTF8.self)) == .badSignature)
    }

    @Test func algNoneIsRefused() {
        let payload = #"{"sub":"u1","sessions":["*"],"role":"owner","exp":1900000000}"#
        let none = Base64URL.encode(Array(#"{"alg":"none","typ":"JWT"}"#.utf8)) + "." + Base64URL.encode(Array(payload.utf8)) + "."
        #expect(reason(none) == .unsupportedAlgorithm)
    }

    @Test func hs512IsRefusedEvenWhenSignedWithTheSecret() {
        let token = forge(header: #"{"alg":"HS512","typ":"JWT"}"#, payload: #"{"sub":"u1","sessions":["*"],"role":"owner","exp":1900000000}"#)
        #expect(reason(token) == .unsupportedAlgorithm)
    }

    @Test func anExpiredTokenIsRefusedAfterTheLeeway() {
        #expect(reason(token(expires: now - 61)) == .expired)
        #expect(reason(token(expires: now - 30)) == nil)
    }

    @Test func aTokenNotYetValidIsRefusedBeforeTheLeeway() {
        #expect(reason(token(notBefore: now + 61)) == .notYetValid)
        #expect(reason(token(notBefore: now + 30)) == nil)
    }

    @Test func truncatedAndMalformedTokensAreRefused() {
        let good = token()
        for cut in 1...6 { #expect(reason(String(good.dropLast(cut))) != nil) }
        #expect(reason(String(good.prefix(good.count - 43))) == .badSignature)  // the signature gone
        #expect(reason(String(good.prefix(20))) == .malformed)
        #expect(reason("") == .malformed)
        #expect(reason("a.b") == .malformed)
        #expect(reason("a.b.c.d") == .malformed)
        #expect(reason(good + "=") == .malformed)
        #expect(reason("!!!." + good) == .malformed)
    }

    @Test func anOversizedTokenIsRefusedBeforeDecoding() {
        #expect(reason(String(repeating: "a", count: HMACTokens.maxTokenBytes + 1)) == .tooLarge)
    }

    @Test func missingOrWrongClaimsAreRefused() {
        for payload in [
            #"{"sessions":["*"],"role":"owner","exp":1900000000}"#,
            #"{"sub":"u1","sessions":["*"],"exp":1900000000}"#,
            #"{"sub":"u1","sessions":["*"],"role":"admin","exp":1900000000}"#,
            #"{"sub":"u1","sessions":["*"],"role":"owner"}"#,
            #"{"sub":"u1","sessions":"*","role":"owner","exp":1900000000}"#,
            #"{"sub":"u1","sessions":[1],"role":"owner","exp":1900000000}"#,
            #"{"sub":"u1","sessions":["*"],"role":"owner","exp":"soon"}"#,
            #"{"sub":"u1","sessions":["*"],"role":"owner","exp":1900000000,"nbf":"now"}"#,
        ] {
            #expect(reason(forge(header: #"{"alg":"HS256"}"#, payload: payload)) == .missingClaim, "\(payload)")
        }
    }

    @Test func base64urlRoundTripsAndRefusesNonCanonicalInput() {
        for length in 0..<20 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 37 + 11) }
            #expect(Base64URL.decode(Array(Base64URL.encode(bytes).utf8)) == bytes)
        }
        #expect(Base64URL.decode(Array("QQ".utf8)) == [0x41])
        #expect(Base64URL.decode(Array("QR".utf8)) == nil)  // leftover bits not zero
        #expect(Base64URL.decode(Array("Q".utf8)) == nil)
        #expect(Base64URL.decode(Array("QQ==".utf8)) == nil)
    }

    @Test func aTokenCarriesItsIdAndLabelAndOneWithoutThemStillVerifies() throws {
        let signed = tokens.sign(user: "u1", name: nil, sessions: ["demo"], role: .viewer, expires: now + 60, id: "inv-1", label: "for Bo")
        let grant = try tokens.verify(signed, now: now).get()
        #expect(grant.id == "inv-1")
        #expect(grant.label == "for Bo")
        let old = try tokens.verify(token(), now: now).get()
        #expect(old.id == nil && old.label == nil)
        // The signer port signs the same claims.
        #expect(try tokens.verify(tokens.sign(grant), now: now).get() == grant)
    }

    @Test func aJtiThatCannotBeAnIdOrAnOverlongLabelIsRefused() {
        for payload in [
            #"{"sub":"u1","sessions":["*"],"role":"owner","exp":1900000000,"jti":""}"#,
            #"{"sub":"u1","sessions":["*"],"role":"owner","exp":1900000000,"jti":"a b"}"#,
            #"{"sub":"u1","sessions":["*"],"role":"owner","exp":1900000000,"jti":"\#(String(repeating: "x", count: 65))"}"#,
            #"{"sub":"u1","sessions":["*"],"role":"owner","exp":1900000000,"jti":7}"#,
            #"{"sub":"u1","sessions":["*"],"role":"owner","exp":1900000000,"label":"\#(String(repeating: "x", count: 129))"}"#,
            #"{"sub":"u1","sessions":["*"],"role":"owner","exp":1900000000,"shared":"yes"}"#,
        ] {
            #expect(reason(forge(header: #"{"alg":"HS256"}"#, payload: payload)) == .missingClaim, "\(payload)")
        }
    }

    @Test func aSharedLinkSaysSoAndAPersonalTokenDoesNot() throws {
        let link = tokens.sign(user: "invite-1", name: nil, sessions: ["demo"], role: .editor, expires: now + 60, id: "1", shared: true)
        let grant = try tokens.verify(link, now: now).get()
        #expect(grant.shared)
        #expect(try tokens.verify(tokens.sign(grant), now: now).get() == grant)
        #expect(try !tokens.verify(token(), now: now).get().shared)
    }
}
