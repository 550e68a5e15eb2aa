/*
 * bench_allreduce.c - nccl-tests style allreduce sweep of Fleet's communicator (float32 sum,
 * out of place), over shared memory and over TCP, with NP ranks that this program forks
 * itself on 127.0.0.1 (default 2); or with the "mpi" backend, started by mpirun.
 *
 *   bench_allreduce [--np N] [--mode shm|tcp|both] [--seconds S] [--label L]
 *                   [--chunk BYTES] [--small BYTES] [--bind core|none] [--dtype D] [SIZE ...]
 *   mpirun -np N bench_allreduce --mode mpi [--seconds S] [--label L] [SIZE ...]
 *
 * --mode mpi: every process mpirun started is a rank (--np and --bind are mpirun's business);
 * each binds a listener on 127.0.0.1, the endpoints and rank 0's job secret travel by MPI,
 * and the communicator names backend "mpi" (a build without Open MPI refuses).
 *
 * --dtype sets fl_coll_opts.allreduce_dtype: float32 (default), bf16 or fp16 (the float32
 * buffers travel compressed; the path is then named e.g. "shm-bf16" in the output).  The
 * inputs are small integers, exact in all three, so the check stays exact.  Besides time
 * and bandwidth, rank 0's bytes on the transport per op (fl_coll_bytes_sent) are printed
 * (".bytes").
 *
 * --chunk and --small set fl_coll_opts.chunk_bytes and small_max_bytes (tuning).  --bind
 * core (default) pins rank r to CPU r mod ncpu, as mpirun binds its ranks by default;
 * --bind none leaves placement to the scheduler.
 * SIZE takes K/M suffixes (powers of two); default 4K 16K 64K 256K 1M 4M 16M 64M.  Per size
 * and path: 3 warm-up ops, one timed op to pick ITERS (targets S seconds, default 0.5, 3..2000),
 * a barrier, then ITERS ops; time/op = the slowest rank's elapsed time / ITERS (as the peer
 * benchmarks in bench/peers/mpi_allreduce_ref.c and bench/peers/gloo_allreduce_ref.py).  After the loop
 * every element of the result is checked against the exact sum (inputs are small integers).
 * algbw = bytes / time; busbw = algbw * 2(n-1)/n.
 *
 * Output: a human table on stderr, and machine lines on stdout as the peer programs print
 * them: "R\t<label>_<path>.<SIZE>.us\t<value>\tus/op" (also .p50us, .algbw, .busbw).
 */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fleet/coll.h"
#include "fleet/net.h"

#define CLI_NAME "bench_allreduce"
#define CLI_HELP_HINT                                                                                              \
    "usage: bench_allreduce [--np N] [--mode shm|tcp|both|mpi] [--seconds S] [--label L] [--chunk B] [--small B] " \
    "[--bind core|none] [--dtype float32|bf16|fp16] [SIZE ...]"
#include "bench_args.h"

#ifdef FL_HAVE_MPI
#include <mpi.h>
#endif

static long parse_size(const char *s)
{
    char *e;
    long v = strtol(s, &e, 10);
    if (*e == 'K' || *e == 'k') v <<= 10;
    else if (*e == 'M' || *e == 'm') v <<= 20;
    else if (*e) return -1;
    return v;
}

/* --chunk and --small for bench_args: a size ("64K", "4M") into a long */
static int opt_size(const char *v, void *dst)
{
    long x = parse_size(v);
    if (x < 0) return -1;
    *(long *)dst = x;
    return 0;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    int np, shm, bind;
    double seconds;
    long chunk, small;
    const char *label;
    const char *backend; /* fl_coll_opts.backend: NULL (shm or tcp by disable_shm), or "mpi" */
    const char *dtype;   /* fl_coll_opts.allreduce_dtype */
    int nsizes;
    const char **sizes;
    fl_net_secret secret;
    fl_net_listener *ls[64];
    const char *eps[64];
    char epbuf[64][32];
} bench_cfg;

#define DIE(...)                                            \
    do {                                                    \
        fprintf(stderr, "bench_allreduce rank %d: ", rank); \
        fprintf(stderr, __VA_ARGS__);                       \
        fprintf(stderr, "\n");                              \
        _exit(2);                                           \
    } while (0)

