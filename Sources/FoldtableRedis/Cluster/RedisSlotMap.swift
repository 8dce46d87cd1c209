/// Which master of a Redis Cluster serves each hash slot, as `CLUSTER SLOTS` last said, and
/// corrected by `MOVED` replies in between.
///
/// A value: the cluster client holds one and replaces it when a refresh answers. Replicas are
/// not kept: every command of a session goes to the master (its stream's order is decided there,
/// and a replica may lag behind what was acknowledged).
public struct RedisSlotMap: Equatable, Sendable {
    /// The masters named so far, in the order first named (the index is what `owners` holds);
    /// one a `MOVED` took every slot from stays listed, serving none.
    public private(set) var masters: [RedisNodeAddress] = []
    /// Per slot, the index of its master in ``masters``, or -1 while no node serves it.
    private var owners = [Int16](repeating: -1, count: RedisHashSlot.count)

    public init() {}

    /// Why a `CLUSTER SLOTS` reply could not be read.
    public struct ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    /// Reads a `CLUSTER SLOTS` reply: one entry per range, `[start, end, master, replica...]`,
    /// each node `[host, port, id, ...]`. `asked` is the node the command went to: Redis writes
    /// an empty host for "the address you reached me at" (its announced IP unknown), and that is
    /// the address to use. A range whose master has no known endpoint (`?`) stays unserved.
    public init(clusterSlots reply: RedisReply, asked: RedisNodeAddress) throws(ParseError) {
        guard let ranges = reply.elements else { throw ParseError(message: "CLUSTER SLOTS answered \(reply.summary)") }
        for range in ranges {
            guard let parts = range.elements, parts.count >= 3, let start = parts[0].integer, let end = parts[1].integer,
                start >= 0, start <= end, end < RedisHashSlot.count, let master = parts[2].elements, master.count >= 2,
                let host = master[0].string, let port = master[1].integer, port >= 0, port <= 65_535
            else { throw ParseError(message: "a CLUSTER SLOTS range is not [start, end, [host, port, ...], ...]") }
            if host == "?" || port == 0 { continue }
            assign(Int(start)...Int(end), to: RedisNodeAddress(host: host.isEmpty ? asked.host : host, port: Int(port)))
        }
    }

    /// The master that serves `slot`, `nil` when none does (the map has a hole: a shard down
    /// without failover, or a slot not assigned yet).
    public func owner(of slot: Int) -> RedisNodeAddress? {
        guard slot >= 0, slot < RedisHashSlot.count else { return nil }
        let index = owners[slot]
        return index < 0 ? nil : masters[Int(index)]
    }

    /// The master that serves `key`'s slot.
    public func owner(ofKey key: String) -> RedisNodeAddress? {
        owner(of: RedisHashSlot.slot(of: key))
    }

    /// The masters that serve at least one slot.
    public var servingMasters: Set<RedisNodeAddress> {
        var serving = Set<Int16>()
        for owner in owners where owner >= 0 { serving.insert(owner) }
        return Set(serving.map { masters[Int($0)] })
    }

    /// The lowest slot `node` serves, `nil` when it serves none.
    public func firstSlot(of node: RedisNodeAddress) -> Int? {
        guard let index = masters.firstIndex(of: node) else { return nil }
        return owners.firstIndex(of: Int16(truncatingIfNeeded: index))
    }

    /// Whether every slot has a master (a cluster that reports `cluster_state:ok` has).
    public var coversEverySlot: Bool { !owners.contains(-1) }

    /// The slots `node` serves, as closed ranges in order.
    public func ranges(of node: RedisNodeAddress) -> [ClosedRange<Int>] {
        guard let index = masters.firstIndex(of: node) else { return [] }
        var found: [ClosedRange<Int>] = []
        var start: Int?
        for slot in 0...RedisHashSlot.count {
            let served = slot < RedisHashSlot.count && owners[slot] == Int16(index)
            if served, start == nil { start = slot }
            if !served, let first = start {
                found.append(first...(slot - 1))
                start = nil
            }
        }
        return found
    }

    /// `slots` are served by `node` from now on (a range of the reply, or a `MOVED` slot).
    public mutating func assign(_ slots: ClosedRange<Int>, to node: RedisNodeAddress) {
        let index: Int
        if let known = masters.firstIndex(of: node) {
            index = known
        } else {
            masters.append(node)
            index = masters.count - 1
        }
        let clamped = slots.clamped(to: 0...(RedisHashSlot.count - 1))
        // At most one entry per slot: the index always fits in Int16.
        for slot in clamped { owners[slot] = Int16(truncatingIfNeeded: index) }
    }
}
