/*
 * Keepalive: a connection that has sent nothing for ping_interval_secs gets a ping; one that
 * has sent nothing, pongs included, for hangup_secs is dropped (the owner hears 1006).
 *
 * Why not lws's own ("validity", lws_retry_bo_t.secs_since_valid_ping): in lws 4.1.6 only a
 * pong confirms a connection, so every connection, busy or not, is pinged once per interval;
 * and each ping re-arms a per-connection timer in lws's one sorted list of timers, twice (ping,
 * then pong), walking the list from its head: about every connection per re-arm. That is
 * N^2 / interval list steps per second: with 10,000 idle members, lws_dll2_add_sorted alone
 * took 36% of the service thread (perf), the server's core 65-81% busy doing nothing.
 *
 * Here every connection sits in a timing wheel of FTWS_KA_SLOTS lists, one per FTWS_KA_SLOT_US
 * (Varghese and Lauck's hashed wheel): arming is a list insert, each slot is visited once per
 * turn of the wheel, and traffic only stamps last_rx_us, so a busy connection is looked at once
 * per interval (its deadline then moves on from its last traffic) and is never pinged. A
 * deadline more than one turn away stays in its slot for the turns in between.
 *
 * Slots are a second long because every wakeup of lws 4.1.6's service loop costs a poll() over
 * all of its sockets: with 10,000 idle members, quarter-second slots kept the core 14.5% busy,
 * one-second slots 4.9% (fanout.sh scenario 6). Pings and hangups come up to a second late.
 */
#include "ftws_internal.h"

/* Where a connection's deadline falls, counted in slots since the epoch of lws_now_usecs. */
static uint64_t slot_of(lws_usec_t us)
{
    return (uint64_t)us / FTWS_KA_SLOT_US;
}

/* Into the first slot visited at or after its deadline (a slot is visited when its time
 * begins), or the next one to be visited if that is already past. */
static void place(ftws_server *s, ftws_conn *c)
{
    uint64_t slot = slot_of(c->ka_due_us + FTWS_KA_SLOT_US - 1);
    if (slot < s->ka_next_slot)
        slot = s->ka_next_slot;
    c->ka_slot = (uint32_t)(slot & (FTWS_KA_SLOTS - 1));
    ftws_conn **head = &s->ka_slots[c->ka_slot];
    c->ka_prev = NULL;
    c->ka_next = *head;
    if (*head)
        (*head)->ka_prev = c;
    *head = c;
    c->ka_armed = true;
}

void ftws__keepalive_arm(ftws_conn *c, lws_usec_t now)
{
    ftws_server *s = c->server;
    if (s->cfg.ping_interval_secs <= 0)
        return;
    c->last_rx_us = now;
    c->ka_due_us = now + (lws_usec_t)s->cfg.ping_interval_secs * LWS_US_PER_SEC;
    place(s, c);
}

void ftws__keepalive_disarm(ftws_conn *c)
{
    if (!c->ka_armed)
        return;
    ftws_server *s = c->server;
    if (c->ka_prev)
        c->ka_prev->ka_next = c->ka_next;
    else
        s->ka_slots[c->ka_slot] = c->ka_next;
    if (c->ka_next)
        c->ka_next->ka_prev = c->ka_prev;
    c->ka_prev = c->ka_next = NULL;
    c->ka_armed = false;
}

/* A connection whose deadline has come, in the slot that began at slot_start: ping it, drop
 * it, or move its deadline on from its last traffic. Closing connections leave the wheel (their
 * close has deadlines of its own). */
static void due(ftws_server *s, ftws_conn *c, lws_usec_t now, lws_usec_t slot_start)
{
    if (c->closing)
        return;
    lws_usec_t ping = (lws_usec_t)s->cfg.ping_interval_secs * LWS_US_PER_SEC;
    lws_usec_t hangup = (lws_usec_t)s->cfg.hangup_secs * LWS_US_PER_SEC;
    lws_usec_t idle = now - c->last_rx_us;
    if (c->ping_sent && idle >= hangup) {
        ftws__conn_kill(c, FTWS_CLOSE_ABNORMAL);
        return;
    }
    if (c->ping_sent) {
        c->ka_due_us = c->last_rx_us + hangup;
    } else if (idle >= ping) {
        c->ping_sent = true;
        c->ping_pending = true;
        ftws__conn_request_writable(c);
        /* A ping up to a slot late (or later: the service thread was held up) still leaves the
         * peer the time between ping and hangup to answer, the silence having been partly ours.
         * Counted from the slot's start, so the hangup falls on a slot boundary, not one after. */
        c->ka_due_us = c->last_rx_us + hangup;
        if (c->ka_due_us < slot_start + hangup - ping)
            c->ka_due_us = slot_start + hangup - ping;
    } else {
        c->ka_due_us = c->last_rx_us + ping;
    }
    place(s, c);
}

/* Visits every slot whose time has come, then sleeps until the next slot's. */
static void keepalive_fired(lws_sorted_usec_list_t *sul)
{
    ftws_server *s = lws_container_of(sul, ftws_server, sul_keepalive);
    lws_usec_t now = lws_now_usecs();
    uint64_t last = slot_of(now);
    /* After a long stall, one turn of the wheel visits every connection once. */
    if (last >= s->ka_next_slot + FTWS_KA_SLOTS)
        s->ka_next_slot = last - FTWS_KA_SLOTS + 1;
    while (s->ka_next_slot <= last) {
        ftws_conn **head = &s->ka_slots[s->ka_next_slot & (FTWS_KA_SLOTS - 1)];
        ftws_conn *c = *head;
        lws_usec_t slot_start = (lws_usec_t)s->ka_next_slot * FTWS_KA_SLOT_US;
        *head = NULL;
        s->ka_next_slot++;
        while (c) {
            ftws_conn *next = c->ka_next;
            c->ka_prev = c->ka_next = NULL;
            c->ka_armed = false;
            if (c->ka_due_us > now)
                place(s, c); /* a later turn of the wheel */
            else
                due(s, c, now, slot_start);
            c = next;
        }
    }
    lws_sul_schedule(s->ctx, 0, &s->sul_keepalive, keepalive_fired,
                     (lws_usec_t)s->ka_next_slot * FTWS_KA_SLOT_US - now);
}

void ftws__keepalive_start(ftws_server *s)
{
    if (s->cfg.ping_interval_secs <= 0)
        return;
    lws_usec_t now = lws_now_usecs();
    s->ka_next_slot = slot_of(now) + 1;
    lws_sul_schedule(s->ctx, 0, &s->sul_keepalive, keepalive_fired,
                     (lws_usec_t)s->ka_next_slot * FTWS_KA_SLOT_US - now);
}
