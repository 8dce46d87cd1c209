import FoldtableAuth
import FoldtableCore
import Foundation
import Testing

@testable import FoldtableServer

/// The invites and members API at the hub, with the real HMAC signer and verifier, a memory
/// ledger and a fixed clock: who may mint, what a minted token grants, and what withdrawing does.
@Suite struct InviteAPITests {
    let now: UInt64 = 1_800_000_000
    let tokens = HMACTokens(secret: Array("a test secret of at least thirty-two bytes".utf8))

    func harness() throws -> Harness {
        let h = Harness(verifier: tokens)
        try h.hub.enableInvites(signer: tokens, ledger: MemoryInviteLedger(queue: h.transport.serviceQueue, clock: { 1_800_000_000 }))
        return h
    }

    func token(_ role: Role, sessions: [String] = ["demo"], user: String = "u") -> String {
        tokens.sign(user: user, name: "tok-\(role.rawValue)", sessions: sessions, role: role, expires: now + 3_600)
    }

    func call(_ h: Harness, _ method: String, _ path: String, body: String? = nil, as bearer: String, id: UInt64) -> HTTPResponse? {
        var headers = ["Host": "127.0.0.1:8080", "Authorization": "Bearer \(bearer)"]
        if body != nil { headers["Content-Type"] = "application/json" }
        h.hub.httpRequest(
            HTTPRequest(id: id, method: method, path: path, query: [:], headers: headers, body: Array((body ?? "").utf8), peer: "10.0.0.1"))
        let deadline = Date().addingTimeInterval(10)
        while h.transport.responses[id] == nil && Date() < deadline { h.transport.settle() }
        return h.transport.responses[id]
    }

    func json(_ response: HTTPResponse?) -> JSONValue? { response.flatMap { try? JSONParser.parse($0.body) } }

