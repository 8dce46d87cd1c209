/// A table at one sequence number, as sent in `welcome` and kept by stores.
///
/// The compact form (``init(_:rows:busy:)`` with a predicate) carries rows only for the
/// sections the predicate picks — expanded ones small enough to send at once — plus every
/// section's row count; clients get the other rows as `rows` chunks when needed. With
/// ``RowPolicy/all`` it carries everything and ``table(limits:)`` rebuilds the same table.
public struct TableSnapshot: Equatable, Sendable {
    public var seq: UInt64
    public var options: TableOptions
    public var sections: [SectionSnapshot]

    /// Which sections' rows a snapshot carries.
    public enum RowPolicy {
        /// Every section's rows (storage, replication).
        case all
        /// Rows of expanded sections with at most this many rows.
        case expandedUpTo(Int)
        /// Rows of exactly these sections (what a server chooses to send on join).
        case sections(Set<String>)
    }

    public init(seq: UInt64, options: TableOptions, sections: [SectionSnapshot]) {
        self.seq = seq
        self.options = options
        self.sections = sections
    }

    public init(_ table: Table, rows policy: RowPolicy, busy: (String) -> Bool = { _ in false }) {
        self.seq = table.seq
        self.options = table.options
        self.sections = table.sections.map { section in
            let include: Bool
            switch policy {
            case .all: include = true
            case .expandedUpTo(let limit): include = !section.collapsed && section.rows.count <= limit
            case .sections(let keys): include = keys.contains(section.key)
            }
            return SectionSnapshot(
                key: section.key, title: section.title, detail: section.detail, footer: section.footer, collapsed: section.collapsed,
                busy: busy(section.key), rowCount: section.rows.count, rows: include ? section.rows : nil)
        }
    }

    /// Rebuilds the table. Every section's rows must be present (an `.all` snapshot).
    public func table(limits: TableLimits = TableLimits()) throws(ProtocolError) -> Table {
        var built: [Section] = []
        built.reserveCapacity(sections.count)
        for section in sections {
            guard let rows = section.rows ?? (section.rowCount == 0 ? [] : nil) else {
                throw ProtocolError(.invalidValue, "the snapshot lacks the rows of section \"\(section.key)\"", field: "rows")
            }
            built.append(
                Section(
                    key: section.key, title: section.title, detail: section.detail, footer: section.footer, collapsed: section.collapsed, rows: rows))
        }
        return try Table(options: options, sections: built, seq: seq, limits: limits)
    }

    /// Writes `{"options":{...},"sections":[...]}`.
    public func encode(into out: inout JSONWriter) {
        out.byte(UInt8(ascii: "{"))
        out.key("options")
        Self.encode(options, into: &out)
        out.nextKey("sections")
        out.byte(UInt8(ascii: "["))
        for (index, section) in sections.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            section.encode(into: &out)
        }
        out.byte(UInt8(ascii: "]"))
        out.byte(UInt8(ascii: "}"))
    }

    public static func encode(_ options: TableOptions, into out: inout JSONWriter) {
        out.byte(UInt8(ascii: "{"))
        out.key("sectionsInitiallyCollapsed")
        out.bool(options.sectionsInitiallyCollapsed)
        out.nextKey("collapsedIndicator")
        out.string(options.collapsedIndicator)
        out.nextKey("expandedIndicator")
        out.string(options.expandedIndicator)
        out.nextKey("accordion")
        out.bool(options.accordion)
        out.nextKey("busyThresholdMs")
        out.integer(options.busyThresholdMs)
        out.nextKey("showBusyIndicator")
        out.bool(options.showBusyIndicator)
        out.nextKey("titleLines")
        out.integer(options.titleLines)
        out.byte(UInt8(ascii: "}"))
    }

    /// Decodes the object written by ``encode(into:)``; `seq` comes from the enclosing message.
    /// `path` prefixes field names in errors (`table.sections[2].rows[0].label`).
    public static func decode(_ value: JSONValue, seq: UInt64, path: String = "table.") throws(ProtocolError) -> TableSnapshot {
        let reader = try FieldReader(value, path: path)
        let optionsReader = try reader.object("options")
        var options = TableOptions()
        options.sectionsInitiallyCollapsed = try optionsReader.bool("sectionsInitiallyCollapsed")
        options.collapsedIndicator = try optionsReader.string("collapsedIndicator")
        options.expandedIndicator = try optionsReader.string("expandedIndicator")
        options.accordion = try optionsReader.bool("accordion")
        options.busyThresholdMs = Int(try optionsReader.integer("busyThresholdMs"))
        // Added after version 1 of the checkpoint format and the protocol: snapshots written
        // before them (stored checkpoints, older servers' welcomes) lack them and get the defaults.
        options.showBusyIndicator = try optionsReader.optionalBool("showBusyIndicator") ?? options.showBusyIndicator
        options.titleLines = try optionsReader.optionalIndex("titleLines", in: 0...Int64(Int32.max)) ?? options.titleLines
        var sections: [SectionSnapshot] = []
        for (index, element) in try reader.array("sections").enumerated() {
            sections.append(try SectionSnapshot.decode(element, path: "\(path)sections[\(index)]."))
        }
        return TableSnapshot(seq: seq, options: options, sections: sections)
    }
}

