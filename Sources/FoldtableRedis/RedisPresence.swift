import FoldtableCore
import FoldtableServer

/// Presence across nodes on Redis, for ``RedisBroker``: per session, a sorted set
/// `foldtable:{name}:presence` of node ids scored by when their heartbeat expires (Redis' own
/// `TIME` plus the node's expiry bound: no node's clock decides), a hash `…:presence:meta` of
/// each node's `<version> <count>`, and a hash `…:presence:list` of what it lists (its count and
/// first `presenceListMax` members, ``PresenceCoding``).
///
/// One script per ``sessionsPerScript`` sessions the node holds, all in one pipeline, refreshes
/// this node's entry of each, drops expired nodes, and returns only the entries whose version
/// differs from what this node holds, and the nodes gone: a beat costs Redis one round trip
/// however many sessions the node holds, and a session whose keys are damaged fails alone. A beat whose members did not change sends no list and reads
/// none: its bytes do not grow with the members, however many. A node's list is written only when it changed, and
/// other nodes read it only then. The keys expire with the last heartbeat, so nothing is
/// left behind when every node is gone.
///
/// Service thread only: beats are made there and their replies come back there (the commands
/// client delivers through the service queue). `@unchecked Sendable` for that reason: the
/// client's completions carry `self` to the service thread and touch it only there.
final class RedisPresence: @unchecked Sendable {
    private let commands: any RedisCommands
    /// Under a cluster a script touches one hash slot: a beat sends one per slot of its sessions.
    private let bySlot: Bool
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
    /// Every shared session's members across the nodes, written with the beats (for listing).
    let counts: RedisSessionCounts

    init(commands: any RedisCommands, bySlot: Bool = false, report: @escaping @Sendable (_ event: String, _ fields: [(String, String)]) -> Void) {
        self.commands = commands
        self.bySlot = bySlot
        self.report = report
        counts = RedisSessionCounts(commands: commands, report: report)
    }

    static func keys(_ session: String) -> [String] {
        ["foldtable:{\(session)}:presence", "foldtable:{\(session)}:presence:meta", "foldtable:{\(session)}:presence:list"]
    }

    /// One heartbeat of this node for a batch of sessions (every session it holds on one
    /// Redis; under a cluster, those of one hash slot). KEYS: each session's three keys (see
    /// ``keys(_:)``), in order. ARGV: node, expiry ms, then per session: version, count, '1'
    /// when the list follows, the list, how many (node, version) pairs this node holds, the
    /// pairs. Returns, per session in order, {resend, {node, meta, list, ...}, {gone node, ...}}:
    /// `resend` when this node's entry is not what it last wrote (it expired while this node
    /// was cut off): its next beat writes the list again. A session whose part failed has an
    /// error reply in its place.
    static let beatScript = RedisScript(
        """
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local node = ARGV[1]
        local expiry = tonumber(ARGV[2])
        local function beat(zset, metas, lists, version, count, sends, list, known)
          local dead = redis.call('ZRANGEBYSCORE', zset, '-inf', now)
          if #dead > 0 then
            redis.call('ZREM', zset, unpack(dead))
            redis.call('HDEL', metas, unpack(dead))
            redis.call('HDEL', lists, unpack(dead))
          end
          local resend = 0
          local meta = version .. ' ' .. count
          if tonumber(count) > 0 then
            if sends == '1' then
              redis.call('HSET', metas, node, meta)
              redis.call('HSET', lists, node, list)
            elseif redis.call('HGET', metas, node) ~= meta then
              resend = 1
            end
            if resend == 0 then
              redis.call('ZADD', zset, now + expiry, node)
              for _, key in ipairs({zset, metas, lists}) do
                if redis.call('PTTL', key) < expiry then redis.call('PEXPIRE', key, expiry) end
              end
            end
          else
            redis.call('ZREM', zset, node)
            redis.call('HDEL', metas, node)
            redis.call('HDEL', lists, node)
          end
          local all = redis.call('HGETALL', metas)
          local changed = {}
          local live = {}
          for i = 1, #all, 2 do
            local other = all[i]
            if other ~= node then
              live[other] = true
              if known[other] ~= string.match(all[i + 1], '^(%S+)') then
                changed[#changed + 1] = other
                changed[#changed + 1] = all[i + 1]
                changed[#changed + 1] = redis.call('HGET', lists, other) or ''
              end
            end
          end
          local gone = {}
          for other in pairs(known) do
            if not live[other] then gone[#gone + 1] = other end
          end
          return {resend, changed, gone}
        end
        local replies = {}
        local a = 3
        for k = 1, #KEYS, 3 do
          local held = tonumber(ARGV[a + 4])
          local known = {}
          for i = a + 5, a + 4 + 2 * held, 2 do known[ARGV[i]] = ARGV[i + 1] end
          -- One session's failure (a stray key of the wrong type) is its own: the others of
          -- the script still beat, and it comes back as an error reply in its place.
          local ok, reply = pcall(beat, KEYS[k], KEYS[k + 1], KEYS[k + 2], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], known)
          if not ok then
            reply = redis.error_reply(type(reply) == 'table' and tostring(reply.err) or tostring(reply))
          end
          replies[#replies + 1] = reply
          a = a + 5 + 2 * held
        end
        return replies
        """)

    /// One session's part of a beat, as sent.
    private struct Sent: Sendable {
        let session: String
        let token: UInt64
        let version: String
    }