static void run_rank(bench_cfg *b, int rank)
{
    fl_coll_opts o = {0};
    o.rank = rank;
    o.world_size = b->np;
    o.endpoints = b->eps;
    o.secret = &b->secret;
    o.disable_shm = !b->shm;
    o.listener = b->ls[rank];
    o.timeout_ms = 60000;
    o.chunk_bytes = (size_t)b->chunk;
    o.small_max_bytes = (size_t)b->small;
    o.backend = b->backend;
    o.allreduce_dtype = b->dtype;
    fl_coll *c;
    if (fl_coll_create(&o, &c) != FL_OK) DIE("create: %s", fl_last_error());
    char path[64];
    int comp = b->dtype && strcmp(b->dtype, "float32");
    snprintf(path, sizeof path, "%s%s%s", fl_coll_backend_name(c), comp ? "-" : "", comp ? b->dtype : "");
    if (rank == 0)
        fprintf(stderr, "# %s path, %d ranks, float32 sum, out of place\n# %10s %12s %12s %10s %10s %8s\n", path, b->np,
                "size(B)", "time(us)", "p50(us)", "algbw", "busbw", "#wrong");
    for (int si = 0; si < b->nsizes; si++) {
        long bytes = parse_size(b->sizes[si]);
        size_t n = (size_t)bytes / 4;
        float *s = malloc(n * 4 + 4), *r = malloc(n * 4 + 4);
        if (!s || !r) DIE("out of memory");
        for (size_t i = 0; i < n; i++) s[i] = (float)(rank + 1 + (int)(i % 7));
        memset(r, 0, n * 4);
        for (int w = 0; w < 3; w++)
            if (fl_coll_allreduce(c, s, r, n, FL_FLOAT32, FL_COLL_SUM)) DIE("allreduce: %s", fl_last_error());
        if (fl_coll_barrier(c)) DIE("barrier: %s", fl_last_error());
        double t = now_s();
        if (fl_coll_allreduce(c, s, r, n, FL_FLOAT32, FL_COLL_SUM)) DIE("allreduce: %s", fl_last_error());
        t = now_s() - t;
        if (fl_coll_allreduce(c, &t, &t, 1, FL_FLOAT64, FL_COLL_MAX)) DIE("allreduce: %s", fl_last_error());
        int iters = (int)(b->seconds / (t > 1e-9 ? t : 1e-9));
        iters = iters < 3 ? 3 : iters > 2000 ? 2000 : iters;
        double *ts = malloc(sizeof(double) * (size_t)iters);
        if (fl_coll_barrier(c)) DIE("barrier: %s", fl_last_error());
        uint64_t sent0 = fl_coll_bytes_sent(c);
        double t0 = now_s(), tp = t0;
        for (int i = 0; i < iters; i++) {
            if (fl_coll_allreduce(c, s, r, n, FL_FLOAT32, FL_COLL_SUM)) DIE("allreduce: %s", fl_last_error());
            double tn = now_s();
            ts[i] = tn - tp;
            tp = tn;
        }
        double el = now_s() - t0;
        double sent = (double)(fl_coll_bytes_sent(c) - sent0) / iters;
        if (fl_coll_allreduce(c, &el, &el, 1, FL_FLOAT64, FL_COLL_MAX)) DIE("allreduce: %s", fl_last_error());
        int64_t wrong = 0;
        float base = (float)(b->np * (b->np + 1) / 2);
        for (size_t i = 0; i < n; i++) wrong += r[i] != base + (float)(b->np * (int)(i % 7));
        if (fl_coll_allreduce(c, &wrong, &wrong, 1, FL_INT64, FL_COLL_SUM)) DIE("allreduce: %s", fl_last_error());
        qsort(ts, (size_t)iters, sizeof(double), cmpd);
        if (rank == 0) {
            double per = el / iters, alg = (double)bytes / per / 1e9, bus = alg * 2.0 * (b->np - 1) / b->np;
            fprintf(stderr, "  %10ld %12.2f %12.2f %10.3f %10.3f %8lld\n", bytes, per * 1e6, ts[iters / 2] * 1e6, alg, bus,
                    (long long)wrong);
            printf("R\t%s_%s.%s.us\t%.2f\tus/op\n", b->label, path, b->sizes[si], per * 1e6);
            printf("R\t%s_%s.%s.p50us\t%.2f\tus/op\n", b->label, path, b->sizes[si], ts[iters / 2] * 1e6);
            printf("R\t%s_%s.%s.algbw\t%.3f\tGB/s\n", b->label, path, b->sizes[si], alg);
            printf("R\t%s_%s.%s.busbw\t%.3f\tGB/s\n", b->label, path, b->sizes[si], bus);
            printf("R\t%s_%s.%s.bytes\t%.0f\tbytes/op\n", b->label, path, b->sizes[si], sent);
            if (wrong) printf("R\t%s_%s.%s.wrong\t%lld\telements\n", b->label, path, b->sizes[si], (long long)wrong);
            fflush(stdout);
        }
        free(ts);
        free(s);
        free(r);
        if (wrong) DIE("%lld wrong elements at size %s", (long long)wrong, b->sizes[si]);
    }
    fl_coll_free(c);
}

