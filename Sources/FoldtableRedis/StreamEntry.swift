/// One field of a stream entry, binary-safe. Fields keep the order they were added in.
public struct StreamField: Equatable, Sendable {
    public var name: String
    public var value: [UInt8]

    public init(_ name: String, _ value: [UInt8]) {
        self.name = name
        self.value = value
    }

    public init(_ name: String, _ value: String) {
        self.init(name, Array(value.utf8))
    }
}

/// One entry of a Redis Stream, as XRANGE, XREVRANGE and XREAD return it.
public struct StreamEntry: Equatable, Sendable {
    public var id: StreamID
    public var fields: [StreamField]

    public init(id: StreamID, fields: [StreamField]) {
        self.id = id
        self.fields = fields
    }

    /// The value of the first field named `name`.
    public subscript(_ name: String) -> [UInt8]? {
        fields.first { $0.name == name }?.value
    }

    /// Reads `[id, [name, value, ...]]`; `nil` for any other shape.
    init?(_ reply: RedisReply) {
        guard let pair = reply.elements, pair.count == 2, let text = pair[0].string, let id = StreamID(text),
            let flat = pair[1].elements, flat.count % 2 == 0
        else { return nil }
        var fields: [StreamField] = []
        fields.reserveCapacity(flat.count / 2)
        for index in stride(from: 0, to: flat.count, by: 2) {
            guard let name = flat[index].string, case .bulk(let value) = flat[index + 1] else { return nil }
            fields.append(StreamField(name, value))
        }
        self.init(id: id, fields: fields)
    }

    /// Reads an array of entries; `nil` if any is malformed.
    static func list(_ reply: RedisReply) -> [StreamEntry]? {
        guard let elements = reply.elements else { return nil }
        var entries: [StreamEntry] = []
        entries.reserveCapacity(elements.count)
        for element in elements {
            guard let entry = StreamEntry(element) else { return nil }
            entries.append(entry)
        }
        return entries
    }
}

/// The entries XREAD returned for one stream.
public struct StreamBatch: Equatable, Sendable {
    public var key: String
    public var entries: [StreamEntry]

    public init(key: String, entries: [StreamEntry]) {
        self.key = key
        self.entries = entries
    }
}

/// How XADD or XTRIM trims a stream. Approximate trimming (`~`, the default) lets Redis drop
/// whole internal nodes only, which is much cheaper; it may keep a few more entries.
public enum StreamTrim: Equatable, Sendable {
    /// Keep at most this many entries (`MAXLEN`).
    case maxLength(Int, approximate: Bool = true)
    /// Drop entries older than this ID (`MINID`, Redis 6.2+): a snapshot covers them.
    case minimumID(StreamID, approximate: Bool = true)

    var arguments: [any RedisArgument] {
        switch self {
        case .maxLength(let count, let approximate): return ["MAXLEN", approximate ? "~" : "=", count]
        case .minimumID(let id, let approximate): return ["MINID", approximate ? "~" : "=", id]
        }
    }
}

/// One end of an XRANGE or XREVRANGE.
public enum StreamBound: Equatable, Sendable {
    /// No bound: the stream's first (start) or last (end) entry.
    case unbounded
    case including(StreamID)
    /// Everything after (start) or before (end) this ID, not it (`(id`, Redis 6.2+).
    case excluding(StreamID)

    func argument(start: Bool) -> String {
        switch self {
        case .unbounded: return start ? "-" : "+"
        case .including(let id): return id.description
        case .excluding(let id): return "(" + id.description
        }
    }
}
