// libFuzzer target for what comes back from Redis: replies (RESP, read by hiredis and copied
// into RedisReply), stream entries and IDs, and the request, history and presence codings
// inside them (FoldtableRedis; issue 29). Another node, an older version or a damaged Redis can
// put any bytes there.
//
// Not a SwiftPM target: Tests/fuzz/run.sh builds FoldtableCore, FoldtableServer and
// FoldtableRedis (hiredis through the CHiredis module map) instrumented with -enable-testing and
// links this file against them.
//
// The first byte of an input picks what the rest is:
// - 0: a reply stream as Redis sends it, fed to hiredis's own reader (arrays of at most 4,096
//   elements: see `announcesLongArray`); every reply is copied as RedisConnection copies it and
//   read by every decoder of replies (XRANGE and XREAD entries, a session's opening snapshot,
//   presence and session counts);
// - 1: a stream entry's `req` field (RequestCoding);
// - 2: a snapshot's `history` field (HistoryCoding);
// - 3: a node's presence (PresenceCoding).
// The target traps (a libFuzzer crash) when one of these does not hold:
// - nothing traps, whatever the bytes;
// - a stream ID reads back from its text; an entry's number is its `n` field's decimal value;
// - an opened session's table keeps its limits, its history has positive sequence numbers;
// - a request, a history and a presence that decode encode to bytes that decode to the same
//   (requests and presences from valid UTF-8, as nodes write them: see `isValidUTF8`).

@testable import CHiredis
@testable import FoldtableCore
@testable import FoldtableRedis
@testable import FoldtableServer

private let limits = smallTableLimits

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRedis(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = UnsafeBufferPointer(start: data, count: size)
    guard let mode = input.first else { return 0 }
    let rest = Array(input.dropFirst())
    switch mode % 4 {
    case 0: replies(rest).forEach(checkReply)
    case 1: checkRequest(rest)
    case 2: checkHistory(rest)
    default: checkPresence(rest)
    }
    return 0
}

/// Arrays longer than this are not fed to hiredis (see ``announcesLongArray(_:)``).
private let maxArrayElements = 4_096

/// Whether `bytes` hold an array header (`*N`) with N past ``maxArrayElements``. hiredis 0.14
/// allocates an array's element slots as soon as it reads the header, before any element came
/// (`*854775808` asks for 6.8 GB): that is hiredis trusting its server, not a decoder of ours,
/// and the server is the Redis we are configured with. Inputs announcing such arrays are left
/// out, so the target's out-of-memory verdicts stay about our code.
private func announcesLongArray(_ bytes: [UInt8]) -> Bool {
    var index = 0
    while let star = bytes[index...].firstIndex(of: UInt8(ascii: "*")) {
        var count = 0
        var cursor = star + 1
        while cursor < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[cursor]) {
            count = min(count * 10 + Int(bytes[cursor] - UInt8(ascii: "0")), maxArrayElements + 1)
            cursor += 1
        }
        if count > maxArrayElements { return true }
        index = star + 1
    }
    return false
}

/// The replies hiredis reads from `bytes` (at most 16), copied as the client copies them.
private func replies(_ bytes: [UInt8]) -> [RedisReply] {
    guard !announcesLongArray(bytes), let reader = redisReaderCreate() else { return [] }
    defer { redisReaderFree(reader) }
    let fed = bytes.withUnsafeBufferPointer { buffer in
        buffer.baseAddress.map { base in
            base.withMemoryRebound(to: CChar.self, capacity: buffer.count) { redisReaderFeed(reader, $0, buffer.count) }
        } ?? REDIS_OK
    }
    guard fed == REDIS_OK else { return [] }
    var found: [RedisReply] = []
    while found.count < 16 {
        var raw: UnsafeMutableRawPointer?
        guard redisReaderGetReply(reader, &raw) == REDIS_OK, let raw else { break }
        found.append(RedisConnection.copy(raw.assumingMemoryBound(to: redisReply.self)))
        freeReplyObject(raw)
    }
    return found
}

