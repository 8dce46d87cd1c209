import FoldtableCore
import Testing

@testable import FoldtableServer

/// The delivery state machine without sockets or a store: one in flight, in seq order, the
/// cursor moved only by an acknowledgement, retries with growing waits, pauses at the bounds.
@Suite struct WebhookStateTests {
    let limits = WebhookState.Limits(maxBacklogEvents: 10, pauseAfterMs: 60_000, readBatch: 4, backoff: WebhookBackoff(baseMs: 1_000, maxMs: 8_000))

    func event(_ seq: UInt64) -> TableEvent {
        TableEvent(seq: seq, author: Author(client: "c1", name: "ana"), changeId: nil, change: .setAll(collapsed: true), collapsed: CollapseEffects())
    }

    func events(_ seqs: ClosedRange<UInt64>) -> [TableEvent] { seqs.map(event) }

    @Test func aStartReadsTheLogFromTheCursorAndSendsItsEventsOneAtATimeInOrder() {
        var state = WebhookState(delivered: 5, paused: nil, limits: limits)
        #expect(state.start() == [.read(after: 5, limit: 4)])
        #expect(state.read(events(6...8), now: 0) == [.send(event(6))])
        // A commit while a delivery is in flight only moves the head.
        #expect(state.committed(through: 9, now: 0) == [])
        #expect(state.finished(seq: 6, .delivered, now: 0, jitter: 0) == [.saveCursor(6), .send(event(7))])
        #expect(state.finished(seq: 7, .delivered, now: 0, jitter: 0) == [.saveCursor(7), .send(event(8))])
        #expect(state.finished(seq: 8, .delivered, now: 0, jitter: 0) == [.saveCursor(8), .read(after: 8, limit: 1)])
        #expect(state.read(events(9...9), now: 0) == [.send(event(9))])
        #expect(state.finished(seq: 9, .delivered, now: 0, jitter: 0) == [.saveCursor(9)])
        #expect(state.delivered == 9)
        #expect(state.backlog == 0)
        #expect(!state.isBusy)
    }

    @Test func aPageThatReachesBackPastTheCursorIsNotDeliveredTwice() {
        var state = WebhookState(delivered: 3, paused: nil, limits: limits)
        _ = state.start()
        // The log's newest page, asked past its head: it holds 1...5.
        #expect(state.read(events(1...5), now: 0) == [.send(event(4))])
    }

    @Test func aFailedDeliveryIsRetriedWithTheSameEventAfterGrowingWaitsAndTheCursorStays() {
        var state = WebhookState(delivered: 0, paused: nil, limits: limits)
        _ = state.start()
        _ = state.read(events(1...2), now: 0)
        #expect(state.finished(seq: 1, .failed, now: 1_000, jitter: 0) == [.retryAfter(500)])
        #expect(state.committed(through: 3, now: 1_100) == [])
        #expect(state.retry(now: 1_500) == [.send(event(1))])
        #expect(state.finished(seq: 1, .failed, now: 2_000, jitter: 0) == [.retryAfter(1_000)])
        #expect(state.retry(now: 3_000) == [.send(event(1))])
        #expect(state.finished(seq: 1, .failed, now: 3_500, jitter: 0.5) == [.retryAfter(3_000)])
        #expect(state.delivered == 0)
        #expect(state.failures == 3)
        _ = state.retry(now: 6_500)
        #expect(state.finished(seq: 1, .delivered, now: 7_000, jitter: 0) == [.saveCursor(1), .send(event(2))])
        #expect(state.failures == 0)
    }

    @Test func anOutcomeForASeqNotInFlightIsIgnored() {
        var state = WebhookState(delivered: 0, paused: nil, limits: limits)
        _ = state.start()
        _ = state.read(events(1...2), now: 0)
        #expect(state.finished(seq: 2, .delivered, now: 0, jitter: 0) == [])
        #expect(state.delivered == 0)
        #expect(state.inFlight == 1)
    }

    @Test func aBacklogOverItsBoundPausesAndTheCursorIsSavedWithThePause() {
        var state = WebhookState(delivered: 0, paused: nil, limits: limits)
        _ = state.start()
        _ = state.read(events(1...1), now: 0)
        _ = state.finished(seq: 1, .failed, now: 0, jitter: 0)
        #expect(state.committed(through: 10, now: 10) == [])
        #expect(state.committed(through: 11, now: 20) == [.paused(.backlog)])
        #expect(state.paused == .backlog)
        // Paused: no retry sends, no reads.
        #expect(state.retry(now: 5_000) == [])
        #expect(state.committed(through: 12, now: 30) == [])
    }

