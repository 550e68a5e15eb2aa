/* fleet_internal.h - role and facade structures shared inside src/fleet/ and its runtimes. */
#ifndef FL_FLEET_INTERNAL_H
#define FL_FLEET_INTERNAL_H

#include "fleet/fleet.h"
#include "../graph/graph_internal.h"
#include "fleet/net.h"

#define FLEET_ROLE_MAGIC 0x524f4c45u
#define FLEET_MAGIC 0x464c4554u

struct fleet_role {
    uint32_t magic;
    int is_collective;
    int distributed; /* 0: non-distributed fallback */
    fleet_role_kind kind;
    int worker_index, server_index, worker_num;
    char **workers; /* worker endpoints (may be empty in PS mode) */
    int nworkers;
    char **servers;
    int nservers;
    int mpi_ref; /* 1: holds a reference on MPI (role_mpi.c), dropped by fleet_role_free */
};

struct fl__runtime;
struct fl_ring;

struct fleet {
    uint32_t magic;
    fleet_role *role;
    fleet_strategy strategy;
    char *workers_str, *servers_str;
    const struct fl__runtime *runtime; /* chosen once by fleet_init (runtime.h) */
    void *rt;                          /* the runtime's own state */
    struct fl_ring *ring;              /* the workers' communicator (ring.h), made on first use */
    fl_net_secret secret;              /* the job secret, loaded once (fl__fleet_secret) */
    int secret_state;                  /* 0: not read yet, 1: loaded, 2: none configured */
    int64_t ckpt_seq;                  /* the last checkpoint saved or loaded (checkpoint.c) */
    int ckpt_known;                    /* ckpt_seq is set */
};

/* The job secret of this fleet: read from FLEET_JOB_SECRET / FLEET_JOB_SECRET_FILE on the
 * first call, kept (and wiped by fleet_free), and passed down to the PS client, server and
 * the collective ring: the one place the fleet layer reads it.  *out is NULL when none is
 * configured and `required` is 0; with `required`, no secret is FL_EINVAL naming both
 * variables and `fn`.  A malformed secret is an error either way. */
int fl__fleet_secret(fleet_t *f, const char *fn, int required, const fl_net_secret **out);

/* The workers' communicator for collective calls every worker makes (util collectives,
 * global shuffle): f->ring, made on first use by the runtime's worker_ring.  Stays NULL for
 * a local run or one worker (the caller then acts alone). */
int fl__fleet_worker_ring(fleet_t *f, const char *fn);
/* fleet_layer_allreduce's and fleet_layer_allgather's op (collective/ops.c): appends op
 * `type` (c_allreduce with reduce_type, c_allgather) of x to x's program; ring_id -1: one
 * worker (Out = X); nranks: the workers (the gathered first dimension). */
fl_var *fl__c_collective_layer(const char *type, fl_var *x, int ring_id, int nranks, const char *reduce_type);

/* strategy.amp: fl_amp_decorate_optimizer with amp_configs (amp.c): the cast rewrite before
 * backward, float16 loss scaling after the runtime's allreduce.  Nothing when amp is false.
 * Parameters and gradients stay float32, so allreduce and the servers see float32;
 * float16 with parameter servers is refused (FL_EUNSUPPORTED). */
int fl__fleet_amp_wire(fleet_t *f, fl_opt *opt);
/* strategy.recompute: makes minimize() append backward with recompute_configs.checkpoints
 * (fl_opt_set_recompute; recompute.c).  Nothing when recompute is false. */
int fl__fleet_recompute_wire(fleet_t *f, fl_opt *opt);

/* strategy.lars / strategy.lamb, as Paddle's LarsOptimizer and LambOptimizer meta
 * optimizers: the Momentum optimizer becomes lars_momentum, the Adam one lamb, in place,
 * before the runtime's distributed_optimizer (meta_optim.c).  Collective runs and local
 * (non-distributed) ones; a parameter-server run is FL_EUNSUPPORTED, as is another inner
 * optimizer.  Nothing when both are false. */
int fl__fleet_meta_optim(fleet_t *f, fl_opt *opt);

/* strategy.fleet_desc_configs: checks the sparse table class against sparse_ssd_path and
 * sparse_mem_budget_mb (strategy.c); *ssd (may be NULL) gets 1 for an SSD class.  Used by
 * fleet_strategy_check and by the PS runtime when it makes the servers' tables. */
int fl__strategy_ssd_table(const fleet_strategy *s, int *ssd);

/* strategy.dgc_configs.sparsity as numbers (out: FLEET_DGC_MAX_SPARSITY entries); FL_EINVAL
 * naming the field when malformed (strategy.c). */
int fl__strategy_dgc_sparsity(const fleet_strategy *s, float *out, int *n);

/* Splits "a:1,b:2" into a malloc'ed array of malloc'ed endpoints, validating host:port.
 * `what` names the source (environment variable or argument) in errors. */
int fl__parse_endpoints(const char *list, const char *what, char ***out, int *n);
void fl__free_strv(char **v, int n);

#endif
