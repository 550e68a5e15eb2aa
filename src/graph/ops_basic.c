/*
 * ops_basic.c - initializers, fc (fused matmul + bias + activation), sum, cross_entropy and
 * mean, with their gradients and layer builders (the activations: ops_act.c).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

/* ---- initializers ------------------------------------------------------------------ */

static int infer_init(fl_op *op)
{
    const fl_attr *sh = fl__attr_find(op, "shape");
    fl_var *o = op->out[0].n ? op->out[0].vars[0] : NULL;
    if (!o) return fl__op_error(op, "output 'Out' is missing");
    if (!sh || sh->type != FL_ATTR_INTS) return fl__op_error(op, "attribute 'shape' is missing");
    return FL_OK;
}

static int init_out(fl_kctx *c, fl_tensor **t)
{
    const fl_attr *sh = fl__attr_find(c->op, "shape");
    *t = FL_OUT(c, 0);
    fl_dtype dt = (fl_dtype)fl__attr_i(c->op, "dtype", FL_FLOAT32);
    int64_t shape[FL_MAX_DIMS];
    for (int i = 0; i < sh->n; i++) shape[i] = sh->ints[i];
    /* a -1 dimension (e.g. the gradient seed of a batch-shaped loss) becomes 1 */
    for (int i = 0; i < sh->n; i++)
        if (shape[i] < 0) shape[i] = 1;
    return fl__tensor_reshape_raw(*t, dt, sh->n, shape);
}

static fl_rng init_rng(fl_kctx *c)
{
    uint64_t seed = (uint64_t)fl__attr_i(c->op, "seed", 0);
    const fl_prog *p = c->op->prog;
    if (!seed) {
        const char *nm = c->op->out[0].vars[0]->name;
        seed = fl__hash_u64(p->seed) ^ fl__hash_bytes(nm, strlen(nm));
    }
    fl_rng r = {fl__hash_u64(seed + 0x1234567ULL * (c->step + 1))};
    return r;
}

static int run_fill_constant(fl_kctx *c)
{
    fl_tensor *t;
    FL_CHECK(init_out(c, &t));
    double v = fl__attr_f(c->op, "value", 0.0);
    switch (t->dtype) {
    case FL_FLOAT32: fl__vfill(t->data, (float)v, t->numel); break;
    case FL_INT64:
        for (int64_t i = 0; i < t->numel; i++) ((int64_t *)t->data)[i] = (int64_t)v;
        break;
    case FL_FLOAT64:
        for (int64_t i = 0; i < t->numel; i++) ((double *)t->data)[i] = v;
        break;
    case FL_INT32:
        for (int64_t i = 0; i < t->numel; i++) ((int32_t *)t->data)[i] = (int32_t)v;
        break;
    default: return fl__err(FL_EUNSUPPORTED, "fill_constant: dtype %s has no kernel", fl_dtype_name(t->dtype));
    }
    return FL_OK;
}

static int run_uniform(fl_kctx *c)
{
    fl_tensor *t;
    FL_CHECK(init_out(c, &t));
    if (t->dtype != FL_FLOAT32) return fl__err(FL_EUNSUPPORTED, "uniform_random: only float32");
    float lo = (float)fl__attr_f(c->op, "min", -1.0), hi = (float)fl__attr_f(c->op, "max", 1.0);
    fl_rng r = init_rng(c);
    float *d = t->data;
    for (int64_t i = 0; i < t->numel; i++) d[i] = lo + (hi - lo) * fl__rng_uniform(&r);
    return FL_OK;
}

static int run_gaussian(fl_kctx *c)
{
    fl_tensor *t;
    FL_CHECK(init_out(c, &t));
    if (t->dtype != FL_FLOAT32) return fl__err(FL_EUNSUPPORTED, "gaussian_random: only float32");
    double m = fl__attr_f(c->op, "mean", 0.0), s = fl__attr_f(c->op, "std", 1.0);
    fl_rng r = init_rng(c);
    float *d = t->data;
    for (int64_t i = 0; i < t->numel; i++) d[i] = (float)(m + s * fl__rng_normal(&r));
    return FL_OK;
}

/* log(q) for q in [FLT_MIN, 1] (no zero, negative, subnormal or infinite argument): musl's logf
 * without its special cases, so that the loop below vectorises (within 1 ulp). */
static inline float trunc_logf(float q)
{
    uint32_t ix;
    memcpy(&ix, &q, sizeof ix);
    ix += 0x3f800000u - 0x3f3504f3u; /* reduce the mantissa to [sqrt(2)/2, sqrt(2)) */
    float k = (float)((int32_t)(ix >> 23) - 0x7f);
    ix = (ix & 0x007fffffu) + 0x3f3504f3u;
    float f;
    memcpy(&f, &ix, sizeof f);
    f -= 1.0f;
    float sv = f / (2.0f + f), z = sv * sv, w = z * z;
    float r = z * (0.66666662693f + w * 0.28498786688f) + w * (0.40000972152f + w * 0.24279078841f);
    float hfsq = 0.5f * f * f;
    return sv * (hfsq + r) + k * 9.0580006145e-06f - hfsq + f + k * 6.9313812256e-01f;
}

