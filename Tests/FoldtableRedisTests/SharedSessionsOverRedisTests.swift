import FoldtableCore
import FoldtableServer
import Glibc
import Testing

@testable import FoldtableRedis

/// One node: a hub over a recording transport, sharing sessions through a ``RedisBroker``.
/// The test's thread plays the service thread: it drains the transport's queue, where the
/// broker posts its completions and what its reader reads.
final class RedisNode: Transport {
    let serviceQueue = ServiceQueue(wake: {})
    var sent: [UInt64: [String]] = [:]
    private(set) var hub: Hub!
    let broker: RedisBroker

    init(_ node: String, redis: RedisURL, configure: (inout ServerConfig) -> Void = { _ in }) {
        var options = RedisClient.Options(url: redis)
        options.connectTimeoutMs = 1_000
        options.commandTimeoutMs = 2_000
        var reading = RedisBroker.Reading()
        reading.blockMs = 100
        let queue = serviceQueue
        broker = RedisBroker(options, limits: TableLimits(), reading: reading, post: { queue.post($0) })
        makeHub(node, configure: configure)
    }

    /// A node sharing sessions through a Redis Cluster reached at `seeds`.
    init(_ node: String, cluster seeds: [RedisNodeAddress], configure: (inout ServerConfig) -> Void = { _ in }) {
        var options = RedisClient.Options(url: RedisURL(host: "127.0.0.1"))
        options.connectTimeoutMs = 1_000
        options.commandTimeoutMs = 2_000
        var reading = RedisBroker.Reading()
        reading.blockMs = 100
        let queue = serviceQueue
        broker = RedisBroker(
            cluster: RedisClusterClient.Options(seeds: seeds, node: options), limits: TableLimits(), reading: reading, post: { queue.post($0) })
        makeHub(node, configure: configure)
    }

    private func makeHub(_ node: String, configure: (inout ServerConfig) -> Void) {
        var config = ServerConfig()
        config.changeRatePerSec = 1_000_000
        config.changeBurst = 1_000_000
        config.presenceIntervalMs = 0
        configure(&config)
        // Shared through Redis alone, as foldtabled wires `--redis`: no local store.
        hub = Hub(config: config, transport: self, ordering: .shared(Cluster(node: node, broker: broker)), log: Log(level: .error))
    }

    /// Stops the broker, runs what it posted last, and lets go of the hub: the hub holds this
    /// node as its transport, so keeping it would leave the two (and the broker) in a cycle
    /// that LeakSanitizer reports.
    /// Closing the broker fails what its clients still held, and those completions may post
    /// more work: everything is run until nothing is left, before and after the hub goes (work
    /// left in the queue would hold the hub, and the hub this node).
    func close() {
        broker.close()
        repeat { serviceQueue.drain() } while !serviceQueue.isEmpty
        hub = nil
        while !serviceQueue.isEmpty { serviceQueue.drain() }
    }

    // Transport
    func broadcast(_ message: OutboundMessage, to connections: [Connection]) {
        for connection in connections { send(message, to: connection) }
    }
    func send(_ message: OutboundMessage, to connection: Connection) {
        sent[connection.id, default: []].append(String(decoding: message.bytes, as: UTF8.self))
    }
    func close(_ connection: Connection, code: Int, reason: String) {}
    func queuedBytes(_ connection: Connection) -> Int { 0 }
    func requestDrain(_ connection: Connection, lowMark: Int) {}
    /// Armed timers by token, with their delays: a test fires them (the presence heartbeat).
    var timers: [UInt64: UInt64] = [:]
    func armTimer(token: UInt64, milliseconds: UInt64) { timers[token] = milliseconds }
    func cancelTimer(token: UInt64) { timers[token] = nil }
    func nowMilliseconds() -> UInt64 { 0 }
    func respond(to id: UInt64, with response: HTTPResponse) -> Bool { true }

    func say(_ id: UInt64, _ text: String) {
        Array(text.utf8).withUnsafeBytes { hub.connectionReceived(Connection(id: id), message: $0) }
    }

