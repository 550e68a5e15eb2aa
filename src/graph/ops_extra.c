/*
 * ops_extra.c - operator group "extra": matmul (Paddle's batched matmul with transpose_X,
 * transpose_Y and alpha; Paddle 2.x's matmul_v2 with trans_x / trans_y) with its gradient, and fill_constant_batch_size_like.  word2vec's
 * negative-sampling logits are a batched matmul of [N, 1, D] by [N, K, D]^T, and its labels
 * (ones and zeros shaped like the logits) come from fill_constant_batch_size_like, as in
 * Paddle's word2vec example.  Float32 data (fill_constant_batch_size_like also writes
 * int64 and float64); matmul also takes bfloat16 or float16 X and Y (after AMP's casts,
 * src/graph/amp.c), multiplied by fl__gemm (oneDNN's bf16 / f16 kernels where the CPU has
 * them, src/tensor/dnn.c) with float32 accumulation and a float32 Out.
 */
#include <string.h>

#include "graph_internal.h"

/* ---- matmul, matmul_v2 -------------------------------------------------------------------
 *
 * X [..., M, K] and Y [..., K, N] (stored transposed when transpose_X / transpose_Y, or
 * matmul_v2's trans_x / trans_y, is set) -> Out = alpha * op(X) op(Y) of shape [..., M, N]
 * (matmul_v2 has no alpha).  The leading (batch) dims of a rank > 2 operand are flattened
 * into one batch; a rank-2 operand next to a batched one is shared by every batch (Paddle
 * broadcasts it the same way); two batched operands must have the same leading dims (3-D
 * [B, M, K] or attention's 4-D [B, H, S, D]).  Rank 1 and general broadcasting of leading
 * dims (Paddle 2.x) are rejected. */

typedef struct {
    int64_t batch, m, n, k;
    int64_t xr, xc, yr, yc; /* stored matrix dims of one batch of X and Y */
    int xb, yb;             /* whether X / Y has batch dims */
    int bn;                 /* number of batch dims of Out */
    int64_t bs[FL_MAX_DIMS];
} mm_dims;

/* 0 ok; 1 bad rank; 2 inner dims differ; 3 batches differ (unknown -1 dims pass at build). */
static int mm_layout(const int64_t *xs, int xn, const int64_t *ys, int yn, int tx, int ty, mm_dims *d)
{
    if (xn < 2 || xn > FL_MAX_DIMS || yn < 2 || yn > FL_MAX_DIMS) return 1;
    d->xb = xn > 2, d->yb = yn > 2;
    d->xr = xs[xn - 2], d->xc = xs[xn - 1], d->yr = ys[yn - 2], d->yc = ys[yn - 1];
    d->m = tx ? d->xc : d->xr;
    d->k = tx ? d->xr : d->xc;
    d->n = ty ? d->yr : d->yc;
    int64_t yk = ty ? d->yc : d->yr;
    if (d->k >= 0 && yk >= 0 && d->k != yk) return 2;
    if (d->xb && d->yb) {
        if (xn != yn) return 3;
        for (int i = 0; i < xn - 2; i++)
            if (xs[i] >= 0 && ys[i] >= 0 && xs[i] != ys[i]) return 3;
    }
    const int64_t *bs = d->xb ? xs : ys;
    d->bn = d->xb ? xn - 2 : d->yb ? yn - 2 : 0;
    d->batch = 1;
    for (int i = 0; i < d->bn; i++) {
        d->bs[i] = bs[i];
        if (d->xb && d->yb && bs[i] < 0) d->bs[i] = ys[i]; /* the known one, if any */
        d->batch = d->batch < 0 || d->bs[i] < 0 ? -1 : d->batch * d->bs[i];
    }
    return 0;
}

/* Out's shape: the batch dims, M, N. */
static int mm_out_shape(const mm_dims *d, int64_t *os)
{
    int on = 0;
    for (int i = 0; i < d->bn; i++) os[on++] = d->bs[i];
    os[on++] = d->m;
    os[on++] = d->n;
    return on;
}

