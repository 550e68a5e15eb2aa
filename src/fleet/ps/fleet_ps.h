/*
 * fleet_ps.h - the parameter-server runtime of the fleet facade (src/fleet/ps/).
 *
 *   runtime.c       the runtime row: the PS context of a fleet handle, init_server /
 *                   run_server / init_worker / stop_worker / barrier / save
 *   modes.c         the mode table: sync, half-async, async, GEO (one row each)
 *   rewrite.c       the table list derived from the program, and the program rewrite run
 *                   by the optimizer hook
 *   ops.c           the ops the rewrite inserts: distributed_lookup_table (+ _grad),
 *                   ps_send, ps_recv, ps_geo, and ps_init (startup program)
 *   export.c        the inference model: distributed lookups become local tables
 *   communicator.c  async and half-async mode: per-variable send queues, send threads
 *                   that merge and push, a receive thread that pulls dense parameters
 *
 * Ops find their context through the attribute ps_id (a registry, as the collective ops
 * find their communicator through ring_id): a program never points at a fleet handle.
 * Not the parameter server itself: tables, RPC and checkpoints are src/ps (fleet/ps.h).
 */
#ifndef FL_FLEET_PS_H
#define FL_FLEET_PS_H

#include <pthread.h>

#include "fleet/ps.h"
#include "../runtime.h"

typedef struct fl__ps_mode fl__ps_mode;

/* One parameter held by the servers: table index, and dense element count. */
typedef struct {
    char *name; /* parameter name = table name */
    int table;
    int sparse;    /* 1: sparse table looked up remotely (never materialized on a worker) */
    int64_t numel; /* dense: rows * cols */
} fl__ps_param;

typedef struct fl__ps_comm fl__ps_comm;

typedef struct fl__ps_ctx {
    int id;                  /* registry id (attribute ps_id of the ops) */
    const fl__ps_mode *mode; /* the row of modes.c the strategy selected */
    int64_t k_steps;         /* GEO */
    fleet_strategy strategy;
    int is_server;
    int worker_index, worker_num, server_index, nservers;
    char **servers;             /* server endpoints (copies) */
    fl_prog *prog;              /* the program minimize rewrote (borrowed; NULL before) */
    fl_var *lr_sched;           /* a learning-rate schedule's variable (server-optimizing modes,
                                 * sgd): the workers push lr * gradient, the servers apply rate 1 */
    fl_ps_table_config *tables; /* owned, names owned */
    int ntables;
    int status_table; /* index of the 1x1 "@fleet_status@" table (save results) */
    fl__ps_param *params;
    int nparams;
    fl_ps_server *server;
    fl_ps_client *client;  /* the trainer thread's client */
    fl__ps_comm *comm;     /* async and half-async mode */
    fl_ps_traffic traffic; /* of the clients freed so far (the communicator's, at stop) */
    int64_t examples;      /* examples trained (ps_send / ps_geo: the batch rows) */
    pthread_mutex_t mu;    /* guards the fields below */
    /* init exchange: done by whichever of fleet_init_worker and the startup program's
     * ps_init op comes last (the tensors are the startup run's parameters) */
    fl_tensor **pending;
    int *pending_table;
    int npending, has_pending, inited;
    float **geo_old; /* GEO: per table, the values at the last exchange */
    int64_t geo_step;
    int64_t step; /* training steps pushed by this worker */
    int stopped;
} fl__ps_ctx;

/* ---- modes.c: the mode table ----------------------------------------------------------
 *
 * A mode is one row: how the strategy selects it (Paddle 2.x: a_sync=false -> sync;
 * a_sync=true and k_steps <= 0 -> async, k_steps = -1 being the untouched default, or
 * half-async with our a_sync_configs.half_async; a_sync=true and k_steps > 0 ->
 * GEO(k_steps)), what the rewrite inserts, what the servers
 * do, and the worker's communicator.  Nothing outside modes.c and runtime.c asks which mode
 * it is: the rewrite reads the flags, the ops and the runtime call the hooks.
 *
 * How to add a mode (half_async is the latest example):
 *   1. write its hooks (a communicator in its own file if it has one; push/pull for ps_send
 *      and ps_recv; start/flush/stop around the worker's connection);
 *   2. add one row to `modes` in modes.c, placed so that its selects() sees the strategies
 *      it owns before a more general row does (its set() makes a strategy it selects), and
 *      document the strategy fields in docs/parameter_server.md; the public table
 *      (fleet_ps_mode_info, fleet_strategy_set_ps_mode in fleet/fleet.h) answers from the
 *      row, so tools and examples (fleet-lightning --mode) take the mode by its name;
 *   3. add a test against local training in tests/test_ps_fleet.c. */
