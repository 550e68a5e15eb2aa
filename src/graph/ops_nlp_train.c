/*
 * ops_nlp_train.c - operator group "nlp_train": the training pieces of Transformer and BERT
 * recipes, with Paddle's op types and attributes.
 *
 * Gradient clipping (Paddle's GradientClipByValue / ByNorm / ByGlobalNorm), appended by
 * minimize() after backward (and after the distributed runtime's allreduce, so the norm is
 * the reduced gradients' one, the same on every rank) and before the updates:
 *   clip                X, min, max -> Out = min(max(X, min), max)
 *   clip_by_norm        X, max_norm -> Out = X * max_norm / max(||X||, max_norm)
 *   global_norm_scale   X (every gradient), clip_norm -> Out [1] = clip_norm /
 *                       max(sqrt(sum ||X_i||^2), clip_norm); each gradient is then
 *                       multiplied by it (elementwise_mul with a scalar Y)
 * Learning-rate schedules, built as layers returning the learning-rate variable that
 * fl_opt_set_lr_var hands to the optimizer; they read the step counter
 * @LR_DECAY_COUNTER@, incremented by an op at the start of the program (Paddle's
 * autoincreased_step_counter: the first schedule built sets where it begins):
 *   noam_decay          d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) * learning_rate
 *                       (the layer's step from 1; step 0, as paddle.optimizer.lr.NoamDecay's
 *                       epoch 0 sets it, gives 0 as Paddle's: min(1, 0))
 *   polynomial_decay    (lr - end_lr) * (1 - min(step, decay_steps) / decay_steps)^power + end_lr;
 *                       with cycle, decay_steps grows to the next multiple covering step
 *   linear_lr_warmup    start_lr + (end_lr - start_lr) * step / warmup_steps while step <
 *                       warmup_steps, then LearningRate (another schedule's variable or a
 *                       constant)
 * No op here has a gradient.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

#define LR_COUNTER "@LR_DECAY_COUNTER@"

/* ---- clipping ------------------------------------------------------------------------------- */

static int infer_same_f32(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, x->ndim, x->shape);
    return FL_OK;
}

static int prep_same(fl_kctx *c, const float **x, float **y, int64_t *n)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *t = FL_IN(c, 0);
    fl_tensor *o = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(o, FL_FLOAT32, t->ndim, t->shape));
    *x = t->data, *y = o->data, *n = t->numel;
    return FL_OK;
}

static int run_clip(fl_kctx *c)
{
    const float *x;
    float *y;
    int64_t n;
    FL_CHECK(prep_same(c, &x, &y, &n));
    float lo = (float)fl__attr_f(c->op, "min", -1.0), hi = (float)fl__attr_f(c->op, "max", 1.0);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
    return FL_OK;
}

static double sum_sq(const float *x, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

static int run_clip_by_norm(fl_kctx *c)
{
    const float *x;
    float *y;
    int64_t n;
    FL_CHECK(prep_same(c, &x, &y, &n));
    double mx = fl__attr_f(c->op, "max_norm", 1.0), norm = sqrt(sum_sq(x, n));
    float k = norm > mx ? (float)(mx / norm) : 1.0f;
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * k;
    return FL_OK;
}

static int infer_global_norm(fl_op *op)
{
    if (op->in[0].n < 1 || op->out[0].n != 1) return fl__op_error(op, "needs gradients X and one Out");
    for (int i = 0; i < op->in[0].n; i++) FL_CHECK(fl__op_need_f32(op, op->in[0].vars[i]));
    int64_t one = 1;
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, 1, &one);
    return FL_OK;
}

static int run_global_norm(fl_kctx *c)
{
    double s = 0.0;
    for (int i = 0; i < c->nin[0]; i++) {
        const fl_tensor *t = c->in[0][i];
        if (t->dtype != FL_FLOAT32 || t->is_rows)
            return fl__err(FL_EINVAL, "global_norm_scale: gradient '%s' must be a dense float32 tensor",
                           c->op->in[0].vars[i]->name);
        s += sum_sq(t->data, t->numel);
    }
    double cn = fl__attr_f(c->op, "clip_norm", 1.0), norm = sqrt(s);
    fl_tensor *o = FL_OUT(c, 0);
    int64_t one = 1;
    FL_CHECK(fl__tensor_reshape_raw(o, FL_FLOAT32, 1, &one));
    ((float *)o->data)[0] = (float)(cn / (norm > cn ? norm : cn));
    return FL_OK;
}

static const fl_op_def def_clip = {"clip", {"X"}, {"Out"}, infer_same_f32, run_clip, NULL};
static const fl_op_def def_clip_by_norm = {"clip_by_norm", {"X"}, {"Out"}, infer_same_f32, run_clip_by_norm, NULL};
static const fl_op_def def_global_norm = {"global_norm_scale", {"X"}, {"Out"}, infer_global_norm, run_global_norm, NULL};

