import FoldtableCore

// MARK: - Invites and members

extension SessionAPI {
    /// `POST .../invites` with `{"role":"viewer|editor|owner","expiresIn":SECONDS,"label":".."}`
    /// (every field optional: a viewer for 7 days): a token for this session alone, and the page
    /// address that opens it. The token is in the answer only; the server keeps its id.
    func mintInvite(_ call: Call, _ respond: @escaping Respond) {
        let role: Role
        let expiresIn: Int64
        let label: String
        do throws(ProtocolError) {
            let body = call.request.body
            if !body.isEmpty && mediaType(call.request) != "application/json" { return respond(unsupportedMediaType(["application/json"])) }
            let reader = try FieldReader(body.isEmpty ? .object([]) : try JSONParser.parse(body, limits: hub.messageLimits.json))
            let roleName = try reader.optionalString("role") ?? Role.viewer.rawValue
            guard let parsed = Role(rawValue: roleName) else {
                throw ProtocolError(.invalidValue, "role must be viewer, editor or owner", field: "role")
            }
            role = parsed
            expiresIn = try reader.optionalInteger("expiresIn") ?? InviteDesk.defaultExpiresIn
            guard InviteDesk.expiresInRange.contains(expiresIn) else {
                let range = InviteDesk.expiresInRange
                throw ProtocolError(.invalidValue, "expiresIn must be \(range.lowerBound) to \(range.upperBound) seconds", field: "expiresIn")
            }
            label = try reader.optionalString("label") ?? ""
            guard label.utf8.count <= AccessGrant.maxLabelBytes else {
                throw ProtocolError(.tooLong, "label must be at most \(AccessGrant.maxLabelBytes) bytes", field: "label")
            }
        } catch {
            return respond(Self.error(400, error))
        }
        let name = call.parameters["name"] ?? ""
        let creator = call.grant?.user ?? "api"
        let base = publicBase(call.request)
        withSession(call, respond) { [hub] _ in
            hub.mintInvite(session: name, role: role, expiresIn: expiresIn, label: label, by: creator, callerExpires: call.grant?.expires) { result in
                switch result {
                case .failure(let error): respond(Self.error(error))
                case .success(let (invite, token)):
                    // The page reads a token from the fragment, which no request carries: it stays
                    // out of server and proxy logs (see web/protocol.js).
                    let path = "/s/\(name)#token=\(token)"
                    var out = JSONWriter(capacity: 512 + token.utf8.count)
                    out.raw("{\"id\":")
                    out.string(invite.id)
                    out.nextKey("url")
                    out.string(base + path)
                    out.nextKey("path")
                    out.string(path)
                    out.nextKey("token")
                    out.string(token)
                    invite.writeFields(into: &out)
                    out.byte(UInt8(ascii: "}"))
                    respond(.json(201, out.bytes, headers: ["Cache-Control": "no-store"]))
                }
            }
        }
    }

    /// `GET .../invites`: `{"invites":[{"id","role","label","created","expires","createdBy"}]}`,
    /// the live ones minted through the API, oldest first; never a token.
    func listInvites(_ call: Call, _ respond: @escaping Respond) {
        hub.listInvites(session: call.parameters["name"] ?? "") { result in
            switch result {
            case .failure(let error): respond(Self.error(error))
            case .success(let invites):
                var out = JSONWriter(capacity: 64 + 160 * invites.count)
                out.raw("{\"invites\":[")
                for (index, invite) in invites.enumerated() {
                    if index > 0 { out.byte(UInt8(ascii: ",")) }
                    out.raw(invite.json)
                }
                out.raw("]}")
                respond(.json(200, out.bytes))
            }
        }
    }

    /// `DELETE .../invites/ID`: the token is refused from now on, on every node, and members
    /// connected with it are closed with 4503. 204, or 404 for an id the session never minted
    /// (unless the caller's token is an owner's of every session: then any id, such as one
    /// `foldtabled token --jti` printed).
    func withdrawInvite(_ call: Call, _ respond: @escaping Respond) {
        let id = call.parameters["id"] ?? ""
        guard AccessGrant.isValidId(id) else {
            return respond(Self.error(400, ProtocolError(.invalidValue, "an invite id is 1 to 64 letters, digits, _ or -", field: "id")))
        }
        let name = call.parameters["name"] ?? ""
        hub.withdrawToken(id: id, session: name, caller: call.grant) { result in
            switch result {
            case .failure(let error): respond(Self.error(error))
            case .success(true): respond(HTTPResponse(status: 204))
            case .success(false): respond(HTTPRouter.error(404, "not_found", "session \(name) has no live invite \(id)"))
            }
        }
    }

    /// `GET .../members`: `{"members":[{"client","name","role","node","token","label"}]}`: this
    /// node's members with their roles (token ids and labels for owners only), then those other
    /// nodes list in presence (names only: `role` null). Any member may read it: members see each
    /// other's names anyway.
    func listMembers(_ call: Call, _ respond: @escaping Respond) {
        let members = hub.members(of: call.parameters["name"] ?? "")
        let owner = call.grant?.role == .owner
        var out = JSONWriter(capacity: 32 + 96 * members.count)
        out.raw("{\"members\":[")
        for (index, member) in members.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            out.raw("{\"client\":")
            out.string(member.client)
            out.nextKey("name")
            out.string(member.name)
            out.nextKey("role")
            if let role = member.role { out.string(role.rawValue) } else { out.raw("null") }
            out.nextKey("node")
            out.string(member.node)
            // Token ids and labels are the owners' business (what they withdraw by, what they
            // wrote for whom): others see null.
            out.nextKey("token")
            if owner, let token = member.token { out.string(token) } else { out.raw("null") }
            out.nextKey("label")
            if owner, let label = member.label { out.string(label) } else { out.raw("null") }
            out.byte(UInt8(ascii: "}"))
        }
        out.raw("]}")
        respond(.json(200, out.bytes))
    }

    /// `DELETE .../members/CLIENT`: closes that member with 4504 (204), or 404 when this node
    /// has no such member. Its token still works: withdraw it too to keep it out.
    func removeMember(_ call: Call, _ respond: @escaping Respond) {
        let client = call.parameters["client"] ?? ""
        let name = call.parameters["name"] ?? ""
        guard hub.removeMember(client, of: name) else {
            return respond(HTTPRouter.error(404, "not_found", "no member \(client) of session \(name) is connected to this node"))
        }
        respond(HTTPResponse(status: 204))
    }

    /// `https://host` as the caller reached this server: the `--public-url` of that host (a
    /// proxy in front terminates TLS), else https with TLS or behind a trusted proxy that says so
    /// (`X-Forwarded-Proto`). The Host header was checked by the policy.
    private func publicBase(_ request: HTTPRequest) -> String {
        let host = request.header("host") ?? "localhost"
        for url in hub.config.publicURLs where RequestPolicy.authority(ofURL: url) == host.lowercased() {
            return RequestPolicy.origin(ofURL: url)
        }
        let proxied = policy.trustedProxies.contains(request.peer) && request.header("x-forwarded-proto")?.lowercased() == "https"
        let scheme = hub.config.tlsCertPath != nil || proxied ? "https" : "http"
        return "\(scheme)://\(host)"
    }
}
