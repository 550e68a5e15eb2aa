/*
 * recompute.c - strategy.recompute for every runtime (Paddle's RecomputeOptimizer):
 * fleet_distributed_optimizer hands recompute_configs.checkpoints to the optimizer, whose
 * minimize() then appends backward with checkpoints (src/graph/recompute.c) before the
 * runtime's own rewrite (allreduce insertion, parameter-server send/recv) sees the
 * gradients.  The gradients are the same as without recompute, so the runtimes work
 * unchanged.  Unknown checkpoint names fail minimize() with FL_EINVAL naming them.
 */
#include "fleet_internal.h"

int fl__fleet_recompute_wire(fleet_t *f, fl_opt *opt)
{
    if (!f->strategy.recompute) return FL_OK;
    FL_INFO(FL_SUB_FLEET, "strategy.recompute: checkpoints %s", f->strategy.recompute_configs.checkpoints);
    return fl_opt_set_recompute(opt, f->strategy.recompute_configs.checkpoints);
}
