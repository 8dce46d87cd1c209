/// The requests members send most, `toggle` and `set` of one section (by key or title, with or
/// without a change id), decoded straight from their bytes: no JSON tree, no member names made
/// into strings, no lookups by name. About half of what decoding such a request costs otherwise.
///
/// It decodes only what it can decode completely and exactly as ``ClientMessage/decode(_:limits:)``
/// does through the parser: a flat object of those members and no others, each once, strings
/// without escapes or bytes past ASCII, nothing after the object. Anything else, every malformed
/// or refused message included, gives `nil` and goes the general way, which also writes every
/// error: this path never refuses anything.
struct FlatRequestDecoder {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var position = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// The message and its change id, or `nil` when the general decoder must decide.
    static func decode(_ bytes: UnsafeBufferPointer<UInt8>, limits: ClientMessage.Limits) -> (ClientMessage, id: String?)? {
        guard limits.json.maxDepth >= 1 else { return nil }
        var reader = FlatRequestDecoder(bytes)
        return reader.message(limits: limits)
    }

    /// A member's value: a string (its bytes, between the quotes) or a boolean.
    private enum Value {
        case string(Range<Int>)
        case bool(Bool)
    }

    private mutating func message(limits: ClientMessage.Limits) -> (ClientMessage, id: String?)? {
        var type: Range<Int>?
        var section: Range<Int>?
        var title: Range<Int>?
        var id: Range<Int>?
        var collapsed: Bool?
        skipSpace()
        guard next(UInt8(ascii: "{")) else { return nil }
        skipSpace()
        if next(UInt8(ascii: "}")) { return nil }
        while true {
            skipSpace()
            guard let name = string(maxBytes: 16), next(afterSpace: UInt8(ascii: ":")) else { return nil }
            skipSpace()
            guard let value = value(maxBytes: limits.json.maxStringBytes) else { return nil }
            // Each member once: a repeated one is malformed JSON, for the parser to say so.
            switch value {
            case .string(let range):
                if type == nil, nameIs(name, "type") {
                    type = range
                } else if section == nil, nameIs(name, "section") {
                    section = range
                } else if title == nil, nameIs(name, "title") {
                    title = range
                } else if id == nil, nameIs(name, "id") {
                    id = range
                } else {
                    return nil
                }
            case .bool(let flag):
                guard collapsed == nil, nameIs(name, "collapsed") else { return nil }
                collapsed = flag
            }
            skipSpace()
            if next(UInt8(ascii: ",")) { continue }
            guard next(UInt8(ascii: "}")) else { return nil }
            break
        }
        skipSpace()
        guard position == bytes.count, let type else { return nil }
        // An id holding the scope separator is refused by the tree decoder (``ChangeIdScope``).
        if let id, id.isEmpty || id.count > limits.maxNameBytes || bytes[id].contains(UInt8(ascii: "/")) { return nil }
        let ref: SectionRef
        switch (section, title) {
        case (let key?, nil): ref = .key(text(key))
        case (nil, let title?): ref = .title(text(title))
        default: return nil
        }
        let change: Change
        if nameIs(type, "toggle") && collapsed == nil {
            change = .toggle(section: ref)
        } else if nameIs(type, "set"), let collapsed {
            change = .setCollapsed(section: ref, collapsed: collapsed)
        } else {
            return nil
        }
        let changeId = id.map(text)
        return (.change(change, id: changeId), changeId)
    }

    private func text(_ range: Range<Int>) -> String {
        String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self)
    }

    private func nameIs(_ range: Range<Int>, _ name: StaticString) -> Bool {
        guard range.count == name.utf8CodeUnitCount else { return false }
        let start = name.utf8Start
        for offset in 0..<range.count where bytes[range.lowerBound + offset] != start[offset] { return false }
        return true
    }

    private mutating func skipSpace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func next(_ byte: UInt8) -> Bool {
        guard position < bytes.count, bytes[position] == byte else { return false }
        position += 1
        return true
    }

    private mutating func next(afterSpace byte: UInt8) -> Bool {
        skipSpace()
        return next(byte)
    }

    /// A string of printable ASCII without escapes, at most `maxBytes` long; its bytes.
    private mutating func string(maxBytes: Int) -> Range<Int>? {
        guard next(UInt8(ascii: "\"")) else { return nil }
        let start = position
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                guard position - start <= maxBytes else { return nil }
                position += 1
                return start..<(position - 1)
            }
            guard byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\\") else { return nil }
            position += 1
        }
        return nil
    }

    private mutating func value(maxBytes: Int) -> Value? {
        guard position < bytes.count else { return nil }
        switch bytes[position] {
        case UInt8(ascii: "\""): return string(maxBytes: maxBytes).map(Value.string)
        case UInt8(ascii: "t"): return literal("true") ? .bool(true) : nil
        case UInt8(ascii: "f"): return literal("false") ? .bool(false) : nil
        default: return nil
        }
    }

    private mutating func literal(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard bytes.count - position >= count else { return false }
        let start = word.utf8Start
        for offset in 0..<count where bytes[position + offset] != start[offset] { return false }
        position += count
        return true
    }
}
