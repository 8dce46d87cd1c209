import FoldtableCore
import Testing

@testable import FoldtableServer

@Suite struct Joining {
    @Test func joinSendsAWelcomeWithTheDemoTableAndPresence() throws {
        let h = Harness()
        h.join(1, name: "ana")
        let welcome = try #require(h.transport.messages(1, type: "welcome").first)
        #expect(welcome["session"] == .string("demo"))
        #expect(welcome["client"] == .string("c1"))
        #expect(welcome["epoch"] == .string("e1"))
        #expect(welcome["seq"] == .integer(0))
        guard case .array(let sections)? = welcome["table"]?["sections"] else {
            Issue.record("no sections")
            return
        }
        let keys = sections.compactMap { section -> String? in if case .string(let key)? = section["key"] { return key } else { return nil } }
        #expect(keys.contains("mac") && keys.contains("big") && keys.contains("empty"))
        let mac = try #require(sections.first { $0["key"] == .string("mac") })
        #expect(mac["rows"] != nil)
        let big = try #require(sections.first { $0["key"] == .string("big") })
        #expect(big["rows"] == nil)
        #expect(big["rowCount"] == .integer(5_000))
        #expect(welcome["presence"] == .array([.object([("client", .string("c1")), ("name", .string("ana"))])]))
    }

    @Test func othersAreToldWhoJoinedAndLeft() {
        let h = Harness()
        h.join(1)
        h.join(2, name: "bo")
        let joined = h.transport.messages(1, type: "presence").last
        #expect(joined?["joined"] == .array([.object([("client", .string("c2")), ("name", .string("bo"))])]))
        #expect(joined?["count"] == .integer(2))
        #expect(joined?["complete"] == .bool(true))
        h.close(2)
        let left = h.transport.messages(1, type: "presence").last
        #expect(left?["left"] == .array([.string("c2")]))
        #expect(left?["count"] == .integer(1))
    }

    @Test func joinsWithinThePresenceIntervalReachEachMemberAsOneDiff() {
        let h = Harness { $0.presenceIntervalMs = 100 }
        h.join(1)
        h.transport.fireTimers(upTo: 100)
        h.transport.clear()
        for id in UInt64(2)...6 { h.join(id, name: "n\(id)") }
        #expect(h.transport.messages(1, type: "presence").isEmpty)
        h.transport.fireTimers(upTo: 100)
        for id in UInt64(1)...6 {
            let diffs = h.transport.messages(id, type: "presence")
            #expect(diffs.count == 1)
            #expect(diffs.first?["count"] == .integer(6))
        }
        guard case .array(let joined)? = h.transport.messages(1, type: "presence").first?["joined"] else {
            Issue.record("no joined list")
            return
        }
        #expect(joined.count == 5)
    }

    @Test func anAPIChangeReachesMembersAndIsAnsweredWithItsSeqAndAnUnknownSessionIsNotFound() throws {
        let h = Harness()
        h.join(1)
        var answered: [Result<UInt64, ProtocolError>] = []
        h.hub.submitAPIChange(
            .setCollapsed(section: .key("mac"), collapsed: true), id: "k", author: Author(client: "api", name: "cron"), session: "demo"
        ) { answered.append($0) }
        h.transport.settle()
        let seq = try #require(try answered.first?.get())
        #expect(h.transport.messages(1, type: "event").last?["seq"] == .integer(Int64(seq)))
        h.hub.submitAPIChange(.setAll(collapsed: true), id: nil, author: Author(client: "api", name: "cron"), session: "nope") {
            answered.append($0)
        }
        h.transport.settle()
        guard case .failure(let error)? = answered.last else {
            Issue.record("an unknown session was not refused")
            return
        }
        #expect(error.code == .sessionNotFound)
    }

