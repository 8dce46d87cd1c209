import Testing

@testable import FoldtableCore

@Suite struct TableDocuments {
    static let options =
        #"{"sectionsInitiallyCollapsed":false,"collapsedIndicator":"+","expandedIndicator":"-","accordion":false,"busyThresholdMs":500}"#

    /// A document with these sections (JSON text of the array's elements).
    static func document(_ sections: String, options: String = options) -> [UInt8] {
        Array(#"{"options":\#(options),"sections":[\#(sections)]}"#.utf8)
    }

    /// Imports `table`'s export and checks that everything a document carries came back.
    func expectRoundTrip(_ table: Table, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let bytes = TableDocument.encode(table)
        let imported = try TableDocument.decode(bytes)
        #expect(imported.options == table.options, sourceLocation: sourceLocation)
        #expect(imported.sections == table.sections, sourceLocation: sourceLocation)
        #expect(TableDocument.encode(imported) == bytes, sourceLocation: sourceLocation)
        #expect(imported.seq == UInt64(table.sections.count + table.rowCount), sourceLocation: sourceLocation)
    }

    @Test func theDocumentIsTheSnapshotTableObjectWithEveryRow() throws {
        let table = DemoTable.make(largeRows: 20)
        var out = JSONWriter()
        TableSnapshot(table, rows: .all).encode(into: &out)
        #expect(TableDocument.encode(table) == out.bytes)
        let value = try JSONParser.parse(TableDocument.encode(table))
        guard case .object(let members) = value, case .array(let sections)? = value["sections"] else {
            Issue.record("not a table object")
            return
        }
        #expect(members.map(\.0) == ["options", "sections"])
        #expect(sections.allSatisfy { $0["rows"] != nil })
    }

    @Test func exportThenImportGivesBackTheSameTable() throws {
        var table = DemoTable.make(largeRows: 500)
        try apply(&table, .toggle(section: .key("big")))
        try apply(&table, .updateSection(section: .key("mac"), patch: SectionPatch(footer: .some("f\n\"x\", 🎉"))))
        try apply(&table, .setOptions(OptionsPatch(sectionsInitiallyCollapsed: true, collapsedIndicator: "▸", busyThresholdMs: 0)))
        try apply(&table, .setOptions(OptionsPatch(showBusyIndicator: false, titleLines: 3)))
        try expectRoundTrip(table)
        #expect(try TableDocument.decode(TableDocument.encode(table)).options.titleLines == 3)
        try expectRoundTrip(try trickyTable())
    }

    @Test func emptyTablesAndEmptySectionsRoundTrip() throws {
        try expectRoundTrip(Table())
        try expectRoundTrip(try Table(options: TableOptions(), sections: [Section(key: "a", title: "A", detail: "", footer: "")], seq: 3))
    }

    @Test func randomTablesRoundTrip() throws {
        var rng = SplitMix(state: 12)
        for _ in 0..<300 { try expectRoundTrip(try randomTable(&rng)) }
    }

    @Test func theExampleOfTheProtocolArticleImports() throws {
        let text =
            #"{"options":{"sectionsInitiallyCollapsed":false,"collapsedIndicator":"+","expandedIndicator":"−","accordion":false,"busyThresholdMs":500,"#
            + #""showBusyIndicator":true,"titleLines":0},"#
            + #""sections":[{"key":"mac","title":"Mac","detail":"3 items","footer":"Desktops and laptops","collapsed":false,"busy":false,"rowCount":1,"#
            + #""rows":[{"key":"r1","label":"MacBook Air","value":"M3","detail":"13-inch"}]},"#
            + #"{"key":"empty","title":"Empty","collapsed":true,"busy":false,"rowCount":0,"rows":[]}]}"#
        let table = try TableDocument.decode(Array(text.utf8))
        #expect(table.options == TableOptions())
        #expect(
            table.sections == [
                Section(
                    key: "mac", title: "Mac", detail: "3 items", footer: "Desktops and laptops",
                    rows: [Row(key: "r1", label: "MacBook Air", value: "M3", detail: "13-inch")]),
                Section(key: "empty", title: "Empty", collapsed: true),
            ])
        #expect(TableDocument.encode(table) == Array(text.utf8))
        // A document exported before showBusyIndicator and titleLines imports with their defaults.
        let older = text.replacing(#","showBusyIndicator":true,"titleLines":0"#, with: "")
        #expect(older != text)
        #expect(try TableDocument.decode(Array(older.utf8)).options == TableOptions())
    }

    @Test func aHandWrittenDocumentMayLeaveOutBusyAndTheRowsOfEmptySections() throws {
        let table = try TableDocument.decode(
            Self.document(
                #"{"key":"a","title":"A","collapsed":true,"rowCount":0},{"key":"b","title":"B","collapsed":false,"rowCount":1,"rows":[{"key":"b1","label":"one","value":""}]}"#
            ))
        #expect(
            table.sections == [Section(key: "a", title: "A", collapsed: true), Section(key: "b", title: "B", rows: [Row(key: "b1", label: "one")])])
        #expect(table.options.expandedIndicator == "-")
    }

