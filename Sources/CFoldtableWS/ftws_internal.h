/*
 * Private internals shared by the CFoldtableWS sources. Not part of the Swift-visible API
 * (it lives outside include/ on purpose). Everything here runs on the lws service thread
 * unless a field says otherwise.
 *
 * The files depend on each other one way only, bottom to top (a file calls functions of the
 * files below it, never above; the structs below are data every layer may read):
 *
 *   ftws_server.c   context, vhost, the one protocol callback (a switch that hands each reason
 *                   to the file that owns it), shutdown, logging
 *   ftws_ws.c       WebSocket open, receive and reassembly, close bookkeeping
 *   ftws_route.c    HTTP requests for paths the owner claims: body, hand-off, deferred answer
 *   ftws_http.c     static files (with validators), the refusal of bad upgrades, HTTP helpers
 *   ftws_queue.c    a connection's outbound side: send, broadcast, WRITEABLE
 *   ftws_keepalive.c  pings for silent connections, hangup of those that stay silent; it
 *                   asks ftws_conn.c for a WRITEABLE (ping) or a kill (hangup), while
 *                   ftws_conn.c never calls it: ftws_ws.c arms and disarms a connection's
 *                   keepalive around ftws__conn_create and ftws__conn_unlink
 *   ftws_conn.c     a connection's state: its frame ring, close decisions, accessors
 *   ftws_timer.c    owner timers
 *   ftws_deflate.c  the permessage-deflate extension table, wire-byte counting
 *   ftws_frame.c    refcounted frames
 *   CFoldtableWSCommon (own target): buffer growth, UTF-8-safe truncation
 */
#ifndef FTWS_INTERNAL_H
#define FTWS_INTERNAL_H

#include "CFoldtableWS.h"

#include <CFoldtableWSCommon.h>
#include <libwebsockets.h>
#include <stdatomic.h>
#include <stdbool.h>

/* Most seconds a connection we decided to close may take to get its close frame out before
 * it is simply dropped (a peer that stopped reading would otherwise hold it forever); a shorter
 * send_stall_secs applies instead. */
#define FTWS_CLOSE_DEADLINE_SECS 3

/* Our own lws pending-timeout reason, so lws logs say why it killed the wsi. */
#define FTWS_TIMEOUT_REASON ((enum pending_timeout)(PENDING_TIMEOUT_USER_REASON_BASE + 1))

/* ---- frames (ftws_frame.c) -------------------------------------------------------------- */

/* One message with LWS_PRE bytes of headroom in front of the payload, so lws_write can put
 * the WebSocket header there without a copy. */
struct ftws_frame {
    size_t refs;      /* service thread only: a plain counter is enough */
    size_t len;
    bool binary;      /* only owners that take binary messages make them (ftws_frame_create_binary);
                         never batched */
    uint8_t size_class; /* 0: allocated for its length; else which recycled size (ftws_frame.c) */
    ftws_frame *next; /* in a free list, while recycled */
    uint8_t buf[];    /* LWS_PRE + len bytes (LWS_PRE + the class's payload when recycled) */
};

static inline uint8_t *ftws__frame_payload(ftws_frame *f) { return f->buf + LWS_PRE; }
ftws_frame *ftws__frame_create(const uint8_t *data, size_t len, bool binary);

/* ---- connections (ftws_conn.c) ------------------------------------------------------------ */

/* Per-connection outbound FIFO: a ring of frame pointers that grows by doubling, so the
 * send/write hot path does no allocation once it has warmed up. */

/* Beside its byte cap (max_queue_bytes), a queue holds at most ftws__queue_max_frames frames:
 * the byte cap counts payload only, so empty frames alone would grow the ring without bound.
 * Every queued frame costs at least its slot, a pointer (FTWS_QUEUE_SLOT_BYTES), so one slot
 * per that many bytes of the cap keeps the ring itself within about the byte cap's own budget;
 * FTWS_QUEUE_SPARE_SLOTS more let a very small cap (tests, tight settings) still queue a short
 * burst of small messages instead of closing the connection as a slow consumer. */
