import FoldtableCore
import Testing

@testable import FoldtableServer

/// Stream-ordered sessions (``SessionCore/Sequencing/stream(node:)``): two cores standing for
/// two nodes, fed the same requests in the same stream order.
@Suite struct SequencedCore {
    let ana = Connection(id: 1)
    let bo = Connection(id: 1)

    func core(node: String, member: Connection, name: String) throws -> SessionCore {
        let sections = [
            Section(key: "s", title: "S", collapsed: true, rows: (0..<3).map { Row(key: "r\($0)", label: "row \($0)", value: "") }),
            Section(key: "t", title: "T", collapsed: true),
        ]
        var settings = SessionCore.Settings()
        settings.presenceIntervalMs = 0
        var core = SessionCore(
            name: "x", epoch: "e1", table: try Table(options: TableOptions(), sections: sections, seq: 0), settings: settings,
            order: StreamOrder(node: node))
        _ = core.handle(.join(member, JoinRequest(session: "x", name: name), role: nil), now: 0)
        return core
    }

    func appended(_ effects: [SessionEffect]) -> [SequencedRequest] {
        effects.compactMap { if case .append(let request) = $0 { return request } else { return nil } }
    }

    /// The event messages broadcast, as bytes.
    func events(_ effects: [SessionEffect]) -> [[UInt8]] {
        effects.compactMap { effect -> [UInt8]? in
            guard case .broadcast(let message, _) = effect, let value = try? JSONParser.parse(message.bytes),
                case .string("event")? = value["type"]
            else { return nil }
            return message.bytes
        }
    }

    func seqs(_ effects: [SessionEffect]) -> [UInt64] {
        events(effects).compactMap { bytes in
            guard let value = try? JSONParser.parse(bytes), case .integer(let seq)? = value["seq"] else { return nil }
            return UInt64(seq)
        }
    }

    func acks(_ effects: [SessionEffect]) -> [(UInt64, String, UInt64)] {
        effects.compactMap { if case .ack(let c, let id, let seq) = $0 { return (c.id, id, seq) } else { return nil } }
    }

    func refusals(_ effects: [SessionEffect]) -> [(ProtocolError.Code, String?)] {
        effects.compactMap { if case .refuse(_, let error, let id) = $0 { return (error.code, id) } else { return nil } }
    }

    /// Gives each request its stream position, as a broker does when it reads them back.
    func positioned(_ requests: [SequencedRequest], from start: Int = 1) -> [SequencedRequest] {
        requests.enumerated().map { index, request in
            var entry = request
            entry.position = "\(start + index)-0"
            return entry
        }
    }

