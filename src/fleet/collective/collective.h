/*
 * collective.h - the collective runtime's internals (src/fleet/collective/):
 *
 *   runtime.c  the runtime row: the workers' ring, lifecycle and saving
 *   rewrite.c  the program rewrite behind fleet_distributed_optimizer (fused bucket
 *              allreduce overlapping backward, sparse allgather, LocalSGD, gradient merge)
 *   ops.c      the ops it inserts (c_broadcast, c_allreduce_start / _wait,
 *              c_sparse_allgather, c_localsgd, gm_accumulate, gm_zero)
 *
 * The ops find their communicator through the attribute ring_id (ring.h).
 */
#ifndef FL_FLEET_COLLECTIVE_H
#define FL_FLEET_COLLECTIVE_H

#include "../ring.h"
#include "../runtime.h"

/* f->rt of a collective fleet */
typedef struct {
    fl_var *gm_cond; /* gradient merge: the apply-step condition */
} fl__coll_rt;

extern const fl_op_def *const fl__ops_collective[];

/* Registers the collective ops and installs the rewrite as opt's hook (f->ring exists). */
int fl__collective_install(fleet_t *f, fl_opt *opt);

#endif