/* transpose_X / transpose_Y (matmul) or trans_x / trans_y (matmul_v2 and its gradient). */
static void mm_trans(const fl_op *op, int *tx, int *ty)
{
    int v2 = !strncmp(op->def->type, "matmul_v2", 9);
    *tx = (int)fl__attr_i(op, v2 ? "trans_x" : "transpose_X", 0) != 0;
    *ty = (int)fl__attr_i(op, v2 ? "trans_y" : "transpose_Y", 0) != 0;
}

/* alpha (matmul only; matmul_v2 has none). */
static float mm_alpha(const fl_op *op)
{
    return strncmp(op->def->type, "matmul_v2", 9) ? (float)fl__attr_f(op, "alpha", 1.0) : 1.0f;
}

static int infer_matmul(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0], *y = op->in[1].vars[0];
    for (int i = 0; i < 2; i++) {
        fl_var *v = i ? y : x;
        if (v->dtype != FL_FLOAT32 && v->dtype != FL_BFLOAT16 && v->dtype != FL_FLOAT16)
            return fl__op_error(op, "%s '%s' is %s (float32, or bfloat16 / float16 after AMP's casts)", i ? "Y" : "X",
                                v->name, fl_dtype_name(v->dtype));
    }
    if ((x->dtype == FL_FLOAT16 && y->dtype == FL_BFLOAT16) || (x->dtype == FL_BFLOAT16 && y->dtype == FL_FLOAT16))
        return fl__op_error(op, "X '%s' is %s and Y '%s' %s: one low-precision type per product", x->name,
                            fl_dtype_name(x->dtype), y->name, fl_dtype_name(y->dtype));
    int tx, ty;
    mm_trans(op, &tx, &ty);
    mm_dims d;
    int code = mm_layout(x->shape, x->ndim, y->shape, y->ndim, tx, ty, &d);
    if (code) {
        char xs[96], ys[96];
        fl__shape_str(x, xs, sizeof xs);
        fl__shape_str(y, ys, sizeof ys);
        static const char *const why[] = {"", "X and Y must be of rank 2 to 8",
                                          "the inner dimensions of op(X) and op(Y) differ",
                                          "batched X and Y must have the same leading dims"};
        return fl__op_error(op, "X '%s' %s, Y '%s' %s (transpose X %d, Y %d): %s", x->name, xs, y->name, ys, tx, ty,
                            why[code]);
    }
    int64_t os[FL_MAX_DIMS];
    int on = mm_out_shape(&d, os);
    fl_dtype odt = (fl_dtype)fl__attr_i(op, "out_dtype", FL_FLOAT32);
    if (odt != FL_FLOAT32 && odt != FL_BFLOAT16 && odt != FL_FLOAT16)
        return fl__op_error(op, "out_dtype %s must be float32, bfloat16 or float16", fl_dtype_name(odt));
    fl__var_set_shape(op->out[0].vars[0], odt, on, os);
    return FL_OK;
}

/* C = alpha * op(A) op(B) + beta * C for stored matrices A [ar, ac] and B [br, bc]. */
static void mm(int ta, int tb, const float *a, int64_t ar, int64_t ac, const float *b, int64_t br, int64_t bc, float alpha,
               float beta, float *c)
{
    int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
    if (m == 0 || n == 0) return;
    fl__sgemm(ta, tb, m, n, k, alpha, a, ac, b, bc, beta, c, n);
}

/* The same for low-precision operands (a_type / b_type), through fl__gemm and the op's
 * primitive cache; no alpha (the callers apply it).  mm_lp_to writes out in ot (AMP level
 * O2's out_dtype: float32, or bfloat16 / float16 with beta 0). */
static int mm_lp_to(fl_kctx *c, int ta, int tb, const void *a, fl_dtype at, int64_t ar, int64_t ac, const void *b,
                    fl_dtype bt, int64_t br, int64_t bc, float beta, void *out, fl_dtype ot)
{
    fl_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.trans_a = ta, d.trans_b = tb;
    d.m = ta ? ac : ar, d.k = ta ? ar : ac, d.n = tb ? br : bc;
    d.lda = ac, d.ldb = bc, d.ldc = d.n;
    d.beta = beta;
    d.a_type = at, d.b_type = bt, d.c_type = ot;
    return fl__gemm((fl_gemm_cache **)c->state, &d, a, b, NULL, out);
}

