import Dispatch
import FoldtableCore
import Foundation
import Glibc
import Synchronization
import Testing

@testable import FoldtableRedis

/// The client against a real redis-server (Debian's), one per test on a free loopback port.
/// Serialized: several tests measure timeouts, which a crowded machine would make flaky.
@Suite(.serialized, .enabled(if: RedisServer.shouldRun, "redis-server is not on PATH (install redis-server); under CI=true these tests fail instead"))
struct TalkingToARealRedis {
    func client(_ url: RedisURL, states: StateLog? = nil, _ tune: (inout RedisClient.Options) -> Void = { _ in }) -> RedisClient {
        var options = RedisClient.Options(url: url)
        options.connectTimeoutMs = 1_000
        options.commandTimeoutMs = 1_000
        options.backoff = ReconnectBackoff(baseMs: 50, maxMs: 400)
        tune(&options)
        let ignore: @Sendable (RedisClient.State) -> Void = { _ in }
        return RedisClient(options, stateChanged: states?.callback ?? ignore)
    }

    @Test func commandsGetTheirRepliesAsSwiftValues() throws {
        let server = try RedisServer()
        let redis = client(server.url)
        defer { redis.close() }
        try wait { redis.ping(completion: $0) }.get()
        #expect(try wait { redis.get("snapshot:plan", completion: $0) }.get() == nil)
        try wait { redis.set("snapshot:plan", Array("table".utf8), completion: $0) }.get()
        #expect(try wait { redis.get("snapshot:plan", completion: $0) }.get() == Array("table".utf8))
        #expect(try wait { redis.send(RedisCommand("INCRBY", "n", 5), completion: $0) }.get() == .integer(5))
        #expect(try wait { redis.send(RedisCommand("TYPE", "n"), completion: $0) }.get() == .status("string"))
        #expect(try wait { redis.send(RedisCommand("MGET", "n", "none"), completion: $0) }.get() == .array([.bulk(Array("5".utf8)), .null]))
        #expect(try wait { redis.del(["n", "snapshot:plan", "none"], completion: $0) }.get() == 2)
        try wait { redis.set("short", [1], expireMs: 60_000, completion: $0) }.get()
        let ttl = try wait { redis.send(RedisCommand("PTTL", "short"), completion: $0) }.get().integer ?? 0
        #expect(ttl > 0 && ttl <= 60_000)
    }

    @Test func streamsAreAppendedTrimmedAndReadInOrder() throws {
        let server = try RedisServer()
        let redis = client(server.url)
        defer { redis.close() }
        var ids: [StreamID] = []
        for n in 1...5 {
            ids.append(
                try wait { redis.xadd("session:plan", fields: [StreamField("change", "c\(n)"), StreamField("node", "a")], completion: $0) }.get())
        }
        #expect(ids == ids.sorted() && Set(ids).count == 5)
        let all = try wait { redis.xrange("session:plan", completion: $0) }.get()
        #expect(all.map(\.id) == ids)
        #expect(all.map { String(decoding: $0["change"] ?? [], as: UTF8.self) } == ["c1", "c2", "c3", "c4", "c5"])
        #expect(all[0].fields.map(\.name) == ["change", "node"])
        let after = try wait { redis.xrange("session:plan", from: .excluding(ids[2]), completion: $0) }.get()
        #expect(after.map(\.id) == [ids[3], ids[4]])
        let window = try wait { redis.xrange("session:plan", from: .including(ids[1]), to: .including(ids[3]), count: 2, completion: $0) }.get()
        #expect(window.map(\.id) == [ids[1], ids[2]])
        let last = try wait { redis.xrevrange("session:plan", count: 1, completion: $0) }.get()
        #expect(last.map(\.id) == [ids[4]])
        let before = try wait { redis.xrevrange("session:plan", from: .excluding(ids[4]), to: .excluding(ids[1]), completion: $0) }.get()
        #expect(before.map(\.id) == [ids[3], ids[2]])

        // A snapshot covers everything up to ids[2]: MINID drops what it covers.
        #expect(try wait { redis.xtrim("session:plan", .minimumID(ids[3], approximate: false), completion: $0) }.get() == 3)
        #expect(try wait { redis.xlen("session:plan", completion: $0) }.get() == 2)
        // XADD trims as it appends; an explicit ID must be above the last.
        let explicit = StreamID(milliseconds: ids[4].milliseconds + 1, sequence: 7)
        let added = try wait {
            redis.xadd("session:plan", id: explicit, fields: [StreamField("change", "c6")], trim: .maxLength(1, approximate: false), completion: $0)
        }
        #expect(try added.get() == explicit)
        #expect(try wait { redis.xrange("session:plan", completion: $0) }.get().map(\.id) == [explicit])
        let stale = try wait { redis.xadd("session:plan", id: ids[0], fields: [StreamField("change", "old")], completion: $0) }
        guard case .failure(.server(let message)) = stale else { throw RedisTestError("a stale ID was taken: \(stale)") }
        #expect(message.contains("equal or smaller"))
        #expect(try wait { redis.xlen("no-such-stream", completion: $0) }.get() == 0)
    }

