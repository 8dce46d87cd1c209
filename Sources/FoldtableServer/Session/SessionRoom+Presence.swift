import FoldtableCore

// MARK: - Presence

extension SessionRoom {
    /// A join, leave or rename happened: the diff goes out now or when the interval ends.
    mutating func presenceChanged(into effects: inout [SessionEffect]) {
        if !presenceComplete { presenceListExact = false }
        if settings.presenceIntervalMs == 0 {
            flushPresence(into: &effects)
        } else if !presenceArmed {
            presenceArmed = true
            effects.append(.armTimer(.presence, milliseconds: presenceGatherMs))
        }
    }

    /// How long joins, leaves and renames gather before one diff goes to every member: the
    /// configured interval, and in a session of more than 1,000 members (on every node) one
    /// interval more per 1,000 beyond, at most 500 ms (never below the configured value).
    /// Every diff goes to all M members of a node, so at a fixed interval a crowd of M arriving
    /// over T seconds cost M·T/interval messages (60,000 members over four nodes spent most of
    /// their join time on presence); this way a member of a large session gets at most about
    /// two presence messages a second, and a count that changed on another node still shows
    /// within about two presence heartbeats plus half a second. Counted over the whole session,
    /// not this node's part: members spread thin over many nodes see remote counts change too.
    var presenceGatherMs: UInt64 {
        let configured = settings.presenceIntervalMs
        let intervals = UInt64(max(0, clusterMemberCount - 1) / 1000 + 1)
        return max(configured, min(configured.multipliedReportingOverflow(by: intervals).partialValue, 500))
    }

    /// Sends one diff of what changed since the last to every member.
    mutating func flushPresence(into effects: inout [SessionEffect]) {
        presenceArmed = false
        defer {
            presenceJoined.removeAll()
            presenceRenamed.removeAll()
            presenceLeft.removeAll()
            presenceRemoteJoined.removeAll()
            presenceRemoteRenamed.removeAll()
            presenceRemoteCounted = false
        }
        guard !connections.isEmpty,
            !(presenceJoined.isEmpty && presenceRenamed.isEmpty && presenceLeft.isEmpty && presenceRemoteJoined.isEmpty
                && presenceRemoteRenamed.isEmpty && !presenceRemoteCounted)
        else { return }
        // Someone who joined and left within the interval is not listed as joined, but as left:
        // a welcome sent meanwhile may have listed them.
        let joined = presenceJoined.compactMap { members[$0]?.author } + presenceRemoteJoined
        let diff: PresenceDiff
        if !presenceComplete {
            diff = PresenceDiff(count: clusterMemberCount, complete: false, joined: Array(joined.prefix(PresenceDiff.sampleLimit)))
        } else if !presenceListExact {
            presenceListExact = true
            diff = PresenceDiff(count: clusterMemberCount, complete: true, members: listedMembers())
        } else {
            let fresh = Set(presenceJoined)
            var seen: Set<UInt64> = []
            let renamed = presenceRenamed.filter { !fresh.contains($0) && seen.insert($0).inserted }.compactMap { members[$0]?.author }
            diff = PresenceDiff(
                count: clusterMemberCount, complete: true, joined: joined, renamed: renamed + presenceRemoteRenamed, left: presenceLeft)
        }
        effects.append(.broadcast(OutboundMessage(diff.encoded), to: connections))
    }

    /// Whether members may hold every member's name: the whole cluster is within the list
    /// maximum and every other node listed all of its own.
    var presenceComplete: Bool { clusterMemberCount <= settings.presenceListMax && remoteExact }

    /// Who a welcome or a full list names: this node's members in join order, then other nodes'
    /// (node by node, as they list them), at most `presenceListMax` in all.
    func listedMembers() -> [Author] {
        var listed = localPresence.first
        for node in remote where listed.count < settings.presenceListMax {
            listed.append(contentsOf: node.members.prefix(settings.presenceListMax - listed.count))
        }
        return listed
    }

    /// Other nodes' members changed (a heartbeat read a new version, or a node expired or left):
    /// who joined, left or was renamed there goes into the next diff like a local change. Costs
    /// the names other nodes list (at most `presenceListMax` each), never the members they hold.
    mutating func remotePresence(_ nodes: [NodePresence], into effects: inout [SessionEffect]) {
        let fresh = nodes.filter { $0.count > 0 && $0.node != node }.sorted { $0.node < $1.node }
        guard fresh != remote else { return }
        var before: [String: String] = [:]
        for node in remote {
            for author in node.members { before[author.client] = author.name }
        }
        var present: Set<String> = []
        var joined: [Author] = []
        var renamed = false
        for node in fresh {
            for author in node.members {
                present.insert(author.client)
                guard let name = before[author.client] else {
                    joined.append(author)
                    continue
                }
                guard name != author.name else { continue }
                renamed = true
                if let index = presenceRemoteJoined.firstIndex(where: { $0.client == author.client }) {
                    presenceRemoteJoined[index] = author
                } else {
                    presenceRemoteRenamed.removeAll { $0.client == author.client }
                    presenceRemoteRenamed.append(author)
                }
            }
        }
        var gone: [String] = []
        for node in remote {
            for author in node.members where !present.contains(author.client) { gone.append(author.client) }
        }
        let countBefore = remoteCount
        remote = fresh
        remoteCount = fresh.reduce(0) { $0 + $1.count }
        remoteExact = fresh.allSatisfy(\.isExact)
        presenceRemoteJoined.append(contentsOf: joined)
        if !gone.isEmpty {
            let left = Set(gone)
            presenceRemoteJoined.removeAll { left.contains($0.client) }
            presenceRemoteRenamed.removeAll { left.contains($0.client) }
            presenceLeft.append(contentsOf: gone)
        }
        let counted = remoteCount != countBefore
        if counted { presenceRemoteCounted = true }
        guard counted || renamed || !joined.isEmpty || !gone.isEmpty else { return }
        presenceChanged(into: &effects)
    }
}
