/*
 * ops_loss.c - losses computed from logits or probabilities, with their gradients and
 * layer builders (Paddle fluid semantics):
 *
 *   softmax_with_cross_entropy          Logits [.., C], Label int64 [.., 1] (soft_label: float [.., C])
 *                                       -> Softmax [.., C], Loss [.., 1]
 *   sigmoid_cross_entropy_with_logits   X, Label float (same shape) -> Out (same shape)
 *   log_loss                            Predicted, Labels float [N, 1] -> Loss [N, 1]
 *
 * Every kernel is a plain loop over rows; exponentials and logarithms of whole tensors go
 * through the vectorised kernels of kernels.c (fl__softmax_rows, fl__sigmoid) so no libm
 * call is made per element.  log_loss and the per-row normaliser of the softmax call
 * logf() once per row, as cross_entropy does.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

/* ops_basic.c: checks a float32 input (slot 0) and an int64 label (slot 1) of the same
 * rank with last dimension 1, matching leading dims (names the op and the variables). */
int fl__infer_label_loss(fl_op *op);

/* Paddle's kIgnoreIndex: the default ignore_index of softmax_with_cross_entropy. */
#define IGNORE_INDEX_DEFAULT (-100)


/* Every slot of the def must hold exactly one variable (a program read from text may omit
 * some). */

/* Output var shaped like `x` with its last dimension replaced by `last` (-1: kept). */
static void set_like(fl_var *o, const fl_var *x, int64_t last)
{
    int64_t sh[FL_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) sh[d] = x->shape[d];
    if (last >= 0 && x->ndim > 0) sh[x->ndim - 1] = last;
    fl__var_set_shape(o, FL_FLOAT32, x->ndim, sh);
    o->lod_level = x->lod_level;
}

/* Run-time shape of `t` with its last dimension replaced by `last`. */
static int reshape_like(fl_tensor *o, const fl_tensor *x, int64_t last)
{
    int64_t sh[FL_MAX_DIMS];
    memcpy(sh, x->shape, sizeof sh);
    if (x->ndim > 0) sh[x->ndim - 1] = last;
    FL_CHECK(fl__tensor_reshape_raw(o, FL_FLOAT32, x->ndim, sh));
    return fl__tensor_share_lod(o, x);
}

static int append_grad(fl_op *op, const char *type, const fl_io *in, int nin, const fl_io *out)
{
    return fl__op_append(op->prog, type, in, nin, out, 1) ? FL_OK : fl_prog_status(op->prog);
}

/* ---- softmax_with_cross_entropy ------------------------------------------------------------
 * Paddle: Loss_i = -log(softmax(Logits_i)[Label_i]) over the last axis, hard labels only.
 * Computed stably: with m = max_j x_j and s = sum_j exp(x_j - m) (fl__softmax_rows writes
 * exp(x_j - m) / s, and its entry at the arg-max is exactly 1/s),
 *     Loss = log(s) - (x_label - m) = (m - x_label) - log(Softmax[argmax]),
 * which never takes the log of an underflowed probability.
 * Attributes: soft_label (0; 1: Label is float32 shaped like Logits, a distribution per row,
 * Loss_i = -sum_j Label_ij log Softmax_ij, as Paddle's soft labels after label_smooth),
 * ignore_index (-100: rows with that hard label get loss 0 and gradient 0, as Paddle),
 * axis (-1; only the last axis is supported).
 * Labels outside [0, C) other than ignore_index are a run-time error naming the value and
 * the row.  The gradient (softmax_with_cross_entropy_grad) is
 *     dLogits = (Softmax - onehot(Label)) * dLoss
 * (soft labels: (Softmax * sum_j Label_j - Label) * dLoss; Label gets no gradient)
 * and, as in Paddle, only Loss is differentiable: a gradient reaching Softmax is a build
 * error (use softmax() when the probabilities feed another loss). */

static int infer_swce(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    if (x->ndim < 1) return fl__op_error(op, "logits '%s' must have rank >= 1", x->name);
    int64_t axis = fl__attr_i(op, "axis", -1);
    if (axis != -1 && axis != x->ndim - 1)
        return fl__op_error(op, "attribute axis=%lld is not supported (only the last axis, -1)", (long long)axis);
    if (fl__attr_i(op, "soft_label", 0)) {
        fl_var *lab = op->in[1].vars[0];
        FL_CHECK(fl__op_need_f32(op, x));
        FL_CHECK(fl__op_need_f32(op, lab));
        if (!fl__shapes_equal(x, lab))
            return fl__op_error(op, "soft label '%s' must be shaped like logits '%s'", lab->name, x->name);
    } else FL_CHECK(fl__infer_label_loss(op));
    set_like(op->out[0].vars[0], x, -1);
    set_like(op->out[1].vars[0], x, 1);
    return FL_OK;
}

