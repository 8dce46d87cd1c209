/// A session's history as clients read it: who changed what, and when, newest first, a page at a
/// time (the WebSocket `history` message and `GET /api/v1/sessions/NAME/events`).
///
/// Each entry is `{"seq":N,"time":UNIX_MS,"author":{"client":..,"name":..},"change":{...},
/// "collapsed":{...}}`: the event as members received it, without what only a live replica
/// needs (`from`, the change id). `time` is left out for an event logged before events carried
/// one. An import's rows are left out, as in the event members got.
public enum EventHistory {
    /// Entries a page holds when the request names no limit.
    public static let defaultLimit = 50
    /// The most entries one page may hold: a page of large changes stays a modest message.
    public static let maxLimit = 200

    /// Checks a request's `limit` (default ``defaultLimit``) and `before` (a seq, at least 1;
    /// `nil`: from the newest event). Errors name the field, for a 400 or an error reply.
    public static func checked(before: Int64?, limit: Int64?) throws(ProtocolError) -> (before: UInt64?, limit: Int) {
        let limit = limit ?? Int64(defaultLimit)
        guard (1...Int64(maxLimit)).contains(limit) else {
            throw ProtocolError(.invalidValue, "limit must be 1 to \(maxLimit)", field: "limit")
        }
        if let before, before < 1 {
            throw ProtocolError(.invalidValue, "before must be a seq of 1 or more", field: "before")
        }
        return (before.map { UInt64($0) }, Int(limit))
    }

    /// One entry (see the type's description) appended to `out`.
    public static func encode(_ event: TableEvent, into out: inout JSONWriter) {
        out.raw("{\"seq\":")
        out.integer(event.seq)
        if let time = event.time {
            out.nextKey("time")
            out.integer(time)
        }
        out.raw(",\"author\":{\"client\":")
        out.string(event.author.client)
        out.nextKey("name")
        out.string(event.author.name)
        out.raw("},\"change\":")
        event.change.encode(into: &out, form: .forMembers)
        out.raw(",\"collapsed\":")
        ServerMessage.collapsedMap(event.collapsed, into: &out)
        out.byte(UInt8(ascii: "}"))
    }

    /// `{"type":"history","id":..,"events":[...],"more":BOOL}`: the reply to a `history` message.
    /// `events` newest first; `more`: older events are still kept.
    public static func message(id: String?, events: [TableEvent], more: Bool) -> [UInt8] {
        var out = JSONWriter(capacity: 64 + events.count * 160)
        out.raw("{\"type\":\"history\"")
        if let id {
            out.nextKey("id")
            out.string(id)
        }
        out.nextKey("events")
        encode(events, into: &out)
        out.nextKey("more")
        out.bool(more)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// `{"events":[...],"next":SEQ|null}`: the HTTP API's page; `next` is the `before` of the next
    /// older page (the oldest seq listed), `null` when nothing older is kept.
    public static func page(events: [TableEvent], more: Bool) -> [UInt8] {
        var out = JSONWriter(capacity: 32 + events.count * 160)
        out.raw("{\"events\":")
        encode(events, into: &out)
        out.nextKey("next")
        if more, let oldest = events.last?.seq { out.integer(oldest) } else { out.raw("null") }
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// `[entry,...]` appended to `out`.
    public static func encode(_ events: [TableEvent], into out: inout JSONWriter) {
        out.byte(UInt8(ascii: "["))
        for (index, event) in events.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            encode(event, into: &out)
        }
        out.byte(UInt8(ascii: "]"))
    }

    /// Decodes one entry (for clients and tests). The change id and `from` are not in an entry.
    public static func decodeEntry(_ value: JSONValue) throws(ProtocolError) -> TableEvent {
        let reader = try FieldReader(value, path: "events.")
        let seq = try reader.integer("seq")
        guard seq > 0 else { throw ProtocolError(.invalidValue, "seq must be positive", field: "seq") }
        let time = try reader.optionalInteger("time")
        if let time, time < 0 { throw ProtocolError(.invalidValue, "time must not be negative", field: "time") }
        let author = try reader.object("author")
        let changeReader = try reader.object("change")
        let change = try Change.decode(changeReader, type: try changeReader.string("type"))
        var effects = CollapseEffects()
        if case .object(let members)? = reader.value("collapsed") {
            for (key, flag) in members {
                guard case .bool(let collapsed) = flag else {
                    throw ProtocolError(.wrongType, "collapsed.\(key) must be true or false", field: "collapsed")
                }
                effects.append(CollapseEffect(key: key, collapsed: collapsed))
            }
        }
        return TableEvent(
            seq: UInt64(seq), author: Author(client: try author.string("client"), name: try author.string("name")), changeId: nil,
            change: change, collapsed: effects, time: time.map { UInt64($0) })
    }

    /// Decodes a `history` message or an HTTP page: the entries, newest first, and whether
    /// older ones are kept (`more`, or a non-null `next`).
    public static func decodePage(_ value: JSONValue) throws(ProtocolError) -> (events: [TableEvent], more: Bool) {
        let reader = try FieldReader(value)
        var events: [TableEvent] = []
        for element in try reader.array("events") { events.append(try decodeEntry(element)) }
        if let more = try reader.optionalBool("more") { return (events, more) }
        return (events, try reader.optionalInteger("next") != nil)
    }
}
