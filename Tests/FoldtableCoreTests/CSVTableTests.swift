import Testing

@testable import FoldtableCore

/// The refusal `body` throws, or `nil` (recorded as an issue) when it throws none or another error.
func refusal(_ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) -> ProtocolError? {
    do {
        try body()
        Issue.record("expected a refusal", sourceLocation: sourceLocation)
    } catch let error as ProtocolError {
        return error
    } catch {
        Issue.record("unexpected \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// What CSV carries of a table: section keys, titles and order, and rows whole.
func csvContent(_ table: Table) -> [Section] {
    table.sections.map { Section(key: $0.key, title: $0.title, rows: $0.rows) }
}

/// Text that CSV must quote, escape or keep as it is.
func trickyTable() throws -> Table {
    try Table(
        options: TableOptions(),
        sections: [
            Section(
                key: "q", title: "Quotes \"and\", commas",
                rows: [
                    Row(key: "q1", label: "say \"hi\"", value: "a,b,c", detail: "line one\r\nline two"),
                    Row(key: "q2", label: "  padded  ", value: "", detail: ""),
                    Row(key: "q3", label: "emoji 🎉👩‍👩‍👧", value: "naïve café 中文", detail: nil),
                    Row(key: "q4", label: "lf\nonly", value: "\"", detail: ","),
                    Row(key: "q5", label: "\"", value: " ", detail: "\t"),
                ]),
            Section(key: "empty", title: "Empty"),
            Section(key: "dup1", title: "Same", rows: [Row(key: "d1", label: "x")]),
            Section(key: "dup2", title: "Same"),
            Section(key: "multi", title: "Province\nGuangdong", rows: [Row(key: "m1", label: "=SUM(A1)", value: "cr\ronly")]),
        ], seq: 0)
}

/// A random table: text drawn from characters CSV and JSON treat specially, titles that
/// sometimes repeat, details absent, empty or set, sections sometimes empty.
func randomTable(_ rng: inout SplitMix) throws -> Table {
    let pieces = ["a", "Z", "7", " ", ",", "\"", "\r", "\n", "\r\n", "\t", "é", "中", "🎉", "👩‍👩‍👧", "=", "\\", "\u{1}", "'"]
    func text(_ minimum: Int) -> String {
        var out = ""
        for _ in 0..<Int.random(in: minimum...10, using: &rng) { out += pieces.randomElement(using: &rng)! }
        return out
    }
    var options = TableOptions()
    options.accordion = Int.random(in: 0..<4, using: &rng) == 0
    options.sectionsInitiallyCollapsed = Bool.random(using: &rng)
    options.collapsedIndicator = ["+", "▸", "[+]"].randomElement(using: &rng)!
    options.expandedIndicator = ["\u{2212}", "▾", "-"].randomElement(using: &rng)!
    options.busyThresholdMs = Int.random(in: 0...60_000, using: &rng)
    var sections: [Section] = []
    var rowNumber = 0
    var expanded = false
    for number in 0..<Int.random(in: 0...8, using: &rng) {
        // Accordion tables have at most one expanded section.
        let collapsed = options.accordion && expanded ? true : Bool.random(using: &rng)
        expanded = expanded || !collapsed
        let title = Int.random(in: 0..<4, using: &rng) == 0 ? "Same" : text(1)
        var section = Section(key: "s\(number)", title: title, detail: Bool.random(using: &rng) ? text(0) : nil, collapsed: collapsed)
        section.footer = Bool.random(using: &rng) ? text(0) : nil
        for _ in 0..<[0, 1, 3, 12].randomElement(using: &rng)! {
            rowNumber += 1
            let detail: String? = [nil, "", text(1)].randomElement(using: &rng)!
            section.rows.append(Row(key: "k\(rowNumber)", label: text(1), value: text(0), detail: detail))
        }
        sections.append(section)
    }
    return try Table(options: options, sections: sections, seq: 0)
}

func csv(_ text: String) -> [UInt8] { Array(text.utf8) }

/// `bytes` with every CR that comes before an LF removed.
func dropCR(_ bytes: [UInt8]) -> [UInt8] {
    bytes.indices.compactMap { index in
        bytes[index] == 0x0D && index + 1 < bytes.count && bytes[index + 1] == 0x0A ? nil : bytes[index]
    }
}

/// The section with CRLF turned into LF in all its text.
func dropCR(_ section: Section) -> Section {
    func lf(_ text: String) -> String { String(decoding: dropCR(Array(text.utf8)), as: UTF8.self) }
    var copy = section
    copy.title = lf(copy.title)
    copy.rows = copy.rows.map { Row(key: $0.key, label: lf($0.label), value: lf($0.value), detail: $0.detail.map(lf)) }
    return copy
}

@Suite struct CSVExport {
    @Test func exportWritesTheHeaderThenOneLinePerRowAndPerEmptySection() throws {
        let table = try sampleTable()
        let text = String(decoding: CSVTable.encode(table), as: UTF8.self)
        #expect(
            text
                == "section,label,value,detail,key,section_key\r\nAlpha,one,,,a1,a\r\nAlpha,two,,,a2,a\r\nBeta,three,,,b1,b\r\nGamma,,,,,c\r\n")
    }

    @Test func exportQuotesOnlyWhatMustBeQuotedAndDoublesQuotes() throws {
        let table = try trickyTable()
        let lines = String(decoding: CSVTable.encode(table), as: UTF8.self)
        #expect(lines.contains("\"Quotes \"\"and\"\", commas\",\"say \"\"hi\"\"\",\"a,b,c\",\"line one\r\nline two\",q1,q\r\n"))
        // Spaces at either end are quoted (spreadsheets trim them); an empty detail is `""`.
        #expect(lines.contains(",\"  padded  \",,\"\",q2,q\r\n"))
        // Non-ASCII text is written as it is, no detail is an empty unquoted field.
        #expect(lines.contains(",emoji 🎉👩‍👩‍👧,naïve café 中文,,q3,q\r\n"))
        #expect(lines.contains("\"Province\nGuangdong\",=SUM(A1),\"cr\ronly\",,m1,multi\r\n"))
    }

    @Test func exportOfSomeSectionsWritesOnlyThose() throws {
        let table = try sampleTable()
        let text = String(decoding: CSVTable.encode(sections: [table.sections[1]]), as: UTF8.self)
        #expect(text == "section,label,value,detail,key,section_key\r\nBeta,three,,,b1,b\r\n")
    }
}

@Suite struct CSVRoundTrips {
    @Test func exportThenImportGivesBackTitlesKeysOrderAndRows() throws {
        let table = try trickyTable()
        let imported = try CSVTable.decode(CSVTable.encode(table))
        #expect(csvContent(imported) == csvContent(table))
        #expect(imported.sections.map(\.rows.count) == [5, 0, 1, 0, 1])
        #expect(imported.sections[0].rows[1].detail == "")
        #expect(imported.sections[0].rows[2].detail == nil)
        #expect(CSVTable.encode(imported) == CSVTable.encode(table))
    }

    @Test func theDemoTableRoundTrips() throws {
        let table = DemoTable.make(largeRows: 300)
        let imported = try CSVTable.decode(CSVTable.encode(table))
        #expect(csvContent(imported) == csvContent(table))
    }

    @Test func aTableWithoutSectionsIsJustTheHeader() throws {
        let table = Table()
        #expect(CSVTable.encode(table) == csv("section,label,value,detail,key,section_key\r\n"))
        let imported = try CSVTable.decode(CSVTable.encode(table))
        #expect(imported.sections.isEmpty)
        #expect(imported.seq == 0)
    }

    @Test func aTableOfEmptySectionsRoundTrips() throws {
        let table = try Table(
            options: TableOptions(), sections: [Section(key: "x", title: "X"), Section(key: "y", title: "Y"), Section(key: "z", title: "X")], seq: 9)
        let imported = try CSVTable.decode(CSVTable.encode(table))
        #expect(csvContent(imported) == csvContent(table))
        #expect(imported.rowCount == 0)
    }

    @Test func randomTablesRoundTrip() throws {
        var rng = SplitMix(state: 10)
        for _ in 0..<300 {
            let table = try randomTable(&rng)
            let bytes = CSVTable.encode(table)
            let imported = try CSVTable.decode(bytes)
            #expect(csvContent(imported) == csvContent(table), "\(String(decoding: bytes, as: UTF8.self))")
            // With every CRLF turned into LF, records still end where they did and text inside
            // quotes changes alike.
            let lf = try CSVTable.decode(dropCR(bytes))
            #expect(csvContent(lf) == csvContent(table).map(dropCR))
        }
    }
}

@Suite struct CSVImport {
    @Test func theExampleOfTheProtocolArticleImports() throws {
        let text =
            "section,label,value,detail,key,section_key\nMac,MacBook Air,M3,13-inch,r1,mac\nMac,Mac mini,M4,,r2,mac\n"
            + "\"Province\nGuangdong\",Guangzhou,,\"\",g1,guangdong\nEmpty section,,,,,empty\n"
        let table = try CSVTable.decode(csv(text))
        #expect(
            csvContent(table) == [
                Section(
                    key: "mac", title: "Mac",
                    rows: [Row(key: "r1", label: "MacBook Air", value: "M3", detail: "13-inch"), Row(key: "r2", label: "Mac mini", value: "M4")]),
                Section(key: "guangdong", title: "Province\nGuangdong", rows: [Row(key: "g1", label: "Guangzhou", detail: "")]),
                Section(key: "empty", title: "Empty section"),
            ])
    }

    @Test func rowsWithoutKeysGetTheKeysAddRowWouldGive() throws {
        var table = try CSVTable.decode(csv("section,label\nA,one\nA,two\nB,three\n"))
        #expect(table.sections.map(\.key) == ["s1", "s4"])
        #expect(table.sections.flatMap { $0.rows.map(\.key) } == ["r2", "r3", "r5"])
        #expect(table.seq == 5)
        // Keys the table allocates afterwards never meet the imported ones.
        let event = try apply(&table, .addRow(section: .key("s1"), row: NewRow(label: "four")))
        #expect(event.change == .addRow(section: .key("s1"), row: NewRow(key: "r6", label: "four", index: 2)))
    }

    @Test func sectionsComeInOrderOfFirstAppearanceAndRowsInFileOrder() throws {
        let table = try CSVTable.decode(csv("label,section\n1,B\n2,A\n3,B\n,C\n4,A\n"))
        #expect(table.sections.map(\.title) == ["B", "A", "C"])
        #expect(table.sections.map { $0.rows.map(\.label) } == [["1", "3"], ["2", "4"], []])
    }

    @Test func lfAndCRLFLineEndsReadTheSame() throws {
        let lf = try CSVTable.decode(csv("section,label,value\nA,one,1\nB,\"two\nlines\",2\n"))
        let crlf = try CSVTable.decode(csv("section,label,value\r\nA,one,1\r\nB,\"two\nlines\",2\r\n"))
        #expect(csvContent(lf) == csvContent(crlf))
        #expect(lf.sections[1].rows[0].label == "two\nlines")
    }

    @Test func aByteOrderMarkIsSkipped() throws {
        let table = try CSVTable.decode([0xEF, 0xBB, 0xBF] + csv("section,label\nA,one"))
        #expect(table.sections.map(\.title) == ["A"])
        #expect(table.sections[0].rows.map(\.label) == ["one"])
    }

    @Test func quotedFieldsKeepCommasQuotesLineBreaksAndSpaces() throws {
        let table = try CSVTable.decode(csv("section,label,value,detail\n\"a,b\",\"say \"\"hi\"\"\",\"x\r\ny\",\" lead\"\n"))
        let row = table.sections[0].rows[0]
        #expect(table.sections[0].title == "a,b")
        #expect(row.label == "say \"hi\"")
        #expect(row.value == "x\r\ny")
        #expect(row.detail == " lead")
    }

    @Test func unquotedSpacesAreKept() throws {
        let table = try CSVTable.decode(csv("section,label,value\n A , b ,c \n"))
        #expect(table.sections[0].title == " A ")
        #expect(table.sections[0].rows[0].label == " b ")
        #expect(table.sections[0].rows[0].value == "c ")
    }

    @Test func columnsMayComeInAnyOrderAndCaseAndOptionalOnesMayBeLeftOut() throws {
        let table = try CSVTable.decode(csv(" Label ,SECTION,Key\none,A,k1\n"))
        #expect(table.sections[0].rows == [Row(key: "k1", label: "one", value: "", detail: nil)])
    }

    @Test func blankLinesAndAMissingFinalLineEndAreFine() throws {
        let table = try CSVTable.decode(csv("\n\nsection,label\n\nA,one\r\n\r\nA,two"))
        #expect(table.sections[0].rows.map(\.label) == ["one", "two"])
    }

    @Test func aQuotedEmptyDetailIsEmptyAndAnUnquotedOneIsNone() throws {
        let table = try CSVTable.decode(csv("section,label,detail\nA,one,\"\"\nA,two,\n"))
        #expect(table.sections[0].rows.map(\.detail) == ["", nil])
    }

    @Test func sectionsStartCollapsedWhenTheOptionsSaySo() throws {
        var options = TableOptions()
        #expect(try CSVTable.decode(csv("section,label\nA,one\nB,\n"), options: options).sections.map(\.collapsed) == [false, false])
        options.sectionsInitiallyCollapsed = true
        let table = try CSVTable.decode(csv("section,label\nA,one\nB,\n"), options: options)
        #expect(table.sections.map(\.collapsed) == [true, true])
        #expect(table.options == options)
    }

    @Test func aSectionKeyNamesTheSectionAndTitlesMayRepeat() throws {
        let table = try CSVTable.decode(csv("section,label,section_key\nSame,one,a\nSame,two,b\nSame,three,a\nOther,four,\n"))
        #expect(table.sections.map(\.key) == ["a", "b", "s6"])
        #expect(table.sections.map { $0.rows.map(\.label) } == [["one", "three"], ["two"], ["four"]])
    }

    @Test func aLineWithoutSectionKeyJoinsTheOneSectionWithItsTitle() throws {
        let table = try CSVTable.decode(csv("section,label,section_key\nMac,one,mac\nMac,two,\n"))
        #expect(table.sections.map(\.key) == ["mac"])
        #expect(table.sections[0].rows.map(\.label) == ["one", "two"])
    }
}

@Suite struct CSVRefusals {
    static let malformed: [(String, String, ProtocolError.Code, String)] = [
        ("unclosed quote", "section,label\nA,one\nB,\"two\nthree\n", .invalidCSV, "the quote opened on line 3, column label is never closed"),
        ("text after a closing quote", "section,label\nA,\"one\"x\n", .invalidCSV, "line 2, column label: text after the closing quote"),
        ("quote inside an unquoted field", "section,label\nA,o\"ne\n", .invalidCSV, "line 2, column label: a quote inside an unquoted field"),
        ("too few fields", "section,label,value\nA,one,1\nB,two\n", .invalidCSV, "line 3 has 2 fields; the header has 3"),
        ("too many fields", "section,label\nA,one,1\n", .invalidCSV, "line 2 has more than 2 fields"),
        ("trailing comma", "section,label\nA,one,\n", .invalidCSV, "line 2 has more than 2 fields"),
        ("bare carriage return", "section,label\rA,one\n", .invalidCSV, "line 1, field 2: a carriage return outside quotes"),
        ("empty input", "", .invalidCSV, "the CSV is empty"),
        ("only blank lines", "\r\n\n", .invalidCSV, "the CSV is empty"),
        ("no header", "Mac,MacBook Air,M3\n", .invalidCSV, "column 1 of the header, \"Mac\", is not one of section, label"),
        ("unknown column", "section,label,colour\nA,one,red\n", .invalidCSV, "column 3 of the header, \"colour\""),
        ("repeated column", "section,label,Label\n", .invalidCSV, "the header names the column label twice"),
        ("missing section column", "label,value\none,1\n", .invalidCSV, "lacks the required column section"),
        ("missing label column", "section,value\nA,1\n", .invalidCSV, "lacks the required column label"),
        ("empty title", "section,label\n,one\n", .invalidValue, "line 2, column section: title must not be empty"),
        ("bad row key", "section,label,key\nA,one,a b\n", .invalidValue, "line 2, column key: key may only hold"),
        ("bad section key", "section,label,section_key\nA,one,a/b\n", .invalidValue, "line 2, column section_key: key may only hold"),
        ("repeated row key", "section,label,key\nA,one,k\nB,two,k\n", .duplicateKey, "line 3, column key: the key \"k\" is already used"),
        (
            "section key with another title", "section,label,section_key\nA,one,a\nB,two,a\n", .invalidValue,
            "line 3, column section: the section with key"
        ),
        ("ambiguous title", "section,label,section_key\nA,one,a\nA,two,b\nA,three,\n", .ambiguousTitle, "line 4, column section: several sections"),
        ("empty label with a value", "section,label,value\nA,,1\n", .invalidValue, "line 2, column label: an empty label declares a section"),
    ]

    @Test(arguments: malformed)
    func malformedFilesAreRefusedNamingTheLine(name: String, text: String, code: ProtocolError.Code, message: String) {
        guard let error = refusal({ _ = try CSVTable.decode(csv(text)) }) else { return }
        #expect(error.code == code, "\(name): \(error)")
        #expect(error.message.contains(message), "\(name): \(error.message)")
    }

    @Test func invalidUTF8IsRefusedNamingTheLineAndColumn() {
        let sequences: [[UInt8]] = [[0xFF], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xE2, 0x82], [0x80]]
        for bad in sequences {
            for quoted in [false, true] {
                let field = quoted ? [0x22] + bad + [0x22] : bad
                let bytes = csv("section,label,value\nA,one,1\nB,two,") + field + csv("\nC,three,3\n")
                guard let error = refusal({ _ = try CSVTable.decode(bytes) }) else { continue }
                #expect(error.code == .invalidCSV)
                #expect(error.message.hasPrefix("line 3, column value: invalid UTF-8"), "\(bad): \(error.message)")
                #expect(error.field == "value")
            }
        }
        // At the very end of the input, and inside a quoted field spanning lines.
        #expect(refusal({ _ = try CSVTable.decode(csv("section,label\nA,") + [0xE2]) })?.message.hasPrefix("line 2") == true)
        let spanning = csv("section,label\nA,\"one\ntwo ") + [0xFE] + csv("\"\n")
        #expect(refusal({ _ = try CSVTable.decode(spanning) })?.message.hasPrefix("line 3, column label: invalid UTF-8") == true)
    }

    @Test func validMultiByteTextAtEveryLengthIsAccepted() throws {
        let table = try CSVTable.decode(csv("section,label\nA,\u{7F}\u{80}\u{7FF}\u{800}\u{FFFF}\u{10000}\u{10FFFF}\n"))
        #expect(table.sections[0].rows[0].label == "\u{7F}\u{80}\u{7FF}\u{800}\u{FFFF}\u{10000}\u{10FFFF}")
    }

    @Test func tooManySectionsIsRefusedAtTheLineThatPassesTheLimit() {
        var limits = TableLimits()
        limits.maxSections = 2
        let error = refusal({ _ = try CSVTable.decode(csv("section,label\nA,1\nB,2\nA,3\nC,4\n"), limits: limits) })
        #expect(error?.code == .limitReached)
        #expect(error?.message == "line 5: the table already has 2 sections")
    }

    @Test func tooManyRowsInASectionOrTheTableIsRefused() {
        var limits = TableLimits()
        limits.maxRowsPerSection = 2
        let perSection = refusal({ _ = try CSVTable.decode(csv("section,label\nA,1\nB,2\nA,3\nA,4\n"), limits: limits) })
        #expect(perSection?.code == .limitReached)
        #expect(perSection?.message.hasPrefix("line 5, column section: the section already has 2 rows") == true)
        limits = TableLimits()
        limits.maxRowsPerTable = 3
        let perTable = refusal({ _ = try CSVTable.decode(csv("section,label\nA,1\nB,2\nA,3\nC,4\n"), limits: limits) })
        #expect(perTable?.message == "line 5: the table already has 3 rows")
    }

    @Test func overLongTextIsRefusedNamingTheColumn() {
        var limits = TableLimits()
        limits.maxTextBytes = 8
        let label = refusal({ _ = try CSVTable.decode(csv("section,label\nA,123456789\n"), limits: limits) })
        #expect(label?.code == .tooLong)
        #expect(label?.field == "label")
        #expect(label?.message == "line 2, column label: label is longer than 8 bytes")
        let title = refusal({ _ = try CSVTable.decode(csv("section,label\n\"123\n56789\",x\n"), limits: limits) })
        #expect(title?.field == "section")
        #expect(title?.code == .tooLong)
        limits = TableLimits()
        limits.maxTextBytesPerTable = 10
        let total = refusal({ _ = try CSVTable.decode(csv("section,label,value\nA,one,1\nA,two,2\nA,three,3\n"), limits: limits) })
        #expect(total?.code == .limitReached)
        #expect(total?.message.hasPrefix("line 4: the table already holds its maximum") == true)
    }

    @Test func aHugeFieldIsRefusedWhileReadingIt() {
        let huge = csv("section,label\nA,\"") + [UInt8](repeating: UInt8(ascii: "x"), count: 1_000_000)
        let error = refusal({ _ = try CSVTable.decode(huge) })
        #expect(error?.code == .tooLong)
        #expect(error?.message == "line 2, column label: the field is longer than 1024 bytes")
        let unquoted = csv("section,label\nA,") + [UInt8](repeating: UInt8(ascii: "x"), count: 1_000_000)
        #expect(refusal({ _ = try CSVTable.decode(unquoted) })?.code == .tooLong)
    }

    @Test func aLineOfManyCommasIsRefusedAtTheFirstExtraField() {
        let commas = csv("section,label\nA,b") + [UInt8](repeating: UInt8(ascii: ","), count: 1_000_000)
        #expect(refusal({ _ = try CSVTable.decode(commas) })?.message == "line 2 has more than 2 fields")
        let header = [UInt8](repeating: UInt8(ascii: ","), count: 1_000_000)
        #expect(refusal({ _ = try CSVTable.decode(header) })?.code == .invalidCSV)
    }

    /// Mutated exports: reading them never traps, whatever they hold.
    @Test func mutatedFilesNeverCrashTheImporter() throws {
        var rng = SplitMix(state: 11)
        let seeds = [CSVTable.encode(try trickyTable()), CSVTable.encode(try sampleTable())]
        let splices = ["\"", ",", "\r", "\n", "\r\n", "\"\"", "\u{FEFF}", "é", "🎉"].map { Array($0.utf8) } + [[0xFF], [0xC3], [0xED, 0xA0]]
        var accepted = 0
        for _ in 0..<5_000 {
            var bytes = seeds.randomElement(using: &rng)!
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let position = Int.random(in: 0...bytes.count, using: &rng)
                switch Int.random(in: 0..<4, using: &rng) {
                case 0: if position < bytes.count { bytes[position] = UInt8.random(in: 0...255, using: &rng) }
                case 1: bytes.insert(contentsOf: splices.randomElement(using: &rng)!, at: position)
                case 2: bytes.removeSubrange(position..<min(bytes.count, position + Int.random(in: 1...8, using: &rng)))
                default: bytes = Array(bytes.prefix(position))
                }
            }
            if (try? CSVTable.decode(bytes)) != nil { accepted += 1 }
            _ = try? CSVTable.decodeRows(bytes)
        }
        #expect(accepted > 100)
    }
}

