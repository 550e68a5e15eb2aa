/*
 * bench_ps_load.c - one parameter server under many workers (a load test, not a CI test).
 *
 *   bench_ps_load [--workers 64,256,512] [--steps 40] [--rate 10] [--ids 256] [--dense 4096]
 *                 [--server_threads 0] [--rdzv 512] [--connect_timeout_ms 60000] [--server_nofile N]
 *
 * For each worker count W: one server process (forked, authenticated with a generated job
 * secret, num_workers = W, its default request threads) holding a sparse table (dim 8,
 * Adagrad, rows made on first pull) and a dense table of --dense floats (Adam).  This
 * process starts W worker threads, each with its own client (fl_ps_client: its own
 * authenticated request connection and heartbeat connection to the server, and its
 * heartbeat thread), all at once.  Each worker makes --steps steps at --rate steps/s (its
 * own clock, sleeping between steps): pull --ids sparse rows (ids drawn from 1,000,000,
 * 1/8 of them shared by every worker), push their gradients, push the dense gradient and
 * pull the dense values - 4 requests per step, each timed.  Then every worker calls the PS
 * barrier (counted on the server), and stops.  Printed per W:
 *   - workers connected / finished / failed (the first error), the time to connect all;
 *   - requests/s over the steps phase (all workers' requests / its wall time), against the
 *     offered rate (W x rate x 4);
 *   - p50 / p99 / max latency per request kind, microseconds;
 *   - the barrier: time from the last worker's arrival to the last return;
 *   - the server's peak RSS (MiB), open file descriptors and threads (sampled from /proc
 *     every 20 ms), and its exit status (0: it ended by itself once every worker stopped).
 * --server_nofile N starts the server with a soft RLIMIT_NOFILE of N (a common default is
 * 1024), this process keeping its own.  With --rdzv N > 0: the torchrun rendezvous (src/fleet/role_rdzv.c) of N ranks, threads of
 * this process on 127.0.0.1: the time until every rank has the endpoint list.
 *
 * The server and the workers share this machine's cores: requests/s and latencies are
 * those of this machine under this load; what carries over is where it breaks (descriptors,
 * threads, handshakes) and how cost grows with W.
 */
#define CLI_NAME "bench_ps_load"
#define CLI_HELP_HINT                                                                     \
    "usage: bench_ps_load [--workers LIST] [--steps N] [--rate R] [--ids N] [--dense N] " \
    "[--server_threads N] [--rdzv N] [--connect_timeout_ms MS] [--server_nofile N]"
#include "../tools/cli.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fleet/net.h"
#include "fleet/ps.h"
#include "fleet/role_internal.h"
#include "ps_fork.h" /* tests/: ps_fork_server */

#define MAX_W 4096
#define DIM 8
#define KINDS 4
static const char *const kind_name[KINDS] = {"pull_sparse", "push_sparse", "push_dense", "pull_dense"};

