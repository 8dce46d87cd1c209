import FoldtableServer

/// The store's schema, versioned with `PRAGMA user_version`.
///
/// Each entry of `steps` takes the schema from version `index` to `index + 1`; a database is
/// brought up to ``current`` in one `BEGIN IMMEDIATE` transaction, so a crash mid-migration leaves
/// the old version intact. A database from a newer build is refused rather than guessed at:
/// this build cannot know what the newer columns mean.
enum Migrations {
    /// Version 1.
    ///
    /// - `meta`: small settings (`rotate_epochs` = `1` in a backup copy, `last_open`).
    /// - `sessions`: one row per session: its epoch, the newest checkpoint (``TableCheckpoint``
    ///   bytes) and the seq it is at, and the seq of the last logged event (the log's head, which
    ///   appends must follow).
    /// - `events`: the log, one ``TableCheckpoint/encodeEntry(_:request:encodedEvent:)`` per event, clustered
    ///   by (session, seq) so a session's events are read in one range scan.
    ///
    /// STRICT makes SQLite refuse a value of the wrong type instead of storing it silently.
    ///
    /// Version 2: the log becomes `journal`, one append-order table for every session (rowid
    /// order, no index by session). Clustered by (session, seq), a commit of one event for each of
    /// 1,000 sessions rewrote 1,000 leaf pages (4 MiB of WAL); appended in rowid order it writes
    /// about as many pages as the events weigh. Sessions find their rows through ``JournalIndex``,
    /// built in memory when the store opens. The events of version 1 move over in (session, seq)
    /// order, so each session's rowids increase with its seq. `sessions.first_row` is the
    /// journal's newest rowid when the session was created: rows at or below it belong to an
    /// earlier session of the same name (dead rows wait for truncation, not deleted one by one).
    /// From version 2 on, `last_seq` is the log's head as of the row's last write (creation or
    /// checkpoint): appends write journal rows only, and the journal says where the log ends.
    ///
    /// Version 3: a journal row holds about a page of one commit's events, every session's, not
    /// one event: each row costs an insert (in SQLite a B-tree cell, a rowid and a VDBE run),
    /// and a commit of 1,000 single-event appends paid it 1,000 times (see
    /// `SessionTables.rowLimit` for why not one row for the whole commit). `runs` lists the
    /// row's runs of consecutive events of one session, `[session, first seq, count, bytes]`, as
    /// a JSON array; `entries` holds their ``TableCheckpoint/encodeEntry(_:request:encodedEvent:)``
    /// forms in that order, joined by newlines (an entry never holds a raw newline byte: JSON
    /// strings escape every control character), so a run's bytes are found by adding up the
    /// lengths before it. Version 2's rows become rows of one run of one event, rowids kept.
    ///
    /// Version 4: a checkpoint no longer holds the change-id window. The window is ten thousand
    /// ids by default (about 630 KiB) against a table of a few hundred bytes, and a checkpoint
    /// every thousand events that wrote it whole wrote each id ten times: once every window was
    /// full, four bytes in five a session wrote were ids it had written before. `change_ids`
    /// holds it in slices instead: each checkpoint adds the ids remembered since the session's
    /// previous one (`through_seq`: the checkpoint's seq) and deletes the slices wholly older
    /// than its window, so each id is written once. A version-3 checkpoint's window becomes its
    /// session's first slice, and the checkpoint is written again without it. (The text is cast
    /// because SQLite from 3.45 on reads a BLOB given to its JSON functions as JSONB.)
    ///
    /// Version 5: `saved_views` keeps each session's token users' private views
    /// (``SavedViews/encoded()`` bytes), beside its checkpoint and written in the same
    /// transaction, but only when they changed: a thousand views of a thousand sections weigh
    /// megabytes against a table of kilobytes. A session without a row has none (every session
    /// of an older database).
    ///
    /// Version 6: `invites` keeps the tokens owners minted through the invites API (their ids
    /// and what the listing shows, never a token), `withdrawn_tokens` the ids withdrawn before
    /// their tokens expire, each `until` the token would have lapsed. Both are pruned of expired
    /// rows as they are written (see `SQLiteStore+Invites.swift`), so they stay bounded.
    /// Version 7: `webhooks` keeps each session's webhook (URL, `whsec_` secret, the epoch it
    /// was set in) and its receiver's cursor (`delivered`: the last seq acknowledged; `paused`:
    /// why deliveries stopped, or NULL). The events to deliver are the log's own: no outbox, so
    /// a change writes nothing more; the cursor is saved at most once a second per webhook (a
    /// write of its own, so a sync when no append shares its commit).
    static let steps: [String] = [
        """
        CREATE TABLE meta(key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) STRICT;
        CREATE TABLE sessions(
            name TEXT PRIMARY KEY NOT NULL,
            epoch TEXT NOT NULL,
            checkpoint_seq INTEGER NOT NULL CHECK (checkpoint_seq >= 0),
            last_seq INTEGER NOT NULL CHECK (last_seq >= checkpoint_seq)
        ) STRICT, WITHOUT ROWID;
        CREATE TABLE checkpoints(
            session TEXT PRIMARY KEY NOT NULL,
            data BLOB NOT NULL
        ) STRICT;
        CREATE TABLE events(
            session TEXT NOT NULL,
            seq INTEGER NOT NULL,
            entry BLOB NOT NULL,
            PRIMARY KEY (session, seq)
        ) STRICT, WITHOUT ROWID;
        """,
        """
        CREATE TABLE journal(
            id INTEGER PRIMARY KEY,
            session TEXT NOT NULL,
            seq INTEGER NOT NULL,
            entry BLOB NOT NULL
        ) STRICT;
        ALTER TABLE sessions ADD COLUMN first_row INTEGER NOT NULL DEFAULT 0;
        INSERT INTO journal(session, seq, entry) SELECT session, seq, entry FROM events ORDER BY session, seq;
        DROP TABLE events;
        """,
        """
        CREATE TABLE journal_runs(
            id INTEGER PRIMARY KEY,
            runs TEXT NOT NULL,
            entries BLOB NOT NULL
        ) STRICT;
        INSERT INTO journal_runs(id, runs, entries)
            SELECT id, json_array(json_array(session, seq, 1, length(entry))), entry FROM journal ORDER BY id;
        DROP TABLE journal;
        ALTER TABLE journal_runs RENAME TO journal;
        """,
        """
        CREATE TABLE change_ids(
            session TEXT NOT NULL,
            through_seq INTEGER NOT NULL CHECK (through_seq >= 0),
            ids BLOB NOT NULL,
            PRIMARY KEY (session, through_seq)
        ) STRICT;
        INSERT INTO change_ids(session, through_seq, ids)
            SELECT session, json_extract(CAST(data AS TEXT), '$.seq'), CAST(json_extract(CAST(data AS TEXT), '$.changeIds') AS BLOB)
            FROM checkpoints WHERE json_array_length(CAST(data AS TEXT), '$.changeIds') > 0;
        UPDATE checkpoints SET data = CAST(json_remove(CAST(data AS TEXT), '$.changeIds') AS BLOB);
        """,
        """
        CREATE TABLE saved_views(
            session TEXT PRIMARY KEY NOT NULL,
            data BLOB NOT NULL
        ) STRICT;
        """,
        """
        CREATE TABLE invites(
            id TEXT PRIMARY KEY NOT NULL,
            session TEXT NOT NULL,
            role TEXT NOT NULL,
            label TEXT NOT NULL,
            created INTEGER NOT NULL,
            expires INTEGER NOT NULL,
            created_by TEXT NOT NULL
        ) STRICT;
        CREATE INDEX invites_by_session ON invites(session, created);
        CREATE TABLE withdrawn_tokens(
            id TEXT PRIMARY KEY NOT NULL,
            until INTEGER NOT NULL
        ) STRICT;
        """,
        """
        CREATE TABLE webhooks(
            session TEXT PRIMARY KEY NOT NULL,
            url TEXT NOT NULL,
            secret TEXT NOT NULL,
            epoch TEXT NOT NULL,
            delivered INTEGER NOT NULL CHECK (delivered >= 0),
            paused TEXT
        ) STRICT;
        """,
    ]

