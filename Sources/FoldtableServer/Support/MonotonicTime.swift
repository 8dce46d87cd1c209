import Glibc

/// A reading of the monotonic clock in nanoseconds: when a change started, for the latency
/// histograms.
///
/// Not `ContinuousClock.Instant`: its instants are 128-bit `Duration`s, and turning the
/// difference of two into a `Double` goes through the generic integer-to-float conversion,
/// several times per acknowledged change. Here it is one subtraction and one conversion.
public struct MonotonicTime: Sendable, Equatable {
    /// Nanoseconds since an arbitrary start (the system's boot, for `CLOCK_MONOTONIC`).
    public let nanoseconds: UInt64

    public init(nanoseconds: UInt64) {
        self.nanoseconds = nanoseconds
    }

    /// Now (the vDSO answers: no system call).
    @inline(__always) public static var now: MonotonicTime {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return MonotonicTime(nanoseconds: UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec))
    }

    /// Seconds from `self` to `later` (0 if `later` is not later).
    @inline(__always) public func seconds(until later: MonotonicTime) -> Double {
        later.nanoseconds > nanoseconds ? Double(later.nanoseconds &- nanoseconds) * 1e-9 : 0
    }
}
