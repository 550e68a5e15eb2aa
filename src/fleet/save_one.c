/*
 * save_one.c - fleet_save_persistables_alone / fleet_save_inference_model_alone: saving by
 * one worker with no barrier, as Paddle programs call fleet.save_* (only under
 * is_first_worker()).  fleet_save_persistables (checkpoint and runtime code) is the
 * collective form every worker calls.
 */
#include "fleet_internal.h"
#include "ps/fleet_ps.h"

static int check_args(fleet_t *f, fl_exe *exe, const char *dir, const char *fn)
{
    if (!f) return fl__err(FL_EINVAL, "%s: fleet is NULL", fn);
    if (!exe) return fl__err(FL_EINVAL, "%s: executor is NULL", fn);
    if (!dir || !*dir) return fl__err(FL_EINVAL, "%s: directory is NULL or empty", fn);
    if (!fleet_is_worker(f)) return fl__err(FL_ESTATE, "%s: this process is a server; workers save", fn);
    return FL_OK;
}

static int parameter_server(fleet_t *f) { return fleet_is_distributed(f) && !fleet_is_collective(f); }

int fleet_save_persistables_alone(fleet_t *f, fl_exe *exe, const char *dir, const fl_prog *prog)
{
    FL_CHECK(check_args(f, exe, dir, "fleet_save_persistables_alone"));
    if (parameter_server(f)) return fl__ps_save_alone(f, exe, dir, NULL, 0, NULL, 0, prog, 0);
    if (!prog) return fl__err(FL_EINVAL, "fleet_save_persistables_alone: program is NULL");
    return fl_io_save_persistables(exe, dir, prog);
}

int fleet_save_inference_model_alone(fleet_t *f, fl_exe *exe, const char *dir, const char *const *feeds, int nfeed,
                                     fl_var *const *targets, int ntarget, const fl_prog *prog)
{
    FL_CHECK(check_args(f, exe, dir, "fleet_save_inference_model_alone"));
    if (parameter_server(f)) return fl__ps_save_alone(f, exe, dir, feeds, nfeed, targets, ntarget, prog, 1);
    if (!prog) return fl__err(FL_EINVAL, "fleet_save_inference_model_alone: program is NULL");
    return fl_io_save_inference_model(exe, dir, feeds, nfeed, targets, ntarget, prog);
}
