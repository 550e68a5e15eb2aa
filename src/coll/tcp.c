/*
 * tcp.c - the progress engine of the TCP collectives.  An algorithm queues, per peer, at
 * most one message out and one in (c->xf), then fl__tcp_run moves all of them at once over
 * the non-blocking sockets: it spins briefly when this host has a core per rank (a sleeping
 * process costs ~30-70 us to wake), then sleeps in poll.  Every received header is checked
 * against the caller's descriptor (a different collective or count is FL_EPROTO naming both
 * calls); idle connections are watched for abort notices and for peers that closed.  No
 * wait lasts longer than timeout_ms without progress.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "coll_internal.h"

#define SPIN_NS 50000ull     /* spin this long without progress before sleeping in poll */
#define LINGER_MS 200        /* after a peer closed: wait this long for a root-cause notice */

static const char *kind_name(int k)
{
    switch (k) {
    case K_ALLREDUCE: return "allreduce";
    case K_BROADCAST: return "broadcast";
    case K_ALLGATHER: return "allgather";
    case K_REDUCE_SCATTER: return "reduce_scatter";
    case K_BARRIER: return "barrier";
    default: return "unknown collective";
    }
}

void fl__coll_desc_str(const fl__coll_desc *d, char *buf, size_t cap)
{
    const char *dn = fl_dtype_name((fl_dtype)d->dtype);
    switch (d->kind) {
    case K_ALLREDUCE:
    case K_REDUCE_SCATTER:
        snprintf(buf, cap, "%s #%llu (count %llu, %s, %s)", kind_name(d->kind), (unsigned long long)d->seq,
                 (unsigned long long)d->count, dn, fl_coll_op_name((fl_coll_op)d->redop));
        break;
    case K_BROADCAST:
        snprintf(buf, cap, "broadcast #%llu (count %llu, %s, root %d)", (unsigned long long)d->seq,
                 (unsigned long long)d->count, dn, d->root);
        break;
    case K_ALLGATHER:
        snprintf(buf, cap, "allgather #%llu (count %llu, %s)", (unsigned long long)d->seq,
                 (unsigned long long)d->count, dn);
        break;
    default: snprintf(buf, cap, "%s #%llu", kind_name(d->kind), (unsigned long long)d->seq);
    }
}

int fl__coll_desc_equal(const fl__coll_desc *a, const fl__coll_desc *b)
{
    return a->seq == b->seq && a->count == b->count && a->kind == b->kind && a->dtype == b->dtype &&
           a->redop == b->redop && a->root == b->root;
}

void fl__tcp_hdr(uint8_t *h, const fl__coll_desc *d, uint16_t kind, uint64_t tag, uint64_t len)
{
    memset(h, 0, FL_COLL_HDR);
    fl__put_u32(h, FL_COLL_WIRE_MAGIC);
    fl__put_u16(h + 4, kind);
    fl__put_u16(h + 6, d->kind);
    fl__put_u64(h + 8, d->seq);
    fl__put_u64(h + 16, d->count);
    h[24] = d->dtype;
    h[25] = d->redop;
    fl__put_u32(h + 28, (uint32_t)d->root);
    fl__put_u64(h + 32, tag);
    fl__put_u64(h + 40, len);
}

static void hdr_desc(const uint8_t *h, fl__coll_desc *d)
{
    memset(d, 0, sizeof *d);
    d->kind = (uint8_t)fl__get_u16(h + 6);
    d->seq = fl__get_u64(h + 8);
    d->count = fl__get_u64(h + 16);
    d->dtype = h[24];
    d->redop = h[25];
    d->root = (int32_t)fl__get_u32(h + 28);
}

