import Dispatch
import FoldtableCore
import FoldtableServer
import Synchronization

/// The `InviteLedger` on Redis, shared by every node: a sorted set `foldtable:withdrawn` of
/// withdrawn token ids scored by until when each is kept (the key expires with the last of
/// them), a counter `foldtable:withdrawn:version` bumped by every withdrawal, and per session a
/// hash `foldtable:{name}:invites` of its minted invites (id -> JSON), which expires with the
/// last of them.
///
/// How other nodes hear of a withdrawal: each node reads the counter every ``pollMs`` and,
/// when it moved, the ids still in force (one `GET` per node per poll while nothing changes).
/// So a withdrawn token is refused everywhere within about ``pollMs``. A node reads the list once
/// before it serves (``withdrawnTokens(now:)``); when Redis cannot answer then, within
/// ``startReadMs``, its first successful poll brings the list.
///
/// Service thread only: the commands client delivers its replies there (`@unchecked Sendable`
/// for that reason, as `RedisPresence`).
public final class RedisInvites: InviteLedger, @unchecked Sendable {
    /// Milliseconds between reads of the withdrawal counter.
    public static let pollMs = 500
    static let withdrawnKey = "foldtable:withdrawn"
    static let versionKey = "foldtable:withdrawn:version"
    static func invitesKey(_ session: String) -> String { "foldtable:{\(session)}:invites" }

    /// How long start-up waits for the withdrawn list before serving without it.
    public static let startReadMs = 3_000

    private let commands: any RedisCommands
    private let options: RedisClient.Options
    private let post: RedisBroker.Post
    private let clock: () -> UInt64
    private var version: String?
    private var deliver: (([String: UInt64]) -> Void)?
    private var closed = false

    /// Shares the broker's commands connection; `options` (the broker's) open the one made for
    /// the read at start-up.
    public init(broker: RedisBroker, options: RedisClient.Options, clock: @escaping () -> UInt64 = Hub.wallClock) {
        commands = broker.commandsClient
        self.options = options
        post = broker.postToService
        self.clock = clock
    }

    /// The list as Redis holds it, read on a connection of its own whose replies come on its
    /// own thread (the service loop is not running yet), waiting at most ``startReadMs``.
    public func withdrawnTokens(now: UInt64) throws(StoreError) -> [String: UInt64] {
        let client = RedisClient(options)
        defer { client.close() }
        let found = Mutex<[String: UInt64]?>(nil)
        let done = DispatchSemaphore(value: 0)
        client.send(RedisCommand("ZRANGEBYSCORE", Self.withdrawnKey, "(\(now)", "+inf", "WITHSCORES")) { result in
            if case .success(.array(let pairs)) = result { found.withLock { $0 = Self.scores(pairs) } }
            done.signal()
        }
        _ = done.wait(timeout: .now() + .milliseconds(Self.startReadMs))
        return found.withLock { $0 } ?? [:]
    }

    /// `[member, score, member, score, ...]` as member -> score.
    static func scores(_ pairs: [RedisReply]) -> [String: UInt64] {
        var found: [String: UInt64] = [:]
        var index = 0
        while index + 1 < pairs.count {
            if let id = pairs[index].string, let score = pairs[index + 1].string.flatMap({ UInt64($0) }) { found[id] = score }
            index += 2
        }
        return found
    }

    public func record(_ invite: Invite, completion: @escaping (Result<Void, StoreError>) -> Void) {
        let key = Self.invitesKey(invite.session)
        let ttl = Int64(clamping: invite.expires &- min(invite.expires, invite.created))
        let done = ServiceThreadOnly(completion)
        commands.transaction([
            RedisCommand("HSET", key, invite.id, Self.encode(invite)),
            // The hash lives as long as its longest invite: NX sets a first expiry, GT lengthens it.
            RedisCommand("EXPIRE", key, ttl, "NX"),
            RedisCommand("EXPIRE", key, ttl, "GT"),
        ]) { results in done.value(Self.outcome(results)) }
    }

    public func invites(session: String, now: UInt64, completion: @escaping (Result<[Invite], StoreError>) -> Void) {
        let done = ServiceThreadOnly(completion)
        commands.transaction([
            RedisCommand("HGETALL", Self.invitesKey(session)),
            RedisCommand("ZRANGEBYSCORE", Self.withdrawnKey, "(\(now)", "+inf"),
        ]) { results in
            guard case .success(.array(let fields))? = results.first, case .success(.array(let withdrawnIds))? = results.last else {
                return done.value(.failure(Self.failure(results)))
            }
            let withdrawn = Set(withdrawnIds.compactMap(\.string))
            var found: [Invite] = []
            var index = 0
            while index + 1 < fields.count {
                if let id = fields[index].string, case .bulk(let bytes) = fields[index + 1],
                    let invite = Self.decode(id: id, session: session, bytes), invite.expires > now, !withdrawn.contains(id)
                {
                    found.append(invite)
                }
                index += 2
            }
            done.value(.success(found.sorted { ($0.created, $0.id) < ($1.created, $1.id) }))
        }
    }

