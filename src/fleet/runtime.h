/*
 * runtime.h - the interface between the fleet facade and a training architecture.
 *
 * The facade (fleet.c) checks handles and arguments, then calls through the runtime its
 * fleet_init chose; only a runtime knows what "init a worker" or "save" means for its
 * architecture.  Two rows exist:
 *
 *   fl__runtime_ps          src/fleet/ps/runtime.c          parameter servers (sync, async,
 *                                                           GEO: the mode table in ps/modes.c)
 *   fl__runtime_collective  src/fleet/collective/runtime.c  data parallel over the workers'
 *                                                           ring (also the local fallback)
 *
 * fleet_init takes the first row of fl__runtimes (fleet.c) whose accepts() says yes to the
 * role; the collective runtime accepts every role and so comes last.
 *
 * How to add a runtime (e.g. a heterogeneous or pipeline architecture):
 *   1. make src/fleet/<name>/runtime.c defining `const fl__runtime fl__runtime_<name>` with
 *      every hook below (none may be NULL; a hook with nothing to do returns FL_OK, one that
 *      does not apply returns a clear FL_ESTATE / FL_EUNSUPPORTED naming the call);
 *   2. declare it at the bottom of this file and add it to fl__runtimes in fleet.c, before
 *      the collective row;
 *   3. keep its state behind f->rt (allocated by init, released by free); nothing outside
 *      the runtime's folder reads it.
 * Calls reach a hook only after the facade checked the handle; `fn` in messages is the
 * public function's name.
 */
#ifndef FL_FLEET_RUNTIME_H
#define FL_FLEET_RUNTIME_H

#include "fleet_internal.h"

typedef struct fl__runtime {
    const char *name; /* "parameter-server", "collective": in logs and messages */
    /* 1 if this runtime trains jobs of this role */
    int (*accepts)(const fleet_role *role);
    /* fleet_init: allocate f->rt (may stay NULL).  No network yet. */
    int (*init)(fleet_t *f);
    /* fleet_distributed_optimizer: f->strategy is final; install the program rewrite on opt
     * (it runs inside fl_opt_minimize). */
    int (*distributed_optimizer)(fleet_t *f, fl_opt *opt);
    int (*init_worker)(fleet_t *f);
    int (*stop_worker)(fleet_t *f);
    int (*init_server)(fleet_t *f, const char *model_dir);
    int (*run_server)(fleet_t *f);
    int (*barrier_worker)(fleet_t *f);
    /* The communicator among the workers for util collectives and datasets: sets f->ring on
     * first use (left NULL for one worker or a local run).  Every worker makes this call. */
    int (*worker_ring)(fleet_t *f, const char *fn);
    int (*save_persistables)(fleet_t *f, fl_exe *exe, const char *dir, const fl_prog *prog);
    int (*save_inference_model)(fleet_t *f, fl_exe *exe, const char *dir, const char *const *feeds, int nfeed,
                                fl_var *const *targets, int ntarget, const fl_prog *prog);
    /* fleet_save_checkpoint (checkpoint.c), on every worker: save what the workers share
     * into dir (PS: every queued push delivered, then the servers' tables, written by the
     * first worker; collective: nothing, each worker saves its replica) */
    int (*checkpoint_shared)(fleet_t *f, const char *dir, int64_t step);
    /* A collective call among the workers: *all = 1 when every worker passed ok != 0. */
    int (*agree)(fleet_t *f, int ok, const char *fn, int *all);
    /* fleet_free: release f->rt (f->ring is the facade's) */
    void (*free)(fleet_t *f);
} fl__runtime;

extern const fl__runtime fl__runtime_ps;
extern const fl__runtime fl__runtime_collective;

#endif