    func join(_ id: UInt64, session: String = "plan", name: String) {
        hub.connectionOpened(Connection(id: id), peer: "127.0.0.1")
        // As a client opening the name: made when missing.
        say(id, #"{"type":"join","session":"\#(session)","name":"\#(name)","create":true}"#)
    }

    func messages(_ id: UInt64, type: String) -> [JSONValue] {
        (sent[id] ?? []).compactMap { try? JSONParser.parse($0) }.filter { $0["type"] == .string(type) }
    }

    /// The events a connection received, as `seq:type:author` in order.
    func events(_ id: UInt64) -> [String] {
        messages(id, type: "event").map { event in
            let seq: Int64 = if case .integer(let value)? = event["seq"] { value } else { -1 }
            let type = if case .string(let value)? = event["change"]?["type"] { value } else { "?" }
            let by = if case .string(let value)? = event["by"]?["client"] { value } else { "?" }
            return "\(seq):\(type):\(by)"
        }
    }
}

/// Two nodes, "a" and "b", on one fresh Redis: what most of these tests start from. Both are
/// closed when `body` returns.
func withTwoNodes(_ body: (RedisNode, RedisNode) throws -> Void) throws {
    let server = try RedisServer()
    let a = RedisNode("a", redis: server.url)
    let b = RedisNode("b", redis: server.url)
    defer {
        a.close()
        b.close()
    }
    try body(a, b)
}

/// Drains every node's service queue until `done` holds (or 30 s pass: then the test fails).
func settle(_ nodes: [RedisNode], sourceLocation: SourceLocation = #_sourceLocation, until done: () -> Bool) {
    // 30 s: reconnects back off up to seconds, and under ThreadSanitizer on a loaded 2-core CI
    // machine everything runs several times slower; a passing run returns as soon as `done`.
    let deadline = ContinuousClock.now + .seconds(30)
    while ContinuousClock.now < deadline {
        for node in nodes { node.serviceQueue.drain() }
        if done() { return }
        usleep(5_000)
    }
    Issue.record("the nodes did not settle in 30 s", sourceLocation: sourceLocation)
}

@Suite(.serialized, .enabled(if: RedisServer.shouldRun, "redis-server is not on PATH (install redis-server); under CI=true these tests fail instead"))
struct SharedSessionsOverRedis {
    let table: Table = {
        let sections = ["a", "b", "c"].map { key in
            Section(key: key, title: key.uppercased(), collapsed: true, rows: (0..<3).map { Row(key: "\(key)\($0)", label: "row \($0)", value: "") })
        }
        return try! Table(options: TableOptions(), sections: sections, seq: 0)
    }()

