/*
 * bench_ps_ssd.c - SSD sparse tables (src/ps/table_ssd.c) against the in-memory table.
 *
 *   bench_ps_ssd [--keys N] [--budget MB] [--seconds S] [--dir D]
 *       Tiers, in this process (no network: the cost of the tier itself).  An in-memory
 *       table and an SSD table (dim 8, Adagrad, budget MB) are both filled with N keys
 *       (default 2,000,000; budget 16 MiB, about 1/10 of the rows).  Then, interleaved,
 *       medians of 5 slices of S/5 seconds (default S = 2): training pull + push of batches of
 *       4096 ids drawn from the hot set (the 20,000 ids touched last) and from all N ids
 *       (mostly cold: on disk for the SSD table), rows/s of each table and their ratio; and
 *       the memory each table holds (fl_ps_table_stats.bytes) and this process's peak RSS.
 *   bench_ps_ssd --scale N [--servers K] [--budget MB] [--dir D]
 *       Scale run: K (default 2) forked servers on 127.0.0.1 each hold an SSD table of dim 8
 *       (SGD) with the given budget per server (default 256 MiB; 0: in-memory tables, no SSD
 *       tier); the client creates N keys
 *       in batches of 65536 (training pull + push), then pulls and pushes random batches of
 *       65536 ids for 10 s.  Reports rows/s of the fill and of the random phase (pulls and
 *       pushes timed apart), the rows and memory the servers' tables hold
 *       (fl_ps_table_stats), and each server's peak resident memory.
 *   bench_ps_ssd --export N [--budget MB] [--dir D]
 *       Export of an SSD table: N keys (dim 8, SGD, budget MB, default 16) created, then the
 *       whole shard read in the pages fl_ps_client_scan_sparse asks a server for (8 MiB of ids
 *       and values each); seconds and rows/s of the export, rows in memory and on disk.
 *   bench_ps_ssd --memory N
 *       Memory per key of the in-memory table: N keys (pulled for training, so created) in
 *       tables of dim 8 and 16 with SGD, Adagrad and Adam; fl_ps_table_stats.bytes_per_key
 *       against the payload (values + optimizer state).
 *   bench_ps_ssd --sweep N [--dim D] [--opt sgd|adagrad|adam] [--step K] [--seconds S]
 *       Memory and speed of one in-memory table (default dim 8, Adagrad) as it grows to N
 *       keys: every K keys (default 200,000) a line "sweep,keys,bytes/key,ratio to values +
 *       state,ratio to values + state + statistics (show, click, delta_score),RSS MiB,hot
 *       rows/s,random rows/s"; the speeds (training pull + push of batches of 4096 ids from
 *       the 20,000 ids created last, and from all ids; rows per second of this thread's CPU
 *       time, S/2 CPU seconds each, default S = 0.4) at
 *       every million keys and right after the counts where an index of 64 stripes that
 *       doubles at 3/4 doubles (48 x 2^k keys), 0 elsewhere.  bench/plot_ps_memory.py plots it.
 * D (default /tmp) holds the RocksDB directories, removed at the end.
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

#define CLI_NAME "bench_ps_ssd"
#define CLI_HELP_HINT                                                        \
    "usage: bench_ps_ssd [--keys N] [--budget MB] [--seconds S] [--dir D]\n" \
    "       bench_ps_ssd --scale N [--servers K] [--budget MB] [--dir D]\n"  \
    "       bench_ps_ssd --export N [--budget MB] [--dir D]\n"               \
    "       bench_ps_ssd --memory N\n"                                       \
    "       bench_ps_ssd --sweep N [--dim D] [--opt sgd|adagrad|adam] [--step K] [--seconds S]"
#include "bench_args.h"

#define DIM 8
#define BATCH 4096
#define HOTSET 20000
#define SLICES 5

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_ps_ssd: %s: %s\n", what, fl_last_error());
    exit(1);
}

static long proc_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kb = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') kb = atol(line + n + 1);
    fclose(f);
    return kb;
}

static fl_ps_table_config cfg(const char *ssd, int64_t budget, fl_ps_opt_kind k)
{
    fl_ps_table_config t = {0};
    t.name = "emb";
    t.kind = FL_PS_SPARSE;
    t.dim = DIM;
    t.init = fl_init_uniform(-0.01f, 0.01f);
    t.opt = (fl_ps_optimizer){k, 0.01f, 0, 0, 0, 0, 0, 0};
    t.ssd_path = ssd;
    t.mem_budget_mb = budget;
    return t;
}

static uint64_t id_of(uint64_t x) { return x * 0x9E3779B97F4A7C15ull + 1; }

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Distinct ids of one batch: from [base, base + range). */
static void draw(uint64_t *ids, int n, uint64_t base, uint64_t range)
{
    uint64_t start = rnd() % range, step = range > (uint64_t)n ? range / (uint64_t)n : 1;
    for (int j = 0; j < n; j++) ids[j] = id_of(base + (start + (uint64_t)j * step) % range);
}

