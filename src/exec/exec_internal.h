/* exec_internal.h - scope structure shared inside exec/. */
#ifndef FL_EXEC_INTERNAL_H
#define FL_EXEC_INTERNAL_H

#include <pthread.h>

#include "fleet/exec.h"
#include "../graph/graph_internal.h"

#define FL_SCOPE_MAGIC 0x53434f50u
#define FL_EXE_MAGIC 0x45584543u

struct fl_scope {
    uint32_t magic;
    fl_scope *parent;
    fl_strmap map; /* name -> index into tensors/names */
    fl_tensor **tensors;
    char **names;
    int n, cap;
};

/* What an executor keeps for metrics and progress (src/exec/metrics.c, trainer.c). */
typedef struct fl_metrics fl_metrics;
typedef struct {
    fl_metrics *m; /* owned; NULL: no metrics */
    int decided;   /* fl_exe_set_metrics called, or FLEET_METRICS_DIR looked at */
    int epochs;    /* training passes run so far (the epoch number of the next) */
    int64_t steps; /* batches trained so far, every pass and thread together */
} fl__exe_metrics;
fl__exe_metrics *fl__exe_metrics_of(fl_exe *e);
/* Closes the writer (a write error is logged as a warning). */
void fl__exe_metrics_free(fl__exe_metrics *x);

/* eager.c: eager deletion and the byte count of a plan (see there). */
typedef struct {
    int nvars;
    int on;              /* release dead buffers (fl_exe_set_eager_deletion) */
    int *dead, *dead_at; /* dead[dead_at[i] .. dead_at[i + 1]): var indices released after op i */
    char *tracked;       /* per var: non-persistable (its bytes are counted) */
    char *fetched;       /* per var: fetched by the current run (the executor marks them) */
    size_t *held, *want; /* per var: bytes counted now; bytes it held when last released */
    void *pool;          /* released buffers */
    int npool, cap_pool;
    size_t pool_bytes;
    size_t bytes, peak; /* now and the high-water mark of the current run */
    uint64_t run;
} fl__eager;
/* Computes the lists for p (is_input: per var, read before written). */
int fl__eager_build(fl__eager *g, const fl_prog *p, const char *is_input);
void fl__eager_free(fl__eager *g);
/* At the start of a run, after marking fetched vars and before copying the feeds in (fed:
 * their var indices). */
void fl__eager_begin(fl__eager *g, fl_tensor *const *tensors, const int *fed, int nfed);
void fl__eager_before_op(fl__eager *g, const fl_op *op, fl_tensor *const *tensors);
void fl__eager_after_op(fl__eager *g, int i, const fl_op *op, fl_tensor *const *tensors);
void fl__eager_end(fl__eager *g);

/* profile.c: FLEET_PROFILE_OPS=1 times each op type (report at exit); fl__prof_add adds ns
 * to a type's row. */
int fl__prof_on(void);
void fl__prof_add(const char *type, uint64_t ns);

/* Root-most ancestor of s. */
fl_scope *fl__scope_root(fl_scope *s);

/* executor.c: 1 the first time it is called for program p on executor e, 0 afterwards (and
 * when out of memory): one-time notices per executor and program. */
int fl__exe_first_notice(fl_exe *e, const fl_prog *p);

/* untrained.c: a trainable parameter of p when p has no backward and no optimizer op (a
 * training pass would leave it unchanged: fl_opt_minimize was forgotten); NULL otherwise. */
const fl_var *fl__untrained_param(const fl_prog *p);
/* Warns once per executor and program when fl__untrained_param(p) is not NULL; fn names
 * the training call in the message. */
void fl__untrained_warn(fl_exe *e, const fl_prog *p, const char *fn);

/* The trainer threads of one pass (src/exec/tgroup.c): kernels meet there to act once per
 * worker step.  fl__tgroup_meet runs leader(arg) once, in the last thread to arrive, after
 * every thread still in the pass has arrived (at once when called outside a pass) and
 * returns its status in every thread. */
typedef struct fl__tgroup {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int active, arrived;
    uint64_t gen;
    int st;
    char msg[512];
    int (*leader)(void *arg);
    void *arg;
} fl__tgroup;
void fl__tgroup_init(fl__tgroup *g, int threads);
void fl__tgroup_destroy(fl__tgroup *g);
void fl__tgroup_enter(fl__tgroup *g);
void fl__tgroup_leave(fl__tgroup *g);
int fl__tgroup_meet(int (*leader)(void *arg), void *arg);

#endif
