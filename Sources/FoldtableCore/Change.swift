/// Something a member asks to do to a table.
///
/// The same type describes a request (sections possibly by title, keys and positions possibly
/// left to the server) and, inside a ``TableEvent``, the change as the table resolved it
/// (sections by key, allocated keys and positions filled in). Applying a resolved change to a
/// replica at the same sequence number gives the same result, which is what replication and
/// storage replay.
///
/// The cases with large payloads are `indirect` (boxed): inline, the largest (`addSection`,
/// `setOptions`) made every change 104 bytes, and with it every event (280) and every entry a
/// session keeps for the log (400: an append of four made malloc's slow path take a kilobyte,
/// consolidating its free lists each time). Boxed, a change is as large as a toggle or a
/// section move needs. Toggles, set-collapsed, expand-all, reveal and removals stay inline; the
/// boxed cases pay one allocation each, small beside the text they carry and check.
public enum Change: Equatable, Sendable {
    case toggle(section: SectionRef)
    case setCollapsed(section: SectionRef, collapsed: Bool)
    /// Collapse (`true`) or expand (`false`) every section.
    case setAll(collapsed: Bool)
    /// Make a row visible: expands its section if collapsed.
    case reveal(row: String)
    indirect case addSection(NewSection)
    case removeSection(section: SectionRef)
    indirect case updateSection(section: SectionRef, patch: SectionPatch)
    case moveSection(section: SectionRef, index: Int)
    indirect case addRow(section: SectionRef, row: NewRow)
    case removeRow(row: String)
    indirect case updateRow(row: String, patch: RowPatch)
    /// Move a row to `index` of `section` (which may be its own); `nil` index = the end.
    indirect case moveRow(row: String, section: SectionRef, index: Int?)
    indirect case setOptions(OptionsPatch)
    /// Rows brought into one section at once (an import): they replace its rows or follow them.
    indirect case importRows(section: SectionRef, rows: RowImport)
    /// An author's undo or redo as the server resolved it (``UndoChange``). Never sent by
    /// members, who send `undo`/`redo` messages; not in ``typeNames``.
    indirect case undo(UndoChange)

    /// The wire name of the change (`type` field).
    public var typeName: String {
        switch self {
        case .toggle: return "toggle"
        case .setCollapsed: return "set"
        case .setAll: return "setAll"
        case .reveal: return "reveal"
        case .addSection: return "addSection"
        case .removeSection: return "removeSection"
        case .updateSection: return "updateSection"
        case .moveSection: return "moveSection"
        case .addRow: return "addRow"
        case .removeRow: return "removeRow"
        case .updateRow: return "updateRow"
        case .moveRow: return "moveRow"
        case .setOptions: return "setOptions"
        case .importRows: return "importRows"
        case .undo(let undo): return undo.redo ? "redo" : "undo"
        }
    }

    /// Whether the change only sets collapsed states (a toggle, `set`, `setAll`, `reveal`): what
    /// a member in a private view changes for itself alone.
    public var isCollapseOnly: Bool {
        switch self {
        case .toggle, .setCollapsed, .setAll, .reveal: return true
        default: return false
        }
    }

    /// Every change type name the protocol knows.
    public static let typeNames: Set<String> = [
        "toggle", "set", "setAll", "reveal", "addSection", "removeSection", "updateSection", "moveSection",
        "addRow", "removeRow", "updateRow", "moveRow", "setOptions", "importRows",
    ]
}

/// A section to add. `nil` fields are decided by the table (key from the sequence number,
/// position at the end, state from `sectionsInitiallyCollapsed`).
public struct NewSection: Equatable, Sendable {
    public var key: String?
    public var title: String
    public var detail: String?
    public var footer: String?
    public var collapsed: Bool?
    public var index: Int?

    public init(key: String? = nil, title: String, detail: String? = nil, footer: String? = nil, collapsed: Bool? = nil, index: Int? = nil) {
        self.key = key
        self.title = title
        self.detail = detail
        self.footer = footer
        self.collapsed = collapsed
        self.index = index
    }
}

