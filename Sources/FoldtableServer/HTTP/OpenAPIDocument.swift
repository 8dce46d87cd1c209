import FoldtableCore

/// The OpenAPI 3.1 description of every HTTP endpoint, served at `GET /api/v1/openapi.json`
/// so that people can read the API in a viewer and generate clients for it.
///
/// Each operation is written once here, by method and path. The document is made from this list
/// and nothing else; a unit test compares the list with the routes the server really installs
/// (the session API's table and the router's own paths, with each route's least role), so an
/// endpoint cannot be added, removed or given another role without the document following.
enum OpenAPIDocument {
    /// Who may call an operation: anyone (health, metrics, this document), or a token of at
    /// least this role when tokens are configured.
    enum Access: Equatable {
        case anyone
        case role(Role)
    }

    /// A query or path parameter.
    struct Parameter {
        var name: String
        var location: String
        var description: String
        var schema: JSONValue
        var required: Bool

        static func path(_ name: String, _ description: String, _ schema: JSONValue = Schema.string) -> Parameter {
            Parameter(name: name, location: "path", description: description, schema: schema, required: true)
        }

        static func query(_ name: String, _ description: String, _ schema: JSONValue = Schema.string) -> Parameter {
            Parameter(name: name, location: "query", description: description, schema: schema, required: false)
        }
    }

    /// One answer of an operation: status, what it means, and its body by media type.
    struct Response {
        var status: Int
        var description: String
        var content: [(String, JSONValue)]
        /// Headers the answer carries, by name (their OpenAPI header objects).
        var headers: [(String, JSONValue)]

        init(_ status: Int, _ description: String, _ content: [(String, JSONValue)] = [], headers: [(String, JSONValue)] = []) {
            self.status = status
            self.description = description
            self.content = content
            self.headers = headers
        }
    }

    /// One method on one path.
    struct Operation {
        var method: String
        var path: String
        var id: String
        var tag: String
        var summary: String
        var description: String
        var access: Access
        var parameters: [Parameter] = []
        var body: (required: Bool, content: [(String, JSONValue)])? = nil
        var responses: [Response]
        /// Whether `Idempotency-Key` makes a retry safe (every call that applies a change).
        var idempotent = false
    }

    /// Schemas the operations share, by name (`#/components/schemas/NAME`).
    enum Schema {
        static let string: JSONValue = .object([("type", .string("string"))])
        static let integer: JSONValue = .object([("type", .string("integer"))])
        static let boolean: JSONValue = .object([("type", .string("boolean"))])
        static let anyObject: JSONValue = .object([("type", .string("object"))])
        static let csv: JSONValue = .object([
            ("type", .string("string")), ("description", .string("CSV: label,value,detail (and optionally key, section, section_key)")),
        ])
        static func ref(_ name: String) -> JSONValue { .object([("$ref", .string("#/components/schemas/\(name)"))]) }
        static func enumeration(_ values: [String]) -> JSONValue {
            .object([("type", .string("string")), ("enum", .array(values.map(JSONValue.string)))])
        }
        static func object(_ properties: [(String, JSONValue)], required: [String] = []) -> JSONValue {
            var members: [(String, JSONValue)] = [("type", .string("object")), ("properties", .object(properties))]
            if !required.isEmpty { members.append(("required", .array(required.map(JSONValue.string)))) }
            return .object(members)
        }
        static func array(_ items: JSONValue) -> JSONValue { .object([("type", .string("array")), ("items", items)]) }
        static func nullable(_ type: String) -> JSONValue { .object([("type", .array([.string(type), .string("null")]))]) }
        static func integer(_ range: ClosedRange<Int64>) -> JSONValue {
            .object([("type", .string("integer")), ("minimum", .integer(range.lowerBound)), ("maximum", .integer(range.upperBound))])
        }
        /// A session's name, as ``JoinRequest/isValidSessionName(_:)`` takes it.
        static let sessionName: JSONValue = .object([("type", .string("string")), ("pattern", .string("^[A-Za-z0-9_-]{1,64}$"))])
        /// A search text: 1 to 256 characters (the server counts bytes of UTF-8: the schema
        /// cannot say that, so a long text of wide characters may still be refused).
        static let searchText: JSONValue = .object([
            ("type", .string("string")), ("minLength", .integer(1)), ("maxLength", .integer(Int64(RowSearch.maxQueryBytes))),
        ])
    }