/// One section in a ``TableSnapshot``.
public struct SectionSnapshot: Equatable, Sendable {
    public var key: String
    public var title: String
    public var detail: String?
    public var footer: String?
    public var collapsed: Bool
    public var busy: Bool
    public var rowCount: Int
    /// `nil` when the snapshot does not carry this section's rows.
    public var rows: [Row]?

    public init(key: String, title: String, detail: String?, footer: String?, collapsed: Bool, busy: Bool, rowCount: Int, rows: [Row]?) {
        self.key = key
        self.title = title
        self.detail = detail
        self.footer = footer
        self.collapsed = collapsed
        self.busy = busy
        self.rowCount = rowCount
        self.rows = rows
    }

    public func encode(into out: inout JSONWriter) {
        out.byte(UInt8(ascii: "{"))
        out.key("key")
        out.string(key)
        out.nextKey("title")
        out.string(title)
        if let detail {
            out.nextKey("detail")
            out.string(detail)
        }
        if let footer {
            out.nextKey("footer")
            out.string(footer)
        }
        out.nextKey("collapsed")
        out.bool(collapsed)
        out.nextKey("busy")
        out.bool(busy)
        out.nextKey("rowCount")
        out.integer(rowCount)
        if let rows {
            out.nextKey("rows")
            Row.encode(rows[...], into: &out)
        }
        out.byte(UInt8(ascii: "}"))
    }

    /// `path` prefixes field names in errors.
    public static func decode(_ value: JSONValue, path: String = "section.") throws(ProtocolError) -> SectionSnapshot {
        let reader = try FieldReader(value, path: path)
        var rows: [Row]?
        if reader.has("rows") {
            var decoded: [Row] = []
            for (index, element) in try reader.array("rows").enumerated() {
                decoded.append(try Row.decode(element, path: "\(path)rows[\(index)]."))
            }
            rows = decoded
        }
        return SectionSnapshot(
            key: try reader.string("key"), title: try reader.string("title"), detail: try reader.optionalString("detail"),
            footer: try reader.optionalString("footer"), collapsed: try reader.bool("collapsed"), busy: try reader.optionalBool("busy") ?? false,
            rowCount: Int(try reader.integer("rowCount")), rows: rows)
    }
}

extension Row {
    /// Writes `{"key":..,"label":..,"value":..[,"detail":..]}`.
    public func encode(into out: inout JSONWriter) {
        out.byte(UInt8(ascii: "{"))
        out.key("key")
        out.string(key)
        out.nextKey("label")
        out.string(label)
        out.nextKey("value")
        out.string(value)
        if let detail {
            out.nextKey("detail")
            out.string(detail)
        }
        out.byte(UInt8(ascii: "}"))
    }

    /// Writes a JSON array of rows.
    public static func encode(_ rows: ArraySlice<Row>, into out: inout JSONWriter) {
        out.byte(UInt8(ascii: "["))
        var first = true
        for row in rows {
            if !first { out.byte(UInt8(ascii: ",")) }
            first = false
            row.encode(into: &out)
        }
        out.byte(UInt8(ascii: "]"))
    }

    /// `path` prefixes field names in errors.
    public static func decode(_ value: JSONValue, path: String = "row.") throws(ProtocolError) -> Row {
        let reader = try FieldReader(value, path: path)
        return Row(
            key: try reader.string("key"), label: try reader.string("label"), value: try reader.string("value"),
            detail: try reader.optionalString("detail"))
    }
}
