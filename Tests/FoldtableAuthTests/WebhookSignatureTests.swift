import FoldtableServer
import Foundation
import Testing

@testable import FoldtableAuth

/// Signatures as the Standard Webhooks convention defines them, checked against its published
/// test vector, so receivers' verifier libraries accept what foldtabled sends.
@Suite struct WebhookSignatureTests {
    @Test func theConventionsPublishedVectorSignsToItsPublishedSignature() throws {
        let secret = try WebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let signature = WebhookSignature.sign(
            key: secret.key, id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: Array(#"{"test": 2432232314}"#.utf8))
        #expect(signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
    }

    @Test func anyChangeToTheIdTheTimestampOrTheBodyChangesTheSignature() throws {
        let key = try WebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").key
        let body = Array(#"{"test": 2432232314}"#.utf8)
        let base = WebhookSignature.sign(key: key, id: "msg_1", timestamp: 1, body: body)
        #expect(WebhookSignature.sign(key: key, id: "msg_2", timestamp: 1, body: body) != base)
        #expect(WebhookSignature.sign(key: key, id: "msg_1", timestamp: 2, body: body) != base)
        #expect(WebhookSignature.sign(key: key, id: "msg_1", timestamp: 1, body: body + [0x20]) != base)
        var otherKey = key
        otherKey[0] ^= 1
        #expect(WebhookSignature.sign(key: otherKey, id: "msg_1", timestamp: 1, body: body) != base)
    }
}
