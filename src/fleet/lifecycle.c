/* lifecycle.c - worker/server lifecycle, fleet.util collectives and distributed saving. */
#include <string.h>

#include "comm.h"

static int check(fleet_t *f, const char *fn)
{
    if (!f || f->magic != FLEET_MAGIC) return fl__err(FL_EINVAL, "%s: fleet handle is NULL or invalid", fn);
    return fl__fleet_comm(f);
}

static int ps_unavailable(const char *fn)
{
    return fl__err(FL_EUNSUPPORTED, "%s: parameter-server training is not available in this build", fn);
}

int fleet_init_worker(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_init_worker"));
    if (!fleet_is_worker(f)) return fl__err(FL_ESTATE, "fleet_init_worker: this process is a server");
    if (!f->role->distributed || f->role->is_collective) return FL_OK; /* nothing to connect */
    return ps_unavailable("fleet_init_worker");
}

int fleet_stop_worker(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_stop_worker"));
    if (!fleet_is_worker(f)) return fl__err(FL_ESTATE, "fleet_stop_worker: this process is a server");
    if (!f->role->distributed || f->role->is_collective) return FL_OK;
    return ps_unavailable("fleet_stop_worker");
}

int fleet_init_server(fleet_t *f, const char *model_dir)
{
    (void)model_dir;
    FL_CHECK(check(f, "fleet_init_server"));
    if (!fleet_is_server(f)) return fl__err(FL_ESTATE, "fleet_init_server: this process is not a server");
    return ps_unavailable("fleet_init_server");
}

int fleet_run_server(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_run_server"));
    if (!fleet_is_server(f)) return fl__err(FL_ESTATE, "fleet_run_server: this process is not a server");
    return ps_unavailable("fleet_run_server");
}

int fleet_barrier_worker(fleet_t *f)
{
    FL_CHECK(check(f, "fleet_barrier_worker"));
    return f->comm ? fl__comm_barrier(f->comm) : FL_OK;
}

int fleet_util_barrier(fleet_t *f) { return fleet_barrier_worker(f); }

int fleet_util_all_reduce(fleet_t *f, void *buf, size_t count, fl_dtype dtype, const char *mode)
{
    FL_CHECK(check(f, "fleet_util_all_reduce"));
    if (!mode || (strcmp(mode, "sum") && strcmp(mode, "max") && strcmp(mode, "min")))
        return fl__err(FL_EINVAL, "fleet_util_all_reduce: mode '%s' is invalid: expected sum, max or min", mode ? mode : "(null)");
    if (count && !buf) return fl__err(FL_EINVAL, "fleet_util_all_reduce: buffer is NULL");
    return f->comm ? fl__comm_allreduce(f->comm, buf, count, dtype, mode) : FL_OK;
}

int fleet_util_all_gather(fleet_t *f, const void *send, void *recv, size_t count, fl_dtype dtype)
{
    FL_CHECK(check(f, "fleet_util_all_gather"));
    if (count && (!send || !recv)) return fl__err(FL_EINVAL, "fleet_util_all_gather: buffer is NULL");
    if (f->comm) return fl__comm_allgather(f->comm, send, recv, count, dtype);
    if (count) memmove(recv, send, count * fl_dtype_size(dtype));
    return FL_OK;
}

int fleet_save_persistables(fleet_t *f, fl_exe *exe, const char *dir, const fl_prog *prog)
{
    FL_CHECK(check(f, "fleet_save_persistables"));
    if (f->role->distributed && !f->role->is_collective) return ps_unavailable("fleet_save_persistables");
    int st = fleet_is_first_worker(f) ? fl_io_save_persistables(exe, dir, prog) : FL_OK;
    /* every rank returns after the file is committed (or with the first worker's failure
     * reported on that worker) */
    int ok = st == FL_OK, all = ok;
    if (f->comm) {
        int64_t v = ok;
        int bst = fl__comm_allreduce(f->comm, &v, 1, FL_INT64, "min");
        if (bst != FL_OK) return bst;
        all = v != 0;
    }
    if (st != FL_OK) return st;
    if (!all) return fl__err(FL_EREMOTE, "fleet_save_persistables: the first worker failed to save to '%s'", dir);
    return FL_OK;
}

int fleet_save_inference_model(fleet_t *f, fl_exe *exe, const char *dir, const char *const *feeds, int nfeed,
                               fl_var *const *targets, int ntarget, const fl_prog *prog)
{
    FL_CHECK(check(f, "fleet_save_inference_model"));
    if (f->role->distributed && !f->role->is_collective) return ps_unavailable("fleet_save_inference_model");
    int st = fleet_is_first_worker(f) ? fl_io_save_inference_model(exe, dir, feeds, nfeed, targets, ntarget, prog) : FL_OK;
    if (f->comm) {
        int64_t v = st == FL_OK;
        int bst = fl__comm_allreduce(f->comm, &v, 1, FL_INT64, "min");
        if (bst != FL_OK) return bst;
        if (st == FL_OK && !v) return fl__err(FL_EREMOTE, "fleet_save_inference_model: the first worker failed to save to '%s'", dir);
    }
    return st;
}
