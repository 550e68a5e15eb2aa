/*
 * desc.c - what every collective backend shares, whatever moves its data: the op
 * descriptor (its text, equality, and the wire header that carries it), the peer labels
 * and the errors that name them (mismatch, closed connection, abort notice), the watch over
 * the communicator's TCP connections (which stay open with every backend: they carry abort
 * notices and heartbeats, and tell a rank that a peer died), and the scratch buffer.
 *
 * Nothing here depends on a backend: a backend file includes backend.h and calls these;
 * this file calls no backend.
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"

const char *fl__coll_peer(const fl_coll *c, int p)
{
    if (p >= 0 && p < c->size && c->conns && c->conns[p]) return fl_net_conn_label(c->conns[p]);
    return "(this rank)";
}

void *fl__coll_scratch(fl_coll *c, size_t n)
{
    if (n <= c->scratch_cap) return c->scratch;
    size_t cap = c->scratch_cap ? c->scratch_cap : 4096;
    while (cap < n) cap *= 2;
    void *p = fl__alloc_aligned(cap);
    if (!p) {
        fl__err(FL_ENOMEM, "collective: out of memory for %zu bytes of scratch space", cap);
        return NULL;
    }
    fl__free_aligned(c->scratch);
    c->scratch = p;
    c->scratch_cap = cap;
    return p;
}

/* ---- the descriptor ------------------------------------------------------------------------ */

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
        snprintf(buf, cap, "allgather #%llu (count %llu, %s)", (unsigned long long)d->seq, (unsigned long long)d->count,
                 dn);
        break;
    default: snprintf(buf, cap, "%s #%llu", kind_name(d->kind), (unsigned long long)d->seq);
    }
}

int fl__coll_desc_equal(const fl__coll_desc *a, const fl__coll_desc *b)
{
    return a->seq == b->seq && a->count == b->count && a->kind == b->kind && a->dtype == b->dtype && a->redop == b->redop &&
           a->root == b->root;
}

void fl__coll_hdr(uint8_t *h, const fl__coll_desc *d, uint16_t kind, uint64_t tag, uint64_t len)
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

void fl__coll_hdr_desc(const uint8_t *h, fl__coll_desc *d)
{
    memset(d, 0, sizeof *d);
    d->kind = (uint8_t)fl__get_u16(h + 6);
    d->seq = fl__get_u64(h + 8);
    d->count = fl__get_u64(h + 16);
    d->dtype = h[24];
    d->redop = h[25];
    d->root = (int32_t)fl__get_u32(h + 28);
}

/* ---- errors that name a peer ------------------------------------------------------------------ */

int fl__coll_mismatch_error(fl_coll *c, const fl__coll_desc *mine, const fl__coll_desc *theirs, int p)
{
    char a[160], b[160];
    fl__coll_desc_str(mine, a, sizeof a);
    fl__coll_desc_str(theirs, b, sizeof b);
    return fl__err(FL_EPROTO, "collective mismatch: rank %d (%s) called %s but %s called %s", c->rank,
                   c->endpoints[c->rank], a, fl__coll_peer(c, p), b);
}

int fl__coll_closed_error(fl_coll *c, const fl__coll_desc *d, int p, int mid)
{
    char ds[160];
    fl__coll_desc_str(d, ds, sizeof ds);
    if (mid)
        return fl__err(FL_EREMOTE,
                       "%s cut its connection in the middle of a message during %s (the process exited "
                       "or crashed)",
                       fl__coll_peer(c, p), ds);
    return fl__err(FL_EREMOTE,
                   "%s closed its connection during %s (the process exited, crashed or freed its "
                   "communicator)",
                   fl__coll_peer(c, p), ds);
}

int fl__coll_read_abort(fl_coll *c, int p, const uint8_t *h)
{
    fl__coll_desc pd;
    fl__coll_hdr_desc(h, &pd);
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

/* ---- the watch over the connections ------------------------------------------------------------ */

int fl__coll_check_idle(fl_coll *c, const fl__coll_desc *d, int p)
{
    uint8_t h[FL_COLL_HDR];
    size_t got;
    FL_CHECK(fl__coll_skip_heartbeats(c, p));
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
        st = fl__coll_read_abort(c, p, h);
        if (fl__get_u64(h + 8) <= d->seq) return st;
        /* The peer failed in a later op, so it finished this one: everything it owes us for
         * this op precedes the notice.  Finish this op; the next one fails. */
        c->pending_abort = st;
        snprintf(c->pending_msg, sizeof c->pending_msg, "%s", fl_last_error());
        fl_clear_error();
        c->idle_blocked[p] = 1;
        return FL_OK;
    }
    if (c->backend && !c->backend->data_on_conns)
        return fl__err(FL_EPROTO, "%s sent data over TCP while the '%s' backend is in use", fl__coll_peer(c, p),
                       c->backend->name);
    c->idle_blocked[p] = 1;
    return FL_OK;
}

int fl__coll_check_peers(fl_coll *c, const fl__coll_desc *d, const int *only, int nonly)
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
            if (pf[k].revents) FL_CHECK(fl__coll_check_idle(c, d, who[k]));
    }
    /* after the notices: an abort that explains a silence wins over the silence */
    return only ? FL_OK : fl__coll_tick(c, d);
}