    private static let json = "application/json"
    private static let textCSV = "text/csv"
    // Examples name the demo session `foldtabled` starts with, so a viewer's "try it" (and a
    // fuzzer's first cases) reach a real table.
    private static let name = Parameter.path(
        "name", "The session's name: 1 to 64 letters, digits, _ or -.",
        .object([("type", .string("string")), ("pattern", .string("^[A-Za-z0-9_-]{1,64}$")), ("examples", .array([.string("demo")]))]))
    private static let section = Parameter.path(
        "section", "The section's key (or its title with `by=title`).",
        .object([("type", .string("string")), ("examples", .array([.string("mac")]))]))
    private static let byTitle = Parameter.query(
        "by", "`title` to name the section by its title instead of its key (the default).", Schema.enumeration(SessionAPI.choice("by")))
    private static let format = Parameter.query(
        "format", "`csv` for CSV instead of JSON (as `Accept: text/csv`).", Schema.enumeration(SessionAPI.choice("format")))
    private static let seq = Response(200, "Applied and committed: the change's seq.", [(json, Schema.ref("Applied"))])
    private static let error: [(String, JSONValue)] = [(json, Schema.ref("Error"))]
    private static let retryAfter: [(String, JSONValue)] = [
        ("Retry-After", .object([("description", .string("Seconds to wait before retrying.")), ("schema", Schema.integer)]))
    ]
    /// What every operation may be answered: the transport's refusals (too many requests at
    /// once from one address; a server starting or shutting down) and, under `/api/v1`, the
    /// API's rate. Added to each by ``describe(_:)``.
    private static let everywhere = [
        Response(429, "Too many requests from this address: retry after `Retry-After` seconds.", error, headers: retryAfter),
        Response(503, "The server cannot answer now (starting, shutting down, or its store cannot read or write): retry later.", error),
    ]
    /// What every call that names a role may also be answered.
    private static let refusals = [
        Response(400, "The request is not valid: see `error.code` and `error.field`.", error),
        Response(
            401, "Tokens are configured and the call has no valid `Authorization: Bearer` token.", error,
            headers: [("WWW-Authenticate", .object([("schema", Schema.string)]))]),
        Response(403, "A foreign `Origin`, a token that does not open the session, or a role too low for the call.", error),
    ]
    /// What every call that applies a change may also be answered: its id used for another
    /// change, and (with `--redis`) an append whose outcome is not known.
    private static let changeRefusals = [
        Response(409, "Refused: the `Idempotency-Key` (or `id`) was used for another change, or the table refused it.", error),
        Response(500, "`outcome_unknown`: the change may or may not have been applied; retry with the same `Idempotency-Key`.", error),
    ]
    private static let notFound = Response(404, "No such session (or section, row).", error)
    private static let conflict = Response(
        409, "Refused by the table: a duplicate key, an ambiguous title, a limit, an id used for another change.", error)
    private static let webhooksUnavailable = Response(
        501, "`webhooks_unavailable`: this node shares its sessions through `--redis`, and no node alone delivers them.", error)
    private static let unavailable = Response(503, "The store cannot take changes now: retry later.", error)
    /// What any call with a body may also be answered (added to each by ``describe(_:)``).
    private static let bodyRefusals = [
        Response(408, "The body did not arrive in time.", error),
        Response(413, "The body is larger than `--max-http-body-bytes`.", error),
        Response(415, "The body is not of a media type the call takes.", error),
    ]

