import FoldtableCore
import FoldtableServer
import Foundation
import Testing

@testable import FoldtableStore

/// Private views stored beside a session's checkpoint: written only when a save carries them,
/// read back with the session, absent for sessions of an older database.
@Suite struct SavedViewsStoreTests {
    let service = ServiceQueue()
    let views = SavedViews(["u:ana": ["s1": true, "s2": false], "u:bo": ["s1": false]])

    @Test func viewsSavedWithACheckpointAreLoadedBackAfterReopen() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        var script = Script()
        do {
            let store = try openStore(directory, service: service)
            try wait { store.create(StoredSession(name: "s", epoch: "e", checkpoint: script.table), completion: $0) }.get()
            #expect(try wait { store.load("s", completion: $0) }.get()?.views == SavedViews())
            _ = try wait { store.append(session: "s", events: try script.events(3), completion: $0) }.get()
            try wait { store.saveCheckpoint("s", table: script.table, views: views, completion: $0) }.get()
            store.close()
        }
        let store = try openStore(directory, service: service)
        defer { store.close() }
        let loaded = try #require(try wait { store.load("s", completion: $0) }.get())
        #expect(loaded.views == views)
        #expect(loaded.checkpoint.seq == 3)
        // A checkpoint without views keeps the stored ones; empty views remove them.
        _ = try wait { store.append(session: "s", events: try script.events(2), completion: $0) }.get()
        try wait { store.saveCheckpoint("s", table: script.table, completion: $0) }.get()
        #expect(try wait { store.load("s", completion: $0) }.get()?.views == views)
        try wait { store.saveCheckpoint("s", table: script.table, views: SavedViews(), completion: $0) }.get()
        #expect(try wait { store.load("s", completion: $0) }.get()?.views == SavedViews())
    }

    @Test func aSessionCreatedAgainOrDeletedLosesItsViews() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        defer { store.close() }
        try wait { store.create(StoredSession(name: "s", epoch: "e", checkpoint: Table(), views: views), completion: $0) }.get()
        #expect(try wait { store.load("s", completion: $0) }.get()?.views == views)
        try wait { store.create(StoredSession(name: "s", epoch: "f", checkpoint: Table()), completion: $0) }.get()
        #expect(try wait { store.load("s", completion: $0) }.get()?.views == SavedViews())
        try wait { store.saveCheckpoint("s", table: Table(), views: views, completion: $0) }.get()
        try wait { store.delete("s", completion: $0) }.get()
        try wait { store.create(StoredSession(name: "s", epoch: "g", checkpoint: Table()), completion: $0) }.get()
        #expect(try wait { store.load("s", completion: $0) }.get()?.views == SavedViews())
    }

    @Test func aVersionFourDatabaseLoadsWithoutViewsAndKeepsThemOnceUpgraded() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        var script = Script()
        _ = try script.events(4)
        do {
            // A database as the build before saved views left it: schema 4, written by hand.
            let raw = try SQLiteDatabase(path: directory + "/foldtable.db")
            try raw.exec(Migrations.steps[0..<4].joined() + "PRAGMA user_version = 4;")
            var checkpoint = script.table
            checkpoint.stopKeepingChangeIds()
            try writeOlderSession(raw, name: "old", table: checkpoint, last: checkpoint.seq, firstRow: 0)
            raw.close()
        }
        do {
            let store = try openStore(directory, service: service)
            let loaded = try #require(try wait { store.load("old", completion: $0) }.get())
            #expect(loaded.views == SavedViews())
            #expect(loaded.checkpoint.seq == 4)
            try wait { store.saveCheckpoint("old", table: loaded.checkpoint, views: views, completion: $0) }.get()
            store.close()
        }
        let store = try openStore(directory, service: service)
        defer { store.close() }
        #expect(try wait { store.load("old", completion: $0) }.get()?.views == views)
    }

    @Test func savedViewsEncodeSortedAndDecodeBack() throws {
        let bytes = views.encoded()
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"v":1,"views":{"u:ana":{"s1":true,"s2":false},"u:bo":{"s1":false}}}"#)
        #expect(try SavedViews(decoding: bytes) == views)
        #expect(try SavedViews(decoding: SavedViews().encoded()) == SavedViews())
        // A token's `sub` may be as long as a token's claims allow: its scope is two bytes longer.
        let long = SavedViews(["u:" + String(repeating: "s", count: 4_096): ["k": true]])
        #expect(try SavedViews(decoding: long.encoded()) == long)
    }

    @Test func savedViewsOfAnotherFormatOrShapeAreRefused() {
        for text in [#"{"v":2,"views":{}}"#, #"{"v":1,"views":[]}"#, #"{"v":1,"views":{"u:a":{"s":1}}}"#, #"{"v":1,"views":{"u:a":true}}"#, "[]"] {
            #expect(throws: ProtocolError.self) { try SavedViews(decoding: Array(text.utf8)) }
        }
    }
}