    @Test func aReceiverFailingLongerThanItsBoundIsPaused() {
        var state = WebhookState(delivered: 0, paused: nil, limits: limits)
        _ = state.start()
        _ = state.read(events(1...1), now: 0)
        #expect(state.finished(seq: 1, .failed, now: 1_000, jitter: 0) == [.retryAfter(500)])
        _ = state.retry(now: 59_000)
        #expect(state.finished(seq: 1, .failed, now: 61_000, jitter: 0) == [.paused(.failing)])
    }

    @Test func aLogThatNoLongerHoldsTheNextSeqPausesAsTrimmed() {
        var state = WebhookState(delivered: 2, paused: nil, limits: limits)
        _ = state.start()
        #expect(state.read(events(5...6), now: 0) == [.paused(.trimmed)])
        var told = WebhookState(delivered: 2, paused: nil, limits: limits)
        _ = told.start()
        _ = told.read([], now: 0)
        #expect(told.committed(through: 4, now: 0) == [.read(after: 2, limit: 2)])
        #expect(told.read([], now: 0) == [.paused(.trimmed)])
    }

    @Test func aFailedReadIsTriedAgainLaterWithoutPausing() {
        var state = WebhookState(delivered: 2, paused: nil, limits: limits)
        #expect(state.start() == [.read(after: 2, limit: 4)])
        #expect(state.committed(through: 3, now: 0) == [])
        #expect(state.readFailed() == [.retryAfter(8_000)])
        #expect(state.paused == nil)
        #expect(state.retry(now: 8_000) == [.read(after: 2, limit: 4)])
        #expect(state.read(events(3...3), now: 8_001) == [.send(event(3))])
    }

    @Test func resumingDropsTheBacklogAndGoesOnFromTheNextChange() {
        var state = WebhookState(delivered: 0, paused: .backlog, limits: limits)
        #expect(state.start() == [])
        #expect(state.resume(head: 40) == [.saveCursor(40)])
        #expect(state.paused == nil)
        #expect(state.delivered == 40)
        #expect(state.committed(through: 41, now: 0) == [.read(after: 40, limit: 1)])
        #expect(state.read(events(41...41), now: 0) == [.send(event(41))])
    }

    @Test func committedEventsAreTakenWithoutAReadWhenCaughtUpAndReadOnlyToCatchUp() {
        var state = WebhookState(delivered: 0, paused: nil, limits: limits)
        _ = state.start()
        #expect(state.read([], now: 0) == [])
        // Caught up: the commit's events are sent as they are, no read.
        #expect(state.committed(through: 2, events: events(1...2), now: 0) == [.send(event(1))])
        #expect(state.committed(through: 3, events: events(3...3), now: 0) == [])
        #expect(state.finished(seq: 1, .delivered, now: 0, jitter: 0) == [.saveCursor(1), .send(event(2))])
        #expect(state.finished(seq: 2, .delivered, now: 0, jitter: 0) == [.saveCursor(2), .send(event(3))])
        #expect(state.finished(seq: 3, .delivered, now: 0, jitter: 0) == [.saveCursor(3)])
        // More than a page behind: the events are not kept, the log is read, exactly to the head.
        _ = state.committed(through: 4, events: events(4...4), now: 0)
        #expect(state.committed(through: 9, events: events(5...9), now: 0) == [])
        #expect(state.finished(seq: 4, .delivered, now: 0, jitter: 0) == [.saveCursor(4), .read(after: 4, limit: 4)])
        #expect(state.read(events(5...8), now: 0) == [.send(event(5))])
        // A commit while behind (pending does not reach the head) is not taken either.
        #expect(state.committed(through: 10, events: events(10...10), now: 0) == [])
        for seq in UInt64(5)...7 { _ = state.finished(seq: seq, .delivered, now: 0, jitter: 0) }
        #expect(state.finished(seq: 8, .delivered, now: 0, jitter: 0) == [.saveCursor(8), .read(after: 8, limit: 2)])
        #expect(state.read(events(9...10), now: 0) == [.send(event(9))])
        _ = state.finished(seq: 9, .delivered, now: 0, jitter: 0)
        #expect(state.finished(seq: 10, .delivered, now: 0, jitter: 0) == [.saveCursor(10)])
        #expect(!state.isBusy)
    }

