/// A Redis Cluster error reply that names where to go instead: the command did not run (the
/// shard asked does not serve its slot), so sending it again there is safe.
///
/// - `MOVED <slot> <host>:<port>`: the slot belongs to that node now; the slot map is stale.
/// - `ASK <slot> <host>:<port>`: the slot is being migrated and this key is already on that
///   node; ask it once (after `ASKING`), without changing the map.
public enum RedisRedirection: Equatable, Sendable {
    case moved(slot: Int, to: RedisNodeAddress)
    case ask(slot: Int, to: RedisNodeAddress)

    /// Reads an error reply's text; `nil` for any other error.
    public init?(_ message: String) {
        let parts = message.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 3, let slot = Int(parts[1]), slot >= 0, slot < RedisHashSlot.count,
            let node = RedisNodeAddress(parsing: String(parts[2]))
        else { return nil }
        switch parts[0] {
        case "MOVED": self = .moved(slot: slot, to: node)
        case "ASK": self = .ask(slot: slot, to: node)
        default: return nil
        }
    }
}

/// One node of a Redis Cluster: where to connect.
public struct RedisNodeAddress: Hashable, Sendable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `host:port`, or `[v6]:port`; also a bare IPv6 address with its port after the last colon,
    /// as Redis writes it in `MOVED` (`::1:7001`). `nil` without a valid port.
    public init?(parsing text: String) {
        let host: Substring
        let portText: Substring
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            portText = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard !host.isEmpty, let port = Int(portText), port > 0, port <= 65_535 else { return nil }
        self.init(host: String(host), port: port)
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}
