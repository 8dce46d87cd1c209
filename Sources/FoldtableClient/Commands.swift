import FoldtableCore

/// The script subcommands: everything but `join` and `help`. Each joins the session (`list`
/// only connects), does one thing, prints on stdout (text, or one JSON document with `--json`)
/// and exits with a status from ``Console/Status`` (one line on stderr when it is not 0).
public final class ScriptCommand {
    private let command: Command
    private let options: ConnectOptions
    private let connection: ClientConnection
    private var status = Console.Status.connection
    private var finished = false
    /// The id of the change this command sent, and what its event said.
    private var changeId: String?
    private var event: TableEvent?
    /// Events this connection's member authored since the change was sent, by seq: the ack's
    /// seq picks the change's own (events carry no change ids).
    private var ownEvents: [UInt64: TableEvent] = [:]
    /// The id of the find this command sent.
    private var findId: String?
    /// The id of the history request this command sent.
    private var historyId: String?

    private static let deadlineTimer: UInt64 = ClientConnection.firstUserTimer
    private static let stopTimer: UInt64 = ClientConnection.firstUserTimer + 1

    /// Runs `command` (anything but `join` and `help`) to the end; returns the exit status.
    public static func run(_ command: Command) -> Int32 {
        var options: ConnectOptions
        switch command {
        case .watch(let o), .get(let o, _), .list(let o), .find(let o, _, _), .history(let o, _), .options(let o), .undo(let o, _, _): options = o
        case .change(let o, _, _):
            // A change to a name that does not exist yet makes it (an owner's, as `join` does);
            // the commands that only read never leave a session behind.
            options = o
            options.create = true
        case .join, .help: return Console.Status.usage
        }
        let connection: ClientConnection
        do {
            if case .watch = command {
                connection = try ClientConnection(options: options, reconnects: true)
            } else {
                connection = try ClientConnection(options: options, reconnects: false)
            }
        } catch {
            Console.error(error.message)
            return Console.Status.usage
        }
        let script = ScriptCommand(command, options: options, connection: connection)
        return script.run()
    }

    private init(_ command: Command, options: ConnectOptions, connection: ClientConnection) {
        self.command = command
        self.options = options
        self.connection = connection
    }

    private func run() -> Int32 {
        connection.onUpdate = { [unowned self] update, line, _ in self.received(update, line: line) }
        connection.onStateChange = { [unowned self] state in self.stateChanged(state) }
        connection.onBadMessage = { error in Console.error("skipped a message from the server: \(error.message)") }
        if case .watch = command, let signals = Terminal.signalPipe() {
            // Interrupting watch is how it is meant to end: exit 0.
            connection.watch(signals) { [unowned self] in
                if !Terminal.pendingSignals(signals).isEmpty { self.finish(Console.Status.success) }
            }
        }
        connection.schedule(Self.deadlineTimer, afterMs: options.timeoutMs) { [unowned self] in
            let seconds = Double(self.options.timeoutMs) / 1_000
            self.finish(Console.Status.connection, error: "no answer from \(self.options.url) within \(seconds.formattedSeconds) s")
        }
        connection.start()
        connection.run()
        connection.shutdown()
        return status
    }

    private func stateChanged(_ state: ConnectionState) {
        switch state {
        case .failed(let reason):
            finish(Console.Status.connection, error: reason)
        case .joined:
            if case .watch = command { connection.cancel(Self.deadlineTimer) }
        default:
            break
        }
    }

    private func received(_ update: ServerUpdate, line: ArraySlice<UInt8>) {
        guard !finished else { return }
        if case .watch = command {
            if !Console.out(bytes: line) { finish(Console.Status.success) }  // stdout closed: nobody listens
            return
        }
        switch update {
        case .welcome:
            joined()
        case .sessions(let sessions):
            guard case .list = command else { return }
            finish(Console.Status.success, output: options.json ? Self.json(sessions) : Self.text(sessions))
        case .found(let id, let query, let matches, let truncated) where id != nil && id == findId:
            guard case .find(_, _, let limit) = command else { return }
            if options.json {
                finish(Console.Status.success, output: Self.json(query: query, matches, truncated: truncated))
            } else {
                let note = truncated ? "more rows match than the \(limit) shown (--limit N, up to \(RowSearch.maxLimit))" : nil
                finish(Console.Status.success, output: Self.text(matches), note: note)
            }
        case .history(let id, let events, let more) where id != nil && id == historyId:
            guard case .history(_, let limit) = command else { return }
            if options.json {
                finish(Console.Status.success, output: Self.json(events, more: more))
            } else {
                var titles: [String: String] = [:]
                for section in connection.replica.sections { titles[section.key] = section.title }
                let text = events.isEmpty ? nil : events.map { HistoryText.line($0, titles: titles) }.joined(separator: "\n")
                let note = more ? "older changes are kept than the \(limit) shown (--limit N, up to \(EventHistory.maxLimit))" : nil
                finish(Console.Status.success, output: text, note: note)
            }
        case .event(let event) where changeId != nil && event.author == connection.replica.me:
            ownEvents[event.seq] = event
        case .ack(let id, let seq) where id == changeId:
            // Its event came first, unless the change had been applied before (a repeated id).
            event = ownEvents[seq]
            acknowledged(id: id, seq: seq)
        case .error(let error) where error.id != nil && (error.id == changeId || error.id == findId || error.id == historyId):
            refuse(code: error.code, field: error.field, message: error.message)
        case .error(let error) where error.id == nil && connection.state == .joining:
            // The join (or the list) itself was refused, e.g. for a missing or expired token.
            let what = options.session.map { "join \($0)" } ?? "list the sessions"
            refuse(code: error.code, field: error.field, message: "the server refused to \(what): \(error.message)")
        default:
            break
        }
    }

