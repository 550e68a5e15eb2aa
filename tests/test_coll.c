/*
 * test_coll.c - the collective communicator: every op, dtype and reduction against a serial
 * reference for 1..8 ranks (odd counts too), over shared memory and over TCP; uneven and
 * empty counts; 16M floats; each backend named (opts->backend, FLEET_COLL_BACKEND) rather
 * than chosen, and unknown or impossible backends refused; compressed allreduce
 * (allreduce_dtype bf16/fp16).  The failure cases (a rank killed or stopped, a wrong secret,
 * no secret, mismatched calls, a stalled rank, bad arguments): test_coll_fail.c; the harness
 * both use: collhelp.h.
 *
 * Inputs are small integers, so every sum is exact in every dtype and results must equal
 * the reference bit for bit (AVG too: both sides divide the exact sum once, in float32 for
 * float16/bfloat16, and round once).  The random-float case checks float32 sums within
 * 1e-5 of a float64 reference and that every rank holds identical bits.
 */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "collhelp.h"
#include "collref.h"

static uint64_t fnv(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

/* ---- correctness of each op ----------------------------------------------------------------- */

static const size_t SIZES[] = {0, 1, 7, 1000, 70001};
#define NSIZES 5

static void rank_allreduce(ch_world *w, int r, void *arg)
{
    (void)arg;
    fl_coll *c = ch_comm(w, r);
    int k = 0;
    for (int si = 0; si < NSIZES; si++)
        for (int di = 0; di < NDTS; di++)
            for (int oi = 0; oi < NOPS; oi++, k++) {
                size_t n = SIZES[si], es = fl_dtype_size(DTS[di]);
                void *s = xmalloc(n * es), *d = xmalloc(n * es), *ref = xmalloc(n * es);
                fill(s, DTS[di], n, r, 0);
                reference(ref, DTS[di], OPS[oi], n, w->P, 0);
                memset(d, 0xab, n * es);
                char what[64];
                snprintf(what, sizeof what, "allreduce %s%s", fl_coll_op_name(OPS[oi]), k % 2 ? " in place" : "");
                if (k % 2) {
                    memcpy(d, s, n * es);
                    CHECK_OK(fl_coll_allreduce(c, d, d, n, DTS[di], OPS[oi]));
                } else {
                    CHECK_OK(fl_coll_allreduce(c, s, d, n, DTS[di], OPS[oi]));
                }
                check_same(d, ref, DTS[di], n, what, r);
                free(s);
                free(d);
                free(ref);
            }
    fl_coll_free(c);
}

TEST(allreduce_shm)
{
    for (int P = 1; P <= 8; P++) ch_run(P, 1, rank_allreduce, NULL);
}

TEST(allreduce_tcp)
{
    for (int P = 2; P <= 8; P++) ch_run(P, 0, rank_allreduce, NULL);
}

static void rank_broadcast(ch_world *w, int r, void *arg)
{
    (void)arg;
    static const fl_dtype bdt[] = {FL_FLOAT32, FL_INT32, FL_FLOAT16, FL_INT64};
    fl_coll *c = ch_comm(w, r);
    for (int root = 0; root < w->P; root++)
        for (int si = 0; si < NSIZES; si++)
            for (int di = 0; di < 4; di++) {
                size_t n = SIZES[si], es = fl_dtype_size(bdt[di]);
                void *b = xmalloc(n * es), *ref = xmalloc(n * es);
                fill(ref, bdt[di], n, root + 100, 0);
                if (r == root) memcpy(b, ref, n * es);
                else fill(b, bdt[di], n, r, 5);
                CHECK_OK(fl_coll_broadcast(c, b, n, bdt[di], root));
                check_same(b, ref, bdt[di], n, "broadcast", r);
                free(b);
                free(ref);
            }
    fl_coll_free(c);
}

TEST(broadcast_every_root)
{
    static const int Ps[] = {1, 2, 3, 5, 8};
    for (int i = 0; i < 5; i++) {
        ch_run(Ps[i], 1, rank_broadcast, NULL);
        if (Ps[i] > 1) ch_run(Ps[i], 0, rank_broadcast, NULL);
    }
}

static void rank_allgather(ch_world *w, int r, void *arg)
{
    (void)arg;
    static const size_t cprs[] = {0, 1, 7, 1000, 20001};
    fl_coll *c = ch_comm(w, r);
    for (int si = 0; si < 5; si++)
        for (int di = 0; di < 2; di++)
            for (int inplace = 0; inplace < 2; inplace++) {
                fl_dtype dt = di ? FL_FLOAT64 : FL_FLOAT32;
                size_t n = cprs[si], es = fl_dtype_size(dt), P = (size_t)w->P;
                char *s = xmalloc(n * es), *d = xmalloc(P * n * es), *ref = xmalloc(P * n * es);
                for (int q = 0; q < w->P; q++) fill(ref + (size_t)q * n * es, dt, n, q, 0);
                memset(d, 0xcd, P * n * es);
                if (inplace) {
                    fill(d + (size_t)r * n * es, dt, n, r, 0);
                    CHECK_OK(fl_coll_allgather(c, d + (size_t)r * n * es, d, n, dt));
                } else {
                    fill(s, dt, n, r, 0);
                    CHECK_OK(fl_coll_allgather(c, s, d, n, dt));
                }
                check_same(d, ref, dt, P * n, inplace ? "allgather in place" : "allgather", r);
                free(s);
                free(d);
                free(ref);
            }
    fl_coll_free(c);
}

TEST(allgather)
{
    static const int Ps[] = {1, 2, 3, 5, 8};
    for (int i = 0; i < 5; i++) {
        ch_run(Ps[i], 1, rank_allgather, NULL);
        if (Ps[i] > 1) ch_run(Ps[i], 0, rank_allgather, NULL);
    }
}

static void rank_reduce_scatter(ch_world *w, int r, void *arg)
{
    (void)arg;
    static const size_t cprs[] = {0, 1, 7, 1000, 20001};
    fl_coll *c = ch_comm(w, r);
    for (int si = 0; si < 5; si++)
        for (int di = 0; di < NDTS; di++)
            for (int oi = 0; oi < NOPS; oi++) {
                size_t n = cprs[si], es = fl_dtype_size(DTS[di]), P = (size_t)w->P;
                void *s = xmalloc(P * n * es), *d = xmalloc(n * es), *ref = xmalloc(n * es);
                fill(s, DTS[di], P * n, r, 0);
                reference(ref, DTS[di], OPS[oi], n, w->P, (size_t)r * n);
                CHECK_OK(fl_coll_reduce_scatter(c, s, d, n, DTS[di], OPS[oi]));
                check_same(d, ref, DTS[di], n, "reduce_scatter", r);
                free(s);
                free(d);
                free(ref);
            }
    fl_coll_free(c);
}

TEST(reduce_scatter)
{
    static const int Ps[] = {1, 2, 3, 5, 8};
    for (int i = 0; i < 5; i++) {
        ch_run(Ps[i], 1, rank_reduce_scatter, NULL);
        if (Ps[i] > 1) ch_run(Ps[i], 0, rank_reduce_scatter, NULL);
    }
}

/* Every rank writes the time it enters the barrier into memory shared by all ranks; no
 * rank may leave before the last one entered. */
static void rank_barrier(ch_world *w, int r, void *arg)
{
    volatile double *entered = arg;
    fl_coll *c = ch_comm(w, r);
    for (int round = 0; round < 3; round++) {
        CHECK_OK(fl_coll_barrier(c));
        struct timespec ts = {0, (long)((r + round) % w->P) * 20000000L};
        nanosleep(&ts, NULL);
        entered[round * CH_MAXP + r] = ch_now();
        CHECK_OK(fl_coll_barrier(c));
        double left = ch_now();
        for (int q = 0; q < w->P; q++)
            if (entered[round * CH_MAXP + q] == 0 || entered[round * CH_MAXP + q] > left)
                TFAIL("rank %d left barrier round %d before rank %d entered it", r, round, q);
    }
    fl_coll_free(c);
}

TEST(barrier)
{
    static const int Ps[] = {2, 3, 5};
    double *entered = mmap(NULL, 3 * CH_MAXP * sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(entered != MAP_FAILED);
    for (int i = 0; i < 3; i++)
        for (int shm = 0; shm < 2; shm++) {
            memset(entered, 0, 3 * CH_MAXP * sizeof(double));
            ch_run(Ps[i], shm, rank_barrier, entered);
        }
    munmap(entered, 3 * CH_MAXP * sizeof(double));
}

/* ---- named backends -------------------------------------------------------------------------- */

/* Every op against the reference on P ranks with the backend named, and shared memory
 * allowed: "tcp" is then not what the automatic choice would take. */
static void named_suite(const char *name, int via_env, int P)
{
    double *entered = mmap(NULL, 3 * CH_MAXP * sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(entered != MAP_FAILED);
    memset(entered, 0, 3 * CH_MAXP * sizeof(double));
    ch_run_named(P, name, via_env, rank_allreduce, NULL);
    ch_run_named(P, name, via_env, rank_broadcast, NULL);
    ch_run_named(P, name, via_env, rank_allgather, NULL);
    ch_run_named(P, name, via_env, rank_reduce_scatter, NULL);
    ch_run_named(P, name, via_env, rank_barrier, entered);
    munmap(entered, 3 * CH_MAXP * sizeof(double));
}

TEST(named_backend_tcp)
{
    named_suite("tcp", 0, 3);
    named_suite("tcp", 1, 2);
}

TEST(named_backend_shm)
{
    named_suite("shm", 1, 3);
    named_suite("shm", 0, 2);
}

TEST(unknown_backend_is_refused)
{
    fl_coll_opts o = {0};
    fl_coll *c = NULL;
    o.world_size = 1;
    o.insecure_local = 1;
    o.backend = "gloo";
    CHECK_FAILS(fl_coll_create(&o, &c), FL_EINVAL, "unknown collective backend 'gloo' in fl_coll_opts.backend");
    CHECK_STR_HAS(fl_last_error(), "registered backends: shm, tcp, mpi");
    CHECK(c == NULL);
    o.backend = NULL;
    setenv("FLEET_COLL_BACKEND", "nccl", 1);
    CHECK_FAILS(fl_coll_create(&o, &c), FL_EINVAL, "unknown collective backend 'nccl' in FLEET_COLL_BACKEND");
    CHECK_STR_HAS(fl_last_error(), "registered backends: shm, tcp, mpi");
    o.backend = "TCP"; /* the field wins over the variable; case is ignored */
    CHECK_OK(fl_coll_create(&o, &c));
    CHECK_STR_EQ(fl_coll_backend_name(c), "self"); /* one rank: local copies */
    CHECK_EQ_INT(fl_coll_uses_shm(c), 0);
    fl_coll_free(c);
    setenv("FLEET_COLL_BACKEND", "auto", 1);
    o.backend = "";
    CHECK_OK(fl_coll_create(&o, &c));
    fl_coll_free(c);
    unsetenv("FLEET_COLL_BACKEND");
    CHECK(fl_coll_backend_name(NULL) == NULL);
}

TEST(shm_named_without_shared_memory_fails)
{
    ch_world w;
    ch_init(&w, 2, 0); /* disable_shm */
    w.backend = "shm";
    fl_coll_opts o = ch_opts(&w, 0);
    fl_coll *c = NULL;
    double t0 = ch_now();
    CHECK_FAILS(fl_coll_create(&o, &c), FL_EINVAL,
                "the 'shm' collective backend (from fl_coll_opts.backend) cannot be used: disable_shm is set");
    CHECK(ch_now() - t0 < 1.0); /* refused at once, not after waiting for rank 1 */
    CHECK(c == NULL);
    o.backend = NULL;
    setenv("FLEET_COLL_BACKEND", "shm", 1);
    CHECK_FAILS(fl_coll_create(&o, &c), FL_EINVAL, "'shm' collective backend (from FLEET_COLL_BACKEND)");
    CHECK_STR_HAS(fl_last_error(), "disable_shm is set");
    unsetenv("FLEET_COLL_BACKEND");
    fl_net_listener_free(w.ls[0]);
    fl_net_listener_free(w.ls[1]);
}

/* Rank 0 names tcp, rank 1 leaves the choice to the library: both refuse. */
static void rank_other_backend(ch_world *w, int r, void *arg)
{
    (void)arg;
    fl_coll_opts o = ch_opts(w, r);
    o.backend = r == 0 ? "tcp" : "auto";
    o.timeout_ms = 5000;
    fl_coll *c = NULL;
    CHECK_FAILS(fl_coll_create(&o, &c), FL_EINVAL, "asked for another collective backend");
    CHECK_STR_HAS(fl_last_error(), r == 0 ? "('tcp')" : "('auto')");
    fprintf(stderr, "  rank %d: %s\n", r, fl_last_error());
}

TEST(ranks_must_name_one_backend) { ch_run(2, 1, rank_other_backend, NULL); }

/* Tens of MB: 16M floats, and an uneven count over 3 ranks; every element checked. */
static void rank_big(ch_world *w, int r, void *arg)
{
    size_t n = *(const size_t *)arg;
    fl_coll *c = ch_comm(w, r);
    float *s = xmalloc(n * 4), *d = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) s[i] = (float)ival(r, i);
    CHECK_OK(fl_coll_allreduce(c, s, d, n, FL_FLOAT32, FL_COLL_SUM));
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < w->P; q++) want += (float)ival(q, i);
        if (d[i] != want) TFAIL("rank %d: element %zu is %g, expected %g", r, i, d[i], want);
    }
    CHECK_OK(fl_coll_allreduce(c, s, s, n, FL_FLOAT32, FL_COLL_MAX)); /* in place */
    for (size_t i = 0; i < n; i += 4099) {
        int64_t want = ival(0, i);
        for (int q = 1; q < w->P; q++) want = ival(q, i) > want ? ival(q, i) : want;
        CHECK_EQ_INT((int64_t)s[i], want);
    }
    free(s);
    free(d);
    fl_coll_free(c);
}

