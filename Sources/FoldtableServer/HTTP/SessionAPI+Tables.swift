import FoldtableCore
import Foundation

// MARK: - Whole tables and rows in and out: exports streamed as readers take them, imports decoded off the service thread

extension SessionAPI {
    /// `GET /api/v1/sessions/NAME`: the whole table as committed, as the JSON document, or CSV
    /// with `?format=csv` (or `Accept: text/csv`).
    func exportTable(_ call: Call, _ respond: @escaping Respond) {
        let csv = call.request.query["format"] == "csv" || (call.request.header("accept")?.hasPrefix("text/csv") ?? false)
        withSession(call, respond) { [self] session in
            let table = session.core.committed
            let contentType = csv ? "text/csv; charset=utf-8" : "application/json"
            // The webhook's URL (never its secret) goes with the JSON document, to owners only,
            // as `GET .../webhook` is theirs: a URL may carry a receiver's own token.
            let webhook = csv || (call.grant.map { $0.role < .owner } ?? false) ? nil : hub.webhooks?.url(of: session.name)
            let key = Self.exportKey(session, table, csv ? "csv" : "json") + (webhook.map { "\u{0}" + $0 } ?? "")
            let large = table.rowCount >= RowFinder.asideRows
            export(key, table, large: large, contentType: contentType, respond) { table in
                csv ? CSVTable.encode(table) : Self.withWebhook(TableDocument.encode(table), url: webhook)
            }
        }
    }

    /// The document with `"webhook":{"url":...}` added when `url` is given. An import ignores
    /// it (unknown members are): a document must never make a server POST somewhere; the owner
    /// of the new session sets a webhook, with its secret, by `PUT .../webhook`.
    static func withWebhook(_ document: [UInt8], url: String?) -> [UInt8] {
        guard let url, document.last == UInt8(ascii: "}") else { return document }
        var out = JSONWriter(capacity: document.count + url.utf8.count + 24)
        out.raw(Array(document.dropLast()))
        out.raw(",\"webhook\":{\"url\":")
        out.string(url)
        out.raw("}}")
        return out.bytes
    }

    /// Which export of which table: the session's incarnation (`epoch`, new after a delete and a
    /// re-create), the committed seq and the form.
    private static func exportKey(_ session: TableSession, _ table: Table, _ form: String) -> String {
        "\(session.name)\u{0}\(session.core.epoch)\u{0}\(table.seq)\u{0}\(form)"
    }

    /// Answers with `encode(table)` as a body shared with every other reader of the same `key`
    /// (see ``SharedBody``): made once while someone reads it, on another thread for a large
    /// table (as a find is: see ``RowFinder``), and freed once the last reader has it.
    private func export<Value: Sendable>(
        _ key: String, _ value: Value, large: Bool, contentType: String, _ respond: @escaping Respond,
        encode: @escaping @Sendable (Value) -> [UInt8]
    ) {
        let answer = { (body: SharedBody) in respond(HTTPResponse(status: 200, headers: ["Content-Type": contentType], shared: body)) }
        if let body = exports[key]?.body { return answer(body) }
        guard exportWaiters[key] == nil else {
            exportWaiters[key, default: []].append(answer)
            return
        }
        exportWaiters[key] = [answer]
        let made = { [self] (body: SharedBody) in
            exports = exports.filter { $0.value.body != nil }
            exports[key] = WeakBody(body: body)
            for waiter in exportWaiters.removeValue(forKey: key) ?? [] { waiter(body) }
        }
        guard large else { return made(SharedBody(encode(value))) }
        // `made` is made here and only called back here, on the service thread.
        let continuation = ServiceThreadOnly(made)
        let queue = hub.transport.serviceQueue
        DispatchQueue.global(qos: .userInitiated).async {
            let body = SharedBody(encode(value))
            queue.post { continuation.value(body) }
        }
    }

    /// `GET .../sections/KEY/rows` (or a title with `?by=title`): one section's rows as
    /// `{"section":KEY,"title":...,"rows":[...]}`, or CSV with `?format=csv` (or `Accept: text/csv`),
    /// which imports back into a section unchanged.
    func exportRows(_ call: Call, _ respond: @escaping Respond) {
        let csv = call.request.query["format"] == "csv" || (call.request.header("accept")?.hasPrefix("text/csv") ?? false)
        let ref = sectionRef(call)
        withSession(call, respond) { [self] session in
            let table = session.core.committed
            let section: Section
            switch Self.find(ref, in: table) {
            case .success(let found): section = found
            case .failure(let error): return respond(Self.error(error))
            }
            let key = Self.exportKey(session, table, (csv ? "csv:" : "json:") + section.key)
            let contentType = csv ? "text/csv; charset=utf-8" : "application/json"
            export(key, section, large: section.rows.count >= RowFinder.asideRows, contentType: contentType, respond) { section in
                if csv { return CSVTable.encode(sections: [section]) }
                var out = JSONWriter(capacity: 64 + 48 * section.rows.count)
                out.raw("{\"section\":")
                out.string(section.key)
                out.nextKey("title")
                out.string(section.title)
                out.nextKey("rows")
                Row.encode(section.rows[...], into: &out)
                out.byte(UInt8(ascii: "}"))
                return out.bytes
            }
        }
    }

