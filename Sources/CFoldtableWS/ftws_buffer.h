/* Private to CFoldtableWS: the growable buffer that server and client connections reassemble
 * fragmented messages in. */
#ifndef FTWS_BUFFER_H
#define FTWS_BUFFER_H

#include <stddef.h>
#include <stdint.h>

/* Makes *buf hold at least need bytes: the first allocation is min(initial, limit), then the
 * capacity doubles, never past limit (need must not exceed limit; callers check the message
 * cap first). Returns 0, or -1 when out of memory (*buf is then unchanged). */
int ftws__buffer_reserve(uint8_t **buf, size_t *cap, size_t need, size_t initial, size_t limit);

#endif
