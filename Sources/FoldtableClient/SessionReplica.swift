import FoldtableCore

/// The client's copy of one session's table, kept in step with the server's messages.
///
/// Pure value: feed it every ``ServerUpdate`` in the order they arrived. Unlike the server's
/// ``Table`` it may lack rows: a section that was collapsed when we joined has only its
/// `rowCount` until it is expanded and its rows arrive in `rows` chunks. Events still keep that
/// count right: they name rows by key, the replica remembers where every row it has heard of
/// lives, and `removeRow`/`moveRow` events say where a row came from. When the count cannot be
/// kept right (an event without that origin, from an older server, removes a row we never saw
/// from one of several sections whose rows we lack), ``needsSnapshot`` says so and the
/// connection rejoins for a fresh welcome instead of showing a wrong number.
public struct SessionReplica: Sendable {
    /// Most rows accepted into one section from `rows` chunks: a bound on what a misbehaving
    /// server can make the client hold (the server's own default limit is 200,000).
    public static let maxRowsPerSection = 1_000_000

    public private(set) var options = TableOptions()
    /// Every section in order, in the welcome's own type: `busy` is whether the server is
    /// working on it (streaming a large expansion), `rowCount` its rows on the server, loaded or
    /// not, and `rows` every row in order when the client has them all (collapsed sections keep
    /// rows they once had: events keep them current), `nil` while they are not loaded. Rows
    /// still arriving are in ``incomingRows(_:)``.
    public private(set) var sections: [SectionSnapshot] = []
    public private(set) var session: String?
    /// This connection's client id and display name, from the latest welcome or resume.
    public private(set) var me: Author?
    /// The session incarnation, sent back with ``seq`` to resume.
    public private(set) var epoch: String?
    /// The sequence number of the last event applied (or of the welcome).
    public private(set) var seq: UInt64 = 0
    /// A welcome has been applied.
    public private(set) var hasSnapshot = false
    /// Members by name: every member while ``presenceIsComplete``, else those we heard of.
    public private(set) var presence: [ServerMessage.Member] = []
    /// How many members the session has.
    public private(set) var presenceCount = 0
    /// Whether ``presence`` lists every member (false in a session past the server's list
    /// threshold: then only the count is kept exact).
    public private(set) var presenceIsComplete = true
    /// Whether this member is in a private view: then ``sections`` show its own collapsed
    /// states, and the shared ones (what events set) are in ``sharedCollapsed``.
    public private(set) var isPrivate = false
    /// In a private view, each section's shared state (section key -> collapsed).
    public private(set) var sharedCollapsed: [String: Bool] = [:]
    /// The replica can no longer be kept right from events (missed events, rows it cannot
    /// place): rejoin without `since` to get a fresh welcome.
    public private(set) var needsSnapshot = false

    /// Section key -> position in `sections`.
    private var positions: [String: Int] = [:]
    /// Row key -> key of the section holding it, for every row whose place is known (loaded
    /// rows, and rows events added to sections whose other rows are not loaded).
    private var rowHome: [String: String] = [:]
    /// Rows events told us about in full (added, or moved from a loaded section) that live in
    /// sections whose other rows are not loaded: kept so a later move can still show them.
    private var looseRows: [String: Row] = [:]
    /// Section key -> rows arriving in `rows` chunks for its current expansion. Kept beside the
    /// sections rather than in them: only a client streams rows into a section, and the sections
    /// are the same values a welcome carries.
    private var incoming: [String: [Row]] = [:]
    /// Section key -> the sequence number of its latest collapse or import (0 when absent):
    /// `rows` chunks older than it are stale.
    private var collapseSeq: [String: UInt64] = [:]

    public init() {}

    /// The section with `key`.
    public func section(_ key: String) -> SectionSnapshot? { positions[key].map { sections[$0] } }

    /// What has arrived so far of the rows streaming into section `key`; `nil` when none are.
    public func incomingRows(_ key: String) -> [Row]? { incoming[key] }