#define FTWS_QUEUE_SLOT_BYTES sizeof(ftws_frame *)
#define FTWS_QUEUE_SPARE_SLOTS 64
static inline size_t ftws__queue_max_frames(size_t max_queue_bytes)
{
    return max_queue_bytes / FTWS_QUEUE_SLOT_BYTES + FTWS_QUEUE_SPARE_SLOTS;
}

typedef struct ftws_queue {
    ftws_frame **slots;
    size_t cap;       /* 0 or a power of two */
    size_t head;      /* slot of the oldest frame */
    size_t count;
    size_t bytes;     /* sum of the queued frames' payload lengths */
} ftws_queue;

struct ftws_conn {
    ftws_server *server;
    struct lws *wsi;
    ftws_conn *prev, *next;        /* the server's list of open connections */
    void *user;
    uint64_t id;

    ftws_queue q;

    /* Inbound reassembly of one message. */
    uint8_t *rx;
    size_t rx_len, rx_cap;
    bool rx_binary;

    /* permessage-deflate is active: lws compresses what we write, and reads the rest of a big
     * message from our buffer after lws_write returns (see ftws_deflate.c). */
    bool deflate;
    ftws_frame *in_flight;         /* deflate only: the last frame written, kept until the next
                                      WRITEABLE (by then lws has finished with it) or the end */

    bool writable_requested;       /* lws_callback_on_writable already asked for */
    bool closing;                  /* a close is decided: no more sends, input ignored */
    bool close_pending;            /* send a close frame once the queue is empty */
    bool peer_closed;
    bool drain_requested;
    size_t drain_low_mark;

    int pending_code;              /* code/reason for the close frame we will send */
    char pending_reason[FTWS_CLOSE_REASON_MAX_BYTES + 1];
    size_t pending_reason_len;

    int close_code;                /* code put on the wire by us, or received from the peer */
    int intent_code;               /* code we meant, when we had to drop the socket instead */

    lws_usec_t last_progress_us;   /* last successful write, or when the queue became busy */
    /* Keepalive (ftws_keepalive.c): a slot of the server's timing wheel, while armed. */
    lws_usec_t last_rx_us;         /* open, or the last data or pong received */
    lws_usec_t ka_due_us;          /* when the wheel looks at it next */
    ftws_conn *ka_prev, *ka_next;  /* its wheel slot's list */
    uint32_t ka_slot;
    bool ka_armed;
    bool ping_sent;                /* pinged, and nothing received since */
    bool ping_pending;             /* write a ping at the next WRITEABLE */
    uint64_t read_turn;            /* the last turn it read in (ftws_ws.c: held ACK, keepalive) */

    char peer[64];
    char forwarded[256];           /* X-Forwarded-For of the upgrade request, "" if none */
};

int ftws__queue_push(ftws_queue *q, ftws_frame *f); /* retains f; -1 on OOM */
static inline ftws_frame *ftws__queue_at(const ftws_queue *q, size_t i)
{
    return q->slots[(q->head + i) & (q->cap - 1)];
}
void ftws__queue_drop_front(ftws_queue *q, size_t n); /* releases n frames */
void ftws__queue_clear(ftws_queue *q);
void ftws__queue_free(ftws_queue *q);

ftws_conn *ftws__conn_create(ftws_server *s, struct lws *wsi); /* linked into s->conns */
void ftws__conn_unlink(ftws_conn *c);                           /* out of s->conns */
void ftws__conn_free(ftws_conn *c);
void ftws__conn_request_writable(ftws_conn *c);
void ftws__conn_close_soon(ftws_conn *c, int code, const char *reason, bool drop_queue);
void ftws__conn_kill(ftws_conn *c, int intent_code);
size_t ftws__copy_reason(char *dst, const char *reason);
/* lws_get_peer_simple, with IPv4-mapped IPv6 addresses shown as plain IPv4. */
void ftws__peer_ip(struct lws *wsi, char *buf, size_t len);

