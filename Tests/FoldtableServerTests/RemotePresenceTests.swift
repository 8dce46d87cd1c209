import FoldtableCore
import Testing

@testable import FoldtableServer

/// A shared session's core merging the members other nodes share (``SessionInput/remotePresence(_:)``)
/// into welcomes, `presence` diffs and its member count.
@Suite struct RemotePresence {
    /// A stream-ordered core of node `a` with no members yet.
    func core(listMax: Int = 200) -> SessionCore {
        var settings = SessionCore.Settings()
        settings.presenceIntervalMs = 0
        settings.presenceListMax = listMax
        return SessionCore(name: "x", epoch: "e1", table: Table(), settings: settings, order: StreamOrder(node: "a"))
    }

    func join(_ core: inout SessionCore, _ id: UInt64, _ name: String) -> [SessionEffect] {
        core.handle(.join(Connection(id: id), JoinRequest(session: "x", name: name), role: nil), now: 0)
    }

    /// `count` members of node `node` sharing their first `listed`.
    func node(_ node: String, count: Int, listed: Int? = nil, version: String = "1") -> NodePresence {
        let members = (0..<min(count, listed ?? count)).map { Author(client: "\(node).c\($0 + 1)", name: "\(node)\($0 + 1)") }
        return NodePresence(node: node, count: count, members: members, version: version)
    }

    func diffs(_ effects: [SessionEffect]) -> [PresenceDiff] {
        effects.compactMap { effect -> PresenceDiff? in
            guard case .broadcast(let message, _) = effect, let value = try? JSONParser.parse(message.bytes),
                value["type"] == .string("presence"), let reader = try? FieldReader(value)
            else { return nil }
            return try? PresenceDiff.decode(reader)
        }
    }

    func welcomeOf(_ effects: [SessionEffect]) -> JSONValue? {
        effects.lazy.compactMap { effect -> JSONValue? in
            guard case .send(let message, _) = effect, let value = try? JSONParser.parse(message.bytes, limits: .init(maxStringBytes: 1 << 20)),
                value["type"] == .string("welcome")
            else { return nil }
            return value
        }.first
    }

    func clients(_ value: JSONValue?) -> [String] {
        guard case .array(let list)? = value else { return [] }
        return list.compactMap { if case .string(let client)? = $0["client"] { return client } else { return nil } }
    }

    @Test func aWelcomeListsTheMembersOfOtherNodesAndCountsTheWholeCluster() throws {
        var core = core()
        _ = join(&core, 1, "ana")
        _ = core.handle(.remotePresence([node("b", count: 2), node("c", count: 1)]), now: 0)
        let welcome = try #require(welcomeOf(join(&core, 2, "al")))
        #expect(welcome["presenceCount"] == .integer(5))
        #expect(clients(welcome["presence"]) == ["a.c1", "a.c2", "b.c1", "b.c2", "c.c1"])
        #expect(core.clusterMemberCount == 5)
        #expect(core.memberCount == 2)
    }

    @Test func membersJoiningAndLeavingOnAnotherNodeReachLocalMembersAsExactDiffs() throws {
        var core = core()
        _ = join(&core, 1, "ana")
        let joined = try #require(diffs(core.handle(.remotePresence([node("b", count: 2)]), now: 0)).first)
        #expect(joined.complete)
        #expect(joined.count == 3)
        #expect(joined.joined.map(\.client) == ["b.c1", "b.c2"])
        // b.c1 leaves, b.c2 is renamed.
        let after = NodePresence(node: "b", count: 1, members: [Author(client: "b.c2", name: "Bo")], version: "2")
        let changed = try #require(diffs(core.handle(.remotePresence([after]), now: 0)).first)
        #expect(changed.complete)
        #expect(changed.count == 2)
        #expect(changed.left == ["b.c1"])
        #expect(changed.renamed == [Author(client: "b.c2", name: "Bo")])
        #expect(changed.joined.isEmpty)
    }

    @Test func aNodeThatIsGoneTakesAllItsMembersWithIt() throws {
        var core = core()
        _ = join(&core, 1, "ana")
        _ = core.handle(.remotePresence([node("b", count: 3), node("c", count: 1)]), now: 0)
        // b expired: the broker delivers only c.
        let gone = try #require(diffs(core.handle(.remotePresence([node("c", count: 1)]), now: 0)).first)
        #expect(gone.count == 2)
        #expect(Set(gone.left) == ["b.c1", "b.c2", "b.c3"])
        #expect(core.clusterMemberCount == 2)
    }

