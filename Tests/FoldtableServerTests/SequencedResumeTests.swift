import FoldtableCore
import Testing

@testable import FoldtableServer

/// Resume (`since`/epoch) of a stream-ordered session on a node other than the one the member
/// left: the snapshot carries the history before it, and a join from a `since` the node has not
/// applied yet waits for its stream.
@Suite struct SequencedResume {
    let ana = Connection(id: 1)
    let bo = Connection(id: 2)

    func settings(history: Int = 300, checkpoint: Int = 5) -> SessionCore.Settings {
        var settings = SessionCore.Settings()
        settings.presenceIntervalMs = 0
        settings.historyEvents = history
        settings.checkpointEvents = checkpoint
        return settings
    }

    func table() throws -> Table {
        let sections = [
            Section(key: "s", title: "S", collapsed: true, rows: (0..<3).map { Row(key: "r\($0)", label: "row \($0)", value: "") }),
            Section(key: "t", title: "T", collapsed: true),
        ]
        return try Table(options: TableOptions(), sections: sections, seq: 0)
    }

    func appended(_ effects: [SessionEffect]) -> [SequencedRequest] {
        effects.compactMap { if case .append(let request) = $0 { return request } else { return nil } }
    }

    func positioned(_ requests: [SequencedRequest], from start: Int) -> [SequencedRequest] {
        requests.enumerated().map { index, request in
            var entry = request
            entry.position = "\(start + index)-0"
            return entry
        }
    }

    /// The messages sent to `connection` alone, as bytes.
    func sent(_ effects: [SessionEffect], to connection: Connection) -> [[UInt8]] {
        effects.compactMap { if case .send(let message, let to) = $0, to == connection { return message.bytes } else { return nil } }
    }

    func type(_ bytes: [UInt8]) -> String? {
        guard let value = try? JSONParser.parse(bytes), case .string(let type)? = value["type"] else { return nil }
        return type
    }

    /// The event messages broadcast, as bytes.
    func broadcastEvents(_ effects: [SessionEffect]) -> [[UInt8]] {
        effects.compactMap { effect -> [UInt8]? in
            guard case .broadcast(let message, _) = effect, type(message.bytes) == "event" else { return nil }
            return message.bytes
        }
    }

    /// Node a: `count` toggles by ana, applied in stream order. Returns the stream, every event as
    /// broadcast, and the last snapshot asked for.
    func nodeA(count: Int, settings: SessionCore.Settings) throws -> (
        a: SessionCore, stream: [SequencedRequest], events: [[UInt8]], snapshot: (table: Table, position: String, history: [HistoryEntry])?
    ) {
        var a = SessionCore(name: "x", epoch: "e1", table: try table(), settings: settings, order: StreamOrder(node: "a"))
        _ = a.handle(.join(ana, JoinRequest(session: "x", name: "ana"), role: nil), now: 0)
        var requests: [SequencedRequest] = []
        for index in 0..<count {
            requests += appended(a.handle(.change(.toggle(section: .key(index % 3 == 0 ? "s" : "t")), id: "a\(index)", from: ana), now: 0))
        }
        let stream = positioned(requests, from: 1)
        var events: [[UInt8]] = []
        var snapshot: (Table, String, [HistoryEntry])?
        for request in stream {
            let effects = a.handle(.sequenced([request]), now: 0)
            events += broadcastEvents(effects)
            for case .snapshot(let table, let position, let history) in effects { snapshot = (table, position, history) }
            // Rows of "s" stream to ana when it opens; she takes them at once.
            for case .startStream(let section, let seq, _) in effects {
                _ = a.handle(.streamDelivered(section: section.key, seq: seq, to: ana), now: 0)
            }
        }
        return (a, stream, events, snapshot)
    }

