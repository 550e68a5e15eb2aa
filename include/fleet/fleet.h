/*
 * fleet/fleet.h - the Fleet facade: role makers, DistributedStrategy and the handle that
 * turns a single-machine program into a distributed one.
 *
 *   fleet_t *fleet = fleet_init(NULL, &strategy);                 (role from the environment)
 *   opt = fleet_distributed_optimizer(fleet, opt, &strategy);
 *   fl_opt_minimize(opt, cost);
 *   if (fleet_is_server(fleet)) { fleet_init_server(fleet, dir); fleet_run_server(fleet); }
 *   else { fleet_init_worker(fleet); ...train...; fleet_stop_worker(fleet); }
 *
 * fleet_init(NULL, ...) finds the role from the launcher that started the process: Paddle's
 * (fleetrun), torchrun / PyTorchJob, mpirun or srun (fleet_role_from_env).  With no
 * distributed environment set, it gives one local worker and the lifecycle calls are
 * no-ops: the same program runs on one machine, as Paddle 2.x's non-distributed fallback.
 *
 * There is no hidden global: every call takes the fleet_t handle.  A handle is used from
 * one thread, except the fleet_util_* collectives which follow the communicator's rules.
 */
#ifndef FLEET_FLEET_H
#define FLEET_FLEET_H

#include "fleet/io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- role makers ---------------------------------------------------------------------- */

typedef enum { FLEET_ROLE_WORKER = 1, FLEET_ROLE_SERVER = 2 } fleet_role_kind;

typedef struct fleet_role fleet_role;

/* PaddleCloudRoleMaker: reads Paddle's launcher variables.
 *  collective (is_collective=1): PADDLE_TRAINER_ID (default 0), PADDLE_TRAINER_ENDPOINTS
 *    (ip:port,...; unset = one local trainer), PADDLE_CURRENT_ENDPOINT (must equal the
 *    trainer's endpoint when set), PADDLE_TRAINERS_NUM (must equal the endpoint count when
 *    set), PADDLE_TRAINING_ROLE (TRAINER, default).
 *  parameter server (is_collective=0): PADDLE_PSERVERS_IP_PORT_LIST (unset = one local
 *    worker, no servers; but FL_EINVAL when PADDLE_TRAINER_ENDPOINTS lists, or
 *    PADDLE_TRAINERS_NUM counts, several trainers: a collective launch such as
 *    fleetrun --nproc_per_node 2 of a parameter-server program); then TRAINING_ROLE (TRAINER|PSERVER) and PADDLE_TRAINERS_NUM are
 *    required; a TRAINER needs PADDLE_TRAINER_ID, a PSERVER needs POD_IP and PADDLE_PORT
 *    (its index is the position of POD_IP:PADDLE_PORT in the list);
 *    PADDLE_TRAINER_ENDPOINTS is optional.
 * A missing or malformed variable is an FL_EINVAL error naming it and the expected form. */
FL_API int fleet_role_paddlecloud(int is_collective, fleet_role **out);

/* UserDefinedRoleMaker (Paddle 2.x arguments). worker_num 0 means the number of worker
 * endpoints.  Endpoint lists are copied; server_endpoints must be non-empty and unique in
 * parameter-server mode. */
typedef struct {
    int is_collective;
    int current_id;
    fleet_role_kind role;
    int worker_num;
    const char *const *worker_endpoints;
    int n_worker_endpoints;
    const char *const *server_endpoints;
    int n_server_endpoints;
} fleet_user_role;
FL_API int fleet_role_user_defined(const fleet_user_role *spec, fleet_role **out);

/* The schedulers' role makers (docs/clusters.md).  Each reads its launcher's variables,
 * derives every process's endpoint deterministically (or, where noted, by a rendezvous
 * with a deadline), and fails with FL_EINVAL naming the variable and the expected form
 * when one is missing, malformed or inconsistent.  A parameter-server program
 * (is_collective 0) that the launcher started as several processes with no servers is
 * refused with a message saying how to start servers.  The job secret (FLEET_JOB_SECRET or
 * FLEET_JOB_SECRET_FILE) must reach every process, as for fleetrun.  Not thread safe. */

/* Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST,
 * SLURM_NODELIST; Slurm's bracket syntax, e.g. node[01-04,07]), SLURM_STEP_TASKS_PER_NODE
 * (else SLURM_TASKS_PER_NODE; e.g. 2(x3),1), SLURM_JOB_ID and SLURM_STEP_ID; SLURM_LOCALID
 * and SLURM_NODEID are checked when set.  Tasks are laid out in blocks (srun's default):
 * task i is local task l of node n and listens on n:port_base+l, port_base being
 * FLEET_SLURM_PORT_BASE or 20000 + (SLURM_JOB_ID*97 + SLURM_STEP_ID*1009) % 20000.
 * Parameter-server jobs: FLEET_SLURM_SERVERS=K makes tasks 0..K-1 the servers (server index
 * = SLURM_PROCID) and the rest the workers (worker index = SLURM_PROCID - K).  Does not
 * block. */
FL_API int fleet_role_slurm(int is_collective, fleet_role **out);

/* torchrun / Kubernetes PyTorchJob (collective): RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
 * LOCAL_RANK and LOCAL_WORLD_SIZE (both or neither = one process per node).  Rank r of node
 * r / LOCAL_WORLD_SIZE listens on host:port_base + LOCAL_RANK, port_base being
 * FLEET_TORCHRUN_PORT_BASE or MASTER_PORT + 1 and host the node's entry of
 * FLEET_WORKER_HOSTS (h0,h1,...), or MASTER_ADDR on one node.  Several nodes without
 * FLEET_WORKER_HOSTS meet at a rendezvous: rank 0 listens on MASTER_ADDR:FLEET_RENDEZVOUS_PORT
 * (default MASTER_PORT + 1), every rank reports a free port of the address it reaches rank 0
 * from, over the authenticated transport (the job secret is required); it blocks until all
 * WORLD_SIZE ranks have reported or FLEET_RENDEZVOUS_TIMEOUT_MS (default 300000) passes,
 * naming the missing ranks. */
FL_API int fleet_role_torchrun(fleet_role **out);

/* MPI (mpirun; Open MPI, optional at build time: without it FL_EUNSUPPORTED "built without
 * MPI").  Initialises MPI (MPI_THREAD_SERIALIZED) unless the program did; it is finalised
 * when the last MPI role is freed or at exit, never if the program initialised it, and can
 * then not be used again in the process (FL_ESTATE).  Every rank binds a free port of its
 * address (FLEET_MPI_HOST, else 127.0.0.1 when all ranks share this host, else the address
 * of gethostname()) and the endpoints are exchanged with MPI_Allgather (collective over
 * MPI_COMM_WORLD: every rank calls it; it blocks until all have).  Collective: every rank is
 * a worker.  Parameter server: Paddle's MPISymetricRoleMaker, even ranks are servers and
 * odd ranks workers, both indexed rank / 2; the rank count must be even. */
FL_API int fleet_role_mpi(int is_collective, fleet_role **out);

/* The role of whatever launcher started this process, detected in this order: Paddle's
 * launcher variables (PADDLE_TRAINER_ENDPOINTS, PADDLE_PSERVERS_IP_PORT_LIST, TRAINING_ROLE)
 * -> torchrun/PyTorchJob (RANK or WORLD_SIZE) -> Open MPI's mpirun (OMPI_COMM_WORLD_SIZE)
 * -> an srun step (SLURM_PROCID and SLURM_STEP_ID; MPI instead when PMI_SIZE differs from
 * SLURM_NTASKS) -> another MPI launcher (PMI_SIZE, PMIX_RANK) -> fleet_role_paddlecloud
 * (one local worker without PADDLE_* variables).  The choice is logged at info level;
 * errors of the chosen role maker say why it was chosen.  Blocks as the chosen one does. */
FL_API int fleet_role_from_env(int is_collective, fleet_role **out);

/* Frees a role not handed to fleet_init (which takes ownership).  NULL is ignored. */
FL_API void fleet_role_free(fleet_role *r);

/* ---- DistributedStrategy ----------------------------------------------------------------- */

/* Paddle 2.x field names and defaults (distributed_strategy.proto).  Initialise with
 * fleet_strategy_default(); set fields directly or by name with fleet_strategy_set()
 * ("a_sync", "a_sync_configs.k_steps", ...) or from text with fleet_strategy_parse()
 * (key=value lines or a JSON object).  Fields this build does not implement are
 * rejected when they differ from their default (fleet_strategy_check). */
