/*
 * ops.c - the public collectives: argument checks (naming the argument and the op), the
 * descriptor every call carries, the one-rank case (local copies), the call through the
 * communicator's backend (c->backend, chosen once in fl_coll_create), and the failure
 * rule: the first error breaks the communicator and notifies every peer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend.h"

static const char *op_names[FL_COLL_OP_COUNT] = {"sum", "max", "min", "avg"};

const char *fl_coll_op_name(fl_coll_op op) { return (unsigned)op < FL_COLL_OP_COUNT ? op_names[op] : "invalid"; }

int fl_coll_op_parse(const char *name, fl_coll_op *out)
{
    if (!name || !out) return fl__err(FL_EINVAL, "fl_coll_op_parse: name or out is NULL");
    for (int i = 0; name && i < FL_COLL_OP_COUNT; i++)
        if (!strcasecmp(name, op_names[i])) {
            *out = (fl_coll_op)i;
            return FL_OK;
        }
    return fl__err(FL_EINVAL, "unknown reduction '%s': expected sum, max, min or avg", name ? name : "(null)");
}

/* Starts an op: checks the handle and state, fills the descriptor.  Errors found later by
 * check() go through fl__coll_fail, so peers learn about them instead of timing out. */
static int enter(fl_coll *c, const char *fn, fl__coll_desc *d, int kind, size_t count, fl_dtype dt, int redop, int root)
{
    if (!c || c->magic != FL_COLL_MAGIC) return fl__err(FL_EINVAL, "%s: invalid communicator handle", fn);
    if (c->failed)
        return fl__err(FL_ESTATE,
                       "%s on rank %d: the communicator failed earlier and must be recreated (first error: "
                       "%s)",
                       fn, c->rank, c->failmsg);
    d->seq = ++c->seq;
    d->count = count;
    d->kind = (uint8_t)kind;
    d->dtype = (uint8_t)dt;
    d->redop = (uint8_t)redop;
    d->pad = 0;
    d->root = root;
    c->cur = *d;
    if (c->pending_abort) /* a peer failed in this op while we finished the previous one */
        return fl__coll_fail(c, fl__err(c->pending_abort, "%s", c->pending_msg));
    return FL_OK;
}

static int bad(fl_coll *c, int st) { return fl__coll_fail(c, st); }

static int check_dtype(fl_coll *c, const char *fn, fl_dtype dt, int reduction)
{
    int ok = dt == FL_FLOAT32 || dt == FL_FLOAT64 || dt == FL_INT64 || dt == FL_FLOAT16 || dt == FL_BFLOAT16 ||
             (!reduction && dt == FL_INT32);
    if (!ok)
        return bad(
            c, fl__err(FL_EINVAL, "%s on rank %d: dtype %d (%s) is not supported%s", fn, c->rank, (int)dt,
                       fl_dtype_name(dt), reduction ? " for reductions (float32, float64, int64, float16, bfloat16)" : ""));
    return FL_OK;
}

/* n elements of es bytes times k must fit in size_t. */
static int check_size(fl_coll *c, const char *fn, size_t n, size_t es, size_t k)
{
    if (es && n > SIZE_MAX / es / k)
        return bad(c, fl__err(FL_EINVAL, "%s on rank %d: count %zu overflows the buffer size", fn, c->rank, n));
    return FL_OK;
}

static int overlaps(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = a, *y = b;
    return na && nb && x < y + nb && y < x + na;
}

static int check_buf(fl_coll *c, const char *fn, const char *arg, const void *p, size_t bytes)
{
    if (!p && bytes)
        return bad(c, fl__err(FL_EINVAL, "%s on rank %d: %s is NULL with %zu bytes to move", fn, c->rank, arg, bytes));
    return FL_OK;
}

static int done(fl_coll *c, int st) { return st == FL_OK ? FL_OK : fl__coll_fail(c, st); }

/* The backend runs a collective holding op_mu: the heartbeat thread keeps off the
 * connections meanwhile (the collective's own waits send the heartbeats). */
#define RUN(c, call)          \
    do {                      \
        fl__coll_op_begin(c); \
        int st_ = (call);     \
        fl__coll_op_end(c);   \
        return done(c, st_);  \
    } while (0)

