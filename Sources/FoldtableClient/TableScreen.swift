import FoldtableCore

/// Draws a replica as exactly `height` lines of exactly `width` columns. Pure: the interactive
/// client writes what this returns, tests compare it with snapshots.
///
/// Layout: the table body, then a message line (the last event, an error, or the prompt being
/// typed), then the status line (connection state, session, who is here). The cursor line is
/// marked with "›" in the first column, so it shows without colour too; with colour it is also
/// drawn in reverse video. Nothing here prints a control character the server sent: every text
/// goes through ``DisplayText/sanitize(_:)``.
public struct TableScreen: Sendable {
    /// What the two bottom lines say.
    public struct Status: Equatable, Sendable {
        /// "connected", "connecting…", "reconnecting in 3 s"...
        public var connection: String
        /// Shown in green when true, red when false (with colour).
        public var healthy: Bool
        /// The last thing that happened, or an error.
        public var message: String?
        public var messageIsError: Bool
        /// While typing a search or a value: the prompt and the text so far.
        public var prompt: String?
        /// Changes not yet acknowledged by the server.
        public var unsent: Int

        public init(
            connection: String, healthy: Bool, message: String? = nil, messageIsError: Bool = false, prompt: String? = nil, unsent: Int = 0
        ) {
            self.connection = connection
            self.healthy = healthy
            self.message = message
            self.messageIsError = messageIsError
            self.prompt = prompt
            self.unsent = unsent
        }
    }

    public var width: Int
    public var height: Int
    /// ANSI styles (bold, dim, reverse, colours); off with `NO_COLOR`.
    public var color: Bool

    /// Spinner frames for busy headers, one per tick.
    public static let spinnerFrames = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"]

    public init(width: Int, height: Int, color: Bool) {
        self.width = max(1, width)
        self.height = max(3, height)
        self.color = color
    }

    /// Lines available to the table.
    public var bodyHeight: Int { height - 2 }

    /// The scroll position (first body line shown) that keeps all of `target` on screen,
    /// moving as little as possible from `scrollTop`, and never past the end.
    public func scroll(_ scrollTop: Int, toShow target: TableLayout.Target?, in layout: TableLayout) -> Int {
        var top = scrollTop
        if let target, let first = layout.line(of: target) {
            let last = first + min(layout.height(of: target), bodyHeight) - 1
            if first < top { top = first }
            if last >= top + bodyHeight { top = last - bodyHeight + 1 }
        }
        return max(0, min(top, layout.lineCount - bodyHeight))
    }

    /// The whole screen.
    public func render(
        _ replica: SessionReplica, layout: TableLayout, selection: TableLayout.Target?, scrollTop: Int, status: Status, spinnerFrame: Int
    ) -> [String] {
        let countWidth = replica.sections.map { String($0.rowCount).count }.max() ?? 1
        var out: [String] = []
        out.reserveCapacity(height)
        for index in scrollTop..<(scrollTop + bodyHeight) {
            guard index >= 0 && index < layout.lineCount else {
                out.append(String(repeating: " ", count: width))
                continue
            }
            let line = layout.line(index)
            let selected = selection != nil && line.target == selection
            out.append(body(line, replica: replica, selected: selected, countWidth: countWidth, spinnerFrame: spinnerFrame))
        }
        out.append(messageLine(status))
        out.append(statusLine(status, replica: replica))
        return out
    }

    // MARK: - Body lines

    private func body(_ line: TableLayout.Line, replica: SessionReplica, selected: Bool, countWidth: Int, spinnerFrame: Int) -> String {
        guard let section = replica.section(line.section) else { return String(repeating: " ", count: width) }
        let isFirstLine: Bool
        if case .header(let number, _) = line.content { isFirstLine = number == 0 } else { isFirstLine = line.content.isRow }
        let marker = Segment(selected && isFirstLine ? "› " : "  ")
        var left = [marker]
        var right: [Segment] = []
        switch line.content {
        case .header(let number, let text):
            let indicator = section.collapsed ? replica.options.collapsedIndicator : replica.options.expandedIndicator
            let indicatorText = DisplayText.sanitize(indicator)
            // Continuation lines of a title line up under its first line's text.
            left.append(Segment(number == 0 ? indicatorText + " " : String(repeating: " ", count: DisplayText.width(indicatorText) + 1)))
            left.append(Segment(DisplayText.sanitize(text), .bold, flexible: true))
            if number == 0 {
                if section.busy && replica.options.showBusyIndicator {
                    let frame = Self.spinnerFrames[((spinnerFrame % Self.spinnerFrames.count) + Self.spinnerFrames.count) % Self.spinnerFrames.count]
                    right.append(Segment(frame + " ", .yellow))
                }
                if let detail = section.detail, !detail.isEmpty {
                    right.append(Segment(DisplayText.sanitize(oneLine(detail)), .dim, droppable: true))
                    right.append(Segment("  ", droppable: true))
                }
                let count = String(section.rowCount)
                right.append(Segment(String(repeating: " ", count: max(0, countWidth - count.count)) + count, .dim))
            }
        case .row(let row):
            left.append(Segment("    "))
            left.append(Segment(DisplayText.sanitize(oneLine(row.label)), flexible: true))
            if let detail = row.detail, !detail.isEmpty {
                left.append(Segment("  " + DisplayText.sanitize(oneLine(detail)), .dim, flexible: true, droppable: true))
            }
            let value = DisplayText.sanitize(oneLine(row.value))
            if !value.isEmpty { right.append(Segment(DisplayText.truncate(value, to: max(1, width / 2)))) }
        case .loading(let arrived, let total):
            left.append(Segment("    "))
            left.append(Segment(arrived > 0 ? "loading rows… \(arrived) of \(total)" : "loading rows…", .dim, flexible: true))
        case .noRows:
            left.append(Segment("    "))
            left.append(Segment("no rows", .dim, flexible: true))
        case .footer(let text):
            left.append(Segment("    "))
            left.append(Segment(DisplayText.sanitize(text), .dim, flexible: true))
        }
        return compose(left, right, reverse: selected)
    }

