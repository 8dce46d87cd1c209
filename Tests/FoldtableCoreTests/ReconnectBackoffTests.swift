import Testing

@testable import FoldtableCore

@Suite struct BackingOffBetweenReconnects {
    @Test func delaysDoubleFromTheBaseUpToTheCap() {
        let backoff = ReconnectBackoff(baseMs: 100, maxMs: 1_000)
        #expect((0..<6).map { backoff.delayMs(attempt: $0, random: 1) } == [100, 200, 400, 800, 1_000, 1_000])
        #expect(backoff.delayMs(attempt: 500, random: 1) == 1_000)
        #expect(backoff.delayMs(attempt: -3, random: 1) == 100)
    }

    @Test func jitterTakesAQuarterOffAtMost() {
        let backoff = ReconnectBackoff(baseMs: 400, maxMs: 10_000)
        #expect(backoff.delayMs(attempt: 0, random: 0) == 300)
        #expect(backoff.delayMs(attempt: 0, random: 0.5) == 350)
        #expect(backoff.delayMs(attempt: 0, random: 7) == 400)
        #expect(backoff.delayMs(attempt: 0, random: -1) == 300)
        let spread = Set((0..<50).map { _ in backoff.delayMs(attempt: 3, random: Double.random(in: 0..<1)) })
        #expect(spread.allSatisfy { (2_400...3_200).contains($0) })
        #expect(spread.count > 1)
    }
}
