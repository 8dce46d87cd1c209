import Testing

@testable import FoldtableRedis

@Suite struct HashSlotsAreTheClusters {
    @Test func crc16OfTheDocsCheckStringIs0x31C3() {
        #expect(RedisHashSlot.crc16(Array("123456789".utf8)) == 0x31C3)
        #expect(RedisHashSlot.crc16([UInt8]()) == 0)
    }

    // Each expected slot is what `CLUSTER KEYSLOT` of redis-server 7.0 answered for the key.
    @Test func slotsMatchWhatRedisAnswersForPlainKeys() {
        #expect(RedisHashSlot.slot(of: "123456789") == 12_739)
        #expect(RedisHashSlot.slot(of: "somekey") == 11_058)
        #expect(RedisHashSlot.slot(of: "foo") == 12_182)
        #expect(RedisHashSlot.slot(of: "bar") == 5_061)
    }

    @Test func aHashTagAloneDecidesTheSlot() {
        #expect(RedisHashSlot.slot(of: "foo{hash_tag}") == 2_515)
        #expect(RedisHashSlot.slot(of: "{user1000}.following") == 3_443)
        #expect(RedisHashSlot.slot(of: "{user1000}.following") == RedisHashSlot.slot(of: "{user1000}.followers"))
        #expect(RedisHashSlot.slot(of: "foo{bar}{zap}") == RedisHashSlot.slot(of: "bar"))
        #expect(RedisHashSlot.slot(of: "foo{bar}") == 5_061)
    }

    @Test func anEmptyTagHashesTheWholeKeyAndOnlyTheFirstBraceOpens() {
        #expect(RedisHashSlot.slot(of: "foo{}{bar}") == 8_363)
        #expect(RedisHashSlot.slot(of: "foo{{bar}}zap") == 4_015)
        #expect(RedisHashSlot.slot(of: "foo{{bar}}zap") == RedisHashSlot.slot(of: "{bar"))
        #expect(RedisHashSlot.slot(of: "foo{bar") == Int(RedisHashSlot.crc16(Array("foo{bar".utf8))) % 16_384)
    }

    @Test func everyKeyOfASessionSharesOneSlot() {
        let slot = RedisHashSlot.slot(of: RedisBroker.streamKey("weekly plan"))
        #expect(RedisHashSlot.slot(of: RedisBroker.snapshotKey("weekly plan")) == slot)
        #expect(RedisHashSlot.slot(of: RedisBroker.countKey("weekly plan")) == slot)
        for key in RedisPresence.keys("weekly plan") { #expect(RedisHashSlot.slot(of: key) == slot) }
        #expect(slot == RedisHashSlot.slot(of: "weekly plan"))
    }
}

@Suite struct ReadingTheSlotMap {
    /// `CLUSTER SLOTS` as redis-server 7.0 answered it for three masters made by
    /// `redis-cli --cluster create` (the fourth element of each node, its metadata, empty).
    static func reply(_ ranges: [(Int, Int, String, Int)], replica: Bool = false) -> RedisReply {
        .array(
            ranges.map { start, end, host, port in
                var parts: [RedisReply] = [
                    .integer(Int64(start)), .integer(Int64(end)),
                    .array([.bulk(Array(host.utf8)), .integer(Int64(port)), .bulk(Array("2d505457bd3f1bf3c5".utf8)), .array([])]),
                ]
                if replica { parts.append(.array([.bulk(Array("10.0.0.9".utf8)), .integer(7000), .bulk(Array("ab".utf8)), .array([])])) }
                return .array(parts)
            })
    }

    static let asked = RedisNodeAddress(host: "127.0.0.1", port: 17_001)

    @Test func threeMastersServeTheirRanges() throws {
        let map = try RedisSlotMap(
            clusterSlots: Self.reply([(0, 5460, "127.0.0.1", 17001), (5461, 10922, "127.0.0.1", 17002), (10923, 16383, "127.0.0.1", 17003)]),
            asked: Self.asked)
        #expect(map.masters.count == 3)
        #expect(map.coversEverySlot)
        #expect(map.owner(of: 0) == RedisNodeAddress(host: "127.0.0.1", port: 17001))
        #expect(map.owner(of: 5461) == RedisNodeAddress(host: "127.0.0.1", port: 17002))
        #expect(map.owner(ofKey: "foo") == RedisNodeAddress(host: "127.0.0.1", port: 17003))
        #expect(map.ranges(of: RedisNodeAddress(host: "127.0.0.1", port: 17002)) == [5461...10922])
    }