TEST(allreduce_16m_floats)
{
    size_t n = 16u << 20, n3 = (16u << 20) + 3;
    ch_run(2, 1, rank_big, &n);
    ch_run(2, 0, rank_big, &n);
    ch_run(3, 1, rank_big, &n3);
}

/* Random floats: within 1e-5 of a float64 reference, and identical bits on every rank. */
static void rank_random(ch_world *w, int r, void *arg)
{
    (void)arg;
    size_t n = 1u << 20;
    fl_coll *c = ch_comm(w, r);
    float *x = xmalloc(n * 4), *y = xmalloc(n * 4);
    th_fill_uniform(x, (int64_t)n, -1.0f, 1.0f, 1000u + (unsigned)r);
    CHECK_OK(fl_coll_allreduce(c, x, y, n, FL_FLOAT32, FL_COLL_SUM));
    float *ref = xmalloc(n * 4);
    double *acc = calloc(n, sizeof(double));
    for (int q = 0; q < w->P; q++) {
        th_fill_uniform(ref, (int64_t)n, -1.0f, 1.0f, 1000u + (unsigned)q);
        for (size_t i = 0; i < n; i++) acc[i] += ref[i];
    }
    for (size_t i = 0; i < n; i++) CHECK_NEAR(y[i], acc[i], 1e-5);
    int64_t h = (int64_t)(fnv(y, n * 4) >> 1), all[CH_MAXP];
    CHECK_OK(fl_coll_allgather(c, &h, all, 1, FL_INT64));
    for (int q = 0; q < w->P; q++) CHECK_EQ_INT(all[q], h);
    free(x);
    free(y);
    free(ref);
    free(acc);
    fl_coll_free(c);
}

