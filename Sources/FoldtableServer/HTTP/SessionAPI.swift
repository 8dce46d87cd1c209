import FoldtableCore
import Foundation

/// The HTTP API under `/api/v1`: sessions and their tables for scripts, cron jobs and other
/// systems, without a browser. Every change goes through the session's one order like a
/// member's (``Hub/submitAPIChange(_:id:author:session:completion:)``), is broadcast to the
/// members, and is answered with its seq after the commit.
///
/// Access: with tokens configured, every call needs `Authorization: Bearer TOKEN` whose grant
/// opens the session with the role the call needs (viewer to read, editor to change, owner for
/// options, creating and deleting). In open mode a web page elsewhere must not drive the API:
/// calls with a body need `Content-Type: application/json` (or `text/csv` for imports), which a
/// cross-origin page cannot send without a CORS preflight this server never grants, and calls
/// carrying a foreign `Origin` are refused with 403.
///
/// Errors are `{"error":{"code":...,"message":...,"field":...}}` with the protocol's codes.
final class SessionAPI {
    unowned let hub: Hub
    let policy: RequestPolicy
    typealias Respond = HTTPRouter.Respond
    /// An endpoint: an unapplied method (`SessionAPI.listSessions`), so the route table holds
    /// no reference to the API itself (a stored `self.listSessions` would be a retain cycle).
    private typealias Handler = (SessionAPI) -> (Call, @escaping Respond) -> Void

    /// One route: method, path segments (`{name}` captures), least role (nil: anyone, no token,
    /// as for the API's own description), handler.
    private struct Route {
        var method: String
        var segments: [String]
        var role: Role?
        var handler: Handler
    }
    private var routes: [Route] = []
    /// Each client address's API rate (``ServerConfig/apiRatePerSec``); full buckets are
    /// forgotten when the map grows, so it holds only addresses active lately.
    private var buckets: [String: TokenBucket] = [:]
    private static let bucketsBeforePruning = 4_096
    /// Exports some client is still reading, by table and form (see ``SharedBody``): the next
    /// reader of the same table gets the same bytes, not another copy. Weak: a body lives only
    /// while an answer holds it.
    var exports: [String: WeakBody] = [:]
    /// Readers waiting for an export being made, by the same key.
    var exportWaiters: [String: [(SharedBody) -> Void]] = [:]

    /// The OpenAPI document's bytes, made at the first request for it.
    private var openAPIBody: [UInt8]?

    struct WeakBody {
        weak var body: SharedBody?
    }

    /// A request matched to a route: its captured segments and the grant it came with.
    struct Call {
        var request: HTTPRequest
        var parameters: [String: String]
        var grant: AccessGrant?
        var author: Author
    }