/* truncated_gaussian_random: N(mean, std) truncated at 2 std (Paddle's rule), by inversion:
 * element i draws one 24-bit uniform from splitmix64 at counter i (as dropout_mask in
 * ops_nn.c), maps it into (-erf(sqrt 2), erf(sqrt 2)) and returns mean + std * sqrt(2) *
 * erfinv of it, with M. Giles' single-precision erfinv (within 1.2e-7 relative; on this
 * range only its central branch is needed, since -log(1 - x^2) <= 2.43 < 5).  No rejection
 * loop and no state carried between elements, so the loop vectorises: BERT-base's 110 M
 * parameters take a fraction of a second instead of about 15 s of Box-Muller draws. */
FL_CLONE_TARGETS static void trunc_normal_fill(float *restrict d, int64_t n, uint64_t seed, float mean, float sd)
{
    const float scale = 0.9544997361036416f / 16777216.0f; /* erf(sqrt(2)) / 2^24 */
    for (int64_t i = 0; i < n; i++) {
        uint64_t z = seed + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ULL;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        /* 2u - 1 for u = (k + 1/2) / 2^24: the odd integers in (-2^24, 2^24), exact in float */
        float x = (float)((int32_t)((z >> 40) * 2 + 1) - (1 << 24)) * scale;
        float w = -trunc_logf((1.0f - x) * (1.0f + x)) - 2.5f;
        float p = 2.81022636e-08f;
        p = 3.43273939e-07f + p * w;
        p = -3.5233877e-06f + p * w;
        p = -4.39150654e-06f + p * w;
        p = 0.00021858087f + p * w;
        p = -0.00125372503f + p * w;
        p = -0.00417768164f + p * w;
        p = 0.246640727f + p * w;
        p = 1.50140941f + p * w;
        d[i] = mean + sd * (1.41421356237f * p * x);
    }
}

static int run_truncated_gaussian(fl_kctx *c)
{
    fl_tensor *t;
    FL_CHECK(init_out(c, &t));
    if (t->dtype != FL_FLOAT32) return fl__err(FL_EUNSUPPORTED, "truncated_gaussian_random: only float32");
    double m = fl__attr_f(c->op, "mean", 0.0), s = fl__attr_f(c->op, "std", 1.0);
    fl_rng r = init_rng(c);
    trunc_normal_fill(t->data, t->numel, r.s, (float)m, (float)s);
    return FL_OK;
}

static const fl_op_def def_fill_constant = {"fill_constant", {NULL}, {"Out"}, infer_init, run_fill_constant, NULL};
static const fl_op_def def_uniform = {"uniform_random", {NULL}, {"Out"}, infer_init, run_uniform, NULL};
static const fl_op_def def_gaussian = {"gaussian_random", {NULL}, {"Out"}, infer_init, run_gaussian, NULL};
static const fl_op_def def_tgaussian = {"truncated_gaussian_random", {NULL}, {"Out"}, infer_init,
                                        run_truncated_gaussian,      NULL};

/* ---- data layer ---------------------------------------------------------------------- */

fl_var *fl_layer_data(fl_prog *p, const char *name, int ndim, const int64_t *shape, fl_dtype dtype, int lod_level)
{
    if (!p || p->magic != FL_PROG_MAGIC) {
        fl__err(FL_EINVAL, "data: program is NULL");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    if (!name || !*name) {
        fl__prog_error(p, FL_EINVAL, "data: name is empty");
        return NULL;
    }
    if (ndim < 0 || ndim + 1 > FL_MAX_DIMS || (ndim && !shape)) {
        fl__prog_error(p, FL_EINVAL, "data '%s': rank %d out of range [0, %d]", name, ndim, FL_MAX_DIMS - 1);
        return NULL;
    }
    if (!fl_dtype_size(dtype) || lod_level < 0 || lod_level > 1) {
        fl__prog_error(p, FL_EINVAL, "data '%s': invalid dtype %d or lod_level %d (0 or 1)", name, (int)dtype, lod_level);
        return NULL;
    }
    int64_t s[FL_MAX_DIMS];
    s[0] = -1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0 && shape[i] != -1) {
            fl__prog_error(p, FL_EINVAL, "data '%s': dimension %d is %lld (expected > 0 or -1)", name, i,
                           (long long)shape[i]);
            return NULL;
        }
        s[i + 1] = shape[i];
    }
    fl_var *v = fl__var_create(p, name, dtype, ndim + 1, s);
    if (!v) return NULL;
    v->is_data = 1;
    v->stop_gradient = 1;
    v->lod_level = lod_level;
    return v;
}