    /// Every operation the server answers, in the order the document lists them.
    static let operations: [Operation] = [
        Operation(
            method: "GET", path: "/healthz", id: "health", tag: "operations", summary: "Liveness",
            description: "200 while the process serves at all.", access: .anyone,
            responses: [Response(200, "The process serves.", [(json, Schema.object([("status", Schema.enumeration(["ok"]))]))])]),
        Operation(
            method: "GET", path: "/readyz", id: "ready", tag: "operations", summary: "Readiness",
            description: "200 while the server can take changes; 503 with a reason while its store (or Redis) cannot.", access: .anyone,
            responses: [
                Response(200, "Ready.", [(json, Schema.object([("status", Schema.enumeration(["ready"]))]))]),
                Response(503, "Not ready.", [(json, Schema.object([("status", Schema.enumeration(["not_ready"])), ("reason", Schema.string)]))]),
            ]),
        Operation(
            method: "GET", path: "/metrics", id: "metrics", tag: "operations", summary: "Prometheus metrics",
            description: "Counters and gauges in the Prometheus text format 0.0.4.", access: .anyone,
            responses: [Response(200, "The metrics.", [("text/plain", Schema.string)])]),
        Operation(
            method: "GET", path: "/api/v1/openapi.json", id: "openapi", tag: "operations", summary: "This document",
            description: "The OpenAPI 3.1 description of every endpoint.", access: .anyone,
            responses: [Response(200, "The document.", [(json, Schema.anyObject)])]),
        Operation(
            method: "GET", path: "/api/v1/sessions", id: "listSessions", tag: "sessions", summary: "List sessions",
            description: "The sessions the caller's token opens, with their member and section counts (sections null for one not held in memory).",
            access: .role(.viewer), responses: [Response(200, "The sessions.", [(json, Schema.ref("SessionList"))])]),
        Operation(
            method: "POST", path: "/api/v1/sessions", id: "createSession", tag: "sessions", summary: "Create a session",
            description: "A new session, empty (no body) or from a table: the JSON document of an export, or CSV.", access: .role(.owner),
            parameters: [
                Parameter(name: "name", location: "query", description: "The new session's name.", schema: Schema.sessionName, required: true)
            ],
            body: (false, [(json, Schema.ref("TableDocument")), (textCSV, Schema.csv)]),
            responses: [
                Response(
                    201, "Created.", [(json, Schema.object([("name", Schema.string), ("sections", Schema.integer)]))],
                    headers: [("Location", .object([("description", .string("The new session's path.")), ("schema", Schema.string)]))]),
                conflict,
            ]),
        Operation(
            method: "GET", path: "/api/v1/sessions/{name}", id: "exportTable", tag: "tables", summary: "Export the table",
            description: "The whole table as committed: the JSON document (which imports back with `createSession`), or CSV.",
            access: .role(.viewer), parameters: [name, format],
            responses: [Response(200, "The table.", [(json, Schema.ref("TableDocument")), (textCSV, Schema.csv)]), notFound]),
        Operation(
            method: "DELETE", path: "/api/v1/sessions/{name}", id: "deleteSession", tag: "sessions", summary: "Delete a session",
            description: "Removes the session and its history; its members are closed with 4501.", access: .role(.owner),
            parameters: [name], responses: [Response(204, "Deleted."), notFound]),
        Operation(
            method: "GET", path: "/api/v1/sessions/{name}/collapsed", id: "collapsedMap", tag: "sections", summary: "Collapsed states",
            description: "Each section's collapsed state, by key (or by title with `by=title`; refused when two sections share a title).",
            access: .role(.viewer), parameters: [name, byTitle],
            responses: [
                Response(
                    200, "Key (or title) to collapsed.", [(json, .object([("type", .string("object")), ("additionalProperties", Schema.boolean)]))]),
                notFound, conflict,
            ]),
        Operation(
            method: "PUT", path: "/api/v1/sessions/{name}/sections/{section}/collapsed", id: "setCollapsed", tag: "sections",
            summary: "Collapse or expand one section", description: "Body `true`, `false` or `{\"collapsed\": BOOL}`.",
            access: .role(.editor), parameters: [name, section, byTitle],
            body: (
                true,
                [(json, .object([("oneOf", .array([Schema.boolean, Schema.object([("collapsed", Schema.boolean)], required: ["collapsed"])]))]))]
            ),
            responses: [seq, notFound, conflict, unavailable], idempotent: true),
        Operation(
            method: "GET", path: "/api/v1/sessions/{name}/sections/{section}/rows", id: "exportRows", tag: "rows",
            summary: "Export one section's rows", description: "As JSON, or CSV that imports back into a section unchanged.",
            access: .role(.viewer), parameters: [name, section, byTitle, format],
            responses: [Response(200, "The rows.", [(json, Schema.ref("SectionRows")), (textCSV, Schema.csv)]), notFound]),
        Operation(
            method: "POST", path: "/api/v1/sessions/{name}/sections/{section}/rows", id: "importRows", tag: "rows",
            summary: "Import rows into one section",
            description: "Replaces the section's rows (or adds after them with `mode=append`), as one change in the session's order.",
            access: .role(.editor),
            parameters: [
                name, section, byTitle,
                Parameter.query("mode", "`replace` (default) or `append`.", Schema.enumeration(SessionAPI.choice("mode"))),
            ],
            body: (
                true,
                [
                    (textCSV, Schema.csv),
                    (
                        json,
                        .object([("oneOf", .array([Schema.object([("rows", Schema.array(Schema.ref("Row")))]), Schema.array(Schema.ref("Row"))]))])
                    ),
                ]
            ),
            responses: [
                Response(200, "Imported and committed.", [(json, Schema.object([("seq", Schema.integer), ("rows", Schema.integer)]))]),
                notFound, conflict, unavailable,
            ], idempotent: true),
        Operation(
            method: "POST", path: "/api/v1/sessions/{name}/expand-all", id: "expandAll", tag: "sections", summary: "Expand every section",
            description: "One change: every section expanded.", access: .role(.editor), parameters: [name],
            responses: [seq, notFound, unavailable], idempotent: true),
        Operation(
            method: "POST", path: "/api/v1/sessions/{name}/collapse-all", id: "collapseAll", tag: "sections", summary: "Collapse every section",
            description: "One change: every section collapsed.", access: .role(.editor), parameters: [name],
            responses: [seq, notFound, unavailable], idempotent: true),
        Operation(
            method: "POST", path: "/api/v1/sessions/{name}/changes", id: "postChange", tag: "changes", summary: "Apply any change",
            description: """
                A change of the WebSocket protocol, as a member would send it (its `type` and fields; `setOptions` needs the \
                owner role). An addRow or addSection is answered with the created key.
                """,
            access: .role(.editor), parameters: [name], body: (true, [(json, Schema.ref("Change"))]),
            responses: [seq, notFound, conflict, unavailable], idempotent: true),
        Operation(
            method: "GET", path: "/api/v1/sessions/{name}/find", id: "find", tag: "rows", summary: "Find rows",
            description: "Rows whose label, value or detail contain the text, from every section.", access: .role(.viewer),
            parameters: [
                name,
                Parameter(
                    name: "q", location: "query", description: "The text (1 to \(RowSearch.maxQueryBytes) bytes of UTF-8).",
                    schema: Schema.searchText,
                    required: true),
                Parameter.query(
                    "limit", "At most this many matches (default \(RowSearch.defaultLimit)).", Schema.integer(1...Int64(RowSearch.maxLimit))),
            ],
            responses: [Response(200, "The matches.", [(json, Schema.ref("Found"))]), notFound]),
        Operation(
            method: "POST", path: "/api/v1/sessions/{name}/find", id: "findByBody", tag: "rows", summary: "Find rows (text in a body)",
            description: "The same search, for text a URL cannot carry (a line break).", access: .role(.viewer), parameters: [name],
            body: (
                true, [(json, Schema.object([("q", Schema.searchText), ("limit", Schema.integer(1...Int64(RowSearch.maxLimit)))], required: ["q"]))]
            ),
            responses: [Response(200, "The matches.", [(json, Schema.ref("Found"))]), notFound]),
        Operation(
            method: "GET", path: "/api/v1/sessions/{name}/events", id: "events", tag: "changes", summary: "History",
            description: "The session's committed changes, newest first, a page at a time (`next` is the `before` of the next page).",
            access: .role(.viewer),
            parameters: [
                name, Parameter.query("before", "Only events with a seq below this.", Schema.integer(1...Int64.max)),
                Parameter.query(
                    "limit", "At most this many events (default \(EventHistory.defaultLimit)).", Schema.integer(1...Int64(EventHistory.maxLimit))),
            ],
            responses: [Response(200, "A page of events.", [(json, Schema.ref("EventPage"))]), notFound]),
        Operation(
            method: "POST", path: "/api/v1/sessions/{name}/invites", id: "mintInvite", tag: "access", summary: "Mint an invite",
            description: """
                A token for this session alone with the role asked (owners may invite owners), and the page address that \
                opens it (`/s/NAME#token=...`: a fragment stays out of server and proxy logs). The token is in this answer only. \
                Servers with tokens only (open mode: 400).
                """,
            access: .role(.owner), parameters: [name],
            body: (
                false,
                [
                    (
                        json,
                        Schema.object([
                            ("role", Schema.enumeration(Role.allCases.map(\.rawValue))), ("expiresIn", Schema.integer(InviteDesk.expiresInRange)),
                            ("label", .object([("type", .string("string")), ("maxLength", .integer(Int64(AccessGrant.maxLabelBytes)))])),
                        ])
                    )
                ]
            ),
            responses: [Response(201, "Minted (not cached: `Cache-Control: no-store`).", [(json, Schema.ref("MintedInvite"))]), notFound, conflict]),
        Operation(
            method: "GET", path: "/api/v1/sessions/{name}/invites", id: "listInvites", tag: "access", summary: "Live invites",
            description: "The invites minted for this session that have neither expired nor been withdrawn, oldest first; never a token.",
            access: .role(.owner), parameters: [name],
            responses: [Response(200, "The invites.", [(json, Schema.object([("invites", Schema.array(Schema.ref("Invite")))]))]), notFound]),
        Operation(
            method: "DELETE", path: "/api/v1/sessions/{name}/invites/{id}", id: "withdrawInvite", tag: "access", summary: "Withdraw a token",
            description: """
                The token with this id is refused from now on, on every node, and members connected with it are closed with \
                4503. Any id (such as one `foldtabled token --jti` printed) when the caller is an owner of every session.
                """,
            access: .role(.owner), parameters: [name, Parameter.path("id", "The invite's (the token's `jti`) id.")],
            responses: [Response(204, "Withdrawn."), Response(404, "No live invite of this id for the session.", error)]),
        Operation(
            method: "GET", path: "/api/v1/sessions/{name}/members", id: "listMembers", tag: "access", summary: "Members",
            description: """
                Who is connected: this node's members with their roles and token ids, then those other nodes list in \
                presence (by name and node; `role` null).
                """,
            access: .role(.viewer), parameters: [name],
            responses: [Response(200, "The members.", [(json, Schema.object([("members", Schema.array(Schema.ref("Member")))]))])]),
        Operation(
            method: "DELETE", path: "/api/v1/sessions/{name}/members/{client}", id: "removeMember", tag: "access",
            summary: "Disconnect a member",
            description: "Closes that member's connection with 4504 (it may join again unless its token is withdrawn too).",
            access: .role(.owner), parameters: [name, Parameter.path("client", "The member's client id (as `members` lists it).")],
            responses: [Response(204, "Disconnected."), Response(404, "No such member connected to this node.", error)]),
        Operation(
            method: "PUT", path: "/api/v1/sessions/{name}/webhook", id: "putWebhook", tag: "webhooks", summary: "Set the webhook",
            description: """
                Every change committed from now on is POSTed to `url`, in seq order, signed as Standard Webhooks do \
                (`webhook-id`, `webhook-timestamp`, `webhook-signature`). Without `secret` one is made and answered here, once. \
                Only addresses `--webhook-allow` permits (public ones by default). Nodes sharing `--redis`: 501.
                """,
            access: .role(.owner), parameters: [name],
            body: (
                true,
                [
                    (
                        json,
                        Schema.object(
                            [
                                ("url", .object([("type", .string("string")), ("format", .string("uri"))])),
                                ("secret", .object([("type", .string("string")), ("pattern", .string("^whsec_"))])),
                            ], required: ["url"])
                    )
                ]
            ),
            responses: [
                Response(200, "Set.", [(json, Schema.ref("WebhookSet"))]), notFound,
                Response(409, "`limit_reached`: this node has `--webhook-max-sessions` webhooks already.", error), webhooksUnavailable,
            ]),
        Operation(
            method: "GET", path: "/api/v1/sessions/{name}/webhook", id: "getWebhook", tag: "webhooks", summary: "The webhook's state",
            description: "Its URL (never the secret), whether it delivers or is paused, the last seq delivered, the backlog and failures.",
            access: .role(.owner), parameters: [name],
            responses: [
                Response(200, "The webhook.", [(json, Schema.ref("Webhook"))]), Response(404, "No webhook is set.", error), webhooksUnavailable,
            ]),
        Operation(
            method: "POST", path: "/api/v1/sessions/{name}/webhook/resume", id: "resumeWebhook", tag: "webhooks", summary: "Resume a paused webhook",
            description: "Deliveries go on from the session's next change; what the receiver missed stays readable with `events`.",
            access: .role(.owner), parameters: [name],
            responses: [
                Response(200, "The webhook.", [(json, Schema.ref("Webhook"))]), Response(404, "No webhook is set.", error),
                Response(409, "`webhook_not_paused`: the webhook delivers; there is nothing to resume.", error), webhooksUnavailable,
            ]),
        Operation(
            method: "DELETE", path: "/api/v1/sessions/{name}/webhook", id: "deleteWebhook", tag: "webhooks", summary: "Remove the webhook",
            description: "No more deliveries.", access: .role(.owner), parameters: [name],
            responses: [Response(204, "Removed."), Response(404, "No webhook is set.", error), webhooksUnavailable]),
    ]

