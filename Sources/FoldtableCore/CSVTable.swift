/// Tables as CSV (RFC 4180, UTF-8): import a whole table or the rows of one section, export a
/// table or some of its sections.
///
/// The first line names the columns, in any order (names are matched without regard to case or
/// surrounding spaces):
///
/// | Column | Holds | When absent or empty |
/// |---|---|---|
/// | `section` | the section's title | required to import a table |
/// | `label` | the row's label | required; an empty label declares a section without adding a row |
/// | `value` | the row's value | `""` |
/// | `detail` | the row's detail | an unquoted empty field is no detail; a quoted one (`""`) is an empty detail |
/// | `key` | the row's key | allocated as an `addRow` change would (`r<seq>`) |
/// | `section_key` | the section's key | sections are found by title, allocated `s<seq>` when new |
///
/// Any other column is refused, naming it. Every line has exactly as many fields as the header;
/// blank lines are skipped; a leading byte order mark is ignored; lines end in LF or CRLF.
///
/// Lines are read in order and build the table the way changes would: a line whose section has
/// not been seen yet adds it at the end (keys allocated, limits checked and state set exactly as an
/// `addSection` change with only a title and maybe a key), and a line with a label adds a row at
/// the end of its section (as `addRow`). So sections come in order of first appearance, rows in
/// file order, every ``TableLimits`` limit holds, and refusals carry the table's own codes
/// (`too_long`, `limit_reached`, `duplicate_key`, ...) with the line and column in the message.
/// A file that cannot be read at all is `invalid_csv`.
///
/// A line finds its section by `section_key` when it has one (its title must then match the
/// section's), else by title: the one section with that title, new if there is none, and
/// `ambiguous_title` if keyed lines made several.
///
/// Export writes every column, `section,label,value,detail,key,section_key`, one line per row
/// and one line with an empty label per section without rows, so that importing an export gives
/// back the same titles, section keys, section order and rows (labels, values, details, keys),
/// whatever the text holds. Section details, footers, collapsed states and options are not in
/// CSV: ``TableDocument`` carries a whole table.
public enum CSVTable {
    /// The columns this format knows, in the order ``encode(sections:)`` writes them.
    enum Column: String, CaseIterable {
        case section, label, value, detail, key
        case sectionKey = "section_key"
    }

    /// The rows of one section, read by ``decodeRows(_:limits:)``.
    public struct SectionRows: Equatable, Sendable {
        /// The `section` column's value (the same on every line); `nil` when the file has no such
        /// column, no lines, or leaves it empty. The caller compares it with the target section.
        public var title: String?
        /// The `section_key` column's value, likewise.
        public var sectionKey: String?
        /// The rows in file order. `key` is `nil` where the file gives none, for the table to
        /// allocate when they are added; `index` is always `nil` (the end).
        public var rows: [NewRow]

        public init(title: String? = nil, sectionKey: String? = nil, rows: [NewRow] = []) {
            self.title = title
            self.sectionKey = sectionKey
            self.rows = rows
        }
    }

    // MARK: - Export

    /// The whole table as CSV (UTF-8, CRLF line ends, header first).
    public static func encode(_ table: Table) -> [UInt8] {
        encode(sections: table.sections)
    }

    /// These sections as CSV, in this order; each section's rows, or one line if it has none.
    public static func encode(sections: some Sequence<Section>) -> [UInt8] {
        var out = CSVWriter(capacity: 4_096)
        for column in Column.allCases { out.field(column.rawValue) }
        out.endRecord()
        for section in sections {
            if section.rows.isEmpty {
                for text in [section.title, "", "", "", "", section.key] { out.field(text) }
                out.endRecord()
            }
            for row in section.rows {
                out.field(section.title)
                out.field(row.label)
                out.field(row.value)
                // Quoted when empty, so an empty detail does not come back as none.
                out.field(row.detail ?? "", forceQuotes: row.detail?.isEmpty == true)
                out.field(row.key)
                out.field(section.key)
                out.endRecord()
            }
        }
        return out.bytes
    }

    // MARK: - Import

