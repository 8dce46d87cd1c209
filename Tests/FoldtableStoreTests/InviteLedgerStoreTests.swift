import FoldtableCore
import FoldtableServer
import Foundation
import Testing

@testable import FoldtableStore

/// Invites and withdrawn token ids in the SQLite store: kept across a reopen, listed per session
/// without withdrawn or expired ones, and pruned of what lapsed as new ones are written.
@Suite struct InviteLedgerStoreTests {
    let service = ServiceQueue()
    /// Times from now on: a withdrawal prunes what lapsed by the wall clock.
    let t = Hub.wallClock()

    func invite(_ id: String, session: String = "s", created: UInt64 = 1_000, expires: UInt64 = 2_000) -> Invite {
        Invite(id: id, session: session, role: .editor, label: "for \(id)", created: t + created, expires: t + expires, createdBy: "olga")
    }

    @Test func invitesAndWithdrawalsSurviveAReopen() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        do {
            let store = try openStore(directory, service: service)
            try wait { store.record(invite("a"), completion: $0) }.get()
            try wait { store.record(invite("b"), completion: $0) }.get()
            try wait { store.record(invite("c", session: "other"), completion: $0) }.get()
            try wait { store.withdraw(id: "a", session: "s", until: t + 2_060, completion: $0) }.get()
            try wait { store.withdraw(id: "script-1", session: "s", until: t + 5_000, completion: $0) }.get()
            store.close()
        }
        let store = try openStore(directory, service: service)
        defer { store.close() }
        #expect(try store.withdrawnTokens(now: t + 1_500) == ["a": t + 2_060, "script-1": t + 5_000])
        // Only what is in force: a's token has lapsed by 2,060.
        #expect(try store.withdrawnTokens(now: t + 2_060) == ["script-1": t + 5_000])
        #expect(try wait { store.invites(session: "s", now: t + 1_500, completion: $0) }.get() == [invite("b")])
        #expect(try wait { store.invites(session: "other", now: t + 1_500, completion: $0) }.get() == [invite("c", session: "other")])
        // Expired invites are not listed.
        #expect(try wait { store.invites(session: "s", now: t + 2_000, completion: $0) }.get() == [])
    }

    @Test func expiredRowsArePrunedAsNewOnesAreWritten() throws {
        let directory = temporaryDirectory()
        defer { removeDirectory(directory) }
        let store = try openStore(directory, service: service)
        defer { store.close() }
        try wait { store.record(invite("old", expires: 1_100), completion: $0) }.get()
        try wait { store.record(invite("new", created: 1_200, expires: 3_000), completion: $0) }.get()
        let rows = Box<Int64>()
        store.runOnWriter { tables in rows.value = (try? tables.database.scalarInt("SELECT count(*) FROM invites")) ?? nil }
        store.flush()
        #expect(rows.value == 1)
        try wait { store.withdraw(id: "x", session: "s", until: t + 1_000, completion: $0) }.get()
        // A withdrawal keeps the later end of an id withdrawn twice.
        try wait { store.withdraw(id: "y", session: "s", until: t + 9_000, completion: $0) }.get()
        try wait { store.withdraw(id: "y", session: "s", until: t + 8_000, completion: $0) }.get()
        #expect(try store.withdrawnTokens(now: t)["y"] == t + 9_000)
    }
}
