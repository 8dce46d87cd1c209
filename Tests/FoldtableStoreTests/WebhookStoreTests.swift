import FoldtableCore
import FoldtableServer
import Testing

@testable import FoldtableStore

/// Webhooks and their cursors in SQLite: kept across a reopen, moved without touching the rest,
/// gone with their session.
@Suite struct WebhookStoreTests {
    let service = ServiceQueue()
    let hook = StoredWebhook(
        session: "s", url: "https://hooks.example.com/in", secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", epoch: "e1", delivered: 3)

    @Test func aWebhookAndItsCursorAreReadBackAfterAReopen() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        do {
            let store = try openStore(directory, service: service)
            try wait { store.create(StoredSession(name: "s", epoch: "e1", checkpoint: Table()), completion: $0) }.get()
            try wait { store.saveWebhook(hook, completion: $0) }.get()
            try wait { store.saveWebhookCursor(session: "s", epoch: "e1", delivered: 9, paused: "backlog", completion: $0) }.get()
            store.close()
        }
        let store = try openStore(directory, service: service)
        defer { store.close() }
        var expected = hook
        expected.delivered = 9
        expected.paused = "backlog"
        #expect(try store.webhooks() == [expected])
        try wait { store.saveWebhookCursor(session: "s", epoch: "e1", delivered: 10, paused: nil, completion: $0) }.get()
        expected.delivered = 10
        expected.paused = nil
        #expect(try store.webhooks() == [expected])
    }

    @Test func aWebhookGoesWithItsSessionOrAloneAndAnotherSessionsStays() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        defer { store.close() }
        var other = hook
        other.session = "t"
        for name in ["s", "t"] { try wait { store.create(StoredSession(name: name, epoch: "e1", checkpoint: Table()), completion: $0) }.get() }
        try wait { store.saveWebhook(hook, completion: $0) }.get()
        try wait { store.saveWebhook(other, completion: $0) }.get()
        try wait { store.delete("s", completion: $0) }.get()
        #expect(try store.webhooks() == [other])
        try wait { store.deleteWebhook(session: "t", completion: $0) }.get()
        #expect(try store.webhooks() == [])
    }

    @Test func aWebhookIsNotWrittenForASessionGoneOrOfAnotherEpochAndItsCursorOnlyForItsEpoch() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        defer { store.close() }
        // No session: a PUT that raced the session's delete writes nothing.
        try wait { store.saveWebhook(hook, completion: $0) }.get()
        #expect(try store.webhooks() == [])
        try wait { store.create(StoredSession(name: "s", epoch: "e2", checkpoint: Table()), completion: $0) }.get()
        try wait { store.saveWebhook(hook, completion: $0) }.get()
        #expect(try store.webhooks() == [])
        var current = hook
        current.epoch = "e2"
        try wait { store.saveWebhook(current, completion: $0) }.get()
        // A cursor of the webhook of an earlier session of that name moves nothing.
        try wait { store.saveWebhookCursor(session: "s", epoch: "e1", delivered: 50, paused: nil, completion: $0) }.get()
        #expect(try store.webhooks() == [current])
    }

    @Test func aRowLeftForASessionMadeAgainIsDroppedAtStart() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        do {
            let store = try openStore(directory, service: service)
            try wait { store.create(StoredSession(name: "s", epoch: "e1", checkpoint: Table()), completion: $0) }.get()
            try wait { store.create(StoredSession(name: "t", epoch: "e1", checkpoint: Table()), completion: $0) }.get()
            var other = hook
            other.session = "t"
            try wait { store.saveWebhook(hook, completion: $0) }.get()
            try wait { store.saveWebhook(other, completion: $0) }.get()
            store.close()
        }
        // An older build's orphan: the session made again under a new epoch, the row left over.
        let database = try SQLiteDatabase(path: directory + "/foldtable.db")
        try database.run("UPDATE sessions SET epoch = 'e9' WHERE name = 's'")
        database.close()
        let store = try openStore(directory, service: service)
        defer { store.close() }
        #expect(try store.webhooks().map(\.session) == ["t"])
    }
}