@Suite struct CSVSectionRows {
    @Test func rowsForOneSectionNeedOnlyALabel() throws {
        let rows = try CSVTable.decodeRows(csv("label,value,key\none,1,\ntwo,2,k2\n"))
        #expect(rows.title == nil)
        #expect(rows.sectionKey == nil)
        #expect(rows.rows == [NewRow(label: "one", value: "1"), NewRow(key: "k2", label: "two", value: "2")])
    }

    @Test func theExportOfOneSectionImportsAsItsRows() throws {
        let table = try trickyTable()
        for section in table.sections {
            let rows = try CSVTable.decodeRows(CSVTable.encode(sections: [section]))
            #expect(rows.title == section.title)
            #expect(rows.sectionKey == section.key)
            #expect(rows.rows.map { Row(key: $0.key!, label: $0.label, value: $0.value, detail: $0.detail) } == section.rows)
        }
    }

    @Test func rowsOfSeveralSectionsAreRefused() {
        let byTitle = refusal({ _ = try CSVTable.decodeRows(csv("section,label\nA,one\nB,two\n")) })
        #expect(byTitle?.code == .invalidValue)
        #expect(byTitle?.message == "line 3, column section: every line must name the same section (\"A\" on line 2, \"B\" here)")
        let byKey = refusal({ _ = try CSVTable.decodeRows(csv("section,label,section_key\nA,one,a\nA,two,\n")) })
        #expect(byKey?.field == "section_key")
    }

    @Test func rowsAreCheckedAsAddRowChecksThem() {
        var limits = TableLimits()
        limits.maxRowsPerSection = 2
        let tooMany = refusal({ _ = try CSVTable.decodeRows(csv("label\n1\n2\n3\n"), limits: limits) })
        #expect(tooMany?.code == .limitReached)
        #expect(tooMany?.message == "line 4: the section already has 2 rows")
        #expect(refusal({ _ = try CSVTable.decodeRows(csv("label,key\n1,k\n2,k\n")) })?.code == .duplicateKey)
        #expect(refusal({ _ = try CSVTable.decodeRows(csv("label,key\n1,k k\n")) })?.field == "key")
        #expect(refusal({ _ = try CSVTable.decodeRows(csv("value\n1\n")) })?.message.contains("lacks the required column label") == true)
    }
}
