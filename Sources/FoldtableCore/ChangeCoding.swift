extension Change {
    /// Decodes a change from a message object whose `type` is one of ``Change/typeNames``.
    /// Used for client requests and for the `change` object inside events.
    public static func decode(_ reader: FieldReader, type: String) throws(ProtocolError) -> Change {
        switch type {
        case "toggle":
            return .toggle(section: try reader.sectionRef())
        case "set":
            return .setCollapsed(section: try reader.sectionRef(), collapsed: try reader.bool("collapsed"))
        case "setAll":
            return .setAll(collapsed: try reader.bool("collapsed"))
        case "reveal":
            return .reveal(row: try reader.string("row"))
        case "addSection":
            return .addSection(
                NewSection(
                    key: try reader.optionalString("key"), title: try reader.string("title"),
                    detail: try reader.optionalString("detail"), footer: try reader.optionalString("footer"),
                    collapsed: try reader.optionalBool("collapsed"), index: try reader.optionalIndex("index")))
        case "removeSection":
            return .removeSection(section: try reader.sectionRef())
        case "updateSection":
            let set = try reader.object("set")
            return .updateSection(
                section: try reader.sectionRef(),
                patch: SectionPatch(
                    title: try set.optionalString("title"), detail: try set.clearableString("detail"),
                    footer: try set.clearableString("footer")))
        case "moveSection":
            guard let index = try reader.optionalIndex("index") else {
                throw ProtocolError(.missingField, "index is missing", field: "index")
            }
            return .moveSection(section: try reader.sectionRef(), index: index)
        case "addRow":
            // In events the row travels whole under "row"; in requests its fields are top-level.
            let fields = reader.has("row") ? try reader.object("row") : reader
            let section = try reader.sectionRef()
            var row = try newRow(fields)
            row.index = try reader.optionalIndex("index")
            return .addRow(section: section, row: row)
        case "removeRow":
            return .removeRow(row: try reader.string("row"))
        case "updateRow":
            let set = try reader.object("set")
            return .updateRow(
                row: try reader.string("row"),
                patch: RowPatch(
                    label: try set.optionalString("label"), value: try set.optionalString("value"),
                    detail: try set.clearableString("detail")))
        case "moveRow":
            return .moveRow(row: try reader.string("row"), section: try reader.sectionRef(), index: try reader.optionalIndex("index"))
        case "setOptions":
            let options = try reader.object("options")
            return .setOptions(
                OptionsPatch(
                    sectionsInitiallyCollapsed: try options.optionalBool("sectionsInitiallyCollapsed"),
                    collapsedIndicator: try options.optionalString("collapsedIndicator"),
                    expandedIndicator: try options.optionalString("expandedIndicator"),
                    accordion: try options.optionalBool("accordion"),
                    busyThresholdMs: try options.optionalIndex("busyThresholdMs", in: 0...Int64(Int32.max)),
                    showBusyIndicator: try options.optionalBool("showBusyIndicator"),
                    titleLines: try options.optionalIndex("titleLines", in: 0...Int64(Int32.max))))
        case "importRows":
            let section = try reader.sectionRef()
            let replace = try reader.optionalBool("replace") ?? true
            let count = try reader.optionalIndex("count")
            guard reader.has("rows") else {
                // The form members receive: the rows follow in `rows` chunks.
                guard let count else { throw ProtocolError(.missingField, "rows is missing", field: "rows") }
                return .importRows(section: section, rows: RowImport(count: count, replace: replace))
            }
            let elements = try reader.array("rows")
            if let count, count != elements.count {
                throw ProtocolError(.invalidValue, "count is \(count) but rows holds \(elements.count)", field: "count")
            }
            var rows: [NewRow] = []
            rows.reserveCapacity(elements.count)
            for (index, element) in elements.enumerated() {
                rows.append(try newRow(try FieldReader(element, path: "rows.\(index).")))
            }
            return .importRows(section: section, rows: RowImport(rows: rows, replace: replace))
        case "undo", "redo":
            return .undo(try UndoChange.decode(reader, redo: type == "redo"))
        default:
            throw ProtocolError(.unknownType, "unknown message type \"\(type.prefix(32))\"", field: "type")
        }
    }

    /// A row's `key`, `label`, `value` and `detail` (no index).
    static func newRow(_ fields: FieldReader) throws(ProtocolError) -> NewRow {
        NewRow(
            key: try fields.optionalString("key"), label: try fields.string("label"), value: try fields.optionalString("value") ?? "",
            detail: try fields.optionalString("detail"))
    }

    /// How much of a change to write.
    public enum Form: Sendable {
        /// Everything: requests, the log, digests.
        case whole
        /// What members receive in an event: an import's rows are left out (they follow in `rows`
        /// chunks), its `count` stays.
        case forMembers
    }

    /// Whether the form members receive is the whole change, so that an event encoded once for
    /// members is also what the log stores. Not for an import that carries rows: members get
    /// them in `rows` chunks, the log keeps them.
    public var membersGetWholeForm: Bool {
        switch self {
        case .importRows(_, let imported): return !imported.carriesRows
        // Members get neither its expectations nor the rows of an import inside it.
        case .undo: return false
        default: return true
        }
    }

    /// Writes the change as a JSON object (`{"type":...,...}`), fields in a fixed order.
    public func encode(into out: inout JSONWriter, form: Form = .whole) {
        out.raw(header)
        switch self {
        case .toggle(let ref):
            Self.write(ref, into: &out)
        case .setCollapsed(let ref, let collapsed):
            Self.write(ref, into: &out)
            out.nextKey("collapsed")
            out.bool(collapsed)
        case .setAll(let collapsed):
            out.nextKey("collapsed")
            out.bool(collapsed)
        case .reveal(let row):
            out.nextKey("row")
            out.string(row)
        case .addSection(let new):
            if let key = new.key {
                out.nextKey("key")
                out.string(key)
            }
            out.nextKey("title")
            out.string(new.title)
            if let detail = new.detail {
                out.nextKey("detail")
                out.string(detail)
            }
            if let footer = new.footer {
                out.nextKey("footer")
                out.string(footer)
            }
            if let collapsed = new.collapsed {
                out.nextKey("collapsed")
                out.bool(collapsed)
            }
            if let index = new.index {
                out.nextKey("index")
                out.integer(index)
            }
        case .removeSection(let ref):
            Self.write(ref, into: &out)
        case .updateSection(let ref, let patch):
            Self.write(ref, into: &out)
            out.nextKey("set")
            out.byte(UInt8(ascii: "{"))
            var first = true
            if let title = patch.title { Self.member("title", title, first: &first, into: &out) }
            if let detail = patch.detail { Self.member("detail", detail, first: &first, into: &out) }
            if let footer = patch.footer { Self.member("footer", footer, first: &first, into: &out) }
            out.byte(UInt8(ascii: "}"))
        case .moveSection(let ref, let index):
            Self.write(ref, into: &out)
            out.nextKey("index")
            out.integer(index)
        case .addRow(let ref, let row):
            Self.write(ref, into: &out)
            if let index = row.index {
                out.nextKey("index")
                out.integer(index)
            }
            out.nextKey("row")
            Self.write(row, into: &out)
        case .removeRow(let row):
            out.nextKey("row")
            out.string(row)
        case .updateRow(let row, let patch):
            out.nextKey("row")
            out.string(row)
            out.nextKey("set")
            out.byte(UInt8(ascii: "{"))
            var first = true
            if let label = patch.label { Self.member("label", label, first: &first, into: &out) }
            if let value = patch.value { Self.member("value", value, first: &first, into: &out) }
            if let detail = patch.detail { Self.member("detail", detail, first: &first, into: &out) }
            out.byte(UInt8(ascii: "}"))
        case .moveRow(let row, let ref, let index):
            out.nextKey("row")
            out.string(row)
            Self.write(ref, into: &out)
            if let index {
                out.nextKey("index")
                out.integer(index)
            }
        case .setOptions(let patch):
            out.nextKey("options")
            out.byte(UInt8(ascii: "{"))
            var first = true
            func flag(_ name: StaticString, _ value: Bool?) {
                guard let value else { return }
                if !first { out.byte(UInt8(ascii: ",")) }
                first = false
                out.key(name)
                out.bool(value)
            }
            flag("sectionsInitiallyCollapsed", patch.sectionsInitiallyCollapsed)
            if let value = patch.collapsedIndicator { Self.member("collapsedIndicator", value, first: &first, into: &out) }
            if let value = patch.expandedIndicator { Self.member("expandedIndicator", value, first: &first, into: &out) }
            flag("accordion", patch.accordion)
            func number(_ name: StaticString, _ value: Int?) {
                guard let value else { return }
                if !first { out.byte(UInt8(ascii: ",")) }
                first = false
                out.key(name)
                out.integer(value)
            }
            number("busyThresholdMs", patch.busyThresholdMs)
            flag("showBusyIndicator", patch.showBusyIndicator)
            number("titleLines", patch.titleLines)
            out.byte(UInt8(ascii: "}"))
        case .importRows(let ref, let imported):
            Self.write(ref, into: &out)
            out.nextKey("replace")
            out.bool(imported.replace)
            out.nextKey("count")
            out.integer(imported.count)
            if form == .whole && imported.carriesRows {
                out.nextKey("rows")
                out.byte(UInt8(ascii: "["))
                for (index, row) in imported.rows.enumerated() {
                    if index > 0 { out.byte(UInt8(ascii: ",")) }
                    Self.write(row, into: &out)
                }
                out.byte(UInt8(ascii: "]"))
            }
        case .undo(let undo):
            undo.encodeFields(into: &out, form: form)
        }
        out.byte(UInt8(ascii: "}"))
    }

    /// `{"key":..,"label":..,"value":..,"detail":..}`, key and detail only when given (no index).
    static func write(_ row: NewRow, into out: inout JSONWriter) {
        out.byte(UInt8(ascii: "{"))
        var first = true
        if let key = row.key { member("key", key, first: &first, into: &out) }
        member("label", row.label, first: &first, into: &out)
        member("value", row.value, first: &first, into: &out)
        if let detail = row.detail { member("detail", detail, first: &first, into: &out) }
        out.byte(UInt8(ascii: "}"))
    }

    /// `{"type":"<typeName>"`: the start of the encoded change, one piece.
    var header: StaticString {
        switch self {
        case .toggle: return #"{"type":"toggle""#
        case .setCollapsed: return #"{"type":"set""#
        case .setAll: return #"{"type":"setAll""#
        case .reveal: return #"{"type":"reveal""#
        case .addSection: return #"{"type":"addSection""#
        case .removeSection: return #"{"type":"removeSection""#
        case .updateSection: return #"{"type":"updateSection""#
        case .moveSection: return #"{"type":"moveSection""#
        case .addRow: return #"{"type":"addRow""#
        case .removeRow: return #"{"type":"removeRow""#
        case .updateRow: return #"{"type":"updateRow""#
        case .moveRow: return #"{"type":"moveRow""#
        case .setOptions: return #"{"type":"setOptions""#
        case .importRows: return #"{"type":"importRows""#
        case .undo(let undo): return undo.redo ? #"{"type":"redo""# : #"{"type":"undo""#
        }
    }

    private static func write(_ ref: SectionRef, into out: inout JSONWriter) {
        switch ref {
        case .key(let key):
            out.nextKey("section")
            out.string(key)
        case .title(let title):
            out.nextKey("title")
            out.string(title)
        }
    }

    static func member(_ name: StaticString, _ value: String?, first: inout Bool, into out: inout JSONWriter) {
        if !first { out.byte(UInt8(ascii: ",")) }
        first = false
        out.key(name)
        out.optionalString(value)
    }
}
