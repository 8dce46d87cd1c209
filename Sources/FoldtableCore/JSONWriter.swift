/// Appends JSON to a byte buffer with a fixed member order, so the same value always encodes to
/// the same bytes (what replicas, the store and the Redis broker compare and replay).
public struct JSONWriter {
    /// The encoded bytes so far.
    public var bytes: [UInt8]

    public init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    @inline(__always) public mutating func raw(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// Copies JSON that is already encoded (an event encoded once for members, into a log entry).
    @inline(__always) public mutating func raw(_ encoded: [UInt8]) { bytes.append(contentsOf: encoded) }

    @inline(__always) public mutating func byte(_ value: UInt8) { bytes.append(value) }

    /// Writes `"name":` (names are trusted literals: no escaping).
    @inline(__always) public mutating func key(_ name: StaticString) {
        bytes.append(UInt8(ascii: "\""))
        raw(name)
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    /// Writes `,"name":`.
    @inline(__always) public mutating func nextKey(_ name: StaticString) {
        bytes.append(UInt8(ascii: ","))
        key(name)
    }

    /// Writes a string with JSON escaping (never a raw newline, so batched lines stay split).
    public mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { utf8 in
            var runStart = 0
            for index in 0..<utf8.count {
                let byte = utf8[index]
                if Self.isPlain(byte) { continue }
                if index > runStart { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index])) }
                runStart = index + 1
                Self.escape(byte) { bytes.append($0) }
            }
            if utf8.count > runStart { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<utf8.count])) }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Whether a byte of a string's UTF-8 is written as it is; any other goes through
    /// ``escape(_:_:)``.
    @inline(__always) static func isPlain(_ byte: UInt8) -> Bool { byte >= 0x20 && byte != 0x22 && byte != 0x5C }

    /// The escape sequence of a byte that is not plain, handed to `write` byte by byte: the one
    /// place for the rules, shared with the change-id digest, which hashes exactly these bytes.
    @inline(__always) static func escape(_ byte: UInt8, _ write: (UInt8) -> Void) {
        write(UInt8(ascii: "\\"))
        switch byte {
        case 0x22, 0x5C: write(byte)
        case 0x0A: write(UInt8(ascii: "n"))
        case 0x0D: write(UInt8(ascii: "r"))
        case 0x09: write(UInt8(ascii: "t"))
        default:
            write(UInt8(ascii: "u"))
            write(UInt8(ascii: "0"))
            write(UInt8(ascii: "0"))
            write(hexDigit(byte >> 4))
            write(hexDigit(byte & 0x0F))
        }
    }

    @inline(__always) private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }

    public mutating func bool(_ value: Bool) {
        if value { raw("true") } else { raw("false") }
    }

    public mutating func integer<T: BinaryInteger>(_ value: T) {
        if value == 0 {
            bytes.append(UInt8(ascii: "0"))
            return
        }
        var magnitude = UInt64(value.magnitude)
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes of scratch, enough for 20 digits
        let count = withUnsafeMutableBytes(of: &digits) { scratch -> Int in
            var count = 0
            while magnitude > 0 {
                scratch[23 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            }
            bytes.append(contentsOf: scratch[(24 - count)...])
            return count
        }
        _ = count
    }

    /// Writes a string or `null`.
    public mutating func optionalString(_ value: String?) {
        if let value { string(value) } else { raw("null") }
    }

    /// Writes any parsed value back (members in their order).
    public mutating func value(_ value: JSONValue) {
        switch value {
        case .null: raw("null")
        case .bool(let flag): bool(flag)
        case .integer(let number): integer(number)
        case .double(let number): bytes.append(contentsOf: "\(number)".utf8)
        case .string(let text): string(text)
        case .array(let elements):
            byte(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { byte(UInt8(ascii: ",")) }
                self.value(element)
            }
            byte(UInt8(ascii: "]"))
        case .object(let members):
            byte(UInt8(ascii: "{"))
            for (index, (name, element)) in members.enumerated() {
                if index > 0 { byte(UInt8(ascii: ",")) }
                string(name)
                byte(UInt8(ascii: ":"))
                self.value(element)
            }
            byte(UInt8(ascii: "}"))
        }
    }
}