struct fl__ps_mode {
    const char *name;    /* "sync", "half_async", "async", "geo" (logs, messages, --mode) */
    const char *summary; /* one line (fleet_ps_mode_info) */
    /* 1 if the strategy selects this mode (rows are tried in order) */
    int (*selects)(const fleet_strategy *s);
    /* sets the fields of s that select this mode (fleet_strategy_set_ps_mode) */
    void (*set)(fleet_strategy *s);
    /* the rewrite: 1 = the update ops leave the workers, the servers apply the optimizer
     * rule, ps_send pushes gradients and ps_recv pulls dense parameters; 0 = the workers
     * keep their optimizer and ps_geo exchanges parameter deltas every k_steps with
     * "sum" tables */
    int server_optimizes;
    /* 1: sparse tables live on the servers (distributed lookups); 0: every table stays on
     * the workers, synchronised as a dense one */
    int remote_sparse;
    /* 1: ps_send or ps_geo counts one step per worker process (train_from_dataset keeps
     * one trainer thread) */
    int single_trainer;
    /* the servers apply a step once every worker pushed it */
    int server_sync;
    /* 1: dense values may travel as bf16 (a_sync_configs.dense_wire_dtype; the
     * communicator's clients) */
    int dense_wire;
    /* ps_send / ps_recv of one table (server_optimizes modes; NULL otherwise) */
    int (*push)(fl_kctx *k, fl__ps_ctx *c, int table, const fl_tensor *grad, const char *name);
    int (*pull)(fl__ps_ctx *c, int table, fl_tensor *param);
    /* ps_send / ps_recv of every dense table of the step at once, in one request round
     * (NULL: table by table with push / pull) */
    int (*push_dense)(fl__ps_ctx *c, int n, const int *tables, const fl_tensor *const *grads);
    int (*pull_dense)(fl__ps_ctx *c, int n, const int *tables, fl_tensor *const *params);
    /* the worker's connection: after the client connected (o: its options), before a save
     * and at fleet_stop_worker (every queued push reaches the servers), and when it stops
     * (release what start made).  NULL: nothing to do. */
    int (*start)(fl__ps_ctx *c, const fl_ps_client_opts *o);
    int (*flush)(fl__ps_ctx *c);
    void (*stop)(fl__ps_ctx *c);
    /* after the initial exchange pulled the dense tables into ts (GEO snapshots them).
     * NULL: nothing to do. */
    int (*after_init)(fl__ps_ctx *c, fl_tensor *const *ts, const int *tables, int n);
};

/* The row the strategy selects; FL_EINVAL naming the fields for a contradictory strategy
 * (sync with k_steps > 0).  *k_steps: GEO's period (0 for the others). */
int fl__ps_mode_select(const fleet_strategy *s, const fl__ps_mode **out, int64_t *k_steps);

/* ---- ops.c: the push/pull hooks of the modes --------------------------------------------- */

/* Straight to the servers: sparse gradients as (ids, rows), dense ones whole; the sync
 * push returns once every worker pushed and the server applied the step. */
int fl__ps_push_now(fl_kctx *k, fl__ps_ctx *c, int table, const fl_tensor *grad, const char *name);
int fl__ps_pull_now(fl__ps_ctx *c, int table, fl_tensor *param);
/* Through the async communicator: the gradient is queued; the newest dense values the
 * receive thread pulled are copied. */
int fl__ps_push_queued(fl_kctx *k, fl__ps_ctx *c, int table, const fl_tensor *grad, const char *name);
int fl__ps_pull_queued(fl__ps_ctx *c, int table, fl_tensor *param);
/* Half-async: waits until this worker's queued gradients are pushed, then pulls. */
int fl__ps_pull_flushed(fl__ps_ctx *c, int table, fl_tensor *param);
/* Every dense table at once: sync straight to the servers (one request round), half-async
 * through one meeting of the trainer threads. */
int fl__ps_push_now_dense(fl__ps_ctx *c, int n, const int *tables, const fl_tensor *const *grads);
int fl__ps_pull_now_dense(fl__ps_ctx *c, int n, const int *tables, fl_tensor *const *params);
int fl__ps_pull_flushed_dense(fl__ps_ctx *c, int n, const int *tables, fl_tensor *const *params);

/* ---- export.c ----------------------------------------------------------------------- */

/* fleet_save_inference_model of a worker: the program with its distributed lookups turned
 * into local lookup_table ops on tables filled from the servers, saved with
 * fl_io_save_inference_model (dense parameters are taken from exe's scope as they are). */
int fl__ps_export_inference(fl__ps_ctx *c, fl_ps_client *cl, fl_exe *exe, const char *dir, const char *const *feeds,
                            int nfeed, fl_var *const *targets, int ntarget, const fl_prog *prog);

/* ---- runtime.c ------------------------------------------------------------------------- */

/* The context registered under id, or NULL (error set naming op). */
fl__ps_ctx *fl__ps_lookup(int64_t id, const char *op);
/* The client of a connected worker, or FL_ESTATE naming op. */
int fl__ps_need_client(fl__ps_ctx *c, const char *op, fl_ps_client **out);
/* Table list of the program minimize rewrote (for tests and tools): *tables points into
 * the context.  FL_ESTATE before minimize. */