    /// The rows of `section` to show: the complete list, or what has arrived of it so far.
    public func knownRows(of section: SectionSnapshot) -> [Row] { section.rows ?? incoming[section.key] ?? [] }

    /// The key of the section holding row `key`, when known.
    public func sectionKey(ofRow key: String) -> String? { rowHome[key] }

    /// Whether a reconnect may ask to resume: nothing is missing that only a fresh snapshot
    /// would bring (the server does not re-send rows that were streaming when the link dropped).
    public var canResume: Bool {
        hasSnapshot && epoch != nil && !needsSnapshot && !sections.contains(where: \.isLoading)
    }

    // MARK: - Applying messages

    /// Applies one message. Messages that do not concern the table (ack, error, sessions) are
    /// ignored.
    public mutating func apply(_ update: ServerUpdate) {
        switch update {
        case .welcome(let welcome): load(welcome)
        case .resume(let resume): resumed(resume)
        case .event(let event): apply(event)
        case .rows(let chunk): receive(chunk)
        case .busy(let key, let busy):
            if let position = positions[key] { sections[position].busy = busy }
        case .presence(let change): updatePresence(change)
        case .view(let view): setView(view)
        case .viewChanged(_, let collapsed):
            guard isPrivate else { break }
            for effect in collapsed { setCollapsed(effect.key, effect.collapsed, at: seq) }
        case .ack, .error, .sessions, .found, .history, .other: break
        }
    }

    /// Enters a private view (its whole map) or, with `nil`, goes back to the shared states.
    private mutating func setView(_ view: [CollapseEffect]?) {
        if let view {
            if !isPrivate { sharedCollapsed = Dictionary(sections.map { ($0.key, $0.collapsed) }, uniquingKeysWith: { $1 }) }
            isPrivate = true
            for effect in view { setCollapsed(effect.key, effect.collapsed, at: seq) }
        } else if isPrivate {
            isPrivate = false
            for (key, collapsed) in sharedCollapsed { setCollapsed(key, collapsed, at: seq) }
            sharedCollapsed = [:]
        }
    }

    private mutating func load(_ welcome: ServerUpdate.Welcome) {
        // A welcome shows the shared states; a private view is told again after it.
        isPrivate = false
        sharedCollapsed = [:]
        options = welcome.table.options
        session = welcome.session
        me = welcome.me
        epoch = welcome.epoch
        seq = welcome.seq
        presence = welcome.presence
        presenceCount = welcome.presenceCount
        presenceIsComplete = presence.count == presenceCount
        hasSnapshot = true
        needsSnapshot = false
        positions = [:]
        rowHome = [:]
        looseRows = [:]
        incoming = [:]
        collapseSeq = [:]
        sections = []
        for var section in welcome.table.sections where positions[section.key] == nil {
            if section.rows == nil && !section.collapsed && section.rowCount == 0 { section.rows = [] }
            section.rowCount = max(0, section.rows?.count ?? section.rowCount)
            positions[section.key] = sections.count
            for row in section.rows ?? [] { rowHome[row.key] = section.key }
            sections.append(section)
        }
    }

    private mutating func resumed(_ resume: ServerUpdate.Resume) {
        guard hasSnapshot else {
            needsSnapshot = true
            return
        }
        session = resume.session
        me = resume.me
        epoch = resume.epoch
        presence = resume.presence
        presenceCount = resume.presenceCount
        presenceIsComplete = presence.count == presenceCount
        // Busy state is not part of a resume; a spinner nobody will ever stop is worse than a
        // missed one. Streams cut by the drop are not resumed either.
        for position in sections.indices { sections[position].busy = false }
        incoming = [:]
    }

