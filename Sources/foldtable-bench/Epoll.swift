// epoll for the load generator, through the CFoldtableBench shims (Swift cannot import
// <sys/epoll.h> nor lay out its packed struct).
import CFoldtableBench
import Glibc

struct Epoll {
    static let readable = ftbench_epoll_in
    static let writable = ftbench_epoll_out
    static let errorOrHangUp = ftbench_epoll_error_or_hangup

    let fd: Int32
    let capacity: Int
    private let readyEvents: UnsafeMutablePointer<UInt32>
    private let readyTokens: UnsafeMutablePointer<UInt64>

    init(capacity: Int) {
        fd = ftbench_epoll_create()
        if fd < 0 { fail("epoll_create1: errno \(errno)") }
        self.capacity = min(capacity, 1024)
        readyEvents = .allocate(capacity: self.capacity)
        readyTokens = .allocate(capacity: self.capacity)
    }

    /// Watches `socket` for `events`, reporting it as `token`.
    func add(_ socket: Int32, events: UInt32, token: UInt64) {
        if ftbench_epoll_set(fd, socket, events, token, 0) != 0 { fail("epoll_ctl(ADD): errno \(errno)") }
    }

    func modify(_ socket: Int32, events: UInt32, token: UInt64) {
        _ = ftbench_epoll_set(fd, socket, events, token, 1)
    }

    /// Waits for events; returns how many there are (0 on timeout or EINTR).
    func wait(timeoutMilliseconds: Int32) -> Int {
        let count = ftbench_epoll_wait(fd, readyEvents, readyTokens, Int32(capacity), timeoutMilliseconds)
        if count < 0 {
            if errno == EINTR { return 0 }
            fail("epoll_wait: errno \(errno)")
        }
        return Int(count)
    }

    @inline(__always)
    func events(at slot: Int) -> UInt32 { readyEvents[slot] }

    @inline(__always)
    func token(at slot: Int) -> UInt64 { readyTokens[slot] }
}
