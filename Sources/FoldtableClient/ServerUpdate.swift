import FoldtableCore

/// One message from the server, decoded strictly (Protocol.md, "Server to client").
///
/// Decoding never traps: anything malformed is a ``ProtocolError`` naming the field, and a
/// message type this client does not know is ``other(type:)`` (newer servers may add some).
public enum ServerUpdate: Equatable, Sendable {
    case welcome(Welcome)
    case resume(Resume)
    case event(TableEvent)
    case ack(id: String, seq: UInt64)
    case error(ServerError)
    case rows(RowsChunk)
    case busy(section: String, busy: Bool)
    case presence(PresenceDiff)
    case sessions([SessionInfo])
    /// The answer to `find`.
    case found(id: String?, query: String, matches: [RowSearch.Match], truncated: Bool)
    /// Which view this member is in: its whole private view, or `nil` for the shared one.
    case view(private: [CollapseEffect]?)
    /// A collapse change applied to this member's private view only (acknowledges `id`).
    case viewChanged(id: String?, collapsed: [CollapseEffect])
    /// The answer to `history`: events newest first, and whether older ones are kept.
    case history(id: String?, events: [TableEvent], more: Bool)
    case other(type: String)

    /// The snapshot after `join`.
    public struct Welcome: Equatable, Sendable {
        public var session: String
        /// This connection's client id and display name.
        public var me: Author
        public var epoch: String
        public var seq: UInt64
        /// `false` when a resume was asked for and could not be honoured.
        public var recovered: Bool?
        public var table: TableSnapshot
        /// Members by name: all of them, or the first of a session past its list threshold.
        public var presence: [ServerMessage.Member]
        /// How many members the session has.
        public var presenceCount: Int
    }

    /// The answer to a join that can resume: the missed events follow.
    public struct Resume: Equatable, Sendable {
        public var session: String
        public var me: Author
        public var epoch: String
        public var seq: UInt64
        public var presence: [ServerMessage.Member]
        public var presenceCount: Int
    }

    /// One chunk of an expanded section's rows.
    public struct RowsChunk: Equatable, Sendable {
        public var section: String
        /// The expansion (or snapshot) the rows belong to.
        public var seq: UInt64
        public var from: Int
        public var total: Int
        public var rows: [Row]
        public var final: Bool
    }

    /// One entry of a `sessions` answer.
    public struct SessionInfo: Equatable, Sendable {
        public var name: String
        public var members: Int
    }

    /// JSON limits for server messages: the server's own strings are at most 4,096 bytes, an
    /// error message a little more; the margin costs nothing.
    static let limits = JSONParser.Limits(maxDepth: 32, maxStringBytes: 65_536)

    /// Decodes one line (one JSON object) of a server message.
    public static func decode(_ line: some Collection<UInt8>) throws(ProtocolError) -> ServerUpdate {
        try decode(try JSONParser.parse(line, limits: limits))
    }

    /// A `collapsed` object of `view`/`viewChanged`, in its order.
    private static func collapsedMap(_ reader: FieldReader) throws(ProtocolError) -> [CollapseEffect] {
        var effects: [CollapseEffect] = []
        for (key, flag) in try reader.object("collapsed").members {
            guard case .bool(let collapsed) = flag else {
                throw ProtocolError(.wrongType, "collapsed.\(key.prefix(64)) must be true or false", field: "collapsed")
            }
            effects.append(CollapseEffect(key: key, collapsed: collapsed))
        }
        return effects
    }

