// foldtable-bench: throughput of the table core on one core, with Foundation's JSONSerialization
// encoding the same events as the peer measured in the same run (machines are noisy; compare
// within a run, not across runs).
//
//   foldtable-bench core [--seconds S]
//   foldtable-bench fanout --url ws://127.0.0.1:PORT/ws --kind foldtable|mirror ...  (FanoutBench.swift)
//   foldtable-bench store [--seconds S] [--sessions N] [--interval S]  (StoreBench.swift)
import FoldtableCore
import Foundation

/// Seconds on `clock` (monotonic time, or a process's or thread's CPU time).
func clockSeconds(_ clock: clockid_t) -> Double {
    var spec = timespec()
    clock_gettime(clock, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

func now() -> Double { clockSeconds(CLOCK_MONOTONIC) }

/// Runs `body` in rounds until `seconds` pass; returns operations per second.
func measure(seconds: Double, batch: Int, _ body: () -> Void) -> Double {
    var operations = 0
    let start = now()
    var elapsed = 0.0
    repeat {
        body()
        operations += batch
        elapsed = now() - start
    } while elapsed < seconds
    return Double(operations) / elapsed
}

func formatted(_ value: Double) -> String {
    let number = Int(value.rounded())
    var text = String(number)
    var index = text.count - 3
    while index > 0 {
        text.insert(",", at: text.index(text.startIndex, offsetBy: index))
        index -= 3
    }
    return text
}

func benchCore(seconds: Double) {
    let author = Author(client: "c1", name: "ana")
    var table = DemoTable.make()
    let keys = table.sections.map(\.key)
    var sink = 0

    let toggles = measure(seconds: seconds, batch: 10_000) {
        for index in 0..<10_000 {
            let result = try! table.apply(.toggle(section: .key(keys[index % keys.count])), by: author)  // safe: the table's own keys
            if case .applied(let event) = result {
                sink &+= event.collapsed.count
            }
        }
    }
    let togglesWithIds = measure(seconds: seconds, batch: 10_000) {
        for index in 0..<10_000 {
            let id = "k\(table.seq)"
            let change = Change.toggle(section: .key(keys[index % keys.count]))
            if case .applied(let event) = try! table.apply(change, by: author, changeId: id) {  // safe: the table's own keys
                sink &+= event.collapsed.count
            }
        }
    }
    // A busy server: the same toggles with fresh ids, round-robin over 256 tables whose windows
    // are full (10,000 ids each, ~125 MB together): each change's id lookup and the oldest id's
    // removal meet memory no cache holds, as on a server acknowledging 1,000 busy sessions.
    var busy = (0..<256).map { _ in DemoTable.make() }
    for index in busy.indices {
        for _ in 0..<busy[index].limits.idempotencyWindow {
            _ = try! busy[index].apply(.toggle(section: .key(keys[0])), by: author, changeId: "k\(busy[index].seq)")  // safe: own keys
        }
    }
    var next = 0
    let togglesInFullWindows = measure(seconds: seconds, batch: 10_000) {
        for _ in 0..<10_000 {
            let id = "k\(busy[next].seq)"
            if case .applied(let event) = try! busy[next].apply(.toggle(section: .key(keys[0])), by: author, changeId: id) {  // safe: own keys
                sink &+= event.collapsed.count
            }
            next = (next + 1) % busy.count
        }
    }
    busy = []
    let event = TableEvent(
        seq: 123_456, author: author, changeId: "k3f9-17", change: .toggle(section: .key("mac")),
        collapsed: [CollapseEffect(key: "mac", collapsed: true)])
    let encoded = measure(seconds: seconds, batch: 10_000) {
        for _ in 0..<10_000 { sink &+= ServerMessage.event(event).count }
    }
    let foundation = measure(seconds: seconds, batch: 1_000) {
        for _ in 0..<1_000 {
            let object: [String: Any] = [
                "type": "event", "seq": 123_456, "by": ["client": "c1", "name": "ana"], "id": "k3f9-17",
                "change": ["type": "toggle", "section": "mac"], "collapsed": ["mac": true],
            ]
            sink &+= (try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])).count  // safe: a valid JSON object
        }
    }
    let message = Array(#"{"type":"toggle","section":"mac","id":"k3f9-17"}"#.utf8)
    let decoded = measure(seconds: seconds, batch: 10_000) {
        for _ in 0..<10_000 {
            if case .success = ClientMessage.decode(message).0 { sink &+= 1 }
        }
    }
    print("core: toggles applied/s          \(formatted(toggles))   (target >= 1,000,000)")
    print("core: toggles with change id/s   \(formatted(togglesWithIds))")
    print("core: toggles with change id, 256 full windows/s  \(formatted(togglesInFullWindows))")
    print("core: events encoded/s           \(formatted(encoded))   (target >= 300,000)")
    print("peer: JSONSerialization events/s \(formatted(foundation))   (same event, Foundation)")
    print("core: client messages decoded/s  \(formatted(decoded))")
    if sink == 42 { print("") }  // keeps the work observable to the optimizer
}

var arguments = Array(CommandLine.arguments.dropFirst())
let mode = arguments.first.map { $0.hasPrefix("--") ? "core" : $0 } ?? "core"
if arguments.first == mode { arguments.removeFirst() }
var seconds = 1.0
if let index = arguments.firstIndex(of: "--seconds"), index + 1 < arguments.count, let value = Double(arguments[index + 1]) {
    seconds = value
}
switch mode {
case "core":
    benchCore(seconds: seconds)
case "fanout":
    exit(runFanout(arguments: arguments))
case "store":
    exit(runStoreBench(arguments: arguments))
default:
    let usage =
        "usage: foldtable-bench core [--seconds S]\n"
        + "       foldtable-bench store [--seconds S] [--sessions N] [--interval S]\n\(FanoutOptions.usage)\n"
    FileHandle.standardError.write(Data(usage.utf8))
    exit(2)
}
