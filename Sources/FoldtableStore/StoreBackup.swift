import CSQLite
import FoldtableServer
import Glibc

/// Online backup of the store's database with SQLite's backup API.
///
/// Copying the file alone is not a backup: under WAL the newest commits live in `-wal`. The
/// backup API reads a consistent snapshot through a connection of its own, so under WAL the
/// writer is never blocked while the copy is made.
enum StoreBackup {
    /// Copies `source` to `destination` (which must not exist), then marks the copy with
    /// `meta('rotate_epochs','1')` and turns it into a single self-contained file
    /// (`journal_mode=DELETE`). On failure the partial copy is removed.
    static func copy(from source: String, to destination: String, busyTimeoutMs: Int) throws(StoreError) {
        guard access(destination, F_OK) != 0 else {
            throw StoreError.unavailable("the backup file \(destination) already exists")
        }
        do throws(SQLiteError) {
            try run(from: source, to: destination, busyTimeoutMs: busyTimeoutMs)
        } catch {
            for suffix in ["", "-journal", "-wal", "-shm"] { unlink(destination + suffix) }
            throw StoreError.unavailable("cannot back up \(source) to \(destination): \(error)")
        }
    }

    private static func run(from source: String, to destination: String, busyTimeoutMs: Int) throws(SQLiteError) {
        let from = try SQLiteDatabase(path: source, create: false)
        defer { from.close() }
        try from.exec("PRAGMA busy_timeout = \(busyTimeoutMs)")
        let into = try SQLiteDatabase(path: destination, create: true)
        defer { into.close() }
        try into.exec("PRAGMA busy_timeout = \(busyTimeoutMs)")

        guard let backup = sqlite3_backup_init(into.rawHandle, "main", from.rawHandle, "main") else {
            throw into.lastError()
        }
        // One step copies every page under one read of the source: a consistent snapshot.
        // Busy or locked (a checkpoint holding the file for a moment) is retried a few times.
        var status = SQLITE_OK
        for _ in 0..<50 {
            status = sqlite3_backup_step(backup, -1)
            guard status == SQLITE_BUSY || status == SQLITE_LOCKED else { break }
            usleep(20_000)
        }
        let finished = sqlite3_backup_finish(backup)
        guard status == SQLITE_DONE, finished == SQLITE_OK else {
            let error = into.lastError()
            throw SQLiteError(code: status == SQLITE_DONE ? finished : status, message: error.message)
        }
        _ = try into.scalarText("PRAGMA journal_mode = DELETE")
        try into.exec("INSERT OR REPLACE INTO meta(key, value) VALUES ('rotate_epochs', '1')")
    }
}
