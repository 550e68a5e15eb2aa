/*
 * amp_scaling.c - float16 loss scaling (Paddle's static AMP decorator, decorator.py, and
 * its ops check_finite_and_unscale and update_loss_scaling), and fl_amp_decorate_optimizer
 * which wires it and the cast rewrite of amp.c into fl_opt_minimize.
 *
 * After backward (and after a distributed runtime's allreduce, so every rank checks the
 * same reduced gradients and reaches the same verdict) the program gets:
 *
 *   scale_loss_grad          loss@GRAD *= loss_scaling_0         (right after the seed)
 *   check_finite_and_unscale grads /= loss_scaling_0; find_infinite_scale = any inf/NaN
 *   update_loss_scaling      Paddle's rule (below), unless the scale is static
 *   <update ops>             run only when find_infinite_scale.all_finite is non-zero
 *
 * Paddle zeroes the gradients of a bad step (and only Adam skips its state update); here
 * every update op is skipped, so parameters and all optimizer state stay bit-identical.
 *
 * update_loss_scaling (Paddle's update_loss_scaling_op.h): on a step with inf/NaN the good
 * count is reset and the bad count grows; when it reaches decr_every_n_nan_or_inf the scale
 * is multiplied by decr_ratio (not below 1) and the bad count reset.  On a finite step the
 * bad count is reset and the good count grows; when it reaches incr_every_n_steps the
 * scale is multiplied by incr_ratio (kept when that is not finite) and the count reset.
 */
#include <math.h>
#include <string.h>

#include "graph_internal.h"
#include "ops_bn_bf16.h"

static int is_finite_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0x7f800000u) != 0x7f800000u;
}

static int need_scalar(fl_op *op, const fl_var *v, fl_dtype dt)
{
    if (v->dtype != dt || fl__dims_prod(v->shape, 0, v->ndim) != 1)
        return fl__op_error(op, "'%s' must be a %s scalar of one element", v->name, fl_dtype_name(dt));
    return FL_OK;
}

/* ---- scale_loss_grad: Out = X * Scale (the loss gradient's seed, in place) -------------- */

static int infer_scale_loss_grad(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    FL_CHECK(need_scalar(op, op->in[1].vars[0], FL_FLOAT32));
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, x->ndim, x->shape);
    return FL_OK;
}

static int run_scale_loss_grad(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    fl_tensor *x = FL_IN(c, 0), *o = FL_OUT(c, 0);
    float s = ((const float *)FL_IN(c, 1)->data)[0];
    if (o != x) FL_CHECK(fl__tensor_reshape_raw(o, FL_FLOAT32, x->ndim, x->shape));
    const float *xd = x->data;
    float *od = o->data;
    for (int64_t i = 0; i < x->numel; i++) od[i] = xd[i] * s;
    return FL_OK;
}

/* ---- check_finite_and_unscale ----------------------------------------------------------- */

static int infer_check_finite(fl_op *op)
{
    int n = op->in[0].n;
    if (op->in[1].n != 1 || op->out[0].n != n || op->out[1].n != 1 || op->out[2].n > 1)
        return fl__op_error(op, "needs X (a list), Scale, Out (one per X), FoundInfinite and optionally AllFinite");
    FL_CHECK(need_scalar(op, op->in[1].vars[0], FL_FLOAT32));
    for (int i = 0; i < n; i++) {
        fl_var *x = op->in[0].vars[i];
        FL_CHECK(fl__op_need_f32(op, x));
        if (op->out[0].vars[i] != x)
            return fl__op_error(op, "Out[%d] '%s' must be X[%d] '%s' (the gradients are unscaled in place)", i,
                                op->out[0].vars[i]->name, i, x->name);
    }
    int64_t one = 1;
    fl__var_set_shape(op->out[1].vars[0], FL_INT64, 1, &one);
    if (op->out[2].n) fl__var_set_shape(op->out[2].vars[0], FL_INT64, 1, &one);
    return FL_OK;
}

