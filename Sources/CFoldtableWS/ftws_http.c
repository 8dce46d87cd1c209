/*
 * HTTP side: static files from web_root, their validators and CORS headers, the gate in front of
 * the WebSocket upgrade, and the small header helpers ftws_route.c uses too. Calls nothing above
 * it.
 *
 * Why not an lws mount: lws 4.1.6's mount serving (lws_http_serve) opens origin + path with
 * a plain open(), so a symlink inside the web root pointing elsewhere is followed and served.
 * Here every request is resolved with realpath() and must stay under the (resolved) web root;
 * lws_serve_http_file then streams the already-resolved path. lws has decoded %xx and folded
 * "/../", "//" and "/./" before we see the URI; we still refuse dot segments, control and
 * non-ASCII bytes ourselves rather than rely on that.
 */
#include "ftws_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

int ftws__http_status(struct lws *wsi, unsigned int code, bool keep_alive)
{
    if (lws_return_http_status(wsi, code, NULL))
        return -1;
    if (!keep_alive)
        return -1; /* lws flushes what it holds of the answer, then closes */
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

static int http_status(struct lws *wsi, unsigned int code)
{
    return ftws__http_status(wsi, code, true);
}

static const char *mime_for(const char *path)
{
    static const struct { const char *ext, *type; } types[] = {
        { "html", "text/html; charset=utf-8" },
        { "htm", "text/html; charset=utf-8" },
        { "js", "text/javascript; charset=utf-8" },
        { "mjs", "text/javascript; charset=utf-8" },
        { "css", "text/css; charset=utf-8" },
        { "json", "application/json" },
        { "map", "application/json" },
        { "svg", "image/svg+xml" },
        { "png", "image/png" },
        { "jpg", "image/jpeg" },
        { "jpeg", "image/jpeg" },
        { "gif", "image/gif" },
        { "webp", "image/webp" },
        { "ico", "image/x-icon" },
        { "txt", "text/plain; charset=utf-8" },
        { "wasm", "application/wasm" },
        { "woff", "font/woff" },
        { "woff2", "font/woff2" },
        { "webmanifest", "application/manifest+json" },
    };
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(path, '.');
    if (dot && (!slash || dot > slash))
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
            if (!strcasecmp(dot + 1, types[i].ext))
                return types[i].type;
    return "application/octet-stream";
}

/* The URI must look like a plain file path: printable ASCII, no backslash, no empty or
 * dot-leading segment (which rules out "..", "." and dotfiles such as /.git/config). */
static bool uri_is_plain(const char *uri, size_t len)
{
    if (!len || uri[0] != '/' || len >= PATH_MAX / 2)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)uri[i];
        if (c < 0x20 || c >= 0x7f || c == '\\')
            return false;
        if (c == '/' && i + 1 < len && (uri[i + 1] == '/' || uri[i + 1] == '.'))
            return false;
    }
    return true;
}

/* realpath() must land inside the web root (which is itself already resolved). */
static bool resolve_inside(ftws_server *s, const char *path, char *out)
{
    if (!realpath(path, out))
        return false;
    if (s->web_root_len == 1) /* web root "/" */
        return true;
    return !strncmp(out, s->web_root, s->web_root_len) && out[s->web_root_len] == '/';
}

const char *ftws__header(struct lws *wsi, enum lws_token_indexes h, char *buf, int len,
                         bool *too_long)
{
    int total = lws_hdr_total_length(wsi, h);
    if (total <= 0)
        return NULL;
    if (total >= len || lws_hdr_copy(wsi, buf, len, h) < 0) {
        *too_long = true;
        return NULL;
    }
    return buf;
}

/* ---- validators ----------------------------------------------------------------------------- */

/* HTTP-date (IMF-fixdate, RFC 9110 §5.6.7) of t: "Sun, 06 Nov 1994 08:49:37 GMT". By hand rather
 * than strftime, whose day and month names follow the process's locale. */
