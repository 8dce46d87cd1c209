/*
 * Private internals shared by the CFoldtableWS sources. Not part of the Swift-visible API
 * (it lives outside include/ on purpose). Everything here runs on the lws service thread
 * unless a field says otherwise.
 */
#ifndef FTWS_INTERNAL_H
#define FTWS_INTERNAL_H

#include "CFoldtableWS.h"

#include <libwebsockets.h>
#include <stdatomic.h>
#include <stdbool.h>

/* RFC 6455: a close frame payload is at most 125 bytes, 2 of them the code. We keep one byte
 * of margin below the 123-byte limit, as the header promises "< 123". */
#define FTWS_MAX_CLOSE_REASON 122

/* Most seconds a connection we decided to close may take to get its close frame out before
 * it is simply dropped (a peer that stopped reading would otherwise hold it forever); a shorter
 * send_stall_secs applies instead. */
#define FTWS_CLOSE_DEADLINE_SECS 3

/* Our own lws pending-timeout reason, so lws logs say why it killed the wsi. */
#define FTWS_TIMEOUT_REASON ((enum pending_timeout)(PENDING_TIMEOUT_USER_REASON_BASE + 1))

/* One message with LWS_PRE bytes of headroom in front of the payload, so lws_write can put
 * the WebSocket header there without a copy. */
struct ftws_frame {
    size_t refs;      /* service thread only: a plain counter is enough */
    size_t len;
    bool binary;      /* only echo mode makes binary frames; they are never batched */
    uint8_t buf[];    /* LWS_PRE + len bytes */
};

static inline uint8_t *ftws__frame_payload(ftws_frame *f) { return f->buf + LWS_PRE; }
ftws_frame *ftws__frame_create(const uint8_t *data, size_t len, bool binary);

/* Per-connection outbound FIFO: a ring of frame pointers that grows by doubling, so the
 * send/write hot path does no allocation once it has warmed up. */
typedef struct ftws_queue {
    ftws_frame **slots;
    size_t cap;       /* 0 or a power of two */
    size_t head;      /* slot of the oldest frame */
    size_t count;
    size_t bytes;     /* sum of the queued frames' payload lengths */
} ftws_queue;

int ftws__queue_push(ftws_queue *q, ftws_frame *f); /* retains f; -1 on OOM */
static inline ftws_frame *ftws__queue_at(const ftws_queue *q, size_t i)
{
    return q->slots[(q->head + i) & (q->cap - 1)];
}
void ftws__queue_drop_front(ftws_queue *q, size_t n); /* releases n frames */
void ftws__queue_clear(ftws_queue *q);
void ftws__queue_free(ftws_queue *q);

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

    bool writable_requested;       /* lws_callback_on_writable already asked for */
    bool closing;                  /* a close is decided: no more sends, input ignored */
    bool close_pending;            /* send a close frame once the queue is empty */
    bool peer_closed;
    bool drain_requested;
    size_t drain_low_mark;

    int pending_code;              /* code/reason for the close frame we will send */
    char pending_reason[FTWS_MAX_CLOSE_REASON + 1];
    size_t pending_reason_len;

    int close_code;                /* code put on the wire by us, or received from the peer */
    int intent_code;               /* code we meant, when we had to drop the socket instead */

    lws_usec_t last_progress_us;   /* last successful write, or when the queue became busy */
    lws_usec_t last_valid_us;      /* open or last pong: mirrors lws's validity timer */

    char peer[64];
    char forwarded[256];           /* X-Forwarded-For of the upgrade request, "" if none */
};

typedef struct ftws_timer {
    lws_sorted_usec_list_t sul;    /* first member: lws hands us this pointer back */
    ftws_server *server;
    uint64_t token;
    struct ftws_timer *next;       /* hash bucket chain */
} ftws_timer;

#define FTWS_TIMER_BUCKETS 1024

struct ftws_server {
    struct lws_context *ctx;
    struct lws_vhost *vh;
    /* lws keeps pointers to these for the context's life: they live here, not on a stack. */
    struct lws_protocols protocols[2];
    lws_retry_bo_t retry;
    char *host, *web_root, *ws_path, *spa_prefix, *tls_cert, *tls_key;
    size_t web_root_len, spa_prefix_len;

    ftws_config cfg;               /* copy of the caller's config (string fields not used) */
    ftws_callbacks cb;
    int port;
    bool tls;

    uint8_t *scratch;              /* LWS_PRE + max_batch_bytes: the one shared batch buffer */

    ftws_conn *conns;
    size_t conn_count;
    uint64_t next_conn_id;

    /* Written by any thread (ftws_server_stop / ftws_server_wake), read on the service thread. */
    atomic_int stop_requested;
    atomic_int stop_grace_ms;
    atomic_int wake_pending;

    bool stopping, grace_expired, done;
    lws_sorted_usec_list_t sul_tick, sul_grace, sul_giveup;

    ftws_timer *timers[FTWS_TIMER_BUCKETS];
};

/* ftws_server.c */
ftws_server *ftws__server_from_wsi(struct lws *wsi);
void ftws__conn_request_writable(ftws_conn *c);
void ftws__peer_ip(struct lws *wsi, char *buf, size_t len);
void ftws__conn_close_soon(ftws_conn *c, int code, const char *reason, bool drop_queue);

/* ftws_queue.c: the outbound side of a connection. */
int ftws__conn_writeable(ftws_conn *c);

/* ftws_http.c */
int ftws__http_serve(ftws_server *s, struct lws *wsi, const char *uri, size_t len);
int ftws__http_confirm_upgrade(ftws_server *s, struct lws *wsi, const char *upgrade);
bool ftws__is_ws_path(ftws_server *s, struct lws *wsi);

/* ftws_timer.c */
void ftws__timers_cancel_all(ftws_server *s);

#endif
