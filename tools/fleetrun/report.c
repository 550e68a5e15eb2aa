/* report.c - how a process ended, the error lines and the last lines of its log, and the
 * root-cause block. */
#include <fcntl.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fleetrun.h"

void fr_describe(const proc_t *p, char *b, size_t n)
{
    int ws = p->status, s = WTERMSIG(ws);
    const char *ab = sigabbrev_np(s);
    if (!p->reaped) snprintf(b, n, "could not be stopped");
    else if (WIFEXITED(ws)) snprintf(b, n, "exited with code %d", WEXITSTATUS(ws));
    else
        snprintf(b, n, "killed by signal %s%s (%s)%s", ab ? "SIG" : "", ab ? ab : "", strsignal(s),
                 WCOREDUMP(ws) ? ", core dumped" : "");
}

/* The library's error records (src/base/log.c: "[fleet E role:rank pid N subsys file:line]
 * message") that this run wrote to p's log before offset `upto` (where the tail shown after
 * them begins): the first ERR_LINES, with their line numbers.  The first error of a stalled
 * rank can be far above the tail. */
static void print_errors(const proc_t *p, off_t upto)
{
    FILE *f = fopen(p->log, "re");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    long no = 0, nerr = 0;
    off_t at = 0;
    ssize_t len;
    if (p->log_start > 0) { /* line numbers count from the start of the file */
        for (; (len = getline(&line, &cap, f)) > 0 && at + len <= p->log_start; no++) at += len;
        fseeko(f, at, SEEK_SET);
    }
    for (; at < upto && (len = getline(&line, &cap, f)) > 0; at += len) {
        no++;
        if (strncmp(line, "[fleet E ", 9) != 0 || at < p->log_start) continue;
        if (nerr++ == 0) cli_say("  error lines of %s (from the library's error records):", p->log);
        if (nerr <= ERR_LINES) cli_say("  | %ld: %.*s", no, (int)(line[len - 1] == '\n' ? len - 1 : len), line);
    }
    if (nerr > ERR_LINES) cli_say("  ... and %ld more error line(s) before the last lines", nerr - ERR_LINES);
    free(line);
    fclose(f);
}

/* The last `want` lines this run wrote to p's log, and its error records above them. */
static void print_tail(const proc_t *p, int want)
{
    static char buf[16384];
    int fd = open(p->log, O_RDONLY | O_CLOEXEC), lines = 0;
    off_t from = fd < 0 ? 0 : lseek(fd, 0, SEEK_END) - (off_t)sizeof buf + 1;
    if (from < p->log_start) from = p->log_start;
    ssize_t r = fd < 0 ? -1 : pread(fd, buf, sizeof buf - 1, from);
    if (fd >= 0) close(fd);
    if (r <= 0) {
        cli_say("  (it wrote nothing to its log in this run)");
        return;
    }
    char *s = buf + r, *e;
    *s = 0;
    if (s[-1] == '\n') *--s = 0;
    while (s > buf && lines < want) lines += *--s == '\n';
    if (*s == '\n') s++;
    else if (from > p->log_start && strchr(s, '\n')) s = strchr(s, '\n') + 1; /* drop a cut line */
    print_errors(p, from + (s - buf));
    cli_say("  last lines of %s:", p->log);
    for (char *l = s; l; l = e ? e + 1 : NULL) {
        if ((e = strchr(l, '\n'))) *e = 0;
        cli_say("  | %s", l);
    }
}

void fr_what(const proc_t *p, char *b, size_t n)
{
    char d[160];
    fr_describe(p, d, sizeof d);
    snprintf(b, n, "%s %d (pid %d) on %s %s, log %s", role_name[p->role], p->rank, (int)p->pid, p->ip, d, p->log);
}

void fr_report_failure(const proc_t *c, int sig, const char *remote, const char *title)
{
    char d[160];
    int others = 0;
    cli_say("================ %s ================", title);
    if (c) {
        fr_describe(c, d, sizeof d);
        cli_say("  role:   %s", role_name[c->role]);
        cli_say("  rank:   %d", c->rank);
        if (J.rdzv) cli_say("  host:   %s (node %d of %d)", c->ip, c->node, J.nnodes);
        else cli_say("  host:   %s", c->ip);
        cli_say("  pid:    %d", (int)c->pid);
        cli_say("  status: %s", d);
        cli_say("  log:    %s", c->log);
        print_tail(c, TAIL_LINES);
    } else if (sig) {
        cli_say("  fleetrun received SIG%s; it stopped every process of the job", sigabbrev_np(sig));
    } else {
        cli_say("  as the master reports: %s", remote);
    }
    if (c && remote && *remote) { /* unless the master only repeats this node's own report */
        char own[PATH_MAX + 256];
        fr_what(c, own, sizeof own);
        if (!strstr(remote, own)) cli_say("  the master reports the job's first failure: %s", remote);
    }
    for (int i = 0; i < J.n; i++) {
        const proc_t *p = &J.p[i];
        if (p == c || !p->pid || !p->is_local) continue;
        if (others++ == 32) {
            cli_say("  ... and more: see the logs in %s", J.log_dir);
            break;
        }
        fr_describe(p, d, sizeof d);
        /* "stopped by fleetrun" only when our signal ended it: a process that exited with a
         * code did so on its own (before the signal came, or ignoring it), and a failure of
         * its own may be the one the first failure reports ("another worker could not ...") */
        int by_us = p->stopped && p->reaped && WIFSIGNALED(p->status);
        int own_failure = p->reaped && WIFEXITED(p->status) && WEXITSTATUS(p->status) != 0;
        cli_say("  other: %s %d (pid %d) %s%s", role_name[p->role], p->rank, (int)p->pid, d,
                by_us && p->stopped == SIGKILL ? ": SIGKILLed by fleetrun after --grace_s"
                : by_us                        ? ": stopped by fleetrun"
                : own_failure                  ? ": it failed on its own too"
                                               : "");
        if (own_failure) print_tail(p, OWN_FAILURE_LINES);
    }
    cli_say("=====================================================================");
}