fl_var *fl_layer_create_parameter(fl_prog *p, int ndim, const int64_t *shape, fl_dtype dtype, const fl_param_attr *attr)
{
    if (!p || p->magic != FL_PROG_MAGIC) {
        fl__err(FL_EINVAL, "create_parameter: program is NULL");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    if (dtype != FL_FLOAT32) {
        fl__prog_error(p, FL_EINVAL, "create_parameter: dtype must be float32, got %s", fl_dtype_name(dtype));
        return NULL;
    }
    if (ndim < 1 || ndim > FL_MAX_DIMS || !shape) {
        fl__prog_error(p, FL_EINVAL, "create_parameter: rank %d out of range [1, %d]", ndim, FL_MAX_DIMS);
        return NULL;
    }
    char nm[256];
    if (attr && attr->name) {
        snprintf(nm, sizeof nm, "%s", attr->name);
    } else {
        char base[128];
        fl__unique_name(p, "create_parameter", base, sizeof base);
        snprintf(nm, sizeof nm, "%s.w_0", base);
    }
    /* Paddle's XavierInitializer._compute_fans: [in, out] for rank 2, and for rank > 2 (filters)
     * dims 1 and 0 times the receptive field prod(shape[2:]) */
    int64_t rf = ndim > 2 ? fl__dims_prod(shape, 2, ndim) : 1;
    int64_t fan_in = ndim > 2 ? shape[1] * rf : shape[0], fan_out = ndim > 2 ? shape[0] * rf : shape[ndim > 1];
    return fl__param_create(p, nm, ndim, shape, attr, fl_init_xavier(0), fan_in, fan_out);
}

/* ---- fc ------------------------------------------------------------------------------- */

enum { ACT_NONE = 0, ACT_RELU, ACT_TANH, ACT_SIGMOID };

static int act_code(const char *a)
{
    if (!a || !*a || !strcmp(a, "none") || !strcmp(a, "linear")) return ACT_NONE;
    if (!strcmp(a, "relu")) return ACT_RELU;
    if (!strcmp(a, "tanh")) return ACT_TANH;
    if (!strcmp(a, "sigmoid")) return ACT_SIGMOID;
    return -1;
}

static int fc_dtype_ok(fl_dtype t) { return t == FL_FLOAT32 || t == FL_BFLOAT16 || t == FL_FLOAT16; }

/* out_dtype (AMP level O2): the product is accumulated in float32 with bias and activation,
 * then rounded once to bfloat16 or float16; default float32. */
static int infer_fc(fl_op *op)
{
    fl_dtype odt = (fl_dtype)fl__attr_i(op, "out_dtype", FL_FLOAT32);
    if (!fc_dtype_ok(odt)) return fl__op_error(op, "out_dtype %s must be float32, bfloat16 or float16", fl_dtype_name(odt));
    int n = op->in[0].n, k = (int)fl__attr_i(op, "num_flatten_dims", 1);
    int64_t size = fl__attr_i(op, "size", 0);
    if (n < 1 || op->in[1].n != n) return fl__op_error(op, "needs as many weights as inputs (%d vs %d)", n, op->in[1].n);
    if (act_code(fl__attr_s(op, "act", "")) < 0)
        return fl__op_error(op, "unknown fused activation '%s'", fl__attr_s(op, "act", ""));
    int64_t lead[FL_MAX_DIMS];
    int nlead = 0;
    for (int i = 0; i < n; i++) {
        fl_var *x = op->in[0].vars[i], *w = op->in[1].vars[i];
        char xs[96], ws[96];
        fl__shape_str(x, xs, sizeof xs);
        fl__shape_str(w, ws, sizeof ws);
        /* bfloat16 / float16 inputs and weights come from fl_amp_decorate's casts */
        if (!fc_dtype_ok(x->dtype))
            return fl__op_error(op, "input '%s' must be float32 (or bfloat16, float16), is %s", x->name,
                                fl_dtype_name(x->dtype));
        if (!fc_dtype_ok(w->dtype))
            return fl__op_error(op, "weight '%s' must be float32 (or bfloat16, float16), is %s", w->name,
                                fl_dtype_name(w->dtype));
        if (k < 1 || k >= x->ndim + (x->ndim == 1))
            return fl__op_error(op, "num_flatten_dims %d out of range for input '%s' %s", k, x->name, xs);
        int64_t inner = 1;
        for (int d = k; d < x->ndim; d++) inner = (inner < 0 || x->shape[d] < 0) ? -1 : inner * x->shape[d];
        if (w->ndim != 2 || w->shape[1] != size || (inner >= 0 && w->shape[0] != inner))
            return fl__op_error(op, "input '%s' %s flattens to width %lld but weight '%s' is %s (expected [%lld, %lld])",
                                x->name, xs, (long long)inner, w->name, ws, (long long)inner, (long long)size);
        if (i == 0) {
            nlead = k;
            for (int d = 0; d < k; d++) lead[d] = x->shape[d];
        } else {
            int64_t a = fl__dims_prod(lead, 0, nlead), b = fl__dims_prod(x->shape, 0, k);
            if (a > 0 && b > 0 && a != b)
                return fl__op_error(op, "input '%s' %s has %lld rows, input 0 has %lld", x->name, xs, (long long)b,
                                    (long long)a);
        }
    }
    if (op->in[2].n == 1) {
        fl_var *b = op->in[2].vars[0];
        if (fl__dims_prod(b->shape, 0, b->ndim) != size)
            return fl__op_error(op, "bias '%s' must have %lld elements", b->name, (long long)size);
    }
    lead[nlead] = size;
    fl__var_set_shape(op->out[0].vars[0], odt, nlead + 1, lead);
    op->out[0].vars[0]->lod_level = op->in[0].vars[0]->lod_level;
    return FL_OK;
}

static int run_fc(fl_kctx *c)
{
    const fl_op *op = c->op;
    int n = c->nin[0], k = (int)fl__attr_i(op, "num_flatten_dims", 1);
    int64_t size = fl__attr_i(op, "size", 0);
    fl_tensor *x0 = c->in[0][0], *out = FL_OUT(c, 0);
    int64_t m = fl__dims_prod(x0->shape, 0, k);
    int64_t sh[FL_MAX_DIMS];
    for (int d = 0; d < k; d++) sh[d] = x0->shape[d];
    sh[k] = size;
    fl_dtype odt = (fl_dtype)fl__attr_i(op, "out_dtype", FL_FLOAT32);
    /* a low-precision output: one input's product writes it directly (fl__gemm's c_type);
     * several accumulate in float32 here and are rounded once at the end */
    int direct = odt == FL_FLOAT32 || n == 1;
    void *y = NULL;
    if (direct) {
        FL_CHECK(fl__tensor_reshape_raw(out, odt, k + 1, sh));
        y = out->data;
    } else {
        y = malloc((size_t)(m * size > 0 ? m * size : 1) * sizeof(float));
        if (!y) return fl__err(FL_ENOMEM, "fc: out of memory for a [%lld x %lld] product", (long long)m, (long long)size);
    }
    int act = act_code(fl__attr_s(op, "act", "")), st = FL_OK;
    for (int i = 0; i < n && st == FL_OK; i++) {
        fl_tensor *x = c->in[0][i], *w = c->in[1][i];
        int64_t xm = fl__dims_prod(x->shape, 0, k), kk = x->numel / (xm ? xm : 1);
        if (xm != m || kk != w->shape[0]) {
            st = fl__err(FL_EINVAL, "fc: input %d has shape [%lld x %lld], weight expects width %lld and %lld rows", i,
                         (long long)xm, (long long)kk, (long long)w->shape[0], (long long)m);
            break;
        }
        if (!fc_dtype_ok(x->dtype) || !fc_dtype_ok(w->dtype) || x->is_rows || w->is_rows) {
            st = fl__err(FL_EINVAL, "fc: input '%s' is %s and weight '%s' %s (dense float32, bfloat16 or float16)",
                         op->in[0].vars[i]->name, fl_dtype_name(x->dtype), op->in[1].vars[i]->name,
                         fl_dtype_name(w->dtype));
            break;
        }
        /* one product per input, accumulating; the last one adds the bias and applies the
         * activation in its epilogue (oneDNN post-ops) */
        fl_gemm_desc d;
        memset(&d, 0, sizeof d);
        d.m = m, d.n = size, d.k = kk, d.lda = kk, d.ldb = size, d.ldc = size;
        d.beta = i ? 1.0f : 0.0f;
        d.a_type = x->dtype, d.b_type = w->dtype; /* float32, or bfloat16 after fl_amp_decorate */
        if (i == n - 1) d.act = act == ACT_RELU ? FL_ACT_RELU : act == ACT_TANH ? FL_ACT_TANH : act ? FL_ACT_SIGMOID : 0;
        d.has_bias = i == n - 1 && c->nin[2];
        d.c_type = direct ? odt : FL_FLOAT32;
        st = fl__gemm((fl_gemm_cache **)c->state, &d, x->data, w->data, d.has_bias ? c->in[2][0]->data : NULL, y);
    }
    if (!direct) {
        if (st == FL_OK) st = fl__tensor_reshape_raw(out, odt, k + 1, sh);
        if (st == FL_OK) st = fl__cvt_any(out->data, odt, y, FL_FLOAT32, m * size);
        free(y);
    }
    return st == FL_OK ? fl__tensor_share_lod(out, x0) : st;
}


static int run_mul_grad(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *w = FL_IN(c, 1), *dy = FL_IN(c, 2), *dx = FL_OUT(c, 0), *dw = FL_OUT(c, 1);
    int k = (int)fl__attr_i(c->op, "num_flatten_dims", 1);
    int64_t m = fl__dims_prod(x->shape, 0, k), kk = w->shape[0], n = w->shape[1];
    fl_gemm_desc d;
    memset(&d, 0, sizeof d);
    /* AMP bfloat16 on oneDNN: both products would round the float32 dY to bfloat16, each in
     * its own copy; round it once (the same bits) and give both the bfloat16 operand. */
    const void *dyp = dy->data;
    fl_dtype dyt = dy->dtype;
    if (dx && dw && dy->dtype == FL_FLOAT32 && (x->dtype == FL_BFLOAT16 || w->dtype == FL_BFLOAT16) && m > 0 &&
        fl__gemm_lib() == FL_GEMM_DNNL) {
        void *h = fl__gemm_scratch((fl_gemm_cache **)c->state, (size_t)dy->numel * 2);
        if (!h) return fl_last_status();
        fl__cvt_f32_to_bf16(h, dy->data, dy->numel);
        dyp = h, dyt = FL_BFLOAT16;
    }
    if (dx) { /* dX[m, kk] = dY[m, n] W[kk, n]^T */
        FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
        d.trans_b = 1, d.m = m, d.n = kk, d.k = n, d.lda = n, d.ldb = n, d.ldc = kk;
        d.a_type = dyt, d.b_type = w->dtype;
        FL_CHECK(fl__gemm((fl_gemm_cache **)c->state, &d, dyp, w->data, NULL, dx->data));
        FL_CHECK(fl__tensor_share_lod(dx, x));
    }
    if (dw) { /* dW[kk, n] = X[m, kk]^T dY[m, n] */
        FL_CHECK(fl__tensor_reshape_raw(dw, FL_FLOAT32, 2, w->shape));
        d.trans_a = 1, d.trans_b = 0, d.m = kk, d.n = n, d.k = m, d.lda = kk, d.ldb = n, d.ldc = n;
        d.a_type = x->dtype, d.b_type = dyt;
        FL_CHECK(fl__gemm((fl_gemm_cache **)c->state, &d, x->data, dyp, NULL, dw->data));
    }
    return FL_OK;
}

/* Bias@GRAD = column sums of Out@GRAD flattened to [m, size]. */
static int run_col_sum(fl_kctx *c)
{
    fl_tensor *dy = FL_IN(c, 0), *b = FL_IN(c, 1), *db = FL_OUT(c, 0);
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    FL_CHECK(fl__tensor_reshape_raw(db, FL_FLOAT32, b->ndim, b->shape));
    int64_t n = b->numel;
    fl__col_sum(db->data, dy->data, dy->numel / (n ? n : 1), n, 0);
    return FL_OK;
}

static const fl_op_def def_mul_grad = {"mul_grad",    {"X", "Y", "Out@GRAD"}, {"X@GRAD", "Y@GRAD"},
                                       fl__infer_nop, run_mul_grad,           NULL,
                                       fl__gemm_cache_free};
static const fl_op_def def_col_sum = {"bias_grad", {"Out@GRAD", "Bias"}, {"Bias@GRAD"}, fl__infer_nop, run_col_sum, NULL};

static const char *act_grad_type(int a)
{
    return a == ACT_RELU ? "relu_grad" : a == ACT_TANH ? "tanh_grad" : a == ACT_SIGMOID ? "sigmoid_grad" : NULL;
}

static int grad_fc(fl_op *op, fl_grad_ctx *g)
{
    fl_prog *p = op->prog;
    fl_var *out = op->out[0].vars[0], *dout = fl__grad_of(g, out);
    if (!dout) return FL_OK;
    int a = act_code(fl__attr_s(op, "act", ""));
    fl_var *dz = dout;
    if (a != ACT_NONE) {
        dz = fl__tmp_var(p, out->name, FL_FLOAT32, out->ndim, out->shape);
        if (!dz) return fl_prog_status(p);
        fl_io in[2] = {FL_IO1("Out", out), FL_IO1("Out@GRAD", dout)};
        fl_io o = FL_IO1("X@GRAD", dz);
        if (!fl__op_append(p, act_grad_type(a), in, 2, &o, 1)) return fl_prog_status(p);
    }
    if (op->in[2].n) {
        fl_var *db = fl__grad_for(g, op->in[2].vars[0]);
        if (db) {
            fl_io in[2] = {FL_IO1("Out@GRAD", dz), FL_IO1("Bias", op->in[2].vars[0])};
            fl_io o = FL_IO1("Bias@GRAD", db);
            if (!fl__op_append(p, "bias_grad", in, 2, &o, 1)) return fl_prog_status(p);
        }
    }
    for (int i = 0; i < op->in[0].n; i++) {
        fl_var *x = op->in[0].vars[i], *w = op->in[1].vars[i];
        fl_var *dx = fl__grad_for(g, x), *dw = fl__grad_for(g, w);
        if (!dx && !dw) continue;
        fl_io in[3] = {FL_IO1("X", x), FL_IO1("Y", w), FL_IO1("Out@GRAD", dz)};
        fl_io o[2];
        int no = 0;
        fl_var *dxv[1] = {dx}, *dwv[1] = {dw}; /* outlive the if-statements below */
        if (dx) o[no++] = (fl_io){"X@GRAD", dxv, 1};
        if (dw) o[no++] = (fl_io){"Y@GRAD", dwv, 1};
        fl_op *mg = fl__op_new(p, "mul_grad", in, 3, o, no);
        if (!mg) return fl_prog_status(p);
        FL_CHECK(fl__attr_set_i(mg, "num_flatten_dims", fl__attr_i(op, "num_flatten_dims", 1)));
        FL_CHECK(fl__op_finish(mg));
    }
    return FL_OK;
}

static const fl_op_def def_fc = {"fc", {"Input", "W", "Bias"}, {"Out"}, infer_fc, run_fc, grad_fc, fl__gemm_cache_free};

fl_var *fl_layer_fc(fl_var *const *inputs, int n, int64_t size, const char *act)
{
    return fl_layer_fc_ex(inputs, n, size, act, NULL);
}

fl_var *fl_layer_fc_ex(fl_var *const *inputs, int n, int64_t size, const char *act, const fl_fc_attr *attr)
{
    fl_prog *p = fl__prog_of(inputs, n);
    if (!p) {
        if (n <= 0 || !inputs) fl__err(FL_EINVAL, "fc: no inputs");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    fl_fc_attr none;
    memset(&none, 0, sizeof none);
    if (!attr) attr = &none;
    if (size <= 0) {
        fl__prog_error(p, FL_EINVAL, "fc: size must be positive, got %lld", (long long)size);
        return NULL;
    }
    const char *post = NULL; /* activation appended as its own op */
    const char *fused = act;
    if (act && (!strcmp(act, "softmax") || !strcmp(act, "softsign"))) {
        post = act;
        fused = NULL;
    } else if (act_code(act) < 0) {
        fl__prog_error(p, FL_EINVAL,
                       "fc: unknown activation '%s' (expected tanh, relu, sigmoid, softmax, softsign or NULL)", act);
        return NULL;
    }
    int k = attr->num_flatten_dims > 0 ? attr->num_flatten_dims : 1;
    char base[128], nm[192];
    fl__unique_name(p, "fc", base, sizeof base);
    fl_var *ws[16];
    if (n > 16) {
        fl__prog_error(p, FL_EINVAL, "fc: at most 16 inputs");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        fl_var *x = inputs[i];
        if (k >= x->ndim && !(x->ndim == 1 && k == 1)) {
            fl__prog_error(p, FL_EINVAL, "fc: num_flatten_dims %d out of range for input '%s' of rank %d", k, x->name,
                           x->ndim);
            return NULL;
        }
        int64_t inner = fl__dims_prod(x->shape, k, x->ndim);
        if (inner <= 0) {
            fl__prog_error(p, FL_EINVAL, "fc: input '%s' needs known dimensions after num_flatten_dims", x->name);
            return NULL;
        }
        fl_param_attr wa = attr->weight;
        if (wa.name) {
            if (n > 1) snprintf(nm, sizeof nm, "%s_%d", wa.name, i);
            else snprintf(nm, sizeof nm, "%s", wa.name);
        } else {
            snprintf(nm, sizeof nm, "%s.w_%d", base, i);
        }
        int64_t wsh[2] = {inner, size};
        ws[i] = fl__param_create(p, nm, 2, wsh, &wa, fl_init_xavier(0), inner, size);
        if (!ws[i]) return NULL;
    }
    fl_var *b = NULL;
    if (!attr->no_bias) {
        if (attr->bias.name) snprintf(nm, sizeof nm, "%s", attr->bias.name);
        else snprintf(nm, sizeof nm, "%s.b_0", base);
        int64_t bsh[1] = {size};
        b = fl__param_create(p, nm, 1, bsh, &attr->bias, fl_init_constant(0.0f), 0, 0);
        if (!b) return NULL;
    }
    int64_t osh[1] = {0};
    fl_var *out = fl__tmp_var(p, base, FL_FLOAT32, 1, osh);
    if (!out) return NULL;
    fl_io ins[3] = {{"Input", inputs, n}, {"W", ws, n}, {"Bias", &b, b ? 1 : 0}};
    fl_io o = FL_IO1("Out", out);
    fl_op *op = fl__op_new(p, "fc", ins, 3, &o, 1);
    if (!op) return NULL;
    if (fl__attr_set_i(op, "num_flatten_dims", k) || fl__attr_set_i(op, "size", size) ||
        fl__attr_set_s(op, "act", fused ? fused : "") || fl__op_finish(op))
        return NULL;
    if (post) return !strcmp(post, "softmax") ? fl_layer_softmax(out) : fl_layer_softsign(out);
    return out;
}

/* ---- sum (dense and SelectedRows) --------------------------------------------------------- */

static int infer_sum(fl_op *op)
{
    if (op->in[0].n < 1) return fl__op_error(op, "needs at least one input");
    fl_var *x = op->in[0].vars[0];
    fl__var_set_shape(op->out[0].vars[0], x->dtype, x->ndim, x->shape);
    return FL_OK;
}

/* y = a + b (b NULL: y += a) over elements [lo, hi): the dense sums split over the threads
 * (each element's sum is the same whichever thread makes it). */
typedef struct {
    float *y;
    const float *a, *b;
} sum_job;

static void sum_range(void *arg, int64_t lo, int64_t hi)
{
    const sum_job *j = arg;
    if (j->b) fl__vadd(j->y + lo, j->a + lo, j->b + lo, hi - lo);
    else fl__vaxpy(j->y + lo, 1.0f, j->a + lo, hi - lo);
}

static void sum_dense(float *y, const float *a, const float *b, int64_t n)
{
    sum_job j = {y, a, b};
    fl__parallel_for(n, 16, 3 * (int64_t)sizeof(float), sum_range, &j); /* 2 reads, 1 write */
}

static int run_sum(fl_kctx *c)
{
    int n = c->nin[0], all_rows = 1;
    fl_tensor *out = FL_OUT(c, 0);
    for (int i = 0; i < n; i++) all_rows &= c->in[0][i]->is_rows;
    fl_tensor *x0 = c->in[0][0];
    if (all_rows) {
        /* concatenate rows; duplicates are kept and add up where the rows are consumed */
        int64_t total = 0, width = x0->numel / (x0->shape[0] ? x0->shape[0] : 1);
        for (int i = 0; i < n; i++) total += c->in[0][i]->shape[0];
        int64_t sh[2] = {total, width};
        int64_t *rows = malloc((size_t)(total ? total : 1) * sizeof *rows);
        if (!rows) return fl__err(FL_ENOMEM, "sum: out of memory");
        FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, 2, sh));
        int64_t at = 0;
        for (int i = 0; i < n; i++) {
            fl_tensor *x = c->in[0][i];
            memcpy((float *)out->data + at * width, x->data, (size_t)x->numel * sizeof(float));
            if (x->shape[0]) memcpy(rows + at, x->rows, (size_t)x->shape[0] * sizeof *rows);
            at += x->shape[0];
        }
        int st = fl_tensor_set_rows(out, rows, total, x0->height);
        free(rows);
        return st;
    }
    /* dense result: take the shape of the first dense input */
    const fl_tensor *d0 = NULL;
    for (int i = 0; i < n && !d0; i++)
        if (!c->in[0][i]->is_rows) d0 = c->in[0][i];
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, d0->ndim, d0->shape));
    out->is_rows = 0;
    float *y = out->data;
    const float *prev = NULL; /* the first dense input, not yet in y */
    int first = 1;
    for (int i = 0; i < n; i++) {
        fl_tensor *x = c->in[0][i];
        if (x->is_rows) continue;
        if (x->numel != out->numel)
            return fl__err(FL_EINVAL, "sum: input %d has %lld elements, expected %lld", i, (long long)x->numel,
                           (long long)out->numel);
        const float *xd = x->data;
        if (first) prev = xd; /* the first two dense inputs are added in one pass: y = a + b */
        else if (prev) {
            if (prev == y) sum_dense(y, xd, NULL, x->numel);
            else if (xd == y) sum_dense(y, prev, NULL, x->numel);
            else sum_dense(y, prev, xd, x->numel);
            prev = NULL;
        } else sum_dense(y, xd, NULL, x->numel);
        first = 0;
    }
    if (prev && prev != y) memcpy(y, prev, (size_t)out->numel * sizeof(float)); /* one dense input */
    for (int i = 0; i < n; i++) {
        fl_tensor *x = c->in[0][i];
        if (!x->is_rows) continue;
        int64_t w = x->numel / (x->shape[0] ? x->shape[0] : 1);
        for (int64_t r = 0; r < x->shape[0]; r++) fl__vaxpy(y + x->rows[r] * w, 1.0f, (float *)x->data + r * w, w);
    }
    return fl__tensor_share_lod(out, d0);
}

