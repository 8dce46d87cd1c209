/// A shared collapsible table and the deterministic log position it is at.
///
/// Pure value: no clock, no randomness, no I/O. Applying the same changes in the same order gives
/// the same sections, keys, sequence numbers and events on every machine. A change is validated
/// completely before anything is modified, so a refused change leaves the table as it was.
public struct Table: Sendable {
    public private(set) var options: TableOptions
    public private(set) var sections: [Section]
    public let limits: TableLimits
    /// The sequence number of the last applied change (0 before any).
    public private(set) var seq: UInt64

    /// Section key -> position in `sections`. Kept in step on every structural change.
    private var sectionPositions: [String: Int] = [:]
    /// Row key -> key of the section holding it (row keys are unique across the table).
    private var rowSections: [String: String] = [:]
    /// Change id -> its entry in `changeIdOrder` (the seq it was applied at and a digest of the
    /// change as requested), for idempotent retries; bounded by `limits.idempotencyWindow`,
    /// oldest forgotten first. The digest lets an id reused for a different change be refused
    /// instead of falsely acknowledged, in 16 bytes instead of the whole request and event
    /// (10,000 ids per table). Empty on a table whose window is another's (`changeIdsShared`) or
    /// that keeps none (`changeIdsKept`).
    private var changeIdIndex = ChangeIdIndex()
    /// UTF-8 bytes of every title, detail, footer, label and value in the table.
    public private(set) var textBytes = 0
    /// The window in the order the ids were applied (a ring once full): what is forgotten next.
    private var changeIdOrder: [RememberedChange] = []
    private var changeIdOldest = 0
    /// False on a replica that keeps no window of its own (``stopKeepingChangeIds()``): a local
    /// session's committed table, whose window is read from its head's (``withChangeIds(of:)``).
    private var changeIdsKept = true
    /// On a head followed by such a replica (``changeIdsCommitted(through:)``): whether it is,
    /// and the ids its ring has forgotten that the committed window still holds (oldest first;
    /// older than every id in the ring). Changes in flight push committed ids out of the ring;
    /// the committed window keeps the newest `idempotencyWindow` committed ones, so those wait
    /// here until as many newer ones commit.
    private var changeIdsFollowed = false
    private var changeIdsSpilled: [RememberedChange] = []
    /// On a table made by ``withChangeIds(of:)``: `changeIdOrder` and `changeIdsSpilled` are the
    /// head's (shared, not copied), of which this table's window is the newest
    /// `idempotencyWindow` ids at or before its own `seq`. Made a window of its own (and indexed)
    /// before this table applies anything.
    private var changeIdsShared = false

    /// An empty table.
    public init(options: TableOptions = TableOptions(), limits: TableLimits = TableLimits()) {
        self.options = options
        self.limits = limits
        self.sections = []
        self.seq = 0
    }

    /// A table holding `sections` at sequence number `seq` (restoring a snapshot, or building
    /// fixed content such as the demo session). Fails when keys repeat.
    public init(options: TableOptions, sections: [Section], seq: UInt64, limits: TableLimits = TableLimits()) throws(ProtocolError) {
        self.init(options: options, limits: limits)
        self.sections = sections
        self.seq = seq
        for (position, section) in sections.enumerated() {
            textBytes += Self.textBytes(of: section) + section.rows.reduce(0) { $0 + Self.textBytes(of: $1) }
            guard sectionPositions.updateValue(position, forKey: section.key) == nil else {
                throw ProtocolError(.duplicateKey, "two sections have the key \"\(section.key)\"", field: "key")
            }
            for row in section.rows {
                guard rowSections.updateValue(section.key, forKey: row.key) == nil else {
                    throw ProtocolError(.duplicateKey, "two rows have the key \"\(row.key)\"", field: "key")
                }
            }
        }
    }

    /// Total rows in the table.
    public var rowCount: Int { rowSections.count }

    /// The section with `key`, if any.
    public func section(_ key: String) -> Section? {
        sectionPositions[key].map { sections[$0] }
    }

    /// The position of the section with `key`, if any.
    public func position(ofSection key: String) -> Int? { sectionPositions[key] }

    /// The key of the section holding row `key`, if any.
    public func sectionKey(ofRow key: String) -> String? { rowSections[key] }

    /// Section key -> collapsed, in table order.
    public var collapsedMap: [CollapseEffect] {
        sections.map { CollapseEffect(key: $0.key, collapsed: $0.collapsed) }
    }

    // MARK: - Applying changes

    /// Applies `change` made by `author`; returns the event with the next sequence number, or the
    /// original event when `changeId` was applied before.
    public mutating func apply(_ change: Change, by author: Author, changeId: String? = nil) throws(ProtocolError) -> ApplyOutcome {
        ownChangeIds()
        return try apply(change, by: author, changeId: changeId, requestDigest: nil)
    }

    /// ``apply(_:by:changeId:)``, also giving the digest the id window holds for `changeId` (`nil`
    /// without an id): what a replica following this table takes (``applyCommitted(_:request:requestDigest:verify:)``)
    /// instead of encoding the request again, with no second lookup of the id.
    public mutating func applyGivingDigest(_ change: Change, by author: Author, changeId: String?) throws(ProtocolError) -> (
        ApplyOutcome, digest: UInt64?
    ) {
        guard let changeId else { return (try apply(change, by: author, changeId: nil, requestDigest: nil), nil) }
        ownChangeIds()
        let digest = Self.digest(change)
        return (try apply(change, by: author, changeId: changeId, requestDigest: digest), digest)
    }

