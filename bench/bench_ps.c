/*
 * bench_ps.c - parameter-server throughput on loopback, against bounds measured in the same
 * run.
 *
 *   bench_ps [--seconds S] [--keys N]
 *
 * For 1 and 2 servers (each a forked process on 127.0.0.1, the client in this process):
 *   - sparse pull and push of a batch of 26 x 512 = 13312 ids drawn from N (default 200000)
 *     pre-created ids, dim 10 and dim 64 (SGD): rows/s (ids in the batch per second) and GB/s
 *     (row payload bytes, dim * 4 per id, per second);
 *   - dense push + pull of a 1.7 MB table (425000 floats, SGD): round trips per second.
 * Bounds, measured in the same run:
 *   - in-process hash-map lookup: the same batch pulled from a sparse table shard in this
 *     process (fl__ps_sparse_pull: stripes, locks, row copies; no network);
 *   - memcpy: copying the batch's payload bytes between two contiguous buffers;
 *   - loopback TCP: a plain send/recv loop to a forked echo process that receives 1.7 MB and
 *     sends 1.7 MB back (the bytes of one dense push + pull), round trips per second.
 * Each figure is the median of 5 slices of S/5 seconds (default S = 1).  Output: a table on
 * stdout; ratios are ours / bound.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fleet/ps.h"
#include "ps/ps_internal.h"
#include "ps_fork.h" /* tests/: ps_fork_server */

#define CLI_NAME "bench_ps"
#define CLI_HELP_HINT "usage: bench_ps [--seconds S] [--keys N]"
#include "bench_args.h"

#define BATCH (26 * 512)
#define DENSE_ROWS 1700
#define DENSE_COLS 250
#define SLICES 5

static double secs = 1.0;
static int nkeys = 200000;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_ps: %s: %s\n", what, fl_last_error());
    exit(1);
}

static fl_ps_table_config tables[3];

static void init_tables(void)
{
    memset(tables, 0, sizeof tables);
    const char *names[2] = {"emb10", "emb64"};
    int dims[2] = {10, 64};
    for (int i = 0; i < 2; i++) {
        tables[i].name = names[i];
        tables[i].kind = FL_PS_SPARSE;
        tables[i].dim = dims[i];
        tables[i].init = fl_init_uniform(-0.01f, 0.01f);
        tables[i].opt = (fl_ps_optimizer){FL_PS_OPT_SGD, 0.01f, 0, 0, 0, 0};
    }
    tables[2].name = "dense";
    tables[2].kind = FL_PS_DENSE;
    tables[2].rows = DENSE_ROWS;
    tables[2].cols = DENSE_COLS;
    tables[2].opt = (fl_ps_optimizer){FL_PS_OPT_SGD, 0.01f, 0, 0, 0, 0};
}

