import FoldtableCore
import Testing

@testable import FoldtableServer

/// The hub over its store: faults, eviction and reload, delete (memory store; the SQLite store
/// has its own tests and the end-to-end suite runs the real binary on it).
@Suite struct HubStorage {
    @Test func aChangeTheStoreCannotCommitIsAnErrorReplyAndNothingIsBroadcast() {
        let h = Harness()
        h.join(1)
        h.join(2)
        h.transport.clear()
        h.store.failWrites = .unavailable("disk full")
        h.say(1, #"{"type":"toggle","section":"mac","id":"a"}"#)
        let error = h.transport.messages(1, type: "error").first
        #expect(error?["code"] == .string("storage_unavailable"))
        #expect(error?["id"] == .string("a"))
        #expect(h.transport.messages(1, type: "ack").isEmpty)
        #expect(h.transport.messages(2).isEmpty)
        h.store.failWrites = nil
        h.say(1, #"{"type":"toggle","section":"mac","id":"b"}"#)
        #expect(h.transport.messages(1, type: "ack").first?["seq"] == .integer(1))
        #expect(h.transport.messages(2, type: "event").first?["collapsed"] == .object([("mac", .bool(true))]))
    }

    @Test func aSessionCreatedWhileTheStoreFailedTakesChangesOnceItWorksAgain() {
        let h = Harness()
        h.store.failWrites = .unavailable("disk full")
        h.join(1, session: "x")
        #expect(h.transport.messages(1, type: "welcome").count == 1)
        h.store.failWrites = nil
        // The log never got the session: the first change is refused, and the log is rebased on
        // the committed table, so the next one goes through.
        h.say(1, #"{"type":"addSection","title":"A","id":"a"}"#)
        #expect(h.transport.messages(1, type: "error").first?["code"] == .string("storage_unavailable"))
        h.say(1, #"{"type":"addSection","title":"A","id":"a"}"#)
        #expect(h.transport.messages(1, type: "ack").first?["seq"] == .integer(1))
    }

    @Test func aQuietSessionIsEvictedAndTheNextJoinGetsItBackWithItsEpochAndHistory() {
        let h = Harness { $0.idleEvictSecs = 1 }
        h.open(1)
        h.say(1, #"{"type":"join","session":"x","name":"bo","create":true,"idScope":"tab-0123456789abcdef"}"#)
        h.say(1, #"{"type":"addSection","title":"A","id":"a"}"#)
        h.say(1, #"{"type":"addSection","title":"B","id":"b"}"#)
        h.close(1)
        #expect(h.hub.residentSessions.contains("x"))
        h.transport.fireTimers()
        #expect(!h.hub.residentSessions.contains("x"))
        h.open(2)
        // The same client again (its idScope), on a new connection.
        h.say(2, #"{"type":"join","session":"x","name":"bo","since":1,"epoch":"e1","idScope":"tab-0123456789abcdef"}"#)
        #expect(h.transport.messages(2).first?["type"] == .string("resume"))
        #expect(h.transport.messages(2, type: "event").map { $0["seq"] } == [.integer(2)])
        #expect(h.hub.residentSessions.contains("x"))
        // The change-id window came back too: the client's retry is acknowledged, not applied again.
        h.say(2, #"{"type":"addSection","title":"A","id":"a"}"#)
        #expect(h.transport.messages(2, type: "ack").first?["seq"] == .integer(1))
        h.say(2, #"{"type":"list"}"#)
        #expect(h.transport.messages(2, type: "sessions").count == 1)
    }

    @Test func joinsArrivingWhileASessionLoadsAllGetIt() {
        let h = Harness { $0.idleEvictSecs = 1 }
        h.join(1, session: "x")
        h.say(1, #"{"type":"addSection","title":"A"}"#)
        h.close(1)
        h.transport.fireTimers()
        h.open(2)
        h.open(3)
        // Both joins are read before the load completes (one turn of the loop).
        for id in [UInt64(2), 3] {
            let bytes = Array(#"{"type":"join","session":"x","name":"n"}"#.utf8)
            bytes.withUnsafeBytes { h.hub.connectionReceived(Connection(id: id), message: $0) }
        }
        #expect(h.transport.messages(2).isEmpty)
        h.transport.settle()
        #expect(h.transport.messages(2, type: "welcome").first?["seq"] == .integer(1))
        #expect(h.transport.messages(3, type: "welcome").first?["seq"] == .integer(1))
    }

    /// Sends `text` as a message read in the current turn, before anything queued runs.
    func receive(_ h: Harness, _ id: UInt64, _ text: String) {
        let bytes = Array(text.utf8)
        bytes.withUnsafeBytes { h.hub.connectionReceived(Connection(id: id), message: $0) }
    }

    /// A hub holding session "x" (one section "s") only in its store: a join must load it.
    func storedNotResident() -> Harness {
        let h = Harness { $0.idleEvictSecs = 1 }
        h.join(1, session: "x")
        h.say(1, #"{"type":"addSection","key":"s","title":"S","id":"s"}"#)
        h.close(1)
        h.transport.fireTimers()
        return h
    }

    @Test func changesSentWhileASessionLoadsWaitForTheWelcomeAndAreAppliedInOrder() {
        let h = storedNotResident()
        #expect(!h.hub.residentSessions.contains("x"))
        h.open(2)
        // The join and two changes are read in one turn, before the load completes.
        receive(h, 2, #"{"type":"join","session":"x","name":"ana"}"#)
        receive(h, 2, #"{"type":"toggle","section":"s","id":"t1"}"#)
        receive(h, 2, #"{"type":"addRow","section":"s","label":"r","id":"t2"}"#)
        #expect(h.transport.messages(2).isEmpty)
        h.transport.settle()
        let answers = h.transport.messages(2).compactMap { message -> String? in
            guard case .string(let type)? = message["type"], type != "presence" else { return nil }
            if case .string(let id)? = message["id"] { return "\(type) \(id)" }
            return type
        }
        #expect(answers.filter { !$0.hasPrefix("event") } == ["welcome", "ack t1", "ack t2"])
    }

    @Test func pastItsBoundAMessageSentDuringAJoinIsRefusedAndTheRestAreApplied() {
        let h = storedNotResident()
        h.open(2)
        receive(h, 2, #"{"type":"join","session":"x","name":"ana"}"#)
        for index in 0...Hub.heldWhileJoiningMax { receive(h, 2, #"{"type":"toggle","section":"s","id":"t\#(index)"}"#) }
        // The one past the bound is refused at once, the socket open; the others wait.
        let refused = h.transport.messages(2, type: "error")
        #expect(refused.count == 1)
        #expect(refused.first?["code"] == .string("limit_reached"))
        #expect(refused.first?["id"] == .string("t\(Hub.heldWhileJoiningMax)"))
        h.transport.settle()
        #expect(h.transport.messages(2, type: "ack").count == Hub.heldWhileJoiningMax)
    }

    @Test func changesHeldForAJoinThatFailsAreAnsweredNotJoined() {
        let h = Harness()
        h.open(1)
        receive(h, 1, #"{"type":"join","session":"nowhere","name":"ana"}"#)
        receive(h, 1, #"{"type":"toggle","section":"s","id":"t1"}"#)
        h.transport.settle()
        let codes = h.transport.messages(1, type: "error").map { $0["code"] }
        #expect(codes == [.string("session_not_found"), .string("not_joined")])
        #expect(!h.hub.residentSessions.contains("nowhere"))
    }

    @Test func atTheSessionLimitAQuietSessionMakesRoomAndABusyOneDoesNot() {
        let h = Harness { $0.maxSessions = 2 }
        h.join(1)
        h.join(2, session: "x")
        h.close(2)
        h.join(3, session: "y")
        #expect(h.transport.messages(3, type: "welcome").count == 1)
        #expect(h.hub.residentSessions == ["demo", "y"])
        h.join(4, session: "z")
        #expect(h.transport.messages(4, type: "error").first?["code"] == .string("limit_reached"))
    }

    @Test func deletingASessionClosesEveryMemberWith4501AndItComesBackEmptyWithANewEpoch() {
        var epochs = 0
        let h = Harness()
        h.hub = Hub(
            config: h.hub.config, transport: h.transport, ordering: .local(store: h.store, eventLog: h.store, names: ["demo"]),
            log: Log(level: .error),
            makeEpoch: {
                epochs += 1
                return "e\(epochs)"
            })
        h.transport.delegate = h.hub
        h.join(1, session: "x")
        h.join(2, session: "x")
        h.say(1, #"{"type":"addSection","title":"A"}"#)
        h.say(2, #"{"type":"deleteSession"}"#)
        #expect(h.transport.closed[1]?.code == CloseCode.sessionDeleted)
        #expect(h.transport.closed[2]?.code == CloseCode.sessionDeleted)
        h.close(1)
        h.close(2)
        h.join(3, session: "x")
        let welcome = h.transport.messages(3, type: "welcome").first
        #expect(welcome?["seq"] == .integer(0))
        #expect(welcome?["epoch"] == .string("e2"))
    }

    @Test func aLoggedEventKnowsWhetherItsEntryIsItsBytesAloneAndKeepsKnowingAfterChanges() throws {
        var table = Table()
        let author = Author(client: "c1", name: "ana")
        _ = try table.apply(.addSection(NewSection(key: "a", title: "A")), by: author)
        let request = Change.toggle(section: .title("A"))
        let event = try #require(try table.apply(request, by: author, changeId: "t1").appliedEvent)
        var logged = LoggedEvent(event: event, encoded: ServerMessage.event(event))
        #expect(logged.entryIsEncoded)
        // The request named the section by title: the entry keeps it.
        logged.request = request
        #expect(!logged.entryIsEncoded)
        logged.request = .toggle(section: .key("a"))
        #expect(logged.entryIsEncoded)
        // Without the bytes (the memory store drops them) there is nothing to write alone.
        logged.encoded = nil
        #expect(!logged.entryIsEncoded)
        #expect(!LoggedEvent(event: event).entryIsEncoded)
    }

    @Test func aClientsChangesFromOneTurnShareOneAppendAndAreAcknowledgedAfterItsCommit() {
        let h = Harness()
        h.transport.endsTurns = true
        h.join(1, session: "x")
        h.join(2, session: "x")
        h.transport.clear()
        let appendsBefore = h.hub.metrics.commitLatency.count
        // One read's messages: delivered one by one, then the turn ends.
        for (index, title) in ["A", "B", "C"].enumerated() {
            let bytes = Array(#"{"type":"addSection","title":"\#(title)","id":"a\#(index)"}"#.utf8)
            bytes.withUnsafeBytes { h.hub.connectionReceived(Connection(id: 1), message: $0) }
        }
        h.transport.settle()
        #expect(h.transport.messages(1, type: "ack").isEmpty)
        #expect(h.transport.messages(2, type: "event").isEmpty)
        h.transport.endTurn()
        #expect(h.hub.metrics.commitLatency.count == appendsBefore + 1)
        #expect(h.transport.messages(1, type: "ack").map { $0["seq"] } == [.integer(1), .integer(2), .integer(3)])
        #expect(h.transport.messages(2, type: "event").map { $0["seq"] } == [.integer(1), .integer(2), .integer(3)])
        // Nothing waits: the next turn's change goes in an append of its own.
        h.transport.endTurn()
        #expect(h.hub.metrics.commitLatency.count == appendsBefore + 1)
        h.say(2, #"{"type":"addSection","title":"D","id":"b"}"#)
        h.transport.endTurn()
        #expect(h.hub.metrics.commitLatency.count == appendsBefore + 2)
        #expect(h.transport.messages(2, type: "ack").map { $0["seq"] } == [.integer(4)])
    }

    @Test func aChangeInTheSameTurnAsADeleteIsCommittedBeforeTheSessionIsDeleted() {
        let h = Harness()
        h.transport.endsTurns = true
        h.join(1, session: "x")
        h.transport.clear()
        for text in [#"{"type":"addSection","title":"A","id":"a"}"#, #"{"type":"deleteSession","id":"d"}"#] {
            let bytes = Array(text.utf8)
            bytes.withUnsafeBytes { h.hub.connectionReceived(Connection(id: 1), message: $0) }
        }
        h.transport.settle()
        h.transport.endTurn()
        #expect(h.transport.messages(1, type: "error").isEmpty)
        #expect(h.transport.messages(1, type: "ack").map { $0["id"] } == [.string("a")])
        #expect(h.transport.closed[1]?.code == CloseCode.sessionDeleted)
    }

    @Test func anEntryForTheLogStaysSmallEnoughThatAnAppendOfFourTakesLessThanAKibibyte() {
        // glibc serves a kibibyte or more from its slow path, which first consolidates every
        // small free chunk; a busy event loop frees tens of thousands between two such requests.
        #expect(MemoryLayout<Change>.stride <= 32)
        #expect(MemoryLayout<TableEvent>.stride <= 128)
        #expect(4 * MemoryLayout<LoggedEvent>.stride + 32 < 1_024)
    }

    @Test func theMemoryLogTellsAnAppenderAfterTheCallInOrderAndItsObserverFirst() throws {
        let queue = ServiceQueue(wake: {})
        let store = MemoryStore(keepEvents: 10, queue: queue)
        var table = Table()
        var events: [LoggedEvent] = []
        for title in ["A", "B", "C"] {
            let outcome = try table.apply(.addSection(NewSection(title: title)), by: Author(client: "c1", name: "ana"), changeId: nil)
            events.append(LoggedEvent(event: try #require(outcome.appliedEvent)))
        }
        store.create(StoredSession(name: "s", epoch: "e", checkpoint: Table())) { _ in }
        var heard: [String] = []
        let observer = Heard("observer") { heard.append($0) }
        let session = Heard("session") { heard.append($0) }
        store.appendObserver = observer
        store.append(session: "s", events: [events[0]], appender: session)
        store.append(session: "s", events: [events[2]], appender: session)
        store.append(session: "s", events: [events[1], events[2]], appender: session)
        #expect(heard.isEmpty)
        while !queue.isEmpty { queue.drain() }
        #expect(heard == ["observer 1", "session 1", "observer conflict", "session conflict", "observer 3", "session 3"])
    }
}

/// A ``LogAppender`` that reports what it hears, as "name seq" or "name conflict".
private final class Heard: LogAppender {
    private let name: String
    private let report: (String) -> Void

    init(_ name: String, report: @escaping (String) -> Void) {
        self.name = name
        self.report = report
    }

    func appendFinished(_ result: Result<UInt64, StoreError>) {
        switch result {
        case .success(let seq): report("\(name) \(seq)")
        case .failure(.conflict): report("\(name) conflict")
        case .failure(let error): report("\(name) \(error)")
        }
    }
}