/* ---- keepalive (ftws_keepalive.c) ---------------------------------------------------------- */

/* A timing wheel of 64 slots of 1 s: one turn is 64 s (longer intervals wait out whole turns
 * in their slot), pings land within a second of their time, and the wheel wakes the service
 * thread once a second. */
#define FTWS_KA_SLOTS 64
#define FTWS_KA_SLOT_US (1000 * 1000)

void ftws__keepalive_start(ftws_server *s);                /* from ftws_server_run */
void ftws__keepalive_arm(ftws_conn *c, lws_usec_t now);    /* a new connection (ftws_ws.c) */
void ftws__keepalive_disarm(ftws_conn *c);                 /* out of the wheel, if in it; before
                                                              ftws__conn_unlink (ftws_ws.c) */
/* Something arrived from the peer: its silence starts again. */
static inline void ftws__keepalive_heard(ftws_conn *c, lws_usec_t now)
{
    c->last_rx_us = now;
    c->ping_sent = false;
}

/* ---- permessage-deflate (ftws_deflate.c) ----------------------------------------------------- */

/* The extension table for lws_context_creation_info.extensions (static, lives forever). */
const struct lws_extension *ftws__deflate_extensions(void);
/* At ESTABLISHED: true when the client negotiated permessage-deflate (and tunes it). */
bool ftws__deflate_setup(struct lws *wsi);
/* Header bytes of an uncompressed server data frame with this payload length. */
size_t ftws__ws_header_len(size_t payload_len);

/* ---- outbound (ftws_queue.c) ---------------------------------------------------------------- */

int ftws__conn_writeable(ftws_conn *c);

/* ---- WebSocket input and lifecycle (ftws_ws.c) -------------------------------------------- */

int ftws__ws_established(ftws_server *s, ftws_conn **slot, struct lws *wsi);
int ftws__ws_receive(ftws_server *s, ftws_conn *c, struct lws *wsi, const uint8_t *in, size_t len);
void ftws__ws_peer_closed(ftws_conn *c, const uint8_t *payload, size_t len);
void ftws__ws_drop_protocol(ftws_server *s, ftws_conn *c, struct lws *wsi);
void ftws__ws_closed(ftws_server *s, ftws_conn **slot, struct lws *wsi);

/* ---- static files and upgrades (ftws_http.c) ----------------------------------------------- */

/* Copy a request header into buf; NULL when absent. A header too long for buf sets *too_long
 * (callers refuse: it cannot be a legitimate Origin or Host). */
const char *ftws__header(struct lws *wsi, enum lws_token_indexes h, char *buf, int len, bool *too_long);
/* Finish a request with a bare status (lws writes a tiny HTML body and the security headers),
 * then keep the connection for the next request (keep_alive) or close it. */
int ftws__http_status(struct lws *wsi, unsigned int code, bool keep_alive);
int ftws__http_serve_file(ftws_server *s, struct lws *wsi, const char *uri, size_t len);
int ftws__http_confirm_upgrade(ftws_server *s, struct lws *wsi, const char *upgrade);
bool ftws__is_ws_path(ftws_server *s, struct lws *wsi);

/* ---- claimed HTTP requests (ftws_route.c) ------------------------------------------------- */

/* Where one claimed request is in its life. */
typedef enum ftws_req_state {
    FTWS_REQ_BODY,       /* its body is arriving */
    FTWS_REQ_WAITING,    /* the owner has it (on_http_request) and has not answered */
    FTWS_REQ_WRITING,    /* an answer is being written (the owner's, or a refusal of ours) */
} ftws_req_state;

typedef struct ftws_http_req ftws_http_req; /* private to ftws_route.c */

