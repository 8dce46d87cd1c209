import FoldtableCore
import Synchronization

/// A Redis client that never blocks its caller: commands are queued, a thread of the client's
/// own sends them, and each completion runs through `deliver` (the server passes its service
/// queue's `post`, so completions run on the service thread, in the order the commands were sent).
///
/// - **Pipelining**: each turn the thread takes every command queued at that moment, writes them
///   all, then reads their replies in order: one round trip for a burst (`send` with an
///   array of commands queues them together, so they always share one).
/// - **Timeouts**: a connect attempt (with its handshake: AUTH, SELECT, or a PING) has
///   `connectTimeoutMs`; every reply has `commandTimeoutMs`, plus the command's own
///   ``RedisCommand/blockMs`` for `XREAD BLOCK`. A reply that does not come drops the
///   connection: a late reply would otherwise answer the next command.
/// - **Reconnects** with `ReconnectBackoff` (FoldtableCore): at once after a lost connection, then with growing
///   delays while attempts fail. Commands queued while no connection is up fail at once with
///   ``RedisError/notConnected(_:)``, so callers learn of an outage immediately instead of
///   piling up. Commands in flight when a connection breaks fail with
///   ``RedisError/connectionLost(_:)`` or ``RedisError/timedOut(_:)``: never sent twice.
/// - **Blocking reads**: the thread waits for a blocked command's reply like any other, so
///   everything queued behind it waits too. Give `XREAD BLOCK` a client of its own.
///
/// ``close()`` (or the last reference going away) fails what is queued with
/// ``RedisError/closed``, interrupts a blocked read, and waits for the thread to end.
public final class RedisClient: Sendable {
    /// How to reach Redis, and how long to wait for it.
    public struct Options: Sendable {
        public var url: RedisURL
        /// Milliseconds for TCP connect plus handshake. Default 2,000.
        public var connectTimeoutMs: UInt64 = 2_000
        /// Milliseconds to wait for each reply (beyond a command's `blockMs`). Default 2,000.
        public var commandTimeoutMs: UInt64 = 2_000
        /// Reconnect delays: from 0.1 s, doubling to 5 s, with jitter (a node should be back
        /// soon after Redis is, without every node knocking at once).
        public var backoff = ReconnectBackoff(baseMs: 100, maxMs: 5_000)
        /// An idle connection is checked with a `PING` after this many milliseconds without
        /// commands, so an outage is reported (``State``) while nothing is being sent. 0: never.
        /// Default 1,000.
        public var idlePingMs: UInt64 = 1_000
        /// Set with `CLIENT SETNAME` on each connection (shows in `CLIENT LIST`); `nil`: none.
        public var clientName: String?

        public init(url: RedisURL) {
            self.url = url
        }
    }

    /// The connection's state, reported through `stateChanged` when it changes.
    public enum State: Equatable, Sendable {
        case connected
        /// The connection is down (or never came up) for `reason`; attempts go on with backoff.
        case disconnected(reason: String)
    }

    /// What the thread has done so far (for tests and, later, `/metrics`).
    public struct Counters: Equatable, Sendable {
        /// Commands written to a connection.
        public var commands: UInt64 = 0
        /// Batches written and read back: pipelined commands share one.
        public var roundTrips: UInt64 = 0
        /// Connections made (handshake included).
        public var connects: UInt64 = 0
        /// Connect attempts that failed.
        public var failedConnects: UInt64 = 0
    }

    /// Runs a completion somewhere: inline on the client's thread by default; the server passes
    /// its service queue's `post`.
    public typealias Deliver = @Sendable (@escaping @Sendable () -> Void) -> Void
    public typealias Completion = @Sendable (Result<RedisReply, RedisError>) -> Void

    private let worker: RedisWorker

    /// Starts the client's thread, which connects at once. `stateChanged` is delivered like
    /// completions, in order with them.
    public init(_ options: Options, deliver: @escaping Deliver = { $0() }, stateChanged: @escaping @Sendable (State) -> Void = { _ in }) {
        worker = RedisWorker(options: options, deliver: deliver, stateChanged: stateChanged)
        worker.start()
    }

