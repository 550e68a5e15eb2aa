/*
 * ps_job.h - jobs of tests/bin/ps_train processes on 127.0.0.1 for the parameter-server
 * tests (tests/test_ps_fleet.c, tests/test_ps_modes.c): servers and workers started with
 * Paddle's environment (as fleetrun sets it) or locally (the reference run), logs in a
 * temporary directory, waited for with a deadline (a failure shows the logs).
 */
#ifndef FLEET_TESTS_PS_JOB_H
#define FLEET_TESTS_PS_JOB_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <time.h>

#include "testhelp.h"

#define SECRET "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

/* BUILD/tests/bin/ps_train (set by the test before the first job) */
static char PS_TRAIN[PATH_MAX];

static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t r = fread(b, 1, (size_t)n, f);
    b[r] = 0;
    fclose(f);
    return b;
}

/* ---- jobs of ps_train processes ------------------------------------------------------------ */

typedef struct {
    pid_t pid;
    int server, idx, done, status;
    char log[PATH_MAX];
} proc_t_;

typedef struct {
    char dir[64];
    int ns, nw;
    char list[512];
    proc_t_ p[16];
    int n;
} job;

static inline void job_init(job *j, int ns, int nw)
{
    memset(j, 0, sizeof *j);
    th_mktemp(j->dir, sizeof j->dir, "fleet_psf_");
    j->ns = ns;
    j->nw = nw;
    for (int i = 0; i < ns; i++)
        snprintf(j->list + strlen(j->list), sizeof j->list - strlen(j->list), "%s127.0.0.1:%d", i ? "," : "",
                 th_free_port());
}

static inline const char *port_of(const job *j, int i)
{
    const char *s = j->list;
    for (int k = 0; k < i; k++) s = strchr(s, ',') + 1;
    static char buf[16];
    const char *c = strchr(s, ':') + 1;
    size_t n = strcspn(c, ",");
    memcpy(buf, c, n);
    buf[n] = 0;
    return buf;
}

/* Starts ps_train as server / worker idx with args (NULL-terminated; "%d" in an argument
 * is not expanded).  local: no PS environment (the reference run). */
static inline proc_t_ *spawn(job *j, int server, int idx, int local, const char *const *args)
{
    proc_t_ *p = &j->p[j->n++];
    memset(p, 0, sizeof *p);
    p->server = server;
    p->idx = idx;
    char dir[sizeof j->dir];
    memcpy(dir, j->dir, sizeof dir);
    snprintf(p->log, sizeof p->log, "%s/%s.%d.log", dir, local ? "local" : server ? "server" : "worker", idx);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) TFAIL("fork failed");
    if (pid == 0) {
        int fd = open(p->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(127);
        alarm(0);
        unsetenv("PADDLE_TRAINER_ENDPOINTS");
        unsetenv("PADDLE_PSERVERS_IP_PORT_LIST");
        unsetenv("TRAINING_ROLE");
        if (!local) {
            char num[16];
            snprintf(num, sizeof num, "%d", j->nw);
            setenv("PADDLE_PSERVERS_IP_PORT_LIST", j->list, 1);
            setenv("PADDLE_TRAINERS_NUM", num, 1);
            setenv("FLEET_JOB_SECRET", SECRET, 1);
            setenv("FLEET_PS_CONNECT_TIMEOUT_MS", "30000", 1);
            setenv("FLEET_PS_RECONNECT_GRACE_MS", "2000", 1);
            snprintf(num, sizeof num, "%d", idx);
            if (server) {
                setenv("TRAINING_ROLE", "PSERVER", 1);
                setenv("POD_IP", "127.0.0.1", 1);
                setenv("PADDLE_PORT", port_of(j, idx), 1);
            } else {
                setenv("TRAINING_ROLE", "TRAINER", 1);
                setenv("PADDLE_TRAINER_ID", num, 1);
            }
        }
        const char *argv[32] = {PS_TRAIN};
        int a = 1;
        for (int i = 0; args[i] && a < 31; i++) argv[a++] = args[i];
        argv[a] = NULL;
        execv(PS_TRAIN, (char *const *)argv);
        _exit(127);
    }
    p->pid = pid;
    return p;
}