    @Test func anAPIChangeThatAddsARowOrSectionIsAnsweredWithTheKeyItsEventCarries() throws {
        let h = Harness()
        h.join(1)
        var answers: [(Result<UInt64, ProtocolError>, String?)] = []
        let api = Author(client: "api", name: "cron")
        h.hub.submitAPIChange(.addRow(section: .key("mac"), row: NewRow(label: "Mac Pro")), id: nil, author: api, session: "demo") {
            answers.append(($0, $1))
        }
        h.transport.settle()
        let event = try #require(h.transport.messages(1, type: "event").last)
        guard case .string(let chosen)? = event["change"]?["row"]?["key"] else {
            Issue.record("the event names no key")
            return
        }
        #expect(try answers.first?.0.get() != nil)
        #expect(answers.first?.1 == chosen)
        h.hub.submitAPIChange(.addSection(NewSection(key: "watch", title: "Watch")), id: nil, author: api, session: "demo") {
            answers.append(($0, $1))
        }
        h.hub.submitAPIChange(.setAll(collapsed: true), id: nil, author: api, session: "demo") { answers.append(($0, $1)) }
        h.transport.settle()
        #expect(answers.count == 3)
        #expect(answers.dropFirst().map { $0.1 } == ["watch", nil])
    }

    @Test func creatingASessionIfAbsentSaysWhetherItMadeOne() {
        let h = Harness()
        var made: [Bool] = []
        h.hub.createSessionIfAbsent("fresh", table: Table()) { made.append((try? $0.get()) ?? false) }
        h.hub.createSessionIfAbsent("fresh", table: Table()) { made.append((try? $0.get()) ?? true) }
        h.hub.createSessionIfAbsent("demo", table: Table()) { made.append((try? $0.get()) ?? true) }
        h.transport.settle()
        #expect(made == [true, false, false])
    }