    static let refused: [(String, String, ProtocolError.Code, String)] = [
        (#"{"key":"a","title":"A","collapsed":false,"rowCount":1,"rows":[{"key":"r","value":""}]}"#, "", .missingField, "sections[0].rows[0].label"),
        (#"{"key":"a","title":"","collapsed":false,"rowCount":0}"#, "", .invalidValue, "sections[0].title"),
        (#"{"key":"a b","title":"A","collapsed":false,"rowCount":0}"#, "", .invalidValue, "sections[0].key"),
        (
            #"{"key":"a","title":"A","collapsed":false,"rowCount":2,"rows":[{"key":"r","label":"x","value":""},{"key":"r/2","label":"y","value":""}]}"#,
            "", .invalidValue, "sections[0].rows[1].key"
        ),
        (
            #"{"key":"a","title":"A","collapsed":false,"rowCount":1,"rows":[{"key":"r","label":"x","value":""}]},{"key":"b","title":"B","collapsed":false,"rowCount":1,"rows":[{"key":"r","label":"y","value":""}]}"#,
            "", .duplicateKey, "sections[1].rows[0].key"
        ),
        (
            #"{"key":"a","title":"A","collapsed":false,"rowCount":0},{"key":"a","title":"B","collapsed":false,"rowCount":0}"#, "", .duplicateKey,
            "sections[1].key"
        ),
        (#"{"key":"a","title":"A","collapsed":false,"rowCount":1,"rows":[]}"#, "", .invalidValue, "sections[0].rowCount"),
        (#"{"key":"a","title":"A","collapsed":false,"rowCount":2}"#, "", .missingField, "sections[0].rows"),
        (#"{"key":"a","title":"A","rowCount":0}"#, "", .missingField, "sections[0].collapsed"),
        (#"{"key":"a","title":7,"collapsed":false,"rowCount":0}"#, "", .wrongType, "sections[0].title"),
        ("[]", "", .wrongType, "sections[0]"),
        (
            "", #"{"sectionsInitiallyCollapsed":false,"collapsedIndicator":"","expandedIndicator":"-","accordion":false,"busyThresholdMs":500}"#,
            .invalidValue, "options.collapsedIndicator"
        ),
        (
            "", #"{"sectionsInitiallyCollapsed":false,"collapsedIndicator":"+","expandedIndicator":"-","accordion":false,"busyThresholdMs":-1}"#,
            .invalidValue, "options.busyThresholdMs"
        ),
        (
            "", #"{"collapsedIndicator":"+","expandedIndicator":"-","accordion":false,"busyThresholdMs":1}"#, .missingField,
            "options.sectionsInitiallyCollapsed"
        ),
        (
            "",
            #"{"sectionsInitiallyCollapsed":false,"collapsedIndicator":"+","expandedIndicator":"-","accordion":false,"busyThresholdMs":1,"titleLines":11}"#,
            .invalidValue, "options.titleLines"
        ),
        (
            "",
            #"{"sectionsInitiallyCollapsed":false,"collapsedIndicator":"+","expandedIndicator":"-","accordion":false,"busyThresholdMs":1,"showBusyIndicator":0}"#,
            .wrongType, "options.showBusyIndicator"
        ),
    ]

    @Test(arguments: refused)
    func refusalsNameTheFieldByItsPath(sections: String, options: String, code: ProtocolError.Code, field: String) {
        let error = refusal({ _ = try TableDocument.decode(Self.document(sections, options: options.isEmpty ? Self.options : options)) })
        #expect(error?.code == code, "\(String(describing: error))")
        #expect(error?.field == field, "\(String(describing: error))")
        // The message names the path too: the field's, or that of the object holding it.
        let holder = field.split(separator: ".").dropLast().joined(separator: ".")
        #expect(error?.message.contains(holder.isEmpty ? field : holder) == true, "\(String(describing: error))")
    }

    @Test func limitsAreCheckedWithThePathOfWhatPassesThem() {
        var limits = TableLimits()
        limits.maxSections = 2
        let sections =
            #"{"key":"a","title":"A","collapsed":false,"rowCount":0},{"key":"b","title":"B","collapsed":false,"rowCount":0},{"key":"c","title":"C","collapsed":false,"rowCount":0}"#
        let tooMany = refusal({ _ = try TableDocument.decode(Self.document(sections), limits: limits) })
        #expect(tooMany?.code == .limitReached)
        #expect(tooMany?.field == "sections[2]")
        #expect(tooMany?.message == "sections[2]: the table already has 2 sections")

        limits = TableLimits()
        limits.maxRowsPerSection = 1
        let rows =
            #"{"key":"a","title":"A","collapsed":false,"rowCount":2,"rows":[{"key":"r1","label":"x","value":""},{"key":"r2","label":"y","value":""}]}"#
        let tooManyRows = refusal({ _ = try TableDocument.decode(Self.document(rows), limits: limits) })
        #expect(tooManyRows?.code == .limitReached)
        #expect(tooManyRows?.field == "sections[0].rows[1]")

        limits = TableLimits()
        limits.maxTextBytes = 4
        let long = refusal({
            _ = try TableDocument.decode(Self.document(#"{"key":"a","title":"Alpha","collapsed":false,"rowCount":0}"#), limits: limits)
        })
        #expect(long?.code == .tooLong)
        #expect(long?.message == "sections[0].title is longer than 4 bytes")
        #expect(long?.field == "sections[0].title")
    }

    @Test func malformedJSONIsRefused() {
        #expect(refusal({ _ = try TableDocument.decode(Self.document("") + Array("x".utf8)) })?.code == .badJSON)
        #expect(refusal({ _ = try TableDocument.decode(Array("[1]".utf8)) })?.code == .wrongType)
        #expect(refusal({ _ = try TableDocument.decode(Array(#"{"options":{},"sections":{}}"#.utf8)) })?.code == .missingField)
        #expect(refusal({ _ = try TableDocument.decode([0xFF]) })?.code == .badJSON)
        let deep = Array((String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)).utf8)
        #expect(refusal({ _ = try TableDocument.decode(deep) })?.code == .tooDeep)
        let huge = Self.document(#"{"key":"a","title":""# + String(repeating: "x", count: 100_000) + #"","collapsed":false,"rowCount":0}"#)
        #expect(refusal({ _ = try TableDocument.decode(huge) })?.code == .tooLong)
    }
}
