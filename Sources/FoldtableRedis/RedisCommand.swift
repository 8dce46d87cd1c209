/// A value that can be one argument of a Redis command: its bytes as Redis reads them.
public protocol RedisArgument: Sendable {
    var redisBytes: [UInt8] { get }
}

extension String: RedisArgument {
    public var redisBytes: [UInt8] { Array(utf8) }
}

extension Array: RedisArgument where Element == UInt8 {
    public var redisBytes: [UInt8] { self }
}

extension Int: RedisArgument {
    public var redisBytes: [UInt8] { Array(String(self).utf8) }
}

extension Int64: RedisArgument {
    public var redisBytes: [UInt8] { Array(String(self).utf8) }
}

extension UInt64: RedisArgument {
    public var redisBytes: [UInt8] { Array(String(self).utf8) }
}

/// One command as its arguments (the name first), binary-safe.
public struct RedisCommand: Equatable, Sendable {
    /// The arguments, name first. For a script command: what follows `EVALSHA <sha>`.
    public var arguments: [[UInt8]]
    /// How long Redis may hold the reply back on purpose (`XREAD BLOCK`), in milliseconds: the
    /// client waits this much longer than its command timeout for the reply.
    public var blockMs: UInt64
    /// Set for ``RedisClient/evaluate(_:keys:arguments:completion:)``: the client loads the
    /// script on its connection and sends `EVALSHA`.
    let script: RedisScript?

    /// `RedisCommand("SET", key, value)`.
    public init(_ name: String, _ arguments: any RedisArgument...) {
        self.init(arguments: [name.redisBytes] + arguments.map(\.redisBytes))
    }

    public init(arguments: [[UInt8]], blockMs: UInt64 = 0) {
        self.arguments = arguments
        self.blockMs = blockMs
        self.script = nil
    }

    init(script: RedisScript, keys: [any RedisArgument], arguments: [any RedisArgument]) {
        self.arguments = [keys.count.redisBytes] + keys.map(\.redisBytes) + arguments.map(\.redisBytes)
        self.blockMs = 0
        self.script = script
    }

    /// The command's name, upper case, for messages (never its arguments: they may be data).
    public var name: String {
        if script != nil { return "EVALSHA" }
        return arguments.first.map { String(decoding: $0, as: UTF8.self).uppercased() } ?? ""
    }
}

/// A Lua script run with `EVALSHA`. The client loads it (`SCRIPT LOAD`) on each connection
/// before first use, so a restarted Redis, whose script cache is empty, needs no retry.
public struct RedisScript: Hashable, Sendable {
    public let source: String

    public init(_ source: String) {
        self.source = source
    }
}
