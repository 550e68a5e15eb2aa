/*
 * source.c - one data file read line by line, directly or through a pipe_command.
 *
 * Reads go through one buffer of 1 MiB (grown only for a longer line, up to
 * FL__DATA_MAX_LINE); lines are found with memchr and handed out in place.
 *
 * A pipe_command other than "cat" runs as `/bin/sh -c CMD` (posix_spawn, its own process
 * group) with the file on standard input; its standard output is the data and the last
 * 2 KiB of its standard error are kept for messages.  Every wait is bounded: when neither
 * output nor an exit comes for `timeout` seconds the whole process group is killed and the
 * read fails with FL_ETIMEDOUT.  A child is always reaped (on success, failure, timeout and
 * early close), and what is left of its process group is killed first, so no zombie or
 * orphan outlives the source.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "data_internal.h"

#define BUF_BYTES ((size_t)1 << 20)
#define ERR_TAIL 2048

struct fl__source {
    char *file, *cmd; /* cmd NULL: direct read */
    int fd, errfd;
    pid_t pid; /* 0: none or reaped */
    double timeout;
    const int *cancel; /* atomic flag: stop waiting and fail (NULL: none) */
    char *buf;
    size_t cap, start, end, scan;
    int eof;
    int64_t lines;
    int64_t consumed; /* bytes of the lines returned (direct reads) */
    char tail[ERR_TAIL];
    size_t tail_len;
};

static int is_cat(const char *cmd)
{
    if (!cmd) return 1;
    while (*cmd == ' ' || *cmd == '\t') cmd++;
    if (strncmp(cmd, "cat", 3) != 0) return 0;
    for (cmd += 3; *cmd; cmd++)
        if (*cmd != ' ' && *cmd != '\t') return 0;
    return 1;
}

