/*
 * ops_more.c - operator group "more": Paddle's l2_normalize (op "norm") with its gradient,
 * top_k's gradient, and the layer builders of fill_constant (the op is ops_basic.c's) and
 * top_k (ops_metric.c's):
 *   norm         X, axis, epsilon -> Out = X / Norm, Norm = sqrt(sum over axis of X^2 + epsilon)
 *                (Norm keeps axis with size 1); X@GRAD = (dOut - Out sum(dOut Out)) / Norm
 *   top_k_grad   X, Indices, Out@GRAD -> X@GRAD: each value's gradient goes back to the
 *                position it was taken from, the rest is 0
 * Float32 only.
 */
#include <math.h>
#include <string.h>

#include "graph_internal.h"

/* ---- fill_constant ------------------------------------------------------------------------ */

fl_var *fl_layer_fill_constant(fl_prog *p, int ndim, const int64_t *shape, fl_dtype dtype, double value)
{
    if (!p || p->magic != FL_PROG_MAGIC) {
        fl__err(FL_EINVAL, "fill_constant: program is NULL or invalid");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    if (ndim < 1 || ndim > FL_MAX_DIMS || !shape) {
        fl__prog_error(p, FL_EINVAL, "fill_constant: shape must have 1 to %d dims", FL_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 1) {
            fl__prog_error(p, FL_EINVAL, "fill_constant: shape[%d] = %lld must be >= 1", i, (long long)shape[i]);
            return NULL;
        }
    if (dtype != FL_FLOAT32 && dtype != FL_FLOAT64 && dtype != FL_INT32 && dtype != FL_INT64) {
        fl__prog_error(p, FL_EINVAL, "fill_constant: dtype %s is not float32, float64, int32 or int64",
                       fl_dtype_name(dtype));
        return NULL;
    }
    char base[128];
    fl__unique_name(p, "fill_constant", base, sizeof base);
    fl_var *o = fl__tmp_var(p, base, dtype, ndim, shape);
    if (!o) return NULL;
    o->stop_gradient = 1;
    fl_io out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "fill_constant", NULL, 0, &out, 1);
    if (!op || fl__attr_set_ints(op, "shape", shape, ndim) || fl__attr_set_i(op, "dtype", dtype) ||
        fl__attr_set_f(op, "value", value) || fl__op_finish(op))
        return NULL;
    return o;
}

/* ---- norm (l2_normalize) ------------------------------------------------------------------- */

/* x viewed as [pre, n, post] around axis (negative counts from the end). */
static int norm_axis(int rank, int64_t axis, int *ax)
{
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return -1;
    *ax = (int)axis;
    return 0;
}

static int infer_norm(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    int ax;
    if (norm_axis(x->ndim, fl__attr_i(op, "axis", -1), &ax))
        return fl__op_error(op, "axis %lld is out of range for input '%s' of rank %d",
                            (long long)fl__attr_i(op, "axis", -1), x->name, x->ndim);
    if (!(fl__attr_f(op, "epsilon", 1e-10) >= 0)) return fl__op_error(op, "epsilon must be >= 0");
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, x->ndim, x->shape);
    op->out[0].vars[0]->lod_level = x->lod_level;
    int64_t ns[FL_MAX_DIMS];
    memcpy(ns, x->shape, sizeof ns);
    ns[ax] = 1;
    fl__var_set_shape(op->out[1].vars[0], FL_FLOAT32, x->ndim, ns);
    return FL_OK;
}

static int norm_dims(fl_kctx *c, const fl_tensor *x, int64_t *pre, int64_t *n, int64_t *post)
{
    int ax;
    if (norm_axis(x->ndim, fl__attr_i(c->op, "axis", -1), &ax))
        return fl__err(FL_EINVAL, "%s: axis out of range for '%s' of rank %d", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0), x->ndim);
    *pre = fl__dims_prod(x->shape, 0, ax), *n = x->shape[ax], *post = fl__dims_prod(x->shape, ax + 1, x->ndim);
    return FL_OK;
}

