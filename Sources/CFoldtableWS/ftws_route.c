/*
 * HTTP requests for paths the owner claims (an API, health checks): the HTTP seam.
 *
 * Every plain HTTP request enters here (LWS_CALLBACK_HTTP). Its framing is checked, its Host is
 * checked (allow_host, for static files and claimed paths alike), and the owner says whether it
 * answers the path (http_claims); if not, ftws_http.c serves a static file. A claimed request's
 * body is reassembled up to max_http_body_bytes, then the whole request goes to the owner
 * (on_http_request) under a number. The owner answers with ftws_http_respond whenever it is
 * ready, now or after a database commit; the answer is written on the connection's WRITEABLE
 * callbacks, one lws_write each, and the connection is then ready for its next request.
 *
 * Why C: lws hands the request over as callbacks on a wsi whose per-request storage it frees
 * and reallocates on its own schedule (each keep-alive transaction, each close). Swift holding a
 * pointer into that would dangle; so the C side keeps the request, maps its number to it, and an
 * answer for a number it no longer knows (the client left, the deadline passed) is refused.
 *
 * lws 4.1.6 facts this leans on (read in its source): POST, PUT and PATCH without a
 * Content-Length make lws expect a 100 MB body (see unframed_body for how that is answered),
 * and it does not decode chunked request bodies, so those are refused before any body is read;
 * a body is delivered as LWS_CALLBACK_HTTP_BODY chunks
 * and LWS_CALLBACK_HTTP_BODY_COMPLETION (also for a POST with "Content-Length: 0", which is
 * reported right after LWS_CALLBACK_HTTP); LWS_CALLBACK_HTTP_WRITEABLE comes only when lws holds
 * nothing of ours unsent; closing flushes what lws still holds first; lws_add_http_header_status
 * adds the security headers of LWS_SERVER_OPTION_HTTP_HEADERS_SECURITY_BEST_PRACTICES_ENFORCE to
 * every status line, so every answer here carries them.
 *
 * One more, measured: while a request waits for its answer lws neither reads its socket nor
 * leaves it alone (the wsi is "doing a transaction"), so a readable socket (the client's next
 * pipelined request, or its FIN) or input lws has buffered wakes the loop again and again: 100%
 * CPU until the answer. So input is paused (lws_rx_flow_control) while the owner thinks. It
 * cannot stay paused while the answer is written: a flow-controlled h1 wsi gets no
 * WRITEABLE either. The costs: a client that closes politely while its request waits is noticed
 * when its answer is written or at the answer deadline (a reset is noticed at once); and while a
 * large answer waits for a client that stopped reading but sent more, the loop can spin until
 * the answer is out or the stall deadline drops the client.
 *
 * Sits on ftws_http.c (header helpers, static files) and ftws_conn.c (peer address).
 */
#include "ftws_internal.h"

#include <CFoldtableWSCommon.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* An answer the owner has not given after http_answer_ms (config; 0 = this) becomes a 503: a
 * request must not hold its connection and memory forever because of a lost completion. */
#define FTWS_HTTP_ANSWER_MS_DEFAULT 30000
/* A claimed request's whole body must arrive within this many seconds of its headers. lws limits
 * each gap between chunks to its own timeout (5 s); this limits the sum, so a body trickled in a
 * byte at a time cannot hold its buffer indefinitely. */
#define FTWS_HTTP_BODY_SECS 30
/* The window over which an answer's send rate is averaged, unless http_send_window_secs or
 * send_stall_secs is set (then that). An answer that makes no progress for two windows (the
 * client stopped reading) drops the connection. */
#define FTWS_HTTP_STALL_SECS_DEFAULT 30
/* Body bytes handed to lws per WRITEABLE, copied out of the body into the request's own chunk
 * buffer (the body may be shared). lws passes what the kernel takes and keeps the rest; a
 * bounded chunk keeps that copy small for large answers. */
#define FTWS_HTTP_CHUNK_BYTES ((size_t)65536)
/* The largest header block an owner's answer may add, and the most query arguments kept. */
#define FTWS_HTTP_MAX_EXTRA_HEADERS 8192
#define FTWS_HTTP_MAX_QUERY_ARGS 64
/* Every copied header or argument fits lws's header budget (4096 bytes by default). */
#define FTWS_HTTP_MAX_FIELD 4096

/* The request headers handed to the owner: what an API needs (auth, content negotiation,
 * conditional requests, idempotent retries, the proxy's client address). lws knows most as
 * tokens; the others are custom headers (lowercase name with its colon, as lws stores them). */
