import FoldtableCore
import Testing

@testable import FoldtableServer

/// `list` and `GET /api/v1/sessions` on hubs standing for nodes over ``LocalBroker``s: every
/// hub lists the same shared sessions with the same counts, also the sessions it does not hold
/// (evicted, or never opened there), read from the broker at most once per heartbeat.
@Suite struct ClusterListing {
    /// What `list` on `harness` (from a connection that joined nothing) answers, name → members.
    func listed(_ harness: Harness, in cluster: LocalCluster, connection id: UInt64 = 90) -> [String: Int64]? {
        if harness.transport.sent[id] == nil { harness.open(id) }
        harness.say(id, #"{"type":"list"}"#)
        cluster.settle()
        return sessions(harness.transport.messages(id, type: "sessions").last?["sessions"])
    }

    /// What `GET /api/v1/sessions` on `harness` answers, name → members.
    func listedOverHTTP(_ harness: Harness, in cluster: LocalCluster, request id: UInt64) throws -> [String: Int64]? {
        harness.hub.httpRequest(HTTPRequest(id: id, method: "GET", path: "/api/v1/sessions", headers: ["Host": "127.0.0.1:8080"]))
        cluster.settle()
        let response = try #require(harness.transport.responses[id])
        #expect(response.status == 200)
        return sessions(try JSONParser.parse(response.body)["sessions"])
    }

    func sessions(_ value: JSONValue?) -> [String: Int64]? {
        guard case .array(let list)? = value else { return nil }
        var counts: [String: Int64] = [:]
        for entry in list {
            guard case .string(let name)? = entry["name"], case .integer(let members)? = entry["members"] else { return nil }
            counts[name] = members
        }
        return counts
    }

    @Test func aSessionEvictedOnOneHubIsListedThereWithTheMembersOfTheOther() throws {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        let b = cluster.start("b")
        a.join(1, session: "x")
        b.join(1, session: "x")
        b.join(2, session: "x")
        cluster.beat()
        a.close(1)
        // Every timer of a, its idle eviction among them.
        a.transport.fireTimers()
        cluster.settle()
        #expect(!a.hub.residentSessions.contains("x"))
        cluster.beat()
        #expect(listed(a, in: cluster)?["x"] == 2)
        #expect(try listedOverHTTP(a, in: cluster, request: 1)?["x"] == 2)
        #expect(a.hub.sessionSummaries(visibleTo: nil).first { $0.name == "x" }?.sections == nil)
        // Both hubs give the same answer, whoever holds the session.
        #expect(listed(a, in: cluster) == listed(b, in: cluster))
        #expect(try listedOverHTTP(a, in: cluster, request: 2) == listedOverHTTP(b, in: cluster, request: 3))
    }

    @Test func aSessionMadeOnAnotherHubAndNeverOpenedHereIsListedWithoutBeingOpened() throws {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        let b = cluster.start("b")
        b.join(1, session: "y")
        b.hub.createSessionIfAbsent("empty", table: Table())
        cluster.settle()
        cluster.beat()
        let onA = try #require(listed(a, in: cluster))
        #expect(onA["y"] == 1)
        #expect(onA["empty"] == 0)
        #expect(try listedOverHTTP(a, in: cluster, request: 1) == onA)
        #expect(listed(b, in: cluster) == onA)
        #expect(!a.hub.residentSessions.contains("y"))
        #expect(!a.hub.residentSessions.contains("empty"))
    }

    @Test func aHubThatStopsBeatingLeavesTheCountsOfSessionsOthersDoNotHoldAtTheBound() {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        let b = cluster.start("b")
        b.join(1, session: "y")
        b.join(2, session: "y")
        cluster.beat()
        #expect(listed(a, in: cluster)?["y"] == 2)
        // b dies: its members stay counted until its heartbeat expires, not a moment longer.
        let expiry = UInt64(a.hub.config.presenceExpiryMs)
        cluster.streams.now += expiry - 1
        cluster.beat(skipping: ["b"])
        #expect(listed(a, in: cluster)?["y"] == 2)
        cluster.streams.now += 1
        cluster.beat(skipping: ["b"])
        // Still listed: the session exists; nobody is in it.
        #expect(listed(a, in: cluster)?["y"] == 0)
    }

    @Test func listingsReadOtherHubsCountsAtMostOncePerHeartbeat() {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        let b = cluster.start("b")
        b.join(1, session: "y")
        cluster.beat()
        #expect(listed(a, in: cluster)?["y"] == 1)
        b.join(2, session: "y")
        cluster.beat(skipping: ["a"])
        // Within a's heartbeat the listing is answered at once, from what it read last.
        a.say(90, #"{"type":"list"}"#)
        #expect(sessions(a.transport.messages(90, type: "sessions").last?["sessions"])?["y"] == 1)
        // a's next heartbeat lets the next listing read again.
        cluster.beat()
        #expect(listed(a, in: cluster)?["y"] == 2)
    }

    @Test func aListingAnsweredAfterItsConnectionClosedSendsNothing() {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        a.open(5)
        a.say(5, #"{"type":"list"}"#)
        a.close(5)
        cluster.settle()
        #expect(a.transport.messages(5, type: "sessions").isEmpty)
        #expect(a.transport.sendsToClosedConnections == 0)
    }
}
