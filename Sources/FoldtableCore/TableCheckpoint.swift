/// The storage form of a table and of its log entries: what a store writes so that a table can be
/// rebuilt exactly, change-id window included, after a restart.
///
/// Every form is the wire JSON the protocol already defines (the snapshot, the event, the
/// change), wrapped in a small object, so stored data reads like the protocol article and one
/// codec serves both.
public enum TableCheckpoint {
    /// Storage format version, written into every checkpoint. Bump it with a decoder for the old one.
    public static let version = 1

    /// `{"v":1,"seq":N,"table":{snapshot with every row},"changeIds":[{"id":..,"seq":N,"digest":"<16 hex>"}]}`.
    ///
    /// `changeIds: false` leaves the window out (no `changeIds` key): for a store that keeps it
    /// in slices of its own (see ``encodeChangeIds(_:)``), because the window is ten thousand
    /// ids by default against a table of a few hundred bytes, and a checkpoint that wrote it
    /// whole every thousand events wrote each id ten times.
    public static func encode(_ table: Table, changeIds: Bool = true) -> [UInt8] {
        var out = JSONWriter(capacity: 256 + table.textBytes + table.rowCount * 48)
        out.raw("{\"v\":")
        out.integer(version)
        out.nextKey("seq")
        out.integer(table.seq)
        out.nextKey("table")
        TableSnapshot(table, rows: .all).encode(into: &out)
        if changeIds {
            out.nextKey("changeIds")
            writeChangeIds(table.rememberedChanges, into: &out)
        }
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// A slice of the change-id window, oldest first, as the JSON array a checkpoint's
    /// `changeIds` holds: `[{"id":..,"seq":N,"digest":"<16 hex>"},...]`.
    public static func encodeChangeIds(_ changes: [Table.RememberedChange]) -> [UInt8] {
        var out = JSONWriter(capacity: 2 + changes.count * 64)
        writeChangeIds(changes, into: &out)
        return out.bytes
    }

    /// Decodes ``encodeChangeIds(_:)``.
    public static func decodeChangeIds(_ bytes: some Collection<UInt8>, limits: TableLimits) throws(ProtocolError) -> [Table.RememberedChange] {
        let value = try JSONParser.parse(bytes, limits: parserLimits(limits))
        guard case .array(let elements) = value else {
            throw ProtocolError(.invalidValue, "a slice of change ids is not an array", field: "changeIds")
        }
        return try rememberedChanges(elements)
    }

    private static func writeChangeIds(_ changes: [Table.RememberedChange], into out: inout JSONWriter) {
        out.byte(UInt8(ascii: "["))
        for index in changes.indices {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            out.raw("{\"id\":")
            out.string(changes[index].id)
            out.nextKey("seq")
            out.integer(changes[index].seq)
            // A string: JSON numbers past 2^53 do not survive every parser.
            out.nextKey("digest")
            hexDigest(changes[index].digest, into: &out)
            out.byte(UInt8(ascii: "}"))
        }
        out.byte(UInt8(ascii: "]"))
    }

    private static func rememberedChanges(_ elements: [JSONValue]) throws(ProtocolError) -> [Table.RememberedChange] {
        var remembered: [Table.RememberedChange] = []
        remembered.reserveCapacity(elements.count)
        for element in elements {
            let entry = try FieldReader(element, path: "changeIds.")
            guard let digest = UInt64(try entry.string("digest"), radix: 16) else {
                throw ProtocolError(.invalidValue, "a change id's digest is not 16 hex digits", field: "digest")
            }
            // A stored checkpoint may come from another node (Redis): a negative seq is refused, not converted.
            let seq = try entry.integer("seq")
            guard seq >= 0 else { throw ProtocolError(.invalidValue, "a change id's seq must not be negative", field: "seq") }
            remembered.append(Table.RememberedChange(id: try entry.string("id"), seq: UInt64(seq), digest: digest))
        }
        return remembered
    }

    /// `digest` as a JSON string of 16 lowercase hex digits, zero-padded, written digit by digit:
    /// `String(_:radix:)` allocates a string that must then be padded and escaped, and a
    /// window's slice writes one per change id.
    static func hexDigest(_ digest: UInt64, into out: inout JSONWriter) {
        // Composed on the stack and appended once: eighteen single-byte appends cost more than
        // the digits.
        var text: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &text) { text in
            text[0] = UInt8(ascii: "\"")
            for index in 0..<16 {
                let nibble = UInt8(truncatingIfNeeded: digest >> UInt64(60 - 4 * index)) & 0xF
                text[1 + index] = nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
            }
            text[17] = UInt8(ascii: "\"")
            // Not `out.bytes.append`: that trims the writer's room, which the next write then
            // refills, once per remembered change id of a checkpoint.
            out.raw(UnsafeRawBufferPointer(rebasing: text[0..<18]))
        }
    }

