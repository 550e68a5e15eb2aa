/*
 * test_fleetrun_stop.c - a stopped process (SIGSTOP: a debugger, a frozen container, a
 * paging storm) in a job under fleetrun, end to end with the default liveness settings: a
 * PS worker, a PS server, a collective rank.  The peers name the stopped process as stopped
 * or hung after the silence window (FL__LIVE_TIMEOUT_MS, 6 s), fail, and fleetrun stops the
 * rest of the job with SIGTERM and SIGCONT, so the stopped process ends at once instead of
 * after --grace_s.  The job must end within 10 s of the stop (measured 6.3-6.6 s).  The runs
 * use --grace_s 20: without SIGCONT the stopped process would hold the job for 20 s more,
 * so the bound fails on that regression and on a slower detection, not on a loaded machine.
 */
#include "fleetrun_run.h"

#define STOP_BOUND_S 10.0

static char PS_TRAIN[PATH_MAX], COLL_TRAIN[PATH_MAX];

static void paths(void)
{
    char self[PATH_MAX - 64];
    th_tests_dir(self, sizeof self);
    snprintf(PS_TRAIN, sizeof PS_TRAIN, "%s/bin/ps_train", self);
    snprintf(COLL_TRAIN, sizeof COLL_TRAIN, "%s/../examples/quick_start/collective_train", self);
    if (access(PS_TRAIN, X_OK) || access(COLL_TRAIN, X_OK)) TFAIL("%s or %s is not built (make all)", PS_TRAIN, COLL_TRAIN);
}

/* Waits until r->dir/name holds `text`, fleetrun still running. */
static void wait_text(run_t *r, const char *name, const char *text, double timeout)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    double end = now() + timeout;
    for (;;) {
        char *s = slurp(path);
        int found = s && strstr(s, text);
        free(s);
        if (found) return;
        reap(r);
        if (r->done || now() > end) {
            load_out(r);
            TFAIL("\"%s\" did not appear in %s (fleetrun %s); output:\n%s", text, name, r->done ? "ended" : "still running",
                  r->out);
        }
        usleep(20000);
    }
}

/* The pid fleetrun printed for "started ROLE RANK (pid N)". */
static pid_t started_pid(run_t *r, const char *role, int rank)
{
    char key[64];
    snprintf(key, sizeof key, "started %s %d (pid ", role, rank);
    load_out(r);
    const char *p = strstr(r->out, key);
    if (!p) TFAIL("no \"%s\" in fleetrun's output:\n%s", key, r->out);
    return (pid_t)atoi(p + strlen(key));
}

/* Stops `role rank` once `ready` is in every log of `logs`, then expects fleetrun to fail
 * within STOP_BOUND_S, its output holding `named`, without the SIGKILL of --grace_s. */
static void stop_case(const char *const *args, const char *const *logs, const char *ready, const char *role, int rank,
                      const char *named, const char *named2)
{
    run_t r;
    setup(&r);
    paths();
    start(&r, (const char *[]){SECRET_ENV, NULL}, args);
    for (const char *const *l = logs; *l; l++) wait_text(&r, *l, ready, 60);
    usleep(300000);
    pid_t victim = started_pid(&r, role, rank);
    double t0 = now();
    CHECK(kill(victim, SIGSTOP) == 0);
    int rc = finish(&r, 60);
    double dt = r.t0 + r.elapsed - t0;
    fprintf(stderr, "  %s %d stopped: fleetrun exited %d after %.2f s\n", role, rank, rc, dt);
    if (rc == 0) TFAIL("fleetrun exited 0; output:\n%s", r.out);
    HAS(&r, named);
    HAS(&r, named2);
    HAS(&r, "sent SIGTERM (and SIGCONT)");
    if (strstr(r.out, "did not exit within --grace_s")) TFAIL("the stopped process needed SIGKILL; output:\n%s", r.out);
    if (dt > STOP_BOUND_S) TFAIL("the job ended %.2f s after the stop (bound %g s); output:\n%s", dt, STOP_BOUND_S, r.out);
    no_descendants(5);
    cleanup(&r);
}

static const char *const ps_logs[] = {"log/workerlog.0", "log/workerlog.1", NULL};

TEST(stopped_ps_worker_ends_the_job_within_10s)
{
    stop_case((const char *[]){"--server_num", "1", "--worker_num", "2", "--grace_s", "20", "--log_level", "info",
                               "--log_dir", "@T/log", PS_TRAIN, "mode=async", "steps=100000000", "quiet=1", NULL},
              ps_logs, "connected to 1 parameter servers", "worker", 1,
              "worker 1 (127.0.0.1:", "sent nothing, not even a heartbeat");
}

TEST(stopped_ps_server_ends_the_job_within_10s)
{
    stop_case((const char *[]){"--server_num", "2", "--worker_num", "1", "--grace_s", "20", "--log_level", "info",
                               "--log_dir", "@T/log", PS_TRAIN, "mode=async", "steps=100000000", "quiet=1", NULL},
              (const char *const[]){"log/workerlog.0", NULL}, "connected to 2 parameter servers", "server", 1,
              "server 1 (127.0.0.1:", "has answered nothing, not even a heartbeat");
}

TEST(stopped_collective_rank_ends_the_job_within_10s)
{
    stop_case((const char *[]){"--nproc_per_node", "2", "--grace_s", "20", "--log_level", "info", "--log_dir", "@T/log",
                               COLL_TRAIN, "100000000", NULL},
              (const char *const[]){"log/workerlog.0", "log/workerlog.1", NULL}, "joined in", "worker", 1,
              "rank 1 (127.0.0.1:", "sent nothing, not even a heartbeat");
}

TEST_MAIN(T(stopped_ps_worker_ends_the_job_within_10s), T(stopped_ps_server_ends_the_job_within_10s),
          T(stopped_collective_rank_ends_the_job_within_10s))
