/* spawn.c - starting the processes: the guard, each process's environment, fork and exec,
 * and signalling the process groups of the job. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fleetrun.h"

/* ---------------------------------------------------------------- processes */

/* The guard outlives a `kill -9 fleetrun`: it reads the pid of every process fleetrun starts
 * from a pipe (-1: a generation is over, forget them); end-of-file without the final 0 means
 * fleetrun died, and it SIGKILLs each of their process groups (grandchildren too, which
 * PR_SET_PDEATHSIG does not reach).  The `npre` pids of `pre` are in the pipe before the
 * guard exists, so a fleetrun killed right after the fork still leaves them known. */
static int guard_fork(const int32_t *pre, int npre)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    if (npre > 0 && fr_write_all(fds[1], pre, (size_t)npre * sizeof *pre) != 0) { /* < a pipe's 64 KiB */
        int e = errno;
        close(fds[0]), close(fds[1]);
        errno = e;
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]), close(fds[1]);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        static int32_t pids[2 * MAX_LOCAL + 2];
        int n = 0, k = 0, nul = open("/dev/null", O_RDWR);
        int32_t v;
        sigset_t none;
        signal(SIGINT, SIG_IGN), signal(SIGTERM, SIG_IGN), signal(SIGHUP, SIG_IGN);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(nul, 0), dup2(nul, 1), dup2(fds[0], 3);
        close_range(4, ~0U, 0);
        prctl(PR_SET_NAME, "fleetrun-guard");
        for (ssize_t r; (r = read(3, &v, sizeof v)) == (ssize_t)sizeof v || (r < 0 && errno == EINTR);) {
            if (r > 0 && v == 0) _exit(0);
            if (r > 0 && v == -1) n = 0;
            else if (r > 0 && n < (int)(sizeof pids / sizeof pids[0])) pids[n++] = v;
        }
        for (int i = 0; i < n; i++) k += kill(-pids[i], SIGKILL) == 0, kill(pids[i], SIGKILL);
        if (k) dprintf(2, "fleetrun-guard: fleetrun died; killed %d process group(s) of its job\n", k);
        _exit(0);
    }
    close(fds[0]);
    J.guard_fd = fds[1], J.guard_pid = pid;
    return 0;
}

void fr_guard_start(void)
{
    if (guard_fork(NULL, 0) != 0) fatal("cannot start the guard process: %s", strerror(errno));
}

/* The guard died (someone killed it): without one, a `kill -9 fleetrun` would leave the
 * grandchildren of the job running.  A new guard is told every process group of the
 * generation that still has members (a pid cannot be reused while its group exists). */
int fr_guard_restart(int ws)
{
    char d[160];
    proc_t dead = {.status = ws, .reaped = 1};
    fr_describe(&dead, d, sizeof d);
    if (J.guard_fd >= 0) close(J.guard_fd), J.guard_fd = -1;
    pid_t old = J.guard_pid;
    J.guard_pid = -1;
    int32_t pre[2 * MAX_LOCAL + 2];
    int n = 0;
    for (int i = 0; i < J.n && n < (int)(sizeof pre / sizeof pre[0]); i++) {
        const proc_t *p = &J.p[i];
        if (p->is_local && p->pid > 0 && (!p->reaped || kill(-p->pid, 0) == 0)) pre[n++] = p->pid;
    }
    if (guard_fork(pre, n) != 0) {
        cli_say("error: fleetrun's guard process (pid %d) %s, and a new one cannot be started (%s)", (int)old, d,
                strerror(errno));
        return -1;
    }
    cli_say("warning: fleetrun's guard process (pid %d) %s; started a new one (pid %d) watching %d process "
            "group(s)",
            (int)old, d, (int)J.guard_pid, n);
    return J.guard_fd >= 0 ? 0 : -1;
}

void fr_guard_send(int32_t v)
{
    if (J.guard_fd >= 0 && fr_write_all(J.guard_fd, &v, sizeof v) != 0) close(J.guard_fd), J.guard_fd = -1;
}

/* Variables fleetrun sets: removed from the inherited environment (POD_IP only in PS mode,
 * FLEET_LOG_LEVEL only with --log_level). */