/// Every decoder of replies, on one reply.
private func checkReply(_ reply: RedisReply) {
    _ = reply.summary
    _ = reply.integer
    if let text = reply.string, let id = StreamID(text) {
        require(StreamID(id.description) == id, "stream ID \(id) does not read back from its text")
    }
    if let entries = StreamEntry.list(reply) { entries.forEach(checkEntry) }
    if let batches = RedisClient.streamBatches(reply) {
        for batch in batches { batch.entries.forEach(checkEntry) }
    }
    if let counts = RedisSessionCounts.counts(reply) {
        require(counts.count <= (reply.elements?.count ?? 0) / 2, "more session counts than pairs")
    }
    var dropped = false
    if let session = try? RedisBroker.opened(reply, limits: limits, historyDropped: { dropped = true }) {
        checkLimits(session.table)
        require(session.history.allSatisfy { $0.seq > 0 }, "an opened session's history holds seq 0")
        require(!dropped || session.history.isEmpty, "a dropped history was kept")
        if !session.position.isEmpty {
            require(StreamID(session.position) != nil, "an opened session's position \(session.position) is not a stream ID")
        }
    }
}

/// An entry's ID reads back, its number is its `n` field's decimal value, and its request (if
/// it decodes) round-trips.
private func checkEntry(_ entry: StreamEntry) {
    require(StreamID(entry.id.description) == entry.id, "stream ID \(entry.id) does not read back from its text")
    if let number = RedisBroker.number(entry) {
        require(UInt64(String(decoding: entry["n"] ?? [], as: UTF8.self)) == number, "entry number \(number) is not its n field")
    }
    if let request = try? RedisBroker.decode(entry, limits: limits) {
        require(request.position == entry.id.description, "a request at \(request.position) read from entry \(entry.id)")
    }
    if let bytes = entry["req"] { checkRequest(bytes) }
}

/// Whether a round trip must give back what was decoded: the JSON reader repairs invalid UTF-8
/// (U+FFFD, 3 bytes for 1), so a string read within its 4 KiB limit can be written back past
/// it. Nodes write strings that are valid UTF-8; from those, what the writer writes is never
/// longer than what was read (it escapes only controls, quotes and backslashes).
private func isValidUTF8(_ bytes: [UInt8]) -> Bool {
    String(validating: bytes, as: UTF8.self) != nil
}

private func checkRequest(_ bytes: [UInt8]) {
    guard let request = try? RequestCoding.decode(bytes, position: "1-1", limits: limits) else { return }
    require(request.origin.number > 0, "a request numbered 0")
    guard isValidUTF8(bytes) else { return }
    do {
        let again = try RequestCoding.decode(RequestCoding.encode(request), position: "1-1", limits: limits)
        require(again == request, "a request encodes to one that decodes differently: \(request) and \(again)")
    } catch {
        fatalError("fuzz invariant: a decoded request encodes to bytes that do not decode: \(error.message)")
    }
}

private func checkHistory(_ bytes: [UInt8]) {
    guard let history = try? HistoryCoding.decode(bytes) else { return }
    require(history.allSatisfy { $0.seq > 0 }, "a history entry with seq 0")
    require(history.reduce(0) { $0 + $1.message.count } <= bytes.count, "history messages longer than their bytes")
    do {
        let again = try HistoryCoding.decode(HistoryCoding.encode(history))
        require(again == history, "a history encodes to one that decodes differently")
    } catch {
        fatalError("fuzz invariant: a decoded history encodes to bytes that do not decode")
    }
}

private func checkPresence(_ bytes: [UInt8]) {
    guard let presence = try? PresenceCoding.decode(bytes, node: "n1", version: "v1") else { return }
    require(presence.count >= 0, "a presence of \(presence.count) members")
    guard isValidUTF8(bytes) else { return }
    do {
        let again = try PresenceCoding.decode(PresenceCoding.encode(count: presence.count, members: presence.members), node: "n1", version: "v1")
        require(again == presence, "a presence encodes to one that decodes differently: \(presence) and \(again)")
    } catch {
        fatalError("fuzz invariant: a decoded presence encodes to bytes that do not decode: \(error.message)")
    }
}

/// A table from Redis keeps the limits it was decoded under.
private func checkLimits(_ table: Table) {
    require(table.sections.count <= limits.maxSections, "an opened table of \(table.sections.count) sections")
    require(table.rowCount <= limits.maxRowsPerTable, "an opened table of \(table.rowCount) rows")
    require(table.sections.allSatisfy { $0.rows.count <= limits.maxRowsPerSection }, "an opened section past its row limit")
    require(table.textBytes <= limits.maxTextBytesPerTable, "an opened table of \(table.textBytes) text bytes")
}
