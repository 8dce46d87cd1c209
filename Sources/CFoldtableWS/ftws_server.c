/*
 * Context, vhost, the single lws protocol callback, shutdown and logging: the top of the C
 * layers (see ftws_internal.h). The callback only dispatches: each reason goes to the file that
 * owns it (ftws_ws.c, ftws_route.c, ftws_http.c, ftws_queue.c).
 *
 * One context, one vhost, one protocol ("foldtable") that handles both HTTP and WebSocket.
 * Being protocols[0] matters: lws 4.1.6 binds an upgrade without Sec-WebSocket-Protocol to
 * the vhost's default protocol (index 0), which is how browsers that send no subprotocol
 * reach us, and it is also the protocol plain HTTP requests land on when no mount matches.
 */
#include "ftws_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* Per-wsi storage lws allocates for our protocol (HTTP and WS alike; lws frees and zeroes it
 * again for each keep-alive HTTP transaction). The connection and the HTTP request are separate
 * allocations, so each can outlive lws's bookkeeping until its end is reported. */
struct ftws_pss {
    ftws_conn *conn;        /* a WebSocket, from ESTABLISHED to CLOSED */
    ftws_http_req *req;     /* a claimed HTTP request, from LWS_CALLBACK_HTTP to its answer */
};

/* ---- logging ---------------------------------------------------------------------------- */

/* Servers may be created on several threads at once (the tests do), while other servers'
 * service threads log: the level is atomic, and the capture of a failed start's first error
 * belongs to the thread running ftws_server_create (lws logs a context's creation on the
 * calling thread), so concurrent starts neither race nor take each other's errors. */
static _Atomic int g_log_level; /* 0 = errors only */
static _Thread_local bool g_log_capture;
static _Thread_local char g_log_first_error[256];

static int lws_levels(int level)
{
    int l = LLL_ERR;
    if (level >= 1)
        l |= LLL_WARN;
    if (level >= 2)
        l |= LLL_NOTICE;
    return l;
}

/* While ftws_server_create runs, lws's error lines are captured instead of printed, so a
 * failed start produces the one line the caller prints (with lws's reason folded in). */
static void log_emit(int level, const char *line)
{
    if (g_log_capture) {
        if (level == LLL_ERR && !g_log_first_error[0]) {
            snprintf(g_log_first_error, sizeof(g_log_first_error), "%s", line);
            for (char *p = g_log_first_error; *p; p++)
                if (*p == '\n' || *p == '\r')
                    *p = ' ';
            size_t n = strlen(g_log_first_error);
            while (n && g_log_first_error[n - 1] == ' ')
                g_log_first_error[--n] = '\0';
        }
        return;
    }
    /* lws may quote bytes a client sent (a header, a path) in its own lines: control characters
     * are written as \xNN, so no client can end the line and forge another. The line's own
     * final newline stays. */
    char safe[1024];
    size_t out = 0;
    for (const unsigned char *p = (const unsigned char *)line; *p && out + 5 < sizeof(safe); p++) {
        bool last_newline = *p == '\n' && p[1] == '\0';
        if ((*p < 0x20 && !last_newline) || *p == 0x7f)
            out += (size_t)snprintf(safe + out, sizeof(safe) - out, "\\x%02x", *p);
        else
            safe[out++] = (char)*p;
    }
    if (out && safe[out - 1] != '\n')
        safe[out++] = '\n';
    safe[out] = '\0';
    lwsl_emit_stderr(level, safe);
}

/* 0 = errors only (default), 1 = +warnings, 2 = +notices. Applies immediately. */
void ftws_set_log_level(int level)
{
    g_log_level = level;
    lws_set_log_level(lws_levels(level), log_emit);
}

/* Monotonic milliseconds from the clock lws schedules with (CLOCK_MONOTONIC). */
uint64_t ftws_now_ms(void)
{
    return (uint64_t)lws_now_usecs() / 1000u;
}

/* ---- shutdown ------------------------------------------------------------------------------ */

