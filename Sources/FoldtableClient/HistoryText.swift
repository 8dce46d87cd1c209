import FoldtableCore
import Glibc

/// A session's history as lines people read: "12:03:04 ana collapsed Mac", newest first, for
/// `foldtable history` and the interactive client's history view.
///
/// Sections are named by their title when the caller knows it (the table it joined), else by
/// key; every text from the server is sanitized (see ``DisplayText``) and kept to one line.
public enum HistoryText {
    /// One event as a line: local time of the commit (`--:--:--` when the event carries none),
    /// author's name, what the change did. `titles`: section key -> title.
    public static func line(_ event: TableEvent, titles: [String: String], timeZoneOffsetSeconds: Int? = nil) -> String {
        let time = event.time.map { clock($0, offsetSeconds: timeZoneOffsetSeconds) } ?? "--:--:--"
        return "\(time) \(oneLine(event.author.name)) \(description(event, titles: titles))"
    }

    /// What the change did, in a few words.
    public static func description(_ event: TableEvent, titles: [String: String]) -> String {
        func section(_ ref: SectionRef) -> String {
            switch ref {
            case .key(let key): return oneLine(titles[key] ?? key)
            case .title(let title): return oneLine(title)
            }
        }
        func effects() -> String {
            guard !event.collapsed.isEmpty else { return "changed nothing" }
            let parts = event.collapsed.prefix(3).map { "\($0.collapsed ? "collapsed" : "expanded") \(oneLine(titles[$0.key] ?? $0.key))" }
            let more = event.collapsed.count > 3 ? " and \(event.collapsed.count - 3) more" : ""
            return parts.joined(separator: ", ") + more
        }
        switch event.change {
        case .toggle, .setCollapsed: return effects()
        case .setAll(let collapsed): return collapsed ? "collapsed every section" : "expanded every section"
        case .reveal(let row): return "revealed row \(oneLine(row))" + (event.collapsed.isEmpty ? "" : " (\(effects()))")
        case .addSection(let new): return "added section \(oneLine(new.title))"
        case .removeSection(let ref): return "removed section \(section(ref))"
        case .updateSection(let ref, let patch):
            if let title = patch.title { return "renamed section \(section(ref)) to \(oneLine(title))" }
            return "edited section \(section(ref))"
        case .moveSection(let ref, let index): return "moved section \(section(ref)) to position \(index + 1)"
        case .addRow(let ref, let row): return "added row \(oneLine(row.label)) to \(section(ref))"
        case .removeRow(let row):
            if let from = event.from { return "removed row \(oneLine(from.row.label)) from \(oneLine(titles[from.section] ?? from.section))" }
            return "removed row \(oneLine(row))"
        case .updateRow(let row, let patch):
            if let value = patch.value { return "set row \(oneLine(row)) to \(oneLine(value))" }
            return "edited row \(oneLine(row))"
        case .moveRow(let row, let ref, _): return "moved row \(oneLine(row)) to \(section(ref))"
        case .setOptions: return "changed the table's options"
        case .importRows(let ref, let rows): return "imported \(rows.count) rows into \(section(ref))"
        case .undo(let undo):
            // What it did, in the words of its first part (a removed section comes back as an
            // added one), or of the states it set back.
            let verb = undo.redo ? "redid" : "undid"
            guard let first = undo.changes.first else { return "\(verb) change \(undo.of): \(effects())" }
            var inner = event
            inner.change = first
            inner.from = nil
            return "\(verb) change \(undo.of): \(description(inner, titles: titles))"
        }
    }

    /// `HH:MM:SS` of `unixMilliseconds` in the local time zone (or at `offsetSeconds` from UTC).
    static func clock(_ unixMilliseconds: UInt64, offsetSeconds: Int?) -> String {
        var seconds = time_t(clamping: unixMilliseconds / 1_000)
        var parts = tm()
        if let offsetSeconds {
            seconds = seconds &+ time_t(offsetSeconds)
            gmtime_r(&seconds, &parts)
        } else {
            localtime_r(&seconds, &parts)
        }
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : String(value) }
        return "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
    }

    /// Sanitized, line breaks as spaces.
    private static func oneLine(_ text: String) -> String {
        DisplayText.sanitize(text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).joined(separator: " "))
    }
}
