import FoldtableCore
import Testing

@testable import FoldtableServer

/// The HTTP routes the hub answers, without sockets: the router alone, then the hub over the
/// in-memory transport and store (readiness following the store's failures).
@Suite struct HTTPRouting {
    let policy = RequestPolicy(hostNames: ["tables.example.com"])

    func request(_ method: String, _ path: String, host: String? = "127.0.0.1:8080", id: UInt64 = 1) -> HTTPRequest {
        HTTPRequest(id: id, method: method, path: path, headers: host.map { ["Host": $0] } ?? [:])
    }

    /// The router's answer, given at once.
    func answer(_ router: HTTPRouter, _ request: HTTPRequest) -> HTTPResponse? {
        var answer: HTTPResponse?
        router.handle(request) { answer = $0 }
        return answer
    }

    func json(_ response: HTTPResponse?) -> JSONValue? {
        guard let response else { return nil }
        return try? JSONParser.parse(String(decoding: response.body, as: UTF8.self), limits: .init(maxDepth: 8, maxStringBytes: 4_096))
    }

    func healthRouter(ready: @escaping () -> Bool = { true }) -> HTTPRouter {
        let router = HTTPRouter(policy: policy)
        router.addHealthChecks(ready: ready)
        return router
    }

    @Test func healthzAnswers200WithStatusOkAsJSON() {
        let response = answer(healthRouter(), request("GET", "/healthz"))
        #expect(response?.status == 200)
        #expect(response?.headers["Content-Type"] == "application/json")
        #expect(json(response)?["status"] == .string("ok"))
    }

    @Test func readyzFollowsTheReadinessItIsGiven() {
        var ready = true
        let router = healthRouter(ready: { ready })
        #expect(answer(router, request("GET", "/readyz"))?.status == 200)
        #expect(json(answer(router, request("GET", "/readyz")))?["status"] == .string("ready"))
        ready = false
        let refused = answer(router, request("GET", "/readyz"))
        #expect(refused?.status == 503)
        #expect(json(refused)?["status"] == .string("not_ready"))
    }

    @Test func anUnknownAPIPathIs404WithAJSONError() {
        let response = answer(healthRouter(), request("GET", "/api/v1/x"))
        #expect(response?.status == 404)
        #expect(json(response)?["error"]?["code"] == .string("not_found"))
        #expect(json(response)?["error"]?["message"] == .string("no endpoint /api/v1/x"))
    }

    @Test func aPathWithQuotesAndControlCharactersStillMakesValidJSON() {
        let response = answer(healthRouter(), request("GET", "/api/\"x\\\n"))
        #expect(json(response)?["error"]?["message"] == .string("no endpoint /api/\"x\\\n"))
    }

    @Test func aWrongMethodIs405WithTheAllowHeader() {
        let response = answer(healthRouter(), request("POST", "/healthz"))
        #expect(response?.status == 405)
        #expect(response?.headers["Allow"] == "GET, HEAD, OPTIONS")
        #expect(json(response)?["error"]?["code"] == .string("method_not_allowed"))
    }

    @Test func headIsAnsweredByTheGetRouteAndOptionsListsTheMethods() {
        let router = healthRouter()
        #expect(answer(router, request("HEAD", "/healthz"))?.status == 200)
        let options = answer(router, request("OPTIONS", "/healthz"))
        #expect(options?.status == 204)
        #expect(options?.headers["Allow"] == "GET, HEAD, OPTIONS")
        #expect(options?.body.isEmpty == true)
    }

    @Test func aHostTheServerDoesNotAnswerToIs421() {
        let router = healthRouter()
        #expect(answer(router, request("GET", "/healthz", host: "evil.example"))?.status == 421)
        #expect(answer(router, request("GET", "/healthz", host: nil))?.status == 421)
        #expect(json(answer(router, request("GET", "/healthz", host: "evil.example")))?["error"]?["code"] == .string("misdirected"))
        #expect(answer(router, request("GET", "/healthz", host: "tables.example.com"))?.status == 200)
        #expect(answer(router, request("GET", "/healthz", host: "[::1]:8080"))?.status == 200)
    }

