import FoldtableCore
import Testing

/// Change ids kept under their author's scope (``ChangeIdScope``).
@Suite struct ChangeIdScopes {
    @Test func theSameIdFromTwoAuthorsIsTwoKeysAndEachReadsBackAsTheIdSent() throws {
        let ana = try ChangeIdScope.key("tab-1", scope: ChangeIdScope.of(member: "ana", declared: nil, connection: 1))
        let bo = try ChangeIdScope.key("tab-1", scope: ChangeIdScope.of(member: "bo", declared: nil, connection: 2))
        #expect(ana != bo)
        #expect(ChangeIdScope.id(ofKey: ana) == "tab-1" && ChangeIdScope.id(ofKey: bo) == "tab-1")
        // A scope may hold the separator (a token's sub is anything): the id is after the last one.
        let slashed = try ChangeIdScope.key("x.9", scope: ChangeIdScope.of(member: "team/ana", declared: nil, connection: 1))
        #expect(ChangeIdScope.id(ofKey: slashed) == "x.9" && ChangeIdScope.hasScope(slashed))
        // An id from before scopes, or a table used on its own, is its own key.
        #expect(ChangeIdScope.id(ofKey: "plain") == "plain" && !ChangeIdScope.hasScope("plain"))
    }

    @Test func anIdThatCouldPassForAScopeIsRefusedSoNoAuthorCanForgeAnothersKey() {
        // "u:bo/1" sent by ana would read as bo's id "1" under ana's scope "u:ana/u:bo": refused.
        #expect(throws: ProtocolError.self) { try ChangeIdScope.key("u:bo/1", scope: "u:ana") }
        #expect(throws: ProtocolError.self) { try ChangeIdScope.key("", scope: "u:ana") }
        #expect(throws: ProtocolError.self) { try ChangeIdScope.key(String(repeating: "a", count: 65), scope: "u:ana") }
    }

    @Test func aChangeIdHoldingTheSeparatorIsRefusedWhenDecodedByEitherDecoder() {
        for text in [#"{"type":"toggle","section":"a","id":"u:bo/1"}"#, #"{"type":"addSection","title":"T","id":"x/y"}"#] {
            let (result, _) = ClientMessage.decode(Array(text.utf8))
            #expect(throws: ProtocolError.self) { try result.get() }
        }
    }

    @Test func scopesOfTokensDeclaredScopesConnectionsAndAPICallersNeverMeet() {
        let scopes = [
            ChangeIdScope.of(member: "x", declared: nil, connection: 1), ChangeIdScope.of(member: nil, declared: "x", connection: 1),
            ChangeIdScope.of(member: nil, declared: nil, connection: 1), ChangeIdScope.of(caller: nil),
        ]
        #expect(Set(scopes).count == 4)
        #expect(ChangeIdScope.of(caller: "x") == ChangeIdScope.of(member: "x", declared: "other", connection: 5))
    }

    @Test func aTableRefusesAnIdReusedByItsAuthorButNotTheSameIdOfAnother() throws {
        var table = Table()
        let ana = try ChangeIdScope.key("k", scope: "u:ana")
        let bo = try ChangeIdScope.key("k", scope: "u:bo")
        _ = try table.apply(.addSection(NewSection(title: "A")), by: Author(client: "c1", name: "ana"), changeId: ana)
        let other = try table.apply(.addSection(NewSection(title: "B")), by: Author(client: "c2", name: "bo"), changeId: bo)
        #expect(other.appliedEvent?.seq == 2)
        #expect(throws: ProtocolError.self) {
            try table.apply(.addSection(NewSection(title: "C")), by: Author(client: "c1", name: "ana"), changeId: ana)
        }
    }

    @Test func aJoinCarriesCreateAndIdScopeBothWays() throws {
        let request = JoinRequest(session: "s", name: "n", create: true, idScope: "0123456789abcdefghij")
        let bytes = ClientMessage.join(request).encoded()
        #expect(try ClientMessage.decode(bytes).0.get() == .join(request))
        #expect(
            try ClientMessage.decode(Array(#"{"type":"join","session":"s","name":"n"}"#.utf8)).0.get() == .join(JoinRequest(session: "s", name: "n")))
        let short = ClientMessage.decode(Array(#"{"type":"join","session":"s","name":"n","idScope":"abc"}"#.utf8)).0
        #expect(throws: ProtocolError.self) { try short.get() }
    }
}