    /// Node b opens the session from `snapshot` (as a broker returns it) and applies the stream after it.
    func nodeB(
        from snapshot: (table: Table, position: String, history: [HistoryEntry]), stream: [SequencedRequest], settings: SessionCore.Settings
    ) -> SessionCore {
        var b = SessionCore(
            name: "x", epoch: "e1", table: snapshot.table, history: snapshot.history, settings: settings, order: StreamOrder(node: "b"))
        let after = stream.filter { $0.position > snapshot.position }
        _ = b.handle(.sequenced(after), now: 0)
        return b
    }

    @Test func aSnapshotCarriesTheHistoryEndingAtItsSeq() throws {
        let (_, _, events, snapshot) = try nodeA(count: 12, settings: settings(history: 4, checkpoint: 5))
        let saved = try #require(snapshot)
        #expect(saved.table.seq == 10 && saved.position == "10-0")
        #expect(saved.history.map(\.seq) == [7, 8, 9, 10])
        // Byte for byte what members received.
        #expect(saved.history.map(\.message) == Array(events[6..<10]))
        // Each toggle opens or closes its section: the opening ones name it.
        #expect(saved.history.first { $0.seq == 7 }?.expanded == ["s"])
        #expect(saved.history.first { $0.seq == 8 }?.expanded == ["t"])
        #expect(saved.history.first { $0.seq == 9 }?.expanded == [])
    }

