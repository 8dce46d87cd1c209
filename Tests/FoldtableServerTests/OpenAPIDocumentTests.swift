import FoldtableCore
import Testing

@testable import FoldtableServer

/// The API's OpenAPI document: held to the routes the server really installs, and well formed
/// enough for viewers and client generators (every reference resolves, every path parameter is
/// declared).
@Suite struct OpenAPIDocumentTests {
    func hub() -> (Hub, TestTransport) {
        let transport = TestTransport()
        let store = MemoryStore(keepEvents: 300, queue: transport.serviceQueue)
        let hub = Hub(
            config: ServerConfig(), transport: transport, ordering: .local(store: store, eventLog: store, names: []), log: Log(level: .error))
        transport.delegate = hub
        return (hub, transport)
    }

    func document() throws -> JSONValue {
        try JSONParser.parse(OpenAPIDocument.encoded(), limits: .init(maxDepth: 64, maxStringBytes: 65_536))
    }

    @Test func listsExactlyTheRoutesTheServerInstallsWithTheirRoles() throws {
        let (hub, _) = hub()
        var installed: [String: OpenAPIDocument.Access] = [:]
        for route in hub.api?.routeTable ?? [] { installed["\(route.method) \(route.path)"] = route.role.map { .role($0) } ?? .anyone }
        for route in hub.http.routeTable { installed["\(route.method) \(route.path)"] = .anyone }
        var documented: [String: OpenAPIDocument.Access] = [:]
        for operation in OpenAPIDocument.operations {
            #expect(
                documented.updateValue(operation.access, forKey: "\(operation.method) \(operation.path)") == nil, "listed twice: \(operation.path)")
        }
        #expect(installed.count > 10)
        #expect(Set(installed.keys).subtracting(documented.keys).sorted() == [], "routes the document leaves out")
        #expect(Set(documented.keys).subtracting(installed.keys).sorted() == [], "documented routes the server does not have")
        for (route, access) in installed { #expect(documented[route] == access, "\(route): the document names another role") }
    }

    @Test func isAnOpenAPI31DocumentWhoseReferencesAndPathParametersResolve() throws {
        let document = try document()
        #expect(document["openapi"] == .string("3.1.0"))
        #expect(document["info"]?["version"] == .string(FoldtableVersion.current))
        guard case .object(let schemas)? = document["components"]?["schemas"], case .object(let paths)? = document["paths"] else {
            Issue.record("no schemas or paths")
            return
        }
        let names = Set(schemas.map(\.0))
        var references: [String] = []
        func collect(_ value: JSONValue) {
            switch value {
            case .object(let members):
                for (key, member) in members {
                    if key == "$ref", case .string(let target) = member { references.append(target) } else { collect(member) }
                }
            case .array(let items): items.forEach(collect)
            default: break
            }
        }
        collect(document)
        #expect(!references.isEmpty)
        for reference in references {
            #expect(
                reference.hasPrefix("#/components/schemas/") && names.contains(String(reference.dropFirst("#/components/schemas/".count))),
                "\(reference)")
        }
        var operationIds: Set<String> = []
        for (path, item) in paths {
            guard case .object(let methods) = item else { continue }
            let captured = Set(path.split(separator: "/").filter { $0.hasPrefix("{") }.map { String($0.dropFirst().dropLast()) })
            for (method, operation) in methods {
                #expect(["get", "put", "post", "delete", "patch"].contains(method))
                if case .string(let id)? = operation["operationId"] { #expect(operationIds.insert(id).inserted, "operationId \(id) twice") }
                var declared: Set<String> = []
                if case .array(let parameters)? = operation["parameters"] {
                    for parameter in parameters where parameter["in"] == .string("path") {
                        if case .string(let name)? = parameter["name"] { declared.insert(name) }
                        #expect(parameter["required"] == .bool(true))
                    }
                }
                #expect(declared == captured, "\(method) \(path)")
                guard case .object(let responses)? = operation["responses"] else {
                    Issue.record("\(method) \(path) has no responses")
                    continue
                }
                #expect(responses.contains { $0.0.hasPrefix("2") }, "\(method) \(path) has no success")
            }
        }
    }

    @Test func isServedWithoutATokenEvenWhenTokensAreConfigured() throws {
        let transport = TestTransport()
        let store = MemoryStore(keepEvents: 300, queue: transport.serviceQueue)
        let hub = Hub(
            config: ServerConfig(), transport: transport, ordering: .local(store: store, eventLog: store, names: []), log: Log(level: .error),
            verifier: RefuseEveryToken())
        transport.delegate = hub
        hub.httpRequest(HTTPRequest(id: 1, method: "GET", path: "/api/v1/openapi.json", headers: ["Host": "127.0.0.1"]))
        hub.httpRequest(HTTPRequest(id: 2, method: "GET", path: "/api/v1/sessions", headers: ["Host": "127.0.0.1"]))
        #expect(transport.responses[1]?.status == 200)
        #expect(transport.responses[1]?.headers["Content-Type"] == "application/json")
        #expect(
            try JSONParser.parse(transport.responses[1]?.body ?? [], limits: .init(maxDepth: 64, maxStringBytes: 65_536))["openapi"]
                == .string("3.1.0"))
        #expect(transport.responses[2]?.status == 401)
    }
}

/// A verifier that refuses every token: the server then needs one for every call that names a role.
private struct RefuseEveryToken: TokenVerifier {
    func verify(_ token: String, now: UInt64) -> Result<AccessGrant, TokenRefusal> { .failure(TokenRefusal(.badSignature, "no")) }
}

/// The document's change schemas against the decoder that reads `POST .../changes`.
@Suite struct OpenAPIChangeSchemaTests {
    /// A value of the schema's type (objects and arrays empty).
    func sample(_ schema: JSONValue) -> JSONValue {
        switch schema["type"] {
        case .string("boolean")?: return .bool(true)
        case .string("integer")?: return .integer(0)
        case .string("object")?: return .object([])
        case .string("array")?: return .array([])
        default: return .string("x")
        }
    }

    func decodes(_ members: [(String, JSONValue)]) -> Bool {
        var out = JSONWriter()
        out.value(.object(members))
        if case .success(.change) = ClientMessage.decode(out.bytes).0 { return true }
        return false
    }

    @Test func describesEveryChangeTypeTheProtocolKnowsOnce() {
        let types = OpenAPIDocument.changeTypes.map(\.type)
        #expect(Set(types) == Change.typeNames)
        #expect(Set(types).count == types.count)
    }

    @Test func aChangeWithEveryRequiredFieldDecodesAndWithoutAnyOneItIsRefused() {
        for change in OpenAPIDocument.changeTypes {
            var members: [(String, JSONValue)] = [("type", .string(change.type))]
            if change.namesSection { members.append(("section", .string("s"))) }
            for field in change.required {
                guard let schema = change.properties.first(where: { $0.0 == field })?.1 else {
                    Issue.record("\(change.type): \(field) is required but not described")
                    continue
                }
                members.append((field, sample(schema)))
            }
            #expect(decodes(members), "\(change.type) with its required fields")
            for field in change.required + (change.namesSection ? ["section"] : []) {
                #expect(!decodes(members.filter { $0.0 != field }), "\(change.type) without \(field)")
            }
            if change.namesSection {
                #expect(decodes(members.map { $0.0 == "section" ? ("title", $0.1) : $0 }), "\(change.type) naming its section by title")
                #expect(!decodes(members + [("title", .string("t"))]), "\(change.type) naming both a key and a title")
            }
        }
    }
}
