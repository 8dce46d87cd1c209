/*
 * The WebSocket side of the protocol callback: a connection opens, its messages are reassembled
 * and checked against the limits, and its end is reported once with the right close code.
 * Sits on ftws_keepalive.c and ftws_conn.c; ftws_server.c calls in here.
 */
#include "ftws_internal.h"

#include <CFoldtableWSCommon.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

/* ---- receive ---------------------------------------------------------------------------- */

/* A whole message to the owner. A binary one only arrives here when the owner takes them
 * (ftws__ws_receive refused it otherwise), so production code never sees one. */
static void deliver(ftws_server *s, ftws_conn *c, const uint8_t *data, size_t len, bool binary)
{
    if (binary) {
        if (s->cb.on_binary_message)
            s->cb.on_binary_message(s->cb.owner, c, data, len);
    } else if (s->cb.on_message) {
        s->cb.on_message(s->cb.owner, c, data, len);
    }
}

/* Close right now with a code, from inside this connection's own callback. If lws still holds
 * part of an earlier write it would skip the close frame, so then the close waits for the next
 * WRITEABLE instead (input is ignored meanwhile, so nothing more is buffered).
 * So does every close of a permessage-deflate connection: lws 4.1.6 hands a compressed frame
 * over in inflated pieces, partly from its own drain pass, which ignores the callback's return
 * value, and otherwise from a loop that keeps only the last piece's: a -1 would be lost and the
 * connection left open (read in ops-ws.c; seen with a message inflating past the cap). A -1
 * from WRITEABLE is always honoured. */
static int close_from_callback(ftws_conn *c, int code, const char *reason)
{
    if (c->deflate || lws_partial_buffered(c->wsi)) {
        ftws__conn_close_soon(c, code, reason, true);
        return 0;
    }
    c->closing = true;
    c->close_code = code;
    c->pending_reason_len = ftws__copy_reason(c->pending_reason, reason);
    lws_close_reason(c->wsi, (enum lws_close_status)code, (unsigned char *)c->pending_reason,
                     c->pending_reason_len);
    return -1;
}

/* Lets the kernel hold its TCP ACK of what the client sends next until our reply carries it.
 * Linux acknowledges a read at once unless the socket is in "pingpong" (interactive) mode, which
 * it enters by itself only when a reply follows a read within the delayed-ACK time (~40 ms), and
 * leaves whenever that timer fires. A change is acknowledged after its commit, often later, so
 * every read of a busy client cost an ACK segment of its own (7% of the service thread at 1,000
 * clients, sending it and, on loopback, receiving it too). TCP_QUICKACK=0 enters pingpong mode:
 * the ACK rides on our reply, or goes out when the timer fires. It takes effect from the next
 * read, so it is renewed once per turn for a connection that read (one setsockopt against the
 * ACK segments it saves). Bulk input is unaffected: the kernel still acknowledges every second
 * full segment. Clients are expected to set TCP_NODELAY, as browsers and WebSocket libraries do;
 * one running Nagle would wait for a held ACK only when it sends twice without a reply between. */
static void delay_next_ack(struct lws *wsi)
{
    int off = 0;
    (void)setsockopt(lws_get_socket_fd(wsi), IPPROTO_TCP, TCP_QUICKACK, &off, sizeof off);
}

/* What a read means beyond its bytes, once per turn for a connection that read (a client's
 * changes in flight arrive as several frames in one read): the next ACK is held, and the
 * keepalive hears the peer (one clock read, not one per frame). */
static void heard_this_turn(ftws_server *s, ftws_conn *c, struct lws *wsi)
{
    if (c->read_turn == s->turn)
        return;
    c->read_turn = s->turn;
    delay_next_ack(wsi);
    ftws__keepalive_heard(c, lws_now_usecs());
}

/* One chunk of a message. lws validated UTF-8 (LWS_SERVER_OPTION_VALIDATE_UTF8, state carried
 * across fragments) before calling us. The size cap is checked against what has arrived plus
 * what the current frame still announces, so an oversized message is refused at its first
 * chunk and nothing past the cap is ever allocated; an announced length alone allocates
 * nothing, the buffer only grows with bytes that actually arrived.
 * With permessage-deflate the chunks are inflated (at most the rx buffer size each, so a small
 * compressed message that inflates past the cap is refused once the inflated bytes pass it),
 * while the announced length counts compressed bytes: that says nothing exact about the
 * message's size, so such connections are judged by what arrives alone. */
