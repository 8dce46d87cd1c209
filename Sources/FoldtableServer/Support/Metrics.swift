import FoldtableCore

/// What `/metrics` reports, in the Prometheus text format (version 0.0.4).
///
/// Counters and histograms are plain integers touched on the service thread only (no atomics:
/// the hub, the sessions and the transport callbacks all run there); gauges are read when
/// scraped, from closures the hub registers, so nothing keeps them up to date between scrapes.
public final class Metrics {
    /// A histogram with fixed upper bounds (seconds), cumulative as Prometheus wants them.
    ///
    /// A class held in `let`s, its counts in memory of its own: observing (three times an
    /// acknowledged change) then needs no runtime exclusivity check. A struct in a `var` needs one
    /// per observation, and so would an array of counts: its copy-on-write path (never taken here)
    /// is a call the compiler cannot see into, so it cannot prove the access exclusive.
    public final class Histogram {
        public let bounds: [Double]
        private let slots: UnsafeMutableBufferPointer<UInt64>
        /// `bounds` again, in memory of its own: `observe` walks them without an array's bounds
        /// checks (a buffer's are debug-only). Three observations an acknowledged change, a
        /// commit's through most of the buckets.
        private let limits: UnsafeMutableBufferPointer<Double>
        private var total: Double = 0
        private var samples: UInt64 = 0

        public init(bounds: [Double]) {
            self.bounds = bounds
            slots = .allocate(capacity: bounds.count)
            slots.initialize(repeating: 0)
            limits = .allocate(capacity: bounds.count)
            _ = limits.initialize(from: bounds)
        }

        deinit {
            slots.deallocate()
            limits.deallocate()
        }

        /// Samples per bucket (each in its first bucket: not cumulative).
        public var counts: [UInt64] { Array(slots) }
        public var sum: Double { total }
        public var count: UInt64 { samples }

        public func observe(_ seconds: Double) {
            total += seconds
            samples += 1
            // Buckets are cumulative when written; here each sample lands in its first bucket.
            var index = 0
            while index < limits.count && !(seconds <= limits[index]) { index += 1 }
            if index < slots.count { slots[index] += 1 }
        }
    }

    /// Latency buckets from 50 µs to 10 s: a toggle on one core takes microseconds, a commit
    /// with fsync milliseconds, a stalled disk seconds.
    public static let latencyBounds: [Double] = [
        0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10,
    ]

    // The counters and histograms touched for every message are internal, not public: the
    // compiler sees every access to an internal property of this final class (whole-module) and
    // proves them exclusive, so a `+=` here needs no runtime exclusivity check (a public stored
    // property gets one per access, and an acknowledged change touches several). `render()` is
    // how they leave the module.
    var messagesIn: UInt64 = 0
    /// Messages queued to clients (a broadcast is one message), deliveries (a broadcast to N
    /// members is N) and the bytes of those deliveries.
    var messagesOut: UInt64 = 0
    var deliveries: UInt64 = 0
    var bytesOut: UInt64 = 0
    var changesApplied: UInt64 = 0
    /// Joins and session creations refused because the memory budget was spent.
    public var memoryRefusals: UInt64 = 0
    /// Shared sessions reloaded from the broker after an outage (their stream did not continue
    /// from what this node had applied): each member got a fresh welcome.
    public var sessionReloads: UInt64 = 0
    public var httpRequests: [Int: UInt64] = [:]
    public var closesByCode: [Int: UInt64] = [:]
    public var errorsByCode: [String: UInt64] = [:]
    /// Time the session core takes to validate and apply a change (to the head table).
    public let applyLatency = Histogram(bounds: latencyBounds)
    /// Time the store takes to make an append durable (from the hand-over to the report); for a
    /// shared session, from the append to the broker to this node's own apply of it.
    public let commitLatency = Histogram(bounds: latencyBounds)
    /// Time to queue one broadcast to every member (the fan-out's share of a change).
    public let fanoutLatency = Histogram(bounds: latencyBounds)

    /// Gauges read at scrape time: name, help, value.
    private var gauges: [(name: String, help: String, read: () -> Double)] = []
    /// Counters owned elsewhere (the transport's), read at scrape time.
    private var externalCounters: [(name: String, help: String, read: () -> Double)] = []

    public init() {}

    public func gauge(_ name: String, _ help: String, _ read: @escaping () -> Double) { gauges.append((name, help, read)) }
    public func counter(_ name: String, _ help: String, _ read: @escaping () -> Double) { externalCounters.append((name, help, read)) }

