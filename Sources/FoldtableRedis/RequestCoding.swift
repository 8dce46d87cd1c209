import FoldtableCore
import FoldtableServer

/// The stream form of a ``SequencedRequest``: one JSON object in the entry's `req` field,
/// `{"change":{...},"id":"..","by":{"client":"..","name":".."},"node":"..","n":N}`, the change
/// written as a client sends it, so every node decodes the same request from the same bytes.
enum RequestCoding {
    static func encode(_ request: SequencedRequest) -> [UInt8] {
        var out = JSONWriter(capacity: 160)
        out.raw("{\"change\":")
        request.change.encode(into: &out)
        if let id = request.id {
            out.nextKey("id")
            out.string(id)
        }
        out.nextKey("by")
        out.raw("{\"client\":")
        out.string(request.author.client)
        out.nextKey("name")
        out.string(request.author.name)
        out.byte(UInt8(ascii: "}"))
        out.nextKey("node")
        out.string(request.origin.node)
        out.nextKey("n")
        out.integer(request.origin.number)
        out.byte(UInt8(ascii: "}"))
        return out.bytes
    }

    /// Decodes ``encode(_:)``; `position` is the entry's stream ID.
    static func decode(_ bytes: [UInt8], position: String, limits: TableLimits) throws(ProtocolError) -> SequencedRequest {
        let parserLimits = JSONParser.Limits(maxDepth: 32, maxStringBytes: max(limits.maxTextBytes, 4_096))
        let reader = try FieldReader(try JSONParser.parse(bytes, limits: parserLimits), path: "request.")
        let changeReader = try reader.object("change")
        let change = try Change.decode(changeReader, type: try changeReader.string("type"))
        let by = try reader.object("by")
        let number = try reader.integer("n")
        guard number > 0 else { throw ProtocolError(.invalidValue, "a request number must be positive", field: "n") }
        return SequencedRequest(
            change: change, id: try reader.optionalString("id"), author: Author(client: try by.string("client"), name: try by.string("name")),
            origin: RequestOrigin(node: try reader.string("node"), number: UInt64(number)), position: position)
    }
}
