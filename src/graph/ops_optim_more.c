/*
 * ops_optim_more.c - the rmsprop update op (Paddle's RMSPropOptimizer) and l1_decay, the
 * gradient rewrite of Paddle's L1Decay regularizer.
 *
 *   rmsprop    Param, Grad, LearningRate, Moment, MeanSquare, MeanGrad -> ParamOut,
 *              MomentOut, MeanSquareOut, MeanGradOut (in place, as ops_optim.c's), with g the
 *              gradient plus l2 * param and lr the learning rate times lr_scale:
 *                ms  = rho * ms + (1 - rho) * g^2
 *                mg  = rho * mg + (1 - rho) * g                     (centered only)
 *                mom = momentum * mom + lr * g / sqrt(ms - mg^2 + epsilon)   (centered)
 *                mom = momentum * mom + lr * g / sqrt(ms + epsilon)          (otherwise)
 *                p  -= mom
 *              Dense gradients only (a sparse one is a build error naming the parameter).
 *   l1_decay   Param, Grad -> Out = Grad + coeff * sign(Param); a SelectedRows gradient
 *              gets the term on its rows only (Paddle's L1Decay on sparse gradients).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

/* ---- rmsprop ------------------------------------------------------------------------------ */

static int infer_rmsprop(fl_op *op)
{
    FL_CHECK(fl__optim_infer_update(op));
    const char *w = op->in[0].vars[0]->name;
    if (op->in[1].vars[0]->is_sparse_grad)
        return fl__op_error(op, "parameter '%s' has a sparse gradient; RMSProp takes dense gradients only here", w);
    double rho = fl__attr_f(op, "decay", 0.95), eps = fl__attr_f(op, "epsilon", 1e-6);
    double mom = fl__attr_f(op, "momentum", 0.0);
    if (!(rho >= 0.0 && rho < 1.0)) return fl__op_error(op, "rho of parameter '%s' must be in [0, 1), got %g", w, rho);
    if (!(eps > 0.0) || !isfinite(eps))
        return fl__op_error(op, "epsilon of parameter '%s' must be finite and > 0, got %g", w, eps);
    if (!(mom >= 0.0) || !isfinite(mom))
        return fl__op_error(op, "momentum of parameter '%s' must be finite and >= 0, got %g", w, mom);
    return FL_OK;
}

static int run_rmsprop(fl_kctx *c)
{
    const char *wname = c->op->in[0].vars[0]->name;
    const fl_tensor *gt = FL_IN(c, 1), *lrt = FL_IN(c, 2);
    fl_tensor *wt, *mt, *mst, *mgt;
    FL_CHECK(fl__optim_target(c, 0, -1, &wt));
    if (gt->is_rows || gt->dtype != FL_FLOAT32 || gt->numel != wt->numel)
        return fl__err(FL_EINVAL, "rmsprop: gradient of parameter '%s' must be dense float32 with %lld elements", wname,
                       (long long)wt->numel);
    if (lrt->dtype != FL_FLOAT32 || lrt->numel < 1)
        return fl__err(FL_EINVAL, "rmsprop: learning rate '%s' must be a float32 with one element",
                       c->op->in[2].vars[0]->name);
    const int64_t n = wt->numel;
    FL_CHECK(fl__optim_target(c, 1, n, &mt));
    FL_CHECK(fl__optim_target(c, 2, n, &mst));
    FL_CHECK(fl__optim_target(c, 3, n, &mgt));
    const float lr = (float)((double)((const float *)lrt->data)[0] * fl__attr_f(c->op, "lr_scale", 1.0));
    const float rho = (float)fl__attr_f(c->op, "decay", 0.95), crho = 1.0f - rho;
    const float eps = (float)fl__attr_f(c->op, "epsilon", 1e-6), mu = (float)fl__attr_f(c->op, "momentum", 0.0);
    const float l2 = (float)fl__attr_f(c->op, "l2", 0.0);
    const int centered = fl__attr_i(c->op, "centered", 0) != 0;
    const float *restrict g = gt->data;
    float *restrict p = wt->data, *restrict mom = mt->data, *restrict ms = mst->data, *restrict mg = mgt->data;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] + l2 * p[i];
        float s = fl__flush_tiny(rho * ms[i] + crho * gi * gi), den = s;
        ms[i] = s;
        if (centered) {
            float a = fl__flush_tiny(rho * mg[i] + crho * gi);
            mg[i] = a;
            den = s - a * a;
        }
        float v = fl__flush_tiny(mu * mom[i] + lr * gi / sqrtf(den + eps));
        mom[i] = v;
        p[i] -= v;
    }
    return FL_OK;
}

