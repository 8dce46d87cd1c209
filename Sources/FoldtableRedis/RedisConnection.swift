import CHiredis
import Glibc

/// One hiredis context in blocking mode: the only code that calls hiredis.
///
/// Used by one thread at a time (a ``RedisClient``'s worker): hiredis contexts are not thread
/// safe. Blocking I/O with socket timeouts (`SO_RCVTIMEO`/`SO_SNDTIMEO`, set by
/// `redisSetTimeout`) is what hiredis 0.14 offers without an event loop. After any error the
/// context is unusable (hiredis keeps `err` set): the owner drops this object and makes a new one.
final class RedisConnection {
    private let context: UnsafeMutablePointer<redisContext>
    /// The socket, for `shutdown` from another thread when the client closes (see ``RedisClient``).
    let socket: Int32
    /// Scripts loaded on this connection: source to the SHA-1 Redis named it by (learnt from
    /// SCRIPT LOAD, so no SHA-1 of our own). A new connection starts with none.
    private var loadedScripts: [String: String] = [:]
    private var commandTimeoutMs: UInt64

    private init(context: UnsafeMutablePointer<redisContext>, commandTimeoutMs: UInt64) {
        self.context = context
        self.socket = context.pointee.fd
        self.commandTimeoutMs = commandTimeoutMs
    }

    deinit {
        redisFree(context)
    }

    /// Connects, authenticates and selects the database within `connectTimeoutMs` for the TCP
    /// connect and again for the handshake's replies (a host name is resolved first, by
    /// `getaddrinfo`, which has no timeout of its own: use addresses or a local resolver). The
    /// handshake is a `PING` when there is nothing else to send, so a server that accepts
    /// connections but does not answer (stopped, overloaded) fails here, not on the first command.
    static func open(_ url: RedisURL, name: String?, connectTimeoutMs: UInt64, commandTimeoutMs: UInt64) -> Result<RedisConnection, RedisError> {
        guard let context = redisConnectWithTimeout(url.host, Int32(url.port), timeval(milliseconds: connectTimeoutMs)) else {
            return .failure(.notConnected("could not allocate a hiredis context"))
        }
        if context.pointee.err != 0 {
            let why = describe(context, errno: errno)
            redisFree(context)
            return .failure(.notConnected("\(url): \(why)"))
        }
        // The handshake is part of connecting: it has the connect timeout.
        let connection = RedisConnection(context: context, commandTimeoutMs: connectTimeoutMs)
        if let failure = connection.setTimeout(milliseconds: connectTimeoutMs) { return .failure(.notConnected("\(url): \(failure)")) }
        var handshake: [RedisCommand] = []
        if let password = url.password {
            handshake.append(url.username.map { RedisCommand("AUTH", $0, password) } ?? RedisCommand("AUTH", password))
        }
        if url.database != 0 { handshake.append(RedisCommand("SELECT", url.database)) }
        if let name { handshake.append(RedisCommand("CLIENT", "SETNAME", name)) }
        if handshake.isEmpty { handshake.append(RedisCommand("PING")) }
        for command in handshake where !connection.append(command) {
            return .failure(.notConnected("\(url): \(connection.failure(for: command).description)"))
        }
        for command in handshake {
            switch connection.readReply() {
            case .success(.error(let message)):
                // Never the arguments: AUTH's are the credentials.
                return .failure(.notConnected("\(url): \(command.name) refused: \(message)"))
            case .success:
                continue
            case .failure(let error):
                return .failure(.notConnected("\(url): \(command.name) got no answer: \(error.reason)"))
            }
        }
        if let failure = connection.setTimeout(milliseconds: commandTimeoutMs) { return .failure(.notConnected("\(url): \(failure)")) }
        return .success(connection)
    }

    /// Sets the socket timeouts for the next replies; `nil` on success, else why it failed.
    func setTimeout(milliseconds: UInt64) -> String? {
        guard redisSetTimeout(context, timeval(milliseconds: milliseconds)) == REDIS_OK else {
            return Self.describe(context, errno: errno)
        }
        commandTimeoutMs = milliseconds
        return nil
    }