static int steps = 40, nids = 256, dense_n = 4096, server_threads = 0, rdzv_n = 512, connect_ms = 60000, server_nofile;
static double rate = 10;
static fl_net_secret secret;
static fl_ps_table_config tables[2];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_until(double t)
{
    double d = t - now_s();
    if (d <= 0) return;
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- one worker --------------------------------------------------------------------------- */

typedef struct {
    int rank, nw;
    const char *ep;
    pthread_barrier_t *go;
    float *lat[KINDS]; /* seconds, steps of them */
    double connected_at, barrier_in, barrier_out;
    int steps_done, ok;
    char err[256];
} worker;

static int fail(worker *w, const char *what)
{
    if (!w->err[0]) snprintf(w->err, sizeof w->err, "worker %d: %s: %s", w->rank, what, fl_last_error());
    return 1;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    const char *eps[1] = {w->ep};
    fl_ps_client_opts o = {0};
    o.endpoints = eps;
    o.num_servers = 1;
    o.worker_rank = w->rank;
    o.num_workers = w->nw;
    o.tables = tables;
    o.num_tables = 2;
    o.secret = &secret;
    o.connect_timeout_ms = connect_ms;
    o.request_timeout_ms = 60000;
    o.barrier_timeout_ms = 120000;
    fl_ps_client *c = NULL;
    uint64_t *ids = malloc((size_t)nids * sizeof *ids);
    float *rows = malloc((size_t)nids * DIM * sizeof(float)), *dense = malloc((size_t)dense_n * sizeof(float));
    unsigned seed = 12345u + (unsigned)w->rank * 7919u;
    pthread_barrier_wait(w->go);
    if (!ids || !rows || !dense) {
        snprintf(w->err, sizeof w->err, "worker %d: out of memory", w->rank);
        goto out;
    }
    if (fl_ps_client_create(&o, &c) != FL_OK) {
        fail(w, "connect");
        goto out;
    }
    w->connected_at = now_s();
    for (int64_t i = 0; i < dense_n; i++) dense[i] = 1e-3f;
    double t = now_s();
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < nids; i++) {
            seed = seed * 1103515245u + 12345u;
            ids[i] = (i % 8 == 0) ? (seed >> 8) % 1000 : (seed >> 4) % 1000000; /* 1/8 hot, shared */
        }
        double t0 = now_s();
        if (fl_ps_client_pull_sparse(c, 0, ids, nids, rows, 1) != FL_OK && fail(w, "pull_sparse")) goto out;
        double t1 = now_s();
        for (int i = 0; i < nids * DIM; i++) rows[i] = 1e-3f;
        if (fl_ps_client_push_sparse(c, 0, ids, nids, rows, NULL, NULL) != FL_OK && fail(w, "push_sparse")) goto out;
        double t2 = now_s();
        if (fl_ps_client_push_dense(c, 1, dense) != FL_OK && fail(w, "push_dense")) goto out;
        double t3 = now_s();
        if (fl_ps_client_pull_dense(c, 1, dense) != FL_OK && fail(w, "pull_dense")) goto out;
        double t4 = now_s();
        w->lat[0][s] = (float)(t1 - t0);
        w->lat[1][s] = (float)(t2 - t1);
        w->lat[2][s] = (float)(t3 - t2);
        w->lat[3][s] = (float)(t4 - t3);
        w->steps_done = s + 1;
        t += 1.0 / rate;
        sleep_until(t);
    }
    w->barrier_in = now_s();
    if (fl_ps_client_barrier(c) != FL_OK && fail(w, "barrier")) goto out;
    w->barrier_out = now_s();
    if (fl_ps_client_stop(c) != FL_OK && fail(w, "stop")) goto out;
    w->ok = 1;
out:
    fl_ps_client_free(c);
    free(ids);
    free(rows);
    free(dense);
    return NULL;
}

/* ---- the server's resources, sampled from /proc --------------------------------------------- */

typedef struct {
    pid_t pid;
    atomic_int stop;
    long rss_kb, fds, threads; /* peaks */
    double cpu_s;              /* the server's user + system time, last sample */
} sampler;

static long count_fds(pid_t pid)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(p);
    if (!d) return -1;
    long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void sample(sampler *s)
{
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)s->pid);
    FILE *f = fopen(p, "r");
    if (!f) return;
    long v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %ld", &v) == 1 && v > s->rss_kb) s->rss_kb = v;
        if (sscanf(line, "Threads: %ld", &v) == 1 && v > s->threads) s->threads = v;
    }
    fclose(f);
    snprintf(p, sizeof p, "/proc/%d/stat", (int)s->pid);
    if ((f = fopen(p, "r"))) {
        unsigned long ut = 0, stime = 0;
        /* utime and stime are fields 14 and 15; the name (field 2) has no ')' of its own here */
        if (fgets(line, sizeof line, f) && strrchr(line, ')') &&
            sscanf(strrchr(line, ')') + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &stime) == 2)
            s->cpu_s = (double)(ut + stime) / (double)sysconf(_SC_CLK_TCK);
        fclose(f);
    }
    long n = count_fds(s->pid);
    if (n > s->fds) s->fds = n;
}

