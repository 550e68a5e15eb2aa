/*
 * test_fleetrun.c - runs the fleetrun launcher (BUILD/tools/fleetrun) on the helper program
 * BUILD/tests/bin/fr_child (its steps are described in tests/bin/fr_child.c) and checks the
 * environment of every process, the logs, failure handling, teardown on signals, orphans
 * and the job secret.  Every case is a subreaper (PR_SET_CHILD_SUBREAPER), so processes
 * orphaned by fleetrun come back to it and "nothing is left" is checked with waitpid.
 * Everything runs on 127.0.0.x; every wait has a deadline.
 */
#include "testhelp.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

static char FR[PATH_MAX], CH[PATH_MAX];
static const char SECRET_ENV[] = "FLEET_JOB_SECRET=ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

typedef struct {
    char dir[64]; /* temporary directory, fleetrun's working directory */
    pid_t pid;
    int done, ws;
    double t0, elapsed;
    char *out; /* fleetrun's stdout + stderr */
} run_t;

/* The runs of this case that are started (two fleetruns on two "nodes"), so that reaping one
 * records the end of another. */
static run_t *runs[4];
static int nruns;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void setup(run_t *r)
{
    char self[PATH_MAX - 64];
    th_tests_dir(self, sizeof self);
    snprintf(FR, sizeof FR, "%s/../tools/fleetrun", self);
    snprintf(CH, sizeof CH, "%s/bin/fr_child", self);
    if (access(FR, X_OK) || access(CH, X_OK)) TFAIL("%s or %s is not built (make all)", FR, CH);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    memset(r, 0, sizeof *r);
    strcpy(r->dir, "/tmp/fr_test.XXXXXX");
    if (!mkdtemp(r->dir)) TFAIL("mkdtemp failed");
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) { return remove(p); }
static void cleanup(run_t *r)
{
    for (int i = 0; i < nruns; i++) /* r may go out of scope now */
        if (runs[i] == r) runs[i--] = runs[--nruns];
    free(r->out);
    nftw(r->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 4096, len = 0, k;
    char *b = malloc(cap);
    while (b && (k = fread(b + len, 1, cap - len - 1, f)) > 0)
        if ((len += k) + 1 == cap) b = realloc(b, cap *= 2);
    fclose(f);
    if (b) b[len] = 0;
    return b;
}

/* "@T" in an argument becomes the run's directory, "@C" the path of fr_child. */
static char *expand(const run_t *r, const char *a)
{
    char *o = malloc(strlen(a) + 4 * PATH_MAX), *w = o;
    for (; *a; a++) {
        if (a[0] == '@' && (a[1] == 'T' || a[1] == 'C')) {
            w += sprintf(w, "%s", a[1] == 'T' ? r->dir : CH);
            a++;
        } else {
            *w++ = *a;
        }
    }
    *w = 0;
    return o;
}

/* Starts fleetrun in r->dir with args; env: "NAME=VALUE" strings added to a clean environment. */
static void start(run_t *r, const char *const *env, const char *const *args)
{
    char *argv[64];
    int n = 0;
    argv[n++] = FR;
    for (; *args && n < 63; args++) argv[n++] = expand(r, *args);
    argv[n] = NULL;
    r->t0 = now();
    r->done = 0;
    int known = 0;
    for (int i = 0; i < nruns; i++) known |= runs[i] == r;
    if (!known && nruns < 4) runs[nruns++] = r;
    fflush(NULL);
    r->pid = fork();
    if (r->pid == 0) {
        static const char *const drop[] = {
            "FLEET_JOB_SECRET", "FLEET_JOB_SECRET_FILE",  "POD_IP",          "FLAGS_START_PORT",     "PADDLE_TRAINER_ID",
            "TRAINING_ROLE",    "FLEET_ALLOW_NO_DEVICES", "FLEET_LOG_LEVEL", "PADDLE_RESTART_COUNT", "PADDLE_JOB_ID"};
        if (chdir(r->dir) != 0) _exit(126);
        int fd = open("out.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644), nul = open("/dev/null", O_RDONLY);
        dup2(nul, 0), dup2(fd, 1), dup2(fd, 2);
        for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) unsetenv(drop[i]);
        for (; env && *env; env++) putenv(expand(r, *env));
        execv(FR, argv);
        _exit(127);
    }
    for (int i = 1; i < n; i++) free(argv[i]);
    if (r->pid < 0) TFAIL("fork failed");
}

/* Reaps whatever has ended (orphans come to us); notes the end of each started fleetrun. */
static void reap(run_t *r)
{
    int ws;
    pid_t p;
    (void)r;
    while ((p = waitpid(-1, &ws, WNOHANG)) > 0)
        for (int i = 0; i < nruns; i++)
            if (p == runs[i]->pid && !runs[i]->done)
                runs[i]->done = 1, runs[i]->ws = ws, runs[i]->elapsed = now() - runs[i]->t0;
}

static void load_out(run_t *r)
{
    char path[128];
    snprintf(path, sizeof path, "%s/out.txt", r->dir);
    free(r->out);
    r->out = slurp(path);
    if (!r->out) r->out = calloc(1, 1);
}

/* Waits for fleetrun to end; returns its exit status (128+N after death by signal N). */
static int finish(run_t *r, double timeout)
{
    double end = now() + timeout;
    for (reap(r); !r->done; reap(r)) {
        if (now() > end) {
            kill(r->pid, SIGKILL);
            load_out(r);
            TFAIL("fleetrun did not finish within %g s; its output:\n%s", timeout, r->out);
        }
        usleep(5000);
    }
    load_out(r);
    return WIFEXITED(r->ws) ? WEXITSTATUS(r->ws) : 128 + WTERMSIG(r->ws);
}

#define RUN_EXPECT(r, timeout, code)                                                                     \
    do {                                                                                                 \
        int rc_ = finish((r), (timeout));                                                                \
        if (rc_ != (code)) TFAIL("fleetrun exited %d, expected %d; output:\n%s", rc_, (code), (r)->out); \
    } while (0)
#define HAS(r, s)                                                                                      \
    do {                                                                                               \
        if (!strstr((r)->out, (s))) TFAIL("expected \"%s\" in fleetrun's output:\n%s", (s), (r)->out); \
    } while (0)

static int exists(const run_t *r, const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    return access(path, F_OK) == 0;
}

/* Waits until each file (NULL-terminated list) exists in r->dir, fleetrun still running. */
static void wait_files(run_t *r, const char *const *names, double timeout)
{
    double end = now() + timeout;
    for (const char *const *n = names; *n; n++)
        while (!exists(r, *n)) {
            reap(r);
            if (r->done || now() > end) {
                load_out(r);
                TFAIL("%s/%s did not appear (fleetrun %s); output:\n%s", r->dir, *n, r->done ? "ended" : "still running",
                      r->out);
            }
            usleep(5000);
        }
}

/* The file TAG.EXT that fr_child wrote (must exist). */
static char *file_of(const run_t *r, const char *tag, const char *ext)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s.%s", r->dir, tag, ext);
    char *t = slurp(path);
    if (!t) TFAIL("%s is missing; fleetrun's output:\n%s", path, r->out ? r->out : "");
    return t;
}

/* Value of NAME in "NAME=VALUE" lines, copied to a static slot (4 in rotation), or NULL. */
static const char *get(const char *text, const char *name)
{
    static char slots[4][8192];
    static int k;
    size_t nl = strlen(name);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, name, nl) && l[nl] == '=') {
            char *s = slots[k++ & 3];
            size_t vl = strcspn(l + nl + 1, "\n");
            snprintf(s, sizeof slots[0], "%.*s", (int)vl, l + nl + 1);
            return s;
        }
    return NULL;
}
#define CHECK_VAR(text, name, want)                                                                             \
    do {                                                                                                        \
        const char *v_ = get((text), (name));                                                                   \
        if (!v_ || strcmp(v_, (want))) TFAIL("%s is '%s', expected '%s'", (name), v_ ? v_ : "(unset)", (want)); \
    } while (0)

