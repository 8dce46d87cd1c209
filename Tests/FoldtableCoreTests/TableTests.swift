import Testing

@testable import FoldtableCore

let ana = Author(client: "c1", name: "ana")

/// A small table: a (expanded, rows a1 a2), b (collapsed, row b1), c (expanded, empty).
func sampleTable(options: TableOptions = TableOptions()) throws -> Table {
    try Table(
        options: options,
        sections: [
            Section(key: "a", title: "Alpha", rows: [Row(key: "a1", label: "one"), Row(key: "a2", label: "two")]),
            Section(key: "b", title: "Beta", collapsed: true, rows: [Row(key: "b1", label: "three")]),
            Section(key: "c", title: "Gamma"),
        ], seq: 0)
}

@discardableResult
func apply(_ table: inout Table, _ change: Change, id: String? = nil) throws -> TableEvent {
    try #require(try table.apply(change, by: ana, changeId: id).appliedEvent)
}

func expectError(_ code: ProtocolError.Code, field: String? = nil, _ body: () throws -> Void) {
    do {
        try body()
        Issue.record("expected \(code)")
    } catch let error as ProtocolError {
        #expect(error.code == code)
        if let field { #expect(error.field == field) }
    } catch {
        Issue.record("unexpected \(error)")
    }
}

@Suite struct CollapseChanges {
    @Test func toggleFlipsOneSectionAndReportsIt() throws {
        var table = try sampleTable()
        let event = try apply(&table, .toggle(section: .key("a")))
        #expect(event.seq == 1)
        #expect(event.collapsed == [CollapseEffect(key: "a", collapsed: true)])
        #expect(table.section("a")?.collapsed == true)
        #expect(event.change == .toggle(section: .key("a")))
    }

    @Test func toggleByTitleResolvesToTheKey() throws {
        var table = try sampleTable()
        let event = try apply(&table, .toggle(section: .title("Beta")))
        #expect(event.change == .toggle(section: .key("b")))
        #expect(event.collapsed == [CollapseEffect(key: "b", collapsed: false)])
    }

    @Test func unknownTitleIsUnknownSection() throws {
        var table = try sampleTable()
        expectError(.unknownSection, field: "title") { try apply(&table, .toggle(section: .title("Nope"))) }
        #expect(table.seq == 0)
    }

    @Test func repeatedTitleIsAmbiguous() throws {
        var table = try sampleTable()
        try apply(&table, .addSection(NewSection(title: "Alpha")))
        expectError(.ambiguousTitle, field: "title") { try apply(&table, .toggle(section: .title("Alpha"))) }
    }

    @Test func unknownKeyIsUnknownSection() throws {
        var table = try sampleTable()
        expectError(.unknownSection, field: "section") { try apply(&table, .setCollapsed(section: .key("zz"), collapsed: true)) }
    }

    @Test func setToTheCurrentStateChangesNothingButStillOrders() throws {
        var table = try sampleTable()
        let event = try apply(&table, .setCollapsed(section: .key("b"), collapsed: true))
        #expect(event.collapsed.isEmpty)
        #expect(event.seq == 1)
    }

    @Test func setAllReportsEverySectionThatChanged() throws {
        var table = try sampleTable()
        let collapse = try apply(&table, .setAll(collapsed: true))
        #expect(collapse.collapsed == [CollapseEffect(key: "a", collapsed: true), CollapseEffect(key: "c", collapsed: true)])
        let expand = try apply(&table, .setAll(collapsed: false))
        #expect(expand.collapsed.map(\.key) == ["a", "b", "c"])
        #expect(table.sections.allSatisfy { !$0.collapsed })
    }

    @Test func revealExpandsTheCollapsedSectionOfTheRow() throws {
        var table = try sampleTable()
        let event = try apply(&table, .reveal(row: "b1"))
        #expect(event.collapsed == [CollapseEffect(key: "b", collapsed: false)])
        let again = try apply(&table, .reveal(row: "b1"))
        #expect(again.collapsed.isEmpty)
    }

    @Test func revealOfAnUnknownRowIsRefused() throws {
        var table = try sampleTable()
        expectError(.unknownRow, field: "row") { try apply(&table, .reveal(row: "nope")) }
    }
}

/// An event's effects: the first inline, the rest in an array, read like one array.
@Suite struct CollapseEffectsCollection {
    let a = CollapseEffect(key: "a", collapsed: true)
    let b = CollapseEffect(key: "b", collapsed: false)
    let c = CollapseEffect(key: "c", collapsed: true)

    @Test func holdsNoneOneOrManyInOrderAndEqualsTheSameEffectsHoweverBuilt() {
        var built = CollapseEffects()
        #expect(built.isEmpty && built.count == 0 && Array(built) == [])
        built.append(a)
        #expect(built.count == 1 && built.first == a && built == CollapseEffects(a))
        built.append(b)
        built.append(c)
        #expect(Array(built) == [a, b, c])
        #expect(built.map(\.key) == ["a", "b", "c"])
        #expect(built[2] == c && built.last == c)
        #expect(built == [a, b, c])
        #expect(built == CollapseEffects([a, b, c]))
        #expect(built != [a, c, b])
        #expect(built != [a, b])
        #expect(CollapseEffects() == [])
    }

    @Test func aToggleAndAnAccordionExpansionReportTheirEffectsInTableOrder() throws {
        var table = try sampleTable()
        let toggle = try apply(&table, .toggle(section: .key("b")))
        #expect(Array(toggle.collapsed) == [CollapseEffect(key: "b", collapsed: false)])
        let accordion = try apply(&table, .setOptions(OptionsPatch(accordion: true)))
        #expect(Array(accordion.collapsed) == [CollapseEffect(key: "b", collapsed: true), CollapseEffect(key: "c", collapsed: true)])
        let collapseAll = try apply(&table, .setAll(collapsed: true))
        #expect(Array(collapseAll.collapsed) == [CollapseEffect(key: "a", collapsed: true)])
        let nothing = try apply(&table, .setAll(collapsed: true))
        #expect(nothing.collapsed.isEmpty)
    }
}

@Suite struct Accordion {
    func accordionTable() throws -> Table {
        var options = TableOptions()
        options.accordion = true
        return try Table(
            options: options,
            sections: [
                Section(key: "a", title: "A"), Section(key: "b", title: "B", collapsed: true), Section(key: "c", title: "C", collapsed: true),
            ], seq: 0)
    }

    @Test func expandingOneCollapsesTheOthersInTableOrder() throws {
        var table = try accordionTable()
        let event = try apply(&table, .toggle(section: .key("c")))
        #expect(event.collapsed == [CollapseEffect(key: "a", collapsed: true), CollapseEffect(key: "c", collapsed: false)])
        #expect(table.sections.filter { !$0.collapsed }.map(\.key) == ["c"])
    }

    @Test func revealInAccordionModeCollapsesTheOthers() throws {
        var table = try accordionTable()
        try apply(&table, .addRow(section: .key("b"), row: NewRow(key: "x", label: "x")))
        let event = try apply(&table, .reveal(row: "x"))
        #expect(event.collapsed == [CollapseEffect(key: "a", collapsed: true), CollapseEffect(key: "b", collapsed: false)])
    }

    @Test func expandAllIsRefusedInAccordionMode() throws {
        var table = try accordionTable()
        expectError(.invalidValue, field: "collapsed") { try apply(&table, .setAll(collapsed: false)) }
    }

    @Test func turningAccordionOnKeepsTheFirstExpandedSection() throws {
        var table = try sampleTable()
        let event = try apply(&table, .setOptions(OptionsPatch(accordion: true)))
        #expect(event.collapsed == [CollapseEffect(key: "c", collapsed: true)])
        #expect(table.options.accordion)
    }

    @Test func addingAnExpandedSectionCollapsesTheOthers() throws {
        var table = try accordionTable()
        let event = try apply(&table, .addSection(NewSection(title: "D", collapsed: false)))
        #expect(event.collapsed == [CollapseEffect(key: "a", collapsed: true)])
    }
}

@Suite struct StructuralChanges {
    @Test func addedSectionsGetKeysFromTheSequence() throws {
        var table = try sampleTable()
        let event = try apply(&table, .addSection(NewSection(title: "New", index: 1)))
        #expect(event.change == .addSection(NewSection(key: "s1", title: "New", collapsed: false, index: 1)))
        #expect(table.sections.map(\.key) == ["a", "s1", "b", "c"])
    }

    @Test func allocatedKeyAvoidsAKeyAClientTook() throws {
        var table = try sampleTable()
        try apply(&table, .addSection(NewSection(key: "s2", title: "Taken")))
        let event = try apply(&table, .addSection(NewSection(title: "Next")))
        guard case .addSection(let new) = event.change else {
            Issue.record("wrong change")
            return
        }
        #expect(new.key == "s2-1")
    }

    @Test func sectionsInitiallyCollapsedAppliesToNewSections() throws {
        var options = TableOptions()
        options.sectionsInitiallyCollapsed = true
        var table = try sampleTable(options: options)
        try apply(&table, .addSection(NewSection(key: "n", title: "N")))
        #expect(table.section("n")?.collapsed == true)
    }

    @Test func keysStayStableAcrossInsertsRemovesAndMoves() throws {
        var table = try sampleTable()
        try apply(&table, .addSection(NewSection(key: "z", title: "Zeta", index: 0)))
        try apply(&table, .removeSection(section: .key("a")))
        try apply(&table, .moveSection(section: .key("c"), index: 0))
        #expect(table.sections.map(\.key) == ["c", "z", "b"])
        for (position, section) in table.sections.enumerated() {
            #expect(table.position(ofSection: section.key) == position)
        }
        // Toggling by key still hits the right section after everything moved.
        try apply(&table, .toggle(section: .key("b")))
        #expect(table.section("b")?.collapsed == false)
        #expect(table.sectionKey(ofRow: "a1") == nil)
        expectError(.unknownSection) { try apply(&table, .toggle(section: .key("a"))) }
    }

    @Test func duplicateKeysAreRefused() throws {
        var table = try sampleTable()
        expectError(.duplicateKey, field: "key") { try apply(&table, .addSection(NewSection(key: "a", title: "x"))) }
        expectError(.duplicateKey, field: "key") { try apply(&table, .addRow(section: .key("c"), row: NewRow(key: "a1", label: "x"))) }
    }

    @Test func badKeysAreRefused() throws {
        var table = try sampleTable()
        expectError(.invalidValue, field: "key") { try apply(&table, .addSection(NewSection(key: "has space", title: "x"))) }
        expectError(.invalidValue, field: "key") { try apply(&table, .addSection(NewSection(key: String(repeating: "k", count: 65), title: "x"))) }
    }

    @Test func updateSectionChangesAndClearsFields() throws {
        var table = try sampleTable()
        try apply(&table, .updateSection(section: .key("a"), patch: SectionPatch(title: "A\nsecond line", detail: .some("d"), footer: .some("f"))))
        #expect(table.section("a")?.title == "A\nsecond line")
        #expect(table.section("a")?.footer == "f")
        try apply(&table, .updateSection(section: .key("a"), patch: SectionPatch(footer: .some(nil))))
        #expect(table.section("a")?.footer == nil)
        #expect(table.section("a")?.detail == "d")
        expectError(.invalidValue, field: "set") { try apply(&table, .updateSection(section: .key("a"), patch: SectionPatch())) }
    }

    @Test func moveSectionRefusesPositionsOutsideTheTable() throws {
        var table = try sampleTable()
        expectError(.invalidValue, field: "index") { try apply(&table, .moveSection(section: .key("a"), index: 3)) }
        expectError(.invalidValue, field: "index") { try apply(&table, .moveSection(section: .key("a"), index: -1)) }
    }

    @Test func rowsAreAddedUpdatedMovedAndRemoved() throws {
        var table = try sampleTable()
        let added = try apply(&table, .addRow(section: .key("c"), row: NewRow(label: "new", value: "1")))
        #expect(added.change == .addRow(section: .key("c"), row: NewRow(key: "r1", label: "new", value: "1", index: 0)))
        try apply(&table, .updateRow(row: "r1", patch: RowPatch(value: "2", detail: .some("x"))))
        #expect(table.section("c")?.rows.first == Row(key: "r1", label: "new", value: "2", detail: "x"))
        try apply(&table, .moveRow(row: "r1", section: .key("a"), index: 1))
        #expect(table.section("a")?.rows.map(\.key) == ["a1", "r1", "a2"])
        #expect(table.sectionKey(ofRow: "r1") == "a")
        try apply(&table, .moveRow(row: "a1", section: .key("a"), index: nil))
        #expect(table.section("a")?.rows.map(\.key) == ["r1", "a2", "a1"])
        try apply(&table, .removeRow(row: "r1"))
        #expect(table.section("a")?.rows.map(\.key) == ["a2", "a1"])
        #expect(table.rowCount == 3)
        expectError(.unknownRow, field: "row") { try apply(&table, .removeRow(row: "r1")) }
        expectError(.invalidValue, field: "index") { try apply(&table, .moveRow(row: "a1", section: .key("c"), index: 1)) }
        expectError(.invalidValue, field: "set") { try apply(&table, .updateRow(row: "a1", patch: RowPatch())) }
    }

    @Test func emptyLabelsAndTitlesAreRefusedButEmptyValuesAreNot() throws {
        var table = try sampleTable()
        expectError(.invalidValue, field: "title") { try apply(&table, .addSection(NewSection(title: ""))) }
        expectError(.invalidValue, field: "label") { try apply(&table, .addRow(section: .key("a"), row: NewRow(label: ""))) }
        try apply(&table, .updateRow(row: "a1", patch: RowPatch(value: "")))
    }

    @Test func overLongTextIsTooLong() throws {
        var table = try sampleTable()
        let long = String(repeating: "x", count: 1025)
        expectError(.tooLong, field: "title") { try apply(&table, .addSection(NewSection(title: long))) }
        expectError(.tooLong, field: "value") { try apply(&table, .updateRow(row: "a1", patch: RowPatch(value: long))) }
    }

    @Test func limitsOnSectionsAndRowsAreEnforced() throws {
        var limits = TableLimits()
        limits.maxSections = 3
        limits.maxRowsPerSection = 2
        var table = try Table(options: TableOptions(), sections: try sampleTable().sections, seq: 0, limits: limits)
        expectError(.limitReached) { try apply(&table, .addSection(NewSection(title: "x"))) }
        expectError(.limitReached, field: "section") { try apply(&table, .addRow(section: .key("a"), row: NewRow(label: "x"))) }
        expectError(.limitReached, field: "section") { try apply(&table, .moveRow(row: "b1", section: .key("a"), index: 0)) }
    }

    @Test func theTableTextBudgetIsEnforcedAndFreedAgain() throws {
        var limits = TableLimits()
        limits.maxTextBytesPerTable = 2_000
        var table = try Table(options: TableOptions(), sections: try sampleTable().sections, seq: 0, limits: limits)
        let text = String(repeating: "x", count: 900)
        try apply(&table, .addRow(section: .key("c"), row: NewRow(key: "t1", label: text)))
        try apply(&table, .addRow(section: .key("c"), row: NewRow(key: "t2", label: text)))
        expectError(.limitReached) { try apply(&table, .addRow(section: .key("c"), row: NewRow(key: "t3", label: text))) }
        expectError(.limitReached) { try apply(&table, .updateRow(row: "a1", patch: RowPatch(value: text))) }
        try apply(&table, .removeRow(row: "t1"))
        try apply(&table, .addRow(section: .key("c"), row: NewRow(key: "t3", label: text)))
        try apply(&table, .removeSection(section: .key("c")))
        #expect(
            table.textBytes
                == TableSnapshot(table, rows: .all).sections.reduce(0) { total, section in
                    total + section.title.utf8.count + (section.rows ?? []).reduce(0) { $0 + $1.label.utf8.count + $1.value.utf8.count }
                })
    }

    @Test func anAccordionSectionAddedExpandedByDefaultWaitsForBusySections() throws {
        var options = TableOptions()
        options.accordion = true
        let table = try sampleTable(options: options)
        #expect(table.scope(of: .addSection(NewSection(title: "x"))) == .table)
        #expect(table.scope(of: .addSection(NewSection(title: "x", collapsed: true))) == .sections([]))
    }

    @Test func setOptionsValidatesIndicatorsAndThreshold() throws {
        var table = try sampleTable()
        try apply(&table, .setOptions(OptionsPatch(collapsedIndicator: "▸", expandedIndicator: "▾", busyThresholdMs: 0)))
        #expect(table.options.collapsedIndicator == "▸")
        #expect(table.options.busyThresholdMs == 0)
        expectError(.invalidValue, field: "collapsedIndicator") { try apply(&table, .setOptions(OptionsPatch(collapsedIndicator: ""))) }
        expectError(.invalidValue, field: "busyThresholdMs") { try apply(&table, .setOptions(OptionsPatch(busyThresholdMs: 600_000))) }
        expectError(.invalidValue, field: "options") { try apply(&table, .setOptions(OptionsPatch())) }
    }

    @Test func defaultIndicatorsArePlusAndMinus() {
        #expect(TableOptions().collapsedIndicator == "+")
        #expect(TableOptions().expandedIndicator == "−")
        #expect(TableOptions().busyThresholdMs == 500)
    }

    @Test func aRefusedChangeLeavesTheTableUntouched() throws {
        var table = try sampleTable()
        let before = TableSnapshot(table, rows: .all)
        expectError(.tooLong) {
            try apply(
                &table, .updateSection(section: .key("a"), patch: SectionPatch(title: "ok", detail: .some(String(repeating: "x", count: 2000)))))
        }
        #expect(TableSnapshot(table, rows: .all) == before)
    }
}

