import FoldtableCore

/// The ``Broker`` port in one process: each session's stream is an array in memory
/// (``Streams``), shared by the brokers of several hubs, one broker per hub as one Redis broker
/// per node. What the tests run several hubs over (the Redis broker's behaviour without
/// Redis); not durable, so a single-node deployment keeps its sessions sequenced by their own
/// cores with the SQLite log instead.
///
/// Service thread only. `post` defers completions and deliveries to a later turn of the
/// service thread (a transport's ``Transport/post(_:)``), as a broker with I/O would.
public final class LocalBroker: Broker {
    /// The streams themselves, shared by the brokers given them.
    public final class Streams {
        struct Stream {
            var epoch: String
            var snapshot: Table
            /// Position of the snapshot: the number of entries it covers.
            var snapshotPosition: Int
            /// The events before the snapshot saved with it, for resume.
            var history: [HistoryEntry] = []
            /// Every entry ever appended; `position` is index + 1.
            var entries: [SequencedRequest] = []
            /// Entries up to this position are trimmed away (as `XTRIM` would: kept in the
            /// array, never read again).
            var trimmedThrough = 0
        }
        var streams: [String: Stream] = [:]
        /// Every broker over these streams, told of each append.
        var brokers: [Weak] = []
        /// Each session's presence entries by node, with when each expires.
        var presence: [String: [String: (expires: UInt64, entry: NodePresence)]] = [:]
        var presenceVersions: UInt64 = 0
        /// The broker's clock in milliseconds (Redis' `TIME` for the Redis broker): heartbeats
        /// expire by it, never by a node's clock. Tests move it.
        public var now: UInt64 = 0

        struct Weak {
            weak var broker: LocalBroker?
        }

        public init() {}

        /// Loses everything of `session`, as a Redis restarted without its data would.
        public func forget(session: String) {
            streams[session] = nil
        }
    }

    private struct Follower {
        let token: UInt64
        var after: Int
        let deliver: ([SequencedRequest]) -> Void
        let caughtUp: (String) -> Void
    }
    private let shared: Streams
    private var followers: [String: [Follower]] = [:]
    private var nextToken: UInt64 = 0
    private let post: (@escaping @Sendable () -> Void) -> Void
    private var deliveryPosted = false
    public private(set) var isAvailable = true
    public var availabilityChanged: ((Bool) -> Void)?
    /// Versions of the other nodes' entries last delivered, per session this broker beats for.
    private var knownPresence: [String: [String: String]] = [:]
    /// This node's members per session, as the hub last gave them.
    private var ownPresence: [String: (count: Int, first: [Author])] = [:]

    public init(streams: Streams, post: @escaping (@escaping @Sendable () -> Void) -> Void) {
        self.shared = streams
        self.post = post
        streams.brokers.append(Streams.Weak(broker: self))
    }

    /// Cuts this broker off (as a node whose Redis connections are down) or brings it back:
    /// while cut off, appends, opens and resumes fail (nothing is appended) and nothing is
    /// delivered; ``availabilityChanged`` hears of it on a later turn.
    public func setAvailable(_ available: Bool) {
        guard available != isAvailable else { return }
        isAvailable = available
        later { [self] in availabilityChanged?(available) }
    }

    private var unavailable: BrokerError { BrokerError("the broker is unavailable") }

    /// Runs `work` on a later turn of the service thread.
    private func later(_ work: @escaping () -> Void) {
        let carried = ServiceThreadOnly(work)
        post { carried.value() }
    }

    public func append(session: String, request: SequencedRequest, completion: @escaping (Result<String, BrokerError>) -> Void) {
        guard isAvailable else { return later { [self] in completion(.failure(unavailable)) } }
        guard let count = shared.streams[session]?.entries.count else {
            return later { completion(.failure(BrokerError("no stream for session \(session)"))) }
        }
        var entry = request
        entry.position = String(count + 1)
        shared.streams[session]?.entries.append(entry)
        later { completion(.success(entry.position)) }
        for other in shared.brokers { other.broker?.deliverSoon() }
    }

    public func open(session: String, create: BrokeredSession?, completion: @escaping (Result<BrokeredSession?, BrokerError>) -> Void) {
        guard isAvailable else { return later { [self] in completion(.failure(unavailable)) } }
        var created = false
        if shared.streams[session] == nil, let create {
            shared.streams[session] = Streams.Stream(epoch: create.epoch, snapshot: create.table, snapshotPosition: 0)
            created = true
        }
        var opened = shared.streams[session].map { stream in
            BrokeredSession(
                epoch: stream.epoch, table: stream.snapshot, position: stream.snapshotPosition == 0 ? "" : String(stream.snapshotPosition),
                requests: Array(stream.entries[stream.snapshotPosition...]), history: stream.history)
        }
        opened?.created = created
        later { completion(.success(opened)) }
    }