    @Test func replicasAreNotMastersAndAnEmptyHostIsTheNodeAsked() throws {
        let map = try RedisSlotMap(clusterSlots: Self.reply([(0, 16383, "", 17005)], replica: true), asked: Self.asked)
        #expect(map.masters == [RedisNodeAddress(host: "127.0.0.1", port: 17005)])
    }

    @Test func aMasterWithNoKnownEndpointLeavesAHole() throws {
        let map = try RedisSlotMap(clusterSlots: Self.reply([(0, 100, "?", 17001), (101, 16383, "h", 1)]), asked: Self.asked)
        #expect(map.owner(of: 50) == nil)
        #expect(!map.coversEverySlot)
        #expect(map.owner(of: 101) == RedisNodeAddress(host: "h", port: 1))
    }

    @Test func splitRangesOfOneMasterAreListedInOrder() throws {
        let map = try RedisSlotMap(
            clusterSlots: Self.reply([(0, 10, "a", 1), (11, 20, "b", 2), (21, 16383, "a", 1)]), asked: Self.asked)
        #expect(map.masters.count == 2)
        #expect(map.ranges(of: RedisNodeAddress(host: "a", port: 1)) == [0...10, 21...16383])
    }

    @Test func malformedRepliesAreRefusedWithOneLine() {
        #expect(throws: RedisSlotMap.ParseError.self) {
            try RedisSlotMap(clusterSlots: .error("ERR This instance has cluster support disabled"), asked: Self.asked)
        }
        #expect(throws: RedisSlotMap.ParseError.self) {
            try RedisSlotMap(clusterSlots: .array([.array([.integer(5), .integer(1)])]), asked: Self.asked)
        }
        #expect(throws: RedisSlotMap.ParseError.self) {
            try RedisSlotMap(clusterSlots: Self.reply([(0, 16384, "a", 1)]), asked: Self.asked)
        }
        #expect(throws: RedisSlotMap.ParseError.self) { try RedisSlotMap(clusterSlots: Self.reply([(10, 5, "a", 1)]), asked: Self.asked) }
    }
}

@Suite struct FollowingRedirections {
    static let a = RedisNodeAddress(host: "127.0.0.1", port: 17001)
    static let b = RedisNodeAddress(host: "127.0.0.1", port: 17002)

    static func map() -> RedisSlotMap {
        var map = RedisSlotMap()
        map.assign(0...16383, to: a)
        return map
    }

    @Test func redirectionRepliesAreRead() {
        #expect(RedisRedirection("MOVED 3999 127.0.0.1:6381") == .moved(slot: 3999, to: RedisNodeAddress(host: "127.0.0.1", port: 6381)))
        #expect(RedisRedirection("ASK 12182 10.0.0.2:7000") == .ask(slot: 12182, to: RedisNodeAddress(host: "10.0.0.2", port: 7000)))
        #expect(RedisRedirection("MOVED 1 ::1:7001") == .moved(slot: 1, to: RedisNodeAddress(host: "::1", port: 7001)))
        #expect(RedisRedirection("MOVED 16384 h:1") == nil)
        #expect(RedisRedirection("MOVED 1 h") == nil)
        #expect(RedisRedirection("ERR unknown command") == nil)
        #expect(RedisNodeAddress(host: "::1", port: 7001).description == "[::1]:7001")
    }

    @Test func aCommandGoesFirstToItsSlotsMasterAndItsReplyEndsTheRoute() {
        var map = Self.map()
        var route = RedisClusterRoute(slot: 12182)
        #expect(route.start(map) == .send(to: Self.a, asking: false, delayMs: 0))
        #expect(route.next(after: .success(.integer(1)), map: &map) == .finished)
        #expect(route.next(after: .success(.error("WRONGTYPE Operation against a key")), map: &map) == .finished)
        #expect(!route.mapIsStale)
    }

    @Test func movedTeachesTheMapThatSlotAndGoesThere() {
        var map = Self.map()
        var route = RedisClusterRoute(slot: 12182)
        _ = route.start(map)
        #expect(route.next(after: .success(.error("MOVED 12182 127.0.0.1:17002")), map: &map) == .send(to: Self.b, asking: false, delayMs: 0))
        #expect(map.owner(of: 12182) == Self.b)
        #expect(map.owner(of: 12181) == Self.a)
        #expect(route.mapIsStale)
        #expect(route.next(after: .success(.status("OK")), map: &map) == .finished)
        var next = RedisClusterRoute(slot: 12182)
        #expect(next.start(map) == .send(to: Self.b, asking: false, delayMs: 0))
    }