    private mutating func updatePresence(_ diff: PresenceDiff) {
        presenceCount = diff.count
        presenceIsComplete = diff.complete
        if let members = diff.members {
            presence = members
            return
        }
        // Past the threshold `joined` is a sample and nobody is said to leave: the names kept
        // are only for showing a few, bounded like a welcome's list.
        for member in diff.renamed + diff.joined {
            if let index = presence.firstIndex(where: { $0.client == member.client }) {
                presence[index] = member
            } else {
                presence.append(member)
            }
        }
        let left = Set(diff.left)
        presence.removeAll { left.contains($0.client) }
        if !diff.complete && presence.count > Self.maxPresenceSample { presence.removeFirst(presence.count - Self.maxPresenceSample) }
    }

    /// Most names kept for a session past the server's list threshold.
    static let maxPresenceSample = 200

    private mutating func receive(_ chunk: ServerUpdate.RowsChunk) {
        let key = chunk.section
        guard let position = positions[key] else { return }
        // Rows belong to the expansion with that seq; a later collapse makes them stale.
        guard !sections[position].collapsed, chunk.seq >= collapseSeq[key, default: 0] else { return }
        if chunk.from == 0 { incoming[key] = [] }
        guard let arrived = incoming[key]?.count, chunk.from == arrived,
            arrived + chunk.rows.count <= Self.maxRowsPerSection
        else {
            // A chunk out of step: rows went missing on the way; only a snapshot mends that.
            needsSnapshot = true
            return
        }
        for row in chunk.rows { rowHome[row.key] = key }
        // Appended in place (not through a copy): a large section arrives in hundreds of chunks,
        // and copying what arrived so far for each would be quadratic.
        incoming[key]?.append(contentsOf: chunk.rows)
        if chunk.final {
            let rows = incoming.removeValue(forKey: key) ?? []
            for row in rows where looseRows[row.key] != nil { looseRows[row.key] = nil }
            sections[position].rows = rows
            sections[position].rowCount = rows.count
        } else {
            sections[position].rowCount = max(chunk.total, arrived + chunk.rows.count)
        }
    }

    // MARK: - Events

    private mutating func apply(_ event: TableEvent) {
        guard hasSnapshot, event.seq > seq else { return }  // before a snapshot, or seen already
        if event.seq != seq + 1 { needsSnapshot = true }  // events were missed
        seq = event.seq
        apply(event.change, of: event)
        for effect in event.collapsed {
            // In a private view, events set the shared state only (a section new to the view
            // takes the state the table gave it).
            if isPrivate && sharedCollapsed[effect.key] != nil {
                sharedCollapsed[effect.key] = effect.collapsed
            } else {
                setCollapsed(effect.key, effect.collapsed, at: event.seq)
            }
        }
        if isPrivate {
            for section in sections where sharedCollapsed[section.key] == nil { sharedCollapsed[section.key] = section.collapsed }
        }
    }

