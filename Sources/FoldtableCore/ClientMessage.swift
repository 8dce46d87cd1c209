/// A message from a client, decoded strictly by the server (``decode(_:limits:)-(UnsafeRawBufferPointer,_)``) and encoded by
/// clients (``encoded()``): both directions of the wire format live here.
public enum ClientMessage: Equatable, Sendable {
    case join(JoinRequest)
    /// Ask for the sessions that exist (those the token opens, when the server takes tokens).
    case list(token: String?)
    /// A fresh token for the joined session, before the current one expires.
    case auth(token: String)
    /// Change the display name others see.
    case rename(String)
    /// A change to the joined session's table, with the client's change id if it gave one.
    case change(Change, id: String?)
    /// Delete the joined session and its history; every member is closed (4501).
    case deleteSession
    /// Find rows of the joined session's table by text, loaded by this client or not.
    case find(query: String, limit: Int, id: String?)
    /// Take back the sender's own latest change not yet undone (`redo`: make again the latest
    /// one it undid), as a new change in the session's order, with the client's change id.
    case undo(redo: Bool, id: String?)
    /// Switch to a view of one's own (`private`: collapse changes then change only what this
    /// member sees) or back to the shared one. `collapsed`: a private view the client saved,
    /// to start from instead of the shared state.
    case view(private: Bool, collapsed: [CollapseEffect]?)
    /// Read the joined session's history: up to `limit` events before seq `before` (`nil`: the
    /// newest), newest first (see ``EventHistory``). Any member may ask, viewers too.
    case history(before: UInt64?, limit: Int, id: String?)

    /// Limits applied while decoding a client message.
    public struct Limits: Sendable {
        public var json = JSONParser.Limits()
        /// Longest change id, session name and display name, in bytes.
        public var maxNameBytes = 64
        public init() {}
    }

    /// Decodes one message. On failure also returns the change id when the message had a
    /// readable one, so the error reply can name the change it refuses.
    public static func decode(_ bytes: some Collection<UInt8>, limits: Limits = Limits()) -> (Result<ClientMessage, ProtocolError>, id: String?) {
        if let decoded = bytes.withContiguousStorageIfAvailable({ decode(UnsafeRawBufferPointer($0), limits: limits) }) { return decoded }
        return Array(bytes).withUnsafeBytes { decode($0, limits: limits) }
    }

    /// Decodes one message where its bytes lie (a received frame): what the server calls, with
    /// no copy and no generic call across modules.
    public static func decode(_ bytes: UnsafeRawBufferPointer, limits: Limits = Limits()) -> (Result<ClientMessage, ProtocolError>, id: String?) {
        let flat = bytes.withMemoryRebound(to: UInt8.self) { FlatRequestDecoder.decode($0, limits: limits) }
        if let (message, id) = flat { return (.success(message), id) }
        return decodeThroughTree(bytes, limits: limits)
    }

    /// Decodes any message by way of its JSON tree: everything ``FlatRequestDecoder`` leaves, and
    /// every error.
    static func decodeThroughTree(_ bytes: UnsafeRawBufferPointer, limits: Limits) -> (Result<ClientMessage, ProtocolError>, id: String?) {
        let value: JSONValue
        do {
            value = try JSONParser.parse(bytes, limits: limits.json)
        } catch {
            return (.failure(error), nil)
        }
        var id: String?
        if case .string(let text)? = value["id"], text.utf8.count <= limits.maxNameBytes { id = text }
        do {
            return (.success(try decode(value, limits: limits)), id)
        } catch {
            return (.failure(error), id)
        }
    }

    private static func displayName(_ reader: FieldReader, limits: Limits) throws(ProtocolError) -> String {
        let name = try reader.string("name")
        guard !name.isEmpty, name.utf8.count <= limits.maxNameBytes, !name.contains(where: { $0.isNewline }) else {
            throw ProtocolError(.invalidValue, "name must be 1 to \(limits.maxNameBytes) bytes on one line", field: "name")
        }
        return name
    }