int ftws__ws_receive(ftws_server *s, ftws_conn *c, struct lws *wsi, const uint8_t *in, size_t len)
{
    if (c->closing)
        return 0;

    bool first = lws_is_first_fragment(wsi);
    bool final = lws_is_final_fragment(wsi);
    size_t remaining = c->deflate ? 0 : lws_remaining_packet_payload(wsi);
    size_t cap = s->cfg.max_message_bytes;

    heard_this_turn(s, c, wsi);
    if (first) {
        c->rx_len = 0;
        c->rx_binary = lws_frame_is_binary(wsi);
    }
    if (c->rx_binary && !s->cb.on_binary_message)
        return close_from_callback(c, FTWS_CLOSE_UNSUPPORTED, "binary messages are not supported");
    if (len > cap - c->rx_len || remaining > cap - c->rx_len - len)
        return close_from_callback(c, FTWS_CLOSE_TOO_BIG, "message too big");

    if (first && final) {
        /* Whole message in one chunk: hand over lws's buffer, no copy. */
        deliver(s, c, in, len, c->rx_binary);
        return 0;
    }

    if (ftws_buffer_reserve(&c->rx, &c->rx_cap, c->rx_len + len, 4096, cap))
        return close_from_callback(c, FTWS_CLOSE_SERVER_ERROR, "out of memory");
    if (len)
        memcpy(c->rx + c->rx_len, in, len);
    c->rx_len += len;

    if (final) {
        deliver(s, c, c->rx, c->rx_len, c->rx_binary);
        c->rx_len = 0;
        /* Do not keep a once-needed big buffer per idle connection. */
        if (c->rx_cap > 65536) {
            free(c->rx);
            c->rx = NULL;
            c->rx_cap = 0;
        }
    }
    return 0;
}

/* ---- open / close ----------------------------------------------------------------------- */

int ftws__ws_established(ftws_server *s, ftws_conn **slot, struct lws *wsi)
{
    ftws_conn *c = ftws__conn_create(s, wsi);
    if (!c)
        return -1;
    *slot = c;
    /* Its silence is counted from now (the creation's stamp): the wheel is armed here, not in
     * ftws_conn.c, which sits below the keepalive and must not call up into it. */
    ftws__keepalive_arm(c, c->last_progress_us);
    if (s->cb.on_open)
        s->cb.on_open(s->cb.owner, c);
    /* Raced with a stop request: it is already part of the shutdown. */
    if (s->stopping)
        ftws_conn_close(c, FTWS_CLOSE_GOING_AWAY, "server shutting down");
    return 0;
}

void ftws__ws_peer_closed(ftws_conn *c, const uint8_t *payload, size_t len)
{
    c->peer_closed = true;
    c->closing = true;
    if (!c->close_code)
        c->close_code = len >= 2 ? (payload[0] << 8) | payload[1] : 1005; /* 1005: no status */
}

/* Does the peer still have a live socket? A peek: > 0 bytes waiting or "would block" means
 * yes; 0 (EOF) or a reset means it has gone and no close frame should be attempted. */
static bool peer_alive(struct lws *wsi)
{
    int fd = lws_get_socket_fd(wsi);
    if (fd < 0)
        return false;
    char b;
    ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

/* LWS_CALLBACK_WS_SERVER_DROP_PROTOCOL runs just before lws decides whether to send a close
 * frame. lws 4.1.6 fails some protocol violations (control frame with a 16/64-bit length,
 * i.e. a ping over 125 bytes; a 64-bit length with the top bit set) by returning -1 from its
 * parser without setting a close reason, so it would just drop TCP. When none of the other
 * causes of a reason-less close applies (peer gone, our own kill or keepalive hangup), this is
 * such a violation: give it the 1002 the RFC asks for. */
void ftws__ws_drop_protocol(ftws_server *s, ftws_conn *c, struct lws *wsi)
{
    if (!c)
        return;
    c->closing = true; /* lws is closing it, whoever decided: refuse further sends */
    if (c->close_code || c->intent_code || c->peer_closed || lws_get_close_length(wsi))
        return;
    if (!peer_alive(wsi))
        return;
    static const char reason[] = "protocol error";
    lws_close_reason(wsi, LWS_CLOSE_STATUS_PROTOCOL_ERR, (unsigned char *)reason,
                     sizeof(reason) - 1);
}

/* LWS_CALLBACK_CLOSED: the owner hears on_close once, with the best code known, then the
 * connection is freed. */
void ftws__ws_closed(ftws_server *s, ftws_conn **slot, struct lws *wsi)
{
    ftws_conn *c = *slot;
    if (!c)
        return;
    *slot = NULL;

    int code = c->close_code;
    if (!code)
        code = c->intent_code;
    if (!code && lws_get_close_length(wsi) >= 2) {
        /* lws's own reason (1002 bad framing, 1007 bad UTF-8). */
        const unsigned char *p = lws_get_close_payload(wsi);
        code = (p[0] << 8) | p[1];
    }
    if (!code)
        code = FTWS_CLOSE_ABNORMAL;

    ftws__keepalive_disarm(c);
    ftws__conn_unlink(c);
    /* Sends from inside on_close (or later) are refused. */
    c->closing = true;
    if (s->cb.on_close)
        s->cb.on_close(s->cb.owner, c, code);
    ftws__conn_free(c);
}
