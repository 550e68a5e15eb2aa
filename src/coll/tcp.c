/*
 * tcp.c - the progress engine of the TCP collectives.  An algorithm queues, per peer, at
 * most one message out and one in (c->xf), then fl__tcp_run moves all of them at once over
 * the non-blocking sockets: it spins briefly when this host has a core per rank (a sleeping
 * process costs ~30-70 us to wake), then sleeps in poll.  Every received header is checked
 * against the caller's descriptor (a different collective or count is FL_EPROTO naming both
 * calls); idle connections are watched for abort notices and for peers that closed
 * (fl__coll_check_peers, desc.c).  No wait lasts longer than timeout_ms without progress;
 * heartbeats (alive.c) are sent and skipped on the way and do not count as progress, but a
 * peer silent for peer_timeout_ms fails the op sooner.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "coll_internal.h"

#define SPIN_NS 50000ull           /* spin this long without progress before sleeping in poll */
#define LINGER_MS 200              /* after a peer closed: wait this long for a root-cause notice */
#define TICK_SLICE_NS 100000000ull /* longest sleep in poll while heartbeats are on */

void fl__tcp_send(fl_coll *c, int p, const fl__coll_desc *d, uint64_t tag, const void *buf, size_t len)
{
    fl__xfer *x = &c->xf[p];
    x->s_on = 1;
    fl__coll_hdr(x->s_hdr, d, FL_COLL_MSG_DATA, tag, len);
    x->s_buf = buf;
    x->s_len = len;
    x->s_done = 0;
}

void fl__tcp_recv(fl_coll *c, int p, uint64_t tag, void *buf, size_t len)
{
    fl__xfer *x = &c->xf[p];
    x->r_on = 1;
    x->r_hdone = 0;
    x->r_buf = buf;
    x->r_len = len;
    x->r_done = 0;
    x->r_tag = tag;
}

/* After peer `bad` closed or reset its connection: give every peer (`bad` too: a peer that
 * failed sends its notice before it closes) LINGER_MS to deliver an abort notice naming the
 * root cause, and prefer it. */
