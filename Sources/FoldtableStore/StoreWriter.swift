import FoldtableServer
import Foundation
import Glibc

/// The one thread that owns the store's connection, and the queue that feeds it.
///
/// Every operation, reads included, goes through the queue, so a read sees every write asked
/// before it. Each turn the thread takes everything queued and runs it in order: consecutive
/// writes share one `BEGIN IMMEDIATE ... COMMIT` (group commit: one fsync for all the appends
/// one loop turn produced); a read first commits the writes queued before it, then runs on its
/// own. Results go back through `deliver` in queue order, one call per commit or batch.
///
/// `@unchecked Sendable`: `queue`, `busy`, `closing` and `finished` are touched only with
/// `condition` locked; `tables` (the connection) is touched only by the writer thread once
/// `start()` ran (before that only by the initialiser's thread, and starting a thread orders those
/// accesses before it). `deliver` is `@Sendable`.
final class StoreWriter: @unchecked Sendable {
    /// Hands a batch's outcomes to the service thread (posts them; never runs them inline).
    typealias Deliver = @Sendable ([StoreDelivery]) -> Void

    private let tables: SessionTables
    private let deliverBatch: Deliver
    private let condition = NSCondition()
    private var queue: [StoreOperation] = []
    /// An emptied batch kept for the next: `run` swaps it in as the new queue, so a busy writer
    /// reuses two arrays' storage instead of growing a new one from nothing every batch.
    private var spare: [StoreOperation] = []
    /// A batch is being run (taken from the queue, results not yet all posted).
    private var busy = false
    private var closing = false
    private var finished = false
    private var started = false
    /// The writer thread, once it runs: `close()` called on it must not wait for itself.
    private var writerThread: pthread_t?

    init(tables: SessionTables, deliver: @escaping Deliver) {
        self.tables = tables
        self.deliverBatch = deliver
    }

    /// Starts the thread. From here on only that thread uses the connection.
    func start() {
        condition.lock()
        started = true
        condition.unlock()
        let thread = Thread { [self] in run() }
        thread.name = "foldtable-store"
        thread.start()
    }

    /// Queues `operation`; `false` once the writer is closing (the caller fails it itself).
    func enqueue(_ operation: StoreOperation) -> Bool {
        enqueue(contentsOf: [operation])
    }

    /// Queues `operations` in order with one lock and one wake-up; `false` (nothing queued) once
    /// the writer is closing.
    func enqueue(contentsOf operations: [StoreOperation]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !closing else { return false }
        queue.append(contentsOf: operations)
        condition.broadcast()
        return true
    }

    /// Takes every operation of `operations` in order with one lock and one wake-up, leaving it
    /// empty; `false` (nothing taken) once the writer is closing. When the writer's queue is
    /// empty the two arrays are swapped: nothing copied, nothing released on the caller's thread.
    func enqueue(taking operations: inout [StoreOperation]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !closing else { return false }
        if queue.isEmpty {
            swap(&queue, &operations)
        } else {
            queue.append(contentsOf: operations)
            operations.removeAll(keepingCapacity: true)
        }
        condition.broadcast()
        return true
    }

    /// Blocks until the queue is empty and the last batch's results are posted.
    func flush() {
        condition.lock()
        while started && !finished && (busy || !queue.isEmpty) { condition.wait() }
        condition.unlock()
    }

    /// Runs what is queued, then stops the thread and closes the connection. Blocks until done.
    /// On the writer thread itself it only asks the thread to stop, without waiting.
    func close() {
        condition.lock()
        closing = true
        condition.broadcast()
        if let writerThread, pthread_equal(writerThread, pthread_self()) != 0 {
            // Called from the writer thread itself (a completion run inline by `post`, or the
            // last reference to the store dropped there): it stops after the current batch.
        } else if started {
            while !finished { condition.wait() }
        } else if !finished {
            // Never started: the connection is still ours to close, on this thread.
            finished = true
            tables.database.close()
        }
        condition.unlock()
    }

