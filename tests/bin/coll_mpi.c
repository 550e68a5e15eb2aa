/*
 * coll_mpi.c - one rank of a collective communicator with the "mpi" backend, started by
 * mpirun in tests/test_coll_mpi.c.  Each rank initialises MPI (MPI_THREAD_SERIALIZED),
 * binds a listener on port 0 of 127.0.0.1 and learns the others' endpoints with one
 * MPI_Allgather, then makes the communicator with backend "mpi" (in fl_coll_opts.backend, or
 * through FLEET_COLL_BACKEND when that is set).
 *
 *   coll_mpi suite      every op, dtype and reduction against a serial reference (the cases
 *                       of tests/test_coll.c), bit for bit; random floats identical on every
 *                       rank; then again with at most 1000 elements per MPI call, so the
 *                       paths that split large counts run too
 *   coll_mpi mismatch   rank 1 calls another collective, then another count: FL_EPROTO on
 *                       every rank, naming both calls
 *   coll_mpi timeout    timeout_ms 500; rank 1 arrives 1.5 s late: the others fail with
 *                       FL_ETIMEDOUT naming rank 1, rank 1 with their abort
 *   coll_mpi subset     a communicator of fewer ranks than MPI_COMM_WORLD is refused
 *   coll_mpi single     MPI initialised at MPI_THREAD_SINGLE is refused
 *
 * Prints "OK <mode> rank=R" and exits 0 (after fl_coll_free and MPI_Finalize); a failed
 * check prints its location and exits 1.  Built without MPI it prints "built without MPI"
 * and exits 3.
 */
#include <time.h>

#include "testhelp.h"
#include <fleet/coll.h>
#include <fleet/net.h>

#ifndef FL_HAVE_MPI

int main(void)
{
    printf("built without MPI\n");
    return 3;
}

#else

#include <mpi.h>

#include "coll/backend.h" /* fl__coll_mpi_max_count */

static const fl_net_secret secret = {.bytes = "fleet-test-secret-0123456789abc", .len = 32};
static int R, P;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) TFAIL("out of memory");
    return p;
}

/* The communicator over MPI_COMM_WORLD's processes: world_size ranks (P, or fewer for the
 * subset case), this process being rank `rank`.  Returns the status of fl_coll_create. */
static int make(int world_size, int rank, int timeout_ms, fl_coll **out)
{
    fl_net_listener *l = NULL;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    char mine[64], *all = xmalloc((size_t)P * 64);
    const char *eps[64];
    memset(mine, 0, sizeof mine);
    snprintf(mine, sizeof mine, "%s", fl_net_listener_endpoint(l));
    if (MPI_Allgather(mine, 64, MPI_CHAR, all, 64, MPI_CHAR, MPI_COMM_WORLD) != MPI_SUCCESS) TFAIL("MPI_Allgather");
    for (int i = 0; i < P && i < 64; i++) eps[i] = all + (size_t)i * 64;
    fl_coll_opts o = {0};
    o.rank = rank;
    o.world_size = world_size;
    o.endpoints = eps;
    o.secret = &secret;
    o.timeout_ms = timeout_ms;
    o.listener = l;
    o.backend = getenv("FLEET_COLL_BACKEND") ? NULL : "mpi";
    int st = fl_coll_create(&o, out);
    fl_net_listener_free(l);
    free(all);
    return st;
}

static fl_coll *comm(int timeout_ms)
{
    fl_coll *c = NULL;
    CHECK_OK(make(P, R, timeout_ms, &c));
    const char *name = fl_coll_backend_name(c);
    if (!name || strcmp(name, "mpi")) TFAIL("backend is %s, expected mpi", name ? name : "(null)");
    CHECK_EQ_INT(fl_coll_uses_shm(c), 0);
    return c;
}

#include "collref.h"

static const size_t SIZES[] = {0, 1, 7, 1000, 70001};

/* the reference over this job's P ranks; a failure names this rank */
#define reference(out, dt, op, n, off) reference(out, dt, op, n, P, off)
#define check_same(got, want, dt, n, what) check_same(got, want, dt, n, what, R)

/* ---- suite ----------------------------------------------------------------------------------- */

static void allreduce_cases(fl_coll *c)
{
    int k = 0;
    for (int si = 0; si < 5; si++)
        for (int di = 0; di < 5; di++)
            for (int oi = 0; oi < 4; oi++, k++) {
                size_t n = SIZES[si], es = fl_dtype_size(DTS[di]);
                void *s = xmalloc(n * es), *d = xmalloc(n * es), *ref = xmalloc(n * es);
                fill(s, DTS[di], n, R, 0);
                reference(ref, DTS[di], OPS[oi], n, 0);
                memset(d, 0xab, n * es);
                char what[64];
                snprintf(what, sizeof what, "allreduce %s%s", fl_coll_op_name(OPS[oi]), k % 2 ? " in place" : "");
                if (k % 2) {
                    memcpy(d, s, n * es);
                    CHECK_OK(fl_coll_allreduce(c, d, d, n, DTS[di], OPS[oi]));
                } else {
                    CHECK_OK(fl_coll_allreduce(c, s, d, n, DTS[di], OPS[oi]));
                }
                check_same(d, ref, DTS[di], n, what);
                free(s);
                free(d);
                free(ref);
            }
}

