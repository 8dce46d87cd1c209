// The one-time parts of an RFC 6455 client handshake: a random Sec-WebSocket-Key and the
// Sec-WebSocket-Accept the server must answer with (base64 of SHA-1 of key + GUID). Setup-only
// code: allocation here does not matter.

/// SHA-1 (FIPS 180-4), only for checking Sec-WebSocket-Accept.
func sha1(_ message: [UInt8]) -> [UInt8] {
    var state: [UInt32] = [0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0]
    var data = message
    let bitLength = UInt64(message.count) * 8
    data.append(0x80)
    while data.count % 64 != 56 { data.append(0) }
    for shift in stride(from: 56, through: 0, by: -8) {
        data.append(UInt8(truncatingIfNeeded: bitLength >> UInt64(shift)))
    }
    var words = [UInt32](repeating: 0, count: 80)
    for chunk in stride(from: 0, to: data.count, by: 64) {
        for index in 0..<16 {
            let offset = chunk + 4 * index
            words[index] =
                UInt32(data[offset]) << 24 | UInt32(data[offset + 1]) << 16 | UInt32(data[offset + 2]) << 8 | UInt32(data[offset + 3])
        }
        for index in 16..<80 {
            let mixed = words[index - 3] ^ words[index - 8] ^ words[index - 14] ^ words[index - 16]
            words[index] = mixed << 1 | mixed >> 31
        }
        var a = state[0]
        var b = state[1]
        var c = state[2]
        var d = state[3]
        var e = state[4]
        for index in 0..<80 {
            let f: UInt32
            let k: UInt32
            switch index {
            case 0..<20:
                f = (b & c) | (~b & d)
                k = 0x5A82_7999
            case 20..<40:
                f = b ^ c ^ d
                k = 0x6ED9_EBA1
            case 40..<60:
                f = (b & c) | (b & d) | (c & d)
                k = 0x8F1B_BCDC
            default:
                f = b ^ c ^ d
                k = 0xCA62_C1D6
            }
            let temp = (a << 5 | a >> 27) &+ f &+ e &+ k &+ words[index]
            e = d
            d = c
            c = b << 30 | b >> 2
            b = a
            a = temp
        }
        state[0] &+= a
        state[1] &+= b
        state[2] &+= c
        state[3] &+= d
        state[4] &+= e
    }
    var digest: [UInt8] = []
    for word in state {
        for shift in stride(from: 24, through: 0, by: -8) { digest.append(UInt8(truncatingIfNeeded: word >> UInt32(shift))) }
    }
    return digest
}

/// Standard base64 with padding.
func base64(_ bytes: [UInt8]) -> String {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    var out: [UInt8] = []
    var index = 0
    while index < bytes.count {
        let remaining = bytes.count - index
        let b0 = UInt32(bytes[index])
        let b1 = remaining > 1 ? UInt32(bytes[index + 1]) : 0
        let b2 = remaining > 2 ? UInt32(bytes[index + 2]) : 0
        let value = b0 << 16 | b1 << 8 | b2
        out.append(alphabet[Int(value >> 18 & 63)])
        out.append(alphabet[Int(value >> 12 & 63)])
        out.append(remaining > 1 ? alphabet[Int(value >> 6 & 63)] : UInt8(ascii: "="))
        out.append(remaining > 2 ? alphabet[Int(value & 63)] : UInt8(ascii: "="))
        index += 3
    }
    return String(decoding: out, as: UTF8.self)
}

/// A fresh Sec-WebSocket-Key and the Sec-WebSocket-Accept value that answers it.
func makeHandshakeKey() -> (key: String, accept: String) {
    var generator = SystemRandomNumberGenerator()
    let raw = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
    let key = base64(raw)
    let accept = base64(sha1(Array((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8)))
    return (key, accept)
}

/// Checks an HTTP upgrade response head (everything before the blank line): status 101, the
/// expected accept value and, when asked for, the subprotocol. Returns nil when it is fine,
/// otherwise what is wrong.
func handshakeProblem(head: String, accept: String, subprotocol: String?) -> String? {
    let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
    guard let status = lines.first else { return "empty response" }
    let parts = status.split(separator: " ")
    guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1] == "101" else { return "status line \"\(status)\"" }
    var headers: [String: String] = [:]
    for line in lines.dropFirst() {
        guard let colon = line.firstIndex(of: ":") else { continue }
        let name = line[..<colon].lowercased()
        let value = line[line.index(after: colon)...].trimmingSpaces()
        headers[name] = value
    }
    guard headers["sec-websocket-accept"] == accept else {
        return "Sec-WebSocket-Accept \(headers["sec-websocket-accept"] ?? "missing"), expected \(accept)"
    }
    if let subprotocol, headers["sec-websocket-protocol"] != subprotocol {
        return "Sec-WebSocket-Protocol \(headers["sec-websocket-protocol"] ?? "missing"), expected \(subprotocol)"
    }
    return nil
}

extension Substring {
    fileprivate func trimmingSpaces() -> String {
        var text = self
        while text.first == " " || text.first == "\t" { text = text.dropFirst() }
        while text.last == " " || text.last == "\t" { text = text.dropLast() }
        return String(text)
    }
}
