import FoldtableCore
import FoldtableServer
import Testing

@testable import FoldtableRedis

/// The reply of the script that opens a shared session, read without a Redis server: what a
/// damaged key or another version's script can put there.
@Suite struct ReadingASessionSnapshotReply {
    /// `[ms, seq, epoch, checkpoint, entries, created, history, number]`, as the script answers.
    private func reply(ms: Int64, sequence: Int64) throws -> RedisReply {
        let table = try Table(options: TableOptions(), sections: [Section(key: "s1", title: "A")], seq: 1)
        return .array([
            .integer(ms), .integer(sequence), .bulk(Array("e1".utf8)), .bulk(TableCheckpoint.encode(table)), .array([]), .integer(1), .bulk([]),
            .bulk(Array("5".utf8)),
        ])
    }

    /// Found by the Redis fuzz target: `UInt64(ms)` trapped on a negative position.
    @Test func aNegativeStreamPositionIsRefusedAsMalformed() throws {
        for (ms, sequence) in [(Int64(-1), Int64(3)), (1_700_000_000_000, -1), (.min, .min)] {
            let malformed = try reply(ms: ms, sequence: sequence)
            #expect(throws: BrokerError.self, "\(ms)-\(sequence)") {
                try RedisBroker.opened(malformed, limits: TableLimits(), historyDropped: {})
            }
        }
    }

    @Test func aPositionUpTo2To63Minus1IsRead() throws {
        let session = try RedisBroker.opened(reply(ms: .max, sequence: 7), limits: TableLimits(), historyDropped: {})
        #expect(session?.position == "9223372036854775807-7")
        #expect(session?.number == 5)
        let start = try RedisBroker.opened(reply(ms: 0, sequence: 0), limits: TableLimits(), historyDropped: {})
        #expect(start?.position == "")
    }
}
