/*
 * fleetrun.h - the internal header of the fleetrun launcher (the .c files of tools/fleetrun/):
 * the job, its processes, and what each file provides.
 *
 *   main.c        the order of things: flags, secret, signals, guard, then one generation
 *                 after another (start, watch, restart or stop), the exit status
 *   args.c        the command line: flags, their checks, small parsing helpers
 *   layout.c      which processes the job has, their ranks and endpoints; ports; the table
 *   setup.c       the job secret and id, the program's path, log files, small utilities
 *   spawn.c       the guard process, each process's environment, fork/exec, signalling groups
 *   watch.c       watching one generation: reaping, failures, teardown, the master's word
 *   report.c      how a process ended, and the root-cause block
 *   wire.c        the rendezvous messages (framed JSON over fleet/net.h connections)
 *   master.c      the rendezvous master, a child process of the node that owns --master
 *   rendezvous.c  a node's side of the rendezvous: identity, joining, reporting to the master
 *
 * fleetrun runs one job per process, so the job is one struct, J, shared by these files (a
 * program's state, not a library's: nothing here is linked into libfleet).
 */
#ifndef FLEETRUN_H
#define FLEETRUN_H

#include <arpa/inet.h>
#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base_internal.h"
#include "fleet/net.h"

#define CLI_NAME "fleetrun"
#define CLI_HELP_HINT "(run 'fleetrun --help' for the flags)"
#include "cli.h"

#ifndef FLEET_VERSION
#error "build fleetrun with -DFLEET_VERSION='\"x.y.z\"' (the Makefile's VERSION)"
#endif

#define MAX_LOCAL 1024   /* processes of one role on one node; devices in a list */
#define MAX_TOTAL 16384  /* ranks in the whole job */
#define MAX_NODES 1024   /* nodes of a job with --master */
#define TAIL_LINES 20    /* log lines shown for the root cause */
#define ERR_LINES 10     /* error records shown above them (the first ones) */
#define KILL_WAIT_S 10.0 /* after SIGKILL, how long to wait for the kernel to reap */
#define FR_ID_MAX 128    /* a node's id: "hostname:pid" */
#define FR_JOB_ID_MAX 65 /* --job_id: at most 64 characters */

/* log lines shown (under its error records) for another process that failed on its own */
#define OWN_FAILURE_LINES 3

enum { WORKER, SERVER };
static const char *const role_name[] = {"worker", "server"};
enum { PH_RUN, PH_SERVER_WAIT, PH_TERM, PH_KILL }; /* the phases of watching a generation */

typedef struct {
    int role, rank, local; /* rank: global (server index in PS); local: index among this node's */
    int node;              /* the node's rank (0 without --master) */
    char ip[INET_ADDRSTRLEN];
    int want_port;             /* the configured port; 0: a free port, picked again each run */
    int port, is_local, probe; /* probe: socket holding the port until the fork, or -1 */
    char ep[INET_ADDRSTRLEN + 8];
    char log[PATH_MAX];
    off_t log_start; /* size of the (appended) log before this run */
    pid_t pid;
    int reaped, status, stopped; /* stopped: last signal fleetrun sent it (0: none) */
} proc_t;

/* One node as the rendezvous describes it: its processes by role and their ports. */
typedef struct {
    char ip[INET_ADDRSTRLEN], id[FR_ID_MAX];
    int cnt[2];
    int *port[2]; /* cnt[role] ports each, in local order */
} fr_node;

typedef struct {
    /* flags (-1: not given) */
    int nproc, server_num, worker_num, start_port, nnodes, max_restart;
    const char *devices, *dev_flag, *ips, *node_ip, *log_dir, *servers, *workers, *run_mode;
    const char *master, *job_id_flag, *log_level; /* log_level: canonical (FLEET_LOG_LEVEL) or NULL */
    double grace, server_grace, rdzv_timeout;
    char **argv;
    /* the job */
    int ps, multi, n, ndev, nsplit, total[2]; /* multi: several machines; total: ranks by role */
    proc_t *p; /* every rank of the job (servers first in PS mode); only is_local ones start */
    char *server_list, *worker_list, *split_buf[8], *secret_env, prog[PATH_MAX];
    const char *dev[MAX_LOCAL], *secret_how;
    char job_id[FR_JOB_ID_MAX];
    int restart; /* restarts so far: this generation's PADDLE_RESTART_COUNT */
    /* rendezvous (--master with --nnodes > 1) */
    int rdzv, is_host, node_rank, master_port;
    char master_ip[INET_ADDRSTRLEN], my_ip[INET_ADDRSTRLEN], node_id[FR_ID_MAX];
    fl_net_secret secret;
    pid_t master_pid;
    /* processes and descriptors */
    int sfd, tee_rd, tee_log, guard_fd;
    proc_t *tee;
    pid_t guard_pid;
    double t0;
} fr_job;

