import FoldtableCore

/// The rows of one expanded section on their way to members, in chunks.
///
/// Chunks are encoded lazily, in order, once, and the same message goes to every member (the
/// transport shares its bytes). A chunk ends at `chunkRows` rows or about `chunkBytes` bytes,
/// whichever comes first, so no chunk can pass a member's queue cap however long the rows are.
/// Each member has its own cursor and is refilled only while its queue is below the low mark, so
/// a 100,000-row section never becomes one frame, a slow member never makes the server buffer
/// the whole section for it, and other sessions keep being served.
final class RowStream {
    let section: String
    /// The sequence number the rows belong to (the expansion, or the snapshot a member joined at).
    let seq: UInt64
    private let rows: [Row]
    private let chunkRows: Int
    private let chunkBytes: Int
    /// Encoded chunks so far.
    private var chunks: [OutboundMessage] = []
    /// Rows not yet in a chunk start here; `rows.count` once every chunk is encoded.
    private var nextRow = 0
    private var encodedAll = false
    /// Member connection id -> (member, next chunk to send).
    private var cursors: [UInt64: (connection: Connection, next: Int)] = [:]

    init(section: Section, seq: UInt64, chunkRows: Int, chunkBytes: Int) {
        self.section = section.key
        self.seq = seq
        self.rows = section.rows
        self.chunkRows = max(1, chunkRows)
        self.chunkBytes = max(1, chunkBytes)
    }

    func contains(_ connection: Connection) -> Bool { cursors[connection.id] != nil }

    func add(_ connection: Connection) {
        guard cursors[connection.id] == nil else { return }
        cursors[connection.id] = (connection, 0)
    }

    func remove(_ connection: Connection) {
        cursors[connection.id] = nil
    }

    /// Sends chunks to one member while its queue is at or below `lowMark`; asks the transport
    /// to say when it drains if chunks remain. Returns true when the member has every row (it
    /// then leaves the stream).
    func pump(_ connection: Connection, transport: Transport, lowMark: Int) -> Bool {
        guard var cursor = cursors[connection.id] else { return false }
        while transport.queuedBytes(connection) <= lowMark, let message = chunk(cursor.next) {
            transport.send(message, to: connection)
            cursor.next += 1
        }
        if chunk(cursor.next) != nil {
            cursors[connection.id] = cursor
            transport.requestDrain(connection, lowMark: lowMark)
            return false
        }
        cursors[connection.id] = nil
        return true
    }

    /// Chunk `index`, encoding it if it is the next one; `nil` past the last chunk.
    private func chunk(_ index: Int) -> OutboundMessage? {
        if index < chunks.count { return chunks[index] }
        guard index == chunks.count, !encodedAll else { return nil }
        let from = nextRow
        var to = from
        var bytes = 0
        while to < rows.count && to - from < chunkRows {
            bytes += Self.estimatedBytes(rows[to])
            to += 1
            if bytes >= chunkBytes { break }
        }
        let final = to == rows.count
        let message = OutboundMessage(
            ServerMessage.rows(section: section, seq: seq, from: from, total: rows.count, rows: rows[from..<to], final: final))
        chunks.append(message)
        nextRow = to
        encodedAll = final
        return message
    }

    /// About how many bytes a row takes encoded (its text plus the JSON around it).
    static func estimatedBytes(_ row: Row) -> Int {
        row.key.utf8.count + row.label.utf8.count + row.value.utf8.count + (row.detail?.utf8.count ?? 0) + 48
    }

    static func estimatedBytes(_ rows: ArraySlice<Row>) -> Int {
        rows.reduce(0) { $0 + estimatedBytes($1) }
    }
}
