/*
 * watch.c - watching one generation of the job on this node: reaping the processes, the
 * first failure, a signal to fleetrun, the PS server grace, processes left behind, the
 * SIGTERM-then-SIGKILL teardown and, with --master, the master's word (restart, stop, end).
 *
 * The generation is over here when every local process is reaped and nothing it left
 * behind is alive, and then: without --master at once; with --master when the master has
 * spoken (a node that failed or finished waits for the master's verdict, so that every
 * node restarts or ends together), or when fleetrun itself got a signal.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "fleetrun.h"

static int failing(const fr_outcome *o)
{
    return o->cause || o->sig || o->guard_lost || (o->verdict != FR_V_NONE && o->verdict != FR_V_END);
}

static void reap(fr_outcome *o)
{
    int ws;
    for (pid_t pid; (pid = waitpid(-1, &ws, WNOHANG)) > 0;) {
        proc_t *p = fr_find(pid);
        if (pid == J.guard_pid) { /* killed by someone: a new guard keeps the no-orphan promise */
            if (fr_guard_restart(ws) != 0 && !failing(o)) {
                o->guard_lost = 1;
                cli_say("stopping the job: without a guard, a kill -9 of fleetrun could leave processes behind");
                if (J.rdzv) fr_rdzv_failed("fleetrun lost its guard process", 1, 1);
            }
            continue;
        }
        J.master_pid = pid == J.master_pid ? -1 : J.master_pid; /* the node sees the connection close */
        if (!p) continue;                                       /* an adopted grandchild */
        p->reaped = 1, p->status = ws;
        if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) && !p->stopped && !failing(o)) {
            char what[PATH_MAX + 256];
            o->cause = p;
            fr_what(p, what, sizeof what);
            cli_say("%s; stopping the job", what);
            if (J.rdzv) fr_rdzv_failed(what, WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : 1, 0);
        }
    }
}

/* A signal to fleetrun: the first stops the job (and, with --master, every node's); another
 * while stopping skips the grace; one while waiting for the master stops the wait. */
static void on_signal(fr_outcome *o, int s, int *phase, double *deadline, int over)
{
    if (*phase < PH_TERM && !failing(o)) {
        o->sig = s;
        cli_say("received SIG%s; stopping the job", sigabbrev_np(s));
        if (J.rdzv) {
            char what[160];
            snprintf(what, sizeof what, "fleetrun on %s (node %d) received SIG%s", J.my_ip, J.node_rank, sigabbrev_np(s));
            fr_rdzv_failed(what, 128 + s, 1);
        }
    } else if (over) {
        cli_say("received SIG%s; not waiting for the master any longer", sigabbrev_np(s));
        o->abandon = 1;
    } else if (*phase < PH_KILL) { /* a second signal: no more grace */
        o->sig = o->sig || o->cause ? o->sig : s;
        cli_say("received SIG%s again; sending SIGKILL now", sigabbrev_np(s));
        fr_signal_job(SIGKILL, 0);
        *phase = PH_KILL, *deadline = fr_now() + KILL_WAIT_S;
    }
}