    /// Applies one change of `event` (the event's own, or one inside an undo).
    private mutating func apply(_ change: Change, of event: TableEvent) {
        switch change {
        case .undo(let undo):
            // Its changes in order; the event's collapsed map, applied after, holds the states.
            for inner in undo.changes { apply(inner, of: event) }
        case .toggle, .setCollapsed, .setAll, .reveal:
            break  // only collapse effects, below
        case .addSection(let new):
            guard let key = new.key, positions[key] == nil else { break }
            let section = SectionSnapshot(
                key: key, title: new.title, detail: new.detail, footer: new.footer,
                collapsed: new.collapsed ?? options.sectionsInitiallyCollapsed, busy: false, rowCount: 0, rows: [])
            sections.insert(section, at: Self.clamp(new.index, sections.count))
            reindex()
        case .removeSection(let ref):
            guard let position = position(ref) else { break }
            let removed = sections.remove(at: position)
            for key in rowHome.filter({ $0.value == removed.key }).keys {
                rowHome[key] = nil
                looseRows[key] = nil
            }
            incoming[removed.key] = nil
            collapseSeq[removed.key] = nil
            reindex()
        case .updateSection(let ref, let patch):
            guard let position = position(ref) else { break }
            if let title = patch.title { sections[position].title = title }
            if let detail = patch.detail { sections[position].detail = detail }
            if let footer = patch.footer { sections[position].footer = footer }
        case .moveSection(let ref, let index):
            guard let position = position(ref) else { break }
            let moved = sections.remove(at: position)
            sections.insert(moved, at: Self.clamp(index, sections.count))
            reindex()
        case .addRow(let ref, let new):
            guard let position = position(ref), let key = new.key else { break }
            insert(Row(key: key, label: new.label, value: new.value, detail: new.detail), at: new.index, into: position)
        case .removeRow(let key):
            _ = take(key, origin: event.from)
        case .updateRow(let key, let patch):
            func update(_ row: inout Row) {
                if let label = patch.label { row.label = label }
                if let value = patch.value { row.value = value }
                if let detail = patch.detail { row.detail = detail }
            }
            if looseRows[key] != nil { update(&looseRows[key]!) }  // safe: checked non-nil just before
            guard let home = rowHome[key], let position = positions[home] else { break }
            sections[position].rows?.mutateFirst(key, update)
        case .moveRow(let key, let ref, let index):
            let row = take(key, origin: event.from)
            guard let position = position(ref) else { break }
            if let row {
                insert(row, at: index, into: position)
            } else {
                // We know the row exists now, not what it says.
                sections[position].rowCount += 1
                rowHome[key] = sections[position].key
                if sections[position].rows != nil {
                    sections[position].rows = nil
                    if !sections[position].collapsed { needsSnapshot = true }
                }
            }
        case .setOptions(let patch):
            options.merge(patch)
        case .importRows(let ref, let imported):
            guard let position = position(ref) else { break }
            let key = sections[position].key
            if imported.replace {
                for (row, home) in rowHome where home == key {
                    rowHome[row] = nil
                    looseRows[row] = nil
                }
            }
            // The rows themselves come in `rows` chunks at this seq when the section is shown;
            // chunks of anything earlier are stale.
            sections[position].rowCount = (imported.replace ? 0 : sections[position].rowCount) + imported.count
            sections[position].rows = sections[position].rowCount == 0 ? [] : nil
            incoming[key] = nil
            collapseSeq[key] = event.seq
        }
    }

    private mutating func setCollapsed(_ key: String, _ collapsed: Bool, at eventSeq: UInt64) {
        guard let position = positions[key], sections[position].collapsed != collapsed else { return }
        sections[position].collapsed = collapsed
        incoming[key] = nil
        if collapsed {
            collapseSeq[key] = eventSeq
        } else if sections[position].rowCount == 0 && sections[position].rows == nil {
            sections[position].rows = []
        }
        // Expanded: rows we hold whole stay (events kept them current; the server sends rows
        // only to members that lack them). Rows that do arrive replace ours at the final chunk.
    }

    /// Removes a row wherever it is; returns it when its content was known.
    /// Removes a row wherever the replica has it; `origin` (the event's `from`) says where it was
    /// and what it held when the replica never loaded that section's rows.
    private mutating func take(_ key: String, origin: RowOrigin?) -> Row? {
        let loose = looseRows.removeValue(forKey: key)
        if let home = rowHome.removeValue(forKey: key), let position = positions[home] {
            sections[position].rowCount = max(0, sections[position].rowCount - 1)
            if let index = sections[position].rows?.firstIndex(where: { $0.key == key }) {
                return sections[position].rows?.remove(at: index)
            }
            return loose
        }
        if let origin, let position = positions[origin.section] {
            sections[position].rowCount = max(0, sections[position].rowCount - 1)
            return origin.row
        }
        // A row we never saw and an event without its origin (an older server): it can only be
        // in a section whose rows we lack. With one such section the count stays right; with
        // several we cannot tell which.
        let candidates = sections.indices.filter { sections[$0].rows == nil && sections[$0].rowCount > 0 }
        if candidates.count == 1 {
            sections[candidates[0]].rowCount -= 1
        } else {
            needsSnapshot = true
        }
        return nil
    }

