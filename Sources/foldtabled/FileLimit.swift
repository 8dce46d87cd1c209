import Glibc

/// Every connection is a file descriptor: the soft limit (often 1,024) is raised to the hard one
/// at start, so connection capacity is what the administrator allowed, not a default.
enum FileLimit {
    /// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit in force after.
    static func raise() -> UInt64 {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { return UInt64(raised.rlim_cur) }
        }
        return UInt64(limit.rlim_cur)
    }
}