@Suite struct Idempotency {
    @Test func reapplyingAChangeIdReturnsTheOriginalSeqAndChangesNothing() throws {
        var table = try sampleTable()
        let first = try table.apply(.toggle(section: .key("a")), by: ana, changeId: "k-1")
        let second = try table.apply(.toggle(section: .key("a")), by: ana, changeId: "k-1")
        #expect(second == .duplicate(seq: first.seq))
        #expect(table.seq == 1)
        #expect(table.section("a")?.collapsed == true)
    }

    @Test func anIdReusedForADifferentChangeIsRefusedNotAcknowledged() throws {
        var table = try sampleTable()
        _ = try table.apply(.setAll(collapsed: true), by: Author(client: "c9", name: "mallory"), changeId: "k-2")
        expectError(.idReused, field: "id") { _ = try table.apply(.removeSection(section: .key("a")), by: ana, changeId: "k-2") }
        #expect(table.section("a") != nil)
    }

    @Test func aRefusedChangeDoesNotConsumeItsId() throws {
        var table = try sampleTable()
        #expect(throws: ProtocolError.self) { try table.apply(.toggle(section: .key("zz")), by: ana, changeId: "k-1") }
        let outcome = try table.apply(.toggle(section: .key("a")), by: ana, changeId: "k-1")
        guard case .applied = outcome else {
            Issue.record("should apply")
            return
        }
    }