    @Test func aRenameIsShownToEveryMember() {
        let h = Harness()
        h.join(1, name: "ana")
        h.join(2, name: "bo")
        h.say(2, #"{"type":"rename","name":"bob"}"#)
        for id in UInt64(1)...2 {
            #expect(h.transport.sent[id]?.last == #"{"type":"presence","count":2,"complete":true,"renamed":[{"client":"c2","name":"bob"}]}"#)
        }
        h.open(3)
        h.say(3, #"{"type":"rename","name":"x"}"#)
        #expect(h.transport.messages(3).last?["code"] == .string("not_joined"))
    }

    @Test func aNewSessionIsCreatedEmptyOnFirstJoin() throws {
        let h = Harness()
        h.join(1, session: "team-7")
        let welcome = try #require(h.transport.messages(1, type: "welcome").first)
        #expect(welcome["table"]?["sections"] == .array([]))
        #expect(h.hub.sessionMembers["team-7"] == 1)
    }

    @Test func listShowsSessionsWithMemberCountsBeforeJoining() {
        let h = Harness()
        h.join(1)
        h.open(2)
        h.say(2, #"{"type":"list"}"#)
        #expect(h.transport.sent[2]?.last == #"{"type":"sessions","sessions":[{"name":"demo","members":1}]}"#)
    }

    @Test func changesBeforeJoinAreRefusedAsNotJoined() {
        let h = Harness()
        h.open(1)
        h.say(1, #"{"type":"toggle","section":"mac","id":"x"}"#)
        #expect(h.transport.messages(1).last?["code"] == .string("not_joined"))
        #expect(h.transport.messages(1).last?["id"] == .string("x"))
    }

    @Test func aSecondJoinIsRefused() {
        let h = Harness()
        h.join(1)
        h.say(1, #"{"type":"join","session":"other","name":"x"}"#)
        #expect(h.transport.messages(1).last?["code"] == .string("already_joined"))
    }

    @Test func noJoinWithinTheDeadlineClosesWith4001() {
        let h = Harness { $0.joinTimeoutMs = 1_000 }
        h.open(1)
        h.say(1, #"{"type":"list"}"#)
        h.transport.fireTimers()
        #expect(h.transport.closed[1]?.code == CloseCode.joinTimeout)
    }

    @Test func joiningCancelsTheDeadline() {
        let h = Harness()
        h.join(1)
        h.transport.fireTimers()
        #expect(h.transport.closed[1] == nil)
    }

    @Test func tooManyRefusedMessagesInARowClose4500() {
        let h = Harness { $0.maxConsecutiveErrors = 3 }
        h.join(1)
        for _ in 0..<2 { h.say(1, "nonsense") }
        #expect(h.transport.closed[1] == nil)
        h.say(1, "nonsense")
        #expect(h.transport.closed[1]?.code == CloseCode.tooManyErrors)
    }
}

@Suite struct Changes {
    @Test func everyMemberGetsTheSameEventOnceEncodedAndTheAuthorAnAck() {
        let h = Harness()
        for id in UInt64(1)...3 { h.join(id) }
        h.transport.clear()
        h.transport.broadcastObjects = []
        h.say(2, #"{"type":"toggle","section":"mac","id":"k-1"}"#)
        let events = (UInt64(1)...3).map { h.transport.sent[$0]?.first }
        #expect(Set(events).count == 1)
        // The event carries its commit time, a Unix time in milliseconds read from the hub's clock.
        let time = events[0].flatMap { try? JSONParser.parse(Array($0.utf8)) }?["time"]
        guard case .integer(let milliseconds)? = time else {
            Issue.record("the event has no time: \(events[0] ?? "none")")
            return
        }
        #expect(
            events[0]
                == #"{"type":"event","seq":1,"time":"# + String(milliseconds)
                + #","by":{"client":"c2","name":"n2"},"id":"k-1","change":{"type":"toggle","section":"mac"},"collapsed":{"mac":true}}"#
        )
        #expect(h.transport.broadcastObjects.count == 1)
        #expect(h.transport.sent[2]?.last == #"{"type":"ack","id":"k-1","seq":1}"#)
        #expect(h.transport.messages(1, type: "ack").isEmpty)
    }

    @Test func aRetriedChangeIdIsAcknowledgedAgainAndAppliedOnce() {
        let h = Harness()
        h.join(1)
        h.join(2)
        h.say(1, #"{"type":"toggle","section":"mac","id":"k-1"}"#)
        h.transport.clear()
        h.say(1, #"{"type":"toggle","section":"mac","id":"k-1"}"#)
        #expect(h.transport.sent[1] == [#"{"type":"ack","id":"k-1","seq":1}"#])
        #expect(h.transport.sent[2] == nil)
    }

    @Test func errorsAreRepliesAndTheConnectionStaysUsable() {
        let h = Harness()
        h.join(1)
        h.say(1, #"{"type":"toggle","title":"Nope","id":"k-1"}"#)
        let error = h.transport.messages(1, type: "error").last
        #expect(error?["code"] == .string("unknown_section"))
        #expect(error?["field"] == .string("title"))
        #expect(error?["id"] == .string("k-1"))
        h.say(1, #"{"type":"toggle","title":"Mac","id":"k-2"}"#)
        #expect(h.transport.messages(1, type: "ack").last?["seq"] == .integer(1))
        #expect(h.transport.closed.isEmpty)
    }

    @Test func expandingASectionStreamsItsRowsToEveryMember() throws {
        let h = Harness()
        h.join(1)
        h.join(2)
        h.say(1, #"{"type":"toggle","section":"iphone"}"#)
        for id in UInt64(1)...2 {
            let rows = h.transport.messages(id, type: "rows")
            #expect(rows.count == 1)
            #expect(rows.first?["section"] == .string("iphone"))
            #expect(rows.first?["seq"] == .integer(1))
            #expect(rows.first?["final"] == .bool(true))
        }
    }
}

/// The keys of every row in `rows` messages, in order.
func rowKeys(_ rows: [JSONValue]) -> [String] {
    rows.flatMap { message -> [String] in
        guard case .array(let list)? = message["rows"] else { return [] }
        return list.compactMap { if case .string(let key)? = $0["key"] { return key } else { return nil } }
    }
}

@Suite struct BusySections {
    /// Expands the demo's large section while member 2 reads nothing.
    func expandWithSlowReader(threshold: Int) -> Harness {
        let h = Harness {
            $0.busyThresholdMs = threshold
            $0.rowChunkRows = 100
            $0.maxQueueBytes = 16_384
        }
        h.transport.holdsQueues = true
        h.join(1)
        h.join(2)
        h.transport.flush(1)
        h.transport.flush(2)
        h.transport.clear()
        h.say(1, #"{"type":"toggle","section":"big","id":"x"}"#)
        return h
    }

    /// Lets every member read until the stream is done.
    func drainAll(_ h: Harness, ids: [UInt64]) {
        for _ in 0..<1_000 {
            if ids.allSatisfy({ h.transport.drainRequests[$0] == nil }) { return }
            for id in ids { h.transport.flush(id) }
        }
    }

    @Test func aStreamOutlastingTheThresholdShowsTheSectionBusyThenNotBusy() {
        let h = expandWithSlowReader(threshold: 500)
        #expect(h.transport.messages(1, type: "busy").isEmpty)
        #expect(h.transport.timers.values.contains(500))
        h.transport.fireTimers(upTo: 500)
        #expect(h.transport.messages(2, type: "busy").map { $0["busy"] } == [.bool(true)])
        drainAll(h, ids: [1, 2])
        #expect(h.transport.messages(2, type: "busy").map { $0["busy"] } == [.bool(true), .bool(false)])
        let rows = h.transport.messages(2, type: "rows")
        #expect(rowKeys(rows) == (0..<5_000).map { "big-\($0)" })
        #expect(rows.last?["final"] == .bool(true))
        #expect(rows.allSatisfy { $0["seq"] == .integer(1) })
    }

    @Test func aSlowMemberHearsBusyBeforeTheFirstRowsOfAStreamExpectedToOutlastTheThresholdAndNotBusyAfterTheLast() throws {
        // 10,000 rows (about 680 KB): more than the default pace (1 MiB a second) covers in 500 ms.
        let h = Harness {
            $0.busyThresholdMs = 500
            $0.rowChunkRows = 100
            $0.maxQueueBytes = 16_384
            $0.demoLargeRows = 10_000
        }
        h.transport.holdsQueues = true
        h.join(1)
        h.join(2)
        h.transport.flush(1)
        h.transport.flush(2)
        h.transport.clear()
        h.say(1, #"{"type":"toggle","section":"big","id":"x"}"#)
        // Before any timer: busy is already queued, ahead of the rows, to both members.
        #expect(h.transport.timers.values.allSatisfy { $0 != 500 })
        drainAll(h, ids: [1, 2])
        for id: UInt64 in [1, 2] {
            let all = h.transport.messages(id)
            let type = { (index: Int) in all[index]["type"] }
            let event = try #require(all.firstIndex { $0["type"] == .string("event") })
            let busy = all.indices.filter { type($0) == .string("busy") }
            let rows = all.indices.filter { type($0) == .string("rows") }
            #expect(busy.map { all[$0]["busy"] } == [.bool(true), .bool(false)])
            #expect(rowKeys(rows.map { all[$0] }) == (0..<10_000).map { "big-\($0)" })
            try #require(busy.count == 2 && rows.count > 1)
            #expect(event < busy[0] && busy[0] < rows[0], "member \(id) heard busy after its first rows")
            #expect(rows[rows.count - 1] < busy[busy.count - 1], "member \(id) heard busy end before its last rows")
        }
    }

    @Test func busyEndsForEveryoneOnlyOnceTheSlowestMembersSocketTookItsRows() {
        let h = Harness {
            $0.busyThresholdMs = 500
            $0.rowChunkRows = 100
            $0.maxQueueBytes = 16_384
            $0.demoLargeRows = 10_000
        }
        h.transport.holdsQueues = true
        h.join(1)
        h.join(2)
        h.transport.flush(1)
        h.transport.flush(2)
        h.transport.clear()
        // Both members' kernels still hold rows when their last chunks are queued.
        h.transport.inSocket[1] = 200_000
        h.transport.inSocket[2] = 1_048_576
        h.say(1, #"{"type":"toggle","section":"big","id":"x"}"#)
        drainAll(h, ids: [1, 2])
        #expect(h.transport.messages(2, type: "rows").last?["final"] == .bool(true))
        #expect(h.transport.messages(1, type: "busy").map { $0["busy"] } == [.bool(true)])
        // A change to the section goes on meanwhile: it waits for the rows' order, not the socket.
        h.say(1, #"{"type":"toggle","section":"big","id":"y"}"#)
        #expect(h.transport.messages(1, type: "ack").last?["id"] == .string("y"))
        h.transport.fireTimers(upTo: 25)
        #expect(h.transport.messages(1, type: "busy").map { $0["busy"] } == [.bool(true)])
        // Within one chunk (64 KiB) of done is done; the other member is still waited for.
        h.transport.inSocket[1] = 1_000
        h.transport.fireTimers(upTo: 25)
        #expect(h.transport.messages(1, type: "busy").map { $0["busy"] } == [.bool(true)])
        h.transport.inSocket[2] = 0
        h.transport.fireTimers(upTo: 25)
        for id: UInt64 in [1, 2] {
            #expect(h.transport.messages(id, type: "busy").map { $0["busy"] } == [.bool(true), .bool(false)])
        }
    }

    @Test func aStreamFinishingWithinTheThresholdNeverShowsBusy() {
        let h = Harness { $0.busyThresholdMs = 500 }
        h.join(1)
        h.say(1, #"{"type":"toggle","section":"big"}"#)
        #expect(rowKeys(h.transport.messages(1, type: "rows")).count == 5_000)
        #expect(h.transport.messages(1, type: "busy").isEmpty)
        #expect(h.transport.timers.isEmpty)
    }

    @Test func thresholdZeroShowsBusyAtOnce() {
        let h = expandWithSlowReader(threshold: 0)
        #expect(h.transport.messages(1, type: "busy").first?["busy"] == .bool(true))
        drainAll(h, ids: [1, 2])
        #expect(h.transport.messages(1, type: "busy").last?["busy"] == .bool(false))
    }

    @Test func aSecondToggleOfABusySectionIsAppliedAfterTheFirstCompletes() {
        let h = expandWithSlowReader(threshold: 500)
        h.say(2, #"{"type":"toggle","section":"big","id":"y"}"#)
        h.say(2, #"{"type":"toggle","section":"mac","id":"z"}"#)
        // Both wait: the first touches the busy section, the second is behind it.
        #expect(h.transport.messages(2, type: "event").count == 1)
        drainAll(h, ids: [1, 2])
        let events = h.transport.messages(2, type: "event")
        #expect(events.map { $0["seq"] } == [.integer(1), .integer(2), .integer(3)])
        #expect(events[1]["collapsed"] == .object([("big", .bool(true))]))
        // No rows arrive after the collapse: every row message precedes event 2.
        let all = h.transport.messages(2)
        let collapseIndex = all.firstIndex { $0["seq"] == .integer(2) && $0["type"] == .string("event") }!
        #expect(all[collapseIndex...].allSatisfy { $0["type"] != .string("rows") })
    }

    @Test func aMemberJoiningMidStreamSeesTheSectionBusyAndGetsItsRows() throws {
        let h = expandWithSlowReader(threshold: 500)
        h.transport.fireTimers(upTo: 500)
        h.join(3)
        let welcome = try #require(h.transport.messages(3, type: "welcome").first)
        guard case .array(let sections)? = welcome["table"]?["sections"] else {
            Issue.record("no sections")
            return
        }
        let big = try #require(sections.first { $0["key"] == .string("big") })
        #expect(big["busy"] == .bool(true))
        #expect(big["collapsed"] == .bool(false))
        #expect(big["rows"] == nil)
        drainAll(h, ids: [1, 2, 3])
        let rows = h.transport.messages(3, type: "rows")
        #expect(rows.last?["final"] == .bool(true))
        #expect(rowKeys(rows).count == 5_000)
    }

    @Test func aChangeLeftWaitingByAClientThatClosedIsAppliedWithoutRepliesToIt() {
        let h = expandWithSlowReader(threshold: 500)
        h.say(2, #"{"type":"toggle","section":"big","id":"late"}"#)
        h.say(2, #"{"type":"toggle","section":"nope","id":"bad"}"#)
        h.close(2)
        drainAll(h, ids: [1])
        #expect(h.transport.messages(1, type: "event").last?["id"] == .string("late"))
        #expect(h.transport.sendsToClosedConnections == 0)
    }

    @Test func aMemberLeavingMidStreamDoesNotBlockTheSession() {
        let h = expandWithSlowReader(threshold: 500)
        h.say(1, #"{"type":"toggle","section":"big","id":"y"}"#)
        drainAll(h, ids: [1])
        #expect(h.transport.messages(1, type: "event").count == 1)
        h.close(2)
        #expect(h.transport.messages(1, type: "event").count == 2)
    }
}

@Suite struct HostileOrdering {
    /// Member 2 reads nothing; member 1 expands the large section, so its stream waits on 2.
    func stalledStream(_ configure: @escaping (inout ServerConfig) -> Void = { _ in }) -> Harness {
        let h = Harness {
            $0.demoLargeRows = 20_000  // about 1 MB of rows: more than one refill of a queue
            configure(&$0)
        }
        h.join(1)
        h.join(2)
        h.transport.held = [2]
        h.say(1, #"{"type":"toggle","section":"big"}"#)
        return h
    }

    @Test func thousandsOfWaitingExpansionsDrainWithoutDeepRecursion() {
        let h = stalledStream()
        h.say(1, #"{"type":"toggle","section":"big"}"#)
        for _ in 0..<9_990 { h.say(1, #"{"type":"toggle","section":"empty"}"#) }
        #expect(h.transport.messages(1, type: "event").count == 1)
        h.close(2)  // the stream finishes; every waiting change applies, in order, on a flat stack
        let events = h.transport.messages(1, type: "event")
        #expect(events.count == 9_992)
        #expect(events.last?["seq"] == .integer(9_992))
        #expect(h.transport.sendsToClosedConnections == 0)
    }

    @Test func aMemberThatNeverTakesItsRowsIsClosedAtTheStreamDeadline() {
        let h = stalledStream { $0.streamTimeoutSecs = 15 }
        h.say(1, #"{"type":"toggle","section":"big","id":"later"}"#)
        #expect(h.transport.messages(1, type: "ack").isEmpty)
        h.transport.clock = 15_000
        h.transport.fireTimers()
        #expect(h.transport.closed[2]?.code == CloseCode.slowConsumer)
        #expect(h.transport.messages(1, type: "ack").last?["id"] == .string("later"))
    }

    @Test func refusedChangesCountTowardTheErrorLimit() {
        let h = Harness { $0.maxConsecutiveErrors = 3 }
        h.join(1)
        for _ in 0..<3 { h.say(1, #"{"type":"toggle","section":"nope"}"#) }
        #expect(h.transport.closed[1]?.code == CloseCode.tooManyErrors)
    }

    @Test func anAppliedChangeResetsTheErrorCount() {
        let h = Harness { $0.maxConsecutiveErrors = 3 }
        h.join(1)
        for _ in 0..<2 { h.say(1, #"{"type":"toggle","section":"nope"}"#) }
        h.say(1, #"{"type":"toggle","section":"mac"}"#)
        for _ in 0..<2 { h.say(1, #"{"type":"toggle","section":"nope"}"#) }
        #expect(h.transport.closed[1] == nil)
    }

    @Test func rowsWithLongTextStreamInChunksUnderTheQueueCap() throws {
        let h = Harness()
        h.join(1)
        let long = String(repeating: "x", count: 1_000)
        h.say(1, #"{"type":"addSection","key":"fat","title":"Fat","collapsed":true}"#)
        for index in 0..<400 {
            h.say(1, #"{"type":"addRow","section":"fat","label":"\#(long)","value":"\#(long)","detail":"\#(long)","key":"f\#(index)"}"#)
        }
        // Client 1 saw every row added; client 2 joins with the section collapsed, so only it
        // lacks the rows and only it gets the stream.
        h.join(2)
        h.transport.clear()
        h.say(1, #"{"type":"toggle","section":"fat"}"#)
        let chunks = (h.transport.sent[2] ?? []).filter { $0.hasPrefix(#"{"type":"rows""#) }
        #expect(chunks.count > 10)
        #expect(chunks.allSatisfy { $0.utf8.count < 80_000 })
        #expect(rowKeys(h.transport.messages(2, type: "rows")).count == 400)
        #expect(h.transport.messages(1, type: "rows").isEmpty)
    }

    @Test func aResumingClientLearnsWhichSectionsAreBusy() {
        let h = stalledStream()
        h.transport.fireTimers(upTo: 500)
        h.open(3)
        h.say(3, #"{"type":"join","session":"demo","name":"c","since":1,"epoch":"e1"}"#)
        let messages = h.transport.messages(3)
        #expect(messages.first?["type"] == .string("resume"))
        #expect(messages.contains { $0["type"] == .string("busy") && $0["section"] == .string("big") && $0["busy"] == .bool(true) })
    }
}

@Suite struct Resume {
    @Test func aClientResumesWithTheEventsItMissed() throws {
        let h = Harness()
        h.join(1)
        h.say(1, #"{"type":"toggle","section":"mac"}"#)
        h.close(1)
        h.join(2)
        h.say(2, #"{"type":"toggle","section":"iphone"}"#)
        h.say(2, #"{"type":"toggle","section":"ipad"}"#)
        h.open(3)
        h.say(3, #"{"type":"join","session":"demo","name":"ana","since":1,"epoch":"e1"}"#)
        let messages = h.transport.messages(3)
        #expect(messages.first?["type"] == .string("resume"))
        #expect(messages.first?["seq"] == .integer(3))
        #expect(h.transport.messages(3, type: "event").map { $0["seq"] } == [.integer(2), .integer(3)])
        #expect(h.transport.messages(3, type: "rows").first?["section"] == .string("iphone"))
    }

    @Test func anUnknownEpochOrTooOldSinceGetsAFreshWelcome() {
        let h = Harness { $0.historyEvents = 1 }
        h.join(1)
        h.say(1, #"{"type":"toggle","section":"mac"}"#)
        h.say(1, #"{"type":"toggle","section":"mac"}"#)
        h.open(2)
        h.say(2, #"{"type":"join","session":"demo","name":"a","since":0,"epoch":"e1"}"#)
        #expect(h.transport.messages(2).first?["type"] == .string("welcome"))
        #expect(h.transport.messages(2).first?["recovered"] == .bool(false))
        h.open(3)
        h.say(3, #"{"type":"join","session":"demo","name":"a","since":2,"epoch":"other"}"#)
        #expect(h.transport.messages(3).first?["recovered"] == .bool(false))
        h.open(4)
        h.say(4, #"{"type":"join","session":"demo","name":"a","since":1,"epoch":"e1"}"#)
        #expect(h.transport.messages(4).first?["type"] == .string("resume"))
    }
}

@Suite struct Configuration {
    @Test func flagsAndEnvironmentFillTheConfig() throws {
        let parsed = try ServerConfig.parse(arguments: ["--port", "0", "--busy-threshold-ms=0"], environment: ["FOLDTABLE_HOST": "::1"])
        guard case .run(let config) = parsed else {
            Issue.record("not run")
            return
        }
        #expect(config.port == 0)
        #expect(config.busyThresholdMs == 0)
        #expect(config.host == "::1")
    }

    @Test func badSettingsFailWithOneClearLine() {
        let cases: [[String]] = [
            ["--port", "70000"], ["--port"], ["--nope", "1"], ["--tls-cert", "a.pem"], ["--ping-interval-secs", "40", "--hangup-secs", "30"],
            ["--log-level", "loud"], ["stray"],
        ]
        for arguments in cases {
            #expect(throws: ServerConfig.Invalid.self, "\(arguments)") { try ServerConfig.parse(arguments: arguments) }
        }
        do {
            _ = try ServerConfig.parse(arguments: ["--port", "x"])
        } catch {
            #expect(error.description == "--port must be a whole number from 0 to 65535, not \"x\"")
        }
    }

    @Test func unknownEnvironmentVariablesAreIgnoredButBadValuesAreNot() throws {
        #expect(throws: Never.self) { try ServerConfig.parse(arguments: [], environment: ["FOLDTABLE_BIN": "x", "FOLDTABLE_SCREENSHOT_OUT": "y"]) }
        #expect(throws: ServerConfig.Invalid.self) { try ServerConfig.parse(arguments: [], environment: ["FOLDTABLE_PORT": "high"]) }
        guard case .run(let config) = try ServerConfig.parse(arguments: ["--port", "1"], environment: ["FOLDTABLE_PORT": "2"]) else { return }
        #expect(config.port == 1)
    }

    @Test func helpIsRecognised() throws {
        #expect(try ServerConfig.parse(arguments: ["--help"]) == .help)
    }
}
