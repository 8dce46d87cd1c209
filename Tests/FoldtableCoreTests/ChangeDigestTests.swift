import Testing

@testable import FoldtableCore

/// The id window's digests are saved in checkpoints: the fast path that hashes toggles and sets
/// from their fields must give what hashing their encoding gives, for every key and title.
struct ChangeDigestTests {
    /// FNV-1a of the change's JSON form, written out here as the checkpoints of earlier
    /// versions computed it.
    static func digestOfEncoding(_ change: Change) -> UInt64 {
        var out = JSONWriter()
        change.encode(into: &out)
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in out.bytes {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        return hash
    }

    static let names = [
        "", "s1", "Section 12", "quote\"inside", "back\\slash", "line\nbreak", "tab\tand\rreturn", "\u{01}\u{1f}\u{7f}", "é 中文 🎉",
        String(repeating: "k", count: 200), "a\"b\\c\nd\u{0}e",
    ]

    @Test func toggleAndSetDigestsEqualTheDigestOfTheirEncoding() {
        for name in Self.names {
            for ref in [SectionRef.key(name), .title(name)] {
                let changes: [Change] = [
                    .toggle(section: ref), .setCollapsed(section: ref, collapsed: true), .setCollapsed(section: ref, collapsed: false),
                ]
                for change in changes {
                    #expect(ChangeDigest.ofToggleOrSet(change) != nil)
                    #expect(Table.digest(change) == Self.digestOfEncoding(change), "\(change)")
                }
            }
        }
    }

    @Test func aToggleDigestIsTheFNVHashOfItsKnownJSON() {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in Array(#"{"type":"toggle","section":"s1"}"#.utf8) {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        #expect(Table.digest(.toggle(section: .key("s1"))) == hash)
    }

    @Test func everyOtherChangeIsDigestedByItsEncoding() {
        var rng = SplitMix(state: 8)
        var table = Table()
        var seen = 0
        for step in 0..<2_000 {
            let change = randomChange(table, &rng)
            #expect(Table.digest(change) == Self.digestOfEncoding(change), "\(change)")
            if ChangeDigest.ofToggleOrSet(change) == nil { seen += 1 }
            _ = try? table.apply(change, by: Author(client: "c", name: "n"), changeId: "id\(step)")
        }
        #expect(seen > 500)
    }
}
