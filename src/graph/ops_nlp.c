/*
 * ops_nlp.c - operator group "nlp": the dense ops of Transformer and BERT programs,
 * with Paddle's types, slots and attributes: layer_norm (begin_norm_axis, epsilon, optional
 * Scale and Bias; outputs Y, Mean, Variance), gelu (exact erf form, or the tanh form with
 * `approximate`) and transpose2 (axis; XShape as Paddle writes it: shape [0, dims of X],
 * no data), label_smooth (epsilon, optional PriorDist) and expand (expand_times: the
 * attention mask [B, 1, 1, S] tiled to [B, H, S, S]).  Float32 kernels; each has a gradient.  The index ops (gather, gather_nd,
 * stack, split, slice, one_hot) are in ops_nlp_idx.c; softmax over the last axis is
 * ops_act.c's, matmul / matmul_v2 ops_extra.c's.
 */
#include <math.h>
#include <string.h>

#include "../tensor/fastmath.h"
#include "graph_internal.h"

/* One variable in slot s of op's inputs (out = 0) or outputs (out = 1), or NULL. */
static fl_var *slot_var(const fl_op *op, int out, int s)
{
    const fl_slot *sl = out ? &op->out[s] : &op->in[s];
    return sl->n == 1 ? sl->vars[0] : NULL;
}

/* Checks that each listed slot holds at most one variable (exactly one where required). */
static int check_opt_slots(fl_op *op, int out, int nslots, unsigned required)
{
    for (int s = 0; s < nslots; s++) {
        const fl_slot *sl = out ? &op->out[s] : &op->in[s];
        const char *name = out ? op->def->out_names[s] : op->def->in_names[s];
        if (sl->n > 1 || (sl->n == 0 && (required >> s & 1u)))
            return fl__op_error(op, "%s slot %s holds %d variables (%s)", out ? "output" : "input", name, sl->n,
                                required >> s & 1u ? "one expected" : "at most one");
    }
    return FL_OK;
}

/* ---- layer_norm ----------------------------------------------------------------------------
 *
 * X viewed as [left, right] with left = prod(dims[:begin_norm_axis]): each row is
 * normalised, y = (x - mean) / sqrt(var + epsilon) * scale + bias, with scale and bias of
 * `right` elements (either may be absent).  Mean and Variance [left] (the biased variance,
 * as Paddle) are kept for the gradient. */

static int ln_split(const int64_t *s, int nd, int axis, int64_t *left, int64_t *right)
{
    *left = 1, *right = 1;
    for (int i = 0; i < nd; i++) {
        int64_t *t = i < axis ? left : right;
        *t = *t < 0 || s[i] < 0 ? -1 : *t * s[i];
    }
    return FL_OK;
}

static int infer_layer_norm(fl_op *op)
{
    FL_CHECK(check_opt_slots(op, 0, 3, 1u));
    FL_CHECK(check_opt_slots(op, 1, 3, 7u));
    fl_var *x = slot_var(op, 0, 0);
    FL_CHECK(fl__op_need_f32(op, x));
    int axis = (int)fl__attr_i(op, "begin_norm_axis", 1);
    if (axis < 1 || axis >= x->ndim)
        return fl__op_error(op, "begin_norm_axis %d of X '%s' (rank %d) must be in [1, %d)", axis, x->name, x->ndim,
                            x->ndim);
    double eps = fl__attr_f(op, "epsilon", 1e-5);
    if (!(eps >= 0.0)) return fl__op_error(op, "epsilon %g must be >= 0", eps);
    int64_t left, right;
    ln_split(x->shape, x->ndim, axis, &left, &right);
    for (int s = 1; s < 3; s++) {
        fl_var *v = slot_var(op, 0, s);
        if (!v) continue;
        FL_CHECK(fl__op_need_f32(op, v));
        int64_t n = fl__dims_prod(v->shape, 0, v->ndim);
        int unknown = 0;
        for (int i = 0; i < v->ndim; i++) unknown |= v->shape[i] < 0;
        if (!unknown && right >= 0 && n != right)
            return fl__op_error(op, "%s '%s' has %lld elements, X '%s' normalises rows of %lld", s == 1 ? "Scale" : "Bias",
                                v->name, (long long)n, x->name, (long long)right);
    }
    fl__var_set_shape(slot_var(op, 1, 0), FL_FLOAT32, x->ndim, x->shape);
    fl__var_set_shape(slot_var(op, 1, 1), FL_FLOAT32, 1, &left);
    fl__var_set_shape(slot_var(op, 1, 2), FL_FLOAT32, 1, &left);
    return FL_OK;
}

