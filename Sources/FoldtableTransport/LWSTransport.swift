import CFoldtableWS
import FoldtableCore
import FoldtableServer
import Glibc
import Synchronization

/// The libwebsockets transport: the one Swift type that drives the CFoldtableWS wrapper.
///
/// Everything but ``StopHandle`` runs on the thread that calls ``run()`` (the lws service
/// thread). C callbacks reach this object through the owner pointer; nothing Swift throws
/// crosses into C.
public final class LWSTransport: Transport {
    /// Why the server could not start: one line for the operator.
    public struct StartError: Error, CustomStringConvertible {
        public let description: String
    }

    /// Stops a running transport from any thread (signal handlers, tests).
    public struct StopHandle: @unchecked Sendable {
        // @unchecked: ftws_server_stop is documented thread-safe (an atomic flag plus
        // lws_cancel_service); the pointer is not dereferenced in Swift.
        fileprivate let server: OpaquePointer
        public func stop(graceMilliseconds: Int32 = 2_000) { ftws_server_stop(server, graceMilliseconds) }
    }

    public var delegate: TransportDelegate? {
        get { weakDelegate }
        set { weakDelegate = newValue }
    }
    /// Private storage behind `delegate`: read for every message, and a public stored property
    /// costs a runtime exclusivity check per read where a private one is proved exclusive.
    private weak var weakDelegate: TransportDelegate?
    private var server: OpaquePointer?
    /// Work other threads post; drained on the service thread in the wake callback.
    public let serviceQueue: ServiceQueue
    private let wakeTarget: WakeTarget
    private let policy: RequestPolicy
    private let maxConnectionsPerIP: Int
    private let maxConnections: Int
    /// Open WebSockets per client address, and each connection's address (to count it down).
    private var connectionsByAddress: [String: Int] = [:]
    private var addresses: [UInt64: String] = [:]
    private let maxHTTPRequestsPerIP: Int
    /// HTTP requests being answered per client address (handed to the delegate and not yet
    /// written), and the address of each one handed over and not yet answered.
    private var httpRequestsByAddress: [String: Int] = [:]
    private var httpAddresses: [UInt64: String] = [:]

    /// Creates the context and binds the port; does not serve until ``run()``.
    public init(config: ServerConfig) throws(StartError) {
        policy = RequestPolicy(config)
        maxConnectionsPerIP = config.maxConnectionsPerIP
        maxConnections = config.maxConnections
        maxHTTPRequestsPerIP = config.maxHTTPRequestsPerIP
        let wakeTarget = WakeTarget()
        self.wakeTarget = wakeTarget
        serviceQueue = ServiceQueue(wake: { wakeTarget.wake() })
        ftws_set_log_level(config.logLevel >= .info ? 1 : 0)

        var callbacks = ftws_callbacks()
        callbacks.owner = Unmanaged.passUnretained(self).toOpaque()
        callbacks.check_upgrade = { owner, origin, host, peer, forwarded in
            LWSTransport.from(owner).checkUpgrade(
                origin: origin.map { String(cString: $0) }, host: host.map { String(cString: $0) }, peer: peer.map { String(cString: $0) } ?? "",
                forwardedFor: forwarded.map { String(cString: $0) })
        }
        callbacks.allow_host = { owner, host in
            LWSTransport.from(owner).policy.allowsHost(host.map { String(cString: $0) }) ? 1 : 0
        }
        callbacks.http_claims = { owner, path in
            guard let path else { return 0 }
            return LWSTransport.from(owner).delegate?.claimsHTTPPath(String(cString: path)) == true ? 1 : 0
        }
        callbacks.on_http_request = { owner, request in
            if let request { LWSTransport.from(owner).received(request.pointee) }
        }
        callbacks.on_http_abandoned = { owner, id in
            let transport = LWSTransport.from(owner)
            if let address = transport.httpAddresses.removeValue(forKey: id) { transport.answered(address) }
            transport.delegate?.httpRequestAbandoned(id)
        }
        callbacks.on_open = { owner, conn in
            LWSTransport.from(owner).opened(
                Connection(conn), peer: String(cString: ftws_conn_peer(conn)), forwardedFor: String(cString: ftws_conn_forwarded_for(conn)))
        }
        callbacks.on_message = { owner, conn, data, length in
            // The hot path: the owner borrowed, not retained and released around the call.
            Unmanaged<LWSTransport>.fromOpaque(owner!)._withUnsafeGuaranteedRef { transport in  // safe: C passes back callbacks.owner
                transport.delegate?.connectionReceived(Connection(conn), message: UnsafeRawBufferPointer(start: data, count: length))
            }
        }
        callbacks.on_close = { owner, conn, code in
            LWSTransport.from(owner).closed(Connection(conn), code: Int(code))
        }
        callbacks.on_drain = { owner, conn in
            LWSTransport.from(owner).delegate?.connectionDrained(Connection(conn))
        }
        callbacks.on_wake = { owner in
            LWSTransport.from(owner).serviceQueue.drain()
        }
        callbacks.on_timer = { owner, token in
            LWSTransport.from(owner).delegate?.timerFired(token)
        }
        callbacks.on_turn = { owner in
            Unmanaged<LWSTransport>.fromOpaque(owner!)._withUnsafeGuaranteedRef { $0.delegate?.transportTurnEnded() }  // safe: callbacks.owner
        }
        let created = try WrapperConfig(config).createServer(callbacks: callbacks)
        server = created
        wakeTarget.server.withLock { $0 = ServerPointer(pointer: created) }
    }

