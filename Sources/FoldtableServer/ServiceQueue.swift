import Synchronization

/// Work handed to the service thread from any thread: the one way other threads (the store's
/// writer, signal handlers, later the Redis reader) reach the hub.
///
/// `post` appends under a lock and wakes the service thread only when the queue was empty, so a
/// burst of completions costs one wake-up; the service thread runs everything queued in
/// ``drain()`` (lws: from the wake callback).
public final class ServiceQueue: Sendable {
    private let queue = Mutex<[@Sendable () -> Void]>([])
    private let wake: @Sendable () -> Void

    /// `wake` makes the service thread call ``drain()`` soon; it may be called from any thread.
    public init(wake: @escaping @Sendable () -> Void) {
        self.wake = wake
    }

    /// Any thread: runs `work` on the service thread soon, after what was posted before it.
    public func post(_ work: @escaping @Sendable () -> Void) {
        let wasEmpty = queue.withLock { queue in
            queue.append(work)
            return queue.count == 1
        }
        if wasEmpty { wake() }
    }

    /// Service thread: runs what is queued now. Work posted while it runs waits for the next
    /// call (a wake-up was asked for it), so one turn of the loop never runs forever.
    public func drain() {
        let work = queue.withLock { queue in
            let taken = queue
            queue.removeAll()
            return taken
        }
        for item in work { item() }
    }

    /// Whether anything is waiting (for tests).
    public var isEmpty: Bool { queue.withLock { $0.isEmpty } }
}

/// A value created on the service thread that only passes through other threads and is used
/// again only on the service thread (a store's completion closure, say).
///
/// `@unchecked Sendable`: the compiler cannot see that the other threads never touch it; the
/// rule above is what makes it safe, and every use says so.
public struct ServiceThreadOnly<Value>: @unchecked Sendable {
    public let value: Value
    public init(_ value: Value) { self.value = value }
}
