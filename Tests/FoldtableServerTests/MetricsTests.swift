import FoldtableCore
import Testing

@testable import FoldtableServer

@Suite struct MetricsTests {
    @Test func secondsBetweenTwoReadingsAreTheirNanosecondsApart() {
        let start = MonotonicTime(nanoseconds: 5_000_000_000)
        #expect(start.seconds(until: MonotonicTime(nanoseconds: 5_000_000_000)) == 0)
        #expect(abs(start.seconds(until: MonotonicTime(nanoseconds: 5_000_001_000)) - 1e-6) < 1e-15)
        #expect(abs(start.seconds(until: MonotonicTime(nanoseconds: 5_250_000_000 + 86_400 * 400 * 1_000_000_000)) - (0.25 + 86_400 * 400)) < 1e-6)
        // A reading taken earlier (it cannot be on one clock, but never a negative latency).
        #expect(start.seconds(until: MonotonicTime(nanoseconds: 4_000_000_000)) == 0)
    }

    @Test func theClockMovesForwardAsContinuousClockDoes() {
        let first = MonotonicTime.now
        let reference = ContinuousClock.now
        while ContinuousClock.now - reference < .milliseconds(2) {}
        let elapsed = first.seconds(until: .now)
        #expect(elapsed >= 0.002)
        #expect(elapsed < 10)
    }

    @Test func aSampleCountsInTheFirstBucketItDoesNotPassAndOneBeyondEveryBoundOnlyInTheTotals() {
        let histogram = Metrics.Histogram(bounds: [0.1, 1])
        for seconds in [0.05, 0.1, 0.5, 1, 5] { histogram.observe(seconds) }
        #expect(histogram.counts == [2, 2])
        #expect(histogram.count == 5)
        #expect(abs(histogram.sum - 6.65) < 1e-12)
        #expect(Metrics.Histogram(bounds: [0.1]).counts == [0])
    }

    @Test func countersMoveAsClientsActAndTheTextIsPrometheusShaped() {
        let h = Harness()
        h.join(1)
        h.join(2, name: "bo")
        h.say(1, #"{"type":"toggle","section":"mac","id":"t1"}"#)
        h.say(1, #"{"type":"toggle","section":"nope","id":"t2"}"#)
        h.close(2)
        let text = h.hub.metrics.render()
        let values = Dictionary(
            text.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap { line -> (String, Double)? in
                let parts = line.split(separator: " ")
                return parts.count == 2 ? (String(parts[0]), Double(parts[1]) ?? -1) : nil
            }, uniquingKeysWith: { first, _ in first })
        #expect(values["foldtable_connections"] == 1)
        #expect(values["foldtable_members"] == 1)
        #expect(values["foldtable_messages_received_total"] == 4)
        #expect(values["foldtable_changes_applied_total"] == 1)
        #expect(values["foldtable_errors_total{code=\"unknown_section\"}"] == 1)
        #expect((values["foldtable_deliveries_total"] ?? 0) >= 4)
        #expect(values["foldtable_apply_seconds_count"] == 2)
        #expect(values["foldtable_commit_seconds_count"] == 1)
        #expect(values["foldtable_apply_seconds_bucket{le=\"+Inf\"}"] == 2)
        // Every sample line belongs to a metric announced by a TYPE line before it.
        var typed: Set<String> = []
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# TYPE ") {
                typed.insert(String(line.split(separator: " ")[2]))
            } else if !line.hasPrefix("#") {
                let name = String(line.prefix { $0 != "{" && $0 != " " })
                let base = ["_bucket", "_sum", "_count"].reduce(name) { $0.hasSuffix($1) ? String($0.dropLast($1.count)) : $0 }
                #expect(typed.contains(name) || typed.contains(base), "\(name) has no TYPE line")
            }
        }
    }
}
