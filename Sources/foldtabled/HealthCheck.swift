import Foundation

/// `foldtabled healthcheck [--port N] [--host ADDR]`: asks a running server's `/healthz` over
/// plain HTTP and exits 0 when it answers 200, 1 otherwise. For container health checks, where
/// the slim runtime image has no curl; a few lines of sockets here beat a package there.
enum HealthCheck {
    static func run(_ arguments: [String]) -> Never {
        var host = "127.0.0.1"
        var port = 8080
        var index = 0
        while index < arguments.count {
            let flag = arguments[index]
            let value = index + 1 < arguments.count ? arguments[index + 1] : nil
            switch (flag, value) {
            case ("--port", let value?) where Int(value).map({ (1...65_535).contains($0) }) == true: port = Int(value) ?? port
            case ("--host", let value?): host = value
            default:
                FileHandle.standardError.write(Data("foldtabled healthcheck: usage: foldtabled healthcheck [--port N] [--host IPV4]\n".utf8))
                exit(2)
            }
            index += 2
        }
        let status = probe(host: host, port: UInt16(port))
        guard status == 200 else {
            FileHandle.standardError.write(Data("foldtabled healthcheck: \(status.map { "HTTP \($0)" } ?? "no answer") from \(host):\(port)\n".utf8))
            exit(1)
        }
        print("ok")
        exit(0)
    }

    /// The HTTP status of `GET /healthz`, or `nil` when nothing answered within 3 seconds.
    private static func probe(host: String, port: UInt16) -> Int? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 3, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { return nil }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return nil }
        let request = Array("GET /healthz HTTP/1.1\r\nHost: \(host):\(port)\r\nConnection: close\r\n\r\n".utf8)
        guard send(fd, request, request.count, 0) == request.count else { return nil }
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = recv(fd, &buffer, buffer.count, 0)
        guard count > 12 else { return nil }
        // "HTTP/1.1 200 OK": the status is the second word of the first line.
        let line = String(decoding: buffer[..<count], as: UTF8.self).split(separator: "\r\n").first ?? ""
        let words = line.split(separator: " ")
        return words.count >= 2 && words[0].hasPrefix("HTTP/") ? Int(words[1]) : nil
    }
}
