import FoldtableCore

/// The I/O of one session's order (see ``SessionOrder``): performs the effects only an order
/// asks for (appends to the event log or to the stream, checkpoints and snapshots) and feeds
/// what they report back to its `TableSession` as inputs. One per session, made with it by
/// the `SessionOrdering` that opened it; the session holds it, it points back.
///
/// Runs on the service thread only.
protocol OrderDriver: AnyObject {
    /// Called once, by the session's initializer.
    func attach(_ session: TableSession)
    /// Performs one of the order's effects (`persist`, `checkpoint`, `append`, `snapshot`).
    /// `applied`: when the change that caused it was applied, if one did this turn (where the
    /// commit clock starts).
    func perform(_ effect: SessionEffect, applied: MonotonicTime?)
    /// The session leaves memory (evicted, deleted): whatever the driver follows stops.
    func detached()
}