static const fl_op_def def_sum = {"sum", {"X"}, {"Out"}, infer_sum, run_sum, NULL};

/* ---- cross_entropy (hard labels, on probabilities) --------------------------------------- */

static int check_label(fl_op *op, fl_var *x, fl_var *label)
{
    char xs[96], ls[96];
    fl__shape_str(x, xs, sizeof xs);
    fl__shape_str(label, ls, sizeof ls);
    if (label->dtype != FL_INT64)
        return fl__op_error(op, "label '%s' must be int64, is %s", label->name, fl_dtype_name(label->dtype));
    if (label->ndim != x->ndim || label->shape[label->ndim - 1] != 1)
        return fl__op_error(op, "label '%s' %s must have the rank of input '%s' %s and last dimension 1", label->name, ls,
                            x->name, xs);
    for (int d = 0; d + 1 < x->ndim; d++)
        if (x->shape[d] >= 0 && label->shape[d] >= 0 && x->shape[d] != label->shape[d])
            return fl__op_error(op, "label '%s' %s does not match input '%s' %s", label->name, ls, x->name, xs);
    return FL_OK;
}

int fl__infer_label_loss(fl_op *op)
{
    fl_var *x = op->in[0].vars[0], *label = op->in[1].vars[0];
    if (x->dtype != FL_FLOAT32) return fl__op_error(op, "input '%s' must be float32", x->name);
    FL_CHECK(check_label(op, x, label));
    int64_t sh[FL_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) sh[d] = x->shape[d];
    sh[x->ndim - 1] = 1;
    for (int s = 0; s < FL_OP_MAX_SLOTS && op->def->out_names[s]; s++)
        if (op->out[s].n && !strcmp(op->def->out_names[s], "Y"))
            fl__var_set_shape(op->out[s].vars[0], FL_FLOAT32, x->ndim, sh);
    return FL_OK;
}