    /// `POST .../sections/KEY/rows` (or a title with `?by=title`): imports rows into one section,
    /// replacing its rows (or after them with `?mode=append`), from CSV (`label,value,detail`, and
    /// optionally `key`, `section`, `section_key`: see ``CSVTable``) or JSON (`{"rows":[...]}` or a
    /// bare array of `{"label","value","detail","key"}`). One change in the session's order: members
    /// get the event at once and the rows in chunks when they show the section (busy past the
    /// table's threshold). Answers `{"seq":N,"rows":COUNT}` after the commit.
    func importRows(_ call: Call, _ respond: @escaping Respond) {
        let replace: Bool
        switch call.request.query["mode"] ?? "replace" {
        case "replace": replace = true
        case "append": replace = false
        default: return respond(Self.error(400, ProtocolError(.invalidValue, "mode must be replace or append", field: "mode")))
        }
        let body = call.request.body
        let decode: @Sendable () throws(ProtocolError) -> CSVTable.SectionRows
        switch mediaType(call.request) {
        case "text/csv":
            let limits = hub.config.tableLimits
            decode = { () throws(ProtocolError) in try CSVTable.decodeRows(body, limits: limits) }
        case "application/json":
            let limits = hub.messageLimits
            decode = { () throws(ProtocolError) in CSVTable.SectionRows(rows: try Self.decodeRows(body, limits: limits)) }
        default:
            return respond(unsupportedMediaType(["text/csv", "application/json"]))
        }
        decodeAside(body.count, decode) { [self] result in
            switch result {
            case .success(let read): importRows(read.rows, named: (read.title, read.sectionKey), replace: replace, call, respond)
            case .failure(let error): respond(Self.error(error))
            }
        }
    }

    /// Bodies from this size on are decoded on another thread: a CSV of 100,000 rows takes a
    /// good part of a second to read, and every session waits while the service thread works.
    private static let decodeAsideBytes = 256 * 1_024

    /// Runs `decode` (pure work on a request body of `size` bytes) and `then` with its result on
    /// the service thread: inline for a small body, on a global queue for a large one.
    func decodeAside<Value: Sendable>(
        _ size: Int, _ decode: @escaping @Sendable () throws(ProtocolError) -> Value, then: @escaping (Result<Value, ProtocolError>) -> Void
    ) {
        @Sendable func run() -> Result<Value, ProtocolError> {
            do throws(ProtocolError) { return .success(try decode()) } catch { return .failure(error) }
        }
        guard size >= Self.decodeAsideBytes else { return then(run()) }
        // `then` is made here and only called back here, on the service thread.
        let continuation = ServiceThreadOnly(then)
        let queue = hub.transport.serviceQueue
        DispatchQueue.global(qos: .userInitiated).async {
            let result = run()
            queue.post { continuation.value(result) }
        }
    }

    /// The import of `rows` once read: checks that a file naming its section names this one.
    func importRows(
        _ rows: [NewRow], named: (title: String?, key: String?), replace: Bool, _ call: Call, _ respond: @escaping Respond
    ) {
        let ref = sectionRef(call)
        guard named.title != nil || named.key != nil else {
            return change(.importRows(section: ref, rows: RowImport(rows: rows, replace: replace)), call, respond, count: rows.count)
        }
        // A CSV that names its section (an export of one) must name this one.
        withTable(call, respond) { [self] table in
            guard case .success(let section) = Self.find(ref, in: table) else {
                return change(.importRows(section: ref, rows: RowImport(rows: rows, replace: replace)), call, respond, count: rows.count)
            }
            if let key = named.key, key != section.key {
                return respond(
                    Self.error(
                        400, ProtocolError(.invalidValue, "the file's section_key is \"\(key.prefix(64))\", not this section's", field: "section_key")
                    ))
            }
            if let title = named.title, title != section.title {
                return respond(
                    Self.error(
                        400, ProtocolError(.invalidValue, "the file's section is \"\(title.prefix(64))\", not this section's title", field: "section")
                    ))
            }
            change(.importRows(section: .key(section.key), rows: RowImport(rows: rows, replace: replace)), call, respond, count: rows.count)
        }
    }

    /// The rows of a JSON import body: `{"rows":[...]}` or a bare array.
    private static func decodeRows(_ body: [UInt8], limits: ClientMessage.Limits) throws(ProtocolError) -> [NewRow] {
        let value = try JSONParser.parse(body, limits: limits.json)
        let wrapped: JSONValue
        switch value {
        case .array: wrapped = .object([("type", .string("importRows")), ("section", .string("-")), ("rows", value)])
        case .object(let members):
            wrapped = .object([("type", .string("importRows")), ("section", .string("-"))] + members.filter { $0.0 == "rows" })
        default:
            throw ProtocolError(.wrongType, "the body must be {\"rows\": [...]} or an array of rows", field: "rows")
        }
        guard case .importRows(_, let imported) = try Change.decode(try FieldReader(wrapped), type: "importRows") else { return [] }
        return imported.rows
    }

    /// The section a call names in its path: by key, or by title with `?by=title`.
    func sectionRef(_ call: Call) -> SectionRef {
        let section = call.parameters["section"] ?? ""
        return call.request.query["by"] == "title" ? .title(section) : .key(section)
    }

    /// The one section `ref` names in `table`.
    private static func find(_ ref: SectionRef, in table: Table) -> Result<Section, ProtocolError> {
        switch ref {
        case .key(let key):
            guard let section = table.section(key) else {
                return .failure(ProtocolError(.unknownSection, "no section has the key \"\(key.prefix(64))\"", field: "section"))
            }
            return .success(section)
        case .title(let title):
            let matches = table.sections.filter { $0.title == title }
            guard matches.count == 1 else {
                return .failure(
                    matches.isEmpty
                        ? ProtocolError(.unknownSection, "no section has the title \"\(title.prefix(64))\"", field: "title")
                        : ProtocolError(.ambiguousTitle, "several sections have the title \"\(title.prefix(64))\"; name one by key", field: "title"))
            }
            return .success(matches[0])
        }
    }
}