static int managed(const char *e)
{
    static const char *const names[] = {"PADDLE_TRAINER_ID",
                                        "PADDLE_CURRENT_ENDPOINT",
                                        "PADDLE_TRAINERS_NUM",
                                        "PADDLE_TRAINER_ENDPOINTS",
                                        "PADDLE_RANK_IN_NODE",
                                        "PADDLE_TRAINING_ROLE",
                                        "TRAINING_ROLE",
                                        "PADDLE_PSERVERS_IP_PORT_LIST",
                                        "PADDLE_PORT",
                                        "FLAGS_selected_gpus",
                                        "FLEET_JOB_SECRET",
                                        "FLEET_JOB_SECRET_FILE",
                                        "PADDLE_RESTART_COUNT",
                                        "PADDLE_JOB_ID",
                                        "POD_IP",
                                        "FLEET_LOG_LEVEL"};
    const size_t nn = sizeof names / sizeof names[0], l = strcspn(e, "=");
    for (size_t i = 0; i < nn; i++)
        if (strlen(names[i]) == l && !strncmp(e, names[i], l))
            return i == nn - 2 ? J.ps : i == nn - 1 ? J.log_level != NULL : 1;
    return 0;
}

/* Paddle's variables for process p (PaddleCloudRoleMaker reads them), into own[]. */
static int own_env(const proc_t *p, char **own)
{
    int m = 0;
    own[m++] = fr_fmt("PADDLE_TRAINERS_NUM=%d", J.total[WORKER]);
    own[m++] = fr_fmt("PADDLE_TRAINER_ENDPOINTS=%s", J.worker_list);
    own[m++] = fr_fmt("PADDLE_CURRENT_ENDPOINT=%s", p->ep);
    if (p->role == WORKER) own[m++] = fr_fmt("PADDLE_TRAINER_ID=%d", p->rank);
    if (J.ps) {
        own[m++] = fr_fmt("TRAINING_ROLE=%s", p->role == SERVER ? "PSERVER" : "TRAINER");
        own[m++] = fr_fmt("PADDLE_PSERVERS_IP_PORT_LIST=%s", J.server_list);
        own[m++] = fr_fmt("POD_IP=%s", p->ip);
        own[m++] = fr_fmt("PADDLE_PORT=%d", p->port);
    } else {
        own[m++] = fr_fmt("PADDLE_TRAINING_ROLE=TRAINER");
        own[m++] = fr_fmt("PADDLE_RANK_IN_NODE=%d", p->local);
        if (J.ndev) own[m++] = fr_fmt("FLAGS_selected_gpus=%s", J.dev[p->local]);
    }
    own[m++] = fr_fmt("PADDLE_RESTART_COUNT=%d", J.restart);
    own[m++] = fr_fmt("PADDLE_JOB_ID=%s", J.job_id);
    if (J.log_level) own[m++] = fr_fmt("FLEET_LOG_LEVEL=%s", J.log_level);
    /* OpenMP's (oneDNN's and the library's) idle team threads spin briefly, then sleep,
     * instead of spinning for milliseconds against the node's other processes, unless the
     * user chose a policy or a spin count (docs/fleetrun.md) */
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT")) own[m++] = fr_fmt("GOMP_SPINCOUNT=10000");
    own[m++] = J.secret_env;
    return m;
}

