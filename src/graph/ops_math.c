/*
 * ops_math.c - operator group "math": square, reduce_mean and cast, with their gradients
 * and layer builders (Paddle's square, reduce_mean and cast ops).  DeepFM's second-order
 * term squares sums of embeddings, a collective example centres activations on their mean
 * over the batch (reduce_mean over dim 0, whose size is known only at run time), and the
 * CTR models cast float labels to int64 for auc (the op "dtype_cast", see below).
 */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* ---- square --------------------------------------------------------------------------------
 *
 * Out = X * X (float32); X@GRAD = 2 X Out@GRAD. */

static int infer_square(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    fl__var_set_shape(o, FL_FLOAT32, x->ndim, x->shape);
    o->lod_level = x->lod_level;
    return FL_OK;
}

static int run_square(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    fl_tensor *x = FL_IN(c, 0), *y = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(y, FL_FLOAT32, x->ndim, x->shape));
    const float *restrict a = x->data;
    float *restrict b = y->data;
    for (int64_t i = 0; i < x->numel; i++) b[i] = a[i] * a[i];
    return fl__tensor_share_lod(y, x);
}

/* Inputs X, Out@GRAD; output X@GRAD. */
static int run_square_grad(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    FL_CHECK(fl__kctx_dense_f32(c, 1));
    fl_tensor *x = FL_IN(c, 0), *g = FL_IN(c, 1), *d = FL_OUT(c, 0);
    if (g->numel != x->numel)
        return fl__err(FL_EINVAL, "square_grad: gradient '%s' has %lld elements, X '%s' %lld", fl__kctx_var_name(c, 1, 0),
                       (long long)g->numel, fl__kctx_var_name(c, 0, 0), (long long)x->numel);
    FL_CHECK(fl__tensor_reshape_raw(d, FL_FLOAT32, x->ndim, x->shape));
    const float *restrict a = x->data, *restrict dy = g->data;
    float *restrict dx = d->data;
    for (int64_t i = 0; i < x->numel; i++) dx[i] = 2.0f * a[i] * dy[i];
    return fl__tensor_share_lod(d, x);
}

static int grad_square(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]), *dx = fl__grad_for(g, x);
    if (!dy || !dx) return FL_OK;
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Out@GRAD", dy)};
    fl_io out = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, "square_grad", in, 2, &out, 1);
}

static const fl_op_def def_square = {"square", {"X"}, {"Out"}, infer_square, run_square, grad_square, NULL};
static const fl_op_def def_square_grad = {
    "square_grad", {"X", "Out@GRAD"}, {"X@GRAD"}, fl__infer_nop, run_square_grad, NULL, NULL};

fl_var *fl_layer_square(fl_var *x)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p) {
        fl__err(FL_EINVAL, "square: x is NULL");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    char base[128];
    fl__unique_name(p, "square", base, sizeof base);
    fl_var *o = fl__tmp_var(p, base, FL_FLOAT32, x->ndim, x->shape);
    if (!o) return NULL;
    fl_io in = FL_IO1("X", x), out = FL_IO1("Out", o);
    return fl__op_append(p, "square", &in, 1, &out, 1) ? o : NULL;
}

/* ---- reduce_mean -----------------------------------------------------------------------------
 *
 * The mean over attribute 'dim' (ints, negative from the end; none given, or reduce_all:
 * every dim; the shape rule is reduce_sum's, fl__reduce_dims) with keep_dim; the counts are
 * the run-time sizes, so the batch dimension may be reduced.  A result with no dims left is
 * [1].  X@GRAD = Out@GRAD / count, broadcast back. */

static int infer_reduce_mean(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    char red[FL_MAX_DIMS];
    int64_t os[FL_MAX_DIMS];
    int n, bad = fl__reduce_dims(op, x->ndim, x->shape, red, os, &n, 1);
    if (bad)
        return fl__op_error(op, "dim %lld (entry %d) is out of range or repeated for input '%s' (rank %d)",
                            (long long)fl__attr_find(op, "dim")->ints[bad - 1], bad - 1, x->name, x->ndim);
    fl__var_set_shape(o, FL_FLOAT32, n, os);
    o->lod_level = (x->ndim > 0 && !red[0]) ? x->lod_level : 0;
    return FL_OK;
}

/* For each element of x (row-major), the index of its output element; returns the count of
 * elements reduced into each output. */
static int64_t mean_map(const int64_t *xs, int rank, const char *red, int64_t numel, int64_t *map)
{
    int64_t ostride[FL_MAX_DIMS], idx[FL_MAX_DIMS] = {0}, s = 1, count = 1;
    for (int d = rank - 1; d >= 0; d--) {
        ostride[d] = red[d] ? 0 : s;
        if (red[d]) count *= xs[d];
        else s *= xs[d];
    }
    int64_t o = 0;
    for (int64_t i = 0; i < numel; i++) {
        map[i] = o;
        for (int d = rank - 1; d >= 0; d--) { /* odometer */
            o += ostride[d];
            if (++idx[d] < xs[d]) break;
            o -= ostride[d] * xs[d];
            idx[d] = 0;
        }
    }
    return count;
}