/* clang-format off */
static const fl_op_def def_rmsprop = {
    "rmsprop", {"Param", "Grad", "LearningRate", "Moment", "MeanSquare", "MeanGrad"},
    {"ParamOut", "MomentOut", "MeanSquareOut", "MeanGradOut"}, infer_rmsprop, run_rmsprop, NULL, NULL};
/* clang-format on */

/* ---- l1_decay ------------------------------------------------------------------------------- */

static int infer_l1(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *w = op->in[0].vars[0], *g = op->in[1].vars[0], *o = op->out[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, w));
    FL_CHECK(fl__op_need_f32(op, g));
    double coeff = fl__attr_f(op, "coeff", 0.0);
    if (!(coeff >= 0.0) || !isfinite(coeff))
        return fl__op_error(op, "coeff of parameter '%s' must be finite and >= 0, got %g", w->name, coeff);
    fl__var_set_shape(o, FL_FLOAT32, g->ndim, g->shape);
    o->is_sparse_grad = g->is_sparse_grad;
    return FL_OK;
}

static inline float sign_of(float v) { return v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : 0.0f; }

static int run_l1(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *w = FL_IN(c, 0), *g = FL_IN(c, 1);
    fl_tensor *o = FL_OUT(c, 0);
    const float coeff = (float)fl__attr_f(c->op, "coeff", 0.0);
    if (g->dtype != FL_FLOAT32)
        return fl__err(FL_EINVAL, "l1_decay: gradient '%s' must be float32", fl__kctx_var_name(c, 1, 0));
    if (o != g) FL_CHECK(fl_tensor_copy(o, g));
    float *d = o->data;
    const float *p = w->data;
    if (g->is_rows) {
        int64_t width = w->ndim ? w->numel / w->shape[0] : 1;
        if (g->numel != g->shape[0] * width)
            return fl__err(FL_EINVAL, "l1_decay: sparse gradient '%s' rows do not match parameter '%s'",
                           fl__kctx_var_name(c, 1, 0), fl__kctx_var_name(c, 0, 0));
        for (int64_t r = 0; r < g->shape[0]; r++) {
            int64_t row = g->rows[r];
            if (row < 0 || row >= w->shape[0])
                return fl__err(FL_EINVAL, "l1_decay: row %lld of gradient '%s' is out of range", (long long)row,
                               fl__kctx_var_name(c, 1, 0));
            for (int64_t j = 0; j < width; j++) d[r * width + j] += coeff * sign_of(p[row * width + j]);
        }
        return FL_OK;
    }
    if (g->numel != w->numel)
        return fl__err(FL_EINVAL, "l1_decay: gradient '%s' has %lld elements, parameter '%s' %lld",
                       fl__kctx_var_name(c, 1, 0), (long long)g->numel, fl__kctx_var_name(c, 0, 0), (long long)w->numel);
    for (int64_t i = 0; i < g->numel; i++) d[i] += coeff * sign_of(p[i]);
    return FL_OK;
}

static const fl_op_def def_l1 = {"l1_decay", {"Param", "Grad"}, {"Out"}, infer_l1, run_l1, NULL, NULL};

/* Called by minimize (optimizer.c) after clipping: each gradient gets Out = Grad +
 * (coeff + the parameter's l1_decay) * sign(Param) ("<grad>@L1"). */
int fl__l1_decay_apply(fl_prog *p, fl_param_grad *pairs, int n, float coeff)
{
    for (int i = 0; i < n; i++) {
        float c = coeff + pairs[i].param->l1_decay;
        if (!(c > 0.0f)) continue;
        char name[512];
        snprintf(name, sizeof name, "%s@L1", pairs[i].grad->name);
        fl_var *o = fl__var_create(p, name, FL_FLOAT32, pairs[i].grad->ndim, pairs[i].grad->shape);
        if (!o) return fl_prog_status(p);
        fl_io in[2] = {FL_IO1("Param", pairs[i].param), FL_IO1("Grad", pairs[i].grad)}, out = FL_IO1("Out", o);
        fl_op *op = fl__op_new(p, "l1_decay", in, 2, &out, 1);
        if (!op || fl__attr_set_f(op, "coeff", c) || fl__op_finish(op)) return fl_prog_status(p);
        pairs[i].grad = o;
    }
    return FL_OK;
}

const fl_op_def *const fl__ops_optim_more[] = {&def_rmsprop, &def_l1, NULL};