/* A gradient's clipped copy "<grad>@CLIP". */
static fl_var *clip_var(fl_prog *p, const fl_var *g)
{
    char name[512];
    snprintf(name, sizeof name, "%s@CLIP", g->name);
    return fl__var_create(p, name, FL_FLOAT32, g->ndim, g->shape);
}

int fl__grad_clip_apply(fl_prog *p, fl_param_grad *pairs, int n, const fl_grad_clip *c)
{
    if (!c || c->kind == FL_CLIP_NONE || n == 0) return FL_OK;
    for (int i = 0; i < n; i++)
        if (pairs[i].grad->is_sparse_grad || pairs[i].grad->dtype != FL_FLOAT32)
            return fl__prog_error(p, FL_EINVAL,
                                  "gradient clipping: gradient '%s' is sparse or not float32 (clipping needs dense "
                                  "float32 gradients)",
                                  pairs[i].grad->name);
    fl_var *scale = NULL;
    if (c->kind == FL_CLIP_GLOBAL_NORM) {
        fl_var *gs[1024];
        if (n > 1024) return fl__prog_error(p, FL_EINVAL, "gradient clipping: at most 1024 gradients, got %d", n);
        for (int i = 0; i < n; i++) gs[i] = pairs[i].grad;
        int64_t one = 1;
        scale = fl__tmp_var(p, "global_norm_scale", FL_FLOAT32, 1, &one);
        if (!scale) return fl_prog_status(p);
        fl_io in = {"X", gs, n}, out = FL_IO1("Out", scale);
        fl_op *op = fl__op_new(p, "global_norm_scale", &in, 1, &out, 1);
        if (!op || fl__attr_set_f(op, "clip_norm", c->a) || fl__op_finish(op)) return fl_prog_status(p);
    }
    for (int i = 0; i < n; i++) {
        fl_var *g = pairs[i].grad, *o = clip_var(p, g);
        if (!o) return fl_prog_status(p);
        fl_op *op;
        if (scale) {
            fl_io in[2] = {FL_IO1("X", g), FL_IO1("Y", scale)}, out = FL_IO1("Out", o);
            op = fl__op_new(p, "elementwise_mul", in, 2, &out, 1);
            if (!op || fl__attr_set_i(op, "axis", -1) || fl__op_finish(op)) return fl_prog_status(p);
        } else {
            fl_io in = FL_IO1("X", g), out = FL_IO1("Out", o);
            op = fl__op_new(p, c->kind == FL_CLIP_VALUE ? "clip" : "clip_by_norm", &in, 1, &out, 1);
            int st = !op || (c->kind == FL_CLIP_VALUE ? fl__attr_set_f(op, "min", c->b) || fl__attr_set_f(op, "max", c->a)
                                                      : fl__attr_set_f(op, "max_norm", c->a));
            if (st || fl__op_finish(op)) return fl_prog_status(p);
        }
        pairs[i].grad = o;
    }
    return FL_OK;
}

/* ---- learning-rate schedules ------------------------------------------------------------------ */

static int step_of(const fl_kctx *c, double *step)
{
    const fl_tensor *st = FL_IN(c, 0);
    if (!st || st->dtype != FL_INT64 || st->numel < 1)
        return fl__err(FL_EINVAL, "%s: step counter '%s' must be an int64 with one element", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0));
    *step = (double)((const int64_t *)st->data)[0];
    return FL_OK;
}

static int set_lr(fl_kctx *c, double v)
{
    fl_tensor *lr = FL_OUT(c, 0);
    int64_t one = 1;
    FL_CHECK(fl__tensor_reshape_raw(lr, FL_FLOAT32, 1, &one));
    ((float *)lr->data)[0] = (float)v;
    return FL_OK;
}

static int infer_sched(fl_op *op)
{
    if (op->in[0].n != 1 || op->out[0].n != 1 || (op->def->in_names[1] && op->in[1].n > 1))
        return fl__op_error(op, "needs one Step and one Out");
    fl_var *step = op->in[0].vars[0];
    if (step->dtype != FL_INT64) return fl__op_error(op, "step counter '%s' must be int64", step->name);
    if (!strcmp(op->def->type, "noam_decay") && fl__attr_i(op, "warmup_steps", 1) < 1)
        return fl__op_error(op, "warmup_steps must be >= 1");
    if (!strcmp(op->def->type, "polynomial_decay") && fl__attr_i(op, "decay_steps", 1) < 1)
        return fl__op_error(op, "decay_steps must be >= 1");
    if (!strcmp(op->def->type, "linear_lr_warmup") && fl__attr_i(op, "warmup_steps", 1) < 1)
        return fl__op_error(op, "warmup_steps must be >= 1");
    int64_t one = 1;
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, 1, &one);
    return FL_OK;
}

