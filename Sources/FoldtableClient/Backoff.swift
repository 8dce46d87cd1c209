/// How long to wait before reconnect attempt `n`: exponential with a cap and jitter, the same
/// policy as the web client, so a restarted server is not hit by every client at once.
public struct Backoff: Equatable, Sendable {
    /// The first delay, in milliseconds. Default 400.
    public var baseMs: Int
    /// The longest delay, in milliseconds. Default 10,000.
    public var maxMs: Int

    public init(baseMs: Int = 400, maxMs: Int = 10_000) {
        self.baseMs = baseMs
        self.maxMs = maxMs
    }

    /// The delay before attempt `attempt` (0 = the first retry). `random` in 0..<1 picks the
    /// jitter: the delay is 75 % to 100 % of the exponential value.
    public func delayMs(attempt: Int, random: Double) -> Int {
        let exponent = min(max(0, attempt), 20)
        let raw = min(maxMs, baseMs << exponent)
        let factor = 0.75 + min(max(0, random), 1) / 4
        return Int(Double(raw) * factor)
    }
}