    public func withdraw(id: String, session: String, until: UInt64, completion: @escaping (Result<Void, StoreError>) -> Void) {
        let now = clock()
        let done = ServiceThreadOnly(completion)
        commands.transaction([
            RedisCommand("ZADD", Self.withdrawnKey, "GT", until, id),
            RedisCommand("ZREMRANGEBYSCORE", Self.withdrawnKey, "-inf", now),
            RedisCommand("EXPIREAT", Self.withdrawnKey, until, "NX"),
            RedisCommand("EXPIREAT", Self.withdrawnKey, until, "GT"),
            RedisCommand("HDEL", Self.invitesKey(session), id),
            RedisCommand("INCR", Self.versionKey),
        ]) { results in done.value(Self.outcome(results)) }
    }

    public func follow(_ withdrawn: @escaping ([String: UInt64]) -> Void) {
        deliver = withdrawn
        poll()
    }

    /// Stops polling (shutdown, tests).
    public func close() {
        closed = true
        deliver = nil
    }

    /// Reads the counter; when it moved (or on the first read), the ids in force; then again
    /// in ``pollMs``, whatever happened (Redis down: the next poll tries again).
    private func poll() {
        guard !closed else { return }
        let carried = ServiceThreadOnly(WeakLedger(self))
        commands.send(RedisCommand("GET", Self.versionKey)) { result in
            guard let ledger = carried.value.ledger, !ledger.closed else { return }
            let current: String? = if case .success(let reply) = result { reply.string ?? "" } else { nil }
            guard let current, current != ledger.version else { return ledger.pollLater() }
            ledger.readWithdrawn(version: current)
        }
    }

    private func readWithdrawn(version current: String) {
        let carried = ServiceThreadOnly(WeakLedger(self))
        commands.send(RedisCommand("ZRANGEBYSCORE", Self.withdrawnKey, "(\(clock())", "+inf", "WITHSCORES")) { result in
            guard let ledger = carried.value.ledger, !ledger.closed else { return }
            if case .success(.array(let pairs)) = result {
                let found = Self.scores(pairs)
                ledger.version = current
                if !found.isEmpty { ledger.deliver?(found) }
            }
            ledger.pollLater()
        }
    }

    private func pollLater() {
        guard !closed else { return }
        // Weakly: a poll waiting on the timer or in the service queue must not keep a closed
        // ledger (and the broker and queue it holds) alive.
        let carried = ServiceThreadOnly(WeakLedger(self))
        let post = self.post
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Self.pollMs)) { post { carried.value.ledger?.poll() } }
    }

    /// A ledger held weakly, for the poll timer.
    private final class WeakLedger {
        weak var ledger: RedisInvites?
        init(_ ledger: RedisInvites) { self.ledger = ledger }
    }

    /// The invite as the hash keeps it (``Invite/json``).
    static func encode(_ invite: Invite) -> [UInt8] { invite.json }

    static func decode(id: String, session: String, _ bytes: [UInt8]) -> Invite? {
        guard let reader = try? FieldReader(JSONParser.parse(bytes)), let roleName = try? reader.string("role"),
            let role = Role(rawValue: roleName), let label = try? reader.string("label"), let created = try? reader.integer("created"),
            let expires = try? reader.integer("expires"), let createdBy = try? reader.string("createdBy"), created >= 0, expires >= 0
        else { return nil }
        return Invite(id: id, session: session, role: role, label: label, created: UInt64(created), expires: UInt64(expires), createdBy: createdBy)
    }

    private static func outcome(_ results: [Result<RedisReply, RedisError>]) -> Result<Void, StoreError> {
        let failed = results.contains { result in
            if case .success(.error) = result { return true }
            if case .failure = result { return true }
            return false
        }
        return failed ? .failure(failure(results)) : .success(())
    }

    private static func failure(_ results: [Result<RedisReply, RedisError>]) -> StoreError {
        for result in results {
            if case .failure(let error) = result { return .unavailable("redis: \(error)") }
            if case .success(.error(let message)) = result { return .unavailable("redis: \(message)") }
        }
        return .unavailable("redis answered something else")
    }
}