static float g[65536 * DIM], out[65536 * DIM];

static void step(fl__ps_sparse *t, const uint64_t *ids, int n)
{
    if (fl__ps_sparse_pull(t, ids, n, out, 1)) die("pull");
    if (fl__ps_sparse_push(t, ids, n, g, NULL, NULL, 1.0f, 1)) die("push");
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int tiers(uint64_t nkeys, int64_t budget, double secs, const char *dir)
{
    fl_ps_table_config cm = cfg(NULL, 0, FL_PS_OPT_ADAGRAD), cs = cfg(dir, budget, FL_PS_OPT_ADAGRAD);
    fl__ps_sparse *m, *s;
    if (fl__ps_sparse_create(&cm, 0, 1, &m) || fl__ps_sparse_create(&cs, 0, 1, &s)) die("create");
    static uint64_t ids[BATCH];
    double fill[2] = {0, 0};
    fl__ps_sparse *tab[2] = {m, s};
    for (uint64_t b = 0; b < nkeys; b += BATCH) {
        int n = (int)(nkeys - b < BATCH ? nkeys - b : BATCH);
        for (int j = 0; j < n; j++) ids[j] = id_of(b + (uint64_t)j);
        for (int t = 0; t < 2; t++) {
            double t0 = now_s();
            step(tab[t], ids, n);
            fill[t] += now_s() - t0;
        }
    }
    printf("SSD tier, in process: %llu keys of dim %d (Adagrad), budget %lld MiB; batches of %d ids (pull + push)\n",
           (unsigned long long)nkeys, DIM, (long long)budget, BATCH);
    printf("%-26s %14s %14s %8s\n", "phase", "memory rows/s", "SSD rows/s", "ratio");
    printf("%-26s %14.3e %14.3e %8.3f\n", "fill (new rows)", nkeys / fill[0], nkeys / fill[1], fill[0] / fill[1]);
    const char *names[2] = {"hot (last 20k ids)", "cold (uniform over all)"};
    for (int phase = 0; phase < 2; phase++) {
        double rate[2][SLICES];
        for (int sl = 0; sl < SLICES; sl++)
            for (int t = 0; t < 2; t++) { /* interleaved: the same batches for both tables */
                uint64_t saved = rng_state;
                double t0 = now_s(), el;
                long rows = 0;
                do {
                    if (phase == 0) draw(ids, BATCH, nkeys - HOTSET, HOTSET);
                    else draw(ids, BATCH, 0, nkeys);
                    step(tab[t], ids, BATCH);
                    rows += BATCH;
                } while ((el = now_s() - t0) < secs / SLICES / 2);
                rate[t][sl] = rows / el;
                if (t == 0) rng_state = saved;
            }
        qsort(rate[0], SLICES, sizeof(double), cmp_d);
        qsort(rate[1], SLICES, sizeof(double), cmp_d);
        printf("%-26s %14.3e %14.3e %8.3f\n", names[phase], rate[0][SLICES / 2], rate[1][SLICES / 2],
               rate[1][SLICES / 2] / rate[0][SLICES / 2]);
    }
    fl_ps_table_stats a, b;
    fl__ps_sparse_stats(m, &a);
    fl__ps_sparse_stats(s, &b);
    printf("memory held: in-memory table %.1f MiB (%.1f bytes/key), SSD table %.1f MiB in memory (%lld of %lld rows "
           "in memory); peak RSS of this process %.1f MiB\n",
           a.bytes / 1048576.0, a.bytes_per_key, b.bytes / 1048576.0, (long long)(b.rows - fl__ps_ssd_rows(s)),
           (long long)b.rows, proc_kb(getpid(), "VmHWM") / 1024.0);
    fl__ps_sparse_free(m);
    fl__ps_sparse_free(s);
    return 0;
}

/* ---- scale run ------------------------------------------------------------------------------------ */

static pid_t spawn_server(const fl_ps_table_config *t, int index, int ns, char *ep, size_t cap)
{
    fl_ps_server_opts o = {0};
    o.server_index = index;
    o.num_servers = ns;
    o.num_workers = 1;
    o.tables = t;
    o.num_tables = 1;
    o.insecure_local = 1;
    o.worker_timeout_ms = -1;
    o.request_timeout_ms = 600000;
    pid_t pid = ps_fork_server(&o, NULL, 0, ep, cap);
    if (pid < 0) die("server start");
    return pid;
}

static int scale(uint64_t nkeys, int ns, int64_t budget, const char *dir)
{
    fl_ps_table_config t = cfg(budget ? dir : NULL, budget, FL_PS_OPT_SGD);
    char eps[8][128];
    const char *ep[8];
    pid_t pid[8];
    if (ns < 1 || ns > 8) {
        fprintf(stderr, "bench_ps_ssd: --servers must be 1..8\n");
        return 2;
    }
    for (int i = 0; i < ns; i++) {
        pid[i] = spawn_server(&t, i, ns, eps[i], sizeof eps[i]);
        ep[i] = eps[i];
    }
    fl_ps_client_opts o = {0};
    o.endpoints = ep;
    o.num_servers = ns;
    o.num_workers = 1;
    o.tables = &t;
    o.num_tables = 1;
    o.insecure_local = 1;
    o.request_timeout_ms = 600000;
    fl_ps_client *c;
    if (fl_ps_client_create(&o, &c)) die("client");
    enum { B = 65536 };
    static uint64_t ids[B];
    double t0 = now_s();
    for (uint64_t b = 0; b < nkeys; b += B) {
        int n = (int)(nkeys - b < B ? nkeys - b : B);
        for (int j = 0; j < n; j++) ids[j] = id_of(b + (uint64_t)j);
        if (fl_ps_client_pull_sparse(c, 0, ids, n, out, 1)) die("pull");
        if (fl_ps_client_push_sparse(c, 0, ids, n, g, NULL, NULL)) die("push");
        if ((b / B) % 160 == 159) {
            printf("  %.0f M keys after %.0f s\n", (b + (uint64_t)n) / 1e6, now_s() - t0);
            fflush(stdout);
        }
    }
    double fill = now_s() - t0;
    long rows = 0;
    double pull_s = 0, push_s = 0;
    t0 = now_s();
    while (now_s() - t0 < 10) {
        draw(ids, B, 0, nkeys);
        double t1 = now_s();
        if (fl_ps_client_pull_sparse(c, 0, ids, B, out, 1)) die("pull");
        double t2 = now_s();
        if (fl_ps_client_push_sparse(c, 0, ids, B, g, NULL, NULL)) die("push");
        pull_s += t2 - t1;
        push_s += now_s() - t2;
        rows += B;
    }
    double rnd_s = now_s() - t0;
    fl_ps_table_stats st;
    if (fl_ps_client_table_stats(c, 0, &st)) die("stats");
    if (budget)
        printf("scale run: %llu keys of dim %d (SGD) over %d servers, SSD tables with %lld MiB of memory per server\n",
               (unsigned long long)nkeys, DIM, ns, (long long)budget);
    else
        printf("scale run: %llu keys of dim %d (SGD) over %d servers, in-memory tables\n", (unsigned long long)nkeys, DIM,
               ns);
    printf("  fill: %.3e rows/s (pull + push of new rows, %.0f s); random batches of %d: %.3e rows/s (pull %.3e "
           "rows/s, push %.3e rows/s)\n",
           nkeys / fill, fill, B, rows / rnd_s, rows / pull_s, rows / push_s);
    printf("  rows %lld, %.1f MiB in the servers' tables (all servers, %.1f bytes per key)\n", (long long)st.rows,
           st.bytes / 1048576.0, st.bytes_per_key);
    for (int i = 0; i < ns; i++)
        printf("  server %d: peak resident memory %.1f MiB\n", i, proc_kb(pid[i], "VmHWM") / 1024.0);
    if (fl_ps_client_stop(c)) die("stop");
    fl_ps_client_free(c);
    for (int i = 0; i < ns; i++) waitpid(pid[i], NULL, 0);
    return 0;
}

/* ---- export ------------------------------------------------------------------------------------- */

static int export_run(uint64_t nkeys, int64_t budget, const char *dir)
{
    fl_ps_table_config c = cfg(dir, budget, FL_PS_OPT_SGD);
    fl__ps_sparse *t;
    if (fl__ps_sparse_create(&c, 0, 1, &t)) die("create");
    enum { B = 65536 };
    static uint64_t ids[B];
    for (uint64_t b = 0; b < nkeys; b += B) {
        int n = (int)(nkeys - b < B ? nkeys - b : B);
        for (int j = 0; j < n; j++) ids[j] = id_of(b + (uint64_t)j);
        step(t, ids, n);
    }
    fl_ps_table_stats st;
    fl__ps_sparse_stats(t, &st);
    const uint64_t page = (8u << 20) / (8 + 4 * DIM), rows = (uint64_t)st.rows;
    uint64_t *pid = malloc(page * 8);
    float *pv = malloc(page * 4 * DIM);
    if (!pid || !pv) die("out of memory");
    double t0 = now_s();
    uint64_t sum = 0;
    for (uint64_t first = 0; first < rows; first += page) {
        uint64_t n = rows - first < page ? rows - first : page;
        if (fl__ps_sparse_scan(t, first, n, pid, pv)) die("scan");
        for (uint64_t j = 0; j < n; j++) sum += pid[j];
    }
    double el = now_s() - t0;
    printf("export of an SSD table: %llu rows of dim %d (%lld in memory, %lld on disk, budget %lld MiB), pages of "
           "%llu rows: %.2f s, %.3e rows/s (id checksum %016llx)\n",
           (unsigned long long)rows, DIM, (long long)(rows - (uint64_t)fl__ps_ssd_rows(t)), (long long)fl__ps_ssd_rows(t),
           (long long)budget, (unsigned long long)page, el, rows / el, (unsigned long long)sum);
    free(pid);
    free(pv);
    fl__ps_sparse_free(t);
    return 0;
}

static int memory(uint64_t nkeys)
{
    static const fl_ps_opt_kind kinds[3] = {FL_PS_OPT_SGD, FL_PS_OPT_ADAGRAD, FL_PS_OPT_ADAM};
    static const int dims[3] = {8, 10, 16};
    enum { B = 65536 };
    static uint64_t ids[B];
    static float vals[B * 16];
    printf("memory per key of the in-memory table, %llu keys on one server\n", (unsigned long long)nkeys);
    printf("%4s %-8s %12s %10s %7s\n", "dim", "opt", "bytes/key", "payload", "ratio");
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 3; k++) {
            fl_ps_table_config t = cfg(NULL, 0, kinds[k]);
            t.dim = dims[d];
            fl__ps_sparse *m;
            if (fl__ps_sparse_create(&t, 0, 1, &m)) die("create");
            for (uint64_t b = 0; b < nkeys; b += B) {
                int n = (int)(nkeys - b < B ? nkeys - b : B);
                for (int j = 0; j < n; j++) ids[j] = id_of(b + (uint64_t)j);
                if (fl__ps_sparse_pull(m, ids, n, vals, 1)) die("pull");
            }
            fl_ps_table_stats st;
            fl__ps_sparse_stats(m, &st);
            printf("%4d %-8s %12.1f %10.0f %6.2fx\n", dims[d], fl__ps_opt_name(kinds[k]), st.bytes_per_key,
                   st.payload_per_key, st.bytes_per_key / st.payload_per_key);
            fflush(stdout);
            fl__ps_sparse_free(m);
        }
    return 0;
}

