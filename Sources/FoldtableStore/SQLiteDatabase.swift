import CSQLite

/// A failure reported by SQLite: its own message and extended result code, so logs say exactly
/// what the library saw (`database or disk is full`, `disk I/O error`, ...).
struct SQLiteError: Error, Equatable, CustomStringConvertible {
    /// The extended result code (`SQLITE_IOERR_FSYNC`, `SQLITE_BUSY_SNAPSHOT`, ...).
    var code: Int32
    var message: String

    /// The primary result code (`SQLITE_IOERR` for every `SQLITE_IOERR_*`).
    var primaryCode: Int32 { code & 0xFF }

    var description: String { "\(message) (\(Self.name(of: primaryCode)), code \(code))" }

    /// Names for the codes an operator is likely to meet; the number is always printed too.
    private static func name(of primary: Int32) -> String {
        switch primary {
        case SQLITE_FULL: return "SQLITE_FULL"
        case SQLITE_IOERR: return "SQLITE_IOERR"
        case SQLITE_BUSY: return "SQLITE_BUSY"
        case SQLITE_LOCKED: return "SQLITE_LOCKED"
        case SQLITE_READONLY: return "SQLITE_READONLY"
        case SQLITE_CANTOPEN: return "SQLITE_CANTOPEN"
        case SQLITE_CORRUPT: return "SQLITE_CORRUPT"
        case SQLITE_NOTADB: return "SQLITE_NOTADB"
        case SQLITE_CONSTRAINT: return "SQLITE_CONSTRAINT"
        case SQLITE_PERM: return "SQLITE_PERM"
        case SQLITE_TOOBIG: return "SQLITE_TOOBIG"
        default: return "SQLITE_ERROR"
        }
    }
}

/// One SQLite connection: open, exec, cached prepared statements, close.
///
/// Not thread-safe by design: a connection belongs to one thread at a time (the store's writer
/// thread, or the thread making a backup). Statements are cached per SQL text because the writer
/// runs the same few statements for every batch.
final class SQLiteDatabase {
    let path: String
    private var handle: OpaquePointer?
    private var statements: [String: SQLiteStatement] = [:]

    /// SQLite's process-wide settings, made once before the first connection opens (they can
    /// only be changed before SQLite initialises). Whether they took is of no consequence: they
    /// only save time.
    private static let configured: Bool = ftsqlite_disable_memory_statistics() == SQLITE_OK

