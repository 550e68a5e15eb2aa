/*
 * fleet/ps.h - the parameter server: tables, the server process and the worker-side client.
 *
 * What it is.  Servers hold parameters and apply the optimizer; workers pull parameters and
 * push gradients.  Two kinds of table:
 *   - dense: one parameter of R rows x C columns (a vector is R x 1), split over the servers
 *     in contiguous whole-row ranges: with b = ceil(R / nservers), server i holds rows
 *     [min(i*b, R), min((i+1)*b, R)) (a server may hold none);
 *   - sparse: uint64 feature id -> row of `dim` floats, created lazily on first training
 *     pull (or push) from the table's initializer, seeded per id so a row's initial value
 *     does not depend on the number of servers or on the order of requests.  Id -> server:
 *     fl__hash_u64(id) % nservers, where fl__hash_u64 is the 64-bit finalizer of MurmurHash3
 *     (x ^= x>>33; x *= 0xff51afd7ed558ccd; x ^= x>>33; x *= 0xc4ceb9fe1a85ec53; x ^= x>>33).
 * Server-side optimizers: SGD, Adagrad and Adam, each with L2 decay (g += l2 * w), using the
 * same float arithmetic as the local optimizer ops (src/graph/ops_optim.c), and "sum" for GEO
 * deltas (w += delta).  Sparse updates are lazy (only pushed rows change); Adam's beta pow
 * accumulators belong to the table shard and advance once per applied push (async) or step
 * (sync), as the local lazy Adam advances them once per step.
 *
 * Sparse rows also carry CtrCommonAccessor statistics (show, click, delta_score,
 * unseen_days): pushes add show and click, shrink decays them and deletes rows whose score
 * falls below delete_threshold or that went unseen for more than delete_after_unseen_days
 * (see fl_ps_accessor).  Entry policies admit new ids: "count_filter_entry:n" (a row is
 * created only at its n-th training pull or push; until then it reads as zeros and only a
 * small counter is kept) and "probability_entry:p" (each touch of an absent id creates it
 * with probability p).
 *
 * Modes.  Async (default): each push is applied at once.  Sync (fl_ps_server_opts.sync): in
 * each step every worker pushes every table exactly once (an empty sparse push still counts);
 * the server sums the pushes of all workers, divides by the number of workers and applies
 * the optimizer once, so sync training equals local training on the global batch (also for
 * Adam).  A push returns only after its step has been applied on that server, so a pull
 * that follows sees the new values.  GEO: give the table the "sum" optimizer and push deltas.
 *
 * What it is not.  It does not pick modes, build programs or merge gradients over time
 * (that is the communicator in src/fleet); it does not read the environment except through
 * fl_ps_*_opts_from_env helpers documented below; it starts no process.
 *
 * Errors.  Every fallible call returns FL_OK or a negative status with fl_last_error()
 * naming the peer: "server 1 (127.0.0.1:6171)", "worker 3".  A server that died or hangs
 * makes client calls fail within the request deadline (FL_EREMOTE or FL_ETIMEDOUT); a worker
 * whose connections drop without fl_ps_client_stop makes fl_ps_server_run return FL_EREMOTE
 * naming its rank within reconnect_grace_ms.
 *
 * Security.  Servers and clients authenticate each connection with the job secret (see
 * fleet/net.h) before any request is parsed; every length on the wire is checked against
 * FL_PS_MAX_BODY and against the rest of the frame before anything is allocated; a bad frame
 * closes that connection only.
 *
 * Checkpoints (fl_ps_client_save / load): each server writes each of its table shards to
 *   <dir>/<table name>/part-<server index, 5 digits>-<generation, 16 hex>.safetensors
 * then server 0 writes <dir>/ps_manifest.json last, atomically: that file is the commit
 * point (step, number of servers, hash rule, table list, generation).  Files of older
 * generations are removed only after the new manifest is in place, so a save interrupted at
 * any point leaves the previous checkpoint loadable.  See docs/ps.md for the tensors.
 * The directory must be visible to every server under the same path (one machine, or a
 * shared file system).
 */
