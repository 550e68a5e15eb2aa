/*
 * mpi.c - the "mpi" backend: the communicator's collectives run as MPI's nonblocking
 * collectives, for a job started by mpirun whose MPI_COMM_WORLD is exactly this
 * communicator (every collective-mode rank of `mpirun -np N`).  It runs only when named
 * (FLEET_COLL_BACKEND=mpi or fl_coll_opts.backend = "mpi"): its row follows "tcp".  Built
 * without Open MPI, it refuses with FL_EUNSUPPORTED.
 *
 * What it needs (available): MPI initialised (by fleet_role_mpi / fleet_init under mpirun,
 * or by the program) at MPI_THREAD_SERIALIZED or higher, since the fleet's communication
 * thread calls the collectives while the program's thread made the communicator; not yet
 * finalized; and MPI_COMM_WORLD of this communicator's size.  A parameter-server job's
 * workers are a subset of the world, so they cannot use it.  Nothing else may call MPI in
 * the process while one of these collectives runs (MPI_THREAD_SERIALIZED), and one
 * communicator at a time may use this backend.
 *
 * Setup.  Every world rank takes part (world == this communicator): MPI_Comm_idup of
 * MPI_COMM_WORLD, an MPI_Iallgather of (rank, hash of the endpoint list) on it that proves
 * every world process is a rank of this very communicator, then MPI_Comm_split with key
 * c->rank, so MPI rank == Fleet rank.  The first two are waited on with the deadline of
 * fl_coll_create; the split is blocking but runs only once every rank is known to be there.
 * Errors come back as codes (MPI_ERRORS_RETURN), never as MPI aborting the job.
 *
 * Descriptors.  Every op starts with an exchange of the 24-byte op descriptor: each rank
 * sends its own to every other rank (MPI_Isend) and receives theirs (MPI_Irecv) on the
 * private communicator; point-to-point traffic never matches collective traffic.  Only
 * when every peer's descriptor equals this rank's does the data move, so different calls
 * fail with FL_EPROTO naming both calls on every rank, before any data is combined.  It
 * also tells which ranks are late when a wait times out, and leaves nothing behind when it
 * fails: the receives still pending are cancelled, and the sends of 24 bytes are eager (they
 * complete locally).  The barrier is this exchange alone.  The cost is one small message to
 * and from every peer per op: about a microsecond on 2 ranks of one host, less than what a
 * nonblocking MPI collective costs over a blocking one at small sizes.
 *
 * Data.  MPI_Iallreduce / MPI_Ibcast / MPI_Iallgather / MPI_Ireduce_scatter_block on the
 * caller's buffers: float32 MPI_FLOAT, float64 MPI_DOUBLE, int64 MPI_INT64_T, int32
 * MPI_INT32_T (copies only), float16/bfloat16 copied as MPI_UINT16_T.  SUM/MAX/MIN are
 * MPI_SUM/MAX/MIN; AVG is MPI_SUM, then the division by world size of reduce.c (C
 * division for int64, as the other backends).  float16/bfloat16 reductions convert to float32
 * in a buffer of this backend, reduce that in MPI as float32 and round each result once to
 * nearest-even: the same single rounding as "tcp" and "shm", but the float32 partial sums
 * are added in the order of MPI's algorithm rather than in rank order, so with inexact sums
 * the last bit may differ from the other backends (with exact sums, as in the tests, the
 * results are identical).  Open MPI's algorithms reduce each element once and copy it, so
 * every rank holds the same bits.  int64 sums wrap in practice, as MPI adds in C.
 * Counts above INT_MAX elements (for allgather and reduce-scatter, above INT_MAX / world
 * size per rank) go in pieces; the pieces of allgather and reduce-scatter are one MPI_Ibcast
 * or MPI_Ireduce per rank.
 *
 * Waits.  A request is polled with MPI_Test (which also makes MPI progress): spinning for
 * 20 us when the host has a core per rank, then yielding the CPU between polls (a sleep would
 * stall MPI's progress on large messages).  Every 200 us the TCP connections are checked: an
 * abort notice fails the op at once; a peer whose connection closed fails it 1 s later
 * unless the op completes (a peer that finished the op and freed its communicator closes
 * too, and its last messages are then already here; a peer that died ends the whole job
 * under mpirun anyway).  A wait longer than timeout_ms fails with FL_ETIMEDOUT.
 *
 * What cannot be undone.  MPI cannot cancel a collective.  A rank that gives up while its
 * data collective is in flight (a peer stopped making progress in the middle of an op, after
 * the descriptors were exchanged) leaves that request behind: the communicator is broken
 * anyway, this backend's own buffers are then never freed, but MPI may still read or write
 * the caller's buffers of that call if the stalled peer resumes, until the process ends.
 * End the job after such a failure (what the fleet does); do not reuse those buffers.
 * Before posting a data collective the TCP connections are checked once more, so a rank
 * that arrives after the others gave up fails without posting anything.
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"

#ifndef FL_HAVE_MPI

static int mpi_unavailable(const fl_coll *c, const fl_coll_opts *o)
{
    (void)c;
    (void)o;
    return fl__err(FL_EUNSUPPORTED, "built without MPI (install libopenmpi-dev and rebuild)");
}

const fl__coll_backend fl__coll_backend_mpi = {.name = "mpi", .available = mpi_unavailable};

int fl__coll_mpi_max_count(fl_coll *c, size_t n)
{
    (void)c;
    (void)n;
    return fl__err(FL_EUNSUPPORTED, "fl__coll_mpi_max_count: built without MPI");
}

#else

#include <mpi.h>

#define DESC_BYTES 24
#define DESC_TAG 0x464c               /* "FL": the descriptor messages on the private communicator */
#define CHECK_NS 200000ull            /* poll the TCP connections this often while waiting */
#define SPIN_NS 20000ull              /* spin this long (only with a core per rank), then yield */
#define CLOSED_GRACE_NS 1000000000ull /* a closed peer fails a wait that lasts this much longer */
#define HALF_PIECE ((size_t)4 << 20)  /* float16/bfloat16 reductions: float32 elements at a time */

