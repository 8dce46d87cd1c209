import Foundation
import Glibc

@testable import FoldtableRedis

/// Three real `redis-server`s in cluster mode (Debian's), joined into one cluster with the
/// cluster's own commands (`CLUSTER ADDSLOTSRANGE`, `CLUSTER MEET`): each master serves a third
/// of the slots. Stopped with the servers.
final class RedisClusterServers: @unchecked Sendable {
    // @unchecked: used from the test's thread only.
    let servers: [RedisServer]
    /// A plain client per server, to set the cluster up and to look behind the client under test.
    let direct: [RedisClient]

    init(count: Int = 3) throws {
        var servers: [RedisServer] = []
        for _ in 0..<count {
            servers.append(
                try RedisServer(arguments: [
                    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
                    // A master that is down takes only its own slots out (the default stops the whole cluster).
                    "--cluster-require-full-coverage", "no",
                ]))
        }
        self.servers = servers
        direct = servers.map { server in
            var options = RedisClient.Options(url: server.url)
            options.commandTimeoutMs = 5_000
            return RedisClient(options)
        }
        let share = RedisHashSlot.count / count
        for (index, client) in direct.enumerated() {
            let last = index == count - 1 ? RedisHashSlot.count - 1 : (index + 1) * share - 1
            try expectOK(client, RedisCommand("CLUSTER", "ADDSLOTSRANGE", index * share, last))
        }
        for server in servers.dropFirst() { try expectOK(direct[0], RedisCommand("CLUSTER", "MEET", "127.0.0.1", server.port)) }
        try waitUntil("every node says cluster_state:ok, knows every other node and every slot's master") {
            try direct.allSatisfy { client in
                let info = try wait { client.send(RedisCommand("CLUSTER", "INFO"), completion: $0) }.get().string ?? ""
                // Gossip may make the state ok before each node has met every other: SETSLOT
                // naming a node not met yet fails with "Unknown node".
                let nodes = try wait { client.send(RedisCommand("CLUSTER", "NODES"), completion: $0) }.get().string ?? ""
                let known = nodes.split(separator: "\n").filter { !$0.contains("handshake") && !$0.contains("noaddr") }
                // With cluster-require-full-coverage no, "ok" does not mean this node has heard
                // of every other's slots yet: a map read from it then had a hole (a TSan run under
                // load failed on "no master serves hash slot 14598").
                return info.contains("cluster_state:ok") && info.contains("cluster_slots_assigned:\(RedisHashSlot.count)")
                    && known.count == count
            }
        }
    }

    deinit {
        for client in direct { client.close() }
    }

    var addresses: [RedisNodeAddress] { servers.map { RedisNodeAddress(host: "127.0.0.1", port: $0.port) } }

    func index(of node: RedisNodeAddress) -> Int? { addresses.firstIndex(of: node) }

    /// The node id of server `index` (`CLUSTER MYID`).
    func id(_ index: Int) throws -> String {
        try wait { direct[index].send(RedisCommand("CLUSTER", "MYID"), completion: $0) }.get().string ?? ""
    }

    /// A key whose slot server `index` serves, made from `prefix` (a hash tag, like a session's keys).
    func key(on index: Int, _ prefix: String) -> String {
        let share = RedisHashSlot.count / servers.count
        let range = index * share...(index == servers.count - 1 ? RedisHashSlot.count - 1 : (index + 1) * share - 1)
        for n in 0... {
            let key = "{\(prefix)\(n)}:k"
            if range.contains(RedisHashSlot.slot(of: key)) { return key }
        }
        fatalError("unreachable: some tag hashes into every third of the slots")
    }

    func expectOK(_ client: RedisClient, _ command: RedisCommand) throws {
        let reply = try wait { client.send(command, completion: $0) }.get()
        guard reply == .status("OK") else { throw RedisTestError("\(command.name) answered \(reply)") }
    }

    /// Moves `slot` from server `from` to server `to` the way `redis-cli --cluster reshard` does:
    /// IMPORTING on the target, MIGRATING on the source, `MIGRATE` of its keys, then `SETSLOT
    /// NODE` everywhere. `between` runs while the slot is migrating, before the keys move.
    func move(slot: Int, from: Int, to: Int, between: () throws -> Void = {}) throws {
        let target = try id(to)
        try expectOK(direct[to], RedisCommand("CLUSTER", "SETSLOT", slot, "IMPORTING", try id(from)))
        try expectOK(direct[from], RedisCommand("CLUSTER", "SETSLOT", slot, "MIGRATING", target))
        try between()
        let keys = try wait { direct[from].send(RedisCommand("CLUSTER", "GETKEYSINSLOT", slot, 1_000), completion: $0) }.get().elements ?? []
        if !keys.isEmpty {
            let migrate = RedisCommand(
                arguments: ["MIGRATE", "127.0.0.1", String(servers[to].port), "", "0", "5000", "KEYS"].map(\.redisBytes)
                    + keys.compactMap { if case .bulk(let bytes) = $0 { bytes } else { nil } })
            try expectOK(direct[from], migrate)
        }
        // The target first, then the source, then the rest, as redis-cli does.
        let order = [to, from] + direct.indices.filter({ $0 != to && $0 != from })
        for index in order { try expectOK(direct[index], RedisCommand("CLUSTER", "SETSLOT", slot, "NODE", target)) }
    }
}

/// Polls `condition` every 50 ms for up to `seconds`.
func waitUntil(_ what: String, seconds: Double = 20, _ condition: () throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return }
        usleep(50_000)
    }
    throw RedisTestError("not within \(seconds) s: \(what)")
}
