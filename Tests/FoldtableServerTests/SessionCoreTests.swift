import FoldtableCore
import Testing

@testable import FoldtableServer

/// The session core alone: inputs in, effects out, no transport, no store, no clock.
@Suite struct SessionCoreEffects {
    let ana = Connection(id: 1)
    let bo = Connection(id: 2)

    func core(
        rows: Int = 3, collapsed: Bool = true, settings: SessionCore.Settings = SessionCore.Settings(), options: TableOptions = TableOptions()
    ) throws -> SessionCore {
        let section = Section(
            key: "s", title: "S", collapsed: collapsed, rows: (0..<rows).map { Row(key: "r\($0)", label: "row \($0)", value: "") })
        let other = Section(key: "t", title: "T", collapsed: true)
        var core = SessionCore(
            name: "x", epoch: "e1", table: try Table(options: options, sections: [section, other], seq: 0), settings: settings)
        _ = core.handle(.join(ana, JoinRequest(session: "x", name: "ana"), role: nil), now: 0)
        _ = core.handle(.join(bo, JoinRequest(session: "x", name: "bo"), role: nil), now: 0)
        return core
    }

    /// A change that expands nothing (expansions start row streams, which hold later changes).
    func detail(_ text: String, section: SectionRef = .key("t")) -> Change {
        .updateSection(section: section, patch: SectionPatch(detail: .some(text)))
    }

    func persisted(_ effects: [SessionEffect]) -> (events: [LoggedEvent], generation: UInt64)? {
        for case .persist(let events, let generation) in effects { return (events, generation) }
        return nil
    }

    func acks(_ effects: [SessionEffect]) -> [(UInt64, String, UInt64)] {
        effects.compactMap { if case .ack(let c, let id, let seq) = $0 { return (c.id, id, seq) } else { return nil } }
    }

    func broadcastTypes(_ effects: [SessionEffect]) -> [String] {
        effects.compactMap { effect -> String? in
            guard case .broadcast(let message, _) = effect, let value = try? JSONParser.parse(message.bytes),
                case .string(let type)? = value["type"]
            else { return nil }
            return type
        }
    }

    func refusals(_ effects: [SessionEffect]) -> [(UInt64, ProtocolError.Code, String?)] {
        effects.compactMap { if case .refuse(let c, let error, let id) = $0 { return (c.id, error.code, id) } else { return nil } }
    }

