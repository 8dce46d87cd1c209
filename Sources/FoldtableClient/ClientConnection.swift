import CFoldtableWSClient
import FoldtableCore
import Glibc

/// Where a ``ClientConnection`` is.
public enum ConnectionState: Equatable, Sendable {
    /// Opening the WebSocket (`attempt` 0 is the first try).
    case connecting(attempt: Int)
    /// Open; the join is on its way.
    case joining
    /// Welcome or resume received: the replica is live.
    case joined
    /// Dropped; the next attempt starts at `retryAtMs` (``ClientConnection/nowMs()``).
    case waiting(retryAtMs: UInt64, attempt: Int, reason: String)
    /// Given up: `reason` is one line for people.
    case failed(reason: String)
    /// Closed on purpose.
    case closed
}

/// One client connection to a session, over the libwebsockets client wrapper CFoldtableWSClient.
///
/// Every message it sends is a ``ClientMessage`` encoded by the core, the same type the server
/// decodes with. Without a session (``ConnectOptions/session`` `nil`) it only asks for the list
/// of sessions. With one, it joins the session, applies what the server sends to ``replica``,
/// and reconnects after a drop with exponential backoff, resuming with `since`/`epoch` when the
/// replica can (else it rejoins for a fresh welcome). Changes go through an outbox with change ids: anything not
/// acknowledged is sent again, in order, after every (re)join, which is safe because the server
/// applies an id at most once.
///
/// It also hosts the event loop of the whole client (one thread, see CFoldtableWSClient.h):
/// timers and watched descriptors (stdin, the signal pipe) are served by the same loop, so
/// every callback below runs on the thread that called ``run()``.
public final class ClientConnection {
    public let options: ConnectOptions
    /// Reconnect after a drop (interactive and watch), or give up (one-shot script commands).
    public let reconnects: Bool
    public private(set) var replica = SessionReplica()
    public private(set) var state: ConnectionState
    /// A welcome or resume arrived at least once.
    public private(set) var everJoined = false
    /// Reconnect delays: from 0.4 s, doubling to 10 s, with jitter (the web client's policy).
    public var backoff = ReconnectBackoff(baseMs: 400, maxMs: 10_000)

    /// Every message line, after it was applied to ``replica``. `note` says in words what an
    /// event did (worded before it was applied).
    public var onUpdate: ((ServerUpdate, ArraySlice<UInt8>, _ note: String?) -> Void)?
    /// A line the server sent that could not be decoded (it is skipped).
    public var onBadMessage: ((ProtocolError) -> Void)?
    public var onStateChange: ((ConnectionState) -> Void)?
    /// The socket is gone after ``close()`` or a failure (time to stop the loop).
    public var onSocketClosed: (() -> Void)?

    private var client: OpaquePointer?
    private var outbox: [(id: String, message: [UInt8])] = []
    private let idPrefix: String
    /// This user's ``JoinRequest/idScope`` (``IDScopeFile``), sent with every join: in open mode
    /// its change ids stay its own across reconnects and runs, so a retry of one is recognised.
    private let idScope: String
    private var idCounter = 0
    private var attempt = 0
    /// Close on purpose to rejoin for a fresh snapshot (the replica asked for one).
    private var resyncing = false
    private var timers: [UInt64: () -> Void] = [:]
    private var readers: [Int32: () -> Void] = [:]

    /// Timer tokens below this are the connection's own.
    public static let firstUserTimer: UInt64 = 100
    private static let reconnectTimer: UInt64 = 1

