// libFuzzer target for the CSV parser and CSV import and export (CSVParser, CSVTable; issue 29).
//
// Not a SwiftPM target: Tests/fuzz/run.sh builds FoldtableCore instrumented with -enable-testing
// and links this file against it (`@testable`: CSVParser and CSVWriter are internal).
//
// One input is one uploaded file, read three ways: record by record (CSVParser), as a whole
// table (`CSVTable.decode`) and as the rows of one section (`CSVTable.decodeRows`), under small
// limits so that short inputs reach every limit. The target traps (a libFuzzer crash) when one of
// these does not hold:
// - nothing traps, whatever the bytes;
// - records written back with CSVWriter parse to the same texts;
// - an imported table keeps its limits (sections, rows, text bytes) and its indexes agree with
//   its sections and rows;
// - a table's export imports to the same table (titles, keys, order, rows, details), and that
//   table exports to the same bytes;
// - rows read for one section keep the limits, and written back as that section's export, read
//   back the same.

@testable import FoldtableCore

private let limits = smallTableLimits

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCSV(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    checkRecords(bytes)
    checkTable(bytes)
    checkRows(bytes)
    return 0
}

/// Reads every record it can (at most 8 fields of at most 64 bytes).
private func records(_ bytes: [UInt8]) -> (records: [[CSVParser.Field]], complete: Bool) {
    var parser = CSVParser(bytes, maxFieldBytes: 64)
    var records: [[CSVParser.Field]] = []
    while true {
        do {
            guard let record = try parser.nextRecord(maxFields: 8) else { return (records, true) }
            records.append(record.fields)
        } catch {
            return (records, false)
        }
    }
}

/// Records written back parse to the same texts. The writer never starts a file with a byte
/// order mark, which the parser skips: one is put first, so a first field that starts with
/// U+FEFF keeps it.
private func checkRecords(_ bytes: [UInt8]) {
    let (read, complete) = records(bytes)
    guard complete else { return }
    var writer = CSVWriter()
    for record in read {
        for field in record { writer.field(field.text, forceQuotes: field.quoted && field.text.isEmpty) }
        writer.endRecord()
    }
    let (again, completeAgain) = records([0xEF, 0xBB, 0xBF] + writer.bytes)
    require(completeAgain, "records written back do not parse")
    require(again.map { $0.map(\.text) } == read.map { $0.map(\.text) }, "records written back read differently")
}

/// An imported table keeps its limits and exports to a file that imports to the same table.
private func checkTable(_ bytes: [UInt8]) {
    let table: Table
    do {
        table = try CSVTable.decode(bytes, limits: limits)
    } catch {
        require(!error.message.isEmpty, "a refusal without a message")
        return
    }
    checkIndexes(table)
    let exported = CSVTable.encode(table)
    let reimported: Table
    do {
        reimported = try CSVTable.decode(exported, limits: limits)
    } catch {
        fatalError("fuzz invariant: the export of an imported table does not import: \(error.message)")
    }
    require(sameContent(reimported, table), "the export of an imported table imports to another table")
    require(CSVTable.encode(reimported) == exported, "the table imported from an export exports differently")
}

/// What CSV carries of a table: section keys, titles and order; row keys, labels, values,
/// details and order.
private func sameContent(_ a: Table, _ b: Table) -> Bool {
    a.sections.count == b.sections.count
        && zip(a.sections, b.sections).allSatisfy { one, other in
            one.key == other.key && one.title.utf8.elementsEqual(other.title.utf8) && one.rows.count == other.rows.count
                && zip(one.rows, other.rows).allSatisfy { row, otherRow in
                    row.key == otherRow.key && row.label.utf8.elementsEqual(otherRow.label.utf8)
                        && row.value.utf8.elementsEqual(otherRow.value.utf8) && row.detail?.utf8.count == otherRow.detail?.utf8.count
                        && (row.detail ?? "").utf8.elementsEqual((otherRow.detail ?? "").utf8)
                }
        }
}

