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
    /// Closes after what is queued, with a WebSocket close code and a short reason.
    func close(_ connection: Connection, code: Int, reason: String)
    /// Bytes queued to the connection and not yet written to its socket.
    func queuedBytes(_ connection: Connection) -> Int
    /// Asks for one ``TransportDelegate/connectionDrained(_:)`` once at most `lowMark` bytes are queued.
    func requestDrain(_ connection: Connection, lowMark: Int)
    /// Calls ``TransportDelegate/timerFired(_:)`` with `token` after `milliseconds`; re-arming replaces.
    func armTimer(token: UInt64, milliseconds: UInt64)
    func cancelTimer(token: UInt64)
    /// A monotonic clock in milliseconds.
    func nowMilliseconds() -> UInt64
    /// Where other threads post work for the service thread; the transport drains it on its
    /// loop. The only member of this protocol that may be used from another thread.
    var serviceQueue: ServiceQueue { get }
}

extension Transport {
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
}

/// One encoded server message. The transport may attach its own shared form of the bytes (for
/// libwebsockets a refcounted C frame) the first time it sends it, so a message sent to many
/// connections, at once or over time (row chunks), is copied into the transport only once.
public final class OutboundMessage {
    public let bytes: [UInt8]
    /// Owned by the transport that sent the message first.
    public var transportFrame: AnyObject?

    public init(_ bytes: [UInt8]) { self.bytes = bytes }
}
