/*
 * tcp_ops.c - the "tcp" backend: its algorithms over the communicator's connections, moved
 * by the progress engine of tcp.c.  Its state (c->be) is one chunk of memory for ring
 * receives.  It is always available and never declines, so the automatic choice ends here.
 *
 *  direct exchange (payload <= small_max_bytes): every rank sends one message to every
 *    other rank and receives one from each, in one round; reductions then run locally in
 *    rank order, so every rank computes the same bits.  Also used for the barrier (empty
 *    messages) and small broadcasts (non-roots send empty messages, so every rank checks
 *    every other rank's descriptor).
 *  ring (larger payloads): reduce-scatter in P-1 steps (rank r sends segment r-s-1 to
 *    r+1, receives segment r-s-2 from r-1 and reduces it), so rank r ends with segment r;
 *    then allgather in P-1 steps.  Each step moves chunk_bytes messages, so the next chunk
 *    is in flight while one is reduced.  float16/bfloat16 partial sums travel as float32
 *    and are rounded once by the segment's owner.
 *  chain broadcast (larger payloads): root -> root+1 -> ... -> root-1, chunk by chunk,
 *    pipelined; the last rank sends an empty message back to the root so the root, too,
 *    checks a descriptor.
 */
#include <string.h>

#include "backend.h"

#define TAG(step, chunk) (((uint64_t)(step) << 32) | (uint64_t)(chunk))

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
/* Elements of chunk j of a segment of len elements in chunks of k. */
static size_t chunk_len(size_t len, size_t k, size_t j) { return j * k < len ? min_sz(k, len - j * k) : 0; }

/* Slot of peer p in a buffer holding one block per other rank. */
static size_t slot(const fl_coll *c, int p) { return (size_t)(p < c->rank ? p : p - 1); }

/* One round: to each peer p send sbuf(p) (slen bytes), receive rlen bytes into rbuf(p). */
static int direct_round(fl_coll *c, const fl__coll_desc *d, const uint8_t *sbase, size_t sstride, size_t slen,
                        uint8_t *rbase, size_t rlen, int per_peer_recv_slots)
{
    for (int p = 0; p < c->size; p++) {
        if (p == c->rank) continue;
        fl__tcp_send(c, p, d, TAG(0, 0), sbase ? sbase + (size_t)p * sstride : NULL, slen);
        uint8_t *rb = rbase ? rbase + (per_peer_recv_slots ? slot(c, p) * rlen : (size_t)p * rlen) : NULL;
        fl__tcp_recv(c, p, TAG(0, 0), rb, rlen);
    }
    return fl__tcp_run(c, d);
}

/* Ring reduce-scatter.  Segment i is in[off[i] .. off[i]+len[i]) (elements of adt).  The
 * partial sums of step s go to part + off[seg] (rot == 0; may be `in` itself) or to one of
 * two rotating buffers of maxlen elements at part (rot == 1).  Rank r's finished segment
 * (segment r) is written to out as odt, with AVG's division and half rounding applied. */
static int ring_rs(fl_coll *c, const fl__coll_desc *d, const uint8_t *in, fl_dtype adt, const size_t *off,
                   const size_t *len, size_t maxlen, uint8_t *part, int rot, void *out, fl_dtype odt, fl_coll_op op)
{
    int P = c->size, r = c->rank, right = (r + 1) % P, left = (r - 1 + P) % P;
    size_t aes = fl_dtype_size(adt), ods = fl_dtype_size(odt), k = c->chunk / aes;
    size_t nch = maxlen ? (maxlen + k - 1) / k : 1;
    fl_coll_op pop = op == FL_COLL_AVG ? FL_COLL_SUM : op;
    const uint8_t *prev = NULL; /* partial of the segment we send next (rot mode) */
    for (int s = 0; s < P - 1; s++) {
        int ss = ((r - s - 1) % P + P) % P, rs = ((r - s - 2) % P + P) % P, last = s == P - 2;
        const uint8_t *src = s == 0 ? in + off[ss] * aes : rot ? prev : part + off[ss] * aes;
        uint8_t *dst = rot ? part + (size_t)(s & 1) * maxlen * aes : part + off[rs] * aes;
        for (size_t j = 0; j < nch; j++) {
            size_t sl = chunk_len(len[ss], k, j), rl = chunk_len(len[rs], k, j);
            fl__tcp_send(c, right, d, TAG(s, j), src + j * k * aes, sl * aes);
            fl__tcp_recv(c, left, TAG(s, j), c->be, rl * aes);
            FL_CHECK(fl__tcp_run(c, d));
            if (!rl) continue;
            const void *srcs[2] = {in + (off[rs] + j * k) * aes, c->be};
            if (last) fl__coll_reduce((uint8_t *)out + j * k * ods, odt, srcs, 2, adt, rl, op, P);
            else fl__coll_reduce(dst + j * k * aes, adt, srcs, 2, adt, rl, pop, 1);
        }
        prev = dst;
    }
    return FL_OK;
}