static int run_check_finite(fl_kctx *c)
{
    float s = ((const float *)FL_IN(c, 1)->data)[0];
    int found = !is_finite_bits(s) || s == 0.0f;
    float inv = found ? 0.0f : 1.0f / s;
    for (int i = 0; i < c->nin[0]; i++) {
        fl_tensor *x = c->in[0][i];
        if (x->dtype != FL_FLOAT32)
            return fl__err(FL_EINVAL, "check_finite_and_unscale: gradient '%s' is %s (float32 expected)",
                           c->op->in[0].vars[i]->name, fl_dtype_name(x->dtype));
        float *d = x->data; /* dense values, or the values of SelectedRows */
        int bad = 0;
        for (int64_t j = 0; j < x->numel; j++) {
            float v = d[j] * inv;
            d[j] = v;
            bad |= !is_finite_bits(v);
        }
        found |= bad;
    }
    FL_CHECK(fl__tensor_reshape_raw(FL_OUT(c, 1), FL_INT64, 1, (const int64_t[]){1}));
    ((int64_t *)FL_OUT(c, 1)->data)[0] = found;
    if (c->nout[2]) {
        FL_CHECK(fl__tensor_reshape_raw(FL_OUT(c, 2), FL_INT64, 1, (const int64_t[]){1}));
        ((int64_t *)FL_OUT(c, 2)->data)[0] = !found;
    }
    return FL_OK;
}

/* ---- update_loss_scaling ---------------------------------------------------------------- */

static int infer_update_scaling(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    FL_CHECK(need_scalar(op, op->in[0].vars[0], FL_INT64));
    FL_CHECK(need_scalar(op, op->in[1].vars[0], FL_FLOAT32));
    FL_CHECK(need_scalar(op, op->in[2].vars[0], FL_INT64));
    FL_CHECK(need_scalar(op, op->in[3].vars[0], FL_INT64));
    for (int s = 0; s < 3; s++)
        if (op->out[s].vars[0] != op->in[s + 1].vars[0])
            return fl__op_error(op, "output '%s' must be its input '%s' (updated in place)", op->out[s].vars[0]->name,
                                op->in[s + 1].vars[0]->name);
    if (fl__attr_i(op, "incr_every_n_steps", 0) < 1 || fl__attr_i(op, "decr_every_n_nan_or_inf", 0) < 1)
        return fl__op_error(op, "incr_every_n_steps and decr_every_n_nan_or_inf must be >= 1");
    double ir = fl__attr_f(op, "incr_ratio", 0), dr = fl__attr_f(op, "decr_ratio", 0);
    if (!(ir > 1.0) || !(dr > 0.0 && dr < 1.0))
        return fl__op_error(op, "incr_ratio %g must be > 1 and decr_ratio %g in (0, 1)", ir, dr);
    return FL_OK;
}

static int run_update_scaling(fl_kctx *c)
{
    int found = ((const int64_t *)FL_IN(c, 0)->data)[0] != 0;
    float *scale = FL_OUT(c, 0)->data;
    int64_t *good = FL_OUT(c, 1)->data, *bad = FL_OUT(c, 2)->data;
    const float *prev = FL_IN(c, 1)->data;
    const int64_t *gin = FL_IN(c, 2)->data, *bin = FL_IN(c, 3)->data;
    int64_t incr_n = fl__attr_i(c->op, "incr_every_n_steps", 1000),
            decr_n = fl__attr_i(c->op, "decr_every_n_nan_or_inf", 2);
    float ir = (float)fl__attr_f(c->op, "incr_ratio", 2.0), dr = (float)fl__attr_f(c->op, "decr_ratio", 0.8);
    float p = prev[0];
    int64_t g = gin[0], b = bin[0];
    if (found) {
        g = 0;
        if (++b == decr_n) {
            float ns = p * dr;
            p = ns < 1.0f ? 1.0f : ns;
            b = 0;
        }
    } else {
        b = 0;
        if (++g == incr_n) {
            float ns = p * ir;
            p = is_finite_bits(ns) ? ns : p;
            g = 0;
        }
    }
    scale[0] = p, good[0] = g, bad[0] = b;
    return FL_OK;
}

static const fl_op_def def_scale_loss_grad = {"scale_loss_grad",     {"X", "Scale"},      {"Out"},
                                              infer_scale_loss_grad, run_scale_loss_grad, NULL};
static const fl_op_def def_check_finite = {
    "check_finite_and_unscale", {"X", "Scale"},   {"Out", "FoundInfinite", "AllFinite"},
    infer_check_finite,         run_check_finite, NULL};
