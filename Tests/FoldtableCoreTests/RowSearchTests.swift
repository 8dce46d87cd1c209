import Testing

@testable import FoldtableCore

@Suite struct RowSearchTests {
    func table() throws -> Table {
        try Table(
            options: TableOptions(),
            sections: [
                Section(
                    key: "mac", title: "Mac", collapsed: true,
                    rows: [
                        Row(key: "air", label: "MacBook Air", value: "M3"),
                        Row(key: "pro", label: "MacBook Pro", value: "M4 Max", detail: "Space Black"),
                    ]),
                Section(key: "empty", title: "Empty"),
                Section(key: "cafe", title: "Café", rows: [Row(key: "c1", label: "CRÈME brûlée", value: "€4")]),
            ], seq: 0)
    }

    @Test func findsRowsInCollapsedSectionsIgnoringCaseInLabelValueAndDetail() throws {
        let table = try table()
        #expect(RowSearch("macbook").run(in: table, limit: 50).matches.map(\.row) == ["air", "pro"])
        #expect(RowSearch("m4 MAX").run(in: table, limit: 50).matches.map(\.row) == ["pro"])
        #expect(RowSearch("black").run(in: table, limit: 50).matches.map(\.row) == ["pro"])
        #expect(RowSearch("zebra").run(in: table, limit: 50).matches.isEmpty)
    }

    @Test func nonASCIIQueriesCompareLowercasedText() throws {
        let table = try table()
        #expect(RowSearch("crème").run(in: table, limit: 50).matches.map(\.row) == ["c1"])
        #expect(RowSearch("€").run(in: table, limit: 50).matches.map(\.section) == ["cafe"])
    }

    @Test func theLimitCutsTheMatchesAndSaysSo() throws {
        let table = try table()
        let (matches, truncated) = RowSearch("a").run(in: table, limit: 1)
        #expect(matches.map(\.row) == ["air"])
        #expect(truncated)
        #expect(!RowSearch("air").run(in: table, limit: 1).truncated)
    }

