import FoldtableCore
import Glibc
import Testing

@testable import FoldtableRedis
@testable import FoldtableServer

extension RedisNode {
    /// What the hub lists (as `list` and `/api/v1/sessions` do) once its read of the other
    /// nodes' counts, if it needs one, is back; `nil` while it is not.
    func listing() -> [String: Int]? {
        var listed: [String: Int]?
        hub.withListing { [self] in
            listed = Dictionary(uniqueKeysWithValues: hub.sessionSummaries(visibleTo: nil).map { ($0.name, $0.members) })
        }
        for _ in 0..<400 where listed == nil {
            serviceQueue.drain()
            usleep(5_000)
        }
        return listed
    }
}

/// The cluster's session list over a real `redis-server`: two hubs list the same sessions with
/// the same counts, also sessions one of them never opened; a restarted node replaces what it
/// counted before; a node that stops beating leaves the counts by Redis' clock, one leaving
/// normally at once.
@Suite(.serialized, .enabled(if: RedisServer.shouldRun, "redis-server is not on PATH (install redis-server); under CI=true these tests fail instead"))
struct SessionCountsOverRedis {
    func node(_ name: String, _ server: RedisServer, expiryMs: Int) -> RedisNode {
        RedisNode(name, redis: server.url) {
            $0.presenceHeartbeatMs = 100
            $0.presenceExpiryMs = expiryMs
        }
    }

    func hash(_ redis: RedisClient, _ key: String) throws -> [String: String] {
        let reply = try wait { redis.send(RedisCommand("HGETALL", key), completion: $0) }.get()
        let flat = (reply.elements ?? []).compactMap(\.string)
        return Dictionary(uniqueKeysWithValues: stride(from: 0, to: flat.count - 1, by: 2).map { (flat[$0], flat[$0 + 1]) })
    }

    @Test func twoNodesListTheSameSessionsAndCountsAndAKilledNodesMembersLeaveAtTheBound() throws {
        let server = try RedisServer()
        let a = node("a", server, expiryMs: 1_500)
        var b = node("b", server, expiryMs: 1_500)
        defer { a.close() }
        a.join(1, session: "plan", name: "ana")
        b.join(1, session: "plan", name: "bo")
        // Only b ever opens "solo".
        b.join(2, session: "solo", name: "bea")
        b.join(3, session: "solo", name: "ben")
        // Within a heartbeat or two both nodes answer alike, whichever holds the session.
        let both = ["plan": 2, "solo": 2]
        beat([a, b], draining: [a, b]) { a.listing() == both && b.listing() == both }
        #expect(!a.hub.residentSessions.contains("solo"))
        // In Redis: the totals, and what each node added to them.
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        #expect(try hash(redis, RedisSessionCounts.membersKey) == ["plan": "2", "solo": "2"])
        #expect(try hash(redis, RedisSessionCounts.nodeKeyPrefix + "b") == ["plan": "1", "solo": "2"])

        // b restarts under the same id with one member: what its last process counted is
        // replaced, not added to.
        b.close()
        b = node("b", server, expiryMs: 1_500)
        b.join(1, session: "solo", name: "bo")
        beat([a, b], draining: [a, b]) { a.listing() == ["plan": 1, "solo": 1] }
        #expect(try hash(redis, RedisSessionCounts.membersKey) == ["plan": "1", "solo": "1"])

        // b is killed: no more beats, nothing said. Its member stays counted until its
        // heartbeat expires by Redis' clock, then the session is listed with nobody in it.
        b.close()
        a.beat()
        #expect(a.listing()?["solo"] == 1)
        beat([a], draining: [a]) { a.listing()?["solo"] == 0 }
        #expect(a.listing() == ["plan": 1, "solo": 0])
        #expect(try hash(redis, RedisSessionCounts.nodeKeyPrefix + "b").isEmpty)
    }

    @Test func aNodeLeavingNormallyLeavesTheCountsAtOnce() throws {
        let server = try RedisServer()
        // An expiry of a minute: only the leave can explain a prompt departure.
        let a = node("a", server, expiryMs: 60_000)
        let b = node("b", server, expiryMs: 60_000)
        defer {
            a.close()
            b.close()
        }
        b.join(1, session: "solo", name: "bo")
        beat([a, b], draining: [a, b]) { a.listing()?["solo"] == 1 }
        var left = false
        b.hub.stop { left = true }
        beat([a], draining: [a, b]) { left && a.listing()?["solo"] == 0 }
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        #expect(try hash(redis, RedisSessionCounts.nodeKeyPrefix + "b").isEmpty)
        let listed = try wait { redis.send(RedisCommand("ZSCORE", RedisSessionCounts.nodesKey, "b"), completion: $0) }.get()
        #expect(listed == .null)
    }

    @Test func aBeatWritesOnlyTheSessionsWhoseCountsChanged() throws {
        let server = try RedisServer()
        let a = node("a", server, expiryMs: 60_000)
        defer { a.close() }
        for index in 1...5 { a.join(UInt64(index), session: "s\(index)", name: "n\(index)") }
        beat([a], draining: [a]) { a.listing()?.count == 5 }
        beat([a], draining: [a]) { true }
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        // The totals' field values change only with a write; count HINCRBYs by watching the
        // command statistics across beats where one session's count changes.
        func increments() throws -> Int {
            let info = try wait { redis.send(RedisCommand("INFO", "commandstats"), completion: $0) }.get().string ?? ""
            guard let line = info.split(whereSeparator: \.isNewline).first(where: { $0.hasPrefix("cmdstat_hincrby:") }),
                let calls = line.split(separator: "=").dropFirst().first?.split(separator: ",").first
            else { return 0 }
            return Int(calls) ?? 0
        }
        let before = try increments()
        a.join(9, session: "s3", name: "late")
        for _ in 0..<3 {
            a.beat()
            beat([], draining: [a]) { true }
        }
        #expect(try increments() - before == 1)
        #expect(try hash(redis, RedisSessionCounts.membersKey)["s3"] == "2")
    }
}