    /// Sessions per script at most: one script runs alone in Redis, so a node holding 10,000
    /// sessions must not stop Redis for the time of all their beats at once (~100 ms); the
    /// scripts of a beat still go in one pipeline, one round trip.
    static let sessionsPerScript = 128

    /// One script's worth of a beat.
    private struct Batch {
        var keys: [String] = []
        var arguments: [any RedisArgument]
        var sent: [Sent] = []
    }

    func beat(node: String, expiryMs: UInt64, _ beats: [PresenceBeat], deliver: @escaping (_ session: String, _ others: [NodePresence]) -> Void) {
        let carried = ServiceThreadOnly(deliver)
        var batches: [Int: Batch] = [:]
        var full: [Batch] = []
        for beat in beats {
            var state = sessions[beat.session] ?? newState()
            if let members = beat.members, members.count != state.count || members.first != state.first {
                versions += 1
                state.version = "\(incarnation)-\(versions)"
                state.count = members.count
                state.first = members.first
                counts.set(beat.session, count: members.count)
            }
            guard !state.beating else {
                sessions[beat.session] = state
                continue
            }
            state.beating = true
            sessions[beat.session] = state
            let sendsList = state.count > 0 && state.published != state.version
            let group = bySlot ? RedisHashSlot.slot(of: beat.session) : 0
            var batch = batches[group] ?? Batch(arguments: [node, expiryMs])
            batch.keys += Self.keys(beat.session)
            batch.arguments += [
                state.version.isEmpty ? "-" : state.version, state.count, sendsList ? "1" : "0",
                sendsList ? PresenceCoding.encode(count: state.count, members: state.first) : [], state.known.count,
            ]
            for (other, presence) in state.known.sorted(by: { $0.key < $1.key }) {
                batch.arguments.append(other)
                batch.arguments.append(presence.version)
            }
            batch.sent.append(Sent(session: beat.session, token: state.token, version: state.version))
            if batch.sent.count >= Self.sessionsPerScript {
                full.append(batch)
                batches[group] = nil
            } else {
                batches[group] = batch
            }
        }
        // One script per `sessionsPerScript` sessions of this beat (under a cluster, of each hash
        // slot), all in one pipeline: its round trips do not grow with the sessions a node holds,
        // and no script keeps Redis from other clients for long.
        let scripts = full + batches.keys.sorted().compactMap { batches[$0] }
        if !scripts.isEmpty {
            let pipeline = scripts.map { RedisCommand(script: Self.beatScript, keys: $0.keys, arguments: $0.arguments) }
            let sent = scripts.map(\.sent)
            commands.send(pipeline) { [self] results in
                for (index, part) in sent.enumerated() {
                    beaten(part, index < results.count ? results[index] : .failure(.closed), deliver: carried)
                }
            }
        }
        counts.beat(node: node, expiryMs: expiryMs)
    }

    private func newState() -> Shared {
        tokens += 1
        return Shared(token: tokens)
    }

    /// Service thread: a beat's reply, one part per session sent. A failure is reported once
    /// for the beat, not once per session.
    private func beaten(_ sent: [Sent], _ result: Result<RedisReply, RedisError>, deliver: ServiceThreadOnly<(String, [NodePresence]) -> Void>) {
        var parts: [RedisReply] = []
        switch result {
        case .failure(let error):
            // Not connected: the client reports the outage once; anything else is news.
            if case .notConnected = error {} else { report("presence_failed", [("sessions", String(sent.count)), ("reason", error.description)]) }
        case .success(let reply):
            if let elements = reply.elements, elements.count == sent.count {
                parts = elements
            } else {
                report("presence_failed", [("sessions", String(sent.count)), ("reason", "the heartbeat's reply is not in the expected form")])
            }
        }
        for (index, one) in sent.enumerated() {
            guard var state = sessions[one.session], state.token == one.token else { continue }
            state.beating = false
            sessions[one.session] = state
            if index < parts.count { beaten(one, parts[index], deliver: deliver) }
        }
    }

    /// Service thread: one session's part of a beat's reply.
    private func beaten(_ sent: Sent, _ reply: RedisReply, deliver: ServiceThreadOnly<(String, [NodePresence]) -> Void>) {
        let session = sent.session
        guard var state = sessions[session] else { return }
        defer { sessions[session] = state }
        if case .error(let message) = reply {
            // This session's part failed alone (a key of the wrong type): named, so it can be mended.
            report("presence_failed", [("session", session), ("reason", message)])
            return
        }
        guard let parts = reply.elements, parts.count == 3, let resend = parts[0].integer, let changed = parts[1].elements,
            let gone = parts[2].elements, changed.count % 3 == 0
        else {
            report("presence_failed", [("session", session), ("reason", "the heartbeat's reply is not in the expected form")])
            return
        }
        state.published = resend == 1 ? "" : sent.version
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
        counts.set(session, count: 0)
        remove(node: node, from: [session]) { _ in }
    }

    /// Removes every entry of `node` (a normal stop); `completion` when Redis answered or failed.
    func leaveAll(node: String, completion: @escaping () -> Void) {
        let names = sessions.keys.sorted()
        sessions = [:]
        let carried = ServiceThreadOnly(completion)
        // Replies come in order on the one connection: the counts are gone when the last answers.
        guard !names.isEmpty else { return counts.leave(node: node) { carried.value() } }
        counts.leave(node: node) {}
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