/* Kills what is left of the child's process group, then reaps the child. */
static void kill_and_reap(fl__source *s)
{
    if (s->pid <= 0) return;
    kill(-s->pid, SIGKILL);
    kill(s->pid, SIGKILL);
    while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    s->pid = 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static void tail_add(fl__source *s, const char *p, size_t n)
{
    if (n >= ERR_TAIL) {
        memcpy(s->tail, p + n - ERR_TAIL, ERR_TAIL);
        s->tail_len = ERR_TAIL;
        return;
    }
    if (s->tail_len + n > ERR_TAIL) {
        size_t drop = s->tail_len + n - ERR_TAIL;
        memmove(s->tail, s->tail + drop, s->tail_len - drop);
        s->tail_len -= drop;
    }
    memcpy(s->tail + s->tail_len, p, n);
    s->tail_len += n;
}

/* Reads what standard error has now (non-blocking); closes it at EOF. */
static void drain_err(fl__source *s)
{
    char tmp[4096];
    while (s->errfd >= 0) {
        ssize_t n = read(s->errfd, tmp, sizeof tmp);
        if (n > 0) {
            tail_add(s, tmp, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        close_fd(&s->errfd);
    }
}

/* Formats the error of a failed child: prefix, then as much of the stderr tail as fits. */
static int child_error(fl__source *s, int st, const char *what)
{
    char pre[512], t[ERR_TAIL + 1];
    snprintf(pre, sizeof pre, "pipe_command '%.200s' on %.200s %s", s->cmd, s->file, what);
    size_t n = s->tail_len;
    while (n && (s->tail[n - 1] == '\n' || s->tail[n - 1] == '\r' || s->tail[n - 1] == ' ')) n--;
    for (size_t i = 0; i < n; i++) t[i] = s->tail[i] == '\n' || s->tail[i] == '\r' ? '|' : s->tail[i];
    t[n] = 0;
    /* the message has room for the end of the tail; the log (at info) gets all of it */
    for (size_t o = 0; o < n; o += 1200)
        FL_INFO(FL_SUB_DATA, "pipe_command '%.200s' on %.200s: standard error (last %zu bytes, part %zu): %.*s", s->cmd,
                s->file, n, o / 1200 + 1, (int)(n - o < 1200 ? n - o : 1200), t + o);
    size_t room = 1000 > strlen(pre) + 40 ? 1000 - strlen(pre) - 40 : 0;
    const char *shown = n > room ? t + (n - room) : t;
    return fl__err(st, "%s: %s%s", pre, n > room ? "..." : "", n ? shown : "(no standard error output)");
}

static int timed_out(fl__source *s, const char *waiting)
{
    kill_and_reap(s);
    char what[128];
    snprintf(what, sizeof what, "%s for %g s; killed it", waiting, s->timeout);
    return child_error(s, FL_ETIMEDOUT, what);
}

void fl__source_set_cancel(fl__source *s, const int *flag) { s->cancel = flag; }

static int cancelled(const fl__source *s)
{
    if (s->cancel && __atomic_load_n(s->cancel, __ATOMIC_RELAXED))
        return fl__err(FL_ESTATE, "reading '%s' was cancelled", s->file);
    return FL_OK;
}

/* After standard output ended: collect standard error, wait for the exit, check it. */
static int finish_child(fl__source *s)
{
    double deadline = fl__now() + s->timeout;
    while (s->errfd >= 0) {
        double left = deadline - fl__now();
        if (left <= 0) return timed_out(s, "did not exit");
        FL_CHECK(cancelled(s));
        if (s->cancel && left > 0.1) left = 0.1;
        struct pollfd pf = {s->errfd, POLLIN, 0};
        int r = poll(&pf, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR) break;
        if (r > 0) drain_err(s);
    }
    close_fd(&s->errfd);
    siginfo_t si;
    long nap = 100000; /* ns */
    for (;;) {
        memset(&si, 0, sizeof si);
        int r = waitid(P_PID, (id_t)s->pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { /* someone else reaped it (SIGCHLD ignored): nothing to report */
            s->pid = 0;
            return FL_OK;
        }
        if (si.si_pid == s->pid) break;
        if (fl__now() > deadline) return timed_out(s, "did not exit");
        FL_CHECK(cancelled(s));
        struct timespec ts = {0, nap};
        nanosleep(&ts, NULL);
        if (nap < 10000000) nap *= 2;
    }
    kill_and_reap(s); /* the shell has exited: clear out what it left behind */
    char what[96];
    if (si.si_code == CLD_EXITED) {
        if (si.si_status == 0) return FL_OK;
        snprintf(what, sizeof what, "exited with status %d", si.si_status);
    } else {
        snprintf(what, sizeof what, "was killed by signal %d (%s)", si.si_status, strsignal(si.si_status));
    }
    return child_error(s, FL_EIO, what);
}

int fl__source_open(fl__source **out, const char *file, const char *cmd, double timeout)
{
    *out = NULL;
    fl__source *s = calloc(1, sizeof *s);
    if (!s) return fl__err(FL_ENOMEM, "data: out of memory opening '%s'", file);
    s->fd = s->errfd = -1;
    s->timeout = timeout;
    int st = FL_OK, in = -1, op[2] = {-1, -1}, ep[2] = {-1, -1};
    s->file = fl__strdup(file);
    s->buf = malloc(BUF_BYTES);
    s->cap = BUF_BYTES;
    if (!s->file || !s->buf || (!is_cat(cmd) && !(s->cmd = fl__strdup(cmd)))) {
        st = fl__err(FL_ENOMEM, "data: out of memory opening '%s'", file);
        goto fail;
    }
    in = open(file, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        st = fl__err(FL_EIO, "cannot open data file '%s': %s", file, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(in, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        st = fl__err(FL_EIO, "cannot read data file '%s': it is a directory", file);
        goto fail;
    }
    if (!s->cmd) {
        posix_fadvise(in, 0, 0, POSIX_FADV_SEQUENTIAL);
        s->fd = in;
        *out = s;
        return FL_OK;
    }
    if (pipe2(op, O_CLOEXEC) || pipe2(ep, O_CLOEXEC)) {
        st = fl__err(FL_EIO, "pipe_command '%s' on %s: cannot create a pipe: %s", s->cmd, file, strerror(errno));
        goto fail;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, def;
    sigemptyset(&none);
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in, 0);
    posix_spawn_file_actions_adddup2(&fa, op[1], 1);
    posix_spawn_file_actions_adddup2(&fa, ep[1], 2);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &def);
    char *argv[] = {"sh", "-c", s->cmd, NULL};
    extern char **environ;
    int rc = posix_spawn(&s->pid, "/bin/sh", &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
        s->pid = 0;
        st = fl__err(FL_EIO, "pipe_command '%s' on %s: cannot start /bin/sh: %s", s->cmd, file, strerror(rc));
        goto fail;
    }
    close(in);
    close(op[1]);
    close(ep[1]);
    in = op[1] = ep[1] = -1;
    s->fd = op[0];
    s->errfd = ep[0];
    fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) | O_NONBLOCK);
    fcntl(s->errfd, F_SETFL, fcntl(s->errfd, F_GETFL) | O_NONBLOCK);
    *out = s;
    return FL_OK;
fail:
    if (in >= 0) close(in);
    for (int i = 0; i < 2; i++) {
        close_fd(&op[i]);
        close_fd(&ep[i]);
    }
    fl__source_close(s);
    return st;
}

/* Reads more bytes into buf[end, cap); sets eof at the end of the data. */
static int fill(fl__source *s)
{
    FL_CHECK(cancelled(s));
    if (!s->cmd) {
        for (;;) {
            ssize_t n = read(s->fd, s->buf + s->end, s->cap - s->end);
            if (n > 0) {
                s->end += (size_t)n;
                return FL_OK;
            }
            if (n == 0) {
                s->eof = 1;
                return FL_OK;
            }
            if (errno != EINTR) return fl__err(FL_EIO, "cannot read data file '%s': %s", s->file, strerror(errno));
        }
    }
    double deadline = fl__now() + s->timeout;
    for (;;) {
        ssize_t n = read(s->fd, s->buf + s->end, s->cap - s->end);
        if (n > 0) {
            s->end += (size_t)n;
            return FL_OK;
        }
        if (n == 0) {
            close_fd(&s->fd);
            s->eof = 1;
            return finish_child(s);
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return fl__err(FL_EIO, "pipe_command '%s' on %s: cannot read its output: %s", s->cmd, s->file, strerror(errno));
        double left = deadline - fl__now();
        if (left <= 0) return timed_out(s, "produced no output");
        FL_CHECK(cancelled(s));
        if (s->cancel && left > 0.1) left = 0.1; /* look at the flag every 100 ms */
        struct pollfd pf[2] = {{s->fd, POLLIN, 0}, {s->errfd, POLLIN, 0}};
        int r = poll(pf, s->errfd >= 0 ? 2 : 1, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR)
            return fl__err(FL_EIO, "pipe_command '%s' on %s: poll failed: %s", s->cmd, s->file, strerror(errno));
        if (r > 0 && s->errfd >= 0 && pf[1].revents) drain_err(s);
    }
}

int fl__source_next(fl__source *s, const char **line, size_t *len)
{
    for (;;) {
        if (s->scan < s->end) {
            char *nl = memchr(s->buf + s->scan, '\n', s->end - s->scan);
            if (nl) {
                *line = s->buf + s->start;
                *len = (size_t)(nl - (s->buf + s->start));
                s->consumed += (int64_t)(nl + 1 - (s->buf + s->start));
                s->start = s->scan = (size_t)(nl + 1 - s->buf);
                s->lines++;
                return 1;
            }
            s->scan = s->end;
        }
        if (s->eof) {
            if (s->start < s->end) { /* a last line without '\n' */
                *line = s->buf + s->start;
                *len = s->end - s->start;
                s->consumed += (int64_t)(s->end - s->start);
                s->start = s->scan = s->end;
                s->lines++;
                return 1;
            }
            return 0;
        }
        if (s->start > 0) {
            memmove(s->buf, s->buf + s->start, s->end - s->start);
            s->end -= s->start;
            s->scan -= s->start;
            s->start = 0;
        }
        if (s->end == s->cap) {
            if (s->cap >= FL__DATA_MAX_LINE)
                return fl__err(FL_ECORRUPT, "%s:%lld: line longer than %zu MiB", s->file, (long long)s->lines + 1,
                               FL__DATA_MAX_LINE >> 20);
            char *nb = realloc(s->buf, s->cap * 2);
            if (!nb) return fl__err(FL_ENOMEM, "%s: out of memory for a line of %zu bytes", s->file, s->cap);
            s->buf = nb;
            s->cap *= 2;
        }
        FL_CHECK(fill(s));
    }
}

int64_t fl__source_consumed(const fl__source *s) { return s->cmd ? -1 : s->consumed; }

void fl__source_close(fl__source *s)
{
    if (!s) return;
    close_fd(&s->fd);
    close_fd(&s->errfd);
    kill_and_reap(s);
    free(s->buf);
    free(s->file);
    free(s->cmd);
    free(s);
}
