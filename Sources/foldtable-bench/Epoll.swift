// epoll for the load generator. Swift's Glibc module does not include <sys/epoll.h>, and this
// target has no C sources, so the three calls are looked up in libc at run time and the
// (packed on x86_64) struct epoll_event is laid out by hand.
import Glibc

struct Epoll {
    private typealias CreateFunction = @convention(c) (Int32) -> Int32
    private typealias ControlFunction = @convention(c) (Int32, Int32, Int32, UnsafeMutableRawPointer?) -> Int32
    private typealias WaitFunction = @convention(c) (Int32, UnsafeMutableRawPointer?, Int32, Int32) -> Int32

    static let readable: UInt32 = 0x001  // EPOLLIN
    static let writable: UInt32 = 0x004  // EPOLLOUT
    static let errorOrHangUp: UInt32 = 0x008 | 0x010  // EPOLLERR | EPOLLHUP
    private static let add: Int32 = 1  // EPOLL_CTL_ADD
    private static let modify: Int32 = 3  // EPOLL_CTL_MOD
    #if arch(x86_64)
        private static let eventSize = 12  // __attribute__((packed))
        private static let dataOffset = 4
    #else
        private static let eventSize = 16
        private static let dataOffset = 8
    #endif

    let fd: Int32
    let capacity: Int
    private let control: ControlFunction
    private let waitFunction: WaitFunction
    private let buffer: UnsafeMutableRawPointer

    init(capacity: Int) {
        func symbol(_ name: String) -> UnsafeMutableRawPointer {
            guard let found = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { fail("libc has no \(name)") }
            return found
        }
        let create = unsafeBitCast(symbol("epoll_create1"), to: CreateFunction.self)
        control = unsafeBitCast(symbol("epoll_ctl"), to: ControlFunction.self)
        waitFunction = unsafeBitCast(symbol("epoll_wait"), to: WaitFunction.self)
        fd = create(Int32(O_CLOEXEC))
        if fd < 0 { fail("epoll_create1: errno \(errno)") }
        self.capacity = capacity
        buffer = .allocate(byteCount: capacity * Self.eventSize, alignment: 8)
    }

    /// Watches `socket` for `events`, reporting it as `token`.
    func add(_ socket: Int32, events: UInt32, token: UInt64) {
        if change(Self.add, socket, events, token) != 0 { fail("epoll_ctl(ADD): errno \(errno)") }
    }

    func modify(_ socket: Int32, events: UInt32, token: UInt64) {
        _ = change(Self.modify, socket, events, token)
    }

    private func change(_ operation: Int32, _ socket: Int32, _ events: UInt32, _ token: UInt64) -> Int32 {
        var event: (UInt64, UInt64) = (0, 0)
        return withUnsafeMutableBytes(of: &event) { raw in
            raw.storeBytes(of: events, toByteOffset: 0, as: UInt32.self)
            raw.storeBytes(of: token, toByteOffset: Self.dataOffset, as: UInt64.self)
            return control(fd, operation, socket, raw.baseAddress)
        }
    }

    /// Waits for events; returns how many there are (0 on timeout or EINTR).
    func wait(timeoutMilliseconds: Int32) -> Int {
        let count = waitFunction(fd, buffer, Int32(capacity), timeoutMilliseconds)
        if count < 0 {
            if errno == EINTR { return 0 }
            fail("epoll_wait: errno \(errno)")
        }
        return Int(count)
    }

    @inline(__always)
    func events(at slot: Int) -> UInt32 {
        buffer.loadUnaligned(fromByteOffset: slot * Self.eventSize, as: UInt32.self)
    }

    @inline(__always)
    func token(at slot: Int) -> UInt64 {
        buffer.loadUnaligned(fromByteOffset: slot * Self.eventSize + Self.dataOffset, as: UInt64.self)
    }
}
