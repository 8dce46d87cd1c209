/// How long to wait before reconnect attempt `n`: exponential with a cap and jitter, so the many
/// parties that lost the same peer do not all knock at the same instant when it comes back (the
/// terminal client after a server restart, every node after a Redis restart). The web client
/// follows the same policy (`web/protocol.js`). Pure: the caller supplies the randomness.
public struct ReconnectBackoff: Equatable, Sendable {
    /// The first delay, in milliseconds.
    public var baseMs: Int
    /// The longest delay, in milliseconds.
    public var maxMs: Int

    public init(baseMs: Int, maxMs: Int) {
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