    @Test func aBlockingReadOnManyStreamsIsWokenByAnAppendFromAnotherClient() throws {
        let server = try RedisServer()
        let reader = client(server.url)
        let writer = client(server.url)
        defer {
            reader.close()
            writer.close()
        }
        let streams = (0..<20).map { "session:s\($0)" }
        let done = DispatchSemaphore(value: 0)
        let read = Mutex<Result<[StreamBatch], RedisError>?>(nil)
        let started = Date()
        reader.xread(streams.map { (key: $0, after: StreamID.zero) }, count: 10, blockMs: 10_000) { result in
            read.withLock { $0 = result }
            done.signal()
        }
        try server.waitForBlockedClients(1)
        #expect(read.withLock { $0 } == nil, "the read returned before anything was appended")
        let id = try wait { writer.xadd("session:s13", fields: [StreamField("change", "toggle")], completion: $0) }.get()
        #expect(done.wait(timeout: .now() + 5) == .success)
        #expect(Date().timeIntervalSince(started) < 5)
        let batches = try #require(read.withLock { $0 }).get()
        #expect(batches == [StreamBatch(key: "session:s13", entries: [StreamEntry(id: id, fields: [StreamField("change", "toggle")])])])

        // Nothing new after the position: the block ends empty, not with an error.
        let quiet = try wait { reader.xread([(key: "session:s13", after: id)], blockMs: 100, completion: $0) }
        #expect(try quiet.get() == [])
        // BLOCK 0 would wait forever, which cannot be told from a dead server: 0 means no block.
        #expect(try wait { reader.xread([(key: "session:s13", after: .zero)], blockMs: 0, completion: $0) }.get().map(\.key) == ["session:s13"])
    }

    @Test func commandsQueuedTogetherShareOneRoundTripAndKeepTheirOrder() throws {
        let server = try RedisServer()
        let redis = client(server.url)
        defer { redis.close() }
        try wait { redis.ping(completion: $0) }.get()
        let before = redis.counters
        let commands = (0..<1_000).map { RedisCommand("INCR", "counter\($0 % 3)") }
        let results = try wait { completion in redis.send(commands) { completion(.success($0)) } }.get()
        let values = try results.map { try $0.get().integer ?? -1 }
        let expected: [Int64] = (0..<1_000).map { (n: Int) -> Int64 in Int64(n / 3 + 1) }
        #expect(values == expected)
        let after = redis.counters
        #expect(after.roundTrips - before.roundTrips == 1)
        #expect(after.commands - before.commands == 1_000)

        // Single sends queued while the thread is busy are taken together as well.
        let finished = DispatchSemaphore(value: 0)
        let order = Mutex<[Int64]>([])
        for n in 0..<200 {
            redis.send(RedisCommand("INCR", "ordered")) { result in
                order.withLock { $0.append((try? result.get().integer) ?? -1) }
                if n == 199 { finished.signal() }
            }
        }
        #expect(finished.wait(timeout: .now() + 10) == .success)
        #expect(order.withLock { $0 } == Array(1...200))
        #expect(redis.counters.roundTrips - after.roundTrips <= 200)
    }

