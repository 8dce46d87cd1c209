import FoldtableCore
import Testing

@testable import FoldtableServer

@Suite struct MetricsTests {
    @Test func aDurationInSecondsIsWhatItsComponentsSay() {
        let durations: [Duration] = [
            .zero, .nanoseconds(1), .nanoseconds(1_234_567), .milliseconds(250), .seconds(3), .seconds(19), .seconds(86_400 * 400),
            .nanoseconds(-5_000), .seconds(-30),
        ]
        for duration in durations {
            let (seconds, attoseconds) = duration.components
            let expected = Double(seconds) + Double(attoseconds) / 1e18
            #expect(abs(Metrics.seconds(duration) - expected) <= max(abs(expected), 1e-9) * 1e-12, "\(duration)")
        }
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
