import Testing

@testable import FoldtableCore

@Suite struct HostileInput {
    static let seeds: [String] = [
        #"{"type":"join","session":"demo","name":"ana","since":17,"epoch":"e","token":"t"}"#,
        #"{"type":"toggle","section":"a","id":"k-1"}"#,
        #"{"type":"set","title":"Beta","collapsed":true}"#,
        #"{"type":"setAll","collapsed":false}"#,
        #"{"type":"reveal","row":"b1"}"#,
        #"{"type":"addSection","title":"W","detail":"d","footer":"f","index":1,"collapsed":true}"#,
        #"{"type":"updateSection","section":"a","set":{"title":"X","footer":null}}"#,
        #"{"type":"moveSection","section":"a","index":2}"#,
        #"{"type":"addRow","section":"c","label":"L","value":"V","index":0}"#,
        #"{"type":"updateRow","row":"a1","set":{"value":"2","detail":null}}"#,
        #"{"type":"moveRow","row":"a1","section":"b","index":1}"#,
        #"{"type":"removeRow","row":"a2"}"#,
        #"{"type":"setOptions","options":{"accordion":true,"busyThresholdMs":0,"collapsedIndicator":"▸"}}"#,
    ]

    /// Tokens spliced into messages: numbers at the edges of every integer type, odd strings.
    static let splices: [String] = [
        "9223372036854775807", "-9223372036854775808", "18446744073709551615", "1e308", "-0", "0.5", "null", "true", "[]", "{}",
        #""\ud83d\ude00""#, #""\u0000""#, "\"" + String(repeating: "x", count: 5000) + "\"", String(repeating: "[", count: 64),
    ]

    /// Mutated protocol messages: decoding and applying them must never trap, whatever they hold.
    @Test func mutatedMessagesNeverCrashTheDecoderOrTheTable() throws {
        var rng = SplitMix(state: 7)
        var table = try sampleTable()
        var accepted = 0
        for _ in 0..<30_000 {
            var bytes = Array(Self.seeds.randomElement(using: &rng)!.utf8)
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                let position = Int.random(in: 0...bytes.count, using: &rng)
                switch Int.random(in: 0..<4, using: &rng) {
                case 0: if position < bytes.count { bytes[position] = UInt8.random(in: 0...255, using: &rng) }
                case 1: bytes.insert(contentsOf: Self.splices.randomElement(using: &rng)!.utf8, at: position)
                case 2: bytes.removeSubrange(position..<min(bytes.count, position + Int.random(in: 1...8, using: &rng)))
                default: bytes = Array(bytes.prefix(position))
                }
            }
            let (result, _) = ClientMessage.decode(bytes)
            if case .success(.change(let change, let id)) = result {
                if (try? table.apply(change, by: ana, changeId: id)) != nil { accepted += 1 }
            }
        }
        // Some mutations still make sense and are applied; the table stays consistent.
        #expect(accepted > 100)
        for (position, section) in table.sections.enumerated() {
            #expect(table.position(ofSection: section.key) == position)
            for row in section.rows { #expect(table.sectionKey(ofRow: row.key) == section.key) }
        }
    }

    @Test func extremeNumbersInFieldsAreRefusedNotTrapped() {
        for text in [
            #"{"type":"moveSection","section":"a","index":9223372036854775807}"#,
            #"{"type":"join","session":"demo","name":"a","since":18446744073709551615}"#,
            #"{"type":"setOptions","options":{"busyThresholdMs":-9223372036854775808}}"#,
            #"{"type":"addRow","section":"a","label":"x","index":-1}"#,
        ] {
            guard case .failure(let error) = ClientMessage.decode(Array(text.utf8)).0 else {
                Issue.record("accepted \(text)")
                continue
            }
            #expect([.invalidValue, .wrongType].contains(error.code), "\(text): \(error)")
        }
    }
}