static int check_labels_rt(const fl_tensor *lab, int64_t m, int64_t cls, const char *op)
{
    const int64_t *l = lab->data;
    if (lab->dtype != FL_INT64 || lab->numel != m)
        return fl__err(FL_EINVAL, "%s: label has %lld values for %lld rows", op, (long long)lab->numel, (long long)m);
    for (int64_t i = 0; i < m; i++)
        if (l[i] < 0 || l[i] >= cls)
            return fl__err(FL_EINVAL, "%s: label %lld at row %lld out of range [0, %lld)", op, (long long)l[i],
                           (long long)i, (long long)cls);
    return FL_OK;
}

static int run_cross_entropy(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *lab = FL_IN(c, 1), *y = FL_OUT(c, 0);
    int64_t cls = x->shape[x->ndim - 1], m = x->numel / (cls ? cls : 1);
    FL_CHECK(check_labels_rt(lab, m, cls, "cross_entropy"));
    int64_t sh[FL_MAX_DIMS];
    memcpy(sh, x->shape, sizeof sh);
    sh[x->ndim - 1] = 1;
    FL_CHECK(fl__tensor_reshape_raw(y, FL_FLOAT32, x->ndim, sh));
    const float *p = x->data;
    const int64_t *l = lab->data;
    float *o = y->data;
    for (int64_t i = 0; i < m; i++) {
        float v = p[i * cls + l[i]];
        o[i] = -logf(v > 1e-20f ? v : 1e-20f);
    }
    return fl__tensor_share_lod(y, x);
}

