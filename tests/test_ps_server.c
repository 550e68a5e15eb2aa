/*
 * test_ps_server.c - the PS across processes on 127.0.0.1: a worker killed with SIGKILL
 * makes the server return an error naming it within 10 s; a server killed with SIGKILL
 * makes a client call (also one blocked in a barrier) fail within 10 s naming the server;
 * a save interrupted by a server's death leaves the previous checkpoint loadable, bit-exact,
 * by freshly started servers, which then exit cleanly when the worker stops; and a short
 * libFuzzer run of the frame decoder when clang with libFuzzer is installed.
 */
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>

#include "testhelp.h"
#include "ps_fork.h"
#include <fleet/ps.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static fl_ps_table_config tables[3];
static int ntables = 2; /* 3: the big dense table "wide" too (stopped_server_named_in_a_blocked_send) */

static void init_tables(void)
{
    memset(tables, 0, sizeof tables);
    tables[0].name = "emb";
    tables[0].kind = FL_PS_SPARSE;
    tables[0].dim = 8;
    tables[0].init = fl_init_normal(0, 0.01f);
    tables[0].opt = (fl_ps_optimizer){FL_PS_OPT_ADAGRAD, 0.05f, 0, 0, 0, 0};
    tables[1].name = "fc";
    tables[1].kind = FL_PS_DENSE;
    tables[1].rows = 16;
    tables[1].cols = 4;
    tables[1].opt = (fl_ps_optimizer){FL_PS_OPT_ADAM, 0.01f, 0, 0, 0, 0};
    tables[2].name = "wide"; /* 16 MB: more than the socket buffers of a connection hold */
    tables[2].kind = FL_PS_DENSE;
    tables[2].rows = 1 << 20;
    tables[2].cols = 4;
    tables[2].opt = (fl_ps_optimizer){FL_PS_OPT_SGD, 0.01f, 0, 0, 0, 0};
}

static int spawn_sync; /* the next servers spawned run in sync mode */

/* Starts server `index` of `ns` in a child process (loading `load_dir` first when given);
 * returns its pid and writes its endpoint.  The child exits 0 when run returned FL_OK. */
static pid_t spawn_server(int index, int ns, int nw, const char *load_dir, char *ep, size_t epcap)
{
    fl_ps_server_opts o = {0};
    o.server_index = index;
    o.num_servers = ns;
    o.num_workers = nw;
    o.tables = tables;
    o.num_tables = ntables;
    o.insecure_local = 1;
    o.reconnect_grace_ms = 1000;
    o.sync = spawn_sync;
    pid_t pid = ps_fork_server(&o, load_dir, 60, ep, epcap);
    CHECK(pid > 0);
    return pid;
}

static int wait_exit(pid_t pid)
{
    int ws = 0;
    CHECK(waitpid(pid, &ws, 0) == pid);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

static fl_ps_client *client_for(const char *const *eps, int ns, int rank, int nw)
{
    fl_ps_client_opts o = {0};
    o.endpoints = eps;
    o.num_servers = ns;
    o.worker_rank = rank;
    o.num_workers = nw;
    o.tables = tables;
    o.num_tables = 2;
    o.insecure_local = 1;
    o.connect_timeout_ms = 5000;
    o.request_timeout_ms = 8000;
    o.barrier_timeout_ms = 30000;
    o.retry_ms = 2000;
    fl_ps_client *c;
    CHECK_OK(fl_ps_client_create(&o, &c));
    return c;
}

static void train(fl_ps_client *c, int steps, int seed)
{
    uint64_t ids[128];
    float g[128 * 8], out[128 * 8], dg[64];
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < 128; i++) ids[i] = (uint64_t)((seed * 7919 + s * 131 + i * 37) % 5000) * 0x10001ull;
        th_fill_uniform(g, 128 * 8, -1, 1, (unsigned)(seed * 1000 + s));
        th_fill_uniform(dg, 64, -1, 1, (unsigned)(seed * 1000 + s + 500));
        CHECK_OK(fl_ps_client_pull_sparse(c, 0, ids, 128, out, 1));
        CHECK_OK(fl_ps_client_push_sparse(c, 0, ids, 128, g, NULL, NULL));
        CHECK_OK(fl_ps_client_push_dense(c, 1, dg));
    }
}

