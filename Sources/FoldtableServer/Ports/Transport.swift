/// A connection as the transport knows it: a number unique for the server's lifetime plus an
/// opaque handle only the transport reads (for libwebsockets, the C connection pointer), so the
/// broadcast path needs no lookup table.
public struct Connection: Hashable, @unchecked Sendable {
    // @unchecked: `handle` is an opaque token that only the transport dereferences, and only on
    // its service thread.
    public let id: UInt64
    public let handle: UnsafeMutableRawPointer?

    public init(id: UInt64, handle: UnsafeMutableRawPointer? = nil) {
        self.id = id
        self.handle = handle
    }

    public static func == (lhs: Connection, rhs: Connection) -> Bool { lhs.id == rhs.id }
    public func hash(into hasher: inout Hasher) { hasher.combine(id) }
}

/// What the hub needs from the network: the port through which it reaches clients (centrifuge's
/// Transport). Every method is called on the transport's one service thread.
public protocol Transport: AnyObject {
    /// Queues the same message to every connection: encoded once, shared, never copied per client.
    func broadcast(_ message: OutboundMessage, to connections: [Connection])
    /// Queues a message to one connection.
    func send(_ message: OutboundMessage, to connection: Connection)
    /// Queues a message for one connection that exists only as `bytes` (an ack, encoded into a
    /// buffer the caller reuses): the transport copies them before returning.
    func send(bytes: UnsafeRawBufferPointer, to connection: Connection)
    /// Closes after what is queued, with a WebSocket close code and a short reason.
    func close(_ connection: Connection, code: Int, reason: String)
    /// Bytes queued to the connection and not yet written to its socket.
    func queuedBytes(_ connection: Connection) -> Int
    /// Bytes queued to the connection, or written but not yet taken by its peer (still in the
    /// operating system's send buffer): 0 once the peer took everything sent so far.
    func unflushedBytes(_ connection: Connection) -> Int
    /// Asks for one ``TransportDelegate/connectionDrained(_:)`` once at most `lowMark` bytes are queued.
    func requestDrain(_ connection: Connection, lowMark: Int)
    /// Calls ``TransportDelegate/timerFired(_:)`` with `token` after `milliseconds`; re-arming replaces.
    func armTimer(token: UInt64, milliseconds: UInt64)
    func cancelTimer(token: UInt64)
    /// A monotonic clock in milliseconds.
    func nowMilliseconds() -> UInt64
    /// What ``nowMilliseconds()`` read at `time` (a ``MonotonicTime`` reading just taken), when
    /// the transport's clock is that same monotonic clock: a caller holding a fresh reading then
    /// needs no second one. `nil` when the clocks differ (then call ``nowMilliseconds()``).
    func milliseconds(at time: MonotonicTime) -> UInt64?
    /// Where other threads post work for the service thread; the transport drains it on its
    /// loop. The only member of this protocol that may be used from another thread.
    var serviceQueue: ServiceQueue { get }
    /// Answers HTTP request `id` (from ``TransportDelegate/httpRequest(_:)``), at once or later
    /// (after a commit, say). Returns false when the request no longer waits for an answer: its
    /// client went away or the transport's answer deadline passed (the delegate heard
    /// ``TransportDelegate/httpRequestAbandoned(_:)``); nothing is sent then.
    @discardableResult func respond(to id: UInt64, with response: HTTPResponse) -> Bool
    /// Whether the transport calls ``TransportDelegate/transportTurnEnded()`` after each turn of
    /// its loop. Then the hub gathers the changes a session receives in a turn (a client's
    /// changes in flight arrive in one read) and hands them to the log in one append.
    var endsTurns: Bool { get }
}

extension Transport {
    /// A transport that does not report its turns: every change goes to the log on its own.
    public var endsTurns: Bool { false }

    /// A transport that cannot see into its sockets counts its queue only.
    public func unflushedBytes(_ connection: Connection) -> Int { queuedBytes(connection) }

    /// A transport with a clock of its own (a test's, say) cannot derive it from another reading.
    public func milliseconds(at time: MonotonicTime) -> UInt64? { nil }

    /// A transport with no frame of its own to copy into sends them as a message.
    public func send(bytes: UnsafeRawBufferPointer, to connection: Connection) {
        send(OutboundMessage(Array(bytes)), to: connection)
    }

    /// Any thread: runs `work` on the service thread soon (see ``ServiceQueue``).
    public func post(_ work: @escaping @Sendable () -> Void) { serviceQueue.post(work) }
}

/// What the transport reports, on its service thread.
public protocol TransportDelegate: AnyObject {
    func connectionOpened(_ connection: Connection, peer: String)
    func connectionReceived(_ connection: Connection, message: UnsafeRawBufferPointer)
    func connectionClosed(_ connection: Connection, code: Int)
    func connectionDrained(_ connection: Connection)
    func timerFired(_ token: UInt64)
    /// Whether the delegate answers HTTP requests for `path` itself (the API, health checks);
    /// the transport serves every other path as a static file. Asked before a request's body is
    /// read, for every HTTP request, so it must be cheap.
    func claimsHTTPPath(_ path: String) -> Bool
    /// A whole HTTP request for a claimed path, its body read. Answer it with
    /// ``Transport/respond(to:with:)``, now or later.
    func httpRequest(_ request: HTTPRequest)
    /// Request `id` will get no answer from the delegate after all: its client went away, or no
    /// answer came in time (the client got 503). A later `respond` for it returns false.
    func httpRequestAbandoned(_ id: UInt64)
    /// One turn of the transport's loop ended: every message of the reads it made was
    /// delivered (only from a transport whose ``Transport/endsTurns`` is true).
    func transportTurnEnded()
}