static int run_noam(fl_kctx *c)
{
    double step = 0.0;
    FL_CHECK(step_of(c, &step));
    /* Paddle 2.x's NoamDecay at step 0 (its scheduler's epoch 0): min(1, 0) = 0.  The 1.x
     * layer's counter starts at 1, so its first run is the step-1 rate, as Paddle's. */
    if (step < 0) step = 0;
    double d = (double)fl__attr_i(c->op, "d_model", 512), w = (double)fl__attr_i(c->op, "warmup_steps", 1);
    double a = step > 0 ? pow(step, -0.5) : 1.0, b = pow(w, -1.5) * step;
    return set_lr(c, fl__attr_f(c->op, "learning_rate", 1.0) * pow(d, -0.5) * (a < b ? a : b));
}

static int run_poly(fl_kctx *c)
{
    double step = 0.0;
    FL_CHECK(step_of(c, &step));
    double ds = (double)fl__attr_i(c->op, "decay_steps", 1), lr = fl__attr_f(c->op, "learning_rate", 1.0);
    double end = fl__attr_f(c->op, "end_learning_rate", 1e-4), power = fl__attr_f(c->op, "power", 1.0);
    if (fl__attr_i(c->op, "cycle", 0)) {
        double k = ceil(step / ds);
        ds *= k < 1 ? 1 : k;
    } else if (step > ds) step = ds;
    return set_lr(c, (lr - end) * pow(1.0 - step / ds, power) + end);
}

static int run_warmup(fl_kctx *c)
{
    double step = 0.0;
    FL_CHECK(step_of(c, &step));
    double w = (double)fl__attr_i(c->op, "warmup_steps", 1), s = fl__attr_f(c->op, "start_lr", 0.0);
    double e = fl__attr_f(c->op, "end_lr", 1.0);
    if (step < w) return set_lr(c, s + (e - s) * step / w);
    const fl_tensor *inner = c->nin[1] ? FL_IN(c, 1) : NULL;
    if (!inner) return set_lr(c, fl__attr_f(c->op, "learning_rate", e));
    if (inner->dtype != FL_FLOAT32 || inner->numel < 1)
        return fl__err(FL_EINVAL, "linear_lr_warmup: LearningRate '%s' must be float32", fl__kctx_var_name(c, 1, 0));
    return set_lr(c, ((const float *)inner->data)[0]);
}

static const fl_op_def def_noam = {"noam_decay", {"Step"}, {"Out"}, infer_sched, run_noam, NULL};
static const fl_op_def def_poly = {"polynomial_decay", {"Step"}, {"Out"}, infer_sched, run_poly, NULL};
static const fl_op_def def_warmup = {"linear_lr_warmup", {"Step", "LearningRate"}, {"Out"}, infer_sched, run_warmup, NULL};

/* The step counter of p: created (int64, begin - 1) with its increment op moved to the front
 * of the program the first time. */
static fl_var *lr_counter(fl_prog *p, int64_t begin)
{
    fl_var *step = fl_prog_var(p, LR_COUNTER);
    if (step) return step;
    int64_t one = 1;
    step = fl__persistable_create(p, LR_COUNTER, FL_INT64, 1, &one, (float)(begin - 1));
    if (!step) return NULL;
    fl_io in = FL_IO1("X", step), out = FL_IO1("Out", step);
    fl_op *inc = fl__op_new(p, "increment", &in, 1, &out, 1);
    if (!inc || fl__attr_set_f(inc, "step", 1.0) || fl__op_finish(inc)) return NULL;
    return fl__prog_move_last_op(p, 0) == FL_OK ? step : NULL;
}

/* Appends schedule op `type` reading the counter (and inner, if any) in the LR role. */
static fl_op *sched_begin(fl_prog *p, const char *type, int64_t begin, fl_var *inner, fl_var **lr)
{
    return fl__lr_sched_begin(p, type, begin, inner, "Out", lr);
}