/* Labels are int64, one per row, in [0, cls) or equal to ignore_index. */
static int check_labels(const fl_kctx *c, int slot, int64_t m, int64_t cls, int64_t ignore)
{
    const fl_op *op = c->op;
    const fl_tensor *lab = FL_IN(c, slot);
    const char *ln = op->in[slot].vars[0]->name;
    if (lab->dtype != FL_INT64 || lab->numel != m)
        return fl__err(FL_EINVAL, "%s: label '%s' has %lld %s values for %lld rows (expected int64, one per row)",
                       op->def->type, ln, (long long)lab->numel, fl_dtype_name(lab->dtype), (long long)m);
    const int64_t *l = lab->data;
    for (int64_t i = 0; i < m; i++)
        if ((l[i] < 0 || l[i] >= cls) && l[i] != ignore)
            return fl__err(FL_EINVAL, "%s: label '%s' value %lld at row %lld is out of range [0, %lld)", op->def->type, ln,
                           (long long)l[i], (long long)i, (long long)cls);
    return FL_OK;
}

static int run_swce(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *lab = FL_IN(c, 1), *sm = FL_OUT(c, 0), *loss = FL_OUT(c, 1);
    if (x->dtype != FL_FLOAT32 || x->ndim < 1)
        return fl__err(FL_EINVAL, "softmax_with_cross_entropy: logits must be float32 of rank >= 1");
    int64_t cls = x->shape[x->ndim - 1];
    if (cls <= 0) return fl__err(FL_EINVAL, "softmax_with_cross_entropy: logits have no classes (last dim 0)");
    int64_t m = x->numel / cls, ignore = fl__attr_i(c->op, "ignore_index", IGNORE_INDEX_DEFAULT);
    int soft = (int)fl__attr_i(c->op, "soft_label", 0);
    if (soft && (lab->dtype != FL_FLOAT32 || lab->numel != x->numel))
        return fl__err(FL_EINVAL, "softmax_with_cross_entropy: soft label '%s' must be float32 shaped like the logits",
                       c->op->in[1].vars[0]->name);
    if (!soft) FL_CHECK(check_labels(c, 1, m, cls, ignore));
    FL_CHECK(reshape_like(sm, x, cls));
    FL_CHECK(reshape_like(loss, x, 1));
    const float *xd = x->data;
    float *sd = sm->data, *ld = loss->data;
    const int64_t *l = lab->data;
    fl__softmax_rows(sd, xd, m, cls);
    if (soft) { /* -log Softmax_j = (x_am - x_j) - log Softmax_am */
        const float *lf = lab->data;
        for (int64_t i = 0; i < m; i++) {
            const float *xr = xd + i * cls, *lr = lf + i * cls;
            int64_t am = 0;
            for (int64_t j = 1; j < cls; j++) am = xr[j] > xr[am] ? j : am;
            float lse = xr[am] - logf(sd[i * cls + am]), acc = 0.0f;
            for (int64_t j = 0; j < cls; j++) acc += lr[j] * (lse - xr[j]);
            ld[i] = acc;
        }
        return FL_OK;
    }
    for (int64_t i = 0; i < m; i++) {
        const float *xr = xd + i * cls;
        int64_t am = 0;
        for (int64_t j = 1; j < cls; j++) am = xr[j] > xr[am] ? j : am;
        ld[i] = l[i] == ignore ? 0.0f : (xr[am] - xr[l[i]]) - logf(sd[i * cls + am]);
    }
    return FL_OK;
}

