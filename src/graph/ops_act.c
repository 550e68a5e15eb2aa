/*
 * ops_act.c - the activations relu, tanh, sigmoid, softsign and softmax, their gradients and
 * layer builders.  relu, tanh and sigmoid also compute in bfloat16 / float16 (AMP level O2).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* ---- activations ----------------------------------------------------------------------- */

static int infer_same(fl_op *op)
{
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    if (x->dtype != FL_FLOAT32)
        return fl__op_error(op, "input '%s' must be float32, is %s", x->name, fl_dtype_name(x->dtype));
    fl__var_set_shape(o, x->dtype, x->ndim, x->shape);
    o->lod_level = x->lod_level;
    return FL_OK;
}

/* softsign and softmax compute in float32 only: a bfloat16 / float16 input (an AMP rewrite
 * that left no cast in front) fails naming the op and the variable. */
static int act_prep(fl_kctx *c, fl_tensor **x, fl_tensor **y)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    *x = FL_IN(c, 0);
    *y = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(*y, FL_FLOAT32, (*x)->ndim, (*x)->shape));
    return fl__tensor_share_lod(*y, *x);
}

/* relu, tanh and sigmoid also take bfloat16 / float16 (AMP level O2 keeps them in a chain
 * of low-precision activations: Paddle's gray ops, which follow their input's type): the
 * values are widened to float32 in blocks, computed, and rounded back to the input's type. */
static int low_type(fl_dtype t) { return t == FL_BFLOAT16 || t == FL_FLOAT16; }

static int infer_same_low(fl_op *op)
{
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    if (x->dtype != FL_FLOAT32 && !low_type(x->dtype))
        return fl__op_error(op, "input '%s' must be float32 (or bfloat16, float16), is %s", x->name,
                            fl_dtype_name(x->dtype));
    fl__var_set_shape(o, x->dtype, x->ndim, x->shape);
    o->lod_level = x->lod_level;
    return FL_OK;
}

static int run_unary(fl_kctx *c, void (*fn)(float *, const float *, int64_t))
{
    fl_tensor *x = FL_IN(c, 0), *y = FL_OUT(c, 0);
    if (!x || x->is_rows || !low_type(x->dtype)) {
        FL_CHECK(act_prep(c, &x, &y));
        fn(y->data, x->data, x->numel);
        return FL_OK;
    }
    FL_CHECK(fl__tensor_reshape_raw(y, x->dtype, x->ndim, x->shape));
    FL_CHECK(fl__tensor_share_lod(y, x));
    float buf[1024];
    const uint16_t *xd = x->data;
    uint16_t *yd = y->data;
    for (int64_t i = 0; i < x->numel; i += 1024) {
        int64_t k = x->numel - i < 1024 ? x->numel - i : 1024;
        FL_CHECK(fl__cvt_any(buf, FL_FLOAT32, xd + i, x->dtype, k));
        fn(buf, buf, k);
        FL_CHECK(fl__cvt_any(yd + i, x->dtype, buf, FL_FLOAT32, k));
    }
    return FL_OK;
}

static int run_relu(fl_kctx *c) { return run_unary(c, fl__relu); }
static int run_tanh(fl_kctx *c) { return run_unary(c, fl__tanh); }
static int run_sigmoid(fl_kctx *c) { return run_unary(c, fl__sigmoid); }
static int run_softsign(fl_kctx *c)
{
    fl_tensor *x, *y;
    FL_CHECK(act_prep(c, &x, &y));
    const float *restrict a = x->data;
    float *restrict b = y->data;
    for (int64_t i = 0; i < x->numel; i++) b[i] = a[i] / (1.0f + fabsf(a[i]));
    return FL_OK;
}
static int run_softmax(fl_kctx *c)
{
    fl_tensor *x, *y;
    FL_CHECK(act_prep(c, &x, &y));
    int64_t n = x->ndim ? x->shape[x->ndim - 1] : 1;
    fl__softmax_rows(y->data, x->data, x->numel / (n ? n : 1), n);
    return FL_OK;
}

/* Gradient kernels.  Inputs: "Out" (or "X" for softsign) and "Out@GRAD"; output X@GRAD.
 * Out@GRAD must be float32; "Out" may also be bfloat16 / float16 (fc's fused activation
 * under AMP level O2 writes its output in low precision): it is widened into *tmp, which
 * the caller frees.  Any other dtype fails naming the op and the variable. */