    private mutating func insert(_ row: Row, at index: Int?, into position: Int) {
        sections[position].rowCount += 1
        rowHome[row.key] = sections[position].key
        if sections[position].rows != nil {
            let at = Self.clamp(index, sections[position].rows?.count ?? 0)
            sections[position].rows?.insert(row, at: at)
        } else {
            looseRows[row.key] = row
        }
    }

    private func position(_ ref: SectionRef) -> Int? {
        switch ref {
        case .key(let key): return positions[key]
        case .title(let title): return sections.firstIndex { $0.title == title }
        }
    }

    private mutating func reindex() {
        positions = [:]
        for (position, section) in sections.enumerated() { positions[section.key] = position }
    }

    private static func clamp(_ index: Int?, _ count: Int) -> Int {
        guard let index else { return count }
        return min(max(0, index), count)
    }

    // MARK: - Words for people

    /// What an event did, in a few words ("ana collapsed Mac"), worded from the replica as it
    /// is before the event is applied.
    public func describe(_ event: TableEvent) -> String {
        func title(_ ref: SectionRef) -> String {
            switch ref {
            case .key(let key): return oneLine(section(key)?.title ?? key)
            case .title(let title): return oneLine(title)
            }
        }
        func rowLabel(_ key: String) -> String {
            guard let home = rowHome[key], let holder = section(home), let row = knownRows(of: holder).first(where: { $0.key == key }) else {
                return "a row"
            }
            return row.label
        }
        let flips = event.collapsed.map { "\($0.collapsed ? "collapsed" : "expanded") \(title(.key($0.key)))" }.joined(separator: ", ")
        let what: String
        switch event.change {
        case .toggle(let ref), .setCollapsed(let ref, _):
            what = flips.isEmpty ? "left \(title(ref)) as it was" : flips
        case .reveal(let key):
            what = flips.isEmpty ? "showed \(rowLabel(key))" : "showed \(rowLabel(key)): \(flips)"
        case .setAll(let collapsed): what = collapsed ? "collapsed all sections" : "expanded all sections"
        case .addSection(let new): what = "added section \(oneLine(new.title))"
        case .removeSection(let ref): what = "removed section \(title(ref))"
        case .updateSection(let ref, let patch):
            what = patch.title.map { "renamed \(title(ref)) to \(oneLine($0))" } ?? "edited section \(title(ref))"
        case .moveSection(let ref, _): what = "moved section \(title(ref))"
        case .addRow(let ref, let row): what = "added \(row.label) to \(title(ref))"
        case .removeRow(let key): what = "removed \(rowLabel(key))"
        case .updateRow(let key, let patch):
            what = patch.value.map { "set \(rowLabel(key)) to \"\($0)\"" } ?? "edited \(rowLabel(key))"
        case .moveRow(let key, let ref, _): what = "moved \(rowLabel(key)) to \(title(ref))"
        case .setOptions: what = "changed the table options"
        case .importRows(let ref, let imported):
            what = "imported \(imported.count) row\(imported.count == 1 ? "" : "s") into \(title(ref))"
        case .undo(let undo): what = "\(undo.redo ? "redid" : "undid") change \(undo.of)"
        }
        return DisplayText.sanitize("\(event.author.name) \(what)")
    }

    private func oneLine(_ text: String) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init).joined(separator: " ")
    }
}

extension SectionSnapshot {
    /// Expanded, but its rows are not (all) here yet: in a ``SessionReplica`` a shown section
    /// lacks `rows` only while they stream in.
    public var isLoading: Bool { !collapsed && rows == nil }
}

extension Array where Element == Row {
    /// Changes the first row with `key`, if any.
    fileprivate mutating func mutateFirst(_ key: String, _ change: (inout Row) -> Void) {
        if let index = firstIndex(where: { $0.key == key }) { change(&self[index]) }
    }
}
