import FoldtableCore

/// Where a change request was made: the node and that node's number for it (see
/// ``StreamOrder``). Only the named node answers the request's author.
public struct RequestOrigin: Hashable, Sendable {
    /// The node id (unique among the nodes sharing a broker).
    public var node: String
    /// Counted by the session's core on that node, from 1.
    public var number: UInt64

    public init(node: String, number: UInt64) {
        self.node = node
        self.number = number
    }
}

/// A change request as a session's stream holds it: what the author sent, not the event it
/// becomes. Every node applies it to its table in stream order and gets the same event or the
/// same refusal.
public struct SequencedRequest: Equatable, Sendable {
    public var change: Change
    /// The author's change id, if it gave one.
    public var id: String?
    /// The node-qualified author (`<node>.c<connection>` for members).
    public var author: Author
    public var origin: RequestOrigin
    /// The entry's place in the stream (its Redis stream ID), set by the broker when the entry
    /// is read: what a snapshot records as covered. Empty before the append.
    public var position: String
    /// The entry's number in its session's stream, set by the broker when the entry is read:
    /// numbers are given at append time, one more than the entry before, so a follower whose
    /// next entry is not its last one's number plus one knows the entries between were trimmed
    /// away before it read them. `nil`: not numbered (an entry written before entries were
    /// numbered, or a broker that never skips entries, like ``LocalBroker``); not checked.
    public var number: UInt64?

    public init(change: Change, id: String?, author: Author, origin: RequestOrigin, position: String = "") {
        self.change = change
        self.id = id
        self.author = author
        self.origin = origin
        self.position = position
    }
}

/// One event as members received it, kept for resume: a snapshot carries the last ones it
/// covers, so a node that opens the session from it can resume a member's `since` from before
/// the open (see ``BrokeredSession/history``).
public struct HistoryEntry: Equatable, Sendable {
    public var seq: UInt64
    /// The event as `ServerMessage.event(_:)` encoded it: an import's rows are left out (they
    /// stream), so an entry is about as large as the change its author sent.
    public var message: [UInt8]
    /// The sections a member resuming past this event must be sent rows of
    /// (`TableEvent.sectionsNeedingRows`), if they are still expanded.
    public var expanded: [String]

    public init(seq: UInt64, message: [UInt8], expanded: [String]) {
        self.seq = seq
        self.message = message
        self.expanded = expanded
    }
}

/// A session as a broker holds it: a snapshot and the requests after it.
public struct BrokeredSession: Sendable {
    public var epoch: String
    /// The newest snapshot, change-id window included.
    public var table: Table
    /// The stream position the snapshot covers ("" when it covers nothing: a new session).
    public var position: String
    /// Every request after `position`, in stream order.
    public var requests: [SequencedRequest]
    /// Whether this open wrote the session (it did not exist); set by the broker.
    public var created = false
    /// The last events up to the snapshot's `seq` (at most `historyEvents`, consecutive, oldest
    /// first), saved with it: what lets a member resume here from before this node opened the
    /// session. Empty for a new session, or a snapshot saved without them.
    public var history: [HistoryEntry]
    /// The number of the entry at `position` (see ``SequencedRequest/number``): 0 for a
    /// snapshot that covers no entry, `nil` when unknown (not checked).
    public var number: UInt64?

    public init(epoch: String, table: Table, position: String, requests: [SequencedRequest], history: [HistoryEntry] = []) {
        self.epoch = epoch
        self.table = table
        self.position = position
        self.requests = requests
        self.history = history
    }
}

/// Why a broker call failed.
public struct BrokerError: Error, Equatable, Sendable, CustomStringConvertible {
    public var reason: String
    /// Whether the request may have been appended anyway (the connection broke or timed out
    /// after it was sent): its entry may still show up in the stream.
    public var mayHaveRun: Bool

    public init(_ reason: String, mayHaveRun: Bool = false) {
        self.reason = reason
        self.mayHaveRun = mayHaveRun
    }