/* Shared by the kernel and its gradient: the reduced dims, output shape and element map
 * (in *ctx->state, regrown as needed). */
static int mean_plan(fl_kctx *c, const fl_tensor *x, int64_t *os, int *n, int64_t **map, int64_t *count)
{
    char red[FL_MAX_DIMS];
    if (fl__reduce_dims(c->op, x->ndim, x->shape, red, os, n, 1))
        return fl__err(FL_EINVAL, "%s: attribute 'dim' does not fit input '%s' of rank %d", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0), x->ndim);
    int64_t *m = realloc(*c->state, (size_t)(x->numel ? x->numel : 1) * sizeof *m);
    if (!m) return fl__err(FL_ENOMEM, "%s: out of memory", c->op->def->type);
    *c->state = m;
    *count = mean_map(x->shape, x->ndim, red, x->numel, m);
    *map = m;
    return FL_OK;
}

static int run_reduce_mean(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    fl_tensor *x = FL_IN(c, 0), *out = FL_OUT(c, 0);
    int64_t os[FL_MAX_DIMS], *map, count;
    int n;
    FL_CHECK(mean_plan(c, x, os, &n, &map, &count));
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, n, os));
    float *restrict y = out->data;
    const float *restrict a = x->data;
    memset(y, 0, (size_t)out->numel * sizeof *y);
    for (int64_t i = 0; i < x->numel; i++) y[map[i]] += a[i];
    const float inv = count ? 1.0f / (float)count : 0.0f;
    for (int64_t i = 0; i < out->numel; i++) y[i] *= inv;
    out->lod_n = 0;
    return FL_OK;
}

/* Inputs X, Out@GRAD; output X@GRAD. */
static int run_reduce_mean_grad(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 1));
    fl_tensor *x = FL_IN(c, 0), *g = FL_IN(c, 1), *dx = FL_OUT(c, 0);
    int64_t os[FL_MAX_DIMS], *map, count;
    int n;
    FL_CHECK(mean_plan(c, x, os, &n, &map, &count));
    int64_t want = 1;
    for (int i = 0; i < n; i++) want *= os[i];
    if (g->numel != want)
        return fl__err(FL_EINVAL, "reduce_mean_grad: gradient '%s' has %lld elements, expected %lld",
                       fl__kctx_var_name(c, 1, 0), (long long)g->numel, (long long)want);
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    const float inv = count ? 1.0f / (float)count : 0.0f;
    const float *restrict dy = g->data;
    float *restrict d = dx->data;
    for (int64_t i = 0; i < x->numel; i++) d[i] = dy[map[i]] * inv;
    return fl__tensor_share_lod(dx, x);
}

static int grad_reduce_mean(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]), *dx = fl__grad_for(g, x);
    if (!dy || !dx) return FL_OK;
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Out@GRAD", dy)};
    fl_io out = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, "reduce_mean_grad", in, 2, &out, 1);
}

static const fl_op_def def_reduce_mean = {"reduce_mean",    {"X"}, {"Out"}, infer_reduce_mean, run_reduce_mean,
                                          grad_reduce_mean, NULL};
static const fl_op_def def_reduce_mean_grad = {
    "reduce_mean_grad", {"X", "Out@GRAD"}, {"X@GRAD"}, fl__infer_nop, run_reduce_mean_grad, NULL, NULL};

fl_var *fl_layer_reduce_mean(fl_var *x, const int *dims, int ndims, int keep_dim)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p) {
        fl__err(FL_EINVAL, "reduce_mean: x is NULL");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    if (ndims < 0 || ndims > FL_MAX_DIMS || (ndims && !dims)) {
        fl__prog_error(p, FL_EINVAL, "reduce_mean: ndims must be 0 to %d (with dims given), got %d", FL_MAX_DIMS, ndims);
        return NULL;
    }
    char base[128];
    fl__unique_name(p, "reduce_mean", base, sizeof base);
    int64_t one = 1;
    fl_var *o = fl__tmp_var(p, base, FL_FLOAT32, 1, &one);
    if (!o) return NULL;
    int64_t d64[FL_MAX_DIMS];
    for (int i = 0; i < ndims; i++) d64[i] = dims[i];
    fl_io in = FL_IO1("X", x), out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "reduce_mean", &in, 1, &out, 1);
    if (!op || (ndims && fl__attr_set_ints(op, "dim", d64, ndims)) || fl__attr_set_i(op, "keep_dim", keep_dim ? 1 : 0) ||
        fl__op_finish(op))
        return NULL;
    return o;
}