    /// Rebuilds the table written by ``encode(_:changeIds:)``.
    public static func decode(_ bytes: some Collection<UInt8>, limits: TableLimits) throws(ProtocolError) -> Table {
        let value = try JSONParser.parse(bytes, limits: parserLimits(limits))
        let reader = try FieldReader(value, path: "checkpoint.")
        guard try reader.integer("v") == version else {
            throw ProtocolError(.invalidValue, "checkpoint format \(try reader.integer("v")) is not \(version)", field: "v")
        }
        let signedSeq = try reader.integer("seq")
        guard signedSeq >= 0 else { throw ProtocolError(.invalidValue, "the checkpoint's seq must not be negative", field: "seq") }
        let seq = UInt64(signedSeq)
        var table = try TableSnapshot.decode(try reader.object("table").asValue, seq: seq).table(limits: limits)
        // Absent when the window was left out (`changeIds: false`): the table remembers none
        // until its store restores them.
        if reader.has("changeIds") {
            table.restoreRemembered(try rememberedChanges(try reader.array("changeIds")))
        }
        return table
    }

    /// A log entry: the event, its change id's whole key beside it when the key has a scope
    /// (``ChangeIdScope``: members' events show only the id as its author sent it; an entry of
    /// an older version, unscoped, has no key beside it and is read the same), plus the request
    /// when its author gave a change id (the id window needs what was asked, which may name a
    /// section by title where the event names its key).
    ///
    /// `encodedEvent`: the event as ``ServerMessage/event(_:)`` already encoded it for members.
    /// When that form is the whole event (``Change/membersGetWholeForm``) it is copied in as it
    /// is rather than encoded a second time.
    public static func encodeEntry(_ event: TableEvent, request: Change?, encodedEvent: [UInt8]? = nil) -> [UInt8] {
        var out = JSONWriter(capacity: 24 + (encodedEvent?.count ?? 200))
        encodeEntry(event, request: request, encodedEvent: encodedEvent, into: &out)
        return out.bytes
    }

    /// ``encodeEntry(_:request:encodedEvent:)`` appended to `out`: a log writing many entries
    /// reuses one buffer instead of allocating one per event.
    ///
    /// An entry never holds a raw newline byte (JSON strings escape every control character, and
    /// the writer puts no whitespace between tokens), so a log may join entries with newlines.
    public static func encodeEntry(_ event: TableEvent, request: Change?, encodedEvent: [UInt8]?, into out: inout JSONWriter) {
        out.raw("{\"event\":")
        if let encodedEvent, event.change.membersGetWholeForm {
            out.raw(encodedEvent)
        } else {
            ServerMessage.encode(event, into: &out, form: .whole)
        }
        if let key = event.changeId, ChangeIdScope.hasScope(key) {
            out.nextKey("id")
            out.string(key)
        }
        if let request, storesRequest(request, of: event) {
            out.nextKey("request")
            request.encode(into: &out)
        }
        out.byte(UInt8(ascii: "}"))
    }

    /// Whether the entry of `event` is the event as members receive it and nothing more but its
    /// change id's key (most entries): members get the whole event, and no request differs from it.
    /// Such an entry is written from those bytes and the id with ``encodeEntry(eventBytes:changeId:into:)``.
    public static func entryIsEventBytes(_ event: TableEvent, request: Change?) -> Bool {
        guard event.change.membersGetWholeForm else { return false }
        guard let request else { return true }
        return !storesRequest(request, of: event)
    }

    /// The entry of an event that ``entryIsEventBytes(_:request:)``, from the event's bytes as
    /// ``ServerMessage/event(_:)`` encoded them and its change id's key (written when it has a scope).
    public static func encodeEntry(eventBytes: [UInt8], changeId: String?, into out: inout JSONWriter) {
        out.raw("{\"event\":")
        out.raw(eventBytes)
        if let changeId, ChangeIdScope.hasScope(changeId) {
            out.nextKey("id")
            out.string(changeId)
        }
        out.byte(UInt8(ascii: "}"))
    }

    /// Whether an entry keeps the request beside its event: a retry is compared with what was
    /// asked, which differs from the event's change when the table resolved it (a title to a key).
    private static func storesRequest(_ request: Change, of event: TableEvent) -> Bool {
        event.changeId != nil && request != event.change
    }

    /// Decodes ``encodeEntry(_:request:encodedEvent:)``; the request is the event's change when none was stored.
    public static func decodeEntry(_ bytes: some Collection<UInt8>, limits: TableLimits) throws(ProtocolError) -> (
        event: TableEvent, request: Change?
    ) {
        let reader = try FieldReader(try JSONParser.parse(bytes, limits: parserLimits(limits)), path: "entry.")
        var event = try ServerMessage.decodeEvent(try reader.object("event").asValue)
        if let id = try reader.optionalString("id") { event.changeId = id }
        var request: Change?
        if reader.has("request") {
            let requestReader = try reader.object("request")
            request = try Change.decode(requestReader, type: try requestReader.string("type"))
        } else if event.changeId != nil {
            request = event.change
        }
        return (event, request)
    }

    private static func parserLimits(_ limits: TableLimits) -> JSONParser.Limits {
        JSONParser.Limits(maxDepth: 32, maxStringBytes: max(limits.maxTextBytes, 4_096))
    }
}