static pid_t spawn_server(int index, int ns, char *ep, size_t cap)
{
    fl_ps_server_opts o = {0};
    o.server_index = index;
    o.num_servers = ns;
    o.num_workers = 1;
    o.tables = tables;
    o.num_tables = 3;
    o.insecure_local = 1;
    o.num_threads = 2;
    pid_t pid = ps_fork_server(&o, NULL, 0, ep, cap);
    if (pid < 0) die("server start");
    return pid;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Runs fn repeatedly in SLICES slices; returns the median rate of fn calls per second. */
typedef void (*op_fn)(void *);
static double rate(op_fn fn, void *arg)
{
    double r[SLICES];
    fn(arg); /* warm-up */
    for (int s = 0; s < SLICES; s++) {
        double t0 = now_s(), t;
        long n = 0;
        do {
            fn(arg);
            n++;
            t = now_s();
        } while (t - t0 < secs / SLICES);
        r[s] = (double)n / (t - t0);
    }
    qsort(r, SLICES, sizeof r[0], cmp_d);
    return r[SLICES / 2];
}

/* ---- the operations ---------------------------------------------------------------------------- */

typedef struct {
    fl_ps_client *c;
    fl__ps_sparse *local;
    int table, dim;
    uint64_t *ids;
    float *out, *grads, *src;
    float *dense, *dgrad;
    fl_net_conn *echo;
    uint8_t *ebuf;
} ctx;

static void op_pull(void *p)
{
    ctx *x = p;
    if (fl_ps_client_pull_sparse(x->c, x->table, x->ids, BATCH, x->out, 1)) die("pull");
}
static void op_push(void *p)
{
    ctx *x = p;
    if (fl_ps_client_push_sparse(x->c, x->table, x->ids, BATCH, x->grads, NULL, NULL)) die("push");
}
static void op_local(void *p)
{
    ctx *x = p;
    if (fl__ps_sparse_pull(x->local, x->ids, BATCH, x->out, 1)) die("local pull");
}
static void op_memcpy(void *p)
{
    ctx *x = p;
    memcpy(x->out, x->src, (size_t)BATCH * x->dim * 4);
    __asm__ volatile("" ::"r"(x->out) : "memory");
}
static void op_dense(void *p)
{
    ctx *x = p;
    if (fl_ps_client_push_dense(x->c, 2, x->dgrad) || fl_ps_client_pull_dense(x->c, 2, x->dense)) die("dense");
}
static void op_echo(void *p)
{
    ctx *x = p;
    size_t n = (size_t)DENSE_ROWS * DENSE_COLS * 4;
    if (fl_net_send_all(x->echo, x->ebuf, n, fl_net_deadline(10000)) ||
        fl_net_recv_all(x->echo, x->ebuf, n, fl_net_deadline(10000)))
        die("echo");
}

/* A forked process that receives 1.7 MB and sends it back, until the connection closes. */
static fl_net_conn *start_echo(pid_t *pid)
{
    fl_net_listener *l;
    if (fl_net_listen("127.0.0.1", 0, &l)) die("listen");
    fl_net_auth au = {NULL, 0, 1, FL_NET_SERVICE_TEST, 0, 0};
    int port = fl_net_listener_port(l);
    fflush(stdout);
    *pid = fork();
    if (*pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        fl_net_conn *c;
        if (fl_net_accept(l, &au, fl_net_deadline(10000), &c)) _exit(1);
        size_t n = (size_t)DENSE_ROWS * DENSE_COLS * 4;
        uint8_t *b = malloc(n);
        while (fl_net_recv_all(c, b, n, fl_net_deadline(60000)) == FL_OK &&
               fl_net_send_all(c, b, n, fl_net_deadline(60000)) == FL_OK) {
        }
        _exit(0);
    }
    fl_net_listener_free(l);
    fl_net_conn *c;
    if (fl_net_connect("127.0.0.1", port, &au, fl_net_deadline(10000), &c)) die("connect echo");
    return c;
}

int main(int argc, char **argv)
{
    const bench_opt opts[] = {{"seconds", BA_DOUBLE, &secs}, {"keys", BA_INT, &nkeys}};
    bench_args(argc, argv, 1, opts, BA_COUNT(opts), NULL, NULL);
    if (!(secs > 0) || nkeys < BATCH) cli_die(2, "need --seconds > 0 and --keys >= %d", BATCH);
    init_tables();
    signal(SIGPIPE, SIG_IGN);
    uint64_t *all = malloc((size_t)nkeys * 8), *ids = malloc(BATCH * 8);
    float *out = malloc((size_t)BATCH * 64 * 4), *grads = malloc((size_t)BATCH * 64 * 4),
          *src = malloc((size_t)BATCH * 64 * 4);
    float *dense = malloc((size_t)DENSE_ROWS * DENSE_COLS * 4), *dgrad = calloc((size_t)DENSE_ROWS * DENSE_COLS, 4);
    for (int i = 0; i < nkeys; i++) all[i] = fl__hash_u64((uint64_t)i + 1);
    fl_rng r = {12345};
    for (int i = 0; i < BATCH; i++) ids[i] = all[fl__rng_next(&r) % (uint64_t)nkeys];
    for (int i = 0; i < BATCH * 64; i++) grads[i] = src[i] = 1e-3f * (float)(i % 7);
    size_t dbytes = (size_t)DENSE_ROWS * DENSE_COLS * 4;

    printf("bench_ps: batch %d ids from %d keys, %.1f s per figure (median of %d slices)\n", BATCH, nkeys, secs, SLICES);
    /* bounds */
    ctx x = {0};
    x.ids = ids, x.out = out, x.grads = grads, x.src = src, x.dense = dense, x.dgrad = dgrad;
    double local_rate[2], mcpy_rate[2];
    for (int d = 0; d < 2; d++) {
        x.dim = tables[d].dim;
        if (fl__ps_sparse_create(&tables[d], 0, 1, &x.local)) die("local table");
        for (int a = 0; a < nkeys; a += BATCH) {
            int n = nkeys - a < BATCH ? nkeys - a : BATCH;
            if (fl__ps_sparse_pull(x.local, all + a, (uint64_t)n, out, 1)) die("local fill");
        }
        local_rate[d] = rate(op_local, &x) * BATCH;
        mcpy_rate[d] = rate(op_memcpy, &x) * BATCH;
        fl__ps_sparse_free(x.local);
    }
    pid_t epid;
    x.echo = start_echo(&epid);
    x.ebuf = calloc(dbytes, 1);
    double echo_rate = rate(op_echo, &x);
    fl_net_conn_free(x.echo);
    waitpid(epid, NULL, 0);

    printf("\n%-24s %8s %5s %14s %9s %16s %16s\n", "operation", "servers", "dim", "rows/s", "GB/s", "vs in-proc map",
           "vs memcpy");
    for (int d = 0; d < 2; d++)
        printf("%-24s %8s %5d %14.3e %9.3f %16s %16s\n", "bound: in-process map", "-", tables[d].dim, local_rate[d],
               local_rate[d] * tables[d].dim * 4 / 1e9, "1", "");
    for (int d = 0; d < 2; d++)
        printf("%-24s %8s %5d %14.3e %9.3f %16s %16s\n", "bound: memcpy", "-", tables[d].dim, mcpy_rate[d],
               mcpy_rate[d] * tables[d].dim * 4 / 1e9, "", "1");
    double dense_rate[3] = {0};
    for (int ns = 1; ns <= 2; ns++) {
        char ep[2][128];
        pid_t sp[2];
        for (int i = 0; i < ns; i++) sp[i] = spawn_server(i, ns, ep[i], sizeof ep[i]);
        const char *eps[2] = {ep[0], ep[1]};
        fl_ps_client_opts o = {0};
        o.endpoints = eps;
        o.num_servers = ns;
        o.num_workers = 1;
        o.tables = tables;
        o.num_tables = 3;
        o.insecure_local = 1;
        if (fl_ps_client_create(&o, &x.c)) die("client");
        for (int d = 0; d < 2; d++) {
            x.table = d;
            x.dim = tables[d].dim;
            for (int a = 0; a < nkeys; a += BATCH) { /* create every row first: pulls then measure lookups */
                int n = nkeys - a < BATCH ? nkeys - a : BATCH;
                if (fl_ps_client_pull_sparse(x.c, d, all + a, n, out, 1)) die("fill");
            }
            double pr = rate(op_pull, &x) * BATCH, pu = rate(op_push, &x) * BATCH;
            double gb = (double)x.dim * 4 / 1e9;
            printf("%-24s %8d %5d %14.3e %9.3f %15.2fx %15.2fx\n", "sparse pull", ns, x.dim, pr, pr * gb,
                   pr / local_rate[d], pr / mcpy_rate[d]);
            printf("%-24s %8d %5d %14.3e %9.3f %15.2fx %15.2fx\n", "sparse push", ns, x.dim, pu, pu * gb,
                   pu / local_rate[d], pu / mcpy_rate[d]);
        }
        dense_rate[ns] = rate(op_dense, &x);
        if (fl_ps_client_stop(x.c)) die("stop");
        fl_ps_client_free(x.c);
        for (int i = 0; i < ns; i++) waitpid(sp[i], NULL, 0);
    }
    printf("\n%-40s %12s %10s %12s\n", "dense 1.7 MB (push + pull)", "round trips/s", "GB/s", "vs TCP loop");
    printf("%-40s %12.1f %10.3f %11s\n", "bound: plain send/recv 1.7 MB each way", echo_rate, echo_rate * 2 * dbytes / 1e9,
           "1");
    for (int ns = 1; ns <= 2; ns++)
        printf("%-40s %12.1f %10.3f %11.2fx\n", ns == 1 ? "ps dense push+pull, 1 server" : "ps dense push+pull, 2 servers",
               dense_rate[ns], dense_rate[ns] * 2 * dbytes / 1e9, dense_rate[ns] / echo_rate);
    free(all);
    free(ids);
    free(out);
    free(grads);
    free(src);
    free(dense);
    free(dgrad);
    free(x.ebuf);
    return 0;
}
