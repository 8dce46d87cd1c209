import FoldtableCore
import FoldtableServer
import Testing

@testable import FoldtableRedis

/// What shared sessions do when Redis goes away and comes back: a real `redis-server` killed
/// and started again under two hubs (see "When Redis fails" in the article "More than one
/// machine").
@Suite(.serialized, .enabled(if: RedisServer.shouldRun, "redis-server is not on PATH (install redis-server); under CI=true these tests fail instead"))
struct RedisOutages {
    let table: Table = {
        let sections = ["a", "b", "c"].map { key in
            Section(key: key, title: key.uppercased(), collapsed: true, rows: (0..<3).map { Row(key: "\(key)\($0)", label: "row \($0)", value: "") })
        }
        return try! Table(options: TableOptions(), sections: sections, seq: 0)
    }()

    /// Two hubs with member 1 each in session "plan", both brokers connected.
    func twoNodes(_ server: RedisServer, configure: (inout ServerConfig) -> Void = { _ in }) -> (RedisNode, RedisNode) {
        let a = RedisNode("a", redis: server.url, configure: configure)
        let b = RedisNode("b", redis: server.url, configure: configure)
        a.hub.createSessionIfAbsent("plan", table: table)
        b.hub.createSessionIfAbsent("plan", table: table)
        a.join(1, name: "ana")
        b.join(1, name: "bo")
        settle([a, b]) {
            !a.messages(1, type: "welcome").isEmpty && !b.messages(1, type: "welcome").isEmpty && a.broker.isAvailable && b.broker.isAvailable
        }
        return (a, b)
    }

