import FoldtableAuth
import FoldtableCore
import Testing

@testable import FoldtableServer

/// Tokens whose `exp` is far past any real date (2^63-1, 2·10^16) on `join` and `auth`: the
/// member is let in and its expiry timer is clamped, where `seconds * 1_000` used to trap.
@Suite struct TokenExpiryEdge {
    let now: UInt64 = 1_800_000_000
    let tokens = HMACTokens(secret: Array("a test secret of at least thirty-two bytes".utf8))

    func token(expires: UInt64) -> String {
        tokens.sign(user: "u", name: "far", sessions: ["demo"], role: .editor, expires: expires)
    }

    func join(_ h: Harness, _ id: UInt64, token: String) {
        h.open(id)
        h.say(id, #"{"type":"join","session":"demo","name":"n\#(id)","token":"\#(token)"}"#)
    }

    @Test(arguments: [UInt64(Int64.max), 20_000_000_000_000_000, UInt64(Int64.max) - 60])
    func aJoinWithAFarExpIsWelcomedAndItsTimerClamped(expires: UInt64) {
        let h = Harness(verifier: tokens)
        join(h, 1, token: token(expires: expires))
        #expect(h.transport.messages(1, type: "welcome").count == 1)
        #expect(h.transport.closed[1] == nil)
        #expect(h.transport.timers.values.contains(.max))
    }

    @Test func anAuthWithAFarExpIsAuthorizedAndItsTimerClamped() {
        let h = Harness(verifier: tokens)
        join(h, 1, token: token(expires: now + 3_600))
        #expect(!h.transport.timers.values.contains(.max))
        h.say(1, #"{"type":"auth","token":"\#(token(expires: UInt64(Int64.max)))"}"#)
        #expect(h.transport.messages(1, type: "authorized").first?["expires"] == .integer(Int64.max))
        #expect(h.transport.timers.values.contains(.max))
        #expect(h.transport.closed[1] == nil)
    }

    @Test func aTokenEndingSoonStillArmsItsExactTimer() {
        let h = Harness(verifier: tokens)
        join(h, 1, token: token(expires: now + 10))
        #expect(h.transport.timers.values.contains(70_000))  // exp + 60 s leeway - now
    }
}
