// The transport half of the fan-out load generator: a minimal RFC 6455 client for many
// connections on one thread, over non-blocking POSIX sockets and level-triggered epoll. No
// Foundation, and nothing allocated per message: every connection owns a malloc'd input buffer
// (frames are parsed in place; only fragmented messages are copied) and an output buffer for
// bytes the kernel has not taken yet.
import Glibc

/// CLOCK_MONOTONIC in nanoseconds.
@inline(__always)
func monotonicNanos() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) &* 1_000_000_000 &+ UInt64(spec.tv_nsec)
}

enum ConnectionState: UInt8 {
    case idle
    case connecting
    case handshaking
    case open
    case closed
}

/// One client connection. Plain data (pointers, no references), kept in a malloc'd array.
struct Connection {
    var fd: Int32 = -1
    var state: ConnectionState = .idle
    var input: UnsafeMutablePointer<UInt8>
    var inputCapacity: Int
    var inputUsed = 0
    /// Payload of a fragmented message being assembled, and its opcode.
    var fragment: UnsafeMutablePointer<UInt8>? = nil
    var fragmentUsed = 0
    var fragmentCapacity = 0
    var fragmentOpcode: UInt8 = 0
    /// Bytes queued for the socket; `outputSent` of them are already written.
    var output: UnsafeMutablePointer<UInt8>
    var outputCapacity: Int
    var outputUsed = 0
    var outputSent = 0
    var watchingWrites = false
    var welcomed = false
    /// A presence diff told this client that every client of the run is in its session.
    var seesEveryone = false
    var closeCode = 0
    /// --expand: bytes of the expansion received (peers), and whether all of it came.
    var expandReceived = 0
    var expandComplete = false

    init(inputCapacity: Int, outputCapacity: Int) {
        input = malloc(inputCapacity)!.assumingMemoryBound(to: UInt8.self)  // safe: nil only when memory is exhausted
        self.inputCapacity = inputCapacity
        output = malloc(outputCapacity)!.assumingMemoryBound(to: UInt8.self)  // safe: nil only when memory is exhausted
        self.outputCapacity = outputCapacity
    }
}

private let epollIn = Epoll.readable
private let epollOut = Epoll.writable
private let epollErrorOrHangUp = Epoll.errorOrHangUp

extension FanoutLoad {
    // MARK: connecting