static int mm_lp(fl_kctx *c, int ta, int tb, const void *a, fl_dtype at, int64_t ar, int64_t ac, const void *b, fl_dtype bt,
                 int64_t br, int64_t bc, float beta, float *out)
{
    return mm_lp_to(c, ta, tb, a, at, ar, ac, b, bt, br, bc, beta, out, FL_FLOAT32);
}

static int is_low(const fl_tensor *t) { return t->dtype == FL_BFLOAT16 || t->dtype == FL_FLOAT16; }

/* Low-precision batches of small products (attention's per-head QK^T and .V: 128 x 128 x 64
 * at BERT's sequence 128) run oneDNN on one thread: with FLEET_NUM_THREADS=2 each of the
 * B * heads calls otherwise forks an OpenMP team of 2 for about 1 M multiply-adds, and the
 * step's matmuls took 20x longer than on one thread when the other core was busy
 * (BENCHMARKS.md, BERT).  Large products keep the team. */
#define MM_LP_SMALL (1ll << 22)
static int lp_single_begin(const mm_dims *d)
{
    int on = d->batch > 1 && d->m * d->n * d->k <= MM_LP_SMALL;
    if (on) fl__dnn_single(1);
    return on;
}
static void lp_single_end(int on)
{
    if (on) fl__dnn_single(0);
}

static int mm_runtime(fl_kctx *c, mm_dims *d, int *tx, int *ty)
{
    const fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1);
    for (int i = 0; i < 2; i++)
        if (!is_low(i ? y : x)) FL_CHECK(fl__kctx_dense_f32(c, i));
        else if ((i ? y : x)->is_rows)
            return fl__err(FL_EINVAL, "%s: input '%s' holds SelectedRows", c->op->def->type, fl__kctx_var_name(c, i, 0));
    mm_trans(c->op, tx, ty);
    if (mm_layout(x->shape, x->ndim, y->shape, y->ndim, *tx, *ty, d)) {
        char xs[96], ys[96];
        fl_tensor_describe(x, xs, sizeof xs);
        fl_tensor_describe(y, ys, sizeof ys);
        return fl__err(FL_EINVAL, "%s: X '%s' %s and Y '%s' %s do not multiply (transpose X %d, Y %d)", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0), xs, fl__kctx_var_name(c, 1, 0), ys, *tx, *ty);
    }
    return FL_OK;
}

/* AMP level O2: Out in bfloat16 / float16 (out_dtype).  With alpha 1 each product writes
 * it directly (fl__gemm's c_type); otherwise the float32 products are scaled, then rounded
 * once. */
static int run_matmul_low_out(fl_kctx *c, const mm_dims *d, int tx, int ty, float alpha, fl_dtype odt, int on,
                              const int64_t *os)
{
    const fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1);
    fl_tensor *out = FL_OUT(c, 0);
    if (odt != FL_BFLOAT16 && odt != FL_FLOAT16)
        return fl__err(FL_EINVAL, "%s: out_dtype %s (float32, bfloat16 or float16)", c->op->def->type,
                       fl_dtype_name(odt));
    FL_CHECK(fl__tensor_reshape_raw(out, odt, on, os));
    out->lod_n = 0;
    int64_t mn = d->m * d->n;
    float *tmp = NULL;
    if (alpha != 1.0f) {
        tmp = malloc((size_t)(out->numel ? out->numel : 1) * sizeof *tmp);
        if (!tmp) return fl__err(FL_ENOMEM, "%s: out of memory", c->op->def->type);
    }
    size_t xe = fl_dtype_size(x->dtype), ye = fl_dtype_size(y->dtype);
    int st = FL_OK, single = lp_single_begin(d);
    for (int64_t b = 0; b < d->batch && st == FL_OK; b++) {
        const char *xb = (const char *)x->data + (d->xb ? b * d->xr * d->xc : 0) * xe;
        const char *yb = (const char *)y->data + (d->yb ? b * d->yr * d->yc : 0) * ye;
        if (tmp) st = mm_lp_to(c, tx, ty, xb, x->dtype, d->xr, d->xc, yb, y->dtype, d->yr, d->yc, 0.0f, tmp + b * mn,
                               FL_FLOAT32);
        else st = mm_lp_to(c, tx, ty, xb, x->dtype, d->xr, d->xc, yb, y->dtype, d->yr, d->yc, 0.0f,
                           (uint16_t *)out->data + b * mn, odt);
    }
    lp_single_end(single);
    if (tmp && st == FL_OK) {
        for (int64_t i = 0; i < out->numel; i++) tmp[i] *= alpha;
        st = fl__cvt_any(out->data, odt, tmp, FL_FLOAT32, out->numel);
    }
    free(tmp);
    return st;
}