static int run_cross_entropy_grad(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *lab = FL_IN(c, 1), *dy = FL_IN(c, 2), *dx = FL_OUT(c, 0);
    int64_t cls = x->shape[x->ndim - 1], m = x->numel / (cls ? cls : 1);
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    memset(dx->data, 0, (size_t)x->numel * sizeof(float));
    const float *p = x->data, *g = dy->data;
    const int64_t *l = lab->data;
    float *d = dx->data;
    for (int64_t i = 0; i < m; i++) {
        float v = p[i * cls + l[i]];
        d[i * cls + l[i]] = -g[i] / (v > 1e-20f ? v : 1e-20f);
    }
    return fl__tensor_share_lod(dx, x);
}

static int grad_cross_entropy(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]), *dx = fl__grad_for(g, x);
    if (!dy || !dx) return FL_OK;
    fl_io in[3] = {FL_IO1("X", x), FL_IO1("Label", op->in[1].vars[0]), FL_IO1("Y@GRAD", dy)};
    fl_io o = FL_IO1("X@GRAD", dx);
    return fl__op_append(op->prog, "cross_entropy_grad", in, 3, &o, 1) ? FL_OK : fl_prog_status(op->prog);
}

static const fl_op_def def_cross_entropy = {"cross_entropy",      {"X", "Label"},    {"Y"},
                                            fl__infer_label_loss, run_cross_entropy, grad_cross_entropy};