    @Test func aPageShortOfWhatWasAskedEndsTheStartsReadingWithoutAnEmptyReadAfter() {
        var state = WebhookState(delivered: 0, paused: nil, limits: limits)
        #expect(state.start() == [.read(after: 0, limit: 4)])
        #expect(state.read(events(1...2), now: 0) == [.send(event(1))])
        _ = state.finished(seq: 1, .delivered, now: 0, jitter: 0)
        #expect(state.finished(seq: 2, .delivered, now: 0, jitter: 0) == [.saveCursor(2)])
        #expect(!state.isBusy)
    }

    @Test func aResumeDuringADeliveryForgetsItAndItsLateReplyMovesNothing() {
        var state = WebhookState(delivered: 0, paused: nil, limits: limits)
        _ = state.start()
        #expect(state.read(events(1...1), now: 0) == [.send(event(1))])
        #expect(state.committed(through: 11, now: 0) == [.paused(.backlog)])
        #expect(state.resume(head: 11) == [.saveCursor(11)])
        #expect(!state.isBusy)
        // The reply of the delivery of 1 comes after the resume: the cursor stays at 11.
        #expect(state.finished(seq: 1, .delivered, now: 0, jitter: 0) == [])
        #expect(state.delivered == 11)
        #expect(state.committed(through: 12, events: events(12...12), now: 0) == [.send(event(12))])
    }

    @Test func theLagCountsFromTheFirstChangeLeftUndeliveredUntilTheReceiverCatchesUp() {
        var state = WebhookState(delivered: 0, paused: nil, limits: limits)
        _ = state.start()
        _ = state.read([], now: 0)
        #expect(state.lagMs(now: 50) == 0)
        _ = state.committed(through: 1, events: events(1...1), now: 100)
        _ = state.committed(through: 2, events: events(2...2), now: 150)
        #expect(state.lagMs(now: 400) == 300)
        _ = state.finished(seq: 1, .delivered, now: 400, jitter: 0)
        #expect(state.lagMs(now: 500) == 400)
        _ = state.finished(seq: 2, .delivered, now: 500, jitter: 0)
        #expect(state.lagMs(now: 600) == 0)
    }

    @Test func aFullPageIsFollowedByAnotherReadEvenWithoutACommit() {
        var state = WebhookState(delivered: 0, paused: nil, limits: limits)
        _ = state.start()
        _ = state.read(events(1...4), now: 0)
        for seq in UInt64(1)...3 { _ = state.finished(seq: seq, .delivered, now: 0, jitter: 0) }
        #expect(state.finished(seq: 4, .delivered, now: 0, jitter: 0) == [.saveCursor(4), .read(after: 4, limit: 4)])
        #expect(state.read([], now: 0) == [])
        #expect(!state.isBusy)
    }

    @Test func backoffDoublesUpToItsCapWithHalfOfEachStepJittered() {
        let backoff = WebhookBackoff(baseMs: 1_000, maxMs: 8_000)
        #expect(backoff.delayMs(afterFailures: 1, jitter: 0) == 500)
        #expect(backoff.delayMs(afterFailures: 1, jitter: 0.999_999) == 999)
        #expect(backoff.delayMs(afterFailures: 2, jitter: 0) == 1_000)
        #expect(backoff.delayMs(afterFailures: 3, jitter: 0) == 2_000)
        #expect(backoff.delayMs(afterFailures: 4, jitter: 0) == 4_000)
        #expect(backoff.delayMs(afterFailures: 5, jitter: 0) == 4_000)
        #expect(backoff.delayMs(afterFailures: 5, jitter: 0.5) == 6_000)
        #expect(backoff.delayMs(afterFailures: 1_000, jitter: 1) <= 8_000)
        #expect(backoff.delayMs(afterFailures: Int.max, jitter: 0) == 4_000)
        #expect(WebhookBackoff(baseMs: 1 << 62, maxMs: UInt64.max).delayMs(afterFailures: 10, jitter: 0) == UInt64.max / 2)
    }

    @Test func theBodyIsTheHistoryEntryWithTheSessionInFront() throws {
        let body = Webhooks.body(session: "s-1", event: event(7))
        let value = try JSONParser.parse(body)
        #expect(value["session"] == .string("s-1"))
        #expect(value["seq"] == .integer(7))
        #expect(value["author"]?["name"] == .string("ana"))
        #expect(value["change"]?["type"] == .string("setAll"))
    }
}