static int run_matmul(fl_kctx *c)
{
    mm_dims d;
    int tx, ty;
    FL_CHECK(mm_runtime(c, &d, &tx, &ty));
    const fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1);
    fl_tensor *out = FL_OUT(c, 0);
    int64_t os[FL_MAX_DIMS];
    int on = mm_out_shape(&d, os);
    float alpha = mm_alpha(c->op);
    fl_dtype odt = (fl_dtype)fl__attr_i(c->op, "out_dtype", FL_FLOAT32);
    if (odt != FL_FLOAT32) return run_matmul_low_out(c, &d, tx, ty, alpha, odt, on, os);
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, on, os));
    const float *xd = x->data, *yd = y->data;
    float *od = out->data;
    if (is_low(x) || is_low(y)) {
        size_t xe = fl_dtype_size(x->dtype), ye = fl_dtype_size(y->dtype);
        int st = FL_OK, single = lp_single_begin(&d);
        for (int64_t b = 0; b < d.batch && st == FL_OK; b++)
            st = mm_lp(c, tx, ty, (const char *)x->data + (d.xb ? b * d.xr * d.xc : 0) * xe, x->dtype, d.xr, d.xc,
                       (const char *)y->data + (d.yb ? b * d.yr * d.yc : 0) * ye, y->dtype, d.yr, d.yc, 0.0f,
                       od + b * d.m * d.n);
        lp_single_end(single);
        FL_CHECK(st);
        if (alpha != 1.0f)
            for (int64_t i = 0; i < out->numel; i++) od[i] *= alpha;
        out->lod_n = 0;
        return FL_OK;
    }
    for (int64_t b = 0; b < d.batch; b++)
        mm(tx, ty, xd + (d.xb ? b * d.xr * d.xc : 0), d.xr, d.xc, yd + (d.yb ? b * d.yr * d.yc : 0), d.yr, d.yc, alpha,
           0.0f, od + b * d.m * d.n);
    out->lod_n = 0;
    return FL_OK;
}

/* matmul_grad with low-precision X / Y: the same products as below through mm_lp; alpha is
 * applied to a copy of Out@GRAD first. */
static int matmul_grad_lp(fl_kctx *c, const mm_dims *d, int tx, int ty, float alpha)
{
    const fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1), *g = FL_IN(c, 2);
    fl_tensor *dx = FL_OUT(c, 0), *dy = FL_OUT(c, 1);
    const float *gd = g->data;
    float *scaled = NULL;
    if (alpha != 1.0f) {
        scaled = malloc((size_t)(g->numel ? g->numel : 1) * sizeof *scaled);
        if (!scaled) return fl__err(FL_ENOMEM, "matmul_grad: out of memory");
        for (int64_t i = 0; i < g->numel; i++) scaled[i] = gd[i] * alpha;
        gd = scaled;
    }
    size_t xe = fl_dtype_size(x->dtype), ye = fl_dtype_size(y->dtype);
    int st = FL_OK, single = lp_single_begin(d);
    for (int64_t b = 0; b < d->batch && st == FL_OK; b++) {
        const char *xb = (const char *)x->data + (d->xb ? b * d->xr * d->xc : 0) * xe;
        const char *yb = (const char *)y->data + (d->yb ? b * d->yr * d->yc : 0) * ye;
        const float *gb = gd + b * d->m * d->n;
        if (dx) {
            float *o = (float *)dx->data + (d->xb ? b * d->xr * d->xc : 0);
            float beta = d->xb ? 0.0f : 1.0f;
            if (!tx) st = mm_lp(c, 0, !ty, gb, FL_FLOAT32, d->m, d->n, yb, y->dtype, d->yr, d->yc, beta, o);
            else st = mm_lp(c, ty, 1, yb, y->dtype, d->yr, d->yc, gb, FL_FLOAT32, d->m, d->n, beta, o);
        }
        if (dy && st == FL_OK) {
            float *o = (float *)dy->data + (d->yb ? b * d->yr * d->yc : 0);
            float beta = d->yb ? 0.0f : 1.0f;
            if (!ty) st = mm_lp(c, !tx, 0, xb, x->dtype, d->xr, d->xc, gb, FL_FLOAT32, d->m, d->n, beta, o);
            else st = mm_lp(c, 1, tx, gb, FL_FLOAT32, d->m, d->n, xb, x->dtype, d->xr, d->xc, beta, o);
        }
    }
    lp_single_end(single);
    free(scaled);
    return st;
}