TEST(allreduce_random_floats)
{
    for (int P = 2; P <= 5; P += 3) {
        ch_run(P, 1, rank_random, NULL);
        ch_run(P, 0, rank_random, NULL);
    }
}

/* ---- compressed allreduce (allreduce_dtype) ------------------------------------------------- */

typedef struct {
    const char *dtype; /* allreduce_dtype */
    size_t n;
    int overflow;    /* rank 1 puts 70000 (beyond float16) at element 5 */
    uint64_t *bytes; /* shared with the parent (MAP_SHARED): [rank] */
} cz_arg;

static float cz_val(int r, size_t i) { return (float)sin(0.001 * (double)i + 0.7 * r) * (1.0f + (float)(i % 5)); }

static void rank_compressed(ch_world *w, int r, void *arg)
{
    cz_arg *a = arg;
    fl_coll_opts o = ch_opts(w, r);
    o.allreduce_dtype = a->dtype;
    fl_coll *c = NULL;
    CHECK_OK(fl_coll_create(&o, &c));
    int half = strcmp(a->dtype, "float32") != 0;
    CHECK_EQ_INT(fl_coll_allreduce_dtype(c), !half ? FL_FLOAT32 : strstr(a->dtype, "b") ? FL_BFLOAT16 : FL_FLOAT16);
    float *x = xmalloc(a->n * 4), *y = xmalloc(a->n * 4);
    for (size_t i = 0; i < a->n; i++) x[i] = cz_val(r, i);
    if (a->overflow && r == 1) x[5] = 70000.0f;
    uint64_t b0 = fl_coll_bytes_sent(c);
    int st = fl_coll_allreduce(c, x, y, a->n, FL_FLOAT32, FL_COLL_SUM);
    a->bytes[r] = fl_coll_bytes_sent(c) - b0;
    if (a->overflow) {
        /* every rank: an error naming the element, and the communicator still works */
        CHECK_EQ_INT(st, FL_EINVAL);
        CHECK_STR_HAS(fl_last_error(), "element 5 of");
        CHECK_STR_HAS(fl_last_error(), "float16");
        x[5] = 1.0f;
        CHECK_OK(fl_coll_allreduce(c, x, y, a->n, FL_FLOAT32, FL_COLL_SUM));
    } else {
        CHECK_OK(st);
        /* float32 on the wire: exact up to float32 sums; 16 bits: a few ulps of the dtype,
         * relative to the sum of magnitudes (each partial sum is rounded again) */
        double tol = !half ? 1e-6 : strstr(a->dtype, "b") ? 4.0 / 256 : 4.0 / 2048;
        for (size_t i = 0; i < a->n; i++) {
            double ref = 0.0, mag = 0.0;
            for (int p = 0; p < w->P; p++) {
                ref += cz_val(p, i);
                mag += fabs(cz_val(p, i));
            }
            if (!(fabs(y[i] - ref) <= tol * mag + 1e-30))
                TFAIL("rank %d, %s: element %zu is %.8g, float64 sum %.8g (tolerance %.3g)", r, a->dtype, i, y[i], ref,
                      tol * mag);
        }
    }
    free(x);
    free(y);
    fl_coll_free(c);
}

