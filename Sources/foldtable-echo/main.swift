// foldtable-echo: the C wrapper (CFoldtableWS) without the hub, as an echo server for the
// transport tests and the Autobahn TestSuite. Not part of the product.
//
// It echoes through the callbacks the real server uses: on_message + ftws_frame_create +
// ftws_conn_send for text, and on_binary_message + ftws_frame_create_binary for binary, which
// foldtabled leaves unset. --text-only leaves it unset here too, so binary messages close 1003
// exactly as they do in foldtabled. The wrapper is configured and started through
// FoldtableTransport's WrapperConfig, as foldtabled's transport is.
//
// --permessage-deflate accepts RFC 7692 compression from clients that offer it (Autobahn 12.*
// and 13.*), as foldtabled's setting of the same name does.
//
// --http-prefix P claims every HTTP path under P and answers it from Swift (the HTTP seam):
//   P.../echo     the request body back, with X-Method and X-Body-Length
//   P.../big      ?bytes=N bytes of text (answers larger than one write)
//   P.../never    no answer (the C side's answer deadline, --http-answer-ms, then sends 503)
//   P.../bad      an answer with a header that would split the response (the C side sends 500)
//   anything else a JSON account of the request (method, path, query, headers, body length)
//   ?delay_ms=N   answer N ms later, from a timer (a deferred answer; the client may be gone)
// With --log-closes, requests the C side abandons are logged as "http_abandoned <id>".
import CFoldtableWS
import FoldtableTransport

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// One line to stderr, unbuffered (tests read it while the process runs). write(2) rather than
/// fputs(stderr): Swift 6 refuses the global C `stderr` as shared mutable state.
func errorLine(_ line: String) {
    let text = line + "\n"
    _ = text.withCString { write(2, $0, strlen($0)) }
}

func fail(_ message: String) -> Never {
    errorLine("foldtable-echo: \(message)")
    exit(1)
}

struct Options {
    /// The wrapper's settings, with this tool's defaults (the tests rely on them).
    var wrapper = WrapperConfig(
        host: "127.0.0.1", port: 0, maxMessageBytes: 16_777_216, maxQueueBytes: 67_108_864, maxBatchBytes: 65_536, slowCloseCode: 4008,
        pingIntervalSecs: 25, hangupSecs: 35, sendStallSecs: 30, maxHTTPBodyBytes: 1_048_576)
    var graceMs = 2000
    var textOnly = false
    var logCloses = false
    var logLevel = 0
    var httpPrefix: String?
}

func parseOptions(_ args: [String]) -> Options {
    var o = Options()
    var i = 0
    func value(_ name: String) -> String {
        i += 1
        guard i < args.count else { fail("\(name) needs a value") }
        return args[i]
    }
    func int(_ name: String) -> Int {
        let v = value(name)
        // At most Int32.max: several options become C ints, and the conversion must not trap.
        guard let n = Int(v), (0...Int(Int32.max)).contains(n) else { fail("\(name) needs an integer from 0 to \(Int32.max), got \(v)") }
        return n
    }
    while i < args.count {
        let a = args[i]
        switch a {
        case "--host": o.wrapper.host = value(a)
        case "--port": o.wrapper.port = int(a)
        case "--web-root": o.wrapper.webRoot = value(a)
        case "--ws-path": o.wrapper.wsPath = value(a)
        case "--spa-prefix":
            let prefix = value(a)
            o.wrapper.spaPrefix = prefix.isEmpty ? nil : prefix
        case "--tls-cert": o.wrapper.tlsCertPath = value(a)
        case "--tls-key": o.wrapper.tlsKeyPath = value(a)
        case "--max-message-bytes": o.wrapper.maxMessageBytes = int(a)
        case "--max-queue-bytes": o.wrapper.maxQueueBytes = int(a)
        case "--max-batch-bytes": o.wrapper.maxBatchBytes = int(a)
        case "--slow-close-code": o.wrapper.slowCloseCode = int(a)
        case "--ping-interval": o.wrapper.pingIntervalSecs = int(a)
        case "--hangup": o.wrapper.hangupSecs = int(a)
        case "--send-stall": o.wrapper.sendStallSecs = int(a)
        case "--grace-ms": o.graceMs = int(a)
        case "--text-only": o.textOnly = true
        case "--permessage-deflate": o.wrapper.permessageDeflate = true
        case "--log-closes": o.logCloses = true
        case "--log-level": o.logLevel = int(a)
        case "--http-prefix": o.httpPrefix = value(a)
        case "--max-http-body-bytes": o.wrapper.maxHTTPBodyBytes = int(a)
        case "--http-answer-ms": o.wrapper.httpAnswerMilliseconds = int(a)
        default: fail("unknown option \(a)")
        }
        i += 1
    }
    return o
}