static int run_swce_grad(fl_kctx *c)
{
    fl_tensor *lab = FL_IN(c, 0), *sm = FL_IN(c, 1), *dl = FL_IN(c, 2), *dx = FL_OUT(c, 0);
    int64_t cls = sm->ndim ? sm->shape[sm->ndim - 1] : 0;
    if (cls <= 0) return fl__err(FL_EINVAL, "softmax_with_cross_entropy_grad: softmax has no classes");
    int64_t m = sm->numel / cls, ignore = fl__attr_i(c->op, "ignore_index", IGNORE_INDEX_DEFAULT);
    if (dl->numel != m)
        return fl__err(FL_EINVAL, "softmax_with_cross_entropy_grad: Loss@GRAD has %lld values for %lld rows",
                       (long long)dl->numel, (long long)m);
    int soft = (int)fl__attr_i(c->op, "soft_label", 0);
    if (soft && (lab->dtype != FL_FLOAT32 || lab->numel != sm->numel))
        return fl__err(FL_EINVAL, "softmax_with_cross_entropy_grad: soft label must be float32 shaped like Softmax");
    if (!soft) FL_CHECK(check_labels(c, 0, m, cls, ignore));
    FL_CHECK(reshape_like(dx, sm, cls));
    const float *s = sm->data, *g = dl->data;
    if (soft) {
        const float *lf = lab->data;
        float *d = dx->data;
        for (int64_t i = 0; i < m; i++) {
            const float *lr = lf + i * cls, *sr = s + i * cls;
            float sum = 0.0f, *dr = d + i * cls;
            for (int64_t j = 0; j < cls; j++) sum += lr[j];
            for (int64_t j = 0; j < cls; j++) dr[j] = g[i] * (sr[j] * sum - lr[j]);
        }
        return FL_OK;
    }
    const int64_t *l = lab->data;
    float *d = dx->data;
    for (int64_t i = 0; i < m; i++) {
        float *dr = d + i * cls;
        if (l[i] == ignore) {
            memset(dr, 0, (size_t)cls * sizeof *dr);
            continue;
        }
        fl__vscale(dr, g[i], s + i * cls, cls);
        dr[l[i]] -= g[i];
    }
    return FL_OK;
}

static int grad_swce(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *label = op->in[1].vars[0], *sm = op->out[0].vars[0];
    if (fl__grad_of(g, sm))
        return fl__op_error(op,
                            "a gradient reaches output 'Softmax' ('%s'), which is not differentiable (only Loss "
                            "is, as in Paddle); use softmax() for probabilities that feed another loss",
                            sm->name);
    fl_var *dl = fl__grad_of(g, op->out[1].vars[0]), *dx = fl__grad_for(g, x);
    if (!dl || !dx) return FL_OK;
    fl_io in[3] = {FL_IO1("Label", label), FL_IO1("Softmax", sm), FL_IO1("Loss@GRAD", dl)};
    fl_io o = FL_IO1("Logits@GRAD", dx);
    fl_op *go = fl__op_new(op->prog, "softmax_with_cross_entropy_grad", in, 3, &o, 1);
    if (!go) return fl_prog_status(op->prog);
    FL_CHECK(fl__attr_set_i(go, "ignore_index", fl__attr_i(op, "ignore_index", IGNORE_INDEX_DEFAULT)));
    FL_CHECK(fl__attr_set_i(go, "soft_label", fl__attr_i(op, "soft_label", 0)));
    return fl__op_finish(go);
}

static const fl_op_def def_swce = {
    "softmax_with_cross_entropy", {"Logits", "Label"}, {"Softmax", "Loss"}, infer_swce, run_swce, grad_swce, NULL};
static const fl_op_def def_swce_grad = {"softmax_with_cross_entropy_grad",
                                        {"Label", "Softmax", "Loss@GRAD"},
                                        {"Logits@GRAD"},
                                        fl__infer_nop,
                                        run_swce_grad,
                                        NULL,
                                        NULL};

fl_var *fl_layer_softmax_with_cross_entropy(fl_var *logits, fl_var *label)
{
    return fl_layer_softmax_with_cross_entropy_ex(logits, label, 0, IGNORE_INDEX_DEFAULT);
}

fl_var *fl_layer_softmax_with_cross_entropy_ex(fl_var *logits, fl_var *label, int soft_label, int64_t ignore_index)
{
    fl_prog *p = fl__prog_of(FL_VARS(logits, label));
    if (!p || p->status != FL_OK) return NULL;
    fl_var *sm = fl__tmp_var(p, "softmax_with_cross_entropy", FL_FLOAT32, logits->ndim, logits->shape);
    fl_var *loss = sm ? fl__tmp_var(p, "softmax_with_cross_entropy", FL_FLOAT32, logits->ndim, logits->shape) : NULL;
    if (!loss) return NULL;
    fl_io in[2] = {FL_IO1("Logits", logits), FL_IO1("Label", label)};
    fl_io out[2] = {FL_IO1("Softmax", sm), FL_IO1("Loss", loss)};
    fl_op *op = fl__op_new(p, "softmax_with_cross_entropy", in, 2, out, 2);
    if (!op) return NULL;
    if (fl__attr_set_i(op, "soft_label", soft_label != 0) || fl__attr_set_i(op, "ignore_index", ignore_index) ||
        fl__attr_set_i(op, "axis", -1) || fl__op_finish(op))
        return NULL;
    return loss;
}