    private func run() {
        condition.lock()
        writerThread = pthread_self()
        while true {
            while queue.isEmpty && !closing { condition.wait() }
            if queue.isEmpty { break }
            var batch: [StoreOperation] = []
            swap(&batch, &spare)
            swap(&batch, &queue)
            busy = true
            condition.unlock()
            runBatch(batch)
            batch.removeAll(keepingCapacity: true)
            condition.lock()
            if spare.capacity < batch.capacity { swap(&spare, &batch) }
            busy = false
            condition.broadcast()
        }
        tables.database.close()
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    // MARK: - One batch

    private func runBatch(_ batch: [StoreOperation]) {
        var deliveries: [StoreDelivery] = []
        // Sized once: a batch of a thousand appends would otherwise grow it ten times.
        deliveries.reserveCapacity(batch.count)
        // Runs of writes are committed as slices of the batch, not copied into an array of their
        // own (a copy retains everything an operation carries).
        var writesStart = batch.startIndex
        for index in batch.indices where !batch[index].writes {
            if writesStart < index {
                commit(batch[writesStart..<index], into: &deliveries)
                deliver(&deliveries)
            }
            writesStart = index + 1
            if let delivery = runRead(batch[index]) { deliveries.append(delivery) }
        }
        if writesStart < batch.endIndex { commit(batch[writesStart...], into: &deliveries) }
        deliver(&deliveries)
    }

    private func deliver(_ deliveries: inout [StoreDelivery]) {
        guard !deliveries.isEmpty else { return }
        let batch = deliveries
        deliveries = []
        deliverBatch(batch)
    }

    /// Runs `writes` in one transaction. Conflicts fail only their operation; any SQLite failure
    /// (BEGIN, a statement, COMMIT) rolls everything back and fails every write of the group, so
    /// nothing is acknowledged that is not on disk. The next batch starts afresh.
    private func commit(_ writes: ArraySlice<StoreOperation>, into deliveries: inout [StoreDelivery]) {
        let database = tables.database
        let delivered = deliveries.count
        do throws(SQLiteError) {
            // Prepared once (cached by the connection), not parsed again for every batch.
            try database.run("BEGIN IMMEDIATE")
            for index in writes.indices {
                switch writes[index] {
                case .append(let session, let events, let appender):
                    deliveries.append(.appended(appender, try tables.append(session: session, events: events)))
                case .create(let session, let completion):
                    let result = try tables.create(session)
                    deliveries.append(.completion { completion(result) })
                case .saveCheckpoint(let name, let table, let views, let completion):
                    let result = try tables.saveCheckpoint(name, table: table, views: views)
                    deliveries.append(.completion { completion(result) })
                case .delete(let name, let completion):
                    let result = try tables.delete(name)
                    deliveries.append(.completion { completion(result) })
                case .webhook(let body, let completion):
                    try body(tables.database)
                    deliveries.append(.completion { completion(.success(())) })
                case .load, .read, .history, .barrier:
                    break
                }
            }
            try tables.compactJournal()
            try database.run("COMMIT")
        } catch {
            // SQLite may already have rolled back (some I/O errors do); ROLLBACK only if a
            // transaction is still open, and ignore its own failure: the next BEGIN tells.
            if !database.isAutocommit { try? database.exec("ROLLBACK") }
            // The journal's index took the batch's writes; the database no longer has them.
            tables.invalidateIndex()
            let failure = error.storeError
            deliveries.removeSubrange(delivered...)
            deliveries += writes.compactMap { $0.failure(failure) }
        }
    }

    private func runRead(_ operation: StoreOperation) -> StoreDelivery? {
        do throws(SQLiteError) {
            switch operation {
            case .load(let name, let completion):
                let result = try tables.load(name)
                return .completion { completion(result) }
            case .read(let session, let after, let completion):
                let result = try tables.read(session: session, after: after)
                return .completion { completion(result) }
            case .history(let session, let before, let limit, let completion):
                let result = try tables.history(session: session, before: before, limit: limit)
                return .completion { completion(result) }
            case .barrier(let body):
                body(tables)
                return nil
            case .append, .create, .saveCheckpoint, .delete, .webhook:
                return nil
            }
        } catch {
            return operation.failure(error.storeError)
        }
    }
}