    private static func decode(_ value: JSONValue, limits: Limits) throws(ProtocolError) -> ClientMessage {
        let reader = try FieldReader(value)
        let type = try reader.string("type")
        switch type {
        case "join":
            let session = try reader.string("session")
            guard JoinRequest.isValidSessionName(session) else {
                throw ProtocolError(.invalidSession, "session names are 1 to 64 letters, digits, _ or -", field: "session")
            }
            let name = try displayName(reader, limits: limits)
            let since = try reader.optionalInteger("since")
            if let since, since < 0 {
                throw ProtocolError(.invalidValue, "since must not be negative", field: "since")
            }
            let idScope = try reader.optionalString("idScope")
            if let idScope, !JoinRequest.isValidIDScope(idScope) {
                throw ProtocolError(
                    .invalidValue,
                    "idScope must be \(JoinRequest.idScopeBytes.lowerBound) to \(JoinRequest.idScopeBytes.upperBound) letters, digits, _ - . or :",
                    field: "idScope")
            }
            return .join(
                JoinRequest(
                    session: session, name: name, since: since.map { UInt64($0) }, epoch: try reader.optionalString("epoch"),
                    token: try reader.optionalString("token"), create: try reader.optionalBool("create") ?? false, idScope: idScope))
        case "list":
            return .list(token: try reader.optionalString("token"))
        case "auth":
            return .auth(token: try reader.string("token"))
        case "rename":
            return .rename(try displayName(reader, limits: limits))
        case "deleteSession":
            return .deleteSession
        case "find":
            let query = try reader.string("q")
            guard !query.isEmpty, query.utf8.count <= RowSearch.maxQueryBytes else {
                throw ProtocolError(.invalidValue, "q must be 1 to \(RowSearch.maxQueryBytes) bytes", field: "q")
            }
            let limit = try reader.optionalInteger("limit") ?? Int64(RowSearch.defaultLimit)
            guard (1...Int64(RowSearch.maxLimit)).contains(limit) else {
                throw ProtocolError(.invalidValue, "limit must be 1 to \(RowSearch.maxLimit)", field: "limit")
            }
            let id = try reader.optionalString("id")
            if let id, id.isEmpty || id.utf8.count > limits.maxNameBytes {
                throw ProtocolError(.invalidValue, "id must be 1 to \(limits.maxNameBytes) bytes", field: "id")
            }
            return .find(query: query, limit: Int(limit), id: id)
        case "undo", "redo":
            return .undo(redo: type == "redo", id: try changeId(reader, limits: limits))
        case "view":
            let mode = try reader.string("mode")
            guard mode == "private" || mode == "shared" else {
                throw ProtocolError(.invalidValue, "mode must be \"private\" or \"shared\"", field: "mode")
            }
            guard mode == "private", reader.has("collapsed") else { return .view(private: mode == "private", collapsed: nil) }
            var collapsed: [CollapseEffect] = []
            for (key, flag) in try reader.object("collapsed").members {
                guard case .bool(let value) = flag else {
                    throw ProtocolError(.wrongType, "collapsed.\(key.prefix(64)) must be true or false", field: "collapsed")
                }
                collapsed.append(CollapseEffect(key: key, collapsed: value))
            }
            return .view(private: true, collapsed: collapsed)
        case "history":
            let (before, limit) = try EventHistory.checked(before: try reader.optionalInteger("before"), limit: try reader.optionalInteger("limit"))
            let id = try reader.optionalString("id")
            if let id, id.isEmpty || id.utf8.count > limits.maxNameBytes {
                throw ProtocolError(.invalidValue, "id must be 1 to \(limits.maxNameBytes) bytes", field: "id")
            }
            return .history(before: before, limit: limit, id: id)
        default:
            guard Change.typeNames.contains(type) else {
                throw ProtocolError(.unknownType, "unknown message type \"\(type.prefix(32))\"", field: "type")
            }
            let id = try reader.optionalString("id")
            if let id, id.isEmpty || id.utf8.count > limits.maxNameBytes {
                throw ProtocolError(.invalidValue, "id must be 1 to \(limits.maxNameBytes) bytes", field: "id")
            }
            // A change id never holds `/`: the server keeps ids as `scope/id` (``ChangeIdScope``),
            // so one holding it could pass for another author's. (The table refuses every other
            // byte outside letters, digits and `_ - . :` when it applies the change.)
            if let id, id.utf8.contains(UInt8(ascii: "/")) {
                throw ProtocolError(.invalidValue, "id may only hold letters, digits and _ - . :", field: "id")
            }
            return .change(try Change.decode(reader, type: type), id: id)
        }
    }

    /// A change id: 1 to `maxNameBytes` bytes, never holding `/` (see the change case above).
    private static func changeId(_ reader: FieldReader, limits: Limits) throws(ProtocolError) -> String? {
        let id = try reader.optionalString("id")
        if let id, id.isEmpty || id.utf8.count > limits.maxNameBytes {
            throw ProtocolError(.invalidValue, "id must be 1 to \(limits.maxNameBytes) bytes", field: "id")
        }
        if let id, id.utf8.contains(UInt8(ascii: "/")) {
            throw ProtocolError(.invalidValue, "id may only hold letters, digits and _ - . :", field: "id")
        }
        return id
    }
}

extension ClientMessage {
    /// The message as one JSON object, the bytes a client sends: ``decode(_:limits:)-(Collection<UInt8>,_)`` gives the
    /// same message back. Members are written in a fixed order (`type` first, a change's `id`
    /// last), so the same message always encodes to the same bytes.
    public func encoded() -> [UInt8] {
        var out = JSONWriter(capacity: 128)
        encode(into: &out)
        return out.bytes
    }

