import FoldtableServer

/// The snapshot's `history` field: the ``HistoryEntry`` list saved with a snapshot, so a node
/// opening the session resumes members from before its open.
///
/// The messages are kept byte for byte as members received them (they are what a resume
/// sends), so the form is length-prefixed rather than JSON: per entry one header line
/// `<seq> <message bytes> <key count> <key bytes>...`, then the keys and the message, back to
/// back. The encoded size is the messages' plus a few bytes per entry.
enum HistoryCoding {
    static func encode(_ history: [HistoryEntry]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(history.reduce(0) { $0 + $1.message.count + 24 })
        for entry in history {
            var header = "\(entry.seq) \(entry.message.count) \(entry.expanded.count)"
            for key in entry.expanded { header += " \(key.utf8.count)" }
            out.append(contentsOf: header.utf8)
            out.append(UInt8(ascii: "\n"))
            for key in entry.expanded { out.append(contentsOf: key.utf8) }
            out.append(contentsOf: entry.message)
        }
        return out
    }

    struct Malformed: Error {}

    /// Decodes ``encode(_:)``; throws on anything it did not write (the caller then resumes
    /// nobody from before its open, rather than from a wrong history).
    static func decode(_ bytes: [UInt8]) throws(Malformed) -> [HistoryEntry] {
        var entries: [HistoryEntry] = []
        var index = 0
        while index < bytes.count {
            guard let newline = bytes[index...].firstIndex(of: UInt8(ascii: "\n")) else { throw Malformed() }
            let fields = bytes[index..<newline].split(separator: UInt8(ascii: " ")).map { UInt64(String(decoding: $0, as: UTF8.self)) }
            guard fields.count >= 3, let seq = fields[0], seq > 0, let messageBytes = fields[1], fields[2] == UInt64(fields.count - 3) else {
                throw Malformed()
            }
            var cursor = newline + 1
            var expanded: [String] = []
            for field in fields[3...] {
                guard let length = field, UInt64(bytes.count - cursor) >= length else { throw Malformed() }
                expanded.append(String(decoding: bytes[cursor..<cursor + Int(length)], as: UTF8.self))
                cursor += Int(length)
            }
            guard UInt64(bytes.count - cursor) >= messageBytes else { throw Malformed() }
            entries.append(HistoryEntry(seq: seq, message: Array(bytes[cursor..<cursor + Int(messageBytes)]), expanded: expanded))
            index = cursor + Int(messageBytes)
        }
        return entries
    }
}
