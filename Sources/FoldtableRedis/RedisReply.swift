/// One reply from Redis (RESP2, the protocol hiredis 0.14 speaks), copied out of hiredis.
public enum RedisReply: Equatable, Sendable {
    /// A simple string: `OK`, `PONG`, `QUEUED`.
    case status(String)
    /// An error reply, `WRONGTYPE ...` or `ERR ...`: the command was refused, the connection
    /// stays usable.
    case error(String)
    case integer(Int64)
    /// A bulk string, binary-safe.
    case bulk([UInt8])
    /// A nil bulk or nil array: a missing key, an XREAD that timed out.
    case null
    case array([RedisReply])

    /// A bulk or status reply as text (invalid UTF-8 replaced), else `nil`.
    public var string: String? {
        switch self {
        case .bulk(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .status(let text): return text
        default: return nil
        }
    }

    /// An integer reply, or a bulk reply holding a whole decimal number (`GET` of a counter).
    public var integer: Int64? {
        switch self {
        case .integer(let value): return value
        case .bulk(let bytes): return Int64(String(decoding: bytes, as: UTF8.self))
        default: return nil
        }
    }

    /// The elements of an array reply; `nil` for anything else.
    public var elements: [RedisReply]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    /// A short description for error messages: the kind, and a text reply's first bytes.
    var summary: String {
        switch self {
        case .status(let text): return "status \(text.prefix(40))"
        case .error(let text): return "error \(text.prefix(80))"
        case .integer(let value): return "integer \(value)"
        case .bulk(let bytes): return "bulk of \(bytes.count) bytes"
        case .null: return "nil"
        case .array(let elements): return "array of \(elements.count)"
        }
    }
}
