import FoldtableCore
import FoldtableServer

/// Presence across nodes on Redis, for ``RedisBroker``: per session, a sorted set
/// `foldtable:{name}:presence` of node ids scored by when their heartbeat expires (Redis' own
/// `TIME` plus the node's expiry bound: no node's clock decides), a hash `…:presence:meta` of
/// each node's `<version> <count>`, and a hash `…:presence:list` of what it lists (its count and
/// first `presenceListMax` members, ``PresenceCoding``).
///
/// One script per session per beat refreshes this node's entry, drops expired nodes, and
/// returns only the entries whose version differs from what this node holds, and the nodes
/// gone. A beat whose members did not change sends no list and reads none: its bytes do not
/// grow with the members, however many. A node's list is written only when it changed, and
/// other nodes read it only then. The keys expire with the last heartbeat, so nothing is
/// left behind when every node is gone.
///
/// Service thread only: beats are made there and their replies come back there (the commands
/// client delivers through the service queue). `@unchecked Sendable` for that reason: the
/// client's completions carry `self` to the service thread and touch it only there.
final class RedisPresence: @unchecked Sendable {
    private let commands: RedisClient
    private let report: @Sendable (_ event: String, _ fields: [(String, String)]) -> Void
    /// Makes versions unique to this process: a restarted node counts from 1 again.
    private let incarnation = Hub.randomEpoch()
    private var versions: UInt64 = 0
    private var tokens: UInt64 = 0

    private struct Shared {
        /// Told apart from a later state of the same session (left, then held again).
        let token: UInt64
        var count = 0
        var first: [Author] = []
        var version = ""
        /// The version Redis holds for this node, as far as this node knows ("" none).
        var published = ""
        /// What the other nodes share, as last read.
        var known: [String: NodePresence] = [:]
        /// A beat is under way: the next waits for its reply, so replies never cross.
        var beating = false
    }
    private var sessions: [String: Shared] = [:]

    init(commands: RedisClient, report: @escaping @Sendable (_ event: String, _ fields: [(String, String)]) -> Void) {
        self.commands = commands
        self.report = report
    }

    static func keys(_ session: String) -> [String] {
        ["foldtable:{\(session)}:presence", "foldtable:{\(session)}:presence:meta", "foldtable:{\(session)}:presence:list"]
    }

    /// ARGV: node, expiry ms, version, count, '1' when the list follows, the list, then pairs of
    /// (node, version) this node holds. Returns {resend, {node, meta, list, ...}, {gone node, ...}}:
    /// `resend` when this node's entry is not what it last wrote (it expired while this node
    /// was cut off): its next beat writes the list again.
    static let beatScript = RedisScript(
        """
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local node = ARGV[1]
        local expiry = tonumber(ARGV[2])
        local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
        if #dead > 0 then
          redis.call('ZREM', KEYS[1], unpack(dead))
          redis.call('HDEL', KEYS[2], unpack(dead))
          redis.call('HDEL', KEYS[3], unpack(dead))
        end
        local resend = 0
        local meta = ARGV[3] .. ' ' .. ARGV[4]
        if tonumber(ARGV[4]) > 0 then
          if ARGV[5] == '1' then
            redis.call('HSET', KEYS[2], node, meta)
            redis.call('HSET', KEYS[3], node, ARGV[6])
          elseif redis.call('HGET', KEYS[2], node) ~= meta then
            resend = 1
          end
          if resend == 0 then
            redis.call('ZADD', KEYS[1], now + expiry, node)
            for i = 1, 3 do
              if redis.call('PTTL', KEYS[i]) < expiry then redis.call('PEXPIRE', KEYS[i], expiry) end
            end
          end
        else
          redis.call('ZREM', KEYS[1], node)
          redis.call('HDEL', KEYS[2], node)
          redis.call('HDEL', KEYS[3], node)
        end
        local known = {}
        for i = 7, #ARGV, 2 do known[ARGV[i]] = ARGV[i + 1] end
        local all = redis.call('HGETALL', KEYS[2])
        local changed = {}
        local live = {}
        for i = 1, #all, 2 do
          local other = all[i]
          if other ~= node then
            live[other] = true
            if known[other] ~= string.match(all[i + 1], '^(%S+)') then
              changed[#changed + 1] = other
              changed[#changed + 1] = all[i + 1]
              changed[#changed + 1] = redis.call('HGET', KEYS[3], other) or ''
            end
          end
        end
        local gone = {}
        for other in pairs(known) do
          if not live[other] then gone[#gone + 1] = other end
        end
        return {resend, changed, gone}
        """)