void fr_watch(fr_outcome *o)
{
    int phase = PH_RUN, told_workers = 0, told_done = 0;
    double deadline = 0;
    for (;;) {
        reap(o);
        double now = fr_now();
        if (phase < PH_TERM && failing(o)) {
            int n = fr_signal_job(SIGTERM, 0);
            cli_say("sent SIGTERM (and SIGCONT) to %d process group(s); SIGKILL follows after --grace_s=%g s", n, J.grace);
            phase = PH_TERM, deadline = now + J.grace;
        }
        /* every local worker succeeded: the servers get --server_grace_s to follow.  A node
         * with servers only (--servers/--workers over several machines) has no workers of its
         * own to wait for: its servers end when every worker of the job said goodbye, or
         * fail within seconds when one is lost, so it waits for them without a grace. */
        if (phase == PH_RUN && J.ps && fr_reaped_all(WORKER) && (J.rdzv || fr_local_count(WORKER) > 0)) {
            if (J.rdzv && !told_workers) fr_rdzv_status(1, 0), told_workers = 1;
            if (!fr_reaped_all(SERVER) && (!J.rdzv || o->all_workers_done)) {
                cli_say("all workers%s finished; waiting up to --server_grace_s=%g s for the servers to exit",
                        J.rdzv ? " of every node" : "", J.server_grace);
                phase = PH_SERVER_WAIT, deadline = now + J.server_grace;
            }
        }
        if (phase == PH_SERVER_WAIT && !fr_reaped_all(SERVER) && now >= deadline) {
            for (int i = 0; i < J.n; i++)
                if (J.p[i].role == SERVER && J.p[i].pid && !J.p[i].reaped)
                    cli_say("warning: server %d (pid %d) did not exit within --server_grace_s=%g s after the workers "
                            "finished; stopping it (SIGTERM, then SIGKILL after --grace_s=%g s)",
                            J.p[i].rank, (int)J.p[i].pid, J.server_grace, J.grace);
            fr_signal_job(SIGTERM, 1);
            o->servers_stopped = 1, phase = PH_TERM, deadline = now + J.grace;
        }
        int over = 0;
        if (fr_reaped_all(-1)) {
            if (fr_signal_job(0, 0) == 0) {
                over = 1;
            } else if (phase <= PH_SERVER_WAIT) {
                cli_say("stopping processes left behind by the job's processes (SIGTERM, SIGKILL after "
                        "--grace_s=%g s)",
                        J.grace);
                fr_signal_job(SIGTERM, 0);
                o->leftovers = 1, phase = PH_TERM, deadline = now + J.grace;
            }
        }
        if (over) {
            if (!J.rdzv || o->sig || o->abandon || o->verdict == FR_V_LOST) break;
            if (!failing(o) && !told_done) fr_rdzv_status(1, 1), told_done = 1;
            if (o->verdict != FR_V_NONE) break; /* the master's word: restart, stop or end */
        }
        if (!over && phase == PH_TERM && now >= deadline) {
            for (int i = 0; i < J.n; i++)
                if (J.p[i].pid && !J.p[i].reaped)
                    cli_say("%s %d (pid %d) did not exit within --grace_s=%g s after SIGTERM; sending SIGKILL",
                            role_name[J.p[i].role], J.p[i].rank, (int)J.p[i].pid, J.grace);
            fr_signal_job(SIGKILL, 0);
            phase = PH_KILL, deadline = now + KILL_WAIT_S;
        }
        if (!over && phase == PH_KILL && now >= deadline) {
            cli_say("error: processes survived SIGKILL for %g s (stuck in the kernel?); giving up", KILL_WAIT_S);
            o->stuck = 1;
            break;
        }
        struct pollfd pf[3] = {{J.sfd, POLLIN, 0}, {J.tee_rd, POLLIN, 0}, {J.rdzv ? fr_rdzv_fd() : -1, POLLIN, 0}};
        double left_ms = fmax(0, fmin(1e8, ceil((deadline - now) * 1000)));
        int timeout = over || phase == PH_RUN ? -1 : phase == PH_SERVER_WAIT ? (int)left_ms : (int)fmin(50, left_ms);
        if (J.rdzv && (timeout < 0 || timeout > 1000)) timeout = 1000; /* heartbeats */
        if (poll(pf, 3, timeout) < 0 && errno != EINTR) fatal("poll: %s", strerror(errno));
        if (pf[1].revents && J.tee_rd >= 0) fr_pump_tee();
        if (J.rdzv) {
            int had = o->verdict;
            fr_rdzv_poll(o, pf[2].revents != 0);
            if (o->verdict != had && phase < PH_TERM && o->verdict != FR_V_END && !o->cause && !o->sig)
                cli_say("%s; stopping the processes here", o->what);
        }
        for (int s; (s = fr_take_signal());) on_signal(o, s, &phase, &deadline, over);
    }
    fr_pump_tee();
}
