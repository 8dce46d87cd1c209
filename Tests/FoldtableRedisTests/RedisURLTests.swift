import Testing

@testable import FoldtableRedis

@Suite struct ReadingRedisURLs {
    @Test func aHostAloneMeansPort6379AndDatabase0() throws {
        let url = try RedisURL(parsing: "redis://cache.internal")
        #expect(url == RedisURL(host: "cache.internal", port: 6379, database: 0))
        #expect(url.description == "redis://cache.internal:6379/0")
    }

    @Test func portAndDatabaseAreRead() throws {
        #expect(try RedisURL(parsing: "redis://10.0.0.5:6380/3") == RedisURL(host: "10.0.0.5", port: 6380, database: 3))
        #expect(try RedisURL(parsing: "REDIS://h:1/") == RedisURL(host: "h", port: 1, database: 0))
    }

    @Test func anIPv6HostIsWrittenInBrackets() throws {
        let url = try RedisURL(parsing: "redis://[::1]:7000/2")
        #expect(url == RedisURL(host: "::1", port: 7000, database: 2))
        #expect(url.description == "redis://[::1]:7000/2")
        #expect(try RedisURL(parsing: "redis://[fe80::1]") == RedisURL(host: "fe80::1"))
    }

    @Test func credentialsArePercentDecodedAndNeverShown() throws {
        let url = try RedisURL(parsing: "redis://app:p%40ss%3Aword@h:6379/1")
        #expect(url.username == "app")
        #expect(url.password == "p@ss:word")
        #expect(url.description == "redis://app:***@h:6379/1")
        let passwordOnly = try RedisURL(parsing: "redis://:secret@h")
        #expect(passwordOnly.username == nil && passwordOnly.password == "secret")
        #expect(passwordOnly.description == "redis://:***@h:6379/0")
        #expect(try RedisURL(parsing: "redis://secret@h").password == "secret")
    }

    @Test func redissIsRefusedBecauseThisHiredisHasNoTLS() {
        #expect(throws: RedisURL.ParseError.self) { try RedisURL(parsing: "rediss://h:6380") }
        do {
            _ = try RedisURL(parsing: "rediss://:secret@h:6380")
        } catch {
            #expect(error.message.contains("hiredis 0.14.1 has no TLS"))
            #expect(!error.message.contains("secret"))
        }
    }

    @Test(arguments: [
        ("http://h", "unsupported scheme \"http://\""),
        ("h:6379", "is not a Redis URL"),
        ("redis://", "names no host"),
        ("redis://:6379/0", "names no host"),
        ("redis://h:0", "not a number from 1 to 65535"),
        ("redis://h:70000", "not a number from 1 to 65535"),
        ("redis://h:port", "not a number from 1 to 65535"),
        ("redis://h/db1", "database \"db1\""),
        ("redis://h/-1", "database \"-1\""),
        ("redis://h/0?timeout=1", "no query or fragment"),
        ("redis://[::1", "unclosed"),
        ("redis://a:%zz@h", "bad %-escape"),
    ])
    func badURLsAreRefusedWithAClearLine(text: String, expected: String) {
        do {
            let url = try RedisURL(parsing: text)
            Issue.record("\(text) was read as \(url)")
        } catch {
            #expect(error.message.contains(expected), "\(text): \(error.message)")
        }
    }

    @Test func aURLThatDoesNotParseIsNotEchoedWithItsPassword() {
        do {
            _ = try RedisURL(parsing: "ftp://user:hunter2@h")
            Issue.record("parsed")
        } catch {
            #expect(!error.message.contains("hunter2"))
        }
        do {
            _ = try RedisURL(parsing: "user:hunter2@h")
            Issue.record("parsed")
        } catch {
            #expect(!error.message.contains("hunter2"))
        }
    }
}

@Suite struct StreamIDs {
    @Test func areReadWrittenAndOrderedByTimeThenSequence() {
        #expect(StreamID("1700000000000-3") == StreamID(milliseconds: 1_700_000_000_000, sequence: 3))
        #expect(StreamID("5-0")?.description == "5-0")
        #expect(StreamID("5") == nil && StreamID("a-1") == nil && StreamID("1-2-3") == nil && StreamID("-1") == nil)
        #expect(StreamID(milliseconds: 1, sequence: 9) < StreamID(milliseconds: 2, sequence: 0))
        #expect(StreamID(milliseconds: 2, sequence: 0) < StreamID(milliseconds: 2, sequence: 1))
        #expect(StreamID.zero < StreamID(milliseconds: 0, sequence: 1))
    }

    @Test func entriesAreReadFromRepliesAndMalformedOnesRefused() {
        let reply = RedisReply.array([.bulk(Array("7-1".utf8)), .array([.bulk(Array("change".utf8)), .bulk([0, 1, 2])])])
        #expect(StreamEntry(reply) == StreamEntry(id: StreamID(milliseconds: 7, sequence: 1), fields: [StreamField("change", [0, 1, 2])]))
        #expect(StreamEntry(reply)?["change"] == [0, 1, 2])
        #expect(StreamEntry(.array([.bulk(Array("7-1".utf8)), .array([.bulk(Array("odd".utf8))])])) == nil)
        #expect(StreamEntry(.array([.bulk(Array("x".utf8)), .array([])])) == nil)
        #expect(StreamEntry(.integer(3)) == nil)
    }
}