    init(hub: Hub, policy: RequestPolicy) {
        self.hub = hub
        self.policy = policy
        add("GET", "/api/v1/sessions", .viewer, SessionAPI.listSessions)
        add("POST", "/api/v1/sessions", .owner, SessionAPI.createSession)
        add("GET", "/api/v1/sessions/{name}", .viewer, SessionAPI.exportTable)
        add("DELETE", "/api/v1/sessions/{name}", .owner, SessionAPI.deleteSession)
        add("GET", "/api/v1/sessions/{name}/collapsed", .viewer, SessionAPI.collapsedMap)
        add("PUT", "/api/v1/sessions/{name}/sections/{section}/collapsed", .editor, SessionAPI.setCollapsed)
        add("GET", "/api/v1/sessions/{name}/sections/{section}/rows", .viewer, SessionAPI.exportRows)
        add("POST", "/api/v1/sessions/{name}/sections/{section}/rows", .editor, SessionAPI.importRows)
        add("POST", "/api/v1/sessions/{name}/expand-all", .editor, SessionAPI.expandAll)
        add("POST", "/api/v1/sessions/{name}/collapse-all", .editor, SessionAPI.collapseAll)
        add("POST", "/api/v1/sessions/{name}/changes", .editor, SessionAPI.postChange)
        add("GET", "/api/v1/sessions/{name}/find", .viewer, SessionAPI.find)
        add("POST", "/api/v1/sessions/{name}/find", .viewer, SessionAPI.findByBody)
        add("GET", "/api/v1/sessions/{name}/events", .viewer, SessionAPI.events)
        add("PUT", "/api/v1/sessions/{name}/webhook", .owner, SessionAPI.putWebhook)
        add("GET", "/api/v1/sessions/{name}/webhook", .owner, SessionAPI.getWebhook)
        add("DELETE", "/api/v1/sessions/{name}/webhook", .owner, SessionAPI.deleteWebhook)
        add("POST", "/api/v1/sessions/{name}/webhook/resume", .owner, SessionAPI.resumeWebhook)
        add("POST", "/api/v1/sessions/{name}/invites", .owner, SessionAPI.mintInvite)
        add("GET", "/api/v1/sessions/{name}/invites", .owner, SessionAPI.listInvites)
        add("DELETE", "/api/v1/sessions/{name}/invites/{id}", .owner, SessionAPI.withdrawInvite)
        add("GET", "/api/v1/sessions/{name}/members", .viewer, SessionAPI.listMembers)
        add("DELETE", "/api/v1/sessions/{name}/members/{client}", .owner, SessionAPI.removeMember)
        add("GET", "/api/v1/openapi.json", nil, SessionAPI.openAPI)
    }

    private func add(_ method: String, _ path: String, _ role: Role?, _ handler: @escaping Handler) {
        routes.append(Route(method: method, segments: path.split(separator: "/").map(String.init), role: role, handler: handler))
    }

    /// Every route as method, path pattern and least role (nil: anyone), for the test that holds
    /// ``OpenAPIDocument`` to the table.
    var routeTable: [(method: String, path: String, role: Role?)] {
        routes.map { ($0.method, "/" + $0.segments.joined(separator: "/"), $0.role) }
    }

    /// Registers every route's path pattern with the router.
    func install(on router: HTTPRouter) {
        router.addPrefix("/api/v1/") { [unowned self] request, respond in handle(request, respond) }
    }

    // MARK: - Dispatch

    private func handle(_ request: HTTPRequest, _ respond: @escaping Respond) {
        if let refusal = rateRefusal(request) { return respond(refusal) }
        let segments = request.path.split(separator: "/").map(String.init)
        let method = request.method.uppercased() == "HEAD" ? "GET" : request.method.uppercased()
        var allowed: [String] = []
        for route in routes where route.segments.count == segments.count {
            guard let parameters = Self.match(route.segments, segments) else { continue }
            guard route.method == method else {
                allowed.append(route.method)
                continue
            }
            guard let role = route.role else {
                return route.handler(self)(
                    Call(request: request, parameters: parameters, grant: nil, author: Author(client: "api", name: "api")), respond)
            }
            if let name = parameters["name"], !JoinRequest.isValidSessionName(name) {
                return respond(Self.error(400, ProtocolError(.invalidSession, "session names are 1 to 64 letters, digits, _ or -", field: "name")))
            }
            // The session a call is about: in its path, or (creating one) in `?name=`.
            switch authorize(request, role: role, session: parameters["name"] ?? request.query["name"]) {
            case .failure(let refusal): return respond(refusal.response)
            case .success(let grant):
                // Checked after access: a caller without the right gets 401/403, not a hint.
                if let refusal = Self.unknownChoice(request) { return respond(refusal) }
                let author = Author(client: "api", name: grant?.name ?? grant?.user ?? "api")
                return route.handler(self)(Call(request: request, parameters: parameters, grant: grant, author: author), respond)
            }
        }
        guard !allowed.isEmpty else {
            return respond(HTTPRouter.error(404, "not_found", "no endpoint \(request.path)"))
        }
        respond(HTTPRouter.otherMethod(request, allowed: allowed))
    }

