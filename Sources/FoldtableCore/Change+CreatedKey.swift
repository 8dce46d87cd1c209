extension Change {
    /// The key of the row or section this change adds, once the table has resolved it (an
    /// event's change carries the key the table chose when the author named none); `nil` for a
    /// change that adds neither, or one not resolved yet that names no key.
    public var createdKey: String? {
        switch self {
        case .addRow(_, let row): row.key
        case .addSection(let section): section.key
        default: nil
        }
    }
}