static void giveup_fired(lws_sorted_usec_list_t *sul)
{
    ftws_server *s = lws_container_of(sul, ftws_server, sul_giveup);
    s->done = true; /* lws never reported some close: do not hang the caller */
}

static void grace_fired(lws_sorted_usec_list_t *sul)
{
    ftws_server *s = lws_container_of(sul, ftws_server, sul_grace);
    s->grace_expired = true;
    for (ftws_conn *c = s->conns; c; c = c->next)
        ftws__conn_kill(c, FTWS_CLOSE_GOING_AWAY);
    ftws__route_kill_all(s);
    ftws__check_done(s);
    if (!s->done)
        lws_sul_schedule(s->ctx, 0, &s->sul_giveup, giveup_fired, 2 * LWS_US_PER_SEC);
}

static void begin_shutdown(ftws_server *s)
{
    if (s->stopping)
        return;
    s->stopping = true;
    for (ftws_conn *c = s->conns; c; c = c->next)
        ftws_conn_close(c, FTWS_CLOSE_GOING_AWAY, "server shutting down");
    int grace = atomic_load(&s->stop_grace_ms);
    if (grace < 0)
        grace = 0;
    lws_sul_schedule(s->ctx, 0, &s->sul_grace, grace_fired, (lws_usec_t)grace * LWS_US_PER_MS);
    ftws__check_done(s);
}

/* Once a second: connections whose queue (or pending close) has made no progress for
 * send_stall_secs are dropped. One scan per second instead of an lws timeout re-armed on
 * every write: lws keeps timeouts in a sorted list, so per-write re-arming costs a list walk
 * per write across all connections. */
static void tick_fired(lws_sorted_usec_list_t *sul)
{
    ftws_server *s = lws_container_of(sul, ftws_server, sul_tick);
    if (s->cfg.send_stall_secs > 0) {
        lws_usec_t now = lws_now_usecs();
        lws_usec_t limit = (lws_usec_t)s->cfg.send_stall_secs * LWS_US_PER_SEC;
        for (ftws_conn *c = s->conns; c; c = c->next)
            if ((c->q.count || c->close_pending) && now - c->last_progress_us > limit)
                ftws__conn_kill(c, s->cfg.slow_close_code);
    }
    lws_sul_schedule(s->ctx, 0, &s->sul_tick, tick_fired, LWS_US_PER_SEC);
}

/* ---- the protocol callback --------------------------------------------------------------------- */