    /// The query parameters that choose between a few forms, with the values each takes: the
    /// same meaning on every route that reads them.
    /// In a fixed order, so that a call with two wrong ones is always told about the same one.
    static let choices: KeyValuePairs<String, [String]> = ["by": ["key", "title"], "format": ["json", "csv"], "mode": ["replace", "append"]]

    /// The values the choice `name` takes.
    static func choice(_ name: String) -> [String] { choices.first { $0.key == name }?.value ?? [] }

    /// 400 naming the parameter when a call gives one of ``choices`` a value it does not take
    /// (`?format=xml` is an error, not a quiet JSON answer), else nil.
    private static func unknownChoice(_ request: HTTPRequest) -> HTTPResponse? {
        for (field, values) in choices {
            guard let given = request.query[field], !values.contains(given) else { continue }
            return error(400, ProtocolError(.invalidValue, "\(field) must be \(values.joined(separator: " or "))", field: field))
        }
        return nil
    }

    /// 429 with `Retry-After` when the caller's address has used up its rate
    /// (``ServerConfig/apiRatePerSec``), else nil: every call costs a token (a find or an export
    /// reads a whole table).
    private func rateRefusal(_ request: HTTPRequest) -> HTTPResponse? {
        let now = hub.transport.nowMilliseconds()
        if buckets.count >= Self.bucketsBeforePruning { buckets = buckets.filter { !$0.value.isFull(now: now) } }
        var bucket = buckets[request.peer] ?? TokenBucket(ratePerSecond: hub.config.apiRatePerSec, burst: hub.config.apiBurst, now: now)
        let taken = bucket.take(now: now)
        buckets[request.peer] = bucket
        guard !taken else { return nil }
        var refusal = Self.error(429, ProtocolError(.rateLimited, "too many requests from this address; retry later"))
        refusal.headers["Retry-After"] = String(max(1, (bucket.millisecondsUntilToken(now: now) + 999) / 1_000))
        return refusal
    }

    /// The captured `{name}` segments when `pattern` matches `path`.
    private static func match(_ pattern: [String], _ path: [String]) -> [String: String]? {
        var parameters: [String: String] = [:]
        for (want, have) in zip(pattern, path) {
            if want.hasPrefix("{") && want.hasSuffix("}") {
                guard !have.isEmpty else { return nil }
                parameters[String(want.dropFirst().dropLast())] = have
            } else if want != have {
                return nil
            }
        }
        return parameters
    }

    /// The caller's grant (nil in open mode), or the refusal: 401 without a valid token, 403 for
    /// a session the token does not open or a role below `role`, and in open mode 403 for a
    /// foreign Origin.
    /// Why a call may not go on: the answer to send instead.
    private struct Refusal: Error {
        var response: HTTPResponse
    }

