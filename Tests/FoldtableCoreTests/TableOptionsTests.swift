import Testing

@testable import FoldtableCore

/// The table options on the wire, in the table and in storage: `showBusyIndicator` and
/// `titleLines` beside the older ones.
@Suite struct TableOptionsTests {
    func decodeChange(_ text: String) throws -> Change {
        guard case .change(let change, _) = try decode(text).0.get() else { throw ProtocolError(.unknownType, "not a change") }
        return change
    }

    func encoded(_ change: Change) -> String {
        var out = JSONWriter()
        change.encode(into: &out)
        return String(decoding: out.bytes, as: UTF8.self)
    }

    @Test func theDefaultsShowTheBusyIndicatorAndWholeTitles() {
        let options = TableOptions()
        #expect(options.showBusyIndicator == true)
        #expect(options.titleLines == 0)
        #expect(TableLimits().maxTitleLines == 10)
        #expect(TableLimits().maxBusyThresholdMs == 60_000)
    }

    @Test func setOptionsDecodesAndEncodesTheNewOptions() throws {
        let change = try decodeChange(#"{"type":"setOptions","options":{"showBusyIndicator":false,"titleLines":2}}"#)
        #expect(change == .setOptions(OptionsPatch(showBusyIndicator: false, titleLines: 2)))
        #expect(encoded(change) == #"{"type":"setOptions","options":{"showBusyIndicator":false,"titleLines":2}}"#)
        let every = Change.setOptions(
            OptionsPatch(
                sectionsInitiallyCollapsed: true, collapsedIndicator: "▸", expandedIndicator: "▾", accordion: true, busyThresholdMs: 250,
                showBusyIndicator: true, titleLines: 0))
        #expect(
            encoded(every)
                == #"{"type":"setOptions","options":{"sectionsInitiallyCollapsed":true,"collapsedIndicator":"▸","expandedIndicator":"▾","accordion":true,"busyThresholdMs":250,"showBusyIndicator":true,"titleLines":0}}"#
        )
        #expect(try decodeChange(encoded(every)) == every)
    }

