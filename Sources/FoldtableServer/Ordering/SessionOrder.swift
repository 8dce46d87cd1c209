import FoldtableCore

/// Who orders a session's changes: the one decision that differs between a session this node
/// holds alone and one several nodes share, kept behind one port so that nothing else branches
/// on it. Chosen once, when the session is opened (`SessionOrdering`, picked by foldtabled's
/// wiring from the settings):
///
/// - ``LocalOrder``: this node is the sequencer. A change is applied to a head table at once
///   and its event goes to the ``EventLog`` (SQLite or memory); members see it when the log
///   reports it durable, and a failed append rolls the head back.
/// - ``StreamOrder``: the session's stream in a ``Broker`` (Redis) is the sequencer. A change is
///   appended as a request, and every node applies the requests it reads, in stream order.
///
/// An order is a pure state machine like the room it works on: it takes inputs and appends
/// effects, and reaches members only through the ``SessionRoom`` it is handed (announce an
/// event, acknowledge or refuse an author). What happens after a change is ordered is the
/// room's, identical for both orders.
public protocol SessionOrder {
    /// Called once, by ``SessionCore/init(name:epoch:table:recent:history:checkpointSeq:savedViews:settings:order:)``,
    /// with the room holding the table the session was opened with.
    mutating func open(_ room: inout SessionRoom, checkpointSeq: UInt64)
    /// A member's or an API caller's change, to be ordered.
    mutating func submit(_ request: ChangeRequest, _ room: inout SessionRoom, into effects: inout [SessionEffect])
    /// An input the room does not take (the log's or the broker's reports, hand-overs, reloads):
    /// an order ignores the inputs of the other kind of order.
    mutating func handle(_ input: SessionInput, _ room: inout SessionRoom, into effects: inout [SessionEffect])
    /// A row stream ended or a member left: changes waiting behind them may go on.
    mutating func drain(_ room: inout SessionRoom, into effects: inout [SessionEffect])
    /// Whether the order holds this join back (it resumes from a point this node has not
    /// reached yet); it lets it in later through the room.
    mutating func holdsJoin(_ connection: Connection, _ request: JoinRequest, role: String?, scope: String?, _ room: SessionRoom) -> Bool
    /// Whether a change of `connection` is held with its waiting join.
    mutating func holdsChange(_ change: Change, id: String?, from connection: Connection) -> Bool
    /// `connection` closed: anything held for it is dropped.
    mutating func forget(_ connection: Connection)
    /// What saving the session writes now: a checkpoint of the committed table (with its
    /// change-id window) for the log, or a snapshot at the stream position for the broker.
    func save(_ room: SessionRoom) -> SessionEffect
    /// The committed table with the change-id window that a save or a rebase writes.
    func savedTable(_ room: SessionRoom) -> Table
    /// Notes that the driver saved the committed table at `seq` itself (eviction, a rebase).
    mutating func checkpointTaken(at seq: UInt64)
    /// Committed events not yet covered by a checkpoint or snapshot.
    func eventsSinceCheckpoint(_ room: SessionRoom) -> UInt64
    /// Nothing ordered and unanswered, nothing waiting.
    var isQuiet: Bool { get }
    /// Whether changes wait for ``SessionInput/handOver`` to go to the log.
    var awaitsHandOver: Bool { get }
    /// Whether a read reaching the stream's end settles anything (``SessionInput/caughtUp(through:)``).
    var waitsForCatchUp: Bool { get }
    /// Whether token users' private views are stored with the session (its checkpoints), to
    /// survive an eviction and a restart; else they last while the session is in memory.
    var keepsViews: Bool { get }
}

extension SessionOrder {
    public mutating func holdsJoin(_ connection: Connection, _ request: JoinRequest, role: String?, scope: String?, _ room: SessionRoom) -> Bool {
        false
    }
    public mutating func holdsChange(_ change: Change, id: String?, from connection: Connection) -> Bool { false }
    public mutating func forget(_ connection: Connection) {}
    public var awaitsHandOver: Bool { false }
    public var waitsForCatchUp: Bool { false }
    public var keepsViews: Bool { false }
}

/// Who asked for a change, to be answered: a member over its connection, or a caller of the
/// HTTP API by its request number.
public enum ChangeOrigin: Sendable {
    case member(Connection)
    case api(UInt64)
}

/// A change on its way into an order: what was asked, under which id (its key, see
/// `ChangeIdScope`), by whom, and whom to answer.
public struct ChangeRequest {
    public var change: Change
    public var id: String?
    public var author: Author
    public var origin: ChangeOrigin
    /// Whose change it is for undo (a `ChangeIdScope`): the order records it under this
    /// author, and resolves an undo request from this author's records. `nil`: not recorded
    /// (the HTTP API, where nobody is identified).
    public var scope: String? = nil
}
