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
            try wait { store.saveWebhookCursor(session: "s", delivered: 9, paused: "backlog", completion: $0) }.get()
            store.close()
        }
        let store = try openStore(directory, service: service)
        defer { store.close() }
        var expected = hook
        expected.delivered = 9
        expected.paused = "backlog"
        #expect(try store.webhooks() == [expected])
        try wait { store.saveWebhookCursor(session: "s", delivered: 10, paused: nil, completion: $0) }.get()
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
}