/* The bytes rank 0 sent for one allreduce of n floats, checking the results. */
static uint64_t cz_run(int P, int shm, const char *dtype, size_t n, int overflow)
{
    uint64_t *bytes = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(bytes != MAP_FAILED);
    cz_arg a = {dtype, n, overflow, bytes};
    ch_run(P, shm, rank_compressed, &a);
    uint64_t b = bytes[0];
    munmap(bytes, 4096);
    return b;
}

TEST(compressed_allreduce_within_tolerance)
{
    static const char *const dts[] = {"bf16", "fp16", "bfloat16", "float16"};
    for (int shm = 0; shm < 2; shm++)
        for (int P = 2; P <= 3; P++)
            for (int i = 0; i < 4; i++) cz_run(P, shm, dts[i], i < 2 ? 100000 : 1000, 0);
}

/* Half the bytes on the wire, for both backends and both 16-bit dtypes. */
TEST(compressed_allreduce_halves_the_bytes)
{
    const size_t n = (size_t)1 << 20;
    for (int shm = 0; shm < 2; shm++) {
        uint64_t full = cz_run(2, shm, "float32", n, 0);
        CHECK(full >= n * 4 / 2); /* at least the half each rank contributes */
        for (int h = 0; h < 2; h++) {
            uint64_t half = cz_run(2, shm, h ? "fp16" : "bf16", n, 0);
            double ratio = (double)half / (double)full;
            if (!(ratio > 0.49 && ratio < 0.51))
                TFAIL("%s, %s: %llu bytes against %llu in float32 (ratio %.4f, expected 0.5)", shm ? "shm" : "tcp",
                      h ? "fp16" : "bf16", (unsigned long long)half, (unsigned long long)full, ratio);
        }
    }
}

