import Dispatch
import FoldtableCore

/// Runs finds (``RowSearch``) for members and the HTTP API where they cannot hold up the
/// service thread: a search reads every row of a table, and on the one thread that serves every
/// session a large one made `/healthz` and every member wait.
///
/// A small table is searched at once (the hop to another thread would cost more than the
/// search). A larger one is searched on one background queue, from a snapshot: `Table` is a
/// value, so the copy handed over shares the session's storage (copy on write) and costs a few
/// retains; the session's next change then copies the one section array it changes while the
/// search still holds the old one. The answer comes back on the service thread through the
/// ``ServiceQueue``. One queue, serial: searches wait for each other rather than take every
/// core, and each caller pays for its own through its rate limit. Each requester (a connection,
/// an HTTP client's address) has one search on the queue at most: one that sends finds as fast
/// as its rate allows cannot line up thousands ahead of everyone else's, nor hold a snapshot of
/// the table for each.
final class RowFinder {
    /// Tables with at least this many rows are searched on the background queue.
    static let asideRows = 1_000

    private let serviceQueue: ServiceQueue
    private let queue = DispatchQueue(label: "foldtable.find", qos: .userInitiated)
    /// Requesters with a search on the queue (service thread only).
    private var searching: Set<String> = []

    init(serviceQueue: ServiceQueue) {
        self.serviceQueue = serviceQueue
    }

    /// Searches `table` for `query` and calls `then` with the first `limit` matches (and whether
    /// there were more), on the service thread: at once for a small table, later for a large one.
    /// Returns false, calling nothing, when `requester` has a search of a large table under way
    /// already: the caller refuses this one (`rate_limited`).
    func find(_ query: String, in table: Table, limit: Int, for requester: String, then: @escaping ([RowSearch.Match], Bool) -> Void)
        -> Bool
    {
        let search = RowSearch(query)
        guard table.rowCount >= Self.asideRows else {
            let (matches, truncated) = search.run(in: table, limit: limit)
            then(matches, truncated)
            return true
        }
        guard searching.insert(requester).inserted else { return false }
        // Made on the service thread and only called back there.
        let continuation = ServiceThreadOnly { [self] (matches: [RowSearch.Match], truncated: Bool) in
            searching.remove(requester)
            then(matches, truncated)
        }
        let serviceQueue = serviceQueue
        queue.async {
            let (matches, truncated) = search.run(in: table, limit: limit)
            serviceQueue.post { continuation.value(matches, truncated) }
        }
        return true
    }

    /// What a requester whose search is under way gets for another.
    static var busy: ProtocolError {
        ProtocolError(.rateLimited, "a find of yours is still running; send the next one after its answer")
    }
}