static int alive(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

static void wait_gone(run_t *r, const pid_t *pids, int n, double timeout)
{
    double end = now() + timeout;
    for (int i = 0; i < n; i++)
        while (alive(pids[i])) {
            reap(r);
            if (now() > end) TFAIL("pid %d is still alive %g s later", (int)pids[i], timeout);
            usleep(5000);
        }
}

/* Every process fleetrun started (children, grandchildren, its guard) is gone: as a subreaper
 * we would have inherited any survivor. */
static void no_descendants(double timeout)
{
    double end = now() + timeout;
    for (;;) {
        pid_t p = waitpid(-1, NULL, WNOHANG);
        if (p < 0 && errno == ECHILD) return;
        if (p == 0 && now() > end) TFAIL("a process started by fleetrun outlived it by %g s", timeout);
        if (p == 0) usleep(5000);
    }
}

static pid_t pid_of(const run_t *r, const char *tag, const char *ext)
{
    char *t = file_of(r, tag, ext);
    pid_t p = (pid_t)atoi(get(t, "pid"));
    free(t);
    return p;
}

static int is_hex64(const char *s)
{
    if (!s || strlen(s) != 64) return 0;
    for (; *s; s++)
        if (!isxdigit((unsigned char)*s)) return 0;
    return 1;
}

/* Splits a comma list into out (static copies); returns the count. */
static int split(const char *s, char out[][64], int max)
{
    int n = 0;
    while (s && *s && n < max) {
        size_t l = strcspn(s, ",");
        snprintf(out[n++], 64, "%.*s", (int)l, s);
        s += l + (s[l] == ',');
    }
    return n;
}

/* ------------------------------------------------------------------------ cases */

TEST(collective_env)
{
    run_t r;
    setup(&r);
    start(&r, (const char *[]){"FR_TEST_MARK=kept", "TRAINING_ROLE=PSERVER", NULL},
          (const char *[]){"--nproc_per_node", "3", "--log_dir", "@T/log", "@C", "env:@T", "bind", NULL});
    RUN_EXPECT(&r, 20, 0);
    char eps[8][64], secret[80] = "", *t0 = file_of(&r, "w0", "env"), all[512];
    snprintf(all, sizeof all, "%s", get(t0, "PADDLE_TRAINER_ENDPOINTS") ? get(t0, "PADDLE_TRAINER_ENDPOINTS") : "");
    free(t0);
    CHECK_EQ_INT(split(all, eps, 8), 3);
    for (int i = 0; i < 3; i++) {
        char tag[24], num[24];
        snprintf(tag, sizeof tag, "w%d", i);
        snprintf(num, sizeof num, "%d", i);
        char *t = file_of(&r, tag, "env");
        CHECK_VAR(t, "PADDLE_TRAINER_ID", num);
        CHECK_VAR(t, "PADDLE_RANK_IN_NODE", num);
        CHECK_VAR(t, "PADDLE_TRAINERS_NUM", "3");
        CHECK_VAR(t, "PADDLE_TRAINING_ROLE", "TRAINER");
        CHECK_VAR(t, "FR_TEST_MARK", "kept");
        CHECK(!get(t, "TRAINING_ROLE") && !get(t, "FLAGS_selected_gpus") && !get(t, "PADDLE_PSERVERS_IP_PORT_LIST"));
        CHECK_VAR(t, "PADDLE_TRAINER_ENDPOINTS", all);
        CHECK_VAR(t, "PADDLE_CURRENT_ENDPOINT", eps[i]);
        const char *s = get(t, "FLEET_JOB_SECRET");
        if (!is_hex64(s)) TFAIL("rank %d: FLEET_JOB_SECRET is not 64 hex characters", i);
        if (i == 0) snprintf(secret, sizeof secret, "%s", s);
        CHECK(!strcmp(s, secret));
        free(t);
    }
    for (int i = 0; i < 3; i++) {
        CHECK(!strncmp(eps[i], "127.0.0.1:", 10));
        int port = atoi(eps[i] + 10);
        CHECK(port > 0 && port < 65536);
        for (int k = 0; k < i; k++) CHECK(strcmp(eps[i], eps[k]) != 0);
    }
    no_descendants(5);
    cleanup(&r);
}

TEST(device_lists)
{
    static const char *const flags[][2] = {{"--gpus=0,2", NULL}, {"--devices", "5"}, {"--selected_gpus", "3,1,4"}};
    static const char *const want[][3] = {{"0", "2"}, {"5"}, {"3", "1", "4"}};
    static const int count[] = {2, 1, 3};
    for (int c = 0; c < 3; c++) {
        run_t r;
        setup(&r);
        const char *args[] = {flags[c][0], flags[c][1] ? flags[c][1] : "@C", flags[c][1] ? "@C" : "env:@T",
                              flags[c][1] ? "env:@T" : NULL, NULL};
        start(&r, (const char *[]){"FLEET_ALLOW_NO_DEVICES=1", NULL}, args);
        RUN_EXPECT(&r, 20, 0);
        for (int i = 0; i < count[c]; i++) {
            char tag[24], n[24];
            snprintf(tag, sizeof tag, "w%d", i);
            snprintf(n, sizeof n, "%d", count[c]);
            char *t = file_of(&r, tag, "env");
            CHECK_VAR(t, "FLAGS_selected_gpus", want[c][i]);
            CHECK_VAR(t, "PADDLE_TRAINERS_NUM", n);
            free(t);
        }
        char tag[24];
        snprintf(tag, sizeof tag, "w%d.env", count[c]);
        CHECK(!exists(&r, tag));
        cleanup(&r);
    }
}

TEST(logs_table_and_tee)
{
    run_t r;
    setup(&r);
    for (int run = 0; run < 2; run++) {
        start(&r, NULL, (const char *[]){"--nproc_per_node", "2", "@C", "env:@T", "say:hello", NULL});
        RUN_EXPECT(&r, 20, 0);
    }
    HAS(&r, "Distributed Envs");
    HAS(&r, "collective");
    HAS(&r, "log_dir");
    HAS(&r, "w0: hello"); /* rank 0's output is shown */
    CHECK(!strstr(r.out, "w1: hello"));
    for (int i = 0; i < 2; i++) {
        char path[128], line[32];
        snprintf(path, sizeof path, "%s/log/workerlog.%d", r.dir, i);
        snprintf(line, sizeof line, "w%d: hello\n", i);
        char *log = slurp(path);
        if (!log) TFAIL("%s is missing", path);
        char *second = strstr(log, line); /* appended: both runs are there */
        CHECK(second && strstr(second + 1, line));
        free(log);
    }
    char path[128], want[256];
    snprintf(path, sizeof path, "%s/log/endpoints.log", r.dir);
    char *eps = slurp(path), *w0 = file_of(&r, "w0", "env"), items[4][64];
    CHECK(eps != NULL);
    int n = split(get(w0, "PADDLE_TRAINER_ENDPOINTS"), items, 4);
    CHECK_EQ_INT(n, 2);
    snprintf(want, sizeof want, "PADDLE_TRAINER_ENDPOINTS: \n%s\n%s\n", items[0], items[1]);
    if (strcmp(eps, want)) TFAIL("endpoints.log is:\n%s\nexpected:\n%s", eps, want);
    free(eps), free(w0);
    no_descendants(5);
    cleanup(&r);
}

TEST(child_exit_code_stops_job)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "3", "--grace_s", "10", "@C", "env:@T", "await:@T:3", "w1=say:going down",
                           "w1=exit:3", "hang", NULL});
    RUN_EXPECT(&r, 30, 1);
    pid_t p[3] = {pid_of(&r, "w0", "env"), pid_of(&r, "w1", "env"), pid_of(&r, "w2", "env")};
    char want[64];
    HAS(&r, "root cause");
    HAS(&r, "role:   worker");
    HAS(&r, "rank:   1");
    snprintf(want, sizeof want, "pid:    %d", (int)p[1]);
    HAS(&r, want);
    HAS(&r, "exited with code 3");
    HAS(&r, "log/workerlog.1");
    HAS(&r, "| w1: going down");
    CHECK(!alive(p[0]) && !alive(p[2])); /* reaped before fleetrun returned */
    if (r.elapsed >= 8) TFAIL("teardown took %.1f s although SIGTERM suffices", r.elapsed);
    no_descendants(5);
    cleanup(&r);
}