#ifndef FLEET_PS_H
#define FLEET_PS_H

#include <stddef.h>
#include <stdint.h>

#include "fleet/base.h"
#include "fleet/graph.h"
#include "fleet/net.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest frame body accepted on the wire (1 GiB).  Larger pulls and pushes are split by
 * the client into several requests. */
#define FL_PS_MAX_BODY ((uint64_t)1 << 30)
/* Limits on configuration. */
#define FL_PS_MAX_TABLES 256
#define FL_PS_MAX_SERVERS 4096
#define FL_PS_MAX_WORKERS 65536
#define FL_PS_MAX_DIM 65536
#define FL_PS_NAME_MAX 128

/* Role tags sent in the connection handshake (fl_net_auth.role). */
enum { FL_PS_ROLE_WORKER = 1, FL_PS_ROLE_SERVER = 2 };

/* ---- table configuration ------------------------------------------------------------- */

typedef enum {
    FL_PS_OPT_SGD = 0, /* w -= lr * g */
    FL_PS_OPT_ADAGRAD, /* m += g*g; w -= lr * g / (sqrt(m) + epsilon) */
    FL_PS_OPT_ADAM,    /* Paddle 2.x adam, as src/graph/ops_optim.c */
    FL_PS_OPT_SUM,     /* w += g (GEO deltas; lr and l2 ignored) */
    FL_PS_OPT_MOMENTUM /* v = mu v + g; w -= lr v (Nesterov: w -= lr (g + mu v)), as the local op */
} fl_ps_opt_kind;

typedef struct {
    fl_ps_opt_kind kind;
    float lr;        /* learning rate (> 0 except for SUM) */
    float l2;        /* L2 decay coefficient, >= 0: g += l2 * w before the rule */
    double beta1;    /* Adam; 0 means 0.9 (double, as the local op's attribute) */
    double beta2;    /* Adam; 0 means 0.999 */
    double epsilon;  /* 0 means 1e-6 for Adagrad, 1e-8 for Adam */
    double momentum; /* Momentum: mu in [0, 1) (0 is plain accumulation) */
    int nesterov;    /* Momentum: 1 for Nesterov's update */
    int scaled;      /* SGD without L2 only: 1 = the pushed gradients are already multiplied
                      * by the worker's scheduled learning rate (lr is then its lr_scale) */
} fl_ps_optimizer;

/* CtrCommonAccessor statistics of sparse rows (defaults are the_one_ps defaults).
 * score(show, click) = (show - click) * nonclk_coeff + click * click_coeff. */
typedef struct {
    float nonclk_coeff;           /* 0 means 0.1 */
    float click_coeff;            /* 0 means 1.0 */
    float show_click_decay_rate;  /* 0 means 1.0 (no decay); applied by shrink */
    float delete_threshold;       /* shrink deletes rows with score < this (default 0) */
    int delete_after_unseen_days; /* shrink deletes rows with unseen_days > this; 0 means 30 */
    float base_threshold;         /* save modes 1 and 2: score >= this (default 0) */
    float delta_threshold;        /* save mode 1: delta_score >= this (default 0) */
    int delta_keep_days;          /* save modes 1 and 2: unseen_days <= this; 0 means 16 */
} fl_ps_accessor;

typedef enum { FL_PS_DENSE = 0, FL_PS_SPARSE = 1 } fl_ps_table_kind;

/* One table.  Servers and clients must be given the same list (same order): tables are
 * addressed by their index in it.  At connect time a client is refused, with a message
 * naming the first differing table, when a table's name, kind, shape (dim), or what its
 * pushes carry differs from the server's: gradients, gradients already scaled by the
 * worker's rate (opt.scaled), or parameter deltas (FL_PS_OPT_SUM).  The rest (the update
 * rule and its hyperparameters, the sparse initializer, entry and accessor) is the
 * server's: a client configured otherwise is accepted and the server's settings apply, as
 * Paddle's parameter server runs the optimizer of its own program whatever the trainers
 * minimize with (the server logs it once per table). */
