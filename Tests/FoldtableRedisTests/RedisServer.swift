import Dispatch
import FoldtableRedis
import Foundation
import Glibc
import Synchronization

/// A real `redis-server` for one test: a free loopback port, a temporary directory, no
/// persistence unless asked (`appendOnly`: every write fsynced, so a crash loses nothing and a
/// restart shows exactly what ran). Stopped (and its directory removed) by `stop()` or deinit.
final class RedisServer: @unchecked Sendable {
    // @unchecked: used from the test's thread only; the client threads never touch it.

    /// The `redis-server` on PATH, or `nil`.
    static let executable: String? = {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin").split(separator: ":") {
            let path = "\(directory)/redis-server"
            if access(path, X_OK) == 0 { return path }
        }
        return nil
    }()

    /// Whether the Redis tests run: when redis-server is found, and always under CI (`CI=true`),
    /// where a missing server must fail the tests rather than skip them quietly.
    static let shouldRun = executable != nil || ProcessInfo.processInfo.environment["CI"] == "true"

    /// The server's port; set once, when the first start binds it.
    private(set) var port: Int
    let directory: String
    private let appendOnly: Bool
    private let extra: [String]
    /// The running server's process id.
    private var pid: pid_t?

    init(appendOnly: Bool = false, arguments extra: [String] = []) throws {
        guard Self.executable != nil else {
            throw RedisTestError("redis-server is not on PATH: install Debian's redis-server (make deps-test) to run the Redis tests")
        }
        var template = Array((NSTemporaryDirectory() + "/foldtable-redis-XXXXXX").utf8CString)
        directory = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        port = try Self.freePort()
        self.appendOnly = appendOnly
        self.extra = extra
        // A port free at the probe can still be taken by another process before redis-server
        // binds it: the first start moves to another port then. Later starts keep the port,
        // since tests restart a server to see clients come back to the same address.
        for attempt in 1... {
            do {
                try start()
                return
            } catch let error as RedisTestError where error.description.contains("Address already in use") && attempt < 5 {
                port = try Self.freePort()
            }
        }
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    var url: RedisURL { RedisURL(host: "127.0.0.1", port: port) }

    /// Starts the server (again, on the same port and directory) and waits until it answers.
    func start() throws {
        let arguments =
            [
                Self.executable!, "--port", String(port), "--bind", "127.0.0.1", "--dir", directory, "--save", "",
                "--appendonly", appendOnly ? "yes" : "no", "--appendfsync", "always", "--daemonize", "no",
                "--logfile", directory + "/redis.log",
            ] + extra
        // A fresh log each start, so a failure shows this start's lines.
        unlink(directory + "/redis.log")
        pid = try Self.spawn(arguments)
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if Self.answersPing(port: port) { return }
            guard isRunning else { break }
            usleep(20_000)
        }
        let log = (try? String(contentsOfFile: directory + "/redis.log", encoding: .utf8)) ?? ""
        throw RedisTestError("redis-server on port \(port) did not come up; its log:\n\(log.suffix(2_000))")
    }

    /// posix_spawn rather than Foundation's Process: the child gets an empty signal mask and
    /// default handlers (the test runner's threads block most signals, and Process passes that
    /// mask on), and no Foundation object outlives the test (LeakSanitizer flagged Process's).
    private static func spawn(_ arguments: [String]) throws -> pid_t {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var files = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&files)
        defer { posix_spawn_file_actions_destroy(&files) }
        posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0)
        let argv = arguments.map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, arguments[0], &files, &attributes, argv, environ)
        guard status == 0 else { throw RedisTestError("posix_spawn \(arguments[0]): \(String(cString: strerror(status)))") }
        return pid
    }

    /// Whether the server still runs; one that exited is reaped (and its pid forgotten, so no
    /// signal can reach a process that reuses it).
    private var isRunning: Bool {
        guard let pid else { return false }
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == 0 { return true }
        self.pid = nil
        return false
    }

    /// Kills the server at once (SIGKILL: a crash, nothing flushed beyond what was fsynced).
    func kill() {
        guard let pid else { return }
        Glibc.kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        self.pid = nil
    }

    func stop() {
        kill()
    }

    /// `kill -STOP`: the server keeps its socket (the kernel still accepts connections) but
    /// answers nothing.
    func pause() {
        if let pid { Glibc.kill(pid, SIGSTOP) }
    }

    func resume() {
        if let pid { Glibc.kill(pid, SIGCONT) }
    }

    /// Ports this test process has handed out. A port is never handed out twice: tests run in
    /// parallel, and a server that is stopped and started again keeps its port, so between the
    /// two another test's probe would find it free and take it ("Address already in use" in a
    /// CI run).
    private static let handedOut = Mutex<Set<Int>>([])

    /// A port that was free a moment ago, below Linux's ephemeral range (32768 on): a port the
    /// kernel hands out (bind to 0) can be taken by any test's outgoing connection before the
    /// server binds it, which failed a test now and then ("Address already in use").
    static func freePort() throws -> Int {
        for _ in 0..<100 {
            let port = Int.random(in: 20_000..<32_000)
            guard handedOut.withLock({ $0.insert(port).inserted }) else { continue }
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { throw RedisTestError("socket: \(errno)") }
            defer { close(fd) }
            var address = loopback(port: port)
            let bound = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            }
            if bound { return port }
        }
        throw RedisTestError("no free port between 20000 and 32000 after 100 tries")
    }

    /// 127.0.0.1:`port`, for binding a probe and for connecting one.
    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return address
    }

    /// Whether something on `port` answers a PING (a raw socket: the test must not
    /// depend on the client it tests to know the server is up).
    static func answersPing(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = loopback(port: port)
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else { return false }
        let ping = Array("PING\r\n".utf8)
        guard send(fd, ping, ping.count, Int32(MSG_NOSIGNAL)) == ping.count else { return false }
        var reply = [UInt8](repeating: 0, count: 16)
        let count = recv(fd, &reply, reply.count, 0)
        // +PONG, or -NOAUTH from a server that wants a password: either way it is serving.
        return count > 0 && (reply[0] == UInt8(ascii: "+") || reply[0] == UInt8(ascii: "-"))
    }

    /// Waits until the server counts `count` clients blocked in a command (a blocking XREAD):
    /// what a test needs before it acts on a blocked read, instead of sleeping for what is long
    /// enough for the client's thread to send it on a quick machine.
    func waitForBlockedClients(_ count: Int, timeoutSeconds: Double = 20) throws {
        let deadline = Date().addingTimeInterval(timeoutSeconds)
        var seen: Int?
        repeat {
            seen = Self.blockedClients(port: port)
            if seen == count { return }
            usleep(5_000)
        } while Date() < deadline
        throw RedisTestError("expected \(count) blocked clients within \(timeoutSeconds) s, INFO says \(seen.map(String.init) ?? "nothing")")
    }

    /// `blocked_clients` from `INFO clients`, asked over a raw socket (like ``answersPing(port:)``,
    /// not through the client under test); `nil` without an answer.
    static func blockedClients(port: Int) -> Int? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = loopback(port: port)
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else { return nil }
        let info = Array("INFO clients\r\n".utf8)
        guard send(fd, info, info.count, Int32(MSG_NOSIGNAL)) == info.count else { return nil }
        let key = Array("blocked_clients:".utf8)
        var reply: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4_096)
        while reply.count < 65_536 {
            let count = recv(fd, &chunk, chunk.count, 0)
            guard count > 0 else { return nil }
            reply += chunk[0..<count]
            if let value = reply.firstRange(of: key)?.upperBound,
                let end = reply[value...].firstIndex(of: UInt8(ascii: "\r"))
            {
                return Int(String(decoding: reply[value..<end], as: UTF8.self))
            }
        }
        return nil
    }
}

