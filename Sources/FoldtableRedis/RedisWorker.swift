import Foundation
import Glibc

/// The thread behind a ``RedisClient`` and the queue that feeds it (the shape of the SQLite
/// store's writer): the one owner of the client's ``RedisConnection``.
///
/// `@unchecked Sendable`: `queue`, `closing`, `finished`, `thread`, `socket` and `counts` are
/// touched only with `condition` locked; `connection`, `attempt`, `nextAttemptAt`, `state`,
/// `timeoutMs` and `lastUsedAt` only by the worker thread (`start()` runs before the thread
/// exists). Completions and the state callback are `@Sendable` and run through `deliver`, never
/// under the lock.
final class RedisWorker: @unchecked Sendable {
    struct Queued: Sendable {
        let command: RedisCommand
        let completion: RedisClient.Completion
    }

    private let options: RedisClient.Options
    private let deliver: RedisClient.Deliver
    private let stateChanged: @Sendable (RedisClient.State) -> Void

    private let condition = NSCondition()
    private var queue: [Queued] = []
    private var closing = false
    private var finished = false
    private var thread: pthread_t?
    /// The connected socket, so `close()` can `shutdown` it to end a blocked read. Cleared (under
    /// the lock) before the connection is freed, so it is never a closed or reused descriptor.
    private var socket: Int32?
    private var counts = RedisClient.Counters()

    // Worker thread only.
    private var connection: RedisConnection?
    private var attempt = 0
    private var nextAttemptAt: UInt64 = 0
    /// The last state reported; `nil` before the first attempt.
    private var state: RedisClient.State?
    private var timeoutMs: UInt64 = 0
    /// When the connection last carried a batch (monotonic ms), for the idle check.
    private var lastUsedAt: UInt64 = 0

    init(options: RedisClient.Options, deliver: @escaping RedisClient.Deliver, stateChanged: @escaping @Sendable (RedisClient.State) -> Void) {
        self.options = options
        self.deliver = deliver
        self.stateChanged = stateChanged
    }

    /// Closed from the start, instead of `start()`: no thread is made, every command fails
    /// with ``RedisError/closed`` and `close()` has nothing to wait for.
    func startClosed() {
        condition.lock()
        closing = true
        finished = true
        condition.unlock()
    }

    func start() {
        let thread = Thread { [self] in run() }
        thread.name = "foldtable-redis"
        thread.start()
    }

    func enqueue(_ items: [Queued]) {
        condition.lock()
        guard !closing else {
            condition.unlock()
            deliver { for item in items { item.completion(.failure(.closed)) } }
            return
        }
        queue.append(contentsOf: items)
        condition.broadcast()
        condition.unlock()
    }

    var counters: RedisClient.Counters {
        condition.lock()
        defer { condition.unlock() }
        return counts
    }

    func close() {
        condition.lock()
        closing = true
        // A read blocked in the kernel (XREAD BLOCK, a stopped server) ends with EOF at once.
        if let socket { shutdown(socket, Int32(SHUT_RDWR)) }
        condition.broadcast()
        if let thread, pthread_equal(thread, pthread_self()) != 0 {
            // A completion run inline on the worker closed the client: it stops after this batch.
        } else {
            while !finished { condition.wait() }
        }
        condition.unlock()
    }

    // MARK: - The thread

