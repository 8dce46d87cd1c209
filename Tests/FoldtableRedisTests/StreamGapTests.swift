import FoldtableCore
import FoldtableServer
import Glibc
import Testing

@testable import FoldtableRedis

/// A node that falls behind while connected, by more than the entries a snapshot keeps: the
/// entries are numbered, so its reader sees the stream was trimmed past it and the session is
/// reloaded instead of applying what comes after the gap (a real `redis-server`, two hubs).
@Suite(.serialized, .enabled(if: RedisServer.shouldRun, "redis-server is not on PATH (install redis-server); under CI=true these tests fail instead"))
struct StreamGaps {
    let table: Table = {
        let sections = ["a", "b", "c"].map { key in
            Section(key: key, title: key.uppercased(), collapsed: true, rows: (0..<3).map { Row(key: "\(key)\($0)", label: "row \($0)", value: "") })
        }
        return try! Table(options: TableOptions(), sections: sections, seq: 0)
    }()

    /// A snapshot every 5 events with 2 entries kept behind it: the stream is trimmed often.
    func trimmingOften(_ config: inout ServerConfig) {
        config.checkpointEvents = 5
        config.historyEvents = 2
    }

    func seqs(_ node: RedisNode) -> [Int64] {
        node.messages(1, type: "event").map { if case .integer(let seq)? = $0["seq"] { seq } else { -1 } }
    }

    @Test func aNodeThatOpenedTheSessionAndFellBehindTheTrimmingReloadsItInsteadOfSkippingEntries() throws {
        let server = try RedisServer()
        let a = RedisNode("a", redis: server.url, configure: trimmingOften)
        let b = RedisNode("b", redis: server.url, configure: trimmingOften)
        defer {
            a.close()
            b.close()
        }
        b.hub.createSessionIfAbsent("plan", table: table)
        b.join(1, name: "bo")
        settle([a, b]) { !b.messages(1, type: "welcome").isEmpty && a.broker.isAvailable && b.broker.isAvailable }
        for n in 0..<3 { b.say(1, #"{"type":"toggle","section":"a","id":"early\#(n)"}"#) }
        settle([b]) { b.events(1).count == 3 }

        // Node a opens the session, then is held back before it follows the stream (its service
        // thread does not run: the open's answer waits in its queue) while b writes past the
        // window and its snapshots trim the stream behind a's position.
        a.join(1, name: "ana")
        var waited = 0
        while a.serviceQueue.isEmpty && waited < 2_000 {
            usleep(5_000)
            waited += 1
        }
        try #require(!a.serviceQueue.isEmpty, "the open's answer did not come back in 10 s")
        for n in 0..<20 { b.say(1, #"{"type":"toggle","section":"b","id":"late\#(n)"}"#) }
        settle([b]) { b.events(1).count == 23 }
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        // b's snapshots trim the stream from its own Redis connection, after b applied their
        // events: under load the trimming can reach Redis after b's last event reached the
        // test, so the test waits for it (before a follows, or a would find no gap).
        var stream = try wait { redis.xrange(RedisBroker.streamKey("plan"), completion: $0) }.get()
        var polls = 0
        while (stream.first.flatMap { RedisBroker.number($0) } ?? 0) <= 4 && polls < 400 {
            usleep(25_000)
            polls += 1
            stream = try wait { redis.xrange(RedisBroker.streamKey("plan"), completion: $0) }.get()
        }
        // Every entry is numbered, one more than the one before; a's position (entry 3) is gone.
        let numbers = stream.map { RedisBroker.number($0) }
        #expect(numbers == (UInt64(24 - stream.count)...23).map { $0 })
        #expect(try #require(numbers.first ?? nil) > 4)

        settle([a, b]) { a.messages(1, type: "welcome").count == 2 }
        let welcomes = a.messages(1, type: "welcome")
        #expect(welcomes[0]["seq"] == .integer(3) && welcomes[1]["seq"] != .integer(3))
        #expect(welcomes[0]["epoch"] == welcomes[1]["epoch"])
        #expect(a.hub.metrics.sessionReloads == 1)
        b.say(1, #"{"type":"toggle","section":"c","id":"after"}"#)
        settle([a, b]) { b.events(1).count == 24 && a.events(1).last == b.events(1).last }
        // What a applied after the fresh welcome continues its seq without a gap, and ends
        // where b ends, with the same table.
        let reloadedAt: Int64 = if case .integer(let seq)? = welcomes[1]["seq"] { seq } else { -1 }
        #expect(seqs(a) == Array(reloadedAt + 1...24))
        a.join(2, name: "late-ana")
        b.join(2, name: "late-bo")
        settle([a, b]) { !a.messages(2, type: "welcome").isEmpty && !b.messages(2, type: "welcome").isEmpty }
        #expect(a.messages(2, type: "welcome")[0]["table"] == b.messages(2, type: "welcome")[0]["table"])
        #expect(a.messages(2, type: "welcome")[0]["seq"] == .integer(24))
    }

    @Test func aSnapshotRecordsTheNumberOfTheEntryItCoversAndEntriesWithoutANumberAreReadUnchecked() throws {
        let server = try RedisServer()
        let a = RedisNode("a", redis: server.url, configure: trimmingOften)
        let b = RedisNode("b", redis: server.url, configure: trimmingOften)
        defer {
            a.close()
            b.close()
        }
        a.hub.createSessionIfAbsent("plan", table: table)
        a.join(1, name: "ana")
        settle([a, b]) { !a.messages(1, type: "welcome").isEmpty }
        b.join(1, name: "bo")
        settle([a, b]) { !b.messages(1, type: "welcome").isEmpty }
        for n in 0..<6 { a.say(1, #"{"type":"toggle","section":"a","id":"n\#(n)"}"#) }
        settle([a, b]) { a.events(1).count == 6 && b.events(1).count == 6 }
        let redis = RedisClient(RedisClient.Options(url: server.url))
        defer { redis.close() }
        let snapshot = try wait {
            redis.send(RedisCommand("HMGET", RedisBroker.snapshotKey("plan"), "ms", "sq", "n"), completion: $0)
        }.get()
        let fields = snapshot.elements?.compactMap(\.string) ?? []
        try #require(fields.count == 3)
        let covered = try #require(StreamID("\(fields[0])-\(fields[1])"))
        let entries = try wait { redis.xrange(RedisBroker.streamKey("plan"), from: .including(covered), count: 1, completion: $0) }.get()
        let entry = try #require(entries.first)
        #expect(entry.id == covered)
        #expect(RedisBroker.number(entry) != nil && fields[2] == RedisBroker.number(entry).map(String.init))

        // An entry as the previous version wrote it (no number), between numbered ones.
        var old = SequencedRequest(
            change: .toggle(section: .key("b")), id: "old", author: Author(client: "b.c9", name: "old"), origin: RequestOrigin(node: "b", number: 999)
        )
        old.position = ""
        _ = try wait { redis.xadd(RedisBroker.streamKey("plan"), fields: [StreamField("req", RequestCoding.encode(old))], completion: $0) }.get()
        b.say(1, #"{"type":"toggle","section":"c","id":"next"}"#)
        settle([a, b]) { a.events(1).count == 8 && b.events(1).count == 8 }
        #expect(a.events(1) == b.events(1))
        #expect(a.hub.metrics.sessionReloads == 0 && b.hub.metrics.sessionReloads == 0)
        #expect(a.messages(1, type: "welcome").count == 1 && b.messages(1, type: "welcome").count == 1)
    }
}