static const fl_op_def def_update_scaling = {"update_loss_scaling",
                                             {"FoundInfinite", "PrevLossScaling", "InGoodSteps", "InBadSteps"},
                                             {"LossScaling", "OutGoodSteps", "OutBadSteps"},
                                             infer_update_scaling,
                                             run_update_scaling,
                                             NULL};

const fl_op_def *const fl__ops_amp_scaling[] = {&def_scale_loss_grad, &def_check_finite, &def_update_scaling, NULL};

/* ---- the rewrite after backward ---------------------------------------------------------- */

static fl_var *state(fl_prog *p, const char *name, fl_dtype dt, float v)
{
    fl_var *x = fl_prog_var(p, name);
    int64_t one = 1;
    return x ? x : fl__persistable_create(p, name, dt, 1, &one, v);
}

static int add_loss_scaling(fl_opt_hook_ctx *h, const fl_amp_opts *o)
{
    fl_prog *p = h->prog;
    if (h->update_cond)
        return fl__prog_error(p, FL_EUNSUPPORTED,
                              "AMP float16 loss scaling: the optimizer's updates already run under a condition of "
                              "their own (gradient_merge); float16 with gradient merge is not implemented (use "
                              "bfloat16, which needs no loss scaling)");
    int seed = -1;
    for (int i = 0; i < p->nops && seed < 0; i++) {
        fl_op *op = p->ops[i];
        int nin = 0;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) nin += op->in[s].n;
        if (op->role == FL_ROLE_BACKWARD && !nin && !strcmp(op->def->type, "fill_constant")) seed = i;
    }
    if (seed < 0) return fl__prog_error(p, FL_EINVAL, "AMP loss scaling: the loss gradient's seed op was not found");
    fl_var *lg = p->ops[seed]->out[0].vars[0];
    fl_var *ls = state(p, "loss_scaling_0", FL_FLOAT32, (float)o->init_loss_scaling);
    int64_t one = 1;
    fl_var *found = fl_prog_var(p, "find_infinite_scale");
    if (!found) found = fl__var_create(p, "find_infinite_scale", FL_INT64, 1, &one);
    fl_var *ok = fl_prog_var(p, "find_infinite_scale.all_finite");
    if (!ok) ok = fl__var_create(p, "find_infinite_scale.all_finite", FL_INT64, 1, &one);
    if (!ls || !found || !ok) return fl_prog_status(p);
    {
        fl_io in[2] = {FL_IO1("X", lg), FL_IO1("Scale", ls)};
        fl_io out = FL_IO1("Out", lg);
        if (!fl__op_append(p, "scale_loss_grad", in, 2, &out, 1)) return fl_prog_status(p);
        FL_CHECK(fl__prog_move_last_op(p, seed + 1));
    }
    int n = h->npairs;
    fl_var **g = malloc((size_t)(n ? n : 1) * sizeof *g);
    if (!g) return fl__err(FL_ENOMEM, "AMP loss scaling: out of memory");
    for (int i = 0; i < n; i++) g[i] = h->pairs[i].grad;
    fl_io in[2] = {{"X", g, n}, FL_IO1("Scale", ls)};
    fl_io out[3] = {{"Out", g, n}, FL_IO1("FoundInfinite", found), FL_IO1("AllFinite", ok)};
    fl_op *chk = fl__op_append(p, "check_finite_and_unscale", in, 2, out, 3);
    free(g);
    if (!chk) return fl_prog_status(p);
    if (!o->static_loss_scaling) {
        fl_var *good = state(p, "num_good_steps_0", FL_INT64, 0), *bad = state(p, "num_bad_steps_0", FL_INT64, 0);
        if (!good || !bad) return fl_prog_status(p);
        fl_io uin[4] = {FL_IO1("FoundInfinite", found), FL_IO1("PrevLossScaling", ls), FL_IO1("InGoodSteps", good),
                        FL_IO1("InBadSteps", bad)};
        fl_io uout[3] = {FL_IO1("LossScaling", ls), FL_IO1("OutGoodSteps", good), FL_IO1("OutBadSteps", bad)};
        fl_op *up = fl__op_new(p, "update_loss_scaling", uin, 4, uout, 3);
        if (!up) return fl_prog_status(p);
        FL_CHECK(fl__attr_set_i(up, "incr_every_n_steps", o->incr_every_n_steps));
        FL_CHECK(fl__attr_set_i(up, "decr_every_n_nan_or_inf", o->decr_every_n_nan_or_inf));
        FL_CHECK(fl__attr_set_f(up, "incr_ratio", o->incr_ratio));
        FL_CHECK(fl__attr_set_f(up, "decr_ratio", o->decr_ratio));
        FL_CHECK(fl__op_finish(up));
    }
    h->update_cond = ok;
    FL_DEBUG(FL_SUB_GRAPH, "AMP float16: %s loss scaling from %g over %d gradients",
             o->static_loss_scaling ? "static" : "dynamic", o->init_loss_scaling, n);
    return FL_OK;
}

