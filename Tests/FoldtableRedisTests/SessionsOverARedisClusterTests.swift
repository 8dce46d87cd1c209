import FoldtableCore
import FoldtableServer
import Glibc
import Testing

@testable import FoldtableRedis

/// Hubs sharing sessions through three real redis-servers in cluster mode.
@Suite(.serialized, .enabled(if: RedisServer.shouldRun, "redis-server is not on PATH (install redis-server); under CI=true these tests fail instead"))
struct SessionsOverARedisCluster {
    /// A session name whose keys live on server `index`.
    static func session(on index: Int, _ cluster: RedisClusterServers, _ prefix: String) -> String {
        let key = cluster.key(on: index, prefix)
        return String(key.dropFirst().prefix { $0 != "}" })
    }

    @Test func sessionsOnEveryShardConvergeOnTwoHubsAndPresenceCrossesThem() throws {
        let cluster = try RedisClusterServers()
        let a = RedisNode("a", cluster: [cluster.addresses[0]])
        let b = RedisNode("b", cluster: [cluster.addresses[1]])
        defer {
            a.close()
            b.close()
        }
        let names = (0..<3).map { Self.session(on: $0, cluster, "plan") }
        for (index, name) in names.enumerated() {
            let id = UInt64(index + 1)
            a.join(id, session: name, name: "ana")
            settle([a, b]) { a.messages(id, type: "welcome").count == 1 }
            b.join(id, session: name, name: "bo")
            settle([a, b]) { b.messages(id, type: "welcome").count == 1 }
            a.say(id, #"{"type":"addSection","key":"x","title":"X","id":"s"}"#)
            // The section first on both hubs, so neither hub's toggles can be ordered before it.
            settle([a, b]) { b.events(id).count == 1 }
            for n in 0..<5 {
                a.say(id, #"{"type":"toggle","section":"x","id":"a\#(n)"}"#)
                b.say(id, #"{"type":"toggle","section":"x","id":"b\#(n)"}"#)
            }
        }
        for index in 0..<3 {
            let id = UInt64(index + 1)
            settle([a, b]) { a.events(id).count == 11 && b.events(id).count == 11 }
            #expect(a.events(id) == b.events(id))
            #expect(a.events(id).map { String($0.split(separator: ":")[0]) } == (1...11).map(String.init))
        }
        // Each session's stream is on its own shard.
        for (index, name) in names.enumerated() {
            let length = try wait { cluster.direct[index].xlen(RedisBroker.streamKey(name), completion: $0) }.get()
            #expect(length == 11)
        }
        beat([a, b], draining: [a, b]) { (1...3).allSatisfy { a.presence(UInt64($0)).last?.count == 2 && b.presence(UInt64($0)).last?.count == 2 } }
    }
    @Test func aSessionWhoseSlotMovesToAnotherShardWhileBothHubsWriteLosesNothingAcknowledged() throws {
        let cluster = try RedisClusterServers()
        let a = RedisNode("a", cluster: [cluster.addresses[0]])
        let b = RedisNode("b", cluster: [cluster.addresses[2]])
        defer {
            a.close()
            b.close()
        }
        let name = Self.session(on: 0, cluster, "moving")
        a.join(1, session: name, name: "ana")
        settle([a, b]) { a.messages(1, type: "welcome").count == 1 }
        b.join(1, session: name, name: "bo")
        settle([a, b]) { b.messages(1, type: "welcome").count == 1 }
        a.say(1, #"{"type":"addSection","key":"x","title":"X","id":"s"}"#)
        settle([a, b]) { b.events(1).count == 1 }
        var sent = 0
        func write(_ rounds: Int) {
            for _ in 0..<rounds {
                a.say(1, #"{"type":"toggle","section":"x","id":"a\#(sent)"}"#)
                b.say(1, #"{"type":"toggle","section":"x","id":"b\#(sent)"}"#)
                sent += 1
                for node in [a, b] { node.serviceQueue.drain() }
            }
        }
        write(10)
        // Moved as `redis-cli --cluster reshard` moves a slot, with writes before, during and after.
        try cluster.move(slot: RedisHashSlot.slot(of: name), from: 0, to: 1) { write(10) }
        write(10)
        let acks = { (node: RedisNode) in node.messages(1, type: "ack").count }
        settle([a, b]) { acks(a) == 31 && acks(b) == 30 && a.events(1).count == 61 && b.events(1).count == 61 }
        #expect(a.messages(1, type: "error").isEmpty && b.messages(1, type: "error").isEmpty)
        #expect(a.events(1) == b.events(1))
        #expect(a.events(1).map { String($0.split(separator: ":")[0]) } == (1...61).map(String.init))
        // Everything is on the new shard now.
        let length = try wait { cluster.direct[1].xlen(RedisBroker.streamKey(name), completion: $0) }.get()
        #expect(length == 61)
    }

    @Test func aReaderThatDropsAndReconnectsBeforeTheServiceThreadRunsStillDeliversLaterChanges() throws {
        let cluster = try RedisClusterServers()
        let a = RedisNode("a", cluster: [cluster.addresses[0]])
        let b = RedisNode("b", cluster: [cluster.addresses[1]])
        defer {
            a.close()
            b.close()
        }
        let name = Self.session(on: 0, cluster, "blip")
        a.join(1, session: name, name: "ana")
        settle([a, b]) { a.messages(1, type: "welcome").count == 1 }
        b.join(1, session: name, name: "bo")
        settle([a, b]) { b.messages(1, type: "welcome").count == 1 }
        b.say(1, #"{"type":"addSection","key":"x","title":"X","id":"s"}"#)
        settle([a, b]) { a.events(1).count == 1 }
        // Every connection to shard 0 but the test's own is cut; the readers reconnect while
        // neither hub's service queue runs, so both the down and the up wait there together.
        _ = try wait { cluster.direct[0].send(RedisCommand("CLIENT", "KILL", "TYPE", "normal"), completion: $0) }.get()
        usleep(2_000_000)
        settle([a, b]) { true }
        b.say(1, #"{"type":"toggle","section":"x","id":"after"}"#)
        settle([a, b]) { a.events(1).count == 2 }
        #expect(a.events(1).count == 2)
    }

    @Test func aShardThatIsDownMakesOnlyItsOwnSessionsReadOnly() throws {
        let cluster = try RedisClusterServers()
        let a = RedisNode("a", cluster: [cluster.addresses[0]])
        let b = RedisNode("b", cluster: [cluster.addresses[1]])
        defer {
            a.close()
            b.close()
        }
        let up = Self.session(on: 0, cluster, "up")
        let down = Self.session(on: 2, cluster, "down")
        for (id, name) in [(UInt64(1), up), (2, down)] {
            a.join(id, session: name, name: "ana")
            settle([a, b]) { a.messages(id, type: "welcome").count == 1 }
            b.join(id, session: name, name: "bo")
            settle([a, b]) { b.messages(id, type: "welcome").count == 1 }
            a.say(id, #"{"type":"addSection","key":"x","title":"X","id":"s"}"#)
            settle([a, b]) { a.events(id).count == 1 && b.events(id).count == 1 }
        }
        cluster.servers[2].kill()
        settle([a, b]) { !a.broker.isAvailable(session: down) && !b.broker.isAvailable(session: down) }
        #expect(a.broker.isAvailable(session: up) && b.broker.isAvailable(session: up))
        // The session on a live shard goes on, on both hubs.
        a.say(1, #"{"type":"toggle","section":"x","id":"t1"}"#)
        b.say(1, #"{"type":"toggle","section":"x","id":"t2"}"#)
        settle([a, b]) { a.events(1).count == 3 && b.events(1).count == 3 }
        #expect(a.events(1) == b.events(1))
        #expect(a.messages(1, type: "error").isEmpty && b.messages(1, type: "error").isEmpty)
        // The session on the shard that is down refuses changes.
        a.say(2, #"{"type":"toggle","section":"x","id":"d1"}"#)
        settle([a, b]) { !a.messages(2, type: "error").isEmpty }
        #expect(a.messages(2, type: "error").first?["code"] == .string("storage_unavailable"))
        #expect(a.events(2).count == 1)
    }
    @Test func aQuietBeatUnderAClusterIsOneScriptPerHashSlotOfTheNodesSessions() throws {
        let cluster = try RedisClusterServers()
        let a = RedisNode("a", cluster: [cluster.addresses[0]]) { $0.presenceHeartbeatMs = 100 }
        defer { a.close() }
        // Two sessions on each shard, each in a slot of its own: six slots.
        let names = (0..<3).flatMap { shard in [Self.session(on: shard, cluster, "p"), Self.session(on: shard, cluster, "q")] }
        #expect(Set(names.map { RedisHashSlot.slot(of: $0) }).count == 6)
        for (index, name) in names.enumerated() {
            a.join(UInt64(index + 1), session: name, name: "ana\(index)")
            settle([a]) { a.messages(UInt64(index + 1), type: "welcome").count == 1 }
        }
        beat([a], draining: [a]) { true }
        let scripts = { try (0..<3).map { try PresenceOverRedis.scriptCalls(cluster.direct[$0]) } }
        let before = try scripts()
        a.beat()
        try waitUntil("a's beat reached every shard") {
            a.serviceQueue.drain()
            return try zip(scripts(), before).map { $0 - $1 }.reduce(0, +) >= 7
        }
        beat([], draining: [a]) { true }
        // Per shard: one script per slot of its sessions, plus the counts' on the shard of {sessions}.
        let counted = try zip(scripts(), before).map { $0 - $1 }
        let countsMaster = try #require(a.broker.clusterSlotMap?.owner(ofKey: RedisSessionCounts.membersKey))
        let countsShard = try #require(cluster.index(of: countsMaster))
        #expect(counted == (0..<3).map { $0 == countsShard ? 3 : 2 })
    }
}