    @Test func theSameRemotePresenceAgainSendsNothing() throws {
        var core = core()
        _ = join(&core, 1, "ana")
        _ = core.handle(.remotePresence([node("b", count: 2)]), now: 0)
        #expect(diffs(core.handle(.remotePresence([node("b", count: 2)]), now: 0)).isEmpty)
        // This node's own entry, were a broker to deliver it, is not counted twice.
        #expect(diffs(core.handle(.remotePresence([node("b", count: 2), node("a", count: 1)]), now: 0)).isEmpty)
        #expect(core.clusterMemberCount == 3)
    }

    @Test func pastTheListMaximumAcrossNodesDiffsCarryTheCountAndASample() throws {
        var core = core(listMax: 10)
        for id in 1...4 { _ = join(&core, UInt64(id), "a\(id)") }
        // 4 here and 8 on b: 12 in all, past 10, though each node alone is within it.
        let large = try #require(diffs(core.handle(.remotePresence([node("b", count: 8)]), now: 0)).first)
        #expect(!large.complete)
        #expect(large.count == 12)
        #expect(large.left.isEmpty)
        #expect(large.joined.count <= PresenceDiff.sampleLimit)
        let welcome = try #require(welcomeOf(join(&core, 5, "a5")))
        #expect(welcome["presenceCount"] == .integer(13))
        #expect(clients(welcome["presence"]).count == 10)
        #expect(clients(welcome["presence"]).prefix(5) == ["a.c1", "a.c2", "a.c3", "a.c4", "a.c5"])
        // A node of 10,000 shares 10 names: only the count moves the diff.
        let huge = try #require(diffs(core.handle(.remotePresence([node("b", count: 10_000, listed: 10, version: "2")]), now: 0)).first)
        #expect(!huge.complete)
        #expect(huge.count == 10_005)
        #expect(core.clusterMemberCount == 10_005)
    }

    @Test func backUnderTheMaximumMembersGetTheWholeMergedList() throws {
        var core = core(listMax: 4)
        _ = join(&core, 1, "ana")
        _ = core.handle(.remotePresence([node("b", count: 6, listed: 4)]), now: 0)
        let back = try #require(diffs(core.handle(.remotePresence([node("b", count: 2, version: "2")]), now: 0)).first)
        #expect(back.complete)
        #expect(back.count == 3)
        #expect(back.members?.map(\.client) == ["a.c1", "b.c1", "b.c2"])
    }

    @Test func anotherNodeListingFewerThanItHoldsKeepsTheDiffsIncomplete() throws {
        // A node with a smaller list maximum shares 1 of its 3: nobody here can list everyone.
        var core = core(listMax: 10)
        _ = join(&core, 1, "ana")
        let diff = try #require(diffs(core.handle(.remotePresence([node("b", count: 3, listed: 1)]), now: 0)).first)
        #expect(!diff.complete)
        #expect(diff.count == 4)
    }

    @Test func theNodeSharesItsCountAndItsFirstMembersOnly() throws {
        var core = core(listMax: 3)
        for id in 1...5 { _ = join(&core, UInt64(id), "m\(id)") }
        _ = core.handle(.leave(Connection(id: 1)), now: 0)
        let shared = core.localPresence
        #expect(shared.count == 4)
        #expect(shared.first.map(\.client) == ["a.c2", "a.c3", "a.c4"])
    }

    @Test func remoteChangesWithinOnePresenceIntervalGoOutAsOneDiff() throws {
        var settings = SessionCore.Settings()
        settings.presenceIntervalMs = 100
        var core = SessionCore(name: "x", epoch: "e1", table: Table(), settings: settings, order: StreamOrder(node: "a"))
        _ = join(&core, 1, "ana")
        _ = core.handle(.timer(.presence), now: 100)
        let first = core.handle(.remotePresence([node("b", count: 1)]), now: 110)
        #expect(diffs(first).isEmpty)
        #expect(diffs(core.handle(.remotePresence([node("b", count: 2, version: "2")]), now: 150)).isEmpty)
        let diff = try #require(diffs(core.handle(.timer(.presence), now: 210)).first)
        #expect(diff.joined.map(\.client) == ["b.c1", "b.c2"])
        #expect(diff.count == 3)
    }
}