    @Test func askGoesThereOnceWithAskingAndLeavesTheMap() {
        var map = Self.map()
        var route = RedisClusterRoute(slot: 7)
        _ = route.start(map)
        #expect(route.next(after: .failure(.server("ASK 7 127.0.0.1:17002")), map: &map) == .send(to: Self.b, asking: true, delayMs: 0))
        #expect(map.owner(of: 7) == Self.a)
        #expect(!route.mapIsStale)
        // A multi-key command whose keys are split by the migration: the same node, later, still ASKING.
        #expect(
            route.next(after: .success(.error("TRYAGAIN Multiple keys request during rehashing of slot")), map: &map)
                == .send(to: Self.b, asking: true, delayMs: 50))
    }

    @Test func redirectionsAreBoundedSoAMapThatKeepsChangingEndsInAnError() {
        var map = Self.map()
        var route = RedisClusterRoute(slot: 7, maxRedirections: 2)
        _ = route.start(map)
        #expect(route.next(after: .success(.error("MOVED 7 127.0.0.1:17002")), map: &map) == .send(to: Self.b, asking: false, delayMs: 0))
        #expect(route.next(after: .success(.error("MOVED 7 127.0.0.1:17001")), map: &map) == .send(to: Self.a, asking: false, delayMs: 0))
        guard case .failed(let error) = route.next(after: .success(.error("MOVED 7 127.0.0.1:17002")), map: &map) else {
            Issue.record("a third redirection was followed")
            return
        }
        #expect(!error.mayHaveRun)
        #expect(route.redirections == 2)
    }

    @Test func aHoleInTheMapFailsWithoutSendingAndAsksForARefresh() {
        var map = RedisSlotMap()
        map.assign(0...100, to: Self.a)
        var route = RedisClusterRoute(slot: 5000)
        guard case .failed(let error) = route.start(map) else {
            Issue.record("a slot nobody serves was sent somewhere")
            return
        }
        #expect(!error.mayHaveRun)
        #expect(route.mapIsStale)
    }

    @Test func anUnreachableMasterOrClusterDownEndsTheRouteAndMarksTheMapStale() {
        var map = Self.map()
        var route = RedisClusterRoute(slot: 7)
        _ = route.start(map)
        #expect(route.next(after: .failure(.notConnected("connection refused")), map: &map) == .finished)
        #expect(route.mapIsStale)
        var down = RedisClusterRoute(slot: 7)
        _ = down.start(map)
        #expect(down.next(after: .success(.error("CLUSTERDOWN The cluster is down")), map: &map) == .finished)
        #expect(down.mapIsStale)
    }
}

@Suite struct ReadingSeedNodes {
    @Test func seedsAreHostPortPairsWithTheCredentialsOfARedisURL() throws {
        let options = try RedisClusterClient.Options(parsing: "redis://app:s%40cret@10.0.0.1:7000, 10.0.0.2:7001,[::1]:7002")
        #expect(
            options.seeds == [
                RedisNodeAddress(host: "10.0.0.1", port: 7000), RedisNodeAddress(host: "10.0.0.2", port: 7001),
                RedisNodeAddress(host: "::1", port: 7002),
            ])
        #expect(options.node.url.username == "app" && options.node.url.password == "s@cret")
        #expect(try RedisClusterClient.Options(parsing: "h").seeds == [RedisNodeAddress(host: "h", port: 6379)])
        #expect(try RedisClusterClient.Options(parsing: "h:1").node.url.password == nil)
    }

    @Test func aDatabaseAnEmptyListOrAnotherSchemeIsRefused() {
        #expect(throws: RedisURL.ParseError.self) { try RedisClusterClient.Options(parsing: "h:7000/1") }
        #expect(throws: RedisURL.ParseError.self) { try RedisClusterClient.Options(parsing: "") }
        #expect(throws: RedisURL.ParseError.self) { try RedisClusterClient.Options(parsing: "h:1,,h:2") }
        #expect(throws: RedisURL.ParseError.self) { try RedisClusterClient.Options(parsing: "rediss://h:1") }
    }
}
