/// An undo or a redo as the table applies it: ordinary changes, then collapsed states set as they
/// were, applied together or not at all, and only while the table still holds what the undo was
/// worked out from.
///
/// Members never send this form: they send `{"type":"undo"}` or `{"type":"redo"}` and the
/// server resolves it, from the ``UndoRecord`` it kept when the change was applied, into this
/// change, which is then ordered like any other (and so replicated, logged and replayed). The
/// expectations travel with it, so every replica checks them against the same state: a table
/// that changed since in a way that makes the undo surprising (the row was edited by someone
/// else since) refuses it with `undo_conflict`, changing nothing.
public struct UndoChange: Equatable, Sendable {
    /// The sequence number of the change undone (or redone).
    public var of: UInt64
    /// Whether this redoes the change rather than undoing it.
    public var redo: Bool
    /// The changes that take the change back (or make it again), applied in order.
    public var changes: [Change]
    /// Collapsed states set after the changes, exactly (not through accordion rules): the
    /// states the change altered, as they were before it (or after it, for a redo).
    public var restore: CollapseEffects
    /// What the table must hold for the changes to mean what the undo promises. Written to the
    /// log and to shared streams, left out of what members receive.
    public var expect: [UndoExpectation]

    /// A member's request, before the server resolved it from the author's ``UndoRecord``:
    /// what an order queues in place of the change until its turn comes. Never applied as such.
    public static func request(redo: Bool) -> UndoChange { UndoChange(of: 0, redo: redo, changes: []) }

    /// Whether this is a request still to be resolved (``request(redo:)``).
    public var isRequest: Bool { of == 0 }

    public init(of: UInt64, redo: Bool, changes: [Change], restore: CollapseEffects = [], expect: [UndoExpectation] = []) {
        self.of = of
        self.redo = redo
        self.changes = changes
        self.restore = restore
        self.expect = expect
    }
}

/// One thing the table must hold for an ``UndoChange`` to apply.
public enum UndoExpectation: Equatable, Sendable {
    /// Section `key` exists with this title, detail and footer.
    case section(key: String, title: String, detail: String?, footer: String?)
    /// No section has `key`.
    case noSection(key: String)
    /// Section `key` exists and is collapsed (`true`) or expanded.
    case collapsed(key: String, collapsed: Bool)
    /// This row exists, as it is here, in section `section`.
    case row(Row, section: String)
    /// Section `section` holds `count` rows whose keys and values digest to `digest`
    /// (``Table/rowsDigest(_:)``): its rows are exactly as the undo left or found them.
    case rows(section: String, count: Int, digest: UInt64)
    /// The table's options are exactly these.
    case options(TableOptions)
}

/// One direction of an ``UndoRecord``: what to apply and what to expect first.
public struct UndoStep: Equatable, Sendable {
    public var changes: [Change]
    public var restore: CollapseEffects
    public var expect: [UndoExpectation]

    public init(changes: [Change] = [], restore: CollapseEffects = [], expect: [UndoExpectation] = []) {
        self.changes = changes
        self.restore = restore
        self.expect = expect
    }
}

/// How to take one applied change back (`backward`) and make it again (`forward`), worked out
/// from the table just before and just after it (``Table/undoPrelude(for:)``,
/// ``Table/undoRecord(for:prelude:)``). An author's undo applies `backward`; a redo of that
/// applies `forward`; the record moves between the two and is never worked out again.
public struct UndoRecord: Equatable, Sendable {
    /// The change's sequence number.
    public var seq: UInt64
    /// The change's wire type (`toggle`, `addRow`, ...), for messages about it.
    public var kind: String
    /// How to take the change back and make it again: both steps, or (for a change that only
    /// set collapsed states, most of them) just those states, the steps built when an undo asks.
    /// A record is kept for every change a member makes: one of a toggle allocates nothing.
    private var storage: Storage
    private enum Storage: Equatable, Sendable {
        case steps(backward: UndoStep, forward: UndoStep)
        /// The states the change set (its event's `collapsed`): each was the opposite before.
        case collapse(CollapseEffects)
    }

    /// The step that takes the change back.
    public var backward: UndoStep {
        switch storage {
        case .steps(let backward, _): return backward
        case .collapse(let effects):
            return UndoStep(
                restore: CollapseEffects(effects.map { CollapseEffect(key: $0.key, collapsed: !$0.collapsed) }),
                expect: effects.map { .collapsed(key: $0.key, collapsed: $0.collapsed) })
        }
    }

    /// The step that makes the change again.
    public var forward: UndoStep {
        switch storage {
        case .steps(_, let forward): return forward
        case .collapse(let effects):
            return UndoStep(restore: effects, expect: effects.map { .collapsed(key: $0.key, collapsed: !$0.collapsed) })
        }
    }
    /// The change touched more rows than an undo keeps (``maxRows``): it cannot be taken back,
    /// and an undo says so instead of silently taking back the change before it.
    public var tooLarge = false

    /// Most rows an undo record keeps (a removed section's, an import's, the rows an import
    /// replaced): past it the change is recorded as ``tooLarge``. Without a bound, fifty imports
    /// of 200,000 rows would keep gigabytes for one author.
    public static let maxRows = 20_000

    public init(seq: UInt64, kind: String, backward: UndoStep, forward: UndoStep, tooLarge: Bool = false) {
        self.seq = seq
        self.kind = kind
        self.storage = .steps(backward: backward, forward: forward)
        self.tooLarge = tooLarge
    }

    /// The record of a change that only set the collapsed states in `effects` (each was the
    /// opposite before it).
    public init(seq: UInt64, kind: String, collapsed effects: CollapseEffects) {
        self.seq = seq
        self.kind = kind
        self.storage = .collapse(effects)
    }

    /// The change that applies one direction of this record to `table` as it is now: positions
    /// that no longer exist (rows or sections removed since) are brought within range, so the
    /// change lands as near as it can to where it was.
    public func change(redo: Bool, on table: Table) -> UndoChange {
        let step = redo ? forward : backward
        return UndoChange(
            of: seq, redo: redo, changes: step.changes.map { table.clampingPositions($0) }, restore: step.restore, expect: step.expect)
    }
}

/// What a change will overwrite, read from the table before it is applied: the part of an
/// ``UndoRecord`` the event alone does not say.
public enum UndoPrelude: Sendable {
    /// The event says everything needed (collapse changes, additions, removals and moves of rows).
    case none
    /// A section about to be removed, whole, and its position.
    case section(Section, index: Int)
    /// A section's header (its rows left out) before an update, or its position before a move.
    case header(Section, index: Int)
    /// A row before an update, and its section.
    case row(Row, section: String)
    /// The options before a change of them.
    case options(TableOptions)
    /// A section's rows before an import.
    case rows([Row])
    /// The change is refused or is itself an undo (undos are not undone: they are redone).
    case notRecorded
    /// The change touches more than ``UndoRecord/maxRows`` rows: recorded as too large to undo.
    case tooLarge
}
