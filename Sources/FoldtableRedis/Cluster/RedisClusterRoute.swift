/// One command's way through a Redis Cluster, as a pure state machine: where to send it first,
/// and after each reply whether it is the command's own or a redirection to follow. No sockets:
/// ``RedisClusterClient`` drives it, the tests feed it replies.
///
/// - `MOVED`: the slot has a new master; the map learns it at once (one slot; a refresh of the
///   whole map is wanted, ``mapIsStale``) and the command goes there.
/// - `ASK`: the slot is migrating and the key is on the target already: the command goes there
///   once, after `ASKING`; the map is unchanged (the next command of the slot still goes to the
///   old owner, which answers `ASK` again until the migration ends, then `MOVED`).
/// - `TRYAGAIN`: a command over several keys of a migrating slot, some on each side: the same
///   node is asked again after a short wait, with growing delays.
/// - Anything else, an error reply included, is the command's own reply.
///
/// A redirection means the command did not run, so sending it again cannot apply it twice.
/// Redirections are bounded (``maxRedirections``): a map that keeps changing under the command
/// ends it with an error rather than a loop.
public struct RedisClusterRoute: Equatable, Sendable {
    /// What the driver does next.
    public enum Step: Equatable, Sendable {
        /// Send the command to `node`, after `ASKING` when `asking`, at once or after `delayMs`.
        case send(to: RedisNodeAddress, asking: Bool, delayMs: UInt64)
        /// The last reply is the command's own: hand it to the caller.
        case finished
        /// The command cannot reach its slot's master; it was not sent (or did not run).
        case failed(RedisError)
    }

    /// The slot of the command's keys.
    public let slot: Int
    /// Redirections (and `TRYAGAIN`s) after which the command fails.
    public let maxRedirections: Int
    /// Redirections followed so far.
    public private(set) var redirections = 0
    /// Where the command was sent last, and whether after `ASKING`.
    public private(set) var target: RedisNodeAddress?
    public private(set) var asking = false
    /// The map proved out of date (a `MOVED`, a `CLUSTERDOWN`, an unreachable or unknown
    /// master): the driver refreshes it with `CLUSTER SLOTS`.
    public private(set) var mapIsStale = false

    public init(slot: Int, maxRedirections: Int = 5) {
        self.slot = slot
        self.maxRedirections = maxRedirections
    }

    /// Where the command goes first: the slot's master in `map`.
    public mutating func start(_ map: RedisSlotMap) -> Step {
        guard let owner = map.owner(of: slot) else {
            mapIsStale = true
            return .failed(.notConnected("no master serves hash slot \(slot) (the cluster's slot map has a hole)"))
        }
        target = owner
        return .send(to: owner, asking: false, delayMs: 0)
    }

    /// What to do with `result`, the reply of the node last sent to; a `MOVED` updates `map`.
    public mutating func next(after result: Result<RedisReply, RedisError>, map: inout RedisSlotMap) -> Step {
        let message: String
        switch result {
        case .success(.error(let text)), .failure(.server(let text)):
            message = text
        case .failure(let error):
            if case .notConnected = error { mapIsStale = true }
            if case .timedOut = error { mapIsStale = true }
            if case .connectionLost = error { mapIsStale = true }
            return .finished
        case .success:
            return .finished
        }
        if message.hasPrefix("CLUSTERDOWN") {
            mapIsStale = true
            return .finished
        }
        let tryAgain = message.hasPrefix("TRYAGAIN")
        let redirection = RedisRedirection(message)
        guard tryAgain || redirection != nil else { return .finished }
        guard redirections < maxRedirections else {
            mapIsStale = true
            return .failed(.server("hash slot \(slot): still redirected after \(maxRedirections) attempts (\(message.prefix(80)))"))
        }
        redirections += 1
        switch redirection {
        case .moved(let movedSlot, let node)?:
            map.assign(movedSlot...movedSlot, to: node)
            mapIsStale = true
            target = node
            asking = false
            return .send(to: node, asking: false, delayMs: 0)
        case .ask(_, let node)?:
            target = node
            asking = true
            return .send(to: node, asking: true, delayMs: 0)
        case nil:
            // TRYAGAIN: the same node, once the migration has moved the rest of the keys.
            guard let target else { return .finished }
            return .send(to: target, asking: asking, delayMs: UInt64(min(redirections, 8)) * 25)
        }
    }
}