    public func resume(
        session: String, after position: String, epoch: String, create: BrokeredSession,
        completion: @escaping (Result<BrokeredSession?, BrokerError>) -> Void
    ) {
        guard isAvailable else { return later { [self] in completion(.failure(unavailable)) } }
        let after = Int(position) ?? 0
        if let stream = shared.streams[session], stream.epoch == epoch {
            let continues = after == 0 ? stream.trimmedThrough == 0 : after > stream.trimmedThrough && after <= stream.entries.count
            if continues { return later { completion(.success(nil)) } }
            if stream.snapshotPosition < after {
                // What this node applied is gone: history no longer continues.
                shared.streams[session]?.epoch = create.epoch
            }
        }
        open(session: session, create: create, completion: completion)
    }

    /// Never calls `fellBehind`: trimmed entries stay in the array, so a follower never skips
    /// any (entries are not numbered).
    public func follow(
        session: String, after position: String, number: UInt64?, deliver: @escaping ([SequencedRequest]) -> Void,
        caughtUp: @escaping (String) -> Void, fellBehind: @escaping () -> Void
    ) {
        nextToken += 1
        followers[session, default: []].append(Follower(token: nextToken, after: Int(position) ?? 0, deliver: deliver, caughtUp: caughtUp))
        deliverSoon()
    }

    public func unfollow(session: String) {
        followers[session] = nil
    }

    public func saveSnapshot(session: String, epoch: String, table: Table, position: String, history: [HistoryEntry], keep: Int) {
        guard let covered = Int(position), let stream = shared.streams[session], covered > stream.snapshotPosition else { return }
        shared.streams[session]?.snapshot = table
        shared.streams[session]?.snapshotPosition = covered
        shared.streams[session]?.trimmedThrough = max(stream.trimmedThrough, covered - max(0, keep) - 1)
        shared.streams[session]?.history = history
    }

    /// One delivery turn for everything appended meanwhile, like a reader's next read.
    private func deliverSoon() {
        guard !deliveryPosted else { return }
        deliveryPosted = true
        later { [self] in
            deliveryPosted = false
            guard isAvailable else { return }
            for (session, list) in followers {
                for follower in list {
                    guard let entries = shared.streams[session]?.entries else { continue }
                    let fresh = Array(entries[min(follower.after, entries.count)...])
                    setAfter(session, token: follower.token, entries.count)
                    if !fresh.isEmpty { follower.deliver(fresh) }
                    follower.caughtUp(String(entries.count))
                }
            }
        }
    }

    private func setAfter(_ session: String, token: UInt64, _ after: Int) {
        guard let index = followers[session]?.firstIndex(where: { $0.token == token }) else { return }
        followers[session]?[index].after = after
    }

    // MARK: - Presence

    public func beat(
        node: String, expiryMs: UInt64, _ beats: [PresenceBeat], deliver: @escaping (_ session: String, _ others: [NodePresence]) -> Void
    ) {
        let now = shared.now
        for beat in beats {
            let session = beat.session
            var entries = (shared.presence[session] ?? [:]).filter { $0.value.expires > now }
            if let members = beat.members { ownPresence[session] = members }
            // What this node last said, written again if its entry expired meanwhile.
            if let members = ownPresence[session], members.count > 0 {
                let held = entries[node]?.entry
                var entry = NodePresence(node: node, count: members.count, members: members.first, version: held?.version ?? "")
                if held?.count != entry.count || held?.members != entry.members {
                    shared.presenceVersions += 1
                    entry.version = String(shared.presenceVersions)
                }
                entries[node] = (now + expiryMs, entry)
            } else {
                entries[node] = nil
            }
            shared.presence[session] = entries.isEmpty ? nil : entries
            let others = entries.values.map(\.entry).filter { $0.node != node }.sorted { $0.node < $1.node }
            let versions = Dictionary(uniqueKeysWithValues: others.map { ($0.node, $0.version) })
            guard knownPresence[session] != versions else { continue }
            knownPresence[session] = versions
            later { deliver(session, others) }
        }
    }

    public func leavePresence(node: String, session: String) {
        knownPresence[session] = nil
        ownPresence[session] = nil
        shared.presence[session]?[node] = nil
        if shared.presence[session]?.isEmpty == true { shared.presence[session] = nil }
    }

    public func leaveAllPresence(node: String, completion: @escaping () -> Void) {
        for session in Array(ownPresence.keys) + Array(knownPresence.keys) { leavePresence(node: node, session: session) }
        later(completion)
    }

    /// Read from the presence entries themselves: live ones of other nodes, by the broker's clock.
    public func sharedSessions(excluding node: String, completion: @escaping (Result<[String: Int], BrokerError>) -> Void) {
        let now = shared.now
        var counts = Dictionary(uniqueKeysWithValues: shared.streams.keys.map { ($0, 0) })
        for (session, entries) in shared.presence {
            for (other, held) in entries where other != node && held.expires > now { counts[session, default: 0] += held.entry.count }
        }
        later { completion(.success(counts)) }
    }
}
