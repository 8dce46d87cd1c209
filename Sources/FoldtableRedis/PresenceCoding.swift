import FoldtableCore
import FoldtableServer

/// The Redis form of one node's shared members (see ``RedisPresence``): one JSON object,
/// `{"n":1234,"m":[{"client":"a.c1","name":"Ana"},...]}`, the count and at most
/// `presenceListMax` members in join order.
enum PresenceCoding {
    static func encode(count: Int, members: [Author]) -> [UInt8] {
        var out = JSONWriter(capacity: 24 + 40 * members.count)
        out.raw("{\"n\":")
        out.integer(UInt64(max(0, count)))
        out.nextKey("m")
        out.byte(UInt8(ascii: "["))
        for (index, member) in members.enumerated() {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            ServerMessage.author(member, into: &out)
        }
        out.raw("]}")
        return out.bytes
    }

    /// Decodes ``encode(count:members:)`` as node `node` shared it under `version`.
    static func decode(_ bytes: [UInt8], node: String, version: String) throws(ProtocolError) -> NodePresence {
        let reader = try FieldReader(try JSONParser.parse(bytes, limits: JSONParser.Limits(maxDepth: 4, maxStringBytes: 4_096)), path: "presence.")
        let count = try reader.integer("n")
        guard count >= 0 else { throw ProtocolError(.invalidValue, "a member count must not be negative", field: "n") }
        var members: [Author] = []
        for element in try reader.array("m") {
            let member = try FieldReader(element, path: "presence.m.")
            members.append(Author(client: try member.string("client"), name: try member.string("name")))
        }
        return NodePresence(node: node, count: Int(count), members: members, version: version)
    }
}