/// The owner behind the `owner` pointer of every callback (reached with Unmanaged). The signal
/// thread reads `server` too; it is set before that thread starts and never changes.
final class EchoOwner: @unchecked Sendable {
    let logCloses: Bool
    let graceMs: Int32
    var server: OpaquePointer?
    let httpPrefix: String?
    /// Deferred HTTP answers by request id (the timer token), service thread only.
    var deferred: [UInt64: (status: UInt32, headers: String, body: [UInt8])] = [:]
    init(logCloses: Bool, graceMs: Int32, httpPrefix: String?) {
        self.logCloses = logCloses
        self.graceMs = graceMs
        self.httpPrefix = httpPrefix
    }
}

// Callbacks are top-level functions converted to @convention(c): they capture nothing and find
// their owner through the opaque pointer.
func owner(_ p: UnsafeMutableRawPointer?) -> EchoOwner {
    Unmanaged<EchoOwner>.fromOpaque(p!).takeUnretainedValue()  // safe: C passes back the owner it was given
}

func onOpen(_ p: UnsafeMutableRawPointer?, _ conn: OpaquePointer?) {
    if owner(p).logCloses {
        errorLine("open \(ftws_conn_id(conn)) \(String(cString: ftws_conn_peer(conn)))")
    }
}

func onClose(_ p: UnsafeMutableRawPointer?, _ conn: OpaquePointer?, _ code: Int32) {
    if owner(p).logCloses {
        errorLine("close \(ftws_conn_id(conn)) \(code)")
    }
}

func onMessage(
    _ p: UnsafeMutableRawPointer?, _ conn: OpaquePointer?,
    _ data: UnsafePointer<UInt8>?, _ len: Int
) {
    echo(ftws_frame_create(data, len), to: conn)
}

func onBinaryMessage(
    _ p: UnsafeMutableRawPointer?, _ conn: OpaquePointer?,
    _ data: UnsafePointer<UInt8>?, _ len: Int
) {
    echo(ftws_frame_create_binary(data, len), to: conn)
}

/// Sends a message's copy back. Out of memory for the copy, the connection closes with 1011
/// rather than silently missing one echo (the test client would wait for it).
func echo(_ frame: OpaquePointer?, to conn: OpaquePointer?) {
    guard let frame else {
        ftws_conn_close(conn, Int32(FTWS_CLOSE_SERVER_ERROR), "out of memory")
        return
    }
    _ = ftws_conn_send(conn, frame)
    ftws_frame_release(frame)
}

// ---- HTTP seam ----

func httpClaims(_ p: UnsafeMutableRawPointer?, _ path: UnsafePointer<CChar>?) -> Int32 {
    guard let prefix = owner(p).httpPrefix, let path else { return 0 }
    return String(cString: path).hasPrefix(prefix) ? 1 : 0
}

