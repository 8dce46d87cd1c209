/*
 * CFoldtableWSClient: the WebSocket client wrapper (see include/CFoldtableWSClient.h), for `foldtable`.
 * Its own target, beside the server wrapper CFoldtableWS: the client binary links no server code
 * and the server none of this; the one helper both need lives in CFoldtableWSCommon.
 *
 * One lws context without a listening socket, one vhost with two protocols: "ftwsc-ws" for the
 * single client connection and "ftwsc-fd" for descriptors adopted into the poll loop.
 *
 * Why one thread for everything: the terminal client has three inputs (the socket, the
 * keyboard, signals) and timers (spinner, reconnect backoff, deadlines). lws already runs a
 * poll loop with timers (lws_sul); adopting stdin and a signal pipe as raw file descriptors
 * (LWS_ADOPT_RAW_FILE_DESC, LWS_CALLBACK_RAW_RX_FILE) puts all of them in that loop. The other
 * design (lws on a thread, UI on main, a pipe and lws_cancel_service between them) needs a
 * locked queue both ways and still a poll loop on the UI side. With one thread, Swift calls
 * these functions directly from inside callbacks and nothing is shared.
 */
#include "CFoldtableWSClient.h"

#include <CFoldtableWSCommon.h>

#include <libwebsockets.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FTWSC_MAX_TIMERS 16
#define FTWSC_DEFAULT_MAX_MESSAGE ((size_t)64 << 20)
#define FTWSC_MAX_QUEUE_BYTES ((size_t)8 << 20)
/* Seconds lws allows for connect, TLS and the handshake before it gives up. */
#define FTWSC_CONNECT_TIMEOUT_SECS 10

enum conn_state {
    CONN_IDLE,       /* no connection */
    CONN_CONNECTING, /* lws_client_connect_via_info called, not yet established */
    CONN_OPEN,
    CONN_CLOSING,    /* ftwsc_close: the close frame goes after the queued messages */
};

/* One queued outgoing message with LWS_PRE bytes of headroom for lws_write's header. */
typedef struct ftwsc_msg {
    struct ftwsc_msg *next;
    size_t len;
    uint8_t buf[]; /* LWS_PRE + len */
} ftwsc_msg;

typedef struct ftwsc_timer {
    lws_sorted_usec_list_t sul; /* first: lws_container_of gets back here */
    ftwsc_client *client;
    uint64_t token;
    bool armed;
} ftwsc_timer;

struct ftwsc_client {
    struct lws_context *ctx;
    struct lws_vhost *vhost;
    ftwsc_callbacks cb;
    size_t max_message;
    bool insecure;
    bool stop;
    bool destroying; /* no callbacks into Swift while lws tears things down */

    /* The one connection. The strings live here because lws may read them after the call. */
    struct lws *wsi;
    enum conn_state state;
    bool established;
    char address[256];
    char host_header[300];
    char path[2048];

    ftwsc_msg *q_head, *q_tail;
    size_t q_bytes;

    uint8_t *rx;
    size_t rx_len, rx_cap;
    bool rx_binary; /* the message being received is binary: skipped, the server sends none */

    int close_code; /* what ftwsc_close asked for */
    char close_reason[FTWS_CLOSE_REASON_MAX_BYTES + 1];
    int peer_code;  /* what the server's close frame said */
    char error[256]; /* why the connection failed, for people */

    /* The connection's end is reported from a zero-delay timer, never from inside the lws
     * callback or API call where it is detected: Swift may then reconnect at once. */
    lws_sorted_usec_list_t sul_report;
    bool report_pending;
    int report_code;
    bool report_established;
    char report_reason[300];

    ftwsc_timer timers[FTWSC_MAX_TIMERS];
};

/* ---- logging ------------------------------------------------------------------------------ */

/* lws logs to stderr by default, which would scribble over the full-screen UI and break the
 * "one line on stderr" promise of the script commands. Errors lws logs on its own (a TLS
 * failure's details) are kept instead and folded into the connection error when it has none. */
