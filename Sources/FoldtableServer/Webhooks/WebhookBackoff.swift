/// How long a webhook waits before trying a failed delivery again: doubling from `baseMs` up
/// to `maxMs`, with "equal jitter" (half the step fixed, half random) so that many sessions
/// failing against one receiver do not retry in lockstep, yet each wait grows.
public struct WebhookBackoff: Sendable, Equatable {
    public var baseMs: UInt64
    public var maxMs: UInt64

    public init(baseMs: UInt64, maxMs: UInt64) {
        self.baseMs = max(1, baseMs)
        self.maxMs = max(self.baseMs, maxMs)
    }

    /// The wait before try `attempt + 1` after `attempt` consecutive failures (1 or more);
    /// `jitter` in 0..<1 (random in production, fixed in tests).
    public func delayMs(afterFailures attempt: Int, jitter: Double) -> UInt64 {
        // Doubling stops at the cap: past 2^40 ms the shift alone would overflow, long after
        // the cap is reached.
        let doublings = UInt64(min(max(attempt, 1) - 1, 40))
        let (grown, overflow) = baseMs.multipliedReportingOverflow(by: 1 << doublings)
        let step = overflow ? maxMs : min(grown, maxMs)
        let half = step / 2
        let spread = Double(step - half) * min(max(jitter, 0), 0.999_999)
        return half + UInt64(spread)
    }
}
