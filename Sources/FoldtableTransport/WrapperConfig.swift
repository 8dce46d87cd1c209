import CFoldtableWS
import FoldtableCore
import FoldtableServer

/// The C wrapper's settings (`ftws_config`) as Swift values, and the one place that turns them
/// into the C struct and creates the server: foldtabled's transport (``LWSTransport``) and the
/// `foldtable-echo` test server both start the wrapper through here, so a field added to the C
/// config is filled in once. Each field means what its `ftws_config` namesake documents in
/// `CFoldtableWS.h`; numbers too large for a C `int` are clamped, never trapped on.
public struct WrapperConfig: Sendable {
    /// Bind address; nil = all interfaces.
    public var host: String?
    /// 0 = pick a free port (read it back from the server).
    public var port: Int
    /// Directory served over HTTP; nil = none.
    public var webRoot: String?
    /// The WebSocket endpoint, which the web client and the terminal client connect to.
    public var wsPath = "/ws"
    /// Paths under this prefix serve `webRoot/index.html` (the web client's session links); nil = none.
    public var spaPrefix: String? = "/s/"
    /// PEM files; both nil = plain HTTP and WebSocket.
    public var tlsCertPath: String?
    public var tlsKeyPath: String?
    public var maxMessageBytes: Int
    public var maxQueueBytes: Int
    public var maxBatchBytes: Int
    /// The close code of a connection whose queue passed `maxQueueBytes`.
    public var slowCloseCode: Int
    public var pingIntervalSecs: Int
    public var hangupSecs: Int
    public var sendStallSecs: Int
    public var permessageDeflate = false
    public var maxHTTPBodyBytes: Int
    /// 0 = the C side's default (30 s).
    public var httpAnswerMilliseconds = 0
    /// 0 = no minimum rate for answers.
    public var httpMinSendBytesPerSec = 0
    /// 0 = the send stall, or 30 s.
    public var httpSendWindowSecs = 0
    /// Origins whose pages may load `webRoot`'s files cross-origin (CORS); empty = none.
    public var corsOrigins: [String] = []

    /// Settings with every limit given: the caller's own defaults (the echo server's differ
    /// from foldtabled's on purpose: it is a test tool with its own command line).
    public init(
        host: String?, port: Int, maxMessageBytes: Int, maxQueueBytes: Int, maxBatchBytes: Int, slowCloseCode: Int, pingIntervalSecs: Int,
        hangupSecs: Int, sendStallSecs: Int, maxHTTPBodyBytes: Int
    ) {
        self.host = host
        self.port = port
        self.maxMessageBytes = maxMessageBytes
        self.maxQueueBytes = maxQueueBytes
        self.maxBatchBytes = maxBatchBytes
        self.slowCloseCode = slowCloseCode
        self.pingIntervalSecs = pingIntervalSecs
        self.hangupSecs = hangupSecs
        self.sendStallSecs = sendStallSecs
        self.maxHTTPBodyBytes = maxHTTPBodyBytes
    }

    /// foldtabled's: from its validated settings.
    public init(_ config: ServerConfig) {
        self.init(
            host: config.host, port: config.port, maxMessageBytes: config.maxMessageBytes, maxQueueBytes: config.maxQueueBytes,
            maxBatchBytes: config.maxBatchBytes, slowCloseCode: CloseCode.slowConsumer, pingIntervalSecs: config.pingIntervalSecs,
            hangupSecs: config.hangupSecs, sendStallSecs: config.sendStallSecs, maxHTTPBodyBytes: config.maxHTTPBodyBytes)
        webRoot = config.webRoot.isEmpty ? nil : config.webRoot
        tlsCertPath = config.tlsCertPath
        tlsKeyPath = config.tlsKeyPath
        permessageDeflate = config.permessageDeflate
        httpMinSendBytesPerSec = config.httpMinSendBytesPerSec
        httpSendWindowSecs = config.httpSendWindowSecs
        corsOrigins = config.embedOrigins.map(RequestPolicy.origin(ofURL:))
    }

    /// Creates the C server (context and listening socket; nothing served until
    /// `ftws_server_run`) with these settings and callbacks, or throws the one line that says
    /// why not. The C side copies every string it keeps, so they need to live only for this call.
    public func createServer(callbacks: ftws_callbacks) throws(LWSTransport.StartError) -> OpaquePointer {
        var error = [CChar](repeating: 0, count: 512)
        let cors = corsOrigins.isEmpty ? nil : corsOrigins.joined(separator: "\n")
        let server = withCStrings([host, webRoot, wsPath, spaPrefix, tlsCertPath, tlsKeyPath, cors]) { strings in
            var config = ftws_config()
            config.host = strings[0]
            config.port = Int32(clamping: port)
            config.web_root = strings[1]
            config.ws_path = strings[2]
            config.spa_prefix = strings[3]
            config.tls_cert_path = strings[4]
            config.tls_key_path = strings[5]
            config.max_message_bytes = maxMessageBytes
            config.max_queue_bytes = maxQueueBytes
            config.max_batch_bytes = maxBatchBytes
            config.slow_close_code = Int32(clamping: slowCloseCode)
            config.ping_interval_secs = Int32(clamping: pingIntervalSecs)
            config.hangup_secs = Int32(clamping: hangupSecs)
            config.send_stall_secs = Int32(clamping: sendStallSecs)
            config.permessage_deflate = permessageDeflate ? 1 : 0
            config.max_http_body_bytes = maxHTTPBodyBytes
            config.http_answer_ms = Int32(clamping: httpAnswerMilliseconds)
            config.http_min_send_bytes_per_sec = httpMinSendBytesPerSec
            config.http_send_window_secs = Int32(clamping: httpSendWindowSecs)
            config.cors_origins = strings[6]
            return ftws_server_create(&config, callbacks, &error, error.count)
        }
        guard let server else {
            let line = String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw LWSTransport.StartError(description: line.isEmpty ? "cannot start the server" : line)
        }
        return server
    }
}

/// Calls `body` with a C string for each text (nil stays nil), each valid during the call only:
/// nested `withCString` scopes rather than copies, so nothing can fail to allocate or leak.
private func withCStrings<Result>(_ texts: [String?], _ body: ([UnsafePointer<CChar>?]) -> Result) -> Result {
    var pointers: [UnsafePointer<CChar>?] = []
    func next(_ index: Int) -> Result {
        guard index < texts.count else { return body(pointers) }
        guard let text = texts[index] else {
            pointers.append(nil)
            return next(index + 1)
        }
        return text.withCString { pointer in
            pointers.append(pointer)
            return next(index + 1)
        }
    }
    return next(0)
}