static void *sampler_main(void *arg)
{
    sampler *s = arg;
    while (!atomic_load(&s->stop)) {
        sample(s);
        usleep(20000);
    }
    return NULL;
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* ---- one worker count ----------------------------------------------------------------------- */

static void run(int nw)
{
    fl_ps_server_opts so = {0};
    so.server_index = 0;
    so.num_servers = 1;
    so.num_workers = nw;
    so.tables = tables;
    so.num_tables = 2;
    so.secret = &secret;
    so.num_threads = server_threads;
    so.join_timeout_ms = 120000;
    if (fl_ps_server_opts_from_env(&so) != FL_OK) cli_die(1, "server options: %s", fl_last_error());
    char ep[128];
    struct rlimit mine, srv;
    getrlimit(RLIMIT_NOFILE, &mine);
    srv = mine;
    if (server_nofile > 0) srv.rlim_cur = (rlim_t)server_nofile < mine.rlim_max ? (rlim_t)server_nofile : mine.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &srv) != 0) cli_die(1, "setrlimit(RLIMIT_NOFILE, %d): %s", server_nofile, strerror(errno));
    pid_t pid = ps_fork_server(&so, NULL, 900, ep, sizeof ep);
    setrlimit(RLIMIT_NOFILE, &mine);
    if (pid < 0) cli_die(1, "cannot start the server");
    sampler sm = {.pid = pid};
    pthread_t sth;
    pthread_create(&sth, NULL, sampler_main, &sm);

    worker *ws = calloc((size_t)nw, sizeof *ws);
    pthread_t *th = calloc((size_t)nw, sizeof *th);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)nw + 1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int started = 0;
    for (int i = 0; i < nw; i++) {
        ws[i] = (worker){.rank = i, .nw = nw, .ep = ep, .go = &go};
        for (int k = 0; k < KINDS; k++) ws[i].lat[k] = calloc((size_t)steps, sizeof(float));
        if (pthread_create(&th[i], &attr, worker_main, &ws[i]) != 0) {
            fprintf(stderr, "bench_ps_load: cannot start worker thread %d of %d: %s\n", i, nw, strerror(errno));
            break;
        }
        started++;
    }
    if (started < nw) cli_die(1, "only %d of %d worker threads started", started, nw);
    double t0 = now_s();
    pthread_barrier_wait(&go);
    for (int i = 0; i < nw; i++) pthread_join(th[i], NULL);
    double t_end = now_s();
    int st = 0;
    pid_t r;
    double wait_until = now_s() + 20;
    while ((r = waitpid(pid, &st, WNOHANG)) == 0 && now_s() < wait_until) usleep(20000);
    if (r == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    atomic_store(&sm.stop, 1);
    pthread_join(sth, NULL);

    int ok = 0, conn = 0;
    double last_conn = t0, first_step = 1e30, last_step_end = 0, last_in = 0, last_out = 0;
    int64_t nreq = 0;
    const char *first_err = NULL;
    for (int i = 0; i < nw; i++) {
        ok += ws[i].ok;
        if (ws[i].connected_at > 0) {
            conn++;
            if (ws[i].connected_at > last_conn) last_conn = ws[i].connected_at;
            if (ws[i].connected_at < first_step) first_step = ws[i].connected_at;
        }
        if (ws[i].barrier_in > last_step_end) last_step_end = ws[i].barrier_in;
        if (ws[i].barrier_in > last_in) last_in = ws[i].barrier_in;
        if (ws[i].barrier_out > last_out) last_out = ws[i].barrier_out;
        nreq += (int64_t)ws[i].steps_done * KINDS;
        if (!first_err && ws[i].err[0]) first_err = ws[i].err;
    }
    double span = last_step_end > first_step ? last_step_end - first_step : t_end - t0;
    printf("\n== %d workers, 1 server (%s, RLIMIT_NOFILE %llu), %d steps at %.3g steps/s each, %d ids, %d dense floats\n",
           nw, ep, (unsigned long long)srv.rlim_cur, steps, rate, nids, dense_n);
    printf("workers: %d connected (all within %.2f s), %d finished, %d failed%s%s\n", conn, last_conn - t0, ok, nw - ok,
           first_err ? "; first error: " : "", first_err ? first_err : "");
    printf("requests: %lld in %.2f s = %.0f requests/s (offered %.0f/s); server CPU %.2f s in all (%.0f us per "
           "request)\n",
           (long long)nreq, span, span > 0 ? (double)nreq / span : 0, (double)nw * rate * KINDS, sm.cpu_s,
           nreq ? 1e6 * sm.cpu_s / (double)nreq : 0);
    float *all = malloc((size_t)nw * (size_t)steps * sizeof(float));
    for (int k = 0; k < KINDS; k++) {
        size_t n = 0;
        for (int i = 0; i < nw; i++)
            for (int s = 0; s < ws[i].steps_done; s++) all[n++] = ws[i].lat[k][s];
        if (!n) continue;
        qsort(all, n, sizeof *all, cmp_f);
        printf("  %-12s p50 %8.0f us  p99 %8.0f us  max %8.0f us  (%zu requests)\n", kind_name[k], 1e6 * all[n / 2],
               1e6 * all[(size_t)((double)n * 0.99)], 1e6 * all[n - 1], n);
    }
    free(all);
    if (ok == nw) printf("barrier: %.1f ms from the last arrival to the last return\n", 1e3 * (last_out - last_in));
    printf("server: peak RSS %.1f MiB, peak %ld open descriptors, peak %ld threads; exit %s %d\n", sm.rss_kb / 1024.0,
           sm.fds, sm.threads, WIFEXITED(st) ? "status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    fflush(stdout);
    for (int i = 0; i < nw; i++)
        for (int k = 0; k < KINDS; k++) free(ws[i].lat[k]);
    free(ws);
    free(th);
    pthread_barrier_destroy(&go);
    pthread_attr_destroy(&attr);
}

/* ---- the rendezvous of N ranks ---------------------------------------------------------------- */

typedef struct {
    int rank, world, port, st;
    double done;
    char err[256];
} rdzv_rank;

static void *rdzv_main(void *arg)
{
    rdzv_rank *r = arg;
    char **eps = NULL;
    r->st = fl__rdzv_endpoints("127.0.0.1", r->port, r->rank, r->world, &secret, 120000, &eps);
    r->done = now_s();
    if (r->st != FL_OK) snprintf(r->err, sizeof r->err, "rank %d: %s", r->rank, fl_last_error());
    for (int i = 0; eps && i < r->world; i++) free(eps[i]);
    free(eps);
    return NULL;
}

static void run_rdzv(int n)
{
    fl_net_listener *l;
    if (fl_net_listen("127.0.0.1", 0, &l) != FL_OK) cli_die(1, "rendezvous port: %s", fl_last_error());
    int port = fl_net_listener_port(l);
    fl_net_listener_free(l);
    rdzv_rank *rs = calloc((size_t)n, sizeof *rs);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    double t0 = now_s();
    int started = 0;
    for (int i = 0; i < n; i++) {
        rs[i] = (rdzv_rank){.rank = i, .world = n, .port = port};
        if (pthread_create(&th[i], &attr, rdzv_main, &rs[i]) != 0) break;
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double last = t0;
    int ok = 0;
    const char *err = NULL;
    for (int i = 0; i < started; i++) {
        if (rs[i].st == FL_OK) ok++;
        else if (!err) err = rs[i].err;
        if (rs[i].done > last) last = rs[i].done;
    }
    printf("\n== rendezvous of %d ranks (threads, 127.0.0.1): %d of %d have the list after %.2f s%s%s\n", n, ok, n,
           last - t0, err ? "; first error: " : "", err ? err : "");
    free(rs);
    free(th);
    pthread_attr_destroy(&attr);
}

static int parse_int(const char *name, const char *v, int lo, int hi)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        cli_die(2, "%s expects an integer in [%d, %d], got '%s'", name, lo, hi, v);
    return (int)x;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"workers", required_argument, NULL, 'w'},       {"steps", required_argument, NULL, 's'},
        {"rate", required_argument, NULL, 'r'},          {"ids", required_argument, NULL, 'i'},
        {"dense", required_argument, NULL, 'd'},         {"server_threads", required_argument, NULL, 't'},
        {"rdzv", required_argument, NULL, 'z'},          {"connect_timeout_ms", required_argument, NULL, 'c'},
        {"server_nofile", required_argument, NULL, 'n'}, {NULL, 0, NULL, 0}};
    const char *workers = "64,256,512", *v;
    char name[64];
    int c;
    cli_begin(1);
    while ((c = cli_next(argc, argv, "", opts, name, &v)) != -1) {
        switch (c) {
        case 'w': workers = v; break;
        case 's': steps = parse_int(name, v, 1, 1000000); break;
        case 'r': {
            char *end;
            rate = strtod(v, &end);
            if (end == v || *end || !(rate > 0 && rate <= 1e6))
                cli_die(2, "--rate expects steps/s in (0, 1e6], got '%s'", v);
            break;
        }
        case 'i': nids = parse_int(name, v, 1, 1 << 20); break;
        case 'd': dense_n = parse_int(name, v, 1, 1 << 26); break;
        case 't': server_threads = parse_int(name, v, 0, 1024); break;
        case 'z': rdzv_n = parse_int(name, v, 0, MAX_W); break;
        case 'c': connect_ms = parse_int(name, v, 1, 3600000); break;
        case 'n': server_nofile = parse_int(name, v, 16, 1 << 30); break;
        default: cli_die(2, "unknown option %s", name);
        }
    }
    if (optind < argc) cli_die(2, "unexpected argument '%s'", argv[optind]);
    signal(SIGPIPE, SIG_IGN);
    if (fl_net_secret_generate(&secret) != FL_OK) cli_die(1, "secret: %s", fl_last_error());
    memset(tables, 0, sizeof tables);
    tables[0].name = "emb";
    tables[0].kind = FL_PS_SPARSE;
    tables[0].dim = DIM;
    tables[0].init = fl_init_uniform(-0.01f, 0.01f);
    tables[0].opt = (fl_ps_optimizer){FL_PS_OPT_ADAGRAD, 0.05f, 0, 0, 0, 0, 0, 0};
    tables[1].name = "dense";
    tables[1].kind = FL_PS_DENSE;
    tables[1].rows = 1;
    tables[1].cols = dense_n;
    tables[1].opt = (fl_ps_optimizer){FL_PS_OPT_ADAM, 0.001f, 0, 0, 0, 0, 0, 0};
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    double load[1] = {0};
    if (getloadavg(load, 1) != 1) load[0] = -1;
    printf("# bench_ps_load: RLIMIT_NOFILE soft %llu hard %llu; %ld CPUs; load average %.2f\n",
           (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, sysconf(_SC_NPROCESSORS_ONLN), load[0]);
    for (const char *p = workers; *p;) {
        char *end;
        long nw = strtol(p, &end, 10);
        if (end == p || nw < 1 || nw > MAX_W || (*end && *end != ','))
            cli_die(2, "--workers expects a comma-separated list of counts in [1, %d], got '%s'", MAX_W, workers);
        run((int)nw);
        p = *end ? end + 1 : end;
    }
    if (rdzv_n > 0) run_rdzv(rdzv_n);
    return 0;
}