    @Test func aChangeIsPersistedButNeitherAcknowledgedNorBroadcastBeforeItsCommit() throws {
        var core = try core()
        let effects = core.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)
        let persist = try #require(persisted(effects))
        #expect(persist.events.map(\.event.seq) == [1])
        #expect(persist.events.first?.request == .toggle(section: .key("t")))
        #expect(acks(effects).isEmpty)
        #expect(broadcastTypes(effects).isEmpty)
        #expect(core.head.seq == 1)
        #expect(core.committed.seq == 0)
        #expect(core.committed.section("t")?.collapsed == true)
    }

    @Test func theCommitAcknowledgesTheAuthorAndBroadcastsTheEventToEveryone() throws {
        var core = try core()
        let persist = try #require(persisted(core.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)))
        let effects = core.handle(.committed(generation: persist.generation, through: 1), now: 0)
        #expect(acks(effects).map(\.1) == ["a1"])
        #expect(acks(effects).first?.2 == 1)
        // "t" is empty: the event is all anyone needs.
        #expect(broadcastTypes(effects) == ["event"])
        #expect(core.committed.seq == 1)
        #expect(core.committed.section("t")?.collapsed == false)
    }

    @Test func aFailedCommitRefusesEveryLostChangeAndLeavesTheTableAsCommitted() throws {
        var core = try core()
        let first = try #require(persisted(core.handle(.change(detail("d"), id: "a1", from: ana), now: 0)))
        _ = core.handle(.change(.addRow(section: .key("t"), row: NewRow(label: "new")), id: "b1", from: bo), now: 0)
        #expect(core.head.seq == 2)
        let effects = core.handle(.commitFailed(generation: first.generation, .unavailable("disk full")), now: 0)
        let refused = refusals(effects)
        #expect(refused.map(\.0) == [1, 2])
        #expect(refused.allSatisfy { $0.1 == .storageUnavailable })
        #expect(refused.map(\.2) == ["a1", "b1"])
        #expect(acks(effects).isEmpty)
        #expect(broadcastTypes(effects).isEmpty)
        #expect(core.head.seq == 0)
        #expect(core.head.section("t")?.rows.isEmpty == true)
        #expect(core.head.section("t")?.detail == nil)
        #expect(core.committed.section("t")?.detail == nil)
    }

    /// A driver that knows when a read's messages end: a member's changes of one read go to the
    /// log in one append, and are acknowledged together when it commits.
    func gathering() throws -> SessionCore {
        var settings = SessionCore.Settings()
        settings.handsOverAtOnce = false
        return try core(settings: settings)
    }

    @Test func aMembersChangesWaitForTheHandOverThenGoToTheLogInOneAppend() throws {
        var core = try gathering()
        let first = core.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)
        let second = core.handle(.change(detail("d"), id: "a2", from: ana), now: 0)
        let third = core.handle(.change(.toggle(section: .key("t")), id: "b1", from: bo), now: 0)
        for effects in [first, second, third] { #expect(persisted(effects) == nil) }
        // Applied to the head at once, so each change was decided after the one before it.
        #expect(core.head.seq == 3)
        #expect(core.head.section("t")?.collapsed == true)
        #expect(core.awaitsHandOver)
        #expect(!core.isQuiet)
        let persist = try #require(persisted(core.handle(.handOver, now: 0)))
        #expect(persist.events.map(\.event.seq) == [1, 2, 3])
        #expect(!core.awaitsHandOver)
        // Nothing is told before the commit, and everything once it comes.
        #expect(acks(core.handle(.handOver, now: 0)).isEmpty)
        let effects = core.handle(.committed(generation: persist.generation, through: 3), now: 0)
        #expect(acks(effects).map(\.1) == ["a1", "a2", "b1"])
        #expect(acks(effects).map(\.2) == [1, 2, 3])
        #expect(broadcastTypes(effects) == ["event", "event", "event"])
        #expect(core.committed.seq == 3)
    }

    @Test func changesWaitingForTheHandOverAreRefusedWithTheAppendBeforeThemWhenItFails() throws {
        var core = try gathering()
        _ = core.handle(.change(detail("d"), id: "a1", from: ana), now: 0)
        let first = try #require(persisted(core.handle(.handOver, now: 0)))
        // The next read's change waits for its hand-over when the append before it fails.
        _ = core.handle(.change(.toggle(section: .key("t")), id: "a2", from: ana), now: 0)
        let effects = core.handle(.commitFailed(generation: first.generation, .unavailable("disk full")), now: 0)
        #expect(refusals(effects).map(\.2) == ["a1", "a2"])
        #expect(refusals(effects).allSatisfy { $0.1 == .storageUnavailable })
        #expect(!core.awaitsHandOver)
        #expect(persisted(core.handle(.handOver, now: 0)) == nil)
        #expect(core.head.seq == 0)
        #expect(core.head.section("t")?.collapsed == true)
    }

    @Test func aCommitHandsOverWhatWaitsAndAnAPIChangeNeverWaits() throws {
        var core = try gathering()
        _ = core.handle(.change(detail("d"), id: "a1", from: ana), now: 0)
        let first = try #require(persisted(core.handle(.handOver, now: 0)))
        _ = core.handle(.change(detail("e"), id: "a2", from: ana), now: 0)
        // The commit of the first append hands the waiting change over with it, in order.
        let committed = core.handle(.committed(generation: first.generation, through: 1), now: 0)
        #expect(acks(committed).map(\.1) == ["a1"])
        #expect(persisted(committed)?.events.map(\.event.seq) == [2])
        #expect(!core.awaitsHandOver)
        let api = core.handle(.apiChange(detail("f"), id: nil, author: Author(client: "api", name: "cron"), request: 1), now: 0)
        #expect(persisted(api)?.events.map(\.event.seq) == [3])
        // A member's change waiting when an API change comes goes in the API change's append.
        _ = core.handle(.change(detail("g"), id: "a3", from: ana), now: 0)
        let carried = core.handle(.apiChange(detail("h"), id: nil, author: Author(client: "api", name: "cron"), request: 2), now: 0)
        #expect(persisted(carried)?.events.map(\.event.seq) == [4, 5])
        #expect(!core.awaitsHandOver)
    }

    @Test func aChangeWaitingWhenItsAuthorLeavesIsStillCommittedAndOthersSeeIt() throws {
        var core = try gathering()
        _ = core.handle(.change(detail("d"), id: "a1", from: ana), now: 0)
        let left = core.handle(.leave(ana), now: 0)
        let persist = try #require(persisted(left) ?? persisted(core.handle(.handOver, now: 0)))
        #expect(persist.events.map(\.event.seq) == [1])
        let effects = core.handle(.committed(generation: persist.generation, through: 1), now: 0)
        // Nobody to acknowledge: the author left. The member still here sees the event.
        #expect(acks(effects).isEmpty)
        guard case .broadcast(_, let to)? = effects.first(where: { if case .broadcast = $0 { return true } else { return false } }) else {
            Issue.record("no broadcast")
            return
        }
        #expect(to.map(\.id) == [bo.id])
        #expect(core.committed.section("t")?.detail == "d")
    }

    @Test func resumesOfTheSameMissedEventsShareOneMessageForEach() throws {
        var core = try core()
        for index in 1...3 {
            let persist = try #require(persisted(core.handle(.change(detail("d\(index)"), id: "i\(index)", from: ana), now: 0)))
            _ = core.handle(.committed(generation: persist.generation, through: UInt64(index)), now: 0)
        }
        func resumed(_ id: UInt64) -> [OutboundMessage] {
            let effects = core.handle(.join(Connection(id: id), JoinRequest(session: "x", name: "n\(id)", since: 1, epoch: "e1"), role: nil), now: 0)
            return effects.compactMap { effect -> OutboundMessage? in
                guard case .send(let message, _) = effect, let value = try? JSONParser.parse(message.bytes), value["type"] == .string("event")
                else { return nil }
                return message
            }
        }
        let first = resumed(7)
        let second = resumed(8)
        #expect(first.count == 2)
        #expect(first.map { ObjectIdentifier($0) } == second.map { ObjectIdentifier($0) })
        #expect(first.map { (try? JSONParser.parse($0.bytes))?["seq"] } == [.integer(2), .integer(3)])
    }

    @Test func aLateReportOfAnAbandonedAppendIsIgnored() throws {
        var core = try core()
        let first = try #require(persisted(core.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)))
        _ = core.handle(.commitFailed(generation: first.generation, .unavailable("io")), now: 0)
        let retry = try #require(persisted(core.handle(.change(.toggle(section: .key("t")), id: "a2", from: ana), now: 0)))
        #expect(retry.generation != first.generation)
        #expect(retry.events.map(\.event.seq) == [1])
        // The abandoned append's success must not publish the new one.
        #expect(acks(core.handle(.committed(generation: first.generation, through: 1), now: 0)).isEmpty)
        #expect(acks(core.handle(.committed(generation: retry.generation, through: 1), now: 0)).map(\.1) == ["a2"])
    }

    @Test func aRetryWhileTheFirstIsInFlightIsAcknowledgedOnceItCommitsWithTheSameSeq() throws {
        var core = try core()
        let persist = try #require(persisted(core.handle(.change(detail("d", section: .title("T")), id: "a1", from: ana), now: 0)))
        let retry = core.handle(.change(detail("d", section: .title("T")), id: "a1", from: ana), now: 0)
        #expect(persisted(retry) == nil)
        #expect(acks(retry).isEmpty)
        let effects = core.handle(.committed(generation: persist.generation, through: 1), now: 0)
        #expect(acks(effects).map(\.2) == [1, 1])
        #expect(core.committed.seq == 1)
    }

    @Test func aRetryAfterTheCommitIsAcknowledgedAtOnceAndNotPersisted() throws {
        var core = try core()
        let persist = try #require(persisted(core.handle(.change(detail("d"), id: "a1", from: ana), now: 0)))
        _ = core.handle(.committed(generation: persist.generation, through: 1), now: 0)
        let retry = core.handle(.change(detail("d"), id: "a1", from: ana), now: 0)
        #expect(persisted(retry) == nil)
        #expect(acks(retry).map(\.2) == [1])
    }

    @Test func anInvalidChangeIsRefusedAtOnceAndNeverPersisted() throws {
        var core = try core()
        let effects = core.handle(.change(.toggle(section: .key("nope")), id: "z", from: ana), now: 0)
        #expect(persisted(effects) == nil)
        #expect(refusals(effects).map(\.1) == [.unknownSection])
    }

    @Test func aJoinDuringACommitSeesOnlyCommittedStateThenGetsTheEvent() throws {
        var core = try core()
        let persist = try #require(persisted(core.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)))
        let carl = Connection(id: 3)
        let joined = core.handle(.join(carl, JoinRequest(session: "x", name: "carl"), role: nil), now: 0)
        let welcome = try #require(
            joined.compactMap { effect -> JSONValue? in
                guard case .send(let message, let to) = effect, to == carl else { return nil }
                return try? JSONParser.parse(message.bytes, limits: .init(maxDepth: 16, maxStringBytes: 1 << 20))
            }.first)
        #expect(welcome["seq"] == .integer(0))
        let effects = core.handle(.committed(generation: persist.generation, through: 1), now: 0)
        let targets = effects.compactMap { effect -> [UInt64]? in
            if case .broadcast(_, let to) = effect { return to.map(\.id) } else { return nil }
        }
        #expect(!targets.isEmpty && targets.allSatisfy { $0 == [1, 2, 3] })
    }

    @Test func changesToASectionExpandingInFlightWaitUntilItsRowsReachedEveryone() throws {
        var settings = SessionCore.Settings()
        settings.chunkRows = 2
        var core = try core(rows: 3, collapsed: true, settings: settings)
        let expand = try #require(persisted(core.handle(.change(.toggle(section: .key("s")), id: "e", from: ana), now: 0)))
        // The double tap arrives before the expansion commits: it must wait for the stream.
        #expect(persisted(core.handle(.change(.toggle(section: .key("s")), id: "c", from: bo), now: 0)) == nil)
        let committed = core.handle(.committed(generation: expand.generation, through: 1), now: 0)
        let started = committed.compactMap { effect -> [UInt64]? in
            if case .startStream(let section, let seq, let to) = effect, section.key == "s", seq == 1 { return to.map(\.id) } else { return nil }
        }
        #expect(started == [[1, 2]])
        #expect(persisted(committed) == nil)
        #expect(persisted(core.handle(.streamDelivered(section: "s", seq: 1, to: ana), now: 0)) == nil)
        let last = core.handle(.streamDelivered(section: "s", seq: 1, to: bo), now: 0)
        #expect(persisted(last)?.events.map(\.event.seq) == [2])
    }

    @Test func aSmallSectionsRowsGoWithItsEventAndNothingWaitsForThem() throws {
        var core = try core(rows: 3, collapsed: true)
        let expand = try #require(persisted(core.handle(.change(.toggle(section: .key("s")), id: "e", from: ana), now: 0)))
        // The double tap does not wait: the rows will go with the expansion's event.
        let collapse = try #require(persisted(core.handle(.change(.toggle(section: .key("s")), id: "c", from: bo), now: 0)))
        let effects = core.handle(.committed(generation: collapse.generation, through: 2), now: 0)
        #expect(broadcastTypes(effects) == ["event", "rows", "event"])
        #expect(!effects.contains { if case .startStream = $0 { return true } else { return false } })
        #expect(expand.generation == collapse.generation)
    }

    /// Commits one toggle of `key` by `from`; the effects of its commit.
    func toggleAndCommit(_ core: inout SessionCore, _ key: String, id: String, from: Connection) throws -> [SessionEffect] {
        let persist = try #require(persisted(core.handle(.change(.toggle(section: .key(key)), id: id, from: from), now: 0)))
        return core.handle(.committed(generation: persist.generation, through: core.head.seq), now: 0)
    }

    /// Who each `rows` broadcast went to.
    func rowsTargets(_ effects: [SessionEffect]) -> [[UInt64]] {
        effects.compactMap { effect -> [UInt64]? in
            guard case .broadcast(let message, let to) = effect, let value = try? JSONParser.parse(message.bytes),
                value["type"] == .string("rows")
            else { return nil }
            return to.map(\.id)
        }
    }

    @Test func expandingASectionAgainSendsOnlyTheEventToMembersThatHoldItsRows() throws {
        var core = try core(rows: 3, collapsed: true)
        #expect(rowsTargets(try toggleAndCommit(&core, "s", id: "1", from: ana)) == [[1, 2]])
        _ = try toggleAndCommit(&core, "s", id: "2", from: ana)
        let again = try toggleAndCommit(&core, "s", id: "3", from: bo)
        #expect(broadcastTypes(again) == ["event"])
    }

    @Test func onlyAMemberThatLacksTheRowsGetsThemOnExpand() throws {
        var core = try core(rows: 3, collapsed: true)
        _ = try toggleAndCommit(&core, "s", id: "1", from: ana)
        _ = try toggleAndCommit(&core, "s", id: "2", from: ana)
        // cy joins while "s" is collapsed: its welcome has no rows of it.
        let cy = Connection(id: 3)
        _ = core.handle(.join(cy, JoinRequest(session: "x", name: "cy"), role: nil), now: 0)
        #expect(rowsTargets(try toggleAndCommit(&core, "s", id: "3", from: bo)) == [[3]])
    }

    @Test func aMemberWelcomedWithASectionsRowsGetsOnlyTheEventWhenItIsExpandedAgain() throws {
        var core = try core(rows: 3, collapsed: false)
        _ = try toggleAndCommit(&core, "s", id: "1", from: ana)
        #expect(rowsTargets(try toggleAndCommit(&core, "s", id: "2", from: ana)).isEmpty)
    }

    @Test func aLargeSectionStreamsOnlyToMembersThatLackItAndOnceTheyHaveItNothingStreams() throws {
        var settings = SessionCore.Settings()
        settings.chunkRows = 2
        var core = try core(rows: 3, collapsed: false, settings: settings)
        let cy = Connection(id: 3)
        _ = try toggleAndCommit(&core, "s", id: "1", from: ana)  // collapse; ana and bo hold the rows
        _ = core.handle(.join(cy, JoinRequest(session: "x", name: "cy"), role: nil), now: 0)
        let expand = try toggleAndCommit(&core, "s", id: "2", from: ana)
        let started = expand.compactMap { effect -> [UInt64]? in
            if case .startStream(_, _, let to) = effect { return to.map(\.id) } else { return nil }
        }
        #expect(started == [[3]])
        _ = core.handle(.streamDelivered(section: "s", seq: 2, to: cy), now: 0)
        _ = try toggleAndCommit(&core, "s", id: "3", from: ana)
        let again = try toggleAndCommit(&core, "s", id: "4", from: bo)
        #expect(!again.contains { if case .startStream = $0 { return true } else { return false } })
        #expect(broadcastTypes(again) == ["event"])
    }

    /// Commits one import into `key` by `from`; the effects of its commit.
    func importAndCommit(_ core: inout SessionCore, _ key: String, rows: Int, id: String, from: Connection) throws -> [SessionEffect] {
        let imported = RowImport(rows: (0..<rows).map { NewRow(label: "imported \($0)") })
        let persist = try #require(persisted(core.handle(.change(.importRows(section: .key(key), rows: imported), id: id, from: from), now: 0)))
        return core.handle(.committed(generation: persist.generation, through: core.head.seq), now: 0)
    }

    @Test func anImportIntoAShownSectionSendsEveryoneTheEventThenItsNewRowsEvenWhoHeldTheOldOnes() throws {
        var core = try core(rows: 3, collapsed: false)
        let effects = try importAndCommit(&core, "s", rows: 2, id: "i", from: ana)
        #expect(broadcastTypes(effects) == ["event", "rows"])
        #expect(rowsTargets(effects) == [[1, 2]])
        #expect(acks(effects).map(\.1) == ["i"])
        // The event members get carries the count, not the rows; the log got them all.
        for case .broadcast(let message, _) in effects {
            let value = try JSONParser.parse(message.bytes)
            guard value["type"] == .string("event") else { continue }
            #expect(value["change"]?["count"] == .integer(2))
            #expect(value["change"]?["rows"] == nil)
        }
        #expect(core.committed.section("s")?.rows.map(\.label) == ["imported 0", "imported 1"])
        // Both hold the new rows now: collapsing and expanding again sends only events.
        _ = try toggleAndCommit(&core, "s", id: "c", from: ana)
        #expect(broadcastTypes(try toggleAndCommit(&core, "s", id: "e", from: ana)) == ["event"])
    }

    @Test func anImportIntoACollapsedSectionSendsNoRowsButItsNextExpansionDoes() throws {
        var core = try core(rows: 3, collapsed: false)
        _ = try toggleAndCommit(&core, "s", id: "c", from: ana)  // collapsed; both hold the rows
        #expect(broadcastTypes(try importAndCommit(&core, "s", rows: 2, id: "i", from: bo)) == ["event"])
        #expect(rowsTargets(try toggleAndCommit(&core, "s", id: "e", from: ana)) == [[1, 2]])
    }

    @Test func aLargeImportStreamsShowsBusyAndHoldsChangesToItsSectionUntilEveryoneHasTheRows() throws {
        var settings = SessionCore.Settings()
        settings.chunkRows = 2
        var options = TableOptions()
        options.busyThresholdMs = 0
        var core = try core(rows: 1, collapsed: false, settings: settings, options: options)
        let imported = RowImport(rows: (0..<5).map { NewRow(label: "n\($0)") })
        let persist = try #require(persisted(core.handle(.change(.importRows(section: .key("s"), rows: imported), id: "i", from: ana), now: 0)))
        // A toggle of the section behind it waits for the rows to reach everyone.
        #expect(persisted(core.handle(.change(.toggle(section: .key("s")), id: "t", from: bo), now: 0)) == nil)
        let committed = core.handle(.committed(generation: persist.generation, through: 1), now: 0)
        let started = committed.compactMap { effect -> [UInt64]? in
            if case .startStream(let section, 1, let to) = effect, section.key == "s" { return to.map(\.id) } else { return nil }
        }
        #expect(started == [[1, 2]])
        #expect(broadcastTypes(committed) == ["event", "busy"])
        #expect(core.busySections == ["s"])
        _ = core.handle(.streamDelivered(section: "s", seq: 1, to: ana), now: 5)
        let done = core.handle(.streamDelivered(section: "s", seq: 1, to: bo), now: 5)
        #expect(broadcastTypes(done) == ["busy"])
        #expect(core.busySections.isEmpty)
        #expect(persisted(done)?.events.map(\.event.seq) == [2])
    }

    /// Presence diffs in `effects`, parsed, with who they went to.
    func presenceDiffs(_ effects: [SessionEffect]) -> [(diff: PresenceDiff, to: [UInt64])] {
        effects.compactMap { effect in
            guard case .broadcast(let message, let to) = effect, let value = try? JSONParser.parse(message.bytes),
                value["type"] == .string("presence"), let reader = try? FieldReader(value), let diff = try? PresenceDiff.decode(reader)
            else { return nil }
            return (diff, to.map(\.id))
        }
    }

    /// A core with no members yet and the given presence settings.
    func emptyCore(intervalMs: UInt64 = 100, listMax: Int = 200) throws -> SessionCore {
        var settings = SessionCore.Settings()
        settings.presenceIntervalMs = intervalMs
        settings.presenceListMax = listMax
        return SessionCore(name: "x", epoch: "e1", table: try Table(options: TableOptions(), sections: [], seq: 0), settings: settings)
    }

    @Test func aStormOfJoinsCostsEachMemberOneDiffPerIntervalNotOneMessagePerJoin() throws {
        var core = try emptyCore()
        var effects: [SessionEffect] = []
        for id in UInt64(1)...50 { effects += core.handle(.join(Connection(id: id), JoinRequest(session: "x", name: "n\(id)"), role: nil), now: 0) }
        #expect(presenceDiffs(effects).isEmpty)
        // One timer for the whole interval, however many joined.
        #expect(effects.filter { if case .armTimer(.presence, _) = $0 { return true } else { return false } }.count == 1)
        let flushed = presenceDiffs(core.handle(.timer(.presence), now: 100))
        #expect(flushed.count == 1)
        #expect(flushed.first?.to.count == 50)
        #expect(flushed.first?.diff.joined.count == 50)
        #expect(flushed.first?.diff.count == 50)
    }

    /// The presence timer armed by one more join into a session of `members`.
    func presenceTimerAfterJoining(members: Int, intervalMs: UInt64) throws -> UInt64? {
        var core = try emptyCore(intervalMs: intervalMs)
        for id in UInt64(1)...UInt64(members) { _ = core.handle(.join(Connection(id: id), JoinRequest(session: "x", name: "n"), role: nil), now: 0) }
        _ = core.handle(.timer(.presence), now: intervalMs)
        let effects = core.handle(.join(Connection(id: UInt64(members) + 1), JoinRequest(session: "x", name: "late"), role: nil), now: intervalMs + 1)
        for case .armTimer(.presence, let milliseconds) in effects { return milliseconds }
        return nil
    }

    @Test func aLargeSessionGathersPresenceLongerSoAMemberGetsAtMostAboutTwoDiffsASecond() throws {
        #expect(try presenceTimerAfterJoining(members: 10, intervalMs: 100) == 100)
        // 1,000 members (the late one the 1,000th) keep the interval; the 1,001st adds one.
        #expect(try presenceTimerAfterJoining(members: 999, intervalMs: 100) == 100)
        #expect(try presenceTimerAfterJoining(members: 1_000, intervalMs: 100) == 200)
        // 2,501 members: one more interval per 1,000.
        #expect(try presenceTimerAfterJoining(members: 2_500, intervalMs: 100) == 300)
        // Never past 500 ms on its own, and never below what was configured.
        #expect(try presenceTimerAfterJoining(members: 2_500, intervalMs: 400) == 500)
        #expect(try presenceTimerAfterJoining(members: 2_500, intervalMs: 5000) == 5000)
        #expect(try presenceTimerAfterJoining(members: 2, intervalMs: 0) == nil)
    }

    @Test func someoneWhoJoinedAndLeftWithinOneIntervalIsListedAsLeft() throws {
        var core = try emptyCore()
        _ = core.handle(.join(ana, JoinRequest(session: "x", name: "ana"), role: nil), now: 0)
        _ = core.handle(.timer(.presence), now: 100)
        _ = core.handle(.join(bo, JoinRequest(session: "x", name: "bo"), role: nil), now: 110)
        _ = core.handle(.leave(bo), now: 120)
        let diff = try #require(presenceDiffs(core.handle(.timer(.presence), now: 200)).first?.diff)
        #expect(diff.joined.isEmpty)
        #expect(diff.left == ["c2"])
        #expect(diff.count == 1 && diff.complete)
    }

    @Test func pastTheListThresholdWelcomesAndDiffsCarryTheCountAndASampleThenTheWholeListReturns() throws {
        var core = try emptyCore(intervalMs: 0, listMax: 3)
        var last: [SessionEffect] = []
        for id in UInt64(1)...40 { last = core.handle(.join(Connection(id: id), JoinRequest(session: "x", name: "n\(id)"), role: nil), now: 0) }
        let welcome = try #require(
            last.compactMap { effect -> JSONValue? in
                if case .send(let message, _) = effect { return try? JSONParser.parse(message.bytes) } else { return nil }
            }.first)
        guard case .array(let listed)? = welcome["presence"] else {
            Issue.record("no presence list")
            return
        }
        #expect(listed.count == 3)
        #expect(welcome["presenceCount"] == .integer(40))
        let diff = try #require(presenceDiffs(last).first?.diff)
        #expect(!diff.complete && diff.count == 40 && diff.joined.count == 1 && diff.left.isEmpty)
        // Back under the threshold: the next diff carries everyone, since nobody kept a list.
        for id in UInt64(1)...37 { last = core.handle(.leave(Connection(id: id)), now: 0) }
        let back = try #require(presenceDiffs(last).first?.diff)
        #expect(back.complete && back.count == 3)
        #expect(back.members?.map(\.name) == ["n38", "n39", "n40"])
    }

    @Test func findAnswersFromCommittedRowsOfEverySectionOnlyToWhoAsked() throws {
        var core = try core(rows: 3, collapsed: true)
        // An uncommitted row is not found: members see only what the log made durable.
        _ = core.handle(.change(.addRow(section: .key("s"), row: NewRow(key: "r9", label: "row 9")), id: "n", from: ana), now: 0)
        let effects = core.handle(.find(query: "ROW", limit: 2, id: "f1", from: bo), now: 0)
        // The core hands the search to its driver (which runs it off the service thread), with
        // the committed table.
        let finds = effects.compactMap { effect -> (String, Table, Int, String?, Connection)? in
            if case .find(let query, let table, let limit, let id, let to) = effect { return (query, table, limit, id, to) }
            return nil
        }
        #expect(finds.count == 1 && effects.count == 1)
        let (query, table, limit, id, to) = try #require(finds.first)
        #expect(query == "ROW" && limit == 2 && id == "f1" && to.id == 2)
        let (matches, truncated) = RowSearch(query).run(in: table, limit: limit)
        #expect(matches.map(\.row) == ["r0", "r1"] && truncated)
        #expect(RowSearch("row 9").run(in: table, limit: 5).matches.isEmpty)
        #expect(core.handle(.find(query: "x", limit: 5, id: nil, from: Connection(id: 99)), now: 0).isEmpty)
    }

    func answers(_ effects: [SessionEffect]) -> [(UInt64, Result<UInt64, ProtocolError>)] {
        effects.compactMap { if case .answer(let request, let result) = $0 { return (request, result) } else { return nil } }
    }

    @Test func anAPIChangeIsBroadcastLikeAMembersAndAnsweredWithItsSeqOnlyAfterTheCommit() throws {
        var core = try core()
        let api = Author(client: "api", name: "cron")
        let effects = core.handle(.apiChange(detail("from cron"), id: "k1", author: api, request: 7), now: 0)
        let persist = try #require(persisted(effects))
        #expect(answers(effects).isEmpty)
        let committed = core.handle(.committed(generation: persist.generation, through: 1), now: 0)
        #expect(answers(committed).map(\.0) == [7])
        #expect(try answers(committed).first?.1.get() == 1)
        #expect(broadcastTypes(committed) == ["event"])
        // The same Idempotency-Key again: the original seq, nothing applied twice.
        let retry = core.handle(.apiChange(detail("from cron"), id: "k1", author: api, request: 8), now: 0)
        #expect(persisted(retry) == nil)
        #expect(try answers(retry).first?.1.get() == 1)
        #expect(core.head.seq == 1)
    }

    @Test func anInvalidAPIChangeAndALostCommitAreAnsweredWithTheirErrors() throws {
        var core = try core()
        let api = Author(client: "api", name: "cron")
        let refused = answers(core.handle(.apiChange(.toggle(section: .key("nope")), id: nil, author: api, request: 1), now: 0))
        guard case .failure(let error)? = refused.first?.1 else {
            Issue.record("not refused")
            return
        }
        #expect(error.code == .unknownSection)
        let persist = try #require(persisted(core.handle(.apiChange(detail("x"), id: nil, author: api, request: 2), now: 0)))
        let lost = answers(core.handle(.commitFailed(generation: persist.generation, .unavailable("disk full")), now: 0))
        guard case .failure(let failure)? = lost.first?.1 else {
            Issue.record("not refused")
            return
        }
        #expect(lost.first?.0 == 2 && failure.code == .storageUnavailable)
    }

    @Test func aCheckpointIsAskedForAfterTheConfiguredNumberOfCommittedEvents() throws {
        var settings = SessionCore.Settings()
        settings.checkpointEvents = 3
        var core = try core(settings: settings)
        var checkpoints: [UInt64] = []
        for index in 1...7 {
            let persist = try #require(persisted(core.handle(.change(detail("d\(index)"), id: "i\(index)", from: ana), now: 0)))
            for case .checkpoint(let table) in core.handle(.committed(generation: persist.generation, through: UInt64(index)), now: 0) {
                checkpoints.append(table.seq)
            }
        }
        #expect(checkpoints == [3, 6])
        #expect(core.eventsSinceCheckpoint == 1)
    }

    /// A local session keeps one id window, the head's: the committed table has none of its own,
    /// and what a checkpoint saves is read from the head up to the committed seq.
    @Test func aCheckpointSavesTheCommittedChangeIdsAndNotThoseStillInFlight() throws {
        var settings = SessionCore.Settings()
        settings.checkpointEvents = 3
        var core = try core(settings: settings)
        var generation: UInt64 = 0
        for index in 1...4 {
            generation = try #require(persisted(core.handle(.change(detail("d\(index)"), id: "i\(index)", from: ana), now: 0))).generation
        }
        var saved: [Table] = []
        for case .checkpoint(let table) in core.handle(.committed(generation: generation, through: 3), now: 0) { saved.append(table) }
        let checkpoint = try #require(saved.first)
        #expect(checkpoint.seq == 3)
        #expect(checkpoint.rememberedChanges.map(\.id) == ["i1", "i2", "i3"])
        #expect(checkpoint.rememberedChanges(after: 1).map(\.seq) == [2, 3])
        #expect(checkpoint.oldestRememberedSeq == 1)
        #expect(core.committed.rememberedChanges.isEmpty)
        #expect(core.head.rememberedChanges.map(\.id) == ["i1", "i2", "i3", "i4"])
    }

    /// Changes in flight push committed ids out of the head's window; a failed commit must still
    /// give the new head the committed window whole (a retry of those ids is acknowledged with
    /// its seq), and forget the lost changes' ids (a retry of one is a new change).
    @Test func aFailedCommitGivesTheHeadTheCommittedIdWindowEvenWhenChangesInFlightHadPushedItOut() throws {
        var limits = TableLimits()
        limits.idempotencyWindow = 2
        let section = Section(key: "t", title: "T", collapsed: true)
        var core = SessionCore(
            name: "x", epoch: "e1", table: try Table(options: TableOptions(), sections: [section], seq: 0, limits: limits),
            settings: SessionCore.Settings())
        _ = core.handle(.join(ana, JoinRequest(session: "x", name: "ana"), role: nil), now: 0)
        var generation: UInt64 = 0
        for id in ["a1", "a2"] {
            generation = try #require(persisted(core.handle(.change(detail(id), id: id, from: ana), now: 0))).generation
        }
        _ = core.handle(.committed(generation: generation, through: 2), now: 0)
        for id in ["b1", "b2", "b3"] { _ = core.handle(.change(detail(id), id: id, from: ana), now: 0) }
        #expect(core.head.rememberedChanges.map(\.id) == ["b2", "b3"])
        #expect(core.committedWithChangeIds.rememberedChanges.map(\.id) == ["a1", "a2"])
        _ = core.handle(.commitFailed(generation: generation, .unavailable("disk full")), now: 0)
        #expect(core.head.seq == 2)
        #expect(core.head.rememberedChanges.map(\.id) == ["a1", "a2"])
        let retried = core.handle(.change(detail("a1"), id: "a1", from: ana), now: 0)
        #expect(persisted(retried) == nil)
        #expect(acks(retried).map(\.2) == [1])
        let lost = try #require(persisted(core.handle(.change(detail("b3"), id: "b3", from: ana), now: 0)))
        #expect(lost.events.map(\.event.seq) == [3])
    }

    @Test func aStaggeredSessionTakesItsFirstCheckpointEarlyByWhatItsNameFixesThenEveryConfiguredNumber() throws {
        var settings = SessionCore.Settings()
        settings.checkpointEvents = 10
        settings.staggersCheckpoints = true
        let stagger = LocalOrder.stagger(name: "x", checkpointEvents: 10)
        #expect(stagger < 5)
        var core = try core(settings: settings)
        var checkpoints: [UInt64] = []
        for index in 1...25 {
            let persist = try #require(persisted(core.handle(.change(detail("d\(index)"), id: "i\(index)", from: ana), now: 0)))
            for case .checkpoint(let table) in core.handle(.committed(generation: persist.generation, through: UInt64(index)), now: 0) {
                checkpoints.append(table.seq)
            }
        }
        #expect(checkpoints == [10 - stagger, 20 - stagger])
    }

    @Test func sessionsStartedTogetherSpreadTheirFirstCheckpointsOverHalfTheInterval() {
        // 1,000 sessions named as the acks benchmark names them: one group commit used to take
        // every one of their checkpoints at once.
        let staggers = (0..<1_000).map { LocalOrder.stagger(name: "bench-\($0)", checkpointEvents: 1_000) }
        #expect(staggers.allSatisfy { $0 < 500 })
        // Ten buckets of 50 events: each holds about 100; none more than twice that.
        let buckets = Dictionary(grouping: staggers) { $0 / 50 }
        #expect(buckets.count == 10)
        #expect(buckets.values.allSatisfy { $0.count < 200 })
        #expect(LocalOrder.stagger(name: "bench-1", checkpointEvents: 1_000) == staggers[1])
        #expect(LocalOrder.stagger(name: "any", checkpointEvents: 1) == 0)
    }

    @Test func aSessionRestoredFromItsLogResumesAMemberThatSawPartOfIt() throws {
        var core = try core()
        var logged: [LoggedEvent] = []
        for index in 1...4 {
            let persist = try #require(persisted(core.handle(.change(detail("d\(index)"), id: "i\(index)", from: ana), now: 0)))
            logged += persist.events
            _ = core.handle(.committed(generation: persist.generation, through: UInt64(index)), now: 0)
        }
        var restored = SessionCore(name: "x", epoch: "e1", table: core.committed, recent: logged, settings: SessionCore.Settings())
        let effects = restored.handle(.join(Connection(id: 9), JoinRequest(session: "x", name: "ana", since: 2, epoch: "e1"), role: nil), now: 0)
        let types = effects.compactMap { effect -> String? in
            guard case .send(let message, _) = effect, let value = try? JSONParser.parse(message.bytes), case .string(let type)? = value["type"]
            else { return nil }
            return type
        }
        #expect(types == ["resume", "event", "event"])
    }

    @Test func aResumePastTheExpansionOfAnEmptySectionSendsNoRows() throws {
        // The protocol article: an empty section needs no rows (every client counts 0 already).
        var core = try core()
        let persist = try #require(persisted(core.handle(.change(.toggle(section: .key("t")), id: "a1", from: ana), now: 0)))
        _ = core.handle(.committed(generation: persist.generation, through: 1), now: 0)
        let effects = core.handle(.join(Connection(id: 9), JoinRequest(session: "x", name: "cy", since: 0, epoch: "e1"), role: nil), now: 0)
        #expect(!effects.contains { if case .startStream = $0 { return true } else { return false } })
        let types = effects.compactMap { effect -> String? in
            guard case .send(let message, _) = effect, let value = try? JSONParser.parse(message.bytes), case .string(let type)? = value["type"]
            else { return nil }
            return type
        }
        #expect(types == ["resume", "event"])
    }

    @Test func aQuietSessionHasNoMembersNothingInFlightAndNoStreams() throws {
        var core = try core()
        #expect(!core.isQuiet)
        let persist = try #require(persisted(core.handle(.change(.toggle(section: .key("t")), id: "a", from: ana), now: 0)))
        _ = core.handle(.leave(ana), now: 0)
        _ = core.handle(.leave(bo), now: 0)
        #expect(!core.isQuiet)
        _ = core.handle(.committed(generation: persist.generation, through: 1), now: 0)
        #expect(core.isQuiet)
    }

    // MARK: - The busy indicator option

    func armsBusyTimer(_ effects: [SessionEffect]) -> Bool {
        effects.contains { if case .armTimer(.busy, _) = $0 { return true } else { return false } }
    }

    func startsStream(_ effects: [SessionEffect]) -> Bool {
        effects.contains { if case .startStream = $0 { return true } else { return false } }
    }

    /// The `busy` field of section `key` in the welcome among `effects`.
    func welcomeBusy(_ effects: [SessionEffect], section key: String) throws -> JSONValue? {
        for case .send(let message, _) in effects {
            let value = try JSONParser.parse(message.bytes)
            guard value["type"] == .string("welcome"), case .array(let sections)? = value["table"]?["sections"] else { continue }
            return sections.first { $0["key"] == .string(key) }?["busy"]
        }
        return nil
    }

    @Test(arguments: [0, 200])
    func aTableWithTheBusyIndicatorOffNeverSendsBusyWhateverItsThreshold(threshold: Int) throws {
        var settings = SessionCore.Settings()
        settings.chunkRows = 2  // "s" (5 rows) streams
        var options = TableOptions()
        options.showBusyIndicator = false
        options.busyThresholdMs = threshold
        var core = try core(rows: 5, collapsed: true, settings: settings, options: options)
        let expand = try toggleAndCommit(&core, "s", id: "1", from: ana)
        #expect(startsStream(expand))
        #expect(!broadcastTypes(expand).contains("busy"))
        #expect(!armsBusyTimer(expand))
        #expect(expand.contains { if case .armTimer(.streamDeadline, _) = $0 { return true } else { return false } })
        #expect(core.busySections.isEmpty)
        // A busy timer that fires anyway (armed before, stale) announces nothing.
        #expect(broadcastTypes(core.handle(.timer(.busy(section: "s", seq: 1)), now: 5_000)).isEmpty)
        // Someone joining while the rows stream is not told the section is busy either.
        let cy = Connection(id: 3)
        let joined = core.handle(.join(cy, JoinRequest(session: "x", name: "cy"), role: nil), now: 0)
        #expect(try welcomeBusy(joined, section: "s") == .bool(false))
        var done: [SessionEffect] = []
        for member in [ana, bo, cy] { done += core.handle(.streamDelivered(section: "s", seq: 1, to: member), now: 10) }
        #expect(done.contains { if case .endStream = $0 { return true } else { return false } })
        #expect(!broadcastTypes(done).contains("busy"))
    }

    @Test func turningTheBusyIndicatorOffAndOnAgainWithSetOptionsStopsAndRestartsBusy() throws {
        var settings = SessionCore.Settings()
        settings.chunkRows = 2
        var options = TableOptions()
        options.busyThresholdMs = 0  // busy at once while it is on
        var core = try core(rows: 5, collapsed: true, settings: settings, options: options)
        func setOptions(_ patch: OptionsPatch, id: String) throws {
            let persist = try #require(persisted(core.handle(.change(.setOptions(patch), id: id, from: ana), now: 0)))
            _ = core.handle(.committed(generation: persist.generation, through: core.head.seq), now: 0)
        }
        var nextMember: UInt64 = 10
        // Expands "s" while a newcomer lacks its rows (members that hold them get no stream), lets
        // the stream finish, collapses it again; the effects of the expansion and the stream.
        func expandStreamAndCollapse(id: String) throws -> [SessionEffect] {
            let newcomer = Connection(id: nextMember)
            nextMember += 1
            _ = core.handle(.join(newcomer, JoinRequest(session: "x", name: "n\(newcomer.id)"), role: nil), now: 0)
            var effects = try toggleAndCommit(&core, "s", id: id + "-open", from: ana)
            let receivers = effects.flatMap { effect -> [Connection] in
                if case .startStream(_, _, let to) = effect { return to } else { return [] }
            }
            #expect(receivers.contains(newcomer))
            for member in receivers { effects += core.handle(.streamDelivered(section: "s", seq: core.committed.seq, to: member), now: 1) }
            _ = try toggleAndCommit(&core, "s", id: id + "-close", from: ana)
            return effects
        }
        #expect(broadcastTypes(try expandStreamAndCollapse(id: "on")).filter { $0 == "busy" }.count == 2)  // true, then false
        try setOptions(OptionsPatch(showBusyIndicator: false), id: "off")
        #expect(core.committed.options.showBusyIndicator == false)
        #expect(!broadcastTypes(try expandStreamAndCollapse(id: "off")).contains("busy"))
        try setOptions(OptionsPatch(showBusyIndicator: true), id: "on-again")
        #expect(broadcastTypes(try expandStreamAndCollapse(id: "again")).filter { $0 == "busy" }.count == 2)
    }

    @Test func withTheIndicatorOnTheThresholdArmsATimerAndItsFiringShowsBusy() throws {
        var settings = SessionCore.Settings()
        settings.chunkRows = 2
        var core = try core(rows: 5, collapsed: true, settings: settings)
        let expand = try toggleAndCommit(&core, "s", id: "1", from: ana)
        #expect(
            expand.contains { effect in
                if case .armTimer(.busy(section: "s", seq: 1), milliseconds: 500) = effect { return true } else { return false }
            })
        #expect(!broadcastTypes(expand).contains("busy"))
        #expect(broadcastTypes(core.handle(.timer(.busy(section: "s", seq: 1)), now: 500)) == ["busy"])
        #expect(core.busySections == ["s"])
    }

    // MARK: - Busy before the rows

    /// Where `busy` for "s" went in `effects` (in order): its value and its recipients.
    func busyBroadcasts(_ effects: [SessionEffect]) -> [(index: Int, busy: Bool, to: [UInt64])] {
        effects.enumerated().compactMap { index, effect in
            guard case .broadcast(let message, let to) = effect, let value = try? JSONParser.parse(message.bytes),
                value["type"] == .string("busy"), value["section"] == .string("s"), case .bool(let busy)? = value["busy"]
            else { return nil }
            return (index, busy, to.map(\.id))
        }
    }

    func index(_ effects: [SessionEffect], of match: (SessionEffect) -> Bool) -> Int? { effects.firstIndex(where: match) }

    /// "s" of 5 rows (about 275 bytes), streamed in chunks of 2, on a server expecting streams to
    /// reach members at 200 bytes a second and refilling queues at `refillBytes`.
    func slowStreamCore(threshold: Int, refillBytes: Int = 100, showBusy: Bool = true) throws -> SessionCore {
        var settings = SessionCore.Settings()
        settings.chunkRows = 2
        settings.streamRefillBytes = refillBytes
        settings.streamExpectedBytesPerSec = 200
        settings.welcomeByteBudget = refillBytes  // as the hub sets it: a larger section streams
        settings.busyAwaitsPeers = true
        var options = TableOptions()
        options.busyThresholdMs = threshold
        options.showBusyIndicator = showBusy
        return try core(rows: 5, collapsed: true, settings: settings, options: options)
    }

    @Test func aStreamExpectedToOutlastTheThresholdIsBusyBeforeItsFirstChunkAndNotBusyOnlyAfterItsLastMember() throws {
        // 200 bytes a second for 500 ms: 100 bytes; the stream is bigger, so busy cannot wait.
        var core = try slowStreamCore(threshold: 500)
        let expand = try toggleAndCommit(&core, "s", id: "open", from: ana)
        let event = try #require(index(expand) { if case .broadcast = $0 { return true } else { return false } })
        let start = try #require(index(expand) { if case .startStream = $0 { return true } else { return false } })
        let busy = busyBroadcasts(expand)
        #expect(busy.map(\.busy) == [true])
        // Everyone hears it, the author and the member who asked nothing, after the event that
        // expands the section and before the driver pumps the first chunk to anyone.
        #expect(busy.first?.to == [ana.id, bo.id])
        #expect(event < (busy.first?.index ?? -1) && (busy.first?.index ?? .max) < start)
        #expect(!armsBusyTimer(expand))
        #expect(core.busySections == ["s"])
        // Busy lasts while anyone still takes rows: ana's last chunk does not end it.
        let first = core.handle(.streamDelivered(section: "s", seq: 1, to: ana), now: 10)
        #expect(busyBroadcasts(first).isEmpty)
        #expect(core.busySections == ["s"])
        // bo's last chunk was queued before this input (the driver pumps, then reports): busy
        // ends after it, for everyone, once both peers took their rows.
        let last = core.handle(.streamDelivered(section: "s", seq: 1, to: bo), now: 4_000)
        let end = try #require(index(last) { if case .endStream(section: "s") = $0 { return true } else { return false } })
        var ends = last
        for member in [ana, bo] { ends += core.handle(.streamFlushed(section: "s", seq: 1, to: member), now: 4_000) }
        #expect(busyBroadcasts(ends).map(\.busy) == [false])
        #expect(busyBroadcasts(ends).first?.to == [ana.id, bo.id])
        #expect(end < (busyBroadcasts(ends).first?.index ?? -1))
        #expect(core.busySections.isEmpty)
    }

    /// Which members the driver is asked to watch until their peers took the rows of "s".
    func awaitedFlushes(_ effects: [SessionEffect]) -> [UInt64] {
        effects.compactMap { if case .awaitFlush(section: "s", seq: _, let member) = $0 { return member.id } else { return nil } }
    }

    @Test func busyLastsUntilTheSlowestPeerTookItsRowsWhileChangesToTheSectionGoOnAlready() throws {
        var core = try slowStreamCore(threshold: 500)
        _ = try toggleAndCommit(&core, "s", id: "open", from: ana)
        #expect(awaitedFlushes(core.handle(.streamDelivered(section: "s", seq: 1, to: ana), now: 10)) == [ana.id])
        #expect(busyBroadcasts(core.handle(.streamFlushed(section: "s", seq: 1, to: ana), now: 20)).isEmpty)
        // bo's last chunk is queued, the stream is over, but its rows are still in its socket.
        let queued = core.handle(.streamDelivered(section: "s", seq: 1, to: bo), now: 30)
        #expect(awaitedFlushes(queued) == [bo.id])
        #expect(queued.contains { if case .endStream(section: "s") = $0 { return true } else { return false } })
        #expect(busyBroadcasts(queued).isEmpty)
        #expect(core.busySections == ["s"])
        // Changes to the section no longer wait: the order of rows and events is already fixed.
        let collapse = core.handle(.change(.toggle(section: .key("s")), id: "shut", from: ana), now: 40)
        #expect(persisted(collapse) != nil)
        // A stale report (another stream, or a member not waited for) changes nothing.
        #expect(busyBroadcasts(core.handle(.streamFlushed(section: "s", seq: 9, to: bo), now: 50)).isEmpty)
        #expect(busyBroadcasts(core.handle(.streamFlushed(section: "s", seq: 1, to: ana), now: 50)).isEmpty)
        #expect(core.busySections == ["s"])
        let taken = core.handle(.streamFlushed(section: "s", seq: 1, to: bo), now: 60)
        #expect(busyBroadcasts(taken).map(\.busy) == [false])
        #expect(busyBroadcasts(taken).first?.to == [ana.id, bo.id])
        #expect(core.busySections.isEmpty)
    }

    @Test func aMemberLeavingBeforeItsPeerTookItsRowsEndsTheBusyThatWaitedForIt() throws {
        var core = try slowStreamCore(threshold: 500)
        _ = try toggleAndCommit(&core, "s", id: "open", from: ana)
        for member in [ana, bo] { _ = core.handle(.streamDelivered(section: "s", seq: 1, to: member), now: 10) }
        _ = core.handle(.streamFlushed(section: "s", seq: 1, to: ana), now: 20)
        let left = core.handle(.leave(bo), now: 30)
        #expect(busyBroadcasts(left).map(\.busy) == [false])
        #expect(busyBroadcasts(left).first?.to == [ana.id])
        #expect(core.busySections.isEmpty)
    }

    @Test func aStreamThatWasNeverBusyWaitsForNoPeer() throws {
        var core = try slowStreamCore(threshold: 500, refillBytes: 1_000)  // fits one refill: timer
        _ = try toggleAndCommit(&core, "s", id: "open", from: ana)
        var effects: [SessionEffect] = []
        for member in [ana, bo] { effects += core.handle(.streamDelivered(section: "s", seq: 1, to: member), now: 10) }
        #expect(awaitedFlushes(effects).isEmpty)
        #expect(busyBroadcasts(effects).isEmpty)
        #expect(core.busySections.isEmpty)
    }

    @Test func aMemberJoiningWhileTheSectionIsExpandedIsShownBusyBeforeItsOwnStreamAndTheOthersHearNothing() throws {
        var core = try slowStreamCore(threshold: 500)
        _ = try toggleAndCommit(&core, "s", id: "open", from: ana)
        for member in [ana, bo] { _ = core.handle(.streamDelivered(section: "s", seq: 1, to: member), now: 10) }
        for member in [ana, bo] { _ = core.handle(.streamFlushed(section: "s", seq: 1, to: member), now: 10) }
        #expect(core.busySections.isEmpty)
        // The newcomer's welcome cannot carry the rows inline (it is streamed to it alone).
        let cy = Connection(id: 3)
        let joined = core.handle(.join(cy, JoinRequest(session: "x", name: "cy"), role: nil), now: 20)
        let welcome = try #require(index(joined) { if case .send = $0 { return true } else { return false } })
        let start = try #require(index(joined) { if case .startStream = $0 { return true } else { return false } })
        // Busy for the newcomer alone, between its welcome and its rows: the members who hold the
        // rows already are not told (a join must not cost a message to every member).
        #expect(busyBroadcasts(joined).isEmpty)
        let told = joined.indices.filter { index in
            guard case .send(let message, let to) = joined[index], to == cy else { return false }
            return String(decoding: message.bytes, as: UTF8.self).contains(#""busy":true"#)
        }
        #expect(told.count == 1)
        #expect(welcome < (told.first ?? -1) && (told.first ?? .max) < start)
        #expect(core.busySections.isEmpty)
        // Its end goes to it alone, right behind its last chunk.
        let done = core.handle(.streamDelivered(section: "s", seq: 1, to: cy), now: 30)
        #expect(busyBroadcasts(done).isEmpty)
        #expect(
            done.contains { effect in
                guard case .send(let message, let to) = effect, to == cy else { return false }
                return String(decoding: message.bytes, as: UTF8.self).contains(#""busy":false"#)
            })
    }

    @Test(arguments: [
        // A longer threshold: the expected pace covers the stream within it (1,000 bytes).
        (threshold: 5_000, refillBytes: 100),
        // A stream that fits one refill is handed to every member at once: it waits for no one.
        (threshold: 10, refillBytes: 1_000),
    ])
    func aStreamExpectedWithinTheThresholdWaitsForTheThresholdsTimerBeforeItIsBusy(threshold: Int, refillBytes: Int) throws {
        var core = try slowStreamCore(threshold: threshold, refillBytes: refillBytes)
        let expand = try toggleAndCommit(&core, "s", id: "open", from: ana)
        #expect(startsStream(expand))
        #expect(busyBroadcasts(expand).isEmpty)
        #expect(armsBusyTimer(expand))
        #expect(core.busySections.isEmpty)
    }

    @Test func aTableWithTheBusyIndicatorOffSendsNoBusyForAStreamExpectedToOutlastTheThreshold() throws {
        var core = try slowStreamCore(threshold: 500, showBusy: false)
        let expand = try toggleAndCommit(&core, "s", id: "open", from: ana)
        #expect(startsStream(expand))
        #expect(busyBroadcasts(expand).isEmpty)
        #expect(!armsBusyTimer(expand))
        #expect(core.busySections.isEmpty)
    }
}