/* The root-cause block shows the failed process's error records, with their line numbers,
 * even far above the last 20 lines of its log. */
TEST(failure_summary_shows_error_lines)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"@C", "lines:40", "logerr:rendezvous timed out: rank 1 never arrived", "lines:100", "exit:1",
                           NULL});
    RUN_EXPECT(&r, 30, 1);
    HAS(&r, "error lines of log/workerlog.0");
    HAS(&r, "| 41: [fleet E worker:0 pid");
    HAS(&r, "rank 1 never arrived");
    HAS(&r, "last lines of log/workerlog.0");
    HAS(&r, "| w0: filler 99");
    CHECK(!strstr(r.out, "| w0: filler 79")); /* the tail is still the last 20 lines */
    cleanup(&r);
}

TEST(child_sigsegv_named)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--nproc_per_node", "2", "@C", "env:@T", "await:@T:2", "w1=sig:SEGV", "hang", NULL});
    RUN_EXPECT(&r, 30, 128 + SIGSEGV);
    HAS(&r, "rank:   1");
    HAS(&r, "killed by signal SIGSEGV");
    CHECK(!alive(pid_of(&r, "w0", "env")));
    no_descendants(5);
    cleanup(&r);
}

TEST(sigterm_ignored_gets_sigkill)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "2", "--grace_s", "1", "@C", "w0=ignterm", "env:@T", "await:@T:2",
                           "w1=exit:3", "hang", NULL});
    RUN_EXPECT(&r, 30, 1);
    HAS(&r, "did not exit within --grace_s=1 s");
    HAS(&r, "SIGKILLed by fleetrun");
    if (r.elapsed < 1.0 || r.elapsed > 6) TFAIL("took %.2f s with --grace_s 1", r.elapsed);
    CHECK(!alive(pid_of(&r, "w0", "env")));
    no_descendants(5);
    cleanup(&r);
}

static void signal_fleetrun(int sig, int ignterm)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "2", "--grace_s", "2", "@C", ignterm ? "ignterm" : "say:x", "env:@T",
                           "grandchild:@T", "hang", NULL});
    wait_files(&r, (const char *[]){"w0.env", "w1.env", "w0.gpid", "w1.gpid", NULL}, 20);
    pid_t p[4] = {pid_of(&r, "w0", "env"), pid_of(&r, "w1", "env"), pid_of(&r, "w0", "gpid"), pid_of(&r, "w1", "gpid")};
    for (int i = 0; i < 4; i++) CHECK(alive(p[i]));
    kill(r.pid, sig);
    RUN_EXPECT(&r, 30, 128 + sig);
    wait_gone(&r, p, 4, sig == SIGKILL ? 5 : 0.01); /* after kill -9: PDEATHSIG and the guard */
    no_descendants(5);
    if (sig != SIGKILL) {
        char want[64];
        snprintf(want, sizeof want, "received SIG%s", sigabbrev_np(sig));
        HAS(&r, want);
    }
    cleanup(&r);
}

TEST(sigterm_to_fleetrun_stops_all) { signal_fleetrun(SIGTERM, 0); }
TEST(sigint_sighup_to_fleetrun_stop_all)
{
    signal_fleetrun(SIGINT, 0);
    signal_fleetrun(SIGHUP, 1);
}
TEST(kill9_fleetrun_leaves_nothing) { signal_fleetrun(SIGKILL, 1); }

/* The child of fleetrun named fleetrun-guard other than `not` (0 if none yet). */
static pid_t guard_of(const run_t *r, pid_t not )
{
    DIR *d = opendir("/proc");
    pid_t g = 0;
    for (struct dirent *e; d && !g && (e = readdir(d));) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%.16s/stat", e->d_name);
        char *st = isdigit((unsigned char)e->d_name[0]) ? slurp(path) : NULL, *rp = st ? strrchr(st, ')') : NULL;
        int ppid = 0;
        if (rp && strstr(st, "(fleetrun-guard)") && sscanf(rp + 1, " %*c %d", &ppid) == 1 && ppid == r->pid &&
            atoi(e->d_name) != not )
            g = atoi(e->d_name);
        free(st);
    }
    if (d) closedir(d);
    return g;
}

static pid_t wait_guard(run_t *r, pid_t not, double timeout)
{
    double end = now() + timeout;
    pid_t g;
    while (!(g = guard_of(r, not ))) {
        reap(r);
        if (r->done || now() > end) {
            load_out(r);
            TFAIL("no (new) fleetrun-guard child of fleetrun within %g s; output:\n%s", timeout, r->out);
        }
        usleep(5000);
    }
    return g;
}

/* kill -9 of the guard is noticed: a new guard takes over, so a kill -9 of fleetrun after it
 * still leaves nothing behind (grandchildren included); and the other order: fleetrun first,
 * then the guard once it has acted. */
TEST(guard_killed_then_fleetrun)
{
    for (int order = 0; order < 2; order++) {
        run_t r;
        setup(&r);
        start(&r, NULL, (const char *[]){"--nproc_per_node", "2", "@C", "env:@T", "grandchild:@T", "hang", NULL});
        wait_files(&r, (const char *[]){"w0.env", "w1.env", "w0.gpid", "w1.gpid", NULL}, 20);
        pid_t p[4] = {pid_of(&r, "w0", "env"), pid_of(&r, "w1", "env"), pid_of(&r, "w0", "gpid"), pid_of(&r, "w1", "gpid")};
        pid_t g = wait_guard(&r, 0, 10);
        if (order == 0) {
            CHECK_EQ_INT(kill(g, SIGKILL), 0);
            pid_t g2 = wait_guard(&r, g, 10);
            CHECK(g2 != g);
            for (int i = 0; i < 4; i++) CHECK(alive(p[i])); /* the job runs on */
            CHECK_EQ_INT(kill(r.pid, SIGKILL), 0);
            RUN_EXPECT(&r, 30, 128 + SIGKILL);
            HAS(&r, "warning: fleetrun's guard process");
            HAS(&r, "started a new one");
            wait_gone(&r, p, 4, 5);
        } else {
            CHECK_EQ_INT(kill(r.pid, SIGKILL), 0);
            RUN_EXPECT(&r, 30, 128 + SIGKILL);
            wait_gone(&r, p, 4, 5);
            kill(g, SIGKILL); /* most likely gone already: it exits once it has killed the job */
        }
        no_descendants(5);
        cleanup(&r);
    }
}

/* The guard killed while the job runs: the job goes on and succeeds; the last guard exits. */
TEST(guard_killed_job_goes_on)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--nproc_per_node", "2", "@C", "env:@T", "await:@T:3", "exit:0", NULL});
    wait_files(&r, (const char *[]){"w0.env", "w1.env", NULL}, 20);
    pid_t g = wait_guard(&r, 0, 10);
    CHECK_EQ_INT(kill(g, SIGKILL), 0);
    wait_guard(&r, g, 10);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/x.env", r.dir); /* lets the workers' await end */
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fclose(f);
    RUN_EXPECT(&r, 30, 0);
    HAS(&r, "started a new one (pid");
    HAS(&r, "watching 2 process group(s)");
    no_descendants(5);
    cleanup(&r);
}

TEST(grandchild_dies_with_group)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "2", "--grace_s", "1", "@C", "ignterm", "env:@T", "grandchild:@T",
                           "await:@T:2", "w1=exit:3", "hang", NULL});
    RUN_EXPECT(&r, 30, 1);
    pid_t g[2] = {pid_of(&r, "w0", "gpid"), pid_of(&r, "w1", "gpid")};
    CHECK(!alive(g[0]) && !alive(g[1]));
    no_descendants(5);
    cleanup(&r);
    /* success, but a grandchild left running: fleetrun stops it */
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "2", "--grace_s", "1", "@C", "env:@T", "w1=grandchild:@T", "exit:0", NULL});
    RUN_EXPECT(&r, 30, 0);
    HAS(&r, "left behind");
    CHECK(!alive(pid_of(&r, "w1", "gpid")));
    no_descendants(5);
    cleanup(&r);
}

