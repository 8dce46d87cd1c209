/// The typed operations the multi-node design needs: streams (the session's one order), plain
/// keys (snapshots), sorted sets (presence heartbeats) and scripts. Each sends one command and
/// decodes its reply; an error reply becomes ``RedisError/server(_:)``, any other unexpected
/// shape ``RedisError/unexpectedReply(_:)``.
extension RedisClient {
    public typealias Outcome<Value> = @Sendable (Result<Value, RedisError>) -> Void

    /// Sends `command` and decodes its reply with `decode` (`nil`: not the expected shape).
    public func send<Value>(_ command: RedisCommand, decode: @escaping @Sendable (RedisReply) -> Value?, completion: @escaping Outcome<Value>) {
        let name = command.name
        send(command) { result in
            completion(
                result.flatMap { reply in
                    if case .error(let message) = reply { return .failure(.server(message)) }
                    guard let value = decode(reply) else { return .failure(.unexpectedReply("\(name) answered \(reply.summary)")) }
                    return .success(value)
                })
        }
    }

    // MARK: - Streams

    /// `XADD key [MAXLEN|MINID ...] id|* field value ...`: appends an entry; the ID Redis gave it.
    /// `id` `nil` lets Redis assign one (`*`); an explicit one must be greater than the last.
    public func xadd(_ key: String, id: StreamID? = nil, fields: [StreamField], trim: StreamTrim? = nil, completion: @escaping Outcome<StreamID>) {
        var arguments: [any RedisArgument] = [key]
        if let trim { arguments += trim.arguments }
        arguments.append(id.map(\.description) ?? "*")
        for field in fields {
            arguments.append(field.name)
            arguments.append(field.value)
        }
        send(
            RedisCommand(arguments: ["XADD".redisBytes] + arguments.map(\.redisBytes)), decode: { $0.string.flatMap(StreamID.init) },
            completion: completion)
    }

    /// `XRANGE key start end [COUNT n]`: entries oldest first.
    public func xrange(
        _ key: String, from start: StreamBound = .unbounded, to end: StreamBound = .unbounded, count: Int? = nil,
        completion: @escaping Outcome<[StreamEntry]>
    ) {
        var command = RedisCommand("XRANGE", key, start.argument(start: true), end.argument(start: false))
        if let count { command.arguments += [Array("COUNT".utf8), count.redisBytes] }
        send(command, decode: StreamEntry.list, completion: completion)
    }

    /// `XREVRANGE key end start [COUNT n]`: entries newest first (`count: 1`: the last entry).
    public func xrevrange(
        _ key: String, from end: StreamBound = .unbounded, to start: StreamBound = .unbounded, count: Int? = nil,
        completion: @escaping Outcome<[StreamEntry]>
    ) {
        var command = RedisCommand("XREVRANGE", key, end.argument(start: false), start.argument(start: true))
        if let count { command.arguments += [Array("COUNT".utf8), count.redisBytes] }
        send(command, decode: StreamEntry.list, completion: completion)
    }

    /// `XREAD [COUNT n] [BLOCK ms] STREAMS key ... id ...`: the entries after each position, for
    /// every stream that has some. With `blockMs`, Redis holds the reply until an entry arrives
    /// on any of the streams or the time passes (then the result is empty). `nil` or 0: no
    /// block (Redis' `BLOCK 0` waits forever, and a reply that may never come cannot be told
    /// from a dead server). Blocking holds the client's connection: use a client of its own.
    public func xread(
        _ positions: [(key: String, after: StreamID)], count: Int? = nil, blockMs: UInt64? = nil, completion: @escaping Outcome<[StreamBatch]>
    ) {
        guard !positions.isEmpty else { return completion(.success([])) }
        var arguments: [[UInt8]] = ["XREAD".redisBytes]
        if let count { arguments += ["COUNT".redisBytes, count.redisBytes] }
        if let blockMs, blockMs > 0 { arguments += ["BLOCK".redisBytes, blockMs.redisBytes] }
        arguments.append("STREAMS".redisBytes)
        arguments += positions.map(\.key.redisBytes)
        arguments += positions.map(\.after.redisBytes)
        send(RedisCommand(arguments: arguments, blockMs: blockMs ?? 0), decode: Self.streamBatches, completion: completion)
    }

    /// `XTRIM key MAXLEN|MINID ...`: how many entries were removed.
    public func xtrim(_ key: String, _ trim: StreamTrim, completion: @escaping Outcome<Int>) {
        send(
            RedisCommand(arguments: [Array("XTRIM".utf8), key.redisBytes] + trim.arguments.map(\.redisBytes)), decode: Self.count,
            completion: completion)
    }

    /// `XLEN key`: entries in the stream (0 when there is none).
    public func xlen(_ key: String, completion: @escaping Outcome<Int>) {
        send(RedisCommand("XLEN", key), decode: Self.count, completion: completion)
    }