/* Run-time rows of X and the optional Scale / Bias checked against them. */
static int ln_runtime(fl_kctx *c, int scale_slot, int bias_slot, int64_t *left, int64_t *right, const float **sc,
                      const float **bi)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *x = FL_IN(c, 0);
    int axis = (int)fl__attr_i(c->op, "begin_norm_axis", 1);
    if (axis < 1 || axis >= x->ndim)
        return fl__err(FL_EINVAL, "%s: begin_norm_axis %d out of range for X '%s' of rank %d", c->op->def->type, axis,
                       fl__kctx_var_name(c, 0, 0), x->ndim);
    ln_split(x->shape, x->ndim, axis, left, right);
    const int slots[2] = {scale_slot, bias_slot};
    const float **ptr[2] = {sc, bi};
    for (int k = 0; k < 2; k++) {
        *ptr[k] = NULL;
        const fl_tensor *t = slots[k] >= 0 ? FL_IN(c, slots[k]) : NULL;
        if (!t) continue;
        FL_CHECK(fl__kctx_dense_f32(c, slots[k]));
        if (t->numel != *right)
            return fl__err(FL_EINVAL, "%s: %s '%s' has %lld elements, rows of X '%s' %lld", c->op->def->type,
                           k ? "Bias" : "Scale", fl__kctx_var_name(c, slots[k], 0), (long long)t->numel,
                           fl__kctx_var_name(c, 0, 0), (long long)*right);
        *ptr[k] = t->data;
    }
    return FL_OK;
}

static int run_layer_norm(fl_kctx *c)
{
    int64_t left, right;
    const float *sc, *bi;
    FL_CHECK(ln_runtime(c, 1, 2, &left, &right, &sc, &bi));
    const fl_tensor *x = FL_IN(c, 0);
    fl_tensor *y = FL_OUT(c, 0), *mt = FL_OUT(c, 1), *vt = FL_OUT(c, 2);
    FL_CHECK(fl__tensor_reshape_raw(y, FL_FLOAT32, x->ndim, x->shape));
    FL_CHECK(fl__tensor_reshape_raw(mt, FL_FLOAT32, 1, &left));
    FL_CHECK(fl__tensor_reshape_raw(vt, FL_FLOAT32, 1, &left));
    y->lod_n = 0;
    float eps = (float)fl__attr_f(c->op, "epsilon", 1e-5);
    const float *xd = x->data;
    float *yd = y->data, *md = mt->data, *vd = vt->data;
    float inv_n = right ? 1.0f / (float)right : 0.0f;
    for (int64_t r = 0; r < left; r++) {
        const float *restrict xr = xd + r * right;
        float *restrict yr = yd + r * right;
        float s = 0.0f;
        for (int64_t j = 0; j < right; j++) s += xr[j];
        float mean = s * inv_n, ss = 0.0f;
        for (int64_t j = 0; j < right; j++) ss += (xr[j] - mean) * (xr[j] - mean);
        float var = ss * inv_n, rstd = 1.0f / sqrtf(var + eps);
        md[r] = mean, vd[r] = var;
        for (int64_t j = 0; j < right; j++) yr[j] = (xr[j] - mean) * rstd;
        if (sc)
            for (int64_t j = 0; j < right; j++) yr[j] *= sc[j];
        if (bi)
            for (int64_t j = 0; j < right; j++) yr[j] += bi[j];
    }
    return FL_OK;
}

