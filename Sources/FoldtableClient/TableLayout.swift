import FoldtableCore

/// The replica laid out as screen lines, top to bottom, before any width is applied: which line
/// shows what, and which lines the cursor can stop on. Pure.
///
/// Virtual: it keeps one block per section, not one entry per line, so laying out a table with
/// a 100,000-row section expanded costs as much as laying out its headers; ``line(_:)`` works
/// out what a line shows when it is drawn.
public struct TableLayout: Sendable {
    /// What the cursor rests on: a section header or a row, by key (never by position, so a
    /// change made by someone else does not move the cursor to another item).
    public enum Target: Hashable, Sendable {
        case section(String)
        case row(String)
    }

    /// What one line shows.
    public enum Content: Equatable, Sendable {
        /// Line `line` of a section's header (titles may span lines; line 0 carries the
        /// indicator, the detail and the row count).
        case header(line: Int, text: String)
        case row(Row)
        /// Expanded and still waiting for rows: how many arrived of how many.
        case loading(arrived: Int, total: Int)
        /// Expanded and without rows.
        case noRows
        case footer(String)
    }

    public struct Line: Equatable, Sendable {
        public var section: String
        public var content: Content
        /// The item this line belongs to; `nil` for lines the cursor skips (footer, loading).
        public var target: Target?
    }

    /// One section's lines: title lines, then (expanded) rows, a notice, footer lines.
    private struct Block: Sendable {
        var key: String
        var start: Int
        var title: [String]
        var rows: [Row]
        var notice: Content?
        var footer: [String]
        var count: Int { title.count + rows.count + (notice == nil ? 0 : 1) + footer.count }
    }

    private var blocks: [Block] = []
    private var blockOfSection: [String: Int] = [:]
    private let replica: SessionReplica
    /// Lines in all.
    public private(set) var lineCount = 0

    public init(_ replica: SessionReplica) {
        self.replica = replica
        let titleLines = replica.options.titleLines
        for section in replica.sections {
            var block = Block(
                key: section.key, start: lineCount, title: Self.titleLines(section.title, limit: titleLines), rows: [], notice: nil, footer: [])
            if !section.collapsed {
                block.rows = replica.knownRows(of: section)
                if section.isLoading {
                    block.notice = .loading(arrived: block.rows.count, total: section.rowCount)
                } else if block.rows.isEmpty {
                    block.notice = .noRows
                }
                if let footer = section.footer, !footer.isEmpty {
                    block.footer = footer.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
                }
            }
            blockOfSection[section.key] = blocks.count
            blocks.append(block)
            lineCount += block.count
        }
    }

    /// The lines of a title as shown: all of them, or with `limit` > 0 (the table's `titleLines`)
    /// at most that many, the last ending in "…" when lines were left out.
    static func titleLines(_ title: String, limit: Int) -> [String] {
        let lines = title.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard limit > 0, lines.count > limit else { return lines }
        var kept = Array(lines.prefix(limit))
        kept[limit - 1] += "…"
        return kept
    }

    /// What line `index` (0 ..< ``lineCount``) shows.
    public func line(_ index: Int) -> Line {
        // The last block starting at or before the line.
        var low = 0
        var high = blocks.count - 1
        while low < high {
            let middle = (low + high + 1) / 2
            if blocks[middle].start <= index { low = middle } else { high = middle - 1 }
        }
        let block = blocks[low]
        var offset = index - block.start
        if offset < block.title.count {
            return Line(section: block.key, content: .header(line: offset, text: block.title[offset]), target: .section(block.key))
        }
        offset -= block.title.count
        if offset < block.rows.count {
            let row = block.rows[offset]
            return Line(section: block.key, content: .row(row), target: .row(row.key))
        }
        offset -= block.rows.count
        if let notice = block.notice {
            if offset == 0 { return Line(section: block.key, content: notice, target: nil) }
            offset -= 1
        }
        return Line(section: block.key, content: .footer(block.footer[min(offset, block.footer.count - 1)]), target: nil)
    }

    /// The first line of `target`, if it is on screen.
    public func line(of target: Target) -> Int? {
        switch target {
        case .section(let key):
            return blockOfSection[key].map { blocks[$0].start }
        case .row(let key):
            guard let section = replica.sectionKey(ofRow: key),
                let index = blockOfSection[section]
            else { return nil }
            let block = blocks[index]
            return block.rows.firstIndex { $0.key == key }.map { block.start + block.title.count + $0 }
        }
    }

    /// How many lines `target` takes (headers may span lines).
    public func height(of target: Target) -> Int {
        switch target {
        case .section(let key): return blockOfSection[key].map { blocks[$0].title.count } ?? 0
        case .row: return line(of: target) == nil ? 0 : 1
        }
    }

    private func isStop(_ index: Int) -> Bool {
        let line = line(index)
        if case .header(let number, _) = line.content { return number == 0 }
        return line.target != nil
    }

    /// The target `offset` stops away from `target` (clamped to the first and last), or the
    /// first stop when `target` is not shown.
    public func target(_ offset: Int, from target: Target?) -> Target? {
        guard let target, var index = line(of: target) else { return first }
        var remaining = abs(offset)
        let step = offset < 0 ? -1 : 1
        var found = index
        while remaining > 0 {
            index += step
            guard index >= 0 && index < lineCount else { break }
            if isStop(index) {
                found = index
                remaining -= 1
            }
        }
        return line(found).target
    }

    /// The first stop at or after line `index` (or the last one).
    public func target(atOrAfterLine index: Int) -> Target? {
        var candidate = max(0, index)
        while candidate < lineCount {
            if isStop(candidate) { return line(candidate).target }
            candidate += 1
        }
        return last
    }

    /// The first stop at or before line `index` (or the first one).
    public func target(atOrBeforeLine index: Int) -> Target? {
        var candidate = min(index, lineCount - 1)
        while candidate >= 0 {
            if isStop(candidate) { return line(candidate).target }
            candidate -= 1
        }
        return first
    }

    public var first: Target? { lineCount == 0 ? nil : target(atOrAfterLine: 0) }

    public var last: Target? {
        var candidate = lineCount - 1
        while candidate >= 0 {
            if isStop(candidate) { return line(candidate).target }
            candidate -= 1
        }
        return nil
    }
}
