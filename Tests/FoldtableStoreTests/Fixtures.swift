import CSQLite
import Dispatch
import FoldtableCore
import FoldtableServer
import Foundation
import Synchronization
import Testing

@testable import FoldtableStore

/// The tests' service thread: a serial queue that completions are posted to.
final class ServiceQueue: Sendable {
    let queue = DispatchQueue(label: "foldtable-store-tests.service")

    var post: @Sendable (@escaping @Sendable () -> Void) -> Void {
        { [queue] work in queue.async(execute: work) }
    }

    /// Waits until everything posted so far has run.
    func drain() {
        queue.sync {}
    }
}

/// Holds what a completion delivered, for the test thread to read after waiting.
final class Box<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value?

    var value: Value? {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

/// Calls `start` with a completion and waits for that completion to run on the service queue.
func wait<Value>(_ start: (@escaping (Result<Value, StoreError>) -> Void) throws -> Void) rethrows -> Result<Value, StoreError> {
    let done = DispatchSemaphore(value: 0)
    let box = Box<Result<Value, StoreError>>()
    try start { result in
        box.value = result
        done.signal()
    }
    done.wait()
    return box.value ?? .failure(.unavailable("no result"))
}

/// A fresh directory under the system's temporary directory.
func temporaryDirectory() -> String {
    var template = Array((NSTemporaryDirectory() + "/foldtable-store-XXXXXX").utf8CString)
    return template.withUnsafeMutableBufferPointer { buffer in
        guard let base = buffer.baseAddress, let made = mkdtemp(base) else { return NSTemporaryDirectory() + "/foldtable-store-\(UUID())" }
        return String(cString: made)
    }
}

func removeDirectory(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

/// A table that changes, producing the events a session would log: new sections, and toggles
/// asked by title with change ids (so stored entries carry a request that differs from the event).
struct Script {
    var table: Table
    private var counter = 0

    init(table: Table = Table()) {
        self.table = table
    }

    mutating func events(_ count: Int, ids: Bool = true) throws -> [LoggedEvent] {
        var events: [LoggedEvent] = []
        for _ in 0..<count {
            counter += 1
            let change: Change =
                table.sections.isEmpty || counter % 3 == 0
                ? .addSection(NewSection(title: "S\(counter)")) : .toggle(section: .title(table.sections[0].title))
            let id = ids ? "c\(counter)" : nil
            guard case .applied(let event) = try table.apply(change, by: Author(client: "c1", name: "ana"), changeId: id) else {
                throw ProtocolError(.invalidValue, "the script's change was a duplicate")
            }
            events.append(LoggedEvent(event: event, request: ids ? change : nil))
        }
        return events
    }
}

/// Counts commits and, when asked, turns them into rollbacks, through SQLite's commit hook.
/// Globals because a C hook cannot capture; the suite is serialized.
let commitCount = Atomic<Int>(0)
let failCommits = Atomic<Bool>(false)

extension SQLiteStore {
    /// Installs the commit hook on the writer's connection.
    func installCommitHook() {
        runOnWriter { tables in
            sqlite3_commit_hook(
                tables.database.rawHandle,
                { _ in
                    commitCount.add(1, ordering: .relaxed)
                    return failCommits.load(ordering: .relaxed) ? 1 : 0
                }, nil)
        }
        flush()
    }

    /// Holds the writer thread until the returned semaphore is signalled, so that everything
    /// asked meanwhile lands in one batch.
    /// Blocks the writer thread until the returned semaphore is signalled; returns once it is
    /// blocked, so everything handed to it meanwhile runs in the next batch.
    func holdWriter() -> DispatchSemaphore {
        let release = DispatchSemaphore(value: 0)
        let holding = DispatchSemaphore(value: 0)
        runOnWriter { _ in
            holding.signal()
            release.wait()
        }
        holding.wait()
        return release
    }
}

func openStore(_ directory: String, keepEvents: Int = 300, service: ServiceQueue) throws(StoreError) -> SQLiteStore {
    try SQLiteStore(directory: directory, keepEvents: keepEvents, limits: TableLimits(), post: service.post)
}

/// The sessions both tests of an older schema start from: "a" with 10 events, a checkpoint
/// (`checkpointA`), then 7 more; "b" with 4 events whose authors gave no change ids.
struct OlderSchemaPlan {
    var planA = Script()
    let earlyA: [LoggedEvent]
    let checkpointA: Table
    let lateA: [LoggedEvent]
    let eventsB: [LoggedEvent]

    init() throws {
        earlyA = try planA.events(10)
        checkpointA = planA.table
        lateA = try planA.events(7)
        var planB = Script()
        eventsB = try planB.events(4, ids: false)
    }
}

/// Writes a session's row and its checkpoint as an older schema held them, by hand (`firstRow`:
/// the column schema 2 added).
func writeOlderSession(_ raw: SQLiteDatabase, name: String, table: Table, last: UInt64, firstRow: Int64? = nil) throws {
    let session = try raw.prepareUncached(
        firstRow == nil
            ? "INSERT INTO sessions(name, epoch, checkpoint_seq, last_seq) VALUES (?1, ?2, ?3, ?4)"
            : "INSERT INTO sessions(name, epoch, checkpoint_seq, last_seq, first_row) VALUES (?1, ?2, ?3, ?4, ?5)")
    defer { session.finalize() }
    try session.bind(1, name)
    try session.bind(2, "e-\(name)")
    try session.bind(3, table.seq)
    try session.bind(4, last)
    if let firstRow { try session.bind(5, firstRow) }
    try session.step()
    let checkpoint = try raw.prepareUncached("INSERT INTO checkpoints(session, data) VALUES (?1, ?2)")
    defer { checkpoint.finalize() }
    try checkpoint.bind(1, name)
    try checkpoint.bind(2, TableCheckpoint.encode(table))
    try checkpoint.step()
}

/// How many stored checkpoints still hold a change-id window (schema 4 keeps it in `change_ids`).
func checkpointsHoldingAWindow(_ raw: SQLiteDatabase) throws -> Int64? {
    try raw.scalarInt("SELECT count(*) FROM checkpoints WHERE instr(CAST(data AS TEXT), 'changeIds') > 0")
}

/// Loads `name` and replays its logged events onto its checkpoint: the table as the session had
/// it, and the seq its checkpoint was at.
func loadToHead(_ store: SQLiteStore, _ name: String) throws -> (checkpointSeq: UInt64, table: Table) {
    let loaded = try #require(try wait { store.load(name, completion: $0) }.get())
    var table = loaded.checkpoint
    for logged in loaded.events where logged.event.seq > table.seq {
        try table.applyCommitted(logged.event, request: logged.request)
    }
    return (loaded.checkpoint.seq, table)
}