static char g_last_lws_error[256];
static int g_log_level;

static void log_emit(int level, const char *line)
{
    if (level == LLL_ERR) {
        snprintf(g_last_lws_error, sizeof(g_last_lws_error), "%s", line);
        for (char *p = g_last_lws_error; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
    }
    if (g_log_level > 0)
        lwsl_emit_stderr(level, line);
}

uint64_t ftwsc_now_ms(void)
{
    return (uint64_t)lws_now_usecs() / 1000u;
}

/* One line: drop the trailing newline and blanks lws puts in some of its reason strings. */
static void set_line(char *dst, size_t cap, const char *text, size_t len)
{
    if (len >= cap)
        len = cap - 1;
    size_t n = 0;
    for (size_t i = 0; i < len && text[i]; i++) {
        char ch = text[i];
        dst[n++] = (ch == '\n' || ch == '\r' || ch == '\t') ? ' ' : ch;
    }
    while (n && dst[n - 1] == ' ')
        n--;
    dst[n] = '\0';
}

/* ---- connection end ----------------------------------------------------------------------- */

static void queue_clear(ftwsc_client *c)
{
    ftwsc_msg *m = c->q_head;
    while (m) {
        ftwsc_msg *next = m->next;
        free(m);
        m = next;
    }
    c->q_head = c->q_tail = NULL;
    c->q_bytes = 0;
}

static void report_fired(lws_sorted_usec_list_t *sul)
{
    ftwsc_client *c = lws_container_of(sul, ftwsc_client, sul_report);
    if (!c->report_pending)
        return;
    c->report_pending = false;
    if (c->cb.on_close && !c->destroying)
        c->cb.on_close(c->cb.owner, c->report_code, c->report_established, c->report_reason);
}

/* The connection is over (whatever lws callback said so): forget it and report once. */
static void connection_ended(ftwsc_client *c, int code, const char *reason)
{
    if (c->state == CONN_IDLE)
        return;
    c->state = CONN_IDLE;
    c->wsi = NULL;
    queue_clear(c);
    c->rx_len = 0;
    c->report_pending = true;
    c->report_code = code;
    c->report_established = c->established;
    snprintf(c->report_reason, sizeof(c->report_reason), "%s", reason ? reason : "");
    lws_sul_schedule(c->ctx, 0, &c->sul_report, report_fired, 1);
}

/* ---- receive ------------------------------------------------------------------------------ */

static int on_receive(ftwsc_client *c, struct lws *wsi, const uint8_t *in, size_t len)
{
    if (c->state != CONN_OPEN)
        return 0; /* closing: nothing more is delivered */
    bool first = lws_is_first_fragment(wsi);
    bool final = lws_is_final_fragment(wsi);
    size_t remaining = lws_remaining_packet_payload(wsi);
    if (first) {
        c->rx_len = 0;
        c->rx_binary = lws_frame_is_binary(wsi);
    }
    if (c->rx_binary)
        return 0;
    size_t cap = c->max_message;
    if (len > cap - c->rx_len || remaining > cap - c->rx_len - len) {
        snprintf(c->error, sizeof(c->error), "the server sent a message over %zu bytes", cap);
        c->close_code = FTWSC_CLOSE_TOO_BIG;
        static const char reason[] = "message too big";
        lws_close_reason(wsi, (enum lws_close_status)FTWSC_CLOSE_TOO_BIG, (unsigned char *)reason,
                         sizeof(reason) - 1);
        return -1;
    }
    if (first && final) {
        /* The whole message in one chunk (the usual case): no copy. */
        if (c->cb.on_message)
            c->cb.on_message(c->cb.owner, in, len);
        return 0;
    }
    if (ftws_buffer_reserve(&c->rx, &c->rx_cap, c->rx_len + len, 65536, cap)) {
        snprintf(c->error, sizeof(c->error), "out of memory");
        return -1;
    }
    if (len)
        memcpy(c->rx + c->rx_len, in, len);
    c->rx_len += len;
    if (final) {
        size_t n = c->rx_len;
        c->rx_len = 0;
        if (c->cb.on_message)
            c->cb.on_message(c->cb.owner, c->rx, n);
    }
    return 0;
}

/* ---- send --------------------------------------------------------------------------------- */

/* One lws_write per WRITEABLE (lws's rule); ask again while anything is left. */
static int on_writeable(ftwsc_client *c, struct lws *wsi)
{
    ftwsc_msg *m = c->q_head;
    if (m) {
        c->q_head = m->next;
        if (!c->q_head)
            c->q_tail = NULL;
        c->q_bytes -= m->len;
        int n = lws_write(wsi, m->buf + LWS_PRE, m->len, LWS_WRITE_TEXT);
        free(m);
        if (n < 0) {
            snprintf(c->error, sizeof(c->error), "writing to the server failed");
            return -1;
        }
        if (c->q_head || c->state == CONN_CLOSING)
            lws_callback_on_writable(wsi);
        return 0;
    }
    if (c->state == CONN_CLOSING) {
        lws_close_reason(wsi, (enum lws_close_status)c->close_code, (unsigned char *)c->close_reason,
                         strlen(c->close_reason));
        return -1;
    }
    return 0;
}

int ftwsc_send(ftwsc_client *c, const uint8_t *data, size_t len)
{
    if (!c || c->state != CONN_OPEN || !c->wsi)
        return -1;
    if (len > FTWSC_MAX_QUEUE_BYTES - c->q_bytes)
        return -1;
    ftwsc_msg *m = malloc(sizeof(*m) + LWS_PRE + len);
    if (!m)
        return -1;
    m->next = NULL;
    m->len = len;
    if (len)
        memcpy(m->buf + LWS_PRE, data, len);
    if (c->q_tail)
        c->q_tail->next = m;
    else
        c->q_head = m;
    c->q_tail = m;
    c->q_bytes += len;
    lws_callback_on_writable(c->wsi);
    return 0;
}

size_t ftwsc_queued_bytes(const ftwsc_client *c)
{
    return c ? c->q_bytes : 0;
}

void ftwsc_close(ftwsc_client *c, int code, const char *reason)
{
    if (!c || !c->wsi)
        return;
    if (c->state == CONN_CONNECTING) {
        /* Not open yet: nothing to say a close frame to; drop it. WSI_DESTROY reports. */
        snprintf(c->error, sizeof(c->error), "closed before the connection was open");
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
        return;
    }
    if (c->state != CONN_OPEN)
        return;
    c->state = CONN_CLOSING;
    c->close_code = code;
    ftws_utf8_truncate(c->close_reason, reason, FTWS_CLOSE_REASON_MAX_BYTES);
    lws_callback_on_writable(c->wsi);
}

/* ---- the protocol callback ---------------------------------------------------------------- */

static ftwsc_client *client_of(struct lws *wsi)
{
    return (ftwsc_client *)lws_context_user(lws_get_context(wsi));
}

/* The close code and reason of a close frame from the server (payload: 2-byte code, text). */
static void on_peer_close(ftwsc_client *c, const uint8_t *in, size_t len)
{
    if (len >= 2) {
        c->peer_code = (in[0] << 8) | in[1];
        if (len > 2)
            set_line(c->error, sizeof(c->error), (const char *)in + 2, len - 2);
    }
}

/* One clear line for a failed connection. lws's own reasons are terse ("Unable to connect",
 * "connect SSL err 1: error:00000001:lib(0)::reason(1)"); two common cases can say more:
 * - a failed TCP connect: lws has closed the socket (and lost its error) by the time it says
 *   "Unable to connect", which it says for a refused and a timed-out connect alike;
 * - a refused certificate: lws's verify callback logged the reason (LLL_ERR, kept by log_emit).
 * in is sometimes NULL; then the last error lws logged is all there is. */
static void connect_error(char *why, size_t cap, const char *in, size_t len)
{
    if (in)
        set_line(why, cap, in, len ? len : strlen(in));
    else
        why[0] = '\0';
    const char *verify = strstr(g_last_lws_error, "SSL error: ");
    if (verify && (!why[0] || !strncmp(why, "connect SSL", 11))) {
        verify += strlen("SSL error: ");
        const char *end = strstr(verify, " (preverify");
        int n = end ? (int)(end - verify) : (int)strlen(verify);
        snprintf(why, cap, "the server's certificate is not trusted: %.*s (--ca FILE trusts its CA)", n, verify);
        return;
    }
    if (!strcmp(why, "Unable to connect")) {
        snprintf(why, cap, "connection refused or timed out (is the server running?)");
        return;
    }
    if (!why[0] && g_last_lws_error[0])
        set_line(why, cap, g_last_lws_error, strlen(g_last_lws_error));
    if (!why[0])
        snprintf(why, cap, "connection failed");
}

static int callback_ws(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    ftwsc_client *c = client_of(wsi);
    if (!c || c->destroying || wsi != c->wsi)
        return lws_callback_http_dummy(wsi, reason, user, in, len);

    switch (reason) {
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        c->state = CONN_OPEN;
        c->established = true;
        if (c->cb.on_open)
            c->cb.on_open(c->cb.owner);
        return 0;

    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        char why[256];
        connect_error(why, sizeof(why), (const char *)in, len);
        connection_ended(c, FTWSC_CLOSE_ABNORMAL, why);
        return 0;
    }

    case LWS_CALLBACK_CLIENT_RECEIVE:
        return on_receive(c, wsi, in, len);

    case LWS_CALLBACK_CLIENT_WRITEABLE:
        return on_writeable(c, wsi);

    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        on_peer_close(c, in, len);
        return 0; /* lws echoes the close frame */

    case LWS_CALLBACK_CLIENT_CLOSED:
    case LWS_CALLBACK_WSI_DESTROY: {
        int code = c->peer_code ? c->peer_code : c->close_code ? c->close_code : FTWSC_CLOSE_ABNORMAL;
        const char *why = c->error[0] ? c->error : (c->established ? "" : "connection failed");
        connection_ended(c, code, why);
        return 0;
    }

    default:
        break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

/* Watched descriptors: readable -> on_readable. The fd is the caller's to read. */
static int callback_fd(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    ftwsc_client *c = client_of(wsi);
    switch (reason) {
    case LWS_CALLBACK_RAW_RX_FILE:
        if (c && !c->destroying && c->cb.on_readable)
            c->cb.on_readable(c->cb.owner, (int)lws_get_socket_fd(wsi));
        return 0;
    default:
        break;
    }
    return 0;
}

/* lws keeps a pointer to this table for the context's life: static. "ftwsc-ws" is first, so
 * it is also the vhost's default protocol. */
static const struct lws_protocols protocols[] = {
    {"ftwsc-ws", callback_ws, 0, 0, 0, NULL, 0},
    {"ftwsc-fd", callback_fd, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* Keepalive on the client side too: a server that vanished without a FIN (a pulled cable, a
 * suspended laptop) is noticed and the client reconnects, instead of showing a stale table. */
static const lws_retry_bo_t keepalive = {
    .secs_since_valid_ping = 30,
    .secs_since_valid_hangup = 70,
};

/* ---- lifecycle ---------------------------------------------------------------------------- */

ftwsc_client *ftwsc_create(const ftwsc_config *config, ftwsc_callbacks callbacks, char *err,
                           size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    g_log_level = config ? config->log_level : 0;
    int levels = 0;
    if (g_log_level >= 1)
        levels |= LLL_ERR;
    if (g_log_level >= 2)
        levels |= LLL_WARN | LLL_NOTICE;
    /* LLL_ERR is always collected (log_emit prints it only when asked) for error lines. */
    lws_set_log_level(levels | LLL_ERR, log_emit);

    const char *ca = config ? config->ca_path : NULL;
    if (ca && access(ca, R_OK) != 0) {
        snprintf(err, err_len, "cannot read CA file %s", ca);
        return NULL;
    }

    ftwsc_client *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    c->cb = callbacks;
    c->max_message = (config && config->max_message_bytes) ? config->max_message_bytes
                                                            : FTWSC_DEFAULT_MAX_MESSAGE;
    c->insecure = config && config->insecure;
    for (int i = 0; i < FTWSC_MAX_TIMERS; i++)
        c->timers[i].client = c;

    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info)); /* 4.1.6 has no lws_context_info_defaults */
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = protocols;
    info.user = c;
    info.timeout_secs = FTWSC_CONNECT_TIMEOUT_SECS;
    /* Needed for wss: lws only creates the vhost's client TLS context with this option. */
    info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.client_ssl_ca_filepath = ca; /* read during creation; NULL = system trust store */
    info.fd_limit_per_thread = 16;    /* the socket, a few watched fds, lws's own */

    g_last_lws_error[0] = '\0';
    c->ctx = lws_create_context(&info);
    if (!c->ctx) {
        if (ca)
            snprintf(err, err_len, "cannot use CA file %s%s%s", ca, g_last_lws_error[0] ? ": " : "",
                     g_last_lws_error);
        else
            snprintf(err, err_len, "cannot start libwebsockets%s%s", g_last_lws_error[0] ? ": " : "",
                     g_last_lws_error);
        free(c);
        return NULL;
    }
    c->vhost = lws_get_vhost_by_name(c->ctx, "default");
    if (!c->vhost) {
        snprintf(err, err_len, "libwebsockets made no default vhost");
        lws_context_destroy(c->ctx);
        free(c);
        return NULL;
    }
    return c;
}

int ftwsc_connect(ftwsc_client *c, const char *host, int port, const char *path, int tls, char *err,
                  size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!c || c->state != CONN_IDLE || c->report_pending) {
        snprintf(err, err_len, "a connection is still open");
        return -1;
    }
    if (!host || !*host || strlen(host) >= sizeof(c->address) || port < 1 || port > 65535 || !path ||
        path[0] != '/' || strlen(path) >= sizeof(c->path)) {
        snprintf(err, err_len, "unusable address");
        return -1;
    }
    snprintf(c->address, sizeof(c->address), "%s", host);
    snprintf(c->path, sizeof(c->path), "%s", path);
    /* Host header: IPv6 literals in brackets; the port unless it is the scheme's default. lws
     * strips ":port" again for SNI and the certificate host name check. */
    bool v6 = strchr(host, ':') != NULL;
    bool default_port = port == (tls ? 443 : 80);
    if (default_port)
        snprintf(c->host_header, sizeof(c->host_header), v6 ? "[%s]" : "%s", host);
    else
        snprintf(c->host_header, sizeof(c->host_header), v6 ? "[%s]:%d" : "%s:%d", host, port);

    c->established = false;
    c->peer_code = 0;
    c->close_code = 0;
    c->close_reason[0] = '\0';
    c->error[0] = '\0';
    c->rx_len = 0;
    g_last_lws_error[0] = '\0';

    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof(ci));
    ci.context = c->ctx;
    ci.vhost = c->vhost;
    ci.address = c->address;
    ci.port = port;
    ci.path = c->path;
    ci.host = c->host_header;
    ci.origin = NULL;   /* not a browser: the server admits clients without Origin */
    ci.protocol = NULL; /* no subprotocol: the server binds us to its default protocol */
    ci.local_protocol_name = "ftwsc-ws";
    ci.ietf_version_or_minus_one = -1;
    ci.retry_and_idle_policy = &keepalive;
    ci.pwsi = &c->wsi;
    if (tls) {
        ci.ssl_connection = LCCSCF_USE_SSL;
        if (c->insecure)
            ci.ssl_connection |= LCCSCF_ALLOW_SELFSIGNED | LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK |
                                 LCCSCF_ALLOW_EXPIRED | LCCSCF_ALLOW_INSECURE;
    }

    c->state = CONN_CONNECTING;
    struct lws *wsi = lws_client_connect_via_info(&ci);
    if (!wsi && c->state == CONN_CONNECTING) {
        /* Failed before lws had a wsi to report on (or it reported nothing): report it the
         * usual way, from the loop. */
        connection_ended(c, FTWSC_CLOSE_ABNORMAL,
                         g_last_lws_error[0] ? g_last_lws_error : "cannot start connecting (unknown host?)");
    }
    return 0;
}