typedef struct {      /* the backend's state, c->be */
    MPI_Comm comm;    /* MPI rank == Fleet rank; errors return */
    size_t max_count; /* elements in one MPI call: INT_MAX (less in tests) */
    int stuck;        /* a request that never completed may still use the buffers below */
    uint8_t mine[DESC_BYTES];
    uint8_t *theirs; /* [size][DESC_BYTES] */
    MPI_Request *rq; /* [2 * size]: descriptor receives, then sends; or the pieces of an op */
    float *f32;      /* float16/bfloat16 reductions: the float32 copy */
    size_t f32_cap;  /* elements */
} mpi_be;

static int mpi_available(const fl_coll *c, const fl_coll_opts *o)
{
    (void)o;
    int init = 0, fin = 0, level = 0, world = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init)
        return fl__err(FL_ESTATE, "MPI is not initialised: the job was not started by mpirun (or the program neither "
                                  "made an MPI role nor called MPI_Init_thread)");
    if (fin) return fl__err(FL_ESTATE, "MPI was already finalized in this process");
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_SERIALIZED)
        return fl__err(FL_EUNSUPPORTED,
                       "MPI was initialised with thread level %d, below MPI_THREAD_SERIALIZED "
                       "(%d): the fleet's communication thread calls the collectives (initialise "
                       "MPI with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...))",
                       level, MPI_THREAD_SERIALIZED);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world != c->size)
        return fl__err(FL_EINVAL,
                       "this communicator has %d ranks, MPI_COMM_WORLD %d: the mpi backend needs a "
                       "communicator of every process mpirun started (a parameter-server job's workers "
                       "cannot use the mpi backend)",
                       c->size, world);
    return FL_OK;
}

/* ---- errors and waits ---------------------------------------------------------------------------- */

static int mpi_error(const fl__coll_desc *d, const char *call, int rc)
{
    char es[MPI_MAX_ERROR_STRING], ds[160] = "the mpi backend's setup";
    int len = 0;
    if (MPI_Error_string(rc, es, &len) != MPI_SUCCESS) snprintf(es, sizeof es, "MPI error code %d", rc);
    if (d) fl__coll_desc_str(d, ds, sizeof ds);
    return fl__err(FL_EIO, "%s: %s failed: %s", ds, call, es);
}