/* layer_norm_grad: inputs X, Scale (optional), Mean, Variance, Y@GRAD; outputs X@GRAD,
 * Scale@GRAD, Bias@GRAD (each optional).  With g = dy * scale and xhat the normalised x:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
static int run_layer_norm_grad(fl_kctx *c)
{
    int64_t left, right;
    const float *sc, *unused;
    FL_CHECK(ln_runtime(c, 1, -1, &left, &right, &sc, &unused));
    for (int s = 2; s < 5; s++) FL_CHECK(fl__kctx_dense_f32(c, s));
    const fl_tensor *x = FL_IN(c, 0), *mt = FL_IN(c, 2), *vt = FL_IN(c, 3), *dyt = FL_IN(c, 4);
    if (mt->numel != left || vt->numel != left || dyt->numel != x->numel)
        return fl__err(FL_EINVAL,
                       "layer_norm_grad: Mean '%s' (%lld), Variance '%s' (%lld) or Y@GRAD '%s' (%lld) do not "
                       "match X '%s' [%lld rows of %lld]",
                       fl__kctx_var_name(c, 2, 0), (long long)mt->numel, fl__kctx_var_name(c, 3, 0), (long long)vt->numel,
                       fl__kctx_var_name(c, 4, 0), (long long)dyt->numel, fl__kctx_var_name(c, 0, 0), (long long)left,
                       (long long)right);
    fl_tensor *dx = FL_OUT(c, 0), *ds = FL_OUT(c, 1), *db = FL_OUT(c, 2);
    if (dx) FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    if (ds) FL_CHECK(fl__tensor_reshape_raw(ds, FL_FLOAT32, 1, &right));
    if (db) FL_CHECK(fl__tensor_reshape_raw(db, FL_FLOAT32, 1, &right));
    if (ds) memset(ds->data, 0, (size_t)right * sizeof(float));
    if (db) memset(db->data, 0, (size_t)right * sizeof(float));
    float *g = malloc((size_t)(right ? right : 1) * 2 * sizeof *g);
    if (!g) return fl__err(FL_ENOMEM, "layer_norm_grad: out of memory");
    float *xh = g + right;
    float eps = (float)fl__attr_f(c->op, "epsilon", 1e-5), inv_n = right ? 1.0f / (float)right : 0.0f;
    const float *xd = x->data, *md = mt->data, *vd = vt->data, *dyd = dyt->data;
    for (int64_t r = 0; r < left; r++) {
        const float *restrict xr = xd + r * right, *restrict dy = dyd + r * right;
        float mean = md[r], rstd = 1.0f / sqrtf(vd[r] + eps);
        for (int64_t j = 0; j < right; j++) xh[j] = (xr[j] - mean) * rstd;
        if (ds) {
            float *restrict s = ds->data;
            for (int64_t j = 0; j < right; j++) s[j] += dy[j] * xh[j];
        }
        if (db) {
            float *restrict b = db->data;
            for (int64_t j = 0; j < right; j++) b[j] += dy[j];
        }
        if (!dx) continue;
        for (int64_t j = 0; j < right; j++) g[j] = sc ? dy[j] * sc[j] : dy[j];
        float a = 0.0f, b = 0.0f;
        for (int64_t j = 0; j < right; j++) a += g[j], b += g[j] * xh[j];
        a *= inv_n, b *= inv_n;
        float *restrict o = (float *)dx->data + r * right;
        for (int64_t j = 0; j < right; j++) o[j] = rstd * (g[j] - a - xh[j] * b);
    }
    free(g);
    return FL_OK;
}

static int grad_layer_norm(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = slot_var(op, 0, 0), *sc = slot_var(op, 0, 1), *bi = slot_var(op, 0, 2);
    fl_var *dy = fl__grad_of(g, slot_var(op, 1, 0));
    if (!dy) return FL_OK;
    fl_var *dx = fl__grad_for(g, x), *ds = sc ? fl__grad_for(g, sc) : NULL, *db = bi ? fl__grad_for(g, bi) : NULL;
    fl_var *dxv[1] = {dx}, *dsv[1] = {ds}, *dbv[1] = {db};
    fl_io o[3];
    int no = 0;
    if (dx) o[no++] = (fl_io){"X@GRAD", dxv, 1};
    if (ds) o[no++] = (fl_io){"Scale@GRAD", dsv, 1};
    if (db) o[no++] = (fl_io){"Bias@GRAD", dbv, 1};
    if (!no) return FL_OK;
    fl_var *scv[1] = {sc};
    fl_io in[5] = {FL_IO1("X", x),
                   FL_IO1("Mean", slot_var(op, 1, 1)),
                   FL_IO1("Variance", slot_var(op, 1, 2)),
                   FL_IO1("Y@GRAD", dy),
                   {"Scale", scv, 1}};
    return fl__grad_append(op, "layer_norm_grad", in, sc ? 5 : 4, o, no);
}

static const fl_op_def def_layer_norm = {"layer_norm",     {"X", "Scale", "Bias"}, {"Y", "Mean", "Variance"},
                                         infer_layer_norm, run_layer_norm,         grad_layer_norm};
static const fl_op_def def_layer_norm_grad = {"layer_norm_grad",
                                              {"X", "Scale", "Mean", "Variance", "Y@GRAD"},
                                              {"X@GRAD", "Scale@GRAD", "Bias@GRAD"},
                                              fl__infer_nop,
                                              run_layer_norm_grad,
                                              NULL};

/* ---- gelu -------------------------------------------------------------------------------------
 *
 * approximate 0: y = x/2 (1 + erf(x / sqrt 2)); approximate 1: y = x/2 (1 + tanh(sqrt(2/pi)
 * (x + 0.044715 x^3))), Paddle's two forms. */

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f
#define GELU_R 0.3989422804014327f /* 1 / sqrt(2 pi) */

