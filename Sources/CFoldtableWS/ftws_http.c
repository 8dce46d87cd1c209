/*
 * HTTP side: static files from web_root and the gate in front of the WebSocket upgrade.
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

/* Finish a request with a bare status (lws writes a tiny HTML body). */
static int http_status(struct lws *wsi, unsigned int code)
{
    if (lws_return_http_status(wsi, code, NULL))
        return -1;
    return lws_http_transaction_completed(wsi) ? -1 : 0;
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

/* LWS_CALLBACK_HTTP: GET/HEAD of a file under web_root, else 404 (405 for other methods). */
/* Copy a request header; NULL when absent. A header too long for buf is treated as a refusal
 * by the caller (it cannot be a legitimate Origin/Host). */
static const char *header(struct lws *wsi, enum lws_token_indexes h, char *buf, int len,
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

int ftws__http_serve(ftws_server *s, struct lws *wsi, const char *uri, size_t len)
{
    if (s->cb.allow_host) {
        char host[512];
        bool too_long = false;
        const char *h = header(wsi, WSI_TOKEN_HOST, host, sizeof(host), &too_long);
        if (too_long || !s->cb.allow_host(s->cb.owner, h))
            return http_status(wsi, 421); /* Misdirected Request */
    }
    if (!lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) &&
        !lws_hdr_total_length(wsi, WSI_TOKEN_HEAD_URI))
        return http_status(wsi, HTTP_STATUS_METHOD_NOT_ALLOWED);
    if (!s->web_root || !uri)
        return http_status(wsi, HTTP_STATUS_NOT_FOUND);

    /* lws stores a decoded %00 in the URI without counting it in len, so "/%00../x" arrives
     * as "/" NUL "../x" with len 5: a NUL before len means the path was not what it seems. */
    if (strnlen(uri, len) != len)
        return http_status(wsi, HTTP_STATUS_BAD_REQUEST);

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

    /* Built with lws's own header writer so the encoding matches the connection. The app is
     * small and changes with each deploy: always revalidate. */
    unsigned char hdrs[128], *p = hdrs;
    if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL,
                                     (const unsigned char *)"no-cache", 8, &p, hdrs + sizeof(hdrs)))
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
        const char *o = header(wsi, WSI_TOKEN_ORIGIN, origin, sizeof(origin), &too_long);
        const char *h = header(wsi, WSI_TOKEN_HOST, host, sizeof(host), &too_long);
        const char *f = header(wsi, WSI_TOKEN_X_FORWARDED_FOR, forwarded, sizeof(forwarded),
                               &forwarded_too_long);
        ftws__peer_ip(wsi, peer, sizeof(peer));
        status = too_long ? HTTP_STATUS_FORBIDDEN : s->cb.check_upgrade(s->cb.owner, o, h, peer, f);
    }
    if (!status)
        return 0;
    return refuse_upgrade(wsi, status);
}
