/*
 * amp.c - strategy.amp for every runtime: fleet_distributed_optimizer sets a hook that runs
 * fl_amp_decorate (src/graph/amp.c) on the forward program when minimize() starts, before
 * backward and before the runtime's own rewrite (allreduce insertion, PS send/recv).
 *
 * What the runtimes then see: gradients of float32 parameters, in float32 (the casts'
 * gradients turn the bfloat16 products' gradients back), so the collective allreduce and
 * the parameter servers work unchanged and servers keep float32 tables.
 *
 * amp_configs: custom_white_list / custom_black_list and dtype are used; use_pure_fp16 is
 * refused by fleet_strategy_check; the loss-scaling fields are accepted and not used,
 * because bfloat16 has float32's exponent range (said once at info level).
 */
#include <string.h>

#include "fleet_internal.h"

static int amp_hook(void *user, int phase, fl_opt_hook_ctx *ctx)
{
    fleet_t *f = user;
    if (phase != FL_HOOK_BEFORE_BACKWARD) return FL_OK;
    fl_amp_opts o = {FL_BFLOAT16, f->strategy.amp_configs.custom_white_list, f->strategy.amp_configs.custom_black_list};
    int n = fl_amp_decorate(ctx->prog, &o);
    if (n < 0) return n;
    FL_INFO(FL_SUB_FLEET, "strategy.amp: %d op(s) compute in bfloat16 (loss scaling is not used with bfloat16)", n);
    return FL_OK;
}

int fl__fleet_amp_wire(fleet_t *f, fl_opt *opt)
{
    if (!f->strategy.amp) return FL_OK;
    return fl__opt_set_pre_hook(opt, amp_hook, f);
}