    /// Writes the message as one JSON object (see ``encoded()``).
    public func encode(into out: inout JSONWriter) {
        switch self {
        case .join(let request):
            out.raw("{\"type\":\"join\",\"session\":")
            out.string(request.session)
            out.nextKey("name")
            out.string(request.name)
            if let token = request.token {
                out.nextKey("token")
                out.string(token)
            }
            if let since = request.since {
                out.nextKey("since")
                out.integer(since)
            }
            if let epoch = request.epoch {
                out.nextKey("epoch")
                out.string(epoch)
            }
            if request.create {
                out.nextKey("create")
                out.bool(true)
            }
            if let idScope = request.idScope {
                out.nextKey("idScope")
                out.string(idScope)
            }
            out.byte(UInt8(ascii: "}"))
        case .list(let token):
            out.raw("{\"type\":\"list\"")
            if let token {
                out.nextKey("token")
                out.string(token)
            }
            out.byte(UInt8(ascii: "}"))
        case .auth(let token):
            out.raw("{\"type\":\"auth\",\"token\":")
            out.string(token)
            out.byte(UInt8(ascii: "}"))
        case .rename(let name):
            out.raw("{\"type\":\"rename\",\"name\":")
            out.string(name)
            out.byte(UInt8(ascii: "}"))
        case .change(let change, let id):
            change.encode(into: &out)
            if let id {
                out.removeLastByte()  // the closing brace: the id goes in before it
                out.nextKey("id")
                out.string(id)
                out.byte(UInt8(ascii: "}"))
            }
        case .deleteSession:
            out.raw("{\"type\":\"deleteSession\"}")
        case .undo(let redo, let id):
            out.raw(redo ? "{\"type\":\"redo\"" : "{\"type\":\"undo\"")
            if let id {
                out.nextKey("id")
                out.string(id)
            }
            out.byte(UInt8(ascii: "}"))
        case .view(let isPrivate, let collapsed):
            out.raw(isPrivate ? "{\"type\":\"view\",\"mode\":\"private\"" : "{\"type\":\"view\",\"mode\":\"shared\"")
            if let collapsed {
                out.nextKey("collapsed")
                ServerMessage.collapsedMap(collapsed, into: &out)
            }
            out.byte(UInt8(ascii: "}"))
        case .find(let query, let limit, let id):
            out.raw("{\"type\":\"find\",\"q\":")
            out.string(query)
            out.nextKey("limit")
            out.integer(limit)
            if let id {
                out.nextKey("id")
                out.string(id)
            }
            out.byte(UInt8(ascii: "}"))
        case .history(let before, let limit, let id):
            out.raw("{\"type\":\"history\"")
            if let before {
                out.nextKey("before")
                out.integer(before)
            }
            out.nextKey("limit")
            out.integer(limit)
            if let id {
                out.nextKey("id")
                out.string(id)
            }
            out.byte(UInt8(ascii: "}"))
        }
    }
}

/// What a client asks for when it joins a session.
public struct JoinRequest: Equatable, Sendable {
    public var session: String
    public var name: String
    /// The last sequence number the client saw, to resume after a drop.
    public var since: UInt64?
    /// The session incarnation `since` belongs to.
    public var epoch: String?
    /// Reserved for access control; never logged.
    public var token: String?
    /// Whether the member means to make the session when none has that name (the client opens
    /// a new name). Honoured only for a member who may create sessions (an owner; everyone in
    /// open mode); otherwise, and without it, a missing session is `session_not_found`.
    public var create: Bool
    /// A random string the client picks once (per browser tab, per terminal process) and sends
    /// with every join. In open mode its change ids are scoped to it, so a retry after a
    /// reconnect is still recognised while nobody else can use up or answer for its ids (see
    /// ``ChangeIdScope``). Ignored with tokens: the token's `sub` is the scope. Never shown to
    /// other members.
    public var idScope: String?

    public init(
        session: String, name: String, since: UInt64? = nil, epoch: String? = nil, token: String? = nil, create: Bool = false,
        idScope: String? = nil
    ) {
        self.session = session
        self.name = name
        self.since = since
        self.epoch = epoch
        self.token = token
        self.create = create
        self.idScope = idScope
    }

    /// How long an ``idScope`` is, in bytes: long enough that one picked at random cannot be
    /// guessed (16 random letters and digits are about 82 bits).
    public static let idScopeBytes = 16...64

    /// Whether `scope` may be an ``idScope``: 16 to 64 letters, digits, `_ - . :`.
    public static func isValidIDScope(_ scope: String) -> Bool {
        idScopeBytes.contains(scope.utf8.count) && scope.utf8.allSatisfy(Table.isKeyByte)
    }

    /// `[A-Za-z0-9_-]{1,64}`.
    public static func isValidSessionName(_ name: String) -> Bool {
        let utf8 = name.utf8
        guard !utf8.isEmpty, utf8.count <= 64 else { return false }
        return utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "_"), UInt8(ascii: "-"):
                return true
            default: return false
            }
        }
    }
}
