// foldtable-echo: the C wrapper (CFoldtableWS) alone, as an echo server for the transport tests
// and the Autobahn TestSuite. Not part of the product.
//
// Default is echo_mode = 1 (the C layer echoes text and binary). --swift-echo instead echoes
// text from Swift through on_message + ftws_frame_create + ftws_conn_send (binary then closes
// 1003), which exercises the callback path the real server uses.
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
    var host = "127.0.0.1"
    var port = 0
    var webRoot: String?
    var wsPath = "/ws"
    var spaPrefix = "/s/"
    var tlsCert: String?
    var tlsKey: String?
    var maxMessageBytes = 16_777_216
    var maxQueueBytes = 67_108_864
    var maxBatchBytes = 65_536
    var slowCloseCode = 4008
    var pingInterval = 25
    var hangup = 35
    var sendStall = 30
    var graceMs = 2000
    var swiftEcho = false
    var permessageDeflate = false
    var logCloses = false
    var logLevel = 0
    var httpPrefix: String?
    var maxHTTPBodyBytes = 1_048_576
    var httpAnswerMs = 0
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
        case "--host": o.host = value(a)
        case "--port": o.port = int(a)
        case "--web-root": o.webRoot = value(a)
        case "--ws-path": o.wsPath = value(a)
        case "--spa-prefix": o.spaPrefix = value(a)
        case "--tls-cert": o.tlsCert = value(a)
        case "--tls-key": o.tlsKey = value(a)
        case "--max-message-bytes": o.maxMessageBytes = int(a)
        case "--max-queue-bytes": o.maxQueueBytes = int(a)
        case "--max-batch-bytes": o.maxBatchBytes = int(a)
        case "--slow-close-code": o.slowCloseCode = int(a)
        case "--ping-interval": o.pingInterval = int(a)
        case "--hangup": o.hangup = int(a)
        case "--send-stall": o.sendStall = int(a)
        case "--grace-ms": o.graceMs = int(a)
        case "--swift-echo": o.swiftEcho = true
        case "--permessage-deflate": o.permessageDeflate = true
        case "--log-closes": o.logCloses = true
        case "--log-level": o.logLevel = int(a)
        case "--http-prefix": o.httpPrefix = value(a)
        case "--max-http-body-bytes": o.maxHTTPBodyBytes = int(a)
        case "--http-answer-ms": o.httpAnswerMs = int(a)
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
    guard let frame = ftws_frame_create(data, len) else { return }
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

// Stable C strings for the config: ftws_server_create copies what it keeps, and these few bytes
// live for the process anyway.
func cString(_ s: String?) -> UnsafePointer<CChar>? {
    guard let s else { return nil }
    return UnsafePointer(strdup(s))
}

var config = ftws_config()
config.host = cString(options.host)
config.port = Int32(options.port)
config.web_root = cString(options.webRoot)
config.ws_path = cString(options.wsPath)
config.spa_prefix = cString(options.spaPrefix.isEmpty ? nil : options.spaPrefix)
config.tls_cert_path = cString(options.tlsCert)
config.tls_key_path = cString(options.tlsKey)
config.max_message_bytes = options.maxMessageBytes
config.max_queue_bytes = options.maxQueueBytes
config.max_batch_bytes = options.maxBatchBytes
config.slow_close_code = Int32(options.slowCloseCode)
config.ping_interval_secs = Int32(options.pingInterval)
config.hangup_secs = Int32(options.hangup)
config.send_stall_secs = Int32(options.sendStall)
config.echo_mode = options.swiftEcho ? 0 : 1
config.permessage_deflate = options.permessageDeflate ? 1 : 0
config.max_http_body_bytes = options.maxHTTPBodyBytes
config.http_answer_ms = Int32(options.httpAnswerMs)

let echoOwner = EchoOwner(logCloses: options.logCloses, graceMs: Int32(options.graceMs), httpPrefix: options.httpPrefix)
var callbacks = ftws_callbacks()
callbacks.owner = Unmanaged.passRetained(echoOwner).toOpaque()
callbacks.on_open = onOpen
callbacks.on_close = onClose
if options.swiftEcho {
    callbacks.on_message = onMessage
}
if options.httpPrefix != nil {
    callbacks.http_claims = httpClaims
    callbacks.on_http_request = onHTTPRequest
    callbacks.on_http_abandoned = onHTTPAbandoned
    callbacks.on_timer = onTimer
}

var errorBuffer = [CChar](repeating: 0, count: 1024)
guard let server = ftws_server_create(&config, callbacks, &errorBuffer, errorBuffer.count) else {
    let message = errorBuffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }  // safe: 1024 bytes
    fail(message)
}

echoOwner.server = server
var signalThread = pthread_t()
guard pthread_create(&signalThread, nil, signalWaiter, callbacks.owner) == 0 else {
    fail("cannot start the signal thread")
}

let tls = options.tlsCert != nil
let shownHost = options.host.contains(":") ? "[\(options.host)]" : options.host
print("listening on \(tls ? "https" : "http")://\(shownHost):\(ftws_server_port(server))")
fflush(nil)  // all C streams: print() buffers stdout when it is a pipe

let rc = ftws_server_run(server)
ftws_server_destroy(server)
exit(rc == 0 ? 0 : 1)