static const struct {
    const char *name;
    int token;           /* lws token, or -1 for a custom header */
    const char *custom;  /* "name:" when token is -1 */
} FTWS_HTTP_HEADERS[] = {
    {"host", WSI_TOKEN_HOST, NULL},
    {"origin", WSI_TOKEN_ORIGIN, NULL},
    {"authorization", WSI_TOKEN_HTTP_AUTHORIZATION, NULL},
    {"content-type", WSI_TOKEN_HTTP_CONTENT_TYPE, NULL},
    {"content-length", WSI_TOKEN_HTTP_CONTENT_LENGTH, NULL},
    {"accept", WSI_TOKEN_HTTP_ACCEPT, NULL},
    {"if-none-match", WSI_TOKEN_HTTP_IF_NONE_MATCH, NULL},
    {"if-match", WSI_TOKEN_HTTP_IF_MATCH, NULL},
    {"if-modified-since", WSI_TOKEN_HTTP_IF_MODIFIED_SINCE, NULL},
    {"x-forwarded-for", WSI_TOKEN_X_FORWARDED_FOR, NULL},
    {"user-agent", WSI_TOKEN_HTTP_USER_AGENT, NULL},
    {"idempotency-key", -1, "idempotency-key:"},
    {"x-request-id", -1, "x-request-id:"},
};
#define FTWS_HTTP_HEADER_COUNT (sizeof(FTWS_HTTP_HEADERS) / sizeof(FTWS_HTTP_HEADERS[0]))

/* The methods lws 4.1.6 parses, by the token its request line lands in. */
static const struct {
    enum lws_token_indexes token;
    const char *name;
} FTWS_HTTP_METHODS[] = {
    {WSI_TOKEN_GET_URI, "GET"},         {WSI_TOKEN_HEAD_URI, "HEAD"},
    {WSI_TOKEN_POST_URI, "POST"},       {WSI_TOKEN_PUT_URI, "PUT"},
    {WSI_TOKEN_PATCH_URI, "PATCH"},     {WSI_TOKEN_DELETE_URI, "DELETE"},
    {WSI_TOKEN_OPTIONS_URI, "OPTIONS"}, {WSI_TOKEN_CONNECT, "CONNECT"},
};

struct ftws_http_req {
    ftws_server *server;
    struct lws *wsi;
    uint64_t id;                   /* the owner's name for it while WAITING; else 0 */
    ftws_http_req *hash_next;      /* chain in server->reqs while id != 0 */
    ftws_http_req *prev, *next;    /* server->req_list: every request in flight */
    ftws_req_state state;
    lws_sorted_usec_list_t sul;    /* the body deadline, then the answer deadline */

    /* The request, copied while lws still holds its headers; freed once the owner has it. */
    const char *method;
    bool head;
    char *path;
    char *query[FTWS_HTTP_MAX_QUERY_ARGS];
    size_t query_count;
    const char *header_names[FTWS_HTTP_HEADER_COUNT];
    char *header_values[FTWS_HTTP_HEADER_COUNT];
    size_t header_count;
    char peer[64];
    uint8_t *body;
    size_t body_len, body_cap;

    /* The answer: LWS_PRE + status line and headers, then the body a chunk at a time. The body
     * is ours (a copy, released with free) or shared (released through the owner's callback). */
    uint8_t *head_buf;
    size_t head_len;
    const uint8_t *out;
    size_t out_len, out_sent;
    void *out_keeper;
    void (*out_release)(void *keeper);
    uint8_t *chunk;                /* LWS_PRE + one chunk: what each lws_write is handed */
    lws_usec_t window_start_us;    /* the send-rate window (see ftws__route_writeable) */
    size_t window_bytes;
    bool headers_sent;
    bool close_after;              /* the body may still be arriving, or framing was bad: close */
    /* A POST, PUT or PATCH with neither Content-Length nor Transfer-Encoding (`curl -X POST`).
     * HTTP/1.1 says such a request has no body (RFC 9112 §6.3), so the owner gets it with an
     * empty one. But lws 4.1.6 has already set itself to read a 100 MB body (rx_content_remain,
     * which no public call resets): lws_http_transaction_completed would then discard the
     * client's next requests as that body. So the answer says "Connection: close" and the
     * connection closes once it is out; the client opens a new one for its next request. */
    bool unframed_body;
    bool rx_paused;                /* lws_rx_flow_control is holding its input (see the top) */
};

/* Pause or resume a request's input (see the top for why). */
static void pause_input(ftws_http_req *r, bool pause)
{
    if (r->rx_paused == pause)
        return;
    r->rx_paused = pause;
    lws_rx_flow_control(r->wsi, pause ? 0 : 1);
}

/* ---- bookkeeping ------------------------------------------------------------------------------ */

static size_t bucket_of(uint64_t id)
{
    return (size_t)(id * 0x9E3779B97F4A7C15ull >> 56) & (FTWS_REQ_BUCKETS - 1);
}