/* Inputs X, Y, Out@GRAD; outputs X@GRAD and / or Y@GRAD.  A shared (rank-2) operand's
 * gradient sums over the batches. */
static int run_matmul_grad(fl_kctx *c)
{
    mm_dims d;
    int tx, ty;
    FL_CHECK(mm_runtime(c, &d, &tx, &ty));
    FL_CHECK(fl__kctx_dense_f32(c, 2));
    const fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1), *g = FL_IN(c, 2);
    fl_tensor *dx = FL_OUT(c, 0), *dy = FL_OUT(c, 1);
    if (g->numel != d.batch * d.m * d.n)
        return fl__err(FL_EINVAL, "%s: gradient '%s' has %lld elements, expected %lld", c->op->def->type,
                       fl__kctx_var_name(c, 2, 0), (long long)g->numel, (long long)(d.batch * d.m * d.n));
    float alpha = mm_alpha(c->op);
    if (dx) FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    if (dy) FL_CHECK(fl__tensor_reshape_raw(dy, FL_FLOAT32, y->ndim, y->shape));
    if (dx && !d.xb) memset(dx->data, 0, (size_t)dx->numel * sizeof(float));
    if (dy && !d.yb) memset(dy->data, 0, (size_t)dy->numel * sizeof(float));
    if (is_low(x) || is_low(y)) return matmul_grad_lp(c, &d, tx, ty, alpha);
    const float *xd = x->data, *yd = y->data, *gd = g->data;
    for (int64_t b = 0; b < d.batch; b++) {
        const float *xb = xd + (d.xb ? b * d.xr * d.xc : 0), *yb = yd + (d.yb ? b * d.yr * d.yc : 0);
        const float *gb = gd + b * d.m * d.n;
        if (dx) {
            float *o = (float *)dx->data + (d.xb ? b * d.xr * d.xc : 0);
            float beta = d.xb ? 0.0f : 1.0f;
            if (!tx) mm(0, !ty, gb, d.m, d.n, yb, d.yr, d.yc, alpha, beta, o); /* dOut op(Y)^T */
            else mm(ty, 1, yb, d.yr, d.yc, gb, d.m, d.n, alpha, beta, o);      /* (dOut op(Y)^T)^T */
        }
        if (dy) {
            float *o = (float *)dy->data + (d.yb ? b * d.yr * d.yc : 0);
            float beta = d.yb ? 0.0f : 1.0f;
            if (!ty) mm(!tx, 0, xb, d.xr, d.xc, gb, d.m, d.n, alpha, beta, o); /* op(X)^T dOut */
            else mm(1, tx, gb, d.m, d.n, xb, d.xr, d.xc, alpha, beta, o);      /* (op(X)^T dOut)^T */
        }
    }
    return FL_OK;
}