/* ---- sigmoid_cross_entropy_with_logits -------------------------------------------------------
 * Paddle: Out = max(x, 0) - x * z + log(1 + exp(-|x|)), elementwise, z a float label of
 * x's shape (soft labels allowed).  Paddle's ignore_index and normalize attributes are not
 * implemented: a program that sets normalize=1 or an ignore_index other than -100 (a
 * no-op for labels in [0, 1]) is rejected.
 * log(1 + t) with t = exp(-|x|) is computed from q = sigmoid(-|x|) = t / (1 + t), taken
 * from the vectorised fl__sigmoid: with s = t / (2 + t) = q / (2 - q) in [0, 1/3],
 *     log(1 + t) = 2 atanh(s) = 2 s (1 + s^2/3 + s^4/5 + ...),
 * summed to s^16/17 (relative error < 1e-9), so small losses keep their relative precision.
 * Gradient: dX = (sigmoid(x) - z) * dOut; the label gets no gradient (as Paddle). */

static int infer_sce(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0], *z = op->in[1].vars[0];
    if (fl__attr_i(op, "normalize", 0)) return fl__op_error(op, "attribute normalize=1 is not supported");
    if (fl__attr_i(op, "ignore_index", IGNORE_INDEX_DEFAULT) != IGNORE_INDEX_DEFAULT)
        return fl__op_error(op, "attribute ignore_index is not supported");
    char xs[96], zs[96];
    fl__shape_str(x, xs, sizeof xs);
    fl__shape_str(z, zs, sizeof zs);
    if (x->dtype != FL_FLOAT32)
        return fl__op_error(op, "input '%s' must be float32, is %s", x->name, fl_dtype_name(x->dtype));
    if (z->dtype != FL_FLOAT32)
        return fl__op_error(op, "label '%s' must be float32, is %s", z->name, fl_dtype_name(z->dtype));
    if (!fl__shapes_equal(x, z))
        return fl__op_error(op, "label '%s' %s must have the shape of input '%s' %s", z->name, zs, x->name, xs);
    set_like(op->out[0].vars[0], x, -1);
    return FL_OK;
}

static int sce_check(const fl_kctx *c, const fl_tensor *x, const fl_tensor *z)
{
    if (x->dtype != FL_FLOAT32 || z->dtype != FL_FLOAT32 || x->numel != z->numel)
        return fl__err(FL_EINVAL, "%s: label '%s' has %lld values, input '%s' %lld (both float32)", c->op->def->type,
                       c->op->in[1].vars[0]->name, (long long)z->numel, c->op->in[0].vars[0]->name, (long long)x->numel);
    return FL_OK;
}

static int run_sce(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *z = FL_IN(c, 1), *out = FL_OUT(c, 0);
    FL_CHECK(sce_check(c, x, z));
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, x->ndim, x->shape));
    FL_CHECK(fl__tensor_share_lod(out, x));
    const float *restrict xd = x->data, *restrict zd = z->data;
    float *restrict o = out->data;
    int64_t n = x->numel;
    for (int64_t i = 0; i < n; i++) o[i] = xd[i] < 0.0f ? xd[i] : -xd[i];
    fl__sigmoid(o, o, n); /* q = t / (1 + t), t = exp(-|x|) */
    for (int64_t i = 0; i < n; i++) {
        float q = o[i], s = q / (2.0f - q), s2 = s * s;
        float poly = 1.0f / 17.0f;
        poly = poly * s2 + 1.0f / 15.0f;
        poly = poly * s2 + 1.0f / 13.0f;
        poly = poly * s2 + 1.0f / 11.0f;
        poly = poly * s2 + 1.0f / 9.0f;
        poly = poly * s2 + 1.0f / 7.0f;
        poly = poly * s2 + 1.0f / 5.0f;
        poly = poly * s2 + 1.0f / 3.0f;
        poly = poly * s2 + 1.0f;
        float v = xd[i], relu = v > 0.0f ? v : 0.0f;
        o[i] = relu - v * zd[i] + 2.0f * s * poly;
    }
    return FL_OK;
}

