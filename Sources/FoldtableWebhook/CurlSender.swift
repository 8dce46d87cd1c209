import CCurl
import FoldtableAuth
import FoldtableServer
import Foundation
import Glibc
import Synchronization

/// The ``WebhookSender`` of foldtabled: libcurl's multi interface on a thread of its own, so DNS,
/// connects, TLS and slow receivers never hold the service thread. Requests are handed over
/// under a lock and curl's poll is woken (`curl_multi_wakeup`); each outcome is posted back to
/// the service thread, as the store's writer and the Redis worker do.
///
/// Every transfer: POST only, no redirect followed, only http and https, no proxy (a proxy from
/// the environment would hide the address really connected to), bounded connect and total time,
/// and a socket-open hook that refuses any address the ``WebhookAddressPolicy`` does not allow,
/// after DNS (a name resolving, or rebinding, to loopback fails there).
///
/// `@unchecked Sendable`: `incoming` is a Mutex; `multi` and every ``Transfer`` are touched only
/// by the curl thread (after `init`, which runs before the thread starts), except
/// `curl_multi_wakeup`, which curl documents as callable from any thread.
public final class CurlSender: WebhookSender, @unchecked Sendable {
    private let policy: WebhookAddressPolicy
    private let connectTimeoutMs: Int
    private let timeoutMs: Int
    private let post: @Sendable (@escaping @Sendable () -> Void) -> Void
    private let multi: UnsafeMutableRawPointer
    private let incoming = Mutex<[Job]>([])
    /// Transfers in flight, by their easy handle (curl thread only).
    private var running: [UnsafeMutableRawPointer: Transfer] = [:]

    /// A request on its way to the curl thread, its completion to be called on the service thread.
    fileprivate struct Job: @unchecked Sendable {
        var request: WebhookRequest
        var host: String
        var completion: ServiceThreadOnly<(WebhookResult) -> Void>
    }

    /// What one transfer owns while curl runs it; the socket hook's context.
    fileprivate final class Transfer {
        let job: Job
        let easy: UnsafeMutableRawPointer
        var headers: UnsafeMutablePointer<curl_slist>?
        let policy: WebhookAddressPolicy
        /// The host was listed by name in --webhook-allow: any address it resolves to is allowed.
        let hostAllowed: Bool
        /// Set by the socket hook when it refused the resolved address.
        var refusal: (address: String, category: WebhookAddressPolicy.Category)?

        init(job: Job, easy: UnsafeMutableRawPointer, policy: WebhookAddressPolicy) {
            self.job = job
            self.easy = easy
            self.policy = policy
            hostAllowed = policy.allowsHost(job.host)
        }

        deinit {
            curl_slist_free_all(headers)
            curl_easy_cleanup(easy)
        }
    }

    /// Starts the curl thread. `post` hands a closure to the service thread (the transport's);
    /// at most `maxConnections` are open at once (more transfers wait in curl's queue).
    public init(
        policy: WebhookAddressPolicy, connectTimeoutMs: Int, timeoutMs: Int, maxConnections: Int = 64,
        post: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void
    ) throws(StoreError) {
        // Process-wide, once, before any other thread uses curl (it is not thread-safe before 7.84).
        guard curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK, let multi = curl_multi_init() else {
            throw StoreError.unavailable("libcurl could not be initialised")
        }
        // Without a cap every slow receiver would hold a socket of its own, unbounded.
        guard ftcurl_multi_setopt_long(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, maxConnections) == CURLM_OK else {
            curl_multi_cleanup(multi)
            throw StoreError.unavailable("libcurl refused --webhook-max-connections \(maxConnections)")
        }
        self.multi = multi
        self.policy = policy
        self.connectTimeoutMs = connectTimeoutMs
        self.timeoutMs = timeoutMs
        self.post = post
        let thread = Thread { [self] in run() }
        thread.name = "webhooks"
        thread.start()
    }

    public func send(_ request: WebhookRequest, completion: @escaping (WebhookResult) -> Void) {
        let host = (try? WebhookURL(request.url))?.host ?? ""
        incoming.withLock { $0.append(Job(request: request, host: host, completion: ServiceThreadOnly(completion))) }
        curl_multi_wakeup(multi)
    }

    // MARK: - The curl thread

