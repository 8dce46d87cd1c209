/*
 * CFoldtableWS: the small C API that Swift drives to run one libwebsockets 4.1.6 server.
 *
 * Why a C wrapper at all: libwebsockets is a C callback library whose key pieces Swift cannot
 * import or use safely (LWS_PRE is a function-like macro, callbacks are a C function-pointer
 * switch, mounts and protocol tables must be static C memory that outlives the context). This
 * target owns every lws call; Swift sees only the functions below.
 *
 * Threading (LWS_MAX_SMP 1): every function here runs on the service thread (the thread inside
 * ftws_server_run, which is also the thread every callback is made on), except the three marked
 * "any thread": ftws_server_wake, ftws_server_stop and ftws_server_port.
 *
 * Ownership: a connection handle (ftws_conn *) is valid from the on_open callback until the
 * on_close callback for it returns; after that the C side frees it. Frames are refcounted
 * (service thread only, so the count is a plain integer). HTTP requests are named by a number,
 * never a pointer: the owner may answer one long after the callback (a database commit later),
 * by which time the client may have gone, so an answer to a number the C side no longer knows is
 * simply refused (no pointer can dangle).
 *
 * The terminal client's wrapper is a separate target (CFoldtableWSClient).
 */
#ifndef CFOLDTABLEWS_H
#define CFOLDTABLEWS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ftws_server ftws_server;
typedef struct ftws_conn ftws_conn;
typedef struct ftws_frame ftws_frame;

/* Close codes the C layer itself uses. Application codes (4000-4999) are chosen by Swift. Both
 * are listed, with their meaning for clients, in FoldtableCore's CloseCode (normal = 1000, ...),
 * whose unit test checks these numbers against that table. */
enum {
    FTWS_CLOSE_NORMAL = 1000,
    FTWS_CLOSE_GOING_AWAY = 1001,     /* server shutdown */
    FTWS_CLOSE_PROTOCOL = 1002,
    FTWS_CLOSE_UNSUPPORTED = 1003,    /* binary message, and no on_binary_message to take it */
    FTWS_CLOSE_ABNORMAL = 1006,       /* reported in on_close when no close frame was seen */
    FTWS_CLOSE_BAD_DATA = 1007,       /* invalid UTF-8 */
    FTWS_CLOSE_POLICY = 1008,
    FTWS_CLOSE_TOO_BIG = 1009,        /* message over max_message_bytes */
    FTWS_CLOSE_SERVER_ERROR = 1011,
};

/* One HTTP request for a path the owner claimed (see ftws_callbacks.http_claims), whole: its
 * body is reassembled (at most max_http_body_bytes) before the owner sees it. Every pointer is
 * valid only during the on_http_request call; id stays meaningful until the request is answered
 * or abandoned. Strings are NUL-terminated. */
typedef struct ftws_http_request {
    uint64_t id;                       /* unique for the server's life; answer with ftws_http_respond */
    const char *method;                /* "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT" */
    const char *path;                  /* lws has decoded %xx and folded "//", "/./", "/../" */
    const char *const *query;          /* the query's "name=value" arguments, %xx and '+' decoded */
    size_t query_count;
    /* The headers the owner may need (see FTWS_HTTP_HEADERS in ftws_route.c), lowercase names;
     * absent headers are left out. A header longer than the request's header budget cannot
     * arrive at all (lws refuses the request first). */
    const char *const *header_names;
    const char *const *header_values;
    size_t header_count;
    const char *peer;                  /* the TCP peer's address ("127.0.0.1", "::1") */
    const uint8_t *body;               /* NULL when body_len is 0 */
    size_t body_len;
} ftws_http_request;

