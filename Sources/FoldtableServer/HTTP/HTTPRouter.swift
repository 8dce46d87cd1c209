import FoldtableCore

/// Answers the HTTP requests the hub claims from the transport: a table of routes, path and
/// method to handler, so an endpoint is one ``add(_:_:_:)``.
///
/// The router claims the paths in its table, every path under its prefixes (`/api/`: an unknown
/// API path is a JSON 404, never a static file of that name) and the paths it reserves for
/// endpoints to come (`/metrics`). Errors share one JSON shape, `{"error":{"code":...,
/// "message":...}}`: 404 `not_found`, 405 `method_not_allowed` with `Allow`, 421 `misdirected`
/// for a Host the server does not answer to (the transport checks it first too; checking again
/// here keeps the rule true for any transport). `HEAD` is answered by the `GET` handler (the
/// transport drops the body) and `OPTIONS` with 204 and `Allow`, unless a route names them.
///
/// Handlers answer through the closure they are given, at once or later (after a store commit);
/// everything runs on the service thread.
public final class HTTPRouter {
    /// Sends the answer. Call it once; it may be called after the handler returned.
    public typealias Respond = (HTTPResponse) -> Void
    public typealias Handler = (HTTPRequest, @escaping Respond) -> Void

    /// Prefixes under which every path is the router's (404 when no route matches).
    public let prefixes: [String]
    /// Paths claimed for endpoints not written yet: 404 until they are, never a static file.
    public let reservedPaths: Set<String>
    private let policy: RequestPolicy
    private var routes: [String: [String: Handler]] = [:]

    public init(policy: RequestPolicy, prefixes: [String] = ["/api/"], reservedPaths: Set<String> = ["/metrics"]) {
        self.policy = policy
        self.prefixes = prefixes
        self.reservedPaths = reservedPaths
    }

    /// Routes `method` requests for exactly `path` to `handler` (a later `add` replaces it).
    public func add(_ method: String, _ path: String, _ handler: @escaping Handler) {
        routes[path, default: [:]][method.uppercased()] = handler
    }

    /// `GET /healthz`: 200 `{"status":"ok"}` while the process serves at all (liveness).
    /// `GET /readyz`: 200 `{"status":"ready"}` while `ready()` says so, else 503
    /// `{"status":"not_ready"}` (a load balancer then sends clients elsewhere).
    public func addHealthChecks(ready: @escaping () -> Bool) {
        addHealthChecks(notReady: { ready() ? nil : "" })
    }

    /// As ``addHealthChecks(ready:)``, with why not: `notReady()` gives `nil` while ready, else
    /// the reason, answered as `{"status":"not_ready","reason":"..."}` (no reason when empty).
    public func addHealthChecks(notReady: @escaping () -> String?) {
        add("GET", "/healthz") { _, respond in respond(.json(200, Array(#"{"status":"ok"}"#.utf8))) }
        add("GET", "/readyz") { _, respond in
            switch notReady() {
            case nil: respond(.json(200, Array(#"{"status":"ready"}"#.utf8)))
            case let reason? where reason.isEmpty: respond(.json(503, Array(#"{"status":"not_ready"}"#.utf8)))
            case let reason?:
                var body = JSONWriter()
                body.raw(#"{"status":"not_ready""#)
                body.nextKey("reason")
                body.string(reason)
                body.byte(UInt8(ascii: "}"))
                respond(.json(503, body.bytes))
            }
        }
    }

    /// The exact routes as method and path (HEAD and OPTIONS implied), for the test that holds
    /// the OpenAPI document to them.
    var routeTable: [(method: String, path: String)] {
        routes.flatMap { path, methods in methods.keys.map { ($0, path) } }
    }

    /// Hands every request under `prefix` that no exact route takes to `handler` (which routes
    /// by pattern itself, as the session API does: `/api/v1/sessions/{name}/...`).
    public func addPrefix(_ prefix: String, _ handler: @escaping Handler) {
        prefixHandlers.append((prefix, handler))
    }
    private var prefixHandlers: [(prefix: String, handler: Handler)] = []

    /// Whether requests for `path` are the router's rather than static files.
    public func claims(_ path: String) -> Bool {
        routes[path] != nil || reservedPaths.contains(path) || prefixes.contains { path.hasPrefix($0) }
    }

    /// Answers `request` through `respond`: the route's handler, or the error that fits.
    public func handle(_ request: HTTPRequest, respond: @escaping Respond) {
        guard policy.allowsHost(request.header("host")) else {
            return respond(Self.error(421, "misdirected", "this server does not answer to that Host"))
        }
        guard let methods = routes[request.path] else {
            if let prefixed = prefixHandlers.first(where: { request.path.hasPrefix($0.prefix) }) {
                return prefixed.handler(request, respond)
            }
            return respond(Self.error(404, "not_found", "no endpoint \(request.path)"))
        }
        let method = request.method.uppercased()
        if let handler = methods[method] ?? (method == "HEAD" ? methods["GET"] : nil) {
            return handler(request, respond)
        }
        respond(Self.otherMethod(request, allowed: Array(methods.keys)))
    }

    /// The answer to a method a path does not take: 204 with `Allow` for OPTIONS, else 405 with
    /// `Allow` (the path's methods, HEAD with GET, and OPTIONS).
    public static func otherMethod(_ request: HTTPRequest, allowed methods: [String]) -> HTTPResponse {
        var names = Set(methods)
        if names.contains("GET") { names.insert("HEAD") }
        names.insert("OPTIONS")
        let allow = names.sorted().joined(separator: ", ")
        let method = request.method.uppercased()
        if method == "OPTIONS" { return HTTPResponse(status: 204, headers: ["Allow": allow]) }
        var refusal = error(405, "method_not_allowed", "\(method) is not allowed on \(request.path); allowed: \(allow)")
        refusal.headers["Allow"] = allow
        return refusal
    }

    /// An error in the API's shape: `{"error":{"code":"...","message":"...","field":"..."}}`
    /// (`field` only when given).
    public static func error(_ status: Int, _ code: String, _ message: String, field: String? = nil) -> HTTPResponse {
        var json = JSONWriter(capacity: 64 + message.utf8.count)
        json.raw("{")
        json.key("error")
        json.raw("{")
        json.key("code")
        json.string(code)
        json.nextKey("message")
        json.string(message)
        if let field {
            json.nextKey("field")
            json.string(field)
        }
        json.raw("}}")
        return .json(status, json.bytes)
    }
}