    /// Raises the open-file limit so a thousand sockets fit.
    static func raiseFileLimit(to wanted: Int) {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &limit) == 0 else { return }
        if limit.rlim_cur >= rlim_t(wanted) { return }
        limit.rlim_cur = min(rlim_t(wanted), limit.rlim_max)
        if limit.rlim_cur < rlim_t(wanted) && getuid() == 0 {
            limit.rlim_max = rlim_t(wanted)
            limit.rlim_cur = rlim_t(wanted)
        }
        if setrlimit(resource, &limit) != 0 {
            fail("cannot raise RLIMIT_NOFILE to \(wanted): errno \(errno)")
        }
    }

    /// Starts a non-blocking connect for connection `index`; the handshake goes out when the
    /// socket turns writable.
    mutating func startConnect(_ index: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { fail("socket: errno \(errno)") }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let endpoint = endpoint(index)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = endpoint.port.bigEndian
        guard inet_pton(AF_INET, endpoint.host, &address.sin_addr) == 1 else { fail("not an IPv4 address: \(endpoint.host)") }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        let failed = result == 0 || errno == EINPROGRESS ? nil : errno
        let connection = connections + index
        connection.pointee.fd = fd
        connection.pointee.state = .connecting
        if let failed { return connectFailed(index, "connect to \(endpoint.host):\(endpoint.port): errno \(failed)") }
        epoll.add(fd, events: epollIn | epollOut, token: UInt64(index))
        connection.pointee.watchingWrites = true
    }

    private mutating func finishConnect(_ index: Int) {
        let connection = connections + index
        var problem: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(connection.pointee.fd, SOL_SOCKET, SO_ERROR, &problem, &length)
        guard problem == 0 else { return connectFailed(index, "connect failed: errno \(problem)") }
        let (key, accept) = makeHandshakeKey()
        expectedAccept[index] = accept
        let endpoint = endpoint(index)
        var request = "GET \(requestPath(index)) HTTP/1.1\r\nHost: \(endpoint.host):\(endpoint.port)\r\n"
        request += "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n"
        if let subprotocol = options.subprotocol { request += "Sec-WebSocket-Protocol: \(subprotocol)\r\n" }
        request += "\r\n"
        connection.pointee.state = .handshaking
        var bytes = Array(request.utf8)
        queue(index, &bytes)
        flush(index)
    }

    private mutating func readHandshake(_ index: Int) {
        let connection = connections + index
        guard receive(index) != nil else { return connectFailed(index, "connection closed during the handshake") }
        let input = connection.pointee.input
        let used = connection.pointee.inputUsed
        guard used >= 4 else { return }
        var headEnd = -1
        for position in 0...(used - 4)
        where input[position] == 13 && input[position + 1] == 10 && input[position + 2] == 13 && input[position + 3] == 10 {
            headEnd = position
            break
        }
        guard headEnd >= 0 else {
            if used > 16_384 { fail("client \(index): no end of the upgrade response in 16 KiB") }
            return
        }
        let head = String(decoding: UnsafeBufferPointer(start: input, count: headEnd), as: UTF8.self)
        if let problem = handshakeProblem(head: head, accept: expectedAccept[index], subprotocol: options.subprotocol) {
            return connectFailed(index, "bad upgrade response: \(problem)")
        }
        let rest = used - headEnd - 4
        if rest > 0 { memmove(input, input + headEnd + 4, rest) }
        connection.pointee.inputUsed = rest
        connection.pointee.state = .open
        handshaking -= 1
        opened += 1
        didOpen(index)
        if rest > 0 { parseFrames(index, now: monotonicNanos()) }
    }

    // MARK: the event loop

    /// One epoll_wait and the work it reports.
    mutating func poll(timeoutMilliseconds: Int32) {
        let count = epoll.wait(timeoutMilliseconds: timeoutMilliseconds)
        for slot in 0..<count {
            // The author stands for a client on its own machine that reacts at once: look at
            // its socket first and again every 32 sockets, so that its refills do not wait
            // behind a thousand other reads.
            if sending && slot & 31 == 0 && connections[0].state == .open { readFrames(0) }
            let flags = epoll.events(at: slot)
            let index = Int(epoll.token(at: slot))
            switch connections[index].state {
            case .connecting:
                if flags & (epollOut | epollErrorOrHangUp) != 0 { finishConnect(index) }
            case .handshaking:
                if flags & epollOut != 0 { flush(index) }
                if flags & (epollIn | epollErrorOrHangUp) != 0 { readHandshake(index) }
            case .open:
                if flags & epollOut != 0 { flush(index) }
                if flags & (epollIn | epollErrorOrHangUp) != 0 { readFrames(index) }
            case .idle, .closed:
                break
            }
        }
    }

    /// One recv into the connection's input buffer: how many bytes came (0 when none were
    /// ready), nil when the connection is gone.
    private mutating func receive(_ index: Int) -> Int? {
        let connection = connections + index
        if connection.pointee.inputUsed == connection.pointee.inputCapacity {
            growInput(index, to: connection.pointee.inputCapacity * 2)
        }
        let count = recv(
            connection.pointee.fd, connection.pointee.input + connection.pointee.inputUsed,
            connection.pointee.inputCapacity - connection.pointee.inputUsed, 0)
        if count > 0 {
            connection.pointee.inputUsed += count
            return count
        }
        if count < 0 && (errno == EAGAIN || errno == EINTR) { return 0 }
        return nil
    }

    private mutating func readFrames(_ index: Int) {
        guard let count = receive(index) else {
            markClosed(index, code: 1006)
            return
        }
        if count == 0 { return }
        let now = monotonicNanos()
        lastActivity = now
        parseFrames(index, now: now)
        if connections[index].outputUsed > 0 { flush(index) }
    }

    private mutating func growInput(_ index: Int, to capacity: Int) {
        let connection = connections + index
        let input = realloc(connection.pointee.input, capacity)!  // safe: nil only when memory is exhausted
        connection.pointee.input = input.assumingMemoryBound(to: UInt8.self)
        connection.pointee.inputCapacity = capacity
    }

    /// Handles every complete frame in the input buffer, then moves the incomplete rest to the front.
    mutating func parseFrames(_ index: Int, now: UInt64) {
        let connection = connections + index
        let base = connection.pointee.input
        let end = connection.pointee.inputUsed
        var position = 0
        var needed = 0
        while end - position >= 2 {
            let first = base[position]
            let second = base[position + 1]
            var length = Int(second & 0x7F)
            var header = 2
            if length == 126 {
                guard end - position >= 4 else { break }
                length = Int(base[position + 2]) << 8 | Int(base[position + 3])
                header = 4
            } else if length == 127 {
                guard end - position >= 10 else { break }
                length = 0
                for offset in 2..<10 { length = length << 8 | Int(base[position + offset]) }
                header = 10
            }
            if second & 0x80 != 0 {
                protocolError(index, "masked frame from the server")
                return
            }
            guard end - position >= header + length else {
                needed = header + length
                break
            }
            handleFrame(index, opcode: first & 0x0F, final: first & 0x80 != 0, payload: base + position + header, count: length, now: now)
            if connection.pointee.state != .open { return }
            position += header + length
        }
        let rest = end - position
        if position > 0 && rest > 0 { memmove(base, base + position, rest) }
        connection.pointee.inputUsed = rest
        if needed > connection.pointee.inputCapacity { growInput(index, to: max(needed, connection.pointee.inputCapacity * 2)) }
    }

    private mutating func handleFrame(
        _ index: Int, opcode: UInt8, final: Bool, payload: UnsafeMutablePointer<UInt8>, count: Int, now: UInt64
    ) {
        let connection = connections + index
        switch opcode {
        case 0x1, 0x2:
            if connection.pointee.fragmentUsed > 0 {
                protocolError(index, "new message inside a fragmented one")
                return
            }
            if final {
                onMessage(index, payload, count, now: now)
            } else {
                connection.pointee.fragmentOpcode = opcode
                appendFragment(index, payload, count)
            }
        case 0x0:
            appendFragment(index, payload, count)
            if final {
                onMessage(index, connection.pointee.fragment!, connection.pointee.fragmentUsed, now: now)  // safe: appendFragment allocated it
                connection.pointee.fragmentUsed = 0
            }
        case 0x8:
            let code = count >= 2 ? Int(payload[0]) << 8 | Int(payload[1]) : 1005
            queueFrame(index, opcode: 0x8, payload: payload, count: min(count, 2))
            flush(index)
            markClosed(index, code: code)
        case 0x9:
            pingsAnswered += 1
            queueFrame(index, opcode: 0xA, payload: payload, count: count)
        case 0xA:
            break
        default:
            protocolError(index, "opcode \(opcode)")
        }
    }

    private mutating func appendFragment(_ index: Int, _ payload: UnsafeMutablePointer<UInt8>, _ count: Int) {
        let connection = connections + index
        let needed = connection.pointee.fragmentUsed + count
        if needed > connection.pointee.fragmentCapacity || connection.pointee.fragment == nil {
            let capacity = max(needed, 2 * connection.pointee.fragmentCapacity, 4096)
            let fragment = realloc(connection.pointee.fragment, capacity)!  // safe: nil only when memory is exhausted
            connection.pointee.fragment = fragment.assumingMemoryBound(to: UInt8.self)
            connection.pointee.fragmentCapacity = capacity
        }
        memcpy(connection.pointee.fragment! + connection.pointee.fragmentUsed, payload, count)  // safe: allocated just above
        connection.pointee.fragmentUsed = needed
    }

    private mutating func protocolError(_ index: Int, _ what: String) {
        if protocolErrors == 0 { printError("client \(index): protocol error: \(what)") }
        protocolErrors += 1
        markClosed(index, code: 1002)
    }

    mutating func markClosed(_ index: Int, code: Int) {
        let connection = connections + index
        guard connection.pointee.state != .closed else { return }
        if connection.pointee.state == .open { opened -= 1 }
        if connection.pointee.state == .connecting || connection.pointee.state == .handshaking { handshaking -= 1 }
        connection.pointee.state = .closed
        connection.pointee.closeCode = code
        close(connection.pointee.fd)
        closedCount += 1
        if closedCount == 1 { printError("client \(index) closed (code \(code))") }
        if options.crowd != nil { crowdLost(index, now: monotonicNanos()) }
    }

    // MARK: writing

    private mutating func reserveOutput(_ index: Int, _ count: Int) -> UnsafeMutablePointer<UInt8> {
        let connection = connections + index
        let needed = connection.pointee.outputUsed + count
        if needed > connection.pointee.outputCapacity {
            let capacity = max(needed, 2 * connection.pointee.outputCapacity)
            let output = realloc(connection.pointee.output, capacity)!  // safe: nil only when memory is exhausted
            connection.pointee.output = output.assumingMemoryBound(to: UInt8.self)
            connection.pointee.outputCapacity = capacity
        }
        let slot = connection.pointee.output + connection.pointee.outputUsed
        connection.pointee.outputUsed = needed
        return slot
    }

    /// Queues raw bytes (the upgrade request).
    private mutating func queue(_ index: Int, _ bytes: inout [UInt8]) {
        let slot = reserveOutput(index, bytes.count)
        bytes.withUnsafeBufferPointer { _ = memcpy(slot, $0.baseAddress!, $0.count) }  // safe: an upgrade is never empty
    }

    /// Queues one final client frame: header, mask key, masked payload.
    mutating func queueFrame(_ index: Int, opcode: UInt8, payload: UnsafePointer<UInt8>, count: Int) {
        let header = count < 126 ? 2 : (count < 65_536 ? 4 : 10)
        let slot = reserveOutput(index, header + 4 + count)
        slot[0] = 0x80 | opcode
        if count < 126 {
            slot[1] = 0x80 | UInt8(count)
        } else if count < 65_536 {
            slot[1] = 0x80 | 126
            slot[2] = UInt8(truncatingIfNeeded: count >> 8)
            slot[3] = UInt8(truncatingIfNeeded: count)
        } else {
            slot[1] = 0x80 | 127
            for offset in 0..<8 { slot[2 + offset] = UInt8(truncatingIfNeeded: count >> (56 - 8 * offset)) }
        }
        // xorshift: a cheap, changing mask key (RFC 6455 wants it unpredictable to proxies).
        maskState ^= maskState << 13
        maskState ^= maskState >> 7
        maskState ^= maskState << 17
        let mask = slot + header
        for offset in 0..<4 { mask[offset] = UInt8(truncatingIfNeeded: maskState >> (8 * UInt64(offset))) }
        let body = mask + 4
        for offset in 0..<count { body[offset] = payload[offset] ^ mask[offset & 3] }
    }

    /// Writes what the kernel takes; watches for writability while something is left.
    mutating func flush(_ index: Int) {
        let connection = connections + index
        guard connection.pointee.state != .closed else { return }
        while connection.pointee.outputSent < connection.pointee.outputUsed {
            let written = send(
                connection.pointee.fd, connection.pointee.output + connection.pointee.outputSent,
                connection.pointee.outputUsed - connection.pointee.outputSent, Int32(MSG_NOSIGNAL))
            if written > 0 {
                connection.pointee.outputSent += written
            } else if written < 0 && errno == EINTR {
                continue
            } else if written < 0 && errno == EAGAIN {
                break
            } else {
                markClosed(index, code: 1006)
                return
            }
        }
        let pending = connection.pointee.outputSent < connection.pointee.outputUsed
        if !pending {
            connection.pointee.outputUsed = 0
            connection.pointee.outputSent = 0
        }
        if pending != connection.pointee.watchingWrites {
            epoll.modify(connection.pointee.fd, events: pending ? epollIn | epollOut : epollIn, token: UInt64(index))
            connection.pointee.watchingWrites = pending
        }
    }
}

/// Writes a line straight to a file descriptor (no stdio: its globals are not concurrency-safe).
func emit(_ line: String, to fd: Int32 = 1) {
    var bytes = Array((line + "\n").utf8)
    var offset = 0
    while offset < bytes.count {
        let written = bytes.withUnsafeMutableBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }  // safe: offset < count
        if written <= 0 { return }
        offset += written
    }
}

func printError(_ line: String) {
    emit("foldtable-bench: \(line)", to: 2)
}

func fail(_ line: String) -> Never {
    printError(line)
    exit(1)
}