static const fl_op_def def_cross_entropy_grad = {"cross_entropy_grad", {"X", "Label", "Y@GRAD"}, {"X@GRAD"},
                                                 fl__infer_nop,        run_cross_entropy_grad,   NULL};

fl_var *fl_layer_cross_entropy(fl_var *prob, fl_var *label)
{
    fl_prog *p = fl__prog_of(FL_VARS(prob, label));
    if (!p || p->status != FL_OK) return NULL;
    int64_t sh[1] = {1};
    fl_var *y = fl__tmp_var(p, "cross_entropy", FL_FLOAT32, 1, sh);
    if (!y) return NULL;
    fl_io in[2] = {FL_IO1("X", prob), FL_IO1("Label", label)};
    fl_io o = FL_IO1("Y", y);
    return fl__op_append(p, "cross_entropy", in, 2, &o, 1) ? y : NULL;
}

/* ---- mean ----------------------------------------------------------------------------- */

static int infer_mean(fl_op *op)
{
    fl_var *x = op->in[0].vars[0];
    if (x->dtype != FL_FLOAT32) return fl__op_error(op, "input '%s' must be float32", x->name);
    int64_t one = 1;
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, 1, &one);
    return FL_OK;
}

static int run_mean(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *y = FL_OUT(c, 0);
    int64_t one = 1;
    FL_CHECK(fl__tensor_reshape_raw(y, FL_FLOAT32, 1, &one));
    const float *a = x->data;
    double s = 0.0;
    for (int64_t i = 0; i < x->numel; i++) s += a[i];
    ((float *)y->data)[0] = x->numel ? (float)(s / (double)x->numel) : 0.0f;
    return FL_OK;
}

