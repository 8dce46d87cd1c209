/*
 * A WebSocket connection's state: its ring of queued frames, the decision to close it, and the
 * accessors the owner reads. The bottom of the connection layers: it calls nothing above it
 * (ftws_queue.c writes the ring out, ftws_ws.c feeds it input, ftws_server.c drives shutdown).
 */
#include "ftws_internal.h"

#include <CFoldtableWSCommon.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <linux/sockios.h>
#include <sys/ioctl.h>

/* ---- ring buffer ---------------------------------------------------------------------- */

static int queue_grow(ftws_queue *q)
{
    size_t ncap = q->cap ? q->cap * 2 : 8;
    ftws_frame **ns = malloc(ncap * sizeof(*ns));
    if (!ns)
        return -1;
    /* Unwrap into the new array so head restarts at 0. */
    for (size_t i = 0; i < q->count; i++)
        ns[i] = ftws__queue_at(q, i);
    free(q->slots);
    q->slots = ns;
    q->cap = ncap;
    q->head = 0;
    return 0;
}

int ftws__queue_push(ftws_queue *q, ftws_frame *f)
{
    if (q->count == q->cap && queue_grow(q))
        return -1;
    q->slots[(q->head + q->count) & (q->cap - 1)] = f;
    q->count++;
    q->bytes += f->len;
    ftws_frame_retain(f);
    return 0;
}

void ftws__queue_drop_front(ftws_queue *q, size_t n)
{
    while (n-- && q->count) {
        ftws_frame *f = q->slots[q->head];
        q->head = (q->head + 1) & (q->cap - 1);
        q->count--;
        q->bytes -= f->len;
        ftws_frame_release(f);
    }
}

void ftws__queue_clear(ftws_queue *q)
{
    ftws__queue_drop_front(q, q->count);
}

void ftws__queue_free(ftws_queue *q)
{
    ftws__queue_clear(q);
    free(q->slots);
    q->slots = NULL;
    q->cap = q->head = 0;
}

/* ---- lifecycle --------------------------------------------------------------------------- */

/* A new connection in the server's list. The upgrade's headers are still attached while lws
 * reports ESTABLISHED, so X-Forwarded-For is read here; a header too long for the buffer is
 * dropped rather than cut (a cut address would be a different address). */
ftws_conn *ftws__conn_create(ftws_server *s, struct lws *wsi)
{
    ftws_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->server = s;
    c->wsi = wsi;
    c->id = ++s->next_conn_id;
    c->last_progress_us = lws_now_usecs();
    c->deflate = s->cfg.permessage_deflate && ftws__deflate_setup(wsi);
    ftws__peer_ip(wsi, c->peer, sizeof(c->peer));
    int fwd = lws_hdr_total_length(wsi, WSI_TOKEN_X_FORWARDED_FOR);
    if (fwd <= 0 || fwd >= (int)sizeof(c->forwarded) ||
        lws_hdr_copy(wsi, c->forwarded, sizeof(c->forwarded), WSI_TOKEN_X_FORWARDED_FOR) < 0)
        c->forwarded[0] = '\0';
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->conn_count++;
    return c;
}

/* Out of the server's list (before the owner hears on_close, so nothing that walks the list
 * meanwhile, such as a shutdown, reaches a connection that is going). The keepalive wheel is
 * not this file's to touch (it sits above): ftws_ws.c takes the connection out of it first. */
void ftws__conn_unlink(ftws_conn *c)
{
    ftws_server *s = c->server;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    s->conn_count--;
}

/* Freed, after on_close returned. */
void ftws__conn_free(ftws_conn *c)
{
    ftws__queue_free(&c->q);
    ftws_frame_release(c->in_flight);
    free(c->rx);
    free(c);
}

/* ---- close decisions ------------------------------------------------------------------------ */

/* Ask lws for one WRITEABLE; repeated asks before it arrives are free. */
void ftws__conn_request_writable(ftws_conn *c)
{
    if (!c->writable_requested) {
        c->writable_requested = true;
        lws_callback_on_writable(c->wsi);
    }
}

/* At most FTWS_CLOSE_REASON_MAX_BYTES bytes, never cut inside a UTF-8 sequence (the peer must
 * fail the connection on an invalid close reason). */
