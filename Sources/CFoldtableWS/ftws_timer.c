/*
 * Owner timers on the service thread: token -> lws sorted-usec-list entry (lws_sul_schedule).
 * A small chained hash keyed by token; timers are not a hot path, the table just keeps a few
 * thousand per-connection deadlines from turning arm/cancel into list scans.
 */
#include "ftws_internal.h"

#include <stdlib.h>

static size_t bucket_of(uint64_t token)
{
    /* Fibonacci hashing: owner tokens are often small sequential ids. */
    return (size_t)((token * 0x9E3779B97F4A7C15ull) >> 54) & (FTWS_TIMER_BUCKETS - 1);
}

static ftws_timer **find_slot(ftws_server *s, uint64_t token)
{
    ftws_timer **pp = &s->timers[bucket_of(token)];
    while (*pp && (*pp)->token != token)
        pp = &(*pp)->next;
    return pp;
}

static void timer_fired(lws_sorted_usec_list_t *sul)
{
    ftws_timer *t = lws_container_of(sul, ftws_timer, sul);
    ftws_server *s = t->server;
    uint64_t token = t->token;
    ftws_timer **pp = find_slot(s, token);
    if (*pp == t)
        *pp = t->next;
    free(t);
    /* Removed before the callback, so on_timer may re-arm the same token. */
    if (s->cb.on_timer)
        s->cb.on_timer(s->cb.owner, token);
}

/* Arm (or re-arm: the old deadline is replaced) the timer for token. */
void ftws_timer_arm(ftws_server *server, uint64_t token, uint64_t delay_ms)
{
    if (!server || !server->ctx)
        return;
    ftws_timer **pp = find_slot(server, token);
    ftws_timer *t = *pp;
    if (!t) {
        t = calloc(1, sizeof(*t));
        if (!t)
            return;
        t->server = server;
        t->token = token;
        *pp = t;
    }
    /* Clamp so the microsecond arithmetic cannot overflow (about 35 years). */
    if (delay_ms > (uint64_t)1 << 40)
        delay_ms = (uint64_t)1 << 40;
    lws_sul_schedule(server->ctx, 0, &t->sul, timer_fired, (lws_usec_t)delay_ms * LWS_US_PER_MS);
}

/* Forget the timer for token; unknown tokens are ignored. */
void ftws_timer_cancel(ftws_server *server, uint64_t token)
{
    if (!server)
        return;
    ftws_timer **pp = find_slot(server, token);
    ftws_timer *t = *pp;
    if (!t)
        return;
    *pp = t->next;
    lws_sul_cancel(&t->sul);
    free(t);
}

/* On destroy: unhook every timer from lws before the memory goes away. */
void ftws__timers_cancel_all(ftws_server *s)
{
    for (size_t b = 0; b < FTWS_TIMER_BUCKETS; b++) {
        ftws_timer *t = s->timers[b];
        while (t) {
            ftws_timer *next = t->next;
            lws_sul_cancel(&t->sul);
            free(t);
            t = next;
        }
        s->timers[b] = NULL;
    }
}