static inline void dump_logs(job *j)
{
    for (int i = 0; i < j->n; i++) {
        char *s = slurp(j->p[i].log);
        size_t n = strlen(s);
        fprintf(stderr, "---- %s (last lines)\n%s\n", j->p[i].log, n > 3000 ? s + n - 3000 : s);
        free(s);
    }
}

static inline void kill_all(job *j)
{
    for (int i = 0; i < j->n; i++)
        if (!j->p[i].done) kill(j->p[i].pid, SIGKILL);
    for (int i = 0; i < j->n; i++)
        if (!j->p[i].done) waitpid(j->p[i].pid, NULL, 0), j->p[i].done = 1;
}

/* Waits for p; returns 0 when it ended within timeout. */
static inline int wait_proc(proc_t_ *p, double timeout)
{
    double end = now() + timeout;
    while (!p->done) {
        pid_t r = waitpid(p->pid, &p->status, WNOHANG);
        if (r == p->pid) {
            p->done = 1;
            break;
        }
        if (now() > end) return -1;
        usleep(20000);
    }
    return 0;
}

static inline int exited_ok(const proc_t_ *p) { return p->done && WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0; }

/* Waits for every process (a failure propagates to the others, so all end); fails with
 * the logs unless all exit 0 within timeout. */
static inline void job_wait_ok(job *j, double timeout)
{
    double end = now() + timeout;
    int late = -1;
    for (int i = 0; i < j->n; i++) {
        double left = end - now();
        if (wait_proc(&j->p[i], left > 0 ? left : 0) != 0 && late < 0) late = i;
    }
    for (int i = 0; i < j->n && late < 0; i++)
        if (!exited_ok(&j->p[i])) {
            dump_logs(j);
            TFAIL("%s (pid %d) failed: status 0x%x", j->p[i].log, (int)j->p[i].pid, j->p[i].status);
        }
    if (late >= 0) {
        dump_logs(j);
        kill_all(j);
        TFAIL("%s %d did not finish within %g s", j->p[late].server ? "server" : "worker", j->p[late].idx, timeout);
    }
}

/* Starts ns servers and nw workers of ps_train with the same args plus per-role extras. */
static inline void job_start(job *j, const char *const *common, const char *const *server_extra,
                             const char *const *worker0_extra)
{
    for (int r = 0; r < 2; r++) {
        int n = r == 0 ? j->ns : j->nw;
        for (int i = 0; i < n; i++) {
            const char *args[32];
            int a = 0;
            for (int k = 0; common[k]; k++) args[a++] = common[k];
            const char *const *ex = r == 0 ? server_extra : i == 0 ? worker0_extra : NULL;
            for (int k = 0; ex && ex[k]; k++) args[a++] = ex[k];
            args[a] = NULL;
            spawn(j, r == 0, i, 0, args);
        }
    }
}

/* The last cost printed by a worker, or with avg > 0 the mean of its last avg costs. */
static inline double worker_cost(const job *j, int worker, int avg)
{
    for (int i = 0; i < j->n; i++) {
        if (j->p[i].server || j->p[i].idx != worker) continue;
        char *s = slurp(j->p[i].log), *p = s;
        double ring[64] = {0};
        int n = 0;
        while ((p = strstr(p, " cost = "))) {
            ring[n++ % 64] = atof(p + 8);
            p++;
        }
        free(s);
        if (!n) return 1e9;
        if (avg <= 0) return ring[(n - 1) % 64];
        int k = avg < n ? avg : n;
        double sum = 0;
        for (int q = 0; q < k; q++) sum += ring[(n - 1 - q) % 64];
        return sum / k;
    }
    return 1e9;
}

#endif