static int run_norm(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *x = FL_IN(c, 0);
    fl_tensor *out = FL_OUT(c, 0), *nt = FL_OUT(c, 1);
    int64_t pre, n, post;
    FL_CHECK(norm_dims(c, x, &pre, &n, &post));
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, x->ndim, x->shape));
    int64_t ns[FL_MAX_DIMS];
    memcpy(ns, x->shape, sizeof ns);
    int ax = x->ndim - 1;
    norm_axis(x->ndim, fl__attr_i(c->op, "axis", -1), &ax);
    ns[ax] = 1;
    FL_CHECK(fl__tensor_reshape_raw(nt, FL_FLOAT32, x->ndim, ns));
    double eps = fl__attr_f(c->op, "epsilon", 1e-10);
    const float *xd = x->data;
    float *o = out->data, *nd = nt->data;
    for (int64_t i = 0; i < pre; i++)
        for (int64_t k = 0; k < post; k++) {
            const float *xr = xd + i * n * post + k;
            double s = 0.0;
            for (int64_t j = 0; j < n; j++) s += (double)xr[j * post] * xr[j * post];
            double nv = sqrt(s + eps);
            nd[i * post + k] = (float)nv;
            float inv = nv > 0 ? (float)(1.0 / nv) : 0.0f;
            for (int64_t j = 0; j < n; j++) o[i * n * post + k + j * post] = xr[j * post] * inv;
        }
    return fl__tensor_share_lod(out, x);
}

/* Inputs X, Norm, Out@GRAD; output X@GRAD. */
static int run_norm_grad(fl_kctx *c)
{
    for (int s = 0; s < 3; s++) FL_CHECK(fl__kctx_dense_f32(c, s));
    const fl_tensor *x = FL_IN(c, 0), *nt = FL_IN(c, 1), *g = FL_IN(c, 2);
    fl_tensor *dx = FL_OUT(c, 0);
    int64_t pre, n, post;
    FL_CHECK(norm_dims(c, x, &pre, &n, &post));
    if (g->numel != x->numel || nt->numel != pre * post)
        return fl__err(FL_EINVAL, "norm_grad: gradient '%s' or Norm '%s' does not match X '%s'",
                       fl__kctx_var_name(c, 2, 0), fl__kctx_var_name(c, 1, 0), fl__kctx_var_name(c, 0, 0));
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    const float *xd = x->data, *nd = nt->data, *gd = g->data;
    float *d = dx->data;
    for (int64_t i = 0; i < pre; i++)
        for (int64_t k = 0; k < post; k++) {
            int64_t base = i * n * post + k;
            double nv = nd[i * post + k], s = 0.0;
            if (nv <= 0) {
                for (int64_t j = 0; j < n; j++) d[base + j * post] = 0.0f;
                continue;
            }
            for (int64_t j = 0; j < n; j++) s += (double)gd[base + j * post] * xd[base + j * post];
            /* y = x / n: dx = (g - y sum(g y)) / n = g / n - x sum(g x) / n^3 */
            for (int64_t j = 0; j < n; j++)
                d[base + j * post] = (float)(gd[base + j * post] / nv - xd[base + j * post] * s / (nv * nv * nv));
        }
    return fl__tensor_share_lod(dx, x);
}

static int grad_norm(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]), *dx = fl__grad_for(g, x);
    if (!dy || !dx) return FL_OK;
    fl_io in[3] = {FL_IO1("X", x), FL_IO1("Norm", op->out[1].vars[0]), FL_IO1("Out@GRAD", dy)};
    fl_io out = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, "norm_grad", in, 3, &out, 1);
}

static const fl_op_def def_norm = {"norm", {"X"}, {"Out", "Norm"}, infer_norm, run_norm, grad_norm, NULL};
static const fl_op_def def_norm_grad = {
    "norm_grad", {"X", "Norm", "Out@GRAD"}, {"X@GRAD"}, fl__infer_nop, run_norm_grad, NULL, NULL};