    /// A client that is closed from the start: it makes no thread and no connection, and every
    /// command fails with ``RedisError/closed`` (what a closed ``RedisClusterClient`` hands
    /// out, so that nothing it returns after `close()` connects).
    public init(closed options: Options, deliver: @escaping Deliver = { $0() }) {
        worker = RedisWorker(options: options, deliver: deliver, stateChanged: { _ in })
        worker.startClosed()
    }

    deinit {
        worker.close()
    }

    /// Queues `command`; `completion` gets its reply (an error reply is a reply: `.error`).
    public func send(_ command: RedisCommand, completion: @escaping Completion) {
        worker.enqueue([RedisWorker.Queued(command: command, completion: completion)])
    }

    /// Queues `commands` together (one pipeline, one round trip when connected); `completion`
    /// gets one result per command, in order.
    public func send(_ commands: [RedisCommand], completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        guard !commands.isEmpty else { return completion([]) }
        let collected = PipelineResults(count: commands.count, completion: completion)
        worker.enqueue(
            commands.enumerated().map { index, command in
                RedisWorker.Queued(command: command) { result in collected.set(index, result) }
            })
    }

    /// Queues `commands` as one transaction (`MULTI`, the commands, `EXEC`) in one pipeline:
    /// Redis runs them together, so a client blocked on a key they change (an `XREAD BLOCK` on
    /// a stream they append to) is answered once, after all of them, not after the first.
    /// `completion` gets one result per command, in order: its own reply (an error reply is a
    /// reply), ``RedisError/server(_:)`` for all when Redis refused the transaction (nothing
    /// ran), or the failure of the pipeline (``RedisError/mayHaveRun`` as for one command).
    public func transaction(_ commands: [RedisCommand], completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        guard !commands.isEmpty else { return completion([]) }
        let count = commands.count
        send([RedisCommand("MULTI")] + commands + [RedisCommand("EXEC")]) { results in
            completion(Self.transactionResults(results, count: count))
        }
    }

    /// Each command's result from the pipeline `MULTI`, the `count` commands, `EXEC`.
    static func transactionResults(_ results: [Result<RedisReply, RedisError>], count: Int) -> [Result<RedisReply, RedisError>] {
        let queued = results.dropFirst().prefix(count)
        switch results.last {
        case .success(.array(let replies))? where replies.count == count:
            return replies.map { .success($0) }
        case .success(.error(let message))?:
            // EXECABORT: a command was refused while queued (its own error says why); none ran.
            return queued.map { result in
                if case .success(.error(let own)) = result { return .failure(.server(own)) }
                return .failure(.server(message))
            }
        case .success(let reply)?:
            return Array(repeating: .failure(.unexpectedReply("EXEC answered \(reply.summary)")), count: count)
        case .failure(let error)?:
            return Array(repeating: .failure(error), count: count)
        case nil:
            return Array(repeating: .failure(.closed), count: count)
        }
    }

    /// Fails what is queued with ``RedisError/closed``, interrupts a blocked read, ends the
    /// thread and waits for it (not when called from a completion running on that thread).
    public func close() {
        worker.close()
    }

    public var counters: Counters { worker.counters }
}

/// Gathers the results of one pipeline and hands them over when the last arrives. The worker
/// delivers a batch's results in one go, so the lock is never contended; it is there because
/// `deliver` may run them on any thread.
final class PipelineResults: Sendable {
    private let state: Mutex<(results: [Result<RedisReply, RedisError>], missing: Int)>
    private let completion: @Sendable ([Result<RedisReply, RedisError>]) -> Void

    init(count: Int, completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        state = Mutex((Array(repeating: .failure(.closed), count: count), count))
        self.completion = completion
    }

    func set(_ index: Int, _ result: Result<RedisReply, RedisError>) {
        let done: [Result<RedisReply, RedisError>]? = state.withLock { state in
            state.results[index] = result
            state.missing -= 1
            return state.missing == 0 ? state.results : nil
        }
        if let done { completion(done) }
    }
}
