/// Where the broker's commands go: one Redis (``RedisClient``) or a cluster's masters, each
/// command to the master of its keys' slot (``RedisClusterClient``). The broker, its presence
/// and its counts are written against this, so the same code runs on both.
protocol RedisCommands: Sendable {
    func send(_ command: RedisCommand, completion: @escaping RedisClient.Completion)
    /// One result per command, in order; one round trip per Redis they go to.
    func send(_ commands: [RedisCommand], completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void)
    /// Atomic on one Redis; under a cluster, atomic per hash slot (a transaction per slot).
    func transaction(_ commands: [RedisCommand], completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void)
    func evaluate(_ script: RedisScript, keys: [String], arguments: [any RedisArgument], completion: @escaping RedisClient.Completion)
    func close()
}

extension RedisClient: RedisCommands {}

extension RedisCommand {
    /// The hash slot of the command's first key: a script's first key, else the argument after
    /// the name (every command the broker sends names its key there; `XREAD` is sent per slot
    /// by the reader, not through this). 0 for a command without a key.
    var slot: Int {
        if script != nil {
            guard arguments.count > 1, arguments[0] != Array("0".utf8) else { return 0 }
            return RedisHashSlot.slot(of: arguments[1])
        }
        return arguments.count > 1 ? RedisHashSlot.slot(of: arguments[1]) : 0
    }
}

extension RedisClusterClient: RedisCommands {
    func send(_ command: RedisCommand, completion: @escaping RedisClient.Completion) {
        send(command, slot: command.slot, completion: completion)
    }

    func send(_ commands: [RedisCommand], completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        // Each command on its own route: one redirected is sent again alone, never the others.
        gather(commands.indices.map { [$0] }, count: commands.count, completion: completion) { indices, done in
            self.send(commands[indices[0]], slot: commands[indices[0]].slot) { done([$0]) }
        }
    }

    func transaction(_ commands: [RedisCommand], completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        var groups: [Int: [Int]] = [:]
        for (index, command) in commands.enumerated() { groups[command.slot, default: []].append(index) }
        gather(groups.values.sorted { $0[0] < $1[0] }, count: commands.count, completion: completion) { indices, done in
            self.transaction(indices.map { commands[$0] }, slot: commands[indices[0]].slot, completion: done)
        }
    }

    /// Runs `start` for each group of indices and hands `completion` every result in the
    /// original order once the last group answered.
    private func gather(
        _ groups: [[Int]], count: Int, completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void,
        start: (_ indices: [Int], _ done: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) -> Void
    ) {
        guard count > 0 else { return completion([]) }
        let collected = PipelineResults(count: count, completion: completion)
        for indices in groups {
            start(indices) { results in
                for (position, index) in indices.enumerated() {
                    collected.set(index, position < results.count ? results[position] : .failure(.closed))
                }
            }
        }
    }
}