static void snapshot(fl_ps_client *c, float *sv, float *dv)
{
    static uint64_t all[5000];
    for (int i = 0; i < 5000; i++) all[i] = (uint64_t)i * 0x10001ull;
    CHECK_OK(fl_ps_client_pull_sparse(c, 0, all, 5000, sv, 0));
    CHECK_OK(fl_ps_client_pull_dense(c, 1, dv));
}

/* ---- a killed worker --------------------------------------------------------------------------- */

typedef struct {
    fl_ps_server *s;
    int rc;
    double t_end;
    char msg[1024];
} run_arg;

static void *run_server(void *p)
{
    run_arg *a = p;
    a->rc = fl_ps_server_run(a->s);
    a->t_end = now_s();
    snprintf(a->msg, sizeof a->msg, "%s", fl_last_error());
    return NULL;
}

TEST(killed_worker_fails_server_within_10s)
{
    init_tables();
    fl_ps_server_opts o = {0};
    o.num_servers = 1;
    o.num_workers = 2;
    o.tables = tables;
    o.num_tables = 2;
    o.insecure_local = 1;
    fl_ps_server *s;
    CHECK_OK(fl_ps_server_create(&o, &s)); /* default grace: 3 s */
    char ep[128];
    snprintf(ep, sizeof ep, "%s", fl_ps_server_endpoint(s));
    const char *eps[1] = {ep};
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t child = th_fork(60);
    if (child == 0) { /* worker 1: trains a little, then waits to be killed */
        fl_ps_client *c = client_for(eps, 1, 1, 2);
        train(c, 3, 9);
        CHECK(write(ready[1], "r", 1) == 1);
        for (;;) pause();
    }
    run_arg a = {s, 0, 0, ""};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, run_server, &a) == 0);
    fl_ps_client *w0 = client_for(eps, 1, 0, 2);
    char r;
    CHECK(read(ready[0], &r, 1) == 1);
    double t0 = now_s();
    kill(child, SIGKILL);
    CHECK_EQ_INT(wait_exit(child), 128 + SIGKILL);
    pthread_join(th, NULL);
    CHECK_EQ_INT(a.rc, FL_EREMOTE);
    CHECK_STR_HAS(a.msg, "worker 1");
    printf("  server noticed the killed worker after %.2f s: %s\n", a.t_end - t0, a.msg);
    CHECK(a.t_end - t0 < 10.0);
    /* worker 0 now gets a clear error too */
    float v[64];
    CHECK(fl_ps_client_pull_dense(w0, 1, v) != FL_OK);
    CHECK_STR_HAS(fl_last_error(), "server 0");
    fl_ps_client_free(w0);
    fl_ps_server_free(s);
}

/* ---- a killed server ----------------------------------------------------------------------------- */

typedef struct {
    fl_ps_client *c;
    int rc;
    double t_end;
    char msg[1024];
} barrier_arg;

static void *barrier_thread(void *p)
{
    barrier_arg *a = p;
    a->rc = fl_ps_client_barrier(a->c);
    a->t_end = now_s();
    snprintf(a->msg, sizeof a->msg, "%s", fl_last_error());
    return NULL;
}

TEST(killed_server_fails_client_calls_within_10s)
{
    init_tables();
    char ep[128];
    pid_t sp = spawn_server(0, 1, 2, NULL, ep, sizeof ep);
    const char *eps[1] = {ep};
    fl_ps_client *c = client_for(eps, 1, 0, 2);
    train(c, 2, 1);
    /* worker 1 never comes: the barrier waits until the server dies */
    barrier_arg a = {c, 0, 0, ""};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, barrier_thread, &a) == 0);
    usleep(300000);
    double t0 = now_s();
    kill(sp, SIGKILL);
    pthread_join(th, NULL);
    CHECK(a.rc != FL_OK);
    CHECK_STR_HAS(a.msg, "server 0");
    CHECK_STR_HAS(a.msg, ep);
    printf("  barrier failed %.2f s after the server was killed: %s\n", a.t_end - t0, a.msg);
    CHECK(a.t_end - t0 < 10.0);
    t0 = now_s();
    float out[64];
    CHECK(fl_ps_client_pull_dense(c, 1, out) != FL_OK);
    CHECK_STR_HAS(fl_last_error(), ep);
    CHECK(now_s() - t0 < 10.0);
    CHECK_EQ_INT(wait_exit(sp), 128 + SIGKILL);
    fl_ps_client_free(c);
}

