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
}
