/// Server-side find: the rows of a table whose label, value or detail contain a query, from
/// every section, whether or not a client ever loaded its rows.
///
/// Matching is a case-insensitive substring test. ASCII queries (the common case) are matched
/// byte by byte on the UTF-8 without building lowercased copies, so a search of 200,000 rows
/// allocates nothing per row; other queries compare Unicode-lowercased text.
public struct RowSearch: Sendable {
    /// One matching row.
    public struct Match: Equatable, Sendable {
        public var section: String
        public var row: String
        public var label: String
        public var value: String

        public init(section: String, row: String, label: String, value: String) {
            self.section = section
            self.row = row
            self.label = label
            self.value = value
        }

        /// `[{"section":..,"row":..,"label":..,"value":..},...]`: the rows of a `found` answer
        /// (and of the HTTP API's and the terminal client's find).
        public static func encode(_ matches: [Match], into out: inout JSONWriter) {
            out.byte(UInt8(ascii: "["))
            for (index, match) in matches.enumerated() {
                if index > 0 { out.byte(UInt8(ascii: ",")) }
                out.raw("{\"section\":")
                out.string(match.section)
                out.nextKey("row")
                out.string(match.row)
                out.nextKey("label")
                out.string(match.label)
                out.nextKey("value")
                out.string(match.value)
                out.byte(UInt8(ascii: "}"))
            }
            out.byte(UInt8(ascii: "]"))
        }
    }

    /// Longest query, in bytes.
    public static let maxQueryBytes = 256
    /// Most matches one search returns (and the default).
    public static let maxLimit = 500
    public static let defaultLimit = 50

    public let query: String
    private let asciiNeedle: [UInt8]?
    private let lowered: String

    /// A search for `query` (1 to ``maxQueryBytes`` bytes; the caller validates).
    public init(_ query: String) {
        self.query = query
        let utf8 = Array(query.utf8)
        asciiNeedle = utf8.allSatisfy { $0 < 0x80 } ? utf8.map(Self.lower) : nil
        lowered = query.lowercased()
    }

    /// The first `limit` matches in table order, and whether there were more.
    public func run(in table: Table, limit: Int) -> (matches: [Match], truncated: Bool) {
        var found: [Match] = []
        for section in table.sections {
            for row in section.rows where matches(row) {
                guard found.count < limit else { return (found, true) }
                found.append(Match(section: section.key, row: row.key, label: row.label, value: row.value))
            }
        }
        return (found, false)
    }

    /// Whether the row's label, value or detail contains the query.
    public func matches(_ row: Row) -> Bool {
        contains(row.label) || contains(row.value) || (row.detail.map(contains) ?? false)
    }

    private func contains(_ text: String) -> Bool {
        guard let needle = asciiNeedle else { return text.lowercased().contains(lowered) }
        guard !needle.isEmpty else { return true }
        var text = text
        return text.withUTF8 { haystack in
            guard haystack.count >= needle.count else { return false }
            let first = needle[0]
            var start = 0
            let last = haystack.count - needle.count
            while start <= last {
                if Self.lower(haystack[start]) == first {
                    var offset = 1
                    while offset < needle.count && Self.lower(haystack[start + offset]) == needle[offset] { offset += 1 }
                    if offset == needle.count { return true }
                }
                start += 1
            }
            return false
        }
    }

    @inline(__always) private static func lower(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
    }
}