    deinit {
        wakeTarget.server.withLock { $0 = nil }
        if let server { ftws_server_destroy(server) }
    }

    /// The bound port (the real one when configured as 0).
    public var port: Int { server.map { Int(ftws_server_port($0)) } ?? 0 }

    /// WebSocket frames written, the messages they carried (batching puts several in one frame),
    /// their bytes as made (`payloadBytes`, before compression) and the bytes that went to the
    /// sockets for them (`bytes`: frame headers and payload after permessage-deflate, what the
    /// network carries), since the start. Service thread (read by `/metrics`).
    public var written: (frames: UInt64, messages: UInt64, payloadBytes: UInt64, bytes: UInt64) {
        guard let server else { return (0, 0, 0, 0) }
        let stats = ftws_server_write_stats(server)
        return (stats.frames, stats.messages, stats.payload_bytes, stats.bytes)
    }

    public var stopHandle: StopHandle { StopHandle(server: server!) }  // safe: init throws unless it is set

    /// Serves until stopped; returns 0 after a clean stop.
    public func run() -> Int32 { ftws_server_run(server) }

    /// The transport a C callback is for. Valid for the whole callback: C calls back only from
    /// `run()`, on the service thread, and the server is destroyed in `deinit`, so the transport
    /// outlives every callback (which is also why `on_message` may borrow it unretained).
    private static func from(_ owner: UnsafeMutableRawPointer?) -> LWSTransport {
        Unmanaged<LWSTransport>.fromOpaque(owner!).takeUnretainedValue()  // safe: C passes back callbacks.owner, never NULL
    }

    /// 0 to upgrade, else the HTTP status refusing it: a Host or Origin this server does not
    /// answer to (421, 403: DNS rebinding, cross-site WebSocket hijacking), too many connections
    /// from one address (429) or in all (503).
    private func checkUpgrade(origin: String?, host: String?, peer: String, forwardedFor: String?) -> UInt32 {
        guard policy.allowsHost(host) else { return 421 }
        guard policy.allowsOrigin(origin, host: host) else { return 403 }
        guard addresses.count < maxConnections else { return 503 }
        let address = policy.clientAddress(peer: peer, forwardedFor: forwardedFor)
        guard connectionsByAddress[address, default: 0] < maxConnectionsPerIP else { return 429 }
        return 0
    }

    private func opened(_ connection: Connection, peer: String, forwardedFor: String) {
        let address = policy.clientAddress(peer: peer, forwardedFor: forwardedFor.isEmpty ? nil : forwardedFor)
        addresses[connection.id] = address
        connectionsByAddress[address, default: 0] += 1
        delegate?.connectionOpened(connection, peer: address)
    }

    private func closed(_ connection: Connection, code: Int) {
        if let address = addresses.removeValue(forKey: connection.id) {
            let left = (connectionsByAddress[address] ?? 1) - 1
            connectionsByAddress[address] = left > 0 ? left : nil
        }
        delegate?.connectionClosed(connection, code: code)
    }

