import Testing

@testable import FoldtableCore

/// What an undo must restore exactly: every section (keys, order, text, state, rows) and the options.
private struct Contents: Equatable {
    var sections: [Section]
    var options: TableOptions
    init(_ table: Table) {
        sections = table.sections
        options = table.options
    }
}

/// Applies `change`, then its undo, then its redo, checking that each lands exactly where it
/// should, and that the undo survives the log's encoding (what a replica or a restart replays).
private func undoesAndRedoes(_ change: Change, on start: Table) throws {
    var table = start
    let before = Contents(table)
    let prelude = table.undoPrelude(for: change)
    let event = try apply(&table, change)
    let after = Contents(table)
    let record = try #require(table.undoRecord(for: event, prelude: prelude), "no record for \(change.typeName)")
    #expect(record.seq == event.seq)

    let undo = Change.undo(record.change(redo: false, on: table))
    var replica = table
    let undone = try apply(&table, undo)
    #expect(Contents(table) == before, "undo of \(change.typeName)")
    // Through the log's form and back, applied on a replica: the same event and table.
    var out = JSONWriter()
    undo.encode(into: &out)
    let decoded = try Change.decode(FieldReader(try JSONParser.parse(out.bytes)), type: record.change(redo: false, on: table).redo ? "redo" : "undo")
    #expect(decoded == undo)
    try replica.replay(undone)
    #expect(Contents(replica) == before)

    _ = try apply(&table, .undo(record.change(redo: true, on: table)))
    #expect(Contents(table) == after, "redo of \(change.typeName)")
}

@Suite struct UndoTests {
    @Test func everyKindOfChangeIsUndoneAndRedoneExactly() throws {
        let start = try sampleTable()
        let changes: [Change] = [
            .toggle(section: .key("a")),
            .setCollapsed(section: .key("b"), collapsed: false),
            .setAll(collapsed: true),
            .setAll(collapsed: false),
            .reveal(row: "b1"),
            .addSection(NewSection(title: "Delta", detail: "d", index: 1)),
            .removeSection(section: .key("a")),
            .removeSection(section: .key("c")),
            .updateSection(section: .key("a"), patch: SectionPatch(title: "Province\nSichuan", detail: .some("x"), footer: .some(nil))),
            .moveSection(section: .key("c"), index: 0),
            .addRow(section: .key("b"), row: NewRow(label: "four", value: "4", index: 0)),
            .removeRow(row: "a1"),
            .updateRow(row: "a2", patch: RowPatch(label: "deux", value: "2", detail: .some("second"))),
            .moveRow(row: "a1", section: .key("b"), index: 1),
            .moveRow(row: "a2", section: .key("a"), index: 0),
            .setOptions(OptionsPatch(collapsedIndicator: ">", accordion: true, titleLines: 2)),
            .importRows(section: .key("a"), rows: RowImport(rows: [NewRow(label: "x"), NewRow(label: "y", value: "v")], replace: true)),
            .importRows(section: .key("b"), rows: RowImport(rows: [NewRow(label: "z")], replace: false)),
        ]
        for change in changes { try undoesAndRedoes(change, on: start) }
    }

    @Test func accordionEffectsAreUndoneWithTheChangeThatCausedThem() throws {
        var options = TableOptions()
        options.accordion = true
        let start = try Table(
            options: options,
            sections: [
                Section(key: "a", title: "A"), Section(key: "b", title: "B", collapsed: true), Section(key: "c", title: "C", collapsed: true),
            ],
            seq: 0)
        try undoesAndRedoes(.toggle(section: .key("b")), on: start)
        try undoesAndRedoes(.addSection(NewSection(title: "D", collapsed: false)), on: start)
    }

