/*
 * fleetrun_run.h - running the fleetrun launcher in tests (tests/test_fleetrun.c and
 * tests/test_fleetrun_nodes.c): a run in its own temporary directory, started with extra
 * environment and arguments (@T expands to the directory, @C to the helper program
 * BUILD/tests/bin/fr_child), reaped with a deadline; its output and the files its
 * processes write; waits for processes to be gone.  Every case is a subreaper
 * (PR_SET_CHILD_SUBREAPER), so processes orphaned by fleetrun come back to it.
 */
#ifndef FLEET_TESTS_FLEETRUN_RUN_H
#define FLEET_TESTS_FLEETRUN_RUN_H

#include "testhelp.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void setup(run_t *r)
{
    char self[PATH_MAX - 64];
    th_tests_dir(self, sizeof self);
    snprintf(FR, sizeof FR, "%s/../tools/fleetrun", self);
    snprintf(CH, sizeof CH, "%s/bin/fr_child", self);
    if (access(FR, X_OK) || access(CH, X_OK)) TFAIL("%s or %s is not built (make all)", FR, CH);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    memset(r, 0, sizeof *r);
    th_mktemp(r->dir, sizeof r->dir, "fr_test.");
}

static inline void cleanup(run_t *r)
{
    for (int i = 0; i < nruns; i++) /* r may go out of scope now */
        if (runs[i] == r) runs[i--] = runs[--nruns];
    free(r->out);
    th_rmtree(r->dir);
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
static inline void start(run_t *r, const char *const *env, const char *const *args)
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
        static const char *const drop[] = {"FLEET_JOB_SECRET",       "FLEET_JOB_SECRET_FILE", "POD_IP",
                                           "FLAGS_START_PORT",       "PADDLE_TRAINER_ID",     "TRAINING_ROLE",
                                           "FLEET_ALLOW_NO_DEVICES", "FLEET_LOG_LEVEL",       "PADDLE_RESTART_COUNT",
                                           "PADDLE_JOB_ID",          "OMP_WAIT_POLICY"};
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
static inline void reap(run_t *r)
{
    int ws;
    pid_t p;
    (void)r;
    while ((p = waitpid(-1, &ws, WNOHANG)) > 0)
        for (int i = 0; i < nruns; i++)
            if (p == runs[i]->pid && !runs[i]->done)
                runs[i]->done = 1, runs[i]->ws = ws, runs[i]->elapsed = now() - runs[i]->t0;
}

static inline void load_out(run_t *r)
{
    char path[128];
    snprintf(path, sizeof path, "%s/out.txt", r->dir);
    free(r->out);
    r->out = slurp(path);
    if (!r->out) r->out = calloc(1, 1);
}

/* Waits for fleetrun to end; returns its exit status (128+N after death by signal N). */
static inline int finish(run_t *r, double timeout)
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

static inline int exists(const run_t *r, const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    return access(path, F_OK) == 0;
}

/* Waits until each file (NULL-terminated list) exists in r->dir, fleetrun still running. */
static inline void wait_files(run_t *r, const char *const *names, double timeout)
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

static inline int alive(pid_t pid)
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

static inline void wait_gone(run_t *r, const pid_t *pids, int n, double timeout)
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
static inline void no_descendants(double timeout)
{
    double end = now() + timeout;
    for (;;) {
        pid_t p = waitpid(-1, NULL, WNOHANG);
        if (p < 0 && errno == ECHILD) return;
        if (p == 0 && now() > end) TFAIL("a process started by fleetrun outlived it by %g s", timeout);
        if (p == 0) usleep(5000);
    }
}

static inline pid_t pid_of(const run_t *r, const char *tag, const char *ext)
{
    char *t = file_of(r, tag, ext);
    pid_t p = (pid_t)atoi(get(t, "pid"));
    free(t);
    return p;
}

static inline int is_hex64(const char *s)
{
    if (!s || strlen(s) != 64) return 0;
    for (; *s; s++)
        if (!isxdigit((unsigned char)*s)) return 0;
    return 1;
}

/* Splits a comma list into out (static copies); returns the count. */
static inline int split(const char *s, char out[][64], int max)
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

#endif