    @Test func aChangeIsAppendedAsARequestAndNeitherAppliedNorAcknowledgedBeforeItIsRead() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        let effects = a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)
        let request = try #require(appended(effects).first)
        #expect(request.change == .toggle(section: .key("t")))
        #expect(request.id == "a1")
        #expect(request.origin == RequestOrigin(node: "a", number: 1))
        #expect(acks(effects).isEmpty)
        #expect(events(effects).isEmpty)
        #expect(a.committed.seq == 0)
        #expect(!a.isQuiet)
    }

    @Test func authorsAreNodeQualified() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        var b = try core(node: "b", member: bo, name: "bo")
        // Both members are connection 1 on their own node; the stream must tell them apart.
        let fromA = appended(a.handle(.change(.toggle(section: .key("t")), id: nil, from: ana), now: 0))
        let fromB = appended(b.handle(.change(.toggle(section: .key("t")), id: nil, from: bo), now: 0))
        #expect(fromA.first?.author.client == "a.c1")
        #expect(fromB.first?.author.client == "b.c1")
        let stream = positioned(fromA + fromB)
        _ = b.handle(.sequenced(stream), now: 0)
        let applied = a.handle(.sequenced(stream), now: 0)
        let authors = events(applied).compactMap { bytes -> String? in
            guard let value = try? JSONParser.parse(bytes), case .object(let author)? = value["by"],
                case .string(let client)? = author.first(where: { $0.0 == "client" })?.1
            else { return nil }
            return client
        }
        #expect(authors == ["a.c1", "b.c1"])
    }

    @Test func twoNodesFedTheSameStreamProduceTheSameEventsSeqsAndRefusals() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        var b = try core(node: "b", member: bo, name: "bo")
        var stream: [SequencedRequest] = []
        // Interleaved authors; a section removed on one node while the other still edits it.
        stream += appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0))
        stream += appended(b.handle(.change(.removeSection(section: .key("t")), id: "b1", from: bo), now: 0))
        stream += appended(a.handle(.change(.toggle(section: .key("t")), id: "a2", from: ana), now: 0))
        stream += appended(b.handle(.change(.addSection(NewSection(title: "New")), id: "b2", from: bo), now: 0))
        stream += appended(a.handle(.change(.toggle(section: .key("s")), id: "a3", from: ana), now: 0))
        stream = positioned(stream)

        // Node a reads in two batches, node b in one: batching must not matter.
        var onA = a.handle(.sequenced(Array(stream[..<2])), now: 0)
        onA += a.handle(.sequenced(Array(stream[2...])), now: 0)
        let onB = b.handle(.sequenced(stream), now: 0)

        #expect(events(onA) == events(onB))
        #expect(seqs(onA) == [1, 2, 3, 4])
        #expect(a.committed.seq == 4 && b.committed.seq == 4)
        #expect(a.committed.sections.map(\.key) == b.committed.sections.map(\.key))
        #expect(a.appliedPosition == "5-0" && b.appliedPosition == "5-0")
        // The toggle of the removed section is refused, to its author only, on its node only.
        #expect(refusals(onA).map(\.1) == ["a2"])
        #expect(refusals(onB).isEmpty)
        // Each node acknowledges its own authors, with the seq the order gave.
        #expect(acks(onA).map { "\($0.1)@\($0.2)" } == ["a1@1", "a3@4"])
        #expect(acks(onB).map { "\($0.1)@\($0.2)" } == ["b1@2", "b2@3"])
        #expect(a.isQuiet == false)  // ana is still a member
    }

    @Test func aRetryWithTheSameChangeIdIsAcknowledgedWithTheOriginalSeqOnItsNode() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        var b = try core(node: "b", member: bo, name: "bo")
        var stream = appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0))
        stream += appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0))
        stream = positioned(stream)
        let onA = a.handle(.sequenced(stream), now: 0)
        let onB = b.handle(.sequenced(stream), now: 0)
        #expect(seqs(onA) == [1] && seqs(onB) == [1])
        #expect(acks(onA).map { "\($0.1)@\($0.2)" } == ["a1@1", "a1@1"])
        #expect(acks(onB).isEmpty)
    }

    @Test func anAppendThatSurelyFailedIsRefusedAtOnce() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        let request = try #require(appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)).first)
        let effects = a.handle(.appendFailed(number: request.origin.number, BrokerError("not connected")), now: 0)
        #expect(refusals(effects).map(\.0) == [.storageUnavailable])
        #expect(a.committed.seq == 0)
    }

    @Test func anAppendOfUnknownOutcomeIsAcknowledgedWhenItsEntryShowsUp() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        let request = try #require(appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)).first)
        var effects = a.handle(.appendFailed(number: request.origin.number, BrokerError("timed out", mayHaveRun: true)), now: 0)
        effects += a.handle(.caughtUp(through: "9-0"), now: 0)
        #expect(refusals(effects).isEmpty)
        effects = a.handle(.sequenced(positioned([request])), now: 0)
        #expect(acks(effects).map { "\($0.1)@\($0.2)" } == ["a1@1"])
        #expect(refusals(a.handle(.caughtUp(through: "9-0"), now: 0)).isEmpty)
    }

    @Test func anAppendOfUnknownOutcomeNotReadBackIsRefusedAndItsRetryResolvedByTheChangeId() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        var b = try core(node: "b", member: bo, name: "bo")
        let lost = try #require(appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)).first)
        var effects = a.handle(.appendFailed(number: lost.origin.number, BrokerError("timed out", mayHaveRun: true)), now: 0)
        effects += a.handle(.caughtUp(through: "9-0"), now: 0)
        #expect(refusals(effects).isEmpty)
        effects = a.handle(.caughtUp(through: "9-0"), now: 0)
        #expect(refusals(effects).map(\.0) == [.storageUnavailable])
        #expect(refusals(effects).map(\.1) == ["a1"])

        // The client retries with the same id; the first append landed after all (a frozen
        // Redis that caught up), so the stream holds both: the retry gets the original seq.
        let retry = try #require(appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)).first)
        let stream = positioned([lost, retry])
        effects = a.handle(.sequenced(stream), now: 0)
        let onB = b.handle(.sequenced(stream), now: 0)
        #expect(seqs(effects) == [1] && seqs(onB) == [1])
        #expect(acks(effects).map { "\($0.1)@\($0.2)" } == ["a1@1"])
        #expect(a.isQuiet == false)
        _ = a.handle(.leave(ana), now: 0)
        #expect(a.isQuiet)
    }

    @Test func anEntryOfAnEarlierCoreOnTheSameNodeIsNotTakenForThisCoresRequestOfTheSameNumber() throws {
        let table = try Table(options: TableOptions(), sections: [Section(key: "t", title: "T", collapsed: true)], seq: 0)
        var earlier = SessionCore(
            name: "x", epoch: "e1", table: table, settings: SessionCore.Settings(), order: StreamOrder(node: "a", origin: "a/p-1"))
        var later = SessionCore(
            name: "x", epoch: "e1", table: table, settings: SessionCore.Settings(), order: StreamOrder(node: "a", origin: "a/p-2"))
        _ = earlier.handle(.join(ana, JoinRequest(session: "x", name: "ana"), role: nil), now: 0)
        _ = later.handle(.join(ana, JoinRequest(session: "x", name: "ana"), role: nil), now: 0)
        let old = try #require(appended(earlier.handle(.change(.toggle(section: .key("t")), id: "old", from: ana), now: 0)).first)
        let new = try #require(appended(later.handle(.change(.toggle(section: .key("t")), id: "new", from: ana), now: 0)).first)
        #expect(old.origin.number == new.origin.number)
        #expect(new.author.client == "a.c1" && new.origin.node == "a/p-2")
        var effects = later.handle(.sequenced(positioned([old])), now: 0)
        #expect(seqs(effects) == [1] && acks(effects).isEmpty)
        effects = later.handle(.sequenced(positioned([new], from: 2)), now: 0)
        #expect(acks(effects).map { "\($0.1)@\($0.2)" } == ["new@2"])
    }

    @Test func aRequestTouchingAStreamingSectionWaitsAndKeepsTheStreamOrder() throws {
        var settings = SessionCore.Settings()
        settings.chunkRows = 1
        settings.presenceIntervalMs = 0
        let big = Section(key: "s", title: "S", collapsed: true, rows: (0..<10).map { Row(key: "r\($0)", label: "row \($0)", value: "") })
        var a = SessionCore(
            name: "x", epoch: "e1", table: try Table(options: TableOptions(), sections: [big], seq: 0), settings: settings,
            order: StreamOrder(node: "a"))
        _ = a.handle(.join(ana, JoinRequest(session: "x", name: "ana"), role: nil), now: 0)
        var stream = appended(a.handle(.change(.toggle(section: .key("s")), id: "a1", from: ana), now: 0))
        stream += appended(a.handle(.change(.toggle(section: .key("s")), id: "a2", from: ana), now: 0))
        var effects = a.handle(.sequenced(positioned(stream)), now: 0)
        // The expansion streams 10 rows in chunks of 1: the second toggle waits for it.
        #expect(seqs(effects) == [1])
        #expect(effects.contains { if case .startStream = $0 { return true } else { return false } })
        effects = a.handle(.streamDelivered(section: "s", seq: 1, to: ana), now: 0)
        #expect(seqs(effects) == [2])
        #expect(acks(effects).map(\.1) == ["a2"])
    }

    @Test func aSnapshotIsAskedForWithThePositionItCovers() throws {
        var settings = SessionCore.Settings()
        settings.checkpointEvents = 2
        var a = SessionCore(name: "x", epoch: "e1", table: Table(), settings: settings, order: StreamOrder(node: "a"))
        _ = a.handle(.join(ana, JoinRequest(session: "x", name: "ana"), role: nil), now: 0)
        var stream: [SequencedRequest] = []
        for title in ["A", "B", "C"] {
            stream += appended(a.handle(.change(.addSection(NewSection(title: title)), id: nil, from: ana), now: 0))
        }
        let effects = a.handle(.sequenced(positioned(stream)), now: 0)
        let snapshots = effects.compactMap { effect -> (UInt64, String)? in
            if case .snapshot(let table, let position, _) = effect { return (table.seq, position) } else { return nil }
        }
        #expect(snapshots.map { "\($0.0)@\($0.1)" } == ["3@3-0"])
    }

    func welcomes(_ effects: [SessionEffect]) -> [JSONValue] {
        effects.compactMap { effect -> JSONValue? in
            guard case .send(let message, _) = effect, let value = try? JSONParser.parse(message.bytes), value["type"] == .string("welcome")
            else { return nil }
            return value
        }
    }

    @Test func whileTheBrokerIsUnavailableChangesAreRefusedAndNothingIsAppended() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        _ = a.handle(.brokerAvailable(false), now: 0)
        var effects = a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)
        #expect(appended(effects).isEmpty)
        #expect(refusals(effects).map(\.0) == [.storageUnavailable])
        #expect(refusals(effects).map(\.1) == ["a1"])
        #expect(a.committed.seq == 0 && !a.waitsForCatchUp)
        // Reads go on from the committed table.
        effects = a.handle(.find(query: "row", limit: 10, id: "f1", from: ana), now: 0)
        #expect(effects.contains { if case .find = $0 { return true } else { return false } })
        // Requests of other nodes read before the outage still apply.
        var b = try core(node: "b", member: bo, name: "bo")
        let fromB = positioned(appended(b.handle(.change(.toggle(section: .key("s")), id: "b1", from: bo), now: 0)))
        #expect(seqs(a.handle(.sequenced(fromB), now: 0)) == [1])
        _ = a.handle(.brokerAvailable(true), now: 0)
        effects = a.handle(.change(.toggle(section: .key("t")), id: "a2", from: ana), now: 0)
        #expect(appended(effects).map(\.id) == ["a2"])
        #expect(refusals(effects).isEmpty)
    }

    @Test func aRequestStoredButNeverReadBackIsRefusedOnceAReadPassesItsPosition() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        let first = try #require(appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)).first)
        let second = try #require(appended(a.handle(.change(.toggle(section: .key("s")), id: "a2", from: ana), now: 0)).first)
        _ = a.handle(.appended(number: first.origin.number, position: "5-0"), now: 0)
        _ = a.handle(.appended(number: second.origin.number, position: "7-0"), now: 0)
        #expect(a.waitsForCatchUp)
        // A read that ends before either entry settles nothing.
        #expect(refusals(a.handle(.caughtUp(through: "4-0"), now: 0)).isEmpty)
        // The first entry did not decode (every reader dropped it); the read reached 6-0.
        let effects = a.handle(.caughtUp(through: "6-0"), now: 0)
        #expect(refusals(effects).map(\.0) == [.storageUnavailable])
        #expect(refusals(effects).map(\.1) == ["a1"])
        // The second is read back and acknowledged as usual.
        var entry = second
        entry.position = "7-0"
        #expect(acks(a.handle(.sequenced([entry]), now: 0)).map(\.1) == ["a2"])
        #expect(!a.waitsForCatchUp)
        #expect(refusals(a.handle(.caughtUp(through: "9-0"), now: 0)).isEmpty)
    }

    @Test func aReloadInTheSameEpochWelcomesEveryMemberAgainAndKeepsWaitingRequests() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        var b = try core(node: "b", member: bo, name: "bo")
        let mine = try #require(appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)).first)
        _ = a.handle(.appendFailed(number: mine.origin.number, BrokerError("connection lost", mayHaveRun: true)), now: 0)
        // Node b went on meanwhile; its snapshot covers what a never read.
        var stream: [SequencedRequest] = []
        for id in ["b1", "b2", "b3"] { stream += appended(b.handle(.change(.toggle(section: .key("s")), id: id, from: bo), now: 0)) }
        stream = positioned(stream)
        _ = b.handle(.sequenced(stream), now: 0)
        let snapshot = b.committed
        var entry = mine
        entry.position = "4-0"
        let onB = b.handle(.sequenced([entry]), now: 0)

        var effects = a.handle(.reload(epoch: "e1", table: snapshot, position: "3-0"), now: 0)
        let welcome = try #require(welcomes(effects).first)
        #expect(welcome["seq"] == .integer(3) && welcome["epoch"] == .string("e1"))
        #expect(a.committed.seq == 3 && a.appliedPosition == "3-0")
        #expect(refusals(effects).isEmpty)
        // The request of unknown outcome landed after the snapshot: acknowledged from its apply.
        effects = a.handle(.sequenced([entry]), now: 0)
        #expect(acks(effects).map { "\($0.1)@\($0.2)" } == ["a1@4"])
        #expect(events(effects) == events(onB))
        // A resume from before the reload no longer reaches back: a fresh welcome.
        let cy = Connection(id: 2)
        effects = a.handle(.join(cy, JoinRequest(session: "x", name: "cy", since: 1, epoch: "e1"), role: nil), now: 0)
        #expect(welcomes(effects).first?["recovered"] == .bool(false))
    }

    @Test func aReloadWhoseSnapshotCoversAWaitingRequestAcknowledgesItWithItsSeq() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        var b = try core(node: "b", member: bo, name: "bo")
        let mine = try #require(appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)).first)
        var stream = appended(b.handle(.change(.toggle(section: .key("s")), id: "b1", from: bo), now: 0))
        stream.append(mine)
        stream += appended(b.handle(.change(.toggle(section: .key("s")), id: "b2", from: bo), now: 0))
        stream = positioned(stream)
        _ = a.handle(.appended(number: mine.origin.number, position: "2-0"), now: 0)
        _ = b.handle(.sequenced(stream), now: 0)
        // Node a fell behind; b's snapshot at 3-0 holds a's change, which a will never read.
        var effects = a.handle(.reload(epoch: "e1", table: b.committed, position: "3-0"), now: 0)
        #expect(refusals(effects).isEmpty)
        #expect(acks(effects).map { "\($0.1)@\($0.2)" } == ["a1@2"])
        #expect(!a.waitsForCatchUp)
        effects = a.handle(.caughtUp(through: "3-0"), now: 0)
        #expect(refusals(effects).isEmpty && acks(effects).isEmpty)
    }

    @Test func aRequestWhoseAppendReplyCameAfterAReloadCoveringItIsAcknowledgedAtCatchUp() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        var b = try core(node: "b", member: bo, name: "bo")
        let mine = try #require(appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)).first)
        let stream = positioned([mine] + appended(b.handle(.change(.toggle(section: .key("s")), id: "b1", from: bo), now: 0)))
        _ = b.handle(.sequenced(stream), now: 0)
        var effects = a.handle(.reload(epoch: "e1", table: b.committed, position: "2-0"), now: 0)
        #expect(refusals(effects).isEmpty && acks(effects).isEmpty)
        effects = a.handle(.appended(number: mine.origin.number, position: "1-0"), now: 0)
        effects += a.handle(.caughtUp(through: "2-0"), now: 0)
        #expect(refusals(effects).isEmpty)
        #expect(acks(effects).map { "\($0.1)@\($0.2)" } == ["a1@1"])
    }

    @Test func aWaitingRequestTheOrderRefusedIsRefusedWhenAReloadCoversIt() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        var b = try core(node: "b", member: bo, name: "bo")
        let mine = try #require(appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)).first)
        // b removes section t first: a's toggle of it is refused in the order.
        var stream = appended(b.handle(.change(.removeSection(section: .key("t")), id: "b1", from: bo), now: 0))
        stream.append(mine)
        stream = positioned(stream)
        _ = a.handle(.appended(number: mine.origin.number, position: "2-0"), now: 0)
        _ = b.handle(.sequenced(stream), now: 0)
        let effects = a.handle(.reload(epoch: "e1", table: b.committed, position: "2-0"), now: 0)
        #expect(acks(effects).isEmpty)
        #expect(refusals(effects).map(\.1) == ["a1"])
        #expect(a.committed.section("t") == nil)
    }

    @Test func aWaitingRequestWithoutAnIdCoveredByAReloadIsAnsweredOutcomeUnknown() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        var b = try core(node: "b", member: bo, name: "bo")
        let mine = try #require(appended(a.handle(.change(.toggle(section: .key("t")), id: nil, from: ana), now: 0)).first)
        _ = a.handle(.appended(number: mine.origin.number, position: "1-0"), now: 0)
        _ = b.handle(.sequenced(positioned([mine])), now: 0)
        let effects = a.handle(.reload(epoch: "e1", table: b.committed, position: "1-0"), now: 0)
        #expect(refusals(effects).map(\.0) == [.outcomeUnknown])
        #expect(!a.waitsForCatchUp)
    }

    @Test func aReloadInANewEpochRefusesWaitingRequestsAndWelcomesInTheNewEpoch() throws {
        var a = try core(node: "a", member: ana, name: "ana")
        let mine = try #require(appended(a.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)).first)
        _ = a.handle(.appended(number: mine.origin.number, position: "9-0"), now: 0)
        let effects = a.handle(.reload(epoch: "e2", table: a.committed, position: ""), now: 0)
        #expect(refusals(effects).map(\.0) == [.storageUnavailable])
        #expect(welcomes(effects).first?["epoch"] == .string("e2"))
        #expect(a.epoch == "e2" && !a.waitsForCatchUp)
    }
}