/* ---- watched descriptors and timers --------------------------------------------------------- */

int ftwsc_watch_fd(ftwsc_client *c, int fd)
{
    if (!c || fd < 0)
        return -1;
    lws_sock_file_fd_type u;
    memset(&u, 0, sizeof(u));
    u.filefd = (lws_filefd_type)(intptr_t)fd;
    return lws_adopt_descriptor_vhost(c->vhost, LWS_ADOPT_RAW_FILE_DESC, u, "ftwsc-fd", NULL) ? 0 : -1;
}

static void timer_fired(lws_sorted_usec_list_t *sul)
{
    ftwsc_timer *t = lws_container_of(sul, ftwsc_timer, sul);
    t->armed = false; /* before the callback, so it may re-arm the same token */
    ftwsc_client *c = t->client;
    if (c->cb.on_timer && !c->destroying)
        c->cb.on_timer(c->cb.owner, t->token);
}

int ftwsc_timer_arm(ftwsc_client *c, uint64_t token, uint64_t delay_ms)
{
    if (!c)
        return -1;
    ftwsc_timer *slot = NULL;
    for (int i = 0; i < FTWSC_MAX_TIMERS; i++) {
        if (c->timers[i].armed && c->timers[i].token == token) {
            slot = &c->timers[i];
            break;
        }
        if (!c->timers[i].armed && !slot)
            slot = &c->timers[i];
    }
    if (!slot)
        return -1;
    slot->token = token;
    slot->armed = true;
    if (delay_ms > (uint64_t)1 << 40)
        delay_ms = (uint64_t)1 << 40; /* no overflow in microseconds */
    lws_sul_schedule(c->ctx, 0, &slot->sul, timer_fired, (lws_usec_t)(delay_ms ? delay_ms * LWS_US_PER_MS : 1));
    return 0;
}