/* For a backend without reduce_scatter: an allreduce of the whole send buffer into a
 * temporary one, of which this rank keeps its part. */
static int reduce_scatter_by_allreduce(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t cpr,
                                       fl_dtype dt, fl_coll_op op)
{
    size_t bb = cpr * fl_dtype_size(dt);
    uint8_t *all = fl__alloc_aligned(bb * (size_t)c->size + 1);
    if (!all) return fl__err(FL_ENOMEM, "fl_coll_reduce_scatter: out of memory for %zu bytes", bb * (size_t)c->size);
    int st = c->backend->allreduce(c, d, send, all, cpr * (size_t)c->size, dt, op);
    if (st == FL_OK && bb) memcpy(recv, all + (size_t)c->rank * bb, bb);
    fl__free_aligned(all);
    return st;
}

/* A float32 allreduce with a 16-bit wire dtype (c->ar_dtype): round into c->cbuf, reduce
 * it in place through the backend (fl__coll_reduce widens every partial sum to float32),
 * widen into recv.  A non-finite float16 result is an error after the collective
 * completed, the same on every rank (they hold the same result), so the communicator is
 * not failed. */
static int allreduce_compressed(fl_coll *c, const fl__coll_desc *d, const float *send, float *recv, size_t n,
                                fl_coll_op op)
{
    const fl_dtype wt = c->ar_dtype;
    if (n > c->cbuf_cap) {
        uint16_t *nb = realloc(c->cbuf, n * sizeof *nb);
        if (!nb) return done(c, fl__err(FL_ENOMEM, "fl_coll_allreduce: out of memory for %zu 16-bit values", n));
        c->cbuf = nb;
        c->cbuf_cap = n;
    }
    fl__coll_from_f32(c->cbuf, wt, send, n);
    fl__coll_op_begin(c);
    c->wire_half = 1;
    int st = c->backend->allreduce(c, d, c->cbuf, c->cbuf, n, wt, op);
    c->wire_half = 0;
    fl__coll_op_end(c);
    if (st != FL_OK) return done(c, st);
    fl__coll_to_f32(recv, c->cbuf, wt, n);
    if (wt == FL_FLOAT16)
        for (size_t i = 0; i < n; i++)
            if (!isfinite(recv[i]))
                return fl__err(FL_EINVAL,
                               "fl_coll_allreduce on rank %d: element %zu of %zu is %g in float16 (allreduce_dtype "
                               "float16): a value or sum beyond float16's range (+-65504) or a non-finite input; "
                               "use bfloat16 or float32, or scale the values down",
                               c->rank, i, n, (double)recv[i]);
    return FL_OK;
}

int fl_coll_allreduce(fl_coll *c, const void *send, void *recv, size_t count, fl_dtype dt, fl_coll_op op)
{
    const char *fn = "fl_coll_allreduce";
    fl__coll_desc d;
    FL_CHECK(enter(c, fn, &d, K_ALLREDUCE, count, dt, op, 0));
    FL_CHECK(check_dtype(c, fn, dt, 1));
    if ((unsigned)op >= FL_COLL_OP_COUNT)
        return bad(c, fl__err(FL_EINVAL, "%s on rank %d: reduction op %d is invalid", fn, c->rank, (int)op));
    size_t es = fl_dtype_size(dt);
    FL_CHECK(check_size(c, fn, count, es, (size_t)c->size));
    size_t nb = count * es;
    FL_CHECK(check_buf(c, fn, "send", send, nb));
    FL_CHECK(check_buf(c, fn, "recv", recv, nb));
    if (send != recv && overlaps(send, nb, recv, nb))
        return bad(c, fl__err(FL_EINVAL, "%s on rank %d: send and recv overlap without being equal", fn, c->rank));
    if (c->size == 1) {
        const void *srcs[1] = {send};
        fl__coll_reduce(recv, dt, srcs, 1, dt, count, op, 1);
        return FL_OK;
    }
    if (dt == FL_FLOAT32 && c->ar_dtype != FL_FLOAT32) return allreduce_compressed(c, &d, send, recv, count, op);
    RUN(c, c->backend->allreduce(c, &d, send, recv, count, dt, op));
}