static ftws_http_req **find_slot(ftws_server *s, uint64_t id)
{
    ftws_http_req **pp = &s->reqs[bucket_of(id)];
    while (*pp && (*pp)->id != id)
        pp = &(*pp)->hash_next;
    return pp;
}

/* The id is spent: a later ftws_http_respond with it finds nothing. */
static void unregister(ftws_http_req *r)
{
    if (!r->id)
        return;
    ftws_http_req **pp = find_slot(r->server, r->id);
    if (*pp == r)
        *pp = r->hash_next;
    r->hash_next = NULL;
    r->id = 0;
}

static ftws_http_req *req_create(ftws_server *s, struct lws *wsi)
{
    ftws_http_req *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->server = s;
    r->wsi = wsi;
    r->next = s->req_list;
    if (s->req_list)
        s->req_list->prev = r;
    s->req_list = r;
    s->req_count++;
    return r;
}

/* What the owner was given: no longer needed once on_http_request returned. */
static void free_request_copy(ftws_http_req *r)
{
    free(r->path);
    r->path = NULL;
    for (size_t i = 0; i < r->query_count; i++)
        free(r->query[i]);
    r->query_count = 0;
    for (size_t i = 0; i < r->header_count; i++)
        free(r->header_values[i]);
    r->header_count = 0;
    free(r->body);
    r->body = NULL;
    r->body_len = r->body_cap = 0;
}

/* Let go of the answer's body and chunk buffer (the owner's release for a shared body). */
static void release_body(ftws_http_req *r)
{
    if (r->out_release)
        r->out_release(r->out_keeper);
    r->out_release = NULL;
    r->out_keeper = NULL;
    r->out = NULL;
    r->out_len = r->out_sent = 0;
    free(r->chunk);
    r->chunk = NULL;
}

static void free_copy(void *keeper) { free(keeper); }

static void req_destroy(ftws_http_req *r)
{
    ftws_server *s = r->server;
    unregister(r);
    lws_sul_cancel(&r->sul);
    if (r->prev)
        r->prev->next = r->next;
    else
        s->req_list = r->next;
    if (r->next)
        r->next->prev = r->prev;
    s->req_count--;
    free_request_copy(r);
    free(r->head_buf);
    release_body(r);
    free(r);
    ftws__check_done(s);
}

/* ---- answers ------------------------------------------------------------------------------ */

static bool is_token_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Walks the owner's header block ("Name: value" lines split by CRLF or LF). With wsi NULL it
 * only checks; otherwise it also appends each header with lws's writer. -1 when a line is not a
 * header, a value holds a control byte (no response splitting), a name is one the C side owns
 * (the message framing), the block is too big, or the buffer is full. */
static int walk_headers(struct lws *wsi, const char *block, unsigned char **p, unsigned char *end,
                        bool *has_cache_control)
{
    if (!block)
        return 0;
    if (strlen(block) > FTWS_HTTP_MAX_EXTRA_HEADERS)
        return -1;
    const char *line = block;
    while (*line) {
        const char *eol = line;
        while (*eol && *eol != '\r' && *eol != '\n')
            eol++;
        if (eol > line) {
            const char *colon = line;
            while (colon < eol && is_token_char((unsigned char)*colon))
                colon++;
            size_t name_len = (size_t)(colon - line);
            if (!name_len || name_len > 64 || colon == eol || *colon != ':')
                return -1;
            const char *value = colon + 1;
            while (value < eol && (*value == ' ' || *value == '\t'))
                value++;
            const char *value_end = eol;
            while (value_end > value && (value_end[-1] == ' ' || value_end[-1] == '\t'))
                value_end--;
            for (const char *v = value; v < value_end; v++)
                if (((unsigned char)*v < 0x20 && *v != '\t') || *v == 0x7f)
                    return -1;
            char name[66];
            memcpy(name, line, name_len);
            name[name_len] = '\0';
            if (!strcasecmp(name, "content-length") || !strcasecmp(name, "transfer-encoding") ||
                !strcasecmp(name, "connection"))
                return -1;
            if (!strcasecmp(name, "cache-control"))
                *has_cache_control = true;
            if (wsi) {
                name[name_len] = ':';
                name[name_len + 1] = '\0';
                if (lws_add_http_header_by_name(wsi, (const unsigned char *)name,
                                                (const unsigned char *)value,
                                                (int)(value_end - value), p, end))
                    return -1;
            }
        }
        line = eol;
        if (*line == '\r')
            line++;
        if (*line == '\n')
            line++;
    }
    return 0;
}