typedef struct {
    const char *name; /* [A-Za-z0-9_.@-]{1,127}; used as a directory name */
    fl_ps_table_kind kind;
    int64_t rows, cols;  /* dense: shape (rows >= 1, cols >= 1) */
    int dim;             /* sparse: floats per row (1..FL_PS_MAX_DIM) */
    fl_initializer init; /* sparse: per-row initializer (CONSTANT, UNIFORM, NORMAL,
                               * TRUNCATED_NORMAL; DEFAULT and XAVIER mean Xavier with
                               * fan_in = fan_out = dim).  seed 0 means 1.  Dense tables
                               * start at zero and are set by fl_ps_client_init_dense. */
    fl_ps_optimizer opt;
    const char *entry;       /* sparse: NULL or "" (every id admitted),
                               * "count_filter_entry:n" (n >= 1), "probability_entry:p"
                               * (0 < p <= 1) */
    fl_ps_accessor accessor; /* sparse statistics; zero = defaults */
    /* Sparse SSD tier (Paddle's SSDSparseTable; needs a build with RocksDB, otherwise
     * FL_EUNSUPPORTED).  With ssd_path set, each server keeps at most about mem_budget_mb
     * MiB of this table's rows (rows, index) in memory, the most recently used ones, and the
     * rest in a RocksDB database under ssd_path (a directory of its own per server and
     * table, created, and removed when the table is freed).  Pulls, pushes, save, load,
     * shrink and entry policies behave as for an in-memory table, bit for bit.  Server-local:
     * never compared between client and server. */
    const char *ssd_path;  /* NULL or "": in memory only */
    int64_t mem_budget_mb; /* with ssd_path: >= 1 */
} fl_ps_table_config;

/* Checks one table configuration; FL_EINVAL names the table and the field. */
FL_API int fl_ps_table_config_check(const fl_ps_table_config *t);

/* Rows [*row0, *row1) of a dense table of `rows` rows held by server `server` of
 * `nservers` (the split rule above). */
FL_API void fl_ps_dense_split(int64_t rows, int nservers, int server, int64_t *row0, int64_t *row1);
/* Server holding a sparse id: fl__hash_u64(id) % nservers. */
FL_API int fl_ps_sparse_server(uint64_t id, int nservers);

/* Memory statistics of a table (summed over servers when asked through a client). */
typedef struct {
    int64_t rows;           /* dense: rows held; sparse: stored rows */
    int64_t pending;        /* sparse: ids counted by count_filter_entry, not yet admitted */
    int64_t bytes;          /* bytes of memory held by the table (values, state, index) */
    double payload_per_key; /* sparse: bytes of value + optimizer state per row */
    double bytes_per_key;   /* sparse: bytes / rows (0 when empty) */
} fl_ps_table_stats;

/* ---- server ----------------------------------------------------------------------------- */

typedef struct fl_ps_server fl_ps_server;

typedef struct {
    const char *endpoint; /* "host:port" to bind (POD_IP:PADDLE_PORT); port 0 picks a
                                 * free port; NULL = "127.0.0.1:0" */
    int server_index;     /* 0..num_servers-1 */
    int num_servers;
    int num_workers; /* >= 1 */
    const fl_ps_table_config *tables;
    int num_tables;
    int sync;                    /* 1: sync mode (see top of file) */
    int num_threads;             /* request threads; 0 means 4 */
    const fl_net_secret *secret; /* job secret; NULL: insecure_local must be set */
    int insecure_local;          /* 1: accept without a secret, loopback peers only */
    int handshake_timeout_ms;    /* time a connection has to authenticate; 0 means
                                 * FLEET_NET_HANDSHAKE_TIMEOUT_MS or 5000 (fleet/net.h) */
    int request_timeout_ms;      /* deadline to read the rest of a started frame and to send
                                 * a reply; 0 means 60000 */
    int reconnect_grace_ms;      /* a worker with no connection left and no stop fails the
                                 * server after this; 0 means 3000 */
    int worker_timeout_ms;       /* a worker not heard from (requests or heartbeats) for this
                                 * long fails the server, naming it; 0 means 6000; < 0
                                 * disables.  Keep it several times the workers'
                                 * heartbeat_ms */
    int join_timeout_ms;         /* a worker that never connected fails the server after
                                 * this long; 0 means 120000; < 0 disables */
} fl_ps_server_opts;

