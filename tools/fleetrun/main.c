/*
 * fleetrun - starts the processes of a distributed Fleet job on this machine, as Paddle
 * 2.x's `fleetrun` (python -m paddle.distributed.launch) and 1.8's `launch_ps` do, and
 * watches them: the first failure stops the whole job and is reported with its log.
 *
 *   fleetrun [--nproc_per_node N | --gpus LIST] [--ips IP,...] [--log_dir DIR] PROG ARGS...
 *   fleetrun --server_num S --worker_num W [--log_dir DIR] PROG ARGS...
 *   fleetrun --master IP:PORT --nnodes N [--max_restart K] ... PROG ARGS...   (on each node)
 *
 * With --max_restart K a failure stops the whole job and starts it again, K times at most;
 * with --master the nodes meet at a rendezvous hosted by the node that owns IP, which also
 * coordinates restarts and stops (rendezvous.c, master.c).
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fleetrun.h"

fr_job J = {.nproc = -1,
            .server_num = -1,
            .worker_num = -1,
            .start_port = -1,
            .nnodes = -1,
            .log_dir = "log",
            .grace = 5,
            .server_grace = 30,
            .rdzv_timeout = 300,
            .tee_rd = -1,
            .tee_log = -1,
            .guard_fd = -1,
            .guard_pid = -1,
            .master_pid = -1};

/* Starts this node's processes of the generation J.restart (ports claimed, layout known). */
static int start_generation(void)
{
    free(J.worker_list), free(J.server_list);
    J.worker_list = fr_join_eps(WORKER, ",");
    J.server_list = fr_join_eps(SERVER, ",");
    J.tee = NULL;
    if (J.tee_rd >= 0) close(J.tee_rd), J.tee_rd = -1; /* the previous run's, if a grandchild kept it open */
    if (J.tee_log >= 0) close(J.tee_log), J.tee_log = -1;
    for (int i = 0; i < J.n && !J.tee; i++)
        if (J.p[i].is_local && J.p[i].role == WORKER) J.tee = &J.p[i];
    if (!J.restart) fr_print_table();
    else
        cli_say("restart %d of %d: PADDLE_TRAINER_ENDPOINTS=%s%s%s", J.restart, J.max_restart, J.worker_list,
                J.ps ? " PADDLE_PSERVERS_IP_PORT_LIST=" : "", J.ps ? J.server_list : "");
    fr_write_endpoints_log();
    int started = 0;
    for (int i = 0; i < J.n; i++)
        if (J.p[i].is_local && (fr_spawn(&J.p[i]), started++ < 32))
            cli_say("started %s %d (pid %d) at %s, log %s%s", role_name[J.p[i].role], J.p[i].rank, (int)J.p[i].pid,
                    J.p[i].ep, J.p[i].log, &J.p[i] == J.tee ? " (also shown here)" : "");
    if (!J.max_restart) explicit_bzero(J.secret_env, strlen(J.secret_env)); /* no second start needs it */
    if (started > 32) cli_say("started %d processes in all", started);
    return started;
}

/* Whether the generation that just ended is followed by another; says why. */
static int restart_next(const fr_outcome *o)
{
    char title[96];
    int again = J.rdzv ? o->verdict == FR_V_RESTART : o->cause && !o->sig && !o->stuck && J.restart < J.max_restart;
    if (!again) return 0;
    snprintf(title, sizeof title, "failure: the job restarts (restart %d of %d)", J.restart + 1, J.max_restart);
    if (o->cause) fr_report_failure(o->cause, 0, J.rdzv ? o->what : NULL, title);
    cli_say("restarting the job: restart %d of %d (PADDLE_RESTART_COUNT=%d)%s", J.restart + 1, J.max_restart, J.restart + 1,
            J.rdzv ? " on every node" : "");
    return 1;
}

/* The final report and exit status of the job. */
static int finish(const fr_outcome *o, int started)
{
    double el = fr_now() - J.t0;
    int code = 0;
    const char *title = J.restart ? "root cause (first failure observed, after the last restart)"
                                  : "root cause (first failure observed)";
    if (o->sig) {
        code = 128 + o->sig;
        fr_report_failure(NULL, o->sig, NULL, title);
    } else if (o->cause) {
        code = WIFSIGNALED(o->cause->status) ? 128 + WTERMSIG(o->cause->status) : 1;
        if (o->verdict == FR_V_STOP) code = o->code;
        fr_report_failure(o->cause, 0, o->verdict == FR_V_STOP ? o->what : NULL, title);
    } else if (o->verdict == FR_V_STOP) {
        code = o->code ? o->code : 1;
        fr_report_failure(NULL, 0, o->what, title);
    } else if (o->verdict == FR_V_LOST) {
        code = 1;
        cli_say("error: %s; stopped this node's processes", o->what);
    } else if (o->guard_lost || o->stuck) {
        code = 1;
    }
    if (code) {
        if (J.restart) cli_say("job failed after %.1f s and %d restart(s); exit status %d", el, J.restart, code);
        else cli_say("job failed after %.1f s; exit status %d", el, code);
        return code;
    }
    if (o->leftovers) cli_say("note: stopped processes that the job's processes had left running");
    if (o->servers_stopped) cli_say("job finished: the workers succeeded; the servers were stopped (%.1f s)", el);
    else
        cli_say("job finished: all %d processes on this node succeeded%s (%.1f s)", started,
                J.rdzv ? ", and so did every other node" : "", el);
    return 0;
}

int main(int argc, char **argv)
{
    J.t0 = fr_now();
    int fd; /* make sure fds 0-2 exist, so no pipe or socket of ours becomes "stdout" */
    while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= 2) {
    }
    if (fd > 2) close(fd);
    fr_parse_args(argc, argv);
    fr_check_args();
    if (!J.rdzv) {
        if (J.ps) fr_build_ps();
        else fr_build_collective();
        if (J.multi && J.max_restart)
            usage_error("--max_restart with several machines needs --master IP:PORT --nnodes N: the restart of "
                        "every machine is coordinated through the master");
    }
    J.multi |= J.rdzv;
    fr_resolve_program();
    fr_setup_secret();
    fr_setup_job_id();
    fr_mkdirs(J.log_dir);

    /* Signals arrive through a signalfd; the children reset mask and handlers before exec. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD), sigaddset(&set, SIGINT), sigaddset(&set, SIGTERM), sigaddset(&set, SIGHUP);
    signal(SIGCHLD, SIG_DFL), signal(SIGPIPE, SIG_IGN);
    sigprocmask(SIG_BLOCK, &set, NULL);
    if ((J.sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) fatal("signalfd: %s", strerror(errno));
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (J.rdzv) fr_rdzv_start(); /* before the guard: the master process is no part of the job */
    fr_guard_start();

    fr_outcome o;
    int started = 0;
    for (;; J.restart++) {
        memset(&o, 0, sizeof o);
        if (J.rdzv) {
            if (fr_rdzv_join(&o)) break; /* the job ended before this generation started */
        } else {
            if (J.restart) fr_layout_rearm();
            fr_claim_ports();
        }
        started = start_generation();
        fr_watch(&o);
        fr_guard_send(-1); /* every process of this generation is gone */
        if (!restart_next(&o)) break;
    }
    fr_guard_send(0);
    if (J.guard_pid > 0) waitpid(J.guard_pid, NULL, 0);
    if (J.rdzv) fr_rdzv_finish();
    explicit_bzero(J.secret_env, strlen(J.secret_env));
    return finish(&o, started);
}