/// One HTTP request for a path the hub answers, whole: the transport has checked its framing
/// and Host and read its body (at most ``ServerConfig/maxHTTPBodyBytes``). Transport-neutral:
/// libwebsockets hands it over from C, tests build it directly.
public struct HTTPRequest: Sendable, Equatable {
    /// The transport's number for it: answer with ``Transport/respond(to:with:)``.
    public var id: UInt64
    /// `GET`, `HEAD`, `POST`, `PUT`, `PATCH`, `DELETE`, `OPTIONS`.
    public var method: String
    /// Percent-decoded, without the query; `//`, `/./` and `/../` already folded.
    public var path: String
    /// The query's arguments, percent-decoded (`+` is a space); a repeated name keeps its last
    /// value, an argument without `=` has the value "".
    public var query: [String: String]
    /// The request headers an API needs, by lowercase name (see ``header(_:)``).
    public var headers: [String: String]
    public var body: [UInt8]
    /// The client's address: the TCP peer's, or a trusted proxy's `X-Forwarded-For`.
    public var peer: String

    public init(
        id: UInt64, method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:], body: [UInt8] = [],
        peer: String = ""
    ) {
        self.id = id
        self.method = method
        self.path = path
        self.query = query
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { _, last in last })
        self.body = body
        self.peer = peer
    }

    /// A header's value by case-insensitive name; `nil` when the request has none.
    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// The answer to an ``HTTPRequest``. The transport adds the status line, the framing
/// (`Content-Length`), the security headers every response carries, and `Cache-Control:
/// no-store` unless `headers` name one; a HEAD request gets the headers without the body.
public struct HTTPResponse: Sendable, Equatable {
    public var status: Int
    /// Extra headers by name. Names and values must not hold line breaks; `Content-Length`,
    /// `Transfer-Encoding` and `Connection` belong to the transport. A response that breaks
    /// these rules reaches the client as a 500.
    public var headers: [String: String]
    public var body: [UInt8]
    /// A body shared with other answers instead of `body` (which is then ignored): a large
    /// export that many clients read at once is held once, not copied per client.
    public var shared: SharedBody?

    public init(status: Int, headers: [String: String] = [:], body: [UInt8] = [], shared: SharedBody? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.shared = shared
    }

    /// The body's bytes, shared or not (a copy: for tests and small bodies).
    public var bodyBytes: [UInt8] { shared.map { Array($0.bytes) } ?? body }

    /// A JSON body with its content type.
    public static func json(_ status: Int, _ body: [UInt8], headers: [String: String] = [:]) -> HTTPResponse {
        var all = headers
        all["Content-Type"] = "application/json"
        return HTTPResponse(status: status, headers: all, body: body)
    }
}

/// Bytes that many HTTP answers send, held once: written once when made, then only read (by the
/// transport, a chunk at a time per answer, on its service thread). A transport that sends them
/// later keeps the object alive until its last answer is written; so a cache of weak references
/// to these (see `SessionAPI`) finds a body while some client still reads it, and nothing
/// holds it after.
public final class SharedBody: @unchecked Sendable, Equatable {
    // @unchecked: `storage` is filled in `init` and never written again; reads from any thread
    // are then safe.
    private let storage: UnsafeMutableRawBufferPointer
    /// The body's length in bytes.
    public let count: Int

    public init(_ bytes: [UInt8]) {
        count = bytes.count
        storage = .allocate(byteCount: max(1, bytes.count), alignment: 1)
        bytes.withUnsafeBytes { storage.copyMemory(from: $0) }
    }

    deinit { storage.deallocate() }

    /// The bytes, valid while the object lives.
    public var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: storage[0..<count]) }

    public static func == (lhs: SharedBody, rhs: SharedBody) -> Bool { lhs === rhs }
}

/// One encoded server message. The transport may attach its own shared form of the bytes (for
/// libwebsockets a refcounted C frame) the first time it sends it, so a message sent to many
/// connections, at once or over time (row chunks), is copied into the transport only once.
public final class OutboundMessage {
    public let bytes: [UInt8]
    /// A pointer and a C function rather than an object: no second allocation, nor a dynamic
    /// cast, per message. Private, so the compiler proves its accesses exclusive (no runtime check).
    private var frame: UnsafeMutableRawPointer?
    private var releaseFrame: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    deinit {
        if let frame, let releaseFrame { releaseFrame(frame) }
    }

    /// The transport's form of the bytes, once ``attachFrame(_:release:)`` attached one.
    public var transportFrame: UnsafeMutableRawPointer? { frame }

    /// Attaches the transport's form of the bytes (by the transport that sends the message first);
    /// `release` drops it when the message goes. Once per message.
    public func attachFrame(_ frame: UnsafeMutableRawPointer, release: @escaping @convention(c) (UnsafeMutableRawPointer?) -> Void) {
        precondition(self.frame == nil, "a message's transport frame is attached once")
        self.frame = frame
        releaseFrame = release
    }
}