void fl__tcp_send(fl_coll *c, int p, const fl__coll_desc *d, uint64_t tag, const void *buf, size_t len)
{
    fl__xfer *x = &c->xf[p];
    x->s_on = 1;
    fl__tcp_hdr(x->s_hdr, d, FL_COLL_MSG_DATA, tag, len);
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

int fl__tcp_read_abort(fl_coll *c, int p, const uint8_t *h)
{
    fl__coll_desc pd;
    hdr_desc(h, &pd);
    uint64_t len = fl__get_u64(h + 40);
    int64_t st = (int64_t)fl__get_u64(h + 32);
    if (len > FL_COLL_MSG_MAX)
        return fl__err(FL_EPROTO, "%s sent an abort notice of %llu bytes (limit %d)", fl__coll_peer(c, p),
                       (unsigned long long)len, FL_COLL_MSG_MAX);
    char why[FL_COLL_MSG_MAX + 1];
    if (fl_net_recv_all(c->conns[p], why, len, fl_net_deadline(1000)) != FL_OK) len = 0;
    why[len] = 0;
    if (st >= 0 || st < FL_ESTATE) st = FL_EREMOTE;
    char ds[160];
    fl__coll_desc_str(&pd, ds, sizeof ds);
    c->abort_seen = 1;
    return fl__err((int)st, "%s aborted %s: %s", fl__coll_peer(c, p), ds, len ? why : "(no reason given)");
}

int fl__coll_closed_error(fl_coll *c, const fl__coll_desc *d, int p, int mid)
{
    char ds[160];
    fl__coll_desc_str(d, ds, sizeof ds);
    if (mid)
        return fl__err(FL_EREMOTE, "%s cut its connection in the middle of a message during %s (the process exited "
                                   "or crashed)", fl__coll_peer(c, p), ds);
    return fl__err(FL_EREMOTE, "%s closed its connection during %s (the process exited, crashed or freed its "
                               "communicator)", fl__coll_peer(c, p), ds);
}

static int mismatch_error(fl_coll *c, const fl__coll_desc *mine, const fl__coll_desc *theirs, int p)
{
    char a[160], b[160];
    fl__coll_desc_str(mine, a, sizeof a);
    fl__coll_desc_str(theirs, b, sizeof b);
    return fl__err(FL_EPROTO, "collective mismatch: rank %d (%s) called %s but %s called %s", c->rank,
                   c->endpoints[c->rank], a, fl__coll_peer(c, p), b);
}

/* Looks at the next header on peer p's connection (which must sit at a message boundary)
 * without consuming data.  Abort notices are consumed and turned into errors; a closed
 * peer is marked (not an error: it may have finished); a data message (for a later op)
 * marks the connection busy. */
static int check_idle(fl_coll *c, const fl__coll_desc *d, int p)
{
    uint8_t h[FL_COLL_HDR];
    size_t got;
    int st = fl_net_try_peek(c->conns[p], h, sizeof h, &got);
    if (st == FL_EREMOTE) {
        c->peer_closed[p] = 1;
        fl_clear_error();
        return FL_OK;
    }
    if (st) return st;
    if (got < sizeof h) return FL_OK;
    if (fl__get_u32(h) != FL_COLL_WIRE_MAGIC)
        return fl__err(FL_EPROTO, "%s sent a message with a bad magic", fl__coll_peer(c, p));
    if (fl__get_u16(h + 4) == FL_COLL_MSG_ABORT) {
        FL_CHECK(fl_net_recv_all(c->conns[p], h, sizeof h, fl_net_deadline(1000)));
        st = fl__tcp_read_abort(c, p, h);
        if (fl__get_u64(h + 8) <= d->seq) return st;
        /* The peer failed in a later op, so it finished this one: everything it owes us for
         * this op precedes the notice.  Finish this op; the next one fails. */
        c->pending_abort = st;
        snprintf(c->pending_msg, sizeof c->pending_msg, "%s", fl_last_error());
        fl_clear_error();
        c->idle_blocked[p] = 1;
        return FL_OK;
    }
    if (c->shm) return fl__err(FL_EPROTO, "%s sent data over TCP while shared memory is in use", fl__coll_peer(c, p));
    c->idle_blocked[p] = 1;
    return FL_OK;
}

int fl__tcp_check_peers(fl_coll *c, const fl__coll_desc *d, const int *only, int nonly)
{
    struct pollfd pf[64];
    int who[64], total = only ? nonly : c->size;
    for (int i = 0; i < total;) { /* in batches of 64 */
        int n = 0;
        for (; i < total && n < 64; i++) {
            int p = only ? only[i] : i;
            if (!c->conns[p] || c->idle_blocked[p] || c->peer_closed[p]) continue;
            pf[n].fd = fl_net_conn_fd(c->conns[p]);
            pf[n].events = POLLIN;
            pf[n].revents = 0;
            who[n++] = p;
        }
        if (n == 0 || poll(pf, (nfds_t)n, 0) <= 0) continue;
        for (int k = 0; k < n; k++)
            if (pf[k].revents) FL_CHECK(check_idle(c, d, who[k]));
    }
    return FL_OK;
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
        int r = fl__tcp_check_peers(c, d, cand, n);
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
        *progress = 1;
        if (x->r_hdone < FL_COLL_HDR) continue;
        const uint8_t *h = x->r_hdr;
        if (fl__get_u32(h) != FL_COLL_WIRE_MAGIC)
            return fl__err(FL_EPROTO, "%s sent a message with a bad magic", fl__coll_peer(c, p));
        if (fl__get_u16(h + 4) == FL_COLL_MSG_ABORT) return fl__tcp_read_abort(c, p, h);
        fl__coll_desc pd;
        hdr_desc(h, &pd);
        if (!fl__coll_desc_equal(&pd, d)) return mismatch_error(c, d, &pd, p);
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
    return fl__err(FL_ETIMEDOUT, "%s timed out after %d ms without progress waiting for %s (stalled, or busy in "
                                 "another call)", ds, c->timeout_ms, who);
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
        if (now - last >= tmo) return timeout_error(c, d);
        int n = 0;
        for (int p = 0; p < P; p++) {
            fl__xfer *x = &c->xf[p];
            if (!c->conns[p]) continue;
            short ev = (x->s_on ? POLLOUT : 0) | (x->r_on || !(c->idle_blocked[p] || c->peer_closed[p]) ? POLLIN : 0);
            if (!ev) continue;
            pf[n].fd = fl_net_conn_fd(c->conns[p]);
            pf[n].events = ev;
            pf[n].revents = 0;
            who[n++] = p;
        }
        uint64_t left = last + tmo - now;
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        int r = ppoll(pf, (nfds_t)n, &ts, NULL);
        if (r < 0 && errno != EINTR) return fl__err(FL_EIO, "collective: poll failed: %s", strerror(errno));
        for (int i = 0; r > 0 && i < n; i++) {
            int p = who[i];
            if (pf[i].revents && !c->xf[p].r_on && (st = check_idle(c, d, p)) != FL_OK)
                return st == FL_EREMOTE ? linger_for_cause(c, d, p, st) : st;
        }
    }
}
