import FoldtableCore

/// One page of a session's history as a log reads it: committed events, newest first, and
/// whether the log still holds older ones (see ``EventLog/history(session:before:limit:completion:)``).
public struct HistoryPage: Equatable, Sendable {
    /// Newest first, consecutive seqs.
    public var events: [TableEvent]
    /// Whether events older than the last one listed are still kept.
    public var more: Bool

    public init(events: [TableEvent], more: Bool) {
        self.events = events
        self.more = more
    }

    /// The page of `kept` (a session's events as kept, oldest first, consecutive) that ends
    /// before seq `before` (`nil`: at the newest) and holds at most `limit` events.
    public static func of(_ kept: some BidirectionalCollection<TableEvent>, before: UInt64?, limit: Int) -> HistoryPage {
        var events: [TableEvent] = []
        var more = false
        for event in kept.reversed() {
            if let before, event.seq >= before { continue }
            guard events.count < limit else {
                more = true
                break
            }
            events.append(event)
        }
        return HistoryPage(events: events, more: more)
    }
}
