import FoldtableCore
import Testing

@testable import FoldtableServer

/// Where several nodes share a session (`--redis`), none alone may deliver its changes: the
/// webhook routes refuse, saying why, rather than every node POSTing every change.
@Suite struct WebhookRefusalTests {
    @Test func aSharedSessionsWebhookIsRefusedWithTheReason() throws {
        let cluster = LocalCluster()
        let a = cluster.start("a")
        a.join(1, session: "x")
        cluster.settle()
        for (id, method) in [(UInt64(1), "PUT"), (2, "GET"), (3, "DELETE")] {
            a.hub.httpRequest(
                HTTPRequest(
                    id: id, method: method, path: "/api/v1/sessions/x/webhook",
                    headers: ["Host": "127.0.0.1:8080", "Content-Type": "application/json"],
                    body: Array(#"{"url":"https://hooks.example.com/in"}"#.utf8)))
            cluster.settle()
            let response = try #require(a.transport.responses[id])
            #expect(response.status == 501)
            let error = try JSONParser.parse(response.body)["error"]
            #expect(error?["code"] == .string("webhooks_unavailable"))
            guard case .string(let message)? = error?["message"] else { return }
            #expect(message.contains("--redis"))
        }
    }
}