    @Test func malformedNewOptionsGetTypedErrorsNamingTheField() {
        for (text, code, field) in [
            (#"{"type":"setOptions","options":{"showBusyIndicator":"no"}}"#, ProtocolError.Code.wrongType, "options.showBusyIndicator"),
            (#"{"type":"setOptions","options":{"titleLines":"2"}}"#, .wrongType, "options.titleLines"),
            (#"{"type":"setOptions","options":{"titleLines":1.5}}"#, .wrongType, "options.titleLines"),
            (#"{"type":"setOptions","options":{"titleLines":-1}}"#, .invalidValue, "options.titleLines"),
        ] {
            guard case .failure(let error) = decode(text).0 else {
                Issue.record("accepted: \(text)")
                continue
            }
            #expect(error.code == code, "\(text)")
            #expect(error.field == field, "\(text)")
        }
    }

    @Test func theTableValidatesTitleLinesAndAppliesBothOptions() throws {
        var table = try sampleTable()
        let event = try apply(&table, .setOptions(OptionsPatch(showBusyIndicator: false, titleLines: 10)))
        #expect(event.change == .setOptions(OptionsPatch(showBusyIndicator: false, titleLines: 10)))
        #expect(event.collapsed.isEmpty)
        #expect(table.options.showBusyIndicator == false)
        #expect(table.options.titleLines == 10)
        expectError(.invalidValue, field: "titleLines") { try apply(&table, .setOptions(OptionsPatch(titleLines: 11))) }
        // A refused patch changes nothing, not even its valid parts.
        expectError(.invalidValue, field: "titleLines") {
            try apply(&table, .setOptions(OptionsPatch(showBusyIndicator: true, titleLines: 99)))
        }
        #expect(table.options.showBusyIndicator == false)
        #expect(table.seq == 1)
        try apply(&table, .setOptions(OptionsPatch(titleLines: 0)))
        #expect(table.options.titleLines == 0)
        #expect(!OptionsPatch(showBusyIndicator: false).isEmpty)
        #expect(!OptionsPatch(titleLines: 0).isEmpty)
    }

    @Test func snapshotsCarryTheNewOptionsAndOlderSnapshotsGetTheDefaults() throws {
        var options = TableOptions()
        options.showBusyIndicator = false
        options.titleLines = 3
        let table = try sampleTable(options: options)
        var out = JSONWriter()
        TableSnapshot(table, rows: .all).encode(into: &out)
        let text = String(decoding: out.bytes, as: UTF8.self)
        #expect(
            text.hasPrefix(
                #"{"options":{"sectionsInitiallyCollapsed":false,"collapsedIndicator":"+","expandedIndicator":"−","accordion":false,"busyThresholdMs":500,"showBusyIndicator":false,"titleLines":3},"#
            ))
        #expect(try TableSnapshot.decode(JSONParser.parse(out.bytes), seq: 0).options == options)
        // What a server before these options wrote: no such fields.
        let older = text.replacing(#","showBusyIndicator":false,"titleLines":3"#, with: "")
        #expect(older != text)
        #expect(try TableSnapshot.decode(JSONParser.parse(Array(older.utf8)), seq: 0).options == TableOptions())
    }

    @Test func aCheckpointRoundTripsTheOptionsAndAnOlderCheckpointDecodesWithDefaults() throws {
        var table = DemoTable.make(largeRows: 20)
        _ = try table.apply(.setOptions(OptionsPatch(accordion: true, showBusyIndicator: false, titleLines: 1)), by: ana, changeId: "o1")
        let bytes = TableCheckpoint.encode(table)
        let restored = try TableCheckpoint.decode(bytes, limits: TableLimits())
        #expect(restored.options == table.options)
        #expect(restored.options.showBusyIndicator == false && restored.options.titleLines == 1)
        #expect(TableCheckpoint.encode(restored) == bytes)
        // A checkpoint stored before the options existed still loads, with their defaults.
        let text = String(decoding: bytes, as: UTF8.self)
        let older = text.replacing(#","showBusyIndicator":false,"titleLines":1"#, with: "")
        #expect(older != text)
        let old = try TableCheckpoint.decode(Array(older.utf8), limits: TableLimits())
        #expect(old.options.showBusyIndicator == true)
        #expect(old.options.titleLines == 0)
        #expect(old.options.accordion == true)
        #expect(old.rememberedChanges == table.rememberedChanges)
    }

    @Test func aReplicaFedTheEventsEndsWithTheSameOptions() throws {
        var primary = try sampleTable()
        var replica = try sampleTable()
        let event = try apply(&primary, .setOptions(OptionsPatch(showBusyIndicator: false, titleLines: 2)), id: "x")
        try replica.replay(event)
        #expect(replica.options == primary.options)
    }
}

@Suite struct DemoContent {
    @Test func friendGroupsAreSectionsWithFriendsAsRowsAndOnlineOverTotalAsDetail() throws {
        let table = DemoTable.make(largeRows: 10)
        #expect(
            table.sections.map(\.key) == [
                "mac", "ipad", "iphone", "guangdong", "zhejiang", "sichuan", "friends", "roommates", "climbing", "empty", "big",
            ])
        for key in ["friends", "roommates", "climbing"] {
            let group = try #require(table.section(key))
            let online = group.rows.filter { $0.value == "online" }.count
            #expect(group.detail == "\(online)/\(group.rows.count)")
            #expect(group.rows.allSatisfy { $0.value == "online" || $0.value == "offline" })
            // Online friends first, as QQ lists them.
            #expect(group.rows.map(\.value) == group.rows.map(\.value).sorted { $0 == "online" && $1 != "online" })
        }
        #expect(table.section("friends")?.detail == "3/8")
        #expect(table.section("climbing")?.title == "Climbing club")
        #expect(table.section("sichuan")?.rows.map(\.label) == ["Chengdu", "Mianyang", "Leshan"])
        #expect(table.section("mac")?.rows.last?.label == "Mac mini")
        #expect(table.sections.last?.title == "Inventory")
    }
}

/// How a checkpoint writes the change-id window's digests: what stored checkpoints hold, so the
/// form must not drift.
@Suite struct CheckpointDigests {
    @Test func aDigestIsSixteenLowercaseHexDigitsZeroPaddedAsStringRadixWroteThem() {
        for digest: UInt64 in [0, 1, 0xa, 0xf0, 0x1234_5678_9abc_def0, 0x0fed_cba9_8765_4321, .max, 0x8000_0000_0000_0000] {
            var out = JSONWriter(capacity: 20)
            TableCheckpoint.hexDigest(digest, into: &out)
            let hex = String(digest, radix: 16)
            #expect(String(decoding: out.bytes, as: UTF8.self) == "\"" + String(repeating: "0", count: 16 - hex.count) + hex + "\"")
        }
    }
}