    private func joined() {
        switch command {
        case .get(_, let byTitle):
            let sections = connection.replica.sections
            guard byTitle else {
                finish(Console.Status.success, output: Self.json(sections.map { ($0.key, $0.collapsed) }))
                return
            }
            var seen: Set<String> = []
            for section in sections where !seen.insert(section.title).inserted {
                refuse(
                    code: ProtocolError.Code.ambiguousTitle.rawValue, field: "title",
                    message: "several sections have the title \"\(section.title)\"; use keys (without --by-title)")
                return
            }
            finish(Console.Status.success, output: Self.json(sections.map { ($0.title, $0.collapsed) }))
        case .options:
            var out = JSONWriter(capacity: 160)
            TableSnapshot.encode(connection.replica.options, into: &out)
            finish(Console.Status.success, output: String(decoding: out.bytes, as: UTF8.self))
        case .find(_, let query, let limit):
            findId = connection.find(query, limit: limit)
        case .history(_, let limit):
            historyId = connection.history(before: nil, limit: limit)
        case .change(_, let change, let id):
            changeId = connection.send(change, id: id)
        case .undo(_, let redo, let id):
            changeId = connection.undo(redo: redo, id: id)
        case .watch, .list, .join, .help:
            break
        }
    }

    /// The change was applied (its event came first) or, when no event came, it had been applied
    /// before under the same id (`repeated`).
    private func acknowledged(id: String, seq: UInt64) {
        if case .undo = command { return undone(id: id, seq: seq) }
        guard case .change(_, let change, _) = command else { return }
        let repeated = event == nil
        let effects = event?.collapsed ?? []
        var key: String?
        switch event?.change ?? change {
        case .addSection(let section): key = section.key
        case .addRow(_, let row): key = row.key
        default: break
        }
        if options.json {
            var out = JSONWriter(capacity: 96 + effects.count * 24)
            out.raw("{\"seq\":")
            out.integer(seq)
            out.nextKey("id")
            out.string(id)
            out.nextKey("repeated")
            out.bool(repeated)
            out.nextKey("collapsed")
            Self.object(effects.map { ($0.key, $0.collapsed) }, into: &out)
            if let key {
                out.nextKey("key")
                out.string(key)
            }
            out.byte(UInt8(ascii: "}"))
            finish(Console.Status.success, output: String(decoding: out.bytes, as: UTF8.self))
            return
        }
        switch change {
        case .toggle, .setCollapsed, .setAll, .reveal:
            finish(Console.Status.success, output: Self.json(effects.map { ($0.key, $0.collapsed) }))
        case .addSection, .addRow:
            finish(Console.Status.success, output: key)
        default:
            finish(Console.Status.success)
        }
    }

    /// An undo or redo was applied as event `seq`: prints which change it took back (or made
    /// again), `{"seq":N,"id":ID,"repeated":false,"undid":M}` with `--json` (`"redid"` for a redo).
    private func undone(id: String, seq: UInt64) {
        guard case .undo(_, let redo, _) = command else { return }
        var of: UInt64?
        if case .undo(let undo)? = event?.change { of = undo.of }
        if options.json {
            var out = JSONWriter(capacity: 96)
            out.raw("{\"seq\":")
            out.integer(seq)
            out.nextKey("id")
            out.string(id)
            out.nextKey("repeated")
            out.bool(event == nil)
            if let of {
                if redo { out.nextKey("redid") } else { out.nextKey("undid") }
                out.integer(of)
            }
            out.byte(UInt8(ascii: "}"))
            return finish(Console.Status.success, output: String(decoding: out.bytes, as: UTF8.self))
        }
        let what = of.map { "change \($0)" } ?? "the change (done before, under this id)"
        finish(Console.Status.success, output: "\(redo ? "redid" : "undid") \(what) as change \(seq)")
    }