/* Seconds of CPU time of this thread: on a machine shared with other work, rows per CPU
 * second vary far less than rows per wall-clock second. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double rate(fl__ps_sparse *t, uint64_t base, uint64_t range, double secs)
{
    static uint64_t ids[BATCH];
    double t0 = cpu_s(), el;
    long rows = 0;
    do {
        draw(ids, BATCH, base, range);
        step(t, ids, BATCH);
        rows += BATCH;
    } while ((el = cpu_s() - t0) < secs);
    return rows / el;
}

static int sweep(uint64_t nkeys, int dim, const char *opt, uint64_t every, double secs)
{
    fl_ps_opt_kind k = !strcmp(opt, "sgd") ? FL_PS_OPT_SGD : !strcmp(opt, "adam") ? FL_PS_OPT_ADAM : FL_PS_OPT_ADAGRAD;
    if (dim < 1 || dim > 16 || (strcmp(opt, "sgd") && strcmp(opt, "adagrad") && strcmp(opt, "adam")))
        cli_die(2, "--sweep needs --dim 1..16 and --opt sgd, adagrad or adam");
    if (every < 2 * HOTSET) cli_die(2, "--step must be at least %d", 2 * HOTSET);
    fl_ps_table_config c = cfg(NULL, 0, k);
    c.dim = dim;
    fl__ps_sparse *t;
    if (fl__ps_sparse_create(&c, 0, 1, &t)) die("create");
    enum { B = 65536 };
    static uint64_t ids[B];
    static float vals[B * 16];
    printf("sweep of one in-memory table: dim %d, %s, up to %llu keys\n", dim, opt, (unsigned long long)nkeys);
    printf("sweep,keys,bytes_per_key,ratio,ratio_stats,rss_mib,hot_rows_s,random_rows_s\n");
    uint64_t have = 0, next_double = 48ull << 15; /* 48 x 2^k: 64 stripes of 2^k slots reach 3/4 */
    for (uint64_t at = every; at <= nkeys; at += every) {
        while (have < at) {
            int n = (int)(at - have < B ? at - have : B);
            for (int j = 0; j < n; j++) ids[j] = id_of(have + (uint64_t)j);
            if (fl__ps_sparse_pull(t, ids, n, vals, 1)) die("pull");
            have += (uint64_t)n;
        }
        fl_ps_table_stats st;
        fl__ps_sparse_stats(t, &st);
        double hot = 0, all = 0;
        int timed = at % 1000000 == 0;
        for (; next_double <= at; next_double *= 2) timed = 1;
        if (timed) {
            hot = rate(t, at - HOTSET, HOTSET, secs / 2);
            all = rate(t, 0, at, secs / 2);
        }
        printf("sweep,%llu,%.2f,%.4f,%.4f,%.1f,%.4g,%.4g\n", (unsigned long long)at, st.bytes_per_key,
               st.bytes_per_key / st.payload_per_key, st.bytes_per_key / (st.payload_per_key + 12),
               proc_kb(getpid(), "VmRSS") / 1024.0, hot, all);
        fflush(stdout);
    }
    fl__ps_sparse_free(t);
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t keys = 2000000, scale_keys = 0, mem_keys = 0, export_keys = 0, sweep_keys = 0, every = 200000;
    int64_t budget = -1;
    int ns = 2, dim = DIM;
    double secs = -1;
    const char *dir = "/tmp", *opt = "adagrad";
    const bench_opt opts[] = {
        {"keys", BA_U64, &keys},          {"scale", BA_U64, &scale_keys}, {"memory", BA_U64, &mem_keys},
        {"export", BA_U64, &export_keys}, {"budget", BA_I64, &budget},    {"servers", BA_INT, &ns},
        {"seconds", BA_DOUBLE, &secs},    {"dir", BA_STR, &dir},          {"sweep", BA_U64, &sweep_keys},
        {"step", BA_U64, &every},         {"dim", BA_INT, &dim},          {"opt", BA_STR, &opt}};
    bench_args(argc, argv, 1, opts, BA_COUNT(opts), NULL, NULL);
    if (keys < 2 * HOTSET) cli_die(2, "--keys must be at least %d", 2 * HOTSET);
    if (sweep_keys) return sweep(sweep_keys, dim, opt, every, secs >= 0 ? secs : 0.4);
    if (mem_keys) return memory(mem_keys);
    if (export_keys) return export_run(export_keys, budget > 0 ? budget : 16, dir);
    if (scale_keys) return scale(scale_keys, ns, budget >= 0 ? budget : 256, dir);
    return tiers(keys, budget > 0 ? budget : 16, secs >= 0 ? secs : 2, dir);
}