#define FLEET_STRATEGY_STR_MAX 256 /* bytes of a string field, NUL included */
#define FLEET_DGC_MAX_SPARSITY 32  /* entries of dgc_configs.sparsity */
typedef struct {
    int a_sync; /* true */
    struct {
        int64_t k_steps;                                                      /* -1 */
        /* max_merge_var_num, send_queue_size, send_wait_times: 0 = not set (the default; with
         * none of them set async mode merges what queues up while the link is busy, up to 20;
         * once one is set the communicator does exactly what they say, an unset one being 1) */
        int max_merge_var_num, send_queue_size, independent_recv_thread;      /* 0, 0, false */
        int min_send_grad_num_before_recv, thread_pool_size, send_wait_times; /* 1, 1, 0 */
        int runtime_split_send_recv, launch_barrier;                          /* false, true */
        /* extensions (not in Paddle's proto; docs/parameter_server.md): half_async selects
         * the half-async mode (a_sync = true, k_steps <= 0); dense_wire_dtype is how dense
         * values travel in async and half-async mode: FL_FLOAT32 or FL_BFLOAT16 (text:
         * "float32", "bfloat16" or "bf16") */
        int half_async;       /* false */
        int dense_wire_dtype; /* FL_FLOAT32 */
    } a_sync_configs;
    int localsgd; /* false */
    struct {
        int64_t k_steps, begin_step; /* 1, 1 */
    } localsgd_configs;
    int adaptive_localsgd;
    struct {
        int64_t init_k_steps, begin_step; /* 1, 1 */
    } adaptive_localsgd_configs;
    int gradient_merge;
    struct {
        int64_t k_steps; /* 1 */
        int avg;         /* true */
    } gradient_merge_configs;
    int amp; /* false; true: fl_amp_decorate_optimizer at minimize (src/fleet/amp.c) */
    struct {
        /* Loss scaling of float16 (unused with bfloat16, which has float32's range; docs/engine.md) */
        double init_loss_scaling;                            /* 32768 */
        int64_t incr_every_n_steps, decr_every_n_nan_or_inf; /* 1000, 2 */
        double incr_ratio, decr_ratio;                       /* 2.0, 0.8 */
        int use_dynamic_loss_scaling;                        /* true */
        /* comma-separated op types (JSON: a list of strings or one such string) */
        char custom_white_list[FLEET_STRATEGY_STR_MAX], custom_black_list[FLEET_STRATEGY_STR_MAX]; /* "" */
        int use_pure_fp16;                   /* false; true: level O2 (low-precision activations
                                              * between fc layers, float32 master weights
                                              * refreshed into low-precision copies after each
                                              * update; collective or local; refused with
                                              * parameter servers) */
        char dtype[FLEET_STRATEGY_STR_MAX];  /* our extension: "bfloat16" (default) or "float16" (collective
                                              * or local; refused with parameter servers) */
    } amp_configs;
    int dgc; /* false; true: Deep Gradient Compression of the Momentum optimizer (docs/collective.md) */
    struct {
        int64_t rampup_begin_step, rampup_step; /* 0, 1 */
        /* the sparsity schedule over rampup_step steps: comma-separated numbers in [0, 1),
         * at most FLEET_DGC_MAX_SPARSITY (JSON: a list of numbers) */
        char sparsity[FLEET_STRATEGY_STR_MAX]; /* "0.999" */
    } dgc_configs;
    int recompute; /* false; true: minimize recomputes between checkpoints (src/fleet/recompute.c) */
    struct {
        /* comma-separated variable names (JSON: a list of strings or one such string) */
        char checkpoints[FLEET_STRATEGY_STR_MAX]; /* "" */
    } recompute_configs;
    int lars; /* false; true: the Momentum optimizer becomes lars_momentum (fl_opt_lars) */
    struct {
        double lars_coeff, lars_weight_decay, epsilon; /* 0.001, 0.0005, 0 */
        /* comma-separated names (JSON: a list of strings); matched as substrings */
        char exclude_from_weight_decay[FLEET_STRATEGY_STR_MAX]; /* "" */
    } lars_configs;
    int lamb; /* false; true: the Adam optimizer becomes lamb (fl_opt_lamb) */
    struct {
        double lamb_weight_decay; /* 0.01 */
        /* comma-separated names (JSON: a list of strings); matched as name suffixes */
        char exclude_from_weight_decay[FLEET_STRATEGY_STR_MAX]; /* "" */
    } lamb_configs;
    int pipeline, sharding, tensor_parallel, elastic, auto_mode;
    int sync_batch_norm, use_hierarchical_allreduce;
    int64_t hierarchical_allreduce_inter_nranks; /* 1 */
    int fuse_all_reduce_ops;                     /* true */
    double fuse_grad_size_in_MB;                 /* 32 */
    double fuse_grad_size_in_TFLOPS;             /* 50 */
    int64_t nccl_comm_num;                       /* 1 */
    /* our extension: the wire dtype of the collective gradient allreduce, "float32"
     * (default), "bfloat16" or "float16" (Horovod's Compression.fp16): half the bytes,
     * reduced in float32 (fl_coll_allreduce in fleet/coll.h) */
    char allreduce_dtype[FLEET_STRATEGY_STR_MAX];
    int sync_nccl_allreduce;                     /* true */
    /* The class of the sparse tables of a parameter-server job.  Paddle 2.x sets it per table
     * in fleet_desc_configs[table]["sparse_table_class"]; here one setting covers every sparse
     * table of the job (docs/parameter_server.md).  sparse_table_class: "DownpourSparseTable"
     * (default) or "MemorySparseTable": in server memory; "DownpourSparseSSDTable" or
     * "SSDSparseTable": Paddle's SSDSparseTable, rows beyond a memory budget in RocksDB.
     * Our extensions (Paddle takes the directory from its rocksdb_path flag and moves rows by
     * unseen days instead of a budget): sparse_ssd_path, the directory each server keeps its
     * databases under, and sparse_mem_budget_mb, the MiB of rows a server keeps in memory
     * per table (fl_ps_table_config.ssd_path / mem_budget_mb); both required by, and only
     * allowed with, an SSD class. */
    struct {
        char sparse_table_class[FLEET_STRATEGY_STR_MAX]; /* "DownpourSparseTable" */
        char sparse_ssd_path[FLEET_STRATEGY_STR_MAX];    /* "" */
        int64_t sparse_mem_budget_mb;                    /* 0 */
    } fleet_desc_configs;
} fleet_strategy;