    /// Toggles from member 1 on each node, with change ids `<label>a<n>` and `<label>b<n>`.
    func burst(_ a: RedisNode, _ b: RedisNode, _ label: String, _ count: Int) -> [String] {
        var ids: [String] = []
        for n in 0..<count {
            a.say(1, #"{"type":"toggle","section":"a","id":"\#(label)a\#(n)"}"#)
            b.say(1, #"{"type":"toggle","section":"\#(n % 2 == 0 ? "b" : "c")","id":"\#(label)b\#(n)"}"#)
            ids += ["\(label)a\(n)", "\(label)b\(n)"]
        }
        return ids
    }

    func ids(_ messages: [JSONValue]) -> Set<String> {
        Set(messages.compactMap { if case .string(let id)? = $0["id"] { return id } else { return nil } })
    }

    /// Every acknowledged change is in the events exactly once, at the seq its ack gave.
    func acknowledgedChangesAreInTheEvents(_ node: RedisNode) {
        var seqOfId: [String: [JSONValue?]] = [:]
        for event in node.messages(1, type: "event") {
            if case .string(let id)? = event["id"] { seqOfId[id, default: []].append(event["seq"]) }
        }
        for ack in node.messages(1, type: "ack") {
            guard case .string(let id)? = ack["id"] else { continue }
            #expect(seqOfId[id] == [ack["seq"]], "ack of \(id)")
        }
    }

    @Test func redisKilledAndRestartedMidRunRefusesChangesWhileDownThenBothHubsEndIdenticalWithoutSeqGaps() throws {
        let server = try RedisServer(appendOnly: true)
        let (a, b) = twoNodes(server)
        defer {
            a.close()
            b.close()
        }
        _ = burst(a, b, "up", 10)
        settle([a, b]) { a.events(1).count == 20 && b.events(1).count == 20 }

        server.kill()
        settle([a, b]) { !a.broker.isAvailable && !b.broker.isAvailable }
        let down = burst(a, b, "down", 5)
        settle([a, b]) { ids(a.messages(1, type: "error")).union(ids(b.messages(1, type: "error"))) == Set(down) }
        for node in [a, b] {
            #expect(node.messages(1, type: "error").allSatisfy { $0["code"] == .string("storage_unavailable") })
            #expect(ids(node.messages(1, type: "ack")).isDisjoint(with: down))
        }
        #expect(a.events(1).count == 20 && b.events(1).count == 20)

        try server.start()
        settle([a, b]) { a.broker.isAvailable && b.broker.isAvailable }
        let back = burst(a, b, "back", 10)
        settle([a, b]) {
            ids(a.messages(1, type: "ack")).union(ids(b.messages(1, type: "ack"))).isSuperset(of: back) && a.events(1).count == 40
                && b.events(1).count == 40
        }
        #expect(a.events(1) == b.events(1))
        #expect(a.events(1).map { $0.split(separator: ":")[0] } == (1...40).map { "\($0)" })
        // Nobody was reloaded: Redis kept everything (appendonly), so the streams continued.
        #expect(a.messages(1, type: "welcome").count == 1 && b.messages(1, type: "welcome").count == 1)
        acknowledgedChangesAreInTheEvents(a)
        acknowledgedChangesAreInTheEvents(b)
        // Newcomers on either node get the same table.
        a.join(2, name: "cy")
        b.join(2, name: "di")
        settle([a, b]) { !a.messages(2, type: "welcome").isEmpty && !b.messages(2, type: "welcome").isEmpty }
        let onA = try #require(a.messages(2, type: "welcome").first)
        let onB = try #require(b.messages(2, type: "welcome").first)
        #expect(onA["seq"] == .integer(40) && onA["table"] == onB["table"])
    }

    @Test func aRedisRestartedWithoutItsDataGetsTheSessionBackFromANodeInANewEpoch() throws {
        let server = try RedisServer(appendOnly: false)
        let (a, b) = twoNodes(server)
        defer {
            a.close()
            b.close()
        }
        _ = burst(a, b, "up", 3)
        settle([a, b]) { a.events(1).count == 6 && b.events(1).count == 6 }
        let before = a.messages(1, type: "welcome").first?["epoch"]
        server.kill()
        settle([a, b]) { !a.broker.isAvailable && !b.broker.isAvailable }
        try server.start()
        settle([a, b]) { a.messages(1, type: "welcome").count == 2 && b.messages(1, type: "welcome").count == 2 }
        let onA = try #require(a.messages(1, type: "welcome").last)
        let onB = try #require(b.messages(1, type: "welcome").last)
        #expect(onA["epoch"] != before)
        #expect(onA["epoch"] == onB["epoch"])
        #expect(onA["seq"] == .integer(6) && onA["table"] == onB["table"])
        a.say(1, #"{"type":"toggle","section":"b","id":"after"}"#)
        settle([a, b]) { a.events(1).count == 7 && b.events(1).count == 7 }
        #expect(a.events(1).last == "7:toggle:a.c1" && b.events(1).last == "7:toggle:a.c1")
        #expect(a.messages(1, type: "ack").last?["seq"] == .integer(7))
    }

    @Test func resumeTellsAStreamThatContinuesFromOneTrimmedPastAndFromOneThatLostWhatWasApplied() throws {
        let server = try RedisServer()
        // A snapshot every 5 events with 2 entries kept behind it: the stream is trimmed.
        let a = RedisNode("a", redis: server.url) {
            $0.checkpointEvents = 5
            $0.historyEvents = 2
        }
        defer { a.close() }
        a.hub.createSessionIfAbsent("plan", table: table)
        a.join(1, name: "ana")
        settle([a]) { !a.messages(1, type: "welcome").isEmpty }
        for n in 0..<12 { a.say(1, #"{"type":"toggle","section":"a","id":"n\#(n)"}"#) }
        settle([a]) { a.events(1).count == 12 }
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        let newest = try wait { redis.xrevrange(RedisBroker.streamKey("plan"), count: 1, completion: $0) }.get()
        let last = try #require(newest.first?.id.description)
        let epoch = try #require(a.messages(1, type: "welcome").first?["epoch"].flatMap { if case .string(let e) = $0 { e } else { nil } })
        let fresh = BrokeredSession(epoch: "new", table: table, position: "", requests: [])
        func resume(_ after: String) -> Result<BrokeredSession?, BrokerError>? {
            var result: Result<BrokeredSession?, BrokerError>?
            a.broker.resume(session: "plan", after: after, epoch: epoch, create: fresh) { result = $0 }
            settle([a]) { result != nil }
            return result
        }
        // From the newest entry the stream continues.
        #expect(try resume(last)?.get() == nil)
        // From an entry trimmed away: reload from the snapshot, same epoch.
        let trimmed = try #require(try resume("1-0")?.get())
        #expect(trimmed.epoch == epoch && !trimmed.created)
        #expect(trimmed.table.seq + UInt64(trimmed.requests.count) == 12)
        // From past anything Redis holds (it lost what was applied): a new epoch, which sticks.
        let lost = try #require(try resume("99999999999999-0")?.get())
        #expect(lost.epoch == "new" && lost.table.seq + UInt64(lost.requests.count) == 12)
        #expect(try resume(last)?.get()?.epoch == "new")
    }

    @Test func aBrokerWhoseClientsConnectBeforeItIsWholeStillBecomesAvailable() throws {
        // Its clients connect from their own threads while the broker is being made, and report
        // each transition once: a report lost then left the node read-only until a reconnect
        // (seen as a rare 30 s hang of the tests above). Many brokers make the race likely.
        let server = try RedisServer()
        let nodes = (0..<24).map { RedisNode("n\($0)", redis: server.url) }
        defer { for node in nodes { node.close() } }
        settle(nodes) { nodes.allSatisfy { $0.broker.isAvailable } }
        #expect(nodes.indices.filter { !nodes[$0].broker.isAvailable } == [])
    }

    @Test func aRequestWhoseEntryNoReaderCanDecodeIsRefusedToItsAuthorInsteadOfWaitingForever() throws {
        let server = try RedisServer()
        // Hubs that take longer texts than their readers decode (as a newer node's entries may
        // be to an older node): such a request is appended, then dropped by every reader alike.
        let (a, b) = twoNodes(server) { $0.tableLimits.maxTextBytes = 6_000 }
        defer {
            a.close()
            b.close()
        }
        a.say(1, #"{"type":"addSection","title":"\#(String(repeating: "x", count: 5_000))","id":"long"}"#)
        a.say(1, #"{"type":"addSection","title":"Short","id":"short"}"#)
        settle([a, b]) { a.messages(1, type: "error").count == 1 && a.messages(1, type: "ack").count == 1 && b.events(1).count == 1 }
        let refusal = try #require(a.messages(1, type: "error").first)
        #expect(refusal["id"] == .string("long") && refusal["code"] == .string("storage_unavailable"))
        #expect(a.messages(1, type: "ack").first?["id"] == .string("short"))
        #expect(a.events(1) == ["1:addSection:a.c1"] && b.events(1) == a.events(1))
        // Counted on both nodes; a node whose reader followed the stream again from before the
        // entry (a resume when the broker became available) reads and drops it once more.
        #expect(a.broker.counters.droppedEntries >= 1 && b.broker.counters.droppedEntries >= 1)
        #expect(a.messages(1, type: "error").count == 1)
    }
}
