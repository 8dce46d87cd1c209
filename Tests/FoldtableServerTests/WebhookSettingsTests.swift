import FoldtableCore
import Testing

@testable import FoldtableServer

/// The webhook settings checked with the others at start-up: each refusal one line naming it.
@Suite struct WebhookSettingsTests {
    @Test func anAllowItemThatCannotBeReadOrABacklogTheLogCannotHoldStopsStartUp() {
        var config = ServerConfig()
        #expect(!config.problems().contains { $0.contains("webhook") })
        config.webhookAllow = ["127.0.0.1/32", "10.0.0.0/40"]
        #expect(config.problems().contains { $0.contains("--webhook-allow 10.0.0.0/40") })
        config.webhookAllow = []
        config.webhookBacklogEvents = config.historyKeepEvents + 1
        #expect(config.problems().contains { $0.hasPrefix("--webhook-backlog-events") })
        config.historyEvents = config.webhookBacklogEvents
        #expect(!config.problems().contains { $0.contains("webhook") })
    }
}