FL_API fleet_strategy fleet_strategy_default(void);
/* Sets one field by name from a string ("true"/"false"/"1"/"0", integers, numbers).
 * Unknown keys are FL_EINVAL naming the key.  As in Paddle, setting "a_sync" resets
 * a_sync_configs.k_steps to 0. */
FL_API int fleet_strategy_set(fleet_strategy *s, const char *key, const char *value);
/* Parses key=value lines ('#' comments) or one JSON object with nested configs
 * ({"a_sync": true, "a_sync_configs": {"k_steps": 100}}), set in document order.  JSON
 * values are typed: true/false, integers, numbers.  All-or-nothing.  Errors are FL_EINVAL
 * naming the key and what is wrong ("key 'a_sync_configs.k_steps' must be an integer"),
 * or the byte and line of a JSON syntax error. */
FL_API int fleet_strategy_parse(fleet_strategy *s, const char *text);
/* fleet_strategy_parse on a file of at most 1 MiB; messages start with the file's name. */
FL_API int fleet_strategy_load(fleet_strategy *s, const char *path);
/* Rejects fields set away from their default that this build does not implement, and
 * out-of-range values, naming the field. */
FL_API int fleet_strategy_check(const fleet_strategy *s);
/* Writes "key=value" lines of the fields that differ from the defaults (malloc'ed). */
FL_API char *fleet_strategy_to_text(const fleet_strategy *s);
/* Writes field `key`'s value (the text fleet_strategy_set takes) into out[cap]; on
 * fleet_strategy_default() it is the default, so bindings need no copy of the defaults. */
FL_API int fleet_strategy_get(const fleet_strategy *s, const char *key, char *out, size_t cap);

/* ---- the parameter-server modes ------------------------------------------------------------ */

/* What a parameter-server mode is, for the callers that need to know (tools, examples): one
 * row of the library's mode table (src/fleet/ps/modes.c; docs/parameter_server.md).  A
 * strategy selects a mode through its fields (a_sync, a_sync_configs.k_steps,
 * a_sync_configs.half_async); fleet_strategy_set_ps_mode sets them by the mode's name and
 * fleet_strategy_ps_mode tells which mode a strategy selects. */
