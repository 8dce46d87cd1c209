import FoldtableCore
import Testing

@testable import FoldtableServer

/// The webhook settings checked with the others at start-up: each refusal one line naming it.
@Suite struct WebhookSettingsTests {
    @Test func anAllowItemThatCannotBeReadStopsStartUp() {
        var config = ServerConfig()
        #expect(!config.problems().contains { $0.contains("webhook") })
        config.webhookAllow = ["127.0.0.1/32", "10.0.0.0/40"]
        #expect(config.problems().contains { $0.contains("--webhook-allow 10.0.0.0/40") })
    }

    @Test func aBacklogIsBoundedByWhatTheLogKeepsAndAShortHistoryStillStarts() {
        var config = ServerConfig()
        config.historyEvents = 10
        config.historyKeepEvents = 10
        #expect(config.problems().isEmpty)
        #expect(config.webhookBacklogBound == 10)
        config.historyKeepEvents = 5_000
        #expect(config.webhookBacklogBound == config.webhookBacklogEvents)
    }
}
