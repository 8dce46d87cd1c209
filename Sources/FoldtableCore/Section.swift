/// One category of a table: a header (title, optional detail at its right), optional footer,
/// a collapsed flag and ordered rows. Identified by a stable key, never by its position.
public struct Section: Equatable, Sendable {
    public var key: String
    /// May span several lines.
    public var title: String
    public var detail: String?
    public var footer: String?
    public var collapsed: Bool
    public var rows: [Row]

    public init(key: String, title: String, detail: String? = nil, footer: String? = nil, collapsed: Bool = false, rows: [Row] = []) {
        self.key = key
        self.title = title
        self.detail = detail
        self.footer = footer
        self.collapsed = collapsed
        self.rows = rows
    }
}

/// A partial update of a ``Section``'s header and footer. For `detail` and `footer`, `.some(nil)`
/// clears them.
public struct SectionPatch: Equatable, Sendable {
    public var title: String?
    public var detail: String??
    public var footer: String??

    public init(title: String? = nil, detail: String?? = nil, footer: String?? = nil) {
        self.title = title
        self.detail = detail
        self.footer = footer
    }
}

/// How a change names a section: by its key, or by its title when the client has no key.
public enum SectionRef: Equatable, Sendable {
    case key(String)
    case title(String)
}
