/// One item of a section: a label with an editable value, identified by a stable key that is
/// unique across the whole table.
public struct Row: Equatable, Sendable {
    public var key: String
    public var label: String
    public var value: String
    /// Secondary text, optional.
    public var detail: String?

    public init(key: String, label: String, value: String = "", detail: String? = nil) {
        self.key = key
        self.label = label
        self.value = value
        self.detail = detail
    }
}

/// A partial update of a ``Row``. For `detail`, `.some(nil)` clears it.
public struct RowPatch: Equatable, Sendable {
    public var label: String?
    public var value: String?
    public var detail: String??

    public init(label: String? = nil, value: String? = nil, detail: String?? = nil) {
        self.label = label
        self.value = value
        self.detail = detail
    }
}