    @Test func aNodeOpenedFromASnapshotResumesASinceFromBeforeItsOpen() throws {
        let settings = settings(history: 300, checkpoint: 5)
        let (a, stream, events, snapshot) = try nodeA(count: 12, settings: settings)
        var b = nodeB(from: try #require(snapshot), stream: stream, settings: settings)
        #expect(b.committed.seq == 12 && a.committed.seq == 12)

        // Ana saw seq 3 on node a, dropped, and resumes on node b, which opened at seq 10.
        let effects = b.handle(.join(bo, JoinRequest(session: "x", name: "ana", since: 3, epoch: "e1"), role: nil), now: 0)
        let messages = sent(effects, to: bo)
        #expect(messages.first.flatMap(type) == "resume")
        #expect(Array(messages.dropFirst().filter { type($0) == "event" }) == Array(events[3...]))
    }

    @Test func aSinceBeyondTheSavedHistoryGetsAFreshWelcome() throws {
        let settings = settings(history: 4, checkpoint: 5)
        let (_, stream, _, snapshot) = try nodeA(count: 12, settings: settings)
        var b = nodeB(from: try #require(snapshot), stream: stream, settings: settings)
        // History holds 9...12 (4 events): since 8 reaches back, since 7 does not.
        let within = b.handle(.join(bo, JoinRequest(session: "x", name: "ana", since: 8, epoch: "e1"), role: nil), now: 0)
        #expect(sent(within, to: bo).first.flatMap(type) == "resume")
        let beyond = b.handle(.join(Connection(id: 3), JoinRequest(session: "x", name: "cy", since: 7, epoch: "e1"), role: nil), now: 0)
        #expect(sent(beyond, to: Connection(id: 3)).first.flatMap(type) == "welcome")
    }

    @Test func aHistoryThatDoesNotEndAtTheSnapshotsSeqIsNotUsed() throws {
        let settings = settings(history: 300, checkpoint: 5)
        let (_, stream, _, snapshot) = try nodeA(count: 12, settings: settings)
        var saved = try #require(snapshot)
        // A history one event short of the table (seq 10) would make a resume skip event 10.
        saved.history.removeLast()
        var b = nodeB(from: saved, stream: stream, settings: settings)
        let effects = b.handle(.join(bo, JoinRequest(session: "x", name: "ana", since: 9, epoch: "e1"), role: nil), now: 0)
        #expect(sent(effects, to: bo).first.flatMap(type) == "welcome")
        // Events applied after the open are history all the same.
        let after = b.handle(.join(Connection(id: 3), JoinRequest(session: "x", name: "cy", since: 10, epoch: "e1"), role: nil), now: 0)
        #expect(sent(after, to: Connection(id: 3)).first.flatMap(type) == "resume")
    }

    @Test func aResumeFromASinceThisNodeHasNotAppliedYetWaitsForItAndKeepsTheChangesSentMeanwhile() throws {
        let settings = settings(history: 300, checkpoint: 1_000)
        let (_, stream, events, _) = try nodeA(count: 8, settings: settings)
        var b = SessionCore(name: "x", epoch: "e1", table: try table(), settings: settings, order: StreamOrder(node: "b"))
        _ = b.handle(.sequenced(Array(stream[..<5])), now: 0)

        // Ana saw seq 7 on node a; node b's reader is at 5.
        var effects = b.handle(.join(bo, JoinRequest(session: "x", name: "ana", since: 7, epoch: "e1"), role: nil), now: 0)
        #expect(sent(effects, to: bo).isEmpty)
        #expect(b.memberCount == 0 && !b.isQuiet)
        // She retries a change before her resume came: it is kept, not dropped.
        effects = b.handle(.change(.toggle(section: .key("t")), id: "retry", from: bo), now: 0)
        #expect(appended(effects).isEmpty)
        // One entry more is not enough.
        effects = b.handle(.sequenced([stream[5]]), now: 0)
        #expect(sent(effects, to: bo).isEmpty)
        effects = b.handle(.sequenced(Array(stream[6...])), now: 0)
        let messages = sent(effects, to: bo)
        #expect(messages.first.flatMap(type) == "resume")
        // Since 7: she missed event 8 only.
        #expect(Array(messages.dropFirst().filter { type($0) == "event" }) == [events[7]])
        #expect(b.memberCount == 1)
        #expect(appended(effects).map(\.id) == ["retry"])
        #expect(appended(effects).first?.author.client == "b.c2")
    }

    @Test func aResumeFromASinceNobodyReachedGetsAFreshWelcomeAfterTwoReadsToTheStreamsEnd() throws {
        var b = SessionCore(name: "x", epoch: "e1", table: try table(), settings: settings(), order: StreamOrder(node: "b"))
        var effects = b.handle(.join(bo, JoinRequest(session: "x", name: "ana", since: 100, epoch: "e1"), role: nil), now: 0)
        #expect(sent(effects, to: bo).isEmpty)
        // The first read may have begun before the join.
        effects = b.handle(.caughtUp(through: "9-0"), now: 0)
        #expect(sent(effects, to: bo).isEmpty)
        effects = b.handle(.caughtUp(through: "9-0"), now: 0)
        #expect(sent(effects, to: bo).first.flatMap(type) == "welcome")
        #expect(b.memberCount == 1)
    }

    @Test func aWaitingJoinWhoseMemberLeavesIsForgotten() throws {
        var b = SessionCore(name: "x", epoch: "e1", table: try table(), settings: settings(), order: StreamOrder(node: "b"))
        _ = b.handle(.join(bo, JoinRequest(session: "x", name: "ana", since: 100, epoch: "e1"), role: nil), now: 0)
        _ = b.handle(.leave(bo), now: 0)
        #expect(b.isQuiet)
        _ = b.handle(.caughtUp(through: "9-0"), now: 0)
        let effects = b.handle(.caughtUp(through: "9-0"), now: 0)
        #expect(sent(effects, to: bo).isEmpty)
        #expect(b.memberCount == 0)
    }

    @Test func aSinceOfAnotherEpochIsWelcomedAtOnce() throws {
        var b = SessionCore(name: "x", epoch: "e1", table: try table(), settings: settings(), order: StreamOrder(node: "b"))
        let effects = b.handle(.join(bo, JoinRequest(session: "x", name: "ana", since: 100, epoch: "e0"), role: nil), now: 0)
        #expect(sent(effects, to: bo).first.flatMap(type) == "welcome")
    }
}