/* Fills defaults for the fields above from the environment (FLEET_PS_THREADS,
 * FLEET_PS_REQUEST_TIMEOUT_MS, FLEET_PS_RECONNECT_GRACE_MS, FLEET_PS_WORKER_TIMEOUT_MS,
 * FLEET_PS_WORKER_JOIN_TIMEOUT_MS) where the field is 0; FL_EINVAL names a malformed
 * variable. */
FL_API int fl_ps_server_opts_from_env(fl_ps_server_opts *o);

/* Validates opts, creates the tables and binds the endpoint (fails at once with FL_EIO
 * naming the endpoint if it is taken).  Does not accept yet.  opts and the table list are
 * copied.  Caller frees with fl_ps_server_free. */
FL_API int fl_ps_server_create(const fl_ps_server_opts *opts, fl_ps_server **out);
/* The bound endpoint "host:port" (port resolved) and port. */
FL_API const char *fl_ps_server_endpoint(const fl_ps_server *s);
FL_API int fl_ps_server_port(const fl_ps_server *s);

/* Loads this server's shards of a checkpoint written by fl_ps_client_save (Paddle's
 * init_server(dirname)).  Must be called before fl_ps_server_run.  The checkpoint must have
 * been saved with the same number of servers and table list; all-or-nothing: on error the
 * tables are unchanged.  FL_ENOTFOUND when <dir>/ps_manifest.json does not exist. */
FL_API int fl_ps_server_load(fl_ps_server *s, const char *dir);

/* Serves until every worker (0..num_workers-1) has called fl_ps_client_stop (FL_OK), or
 * until a failure: a worker whose connections all closed without stop for
 * reconnect_grace_ms, or silent for worker_timeout_ms (FL_EREMOTE naming the worker), or
 * fl_ps_server_shutdown (FL_ESTATE).  On a failure, pending barriers and sync pushes are
 * answered with the error and all connections are closed.  Call once, from one thread. */
FL_API int fl_ps_server_run(fl_ps_server *s);
/* Asks a running fl_ps_server_run to return; thread safe and async-signal safe (writes
 * to a pipe).  Safe to call before run (run then returns at once). */
FL_API void fl_ps_server_shutdown(fl_ps_server *s);

/* Statistics of table `table` on this server (thread safe, also while running). */
FL_API int fl_ps_server_table_stats(fl_ps_server *s, int table, fl_ps_table_stats *out);

/* Stops (if running, call shutdown and wait for run to return first), closes and frees.
 * NULL is ignored. */
FL_API void fl_ps_server_free(fl_ps_server *s);

/* ---- client -------------------------------------------------------------------------------- */

typedef struct fl_ps_client fl_ps_client;

typedef struct {
    const char *const *endpoints; /* "host:port" of every server, in server-index order */
    int num_servers;
    int worker_rank; /* 0..num_workers-1 */
    int num_workers;
    const fl_ps_table_config *tables;
    int num_tables;
    const fl_net_secret *secret; /* job secret; NULL: insecure_local must be set */
    int insecure_local;
    int connect_timeout_ms; /* wait for servers to start listening; 0 means 60000 */
    int request_timeout_ms; /* each request's deadline; 0 means 60000 */
    int barrier_timeout_ms; /* barriers and sync-mode pushes (which wait for the other
                              * workers); 0 means 600000 */
    int retry_ms;           /* after a dropped connection, keep reconnecting this long
                              * (idempotent requests only); 0 means 3000; < 0: no retry */
    int heartbeat_ms;       /* heartbeat period (own thread and connections); 0 means 1000;
                              * < 0 disables (then the server's worker_timeout_ms must be
                              * off or larger than the longest pause between requests) */
    int server_timeout_ms;  /* a request whose server has answered nothing, not even a
                              * heartbeat, for this long fails at once (FL_EREMOTE naming
                              * the server: stopped, hung or cut off) instead of waiting for
                              * its deadline, which only a slow server that still answers
                              * heartbeats is given; 0 means 6000; < 0 disables (as does
                              * heartbeat_ms < 0) */
    int dense_wire_dtype;   /* how dense values of push_dense and pull_dense travel:
                              * FL_FLOAT32 (0, the default) or FL_BFLOAT16 (half the bytes;
                              * rounded to nearest even on the way, the servers keep and
                              * update float32).  init_dense always sends float32. */
} fl_ps_client_opts;

