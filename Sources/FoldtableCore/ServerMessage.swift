/// Encoders for every server -> client message, each producing the bytes of one JSON object.
///
/// A broadcast is encoded once with these and the same bytes go to every member; nothing here
/// is per client except `welcome`, `resume`, `ack` and `error`.
public enum ServerMessage {
    /// `{"type":"event",...}`, as members receive it (an import's rows left out: they follow in
    /// `rows` chunks).
    public static func event(_ event: TableEvent) -> [UInt8] {
        var out = JSONWriter(capacity: 160)
        encode(event, into: &out, form: .forMembers)
        return out.bytes
    }

    /// Writes an event; `form` says whether an import's rows are written (the log) or not (members).
    public static func encode(_ event: TableEvent, into out: inout JSONWriter, form: Change.Form) {
        // Fixed text between the values in as few pieces as it takes: this runs for every change.
        out.raw("{\"type\":\"event\",\"seq\":")
        out.integer(event.seq)
        if let time = event.time {
            out.raw(",\"time\":")
            out.integer(time)
        }
        out.raw(",\"by\":{\"client\":")
        out.string(event.author.client)
        out.raw(",\"name\":")
        out.string(event.author.name)
        // The id as its author sent it, never its scope (``ChangeIdScope``): it is the author's
        // own, so knowing it lets nobody else use it up or be answered for it. A log keeps the
        // whole key beside the event (``TableCheckpoint/encodeEntry(_:request:encodedEvent:)``).
        if let key = event.changeId {
            out.raw("},\"id\":")
            out.string(ChangeIdScope.id(ofKey: key))
            out.raw(",\"change\":")
        } else {
            out.raw("},\"change\":")
        }
        event.change.encode(into: &out, form: form)
        out.raw(",\"collapsed\":{")
        for (index, effect) in event.collapsed.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            out.string(effect.key)
            if effect.collapsed { out.raw(":true") } else { out.raw(":false") }
        }
        out.byte(UInt8(ascii: "}"))
        if let from = event.from {
            out.nextKey("from")
            out.raw("{\"section\":")
            out.string(from.section)
            out.nextKey("index")
            out.integer(from.index)
            out.nextKey("row")
            from.row.encode(into: &out)
            out.byte(UInt8(ascii: "}"))
        }
        out.byte(UInt8(ascii: "}"))
    }

    /// Decodes an `event` message (for replicas, clients and tests). Its `id` is the id as the
    /// author sent it; a log entry adds the scope (``TableCheckpoint/decodeEntry(_:limits:)``).
    public static func decodeEvent(_ value: JSONValue) throws(ProtocolError) -> TableEvent {
        let reader = try FieldReader(value)
        guard try reader.string("type") == "event" else {
            throw ProtocolError(.unknownType, "not an event", field: "type")
        }
        let seq = try reader.integer("seq")
        guard seq > 0 else { throw ProtocolError(.invalidValue, "seq must be positive", field: "seq") }
        let by = try reader.object("by")
        let changeReader = try reader.object("change")
        let change = try Change.decode(changeReader, type: try changeReader.string("type"))
        guard case .object(let members)? = reader.value("collapsed") else {
            throw ProtocolError(.missingField, "collapsed is missing", field: "collapsed")
        }
        var effects = CollapseEffects()
        for (key, flag) in members {
            guard case .bool(let collapsed) = flag else {
                throw ProtocolError(.wrongType, "collapsed.\(key) must be true or false", field: "collapsed")
            }
            effects.append(CollapseEffect(key: key, collapsed: collapsed))
        }
        var from: RowOrigin?
        if reader.has("from") {
            let origin = try reader.object("from")
            guard let index = try origin.optionalIndex("index") else {
                throw ProtocolError(.missingField, "from.index is missing", field: "from.index")
            }
            guard let rowValue = origin.value("row") else { throw ProtocolError(.missingField, "from.row is missing", field: "from.row") }
            from = RowOrigin(section: try origin.string("section"), index: index, row: try Row.decode(rowValue))
        }
        // Absent in entries logged before events carried a time: read as none, not refused.
        let time = try reader.optionalInteger("time")
        if let time, time < 0 { throw ProtocolError(.invalidValue, "time must not be negative", field: "time") }
        return TableEvent(
            seq: UInt64(seq), author: Author(client: try by.string("client"), name: try by.string("name")),
            changeId: try reader.optionalString("id"), change: change, collapsed: effects, from: from, time: time.map { UInt64($0) })
    }

    /// A member as shown in presence lists: the same identity that authors changes.
    public typealias Member = Author

    /// `{"type":"welcome",...}`: the snapshot a client starts from. `presence` lists the members
    /// (at most the session's list threshold of them); `presenceCount` says how many there are
    /// (`nil`: as many as listed).
    public static func welcome(
        session: String, client: Author, epoch: String, snapshot: TableSnapshot, presence: [Member], presenceCount: Int? = nil,
        recovered: Bool? = nil, role: String? = nil
    ) -> [UInt8] {
        var out = JSONWriter(capacity: 4096)
        out.raw("{\"type\":\"welcome\"")
        header(session: session, client: client, epoch: epoch, seq: snapshot.seq, role: role, into: &out)
        if let recovered {
            out.nextKey("recovered")
            out.bool(recovered)
        }
        out.nextKey("table")
        snapshot.encode(into: &out)
        presenceFields(presence, count: presenceCount, into: &out)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// `{"type":"resume",...}`: missed events follow. `presence` and `presenceCount` as in ``welcome(session:client:epoch:snapshot:presence:presenceCount:recovered:role:)``.
    public static func resume(
        session: String, client: Author, epoch: String, seq: UInt64, presence: [Member], presenceCount: Int? = nil, role: String? = nil
    ) -> [UInt8] {
        var out = JSONWriter(capacity: 256)
        out.raw("{\"type\":\"resume\"")
        header(session: session, client: client, epoch: epoch, seq: seq, role: role, into: &out)
        presenceFields(presence, count: presenceCount, into: &out)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    private static func header(session: String, client: Author, epoch: String, seq: UInt64, role: String?, into out: inout JSONWriter) {
        out.nextKey("session")
        out.string(session)
        out.nextKey("client")
        out.string(client.client)
        out.nextKey("name")
        out.string(client.name)
        out.nextKey("epoch")
        out.string(epoch)
        out.nextKey("seq")
        out.integer(seq)
        if let role {
            out.nextKey("role")
            out.string(role)
        }
    }

    /// `{"type":"authorized","role":..,"expires":N}`: the answer to a fresh token (`auth`).
    public static func authorized(role: String, expires: UInt64) -> [UInt8] {
        var out = JSONWriter(capacity: 64)
        out.raw("{\"type\":\"authorized\",\"role\":")
        out.string(role)
        out.nextKey("expires")
        out.integer(expires)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// `{"type":"ack","id":..,"seq":N}`.
    public static func ack(id: String, seq: UInt64) -> [UInt8] {
        var out = JSONWriter(capacity: 64)
        ack(id: id, seq: seq, into: &out)
        return out.bytes
    }

    /// ``ack(id:seq:)`` appended to `out` (a buffer the caller reuses for every ack).
    public static func ack(id: String, seq: UInt64, into out: inout JSONWriter) {
        out.raw("{\"type\":\"ack\",\"id\":")
        out.string(id)
        out.nextKey("seq")
        out.integer(seq)
        out.byte(UInt8(ascii: "}"))
    }

    /// `{"type":"error",...}`: a refused message; the connection stays open.
    public static func error(_ error: ProtocolError, id: String?) -> [UInt8] {
        var out = JSONWriter(capacity: 160)
        out.raw("{\"type\":\"error\"")
        if let id {
            out.nextKey("id")
            out.string(id)
        }
        out.nextKey("code")
        out.string(error.code.rawValue)
        if let field = error.field {
            out.nextKey("field")
            out.string(field)
        }
        out.nextKey("message")
        out.string(error.message)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// `{"type":"busy","section":..,"busy":..}`.
    public static func busy(section: String, busy: Bool) -> [UInt8] {
        var out = JSONWriter(capacity: 64)
        out.raw("{\"type\":\"busy\",\"section\":")
        out.string(section)
        out.nextKey("busy")
        out.bool(busy)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// `{"type":"view","mode":"private","collapsed":{..}}` (the member's whole private view) or
    /// `{"type":"view","mode":"shared"}`: which view a member is in, after it asked or joined.
    public static func view(private collapsed: [CollapseEffect]?) -> [UInt8] {
        var out = JSONWriter(capacity: 64)
        guard let collapsed else {
            out.raw("{\"type\":\"view\",\"mode\":\"shared\"}")
            return out.bytes
        }
        out.raw("{\"type\":\"view\",\"mode\":\"private\",\"collapsed\":")
        collapsedMap(collapsed, into: &out)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// `{"type":"viewChanged","id":..,"collapsed":{..}}`: a member's collapse change applied to
    /// its private view only (the sections whose state it altered there).
    public static func viewChanged(id: String?, collapsed: [CollapseEffect]) -> [UInt8] {
        var out = JSONWriter(capacity: 64)
        out.raw("{\"type\":\"viewChanged\"")
        if let id {
            out.nextKey("id")
            out.string(id)
        }
        out.nextKey("collapsed")
        collapsedMap(collapsed, into: &out)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// `{"key":true,...}` in the order given: the map of `view`, `viewChanged`, an undo's
    /// `restore`, a client's saved view and a history entry's `collapsed`.
    static func collapsedMap(_ effects: some Sequence<CollapseEffect>, into out: inout JSONWriter) {
        out.byte(UInt8(ascii: "{"))
        for (index, effect) in effects.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            out.string(effect.key)
            out.byte(UInt8(ascii: ":"))
            out.bool(effect.collapsed)
        }
        out.byte(UInt8(ascii: "}"))
    }

    /// `{"type":"found",...}`: the answer to `find`, matches in table order.
    public static func found(id: String?, query: String, matches: [RowSearch.Match], truncated: Bool) -> [UInt8] {
        var out = JSONWriter(capacity: 96 + matches.count * 80)
        out.raw("{\"type\":\"found\"")
        if let id {
            out.nextKey("id")
            out.string(id)
        }
        out.nextKey("q")
        out.string(query)
        out.nextKey("rows")
        RowSearch.Match.encode(matches, into: &out)
        out.nextKey("truncated")
        out.bool(truncated)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// `{"type":"presence",...}`: see ``PresenceDiff``.
    public static func presence(_ diff: PresenceDiff) -> [UInt8] { diff.encoded }

    /// `{"type":"rows",...}`: one chunk of an expanded section's rows.
    public static func rows(section: String, seq: UInt64, from: Int, total: Int, rows: ArraySlice<Row>, final: Bool) -> [UInt8] {
        var out = JSONWriter(capacity: 64 + rows.count * 48)
        out.raw("{\"type\":\"rows\",\"section\":")
        out.string(section)
        out.nextKey("seq")
        out.integer(seq)
        out.nextKey("from")
        out.integer(from)
        out.nextKey("total")
        out.integer(total)
        out.nextKey("rows")
        Row.encode(rows, into: &out)
        out.nextKey("final")
        out.bool(final)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// `{"type":"sessions","sessions":[{"name":..,"members":N}]}`.
    public static func sessions(_ list: [(name: String, members: Int)]) -> [UInt8] {
        var out = JSONWriter(capacity: 64 + list.count * 32)
        out.raw("{\"type\":\"sessions\",\"sessions\":")
        encode(sessions: list, into: &out)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// `[{"name":..,"members":N},...]`: the list of `sessions` (and of `foldtable list --json`).
    public static func encode(sessions list: [(name: String, members: Int)], into out: inout JSONWriter) {
        out.byte(UInt8(ascii: "["))
        for (index, entry) in list.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            out.raw("{\"name\":")
            out.string(entry.name)
            out.nextKey("members")
            out.integer(entry.members)
            out.byte(UInt8(ascii: "}"))
        }
        out.byte(UInt8(ascii: "]"))
    }

    /// `{"client":..,"name":..}`: an author as events and presence lists carry it.
    public static func author(_ author: Author, into out: inout JSONWriter) {
        out.raw("{\"client\":")
        out.string(author.client)
        out.nextKey("name")
        out.string(author.name)
        out.byte(UInt8(ascii: "}"))
    }

    /// `"presence":[...],"presenceCount":N` of a welcome or resume.
    private static func presenceFields(_ presence: [Member], count: Int?, into out: inout JSONWriter) {
        out.nextKey("presence")
        members(presence, into: &out)
        out.nextKey("presenceCount")
        out.integer(UInt64(count ?? presence.count))
    }

    /// `[{"client":"c1","name":"ana"},...]`.
    static func members(_ list: [Member], into out: inout JSONWriter) {
        out.byte(UInt8(ascii: "["))
        for (index, member) in list.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            author(member, into: &out)
        }
        out.byte(UInt8(ascii: "]"))
    }
}
