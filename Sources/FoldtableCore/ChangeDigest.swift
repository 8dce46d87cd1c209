/// 64-bit FNV-1a fed with the bytes ``JSONWriter`` would write, without writing them: the id
/// window's digest of a toggle or set (every change a busy session sees) costs no buffer and no
/// encoding. The bytes hashed are exactly those of ``Change/encode(into:form:)``, so digests
/// stay equal to the ones saved in checkpoints before this existed (tests compare both ways).
struct ChangeDigest {
    private(set) var hash: UInt64 = 0xcbf2_9ce4_8422_2325

    /// The digest of a toggle or set, whose JSON form is
    /// `{"type":"toggle"|"set",("section"|"title"):"…"(,"collapsed":true|false)}`; `nil` for any
    /// other change (the caller encodes it).
    @inline(__always) static func ofToggleOrSet(_ change: Change) -> UInt64? {
        var digest = ChangeDigest()
        switch change {
        case .toggle(let ref):
            digest.raw("{\"type\":\"toggle\"")
            digest.section(ref)
        case .setCollapsed(let ref, let collapsed):
            digest.raw("{\"type\":\"set\"")
            digest.section(ref)
            digest.raw(collapsed ? ",\"collapsed\":true" : ",\"collapsed\":false")
        default:
            return nil
        }
        digest.byte(UInt8(ascii: "}"))
        return digest.hash
    }

    /// The digest of bytes already encoded.
    static func of(_ bytes: [UInt8]) -> UInt64 {
        var digest = ChangeDigest()
        for byte in bytes { digest.byte(byte) }
        return digest.hash
    }

    @inline(__always) private mutating func byte(_ value: UInt8) {
        hash ^= UInt64(value)
        hash &*= 0x0000_0100_0000_01b3
    }

    @inline(__always) private mutating func raw(_ text: StaticString) {
        let start = text.utf8Start
        for index in 0..<text.utf8CodeUnitCount { byte(start[index]) }
    }

    private mutating func section(_ ref: SectionRef) {
        switch ref {
        case .key(let key):
            raw(",\"section\":")
            string(key)
        case .title(let title):
            raw(",\"title\":")
            string(title)
        }
    }

    /// ``JSONWriter/string(_:)``'s escaping, byte for byte (its rules, not a copy of them).
    private mutating func string(_ value: String) {
        byte(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { utf8 in
            for character in utf8 {
                if JSONWriter.isPlain(character) {
                    byte(character)
                } else {
                    JSONWriter.escape(character) { byte($0) }
                }
            }
        }
        byte(UInt8(ascii: "\""))
    }
}
