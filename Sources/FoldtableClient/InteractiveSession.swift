import FoldtableCore
import Glibc

/// The full-screen client: draws the replica with ``TableScreen``, turns keys into changes and
/// redraws when anything arrives. Runs entirely on the connection's event loop (keys, signals
/// and the spinner are loop callbacks too), so there is nothing to lock.
///
/// Redraws write only the lines that changed since the last frame, in one `write`, so live
/// updates from others do not flicker.
public final class InteractiveSession {
    private enum Mode: Equatable {
        case browse
        case search(String)
        case edit(row: String, label: String, text: String)
        /// The session's latest changes instead of the table (`H`), newest first.
        case history
    }

    private let connection: ClientConnection
    private let terminal: Terminal
    private let color: Bool
    private var screen: TableScreen
    private var mode = Mode.browse
    private var keys = KeyDecoder()
    private var inputFD: Int32 = -1

    private var selection: TableLayout.Target?
    /// The selection's section and line, to fall back on when the selected item goes away.
    private var selectionSection: String?
    private var selectionLine = 0
    private var scrollTop = 0
    /// A row asked for with reveal: selected as soon as it is on screen.
    private var pendingReveal: String?
    private var lastSearch: String?
    /// The id of the server-side find asked for when the rows we have held no match.
    private var pendingFind: String?
    /// The id of the history page asked for with `H`, and the lines shown in history mode
    /// (newest first; live events are added on top as they come).
    private var pendingHistory: String?
    private var historyLines: [String] = []

    private var message: String?
    private var messageIsError = false
    private var previousFrame: [String] = []
    private var spinnerFrame = 0
    private var spinnerArmed = false
    private var fullScreen = false
    private var startFailure: String?
    /// The join itself was refused (a missing or expired token): exit 1, not 3, as the one-shot
    /// commands do (README's exit statuses).
    private var startRefusal: String?
    /// What each Enter on a section asked for (see ``CollapseIntents``).
    private var intents = CollapseIntents()
    private var quitting = false

    private static let spinnerTimer = ClientConnection.firstUserTimer
    private static let countdownTimer = ClientConnection.firstUserTimer + 1
    private static let stopTimer = ClientConnection.firstUserTimer + 2
    private static let drawTimer = ClientConnection.firstUserTimer + 3
    private var drawScheduled = false

    public init(connection: ClientConnection, terminal: Terminal, color: Bool) {
        self.connection = connection
        self.terminal = terminal
        self.color = color
        let size = terminal.size()
        self.screen = TableScreen(width: size.width, height: size.height, color: color)
    }

    /// Connects, runs until the user quits (or the first connection fails); returns the exit
    /// status. The terminal is restored before this returns, whatever happened.
    public func run() -> Int32 {
        connection.onUpdate = { [unowned self] update, _, note in self.received(update, note: note) }
        connection.onStateChange = { [unowned self] state in self.stateChanged(state) }
        connection.onBadMessage = { [unowned self] error in
            self.show("skipped a message the server sent: \(error.message)", error: true)
            self.scheduleDraw()
        }
        if let signals = Terminal.signalPipe() {
            connection.watch(signals) { [unowned self] in
                for signal in Terminal.pendingSignals(signals) { self.handle(signal: signal) }
            }
        }
        connection.start()
        connection.run()
        terminal.restore()
        connection.shutdown()
        if let startRefusal {
            Console.error(startRefusal)
            return Console.Status.refused
        }
        if let startFailure {
            Console.error(startFailure)
            return Console.Status.connection
        }
        return Console.Status.success
    }

    // MARK: - Connection

    private func stateChanged(_ state: ConnectionState) {
        switch state {
        case .joined:
            if !fullScreen { enterFullScreen() }
            if messageIsError { message = nil }
        case .failed(let reason):
            if !fullScreen {
                // Never got in: say why on the normal screen and exit.
                startFailure = reason
                connection.stop()
                return
            }
            show(reason, error: true)
        case .waiting(_, _, let reason):
            show(reason, error: true)
            connection.schedule(Self.countdownTimer, afterMs: 1_000) { [unowned self] in self.draw() }
        default:
            break
        }
        draw()
    }

    private func enterFullScreen() {
        fullScreen = true
        terminal.enter()
        // Keys are read from a duplicate of stdin: the loop closes what it watches on shutdown,
        // and the terminal must still be restorable through the original.
        inputFD = dup(terminal.inputFD)
        if inputFD >= 0 { connection.watch(inputFD) { [unowned self] in self.readInput() } }
        resize()
    }

