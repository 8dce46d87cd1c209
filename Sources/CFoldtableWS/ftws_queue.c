/*
 * The outbound side of a connection: the public send/broadcast/close/drain calls, and what
 * happens on LWS_CALLBACK_SERVER_WRITEABLE. Sits on ftws_conn.c (the frame ring, the close
 * decision) and calls nothing above it.
 *
 * The rule from lws (READMEs/README.coding.md) is one lws_write per WRITEABLE callback. To
 * still deliver many messages per callback, several queued text frames are joined with '\n'
 * into one shared scratch buffer and written as a single frame. lws copies whatever the
 * kernel did not take into its own per-connection buffer, so the scratch buffer and the
 * frames are free to reuse as soon as lws_write returns.
 *
 * Except with permessage-deflate (ftws_deflate.c): zlib may still be reading a big message from
 * the buffer handed to lws_write while lws sends its later fragments. Such a connection batches
 * into a frame of its own instead of the shared buffer, and keeps the frame it wrote (in_flight)
 * until its next WRITEABLE, which lws only delivers once the whole message is out.
 */
#include "ftws_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- public connection API --------------------------------------------------------------- */

/* Queue a frame. Refuses (-1) once a close is decided. Passing max_queue_bytes means the peer
 * is not keeping up: its queue is dropped at once (so memory stays bounded) and it is closed
 * with slow_close_code. The frame count is capped too (ftws__queue_max_frames in
 * ftws_internal.h), because zero-length frames would otherwise grow the ring without adding
 * bytes. */
int ftws_conn_send(ftws_conn *conn, ftws_frame *frame)
{
    if (!conn || !frame || conn->closing)
        return -1;
    ftws_server *s = conn->server;
    ftws_queue *q = &conn->q;
    size_t cap = s->cfg.max_queue_bytes;
    /* The cap bounds a backlog, not one message: a frame larger than the cap is still taken
     * when nothing is queued (a big welcome must not make a session unjoinable). */
    if ((q->bytes > 0 && frame->len > cap - q->bytes) || q->count >= ftws__queue_max_frames(cap)) {
        ftws__conn_close_soon(conn, s->cfg.slow_close_code, "slow consumer", true);
        return -1;
    }
    bool was_empty = q->count == 0;
    if (ftws__queue_push(q, frame)) {
        ftws__conn_close_soon(conn, FTWS_CLOSE_SERVER_ERROR, "out of memory", true);
        return -1;
    }
    if (was_empty) {
        /* The send-stall clock starts when the queue becomes busy, not at the last write
         * of some earlier burst. */
        conn->last_progress_us = lws_now_usecs();
        ftws__conn_request_writable(conn);
    }
    return 0;
}

/* Fan-out: the same frame pushed to every connection; each push is a pointer plus a
 * refcount increment. The pointers are read `stride` bytes apart (see the header). Returns how
 * many connections refused it. */
size_t ftws_broadcast(ftws_frame *frame, const void *first, size_t stride, size_t count)
{
    size_t refused = 0;
    const unsigned char *at = first;
    for (size_t i = 0; i < count; i++, at += stride) {
        ftws_conn *conn;
        memcpy(&conn, at, sizeof conn);
        if (ftws_conn_send(conn, frame))
            refused++;
    }
    return refused;
}

/* Graceful close: the frame goes out after everything already queued. */
void ftws_conn_close(ftws_conn *conn, int code, const char *reason)
{
    if (!conn || conn->closing)
        return;
    ftws__conn_close_soon(conn, code, reason, false);
}

/* One on_drain once the queue is at or below low_mark. If it already is, the callback still
 * comes from the next WRITEABLE rather than from inside this call, so the owner never sees
 * on_drain re-entering the code that asked for it. */
void ftws_conn_request_drain(ftws_conn *conn, size_t low_mark)
{
    if (!conn || conn->closing)
        return;
    conn->drain_requested = true;
    conn->drain_low_mark = low_mark;
    if (conn->q.bytes <= low_mark)
        ftws__conn_request_writable(conn);
}

/* ---- LWS_CALLBACK_SERVER_WRITEABLE --------------------------------------------------------- */

