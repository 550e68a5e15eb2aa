/*
 * fleetrun.h - the internal header of the fleetrun launcher (the .c files of tools/fleetrun/): the job,
 * its processes, and what each file provides.
 *
 *   main.c     the order of things: flags, secret, signals, guard, start, watch, exit status
 *   args.c     the command line (flags and their checks) and small parsing helpers
 *   layout.c   which processes the job has, their ranks and endpoints; ports; the table
 *   setup.c    the job secret, the program's path, log files, small utilities
 *   spawn.c    the guard process, each process's environment, fork/exec, signalling groups
 *   report.c   how a process ended, and the root-cause block
 *
 * fleetrun starts one job per run, so the job is one struct, J, shared by these files (a
 * program's state, not a library's: nothing here is linked into libfleet).
 */
#ifndef FLEETRUN_H
#define FLEETRUN_H

#include <arpa/inet.h>
#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base_internal.h"

#define CLI_NAME "fleetrun"
#define CLI_HELP_HINT "(run 'fleetrun --help' for the flags)"
#include "cli.h"

#define MAX_LOCAL 1024   /* processes of one role on one node; devices in a list */
#define MAX_TOTAL 16384  /* ranks in the whole job */
#define TAIL_LINES 20    /* log lines shown for the root cause */
#define KILL_WAIT_S 10.0 /* after SIGKILL, how long to wait for the kernel to reap */

enum { WORKER, SERVER };
enum { PH_RUN, PH_SERVER_WAIT, PH_TERM, PH_KILL }; /* the phases of watching a job */
static const char *const role_name[] = {"worker", "server"};

typedef struct {
    int role, rank, local;       /* local: position among this node's processes */
    char ip[INET_ADDRSTRLEN];
    int port, is_local, probe;   /* probe: socket holding the port until the fork, or -1 */
    char ep[INET_ADDRSTRLEN + 8];
    char log[PATH_MAX];
    off_t log_start;             /* size of the (appended) log before this run */
    pid_t pid;
    int reaped, status, stopped; /* stopped: last signal fleetrun sent it (0: none) */
} proc_t;

typedef struct {
    int nproc, server_num, worker_num, start_port; /* -1: not given */
    const char *devices, *dev_flag, *ips, *node_ip, *log_dir, *servers, *workers, *run_mode;
    double grace, server_grace;
    char **argv;
    int ps, multi, n, ndev, nsplit;
    proc_t *p; /* every rank of the job (servers first in PS mode); only is_local ones start */
    char *server_list, *worker_list, *split_buf[8], *secret_env, prog[PATH_MAX];
    const char *dev[MAX_LOCAL], *secret_how;
    int sfd, tee_rd, tee_log, guard_fd;
    proc_t *tee;
    pid_t guard_pid;
    double t0;
} fr_job;

extern fr_job J;

/* Exit with code 2 (usage: the flag is named, with the expected form) or 1 (runtime). */
#define usage_error(...) cli_die(2, __VA_ARGS__)
#define fatal(...) cli_die(1, __VA_ARGS__)

/* args.c */
void fr_parse_args(int argc, char **argv);
long fr_parse_long(const char *flag, const char *v, long lo, long hi, const char *form);
/* Splits a comma list into trimmed items (copies kept in J.split_buf); returns the count. */
int fr_split(const char *flag, const char *s, const char **out, int max);
void fr_check_ip(const char *flag, const char *ip);
const char *fr_env(const char *name, const char *def);

/* layout.c */
void fr_build_collective(void);
void fr_build_ps(void);
void fr_claim_ports(void);
char *fr_join_eps(int role, const char *sep);
void fr_write_endpoints_log(void);
void fr_print_table(void);

/* setup.c */
double fr_now(void);
char *fr_fmt(const char *f, ...) FL_PRINTF(1, 2);
void fr_setup_secret(void);
void fr_resolve_program(void);
void fr_mkdirs(const char *dir);
int fr_open_log(const char *path, int trunc);
int fr_write_all(int fd, const void *buf, size_t n);

/* spawn.c */
void fr_guard_start(void);
void fr_guard_send(int32_t v);
void fr_spawn(proc_t *p);
proc_t *fr_find(pid_t pid);
/* Sends sig (0: only count) to the process group of every local process that still has
 * members (only servers if servers_only) and to adopted strays; returns how many are alive. */
int fr_signal_job(int sig, int servers_only);
int fr_reaped_all(int role);
void fr_pump_tee(void);

/* report.c */
void fr_describe(const proc_t *p, char *b, size_t n);
void fr_report_failure(const proc_t *c, int sig);

#endif