/* --mode mpi: this process is one rank of the job mpirun started. */
static int run_mpi_rank(bench_cfg *b)
{
#ifdef FL_HAVE_MPI
    int provided = 0, rank = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "bench_allreduce: MPI_Init_thread failed (start it with mpirun)\n");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b->np);
    if (b->np < 2 || b->np > 64) DIE("mpirun -np must be in [2, 64]");
    if (fl_net_listen("127.0.0.1", 0, &b->ls[rank])) DIE("%s", fl_last_error());
    char mine[32] = {0};
    snprintf(mine, sizeof mine, "127.0.0.1:%d", fl_net_listener_port(b->ls[rank]));
    MPI_Allgather(mine, 32, MPI_CHAR, b->epbuf, 32, MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < b->np; r++) b->eps[r] = b->epbuf[r];
    MPI_Bcast(&b->secret, (int)sizeof b->secret, MPI_BYTE, 0, MPI_COMM_WORLD);
    b->backend = "mpi";
    run_rank(b, rank);
    fl_net_listener_free(b->ls[rank]);
    fflush(stdout);
    MPI_Finalize();
    return 0;
#else
    (void)b;
    fprintf(stderr, "bench_allreduce: --mode mpi: built without MPI (install libopenmpi-dev and rebuild)\n");
    return 1;
#endif
}

/* Binds listeners, forks np ranks, waits; returns 0 when every rank succeeded. */
static int run_world(bench_cfg *b)
{
    for (int r = 0; r < b->np; r++) {
        if (fl_net_listen("127.0.0.1", 0, &b->ls[r])) {
            fprintf(stderr, "bench_allreduce: %s\n", fl_last_error());
            return 1;
        }
        snprintf(b->epbuf[r], sizeof b->epbuf[r], "127.0.0.1:%d", fl_net_listener_port(b->ls[r]));
        b->eps[r] = b->epbuf[r];
    }
    pid_t pids[64];
    for (int r = 0; r < b->np; r++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (b->bind) { /* one core per rank, as mpirun binds by default */
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(r % (int)sysconf(_SC_NPROCESSORS_ONLN), &set);
                sched_setaffinity(0, sizeof set, &set);
            }
            for (int q = 0; q < b->np; q++)
                if (q != r) fl_net_listener_free(b->ls[q]);
            run_rank(b, r);
            fflush(stdout);
            _exit(0);
        }
        pids[r] = pid;
    }
    for (int r = 0; r < b->np; r++) fl_net_listener_free(b->ls[r]);
    int bad = 0;
    for (int r = 0; r < b->np; r++) {
        int ws;
        if (pids[r] < 0 || waitpid(pids[r], &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws)) bad = 1;
    }
    return bad;
}

int main(int argc, char **argv)
{
    static const char *defsizes[] = {"4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M"};
    bench_cfg b = {.np = 2, .seconds = 0.5, .label = "fleet", .nsizes = 8, .sizes = defsizes, .bind = 1};
    const char *mode = "both";
    const char **sizes = calloc((size_t)argc + 1, sizeof *sizes);
    const char *bind = "core";
    int ns = 0;
    const bench_opt opts[] = {{"np", BA_INT, &b.np},
                              {"mode", BA_STR, &mode},
                              {"seconds", BA_DOUBLE, &b.seconds},
                              {"label", BA_STR, &b.label},
                              {"chunk", BA_FN, &b.chunk, opt_size},
                              {"bind", BA_STR, &bind},
                              {"small", BA_FN, &b.small, opt_size},
                              {"dtype", BA_STR, &b.dtype}};
    bench_args(argc, argv, 1, opts, BA_COUNT(opts), sizes, &ns);
    for (int i = 0; i < ns; i++)
        if (parse_size(sizes[i]) < 4) cli_die(2, "a SIZE is at least 4 bytes (4, 64K, 4M), got '%s'", sizes[i]);
    b.bind = !strcmp(bind, "core");
    if (b.np < 2 || b.np > 64) cli_die(2, "--np must be in [2, 64]");
    if (ns) {
        b.sizes = sizes;
        b.nsizes = ns;
    }
    if (fl_net_secret_generate(&b.secret)) {
        fprintf(stderr, "bench_allreduce: %s\n", fl_last_error());
        return 1;
    }
    int bad = 0;
    if (!strcmp(mode, "mpi")) bad = run_mpi_rank(&b);
    if (!strcmp(mode, "shm") || !strcmp(mode, "both")) {
        b.shm = 1;
        bad |= run_world(&b);
    }
    if (!strcmp(mode, "tcp") || !strcmp(mode, "both")) {
        b.shm = 0;
        bad |= run_world(&b);
    }
    fl_net_secret_clear(&b.secret);
    free(sizes);
    return bad;
}
