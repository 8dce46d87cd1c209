import Testing

@testable import FoldtableCore

func decode(_ text: String) -> (Result<ClientMessage, ProtocolError>, id: String?) {
    ClientMessage.decode(Array(text.utf8))
}

@Suite struct ClientMessageDecoding {
    @Test func decodesTheNormativeExamples() throws {
        #expect(
            try decode(#"{"type":"join","session":"demo","name":"ana","since":17,"token":"t"}"#).0.get()
                == .join(JoinRequest(session: "demo", name: "ana", since: 17, token: "t")))
        #expect(try decode(#"{"type":"toggle","section":"mac","id":"c1"}"#).0.get() == .change(.toggle(section: .key("mac")), id: "c1"))
        #expect(try decode(#"{"type":"toggle","title":"Mac"}"#).0.get() == .change(.toggle(section: .title("Mac")), id: nil))
        #expect(
            try decode(#"{"type":"set","section":"k","collapsed":true,"id":"c2"}"#).0.get()
                == .change(.setCollapsed(section: .key("k"), collapsed: true), id: "c2"))
        #expect(try decode(#"{"type":"setAll","collapsed":false}"#).0.get() == .change(.setAll(collapsed: false), id: nil))
        #expect(try decode(#"{"type":"list"}"#).0.get() == .list(token: nil))
        #expect(try decode(#"{"type":"rename","name":"bo"}"#).0.get() == .rename("bo"))
    }

