// libFuzzer target for the client message decoder and `Table.apply` (issue 9).
//
// Not a SwiftPM target: Tests/fuzz/run.sh builds FoldtableCore instrumented with -enable-testing
// and links this file against it (`@testable`: the checks below read internal state).
//
// One input is a session's traffic: lines split on "\n", each line one client message, applied
// in order to one small table. After every line the target checks what the rest of the system
// relies on, and traps (a libFuzzer crash) when one does not hold:
// - decoding never traps, and every refusal encodes to an error reply that is valid JSON;
// - an applied change takes the next sequence number; a refused change or a retry leaves the
//   table byte-identical (its checkpoint and text byte count);
// - the event's wire form decodes to the same event, which replays on a second replica
//   (`Table.replay`) and catches up a third (`Table.applyCommitted`, what the store does) to the
//   same table, change-id window included;
// - the table's indexes agree with its sections and rows, and its checkpoint round-trips.

@testable import FoldtableCore

/// Lines after this many are ignored: inputs stay fast, and long sessions are what `-len_control`
/// grows toward anyway.
private let maxLines = 64

/// Small limits so that a short input can reach every "limit reached" branch.
private let limits: TableLimits = {
    var limits = TableLimits()
    limits.maxSections = 16
    limits.maxRowsPerSection = 8
    limits.maxRowsPerTable = 50
    limits.maxTextBytesPerTable = 1_200
    limits.maxTextBytes = 64
    limits.maxKeyBytes = 16
    limits.idempotencyWindow = 4
    return limits
}()

/// The demo table with 3 rows in its large section, under the small limits (42 rows of 50, 1,019
/// text bytes of 1,200: a few additions fit, then rows or text run out; the largest section is full).
private let start: Table = try! TableSnapshot(DemoTable.make(largeRows: 3), rows: .all).table(limits: limits)

/// What the server decodes client messages with (see `Hub.messageLimits`).
private let messageLimits: ClientMessage.Limits = {
    var limits = ClientMessage.Limits()
    limits.json.maxStringBytes = 4_096
    return limits
}()

/// What a client parses server messages with; events and error replies must fit within it.
private let replyLimits = JSONParser.Limits(maxDepth: 32, maxStringBytes: 4_096)