    private func received(_ update: ServerUpdate, note: String?) {
        switch update {
        case .event(let event):
            if let note { show(note, error: false) }
            if mode == .history { historyLines.insert(HistoryText.line(event, titles: titles()), at: 0) }
        case .history(let id, let events, let more) where id != nil && id == pendingHistory:
            pendingHistory = nil
            historyLines = events.map { HistoryText.line($0, titles: titles()) }
            mode = .history
            show(more ? "older changes are kept too (foldtable history --limit N)" : "the whole history kept", error: false)
        case .error(let error):
            if error.id == nil && connection.state == .joining && !fullScreen {
                // The server's answer to the join (it closes the connection next): what to say.
                startRefusal = "the server refused to join \(connection.options.session ?? ""): \(error.message)"
            }
            show("refused: \(error.message)", error: true)
        case .welcome(let welcome):
            if welcome.recovered == false { show("rejoined: the session changed while you were away", error: false) }
            // A private view outlives a reconnect: asked for again, as it was.
            if let savedView { connection.sendNow(.view(private: true, collapsed: savedView)) }
        case .view, .viewChanged:
            savedView = connection.replica.isPrivate ? connection.replica.sections.map { CollapseEffect(key: $0.key, collapsed: $0.collapsed) } : nil
        case .found(let id, let query, let matches, _):
            guard id != nil, id == pendingFind else { break }
            pendingFind = nil
            guard let match = matches.first else {
                show("no match for \"\(query)\"", error: false)
                break
            }
            goTo(row: match.row, in: match.section)
            show("found \"\(query)\" in \(connection.replica.section(match.section)?.title ?? match.section)", error: false)
        default:
            break
        }
        scheduleDraw()
    }

    /// Draws soon, once for everything that arrives meanwhile: a large section arrives in many
    /// messages, and one frame per message would redraw far more often than anyone can see.
    private func scheduleDraw() {
        guard !drawScheduled else { return }
        drawScheduled = true
        connection.schedule(Self.drawTimer, afterMs: 15) { [unowned self] in
            self.drawScheduled = false
            self.draw()
        }
    }

    private func show(_ text: String, error: Bool) {
        message = text
        messageIsError = error
    }

    // MARK: - Input

    private func handle(signal: Int32) {
        switch signal {
        case SIGWINCH: resize()
        default: quit()
        }
    }

    private func readInput() {
        var buffer = [UInt8](repeating: 0, count: 1_024)
        let count = read(inputFD, &buffer, buffer.count)
        if count == 0 || (count < 0 && errno != EINTR && errno != EAGAIN) {
            quit()  // the terminal went away
            return
        }
        guard count > 0 else { return }
        for key in keys.feed(buffer[0..<count]) {
            guard !quitting else { return }
            handle(key)
        }
        draw()
    }

    private func handle(_ key: Key) {
        switch mode {
        case .browse: browse(key)
        case .search(let text):
            if let edited = edit(text, with: key) {
                mode = .search(edited)
            } else if key == .enter {
                mode = .browse
                lastSearch = text.isEmpty ? lastSearch : text
                if let query = lastSearch { search(query) }
            } else if key == .escape || key == .interrupt {
                mode = .browse
            }
        case .history:
            switch key {
            case .character("H"), .escape: mode = .browse
            case .character("q"), .interrupt, .endOfInput: quit()
            default: break
            }
        case .edit(let row, let label, let text):
            if let edited = edit(text, with: key) {
                mode = .edit(row: row, label: label, text: edited)
            } else if key == .enter {
                mode = .browse
                connection.send(.updateRow(row: row, patch: RowPatch(value: text)))
            } else if key == .escape || key == .interrupt {
                mode = .browse
            }
        }
    }

    /// Line editing shared by the search and value prompts: the new text, or `nil` when the
    /// key is not an editing key.
    private func edit(_ text: String, with key: Key) -> String? {
        switch key {
        case .character(let character): return text.utf8.count < 1_024 ? text + String(character) : text
        case .backspace: return String(text.dropLast())
        case .clearLine: return ""
        default: return nil
        }
    }