int fl__ps_fleet_tables(const fleet_t *f, const fl_ps_table_config **tables, int *n);
/* fleet_save_persistables (inference 0) or fleet_save_inference_model (1) by this worker
 * alone: no barrier with the other workers (save_one.c). */
int fl__ps_save_alone(fleet_t *f, fl_exe *exe, const char *dir, const char *const *feeds, int nfeed, fl_var *const *targets,
                      int ntarget, const fl_prog *prog, int inference);
/* The worker's client (NULL before fleet_init_worker); tests use it to inspect tables. */
fl_ps_client *fl__ps_fleet_client(const fleet_t *f);

/* Installs the rewrite (rewrite.c) as opt's optimizer hook. */
int fl__ps_install(fl__ps_ctx *c, fl_opt *opt);
/* The inference form of a program over c's tables (rewrite.c; fleet_dist_infer_program). */
int fl__ps_rewrite_infer(fl__ps_ctx *c, fl_prog *p);
/* fleet_dist_infer_program of a parameter-server fleet: FL_ESTATE before minimize. */
int fl__ps_infer_program(fleet_t *f, fl_prog *prog);

/* ---- ops.c --------------------------------------------------------------------------- */

extern const fl_op_def *const fl__ops_ps[];
/* Worker 0 offers its initial dense values (servers that loaded a checkpoint keep theirs),
 * barrier, every worker pulls them into ts[i] (table tables[i]); then the mode's
 * after_init. */
int fl__ps_init_exchange(fl__ps_ctx *c, fl_tensor *const *ts, const int *tables, int n);

/* ---- communicator.c --------------------------------------------------------------------- */

/* One queue per variable: table, sparse or dense, the dense element count, how merged
 * gradients combine. */
typedef struct {
    int table;
    int sparse;
    int64_t numel;
    int dim;
} fl__ps_comm_var;

/* How dense parameters come back (recv_mode). */
enum {
    FL__PS_RECV_NONE,       /* half-async: pushes and pulls at the step's meeting (fl__ps_comm_pull_now) */
    FL__PS_RECV_AFTER_SEND, /* a send thread pulls a parameter right after pushing its gradient */
    FL__PS_RECV_THREAD      /* independent_recv_thread: a receive thread at its own pace */
};

typedef struct {
    const fl_ps_client_opts *client; /* copied into the communicator's own clients */
    const fl__ps_comm_var *vars;
    int nvars;
    int queue_size;           /* send_queue_size (>= 1; 0: not set, see communicator.c) */
    int max_merge;            /* max_merge_var_num (>= 1; 0: not set) */
    int min_send_before_recv; /* min_send_grad_num_before_recv (>= 1) */
    int send_wait_times;      /* 10 ms waits for more gradients to merge (>= 1; 0: not set) */
    int thread_pool_size;     /* send threads, each with its own client (>= 1) */
    int recv_mode;            /* FL__PS_RECV_* */
} fl__ps_comm_opts;

/* Connects a client per send thread and a receive client, and starts the threads. */
int fl__ps_comm_create(const fl__ps_comm_opts *o, fl__ps_comm **out);
/* Copies a gradient (dense, or SelectedRows for sparse tables) into var's queue; blocks
 * while the queue is full.  Fails with the send thread's error once it has one. */
int fl__ps_comm_send(fl__ps_comm *c, int var, const fl_tensor *grad);
/* Copies the newest dense values the receive thread pulled for var into param, if there
 * are newer ones than the last copy.  *copied (may be NULL) tells. */
int fl__ps_comm_recv(fl__ps_comm *c, int var, fl_tensor *param, int *copied);
/* Waits until every queued gradient has been pushed; the first background error. */
int fl__ps_comm_flush(fl__ps_comm *c);
/* Half-async's step end: the trainer threads of the pass meet (src/exec/tgroup.c); the last
 * to arrive flushes every queue and pulls the dense values of vars[n] with the receive
 * client, in one request round, into params[n], which Hogwild threads share (a thread
 * holding its own copies gets the same values). */
int fl__ps_comm_pull_now(fl__ps_comm *c, int n, const int *vars, fl_tensor *const *params);
/* Adds the traffic of the communicator's clients to *t. */
void fl__ps_comm_traffic(fl__ps_comm *c, fl_ps_traffic *t);
/* Pushes merged by the send thread so far (one per variable and push), and in *grads (when
 * not NULL) the gradients they carried (for tests and logs). */
int64_t fl__ps_comm_pushes(fl__ps_comm *c, int64_t *grads);
/* Stops the threads (queued gradients not yet pushed are dropped: flush first), frees the
 * clients without stop (the trainer's client stops the worker). */
void fl__ps_comm_free(fl__ps_comm *c);

#endif
