/*
 * amp.c - strategy.amp for every runtime: fleet_distributed_optimizer hands amp_configs to
 * fl_amp_decorate_optimizer (src/graph/amp_scaling.c), so minimize() runs the cast rewrite
 * on the forward program before backward, and for float16 adds loss scaling after the
 * runtime's own rewrite (allreduce insertion): the gradients checked for inf/NaN are the
 * reduced ones, identical on every rank, so every rank skips the same steps.
 *
 * What the runtimes see: gradients of float32 parameters, in float32 (the casts' gradients
 * turn the low-precision products' gradients back), so the collective allreduce works
 * unchanged.  Parameter servers keep float32 tables and work unchanged with bfloat16;
 * float16 with parameter servers is refused (the servers apply the pushed gradients, so
 * the check and the skipped step would have to move into the communicator: not done).
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
    if (f16 && f->runtime == &fl__runtime_ps)
        return fl__err(FL_EUNSUPPORTED,
                       "strategy.amp with amp_configs.dtype = %s and parameter servers: float16 loss scaling "
                       "(the step skipped on inf/NaN) is not implemented with servers; use bfloat16, which needs "
                       "no loss scaling and keeps the servers' float32 tables",
                       dt);
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
    return fl_amp_decorate_optimizer(opt, &o);
}