fl_var *fl_layer_l2_normalize(fl_var *x, int axis, float epsilon)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p) {
        fl__err(FL_EINVAL, "l2_normalize: x is NULL");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    char base[128];
    fl__unique_name(p, "l2_normalize", base, sizeof base);
    fl_var *o = fl__tmp_var(p, base, FL_FLOAT32, x->ndim, x->shape);
    fl_var *nv = o ? fl__tmp_var(p, base, FL_FLOAT32, x->ndim, x->shape) : NULL;
    if (!nv) return NULL;
    nv->stop_gradient = 1;
    fl_io in = FL_IO1("X", x), out[2] = {FL_IO1("Out", o), FL_IO1("Norm", nv)};
    fl_op *op = fl__op_new(p, "norm", &in, 1, out, 2);
    if (!op || fl__attr_set_i(op, "axis", axis) || fl__attr_set_f(op, "epsilon", epsilon) || fl__op_finish(op))
        return NULL;
    return o;
}

/* ---- top_k: gradient and layer -------------------------------------------------------------- */

/* Inputs X, Indices, Out@GRAD; output X@GRAD. */
static int run_top_k_grad(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    FL_CHECK(fl__kctx_dense_f32(c, 2));
    const fl_tensor *x = FL_IN(c, 0), *idx = FL_IN(c, 1), *g = FL_IN(c, 2);
    fl_tensor *dx = FL_OUT(c, 0);
    if (!idx || idx->dtype != FL_INT64 || idx->numel != g->numel || x->ndim < 1)
        return fl__err(FL_EINVAL, "top_k_grad: Indices '%s' must be int64 shaped like the gradient '%s'",
                       fl__kctx_var_name(c, 1, 0), fl__kctx_var_name(c, 2, 0));
    int64_t cls = x->shape[x->ndim - 1], rows = cls ? x->numel / cls : 0, k = rows ? g->numel / rows : 0;
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    memset(dx->data, 0, (size_t)x->numel * sizeof(float));
    const int64_t *id = idx->data;
    const float *gd = g->data;
    float *d = dx->data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++) {
            int64_t at = id[r * k + j];
            if (at < 0 || at >= cls)
                return fl__err(FL_EINVAL, "top_k_grad: index %lld out of range [0, %lld)", (long long)at, (long long)cls);
            d[r * cls + at] += gd[r * k + j];
        }
    return fl__tensor_share_lod(dx, x);
}

int fl__grad_top_k(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]), *dx = fl__grad_for(g, x);
    if (!dy || !dx) return FL_OK;
    fl_io in[3] = {FL_IO1("X", x), FL_IO1("Indices", op->out[1].vars[0]), FL_IO1("Out@GRAD", dy)};
    fl_io out = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, "top_k_grad", in, 3, &out, 1);
}

static const fl_op_def def_top_k_grad = {
    "top_k_grad", {"X", "Indices", "Out@GRAD"}, {"X@GRAD"}, fl__infer_nop, run_top_k_grad, NULL, NULL};

fl_var *fl_layer_topk(fl_var *x, int k, fl_var **indices)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p) {
        fl__err(FL_EINVAL, "topk: x is NULL");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    char base[128];
    fl__unique_name(p, "top_k", base, sizeof base);
    fl_var *v = fl__tmp_var(p, base, FL_FLOAT32, x->ndim, x->shape);
    fl_var *ix = v ? fl__tmp_var(p, base, FL_INT64, x->ndim, x->shape) : NULL;
    if (!ix) return NULL;
    ix->stop_gradient = 1;
    fl_io in = FL_IO1("X", x), out[2] = {FL_IO1("Out", v), FL_IO1("Indices", ix)};
    fl_op *op = fl__op_new(p, "top_k", &in, 1, out, 2);
    if (!op || fl__attr_set_i(op, "k", k) || fl__op_finish(op)) return NULL;
    if (indices) *indices = ix;
    return v;
}

const fl_op_def *const fl__ops_more[] = {&def_norm, &def_norm_grad, &def_top_k_grad, NULL};