    @Test func aTransactionWakesABlockedReaderOnceWithAllItsAppends() throws {
        let server = try RedisServer()
        let reader = client(server.url)
        let writer = client(server.url)
        defer {
            reader.close()
            writer.close()
        }
        try wait { writer.ping(completion: $0) }.get()
        let done = DispatchSemaphore(value: 0)
        let read = Mutex<Result<[StreamBatch], RedisError>?>(nil)
        reader.xread([(key: "session:t", after: StreamID.zero)], count: 100, blockMs: 10_000) { result in
            read.withLock { $0 = result }
            done.signal()
        }
        try server.waitForBlockedClients(1)
        let appends = (1...5).map { RedisCommand("XADD", "session:t", "*", "change", "c\($0)") }
        let results = try wait { completion in writer.transaction(appends) { completion(.success($0)) } }.get()
        let ids = try results.map { try #require($0.get().string.flatMap(StreamID.init)) }
        #expect(ids.count == 5 && ids == ids.sorted())
        #expect(done.wait(timeout: .now() + 5) == .success)
        // Sent one by one, the read would have been answered after the first append alone.
        let batches = try #require(read.withLock { $0 }).get()
        #expect(batches.map(\.key) == ["session:t"])
        #expect(batches.first?.entries.map(\.id) == ids)

        // A command refused when it runs fails alone; the others ran.
        let mixed = try wait { completion in
            writer.transaction([RedisCommand("INCR", "n"), RedisCommand("GET", "session:t"), RedisCommand("INCR", "n")]) { completion(.success($0)) }
        }.get()
        #expect(try mixed[0].get() == .integer(1))
        #expect(try mixed[2].get() == .integer(2))
        guard case .success(.error(let wrongType)) = mixed[1] else { throw RedisTestError("GET on a stream in a transaction: \(mixed[1])") }
        #expect(wrongType.hasPrefix("WRONGTYPE"))
        // A command refused when queued aborts them all: each says why, none ran.
        let aborted = try wait { completion in
            writer.transaction([RedisCommand("INCR", "n"), RedisCommand("NOSUCHCOMMAND")]) { completion(.success($0)) }
        }.get()
        guard case .failure(.server(let first)) = aborted[0], case .failure(.server(let second)) = aborted[1] else {
            throw RedisTestError("an aborted transaction: \(aborted)")
        }
        #expect(first.hasPrefix("EXECABORT"))
        #expect(second.contains("unknown command"))
        #expect(try wait { writer.send(RedisCommand("GET", "n"), completion: $0) }.get() == .bulk(Array("2".utf8)))
        #expect(try wait { completion in writer.transaction([]) { completion(.success($0)) } }.get().isEmpty)
    }

    @Test func largeBinaryValuesPassUnchanged() throws {
        let server = try RedisServer()
        let redis = client(server.url) { $0.commandTimeoutMs = 10_000 }
        defer { redis.close() }
        // Every byte value, zeros and CR LF included, in a pattern that does not repeat soon.
        var state: UInt32 = 12_345
        let big = (0..<(8 << 20)).map { _ -> UInt8 in
            state = state &* 1_103_515_245 &+ 12_345
            return UInt8(truncatingIfNeeded: state >> 16)
        }
        try wait { redis.set("snapshot:big", big, completion: $0) }.get()
        #expect(try wait { redis.get("snapshot:big", completion: $0) }.get() == big)
        let field = Array(big.prefix(1 << 20)) + [0, 0, 13, 10]
        let id = try wait { redis.xadd("session:big", fields: [StreamField("table", field)], completion: $0) }.get()
        #expect(try wait { redis.xrange("session:big", completion: $0) }.get() == [StreamEntry(id: id, fields: [StreamField("table", field)])])
    }

    @Test func errorRepliesAreErrorsAndTheConnectionGoesOn() throws {
        let server = try RedisServer()
        let redis = client(server.url)
        defer { redis.close() }
        _ = try wait { redis.xadd("stream", fields: [StreamField("a", "b")], completion: $0) }.get()
        let wrongType = try wait { redis.get("stream", completion: $0) }
        guard case .failure(.server(let message)) = wrongType else { throw RedisTestError("GET on a stream: \(wrongType)") }
        #expect(message.hasPrefix("WRONGTYPE"))
        #expect(try wait { redis.send(RedisCommand("NOSUCHCOMMAND", "x"), completion: $0) }.get().summary.hasPrefix("error ERR unknown command"))
        // Redis ignores an empty command without a reply: it is refused before it is sent.
        let empty = try wait { redis.send(RedisCommand(arguments: []), completion: $0) }
        #expect(empty == .failure(.invalidCommand("a command needs a name")))
        let unexpected = try wait { redis.send(RedisCommand("ECHO", "x"), decode: { $0.integer }, completion: $0) }
        #expect(unexpected == .failure(.unexpectedReply("ECHO answered bulk of 1 bytes")))
        try wait { redis.ping(completion: $0) }.get()
        #expect(redis.counters.connects == 1)
    }

    @Test func aDatabaseTheServerDoesNotHaveIsAClearErrorForEveryCommand() throws {
        let server = try RedisServer()
        var url = server.url
        url.database = 99
        let states = StateLog()
        let redis = client(url, states: states)
        defer { redis.close() }
        try states.wait { $0.isDisconnected }
        let result = try wait { redis.ping(completion: $0) }
        guard case .failure(.notConnected(let message)) = result else { throw RedisTestError("PING on db 99: \(result)") }
        #expect(message.contains("SELECT refused: ERR DB index is out of range"))
        #expect(message.contains(":\(server.port)/99"))
        var good = server.url
        good.database = 15
        let fifteen = client(good)
        defer { fifteen.close() }
        try wait { fifteen.set("k", [1], completion: $0) }.get()
        let zero = client(server.url)
        defer { zero.close() }
        #expect(try wait { fifteen.get("k", completion: $0) }.get() == [1])
        #expect(try wait { zero.get("k", completion: $0) }.get() == nil)
    }

    @Test func aClosedPortIsAClearErrorAndTheClientKeepsTrying() throws {
        let port = try RedisServer.freePort()
        let states = StateLog()
        let redis = client(RedisURL(host: "127.0.0.1", port: port), states: states)
        defer { redis.close() }
        try states.wait { $0.isDisconnected }
        let result = try wait { redis.get("k", completion: $0) }
        guard case .failure(let error) = result, case .notConnected(let message) = error else { throw RedisTestError("GET: \(result)") }
        #expect(message.contains("Connection refused"))
        #expect(message.contains("next attempt in"))
        #expect(!error.mayHaveRun)
        // Attempts go on in the background, spaced by the backoff (50, 100, 200, 400 ms ...).
        usleep(1_000_000)
        let failed = redis.counters.failedConnects
        #expect(failed >= 3 && failed <= 12, "\(failed) attempts in a second")
        // One report of the outage, not one per attempt.
        #expect(states.all.count == 1)
    }

    @Test func aWrongPasswordIsRefusedWithoutShowingIt() throws {
        let server = try RedisServer(arguments: ["--requirepass", "right-one"])
        let states = StateLog()
        let wrong = client(try RedisURL(parsing: "redis://:wrong-one@127.0.0.1:\(server.port)"), states: states)
        defer { wrong.close() }
        let result = try wait { wrong.ping(completion: $0) }
        guard case .failure(.notConnected(let message)) = result else { throw RedisTestError("PING: \(result)") }
        #expect(message.contains("AUTH refused"))
        #expect(!message.contains("wrong-one"))
        let right = client(try RedisURL(parsing: "redis://:right-one@127.0.0.1:\(server.port)"))
        defer { right.close() }
        try wait { right.ping(completion: $0) }.get()
    }

    @Test func aRestartedRedisIsReconnectedAndCommandsInFlightFailWithoutARetry() throws {
        let server = try RedisServer(appendOnly: true)
        let states = StateLog()
        let redis = client(server.url, states: states)
        defer { redis.close() }
        try states.wait { $0.isConnected }
        // One pipeline: an INCR that runs, a read that blocks, an INCR queued behind it.
        let done = DispatchSemaphore(value: 0)
        let results = Mutex<[Result<RedisReply, RedisError>]>([])
        redis.send([
            RedisCommand("INCR", "applied"),
            RedisCommand(arguments: ["XREAD", "BLOCK", "20000", "STREAMS", "nothing", "$"].map(\.redisBytes), blockMs: 20_000),
            RedisCommand("INCR", "applied"),
        ]) { all in
            results.withLock { $0 = all }
            done.signal()
        }
        // The read blocks, so the INCR before it in the pipeline has run and been answered.
        try server.waitForBlockedClients(1)
        server.kill()
        #expect(done.wait(timeout: .now() + 5) == .success)
        let got = results.withLock { $0 }
        #expect(try got[0].get() == .integer(1))
        for lost in got[1...] {
            guard case .failure(let error) = lost, case .connectionLost = error else { throw RedisTestError("in flight: \(lost)") }
            #expect(error.mayHaveRun)
        }
        // While it is down, commands fail at once, unsent.
        let down = try wait { redis.get("applied", completion: $0) }
        guard case .failure(.notConnected) = down else { throw RedisTestError("while down: \(down)") }

        try server.start()
        try states.wait(for: 2) { $0.isConnected }
        #expect(states.all == [.connected, .disconnected(reason: "the server closed the connection"), .connected])
        // The INCR that ran once is there once; the one behind the read never ran, and the
        // client did not send either again.
        #expect(try wait { redis.get("applied", completion: $0) }.get() == Array("1".utf8))
        #expect(redis.counters.connects == 2)
    }

    @Test func aRedisRestartedWhileIdleIsNoticedAndTheNextCommandGoesToTheNewOne() throws {
        let server = try RedisServer()
        let states = StateLog()
        let watched = client(server.url, states: states) { $0.idlePingMs = 100 }
        let unwatched = client(server.url) { $0.idlePingMs = 0 }
        defer {
            watched.close()
            unwatched.close()
        }
        try states.wait { $0.isConnected }
        try wait { unwatched.ping(completion: $0) }.get()
        server.kill()
        // Nothing is sent, yet the outage is reported: the idle check's PING found it.
        try states.wait { $0.isDisconnected }
        try server.start()
        try states.wait(for: 2) { $0.isConnected }
        // The other client sent nothing meanwhile: its next command finds the old connection
        // closed before writing, and goes out on a new one instead of failing as "may have run".
        try wait { unwatched.set("after", [1], completion: $0) }.get()
        #expect(unwatched.counters.connects == 2)
        #expect(watched.counters.commands == 0)
    }

    @Test func aStoppedRedisTimesCommandsOutAndIsUsedAgainWhenItContinues() throws {
        let server = try RedisServer()
        let states = StateLog()
        let redis = client(server.url, states: states) {
            $0.commandTimeoutMs = 300
            $0.connectTimeoutMs = 300
        }
        defer {
            server.resume()
            redis.close()
        }
        try states.wait { $0.isConnected }
        server.pause()
        let started = Date()
        let result = try wait { redis.send(RedisCommand("INCR", "n"), completion: $0) }
        let waited = Date().timeIntervalSince(started)
        guard case .failure(let error) = result, case .timedOut(let message) = error else { throw RedisTestError("INCR: \(result)") }
        #expect(message == "no reply within 300 ms")
        #expect(error.mayHaveRun)
        #expect(waited >= 0.25 && waited < 5)
        // Reconnect attempts reach the kernel's backlog but get no PING answer: they time out too.
        try states.wait { $0.isDisconnected }
        let stillDown = try wait { redis.ping(completion: $0) }
        #expect(stillDown.isFailure)

        server.resume()
        try states.wait(for: 2) { $0.isConnected }
        // The INCR was sent before the stop: Redis ran it after SIGCONT, once.
        #expect(try wait { redis.get("n", completion: $0) }.get() == Array("1".utf8))
    }

    @Test func closingEndsABlockedReadAtOnceAndRefusesLaterCommands() throws {
        let server = try RedisServer()
        let redis = client(server.url)
        let done = DispatchSemaphore(value: 0)
        let read = Mutex<Result<[StreamBatch], RedisError>?>(nil)
        redis.xread([(key: "quiet", after: .zero)], blockMs: 30_000) { result in
            read.withLock { $0 = result }
            done.signal()
        }
        try server.waitForBlockedClients(1)
        let started = Date()
        redis.close()
        #expect(Date().timeIntervalSince(started) < 2)
        #expect(done.wait(timeout: .now() + 1) == .success)
        #expect(read.withLock { $0 } == .failure(.connectionLost("the client was closed")))
        let refused = try wait { redis.ping(completion: $0) }
        guard case .failure(.closed) = refused else { throw RedisTestError("a command after close: \(refused)") }
    }

    @Test func scriptsAreLoadedOnEachConnectionAndRunWithEvalsha() throws {
        let server = try RedisServer()
        let redis = client(server.url)
        defer { redis.close() }
        // Presence: a node's heartbeat, expired members dropped, live ones listed, in one step.
        let heartbeat = RedisScript(
            """
            redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
            redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
            return redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[3], '+inf')
            """)
        _ = try wait { redis.zadd("presence:plan", [(member: "node-b", score: 1_000), (member: "node-c", score: 5_000)], completion: $0) }.get()
        let live = try wait { redis.evaluate(heartbeat, keys: ["presence:plan"], arguments: ["node-a", 9_000, 2_000], completion: $0) }.get()
        #expect(live == .array([.bulk(Array("node-c".utf8)), .bulk(Array("node-a".utf8))]))
        let scripts = try wait { redis.send(RedisCommand("SCRIPT", "EXISTS", "0000000000000000000000000000000000000000"), completion: $0) }.get()
        #expect(scripts == .array([.integer(0)]))
        let first = redis.counters.commands

        // SCRIPT FLUSH empties the server's cache: the next call hears NOSCRIPT (not retried),
        // the one after loads it again.
        _ = try wait { redis.send(RedisCommand("SCRIPT", "FLUSH"), completion: $0) }.get()
        let flushed = try wait { redis.evaluate(heartbeat, keys: ["presence:plan"], arguments: ["node-a", 9_500, 2_000], completion: $0) }
        guard case .failure(.server(let message)) = flushed else { throw RedisTestError("after SCRIPT FLUSH: \(flushed)") }
        #expect(message.hasPrefix("NOSCRIPT"))
        let again = try wait { redis.evaluate(heartbeat, keys: ["presence:plan"], arguments: ["node-a", 9_900, 6_000], completion: $0) }.get()
        #expect(again == .array([.bulk(Array("node-a".utf8))]))
        #expect(redis.counters.commands - first == 3)

        // In a transaction too: NOSCRIPT comes inside EXEC's reply, and the next use loads it.
        let twice = [9_950, 9_960].map { RedisCommand(script: heartbeat, keys: ["presence:plan"], arguments: ["node-a", $0, 6_000]) }
        _ = try wait { redis.send(RedisCommand("SCRIPT", "FLUSH"), completion: $0) }.get()
        let missing = try wait { completion in redis.transaction(twice) { completion(.success($0)) } }.get()
        #expect(missing.allSatisfy { if case .success(.error(let message)) = $0 { message.hasPrefix("NOSCRIPT") } else { false } })
        let loaded = try wait { completion in redis.transaction(twice) { completion(.success($0)) } }.get()
        #expect(try loaded.map { try $0.get() } == Array(repeating: .array([.bulk(Array("node-a".utf8))]), count: 2))

        let broken = try wait { redis.evaluate(RedisScript("return +"), keys: [], arguments: [], completion: $0) }
        guard case .failure(.server(let compile)) = broken else { throw RedisTestError("a broken script: \(broken)") }
        #expect(compile.contains("Error compiling script"))
        let raising = try wait { redis.evaluate(RedisScript("return redis.error_reply('no quorum')"), keys: [], arguments: [], completion: $0) }
        #expect(raising == .failure(.server("no quorum")))
        try wait { redis.ping(completion: $0) }.get()
    }

    @Test func presenceHeartbeatsExpireThroughSortedSets() throws {
        let server = try RedisServer()
        let redis = client(server.url)
        defer { redis.close() }
        #expect(try wait { redis.zadd("presence", [(member: "a", score: 100), (member: "b", score: 200)], completion: $0) }.get() == 2)
        #expect(try wait { redis.zadd("presence", [(member: "a", score: 300)], completion: $0) }.get() == 0)
        #expect(try wait { redis.zrangeByScore("presence", min: 150, completion: $0) }.get() == ["b", "a"])
        #expect(try wait { redis.zrangeByScore("presence", min: 0, max: 250, completion: $0) }.get() == ["b"])
        #expect(try wait { redis.zremRangeByScore("presence", through: 250, completion: $0) }.get() == 1)
        #expect(try wait { redis.zrem("presence", ["a", "z"], completion: $0) }.get() == 1)
        #expect(try wait { redis.zrangeByScore("presence", min: 0, completion: $0) }.get() == [])
        _ = try wait { redis.zadd("presence", [(member: "c", score: 1)], completion: $0) }.get()
        #expect(try wait { redis.pexpire("presence", milliseconds: 50, completion: $0) }.get() == true)
        usleep(150_000)
        #expect(try wait { redis.zrangeByScore("presence", min: 0, completion: $0) }.get() == [])
        #expect(try wait { redis.pexpire("presence", milliseconds: 50, completion: $0) }.get() == false)
    }
}

extension Result {
    var isFailure: Bool {
        if case .failure = self { return true }
        return false
    }
}