    /// Creates the client (nothing is connected yet). Fails with one line, e.g. an unreadable
    /// CA file.
    public init(options: ConnectOptions, reconnects: Bool) throws(ConnectionError) {
        self.options = options
        self.reconnects = reconnects
        self.state = .connecting(attempt: 0)
        var generator = SystemRandomNumberGenerator()
        let digits = Array("0123456789abcdefghijklmnopqrstuvwxyz")
        self.idPrefix = String((0..<6).map { _ in digits[Int(generator.next() % 36)] })
        self.idScope = IDScopeFile.load()

        // Every stored property is set: self may now be handed to C as the callbacks' owner.
        var callbacks = ftwsc_callbacks()
        callbacks.owner = Unmanaged.passUnretained(self).toOpaque()
        callbacks.on_open = { owner in ClientConnection.from(owner)?.opened() }
        callbacks.on_message = { owner, data, length in
            guard let data else { return }
            ClientConnection.from(owner)?.received(UnsafeBufferPointer(start: data, count: length))
        }
        callbacks.on_close = { owner, code, established, reason in
            ClientConnection.from(owner)?.closed(code: Int(code), established: established != 0, reason: reason.map { String(cString: $0) } ?? "")
        }
        callbacks.on_readable = { owner, fd in ClientConnection.from(owner)?.readers[fd]?() }
        callbacks.on_timer = { owner, token in
            guard let connection = ClientConnection.from(owner), let action = connection.timers.removeValue(forKey: token) else { return }
            action()
        }
        var error = [CChar](repeating: 0, count: 512)
        let logLevel = getenv("FOLDTABLE_LWS_LOG").flatMap { Int32(String(cString: $0)) } ?? 0
        let created: OpaquePointer? = options.caPath.withOptionalCString { ca in
            var config = ftwsc_config()
            config.ca_path = ca
            config.insecure = options.insecure ? 1 : 0
            config.max_message_bytes = 0
            config.log_level = logLevel
            return ftwsc_create(&config, callbacks, &error, error.count)
        }
        guard let created else { throw ConnectionError(Self.text(error)) }
        self.client = created
    }

    deinit { shutdown() }

    private static func from(_ owner: UnsafeMutableRawPointer?) -> ClientConnection? {
        owner.map { Unmanaged<ClientConnection>.fromOpaque($0).takeUnretainedValue() }
    }

    private static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Monotonic milliseconds.
    public static func nowMs() -> UInt64 { ftwsc_now_ms() }

    // MARK: - Loop

    /// Starts connecting; the outcome arrives through the callbacks once ``run()`` runs.
    public func start() {
        connect()
    }

    /// Serves the loop on this thread until ``stop()``.
    public func run() {
        guard let client else { return }
        _ = ftwsc_run(client)
    }

    /// Makes ``run()`` return after the current callback.
    public func stop() {
        if let client { ftwsc_stop(client) }
    }

    /// Closes everything; no callbacks after this. Also done on deinit.
    public func shutdown() {
        guard let client else { return }
        self.client = nil
        ftwsc_destroy(client)
        timers = [:]
        readers = [:]
    }

    /// Calls `action` on the loop after `ms` milliseconds; re-arming a token replaces it.
    /// Tokens from ``firstUserTimer`` up are the caller's to choose.
    public func schedule(_ token: UInt64, afterMs ms: Int, _ action: @escaping () -> Void) {
        guard let client else { return }
        timers[token] = action
        if ftwsc_timer_arm(client, token, UInt64(max(0, ms))) != 0 { timers[token] = nil }
    }

    public func cancel(_ token: UInt64) {
        guard let client else { return }
        timers[token] = nil
        ftwsc_timer_cancel(client, token)
    }

    /// Calls `action` whenever `fd` is readable. The loop closes `fd` on shutdown: pass a dup.
    @discardableResult
    public func watch(_ fd: Int32, _ action: @escaping () -> Void) -> Bool {
        guard let client else { return false }
        readers[fd] = action
        return ftwsc_watch_fd(client, fd) == 0
    }

    // MARK: - Sending

    /// Queues a change; returns its id (`id`, or a fresh one). Sent now when joined, else after
    /// the next join, and again after every rejoin until the server acknowledges or refuses it.
    @discardableResult
    public func send(_ change: Change, id: String? = nil) -> String {
        let changeId: String
        if let id {
            changeId = id
        } else {
            idCounter += 1
            changeId = "\(idPrefix)-\(idCounter)"
        }
        let message = ClientMessage.change(change, id: changeId).encoded()
        outbox.append((changeId, message))
        if state == .joined { transmit(message) }
        return changeId
    }