static void http_date(time_t t, char *out, size_t len)
{
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct tm tm;
    if (!gmtime_r(&t, &tm)) {
        snprintf(out, len, "Thu, 01 Jan 1970 00:00:00 GMT");
        return;
    }
    snprintf(out, len, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7], tm.tm_mday,
             months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* Seconds since 1970 of an HTTP-date in any of its three forms (a recipient must accept all
 * three, RFC 9110 §5.6.7): "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
 * "Sun Nov  6 08:49:37 1994". The words are told apart by shape, so one small scan reads them
 * all; -1 when the text is none of them. */
static time_t parse_http_date(const char *text)
{
    static const char months[] = "janfebmaraprmayjunjulaugsepoctnovdec";
    int day = -1, month = -1, year = -1, hour = -1, minute = -1, second = -1;
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '-')
            p++;
        const char *word = p;
        while (*p && *p != ' ' && *p != ',' && *p != '-')
            p++;
        size_t n = (size_t)(p - word);
        if (!n)
            break;
        if (n == 8 && word[2] == ':' && word[5] == ':') {
            if (sscanf(word, "%2d:%2d:%2d", &hour, &minute, &second) != 3)
                return -1;
        } else if (word[0] >= '0' && word[0] <= '9') {
            int value = 0;
            for (size_t i = 0; i < n; i++) {
                if (word[i] < '0' || word[i] > '9' || i >= 4)
                    return -1;
                value = value * 10 + (word[i] - '0');
            }
            if (day < 0 && n <= 2)
                day = value;
            else if (year < 0 && (n == 4 || n == 2))
                year = n == 4 ? value : value + (value < 70 ? 2000 : 1900); /* RFC 850's two digits */
            else
                return -1;
        } else if (n == 3 && month < 0) {
            for (int m = 0; m < 12; m++)
                if (!strncasecmp(word, months + 3 * m, 3))
                    month = m;
            /* Otherwise a day name: ignored (it is implied by the date). */
        }
        /* Day names and "GMT": nothing to read. */
    }
    if (day < 1 || day > 31 || month < 0 || year < 1970 || hour < 0 || hour > 23 || minute < 0 ||
        minute > 59 || second < 0 || second > 60)
        return -1;
    struct tm tm = {.tm_sec = second, .tm_min = minute, .tm_hour = hour, .tm_mday = day,
                    .tm_mon = month, .tm_year = year - 1900};
    return timegm(&tm);
}

/* Whether If-None-Match (a list of entity tags, or "*") names etag. Weak comparison (RFC 9110
 * §13.1.2): a W/ prefix on either side is ignored, as the RFC asks for If-None-Match. */
static bool etag_listed(const char *list, const char *etag)
{
    size_t want = strlen(etag);
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '*')
            return true;
        if (!strncmp(p, "W/", 2))
            p += 2;
        if (*p != '"')
            return false; /* not a list of entity tags: ignore the header */
        const char *close = strchr(p + 1, '"');
        if (!close)
            return false;
        size_t n = (size_t)(close - p) + 1;
        if (n == want && !memcmp(p, etag, n))
            return true;
        p = close + 1;
    }
    return false;
}

/* The validators of a file: its ETag and Last-Modified.
 *
 * The ETag is strong, made of the size and the modification time in nanoseconds: a file that is
 * rewritten gets a new mtime (and usually a new size), and lws sends the stored bytes as they are
 * (no compression, no transformation), so two responses with the same tag are byte-identical,
 * which is what a strong tag promises (nginx makes the same choice). No inode: two machines
 * serving the same deploy agree. Last-Modified is the mtime, never later than now (RFC 9110
 * §8.8.2: a server must not send a date in the future). */
static void validators(const struct stat *st, char *etag, size_t etag_len, char *modified,
                       size_t modified_len, time_t *mtime)
{
    unsigned long long ns = (unsigned long long)st->st_mtim.tv_sec * 1000000000ull +
                            (unsigned long long)st->st_mtim.tv_nsec;
    snprintf(etag, etag_len, "\"%llx-%llx\"", (unsigned long long)st->st_size, ns);
    time_t now = time(NULL);
    *mtime = st->st_mtim.tv_sec < now ? st->st_mtim.tv_sec : now;
    http_date(*mtime, modified, modified_len);
}

/* Conditional GET/HEAD (RFC 9110 §13.2.2): If-None-Match decides when present; only without it
 * does If-Modified-Since count (and only a valid date that is not in the future). */
static bool not_modified(struct lws *wsi, const char *etag, time_t mtime)
{
    char value[1024];
    bool too_long = false;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_IF_NONE_MATCH) > 0) {
        const char *list = ftws__header(wsi, WSI_TOKEN_HTTP_IF_NONE_MATCH, value, sizeof(value),
                                        &too_long);
        return list && etag_listed(list, etag); /* too long for us: answer in full */
    }
    const char *since = ftws__header(wsi, WSI_TOKEN_HTTP_IF_MODIFIED_SINCE, value, sizeof(value),
                                     &too_long);
    if (!since)
        return false;
    time_t t = parse_http_date(since);
    return t >= 0 && t <= time(NULL) && mtime <= t;
}