/* A server killed while a worker's connection to it is up: the next request round (six
 * pulls) finds the connection broken and spends one retry budget (retry_ms 2000) on the
 * server, not one per request of the round. */
TEST(killed_server_fails_a_round_within_one_retry_budget)
{
    init_tables();
    char ep[128];
    pid_t sp = spawn_server(0, 1, 1, NULL, ep, sizeof ep);
    const char *eps[1] = {ep};
    fl_ps_client *c = client_for(eps, 1, 0, 1);
    train(c, 1, 1);
    kill(sp, SIGKILL);
    CHECK_EQ_INT(wait_exit(sp), 128 + SIGKILL);
    const int six[6] = {1, 1, 1, 1, 1, 1};
    float o6[6][64], *outs[6] = {o6[0], o6[1], o6[2], o6[3], o6[4], o6[5]};
    double t0 = now_s();
    CHECK(fl_ps_client_pull_dense_many(c, 6, six, outs) != FL_OK);
    double t = now_s() - t0;
    CHECK_STR_HAS(fl_last_error(), ep);
    printf("  a round of six pulls failed %.2f s after it started: %s\n", t, fl_last_error());
    if (t > 5.0) TFAIL("the round took %.1f s: more than one retry budget (2 s) for the dead server", t);
    fl_ps_client_free(c);
}

/* ---- a save interrupted by a dying server ------------------------------------------------------------ */

TEST(save_interrupted_by_killed_server_keeps_previous)
{
    init_tables();
    char dir[64];
    th_mktemp(dir, sizeof dir, "fl_ps_killsave");
    char ep0[128], ep1[128];
    pid_t s0 = spawn_server(0, 2, 1, NULL, ep0, sizeof ep0);
    pid_t s1 = spawn_server(1, 2, 1, NULL, ep1, sizeof ep1);
    const char *eps[2] = {ep0, ep1};
    fl_ps_client *c = client_for(eps, 2, 0, 1);
    train(c, 20, 1);
    CHECK_OK(fl_ps_client_save(c, dir, 0, 20));
    static float sv[5000 * 8], sv2[5000 * 8];
    float dv[64], dv2[64];
    snapshot(c, sv, dv);
    train(c, 10, 2);
    kill(s1, SIGKILL);
    CHECK_EQ_INT(wait_exit(s1), 128 + SIGKILL);
    CHECK(fl_ps_client_save(c, dir, 0, 30) != FL_OK);
    CHECK_STR_HAS(fl_last_error(), "server 1");
    CHECK_STR_HAS(fl_last_error(), "previous checkpoint");
    fl_ps_client_free(c); /* no stop: server 0 reports the lost worker and exits 1 */
    CHECK_EQ_INT(wait_exit(s0), 1);
    /* fresh servers load the last committed checkpoint */
    s0 = spawn_server(0, 2, 1, dir, ep0, sizeof ep0);
    s1 = spawn_server(1, 2, 1, dir, ep1, sizeof ep1);
    c = client_for(eps, 2, 0, 1);
    snapshot(c, sv2, dv2);
    CHECK(memcmp(sv, sv2, sizeof sv) == 0);
    CHECK(memcmp(dv, dv2, sizeof dv) == 0);
    CHECK_OK(fl_ps_client_stop(c));
    fl_ps_client_free(c);
    CHECK_EQ_INT(wait_exit(s0), 0); /* servers exit by themselves once every worker stopped */
    CHECK_EQ_INT(wait_exit(s1), 0);
    th_rmtree(dir);
}

