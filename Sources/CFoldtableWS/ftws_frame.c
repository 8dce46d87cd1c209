/*
 * Refcounted frames: one encoded message, shared by every connection it is queued to.
 *
 * Why sharing is safe: lws_write writes the WebSocket header into the LWS_PRE headroom in
 * front of the payload. A server never masks, so for a given payload that header is the same
 * bytes for every connection, and everything happens on the one service thread. (A connection
 * with permessage-deflate gets its header in lws's deflate buffer and leaves the headroom
 * alone.) So a broadcast to N clients is N pointer pushes, not N copies.
 */
#include "ftws_internal.h"

#include <stdlib.h>
#include <string.h>

ftws_frame *ftws__frame_create(const uint8_t *data, size_t len, bool binary)
{
    if (len > SIZE_MAX - sizeof(ftws_frame) - LWS_PRE)
        return NULL;
    ftws_frame *f = malloc(sizeof(ftws_frame) + LWS_PRE + len);
    if (!f)
        return NULL;
    f->refs = 1;
    f->len = len;
    f->binary = binary;
    if (len && data)
        memcpy(f->buf + LWS_PRE, data, len);
    return f;
}

/* New text frame holding a copy of data, refcount 1 (the caller's reference). */
ftws_frame *ftws_frame_create(const uint8_t *data, size_t len)
{
    return ftws__frame_create(data, len, false);
}

/* One more reference. Service thread only: the count is not atomic. */
void ftws_frame_retain(ftws_frame *frame)
{
    if (frame)
        frame->refs++;
}

/* Drop a reference; the last one frees the frame. */
void ftws_frame_release(ftws_frame *frame)
{
    if (frame && --frame->refs == 0)
        free(frame);
}

/* Payload length in bytes (without the headroom). */
size_t ftws_frame_length(const ftws_frame *frame)
{
    return frame ? frame->len : 0;
}
