import FoldtableCore

@testable import FoldtableClient

/// Server messages made the way the server makes them (its encoders), decoded the way the
/// client decodes them, so the tests exercise the real wire path.
enum Wire {
    static let ana = Author(client: "c1", name: "ana")
    static let bo = Author(client: "c2", name: "bo")

    static func welcome(
        _ table: Table, rows policy: TableSnapshot.RowPolicy = .expandedUpTo(2_000), busy: Set<String> = [], epoch: String = "e1",
        recovered: Bool? = nil
    ) throws -> ServerUpdate {
        let snapshot = TableSnapshot(table, rows: policy, busy: { busy.contains($0) })
        return try ServerUpdate.decode(
            ServerMessage.welcome(
                session: "demo", client: ana, epoch: epoch, snapshot: snapshot, presence: [.init(client: "c1", name: "ana")],
                recovered: recovered))
    }

    /// Applies `change` to the server's table and returns the event as the client receives it.
    static func event(_ table: inout Table, _ change: Change, by author: Author = bo, id: String? = nil, withOrigin: Bool = true) throws
        -> ServerUpdate
    {
        guard var event = try table.apply(change, by: author, changeId: id).appliedEvent else {
            throw ProtocolError(.idReused, "the fixture's change was a retry")
        }
        if !withOrigin { event.from = nil }  // as an older server sent removeRow and moveRow
        return try ServerUpdate.decode(ServerMessage.event(event))
    }

    /// The rows of `section` as the server streams them after an expansion at `seq`.
    static func rows(_ table: Table, section key: String, seq: UInt64, chunkRows: Int = 2) throws -> [ServerUpdate] {
        let rows = table.section(key)?.rows ?? []
        let chunks = max(1, (rows.count + chunkRows - 1) / chunkRows)
        return try (0..<chunks).map { index in
            let from = index * chunkRows
            let to = min(rows.count, from + chunkRows)
            return try ServerUpdate.decode(
                ServerMessage.rows(section: key, seq: seq, from: from, total: rows.count, rows: rows[from..<to], final: index == chunks - 1))
        }
    }

    /// A small table: Mac (expanded, 2 rows), Inventory (collapsed, 9 rows), a two-line
    /// province (collapsed, 3 rows), Empty (expanded, no rows).
    static func smallTable() throws -> Table {
        try Table(
            options: TableOptions(),
            sections: [
                Section(
                    key: "mac", title: "Mac", detail: "2 models", footer: "Desktops",
                    rows: [Row(key: "m1", label: "MacBook Air", value: "M3", detail: "13-inch"), Row(key: "m2", label: "iMac", value: "M4")]),
                Section(
                    key: "big", title: "Inventory", detail: "9 items", collapsed: true,
                    rows: (0..<9).map { Row(key: "b\($0)", label: "Item \($0)", value: String($0)) }),
                Section(
                    key: "prov", title: "Province\nSichuan", detail: "3 cities", collapsed: true,
                    rows: [Row(key: "p1", label: "Chengdu"), Row(key: "p2", label: "Mianyang"), Row(key: "p3", label: "Leshan")]),
                Section(key: "empty", title: "Empty"),
            ], seq: 0)
    }
}

extension SessionReplica {
    /// Applies every update in order.
    mutating func apply(_ updates: [ServerUpdate]) {
        for update in updates { apply(update) }
    }
}
