import FoldtableCore

/// Where a change request was made: the node and that node's number for it (see
/// ``SessionCore/Sequencing``). Only the named node answers the request's author.
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

    public init(change: Change, id: String?, author: Author, origin: RequestOrigin, position: String = "") {
        self.change = change
        self.id = id
        self.author = author
        self.origin = origin
        self.position = position
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

    public init(epoch: String, table: Table, position: String, requests: [SequencedRequest]) {
        self.epoch = epoch
        self.table = table
        self.position = position
        self.requests = requests
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
/// completions and deliveries run later on the service thread, never inside the call.
public protocol Broker: AnyObject {
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
    func follow(
        session: String, after position: String, deliver: @escaping ([SequencedRequest]) -> Void,
        caughtUp: @escaping (_ through: String) -> Void)
    func unfollow(session: String)
    /// Saves `table` as the snapshot covering the stream up to `position`, unless a snapshot of a
    /// later position is there already; then lets the stream forget entries older than `keep`
    /// entries before `position` (the resume window).
    func saveSnapshot(session: String, epoch: String, table: Table, position: String, keep: Int)

    /// Whether the broker can append and deliver now (all its connections are up). While it
    /// cannot, shared sessions are read-only.
    var isAvailable: Bool { get }
    /// Runs on the service thread at each change of ``isAvailable`` (set once, by the hub).
    var availabilityChanged: ((Bool) -> Void)? { get set }
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
