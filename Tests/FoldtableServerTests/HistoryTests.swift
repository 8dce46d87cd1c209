import FoldtableCore
import Testing

@testable import FoldtableServer

/// The `history` message through the hub: from the store's log on one node, from the events a
/// shared session keeps under a broker, and event times as orders stamp them.
@Suite struct HubHistory {
    private func integer(_ value: JSONValue?) -> Int64? {
        if case .integer(let number)? = value { return number }
        return nil
    }

    @Test func aMemberReadsTheSessionsHistoryNewestFirstWithAuthorsAndCommitTimes() throws {
        let h = Harness()
        h.join(1, name: "ana")
        h.join(2, name: "bo")
        let before = UnixClock.nowMilliseconds()
        h.say(1, #"{"type":"toggle","section":"mac","id":"a"}"#)
        h.say(2, #"{"type":"toggle","section":"ipad","id":"b"}"#)
        let after = UnixClock.nowMilliseconds()
        let live = h.transport.messages(2, type: "event")
        #expect(live.count == 2)
        h.transport.clear()
        h.say(2, #"{"type":"history","limit":1,"id":"h1"}"#)
        let first = try #require(h.transport.messages(2, type: "history").first)
        #expect(first["id"] == .string("h1"))
        #expect(first["more"] == .bool(true))
        guard case .array(let events)? = first["events"], events.count == 1 else {
            Issue.record("one event expected: \(first)")
            return
        }
        #expect(events[0]["author"]?["name"] == .string("bo"))
        #expect(events[0]["change"] == live[1]["change"])
        let time = try #require(integer(events[0]["time"]))
        // Stamped from the hub's clock, and the same time members got in the event.
        #expect(integer(live[1]["time"]) == time)
        #expect(UInt64(time) + 1_000 >= before && UInt64(time) <= after + 1_000)
        let seq = try #require(integer(events[0]["seq"]))
        h.say(2, #"{"type":"history","before":\#(seq),"id":"h2"}"#)
        let second = try #require(h.transport.messages(2, type: "history").last)
        guard case .array(let older)? = second["events"] else {
            Issue.record("no events: \(second)")
            return
        }
        #expect(older.map { $0["author"]?["name"] } == [.string("ana")])
        #expect(second["more"] == .bool(false))
    }

    @Test func historyBeforeJoiningOrWithABadLimitIsRefusedNamingWhy() {
        let h = Harness()
        h.open(1)
        h.say(1, #"{"type":"history","id":"h"}"#)
        #expect(h.transport.messages(1, type: "error").last?["code"] == .string("not_joined"))
        h.say(1, #"{"type":"join","session":"demo","name":"ana"}"#)
        h.say(1, #"{"type":"history","limit":0,"id":"h0"}"#)
        let refusal = h.transport.messages(1, type: "error").last
        #expect(refusal?["code"] == .string("invalid_value"))
        #expect(refusal?["field"] == .string("limit"))
        #expect(refusal?["id"] == .string("h0"))
    }

    @Test func aSharedSessionsHistoryIsTheEventsItKeepsWithTheStreamsTimes() throws {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        let b = cluster.start("b")
        a.join(1, name: "ana")
        b.join(1, name: "bo")
        cluster.settle()
        a.say(1, #"{"type":"toggle","section":"mac","id":"a"}"#)
        cluster.settle()
        b.say(1, #"{"type":"history","id":"h"}"#)
        cluster.settle()
        let reply = try #require(b.transport.messages(1, type: "history").first)
        guard case .array(let events)? = reply["events"] else {
            Issue.record("no events: \(reply)")
            return
        }
        #expect(events.map { $0["author"]?["name"] } == [.string("ana")])
        // The local broker's positions are plain numbers: no stream time to stamp.
        #expect(events.first?["time"] == nil)
        #expect(reply["more"] == .bool(false))
    }

    @Test func aRedisStreamPositionGivesItsMillisecondsAndAPlainNumberNone() {
        #expect(StreamPosition.milliseconds(of: "1796299384123-7") == 1_796_299_384_123)
        #expect(StreamPosition.milliseconds(of: "12") == nil)
        #expect(StreamPosition.milliseconds(of: "x-1") == nil)
        #expect(StreamPosition.milliseconds(of: "") == nil)
    }
}

/// How the local order stamps events: from the input's `now` and the hub's offset, no clock read.
@Suite struct LocalOrderTimes {
    @Test func anEventIsStampedWithItsInputsNowPlusTheOffsetAndWithoutAnOffsetNotAtAll() throws {
        let ana = Connection(id: 1)
        for offset in [Int64(1_796_000_000_000), nil] {
            var settings = SessionCore.Settings()
            settings.unixOffsetMs = offset
            var core = SessionCore(
                name: "x", epoch: "e1", table: try Table(options: TableOptions(), sections: [Section(key: "s", title: "S", collapsed: true)], seq: 0),
                settings: settings)
            _ = core.handle(.join(ana, JoinRequest(session: "x", name: "ana"), role: nil), now: 40)
            let effects = core.handle(.change(.toggle(section: .key("s")), id: "a", from: ana), now: 1_234)
            var logged: [LoggedEvent] = []
            for case .persist(let events, _) in effects { logged += events }
            #expect(logged.map(\.event.time) == [offset.map { UInt64($0) + 1_234 }])
            // The bytes members will get are the log's, time included.
            let text = logged.first?.encoded.map { String(decoding: $0, as: UTF8.self) } ?? ""
            #expect(text.contains(#""time":"#) == (offset != nil))
        }
    }
}