size_t ftws__copy_reason(char *dst, const char *reason)
{
    return ftws_utf8_truncate(dst, reason, FTWS_CLOSE_REASON_MAX_BYTES);
}

/* Decide to close: no more sends are accepted and incoming messages are ignored. The close
 * frame goes out from the next WRITEABLE with nothing queued before it (drop_queue discards
 * what is queued: used for slow consumers, where the queue is the problem). When the queue is
 * dropped nothing can make progress any more, so a deadline drops a peer that does not read. */
void ftws__conn_close_soon(ftws_conn *c, int code, const char *reason, bool drop_queue)
{
    if (c->closing)
        return;
    c->closing = true;
    c->close_pending = true;
    c->drain_requested = false;
    c->pending_code = code;
    c->pending_reason_len = ftws__copy_reason(c->pending_reason, reason);
    if (drop_queue) {
        /* A forced close: if the deadline drops the socket before the frame is out, on_close
         * still reports this code (for a graceful close it would be 1006: nothing was said). */
        c->intent_code = code;
        ftws__queue_clear(&c->q);
        int secs = c->server->cfg.send_stall_secs;
        if (secs <= 0 || secs > FTWS_CLOSE_DEADLINE_SECS)
            secs = FTWS_CLOSE_DEADLINE_SECS;
        lws_set_timeout(c->wsi, FTWS_TIMEOUT_REASON, secs);
    } else if (!c->q.count) {
        c->last_progress_us = lws_now_usecs();
    }
    ftws__conn_request_writable(c);
}

/* Drop the socket now, without a close handshake (stalled or past shutdown grace). The
 * timeout path marks the socket unusable, so lws does not try to write a close frame. */
void ftws__conn_kill(ftws_conn *c, int intent_code)
{
    c->closing = true;
    if (!c->intent_code)
        c->intent_code = intent_code;
    lws_set_timeout(c->wsi, FTWS_TIMEOUT_REASON, LWS_TO_KILL_ASYNC);
}

void ftws__peer_ip(struct lws *wsi, char *buf, size_t len)
{
    char tmp[64];
    const char *p = lws_get_peer_simple(wsi, tmp, sizeof(tmp));
    if (!p)
        p = "";
    if (!strncasecmp(p, "::ffff:", 7) && strchr(p + 7, '.'))
        p += 7;
    snprintf(buf, len, "%s", p);
}

/* ---- public accessors ------------------------------------------------------------------------ */

size_t ftws_conn_queued_bytes(const ftws_conn *conn)
{
    return conn ? conn->q.bytes : 0;
}

/* Swift cannot ask: SIOCOUTQ is a Linux ioctl request macro, and lws's own buffer of a partial
 * write sits behind the wsi. What the owner needs is whether the peer has taken everything
 * written so far (a row stream's last chunk can sit megabytes deep in the kernel's send queue
 * for a slow reader), not only whether our queue is empty. */
size_t ftws_conn_unflushed_bytes(const ftws_conn *conn)
{
    if (!conn)
        return 0;
    size_t bytes = conn->q.bytes;
    if (!conn->wsi)
        return bytes;
    /* lws keeps what the kernel did not take of a write and tells only whether it has any. */
    if (lws_partial_buffered(conn->wsi))
        bytes += 1;
    int unacked = 0;
    int fd = (int)lws_get_socket_fd(conn->wsi);
    if (fd >= 0 && ioctl(fd, SIOCOUTQ, &unacked) == 0 && unacked > 0)
        bytes += (size_t)unacked;
    return bytes;
}

void ftws_conn_set_user(ftws_conn *conn, void *user)
{
    if (conn)
        conn->user = user;
}

void *ftws_conn_user(const ftws_conn *conn)
{
    return conn ? conn->user : NULL;
}

uint64_t ftws_conn_id(const ftws_conn *conn)
{
    return conn ? conn->id : 0;
}

const char *ftws_conn_peer(const ftws_conn *conn)
{
    return conn ? conn->peer : "";
}

const char *ftws_conn_forwarded_for(const ftws_conn *conn)
{
    return conn ? conn->forwarded : "";
}