static int run_mean_grad(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *dy = FL_IN(c, 1), *dx = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    fl__vfill(dx->data, ((float *)dy->data)[0] / (float)(x->numel ? x->numel : 1), x->numel);
    return fl__tensor_share_lod(dx, x);
}

static int grad_mean(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]), *dx = fl__grad_for(g, x);
    if (!dy || !dx) return FL_OK;
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Out@GRAD", dy)};
    fl_io o = FL_IO1("X@GRAD", dx);
    return fl__op_append(op->prog, "mean_grad", in, 2, &o, 1) ? FL_OK : fl_prog_status(op->prog);
}

static const fl_op_def def_mean = {"mean", {"X"}, {"Out"}, infer_mean, run_mean, grad_mean};
static const fl_op_def def_mean_grad = {"mean_grad", {"X", "Out@GRAD"}, {"X@GRAD"}, fl__infer_nop, run_mean_grad, NULL};

fl_var *fl_layer_mean(fl_var *x)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p || p->status != FL_OK) return NULL;
    int64_t one = 1;
    fl_var *y = fl__tmp_var(p, "mean", FL_FLOAT32, 1, &one);
    if (!y) return NULL;
    fl_io in = FL_IO1("X", x), o = FL_IO1("Out", y);
    return fl__op_append(p, "mean", &in, 1, &o, 1) ? y : NULL;
}

/* clang-format off */
const fl_op_def *const fl__ops_basic[] = {
    &def_fill_constant, &def_uniform, &def_gaussian, &def_tgaussian, &def_fc, &def_mul_grad, &def_col_sum,
    &def_sum, &def_cross_entropy, &def_cross_entropy_grad, &def_mean, &def_mean_grad, NULL};
/* clang-format on */