static void maybe_drain(ftws_conn *c)
{
    if (c->drain_requested && !c->closing && c->q.bytes <= c->drain_low_mark) {
        c->drain_requested = false;
        ftws_server *s = c->server;
        if (s->cb.on_drain)
            s->cb.on_drain(s->cb.owner, c);
    }
}

/* Exactly one lws_write (data or, via return -1, the close frame). Returns -1 to make lws
 * close the connection. */
int ftws__conn_writeable(ftws_conn *c)
{
    ftws_server *s = c->server;
    ftws_queue *q = &c->q;
    struct lws *wsi = c->wsi;

    c->writable_requested = false;
    /* lws is done with the previous message: it calls us again only after its last fragment. */
    ftws_frame_release(c->in_flight);
    c->in_flight = NULL;

    if (c->ping_pending) {
        /* The keepalive's ping (ftws_keepalive.c) takes this WRITEABLE; the queue the next.
         * One byte of payload: lws 4.1.6 reports no empty pong (LWS_CALLBACK_RECEIVE_PONG is
         * skipped for a zero length), and the pong is what keeps a silent peer connected.
         * lws copies whatever the kernel does not take, so the stack may hold it. */
        c->ping_pending = false;
        if (!c->closing) {
            uint8_t ping[LWS_PRE + 1];
            ping[LWS_PRE] = 'k';
            if (lws_write(wsi, ping + LWS_PRE, 1, LWS_WRITE_PING) < 0)
                return -1;
            if (q->count || c->close_pending || c->drain_requested)
                ftws__conn_request_writable(c);
            return 0;
        }
    }

    if (q->count == 0) {
        if (c->close_pending) {
            /* lws only delivers WRITEABLE with nothing of ours still buffered, so the close
             * frame really goes out now (lws skips it when a partial write is pending). */
            lws_close_reason(wsi, (enum lws_close_status)c->pending_code,
                             (unsigned char *)c->pending_reason, c->pending_reason_len);
            c->close_code = c->pending_code;
            return -1;
        }
        maybe_drain(c);
        return 0;
    }

    ftws_frame *f0 = ftws__queue_at(q, 0);
    size_t batch = s->cfg.max_batch_bytes;
    size_t used;
    size_t payload;
    int n;

    bool single = q->count == 1 || batch == 0 || f0->binary;
    if (!single) {
        ftws_frame *f1 = ftws__queue_at(q, 1);
        single = f1->binary || f0->len > batch || f1->len + 1 > batch - f0->len;
    }

    if (single) {
        /* Straight from the shared frame: its headroom takes the header. */
        used = 1;
        payload = f0->len;
        if (c->deflate) {
            ftws_frame_retain(f0);
            c->in_flight = f0;
        }
        n = lws_write(wsi, ftws__frame_payload(f0), f0->len,
                      f0->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT);
    } else {
        /* How many frames fit, and their joined length. */
        payload = 0;
        for (used = 0; used < q->count; used++) {
            ftws_frame *f = ftws__queue_at(q, used);
            size_t need = f->len + (used ? 1 : 0);
            if (f->binary || need > batch - payload)
                break;
            payload += need;
        }
        uint8_t *out;
        if (c->deflate) {
            c->in_flight = ftws__frame_create(NULL, payload, false);
            if (!c->in_flight)
                return -1; /* out of memory: drop this connection, not the server */
            out = ftws__frame_payload(c->in_flight);
        } else {
            out = s->scratch + LWS_PRE;
        }
        size_t total = 0;
        for (size_t i = 0; i < used; i++) {
            ftws_frame *f = ftws__queue_at(q, i);
            if (i)
                out[total++] = '\n';
            memcpy(out + total, ftws__frame_payload(f), f->len);
            total += f->len;
        }
        n = lws_write(wsi, out, total, LWS_WRITE_TEXT);
    }
    s->written.frames += 1;
    s->written.messages += used;
    s->written.payload_bytes += payload;
    /* Compressed frames are counted as they reach the socket (ftws_deflate.c). */
    if (!c->deflate)
        s->written.bytes += ftws__ws_header_len(payload) + payload;

    ftws__queue_drop_front(q, used);
    if (n < 0)
        return -1;

    c->last_progress_us = lws_now_usecs();
    if (q->count || c->close_pending)
        ftws__conn_request_writable(c);
    maybe_drain(c);
    return 0;
}
