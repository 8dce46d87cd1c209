import Glibc

/// The wall clock, read once to relate it to the monotonic clock the sessions run on: events
/// carry the Unix time they were committed (`TableEvent.time`), and a session derives it from
/// the `now` its input already carries plus this offset, instead of reading the wall clock for
/// every change. A step of the wall clock after start-up (not NTP's slewing, which the
/// monotonic clock follows too) is not seen until the process restarts.
public enum UnixClock {
    /// Milliseconds since the Unix epoch, now.
    public static func nowMilliseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return UInt64(max(0, time.tv_sec)) &* 1_000 &+ UInt64(max(0, time.tv_nsec)) / 1_000_000
    }

    /// The Unix time in milliseconds minus `monotonic` (a monotonic clock's milliseconds read
    /// just now): what turns that clock's later readings into Unix times.
    public static func offsetMilliseconds(monotonic: UInt64) -> Int64 {
        Int64(clamping: nowMilliseconds()) &- Int64(clamping: monotonic)
    }
}
