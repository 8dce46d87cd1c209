import FoldtableCore
import FoldtableServer
import Testing

/// An in-memory Transport: records what the hub sends to each connection. By default every
/// message is written at once; with `holdsQueues` bytes stay queued until `flush`, to play a
/// client that reads slowly.
final class TestTransport: Transport {
    var sent: [UInt64: [String]] = [:]
    var closed: [UInt64: (code: Int, reason: String)] = [:]
    var queued: [UInt64: Int] = [:]
    var drainRequests: [UInt64: Int] = [:]
    var timers: [UInt64: UInt64] = [:]
    var holdsQueues = false
    /// Whether the hub hears the end of each turn (``endTurn()``), as from lws; set before the
    /// session is created (its core reads it then).
    var endsTurns = false
    /// Connections that read nothing (their queues only grow), whatever `holdsQueues` says.
    var held: Set<UInt64> = []
    var clock: UInt64 = 0
    /// Every distinct message object handed to the transport, to check sharing.
    var broadcastObjects: [ObjectIdentifier] = []
    weak var delegate: TransportDelegate?
    /// Connections the transport reported closed: their handles are dead, so any send to one is a bug.
    var gone: Set<UInt64> = []
    var sendsToClosedConnections = 0

    func broadcast(_ message: OutboundMessage, to connections: [Connection]) {
        broadcastObjects.append(ObjectIdentifier(message))
        for connection in connections { send(message, to: connection) }
    }

    func send(_ message: OutboundMessage, to connection: Connection) {
        if gone.contains(connection.id) { sendsToClosedConnections += 1 }
        sent[connection.id, default: []].append(String(decoding: message.bytes, as: UTF8.self))
        if holdsQueues || held.contains(connection.id) { queued[connection.id, default: 0] += message.bytes.count }
    }

    func close(_ connection: Connection, code: Int, reason: String) { closed[connection.id] = (code, reason) }
    func queuedBytes(_ connection: Connection) -> Int { queued[connection.id] ?? 0 }
    /// Bytes a test says are still in a connection's socket (a reader whose kernel holds rows it
    /// has not taken): none unless set, so that a stream is over once its chunks are queued.
    var inSocket: [UInt64: Int] = [:]
    func unflushedBytes(_ connection: Connection) -> Int { inSocket[connection.id] ?? 0 }
    func requestDrain(_ connection: Connection, lowMark: Int) { drainRequests[connection.id] = lowMark }
    func armTimer(token: UInt64, milliseconds: UInt64) { timers[token] = milliseconds }
    func cancelTimer(token: UInt64) { timers[token] = nil }
    func nowMilliseconds() -> UInt64 { clock }
    /// HTTP answers by request id; ids in `abandoned` are gone (their client left).
    var responses: [UInt64: HTTPResponse] = [:]
    var abandoned: Set<UInt64> = []
    /// The shared bodies answers were given (see `SharedBody`), by request id.
    var sharedBodies: [UInt64: SharedBody] = [:]
    func respond(to id: UInt64, with response: HTTPResponse) -> Bool {
        guard !abandoned.contains(id), responses[id] == nil else { return false }
        // A shared body is kept as plain bytes: tests read `body` either way.
        sharedBodies[id] = response.shared
        var flat = response
        flat.body = response.bodyBytes
        flat.shared = nil
        responses[id] = flat
        return true
    }
    /// Posts from the store run when the test settles (as the lws loop would run them next turn).
    let serviceQueue = ServiceQueue(wake: {})

    /// Runs every posted completion, and what those post, until nothing is left.
    func settle() {
        while !serviceQueue.isEmpty { serviceQueue.drain() }
    }

    /// One turn of the loop ended: the hub hands over the changes it gathered in it.
    func endTurn() {
        delegate?.transportTurnEnded()
        settle()
    }

    /// The client read everything queued to it.
    func flush(_ id: UInt64) {
        queued[id] = 0
        if drainRequests.removeValue(forKey: id) != nil { delegate?.connectionDrained(Connection(id: id)) }
        settle()
    }

    /// Fires every armed timer whose delay is at most `milliseconds`.
    func fireTimers(upTo milliseconds: UInt64 = .max) {
        for (token, delay) in timers.sorted(by: { $0.key < $1.key }) where delay <= milliseconds {
            timers[token] = nil
            delegate?.timerFired(token)
            settle()
        }
    }

    /// Messages sent to a connection, parsed, optionally only of one type.
    func messages(_ id: UInt64, type: String? = nil) -> [JSONValue] {
        (sent[id] ?? []).compactMap { try? JSONParser.parse($0, limits: .init(maxDepth: 16, maxStringBytes: 1 << 20)) }
            .filter { type == nil || $0["type"] == .string(type!) }
    }

    func clear() { sent = [:] }
}

/// A hub over a TestTransport with helpers to play clients.
final class Harness {
    let transport = TestTransport()
    let store: MemoryStore
    var hub: Hub
    /// The cluster the hub shares its sessions through, if any.
    private(set) var cluster: Cluster?

    init(
        verifier: TokenVerifier? = nil, cluster: Cluster? = nil, configure: (inout ServerConfig) -> Void = { _ in },
        makeEpoch: @escaping () -> String = { "e1" }
    ) {
        var config = ServerConfig()
        config.demoLargeRows = 5_000
        // Tests send thousands of changes in no time: far past any rate limit.
        config.changeRatePerSec = 1_000_000
        config.changeBurst = 1_000_000
        config.apiRatePerSec = 1_000_000
        config.apiBurst = 1_000_000
        // Presence diffs at once, so tests see each join without firing timers (a test of the
        // interval sets it).
        config.presenceIntervalMs = 0
        configure(&config)
        store = MemoryStore(keepEvents: config.historyEvents, queue: transport.serviceQueue)
        // Who orders sessions, as foldtabled chooses it: a broker's stream with a cluster, else the store.
        let ordering: SessionOrderingChoice = cluster.map { .shared($0) } ?? .local(store: store, eventLog: store, names: [])
        hub = Hub(
            config: config, transport: transport, ordering: ordering, log: Log(level: .error), verifier: verifier,
            // Wall-clock seconds the hub sees (tokens' exp and nbf): fixed.
            clock: { 1_800_000_000 }, makeEpoch: makeEpoch)
        self.cluster = cluster
        transport.delegate = hub
        var options = TableOptions()
        options.busyThresholdMs = config.busyThresholdMs
        hub.createSessionIfAbsent("demo", table: DemoTable.make(options: options, largeRows: config.demoLargeRows))
        transport.settle()
    }

    func open(_ id: UInt64) { hub.connectionOpened(Connection(id: id), peer: "127.0.0.1") }

    func say(_ id: UInt64, _ text: String) {
        let bytes = Array(text.utf8)
        bytes.withUnsafeBytes { hub.connectionReceived(Connection(id: id), message: $0) }
        transport.settle()
    }

    /// Joins as a client opening `session` would: `create` asks to make it when it is missing
    /// (what the clients send for a new name).
    func join(_ id: UInt64, session: String = "demo", name: String? = nil, create: Bool = true) {
        open(id)
        say(id, #"{"type":"join","session":"\#(session)","name":"\#(name ?? "n\(id)")"\#(create ? #","create":true"# : "")}"#)
    }

    func close(_ id: UInt64) {
        transport.gone.insert(id)
        hub.connectionClosed(Connection(id: id), code: 1000)
        transport.settle()
    }
}
