import Testing

@testable import FoldtableCore

/// A deterministic pseudo-random generator (SplitMix64), so failures reproduce from the seed.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Random changes aimed mostly at things that exist, sometimes at things that don't.
func randomChange(_ table: Table, _ rng: inout SplitMix) -> Change {
    let sectionKeys = table.sections.map(\.key)
    let rowKeys = table.sections.flatMap { $0.rows.map(\.key) }
    func section() -> SectionRef {
        if sectionKeys.isEmpty || Int.random(in: 0..<20, using: &rng) == 0 { return .key("missing") }
        let key = sectionKeys.randomElement(using: &rng)!
        return Bool.random(using: &rng) ? .key(key) : .title(table.section(key)!.title)
    }
    func row() -> String { rowKeys.randomElement(using: &rng) ?? "missing" }
    let titles = ["A", "B", "C", "Mac", "iPad", "Multi\nline"]
    switch Int.random(in: 0..<16, using: &rng) {
    case 0, 1, 2: return .toggle(section: section())
    case 3: return .setCollapsed(section: section(), collapsed: Bool.random(using: &rng))
    case 4: return .setAll(collapsed: Bool.random(using: &rng))
    case 5: return .reveal(row: row())
    case 6:
        return .addSection(
            NewSection(
                title: titles.randomElement(using: &rng)!, detail: Bool.random(using: &rng) ? "d" : nil,
                collapsed: Bool.random(using: &rng) ? nil : Bool.random(using: &rng), index: Int.random(in: 0...(sectionKeys.count + 1), using: &rng))
        )
    case 7: return .removeSection(section: section())
    case 8: return .updateSection(section: section(), patch: SectionPatch(title: "T\(Int.random(in: 0..<5, using: &rng))", footer: .some(nil)))
    case 9: return .moveSection(section: section(), index: Int.random(in: 0...max(0, sectionKeys.count), using: &rng))
    case 10, 11:
        return .addRow(
            section: section(), row: NewRow(label: "L", value: "\(Int.random(in: 0..<100, using: &rng))", index: Int.random(in: 0..<3, using: &rng)))
    case 12: return .removeRow(row: row())
    case 13: return .updateRow(row: row(), patch: RowPatch(value: "v\(Int.random(in: 0..<100, using: &rng))"))
    case 14: return .moveRow(row: row(), section: section(), index: Bool.random(using: &rng) ? nil : Int.random(in: 0..<3, using: &rng))
    default:
        return .setOptions(OptionsPatch(accordion: Bool.random(using: &rng), busyThresholdMs: Int.random(in: 0..<1000, using: &rng)))
    }
}

@Suite struct Replicas {
    /// Thousands of random change sequences; the second replica sees only the events after
    /// encoding and decoding them, and must end byte-identical to the first.
    @Test func replicasFedEncodedEventsStayByteIdentical() throws {
        var sequences = 0
        var applied = 0
        for seed in UInt64(1)...2_000 {
            var rng = SplitMix(state: seed)
            var primary = try sampleTable()
            var replica = try sampleTable()
            for step in 0..<40 {
                let change = randomChange(primary, &rng)
                let id: String? = Int.random(in: 0..<4, using: &rng) == 0 ? "id-\(Int.random(in: 0..<10, using: &rng))" : nil
                let outcome: ApplyOutcome
                do {
                    outcome = try primary.apply(change, by: Author(client: "c\(step % 3)", name: "n"), changeId: id)
                } catch {
                    continue
                }
                guard case .applied(let event) = outcome else { continue }
                applied += 1
                let wire = ServerMessage.event(event)
                let decoded = try ServerMessage.decodeEvent(JSONParser.parse(wire))
                #expect(decoded == event)
                try replica.replay(decoded)
            }
            var a = JSONWriter()
            var b = JSONWriter()
            TableSnapshot(primary, rows: .all).encode(into: &a)
            TableSnapshot(replica, rows: .all).encode(into: &b)
            #expect(a.bytes == b.bytes, "seed \(seed)")
            #expect(primary.seq == replica.seq)
            if a.bytes != b.bytes { break }
            sequences += 1
        }
        #expect(sequences == 2_000)
        #expect(applied > 20_000)
    }

