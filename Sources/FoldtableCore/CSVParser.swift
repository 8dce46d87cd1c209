/// Splits RFC 4180 CSV into records, one at a time, over UTF-8 bytes.
///
/// Strict where a lenient reading would guess: a quote inside an unquoted field, text after a
/// closing quote, a carriage return not followed by a line feed outside quotes, an unclosed
/// quote and invalid UTF-8 are errors naming the line. Lenient where nothing is lost: LF or CRLF
/// line ends, a leading UTF-8 byte order mark, and blank lines (skipped, as Python's `csv` does).
/// Limits are checked before allocating: a field longer than `maxFieldBytes` or a record with
/// more than the caller's number of fields is refused as soon as it is seen, so hostile input
/// costs at most one field's bytes beyond what the caller keeps.
struct CSVParser {
    /// One field: its text, and whether it was quoted (`""` and an empty field differ for
    /// optional columns).
    struct Field: Equatable {
        var text: String
        var quoted: Bool
    }

    /// One record and the line it starts on (1-based, as an editor counts them).
    struct Record {
        var line: Int
        var fields: [Field]
    }

    private let bytes: [UInt8]
    private let maxFieldBytes: Int
    private var position = 0
    /// The line `position` is on.
    private var line = 1
    /// Column names, once the header is read: errors then name the column, not its number.
    var columnNames: [String] = []

    init(_ bytes: [UInt8], maxFieldBytes: Int) {
        self.bytes = bytes
        self.maxFieldBytes = maxFieldBytes
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { position = 3 }
    }

    /// The next record, or `nil` at the end of the input. `maxFields` bounds what one record may
    /// hold; the caller compares the exact count with its header.
    mutating func nextRecord(maxFields: Int) throws(ProtocolError) -> Record? {
        skipBlankLines()
        guard position < bytes.count else { return nil }
        var record = Record(line: line, fields: [])
        while true {
            guard record.fields.count < maxFields else {
                throw ProtocolError(.invalidCSV, "line \(record.line) has more than \(maxFields) fields")
            }
            let index = record.fields.count
            let field = position < bytes.count && bytes[position] == Self.quote ? try quotedField(index) : try unquotedField(index)
            record.fields.append(field)
            // What ends the field: the end of input, a comma (another field follows, perhaps an
            // empty last one), or a line end.
            if position == bytes.count { return record }
            switch bytes[position] {
            case Self.comma:
                position += 1
            case Self.lineFeed:
                position += 1
                line += 1
                return record
            default:
                // A carriage return: the field readers stop only at one followed by a line feed.
                position += 2
                line += 1
                return record
            }
        }
    }

    private mutating func skipBlankLines() {
        while position < bytes.count {
            if bytes[position] == Self.lineFeed {
                position += 1
            } else if bytes[position] == Self.carriageReturn && position + 1 < bytes.count && bytes[position + 1] == Self.lineFeed {
                position += 2
            } else {
                return
            }
            line += 1
        }
    }

    private mutating func unquotedField(_ index: Int) throws(ProtocolError) -> Field {
        let start = position
        while position < bytes.count {
            let byte = bytes[position]
            switch byte {
            case Self.comma, Self.lineFeed:
                return Field(text: String(decoding: bytes[start..<position], as: UTF8.self), quoted: false)
            case Self.carriageReturn:
                guard position + 1 < bytes.count && bytes[position + 1] == Self.lineFeed else {
                    throw fail(index, "a carriage return outside quotes must be followed by a line feed")
                }
                return Field(text: String(decoding: bytes[start..<position], as: UTF8.self), quoted: false)
            case Self.quote:
                throw fail(index, "a quote inside an unquoted field (enclose the field in quotes and double the quote)")
            case 0..<0x80:
                position += 1
            default:
                position += try utf8Sequence(index)
            }
            if position - start > maxFieldBytes { throw tooLong(index) }
        }
        return Field(text: String(decoding: bytes[start..<position], as: UTF8.self), quoted: false)
    }

