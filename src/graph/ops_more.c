/*
 * ops_more.c - operator group "more": Paddle's l2_normalize (op "norm") with its gradient,
 * top_k's gradient, and the layer builders of fill_constant (the op is ops_basic.c's) and
 * top_k (ops_metric.c's):
 *   norm         X, axis, epsilon -> Out = X / Norm, Norm = sqrt(sum over axis of X^2 + epsilon)
 *                (Norm keeps axis with size 1); X@GRAD = (dOut - Out sum(dOut Out)) / Norm
 *   top_k_grad   X, Indices, Out@GRAD -> X@GRAD: each value's gradient goes back to the
 *                position it was taken from, the rest is 0
 *   sqrt abs exp log   elementwise, with gradients (dX = dOut * f'(X), from X and Out)
 *   shape        Input -> int32 [rank] holding its run-time dims (Paddle's shape op)
 *   assign_value attribute values (fp32_values or int64_values) -> Out of attribute shape
 * and the builders of create_global_var (a persistable variable filled in the startup
 * program).  Float32 unless said otherwise.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* ---- fill_constant ------------------------------------------------------------------------ */

/* Appends a fill_constant op writing value into o (NULL: the error is set); returns o. */
static fl_var *fill_into(fl_prog *p, fl_var *o, double value)
{
    if (!o) return NULL;
    o->stop_gradient = 1;
    fl_io out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "fill_constant", NULL, 0, &out, 1);
    if (!op || fl__attr_set_ints(op, "shape", o->shape, o->ndim) || fl__attr_set_i(op, "dtype", o->dtype) ||
        fl__attr_set_f(op, "value", value) || fl__op_finish(op))
        return NULL;
    return o;
}

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
    return fill_into(p, fl__tmp_var(p, base, dtype, ndim, shape), value);
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
        return fl__err(FL_EINVAL, "%s: axis out of range for '%s' of rank %d", c->op->def->type, fl__kctx_var_name(c, 0, 0),
                       x->ndim);
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
        return fl__err(FL_EINVAL, "norm_grad: gradient '%s' or Norm '%s' does not match X '%s'", fl__kctx_var_name(c, 2, 0),
                       fl__kctx_var_name(c, 1, 0), fl__kctx_var_name(c, 0, 0));
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
    if (!op || fl__attr_set_i(op, "axis", axis) || fl__attr_set_f(op, "epsilon", epsilon) || fl__op_finish(op)) return NULL;
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

/* ---- sqrt, abs, exp, log --------------------------------------------------------------------- */

enum { U_SQRT, U_ABS, U_EXP, U_LOG };
static const struct {
    const char *type;
    int kind;
} UNARY[] = {{"sqrt", U_SQRT}, {"abs", U_ABS}, {"exp", U_EXP}, {"log", U_LOG}};

static int unary_kind(const char *type)
{
    size_t n = strlen(type);
    if (n > 5 && !strcmp(type + n - 5, "_grad")) n -= 5;
    for (size_t i = 0; i < sizeof UNARY / sizeof UNARY[0]; i++)
        if (strlen(UNARY[i].type) == n && !strncmp(UNARY[i].type, type, n)) return UNARY[i].kind;
    return -1;
}

static int infer_unary(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, x->ndim, x->shape);
    op->out[0].vars[0]->lod_level = x->lod_level;
    return FL_OK;
}

static int run_unary(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *x = FL_IN(c, 0);
    fl_tensor *y = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(y, FL_FLOAT32, x->ndim, x->shape));
    const float *restrict a = x->data;
    float *restrict b = y->data;
    switch (unary_kind(c->op->def->type)) {
    case U_SQRT:
        for (int64_t i = 0; i < x->numel; i++) b[i] = sqrtf(a[i]);
        break;
    case U_ABS:
        for (int64_t i = 0; i < x->numel; i++) b[i] = fabsf(a[i]);
        break;
    case U_EXP:
        for (int64_t i = 0; i < x->numel; i++) b[i] = expf(a[i]);
        break;
    default:
        for (int64_t i = 0; i < x->numel; i++) b[i] = logf(a[i]);
        break;
    }
    return fl__tensor_share_lod(y, x);
}

/* Inputs X, Out, Out@GRAD; output X@GRAD.  sqrt: dOut / (2 Out); abs: dOut sign(X); exp:
 * dOut Out; log: dOut / X. */