    /// What a running session does: the head applies requests (some retried or reusing an id),
    /// and the committed replica takes each event unverified with the digest the head gave, its
    /// change id not checked again. It must end with the head's table and the head's id window.
    @Test func aCommittedReplicaTakingTheHeadsDigestsUnverifiedEndsAsTheHead() throws {
        var applied = 0
        var retried = 0
        for seed in UInt64(1)...300 {
            var rng = SplitMix(state: seed)
            var head = try sampleTable()
            var committed = try sampleTable()
            for step in 0..<60 {
                let change = randomChange(head, &rng)
                let id: String? = Int.random(in: 0..<2, using: &rng) == 0 ? "id-\(Int.random(in: 0..<12, using: &rng))" : nil
                guard let (outcome, digest) = try? head.applyGivingDigest(change, by: Author(client: "c\(step % 3)", name: "n"), changeId: id)
                else { continue }
                #expect((digest != nil) == (id != nil))
                if let id, let digest { #expect(head.rememberedDigest(of: id) == digest) }
                guard case .applied(let event) = outcome else {
                    retried += 1
                    continue
                }
                applied += 1
                try committed.applyCommitted(event, request: id == nil ? nil : change, requestDigest: digest, verify: false)
            }
            var a = JSONWriter()
            var b = JSONWriter()
            TableSnapshot(head, rows: .all).encode(into: &a)
            TableSnapshot(committed, rows: .all).encode(into: &b)
            #expect(a.bytes == b.bytes, "seed \(seed)")
            #expect(committed.seq == head.seq)
            #expect(committed.rememberedChanges == head.rememberedChanges, "seed \(seed)")
        }
        #expect(applied > 5_000)
        #expect(retried > 20)
    }

    /// A local session's committed replica keeps no id window of its own (it reads the head's)
    /// and takes collapse-only events from the event alone. With a small id window (so ids are
    /// forgotten, and changes in flight push committed ones out of the head's), events committed
    /// some steps behind the head and rollbacks that make it the head again, it must stay the
    /// table a verifying replica with its own window is, save that replica's window exactly, and
    /// as a head answer every change (applied, duplicate or refused) as that one does.
    @Test func aReplicaKeepingNoIdWindowReadsTheHeadsAndBecomesTheSameHead() throws {
        var collapseOnly = 0
        var rollbacks = 0
        var duplicates = 0
        for seed in UInt64(1)...300 {
            var rng = SplitMix(state: seed)
            var limits = TableLimits()
            limits.idempotencyWindow = Int.random(in: 1...6, using: &rng)
            var options = TableOptions()
            options.accordion = seed % 3 == 0
            let sample = try sampleTable(options: options)
            let start = try Table(options: sample.options, sections: sample.sections, seq: 0, limits: limits)
            var head = start
            var referenceHead = start
            var committed = start
            committed.stopKeepingChangeIds()
            head.changeIdsCommitted(through: committed.seq)
            var reference = start
            var inFlight: [(event: TableEvent, request: Change?, digest: UInt64?)] = []
            for step in 0..<80 {
                if Int.random(in: 0..<12, using: &rng) == 0 {
                    // A failed append: both heads go back to their committed tables, with
                    // the committed window read from the head.
                    head = committed.withChangeIds(of: head)
                    head.changeIdsCommitted(through: committed.seq)
                    referenceHead = reference
                    inFlight.removeAll()
                    rollbacks += 1
                }
                let change = randomChange(head, &rng)
                let id: String? = Int.random(in: 0..<2, using: &rng) == 0 ? "id-\(Int.random(in: 0..<8, using: &rng))" : nil
                let author = Author(client: "c\(step % 3)", name: "n")
                let expected = Result { () throws(ProtocolError) in try referenceHead.applyGivingDigest(change, by: author, changeId: id) }
                let got = Result { () throws(ProtocolError) in try head.applyGivingDigest(change, by: author, changeId: id) }
                switch (expected, got) {
                case (.success(let want), .success(let have)):
                    #expect(want.0 == have.0 && want.digest == have.digest, "seed \(seed) step \(step)")
                    if case .applied(let event) = have.0 {
                        inFlight.append((event, id == nil ? nil : change, have.digest))
                    } else {
                        duplicates += 1
                    }
                case (.failure(let want), .failure(let have)): #expect(want == have, "seed \(seed) step \(step)")
                default: Issue.record("seed \(seed) step \(step): \(expected) but \(got)")
                }
                // The log reports some of the events in flight durable.
                for entry in inFlight.prefix(Int.random(in: 0...inFlight.count, using: &rng)) {
                    switch entry.event.change {
                    case .toggle, .setCollapsed, .setAll, .reveal: collapseOnly += 1
                    default: break
                    }
                    try committed.applyCommitted(entry.event, request: entry.request, requestDigest: entry.digest, verify: false)
                    try reference.applyCommitted(entry.event, request: entry.request)
                    inFlight.removeFirst()
                    head.changeIdsCommitted(through: committed.seq)
                    #expect(committed.collapsedMap == reference.collapsedMap, "seed \(seed) step \(step)")
                }
                // What a checkpoint would save now: the reference's committed window, exactly.
                let saved = committed.withChangeIds(of: head)
                #expect(saved.rememberedChanges == reference.rememberedChanges, "seed \(seed) step \(step)")
                let since = UInt64.random(in: 0...(committed.seq + 1), using: &rng)
                #expect(saved.rememberedChanges(after: since) == reference.rememberedChanges(after: since), "seed \(seed) step \(step)")
                #expect(saved.oldestRememberedSeq == reference.oldestRememberedSeq, "seed \(seed) step \(step)")
                #expect(committed.rememberedChanges.isEmpty)
            }
            var a = JSONWriter()
            var b = JSONWriter()
            TableSnapshot(reference, rows: .all).encode(into: &a)
            TableSnapshot(committed, rows: .all).encode(into: &b)
            #expect(a.bytes == b.bytes, "seed \(seed)")
            #expect(committed.seq == reference.seq && committed.textBytes == reference.textBytes)
            #expect(committed.withChangeIds(of: head).rememberedChanges == reference.rememberedChanges, "seed \(seed)")
            #expect(head.rememberedChanges == referenceHead.rememberedChanges, "seed \(seed)")
        }
        #expect(collapseOnly > 3_000)
        #expect(rollbacks > 1_000)
        #expect(duplicates > 30)
    }

    @Test func theSameChangesGiveTheSameEventsEverywhere() throws {
        var rng1 = SplitMix(state: 99)
        var rng2 = SplitMix(state: 99)
        var one = try sampleTable()
        var two = try sampleTable()
        for _ in 0..<500 {
            let change1 = randomChange(one, &rng1)
            let change2 = randomChange(two, &rng2)
            #expect(change1 == change2)
            let first = try? one.apply(change1, by: ana)
            let second = try? two.apply(change2, by: ana)
            #expect(first?.appliedEvent.map(ServerMessage.event) == second?.appliedEvent.map(ServerMessage.event))
        }
    }
}