    @Test func anUndoOfARowEditedSinceBySomeoneElseIsRefusedAndChangesNothing() throws {
        var table = try sampleTable()
        let change = Change.updateRow(row: "a1", patch: RowPatch(value: "mine"))
        let prelude = table.undoPrelude(for: change)
        let event = try apply(&table, change)
        let record = try #require(table.undoRecord(for: event, prelude: prelude))
        try apply(&table, .updateRow(row: "a1", patch: RowPatch(value: "theirs")))
        let edited = Contents(table)
        let seq = table.seq
        expectError(.undoConflict) { try apply(&table, .undo(record.change(redo: false, on: table))) }
        #expect(Contents(table) == edited)
        #expect(table.seq == seq)
    }

    @Test func anUndoWhosePartFailsAppliesNoneOfIt() throws {
        var table = try sampleTable()
        let change = Change.removeSection(section: .key("a"))
        let prelude = table.undoPrelude(for: change)
        let event = try apply(&table, change)
        let record = try #require(table.undoRecord(for: event, prelude: prelude))
        // Someone reuses one of the removed rows' keys: the section cannot come back whole.
        try apply(&table, .addRow(section: .key("b"), row: NewRow(key: "a2", label: "taken")))
        let now = Contents(table)
        expectError(.undoConflict) { try apply(&table, .undo(record.change(redo: false, on: table))) }
        #expect(Contents(table) == now)
        #expect(table.section("a") == nil)
    }

    @Test func addingASectionIsNotUndoneOnceSomeoneAddedRowsToIt() throws {
        var table = try sampleTable()
        let change = Change.addSection(NewSection(key: "n", title: "New"))
        let prelude = table.undoPrelude(for: change)
        let event = try apply(&table, change)
        let record = try #require(table.undoRecord(for: event, prelude: prelude))
        try apply(&table, .addRow(section: .key("n"), row: NewRow(label: "work")))
        expectError(.undoConflict) { try apply(&table, .undo(record.change(redo: false, on: table))) }
        #expect(table.section("n")?.rows.count == 1)
    }

    @Test func aRowPutBackLandsWithinTheSectionWhenRowsWereRemovedSince() throws {
        var table = try sampleTable()
        let change = Change.removeRow(row: "a2")
        let prelude = table.undoPrelude(for: change)
        let event = try apply(&table, change)
        let record = try #require(table.undoRecord(for: event, prelude: prelude))
        try apply(&table, .removeRow(row: "a1"))
        try apply(&table, .undo(record.change(redo: false, on: table)))
        #expect(table.section("a")?.rows.map(\.key) == ["a2"])
    }

    @Test func aChangeThatAlteredNothingLeavesNothingToUndo() throws {
        var table = try sampleTable()
        let change = Change.setCollapsed(section: .key("b"), collapsed: true)
        let prelude = table.undoPrelude(for: change)
        let event = try apply(&table, change)
        #expect(table.undoRecord(for: event, prelude: prelude) == nil)
    }

    @Test func membersReceiveAnUndoWithoutItsExpectationsOrImportedRows() throws {
        let undo = Change.undo(
            UndoChange(
                of: 3, redo: false,
                changes: [.importRows(section: .key("a"), rows: RowImport(rows: [NewRow(key: "k", label: "l")], replace: true))],
                restore: [CollapseEffect(key: "a", collapsed: false)], expect: [.noSection(key: "z")]))
        #expect(!undo.membersGetWholeForm)
        var out = JSONWriter()
        undo.encode(into: &out, form: .forMembers)
        let text = String(decoding: out.bytes, as: UTF8.self)
        #expect(text == #"{"type":"undo","of":3,"changes":[{"type":"importRows","section":"a","replace":true,"count":1}],"restore":{"a":false}}"#)
    }

    @Test func anUndoCannotHoldAnotherUndo() throws {
        let json = #"{"type":"undo","of":1,"changes":[{"type":"redo","of":1,"changes":[]}]}"#
        expectError(.invalidValue) {
            _ = try Change.decode(FieldReader(try JSONParser.parse(Array(json.utf8))), type: "undo")
        }
    }
}
