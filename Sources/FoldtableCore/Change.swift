/// Something a member asks to do to a table.
///
/// The same type describes a request (sections possibly by title, keys and positions possibly
/// left to the server) and, inside a ``TableEvent``, the change as the table resolved it
/// (sections by key, allocated keys and positions filled in). Applying a resolved change to a
/// replica at the same sequence number gives the same result, which is what replication and
/// storage replay.
public enum Change: Equatable, Sendable {
    case toggle(section: SectionRef)
    case setCollapsed(section: SectionRef, collapsed: Bool)
    /// Collapse (`true`) or expand (`false`) every section.
    case setAll(collapsed: Bool)
    /// Make a row visible: expands its section if collapsed.
    case reveal(row: String)
    case addSection(NewSection)
    case removeSection(section: SectionRef)
    case updateSection(section: SectionRef, patch: SectionPatch)
    case moveSection(section: SectionRef, index: Int)
    case addRow(section: SectionRef, row: NewRow)
    case removeRow(row: String)
    case updateRow(row: String, patch: RowPatch)
    /// Move a row to `index` of `section` (which may be its own); `nil` index = the end.
    case moveRow(row: String, section: SectionRef, index: Int?)
    case setOptions(OptionsPatch)

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
        }
    }

    /// Every change type name the protocol knows.
    public static let typeNames: Set<String> = [
        "toggle", "set", "setAll", "reveal", "addSection", "removeSection", "updateSection", "moveSection",
        "addRow", "removeRow", "updateRow", "moveRow", "setOptions",
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