    /// A new table built from `bytes` (see the type's description), with `options` (sections
    /// start collapsed only if `options.sectionsInitiallyCollapsed`). Its `seq` is the number of
    /// sections and rows added, so keys it allocates later never meet the ones allocated here.
    /// The caller caps the size of `bytes`; every other limit is `limits`, checked as lines are
    /// read.
    public static func decode(
        _ bytes: some Collection<UInt8>, options: TableOptions = TableOptions(), limits: TableLimits = TableLimits()
    ) throws(ProtocolError) -> Table {
        var parser = CSVParser(Array(bytes), maxFieldBytes: max(limits.maxTextBytes, limits.maxKeyBytes))
        let columns = try Columns.read(&parser, required: [.section, .label])
        var table = Table(options: options, limits: limits)
        // Title -> keys of the sections with it, in order (several only through section_key).
        var keysByTitle: [String: [String]] = [:]
        while let line = try Line.read(&parser, columns) {
            let title = line.text(.section) ?? ""
            let givenKey = line.nonEmptyText(.sectionKey)
            let sectionKey: String
            if let givenKey, let existing = table.section(givenKey) {
                guard existing.title == title else {
                    throw ProtocolError(
                        .invalidValue,
                        "\(line.place(.section)): the section with key \"\(givenKey)\" is titled \"\(existing.title.prefix(64))\" on an earlier line, not \"\(title.prefix(64))\"",
                        field: Column.section.rawValue)
                }
                sectionKey = givenKey
            } else if givenKey == nil, let keys = keysByTitle[title] {
                guard keys.count == 1 else {
                    throw ProtocolError(
                        .ambiguousTitle, "\(line.place(.section)): several sections are titled \"\(title.prefix(64))\"; give section_key",
                        field: Column.section.rawValue)
                }
                sectionKey = keys[0]
            } else {
                do {
                    _ = try table.apply(.addSection(NewSection(key: givenKey, title: title)), by: importer)
                } catch {
                    throw line.locate(error, error.field == "key" ? .sectionKey : (error.field == "title" ? .section : nil))
                }
                sectionKey = table.sections[table.sections.count - 1].key
                keysByTitle[title, default: []].append(sectionKey)
            }
            guard let row = try line.newRow() else { continue }
            do {
                _ = try table.apply(.addRow(section: .key(sectionKey), row: row), by: importer)
            } catch {
                throw line.locate(error, error.field.flatMap(Column.init(rawValue:)))
            }
        }
        return table
    }

    /// The rows of one section, for adding to an existing section. `label` is required;
    /// `section` and `section_key` may be left out, and where present must hold the same value on
    /// every line (they say which section the rows are for: see ``SectionRows``). Lines with an
    /// empty label add no row, so the export of one section imports here too. Each row is
    /// checked as `addRow` checks it (text lengths, key syntax, keys unique within the file) and
    /// there are at most `limits.maxRowsPerSection`; whether the keys are free in the target
    /// table, and whether the rows fit beside the ones it has, is checked when they are added.
    public static func decodeRows(_ bytes: some Collection<UInt8>, limits: TableLimits = TableLimits()) throws(ProtocolError) -> SectionRows {
        var parser = CSVParser(Array(bytes), maxFieldBytes: max(limits.maxTextBytes, limits.maxKeyBytes))
        let columns = try Columns.read(&parser, required: [.label])
        // The rows are added to a scratch table too, so they pass exactly the table's checks.
        let scratchKey = "rows"
        var scratch = try Table(options: TableOptions(), sections: [Section(key: scratchKey, title: scratchKey)], seq: 0, limits: limits)
        var result = SectionRows()
        var first: (line: Int, title: String?, key: String?)?
        while let line = try Line.read(&parser, columns) {
            let title = line.text(.section)
            let key = line.text(.sectionKey)
            if let first {
                for (column, earlier, now) in [(Column.section, first.title, title), (.sectionKey, first.key, key)] where earlier != now {
                    throw ProtocolError(
                        .invalidValue,
                        "\(line.place(column)): every line must name the same section (\"\((earlier ?? "").prefix(64))\" on line \(first.line), \"\((now ?? "").prefix(64))\" here)",
                        field: column.rawValue)
                }
            } else {
                first = (line.number, title, key)
                result.title = title?.isEmpty == false ? title : nil
                result.sectionKey = key?.isEmpty == false ? key : nil
            }
            guard let row = try line.newRow() else { continue }
            do {
                _ = try scratch.apply(.addRow(section: .key(scratchKey), row: row), by: importer)
            } catch {
                throw line.locate(error, error.field.flatMap(Column.init(rawValue:)))
            }
            result.rows.append(row)
        }
        return result
    }