/* ---- scanning a sparse table ------------------------------------------------------------------------- */

typedef struct {
    int64_t rows, bad, pages;
    uint64_t seen_sum;
    float *want; /* 5000 x 8, by id index */
} scan_acc;

static int scan_cb(void *user, const uint64_t *ids, const float *vals, int64_t n, int dim)
{
    scan_acc *a = user;
    a->pages++;
    for (int64_t i = 0; i < n; i++) {
        uint64_t k = ids[i] / 0x10001ull;
        if (dim != 8 || ids[i] % 0x10001ull || k >= 5000 || memcmp(vals + i * 8, a->want + k * 8, 32)) a->bad++;
        a->seen_sum += ids[i];
        a->rows++;
    }
    return FL_OK;
}

/* fl_ps_client_scan_sparse returns every row of every shard once, with its values. */
TEST(scan_returns_every_row_once)
{
    init_tables();
    char ep0[128], ep1[128];
    pid_t s0 = spawn_server(0, 2, 1, NULL, ep0, sizeof ep0);
    pid_t s1 = spawn_server(1, 2, 1, NULL, ep1, sizeof ep1);
    const char *eps[2] = {ep0, ep1};
    fl_ps_client *c = client_for(eps, 2, 0, 1);
    train(c, 20, 3);
    static float sv[5000 * 8];
    float dv[64];
    snapshot(c, sv, dv);
    fl_ps_table_stats ts;
    CHECK_OK(fl_ps_client_table_stats(c, 0, &ts));
    CHECK(ts.rows > 100 && ts.rows < 5000);
    scan_acc a = {0, 0, 0, 0, sv};
    CHECK_OK(fl_ps_client_scan_sparse(c, 0, scan_cb, &a));
    CHECK_EQ_INT(a.rows, ts.rows);
    CHECK_EQ_INT(a.bad, 0);
    CHECK(a.pages >= 2); /* one page per server at least */
    /* the rows are the distinct ids pulled while training */
    uint64_t want_sum = 0;
    int64_t distinct = 0;
    static unsigned char used[5000];
    memset(used, 0, sizeof used);
    for (int seed = 3, s = 0; s < 20; s++)
        for (int i = 0; i < 128; i++) used[(seed * 7919 + s * 131 + i * 37) % 5000] = 1;
    for (int k = 0; k < 5000; k++)
        if (used[k]) {
            want_sum += (uint64_t)k * 0x10001ull;
            distinct++;
        }
    CHECK_EQ_INT(a.rows, distinct);
    CHECK(a.seen_sum == want_sum);
    CHECK(fl_ps_client_scan_sparse(c, 1, scan_cb, &a) == FL_EINVAL); /* a dense table */
    CHECK_OK(fl_ps_client_stop(c));
    fl_ps_client_free(c);
    CHECK_EQ_INT(wait_exit(s0), 0);
    CHECK_EQ_INT(wait_exit(s1), 0);
}


/* ---- a stopped worker, a stopped server ------------------------------------------------------------------ */

typedef struct {
    pid_t pid;
    int out; /* read end: "ready\n" after its first steps, then its final error line */
} proc;

/* Forks worker `rank` of nw: it trains until a call fails, reporting "ready" after 3 steps
 * and then its error (with how long after its last good step it came) on the pipe, then
 * how long a stop call took after that, and its result. */