extern fr_job J;

/* How a generation ended, as far as this node knows. */
enum { FR_V_NONE, FR_V_RESTART, FR_V_STOP, FR_V_END, FR_V_LOST };
typedef struct {
    proc_t *cause;        /* the first failure among this node's processes, or NULL */
    int sig;              /* a signal fleetrun received (0: none) */
    int verdict, code;    /* the master's word (FR_V_*) and, for FR_V_STOP, the job's exit status */
    int all_workers_done; /* PS with --master: every worker of every node succeeded */
    int abandon;          /* stop waiting for the master (a signal came while waiting) */
    int guard_lost;       /* the guard died and no new one could be started */
    int servers_stopped, leftovers, stuck, started;
    char what[768]; /* the master's reason for a restart or a stop, or why it was lost */
} fr_outcome;

/* Exit with code 2 (usage: the flag is named, with the expected form) or 1 (runtime). */
#define usage_error(...) cli_die(2, __VA_ARGS__)
#define fatal(...) cli_die(1, __VA_ARGS__)

/* args.c */
void fr_parse_args(int argc, char **argv);
/* Mode, flag combinations, device ids, --master, --log_level, --job_id (after parsing). */
void fr_check_args(void);
long fr_parse_long(const char *flag, const char *v, long lo, long hi, const char *form);
/* Splits a comma list into trimmed items (copies kept in J.split_buf); returns the count. */
int fr_split(const char *flag, const char *s, const char **out, int max);
void fr_check_ip(const char *flag, const char *ip);
const char *fr_env(const char *name, const char *def);

/* layout.c */
void fr_build_collective(void); /* --ips (or this machine alone) */
void fr_build_ps(void);         /* --server_num/--worker_num or --servers/--workers */
/* With --master: this node's processes only, on ip, before the rendezvous gives ranks. */
void fr_layout_local(const char *ip);
/* With --master: the whole job from the rendezvous; nodes in rank order, `me` is this node.
 * This node's ports (and their probe sockets) come from the local layout. */
void fr_layout_apply(const fr_node *nodes, int nn, int me);
/* Before a restart without --master: every process not started, its port to be picked again. */
void fr_layout_rearm(void);
void fr_claim_ports(void);
char *fr_join_eps(int role, const char *sep);
void fr_write_endpoints_log(void);
void fr_print_table(void);

/* setup.c */
double fr_now(void);
char *fr_fmt(const char *f, ...) FL_PRINTF(1, 2);
void fr_setup_secret(void);
void fr_setup_job_id(void);
void fr_resolve_program(void);
void fr_mkdirs(const char *dir);
int fr_open_log(const char *path, int trunc);
int fr_write_all(int fd, const void *buf, size_t n);
/* The next signal waiting in J.sfd other than SIGCHLD, or 0. */
int fr_take_signal(void);

/* spawn.c */
void fr_guard_start(void);
/* pid > 0: watch this process group; -1: forget them all (a generation ended); 0: goodbye. */
void fr_guard_send(int32_t v);
/* After the guard died with wait status ws (reaped): says so, starts a new guard and tells
 * it every live process group of the generation.  0, or -1 when none could be started. */
int fr_guard_restart(int ws);
void fr_spawn(proc_t *p);
proc_t *fr_find(pid_t pid);
/* Sends sig (0: only count) to the process group of every local process that still has
 * members (only servers if servers_only) and to adopted strays; returns how many are alive. */
int fr_signal_job(int sig, int servers_only);
int fr_reaped_all(int role);
/* The processes of role (WORKER or SERVER) this node runs. */
int fr_local_count(int role);
void fr_pump_tee(void);

/* watch.c: runs one started generation until it is over on this node. */
void fr_watch(fr_outcome *o);