    /// The window is entered as the id is looked up, so each way of refusing must take it out
    /// again, and a retry must leave the original entry as it was.
    @Test func onlyAppliedChangesStayInTheWindow() throws {
        var table = try sampleTable()
        try apply(&table, .toggle(section: .key("a")), id: "kept")
        let before = table.rememberedChanges
        #expect(throws: ProtocolError.self) { try table.apply(.toggle(section: .key("a")), by: ana, changeId: "bad id") }
        #expect(throws: ProtocolError.self) { try table.apply(.toggle(section: .key("zz")), by: ana, changeId: "refused") }
        #expect(throws: ProtocolError.self) { try table.apply(.toggle(section: .key("b")), by: ana, changeId: "kept") }
        #expect(try table.apply(.toggle(section: .key("a")), by: ana, changeId: "kept") == .duplicate(seq: 1))
        #expect(table.rememberedChanges == before)
        #expect(table.rememberedDigest(of: "bad id") == nil && table.rememberedDigest(of: "refused") == nil)
        #expect(table.rememberedDigest(of: "kept") == Table.digest(.toggle(section: .key("a"))))
    }

    @Test func theWindowForgetsTheOldestIds() throws {
        var limits = TableLimits()
        limits.idempotencyWindow = 2
        var table = try Table(options: TableOptions(), sections: try sampleTable().sections, seq: 0, limits: limits)
        for id in ["x", "y", "z"] { _ = try table.apply(.toggle(section: .key("a")), by: ana, changeId: id) }
        guard case .applied = try table.apply(.toggle(section: .key("a")), by: ana, changeId: "x") else {
            Issue.record("x forgotten")
            return
        }
        guard case .duplicate = try table.apply(.toggle(section: .key("a")), by: ana, changeId: "z") else {
            Issue.record("z kept")
            return
        }
    }

