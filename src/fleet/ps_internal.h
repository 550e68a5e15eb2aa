/*
 * ps_internal.h - parameter-server mode inside the fleet facade (src/fleet/ps_*.c).
 *
 *   ps_mode.c          the PS context of a fleet handle, the table list derived from the
 *                      program, and the program rewrite run by the optimizer hook
 *   ps_ops.c           the ops the rewrite inserts: distributed_lookup_table (+ _grad),
 *                      ps_send, ps_recv, ps_geo, and ps_init (startup program)
 *   ps_export.c        the inference model: distributed lookups become local tables
 *   ps_communicator.c  async mode: per-variable send queues, a send thread that merges
 *                      and pushes, a receive thread that pulls dense parameters
 *   lifecycle.c        fleet_init_server / run_server / init_worker / stop_worker / save
 *
 * Ops find their context through the attribute ps_id (a registry, as the collective ops
 * find their communicator through ring_id): a program never points at a fleet handle.
 * Not the parameter server itself: tables, RPC and checkpoints are src/ps (fleet/ps.h).
 */
#ifndef FL_FLEET_PS_INTERNAL_H
#define FL_FLEET_PS_INTERNAL_H

#include <pthread.h>

#include "fleet/ps.h"
#include "fleet_internal.h"

/* Paddle 2.x mode selection (parameter_server_optimizer.py): a_sync=false -> SYNC;
 * a_sync=true and k_steps <= 0 -> ASYNC (k_steps = -1 is the untouched default); a_sync=true
 * and k_steps > 0 -> GEO(k_steps). */
typedef enum { FL__PSM_SYNC = 0, FL__PSM_ASYNC = 1, FL__PSM_GEO = 2 } fl__psm;

const char *fl__psm_name(fl__psm m);

/* One parameter held by the servers: table index, and dense element count. */
typedef struct {
    char *name;   /* parameter name = table name */
    int table;
    int sparse;   /* 1: sparse table looked up remotely (never materialized on a worker) */
    int64_t numel;/* dense: rows * cols */
} fl__ps_param;

typedef struct fl__ps_comm fl__ps_comm;

typedef struct fl__ps_ctx {
    int id;                   /* registry id (attribute ps_id of the ops) */
    fl__psm mode;
    int64_t k_steps;          /* GEO */
    fleet_strategy strategy;
    int is_server;
    int worker_index, worker_num, server_index, nservers;
    char **servers;           /* server endpoints (copies) */
    fl_prog *prog;            /* the program minimize rewrote (borrowed; NULL before) */
    fl_ps_table_config *tables; /* owned, names owned */
    int ntables;
    int status_table;         /* index of the 1x1 "@fleet_status@" table (save results) */
    fl__ps_param *params;
    int nparams;
    fl_ps_server *server;
    fl_ps_client *client;     /* the trainer thread's client */
    fl__ps_comm *comm;        /* async mode */
    pthread_mutex_t mu;       /* guards the fields below */
    /* init exchange: done by whichever of fleet_init_worker and the startup program's
     * ps_init op comes last (the tensors are the startup run's parameters) */
    fl_tensor **pending;
    int *pending_table;
    int npending, has_pending, inited;
    float **geo_old;          /* GEO: per table, the values at the last exchange */
    int64_t geo_step;
    int64_t step;             /* training steps pushed by this worker */
    int stopped;
} fl__ps_ctx;

/* ---- ps_export.c ----------------------------------------------------------------------- */

/* fleet_save_inference_model of a worker: the program with its distributed lookups turned
 * into local lookup_table ops on tables filled from the servers, saved with
 * fl_io_save_inference_model (dense parameters are taken from exe's scope as they are). */
int fl__ps_export_inference(fl__ps_ctx *c, fl_ps_client *cl, fl_exe *exe, const char *dir, const char *const *feeds,
                            int nfeed, fl_var *const *targets, int ntarget, const fl_prog *prog);

/* ---- ps_mode.c ------------------------------------------------------------------------- */

/* The context registered under id, or NULL (error set naming op). */
fl__ps_ctx *fl__ps_lookup(int64_t id, const char *op);
/* The job secret from the environment; FL_EINVAL naming the variables when unset. */
int fl__ps_secret(fl_net_secret *out, const char *fn);
/* The client of a connected worker, or FL_ESTATE naming op. */
int fl__ps_need_client(fl__ps_ctx *c, const char *op, fl_ps_client **out);
/* Table list of the program minimize rewrote (for tests and tools): *tables points into
 * the context.  FL_ESTATE before minimize. */
int fl__ps_fleet_tables(const fleet_t *f, const fl_ps_table_config **tables, int *n);
/* The worker's client (NULL before fleet_init_worker); tests use it to inspect tables. */
fl_ps_client *fl__ps_fleet_client(const fleet_t *f);

/* ---- ps_ops.c --------------------------------------------------------------------------- */

extern const fl_op_def *const fl__ops_ps[];
/* Worker 0 offers its initial dense values (servers that loaded a checkpoint keep theirs),
 * barrier, every worker pulls them into ts[i] (table tables[i]).  GEO snapshots them. */
int fl__ps_init_exchange(fl__ps_ctx *c, fl_tensor *const *ts, const int *tables, int n);

/* ---- ps_communicator.c --------------------------------------------------------------------- */

/* One queue per variable: table, sparse or dense, and the dense element count. */
typedef struct {
    int table;
    int sparse;
    int64_t numel;
    int dim;
} fl__ps_comm_var;

typedef struct {
    const fl_ps_client_opts *client; /* copied into the communicator's own two clients */
    const fl__ps_comm_var *vars;
    int nvars;
    int queue_size;                  /* send_queue_size (>= 1) */
    int max_merge;                   /* max_merge_var_num (>= 1) */
    int min_send_before_recv;        /* min_send_grad_num_before_recv (>= 1) */
} fl__ps_comm_opts;

/* Connects two clients (send, receive) and starts the send and receive threads. */
int fl__ps_comm_create(const fl__ps_comm_opts *o, fl__ps_comm **out);
/* Copies a gradient (dense, or SelectedRows for sparse tables) into var's queue; blocks
 * while the queue is full.  Fails with the send thread's error once it has one. */
int fl__ps_comm_send(fl__ps_comm *c, int var, const fl_tensor *grad);
/* Copies the newest dense values the receive thread pulled for var into param, if there
 * are newer ones than the last copy.  *copied (may be NULL) tells. */
int fl__ps_comm_recv(fl__ps_comm *c, int var, fl_tensor *param, int *copied);
/* Waits until every queued gradient has been pushed; the first background error. */
int fl__ps_comm_flush(fl__ps_comm *c);
/* Pushes merged by the send thread so far (for tests and logs). */
int64_t fl__ps_comm_pushes(fl__ps_comm *c);
/* Stops the threads (queued gradients not yet pushed are dropped: flush first), frees the
 * clients without stop (the trainer's client stops the worker). */
void fl__ps_comm_free(fl__ps_comm *c);

#endif
