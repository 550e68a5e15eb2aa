/*
 * alive.c - how a rank tells a slow peer from a gone one.  Every rank sends a heartbeat
 * (a 48-byte header of kind HEARTBEAT, no payload) on each of its TCP connections every
 * heartbeat_ms: from a thread of the communicator while no collective runs, and from the
 * collective's own waits while one does (the thread then keeps off the connections).
 * Anything read from a peer - data, heartbeat, abort notice - stamps heard_ns[peer].  A
 * collective waiting for a peer that has sent nothing, not even a heartbeat, for
 * peer_timeout_ms fails with FL_EREMOTE naming it: it is stopped (SIGSTOP, a debugger) or
 * hung.  A peer that is only slow (still computing, or blocked on a third rank) keeps
 * sending heartbeats and is given the collective's whole timeout_ms.
 *
 * A heartbeat goes out only where the stream to the peer is at a message boundary; when
 * the socket takes only part of one, the rest (hb_left) goes out before anything else on
 * that connection.  The thread and the collectives share this state under op_mu: a
 * collective holds it from start to end, the thread only takes it when free (trylock).
 *
 * When this process itself did not run for a while (a stop, a starved machine), it notes
 * the time it ran again (the stopped-self rule of src/net/liveness.h): peers get a fresh
 * window from then on, and waits restart their no-progress clock, instead of blaming a peer
 * for our own absence.  The thresholds and the thread are that module's.
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "coll_internal.h"

#define TICK_NS 50000000ull /* heartbeat work inside a collective at most this often */

void fl__coll_op_begin(fl_coll *c)
{
    pthread_mutex_lock(&c->op_mu);
    c->tick_ns = 0; /* a pause between collectives is no stop of this process */
}
void fl__coll_op_end(fl_coll *c) { pthread_mutex_unlock(&c->op_mu); }

int fl__coll_hb_flush(fl_coll *c, int p)
{
    while (c->hb_left[p]) {
        size_t k;
        struct iovec iov = {c->hb_out[p] + FL_COLL_HDR - c->hb_left[p], c->hb_left[p]};
        FL_CHECK(fl_net_try_sendv(c->conns[p], &iov, 1, &k));
        if (!k) return FL_OK;
        c->hb_left[p] -= (uint8_t)k;
    }
    return FL_OK;
}

/* 1 once p has closed its end (its last messages may still wait to be read): nothing more
 * is sent to it, since data arriving at a closed socket draws a reset, and a reset makes
 * our kernel drop what p sent last - often the abort notice that says why it left. */
static int hung_up(fl_coll *c, int p)
{
    if (c->hb_quiet[p]) return 1;
    struct pollfd pf = {.fd = fl_net_conn_fd(c->conns[p]), .events = POLLRDHUP};
    if (poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR))) c->hb_quiet[p] = 1;
    return c->hb_quiet[p];
}

/* Sends a heartbeat to every peer whose last one is a period old, where the stream is at a
 * message boundary.  Errors are left for the collectives to find. */
static void send_due(fl_coll *c, uint64_t now)
{
    uint64_t period = (uint64_t)c->hb_ms * 1000000ull;
    for (int p = 0; p < c->size; p++) {
        if (!c->conns[p] || c->peer_closed[p] || c->tx_mid[p]) continue;
        if (!c->hb_left[p] && now - c->sent_ns[p] < period) continue;
        if (hung_up(c, p)) continue;
        if (!c->hb_left[p]) {
            if (now - c->sent_ns[p] < period) continue;
            fl__coll_desc none = {0};
            fl__coll_hdr(c->hb_out[p], &none, FL_COLL_MSG_HEARTBEAT, 0, 0);
            c->hb_left[p] = FL_COLL_HDR;
            c->sent_ns[p] = now;
        }
        if (fl__coll_hb_flush(c, p) != FL_OK) fl_clear_error();
    }
}

int fl__coll_skip_heartbeats(fl_coll *c, int p)
{
    for (int k = 0; k < 64; k++) {
        uint8_t h[FL_COLL_HDR];
        size_t got;
        int st = fl_net_try_peek(c->conns[p], h, sizeof h, &got);
        if (st == FL_EREMOTE) { /* closed: the collective that needs it finds out */
            fl_clear_error();
            return FL_OK;
        }
        FL_CHECK(st);
        if (got) c->heard_ns[p] = fl__now_ns();
        if (got < sizeof h || fl__get_u32(h) != FL_COLL_WIRE_MAGIC || fl__get_u16(h + 4) != FL_COLL_MSG_HEARTBEAT)
            return FL_OK;
        FL_CHECK(fl_net_try_recv(c->conns[p], h, sizeof h, &got)); /* peeked whole: all there */
    }
    return FL_OK;
}