static proc spawn_worker(const char *ep, int rank, int nw)
{
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    pid_t pid = th_fork(60);
    if (pid == 0) {
        close(pfd[0]);
        const char *eps[1] = {ep};
        fl_ps_client_opts o = {0};
        o.endpoints = eps;
        o.num_servers = 1;
        o.worker_rank = rank;
        o.num_workers = nw;
        o.tables = tables;
        o.num_tables = ntables;
        o.insecure_local = 1;
        o.connect_timeout_ms = 5000;
        fl_ps_client *c;
        CHECK_OK(fl_ps_client_create(&o, &c));
        float dg[64], dv[64], *wide = ntables > 2 ? calloc((size_t)1 << 22, sizeof(float)) : NULL;
        CHECK(ntables == 2 || wide);
        double last = now_s();
        for (int s = 0;; s++) {
            th_fill_uniform(dg, 64, -1, 1, (unsigned)(rank * 1000 + s));
            /* with "wide": two requests in one round, the second too big for the socket's
             * buffers, so its send is what waits on a stopped server */
            int st = wide ? fl_ps_client_push_dense_many(c, 2, (const int[]){1, 2}, (const float *const[]){dg, wide})
                          : fl_ps_client_push_dense(c, 1, dg);
            if (st == FL_OK) st = fl_ps_client_pull_dense(c, 1, dv);
            if (st) {
                char line[1600];
                int n = snprintf(line, sizeof line, "%.2f %s\n", now_s() - last, fl_last_error());
                CHECK(write(pfd[1], line, (size_t)n) == n);
                /* a call after the failure must not wait for its full deadline either */
                double t = now_s();
                st = fl_ps_client_stop(c);
                n = snprintf(line, sizeof line, "%.2f %s\n", now_s() - t, st ? fl_last_error() : "stopped");
                CHECK(write(pfd[1], line, (size_t)n) == n);
                break;
            }
            last = now_s();
            if (s == 3) CHECK(write(pfd[1], "ready\n", 6) == 6);
            usleep(2000);
        }
        fl_ps_client_free(c);
        free(wide);
        _exit(0);
    }
    close(pfd[1]);
    return (proc){pid, pfd[0]};
}

static void read_line(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap && read(fd, buf + n, 1) == 1 && buf[n] != '\n') n++;
    buf[n] = 0;
}

/* Waits up to `secs` for pid to exit; returns its status, or -1 if it is still running. */
static int wait_exit_within(pid_t pid, double secs)
{
    double end = now_s() + secs;
    int ws;
    while (now_s() < end) {
        if (waitpid(pid, &ws, WNOHANG) == pid) return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        usleep(20000);
    }
    return -1;
}

/* A SIGSTOPped worker of a sync job: the server fails naming it, and so does the other
 * worker's pending push, within 10 s; resumed, the stopped worker fails too, and every
 * process ends. */
TEST(stopped_worker_is_named_within_10s)
{
    init_tables();
    char ep[128], line[1600];
    spawn_sync = 1;
    pid_t sp = spawn_server(0, 1, 2, NULL, ep, sizeof ep);
    spawn_sync = 0;
    proc w0 = spawn_worker(ep, 0, 2), w1 = spawn_worker(ep, 1, 2);
    read_line(w0.out, line, sizeof line);
    CHECK(!strcmp(line, "ready"));
    read_line(w1.out, line, sizeof line);
    CHECK(!strcmp(line, "ready"));
    double t0 = now_s();
    kill(w1.pid, SIGSTOP);
    read_line(w0.out, line, sizeof line);
    double dt0 = now_s() - t0;
    int rs = wait_exit_within(sp, 10.0);
    double dts = now_s() - t0;
    fprintf(stderr, "  worker 1 stopped: worker 0 failed after %.2f s: %s\n", dt0, line);
    fprintf(stderr, "  the server ended (status %d) after %.2f s\n", rs, dts);
    CHECK_STR_HAS(line, "worker 1 (");
    CHECK_STR_HAS(line, "not even a heartbeat");
    CHECK(dt0 < 10.0);
    CHECK_EQ_INT(rs, 1);
    read_line(w0.out, line, sizeof line);
    fprintf(stderr, "  worker 0 then stopped in %s\n", line);
    CHECK(atof(line) < 10.0);
    CHECK_EQ_INT(wait_exit_within(w0.pid, 5.0), 0);
    kill(w1.pid, SIGCONT);
    read_line(w1.out, line, sizeof line);
    fprintf(stderr, "  worker 1, resumed: %s\n", line);
    CHECK(line[0] != 0);
    CHECK(strstr(line, "peer silent") == NULL);
    read_line(w1.out, line, sizeof line);
    CHECK(atof(line) < 10.0);
    int r1 = wait_exit_within(w1.pid, 10.0);
    if (r1 < 0) {
        kill(w1.pid, SIGKILL);
        waitpid(w1.pid, NULL, 0);
        TFAIL("the resumed worker did not end");
    }
    CHECK_EQ_INT(r1, 0);
    close(w0.out);
    close(w1.out);
}

