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

    @Test func anAuthWithAnotherUsersTokenIsRefusedAndTheMemberStaysWhoJoined() {
        let h = Harness(verifier: tokens)
        join(h, 1, token: token(.viewer))
        let other = tokens.sign(user: "someone-else", name: "boss", sessions: ["demo"], role: .owner, expires: now + 3_600)
        h.say(1, #"{"type":"auth","token":"\#(other)"}"#)
        #expect(h.transport.messages(1, type: "error").first?["code"] == .string("unauthorized"))
        #expect(h.transport.messages(1, type: "authorized").isEmpty)
        // Still the viewer who joined: a change is refused.
        h.say(1, #"{"type":"toggle","section":"mac","id":"t"}"#)
        #expect(h.transport.messages(1, type: "error").last?["code"] == .string("forbidden"))
        // The same user's fresh token is taken.
        h.say(1, #"{"type":"auth","token":"\#(token(.editor))"}"#)
        #expect(h.transport.messages(1, type: "authorized").first?["role"] == .string("editor"))
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

    func joinAs(_ h: Harness, _ id: UInt64, user: String, name: String? = "tok", role: Role, session: String = "demo", create: Bool = false) {
        h.open(id)
        let token = tokens.sign(user: user, name: name, sessions: ["*"], role: role, expires: now + 3_600)
        h.say(id, #"{"type":"join","session":"\#(session)","name":"n\#(id)","token":"\#(token)"\#(create ? #","create":true"# : "")}"#)
    }

    @Test func aViewerAskingToCreateAMissingSessionGetsSessionNotFoundAndNothingIsMade() {
        let h = Harness(verifier: tokens)
        joinAs(h, 1, user: "vi", role: .viewer, session: "fresh", create: true)
        #expect(h.transport.messages(1, type: "error").first?["code"] == .string("session_not_found"))
        #expect(h.transport.messages(1, type: "welcome").isEmpty)
        #expect(!h.hub.residentSessions.contains("fresh"))
        #expect(h.hub.sessionSummaries(visibleTo: nil).map(\.name) == ["demo"])
        // An editor may not create either; an owner who asks may.
        joinAs(h, 2, user: "ed", role: .editor, session: "fresh", create: true)
        #expect(h.transport.messages(2, type: "error").first?["code"] == .string("session_not_found"))
        joinAs(h, 3, user: "ow", role: .owner, session: "fresh")
        #expect(h.transport.messages(3, type: "error").first?["code"] == .string("session_not_found"))
        joinAs(h, 4, user: "ow", role: .owner, session: "fresh", create: true)
        #expect(h.transport.messages(4, type: "welcome").count == 1)
        #expect(h.hub.residentSessions.contains("fresh"))
    }

    @Test func aSessionAnOwnerDeletedIsNotBroughtBackByAViewer() {
        let h = Harness(verifier: tokens)
        joinAs(h, 1, user: "ow", role: .owner, session: "gone", create: true)
        h.say(1, #"{"type":"deleteSession"}"#)
        #expect(h.transport.closed[1]?.code == CloseCode.sessionDeleted)
        joinAs(h, 2, user: "vi", role: .viewer, session: "gone", create: true)
        #expect(h.transport.messages(2, type: "error").first?["code"] == .string("session_not_found"))
        #expect(!h.hub.residentSessions.contains("gone"))
        #expect(!h.hub.sessionSummaries(visibleTo: nil).map(\.name).contains("gone"))
    }

    @Test func inOpenModeAJoinCreatesOnlyWhenItAsks() {
        let h = Harness()
        h.join(1, session: "lookup", create: false)
        #expect(h.transport.messages(1, type: "error").first?["code"] == .string("session_not_found"))
        #expect(!h.hub.sessionSummaries(visibleTo: nil).map(\.name).contains("lookup"))
        h.join(2, session: "lookup", create: true)
        #expect(h.transport.messages(2, type: "welcome").count == 1)
    }

    @Test func renameIsRefusedWhenTheTokenNamesTheMemberAndAllowedWhenItDoesNot() {
        let h = Harness(verifier: tokens)
        joinAs(h, 1, user: "ana", name: "ana", role: .editor)
        joinAs(h, 2, user: "bo", name: nil, role: .editor)
        h.transport.clear()
        h.say(1, #"{"type":"rename","name":"Boss"}"#)
        let refusal = h.transport.messages(1, type: "error").first
        #expect(refusal?["code"] == .string("forbidden"))
        #expect(refusal?["message"] == .string("your name comes from your token"))
        h.say(1, #"{"type":"toggle","section":"mac","id":"t1"}"#)
        #expect(h.transport.messages(2, type: "event").last?["by"]?["name"] == .string("ana"))
        // A token without a name leaves the name to its bearer.
        h.say(2, #"{"type":"rename","name":"Bo B"}"#)
        #expect(h.transport.messages(2, type: "error").isEmpty)
        h.say(2, #"{"type":"toggle","section":"mac","id":"t2"}"#)
        #expect(h.transport.messages(1, type: "event").last?["by"]?["name"] == .string("Bo B"))
    }

    @Test func anotherMembersChangeIdNeitherUsesUpNorAnswersForTheVictims() {
        let h = Harness(verifier: tokens)
        joinAs(h, 1, user: "ana", role: .editor)
        joinAs(h, 2, user: "mallory", role: .editor)
        h.transport.clear()
        // The attacker takes the victim's next id first, with a change of its own.
        h.say(2, #"{"type":"toggle","section":"mac","id":"ana-7"}"#)
        #expect(h.transport.messages(2, type: "ack").first?["seq"] == .integer(1))
        // The victim's change with that id is applied as its own: not id_reused, not seq 1.
        h.say(1, #"{"type":"toggle","section":"ipad","id":"ana-7"}"#)
        #expect(h.transport.messages(1, type: "error").isEmpty)
        #expect(h.transport.messages(1, type: "ack").last?["seq"] == .integer(2))
        #expect(h.transport.messages(1, type: "event").last?["change"]?["section"] == .string("ipad"))
        // The attacker repeating the victim's next id with the victim's change gets a change of its own.
        h.say(1, #"{"type":"toggle","section":"mac","id":"ana-8"}"#)
        h.say(2, #"{"type":"toggle","section":"mac","id":"ana-8"}"#)
        #expect(h.transport.messages(2, type: "ack").last?["seq"] == .integer(4))
        #expect(h.transport.messages(1, type: "event").count == 4)
        // Each author's own retry is still recognised: acknowledged again, applied once.
        h.say(1, #"{"type":"toggle","section":"ipad","id":"ana-7"}"#)
        #expect(h.transport.messages(1, type: "ack").last?["seq"] == .integer(2))
        // Events show each id as its author sent it, never the scope it is kept under.
        #expect(h.transport.messages(1, type: "event").compactMap { $0["id"] } == ["ana-7", "ana-7", "ana-8", "ana-8"].map { .string($0) })
        #expect(h.transport.messages(1, type: "event").count == 4)
    }

    @Test func inOpenModeIdsAreTheConnectionsOwnOrItsIdScopesAcrossAReconnect() {
        let h = Harness()
        h.join(1)
        h.join(2)
        h.say(1, #"{"type":"toggle","section":"mac","id":"x-1"}"#)
        h.say(2, #"{"type":"toggle","section":"mac","id":"x-1"}"#)
        #expect(h.transport.messages(2, type: "ack").last?["seq"] == .integer(2))
        // A client that names its idScope keeps its ids across connections.
        h.open(3)
        h.say(3, #"{"type":"join","session":"demo","name":"a","idScope":"0123456789abcdefXYZ"}"#)
        h.say(3, #"{"type":"toggle","section":"ipad","id":"t-1"}"#)
        #expect(h.transport.messages(3, type: "ack").last?["seq"] == .integer(3))
        h.close(3)
        h.open(4)
        h.say(4, #"{"type":"join","session":"demo","name":"a","idScope":"0123456789abcdefXYZ"}"#)
        h.say(4, #"{"type":"toggle","section":"ipad","id":"t-1"}"#)
        #expect(h.transport.messages(4, type: "ack").last?["seq"] == .integer(3))
        #expect(h.transport.messages(1, type: "event").count == 3)
        // Too short to be unguessable: refused.
        h.open(5)
        h.say(5, #"{"type":"join","session":"demo","name":"a","idScope":"short"}"#)
        #expect(h.transport.messages(5, type: "error").first?["field"] == .string("idScope"))
        // An id that could pass for a scope is refused before it reaches the session.
        h.say(1, #"{"type":"toggle","section":"mac","id":"k:0123456789abcdefXYZ/t-1"}"#)
        #expect(h.transport.messages(1, type: "error").last?["code"] == .string("invalid_value"))
    }

    @Test func openModeNeedsNoTokenAndEveryoneMayDoEverything() {
        let h = Harness()
        h.join(1)
        h.say(1, #"{"type":"setOptions","options":{"accordion":true},"id":"o"}"#)
        #expect(h.transport.messages(1, type: "ack").count == 1)
        #expect(h.transport.messages(1, type: "welcome").first?["role"] == nil)
    }
}