    private func browse(_ key: Key) {
        let layout = TableLayout(connection.replica)
        switch key {
        case .up, .character("k"): select(layout.target(-1, from: selection))
        case .down, .character("j"): select(layout.target(1, from: selection))
        case .pageUp:
            let line = (selection.flatMap { layout.line(of: $0) } ?? 0) - (screen.bodyHeight - 1)
            select(layout.target(atOrBeforeLine: max(0, line)) ?? layout.first)
        case .pageDown:
            let line = (selection.flatMap { layout.line(of: $0) } ?? 0) + (screen.bodyHeight - 1)
            select(layout.target(atOrAfterLine: line))
        case .home, .character("g"): select(layout.first)
        case .end, .character("G"): select(layout.last)
        case .enter, .character(" "):
            if let section = selectedSection(), let shown = connection.replica.section(section)?.collapsed {
                let collapsed = intents.target(for: section, shown: shown, unanswered: connection.isUnanswered)
                intents.record(section, id: connection.send(.setCollapsed(section: .key(section), collapsed: collapsed)), collapsed: collapsed)
            }
        case .left, .character("h"):
            if let section = selectedSection() {
                connection.send(.setCollapsed(section: .key(section), collapsed: true))
                select(.section(section))
            }
        case .right, .character("l"):
            if let section = selectedSection() { connection.send(.setCollapsed(section: .key(section), collapsed: false)) }
        case .character("e"): connection.send(.setAll(collapsed: false))
        case .character("c"): connection.send(.setAll(collapsed: true))
        case .character("/"): mode = .search("")
        case .character("n"):
            if let query = lastSearch { search(query) } else { show("no search yet: press / to search", error: false) }
        case .character("v"): startEditing()
        case .character("u"): connection.undo(redo: false)
        case .character("U"): connection.undo(redo: true)
        case .character("p"):
            // My own view and back: collapsing then changes only what this terminal shows.
            connection.sendNow(.view(private: !connection.replica.isPrivate, collapsed: nil))
        case .character("H"):
            // As many as the screen shows under its title line.
            if let id = connection.history(before: nil, limit: min(EventHistory.maxLimit, max(1, screen.bodyHeight - 1))) {
                pendingHistory = id
                show("loading the history…", error: false)
            } else {
                show("the history needs a connection", error: true)
            }
        case .character("r"): connection.retryNow()
        case .character("q"), .interrupt, .endOfInput: quit()
        case .redraw:
            previousFrame = []
            terminal.write("\u{1B}[2J")
        case .escape: message = nil
        default: break
        }
    }

    private func select(_ target: TableLayout.Target?) {
        guard let target else { return }
        selection = target
    }

    /// The section of the selected header or row.
    private func selectedSection() -> String? {
        switch selection {
        case .section(let key): return key
        case .row(let key): return connection.replica.sectionKey(ofRow: key)
        case nil: return nil
        }
    }

    private func startEditing() {
        guard case .row(let key) = selection, let sectionKey = connection.replica.sectionKey(ofRow: key),
            let section = connection.replica.section(sectionKey),
            let row = connection.replica.knownRows(of: section).first(where: { $0.key == key })
        else {
            show("select a row to edit its value", error: false)
            return
        }
        mode = .edit(row: key, label: row.label, text: row.value)
    }

    /// Selects the next header or row after the selection whose text contains `query` (case
    /// does not matter), wrapping around. A row in a collapsed section is revealed for everyone
    /// (that is what reveal is for) and selected when it shows.
    private func search(_ query: String) {
        let needle = query.lowercased()
        var candidates: [(target: TableLayout.Target, section: String, text: String)] = []
        for section in connection.replica.sections {
            candidates.append((.section(section.key), section.key, section.title))
            for row in connection.replica.knownRows(of: section) {
                candidates.append((.row(row.key), section.key, [row.label, row.value, row.detail ?? ""].joined(separator: "\u{1F}")))
            }
        }
        let start = candidates.firstIndex { $0.target == selection } ?? -1
        let count = candidates.count
        for step in 1...max(1, count) where count > 0 {
            let candidate = candidates[(start + step + count) % count]
            guard candidate.text.lowercased().contains(needle) else { continue }
            if case .row(let key) = candidate.target {
                goTo(row: key, in: candidate.section)
            } else {
                select(candidate.target)
            }
            show("found \"\(query)\"", error: false)
            return
        }
        // Rows of sections we never opened are on the server only: ask it.
        if connection.replica.sections.contains(where: { $0.rows == nil }), let id = connection.find(query, limit: 1) {
            pendingFind = id
            show("searching the server for \"\(query)\"…", error: false)
            return
        }
        show("no match for \"\(query)\"", error: false)
    }