/* Ring allgather of segments of buf (elements of size es): rank r starts with segment r. */
static int ring_ag(fl_coll *c, const fl__coll_desc *d, uint8_t *buf, size_t es, const size_t *off, const size_t *len,
                   size_t maxlen, int step0)
{
    int P = c->size, r = c->rank, right = (r + 1) % P, left = (r - 1 + P) % P;
    size_t k = c->chunk / es, nch = maxlen ? (maxlen + k - 1) / k : 1;
    for (int s = 0; s < P - 1; s++) {
        int ss = ((r - s) % P + P) % P, rs = ((r - s - 1) % P + P) % P;
        for (size_t j = 0; j < nch; j++) {
            fl__tcp_send(c, right, d, TAG(step0 + s, j), buf + (off[ss] + j * k) * es, chunk_len(len[ss], k, j) * es);
            fl__tcp_recv(c, left, TAG(step0 + s, j), buf + (off[rs] + j * k) * es, chunk_len(len[rs], k, j) * es);
            FL_CHECK(fl__tcp_run(c, d));
        }
    }
    return FL_OK;
}

/* Segment tables: even split of n (cpr == 0) or blocks of cpr. */
static int segs(fl_coll *c, size_t n, size_t cpr, size_t **off, size_t **len, size_t *maxlen)
{
    int P = c->size;
    *off = malloc(2 * (size_t)P * sizeof(size_t));
    if (!*off) return fl__err(FL_ENOMEM, "collective: out of memory");
    *len = *off + P;
    *maxlen = 0;
    for (int i = 0; i < P; i++) {
        (*off)[i] = cpr ? (size_t)i * cpr : fl__seg_off(n, P, i);
        (*len)[i] = cpr ? cpr : fl__seg_len(n, P, i);
        if ((*len)[i] > *maxlen) *maxlen = (*len)[i];
    }
    return FL_OK;
}

static int tcp_allreduce(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t n, fl_dtype dt,
                         fl_coll_op op)
{
    int P = c->size, r = c->rank;
    size_t es = fl_dtype_size(dt), nb = n * es;
    if (nb <= c->small_max || n < (size_t)P) {
        uint8_t *tmp = fl__coll_scratch(c, (size_t)(P - 1) * nb + 1);
        if (!tmp) return FL_ENOMEM;
        FL_CHECK(direct_round(c, d, send, 0, nb, tmp, nb, 1));
        const void *srcs[P];
        for (int p = 0; p < P; p++) srcs[p] = p == r ? send : tmp + slot(c, p) * nb;
        fl__coll_reduce(recv, dt, srcs, P, dt, n, op, P);
        return FL_OK;
    }
    size_t *off = NULL, *len = NULL, maxlen = 0;
    FL_CHECK(segs(c, n, 0, &off, &len, &maxlen));
    int st;
    uint8_t *out = (uint8_t *)recv + off[r] * es;
    /* 16-bit data: the partial sums travel as float32 (one rounding, at the end), except in
     * a compressed float32 allreduce (c->wire_half, ops.c), whose point is half the bytes:
     * there every hop adds in float32 and rounds to the 16-bit dtype again */
    if (fl__is_half(dt) && !c->wire_half) {
        float *acc = fl__coll_scratch(c, n * sizeof(float));
        if (!acc) {
            free(off);
            return FL_ENOMEM;
        }
        fl__coll_to_f32(acc, send, dt, n);
        st = ring_rs(c, d, (const uint8_t *)acc, FL_FLOAT32, off, len, maxlen, (uint8_t *)acc, 0, out, dt, op);
    } else {
        st = ring_rs(c, d, send, dt, off, len, maxlen, recv, 0, out, dt, op);
    }
    if (st == FL_OK) st = ring_ag(c, d, recv, es, off, len, maxlen, P);
    free(off);
    return st;
}

static int tcp_reduce_scatter(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t cpr, fl_dtype dt,
                              fl_coll_op op)
{
    int P = c->size, r = c->rank;
    size_t es = fl_dtype_size(dt), bb = cpr * es;
    if (bb * (size_t)P <= c->small_max) {
        uint8_t *tmp = fl__coll_scratch(c, (size_t)(P - 1) * bb + 1);
        if (!tmp) return FL_ENOMEM;
        FL_CHECK(direct_round(c, d, send, bb, bb, tmp, bb, 1));
        const void *srcs[P];
        for (int p = 0; p < P; p++) srcs[p] = p == r ? (const uint8_t *)send + (size_t)r * bb : tmp + slot(c, p) * bb;
        fl__coll_reduce(recv, dt, srcs, P, dt, cpr, op, P);
        return FL_OK;
    }
    size_t *off = NULL, *len = NULL, maxlen = 0;
    FL_CHECK(segs(c, 0, cpr, &off, &len, &maxlen));
    int st;
    if (fl__is_half(dt)) {
        float *acc = fl__coll_scratch(c, (size_t)P * cpr * sizeof(float));
        st = acc ? FL_OK : FL_ENOMEM;
        if (acc) {
            fl__coll_to_f32(acc, send, dt, (size_t)P * cpr);
            st = ring_rs(c, d, (const uint8_t *)acc, FL_FLOAT32, off, len, maxlen, (uint8_t *)acc, 0, recv, dt, op);
        }
    } else {
        uint8_t *part = fl__coll_scratch(c, 2 * bb);
        st = part ? ring_rs(c, d, send, dt, off, len, maxlen, part, 1, recv, dt, op) : FL_ENOMEM;
    }
    free(off);
    return st;
}