    /// A claimed HTTP request from C, copied into Swift values (the C memory lives only during
    /// the callback). The client address follows the same proxy rule as WebSockets.
    private func received(_ raw: ftws_http_request) {
        var headers: [String: String] = [:]
        for index in 0..<raw.header_count {
            if let name = raw.header_names?[index], let value = raw.header_values?[index] {
                headers[String(cString: name)] = String(cString: value)
            }
        }
        var query: [String: String] = [:]
        for index in 0..<raw.query_count {
            guard let argument = raw.query?[index] else { continue }
            // Split at the first `=` byte: as a Character, `=` followed by a combining mark is
            // one grapheme and would not be found (the argument would be read as one name).
            let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(argument).assumingMemoryBound(to: UInt8.self), count: strlen(argument))
            if let equals = bytes.firstIndex(of: UInt8(ascii: "=")) {
                query[String(decoding: bytes[..<equals], as: UTF8.self)] = String(decoding: bytes[(equals + 1)...], as: UTF8.self)
            } else {
                query[String(decoding: bytes, as: UTF8.self)] = ""
            }
        }
        let body = raw.body_len > 0 ? Array(UnsafeBufferPointer(start: raw.body, count: raw.body_len)) : []
        let peer = raw.peer.map { String(cString: $0) } ?? ""
        let address = policy.clientAddress(peer: peer, forwardedFor: headers["x-forwarded-for"])
        let request = HTTPRequest(
            id: raw.id, method: raw.method.map { String(cString: $0) } ?? "", path: raw.path.map { String(cString: $0) } ?? "", query: query,
            headers: headers, body: body, peer: address)
        guard let delegate else {
            respond(to: raw.id, with: HTTPRouter.error(503, "unavailable", "the server is starting; retry later"))
            return
        }
        // Like the WebSockets' cap per address: one address cannot hold more answers open at once
        // (each holds its connection, and a slow reader holds it for long).
        guard httpRequestsByAddress[address, default: 0] < maxHTTPRequestsPerIP else {
            var refusal = HTTPRouter.error(429, "too_many_requests", "too many requests from this address at once; retry later")
            refusal.headers["Retry-After"] = "1"
            respond(to: raw.id, with: refusal)
            return
        }
        httpRequestsByAddress[address, default: 0] += 1
        httpAddresses[raw.id] = address
        delegate.httpRequest(request)
    }

    /// An HTTP request of `address` is answered (written, or its client gone).
    fileprivate func answered(_ address: String) {
        let left = (httpRequestsByAddress[address] ?? 1) - 1
        httpRequestsByAddress[address] = left > 0 ? left : nil
    }

    // MARK: - Transport

    @discardableResult
    public func respond(to id: UInt64, with response: HTTPResponse) -> Bool {
        guard let server else { return false }
        // "Name: value" lines; the C side rejects (as a 500) any that could split the response.
        var block = ""
        for (name, value) in response.headers.sorted(by: { $0.key < $1.key }) {
            block += "\(name): \(value)\r\n"
        }
        let status = UInt32(clamping: response.status)
        // The C side reads the body in place, a chunk per write, until it lets go of the hold:
        // a shared body is never copied per client, and an answer's end is when its address's
        // count goes down.
        let hold = AnswerHold(
            body: response.shared ?? SharedBody(response.body), transport: self, address: httpAddresses.removeValue(forKey: id))
        let keeper = Unmanaged.passRetained(hold)
        let result = block.withCString {
            ftws_http_respond_shared(
                server, id, status, $0, hold.body.bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), hold.body.count, keeper.toOpaque(),
                { pointer in
                    guard let pointer else { return }
                    Unmanaged<AnswerHold>.fromOpaque(pointer).release()
                })
        }
        // Only on 0 did C take the hold.
        if result != 0 { keeper.release() }
        return result != -1
    }

    /// The message's C frame: made (the bytes copied) the first time it is sent, then attached
    /// to the message, which releases it when it goes.
    private func frame(for message: OutboundMessage) -> OpaquePointer? {
        if let existing = message.transportFrame { return OpaquePointer(existing) }
        guard let frame = message.bytes.withUnsafeBufferPointer({ ftws_frame_create($0.baseAddress, $0.count) }) else { return nil }
        message.attachFrame(UnsafeMutableRawPointer(frame), release: { ftws_frame_release(OpaquePointer($0)) })
        return frame
    }

    /// Where the C side finds each connection's pointer in an array of ``Connection``s.
    private static let handleOffset = MemoryLayout<Connection>.offset(of: \Connection.handle)!  // safe: a stored property

    public func broadcast(_ message: OutboundMessage, to connections: [Connection]) {
        guard !connections.isEmpty else { return }
        let frame = frame(for: message)
        // Each Connection's handle is its ftws_conn pointer: C reads them in place, a stride apart.
        _ = connections.withUnsafeBytes { raw in
            ftws_broadcast(frame, raw.baseAddress.map { $0 + Self.handleOffset }, MemoryLayout<Connection>.stride, connections.count)
        }
    }

    /// lws reports the end of every turn of its service loop (`on_turn`).
    public var endsTurns: Bool { true }

    public func send(_ message: OutboundMessage, to connection: Connection) {
        _ = ftws_conn_send(OpaquePointer(connection.handle), frame(for: message))
    }

    /// Straight into a frame of its own: no message object nor its shared-frame box.
    public func send(bytes: UnsafeRawBufferPointer, to connection: Connection) {
        let frame = ftws_frame_create(bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count)
        _ = ftws_conn_send(OpaquePointer(connection.handle), frame)
        ftws_frame_release(frame)
    }

    public func close(_ connection: Connection, code: Int, reason: String) {
        ftws_conn_close(OpaquePointer(connection.handle), Int32(code), reason)
    }

    public func queuedBytes(_ connection: Connection) -> Int {
        ftws_conn_queued_bytes(OpaquePointer(connection.handle))
    }

    public func unflushedBytes(_ connection: Connection) -> Int {
        ftws_conn_unflushed_bytes(OpaquePointer(connection.handle))
    }

    public func requestDrain(_ connection: Connection, lowMark: Int) {
        ftws_conn_request_drain(OpaquePointer(connection.handle), lowMark)
    }

    public func armTimer(token: UInt64, milliseconds: UInt64) { ftws_timer_arm(server, token, milliseconds) }
    public func cancelTimer(token: UInt64) { ftws_timer_cancel(server, token) }
    public func nowMilliseconds() -> UInt64 { ftws_now_ms() }
    /// lws's clock is `CLOCK_MONOTONIC` in microseconds, ours that in milliseconds: the same
    /// clock as ``MonotonicTime``, so a reading of it converts (the same truncation as `ftws_now_ms`).
    public func milliseconds(at time: MonotonicTime) -> UInt64? { time.nanoseconds / 1_000_000 }
}

