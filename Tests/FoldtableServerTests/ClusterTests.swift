import FoldtableCore
import Foundation
import Testing

@testable import FoldtableServer

/// Hubs standing for nodes, sharing sessions through in-process ``LocalBroker``s over one set of streams.
final class LocalCluster {
    /// What the broker posts (its completions and deliveries), run when the test settles.
    let brokerQueue = ServiceQueue(wake: {})
    let streams = LocalBroker.Streams()
    var nodes: [Harness] = []

    /// A hub with a broker of its own over the shared streams, as each node has its own Redis broker.
    @discardableResult
    func start(_ node: String, configure: (inout ServerConfig) -> Void = { _ in }) -> Harness {
        let broker = LocalBroker(streams: streams, post: { [brokerQueue] work in brokerQueue.post(work) })
        // Epochs differ per node and per call, as random ones would.
        var epochs = 0
        let harness = Harness(
            cluster: Cluster(node: node, broker: broker), configure: configure,
            makeEpoch: {
                epochs += 1
                return "\(node)\(epochs)"
            })
        nodes.append(harness)
        settle()
        return harness
    }

    /// Runs everything posted anywhere until nothing is left.
    func settle() {
        while !brokerQueue.isEmpty || nodes.contains(where: { !$0.transport.serviceQueue.isEmpty }) {
            brokerQueue.drain()
            for node in nodes { node.transport.settle() }
        }
    }
}

/// The events a connection received, as `seq:type` in order.
func eventLine(_ harness: Harness, _ id: UInt64) -> [String] {
    harness.transport.messages(id, type: "event").map { event in
        let seq: Int64 = if case .integer(let value)? = event["seq"] { value } else { -1 }
        let type = if case .string(let value)? = event["change"]?["type"] { value } else { "?" }
        let by = if case .string(let value)? = event["by"]?["client"] { value } else { "?" }
        return "\(seq):\(type):\(by)"
    }
}