static int amp_opt_hook(void *user, int phase, fl_opt_hook_ctx *h)
{
    const fl_amp_opts *o = user;
    if (phase == FL_HOOK_BEFORE_BACKWARD) {
        int n = fl_amp_decorate(h->prog, o);
        if (n < 0) return n;
        FL_INFO(FL_SUB_GRAPH, "AMP %s: %d op(s) compute in %s%s", o->use_pure_fp16 ? "O2" : "O1", n,
                o->dtype == FL_FLOAT16 ? "float16" : "bfloat16",
                o->dtype == FL_FLOAT16
                    ? (o->static_loss_scaling ? " with static loss scaling" : " with dynamic loss scaling")
                    : " (no loss scaling: bfloat16 has float32's range)");
        return FL_OK;
    }
    if (phase == FL_HOOK_AFTER_BACKWARD && o->dtype == FL_FLOAT16) return add_loss_scaling(h, o);
    if (phase == FL_HOOK_AFTER_BACKWARD) { /* bfloat16: normalisations write the convolutions' bf16 Input */
        int n = fl__amp_bn_bf16(h->prog);
        return n < 0 ? n : FL_OK;
    }
    if (phase == FL_HOOK_AFTER_UPDATE && o->use_pure_fp16) {
        int n = fl__amp_o2_master_refresh(h->prog);
        return n < 0 ? n : FL_OK;
    }
    return FL_OK;
}

int fl_amp_decorate_optimizer(fl_opt *opt, const fl_amp_opts *opts)
{
    fl_amp_opts *o = fl__opt_amp_opts(opt);
    if (!o) return fl__err(FL_EINVAL, "fl_amp_decorate_optimizer: optimizer is NULL or invalid");
    fl_amp_opts v;
    memset(&v, 0, sizeof v);
    if (opts) v = *opts;
    if (!v.dtype) v.dtype = FL_BFLOAT16;
    if (!v.init_loss_scaling) v.init_loss_scaling = 32768.0;
    if (!v.incr_every_n_steps) v.incr_every_n_steps = 1000;
    if (!v.decr_every_n_nan_or_inf) v.decr_every_n_nan_or_inf = 2;
    if (!v.incr_ratio) v.incr_ratio = 2.0;
    if (!v.decr_ratio) v.decr_ratio = 0.8;
    if (v.dtype != FL_BFLOAT16 && v.dtype != FL_FLOAT16)
        return fl__err(FL_EINVAL, "fl_amp_decorate_optimizer: dtype %s is not bfloat16 or float16", fl_dtype_name(v.dtype));
    if (!(v.init_loss_scaling > 0) || !isfinite(v.init_loss_scaling) || v.init_loss_scaling > 3.0e38)
        return fl__err(FL_EINVAL,
                       "fl_amp_decorate_optimizer: init_loss_scaling %g must be positive and finite in "
                       "float32",
                       v.init_loss_scaling);
    if (v.incr_every_n_steps < 1 || v.decr_every_n_nan_or_inf < 1)
        return fl__err(FL_EINVAL,
                       "fl_amp_decorate_optimizer: incr_every_n_steps %lld and decr_every_n_nan_or_inf %lld must be "
                       ">= 1",
                       (long long)v.incr_every_n_steps, (long long)v.decr_every_n_nan_or_inf);
    if (!(v.incr_ratio > 1.0) || !(v.decr_ratio > 0.0 && v.decr_ratio < 1.0))
        return fl__err(FL_EINVAL, "fl_amp_decorate_optimizer: incr_ratio %g must be > 1 and decr_ratio %g in (0, 1)",
                       v.incr_ratio, v.decr_ratio);
    *o = v;
    return fl__opt_set_pre_hook(opt, amp_opt_hook, o);
}
