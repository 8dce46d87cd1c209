import FoldtableCore
import Foundation
import Testing

@testable import FoldtableRedis
@testable import FoldtableServer

/// Invites and withdrawn token ids over a real `redis-server`: what one node records another
/// lists, a withdrawal reaches the other node through its poll, and a node that starts later
/// reads the list before it serves.
@Suite(.serialized, .enabled(if: RedisServer.shouldRun, "redis-server is not on PATH (install redis-server); under CI=true these tests fail instead"))
struct InvitesOverRedis {
    /// A node's broker and ledger, their completions run by draining `queue`.
    final class Node {
        let queue = ServiceQueue(wake: {})
        let broker: RedisBroker
        let ledger: RedisInvites

        init(_ url: RedisURL) {
            let queue = self.queue
            let options = RedisClient.Options(url: url)
            broker = RedisBroker(options, limits: TableLimits(), post: { queue.post($0) })
            ledger = RedisInvites(broker: broker, options: options)
        }

        /// Drains the queue until `done` holds (20 s at most).
        func run(until done: () -> Bool) {
            let deadline = Date().addingTimeInterval(20)
            while !done() && Date() < deadline {
                queue.drain()
                usleep(2_000)
            }
        }

        func close() {
            ledger.close()
            broker.close()
            queue.drain()
        }
    }

    @Test func aWithdrawalOnOneNodeReachesAnotherAndALaterNodeReadsItAtStartUp() throws {
        let server = try RedisServer()
        let a = Node(server.url)
        let b = Node(server.url)
        defer {
            a.close()
            b.close()
        }
        let now = Hub.wallClock()
        let invite = Invite(id: "inv1", session: "plan", role: .editor, label: "for Bo", created: now, expires: now + 600, createdBy: "olga")
        var recorded: Result<Void, StoreError>?
        a.ledger.record(invite) { recorded = $0 }
        a.run { recorded != nil }
        #expect((try? recorded?.get()) != nil)
        var listed: [Invite]?
        b.ledger.invites(session: "plan", now: now) { listed = try? $0.get() }
        b.run { listed != nil }
        #expect(listed == [invite])

        var heard: [String: UInt64] = [:]
        b.ledger.follow { heard.merge($0) { _, new in new } }
        var withdrawn: Result<Void, StoreError>?
        a.ledger.withdraw(id: "inv1", session: "plan", until: now + 660) { withdrawn = $0 }
        a.run { withdrawn != nil }
        #expect((try? withdrawn?.get()) != nil)
        b.run { heard["inv1"] != nil }
        #expect(heard["inv1"] == now + 660)
        listed = nil
        b.ledger.invites(session: "plan", now: now) { listed = try? $0.get() }
        b.run { listed != nil }
        #expect(listed == [])

        let late = Node(server.url)
        defer { late.close() }
        #expect(try late.ledger.withdrawnTokens(now: now) == ["inv1": now + 660])
        #expect(try late.ledger.withdrawnTokens(now: now + 660) == [:])
    }

    @Test func anInviteDecodesOnlyFromWhatItsEncodingWrote() {
        let invite = Invite(id: "x", session: "s", role: .owner, label: "a \"quoted\" label", created: 5, expires: 9, createdBy: "olga")
        #expect(RedisInvites.decode(id: "x", session: "s", RedisInvites.encode(invite)) == invite)
        #expect(RedisInvites.decode(id: "x", session: "s", Array(#"{"role":"admin","label":"","created":1,"expires":2,"createdBy":""}"#.utf8)) == nil)
        #expect(RedisInvites.decode(id: "x", session: "s", Array("not json".utf8)) == nil)
    }
}
