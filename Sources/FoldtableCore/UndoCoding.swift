// The wire form of an undo or redo inside an event, a log entry or a shared stream:
// `{"type":"undo","of":12,"changes":[...],"restore":{"k":true},"expect":[...]}`. Members get
// it without `expect` and with an import's rows left out, like any other change.

extension UndoChange {
    /// Writes the fields after `"type"`.
    func encodeFields(into out: inout JSONWriter, form: Change.Form) {
        out.nextKey("of")
        out.integer(of)
        out.nextKey("changes")
        out.byte(UInt8(ascii: "["))
        for (index, change) in changes.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            change.encode(into: &out, form: form)
        }
        out.byte(UInt8(ascii: "]"))
        out.nextKey("restore")
        ServerMessage.collapsedMap(restore, into: &out)
        guard form == .whole else { return }
        out.nextKey("expect")
        out.byte(UInt8(ascii: "["))
        for (index, expectation) in expect.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            expectation.encode(into: &out)
        }
        out.byte(UInt8(ascii: "]"))
    }

    /// Reads the fields after `"type"` (an event's, a log entry's or a stream entry's: never a
    /// member's request, which the server does not decode into this).
    static func decode(_ reader: FieldReader, redo: Bool) throws(ProtocolError) -> UndoChange {
        let of = try reader.integer("of")
        guard of > 0 else { throw ProtocolError(.invalidValue, "of must be positive", field: "of") }
        var changes: [Change] = []
        for (index, element) in try reader.array("changes").enumerated() {
            let inner = try FieldReader(element, path: "changes.\(index).")
            let type = try inner.string("type")
            guard type != "undo" && type != "redo" else {
                throw ProtocolError(.invalidValue, "an undo cannot hold another", field: "changes.\(index).type")
            }
            changes.append(try Change.decode(inner, type: type))
        }
        var restore = CollapseEffects()
        if reader.has("restore") {
            for (key, flag) in try reader.object("restore").members {
                guard case .bool(let collapsed) = flag else {
                    throw ProtocolError(.wrongType, "restore.\(key.prefix(64)) must be true or false", field: "restore")
                }
                restore.append(CollapseEffect(key: key, collapsed: collapsed))
            }
        }
        var expect: [UndoExpectation] = []
        if reader.has("expect") {
            for (index, element) in try reader.array("expect").enumerated() {
                expect.append(try UndoExpectation.decode(try FieldReader(element, path: "expect.\(index).")))
            }
        }
        return UndoChange(of: UInt64(of), redo: redo, changes: changes, restore: restore, expect: expect)
    }
}

extension UndoExpectation {
    func encode(into out: inout JSONWriter) {
        var first = true
        out.byte(UInt8(ascii: "{"))
        switch self {
        case .section(let key, let title, let detail, let footer):
            Change.member("is", "section", first: &first, into: &out)
            Change.member("key", key, first: &first, into: &out)
            Change.member("title", title, first: &first, into: &out)
            Change.member("detail", detail, first: &first, into: &out)
            Change.member("footer", footer, first: &first, into: &out)
        case .noSection(let key):
            Change.member("is", "noSection", first: &first, into: &out)
            Change.member("key", key, first: &first, into: &out)
        case .collapsed(let key, let collapsed):
            Change.member("is", "collapsed", first: &first, into: &out)
            Change.member("key", key, first: &first, into: &out)
            out.nextKey("collapsed")
            out.bool(collapsed)
        case .row(let row, let section):
            Change.member("is", "row", first: &first, into: &out)
            Change.member("section", section, first: &first, into: &out)
            out.nextKey("row")
            Change.write(NewRow(key: row.key, label: row.label, value: row.value, detail: row.detail), into: &out)
        case .rows(let section, let count, let digest):
            Change.member("is", "rows", first: &first, into: &out)
            Change.member("section", section, first: &first, into: &out)
            out.nextKey("count")
            out.integer(count)
            // As a string: JSON numbers past 2^53 do not survive every reader.
            Change.member("digest", String(digest, radix: 16), first: &first, into: &out)
        case .options(let options):
            Change.member("is", "options", first: &first, into: &out)
            out.nextKey("options")
            let whole = OptionsPatch(
                sectionsInitiallyCollapsed: options.sectionsInitiallyCollapsed, collapsedIndicator: options.collapsedIndicator,
                expandedIndicator: options.expandedIndicator, accordion: options.accordion, busyThresholdMs: options.busyThresholdMs,
                showBusyIndicator: options.showBusyIndicator, titleLines: options.titleLines)
            // The options object of a `setOptions` change, every option given.
            var inner = JSONWriter()
            Change.setOptions(whole).encode(into: &inner)
            inner.withUnsafeBytes { bytes in
                // `{"type":"setOptions","options":{...}}`: the object after `"options":`.
                let prefix = #"{"type":"setOptions","options":"#.utf8.count
                out.raw(UnsafeRawBufferPointer(rebasing: bytes[prefix..<(bytes.count - 1)]))
            }
        }
        out.byte(UInt8(ascii: "}"))
    }

    static func decode(_ reader: FieldReader) throws(ProtocolError) -> UndoExpectation {
        switch try reader.string("is") {
        case "section":
            return .section(
                key: try reader.string("key"), title: try reader.string("title"), detail: try reader.optionalString("detail"),
                footer: try reader.optionalString("footer"))
        case "noSection":
            return .noSection(key: try reader.string("key"))
        case "collapsed":
            return .collapsed(key: try reader.string("key"), collapsed: try reader.bool("collapsed"))
        case "row":
            let fields = try reader.object("row")
            let row = try Change.newRow(fields)
            guard let key = row.key else { throw ProtocolError(.missingField, "row.key is missing", field: reader.path + "row.key") }
            return .row(Row(key: key, label: row.label, value: row.value, detail: row.detail), section: try reader.string("section"))
        case "rows":
            guard let count = try reader.optionalIndex("count") else {
                throw ProtocolError(.missingField, "count is missing", field: reader.path + "count")
            }
            guard let digest = UInt64(try reader.string("digest"), radix: 16) else {
                throw ProtocolError(.invalidValue, "digest must be hexadecimal", field: reader.path + "digest")
            }
            return .rows(section: try reader.string("section"), count: count, digest: digest)
        case "options":
            guard case .setOptions(let patch) = try Change.decode(reader, type: "setOptions") else {
                throw ProtocolError(.invalidValue, "options are not readable", field: reader.path + "options")
            }
            var options = TableOptions()
            options.merge(patch)
            return .options(options)
        default:
            throw ProtocolError(.invalidValue, "unknown expectation", field: reader.path + "is")
        }
    }
}