    private func run() {
        while true {
            let jobs = incoming.withLock { jobs in
                defer { jobs.removeAll() }
                return jobs
            }
            for job in jobs { start(job) }
            var active: Int32 = 0
            curl_multi_perform(multi, &active)
            var left: Int32 = 0
            while let message = curl_multi_info_read(multi, &left) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
                finish(easy, message.pointee.data.result)
            }
            // Woken by curl_multi_wakeup when a job arrives; a second at most otherwise.
            curl_multi_poll(multi, nil, 0, 1_000, nil)
        }
    }

    private func start(_ job: Job) {
        guard let easy = curl_easy_init() else {
            return complete(job, .unreachable("libcurl could not make a transfer"))
        }
        let transfer = Transfer(job: job, easy: easy, policy: policy)
        let timestamp = UInt64(time(nil))
        let signature = WebhookSignature.sign(key: job.request.key, id: job.request.id, timestamp: timestamp, body: job.request.body)
        for header in [
            "Content-Type: application/json", "User-Agent: foldtabled-webhook", "webhook-id: \(job.request.id)", "webhook-timestamp: \(timestamp)",
            "webhook-signature: \(signature)",
            // No 100-continue round trip: the body is small and the receiver's answer is what counts.
            "Expect:",
        ] {
            transfer.headers = curl_slist_append(transfer.headers, header)
        }
        var ok = true
        func set(_ option: CURLoption, _ value: Int) { ok = ok && ftcurl_setopt_long(easy, option, value) == CURLE_OK }
        func set(_ option: CURLoption, _ value: String) {
            // curl copies strings it is given (since 7.17), so a temporary is fine here.
            ok = ok && value.withCString { ftcurl_setopt_pointer(easy, option, $0) } == CURLE_OK
        }
        set(CURLOPT_URL, job.request.url)
        set(CURLOPT_PROTOCOLS_STR, "http,https")
        set(CURLOPT_FOLLOWLOCATION, 0)
        set(CURLOPT_PROXY, "")
        set(CURLOPT_NOSIGNAL, 1)
        set(CURLOPT_CONNECTTIMEOUT_MS, connectTimeoutMs)
        set(CURLOPT_TIMEOUT_MS, timeoutMs)
        set(CURLOPT_POST, 1)
        set(CURLOPT_POSTFIELDSIZE, job.request.body.count)
        ok = ok && job.request.body.withUnsafeBytes { ftcurl_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, $0.baseAddress) } == CURLE_OK
        ok = ok && ftcurl_setopt_pointer(easy, CURLOPT_HTTPHEADER, transfer.headers) == CURLE_OK
        ok = ok && ftcurl_setopt_write(easy, { _, size, count, _ in size * count }) == CURLE_OK
        ok = ok && ftcurl_setopt_opensocket(easy, openSocket) == CURLE_OK
        ok = ok && ftcurl_setopt_pointer(easy, CURLOPT_OPENSOCKETDATA, Unmanaged.passUnretained(transfer).toOpaque()) == CURLE_OK
        guard ok, curl_multi_add_handle(multi, easy) == CURLM_OK else {
            return complete(job, .unreachable("libcurl refused the request's settings"))
        }
        running[easy] = transfer
    }

    private func finish(_ easy: UnsafeMutableRawPointer, _ code: CURLcode) {
        curl_multi_remove_handle(multi, easy)
        guard let transfer = running.removeValue(forKey: easy) else { return }
        let result: WebhookResult
        if code == CURLE_OK {
            // Answered, perhaps at another of the name's addresses after one was refused.
            var status = 0
            _ = ftcurl_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
            result = .answered(status: status)
        } else if let refusal = transfer.refusal {
            result = .refused(address: refusal.address, refusal.category)
        } else if code == CURLE_OPERATION_TIMEDOUT {
            result = .timedOut
        } else {
            result = .unreachable(String(cString: curl_easy_strerror(code)))
        }
        complete(transfer.job, result)
    }

    private func complete(_ job: Job, _ result: WebhookResult) {
        let completion = job.completion
        post { completion.value(result) }
    }
}

/// curl's socket-open hook: the one place that sees the address about to be connected to, after
/// DNS. Refuses (CURL_SOCKET_BAD) an address the policy does not allow, noting why on the
/// transfer; otherwise opens the socket as curl would.
private let openSocket: curl_opensocket_callback = { context, purpose, address in
    guard let context, let address else { return CURL_SOCKET_BAD }
    let transfer = Unmanaged<CurlSender.Transfer>.fromOpaque(context).takeUnretainedValue()
    let family = address.pointee.family
    // `addr` is declared as a 16-byte `struct sockaddr`, but curl's buffer behind it holds the
    // whole address (`addrlen` bytes, 28 for IPv6): read it from curl's own memory at the
    // field's offset, never through a Swift copy of the declared field.
    let offset = MemoryLayout<curl_sockaddr>.offset(of: \.addr) ?? 0
    let raw = UnsafeRawPointer(address) + offset
    let length = Int(address.pointee.addrlen)
    let bytes: [UInt8]?
    switch family {
    case AF_INET where length >= MemoryLayout<sockaddr_in>.size:
        var ip = raw.loadUnaligned(as: sockaddr_in.self).sin_addr
        bytes = withUnsafeBytes(of: &ip) { Array($0) }
    case AF_INET6 where length >= MemoryLayout<sockaddr_in6>.size:
        var ip = raw.loadUnaligned(as: sockaddr_in6.self).sin6_addr
        bytes = withUnsafeBytes(of: &ip) { Array($0) }
    default:
        bytes = nil
    }
    guard let bytes else {
        transfer.refusal = ("family \(family)", .reserved)
        return CURL_SOCKET_BAD
    }
    if !transfer.hostAllowed, let category = transfer.policy.refusal(of: bytes) {
        transfer.refusal = (CurlSender.describe(bytes), category)
        return CURL_SOCKET_BAD
    }
    // Close-on-exec, as curl's own sockets are: a child process must not inherit a receiver's
    // connection.
    return socket(family, address.pointee.socktype | Int32(SOCK_CLOEXEC.rawValue), address.pointee.protocol)
}

extension CurlSender {
    /// An address for a log line.
    static func describe(_ bytes: [UInt8]) -> String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        let done = bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &buffer, socklen_t(buffer.count)) != nil }
        return done ? String(cString: buffer) : "?"
    }
}
