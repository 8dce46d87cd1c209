import FoldtableCore
import Testing

@testable import FoldtableClient

/// `foldtable history` on the command line, and history lines as people read them.
struct HistoryCommandTests {
    let url = "ws://127.0.0.1:8080/ws"
    let options = ConnectOptions(url: ServerURL(tls: false, host: "127.0.0.1", port: 8080, path: "/ws"), session: "demo", name: "ana")

    @Test func historyParsesWithItsLimitAndRefusesOneOutOfRange() throws {
        #expect(try Arguments.parse(["history", url, "demo"], environment: ["USER": "ana"]) == .history(options, limit: 50))
        var json = options
        json.json = true
        #expect(
            try Arguments.parse(["history", url, "demo", "--limit", "200", "--json"], environment: ["USER": "ana"]) == .history(json, limit: 200))
        for bad in ["0", "201", "x"] {
            #expect(throws: UsageError("--limit must be a number from 1 to 200, not \"\(bad)\"")) {
                try Arguments.parse(["history", url, "demo", "--limit", bad], environment: ["USER": "ana"])
            }
        }
        #expect(throws: UsageError("history needs a URL and a session name")) { try Arguments.parse(["history", url], environment: [:]) }
    }

    private func event(_ change: Change, collapsed: CollapseEffects = [], time: UInt64? = 1_796_299_384_000, from: RowOrigin? = nil) -> TableEvent {
        TableEvent(seq: 4, author: Author(client: "c2", name: "ana"), changeId: nil, change: change, collapsed: collapsed, from: from, time: time)
    }

    @Test func aLineSaysWhenWhoAndWhatWithSectionTitles() {
        let titles = ["mac": "Mac", "ipad": "iPad"]
        // 1796299384 s is 12:03:04 UTC.
        #expect(
            HistoryText.line(
                event(.toggle(section: .key("mac")), collapsed: [CollapseEffect(key: "mac", collapsed: true)]), titles: titles,
                timeZoneOffsetSeconds: 0)
                == "12:03:04 ana collapsed Mac")
        #expect(
            HistoryText.line(
                event(.setCollapsed(section: .key("ipad"), collapsed: false), collapsed: [CollapseEffect(key: "ipad", collapsed: false)]),
                titles: titles, timeZoneOffsetSeconds: 3_600)
                == "13:03:04 ana expanded iPad")
        #expect(HistoryText.line(event(.setAll(collapsed: true), time: nil), titles: titles) == "--:--:-- ana collapsed every section")
        #expect(
            HistoryText.description(event(.addRow(section: .key("mac"), row: NewRow(label: "Mac\nmini"))), titles: titles)
                == "added row Mac mini to Mac")
        #expect(
            HistoryText.description(
                event(.removeRow(row: "r1"), from: RowOrigin(section: "ipad", index: 0, row: Row(key: "r1", label: "Air", value: ""))), titles: titles
            )
                == "removed row Air from iPad")
        #expect(HistoryText.description(event(.toggle(section: .key("gone"))), titles: titles) == "changed nothing")
        // A section title holding an escape sequence cannot reach the terminal as one.
        #expect(HistoryText.description(event(.addSection(NewSection(title: "x\u{1B}[2J"))), titles: [:]) == "added section x?[2J")
    }

    @Test func theServersHistoryReplyDecodesToItsEventsNewestFirst() throws {
        let newer = event(.setAll(collapsed: true))
        var older = event(.toggle(section: .key("mac")), collapsed: [CollapseEffect(key: "mac", collapsed: false)], time: nil)
        older.seq = 3
        let bytes = EventHistory.message(id: "t-history-1", events: [newer, older], more: false)
        #expect(try ServerUpdate.decode(bytes) == .history(id: "t-history-1", events: [newer, older], more: false))
        #expect(throws: ProtocolError.self) { try ServerUpdate.decode(Array(#"{"type":"history","events":[{"seq":0}],"more":false}"#.utf8)) }
    }
}