    private func run() {
        // hiredis writes with write(2): a peer that went away raises SIGPIPE, which by default
        // kills the process. Blocked on this thread only, so the write fails with EPIPE instead
        // and the process keeps whatever disposition its owner chose.
        var pipe = sigset_t()
        sigemptyset(&pipe)
        sigaddset(&pipe, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipe, nil)

        condition.lock()
        thread = pthread_self()
        while true {
            // Wait for commands; meanwhile reconnect when an attempt is due, and check an idle
            // connection every `idlePingMs`.
            var pingDue = false
            while queue.isEmpty && !closing {
                let now = Self.monotonicMs()
                let due: UInt64
                if connection == nil {
                    due = nextAttemptAt
                } else if options.idlePingMs > 0 {
                    due = lastUsedAt + options.idlePingMs
                    pingDue = now >= due
                } else {
                    condition.wait()
                    continue
                }
                if now >= due { break }
                _ = condition.wait(until: Date(timeIntervalSinceNow: Double(due - now) / 1_000))
            }
            if closing { break }
            let batch = queue
            queue = []
            condition.unlock()
            if let open = connection, !open.isIdleAndOpen() {
                // Closed while idle (a restarted Redis, an idle timeout): found out before a
                // command is written to it, so the command goes on a new connection instead of
                // failing with an outcome that only looks unknown.
                disconnect(.connectionLost("the server closed the connection"))
            }
            if connection == nil && Self.monotonicMs() >= nextAttemptAt { connect() }
            if !batch.isEmpty {
                let results = connection == nil ? batch.map { _ in Result.failure(notConnected) } : execute(batch)
                deliver { for (item, result) in zip(batch, results) { item.completion(result) } }
            } else if pingDue, connection != nil {
                // A stopped server is noticed (and reported) without waiting for a command.
                _ = execute([Queued(command: RedisCommand("PING"), completion: { _ in })], counted: false)
            }
            condition.lock()
        }
        let left = queue
        queue = []
        socket = nil
        condition.unlock()
        connection = nil
        if !left.isEmpty { deliver { for item in left { item.completion(.failure(.closed)) } } }
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    /// Why a command cannot be sent now.
    private var notConnected: RedisError {
        let reason: String
        if case .disconnected(let why) = state { reason = why } else { reason = "no connection" }
        let wait = nextAttemptAt > Self.monotonicMs() ? nextAttemptAt - Self.monotonicMs() : 0
        return .notConnected("\(reason) (next attempt in \(wait) ms)")
    }

    private func connect() {
        let opened = RedisConnection.open(
            options.url, name: options.clientName, connectTimeoutMs: options.connectTimeoutMs, commandTimeoutMs: options.commandTimeoutMs)
        switch opened {
        case .success(let made):
            connection = made
            timeoutMs = options.commandTimeoutMs
            lastUsedAt = Self.monotonicMs()
            attempt = 0
            condition.lock()
            socket = made.socket
            counts.connects += 1
            condition.unlock()
            report(.connected)
        case .failure(let error):
            let delay = options.backoff.delayMs(attempt: attempt, random: Double.random(in: 0..<1))
            attempt += 1
            nextAttemptAt = Self.monotonicMs() + UInt64(delay)
            condition.lock()
            counts.failedConnects += 1
            condition.unlock()
            report(.disconnected(reason: error.reason))
        }
    }

    /// Drops the connection after a failure; the next attempt is at once (a restart or a
    /// network blip is usually over by then), later ones back off.
    private func disconnect(_ error: RedisError) {
        condition.lock()
        socket = nil
        condition.unlock()
        connection = nil
        attempt = 0
        nextAttemptAt = Self.monotonicMs()
        report(.disconnected(reason: error.reason))
    }

    private func report(_ new: RedisClient.State) {
        guard new != state else { return }
        // Only transitions are reported: a Redis that stays down is one line, not one per attempt.
        if case .disconnected = new, case .disconnected = state { return }
        state = new
        let stateChanged = self.stateChanged
        deliver { stateChanged(new) }
    }

    /// Writes every command of `batch`, then reads the replies in order. `counted`: whether it
    /// shows in the counters (the idle check's PING does not).
    private func execute(_ batch: [Queued], counted: Bool = true) -> [Result<RedisReply, RedisError>] {
        guard let connection else { return batch.map { _ in .failure(notConnected) } }
        defer { lastUsedAt = Self.monotonicMs() }
        var results: [Result<RedisReply, RedisError>?] = Array(repeating: nil, count: batch.count)
        let wanted = options.commandTimeoutMs + (batch.map(\.command.blockMs).max() ?? 0)
        if wanted != timeoutMs {
            if let failure = connection.setTimeout(milliseconds: wanted) {
                let error = RedisError.notConnected("could not set the socket timeout: \(failure)")
                disconnect(error)
                return batch.map { _ in .failure(error) }
            }
            timeoutMs = wanted
        }
        for (index, item) in batch.enumerated() where item.command.arguments.isEmpty && item.command.script == nil {
            // Redis reads `*0` and sends nothing back: the reply would never come.
            results[index] = .failure(.invalidCommand("a command needs a name"))
        }
        for (index, item) in batch.enumerated() where results[index] == nil {
            guard let script = item.command.script, let error = connection.load(script) else { continue }
            if case .notConnected = error {
                // The connection broke while loading: nothing of the batch was sent.
                disconnect(error)
                return batch.map { _ in .failure(error) }
            }
            results[index] = .failure(error)
        }
        var sent: [Int] = []
        for (index, item) in batch.enumerated() where results[index] == nil {
            if connection.append(item.command) {
                sent.append(index)
            } else {
                results[index] = .failure(connection.failure(for: item.command))
            }
        }
        if counted {
            condition.lock()
            counts.commands += UInt64(sent.count)
            counts.roundTrips += 1
            condition.unlock()
        }
        for (position, index) in sent.enumerated() {
            switch connection.readReply() {
            case .success(let reply):
                if case .error(let message) = reply, message.hasPrefix("NOSCRIPT"), let script = batch[index].command.script {
                    connection.forget(script)
                }
                if batch[index].command.name == "EXEC", case .array(let replies) = reply,
                    replies.contains(where: { if case .error(let message) = $0 { message.hasPrefix("NOSCRIPT") } else { false } })
                {
                    // A script of the transaction was missing (a SCRIPT FLUSH): every script of
                    // the batch is loaded again before its next use.
                    for item in batch { if let script = item.command.script { connection.forget(script) } }
                }
                results[index] = .success(reply)
            case .failure(var error):
                condition.lock()
                if closing { error = .connectionLost("the client was closed") }
                condition.unlock()
                for unanswered in sent[position...] { results[unanswered] = .failure(error) }
                disconnect(error)
                return results.map { $0 ?? .failure(error) }
            }
        }
        return results.map { $0 ?? .failure(.closed) }
    }

    private static func monotonicMs() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) * 1_000 + UInt64(spec.tv_nsec) / 1_000_000
    }
}
