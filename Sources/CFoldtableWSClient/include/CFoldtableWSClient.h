/*
 * CFoldtableWSClient: the small C API the terminal client (`foldtable`) drives to talk to
 * foldtabled over ws:// or wss:// with libwebsockets 4.1.6.
 *
 * Why C: the same reasons as the server side (CFoldtableWS.h): LWS_PRE is a function-like macro,
 * lws callbacks are one C function-pointer switch, and the protocol table and every string lws
 * keeps a pointer to must be stable C memory. Swift sees only the functions below.
 *
 * Threading: everything runs on ONE thread, the one inside ftwsc_run (lws has one service
 * thread, LWS_MAX_SMP 1). The client watches extra descriptors (stdin, a signal pipe) in the
 * same lws poll loop and offers timers on it, so the whole terminal client is single-threaded:
 * no locks, no hand-off between a UI thread and a network thread. Every function here must be
 * called on that thread (before ftwsc_run, or from inside a callback), except ftwsc_now_ms.
 *
 * Callbacks are never made from inside a call into this API: connection outcomes are
 * delivered from the loop, so Swift may reconnect, send or stop from any callback.
 */
#ifndef CFOLDTABLEWSCLIENT_H
#define CFOLDTABLEWSCLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ftwsc_client ftwsc_client;

/* Close codes the client reports itself (the server's own codes are passed through). The
 * numbers are FoldtableCore's CloseCode; a unit test (CloseCodeTableTests) reads them here. */
enum {
    FTWSC_CLOSE_NORMAL = 1000,
    FTWSC_CLOSE_ABNORMAL = 1006,   /* no close frame: the socket dropped, or never connected */
    FTWSC_CLOSE_TOO_BIG = 1009,    /* a message from the server passed max_message_bytes */
};

typedef struct ftwsc_callbacks {
    /* Passed back as the first argument of every callback. */
    void *owner;
    /* The WebSocket handshake of the connection started with ftwsc_connect completed. */
    void (*on_open)(void *owner);
    /* One whole text message, reassembled from its fragments. Not NUL-terminated; valid only
     * during the call. */
    void (*on_message)(void *owner, const uint8_t *data, size_t len);
    /* The connection ended, or could not be made. code: the close code the server sent (or
     * that we sent), else 1006. established: 0 when it never opened. reason: one line for
     * people, never NULL ("" when there is nothing to say). */
    void (*on_close)(void *owner, int code, int established, const char *reason);
    /* A descriptor watched with ftwsc_watch_fd is readable (or at end of file). */
    void (*on_readable)(void *owner, int fd);
    /* A timer armed with ftwsc_timer_arm fired. */
    void (*on_timer)(void *owner, uint64_t token);
} ftwsc_callbacks;

typedef struct ftwsc_config {
    const char *ca_path;        /* PEM file of CAs trusted for wss://; NULL = the system store */
    int insecure;               /* 1: accept self-signed or expired certificates, any host name */
    size_t max_message_bytes;   /* largest message accepted from the server; 0 = 64 MiB */
    int log_level;              /* 0 = lws logs nothing (default); 1 = errors; 2 = +warnings */
} ftwsc_config;

/* Create the lws context (no listening socket). On failure returns NULL and writes one line to
 * err (e.g. "cannot read CA file /x.pem"). */
ftwsc_client *ftwsc_create(const ftwsc_config *config, ftwsc_callbacks callbacks, char *err,
                           size_t err_len);

/* Start connecting to ws(s)://host:port/path. One connection at a time: returns -1 with a line
 * in err when one is still open or closing, or the arguments are unusable; else 0, and exactly
 * one on_open and/or one on_close follow later. host may be an IPv6 literal without brackets. */
int ftwsc_connect(ftwsc_client *client, const char *host, int port, const char *path, int tls,
                  char *err, size_t err_len);

/* Queue one text message (copied). Returns 0, or -1 when no connection is open or the send
 * queue passed its cap (8 MiB). One lws_write per WRITEABLE. */
int ftwsc_send(ftwsc_client *client, const uint8_t *data, size_t len);

/* Close the open (or opening) connection with code and reason (cut to FTWS_CLOSE_REASON_MAX_BYTES
 * of CFoldtableWSCommon.h) after the queued messages; on_close follows. No-op when there is none. */
void ftwsc_close(ftwsc_client *client, int code, const char *reason);

/* Bytes queued and not yet handed to the socket. */
size_t ftwsc_queued_bytes(const ftwsc_client *client);

/* Watch a readable descriptor in the same poll loop: on_readable when it can be read. The
 * descriptor is the caller's to read; the client closes it when destroyed, so pass a dup of
 * anything the program still needs afterwards (stdin). Returns 0, or -1. */
int ftwsc_watch_fd(ftwsc_client *client, int fd);

/* Timers on the loop: on_timer(owner, token) after delay_ms. Re-arming a token replaces its
 * deadline. At most 16 tokens at once; returns -1 when full. */
int ftwsc_timer_arm(ftwsc_client *client, uint64_t token, uint64_t delay_ms);
void ftwsc_timer_cancel(ftwsc_client *client, uint64_t token);

/* Run the loop on the calling thread until ftwsc_stop. Returns 0. */
int ftwsc_run(ftwsc_client *client);
/* Make ftwsc_run return once the current callback is done. */
void ftwsc_stop(ftwsc_client *client);
/* After ftwsc_run returned (or instead of it): close everything and free. No callbacks. */
void ftwsc_destroy(ftwsc_client *client);

/* Monotonic milliseconds (the clock lws schedules with). Any thread. */
uint64_t ftwsc_now_ms(void);

#ifdef __cplusplus
}
#endif
#endif