private let authors = [Author(client: "c1", name: "ana"), Author(client: "c2", name: "bo")]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDecoder(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = UnsafeBufferPointer(start: data, count: size)
    var table = start
    var replica = start
    var committed = start
    // The whole input once as one message too: newlines are JSON white space.
    _ = ClientMessage.decode(input, limits: messageLimits)
    for (number, line) in input.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).prefix(maxLines).enumerated() {
        let (result, id) = ClientMessage.decode(line, limits: messageLimits)
        let change: Change
        let changeId: String?
        switch result {
        case .failure(let error):
            checkReply(ServerMessage.error(error, id: id), "error reply to line \(number)")
            continue
        case .success(.change(let decoded, let decodedId)):
            change = decoded
            changeId = decodedId
        case .success:
            continue
        }
        let author = authors[number % authors.count]
        let before = TableCheckpoint.encode(table)
        let textBefore = table.textBytes
        let outcome: ApplyOutcome
        do {
            outcome = try table.apply(change, by: author, changeId: changeId)
        } catch {
            checkReply(ServerMessage.error(error, id: changeId), "error reply to line \(number)")
            require(TableCheckpoint.encode(table) == before, "refused line \(number) changed the table: \(error)")
            require(table.textBytes == textBefore, "refused line \(number) changed textBytes: \(error)")
            continue
        }
        switch outcome {
        case .duplicate(let seq):
            require(seq >= 1 && seq <= table.seq, "retry of line \(number) names seq \(seq) of \(table.seq)")
            require(TableCheckpoint.encode(table) == before, "retry of line \(number) changed the table")
        case .applied(let event):
            require(event.seq == replica.seq + 1 && table.seq == event.seq, "line \(number) applied as seq \(event.seq) after \(replica.seq)")
            // Members get the event without an import's rows; the log keeps it whole. Both decode,
            // and the whole one is what replicas replay.
            var whole = JSONWriter(capacity: 256)
            ServerMessage.encode(event, into: &whole, form: .whole)
            let decoded: TableEvent
            let forMembers: TableEvent
            do {
                decoded = try ServerMessage.decodeEvent(try JSONParser.parse(whole.bytes, limits: replyLimits))
                forMembers = try ServerMessage.decodeEvent(try JSONParser.parse(ServerMessage.event(event), limits: replyLimits))
            } catch {
                fatalError("fuzz invariant: the event of line \(number) does not decode: \(error)")
            }
            require(decoded == event, "the event of line \(number) decodes differently")
            var summary = event
            if case .importRows(let ref, let imported) = event.change {
                summary.change = .importRows(section: ref, rows: RowImport(count: imported.count, replace: imported.replace))
            }
            require(forMembers == summary, "the members' event of line \(number) decodes differently")
            do {
                try replica.replay(decoded)
                try committed.applyCommitted(decoded, request: change)
            } catch {
                fatalError("fuzz invariant: the event of line \(number) does not replay: \(error)")
            }
            require(
                TableSnapshot(replica, rows: .all) == TableSnapshot(table, rows: .all) && replica.textBytes == table.textBytes,
                "replica differs after line \(number)")
            require(
                replica.rememberedChanges.map(\.id) == table.rememberedChanges.map(\.id),
                "replica's change ids differ after line \(number)")
            require(TableCheckpoint.encode(committed) == TableCheckpoint.encode(table), "committed copy differs after line \(number)")
            checkIndexes(table)
        }
    }
    checkCheckpointRoundTrip(table)
    return 0
}

/// A server message must be JSON a client can parse.
private func checkReply(_ bytes: [UInt8], _ what: @autoclosure () -> String) {
    do {
        _ = try JSONParser.parse(bytes, limits: replyLimits)
    } catch {
        fatalError("fuzz invariant: \(what()) is not valid JSON: \(error)")
    }
}

/// Sections and rows are where the indexes say; counts and text bytes add up.
private func checkIndexes(_ table: Table) {
    var rows = 0
    var text = 0
    for (position, section) in table.sections.enumerated() {
        require(table.position(ofSection: section.key) == position, "section \(section.key) is not indexed at \(position)")
        text += section.title.utf8.count + (section.detail?.utf8.count ?? 0) + (section.footer?.utf8.count ?? 0)
        require(section.rows.count <= table.limits.maxRowsPerSection, "section \(section.key) passed its row limit")
        for row in section.rows {
            require(table.sectionKey(ofRow: row.key) == section.key, "row \(row.key) is not indexed in \(section.key)")
            text += row.label.utf8.count + row.value.utf8.count + (row.detail?.utf8.count ?? 0)
            rows += 1
        }
    }
    require(table.rowCount == rows, "rowCount \(table.rowCount) but \(rows) rows")
    require(table.textBytes == text, "textBytes \(table.textBytes) but \(text) bytes of text")
    require(table.sections.count <= table.limits.maxSections, "the table passed its section limit")
    require(text <= table.limits.maxTextBytesPerTable, "the table passed its text limit")
}

/// What a store writes rebuilds the same table, change-id window included.
private func checkCheckpointRoundTrip(_ table: Table) {
    let bytes = TableCheckpoint.encode(table)
    do {
        let restored = try TableCheckpoint.decode(bytes, limits: table.limits)
        require(TableCheckpoint.encode(restored) == bytes, "the checkpoint does not round-trip")
        require(restored.textBytes == table.textBytes, "the restored table counts its text differently")
    } catch {
        fatalError("fuzz invariant: the checkpoint does not decode: \(error)")
    }
}
