import FoldtableCore
import Testing

@testable import FoldtableClient

@Suite struct SessionReplicaTests {
    @Test func welcomeLoadsEverySectionWithRowsOnlyWhereTheSnapshotCarriesThem() throws {
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(try Wire.smallTable(), busy: ["big"]))
        #expect(replica.hasSnapshot)
        #expect(replica.seq == 0)
        #expect(replica.epoch == "e1")
        #expect(replica.me == Wire.ana)
        #expect(replica.sections.map(\.key) == ["mac", "big", "prov", "empty"])
        #expect(replica.section("mac")?.rows?.map(\.key) == ["m1", "m2"])
        #expect(replica.section("big")?.rows == nil)
        #expect(replica.section("big")?.rowCount == 9)
        #expect(replica.section("big")?.busy == true)
        #expect(replica.section("empty")?.rows == [])
        #expect(replica.presence.map(\.name) == ["ana"])
        #expect(replica.canResume)
    }

    @Test func anExpandedSectionTooLargeForTheWelcomeLoadsFromRowsChunks() throws {
        var table = try Wire.smallTable()
        _ = try table.apply(.setCollapsed(section: .key("big"), collapsed: false), by: Wire.bo)
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table, rows: .expandedUpTo(3)))
        #expect(replica.section("big")?.isLoading == true)
        #expect(!replica.canResume)
        let chunks = try Wire.rows(table, section: "big", seq: table.seq, chunkRows: 4)
        replica.apply(chunks[0])
        #expect(replica.section("big").map { replica.knownRows(of: $0).count } == 4)
        #expect(replica.section("big")?.isLoading == true)
        replica.apply(Array(chunks.dropFirst()))
        #expect(replica.section("big")?.rows?.map(\.key) == (0..<9).map { "b\($0)" })
        #expect(replica.section("big")?.isLoading == false)
        #expect(replica.canResume)
    }

    @Test func everyEventTypeAppliesToTheReplica() throws {
        var table = try Wire.smallTable()
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table))
        let changes: [Change] = [
            .toggle(section: .key("mac")),
            .setCollapsed(section: .title("Mac"), collapsed: false),
            .setAll(collapsed: true),
            .reveal(row: "m2"),
            .addSection(NewSection(title: "Watch", detail: "1 item", footer: "Wearables", collapsed: false, index: 1)),
            .updateSection(section: .key("mac"), patch: SectionPatch(title: "Macs", detail: .some(nil))),
            .moveSection(section: .key("empty"), index: 0),
            .addRow(section: .key("mac"), row: NewRow(label: "Mac mini", value: "M4", index: 0)),
            .updateRow(row: "m1", patch: RowPatch(value: "M4", detail: .some(nil))),
            .moveRow(row: "m2", section: .key("empty"), index: 0),
            .removeRow(row: "m1"),
            .setOptions(OptionsPatch(collapsedIndicator: "▸", expandedIndicator: "▾", busyThresholdMs: 100)),
            .setCollapsed(section: .key("mac"), collapsed: false),
            .importRows(section: .key("mac"), rows: RowImport(rows: [NewRow(label: "iMac", value: "M4"), NewRow(label: "Studio")])),
            .importRows(section: .key("mac"), rows: RowImport(rows: [NewRow(label: "Pro")], replace: false)),
            .importRows(section: .key("big"), rows: RowImport(rows: [])),
            .removeSection(section: .key("prov")),
        ]
        for change in changes {
            let update = try Wire.event(&table, change)
            replica.apply(update)
            if case .event(let event) = update {
                for key in event.expandedSections { replica.apply(try Wire.rows(table, section: key, seq: event.seq)) }
                // An import's rows follow its event only where the section is shown (and has rows).
                for key in event.reloadedSections where table.section(key)?.collapsed == false && table.section(key)?.rows.isEmpty == false {
                    #expect(replica.section(key)?.isLoading == true)
                    replica.apply(try Wire.rows(table, section: key, seq: event.seq))
                }
            }
            try expectInStep(replica, table)
        }
        #expect(replica.seq == UInt64(changes.count))
        #expect(replica.options.collapsedIndicator == "▸")
        #expect(!replica.needsSnapshot)
    }

    @Test func anUndoEventAppliesEachOfItsChangesToTheReplica() throws {
        var table = try Wire.smallTable()
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table))
        let change = Change.removeSection(section: .key("mac"))
        let prelude = table.undoPrelude(for: change)
        guard case .event(let removal) = try Wire.event(&table, change) else { return }
        replica.apply(.event(removal))
        let record = try #require(table.undoRecord(for: removal, prelude: prelude))
        let update = try Wire.event(&table, .undo(record.change(redo: false, on: table)))
        replica.apply(update)
        replica.apply(try Wire.rows(table, section: "mac", seq: table.seq))
        try expectInStep(replica, table)
    }

    @Test func inAPrivateViewEventsSetTheSharedStateAndTheViewKeepsItsOwn() throws {
        var table = try Wire.smallTable()
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table))
        replica.apply(try ServerUpdate.decode(ServerMessage.view(private: table.collapsedMap)))
        #expect(replica.isPrivate)
        replica.apply(try ServerUpdate.decode(ServerMessage.viewChanged(id: "v1", collapsed: [CollapseEffect(key: "mac", collapsed: true)])))
        #expect(replica.section("mac")?.collapsed == true)
        // Someone expands Inventory for everyone: shared, not here.
        replica.apply(try Wire.event(&table, .setCollapsed(section: .key("big"), collapsed: false)))
        #expect(replica.section("big")?.collapsed == true)
        #expect(replica.sharedCollapsed["big"] == false)
        replica.apply(try ServerUpdate.decode(ServerMessage.view(private: nil)))
        #expect(!replica.isPrivate)
        #expect(replica.section("mac")?.collapsed == false)
        #expect(replica.section("big")?.collapsed == false)
    }

    @Test func rowCountsStayRightInSectionsWhoseRowsAreNotLoaded() throws {
        var table = try Wire.smallTable()
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table))
        // "big" is collapsed and never loaded; rows come and go by events only.
        replica.apply(try Wire.event(&table, .addRow(section: .key("big"), row: NewRow(label: "New", index: 0))))
        #expect(replica.section("big")?.rowCount == 10)
        #expect(replica.section("big")?.rows == nil)
        // A row this client never saw: the event's `from` says which section lost it.
        replica.apply(try Wire.event(&table, .removeRow(row: "b2")))
        #expect(!replica.needsSnapshot)
        #expect(replica.section("big")?.rowCount == 9)
        // Without `from` (an older server), "big" and "prov" both lack rows: which one lost it is unknown.
        replica.apply(try Wire.event(&table, .removeRow(row: "b3"), withOrigin: false))
        #expect(replica.needsSnapshot)
        // A fresh welcome mends it.
        replica.apply(try Wire.welcome(table))
        #expect(!replica.needsSnapshot)
        #expect(replica.section("big")?.rowCount == 8)
        // With one unloaded section left, an unseen row's removal is placed.
        replica.apply(try Wire.event(&table, .setCollapsed(section: .key("prov"), collapsed: false)))
        replica.apply(try Wire.rows(table, section: "prov", seq: table.seq))
        replica.apply(try Wire.event(&table, .removeRow(row: "b4"), withOrigin: false))
        #expect(!replica.needsSnapshot)
        #expect(replica.section("big")?.rowCount == 7)
        // A row added by an event is placed even though its section's other rows are unknown.
        replica.apply(try Wire.event(&table, .addRow(section: .key("big"), row: NewRow(key: "x1", label: "X"))))
        replica.apply(try Wire.event(&table, .moveRow(row: "x1", section: .key("mac"), index: 0)))
        #expect(replica.section("big")?.rowCount == 7)
        #expect(replica.section("mac")?.rows?.first?.key == "x1")
        try expectInStep(replica, table)
    }

    @Test func rowsChunksOlderThanTheLatestCollapseAreDropped() throws {
        var table = try Wire.smallTable()
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table))
        replica.apply(try Wire.event(&table, .toggle(section: .key("big"))))  // expanded at seq 1
        let stale = try Wire.rows(table, section: "big", seq: 1, chunkRows: 4)
        replica.apply(stale[0])
        replica.apply(try Wire.event(&table, .toggle(section: .key("big"))))  // collapsed at seq 2
        replica.apply(Array(stale.dropFirst()))  // the rest of the old stream arrives late
        #expect(replica.section("big")?.rows == nil)
        #expect(replica.incomingRows("big") == nil)
        replica.apply(try Wire.event(&table, .toggle(section: .key("big"))))  // expanded at seq 3
        replica.apply(stale)  // chunks of seq 1: older than the collapse at 2
        #expect(replica.section("big")?.isLoading == true)
        replica.apply(try Wire.rows(table, section: "big", seq: 3))
        #expect(replica.section("big")?.rows?.count == 9)
        #expect(!replica.needsSnapshot)
    }

    @Test func aCollapsedSectionKeepsRowsItOnceHadAndEventsKeepThemCurrent() throws {
        var table = try Wire.smallTable()
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table))
        replica.apply(try Wire.event(&table, .toggle(section: .key("mac"))))
        replica.apply(try Wire.event(&table, .updateRow(row: "m2", patch: RowPatch(label: "iMac 24"))))
        #expect(replica.section("mac")?.rows?.last?.label == "iMac 24")
        // Expanding streams the rows again; the cached ones show until the new ones are complete.
        replica.apply(try Wire.event(&table, .toggle(section: .key("mac"))))
        #expect(replica.section("mac")?.isLoading == false)
        replica.apply(try Wire.rows(table, section: "mac", seq: table.seq))
        try expectInStep(replica, table)
    }

    @Test func resumeKeepsTheTableAndClearsBusyStateAndCutStreams() throws {
        var table = try Wire.smallTable()
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table, busy: ["mac"]))
        replica.apply(try Wire.event(&table, .toggle(section: .key("mac"))))
        replica.apply(try Wire.event(&table, .toggle(section: .key("mac"))))
        replica.apply(try Wire.rows(table, section: "mac", seq: table.seq, chunkRows: 1)[0])  // cut by the drop
        #expect(replica.seq == 2)
        #expect(replica.canResume)  // cached rows are complete; the stream only refreshes them
        let resume = ServerMessage.resume(session: "demo", client: Author(client: "c9", name: "ana"), epoch: "e1", seq: 4, presence: [])
        replica.apply(try ServerUpdate.decode(resume))
        #expect(replica.me?.client == "c9")
        #expect(replica.seq == 2)  // the missed events follow and advance it
        #expect(replica.section("mac")?.busy == false)
        #expect(replica.incomingRows("mac") == nil)
        replica.apply(try Wire.event(&table, .toggle(section: .key("big"))))
        #expect(replica.seq == 3)
        #expect(replica.section("big")?.collapsed == false)
    }

    @Test func eventsAlreadySeenAreIgnoredAndAGapAsksForASnapshot() throws {
        var table = try Wire.smallTable()
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table))
        let first = try Wire.event(&table, .toggle(section: .key("big")))
        replica.apply(first)
        replica.apply(first)
        #expect(replica.seq == 1)
        #expect(replica.section("big")?.collapsed == false)
        _ = try Wire.event(&table, .toggle(section: .key("mac")))  // never arrives
        replica.apply(try Wire.event(&table, .toggle(section: .key("prov"))))
        #expect(replica.needsSnapshot)
        #expect(!replica.canResume)
    }

    @Test func eventsBeforeAnyWelcomeAreIgnored() throws {
        var table = try Wire.smallTable()
        var replica = SessionReplica()
        replica.apply(try Wire.event(&table, .toggle(section: .key("mac"))))
        #expect(replica.sections.isEmpty)
        #expect(replica.seq == 0)
    }

    @Test func busyAndPresenceMessagesUpdateTheReplica() throws {
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(try Wire.smallTable()))
        replica.apply(try ServerUpdate.decode(ServerMessage.busy(section: "big", busy: true)))
        #expect(replica.section("big")?.busy == true)
        replica.apply(try ServerUpdate.decode(ServerMessage.busy(section: "nope", busy: true)))
        replica.apply(
            try ServerUpdate.decode(ServerMessage.presence(PresenceDiff(count: 2, complete: true, joined: [.init(client: "c2", name: "bo")]))))
        #expect(replica.presence.map(\.name) == ["ana", "bo"])
        replica.apply(try ServerUpdate.decode(ServerMessage.presence(PresenceDiff(count: 1, complete: true, left: ["c1"]))))
        #expect(replica.presence.map(\.name) == ["bo"])
        #expect(replica.presenceIsComplete && replica.presenceCount == 1)
    }

    @Test func aDiffJoiningRenamingAndLeavingAtOnceKeepsTheListExact() throws {
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(try Wire.smallTable()))
        let diff = PresenceDiff(
            count: 2, complete: true, joined: [.init(client: "c2", name: "bo"), .init(client: "c3", name: "cy")],
            renamed: [.init(client: "c1", name: "anna")], left: ["c3"])
        replica.apply(try ServerUpdate.decode(ServerMessage.presence(diff)))
        #expect(replica.presence.map(\.name) == ["anna", "bo"])
        #expect(replica.presenceIsComplete)
    }

    @Test func pastTheListThresholdOnlyTheCountIsExactUntilAWholeListComes() throws {
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(try Wire.smallTable()))
        replica.apply(
            try ServerUpdate.decode(ServerMessage.presence(PresenceDiff(count: 500, complete: false, joined: [.init(client: "c9", name: "zed")]))))
        #expect(replica.presenceCount == 500)
        #expect(!replica.presenceIsComplete)
        #expect(replica.presence.map(\.name).contains("zed"))
        let whole = [Author(client: "c1", name: "ana"), Author(client: "c9", name: "zed")]
        replica.apply(try ServerUpdate.decode(ServerMessage.presence(PresenceDiff(count: 2, complete: true, members: whole))))
        #expect(replica.presence == whole)
        #expect(replica.presenceIsComplete && replica.presenceCount == 2)
    }

    @Test func eventsAreDescribedInWordsFromTheStateBeforeThem() throws {
        var table = try Wire.smallTable()
        var replica = SessionReplica()
        replica.apply(try Wire.welcome(table))
        func words(_ change: Change) throws -> String {
            guard case .event(let event) = try Wire.event(&table, change) else { return "" }
            defer { replica.apply(.event(event)) }
            return replica.describe(event)
        }
        #expect(try words(.toggle(section: .key("mac"))) == "bo collapsed Mac")
        #expect(try words(.setAll(collapsed: false)) == "bo expanded all sections")
        #expect(try words(.updateRow(row: "m1", patch: RowPatch(value: "M4"))) == "bo set MacBook Air to \"M4\"")
        #expect(try words(.removeRow(row: "p2")) == "bo removed a row")
        #expect(try words(.toggle(section: .key("prov"))) == "bo collapsed Province Sichuan")
    }

    @Test func randomChangesKeepTheReplicaInStepWithTheServer() throws {
        var resyncs = 0
        for seed in UInt64(1)...300 {
            var rng = SplitMix(state: seed)
            var table = try Wire.smallTable()
            var replica = SessionReplica()
            replica.apply(try Wire.welcome(table, rows: .expandedUpTo(4)))
            for section in table.sections where !section.collapsed && section.rows.count > 4 {
                replica.apply(try Wire.rows(table, section: section.key, seq: table.seq))
            }
            for step in 0..<60 {
                let change = randomChange(table, &rng)
                let update: ServerUpdate
                do {
                    update = try Wire.event(&table, change, by: step % 2 == 0 ? Wire.bo : Wire.ana)
                } catch {
                    continue
                }
                replica.apply(update)
                if case .event(let event) = update {
                    for key in event.expandedSections { replica.apply(try Wire.rows(table, section: key, seq: event.seq, chunkRows: 3)) }
                }
                if replica.needsSnapshot {
                    resyncs += 1
                    replica.apply(try Wire.welcome(table, rows: .expandedUpTo(4)))
                    for section in table.sections where !section.collapsed && section.rows.count > 4 {
                        replica.apply(try Wire.rows(table, section: section.key, seq: table.seq))
                    }
                }
                try expectInStep(replica, table, seed: seed)
            }
        }
        // Events carry where removed and moved rows came from, so the replica never has to
        // rejoin for a fresh snapshot, however the changes fall.
        #expect(resyncs == 0)
    }
}