    private func authorize(_ request: HTTPRequest, role: Role, session: String?) -> Result<AccessGrant?, Refusal> {
        guard policy.allowsOrigin(request.header("origin"), host: request.header("host")) else {
            return .failure(Refusal(response: HTTPRouter.error(403, "forbidden", "requests from another origin are refused")))
        }
        guard let verifier = hub.verifier else { return .success(nil) }
        guard let authorization = request.header("authorization"), authorization.lowercased().hasPrefix("bearer ") else {
            var refusal = Self.error(401, ProtocolError(.unauthorized, "this server needs Authorization: Bearer TOKEN", field: "token"))
            refusal.headers["WWW-Authenticate"] = "Bearer"
            return .failure(Refusal(response: refusal))
        }
        let token = String(authorization.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
        switch hub.verifyToken(token, with: verifier) {
        case .failure(let refusal):
            var response = Self.error(401, ProtocolError(.unauthorized, refusal.message, field: "token"))
            response.headers["WWW-Authenticate"] = "Bearer error=\"invalid_token\""
            return .failure(Refusal(response: response))
        case .success(let grant):
            if let session, !grant.allows(session) {
                return .failure(Refusal(response: Self.error(403, ProtocolError(.forbidden, "the token does not open session \(session)"))))
            }
            guard grant.role >= role else {
                return .failure(
                    Refusal(
                        response: Self.error(
                            403, ProtocolError(.forbidden, "this needs the \(role.rawValue) role; the token has \(grant.role.rawValue)"))))
            }
            return .success(grant)
        }
    }

    // MARK: - Endpoints

    private func listSessions(_ call: Call, _ respond: @escaping Respond) {
        hub.withListing { [self] in respond(sessionList(call)) }
    }

    private func sessionList(_ call: Call) -> HTTPResponse {
        var out = JSONWriter(capacity: 256)
        out.raw("{\"sessions\":[")
        for (index, summary) in hub.sessionSummaries(visibleTo: call.grant).prefix(10_000).enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            out.raw("{\"name\":")
            out.string(summary.name)
            out.nextKey("members")
            out.integer(UInt64(summary.members))
            out.nextKey("sections")
            if let sections = summary.sections { out.integer(UInt64(sections)) } else { out.raw("null") }
            out.byte(UInt8(ascii: "}"))
        }
        out.raw("]}")
        return .json(200, out.bytes)
    }

    /// `POST /api/v1/sessions?name=NAME`: a new session, empty (no body) or from a table in the
    /// body (the JSON document or CSV, by Content-Type).
    private func createSession(_ call: Call, _ respond: @escaping Respond) {
        guard let name = call.request.query["name"], JoinRequest.isValidSessionName(name) else {
            return respond(Self.error(400, ProtocolError(.invalidSession, "name= must be 1 to 64 letters, digits, _ or -", field: "name")))
        }
        let body = call.request.body
        let limits = hub.config.tableLimits
        let decode: @Sendable () throws(ProtocolError) -> Table
        switch body.isEmpty ? "" : mediaType(call.request) {
        case "": decode = { Table(limits: limits) }
        case "application/json": decode = { () throws(ProtocolError) in try TableDocument.decode(body, limits: limits) }
        case "text/csv": decode = { () throws(ProtocolError) in try CSVTable.decode(body, limits: limits) }
        default: return respond(unsupportedMediaType(["application/json", "text/csv"]))
        }
        decodeAside(body.count, decode) { [hub] decoded in
            switch decoded {
            case .success(let table): Self.create(name, table, hub: hub, respond)
            case .failure(let error): respond(Self.error(error))
            }
        }
    }

    private static func create(_ name: String, _ table: Table, hub: Hub, _ respond: @escaping Respond) {
        hub.createSession(name, table: table) { result in
            switch result {
            case .success:
                respond(
                    .json(
                        201, Self.object(["name": .string(name), "sections": .integer(Int64(table.sections.count))]),
                        headers: ["Location": "/api/v1/sessions/\(name)"]))
            case .failure(let error):
                respond(Self.error(error))
            }
        }
    }

    private func deleteSession(_ call: Call, _ respond: @escaping Respond) {
        let name = call.parameters["name"] ?? ""
        hub.withSession(name, create: false) { [hub] result in
            switch result {
            case .failure(let error): respond(Self.error(error))
            case .success(let session):
                hub.deleteSession(session, by: "api:\(call.author.name)") { deleted in
                    switch deleted {
                    case .success: respond(HTTPResponse(status: 204))
                    case .failure(let error): respond(Self.error(error))
                    }
                }
            }
        }
    }