@Suite struct SharedSessions {
    @Test func membersOnTwoHubsSeeTheSameEventsInTheSameOrderAndEachAuthorIsAcknowledgedByItsOwnHub() throws {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        let b = cluster.start("b")
        a.join(1, name: "ana")
        b.join(1, name: "bo")
        cluster.settle()
        #expect(a.transport.messages(1, type: "welcome").first?["client"] == .string("a.c1"))
        #expect(b.transport.messages(1, type: "welcome").first?["client"] == .string("b.c1"))
        for round in 0..<5 {
            a.say(1, #"{"type":"toggle","section":"mac","id":"a\#(round)"}"#)
            b.say(1, #"{"type":"toggle","section":"ipad","id":"b\#(round)"}"#)
            if round % 2 == 0 { cluster.settle() }
        }
        // A change refused on both nodes alike, answered on its author's only.
        b.say(1, #"{"type":"toggle","section":"nope","id":"bad"}"#)
        cluster.settle()
        let onA = eventLine(a, 1)
        #expect(onA.count == 10)
        #expect(onA == eventLine(b, 1))
        #expect(onA.map { $0.split(separator: ":")[0] } == (1...10).map { "\($0)" })
        #expect(a.transport.messages(1, type: "ack").count == 5)
        #expect(b.transport.messages(1, type: "ack").count == 5)
        #expect(b.transport.messages(1, type: "error").count == 1)
        #expect(a.transport.messages(1, type: "error").isEmpty)
    }

    @Test func anAPIChangeOnOneHubReachesMembersOfTheOther() throws {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        let b = cluster.start("b")
        b.join(1, name: "bo")
        cluster.settle()
        var answers: [Result<UInt64, ProtocolError>] = []
        a.hub.submitAPIChange(
            .setCollapsed(section: .key("mac"), collapsed: false), id: "api:k1", author: Author(client: "api", name: "cron"), session: "demo"
        ) { answers.append($0) }
        cluster.settle()
        #expect(try answers.first?.get() == 1)
        #expect(eventLine(b, 1) == ["1:set:api"])
    }

    @Test func anAPIAddRowThroughTheStreamIsAnsweredWithTheKeyEveryNodeGaveIt() throws {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        let b = cluster.start("b")
        b.join(1, name: "bo")
        cluster.settle()
        var answers: [(Result<UInt64, ProtocolError>, String?)] = []
        a.hub.submitAPIChange(
            .addRow(section: .key("mac"), row: NewRow(label: "Mac Pro")), id: nil, author: Author(client: "api", name: "cron"), session: "demo"
        ) { answers.append(($0, $1)) }
        cluster.settle()
        let event = try #require(b.transport.messages(1, type: "event").last)
        guard case .string(let key)? = event["change"]?["row"]?["key"] else {
            Issue.record("the event names no key")
            return
        }
        #expect(try answers.first?.0.get() == 1)
        #expect(answers.first?.1 == key)
    }

    @Test func aHubStartedLateOpensTheFullTable() throws {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        a.join(1, name: "ana")
        cluster.settle()
        for section in ["mac", "ipad", "mac"] {
            a.say(1, #"{"type":"toggle","section":"\#(section)"}"#)
        }
        a.say(1, #"{"type":"addSection","title":"Late news"}"#)
        cluster.settle()
        let late = cluster.start("c")
        late.join(7, name: "cy")
        cluster.settle()
        let welcome = try #require(late.transport.messages(7, type: "welcome").first)
        let reference = try #require(a.transport.messages(1, type: "welcome").first)
        #expect(welcome["seq"] == .integer(4))
        #expect(welcome["epoch"] == reference["epoch"])
        guard case .array(let sections)? = welcome["table"]?["sections"] else {
            Issue.record("no sections")
            return
        }
        #expect(sections.contains { $0["title"] == .string("Late news") })
        #expect(late.hub.residentSessions == ["demo"])
        // And it follows the stream from there.
        a.say(1, #"{"type":"toggle","section":"mac"}"#)
        cluster.settle()
        #expect(eventLine(late, 7) == ["5:toggle:a.c1"])
    }

    @Test func aQuietSharedSessionIsEvictedAndOpenedAgainFromTheStream() throws {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        let b = cluster.start("b")
        // The demo, opened at start for nobody, is quiet: it leaves memory when its idle time is up.
        #expect(a.hub.residentSessions == ["demo"])
        a.transport.fireTimers()
        cluster.settle()
        #expect(a.hub.residentSessions.isEmpty)
        b.join(1, name: "bo")
        cluster.settle()
        b.say(1, #"{"type":"toggle","section":"mac"}"#)
        cluster.settle()
        b.close(1)
        cluster.settle()
        b.transport.fireTimers()
        cluster.settle()
        #expect(b.hub.residentSessions.isEmpty)
        a.join(2, name: "ana")
        cluster.settle()
        a.say(2, #"{"type":"toggle","section":"mac"}"#)
        cluster.settle()
        b.join(3, name: "bo")
        cluster.settle()
        #expect(b.transport.messages(3, type: "welcome").first?["seq"] == .integer(2))
    }

    /// Hubs "a" and "b", each with member 1 (ana on a, bo on b) in the demo session.
    func twoHubsWithOneMemberEach(configure: (inout ServerConfig) -> Void = { _ in }) -> (LocalCluster, Harness, Harness) {
        let cluster = LocalCluster()
        let a = cluster.start("a", configure: configure)
        let b = cluster.start("b", configure: configure)
        a.join(1, name: "ana")
        b.join(1, name: "bo")
        cluster.settle()
        return (cluster, a, b)
    }

    func broker(_ harness: Harness) -> LocalBroker {
        harness.cluster!.broker as! LocalBroker
    }

    func readiness(_ harness: Harness, id: UInt64) -> (Int?, JSONValue?) {
        harness.hub.httpRequest(HTTPRequest(id: id, method: "GET", path: "/readyz", headers: ["Host": "127.0.0.1:8080"]))
        let response = harness.transport.responses[id]
        return (response?.status, response.flatMap { try? JSONParser.parse($0.body) })
    }

    @Test func aHubCutOffFromTheBrokerIsReadOnlyAndCatchesUpInOrderWhenItReturns() throws {
        let (cluster, a, b) = twoHubsWithOneMemberEach()
        #expect(readiness(a, id: 1).0 == 200)

        broker(a).setAvailable(false)
        cluster.settle()
        let (status, body) = readiness(a, id: 2)
        #expect(status == 503)
        #expect(body?["reason"] == .string("shared storage (redis) unavailable: shared sessions are read-only"))
        a.say(1, #"{"type":"toggle","section":"mac","id":"a1"}"#)
        a.hub.submitAPIChange(.toggle(section: .key("mac")), id: nil, author: Author(client: "api", name: "cron"), session: "demo") { result in
            #expect(throws: ProtocolError.self) { try result.get() }
        }
        for round in 0..<3 { b.say(1, #"{"type":"toggle","section":"ipad","id":"b\#(round)"}"#) }
        cluster.settle()
        let refusal = try #require(a.transport.messages(1, type: "error").first)
        #expect(refusal["code"] == .string("storage_unavailable") && refusal["id"] == .string("a1"))
        #expect(a.transport.messages(1, type: "ack").isEmpty)
        #expect(eventLine(a, 1).isEmpty)
        #expect(eventLine(b, 1).count == 3)
        // Members can still read: a find is answered from the committed table.
        a.say(1, #"{"type":"find","q":"Mac","id":"f1"}"#)
        // The demo's large section makes it a search on another thread: wait for its answer.
        let deadline = Date().addingTimeInterval(30)
        while a.transport.messages(1, type: "found").isEmpty && Date() < deadline {
            a.transport.settle()
            usleep(2_000)
        }
        #expect(a.transport.messages(1, type: "found").count == 1)

        broker(a).setAvailable(true)
        cluster.settle()
        #expect(readiness(a, id: 3).0 == 200)
        #expect(eventLine(a, 1) == eventLine(b, 1))
        #expect(a.transport.messages(1, type: "welcome").count == 1)
        a.say(1, #"{"type":"toggle","section":"mac","id":"a2"}"#)
        cluster.settle()
        #expect(a.transport.messages(1, type: "ack").first?["seq"] == .integer(4))
        #expect(eventLine(a, 1) == eventLine(b, 1))
        #expect(eventLine(a, 1).map { $0.split(separator: ":")[0] } == ["1", "2", "3", "4"])
    }

    @Test func aHubWhosePositionWasTrimmedAwayReloadsOnceAndWelcomesItsMembersAgainEvenIfTheBrokerFlaps() throws {
        let (cluster, a, b) = twoHubsWithOneMemberEach {
            $0.checkpointEvents = 2
            $0.historyEvents = 1
        }
        let epoch = a.transport.messages(1, type: "welcome").first?["epoch"]
        broker(a).setAvailable(false)
        cluster.settle()
        for round in 0..<6 { b.say(1, #"{"type":"toggle","section":"ipad","id":"b\#(round)"}"#) }
        cluster.settle()
        // The broker flaps before the first resume is answered: only the latest answer counts.
        broker(a).setAvailable(true)
        broker(a).setAvailable(false)
        broker(a).setAvailable(true)
        cluster.settle()
        let welcomes = a.transport.messages(1, type: "welcome")
        #expect(welcomes.count == 2)
        #expect(welcomes.last?["seq"] == .integer(6))
        #expect(welcomes.last?["epoch"] == epoch)
        #expect(a.hub.metrics.sessionReloads == 1)
        // And it follows the stream from there, in step with the other hub.
        a.say(1, #"{"type":"toggle","section":"mac","id":"a1"}"#)
        cluster.settle()
        #expect(a.transport.messages(1, type: "ack").first?["seq"] == .integer(7))
        #expect(eventLine(a, 1) == ["7:toggle:a.c1"])
        #expect(eventLine(b, 1).last == "7:toggle:a.c1")
    }

    @Test func aSessionTheBrokerLostIsMadeAgainFromANodesTableInANewEpochThatEveryNodeTakes() throws {
        let (cluster, a, b) = twoHubsWithOneMemberEach()
        a.say(1, #"{"type":"addSection","title":"Kept","id":"a1"}"#)
        cluster.settle()
        let before = try #require(a.transport.messages(1, type: "welcome").first?["epoch"])
        broker(a).setAvailable(false)
        broker(b).setAvailable(false)
        cluster.settle()
        cluster.streams.forget(session: "demo")
        broker(a).setAvailable(true)
        cluster.settle()
        broker(b).setAvailable(true)
        cluster.settle()
        let onA = try #require(a.transport.messages(1, type: "welcome").last)
        let onB = try #require(b.transport.messages(1, type: "welcome").last)
        #expect(a.transport.messages(1, type: "welcome").count == 2 && b.transport.messages(1, type: "welcome").count == 2)
        #expect(onA["epoch"] != before)
        #expect(onA["epoch"] == onB["epoch"])
        #expect(onA["seq"] == .integer(1) && onB["seq"] == .integer(1))
        #expect(onA["table"] == onB["table"])
        b.say(1, #"{"type":"toggle","section":"mac","id":"b1"}"#)
        cluster.settle()
        #expect(eventLine(a, 1).last == "2:toggle:b.c1" && eventLine(b, 1).last == "2:toggle:b.c1")
    }
}