    /// Counts one message queued to `recipients` connections.
    @inline(__always) public func sent(_ message: OutboundMessage, to recipients: Int) {
        sent(bytes: message.bytes.count, to: recipients)
    }

    /// A message of `bytes` bytes queued to `recipients` connections.
    @inline(__always) public func sent(bytes: Int, to recipients: Int) {
        messagesOut += 1
        deliveries += UInt64(recipients)
        bytesOut += UInt64(bytes * recipients)
    }

    /// Seconds from `start` to now, for the histograms.
    @inline(__always) public static func seconds(since start: MonotonicTime) -> Double {
        start.seconds(until: .now)
    }

    /// The exposition text.
    public func render() -> String {
        var out = ""
        func header(_ name: String, _ type: String, _ help: String) { out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n" }
        func line(_ name: String, _ labels: String, _ value: Double) { out += "\(name)\(labels) \(Self.format(value))\n" }

        for gauge in gauges {
            header(gauge.name, "gauge", gauge.help)
            line(gauge.name, "", gauge.read())
        }
        for counter in externalCounters {
            header(counter.name, "counter", counter.help)
            line(counter.name, "", counter.read())
        }
        let counters: [(String, String, UInt64)] = [
            ("foldtable_messages_received_total", "WebSocket messages received from clients.", messagesIn),
            ("foldtable_messages_sent_total", "Messages queued to clients (a broadcast counts once).", messagesOut),
            ("foldtable_deliveries_total", "Messages queued per recipient (a broadcast to N members counts N).", deliveries),
            ("foldtable_delivered_bytes_total", "Bytes of all deliveries.", bytesOut),
            ("foldtable_changes_applied_total", "Changes committed and broadcast.", changesApplied),
            ("foldtable_memory_refusals_total", "Joins and new sessions refused at the memory budget.", memoryRefusals),
            ("foldtable_session_reloads_total", "Shared sessions reloaded from Redis after an outage or a fall behind the trimming.", sessionReloads),
        ]
        for (name, help, value) in counters {
            header(name, "counter", help)
            line(name, "", Double(value))
        }
        header("foldtable_closes_total", "counter", "WebSocket closes, by close code (4000: a slow consumer).")
        for (code, count) in closesByCode.sorted(by: { $0.key < $1.key }) { line("foldtable_closes_total", "{code=\"\(code)\"}", Double(count)) }
        header("foldtable_slow_consumer_closes_total", "counter", "Clients closed for not reading fast enough (close code 4000).")
        line("foldtable_slow_consumer_closes_total", "", Double(closesByCode[CloseCode.slowConsumer] ?? 0))
        header("foldtable_errors_total", "counter", "Error replies to clients and API callers, by error code.")
        for (code, count) in errorsByCode.sorted(by: { $0.key < $1.key }) { line("foldtable_errors_total", "{code=\"\(code)\"}", Double(count)) }
        header("foldtable_http_requests_total", "counter", "HTTP API and health requests answered, by status.")
        for (status, count) in httpRequests.sorted(by: { $0.key < $1.key }) {
            line("foldtable_http_requests_total", "{status=\"\(status)\"}", Double(count))
        }
        histogram("foldtable_apply_seconds", "Time to validate and apply one change.", applyLatency, into: &out)
        histogram(
            "foldtable_commit_seconds", "Time the store takes to make an append durable (shared sessions: append to Redis to own apply).",
            commitLatency, into: &out)
        histogram("foldtable_fanout_seconds", "Time to queue one broadcast to every member.", fanoutLatency, into: &out)
        return out
    }

    private func histogram(_ name: String, _ help: String, _ histogram: Histogram, into out: inout String) {
        out += "# HELP \(name) \(help)\n# TYPE \(name) histogram\n"
        var cumulative: UInt64 = 0
        for (bound, count) in zip(histogram.bounds, histogram.counts) {
            cumulative += count
            out += "\(name)_bucket{le=\"\(Self.format(bound))\"} \(cumulative)\n"
        }
        out += "\(name)_bucket{le=\"+Inf\"} \(histogram.count)\n"
        out += "\(name)_sum \(Self.format(histogram.sum))\n"
        out += "\(name)_count \(histogram.count)\n"
    }

    /// Integers without a fraction; others as Swift prints them (Prometheus reads both).
    static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}