    @Test func aFindMessageIsDecodedAndBadOnesAreRefusedNamingTheField() throws {
        let (ok, _) = ClientMessage.decode(Array(#"{"type":"find","q":"mac","limit":5,"id":"f1"}"#.utf8))
        #expect(try ok.get() == .find(query: "mac", limit: 5, id: "f1"))
        let (plain, _) = ClientMessage.decode(Array(#"{"type":"find","q":"mac"}"#.utf8))
        #expect(try plain.get() == .find(query: "mac", limit: RowSearch.defaultLimit, id: nil))
        for (text, field) in [
            (#"{"type":"find","q":""}"#, "q"), (#"{"type":"find"}"#, "q"), (#"{"type":"find","q":"x","limit":0}"#, "limit"),
            (#"{"type":"find","q":"x","limit":501}"#, "limit"), ("{\"type\":\"find\",\"q\":\"\(String(repeating: "x", count: 257))\"}", "q"),
        ] {
            let (result, _) = ClientMessage.decode(Array(text.utf8))
            guard case .failure(let error) = result else {
                Issue.record("accepted \(text)")
                continue
            }
            #expect(error.field == field)
        }
    }

    @Test func theFoundAnswerHasItsDocumentedShape() {
        let bytes = ServerMessage.found(
            id: "f1", query: "air", matches: [RowSearch.Match(section: "mac", row: "air", label: "MacBook Air", value: "M3")], truncated: false)
        #expect(
            String(decoding: bytes, as: UTF8.self)
                == #"{"type":"found","id":"f1","q":"air","rows":[{"section":"mac","row":"air","label":"MacBook Air","value":"M3"}],"truncated":false}"#
        )
    }

    /// A small seeded generator (SplitMix64): the same inputs on every run and machine.
    struct Seeded {
        var state: UInt64
        mutating func next(_ bound: Int) -> Int {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return Int((z ^ (z >> 31)) % UInt64(bound))
        }
        mutating func text(_ alphabet: [String], maxLength: Int) -> String {
            (0..<next(maxLength + 1)).map { _ in alphabet[next(alphabet.count)] }.joined()
        }
    }

    /// The obvious search, quadratic in the worst case: what the linear one must agree with.
    /// ASCII queries compare bytes with ASCII letters lowercased; others the scalars of
    /// lowercased, canonically decomposed text, a match not ending before a combining mark.
    func naiveContains(_ text: String, _ query: String) -> Bool {
        let ascii = query.utf8.allSatisfy { $0 < 0x80 }
        let lower = { (byte: UInt8) in byte >= 65 && byte <= 90 ? byte | 0x20 : byte }
        let haystack = ascii ? Array(text.utf8).map(lower) : Array(RowSearch.folded(text).utf8)
        let wanted = ascii ? Array(query.utf8).map(lower) : Array(RowSearch.folded(query).utf8)
        guard haystack.count >= wanted.count else { return false }
        return (0...(haystack.count - wanted.count)).contains { start in
            guard (0..<wanted.count).allSatisfy({ haystack[start + $0] == wanted[$0] }) else { return false }
            // A non-ASCII match must not end inside a letter (before a combining mark).
            let end = start + wanted.count
            guard !ascii, end < haystack.count else { return true }
            let rest = String(decoding: haystack[end...], as: UTF8.self)
            return !(rest.unicodeScalars.first?.properties.isGraphemeExtend ?? false)
        }
    }

    @Test func agreesWithANaiveSearchOnRandomASCIITextAndQueries() {
        var random = Seeded(state: 29)
        // A two-letter alphabet in both cases makes partial matches (the KMP fallbacks) common.
        let alphabet = ["a", "A", "b", "B", "ab", "aa", " "]
        for _ in 0..<4_000 {
            let text = random.text(alphabet, maxLength: 24)
            let query = random.text(alphabet, maxLength: 6)
            guard !query.isEmpty else { continue }
            #expect(RowSearch(query).contains(text) == naiveContains(text, query), "\(query) in \(text)")
        }
    }

    @Test func agreesWithANaiveSearchOnRandomNonASCIIText() {
        var random = Seeded(state: 6455)
        // Accented letters in both cases, a combining mark (one Character with the letter before
        // it), a sign that has no case, and ASCII around them.
        let alphabet = ["é", "É", "e", "E", "\u{301}", "ß", "€", "a", "Ä", "ä"]
        for _ in 0..<3_000 {
            let text = random.text(alphabet, maxLength: 16)
            var query = random.text(alphabet, maxLength: 4)
            if query.utf8.allSatisfy({ $0 < 0x80 }) { query += "é" }
            #expect(RowSearch(query).contains(text) == naiveContains(text, query), "\(query) in \(text)")
        }
    }

    @Test func agreesWithLowercasedContainsOnTextWithoutCombiningMarks() {
        // Where no combining mark can make two spellings of one letter, the search finds what
        // `lowercased().contains` found before it.
        var random = Seeded(state: 4180)
        let alphabet = ["é", "É", "e", "E", "ß", "€", "a", "Ä", "ä", "ﬁ", "İ"]
        for _ in 0..<2_000 {
            let text = random.text(alphabet, maxLength: 16)
            var query = random.text(alphabet, maxLength: 4)
            if query.utf8.allSatisfy({ $0 < 0x80 }) { query += "é" }
            #expect(RowSearch(query).contains(text) == text.lowercased().contains(query.lowercased()), "\(query) in \(text)")
        }
    }

    @Test func precomposedAndDecomposedLettersFindEachOther() {
        #expect(RowSearch("cr\u{E8}me").contains("CRE\u{300}ME"))
        #expect(RowSearch("cre\u{300}me").contains("cr\u{C8}me br\u{FB}l\u{E9}e"))
        #expect(!RowSearch("cr\u{E8}me").contains("creme"))
    }

    @Test func thePathologicalQueryIsAnsweredCorrectlyOverLongRowsOfItsPrefix() throws {
        // 255 × "a" + "b" over rows of 3 KiB of "a": a naive scan compares ~255 bytes at each of
        // 3,000 offsets per field; this one reads each byte once.
        let query = String(repeating: "a", count: 255) + "b"
        let filler = String(repeating: "a", count: 3_072)
        let rows = (0..<200).map { Row(key: "r\($0)", label: filler, value: filler, detail: filler) }
        var table = try Table(options: TableOptions(), sections: [Section(key: "s", title: "S", rows: rows)], seq: 0)
        #expect(RowSearch(query).run(in: table, limit: 50).matches.isEmpty)
        // The same query at the very end of a field, after a near miss, is found.
        table = try Table(
            options: TableOptions(),
            sections: [
                Section(key: "s", title: "S", rows: rows + [Row(key: "hit", label: filler + "A" + String(repeating: "A", count: 254) + "B")])
            ], seq: 0)
        #expect(RowSearch(query).run(in: table, limit: 50).matches.map(\.row) == ["hit"])
    }

    @Test func theFailureTableIsKMPs() {
        #expect(RowSearch.failureTable(Array("aabaaab".utf8)) == [0, 1, 0, 1, 2, 2, 3])
        #expect(RowSearch.failureTable(Array("abcd".utf8)) == [0, 0, 0, 0])
        #expect(RowSearch.failureTable([UInt8]()) == [])
    }
}