/* Prepares the answer (status line, security headers, the owner's headers, framing) and asks
 * for WRITEABLE. 204 and 304 carry no body and no Content-Length; HEAD gets the length of the
 * body it does not get. Returns -1 when the headers are unusable or memory ran out (nothing is
 * prepared then). */
static int prepare_answer(ftws_http_req *r, unsigned int status, const char *headers,
                          const uint8_t *body, size_t len, bool close_after, void *keeper,
                          void (*release)(void *keeper))
{
    struct lws *wsi = r->wsi;
    close_after = close_after || r->unframed_body;
    bool has_cache_control = false;
    if (walk_headers(NULL, headers, NULL, NULL, &has_cache_control))
        return -1;
    bool bodyless = status == 204 || status == 304;
    if (bodyless)
        len = 0;

    /* Status line, lws's security headers (a strict CSP is the longest, about 300 bytes), the
     * server name and framing fit in 2 KiB; the owner's lines grow by ": " and CRLF at most. */
    size_t cap = LWS_PRE + 2048 + (headers ? 2 * strlen(headers) : 0);
    uint8_t *buf = malloc(cap);
    if (!buf)
        return -1;
    unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + cap;
    if (lws_add_http_header_status(wsi, status, &p, end) ||
        walk_headers(wsi, headers, &p, end, &has_cache_control) ||
        /* An API answer is about now: no cache keeps it unless the owner says so. */
        (!has_cache_control &&
         lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL,
                                      (const unsigned char *)"no-store", 8, &p, end)) ||
        (!bodyless && lws_add_http_header_content_length(wsi, len, &p, end)) ||
        (close_after && lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION,
                                                     (const unsigned char *)"close", 5, &p, end)) ||
        lws_finalize_http_header(wsi, &p, end)) {
        free(buf);
        return -1;
    }
    bool with_body = len && !r->head;
    size_t chunk = len < FTWS_HTTP_CHUNK_BYTES ? len : FTWS_HTTP_CHUNK_BYTES;
    uint8_t *chunk_buf = NULL, *copy = NULL;
    if (with_body && (!(chunk_buf = malloc(LWS_PRE + chunk)) || (!release && !(copy = malloc(len))))) {
        free(chunk_buf);
        free(buf);
        return -1;
    }
    release_body(r);
    if (with_body && release) {
        r->out = body;
        r->out_keeper = keeper;
        r->out_release = release;
    } else if (with_body) {
        memcpy(copy, body, len);
        r->out = copy;
        r->out_keeper = copy;
        r->out_release = free_copy;
    } else if (release) {
        release(keeper); /* taken (this returns 0), but not needed: HEAD, 204, 304 */
    }
    r->chunk = chunk_buf;
    r->head_buf = buf;
    r->head_len = (size_t)(p - start);
    r->out_len = with_body ? len : 0;
    r->out_sent = 0;
    r->window_start_us = 0;
    r->window_bytes = 0;
    r->headers_sent = false;
    r->close_after = close_after;
    r->state = FTWS_REQ_WRITING;
    lws_sul_cancel(&r->sul);
    pause_input(r, false); /* a paused h1 wsi would get no WRITEABLE */
    lws_callback_on_writable(wsi);
    return 0;
}

/* An error in the API's JSON shape, {"error":{"code":...,"message":...}}, from the C side
 * itself (code and message are our own literals: nothing to escape). When even that cannot be
 * prepared, the connection is dropped. */
static void answer_error(ftws_http_req *r, unsigned int status, const char *code, const char *message,
                         bool close_after)
{
    char body[256];
    int n = snprintf(body, sizeof(body), "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}", code, message);
    if (n < 0 || (size_t)n >= sizeof(body) ||
        prepare_answer(r, status, "Content-Type: application/json", (const uint8_t *)body, (size_t)n,
                       close_after, NULL, NULL))
        lws_set_timeout(r->wsi, FTWS_TIMEOUT_REASON, LWS_TO_KILL_ASYNC);
}

/* A claimed request refused before the owner sees it (bad framing, too big, shutting down).
 * Its body may be arriving still, so the connection closes after the answer. */
static int refuse(ftws_server *s, struct lws *wsi, ftws_http_req **slot, unsigned int status,
                  const char *code, const char *message)
{
    ftws_http_req *r = req_create(s, wsi);
    if (!r)
        return -1;
    *slot = r;
    r->head = lws_hdr_total_length(wsi, WSI_TOKEN_HEAD_URI) > 0;
    answer_error(r, status, code, message, true);
    return 0;
}

/* The 413 message names the limit and the setting that raises it: a client (or the person
 * reading its error) learns what to change instead of guessing. Both binaries built on this file
 * (foldtabled, foldtable-echo) call the setting --max-http-body-bytes. */
