// hiredis 0.14.1 as Debian 12 ships it (libhiredis-dev). Only FoldtableRedis imports it.
//
// What Swift cannot use from it, and what FoldtableRedis does instead (so no C shim is needed):
// - redisCommand / redisAppendCommand are variadic printf-style functions: Swift cannot call
//   them. redisAppendCommandArgv takes an argv with lengths, which is binary-safe as well.
// - 0.14 has no RESP3, no redisConnectWithOptions, no TLS (hiredis_ssl came with 1.0) and no
//   push replies: redisConnectWithTimeout + redisSetTimeout on a blocking context, one thread.
// - After any error a context is unusable (0.14 keeps the error in c->err): it is freed and a
//   new one made.
//
// Included by its path under /usr/include, not through pkg-config (see Package.swift): hiredis.pc
// adds -D_FILE_OFFSET_BITS=64 to its cflags, a flag SwiftPM refuses from pkg-config, so every
// build printed a warning for it. hiredis.h finds its own headers (read.h, sds.h, alloc.h) by
// quoted includes next to itself.
#include <hiredis/hiredis.h>
