import FoldtableCore

/// Something that happened to a session, fed to ``SessionCore/handle(_:now:)``.
public enum SessionInput {
    /// A connection asks to join (its display name is in the request) with a role, told back
    /// in the welcome when there is one (`nil` in open mode: everyone edits), and whose changes
    /// it makes (its `ChangeIdScope`: what undo and a saved private view belong to; `nil`:
    /// this connection's own).
    case join(Connection, JoinRequest, role: String?, scope: String? = nil)
    /// A member's connection closed.
    case leave(Connection)
    /// A member changed its display name.
    case rename(Connection, name: String)
    /// A member asks for a change; `id` is its change id, if it gave one.
    case change(Change, id: String?, from: Connection)
    /// A viewer's collapse change: applied to its private view, refused in the shared one.
    case privateChange(Change, id: String?, from: Connection)
    /// A member's `undo` (or `redo`), with its change id (key, `ChangeIdScope`) if it gave one.
    case undo(redo: Bool, id: String?, from: Connection)
    /// A member switches to its private view (`collapsed`: one it saved, to start from) or back
    /// to the shared one.
    case view(private: Bool, collapsed: [CollapseEffect]?, from: Connection)
    /// A caller of the HTTP API asks for a change as `author` (`id`: its Idempotency-Key);
    /// answered with ``SessionEffect/answer(request:_:)`` for `request` after the commit.
    case apiChange(Change, id: String?, author: Author, request: UInt64)
    /// The burst of messages that brought changes ended: the changes applied since the last
    /// append go to the log, in one append (``SessionCore/Settings/handsOverAtOnce`` off).
    case handOver
    /// The log made durable every event up to `seq` of the append made in `generation`.
    case committed(generation: UInt64, through: UInt64)
    /// An append of `generation` failed: nothing of it is durable.
    case commitFailed(generation: UInt64, StoreError)
    /// A member received every row of the stream of `section` started at `seq`.
    case streamDelivered(section: String, seq: UInt64, to: Connection)
    /// A member's peer took (nearly) all of that stream, or the wait gave up (after
    /// ``SessionEffect/awaitFlush(section:seq:member:)``).
    case streamFlushed(section: String, seq: UInt64, to: Connection)
    /// A timer the core armed fired.
    case timer(SessionTimer)
    /// A member looks for rows by text (see `RowSearch` in FoldtableCore).
    case find(query: String, limit: Int, id: String?, from: Connection)
    /// A session ordered by its stream (``StreamOrder``): requests read from
    /// its stream, in stream order, from every node.
    case sequenced([SequencedRequest])
    /// The append of this node's request `number` failed; with `mayHaveRun` its entry may still
    /// show up in the stream.
    case appendFailed(number: UInt64, BrokerError)
    /// This node's request `number` is in the stream at `position` (its entry is applied when read).
    case appended(number: UInt64, position: String)
    /// The node's reader read to the end of the session's stream, `through` that position.
    case caughtUp(through: String)
    /// The broker can (`true`) or cannot append and deliver: while it cannot, the session is
    /// read-only and changes are refused with `storage_unavailable`.
    case brokerAvailable(Bool)
    /// The stream no longer continues from what this core applied (trimmed past it during an
    /// outage, or lost by the broker): start again from `table` at `position` in `epoch`, with
    /// `history` (the snapshot's events before it) for resumes; every member gets a fresh welcome.
    case reload(epoch: String, table: Table, position: String, history: [HistoryEntry] = [])
    /// A shared session: the members other nodes hold now, every such node (as a
    /// ``PresenceBroker`` delivers them after a heartbeat): merged into welcomes, `presence`
    /// diffs and the member count.
    case remotePresence([NodePresence])
}

/// What the core asks its driver to do, in order.
///
/// The cases that carry a table, a sequenced request, a section or an error are `indirect` (boxed):
/// they are rare or come once per request, and inline they made every effect 240 bytes, copied
/// whole each time an effect is appended, moved or destroyed; boxed, an effect is 48.
public enum SessionEffect {
    /// Queue one message to one connection.
    case send(OutboundMessage, to: Connection)
    /// Queue the same message to many connections (encoded once).
    case broadcast(OutboundMessage, to: [Connection])
    /// Acknowledge change `id` (committed as event `seq`) to its author.
    case ack(Connection, id: String, seq: UInt64)
    /// A member's change passed validation: its run of refused messages is over.
    case accepted(Connection)
    /// Refuse a message with an error reply (the socket stays open).
    indirect case refuse(Connection, ProtocolError, id: String?)
    /// Answer an HTTP API change: the seq it is durable at, or why it was refused.
    indirect case answer(request: UInt64, Result<UInt64, ProtocolError>)
    /// The HTTP API change `request` created the row or section `key`: said just before its
    /// `answer`, so the API can name what the caller made (the table may have chosen the key).
    case created(request: UInt64, key: String)
    /// Append these events to the log; report back `committed` or `commitFailed` with `generation`.
    case persist([LoggedEvent], generation: UInt64)
    /// Save this table (the committed one) as the session's checkpoint.
    indirect case checkpoint(Table)
    /// Answer a member's `find` from `table` (the committed one) with a `found` message. The
    /// search reads every row, so the driver runs it where it cannot hold up other sessions.
    indirect case find(query: String, in: Table, limit: Int, id: String?, to: Connection)
    /// A stream-ordered session: append this request to the session's stream; report a failure
    /// with ``SessionInput/appendFailed(number:_:)``. Success needs no report: the entry comes
    /// back through ``SessionInput/sequenced(_:)``.
    indirect case append(SequencedRequest)
    /// A stream-ordered session: save this table (the committed one) as the snapshot covering
    /// the stream up to `position`, with the history members may resume from.
    indirect case snapshot(Table, position: String, history: [HistoryEntry])
    /// Stream the rows of `section` (as committed at `seq`) to these members.
    indirect case startStream(Section, seq: UInt64, to: [Connection])
    /// Add a member to the running stream of `section` started at `seq`.
    case joinStream(section: String, seq: UInt64, member: Connection)
    /// Take a member out of the stream of `section` (it left or was closed).
    case leaveStream(section: String, member: Connection)
    /// The stream of `section` is over (everyone has the rows, or nobody is left).
    case endStream(section: String)
    /// Report ``SessionInput/streamFlushed(section:seq:to:)`` once the member's peer took (nearly)
    /// everything sent to it (its rows of that stream may still sit in the socket's buffers).
    case awaitFlush(section: String, seq: UInt64, member: Connection)
    case armTimer(SessionTimer, milliseconds: UInt64)
    case cancelTimer(SessionTimer)
    /// Close a connection after what is queued.
    case close(Connection, code: Int, reason: String)
    /// One log line (the driver adds the session name); fields are built only if it is written.
    case log(Log.Level, String, () -> [(String, String)])
}

/// A timer of one session. Carries what it is for, so a stale timer is recognised and ignored.
public enum SessionTimer: Hashable, Sendable {
    /// The busy threshold of the stream of `section` started at `seq`.
    case busy(section: String, seq: UInt64)
    /// The member deadline of that stream.
    case streamDeadline(section: String, seq: UInt64)
    /// The end of a presence interval: the diff of joins, leaves and renames goes out.
    case presence
}
