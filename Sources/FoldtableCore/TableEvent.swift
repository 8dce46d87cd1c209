/// One applied change, as every member of a session sees it.
public struct TableEvent: Equatable, Sendable {
    /// The session's sequence number of this change (1, 2, 3, ... without gaps).
    public var seq: UInt64
    public var author: Author
    /// The author's change id, when it gave one.
    public var changeId: String?
    /// The change as resolved by the table.
    public var change: Change
    /// Every section whose collapsed state this change altered, in table order.
    public var collapsed: CollapseEffects
    /// The commit time (see ``time``) in three parts that fill the tail padding of `collapsed`:
    /// whether there is one, its whole seconds (a 32-bit count lasts until 2106) and the
    /// milliseconds past them. A `UInt64?` here took the event from 128 to 144 bytes, past what a
    /// log's append of four allocates on malloc's fast path (see the storage tests).
    private var timed = false
    private var timeMilliseconds: UInt16 = 0
    private var timeSeconds: UInt32 = 0
    /// For `removeRow` and `moveRow`: where the row was and what it held, so a client that has
    /// not loaded that section's rows can still keep its row counts and show the moved row.
    public var from: RowOrigin? {
        get { origin?.value }
        set { origin = newValue.map(RowOriginBox.init) }
    }
    /// `from`, boxed: inline it was 88 bytes of every event (and of every entry a session keeps
    /// for the log) for the two kinds of change that have one.
    private var origin: RowOriginBox?

    /// The sections this event expanded (their rows must be sent to members).
    public var expandedSections: [String] {
        collapsed.compactMap { $0.collapsed ? nil : $0.key }
    }

    /// The sections whose rows members may need because of this event (expanded, or reloaded),
    /// if they show them.
    public var sectionsNeedingRows: [String] {
        // Built in one array, and none for an event that expands and reloads nothing (most):
        // this runs for every change a session applies.
        var keys: [String] = []
        for effect in collapsed where !effect.collapsed { keys.append(effect.key) }
        switch change {
        case .importRows(.key(let key), _): keys.append(key)
        case .undo: keys += reloadedSections
        default: break
        }
        return keys
    }

    /// The sections whose rows this event brought in wholesale (an import): members holding their
    /// old rows no longer do, and those that show them must be sent the new ones.
    public var reloadedSections: [String] {
        switch change {
        case .importRows(.key(let key), _): return [key]
        case .undo(let undo):
            return undo.changes.compactMap { if case .importRows(.key(let key), _) = $0 { return key } else { return nil } }
        default: return []
        }
    }

    /// The sections this event added (members hold them whole: they have no rows yet), also
    /// inside an undo, in order.
    public var addedSections: [String] {
        switch change {
        case .addSection(let new): return new.key.map { [$0] } ?? []
        case .undo(let undo):
            return undo.changes.compactMap { if case .addSection(let new) = $0 { return new.key } else { return nil } }
        default: return []
        }
    }

    /// The sections this event removed, also inside an undo.
    public var removedSections: [String] {
        switch change {
        case .removeSection(.key(let key)): return [key]
        case .undo(let undo):
            return undo.changes.compactMap { if case .removeSection(.key(let key)) = $0 { return key } else { return nil } }
        default: return []
        }
    }
}

// In an extension, so that the struct keeps its memberwise initializer: delegating to it builds
// the value whole. Assigning the properties one by one built it in a stack slot the optimizer
// could not promote, then returned a full copy of it (its strings and arrays retained) and
// destroyed the slot: once per applied change.
extension TableEvent {
    public init(
        seq: UInt64, author: Author, changeId: String?, change: Change, collapsed: CollapseEffects, from: RowOrigin? = nil, time: UInt64? = nil
    ) {
        self.init(seq: seq, author: author, changeId: changeId, change: change, collapsed: collapsed, origin: from.map(RowOriginBox.init))
        if let time { self.time = time }
    }

    /// When the change was committed, in milliseconds since the Unix epoch: set by whoever orders
    /// the session (this node's order, or the shared stream's entry), never by the table, which
    /// has no clock. `nil` for events of logs written before events carried a time. Times past
    /// the year 2106 are not kept (`nil`).
    public var time: UInt64? {
        get { timed ? UInt64(timeSeconds) * 1_000 + UInt64(timeMilliseconds) : nil }
        set {
            let seconds = newValue.flatMap { UInt32(exactly: $0 / 1_000) }
            timed = seconds != nil
            timeSeconds = seconds ?? 0
            timeMilliseconds = seconds == nil ? 0 : UInt16(truncatingIfNeeded: (newValue ?? 0) % 1_000)
        }
    }

    /// Whether `other` is this event, its commit time aside: a replica re-applying a logged
    /// change produces the event without a time (the table has no clock).
    public func isSameChange(as other: TableEvent) -> Bool {
        guard time != other.time else { return self == other }
        var copy = self
        copy.time = other.time
        return copy == other
    }
}

/// Where a removed or moved row was before the change.
public struct RowOrigin: Equatable, Sendable {
    /// The key of the section that held the row.
    public var section: String
    /// Its position there.
    public var index: Int
    /// The row as it was.
    public var row: Row

    public init(section: String, index: Int, row: Row) {
        self.section = section
        self.index = index
        self.row = row
    }
}

/// A ``RowOrigin`` held by reference; compared by value.
private final class RowOriginBox: Equatable, Sendable {
    let value: RowOrigin

    init(_ value: RowOrigin) { self.value = value }

    static func == (lhs: RowOriginBox, rhs: RowOriginBox) -> Bool { lhs.value == rhs.value }
}

/// One entry of an event's `collapsed` map.
public struct CollapseEffect: Equatable, Sendable {
    public var key: String
    public var collapsed: Bool

    public init(key: String, collapsed: Bool) {
        self.key = key
        self.collapsed = collapsed
    }
}

/// The result of applying a change.
public enum ApplyOutcome: Equatable, Sendable {
    /// The change was applied and produced this event.
    case applied(TableEvent)
    /// A change with the same id was applied before, at `seq`; nothing changed.
    case duplicate(seq: UInt64)

    /// The new event; `nil` for a retry.
    public var appliedEvent: TableEvent? {
        if case .applied(let event) = self { return event }
        return nil
    }

    /// The sequence number of the event: the new one, or the original one of a retry.
    public var seq: UInt64 {
        switch self {
        case .applied(let event): return event.seq
        case .duplicate(let seq): return seq
        }
    }
}