static int grad_prep(fl_kctx *c, const float **o, const float **dy, float **dx, int64_t *n, float **tmp)
{
    fl_tensor *t = FL_IN(c, 0), *g = FL_IN(c, 1), *d = FL_OUT(c, 0);
    *tmp = NULL;
    if (t->numel != g->numel)
        return fl__err(FL_EINVAL, "%s: gradient has %lld elements, value %lld", c->op->def->type, (long long)g->numel,
                       (long long)t->numel);
    FL_CHECK(fl__kctx_dense_f32(c, 1));
    if (t->is_rows || (t->dtype != FL_FLOAT32 && t->dtype != FL_BFLOAT16 && t->dtype != FL_FLOAT16))
        return fl__err(FL_EINVAL, "%s: input '%s' must be a dense float32 (or bfloat16, float16) tensor, is %s",
                       c->op->def->type, fl__kctx_var_name(c, 0, 0), fl_dtype_name(t->dtype));
    if (t->dtype != FL_FLOAT32) {
        *tmp = malloc((size_t)(t->numel ? t->numel : 1) * sizeof **tmp);
        if (!*tmp) return fl__err(FL_ENOMEM, "%s: out of memory", c->op->def->type);
        FL_CHECK(fl__cvt_any(*tmp, FL_FLOAT32, t->data, t->dtype, t->numel));
    }
    FL_CHECK(fl__tensor_reshape_raw(d, FL_FLOAT32, t->ndim, t->shape));
    FL_CHECK(fl__tensor_share_lod(d, t));
    *o = *tmp ? *tmp : t->data;
    *dy = g->data;
    *dx = d->data;
    *n = t->numel;
    return FL_OK;
}
/* relu, tanh and sigmoid: dx = dy * act'(out).  A low-precision "Out" (the gray ops' and
 * fc's under AMP level O2) is widened in blocks; the gradients are float32. */
static int act_grad_run(fl_kctx *c, int act)
{
    fl_tensor *t = FL_IN(c, 0);
    if (!t || t->dtype == FL_FLOAT32 || t->is_rows) {
        const float *o = NULL, *dy = NULL;
        float *dx = NULL, *tmp = NULL;
        int64_t n = 0;
        int st = grad_prep(c, &o, &dy, &dx, &n, &tmp); /* float32, or the error naming the op */
        if (st == FL_OK) fl__act_grad(act, dx, o, dy, n);
        free(tmp);
        return st;
    }
    fl_tensor *g = FL_IN(c, 1), *d = FL_OUT(c, 0);
    if (t->numel != g->numel)
        return fl__err(FL_EINVAL, "%s: gradient has %lld elements, value %lld", c->op->def->type, (long long)g->numel,
                       (long long)t->numel);
    FL_CHECK(fl__kctx_dense_f32(c, 1));
    if (t->dtype != FL_BFLOAT16 && t->dtype != FL_FLOAT16)
        return fl__err(FL_EINVAL, "%s: input '%s' must be a dense float32 (or bfloat16, float16) tensor, is %s",
                       c->op->def->type, fl__kctx_var_name(c, 0, 0), fl_dtype_name(t->dtype));
    FL_CHECK(fl__tensor_reshape_raw(d, FL_FLOAT32, t->ndim, t->shape));
    FL_CHECK(fl__tensor_share_lod(d, t));
    float buf[1024];
    const uint16_t *o = t->data;
    const float *dy = g->data;
    float *dx = d->data;
    for (int64_t i = 0; i < t->numel; i += 1024) {
        int64_t k = t->numel - i < 1024 ? t->numel - i : 1024;
        FL_CHECK(fl__cvt_any(buf, FL_FLOAT32, o + i, t->dtype, k));
        fl__act_grad(act, dx + i, buf, dy + i, k);
    }
    return FL_OK;
}
static int run_relu_grad(fl_kctx *c) { return act_grad_run(c, FL_ACT_RELU); }
static int run_tanh_grad(fl_kctx *c) { return act_grad_run(c, FL_ACT_TANH); }
static int run_sigmoid_grad(fl_kctx *c) { return act_grad_run(c, FL_ACT_SIGMOID); }
static int run_softsign_grad(fl_kctx *c)
{
    const float *x, *dy;
    float *dx;
    int64_t n;
    float *tmp = NULL;
    int st = grad_prep(c, &x, &dy, &dx, &n, &tmp);
    if (st != FL_OK) {
        free(tmp);
        return st;
    }
    for (int64_t i = 0; i < n; i++) {
        float d = 1.0f + fabsf(x[i]);
        dx[i] = dy[i] / (d * d);
    }
    free(tmp);
    return FL_OK;
}
static int run_softmax_grad(fl_kctx *c)
{
    const float *o, *dy;
    float *dx;
    int64_t n;
    float *tmp = NULL;
    int st = grad_prep(c, &o, &dy, &dx, &n, &tmp);
    if (st != FL_OK) {
        free(tmp);
        return st;
    }
    fl_tensor *t = FL_IN(c, 0);
    int64_t w = t->ndim ? t->shape[t->ndim - 1] : 1, m = n / (w ? w : 1);
    for (int64_t i = 0; i < m; i++) {
        const float *orow = o + i * w, *drow = dy + i * w;
        float dot = 0.0f;
        for (int64_t j = 0; j < w; j++) dot += orow[j] * drow[j];
        for (int64_t j = 0; j < w; j++) dx[i * w + j] = orow[j] * (drow[j] - dot);
    }
    free(tmp);
    return FL_OK;
}

