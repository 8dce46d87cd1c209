import Testing

@testable import FoldtableCore

/// The writer as it was before it wrote through a pointer (array appends, piece by piece): what
/// the current one must match byte for byte, since replicas, the store and the broker compare
/// encoded bytes across versions.
private struct ReferenceWriter {
    var bytes: [UInt8] = []

    mutating func raw(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case 0x22, 0x5C: bytes.append(contentsOf: [UInt8(ascii: "\\"), byte])
            case 0x0A: bytes.append(contentsOf: Array("\\n".utf8))
            case 0x0D: bytes.append(contentsOf: Array("\\r".utf8))
            case 0x09: bytes.append(contentsOf: Array("\\t".utf8))
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: Array("\\u00".utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    mutating func integer(_ value: Int64) { bytes.append(contentsOf: Array(String(value).utf8)) }
}

@Suite struct JSONWriterBytes {
    /// Random strings from a mix of plain ASCII, every control byte, quotes, backslashes and
    /// multi-byte characters, of lengths around the writer's growth points.
    @Test func stringsAndIntegersEncodeAsTheArrayAppendingWriterDid() {
        var rng = SplitMix(state: 7)
        let pieces: [String] = ["a", "Z", "0", " ", "\"", "\\", "\n", "\r", "\t", "\u{0}", "\u{1f}", "\u{7f}", "é", "☃", "𝄞", "ab", "/"]
        let controls = (0..<0x20).map { String(UnicodeScalar(UInt8($0))) }
        for round in 0..<3_000 {
            var writer = JSONWriter(capacity: Int.random(in: 0..<40, using: &rng))
            var reference = ReferenceWriter()
            for _ in 0..<Int.random(in: 1..<12, using: &rng) {
                switch Int.random(in: 0..<4, using: &rng) {
                case 0:
                    let length = Int.random(in: 0..<70, using: &rng)
                    let text = (0..<length).map { _ in
                        Int.random(in: 0..<8, using: &rng) == 0 ? controls.randomElement(using: &rng)! : pieces.randomElement(using: &rng)!
                    }.joined()
                    writer.string(text)
                    reference.string(text)
                case 1:
                    let value = Int64.random(in: Int64.min...Int64.max, using: &rng) >> Int64.random(in: 0..<64, using: &rng)
                    writer.integer(value)
                    reference.integer(value)
                case 2:
                    writer.nextKey("collapsed")
                    reference.raw(",\"collapsed\":")
                default:
                    writer.raw("{\"type\":\"event\",\"seq\":")
                    reference.raw("{\"type\":\"event\",\"seq\":")
                }
            }
            #expect(writer.bytes == reference.bytes, "round \(round)")
            if writer.bytes != reference.bytes { break }
        }
    }

    /// A writer made with no capacity allocates nothing until written to, and then every
    /// kind of first write makes its own room.
    @Test func aWriterMadeWithNoCapacityGrowsOnItsFirstWrite() {
        var quoted = JSONWriter(capacity: 0)
        quoted.string("a \"b\"\n\u{1}é")
        #expect(String(decoding: quoted.bytes, as: UTF8.self) == #""a \"b\"\n\u0001é""#)
        var keyed = JSONWriter(capacity: 0)
        keyed.key("type")
        keyed.raw("{}")
        #expect(String(decoding: keyed.bytes, as: UTF8.self) == #""type":{}"#)
        var single = JSONWriter(capacity: 0)
        single.byte(UInt8(ascii: "["))
        #expect(single.bytes == [UInt8(ascii: "[")])
        var empty = JSONWriter(capacity: 0)
        #expect(empty.bytes.isEmpty)
    }

    @Test func integersAtTheEdgesEncodeInDecimal() {
        for value: Int64 in [0, 1, -1, 9, 10, 99, 100, Int64.max, Int64.min, 1 << 53] {
            var writer = JSONWriter(capacity: 0)
            writer.integer(value)
            #expect(String(decoding: writer.bytes, as: UTF8.self) == String(value))
        }
        var writer = JSONWriter(capacity: 0)
        writer.integer(UInt64.max)
        #expect(String(decoding: writer.bytes, as: UTF8.self) == String(UInt64.max))
    }

    /// Reading `bytes` hands over what is written; writing goes on after it, and a buffer
    /// emptied through `bytes` (as the ack buffer is, between acks) is written from the start.
    @Test func bytesReadBetweenWritesAndEmptiedThroughItStayExact() {
        var writer = JSONWriter(capacity: 4)
        writer.raw("{\"a\":")
        let first = writer.bytes
        writer.integer(12)
        writer.byte(UInt8(ascii: "}"))
        #expect(String(decoding: first, as: UTF8.self) == "{\"a\":")
        #expect(String(decoding: writer.bytes, as: UTF8.self) == "{\"a\":12}")
        writer.removeLastByte()
        writer.nextKey("b")
        writer.string("x")
        writer.byte(UInt8(ascii: "}"))
        #expect(String(decoding: writer.bytes, as: UTF8.self) == "{\"a\":12,\"b\":\"x\"}")
        for round in 0..<3 {
            writer.bytes.removeAll(keepingCapacity: true)
            #expect(writer.bytes.isEmpty)
            writer.raw("{\"ack\":")
            writer.integer(round)
            writer.byte(UInt8(ascii: "}"))
            #expect(writer.bytes.count == 9)
            #expect(String(decoding: writer.bytes, as: UTF8.self) == "{\"ack\":\(round)}")
        }
        writer.bytes = Array("[1".utf8)
        writer.raw(",2]")
        #expect(String(decoding: writer.bytes, as: UTF8.self) == "[1,2]")
    }

    /// A writer emptied with `removeAll` (the ack buffer, between acks) writes each message from
    /// the start over what the last one left, shorter or longer; `count` and `withUnsafeBytes`
    /// give exactly what is written, and reading `bytes` after them still does.
    @Test func aWriterEmptiedWithRemoveAllWritesEachMessageFromTheStart() {
        var writer = JSONWriter(capacity: 16)
        let messages = ["{\"ack\":\"a long change id past the room\"}", "{}", "{\"ack\":\"é\\n\"}", ""]
        for message in messages + messages {
            writer.removeAll()
            #expect(writer.count == 0)
            writer.string(message)
            var read: [UInt8] = []
            writer.withUnsafeBytes { read = Array($0) }
            var fresh = JSONWriter()
            fresh.string(message)
            let expected = fresh.bytes
            #expect(writer.count == expected.count)
            #expect(read == expected)
            #expect(writer.bytes == expected)
        }
    }
}

/// Events as the log and members get them, byte for byte: the encoding is compared across
/// versions (a log written by one is read back by the next), so it may not drift.
@Suite struct EventBytes {
    @Test func aLogEntryKeepsTheChangeIdBesideTheEventAndAnOlderEntryWithItInsideStillReads() throws {
        var table = try sampleTable()
        let author = Author(client: "c7", name: "ana")
        let event = try #require(try table.apply(.toggle(section: .key("a")), by: author, changeId: "u:ana/t-1").appliedEvent)
        let entry = String(decoding: TableCheckpoint.encodeEntry(event, request: .toggle(section: .key("a"))), as: UTF8.self)
        #expect(
            entry
                == #"{"event":{"type":"event","seq":1,"by":{"client":"c7","name":"ana"},"id":"t-1","change":{"type":"toggle","section":"a"},"collapsed":{"a":true}},"id":"u:ana/t-1"}"#
        )
        #expect(try TableCheckpoint.decodeEntry(Array(entry.utf8), limits: TableLimits()).event == event)
        // Written before ids were scoped: the id inside the event only.
        let older =
            #"{"event":{"type":"event","seq":1,"by":{"client":"c7","name":"ana"},"id":"t-1","change":{"type":"toggle","section":"a"},"collapsed":{"a":true}}}"#
        let decoded = try TableCheckpoint.decodeEntry(Array(older.utf8), limits: TableLimits())
        #expect(decoded.event.changeId == "t-1")
        #expect(decoded.request == .toggle(section: .key("a")))
    }

    @Test func eventsEncodeToTheirFixedBytes() throws {
        var table = try sampleTable()
        let author = Author(client: "c7", name: "Ana \"A\"\n")
        func encoded(_ change: Change, id: String? = nil) throws -> String {
            let event = try #require(try table.apply(change, by: author, changeId: id).appliedEvent)
            return String(decoding: ServerMessage.event(event), as: UTF8.self)
        }
        #expect(
            try encoded(.toggle(section: .key("a")), id: "t-1")
                == #"{"type":"event","seq":1,"by":{"client":"c7","name":"Ana \"A\"\n"},"id":"t-1","change":{"type":"toggle","section":"a"},"collapsed":{"a":true}}"#
        )
        #expect(
            try encoded(.setCollapsed(section: .title("Beta"), collapsed: false))
                == #"{"type":"event","seq":2,"by":{"client":"c7","name":"Ana \"A\"\n"},"change":{"type":"set","section":"b","collapsed":false},"collapsed":{"b":false}}"#
        )
        #expect(
            try encoded(.setAll(collapsed: true))
                == #"{"type":"event","seq":3,"by":{"client":"c7","name":"Ana \"A\"\n"},"change":{"type":"setAll","collapsed":true},"collapsed":{"b":true,"c":true}}"#
        )
        #expect(
            try encoded(.removeRow(row: "a2"), id: "r")
                == #"{"type":"event","seq":4,"by":{"client":"c7","name":"Ana \"A\"\n"},"id":"r","change":{"type":"removeRow","row":"a2"},"collapsed":{},"from":{"section":"a","index":1,"row":{"key":"a2","label":"two","value":""}}}"#
        )
        #expect(
            try encoded(.updateRow(row: "a1", patch: RowPatch(value: "\u{1}\t")))
                == #"{"type":"event","seq":5,"by":{"client":"c7","name":"Ana \"A\"\n"},"change":{"type":"updateRow","row":"a1","set":{"value":"\u0001\t"}},"collapsed":{}}"#
        )
    }

    @Test func everyChangeStartsWithItsTypeName() {
        let changes: [Change] = [
            .toggle(section: .key("a")), .setCollapsed(section: .key("a"), collapsed: true), .setAll(collapsed: true), .reveal(row: "r"),
            .addSection(NewSection(title: "t")), .removeSection(section: .key("a")),
            .updateSection(section: .key("a"), patch: SectionPatch(title: "t")),
            .moveSection(section: .key("a"), index: 0), .addRow(section: .key("a"), row: NewRow(label: "l")), .removeRow(row: "r"),
            .updateRow(row: "r", patch: RowPatch(value: "v")), .moveRow(row: "r", section: .key("a"), index: nil),
            .setOptions(OptionsPatch(accordion: true)), .importRows(section: .key("a"), rows: RowImport(rows: [])),
        ]
        #expect(Set(changes.map(\.typeName)) == Change.typeNames)
        for change in changes {
            #expect(change.header.description == "{\"type\":\"\(change.typeName)\"")
        }
    }
}