    /// Selects a row; one in a collapsed section is revealed for everyone (that is what reveal
    /// is for) and selected when it shows.
    private func goTo(row key: String, in section: String) {
        if connection.replica.section(section)?.collapsed == true {
            connection.send(.reveal(row: key))
            pendingReveal = key
            select(.section(section))
        } else {
            select(.row(key))
        }
    }

    /// Section key -> title, for history lines.
    private func titles() -> [String: String] {
        var titles: [String: String] = [:]
        for section in connection.replica.sections { titles[section.key] = section.title }
        return titles
    }

    private func quit() {
        guard !quitting else { return }
        quitting = true
        connection.onSocketClosed = { [unowned self] in self.connection.stop() }
        connection.schedule(Self.stopTimer, afterMs: 500) { [unowned self] in self.connection.stop() }
        connection.close()
    }

    // MARK: - Drawing

    private func resize() {
        guard fullScreen else { return }
        let size = terminal.size()
        screen = TableScreen(width: size.width, height: size.height, color: color)
        previousFrame = []
        terminal.write("\u{1B}[2J")
        draw()
    }

    private func draw() {
        guard fullScreen, !quitting else { return }
        let replica = connection.replica
        let layout = TableLayout(replica)
        if let reveal = pendingReveal, layout.line(of: .row(reveal)) != nil {
            selection = .row(reveal)
            pendingReveal = nil
        }
        if let current = selection, layout.line(of: current) == nil {
            // The selected item went away (collapsed, removed): its section, or what is now there.
            if let section = selectionSection, layout.line(of: .section(section)) != nil {
                selection = .section(section)
            } else {
                selection = layout.target(atOrAfterLine: selectionLine)
            }
        }
        if selection == nil { selection = layout.first }
        if let current = selection, let line = layout.line(of: current) {
            selectionLine = line
            selectionSection = layout.line(line).section
        }
        scrollTop = screen.scroll(scrollTop, toShow: selection, in: layout)

        let busy = replica.sections.contains(where: \.busy)
        if busy && !spinnerArmed {
            spinnerArmed = true
            connection.schedule(Self.spinnerTimer, afterMs: 100) { [unowned self] in
                self.spinnerArmed = false
                self.spinnerFrame += 1
                self.draw()
            }
        }
        var frame = screen.render(
            replica, layout: layout, selection: selection, scrollTop: scrollTop, status: status(), spinnerFrame: spinnerFrame)
        if mode == .history {
            // The body's lines give way to the history; the message and status lines stay.
            let lines = [" History, newest first (H or Esc: back to the table)"] + historyLines.map { " " + $0 }
            for index in 0..<min(screen.bodyHeight, frame.count) {
                frame[index] = DisplayText.fit(index < lines.count ? lines[index] : "", to: screen.width)
            }
        }
        var out = ""
        for (index, line) in frame.enumerated() where index >= previousFrame.count || previousFrame[index] != line {
            out += "\u{1B}[\(index + 1);1H" + line + (color ? "\u{1B}[0m" : "")
        }
        if !out.isEmpty { terminal.write(out) }
        previousFrame = frame
    }

    /// This member's private view as last told, to ask for again after a reconnect (`nil`: shared).
    private var savedView: [CollapseEffect]?

    private func status() -> TableScreen.Status {
        var prompt: String?
        switch mode {
        case .browse: break
        case .search(let text): prompt = "/" + text
        case .edit(_, let label, let text): prompt = "value of \(label): " + text
        case .history: break
        }
        let connectionText: String
        var healthy = false
        switch connection.state {
        case .connecting(let attempt): connectionText = attempt == 0 ? "connecting…" : "reconnecting…"
        case .joining: connectionText = "joining…"
        case .joined:
            // Which view this is, always: the keys change what they mean with it.
            connectionText = connection.replica.isPrivate ? "connected · my view (p: shared)" : "connected · shared view"
            healthy = true
        case .waiting(let retryAt, _, _):
            let now = ClientConnection.nowMs()
            let seconds = retryAt > now ? (retryAt - now + 999) / 1_000 : 0
            connectionText = "offline, retrying in \(seconds) s (r: now)"
            if seconds > 0 {
                connection.schedule(Self.countdownTimer, afterMs: 1_000) { [unowned self] in self.draw() }
            }
        case .failed: connectionText = "disconnected (q: quit)"
        case .closed: connectionText = "closed"
        }
        return TableScreen.Status(
            connection: connectionText, healthy: healthy, message: message, messageIsError: messageIsError, prompt: prompt,
            unsent: connection.unanswered)
    }
}
