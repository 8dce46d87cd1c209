import FoldtableCore
import Glibc
import Synchronization
import Testing

@testable import FoldtableRedis
@testable import FoldtableServer

extension RedisNode {
    /// Fires the node's presence heartbeat (every timer armed for at most its interval).
    func beat() {
        let interval = UInt64(hub.config.presenceHeartbeatMs)
        for (token, delay) in timers.sorted(by: { $0.key < $1.key }) where delay <= interval {
            timers[token] = nil
            hub.timerFired(token)
        }
    }

    /// The `presence` diffs a connection received, in order.
    func presence(_ id: UInt64) -> [PresenceDiff] {
        messages(id, type: "presence").compactMap { value in
            guard let reader = try? FieldReader(value) else { return nil }
            return try? PresenceDiff.decode(reader)
        }
    }

    func clusterCount(_ session: String = "plan") -> Int? {
        hub.sessionSummaries(visibleTo: nil).first { $0.name == session }?.members
    }
}

/// Beats `beating` every 20 ms and drains every node's queue until `done` holds (or 10 s pass).
func beat(_ beating: [RedisNode], draining nodes: [RedisNode], until done: () -> Bool) {
    for _ in 0..<500 {
        for node in beating { node.beat() }
        for _ in 0..<4 {
            for node in nodes { node.serviceQueue.drain() }
            usleep(5_000)
        }
        if done() { return }
    }
    Issue.record("presence did not settle in 10 s")
}

@Suite(.serialized, .enabled(if: RedisServer.shouldRun, "redis-server is not on PATH (install redis-server); under CI=true these tests fail instead"))
struct PresenceOverRedis {
    let table = Table()

    func node(_ name: String, _ server: RedisServer, expiryMs: Int) -> RedisNode {
        RedisNode(name, redis: server.url) {
            $0.presenceHeartbeatMs = 100
            $0.presenceExpiryMs = expiryMs
        }
    }

    @Test func membersOnTwoHubsSeeEachOtherAndANodeThatStopsBeatingLeavesWhenItsHeartbeatExpires() throws {
        let server = try RedisServer()
        let a = node("a", server, expiryMs: 1_500)
        let b = node("b", server, expiryMs: 1_500)
        defer {
            a.close()
            b.close()
        }
        a.hub.createSessionIfAbsent("plan", table: table)
        a.join(1, name: "ana")
        b.join(1, name: "bo")
        b.join(2, name: "bea")
        beat([a, b], draining: [a, b]) { a.presence(1).last?.count == 3 && b.presence(1).last?.count == 3 }
        #expect(Set(a.presence(1).flatMap(\.joined).map(\.client)) == ["a.c1", "b.c1", "b.c2"])
        #expect(b.presence(1).flatMap(\.joined).map(\.client).contains("a.c1"))
        #expect(a.clusterCount() == 3 && b.clusterCount() == 3)
        // What b shares is in Redis under its node id: its version and count, and its list.
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        let keys = RedisPresence.keys("plan")
        let meta = try wait { redis.send(RedisCommand("HGET", keys[1], "b"), completion: $0) }.get()
        #expect(meta.string?.hasSuffix(" 2") == true)
        // Beats with nothing new write no list: b's version stays.
        beat([a, b], draining: [a, b]) { true }
        let again = try wait { redis.send(RedisCommand("HGET", keys[1], "b"), completion: $0) }.get()
        #expect(again == meta)

        // b dies: it beats no more and says nothing. Its members stay at first (the bound is
        // 1.5 s), then leave a's presence by Redis' clock.
        a.beat()
        a.serviceQueue.drain()
        #expect(a.clusterCount() == 3)
        beat([a], draining: [a]) { a.presence(1).last?.count == 1 }
        let gone = try #require(a.presence(1).last)
        #expect(Set(gone.left) == ["b.c1", "b.c2"])
        #expect(a.clusterCount() == 1)
    }

