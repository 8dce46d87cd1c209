import Testing

@testable import FoldtableCore

/// Events' commit time on the wire and in the log, and the history's entries and requests.
struct EventHistoryTests {
    /// A table with one section, "Mac" (key `mac`), and the event of collapsing it.
    private func toggled(time: UInt64?) throws -> (table: Table, event: TableEvent) {
        var table = Table()
        _ = try table.apply(.addSection(NewSection(key: "mac", title: "Mac", collapsed: false)), by: Author(client: "c1", name: "ana"), changeId: nil)
        let before = table
        guard case .applied(var event) = try table.apply(.toggle(section: .key("mac")), by: Author(client: "c3", name: "bo"), changeId: nil) else {
            throw ProtocolError(.invalidValue, "the toggle did not apply")
        }
        event.time = time
        return (before, event)
    }

    @Test func anEventCarriesItsCommitTimeRightAfterItsSeqAndDecodesBack() throws {
        let (_, event) = try toggled(time: 1_796_311_597_590)
        let bytes = ServerMessage.event(event)
        #expect(
            String(decoding: bytes, as: UTF8.self)
                == #"{"type":"event","seq":2,"time":1796311597590,"by":{"client":"c3","name":"bo"},"change":{"type":"toggle","section":"mac"},"collapsed":{"mac":true}}"#
        )
        let decoded = try ServerMessage.decodeEvent(try JSONParser.parse(bytes))
        #expect(decoded == event)
        #expect(decoded.time == 1_796_311_597_590)
    }

    @Test func anEventWithoutATimeIsWrittenAndReadAsBefore() throws {
        let (_, event) = try toggled(time: nil)
        let text = String(decoding: ServerMessage.event(event), as: UTF8.self)
        #expect(
            text == #"{"type":"event","seq":2,"by":{"client":"c3","name":"bo"},"change":{"type":"toggle","section":"mac"},"collapsed":{"mac":true}}"#)
        #expect(try ServerMessage.decodeEvent(try JSONParser.parse(Array(text.utf8))).time == nil)
    }

    @Test func aNegativeTimeIsRefused() {
        let text = #"{"type":"event","seq":2,"time":-1,"by":{"client":"c3","name":"bo"},"change":{"type":"toggle","section":"mac"},"collapsed":{}}"#
        #expect(throws: ProtocolError.self) { try ServerMessage.decodeEvent(try JSONParser.parse(Array(text.utf8))) }
    }

    @Test func theTimeKeepsItsMillisecondsAndOnePastTheYear2106IsNotKept() throws {
        var (_, event) = try toggled(time: 999)
        #expect(event.time == 999)
        event.time = 4_294_967_295_999
        #expect(event.time == 4_294_967_295_999)
        event.time = 4_294_967_296_000
        #expect(event.time == nil)
        event.time = 0
        #expect(event.time == 0)
    }

    @Test func aReplicaAcceptsATimedEventItReproducesWithoutATime() throws {
        let (table, event) = try toggled(time: 1_796_311_597_590)
        var replayed = table
        try replayed.replay(event)
        var committed = table
        try committed.applyCommitted(event)
        #expect(replayed.sections[0].collapsed && committed.sections[0].collapsed)
        // The time aside, the event must still be the one the replica produces.
        var other = event
        other.collapsed = [CollapseEffect(key: "mac", collapsed: false)]
        var refused = table
        #expect(throws: ProtocolError.self) { try refused.replay(other) }
    }

    @Test func aHistoryEntryNamesItsAuthorTimeChangeAndCollapsedMap() throws {
        let (_, event) = try toggled(time: 1_796_311_597_590)
        var out = JSONWriter()
        EventHistory.encode(event, into: &out)
        #expect(
            String(decoding: out.bytes, as: UTF8.self)
                == #"{"seq":2,"time":1796311597590,"author":{"client":"c3","name":"bo"},"change":{"type":"toggle","section":"mac"},"collapsed":{"mac":true}}"#
        )
        #expect(try EventHistory.decodeEntry(try JSONParser.parse(out.bytes)) == event)
    }

    @Test func aPageSaysWhetherOlderEventsAreKept() throws {
        let (_, event) = try toggled(time: nil)
        let message = String(decoding: EventHistory.message(id: "h1", events: [event], more: true), as: UTF8.self)
        #expect(message.hasPrefix(#"{"type":"history","id":"h1","events":[{"seq":2,"author""#))
        #expect(message.hasSuffix(#"],"more":true}"#))
        #expect(String(decoding: EventHistory.page(events: [event], more: true), as: UTF8.self).hasSuffix(#"],"next":2}"#))
        #expect(String(decoding: EventHistory.page(events: [event], more: false), as: UTF8.self).hasSuffix(#"],"next":null}"#))
        #expect(String(decoding: EventHistory.page(events: [], more: false), as: UTF8.self) == #"{"events":[],"next":null}"#)
        let page = try EventHistory.decodePage(try JSONParser.parse(EventHistory.page(events: [event], more: true)))
        #expect(page.events == [event])
        #expect(page.more)
    }

    @Test func aHistoryRequestsLimitAndBeforeAreChecked() throws {
        let defaults = try EventHistory.checked(before: nil, limit: nil)
        #expect(defaults.before == nil && defaults.limit == 50)
        let given = try EventHistory.checked(before: 7, limit: 200)
        #expect(given.before == 7 && given.limit == 200)
        for (before, limit, field) in [(nil, 0, "limit"), (nil, 201, "limit"), (0, 10, "before"), (-3, 10, "before")] as [(Int64?, Int64, String)] {
            #expect {
                _ = try EventHistory.checked(before: before, limit: limit)
            } throws: { error in
                (error as? ProtocolError)?.field == field
            }
        }
        let (result, id) = ClientMessage.decode(Array(#"{"type":"history","limit":500,"id":"h9"}"#.utf8))
        #expect(id == "h9")
        #expect(throws: ProtocolError.self) { try result.get() }
    }
}