    private func oneLine(_ text: String) -> String {
        text.contains("\n") ? text.split(separator: "\n", omittingEmptySubsequences: false).joined(separator: " ") : text
    }

    // MARK: - Bottom lines

    private func messageLine(_ status: Status) -> String {
        if let prompt = status.prompt {
            return compose([Segment(DisplayText.sanitize(prompt), flexible: true), Segment("█")], [], reverse: false, keepTail: true)
        }
        guard let message = status.message else { return String(repeating: " ", count: width) }
        return compose([Segment(" " + DisplayText.sanitize(message), status.messageIsError ? .red : .none, flexible: true)], [], reverse: false)
    }

    private func statusLine(_ status: Status, replica: SessionReplica) -> String {
        let names = replica.presence.map { DisplayText.sanitize($0.name) }
        var left = [
            Segment(" ● ", status.healthy ? .green : .red),
            Segment(status.connection),
        ]
        if let session = replica.session {
            left.append(Segment("  \(DisplayText.sanitize(session))"))
            let here =
                replica.presenceIsComplete
                ? "  \(names.count) here: " + names.joined(separator: ", ")
                : "  \(replica.presenceCount) here, including " + names.suffix(5).joined(separator: ", ")
            left.append(Segment(here, flexible: true, droppable: true))
        }
        if status.unsent > 0 { left.insert(Segment("  \(status.unsent) unsent", .yellow), at: 2) }
        let right = [Segment("↑↓ move  ⏎ toggle  e/c all  / find  v edit  q quit ", droppable: true)]
        return compose(left, right, reverse: true)
    }

    // MARK: - Composition

    private enum Style {
        case none, bold, dim, yellow, red, green

        var on: String {
            switch self {
            case .none: return ""
            case .bold: return "\u{1B}[1m"
            case .dim: return "\u{1B}[2m"
            case .yellow: return "\u{1B}[33m"
            case .red: return "\u{1B}[31m"
            case .green: return "\u{1B}[32m"
            }
        }

        // Specific resets, so a reverse-video line stays reversed after a styled segment.
        var off: String {
            switch self {
            case .none: return ""
            case .bold, .dim: return "\u{1B}[22m"
            case .yellow, .red, .green: return "\u{1B}[39m"
            }
        }
    }

    private struct Segment {
        var text: String
        var style: Style
        /// May be cut short (with "…") when the line is too narrow.
        var flexible: Bool
        /// May be left out entirely when the line is too narrow.
        var droppable: Bool

        init(_ text: String, _ style: Style = .none, flexible: Bool = false, droppable: Bool = false) {
            self.text = text
            self.style = style
            self.flexible = flexible
            self.droppable = droppable
        }

        var width: Int { DisplayText.width(text) }
    }

    /// Left segments, then spaces, then right segments: exactly `width` columns. When it does
    /// not fit, droppable segments go first (right side first), then flexible ones are cut.
    /// `keepTail` cuts the start of a flexible segment instead of its end (a prompt being
    /// typed: the end is what matters).
    private func compose(_ leftIn: [Segment], _ rightIn: [Segment], reverse: Bool, keepTail: Bool = false) -> String {
        var left = leftIn
        var right = rightIn
        func total() -> Int { left.reduce(0) { $0 + $1.width } + right.reduce(0) { $0 + $1.width } + (right.isEmpty ? 0 : 1) }
        while total() > width, let drop = right.firstIndex(where: \.droppable) { right.remove(at: drop) }
        while total() > width, let drop = left.lastIndex(where: \.droppable) { left.remove(at: drop) }
        if total() > width {
            // Cut flexible segments, the last first.
            for index in left.indices.reversed() where left[index].flexible && total() > width {
                let excess = total() - width
                let keep = max(0, left[index].width - excess)
                if keepTail {
                    var tail = ""
                    var used = 0
                    for character in left[index].text.reversed() {
                        let next = DisplayText.width(character)
                        if used + next > max(0, keep - 1) { break }
                        tail.insert(character, at: tail.startIndex)
                        used += next
                    }
                    left[index].text = keep > 0 ? "…" + tail : ""
                } else {
                    left[index].text = DisplayText.truncate(left[index].text, to: keep)
                }
            }
        }
        if total() > width {
            // Still too wide (a very narrow terminal): cut the whole line plainly.
            let plain = (left + right).map(\.text).joined(separator: " ")
            let cut = DisplayText.fit(plain, to: width)
            return color && reverse ? "\u{1B}[7m" + cut + "\u{1B}[27m" : cut
        }
        let gap = width - left.reduce(0) { $0 + $1.width } - right.reduce(0) { $0 + $1.width }
        var out = color && reverse ? "\u{1B}[7m" : ""
        for segment in left { out += styled(segment) }
        out += String(repeating: " ", count: max(0, gap))
        for segment in right { out += styled(segment) }
        if color && reverse { out += "\u{1B}[27m" }
        return out
    }

    private func styled(_ segment: Segment) -> String {
        guard color, segment.style != .none, !segment.text.isEmpty else { return segment.text }
        return segment.style.on + segment.text + segment.style.off
    }
}

extension TableLayout.Content {
    fileprivate var isRow: Bool {
        if case .row = self { return true }
        return false
    }
}
