/*
 * collective.h - the collective runtime's internals (src/fleet/collective/):
 *
 *   runtime.c  the runtime row: the workers' ring, lifecycle and saving
 *   rewrite.c  the program rewrite behind fleet_distributed_optimizer (fused bucket
 *              allreduce overlapping backward, sparse allgather, LocalSGD, gradient merge)
 *   ops.c      the ops it inserts (c_broadcast, c_allreduce_start / _wait,
 *              c_sparse_allgather, c_localsgd, gm_accumulate, gm_zero)
 *   dgc.c      strategy.dgc: the rewrite to dgc / c_dgc_allreduce / dgc_momentum and the
 *              exchange op c_dgc_allreduce
 *
 * The ops find their communicator through the attribute ring_id (ring.h).
 */
#ifndef FL_FLEET_COLLECTIVE_H
#define FL_FLEET_COLLECTIVE_H

#include "../ring.h"
#include "../runtime.h"

/* f->rt of a collective fleet */
typedef struct {
    fl_var *gm_cond;    /* gradient merge: the apply-step condition */
    int64_t dgc_params; /* strategy.dgc: parameters compressed */
} fl__coll_rt;

extern const fl_op_def *const fl__ops_collective[];
extern const fl_op_def *const fl__ops_dgc_collective[]; /* dgc.c: c_dgc_allreduce */

/* strategy.dgc (dgc.c).  fl__dgc_applies: whether pg's gradient is compressed (strategy.dgc,
 * more than one worker, a dense float32 parameter of at least 16384 elements); those
 * gradients stay out of the bucket allreduce.  fl__dgc_rewrite: after the update ops,
 * replaces their momentum ops (see dgc.c).  fl__dgc_report: the info line at stop_worker. */
int fl__dgc_applies(const fleet_t *f, const fl_param_grad *pg);
int fl__dgc_rewrite(fleet_t *f, fl_prog *p, fl_opt_hook_ctx *h);
void fl__dgc_report(fleet_t *f);

/* Registers the collective ops and installs the rewrite as opt's hook (f->ring exists). */
int fl__collective_install(fleet_t *f, fl_opt *opt);

#endif