static const char *too_large_message(ftws_server *s, char *buf, size_t len)
{
    int n = snprintf(buf, len,
                     "the request body is over the server's limit of %zu bytes (--max-http-body-bytes)",
                     s->cfg.max_http_body_bytes);
    return n < 0 || (size_t)n >= len ? "the request body is over the server's limit" : buf;
}

int ftws_http_respond(ftws_server *server, uint64_t request_id, unsigned int status, const char *headers,
                      const uint8_t *body, size_t len)
{
    return ftws_http_respond_shared(server, request_id, status, headers, body, len, NULL, NULL);
}

int ftws_http_respond_shared(ftws_server *server, uint64_t request_id, unsigned int status,
                             const char *headers, const uint8_t *body, size_t len, void *keeper,
                             void (*release)(void *keeper))
{
    if (!server || !request_id || (!body && len))
        return -1;
    ftws_http_req *r = *find_slot(server, request_id);
    if (!r || r->state != FTWS_REQ_WAITING)
        return -1;
    unregister(r);
    if (status < 200 || status > 599 ||
        prepare_answer(r, status, headers, body, len, false, keeper, release)) {
        /* Our own bug (the owner's answer), never the client's doing: worth an error line. */
        lwsl_err("event=http_answer_unusable status=%u sent=500\n", status);
        answer_error(r, 500, "internal", "the server could not form its answer", false);
        return -2;
    }
    return 0;
}

/* ---- deadlines ----------------------------------------------------------------------------------- */

static void deadline_fired(lws_sorted_usec_list_t *sul)
{
    ftws_http_req *r = lws_container_of(sul, ftws_http_req, sul);
    ftws_server *s = r->server;
    if (r->state == FTWS_REQ_BODY) {
        answer_error(r, 408, "timeout", "the request body did not arrive in time", true);
    } else if (r->state == FTWS_REQ_WAITING) {
        uint64_t id = r->id;
        unregister(r);
        answer_error(r, 503, "unavailable", "no answer in time; retry later", false);
        if (!s->destroying && s->cb.on_http_abandoned)
            s->cb.on_http_abandoned(s->cb.owner, id);
    }
}

static void arm_deadline(ftws_http_req *r, lws_usec_t us)
{
    lws_sul_schedule(r->server->ctx, 0, &r->sul, deadline_fired, us);
}

/* ---- the request ------------------------------------------------------------------------------- */

static const char *method_of(struct lws *wsi)
{
    for (size_t i = 0; i < sizeof(FTWS_HTTP_METHODS) / sizeof(FTWS_HTTP_METHODS[0]); i++)
        if (lws_hdr_total_length(wsi, FTWS_HTTP_METHODS[i].token) > 0)
            return FTWS_HTTP_METHODS[i].name;
    return NULL;
}

/* The request's framing, checked before anything else reads it: any Transfer-Encoding gets 411
 * (lws 4.1.6 would take chunk sizes for body bytes, or for the next request), a Content-Length
 * that is not one plain decimal number gets 400 (two different ones arrive joined by a comma).
 * *length is -1 when there is none. */
static unsigned int check_framing(struct lws *wsi, long long *length)
{
    *length = -1;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0)
        return HTTP_STATUS_LENGTH_REQUIRED;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0)
        return 0;
    char text[64];
    bool too_long = false;
    const char *v = ftws__header(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH, text, sizeof(text), &too_long);
    if (!v)
        return HTTP_STATUS_BAD_REQUEST;
    while (*v == ' ' || *v == '\t')
        v++;
    long long n = 0;
    const char *d = v;
    for (; *d >= '0' && *d <= '9'; d++)
        n = n > (LLONG_MAX - 9) / 10 ? LLONG_MAX : n * 10 + (*d - '0'); /* saturates: still too big */
    while (*d == ' ' || *d == '\t')
        d++;
    if (d == v || *d)
        return HTTP_STATUS_BAD_REQUEST;
    *length = n;
    return 0;
}

/* Copies what the owner will see while lws still holds the headers (lws may drop its header
 * table once the body starts). -1 when out of memory. */