static int grad_matmul(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *y = op->in[1].vars[0], *dout = fl__grad_of(g, op->out[0].vars[0]);
    if (!dout) return FL_OK;
    fl_var *dx = fl__grad_for(g, x), *dy = fl__grad_for(g, y);
    fl_var *dxv[1] = {dx}, *dyv[1] = {dy};
    fl_io o[2];
    int no = 0;
    if (dx) o[no++] = (fl_io){"X@GRAD", dxv, 1};
    if (dy) o[no++] = (fl_io){"Y@GRAD", dyv, 1};
    fl_io in[3] = {FL_IO1("X", x), FL_IO1("Y", y), FL_IO1("Out@GRAD", dout)};
    return no ? fl__grad_append(op, strcmp(op->def->type, "matmul") ? "matmul_v2_grad" : "matmul_grad", in, 3, o, no)
              : FL_OK;
}

static const fl_op_def def_matmul = {"matmul",    {"X", "Y"},         {"Out"}, infer_matmul, run_matmul,
                                     grad_matmul, fl__gemm_cache_free};
static const fl_op_def def_matmul_grad = {
    "matmul_grad", {"X", "Y", "Out@GRAD"}, {"X@GRAD", "Y@GRAD"}, fl__infer_nop, run_matmul_grad, NULL, fl__gemm_cache_free};
static const fl_op_def def_matmul_v2 = {"matmul_v2", {"X", "Y"},         {"Out"}, infer_matmul, run_matmul,
                                        grad_matmul, fl__gemm_cache_free};
static const fl_op_def def_matmul_v2_grad = {"matmul_v2_grad",   {"X", "Y", "Out@GRAD"}, {"X@GRAD", "Y@GRAD"},
                                             fl__infer_nop,      run_matmul_grad,        NULL,
                                             fl__gemm_cache_free};

