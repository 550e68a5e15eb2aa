/*
 * fleetrun - starts the processes of a distributed Fleet job on this machine, as Paddle
 * 2.x's `fleetrun` (python -m paddle.distributed.launch) and 1.8's `launch_ps` do, and
 * watches them: the first failure stops the whole job and is reported with its log.
 *
 *   fleetrun [--nproc_per_node N | --gpus LIST] [--ips IP,...] [--log_dir DIR] PROG ARGS...
 *   fleetrun --server_num S --worker_num W [--log_dir DIR] PROG ARGS...
 *
 * Exit status: 0 every process succeeded; 1 the first failure was an exit code != 0, or the
 * job could not be started; 128+N the first failure was a death by signal N, or fleetrun
 * itself received signal N; 2 usage error.  See docs/fleetrun.md.
 *
 * No orphans: each process runs in its own process group with PR_SET_PDEATHSIG(SIGKILL);
 * fleetrun is a child subreaper (orphaned grandchildren come back to it) and keeps a small
 * guard process that SIGKILLs every group of the job if fleetrun itself is SIGKILLed.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fleetrun.h"

fr_job J = {.nproc = -1, .server_num = -1, .worker_num = -1, .start_port = -1, .log_dir = "log",
       .grace = 5, .server_grace = 30, .tee_rd = -1, .guard_fd = -1, .guard_pid = -1};

int main(int argc, char **argv)
{
    J.t0 = fr_now();
    int fd; /* make sure fds 0-2 exist, so no pipe or socket of ours becomes "stdout" */
    while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= 2) {
    }
    if (fd > 2) close(fd);
    fr_parse_args(argc, argv);
    if (J.run_mode && strcmp(J.run_mode, "collective") && strcmp(J.run_mode, "ps"))
        usage_error("--run_mode expects collective or ps, got '%s'", J.run_mode);
    int ps_flags = J.server_num > 0 || J.worker_num > 0 || J.servers || J.workers;
    if (J.run_mode && !strcmp(J.run_mode, "collective") && ps_flags)
        usage_error("--run_mode collective conflicts with --server_num/--worker_num/--servers/--workers");
    J.ps = ps_flags || (J.run_mode && !strcmp(J.run_mode, "ps"));
    if (J.ps) fr_build_ps();
    else fr_build_collective();
    fr_resolve_program();
    fr_setup_secret();
    fr_mkdirs(J.log_dir);

    /* Signals arrive through a signalfd; the children reset mask and handlers before exec. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD), sigaddset(&set, SIGINT), sigaddset(&set, SIGTERM), sigaddset(&set, SIGHUP);
    signal(SIGCHLD, SIG_DFL), signal(SIGPIPE, SIG_IGN);
    sigprocmask(SIG_BLOCK, &set, NULL);
    if ((J.sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) fatal("signalfd: %s", strerror(errno));
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    fr_guard_start();
    fr_claim_ports();
    J.worker_list = fr_join_eps(WORKER, ",");
    J.server_list = fr_join_eps(SERVER, ",");
    for (int i = 0; i < J.n && !J.tee; i++)
        if (J.p[i].is_local && J.p[i].role == WORKER) J.tee = &J.p[i];
    fr_print_table();
    fr_write_endpoints_log();
    int started = 0;
    for (int i = 0; i < J.n; i++)
        if (J.p[i].is_local && (fr_spawn(&J.p[i]), started++ < 32))
            cli_say("started %s %d (pid %d) at %s, log %s%s", role_name[J.p[i].role], J.p[i].rank, (int)J.p[i].pid,
                J.p[i].ep, J.p[i].log, &J.p[i] == J.tee ? " (also shown here)" : "");
    explicit_bzero(J.secret_env, strlen(J.secret_env));
    if (started > 32) cli_say("started %d processes in all", started);

    int phase = PH_RUN, exit_sig = 0, servers_stopped = 0, leftovers = 0, stuck = 0, ws;
    double deadline = 0;
    proc_t *cause = NULL;
    for (;;) {
        for (pid_t pid; (pid = waitpid(-1, &ws, WNOHANG)) > 0;) {
            proc_t *p = fr_find(pid);
            J.guard_pid = pid == J.guard_pid ? -1 : J.guard_pid;
            if (!p) continue; /* an adopted grandchild */
            p->reaped = 1, p->status = ws;
            if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) && !p->stopped && !cause && !exit_sig) {
                char d[160];
                fr_describe(p, d, sizeof d);
                cause = p;
                cli_say("%s %d (pid %d) %s; stopping the job", role_name[p->role], p->rank, (int)pid, d);
            }
        }
        double now = fr_now();
        if (phase < PH_TERM && (cause || exit_sig)) {
            int n = fr_signal_job(SIGTERM, 0);
            cli_say("sent SIGTERM to %d process group(s); SIGKILL follows after --grace_s=%g s", n, J.grace);
            phase = PH_TERM, deadline = now + J.grace;
        }
        if (phase == PH_RUN && J.ps && fr_reaped_all(WORKER) && !fr_reaped_all(SERVER)) {
            cli_say("all workers finished; waiting up to --server_grace_s=%g s for the servers to exit", J.server_grace);
            phase = PH_SERVER_WAIT, deadline = now + J.server_grace;
        }
        if (phase == PH_SERVER_WAIT && !fr_reaped_all(SERVER) && now >= deadline) {
            for (int i = 0; i < J.n; i++)
                if (J.p[i].role == SERVER && J.p[i].pid && !J.p[i].reaped)
                    cli_say("warning: server %d (pid %d) did not exit within --server_grace_s=%g s after the workers "
                        "finished; stopping it (SIGTERM, then SIGKILL after --grace_s=%g s)", J.p[i].rank,
                        (int)J.p[i].pid, J.server_grace, J.grace);
            fr_signal_job(SIGTERM, 1);
            servers_stopped = 1, phase = PH_TERM, deadline = now + J.grace;
        }
        if (phase <= PH_SERVER_WAIT && fr_reaped_all(-1)) {
            if (!fr_signal_job(0, 0)) break;
            cli_say("stopping processes left behind by the job's processes (SIGTERM, SIGKILL after --grace_s=%g s)",
                J.grace);
            fr_signal_job(SIGTERM, 0);
            leftovers = 1, phase = PH_TERM, deadline = now + J.grace;
        }
        if (phase >= PH_TERM && fr_reaped_all(-1) && !fr_signal_job(0, 0)) break;
        if (phase == PH_TERM && now >= deadline) {
            for (int i = 0; i < J.n; i++)
                if (J.p[i].pid && !J.p[i].reaped)
                    cli_say("%s %d (pid %d) did not exit within --grace_s=%g s after SIGTERM; sending SIGKILL",
                        role_name[J.p[i].role], J.p[i].rank, (int)J.p[i].pid, J.grace);
            fr_signal_job(SIGKILL, 0);
            phase = PH_KILL, deadline = now + KILL_WAIT_S;
        }
        if (phase == PH_KILL && now >= deadline) {
            cli_say("error: processes survived SIGKILL for %g s (stuck in the kernel?); giving up", KILL_WAIT_S);
            stuck = 1;
            break;
        }
        struct pollfd pf[2] = {{J.sfd, POLLIN, 0}, {J.tee_rd, POLLIN, 0}};
        double left_ms = fmax(0, fmin(1e8, ceil((deadline - now) * 1000)));
        int timeout = phase == PH_RUN ? -1 : phase == PH_SERVER_WAIT ? (int)left_ms : (int)fmin(50, left_ms);
        if (poll(pf, J.tee_rd >= 0 ? 2 : 1, timeout) < 0 && errno != EINTR) fatal("poll: %s", strerror(errno));
        if (pf[1].revents && J.tee_rd >= 0) fr_pump_tee();
        struct signalfd_siginfo si;
        while (read(J.sfd, &si, sizeof si) == (ssize_t)sizeof si) {
            int s = (int)si.ssi_signo;
            if (s == SIGCHLD) continue;
            if (phase < PH_TERM && !exit_sig && !cause) {
                exit_sig = s;
                cli_say("received SIG%s; stopping the job", sigabbrev_np(s));
            } else if (phase < PH_KILL) { /* a second signal: no more grace */
                exit_sig = exit_sig || cause ? exit_sig : s;
                cli_say("received SIG%s again; sending SIGKILL now", sigabbrev_np(s));
                fr_signal_job(SIGKILL, 0);
                phase = PH_KILL, deadline = fr_now() + KILL_WAIT_S;
            }
        }
    }
    fr_pump_tee();
    fr_guard_send(0);
    if (J.guard_pid > 0) waitpid(J.guard_pid, NULL, 0);
    double el = fr_now() - J.t0;
    if (cause || exit_sig) {
        fr_report_failure(cause, exit_sig);
        int code = exit_sig ? 128 + exit_sig : WIFSIGNALED(cause->status) ? 128 + WTERMSIG(cause->status) : 1;
        cli_say("job failed after %.1f s; exit status %d", el, code);
        return code;
    }
    if (leftovers) cli_say("note: stopped processes that the job's processes had left running");
    if (servers_stopped) cli_say("job finished: the workers succeeded; the servers were stopped (%.1f s)", el);
    else cli_say("job finished: all %d processes on this node succeeded (%.1f s)", started, el);
    return stuck;
}
