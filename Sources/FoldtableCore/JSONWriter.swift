/// Appends JSON to a byte buffer with a fixed member order, so the same value always encodes to
/// the same bytes (what replicas, the store and the Redis broker compare and replay).
public struct JSONWriter {
    /// The bytes written, then room to its end: writes copy into it through a pointer and move
    /// `used`, with no per-write bookkeeping of an array's count (each `append(contentsOf:)` of a
    /// small piece goes through the array's generic growth checks, and a message makes a few
    /// dozen of them).
    private var storage: [UInt8]
    /// How many bytes of `storage` are written.
    private var used = 0

    /// `capacity` 0 allocates nothing (a placeholder swapped with a kept writer, once per
    /// append on the store's writer thread); the first write makes room.
    public init(capacity: Int = 256) {
        guard capacity > 0 else {
            storage = []
            return
        }
        // Allocated by `reserveCapacity`, then filled as `grow` fills: `Array(repeating:count:)`
        // and `Array(unsafeUninitializedCapacity:)` both allocate through the unspecialized path
        // of the standard library, once for every message's writer; `reserveCapacity` is the
        // cheaper way to the same storage.
        storage = []
        storage.reserveCapacity(Swift.max(capacity, 16))
        fillRoom()
    }

    /// The encoded bytes so far. Reading them trims the storage to them (a count change: no
    /// copy), so a writer's last read hands over its storage as it is.
    public var bytes: [UInt8] {
        mutating get {
            trim()
            return storage
        }
        set {
            storage = newValue
            used = newValue.count
        }
        _modify {
            trim()
            yield &storage
            used = storage.count
        }
    }

    /// Drops the zeros past what is written.
    private mutating func trim() {
        if storage.count > used { storage.removeLast(storage.count - used) }
    }

    /// Makes room for `count` more bytes: doubles the storage (filled with zeros) when they do not fit.
    @inline(__always) private mutating func reserve(_ count: Int) {
        if _slowPath(storage.count - used < count) { grow(count) }
    }

    @inline(never) private mutating func grow(_ count: Int) {
        // Storage trimmed by a read of `bytes` keeps its capacity: only the room is refilled.
        if storage.capacity < used + count { storage.reserveCapacity(Swift.max(storage.capacity * 2, used + count, 64)) }
        fillRoom()
    }

    /// Fills the storage with zeros up to its capacity.
    private mutating func fillRoom() {
        // Refilled from a block of zeros (a memcpy), not from `repeatElement`: the standard
        // library appends a `Repeated` one element at a time, and a writer whose `bytes` are read
        // or reset refills its whole room on the next write (an ack's and a log entry's buffer on
        // every message).
        var room = storage.capacity - storage.count
        while room > 0 {
            let chunk = Swift.min(room, Self.zeros.count)
            Self.zeros.withUnsafeBufferPointer { storage.append(contentsOf: UnsafeBufferPointer(rebasing: $0[..<chunk])) }
            room -= chunk
        }
    }

    /// Zeros that `fillRoom` fills the room from.
    private static let zeros = [UInt8](repeating: 0, count: 4_096)

    /// Copies `count` bytes from `source` (room made first).
    @inline(__always) private mutating func write(_ source: UnsafeRawPointer, count: Int) {
        reserve(count)
        let at = used
        storage.withUnsafeMutableBufferPointer { buffer in
            // `reserve` made `count` bytes of room past `at`.
            (buffer.baseAddress.unsafelyUnwrapped + at).update(from: source.assumingMemoryBound(to: UInt8.self), count: count)
        }
        used = at + count
    }

    @inline(__always) public mutating func raw(_ text: StaticString) {
        write(text.utf8Start, count: text.utf8CodeUnitCount)
    }

    /// Copies bytes that are already JSON (a digest composed on the stack). Unlike appending to
    /// ``bytes``, which trims the storage to what is written, this keeps the room for the next write.
    @inline(__always) public mutating func raw(_ encoded: UnsafeRawBufferPointer) {
        if let base = encoded.baseAddress { write(base, count: encoded.count) }
    }

    /// Copies JSON that is already encoded (an event encoded once for members, into a log entry).
    @inline(__always) public mutating func raw(_ encoded: [UInt8]) {
        encoded.withUnsafeBufferPointer { buffer in
            if let base = buffer.baseAddress { write(base, count: buffer.count) }
        }
    }