static int copy_request(ftws_http_req *r, const char *uri)
{
    struct lws *wsi = r->wsi;
    char buf[FTWS_HTTP_MAX_FIELD];
    if (!(r->path = strdup(uri)))
        return -1;
    for (int i = 0; r->query_count < FTWS_HTTP_MAX_QUERY_ARGS; i++) {
        int n = lws_hdr_copy_fragment(wsi, buf, sizeof(buf), WSI_TOKEN_HTTP_URI_ARGS, i);
        if (n < 0)
            break;
        if (!n)
            continue; /* "a=1&&b=2": an empty argument */
        if (!(r->query[r->query_count] = strdup(buf)))
            return -1;
        r->query_count++;
    }
    for (size_t i = 0; i < FTWS_HTTP_HEADER_COUNT; i++) {
        int n;
        if (FTWS_HTTP_HEADERS[i].token >= 0) {
            enum lws_token_indexes token = (enum lws_token_indexes)FTWS_HTTP_HEADERS[i].token;
            if (lws_hdr_total_length(wsi, token) <= 0)
                continue;
            n = lws_hdr_copy(wsi, buf, sizeof(buf), token);
        } else {
            const char *name = FTWS_HTTP_HEADERS[i].custom;
            if (lws_hdr_custom_length(wsi, name, (int)strlen(name)) < 0)
                continue;
            n = lws_hdr_custom_copy(wsi, buf, sizeof(buf), name, (int)strlen(name));
        }
        if (n < 0)
            continue; /* longer than the header budget: cannot happen, skip rather than cut */
        const char *value = buf;
        while (*value == ' ' || *value == '\t')
            value++;
        if (!(r->header_values[r->header_count] = strdup(value)))
            return -1;
        r->header_names[r->header_count++] = FTWS_HTTP_HEADERS[i].name;
    }
    ftws__peer_ip(wsi, r->peer, sizeof(r->peer));
    return 0;
}

/* Hands the whole request to the owner under a fresh id; the answer deadline starts. */
static int dispatch(ftws_server *s, ftws_http_req *r)
{
    lws_sul_cancel(&r->sul);
    if (!s->cb.on_http_request) {
        answer_error(r, 404, "not_found", "nothing is served here", false);
        free_request_copy(r);
        return 0;
    }
    r->id = ++s->next_req_id;
    ftws_http_req **slot = find_slot(s, r->id);
    r->hash_next = *slot;
    *slot = r;
    r->state = FTWS_REQ_WAITING;
    /* lws's own request timeout (timeout_secs, 5 s, armed before LWS_CALLBACK_HTTP) must not cut
     * a slower answer short: the answer deadline replaces it. */
    lws_set_timeout(r->wsi, NO_PENDING_TIMEOUT, 0);
    pause_input(r, true); /* no spinning on a readable socket while the owner thinks */
    int ms = s->cfg.http_answer_ms > 0 ? s->cfg.http_answer_ms : FTWS_HTTP_ANSWER_MS_DEFAULT;
    arm_deadline(r, (lws_usec_t)ms * LWS_US_PER_MS);

    ftws_http_request view = {
        .id = r->id,
        .method = r->method,
        .path = r->path,
        .query = (const char *const *)r->query,
        .query_count = r->query_count,
        .header_names = r->header_names,
        .header_values = (const char *const *)r->header_values,
        .header_count = r->header_count,
        .peer = r->peer,
        .body = r->body_len ? r->body : NULL,
        .body_len = r->body_len,
    };
    /* The owner may answer inside this call (ftws_http_respond only prepares and asks for
     * WRITEABLE); nothing in it can free r. */
    s->cb.on_http_request(s->cb.owner, &view);
    free_request_copy(r);
    return 0;
}