    @Test func theWindowsChangesAfterASeqAreItsNewestInOrderBeforeAndAfterItWraps() throws {
        var limits = TableLimits()
        limits.idempotencyWindow = 5
        var table = try Table(options: TableOptions(), sections: try sampleTable().sections, seq: 0, limits: limits)
        #expect(table.rememberedChanges(after: 0).isEmpty && table.oldestRememberedSeq == nil)
        for step in 1...12 {
            // Every third change has no id: seqs and remembered changes part ways.
            _ = try table.apply(.toggle(section: .key("a")), by: ana, changeId: step % 3 == 0 ? nil : "id\(step)")
            let all = table.rememberedChanges
            #expect(table.oldestRememberedSeq == all.first?.seq)
            for after in 0...UInt64(step) {
                #expect(table.rememberedChanges(after: after) == all.filter { $0.seq > after }, "after \(after) at \(step)")
            }
        }
        #expect(table.rememberedChanges.map(\.seq) == [5, 7, 8, 10, 11])
    }

    /// A kept copy (a checkpoint on its way to the store holds one) is not changed by the table
    /// taking room for its whole window and wrapping after the copy was made.
    @Test func aCopyKeepsItsWindowWhileTheTableGoesOnPastTheReservedSize() throws {
        var limits = TableLimits()
        limits.idempotencyWindow = 1_500
        var table = try Table(options: TableOptions(), sections: try sampleTable().sections, seq: 0, limits: limits)
        for step in 0..<1_000 { _ = try table.apply(.toggle(section: .key("a")), by: ana, changeId: "id\(step)") }
        let kept = table
        let keptWindow = kept.rememberedChanges
        for step in 1_000..<2_000 { _ = try table.apply(.toggle(section: .key("a")), by: ana, changeId: "id\(step)") }
        #expect(kept.rememberedChanges == keptWindow)
        #expect(keptWindow.map(\.id) == (0..<1_000).map { "id\($0)" })
        #expect(table.rememberedChanges.map(\.id) == (500..<2_000).map { "id\($0)" })
        #expect(kept.rememberedDigest(of: "id400") != nil && kept.rememberedDigest(of: "id1200") == nil)
        #expect(table.rememberedDigest(of: "id400") == nil && table.rememberedDigest(of: "id1200") != nil)
    }