    func beat(node: String, expiryMs: UInt64, _ beats: [PresenceBeat], deliver: @escaping (_ session: String, _ others: [NodePresence]) -> Void) {
        let carried = ServiceThreadOnly(deliver)
        for beat in beats {
            var state = sessions[beat.session] ?? newState()
            if let members = beat.members, members.count != state.count || members.first != state.first {
                versions += 1
                state.version = "\(incarnation)-\(versions)"
                state.count = members.count
                state.first = members.first
            }
            guard !state.beating else {
                sessions[beat.session] = state
                continue
            }
            state.beating = true
            sessions[beat.session] = state
            let sendsList = state.count > 0 && state.published != state.version
            var arguments: [any RedisArgument] = [
                node, expiryMs, state.version.isEmpty ? "-" : state.version, state.count, sendsList ? "1" : "0",
                sendsList ? PresenceCoding.encode(count: state.count, members: state.first) : [],
            ]
            for (other, presence) in state.known.sorted(by: { $0.key < $1.key }) {
                arguments.append(other)
                arguments.append(presence.version)
            }
            let session = beat.session
            let token = state.token
            let version = state.version
            commands.evaluate(Self.beatScript, keys: Self.keys(session), arguments: arguments) { [self] result in
                beaten(session, token: token, version: version, result, deliver: carried)
            }
        }
    }

    private func newState() -> Shared {
        tokens += 1
        return Shared(token: tokens)
    }

    /// Service thread: a beat's reply.
    private func beaten(
        _ session: String, token: UInt64, version: String, _ result: Result<RedisReply, RedisError>,
        deliver: ServiceThreadOnly<(String, [NodePresence]) -> Void>
    ) {
        guard var state = sessions[session], state.token == token else { return }
        state.beating = false
        defer { sessions[session] = state }
        let reply: RedisReply
        switch result {
        case .failure(let error):
            // Not connected: the client reports the outage once; anything else is news.
            if case .notConnected = error { return }
            report("presence_failed", [("session", session), ("reason", error.description)])
            return
        case .success(let value):
            reply = value
        }
        guard let parts = reply.elements, parts.count == 3, let resend = parts[0].integer, let changed = parts[1].elements,
            let gone = parts[2].elements, changed.count % 3 == 0
        else {
            report("presence_failed", [("session", session), ("reason", "the heartbeat's reply is not in the expected form")])
            return
        }
        state.published = resend == 1 ? "" : version
        var news = !gone.isEmpty
        for other in gone.compactMap(\.string) { state.known[other] = nil }
        for index in stride(from: 0, to: changed.count, by: 3) {
            guard let other = changed[index].string, let meta = changed[index + 1].string, case .bulk(let list) = changed[index + 2] else { continue }
            let otherVersion = String(meta.prefix { $0 != " " })
            do {
                state.known[other] = try PresenceCoding.decode(list, node: other, version: otherVersion)
                news = true
            } catch {
                report("presence_dropped", [("session", session), ("node", other), ("reason", error.message)])
            }
        }
        guard news else { return }
        let others = state.known.values.sorted { $0.node < $1.node }
        sessions[session] = state
        deliver.value(session, others)
    }

    func leave(node: String, session: String) {
        sessions[session] = nil
        remove(node: node, from: [session]) { _ in }
    }

    /// Removes every entry of `node` (a normal stop); `completion` when Redis answered or failed.
    func leaveAll(node: String, completion: @escaping () -> Void) {
        let names = sessions.keys.sorted()
        sessions = [:]
        guard !names.isEmpty else { return completion() }
        let carried = ServiceThreadOnly(completion)
        remove(node: node, from: names) { _ in carried.value() }
    }

    private func remove(node: String, from names: [String], completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        var pipeline: [RedisCommand] = []
        for name in names {
            let keys = Self.keys(name)
            pipeline.append(RedisCommand("ZREM", keys[0], node))
            pipeline.append(RedisCommand("HDEL", keys[1], node))
            pipeline.append(RedisCommand("HDEL", keys[2], node))
        }
        commands.send(pipeline, completion: completion)
    }
}
