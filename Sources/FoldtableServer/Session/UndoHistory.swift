import FoldtableCore

/// Each author's changes that can be taken back, and those taken back that can be made again:
/// two stacks of ``UndoRecord`` per author, kept by the session that ordered the changes.
///
/// An author is a change-id scope (`ChangeIdScope`): a token's user on every connection and
/// every device, in open mode the client's own `idScope` (a browser tab, a terminal user), else
/// the connection. Records are kept in memory for the life of the session on this node: after a
/// restart, an eviction or a lost append there is nothing to undo, never a wrong undo.
///
/// Bounded: at most `depth` records per author and `authors` authors (the one idle longest is
/// forgotten first), so a session of 10,000 editors holds at most `depth x authors` records.
struct UndoHistory {
    /// Most changes an author can take back, newest first.
    let depth: Int
    /// Most authors remembered at once.
    let authors: Int

    private struct Stacks {
        var done: [UndoRecord] = []
        /// Records of `done` below this index are past the depth: kept until the next trim,
        /// never undone.
        var floor = 0
        var undone: [UndoRecord] = []
        /// When the author last changed something (a counter, not a clock).
        var used: UInt64 = 0
    }
    private var stacks: [String: Stacks] = [:]
    private var clock: UInt64 = 0

    init(depth: Int, authors: Int) {
        self.depth = max(0, depth)
        self.authors = max(1, authors)
    }

    var isEmpty: Bool { stacks.isEmpty }

    /// A new change of `author`: it can be undone, and what it undid can no longer be redone.
    /// One lookup of the author on this path (every change a member makes passes here).
    mutating func recorded(_ record: UndoRecord, by author: String) {
        guard depth > 0 else { return }
        clock += 1
        if stacks.count >= authors && stacks[author] == nil { forgetIdlest() }
        let now = clock
        let depth = self.depth
        func push(_ entry: inout Stacks) {
            entry.done.append(record)
            if !entry.undone.isEmpty { entry.undone.removeAll() }
            entry.used = now
            entry.floor = max(0, entry.done.count - depth)
            // Trimmed once it holds twice the depth: a `removeFirst` at every change past the
            // depth moved the whole stack (fifty records) for each change an author made.
            if entry.done.count >= 2 * depth {
                entry.done.removeFirst(entry.floor)
                entry.floor = 0
            }
        }
        push(&stacks[author, default: Stacks()])
    }

    /// Forgets the half of the authors idle longest: in bulk, so that a session with more
    /// authors than it remembers pays a sort now and then, not a scan per change.
    private mutating func forgetIdlest() {
        let idle = stacks.sorted { $0.value.used < $1.value.used }.prefix(max(1, stacks.count / 2))
        for (author, _) in idle { stacks[author] = nil }
    }

    /// What `author`'s next undo (or redo) would apply, without taking it.
    func next(redo: Bool, of author: String) -> UndoRecord? {
        guard let entry = stacks[author] else { return nil }
        if redo { return entry.undone.last }
        return entry.done.count > entry.floor ? entry.done.last : nil
    }

    /// `author`'s undo (or redo) of the change at `seq` was applied: its record moves to the
    /// other stack. Nothing moves when it is not the top one (a retry, or a race between nodes).
    mutating func applied(redo: Bool, of seq: UInt64, by author: String) {
        guard var entry = stacks[author] else { return }
        if redo {
            guard let top = entry.undone.last, top.seq == seq else { return }
            entry.done.append(entry.undone.removeLast())
        } else {
            guard let top = entry.done.last, top.seq == seq else { return }
            entry.undone.append(entry.done.removeLast())
        }
        clock += 1
        entry.used = clock
        stacks[author] = entry
    }

    /// The refusal of an undo (or redo) with nothing left to apply.
    static func nothingLeft(redo: Bool) -> ProtocolError {
        redo
            ? ProtocolError(.nothingToRedo, "nothing you undid is left to redo", field: "type")
            : ProtocolError(.nothingToUndo, "no change of yours is left to undo", field: "type")
    }

    /// Drops `author`'s top record (its change is too large to undo): the next undo goes on
    /// to the change before it.
    mutating func drop(redo: Bool, of seq: UInt64, by author: String) {
        if redo {
            if stacks[author]?.undone.last?.seq == seq { stacks[author]?.undone.removeLast() }
        } else if stacks[author]?.done.last?.seq == seq {
            stacks[author]?.done.removeLast()
        }
    }

    /// The refusal of an undo of a change too large to keep (see `UndoRecord.maxRows`).
    static func tooLarge(_ record: UndoRecord) -> ProtocolError {
        ProtocolError(
            .limitReached,
            "change \(record.seq) (\(record.kind)) touched more than \(UndoRecord.maxRows) rows and cannot be undone; the next undo goes on to the change before it",
            field: "type")
    }

    /// The refusal of an undo of an options change by a member who is no longer an owner.
    static let ownerOnly = ProtocolError(.forbidden, "only an owner changes the table's options, also by undo", field: "type")

    /// The refusal of an undo whose id was used for another change.
    static func idReused(_ key: String) -> ProtocolError {
        ProtocolError(.idReused, "the change id \"\(ChangeIdScope.id(ofKey: key).prefix(64))\" was already used for a different change", field: "id")
    }

    /// Forgets everything (changes it recorded were lost with a failed append).
    mutating func removeAll() { stacks.removeAll() }
}