TEST(fp16_overflow_is_an_error_on_every_rank)
{
    for (int shm = 0; shm < 2; shm++) cz_run(2, shm, "fp16", 1000, 1);
    for (int shm = 0; shm < 2; shm++) cz_run(3, shm, "fp16", 100000, 1);
}

TEST(allreduce_dtype_is_checked)
{
    ch_world w;
    ch_init(&w, 1, 0);
    fl_coll_opts o = ch_opts(&w, 0);
    o.allreduce_dtype = "int8";
    fl_coll *c = NULL;
    CHECK_FAILS(fl_coll_create(&o, &c), FL_EINVAL, "fl_coll_opts.allreduce_dtype = 'int8' is invalid");
    o.allreduce_dtype = NULL;
    setenv("FLEET_COLL_ALLREDUCE_DTYPE", "half", 1);
    CHECK_FAILS(fl_coll_create(&o, &c), FL_EINVAL, "FLEET_COLL_ALLREDUCE_DTYPE = 'half'");
    setenv("FLEET_COLL_ALLREDUCE_DTYPE", "bf16", 1);
    CHECK_OK(fl_coll_create(&o, &c));
    CHECK_EQ_INT(fl_coll_allreduce_dtype(c), FL_BFLOAT16);
    fl_coll_free(c);
    unsetenv("FLEET_COLL_ALLREDUCE_DTYPE");
}