    private mutating func quotedField(_ index: Int) throws(ProtocolError) -> Field {
        let openedOn = line
        position += 1
        var text: [UInt8] = []
        while true {
            guard position < bytes.count else {
                throw ProtocolError(
                    .invalidCSV, "the quote opened on line \(openedOn)\(columnSuffix(index)) is never closed", field: columnName(index))
            }
            let byte = bytes[position]
            switch byte {
            case Self.quote:
                if position + 1 < bytes.count && bytes[position + 1] == Self.quote {
                    text.append(Self.quote)
                    position += 2
                } else {
                    position += 1
                    try expectFieldEnd(index)
                    return Field(text: String(decoding: text, as: UTF8.self), quoted: true)
                }
            case 0..<0x80:
                if byte == Self.lineFeed { line += 1 }
                text.append(byte)
                position += 1
            default:
                let length = try utf8Sequence(index)
                text.append(contentsOf: bytes[position..<position + length])
                position += length
            }
            if text.count > maxFieldBytes { throw tooLong(index) }
        }
    }

    /// After a closing quote only a comma, a line end or the end of input may follow.
    private func expectFieldEnd(_ index: Int) throws(ProtocolError) {
        guard position < bytes.count else { return }
        switch bytes[position] {
        case Self.comma, Self.lineFeed: return
        case Self.carriageReturn where position + 1 < bytes.count && bytes[position + 1] == Self.lineFeed: return
        default: throw fail(index, "text after the closing quote of a field")
        }
    }

    /// The length of the well-formed UTF-8 sequence starting at `position` (its first byte is
    /// not ASCII), following the table of well-formed sequences in Unicode 15 §3.9 (no overlong
    /// forms, no surrogates, nothing past U+10FFFF).
    private func utf8Sequence(_ index: Int) throws(ProtocolError) -> Int {
        let lead = bytes[position]
        let length: Int
        var secondRange: ClosedRange<UInt8> = 0x80...0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0:
            length = 3
            secondRange = 0xA0...0xBF
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED:
            length = 3
            secondRange = 0x80...0x9F
        case 0xF0:
            length = 4
            secondRange = 0x90...0xBF
        case 0xF1...0xF3: length = 4
        case 0xF4:
            length = 4
            secondRange = 0x80...0x8F
        default: throw invalidUTF8(index)
        }
        guard bytes.count - position >= length, secondRange.contains(bytes[position + 1]) else { throw invalidUTF8(index) }
        for offset in 2..<length where !(0x80...0xBF).contains(bytes[position + offset]) {
            throw invalidUTF8(index)
        }
        return length
    }

    private func invalidUTF8(_ index: Int) -> ProtocolError {
        fail(index, "invalid UTF-8 (byte 0x\(String(bytes[position], radix: 16, uppercase: true))); the CSV must be UTF-8")
    }

    private func tooLong(_ index: Int) -> ProtocolError {
        ProtocolError(.tooLong, "line \(line)\(columnSuffix(index)): the field is longer than \(maxFieldBytes) bytes", field: columnName(index))
    }

    private func fail(_ index: Int, _ what: String) -> ProtocolError {
        ProtocolError(.invalidCSV, "line \(line)\(columnSuffix(index)): \(what)", field: columnName(index))
    }

    private func columnName(_ index: Int) -> String? {
        index < columnNames.count ? columnNames[index] : nil
    }

    /// `", column label"` once names are known, else `", field 3"`.
    private func columnSuffix(_ index: Int) -> String {
        if let name = columnName(index) { return ", column \(name)" }
        return ", field \(index + 1)"
    }

    private static let comma = UInt8(ascii: ",")
    private static let quote = UInt8(ascii: "\"")
    private static let lineFeed = UInt8(ascii: "\n")
    private static let carriageReturn = UInt8(ascii: "\r")
}
