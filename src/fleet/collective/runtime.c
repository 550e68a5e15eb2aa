/*
 * runtime.c - the collective runtime: every worker holds a full replica and gradients are
 * summed over the workers' ring (ring.h); also the local fallback (a role with no
 * distributed environment trains alone on a ring of one).
 *
 * The ring is made on the first call that needs it (a rendezvous with every worker, bounded
 * by the collective deadline).  init_worker / stop_worker have nothing to connect; saving
 * runs on the first worker and its outcome is shared by an allreduce, so every worker
 * returns after the files are committed, or fails with the first worker's failure.
 */
#include <stdlib.h>
#include <string.h>

#include "collective.h"

static int accepts(const fleet_role *role)
{
    (void)role;
    return 1; /* the fallback row: see runtime.h */
}

static int ring(fleet_t *f)
{
    if (f->ring) return FL_OK;
    const fl_net_secret *sec = NULL;
    FL_CHECK(fl__fleet_secret(f, "collective training", f->role->nworkers > 1, &sec));
    /* strategy.allreduce_dtype (our extension) when set, else FLEET_COLL_ALLREDUCE_DTYPE */
    const char *ad = strcmp(f->strategy.allreduce_dtype, "float32") ? f->strategy.allreduce_dtype : NULL;
    return fl__ring_create(f->role, sec, ad, &f->ring);
}

static int init(fleet_t *f)
{
    f->rt = calloc(1, sizeof(fl__coll_rt));
    return f->rt ? FL_OK : fl__err(FL_ENOMEM, "fleet_init: out of memory");
}

static int distributed_optimizer(fleet_t *f, fl_opt *opt)
{
    FL_CHECK(ring(f));
    return fl__collective_install(f, opt);
}

static int no_connection(fleet_t *f) { return ring(f); }

static int stop_worker(fleet_t *f)
{
    fl__dgc_report(f);
    return ring(f);
}

static int no_server(fleet_t *f, const char *fn)
{
    (void)f;
    return fl__err(FL_ESTATE, "%s: a collective job has no servers", fn);
}

static int init_server(fleet_t *f, const char *model_dir)
{
    (void)model_dir;
    return no_server(f, "fleet_init_server");
}

static int run_server(fleet_t *f) { return no_server(f, "fleet_run_server"); }

static int barrier_worker(fleet_t *f)
{
    FL_CHECK(ring(f));
    return fl__ring_barrier(f->ring);
}

static int worker_ring(fleet_t *f, const char *fn)
{
    (void)fn;
    return ring(f);
}

/* Every rank learns whether the first worker's save (status st there) succeeded. */
static int shared_outcome(fleet_t *f, int st, const char *fn, const char *dir)
{
    int64_t v = st == FL_OK;
    int bst = fl__ring_allreduce(f->ring, &v, 1, FL_INT64, "min");
    if (bst != FL_OK) return bst;
    if (st != FL_OK) return st;
    if (!v) return fl__err(FL_EREMOTE, "%s: the first worker failed to save to '%s'", fn, dir);
    return FL_OK;
}

static int save_persistables(fleet_t *f, fl_exe *exe, const char *dir, const fl_prog *prog)
{
    FL_CHECK(ring(f));
    int st = fleet_is_first_worker(f) ? fl_io_save_persistables(exe, dir, prog) : FL_OK;
    return shared_outcome(f, st, "fleet_save_persistables", dir);
}

static int save_inference_model(fleet_t *f, fl_exe *exe, const char *dir, const char *const *feeds, int nfeed,
                                fl_var *const *targets, int ntarget, const fl_prog *prog)
{
    FL_CHECK(ring(f));
    int st = fleet_is_first_worker(f) ? fl_io_save_inference_model(exe, dir, feeds, nfeed, targets, ntarget, prog) : FL_OK;
    return shared_outcome(f, st, "fleet_save_inference_model", dir);
}

static int checkpoint_shared(fleet_t *f, const char *dir, int64_t step)
{
    (void)dir;
    (void)step;
    return ring(f); /* every worker holds the whole model: nothing is shared */
}

static int agree(fleet_t *f, int ok, const char *fn, int *all)
{
    (void)fn;
    FL_CHECK(ring(f));
    int64_t v = ok != 0;
    FL_CHECK(fl__ring_allreduce(f->ring, &v, 1, FL_INT64, "min"));
    *all = v != 0;
    return FL_OK;
}

static void rt_free(fleet_t *f)
{
    free(f->rt);
    f->rt = NULL;
}

const fl__runtime fl__runtime_collective = {
    .name = "collective",
    .accepts = accepts,
    .init = init,
    .distributed_optimizer = distributed_optimizer,
    .init_worker = no_connection,
    .stop_worker = stop_worker,
    .init_server = init_server,
    .run_server = run_server,
    .barrier_worker = barrier_worker,
    .worker_ring = worker_ring,
    .save_persistables = save_persistables,
    .save_inference_model = save_inference_model,
    .checkpoint_shared = checkpoint_shared,
    .agree = agree,
    .free = rt_free,
};