static fl_var *matmul_layer(fl_var *x, fl_var *y, int tx, int ty, float alpha, int v2)
{
    const char *type = v2 ? "matmul_v2" : "matmul";
    fl_var *const xy[2] = {x, y};
    fl_prog *p = fl__prog_of(xy, 2);
    if (!p) {
        fl__err(FL_EINVAL, "%s: input X or Y is NULL", type);
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    char base[128];
    fl__unique_name(p, type, base, sizeof base);
    fl_var *o = fl__tmp_var(p, base, FL_FLOAT32, x->ndim, x->shape);
    if (!o) return NULL;
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Y", y)}, out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, type, in, 2, &out, 1);
    if (!op) return NULL;
    int st = v2 ? fl__attr_set_i(op, "trans_x", tx != 0) || fl__attr_set_i(op, "trans_y", ty != 0)
                : fl__attr_set_i(op, "transpose_X", tx != 0) || fl__attr_set_i(op, "transpose_Y", ty != 0) ||
                      fl__attr_set_f(op, "alpha", alpha);
    if (st || fl__op_finish(op)) return NULL;
    return o;
}

fl_var *fl_layer_matmul(fl_var *x, fl_var *y, int transpose_x, int transpose_y, float alpha)
{
    return matmul_layer(x, y, transpose_x, transpose_y, alpha, 0);
}

fl_var *fl_layer_matmul_v2(fl_var *x, fl_var *y, int trans_x, int trans_y)
{
    return matmul_layer(x, y, trans_x, trans_y, 1.0f, 1);
}

/* ---- fill_constant_batch_size_like ----------------------------------------------------------
 *
 * Out has attribute 'shape' with dim output_dim_idx (default 0) replaced by Input's dim
 * input_dim_idx (default 0), filled with 'value' (dtype float32, float64 or int64).  No
 * gradient: Out does not depend on Input's values. */

static int infer_fill_bsl(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *in = op->in[0].vars[0];
    const fl_attr *sh = fl__attr_find(op, "shape");
    if (!sh || sh->type != FL_ATTR_INTS || sh->n < 1 || sh->n > FL_MAX_DIMS)
        return fl__op_error(op, "attribute 'shape' is missing or has a bad rank");
    int64_t ii = fl__attr_i(op, "input_dim_idx", 0), oi = fl__attr_i(op, "output_dim_idx", 0);
    if (ii < 0 || ii >= in->ndim || oi < 0 || oi >= sh->n)
        return fl__op_error(op,
                            "input_dim_idx %lld or output_dim_idx %lld out of range (input '%s' rank %d, shape rank %d)",
                            (long long)ii, (long long)oi, in->name, in->ndim, sh->n);
    int64_t os[FL_MAX_DIMS];
    for (int i = 0; i < sh->n; i++) {
        os[i] = sh->ints[i];
        if (i != oi && os[i] < 1) return fl__op_error(op, "shape[%d] = %lld must be >= 1", i, (long long)os[i]);
    }
    os[oi] = in->shape[ii];
    fl_dtype dt = (fl_dtype)fl__attr_i(op, "dtype", FL_FLOAT32);
    if (dt != FL_FLOAT32 && dt != FL_FLOAT64 && dt != FL_INT64)
        return fl__op_error(op, "dtype %s is not supported (float32, float64 or int64)", fl_dtype_name(dt));
    fl__var_set_shape(op->out[0].vars[0], dt, sh->n, os);
    return FL_OK;
}

static int run_fill_bsl(fl_kctx *c)
{
    const fl_tensor *in = FL_IN(c, 0);
    fl_tensor *out = FL_OUT(c, 0);
    const fl_attr *sh = fl__attr_find(c->op, "shape");
    int64_t ii = fl__attr_i(c->op, "input_dim_idx", 0), oi = fl__attr_i(c->op, "output_dim_idx", 0);
    if (ii >= in->ndim)
        return fl__err(FL_EINVAL, "fill_constant_batch_size_like: input '%s' has rank %d, input_dim_idx is %lld",
                       fl__kctx_var_name(c, 0, 0), in->ndim, (long long)ii);
    int64_t os[FL_MAX_DIMS];
    for (int i = 0; i < sh->n; i++) os[i] = sh->ints[i];
    os[oi] = in->shape[ii];
    fl_dtype dt = (fl_dtype)fl__attr_i(c->op, "dtype", FL_FLOAT32);
    FL_CHECK(fl__tensor_reshape_raw(out, dt, sh->n, os));
    double v = fl__attr_f(c->op, "value", 0.0);
    if (dt == FL_FLOAT32) fl__vfill(out->data, (float)v, out->numel);
    else if (dt == FL_FLOAT64)
        for (int64_t i = 0; i < out->numel; i++) ((double *)out->data)[i] = v;
    else
        for (int64_t i = 0; i < out->numel; i++) ((int64_t *)out->data)[i] = (int64_t)v;
    out->lod_n = 0;
    return FL_OK;
}

static const fl_op_def def_fill_bsl = {
    "fill_constant_batch_size_like", {"Input"}, {"Out"}, infer_fill_bsl, run_fill_bsl, NULL};

fl_var *fl_layer_fill_constant_batch_size_like(fl_var *input, int ndim, const int64_t *shape, fl_dtype dtype, float value)
{
    fl_prog *p = fl__prog_of(&input, 1);
    if (!p) {
        fl__err(FL_EINVAL, "fill_constant_batch_size_like: input is NULL");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    if (ndim < 1 || ndim > FL_MAX_DIMS || !shape) {
        fl__prog_error(p, FL_EINVAL, "fill_constant_batch_size_like: shape must have 1 to %d dims", FL_MAX_DIMS);
        return NULL;
    }
    char base[128];
    fl__unique_name(p, "fill_constant_batch_size_like", base, sizeof base);
    fl_var *o = fl__tmp_var(p, base, dtype, ndim, shape);
    if (!o) return NULL;
    o->stop_gradient = 1;
    fl_io in = FL_IO1("Input", input), out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "fill_constant_batch_size_like", &in, 1, &out, 1);
    if (!op || fl__attr_set_ints(op, "shape", shape, ndim) || fl__attr_set_i(op, "dtype", dtype) ||
        fl__attr_set_f(op, "value", value) || fl__op_finish(op))
        return NULL;
    return o;
}

const fl_op_def *const fl__ops_extra[] = {&def_matmul,         &def_matmul_grad, &def_matmul_v2,
                                          &def_matmul_v2_grad, &def_fill_bsl,    NULL};