/// What the C side holds while it writes an answer: the body it reads from, and the address
/// whose count of answers in flight goes down when it lets go (on the service thread).
private final class AnswerHold {
    let body: SharedBody
    private weak var transport: LWSTransport?
    private let address: String?

    init(body: SharedBody, transport: LWSTransport, address: String?) {
        self.body = body
        self.transport = transport
        self.address = address
    }

    deinit {
        // While the transport itself goes (its server destroyed), `transport` is nil already.
        if let address { transport?.answered(address) }
    }
}

/// What other threads wake: the server pointer, set once the context exists and cleared before
/// it is destroyed, under a lock so a late post never wakes a freed context.
private final class WakeTarget: Sendable {
    let server = Mutex<ServerPointer?>(nil)

    func wake() {
        // ftws_server_wake is documented thread-safe (lws_cancel_service underneath).
        server.withLock { target in
            if let target { ftws_server_wake(target.pointer) }
        }
    }
}

/// The C server pointer as a value that may cross threads: only ftws_server_wake, which is
/// thread-safe, is ever called with it off the service thread.
private struct ServerPointer: @unchecked Sendable {
    let pointer: OpaquePointer
}

extension Connection {
    fileprivate init(_ conn: OpaquePointer?) {
        self.init(id: ftws_conn_id(conn), handle: UnsafeMutableRawPointer(conn))
    }
}