typedef struct ftws_callbacks {
    /* Passed back as the first argument of every callback. */
    void *owner;
    /* Before the upgrade of a request for ws_path: return 0 to accept, or the HTTP status to
     * refuse it with (403, 421, 429, 503, ...). origin, host and forwarded_for (the
     * X-Forwarded-For header) are NULL when absent. NULL callback = accept. */
    unsigned int (*check_upgrade)(void *owner, const char *origin, const char *host, const char *peer_ip,
                                  const char *forwarded_for);
    /* Before answering any other HTTP request (static files and claimed paths alike): return 1
     * to go on, 0 to refuse with 421 Misdirected Request (a Host this server does not answer to:
     * DNS rebinding). host is NULL when absent. NULL callback = go on. */
    int (*allow_host)(void *owner, const char *host);
    /* Before a request's body is read: return 1 when the owner answers this path itself (an API,
     * health checks), 0 when it is a static file from web_root. Called for every HTTP request
     * that is not an upgrade, so it must be cheap. NULL callback = everything is static. */
    int (*http_claims)(void *owner, const char *path);
    /* A whole request for a claimed path. The owner answers with ftws_http_respond, now or
     * later, on the service thread. NULL callback = claimed paths get 404. */
    void (*on_http_request)(void *owner, const ftws_http_request *request);
    /* A request given to on_http_request will not be answered by the owner after all: its
     * client went away, or no answer came within http_answer_ms (the client then got 503).
     * Its id is dead from now on (ftws_http_respond refuses it). Not called while the server is
     * being destroyed. NULL callback = not told. */
    void (*on_http_abandoned)(void *owner, uint64_t request_id);
    /* A WebSocket on ws_path is established. */
    void (*on_open)(void *owner, ftws_conn *conn);
    /* One whole text message: reassembled from its fragments, at most max_message_bytes, valid
     * UTF-8. data is NOT NUL-terminated and is only valid during the call. */
    void (*on_message)(void *owner, ftws_conn *conn, const uint8_t *data, size_t len);
    /* One whole binary message, with the same limits and lifetime as on_message. NULL callback
     * (foldtabled) = binary messages are refused: the connection closes with 1003 at the
     * message's first fragment, before any of it is buffered. Set by test servers that echo
     * every message (foldtable-echo, for the Autobahn TestSuite). */
    void (*on_binary_message)(void *owner, ftws_conn *conn, const uint8_t *data, size_t len);
    /* The connection is gone, for any reason. code is the close code sent or received, or 1006. */
    void (*on_close)(void *owner, ftws_conn *conn, int code);
    /* After ftws_conn_request_drain: the connection's queue fell to or below the given low mark. */
    void (*on_drain)(void *owner, ftws_conn *conn);
    /* ftws_server_wake was called from some thread (coalesced: one call may stand for several). */
    void (*on_wake)(void *owner);
    /* A timer armed with ftws_timer_arm fired. */
    void (*on_timer)(void *owner, uint64_t token);
    /* One turn of the service loop ended: every socket, timer and wake that was ready when it
     * began has been handled (all the messages of one read among them). Optional. What an owner
     * gathers from several callbacks of a turn (a session's changes from one read) goes on here,
     * before the loop sleeps again. */
    void (*on_turn)(void *owner);
} ftws_callbacks;

typedef struct ftws_config {
    const char *host;              /* bind address, e.g. "127.0.0.1"; NULL = all interfaces */
    int port;                      /* 0 = pick a free port; read it back with ftws_server_port */
    const char *web_root;          /* directory served over HTTP (index.html default); NULL = none */
    const char *ws_path;           /* WebSocket endpoint path, e.g. "/ws" */
    const char *spa_prefix;        /* paths under this prefix (e.g. "/s/") serve web_root/index.html; NULL = none */
    const char *tls_cert_path;     /* PEM; both NULL = plain HTTP/WS; one without the other = error */
    const char *tls_key_path;
    size_t max_message_bytes;      /* whole-message cap; close 1009 as soon as a message passes it */
    size_t max_queue_bytes;        /* per-connection outbound cap; passing it closes with slow_close_code */
    size_t max_batch_bytes;        /* queued messages are joined with '\n' into one frame up to this */
    int slow_close_code;           /* application close code for a connection over max_queue_bytes */
    int ping_interval_secs;        /* idle seconds before the server sends a ping */
    int hangup_secs;               /* idle seconds (no valid traffic/pong) before hanging up */
    int send_stall_secs;           /* a queue that makes no progress this long closes the connection */
    int permessage_deflate;        /* 1 = accept RFC 7692 permessage-deflate when a client offers
                                      it (each such connection then holds zlib state: ~150 KB
                                      once it has been sent something); 0 = never negotiate it */
    size_t max_http_body_bytes;    /* largest body of a claimed HTTP request (413 beyond, before
                                      any of it is read); 0 = claimed requests take no body */
    int http_answer_ms;            /* an unanswered claimed request gets 503 after this; 0 = 30000 */
    size_t http_min_send_bytes_per_sec; /* a claimed request's answer is dropped when its client
                                      takes less than this per second, averaged over at least
                                      http_send_window_secs; 0 = no minimum (only the stall) */
    int http_send_window_secs;     /* the averaging window, and the longest an answer may make no
                                      progress at all is twice it; 0 = send_stall_secs, or 30 */
    const char *cors_origins;      /* exact origins ("https://blog.example.com"), separated by
                                      '\n', that may read web_root's files cross-origin (a page
                                      there loading our module scripts): a static file (and its
                                      304) asked for with one of them in Origin gets
                                      "Access-Control-Allow-Origin: <it>"; while the list is not
                                      empty every static file also says "Vary: Origin", so caches
                                      keep the two answers apart. NULL or "" = none, as before */
} ftws_config;