/* Waits for the n requests until deadline (absolute, fl__now_ns), polling the TCP
 * connections every CHECK_NS: an abort notice fails the wait at once, a closed peer after
 * CLOSED_GRACE_NS.  d: the op (NULL: the setup).  On FL_ETIMEDOUT the message says what was
 * awaited (late: the ranks, or NULL for "the other ranks"). */
static int wait_reqs(fl_coll *c, const fl__coll_desc *d, MPI_Request *rq, int n, uint64_t deadline, const char *late)
{
    static const fl__coll_desc none; /* seq 0: any abort notice during setup is for a later op */
    uint64_t t0 = fl__now_ns(), next = t0 + CHECK_NS, closed_at = 0;
    int closed = -1;
    for (;;) {
        int done = 0, rc = MPI_Testall(n, rq, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_error(d, "MPI_Testall", rc);
        if (done) return FL_OK;
        uint64_t now = fl__now_ns();
        if (now >= next) {
            FL_CHECK(fl__coll_check_peers(c, d ? d : &none, NULL, 0));
            for (int p = 0; closed < 0 && p < c->size; p++)
                if (c->peer_closed[p]) {
                    closed = p;
                    closed_at = now;
                }
            if (closed >= 0 && now - closed_at >= CLOSED_GRACE_NS) {
                if (d) return fl__coll_closed_error(c, d, closed, 0);
                return fl__err(FL_EREMOTE, "the mpi backend's setup: %s closed its connection (it failed: see its log)",
                               fl__coll_peer(c, closed));
            }
            next = now + CHECK_NS;
        }
        if (now >= deadline) {
            char ds[160] = "the mpi backend's setup";
            if (d) fl__coll_desc_str(d, ds, sizeof ds);
            return fl__err(FL_ETIMEDOUT,
                           "%s timed out after %d ms waiting in MPI for %s (stalled, or busy in another "
                           "call)",
                           ds, (int)((now - t0) / 1000000ull), late ? late : "the other ranks");
        }
        if (c->spin && now - t0 < SPIN_NS) fl__cpu_relax();
        else sched_yield();
    }
}

/* Waits for the n requests an op just posted (rc: what posting returned).  A request that
 * does not complete is left behind, and this backend's buffers with it. */
static int run(fl_coll *c, const fl__coll_desc *d, const char *call, int rc, MPI_Request *rq, int n)
{
    mpi_be *s = c->be;
    if (rc != MPI_SUCCESS) {
        s->stuck = 1; /* some of the n may have been posted */
        return mpi_error(d, call, rc);
    }
    int st = wait_reqs(c, d, rq, n, fl_net_deadline(c->timeout_ms), NULL);
    if (st) s->stuck = 1;
    return st;
}

/* ---- descriptors ------------------------------------------------------------------------------- */

static void pack(uint8_t *b, const fl__coll_desc *d)
{
    fl__put_u64(b, d->seq);
    fl__put_u64(b + 8, d->count);
    b[16] = d->kind;
    b[17] = d->dtype;
    b[18] = d->redop;
    b[19] = 0;
    fl__put_u32(b + 20, (uint32_t)d->root);
}

static void unpack(const uint8_t *b, fl__coll_desc *d)
{
    memset(d, 0, sizeof *d);
    d->seq = fl__get_u64(b);
    d->count = fl__get_u64(b + 8);
    d->kind = b[16];
    d->dtype = b[17];
    d->redop = b[18];
    d->root = (int32_t)fl__get_u32(b + 20);
}

/* After a failed exchange: the receives still pending are cancelled; a send still pending
 * (not seen with eager 24-byte messages) keeps this backend's buffers alive. */
static void abandon(fl_coll *c, int n)
{
    mpi_be *s = c->be;
    int nr = c->size - 1;
    for (int i = 0; i < n; i++) {
        if (s->rq[i] == MPI_REQUEST_NULL) continue;
        int done = 0;
        if (i < nr) {
            MPI_Cancel(&s->rq[i]);
            MPI_Wait(&s->rq[i], MPI_STATUS_IGNORE);
        } else if (MPI_Test(&s->rq[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) {
            s->stuck = 1;
        }
    }
}

/* "rank 1 (127.0.0.1:4001), rank 2 (...)": the peers whose descriptor has not arrived. */
static void late_ranks(fl_coll *c, char *buf, size_t cap)
{
    mpi_be *s = c->be;
    size_t o = 0;
    buf[0] = 0;
    for (int p = 0, i = 0; p < c->size; p++) {
        if (p == c->rank) continue;
        int done = 0;
        if (s->rq[i] != MPI_REQUEST_NULL) MPI_Test(&s->rq[i], &done, MPI_STATUS_IGNORE);
        if (s->rq[i] != MPI_REQUEST_NULL && o + 80 < cap)
            o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", fl__coll_peer(c, p));
        i++;
    }
    if (!o) snprintf(buf, cap, "the other ranks");
}

/* Every rank sends its descriptor to every other and receives theirs; FL_EPROTO naming
 * both calls when one differs.  On success every rank has entered this op; the connections
 * are then checked once more, so nothing is posted after a peer gave up. */
static int exchange(fl_coll *c, const fl__coll_desc *d)
{
    mpi_be *s = c->be;
    int P = c->size, n = 2 * (P - 1), i = 0, rc = MPI_SUCCESS;
    pack(s->mine, d);
    for (int k = 0; k < n; k++) s->rq[k] = MPI_REQUEST_NULL;
    for (int p = 0; p < P && rc == MPI_SUCCESS; p++)
        if (p != c->rank)
            rc = MPI_Irecv(s->theirs + (size_t)p * DESC_BYTES, DESC_BYTES, MPI_BYTE, p, DESC_TAG, s->comm, &s->rq[i++]);
    for (int p = 0; p < P && rc == MPI_SUCCESS; p++)
        if (p != c->rank) rc = MPI_Isend(s->mine, DESC_BYTES, MPI_BYTE, p, DESC_TAG, s->comm, &s->rq[i++]);
    if (rc != MPI_SUCCESS) s->rq[i - 1] = MPI_REQUEST_NULL; /* the call that failed made no request */
    int st = rc == MPI_SUCCESS ? wait_reqs(c, d, s->rq, n, fl_net_deadline(c->timeout_ms), NULL)
                               : mpi_error(d, "MPI_Isend/MPI_Irecv of the op descriptor", rc);
    if (st == FL_ETIMEDOUT) {
        char late[512], ds[160];
        late_ranks(c, late, sizeof late);
        fl__coll_desc_str(d, ds, sizeof ds);
        st = fl__err(FL_ETIMEDOUT, "%s timed out after %d ms waiting in MPI for %s (stalled, or busy in another call)", ds,
                     c->timeout_ms, late);
    }
    if (st) {
        char msg[FL_COLL_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", fl_last_error());
        abandon(c, n);
        return fl__err(st, "%s", msg);
    }
    for (int p = 0; p < P; p++) {
        if (p == c->rank) continue;
        fl__coll_desc pd;
        unpack(s->theirs + (size_t)p * DESC_BYTES, &pd);
        if (!fl__coll_desc_equal(&pd, d)) return fl__coll_mismatch_error(c, d, &pd, p);
    }
    return fl__coll_check_peers(c, d, NULL, 0);
}

/* ---- setup ------------------------------------------------------------------------------------- */

static void free_be(mpi_be *s)
{
    if (!s) return;
    free(s->theirs);
    free(s->rq);
    free(s->f32);
    free(s);
}

static void mpi_close(fl_coll *c)
{
    mpi_be *s = c->be;
    if (!s) return;
    int fin = 0;
    MPI_Finalized(&fin);
    /* freeing a communicator with requests in flight is allowed: MPI frees it when they end */
    if (!fin && s->comm != MPI_COMM_NULL) MPI_Comm_free(&s->comm);
    if (!s->stuck) free_be(s); /* else MPI may still use its buffers: see the top of this file */
    c->be = NULL;
}

static uint64_t endpoints_hash(const fl_coll *c)
{
    uint64_t h = 0;
    for (int i = 0; i < c->size; i++) h = fl__hash_u64(h ^ fl__hash_bytes(c->endpoints[i], strlen(c->endpoints[i])));
    return h;
}

/* MPI_Comm_idup of the world, a check that its processes are this communicator's ranks
 * (an allgather of rank and endpoint hash), then the split that orders them by rank. */
static int mpi_setup(fl_coll *c, int named, uint64_t dl, int *used)
{
    (void)named;
    *used = 0;
    int P = c->size, st = FL_OK, rc, wsize = 0, wrank = 0, crank = -1;
    mpi_be *s = calloc(1, sizeof *s);
    int64_t me[2] = {c->rank, (int64_t)endpoints_hash(c)}, *all = calloc((size_t)P, sizeof me);
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Request rq = MPI_REQUEST_NULL;
    if (!s || !all || !(s->theirs = calloc((size_t)P, DESC_BYTES)) || !(s->rq = calloc(2 * (size_t)P, sizeof *s->rq))) {
        free(all);
        free_be(s);
        return fl__err(FL_ENOMEM, "the mpi backend's setup: out of memory");
    }
    s->comm = MPI_COMM_NULL;
    s->max_count = INT_MAX;
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    if ((rc = MPI_Comm_idup(MPI_COMM_WORLD, &dup, &rq)) != MPI_SUCCESS) {
        st = mpi_error(NULL, "MPI_Comm_idup(MPI_COMM_WORLD)", rc);
        goto out;
    }
    /* on failure a pending idup is left behind: MPI cannot cancel it */
    if ((st = wait_reqs(c, NULL, &rq, 1, dl, "every process of MPI_COMM_WORLD to make this communicator")) != FL_OK)
        goto out;
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    if ((rc = MPI_Iallgather(me, 2, MPI_INT64_T, all, 2, MPI_INT64_T, dup, &rq)) != MPI_SUCCESS) {
        st = mpi_error(NULL, "MPI_Iallgather of the ranks", rc);
        goto out;
    }
    if ((st = wait_reqs(c, NULL, &rq, 1, dl, "every process of MPI_COMM_WORLD")) != FL_OK) {
        all = NULL; /* MPI may still write it */
        goto out;
    }
    uint8_t *seen = calloc((size_t)P, 1);
    if (!seen) st = fl__err(FL_ENOMEM, "out of memory");
    for (int w = 0; w < P && st == FL_OK; w++) {
        int64_t r = all[2 * w];
        if (all[2 * w + 1] != me[1] || r < 0 || r >= P || seen[r])
            st = fl__err(FL_EINVAL,
                         "the processes of MPI_COMM_WORLD are not the ranks of this communicator: world "
                         "rank %d is rank %lld of a communicator %s (every process mpirun started must "
                         "make the same communicator, each with its own rank)",
                         w, (long long)r,
                         all[2 * w + 1] != me[1] ? "with other endpoints" : "in which another process has that rank");
        else seen[r] = 1;
    }
    free(seen);
    if (st) goto out;
    /* every world process is here: the blocking split returns at once */
    if ((rc = MPI_Comm_split(dup, 0, c->rank, &s->comm)) != MPI_SUCCESS) {
        st = mpi_error(NULL, "MPI_Comm_split", rc);
        goto out;
    }
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->comm, &crank);
    if (crank != c->rank) st = fl__err(FL_EPROTO, "the mpi backend's setup: rank %d got MPI rank %d", c->rank, crank);
out:
    if (dup != MPI_COMM_NULL && rq == MPI_REQUEST_NULL) MPI_Comm_free(&dup);
    free(all);
    if (st) {
        if (s->comm != MPI_COMM_NULL) MPI_Comm_free(&s->comm);
        free_be(s);
        return fl__err(st, "fl_coll_create: the 'mpi' collective backend on rank %d (MPI_COMM_WORLD rank %d of %d): %s",
                       c->rank, wrank, wsize, fl_last_error());
    }
    c->be = s;
    *used = 1;
    FL_DEBUG(FL_SUB_COLL, "rank %d: mpi backend over MPI_COMM_WORLD rank %d", c->rank, wrank);
    return FL_OK;
}

int fl__coll_mpi_max_count(fl_coll *c, size_t n)
{
    if (!c || c->magic != FL_COLL_MAGIC || c->backend != &fl__coll_backend_mpi || !c->be || n < 1 || n > INT_MAX)
        return fl__err(FL_EINVAL,
                       "fl__coll_mpi_max_count: not a communicator of the mpi backend, or n %zu out of "
                       "range [1, INT_MAX]",
                       n);
    ((mpi_be *)c->be)->max_count = n;
    return FL_OK;
}

/* ---- the collectives ----------------------------------------------------------------------------- */

static MPI_Datatype mpi_type(fl_dtype dt)
{
    switch (dt) {
    case FL_FLOAT32: return MPI_FLOAT;
    case FL_FLOAT64: return MPI_DOUBLE;
    case FL_INT64: return MPI_INT64_T;
    case FL_INT32: return MPI_INT32_T;
    default: return MPI_UINT16_T; /* float16, bfloat16: copies only */
    }
}

static MPI_Op mpi_op(fl_coll_op op) { return op == FL_COLL_MAX ? MPI_MAX : op == FL_COLL_MIN ? MPI_MIN : MPI_SUM; }

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* The float32 buffer of float16/bfloat16 reductions, n elements. */
static float *f32_buf(fl_coll *c, size_t n)
{
    mpi_be *s = c->be;
    if (n <= s->f32_cap) return s->f32;
    float *f = malloc(n * sizeof *f);
    if (!f) {
        fl__err(FL_ENOMEM, "collective: out of memory for %zu bytes of float32 scratch space", n * sizeof *f);
        return NULL;
    }
    free(s->f32);
    s->f32 = f;
    s->f32_cap = n;
    return f;
}

static int mpi_barrier(fl_coll *c, const fl__coll_desc *d) { return exchange(c, d); }

static int mpi_allreduce(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t n, fl_dtype dt,
                         fl_coll_op op)
{
    mpi_be *s = c->be;
    size_t es = fl_dtype_size(dt);
    const uint8_t *in = send;
    uint8_t *out = recv;
    MPI_Request rq;
    int rc;
    FL_CHECK(exchange(c, d));
    if (fl__is_half(dt)) {
        size_t k = min_sz(min_sz(n, HALF_PIECE), s->max_count);
        float *f = n ? f32_buf(c, k) : NULL;
        if (n && !f) return FL_ENOMEM;
        for (size_t base = 0; base < n; base += k) {
            size_t l = min_sz(k, n - base);
            fl__coll_to_f32(f, in + base * es, dt, l);
            rc = MPI_Iallreduce(MPI_IN_PLACE, f, (int)l, MPI_FLOAT, mpi_op(op), s->comm, &rq);
            FL_CHECK(run(c, d, "MPI_Iallreduce", rc, &rq, 1));
            const void *src[1] = {f};
            fl__coll_reduce(out + base * es, dt, src, 1, FL_FLOAT32, l, op, c->size);
        }
        return FL_OK;
    }
    for (size_t base = 0; base < n; base += s->max_count) {
        size_t l = min_sz(s->max_count, n - base);
        const void *sb = in == out ? MPI_IN_PLACE : (const void *)(in + base * es);
        rc = MPI_Iallreduce(sb, out + base * es, (int)l, mpi_type(dt), mpi_op(op), s->comm, &rq);
        FL_CHECK(run(c, d, "MPI_Iallreduce", rc, &rq, 1));
    }
    if (op == FL_COLL_AVG && n) {
        const void *src[1] = {out};
        fl__coll_reduce(out, dt, src, 1, dt, n, FL_COLL_AVG, c->size);
    }
    return FL_OK;
}

static int mpi_broadcast(fl_coll *c, const fl__coll_desc *d, void *buf, size_t n, fl_dtype dt, int root)
{
    mpi_be *s = c->be;
    size_t es = fl_dtype_size(dt);
    MPI_Request rq;
    FL_CHECK(exchange(c, d));
    for (size_t base = 0; base < n; base += s->max_count) {
        size_t l = min_sz(s->max_count, n - base);
        int rc = MPI_Ibcast((uint8_t *)buf + base * es, (int)l, mpi_type(dt), root, s->comm, &rq);
        FL_CHECK(run(c, d, "MPI_Ibcast", rc, &rq, 1));
    }
    return FL_OK;
}

/* Counts per rank above this go in pieces (the totals inside MPI stay below INT_MAX). */
static size_t per_rank_max(const fl_coll *c)
{
    size_t k = ((const mpi_be *)c->be)->max_count / (size_t)c->size;
    return k ? k : 1;
}

static int mpi_allgather(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t cpr, fl_dtype dt)
{
    mpi_be *s = c->be;
    int P = c->size, rc = MPI_SUCCESS;
    size_t es = fl_dtype_size(dt), k = per_rank_max(c);
    uint8_t *out = recv, *mine = out + (size_t)c->rank * cpr * es;
    MPI_Datatype t = mpi_type(dt);
    FL_CHECK(exchange(c, d));
    if (!cpr) return FL_OK;
    if (cpr <= k) {
        const void *sb = (const void *)mine == send ? MPI_IN_PLACE : send;
        rc = MPI_Iallgather(sb, (int)cpr, t, out, (int)cpr, t, s->comm, &s->rq[0]);
        return run(c, d, "MPI_Iallgather", rc, s->rq, 1);
    }
    /* in pieces: each rank broadcasts piece j of its block, all P at once */
    if ((const void *)mine != send) memcpy(mine, send, cpr * es);
    k = s->max_count;
    for (size_t base = 0; base < cpr; base += k) {
        size_t l = min_sz(k, cpr - base);
        int q = 0;
        for (; q < P && rc == MPI_SUCCESS; q++)
            rc = MPI_Ibcast(out + ((size_t)q * cpr + base) * es, (int)l, t, q, s->comm, &s->rq[q]);
        FL_CHECK(run(c, d, "MPI_Ibcast (allgather piece)", rc, s->rq, q));
    }
    return FL_OK;
}

static int mpi_reduce_scatter(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t cpr, fl_dtype dt,
                              fl_coll_op op)
{
    mpi_be *s = c->be;
    int P = c->size, rc = MPI_SUCCESS;
    size_t es = fl_dtype_size(dt), k = per_rank_max(c);
    const uint8_t *in = send;
    uint8_t *out = recv;
    MPI_Request rq;
    FL_CHECK(exchange(c, d));
    if (!cpr) return FL_OK;
    if (fl__is_half(dt)) {
        /* pieces of l elements of every rank's block, packed as float32 blocks of l */
        size_t l0 = min_sz(min_sz(cpr, HALF_PIECE / (size_t)P ? HALF_PIECE / (size_t)P : 1), k);
        float *f = f32_buf(c, l0 * (size_t)P);
        if (!f) return FL_ENOMEM;
        for (size_t base = 0; base < cpr; base += l0) {
            size_t l = min_sz(l0, cpr - base);
            for (int q = 0; q < P; q++) fl__coll_to_f32(f + (size_t)q * l, in + ((size_t)q * cpr + base) * es, dt, l);
            rc = MPI_Ireduce_scatter_block(MPI_IN_PLACE, f, (int)l, MPI_FLOAT, mpi_op(op), s->comm, &rq);
            FL_CHECK(run(c, d, "MPI_Ireduce_scatter_block", rc, &rq, 1));
            const void *src[1] = {f};
            fl__coll_reduce(out + base * es, dt, src, 1, FL_FLOAT32, l, op, P);
        }
        return FL_OK;
    }
    MPI_Datatype t = mpi_type(dt);
    if (cpr <= k) {
        rc = MPI_Ireduce_scatter_block(send, recv, (int)cpr, t, mpi_op(op), s->comm, &rq);
        FL_CHECK(run(c, d, "MPI_Ireduce_scatter_block", rc, &rq, 1));
    } else { /* in pieces: one reduce per rank's block, to that rank, all P at once */
        k = s->max_count;
        for (size_t base = 0; base < cpr; base += k) {
            size_t l = min_sz(k, cpr - base);
            int q = 0;
            for (; q < P && rc == MPI_SUCCESS; q++)
                rc = MPI_Ireduce(in + ((size_t)q * cpr + base) * es, q == c->rank ? out + base * es : NULL, (int)l, t,
                                 mpi_op(op), q, s->comm, &s->rq[q]);
            FL_CHECK(run(c, d, "MPI_Ireduce (reduce_scatter piece)", rc, s->rq, q));
        }
    }
    if (op == FL_COLL_AVG) {
        const void *src[1] = {out};
        fl__coll_reduce(out, dt, src, 1, dt, cpr, FL_COLL_AVG, P);
    }
    return FL_OK;
}

const fl__coll_backend fl__coll_backend_mpi = {
    .name = "mpi",
    .available = mpi_available,
    .setup = mpi_setup,
    .close = mpi_close,
    .allreduce = mpi_allreduce,
    .broadcast = mpi_broadcast,
    .allgather = mpi_allgather,
    .reduce_scatter = mpi_reduce_scatter,
    .barrier = mpi_barrier,
    .data_on_conns = 0,
};

#endif
