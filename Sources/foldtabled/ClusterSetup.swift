import FoldtableRedis
import FoldtableServer
import Glibc

/// `--redis` and `--node-id`: the broker through which this node shares its sessions.
enum ClusterSetup {
    /// The cluster of `config`, or `nil` without `--redis` (sessions are this node's own). The
    /// URL was read by the config check already.
    static func cluster(_ config: ServerConfig, transport: Transport) -> Cluster? {
        guard !config.redis.isEmpty, let url = try? RedisURL(parsing: config.redis) else { return nil }
        let node = config.nodeID.isEmpty ? hostNode() : config.nodeID
        var options = RedisClient.Options(url: url)
        options.clientName = "foldtabled-\(node)"
        let log = Log(level: config.logLevel)
        let queue = transport.serviceQueue
        let broker = RedisBroker(
            options, limits: config.tableLimits, post: { queue.post($0) },
            report: { event, fields in log(.warning, event, pairs: { fields }) },
            stateChanged: { state in
                switch state {
                case .connected: log(.info, "redis_connected", ["redis": "\(url)"])
                case .disconnected(let reason): log(.warning, "redis_disconnected", ["redis": "\(url)", "reason": reason])
                }
            })
        return Cluster(node: node, broker: broker)
    }

    /// The host name up to its first dot, as a node id (letters, digits, `_` and `-`).
    static func hostNode() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "node" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let first = name.split(separator: ".").first.map(String.init) ?? ""
        let cleaned = String(first.map { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" ? $0 : "-" }.prefix(64))
        return cleaned.isEmpty ? "node" : cleaned
    }
}
