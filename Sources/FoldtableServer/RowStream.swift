import FoldtableCore

/// The rows of one expanded section on their way to members, in chunks.
///
/// Chunks are encoded lazily, once, and the same message goes to every member (the transport
/// shares its bytes). Each member has its own cursor and is refilled only while its queue is
/// below the low mark, so a 100,000-row section never becomes one frame, a slow member never
/// makes the server buffer the whole section for it, and other sessions keep being served.
final class RowStream {
    let section: String
    /// The sequence number the rows belong to (the expansion, or the snapshot a member joined at).
    let seq: UInt64
    private let rows: [Row]
    private let chunkRows: Int
    private var chunks: [OutboundMessage?]
    /// Member connection id -> (member, next chunk to send).
    private(set) var cursors: [UInt64: (client: ClientState, next: Int)] = [:]
    /// Whether members were told the section is busy.
    var busyShown = false
    /// The busy-threshold timer while it is armed.
    var busyTimer: UInt64?

    init(section: Section, seq: UInt64, chunkRows: Int) {
        self.section = section.key
        self.seq = seq
        self.rows = section.rows
        self.chunkRows = chunkRows
        let count = max(1, (section.rows.count + chunkRows - 1) / chunkRows)
        self.chunks = Array(repeating: nil, count: count)
    }

    var isFinished: Bool { cursors.isEmpty }

    func add(_ client: ClientState) {
        guard cursors[client.connection.id] == nil else { return }
        cursors[client.connection.id] = (client, 0)
        client.streams.insert(section)
    }

    func remove(_ client: ClientState) {
        cursors[client.connection.id] = nil
        client.streams.remove(section)
    }

    /// Sends chunks to one member while its queue is at or below `lowMark`; asks the transport
    /// to say when it drains if chunks remain. Finished members leave the stream.
    func pump(_ client: ClientState, transport: Transport, lowMark: Int) {
        guard var cursor = cursors[client.connection.id] else { return }
        let connection = client.connection
        while cursor.next < chunks.count && transport.queuedBytes(connection) <= lowMark {
            transport.send(chunk(cursor.next), to: connection)
            cursor.next += 1
        }
        if cursor.next < chunks.count {
            cursors[client.connection.id] = cursor
            transport.requestDrain(connection, lowMark: lowMark)
        } else {
            remove(client)
        }
    }

    private func chunk(_ index: Int) -> OutboundMessage {
        if let message = chunks[index] { return message }
        let from = index * chunkRows
        let to = min(rows.count, from + chunkRows)
        let message = OutboundMessage(
            ServerMessage.rows(section: section, seq: seq, from: from, total: rows.count, rows: rows[from..<to], final: index == chunks.count - 1))
        chunks[index] = message
        return message
    }
}