typedef struct {
    const char *name;     /* "sync", "half_async", "async", "geo" */
    const char *summary;  /* one line */
    int server_optimizes; /* 1: the servers apply the optimizer rule to the gradients the
                           * workers push; 0: the workers keep their optimizer and exchange
                           * parameter deltas (GEO) */
    int remote_sparse;    /* 1: sparse tables live on the servers (distributed lookups: a model
                           * builder's is_distributed); 0: every table stays on the workers */
    int single_trainer;   /* 1: the exchange counts one step per worker process, so a worker
                           * trains with one thread (fl_exe_train_from_dataset thread 1 or 0) */
    int server_sync;      /* 1: the servers apply a step once every worker pushed it */
    int dense_wire;       /* 1: a_sync_configs.dense_wire_dtype applies (dense values may
                           * travel as bf16) */
} fleet_ps_mode;

/* The modes of the table, in selection order: fleet_ps_mode_at(i, out) for i in
 * [0, fleet_ps_mode_count()); FL_EINVAL naming i outside it. */
FL_API int fleet_ps_mode_count(void);
FL_API int fleet_ps_mode_at(int i, fleet_ps_mode *out);
/* The mode called name; FL_EINVAL naming name and the modes there are. */
FL_API int fleet_ps_mode_info(const char *name, fleet_ps_mode *out);
/* Sets the fields of s that select mode name: a_sync, half_async and k_steps (GEO keeps a
 * k_steps already above 0, else 100; the others set it to 0).  FL_EINVAL for an unknown
 * name, naming the modes. */
FL_API int fleet_strategy_set_ps_mode(fleet_strategy *s, const char *name);
/* The mode s selects (after a strategy file, say); FL_EINVAL naming the fields of a
 * contradictory strategy (sync with k_steps > 0, half_async with GEO, ...). */
FL_API int fleet_strategy_ps_mode(const fleet_strategy *s, fleet_ps_mode *out);


/* ---- the facade ---------------------------------------------------------------------------- */

typedef struct fleet fleet_t;

/* What strategy.dgc exchanged on this worker so far (collective runtime, more than one
 * worker; otherwise all zero).  Bytes are this rank's bytes on the transport
 * (fl_coll_bytes_sent) during DGC's exchanges; fleet_stop_worker logs them at info level. */
typedef struct {
    int64_t params;       /* parameters compressed (the small ones are allreduced as usual) */
    int64_t dense_steps;  /* steps before rampup_begin_step: those parameters allreduced dense */
    int64_t sparse_steps; /* steps that exchanged top-k (index, value) pairs */
    uint64_t dense_bytes, sparse_bytes;
} fleet_dgc_stats;

/* Fills *out.  FL_EINVAL for a NULL or invalid handle or out.  Not thread safe with a
 * training step running on another thread. */
FL_API int fleet_dgc_stats_get(fleet_t *f, fleet_dgc_stats *out);

/* Creates the handle.  role NULL means fleet_role_from_env(0, ...) (the launcher's
 * variables, parameter-server mode); fleet_init_collective uses collective mode.  The handle takes
 * ownership of role.  strategy may be NULL (defaults) and is copied.  Returns NULL with
 * fl_last_error() set on a bad environment or strategy. */
FL_API fleet_t *fleet_init(fleet_role *role, const fleet_strategy *strategy);
FL_API fleet_t *fleet_init_collective(fleet_role *role, const fleet_strategy *strategy);
FL_API void fleet_free(fleet_t *f);

/* The queries below set fl_last_error() for a NULL or freed handle; the predicates then
 * return 0, the counts and indices FL_EINVAL, the strings and the strategy NULL. */
FL_API int fleet_is_collective(const fleet_t *f);
/* 1 when running distributed (more than one process or any server). */
FL_API int fleet_is_distributed(const fleet_t *f);
FL_API int fleet_is_worker(const fleet_t *f);
FL_API int fleet_is_server(const fleet_t *f);
FL_API int fleet_is_first_worker(const fleet_t *f);
FL_API int fleet_worker_index(const fleet_t *f);
FL_API int fleet_worker_num(const fleet_t *f);
FL_API int fleet_server_index(const fleet_t *f);
FL_API int fleet_server_num(const fleet_t *f);
/* Endpoint i, or NULL out of range. fleet_*_endpoints_str returns "a,b,c" (owned by f). */
FL_API const char *fleet_worker_endpoint(const fleet_t *f, int i);
FL_API const char *fleet_server_endpoint(const fleet_t *f, int i);
FL_API const char *fleet_worker_endpoints_str(fleet_t *f);
FL_API const char *fleet_server_endpoints_str(fleet_t *f);
FL_API const fleet_strategy *fleet_get_strategy(const fleet_t *f);

