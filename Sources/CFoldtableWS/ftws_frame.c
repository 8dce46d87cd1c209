/*
 * Refcounted frames: one encoded message, shared by every connection it is queued to.
 *
 * Why sharing is safe: lws_write writes the WebSocket header into the LWS_PRE headroom in
 * front of the payload. A server never masks, so for a given payload that header is the same
 * bytes for every connection, and everything happens on the one service thread. (A connection
 * with permessage-deflate gets its header in lws's deflate buffer and leaves the headroom
 * alone.) So a broadcast to N clients is N pointer pushes, not N copies.
 */
#include "ftws_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/*
 * Recycling. Every acknowledged change makes two small frames (its event and its ack) and frees
 * them a loop turn or so later, in bursts that overflow malloc's per-thread cache, so malloc and
 * free left their fast path for every change. A frame of up to 512 payload bytes is made the next
 * power of two from 64 up (past 64 bytes, never more than twice its payload) and, when released,
 * kept on that size's free list of the releasing thread (no locks: a list is only ever touched by
 * its own thread), up to FTWS_POOL_BYTES of frames a size; the lists are freed when their thread
 * ends.
 * The bound is in bytes, not frames, because the frames in flight grow with the clients: 1,000
 * authors with 4 changes in flight hold ~8,000 frames between a commit and the writes that
 * release them, so a bound of 1,024 frames a size sent most of each burst back to malloc (probed:
 * one malloc and one free a change, on memory the burst before had left cold). 4 MiB a size holds
 * ~37,000 ack frames or ~7,000 of the largest: at most 16 MiB over the four sizes, per thread
 * that releases frames, kept until that thread ends.
 * A frame may be released on another thread than the one that made it (a message dropped by a test
 * after its server stopped): it simply joins that thread's list.
 */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FTWS_POOL_OFF 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FTWS_POOL_OFF 1
#endif
/* Under AddressSanitizer every frame is malloc'd and freed: a recycled frame would hide a use
 * after release from it (the memory stays valid), which is what the sanitizer runs are for. */
#ifdef FTWS_POOL_OFF
#define FTWS_POOL_BYTES 0
#else
#define FTWS_POOL_BYTES ((size_t)4 << 20)
#endif
#define FTWS_POOL_CLASSES 5
static const size_t class_payload[FTWS_POOL_CLASSES] = {0, 64, 128, 256, 512};

typedef struct frame_pool {
    ftws_frame *head[FTWS_POOL_CLASSES];
    size_t count[FTWS_POOL_CLASSES];
} frame_pool;

static _Thread_local frame_pool t_pool;
static _Thread_local bool t_pool_registered;
static pthread_key_t pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_free(void *arg)
{
    frame_pool *pool = arg;
    for (int c = 1; c < FTWS_POOL_CLASSES; c++) {
        while (pool->head[c]) {
            ftws_frame *f = pool->head[c];
            pool->head[c] = f->next;
            free(f);
        }
        pool->count[c] = 0;
    }
}

static void pool_key_create(void) { (void)pthread_key_create(&pool_key, pool_free); }

ftws_frame *ftws__frame_create(const uint8_t *data, size_t len, bool binary)
{
    if (len > SIZE_MAX - sizeof(ftws_frame) - LWS_PRE)
        return NULL;
    uint8_t size_class = 0;
    for (uint8_t c = 1; c < FTWS_POOL_CLASSES && !size_class; c++)
        if (len <= class_payload[c])
            size_class = c;
    ftws_frame *f = NULL;
    if (size_class && t_pool.head[size_class]) {
        f = t_pool.head[size_class];
        t_pool.head[size_class] = f->next;
        t_pool.count[size_class]--;
    } else {
        f = malloc(sizeof(ftws_frame) + LWS_PRE + (size_class ? class_payload[size_class] : len));
        if (!f)
            return NULL;
    }
    f->refs = 1;
    f->len = len;
    f->binary = binary;
    f->size_class = size_class;
    f->next = NULL;
    if (len && data)
        memcpy(f->buf + LWS_PRE, data, len);
    return f;
}

/* Back on this thread's free list, or freed when it is full (or the frame has no size class). */
static void frame_recycle(ftws_frame *f)
{
    uint8_t c = f->size_class;
    if (!c || (t_pool.count[c] + 1) * (sizeof(ftws_frame) + LWS_PRE + class_payload[c]) > FTWS_POOL_BYTES) {
        free(f);
        return;
    }
    if (!t_pool_registered) {
        /* The key's destructor frees the lists at thread exit (it runs only for a non-NULL value). */
        (void)pthread_once(&pool_once, pool_key_create);
        if (pthread_setspecific(pool_key, &t_pool) != 0) {
            free(f);
            return;
        }
        t_pool_registered = true;
    }
    f->next = t_pool.head[c];
    t_pool.head[c] = f;
    t_pool.count[c]++;
}

/* New text frame holding a copy of data, refcount 1 (the caller's reference). */
ftws_frame *ftws_frame_create(const uint8_t *data, size_t len)
{
    return ftws__frame_create(data, len, false);
}

/* New binary frame, the same otherwise: only an owner that takes binary messages
 * (on_binary_message) has a use for it, to answer in kind. */
ftws_frame *ftws_frame_create_binary(const uint8_t *data, size_t len)
{
    return ftws__frame_create(data, len, true);
}

/* One more reference. Service thread only: the count is not atomic. */
void ftws_frame_retain(ftws_frame *frame)
{
    if (frame)
        frame->refs++;
}

/* Drop a reference; the last one recycles or frees the frame. */
void ftws_frame_release(ftws_frame *frame)
{
    if (frame && --frame->refs == 0)
        frame_recycle(frame);
}

/* Payload length in bytes (without the headroom). */
size_t ftws_frame_length(const ftws_frame *frame)
{
    return frame ? frame->len : 0;
}