TEST(ps_roles_and_env)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--server_num", "2", "--worker_num", "3", "@C", "env:@T", "await:@T:5", "s*=sleep:0.3", NULL});
    RUN_EXPECT(&r, 30, 0);
    CHECK(!strstr(r.out, "warning"));
    char sv[4][64], wv[4][64], *w0 = file_of(&r, "w0", "env");
    const char *secret = get(w0, "FLEET_JOB_SECRET");
    char sec[80];
    snprintf(sec, sizeof sec, "%s", secret ? secret : "");
    CHECK(is_hex64(sec));
    CHECK_EQ_INT(split(get(w0, "PADDLE_PSERVERS_IP_PORT_LIST"), sv, 4), 2);
    CHECK_EQ_INT(split(get(w0, "PADDLE_TRAINER_ENDPOINTS"), wv, 4), 3);
    free(w0);
    for (int i = 0; i < 5; i++) {
        int srv = i < 2, k = srv ? i : i - 2;
        char tag[24], num[24], log[128];
        snprintf(tag, sizeof tag, "%c%d", srv ? 's' : 'w', k);
        snprintf(num, sizeof num, "%d", k);
        snprintf(log, sizeof log, "log/%slog.%d", srv ? "server" : "worker", k);
        CHECK(exists(&r, log));
        char *t = file_of(&r, tag, "env"), port[16];
        const char *ep = srv ? sv[k] : wv[k];
        snprintf(port, sizeof port, "%s", strchr(ep, ':') + 1);
        CHECK_VAR(t, "TRAINING_ROLE", srv ? "PSERVER" : "TRAINER");
        CHECK_VAR(t, "PADDLE_TRAINERS_NUM", "3");
        CHECK_VAR(t, "PADDLE_PORT", port);
        CHECK_VAR(t, "POD_IP", "127.0.0.1");
        CHECK_VAR(t, "PADDLE_CURRENT_ENDPOINT", ep);
        CHECK_VAR(t, "FLEET_JOB_SECRET", sec);
        if (srv) CHECK(get(t, "PADDLE_TRAINER_ID") == NULL);
        else CHECK_VAR(t, "PADDLE_TRAINER_ID", num);
        CHECK(get(t, "PADDLE_TRAINER_ENDPOINTS") && get(t, "PADDLE_PSERVERS_IP_PORT_LIST"));
        free(t);
    }
    CHECK(!exists(&r, "s2.env") && !exists(&r, "w3.env"));
    char path[128];
    snprintf(path, sizeof path, "%s/log/endpoints.log", r.dir);
    char *eps = slurp(path);
    CHECK(eps && strstr(eps, "PADDLE_PSERVERS_IP_PORT_LIST") && strstr(eps, sv[1]) && strstr(eps, wv[2]));
    free(eps);
    no_descendants(5);
    cleanup(&r);
}

TEST(ps_servers_stopped_after_grace)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--server_num", "1", "--worker_num", "2", "--server_grace_s", "1", "--grace_s", "1", "@C",
                           "env:@T", "await:@T:3", "s*=hang", "exit:0", NULL});
    RUN_EXPECT(&r, 30, 0);
    HAS(&r, "did not exit within --server_grace_s=1 s");
    HAS(&r, "server 0");
    if (r.elapsed < 1.0 || r.elapsed > 6) TFAIL("took %.2f s with --server_grace_s 1", r.elapsed);
    CHECK(!alive(pid_of(&r, "s0", "env")));
    no_descendants(5);
    cleanup(&r);
}

TEST(ps_failures)
{
    static const char *const step[] = {"w1=exit:4", "s1=exit:5"};
    static const char *const want[][3] = {{"role:   worker", "exited with code 4", "log/workerlog.1"},
                                          {"role:   server", "exited with code 5", "log/serverlog.1"}};
    for (int c = 0; c < 2; c++) {
        run_t r;
        setup(&r);
        start(&r, NULL,
              (const char *[]){"--server_num", "2", "--worker_num", "2", "@C", "env:@T", "await:@T:4", step[c], "hang",
                               NULL});
        RUN_EXPECT(&r, 30, 1);
        HAS(&r, "rank:   1");
        for (int k = 0; k < 3; k++) HAS(&r, want[c][k]);
        static const char *const tags[] = {"s0", "s1", "w0", "w1"};
        for (int k = 0; k < 4; k++) CHECK(!alive(pid_of(&r, tags[k], "env")));
        no_descendants(5);
        cleanup(&r);
    }
}

TEST(usage_errors_exit_2)
{
    static const struct {
        const char *args[8];
        const char *want;
    } cases[] = {
        {{"--bogus", "2", "@C", NULL}, "--bogus"},
        {{"--nproc_per_node", "2", NULL}, "no program"},
        {{NULL}, "no program"},
        {{"--nproc_per_node", "0", "@C", NULL}, "--nproc_per_node expects a positive integer"},
        {{"--nproc_per_node", "abc", "@C", NULL}, "--nproc_per_node expects a positive integer"},
        {{"--nproc_per_node=-1", "@C", NULL}, "--nproc_per_node expects a positive integer"},
        {{"--nproc_per_node", "2x", "@C", NULL}, "--nproc_per_node expects a positive integer"},
        {{"--nproc_per_node", NULL}, "--nproc_per_node expects a value"},
        {{"--grace_s", "-1", "@C", NULL}, "--grace_s expects"},
        {{"--gpus", "0,a", "@C", NULL}, "--gpus expects"},
        {{"--gpus", "0,1", "--nproc_per_node", "3", "@C", NULL}, "--nproc_per_node 3 does not match --gpus"},
        {{"--ips", "127.0.0.1,127.0.0.2", "@C", NULL}, "--node_ip"},
        {{"--ips", "1.2.3", "@C", NULL}, "--ips: '1.2.3' is not an IPv4 address"},
        {{"--servers", "127.0.0.1:99999", "@C", NULL}, "--servers expects"},
        {{"--server_num", "2", "--servers", "127.0.0.1", "@C", NULL}, "--server_num 2 does not match"},
        {{"--run_mode", "mpi", "@C", NULL}, "--run_mode"},
        {{"/nonexistent/prog", NULL}, "/nonexistent/prog"},
        {{"no-such-program-fr", NULL}, "not found in PATH"},
        {{"--nnodes", "2", "@C", NULL}, "--nnodes 2 needs --master"},
        {{"--nnodes", "2:4", "--master", "127.0.0.1:6170", "@C", NULL}, "elastic node ranges"},
        {{"--master", "127.0.0.1:6170", "--ips", "127.0.0.1", "--nnodes", "2", "@C", NULL}, "give one of them"},
        {{"--master", "etcd://127.0.0.1:2379", "--nnodes", "2", "@C", NULL}, "only IP:PORT"},
        {{"--master", "127.0.0.1", "--nnodes", "2", "@C", NULL}, "--master expects IP:PORT"},
        {{"--master", "127.0.0.1:70000", "--nnodes", "2", "@C", NULL}, "--master expects"},
        {{"--master", "127.0.0.1:6170", "--nnodes", "2", "--servers", "127.0.0.1", "@C", NULL}, "--server_num"},
        {{"--max_restart", "-1", "@C", NULL}, "--max_restart expects"},
        {{"--max_restart", "1", "--ips", "127.0.0.1,127.0.0.2", "--node_ip", "127.0.0.1", "@C", NULL}, "needs --master"},
        {{"--log_level", "loud", "@C", NULL}, "--log_level expects"},
        {{"--job_id", "a b", "@C", NULL}, "--job_id expects"},
        {{"--rdzv_timeout_s", "0", "@C", NULL}, "--rdzv_timeout_s"},
        {{"--elastic_server", "x", "@C", NULL}, "unknown flag '--elastic_server'"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        run_t r;
        setup(&r);
        start(&r, NULL, cases[c].args);
        int rc = finish(&r, 20);
        if (rc != 2) TFAIL("case %zu: exit %d, expected 2; output:\n%s", c, rc, r.out);
        if (!strstr(r.out, cases[c].want)) TFAIL("case %zu: expected \"%s\" in:\n%s", c, cases[c].want, r.out);
        CHECK(!exists(&r, "log") && !exists(&r, "w0.env"));
        no_descendants(5);
        cleanup(&r);
    }
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--help", NULL});
    RUN_EXPECT(&r, 20, 0);
    HAS(&r, "--nproc_per_node");
    HAS(&r, "--max_restart");
    cleanup(&r);
}

/* Binary-safe search (cmdline and environ hold NULs). */
static int contains(const char *path, const char *needle)
{
    static char buf[1 << 20];
    size_t n = 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return memmem(buf, n, needle, strlen(needle)) != NULL;
}

/* The secret is on no argv (/proc/PID/cmdline), in no log and not in fleetrun's output or
 * in fleetrun's own environment. */
TEST(secret_never_leaks)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "2", "@C", "say:started", "env:@T", "grandchild:@T", "hang", NULL});
    wait_files(&r, (const char *[]){"w0.env", "w1.env", "w0.gpid", "w1.gpid", NULL}, 20);
    char *t = file_of(&r, "w0", "env"), secret[80], path[64];
    snprintf(secret, sizeof secret, "%s", get(t, "FLEET_JOB_SECRET") ? get(t, "FLEET_JOB_SECRET") : "");
    free(t);
    CHECK(is_hex64(secret));
    pid_t pids[16] = {r.pid, pid_of(&r, "w0", "env"), pid_of(&r, "w1", "env"), pid_of(&r, "w0", "gpid"),
                      pid_of(&r, "w1", "gpid")};
    int n = 5;
    DIR *d = opendir("/proc"); /* every child of fleetrun, its guard included */
    for (struct dirent *e; d && (e = readdir(d)) && n < 16;) {
        snprintf(path, sizeof path, "/proc/%.16s/stat", e->d_name);
        char *st = isdigit((unsigned char)e->d_name[0]) ? slurp(path) : NULL, *rp = st ? strrchr(st, ')') : NULL;
        int ppid = 0;
        if (rp && sscanf(rp + 1, " %*c %d", &ppid) == 1 && ppid == r.pid) pids[n++] = atoi(e->d_name);
        free(st);
    }
    if (d) closedir(d);
    CHECK(n >= 6); /* two workers and the guard at least */
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pids[i]);
        if (contains(path, secret)) TFAIL("the secret is on the command line of pid %d", (int)pids[i]);
    }
    snprintf(path, sizeof path, "/proc/%d/environ", (int)r.pid);
    CHECK(!contains(path, secret));
    kill(r.pid, SIGTERM);
    RUN_EXPECT(&r, 30, 128 + SIGTERM);
    static const char *const files[] = {"out.txt", "log/workerlog.0", "log/workerlog.1", "log/endpoints.log"};
    for (int i = 0; i < 4; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", r.dir, files[i]);
        CHECK(access(p, F_OK) == 0);
        if (contains(p, secret)) TFAIL("the secret appears in %s", files[i]);
    }
    no_descendants(5);
    cleanup(&r);
}