/// A row to add. `nil` key and index are decided by the table.
public struct NewRow: Equatable, Sendable {
    public var key: String?
    public var label: String
    public var value: String
    public var detail: String?
    public var index: Int?

    public init(key: String? = nil, label: String, value: String = "", detail: String? = nil, index: Int? = nil) {
        self.key = key
        self.label = label
        self.value = value
        self.detail = detail
        self.index = index
    }
}

/// The rows of an `importRows` change.
///
/// Members never receive the rows inside the event: a section of 50,000 rows would be one frame of
/// megabytes in every member's queue. The event they get carries ``count`` only, and the rows follow
/// in `rows` chunks to the members that have the section expanded, exactly as for an expansion
/// (streamed, paced and shown busy when large). The log stores the change whole.
public struct RowImport: Equatable, Sendable {
    /// The rows in order. Keys are filled in once the table resolved the change; `index` is
    /// ignored. Empty in the form members receive (see ``count``).
    public var rows: [NewRow]
    /// How many rows were imported: `rows.count`, except in the form members receive.
    public var count: Int
    /// Whether the rows replace the section's (`true`) or are added after them.
    public var replace: Bool

    /// An import of `rows`.
    public init(rows: [NewRow], replace: Bool = true) {
        self.rows = rows
        self.count = rows.count
        self.replace = replace
    }

    /// The form members receive: how many rows, not the rows.
    public init(count: Int, replace: Bool) {
        self.rows = []
        self.count = count
        self.replace = replace
    }

    /// Whether the rows themselves are here (a request, or the change as the log stores it).
    public var carriesRows: Bool { rows.count == count }
}

/// Which sections a change may read or write, worked out without applying it: what the server
/// uses to hold a change back while one of its sections is busy.
public enum ChangeScope: Equatable, Sendable {
    /// These sections (by key).
    case sections([String])
    /// Possibly every section (expand/collapse all, options that collapse others).
    case table
}

extension Table {
    /// The sections `change` would touch. Unresolvable references give an empty scope: applying
    /// the change will then be refused anyway.
    public func scope(of change: Change) -> ChangeScope {
        func key(_ ref: SectionRef) -> [String] {
            switch ref {
            case .key(let key): return section(key) == nil ? [] : [key]
            case .title(let title): return sections.filter { $0.title == title }.map(\.key)
            }
        }
        func rowSection(_ row: String) -> [String] { sectionKey(ofRow: row).map { [$0] } ?? [] }
        switch change {
        case .setAll, .setOptions: return .table
        case .undo(let undo):
            // What its parts touch and the states it sets back; a request not resolved yet
            // could touch anything.
            guard !undo.isRequest else { return .table }
            var keys = undo.restore.map(\.key)
            for part in undo.changes {
                if case .addSection(let new) = part, let key = new.key {
                    keys.append(key)
                    continue
                }
                switch scope(of: part) {
                case .table: return .table
                case .sections(let touched): keys += touched
                }
            }
            return .sections(keys)
        case .toggle(let ref), .setCollapsed(let ref, _):
            return options.accordion ? .table : .sections(key(ref))
        case .reveal(let row):
            return options.accordion ? .table : .sections(rowSection(row))
        case .addSection(let new):
            // An expanded new section collapses the others in accordion mode.
            return (options.accordion && !(new.collapsed ?? options.sectionsInitiallyCollapsed)) ? .table : .sections([])
        case .removeSection(let ref), .updateSection(let ref, _), .moveSection(let ref, _), .addRow(let ref, _), .importRows(let ref, _):
            return .sections(key(ref))
        case .removeRow(let row), .updateRow(let row, _): return .sections(rowSection(row))
        case .moveRow(let row, let ref, _): return .sections(rowSection(row) + key(ref))
        }
    }
}