    /// The server (or the command, for an ambiguous `get --by-title`) refused: exit 1, the reason
    /// on stderr, and with `--json` the error on stdout too.
    private func refuse(code: String, field: String?, message: String) {
        guard options.json else {
            finish(Console.Status.refused, error: message)
            return
        }
        var out = JSONWriter(capacity: 96 + message.utf8.count)
        out.raw("{\"error\":{\"code\":")
        out.string(code)
        if let field {
            out.nextKey("field")
            out.string(field)
        }
        out.nextKey("message")
        out.string(message)
        out.raw("}}")
        finish(Console.Status.refused, output: String(decoding: out.bytes, as: UTF8.self), error: message)
    }

    /// Prints, then closes the connection politely and stops the loop once it is closed (or
    /// after a short grace when the server does not answer the close). `note` is a line on
    /// stderr that is not an error.
    private func finish(_ status: Int32, output: String? = nil, error: String? = nil, note: String? = nil) {
        guard !finished else { return }
        finished = true
        self.status = status
        if let output { Console.out(output) }
        if let error { Console.error(error) }
        if let note { Console.error(note) }
        connection.cancel(Self.deadlineTimer)
        connection.onSocketClosed = { [unowned self] in self.connection.stop() }
        connection.schedule(Self.stopTimer, afterMs: 1_000) { [unowned self] in self.connection.stop() }
        connection.close()
    }

    // MARK: - Output

    /// `{"name":true,...}` in the given order.
    static func json(_ members: [(String, Bool)]) -> String {
        var out = JSONWriter(capacity: 64 + members.count * 24)
        object(members, into: &out)
        return String(decoding: out.bytes, as: UTF8.self)
    }

    private static func object(_ members: [(String, Bool)], into out: inout JSONWriter) {
        out.byte(UInt8(ascii: "{"))
        for (index, (name, flag)) in members.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            out.string(name)
            out.byte(UInt8(ascii: ":"))
            out.bool(flag)
        }
        out.byte(UInt8(ascii: "}"))
    }

    /// `{"sessions":[{"name":"demo","members":2},...]}`.
    static func json(_ sessions: [ServerUpdate.SessionInfo]) -> String {
        var out = JSONWriter(capacity: 32 + sessions.count * 40)
        out.raw("{\"sessions\":")
        ServerMessage.encode(sessions: sessions.map { ($0.name, $0.members) }, into: &out)
        out.byte(UInt8(ascii: "}"))
        return String(decoding: out.bytes, as: UTF8.self)
    }

    /// One session a line: name, a tab, the member count. `nil` (no output) when there are none.
    static func text(_ sessions: [ServerUpdate.SessionInfo]) -> String? {
        sessions.isEmpty ? nil : sessions.map { "\(DisplayText.sanitize($0.name))\t\($0.members)" }.joined(separator: "\n")
    }

    /// `{"q":...,"rows":[{"section","row","label","value"},...],"truncated":false}`.
    static func json(query: String, _ matches: [RowSearch.Match], truncated: Bool) -> String {
        var out = JSONWriter(capacity: 64 + matches.count * 80)
        out.raw("{\"q\":")
        out.string(query)
        out.raw(",\"rows\":")
        RowSearch.Match.encode(matches, into: &out)
        out.nextKey("truncated")
        out.bool(truncated)
        out.byte(UInt8(ascii: "}"))
        return String(decoding: out.bytes, as: UTF8.self)
    }

    /// `{"events":[...],"more":BOOL}`: the page as the server sent it (see ``EventHistory``).
    static func json(_ events: [TableEvent], more: Bool) -> String {
        var out = JSONWriter(capacity: 32 + events.count * 160)
        out.raw("{\"events\":")
        EventHistory.encode(events, into: &out)
        out.nextKey("more")
        out.bool(more)
        out.byte(UInt8(ascii: "}"))
        return String(decoding: out.bytes, as: UTF8.self)
    }

    /// One row a line: row key, section key, label, value, separated by tabs (line breaks and
    /// tabs in the text become spaces, control characters `?`). `nil` when nothing matched.
    static func text(_ matches: [RowSearch.Match]) -> String? {
        func field(_ text: String) -> String {
            DisplayText.sanitize(text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).joined(separator: " "))
        }
        guard !matches.isEmpty else { return nil }
        return matches.map { [field($0.row), field($0.section), field($0.label), field($0.value)].joined(separator: "\t") }
            .joined(separator: "\n")
    }
}

extension Double {
    /// "10" for whole seconds, "2.5" otherwise.
    fileprivate var formattedSeconds: String {
        self == rounded() ? String(Int(self)) : String(self)
    }
}
