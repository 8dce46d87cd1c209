import FoldtableCore
import FoldtableServer
import Testing

@testable import FoldtableStore

/// The log read as history: pages newest first, kept up to the history bound past checkpoints,
/// and events logged before they carried a time still read.
@Suite(.serialized)
struct HistoryTests {
    let service = ServiceQueue()

    /// `count` events from `script`, each stamped with a commit time.
    private func timedEvents(_ script: inout Script, _ count: Int) throws -> [LoggedEvent] {
        var events = try script.events(count)
        for index in events.indices { events[index].event.time = 1_796_000_000_000 + events[index].event.seq * 1_001 }
        return events
    }

    @Test func historyIsReadNewestFirstAPageAtATimeAndSurvivesAReopen() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        var script = Script()
        let events: [LoggedEvent]
        do {
            let store = try openStore(directory, service: service)
            try wait { store.create(StoredSession(name: "h", epoch: "0000beef", checkpoint: script.table), completion: $0) }.get()
            events = try timedEvents(&script, 7)
            _ = try wait { store.append(session: "h", events: Array(events[..<3]), completion: $0) }.get()
            _ = try wait { store.append(session: "h", events: Array(events[3...]), completion: $0) }.get()
            store.close()
        }
        let store = try openStore(directory, service: service)
        defer { store.close() }
        let newest = try wait { store.history(session: "h", before: nil, limit: 3, completion: $0) }.get()
        #expect(newest.events.map(\.seq) == [7, 6, 5])
        #expect(newest.events == events[4...].reversed().map(\.event))
        #expect(newest.events[0].time == 1_796_000_007_007)
        #expect(newest.events[0].author == Author(client: "c1", name: "ana"))
        #expect(newest.more)
        let older = try wait { store.history(session: "h", before: 5, limit: 3, completion: $0) }.get()
        #expect(older.events.map(\.seq) == [4, 3, 2])
        #expect(older.more)
        let oldest = try wait { store.history(session: "h", before: 2, limit: 3, completion: $0) }.get()
        #expect(oldest.events.map(\.seq) == [1])
        #expect(!oldest.more)
        // Past the head: the newest; before the first: nothing.
        #expect(try wait { store.history(session: "h", before: 100, limit: 2, completion: $0) }.get().events.map(\.seq) == [7, 6])
        #expect(try wait { store.history(session: "h", before: 1, limit: 2, completion: $0) }.get() == HistoryPage(events: [], more: false))
        #expect(wait { store.history(session: "none", before: nil, limit: 2, completion: $0) }.isConflict)
    }

    @Test func aCheckpointKeepsTheHistoryBoundOfEventsBeforeItWhileALoadReadsOnlyTheResumeWindow() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        var script = Script()
        let store = try SQLiteStore(directory: directory, keepEvents: 2, historyKeepEvents: 5, limits: TableLimits(), post: service.post)
        defer { store.close() }
        try wait { store.create(StoredSession(name: "h", epoch: "0000beef", checkpoint: script.table), completion: $0) }.get()
        let events = try timedEvents(&script, 12)
        _ = try wait { store.append(session: "h", events: Array(events[..<10]), completion: $0) }.get()
        _ = try wait { store.append(session: "h", events: Array(events[10...]), completion: $0) }.get()
        // The checkpoint at 10: five events at or before it stay for history (6...10), and 11, 12.
        var replica = Table()
        for logged in events[..<10] { try replica.applyCommitted(logged.event, request: logged.request) }
        try wait { store.saveCheckpoint("h", table: replica, completion: $0) }.get()
        let page = try wait { store.history(session: "h", before: nil, limit: 50, completion: $0) }.get()
        #expect(page.events.map(\.seq) == Array((6...12).reversed()))
        #expect(!page.more)
        // A load reads from the resume window on (two events at or before the checkpoint).
        let loaded = try #require(try wait { store.load("h", completion: $0) }.get())
        #expect(loaded.events.map(\.event.seq) == Array(9...12))
    }

    @Test func anEntryLoggedBeforeEventsCarriedATimeIsReadWithoutOne() throws {
        var script = Script()
        let untimed = try script.events(1)[0]
        let entry = TableCheckpoint.encodeEntry(untimed.event, request: untimed.request)
        #expect(!String(decoding: entry, as: UTF8.self).contains("\"time\""))
        let decoded = try TableCheckpoint.decodeEntry(entry, limits: TableLimits())
        #expect(decoded.event.time == nil)
        #expect(decoded.event == untimed.event)
        var timed = untimed
        timed.event.time = 1_796_000_000_123
        #expect(
            try TableCheckpoint.decodeEntry(TableCheckpoint.encodeEntry(timed.event, request: timed.request), limits: TableLimits()).event.time
                == 1_796_000_000_123)
    }
}