int ftws__route_http(ftws_server *s, struct lws *wsi, ftws_http_req **slot, const char *uri, size_t len)
{
    /* One request per transaction; a leftover (which lws should never leave) is forgotten. */
    ftws__route_gone(s, slot);

    /* lws stores a decoded %00 in the URI without counting it in len, so "/%00../x" arrives as
     * "/" NUL "../x" with len 5: a NUL before len means the path was not what it seems. */
    if (!uri || strnlen(uri, len) != len)
        return ftws__http_status(wsi, HTTP_STATUS_BAD_REQUEST, false);

    bool claimed = s->cb.http_claims && s->cb.http_claims(s->cb.owner, uri);

    /* lws 4.1.6 decodes %xx while it parses the request line and takes a decoded %0A or %0D
     * for the end of that line (parsers.c, check_eol): the target is cut there and the rest of
     * the line, "HTTP/1.1" with it, is lost. After %0A it even becomes the name of an unknown
     * header running on to the next colon, which swallows the Host header, so such a request
     * met the Host check below and got a baffling 421; after %0D the Host survives and the cut
     * target was served as if it were the whole one. lws cannot be told to leave escapes alone
     * and keeps no copy of the raw line, so the bytes are gone before this callback: what is
     * left is to refuse clearly. The sign is a request line without its HTTP version, which
     * every HTTP/1.x request has (this server speaks nothing else: ALPN offers only 1.1). */
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP) <= 0) {
        if (claimed)
            return refuse(s, wsi, slot, 400, "bad_request",
                          "the request line ended early: a URL cannot carry a line break (%0A, %0D) here");
        return ftws__http_status(wsi, HTTP_STATUS_BAD_REQUEST, false);
    }

    if (s->cb.allow_host) {
        char host[512];
        bool too_long = false;
        const char *h = ftws__header(wsi, WSI_TOKEN_HOST, host, sizeof(host), &too_long);
        if (too_long || !s->cb.allow_host(s->cb.owner, h)) {
            if (claimed)
                return refuse(s, wsi, slot, 421, "misdirected", "this server does not answer to that Host");
            return ftws__http_status(wsi, 421, true); /* Misdirected Request */
        }
    }

    long long length;
    unsigned int bad = check_framing(wsi, &length);
    const char *method = method_of(wsi);
    bool post = method && !strcmp(method, "POST");
    /* No Content-Length on a method lws reads a body for: no body, but lws waits for one (see
     * unframed_body), so the connection cannot be reused after the answer. */
    bool unframed = !bad && length < 0 && (post || (method && (!strcmp(method, "PUT") || !strcmp(method, "PATCH"))));
    if (!claimed) {
        /* Static files take no body: lws would read one as the next request. So a request with
         * one is refused and its connection closed (405 for a method files do not take). */
        if (!bad && length > 0)
            bad = lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) || lws_hdr_total_length(wsi, WSI_TOKEN_HEAD_URI)
                      ? HTTP_STATUS_REQ_ENTITY_TOO_LARGE
                      : HTTP_STATUS_METHOD_NOT_ALLOWED;
        if (bad)
            return ftws__http_status(wsi, bad, false);
        /* Files take no POST (405), and lws would then wait for a body that never comes. */
        return unframed ? ftws__http_status(wsi, HTTP_STATUS_METHOD_NOT_ALLOWED, false)
                        : ftws__http_serve_file(s, wsi, uri, len);
    }
    if (bad == HTTP_STATUS_LENGTH_REQUIRED)
        return refuse(s, wsi, slot, bad, "length_required", "send the body with a Content-Length, not chunked");
    if (bad)
        return refuse(s, wsi, slot, bad, "bad_request", "the Content-Length is not a number");
    if (ftws__stopping(s))
        return refuse(s, wsi, slot, 503, "unavailable", "the server is shutting down; retry later");

    if (!method)
        return refuse(s, wsi, slot, 400, "bad_request", "unknown method");
    if (length > (long long)s->cfg.max_http_body_bytes)
    {
        char message[128];
        return refuse(s, wsi, slot, HTTP_STATUS_REQ_ENTITY_TOO_LARGE, "too_large",
                      too_large_message(s, message, sizeof(message)));
    }

    ftws_http_req *r = req_create(s, wsi);
    if (!r)
        return -1;
    *slot = r;
    r->method = method;
    r->head = !strcmp(method, "HEAD");
    r->unframed_body = unframed;
    if (copy_request(r, uri))
        return -1; /* out of memory: close; the close callbacks free r */

    /* lws delivers a body when Content-Length is above 0, and reports a POST's explicit 0 as an
     * empty body right after this callback; everything else has none. */
    if (length > 0 || (post && length == 0)) {
        r->state = FTWS_REQ_BODY;
        arm_deadline(r, (lws_usec_t)FTWS_HTTP_BODY_SECS * LWS_US_PER_SEC);
        char expect[32];
        bool too_long = false;
        const char *e = ftws__header(wsi, WSI_TOKEN_HTTP_EXPECT, expect, sizeof(expect), &too_long);
        if (e && !strcasecmp(e, "100-continue") && length > 0) {
            /* The client waits for this before it sends the body (curl does, for big ones). */
            static const char go_on[] = "HTTP/1.1 100 Continue\r\n\r\n";
            unsigned char buf[LWS_PRE + sizeof(go_on)];
            memcpy(buf + LWS_PRE, go_on, sizeof(go_on) - 1);
            if (lws_write(wsi, buf + LWS_PRE, sizeof(go_on) - 1, LWS_WRITE_HTTP_HEADERS) < 0)
                return -1;
        }
        return 0;
    }
    return dispatch(s, r);
}

int ftws__route_body(ftws_server *s, ftws_http_req *r, const uint8_t *in, size_t len)
{
    if (r->state != FTWS_REQ_BODY || !len)
        return 0; /* refused already: lws reads the rest, it is dropped */
    size_t cap = s->cfg.max_http_body_bytes;
    if (len > cap - r->body_len) {
        /* Content-Length was checked against the cap, so lws cannot deliver more; still. */
        char message[128];
        answer_error(r, HTTP_STATUS_REQ_ENTITY_TOO_LARGE, "too_large", too_large_message(s, message, sizeof(message)), true);
        return 0;
    }
    if (ftws_buffer_reserve(&r->body, &r->body_cap, r->body_len + len, 16384, cap))
        return -1; /* out of memory: close */
    memcpy(r->body + r->body_len, in, len);
    r->body_len += len;
    return 0;
}

