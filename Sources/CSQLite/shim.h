// SQLite 3.40 as Debian ships it (libsqlite3-dev). Only FoldtableStore imports it, so the rest of
// the server never sees C pointers or SQLite's threading rules.
#include <sqlite3.h>
