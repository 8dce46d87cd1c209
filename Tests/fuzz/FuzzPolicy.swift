// libFuzzer target for the request policy (Host, Origin, X-Forwarded-For; issue 29) and the HTTP
// API behind it: what a stranger's request reaches before any token is checked.
//
// Not a SwiftPM target: Tests/fuzz/run.sh builds FoldtableCore and FoldtableServer instrumented
// with -enable-testing and links this file against them.
//
// One input is one request and the configuration that judges it, as lines split on "\n" (a line
// that is missing is a header that was not sent): Host, Origin, X-Forwarded-For, the TCP peer,
// then the configuration's --host, --public-url, --allowed-origins and --trusted-proxies, then the
// method, the path (as the transport hands it over: percent-decoded), the query (`a=1&b`),
// Content-Type, and the body (every remaining line). The target traps (a libFuzzer crash) when
// one of these does not hold:
// - nothing traps: the policy is built from any configuration that validates, and judges any
//   header bytes;
// - a Host the policy allows names this server in ASCII (an IP literal in its byte grammar,
//   `localhost`, or a configured name); what the policy calls an IP literal is ASCII hex digits,
//   dots and colons; Host is case-insensitive;
// - an Origin is allowed only with an allowed Host;
// - the client address is the peer, or (from a trusted peer only) an IP literal taken from
//   X-Forwarded-For;
// - the HTTP API (a real Hub over a MemoryStore, in open mode, with one session stored) answers
//   the request exactly once, 421 exactly when the Host is refused, with a status in 100...599,
//   header lines without line breaks, and a JSON body that parses when it says it is JSON.

@testable import FoldtableCore
@testable import FoldtableServer

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPolicy(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = UnsafeBufferPointer(start: data, count: size)
    let lines = input.split(separator: UInt8(ascii: "\n"), maxSplits: 14, omittingEmptySubsequences: false)
    func line(_ index: Int) -> String? {
        index < lines.count ? String(decoding: lines[index], as: UTF8.self) : nil
    }
    let host = line(0)
    let origin = line(1)
    let forwardedFor = line(2)
    let peer = line(3) ?? "127.0.0.1"

    var config = ServerConfig()
    // Open, so that any --host validates (a public bind needs --open or a token secret).
    config.open = true
    config.changeRatePerSec = 1_000_000
    if let value = line(4), !value.isEmpty { config.host = value }
    if let value = line(5), !value.isEmpty { config.publicURLs = [value] }
    if let value = line(6), !value.isEmpty { config.allowedOrigins = [value] }
    if let value = line(7), !value.isEmpty { config.trustedProxies = [value] }
    // foldtabled builds the policy only from a configuration that validates.
    guard config.problems().isEmpty else { return 0 }
    let policy = RequestPolicy(config)

    checkHost(policy, host)
    checkHost(policy, host.map(asciiUppercased))
    if policy.allowsOrigin(origin, host: host) {
        require(policy.allowsHost(host), "Origin \(String(reflecting: origin)) allowed with a refused Host \(String(reflecting: host))")
    }
    let address = policy.clientAddress(peer: peer, forwardedFor: forwardedFor)
    if address != peer {
        require(policy.trustedProxies.contains(peer), "X-Forwarded-For believed from untrusted peer \(String(reflecting: peer))")
        require(isIPLiteralBytes(address), "client address \(String(reflecting: address)) is not an IP literal")
        require(forwardedFor?.contains(address) == true, "client address \(String(reflecting: address)) is not from X-Forwarded-For")
    }

    checkAPI(config, policy, lines: lines, host: host, origin: origin, address: address)
    return 0
}

/// A Host the policy allows is ASCII (or exactly a configured name), and the verdict does not
/// depend on letter case.
private func checkHost(_ policy: RequestPolicy, _ host: String?) {
    guard policy.allowsHost(host), let host else { return }
    let name = RequestPolicy.hostPart(of: host.lowercased())
    require(
        name.utf8.allSatisfy { $0 < 0x80 } || policy.hostNames.contains(name),
        "allowed a Host whose host part is not ASCII: \(String(reflecting: host))")
    require(
        policy.allowsHost(asciiUppercased(host)) && policy.allowsHost(host.lowercased()),
        "Host \(String(reflecting: host)) is allowed in one letter case only")
    if RequestPolicy.isIPLiteral(name) {
        require(isIPLiteralBytes(name), "\(String(reflecting: name)) taken for an IP literal")
    }
}

/// What may make up an IP literal, judged byte by byte: ASCII hex digits, dots and colons.
private func isIPLiteralBytes(_ text: String) -> Bool {
    !text.isEmpty
        && text.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"), UInt8(ascii: "A")...UInt8(ascii: "F"),
                UInt8(ascii: "."), UInt8(ascii: ":"):
                return true
            default: return false
            }
        }
}