    /// Who the changes that build an imported table are made by (they are never sent or stored).
    private static let importer = Author(client: "import", name: "import")

    /// The header: which field of a line holds which column.
    private struct Columns {
        var positions: [Column: Int] = [:]
        var count = 0

        /// Reads the first line. Names are compared lowercased without surrounding spaces.
        static func read(_ parser: inout CSVParser, required: [Column]) throws(ProtocolError) -> Columns {
            let known = Column.allCases.map(\.rawValue).joined(separator: ", ")
            // More fields than there are columns is refused below (a repeat or an unknown one),
            // with its name; the bound only keeps a hostile header from allocating.
            guard let header = try parser.nextRecord(maxFields: 64) else {
                throw ProtocolError(.invalidCSV, "the CSV is empty: its first line must name the columns (\(known))")
            }
            var columns = Columns(count: header.fields.count)
            for (index, field) in header.fields.enumerated() {
                let name = trimmed(field.text).lowercased()
                guard let column = Column(rawValue: name) else {
                    throw ProtocolError(
                        .invalidCSV,
                        "line \(header.line): column \(index + 1) of the header, \"\(field.text.prefix(64))\", is not one of \(known)",
                        field: String(field.text.prefix(64)))
                }
                guard columns.positions.updateValue(index, forKey: column) == nil else {
                    throw ProtocolError(.invalidCSV, "line \(header.line): the header names the column \(name) twice", field: name)
                }
            }
            for column in required where columns.positions[column] == nil {
                throw ProtocolError(
                    .invalidCSV, "line \(header.line): the header lacks the required column \(column.rawValue) (columns: \(known))",
                    field: column.rawValue)
            }
            parser.columnNames = header.fields.map { trimmed($0.text).lowercased() }
            return columns
        }

        private static func trimmed(_ text: String) -> Substring {
            let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
            guard let start = text.firstIndex(where: { !isSpace($0) }), let end = text.lastIndex(where: { !isSpace($0) }) else { return "" }
            return text[start...end]
        }
    }

    /// One line after the header, read through the header's columns.
    private struct Line {
        let number: Int
        let fields: [CSVParser.Field]
        let columns: Columns

        /// The next line, its number of fields checked against the header; `nil` at the end.
        static func read(_ parser: inout CSVParser, _ columns: Columns) throws(ProtocolError) -> Line? {
            guard let record = try parser.nextRecord(maxFields: columns.count) else { return nil }
            guard record.fields.count == columns.count else {
                throw ProtocolError(.invalidCSV, "line \(record.line) has \(record.fields.count) fields; the header has \(columns.count)")
            }
            return Line(number: record.line, fields: record.fields, columns: columns)
        }

        /// The column's text; `nil` when the file has no such column.
        func text(_ column: Column) -> String? {
            columns.positions[column].map { fields[$0].text }
        }

        func nonEmptyText(_ column: Column) -> String? {
            text(column).flatMap { $0.isEmpty ? nil : $0 }
        }

        /// The row this line adds, or `nil` for a line that only declares its section (empty
        /// label), whose value, detail and key must then be empty too.
        func newRow() throws(ProtocolError) -> NewRow? {
            let label = text(.label) ?? ""
            guard !label.isEmpty else {
                guard nonEmptyText(.value) == nil, nonEmptyText(.detail) == nil, nonEmptyText(.key) == nil else {
                    throw ProtocolError(
                        .invalidValue,
                        "\(place(.label)): an empty label declares a section without adding a row, so value, detail and key must be empty too",
                        field: Column.label.rawValue)
                }
                return nil
            }
            var detail: String?
            if let position = columns.positions[.detail], fields[position].quoted || !fields[position].text.isEmpty {
                detail = fields[position].text
            }
            return NewRow(key: nonEmptyText(.key), label: label, value: text(.value) ?? "", detail: detail)
        }

        /// A refusal of what this line asked, said of the line and of `column` (the table names
        /// the field of a change: `title` where the file says `section`).
        func locate(_ error: ProtocolError, _ column: Column?) -> ProtocolError {
            let present = column.flatMap { columns.positions[$0] == nil ? nil : $0 }
            return error.at(place(present), field: present?.rawValue)
        }

        /// `"line 7, column label"`, or `"line 7"` when no column of the file is at fault.
        func place(_ column: Column?) -> String {
            guard let column, columns.positions[column] != nil else { return "line \(number)" }
            return "line \(number), column \(column.rawValue)"
        }
    }
}
