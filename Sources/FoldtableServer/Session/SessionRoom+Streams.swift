import FoldtableCore

// MARK: - Row streams and busy state

extension SessionRoom {
    /// Whether rows of section `key` are streaming (changes touching it wait for the stream).
    func isStreaming(_ key: String) -> Bool { streams[key] != nil }
    /// Whether any section's rows are streaming.
    var hasStreams: Bool { !streams.isEmpty }

    /// Streams an expanded section to `recipients` (the members that lack its rows).
    mutating func startStream(
        _ section: Section, seq: UInt64, to recipients: [Connection], now: UInt64, into effects: inout [SessionEffect]
    ) {
        if let running = streams[section.key] {
            // Changes touching a streaming section wait, so this should not happen; if it does,
            // the newer expansion replaces the older stream and its members move over.
            effects.append(.endStream(section: section.key))
            if running.busyArmed { effects.append(.cancelTimer(.busy(section: section.key, seq: running.seq))) }
            if running.deadlineArmed { effects.append(.cancelTimer(.streamDeadline(section: section.key, seq: running.seq))) }
        }
        var stream = Stream(seq: seq)
        // Still busy from a stream before (running, or its rows still on their way): it stays
        // busy, without a `false` and `true` between; the new stream's end decides.
        let tail = busyTails.removeValue(forKey: section.key)
        stream.busyShown = (streams[section.key]?.busyShown ?? false) || tail != nil
        for connection in recipients {
            stream.members[connection.id] = (connection, now)
            members[connection.id]?.streams.insert(section.key)
        }
        streams[section.key] = stream
        guard !recipients.isEmpty else {
            finishIfDone(section.key, into: &effects)
            return
        }
        // Busy first, when it is decided at the start: members hear it before the first chunk.
        armBusyAndDeadline(section, now: now, into: &effects)
        effects.append(.startStream(section, seq: seq, to: recipients))
    }

    /// Streams an expanded section to one member: into the stream already under way, or a new
    /// one at the committed sequence number.
    mutating func stream(_ section: Section, to connection: Connection, now: UInt64, into effects: inout [SessionEffect]) {
        // An empty section needs no rows: the member holds all of them (none) already.
        guard !section.rows.isEmpty else {
            members[connection.id]?.held.insert(section.key)
            return
        }
        members[connection.id]?.streams.insert(section.key)
        if let running = streams[section.key] {
            streams[section.key]?.members[connection.id] = (connection, now)
            effects.append(.joinStream(section: section.key, seq: running.seq, member: connection))
            return
        }
        var stream = Stream(seq: committed.seq)
        stream.busyShown = busyTails.removeValue(forKey: section.key) != nil
        stream.members[connection.id] = (connection, now)
        streams[section.key] = stream
        armBusyAndDeadline(section, now: now, into: &effects)
        effects.append(.startStream(section, seq: committed.seq, to: [connection]))
    }

    /// Shows `section` busy now, before its stream's first chunk, when the stream is expected to
    /// outlast the threshold (see ``outlastsBusyThreshold(_:)``); else arms the threshold's timer.
    private mutating func armBusyAndDeadline(_ section: Section, now: UInt64, into effects: inout [SessionEffect]) {
        let key = section.key
        guard let stream = streams[key] else { return }
        let options = committed.options
        // A table with `showBusyIndicator` off gets no timer and no `busy`: only the deadline.
        if options.showBusyIndicator {
            if options.busyThresholdMs == 0 || outlastsBusyThreshold(section) {
                showBusy(key, into: &effects)
            } else if !stream.busyShown && !stream.busyArmed {
                streams[key]?.busyArmed = true
                effects.append(.armTimer(.busy(section: key, seq: stream.seq), milliseconds: UInt64(options.busyThresholdMs)))
            }
        }
        armDeadline(key, now: now, into: &effects)
    }

    /// Whether streaming `section` is expected to outlast the table's busy threshold, so that it
    /// is shown busy from its start. A `busy` sent when the threshold's timer fires is queued
    /// behind every row already handed to a member's socket (the kernel takes megabytes): a slow
    /// reader would see it after its rows, and busy end as soon as it began. Only what the
    /// server can know at the start decides: a stream that fits one refill is handed to every
    /// member at once (it waits for no one); a larger one that the expected pace covers within
    /// the threshold keeps the threshold's timer (no flash of busy for a quick expansion).
    func outlastsBusyThreshold(_ section: Section) -> Bool {
        let threshold = committed.options.busyThresholdMs
        let (paced, overflow) = settings.streamExpectedBytesPerSec.multipliedReportingOverflow(by: max(0, threshold))
        let bound = max(settings.streamRefillBytes, overflow ? Int.max : paced / 1_000)
        // Counted only up to the bound: a section of a million rows needs no full sum.
        var bytes = 0
        for row in section.rows {
            bytes += RowStream.estimatedBytes(row)
            if bytes > bound { return true }
        }
        return false
    }

    /// Members must take a stream's rows within `streamTimeoutMs` of joining it: changes to the
    /// section wait for the stream, so one member that stops reading must not hold the session.
    private mutating func armDeadline(_ key: String, now: UInt64, into effects: inout [SessionEffect]) {
        guard let stream = streams[key], !stream.deadlineArmed, let earliest = stream.members.values.map(\.joinedAt).min() else { return }
        let due = earliest + settings.streamTimeoutMs
        streams[key]?.deadlineArmed = true
        effects.append(.armTimer(.streamDeadline(section: key, seq: stream.seq), milliseconds: due > now ? due - now : 0))
    }