/* Each rank raises its soft RLIMIT_NOFILE for its connections (one per peer), as PS servers
 * and clients do: a rank of a 1,000-rank job holds 999 of them, over a soft limit of 1024
 * with what else it has open. */
static void nofile_rank(ch_world *w, int r, void *arg)
{
    (void)arg;
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)(w->P - 1 + 256))
        TFAIL("the hard RLIMIT_NOFILE %llu is too low for this case", (unsigned long long)rl.rlim_max);
    rl.rlim_cur = 64;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    fl_coll *c = ch_comm(w, r);
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (r == 0)
        printf("  rank 0 of %d: soft RLIMIT_NOFILE 64 before fl_coll_create, %llu after\n", w->P,
               (unsigned long long)rl.rlim_cur);
    CHECK(rl.rlim_cur >= (rlim_t)(w->P - 1 + 256));
    fl_coll_free(c);
}

TEST(ranks_raise_their_descriptor_limit)
{
    ch_world w;
    ch_init(&w, 4, 0);
    ch_start(&w, nofile_rank, NULL);
    CHECK_EQ_INT(ch_wait(&w, -1), 0);
}

TEST_MAIN(T(ranks_raise_their_descriptor_limit), T(allreduce_shm), T(allreduce_tcp), T(broadcast_every_root), T(allgather),
          T(reduce_scatter), T(barrier), T(named_backend_tcp), T(named_backend_shm), T(unknown_backend_is_refused),
          T(shm_named_without_shared_memory_fails), T(ranks_must_name_one_backend), T(allreduce_16m_floats),
          T(allreduce_random_floats), T(compressed_allreduce_within_tolerance), T(compressed_allreduce_halves_the_bytes),
          T(fp16_overflow_is_an_error_on_every_rank), T(allreduce_dtype_is_checked))