int fl_coll_broadcast(fl_coll *c, void *buf, size_t count, fl_dtype dt, int root)
{
    const char *fn = "fl_coll_broadcast";
    fl__coll_desc d;
    FL_CHECK(enter(c, fn, &d, K_BROADCAST, count, dt, 0, root));
    FL_CHECK(check_dtype(c, fn, dt, 0));
    if (root < 0 || root >= c->size)
        return bad(c, fl__err(FL_EINVAL, "%s on rank %d: root %d out of range [0, %d)", fn, c->rank, root, c->size));
    size_t es = fl_dtype_size(dt);
    FL_CHECK(check_size(c, fn, count, es, 1));
    FL_CHECK(check_buf(c, fn, "buf", buf, count * es));
    if (c->size == 1) return FL_OK;
    RUN(c, c->backend->broadcast(c, &d, buf, count, dt, root));
}

int fl_coll_allgather(fl_coll *c, const void *send, void *recv, size_t cpr, fl_dtype dt)
{
    const char *fn = "fl_coll_allgather";
    fl__coll_desc d;
    FL_CHECK(enter(c, fn, &d, K_ALLGATHER, cpr, dt, 0, 0));
    FL_CHECK(check_dtype(c, fn, dt, 0));
    size_t es = fl_dtype_size(dt);
    FL_CHECK(check_size(c, fn, cpr, es, (size_t)c->size));
    size_t bb = cpr * es;
    FL_CHECK(check_buf(c, fn, "send", send, bb));
    FL_CHECK(check_buf(c, fn, "recv", recv, bb * (size_t)c->size));
    const uint8_t *mine = (const uint8_t *)recv + (size_t)c->rank * bb;
    if ((const void *)mine != send && overlaps(send, bb, recv, bb * (size_t)c->size))
        return bad(c, fl__err(FL_EINVAL, "%s on rank %d: send overlaps recv but is not recv + rank * count_per_rank", fn,
                              c->rank));
    if (c->size == 1) {
        if (bb && (const void *)mine != send) memcpy(recv, send, bb);
        return FL_OK;
    }
    RUN(c, c->backend->allgather(c, &d, send, recv, cpr, dt));
}

int fl_coll_reduce_scatter(fl_coll *c, const void *send, void *recv, size_t cpr, fl_dtype dt, fl_coll_op op)
{
    const char *fn = "fl_coll_reduce_scatter";
    fl__coll_desc d;
    FL_CHECK(enter(c, fn, &d, K_REDUCE_SCATTER, cpr, dt, op, 0));
    FL_CHECK(check_dtype(c, fn, dt, 1));
    if ((unsigned)op >= FL_COLL_OP_COUNT)
        return bad(c, fl__err(FL_EINVAL, "%s on rank %d: reduction op %d is invalid", fn, c->rank, (int)op));
    size_t es = fl_dtype_size(dt);
    FL_CHECK(check_size(c, fn, cpr, es, (size_t)c->size));
    size_t bb = cpr * es;
    FL_CHECK(check_buf(c, fn, "send", send, bb * (size_t)c->size));
    FL_CHECK(check_buf(c, fn, "recv", recv, bb));
    if (overlaps(send, bb * (size_t)c->size, recv, bb))
        return bad(c, fl__err(FL_EINVAL, "%s on rank %d: send and recv overlap", fn, c->rank));
    if (c->size == 1) {
        const void *srcs[1] = {send};
        fl__coll_reduce(recv, dt, srcs, 1, dt, cpr, op, 1);
        return FL_OK;
    }
    if (!c->backend->reduce_scatter) RUN(c, reduce_scatter_by_allreduce(c, &d, send, recv, cpr, dt, op));
    RUN(c, c->backend->reduce_scatter(c, &d, send, recv, cpr, dt, op));
}

int fl_coll_barrier(fl_coll *c)
{
    fl__coll_desc d;
    FL_CHECK(enter(c, "fl_coll_barrier", &d, K_BARRIER, 0, FL_FLOAT32, 0, 0));
    if (c->size == 1) return FL_OK;
    RUN(c, c->backend->barrier(c, &d));
}