    mutating func delivered(_ key: String, seq: UInt64, to connection: Connection, into effects: inout [SessionEffect]) {
        guard let stream = streams[key], stream.seq == seq, stream.members[connection.id] != nil else { return }
        streams[key]?.members[connection.id] = nil
        members[connection.id]?.streams.remove(key)
        members[connection.id]?.held.insert(key)
        if stream.busyShown && settings.busyAwaitsPeers {
            // Every chunk is queued, but a slow reader's last rows can sit megabytes deep in its
            // socket: busy must not end for the others before it has them.
            streams[key]?.flushing.insert(connection.id)
            effects.append(.awaitFlush(section: key, seq: seq, member: connection))
        }
        finishIfDone(key, into: &effects)
    }

    /// A member's peer took every row of the stream of `key` at `seq`: busy may end.
    mutating func flushed(_ key: String, seq: UInt64, to connection: Connection, into effects: inout [SessionEffect]) {
        if let stream = streams[key], stream.seq == seq {
            streams[key]?.flushing.remove(connection.id)
        } else if let tail = busyTails[key], tail.seq == seq, tail.members.contains(connection.id) {
            busyTails[key]?.members.remove(connection.id)
            endBusyTailIfDone(key, into: &effects)
        }
    }

    /// A member left: busy waits no longer for its rows to reach it.
    mutating func forgetFlushes(of connection: Connection, into effects: inout [SessionEffect]) {
        for key in streams.keys where streams[key]?.flushing.contains(connection.id) == true {
            streams[key]?.flushing.remove(connection.id)
        }
        for key in busyTails.keys.sorted() where busyTails[key]?.members.contains(connection.id) == true {
            busyTails[key]?.members.remove(connection.id)
            endBusyTailIfDone(key, into: &effects)
        }
    }

    private mutating func endBusyTailIfDone(_ key: String, into effects: inout [SessionEffect]) {
        guard let tail = busyTails[key], tail.members.isEmpty else { return }
        busyTails[key] = nil
        endBusy(key, into: &effects)
    }

    private mutating func endBusy(_ key: String, into effects: inout [SessionEffect]) {
        busySections.remove(key)
        effects.append(.broadcast(OutboundMessage(ServerMessage.busy(section: key, busy: false)), to: connections))
    }

    mutating func fire(_ timer: SessionTimer, now: UInt64, into effects: inout [SessionEffect]) {
        switch timer {
        case .busy(let key, let seq):
            guard let stream = streams[key], stream.seq == seq else { return }
            streams[key]?.busyArmed = false
            showBusy(key, into: &effects)
        case .presence:
            flushPresence(into: &effects)
        case .streamDeadline(let key, let seq):
            guard let stream = streams[key], stream.seq == seq else { return }
            streams[key]?.deadlineArmed = false
            for (id, member) in stream.members.sorted(by: { $0.key < $1.key }) where member.joinedAt + settings.streamTimeoutMs <= now {
                streams[key]?.members[id] = nil
                members[id]?.streams.remove(key)
                effects.append(.leaveStream(section: key, member: member.connection))
                effects.append(
                    .log(.info, "close", { [("client", "c\(id)"), ("code", String(CloseCode.slowConsumer)), ("reason", "row stream timeout")] }))
                effects.append(.close(member.connection, code: CloseCode.slowConsumer, reason: "too slow to take a row stream"))
            }
            if !finishIfDone(key, into: &effects) { armDeadline(key, now: now, into: &effects) }
        }
    }

    private mutating func showBusy(_ key: String, into effects: inout [SessionEffect]) {
        // `setOptions` waits for every stream, so the option cannot change under a running one;
        // checked here too so that no path can announce busy for a table that turned it off.
        guard let stream = streams[key], !stream.busyShown, committed.options.showBusyIndicator else { return }
        streams[key]?.busyShown = true
        busySections.insert(key)
        effects.append(.broadcast(OutboundMessage(ServerMessage.busy(section: key, busy: true)), to: connections))
        effects.append(.log(.info, "busy", { [("section", key)] }))
    }

    /// Ends the stream of `key` when no member is still receiving it; then waiting changes run.
    @discardableResult
    mutating func finishIfDone(_ key: String, into effects: inout [SessionEffect]) -> Bool {
        guard let stream = streams[key], stream.members.isEmpty else { return false }
        streams[key] = nil
        effects.append(.endStream(section: key))
        if stream.busyArmed { effects.append(.cancelTimer(.busy(section: key, seq: stream.seq))) }
        if stream.deadlineArmed { effects.append(.cancelTimer(.streamDeadline(section: key, seq: stream.seq))) }
        if stream.busyShown {
            // Changes to the section go on now; busy waits for rows still on their way.
            if stream.flushing.isEmpty {
                endBusy(key, into: &effects)
            } else {
                busyTails[key] = (stream.seq, stream.flushing)
            }
        }
        mayDrain = true
        return true
    }

    /// Ends every stream at once (a reload starts the table again), without telling members:
    /// each gets a fresh welcome next.
    mutating func endAllStreams(into effects: inout [SessionEffect]) {
        for (key, stream) in streams.sorted(by: { $0.key < $1.key }) {
            effects.append(.endStream(section: key))
            if stream.busyArmed { effects.append(.cancelTimer(.busy(section: key, seq: stream.seq))) }
            if stream.deadlineArmed { effects.append(.cancelTimer(.streamDeadline(section: key, seq: stream.seq))) }
        }
        streams.removeAll()
        busyTails.removeAll()
        busySections.removeAll()
    }
}