static int run_sce_grad(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *z = FL_IN(c, 1), *dy = FL_IN(c, 2), *dx = FL_OUT(c, 0);
    FL_CHECK(sce_check(c, x, z));
    if (dy->numel != x->numel)
        return fl__err(FL_EINVAL, "%s: Out@GRAD has %lld values, input %lld", c->op->def->type, (long long)dy->numel,
                       (long long)x->numel);
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    FL_CHECK(fl__tensor_share_lod(dx, x));
    const float *restrict zd = z->data, *restrict g = dy->data;
    float *restrict d = dx->data;
    int64_t n = x->numel;
    fl__sigmoid(d, x->data, n);
    for (int64_t i = 0; i < n; i++) d[i] = (d[i] - zd[i]) * g[i];
    return FL_OK;
}

static int grad_sce(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]), *dx = fl__grad_for(g, x);
    if (!dy || !dx) return FL_OK;
    fl_io in[3] = {FL_IO1("X", x), FL_IO1("Label", op->in[1].vars[0]), FL_IO1("Out@GRAD", dy)};
    fl_io o = FL_IO1("X@GRAD", dx);
    return append_grad(op, "sigmoid_cross_entropy_with_logits_grad", in, 3, &o);
}

static const fl_op_def def_sce = {
    "sigmoid_cross_entropy_with_logits", {"X", "Label"}, {"Out"}, infer_sce, run_sce, grad_sce, NULL};
static const fl_op_def def_sce_grad = {"sigmoid_cross_entropy_with_logits_grad",
                                       {"X", "Label", "Out@GRAD"},
                                       {"X@GRAD"},
                                       fl__infer_nop,
                                       run_sce_grad,
                                       NULL,
                                       NULL};

fl_var *fl_layer_sigmoid_cross_entropy_with_logits(fl_var *x, fl_var *label)
{
    fl_prog *p = fl__prog_of(FL_VARS(x, label));
    if (!p || p->status != FL_OK) return NULL;
    fl_var *out = fl__tmp_var(p, "sigmoid_cross_entropy_with_logits", FL_FLOAT32, x->ndim, x->shape);
    if (!out) return NULL;
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Label", label)};
    fl_io o = FL_IO1("Out", out);
    return fl__op_append(p, "sigmoid_cross_entropy_with_logits", in, 2, &o, 1) ? out : NULL;
}

/* ---- log_loss ----------------------------------------------------------------------------------
 * Paddle: Loss = -z log(p + eps) - (1 - z) log(1 - p + eps) for Predicted p and Labels z,
 * both float32 [N, 1] (Paddle requires rank 2 with width 1); attribute epsilon (Paddle's
 * default 1e-4; the builder takes it explicitly and rejects negative or non-finite values).
 * Predictions are not range-checked (as Paddle: p outside [-eps, 1 + eps] gives NaN).
 * Gradient: dP = (-z / (p + eps) + (1 - z) / (1 - p + eps)) * dLoss; Labels get none. */

static int infer_log_loss(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *p = op->in[0].vars[0], *z = op->in[1].vars[0];
    double eps = fl__attr_f(op, "epsilon", 1e-4);
    if (!(eps >= 0.0) || isinf(eps)) return fl__op_error(op, "attribute epsilon must be finite and >= 0, got %g", eps);
    char ps[96], zs[96];
    fl__shape_str(p, ps, sizeof ps);
    fl__shape_str(z, zs, sizeof zs);
    if (p->dtype != FL_FLOAT32)
        return fl__op_error(op, "input '%s' must be float32, is %s", p->name, fl_dtype_name(p->dtype));
    if (p->ndim != 2 || p->shape[1] != 1)
        return fl__op_error(op, "input '%s' %s must have shape [N, 1] (one probability per row)", p->name, ps);
    if (z->dtype != FL_FLOAT32)
        return fl__op_error(op, "label '%s' must be float32, is %s", z->name, fl_dtype_name(z->dtype));
    if (!fl__shapes_equal(p, z))
        return fl__op_error(op, "label '%s' %s must have the shape of input '%s' %s", z->name, zs, p->name, ps);
    set_like(op->out[0].vars[0], p, 1);
    return FL_OK;
}

