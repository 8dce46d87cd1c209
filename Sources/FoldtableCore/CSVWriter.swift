/// Appends RFC 4180 CSV to a byte buffer: CRLF line ends, fields quoted only when they must be
/// (or when a spreadsheet might change them), quotes doubled.
struct CSVWriter {
    /// The encoded bytes so far.
    private(set) var bytes: [UInt8]
    private var atLineStart = true

    init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// Appends one field. `forceQuotes` writes `""` for an empty field, which readers of this
    /// format take for an empty string rather than an absent value.
    mutating func field(_ text: String, forceQuotes: Bool = false) {
        if !atLineStart { bytes.append(UInt8(ascii: ",")) }
        atLineStart = false
        guard forceQuotes || Self.needsQuotes(text) else {
            bytes.append(contentsOf: text.utf8)
            return
        }
        bytes.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            if byte == UInt8(ascii: "\"") { bytes.append(byte) }
            bytes.append(byte)
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Ends the record (CRLF, as RFC 4180 writes it; readers here also accept LF).
    mutating func endRecord() {
        bytes.append(UInt8(ascii: "\r"))
        bytes.append(UInt8(ascii: "\n"))
        atLineStart = true
    }

    /// Commas, quotes and line ends must be quoted. Leading or trailing white space need not be,
    /// but spreadsheets and many readers trim it from unquoted fields, so it is quoted too.
    private static func needsQuotes(_ text: String) -> Bool {
        let utf8 = text.utf8
        guard let first = utf8.first, let last = utf8.last else { return false }
        if isSpace(first) || isSpace(last) { return true }
        return utf8.contains { $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") }
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t")
    }
}