static int ftws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len)
{
    ftws_server *s = ftws__server_from_wsi(wsi);
    struct ftws_pss *pss = user;
    ftws_conn *c = pss ? pss->conn : NULL;

    if (!s)
        return lws_callback_http_dummy(wsi, reason, user, in, len);

    switch (reason) {
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
        /* Once stopping, new TCP connections are closed straight after accept. */
        return ftws__stopping(s);

    case LWS_CALLBACK_HTTP:
        return pss ? ftws__route_http(s, wsi, &pss->req, in, len) : -1;

    case LWS_CALLBACK_HTTP_BODY:
        return pss && pss->req ? ftws__route_body(s, pss->req, in, len) : 0;

    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        return pss && pss->req ? ftws__route_body_done(s, pss->req) : 0;

    case LWS_CALLBACK_HTTP_WRITEABLE:
        if (pss && pss->req)
            return ftws__route_writeable(s, &pss->req);
        return lws_callback_http_dummy(wsi, reason, user, in, len);

    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
    case LWS_CALLBACK_WSI_DESTROY:
        /* Whichever comes first: the wsi is closing, or lws is about to free its per-request
         * storage. A request in flight is forgotten (its owner told, if it was waiting). */
        if (pss)
            ftws__route_gone(s, &pss->req);
        return lws_callback_http_dummy(wsi, reason, user, in, len);

    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        return ftws__http_confirm_upgrade(s, wsi, in);

    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        /* Backstop: CONFIRM_UPGRADE already answered anything but ws_path. */
        return !ftws__is_ws_path(s, wsi);

    case LWS_CALLBACK_ESTABLISHED:
        return pss ? ftws__ws_established(s, &pss->conn, wsi) : -1;

    case LWS_CALLBACK_RECEIVE:
        return c ? ftws__ws_receive(s, c, wsi, in, len) : -1;

    case LWS_CALLBACK_RECEIVE_PONG:
        if (c)
            ftws__keepalive_heard(c, lws_now_usecs());
        return 0;

    case LWS_CALLBACK_SERVER_WRITEABLE:
        return c ? ftws__conn_writeable(c) : 0;

    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (c)
            ftws__ws_peer_closed(c, in, len);
        return 0;

    case LWS_CALLBACK_WS_SERVER_DROP_PROTOCOL:
        ftws__ws_drop_protocol(s, c, wsi);
        return 0;

    case LWS_CALLBACK_CLOSED:
        if (pss)
            ftws__ws_closed(s, &pss->conn, wsi);
        ftws__check_done(s);
        return 0;

    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        /* lws_cancel_service from ftws_server_stop or ftws_server_wake (any thread), but lws
         * also cancels its own wait, e.g. on every accepted connection: only a wake that was
         * really asked for reaches on_wake. */
        if (atomic_load(&s->stop_requested))
            begin_shutdown(s);
        if (atomic_exchange(&s->wake_pending, 0) && s->cb.on_wake)
            s->cb.on_wake(s->cb.owner);
        return 0;

    default:
        /* File completion, keep-alive, HTTP writeable for file streaming, ... */
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

static void set_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || !err_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* A readable regular file, checked up front so the error names the file (lws would only say
 * that TLS setup failed). */
static bool readable_file(const char *path)
{
    struct stat st;
    if (stat(path, &st))
        return false;
    if (!S_ISREG(st.st_mode)) {
        errno = EISDIR;
        return false;
    }
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    fclose(f);
    return true;
}

static void server_free(ftws_server *s)
{
    if (!s)
        return;
    free(s->host);
    free(s->web_root);
    free(s->ws_path);
    free(s->spa_prefix);
    free(s->tls_cert);
    free(s->tls_key);
    free(s->cors_origins);
    free(s->scratch);
    free(s);
}

/* Step 1 of ftws_server_create: the settings that need no file system, checked before anything
 * is allocated, so a bad one costs nothing and its line names the setting. */
static bool check_settings(const ftws_config *cfg, char *err, size_t err_len)
{
    if (!cfg->ws_path || cfg->ws_path[0] != '/') {
        set_err(err, err_len, "ws_path must start with '/' (got \"%s\")", cfg->ws_path ? cfg->ws_path : "");
        return false;
    }
    if (cfg->port < 0 || cfg->port > 65535) {
        set_err(err, err_len, "port must be 0..65535");
        return false;
    }
    if (cfg->http_answer_ms < 0 || cfg->http_send_window_secs < 0 ||
        cfg->http_send_window_secs > 86400) {
        set_err(err, err_len, "http_answer_ms and http_send_window_secs must be 0 or positive "
                              "(the window at most a day)");
        return false;
    }
    if (!cfg->max_message_bytes || !cfg->max_queue_bytes) {
        set_err(err, err_len, "max_message_bytes and max_queue_bytes must be positive");
        return false;
    }
    if (cfg->slow_close_code < 1000 || cfg->slow_close_code > 4999) {
        set_err(err, err_len, "slow_close_code must be a close code (1000-4999)");
        return false;
    }
    if (cfg->ping_interval_secs < 0 || cfg->hangup_secs < 0 || cfg->send_stall_secs < 0 ||
        cfg->ping_interval_secs > 65535 || cfg->hangup_secs > 65535) {
        set_err(err, err_len, "ping/hangup/stall seconds must be 0..65535");
        return false;
    }
    if (cfg->ping_interval_secs > 0 && cfg->hangup_secs <= cfg->ping_interval_secs) {
        set_err(err, err_len, "hangup_secs must be greater than ping_interval_secs");
        return false;
    }
    if (cfg->spa_prefix && cfg->spa_prefix[0] != '/') {
        set_err(err, err_len, "spa_prefix must start with '/' (got \"%s\")", cfg->spa_prefix);
        return false;
    }
    return true;
}

/* Step 2: TLS is all or nothing, so a missing half never falls back to plaintext; and both files
 * are read up front, so the line names the file (lws would only say that TLS setup failed). */
static bool check_tls(const ftws_config *cfg, bool tls, char *err, size_t err_len)
{
    if (!tls)
        return true;
    if (!cfg->tls_cert_path || !cfg->tls_key_path) {
        set_err(err, err_len, "TLS needs both a certificate and a key (got only the %s)",
                cfg->tls_cert_path ? "certificate" : "key");
        return false;
    }
    if (!readable_file(cfg->tls_cert_path)) {
        set_err(err, err_len, "cannot read TLS certificate %s: %s", cfg->tls_cert_path,
                strerror(errno));
        return false;
    }
    if (!readable_file(cfg->tls_key_path)) {
        set_err(err, err_len, "cannot read TLS key %s: %s", cfg->tls_key_path, strerror(errno));
        return false;
    }
    return true;
}

/* Step 3: our own copies of every string lws or we read later (lws keeps pointers to the host
 * and the TLS paths for the context's life, and the caller's strings need not live that long),
 * the web root resolved once (ftws_http.c compares real paths against it), and the one shared
 * batch buffer (ftws_queue.c). */
static bool keep_config(ftws_server *s, const ftws_config *cfg, char *err, size_t err_len)
{
    if (cfg->web_root) {
        s->web_root = realpath(cfg->web_root, NULL);
        struct stat st;
        if (!s->web_root || stat(s->web_root, &st) || !S_ISDIR(st.st_mode)) {
            set_err(err, err_len, "web root %s is not a readable directory", cfg->web_root);
            return false;
        }
        s->web_root_len = strlen(s->web_root);
    }
    s->host = dup_or_null(cfg->host);
    s->ws_path = dup_or_null(cfg->ws_path);
    s->spa_prefix = dup_or_null(cfg->spa_prefix);
    s->spa_prefix_len = s->spa_prefix ? strlen(s->spa_prefix) : 0;
    s->tls_cert = dup_or_null(cfg->tls_cert_path);
    s->tls_key = dup_or_null(cfg->tls_key_path);
    /* An empty list is no list: no Vary either, so answers stay exactly as without it. */
    s->cors_origins = cfg->cors_origins && cfg->cors_origins[0] ? dup_or_null(cfg->cors_origins) : NULL;
    if (cfg->max_batch_bytes)
        s->scratch = malloc(LWS_PRE + cfg->max_batch_bytes);
    if ((cfg->host && !s->host) || !s->ws_path || (cfg->spa_prefix && !s->spa_prefix) ||
        (s->tls && (!s->tls_cert || !s->tls_key)) || (cfg->max_batch_bytes && !s->scratch) ||
        (cfg->cors_origins && cfg->cors_origins[0] && !s->cors_origins)) {
        set_err(err, err_len, "out of memory");
        return false;
    }
    return true;
}

/* Step 4: the one protocol (see the top of this file for why it must be protocols[0]) and the
 * retry policy, both in the server struct because lws keeps pointers to them. */
static void set_up_protocol(ftws_server *s)
{
    s->protocols[0].name = "foldtable";
    s->protocols[0].callback = ftws_callback;
    s->protocols[0].per_session_data_size = sizeof(struct ftws_pss);
    /* rx chunk size per connection (lws allocates it for each ws). Small keeps idle
     * connections cheap; messages are reassembled by us anyway. */
    s->protocols[0].rx_buffer_size = 4096;
    /* lws caps each send() at tx_packet_size (default: the rx buffer size, 4 KB) and copies
     * the rest of the frame into its overflow buffer, to be sent on later POLLOUTs. A large cap
     * lets the kernel take whatever fits in one call, so lws copies only the true remainder.
     * (lws casts it to int and adds LWS_PRE: keep well below INT_MAX.) */
    s->protocols[0].tx_packet_size = (size_t)1 << 30;

    /* lws's own keepalive stays off (zeros here; with no policy at all lws would ping every
     * 300 s): ftws_keepalive.c says why it pings and hangs up itself. */
    s->retry.secs_since_valid_ping = 0;
    s->retry.secs_since_valid_hangup = 0;
}

/* Step 5: what the context and its one vhost are made from (4.1.6 takes both from the same
 * info). Every pointer in it points into s, which outlives the context. */
static void fill_context_info(ftws_server *s, struct lws_context_creation_info *info)
{
    memset(info, 0, sizeof(*info)); /* 4.1.6 has no lws_context_info_defaults() */
    /* Explicit vhosts: we create the one vhost ourselves and keep it (its bound port is read
     * back from it). UTF-8 is validated by lws (it closes with 1007). The security headers'
     * strict CSP is why web/ has no inline script or style. A port that cannot be bound fails
     * the start instead of being retried. */
    info->options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS | LWS_SERVER_OPTION_VALIDATE_UTF8 |
                    LWS_SERVER_OPTION_HTTP_HEADERS_SECURITY_BEST_PRACTICES_ENFORCE |
                    LWS_SERVER_OPTION_FAIL_UPON_UNABLE_TO_BIND;
    info->user = s;
    info->protocols = s->protocols;
    info->port = s->cfg.port;
    info->iface = s->host;
    info->vhost_name = "foldtable";
    info->server_string = "foldtable";
    info->retry_and_idle_policy = &s->retry;
    info->count_threads = 1;
    /* Negotiated per connection, only when the client offers it (ftws_deflate.c). */
    if (s->cfg.permessage_deflate)
        info->extensions = ftws__deflate_extensions();
    if (s->tls) {
        info->options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info->ssl_cert_filepath = s->tls_cert;
        info->ssl_private_key_filepath = s->tls_key;
        /* HTTP/1.1 only: over h2 a WebSocket would be an h2 stream whose frame header is
         * per stream, which breaks sharing one frame buffer between connections. */
        info->alpn = "http/1.1";
    }
}

/* Step 6: create the context and bind the listening vhost. lws's error lines are captured
 * meanwhile (log_emit), so a failure becomes one line naming the address (and, with TLS, the
 * files), with lws's own reason folded in, instead of lws's several lines on stderr. */
static bool start_listening(ftws_server *s, const struct lws_context_creation_info *info, char *err,
                            size_t err_len)
{
    g_log_first_error[0] = '\0';
    g_log_capture = true;
    lws_set_log_level(lws_levels(g_log_level), log_emit);

    s->ctx = lws_create_context(info);
    if (s->ctx)
        s->vh = lws_create_vhost(s->ctx, info);
    g_log_capture = false;

    if (s->ctx && s->vh) {
        s->port = lws_get_vhost_listen_port(s->vh);
        return true;
    }
    const char *why = g_log_first_error[0] ? g_log_first_error : "libwebsockets refused the configuration";
    char where[200];
    snprintf(where, sizeof(where), "%s:%d", s->host ? s->host : "*", s->cfg.port);
    if (s->tls)
        set_err(err, err_len,
                "cannot start TLS on %s with certificate %s and key %s "
                "(key does not match, invalid PEM, or address unavailable): %s",
                where, s->tls_cert, s->tls_key, why);
    else
        set_err(err, err_len, "cannot listen on %s: %s", where, why);
    if (s->ctx)
        lws_context_destroy(s->ctx);
    s->ctx = NULL;
    return false;
}

/* Validate the config, create the context and the listening vhost. On failure: NULL and one
 * line in err. Nothing is served until ftws_server_run. The steps above, in order: what can be
 * refused cheaply is refused before anything is allocated or bound. */
ftws_server *ftws_server_create(const ftws_config *config, ftws_callbacks callbacks, char *err,
                                size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!config) {
        set_err(err, err_len, "no configuration");
        return NULL;
    }
    bool tls = config->tls_cert_path || config->tls_key_path;
    if (!check_settings(config, err, err_len) || !check_tls(config, tls, err, err_len))
        return NULL;

    ftws_server *s = calloc(1, sizeof(*s));
    if (!s) {
        set_err(err, err_len, "out of memory");
        return NULL;
    }
    s->cfg = *config;
    s->cb = callbacks;
    s->turn = 1; /* a connection's read_turn of 0 means "never" */
    s->tls = tls;
    atomic_init(&s->stop_requested, 0);
    atomic_init(&s->stop_grace_ms, 0);
    atomic_init(&s->wake_pending, 0);
    if (!keep_config(s, config, err, err_len)) {
        server_free(s);
        return NULL;
    }

    set_up_protocol(s);
    struct lws_context_creation_info info;
    fill_context_info(s, &info);
    if (!start_listening(s, &info, err, err_len)) {
        server_free(s);
        return NULL;
    }
    return s;
}

/* Any thread: the port is written once in create and never changes. */
int ftws_server_port(const ftws_server *server)
{
    return server ? server->port : 0;
}

/* Service thread: plain integers, written by the same thread in ftws__queue_write. */
ftws_write_stats ftws_server_write_stats(const ftws_server *server)
{
    ftws_write_stats none = {0, 0, 0, 0};
    return server ? server->written : none;
}

/* The service loop. lws_service(ctx, 0) sleeps until the next socket event, sul deadline or
 * lws_cancel_service; every callback runs inside it, on this thread. */
int ftws_server_run(ftws_server *server)
{
    if (!server || !server->ctx)
        return -1;
    ftws_server *s = server;
    int rc = 0;
    lws_sul_schedule(s->ctx, 0, &s->sul_tick, tick_fired, LWS_US_PER_SEC);
    ftws__keepalive_start(s);
    /* A stop requested before run began: its cancel may have been consumed already. */
    if (atomic_load(&s->stop_requested))
        begin_shutdown(s);
    while (!s->done) {
        int served = lws_service(s->ctx, 0);
        s->turn++;
        /* Even after a failing turn: what the owner gathered in it must not be left waiting. */
        if (s->cb.on_turn)
            s->cb.on_turn(s->cb.owner);
        if (served < 0) {
            rc = -1;
            break;
        }
    }
    lws_sul_cancel(&s->sul_tick);
    lws_sul_cancel(&s->sul_grace);
    lws_sul_cancel(&s->sul_giveup);
    lws_sul_cancel(&s->sul_keepalive);
    return rc;
}

/* Any thread: only an atomic flag and lws_cancel_service (the one lws call that is safe from
 * other threads); the service thread does the rest in EVENT_WAIT_CANCELLED. */
void ftws_server_stop(ftws_server *server, int grace_ms)
{
    if (!server || !server->ctx)
        return;
    /* Grace first, flag second: the service thread reads the grace after seeing the flag. */
    if (!atomic_load(&server->stop_requested)) {
        atomic_store(&server->stop_grace_ms, grace_ms);
        atomic_store(&server->stop_requested, 1);
    }
    lws_cancel_service(server->ctx);
}

/* Any thread: on_wake follows on the service thread (several wakes may become one). */
void ftws_server_wake(ftws_server *server)
{
    if (!server || !server->ctx)
        return;
    /* Flag before cancel: the service thread tests the flag after it wakes. */
    atomic_store(&server->wake_pending, 1);
    lws_cancel_service(server->ctx);
}

/* After run returned. Connections still open (only if run was never called or failed) get
 * their on_close from inside lws_context_destroy. */
void ftws_server_destroy(ftws_server *server)
{
    if (!server)
        return;
    ftws__timers_cancel_all(server);
    server->destroying = true; /* lws reports closes from inside destroy: the owner is going */
    lws_sul_cancel(&server->sul_tick);
    lws_sul_cancel(&server->sul_grace);
    lws_sul_cancel(&server->sul_giveup);
    lws_sul_cancel(&server->sul_keepalive);
    server->stopping = true;
    if (server->ctx)
        lws_context_destroy(server->ctx);
    server->ctx = NULL;
    server_free(server);
}