    /// Queues an undo (or redo) of this user's latest change, like a change: sent when joined,
    /// again after a rejoin until answered (the id makes a repeat harmless). Returns its id.
    @discardableResult
    public func undo(redo: Bool, id: String? = nil) -> String {
        let changeId: String
        if let id {
            changeId = id
        } else {
            idCounter += 1
            changeId = "\(idPrefix)-\(idCounter)"
        }
        let message = ClientMessage.undo(redo: redo, id: changeId).encoded()
        outbox.append((changeId, message))
        if state == .joined { transmit(message) }
        return changeId
    }

    /// Asks the server for rows containing `query` (the `found` answer carries the returned id);
    /// `nil` when not joined. Not queued: a search is worth nothing after a reconnect.
    public func find(_ query: String, limit: Int) -> String? {
        guard state == .joined else { return nil }
        idCounter += 1
        let id = "\(idPrefix)-find-\(idCounter)"
        transmit(ClientMessage.find(query: query, limit: limit, id: id).encoded())
        return id
    }

    /// Asks for a page of the session's history (`before`: a seq, `nil` for the newest); returns
    /// the request's id, `nil` when not joined.
    public func history(before: UInt64?, limit: Int) -> String? {
        guard state == .joined else { return nil }
        idCounter += 1
        let id = "\(idPrefix)-history-\(idCounter)"
        transmit(ClientMessage.history(before: before, limit: limit, id: id).encoded())
        return id
    }

    /// Sends a message outside the change log (`rename`, `auth`, `deleteSession`) now; `false`
    /// when not joined. Not queued: each means something only on the connection it was sent on.
    @discardableResult
    public func sendNow(_ message: ClientMessage) -> Bool {
        guard state == .joined else { return false }
        transmit(message.encoded())
        return true
    }

    /// Changes sent or waiting that the server has not answered yet.
    public var unanswered: Int { outbox.count }

    /// Whether change `id` is still waiting for the server's ack or refusal.
    public func isUnanswered(_ id: String) -> Bool { outbox.contains { $0.id == id } }

    /// Closes the connection on purpose (no reconnect); ``onSocketClosed`` follows once the
    /// socket is gone (at once when there was none).
    public func close() {
        cancel(Self.reconnectTimer)
        let hadSocket = hasSocket
        setState(.closed)
        if hadSocket, let client {
            ftwsc_close(client, Int32(CloseCode.normal), "bye")
        } else {
            onSocketClosed?()
        }
    }

    private var hasSocket: Bool {
        switch state {
        case .connecting, .joining, .joined: return true
        case .waiting, .failed, .closed: return false
        }
    }

    private func transmit(_ bytes: [UInt8]) {
        guard let client else { return }
        _ = bytes.withUnsafeBufferPointer { ftwsc_send(client, $0.baseAddress, $0.count) }
    }

    // MARK: - Connection lifecycle

    private func connect() {
        guard let client else { return }
        setState(.connecting(attempt: attempt))
        var error = [CChar](repeating: 0, count: 256)
        let url = options.url
        let result = ftwsc_connect(client, url.host, Int32(url.port), url.path, url.tls ? 1 : 0, &error, error.count)
        if result != 0 {
            dropped("cannot connect to \(url): \(Self.text(error))", fatal: false)
            onSocketClosed?()
        }
    }

    private func opened() {
        guard state != .closed else { return }
        setState(.joining)
        guard let session = options.session else {
            // The lobby: only ask which sessions exist (the answer is `sessions`).
            transmit(ClientMessage.list(token: options.token).encoded())
            return
        }
        var join = JoinRequest(session: session, name: options.name, token: options.token, create: options.create, idScope: idScope)
        if replica.canResume, let epoch = replica.epoch {
            join.since = replica.seq
            join.epoch = epoch
        }
        transmit(ClientMessage.join(join).encoded())
    }