/* A SIGSTOPped server: the worker's next call fails within 10 s naming it (not after the
 * 60 s request deadline); resumed, the server notices the worker left and ends. */
static void stopped_server_case(void)
{
    init_tables();
    char ep[128], line[1600];
    pid_t sp = spawn_server(0, 1, 1, NULL, ep, sizeof ep);
    proc w = spawn_worker(ep, 0, 1);
    read_line(w.out, line, sizeof line);
    CHECK(!strcmp(line, "ready"));
    double t0 = now_s();
    kill(sp, SIGSTOP);
    read_line(w.out, line, sizeof line);
    double dt = now_s() - t0;
    fprintf(stderr, "  server stopped: the worker failed after %.2f s: %s\n", dt, line);
    CHECK_STR_HAS(line, "server 0 (");
    CHECK_STR_HAS(line, "not even a heartbeat");
    CHECK_STR_HAS(line, "stopped, hung or cut off");
    CHECK(dt < 10.0);
    read_line(w.out, line, sizeof line);
    fprintf(stderr, "  a stop call after that failed in %s\n", line);
    CHECK(atof(line) < 10.0);
    CHECK_EQ_INT(wait_exit_within(w.pid, 5.0), 0);
    kill(sp, SIGCONT);
    int rs = wait_exit_within(sp, 10.0);
    if (rs < 0) {
        kill(sp, SIGKILL);
        waitpid(sp, NULL, 0);
        TFAIL("the resumed server did not end");
    }
    CHECK_EQ_INT(rs, 1);
    close(w.out);
}

TEST(stopped_server_is_named_within_10s) { stopped_server_case(); }

/* The same when the worker's round holds two requests and the second one's send is what
 * waits on the stopped server: the first request's answer, due on the connection that send
 * gave up, names the server as stopped or hung too (it said "the connection ... was lost"). */
TEST(stopped_server_named_in_a_blocked_send)
{
    ntables = 3;
    stopped_server_case();
    ntables = 2;
}

/* ---- fuzzing the frame decoder ------------------------------------------------------------------------- */

TEST(fuzz_frame_decoder_briefly)
{
    char dir[32];
    if (!th_fuzz_build(dir, "tests/fuzz_ps_frame.c src/ps/frame.c src/net/*.c src/base/*.c -lcrypto -lcjson -lm -pthread"))
        return;
    th_fuzz_run(dir, 8);
}

/* A server for many workers raises its soft RLIMIT_NOFILE to about 8 descriptors per worker
 * (up to the hard limit).  With the soft limit left at 700, 512 workers of one client each
 * (bench/bench_ps_load.c) could not all open their heartbeat connections, and the server
 * failed a healthy worker as "stopped or hung" 8 s later. */
TEST(server_raises_its_descriptor_limit_for_its_workers)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    int workers = 512; /* fewer where the hard limit is lower: the raise stops there */
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)workers * 8 + 256) workers = (int)(rl.rlim_max - 256) / 8;
    if (workers < 32) TFAIL("the hard RLIMIT_NOFILE %llu is too low for this case", (unsigned long long)rl.rlim_max);
    const rlim_t want = (rlim_t)workers * 8 + 256;
    rl.rlim_cur = 128;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    init_tables();
    fl_ps_server_opts o = {0};
    o.num_servers = 1;
    o.num_workers = workers;
    o.tables = tables;
    o.num_tables = 2;
    o.insecure_local = 1;
    fl_ps_server *s;
    CHECK_OK(fl_ps_server_create(&o, &s));
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    printf("%d workers: soft RLIMIT_NOFILE after the server's creation %llu\n", workers, (unsigned long long)rl.rlim_cur);
    CHECK(rl.rlim_cur >= want);
    fl_ps_server_free(s);
}

