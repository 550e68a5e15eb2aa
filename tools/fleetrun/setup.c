/* setup.c - the job secret, the program's path, the log directory and files, and small
 * utilities (time, formatting, writing). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fleetrun.h"

double fr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

char *fr_fmt(const char *f, ...)
{
    char *s;
    va_list ap;
    va_start(ap, f);
    int n = vasprintf(&s, f, ap);
    va_end(ap);
    if (n < 0) fatal("out of memory");
    return s;
}

/* ---------------------------------------------------------------- secret, program, logs */

/* The secret's format and checks are the net layer's (fl_net_secret_*), so a secret that
 * fleetrun accepts is one the processes accept. */
void fr_setup_secret(void)
{
    const char *s = fr_env("FLEET_JOB_SECRET", NULL), *f = fr_env("FLEET_JOB_SECRET_FILE", NULL);
    fl_net_secret sec;
    if (s && f) usage_error("both FLEET_JOB_SECRET and FLEET_JOB_SECRET_FILE are set; set only one");
    if (s || f) { /* passed through; checked now so that a bad one fails before anything starts */
        int st = s ? fl_net_secret_from_hex(s, "environment variable FLEET_JOB_SECRET", &sec)
                   : fl_net_secret_from_file(f, &sec);
        if (st == FL_OK && J.rdzv) J.secret = sec; /* for the rendezvous handshake */
        fl_net_secret_clear(&sec);
        if (st != FL_OK) usage_error("%s (make a secret with: openssl rand -hex 32)", fl_last_error());
        J.secret_env = s ? fr_fmt("FLEET_JOB_SECRET=%s", s) : fr_fmt("FLEET_JOB_SECRET_FILE=%s", f);
        J.secret_how = s ? "FLEET_JOB_SECRET, from fleetrun's environment"
                         : "FLEET_JOB_SECRET_FILE, from fleetrun's environment";
        return;
    }
    if (J.multi)
        usage_error("a job on several machines (%s) needs the same job secret on all of them, and fleetrun can "
                    "only generate a fresh secret for a one-node job: set FLEET_JOB_SECRET (64 hex characters) or "
                    "FLEET_JOB_SECRET_FILE (a 0600 file) in fleetrun's environment on each machine, e.g. "
                    "umask 077; openssl rand -hex 32 > ~/.fleet_secret, copied to every node, and "
                    "export FLEET_JOB_SECRET_FILE=~/.fleet_secret",
                    J.rdzv ? "--nnodes > 1"
                    : J.ps ? "--servers/--workers on several IPs"
                           : "several --ips");
    if (fl_net_secret_generate(&sec) != FL_OK) fatal("%s", fl_last_error());
    J.secret_env = fr_fmt("FLEET_JOB_SECRET=%064d", 0);
    fl_net_secret_to_hex(&sec, J.secret_env + strlen("FLEET_JOB_SECRET="), 2 * 32 + 1);
    fl_net_secret_clear(&sec);
    J.secret_how = "generated (32 random bytes) -> FLEET_JOB_SECRET, not shown";
}

/* PADDLE_JOB_ID: --job_id, else a fresh "job-" and 12 random hex digits.  With --master the
 * host's id is the job's (the rendezvous sends it to every node). */
void fr_setup_job_id(void)
{
    fl_net_secret r;
    if (J.job_id_flag) {
        snprintf(J.job_id, sizeof J.job_id, "%s", J.job_id_flag);
        return;
    }
    if (fl_net_secret_generate(&r) != FL_OK) fatal("%s", fl_last_error());
    snprintf(J.job_id, sizeof J.job_id, "job-%02x%02x%02x%02x%02x%02x", r.bytes[0], r.bytes[1], r.bytes[2], r.bytes[3],
             r.bytes[4], r.bytes[5]);
    fl_net_secret_clear(&r);
}

int fr_take_signal(void)
{
    struct signalfd_siginfo si;
    while (read(J.sfd, &si, sizeof si) == (ssize_t)sizeof si)
        if (si.ssi_signo != SIGCHLD) return (int)si.ssi_signo;
    return 0;
}

void fr_resolve_program(void)
{
    const char *name = J.argv[0], *path = fr_env("PATH", "/usr/local/bin:/usr/bin:/bin");
    struct stat st;
    snprintf(J.prog, sizeof J.prog, "%s", name);
    for (const char *d = path; !strchr(name, '/');) {
        size_t dl = strcspn(d, ":");
        snprintf(J.prog, sizeof J.prog, "%.*s%s%s", (int)dl, d, dl ? "/" : "", name);
        if (stat(J.prog, &st) == 0 && S_ISREG(st.st_mode) && access(J.prog, X_OK) == 0) return;
        if (!d[dl])
            usage_error("program '%s' not found in PATH (give its path, e.g. ./%s; a script runs through "
                        "its interpreter: fleetrun ... python3 %s)",
                        name, name, name);
        d += dl + 1;
    }
    if (stat(J.prog, &st) != 0) usage_error("program '%s' does not exist", name);
    if (!S_ISREG(st.st_mode) || access(J.prog, X_OK) != 0)
        usage_error("program '%s' is not an executable file (a script runs through its interpreter: "
                    "fleetrun ... python3 %s)",
                    name, name);
}

void fr_mkdirs(const char *dir) /* mkdir -p, without a shell */
{
    char b[PATH_MAX];
    struct stat st;
    if (snprintf(b, sizeof b, "%s", dir) >= (int)sizeof b) fatal("--log_dir is too long");
    for (char *s = b + 1;; s++) {
        char c = *s;
        if (c != '/' && c) continue;
        *s = 0;
        if (mkdir(b, 0755) != 0 && errno != EEXIST) fatal("cannot create log directory %s: %s", b, strerror(errno));
        if (!(*s = c)) break;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) fatal("--log_dir %s is not a directory", dir);
}

int fr_open_log(const char *path, int trunc)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (trunc ? O_TRUNC : O_APPEND), 0644);
    if (fd < 0) fatal("cannot open log file %s: %s", path, strerror(errno));
    return fd;
}

int fr_write_all(int fd, const void *buf, size_t n)
{
    for (const char *p = buf; n;) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}