void ftwsc_timer_cancel(ftwsc_client *c, uint64_t token)
{
    if (!c)
        return;
    for (int i = 0; i < FTWSC_MAX_TIMERS; i++) {
        if (c->timers[i].armed && c->timers[i].token == token) {
            lws_sul_cancel(&c->timers[i].sul);
            c->timers[i].armed = false;
        }
    }
}

/* ---- loop --------------------------------------------------------------------------------- */

int ftwsc_run(ftwsc_client *c)
{
    if (!c)
        return -1;
    c->stop = false;
    while (!c->stop) {
        if (lws_service(c->ctx, 0) < 0)
            break;
    }
    return 0;
}

void ftwsc_stop(ftwsc_client *c)
{
    if (!c)
        return;
    c->stop = true;
    lws_cancel_service(c->ctx); /* end the current poll wait at once */
}

void ftwsc_destroy(ftwsc_client *c)
{
    if (!c)
        return;
    c->destroying = true;
    for (int i = 0; i < FTWSC_MAX_TIMERS; i++)
        if (c->timers[i].armed)
            lws_sul_cancel(&c->timers[i].sul);
    lws_sul_cancel(&c->sul_report);
    lws_context_destroy(c->ctx);
    queue_clear(c);
    free(c->rx);
    free(c);
}
