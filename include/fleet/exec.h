/*
 * fleet/exec.h - scopes and the executor.
 *
 * A scope maps variable names to tensors; a child scope sees its parent's variables.
 * The executor runs a program against a scope: run the startup program once, then the
 * main program with feeds and fetches, as Paddle's Executor.run.
 *
 * The executor compiles each program once into a flat plan of kernel calls with resolved
 * tensors, so a step does no name lookups.  An executor is used by one thread at a time;
 * several executors may share a root scope (Hogwild) when each has its own child scope.
 */
#ifndef FLEET_EXEC_H
#define FLEET_EXEC_H

#include "fleet/data.h"
#include "fleet/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_scope fl_scope;
typedef struct fl_exe fl_exe;

/* Creates a scope; parent may be NULL.  The parent must outlive the child. */
FL_API fl_scope *fl_scope_create(fl_scope *parent);
FL_API void fl_scope_free(fl_scope *s);
/* Finds a variable in s or its ancestors; NULL if absent. */
FL_API fl_tensor *fl_scope_find(const fl_scope *s, const char *name);
/* Finds a variable in s itself, creating an empty float32 tensor if absent. */
FL_API fl_tensor *fl_scope_var(fl_scope *s, const char *name);
/* Sets every element of the variable `name` (in s or its ancestors) to zero, keeping its
 * shape: resets accumulators such as the AUC statistics before an evaluation pass.
 * FL_ENOTFOUND if absent. */
FL_API int fl_scope_zero(fl_scope *s, const char *name);
/* Variables of s itself (not ancestors), in insertion order. */
FL_API int fl_scope_num_vars(const fl_scope *s);
FL_API const char *fl_scope_name_at(const fl_scope *s, int i);

/* Creates an executor running in `scope` (borrowed; NULL creates a private scope). */
FL_API fl_exe *fl_exe_create(fl_scope *scope);
FL_API void fl_exe_free(fl_exe *e);
FL_API fl_scope *fl_exe_scope(fl_exe *e);

typedef struct {
    const char *name;
    const fl_tensor *value;
} fl_feed;

/* Runs program p once.  Each feed is checked against its variable (dtype, rank, fixed
 * dimensions, LoD for lod_level 1) and copied in.  out[i] receives a borrowed pointer to
 * the tensor named fetch[i], valid until the next run on this executor.  Errors name the
 * variable and the expected and given shapes; nothing is half-run on a feed error. */
FL_API int fl_exe_run(fl_exe *e, fl_prog *p, const fl_feed *feed, int nfeed, const char *const *fetch, int nfetch,
                      fl_tensor **out);

/* Eager deletion (on by default; Paddle's FLAGS_eager_delete_tensor_gb = 0): during a run,
 * a non-persistable variable's buffer is freed right after the last op of the program that
 * uses it, unless the run fetches it, an op reads it before any op writes it (state kept
 * between steps; fed data excepted) or an op with a run condition touches it.  The lists
 * are computed once per program (plan), not per step.  A variable freed this way reads as
 * an empty tensor from the scope after the run: fetch what you need.  on = 0 keeps every
 * buffer (the behaviour before eager deletion). */
FL_API int fl_exe_set_eager_deletion(fl_exe *e, int on);
/* High-water mark, in bytes, of the buffers held by the non-persistable variables (the
 * activations, gradients and feeds; not parameters or optimizer state, not kernels' own
 * workspaces) of the program during the last fl_exe_run on e; a negative status for a bad
 * handle. */
FL_API int64_t fl_exe_peak_activation_bytes(const fl_exe *e);

/* ---- training from a dataset (Paddle's Executor.train_from_dataset) ---------------------- */

typedef struct {
    int64_t instances; /* examples read by every thread together */
    int64_t batches;
    double seconds; /* wall time of the pass */
    int nfetch;
    double fetch[16]; /* thread 0's last fetched values (a scalar, or the mean of a tensor) */
} fl_exe_dataset_stats;

/* Runs p once per batch of ds with `thread` trainer threads (<= 0: the dataset's thread
 * number; more than the dataset's readers are clamped to them; fewer read several readers'
 * shares each, so every instance is read once).  Hogwild, as Paddle's
 * MultiTrainer: each thread has a child scope of e's scope for activations and its own
 * plan; persistable variables (parameters, optimizer state, AUC statistics) live in e's
 * root scope and are updated by every thread without locks (Adam excepted: one update at
 * a time per parameter, src/graph/ops_optim.c).  BLAS runs single-threaded
 * inside trainer threads.  Fetched values are combined over all threads (a cumulative one,
 * made by an op that updates persistable state such as auc: the latest; others: the mean
 * per example).  Every print_period batches of the process (0: never) a line shows them
 * (labelled by fetch_info, or the names) with the epoch, the percent of the data read,
 * examples/s, elapsed time and ETA; on a terminal one line rewritten in place.  With a
 * metrics writer (fl_exe_set_metrics or FLEET_METRICS_DIR, fleet/metrics.h) the same go to
 * CSV and TensorBoard files; a directory that cannot be opened fails the call first.  The first error of any thread stops every thread and
 * is returned (naming the thread and batch).  Programs rewritten for collective or
 * synchronous parameter-server training run one trainer per process: thread <= 0 then
 * chooses 1 (logged at INFO) and an explicit count resolving to more fails (FL_EINVAL).  A
 * program with trainable parameters but no backward or optimizer op (fl_opt_minimize not
 * called) trains nothing: the first pass per executor and program warns.  stats may be
 * NULL.  Blocks until the pass ends. */
FL_API int fl_exe_train_from_dataset(fl_exe *e, fl_prog *p, fl_dataset *ds, int thread, const char *const *fetch_list,
                                     const char *const *fetch_info, int nfetch, int print_period,
                                     fl_exe_dataset_stats *stats);
/* The same for inference: p is typically fl_prog_clone(main, 1) (no backward, no update). */
FL_API int fl_exe_infer_from_dataset(fl_exe *e, fl_prog *p, fl_dataset *ds, int thread, const char *const *fetch_list,
                                     const char *const *fetch_info, int nfetch, int print_period,
                                     fl_exe_dataset_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