static void broadcast_cases(fl_coll *c)
{
    static const fl_dtype bdt[] = {FL_FLOAT32, FL_INT32, FL_FLOAT16, FL_INT64};
    for (int root = 0; root < P; root++)
        for (int si = 0; si < 5; si++)
            for (int di = 0; di < 4; di++) {
                size_t n = SIZES[si], es = fl_dtype_size(bdt[di]);
                void *b = xmalloc(n * es), *ref = xmalloc(n * es);
                fill(ref, bdt[di], n, root + 100, 0);
                if (R == root) memcpy(b, ref, n * es);
                else fill(b, bdt[di], n, R, 5);
                CHECK_OK(fl_coll_broadcast(c, b, n, bdt[di], root));
                check_same(b, ref, bdt[di], n, "broadcast");
                free(b);
                free(ref);
            }
}

static void allgather_cases(fl_coll *c)
{
    static const size_t cprs[] = {0, 1, 7, 1000, 20001};
    static const fl_dtype gdt[] = {FL_FLOAT32, FL_FLOAT64, FL_INT32, FL_BFLOAT16};
    for (int si = 0; si < 5; si++)
        for (int di = 0; di < 4; di++)
            for (int inplace = 0; inplace < 2; inplace++) {
                fl_dtype dt = gdt[di];
                size_t n = cprs[si], es = fl_dtype_size(dt), np = (size_t)P;
                char *s = xmalloc(n * es), *d = xmalloc(np * n * es), *ref = xmalloc(np * n * es);
                for (int q = 0; q < P; q++) fill(ref + (size_t)q * n * es, dt, n, q, 0);
                memset(d, 0xcd, np * n * es);
                if (inplace) {
                    fill(d + (size_t)R * n * es, dt, n, R, 0);
                    CHECK_OK(fl_coll_allgather(c, d + (size_t)R * n * es, d, n, dt));
                } else {
                    fill(s, dt, n, R, 0);
                    CHECK_OK(fl_coll_allgather(c, s, d, n, dt));
                }
                check_same(d, ref, dt, np * n, inplace ? "allgather in place" : "allgather");
                free(s);
                free(d);
                free(ref);
            }
}

static void reduce_scatter_cases(fl_coll *c)
{
    static const size_t cprs[] = {0, 1, 7, 1000, 20001};
    for (int si = 0; si < 5; si++)
        for (int di = 0; di < 5; di++)
            for (int oi = 0; oi < 4; oi++) {
                size_t n = cprs[si], es = fl_dtype_size(DTS[di]), np = (size_t)P;
                void *s = xmalloc(np * n * es), *d = xmalloc(n * es), *ref = xmalloc(n * es);
                fill(s, DTS[di], np * n, R, 0);
                reference(ref, DTS[di], OPS[oi], n, (size_t)R * n);
                CHECK_OK(fl_coll_reduce_scatter(c, s, d, n, DTS[di], OPS[oi]));
                check_same(d, ref, DTS[di], n, "reduce_scatter");
                free(s);
                free(d);
                free(ref);
            }
}

/* No rank leaves a barrier before the last one entered it (one host: one clock). */
static void barrier_cases(fl_coll *c)
{
    for (int round = 0; round < 3; round++) {
        CHECK_OK(fl_coll_barrier(c));
        struct timespec ts = {0, (long)((R + round) % P) * 20000000L};
        nanosleep(&ts, NULL);
        double entered = now_s(), all[64];
        CHECK_OK(fl_coll_barrier(c));
        double left = now_s();
        CHECK_OK(fl_coll_allgather(c, &entered, all, 1, FL_FLOAT64));
        for (int q = 0; q < P; q++)
            if (all[q] > left) TFAIL("rank %d left barrier round %d before rank %d entered it", R, round, q);
    }
}

/* Random floats: within 1e-5 of a float64 reference, identical bits on every rank. */
static void random_case(fl_coll *c)
{
    size_t n = 1u << 20;
    float *x = xmalloc(n * 4), *y = xmalloc(n * 4), *ref = xmalloc(n * 4);
    double *acc = calloc(n, sizeof(double));
    th_fill_uniform(x, (int64_t)n, -1.0f, 1.0f, 1000u + (unsigned)R);
    CHECK_OK(fl_coll_allreduce(c, x, y, n, FL_FLOAT32, FL_COLL_SUM));
    for (int q = 0; q < P; q++) {
        th_fill_uniform(ref, (int64_t)n, -1.0f, 1.0f, 1000u + (unsigned)q);
        for (size_t i = 0; i < n; i++) acc[i] += ref[i];
    }
    for (size_t i = 0; i < n; i++) CHECK_NEAR(y[i], acc[i], 1e-5);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n * 4; i++) h = (h ^ ((const uint8_t *)y)[i]) * 1099511628211ull;
    int64_t mine = (int64_t)(h >> 1), all[64];
    CHECK_OK(fl_coll_allgather(c, &mine, all, 1, FL_INT64));
    for (int q = 0; q < P; q++) CHECK_EQ_INT(all[q], mine);
    free(x);
    free(y);
    free(ref);
    free(acc);
}