/* ---- training -------------------------------------------------------------------------------- */

/* Wraps opt so that fl_opt_minimize() builds the distributed program for the mode (returns
 * opt itself, as Paddle's static-graph fleet does; NULL with an error on failure).  A
 * non-NULL strategy replaces the one given to fleet_init.  Collective mode: parameters are
 * broadcast from rank 0 by the startup program; gradients are summed over the trainers and
 * scaled by 1/n before the optimizer, in fusion buckets of fuse_grad_size_in_MB allreduced
 * on a communication thread while backward goes on; sparse (SelectedRows) gradients are
 * all-gathered (rows and values of every trainer).  LocalSGD averages parameters every
 * localsgd_configs.k_steps steps (every step before begin_step) instead; gradient merge
 * sums gradients over gradient_merge_configs.k_steps steps (divided by k when avg) and
 * updates on the last.  Without a distributed environment minimize is local (gradient
 * merge still applies).  fleet must outlive every program built with the result. */
FL_API fl_opt *fleet_distributed_optimizer(fleet_t *f, fl_opt *opt, const fleet_strategy *strategy);

/* Paddle 1.x's DistributeTranspiler.transpile: makes prog, which fl_opt_minimize already
 * built with opt (without a fleet), the parameter-server program of this fleet, as
 * fleet_distributed_optimizer(f, opt, strategy) before minimize would have (same tables,
 * same worker rewrite; the startup program gets the initial exchange).  A server and its
 * workers each transpile the same program.  Parameter-server fleets only (a collective or
 * local fleet: FL_EUNSUPPORTED); once per fleet handle. */
FL_API int fleet_transpile(fleet_t *f, fl_opt *opt, fl_prog *prog, const fleet_strategy *strategy);

/* Paddle's DistributedInfer.get_dist_infer_program: makes prog, a main program built with
 * the names of the trained one (e.g. its test form, built again under a fresh unique-name
 * guard), a program for inference on this worker.  Parameter server (after minimize): the
 * lookups of the servers' sparse tables become remote lookups that pull without creating
 * rows (an id never trained reads zeros), and those tables leave prog and its startup
 * program; dense parameters are the scope's (the trained worker's, or load them).  A
 * collective or local fleet: prog is left as it is.  Modifies prog in place; a server's
 * call, a startup program or a call before minimize is an error. */
FL_API int fleet_dist_infer_program(fleet_t *f, fl_prog *prog);

/* Lifecycle.  Collective and non-distributed: init_worker / stop_worker do nothing.
 * Parameter-server mode (docs/parameter_server.md): init_server binds this server's
 * endpoint and restores model_dir when given; run_server serves until every worker has
 * called stop_worker (or fails when one disappears); init_worker connects to every server
 * (with a deadline naming any unreachable one) and exchanges the initial parameters;
 * stop_worker flushes the communicator and tells the servers. */
FL_API int fleet_init_worker(fleet_t *f);
FL_API int fleet_stop_worker(fleet_t *f);
FL_API int fleet_init_server(fleet_t *f, const char *model_dir);
FL_API int fleet_run_server(fleet_t *f);
/* Blocks until every worker has called it (deadline: the collective timeout). */
FL_API int fleet_barrier_worker(fleet_t *f);

/* fleet.util collectives over the workers (in place; mode "sum", "max" or "min").  With
 * one worker they return the input unchanged. */
FL_API int fleet_util_all_reduce(fleet_t *f, void *buf, size_t count, fl_dtype dtype, const char *mode);
/* recv holds worker_num * count elements, worker i's at i * count. */
FL_API int fleet_util_all_gather(fleet_t *f, const void *send, void *recv, size_t count, fl_dtype dtype);
FL_API int fleet_util_barrier(fleet_t *f);
/* An allreduce inside a program (Paddle's layers.collective._c_allreduce): appends to x's
 * program an op whose output is x reduced over the workers (reduce_type "sum", "max" or
 * "min"; same shape and dtype), run by every worker at the same step of the same program.
 * One worker or a local run: the output is x.  Workers only. */
FL_API fl_var *fleet_layer_allreduce(fleet_t *f, fl_var *x, const char *reduce_type);
/* An allgather inside a program (Paddle's layers.collective._c_allgather): the output
 * stacks every worker's x along the first dimension in rank order ([n, ...] becomes
 * [workers * n, ...]; every worker's x must have the same shape at run time).  One worker
 * or a local run: the output is x.  Workers only. */
