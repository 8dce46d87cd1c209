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

    let port: Int
    let directory: String
    private let appendOnly: Bool
    private let extra: [String]
    private var process: Process?

    init(appendOnly: Bool = false, arguments extra: [String] = []) throws {
        guard Self.executable != nil else {
            throw RedisTestError("redis-server is not on PATH: install Debian's redis-server (make deps-test) to run the Redis tests")
        }
        var template = Array((NSTemporaryDirectory() + "/foldtable-redis-XXXXXX").utf8CString)
        directory = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        port = try Self.freePort()
        self.appendOnly = appendOnly
        self.extra = extra
        try start()
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    var url: RedisURL { RedisURL(host: "127.0.0.1", port: port) }

    /// Starts the server (again, on the same port and directory) and waits until it answers.
    func start() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable!)
        process.arguments =
            [
                "--port", String(port), "--bind", "127.0.0.1", "--dir", directory, "--save", "",
                "--appendonly", appendOnly ? "yes" : "no", "--appendfsync", "always", "--daemonize", "no",
                "--logfile", directory + "/redis.log",
            ] + extra
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = process
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if Self.answersPing(port: port) { return }
            guard process.isRunning else { break }
            usleep(20_000)
        }
        let log = (try? String(contentsOfFile: directory + "/redis.log", encoding: .utf8)) ?? ""
        throw RedisTestError("redis-server on port \(port) did not come up; its log:\n\(log.suffix(2_000))")
    }

    /// Kills the server at once (SIGKILL: a crash, nothing flushed beyond what was fsynced).
    func kill() {
        guard let process else { return }
        if process.isRunning {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        self.process = nil
    }

    /// SIGKILL rather than SIGTERM: the test runner's threads block most signals and the child
    /// inherits that mask, so redis-server would never see a SIGTERM. Nothing is kept anyway.
    func stop() {
        kill()
    }

    /// `kill -STOP`: the server keeps its socket (the kernel still accepts connections) but
    /// answers nothing.
    func pause() {
        if let process { Glibc.kill(process.processIdentifier, SIGSTOP) }
    }

    func resume() {
        if let process { Glibc.kill(process.processIdentifier, SIGCONT) }
    }

    /// A port that was free a moment ago: bound to 0, read back, closed.
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw RedisTestError("socket: \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(fd, raw, length) == 0 && getsockname(fd, raw, &length) == 0
            }
        }
        guard bound else { throw RedisTestError("bind: \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Whether something on `port` answers a PING (a raw socket: the test must not
    /// depend on the client it tests to know the server is up).
    static func answersPing(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
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