/* The file's validators (and the revalidate-always cache policy) as lws-encoded headers. */
static int add_validators(struct lws *wsi, const char *etag, const char *modified,
                          unsigned char **p, unsigned char *end)
{
    /* The app is small and changes with each deploy: always revalidate, which costs a 304. */
    if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL,
                                     (const unsigned char *)"no-cache", 8, p, end) ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_ETAG, (const unsigned char *)etag,
                                     (int)strlen(etag), p, end) ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_LAST_MODIFIED,
                                     (const unsigned char *)modified, (int)strlen(modified), p, end))
        return -1;
    return 0;
}

/* Whether origin is one of s->cors_origins, compared as bytes: browsers send an origin in one
 * form (lowercase scheme and host, no trailing slash), and the owner passes the list in it. */
static bool cors_listed(const ftws_server *s, const char *origin)
{
    size_t want = strlen(origin);
    for (const char *p = s->cors_origins; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        if (n == want && !memcmp(p, origin, n))
            return true;
        p = eol ? eol + 1 : p + n;
    }
    return false;
}

/* The CORS headers of a static file (see cors_origins in CFoldtableWS.h). A page on a listed
 * origin loads our module scripts in CORS mode, and the browser runs one only when its answer
 * names that origin; every other origin gets no such header, so its page cannot run them (nor
 * read any file). Credentials are never allowed: the files are the same for everyone. */
static int add_cors(const ftws_server *s, struct lws *wsi, unsigned char **p, unsigned char *end)
{
    if (!s->cors_origins)
        return 0;
    if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_VARY, (const unsigned char *)"Origin", 6,
                                     p, end))
        return -1;
    char origin[512];
    bool too_long = false;
    const char *o = ftws__header(wsi, WSI_TOKEN_ORIGIN, origin, sizeof(origin), &too_long);
    if (!o || !cors_listed(s, o))
        return 0;
    return lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_ACCESS_CONTROL_ALLOW_ORIGIN,
                                        (const unsigned char *)o, (int)strlen(o), p, end)
               ? -1
               : 0;
}

/* 304 Not Modified: the status line with the security headers lws adds to every status
 * (LWS_SERVER_OPTION_HTTP_HEADERS_SECURITY_BEST_PRACTICES_ENFORCE), the validators, no body and
 * no Content-Length (a 304 describes the file, it does not carry it). Written here, in the
 * HTTP callback, the way lws_return_http_status writes its small answers. */
static int send_not_modified(const ftws_server *s, struct lws *wsi, const char *etag,
                             const char *modified)
{
    unsigned char buf[LWS_PRE + 2048];
    unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + sizeof(buf);
    if (lws_add_http_header_status(wsi, HTTP_STATUS_NOT_MODIFIED, &p, end) ||
        add_validators(wsi, etag, modified, &p, end) || add_cors(s, wsi, &p, end) ||
        lws_finalize_http_header(wsi, &p, end))
        return -1;
    if (lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS) != (int)(p - start))
        return -1;
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

/* ---- static files ------------------------------------------------------------------------------ */

/* GET or HEAD of a file under web_root, else 404 (405 with Allow for other methods); a fresh
 * validator gets 304. The Host was checked by ftws_route.c before it chose the static side. */