/// `text` with ASCII letters upper-cased and every other byte as it was.
private func asciiUppercased(_ text: String) -> String {
    String(decoding: text.utf8.map { (0x61...0x7A).contains($0) ? $0 - 0x20 : $0 }, as: UTF8.self)
}

// MARK: - The HTTP API

/// Records the hub's HTTP answers; everything else a hub may do to connections is not asked for
/// here (the target opens none).
private final class RecordingTransport: Transport {
    var responses: [UInt64: [HTTPResponse]] = [:]
    weak var delegate: TransportDelegate?
    let serviceQueue = ServiceQueue(wake: {})

    func broadcast(_ message: OutboundMessage, to connections: [Connection]) {}
    func send(_ message: OutboundMessage, to connection: Connection) {}
    func close(_ connection: Connection, code: Int, reason: String) {}
    func queuedBytes(_ connection: Connection) -> Int { 0 }
    func requestDrain(_ connection: Connection, lowMark: Int) {}
    func armTimer(token: UInt64, milliseconds: UInt64) {}
    func cancelTimer(token: UInt64) {}
    func nowMilliseconds() -> UInt64 { 0 }
    func respond(to id: UInt64, with response: HTTPResponse) -> Bool {
        responses[id, default: []].append(response)
        return true
    }

    /// Runs what the store posted, and what that posts, until nothing is left.
    func settle() {
        while !serviceQueue.isEmpty { serviceQueue.drain() }
    }
}

/// A stored session for requests to find: the demo table with a few rows in its large section.
private let seedDocument = TableDocument.encode(DemoTable.make(largeRows: 3))

private func checkAPI(
    _ config: ServerConfig, _ policy: RequestPolicy, lines: [UnsafeBufferPointer<UInt8>.SubSequence], host: String?, origin: String?,
    address: String
) {
    func line(_ index: Int) -> String? {
        index < lines.count ? String(decoding: lines[index], as: UTF8.self) : nil
    }
    guard let method = line(8), let path = line(9) else { return }
    let transport = RecordingTransport()
    let store = MemoryStore(keepEvents: 300, queue: transport.serviceQueue)
    let hub = Hub(
        config: config, transport: transport, ordering: .local(store: store, eventLog: store, names: []), log: Log(level: .error), makeEpoch: { "e1" }
    )
    transport.delegate = hub

    // The seed session, created through the API itself with a Host every policy allows.
    hub.httpRequest(
        HTTPRequest(
            id: 1, method: "POST", path: "/api/v1/sessions", query: ["name": "s"],
            headers: ["Host": "127.0.0.1", "Content-Type": "application/json"], body: seedDocument, peer: "127.0.0.1"))
    transport.settle()
    require(transport.responses[1]?.first?.status == 201, "the seed session was not created: \(String(describing: transport.responses[1]))")

    var query: [String: String] = [:]
    for argument in (line(10) ?? "").split(separator: "&") {
        if let equals = argument.firstIndex(of: "=") {
            query[String(argument[..<equals])] = String(argument[argument.index(after: equals)...])
        } else {
            query[String(argument)] = ""
        }
    }
    var headers: [String: String] = [:]
    if let host { headers["Host"] = host }
    if let origin { headers["Origin"] = origin }
    if let type = line(11) { headers["Content-Type"] = type }
    let body = lines.count > 12 ? Array(lines[12...].joined(separator: [UInt8(ascii: "\n")])) : []
    let request = HTTPRequest(id: 2, method: method, path: path, query: query, headers: headers, body: body, peer: address)
    hub.httpRequest(request)
    transport.settle()

    let answers = transport.responses[2] ?? []
    require(answers.count == 1, "\(method) \(String(reflecting: path)) was answered \(answers.count) times")
    let response = answers[0]
    require((100...599).contains(response.status), "status \(response.status)")
    require((response.status == 421) == !policy.allowsHost(host), "status \(response.status) for Host \(String(reflecting: host))")
    for (name, value) in response.headers {
        require(
            !(name + value).utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0 },
            "header \(String(reflecting: name)): \(String(reflecting: value)) holds a line break")
    }
    if response.headers["Content-Type"] == "application/json", !response.body.isEmpty {
        do {
            _ = try JSONParser.parse(response.body, limits: JSONParser.Limits(maxDepth: 64, maxStringBytes: 1 << 20))
        } catch {
            fatalError("fuzz invariant: the \(response.status) answer to \(method) \(String(reflecting: path)) is not JSON: \(error)")
        }
    }
}