    private func received(_ data: UnsafeBufferPointer<UInt8>) {
        guard state == .joining || state == .joined else { return }
        // The server may batch several objects into one message, one per line.
        var start = 0
        while start < data.count && (state == .joining || state == .joined) {
            let end = data[start...].firstIndex(of: UInt8(ascii: "\n")) ?? data.count
            if end > start { handle(Array(data[start..<end])[...]) }
            start = end + 1
        }
    }

    private func handle(_ line: ArraySlice<UInt8>) {
        let update: ServerUpdate
        do {
            update = try ServerUpdate.decode(line)
        } catch {
            onBadMessage?(error)
            return
        }
        var note: String?
        switch update {
        case .welcome, .resume:
            setState(.joined)
            everJoined = true
            attempt = 0
            resyncing = false
            for entry in outbox { transmit(entry.message) }
        case .ack(let id, _):
            outbox.removeAll { $0.id == id }
        case .error(let error):
            if let id = error.id {
                outbox.removeAll { $0.id == id }
            } else if state == .joining {
                // The join itself was refused: retrying the same join cannot help.
                replica.apply(update)
                onUpdate?(update, line, nil)
                if let session = options.session {
                    fail("the server refused to join \(session): \(error.message)")
                } else {
                    fail("the server refused to list the sessions: \(error.message)")
                }
                return
            }
        case .event(let event):
            note = replica.describe(event)
        default:
            break
        }
        replica.apply(update)
        onUpdate?(update, line, note)
        if replica.needsSnapshot && reconnects && state == .joined && !resyncing {
            // Counts can no longer be kept right from events: rejoin for a fresh welcome.
            resyncing = true
            if let client { ftwsc_close(client, Int32(CloseCode.normal), "resync") }
        }
    }

    private func closed(code: Int, established: Bool, reason: String) {
        defer { onSocketClosed?() }
        switch state {
        case .closed, .failed: return
        default: break
        }
        if resyncing {
            connect()  // at once: nothing is wrong with the server
            return
        }
        let why = reason.isEmpty ? "" : ": \(reason)"
        // Closes after which retrying the same thing cannot help (Protocol.md, "Closes").
        let fatal = !CloseCode.retries(code)
        if !established {
            dropped("cannot connect to \(options.url)\(why)", fatal: fatal)
        } else if let meaning = CloseCode.meaning(code) {
            dropped("connection to \(options.url) lost (code \(code)): \(meaning.sentence)", fatal: fatal)
        } else {
            dropped("connection to \(options.url) lost (code \(code))\(why)", fatal: fatal)
        }
    }

    private func dropped(_ reason: String, fatal: Bool) {
        guard reconnects && everJoined && !fatal else {
            fail(reason)
            return
        }
        let delay = backoff.delayMs(attempt: attempt, random: Double.random(in: 0..<1))
        attempt += 1
        setState(.waiting(retryAtMs: Self.nowMs() + UInt64(delay), attempt: attempt, reason: reason))
        schedule(Self.reconnectTimer, afterMs: delay) { [weak self] in self?.connect() }
    }

    private func fail(_ reason: String) {
        cancel(Self.reconnectTimer)
        let hadSocket = hasSocket
        setState(.failed(reason: reason))
        if hadSocket, let client { ftwsc_close(client, Int32(CloseCode.normal), "bye") }
    }

    /// Reconnect now instead of waiting out the backoff (a key press while offline).
    public func retryNow() {
        guard case .waiting = state else { return }
        cancel(Self.reconnectTimer)
        attempt = 0
        connect()
    }

    private func setState(_ next: ConnectionState) {
        guard next != state else { return }
        state = next
        onStateChange?(next)
    }
}

/// A connection that could not be set up, in one line.
public struct ConnectionError: Error, Equatable, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
}

extension Optional where Wrapped == String {
    /// Calls `body` with a C string, or with `nil`.
    fileprivate func withOptionalCString<Result>(_ body: (UnsafePointer<CChar>?) -> Result) -> Result {
        switch self {
        case .some(let text): return text.withCString { body($0) }
        case .none: return body(nil)
        }
    }
}