    func join(_ h: Harness, _ id: UInt64, token: String) {
        h.open(id)
        h.say(id, #"{"type":"join","session":"demo","name":"n\#(id)","token":"\#(token)"}"#)
        h.transport.settle()
    }

    @Test func aViewerAndAnEditorCannotMintAndAnOwnerOfAnotherSessionNeither() throws {
        let h = try harness()
        #expect(call(h, "POST", "/api/v1/sessions/demo/invites", body: "{}", as: token(.viewer), id: 1)?.status == 403)
        #expect(call(h, "POST", "/api/v1/sessions/demo/invites", body: "{}", as: token(.editor), id: 2)?.status == 403)
        #expect(call(h, "POST", "/api/v1/sessions/demo/invites", body: "{}", as: token(.owner, sessions: ["other"]), id: 3)?.status == 403)
        #expect(call(h, "GET", "/api/v1/sessions/demo/invites", as: token(.editor), id: 4)?.status == 403)
        #expect(call(h, "DELETE", "/api/v1/sessions/demo/invites/x", as: token(.editor), id: 5)?.status == 403)
    }

    @Test func anOwnersInviteIsATokenForThisSessionWithTheRoleItsIdAndLabel() throws {
        let h = try harness()
        let answer = call(
            h, "POST", "/api/v1/sessions/demo/invites", body: #"{"role":"owner","expiresIn":600,"label":"for Bo"}"#, as: token(.owner), id: 1)
        #expect(answer?.status == 201)
        let body = try #require(json(answer))
        guard case .string(let minted)? = body["token"], case .string(let id)? = body["id"] else {
            Issue.record("no token or id in \(String(describing: body))")
            return
        }
        let grant = try tokens.verify(minted, now: now).get()
        #expect(grant.sessions == ["demo"])
        #expect(grant.role == .owner)
        #expect(grant.id == id)
        #expect(grant.label == "for Bo")
        #expect(grant.expires == now + 600)
        #expect(body["url"] == .string("http://127.0.0.1:8080/s/demo#token=\(minted)"))
        // Listed for owners, without the token.
        let listed = call(h, "GET", "/api/v1/sessions/demo/invites", as: token(.owner), id: 2)
        #expect(listed?.status == 200)
        guard case .array(let invites)? = json(listed)?["invites"] else {
            Issue.record("no invites listed")
            return
        }
        #expect(invites.map { $0["id"] } == [.string(id)])
        let listing = String(decoding: listed?.body ?? [], as: UTF8.self)
        #expect(!listing.contains(minted))
    }

    @Test func withdrawingClosesTheTokensMembersWith4503AndRefusesItOnTheAPIAndOnJoin() throws {
        let h = try harness()
        let body = try #require(json(call(h, "POST", "/api/v1/sessions/demo/invites", body: #"{"role":"editor"}"#, as: token(.owner), id: 1)))
        guard case .string(let minted)? = body["token"], case .string(let id)? = body["id"] else {
            Issue.record("no token in \(body)")
            return
        }
        join(h, 1, token: minted)
        join(h, 2, token: token(.editor))
        #expect(h.transport.messages(1, type: "welcome").first?["role"] == .string("editor"))
        #expect(call(h, "DELETE", "/api/v1/sessions/demo/invites/\(id)", as: token(.owner), id: 2)?.status == 204)
        #expect(h.transport.closed[1]?.code == CloseCode.tokenWithdrawn)
        #expect(h.transport.closed[2] == nil)
        #expect(call(h, "GET", "/api/v1/sessions/demo", as: minted, id: 3)?.status == 401)
        join(h, 3, token: minted)
        #expect(h.transport.closed[3]?.code == CloseCode.unauthorized)
        // Gone from the list; a second withdrawal finds nothing.
        #expect(json(call(h, "GET", "/api/v1/sessions/demo/invites", as: token(.owner), id: 4))?["invites"] == .array([]))
        #expect(call(h, "DELETE", "/api/v1/sessions/demo/invites/\(id)", as: token(.owner), id: 5)?.status == 404)
    }

    @Test func anIdTheSessionNeverMintedIsWithdrawnOnlyByAnOwnerOfEverySession() throws {
        let h = try harness()
        let scripted = tokens.sign(user: "job", name: nil, sessions: ["demo"], role: .editor, expires: now + 3_600, id: "job-1")
        join(h, 1, token: scripted)
        #expect(call(h, "DELETE", "/api/v1/sessions/demo/invites/job-1", as: token(.owner), id: 1)?.status == 404)
        #expect(h.transport.closed[1] == nil)
        #expect(call(h, "DELETE", "/api/v1/sessions/demo/invites/job-1", as: token(.owner, sessions: ["*"]), id: 2)?.status == 204)
        #expect(h.transport.closed[1]?.code == CloseCode.tokenWithdrawn)
    }

    @Test func mintingIsBoundedInRoleLifetimeAndLabel() throws {
        let h = try harness()
        let bodies = [
            #"{"role":"admin"}"#, #"{"expiresIn":59}"#, #"{"expiresIn":7776001}"#, #"{"label":"\#(String(repeating: "x", count: 129))"}"#,
        ]
        for (index, body) in bodies.enumerated() {
            let answer = call(h, "POST", "/api/v1/sessions/demo/invites", body: body, as: token(.owner), id: UInt64(index + 1))
            #expect(answer?.status == 400, "\(body)")
        }
        // No body at all: a viewer for seven days...
        let longLived = tokens.sign(user: "u", name: "olga", sessions: ["demo"], role: .owner, expires: now + 30 * 86_400)
        let answer = try #require(json(call(h, "POST", "/api/v1/sessions/demo/invites", as: longLived, id: 9)))
        #expect(answer["role"] == .string("viewer"))
        #expect(answer["expires"] == .integer(Int64(now + 604_800)))
        // ...but never beyond the minting token's own end: a leaked owner link withdrawn later
        // must not have minted itself a longer life.
        let shortLived = try #require(json(call(h, "POST", "/api/v1/sessions/demo/invites", as: token(.owner), id: 10)))
        #expect(shortLived["expires"] == .integer(Int64(now + 3_600)))
    }

    @Test func mintingAndWithdrawingInALoopFillsOnlyTheSessionsShareAndWithdrawalsAreNeverRefused() throws {
        let h = try harness()
        let owner = token(.owner, sessions: ["demo"])
        var id: UInt64 = 100
        func mint(_ session: String, as bearer: String) -> HTTPResponse? {
            id += 1
            return call(h, "POST", "/api/v1/sessions/\(session)/invites", as: bearer, id: id)
        }
        // Each withdrawn invite stays listed until it would have expired: it counts against the
        // session's room like a live one.
        for _ in 0..<InviteDesk.maxLivePerSession {
            let minted = try #require(json(mint("demo", as: owner)))
            guard case .string(let invite)? = minted["id"] else {
                Issue.record("no id in \(minted)")
                return
            }
            id += 1
            #expect(call(h, "DELETE", "/api/v1/sessions/demo/invites/\(invite)", as: owner, id: id)?.status == 204)
        }
        #expect(mint("demo", as: owner)?.status == 409)
        // Another session still mints, and an owner of every session still withdraws any id.
        let otherOwner = token(.owner, sessions: ["other"])
        h.hub.httpRequest(
            HTTPRequest(
                id: 99, method: "POST", path: "/api/v1/sessions", query: ["name": "other"],
                headers: ["Host": "127.0.0.1:8080", "Authorization": "Bearer \(otherOwner)"], body: [], peer: "10.0.0.2"))
        h.transport.settle()
        #expect(h.transport.responses[99]?.status == 201)
        #expect(mint("other", as: otherOwner)?.status == 201)
        id += 1
        #expect(call(h, "DELETE", "/api/v1/sessions/demo/invites/leaked-1", as: token(.owner, sessions: ["*"]), id: id)?.status == 204)
    }

    @Test func membersAreListedForAnyMemberAndOnlyAnOwnerDisconnectsOneWith4504() throws {
        let h = try harness()
        join(h, 1, token: token(.viewer, user: "v"))
        join(h, 2, token: token(.owner, user: "o"))
        let listed = try #require(json(call(h, "GET", "/api/v1/sessions/demo/members", as: token(.viewer), id: 1)))
        guard case .array(let members)? = listed["members"] else {
            Issue.record("no members in \(listed)")
            return
        }
        #expect(members.map { $0["role"] } == [.string("viewer"), .string("owner")])
        #expect(members.map { $0["client"] } == [.string("c1"), .string("c2")])
        #expect(call(h, "DELETE", "/api/v1/sessions/demo/members/c2", as: token(.editor), id: 2)?.status == 403)
        #expect(call(h, "DELETE", "/api/v1/sessions/demo/members/c1", as: token(.owner), id: 3)?.status == 204)
        #expect(h.transport.closed[1]?.code == CloseCode.removed)
        #expect(call(h, "DELETE", "/api/v1/sessions/demo/members/c9", as: token(.owner), id: 4)?.status == 404)
    }

    @Test func withdrawnIdsReadAtStartUpAreRefusedFromTheFirstJoin() throws {
        let h = Harness(verifier: tokens)
        let ledger = MemoryInviteLedger(queue: h.transport.serviceQueue, clock: { 1_800_000_000 })
        ledger.withdraw(id: "gone", session: "demo", until: now + 100) { _ in }
        h.transport.settle()
        try h.hub.enableInvites(signer: tokens, ledger: ledger)
        join(h, 1, token: tokens.sign(user: "x", name: nil, sessions: ["demo"], role: .editor, expires: now + 60, id: "gone"))
        #expect(h.transport.closed[1]?.code == CloseCode.unauthorized)
        #expect(h.transport.messages(1, type: "error").first?["message"] == .string("the token was withdrawn"))
    }
}