static int run_unary_grad(fl_kctx *c)
{
    for (int s = 0; s < 3; s++) FL_CHECK(fl__kctx_dense_f32(c, s));
    const fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1), *g = FL_IN(c, 2);
    fl_tensor *d = FL_OUT(c, 0);
    if (g->numel != x->numel || y->numel != x->numel)
        return fl__err(FL_EINVAL, "%s: gradient '%s' has %lld elements, X '%s' %lld", c->op->def->type,
                       fl__kctx_var_name(c, 2, 0), (long long)g->numel, fl__kctx_var_name(c, 0, 0), (long long)x->numel);
    FL_CHECK(fl__tensor_reshape_raw(d, FL_FLOAT32, x->ndim, x->shape));
    const float *restrict a = x->data, *restrict o = y->data, *restrict gd = g->data;
    float *restrict dx = d->data;
    switch (unary_kind(c->op->def->type)) {
    case U_SQRT:
        for (int64_t i = 0; i < x->numel; i++) dx[i] = gd[i] * 0.5f / o[i];
        break;
    case U_ABS:
        for (int64_t i = 0; i < x->numel; i++) dx[i] = a[i] > 0 ? gd[i] : a[i] < 0 ? -gd[i] : 0.0f;
        break;
    case U_EXP:
        for (int64_t i = 0; i < x->numel; i++) dx[i] = gd[i] * o[i];
        break;
    default:
        for (int64_t i = 0; i < x->numel; i++) dx[i] = gd[i] / a[i];
        break;
    }
    return fl__tensor_share_lod(d, x);
}

static int grad_unary(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *y = op->out[0].vars[0], *dy = fl__grad_of(g, y), *dx = fl__grad_for(g, x);
    if (!dy || !dx) return FL_OK;
    char type[32];
    snprintf(type, sizeof type, "%s_grad", op->def->type);
    fl_io in[3] = {FL_IO1("X", x), FL_IO1("Out", y), FL_IO1("Out@GRAD", dy)};
    fl_io out = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, type, in, 3, &out, 1);
}

#define UNARY_DEF(name)                                                                                    \
    static const fl_op_def def_##name = {#name, {"X"}, {"Out"}, infer_unary, run_unary, grad_unary, NULL}; \
    static const fl_op_def def_##name##_grad = {                                                           \
        #name "_grad", {"X", "Out", "Out@GRAD"}, {"X@GRAD"}, fl__infer_nop, run_unary_grad, NULL, NULL};
UNARY_DEF(sqrt)
UNARY_DEF(abs)
UNARY_DEF(exp)
UNARY_DEF(log)

fl_var *fl_layer_unary(fl_var *x, const char *type)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!type || unary_kind(type) < 0 || strstr(type, "_grad")) {
        fl__err(FL_EINVAL, "fl_layer_unary: type '%s' is not sqrt, abs, exp or log", type ? type : "(null)");
        if (p && p->status == FL_OK)
            fl__prog_error(p, FL_EINVAL, "fl_layer_unary: type '%s' is unknown", type ? type : "(null)");
        return NULL;
    }
    if (!p) {
        fl__err(FL_EINVAL, "%s: x is NULL", type);
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    char base[128];
    fl__unique_name(p, type, base, sizeof base);
    fl_var *o = fl__tmp_var(p, base, FL_FLOAT32, x->ndim, x->shape);
    if (!o) return NULL;
    fl_io in = FL_IO1("X", x), out = FL_IO1("Out", o);
    return fl__op_append(p, type, &in, 1, &out, 1) ? o : NULL;
}

/* ---- shape ---------------------------------------------------------------------------------- */

static int infer_shape(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    int64_t r = op->in[0].vars[0]->ndim;
    fl__var_set_shape(op->out[0].vars[0], FL_INT32, 1, &r);
    return FL_OK;
}

static int run_shape(fl_kctx *c)
{
    const fl_tensor *x = FL_IN(c, 0);
    fl_tensor *o = FL_OUT(c, 0);
    int64_t r = x->ndim;
    FL_CHECK(fl__tensor_reshape_raw(o, FL_INT32, 1, &r));
    for (int i = 0; i < x->ndim; i++) ((int32_t *)o->data)[i] = (int32_t)x->shape[i];
    o->lod_n = 0;
    return FL_OK;
}

static const fl_op_def def_shape = {"shape", {"Input"}, {"Out"}, infer_shape, run_shape, NULL, NULL};

fl_var *fl_layer_shape(fl_var *x)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p) {
        fl__err(FL_EINVAL, "shape: x is NULL");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    char base[128];
    fl__unique_name(p, "shape", base, sizeof base);
    int64_t r = x->ndim;
    fl_var *o = fl__tmp_var(p, base, FL_INT32, 1, &r);
    if (!o) return NULL;
    o->stop_gradient = 1;
    fl_io in = FL_IO1("Input", x), out = FL_IO1("Out", o);
    return fl__op_append(p, "shape", &in, 1, &out, 1) ? o : NULL;
}

/* ---- assign_value --------------------------------------------------------------------------- */