    /// Shared schemas.
    private static let components: [(String, JSONValue)] = [
        (
            "Error",
            Schema.object(
                [
                    (
                        "error",
                        Schema.object(
                            [
                                (
                                    "code",
                                    .object([
                                        ("type", .string("string")),
                                        ("examples", .array(ProtocolError.Code.allCases.prefix(6).map { .string($0.rawValue) })),
                                    ])
                                ),
                                ("message", Schema.string), ("field", Schema.string),
                            ], required: ["code", "message"])
                    )
                ], required: ["error"])
        ),
        ("Applied", Schema.object([("seq", Schema.integer), ("key", Schema.string)], required: ["seq"])),
        (
            "SessionList",
            Schema.object([
                (
                    "sessions",
                    Schema.array(Schema.object([("name", Schema.string), ("members", Schema.integer), ("sections", Schema.nullable("integer"))]))
                )
            ])
        ),
        (
            "Row",
            Schema.object(
                [("key", Schema.string), ("label", Schema.string), ("value", Schema.string), ("detail", Schema.string)], required: ["label"])
        ),
        ("SectionRows", Schema.object([("section", Schema.string), ("title", Schema.string), ("rows", Schema.array(Schema.ref("Row")))])),
        (
            "TableDocument",
            .object([
                ("type", .string("object")),
                ("description", .string("A whole table: options and sections with their rows, as `exportTable` gives it.")),
                ("properties", .object([("options", Schema.anyObject), ("sections", Schema.array(Schema.anyObject))])),
            ])
        ),
        (
            "Found",
            Schema.object([
                ("type", Schema.string), ("query", Schema.string), ("matches", Schema.array(Schema.anyObject)), ("truncated", Schema.boolean),
            ])
        ),
        ("EventPage", Schema.object([("events", Schema.array(Schema.anyObject)), ("next", Schema.nullable("integer"))])),
        (
            "Webhook",
            Schema.object([
                ("url", Schema.string), ("state", Schema.string), ("delivered", Schema.integer), ("backlog", Schema.integer),
                ("failures", Schema.integer), ("lagMs", Schema.integer),
            ])
        ),
        (
            "WebhookSet",
            Schema.object(
                [
                    ("url", Schema.string), ("state", Schema.string), ("from", Schema.integer),
                    ("secret", .object([("type", .string("string")), ("description", .string("Only when the server made it: keep it."))])),
                ], required: ["url", "state", "from"])
        ),
        (
            "Invite",
            Schema.object([
                ("id", Schema.string), ("role", Schema.enumeration(Role.allCases.map(\.rawValue))), ("label", Schema.string),
                ("created", Schema.integer), ("expires", Schema.integer), ("createdBy", Schema.string),
            ])
        ),
        (
            "MintedInvite",
            Schema.object([
                ("id", Schema.string), ("url", Schema.string), ("path", Schema.string), ("token", Schema.string),
                ("role", Schema.enumeration(Role.allCases.map(\.rawValue))), ("label", Schema.string), ("created", Schema.integer),
                ("expires", Schema.integer), ("createdBy", Schema.string),
            ])
        ),
        (
            "Member",
            Schema.object([
                ("client", Schema.string), ("name", Schema.string), ("role", .object([("type", .array([.string("string"), .string("null")]))])),
                ("node", Schema.string), ("token", Schema.nullable("string")), ("label", Schema.nullable("string")),
            ])
        ),
    ]

