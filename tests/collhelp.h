/* collhelp.h - the harness test_coll.c and test_coll_fail.c share: a world of P ranks on
 * loopback (listeners bound first, so no port race), forked one process per rank with the test
 * secret, a backend named or chosen (ch_comm checks which was used), and waits that name the
 * rank that failed. */
#ifndef FLEET_TEST_COLLHELP_H
#define FLEET_TEST_COLLHELP_H

#include <sys/prctl.h>
#include <time.h>

#include "testhelp.h"
#include <fleet/coll.h>
#include <fleet/net.h>

#define CH_MAXP 16
static const fl_net_secret ch_secret = {.bytes = "fleet-test-secret-0123456789abc", .len = 32};

typedef struct {
    int P;
    int shm;             /* 1: allow shared memory */
    const char *backend; /* opts->backend (NULL: FLEET_COLL_BACKEND, else automatic) */
    const char *expect;  /* the backend ch_comm expects; NULL: shm if allowed, else tcp */
    int timeout_ms;      /* 0: 20000 */
    size_t small_max, chunk;
    fl_net_listener *ls[CH_MAXP];
    char epbuf[CH_MAXP][64];
    const char *eps[CH_MAXP];
    pid_t pids[CH_MAXP];
} ch_world;

typedef void (*ch_rank_fn)(ch_world *w, int rank, void *arg);

/* Options for rank r of w (the test secret, the pre-bound listener). */
static inline fl_coll_opts ch_opts(ch_world *w, int r)
{
    fl_coll_opts o = {0};
    o.rank = r;
    o.world_size = w->P;
    o.endpoints = w->eps;
    o.secret = &ch_secret;
    o.timeout_ms = w->timeout_ms ? w->timeout_ms : 20000;
    o.disable_shm = !w->shm;
    o.listener = w->ls[r];
    o.small_max_bytes = w->small_max;
    o.chunk_bytes = w->chunk;
    o.backend = w->backend;
    return o;
}

#define CHECK_STR_EQ(a, b)                                                                             \
    do {                                                                                               \
        const char *a_ = (a), *b_ = (b);                                                               \
        if (!a_ || strcmp(a_, b_)) TFAIL("%s is \"%s\", expected \"%s\"", #a, a_ ? a_ : "(null)", b_); \
    } while (0)

static inline fl_coll *ch_comm(ch_world *w, int r)
{
    fl_coll_opts o = ch_opts(w, r);
    fl_coll *c = NULL;
    CHECK_OK(fl_coll_create(&o, &c));
    const char *want = w->P == 1 ? "self" : w->expect ? w->expect : w->shm ? "shm" : "tcp";
    CHECK_STR_EQ(fl_coll_backend_name(c), want);
    CHECK_EQ_INT(fl_coll_uses_shm(c), !strcmp(want, "shm"));
    return c;
}

static inline void ch_init(ch_world *w, int P, int shm)
{
    memset(w, 0, sizeof *w);
    w->P = P;
    w->shm = shm;
    for (int r = 0; r < P; r++) {
        CHECK_OK(fl_net_listen("127.0.0.1", 0, &w->ls[r]));
        snprintf(w->epbuf[r], sizeof w->epbuf[r], "127.0.0.1:%d", fl_net_listener_port(w->ls[r]));
        w->eps[r] = w->epbuf[r];
    }
}

/* Forks the ranks; each runs fn and exits 0 unless a CHECK failed. */
static inline void ch_start(ch_world *w, ch_rank_fn fn, void *arg)
{
    pid_t parent = getpid();
    for (int r = 0; r < w->P; r++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) TFAIL("fork failed");
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(3);
            alarm(100);
            for (int q = 0; q < w->P; q++)
                if (q != r) fl_net_listener_free(w->ls[q]);
            fn(w, r, arg);
            fl_net_listener_free(w->ls[r]);
            fflush(stdout);
            _exit(0);
        }
        w->pids[r] = pid;
    }
    for (int r = 0; r < w->P; r++) fl_net_listener_free(w->ls[r]);
}

/* Waits for every rank (skipping `skip`, -1 for none); returns the number that failed. */
static inline int ch_wait(ch_world *w, int skip)
{
    int bad = 0;
    for (int r = 0; r < w->P; r++) {
        int ws = 0;
        if (waitpid(w->pids[r], &ws, 0) < 0) continue;
        if (r == skip) continue;
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            fprintf(stderr, "  rank %d of %d failed (%s %d)\n", r, w->P, WIFEXITED(ws) ? "exit" : "signal",
                    WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
            bad++;
        }
    }
    return bad;
}

static inline void ch_run(int P, int shm, ch_rank_fn fn, void *arg)
{
    ch_world w;
    ch_init(&w, P, shm);
    ch_start(&w, fn, arg);
    if (ch_wait(&w, -1)) TFAIL("%d ranks (%s): some ranks failed", P, shm ? "shm" : "tcp");
}

/* P ranks with shared memory allowed and the backend named in opts->backend (via_env 0)
 * or in FLEET_COLL_BACKEND (via_env 1); ch_comm checks that it is the one used. */
static inline void ch_run_named(int P, const char *name, int via_env, ch_rank_fn fn, void *arg)
{
    ch_world w;
    ch_init(&w, P, 1);
    w.backend = via_env ? NULL : name;
    w.expect = name;
    if (via_env) setenv("FLEET_COLL_BACKEND", name, 1);
    ch_start(&w, fn, arg);
    int bad = ch_wait(&w, -1);
    if (via_env) unsetenv("FLEET_COLL_BACKEND");
    if (bad)
        TFAIL("%d ranks, backend '%s' named in %s: some ranks failed", P, name,
              via_env ? "FLEET_COLL_BACKEND" : "opts->backend");
}

static inline double ch_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) TFAIL("out of memory");
    return p;
}

#endif
