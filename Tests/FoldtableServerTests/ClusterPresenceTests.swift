import FoldtableCore
import Testing

@testable import FoldtableServer

extension LocalCluster {
    /// One heartbeat of every node (each fires its beat timer), twice: what one node shares in
    /// its beat reaches another in that one's next.
    func beat(skipping: Set<String> = []) {
        for _ in 0..<2 {
            for node in nodes where !skipping.contains(node.cluster?.node ?? "") {
                node.transport.fireTimers(upTo: UInt64(node.hub.config.presenceHeartbeatMs))
                settle()
            }
        }
    }
}

/// Presence across hubs standing for nodes over ``LocalBroker``s: members of each see the
/// others', counts are cluster-wide, and a node that stops beating takes its members with it
/// when its heartbeat expires by the broker's clock.
@Suite struct ClusterPresence {
    func presence(_ harness: Harness, _ id: UInt64) -> [PresenceDiff] {
        harness.transport.messages(id, type: "presence").compactMap { value in
            guard let reader = try? FieldReader(value) else { return nil }
            return try? PresenceDiff.decode(reader)
        }
    }

    /// What `list` on `harness` says of `session` (answered once other nodes' counts are read).
    func listedCount(_ harness: Harness, _ id: UInt64, session: String = "demo", in cluster: LocalCluster) -> Int64? {
        harness.say(id, #"{"type":"list"}"#)
        cluster.settle()
        guard case .array(let list)? = harness.transport.messages(id, type: "sessions").last?["sessions"] else { return nil }
        for entry in list where entry["name"] == .string(session) {
            if case .integer(let count)? = entry["members"] { return count }
        }
        return nil
    }

    @Test func membersOnTwoHubsSeeEachOtherAfterAHeartbeatAndCountsAreClusterWide() throws {
        let cluster = LocalCluster()
        let (a, b) = anaOnAAndBoOnB(cluster)
        b.join(2, name: "bea")
        cluster.settle()
        // Before a heartbeat each node knows only its own members.
        #expect(presence(a, 1).allSatisfy { $0.count == 1 })
        cluster.beat()
        let onA = try #require(presence(a, 1).last)
        #expect(onA.count == 3)
        #expect(onA.joined.map(\.client) == ["b.c1", "b.c2"])
        #expect(presence(b, 1).last?.count == 3)
        #expect(presence(b, 1).flatMap(\.joined).map(\.client).contains("a.c1"))
        #expect(listedCount(a, 1, in: cluster) == 3)
        #expect(a.hub.sessionSummaries(visibleTo: nil).first { $0.name == "demo" }?.members == 3)
        // A newcomer's welcome lists everyone, wherever they are connected.
        a.join(3, name: "al")
        let welcome = try #require(a.transport.messages(3, type: "welcome").first)
        #expect(welcome["presenceCount"] == .integer(4))
        guard case .array(let listed)? = welcome["presence"] else {
            Issue.record("no presence list")
            return
        }
        #expect(Set(listed.compactMap { if case .string(let c)? = $0["client"] { c } else { nil } }) == ["a.c1", "a.c3", "b.c1", "b.c2"])
    }

    @Test func aMemberLeavingOneHubLeavesTheOthersPresenceAtTheNextHeartbeat() throws {
        let cluster = LocalCluster()
        let (a, b) = anaOnAAndBoOnB(cluster)
        cluster.beat()
        b.close(1)
        cluster.beat()
        let last = try #require(presence(a, 1).last)
        #expect(last.left == ["b.c1"])
        #expect(last.count == 1)
    }

    @Test func aHubThatStopsBeatingLosesItsMembersOnlyWhenItsHeartbeatExpires() throws {
        let cluster = LocalCluster()
        let (a, _) = anaOnAAndBoOnB(cluster)
        cluster.beat()
        #expect(presence(a, 1).last?.count == 2)
        // b dies (kill -9): no more beats, no leaves. Within the bound b's members stay.
        let expiry = UInt64(a.hub.config.presenceExpiryMs)
        cluster.streams.now += expiry - 1
        cluster.beat(skipping: ["b"])
        #expect(presence(a, 1).last?.count == 2)
        cluster.streams.now += 1
        cluster.beat(skipping: ["b"])
        let gone = try #require(presence(a, 1).last)
        #expect(gone.left == ["b.c1"])
        #expect(gone.count == 1)
        #expect(listedCount(a, 1, in: cluster) == 1)
    }

    @Test func aHubStoppingNormallyTakesItsMembersAwayAtOnce() throws {
        let cluster = LocalCluster()
        let (a, b) = anaOnAAndBoOnB(cluster)
        cluster.beat()
        var left = false
        b.hub.stop { left = true }
        cluster.settle()
        #expect(left)
        cluster.beat()
        #expect(presence(a, 1).last?.left == ["b.c1"])
        #expect(presence(a, 1).last?.count == 1)
    }

    @Test func aLargeSessionSplitOverHubsSharesCountsAndSamplesNotEveryMember() throws {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        let b = cluster.start("b")
        let listMax = a.hub.config.presenceListMax
        for id in 1...UInt64(listMax + 50) { a.join(id, name: "a\(id)") }
        b.join(1, name: "bo")
        cluster.beat()
        let shared = try #require(cluster.streams.presence["demo"]?["a"]?.entry)
        #expect(shared.count == listMax + 50)
        #expect(shared.members.count == listMax)
        let onB = try #require(presence(b, 1).last)
        #expect(!onB.complete)
        #expect(onB.count == listMax + 51)
        #expect(listedCount(b, 1, in: cluster) == Int64(listMax + 51))
    }
}

/// Hubs `a` and `b` of `cluster`, with member 1 of each joined (`ana` on a, `bo` on b).
private func anaOnAAndBoOnB(_ cluster: LocalCluster) -> (Harness, Harness) {
    let a = cluster.start("a")
    let b = cluster.start("b")
    a.join(1, name: "ana")
    b.join(1, name: "bo")
    return (a, b)
}