/* Branch-free float forms (selects and bit tricks only) so the loops below vectorise; they
 * are compiled for AVX-512, AVX2 and baseline x86-64 (FL_CLONE_TARGETS).  libm's erff and
 * expf are calls the compiler cannot vectorise, and took most of gelu's time in BERT.
 *
 * erf: x P(x^2) / Q(x^2) on x clamped to [-4, 4] (erf rounds to +-1 in float outside), the
 * minimax fit of Eigen's generic_fast_erf_float; absolute error below 4e-7. */
static inline float gelu_erf(float v)
{
    float x = v < -4.0f ? -4.0f : (v > 4.0f ? 4.0f : v);
    float x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return x * p / q;
}

/* tanh through exp: 1 - 2 / (exp(2x) + 1), x clamped to [-9, 9] (tanh rounds to +-1). */
static inline float gelu_tanh(float v)
{
    float x = v < -9.0f ? -9.0f : (v > 9.0f ? 9.0f : v);
    float e = x > 0 ? fl__fast_expf(-2.0f * x) : fl__fast_expf(2.0f * x); /* in (0, 1] */
    float t = (1.0f - e) / (1.0f + e);
    return x > 0 ? t : -t;
}

FL_CLONE_TARGETS static void gelu_fwd(float *restrict b, const float *restrict a, int64_t n, int approx)
{
    if (approx)
        for (int64_t i = 0; i < n; i++)
            b[i] = 0.5f * a[i] * (1.0f + gelu_tanh(GELU_K * (a[i] + GELU_C * a[i] * a[i] * a[i])));
    else
        for (int64_t i = 0; i < n; i++) b[i] = 0.5f * a[i] * (1.0f + gelu_erf(a[i] * (float)M_SQRT1_2));
}

FL_CLONE_TARGETS static void gelu_bwd(float *restrict o, const float *restrict a, const float *restrict g, int64_t n,
                                      int approx)
{
    if (approx)
        for (int64_t i = 0; i < n; i++) {
            float v = a[i], t = gelu_tanh(GELU_K * (v + GELU_C * v * v * v));
            o[i] = g[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * v * v));
        }
    else
        for (int64_t i = 0; i < n; i++) {
            float v = a[i];
            o[i] = g[i] * (0.5f * (1.0f + gelu_erf(v * (float)M_SQRT1_2)) + v * fl__fast_expf(-0.5f * v * v) * GELU_R);
        }
}

static int infer_gelu(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, x->ndim, x->shape);
    return FL_OK;
}