/* report.c */
void fr_describe(const proc_t *p, char *b, size_t n);
/* "worker 3 (pid 4711) on 10.0.0.2 exited with code 1, log log/workerlog.3" */
void fr_what(const proc_t *p, char *b, size_t n);
/* The root-cause block: a local process c, a signal to fleetrun, or (c NULL, sig 0) the
 * master's reason `remote`.  title heads the block. */
void fr_report_failure(const proc_t *c, int sig, const char *remote, const char *title);

/* rendezvous.c (only with J.rdzv) */
void fr_rdzv_start(void);
/* Claims this node's ports, joins generation J.restart and applies the layout: 0.  Or the job
 * ends before it starts (the master stopped it, it was lost, a signal came): 1, o says why. */
int fr_rdzv_join(fr_outcome *o);
int fr_rdzv_fd(void); /* the master connection's socket, -1 once closed */
/* Heartbeats, silence, and one message when `readable`: the master's word goes into o. */
void fr_rdzv_poll(fr_outcome *o, int readable);
void fr_rdzv_failed(const char *what, int code, int fatal);
void fr_rdzv_status(int workers_done, int done);
/* Closes the connection; on the host, waits for the master process to exit. */
void fr_rdzv_finish(void);

/* wire.c: the rendezvous messages.  Each is one frame (fleet/net.h) whose type is FR_MSG_*
 * and whose body is a JSON object (docs/fleetrun.md lists the fields); every connection
 * starts with the net layer's HMAC handshake on the job secret, service FR_NET_SERVICE. */
#define FR_NET_SERVICE FL_NET_SERVICE_LAUNCH
#define FR_MSG_MAX (4u << 20) /* body limit, checked before anything is allocated */
#define FR_HEARTBEAT_S 1.0    /* each side sends a heartbeat when it has been quiet this long */
#define FR_SILENT_S 10.0      /* a peer that sent nothing for this long is lost */
#define FR_IO_MS 2000         /* deadline of one message (they are small) and of a handshake */
enum {
    FR_MSG_JOIN = 1,     /* node -> master: who it is, its mode and counts, its ports */
    FR_MSG_LAYOUT,       /* master -> nodes: every node in rank order, with its ports */
    FR_MSG_HEARTBEAT,    /* both ways, empty */
    FR_MSG_FAILED,       /* node -> master: a process failed (or fleetrun got a signal) */
    FR_MSG_STATUS,       /* node -> master: its workers are done / all its processes are */
    FR_MSG_RESTART,      /* master -> nodes: tear down, join the next generation */
    FR_MSG_STOP,         /* master -> nodes: tear down and exit with the job's status */
    FR_MSG_WORKERS_DONE, /* master -> nodes: every worker succeeded (PS: server grace starts) */
    FR_MSG_END,          /* master -> nodes: every process succeeded, exit 0 */
    FR_MSG_ERROR,        /* master -> nodes: the rendezvous failed (mismatch, timeout) */
    FR_MSG_COUNT
};
enum { FR_ROLE_MASTER = 1, FR_ROLE_NODE = 2 }; /* handshake role tags */
void fr_auth(fl_net_auth *a, uint32_t role);
const char *fr_msg_name(int type);
/* Sends one message; body may be NULL (empty).  Deadline FR_IO_MS. */
int fr_msg_send(fl_net_conn *c, int type, const fl_buf *body);
/* Receives one message (call when the socket is readable); j->root is NULL for an empty body.
 * Free j with fl__json_free. */
int fr_msg_recv(fl_net_conn *c, int *type, fl_json *j);
/* Field readers for a message's JSON; errors name the field (FL_EPROTO). */
int fr_get_int(const fl_json *j, const struct cJSON *obj, const char *key, int64_t lo, int64_t hi, int *out);
int fr_get_str(const fl_json *j, const struct cJSON *obj, const char *key, size_t max, const char **out);
int fr_get_bool(const fl_json *j, const struct cJSON *obj, const char *key, int *out);
/* A node's fields ("ip", "id", "s", "w": port lists); n->port[] is malloc'ed. */
int fr_get_node(const fl_json *j, const struct cJSON *obj, fr_node *n);
void fr_put_node(fl_buf *b, const fr_node *n);
void fr_node_free(fr_node *n);
/* Orders nodes for ranks: by IPv4 address (numerically), then by id. */
int fr_node_cmp(const fr_node *a, const fr_node *b);

/* master.c: runs the master in this (forked) process; never returns. */
_Noreturn void fr_master_main(fl_net_listener *l);

#endif