/* ---- dtype_cast ------------------------------------------------------------------------------
 *
 * Paddle's cast between float32, float64, int32 and int64 (amp.c's "cast" op converts
 * between float32, bfloat16 and float16 for AMP; fl_layer_cast picks this one).
 * Out = X converted to attribute out_dtype (float32, float64, int32 or int64; floats to
 * integers truncate toward zero, as C and Paddle).  Between two float types the gradient is
 * Out@GRAD cast back; through an integer type no gradient flows. */

static int cast_type_ok(fl_dtype t) { return t == FL_FLOAT32 || t == FL_FLOAT64 || t == FL_INT32 || t == FL_INT64; }
static int is_float(fl_dtype t) { return t == FL_FLOAT32 || t == FL_FLOAT64; }

static int infer_cast(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    fl_dtype to = (fl_dtype)fl__attr_i(op, "out_dtype", FL_FLOAT32);
    if (!cast_type_ok(x->dtype) || !cast_type_ok(to))
        return fl__op_error(op, "input '%s' is %s, out_dtype %s: float32, float64, int32 and int64 only", x->name,
                            fl_dtype_name(x->dtype), fl_dtype_name(to));
    fl__var_set_shape(o, to, x->ndim, x->shape);
    o->lod_level = x->lod_level;
    return FL_OK;
}

static double cast_get(const void *p, fl_dtype t, int64_t i)
{
    switch (t) {
    case FL_FLOAT32: return ((const float *)p)[i];
    case FL_FLOAT64: return ((const double *)p)[i];
    case FL_INT32: return ((const int32_t *)p)[i];
    default: return (double)((const int64_t *)p)[i];
    }
}

/* int64 -> int64 copies exactly (a double holds 53 bits). */
static void cast_copy(void *y, fl_dtype to, const void *x, fl_dtype from, int64_t n)
{
    if (to == from) {
        memcpy(y, x, (size_t)n * fl_dtype_size(to));
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double v = cast_get(x, from, i);
        switch (to) {
        case FL_FLOAT32: ((float *)y)[i] = (float)v; break;
        case FL_FLOAT64: ((double *)y)[i] = v; break;
        case FL_INT32: ((int32_t *)y)[i] = (int32_t)v; break;
        default: ((int64_t *)y)[i] = from == FL_INT32 ? ((const int32_t *)x)[i] : (int64_t)v; break;
        }
    }
}

static int cast_run(fl_kctx *c, fl_dtype to)
{
    fl_tensor *x = FL_IN(c, 0), *y = FL_OUT(c, 0);
    if (!x || x->is_rows || !cast_type_ok(x->dtype))
        return fl__err(FL_EINVAL, "%s: input '%s' must be a dense float32, float64, int32 or int64 tensor",
                       c->op->def->type, fl__kctx_var_name(c, 0, 0));
    FL_CHECK(fl__tensor_reshape_raw(y, to, x->ndim, x->shape));
    cast_copy(y->data, to, x->data, x->dtype, x->numel);
    return fl__tensor_share_lod(y, x);
}

static int run_cast(fl_kctx *c) { return cast_run(c, (fl_dtype)fl__attr_i(c->op, "out_dtype", FL_FLOAT32)); }
/* The gradient op is a cast back to the forward input's type (attribute in_dtype). */
static int run_cast_grad(fl_kctx *c) { return cast_run(c, (fl_dtype)fl__attr_i(c->op, "in_dtype", FL_FLOAT32)); }

static int grad_cast(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    if (!is_float(x->dtype) || !is_float(o->dtype)) return FL_OK;
    fl_var *dy = fl__grad_of(g, o), *dx = fl__grad_for(g, x);
    if (!dy || !dx) return FL_OK;
    fl_io in = FL_IO1("Out@GRAD", dy), out = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, "dtype_cast_grad", &in, 1, &out, 1);
}

static const fl_op_def def_cast = {"dtype_cast", {"X"}, {"Out"}, infer_cast, run_cast, grad_cast, NULL};
static const fl_op_def def_cast_grad = {"dtype_cast_grad", {"Out@GRAD"}, {"X@GRAD"}, fl__infer_nop,
                                        run_cast_grad,     NULL,         NULL};

fl_var *fl_layer_cast(fl_var *x, fl_dtype dtype)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p) {
        fl__err(FL_EINVAL, "cast: x is NULL");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    char base[128];
    fl__unique_name(p, "cast", base, sizeof base);
    fl_var *o = fl__tmp_var(p, base, dtype, x->ndim, x->shape);
    if (!o) return NULL;
    if (!is_float(x->dtype) || !is_float(dtype)) o->stop_gradient = 1;
    fl_io in = FL_IO1("X", x), out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "dtype_cast", &in, 1, &out, 1);
    if (!op || fl__attr_set_i(op, "out_dtype", dtype) || fl__attr_set_i(op, "in_dtype", x->dtype) || fl__op_finish(op))
        return NULL;
    return o;
}

const fl_op_def *const fl__ops_math[] = {
    &def_square, &def_square_grad, &def_reduce_mean, &def_reduce_mean_grad, &def_cast, &def_cast_grad, NULL};