    /// Whether the idle connection is still open: no EOF, no error and no stray bytes waiting
    /// (RESP2 sends nothing unasked outside pub/sub, so bytes here mean the stream is out of
    /// step). Peeks without blocking or consuming.
    func isIdleAndOpen() -> Bool {
        var byte: UInt8 = 0
        let count = recv(socket, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
    }

    /// Queues `command` in hiredis' output buffer (nothing is written yet). `false` if it could
    /// not be formatted (out of memory); then ``failure(for:)`` says why.
    func append(_ command: RedisCommand) -> Bool {
        let arguments: [[UInt8]]
        if let script = command.script {
            // EVAL with the source when the script is not loaded: same effect, more bytes.
            if let sha = loadedScripts[script.source] {
                arguments = [Array("EVALSHA".utf8), Array(sha.utf8)] + command.arguments
            } else {
                arguments = [Array("EVAL".utf8), Array(script.source.utf8)] + command.arguments
            }
        } else {
            arguments = command.arguments
        }
        return Self.withArgv(arguments) { count, argv, lengths in
            redisAppendCommandArgv(context, count, argv, lengths) == REDIS_OK
        }
    }

    /// Writes whatever is queued (first call) and reads the next reply. A failure leaves the
    /// connection unusable.
    func readReply() -> Result<RedisReply, RedisError> {
        var raw: UnsafeMutableRawPointer?
        guard redisGetReply(context, &raw) == REDIS_OK, let raw else {
            let code = errno
            let why = Self.describe(context, errno: code)
            let timedOut = context.pointee.err == REDIS_ERR_IO && (code == EAGAIN || code == EWOULDBLOCK)
            return .failure(timedOut ? .timedOut("no reply within \(commandTimeoutMs) ms") : .connectionLost(why))
        }
        defer { freeReplyObject(raw) }
        return .success(Self.copy(raw.assumingMemoryBound(to: redisReply.self)))
    }

    /// Why the last operation failed, as the error a command that was not sent gets.
    func failure(for command: RedisCommand) -> RedisError {
        .notConnected("\(command.name) could not be queued: \(Self.describe(context, errno: errno))")
    }

    /// Loads `script` on this connection unless it is already; `nil` when it is loaded, else the
    /// error for the command that needed it. A refusal (a syntax error) leaves the connection
    /// usable; a connection failure does not.
    func load(_ script: RedisScript) -> RedisError? {
        guard loadedScripts[script.source] == nil else { return nil }
        let command = RedisCommand("SCRIPT", "LOAD", script.source)
        guard append(command) else { return failure(for: command) }
        switch readReply() {
        case .success(.bulk(let sha)) where !sha.isEmpty:
            loadedScripts[script.source] = String(decoding: sha, as: UTF8.self)
            return nil
        case .success(.error(let message)):
            return .server(message)
        case .success(let other):
            return .unexpectedReply("SCRIPT LOAD answered \(other.summary)")
        case .failure(let error):
            // SCRIPT LOAD changes nothing visible: the command that needed it was not sent.
            return .notConnected("SCRIPT LOAD failed: \(error.reason)")
        }
    }

    /// A `NOSCRIPT` reply: the server's cache lost the script (SCRIPT FLUSH): load it again on
    /// next use. The failed command is not retried: the caller hears `NOSCRIPT`.
    func forget(_ script: RedisScript) {
        loadedScripts[script.source] = nil
    }

    // MARK: - hiredis details

    /// The hiredis error of `context` as one line; `errno` as it was right after the failure.
    private static func describe(_ context: UnsafeMutablePointer<redisContext>, errno code: Int32) -> String {
        let text = withUnsafeBytes(of: context.pointee.errstr) { bytes in
            String(decoding: bytes.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        switch context.pointee.err {
        case REDIS_ERR_IO: return text.isEmpty ? String(cString: strerror(code)) : text
        case REDIS_ERR_EOF: return "the server closed the connection"
        case REDIS_ERR_PROTOCOL: return "protocol error: \(text)"
        case REDIS_ERR_OOM: return "out of memory"
        default: return text.isEmpty ? "unknown hiredis error \(context.pointee.err)" : text
        }
    }

    /// Calls `body` with a C argv of `arguments`: every argument in one buffer, with lengths, so
    /// binary values (zero bytes included) pass unchanged.
    private static func withArgv<T>(
        _ arguments: [[UInt8]], _ body: (Int32, UnsafeMutablePointer<UnsafePointer<CChar>?>, UnsafePointer<Int>) -> T
    ) -> T {
        let lengths = arguments.map(\.count)
        var joined: [UInt8] = []
        joined.reserveCapacity(lengths.reduce(0, +) + 1)
        for argument in arguments { joined.append(contentsOf: argument) }
        joined.append(0)
        return joined.withUnsafeBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { base in  // safe: holds at least the 0
                var argv: [UnsafePointer<CChar>?] = []
                argv.reserveCapacity(arguments.count)
                var offset = 0
                for length in lengths {
                    argv.append(base + offset)
                    offset += length
                }
                return argv.withUnsafeMutableBufferPointer { argvBuffer in
                    lengths.withUnsafeBufferPointer { lengthBuffer in
                        body(Int32(arguments.count), argvBuffer.baseAddress!, lengthBuffer.baseAddress!)  // safe: a command has a name
                    }
                }
            }
        }
    }

    /// Copies a hiredis reply tree into a Swift value (hiredis frees its own after).
    /// Internal, not private: the Redis fuzz target (Tests/fuzz/FuzzRedis.swift) decodes replies with it.
    static func copy(_ reply: UnsafeMutablePointer<redisReply>) -> RedisReply {
        let value = reply.pointee
        switch value.type {
        case REDIS_REPLY_STRING:
            return .bulk(bytes(value.str, value.len))
        case REDIS_REPLY_STATUS:
            return .status(String(decoding: bytes(value.str, value.len), as: UTF8.self))
        case REDIS_REPLY_ERROR:
            return .error(String(decoding: bytes(value.str, value.len), as: UTF8.self))
        case REDIS_REPLY_INTEGER:
            return .integer(Int64(value.integer))
        case REDIS_REPLY_ARRAY:
            var elements: [RedisReply] = []
            elements.reserveCapacity(value.elements)
            for index in 0..<value.elements {
                if let element = value.element[index] { elements.append(copy(element)) } else { elements.append(.null) }
            }
            return .array(elements)
        default:
            return .null
        }
    }

    private static func bytes(_ pointer: UnsafeMutablePointer<CChar>?, _ count: Int) -> [UInt8] {
        guard let pointer, count > 0 else { return [] }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: count) { Array(UnsafeBufferPointer(start: $0, count: count)) }
    }
}

extension timeval {
    init(milliseconds: UInt64) {
        self.init(tv_sec: Int(milliseconds / 1_000), tv_usec: Int(milliseconds % 1_000) * 1_000)
    }
}

extension RedisError {
    /// The text of the error without its kind, for nesting in another message.
    var reason: String {
        switch self {
        case .notConnected(let why), .connectionLost(let why), .timedOut(let why), .server(let why), .unexpectedReply(let why),
            .invalidCommand(let why):
            return why
        case .closed: return "closed"
        }
    }
}