static int infer_assign_value(fl_op *op)
{
    const fl_attr *sh = fl__attr_find(op, "shape");
    fl_dtype dt = (fl_dtype)fl__attr_i(op, "dtype", FL_FLOAT32);
    const fl_attr *v = fl__attr_find(op, dt == FL_FLOAT32 ? "fp32_values" : "int64_values");
    if (op->out[0].n != 1 || !sh || sh->type != FL_ATTR_INTS || sh->n < 1 || sh->n > FL_MAX_DIMS)
        return fl__op_error(op, "needs one Out and an int list 'shape' of 1 to %d dims", FL_MAX_DIMS);
    if (dt != FL_FLOAT32 && dt != FL_INT32 && dt != FL_INT64)
        return fl__op_error(op, "dtype %s is not float32, int32 or int64", fl_dtype_name(dt));
    int64_t n = 1;
    for (int i = 0; i < sh->n; i++) n *= sh->ints[i] > 0 ? sh->ints[i] : 0;
    if (!v || v->n != n) return fl__op_error(op, "holds %d values for shape of %lld elements", v ? v->n : 0, (long long)n);
    fl__var_set_shape(op->out[0].vars[0], dt, sh->n, sh->ints);
    return FL_OK;
}

static int run_assign_value(fl_kctx *c)
{
    const fl_attr *sh = fl__attr_find(c->op, "shape");
    fl_dtype dt = (fl_dtype)fl__attr_i(c->op, "dtype", FL_FLOAT32);
    const fl_attr *v = fl__attr_find(c->op, dt == FL_FLOAT32 ? "fp32_values" : "int64_values");
    fl_tensor *o = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(o, dt, sh->n, sh->ints));
    for (int64_t i = 0; i < o->numel; i++) {
        if (dt == FL_FLOAT32) ((float *)o->data)[i] = v->floats[i];
        else if (dt == FL_INT32) ((int32_t *)o->data)[i] = (int32_t)v->ints[i];
        else ((int64_t *)o->data)[i] = v->ints[i];
    }
    o->lod_n = 0;
    return FL_OK;
}

static const fl_op_def def_assign_value = {"assign_value",   {NULL}, {"Out"}, infer_assign_value,
                                           run_assign_value, NULL,   NULL};

fl_var *fl_layer_assign_value(fl_prog *p, int ndim, const int64_t *shape, fl_dtype dtype, const void *values)
{
    if (!p || p->magic != FL_PROG_MAGIC) {
        fl__err(FL_EINVAL, "assign_value: program is NULL or invalid");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    if (ndim < 1 || ndim > FL_MAX_DIMS || !shape || !values) {
        fl__prog_error(p, FL_EINVAL, "assign_value: needs values and a shape of 1 to %d dims", FL_MAX_DIMS);
        return NULL;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1 || n > (int64_t)1 << 24) {
            fl__prog_error(p, FL_EINVAL, "assign_value: shape[%d] = %lld must be >= 1 (at most 2^24 values)", i,
                           (long long)shape[i]);
            return NULL;
        }
        n *= shape[i];
    }
    char base[128];
    fl__unique_name(p, "assign_value", base, sizeof base);
    fl_var *o = fl__tmp_var(p, base, dtype, ndim, shape);
    if (!o) return NULL;
    o->stop_gradient = 1;
    fl_io out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "assign_value", NULL, 0, &out, 1);
    if (!op || fl__attr_set_ints(op, "shape", shape, ndim) || fl__attr_set_i(op, "dtype", dtype)) return NULL;
    int st;
    if (dtype == FL_FLOAT32) {
        st = fl__attr_set_floats(op, "fp32_values", values, (int)n);
    } else {
        int64_t *w = malloc((size_t)n * sizeof *w);
        if (!w) {
            fl__prog_error(p, FL_ENOMEM, "assign_value: out of memory");
            return NULL;
        }
        for (int64_t i = 0; i < n; i++)
            w[i] = dtype == FL_INT32 ? ((const int32_t *)values)[i] : ((const int64_t *)values)[i];
        st = fl__attr_set_ints(op, "int64_values", w, (int)n);
        free(w);
    }
    return st || fl__op_finish(op) ? NULL : o;
}

/* ---- the assign initializer (Paddle's NumpyArrayInitializer) ---------------------------------- */

