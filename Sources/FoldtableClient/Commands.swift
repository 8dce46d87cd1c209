import FoldtableCore

/// The script subcommands: `watch`, `get`, `toggle`/`expand`/`collapse` and
/// `expand-all`/`collapse-all`. Each joins the session, does one thing, prints JSON on stdout
/// and exits with a status from ``Console/Status`` (one line on stderr when it is not 0).
public final class ScriptCommand {
    private let command: Command
    private let options: ConnectOptions
    private let connection: ClientConnection
    private var status = Console.Status.connection
    private var finished = false
    /// The id of the change this command sent, and what its event changed.
    private var changeId: String?
    private var effects: [CollapseEffect] = []

    private static let deadlineTimer: UInt64 = ClientConnection.firstUserTimer
    private static let stopTimer: UInt64 = ClientConnection.firstUserTimer + 1

    /// Runs `command` (anything but `join` and `help`) to the end; returns the exit status.
    public static func run(_ command: Command) -> Int32 {
        let options: ConnectOptions
        switch command {
        case .watch(let o), .get(let o, _), .section(let o, _, _), .setAll(let o, _): options = o
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
        case .event(let event) where event.changeId != nil && event.changeId == changeId:
            effects = event.collapsed
        case .ack(let id, _) where id == changeId:
            finish(Console.Status.success, output: Self.json(effects.map { ($0.key, $0.collapsed) }))
        case .error(let error) where error.id != nil && error.id == changeId:
            finish(Console.Status.refused, error: error.message)
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
                finish(Console.Status.refused, error: "several sections have the title \"\(section.title)\"; use keys (without --by-title)")
                return
            }
            finish(Console.Status.success, output: Self.json(sections.map { ($0.title, $0.collapsed) }))
        case .section(_, let action, let ref):
            switch action {
            case .toggle: changeId = connection.send(.toggle(section: ref))
            case .expand: changeId = connection.send(.setCollapsed(section: ref, collapsed: false))
            case .collapse: changeId = connection.send(.setCollapsed(section: ref, collapsed: true))
            }
        case .setAll(_, let collapsed):
            changeId = connection.send(.setAll(collapsed: collapsed))
        case .watch, .join, .help:
            break
        }
    }

    /// Prints, then closes the connection politely and stops the loop once it is closed (or
    /// after a short grace when the server does not answer the close).
    private func finish(_ status: Int32, output: String? = nil, error: String? = nil) {
        guard !finished else { return }
        finished = true
        self.status = status
        if let output { Console.out(output) }
        if let error { Console.error(error) }
        connection.cancel(Self.deadlineTimer)
        connection.onSocketClosed = { [unowned self] in self.connection.stop() }
        connection.schedule(Self.stopTimer, afterMs: 1_000) { [unowned self] in self.connection.stop() }
        connection.close()
    }

    /// `{"name":true,...}` in the given order.
    static func json(_ members: [(String, Bool)]) -> String {
        var out = JSONWriter(capacity: 64 + members.count * 24)
        out.byte(UInt8(ascii: "{"))
        for (index, (name, flag)) in members.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            out.string(name)
            out.byte(UInt8(ascii: ":"))
            out.bool(flag)
        }
        out.byte(UInt8(ascii: "}"))
        return String(decoding: out.bytes, as: UTF8.self)
    }
}

extension Double {
    /// "10" for whole seconds, "2.5" otherwise.
    fileprivate var formattedSeconds: String {
        self == rounded() ? String(Int(self)) : String(self)
    }
}
