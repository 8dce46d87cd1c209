/// How long a ``RedisClient`` waits before reconnect attempt `n`: exponential with a cap and
/// jitter, so several nodes that lost the same Redis do not all knock at the same instant when
/// it comes back. The same shape as the clients' reconnect policy (75 % to 100 % of the value).
public struct ReconnectBackoff: Equatable, Sendable {
    /// The first delay, in milliseconds. Default 100.
    public var baseMs: Int
    /// The longest delay, in milliseconds. Default 5,000.
    public var maxMs: Int

    public init(baseMs: Int = 100, maxMs: Int = 5_000) {
        self.baseMs = baseMs
        self.maxMs = maxMs
    }

    /// The delay before attempt `attempt` (0 = the first retry after a failed attempt). `random`
    /// in 0..<1 picks the jitter: the delay is 75 % to 100 % of the exponential value.
    public func delayMs(attempt: Int, random: Double) -> Int {
        let exponent = min(max(0, attempt), 20)
        let raw = min(max(0, maxMs), max(0, baseMs) << exponent)
        let factor = 0.75 + min(max(0, random), 1) / 4
        return Int(Double(raw) * factor)
    }
}
