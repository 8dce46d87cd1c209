import Testing

@testable import FoldtableCore

@Suite struct ChangeCreatedKey {
    @Test func anAppliedAddRowOrAddSectionNamesTheKeyTheTableChose() throws {
        var table = try sampleTable()
        let row = try apply(&table, .addRow(section: .key("a"), row: NewRow(label: "three")))
        let rowKey = try #require(row.change.createdKey)
        #expect(table.sections[0].rows.map(\.key).contains(rowKey))
        let section = try apply(&table, .addSection(NewSection(title: "Delta")))
        let sectionKey = try #require(section.change.createdKey)
        #expect(table.sections.map(\.key).contains(sectionKey))
    }

    @Test func aKeyTheChangeNamesIsItsCreatedKeyEvenBeforeItIsApplied() {
        #expect(Change.addRow(section: .key("a"), row: NewRow(key: "mine", label: "x")).createdKey == "mine")
        #expect(Change.addSection(NewSection(key: "s-mine", title: "x")).createdKey == "s-mine")
        #expect(Change.addRow(section: .key("a"), row: NewRow(label: "x")).createdKey == nil)
    }

    @Test func changesThatAddNothingNameNoKey() throws {
        var table = try sampleTable()
        #expect(try apply(&table, .toggle(section: .key("a"))).change.createdKey == nil)
        #expect(try apply(&table, .removeRow(row: "a1")).change.createdKey == nil)
    }
}