static int log_loss_check(const fl_kctx *c, const fl_tensor *p, const fl_tensor *z)
{
    if (p->dtype != FL_FLOAT32 || z->dtype != FL_FLOAT32 || p->numel != z->numel)
        return fl__err(FL_EINVAL, "%s: label '%s' has %lld values, input '%s' %lld (both float32)", c->op->def->type,
                       c->op->in[1].vars[0]->name, (long long)z->numel, c->op->in[0].vars[0]->name, (long long)p->numel);
    return FL_OK;
}

static int run_log_loss(fl_kctx *c)
{
    fl_tensor *p = FL_IN(c, 0), *z = FL_IN(c, 1), *out = FL_OUT(c, 0);
    FL_CHECK(log_loss_check(c, p, z));
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, p->ndim, p->shape));
    FL_CHECK(fl__tensor_share_lod(out, p));
    float eps = (float)fl__attr_f(c->op, "epsilon", 1e-4);
    const float *pd = p->data, *zd = z->data;
    float *o = out->data;
    for (int64_t i = 0; i < p->numel; i++) o[i] = -zd[i] * logf(pd[i] + eps) - (1.0f - zd[i]) * logf(1.0f - pd[i] + eps);
    return FL_OK;
}

static int run_log_loss_grad(fl_kctx *c)
{
    fl_tensor *p = FL_IN(c, 0), *z = FL_IN(c, 1), *dy = FL_IN(c, 2), *dp = FL_OUT(c, 0);
    FL_CHECK(log_loss_check(c, p, z));
    if (dy->numel != p->numel)
        return fl__err(FL_EINVAL, "log_loss_grad: Loss@GRAD has %lld values, input %lld", (long long)dy->numel,
                       (long long)p->numel);
    FL_CHECK(fl__tensor_reshape_raw(dp, FL_FLOAT32, p->ndim, p->shape));
    FL_CHECK(fl__tensor_share_lod(dp, p));
    float eps = (float)fl__attr_f(c->op, "epsilon", 1e-4);
    const float *restrict pd = p->data, *restrict zd = z->data, *restrict g = dy->data;
    float *restrict d = dp->data;
    for (int64_t i = 0; i < p->numel; i++) d[i] = (-zd[i] / (pd[i] + eps) + (1.0f - zd[i]) / (1.0f - pd[i] + eps)) * g[i];
    return FL_OK;
}

static int grad_log_loss(fl_op *op, fl_grad_ctx *g)
{
    fl_var *p = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]), *dp = fl__grad_for(g, p);
    if (!dy || !dp) return FL_OK;
    fl_io in[3] = {FL_IO1("Predicted", p), FL_IO1("Labels", op->in[1].vars[0]), FL_IO1("Loss@GRAD", dy)};
    fl_io o = FL_IO1("Predicted@GRAD", dp);
    fl_op *go = fl__op_new(op->prog, "log_loss_grad", in, 3, &o, 1);
    if (!go) return fl_prog_status(op->prog);
    FL_CHECK(fl__attr_set_f(go, "epsilon", fl__attr_f(op, "epsilon", 1e-4)));
    return fl__op_finish(go);
}

static const fl_op_def def_log_loss = {"log_loss",   {"Predicted", "Labels"}, {"Loss"}, infer_log_loss,
                                       run_log_loss, grad_log_loss,           NULL};
static const fl_op_def def_log_loss_grad = {"log_loss_grad",
                                            {"Predicted", "Labels", "Loss@GRAD"},
                                            {"Predicted@GRAD"},
                                            fl__infer_nop,
                                            run_log_loss_grad,
                                            NULL,
                                            NULL};

fl_var *fl_layer_log_loss(fl_var *pred, fl_var *label, float epsilon)
{
    fl_prog *p = fl__prog_of(FL_VARS(pred, label));
    if (!p || p->status != FL_OK) return NULL;
    fl_var *out = fl__tmp_var(p, "log_loss", FL_FLOAT32, pred->ndim, pred->shape);
    if (!out) return NULL;
    fl_io in[2] = {FL_IO1("Predicted", pred), FL_IO1("Labels", label)};
    fl_io o = FL_IO1("Loss", out);
    fl_op *op = fl__op_new(p, "log_loss", in, 2, &o, 1);
    if (!op) return NULL;
    if (fl__attr_set_f(op, "epsilon", epsilon) || fl__op_finish(op)) return NULL;
    return out;
}

const fl_op_def *const fl__ops_loss[] = {&def_swce,     &def_swce_grad,     &def_sce, &def_sce_grad,
                                         &def_log_loss, &def_log_loss_grad, NULL};