/* Create the context and listening socket. On failure returns NULL and writes one clear line to
 * err (e.g. "cannot read TLS certificate /x.pem"). Does not start serving. Service thread = the
 * thread that later calls ftws_server_run. The config and its strings are copied: they need to
 * live only for this call. */
ftws_server *ftws_server_create(const ftws_config *config, ftws_callbacks callbacks,
                                char *err, size_t err_len);
/* The bound TCP port (real port when config.port was 0). Any thread. */
int ftws_server_port(const ftws_server *server);

/* What the server wrote to WebSockets since it started. Service thread.
 *   frames:        our lws_write calls (a compressed message that lws sends as several
 *                  fragments still counts once)
 *   messages:      the messages they carried (a batched frame carries several, newline-separated)
 *   payload_bytes: those messages' bytes as the owner made them, before any compression
 *   bytes:         what went to the sockets for them: WebSocket frame headers plus payload after
 *                  permessage-deflate (TLS records and control frames aside), i.e. what the
 *                  network carries; equal to payload_bytes plus headers without compression */
typedef struct ftws_write_stats {
    uint64_t frames;
    uint64_t messages;
    uint64_t payload_bytes;
    uint64_t bytes;
} ftws_write_stats;
ftws_write_stats ftws_server_write_stats(const ftws_server *server);
/* Run the service loop on the calling thread until ftws_server_stop; returns 0 on a clean stop. */
int ftws_server_run(ftws_server *server);
/* Any thread: stop accepting, close every WebSocket with 1001 "server shutting down", let
 * queued bytes flush for at most grace_ms, then make ftws_server_run return. */
void ftws_server_stop(ftws_server *server, int grace_ms);
/* Any thread: wake the service thread; it calls on_wake (lws_cancel_service underneath). */
void ftws_server_wake(ftws_server *server);
/* After ftws_server_run returned: destroy the context and free everything. */
void ftws_server_destroy(ftws_server *server);

/* Frames: one encoded message with LWS_PRE headroom, shared by every connection it is sent to. */
ftws_frame *ftws_frame_create(const uint8_t *data, size_t len); /* refcount 1; copies data */
/* The same, sent as a binary message (never batched with other frames): for an owner that takes
 * binary messages (on_binary_message) and answers in kind. */
ftws_frame *ftws_frame_create_binary(const uint8_t *data, size_t len);
void ftws_frame_retain(ftws_frame *frame);
void ftws_frame_release(ftws_frame *frame);
size_t ftws_frame_length(const ftws_frame *frame);

/* Queue a frame (the connection retains it). Returns 0, or -1 when the connection is closing or
 * the frame would pass max_queue_bytes while other frames are queued (the connection is then
 * closed with slow_close_code). A frame larger than the cap is taken into an empty queue. */