static int run_gelu(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *x = FL_IN(c, 0);
    fl_tensor *y = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(y, FL_FLOAT32, x->ndim, x->shape));
    FL_CHECK(fl__tensor_share_lod(y, x));
    gelu_fwd(y->data, x->data, x->numel, (int)fl__attr_i(c->op, "approximate", 0));
    return FL_OK;
}

/* gelu_grad: inputs X, Out@GRAD; output X@GRAD. */
static int run_gelu_grad(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    FL_CHECK(fl__kctx_dense_f32(c, 1));
    const fl_tensor *x = FL_IN(c, 0), *dy = FL_IN(c, 1);
    fl_tensor *dx = FL_OUT(c, 0);
    if (dy->numel != x->numel)
        return fl__err(FL_EINVAL, "gelu_grad: Out@GRAD '%s' has %lld elements, X '%s' %lld", fl__kctx_var_name(c, 1, 0),
                       (long long)dy->numel, fl__kctx_var_name(c, 0, 0), (long long)x->numel);
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    gelu_bwd(dx->data, x->data, dy->data, x->numel, (int)fl__attr_i(c->op, "approximate", 0));
    return FL_OK;
}

static int grad_gelu(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]), *dx = fl__grad_for(g, x);
    if (!dy || !dx) return FL_OK;
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Out@GRAD", dy)}, out = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, "gelu_grad", in, 2, &out, 1);
}

static const fl_op_def def_gelu = {"gelu", {"X"}, {"Out"}, infer_gelu, run_gelu, grad_gelu};
static const fl_op_def def_gelu_grad = {"gelu_grad", {"X", "Out@GRAD"}, {"X@GRAD"}, fl__infer_nop, run_gelu_grad, NULL};

/* ---- transpose2 -------------------------------------------------------------------------------
 *
 * Out = X with dims permuted: Out.shape[i] = X.shape[axis[i]].  XShape (optional) is
 * Paddle's shape carrier [0, dims of X], holding no data.  The gradient permutes back. */

/* Checks that axis is a permutation of [0, nd). */
static int perm_ok(const int64_t *axis, int n, int nd)
{
    if (n != nd || nd > FL_MAX_DIMS) return 0;
    int seen[FL_MAX_DIMS] = {0};
    for (int i = 0; i < n; i++) {
        if (axis[i] < 0 || axis[i] >= nd || seen[axis[i]]) return 0;
        seen[axis[i]] = 1;
    }
    return 1;
}

static int infer_transpose2(fl_op *op)
{
    FL_CHECK(check_opt_slots(op, 0, 1, 1u));
    FL_CHECK(check_opt_slots(op, 1, 2, 1u));
    fl_var *x = slot_var(op, 0, 0), *xs = slot_var(op, 1, 1);
    FL_CHECK(fl__op_need_f32(op, x));
    const fl_attr *a = fl__attr_find(op, "axis");
    if (!a || a->type != FL_ATTR_INTS || !perm_ok(a->ints, a->n, x->ndim))
        return fl__op_error(op, "axis must be a permutation of the %d dims of X '%s'", x->ndim, x->name);
    int64_t os[FL_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) os[i] = x->shape[a->ints[i]];
    fl__var_set_shape(slot_var(op, 1, 0), FL_FLOAT32, x->ndim, os);
    if (xs) {
        if (x->ndim + 1 > FL_MAX_DIMS) return fl__op_error(op, "X '%s' has too many dims for XShape", x->name);
        int64_t s[FL_MAX_DIMS];
        s[0] = 0;
        memcpy(s + 1, x->shape, (size_t)x->ndim * sizeof *s);
        fl__var_set_shape(xs, FL_FLOAT32, x->ndim + 1, s);
    }
    return FL_OK;
}

/* dst = src (shape s, nd dims) permuted by perm: dst dim i is src dim perm[i].  Runs of the
 * last dim are copied whole when it stays last. */
