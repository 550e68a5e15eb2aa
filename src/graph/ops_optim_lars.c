/*
 * ops_optim_lars.c - the layer-wise adaptive update ops: lars_momentum (LARS, You et al.
 * 2017) and lamb (LAMB, You et al. 2019), in Paddle 2.x's formulas.  Both scale one
 * parameter's step by a ratio of norms taken over the whole parameter, so they take dense
 * gradients only: a SelectedRows gradient is an error naming the parameter (Paddle's CPU
 * lars_momentum is dense-only as well).
 *
 * Slots and attributes follow ops_optim.c (Param, Grad, LearningRate, then the state;
 * l2 adds l2 * param to the gradient first and lr_scale multiplies LearningRate), and the
 * build-time checks are its fl__optim_infer_update.  Norms are summed in double.  The
 * weight decay of a parameter named in exclude_from_weight_decay is set to 0 by the
 * builder (optimizer.c), not here.
 */
#include <math.h>
#include <string.h>

#include "graph_internal.h"

static int infer_lars(fl_op *op)
{
    FL_CHECK(fl__optim_infer_update(op));
    const char *w = op->in[0].vars[0]->name;
    if (op->in[1].vars[0]->is_sparse_grad)
        return fl__op_error(op, "parameter '%s' has a sparse gradient; LARS takes dense gradients only", w);
    double mu = fl__attr_f(op, "mu", 0.0), coeff = fl__attr_f(op, "lars_coeff", 0.001);
    double wd = fl__attr_f(op, "lars_weight_decay", 0.0005), eps = fl__attr_f(op, "epsilon", 0.0);
    if (!isfinite(mu)) return fl__op_error(op, "mu of parameter '%s' must be finite, got %g", w, mu);
    if (!(coeff >= 0.0) || !isfinite(coeff))
        return fl__op_error(op, "lars_coeff of parameter '%s' must be finite and >= 0, got %g", w, coeff);
    if (!(wd >= 0.0) || !isfinite(wd))
        return fl__op_error(op, "lars_weight_decay of parameter '%s' must be finite and >= 0, got %g", w, wd);
    if (!(eps >= 0.0) || !isfinite(eps))
        return fl__op_error(op, "epsilon of parameter '%s' must be finite and >= 0, got %g", w, eps);
    return FL_OK;
}

static int infer_lamb(fl_op *op)
{
    FL_CHECK(fl__optim_infer_update(op));
    const char *w = op->in[0].vars[0]->name;
    if (op->in[1].vars[0]->is_sparse_grad)
        return fl__op_error(op, "parameter '%s' has a sparse gradient; LAMB takes dense gradients only", w);
    double b1 = fl__attr_f(op, "beta1", 0.9), b2 = fl__attr_f(op, "beta2", 0.999);
    double eps = fl__attr_f(op, "epsilon", 1e-6), wd = fl__attr_f(op, "weight_decay", 0.01);
    if (!(b1 >= 0.0 && b1 < 1.0)) return fl__op_error(op, "beta1 of parameter '%s' must be in [0, 1), got %g", w, b1);
    if (!(b2 >= 0.0 && b2 < 1.0)) return fl__op_error(op, "beta2 of parameter '%s' must be in [0, 1), got %g", w, b2);
    if (!(eps >= 0.0) || !isfinite(eps))
        return fl__op_error(op, "epsilon of parameter '%s' must be finite and >= 0, got %g", w, eps);
    if (!(wd >= 0.0) || !isfinite(wd))
        return fl__op_error(op, "weight_decay of parameter '%s' must be finite and >= 0, got %g", w, wd);
    return FL_OK;
}

/* The parameter (updated in place), its dense gradient, and the scaled learning rate. */
static int dense_prep(fl_kctx *c, fl_tensor **w, const float **g, double *lr)
{
    const char *type = c->op->def->type, *wname = c->op->in[0].vars[0]->name;
    const fl_tensor *gt = FL_IN(c, 1), *lrt = FL_IN(c, 2);
    FL_CHECK(fl__optim_target(c, 0, -1, w));
    if (gt->is_rows)
        return fl__err(FL_EINVAL, "%s: parameter '%s' got a sparse (SelectedRows) gradient; it takes dense ones only", type,
                       wname);
    if (gt->dtype != FL_FLOAT32 || gt->numel != (*w)->numel)
        return fl__err(FL_EINVAL, "%s: gradient of parameter '%s' must be float32 with %lld elements, got %s with %lld",
                       type, wname, (long long)(*w)->numel, fl_dtype_name(gt->dtype), (long long)gt->numel);
    if (lrt->dtype != FL_FLOAT32 || lrt->numel < 1)
        return fl__err(FL_EINVAL, "%s: learning rate '%s' must be a float32 with one element", type,
                       c->op->in[2].vars[0]->name);
    *g = gt->data;
    *lr = (double)((const float *)lrt->data)[0] * fl__attr_f(c->op, "lr_scale", 1.0);
    return FL_OK;
}

/* Paddle's lars_momentum (g below is the gradient plus l2 * param):
 *   local_lr = lr * lars_coeff * ||p|| / (||g|| + lars_weight_decay * ||p|| + epsilon)
 *              when lars_weight_decay > 0 and both norms are > 0, otherwise lr
 *   velocity = mu * velocity + local_lr * (g + lars_weight_decay * p);  p -= velocity */
