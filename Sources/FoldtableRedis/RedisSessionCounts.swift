import FoldtableCore
import FoldtableServer

/// Every shared session and its members across the nodes, on Redis, for ``RedisBroker``'s
/// listing (``PresenceBroker/sharedSessions(excluding:completion:)``): what `list` and
/// `/api/v1/sessions` show for sessions a node does not hold.
///
/// Three keys, in one hash slot of their own:
/// - `foldtable:{sessions}:members`, a hash session → members on every live node: every shared
///   session is a field from its first open on (0 when nobody is in it), so its keys are the
///   cluster's session names;
/// - `foldtable:{sessions}:node:<id>`, a hash per node, session → that node's members (sessions
///   it holds none of are absent): what the node added to the totals;
/// - `foldtable:{sessions}:nodes`, a sorted set of node ids scored by when their heartbeat
///   expires (Redis' `TIME` plus the expiry bound, like ``RedisPresence``'s).
///
/// A node writes, once per heartbeat, only the sessions whose count changed since what Redis
/// holds for it; one script adds the difference to the totals and refreshes the node's expiry,
/// so a beat's cost grows with the sessions that changed, never with all sessions × nodes. A
/// count is written as it is, not as a difference, so a beat whose reply was lost is simply
/// sent again. The same script, and the listing's read, first take every node whose heartbeat
/// expired out of the totals (its hash subtracted, then deleted): a killed node's members leave
/// the counts at the bound, by Redis' clock. A node's first write of a process replaces what an
/// earlier process with its id left; if its own entry expired meanwhile (it was cut off and
/// others took it out), the script says so and the next beat writes everything again.
///
/// Service thread only, like ``RedisPresence`` (which drives it): `@unchecked Sendable` because
/// the commands client's completions carry `self` to the service thread and touch it only there.
final class RedisSessionCounts: @unchecked Sendable {
    private let commands: any RedisCommands
    private let report: @Sendable (_ event: String, _ fields: [(String, String)]) -> Void
    /// This node's members per session, as its hub last said (0: none now, to be written).
    private var current: [String: Int] = [:]
    /// What Redis holds for this node, as far as it knows.
    private var published: [String: Int] = [:]
    /// The next write replaces the node's whole entry (the first of the process, or after it expired).
    private var fresh = true
    /// A write is under way: the next beat waits for it, so writes never cross.
    private var writing = false

    static let nodesKey = "foldtable:{sessions}:nodes"
    static let membersKey = "foldtable:{sessions}:members"
    static let nodeKeyPrefix = "foldtable:{sessions}:node:"

    init(commands: any RedisCommands, report: @escaping @Sendable (_ event: String, _ fields: [(String, String)]) -> Void) {
        self.commands = commands
        self.report = report
    }

    /// Lua shared by both scripts: Redis' time, and `forget`, which takes a node's hash out of
    /// the totals. KEYS: the nodes set, the totals hash, this node's hash; ARGV[1]: the prefix
    /// of nodes' hashes (keys of expired nodes are built from it: they share the hash slot).
    private static let prelude = """
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local function forget(key)
          local held = redis.call('HGETALL', key)
          for i = 1, #held, 2 do redis.call('HINCRBY', KEYS[2], held[i], -tonumber(held[i + 1])) end
          redis.call('DEL', key)
        end
        for _, dead in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
          forget(ARGV[1] .. dead)
          redis.call('ZREM', KEYS[1], dead)
        end

        """

    /// ARGV: prefix, node, expiry ms, mode (`fresh`, `beat` or `leave`), then pairs of session
    /// and this node's count. Returns 1 when a `beat` finds the node's entry gone (rewrite it).
    static let writeScript = RedisScript(
        prelude + """
            local node = ARGV[2]
            local mode = ARGV[4]
            if mode ~= 'beat' then forget(KEYS[3]) end
            if mode == 'leave' then
              redis.call('ZREM', KEYS[1], node)
              return 0
            end
            if mode == 'beat' and not redis.call('ZSCORE', KEYS[1], node) then return 1 end
            for i = 5, #ARGV, 2 do
              local session = ARGV[i]
              local count = tonumber(ARGV[i + 1])
              local held = tonumber(redis.call('HGET', KEYS[3], session) or '0')
              if count ~= held then redis.call('HINCRBY', KEYS[2], session, count - held) end
              if count > 0 then redis.call('HSET', KEYS[3], session, count) else redis.call('HDEL', KEYS[3], session) end
            end
            redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), node)
            return 0
            """)

    /// ARGV: prefix. Returns {totals as field/value pairs, this node's hash as pairs}.
    static let readScript = RedisScript(
        prelude + """
            return {redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[3])}
            """)

