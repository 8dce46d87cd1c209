import FoldtableCore
import Testing

@testable import FoldtableClient

@Suite struct ServerUpdateTests {
    @Test func everyServerMessageDecodes() throws {
        #expect(try ServerUpdate.decode(ServerMessage.ack(id: "k-1", seq: 4)) == .ack(id: "k-1", seq: 4))
        #expect(
            try ServerUpdate.decode(ServerMessage.error(ProtocolError(.unknownSection, "no section has the key \"x\"", field: "section"), id: "k-2"))
                == .error(ServerError(id: "k-2", code: "unknown_section", field: "section", message: "no section has the key \"x\"")))
        #expect(try ServerUpdate.decode(ServerMessage.busy(section: "big", busy: true)) == .busy(section: "big", busy: true))
        #expect(
            try ServerUpdate.decode(ServerMessage.presence(PresenceDiff(count: 1, complete: true, left: ["c2"])))
                == .presence(PresenceDiff(count: 1, complete: true, left: ["c2"])))
        let full = PresenceDiff(count: 2, complete: true, members: [.init(client: "c1", name: "ana"), .init(client: "c3", name: "cy")])
        #expect(try ServerUpdate.decode(ServerMessage.presence(full)) == .presence(full))
        #expect(
            try ServerUpdate.decode(ServerMessage.sessions([("demo", 2)])) == .sessions([.init(name: "demo", members: 2)]))
        let rows = [Row(key: "r1", label: "A", value: "1", detail: "d")]
        #expect(
            try ServerUpdate.decode(ServerMessage.rows(section: "s", seq: 3, from: 0, total: 1, rows: rows[...], final: true))
                == .rows(.init(section: "s", seq: 3, from: 0, total: 1, rows: rows, final: true)))
        guard case .welcome(let welcome) = try Wire.welcome(try Wire.smallTable(), recovered: false) else {
            Issue.record("not a welcome")
            return
        }
        #expect(welcome.recovered == false)
        #expect(welcome.table.sections.count == 4)
        #expect(try ServerUpdate.decode(Array("{\"type\":\"future\",\"x\":1}".utf8)) == .other(type: "future"))
    }

    @Test func malformedMessagesAreErrorsNotCrashes() {
        let bad = [
            "", "{", "[]", "{\"type\":1}", "{\"type\":\"ack\",\"id\":\"x\"}", "{\"type\":\"ack\",\"id\":\"x\",\"seq\":-1}",
            "{\"type\":\"rows\",\"section\":\"s\",\"seq\":1,\"from\":-3,\"total\":1,\"rows\":[],\"final\":true}",
            "{\"type\":\"presence\",\"count\":-1,\"complete\":true}",
            "{\"type\":\"presence\",\"count\":1,\"complete\":true,\"left\":[1]}",
            "{\"type\":\"presence\",\"count\":1,\"complete\":true,\"joined\":[{\"client\":\"c\"}]}",
            "{\"type\":\"event\",\"seq\":1,\"by\":{\"client\":\"c\",\"name\":\"n\"},\"change\":{\"type\":\"nope\"},\"collapsed\":{}}",
            "{\"type\":\"welcome\",\"session\":\"d\",\"client\":\"c\",\"name\":\"n\",\"epoch\":\"e\",\"seq\":0,\"table\":[],\"presence\":[]}",
            String(repeating: "[", count: 100),
        ]
        for text in bad {
            #expect(throws: ProtocolError.self, "\(text)") { try ServerUpdate.decode(Array(text.utf8)) }
        }
    }
}