static void permute(float *restrict dst, const float *restrict src, const int64_t *s, int nd, const int64_t *perm)
{
    int64_t st[FL_MAX_DIMS] = {0}, os[FL_MAX_DIMS] = {0}, ost[FL_MAX_DIMS] = {0}, idx[FL_MAX_DIMS] = {0};
    st[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) st[i] = st[i + 1] * s[i + 1];
    for (int i = 0; i < nd; i++) os[i] = s[perm[i]], ost[i] = st[perm[i]];
    int64_t total = fl__dims_prod(s, 0, nd), inner = os[nd - 1];
    if (total == 0) return;
    int64_t istep = ost[nd - 1];
    for (int64_t done = 0; done < total; done += inner) {
        int64_t off = 0;
        for (int i = 0; i < nd - 1; i++) off += idx[i] * ost[i];
        if (istep == 1) memcpy(dst + done, src + off, (size_t)inner * sizeof *dst);
        else
            for (int64_t j = 0; j < inner; j++) dst[done + j] = src[off + j * istep];
        for (int i = nd - 2; i >= 0; i--) {
            if (++idx[i] < os[i]) break;
            idx[i] = 0;
        }
    }
}

static int run_transpose(fl_kctx *c, int inverse)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *x = FL_IN(c, 0);
    const fl_attr *a = fl__attr_find(c->op, "axis");
    if (!a || a->type != FL_ATTR_INTS || !perm_ok(a->ints, a->n, x->ndim) || x->ndim < 1)
        return fl__err(FL_EINVAL, "%s: axis is not a permutation of the %d dims of '%s'", c->op->def->type, x->ndim,
                       fl__kctx_var_name(c, 0, 0));
    int64_t perm[FL_MAX_DIMS], os[FL_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        if (inverse) perm[a->ints[i]] = i;
        else perm[i] = a->ints[i];
    }
    for (int i = 0; i < x->ndim; i++) os[i] = x->shape[perm[i]];
    fl_tensor *o = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(o, FL_FLOAT32, x->ndim, os));
    o->lod_n = 0;
    permute(o->data, x->data, x->shape, x->ndim, perm);
    fl_tensor *xs = c->nout[1] ? FL_OUT(c, 1) : NULL;
    if (!inverse && xs) {
        int64_t s[FL_MAX_DIMS];
        s[0] = 0;
        memcpy(s + 1, x->shape, (size_t)(x->ndim < FL_MAX_DIMS ? x->ndim : FL_MAX_DIMS - 1) * sizeof *s);
        FL_CHECK(fl__tensor_reshape_raw(xs, FL_FLOAT32, x->ndim + 1 <= FL_MAX_DIMS ? x->ndim + 1 : FL_MAX_DIMS, s));
    }
    return FL_OK;
}

static int run_transpose2(fl_kctx *c) { return run_transpose(c, 0); }
static int run_transpose2_grad(fl_kctx *c) { return run_transpose(c, 1); }

static int grad_transpose2(fl_op *op, fl_grad_ctx *g)
{
    fl_var *dy = fl__grad_of(g, slot_var(op, 1, 0)), *dx = fl__grad_for(g, slot_var(op, 0, 0));
    if (!dy || !dx) return FL_OK;
    fl_io in = FL_IO1("Out@GRAD", dy), out = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, "transpose2_grad", &in, 1, &out, 1);
}

static const fl_op_def def_transpose2 = {"transpose2",     {"X"},          {"Out", "XShape"},
                                         infer_transpose2, run_transpose2, grad_transpose2};
static const fl_op_def def_transpose2_grad = {"transpose2_grad", {"Out@GRAD"},        {"X@GRAD"},
                                              fl__infer_nop,     run_transpose2_grad, NULL};

/* ---- label_smooth ------------------------------------------------------------------------------
 *
 * Out = (1 - epsilon) X + epsilon * PriorDist (PriorDist [1, C] optional; uniform 1/C when
 * absent), X [.., C] one-hot rows (one_hot's output); the Transformer's label smoothing.
 * The gradient is (1 - epsilon) dOut. */