    /// The document as JSON.
    static func encoded() -> [UInt8] {
        var paths: [(String, JSONValue)] = []
        for operation in operations {
            let entry = (operation.method.lowercased(), describe(operation))
            if let index = paths.firstIndex(where: { $0.0 == operation.path }), case .object(var methods) = paths[index].1 {
                methods.append(entry)
                paths[index].1 = .object(methods)
            } else {
                paths.append((operation.path, .object([entry])))
            }
        }
        let document: JSONValue = .object([
            ("openapi", .string("3.1.0")),
            (
                "info",
                .object([
                    ("title", .string("Foldtable")),
                    ("version", .string(FoldtableVersion.current)),
                    (
                        "description",
                        .string(
                            """
                            The HTTP API of a Foldtable server: shared collapsible tables. Every change goes through its session's one \
                            order like a member's over the WebSocket, is broadcast to the members, and is answered after it is committed. \
                            With tokens configured, calls need `Authorization: Bearer TOKEN` with the role each operation names \
                            (`x-foldtable-role`); in open mode they need none. Errors are `{"error":{"code","message","field"}}`.
                            """)
                    ),
                ])
            ),
            ("servers", .array([.object([("url", .string("/"))])])),
            ("paths", .object(paths)),
            (
                "components",
                .object([
                    ("schemas", .object(components + changeComponents)),
                    (
                        "securitySchemes",
                        .object([("bearer", .object([("type", .string("http")), ("scheme", .string("bearer")), ("bearerFormat", .string("JWT"))]))])
                    ),
                ])
            ),
        ])
        var out = JSONWriter(capacity: 32_768)
        out.value(document)
        return out.bytes
    }

