import FoldtableCore

/// One session's webhook deliveries as a pure state machine: what it knows (the receiver's
/// cursor, the session's head, a page of events read from the log, the delivery in flight) and,
/// for each input, what to do next. ``Webhooks`` performs the actions (reads the log, sends,
/// saves the cursor, arms timers); the tests drive it without sockets or a store.
///
/// Order: one delivery in flight, always the seq right after the cursor; the cursor moves only
/// when the receiver answered 2xx for it. At-least-once: a crash between a delivery and the save
/// of the cursor sends that seq again, never a later one first.
public struct WebhookState: Sendable, Equatable {
    /// Why deliveries stopped until an owner resumes them.
    public enum Pause: String, Sendable, Equatable {
        /// More undelivered changes than ``Limits/maxBacklogEvents``.
        case backlog
        /// The receiver failed every try for longer than ``Limits/pauseAfterMs``.
        case failing
        /// The log no longer holds the next change to deliver (it trims its oldest events).
        case trimmed
    }

    /// What a delivery's outcome was, for the machine (the details stay with the caller's log).
    public enum Outcome: Sendable, Equatable {
        case delivered
        case failed
    }

    /// What to do.
    public enum Action: Sendable, Equatable {
        /// Read the logged events after seq `after`, through `after + limit` (the head when it is
        /// known), then call ``read(_:now:)``.
        case read(after: UInt64, limit: Int)
        /// Send this event, then call ``finished(seq:_:now:jitter:)``.
        case send(TableEvent)
        /// Persist `delivered` as the cursor.
        case saveCursor(UInt64)
        /// Call ``retry(now:)`` after this many milliseconds.
        case retryAfter(UInt64)
        /// Deliveries paused (log it, count it, persist it).
        case paused(Pause)
    }

    public struct Limits: Sendable, Equatable {
        public var maxBacklogEvents: UInt64
        public var pauseAfterMs: UInt64
        public var readBatch: Int
        public var backoff: WebhookBackoff

        public init(maxBacklogEvents: UInt64, pauseAfterMs: UInt64, readBatch: Int = 64, backoff: WebhookBackoff) {
            self.maxBacklogEvents = maxBacklogEvents
            self.pauseAfterMs = pauseAfterMs
            self.readBatch = max(1, readBatch)
            self.backoff = backoff
        }
    }

    /// The last seq the receiver acknowledged (persisted).
    public private(set) var delivered: UInt64
    /// The newest committed seq known (at least `delivered`).
    public private(set) var head: UInt64
    /// Set when deliveries stopped; nothing is read or sent until ``resume(head:)``.
    public private(set) var paused: Pause?
    /// Events read and not yet delivered, oldest first, consecutive after `delivered`.
    private var pending: [TableEvent] = []
    /// Whether a read or a send is outstanding (one at a time).
    private var reading = false
    public private(set) var inFlight: UInt64?
    /// Whether a retry timer is armed.
    private var waiting = false
    /// Since when (milliseconds) the receiver has been behind without a break: set when a
    /// change finds it caught up, cleared when it catches up. What GET shows as `lagMs`.
    public private(set) var behindSince: UInt64?
    /// Consecutive failures of the delivery at the head of `pending`, and since when.
    public private(set) var failures = 0
    private var failingSince: UInt64?
    /// Whether the log may hold events past `head` that no commit told of (after a start, until
    /// a read comes back short of what it asked).
    private var mayHaveMore: Bool
    /// The last seq the outstanding read asked for.
    private var askedThrough: UInt64 = 0
    public let limits: Limits

    /// A webhook whose receiver acknowledged up to `delivered` (`paused`: as stored). The first
    /// ``start()`` reads the log from there: a restart finds what was committed meanwhile.
    public init(delivered: UInt64, paused: Pause?, limits: Limits) {
        self.delivered = delivered
        self.head = delivered
        self.paused = paused
        self.limits = limits
        mayHaveMore = true
    }

    /// Undelivered changes known.
    public var backlog: UInt64 { head - delivered }

    /// How long (milliseconds) the receiver has been behind at `now`; 0 when caught up.
    public func lagMs(now: UInt64) -> UInt64 {
        guard backlog > 0, let behindSince, now >= behindSince else { return 0 }
        return now - behindSince
    }

    /// Whether a delivery or read is under way or a retry is due: a timer or a reply will come.
    public var isBusy: Bool { reading || inFlight != nil || waiting }

    /// The first step after loading.
    public mutating func start() -> [Action] { next(now: nil) }