    @Test func aNodeLeavingNormallyTakesItsMembersAwayAtOnceAndLeavesNoKeys() throws {
        let server = try RedisServer()
        // An expiry of a minute: only the leave can explain a prompt departure.
        let a = node("a", server, expiryMs: 60_000)
        let b = node("b", server, expiryMs: 60_000)
        defer {
            a.close()
            b.close()
        }
        a.hub.createSessionIfAbsent("plan", table: table)
        a.join(1, name: "ana")
        b.join(1, name: "bo")
        beat([a, b], draining: [a, b]) { a.presence(1).last?.count == 2 }
        var left = false
        b.hub.stop { left = true }
        beat([a], draining: [a, b]) { left && a.presence(1).last?.count == 1 }
        #expect(a.presence(1).last?.left == ["b.c1"])
        // b beats no more after leaving.
        b.beat()
        beat([a], draining: [a, b]) { true }
        #expect(a.presence(1).last?.count == 1)
        var leftA = false
        a.hub.stop { leftA = true }
        beat([], draining: [a]) { leftA }
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        let command = RedisCommand(arguments: [Array("EXISTS".utf8)] + RedisPresence.keys("plan").map { Array($0.utf8) })
        let exists = try wait { redis.send(command, completion: $0) }.get()
        #expect(exists == .integer(0))
    }
    @Test func aBeatOfFortySessionsIsOneScriptAndEverySessionStillConverges() throws {
        let server = try RedisServer()
        let a = node("a", server, expiryMs: 60_000)
        let b = node("b", server, expiryMs: 60_000)
        defer {
            a.close()
            b.close()
        }
        let names = (0..<40).map { "s\($0)" }
        for (index, name) in names.enumerated() {
            a.hub.createSessionIfAbsent(name, table: table)
            a.join(UInt64(index + 1), session: name, name: "ana\(index)")
            b.join(UInt64(index + 1), session: name, name: "bo\(index)")
        }
        beat([a, b], draining: [a, b]) {
            (1...40).allSatisfy { a.presence(UInt64($0)).last?.count == 2 && b.presence(UInt64($0)).last?.count == 2 }
        }
        #expect(a.presence(40).flatMap(\.joined).map(\.client).contains("b.c40"))
        // A quiet beat of a's 40 sessions, measured by Redis itself: one script for presence and
        // one for the session counts, where it was one per session plus one.
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        let before = try Self.scriptCalls(redis)
        a.beat()
        try waitUntil("a's beat reached Redis") {
            a.serviceQueue.drain()
            return try Self.scriptCalls(redis) - before >= 2
        }
        beat([], draining: [a]) { true }
        #expect(try Self.scriptCalls(redis) - before == 2)
    }

    @Test func aSessionWhoseKeyHoldsTheWrongTypeFailsAloneAndEveryOtherSessionStillConverges() throws {
        let server = try RedisServer()
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        // A stray string where s7's presence sorted set belongs: WRONGTYPE in its part of the script.
        let poisoned = RedisPresence.keys("s7")[0]
        _ = try wait { redis.send(RedisCommand("SET", poisoned, "stray"), completion: $0) }.get()
        let a = node("a", server, expiryMs: 60_000)
        let b = node("b", server, expiryMs: 60_000)
        defer {
            a.close()
            b.close()
        }
        let names = (0..<20).map { "s\($0)" }
        for (index, name) in names.enumerated() {
            a.hub.createSessionIfAbsent(name, table: table)
            a.join(UInt64(index + 1), session: name, name: "ana\(index)")
            b.join(UInt64(index + 1), session: name, name: "bo\(index)")
        }
        let healthy = (1...20).filter { $0 != 8 }
        beat([a, b], draining: [a, b]) {
            healthy.allSatisfy { a.presence(UInt64($0)).last?.count == 2 && b.presence(UInt64($0)).last?.count == 2 }
        }
        #expect(a.presence(8).last.map { $0.count == 2 } != true)
        let stray = try wait { redis.send(RedisCommand("GET", poisoned), completion: $0) }.get()
        #expect(stray.string == "stray")
    }

    @Test func aBeatOfAThousandSessionsIsOneScriptPerBatchAllInOneRoundTrip() throws {
        let server = try RedisServer()
        let queue = ServiceQueue(wake: {})
        let client = RedisClient(RedisClient.Options(url: server.url), deliver: { queue.post($0) })
        defer { client.close() }
        let failures = Mutex<[String]>([])
        let presence = RedisPresence(commands: client) { event, fields in
            failures.withLock { $0.append("\(event) \(fields)") }
        }
        let beats = (0..<1_000).map { PresenceBeat(session: "s\($0)", members: (1, [Author(client: "a.c\($0)", name: "ana")])) }
        // The first beat connects and loads the script; the second is measured.
        var delivered = 0
        presence.beat(node: "a", expiryMs: 60_000, beats) { _, _ in delivered += 1 }
        try waitUntil("the first beat answered") {
            queue.drain()
            return client.counters.commands >= 9
        }
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        let before = try Self.scriptCalls(redis)
        let trips = client.counters.roundTrips
        usleep(50_000)
        queue.drain()
        presence.beat(node: "a", expiryMs: 60_000, beats) { _, _ in delivered += 1 }
        let scripts = (1_000 + RedisPresence.sessionsPerScript - 1) / RedisPresence.sessionsPerScript
        try waitUntil("the second beat reached Redis") {
            queue.drain()
            return try Self.scriptCalls(redis) - before >= scripts + 1
        }
        // The presence scripts and the session counts' one: at most two round trips.
        #expect(try Self.scriptCalls(redis) - before == scripts + 1)
        #expect(client.counters.roundTrips - trips <= 2)
        #expect(failures.withLock { $0 }.isEmpty)
        #expect(delivered == 0)
    }

    /// EVAL and EVALSHA calls Redis has counted (`INFO commandstats`).
    static func scriptCalls(_ redis: RedisClient) throws -> Int {
        let info = try wait { redis.send(RedisCommand("INFO", "commandstats"), completion: $0) }.get().string ?? ""
        var calls = 0
        for line in info.split(whereSeparator: \.isNewline) where line.hasPrefix("cmdstat_evalsha:") || line.hasPrefix("cmdstat_eval:") {
            guard let field = line.split(separator: ",").first, let value = field.split(separator: "=").last else { continue }
            calls += Int(value) ?? 0
        }
        return calls
    }
}
