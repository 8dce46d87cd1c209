import Synchronization

/// Work handed to the service thread from any thread: the one way other threads (the store's
/// writer, signal handlers, later the Redis reader) reach the hub.
///
/// `post` appends under a lock and wakes the service thread only when the queue was empty, so a
/// burst of completions costs one wake-up; the service thread runs everything queued in
/// ``drain()`` (lws: from the wake callback).
public final class ServiceQueue: Sendable {
    /// What is posted, and an emptied array kept for the next turn: `drain` swaps the two, so a
    /// busy loop reuses their storage instead of growing a new array from nothing every turn
    /// (thousands of completions a turn: each doubling is a large allocation, and glibc's large
    /// allocations consolidate its free lists).
    private struct Buffers {
        var posted: [@Sendable () -> Void] = []
        var spare: [@Sendable () -> Void] = []
    }
    private let buffers = Mutex(Buffers())
    private let wake: @Sendable () -> Void

    /// `wake` makes the service thread call ``drain()`` soon; it may be called from any thread.
    public init(wake: @escaping @Sendable () -> Void) {
        self.wake = wake
    }

    /// Any thread: runs `work` on the service thread soon, after what was posted before it.
    public func post(_ work: @escaping @Sendable () -> Void) {
        let wasEmpty = buffers.withLock { buffers in
            buffers.posted.append(work)
            return buffers.posted.count == 1
        }
        if wasEmpty { wake() }
    }

    /// Service thread: runs what is queued now. Work posted while it runs waits for the next
    /// call (a wake-up was asked for it), so one turn of the loop never runs forever.
    public func drain() {
        var work = buffers.withLock { buffers in
            var taken: [@Sendable () -> Void] = []
            swap(&taken, &buffers.spare)
            swap(&taken, &buffers.posted)
            return taken
        }
        guard !work.isEmpty else { return }
        for item in work { item() }
        // The closures go now (they may hold the last reference to what they captured), the
        // storage back for a later turn.
        work.removeAll(keepingCapacity: true)
        buffers.withLock { buffers in
            if buffers.spare.capacity < work.capacity { swap(&buffers.spare, &work) }
        }
    }

    /// Whether anything is waiting (for tests).
    public var isEmpty: Bool { buffers.withLock { $0.posted.isEmpty } }
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
