/*
 * ps_fork.h - a parameter server in a forked child, for the tests and benches that need a
 * server in another process (tests/test_ps_server.c, test_ps_ssd.c, test_net_flood.c,
 * bench/bench_ps.c, bench_ps_ssd.c).  The child builds the server from opts, loads
 * load_dir first when given, sends its endpoint to the parent through a pipe and serves
 * until stopped.  It dies with its parent (PR_SET_PDEATHSIG) and, when alarm_s > 0, after
 * alarm_s seconds.  Its exit status: 0 when fl_ps_server_run returned FL_OK, 1 when it
 * failed, 2 when the server could not be created, 3 when the load failed, 4 when the pipe
 * broke (the cause is printed on stderr).
 */
#ifndef FLEET_TESTS_PS_FORK_H
#define FLEET_TESTS_PS_FORK_H

#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "fleet/ps.h"

/* Returns the child's pid with its endpoint in ep, or -1 (nothing left running). */
static inline pid_t ps_fork_server(const fl_ps_server_opts *o, const char *load_dir, unsigned alarm_s, char *ep,
                                   size_t cap)
{
    int pfd[2];
    if (pipe(pfd)) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(pfd[0]);
        if (alarm_s) alarm(alarm_s);
        fl_ps_server *s;
        if (fl_ps_server_create(o, &s)) {
            fprintf(stderr, "server %d: %s\n", o->server_index, fl_last_error());
            _exit(2);
        }
        if (load_dir && fl_ps_server_load(s, load_dir)) {
            fprintf(stderr, "server %d: %s\n", o->server_index, fl_last_error());
            _exit(3);
        }
        char buf[128];
        snprintf(buf, sizeof buf, "%s", fl_ps_server_endpoint(s));
        if (write(pfd[1], buf, sizeof buf) != (ssize_t)sizeof buf) _exit(4);
        close(pfd[1]);
        int rc = fl_ps_server_run(s);
        if (rc) fprintf(stderr, "server %d ended: %s\n", o->server_index, fl_last_error());
        fl_ps_server_free(s);
        _exit(rc == FL_OK ? 0 : 1);
    }
    close(pfd[1]);
    char buf[128];
    ssize_t got = read(pfd[0], buf, sizeof buf);
    close(pfd[0]);
    if (got != (ssize_t)sizeof buf) {
        kill(pid, SIGKILL);
        return -1;
    }
    snprintf(ep, cap, "%s", buf);
    return pid;
}

#endif