/* Unary grad maker: grad op reads Out (or X when use_x) and Out@GRAD. */
static int unary_grad(fl_op *op, fl_grad_ctx *g, const char *gtype, int use_x)
{
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    fl_var *dy = fl__grad_of(g, o), *dx = fl__grad_for(g, x);
    if (!dy || !dx) return FL_OK;
    fl_io in[2] = {FL_IO1("Out", use_x ? x : o), FL_IO1("Out@GRAD", dy)};
    fl_io out = FL_IO1("X@GRAD", dx);
    return fl__op_append(op->prog, gtype, in, 2, &out, 1) ? FL_OK : fl_prog_status(op->prog);
}
static int grad_relu(fl_op *op, fl_grad_ctx *g) { return unary_grad(op, g, "relu_grad", 0); }
static int grad_tanh(fl_op *op, fl_grad_ctx *g) { return unary_grad(op, g, "tanh_grad", 0); }
static int grad_sigmoid(fl_op *op, fl_grad_ctx *g) { return unary_grad(op, g, "sigmoid_grad", 0); }
static int grad_softsign(fl_op *op, fl_grad_ctx *g) { return unary_grad(op, g, "softsign_grad", 1); }
static int grad_softmax(fl_op *op, fl_grad_ctx *g) { return unary_grad(op, g, "softmax_grad", 0); }

#define ACT_DEFS(name, infer)                                                                    \
    static const fl_op_def def_##name = {#name, {"X"}, {"Out"}, infer, run_##name, grad_##name}; \
    static const fl_op_def def_##name##_grad = {#name "_grad", {"Out", "Out@GRAD"}, {"X@GRAD"},  \
                                                fl__infer_nop, run_##name##_grad,   NULL};
ACT_DEFS(relu, infer_same_low)
ACT_DEFS(tanh, infer_same_low)
ACT_DEFS(sigmoid, infer_same_low)
ACT_DEFS(softsign, infer_same)
ACT_DEFS(softmax, infer_same)

static fl_var *unary_layer(fl_var *x, const char *type)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p || p->status != FL_OK) return NULL;
    fl_var *o = fl__tmp_var(p, type, x->dtype, x->ndim, x->shape);
    if (!o) return NULL;
    fl_io in = FL_IO1("X", x), out = FL_IO1("Out", o);
    return fl__op_append(p, type, &in, 1, &out, 1) ? o : NULL;
}
fl_var *fl_layer_relu(fl_var *x) { return unary_layer(x, "relu"); }
fl_var *fl_layer_tanh(fl_var *x) { return unary_layer(x, "tanh"); }
fl_var *fl_layer_sigmoid(fl_var *x) { return unary_layer(x, "sigmoid"); }
fl_var *fl_layer_softsign(fl_var *x) { return unary_layer(x, "softsign"); }
fl_var *fl_layer_softmax(fl_var *x) { return unary_layer(x, "softmax"); }

/* clang-format off */
const fl_op_def *const fl__ops_act[] = {
    &def_relu, &def_relu_grad, &def_tanh, &def_tanh_grad, &def_sigmoid, &def_sigmoid_grad,
    &def_softsign, &def_softsign_grad, &def_softmax, &def_softmax_grad, NULL};
/* clang-format on */
