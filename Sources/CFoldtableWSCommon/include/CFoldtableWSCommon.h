/*
 * CFoldtableWSCommon: the few C helpers the server wrapper (CFoldtableWS) and the client wrapper
 * (CFoldtableWSClient) both need, so neither target compiles the other and nothing is copied.
 *
 * Why C: both callers are C files inside lws callbacks (message reassembly, close frames); these
 * work on their raw buffers. No libwebsockets here, no state, no threads: plain functions.
 */
#ifndef CFOLDTABLEWSCOMMON_H
#define CFOLDTABLEWSCOMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* RFC 6455 §5.5: a control frame carries at most 125 bytes of payload, and a close frame's
 * payload starts with its 2-byte status code, which leaves 123 bytes for the reason. */
#define FTWS_CLOSE_PAYLOAD_MAX_BYTES 125
#define FTWS_CLOSE_CODE_BYTES 2
/* The longest close reason either wrapper sends (longer ones are cut, see ftws_utf8_truncate):
 * one byte under the RFC's 123, because the server's header has promised "< 123 bytes" from the
 * start and a caller may rely on it; the client keeps the same bound so both sides cut alike.
 * Each wrapper keeps a buffer of this size + 1 per connection. */
#define FTWS_CLOSE_REASON_MAX_BYTES (FTWS_CLOSE_PAYLOAD_MAX_BYTES - FTWS_CLOSE_CODE_BYTES - 1)

/* Makes *buf hold at least need bytes: the first allocation is min(initial, limit), then the
 * capacity doubles, never past limit (need must not exceed limit; callers check their message
 * cap first). Returns 0, or -1 when out of memory (*buf is then unchanged). Reassembly of
 * fragmented WebSocket messages and HTTP request bodies grows with the bytes that arrived, never
 * with a length a peer announced. */
int ftws_buffer_reserve(uint8_t **buf, size_t *cap, size_t need, size_t initial, size_t limit);

/* Copies at most max bytes of text (NULL = "") into dst (which holds max + 1) and NUL-terminates
 * it, cutting only between UTF-8 sequences: a close reason cut inside a sequence would be invalid
 * UTF-8, which RFC 6455 makes the peer fail the connection for. Returns the length copied. */
size_t ftws_utf8_truncate(char *dst, const char *text, size_t max);

#ifdef __cplusplus
}
#endif
#endif