/* A worker raises its soft RLIMIT_NOFILE for the connections its clients open (a request and
 * a heartbeat connection to every server, per client: 2 + thread_pool_size clients for a
 * trainer), as the server does for its workers; a hard limit below that is named in a
 * warning.  100 servers and 4 clients are 800 connections, with the rest of the process over
 * a soft limit of 1024. */
static char nofile_warning[1024];
static void nofile_sink(fl_log_level lv, const char *line, void *user)
{
    (void)user;
    if (lv == FL_LOG_WARN && strstr(line, "file descriptors")) snprintf(nofile_warning, sizeof nofile_warning, "%s", line);
}

TEST(client_raises_its_descriptor_limit_for_its_servers)
{
    enum { NS = 4 };
    init_tables();
    char eps[NS][128];
    const char *ep[NS];
    pid_t pid[NS];
    for (int i = 0; i < NS; i++) {
        pid[i] = spawn_server(i, NS, 2, NULL, eps[i], sizeof eps[i]);
        ep[i] = eps[i];
    }
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 4 * NS + 256)
        TFAIL("the hard RLIMIT_NOFILE %llu is too low for this case", (unsigned long long)rl.rlim_max);
    /* below a hard limit of 200: the limit goes as far as it can, and a warning names it (in a
     * child, forked while this process runs no thread: a hard limit is not raised again) */
    fflush(stdout);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        fl_log_set_sink(nofile_sink, NULL);
        struct rlimit low = {200, 200};
        int bad = setrlimit(RLIMIT_NOFILE, &low) != 0;
        fl_ps_client_opts o = {0};
        o.endpoints = ep;
        o.num_servers = NS;
        o.worker_rank = 1;
        o.num_workers = 2;
        o.tables = tables;
        o.num_tables = 2;
        o.insecure_local = 1;
        o.connect_timeout_ms = 5000;
        fl_ps_client *c = NULL;
        bad |= fl_ps_client_create(&o, &c) != FL_OK;
        bad |= getrlimit(RLIMIT_NOFILE, &low) != 0 || low.rlim_cur != 200;
        printf("  hard limit 200: \"%s\"\n", nofile_warning);
        bad |= !strstr(nofile_warning, "worker 1 (a request and a heartbeat connection per server and client) needs "
                                       "about 264 file descriptors, but RLIMIT_NOFILE allows 200 (hard limit 200)");
        bad |= !c || fl_ps_client_stop(c) != FL_OK;
        fflush(stdout);
        _exit(bad);
    }
    CHECK_EQ_INT(wait_exit(child), 0);
    rl.rlim_cur = 64;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    fl_ps_client *a = client_for(ep, NS, 0, 2);
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    printf("  soft RLIMIT_NOFILE 64, then %llu with a client of %d servers", (unsigned long long)rl.rlim_cur, NS);
    CHECK(rl.rlim_cur >= 2 * NS + 256);
    fl_ps_client *b = client_for(ep, NS, 0, 2); /* a second client of the same worker adds its own */
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    printf(", %llu with two\n", (unsigned long long)rl.rlim_cur);
    CHECK(rl.rlim_cur >= 4 * NS + 256);
    fl_ps_client_free(b);

    CHECK_OK(fl_ps_client_stop(a));
    fl_ps_client_free(a);
    for (int i = 0; i < NS; i++) CHECK_EQ_INT(wait_exit(pid[i]), 0);
}

TEST_MAIN(T(killed_worker_fails_server_within_10s), T(killed_server_fails_a_round_within_one_retry_budget),
          T(scan_returns_every_row_once), T(killed_server_fails_client_calls_within_10s),
          T(save_interrupted_by_killed_server_keeps_previous), T(stopped_worker_is_named_within_10s),
          T(stopped_server_is_named_within_10s), T(stopped_server_named_in_a_blocked_send), T(fuzz_frame_decoder_briefly),
          T(server_raises_its_descriptor_limit_for_its_workers), T(client_raises_its_descriptor_limit_for_its_servers))