int ftws__route_body_done(ftws_server *s, ftws_http_req *r)
{
    if (r->state != FTWS_REQ_BODY)
        return 0;
    return dispatch(s, r);
}

/* The send-rate check, on each WRITEABLE of an answer. lws's timeout is armed for two windows
 * when the answer starts and again each time a window closes, not on every write: a client that
 * takes a few bytes now and then no longer keeps its answer alive by each small write. When a
 * window closes (the first WRITEABLE a window or more after it opened), the bytes handed over in
 * it must average http_min_send_bytes_per_sec; a client below that is dropped, and one that
 * takes nothing at all gets no WRITEABLE and meets the timeout. Returns -1 to drop. */
static int check_send_rate(ftws_server *s, ftws_http_req *r)
{
    int window = s->cfg.http_send_window_secs > 0 ? s->cfg.http_send_window_secs
                 : s->cfg.send_stall_secs > 0      ? s->cfg.send_stall_secs
                                                   : FTWS_HTTP_STALL_SECS_DEFAULT;
    lws_usec_t now = lws_now_usecs();
    if (r->window_start_us && now - r->window_start_us < (lws_usec_t)window * LWS_US_PER_SEC)
        return 0;
    if (r->window_start_us && s->cfg.http_min_send_bytes_per_sec) {
        lws_usec_t elapsed = now - r->window_start_us;
        /* bytes * 10^6 / elapsed in floating point: no overflow for any size or time. */
        double rate = (double)r->window_bytes * (double)LWS_US_PER_SEC / (double)elapsed;
        if (rate < (double)s->cfg.http_min_send_bytes_per_sec) {
            lwsl_warn("event=http_slow_reader peer=%s bytes_per_sec=%.0f min=%zu sent=%zu of=%zu\n",
                      r->peer, rate, s->cfg.http_min_send_bytes_per_sec, r->out_sent, r->out_len);
            return -1;
        }
    }
    r->window_start_us = now;
    r->window_bytes = 0;
    lws_set_timeout(r->wsi, FTWS_TIMEOUT_REASON, 2 * window);
    return 0;
}

/* One lws_write per WRITEABLE: the headers, then the body in chunks. Once all is handed over,
 * the connection either closes (lws flushes what it still holds first) or is made ready for the
 * next request (lws_http_transaction_completed: keep-alive, or close for HTTP/1.0 and
 * "Connection: close"). */
int ftws__route_writeable(ftws_server *s, ftws_http_req **slot)
{
    ftws_http_req *r = *slot;
    if (!r || r->state != FTWS_REQ_WRITING)
        return 0;
    struct lws *wsi = r->wsi;
    if (check_send_rate(s, r))
        return -1;

    if (!r->headers_sent) {
        if (lws_write(wsi, r->head_buf + LWS_PRE, r->head_len, LWS_WRITE_HTTP_HEADERS) < 0)
            return -1;
        r->headers_sent = true;
        free(r->head_buf);
        r->head_buf = NULL;
    } else if (r->out_sent < r->out_len) {
        size_t left = r->out_len - r->out_sent;
        size_t chunk = left < FTWS_HTTP_CHUNK_BYTES ? left : FTWS_HTTP_CHUNK_BYTES;
        /* Copied into our own buffer with its LWS_PRE headroom: the body may be shared with
         * other answers, and lws may use the bytes in front of what it is handed. */
        memcpy(r->chunk + LWS_PRE, r->out + r->out_sent, chunk);
        if (lws_write(wsi, r->chunk + LWS_PRE, chunk,
                      chunk == left ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < 0)
            return -1;
        r->out_sent += chunk;
        r->window_bytes += chunk;
    }
    if (r->out_sent < r->out_len) {
        lws_callback_on_writable(wsi);
        return 0;
    }
    bool close_after = r->close_after;
    *slot = NULL;
    req_destroy(r);
    if (close_after)
        return -1;
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

void ftws__route_gone(ftws_server *s, ftws_http_req **slot)
{
    ftws_http_req *r = *slot;
    if (!r)
        return;
    *slot = NULL;
    uint64_t abandoned = r->state == FTWS_REQ_WAITING ? r->id : 0;
    req_destroy(r);
    if (abandoned && !s->destroying && s->cb.on_http_abandoned)
        s->cb.on_http_abandoned(s->cb.owner, abandoned);
}

void ftws__route_kill_all(ftws_server *s)
{
    for (ftws_http_req *r = s->req_list; r; r = r->next)
        lws_set_timeout(r->wsi, FTWS_TIMEOUT_REASON, LWS_TO_KILL_ASYNC);
}
