/// A strict JSON parser (RFC 8259) over UTF-8 bytes with limits checked before allocating.
///
/// Rejects trailing garbage, duplicate member names, leading zeros, control characters in
/// strings, lone surrogates, nesting deeper than `maxDepth` and strings longer than
/// `maxStringBytes`. Never traps on any input.
public struct JSONParser {
    /// Limits applied while parsing.
    public struct Limits: Sendable {
        /// Deepest nesting of arrays and objects (the top-level value is depth 1).
        public var maxDepth: Int
        /// Longest string, in UTF-8 bytes after unescaping.
        public var maxStringBytes: Int
        public init(maxDepth: Int = 32, maxStringBytes: Int = 4096) {
            self.maxDepth = maxDepth
            self.maxStringBytes = maxStringBytes
        }
    }

    /// Parses one JSON value that must make up the whole input (surrounding white space allowed).
    public static func parse(_ bytes: some Collection<UInt8>, limits: Limits = Limits()) throws(ProtocolError) -> JSONValue {
        // Contiguous bytes are read where they are; anything else is copied once.
        let parsed = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(ProtocolError) -> JSONValue in try parse(buffer, limits: limits) }
        }
        if let parsed { return try parsed.get() }
        return try Array(bytes).withUnsafeBufferPointer { (buffer) throws(ProtocolError) -> JSONValue in try parse(buffer, limits: limits) }
    }

    /// Parses bytes in place (a received frame): no copy, and no generic call across modules.
    public static func parse(_ bytes: UnsafeRawBufferPointer, limits: Limits = Limits()) throws(ProtocolError) -> JSONValue {
        try bytes.withMemoryRebound(to: UInt8.self) { (buffer) throws(ProtocolError) -> JSONValue in try parse(buffer, limits: limits) }
    }

    /// Parses bytes in place.
    public static func parse(_ buffer: UnsafeBufferPointer<UInt8>, limits: Limits = Limits()) throws(ProtocolError) -> JSONValue {
        var parser = Cursor(bytes: buffer, limits: limits)
        parser.skipSpace()
        let value = try parser.value(depth: 1)
        parser.skipSpace()
        guard parser.position == buffer.count else { throw parser.fail("trailing characters after the JSON value") }
        return value
    }

    /// Parses a UTF-8 string.
    public static func parse(_ text: String, limits: Limits = Limits()) throws(ProtocolError) -> JSONValue {
        try parse(Array(text.utf8), limits: limits)
    }

    private struct Cursor {
        let bytes: UnsafeBufferPointer<UInt8>
        let limits: Limits
        var position = 0

        init(bytes: UnsafeBufferPointer<UInt8>, limits: Limits) {
            self.bytes = bytes
            self.limits = limits
        }

        func fail(_ what: String) -> ProtocolError {
            ProtocolError(.badJSON, "malformed JSON at byte \(position): \(what)")
        }

        mutating func skipSpace() {
            while position < bytes.count {
                switch bytes[position] {
                case 0x20, 0x09, 0x0A, 0x0D: position += 1
                default: return
                }
            }
        }

        mutating func value(depth: Int) throws(ProtocolError) -> JSONValue {
            guard position < bytes.count else { throw fail("unexpected end of input") }
            switch bytes[position] {
            case UInt8(ascii: "{"): return try object(depth: depth)
            case UInt8(ascii: "["): return try array(depth: depth)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"):
                try literal("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try literal("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try literal("null")
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
            default: throw fail("unexpected character")
            }
        }

        mutating func literal(_ word: StaticString) throws(ProtocolError) {
            let count = word.utf8CodeUnitCount
            guard bytes.count - position >= count else { throw fail("unexpected end of input") }
            let start = word.utf8Start
            for offset in 0..<count where bytes[position + offset] != start[offset] {
                throw fail("unexpected character")
            }
            position += count
        }

        mutating func enter(_ depth: Int) throws(ProtocolError) {
            guard depth <= limits.maxDepth else {
                throw ProtocolError(.tooDeep, "JSON nesting is deeper than \(limits.maxDepth) levels")
            }
        }

        mutating func object(depth: Int) throws(ProtocolError) -> JSONValue {
            try enter(depth)
            position += 1
            var members: [(String, JSONValue)] = []
            // Room for a whole request (type, section, id, ...) at once: growing 1, 2, 4 cost
            // three allocations per message.
            members.reserveCapacity(8)
            // Names seen, for the duplicate check: a set once objects grow, so a message with
            // thousands of members costs linear time, not quadratic.
            var names: Set<String> = []
            skipSpace()
            if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
                position += 1
                return .object(members)
            }
            while true {
                skipSpace()
                guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw fail("expected a member name") }
                let name = try string()
                let seen: Bool
                if members.count < 8 {
                    seen = members.contains { $0.0 == name }
                } else {
                    if names.isEmpty { names = Set(members.map(\.0)) }
                    seen = !names.insert(name).inserted
                }
                if seen {
                    throw ProtocolError(.badJSON, "malformed JSON: member \"\(name.prefix(64))\" appears twice", field: name)
                }
                skipSpace()
                guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { throw fail("expected ':'") }
                position += 1
                skipSpace()
                members.append((name, try value(depth: depth + 1)))
                skipSpace()
                guard position < bytes.count else { throw fail("unexpected end of input") }
                if bytes[position] == UInt8(ascii: ",") {
                    position += 1
                    continue
                }
                guard bytes[position] == UInt8(ascii: "}") else { throw fail("expected ',' or '}'") }
                position += 1
                return .object(members)
            }
        }

        mutating func array(depth: Int) throws(ProtocolError) -> JSONValue {
            try enter(depth)
            position += 1
            var elements: [JSONValue] = []
            skipSpace()
            if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
                position += 1
                return .array(elements)
            }
            while true {
                skipSpace()
                elements.append(try value(depth: depth + 1))
                skipSpace()
                guard position < bytes.count else { throw fail("unexpected end of input") }
                if bytes[position] == UInt8(ascii: ",") {
                    position += 1
                    continue
                }
                guard bytes[position] == UInt8(ascii: "]") else { throw fail("expected ',' or ']'") }
                position += 1
                return .array(elements)
            }
        }

        mutating func number() throws(ProtocolError) -> JSONValue {
            let start = position
            if bytes[position] == UInt8(ascii: "-") { position += 1 }
            guard position < bytes.count, isDigit(bytes[position]) else { throw fail("expected a digit") }
            if bytes[position] == UInt8(ascii: "0") {
                position += 1
                if position < bytes.count, isDigit(bytes[position]) { throw fail("leading zero in a number") }
            } else {
                while position < bytes.count, isDigit(bytes[position]) { position += 1 }
            }
            var integral = true
            if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
                integral = false
                position += 1
                guard position < bytes.count, isDigit(bytes[position]) else { throw fail("expected a digit after '.'") }
                while position < bytes.count, isDigit(bytes[position]) { position += 1 }
            }
            if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
                integral = false
                position += 1
                if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
                guard position < bytes.count, isDigit(bytes[position]) else { throw fail("expected a digit in the exponent") }
                while position < bytes.count, isDigit(bytes[position]) { position += 1 }
            }
            guard position - start <= 64 else { throw ProtocolError(.badJSON, "malformed JSON: a number is longer than 64 characters") }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
            if integral, let value = Int64(text) { return .integer(value) }
            guard let value = Double(text), value.isFinite else { throw fail("number out of range") }
            return .double(value)
        }

        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

        mutating func string() throws(ProtocolError) -> String {
            position += 1  // opening quote
            let start = position
            // Fast path: no escapes.
            while position < bytes.count {
                let byte = bytes[position]
                if byte == UInt8(ascii: "\"") {
                    guard position - start <= limits.maxStringBytes else { throw tooLong() }
                    let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
                    position += 1
                    return text
                }
                if byte == UInt8(ascii: "\\") { break }
                if byte < 0x20 { throw fail("control character in a string") }
                position += 1
                if position - start > limits.maxStringBytes { throw tooLong() }
            }
            var out = Array(UnsafeBufferPointer(rebasing: bytes[start..<position]))
            while position < bytes.count {
                let byte = bytes[position]
                switch byte {
                case UInt8(ascii: "\""):
                    position += 1
                    return String(decoding: out, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    position += 1
                    guard position < bytes.count else { throw fail("unexpected end of input") }
                    let escape = bytes[position]
                    position += 1
                    switch escape {
                    case UInt8(ascii: "\""): out.append(0x22)
                    case UInt8(ascii: "\\"): out.append(0x5C)
                    case UInt8(ascii: "/"): out.append(0x2F)
                    case UInt8(ascii: "b"): out.append(0x08)
                    case UInt8(ascii: "f"): out.append(0x0C)
                    case UInt8(ascii: "n"): out.append(0x0A)
                    case UInt8(ascii: "r"): out.append(0x0D)
                    case UInt8(ascii: "t"): out.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try hex4()
                        if (0xD800...0xDBFF).contains(scalar) {
                            guard bytes.count - position >= 6, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u") else {
                                throw fail("lone surrogate in a string")
                            }
                            position += 2
                            let low = try hex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw fail("lone surrogate in a string") }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00...0xDFFF).contains(scalar) {
                            throw fail("lone surrogate in a string")
                        }
                        guard let unicode = Unicode.Scalar(scalar) else { throw fail("invalid escape") }
                        out.append(contentsOf: String(Character(unicode)).utf8)
                    default: throw fail("invalid escape")
                    }
                default:
                    if byte < 0x20 { throw fail("control character in a string") }
                    out.append(byte)
                    position += 1
                }
                if out.count > limits.maxStringBytes { throw tooLong() }
            }
            throw fail("unterminated string")
        }

        func tooLong() -> ProtocolError {
            ProtocolError(.tooLong, "a string is longer than \(limits.maxStringBytes) bytes")
        }

        mutating func hex4() throws(ProtocolError) -> UInt32 {
            guard bytes.count - position >= 4 else { throw fail("unexpected end of input") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[position]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw fail("invalid \\u escape")
                }
                value = value << 4 | digit
                position += 1
            }
            return value
        }
    }
}