int fl__coll_tick(fl_coll *c, const fl__coll_desc *d)
{
    if (c->hb_ms <= 0) return FL_OK;
    uint64_t now = fl__now_ns();
    if (now - c->tick_ns < TICK_NS) return FL_OK;
    fl__live_check(&c->live, c->tick_ns, now); /* a tick this late: this process was stopped */
    c->tick_ns = now;
    send_due(c, now);
    if (c->peer_timeout_ms <= 0) return FL_OK;
    for (int p = 0; p < c->size; p++) {
        /* a peer whose stream holds data for a later step has been heard from; one that
         * closed is handled by the collective (it may have finished) */
        if (!c->conns[p] || c->idle_blocked[p] || c->peer_closed[p]) continue;
        if (!fl__live_silent(&c->live, c->heard_ns[p], now, c->peer_timeout_ms)) continue;
        char ds[160];
        fl__coll_desc_str(d, ds, sizeof ds);
        return fl__err(FL_EREMOTE,
                       "%s sent nothing, not even a heartbeat, for %.1f s during %s: it is stopped or "
                       "hung (FLEET_COLL_PEER_TIMEOUT_MS is %d)",
                       fl__coll_peer(c, p), (double)fl__live_quiet(&c->live, c->heard_ns[p], now) / 1e9, ds,
                       c->peer_timeout_ms);
    }
    return FL_OK;
}

/* ---- the thread ----------------------------------------------------------------------------------- */

/* One beat of the thread: while no collective runs the connections are its own. */
static void beat(void *arg, uint64_t now)
{
    fl_coll *c = arg;
    if (pthread_mutex_trylock(&c->op_mu) != 0) return; /* a collective runs: its waits beat */
    if (!c->failed) {
        for (int p = 0; p < c->size; p++)
            if (c->conns[p] && !c->peer_closed[p] && fl__coll_skip_heartbeats(c, p) != FL_OK) fl_clear_error();
        send_due(c, now);
    }
    pthread_mutex_unlock(&c->op_mu);
}

int fl__coll_hb_init(fl_coll *c, const fl_coll_opts *o)
{
    int64_t hb = o->heartbeat_ms, pt = o->peer_timeout_ms;
    if (!hb) FL_CHECK(fl__env_int("FLEET_COLL_HEARTBEAT_MS", FL__LIVE_HEARTBEAT_MS, -1, 3600000, &hb));
    if (!pt) FL_CHECK(fl__env_int("FLEET_COLL_PEER_TIMEOUT_MS", FL__LIVE_TIMEOUT_MS, -1, 86400000, &pt));
    c->hb_ms = hb > 0 ? (int)hb : -1;
    c->peer_timeout_ms = pt > 0 ? (int)pt : -1;
    char who[32];
    snprintf(who, sizeof who, "rank %d", c->rank);
    fl__live_clock_init(&c->live, FL_SUB_COLL, who, "its peers", c->peer_timeout_ms);
    size_t P = (size_t)c->size;
    c->heard_ns = calloc(P, sizeof *c->heard_ns);
    c->sent_ns = calloc(P, sizeof *c->sent_ns);
    c->hb_out = calloc(P, sizeof *c->hb_out);
    c->hb_left = calloc(P, sizeof *c->hb_left);
    c->hb_quiet = calloc(P, sizeof *c->hb_quiet);
    if (!c->heard_ns || !c->sent_ns || !c->hb_out || !c->hb_left || !c->hb_quiet)
        return fl__err(FL_ENOMEM, "fl_coll_create: out of memory");
    /* a backend whose setup waits (mpi) checks the peers before fl__coll_hb_start: they
     * count as heard from now, not from the epoch */
    uint64_t now = fl__now_ns();
    for (size_t p = 0; p < P; p++) c->heard_ns[p] = c->sent_ns[p] = now;
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE); /* a failure inside a collective notifies peers */
    pthread_mutex_init(&c->op_mu, &ma);
    pthread_mutexattr_destroy(&ma);
    c->hb_inited = 1;
    return FL_OK;
}

int fl__coll_hb_start(fl_coll *c)
{
    uint64_t now = fl__now_ns();
    for (int p = 0; p < c->size; p++) c->heard_ns[p] = c->sent_ns[p] = now;
    if (c->hb_ms <= 0 || c->size < 2) return FL_OK;
    int st = fl__live_hb_start(&c->hb, c->hb_ms, &c->live, beat, c);
    return st ? fl__err(st, "fl_coll_create: %s", fl_last_error()) : FL_OK;
}

void fl__coll_hb_stop(fl_coll *c) { fl__live_hb_stop(&c->hb); }

void fl__coll_hb_free(fl_coll *c)
{
    fl__coll_hb_stop(c);
    if (c->hb_inited) {
        pthread_mutex_destroy(&c->op_mu);
        c->hb_inited = 0;
    }
    free(c->heard_ns);
    free(c->sent_ns);
    free(c->hb_out);
    free(c->hb_left);
    free(c->hb_quiet);
}
