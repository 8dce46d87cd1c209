import FoldtableCore
import Testing

@testable import FoldtableClient

@Suite struct TableScreenTests {
    func replica(busy: Set<String> = ["big"]) throws -> SessionReplica {
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(try Wire.smallTable(), busy: busy))
        return replica
    }

    func render(
        _ replica: SessionReplica, width: Int = 40, height: Int = 12, color: Bool = false, selection: TableLayout.Target? = .section("big"),
        scrollTop: Int = 0, status: TableScreen.Status = .init(connection: "connected", healthy: true, message: "bo collapsed Mac")
    ) -> [String] {
        TableScreen(width: width, height: height, color: color).render(
            replica, layout: TableLayout(replica), selection: selection, scrollTop: scrollTop, status: status, spinnerFrame: 3)
    }

    @Test func aFortyColumnRenderWithoutColourShowsIndicatorsDetailCountsAndTheSpinner() throws {
        #expect(
            render(try replica()) == [
                "  − Mac                      2 models  2",
                "      MacBook Air  13-inch            M3",
                "      iMac                            M4",
                "      Desktops                          ",
                "› + Inventory               ⠸ 9 items  9",
                "  + Province                 3 cities  3",
                "    Sichuan                             ",
                "  − Empty                              0",
                "      no rows                           ",
                "                                        ",
                " bo collapsed Mac                       ",
                " ● connected  demo  1 here: ana         ",
            ])
    }

    @Test func everyLineIsExactlyTheScreenWidthAtAnySize() throws {
        let replica = try replica()
        for width in [1, 5, 12, 30, 81] {
            for line in render(replica, width: width, height: 9) {
                #expect(DisplayText.width(line) == width, "\(width): \(line)")
            }
        }
    }

    @Test func narrowScreensDropTheDetailBeforeCuttingTheTitle() throws {
        let lines = render(try replica(busy: []), width: 16, height: 8)
        #expect(lines[0] == "  − Mac        2")
        #expect(lines[4] == "› + Inventory  9")
        #expect(lines[1] == "      MacBoo… M3")
    }

    @Test func colourMarksTheSelectionInReverseVideoAndNoColourPrintsNoEscapes() throws {
        let replica = try replica()
        let plain = render(replica).joined()
        #expect(!plain.contains("\u{1B}"))
        let coloured = render(replica, color: true)
        #expect(coloured[4].hasPrefix("\u{1B}[7m› "))
        #expect(coloured[4].contains("\u{1B}[33m⠸ \u{1B}[39m"))
        #expect(coloured[0].contains("\u{1B}[1mMac\u{1B}[22m"))
    }

    @Test func textFromTheServerCannotReachTheTerminalAsControlCharacters() throws {
        var table = try Wire.smallTable()
        _ = try table.apply(
            .updateSection(section: .key("mac"), patch: SectionPatch(title: "Mac\u{1B}]0;pwned\u{07}", detail: .some("\u{9B}2J"))), by: Wire.bo)
        _ = try table.apply(.updateRow(row: "m1", patch: RowPatch(value: "\u{202E}evil")), by: Wire.bo)
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table))
        let screen = render(replica, width: 60).joined()
        #expect(!screen.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) || $0 == "\u{202E}" })
        #expect(screen.contains("Mac?]0;pwned?"))
    }

    @Test func widthCountsWideCharactersTwiceAndCombiningMarksNotAtAll() {
        #expect(DisplayText.width("广东") == 4)
        #expect(DisplayText.width("e\u{301}") == 1)
        #expect(DisplayText.width("👍🏽") == 2)
        #expect(DisplayText.truncate("广东省广州市", to: 5) == "广东…")
        #expect(DisplayText.fit("ab", to: 4) == "ab  ")
    }

    @Test func scrollingKeepsTheSelectionOnScreenAndStopsAtTheEnd() throws {
        let replica = try replica()
        let layout = TableLayout(replica)
        let screen = TableScreen(width: 40, height: 5, color: false)  // three body lines
        #expect(screen.scroll(0, toShow: .section("mac"), in: layout) == 0)
        #expect(screen.scroll(0, toShow: .section("prov"), in: layout) == 4)  // both title lines
        #expect(screen.scroll(6, toShow: .row("m1"), in: layout) == 1)
        #expect(screen.scroll(99, toShow: nil, in: layout) == layout.lineCount - 3)
    }

    @Test func theCursorMovesBetweenHeadersAndRowsAndSkipsFootersAndNotices() throws {
        let layout = TableLayout(try replica())
        #expect(layout.first == .section("mac"))
        #expect(layout.target(1, from: .section("mac")) == .row("m1"))
        #expect(layout.target(2, from: .row("m1")) == .section("big"))
        #expect(layout.target(-9, from: .section("big")) == .section("mac"))
        #expect(layout.target(9, from: .section("big")) == .section("empty"))
        #expect(layout.height(of: .section("prov")) == 2)
        #expect(layout.target(atOrAfterLine: 3) == .section("big"))
        #expect(layout.last == .section("empty"))
    }

    @Test func aSectionStillLoadingSaysHowManyRowsArrived() throws {
        var table = try Wire.smallTable()
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table))
        replica.apply(try Wire.event(&table, .toggle(section: .key("big"))))
        replica.apply(try Wire.rows(table, section: "big", seq: 1, chunkRows: 4)[0])
        let lines = render(replica, height: 14, selection: .row("b0"))
        #expect(lines[5] == "›     Item 0                           0")
        #expect(lines[9] == "      loading rows… 4 of 9              ")
    }

    @Test func thePromptShowsTheEndOfWhatIsTyped() throws {
        let status = TableScreen.Status(connection: "connected", healthy: true, prompt: "/" + String(repeating: "x", count: 50) + "end")
        let lines = render(try replica(), status: status)
        #expect(lines[10].hasSuffix("xxxend█"))
        #expect(lines[10].hasPrefix("…"))
    }

    @Test func titleLinesShowsAtMostThatManyLinesOfATitleEndingInAnEllipsis() throws {
        var table = try Wire.smallTable()
        _ = try table.apply(.updateSection(section: .key("big"), patch: SectionPatch(title: "Inventory\nof the\nwarehouse")), by: Wire.bo)
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table, busy: []))
        #expect(TableLayout(replica).height(of: .section("big")) == 3)
        replica.apply(try Wire.event(&table, .setOptions(OptionsPatch(titleLines: 1))))
        #expect(replica.options.titleLines == 1)
        let layout = TableLayout(replica)
        #expect(layout.height(of: .section("prov")) == 1)
        #expect(layout.height(of: .section("big")) == 1)
        #expect(layout.height(of: .section("mac")) == 1)
        let lines = render(replica)
        #expect(lines[4] == "› + Inventory…                9 items  9")
        #expect(lines[5] == "  + Province…                3 cities  3")
        #expect(lines[6] == "  − Empty                              0")
        replica.apply(try Wire.event(&table, .setOptions(OptionsPatch(titleLines: 2))))
        #expect(
            render(replica)[4...6] == [
                "› + Inventory                 9 items  9", "    of the…                             ", "  + Province                 3 cities  3",
            ])
        #expect(TableLayout(replica).height(of: .section("prov")) == 2)  // fits: no ellipsis
        replica.apply(try Wire.event(&table, .setOptions(OptionsPatch(titleLines: 0))))
        #expect(TableLayout(replica).height(of: .section("big")) == 3)
    }

    @Test func noSpinnerShowsWhenTheTableTurnedTheBusyIndicatorOff() throws {
        var table = try Wire.smallTable()
        var options = TableOptions()
        options.showBusyIndicator = false
        _ = try table.apply(.setOptions(OptionsPatch(showBusyIndicator: false)), by: Wire.bo)
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table, busy: ["big"]))
        #expect(replica.options == options)
        #expect(render(replica)[4] == "› + Inventory                 9 items  9")
    }
}