/// A JSON string literal (quotes, backslashes and control bytes escaped).
func jsonString(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        default:
            if scalar.value < 0x20 {
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out + "\""
}

func answer(_ server: OpaquePointer?, _ id: UInt64, _ status: UInt32, _ headers: String, _ body: [UInt8]) {
    let result = body.withUnsafeBufferPointer { bytes in
        headers.withCString { ftws_http_respond(server, id, status, $0, bytes.baseAddress, bytes.count) }
    }
    if result != 0 { errorLine("http_respond \(id) \(result)") }
}

func onHTTPRequest(_ p: UnsafeMutableRawPointer?, _ request: UnsafePointer<ftws_http_request>?) {
    let echo = owner(p)
    guard let raw = request?.pointee else { return }
    let method = String(cString: raw.method)
    let path = String(cString: raw.path)
    var query: [String: String] = [:]
    var queryList: [String] = []
    for i in 0..<raw.query_count {
        guard let pointer = raw.query[i] else { continue }
        let argument = String(cString: pointer)
        queryList.append(jsonString(argument))
        let parts = argument.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        query[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
    }
    var headerList: [String] = []
    for i in 0..<raw.header_count {
        guard let name = raw.header_names[i], let value = raw.header_values[i] else { continue }
        headerList.append("\(jsonString(String(cString: name))):\(jsonString(String(cString: value)))")
    }
    let body = raw.body_len > 0 ? Array(UnsafeBufferPointer(start: raw.body, count: raw.body_len)) : []

    var status: UInt32 = 200
    var headers = "Content-Type: application/json"
    var out: [UInt8]
    if path.hasSuffix("/never") {
        return
    } else if path.hasSuffix("/echo") {
        headers = "Content-Type: application/octet-stream\r\nX-Method: \(method)\r\nX-Body-Length: \(body.count)"
        out = body
    } else if path.hasSuffix("/big") {
        // From the query: clamped, so a negative or huge count neither traps nor exhausts memory.
        let count = min(max(Int(query["bytes"] ?? "") ?? 1_000_000, 0), 1 << 28)
        headers = "Content-Type: text/plain"
        out = (0..<count).map { UInt8(ascii: "0") + UInt8($0 % 10) }
    } else if path.hasSuffix("/bad") {
        headers = "X-Split: one\r\n\r\n<html>"
        out = Array("split".utf8)
    } else {
        out = Array(
            """
            {"id":\(raw.id),"method":\(jsonString(method)),"path":\(jsonString(path)),"query":[\(queryList.joined(separator: ","))],\
            "headers":{\(headerList.joined(separator: ","))},"peer":\(jsonString(String(cString: raw.peer))),"body_length":\(body.count)}
            """.utf8)
        if method == "DELETE" { status = 204 }
    }
    if let delay = query["delay_ms"].flatMap({ UInt64($0) }) {
        echo.deferred[raw.id] = (status, headers, out)
        ftws_timer_arm(echo.server, raw.id, delay)
        return
    }
    answer(echo.server, raw.id, status, headers, out)
}

func onTimer(_ p: UnsafeMutableRawPointer?, _ token: UInt64) {
    let echo = owner(p)
    guard let pending = echo.deferred.removeValue(forKey: token) else { return }
    answer(echo.server, token, pending.status, pending.headers, pending.body)
}

func onHTTPAbandoned(_ p: UnsafeMutableRawPointer?, _ id: UInt64) {
    if owner(p).logCloses { errorLine("http_abandoned \(id)") }
}

// SIGTERM/SIGINT are blocked before any other thread exists (threads inherit the mask) and
// taken with sigwait on one thread of ours: a signal can then neither kill the process early
// nor get lost, and stopping needs no async-signal-safe code.
var stopSignals = sigset_t()
sigemptyset(&stopSignals)
sigaddset(&stopSignals, SIGTERM)
sigaddset(&stopSignals, SIGINT)
pthread_sigmask(SIG_BLOCK, &stopSignals, nil)

/// Body of the signal thread: wait for SIGTERM/SIGINT, ask the server to stop (the one
/// thread-safe call besides wake), repeat (a second signal is harmless).
func signalWaiter(_ arg: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    let echo = Unmanaged<EchoOwner>.fromOpaque(arg!).takeUnretainedValue()  // safe: pthread_create was given the owner
    var set = sigset_t()
    sigemptyset(&set)
    sigaddset(&set, SIGTERM)
    sigaddset(&set, SIGINT)
    while true {
        var sig: Int32 = 0
        if sigwait(&set, &sig) == 0 {
            ftws_server_stop(echo.server, echo.graceMs)
        }
    }
}

let options = parseOptions(Array(CommandLine.arguments.dropFirst()))
ftws_set_log_level(Int32(options.logLevel))

let echoOwner = EchoOwner(logCloses: options.logCloses, graceMs: Int32(options.graceMs), httpPrefix: options.httpPrefix)
var callbacks = ftws_callbacks()
callbacks.owner = Unmanaged.passRetained(echoOwner).toOpaque()
callbacks.on_open = onOpen
callbacks.on_close = onClose
callbacks.on_message = onMessage
if !options.textOnly {
    callbacks.on_binary_message = onBinaryMessage
}
if options.httpPrefix != nil {
    callbacks.http_claims = httpClaims
    callbacks.on_http_request = onHTTPRequest
    callbacks.on_http_abandoned = onHTTPAbandoned
    callbacks.on_timer = onTimer
}

let server: OpaquePointer
do {
    server = try options.wrapper.createServer(callbacks: callbacks)
} catch {
    fail(error.description)
}

echoOwner.server = server
var signalThread = pthread_t()
guard pthread_create(&signalThread, nil, signalWaiter, callbacks.owner) == 0 else {
    fail("cannot start the signal thread")
}

let tls = options.wrapper.tlsCertPath != nil
let host = options.wrapper.host ?? "*"
let shownHost = host.contains(":") ? "[\(host)]" : host
print("listening on \(tls ? "https" : "http")://\(shownHost):\(ftws_server_port(server))")
fflush(nil)  // all C streams: print() buffers stdout when it is a pipe

let rc = ftws_server_run(server)
ftws_server_destroy(server)
exit(rc == 0 ? 0 : 1)