static int infer_label_smooth(fl_op *op)
{
    FL_CHECK(check_opt_slots(op, 0, 2, 1u));
    FL_CHECK(check_opt_slots(op, 1, 1, 1u));
    fl_var *x = slot_var(op, 0, 0), *pd = slot_var(op, 0, 1);
    FL_CHECK(fl__op_need_f32(op, x));
    double eps = fl__attr_f(op, "epsilon", 0.1);
    if (!(eps >= 0.0 && eps <= 1.0)) return fl__op_error(op, "epsilon %g must be in [0, 1]", eps);
    if (x->ndim < 1) return fl__op_error(op, "X '%s' must have rank >= 1", x->name);
    if (pd) {
        FL_CHECK(fl__op_need_f32(op, pd));
        int64_t c = x->shape[x->ndim - 1], n = 1;
        for (int i = 0; i < pd->ndim; i++) n = n < 0 || pd->shape[i] < 0 ? -1 : n * pd->shape[i];
        if (c >= 0 && n >= 0 && n != c)
            return fl__op_error(op, "PriorDist '%s' has %lld elements for %lld classes of X '%s'", pd->name, (long long)n,
                                (long long)c, x->name);
    }
    fl__var_set_shape(slot_var(op, 1, 0), FL_FLOAT32, x->ndim, x->shape);
    return FL_OK;
}

static int run_label_smooth(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *x = FL_IN(c, 0), *pd = FL_IN(c, 1);
    int64_t cls = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (cls < 1) return fl__err(FL_EINVAL, "label_smooth: X '%s' has no classes", fl__kctx_var_name(c, 0, 0));
    if (pd) {
        FL_CHECK(fl__kctx_dense_f32(c, 1));
        if (pd->numel != cls)
            return fl__err(FL_EINVAL, "label_smooth: PriorDist '%s' has %lld elements for %lld classes",
                           fl__kctx_var_name(c, 1, 0), (long long)pd->numel, (long long)cls);
    }
    fl_tensor *o = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(o, FL_FLOAT32, x->ndim, x->shape));
    FL_CHECK(fl__tensor_share_lod(o, x));
    float eps = (float)fl__attr_f(c->op, "epsilon", 0.1), u = eps / (float)cls;
    const float *restrict a = x->data, *prior = pd ? pd->data : NULL;
    float *restrict b = o->data;
    for (int64_t r = 0; r < x->numel / cls; r++)
        for (int64_t j = 0; j < cls; j++) b[r * cls + j] = (1.0f - eps) * a[r * cls + j] + (prior ? eps * prior[j] : u);
    return FL_OK;
}

static int run_label_smooth_grad(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *dy = FL_IN(c, 0);
    fl_tensor *dx = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, dy->ndim, dy->shape));
    float k = 1.0f - (float)fl__attr_f(c->op, "epsilon", 0.1);
    const float *restrict a = dy->data;
    float *restrict b = dx->data;
    for (int64_t i = 0; i < dy->numel; i++) b[i] = k * a[i];
    return FL_OK;
}

static int grad_label_smooth(fl_op *op, fl_grad_ctx *g)
{
    fl_var *dy = fl__grad_of(g, slot_var(op, 1, 0)), *dx = fl__grad_for(g, slot_var(op, 0, 0));
    if (!dy || !dx) return FL_OK;
    fl_io in = FL_IO1("Out@GRAD", dy), out = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, "label_smooth_grad", &in, 1, &out, 1);
}

static const fl_op_def def_label_smooth = {"label_smooth",     {"X", "PriorDist"}, {"Out"},
                                           infer_label_smooth, run_label_smooth,   grad_label_smooth};
static const fl_op_def def_label_smooth_grad = {"label_smooth_grad", {"Out@GRAD"},          {"X@GRAD"},
                                                fl__infer_nop,       run_label_smooth_grad, NULL};

/* ---- expand -------------------------------------------------------------------------------------
 *
 * Paddle's expand: Out tiles X expand_times[i] times along dim i (the attention mask
 * [B, 1, 1, S] expanded to [B, H, S, S] before elementwise_add).  The gradient sums the
 * tiles. */

static int expand_times(const fl_op *op, int nd, int64_t *t)
{
    const fl_attr *a = fl__attr_find(op, "expand_times");
    if (!a || a->type != FL_ATTR_INTS || a->n != nd) return 1;
    for (int i = 0; i < nd; i++) {
        if (a->ints[i] < 1) return 1;
        t[i] = a->ints[i];
    }
    return 0;
}