    private static func keys(_ node: String) -> [String] { [nodesKey, membersKey, nodeKeyPrefix + node] }

    /// Session `name` exists (a node opened it): listed from now on, with 0 until someone joins.
    func register(_ name: String) {
        commands.send(RedisCommand("HSETNX", Self.membersKey, name, 0)) { [report] result in
            switch result {
            case .failure(let error) where !error.isQuiet: report("counts_failed", [("session", name), ("reason", error.description)])
            case .success(.error(let message)): report("counts_failed", [("session", name), ("reason", String(message.prefix(80)))])
            default: break
            }
        }
    }

    /// This node now holds `count` members of `session` (0: none, or it no longer holds it).
    func set(_ session: String, count: Int) {
        current[session] = count
    }

    /// One heartbeat: writes the sessions whose count differs from what Redis holds for this
    /// node (all of them after an expiry) and refreshes the node's expiry.
    func beat(node: String, expiryMs: UInt64) {
        guard !writing else { return }
        let mode = fresh ? "fresh" : "beat"
        let changes = current.filter { fresh ? $0.value > 0 : $0.value != (published[$0.key] ?? 0) }.sorted { $0.key < $1.key }
        var arguments: [any RedisArgument] = [Self.nodeKeyPrefix, node, expiryMs, mode]
        arguments.reserveCapacity(4 + 2 * changes.count)
        for (session, count) in changes {
            arguments.append(session)
            arguments.append(count)
        }
        writing = true
        commands.evaluate(Self.writeScript, keys: Self.keys(node), arguments: arguments) { [self] result in
            written(mode: mode, changes, result)
        }
    }

    /// Service thread: a write's reply.
    private func written(mode: String, _ changes: [(key: String, value: Int)], _ result: Result<RedisReply, RedisError>) {
        writing = false
        switch result {
        case .failure(let error):
            // Unchanged: the same counts go again with the next beat (they are absolute).
            if !error.isQuiet { report("counts_failed", [("reason", error.description)]) }
        case .success(.integer(1)):
            fresh = true
            published = [:]
        case .success(.integer(0)):
            if mode == "fresh" {
                fresh = false
                published = [:]
            }
            for (session, count) in changes { published[session] = count }
            // Sessions left behind are forgotten once Redis holds nothing of them for this node.
            for (session, count) in current where count == 0 && (published[session] ?? 0) == 0 {
                current[session] = nil
                published[session] = nil
            }
        case .success(let other):
            report("counts_failed", [("reason", "the reply is not in the expected form: \(other.summary)")])
        }
    }

    /// Takes this node out of the counts at once (a normal stop); `completion` when Redis
    /// answered or failed.
    func leave(node: String, completion: @escaping @Sendable () -> Void) {
        current = [:]
        published = [:]
        fresh = true
        commands.evaluate(Self.writeScript, keys: Self.keys(node), arguments: [Self.nodeKeyPrefix, node, 0, "leave"]) { _ in completion() }
    }

    /// Every shared session with the members nodes other than `node` hold in it.
    func read(excluding node: String, completion: @escaping (Result<[String: Int], BrokerError>) -> Void) {
        let carried = ServiceThreadOnly(completion)
        commands.evaluate(Self.readScript, keys: Self.keys(node), arguments: [Self.nodeKeyPrefix]) { result in
            carried.value(
                result.mapError { BrokerError($0.description) }.flatMap { reply in
                    guard let parts = reply.elements, parts.count == 2, let totals = Self.counts(parts[0]), let own = Self.counts(parts[1]) else {
                        return .failure(BrokerError("the session counts are not in the expected form"))
                    }
                    var others = totals
                    for (session, count) in own { others[session] = max(0, (others[session] ?? 0) - count) }
                    return .success(others.mapValues { max(0, $0) })
                })
        }
    }

    /// A hash's `HGETALL` as session → count.
    /// Internal, not private: the Redis fuzz target (Tests/fuzz/FuzzRedis.swift) decodes replies with it.
    static func counts(_ reply: RedisReply) -> [String: Int]? {
        guard let flat = reply.elements, flat.count % 2 == 0 else { return nil }
        var counts: [String: Int] = [:]
        counts.reserveCapacity(flat.count / 2)
        for index in stride(from: 0, to: flat.count, by: 2) {
            guard let name = flat[index].string, let count = flat[index + 1].integer else { return nil }
            counts[name] = Int(count)
        }
        return counts
    }
}

extension RedisError {
    /// Failures the client reports once itself (no connection, closed): not news per command.
    fileprivate var isQuiet: Bool {
        switch self {
        case .notConnected, .closed: return true
        default: return false
        }
    }
}