    /// `requestDigest`: the digest to remember for `changeId` when `change` is not what the author
    /// sent (a resolved change replayed from a log); `nil` = the digest of `change`. `trusted`:
    /// the change is an event this table's own sequencer produced from the same state (the
    /// committed replica), so its id is known to be new and valid: neither is checked again.
    private mutating func apply(_ change: Change, by author: Author, changeId: String?, requestDigest: UInt64?, trusted: Bool = false)
        throws(ProtocolError) -> ApplyOutcome
    {
        var digest: UInt64 = 0
        // The id's hash, when the index looked it up: entering the id takes it instead of hashing again.
        var hash: Int?
        if let changeId {
            digest = requestDigest ?? Self.digest(change)
            if !trusted {
                if changeIdsKept { hash = changeId.hashValue }
                if let earlier = lookUp(changeId, hash: hash) {
                    guard earlier.digest == digest else {
                        throw ProtocolError(
                            .idReused, "the change id \"\(ChangeIdScope.id(ofKey: changeId).prefix(64))\" was already used for a different change",
                            field: "id")
                    }
                    return .duplicate(seq: earlier.seq)
                }
            }
        }
        let next = seq + 1
        var origin: RowOrigin?
        let resolved: Change
        let effects: CollapseEffects
        if let changeId, !trusted { try Self.checkChangeKey(limits: limits, changeId) }
        (resolved, effects) = try perform(change, seq: next, origin: &origin)
        seq = next
        if let changeId { remember(changeId, seq: next, digest: digest, hash: hash) }
        // Every part moved into the event, which is moved out: no copy of it or of its parts.
        return .applied(TableEvent(seq: next, author: author, changeId: changeId, change: resolved, collapsed: effects, from: consume origin))
    }

    /// Applies an event produced by another replica of this table (from the store or another
    /// node). Its sequence number must be the next one, and applying it must reproduce it.
    public mutating func replay(_ event: TableEvent) throws(ProtocolError) {
        guard event.seq == seq + 1 else {
            throw ProtocolError(.invalidValue, "event \(event.seq) does not follow \(seq)", field: "seq")
        }
        var copy = self
        let outcome = try copy.apply(event.change, by: event.author, changeId: event.changeId)
        guard case .applied(let produced) = outcome, produced.isSameChange(as: event) else {
            throw ProtocolError(.invalidValue, "event \(event.seq) does not reproduce on this replica", field: "change")
        }
        self = copy
    }

    /// Applies an event that this table's own sequencer produced on another copy of it (the
    /// committed replica catching up with the head). In place, unlike ``replay(_:)``, which
    /// copies to stay unchanged on failure: the caller holds the head, so a mismatch means a bug,
    /// never bad input.
    ///
    /// - Parameters:
    ///   - event: the event the head produced, next in sequence.
    ///   - request: the change as its author sent it, when it came with a change id.
    ///   - requestDigest: the id window's digest of the request when the caller has it already
    ///     (the head computed it: ``applyGivingDigest(_:by:changeId:)``); `nil` computes it.
    ///   - verify: compare the event this replica produces with `event` (a whole-event comparison),
    ///     and check its change id as a request's would be (new to the window, well formed).
    ///     Events read back from a store are always verified; the committed replica of a running
    ///     session skips it outside debug builds, since the head produced the event from the
    ///     same state a moment before.
    public mutating func applyCommitted(_ event: TableEvent, request: Change? = nil, requestDigest: UInt64? = nil, verify: Bool = true)
        throws(ProtocolError)
    {
        guard event.seq == seq + 1 else {
            throw ProtocolError(.invalidValue, "event \(event.seq) does not follow \(seq)", field: "seq")
        }
        ownChangeIds()
        let digest = event.changeId == nil ? nil : requestDigest ?? Self.digest(request ?? event.change)
        if !verify && applyCollapseOnly(event, digest: digest) { return }
        let outcome = try apply(event.change, by: event.author, changeId: event.changeId, requestDigest: digest, trusted: !verify)
        guard case .applied(let produced) = outcome, !verify || produced.isSameChange(as: event) else {
            throw ProtocolError(.invalidValue, "event \(event.seq) does not reproduce on this replica", field: "change")
        }
    }

    /// Applies an event of a toggle, `setCollapsed`, `setAll` or `reveal` that this table's own
    /// sequencer produced from the same state (see ``applyCommitted(_:request:requestDigest:verify:)``),
    /// unverified, from the event alone: such a change only sets collapsed states, and the
    /// event's `collapsed` lists every state it set. Returns false, changing nothing, for any
    /// other change or an event that names a section this table lacks.
    private mutating func applyCollapseOnly(_ event: TableEvent, digest: UInt64?) -> Bool {
        switch event.change {
        case .toggle, .setCollapsed, .setAll, .reveal: break
        default: return false
        }
        if event.collapsed.count == 1 {
            // Most such events set one section: looked up once.
            guard let position = sectionPositions[event.collapsed[0].key] else { return false }
            sections[position].collapsed = event.collapsed[0].collapsed
        } else {
            guard event.collapsed.allSatisfy({ sectionPositions[$0.key] != nil }) else { return false }
            for effect in event.collapsed {
                // Checked just above: every key has a position.
                sections[sectionPositions[effect.key]!].collapsed = effect.collapsed  // safe: checked just above
            }
        }
        seq = event.seq
        if let changeId = event.changeId, let digest { remember(changeId, seq: event.seq, digest: digest) }
        return true
    }

    /// The digest the id window holds for `changeId`, if it holds the id.
    public func rememberedDigest(of changeId: String) -> UInt64? {
        lookUp(changeId)?.digest
    }

    /// The seq `changeId` was applied at and the digest of what was asked, if the window holds it:
    /// how a node that never read a request of its own (a snapshot covers it) learns its outcome.
    public func remembered(_ changeId: String) -> (seq: UInt64, digest: UInt64)? {
        lookUp(changeId)
    }

    /// Whether the window still holds every id applied after `seq`: none has been pushed out since.
    /// Then an id it does not hold was not applied after `seq`.
    public func remembersEveryId(after seq: UInt64) -> Bool {
        guard changeIdsKept else { return false }
        guard let oldest = oldestRememberedSeq else { return true }
        // A full window pushes its oldest id out for each new one: the oldest kept must be no
        // later than the first seq after `seq`, or ids between may be gone.
        return rememberedCount < limits.idempotencyWindow || oldest <= seq &+ 1
    }