    @Test func aCheckpointWithoutItsWindowDecodesWithNoneAndASliceRestoresIt() throws {
        var table = try sampleTable()
        for id in ["x", "y", "z"] { _ = try table.apply(.toggle(section: .key("a")), by: ana, changeId: id) }
        let bare = TableCheckpoint.encode(table, changeIds: false)
        #expect(!String(decoding: bare, as: UTF8.self).contains("changeIds"))
        var decoded = try TableCheckpoint.decode(bare, limits: TableLimits())
        #expect(decoded.rememberedChanges.isEmpty && decoded.seq == table.seq)
        let slice = TableCheckpoint.encodeChangeIds(table.rememberedChanges)
        decoded.restoreRemembered(try TableCheckpoint.decodeChangeIds(slice, limits: TableLimits()))
        #expect(TableCheckpoint.encode(decoded) == TableCheckpoint.encode(table))
        #expect(throws: ProtocolError.self) { try TableCheckpoint.decodeChangeIds(Array(#"{"id":"x"}"#.utf8), limits: TableLimits()) }
        #expect(throws: ProtocolError.self) {
            try TableCheckpoint.decodeChangeIds(Array(#"[{"id":"x","seq":1,"digest":"not hex"}]"#.utf8), limits: TableLimits())
        }
    }

    /// A window of 3,000 also passes the size at which the ring and index take room for the
    /// whole window at once (`Table.windowReservedFrom`).
    @Test(arguments: [300, 3_000])
    func theWindowFindsEveryIdItHoldsAndNoneItForgotWhileItsIndexGrowsAndWraps(window: Int) throws {
        var limits = TableLimits()
        limits.idempotencyWindow = window
        let window = UInt64(window)
        var table = try Table(options: TableOptions(), sections: try sampleTable().sections, seq: 0, limits: limits)
        var seqs: [String: UInt64] = [:]
        let steps = Int(window) + 1_700
        for step in 0..<steps {
            // Distinct ids in no particular order (10,007 is prime).
            let id = "id-\(step * 7_919 % 10_007)"
            guard case .applied(let event) = try table.apply(.toggle(section: .key("a")), by: ana, changeId: id) else {
                Issue.record("\(id) taken for a retry")
                return
            }
            seqs[id] = event.seq
            guard step % 97 == 0 || step == steps - 1 else { continue }
            for (known, seq) in seqs {
                #expect((table.rememberedDigest(of: known) != nil) == (seq + window > event.seq), "\(known) at \(event.seq)")
            }
        }
        for (id, seq) in seqs where seq + window > table.seq {
            var copy = table
            // Half of them through a window read from the head by a committed table that keeps
            // none, which then becomes a head (a rollback) and makes the window its own.
            if seq % 2 == 0 {
                var committed = table
                committed.stopKeepingChangeIds()
                copy = committed.withChangeIds(of: table)
            }
            guard case .duplicate(let original) = try copy.apply(.toggle(section: .key("a")), by: ana, changeId: id) else {
                Issue.record("\(id) not recognised")
                continue
            }
            #expect(original == seq)
        }
    }
}

/// The window's index alone, with hashes chosen to collide.
@Suite struct ChangeIdIndexProbing {
    func ringOf(_ ids: [String]) -> [Table.RememberedChange] {
        ids.enumerated().map { Table.RememberedChange(id: $1, seq: UInt64($0 + 1), digest: 0) }
    }

