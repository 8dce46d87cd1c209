import Testing

@testable import FoldtableClient

@Suite struct CollapseIntentsTests {
    @Test func aFirstPressAsksForTheOppositeOfWhatTheReplicaShows() {
        let intents = CollapseIntents()
        #expect(intents.target(for: "mac", shown: false, unanswered: { _ in true }) == true)
        #expect(intents.target(for: "mac", shown: true, unanswered: { _ in true }) == false)
    }

    @Test func aSecondPressWhileTheFirstIsUnansweredAsksForWhereItStarted() {
        var intents = CollapseIntents()
        let first = intents.target(for: "mac", shown: false, unanswered: { _ in true })
        intents.record("mac", id: "c-1", collapsed: first)
        // Offline: the replica still shows it expanded, but the user asked for collapsed.
        #expect(intents.target(for: "mac", shown: false, unanswered: { $0 == "c-1" }) == false)
    }

    @Test func anAnsweredPressNoLongerCountsTheReplicaDecides() {
        var intents = CollapseIntents()
        intents.record("mac", id: "c-1", collapsed: true)
        // Acknowledged, and someone expanded it since: the replica shows expanded.
        #expect(intents.target(for: "mac", shown: false, unanswered: { _ in false }) == true)
    }

    @Test func pressesOnOtherSectionsDoNotCount() {
        var intents = CollapseIntents()
        intents.record("mac", id: "c-1", collapsed: true)
        #expect(intents.target(for: "ipad", shown: true, unanswered: { _ in true }) == false)
    }
}