static int linger_for_cause(fl_coll *c, const fl__coll_desc *d, int bad, int st)
{
    char first[FL_COLL_MSG_MAX];
    snprintf(first, sizeof first, "%s", fl_last_error());
    (void)bad;
    uint64_t dl = fl_net_deadline(LINGER_MS);
    int cand[64], n = 0;
    for (int p = 0; p < c->size && n < 64; p++) {
        fl__xfer *x = &c->xf[p];
        /* the failing peer itself may have sent a notice before closing */
        if (!c->conns[p] || c->idle_blocked[p] || c->peer_closed[p] || p == c->rank) continue;
        if (x->r_on && (x->r_hdone > 0 || x->r_done > 0)) continue; /* mid-message: not a boundary */
        cand[n++] = p;
    }
    c->abort_seen = 0;
    while (n > 0 && fl__now_ns() < dl) {
        int r = fl__coll_check_peers(c, d, cand, n);
        if (r != FL_OK && c->abort_seen) return fl__err(r, "%s (and %s)", fl_last_error(), first);
        if (r != FL_OK) break;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return fl__err(st, "%s", first);
}

static int step_send(fl_coll *c, const fl__coll_desc *d, int p, fl__xfer *x, int *progress)
{
    size_t total = FL_COLL_HDR + x->s_len;
    if (c->hb_left[p]) { /* a heartbeat cut short goes out first */
        int st = fl__coll_hb_flush(c, p);
        if (st == FL_EREMOTE) return fl__coll_closed_error(c, d, p, 0);
        if (st || c->hb_left[p]) return st;
    }
    while (x->s_done < total) {
        struct iovec iov[2];
        int n = 0;
        if (x->s_done < FL_COLL_HDR) {
            iov[n].iov_base = x->s_hdr + x->s_done;
            iov[n++].iov_len = FL_COLL_HDR - x->s_done;
            if (x->s_len) {
                iov[n].iov_base = (void *)x->s_buf;
                iov[n++].iov_len = x->s_len;
            }
        } else {
            iov[n].iov_base = (void *)(x->s_buf + (x->s_done - FL_COLL_HDR));
            iov[n++].iov_len = total - x->s_done;
        }
        size_t k;
        int st = fl_net_try_sendv(c->conns[p], iov, n, &k);
        if (st == FL_EREMOTE) return fl__coll_closed_error(c, d, p, 0);
        if (st) return st;
        if (!k) break;
        x->s_done += k;
        atomic_fetch_add_explicit(&c->bytes_sent, k, memory_order_relaxed);
        *progress = 1;
    }
    c->tx_mid[p] = x->s_done > 0 && x->s_done < total;
    if (x->s_done == total) x->s_on = 0;
    return FL_OK;
}

static int step_recv(fl_coll *c, const fl__coll_desc *d, int p, fl__xfer *x, int *progress)
{
    size_t k;
    while (x->r_hdone < FL_COLL_HDR) {
        int st = fl_net_try_recv(c->conns[p], x->r_hdr + x->r_hdone, FL_COLL_HDR - x->r_hdone, &k);
        if (st == FL_EREMOTE) return fl__coll_closed_error(c, d, p, x->r_hdone > 0);
        if (st) return st;
        if (!k) return FL_OK;
        x->r_hdone += k;
        c->heard_ns[p] = fl__now_ns();
        if (x->r_hdone < FL_COLL_HDR) continue;
        const uint8_t *h = x->r_hdr;
        if (fl__get_u32(h) != FL_COLL_WIRE_MAGIC)
            return fl__err(FL_EPROTO, "%s sent a message with a bad magic", fl__coll_peer(c, p));
        if (fl__get_u16(h + 4) == FL_COLL_MSG_HEARTBEAT) { /* alive, but no progress of this op */
            x->r_hdone = 0;
            continue;
        }
        *progress = 1;
        if (fl__get_u16(h + 4) == FL_COLL_MSG_ABORT) return fl__coll_read_abort(c, p, h);
        fl__coll_desc pd;
        fl__coll_hdr_desc(h, &pd);
        if (!fl__coll_desc_equal(&pd, d)) return fl__coll_mismatch_error(c, d, &pd, p);
        uint64_t tag = fl__get_u64(h + 32), len = fl__get_u64(h + 40);
        if (tag != x->r_tag || len != x->r_len) {
            char ds[160];
            fl__coll_desc_str(d, ds, sizeof ds);
            return fl__err(FL_EPROTO, "%s sent message %llx of %llu bytes during %s, expected %llx of %zu bytes",
                           fl__coll_peer(c, p), (unsigned long long)tag, (unsigned long long)len, ds,
                           (unsigned long long)x->r_tag, x->r_len);
        }
    }
    while (x->r_done < x->r_len) {
        int st = fl_net_try_recv(c->conns[p], x->r_buf + x->r_done, x->r_len - x->r_done, &k);
        if (st == FL_EREMOTE) return fl__coll_closed_error(c, d, p, 1);
        if (st) return st;
        if (!k) return FL_OK;
        x->r_done += k;
        c->heard_ns[p] = fl__now_ns();
        *progress = 1;
    }
    x->r_on = 0;
    return FL_OK;
}

static int timeout_error(fl_coll *c, const fl__coll_desc *d)
{
    char ds[160], who[512] = "";
    size_t o = 0;
    fl__coll_desc_str(d, ds, sizeof ds);
    for (int p = 0; p < c->size && o < sizeof who - 80; p++) {
        fl__xfer *x = &c->xf[p];
        if (x->r_on || x->s_on)
            o += (size_t)snprintf(who + o, sizeof who - o, "%s%s (%s)", o ? ", " : "", fl__coll_peer(c, p),
                                  x->r_on ? "nothing received" : "not reading");
    }
    return fl__err(FL_ETIMEDOUT,
                   "%s timed out after %d ms without progress waiting for %s (stalled, or busy in "
                   "another call)",
                   ds, c->timeout_ms, who);
}

int fl__tcp_run(fl_coll *c, const fl__coll_desc *d)
{
    int P = c->size;
    struct pollfd pf[P > 0 ? P : 1];
    int who[P > 0 ? P : 1];
    for (int p = 0; p < P; p++) c->idle_blocked[p] = 0;
    uint64_t last = fl__now_ns(), tmo = (uint64_t)c->timeout_ms * 1000000ull;
    for (;;) {
        int pending = 0, progress = 0, bad = -1, st = FL_OK;
        for (int p = 0; p < P && st == FL_OK; p++) {
            fl__xfer *x = &c->xf[p];
            if (x->s_on && (st = step_send(c, d, p, x, &progress)) != FL_OK) bad = p;
            if (st == FL_OK && x->r_on && (st = step_recv(c, d, p, x, &progress)) != FL_OK) bad = p;
            pending += x->s_on + x->r_on;
        }
        if (st == FL_EREMOTE) return linger_for_cause(c, d, bad, st);
        if (st) return st;
        if (!pending) return FL_OK;
        uint64_t now = fl__now_ns();
        if (progress) last = now;
        if (c->spin && now - last < SPIN_NS) {
            fl__cpu_relax();
            continue;
        }
        FL_CHECK(fl__coll_tick(c, d));
        uint64_t waited = fl__live_quiet(&c->live, last, now); /* not counting a stop of this process */
        if (waited >= tmo) return timeout_error(c, d);
        int n = 0;
        for (int p = 0; p < P; p++) {
            fl__xfer *x = &c->xf[p];
            if (!c->conns[p]) continue;
            short ev = (x->s_on || c->hb_left[p] ? POLLOUT : 0) |
                       (x->r_on || !(c->idle_blocked[p] || c->peer_closed[p]) ? POLLIN : 0);
            if (!ev) continue;
            pf[n].fd = fl_net_conn_fd(c->conns[p]);
            pf[n].events = ev;
            pf[n].revents = 0;
            who[n++] = p;
        }
        uint64_t left = tmo - waited;
        if (c->hb_ms > 0 && left > TICK_SLICE_NS) left = TICK_SLICE_NS; /* wake for heartbeat work */
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        int r = ppoll(pf, (nfds_t)n, &ts, NULL);
        if (r < 0 && errno != EINTR) return fl__err(FL_EIO, "collective: poll failed: %s", strerror(errno));
        for (int i = 0; r > 0 && i < n; i++) {
            int p = who[i];
            if (pf[i].revents && !c->xf[p].r_on && (st = fl__coll_check_idle(c, d, p)) != FL_OK)
                return st == FL_EREMOTE ? linger_for_cause(c, d, p, st) : st;
        }
    }
}