struct RedisTestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Waits for one completion and returns its value: the test thread blocks, the client's thread
/// delivers (inline: the tests use the default `deliver`).
func wait<Value: Sendable>(
    timeoutSeconds: Double = 20, _ start: (@escaping @Sendable (Result<Value, RedisError>) -> Void) -> Void
) throws -> Result<Value, RedisError> {
    let done = DispatchSemaphore(value: 0)
    let box = Mutex<Result<Value, RedisError>?>(nil)
    start { result in
        box.withLock { $0 = result }
        done.signal()
    }
    guard done.wait(timeout: .now() + timeoutSeconds) == .success, let result = box.withLock({ $0 }) else {
        throw RedisTestError("no completion within \(timeoutSeconds) s")
    }
    return result
}

/// Collects state changes reported by a client, for tests to wait on.
final class StateLog: Sendable {
    private let states = Mutex<[RedisClient.State]>([])
    private let changed = DispatchSemaphore(value: 0)

    var callback: @Sendable (RedisClient.State) -> Void {
        { [self] state in
            states.withLock { $0.append(state) }
            changed.signal()
        }
    }

    var all: [RedisClient.State] { states.withLock { $0 } }

    /// Waits until `count` states were reported that satisfy `matching`.
    func wait(for count: Int = 1, timeoutSeconds: Double = 20, _ matching: @escaping (RedisClient.State) -> Bool) throws {
        let deadline = DispatchTime.now() + timeoutSeconds
        while all.filter(matching).count < count {
            guard changed.wait(timeout: deadline) == .success else {
                throw RedisTestError("expected \(count) matching states within \(timeoutSeconds) s, got \(all)")
            }
        }
    }
}

extension RedisClient.State {
    var isConnected: Bool { self == .connected }
    var isDisconnected: Bool { self != .connected }
}
