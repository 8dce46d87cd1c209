import CSQLite
import Dispatch
import FoldtableCore
import FoldtableServer
import Foundation
import Testing

@testable import FoldtableStore

/// Serialized: the fault tests share the commit hook's globals and the process's file-size limit.
@Suite(.serialized)
struct SQLiteStoreTests {
    let service = ServiceQueue()

    @Test func appendsAreReadBackInOrderAfterReopen() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        var script = Script()
        var all: [LoggedEvent] = []
        do {
            let store = try openStore(directory, service: service)
            try wait { store.create(StoredSession(name: "plan", epoch: "0000beef", checkpoint: script.table), completion: $0) }.get()
            for count in [1, 4, 2] {
                let events = try script.events(count, ids: count != 4)
                all += events
                #expect(try wait { store.append(session: "plan", events: events, completion: $0) }.get() == events[events.count - 1].event.seq)
            }
            store.close()
        }
        let store = try openStore(directory, service: service)
        #expect(try store.sessionNames() == ["plan"])
        let loaded = try #require(try wait { store.load("plan", completion: $0) }.get())
        #expect(loaded.epoch == "0000beef")
        #expect(loaded.checkpoint.seq == 0)
        #expect(loaded.events == all)
        #expect(try wait { store.read(session: "plan", after: 3, completion: $0) }.get() == Array(all[3...]))
        #expect(try wait { store.read(session: "plan", after: 7, completion: $0) }.get() == [])
        #expect(try wait { store.load("other", completion: $0) }.get() == nil)
        // Appends wrote journal rows only (the session's row still says 0); the log's head came
        // from the journal: an event that does not follow it is refused, the next one goes on.
        let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
        #expect(try raw.scalarInt("SELECT last_seq FROM sessions WHERE name = 'plan'") == 0)
        raw.close()
        #expect(wait { store.append(session: "plan", events: [all[6]], completion: $0) }.isConflict)
        #expect(try wait { store.append(session: "plan", events: try script.events(1), completion: $0) }.get() == 8)
    }

    @Test func aNewDatabaseHas16KiBPagesAndAnExistingOneKeepsItsOwnAndIsStillServed() throws {
        let fresh = temporaryDirectory()
        defer { removeDirectory(fresh) }
        try openStore(fresh, service: service).close()
        let created = try SQLiteDatabase(path: fresh + "/foldtable.db")
        #expect(try created.scalarInt("PRAGMA page_size") == 16_384)
        #expect(try created.scalarText("PRAGMA journal_mode") == "wal")
        created.close()

        // A database an earlier build made, with SQLite's default 4 KiB pages.
        let older = temporaryDirectory()
        defer { removeDirectory(older) }
        let made = try SQLiteDatabase(path: older + "/foldtable.db")
        try made.exec("PRAGMA page_size = 4096")
        try made.exec("PRAGMA journal_mode = WAL")
        made.close()
        var script = Script()
        do {
            let store = try openStore(older, service: service)
            try wait { store.create(StoredSession(name: "plan", epoch: "0000beef", checkpoint: script.table), completion: $0) }.get()
            let events = try script.events(3)
            #expect(try wait { store.append(session: "plan", events: events, completion: $0) }.get() == 3)
            store.close()
        }
        let reopened = try openStore(older, service: service)
        defer { reopened.close() }
        #expect(try wait { reopened.read(session: "plan", after: 0, completion: $0) }.get()?.count == 3)
        let kept = try SQLiteDatabase(path: older + "/foldtable.db")
        #expect(try kept.scalarInt("PRAGMA page_size") == 4_096)
        kept.close()
    }

    @Test func refusesADatabaseFromANewerSchema() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        try openStore(directory, service: service).close()
        let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
        try raw.exec("PRAGMA user_version = \(Migrations.current + 1)")
        raw.close()
        let refusal =
            "the database \(directory)/foldtable.db is from a newer foldtabled (schema \(Migrations.current + 1), this build knows \(Migrations.current))"
        #expect(throws: StoreError.unavailable(refusal)) {
            try openStore(directory, service: service)
        }
    }

    @Test func versionOneDatabaseIsUpgradedKeepingEverySessionEventAndChangeId() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        // A database as the build before the journal left it: schema 1, written by hand.
        var plan = try OlderSchemaPlan()
        let (earlyA, checkpointA, lateA, eventsB) = (plan.earlyA, plan.checkpointA, plan.lateA, plan.eventsB)
        do {
            let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
            try raw.exec(Migrations.steps[0] + "PRAGMA user_version = 1;")
            let event = try raw.prepareUncached("INSERT INTO events(session, seq, entry) VALUES (?1, ?2, ?3)")
            defer { event.finalize() }
            // "a" kept 5 events before its checkpoint at 10 for resume; "b" has no checkpoint
            // since its start; "c" has no events. Inserted out of order, as pages would hold them.
            for (name, table, last, logged) in [
                ("b", Table(), UInt64(4), eventsB), ("a", checkpointA, UInt64(17), Array(earlyA[5...]) + lateA), ("c", Table(), UInt64(0), []),
            ] {
                try writeOlderSession(raw, name: name, table: table, last: last)
                for entry in logged.reversed() {
                    event.reset()
                    try event.bind(1, name)
                    try event.bind(2, entry.event.seq)
                    try event.bind(3, TableCheckpoint.encodeEntry(entry.event, request: entry.request))
                    try event.step()
                }
            }
            raw.close()
        }

        let store = try openStore(directory, keepEvents: 5, service: service)
        #expect(try store.sessionNames() == ["a", "b", "c"])
        let a = try #require(try wait { store.load("a", completion: $0) }.get())
        #expect(a.epoch == "e-a")
        #expect(a.events == Array(earlyA[5...]) + lateA)
        var table = a.checkpoint
        for logged in a.events where logged.event.seq > table.seq { try table.applyCommitted(logged.event, request: logged.request) }
        // The change-id window, rebuilt from checkpoint and log, is the one the session had.
        #expect(table.rememberedChanges == plan.planA.table.rememberedChanges)
        #expect(table.rememberedChanges.count == 17)
        #expect(TableCheckpoint.encode(table) == TableCheckpoint.encode(plan.planA.table))
        #expect(try wait { store.load("b", completion: $0) }.get()?.events == eventsB)
        #expect(try wait { store.load("c", completion: $0) }.get()?.events == [])
        #expect(try wait { store.read(session: "a", after: 12, completion: $0) }.get() == Array(lateA[2...]))
        // The log goes on where it was.
        #expect(try wait { store.append(session: "a", events: try plan.planA.events(1), completion: $0) }.get() == 18)
        store.close()

        let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
        defer { raw.close() }
        #expect(try raw.scalarInt("PRAGMA user_version") == Int64(Migrations.current))
        #expect(try raw.scalarInt("SELECT count(*) FROM sqlite_master WHERE name = 'events'") == 0)
        // The window left the checkpoints: "a"'s ten ids became its first slice, through its checkpoint.
        #expect(try checkpointsHoldingAWindow(raw) == 0)
        #expect(try raw.scalarInt("SELECT count(*) FROM change_ids") == 1)
        #expect(try raw.scalarInt("SELECT json_array_length(CAST(ids AS TEXT)) FROM change_ids WHERE session = 'a' AND through_seq = 10") == 10)
        #expect(try raw.scalarInt("SELECT count(*) FROM journal") == 12 + 4 + 1)
    }

    @Test func versionTwoDatabaseIsUpgradedInPlaceItsRowsBecomingRunsOfOne() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        // A database as the build of one row per event left it: schema 2, written by hand.
        var plan = try OlderSchemaPlan()
        let (earlyA, checkpointA, lateA, eventsB) = (plan.earlyA, plan.checkpointA, plan.lateA, plan.eventsB)
        var stale = Script()
        let staleB = try stale.events(3)
        do {
            let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
            try raw.exec(Migrations.steps[0] + Migrations.steps[1] + "PRAGMA user_version = 2;")
            let row = try raw.prepareUncached("INSERT INTO journal(session, seq, entry) VALUES (?1, ?2, ?3)")
            defer { row.finalize() }
            func write(_ name: String, _ entry: LoggedEvent) throws {
                row.reset()
                try row.bind(1, name)
                try row.bind(2, entry.event.seq)
                try row.bind(3, TableCheckpoint.encodeEntry(entry.event, request: entry.request))
                try row.step()
            }
            // Rows 1...3: an earlier "b", deleted; then "a" (events 1...5 no longer needed once
            // its checkpoint is at 10) and "b" interleaved, as group commits wrote them.
            for entry in staleB { try write("b", entry) }
            for (offset, entry) in (earlyA + lateA).enumerated() {
                try write("a", entry)
                if offset < eventsB.count { try write("b", eventsB[offset]) }
            }
            // `last_seq` is as of the sessions' last checkpoint: the journal says where they end.
            for (name, table, last, firstRow) in [("a", checkpointA, UInt64(10), Int64(3)), ("b", Table(), UInt64(0), Int64(3))] {
                try writeOlderSession(raw, name: name, table: table, last: last, firstRow: firstRow)
            }
            raw.close()
        }

        let moreA: [LoggedEvent]
        do {
            let store = try openStore(directory, keepEvents: 5, service: service)
            #expect(try store.sessionNames() == ["a", "b"])
            #expect(try wait { store.load("a", completion: $0) }.get()?.events == Array(earlyA[5...]) + lateA)
            #expect(try wait { store.load("b", completion: $0) }.get()?.events == eventsB)
            #expect(try wait { store.read(session: "a", after: 12, completion: $0) }.get() == Array(lateA[2...]))
            // The log goes on where it was, now a row per append.
            moreA = try plan.planA.events(4)
            #expect(try wait { store.append(session: "a", events: moreA, completion: $0) }.get() == 21)
            store.close()
        }
        do {
            let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
            defer { raw.close() }
            #expect(try raw.scalarInt("PRAGMA user_version") == Int64(Migrations.current))
            // Rowids kept, one run of one event each; the append is one row, one run of four.
            #expect(try raw.scalarInt("SELECT count(*) FROM journal WHERE json_array_length(runs) = 1 AND runs ->> '$[0][2]' = 1") == 3 + 17 + 4)
            #expect(try raw.scalarInt("SELECT count(*) FROM journal WHERE id <= 24 AND length(entries) = runs ->> '$[0][3]'") == 24)
            #expect(try raw.scalarText("SELECT runs ->> '$[0]' FROM journal WHERE id = 25")?.hasPrefix(#"["a",18,4,"#) == true)
        }
        let store = try openStore(directory, keepEvents: 5, service: service)
        let a = try #require(try wait { store.load("a", completion: $0) }.get())
        #expect(a.events == Array(earlyA[5...]) + lateA + moreA)
        var table = a.checkpoint
        for logged in a.events where logged.event.seq > table.seq { try table.applyCommitted(logged.event, request: logged.request) }
        #expect(TableCheckpoint.encode(table) == TableCheckpoint.encode(plan.planA.table))
        #expect(try wait { store.read(session: "a", after: 19, completion: $0) }.get() == Array(moreA[2...]))
    }

    @Test func anAppendsRowIsReadFromAnyOfItsEventsAndPrunedEventByEvent() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        var script = Script()
        // Titles with a newline and other control characters: entries are joined by newlines.
        let first = try script.events(2)
        var all = first
        var titled = script.table
        for title in ["two\nlines", "tab\there\r\n", "\u{1}\n\n"] {
            guard
                case .applied(let event) = try titled.apply(
                    .addSection(NewSection(title: title)), by: Author(client: "c1", name: "ana"), changeId: nil)
            else {
                Issue.record("the title was refused")
                return
            }
            all.append(LoggedEvent(event: event))
        }
        script.table = titled
        all += try script.events(7)
        var atTen = Table()
        for logged in all.prefix(10) { try atTen.applyCommitted(logged.event, request: logged.request) }
        let runs = [all[0..<4], all[4..<8], all[8..<12]].map(Array.init)
        do {
            let store = try openStore(directory, keepEvents: 3, service: service)
            try wait { store.create(StoredSession(name: "s", epoch: "e", checkpoint: Table()), completion: $0) }.get()
            for run in runs { _ = try wait { store.append(session: "s", events: run, completion: $0) }.get() }
            #expect(try wait { store.read(session: "s", after: 1, completion: $0) }.get() == Array(all[1...]))
            #expect(try wait { store.read(session: "s", after: 5, completion: $0) }.get() == Array(all[5...]))
            // Checkpoint at 10 keeping 3 events: 8...12 stay, 8 being the last of the second row.
            try wait { store.saveCheckpoint("s", table: atTen, completion: $0) }.get()
            #expect(try wait { store.load("s", completion: $0) }.get()?.events == Array(all[7...]))
            store.close()
        }
        // The same from the index a reopen builds from the rows.
        let store = try openStore(directory, keepEvents: 3, service: service)
        #expect(try wait { store.load("s", completion: $0) }.get()?.events == Array(all[7...]))
        #expect(try wait { store.read(session: "s", after: 6, completion: $0) }.get() == nil)
        #expect(try wait { store.read(session: "s", after: 7, completion: $0) }.get() == Array(all[7...]))
        #expect(try wait { store.read(session: "s", after: 9, completion: $0) }.get() == Array(all[9...]))
        #expect(try wait { store.read(session: "s", after: 12, completion: $0) }.get() == [])
        let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
        defer { raw.close() }
        #expect(try raw.scalarInt("SELECT count(*) FROM journal") == 3)
    }

    @Test func journalStaysBoundedWhileASessionStopsWriting() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        var idle = Script()
        let idleEvents = try idle.events(5)
        var busy = Script()
        var busyEvents: [LoggedEvent] = []
        do {
            let store = try openStore(directory, keepEvents: 2, service: service)
            store.runOnWriter { tables in
                tables.journalSlack = 16
                tables.truncateStep = 1
            }
            for name in ["idle", "busy"] {
                try wait { store.create(StoredSession(name: name, epoch: "e", checkpoint: Table()), completion: $0) }.get()
            }
            _ = try wait { store.append(session: "idle", events: idleEvents, completion: $0) }.get()
            var idleAt3 = Script()
            _ = try idleAt3.events(3)
            try wait { store.saveCheckpoint("idle", table: idleAt3.table, completion: $0) }.get()
            // "busy" writes on and checkpoints every 10 events; "idle" still needs its events 2...5.
            for _ in 0..<30 {
                let events = try busy.events(10)
                busyEvents += events
                _ = try wait { store.append(session: "busy", events: events, completion: $0) }.get()
                try wait { store.saveCheckpoint("busy", table: busy.table, completion: $0) }.get()
            }
            store.close()
            let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
            defer { raw.close() }
            // 300 events were written; the journal holds about what is live (4 + 2) plus the slack.
            let rows = try #require(try raw.scalarInt("SELECT count(*) FROM journal"))
            #expect(rows <= SessionTables.journalGrowth * 6 + 16 + 10)
        }
        // Everything each session needs is still there, in order, after a reopen (a fresh index).
        let store = try openStore(directory, keepEvents: 2, service: service)
        #expect(try wait { store.load("idle", completion: $0) }.get()?.events == Array(idleEvents[1...]))
        #expect(try wait { store.load("busy", completion: $0) }.get()?.events == Array(busyEvents.suffix(2)))
        #expect(try wait { store.append(session: "idle", events: try idle.events(1), completion: $0) }.get() == 6)
    }

    @Test func sessionsHoldingTheJournalsTailAreMovedAFewACommitOldestFirst() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let idleNames = (0..<6).map { "idle\($0)" }
        var idleEvents: [String: [LoggedEvent]] = [:]
        let store = try openStore(directory, keepEvents: 2, service: service)
        store.runOnWriter { tables in
            tables.journalSlack = 16
            tables.truncateStep = 1
            // A commit of one event may move 4 events: one idle session (5 live events) at a time.
            tables.relocationAllowance = 4
        }
        for name in idleNames + ["busy"] {
            try wait { store.create(StoredSession(name: name, epoch: "e", checkpoint: Table()), completion: $0) }.get()
        }
        for name in idleNames {
            var script = Script()
            idleEvents[name] = try script.events(5)
            _ = try wait { store.append(session: name, events: idleEvents[name]!, completion: $0) }.get()
        }
        let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
        defer { raw.close() }
        let originals = try #require(try raw.scalarInt("SELECT max(id) FROM journal"))
        // Which idle sessions have a copy past their original rows, after each commit of "busy".
        func moved() throws -> [String] {
            idleNames.filter { name in
                let runs =
                    "SELECT count(*) FROM journal, json_each(journal.runs) WHERE journal.id > \(originals) AND json_each.value ->> 0 = '\(name)'"
                return (try? raw.scalarInt(runs)) != 0
            }
        }
        var busy = Script()
        var movedAfterEachCommit: [[String]] = []
        func note() throws {
            let now = try moved()
            if now != movedAfterEachCommit.last ?? [] { movedAfterEachCommit.append(now) }
        }
        for _ in 0..<150 {
            _ = try wait { store.append(session: "busy", events: try busy.events(1), completion: $0) }.get()
            try note()
            try wait { store.saveCheckpoint("busy", table: busy.table, completion: $0) }.get()
            try note()
        }
        // Live: 6 × 5 idle events and 3 of "busy"; past 3 × 33 + 16 journal events, one session
        // a commit moved, in the order they were written, not all six at once.
        #expect(movedAfterEachCommit == (1...6).map { Array(idleNames.prefix($0)) })
        #expect(try #require(try raw.scalarInt("SELECT min(id) FROM journal")) > originals)
        store.close()
        let reopened = try openStore(directory, keepEvents: 2, service: service)
        defer { reopened.close() }
        for name in idleNames {
            #expect(try wait { reopened.load(name, completion: $0) }.get()?.events == idleEvents[name])
        }
    }

    @Test func sessionCreatedAgainUnderItsNameNeverSeesTheOldOnesEvents() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        var fresh = Script()
        _ = try fresh.events(3)
        let start = fresh.table
        let freshEvents = try fresh.events(2)
        do {
            let store = try openStore(directory, keepEvents: 5, service: service)
            var old = Script()
            try wait { store.create(StoredSession(name: "s", epoch: "old", checkpoint: Table()), completion: $0) }.get()
            _ = try wait { store.append(session: "s", events: try old.events(8), completion: $0) }.get()
            // Events 1...3 of the old session are no longer live but stay in the journal a while.
            try wait { store.saveCheckpoint("s", table: old.table, completion: $0) }.get()
            _ = try wait { store.append(session: "s", events: try old.events(2), completion: $0) }.get()
            try wait { store.create(StoredSession(name: "s", epoch: "new", checkpoint: start), completion: $0) }.get()
            _ = try wait { store.append(session: "s", events: freshEvents, completion: $0) }.get()
            #expect(try wait { store.load("s", completion: $0) }.get()?.events == freshEvents)
            store.close()
        }
        let store = try openStore(directory, keepEvents: 5, service: service)
        let loaded = try #require(try wait { store.load("s", completion: $0) }.get())
        #expect(loaded.epoch == "new")
        #expect(loaded.events == freshEvents)
        #expect(try wait { store.read(session: "s", after: 2, completion: $0) }.get() == nil)
    }

    @Test func appendNotFollowingTheLogIsAConflict() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        var script = Script()
        _ = try wait { store.create(StoredSession(name: "a", epoch: "e", checkpoint: Table()), completion: $0) }.get()
        _ = try wait { store.create(StoredSession(name: "b", epoch: "e", checkpoint: Table()), completion: $0) }.get()
        let events = try script.events(4)

        // A gap, a session that is not stored, events that are not consecutive: each a conflict,
        // none of them failing the good append of "b" committed in the same batch.
        let release = store.holdWriter()
        let gap = Box<Result<UInt64, StoreError>>()
        let missing = Box<Result<UInt64, StoreError>>()
        let jumbled = Box<Result<UInt64, StoreError>>()
        let good = Box<Result<UInt64, StoreError>>()
        store.append(session: "a", events: [events[1]]) { gap.value = $0 }
        store.append(session: "nobody", events: [events[0]]) { missing.value = $0 }
        store.append(session: "a", events: [events[0], events[2]]) { jumbled.value = $0 }
        store.append(session: "b", events: Array(events[0...1])) { good.value = $0 }
        release.signal()
        store.flush()
        service.drain()
        for box in [gap, missing, jumbled] {
            guard case .failure(.conflict) = box.value else {
                Issue.record("expected a conflict, got \(String(describing: box.value))")
                continue
            }
        }
        #expect(try good.value?.get() == 2)
        #expect(try wait { store.load("a", completion: $0) }.get()?.events == [])
        #expect(try wait { store.load("b", completion: $0) }.get()?.events == Array(events[0...1]))
        // The log goes on where it is.
        #expect(try wait { store.append(session: "a", events: [events[0]], completion: $0) }.get() == 1)
    }

    @Test func failedCommitFailsEveryAppendOfItsBatchAndTheStoreRecovers() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        store.installCommitHook()
        var scripts = [Script(), Script(), Script()]
        for index in scripts.indices {
            _ = try wait { store.create(StoredSession(name: "s\(index)", epoch: "e", checkpoint: Table()), completion: $0) }.get()
        }
        let batches = try scripts.indices.map { try scripts[$0].events(3) }

        failCommits.store(true, ordering: .relaxed)
        defer { failCommits.store(false, ordering: .relaxed) }
        let release = store.holdWriter()
        let results = batches.indices.map { _ in Box<Result<UInt64, StoreError>>() }
        for index in batches.indices {
            store.append(session: "s\(index)", events: batches[index]) { results[index].value = $0 }
        }
        // The store hands operations to its writer at the end of the service thread's turn.
        service.drain()
        release.signal()
        store.flush()
        service.drain()
        for result in results {
            guard case .failure(.unavailable) = result.value else {
                Issue.record("expected unavailable, got \(String(describing: result.value))")
                continue
            }
        }
        #expect(try wait { store.load("s0", completion: $0) }.get()?.events == [])

        // The condition clears: the same appends go through, as if the failed batch never was.
        failCommits.store(false, ordering: .relaxed)
        for index in batches.indices {
            #expect(try wait { store.append(session: "s\(index)", events: batches[index], completion: $0) }.get() == 3)
        }
        #expect(try wait { store.load("s2", completion: $0) }.get()?.events == batches[2])
    }

    @Test func checkpointPrunesEventsBeyondTheResumeWindow() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, keepEvents: 5, service: service)
        var script = Script()
        _ = try wait { store.create(StoredSession(name: "s", epoch: "e", checkpoint: script.table), completion: $0) }.get()
        let first = try script.events(15)
        let checkpoint = script.table
        let rest = try script.events(5)
        _ = try wait { store.append(session: "s", events: first + rest, completion: $0) }.get()
        _ = try wait { store.append(session: "s", events: try script.events(5), completion: $0) }.get()

        try wait { store.saveCheckpoint("s", table: checkpoint, completion: $0) }.get()
        let loaded = try #require(try wait { store.load("s", completion: $0) }.get())
        #expect(loaded.checkpoint.seq == 15)
        #expect(loaded.events.map(\.event.seq) == Array(11...25))
        #expect(try wait { store.read(session: "s", after: 9, completion: $0) }.get() == nil)
        #expect(try wait { store.read(session: "s", after: 10, completion: $0) }.get()?.map(\.event.seq) == Array(11...25))
        #expect(try wait { store.read(session: "s", after: 25, completion: $0) }.get() == [])
        #expect(try wait { store.read(session: "s", after: 26, completion: $0) }.get() == nil)

        // A checkpoint past the log, or older than the stored one, is refused.
        var ahead = script
        _ = try ahead.events(1)
        let beyond = wait { store.saveCheckpoint("s", table: ahead.table, completion: $0) }
        #expect(beyond.isConflict)
        var older = Script()
        _ = try older.events(3)
        #expect(wait { store.saveCheckpoint("s", table: older.table, completion: $0) }.isConflict)
        #expect(wait { store.saveCheckpoint("nobody", table: older.table, completion: $0) }.isConflict)
    }

    @Test func restoredBackupGetsNewEpochs() throws {
        let directory = temporaryDirectory()
        let restored = temporaryDirectory()
        defer {
            removeDirectory(directory)
            removeDirectory(restored)
        }
        let store = try openStore(directory, service: service)
        var script = Script()
        _ = try wait { store.create(StoredSession(name: "a", epoch: "aaaaaaaa", checkpoint: script.table), completion: $0) }.get()
        _ = try wait { store.create(StoredSession(name: "b", epoch: "bbbbbbbb", checkpoint: Table()), completion: $0) }.get()
        let events = try script.events(6)
        _ = try wait { store.append(session: "a", events: events, completion: $0) }.get()

        let copy = restored + "/foldtable.db"
        try store.backup(to: copy)
        #expect(throws: StoreError.self) { try store.backup(to: copy) }
        // The copy is one file, readable without its source's WAL.
        #expect(!FileManager.default.fileExists(atPath: copy + "-wal"))

        let reopened = try openStore(restored, service: service)
        let a = try #require(try wait { reopened.load("a", completion: $0) }.get())
        let b = try #require(try wait { reopened.load("b", completion: $0) }.get())
        #expect(a.events == events)
        for (session, old) in [(a, "aaaaaaaa"), (b, "bbbbbbbb")] {
            #expect(session.epoch != old)
            #expect(session.epoch.count == 8 && session.epoch.allSatisfy(\.isHexDigit))
        }
        reopened.close()
        // Once: opening the restored database again keeps the new epochs.
        let again = try openStore(restored, service: service)
        #expect(try wait { again.load("a", completion: $0) }.get()?.epoch == a.epoch)
        // The original is untouched.
        #expect(try wait { store.load("a", completion: $0) }.get()?.epoch == "aaaaaaaa")
    }

    @Test func unwritableDirectoryFailsAtOpenNamingIt() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }

        let file = directory + "/plain-file"
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        #expect(throws: StoreError.unavailable("the data directory \(file) is not a directory")) {
            try openStore(file, service: service)
        }

        let deep = directory + "/missing/data"
        #expect(throws: StoreError.unavailable("cannot create the data directory \(deep): it does not exist, nor does its parent")) {
            try openStore(deep, service: service)
        }

        // Only the last component missing: made, like mkdir.
        let fresh = directory + "/data/"
        try openStore(fresh, service: service).close()
        #expect(FileManager.default.fileExists(atPath: directory + "/data/foldtable.db"))

        // Root writes through permission bits, so as root use a directory the kernel refuses.
        let locked: String
        if geteuid() == 0 {
            locked = "/proc/self"
        } else {
            locked = directory + "/locked"
            mkdir(locked, 0o555)
        }
        do {
            _ = try openStore(locked, service: service)
            Issue.record("opened a store in \(locked)")
        } catch {
            #expect(error.description.contains(locked))
            #expect(!error.description.contains("\n"))
        }
    }

    @Test func lockedDatabaseGivesUnavailableNotACrash() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        var script = Script()
        _ = try wait { store.create(StoredSession(name: "s", epoch: "e", checkpoint: Table()), completion: $0) }.get()
        let events = try script.events(2)

        let other = try SQLiteDatabase(path: directory + "/foldtable.db")
        try other.exec("BEGIN EXCLUSIVE")
        let refused = wait { store.append(session: "s", events: events, completion: $0) }
        guard case .failure(.unavailable(let why)) = refused else {
            Issue.record("expected unavailable, got \(refused)")
            return
        }
        #expect(why.contains("locked") || why.contains("busy"))
        // Under WAL, reads go on while another connection writes.
        #expect(try wait { store.load("s", completion: $0) }.get()?.events == [])

        try other.exec("COMMIT")
        other.close()
        #expect(try wait { store.append(session: "s", events: events, completion: $0) }.get() == 2)
    }

    @Test func changeIdWindowSurvivesReopen() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        var script = Script()
        do {
            let store = try openStore(directory, service: service)
            _ = try wait { store.create(StoredSession(name: "s", epoch: "e", checkpoint: script.table), completion: $0) }.get()
            _ = try wait { store.append(session: "s", events: try script.events(10), completion: $0) }.get()
            _ = try wait { store.saveCheckpoint("s", table: script.table, completion: $0) }.get()
            _ = try wait { store.append(session: "s", events: try script.events(7), completion: $0) }.get()
            _ = try wait { store.append(session: "s", events: try script.events(3, ids: false), completion: $0) }.get()
            store.close()
        }
        let store = try openStore(directory, service: service)
        var (checkpointSeq, table) = try loadToHead(store, "s")
        #expect(checkpointSeq == 10)
        #expect(table.seq == script.table.seq)
        #expect(table.rememberedChanges == script.table.rememberedChanges)
        #expect(table.rememberedChanges.count == 17)
        #expect(TableCheckpoint.encode(table) == TableCheckpoint.encode(script.table))
        // A retry of a remembered id is acknowledged with its original seq, not applied again.
        let retry = try table.apply(.toggle(section: .title(script.table.sections[0].title)), by: Author(client: "c1", name: "ana"), changeId: "c2")
        #expect(retry == .duplicate(seq: try #require(script.table.rememberedChanges.first { $0.id == "c2" }).seq))
    }

    @Test func changeIdWindowIsStoredOnceInSlicesThatGoWhenTheWindowPassesThem() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        var limits = TableLimits()
        limits.idempotencyWindow = 8
        var script = Script(table: Table(limits: limits))
        func open() throws(StoreError) -> SQLiteStore {
            try SQLiteStore(directory: directory, keepEvents: 300, limits: limits, post: service.post)
        }
        do {
            let store = try open()
            _ = try wait { store.create(StoredSession(name: "s", epoch: "e", checkpoint: script.table), completion: $0) }.get()
            // Checkpoints every 5 events, one of them with no new ids, past the window of 8.
            for round in 0..<7 {
                _ = try wait { store.append(session: "s", events: try script.events(5, ids: round != 3), completion: $0) }.get()
                _ = try wait { store.saveCheckpoint("s", table: script.table, completion: $0) }.get()
            }
            _ = try wait { store.append(session: "s", events: try script.events(2), completion: $0) }.get()
            store.close()
        }
        do {
            let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
            defer { raw.close() }
            #expect(try checkpointsHoldingAWindow(raw) == 0)
            // Each slice holds the ids of its five events; the window (ids of seqs 28...35 at the
            // checkpoint of 35) reaches into the slice through 30, and the older ones are gone.
            #expect(try raw.scalarInt("SELECT count(*) FROM change_ids") == 2)
            #expect(try raw.scalarInt("SELECT min(through_seq) FROM change_ids") == 30)
            #expect(try raw.scalarInt("SELECT sum(json_array_length(CAST(ids AS TEXT))) FROM change_ids") == 10)
        }
        let store = try open()
        var (checkpointSeq, table) = try loadToHead(store, "s")
        #expect(checkpointSeq == 35)
        #expect(table.rememberedChanges == script.table.rememberedChanges)
        #expect(table.rememberedChanges.map(\.seq) == Array(30...37))
        // A retry of the oldest remembered id (the script's 30th change, a new section "S30") is
        // acknowledged with its seq, not applied again.
        #expect(script.table.rememberedChanges.first?.id == "c30")
        let retry = try table.apply(.addSection(NewSection(title: "S30")), by: Author(client: "c1", name: "ana"), changeId: "c30")
        #expect(retry == .duplicate(seq: 30))
        store.close()
    }

    @Test func groupCommitPutsManyAppendsInOneTransaction() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        let sessions = 20
        var scripts = Array(repeating: Script(), count: sessions)
        for index in 0..<sessions {
            _ = try wait { store.create(StoredSession(name: "s\(index)", epoch: "e", checkpoint: Table()), completion: $0) }.get()
        }
        var planned: [(session: Int, events: [LoggedEvent])] = []
        for round in 0..<50 {
            for index in 0..<sessions {
                planned.append((index, try scripts[index].events(1, ids: round % 2 == 0)))
            }
        }
        store.installCommitHook()
        let commitsBefore = commitCount.load(ordering: .relaxed)
        let release = store.holdWriter()
        let order = Box<[UInt64]>()
        order.value = []
        for (session, events) in planned {
            store.append(session: "s\(session)", events: events) { result in
                order.value?.append((try? result.get()) ?? 0)
            }
        }
        // The store hands operations to its writer at the end of the service thread's turn.
        service.drain()
        release.signal()
        store.flush()
        service.drain()
        #expect(commitCount.load(ordering: .relaxed) - commitsBefore == 1)
        // Completions came back in call order, each with its seq.
        #expect(order.value == planned.map { $0.events[0].event.seq })
        for index in 0..<sessions {
            #expect(try wait { store.load("s\(index)", completion: $0) }.get()?.events.count == 50)
        }
        // The commit's appends fill journal rows of about a page (`SessionTables.rowLimit`), far
        // fewer than one a run; each run reads back whole, or from any event, after a reopen too
        // (an index built from the rows' runs).
        let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
        let rows = try raw.scalarInt("SELECT count(*) FROM journal") ?? 0
        #expect(rows > 1 && rows <= 1_000 / 10)
        #expect(try raw.scalarInt("SELECT sum(json_array_length(runs)) FROM journal") == 1_000)
        // No row passes the limit by more than the run that crossed it.
        #expect(try raw.scalarInt("SELECT max(length(entries)) FROM journal") ?? .max <= Int64(SessionTables.rowLimit + 1_024))
        // Runs list their events and bytes: together, each row's entries and the newlines between.
        #expect(try raw.scalarInt("SELECT sum(value ->> '$[2]') FROM journal, json_each(journal.runs)") == 1_000)
        #expect(
            try raw.scalarInt(
                "SELECT count(*) FROM journal WHERE (SELECT sum(value ->> '$[3]') FROM json_each(runs)) + json_array_length(runs) - 1 != length(entries)"
            ) == 0)
        #expect(try raw.scalarText("SELECT runs ->> '$[#-1]' FROM journal ORDER BY id DESC LIMIT 1")?.hasPrefix(#"["s19",50,1,"#) == true)
        raw.close()
        store.close()
        let reopened = try openStore(directory, service: service)
        for index in 0..<sessions {
            let events = planned.filter { $0.session == index }.flatMap(\.events)
            #expect(try wait { reopened.load("s\(index)", completion: $0) }.get()?.events == events)
            #expect(try wait { reopened.read(session: "s\(index)", after: 25, completion: $0) }.get() == Array(events[25...]))
        }
        reopened.close()
    }

    @Test func appendsOfOneSessionThatFollowEachOtherInACommitShareARunAndReadBackFromAnyEvent() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        var scripts = ["a": Script(), "b": Script()]
        for name in ["a", "b"] {
            _ = try wait { store.create(StoredSession(name: name, epoch: "e", checkpoint: Table()), completion: $0) }.get()
        }
        // a a a b a b(2 events) b: a's first three share a run, b's last two appends another.
        let plan: [(String, Int)] = [("a", 1), ("a", 1), ("a", 1), ("b", 1), ("a", 1), ("b", 2), ("b", 1)]
        var logged: [String: [LoggedEvent]] = [:]
        let release = store.holdWriter()
        let seqs = Box<[UInt64]>()
        seqs.value = []
        for (name, count) in plan {
            let events = try scripts[name]!.events(count)
            logged[name, default: []] += events
            store.append(session: name, events: events) { seqs.value?.append((try? $0.get()) ?? 0) }
        }
        service.drain()
        release.signal()
        store.flush()
        service.drain()
        #expect(seqs.value == [1, 2, 3, 1, 4, 3, 4])
        let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
        #expect(try raw.scalarInt("SELECT count(*) FROM journal") == 1)
        let runs = "SELECT json_group_array(json_array(value ->> '$[0]', value ->> '$[1]', value ->> '$[2]')) FROM journal, json_each(runs)"
        #expect(try raw.scalarText(runs) == #"[["a",1,3],["b",1,1],["a",4,1],["b",2,3]]"#)
        #expect(
            try raw.scalarInt(
                "SELECT count(*) FROM journal WHERE (SELECT sum(value ->> '$[3]') FROM json_each(runs)) + json_array_length(runs) - 1 != length(entries)"
            ) == 0)
        raw.close()
        for reopen in [false, true] {
            let current = reopen ? try openStore(directory, service: service) : store
            if reopen { store.close() }
            for name in ["a", "b"] {
                let events = logged[name]!
                #expect(try wait { current.load(name, completion: $0) }.get()?.events == events)
                for after in 0...events.count {
                    #expect(try wait { current.read(session: name, after: UInt64(after), completion: $0) }.get() == Array(events[after...]))
                }
            }
            // The next commit's first append of `a` starts a run of its own in a row of its own.
            let more = try scripts["a"]!.events(2)
            logged["a"]! += more
            #expect(try wait { current.append(session: "a", events: more, completion: $0) }.get() == UInt64(logged["a"]!.count))
            #expect(try wait { current.read(session: "a", after: 3, completion: $0) }.get() == Array(logged["a"]![3...]))
            if reopen { current.close() }
        }
    }

    @Test func aSessionsRunStopsGrowingAtTheRowLimitAndGoesOnInTheNextRow() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        var script = Script()
        _ = try wait { store.create(StoredSession(name: "a", epoch: "e", checkpoint: Table()), completion: $0) }.get()
        var logged: [LoggedEvent] = []
        let release = store.holdWriter()
        for _ in 0..<200 {
            let events = try script.events(1)
            logged += events
            store.append(session: "a", events: events) { _ in }
        }
        service.drain()
        release.signal()
        store.flush()
        service.drain()
        let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
        #expect(try raw.scalarInt("SELECT count(*) FROM journal") ?? 0 > 1)
        #expect(try raw.scalarInt("SELECT count(*) FROM journal WHERE json_array_length(runs) != 1") == 0)
        #expect(try raw.scalarInt("SELECT max(length(entries)) FROM journal") ?? .max <= Int64(SessionTables.rowLimit + 1_024))
        #expect(try raw.scalarInt("SELECT sum(runs ->> '$[0][2]') FROM journal") == 200)
        raw.close()
        store.close()
        let reopened = try openStore(directory, service: service)
        #expect(try wait { reopened.load("a", completion: $0) }.get()?.events == logged)
        for after in stride(from: 0, through: 200, by: 7) {
            #expect(try wait { reopened.read(session: "a", after: UInt64(after), completion: $0) }.get() == Array(logged[after...]))
        }
        reopened.close()
    }

    @Test func aSessionReplacedInTheCommitThatLoggedItsLastEventsStartsAfresh() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        var old = Script()
        let oldEvents = try old.events(3)
        // The new session starts at seq 3 too: its events follow the old ones' seqs exactly.
        var fresh = Script()
        _ = try fresh.events(3)
        let start = fresh.table
        let freshEvents = try fresh.events(2)
        do {
            let store = try openStore(directory, service: service)
            try wait { store.create(StoredSession(name: "s", epoch: "old", checkpoint: Table()), completion: $0) }.get()
            store.installCommitHook()
            let commitsBefore = commitCount.load(ordering: .relaxed)
            let release = store.holdWriter()
            store.append(session: "s", events: oldEvents) { _ in }
            store.create(StoredSession(name: "s", epoch: "new", checkpoint: start)) { _ in }
            store.append(session: "s", events: freshEvents) { _ in }
            service.drain()
            release.signal()
            store.flush()
            service.drain()
            #expect(commitCount.load(ordering: .relaxed) - commitsBefore == 1)
            #expect(try wait { store.load("s", completion: $0) }.get()?.events == freshEvents)
            store.close()
        }
        let store = try openStore(directory, service: service)
        let loaded = try #require(try wait { store.load("s", completion: $0) }.get())
        #expect(loaded.epoch == "new")
        #expect(loaded.events == freshEvents)
        #expect(try wait { store.read(session: "s", after: 2, completion: $0) }.get() == nil)
        store.close()
    }

    @Test func readsSeeEarlierWritesOfTheSameBatch() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        var script = Script()
        let events = try script.events(3)
        let release = store.holdWriter()
        let log = Box<[String]>()
        log.value = []
        store.create(StoredSession(name: "s", epoch: "e", checkpoint: Table())) { _ in log.value?.append("create") }
        store.append(session: "s", events: events) { _ in log.value?.append("append") }
        store.load("s") { result in log.value?.append("load \((try? result.get())?.events.count ?? -1)") }
        store.delete("s") { _ in log.value?.append("delete") }
        store.read(session: "s", after: 0) { result in log.value?.append("read \(result.isConflict)") }
        release.signal()
        store.flush()
        service.drain()
        #expect(log.value == ["create", "append", "load 3", "delete", "read true"])
        #expect(try store.sessionNames() == [])
    }

    @Test func damagedDataIsReportedCorruptNotACrash() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        var script = Script()
        try wait { store.create(StoredSession(name: "s", epoch: "e", checkpoint: Table()), completion: $0) }.get()
        try wait { store.create(StoredSession(name: "t", epoch: "e", checkpoint: Table()), completion: $0) }.get()
        // One event a commit: one row each (rows 1, 2, 3), so that only event 2 is damaged.
        for _ in 0..<3 { _ = try wait { store.append(session: "s", events: try script.events(1), completion: $0) }.get() }
        store.flush()

        let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
        try raw.exec("UPDATE journal SET entries = CAST(substr(entries, 1, 10) || x'7b226576656e74223a' AS BLOB) WHERE id = 2")
        try raw.exec("UPDATE checkpoints SET data = x'00ff' WHERE session = 't'")
        raw.close()
        for result in [wait { store.load("s", completion: $0) }, wait { store.load("t", completion: $0) }] {
            guard case .failure(.corrupt) = result else {
                Issue.record("expected corrupt, got \(result)")
                continue
            }
        }
        guard case .failure(.corrupt) = wait({ store.read(session: "s", after: 1, completion: $0) }) else {
            Issue.record("a damaged entry was read back")
            return
        }
        // Events before the damage still read.
        #expect(try wait { store.read(session: "s", after: 2, completion: $0) }.get()?.count == 1)
        // A run holding more entries than its row lists is damaged too.
        let rawAgain = try SQLiteDatabase(path: directory + "/foldtable.db")
        try rawAgain.exec("UPDATE journal SET entries = CAST(substr(entries, 1, 5) || x'0a' || substr(entries, 6) AS BLOB) WHERE id = 3")
        rawAgain.close()
        guard case .failure(.corrupt) = wait({ store.read(session: "s", after: 2, completion: $0) }) else {
            Issue.record("a run holding more entries than listed was read back")
            return
        }
    }

    @Test func fileThatIsNotADatabaseFailsAtOpenNamingIt() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        #expect(FileManager.default.createFile(atPath: directory + "/foldtable.db", contents: Data(repeating: 0x41, count: 4_096)))
        do {
            _ = try openStore(directory, service: service)
            Issue.record("opened a file that is not a database")
        } catch {
            #expect(error.description.contains(directory + "/foldtable.db"))
        }
    }

    @Test func closedStoreFailsOperationsInsteadOfHanging() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        store.close()
        guard case .failure(.unavailable) = wait({ store.load("s", completion: $0) }) else {
            Issue.record("a closed store answered a load")
            return
        }
        #expect(throws: StoreError.self) { try store.sessionNames() }
        store.flush()
    }

    @Test func fullDiskFailsTheBatchAndTheStoreRecovers() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        _ = try wait { store.create(StoredSession(name: "s", epoch: "e", checkpoint: Table()), completion: $0) }.get()
        var script = Script()

        // A file-size limit makes writes past it fail with EFBIG, which SQLite reports as a full
        // disk or an I/O error. Without ignoring SIGXFSZ the kernel would kill the test process.
        let previousHandler = signal(SIGXFSZ, SIG_IGN)
        var saved = rlimit()
        getrlimit(Int32(RLIMIT_FSIZE.rawValue), &saved)
        var small = saved
        small.rlim_cur = 256 * 1_024
        setrlimit(Int32(RLIMIT_FSIZE.rawValue), &small)
        var failure: StoreError?
        for _ in 0..<2_000 {
            let events = try script.events(20)
            let result = wait { store.append(session: "s", events: events, completion: $0) }
            if case .failure(let error) = result {
                failure = error
                break
            }
        }
        setrlimit(Int32(RLIMIT_FSIZE.rawValue), &saved)
        signal(SIGXFSZ, previousHandler)

        guard case .unavailable = try #require(failure) else {
            Issue.record("expected unavailable, got \(String(describing: failure))")
            return
        }
        // The failed events were not stored; the log goes on from what was committed.
        let loaded = try #require(try wait { store.load("s", completion: $0) }.get())
        let last = loaded.events.last?.event.seq ?? 0
        var resumed = Script()
        let replayed = try resumed.events(Int(last) + 20)
        #expect(try wait { store.append(session: "s", events: Array(replayed[Int(last)...]), completion: $0) }.get() == last + 20)
    }

    @Test func anAppenderHearsOfEachOfItsAppendsInOrderAfterTheLogsObserver() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        var script = Script()
        _ = try wait { store.create(StoredSession(name: "a", epoch: "e", checkpoint: Table()), completion: $0) }.get()
        let events = try script.events(3)
        let heard = Box<[String]>()
        let observer = HeardAppends("observer", into: heard)
        let session = HeardAppends("session", into: heard)
        store.appendObserver = observer

        // One object for three appends committed together; the middle one does not follow.
        let release = store.holdWriter()
        store.append(session: "a", events: [events[0]], appender: session)
        store.append(session: "a", events: [events[2]], appender: session)
        store.append(session: "a", events: [events[1]], appender: session)
        service.drain()
        release.signal()
        store.flush()
        service.drain()
        #expect(
            heard.value == [
                "observer 1", "session 1", "observer conflict", "session conflict", "observer 2", "session 2",
            ])
    }

    @Test func theStoreKeepsAnAppenderAliveUntilItHearsThenLetsItGoWhetherTheCommitHeldOrFailed() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        store.installCommitHook()
        var script = Script()
        _ = try wait { store.create(StoredSession(name: "a", epoch: "e", checkpoint: Table()), completion: $0) }.get()
        let events = try script.events(2)
        let heard = Box<[String]>()
        weak var appender: HeardAppends?
        func append(_ event: LoggedEvent) {
            // The only strong reference is the store's from here on.
            let session = HeardAppends("session", into: heard)
            appender = session
            store.append(session: "a", events: [event], appender: session)
        }
        append(events[0])
        store.flush()
        service.drain()
        #expect(heard.value == ["session 1"])
        #expect(appender == nil)

        failCommits.store(true, ordering: .relaxed)
        defer { failCommits.store(false, ordering: .relaxed) }
        append(events[1])
        store.flush()
        service.drain()
        #expect(heard.value?.count == 2)
        #expect(heard.value?.last?.hasPrefix("session storage unavailable") == true)
        #expect(appender == nil)
    }
}

extension Result {
    var isConflict: Bool {
        if case .failure(let error as StoreError) = self, case .conflict = error { return true }
        return false
    }
}

/// A ``LogAppender`` that writes down what it hears, as "name seq" or "name conflict".
final class HeardAppends: LogAppender, @unchecked Sendable {
    private let name: String
    private let heard: Box<[String]>

    init(_ name: String, into heard: Box<[String]>) {
        self.name = name
        self.heard = heard
    }

    func appendFinished(_ result: Result<UInt64, StoreError>) {
        let outcome: String
        switch result {
        case .success(let seq): outcome = String(seq)
        case .failure(.conflict): outcome = "conflict"
        case .failure(let error): outcome = error.description
        }
        heard.value = (heard.value ?? []) + ["\(name) \(outcome)"]
    }
}