    public var description: String { reason }
}

/// The order of the sessions shared by several nodes: one stream of requests per session, which
/// every node with members in it reads and applies in the same order (see the article "More
/// than one machine").
///
/// Like ``SessionStore``, every method is called on the service thread and returns at once;
/// completions and deliveries run later on the service thread, never inside the call. Presence
/// across nodes is its other half (``PresenceBroker``).
public protocol Broker: PresenceBroker {
    /// Appends `request` to the stream of `session`; success gives its position in the stream.
    /// Success says it is in the order, not that it was applied: the author is answered when
    /// its entry is read back and applied (or, should the entry not decode, when a read passes
    /// that position without it).
    func append(session: String, request: SequencedRequest, completion: @escaping (Result<String, BrokerError>) -> Void)
    /// The session's snapshot and the requests after it; with `create` and no such session, a
    /// new one holding `create` (written only when nobody wrote one first: then theirs is
    /// returned). `nil`: the broker holds no such session and `create` was `nil`.
    func open(
        session: String, create: BrokeredSession?, completion: @escaping (Result<BrokeredSession?, BrokerError>) -> Void)
    /// Delivers every request appended to the stream of `session` after `position`, in stream
    /// order, batch by batch, until ``unfollow(session:)``. `caughtUp` runs after each read that
    /// found the stream's end, with the last position that read reached (a request whose append
    /// failed and is not delivered by then was not appended before that read began; one
    /// appended at or before that position and not delivered was dropped as undecodable).
    ///
    /// While the broker is unavailable nothing is delivered; once it is available again the
    /// follower must ``resume(session:after:epoch:create:completion:)`` and follow again.
    ///
    /// `number` is that of the entry at `position` (``SequencedRequest/number``, or
    /// ``BrokeredSession/number`` for a snapshot's), `nil` if unknown. Should the next entries
    /// read not continue it (the stream was trimmed past `position` while this node was behind:
    /// stopped, or reading slower than the others write), nothing after the gap is delivered,
    /// the broker stops following and calls `fellBehind`: the follower must resume (which
    /// reloads the session) and follow again.
    func follow(
        session: String, after position: String, number: UInt64?, deliver: @escaping ([SequencedRequest]) -> Void,
        caughtUp: @escaping (_ through: String) -> Void, fellBehind: @escaping () -> Void)
    func unfollow(session: String)
    /// Saves `table` as the snapshot covering the stream up to `position`, with `history` (the
    /// events before it that members may resume from), unless a snapshot of a later position is
    /// there already; then lets the stream forget entries older than `keep` entries before
    /// `position` (the resume window).
    func saveSnapshot(session: String, epoch: String, table: Table, position: String, history: [HistoryEntry], keep: Int)

    /// Whether the broker can append and deliver now (all its connections are up). While it
    /// cannot, shared sessions are read-only.
    var isAvailable: Bool { get }
    /// Runs on the service thread at each change of ``isAvailable`` (set once, by the hub), and
    /// of any session's ``isAvailable(session:)``.
    var availabilityChanged: ((Bool) -> Void)? { get set }
    /// Whether the broker can append to and deliver `session` now. ``isAvailable`` by default; a
    /// broker whose sessions live on several servers (a Redis Cluster's shards) says per session,
    /// so a server that is down makes only its own sessions read-only.
    func isAvailable(session: String) -> Bool
    /// After an outage: whether the stream of `session` still continues from `position` (the
    /// last one delivered) in `epoch`. `nil` when it does (follow on from `position`); else the
    /// session as the broker holds it now, to reload: the stream was trimmed past `position`,
    /// the broker lost what was applied (then its epoch is replaced by `create`'s, as history
    /// no longer continues), or it lost the session altogether (then it is created from
    /// `create`, unless another node did first).
    func resume(
        session: String, after position: String, epoch: String, create: BrokeredSession,
        completion: @escaping (Result<BrokeredSession?, BrokerError>) -> Void)
}