    /// The session committed through `seq`; `events` are the ones just committed, oldest first,
    /// when the caller has them at hand. They are taken straight into `pending`, with no read of
    /// the log, when they follow on from everything known (caught up, no read outstanding) and fit
    /// in a page; otherwise they are read back from the log later.
    public mutating func committed(through seq: UInt64, events: [TableEvent] = [], now: UInt64) -> [Action] {
        guard seq > head else { return [] }
        if backlog == 0 { behindSince = now }
        if paused == nil, !reading, !mayHaveMore, head == delivered + UInt64(pending.count), let first = events.first, first.seq == head + 1,
            events.last?.seq == seq, pending.count + events.count <= limits.readBatch
        {
            pending += events
        }
        head = seq
        if paused == nil && backlog > limits.maxBacklogEvents { return pause(.backlog) }
        return next(now: now)
    }

    /// A read asked by ``Action/read(after:limit:)`` returned `events` (oldest first); `nil`:
    /// the log does not reach back to the next seq.
    public mutating func read(_ events: [TableEvent]?, now: UInt64) -> [Action] {
        reading = false
        guard paused == nil else { return [] }
        guard let events else { return pause(.trimmed) }
        let expected = delivered + 1 + UInt64(pending.count)
        // A page ends where asked but may reach back past the cursor (a log whose head is near):
        // what was delivered or is pending already is not taken twice.
        let fresh = events.drop { $0.seq < expected }
        guard let first = fresh.first else {
            mayHaveMore = false
            // Told of commits the log no longer holds: trimmed past them.
            return head > delivered + UInt64(pending.count) ? pause(.trimmed) : []
        }
        guard first.seq == expected else { return pause(.trimmed) }
        pending += fresh
        if let last = pending.last?.seq, last > head {
            if backlog == 0 { behindSince = now }
            head = last
        }
        // A page that came back short of what was asked ends the log: only commits add more.
        mayHaveMore = mayHaveMore && (pending.last?.seq ?? 0) >= askedThrough
        if backlog > limits.maxBacklogEvents { return pause(.backlog) }
        return next(now: now)
    }

    /// A read asked by ``Action/read(after:limit:)`` failed (the store is unavailable): tried
    /// again after the longest retry wait, nothing paused.
    public mutating func readFailed() -> [Action] {
        reading = false
        guard paused == nil else { return [] }
        waiting = true
        return [.retryAfter(limits.backoff.maxMs)]
    }

    /// The delivery of `seq` ended.
    public mutating func finished(seq: UInt64, _ outcome: Outcome, now: UInt64, jitter: Double) -> [Action] {
        guard inFlight == seq else { return [] }
        inFlight = nil
        switch outcome {
        case .delivered:
            if pending.first?.seq == seq { pending.removeFirst() }
            // Never backwards, whatever reply arrives late.
            delivered = max(delivered, seq)
            if backlog == 0 { behindSince = nil }
            failures = 0
            failingSince = nil
            return [.saveCursor(seq)] + next(now: now)
        case .failed:
            failures += 1
            let since = failingSince ?? now
            failingSince = since
            if paused == nil && now >= since && now - since >= limits.pauseAfterMs { return pause(.failing) }
            guard paused == nil else { return [] }
            waiting = true
            return [.retryAfter(limits.backoff.delayMs(afterFailures: failures, jitter: jitter))]
        }
    }

    /// A retry's timer fired.
    public mutating func retry(now: UInt64) -> [Action] {
        waiting = false
        return next(now: now)
    }

    /// An owner resumed a paused webhook: the backlog is dropped (the receiver reads what it
    /// missed with the history API), deliveries go on from the next change after `head`.
    public mutating func resume(head newHead: UInt64) -> [Action] {
        head = max(head, newHead)
        let skippedTo = head
        paused = nil
        pending = []
        // Whatever was under way when it paused is forgotten: its reply or timer no longer
        // counts (``finished(seq:_:now:jitter:)`` ignores a seq not in flight).
        inFlight = nil
        reading = false
        waiting = false
        behindSince = nil
        failures = 0
        failingSince = nil
        mayHaveMore = false
        delivered = skippedTo
        return [.saveCursor(skippedTo)]
    }

    private mutating func pause(_ why: Pause) -> [Action] {
        paused = why
        pending = []
        return [.paused(why)]
    }

    /// Sends the next pending event, or reads more, when nothing is outstanding.
    private mutating func next(now: UInt64?) -> [Action] {
        guard paused == nil, !isBusy else { return [] }
        if let event = pending.first {
            inFlight = event.seq
            return [.send(event)]
        }
        guard head > delivered || mayHaveMore else { return [] }
        reading = true
        // Exactly what is known to be missing, ending at the head (no page reaching back past the
        // cursor); a full page when the log may hold more than the head says (after a start).
        let missing = head - delivered
        let limit = mayHaveMore || missing > UInt64(limits.readBatch) ? limits.readBatch : Int(missing)
        askedThrough = delivered + UInt64(limit)
        return [.read(after: delivered, limit: limit)]
    }
}