/* Bytes this client moved through its request connections since it was created (frames
 * whole: headers, fixed parts and payloads; heartbeats, which have their own connections,
 * are not counted).  dense_*: the dense values alone (push / init payloads sent, pull
 * payloads received), in their wire dtype. */
typedef struct {
    uint64_t bytes_sent, bytes_received;
    uint64_t dense_bytes_sent, dense_bytes_received;
    uint64_t requests;
} fl_ps_traffic;

/* Fills zero fields from FLEET_PS_CONNECT_TIMEOUT_MS, FLEET_PS_REQUEST_TIMEOUT_MS,
 * FLEET_PS_BARRIER_TIMEOUT_MS, FLEET_PS_RETRY_MS, FLEET_PS_HEARTBEAT_MS,
 * FLEET_PS_SERVER_TIMEOUT_MS. */
FL_API int fl_ps_client_opts_from_env(fl_ps_client_opts *o);

/* Connects to every server (retrying while they start, up to connect_timeout_ms; the error
 * names the unreachable endpoint), checks that both sides have the same table list and
 * counts, and starts the heartbeat thread.  Caller frees with fl_ps_client_free.
 *
 * Thread safety: one client may be used from several threads; calls are serialized by a
 * lock (a call waits for the one in progress).  Use several clients for concurrency; in
 * sync mode use one client per worker for pushes. */
FL_API int fl_ps_client_create(const fl_ps_client_opts *opts, fl_ps_client **out);

/* Dense tables.  `values` / `out` / `grad` hold the whole table (rows*cols floats, row
 * major); the client splits it over the servers and sends to all of them in parallel. */

/* Sets the initial values (worker 0 after running its startup program).  With force = 0 a
 * server that already holds values (loaded from a checkpoint, or initialized earlier) keeps
 * them; *applied (may be NULL) is set to 1 if any server took the values. */
FL_API int fl_ps_client_init_dense(fl_ps_client *c, int table, const float *values, int force, int *applied);
FL_API int fl_ps_client_pull_dense(fl_ps_client *c, int table, float *out);
/* Pushes a gradient (or a delta for "sum" tables).  Sync mode: blocks until every worker
 * pushed this step (deadline barrier_timeout_ms). */
FL_API int fl_ps_client_push_dense(fl_ps_client *c, int table, const float *grad);
/* The same for n dense tables at once (tables[i] with outs[i] / grads[i], in this order):
 * every request is sent before the replies are read, so the n tables cost one round trip
 * per server instead of n.  Equivalent to n single calls in table order (sync mode sends
 * table by table when a table spans several frames per server). */
FL_API int fl_ps_client_pull_dense_many(fl_ps_client *c, int n, const int *tables, float *const *outs);
FL_API int fl_ps_client_push_dense_many(fl_ps_client *c, int n, const int *tables, const float *const *grads);

/* Sparse tables.  ids[n] (duplicates allowed, n may be 0), out / grads are n x dim.
 * Pull: each distinct id is requested once, one request per server, rows scattered back to
 * every position.  With is_training = 1 absent rows are created (subject to the entry
 * policy; unadmitted ids read as zeros); with 0 absent rows read as zeros and nothing is
 * created or counted. */
FL_API int fl_ps_client_pull_sparse(fl_ps_client *c, int table, const uint64_t *ids, int64_t n, float *out,
                                    int is_training);