/// The replica shows what the server's table holds: every section in order with the same
/// header, state and row count, and, where it has rows, the same rows.
func expectInStep(_ replica: SessionReplica, _ table: Table, seed: UInt64 = 0, sourceLocation: SourceLocation = #_sourceLocation) throws {
    #expect(replica.seq == table.seq, "seed \(seed)", sourceLocation: sourceLocation)
    #expect(replica.options == table.options, "seed \(seed)", sourceLocation: sourceLocation)
    #expect(replica.sections.map(\.key) == table.sections.map(\.key), "seed \(seed)", sourceLocation: sourceLocation)
    for section in table.sections {
        let copy = try #require(replica.section(section.key), sourceLocation: sourceLocation)
        #expect(copy.title == section.title && copy.detail == section.detail && copy.footer == section.footer, sourceLocation: sourceLocation)
        #expect(copy.collapsed == section.collapsed, "seed \(seed) \(section.key)", sourceLocation: sourceLocation)
        #expect(copy.rowCount == section.rows.count, "seed \(seed) \(section.key)", sourceLocation: sourceLocation)
        if let rows = copy.rows { #expect(rows == section.rows, "seed \(seed) \(section.key)", sourceLocation: sourceLocation) }
        if !section.collapsed { #expect(copy.rows != nil, "seed \(seed) \(section.key)", sourceLocation: sourceLocation) }
    }
}

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

/// Random changes aimed mostly at things that exist.
func randomChange(_ table: Table, _ rng: inout SplitMix) -> Change {
    let keys = table.sections.map(\.key)
    let rows = table.sections.flatMap { $0.rows.map(\.key) }
    func section() -> SectionRef { .key(keys.randomElement(using: &rng) ?? "missing") }
    func row() -> String { rows.randomElement(using: &rng) ?? "missing" }
    switch Int.random(in: 0..<14, using: &rng) {
    case 0, 1, 2: return .toggle(section: section())
    case 3: return .setAll(collapsed: Bool.random(using: &rng))
    case 4: return .reveal(row: row())
    case 5:
        return .addSection(
            NewSection(title: "S", collapsed: Bool.random(using: &rng), index: Int.random(in: 0...keys.count, using: &rng)))
    case 6: return .removeSection(section: section())
    case 7: return .moveSection(section: section(), index: Int.random(in: 0..<max(1, keys.count), using: &rng))
    case 8, 9: return .addRow(section: section(), row: NewRow(label: "L", value: "v", index: Int.random(in: 0..<3, using: &rng)))
    case 10: return .removeRow(row: row())
    case 11: return .updateRow(row: row(), patch: RowPatch(value: "u\(Int.random(in: 0..<9, using: &rng))"))
    case 12: return .moveRow(row: row(), section: section(), index: Bool.random(using: &rng) ? nil : 0)
    default: return .setOptions(OptionsPatch(accordion: Int.random(in: 0..<4, using: &rng) == 0))
    }
}