    /// How many change ids the window holds.
    private var rememberedCount: Int {
        if changeIdsShared {
            let (from, to) = sharedWindow()
            return to - from
        }
        return changeIdOrder.count
    }

    /// The seq and digest the window holds for `changeId`: from the index, or, on a table whose
    /// window is another's (only read when saved), by reading the window through.
    /// `hash`: `changeId.hashValue` when the caller has it.
    private func lookUp(_ changeId: String, hash: Int? = nil) -> (seq: UInt64, digest: UInt64)? {
        guard changeIdsKept else { return nil }
        guard !changeIdsShared else { return rememberedChanges.last { $0.id == changeId }.map { ($0.seq, $0.digest) } }
        guard let slot = changeIdIndex.slot(of: changeId, hash: hash ?? changeId.hashValue, in: changeIdOrder) else { return nil }
        return (changeIdOrder[slot].seq, changeIdOrder[slot].digest)
    }

    /// Keeps no change-id window from now on: what a local session's committed table does. It
    /// follows the head's events unverified, and its window is the head's ids up to its own seq,
    /// read from the head when it is saved (``withChangeIds(of:)``): one ring per session instead
    /// of two (320 KB of 32-byte entries each at 10,000 ids), and no write of it per change. The
    /// head must be told how far it is committed (``changeIdsCommitted(through:)``).
    public mutating func stopKeepingChangeIds() {
        changeIdsKept = false
        changeIdsShared = false
        changeIdsFollowed = false
        changeIdIndex = ChangeIdIndex()
        changeIdOrder = []
        changeIdOldest = 0
        changeIdsSpilled = []
    }

    /// This table (a replica that keeps no window, ``stopKeepingChangeIds()``) with its window
    /// read from `head`, the table it follows: the newest `idempotencyWindow` ids `head` applied
    /// at or before this table's seq. The head's ring is shared, not copied; the result makes a
    /// window of its own only if it applies a change (a rollback makes it the head again).
    /// `head` must have been told this table's seq with ``changeIdsCommitted(through:)``.
    public func withChangeIds(of head: Table) -> Table {
        var table = self
        table.changeIdsKept = true
        table.changeIdsShared = true
        table.changeIdsFollowed = false
        table.changeIdIndex = ChangeIdIndex()
        table.changeIdOrder = head.changeIdOrder
        table.changeIdOldest = head.changeIdOldest
        table.changeIdsSpilled = head.changeIdsSpilled
        return table
    }

    /// Tells a head that its changes through `seq` are committed, by a replica that keeps no
    /// window of its own (``stopKeepingChangeIds()``): the ids the committed window still needs
    /// are kept when changes in flight push them out of the ring, and let go once
    /// `idempotencyWindow` newer ones are committed.
    public mutating func changeIdsCommitted(through seq: UInt64) {
        ownChangeIds()
        guard changeIdsKept else { return }
        changeIdsFollowed = true
        guard !changeIdsSpilled.isEmpty else { return }
        // Committed ids in the ring: all but its newest ones past `seq` (the changes in flight).
        let committedInRing = changeIdOrder.count - ringEntries(after: seq)
        var committedSpilled = 0
        while committedSpilled < changeIdsSpilled.count && changeIdsSpilled[committedSpilled].seq <= seq { committedSpilled += 1 }
        // The oldest committed ids go while the newest `idempotencyWindow` committed ones are newer.
        let surplus = committedInRing + committedSpilled - limits.idempotencyWindow
        if surplus > 0 { changeIdsSpilled.removeFirst(min(surplus, committedSpilled)) }
    }

    /// How many of the ring's newest entries were applied after `seq`: counted from the newest
    /// back, so it costs what it counts.
    private func ringEntries(after seq: UInt64) -> Int {
        let count = changeIdOrder.count
        var taken = 0
        while taken < count && changeIdOrder[(changeIdOldest + count - 1 - taken) % count].seq > seq { taken += 1 }
        return taken
    }

    /// Gives a table whose window is another's (``withChangeIds(of:)``) a window of its own,
    /// indexed: before it applies anything.
    private mutating func ownChangeIds() {
        guard changeIdsShared else { return }
        restoreRemembered(rememberedChanges)
    }

    /// One remembered change id: the seq it was applied at, and a digest of what was asked.
    public struct RememberedChange: Equatable, Sendable {
        public var id: String
        public var seq: UInt64
        /// ``Table/digest(_:)`` of the change as its author sent it.
        public var digest: UInt64

        public init(id: String, seq: UInt64, digest: UInt64) {
            self.id = id
            self.seq = seq
            self.digest = digest
        }
    }

    /// The change-id window, oldest first: what a store saves so that a retry after a restart is
    /// acknowledged with its original seq instead of being applied twice.
    public var rememberedChanges: [RememberedChange] {
        guard changeIdsShared else { return Array(changeIdOrder[changeIdOldest...] + changeIdOrder[..<changeIdOldest]) }
        let (from, to) = sharedWindow()
        return (from..<to).map { sharedChange(at: $0) }
    }

    /// The remembered changes applied after `seq`, oldest first: what a store that saves the
    /// window in slices adds at a checkpoint (the ids since its previous one). Read from the
    /// newest back, so it costs what it returns, not the window.
    public func rememberedChanges(after seq: UInt64) -> [RememberedChange] {
        if changeIdsShared {
            let (from, to) = sharedWindow()
            var first = to
            while first > from && sharedChange(at: first - 1).seq > seq { first -= 1 }
            return (first..<to).map { sharedChange(at: $0) }
        }
        let count = changeIdOrder.count
        let taken = ringEntries(after: seq)
        var changes: [RememberedChange] = []
        changes.reserveCapacity(taken)
        for offset in (count - taken)..<count { changes.append(changeIdOrder[(changeIdOldest + offset) % count]) }
        return changes
    }

    /// The seq of the oldest change the window remembers (`nil` when it remembers none).
    public var oldestRememberedSeq: UInt64? {
        if changeIdsShared {
            let (from, to) = sharedWindow()
            return from < to ? sharedChange(at: from).seq : nil
        }
        return changeIdOrder.isEmpty ? nil : changeIdOrder[changeIdOldest].seq
    }

