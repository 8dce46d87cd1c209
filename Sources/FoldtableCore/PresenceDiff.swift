/// Who came, went or was renamed in a session since the last `presence` message, and how many
/// members it has now.
///
/// The server sends at most one of these per session per presence interval, so a storm of joins
/// costs each member one message per interval instead of one per join. Past the list threshold a
/// session stops listing its members: diffs then carry the count and a small sample of who
/// joined, never everyone (a list of 10,000 names sent to 10,000 members is the storm again).
public struct PresenceDiff: Equatable, Sendable {
    /// Members in the session now.
    public var count: Int
    /// True when the lists below are exact and a client can keep a complete member list with
    /// them; false past the threshold (then `joined` is a sample and `left`/`renamed` are empty).
    public var complete: Bool
    /// Members who joined (with their current names).
    public var joined: [Author]
    /// Members who changed their display name.
    public var renamed: [Author]
    /// Client ids of members who left.
    public var left: [String]
    /// The whole member list, replacing whatever the client holds: sent when a session comes
    /// back under the threshold, since clients kept no list above it.
    public var members: [Author]?

    /// Most names in the `joined` sample of an incomplete diff.
    public static let sampleLimit = 16

    public init(count: Int, complete: Bool, joined: [Author] = [], renamed: [Author] = [], left: [String] = [], members: [Author]? = nil) {
        self.count = count
        self.complete = complete
        self.joined = joined
        self.renamed = renamed
        self.left = left
        self.members = members
    }

    /// `{"type":"presence","count":2,"complete":true,"joined":[...],...}`; empty lists are left out.
    public var encoded: [UInt8] {
        var out = JSONWriter(capacity: 96 + 40 * (joined.count + renamed.count + (members?.count ?? 0)) + 12 * left.count)
        out.raw("{\"type\":\"presence\",\"count\":")
        out.integer(UInt64(count))
        out.nextKey("complete")
        out.bool(complete)
        if let members {
            out.nextKey("members")
            ServerMessage.members(members, into: &out)
        }
        if !joined.isEmpty {
            out.nextKey("joined")
            ServerMessage.members(joined, into: &out)
        }
        if !renamed.isEmpty {
            out.nextKey("renamed")
            ServerMessage.members(renamed, into: &out)
        }
        if !left.isEmpty {
            out.nextKey("left")
            out.byte(UInt8(ascii: "["))
            for (index, client) in left.enumerated() {
                if index > 0 { out.byte(UInt8(ascii: ",")) }
                out.string(client)
            }
            out.byte(UInt8(ascii: "]"))
        }
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// Reads the fields of a `presence` message.
    public static func decode(_ reader: FieldReader) throws(ProtocolError) -> PresenceDiff {
        func authors(_ key: String) throws(ProtocolError) -> [Author] {
            guard reader.has(key) else { return [] }
            var result: [Author] = []
            for element in try reader.array(key) {
                let entry = try FieldReader(element, path: "\(key).")
                result.append(Author(client: try entry.string("client"), name: try entry.string("name")))
            }
            return result
        }
        var left: [String] = []
        if reader.has("left") {
            for element in try reader.array("left") {
                guard case .string(let client) = element else { throw ProtocolError(.invalidValue, "left must list client ids", field: "left") }
                left.append(client)
            }
        }
        let count = try reader.integer("count")
        guard count >= 0 else { throw ProtocolError(.invalidValue, "count must not be negative", field: "count") }
        return PresenceDiff(
            count: Int(count), complete: try reader.bool("complete"), joined: try authors("joined"), renamed: try authors("renamed"),
            left: left, members: reader.has("members") ? try authors("members") : nil)
    }
}
