import FoldtableServer
import Testing

@testable import FoldtableAuth

/// `exp` and `nbf` at the edge of what JSON and 64-bit integers hold: each is granted, refused,
/// or clamped downstream, and no sum on the way traps.
@Suite struct TokenEdgeNumbers {
    let secret = Array("a test secret of at least thirty-two bytes".utf8)
    let now: UInt64 = 1_800_000_000

    /// A token signed with the test secret whose claims end with `exp` and `nbf` as written.
    func token(exp: String, nbf: String? = nil) -> String {
        let payload = #"{"sub":"u1","name":"ana","sessions":["demo"],"role":"editor","exp":\#(exp)"# + (nbf.map { #","nbf":\#($0)"# } ?? "") + "}"
        let signed = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
        return signed + "." + Base64URL.encode(HMACTokens.hmac(secret, Array(signed.utf8)))
    }

    func verify(_ token: String, now: UInt64? = nil) -> Result<AccessGrant, TokenRefusal> {
        HMACTokens(secret: secret).verify(token, now: now ?? self.now)
    }

    @Test func anExpOf2To63Minus1IsGranted() throws {
        #expect(try verify(token(exp: "9223372036854775807")).get().expires == UInt64(Int64.max))
    }

    @Test func anExpOf2Times10To16IsGranted() throws {
        #expect(try verify(token(exp: "20000000000000000")).get().expires == 20_000_000_000_000_000)
    }

    @Test func anExpOf2To64IsRefusedAsNotAnInteger() {
        #expect(throws: TokenRefusal.self) { try verify(token(exp: "18446744073709551616")).get() }
        #expect(throws: TokenRefusal.self) { try verify(token(exp: "18446744073709551615")).get() }
    }

    @Test func aNegativeOrZeroExpIsRefused() {
        #expect(throws: TokenRefusal.self) { try verify(token(exp: "-1")).get() }
        #expect(throws: TokenRefusal.self) { try verify(token(exp: "-9223372036854775808")).get() }
        #expect(throws: TokenRefusal.self) { try verify(token(exp: "0")).get() }
    }

    @Test func anExpOf10000DigitsIsRefused() {
        let digits = String(repeating: "9", count: 10_000)
        #expect(throws: TokenRefusal.self) { try verify(token(exp: digits)).get() }
        #expect(throws: TokenRefusal.self) { try verify(token(exp: "1800003600", nbf: digits)).get() }
    }

    @Test func anNbfOf2To63Minus1IsNotYetValid() {
        guard case .failure(let refusal) = verify(token(exp: "9223372036854775807", nbf: "9223372036854775807")) else {
            Issue.record("granted")
            return
        }
        #expect(refusal.reason == .notYetValid)
    }

    @Test func aClockAtItsEndNeitherTrapsNorGrantsAnExpiredToken() {
        #expect(throws: TokenRefusal.self) { try verify(token(exp: "1800003600"), now: .max).get() }
        #expect(throws: TokenRefusal.self) { try verify(token(exp: "1800003600", nbf: "1"), now: .max - 10).get() }
    }
}