    /// A shared window's ids (``withChangeIds(of:)``), the head's spilled ones then its ring's
    /// oldest first, numbered from 0.
    private func sharedChange(at index: Int) -> RememberedChange {
        if index < changeIdsSpilled.count { return changeIdsSpilled[index] }
        return changeIdOrder[(changeIdOldest + index - changeIdsSpilled.count) % changeIdOrder.count]
    }

    /// Where this table's window lies among ``sharedChange(at:)``'s numbers: the newest
    /// `idempotencyWindow` ids at or before `seq` (those past it are the head's changes in flight).
    private func sharedWindow() -> (from: Int, to: Int) {
        var to = changeIdsSpilled.count + changeIdOrder.count
        while to > 0 && sharedChange(at: to - 1).seq > seq { to -= 1 }
        return (max(0, to - limits.idempotencyWindow), to)
    }

    /// Restores the change-id window saved with ``rememberedChanges`` (oldest first). Entries past
    /// `limits.idempotencyWindow` push out the oldest, exactly as applying them would have.
    public mutating func restoreRemembered(_ changes: [RememberedChange]) {
        changeIdIndex = ChangeIdIndex()
        changeIdOrder = []
        changeIdOldest = 0
        changeIdsSpilled = []
        changeIdsKept = true
        changeIdsShared = false
        for change in changes { remember(change.id, seq: change.seq, digest: change.digest) }
    }