    /// The schema version this build writes.
    static var current: Int { steps.count }

    /// Brings `database` to ``current``, or refuses it when it is newer. Also writes
    /// `meta('last_open')`, so that opening proves the database can be written (a read-only file
    /// or a full disk fails here, at start-up, not on the first change).
    static func migrate(_ database: SQLiteDatabase, now: String) throws(StoreError) {
        var found = 0
        do throws(SQLiteError) {
            try database.exec("BEGIN IMMEDIATE")
            found = Int(try database.scalarInt("PRAGMA user_version") ?? 0)
            if found > current {
                try database.exec("ROLLBACK")
            } else {
                for version in found..<current {
                    try database.exec(steps[version])
                }
                // user_version cannot be bound as a parameter; `current` is our own integer.
                try database.exec("PRAGMA user_version = \(current)")
                let write = try database.prepareUncached("INSERT OR REPLACE INTO meta(key, value) VALUES ('last_open', ?1)")
                defer { write.finalize() }
                try write.bind(1, now)
                try write.step()
                try database.exec("COMMIT")
            }
        } catch {
            if !database.isAutocommit { try? database.exec("ROLLBACK") }
            throw StoreError.unavailable("cannot write the database \(database.path): \(error)")
        }
        guard found <= current else {
            throw StoreError.unavailable("the database \(database.path) is from a newer foldtabled (schema \(found), this build knows \(current))")
        }
    }
}