    @Test func idsWhoseHashesCollideAreToldApartAndSurviveRemovalsAndGrowth() {
        let ids = ["a", "b", "c", "d", "e"]
        let ring = ringOf(ids)
        // "a" and "c" have the same hash, and "b" the same low 32 bits (all a bucket keeps of
        // it): three ids the ring's strings alone tell apart. All five start at the same bucket.
        let hashes = [0x7_0000_0005, 0x1_0000_0005, 0x7_0000_0005, 0x5, 0x15]
        var index = ChangeIdIndex()
        for slot in ids.indices { index.insert(slot: slot, hash: hashes[slot]) }
        for slot in ids.indices { #expect(index.slot(of: ids[slot], hash: hashes[slot], in: ring) == slot, "\(ids[slot])") }
        #expect(index.slot(of: "z", hash: 0x5, in: ring) == nil)
        // Forgetting entries at the start of the run moves the others back; all stay findable.
        index.remove(slot: 0)
        index.remove(slot: 2)
        #expect(index.count == 3)
        for slot in [1, 3, 4] { #expect(index.slot(of: ids[slot], hash: hashes[slot], in: ring) == slot, "\(ids[slot])") }
        for slot in [0, 2] { #expect(index.slot(of: ids[slot], hash: hashes[slot], in: ring) == nil, "\(ids[slot])") }
        // And after growing past the first 16 buckets.
        let more = (0..<40).map { "m\($0)" }
        let grown = ringOf(ids + more)
        for (offset, _) in more.enumerated() { index.insert(slot: ids.count + offset, hash: 0x5 + offset * 16) }
        for slot in [1, 3, 4] { #expect(index.slot(of: ids[slot], hash: hashes[slot], in: grown) == slot, "\(ids[slot])") }
        for (offset, id) in more.enumerated() { #expect(index.slot(of: id, hash: 0x5 + offset * 16, in: grown) == ids.count + offset) }
    }
}

@Suite struct KeyBytes {
    @Test func keysMayHoldLettersDigitsAndUnderscoreDashDotColonOnly() {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:".utf8)
        for byte in UInt8.min...UInt8.max {
            #expect(Table.isKeyByte(byte) == allowed.contains(byte), "byte \(byte)")
        }
    }
}

@Suite struct Replay {
    @Test func replayingEventsReproducesTheTable() throws {
        var source = try sampleTable()
        var replica = try sampleTable()
        for change: Change in [
            .toggle(section: .title("Beta")), .addSection(NewSection(title: "N")), .addRow(section: .key("s2"), row: NewRow(label: "r")),
        ] {
            let event = try apply(&source, change)
            try replica.replay(event)
        }
        #expect(TableSnapshot(replica, rows: .all) == TableSnapshot(source, rows: .all))
    }

    @Test func replayRefusesAGapInTheSequence() throws {
        var source = try sampleTable()
        var replica = try sampleTable()
        _ = try apply(&source, .toggle(section: .key("a")))
        let second = try apply(&source, .toggle(section: .key("a")))
        expectError(.invalidValue, field: "seq") { try replica.replay(second) }
    }
}

@Suite struct RowImports {
    func rows(_ labels: String...) -> [NewRow] { labels.map { NewRow(label: $0, value: "v") } }

    @Test func anImportReplacesASectionsRowsAndAllocatesKeysByItsSeqAndPlace() throws {
        var table = try sampleTable()
        let event = try apply(&table, .importRows(section: .title("Alpha"), rows: RowImport(rows: rows("x", "y", "z"))))
        #expect(table.section("a")?.rows.map(\.key) == ["r1.1", "r1.2", "r1.3"])
        #expect(table.section("a")?.rows.map(\.label) == ["x", "y", "z"])
        #expect(table.sectionKey(ofRow: "a1") == nil)
        #expect(table.sectionKey(ofRow: "r1.2") == "a")
        #expect(table.rowCount == 4)
        #expect(event.collapsed.isEmpty)
        #expect(event.reloadedSections == ["a"])
        guard case .importRows(.key("a"), let imported) = event.change else {
            Issue.record("not resolved: \(event.change)")
            return
        }
        #expect(imported.rows.map(\.key) == ["r1.1", "r1.2", "r1.3"])
        #expect(imported.count == 3)
    }

    @Test func anAppendKeepsTheRowsAndTheReplacedSectionsOwnKeysAreFreeAgain() throws {
        var table = try sampleTable()
        try apply(&table, .importRows(section: .key("b"), rows: RowImport(rows: [NewRow(key: "k", label: "new")], replace: false)))
        #expect(table.section("b")?.rows.map(\.key) == ["b1", "k"])
        // Replacing "a" may reuse its own keys, but not another section's.
        try apply(&table, .importRows(section: .key("a"), rows: RowImport(rows: [NewRow(key: "a2", label: "again")])))
        #expect(table.section("a")?.rows.map(\.key) == ["a2"])
        expectError(.duplicateKey, field: "rows.0.key") {
            try apply(&table, .importRows(section: .key("a"), rows: RowImport(rows: [NewRow(key: "b1", label: "taken")])))
        }
    }

    @Test func oneBadRowRefusesTheWholeImportNamingItAndChangesNothing() throws {
        var table = try sampleTable()
        let before = table
        expectError(.invalidValue, field: "rows.1.label") {
            try apply(&table, .importRows(section: .key("a"), rows: RowImport(rows: rows("fine", ""))))
        }
        expectError(.duplicateKey, field: "rows.1.key") {
            try apply(&table, .importRows(section: .key("a"), rows: RowImport(rows: [NewRow(key: "d", label: "1"), NewRow(key: "d", label: "2")])))
        }
        var limits = TableLimits()
        limits.maxRowsPerSection = 2
        var small = try Table(options: TableOptions(), sections: before.sections, seq: 0, limits: limits)
        expectError(.limitReached, field: "rows") {
            try apply(&small, .importRows(section: .key("b"), rows: RowImport(rows: rows("x", "y"), replace: false)))
        }
        try apply(&small, .importRows(section: .key("b"), rows: RowImport(rows: rows("x", "y"))))
        // The form members receive cannot be applied: it has no rows.
        expectError(.missingField, field: "rows") {
            try apply(&table, .importRows(section: .key("a"), rows: RowImport(count: 2, replace: true)))
        }
        #expect(table.sections == before.sections)
        #expect(table.seq == before.seq)
        #expect(table.textBytes == before.textBytes)
        #expect(table.rowCount == before.rowCount)
    }

    @Test func theLogKeepsTheRowsMembersGetTheCountAndBothDecode() throws {
        var table = try sampleTable()
        let event = try apply(&table, .importRows(section: .key("a"), rows: RowImport(rows: rows("x", "y"), replace: false)), id: "i1")
        let forMembers = try ServerMessage.decodeEvent(try JSONParser.parse(ServerMessage.event(event)))
        guard case .importRows(.key("a"), let summary) = forMembers.change else {
            Issue.record("\(forMembers.change)")
            return
        }
        #expect(summary == RowImport(count: 2, replace: false))
        #expect(!summary.carriesRows)
        let request = Change.importRows(section: .key("a"), rows: RowImport(rows: rows("x", "y"), replace: false))
        let entry = TableCheckpoint.encodeEntry(event, request: request)
        // Given the members' encoding to reuse, the entry still keeps the rows.
        #expect(TableCheckpoint.encodeEntry(event, request: request, encodedEvent: ServerMessage.event(event)) == entry)
        let stored = try TableCheckpoint.decodeEntry(entry, limits: TableLimits())
        #expect(stored.event == event)
        // A replica given the stored event reproduces it, keys and all.
        var replica = try sampleTable()
        try replica.applyCommitted(stored.event, request: stored.request)
        #expect(replica.section("a")?.rows == table.section("a")?.rows)
    }

    @Test func aLogEntryMadeFromTheMembersEncodingIsTheOneEncodedWhole() throws {
        var table = try sampleTable()
        let toggle = try apply(&table, .toggle(section: .title("Alpha")), id: "t1")
        let added = try apply(&table, .addSection(NewSection(title: "Gamma")))
        for (event, request) in [(toggle, Change.toggle(section: .title("Alpha"))), (added, nil)] {
            let reused = TableCheckpoint.encodeEntry(event, request: request, encodedEvent: ServerMessage.event(event))
            #expect(reused == TableCheckpoint.encodeEntry(event, request: request))
        }
    }

    @Test func anEntryIsTheEventsBytesAloneExactlyWhenNothingButThemNeedsKeeping() throws {
        var table = try sampleTable()
        let byKey = try apply(&table, .toggle(section: .key("a")), id: "k1")
        let byTitle = try apply(&table, .toggle(section: .title("Alpha")), id: "t1")
        let withoutId = try apply(&table, .toggle(section: .title("Alpha")))
        let imported = try apply(&table, .importRows(section: .key("a"), rows: RowImport(rows: rows("x"), replace: false)), id: "i1")
        let cases: [(TableEvent, Change?, Bool)] = [
            (byKey, .toggle(section: .key("a")), true),
            // The request named the section by title: a retry is compared with it, so it stays.
            (byTitle, .toggle(section: .title("Alpha")), false),
            (withoutId, nil, true),
            // Members get a count, the log keeps the rows.
            (imported, .importRows(section: .key("a"), rows: RowImport(rows: rows("x"), replace: false)), false),
        ]
        for (event, request, alone) in cases {
            #expect(TableCheckpoint.entryIsEventBytes(event, request: request) == alone, "\(event.change)")
            if alone {
                var out = JSONWriter(capacity: 0)
                TableCheckpoint.encodeEntry(eventBytes: ServerMessage.event(event), changeId: event.changeId, into: &out)
                #expect(out.bytes == TableCheckpoint.encodeEntry(event, request: request))
            }
        }
    }

    @Test func aLogEntryNeverHoldsARawNewlineSoALogMayJoinEntriesWithThem() throws {
        var table = try sampleTable()
        let controls = String(decoding: (1...0x1F).map { UInt8($0) }, as: UTF8.self)
        let title = "a\nb" + controls
        let added = try apply(&table, .addSection(NewSection(title: title)), id: "n1")
        let key = try #require(table.sections.last?.key)
        let request = Change.toggle(section: .title(title))
        let toggled = try apply(&table, request, id: "n2")
        let rowsRequest = Change.importRows(section: .key(key), rows: RowImport(rows: rows("x\ny", controls), replace: false))
        let imported = try apply(&table, rowsRequest, id: "n3")
        for (event, request) in [(added, Change.addSection(NewSection(title: title))), (toggled, request), (imported, rowsRequest)] {
            let entry = TableCheckpoint.encodeEntry(event, request: request, encodedEvent: ServerMessage.event(event))
            #expect(!entry.contains(UInt8(ascii: "\n")))
            let stored = try TableCheckpoint.decodeEntry(entry, limits: TableLimits())
            #expect(stored.event == event)
            #expect(stored.request == request)
        }
    }

    @Test func aRequestGivingACountThatDisagreesWithItsRowsIsRefused() throws {
        let json = #"{"type":"importRows","section":"a","count":3,"rows":[{"label":"x"}]}"#
        let (result, _) = ClientMessage.decode(Array(json.utf8))
        guard case .failure(let error) = result else {
            Issue.record("accepted")
            return
        }
        #expect(error.field == "count")
        let missing = ClientMessage.decode(Array(#"{"type":"importRows","section":"a"}"#.utf8)).0
        guard case .failure(let absent) = missing else {
            Issue.record("accepted")
            return
        }
        #expect(absent.field == "rows")
    }
}