FL_API fl_var *fleet_layer_allgather(fleet_t *f, fl_var *x);

/* The first worker saves (fl_io_save_persistables / fl_io_save_inference_model); every
 * worker returns once it has, with an error if it failed. */
FL_API int fleet_save_persistables(fleet_t *f, fl_exe *exe, const char *dir, const fl_prog *prog);
FL_API int fleet_save_inference_model(fleet_t *f, fl_exe *exe, const char *dir, const char *const *feeds, int nfeed,
                                      fl_var *const *targets, int ntarget, const fl_prog *prog);
/* The same called by one worker alone, as Paddle programs do (under is_first_worker()):
 * nothing the other workers must join.  Collective: this worker's copy of the model.
 * Parameter server: this worker's queued pushes are flushed, then the servers save their
 * tables to dir and the worker its own persistables (or the inference model with the
 * tables' rows exported).  Local: as fl_io_save_*. */
FL_API int fleet_save_persistables_alone(fleet_t *f, fl_exe *exe, const char *dir, const fl_prog *prog);
FL_API int fleet_save_inference_model_alone(fleet_t *f, fl_exe *exe, const char *dir, const char *const *feeds, int nfeed,
                                            fl_var *const *targets, int ntarget, const fl_prog *prog);

/* ---- checkpoints for restart (docs/checkpoints.md) ------------------------------------------ */

/* Where a worker resumes: its data position and step count (the program's own meaning:
 * e.g. the epoch, the next file of its list and the batch in it). */
typedef struct {
    int64_t epoch, file, offset, step;
} fleet_checkpoint_pos;

/* Saves checkpoint <root>/ckpt-<seq> on every worker (a collective call: every worker
 * makes it): the servers' tables (parameter-server jobs), each worker's persistables of
 * prog (parameters, optimizer moments, counters, learning rate, metric state) and pos.
 * Worker 0 commits it (checkpoint.json, atomically) once every worker's part is written,
 * then keeps only the newest `keep` (>= 1).  Blocks for the save and two agreements among
 * the workers (bounded by the PS or collective deadlines).  A failure anywhere is an error
 * on every worker, and the previous checkpoint stays valid. */
FL_API int fleet_save_checkpoint(fleet_t *f, fl_exe *exe, const char *root, const fl_prog *prog,
                                 const fleet_checkpoint_pos *pos, int keep);
/* Loads this worker's part of the newest valid checkpoint under root into exe's scope and
 * *pos.  FL_ENOTFOUND when there is none (start from scratch); FL_EINVAL when it was
 * saved by another number of workers.  Call after the startup program (and, in a
 * parameter-server job, after fleet_init_worker: the servers were started from the same
 * checkpoint, see fleet_checkpoint_latest). */
FL_API int fleet_load_checkpoint(fleet_t *f, fl_exe *exe, const char *root, const fl_prog *prog, fleet_checkpoint_pos *pos);
/* The directory of the newest valid checkpoint under root, for fleet_init_server (servers
 * restart from its tables); *seq (may be NULL) its number.  FL_ENOTFOUND when there is
 * none. */
FL_API int fleet_checkpoint_latest(const char *root, char *dir, size_t cap, int64_t *seq);

/* Paddle's split_files / util.get_file_shard: contiguous blocks of len/n files, the first
 * len%n workers get one more.  *out is a malloc'ed array of pointers into files. */
FL_API int fleet_split_files(const fleet_t *f, const char *const *files, int n, const char ***out, int *nout);

/* InMemoryDataset across the workers (Paddle's dataset.global_shuffle(fleet) and
 * get_memory_data_size(fleet)); every worker calls them.  The global shuffle sends each
 * record to a seeded random worker over the workers' ring (the collective communicator, or
 * in a parameter-server job one connected on first use from PADDLE_TRAINER_ENDPOINTS), then
 * shuffles locally; no record is lost or duplicated.  Each worker's records travel to every
 * worker once (a broadcast per worker): fine for the handful of workers of one job. */
FL_API int fleet_dataset_global_shuffle(fleet_t *f, fl_dataset *ds, uint64_t seed);
/* Records held by all workers together; -1 on error. */
FL_API int64_t fleet_dataset_memory_data_size(fleet_t *f, const fl_dataset *ds);

#ifdef __cplusplus
}
#endif
#endif