void fr_spawn(proc_t *p)
{
    char *own[16];
    int nown = own_env(p, own), fds[2] = {-1, -1}, sync[2];
    size_t n = 0, k = 0;
    while (environ[n]) n++;
    char **env = calloc(n + (size_t)nown + 1, sizeof *env);
    if (!env) fatal("out of memory");
    for (size_t i = 0; i < n; i++)
        if (!managed(environ[i])) env[k++] = environ[i];
    memcpy(env + k, own, (size_t)nown * sizeof *own);
    snprintf(p->log, sizeof p->log, "%s/%slog.%d", J.log_dir, p->role == SERVER ? "server" : "worker", p->rank);
    int logfd = fr_open_log(p->log, 0), out = logfd;
    if (J.restart) { /* the log goes on; a line marks where the restarted process begins */
        char *sep = fr_fmt("==================== fleetrun: restart %d of at most %d (job %s): %s %d starts "
                           "again ====================\n",
                           J.restart, J.max_restart, J.job_id, role_name[p->role], p->rank);
        fr_write_all(logfd, sep, strlen(sep));
        free(sep);
    }
    p->log_start = lseek(logfd, 0, SEEK_END);
    if (p == J.tee) {
        if (pipe2(fds, O_CLOEXEC) != 0) fatal("pipe: %s", strerror(errno));
        fcntl(fds[0], F_SETFL, O_NONBLOCK);
        out = fds[1];
    }
    /* The port is free from here; the process binds it after its exec.  An unrelated program
     * could take it in between: the race documented in docs/fleetrun.md. */
    if (p->probe >= 0) close(p->probe), p->probe = -1;
    if (pipe2(sync, O_CLOEXEC) != 0) fatal("pipe: %s", strerror(errno));
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) fatal("fork: %s", strerror(errno));
    if (pid == 0) {
        static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT};
        sigset_t none;
        setpgid(0, 0);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127); /* parent gone */
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int nul = open("/dev/null", O_RDONLY);
        if (nul < 0 || dup2(nul, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(127);
        execve(J.prog, J.argv, env);
        dprintf(2, "fleetrun: cannot execute %s: %s\n", J.prog, strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* also here, so a kill(-pid) right after the fork reaches it */
    p->pid = pid;
    fr_guard_send(pid);
    /* Wait for the exec (end-of-file when the close-on-exec write end goes): by then the child
     * holds no copies of the other processes' port probes. */
    close(sync[1]);
    for (char c; read(sync[0], &c, 1) < 0 && errno == EINTR;) {
    }
    close(sync[0]);
    if (p == J.tee) close(fds[1]), J.tee_rd = fds[0], J.tee_log = logfd;
    else close(logfd);
    for (int i = 0; i < nown - 1; i++) free(own[i]);
    free(env);
}

proc_t *fr_find(pid_t pid)
{
    for (int i = 0; i < J.n; i++)
        if (J.p[i].pid == pid) return &J.p[i];
    return NULL;
}

/* Processes that came to fleetrun (the subreaper) after leaving their process group. */
static int adopted(pid_t *out, int max)
{
    DIR *d = opendir("/proc");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) && n < max;) {
        pid_t pid = (pid_t)atoi(e->d_name);
        char path[64], buf[512], st = 0;
        int ppid = 0;
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = pid > 0 ? fopen(path, "re") : NULL;
        if (!f) continue;
        size_t r = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[r] = 0;
        char *rp = strrchr(buf, ')');
        if (rp && sscanf(rp + 1, " %c %d", &st, &ppid) == 2 && ppid == getpid() && st != 'Z' && pid != J.guard_pid &&
            pid != J.master_pid && !fr_find(pid))
            out[n++] = pid;
    }
    if (d) closedir(d);
    return n;
}

/* Sends sig (0: only count) to the process group of every local process that still has
 * members (only servers if servers_only) and to adopted strays; returns how many are alive.
 * SIGCONT follows every other signal: a stopped process (SIGSTOP, SIGTSTP, a debugger) acts
 * on a SIGTERM only once it runs again, and would otherwise hold the job for --grace_s. */
int fr_signal_job(int sig, int servers_only)
{
    int alive = 0, cont = sig > 0 && sig != SIGCONT;
    for (int i = 0; i < J.n; i++) {
        proc_t *p = &J.p[i];
        if (!p->pid || (servers_only && p->role != SERVER)) continue;
        int grp = kill(-p->pid, sig) == 0;
        if (grp && cont) kill(-p->pid, SIGCONT);
        if (!p->reaped) { /* if it left its group */
            kill(p->pid, sig), p->stopped = sig ? sig : p->stopped;
            if (cont) kill(p->pid, SIGCONT);
        }
        alive += grp || !p->reaped;
    }
    pid_t strays[256];
    int ns = servers_only ? 0 : adopted(strays, 256);
    for (int i = 0; i < ns; i++)
        if (kill(strays[i], sig) == 0 && cont) kill(strays[i], SIGCONT);
    return alive + ns;
}

int fr_reaped_all(int role)
{
    for (int i = 0; i < J.n; i++)
        if (J.p[i].pid && !J.p[i].reaped && (role < 0 || J.p[i].role == role)) return 0;
    return 1;
}

int fr_local_count(int role)
{
    int n = 0;
    for (int i = 0; i < J.n; i++) n += J.p[i].is_local && J.p[i].role == role;
    return n;
}

void fr_pump_tee(void) /* rank 0's output: to its log, and to our stdout (best effort) */
{
    char buf[65536];
    for (ssize_t r; J.tee_rd >= 0;) {
        if ((r = read(J.tee_rd, buf, sizeof buf)) < 0 && (errno == EINTR || errno == EAGAIN)) {
            if (errno == EAGAIN) return;
            continue;
        }
        if (r <= 0) close(J.tee_rd), J.tee_rd = -1;
        else fr_write_all(J.tee_log, buf, (size_t)r), fr_write_all(1, buf, (size_t)r);
    }
}