static int run_lars(fl_kctx *c)
{
    fl_tensor *wt, *vt;
    const float *g;
    double lr;
    FL_CHECK(dense_prep(c, &wt, &g, &lr));
    FL_CHECK(fl__optim_target(c, 1, wt->numel, &vt));
    const double mu = fl__attr_f(c->op, "mu", 0.0), l2 = fl__attr_f(c->op, "l2", 0.0);
    const double coeff = fl__attr_f(c->op, "lars_coeff", 0.001), wd = fl__attr_f(c->op, "lars_weight_decay", 0.0005);
    const double eps = fl__attr_f(c->op, "epsilon", 0.0);
    float *restrict p = wt->data, *restrict v = vt->data;
    const int64_t n = wt->numel;
    double pn = 0.0, gn = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double gi = (double)g[i] + l2 * (double)p[i];
        pn += (double)p[i] * (double)p[i];
        gn += gi * gi;
    }
    pn = sqrt(pn);
    gn = sqrt(gn);
    double local = lr;
    if (wd > 0.0 && pn > 0.0 && gn > 0.0) local = lr * coeff * pn / (gn + wd * pn + eps);
    const float fl = (float)local, fmu = (float)mu, fwd = (float)wd, fl2 = (float)l2;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] + fl2 * p[i];
        float vi = fl__flush_tiny(fmu * v[i] + fl * (gi + fwd * p[i]));
        v[i] = vi;
        p[i] -= vi;
    }
    return FL_OK;
}

/* Paddle's lamb (g below is the gradient plus l2 * param):
 *   m1 = beta1 * m1 + (1 - beta1) * g;  m2 = beta2 * m2 + (1 - beta2) * g * g
 *   r = (m1 / (1 - beta1_pow)) / (sqrt(m2 / (1 - beta2_pow)) + epsilon) + weight_decay * p
 *   p -= lr * (||p|| / ||r|| when both are > 0, otherwise 1) * r
 *   beta1_pow *= beta1;  beta2_pow *= beta2   (they start at beta1 and beta2, as adam's) */
static int run_lamb(fl_kctx *c)
{
    fl_tensor *wt, *m1t, *m2t, *p1t, *p2t;
    const float *g;
    double lr;
    FL_CHECK(dense_prep(c, &wt, &g, &lr));
    const int64_t n = wt->numel;
    FL_CHECK(fl__optim_target(c, 1, n, &m1t));
    FL_CHECK(fl__optim_target(c, 2, n, &m2t));
    FL_CHECK(fl__optim_target(c, 3, 1, &p1t));
    FL_CHECK(fl__optim_target(c, 4, 1, &p2t));
    const double b1 = fl__attr_f(c->op, "beta1", 0.9), b2 = fl__attr_f(c->op, "beta2", 0.999);
    const double eps = fl__attr_f(c->op, "epsilon", 1e-6), wd = fl__attr_f(c->op, "weight_decay", 0.01);
    const double l2 = fl__attr_f(c->op, "l2", 0.0);
    const double pw1 = ((float *)p1t->data)[0], pw2 = ((float *)p2t->data)[0];
    if (!(pw1 >= 0.0 && pw1 < 1.0 && pw2 >= 0.0 && pw2 < 1.0))
        return fl__err(FL_EINVAL, "lamb: beta pow accumulators of parameter '%s' must be in [0, 1), got %g and %g",
                       c->op->in[0].vars[0]->name, pw1, pw2);
    float *restrict p = wt->data, *restrict m1 = m1t->data, *restrict m2 = m2t->data;
    const float fb1 = (float)b1, fb2 = (float)b2, cb1 = (float)(1.0 - b1), cb2 = (float)(1.0 - b2), fl2 = (float)l2;
    const float c1 = (float)(1.0 / (1.0 - pw1)), c2 = (float)(1.0 / (1.0 - pw2)), feps = (float)eps, fwd = (float)wd;
    /* First pass: the new moments and the two norms; the second recomputes r from the new
     * moments instead of keeping it in a scratch buffer. */
    double pn = 0.0, rn = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] + fl2 * p[i];
        float a = fl__flush_tiny(fb1 * m1[i] + cb1 * gi), b = fl__flush_tiny(fb2 * m2[i] + cb2 * gi * gi);
        m1[i] = a;
        m2[i] = b;
        float r = (a * c1) / (sqrtf(b * c2) + feps) + fwd * p[i];
        pn += (double)p[i] * (double)p[i];
        rn += (double)r * (double)r;
    }
    pn = sqrt(pn);
    rn = sqrt(rn);
    const float step = (float)(lr * (pn > 0.0 && rn > 0.0 ? pn / rn : 1.0));
    for (int64_t i = 0; i < n; i++) {
        float r = (m1[i] * c1) / (sqrtf(m2[i] * c2) + feps) + fwd * p[i];
        p[i] -= step * r;
    }
    ((float *)p1t->data)[0] = (float)(pw1 * b1);
    ((float *)p2t->data)[0] = (float)(pw2 * b2);
    return FL_OK;
}

/* clang-format off */
static const fl_op_def def_lars = {
    "lars_momentum", {"Param", "Grad", "LearningRate", "Velocity"}, {"ParamOut", "VelocityOut"},
    infer_lars, run_lars, NULL, NULL};
static const fl_op_def def_lamb = {
    "lamb", {"Param", "Grad", "LearningRate", "Moment1", "Moment2", "Beta1Pow", "Beta2Pow"},
    {"ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"}, infer_lamb, run_lamb, NULL, NULL};
/* clang-format on */

const fl_op_def *const fl__ops_optim_lars[] = {&def_lars, &def_lamb, NULL};