int ftws_conn_send(ftws_conn *conn, ftws_frame *frame);
/* Queue one frame to many connections: the fan-out hot path, one call per broadcast. The
 * connection pointers are read where the caller keeps them: `first` points at the first one and
 * each next one lies `stride` bytes further (an array of the caller's connection structs, which
 * then needs no copy into an array of pointers; stride sizeof(ftws_conn *) for a plain array).
 * Returns the number of connections that refused it (see ftws_conn_send). */
size_t ftws_broadcast(ftws_frame *frame, const void *first, size_t stride, size_t count);
/* Close with a code and a reason (< 123 bytes: FTWS_CLOSE_REASON_MAX_BYTES in CFoldtableWSCommon.h;
 * cut between UTF-8 sequences if longer) after the queued frames. */
void ftws_conn_close(ftws_conn *conn, int code, const char *reason);
/* Bytes currently queued (not yet handed to the socket). */
size_t ftws_conn_queued_bytes(const ftws_conn *conn);
/* Bytes queued, or written but not yet taken by the peer (still in lws's or the kernel's send
 * buffer): 0 once the peer's TCP acknowledged everything written so far. */
size_t ftws_conn_unflushed_bytes(const ftws_conn *conn);
/* Ask for one on_drain once queued bytes are at or below low_mark (immediately if already so). */
void ftws_conn_request_drain(ftws_conn *conn, size_t low_mark);
/* A per-connection pointer for the owner (NULL at open). */
void ftws_conn_set_user(ftws_conn *conn, void *user);
void *ftws_conn_user(const ftws_conn *conn);
/* A number unique among this server's connections, for logs. */
uint64_t ftws_conn_id(const ftws_conn *conn);
/* The peer's IP address as text ("127.0.0.1", "::1"). */
const char *ftws_conn_peer(const ftws_conn *conn);
/* The upgrade request's X-Forwarded-For header ("" when absent or longer than 255 bytes), for an
 * owner that trusts the proxy in front of it. */
const char *ftws_conn_forwarded_for(const ftws_conn *conn);

/* Answer HTTP request request_id (from on_http_request) with status (200-599), extra headers
 * and a body (copied; may be NULL when len is 0). headers is NULL or lines "Name: value"
 * separated by "\r\n"; the C side writes the status line, the security headers every response
 * carries (Content-Security-Policy, X-Content-Type-Options, ...), Content-Length, and
 * "Cache-Control: no-store" unless headers name a Cache-Control. It owns the message framing, so
 * headers must not name Content-Length, Transfer-Encoding or Connection. A HEAD request gets the
 * headers (Content-Length included) without the body; 204 and 304 never carry one.
 * Returns 0 when the answer is queued (it is written on the connection's WRITEABLE callbacks, in
 * chunks, and the connection is then ready for its next request); -1 when request_id is not
 * waiting for an answer (its client went away, it was answered already, or never existed):
 * nothing happens; -2 when status or headers are unusable: the client gets 500 instead. */
int ftws_http_respond(ftws_server *server, uint64_t request_id, unsigned int status, const char *headers,
                      const uint8_t *body, size_t len);
/* As ftws_http_respond, but the body is not copied: it is shared with other answers (an export
 * many clients read at once) and stays valid until release(keeper) is called, once, on the service
 * thread, when this answer is written or its client is gone. Only on 0 does the C side take it;
 * on -1 or -2 the caller still owns it. Each answer copies one chunk at a time out of the body, so
 * a client reading slowly holds a chunk, not the body. */
int ftws_http_respond_shared(ftws_server *server, uint64_t request_id, unsigned int status,
                             const char *headers, const uint8_t *body, size_t len, void *keeper,
                             void (*release)(void *keeper));

/* Timers on the service thread: on_timer(owner, token) after delay_ms. Re-arming a token replaces
 * its earlier deadline; tokens are the owner's to choose. */
void ftws_timer_arm(ftws_server *server, uint64_t token, uint64_t delay_ms);
void ftws_timer_cancel(ftws_server *server, uint64_t token);

/* Monotonic milliseconds (same clock lws uses), for latency and busy measurement. */
uint64_t ftws_now_ms(void);

/* Log level: 0 = errors only (default), 1 = +warnings, 2 = +notices. lws logs go to stderr. */
void ftws_set_log_level(int level);

#ifdef __cplusplus
}
#endif
#endif