static int infer_expand(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    int64_t t[FL_MAX_DIMS], s[FL_MAX_DIMS];
    if (expand_times(op, x->ndim, t))
        return fl__op_error(op, "expand_times must hold %d values >= 1 (the rank of X '%s')", x->ndim, x->name);
    for (int i = 0; i < x->ndim; i++) s[i] = x->shape[i] < 0 ? -1 : x->shape[i] * t[i];
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, x->ndim, s);
    return FL_OK;
}

/* expand (grad 0: X -> Out) or expand_grad (grad 1: X, Out@GRAD -> X@GRAD, tiles summed). */
static int run_expand_any(fl_kctx *c, int grad)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *x = FL_IN(c, 0);
    int nd = x->ndim;
    int64_t t[FL_MAX_DIMS], os[FL_MAX_DIMS], st[FL_MAX_DIMS], idx[FL_MAX_DIMS] = {0};
    if (nd < 1 || expand_times(c->op, nd, t))
        return fl__err(FL_EINVAL, "%s: expand_times does not fit X '%s' of rank %d", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0), nd);
    for (int i = 0; i < nd; i++) os[i] = x->shape[i] * t[i];
    st[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) st[i] = st[i + 1] * x->shape[i + 1];
    int64_t total = fl__dims_prod(os, 0, nd), w = os[nd - 1], xw = x->shape[nd - 1];
    const float *src;
    float *dst;
    if (grad) {
        FL_CHECK(fl__kctx_dense_f32(c, 1));
        const fl_tensor *dy = FL_IN(c, 1);
        if (dy->numel != total)
            return fl__err(FL_EINVAL, "expand_grad: Out@GRAD '%s' has %lld elements, expected %lld",
                           fl__kctx_var_name(c, 1, 0), (long long)dy->numel, (long long)total);
        fl_tensor *dx = FL_OUT(c, 0);
        FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, nd, x->shape));
        memset(dx->data, 0, (size_t)dx->numel * sizeof(float));
        src = dy->data, dst = dx->data;
    } else {
        fl_tensor *o = FL_OUT(c, 0);
        FL_CHECK(fl__tensor_reshape_raw(o, FL_FLOAT32, nd, os));
        o->lod_n = 0;
        src = x->data, dst = o->data;
    }
    for (int64_t done = 0; done < total && w > 0; done += w) {
        int64_t off = 0;
        for (int i = 0; i < nd - 1; i++) off += (idx[i] % x->shape[i]) * st[i];
        if (grad)
            for (int64_t j = 0; j < w; j++) dst[off + j % xw] += src[done + j];
        else
            for (int64_t j = 0; j < w; j++) dst[done + j] = src[off + j % xw];
        for (int i = nd - 2; i >= 0; i--) {
            if (++idx[i] < os[i]) break;
            idx[i] = 0;
        }
    }
    return FL_OK;
}

static int run_expand(fl_kctx *c) { return run_expand_any(c, 0); }
static int run_expand_grad(fl_kctx *c) { return run_expand_any(c, 1); }

static int grad_expand(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]), *dx = fl__grad_for(g, x);
    if (!dy || !dx) return FL_OK;
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Out@GRAD", dy)}, out = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, "expand_grad", in, 2, &out, 1);
}

static const fl_op_def def_expand = {"expand", {"X"}, {"Out"}, infer_expand, run_expand, grad_expand};
static const fl_op_def def_expand_grad = {"expand_grad", {"X", "Out@GRAD"}, {"X@GRAD"},
                                          fl__infer_nop, run_expand_grad,   NULL};

/* clang-format off */
const fl_op_def *const fl__ops_nlp[] = {
    &def_layer_norm, &def_layer_norm_grad, &def_gelu, &def_gelu_grad, &def_transpose2, &def_transpose2_grad,
    &def_label_smooth, &def_label_smooth_grad, &def_expand, &def_expand_grad, NULL};
/* clang-format on */