    @inline(__always) public mutating func byte(_ value: UInt8) {
        reserve(1)
        let at = used
        storage.withUnsafeMutableBufferPointer { $0[at] = value }
        used = at + 1
    }

    /// Writes `"name":` (names are trusted literals: no escaping).
    @inline(__always) public mutating func key(_ name: StaticString) {
        let count = name.utf8CodeUnitCount
        reserve(count + 3)
        let at = used
        storage.withUnsafeMutableBufferPointer { buffer in
            // Room for the quotes, the name and the colon was made just above.
            let base = buffer.baseAddress.unsafelyUnwrapped + at
            base[0] = UInt8(ascii: "\"")
            (base + 1).update(from: name.utf8Start, count: count)
            base[count + 1] = UInt8(ascii: "\"")
            base[count + 2] = UInt8(ascii: ":")
        }
        used = at + count + 3
    }

    /// Writes `,"name":`.
    @inline(__always) public mutating func nextKey(_ name: StaticString) {
        byte(UInt8(ascii: ","))
        key(name)
    }

    /// Drops what is written past the first `count` bytes (the end of a list rewritten).
    public mutating func truncate(to count: Int) {
        if count < used { used = Swift.max(0, count) }
    }

    /// Drops the last byte written, if any (a closing brace that more members go before).
    public mutating func removeLastByte() {
        if used > 0 { used -= 1 }
    }

    /// How many bytes are written (read without trimming the storage, as `bytes` does).
    public var count: Int { used }

    /// Forgets what is written and keeps the storage with its room, for a writer reused for
    /// one small message after another (a session's acks): emptying `bytes` instead trims the
    /// room away, and the next write grows it again, filling it with zeros.
    public mutating func removeAll() {
        used = 0
    }

    /// Calls `body` with the written bytes where they lie (no trim, no copy).
    public func withUnsafeBytes(_ body: (UnsafeRawBufferPointer) -> Void) {
        storage.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[..<used])) }
    }

    /// Writes a string with JSON escaping (never a raw newline, so batched lines stay split).
    public mutating func string(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            let count = utf8.count
            // Room for the string as it is and its quotes: most strings need no escape.
            reserve(count + 2)
            let start = used
            let plain = storage.withUnsafeMutableBufferPointer { buffer -> Int in
                // `reserve` made room for `count + 2` bytes past `start`.
                let base = buffer.baseAddress.unsafelyUnwrapped + start
                base[0] = UInt8(ascii: "\"")
                var index = 0
                while index < count {
                    let byte = utf8[index]
                    guard Self.isPlain(byte) else { break }
                    base[1 + index] = byte
                    index += 1
                }
                if index == count { base[1 + count] = UInt8(ascii: "\"") }
                return index
            }
            if plain == count {
                used = start + count + 2
                return
            }
            // From the first byte that needs an escape: runs of plain bytes copied whole.
            used = start + 1 + plain
            var runStart = plain
            for index in plain..<count {
                let byte = utf8[index]
                if Self.isPlain(byte) { continue }
                if index > runStart { write(utf8.baseAddress.unsafelyUnwrapped + runStart, count: index - runStart) }
                runStart = index + 1
                Self.escape(byte) { self.byte($0) }
            }
            if count > runStart { write(utf8.baseAddress.unsafelyUnwrapped + runStart, count: count - runStart) }
            self.byte(UInt8(ascii: "\""))
        }
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
        decimal(UInt64(value.magnitude), negative: value < 0)
    }

    /// ``integer(_:)`` for `Int`, not generic: called from another module the generic one is not
    /// specialized, and goes through the protocol's witnesses for every number.
    public mutating func integer(_ value: Int) {
        decimal(UInt64(value.magnitude), negative: value < 0)
    }

    /// ``integer(_:)`` for `UInt64`, not generic (see the one for `Int`).
    public mutating func integer(_ value: UInt64) {
        decimal(value, negative: false)
    }

    private mutating func decimal(_ magnitude: UInt64, negative: Bool) {
        if magnitude == 0 {
            byte(UInt8(ascii: "0"))
            return
        }
        var magnitude = magnitude
        if negative { byte(UInt8(ascii: "-")) }
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes of scratch, enough for 20 digits
        let count = withUnsafeMutableBytes(of: &digits) { scratch -> Int in
            var count = 0
            while magnitude > 0 {
                scratch[23 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            }
            write(scratch.baseAddress.unsafelyUnwrapped + (24 - count), count: count)
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
        case .double(let number): raw(Array("\(number)".utf8))
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
