/// A whole table as one JSON document, for import and export: the snapshot format, i.e. the
/// `table` object of a `welcome` with every section's rows.
///
/// ```json
/// {"options":{"sectionsInitiallyCollapsed":false,"collapsedIndicator":"+","expandedIndicator":"−",
///  "accordion":false,"busyThresholdMs":500,"showBusyIndicator":true,"titleLines":0},
///  "sections":[{"key":"mac","title":"Mac","detail":"3 items","footer":"Laptops","collapsed":false,
///   "busy":false,"rowCount":1,"rows":[{"key":"r1","label":"MacBook Air","value":"M3","detail":"13-inch"}]}]}
/// ```
///
/// Export and import round-trip exactly: options, and every section's key, title, detail,
/// footer, collapsed state and rows. `busy` is written as `false` and ignored on import (it is a
/// server's state, not the table's); unknown members are ignored, as in every protocol message.
/// Unlike ``TableSnapshot/table(limits:)``, which trusts what a store wrote, import checks
/// everything against ``TableLimits``, and refusals name the field by its path
/// (`sections[2].rows[0].label`).
public enum TableDocument {
    /// The table as a JSON document (UTF-8, one line).
    public static func encode(_ table: Table) -> [UInt8] {
        var out = JSONWriter(capacity: 256 + table.textBytes + table.rowCount * 48)
        TableSnapshot(table, rows: .all).encode(into: &out)
        return out.bytes
    }

    /// A new table from a document written by ``encode(_:)`` (or by hand in its shape: every
    /// member shown above is required except `detail`, `footer`, `busy`, and the options
    /// `showBusyIndicator` and `titleLines`, which documents exported before them lack and which
    /// then take their defaults; `rowCount` must match
    /// `rows`, which may be left out of a section whose `rowCount` is 0). The table is built as
    /// `addSection` and `addRow` changes would build it, so every limit holds; its `seq` is the
    /// number of sections and rows. The caller caps the size of `bytes`.
    public static func decode(_ bytes: some Collection<UInt8>, limits: TableLimits = TableLimits()) throws(ProtocolError) -> Table {
        // Strings up to the longest a table allows get through the parser, so that a too-long
        // one is refused below with its path; longer ones are refused while parsing.
        let parserLimits = JSONParser.Limits(maxDepth: 32, maxStringBytes: max(limits.maxTextBytes, limits.maxKeyBytes, 4_096))
        let snapshot = try TableSnapshot.decode(try JSONParser.parse(bytes, limits: parserLimits), seq: 0, path: "")
        return try table(from: snapshot, limits: limits)
    }

    private static func table(from snapshot: TableSnapshot, limits: TableLimits) throws(ProtocolError) -> Table {
        let options = snapshot.options
        // The options pass setOptions' checks on an empty table first.
        var scratch = Table(limits: limits)
        do {
            _ = try scratch.apply(
                .setOptions(
                    OptionsPatch(
                        sectionsInitiallyCollapsed: options.sectionsInitiallyCollapsed, collapsedIndicator: options.collapsedIndicator,
                        expandedIndicator: options.expandedIndicator, accordion: options.accordion, busyThresholdMs: options.busyThresholdMs,
                        showBusyIndicator: options.showBusyIndicator, titleLines: options.titleLines)),
                by: importer)
        } catch {
            throw located(error, "options")
        }
        var table = Table(options: scratch.options, limits: limits)
        for (index, section) in snapshot.sections.enumerated() {
            let path = "sections[\(index)]"
            guard let rows = section.rows ?? (section.rowCount == 0 ? [] : nil) else {
                throw ProtocolError(.missingField, "\(path).rows is missing but rowCount is \(section.rowCount)", field: path + ".rows")
            }
            guard rows.count == section.rowCount else {
                throw ProtocolError(.invalidValue, "\(path).rowCount is \(section.rowCount) but rows holds \(rows.count)", field: path + ".rowCount")
            }
            do {
                let new = NewSection(
                    key: section.key, title: section.title, detail: section.detail, footer: section.footer, collapsed: section.collapsed)
                _ = try table.apply(.addSection(new), by: importer)
            } catch {
                throw located(error, path)
            }
            for (rowIndex, row) in rows.enumerated() {
                let rowPath = "\(path).rows[\(rowIndex)]"
                do {
                    let new = NewRow(key: row.key, label: row.label, value: row.value, detail: row.detail)
                    _ = try table.apply(.addRow(section: .key(section.key), row: new), by: importer)
                } catch {
                    // The table says `section` of a full section: the row that did not fit is at fault.
                    var error = error
                    if error.field == "section" { error.field = nil }
                    throw located(error, rowPath)
                }
            }
        }
        return table
    }

    /// The table's refusal of a field of a change, said of the document: the field named by its
    /// path (`title must not be empty` becomes `sections[2].title must not be empty`), or the
    /// path before the sentence when the sentence does not begin with the field's name.
    private static func located(_ error: ProtocolError, _ path: String) -> ProtocolError {
        guard let name = error.field else { return error.at(path, field: path) }
        let field = "\(path).\(name)"
        guard error.message.hasPrefix(name + " ") else { return error.at(path, field: field) }
        return ProtocolError(error.code, field + error.message.dropFirst(name.count), field: field)
    }

    /// Who the changes that build an imported table are made by (they are never sent or stored).
    private static let importer = Author(client: "import", name: "import")
}
