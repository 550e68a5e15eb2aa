/*
 * amp.c - strategy.amp for every runtime: fleet_distributed_optimizer hands amp_configs to
 * fl_amp_decorate_optimizer (src/graph/amp_scaling.c), so minimize() runs the cast rewrite
 * on the forward program before backward, and for float16 adds loss scaling after the
 * runtime's own rewrite (allreduce insertion): the gradients checked for inf/NaN are the
 * reduced ones, identical on every rank, so every rank skips the same steps.
 *
 * What the runtimes see: gradients of float32 parameters, in float32 (the casts' gradients
 * turn the low-precision products' gradients back), so the collective allreduce works
 * unchanged.  Parameter servers keep float32 tables.  With float16 the worker pushes the
 * unscaled gradients (ps_send comes after check_finite_and_unscale) and skips its push on a
 * step with inf/NaN (ps_send runs under the same condition as the update ops: the PS
 * rewrite, src/fleet/ps/rewrite.c); sync mode refuses float16, since its servers wait for
 * every worker's push of a step.
 *
 * Level O2 (use_pure_fp16): the collective runtime (and the local fallback) reduces the
 * float32 master weights' gradients in float32 as above; the low-precision parameter copies
 * are refreshed after the updates on every rank alike (src/graph/amp_o2.c).  Parameter
 * servers are refused here: their tables are the float32 parameters a worker pulls into its
 * scope, and nothing refreshes the copies from a pull.
 */
#include <string.h>

#include "fleet_internal.h"
#include "runtime.h"

int fl__fleet_amp_wire(fleet_t *f, fl_opt *opt)
{
    if (!f->strategy.amp) return FL_OK;
    const fleet_strategy *s = &f->strategy;
    const char *dt = s->amp_configs.dtype;
    int f16 = !strcmp(dt, "float16") || !strcmp(dt, "fp16");
    fl_amp_opts o;
    memset(&o, 0, sizeof o);
    o.dtype = f16 ? FL_FLOAT16 : FL_BFLOAT16;
    o.custom_white_list = s->amp_configs.custom_white_list;
    o.custom_black_list = s->amp_configs.custom_black_list;
    o.init_loss_scaling = s->amp_configs.init_loss_scaling;
    o.incr_every_n_steps = s->amp_configs.incr_every_n_steps;
    o.decr_every_n_nan_or_inf = s->amp_configs.decr_every_n_nan_or_inf;
    o.incr_ratio = s->amp_configs.incr_ratio;
    o.decr_ratio = s->amp_configs.decr_ratio;
    o.static_loss_scaling = !s->amp_configs.use_dynamic_loss_scaling;
    o.use_pure_fp16 = s->amp_configs.use_pure_fp16;
    if (o.use_pure_fp16 && f->runtime == &fl__runtime_ps)
        return fl__err(FL_EUNSUPPORTED,
                       "fleet_distributed_optimizer: amp_configs.use_pure_fp16 (AMP level O2) with parameter servers "
                       "is not implemented (a pull refreshes the float32 parameters, not their %s copies); use "
                       "use_pure_fp16 = false (level O1) or the collective runtime",
                       f16 ? "float16" : "bfloat16");
    return fl_amp_decorate_optimizer(opt, &o);
}
