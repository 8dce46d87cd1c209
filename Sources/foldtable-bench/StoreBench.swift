// foldtable-bench store: the SQLite store's writer in its steady state, without sockets or
// clients, so that a change to the store is measured in CPU time rather than in an end-to-end
// figure that moves ±20% between runs on these machines.
//
// The load is the acks benchmark's, as the writer sees it: 1,000 sessions of one section with two
// rows, each appending toggles with change ids (two a commit, as a client keeping changes in
// flight gets them committed), a checkpoint every 1,000 events staggered as the hub does. Two
// turns of appends are kept queued, as the service thread keeps the writer busy. Every interval
// prints the events committed per second and the writer's CPU time per event (the process's CPU
// time less this thread's, which only makes the events); the last line averages the second half
// of the run, past the journal's growth to its bound.
import FoldtableCore
import FoldtableServer
import FoldtableStore
import Foundation

/// Counts the acknowledged appends of one turn.
final class BenchAppender: LogAppender {
    var finished = 0
    var failed = 0

    func appendFinished(_ result: Result<UInt64, StoreError>) {
        finished += 1
        if case .failure = result { failed += 1 }
    }
}

func runStoreBench(arguments: [String]) -> Int32 {
    var seconds = 60.0
    var sessions = 1_000
    var interval = 5.0
    // What foldtabled keeps by default, so the bench measures the writer as it runs; 0 measures
    // the log bounded by the resume window alone (as before history was kept).
    var historyKeepEvents = ServerConfig().historyKeepEvents
    var index = 0
    while index < arguments.count {
        let value = index + 1 < arguments.count ? arguments[index + 1] : ""
        switch arguments[index] {
        case "--seconds": seconds = Double(value) ?? seconds
        case "--sessions": sessions = Int(value) ?? sessions
        case "--interval": interval = Double(value) ?? interval
        case "--history-keep-events": historyKeepEvents = Int(value) ?? historyKeepEvents
        default:
            let usage =
                "usage: foldtable-bench store [--seconds S (60)] [--sessions N (1000)] [--interval S (5)] [--history-keep-events N (\(ServerConfig().historyKeepEvents))]\n"
            FileHandle.standardError.write(Data(usage.utf8))
            return 2
        }
        index += 2
    }
    let directory = NSTemporaryDirectory() + "foldtable-store-bench-\(getpid())"
    defer { try? FileManager.default.removeItem(atPath: directory) }
    // The server's own queue; this loop is its service thread, and polls instead of being woken.
    let service = ServiceQueue(wake: {})
    let store: SQLiteStore
    do {
        store = try SQLiteStore(
            directory: directory, keepEvents: 300, historyKeepEvents: historyKeepEvents, limits: TableLimits(), post: service.post)
    } catch {
        FileHandle.standardError.write(Data("store bench: \(error)\n".utf8))
        return 1
    }
    let author = Author(client: "c1", name: "bench")
    let checkpointEvents: UInt64 = 1_000
    var tables: [Table] = []
    var names: [String] = []
    var nextCheckpoint: [UInt64] = []
    for session in 0..<sessions {
        let name = "bench-\(session)"
        var table = Table()
        let section = NewSection(key: "s\(session)", title: "Bench \(session)")
        _ = try! table.apply(.addSection(section), by: author)  // safe: a new key in a new table
        names.append(name)
        var created: Result<Void, StoreError>?
        store.create(StoredSession(name: name, epoch: "e", checkpoint: table)) { created = $0 }
        while created == nil { service.drain() }
        tables.append(table)
        // The hub's stagger: the first checkpoint up to half the interval early, by the name.
        nextCheckpoint.append(checkpointEvents - UInt64(session * Int(checkpointEvents / 2) / sessions))
    }

    var turns: [BenchAppender] = []
    var committed = 0
    var intervalCommitted = 0
    let start = now()
    var intervalStart = start
    var intervalProcess = clockSeconds(CLOCK_PROCESS_CPUTIME_ID)
    var intervalThread = clockSeconds(CLOCK_THREAD_CPUTIME_ID)
    var secondHalf: (events: Int, writer: Double, wall: Double) = (0, 0, 0)
    var failures = 0
    while now() - start < seconds {
        // A turn: every session appends two toggles, and checkpoints when due.
        let appender = BenchAppender()
        for session in 0..<sessions {
            var events: [LoggedEvent] = []
            for _ in 0..<2 {
                let change = Change.toggle(section: .key("s\(session)"))
                let id = "\(tables[session].seq)x\(session)"
                let result = try! tables[session].apply(change, by: author, changeId: id)  // safe: a toggle of the section made above
                guard case .applied(let event) = result else { continue }
                events.append(LoggedEvent(event: event, request: change, encoded: ServerMessage.event(event)))
            }
            store.append(session: names[session], events: events, appender: appender)
            if tables[session].seq >= nextCheckpoint[session] {
                nextCheckpoint[session] += checkpointEvents
                store.saveCheckpoint(names[session], table: tables[session]) { _ in }
            }
        }
        turns.append(appender)
        service.drain()
        // Every turn acknowledged is counted; with more than two queued, the oldest is waited for.
        while true {
            if let first = turns.first, first.finished == sessions {
                committed += 2 * sessions
                intervalCommitted += 2 * sessions
                failures += first.failed
                turns.removeFirst()
            } else if turns.count <= 2 {
                break
            } else if service.isEmpty {
                usleep(50)
            } else {
                service.drain()
            }
        }
        let time = now()
        if time - intervalStart >= interval {
            let process = clockSeconds(CLOCK_PROCESS_CPUTIME_ID)
            let thread = clockSeconds(CLOCK_THREAD_CPUTIME_ID)
            let writer = (process - intervalProcess) - (thread - intervalThread)
            let wall = time - intervalStart
            print(
                "store: t=\(Int(time - start))s events/s=\(Int(Double(intervalCommitted) / wall)) writer_us/event=\(String(format: "%.2f", writer * 1e6 / Double(max(1, intervalCommitted)))) writer_cpu=\(Int(100 * writer / wall))%"
            )
            if time - start > seconds / 2 {
                secondHalf.events += intervalCommitted
                secondHalf.writer += writer
                secondHalf.wall += wall
            }
            intervalStart = time
            intervalProcess = process
            intervalThread = thread
            intervalCommitted = 0
        }
    }
    store.close()
    service.drain()
    let perEvent = secondHalf.writer * 1e6 / Double(max(1, secondHalf.events))
    print(
        "store steady: sessions=\(sessions) events=\(committed) failed=\(failures) events/s=\(Int(Double(secondHalf.events) / max(secondHalf.wall, 1e-9))) writer_us/event=\(String(format: "%.2f", perEvent)) (second half of \(Int(seconds)) s)"
    )
    return failures == 0 ? 0 : 1
}