    @Test func theRouterClaimsItsRoutesTheAPIAndMetricsButNotStaticFiles() {
        let router = healthRouter()
        for path in ["/healthz", "/readyz", "/metrics", "/api/", "/api/v1/sessions"] { #expect(router.claims(path), "\(path)") }
        for path in ["/", "/index.html", "/app.js", "/s/demo", "/ws", "/api", "/healthz/x", "/apix"] { #expect(!router.claims(path), "\(path)") }
    }

    @Test func aRouteAddedLaterIsAnsweredAndMayAnswerAfterItReturns() {
        let router = healthRouter()
        var later: [HTTPRouter.Respond] = []
        router.add("POST", "/api/v1/things") { request, respond in later.append(respond) }
        var answered: HTTPResponse?
        router.handle(request("POST", "/api/v1/things")) { answered = $0 }
        #expect(answered == nil)
        later.first?(.json(201, Array(#"{"id":1}"#.utf8)))
        #expect(answered?.status == 201)
        #expect(answer(router, request("GET", "/api/v1/things"))?.headers["Allow"] == "OPTIONS, POST")
    }

    @Test func theBodyCapIsASettingWithADefaultAndARange() throws {
        #expect(ServerConfig().maxHTTPBodyBytes == 4_194_304)
        guard case .run(let config) = try ServerConfig.parse(arguments: ["--max-http-body-bytes", "0"]) else { return }
        #expect(config.maxHTTPBodyBytes == 0)
        guard case .run(let fromEnvironment) = try ServerConfig.parse(arguments: [], environment: ["FOLDTABLE_MAX_HTTP_BODY_BYTES": "4096"])
        else { return }
        #expect(fromEnvironment.maxHTTPBodyBytes == 4_096)
        for value in ["-1", "x", String(64 * 1_048_576 + 1)] {
            #expect(throws: ServerConfig.Invalid.self, "\(value)") { try ServerConfig.parse(arguments: ["--max-http-body-bytes", value]) }
        }
    }

    // MARK: - Through the hub

    @Test func theHubAnswersHealthChecksThroughItsTransport() {
        let h = Harness()
        #expect(h.hub.claimsHTTPPath("/healthz"))
        #expect(!h.hub.claimsHTTPPath("/app.js"))
        h.hub.httpRequest(request("GET", "/healthz", id: 7))
        #expect(h.transport.responses[7]?.status == 200)
        h.hub.httpRequest(request("GET", "/api/v1/nothing", id: 8))
        #expect(h.transport.responses[8]?.status == 404)
        // An abandoned request is only logged; a late answer to it is refused by the transport.
        h.transport.abandoned.insert(9)
        h.hub.httpRequestAbandoned(9)
        h.hub.httpRequest(request("GET", "/healthz", id: 9))
        #expect(h.transport.responses[9] == nil)
    }

    @Test func readinessFollowsTheStoresFailuresThroughTheStoreMonitor() {
        let transport = TestTransport()
        let store = MemoryStore(keepEvents: 300, queue: transport.serviceQueue)
        let monitor = StoreMonitor(store: store, log: store, clock: { transport.clock }, failureWindowMs: 10_000)
        var config = ServerConfig()
        config.changeRatePerSec = 1_000_000
        let hub = Hub(
            config: config, transport: transport, ordering: .local(store: monitor, eventLog: monitor, names: []), log: Log(level: .error),
            makeEpoch: { "e1" }, ready: { monitor.isAvailable })
        transport.delegate = hub
        func readiness(_ id: UInt64) -> Int? {
            hub.httpRequest(request("GET", "/readyz", id: id))
            return transport.responses[id]?.status
        }
        func change(_ id: String) {
            Array(#"{"type":"addSection","title":"A","id":"\#(id)"}"#.utf8).withUnsafeBytes { hub.connectionReceived(Connection(id: 1), message: $0) }
            transport.settle()
        }
        hub.connectionOpened(Connection(id: 1), peer: "127.0.0.1")
        Array(#"{"type":"join","session":"s","name":"ana","create":true}"#.utf8).withUnsafeBytes {
            hub.connectionReceived(Connection(id: 1), message: $0)
        }
        transport.settle()
        #expect(readiness(1) == 200)

        store.failWrites = .unavailable("disk full")
        change("a")
        #expect(readiness(2) == 503)
        transport.clock += 5_000
        #expect(readiness(3) == 503)

        // A write that succeeds again makes it ready at once.
        store.failWrites = nil
        change("b")
        #expect(transport.messages(1, type: "ack").count == 1)
        #expect(readiness(4) == 200)

        // Without writes, the node is offered traffic again once the window has passed.
        store.failWrites = .unavailable("disk full")
        change("d")
        #expect(readiness(5) == 503)
        store.failWrites = nil
        transport.clock += 10_000
        #expect(readiness(6) == 200)
    }
}
