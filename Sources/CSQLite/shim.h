// SQLite 3.40 as Debian ships it (libsqlite3-dev). Only FoldtableStore imports it, so the rest of
// the server never sees C pointers or SQLite's threading rules.
#include <sqlite3.h>

// sqlite3_config is variadic, which Swift cannot call. Turns off SQLite's memory statistics
// (sqlite3_memory_used and friends, which Foldtable never reads): with them on, every allocation
// SQLite makes takes a global mutex. Valid only before SQLite initialises (returns SQLITE_MISUSE
// after); process-wide.
static inline int ftsqlite_disable_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