    /// A digest of a change (64-bit FNV-1a of its JSON form), stable across processes and
    /// versions that encode changes alike: what the id window compares retries by.
    /// Toggles and sets are hashed from their fields, without encoding them (the same bytes).
    public static func digest(_ change: Change) -> UInt64 {
        if let digest = ChangeDigest.ofToggleOrSet(change) { return digest }
        // An undo is the author's request (`{"type":"undo"}`), whatever it resolved to: a retry
        // with its id finds the same digest and is acknowledged, another change with that id is
        // `id_reused`, on every node alike.
        if case .undo(let undo) = change {
            return ChangeDigest.of(Array((undo.redo ? #"{"type":"redo"}"# : #"{"type":"undo"}"#).utf8))
        }
        var out = JSONWriter(capacity: 96)
        change.encode(into: &out)
        return ChangeDigest.of(out.bytes)
    }

    /// The window's size past which its ring and index take room for the whole window.
    static let windowReservedFrom = 1_024

    /// `hash`: `changeId.hashValue` when the caller has it already. Never on a shared window
    /// (``ownChangeIds()`` comes first).
    private mutating func remember(_ changeId: String, seq: UInt64, digest: UInt64, hash: Int? = nil) {
        guard changeIdsKept else { return }
        let remembered = RememberedChange(id: changeId, seq: seq, digest: digest)
        let slot: Int
        if changeIdOrder.count < limits.idempotencyWindow {
            slot = changeIdOrder.count
            if slot == Self.windowReservedFrom {
                // A busy session: room for the whole window at once. Doubling from here copied
                // the ring four more times on the way to 10,000 (to a capacity of 16,384), and
                // each large buffer came from malloc's slow path: 7% of a loaded event loop
                // while 1,000 sessions' windows filled. Quiet sessions never reach this.
                changeIdOrder.reserveCapacity(limits.idempotencyWindow)
                changeIdIndex.reserve(limits.idempotencyWindow)
            }
            changeIdOrder.append(remembered)
        } else {
            slot = changeIdOldest
            changeIdIndex.remove(slot: slot)
            // A committed replica reading its window from here may still need the id forgotten.
            if changeIdsFollowed { changeIdsSpilled.append(changeIdOrder[slot]) }
            changeIdOrder[slot] = remembered
            changeIdOldest = (changeIdOldest + 1) % changeIdOrder.count
        }
        changeIdIndex.insert(slot: slot, hash: hash ?? changeId.hashValue)
    }

    /// Validates, then mutates. Returns the resolved change and the collapse effects; for
    /// `removeRow` and `moveRow` also sets where the row was (found once, where it is removed).
    private mutating func perform(_ change: Change, seq next: UInt64, origin: inout RowOrigin?) throws(ProtocolError) -> (
        Change, CollapseEffects
    ) {
        switch change {
        case .toggle(let ref):
            let position = try resolve(ref)
            let key = sections[position].key
            return (.toggle(section: .key(key)), setCollapsed(at: position, to: !sections[position].collapsed))

        case .setCollapsed(let ref, let collapsed):
            let position = try resolve(ref)
            let key = sections[position].key
            return (.setCollapsed(section: .key(key), collapsed: collapsed), setCollapsed(at: position, to: collapsed))

        case .setAll(let collapsed):
            if !collapsed && options.accordion && sections.count > 1 {
                throw ProtocolError(.invalidValue, "expand all is not possible in accordion mode", field: "collapsed")
            }
            var effects = CollapseEffects()
            for position in sections.indices where sections[position].collapsed != collapsed {
                sections[position].collapsed = collapsed
                effects.append(CollapseEffect(key: sections[position].key, collapsed: collapsed))
            }
            return (.setAll(collapsed: collapsed), effects)

        case .reveal(let rowKey):
            guard let sectionKey = rowSections[rowKey], let position = sectionPositions[sectionKey] else {
                throw ProtocolError(.unknownRow, "no row has the key \"\(rowKey.prefix(64))\"", field: "row")
            }
            let effects = sections[position].collapsed ? setCollapsed(at: position, to: false) : []
            return (.reveal(row: rowKey), effects)

        case .addSection(var new):
            guard sections.count < limits.maxSections else {
                throw ProtocolError(.limitReached, "the table already has \(limits.maxSections) sections")
            }
            try Self.checkText(limits: limits, new.title, field: "title")
            try Self.checkOptionalText(limits: limits, new.detail, field: "detail")
            try Self.checkOptionalText(limits: limits, new.footer, field: "footer")
            let key = try Self.newKey(limits: limits, new.key, prefix: "s", seq: next, taken: { sectionPositions[$0] != nil })
            let index = new.index ?? sections.count
            guard index >= 0 && index <= sections.count else {
                throw ProtocolError(.invalidValue, "index must be between 0 and \(sections.count)", field: "index")
            }
            let collapsed = new.collapsed ?? options.sectionsInitiallyCollapsed
            let added = Section(key: key, title: new.title, detail: new.detail, footer: new.footer, collapsed: collapsed)
            try reserveText(Self.textBytes(of: added))
            sections.insert(added, at: index)
            reindexSections(from: index)
            new.key = key
            new.index = index
            new.collapsed = collapsed
            let effects = (!collapsed && options.accordion) ? collapseOthers(than: index) : []
            return (.addSection(new), effects)

        case .removeSection(let ref):
            let position = try resolve(ref)
            let removed = sections.remove(at: position)
            textBytes -= Self.textBytes(of: removed) + removed.rows.reduce(0) { $0 + Self.textBytes(of: $1) }
            sectionPositions[removed.key] = nil
            for row in removed.rows { rowSections[row.key] = nil }
            reindexSections(from: position)
            return (.removeSection(section: .key(removed.key)), [])

        case .updateSection(let ref, let patch):
            let position = try resolve(ref)
            guard patch.title != nil || patch.detail != nil || patch.footer != nil else {
                throw ProtocolError(.invalidValue, "set must change at least one of title, detail, footer", field: "set")
            }
            if let title = patch.title { try Self.checkText(limits: limits, title, field: "title") }
            if let detail = patch.detail { try Self.checkOptionalText(limits: limits, detail, field: "detail") }
            if let footer = patch.footer { try Self.checkOptionalText(limits: limits, footer, field: "footer") }
            var updated = sections[position]
            if let title = patch.title { updated.title = title }
            if let detail = patch.detail { updated.detail = detail }
            if let footer = patch.footer { updated.footer = footer }
            try reserveText(Self.textBytes(of: updated) - Self.textBytes(of: sections[position]))
            if let title = patch.title { sections[position].title = title }
            if let detail = patch.detail { sections[position].detail = detail }
            if let footer = patch.footer { sections[position].footer = footer }
            return (.updateSection(section: .key(sections[position].key), patch: patch), [])

        case .moveSection(let ref, let index):
            let position = try resolve(ref)
            guard index >= 0 && index < sections.count else {
                throw ProtocolError(.invalidValue, "index must be between 0 and \(sections.count - 1)", field: "index")
            }
            let moved = sections.remove(at: position)
            sections.insert(moved, at: index)
            reindexSections(from: min(position, index))
            return (.moveSection(section: .key(moved.key), index: index), [])

        case .addRow(let ref, var new):
            let position = try resolve(ref)
            guard sections[position].rows.count < limits.maxRowsPerSection else {
                throw ProtocolError(.limitReached, "the section already has \(limits.maxRowsPerSection) rows", field: "section")
            }
            guard rowSections.count < limits.maxRowsPerTable else {
                throw ProtocolError(.limitReached, "the table already has \(limits.maxRowsPerTable) rows")
            }
            try Self.checkText(limits: limits, new.label, field: "label")
            try Self.checkText(limits: limits, new.value, field: "value", allowEmpty: true)
            try Self.checkOptionalText(limits: limits, new.detail, field: "detail")
            let key = try Self.newKey(limits: limits, new.key, prefix: "r", seq: next, taken: { rowSections[$0] != nil })
            let count = sections[position].rows.count
            let index = new.index ?? count
            guard index >= 0 && index <= count else {
                throw ProtocolError(.invalidValue, "index must be between 0 and \(count)", field: "index")
            }
            let sectionKey = sections[position].key
            let row = Row(key: key, label: new.label, value: new.value, detail: new.detail)
            try reserveText(Self.textBytes(of: row))
            sections[position].rows.insert(row, at: index)
            rowSections[key] = sectionKey
            new.key = key
            new.index = index
            return (.addRow(section: .key(sectionKey), row: new), [])

        case .removeRow(let rowKey):
            let (position, rowIndex) = try locateRow(rowKey)
            let removed = sections[position].rows.remove(at: rowIndex)
            origin = RowOrigin(section: sections[position].key, index: rowIndex, row: removed)
            textBytes -= Self.textBytes(of: removed)
            rowSections[rowKey] = nil
            return (.removeRow(row: rowKey), [])

        case .updateRow(let rowKey, let patch):
            let (position, rowIndex) = try locateRow(rowKey)
            guard patch.label != nil || patch.value != nil || patch.detail != nil else {
                throw ProtocolError(.invalidValue, "set must change at least one of label, value, detail", field: "set")
            }
            if let label = patch.label { try Self.checkText(limits: limits, label, field: "label") }
            if let value = patch.value { try Self.checkText(limits: limits, value, field: "value", allowEmpty: true) }
            if let detail = patch.detail { try Self.checkOptionalText(limits: limits, detail, field: "detail") }
            var updated = sections[position].rows[rowIndex]
            if let label = patch.label { updated.label = label }
            if let value = patch.value { updated.value = value }
            if let detail = patch.detail { updated.detail = detail }
            try reserveText(Self.textBytes(of: updated) - Self.textBytes(of: sections[position].rows[rowIndex]))
            if let label = patch.label { sections[position].rows[rowIndex].label = label }
            if let value = patch.value { sections[position].rows[rowIndex].value = value }
            if let detail = patch.detail { sections[position].rows[rowIndex].detail = detail }
            return (.updateRow(row: rowKey, patch: patch), [])

        case .moveRow(let rowKey, let ref, let index):
            let (from, rowIndex) = try locateRow(rowKey)
            let to = try resolve(ref)
            if from != to && sections[to].rows.count >= limits.maxRowsPerSection {
                throw ProtocolError(.limitReached, "the section already has \(limits.maxRowsPerSection) rows", field: "section")
            }
            let countAfterRemoval = sections[to].rows.count - (from == to ? 1 : 0)
            let target = index ?? countAfterRemoval
            guard target >= 0 && target <= countAfterRemoval else {
                throw ProtocolError(.invalidValue, "index must be between 0 and \(countAfterRemoval)", field: "index")
            }
            let row = sections[from].rows.remove(at: rowIndex)
            origin = RowOrigin(section: sections[from].key, index: rowIndex, row: row)
            sections[to].rows.insert(row, at: target)
            rowSections[rowKey] = sections[to].key
            return (.moveRow(row: rowKey, section: .key(sections[to].key), index: target), [])

        case .importRows(let ref, var imported):
            let position = try resolve(ref)
            guard imported.carriesRows else { throw ProtocolError(.missingField, "rows is missing", field: "rows") }
            let sectionKey = sections[position].key
            let existing = sections[position].rows
            let after = (imported.replace ? 0 : existing.count) + imported.rows.count
            guard after <= limits.maxRowsPerSection else {
                throw ProtocolError(
                    .limitReached, "the section would have \(after) rows; it may have \(limits.maxRowsPerSection)", field: "rows")
            }
            guard rowSections.count - (imported.replace ? existing.count : 0) + imported.rows.count <= limits.maxRowsPerTable else {
                throw ProtocolError(.limitReached, "the table would have more than \(limits.maxRowsPerTable) rows", field: "rows")
            }
            // A replaced section's own keys are free again; keys within the import must differ.
            var keys = Set<String>(minimumCapacity: imported.rows.count)
            let homes = rowSections
            let freed = imported.replace ? sectionKey : nil
            func taken(_ key: String) -> Bool { keys.contains(key) || homes[key].map { $0 != freed } ?? false }
            var rows: [Row] = []
            rows.reserveCapacity(imported.rows.count)
            var added = 0
            for index in imported.rows.indices {
                let new = imported.rows[index]
                let key: String
                do throws(ProtocolError) {
                    try Self.checkText(limits: limits, new.label, field: "label")
                    try Self.checkText(limits: limits, new.value, field: "value", allowEmpty: true)
                    try Self.checkOptionalText(limits: limits, new.detail, field: "detail")
                    // Allocated keys name the import's seq and the row's place in it: `r<seq>.<n>`.
                    key = try Self.newKey(limits: limits, new.key, prefix: "r", seq: next, suffix: ".\(index + 1)", taken: taken)
                } catch {
                    throw ProtocolError(error.code, "rows.\(index).\(error.message)", field: error.field.map { "rows.\(index).\($0)" })
                }
                keys.insert(key)
                let row = Row(key: key, label: new.label, value: new.value, detail: new.detail)
                added += Self.textBytes(of: row)
                rows.append(row)
                imported.rows[index].key = key
                imported.rows[index].index = nil
            }
            let removed = imported.replace ? existing.reduce(0) { $0 + Self.textBytes(of: $1) } : 0
            try reserveText(added - removed)
            if imported.replace {
                for row in existing { rowSections[row.key] = nil }
                sections[position].rows = rows
            } else {
                sections[position].rows.append(contentsOf: rows)
            }
            for row in rows { rowSections[row.key] = sectionKey }
            return (.importRows(section: .key(sectionKey), rows: imported), [])

        case .undo(let undo):
            return try performUndo(undo, seq: next)

        case .setOptions(let patch):
            guard !patch.isEmpty else {
                throw ProtocolError(.invalidValue, "options must change at least one option", field: "options")
            }
            if let indicator = patch.collapsedIndicator { try Self.checkIndicator(limits: limits, indicator, field: "collapsedIndicator") }
            if let indicator = patch.expandedIndicator { try Self.checkIndicator(limits: limits, indicator, field: "expandedIndicator") }
            if let threshold = patch.busyThresholdMs, threshold < 0 || threshold > limits.maxBusyThresholdMs {
                throw ProtocolError(.invalidValue, "busyThresholdMs must be between 0 and \(limits.maxBusyThresholdMs)", field: "busyThresholdMs")
            }
            if let lines = patch.titleLines, lines < 0 || lines > limits.maxTitleLines {
                throw ProtocolError(.invalidValue, "titleLines must be between 0 and \(limits.maxTitleLines)", field: "titleLines")
            }
            options.merge(patch)
            var effects = CollapseEffects()
            // Turning accordion on keeps the first expanded section and collapses the rest.
            if patch.accordion == true, let first = sections.firstIndex(where: { !$0.collapsed }) {
                effects = collapseOthers(than: first)
            }
            return (.setOptions(patch), effects)
        }
    }

    /// Applies an undo or redo: its expectations checked, then its changes and restored states
    /// on a copy, which replaces the table only when every part applied. Any part refused
    /// refuses the whole as `undo_conflict`, naming why.
    private mutating func performUndo(_ undo: UndoChange, seq next: UInt64) throws(ProtocolError) -> (Change, CollapseEffects) {
        let word = undo.redo ? "redo" : "undo"
        guard !undo.isRequest else { throw ProtocolError(.invalidValue, "an \(word) must be resolved before it is applied", field: "of") }
        if let unmet = undo.expect.first(where: { !holds($0) }) {
            throw ProtocolError(.undoConflict, "cannot \(word) change \(undo.of): \(Self.describe(unmet)) changed since", field: "type")
        }
        // The restored states must land on sections that exist once the changes applied.
        var added = Set<String>()
        var removed = Set<String>()
        for change in undo.changes {
            if case .undo = change { throw ProtocolError(.invalidValue, "an undo cannot hold another", field: "changes") }
            if case .addSection(let new) = change, let key = new.key { added.insert(key) }
            if case .removeSection(.key(let key)) = change { removed.insert(key) }
        }
        for effect in undo.restore where removed.contains(effect.key) || (sectionPositions[effect.key] == nil && !added.contains(effect.key)) {
            throw ProtocolError(.undoConflict, "cannot \(word) change \(undo.of): section \"\(effect.key.prefix(64))\" is gone", field: "type")
        }
        // Applied in place: each part is all-or-nothing on its own, so only a second part can
        // leave something to take back. The undos the server makes have one part, or a section
        // put back and then its rows (`addSection`, `importRows`): if the rows fail, the empty
        // section goes again. Anything else (never made here) is applied on a copy. A copy of a
        // table of a million rows is a copy of its row index: not paid by every undo.
        let pairedSection: String? = {
            guard undo.changes.count == 2, case .addSection(let new) = undo.changes[0], case .importRows(.key(let key), _) = undo.changes[1],
                new.key == key
            else { return nil }
            return key
        }()
        let inPlace = undo.changes.count <= 1 || pairedSection != nil
        var copy: Table? = inPlace ? nil : self
        var resolved: [Change] = []
        resolved.reserveCapacity(undo.changes.count)
        var touched = Set<String>()
        // What the first part did to other sections (accordion), taken back with it if need be.
        var firstEffects = CollapseEffects()
        for (index, change) in undo.changes.enumerated() {
            var origin: RowOrigin?
            do throws(ProtocolError) {
                let (done, effects): (Change, CollapseEffects)
                if copy != nil {
                    (done, effects) = try copy!.perform(change, seq: next, origin: &origin)  // safe: checked non-nil just before
                } else {
                    (done, effects) = try perform(change, seq: next, origin: &origin)
                }
                resolved.append(done)
                if index == 0 { firstEffects = effects }
                for effect in effects { touched.insert(effect.key) }
                if case .addSection(let new) = done, let key = new.key { touched.insert(key) }
            } catch {
                if index == 1, let key = pairedSection, let position = sectionPositions[key] {
                    // The section put back by the first part, still empty: taken away again.
                    var none: RowOrigin?
                    _ = try? perform(.removeSection(section: .key(sections[position].key)), seq: next, origin: &none)
                    for effect in firstEffects where effect.key != key {
                        if let other = sectionPositions[effect.key] { sections[other].collapsed = !effect.collapsed }
                    }
                }
                throw ProtocolError(.undoConflict, "cannot \(word) change \(undo.of): \(error.message)", field: "type")
            }
        }
        if let copy { self = copy }
        for effect in undo.restore {
            guard let position = sectionPositions[effect.key] else { continue }  // checked above
            sections[position].collapsed = effect.collapsed
            touched.insert(effect.key)
        }
        // Every section whose state a part set, with its final state, in table order: clients
        // apply the changes, then this map, and hold what the table holds.
        var effects = CollapseEffects()
        for section in sections where touched.contains(section.key) {
            effects.append(CollapseEffect(key: section.key, collapsed: section.collapsed))
        }
        return (.undo(UndoChange(of: undo.of, redo: undo.redo, changes: resolved, restore: undo.restore, expect: undo.expect)), effects)
    }

    /// Whether the table holds what `expectation` says.
    func holds(_ expectation: UndoExpectation) -> Bool {
        switch expectation {
        case .section(let key, let title, let detail, let footer):
            guard let position = sectionPositions[key] else { return false }
            let section = sections[position]
            return section.title == title && section.detail == detail && section.footer == footer
        case .noSection(let key):
            return sectionPositions[key] == nil
        case .collapsed(let key, let collapsed):
            return sectionPositions[key].map { sections[$0].collapsed == collapsed } ?? false
        case .row(let row, let section):
            guard rowSections[row.key] == section, let position = sectionPositions[section] else { return false }
            return sections[position].rows.first(where: { $0.key == row.key }) == row
        case .rows(let section, let count, let digest):
            guard let position = sectionPositions[section] else { return false }
            return sections[position].rows.count == count && Self.rowsDigest(sections[position].rows) == digest
        case .options(let expected):
            return options == expected
        }
    }

    /// Words for what an unmet expectation was about, for the refusal.
    private static func describe(_ expectation: UndoExpectation) -> String {
        switch expectation {
        case .section(let key, _, _, _), .noSection(let key): return "section \"\(key.prefix(64))\""
        case .collapsed(let key, _): return "whether section \"\(key.prefix(64))\" is collapsed"
        case .row(let row, _): return "row \"\(row.key.prefix(64))\""
        case .rows(let section, _, _): return "the rows of section \"\(section.prefix(64))\""
        case .options: return "the table's options"
        }
    }

    /// Sets one section's state; in accordion mode expanding it collapses every other one.
    private mutating func setCollapsed(at position: Int, to collapsed: Bool) -> CollapseEffects {
        if sections[position].collapsed == collapsed { return [] }
        sections[position].collapsed = collapsed
        if collapsed || !options.accordion {
            return CollapseEffects(CollapseEffect(key: sections[position].key, collapsed: collapsed))
        }
        // Table order, with the expanded section in its place.
        var effects = CollapseEffects()
        for index in sections.indices {
            if index == position {
                effects.append(CollapseEffect(key: sections[index].key, collapsed: false))
            } else if !sections[index].collapsed {
                sections[index].collapsed = true
                effects.append(CollapseEffect(key: sections[index].key, collapsed: true))
            }
        }
        return effects
    }

    private mutating func collapseOthers(than position: Int) -> CollapseEffects {
        var effects = CollapseEffects()
        for index in sections.indices where index != position && !sections[index].collapsed {
            sections[index].collapsed = true
            effects.append(CollapseEffect(key: sections[index].key, collapsed: true))
        }
        return effects
    }

    private mutating func reindexSections(from start: Int) {
        for position in start..<sections.count { sectionPositions[sections[position].key] = position }
    }

    /// The position of the section `ref` names, or why it names none (no such key or title,
    /// or a title several sections share): what every change naming a section meets.
    public func position(of ref: SectionRef) throws(ProtocolError) -> Int { try resolve(ref) }

    private func resolve(_ ref: SectionRef) throws(ProtocolError) -> Int {
        switch ref {
        case .key(let key):
            guard let position = sectionPositions[key] else {
                throw ProtocolError(.unknownSection, "no section has the key \"\(key.prefix(64))\"", field: "section")
            }
            return position
        case .title(let title):
            var found: Int?
            for position in sections.indices where sections[position].title == title {
                if found != nil {
                    throw ProtocolError(.ambiguousTitle, "several sections have the title \"\(title.prefix(64))\"; name one by key", field: "title")
                }
                found = position
            }
            guard let found else {
                throw ProtocolError(.unknownSection, "no section has the title \"\(title.prefix(64))\"", field: "title")
            }
            return found
        }
    }

    private func locateRow(_ rowKey: String) throws(ProtocolError) -> (section: Int, row: Int) {
        guard let sectionKey = rowSections[rowKey], let position = sectionPositions[sectionKey],
            let rowIndex = sections[position].rows.firstIndex(where: { $0.key == rowKey })
        else {
            throw ProtocolError(.unknownRow, "no row has the key \"\(rowKey.prefix(64))\"", field: "row")
        }
        return (position, rowIndex)
    }

    /// The key a new section or row gets: the client's (validated, unused), or `<prefix><seq>`,
    /// suffixed `-1`, `-2`, ... in the rare case a client already took that name.
    private static func newKey(
        limits: TableLimits, _ requested: String?, prefix: String, seq next: UInt64, suffix fixed: String = "", taken: (String) -> Bool
    ) throws(ProtocolError) -> String {
        if let requested {
            try Self.checkKey(limits: limits, requested, field: "key")
            guard !taken(requested) else {
                throw ProtocolError(.duplicateKey, "the key \"\(requested)\" is already used", field: "key")
            }
            return requested
        }
        let base = prefix + String(next) + fixed
        var candidate = base
        var suffix = 0
        while taken(candidate) {
            suffix += 1
            candidate = base + "-" + String(suffix)
        }
        return candidate
    }

    /// Counts `delta` more text bytes against `limits.maxTextBytesPerTable` (refusing the change
    /// when it would pass it). Called last in validation, so a refusal leaves nothing changed.
    private mutating func reserveText(_ delta: Int) throws(ProtocolError) {
        guard delta <= 0 || textBytes + delta <= limits.maxTextBytesPerTable else {
            throw ProtocolError(.limitReached, "the table already holds its maximum of \(limits.maxTextBytesPerTable) bytes of text")
        }
        textBytes += delta
    }

    private static func textBytes(of section: Section) -> Int {
        section.title.utf8.count + (section.detail?.utf8.count ?? 0) + (section.footer?.utf8.count ?? 0)
    }

    private static func textBytes(of row: Row) -> Int {
        row.label.utf8.count + row.value.utf8.count + (row.detail?.utf8.count ?? 0)
    }

    // The checks are static, given the limits: called on `self` from a mutating method, they
    // made the compiler copy the whole table (a retain of every stored property) first.
    private static func checkKey(limits: TableLimits, _ key: String, field: String) throws(ProtocolError) {
        guard !key.isEmpty, key.utf8.count <= limits.maxKeyBytes else {
            throw ProtocolError(.invalidValue, "\(field) must be 1 to \(limits.maxKeyBytes) bytes", field: field)
        }
        var key = key
        let allowed = key.withUTF8 { utf8 in utf8.allSatisfy(Self.isKeyByte) }
        guard allowed else {
            throw ProtocolError(.invalidValue, "\(field) may only hold letters, digits and _ - . :", field: field)
        }
    }

    /// Refuses a change id that is not 1 to `maxKeyBytes` key bytes (``ChangeIdScope`` relies on it
    /// holding no `/`).
    static func checkChangeId(limits: TableLimits, _ id: String) throws(ProtocolError) {
        try checkKey(limits: limits, id, field: "id")
    }

    /// Refuses a change id's key (``ChangeIdScope``) whose id, after the scope, is not a change id.
    /// Read in place: every change with an id comes through here, and slicing the id out as a
    /// string of its own would allocate for each.
    static func checkChangeKey(limits: TableLimits, _ key: String) throws(ProtocolError) {
        var key = key
        let valid = key.withUTF8 { bytes in
            let start = bytes.lastIndex(of: ChangeIdScope.separator).map { $0 + 1 } ?? 0
            let count = bytes.count - start
            return count > 0 && count <= limits.maxKeyBytes && bytes[start...].allSatisfy(Self.isKeyByte)
        }
        if !valid { try checkChangeId(limits: limits, ChangeIdScope.id(ofKey: key)) }
    }

    /// Whether a key may hold `byte`: letters, digits, `_ - . :`. One test against a bit set of
    /// the allowed ASCII bytes instead of a chain of ranges: every change id is checked.
    @inline(__always) static func isKeyByte(_ byte: UInt8) -> Bool {
        // Bytes 0-63: `-` `.` and `0`-`9` `:`; bytes 64-127: `A`-`Z`, `_`, `a`-`z`.
        let below64: UInt64 = 0x07FF_6000_0000_0000
        let from64: UInt64 = 0x07FF_FFFE_87FF_FFFE
        return byte < 64 ? below64 >> byte & 1 == 1 : byte < 128 && from64 >> (byte - 64) & 1 == 1
    }

    private static func checkText(limits: TableLimits, _ text: String, field: String, allowEmpty: Bool = false) throws(ProtocolError) {
        if !allowEmpty && text.isEmpty {
            throw ProtocolError(.invalidValue, "\(field) must not be empty", field: field)
        }
        guard text.utf8.count <= limits.maxTextBytes else {
            throw ProtocolError(.tooLong, "\(field) is longer than \(limits.maxTextBytes) bytes", field: field)
        }
    }

    private static func checkOptionalText(limits: TableLimits, _ text: String?, field: String) throws(ProtocolError) {
        if let text { try Self.checkText(limits: limits, text, field: field, allowEmpty: true) }
    }

    private static func checkIndicator(limits: TableLimits, _ text: String, field: String) throws(ProtocolError) {
        guard !text.isEmpty, text.utf8.count <= limits.maxIndicatorBytes else {
            throw ProtocolError(.invalidValue, "\(field) must be 1 to \(limits.maxIndicatorBytes) bytes", field: field)
        }
    }
}
