import FoldtableCore

/// The private views a session keeps for token users who are not in them right now, by
/// whose they are (`ChangeIdScope`, `u:<sub>`): for each, section key -> collapsed. What a
/// ``SessionStore`` keeps beside a session's checkpoint, so that a member finds its own view
/// again after the session was evicted or the server restarted.
///
/// Bounded by `SessionRoom.savedViewsMax` views, each by the table's sections.
public struct SavedViews: Equatable, Sendable {
    public var byScope: [String: [String: Bool]]

    public init(_ byScope: [String: [String: Bool]] = [:]) {
        self.byScope = byScope
    }

    public var isEmpty: Bool { byScope.isEmpty }

    /// Storage format version, written first. Bump it with a decoder for the old one.
    public static let version = 1

    /// `{"v":1,"views":{"u:ana":{"sec1":true,"sec2":false},...}}`, scopes and keys sorted so
    /// the same views always encode to the same bytes.
    public func encoded() -> [UInt8] {
        var out = JSONWriter(capacity: 32 + byScope.reduce(0) { $0 + 16 + $1.value.count * 24 })
        out.raw("{\"v\":")
        out.integer(Self.version)
        out.nextKey("views")
        out.byte(UInt8(ascii: "{"))
        for (index, scope) in byScope.keys.sorted().enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            out.string(scope)
            out.byte(UInt8(ascii: ":"))
            out.byte(UInt8(ascii: "{"))
            let view = byScope[scope] ?? [:]
            for (position, key) in view.keys.sorted().enumerated() {
                if position > 0 { out.byte(UInt8(ascii: ",")) }
                out.string(key)
                out.byte(UInt8(ascii: ":"))
                out.bool(view[key] ?? false)
            }
            out.byte(UInt8(ascii: "}"))
        }
        out.raw("}}")
        return out.bytes
    }

    /// How deep and how long a string saved views may hold: scopes are `u:` and a token's `sub`,
    /// which a token may make as long as the parser's default string limit (4,096 bytes): a
    /// view its owner could save must never make its session fail to load.
    static let parserLimits = JSONParser.Limits(maxDepth: 8, maxStringBytes: 65_536)

    /// Decodes ``encoded()``; throws on anything else, naming what is wrong.
    public init(decoding bytes: some Collection<UInt8>) throws(ProtocolError) {
        let reader = try FieldReader(try JSONParser.parse(bytes, limits: Self.parserLimits), path: "views.")
        guard try reader.integer("v") == Self.version else {
            throw ProtocolError(.invalidValue, "saved views format \(try reader.integer("v")) is not \(Self.version)", field: "v")
        }
        guard case .object(let scopes)? = reader.value("views") else {
            throw ProtocolError(.invalidValue, "saved views are not an object", field: "views")
        }
        var byScope: [String: [String: Bool]] = [:]
        byScope.reserveCapacity(scopes.count)
        for (scope, value) in scopes {
            guard case .object(let states) = value else {
                throw ProtocolError(.invalidValue, "the saved view of \"\(scope.prefix(64))\" is not an object", field: "views")
            }
            var view: [String: Bool] = [:]
            view.reserveCapacity(states.count)
            for (key, state) in states {
                guard case .bool(let collapsed) = state else {
                    throw ProtocolError(.invalidValue, "a saved view's state of \"\(key.prefix(64))\" is not a boolean", field: "views")
                }
                view[key] = collapsed
            }
            byScope[scope] = view
        }
        self.byScope = byScope
    }
}