extension Broker {
    public func isAvailable(session: String) -> Bool { isAvailable }
}

/// Orders stream positions ("<ms>-<seq>" for Redis, a number for ``LocalBroker``); "" is before
/// every position.
public enum StreamPosition {
    /// Whether `a` comes before `b` in a stream.
    public static func precedes(_ a: String, _ b: String) -> Bool {
        let left = parts(a)
        let right = parts(b)
        return left.0 != right.0 ? left.0 < right.0 : left.1 < right.1
    }

    private static func parts(_ position: String) -> (UInt64, UInt64) {
        let split = position.split(separator: "-", maxSplits: 1)
        return (split.first.flatMap { UInt64($0) } ?? 0, split.count > 1 ? UInt64(split[1]) ?? 0 : 0)
    }
}

/// One node's members of a shared session, as that node shares them with the others: how many,
/// and who (at most ``ServerConfig/presenceListMax`` of them, in join order), under a version
/// that changes whenever either does, so other nodes read the list only when it changed.
public struct NodePresence: Equatable, Sendable {
    public var node: String
    /// Members of the session on that node.
    public var count: Int
    /// The first of them in join order: all of them when `members.count == count`.
    public var members: [Author]
    /// Opaque, unique per node process and change ("" before the first).
    public var version: String

    public init(node: String, count: Int, members: [Author], version: String = "") {
        self.node = node
        self.count = count
        self.members = members
        self.version = version
    }

    /// Whether `members` lists everyone.
    public var isExact: Bool { members.count == count }
}

/// What a node says about one session in a heartbeat (see ``PresenceBroker/beat(node:expiryMs:_:deliver:)``).
public struct PresenceBeat: Sendable {
    public var session: String
    /// This node's members of it (count, and the first ``ServerConfig/presenceListMax`` in join
    /// order); `nil`: unchanged since the last beat, which costs the broker nothing to compare.
    public var members: (count: Int, first: [Author])?

    public init(session: String, members: (count: Int, first: [Author])?) {
        self.session = session
        self.members = members
    }
}

/// Presence across nodes, the second half of the port: members are held by the node they are
/// connected to, and each node shares, per session it holds, its count and first members with
/// an expiring heartbeat. Expiry is the broker's clock (Redis' `TIME`), never a node's.
public protocol PresenceBroker: AnyObject {
    /// One heartbeat of `node`: refreshes its entry of every session in `beats` (an entry of no
    /// members is removed), so that it lives `expiryMs` more; drops the entries of nodes whose
    /// heartbeat expired. `deliver` runs on the service thread, later, for each session whose
    /// other nodes' members changed since the last delivery: all of them, each time (a node
    /// that expired or left is simply absent).
    func beat(node: String, expiryMs: UInt64, _ beats: [PresenceBeat], deliver: @escaping (_ session: String, _ others: [NodePresence]) -> Void)
    /// Removes `node`'s entry of `session` at once (the session left this node) and forgets it.
    func leavePresence(node: String, session: String)
    /// Removes every entry of `node` at once (the node stops normally, so its members leave other
    /// nodes' presence now rather than at the expiry bound); `completion` runs on the service
    /// thread when that is done or failed.
    func leaveAllPresence(node: String, completion: @escaping () -> Void)
    /// Every session shared through the broker (made by any node's
    /// ``Broker/open(session:create:completion:)``), each with the members the nodes other than
    /// `node` hold in it as of their last heartbeats: a node whose heartbeat expired counts none.
    /// What `list` and `/api/v1/sessions` show for a session `node` does not hold (one it never
    /// opened or evicted), so every node lists the same sessions and counts. `completion` runs
    /// on the service thread, later.
    func sharedSessions(excluding node: String, completion: @escaping (Result<[String: Int], BrokerError>) -> Void)
}