/* Push: gradients of duplicate ids are summed first.  shows / clicks (each n floats, may be
 * NULL: show 1 and click 0 per position) feed the accessor statistics.  Every server
 * receives a request (possibly empty), so Adam's pows and sync steps advance everywhere.
 * Retried after a dropped connection with the same sequence number: applied once. */
FL_API int fl_ps_client_push_sparse(fl_ps_client *c, int table, const uint64_t *ids, int64_t n, const float *grads,
                                    const float *shows, const float *clicks);

/* Blocks until every worker has called barrier the same number of times (counted on
 * server 0; deadline barrier_timeout_ms).  Fails with FL_EREMOTE naming the worker if
 * one died or stopped meanwhile. */
FL_API int fl_ps_client_barrier(fl_ps_client *c);

/* Save modes (CtrCommonAccessor): 0 all rows (checkpoint); 1 delta (rows with score >=
 * base_threshold, delta_score >= delta_threshold and unseen_days <= delta_keep_days; their
 * delta_score is reset); 2 base (same with delta_threshold 0); 3 all rows, then every
 * row's unseen_days is incremented (the daily save).  Dense tables are saved whole in
 * every mode.  Writes every shard of every table, then the manifest (the commit point).
 * Call from one worker (typically 0, after a barrier); blocks (request deadline per
 * phase).  `step` is recorded in the manifest. */
FL_API int fl_ps_client_save(fl_ps_client *c, const char *dir, int mode, int64_t step);
/* Every server replaces its tables with the checkpoint's shards (as fl_ps_server_load).
 * *step (may be NULL) gets the manifest's step. */
FL_API int fl_ps_client_load(fl_ps_client *c, const char *dir, int64_t *step);
/* CtrCommonAccessor shrink of a sparse table on every server; *deleted (may be NULL) gets
 * the number of rows removed. */
FL_API int fl_ps_client_shrink(fl_ps_client *c, int table, int64_t *deleted);
/* Table statistics summed over servers (bytes_per_key recomputed from the sums). */
FL_API int fl_ps_client_table_stats(fl_ps_client *c, int table, fl_ps_table_stats *out);

/* Every row of a sparse table, page by page from each server in turn: fn receives ids[n]
 * and vals[n x dim] (valid during the call) and returns FL_OK to go on.  The table must not
 * change meanwhile (call between barriers, as the save paths do); a shard that loses rows
 * during the scan fails with FL_ESTATE.  Holds the client for the whole scan. */
typedef int (*fl_ps_scan_fn)(void *user, const uint64_t *ids, const float *vals, int64_t n, int dim);
FL_API int fl_ps_client_scan_sparse(fl_ps_client *c, int table, fl_ps_scan_fn fn, void *user);

/* The traffic counters (atomic: any thread may read them, also while another call runs). */
FL_API int fl_ps_client_traffic(const fl_ps_client *c, fl_ps_traffic *out);
/* Adds b's counters to a (a += b). */
FL_API void fl_ps_traffic_add(fl_ps_traffic *a, const fl_ps_traffic *b);

/* The traffic of a parameter-server worker of the fleet facade: its client and its
 * communicator's (async, half-async), counted until fleet_stop_worker and kept after it;
 * *examples (may be NULL): the examples its training steps took (rows of the batch).
 * fleet_stop_worker logs the same at info level, per example.  FL_ESTATE for a fleet that
 * is not a parameter-server one. */
struct fleet;
FL_API int fleet_ps_traffic(const struct fleet *f, fl_ps_traffic *out, int64_t *examples);

/* Tells every server this worker is done (Paddle's stop_worker).  Further calls fail with
 * FL_ESTATE.  Servers return from fl_ps_server_run once every worker has stopped. */
FL_API int fl_ps_client_stop(fl_ps_client *c);
/* Stops the heartbeat thread, closes the connections and frees (without stop: servers will
 * report this worker as lost).  NULL is ignored. */
FL_API void fl_ps_client_free(fl_ps_client *c);

#ifdef __cplusplus
}
#endif
#endif
