/// The ID of a Redis Stream entry: `<milliseconds>-<sequence>`, ordered by both. Redis assigns
/// IDs that only grow, so a node that has applied entries up to an ID reads on after it.
public struct StreamID: Hashable, Comparable, Sendable, CustomStringConvertible, RedisArgument {
    public var milliseconds: UInt64
    public var sequence: UInt64

    /// `0-0`: before every entry (`XREAD ... 0-0` reads a stream from its start).
    public static let zero = StreamID(milliseconds: 0, sequence: 0)

    public init(milliseconds: UInt64, sequence: UInt64) {
        self.milliseconds = milliseconds
        self.sequence = sequence
    }

    /// Reads `1700000000000-3`; `nil` for anything else.
    public init?(_ text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, let milliseconds = UInt64(parts[0]), let sequence = UInt64(parts[1]) else { return nil }
        self.init(milliseconds: milliseconds, sequence: sequence)
    }

    public var description: String { "\(milliseconds)-\(sequence)" }
    public var redisBytes: [UInt8] { Array(description.utf8) }

    public static func < (lhs: StreamID, rhs: StreamID) -> Bool {
        (lhs.milliseconds, lhs.sequence) < (rhs.milliseconds, rhs.sequence)
    }
}