/// Sections and rows are where the indexes say; counts and text bytes add up within the limits.
private func checkIndexes(_ table: Table) {
    var rows = 0
    var text = 0
    for (position, section) in table.sections.enumerated() {
        require(table.position(ofSection: section.key) == position, "section \(section.key) is not indexed at \(position)")
        require(section.key.utf8.count <= limits.maxKeyBytes, "section key of \(section.key.utf8.count) bytes")
        require(section.title.utf8.count <= limits.maxTextBytes, "section title of \(section.title.utf8.count) bytes")
        text += section.title.utf8.count + (section.detail?.utf8.count ?? 0) + (section.footer?.utf8.count ?? 0)
        require(section.rows.count <= limits.maxRowsPerSection, "section \(section.key) passed its row limit")
        for row in section.rows {
            require(table.sectionKey(ofRow: row.key) == section.key, "row \(row.key) is not indexed in \(section.key)")
            require(row.key.utf8.count <= limits.maxKeyBytes, "row key of \(row.key.utf8.count) bytes")
            for field in [row.label, row.value, row.detail ?? ""] {
                require(field.utf8.count <= limits.maxTextBytes, "row text of \(field.utf8.count) bytes")
            }
            text += row.label.utf8.count + row.value.utf8.count + (row.detail?.utf8.count ?? 0)
            rows += 1
        }
    }
    require(table.rowCount == rows && rows <= limits.maxRowsPerTable, "rowCount \(table.rowCount) but \(rows) rows")
    require(table.textBytes == text && text <= limits.maxTextBytesPerTable, "textBytes \(table.textBytes) but \(text) bytes of text")
    require(table.sections.count <= limits.maxSections, "the table passed its section limit")
}

/// Rows read for one section keep the limits and read back the same from that section's export.
private func checkRows(_ bytes: [UInt8]) {
    let read: CSVTable.SectionRows
    do {
        read = try CSVTable.decodeRows(bytes, limits: limits)
    } catch {
        require(!error.message.isEmpty, "a refusal without a message")
        return
    }
    require(read.rows.count <= limits.maxRowsPerSection, "\(read.rows.count) rows read for one section")
    var keys: Set<String> = []
    for row in read.rows {
        require(!row.label.isEmpty, "a row without a label")
        for field in [row.label, row.value, row.detail ?? ""] {
            require(field.utf8.count <= limits.maxTextBytes, "row text of \(field.utf8.count) bytes")
        }
        if let key = row.key {
            require(key.utf8.count <= limits.maxKeyBytes, "row key of \(key.utf8.count) bytes")
            require(keys.insert(key).inserted, "row key \(key) read twice")
        }
    }
    // Written back as an export of a section holding these rows (keys given to the rows without).
    let rows = read.rows.enumerated().map { index, row in
        Row(key: row.key ?? "fuzz\(index)", label: row.label, value: row.value, detail: row.detail)
    }
    guard Set(rows.map(\.key)).count == rows.count else { return }  // an allocated key met a given one
    let section = Section(key: read.sectionKey ?? "rows", title: read.title ?? "Rows", rows: rows)
    let again: CSVTable.SectionRows
    do {
        again = try CSVTable.decodeRows(CSVTable.encode(sections: [section]), limits: limits)
    } catch {
        fatalError("fuzz invariant: the export of rows read for a section does not read back: \(error.message)")
    }
    require(again.rows.count == rows.count, "\(rows.count) rows read back as \(again.rows.count)")
    for (row, back) in zip(rows, again.rows) {
        require(
            back.key == row.key && back.label.utf8.elementsEqual(row.label.utf8) && back.value.utf8.elementsEqual(row.value.utf8)
                && back.detail?.utf8.count == row.detail?.utf8.count && (back.detail ?? "").utf8.elementsEqual((row.detail ?? "").utf8),
            "row \(row.key) reads back differently")
    }
}