    /// Opens (and with `create`, creates) the database at `path`. `readOnly` opens it for reading.
    init(path: String, create: Bool = true, readOnly: Bool = false) throws(SQLiteError) {
        _ = Self.configured
        self.path = path
        var flags = readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE
        if create && !readOnly { flags |= SQLITE_OPEN_CREATE }
        // NOMUTEX: each connection is confined to one thread, so SQLite's per-connection mutex
        // would only cost time.
        flags |= SQLITE_OPEN_NOMUTEX
        var opened: OpaquePointer?
        let status = sqlite3_open_v2(path, &opened, flags, nil)
        guard status == SQLITE_OK, let opened else {
            // A failed open may still hand back a handle that carries the message; read it, free it.
            let error = SQLiteError(
                code: opened.map { sqlite3_extended_errcode($0) } ?? status,
                message: opened.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(status)))
            sqlite3_close_v2(opened)
            throw error
        }
        handle = opened
        // Extended codes tell SQLITE_IOERR_FSYNC from SQLITE_IOERR_WRITE in logs.
        sqlite3_extended_result_codes(opened, 1)
    }

    deinit { close() }

    /// Finalizes every cached statement and closes the connection. Safe to call twice.
    func close() {
        for statement in statements.values { statement.finalize() }
        statements = [:]
        if let handle {
            sqlite3_close_v2(handle)
            self.handle = nil
        }
    }

    /// The raw handle, for the few calls this wrapper does not cover (backup, hooks in tests).
    var rawHandle: OpaquePointer? { handle }

    /// Whether the connection can only read (the file or its directory is write-protected).
    var isReadOnly: Bool {
        guard let handle else { return true }
        return sqlite3_db_readonly(handle, "main") == 1
    }

    /// Whether no transaction is open (SQLite rolls back by itself on some I/O errors).
    var isAutocommit: Bool {
        guard let handle else { return true }
        return sqlite3_get_autocommit(handle) != 0
    }

    /// The rowid of the last row this connection inserted.
    var lastInsertRowid: Int64 {
        guard let handle else { return 0 }
        return sqlite3_last_insert_rowid(handle)
    }

    /// Rows changed since the connection opened.
    var totalChanges: Int {
        guard let handle else { return 0 }
        return Int(sqlite3_total_changes(handle))
    }

    /// Runs one or more statements that return nothing the caller needs.
    func exec(_ sql: String) throws(SQLiteError) {
        let handle = try openHandle()
        var message: UnsafeMutablePointer<CChar>?
        let status = sqlite3_exec(handle, sql, nil, nil, &message)
        if status != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(message)
            throw SQLiteError(code: sqlite3_extended_errcode(handle), message: text)
        }
    }

    /// Runs one statement that returns no rows, prepared once and cached: for SQL run on every
    /// batch (`BEGIN IMMEDIATE`, `COMMIT`), which ``exec(_:)`` would parse again each time.
    func run(_ sql: String) throws(SQLiteError) {
        let statement = try statement(sql)
        defer { statement.reset() }
        try statement.step()
    }

    /// The first column of the first row of `sql` as text (`PRAGMA journal_mode=WAL` answers).
    func scalarText(_ sql: String) throws(SQLiteError) -> String? {
        let statement = try prepareUncached(sql)
        defer { statement.finalize() }
        return try statement.step() ? statement.text(0) : nil
    }

    /// The first column of the first row of `sql` as an integer.
    func scalarInt(_ sql: String) throws(SQLiteError) -> Int64? {
        let statement = try prepareUncached(sql)
        defer { statement.finalize() }
        return try statement.step() ? statement.int64(0) : nil
    }

    /// A prepared statement for `sql`, reset with its bindings cleared. Cached: the caller must
    /// `reset()` it when done (a statement left mid-result holds a read transaction open) and
    /// must not use the same SQL twice at once.
    func statement(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        if let cached = statements[sql] {
            cached.reset()
            return cached
        }
        let statement = try prepare(sql, persistent: true)
        statements[sql] = statement
        return statement
    }

    /// A statement the caller finalizes (one-off SQL such as pragmas and migrations).
    func prepareUncached(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        try prepare(sql, persistent: false)
    }

    /// The error SQLite holds for this connection right now.
    func lastError() -> SQLiteError {
        guard let handle else { return SQLiteError(code: SQLITE_MISUSE, message: "the database is closed") }
        return SQLiteError(code: sqlite3_extended_errcode(handle), message: String(cString: sqlite3_errmsg(handle)))
    }

    private func prepare(_ sql: String, persistent: Bool) throws(SQLiteError) -> SQLiteStatement {
        let handle = try openHandle()
        var prepared: OpaquePointer?
        let flags = persistent ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
        let status = sqlite3_prepare_v3(handle, sql, -1, flags, &prepared, nil)
        guard status == SQLITE_OK, let prepared else {
            sqlite3_finalize(prepared)
            throw lastError()
        }
        return SQLiteStatement(prepared, database: handle)
    }

    private func openHandle() throws(SQLiteError) -> OpaquePointer {
        guard let handle else { throw SQLiteError(code: SQLITE_MISUSE, message: "the database is closed") }
        return handle
    }
}

/// A prepared statement: bind parameters (1-based), step through rows, read columns (0-based).
final class SQLiteStatement {
    private var handle: OpaquePointer?
    private let database: OpaquePointer