int fl_init_assign(fl_prog *p, const float *values, int64_t n, fl_initializer *out)
{
    if (out) *out = (fl_initializer){FL_INIT_ASSIGN, 0.0f, 0.0f, 0}; /* id 0: fails when used */
    if (!p || p->magic != FL_PROG_MAGIC) return fl__err_handle(p, "fl_init_assign: program is NULL or invalid");
    if (!out) return fl__err(FL_EINVAL, "fl_init_assign: out is NULL");
    fl_prog *m = p->main ? p->main : p;
    if (!values || n < 1 || n > (int64_t)1 << 24)
        return fl__err(FL_EINVAL, "fl_init_assign: needs values and 1 to 2^24 of them, got %lld", (long long)n);
    float *copy = malloc((size_t)n * sizeof *copy);
    float **nv = realloc(m->assign_vals, (size_t)(m->nassign + 1) * sizeof *nv);
    if (nv) m->assign_vals = nv;
    int64_t *nn = nv ? realloc(m->assign_n, (size_t)(m->nassign + 1) * sizeof *nn) : NULL;
    if (nn) m->assign_n = nn;
    if (!copy || !nn) {
        free(copy);
        return fl__err(FL_ENOMEM, "fl_init_assign: out of memory for %lld values", (long long)n);
    }
    memcpy(copy, values, (size_t)n * sizeof *copy);
    m->assign_vals[m->nassign] = copy;
    m->assign_n[m->nassign++] = n;
    out->seed = (uint64_t)m->nassign;
    return FL_OK;
}

int fl__init_assign_append(fl_prog *sp, fl_var *sv, uint64_t id)
{
    fl_prog *m = sp->main ? sp->main : sp;
    if (id < 1 || id > (uint64_t)m->nassign)
        return fl__prog_error(sp, FL_EINVAL,
                              "parameter '%s': its assign initializer is not one of this program's (make it with "
                              "fl_init_assign on the program that holds the parameter)",
                              sv->name);
    int64_t want = fl__dims_prod(sv->shape, 0, sv->ndim), have = m->assign_n[id - 1];
    if (sv->dtype != FL_FLOAT32 || want != have) {
        char sh[96];
        fl__shape_str(sv, sh, sizeof sh);
        return fl__prog_error(sp, FL_EINVAL, "parameter '%s' %s %s has %lld elements, its assigned initial values %lld",
                              sv->name, fl_dtype_name(sv->dtype), sh, (long long)want, (long long)have);
    }
    fl_io out = FL_IO1("Out", sv);
    fl_op *op = fl__op_new(sp, "assign_value", NULL, 0, &out, 1);
    if (!op) return fl_prog_status(m);
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, sv->shape, sizeof shape);
    FL_CHECK(fl__attr_set_ints(op, "shape", shape, sv->ndim));
    FL_CHECK(fl__attr_set_i(op, "dtype", FL_FLOAT32));
    FL_CHECK(fl__attr_set_floats(op, "fp32_values", m->assign_vals[id - 1], (int)have));
    return fl__op_finish(op);
}

/* ---- create_global_var ----------------------------------------------------------------------- */

fl_var *fl_layer_create_global_var(fl_prog *p, const char *name, int ndim, const int64_t *shape, fl_dtype dtype,
                                   float value)
{
    return fl_layer_create_global_var_ex(p, name, ndim, shape, dtype, value, 1);
}

fl_var *fl_layer_create_global_var_ex(fl_prog *p, const char *name, int ndim, const int64_t *shape, fl_dtype dtype,
                                      float value, int persistable)
{
    if (!p || p->magic != FL_PROG_MAGIC) {
        fl__err(FL_EINVAL, "create_global_var: program is NULL or invalid");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    if (ndim < 1 || ndim > FL_MAX_DIMS || !shape) {
        fl__prog_error(p, FL_EINVAL, "create_global_var: shape must have 1 to %d dims", FL_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 1) {
            fl__prog_error(p, FL_EINVAL, "create_global_var: shape[%d] = %lld must be >= 1", i, (long long)shape[i]);
            return NULL;
        }
    if (dtype != FL_FLOAT32 && dtype != FL_FLOAT64 && dtype != FL_INT32 && dtype != FL_INT64) {
        fl__prog_error(p, FL_EINVAL, "create_global_var: dtype %s is not float32, float64, int32 or int64",
                       fl_dtype_name(dtype));
        return NULL;
    }
    char gen[128];
    if (!name || !*name) fl__unique_name(p, "global_var", gen, sizeof gen);
    else if (fl_prog_var(p, name)) {
        fl__prog_error(p, FL_EINVAL, "create_global_var: a variable named '%s' exists already", name);
        return NULL;
    }
    const char *vn = name && *name ? name : gen;
    if (!persistable) return fill_into(p, fl__var_create(p, vn, dtype, ndim, shape), value);
    fl_var *v = fl__persistable_create(p, vn, dtype, ndim, shape, value);
    if (v) v->stop_gradient = 1;
    return v;
}

/* clang-format off */
const fl_op_def *const fl__ops_more[] = {
    &def_norm, &def_norm_grad, &def_top_k_grad, &def_sqrt, &def_sqrt_grad, &def_abs, &def_abs_grad, &def_exp,
    &def_exp_grad, &def_log, &def_log_grad, &def_shape, &def_assign_value, NULL};
/* clang-format on */