static void suite(void)
{
    fl_coll *c = comm(20000);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) CHECK_OK(fl__coll_mpi_max_count(c, 1000)); /* split counts into pieces of 1000 */
        allreduce_cases(c);
        broadcast_cases(c);
        allgather_cases(c);
        reduce_scatter_cases(c);
        barrier_cases(c);
    }
    random_case(c);
    fl_coll_free(c);
}

/* ---- failures -------------------------------------------------------------------------------- */

static void mismatch(void)
{
    for (int sc = 0; sc < 2; sc++) {
        fl_coll *c = comm(20000);
        float x[1001] = {0};
        CHECK_OK(fl_coll_allreduce(c, x, x, 10, FL_FLOAT32, FL_COLL_SUM)); /* a good call first */
        int st;
        if (sc == 0 && R == 1) st = fl_coll_broadcast(c, x, 1000, FL_FLOAT32, 0);
        else if (sc == 1 && R == P - 1) st = fl_coll_allreduce(c, x, x, 1001, FL_FLOAT32, FL_COLL_SUM);
        else st = fl_coll_allreduce(c, x, x, 1000, FL_FLOAT32, FL_COLL_SUM);
        fprintf(stderr, "  rank %d: %s: %s\n", R, fl_strerror(st), fl_last_error());
        CHECK_EQ_INT(st, FL_EPROTO);
        CHECK_STR_HAS(fl_last_error(), "collective mismatch");
        CHECK_STR_HAS(fl_last_error(), sc == 0 ? "broadcast #2 (count 1000, float32, root 0)" : "count 1001");
        CHECK_STR_HAS(fl_last_error(), "allreduce #2 (count 1000, float32, sum)");
        CHECK_EQ_INT(fl_coll_barrier(c), FL_ESTATE);
        fl_coll_free(c);
    }
}

static void timeout_case(void)
{
    fl_coll *c = comm(500);
    float x[4] = {0};
    CHECK_OK(fl_coll_barrier(c));
    if (R == 1) {
        struct timespec ts = {1, 500000000};
        nanosleep(&ts, NULL);
        int st = fl_coll_allreduce(c, x, x, 4, FL_FLOAT32, FL_COLL_SUM);
        fprintf(stderr, "  rank 1 after its nap: %s: %s\n", fl_strerror(st), fl_last_error());
        CHECK(st != FL_OK);
        CHECK_STR_HAS(fl_last_error(), "rank 0 (");
        CHECK_STR_HAS(fl_last_error(), "timed out");
    } else {
        double t0 = now_s();
        int st = fl_coll_allreduce(c, x, x, 4, FL_FLOAT32, FL_COLL_SUM);
        double dt = now_s() - t0;
        fprintf(stderr, "  rank %d after %.2f s: %s: %s\n", R, dt, fl_strerror(st), fl_last_error());
        CHECK_EQ_INT(st, FL_ETIMEDOUT);
        CHECK_STR_HAS(fl_last_error(), "allreduce #2 (count 4, float32, sum) timed out");
        CHECK_STR_HAS(fl_last_error(), "rank 1 (");
        if (!(dt >= 0.45 && dt < 1.5)) TFAIL("rank %d gave up after %.2f s (timeout 0.5 s)", R, dt);
    }
    CHECK_EQ_INT(fl_coll_barrier(c), FL_ESTATE);
    fl_coll_free(c);
}

static void subset(void)
{
    fl_coll *c = NULL;
    double t0 = now_s();
    CHECK_FAILS(make(P - 1 > 1 ? P - 1 : 2, R % 2, 5000, &c), FL_EINVAL,
                "the 'mpi' collective backend (from fl_coll_opts.backend) cannot be used: this communicator has");
    CHECK_STR_HAS(fl_last_error(), "a parameter-server job's workers cannot use the mpi backend");
    CHECK(now_s() - t0 < 2.0); /* refused before any connection */
    CHECK(c == NULL);
}

static void single(void)
{
    fl_coll *c = NULL;
    CHECK_FAILS(make(P, R, 5000, &c), FL_EUNSUPPORTED, "below MPI_THREAD_SERIALIZED");
    CHECK(c == NULL);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int provided = 0;
    MPI_Init_thread(NULL, NULL, strcmp(mode, "single") ? MPI_THREAD_SERIALIZED : MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (P > 64) TFAIL("at most 64 ranks");
    if (!strcmp(mode, "suite")) suite();
    else if (!strcmp(mode, "mismatch")) mismatch();
    else if (!strcmp(mode, "timeout")) timeout_case();
    else if (!strcmp(mode, "subset")) subset();
    else if (!strcmp(mode, "single")) single();
    else TFAIL("usage: coll_mpi suite|mismatch|timeout|subset|single");
    printf("OK %s rank=%d\n", mode, R);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}

#endif
