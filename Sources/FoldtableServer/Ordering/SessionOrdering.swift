import FoldtableCore

/// Who orders the sessions this node opens, as the hub sees it: the port chosen once, in
/// foldtabled's wiring, from the settings. `LocalOrdering` keeps sessions in this node's store
/// and event log (SQLite or memory) and gives each a ``LocalOrder``; `StreamOrdering` shares
/// them through a ``Broker`` (Redis) and gives each a ``StreamOrder``. The hub asks it to open,
/// create, delete and list sessions, and never asks which it is.
///
/// Every method is called on the service thread; completions run there too.
protocol SessionOrdering: AnyObject {
    /// Called once by the hub it serves, before anything else.
    func attach(_ hub: Hub)
    /// Whether a session named `name` may exist without this node having made it: a stored name,
    /// or any name when only the broker knows.
    func mayExist(_ name: String) -> Bool
    /// Opens session `name` (made holding `create` when it exists nowhere and `create` is given):
    /// a `TableSession` the hub then holds, or why not (`session_not_found`,
    /// `storage_unavailable`). May complete at once.
    func open(_ name: String, create: Table?, completion: @escaping (Result<TableSession, ProtocolError>) -> Void)
    /// Makes session `name` holding `table` when none of that name exists (the demo, `--load`);
    /// `made` hears whether this made it (false: one existed), or why it could not tell.
    func createIfAbsent(_ name: String, table: Table, made: @escaping (Result<Bool, ProtocolError>) -> Void)
    /// Makes session `name` holding `table` (the HTTP API's import), answering once it is
    /// stored; `duplicate_key` when one exists.
    func create(_ name: String, table: Table, completion: @escaping (Result<Void, ProtocolError>) -> Void)
    /// Deletes `session` and its history from storage; the hub then closes its members.
    func delete(_ session: TableSession, completion: @escaping (Result<Void, ProtocolError>) -> Void)
    /// Up to `limit` committed events of `session` before seq `before` (`nil`: the newest),
    /// newest first, as far back as this ordering keeps them (see ``EventHistory``).
    func history(of session: TableSession, before: UInt64?, limit: Int, completion: @escaping (Result<HistoryPage, ProtocolError>) -> Void)
    /// Every session's name this node knows, resident or not.
    var names: Set<String> { get }
    /// Runs `body` once ``members(ofAbsent:)`` answers for sessions this node does not hold (at
    /// once, or after one read of the broker shared by every listing meanwhile).
    func withListing(_ body: @escaping () -> Void)
    /// Members that other nodes hold of a session this node does not hold (0 on one node).
    func members(ofAbsent name: String) -> Int
    /// Why the node cannot take changes now (`/readyz`), `nil` when it can.
    var notReady: String? { get }
    /// The node is stopping: `completion` runs (on the service thread) once others know.
    func stop(completion: @escaping () -> Void)
}

/// The `SessionOrdering` a hub is made with, as foldtabled's wiring (or a test) chooses it
/// from the settings: the only place that decides who orders sessions.
public struct SessionOrderingChoice {
    let ordering: SessionOrdering

    /// Sessions this node holds alone, in `store` and `eventLog` (usually one object), which
    /// hold `names` already.
    public static func local(store: SessionStore, eventLog: EventLog, names: [String]) -> Self {
        Self(ordering: LocalOrdering(store: store, eventLog: eventLog, names: names))
    }

    /// Sessions shared with other nodes through `cluster`'s broker.
    public static func shared(_ cluster: Cluster) -> Self {
        Self(ordering: StreamOrdering(cluster))
    }
}

extension ProtocolError {
    /// No session of that name exists (and none was to be made).
    static func noSession(named name: String) -> ProtocolError {
        ProtocolError(.sessionNotFound, "no session is named \"\(name)\"", field: "session")
    }

    /// Storage could not be read to open a session: it may work when retried.
    static var sessionNotLoaded: ProtocolError {
        ProtocolError(.storageUnavailable, "the session could not be loaded; retry later")
    }
}
