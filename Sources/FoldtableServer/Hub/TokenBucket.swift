/// A token bucket: `rate` actions a second sustained, `burst` at once. Pure (time is passed in).
struct TokenBucket {
    private let rate: Double
    private let burst: Double
    private var tokens: Double
    private(set) var last: UInt64

    /// A full bucket at `now` (milliseconds).
    init(ratePerSecond: Int, burst: Int, now: UInt64) {
        self.rate = Double(max(1, ratePerSecond))
        self.burst = Double(max(1, burst))
        self.tokens = Double(max(1, burst))
        self.last = now
    }

    /// Takes one token if there is one at `now` (milliseconds, never going back).
    mutating func take(now: UInt64) -> Bool {
        if now > last {
            tokens = min(burst, tokens + Double(now - last) * rate / 1_000)
            last = now
        }
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }

    /// Milliseconds from `now` until the next token (0 when one is there): a `Retry-After`.
    func millisecondsUntilToken(now: UInt64) -> UInt64 {
        let have = min(burst, tokens + Double(now > last ? now - last : 0) * rate / 1_000)
        guard have < 1 else { return 0 }
        return UInt64(((1 - have) * 1_000 / rate).rounded(.up))
    }

    /// Whether the bucket is full at `now`: forgetting it then changes nothing.
    func isFull(now: UInt64) -> Bool {
        tokens + Double(now > last ? now - last : 0) * rate / 1_000 >= burst
    }
}