    @Test func decodesEveryChangeType() throws {
        let cases: [(String, Change)] = [
            (#"{"type":"reveal","row":"r1"}"#, .reveal(row: "r1")),
            (
                #"{"type":"addSection","title":"W","detail":"d","footer":"f","index":1,"key":"w","collapsed":true}"#,
                .addSection(NewSection(key: "w", title: "W", detail: "d", footer: "f", collapsed: true, index: 1))
            ),
            (#"{"type":"removeSection","title":"W"}"#, .removeSection(section: .title("W"))),
            (
                #"{"type":"updateSection","section":"w","set":{"title":"X","footer":null}}"#,
                .updateSection(section: .key("w"), patch: SectionPatch(title: "X", footer: .some(nil)))
            ),
            (#"{"type":"moveSection","section":"w","index":0}"#, .moveSection(section: .key("w"), index: 0)),
            (
                #"{"type":"addRow","section":"w","label":"L","value":"V","index":0}"#,
                .addRow(section: .key("w"), row: NewRow(label: "L", value: "V", index: 0))
            ),
            (#"{"type":"removeRow","row":"r1"}"#, .removeRow(row: "r1")),
            (
                #"{"type":"updateRow","row":"r1","set":{"value":"2","detail":null}}"#,
                .updateRow(row: "r1", patch: RowPatch(value: "2", detail: .some(nil)))
            ),
            (#"{"type":"moveRow","row":"r1","section":"w","index":2}"#, .moveRow(row: "r1", section: .key("w"), index: 2)),
            (
                #"{"type":"setOptions","options":{"accordion":true,"busyThresholdMs":0}}"#,
                .setOptions(OptionsPatch(accordion: true, busyThresholdMs: 0))
            ),
        ]
        for (text, change) in cases {
            #expect(try decode(text).0.get() == .change(change, id: nil), "\(text)")
        }
    }

    /// Each malformed input and the typed error it must get.
    static let malformed: [(String, ProtocolError.Code, String?)] = [
        ("", .badJSON, nil),
        ("{", .badJSON, nil),
        (#"{"type":"toggle","section":"a"} x"#, .badJSON, nil),
        (#"{"type":"toggle","section":"a",}"#, .badJSON, nil),
        (#"{"type":"toggle","type":"set"}"#, .badJSON, "type"),
        ("[1,2]", .wrongType, nil),
        ("null", .wrongType, nil),
        (#"{"session":"demo"}"#, .missingField, "type"),
        (#"{"type":7}"#, .wrongType, "type"),
        (#"{"type":"explode"}"#, .unknownType, "type"),
        (#"{"type":"toggle"}"#, .missingField, "section"),
        (#"{"type":"toggle","section":1}"#, .wrongType, "section"),
        (#"{"type":"toggle","section":"a","title":"A"}"#, .invalidValue, "title"),
        (#"{"type":"set","section":"a"}"#, .missingField, "collapsed"),
        (#"{"type":"set","section":"a","collapsed":"yes"}"#, .wrongType, "collapsed"),
        (#"{"type":"setAll","collapsed":1}"#, .wrongType, "collapsed"),
        (#"{"type":"moveSection","section":"a"}"#, .missingField, "index"),
        (#"{"type":"moveSection","section":"a","index":1.5}"#, .wrongType, "index"),
        (#"{"type":"moveSection","section":"a","index":-1}"#, .invalidValue, "index"),
        (#"{"type":"updateRow","row":"r","set":[]}"#, .wrongType, "set"),
        (#"{"type":"updateRow","row":"r","set":{"value":5}}"#, .wrongType, "set.value"),
        (#"{"type":"setOptions","options":{"accordion":"on"}}"#, .wrongType, "options.accordion"),
        (#"{"type":"join","session":"bad name","name":"a"}"#, .invalidSession, "session"),
        (#"{"type":"join","session":"demo","name":""}"#, .invalidValue, "name"),
        (#"{"type":"join","session":"demo","name":"a","since":-1}"#, .invalidValue, "since"),
        (#"{"type":"join","session":"demo"}"#, .missingField, "name"),
        (#"{"type":"toggle","section":"a","id":""}"#, .invalidValue, "id"),
        (#"{"type":"toggle","section":"\ud800"}"#, .badJSON, nil),
        (#"{"type":"toggle","section":"a\x"}"#, .badJSON, nil),
        ("{\"type\":\"toggle\",\"section\":\"a\u{01}\"}", .badJSON, nil),
        (#"{"type":"toggle","section":01}"#, .badJSON, nil),
        (#"{"type":"toggle","section":1e999}"#, .badJSON, nil),
        (#"{"type":"toggle","section":tru}"#, .badJSON, nil),
    ]

    @Test(arguments: malformed)
    func malformedInputGetsItsTypedError(text: String, code: ProtocolError.Code, field: String?) {
        let (result, _) = decode(text)
        guard case .failure(let error) = result else {
            Issue.record("accepted: \(text)")
            return
        }
        #expect(error.code == code, "\(text): \(error)")
        if let field { #expect(error.field == field, "\(text): \(error)") }
    }

    @Test func deepNestingIsRefusedWithoutRecursingForever() {
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        guard case .failure(let error) = decode(deep).0 else {
            Issue.record("accepted")
            return
        }
        #expect(error.code == .tooDeep)
        let nested = #"{"type":"toggle","section":"a","x":"# + String(repeating: "{\"a\":", count: 40) + "1" + String(repeating: "}", count: 40) + "}"
        guard case .failure(let inner) = decode(nested).0 else {
            Issue.record("accepted")
            return
        }
        #expect(inner.code == .tooDeep)
    }

    @Test func hugeStringsAreRefusedAsTooLong() {
        let huge = #"{"type":"toggle","section":""# + String(repeating: "x", count: 100_000) + #""}"#
        guard case .failure(let error) = decode(huge).0 else {
            Issue.record("accepted")
            return
        }
        #expect(error.code == .tooLong)
        let escaped = #"{"type":"toggle","section":""# + String(repeating: "\\n", count: 5000) + #""}"#
        guard case .failure(let escapedError) = decode(escaped).0 else {
            Issue.record("accepted")
            return
        }
        #expect(escapedError.code == .tooLong)
    }

    @Test func theChangeIdIsReportedEvenWhenTheRestIsWrong() {
        let (result, id) = decode(#"{"type":"toggle","id":"k-9"}"#)
        #expect(id == "k-9")
        guard case .failure = result else {
            Issue.record("accepted")
            return
        }
    }

    @Test func unknownExtraFieldsAreIgnoredForForwardCompatibility() throws {
        #expect(try decode(#"{"type":"toggle","section":"a","future":{"x":1}}"#).0.get() == .change(.toggle(section: .key("a")), id: nil))
    }

    @Test func escapesAndUnicodeDecode() throws {
        #expect(
            try decode(#"{"type":"toggle","title":"M\u00e4c \ud83c\udf4f \"q\" \\ \/"}"#).0.get()
                == .change(.toggle(section: .title("Mäc 🍏 \"q\" \\ /")), id: nil))
    }
}

@Suite struct ServerMessageEncoding {
    @Test func eventMatchesTheDocumentedShape() throws {
        let event = TableEvent(
            seq: 43, author: Author(client: "c7", name: "ana"), changeId: "k3f9-1", change: .toggle(section: .key("mac")),
            collapsed: [CollapseEffect(key: "mac", collapsed: true)])
        let text = String(decoding: ServerMessage.event(event), as: UTF8.self)
        #expect(
            text
                == #"{"type":"event","seq":43,"by":{"client":"c7","name":"ana"},"id":"k3f9-1","change":{"type":"toggle","section":"mac"},"collapsed":{"mac":true}}"#
        )
        #expect(try ServerMessage.decodeEvent(JSONParser.parse(text)) == event)
    }

    @Test func removedAndMovedRowsCarryWhereTheyCameFrom() throws {
        var table = try sampleTable()
        let moved = try #require(try table.apply(.moveRow(row: "a2", section: .key("b"), index: 0), by: ana).appliedEvent)
        #expect(moved.from == RowOrigin(section: "a", index: 1, row: Row(key: "a2", label: "two")))
        let removed = try #require(try table.apply(.removeRow(row: "b1"), by: ana).appliedEvent)
        #expect(removed.from == RowOrigin(section: "b", index: 1, row: Row(key: "b1", label: "three")))
        let text = String(decoding: ServerMessage.event(removed), as: UTF8.self)
        #expect(text.hasSuffix(#""collapsed":{},"from":{"section":"b","index":1,"row":{"key":"b1","label":"three","value":""}}}"#))
        #expect(try ServerMessage.decodeEvent(JSONParser.parse(text)) == removed)
        #expect(try table.apply(.toggle(section: .key("a")), by: ana).appliedEvent?.from == nil)
    }

    @Test func stringsNeverContainARawNewline() {
        let bytes = ServerMessage.error(ProtocolError(.invalidValue, "line one\nline two\u{1}"), id: "a\"b")
        #expect(!bytes.contains(0x0A))
        #expect(
            String(decoding: bytes, as: UTF8.self) == #"{"type":"error","id":"a\"b","code":"invalid_value","message":"line one\nline two\u0001"}"#)
    }

    @Test func smallMessagesHaveTheirDocumentedShape() {
        #expect(String(decoding: ServerMessage.ack(id: "c1", seq: 5), as: UTF8.self) == #"{"type":"ack","id":"c1","seq":5}"#)
        #expect(String(decoding: ServerMessage.busy(section: "big", busy: true), as: UTF8.self) == #"{"type":"busy","section":"big","busy":true}"#)
        #expect(
            String(decoding: ServerMessage.presence(PresenceDiff(count: 2, complete: true, joined: [.init(client: "c8", name: "bo")])), as: UTF8.self)
                == #"{"type":"presence","count":2,"complete":true,"joined":[{"client":"c8","name":"bo"}]}"#)
        #expect(
            String(decoding: ServerMessage.presence(PresenceDiff(count: 1, complete: true, left: ["c8"])), as: UTF8.self)
                == #"{"type":"presence","count":1,"complete":true,"left":["c8"]}"#)
        #expect(
            String(decoding: ServerMessage.sessions([("demo", 2)]), as: UTF8.self) == #"{"type":"sessions","sessions":[{"name":"demo","members":2}]}"#
        )
        #expect(
            String(
                decoding: ServerMessage.rows(section: "s", seq: 3, from: 0, total: 1, rows: [Row(key: "r", label: "l")][...], final: true),
                as: UTF8.self)
                == #"{"type":"rows","section":"s","seq":3,"from":0,"total":1,"rows":[{"key":"r","label":"l","value":""}],"final":true}"#)
    }

    @Test func integersEncodeAtTheirExtremes() {
        var out = JSONWriter()
        out.integer(Int64.min)
        out.byte(UInt8(ascii: " "))
        out.integer(UInt64.max)
        out.byte(UInt8(ascii: " "))
        out.integer(0)
        #expect(String(decoding: out.bytes, as: UTF8.self) == "-9223372036854775808 18446744073709551615 0")
    }
}

@Suite struct Snapshots {
    @Test func aFullSnapshotRoundTripsToTheSameTable() throws {
        var table = DemoTable.make(largeRows: 500)
        _ = try table.apply(.toggle(section: .key("big")), by: ana)
        _ = try table.apply(.updateSection(section: .key("mac"), patch: SectionPatch(footer: .some("f\n\"x\""))), by: ana)
        let snapshot = TableSnapshot(table, rows: .all)
        var out = JSONWriter()
        snapshot.encode(into: &out)
        let decoded = try TableSnapshot.decode(JSONParser.parse(out.bytes, limits: .init(maxDepth: 8, maxStringBytes: 4096)), seq: table.seq)
        #expect(decoded == snapshot)
        let rebuilt = try decoded.table()
        var again = JSONWriter()
        TableSnapshot(rebuilt, rows: .all).encode(into: &again)
        #expect(again.bytes == out.bytes)
        #expect(rebuilt.seq == table.seq)
        #expect(rebuilt.rowCount == table.rowCount)
    }

    @Test func theCompactSnapshotCarriesRowsOnlyForSmallExpandedSections() throws {
        var table = DemoTable.make(largeRows: 2_000)
        _ = try table.apply(.toggle(section: .key("big")), by: ana)
        let compact = TableSnapshot(table, rows: .expandedUpTo(1_000), busy: { $0 == "big" })
        for section in compact.sections {
            let full = table.section(section.key)!
            #expect(section.rowCount == full.rows.count)
            #expect(section.rows == ((!full.collapsed && full.rows.count <= 1_000) ? full.rows : nil))
        }
        #expect(compact.sections.first { $0.key == "big" }?.busy == true)
        #expect(compact.sections.first { $0.key == "empty" }?.rows == [])
        var out = JSONWriter()
        compact.encode(into: &out)
        #expect(try TableSnapshot.decode(JSONParser.parse(out.bytes), seq: table.seq) == compact)
        #expect(throws: ProtocolError.self) { try compact.table() }
    }

    @Test func welcomeCarriesSessionClientSeqTableAndPresence() throws {
        let table = try sampleTable()
        let bytes = ServerMessage.welcome(
            session: "demo", client: ana, epoch: "e1", snapshot: TableSnapshot(table, rows: .expandedUpTo(100)),
            presence: [.init(client: "c1", name: "ana")])
        let value = try JSONParser.parse(bytes)
        #expect(value["type"] == .string("welcome"))
        #expect(value["seq"] == .integer(0))
        #expect(value["client"] == .string("c1"))
        #expect(value["table"]?["sections"] != nil)
        #expect(value["presence"] == .array([.object([("client", .string("c1")), ("name", .string("ana"))])]))
    }
}