int ftws__http_serve_file(ftws_server *s, struct lws *wsi, const char *uri, size_t len)
{
    if (!lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) &&
        !lws_hdr_total_length(wsi, WSI_TOKEN_HEAD_URI))
        return http_status(wsi, HTTP_STATUS_METHOD_NOT_ALLOWED);
    if (!s->web_root || !uri)
        return http_status(wsi, HTTP_STATUS_NOT_FOUND);

    const char *rel;
    if (s->spa_prefix && len >= s->spa_prefix_len && !strncmp(uri, s->spa_prefix, s->spa_prefix_len))
        rel = "/index.html"; /* client-side routes: the app decides what /s/<name> means */
    else if (len == 1 && uri[0] == '/')
        rel = "/index.html";
    else if (uri_is_plain(uri, len))
        rel = uri;
    else
        return http_status(wsi, HTTP_STATUS_NOT_FOUND);

    char path[PATH_MAX], real[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s%s", s->web_root, rel);
    if (n < 0 || (size_t)n >= sizeof(path) || !resolve_inside(s, path, real))
        return http_status(wsi, HTTP_STATUS_NOT_FOUND);

    struct stat st;
    if (stat(real, &st))
        return http_status(wsi, HTTP_STATUS_NOT_FOUND);
    if (S_ISDIR(st.st_mode)) {
        /* A directory is served only through its index.html: never a listing. */
        n = snprintf(path, sizeof(path), "%s/index.html", real);
        if (n < 0 || (size_t)n >= sizeof(path) || !resolve_inside(s, path, real) ||
            stat(real, &st))
            return http_status(wsi, HTTP_STATUS_NOT_FOUND);
    }
    if (!S_ISREG(st.st_mode))
        return http_status(wsi, HTTP_STATUS_NOT_FOUND);

    char etag[48], modified[32];
    time_t mtime;
    validators(&st, etag, sizeof(etag), modified, sizeof(modified), &mtime);
    if (not_modified(wsi, etag, mtime))
        return send_not_modified(s, wsi, etag, modified);

    /* Built with lws's own header writer so the encoding matches the connection. lws opens the
     * file again by this resolved path; a deploy that swaps the file in between would pair new
     * bytes with old validators for one response, which the next revalidation corrects. */
    unsigned char hdrs[1024], *p = hdrs; /* validators, and an Origin of up to 511 bytes */
    if (add_validators(wsi, etag, modified, &p, hdrs + sizeof(hdrs)) ||
        add_cors(s, wsi, &p, hdrs + sizeof(hdrs)))
        return -1;

    n = lws_serve_http_file(wsi, real, mime_for(real), (const char *)hdrs, (int)(p - hdrs));
    if (n < 0 || (n > 0 && lws_http_transaction_completed(wsi)))
        return -1;
    return 0;
}

bool ftws__is_ws_path(ftws_server *s, struct lws *wsi)
{
    char uri[256];
    int n = lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI);
    return n > 0 && !strcmp(uri, s->ws_path);
}

/* An HTTP refusal for an upgrade request. lws_return_http_status would do, except that at
 * this point lws has not parsed the request's HTTP version yet and writes "HTTP/1.0", which
 * WebSocket clients (Python websockets, browsers) reject as not a valid handshake response;
 * so the status line is patched to 1.1 and the connection is closed after the response. */
static int refuse_upgrade(struct lws *wsi, unsigned int status)
{
    unsigned char buf[LWS_PRE + 1024];
    unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + sizeof(buf);
    if (lws_add_http_header_status(wsi, status, &p, end))
        return -1;
    if (p - start > 8 && !memcmp(start, "HTTP/1.0", 8))
        start[7] = '1';
    if (lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION, (const unsigned char *)"close", 5,
                                     &p, end) ||
        lws_add_http_header_content_length(wsi, 0, &p, end) ||
        lws_finalize_http_header(wsi, &p, end))
        return -1;
    if (lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS) != (int)(p - start))
        return -1;
    return 1;
}

/* LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: the one place an upgrade can still be answered with a
 * proper HTTP status. Returns 0 to let lws upgrade, 1 after writing a refusal (lws then ends
 * the transaction). lws 4.1.6 itself would upgrade on any path and also accepts h2c; we only
 * allow WebSocket, only on ws_path, only while running, and only if the owner agrees. An h2c
 * offer cannot be ignored here (lws would switch protocols), and lws 4.1.6 serving our files
 * over h2c sends empty bodies, so "Upgrade: h2c" (curl --http2, Java's HttpClient) gets 403. */
int ftws__http_confirm_upgrade(ftws_server *s, struct lws *wsi, const char *upgrade)
{
    unsigned int status = 0;
    if (!upgrade || strcasecmp(upgrade, "websocket"))
        status = HTTP_STATUS_FORBIDDEN;
    else if (!ftws__is_ws_path(s, wsi))
        status = HTTP_STATUS_NOT_FOUND;
    else if (s->stopping || atomic_load(&s->stop_requested))
        status = HTTP_STATUS_SERVICE_UNAVAILABLE;
    else if (s->cb.check_upgrade) {
        char origin[512], host[512], peer[64], forwarded[256];
        bool too_long = false, forwarded_too_long = false;
        const char *o = ftws__header(wsi, WSI_TOKEN_ORIGIN, origin, sizeof(origin), &too_long);
        const char *h = ftws__header(wsi, WSI_TOKEN_HOST, host, sizeof(host), &too_long);
        const char *f = ftws__header(wsi, WSI_TOKEN_X_FORWARDED_FOR, forwarded, sizeof(forwarded),
                               &forwarded_too_long);
        ftws__peer_ip(wsi, peer, sizeof(peer));
        status = too_long ? HTTP_STATUS_FORBIDDEN : s->cb.check_upgrade(s->cb.owner, o, h, peer, f);
    }
    if (!status)
        return 0;
    return refuse_upgrade(wsi, status);
}