    /// `GET .../collapsed`: `{"key": true, ...}`, or by title with `?by=title` (the seeds'
    /// headerTitleToIsCollapsedMap; a title two sections share appears once, the first).
    private func collapsedMap(_ call: Call, _ respond: @escaping Respond) {
        let byTitle = call.request.query["by"] == "title"
        withTable(call, respond) { table in
            var out = JSONWriter(capacity: 32 * table.sections.count + 2)
            out.byte(UInt8(ascii: "{"))
            var seen: Set<String> = []
            for section in table.sections {
                let name = byTitle ? section.title : section.key
                // Keys are unique; titles need not be. A map by title that kept one of two
                // sections of a title would say something false of the other: refused, as a
                // PUT by that title is, naming the title.
                guard seen.insert(name).inserted else {
                    return respond(
                        Self.error(
                            ProtocolError(
                                .ambiguousTitle, "several sections have the title \"\(name.prefix(64))\"; ask for the map by key", field: "title")))
                }
                if seen.count > 1 { out.byte(UInt8(ascii: ",")) }
                out.string(name)
                out.byte(UInt8(ascii: ":"))
                out.bool(section.collapsed)
            }
            out.byte(UInt8(ascii: "}"))
            respond(.json(200, out.bytes))
        }
    }

    /// `PUT .../sections/KEY/collapsed` (or a title with `?by=title`), body `true`, `false` or
    /// `{"collapsed":true}`.
    private func setCollapsed(_ call: Call, _ respond: @escaping Respond) {
        guard mediaType(call.request) == "application/json" else { return respond(unsupportedMediaType(["application/json"])) }
        let value: JSONValue
        do {
            value = try JSONParser.parse(call.request.body, limits: hub.messageLimits.json)
        } catch {
            return respond(Self.error(error))
        }
        let collapsed: Bool
        switch value {
        case .bool(let flag): collapsed = flag
        case .object:
            guard case .bool(let flag)? = value["collapsed"] else {
                return respond(
                    Self.error(400, ProtocolError(.missingField, "the body must be true, false or {\"collapsed\": true|false}", field: "collapsed")))
            }
            collapsed = flag
        default:
            return respond(
                Self.error(400, ProtocolError(.wrongType, "the body must be true, false or {\"collapsed\": true|false}", field: "collapsed")))
        }
        change(.setCollapsed(section: sectionRef(call), collapsed: collapsed), call, respond)
    }

    /// `POST .../changes`: any change of the protocol, as a client would send it (its `type` and
    /// fields; an `id` in the body or the `Idempotency-Key` header makes retries safe).
    private func postChange(_ call: Call, _ respond: @escaping Respond) {
        guard mediaType(call.request) == "application/json" else { return respond(unsupportedMediaType(["application/json"])) }
        let (result, _) = ClientMessage.decode(call.request.body, limits: hub.messageLimits)
        switch result {
        case .failure(let error): respond(Self.error(error))
        case .success(.change(let change, let id)):
            if case .setOptions = change, let grant = call.grant, grant.role < .owner {
                return respond(Self.error(403, ProtocolError(.forbidden, "only an owner changes the table's options")))
            }
            var call = call
            if let id { call.request.headers["idempotency-key"] = call.request.header("idempotency-key") ?? id }
            self.change(change, call, respond)
        case .success:
            respond(Self.error(400, ProtocolError(.unknownType, "only changes are accepted here (toggle, set, addRow, ...)", field: "type")))
        }
    }

    private func expandAll(_ call: Call, _ respond: @escaping Respond) { change(.setAll(collapsed: false), call, respond) }
    private func collapseAll(_ call: Call, _ respond: @escaping Respond) { change(.setAll(collapsed: true), call, respond) }

    /// `GET .../find?q=TEXT&limit=N`: rows containing the text, from every section.
    private func find(_ call: Call, _ respond: @escaping Respond) {
        // A limit that is not a number is refused like one out of range, not read as the default.
        find(call.request.query["q"] ?? "", limit: call.request.query["limit"].map { Int($0) ?? 0 }, call, respond)
    }