    /// Decodes one parsed server message.
    public static func decode(_ value: JSONValue) throws(ProtocolError) -> ServerUpdate {
        let reader = try FieldReader(value)
        let type = try reader.string("type")
        switch type {
        case "welcome":
            let seq = try sequence(reader, "seq")
            return .welcome(
                Welcome(
                    session: try reader.string("session"), me: Author(client: try reader.string("client"), name: try reader.string("name")),
                    epoch: try reader.string("epoch"), seq: seq, recovered: try reader.optionalBool("recovered"),
                    table: try TableSnapshot.decode(try reader.object("table").asValue, seq: seq), presence: try members(reader),
                    presenceCount: try presenceCount(reader)))
        case "resume":
            return .resume(
                Resume(
                    session: try reader.string("session"), me: Author(client: try reader.string("client"), name: try reader.string("name")),
                    epoch: try reader.string("epoch"), seq: try sequence(reader, "seq"), presence: try members(reader),
                    presenceCount: try presenceCount(reader)))
        case "event":
            return .event(try ServerMessage.decodeEvent(value))
        case "ack":
            return .ack(id: try reader.string("id"), seq: try sequence(reader, "seq"))
        case "error":
            return .error(
                ServerError(
                    id: try reader.optionalString("id"), code: try reader.string("code"), field: try reader.optionalString("field"),
                    message: try reader.string("message")))
        case "rows":
            var rows: [Row] = []
            for element in try reader.array("rows") { rows.append(try Row.decode(element)) }
            return .rows(
                RowsChunk(
                    section: try reader.string("section"), seq: try sequence(reader, "seq"), from: try count(reader, "from"),
                    total: try count(reader, "total"), rows: rows, final: try reader.bool("final")))
        case "busy":
            return .busy(section: try reader.string("section"), busy: try reader.bool("busy"))
        case "presence":
            return .presence(try PresenceDiff.decode(reader))
        case "found":
            var matches: [RowSearch.Match] = []
            for element in try reader.array("rows") {
                let entry = try FieldReader(element, path: "rows.")
                matches.append(
                    RowSearch.Match(
                        section: try entry.string("section"), row: try entry.string("row"), label: try entry.string("label"),
                        value: try entry.string("value")))
            }
            return .found(
                id: try reader.optionalString("id"), query: try reader.string("q"), matches: matches, truncated: try reader.bool("truncated"))
        case "view":
            let mode = try reader.string("mode")
            guard mode == "private" else { return .view(private: nil) }
            return .view(private: try collapsedMap(reader))
        case "viewChanged":
            return .viewChanged(id: try reader.optionalString("id"), collapsed: try collapsedMap(reader))
        case "history":
            let page = try EventHistory.decodePage(value)
            return .history(id: try reader.optionalString("id"), events: page.events, more: page.more)
        case "sessions":
            var list: [SessionInfo] = []
            for element in try reader.array("sessions") {
                let entry = try FieldReader(element, path: "sessions.")
                list.append(SessionInfo(name: try entry.string("name"), members: try count(entry, "members")))
            }
            return .sessions(list)
        default:
            return .other(type: type)
        }
    }

    private static func sequence(_ reader: FieldReader, _ name: String) throws(ProtocolError) -> UInt64 {
        let number = try reader.integer(name)
        guard number >= 0 else { throw ProtocolError(.invalidValue, "\(name) must not be negative", field: name) }
        return UInt64(number)
    }

    private static func count(_ reader: FieldReader, _ name: String) throws(ProtocolError) -> Int {
        let number = try reader.integer(name)
        guard number >= 0 && number <= Int64(Int32.max) else {
            throw ProtocolError(.invalidValue, "\(name) must be between 0 and \(Int32.max)", field: name)
        }
        return Int(number)
    }

    /// `presenceCount`, or (from a server before it) the length of the list.
    private static func presenceCount(_ reader: FieldReader) throws(ProtocolError) -> Int {
        reader.has("presenceCount") ? try count(reader, "presenceCount") : try reader.array("presence").count
    }

    private static func members(_ reader: FieldReader) throws(ProtocolError) -> [ServerMessage.Member] {
        var list: [ServerMessage.Member] = []
        for element in try reader.array("presence") {
            let entry = try FieldReader(element, path: "presence.")
            list.append(ServerMessage.Member(client: try entry.string("client"), name: try entry.string("name")))
        }
        return list
    }
}

/// A refused message, as the server's `error` reply says it.
public struct ServerError: Error, Equatable, Sendable {
    /// The refused change's id, when it had one.
    public var id: String?
    /// A code from Protocol.md (`unknown_section`, ...); kept as text so new codes pass through.
    public var code: String
    public var field: String?
    /// One sentence for people.
    public var message: String

    public init(id: String?, code: String, field: String?, message: String) {
        self.id = id
        self.code = code
        self.field = field
        self.message = message
    }
}