#define FTWS_REQ_BUCKETS 256

/* LWS_CALLBACK_HTTP: route to the owner or to the static files. */
int ftws__route_http(ftws_server *s, struct lws *wsi, ftws_http_req **slot, const char *uri, size_t len);
int ftws__route_body(ftws_server *s, ftws_http_req *r, const uint8_t *in, size_t len);
int ftws__route_body_done(ftws_server *s, ftws_http_req *r);
int ftws__route_writeable(ftws_server *s, ftws_http_req **slot);
/* The wsi is closing or dropping its per-request storage: forget the request (the owner is
 * told when it was waiting for an answer). Safe to call more than once. */
void ftws__route_gone(ftws_server *s, ftws_http_req **slot);
/* Shutdown grace is over: drop every connection with a request still in flight. */
void ftws__route_kill_all(ftws_server *s);

/* ---- timers (ftws_timer.c) ------------------------------------------------------------------ */

typedef struct ftws_timer {
    lws_sorted_usec_list_t sul;    /* first member: lws hands us this pointer back */
    ftws_server *server;
    uint64_t token;
    struct ftws_timer *next;       /* hash bucket chain */
} ftws_timer;

#define FTWS_TIMER_BUCKETS 1024

void ftws__timers_cancel_all(ftws_server *s);

/* ---- the server (ftws_server.c) --------------------------------------------------------------- */

struct ftws_server {
    struct lws_context *ctx;
    struct lws_vhost *vh;
    /* lws keeps pointers to these for the context's life: they live here, not on a stack. */
    struct lws_protocols protocols[2];
    lws_retry_bo_t retry;
    char *host, *web_root, *ws_path, *spa_prefix, *tls_cert, *tls_key;
    size_t web_root_len, spa_prefix_len;
    char *cors_origins;            /* '\n'-separated exact origins, or NULL (ftws_http.c) */

    ftws_config cfg;               /* copy of the caller's config (string fields not used) */
    ftws_callbacks cb;
    int port;
    bool tls;

    uint8_t *scratch;              /* LWS_PRE + max_batch_bytes: the one shared batch buffer */
    ftws_write_stats written;      /* frames, messages and bytes written (service thread) */

    ftws_conn *conns;
    size_t conn_count;
    uint64_t next_conn_id;

    /* Claimed HTTP requests in flight, by id (those the owner was given) and counted (all). */
    ftws_http_req *reqs[FTWS_REQ_BUCKETS];
    ftws_http_req *req_list;       /* every request in flight, for shutdown */
    size_t req_count;
    uint64_t next_req_id;

    /* Written by any thread (ftws_server_stop / ftws_server_wake), read on the service thread. */
    atomic_int stop_requested;
    atomic_int stop_grace_ms;
    atomic_int wake_pending;

    uint64_t turn;                 /* lws_service turns so far, from 1 (service thread) */
    bool stopping, grace_expired, done;
    bool destroying;               /* inside ftws_server_destroy: no more calls into the owner */
    lws_sorted_usec_list_t sul_tick, sul_grace, sul_giveup, sul_keepalive;
    ftws_conn *ka_slots[FTWS_KA_SLOTS]; /* the keepalive wheel (ftws_keepalive.c) */
    uint64_t ka_next_slot;         /* the next slot to visit, counted from lws_now_usecs's 0 */

    ftws_timer *timers[FTWS_TIMER_BUCKETS];
};

static inline ftws_server *ftws__server_from_wsi(struct lws *wsi)
{
    return (ftws_server *)lws_context_user(lws_get_context(wsi));
}

/* A stopping server is done once no WebSocket and no claimed request is left. */
static inline void ftws__check_done(ftws_server *s)
{
    if (s->stopping && s->conn_count == 0 && s->req_count == 0)
        s->done = true;
}

static inline bool ftws__stopping(ftws_server *s)
{
    return s->stopping || atomic_load(&s->stop_requested);
}

#endif
