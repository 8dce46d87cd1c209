import FoldtableRedis
import FoldtableServer
import Glibc

/// `--redis` (or `--redis-cluster`) and `--node-id`: the broker through which this node shares its sessions.
enum ClusterSetup {
    /// The cluster of `config`, or `nil` without `--redis` or `--redis-cluster` (sessions are
    /// this node's own). The URL or nodes were read by the config check already.
    static func cluster(_ config: ServerConfig, transport: Transport) -> Cluster? {
        let node = config.nodeID.isEmpty ? hostNode() : config.nodeID
        let log = Log(level: config.logLevel)
        let queue = transport.serviceQueue
        let report: @Sendable (String, [(String, String)]) -> Void = { event, fields in log(.warning, event, pairs: { fields }) }
        // One line per transition of the broker (its connections up, or not), never per attempt.
        let changed: @Sendable (String, RedisClient.State) -> Void = { redis, state in
            switch state {
            case .connected: log(.info, "redis_connected", ["redis": redis])
            case .disconnected(let reason): log(.warning, "redis_disconnected", ["redis": redis, "reason": reason])
            }
        }
        if !config.redisCluster.isEmpty, var options = try? RedisClusterClient.Options(parsing: config.redisCluster) {
            options.node.clientName = "foldtabled-\(node)"
            let seeds = "cluster " + options.seeds.map(\.description).joined(separator: ",")
            let broker = RedisBroker(
                cluster: options, limits: config.tableLimits, post: { queue.post($0) }, report: report, stateChanged: { changed(seeds, $0) })
            return Cluster(node: node, broker: broker)
        }
        guard !config.redis.isEmpty, let url = try? RedisURL(parsing: config.redis) else { return nil }
        var options = RedisClient.Options(url: url)
        options.clientName = "foldtabled-\(node)"
        let broker = RedisBroker(
            options, limits: config.tableLimits, post: { queue.post($0) }, report: report, stateChanged: { changed("\(url)", $0) })
        return Cluster(node: node, broker: broker)
    }

    /// The broker's connection state and failures on `/metrics`.
    static func register(_ cluster: Cluster, metrics: Metrics) {
        guard let broker = cluster.broker as? RedisBroker else { return }
        metrics.gauge("foldtable_redis_connected", "1 while both Redis connections are up (else shared sessions are read-only).") {
            broker.isAvailable ? 1 : 0
        }
        metrics.counter("foldtable_redis_reconnects_total", "Times Redis became reachable again after an outage.") {
            Double(broker.counters.reconnects)
        }
        metrics.counter("foldtable_redis_failed_appends_total", "Appends to a session's stream that failed.") {
            Double(broker.counters.failedAppends)
        }
        metrics.counter("foldtable_redis_failed_reads_total", "Reads of the streams, opens and resumes that failed.") {
            Double(broker.counters.failedReads)
        }
        metrics.counter("foldtable_redis_dropped_entries_total", "Stream entries that did not decode (dropped on every node).") {
            Double(broker.counters.droppedEntries)
        }
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
