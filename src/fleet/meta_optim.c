/*
 * meta_optim.c - strategy.lars and strategy.lamb: Paddle's LarsOptimizer and LambOptimizer
 * meta optimizers.  fleet_distributed_optimizer calls fl__fleet_meta_optim before the
 * runtime's own distributed_optimizer, so the runtime sees the replaced optimizer (its
 * allreduce rewrite works unchanged: the update ops read the reduced gradients).
 *
 * As in Paddle, LARS replaces a Momentum optimizer (same learning rate and momentum;
 * lars_configs gives lars_coeff, lars_weight_decay, epsilon, exclude_from_weight_decay) and
 * LAMB an Adam one (same learning rate, betas and epsilon; lamb_configs gives
 * lamb_weight_decay and exclude_from_weight_decay).  Paddle applies both only to collective
 * training; here a parameter-server run with either set is an error rather than a silent
 * no-op, because the servers run their own update rules.
 */
#include <string.h>

#include "fleet_internal.h"

int fl__fleet_meta_optim(fleet_t *f, fl_opt *opt)
{
    const fleet_strategy *s = &f->strategy;
    /* strategy.dgc: Paddle's DGCOptimizer applies to collective Momentum only; the rewrite
     * itself is the collective runtime's (collective/dgc.c) */
    if (s->dgc && f->role->distributed && !f->role->is_collective)
        return fl__err(FL_EUNSUPPORTED, "strategy.dgc works with collective training (as in Paddle); this is a "
                                        "parameter-server run, whose servers receive every gradient dense");
    if (s->dgc && strcmp(fl_opt_type(opt), "momentum") != 0)
        return fl__err(FL_EUNSUPPORTED,
                       "strategy.dgc works with the Momentum optimizer only (Paddle's DGCMomentumOptimizer); "
                       "the optimizer is %s",
                       fl_opt_type(opt));
    if (!s->lars && !s->lamb) return FL_OK;
    const char *which = s->lars ? "strategy.lars" : "strategy.lamb";
    if (f->role->distributed && !f->role->is_collective)
        return fl__err(FL_EUNSUPPORTED,
                       "%s works with collective training (as in Paddle); this is a parameter-server "
                       "run, whose servers apply their own optimizer",
                       which);
    int st = s->lars ? fl__opt_to_lars(opt, (float)s->lars_configs.lars_coeff, (float)s->lars_configs.lars_weight_decay,
                                       (float)s->lars_configs.epsilon, s->lars_configs.exclude_from_weight_decay)
                     : fl__opt_to_lamb(opt, (float)s->lamb_configs.lamb_weight_decay,
                                       s->lamb_configs.exclude_from_weight_decay);
    if (st == FL_OK) FL_INFO(FL_SUB_FLEET, "%s: the optimizer is now %s", which, fl_opt_type(opt));
    return st;
}
