import Foundation

/// Server-side find: the rows of a table whose label, value or detail contain a query, from
/// every section, whether or not a client ever loaded its rows.
///
/// Matching is a case-insensitive substring test in linear time: Knuth–Morris–Pratt, so a query
/// built to defeat a naive scan (`aaa…ab` over rows of `a`s) costs one pass over the text, never
/// query length × text length. ASCII queries (the common case) are matched byte by byte on the
/// UTF-8 without building lowercased copies, so a search of 200,000 rows allocates nothing per
/// row; other queries compare Unicode-lowercased, canonically decomposed (NFD) text, so a
/// precomposed "é" and "e" + U+0301 match each other as `contains` matched them before (a field
/// is lowercased and decomposed once, a copy per field).
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
    /// The needle's bytes (the query's, ASCII letters lowercased; or its Unicode-lowercased
    /// UTF-8), with their KMP failure table.
    private let needle: [UInt8]
    private let failure: [Int]
    /// Whether the query is all ASCII: then the text's bytes are lowercased as they are read.
    private let ascii: Bool

    /// A search for `query` (1 to ``maxQueryBytes`` bytes; the caller validates).
    public init(_ query: String) {
        self.query = query
        let utf8 = Array(query.utf8)
        ascii = utf8.allSatisfy { $0 < 0x80 }
        needle = ascii ? utf8.map(Self.lower) : Array(Self.folded(query).utf8)
        failure = Self.failureTable(needle)
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

    /// Whether `text` contains the query, ignoring case: for an ASCII query the text's bytes
    /// as they are (ASCII letters lowercased on the way); otherwise the UTF-8 of the text
    /// lowercased and decomposed (``folded(_:)``).
    public func contains(_ text: String) -> Bool {
        guard !needle.isEmpty else { return true }
        var text = ascii ? text : Self.folded(text)
        return text.withUTF8 { haystack in
            guard haystack.count >= needle.count else { return false }
            return ascii ? search(haystack, Self.lower) : search(haystack, { $0 })
        }
    }

    /// KMP over `haystack`, each byte passed through `fold` first. `matched` bytes of the needle
    /// end just before the byte read; on a mismatch the failure table says how much of them is
    /// still a prefix of the needle, so no byte of the text is read twice. For a non-ASCII query
    /// a match must not end inside a letter: the scalar after it must not extend the one before
    /// (a combining mark), as `contains` on canonically equivalent text required before.
    @inline(__always) private func search(_ haystack: UnsafeBufferPointer<UInt8>, _ fold: (UInt8) -> UInt8) -> Bool {
        needle.withUnsafeBufferPointer { needle in
            failure.withUnsafeBufferPointer { failure in
                var matched = 0
                var index = 0
                while index < haystack.count {
                    let folded = fold(haystack[index])
                    index += 1
                    while matched > 0 && needle[matched] != folded { matched = failure[matched - 1] }
                    guard needle[matched] == folded else { continue }
                    matched += 1
                    guard matched == needle.count else { continue }
                    if ascii || !Self.extendsLetter(haystack, at: index) { return true }
                    matched = failure[matched - 1]
                }
                return false
            }
        }
    }

    /// Whether the scalar starting at `index` of valid UTF-8 (if any) extends the letter before
    /// it (a combining mark, a variation selector, a joiner).
    private static func extendsLetter(_ utf8: UnsafeBufferPointer<UInt8>, at index: Int) -> Bool {
        guard index < utf8.count else { return false }
        var iterator = utf8[index...].makeIterator()
        var decoder = Unicode.UTF8()
        guard case .scalarValue(let scalar) = decoder.decode(&iterator) else { return false }
        return scalar.properties.isGraphemeExtend
    }

    /// `text` lowercased and canonically decomposed (NFD): equal scalars for canonically
    /// equivalent text, whatever form it came in.
    public static func folded(_ text: String) -> String {
        text.lowercased().decomposedStringWithCanonicalMapping
    }

    /// KMP's failure table: for each prefix `needle[0...i]`, the length of its longest proper
    /// prefix that is also its suffix.
    static func failureTable<Element: Equatable>(_ needle: [Element]) -> [Int] {
        var failure = [Int](repeating: 0, count: needle.count)
        var length = 0
        var index = 1
        while index < needle.count {
            if needle[index] == needle[length] {
                length += 1
                failure[index] = length
                index += 1
            } else if length > 0 {
                length = failure[length - 1]
            } else {
                index += 1
            }
        }
        return failure
    }

    @inline(__always) private static func lower(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
    }
}
