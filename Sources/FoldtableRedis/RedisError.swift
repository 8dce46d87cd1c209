/// Why a command got no usable reply.
///
/// What matters most to a caller is whether the command may have run: ``notConnected(_:)`` and
/// ``closed`` mean it never reached Redis; ``connectionLost(_:)`` and ``timedOut(_:)`` mean it
/// was sent and its outcome is unknown (``mayHaveRun``). The client never sends a command twice:
/// deciding to retry, and making that safe (an idempotent command, a check first), is the caller's.
public enum RedisError: Error, Equatable, Sendable, CustomStringConvertible {
    /// There is no connection (the last attempt failed, the next one is due later): the command
    /// was not sent.
    case notConnected(String)
    /// The connection broke after the command was written, before its reply was read.
    case connectionLost(String)
    /// No reply within the command timeout (a stopped or overloaded server); the connection is
    /// dropped, since a late reply would answer the wrong command.
    case timedOut(String)
    /// Redis refused the command with an error reply (`ERR`, `WRONGTYPE`, `NOSCRIPT`, ...).
    case server(String)
    /// A reply of a shape the typed operation did not expect.
    case unexpectedReply(String)
    /// The command cannot be sent as it is (it has no name); it was not sent.
    case invalidCommand(String)
    /// The client was closed before the command was sent.
    case closed

    /// Whether the command may have run on the server.
    public var mayHaveRun: Bool {
        switch self {
        case .connectionLost, .timedOut: return true
        case .notConnected, .server, .unexpectedReply, .invalidCommand, .closed: return false
        }
    }

    public var description: String {
        switch self {
        case .notConnected(let why): return "redis not connected: \(why)"
        case .connectionLost(let why): return "redis connection lost, the command may or may not have run: \(why)"
        case .timedOut(let why): return "redis timed out, the command may or may not have run: \(why)"
        case .server(let message): return "redis refused: \(message)"
        case .unexpectedReply(let what): return "unexpected redis reply: \(what)"
        case .invalidCommand(let why): return "invalid redis command: \(why)"
        case .closed: return "the redis client is closed"
        }
    }
}
