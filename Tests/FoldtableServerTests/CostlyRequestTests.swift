import FoldtableCore
import Foundation
import Testing

@testable import FoldtableServer

/// One request cannot make everyone wait or pin memory: the API's rate per address, finds over
/// large tables off the service thread, and exports shared by their readers.
@Suite struct CostlyRequestTests {
    func request(_ method: String, _ path: String, query: [String: String] = [:], peer: String = "10.0.0.1", id: UInt64) -> HTTPRequest {
        HTTPRequest(id: id, method: method, path: path, query: query, headers: ["Host": "127.0.0.1:8080"], peer: peer)
    }

    /// Runs what other threads post until request `id` is answered (a generous deadline: the
    /// work is small, the machine may be busy).
    func waitForAnswer(_ h: Harness, _ id: UInt64) -> HTTPResponse? {
        let deadline = Date().addingTimeInterval(30)
        while h.transport.responses[id] == nil && Date() < deadline {
            h.transport.settle()
            if h.transport.responses[id] == nil { usleep(2_000) }
        }
        return h.transport.responses[id]
    }

    func json(_ response: HTTPResponse?) -> JSONValue? {
        response.flatMap { try? JSONParser.parse($0.body) }
    }

    @Test func theAPIAnswers429WithRetryAfterPastAnAddresssBurstAndRefillsWithTime() {
        let h = Harness { config in
            config.apiRatePerSec = 1
            config.apiBurst = 3
        }
        for id in UInt64(1)...3 { h.hub.httpRequest(request("GET", "/api/v1/sessions", id: id)) }
        #expect((1...3).map { h.transport.responses[UInt64($0)]?.status } == [200, 200, 200])
        h.hub.httpRequest(request("GET", "/api/v1/sessions", id: 4))
        let refused = h.transport.responses[4]
        #expect(refused?.status == 429)
        #expect(refused?.headers["Retry-After"] == "1")
        #expect(json(refused)?["error"]?["code"] == .string("rate_limited"))
        // Another address has its own rate; health checks are not the API's.
        h.hub.httpRequest(request("GET", "/api/v1/sessions", peer: "10.0.0.2", id: 5))
        #expect(h.transport.responses[5]?.status == 200)
        h.hub.httpRequest(request("GET", "/healthz", id: 6))
        #expect(h.transport.responses[6]?.status == 200)
        // A second later the first address has a token again.
        h.transport.clock += 1_000
        h.hub.httpRequest(request("GET", "/api/v1/sessions", id: 7))
        #expect(h.transport.responses[7]?.status == 200)
    }

    @Test func aFindOverALargeTableIsAnsweredLaterFromAnotherThread() throws {
        let h = Harness()
        // The demo's large section has 5,000 rows here: past the size searched inline.
        h.hub.httpRequest(request("GET", "/api/v1/sessions/demo/find", query: ["q": "ITEM 4999"], id: 1))
        // Not answered on the service thread: the answer comes through the service queue.
        #expect(h.transport.responses[1] == nil)
        let answer = try #require(waitForAnswer(h, 1))
        #expect(answer.status == 200)
        guard case .array(let rows)? = json(answer)?["rows"] else {
            Issue.record("no rows in \(String(decoding: answer.body, as: UTF8.self))")
            return
        }
        #expect(!rows.isEmpty)
    }

    @Test func readersOfTheSameExportShareOneBodyUntilTheTableChanges() throws {
        let h = Harness()
        // Two readers before the (large, so encoded elsewhere) export is made, one after.
        h.hub.httpRequest(request("GET", "/api/v1/sessions/demo", id: 1))
        h.hub.httpRequest(request("GET", "/api/v1/sessions/demo", id: 2))
        _ = try #require(waitForAnswer(h, 1))
        _ = try #require(waitForAnswer(h, 2))
        h.hub.httpRequest(request("GET", "/api/v1/sessions/demo", id: 3))
        let first = try #require(waitForAnswer(h, 3))
        let shared = try #require(h.transport.sharedBodies[1])
        #expect(h.transport.sharedBodies[2] === shared && h.transport.sharedBodies[3] === shared)
        #expect(first.status == 200 && first.headers["Content-Type"] == "application/json")
        #expect(first.body == Array(shared.bytes))
        // CSV is another body; so is the table after a change.
        h.hub.httpRequest(request("GET", "/api/v1/sessions/demo", query: ["format": "csv"], id: 4))
        _ = try #require(waitForAnswer(h, 4))
        #expect(h.transport.sharedBodies[4] !== shared)
        h.hub.httpRequest(request("POST", "/api/v1/sessions/demo/collapse-all", id: 5))
        #expect(waitForAnswer(h, 5)?.status == 200)
        h.hub.httpRequest(request("GET", "/api/v1/sessions/demo", id: 6))
        let after = try #require(waitForAnswer(h, 6))
        #expect(h.transport.sharedBodies[6] !== shared)
        #expect(after.body != first.body)
    }

    @Test func theTokenBucketSaysWhenItsNextTokenComes() {
        var bucket = TokenBucket(ratePerSecond: 4, burst: 1, now: 0)
        #expect(bucket.millisecondsUntilToken(now: 0) == 0)
        let took = bucket.take(now: 0)
        #expect(took)
        #expect(bucket.millisecondsUntilToken(now: 0) == 250)
        #expect(bucket.millisecondsUntilToken(now: 100) == 150)
        #expect(!bucket.isFull(now: 100) && bucket.isFull(now: 250))
    }
}