    /// SQLite must copy bound text and blobs: Swift's buffers only live for the call.
    /// `SQLITE_TRANSIENT` is a cast macro Swift cannot import, hence the bit cast of -1.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    fileprivate init(_ handle: OpaquePointer, database: OpaquePointer) {
        self.handle = handle
        self.database = database
    }

    deinit { finalize() }

    func finalize() {
        if let handle {
            sqlite3_finalize(handle)
            self.handle = nil
        }
    }

    /// Ends the current run (releasing any read it holds) and clears the bindings.
    func reset() {
        guard let handle else { return }
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    func bind(_ index: Int32, _ value: String) throws(SQLiteError) {
        // Through the string's own UTF-8 (with its length), not the implicit C-string bridge,
        // which built a new NUL-terminated array for every small string bound.
        var value = value
        let handle = self.handle
        let status = value.withUTF8 { bytes in
            // An empty string still needs a non-null pointer, or SQLite stores NULL.
            let start = UnsafeRawPointer(bytes.baseAddress ?? UnsafePointer(bitPattern: 1)!).assumingMemoryBound(to: CChar.self)  // safe: 1 is not 0
            return sqlite3_bind_text(handle, index, start, Int32(bytes.count), Self.transient)
        }
        try check(status)
    }

    /// Binds UTF-8 bytes as text (SQLite copies them).
    func bind(_ index: Int32, text value: [UInt8]) throws(SQLiteError) {
        let status = value.withUnsafeBytes { bytes in
            // An empty string still needs a non-null pointer, or SQLite stores NULL.
            let start = (bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!).assumingMemoryBound(to: CChar.self)  // safe: 1 is not 0
            return sqlite3_bind_text64(handle, index, start, UInt64(bytes.count), Self.transient, UInt8(SQLITE_UTF8))
        }
        try check(status)
    }

    func bind(_ index: Int32, _ value: Int64) throws(SQLiteError) {
        try check(sqlite3_bind_int64(handle, index, value))
    }

    /// Sequence numbers are stored as SQLite's signed 64-bit integers; real ones never reach 2^63.
    func bind(_ index: Int32, _ value: UInt64) throws(SQLiteError) {
        try bind(index, Int64(bitPattern: value))
    }

    func bind(_ index: Int32, _ value: [UInt8]) throws(SQLiteError) {
        let status = value.withUnsafeBytes { bytes in
            // A zero-length blob still needs a non-null pointer, or SQLite stores NULL.
            sqlite3_bind_blob64(handle, index, bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1), UInt64(bytes.count), Self.transient)
        }
        try check(status)
    }

    /// Binds `value` without SQLite copying it, steps once, and binds NULL in its place again (so
    /// no pointer into `value` stays behind): an insert of bytes the caller encoded into a buffer
    /// it reuses. `true` when the step gave a row.
    @discardableResult
    func step(binding index: Int32, to value: [UInt8]) throws(SQLiteError) -> Bool {
        guard let handle else { throw SQLiteError(code: SQLITE_MISUSE, message: "the statement is finalized") }
        let (bound, status) = value.withUnsafeBytes { bytes -> (Int32, Int32) in
            // SQLITE_STATIC (nil): SQLite reads the bytes during the step, while they are alive
            // and unchanged here; it needs a non-null pointer for an empty blob.
            let bound = sqlite3_bind_blob64(handle, index, bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1), UInt64(bytes.count), nil)
            guard bound == SQLITE_OK else { return (bound, SQLITE_OK) }
            return (bound, sqlite3_step(handle))
        }
        try check(bound)
        sqlite3_bind_null(handle, index)
        return try checkStep(status)
    }

    /// Ends the current run (releasing any read it holds) but keeps the bindings: for a statement
    /// run many times in a row that binds every parameter anew or keeps some on purpose.
    func rewind() {
        guard let handle else { return }
        sqlite3_reset(handle)
    }

    /// Advances to the next row: `true` when there is one, `false` when the statement is done.
    @discardableResult
    func step() throws(SQLiteError) -> Bool {
        guard let handle else { throw SQLiteError(code: SQLITE_MISUSE, message: "the statement is finalized") }
        return try checkStep(sqlite3_step(handle))
    }

    private func checkStep(_ status: Int32) throws(SQLiteError) -> Bool {
        switch status {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            // With prepare_v3 the step's own code is the error; the message lives on the connection.
            throw SQLiteError(code: sqlite3_extended_errcode(database), message: String(cString: sqlite3_errmsg(database)))
        }
    }

    func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }

    func uint64(_ column: Int32) -> UInt64 { UInt64(bitPattern: int64(column)) }

    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

    func text(_ column: Int32) -> String? {
        guard let pointer = sqlite3_column_text(handle, column) else { return nil }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    /// The column's bytes, copied (SQLite's buffer is only valid until the next step).
    func blob(_ column: Int32) -> [UInt8] {
        // Ask for the pointer before the size, as SQLite's documentation says.
        guard let pointer = sqlite3_column_blob(handle, column) else { return [] }
        let count = Int(sqlite3_column_bytes(handle, column))
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    private func check(_ status: Int32) throws(SQLiteError) {
        guard status == SQLITE_OK else {
            throw SQLiteError(code: sqlite3_extended_errcode(database), message: String(cString: sqlite3_errmsg(database)))
        }
    }
}