fl_op *fl__lr_sched_begin(fl_prog *p, const char *type, int64_t begin, fl_var *inner, const char *out_slot, fl_var **lr)
{
    if (!p) {
        fl__err(FL_EINVAL, "%s: program is NULL", type);
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    fl__prog_set_role(p, FL_ROLE_LRSCHED);
    fl_var *step = lr_counter(p, begin);
    int64_t one = 1;
    *lr = step ? fl__tmp_var(p, type, FL_FLOAT32, 1, &one) : NULL;
    fl_op *op = NULL;
    if (*lr) {
        fl_io in[2] = {FL_IO1("Step", step), FL_IO1("LearningRate", inner)}, out = FL_IO1(out_slot, *lr);
        op = fl__op_new(p, type, in, inner ? 2 : 1, &out, 1);
    }
    fl__prog_set_role(p, FL_ROLE_FORWARD);
    return op;
}

static fl_var *sched_finish(fl_prog *p, fl_op *op, fl_var *lr, int bad) { return fl__lr_sched_finish(p, op, lr, bad); }

fl_var *fl__lr_sched_finish(fl_prog *p, fl_op *op, fl_var *lr, int bad)
{
    if (!op || bad) return NULL;
    fl__prog_set_role(p, FL_ROLE_LRSCHED);
    int st = fl__op_finish(op);
    fl__prog_set_role(p, FL_ROLE_FORWARD);
    return st ? NULL : lr;
}

fl_var *fl_layer_noam_decay(fl_prog *p, int64_t d_model, int64_t warmup_steps, float learning_rate)
{
    fl_var *lr;
    fl_op *op = sched_begin(p, "noam_decay", 1, NULL, &lr);
    int bad = op && (fl__attr_set_i(op, "d_model", d_model) || fl__attr_set_i(op, "warmup_steps", warmup_steps) ||
                     fl__attr_set_f(op, "learning_rate", learning_rate));
    return sched_finish(p, op, lr, bad);
}

fl_var *fl_layer_polynomial_decay(fl_prog *p, float learning_rate, int64_t decay_steps, float end_learning_rate,
                                  float power, int cycle)
{
    fl_var *lr;
    fl_op *op = sched_begin(p, "polynomial_decay", 0, NULL, &lr);
    int bad = op && (fl__attr_set_f(op, "learning_rate", learning_rate) || fl__attr_set_i(op, "decay_steps", decay_steps) ||
                     fl__attr_set_f(op, "end_learning_rate", end_learning_rate) || fl__attr_set_f(op, "power", power) ||
                     fl__attr_set_i(op, "cycle", cycle != 0));
    return sched_finish(p, op, lr, bad);
}

fl_var *fl_layer_linear_lr_warmup(fl_prog *p, fl_var *learning_rate, float constant_lr, int64_t warmup_steps,
                                  float start_lr, float end_lr)
{
    fl_var *lr;
    fl_op *op = sched_begin(p, "linear_lr_warmup", 0, learning_rate, &lr);
    int bad = op && (fl__attr_set_i(op, "warmup_steps", warmup_steps) || fl__attr_set_f(op, "start_lr", start_lr) ||
                     fl__attr_set_f(op, "end_lr", end_lr) || fl__attr_set_f(op, "learning_rate", constant_lr));
    return sched_finish(p, op, lr, bad);
}

/* clang-format off */
const fl_op_def *const fl__ops_nlp_train[] = {
    &def_clip, &def_clip_by_norm, &def_global_norm, &def_noam, &def_poly, &def_warmup, NULL};
/* clang-format on */

int fl_opt_set_grad_clip(fl_opt *o, int kind, float a, float b)
{
    fl_grad_clip *c = fl__opt_clip(o);
    if (!c) return fl__err(FL_EINVAL, "fl_opt_set_grad_clip: optimizer is NULL or invalid");
    if (kind < FL_CLIP_NONE || kind > FL_CLIP_GLOBAL_NORM)
        return fl__err(FL_EINVAL, "fl_opt_set_grad_clip: kind %d is not an FL_CLIP_* value", kind);
    if (kind == FL_CLIP_VALUE && !(b <= a))
        return fl__err(FL_EINVAL, "fl_opt_set_grad_clip: min %g must be <= max %g", (double)b, (double)a);
    if ((kind == FL_CLIP_NORM || kind == FL_CLIP_GLOBAL_NORM) && !(a > 0.0f && isfinite(a)))
        return fl__err(FL_EINVAL, "fl_opt_set_grad_clip: the norm bound a must be finite and > 0, got %g", (double)a);
    c->kind = kind, c->a = a, c->b = b;
    return FL_OK;
}

int fl_opt_set_lr_var(fl_opt *o, fl_var *lr)
{
    fl_var **slot = fl__opt_lr_var(o);
    if (!slot) return fl__err(FL_EINVAL, "fl_opt_set_lr_var: optimizer is NULL or invalid");
    if (lr && (lr->magic != FL_VAR_MAGIC || lr->dtype != FL_FLOAT32))
        return fl__err(FL_EINVAL, "fl_opt_set_lr_var: lr must be a float32 variable");
    *slot = lr;
    return FL_OK;
}