TEST(secret_fresh_or_passed_through)
{
    static const char fixed[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    char got[2][80], *t;
    run_t r;
    for (int i = 0; i < 2; i++) { /* a new secret each run */
        setup(&r);
        start(&r, NULL, (const char *[]){"@C", "env:@T", NULL});
        RUN_EXPECT(&r, 20, 0);
        t = file_of(&r, "w0", "env");
        snprintf(got[i], sizeof got[i], "%s", get(t, "FLEET_JOB_SECRET") ? get(t, "FLEET_JOB_SECRET") : "");
        free(t);
        CHECK(is_hex64(got[i]));
        cleanup(&r);
    }
    CHECK(strcmp(got[0], got[1]) != 0);
    setup(&r);
    start(&r, (const char *[]){"FLEET_JOB_SECRET=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", NULL},
          (const char *[]){"@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 0);
    t = file_of(&r, "w0", "env");
    CHECK_VAR(t, "FLEET_JOB_SECRET", fixed);
    CHECK(!strstr(r.out, fixed));
    free(t);
    cleanup(&r);

    setup(&r);
    char path[128];
    snprintf(path, sizeof path, "%s/secret", r.dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "%s\n", fixed);
    fclose(f);
    chmod(path, 0600);
    start(&r, (const char *[]){"FLEET_JOB_SECRET_FILE=@T/secret", NULL}, (const char *[]){"@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 0);
    t = file_of(&r, "w0", "env");
    CHECK_VAR(t, "FLEET_JOB_SECRET_FILE", path);
    CHECK(!get(t, "FLEET_JOB_SECRET"));
    free(t);
    chmod(path, 0644);
    start(&r, (const char *[]){"FLEET_JOB_SECRET_FILE=@T/secret", NULL}, (const char *[]){"@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 2);
    HAS(&r, "job secret file");
    HAS(&r, "chmod 600");
    start(&r, (const char *[]){"FLEET_JOB_SECRET=c0ffee", NULL}, (const char *[]){"@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 2);
    HAS(&r, "environment variable FLEET_JOB_SECRET is invalid");
    CHECK(!strstr(r.out, "c0ffee"));
    no_descendants(5);
    cleanup(&r);
}

/* Two free ports P, P+1 on 127.0.0.2 (checked, not reserved: a small race, retried). */
static int free_pair(void)
{
    for (int tries = 0; tries < 50; tries++) {
        struct sockaddr_in a = {.sin_family = AF_INET};
        socklen_t al = sizeof a;
        inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
        int f0 = socket(AF_INET, SOCK_STREAM, 0), f1 = socket(AF_INET, SOCK_STREAM, 0), ok = 0;
        if (bind(f0, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(f0, (struct sockaddr *)&a, &al) == 0 &&
            ntohs(a.sin_port) < 65535) {
            a.sin_port = htons((uint16_t)(ntohs(a.sin_port) + 1));
            ok = bind(f1, (struct sockaddr *)&a, sizeof a) == 0;
        }
        close(f0), close(f1);
        if (ok) return ntohs(a.sin_port) - 1;
    }
    TFAIL("no free pair of ports on 127.0.0.2");
    return 0;
}

TEST(multinode_collective_starts_local_ranks)
{
    static const char fixed[] = "FLEET_JOB_SECRET=ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
    char sport[16], eps[256], me[2][64];
    int P = free_pair();
    snprintf(sport, sizeof sport, "%d", P);
    snprintf(eps, sizeof eps, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.2:%d,127.0.0.2:%d", P, P + 1, P, P + 1);
    for (int variant = 0; variant < 2; variant++) { /* --node_ip, then POD_IP */
        run_t r;
        setup(&r);
        const char *env[] = {fixed, variant ? "POD_IP=127.0.0.2" : NULL, NULL};
        start(&r, env,
              (const char *[]){"--ips", "127.0.0.1,127.0.0.2", variant ? "--log_dir" : "--node_ip",
                               variant ? "log" : "127.0.0.2", "--start_port", sport, "--nproc_per_node", "2", "@C",
                               "env:@T", "bind", NULL});
        RUN_EXPECT(&r, 20, 0);
        CHECK(!exists(&r, "w0.env") && !exists(&r, "w1.env"));
        for (int i = 0; i < 2; i++) {
            char tag[24], num[24];
            snprintf(tag, sizeof tag, "w%d", 2 + i);
            snprintf(num, sizeof num, "%d", i);
            snprintf(me[i], sizeof me[i], "127.0.0.2:%d", P + i);
            char *t = file_of(&r, tag, "env");
            CHECK_VAR(t, "PADDLE_TRAINERS_NUM", "4");
            CHECK_VAR(t, "PADDLE_TRAINER_ENDPOINTS", eps);
            CHECK_VAR(t, "PADDLE_CURRENT_ENDPOINT", me[i]);
            CHECK_VAR(t, "PADDLE_RANK_IN_NODE", num);
            CHECK_VAR(t, "FLEET_JOB_SECRET", fixed + strlen("FLEET_JOB_SECRET="));
            free(t);
        }
        no_descendants(5);
        cleanup(&r);
    }
    run_t r; /* several machines need a shared secret */
    setup(&r);
    start(&r, NULL, (const char *[]){"--ips", "127.0.0.1,127.0.0.2", "--node_ip", "127.0.0.2", "@C", NULL});
    RUN_EXPECT(&r, 20, 2);
    HAS(&r, "FLEET_JOB_SECRET");
    cleanup(&r);
}

TEST(port_in_use_reported)
{
    run_t r;
    setup(&r);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof a;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0);
    getsockname(fd, (struct sockaddr *)&a, &al);
    char ep[64], want[96];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", ntohs(a.sin_port));
    start(&r, NULL, (const char *[]){"--servers", ep, "--worker_num", "1", "@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 1);
    snprintf(want, sizeof want, "server 0 cannot have %s", ep);
    HAS(&r, want);
    HAS(&r, "already in use");
    CHECK(!exists(&r, "w0.env"));
    close(fd);
    no_descendants(5);
    cleanup(&r);
}

TEST(exec_failure_is_root_cause)
{
    run_t r;
    setup(&r);
    char path[128];
    snprintf(path, sizeof path, "%s/bad.sh", r.dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "#!/nonexistent/interpreter\n");
    fclose(f);
    chmod(path, 0755);
    start(&r, NULL, (const char *[]){"--nproc_per_node", "2", "./bad.sh", NULL});
    RUN_EXPECT(&r, 20, 1);
    HAS(&r, "exited with code 127");
    HAS(&r, "cannot execute");
    no_descendants(5);
    cleanup(&r);
}

/* ------------------------------------------------------------ identity, devices, version */

TEST(job_id_log_level_restart_count)
{
    run_t r;
    setup(&r);
    start(&r, (const char *[]){"FLEET_LOG_LEVEL=trace", NULL},
          (const char *[]){"--job_id", "exp-7.a_b", "--log_level", "INFO", "--nproc_per_node", "2", "@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 0);
    for (int i = 0; i < 2; i++) {
        char *t = file_of(&r, i ? "w1" : "w0", "env");
        CHECK_VAR(t, "PADDLE_JOB_ID", "exp-7.a_b");
        CHECK_VAR(t, "FLEET_LOG_LEVEL", "info");
        CHECK_VAR(t, "PADDLE_RESTART_COUNT", "0");
        free(t);
    }
    /* without the flags: a fresh job id; FLEET_LOG_LEVEL is inherited */
    start(&r, (const char *[]){"FLEET_LOG_LEVEL=debug", NULL}, (const char *[]){"@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 0);
    char *t = file_of(&r, "w0", "env");
    const char *id = get(t, "PADDLE_JOB_ID");
    CHECK(id && !strncmp(id, "job-", 4) && strlen(id) == 16 && strspn(id + 4, "0123456789abcdef") == 12);
    CHECK_VAR(t, "FLEET_LOG_LEVEL", "debug");
    free(t);
    cleanup(&r);
}

/* The probe fleetrun documents: GPUs are there when the NVIDIA driver lists some or a
 * /dev/nvidiaN or /dev/kfd node exists. */
static int machine_has_devices(void)
{
    int found = access("/dev/kfd", F_OK) == 0;
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    for (struct dirent *e; d && !found && (e = readdir(d));) found = e->d_name[0] != '.';
    if (d) closedir(d);
    d = opendir("/dev");
    for (struct dirent *e; d && !found && (e = readdir(d));)
        found = !strncmp(e->d_name, "nvidia", 6) && isdigit((unsigned char)e->d_name[6]);
    if (d) closedir(d);
    return found;
}

TEST(gpus_without_devices_refused)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--gpus", "0,1", "@C", "env:@T", NULL});
    if (machine_has_devices()) { /* then the ids are passed on */
        RUN_EXPECT(&r, 20, 0);
        fprintf(stderr, "  (this machine has GPUs: checked that --gpus is accepted instead)\n");
    } else {
        RUN_EXPECT(&r, 20, 2);
        HAS(&r, "--gpus 0,1: this machine has no GPU");
        HAS(&r, "FLEET_ALLOW_NO_DEVICES=1");
        CHECK(!exists(&r, "w0.env") && !exists(&r, "log"));
    }
    cleanup(&r);
}

TEST(version_flag)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--version", NULL});
    RUN_EXPECT(&r, 20, 0);
    char self[PATH_MAX - 64], mk[PATH_MAX], want[64] = "";
    th_tests_dir(self, sizeof self);
    snprintf(mk, sizeof mk, "%s/../../Makefile", self); /* BUILD/tests -> the source tree */
    char *m = slurp(mk), *v = m ? strstr(m, "\nVERSION := ") : NULL;
    if (v) snprintf(want, sizeof want, "fleetrun %.*s\n", (int)strcspn(v + 12, "\n"), v + 12);
    free(m);
    if (*want && strcmp(r.out, want)) TFAIL("--version printed '%s', expected '%s'", r.out, want);
    int a, b, c;
    CHECK(sscanf(r.out, "fleetrun %d.%d.%d", &a, &b, &c) == 3);
    cleanup(&r);
}

/* ------------------------------------------------------------ restarts on one node */

TEST(restart_once_then_success)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--max_restart", "2", "--nproc_per_node", "2", "--grace_s", "2", "@C", "say:up", "env:@T",
                           "await:@T:2", "w1=fail_first:3", "sleep:0.2", NULL});
    RUN_EXPECT(&r, 30, 0);
    HAS(&r, "rank:   1");
    HAS(&r, "exited with code 3");
    HAS(&r, "host:   127.0.0.1");
    HAS(&r, "restarting the job: restart 1 of 2");
    CHECK(!strstr(r.out, "restart 2 of 2"));
    for (int i = 0; i < 2; i++) {
        char tag[24], path[PATH_MAX];
        snprintf(tag, sizeof tag, "w%d", i);
        char *t = file_of(&r, tag, "env");
        CHECK_VAR(t, "PADDLE_RESTART_COUNT", "1");
        free(t);
        snprintf(path, sizeof path, "%s/log/workerlog.%d", r.dir, i);
        char *log = slurp(path), *sep = log ? strstr(log, "fleetrun: restart 1 of at most 2") : NULL;
        if (!sep) TFAIL("%s has no restart line:\n%s", path, log ? log : "(missing)");
        char line[32];
        snprintf(line, sizeof line, "w%d: up\n", i);
        CHECK(strstr(log, line) < sep && strstr(sep, line)); /* appended: both runs are in the log */
        free(log);
    }
    no_descendants(5);
    cleanup(&r);
}

TEST(restart_exhausted_fails)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--max_restart", "1", "@C", "say:attempt", "exit:5", NULL});
    RUN_EXPECT(&r, 30, 1);
    HAS(&r, "restarting the job: restart 1 of 1");
    HAS(&r, "after the last restart");
    HAS(&r, "and 1 restart(s); exit status 1");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/log/workerlog.0", r.dir);
    char *log = slurp(path), *a = log ? strstr(log, "w0: attempt") : NULL;
    CHECK(a && strstr(a + 1, "w0: attempt") && !strstr(strstr(a + 1, "w0: attempt") + 1, "w0: attempt"));
    free(log);
    no_descendants(5);
    cleanup(&r);
}

/* Waits until every TAG.env in dir (w0..w{n-1}) exists with PADDLE_RESTART_COUNT=rc. */
static void wait_generation(run_t *r, const char *dir, int n, const char *rc, double timeout)
{
    double end = now() + timeout;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/w%d.env", dir, i);
        for (;;) {
            char *t = slurp(path);
            int ok = t && get(t, "PADDLE_RESTART_COUNT") && !strcmp(get(t, "PADDLE_RESTART_COUNT"), rc);
            free(t);
            if (ok) break;
            reap(r);
            if (now() > end) {
                load_out(r);
                TFAIL("%s with PADDLE_RESTART_COUNT=%s did not appear; fleetrun's output:\n%s", path, rc, r->out);
            }
            usleep(2000);
        }
    }
}

/* The restart time: from a SIGKILL to one process until every process runs again. */
TEST(restart_after_kill_timing)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--max_restart", "1", "--nproc_per_node", "2", "@C", "env:@T", "hang", NULL});
    wait_generation(&r, r.dir, 2, "0", 20);
    pid_t victim = pid_of(&r, "w1", "env");
    double t0 = now();
    kill(victim, SIGKILL);
    wait_generation(&r, r.dir, 2, "1", 20);
    fprintf(stderr, "  one node: SIGKILL to rank 1 -> both ranks running again: %.1f ms\n", (now() - t0) * 1e3);
    kill(r.pid, SIGTERM);
    RUN_EXPECT(&r, 30, 128 + SIGTERM);
    HAS(&r, "killed by signal SIGKILL");
    no_descendants(5);
    cleanup(&r);
}

/* ------------------------------------------------------------ several nodes: --master */

/* Starts node `ip` of a two-node job meeting at 127.0.0.1:port; the processes' steps follow
 * `extra` flags; "@S" in a step is the shared directory (node A's). */
static void start_node(run_t *r, const char *shared, int port, const char *ip, const char *const *extra,
                       const char *const *steps)
{
    const char *args[40];
    char master[32], *own[16];
    int n = 0, k = 0;
    snprintf(master, sizeof master, "127.0.0.1:%d", port);
    args[n++] = "--master", args[n++] = master, args[n++] = "--nnodes", args[n++] = "2";
    args[n++] = "--node_ip", args[n++] = ip, args[n++] = "--log_dir", args[n++] = "@T/log";
    for (; extra && *extra && n < 30; extra++) args[n++] = *extra;
    args[n++] = "@C";
    for (; *steps && n < 39 && k < 16; steps++) {
        const char *at = strstr(*steps, "@S");
        if (!at) {
            args[n++] = *steps;
            continue;
        }
        own[k] = malloc(strlen(*steps) + strlen(shared) + 1);
        sprintf(own[k], "%.*s%s%s", (int)(at - *steps), *steps, shared, at + 2);
        args[n++] = own[k++];
    }
    args[n] = NULL;
    start(r, (const char *[]){SECRET_ENV, NULL}, args);
    for (int i = 0; i < k; i++) free(own[i]);
}

TEST(master_two_nodes_collective)
{
    run_t a, b;
    setup(&a), setup(&b);
    int port = th_free_port();
    const char *extra[] = {"--nproc_per_node", "2", NULL};
    const char *steps[] = {"env:@S", "await:@S:4", NULL};
    start_node(&b, a.dir, port, "127.0.0.2", extra, steps); /* B first: it retries until the master listens */
    usleep(300000);
    start_node(&a, a.dir, port, "127.0.0.1", extra, steps);
    RUN_EXPECT(&a, 30, 0);
    RUN_EXPECT(&b, 30, 0);
    HAS(&a, "hosted by this node");
    HAS(&a, "0 of 2");
    HAS(&b, "1 of 2");
    HAS(&a, "every other node");
    char eps[4][64], all[512] = "", job[80] = "", *t = file_of(&a, "w0", "env");
    snprintf(all, sizeof all, "%s", get(t, "PADDLE_TRAINER_ENDPOINTS") ? get(t, "PADDLE_TRAINER_ENDPOINTS") : "");
    snprintf(job, sizeof job, "%s", get(t, "PADDLE_JOB_ID") ? get(t, "PADDLE_JOB_ID") : "");
    free(t);
    CHECK_EQ_INT(split(all, eps, 4), 4);
    for (int i = 0; i < 4; i++) {
        char tag[24], num[24];
        snprintf(tag, sizeof tag, "w%d", i);
        snprintf(num, sizeof num, "%d", i % 2);
        t = file_of(&a, tag, "env");
        CHECK_VAR(t, "PADDLE_TRAINERS_NUM", "4");
        CHECK_VAR(t, "PADDLE_TRAINER_ENDPOINTS", all);
        CHECK_VAR(t, "PADDLE_CURRENT_ENDPOINT", eps[i]);
        CHECK_VAR(t, "PADDLE_RANK_IN_NODE", num);
        CHECK_VAR(t, "PADDLE_JOB_ID", job);
        CHECK_VAR(t, "PADDLE_RESTART_COUNT", "0");
        CHECK_VAR(t, "FLEET_JOB_SECRET", SECRET_ENV + strlen("FLEET_JOB_SECRET="));
        CHECK(!strncmp(eps[i], i < 2 ? "127.0.0.1:" : "127.0.0.2:", 10));
        free(t);
    }
    CHECK(!exists(&a, "w4.env"));
    CHECK(exists(&a, "log/workerlog.0") && exists(&a, "log/workerlog.1"));
    CHECK(exists(&b, "log/workerlog.2") && exists(&b, "log/workerlog.3") && !exists(&b, "log/workerlog.0"));
    no_descendants(5);
    cleanup(&a), cleanup(&b);
}

TEST(master_two_nodes_ps)
{
    run_t a, b;
    setup(&a), setup(&b);
    int port = th_free_port();
    /* Node A's workers finish at once, node B's after 1.5 s; the servers wait to be stopped,
     * which only happens --server_grace_s after the last worker of the whole job. */
    const char *extra[] = {"--server_num", "1", "--worker_num", "2", "--server_grace_s", "1", "--grace_s", "1", NULL};
    const char *steps[] = {"env:@S", "await:@S:6", "s*=hang", "w2=sleep:1.5", "w3=sleep:1.5", NULL};
    start_node(&a, a.dir, port, "127.0.0.1", extra, steps);
    start_node(&b, a.dir, port, "127.0.0.2", extra, steps);
    RUN_EXPECT(&a, 30, 0);
    RUN_EXPECT(&b, 30, 0);
    HAS(&a, "all workers of every node finished");
    HAS(&a, "did not exit within --server_grace_s=1 s");
    if (a.elapsed < 2.4)
        TFAIL("node A stopped its server %.2f s after the start, before node B's workers were done", a.elapsed);
    char sv[4][64], wv[4][64], *t = file_of(&a, "s0", "env");
    CHECK_EQ_INT(split(get(t, "PADDLE_PSERVERS_IP_PORT_LIST"), sv, 4), 2);
    CHECK_EQ_INT(split(get(t, "PADDLE_TRAINER_ENDPOINTS"), wv, 4), 4);
    CHECK(!strncmp(sv[0], "127.0.0.1:", 10) && !strncmp(sv[1], "127.0.0.2:", 10));
    free(t);
    static const char *const tags[] = {"s0", "s1", "w0", "w1", "w2", "w3"};
    for (int i = 0; i < 6; i++) {
        int srv = i < 2, k = srv ? i : i - 2;
        t = file_of(&a, tags[i], "env");
        CHECK_VAR(t, "TRAINING_ROLE", srv ? "PSERVER" : "TRAINER");
        CHECK_VAR(t, "PADDLE_TRAINERS_NUM", "4");
        CHECK_VAR(t, "PADDLE_CURRENT_ENDPOINT", srv ? sv[k] : wv[k]);
        CHECK_VAR(t, "POD_IP", (srv ? k : k / 2) ? "127.0.0.2" : "127.0.0.1");
        free(t);
    }
    CHECK(exists(&b, "log/serverlog.1") && exists(&b, "log/workerlog.3") && exists(&a, "log/serverlog.0"));
    no_descendants(5);
    cleanup(&a), cleanup(&b);
}

TEST(master_needs_secret)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--master", "127.0.0.1:6170", "--nnodes", "2", "@C", NULL});
    RUN_EXPECT(&r, 20, 2);
    HAS(&r, "FLEET_JOB_SECRET ");
    HAS(&r, "FLEET_JOB_SECRET_FILE");
    HAS(&r, "only generate a fresh secret for a one-node job");
    CHECK(!exists(&r, "log"));
    cleanup(&r);
}

TEST(master_failure_stops_every_node)
{
    run_t a, b;
    setup(&a), setup(&b);
    int port = th_free_port();
    const char *extra[] = {"--nproc_per_node", "2", "--grace_s", "2", NULL};
    const char *steps[] = {"env:@S", "await:@S:4", "w3=exit:3", "hang", NULL};
    start_node(&a, a.dir, port, "127.0.0.1", extra, steps);
    start_node(&b, a.dir, port, "127.0.0.2", extra, steps);
    RUN_EXPECT(&a, 30, 1);
    RUN_EXPECT(&b, 30, 1);
    if (a.elapsed > 10 || b.elapsed > 10) TFAIL("the job took %.1f s and %.1f s to stop", a.elapsed, b.elapsed);
    HAS(&b, "rank:   3");
    HAS(&b, "host:   127.0.0.2 (node 1 of 2)");
    HAS(&a, "worker 3 (pid ");
    HAS(&a, "on 127.0.0.2 exited with code 3");
    HAS(&a, "root cause");
    for (int i = 0; i < 4; i++) {
        char tag[24];
        snprintf(tag, sizeof tag, "w%d", i);
        CHECK(!alive(pid_of(&a, tag, "env")));
    }
    no_descendants(5);
    cleanup(&a), cleanup(&b);
}

TEST(master_restart_two_nodes)
{
    run_t a, b;
    setup(&a), setup(&b);
    int port = th_free_port();
    const char *extra[] = {"--nproc_per_node", "2", "--max_restart", "1", NULL};
    const char *steps[] = {"env:@S", "await:@S:4", "w3=fail_first:3", "sleep:0.3", NULL};
    start_node(&a, a.dir, port, "127.0.0.1", extra, steps);
    start_node(&b, a.dir, port, "127.0.0.2", extra, steps);
    RUN_EXPECT(&a, 40, 0);
    RUN_EXPECT(&b, 40, 0);
    HAS(&a, "the master restarts the job (restart 1 of 1)");
    HAS(&b, "restarting the job: restart 1 of 1");
    char all[512] = "", *t = file_of(&a, "w0", "env");
    snprintf(all, sizeof all, "%s", get(t, "PADDLE_TRAINER_ENDPOINTS"));
    free(t);
    for (int i = 0; i < 4; i++) {
        char tag[24];
        snprintf(tag, sizeof tag, "w%d", i);
        t = file_of(&a, tag, "env");
        CHECK_VAR(t, "PADDLE_RESTART_COUNT", "1");
        CHECK_VAR(t, "PADDLE_TRAINER_ENDPOINTS", all);
        free(t);
    }
    no_descendants(5);
    cleanup(&a), cleanup(&b);
}

TEST(master_restart_after_kill_timing)
{
    run_t a, b;
    setup(&a), setup(&b);
    int port = th_free_port();
    const char *extra[] = {"--nproc_per_node", "2", "--max_restart", "1", NULL};
    const char *steps[] = {"env:@S", "hang", NULL};
    start_node(&a, a.dir, port, "127.0.0.1", extra, steps);
    start_node(&b, a.dir, port, "127.0.0.2", extra, steps);
    wait_generation(&a, a.dir, 4, "0", 30);
    double t0 = now();
    kill(pid_of(&a, "w3", "env"), SIGKILL);
    wait_generation(&a, a.dir, 4, "1", 30);
    fprintf(stderr, "  two nodes: SIGKILL to rank 3 -> all 4 ranks running again: %.1f ms\n", (now() - t0) * 1e3);
    kill(b.pid, SIGTERM); /* a signal to one node's fleetrun stops every node, with its status */
    RUN_EXPECT(&b, 30, 128 + SIGTERM);
    RUN_EXPECT(&a, 30, 128 + SIGTERM);
    HAS(&a, "fleetrun on 127.0.0.2 (node 1) received SIGTERM");
    no_descendants(5);
    cleanup(&a), cleanup(&b);
}

/* kill -9 of one node's fleetrun: its guard kills its processes, the master loses the node
 * and stops the others; then the same with the host (the master dies with it). */
TEST(master_node_or_host_killed)
{
    for (int host = 0; host < 2; host++) {
        run_t a, b;
        setup(&a), setup(&b);
        int port = th_free_port();
        const char *steps[] = {"env:@S", "hang", NULL};
        start_node(&a, a.dir, port, "127.0.0.1", (const char *[]){"--grace_s", "2", NULL}, steps);
        start_node(&b, a.dir, port, "127.0.0.2", (const char *[]){"--grace_s", "2", NULL}, steps);
        wait_generation(&a, a.dir, 2, "0", 30);
        run_t *dead = host ? &a : &b, *left = host ? &b : &a;
        kill(dead->pid, SIGKILL);
        RUN_EXPECT(dead, 30, 128 + SIGKILL);
        RUN_EXPECT(left, 30, 1);
        if (left->elapsed > 10) TFAIL("the other node took %.1f s to stop", left->elapsed);
        if (!host) HAS(left, "lost node 1 (127.0.0.2, ");
        /* The host's connection to its master closes as the host dies, a moment before the
         * master itself dies (PR_SET_PDEATHSIG): the node learns either. */
        else if (!strstr(left->out, "lost the master: the master at 127.0.0.1:") &&
                 !strstr(left->out, "lost node 0 (127.0.0.1, "))
            TFAIL("expected the node to report the lost master or host; output:\n%s", left->out);
        wait_gone(left, (pid_t[]){pid_of(&a, "w0", "env"), pid_of(&a, "w1", "env")}, 2, 5);
        no_descendants(5);
        cleanup(&a), cleanup(&b);
    }
}

TEST(master_unreachable_or_wrong_secret)
{
    run_t a, b;
    setup(&a), setup(&b);
    int port = th_free_port();
    char master[32];
    snprintf(master, sizeof master, "127.0.0.1:%d", port);
    start(&b, (const char *[]){SECRET_ENV, NULL},
          (const char *[]){"--master", master, "--nnodes", "2", "--node_ip", "127.0.0.2", "--rdzv_timeout_s", "1", "@C",
                           NULL});
    RUN_EXPECT(&b, 20, 1);
    HAS(&b, "cannot reach the master at");
    CHECK(!exists(&b, "log/workerlog.0"));
    /* a node with another secret is refused at the handshake; the master gives up waiting */
    start(&a, (const char *[]){SECRET_ENV, NULL},
          (const char *[]){"--master", master, "--nnodes", "2", "--node_ip", "127.0.0.1", "--rdzv_timeout_s", "2", "@C",
                           NULL});
    start(&b, (const char *[]){"FLEET_JOB_SECRET=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", NULL},
          (const char *[]){"--master", master, "--nnodes", "2", "--node_ip", "127.0.0.2", "--rdzv_timeout_s", "2", "@C",
                           NULL});
    RUN_EXPECT(&b, 20, 1);
    HAS(&b, "authentication failed");
    RUN_EXPECT(&a, 20, 1);
    HAS(&a, "only 1 of 2 nodes joined within --rdzv_timeout_s=2 s");
    no_descendants(5);
    cleanup(&a), cleanup(&b);
}

TEST_MAIN(T(collective_env), T(device_lists), T(logs_table_and_tee), T(child_exit_code_stops_job),
          T(failure_summary_shows_error_lines), T(child_sigsegv_named), T(sigterm_ignored_gets_sigkill),
          T(sigterm_to_fleetrun_stops_all), T(sigint_sighup_to_fleetrun_stop_all), T(kill9_fleetrun_leaves_nothing),
          T(guard_killed_then_fleetrun), T(guard_killed_job_goes_on), T(grandchild_dies_with_group), T(ps_roles_and_env),
          T(ps_servers_stopped_after_grace), T(ps_failures), T(usage_errors_exit_2), T(secret_never_leaks),
          T(secret_fresh_or_passed_through), T(multinode_collective_starts_local_ranks), T(port_in_use_reported),
          T(exec_failure_is_root_cause), T(job_id_log_level_restart_count), T(gpus_without_devices_refused),
          T(version_flag), T(restart_once_then_success), T(restart_exhausted_fails), T(restart_after_kill_timing),
          T(master_two_nodes_collective), T(master_two_nodes_ps), T(master_needs_secret),
          T(master_failure_stops_every_node), T(master_restart_two_nodes), T(master_restart_after_kill_timing),
          T(master_node_or_host_killed), T(master_unreachable_or_wrong_secret))