    // Internal, not private: the Redis fuzz target (Tests/fuzz/FuzzRedis.swift) decodes replies with it.
    static func streamBatches(_ reply: RedisReply) -> [StreamBatch]? {
        if reply == .null { return [] }
        guard let streams = reply.elements else { return nil }
        var batches: [StreamBatch] = []
        for stream in streams {
            guard let pair = stream.elements, pair.count == 2, let key = pair[0].string, let entries = StreamEntry.list(pair[1]) else { return nil }
            batches.append(StreamBatch(key: key, entries: entries))
        }
        return batches
    }

    // MARK: - Keys

    /// `GET key`: the value, or `nil` when there is none.
    public func get(_ key: String, completion: @escaping Outcome<[UInt8]?>) {
        send(
            RedisCommand("GET", key),
            decode: { reply -> [UInt8]?? in
                switch reply {
                case .bulk(let bytes): return .some(bytes)
                case .null: return .some(nil)
                default: return nil
                }
            }, completion: completion)
    }

    /// `SET key value [PX ms]`.
    public func set(_ key: String, _ value: [UInt8], expireMs: UInt64? = nil, completion: @escaping Outcome<Void>) {
        var command = RedisCommand("SET", key, value)
        if let expireMs { command.arguments += ["PX".redisBytes, expireMs.redisBytes] }
        send(command, decode: { $0 == .status("OK") ? () : nil }, completion: completion)
    }

    /// `DEL key ...`: how many keys existed.
    public func del(_ keys: [String], completion: @escaping Outcome<Int>) {
        send(RedisCommand(arguments: ["DEL".redisBytes] + keys.map(\.redisBytes)), decode: Self.count, completion: completion)
    }

    /// `PEXPIRE key ms`: whether the key exists (and now expires).
    public func pexpire(_ key: String, milliseconds: UInt64, completion: @escaping Outcome<Bool>) {
        send(RedisCommand("PEXPIRE", key, milliseconds), decode: { $0.integer.map { $0 == 1 } }, completion: completion)
    }

    // MARK: - Sorted sets (presence)

    /// `ZADD key score member ...`: members with integer scores (a heartbeat's expiry time in
    /// ms: exact in a double up to 2^53); how many members were new.
    public func zadd(_ key: String, _ members: [(member: String, score: Int64)], completion: @escaping Outcome<Int>) {
        var arguments: [[UInt8]] = ["ZADD".redisBytes, key.redisBytes]
        for (member, score) in members { arguments += [score.redisBytes, member.redisBytes] }
        send(RedisCommand(arguments: arguments), decode: Self.count, completion: completion)
    }

    /// `ZRANGEBYSCORE key min max`: members whose score is in `min...max` (`max` `nil`: no upper
    /// bound), lowest score first.
    public func zrangeByScore(_ key: String, min: Int64, max: Int64? = nil, completion: @escaping Outcome<[String]>) {
        send(
            RedisCommand("ZRANGEBYSCORE", key, min, max.map(String.init) ?? "+inf"),
            decode: { reply in
                guard let elements = reply.elements else { return nil }
                let names = elements.compactMap(\.string)
                return names.count == elements.count ? names : nil
            }, completion: completion)
    }

    /// `ZREMRANGEBYSCORE key -inf max`: removes members scored `max` or lower (expired
    /// heartbeats); how many.
    public func zremRangeByScore(_ key: String, through max: Int64, completion: @escaping Outcome<Int>) {
        send(RedisCommand("ZREMRANGEBYSCORE", key, "-inf", max), decode: Self.count, completion: completion)
    }

    /// `ZREM key member ...`: how many were there.
    public func zrem(_ key: String, _ members: [String], completion: @escaping Outcome<Int>) {
        send(RedisCommand(arguments: ["ZREM".redisBytes, key.redisBytes] + members.map(\.redisBytes)), decode: Self.count, completion: completion)
    }

    // MARK: - Scripts

    /// Runs `script` with `EVALSHA` (loading it on the connection first when needed); its reply
    /// as is. A script that raises an error is ``RedisError/server(_:)``.
    public func evaluate(_ script: RedisScript, keys: [String], arguments: [any RedisArgument], completion: @escaping Outcome<RedisReply>) {
        send(RedisCommand(script: script, keys: keys, arguments: arguments), decode: { $0 }, completion: completion)
    }

    /// `PING`: `PONG` when the server answers.
    public func ping(completion: @escaping Outcome<Void>) {
        send(RedisCommand("PING"), decode: { $0 == .status("PONG") ? () : nil }, completion: completion)
    }

    private static func count(_ reply: RedisReply) -> Int? {
        if case .integer(let value) = reply { return Int(value) }
        return nil
    }
}