    @Test func aSharedSessionIsMadeOnlyByAJoinThatAsksAndNoOtherNodeFindsOneThatDidNot() throws {
        try withTwoNodes { a, b throws in
            settle([a, b]) { a.broker.isAvailable && b.broker.isAvailable }
            a.hub.connectionOpened(Connection(id: 7), peer: "127.0.0.1")
            a.say(7, #"{"type":"join","session":"lookup","name":"ana"}"#)
            settle([a, b]) { !a.messages(7, type: "error").isEmpty }
            #expect(a.messages(7, type: "error").first?["code"] == .string("session_not_found"))
            // Nothing was written to the broker: the other node does not find it either.
            b.hub.connectionOpened(Connection(id: 7), peer: "127.0.0.1")
            b.say(7, #"{"type":"join","session":"lookup","name":"bo"}"#)
            settle([a, b]) { !b.messages(7, type: "error").isEmpty }
            #expect(b.messages(7, type: "error").first?["code"] == .string("session_not_found"))
            // Asked for, it is made, and the other node opens that one.
            a.join(8, session: "lookup", name: "ana")
            settle([a, b]) { !a.messages(8, type: "welcome").isEmpty }
            b.hub.connectionOpened(Connection(id: 9), peer: "127.0.0.1")
            b.say(9, #"{"type":"join","session":"lookup","name":"bo"}"#)
            settle([a, b]) { !b.messages(9, type: "welcome").isEmpty }
            #expect(a.messages(8, type: "welcome").first?["epoch"] == b.messages(9, type: "welcome").first?["epoch"])
        }
    }

    @Test func theAppendsOfOneTurnReachAnotherNodeInOneDelivery() throws {
        try withTwoNodes { a, b throws in
            settle([a, b]) { a.broker.isAvailable && b.broker.isAvailable }
            var deliveries: [[SequencedRequest]] = []
            b.broker.follow(session: "turns", after: "", number: nil, deliver: { deliveries.append($0) }, caughtUp: { _ in }, fellBehind: {})
            // b's reader is blocked on the stream (its first read finds nothing) before a appends.
            usleep(200_000)
            var replies: [Result<String, BrokerError>] = []
            for n in 1...5 {
                let request = SequencedRequest(
                    change: .toggle(section: .key("s")), id: "t\(n)", author: Author(client: "a.c1", name: "ana"),
                    origin: RequestOrigin(node: "a", number: UInt64(n)))
                a.broker.append(session: "turns", request: request) { replies.append($0) }
            }
            settle([a, b]) { replies.count == 5 && deliveries.joined().count == 5 }
            let positions = try replies.map { try $0.get() }
            #expect(positions == positions.sorted() && Set(positions).count == 5)
            // One turn's appends are one transaction: the blocked read wakes once, for all of them.
            #expect(deliveries.map { $0.map(\.id) } == [["t1", "t2", "t3", "t4", "t5"]])
            #expect(deliveries.first?.map(\.position) == positions)
            #expect(deliveries.first?.map(\.number) == [1, 2, 3, 4, 5])
        }
    }

    @Test func membersOnTwoHubsSeeTheSameEventsInTheSameOrder() throws {
        try withTwoNodes { a, b throws in
            a.hub.createSessionIfAbsent("plan", table: table)
            b.hub.createSessionIfAbsent("plan", table: table)
            a.join(1, name: "ana")
            b.join(1, name: "bo")
            settle([a, b]) { !a.messages(1, type: "welcome").isEmpty && !b.messages(1, type: "welcome").isEmpty }
            #expect(a.messages(1, type: "welcome").first?["client"] == .string("a.c1"))
            #expect(a.messages(1, type: "welcome").first?["epoch"] == b.messages(1, type: "welcome").first?["epoch"])
            for round in 0..<10 {
                a.say(1, #"{"type":"toggle","section":"a","id":"a\#(round)"}"#)
                b.say(1, #"{"type":"toggle","section":"\#(round % 2 == 0 ? "b" : "c")","id":"b\#(round)"}"#)
                if round % 3 == 0 { settle([a, b]) { true } }
            }
            b.say(1, #"{"type":"toggle","section":"nope","id":"bad"}"#)
            settle([a, b]) { a.events(1).count == 20 && b.events(1).count == 20 && b.messages(1, type: "error").count == 1 }
            #expect(a.events(1) == b.events(1))
            #expect(a.events(1).map { $0.split(separator: ":")[0] } == (1...20).map { "\($0)" })
            #expect(a.messages(1, type: "ack").count == 10 && b.messages(1, type: "ack").count == 10)
            #expect(a.messages(1, type: "error").isEmpty)
        }
    }

    @Test func anAPIChangeOnOneHubReachesMembersOfTheOther() throws {
        try withTwoNodes { a, b throws in
            b.hub.createSessionIfAbsent("plan", table: table)
            b.join(1, name: "bo")
            settle([a, b]) { !b.messages(1, type: "welcome").isEmpty }
            var answer: Result<UInt64, ProtocolError>?
            a.hub.submitAPIChange(
                .setCollapsed(section: .key("b"), collapsed: false), id: "api:k1", author: Author(client: "api", name: "cron"), session: "plan"
            ) { answer = $0 }
            settle([a, b]) { answer != nil && b.events(1).count == 1 }
            #expect(try answer?.get() == 1)
            #expect(b.events(1) == ["1:set:api"])
            // A session no node made is not found, not made by an API call.
            var missing: Result<UInt64, ProtocolError>?
            a.hub.submitAPIChange(.setAll(collapsed: true), id: nil, author: Author(client: "api", name: "cron"), session: "nope") { missing = $0 }
            settle([a]) { missing != nil }
            if case .failure(let error)? = missing { #expect(error.code == .sessionNotFound) } else { Issue.record("no refusal") }
        }
    }

    @Test func aHubStartedLateLoadsTheFullTableFromTheSnapshotAndTheStream() throws {
        let server = try RedisServer()
        // A snapshot every 10 events, 4 entries kept behind it: the stream is trimmed.
        let a = RedisNode("a", redis: server.url) {
            $0.checkpointEvents = 10
            $0.historyEvents = 4
        }
        defer { a.close() }
        a.hub.createSessionIfAbsent("plan", table: table)
        a.join(1, name: "ana")
        settle([a]) { !a.messages(1, type: "welcome").isEmpty }
        for n in 0..<25 {
            a.say(1, #"{"type":"addSection","title":"Added \#(n)","id":"n\#(n)"}"#)
        }
        settle([a]) { a.events(1).count == 25 }
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        // The snapshot is asked for after the read that passes 10 events since the last, so
        // where it falls depends on how reads batched the entries; the trim follows it exactly.
        // The snapshot goes out on the node's commands client after the apply that asked for it:
        // read until it is there (another client's read can come first).
        func storedSnapshot() throws -> Table {
            let covered = try wait { redis.send(RedisCommand("HGET", RedisBroker.snapshotKey("plan"), "table"), completion: $0) }.get()
            return try TableCheckpoint.decode(covered.string.map { Array($0.utf8) } ?? [], limits: TableLimits())
        }
        var snapshot = try storedSnapshot()
        for _ in 0..<500 where snapshot.seq < 10 {
            a.serviceQueue.drain()
            usleep(10_000)
            snapshot = try storedSnapshot()
        }
        #expect(snapshot.seq >= 10 && snapshot.seq <= 25)
        let length = try wait { redis.xlen(RedisBroker.streamKey("plan"), completion: $0) }.get()
        #expect(length == 25 - Int(snapshot.seq) + 5)

        let late = RedisNode("late", redis: server.url)
        defer { late.close() }
        late.join(9, name: "cy")
        settle([a, late]) { !late.messages(9, type: "welcome").isEmpty }
        let welcome = try #require(late.messages(9, type: "welcome").first)
        #expect(welcome["seq"] == .integer(25))
        guard case .array(let sections)? = welcome["table"]?["sections"] else {
            Issue.record("no sections")
            return
        }
        #expect(sections.count == 28)
        // And it follows the stream from there.
        a.say(1, #"{"type":"toggle","section":"a"}"#)
        settle([a, late]) { late.events(9).count == 1 }
        #expect(late.events(9) == ["26:toggle:a.c1"])
    }
}

extension SharedSessionsOverRedis {
    @Test func aMemberResumesOnAHubOpenedLaterFromTheSnapshotAndItsHistory() throws {
        let server = try RedisServer()
        // A snapshot every 10 events with the 8 before it; the stream trimmed to 8 behind it.
        let configure: (inout ServerConfig) -> Void = {
            $0.checkpointEvents = 10
            $0.historyEvents = 8
        }
        let a = RedisNode("a", redis: server.url, configure: configure)
        defer { a.close() }
        a.hub.createSessionIfAbsent("plan", table: table)
        a.join(1, name: "ana")
        settle([a]) { !a.messages(1, type: "welcome").isEmpty }
        guard case .string(let epoch)? = a.messages(1, type: "welcome").first?["epoch"] else {
            Issue.record("no epoch")
            return
        }
        // Exactly 10 events first: the snapshot covers seq 10, whatever the reads' batches.
        for n in 0..<10 {
            a.say(1, #"{"type":"addSection","title":"Added \#(n)","id":"n\#(n)"}"#)
        }
        settle([a]) { a.events(1).count == 10 }
        for n in 10..<13 {
            a.say(1, #"{"type":"addSection","title":"Added \#(n)","id":"n\#(n)"}"#)
        }
        settle([a]) { a.events(1).count == 13 }
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        let stored = try wait {
            redis.send(RedisCommand("HMGET", RedisBroker.snapshotKey("plan"), "table", "history", "epoch"), completion: $0)
        }.get()
        let fields = try #require(stored.elements)
        guard case .bulk(let tableBytes) = fields[0], case .bulk(let historyBytes) = fields[1] else {
            Issue.record("no snapshot")
            return
        }
        #expect(try TableCheckpoint.decode(tableBytes, limits: TableLimits()).seq == 10)
        let history = try HistoryCoding.decode(historyBytes)
        #expect(history.map(\.seq) == Array(3...10))
        #expect(fields[2].string == epoch)
        // Members' form, byte for byte: the events ana received.
        let received = (a.sent[1] ?? []).filter { $0.contains(#""type":"event""#) }
        #expect(history.map { String(decoding: $0.message, as: UTF8.self) } == Array(received[2..<10]))

        let late = RedisNode("late", redis: server.url, configure: configure)
        defer { late.close() }
        // Ana dropped after seq 5 and resumes on the late node, which opens at the snapshot (seq
        // 10): its history reaches back to 6 (8 events before 13). Cy dropped after seq 4: a
        // fresh welcome, as on node a.
        late.hub.connectionOpened(Connection(id: 9), peer: "127.0.0.1")
        late.say(9, #"{"type":"join","session":"plan","name":"ana","since":5,"epoch":"\#(epoch)"}"#)
        settle([a, late]) { !late.messages(9, type: "resume").isEmpty }
        #expect(late.events(9) == Array(a.events(1)[5...]))
        late.hub.connectionOpened(Connection(id: 10), peer: "127.0.0.1")
        late.say(10, #"{"type":"join","session":"plan","name":"cy","since":4,"epoch":"\#(epoch)"}"#)
        settle([a, late]) { !late.messages(10, type: "welcome").isEmpty }
        #expect(late.messages(10, type: "welcome").first?["recovered"] == .bool(false))
    }
}

@Suite struct HistoryInTheSnapshot {
    @Test func aHistoryReadsBackByteForByte() throws {
        let history = [
            HistoryEntry(seq: 7, message: Array(#"{"type":"event","seq":7}"#.utf8), expanded: ["s", "Ünï code\n"]),
            HistoryEntry(seq: 8, message: [], expanded: []),
            HistoryEntry(seq: 9, message: Array("line\nbreak 3 0\n".utf8), expanded: [""]),
        ]
        #expect(try HistoryCoding.decode(HistoryCoding.encode(history)) == history)
        #expect(try HistoryCoding.decode([]) == [])
    }

    @Test func aHistoryThatIsNotInItsFormIsRefused() {
        let good = HistoryCoding.encode([HistoryEntry(seq: 3, message: Array("abc".utf8), expanded: ["k"])])
        let bad: [[UInt8]] = [
            Array(good.dropLast()), Array("3 3 1 1\nk".utf8), Array("0 0 0\n".utf8), Array("3 0 2 1\nk".utf8), Array("x 0 0\n".utf8),
            Array("3 99999999999999999999 0\n".utf8), Array("3 0 18446744073709551615\n".utf8), Array("no newline".utf8),
        ]
        for bytes in bad {
            #expect(throws: HistoryCoding.Malformed.self) { try HistoryCoding.decode(bytes) }
        }
    }
}

@Suite struct RequestsInTheStream {
    @Test func aRequestReadsBackAsItWasWrittenWithItsPosition() throws {
        let requests = [
            SequencedRequest(
                change: .addSection(NewSection(title: "Ünïcode \"quoted\"", detail: "d", collapsed: false, index: 2)), id: "x-1",
                author: Author(client: "a.c7", name: "Ana"), origin: RequestOrigin(node: "a", number: 41)),
            SequencedRequest(
                change: .toggle(section: .title("Mac")), id: nil, author: Author(client: "api", name: "cron"),
                origin: RequestOrigin(node: "node-2", number: 1)),
        ]
        for request in requests {
            var expected = request
            expected.position = "1700000000000-3"
            #expect(try RequestCoding.decode(RequestCoding.encode(request), position: "1700000000000-3", limits: TableLimits()) == expected)
        }
    }

    @Test func anEntryThatIsNotARequestIsRefusedWithAReason() {
        for bytes in ["{}", #"{"change":{"type":"toggle","section":"s"},"by":{"client":"a","name":"n"},"node":"a","n":0}"#, "not json"] {
            #expect(throws: ProtocolError.self) { try RequestCoding.decode(Array(bytes.utf8), position: "1-0", limits: TableLimits()) }
        }
    }
}
