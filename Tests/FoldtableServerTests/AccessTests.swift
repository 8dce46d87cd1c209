import FoldtableAuth
import FoldtableCore
import Testing

@testable import FoldtableServer

/// Tokens and roles at the hub, with the real HMAC verifier and a fixed clock.
@Suite struct Access {
    let now: UInt64 = 1_800_000_000
    let tokens = HMACTokens(secret: Array("a test secret of at least thirty-two bytes".utf8))

    func token(_ role: Role, sessions: [String] = ["demo"], expires: UInt64? = nil) -> String {
        tokens.sign(user: "u", name: "tok-\(role.rawValue)", sessions: sessions, role: role, expires: expires ?? now + 3_600)
    }

    func join(_ h: Harness, _ id: UInt64, token: String?, session: String = "demo") {
        h.open(id)
        let field = token.map { #","token":"\#($0)""# } ?? ""
        h.say(id, #"{"type":"join","session":"\#(session)","name":"n\#(id)"\#(field)}"#)
    }

    @Test func aJoinWithoutATokenIsRefusedAndClosedWith4502() {
        let h = Harness(verifier: tokens)
        join(h, 1, token: nil)
        #expect(h.transport.messages(1, type: "error").first?["code"] == .string("unauthorized"))
        #expect(h.transport.closed[1]?.code == CloseCode.unauthorized)
        #expect(h.transport.messages(1, type: "welcome").isEmpty)
    }

    @Test func aTokenForAnotherSessionIsRefused() {
        let h = Harness(verifier: tokens)
        join(h, 1, token: token(.owner, sessions: ["other"]))
        #expect(h.transport.closed[1]?.code == CloseCode.unauthorized)
    }

    @Test func theWelcomeCarriesTheRoleAndTheTokensName() {
        let h = Harness(verifier: tokens)
        join(h, 1, token: token(.viewer))
        let welcome = h.transport.messages(1, type: "welcome").first
        #expect(welcome?["role"] == .string("viewer"))
        #expect(welcome?["name"] == .string("tok-viewer"))
    }

    @Test func aViewersChangeIsForbiddenAndNobodySeesIt() {
        let h = Harness(verifier: tokens)
        join(h, 1, token: token(.viewer))
        join(h, 2, token: token(.editor))
        h.transport.clear()
        h.say(1, #"{"type":"toggle","section":"mac","id":"v"}"#)
        #expect(h.transport.messages(1, type: "error").first?["code"] == .string("forbidden"))
        #expect(h.transport.messages(2).isEmpty)
    }

    @Test func anEditorChangesTheTableButNotItsOptionsNorDeletesIt() {
        let h = Harness(verifier: tokens)
        join(h, 1, token: token(.editor))
        h.say(1, #"{"type":"toggle","section":"mac","id":"a"}"#)
        #expect(h.transport.messages(1, type: "ack").count == 1)
        h.say(1, #"{"type":"setOptions","options":{"accordion":true},"id":"b"}"#)
        h.say(1, #"{"type":"deleteSession"}"#)
        #expect(h.transport.messages(1, type: "error").map { $0["code"] } == [.string("forbidden"), .string("forbidden")])
        #expect(h.transport.closed[1] == nil)
    }

    @Test func anOwnerChangesOptions() {
        let h = Harness(verifier: tokens)
        join(h, 1, token: token(.owner))
        h.say(1, #"{"type":"setOptions","options":{"accordion":true},"id":"b"}"#)
        #expect(h.transport.messages(1, type: "ack").count == 1)
    }

    @Test func listShowsOnlyTheSessionsTheTokenOpens() {
        let h = Harness(verifier: tokens)
        join(h, 1, token: tokens.sign(user: "u", name: nil, sessions: ["*"], role: .editor, expires: now + 60), session: "secret")
        h.open(2)
        h.say(2, #"{"type":"list"}"#)
        #expect(h.transport.messages(2, type: "error").first?["code"] == .string("unauthorized"))
        h.say(2, #"{"type":"list","token":"\#(token(.viewer))"}"#)
        guard case .array(let sessions)? = h.transport.messages(2, type: "sessions").first?["sessions"] else {
            Issue.record("no sessions")
            return
        }
        #expect(sessions.map { $0["name"] } == [.string("demo")])
    }

    @Test func anExpiredTokenWarnsThenClosesWith4002AfterTheGrace() {
        let h = Harness(verifier: tokens) { $0.tokenGraceSecs = 5 }
        join(h, 1, token: token(.editor, expires: now + 10))
        // Expiry (exp + 60 s leeway) then the grace period: two timers in turn.
        h.transport.fireTimers(upTo: 70_000)
        #expect(h.transport.messages(1, type: "error").last?["code"] == .string("token_expired"))
        #expect(h.transport.closed[1] == nil)
        h.transport.fireTimers(upTo: 5_000)
        #expect(h.transport.closed[1]?.code == CloseCode.tokenExpired)
    }

    @Test func aFreshTokenWithAuthKeepsTheMemberIn() {
        let h = Harness(verifier: tokens) { $0.tokenGraceSecs = 5 }
        join(h, 1, token: token(.editor, expires: now + 10))
        h.transport.fireTimers(upTo: 70_000)
        h.say(1, #"{"type":"auth","token":"\#(token(.owner))"}"#)
        #expect(h.transport.messages(1, type: "authorized").first?["role"] == .string("owner"))
        h.transport.fireTimers(upTo: 5_000)
        #expect(h.transport.closed[1] == nil)
        h.say(1, #"{"type":"setOptions","options":{"accordion":true},"id":"o"}"#)
        #expect(h.transport.messages(1, type: "ack").count == 1)
    }

    @Test func changesPastTheRateAreRefusedAndAFloodIsClosed() {
        let h = Harness {
            $0.changeRatePerSec = 1
            $0.changeBurst = 3
            $0.maxConsecutiveErrors = 10
        }
        h.join(1)
        h.join(2)
        for index in 0..<13 { h.say(1, #"{"type":"updateSection","section":"mac","set":{"detail":"d\#(index)"}}"#) }
        let refused = h.transport.messages(1, type: "error").filter { $0["code"] == .string("rate_limited") }
        #expect(refused.count == 10)
        #expect(h.transport.messages(2, type: "event").count == 3)
        #expect(h.transport.closed[1]?.code == CloseCode.tooManyErrors)
        #expect(h.transport.closed[2] == nil)
    }

    @Test func openModeNeedsNoTokenAndEveryoneMayDoEverything() {
        let h = Harness()
        h.join(1)
        h.say(1, #"{"type":"setOptions","options":{"accordion":true},"id":"o"}"#)
        #expect(h.transport.messages(1, type: "ack").count == 1)
        #expect(h.transport.messages(1, type: "welcome").first?["role"] == nil)
    }
}