    private static func describe(_ operation: Operation) -> JSONValue {
        var members: [(String, JSONValue)] = [
            ("operationId", .string(operation.id)), ("tags", .array([.string(operation.tag)])), ("summary", .string(operation.summary)),
            ("description", .string(operation.description)),
        ]
        var parameters = operation.parameters.map { parameter -> JSONValue in
            .object([
                ("name", .string(parameter.name)), ("in", .string(parameter.location)), ("description", .string(parameter.description)),
                ("required", .bool(parameter.required)), ("schema", parameter.schema),
            ])
        }
        if operation.idempotent {
            parameters.append(
                .object([
                    ("name", .string("Idempotency-Key")), ("in", .string("header")),
                    ("description", .string("1 to 64 bytes: a retry with the same key is answered with the first seq, never applied twice.")),
                    ("required", .bool(false)), ("schema", Schema.string),
                ]))
        }
        if !parameters.isEmpty { members.append(("parameters", .array(parameters))) }
        if let body = operation.body {
            members.append(
                (
                    "requestBody",
                    .object([("required", .bool(body.required)), ("content", .object(body.content.map { ($0.0, .object([("schema", $0.1)])) }))])
                ))
        }
        var responses: [(String, JSONValue)] = []
        var answers = operation.responses
        if operation.body != nil { answers += bodyRefusals }
        if case .role = operation.access { answers += refusals }
        if operation.idempotent { answers += changeRefusals }
        answers += everywhere
        for response in answers where !responses.contains(where: { $0.0 == String(response.status) }) {
            var answer: [(String, JSONValue)] = [("description", .string(response.description))]
            if !response.headers.isEmpty { answer.append(("headers", .object(response.headers))) }
            if !response.content.isEmpty { answer.append(("content", .object(response.content.map { ($0.0, .object([("schema", $0.1)])) }))) }
            responses.append((String(response.status), .object(answer)))
        }
        members.append(("responses", .object(responses)))
        switch operation.access {
        case .anyone:
            members.append(("security", .array([])))
        case .role(let role):
            // Either a bearer token (servers with tokens) or nothing (open mode).
            members.append(("security", .array([.object([("bearer", .array([]))]), .object([])])))
            members.append(("x-foldtable-role", .string(role.rawValue)))
        }
        return .object(members)
    }
}