    /// `POST .../find` with `{"q":..,"limit":N}`: the same search, for text a URL cannot carry.
    /// libwebsockets ends the request line at a decoded line break (`%0A`), so a query that
    /// holds one (two-line titles) goes in a body.
    private func findByBody(_ call: Call, _ respond: @escaping Respond) {
        guard mediaType(call.request) == "application/json" else { return respond(unsupportedMediaType(["application/json"])) }
        let query: String
        let limit: Int64?
        do {
            let reader = try FieldReader(try JSONParser.parse(call.request.body, limits: hub.messageLimits.json))
            query = try reader.string("q")
            limit = try reader.optionalInteger("limit")
        } catch {
            return respond(Self.error(error))
        }
        find(query, limit: limit.map { Int(clamping: $0) }, call, respond)
    }

    private func find(_ query: String, limit given: Int?, _ call: Call, _ respond: @escaping Respond) {
        guard !query.isEmpty, query.utf8.count <= RowSearch.maxQueryBytes else {
            return respond(Self.error(400, ProtocolError(.invalidValue, "q must be 1 to \(RowSearch.maxQueryBytes) bytes", field: "q")))
        }
        let limit = given ?? RowSearch.defaultLimit
        guard (1...RowSearch.maxLimit).contains(limit) else {
            return respond(Self.error(400, ProtocolError(.invalidValue, "limit must be 1 to \(RowSearch.maxLimit)", field: "limit")))
        }
        withTable(call, respond) { [hub] table in
            // A large table is searched off the service thread (see RowFinder).
            let started = hub.finder.find(query, in: table, limit: limit, for: "http " + call.request.peer) { matches, truncated in
                respond(.json(200, ServerMessage.found(id: nil, query: query, matches: matches, truncated: truncated)))
            }
            if !started {
                var refusal = Self.error(RowFinder.busy)
                refusal.headers["Retry-After"] = "1"
                respond(refusal)
            }
        }
    }

    /// `GET .../events?before=SEQ&limit=N`: the session's history, newest first (see
    /// ``EventHistory``): `{"events":[...],"next":SEQ|null}`.
    private func events(_ call: Call, _ respond: @escaping Respond) {
        // Each parameter that is given must be a whole number: one that is not is refused, never
        // read as absent.
        var numbers: [String: Int64] = [:]
        for field in ["before", "limit"] {
            guard let text = call.request.query[field] else { continue }
            guard let number = Int64(text) else {
                return respond(Self.error(400, ProtocolError(.invalidValue, "\(field) must be a whole number", field: field)))
            }
            numbers[field] = number
        }
        let checked: (before: UInt64?, limit: Int)
        do {
            checked = try EventHistory.checked(before: numbers["before"], limit: numbers["limit"])
        } catch {
            return respond(Self.error(400, error))
        }
        hub.history(ofSession: call.parameters["name"] ?? "", before: checked.before, limit: checked.limit) { result in
            switch result {
            case .success(let page): respond(.json(200, EventHistory.page(events: page.events, more: page.more)))
            case .failure(let error): respond(Self.error(error))
            }
        }
    }

    /// `GET /api/v1/openapi.json`: the API's description (see ``OpenAPIDocument``), made once.
    private func openAPI(_ call: Call, _ respond: @escaping Respond) {
        if openAPIBody == nil { openAPIBody = OpenAPIDocument.encoded() }
        respond(.json(200, openAPIBody ?? []))
    }

    // MARK: - Helpers