static int tcp_allgather(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t cpr, fl_dtype dt)
{
    int P = c->size, r = c->rank;
    size_t es = fl_dtype_size(dt), bb = cpr * es;
    uint8_t *mine = (uint8_t *)recv + (size_t)r * bb;
    if (bb && (const void *)mine != send) memmove(mine, send, bb);
    if (bb * (size_t)P <= c->small_max) {
        for (int p = 0; p < P; p++) {
            if (p == r) continue;
            fl__tcp_send(c, p, d, TAG(0, 0), mine, bb);
            fl__tcp_recv(c, p, TAG(0, 0), (uint8_t *)recv + (size_t)p * bb, bb);
        }
        return fl__tcp_run(c, d);
    }
    size_t *off = NULL, *len = NULL, maxlen = 0;
    FL_CHECK(segs(c, 0, cpr, &off, &len, &maxlen));
    int st = ring_ag(c, d, recv, es, off, len, maxlen, 0);
    free(off);
    return st;
}

static int tcp_broadcast(fl_coll *c, const fl__coll_desc *d, void *buf, size_t n, fl_dtype dt, int root)
{
    int P = c->size, r = c->rank;
    size_t es = fl_dtype_size(dt), nb = n * es;
    if (nb <= c->small_max) {
        for (int p = 0; p < P; p++) {
            if (p == r) continue;
            fl__tcp_send(c, p, d, TAG(0, 0), r == root ? buf : NULL, r == root ? nb : 0);
            fl__tcp_recv(c, p, TAG(0, 0), p == root ? buf : NULL, p == root ? nb : 0);
        }
        return fl__tcp_run(c, d);
    }
    int pos = (r - root + P) % P, right = (r + 1) % P, left = (r - 1 + P) % P;
    size_t k = c->chunk / es, nch = (n + k - 1) / k;
    uint8_t *b = buf;
    if (pos == 0) {
        for (size_t j = 0; j < nch; j++) {
            fl__tcp_send(c, right, d, TAG(0, j), b + j * k * es, chunk_len(n, k, j) * es);
            FL_CHECK(fl__tcp_run(c, d));
        }
        fl__tcp_recv(c, left, TAG(1, 0), NULL, 0);
        return fl__tcp_run(c, d);
    }
    for (size_t j = 0; j <= nch; j++) {
        if (j < nch) fl__tcp_recv(c, left, TAG(0, j), b + j * k * es, chunk_len(n, k, j) * es);
        if (j > 0 && pos < P - 1)
            fl__tcp_send(c, right, d, TAG(0, j - 1), b + (j - 1) * k * es, chunk_len(n, k, j - 1) * es);
        FL_CHECK(fl__tcp_run(c, d));
    }
    if (pos == P - 1) {
        fl__tcp_send(c, right, d, TAG(1, 0), NULL, 0);
        return fl__tcp_run(c, d);
    }
    return FL_OK;
}

static int tcp_barrier(fl_coll *c, const fl__coll_desc *d) { return direct_round(c, d, NULL, 0, 0, NULL, 0, 1); }

static int tcp_setup(fl_coll *c, int named, uint64_t deadline_ns, int *used)
{
    (void)named;
    (void)deadline_ns;
    if (!(c->be = fl__alloc_aligned(c->chunk)))
        return fl__err(FL_ENOMEM, "fl_coll_create: out of memory for a %zu-byte chunk buffer", c->chunk);
    *used = 1;
    return FL_OK;
}

static void tcp_close(fl_coll *c)
{
    fl__free_aligned(c->be);
    c->be = NULL;
}

const fl__coll_backend fl__coll_backend_tcp = {
    .name = "tcp",
    .available = NULL,
    .setup = tcp_setup,
    .close = tcp_close,
    .allreduce = tcp_allreduce,
    .broadcast = tcp_broadcast,
    .allgather = tcp_allgather,
    .reduce_scatter = tcp_reduce_scatter,
    .barrier = tcp_barrier,
    .data_on_conns = 1,
};