    /// Applies `change` in the session's order as the caller; answers `{"seq":N}` after the commit
    /// (with `"rows":count` for an import).
    func change(_ change: Change, _ call: Call, _ respond: @escaping Respond, count: Int? = nil) {
        let key = call.request.header("idempotency-key")
        if let key, key.isEmpty || key.utf8.count > hub.messageLimits.maxNameBytes {
            return respond(Self.error(400, ProtocolError(.invalidValue, "Idempotency-Key must be 1 to 64 bytes", field: "Idempotency-Key")))
        }
        // The key is the caller's own (`ChangeIdScope`): nobody else's change can take it or be
        // answered for it, a member's over a WebSocket nor another user's.
        var scoped: String?
        if let key {
            do {
                scoped = try ChangeIdScope.key(key, scope: ChangeIdScope.of(caller: call.grant?.user))
            } catch {
                // Its length was checked above: what is left is a byte outside the rule.
                return respond(
                    Self.error(
                        400, ProtocolError(.invalidValue, "Idempotency-Key may only hold letters, digits and _ - . :", field: "Idempotency-Key")))
            }
        }
        let session = call.parameters["name"] ?? ""
        hub.submitAPIChange(
            change, id: scoped, author: call.author, session: session,
            answer: { result, created in
                switch result {
                case .success(let seq):
                    if let count {
                        respond(.json(200, Self.object(["seq": .integer(Int64(seq)), "rows": .integer(Int64(count))])))
                    } else if let key = created ?? change.createdKey {
                        // What was made, so the caller can address it next without reading the
                        // table back: the key it named, or the one the table chose. (A retry
                        // answered from the change-id window long after has no event at hand:
                        // then only a key the caller named is known.)
                        respond(.json(200, Self.object(["seq": .integer(Int64(seq)), "key": .string(key)])))
                    } else {
                        respond(.json(200, Self.object(["seq": .integer(Int64(seq))])))
                    }
                case .failure(let error): respond(Self.error(error))
                }
            })
    }

    /// Runs `body` with the session, or answers 404.
    func withSession(_ call: Call, _ respond: @escaping Respond, _ body: @escaping (TableSession) -> Void) {
        hub.withSession(call.parameters["name"] ?? "", create: false) { result in
            switch result {
            case .success(let session): body(session)
            case .failure(let error): respond(Self.error(error))
            }
        }
    }

    /// Runs `body` with the session's committed table, or answers 404.
    func withTable(_ call: Call, _ respond: @escaping Respond, _ body: @escaping (Table) -> Void) {
        hub.withSession(call.parameters["name"] ?? "", create: false) { result in
            switch result {
            case .success(let session): body(session.core.committed)
            case .failure(let error): respond(Self.error(error))
            }
        }
    }

    /// The request's media type, lowercased, without parameters (`text/csv; charset=utf-8` → `text/csv`).
    func mediaType(_ request: HTTPRequest) -> String {
        (request.header("content-type") ?? "").split(separator: ";").first.map { String($0).trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
    }

    func unsupportedMediaType(_ accepted: [String]) -> HTTPResponse {
        HTTPRouter.error(415, "unsupported_media_type", "send the body as \(accepted.joined(separator: " or "))")
    }

    /// `{"name":...,"n":1}` from string and integer members (what the API answers with).
    private static func object(_ members: KeyValuePairs<String, JSONValue>) -> [UInt8] {
        var out = JSONWriter(capacity: 64)
        out.byte(UInt8(ascii: "{"))
        for (index, member) in members.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            out.string(member.key)
            out.byte(UInt8(ascii: ":"))
            switch member.value {
            case .string(let text): out.string(text)
            case .integer(let number): out.integer(number)
            default: out.raw("null")
            }
        }
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// An error reply for a protocol error, its HTTP status chosen by its code.
    static func error(_ error: ProtocolError) -> HTTPResponse { Self.error(status(of: error.code), error) }

    static func error(_ status: Int, _ error: ProtocolError) -> HTTPResponse {
        HTTPRouter.error(status, error.code.rawValue, error.message, field: error.field)
    }

    /// The HTTP status for each protocol error code.
    static func status(of code: ProtocolError.Code) -> Int {
        switch code {
        case .unknownSection, .unknownRow, .sessionNotFound: return 404
        case .ambiguousTitle, .duplicateKey, .idReused, .limitReached: return 409
        case .unauthorized, .tokenExpired: return 401
        case .forbidden: return 403
        case .rateLimited: return 429
        case .storageUnavailable: return 503
        // Not a 503: a client that retries on 503 without an Idempotency-Key could apply it twice.
        case .outcomeUnknown: return 500
        default: return 400
        }
    }
}
