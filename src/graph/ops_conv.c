/*
 * ops_conv.c - operator group "conv": conv2d, pool2d (in ops_pool.c) and batch_norm (in
 * ops_bn.c) with their gradients and layer builders, following Paddle's fluid ops (NCHW).
 * Port choices:
 *   - conv2d fuses the per-channel bias (optional input "Bias") and the activation
 *     (attribute "act": relu, tanh, sigmoid), as this port's fc op does; Paddle appends
 *     an elementwise_add (axis 1) and an activation op instead.  The results are the same.
 *   - data_format / data_layout other than "NCHW" (NHWC) and adaptive pooling are rejected
 *     with an error naming the option.
 *   - conv2d takes a bfloat16 Input and Filter (AMP's casts); its outputs stay float32,
 *     except with attribute out_dtype bfloat16 (forward only: such an op has no gradient),
 *     which the inference pass sets (fold_infer.c) where only AMP's casts to bfloat16 read
 *     the output: bias, residual and activation are applied in float32 and the result is
 *     rounded to nearest even once, as the cast did (oneDNN: a bf16 destination; im2col: the
 *     float32 result rounded into the output).
 *   - ResidualData (Paddle's oneDNN conv2d input, with fuse_residual_connection) is added
 *     to the output before the activation: Output = act(conv + Bias + ResidualData); float32,
 *     or bfloat16 where the inference pass made its writer write bfloat16.  Only the
 *     inference pass (fold_infer.c) sets it; such an op has no gradient.
 * Kernels: when FLEET_GEMM picks oneDNN, conv2d and conv2d_grad run oneDNN's convolution
 * primitives (src/tensor/dnn_conv.c, cached in the op's state).  Otherwise conv2d is
 * im2col + fl__sgemm per group and image (or per batch of images when the filter is large,
 * see run_conv2d; a 1x1 filter with stride 1 and no padding skips im2col); im2col and
 * col2im copy whole rows with the out-of-image border computed once per kernel offset, so
 * their inner loops have no calls or tests per element; bfloat16 inputs are widened first.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../tensor/dnn_conv.h"
#include "ops_conv.h"
#include "op_layout.h"

extern const fl_op_def *const fl__ops_conv[];

/* ---- shared helpers (ops_conv.h) ------------------------------------------------------- */

int fl__conv_need_nchw(fl_op *op, const char *attr, const fl_var *x)
{
    const char *f = fl__attr_s(op, attr, "NCHW");
    if (!strcmp(f, "NCHW") || !strcmp(f, "AnyLayout")) return FL_OK;
    return fl__op_error(op, "%s '%s' (input '%s') is not supported: only NCHW", attr, f, x->name);
}

/* Two-element int attribute (one element means both); 0 if present and well formed. */
int fl__conv_attr2(const fl_op *op, const char *name, int64_t def, int64_t v[2])
{
    const fl_attr *a = fl__attr_find(op, name);
    v[0] = v[1] = def;
    if (!a) return 0;
    if (a->type != FL_ATTR_INTS || a->n < 1 || a->n > 2) return -1;
    v[0] = a->ints[0];
    v[1] = a->ints[a->n - 1];
    return 0;
}

void fl__conv_state_free(void *p)
{
    fl__conv_state *st = p;
    if (!st) return;
    fl__conv_cache_free(st->dnn);
    free(st->buf);
    free(st->wide[0]);
    free(st->wide[1]);
    free(st->wide[2]);
    free(st->wide[3]);
    free(st);
}

fl__conv_state *fl__conv_state_get(fl_kctx *c)
{
    if (!*c->state && !(*c->state = calloc(1, sizeof(fl__conv_state))))
        fl__err(FL_ENOMEM, "%s: out of memory", c->op->def->type);
    return *c->state;
}

float *fl__conv_scratch(fl_kctx *c, int64_t n)
{
    fl__conv_state *s = fl__conv_state_get(c);
    if (s && s->n < (size_t)n + 1) {
        float *nb = realloc(s->buf, ((size_t)n + 1) * sizeof(float));
        if (!nb) {
            fl__err(FL_ENOMEM, "%s: cannot allocate %lld floats of scratch", c->op->def->type, (long long)n);
            return NULL;
        }
        s->buf = nb;
        s->n = (size_t)n + 1;
    }
    return s ? s->buf : NULL;
}

int fl__conv_act_code(const char *a)
{
    if (!a || !*a || !strcmp(a, "none") || !strcmp(a, "linear")) return ACT_NONE;
    if (!strcmp(a, "relu")) return ACT_RELU;
    if (!strcmp(a, "tanh")) return ACT_TANH;
    if (!strcmp(a, "sigmoid")) return ACT_SIGMOID;
    if (!strcmp(a, "softmax")) return ACT_POST_SOFTMAX;
    if (!strcmp(a, "softsign")) return ACT_POST_SOFTSIGN;
    return -1;
}

static void act_apply(int a, float *y, int64_t n)
{
    if (a == ACT_RELU) fl__relu(y, y, n);
    if (a == ACT_TANH) fl__tanh(y, y, n);
    if (a == ACT_SIGMOID) fl__sigmoid(y, y, n);
}

fl_var *fl__conv_post_act(fl_var *y, int a)
{
    if (!y) return NULL;
    switch (a) {
    case ACT_RELU: return fl_layer_relu(y);
    case ACT_TANH: return fl_layer_tanh(y);
    case ACT_SIGMOID: return fl_layer_sigmoid(y);
    case ACT_POST_SOFTMAX: return fl_layer_softmax(y);
    case ACT_POST_SOFTSIGN: return fl_layer_softsign(y);
    default: return y;
    }
}

/* ---- conv2d ------------------------------------------------------------------------------ */

/* Paddle's conv2d: Input [N, C, H, W], Filter [M, C/groups, kh, kw], optional Bias [M]
 * (port: fused) -> Output [N, M, Ho, Wo] with Ho = (H + 2p - d(kh - 1) - 1) / s + 1.
 * Attributes strides, paddings, dilations ([h, w]), groups, data_format, act (port). */
typedef struct {
    int64_t n, c, h, w, m, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, g;
    int64_t cg, mg, k, hw, ohw; /* C/g, M/g, K = C/g*kh*kw, H*W, Ho*Wo */
} conv_geo;

static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d)
{
    if (in < 0) return -1;
    int64_t ext = d * (k - 1) + 1;
    return in + 2 * p < ext ? 0 : (in + 2 * p - ext) / s + 1;
}

/* Fills g from shapes and attributes; returns a reason (NULL if fine).  Unknown (-1)
 * input dims give -1 output dims and skip their checks. */
static const char *conv_geo_make(const fl_op *op, const int64_t *xs, const int64_t *fs, conv_geo *g)
{
    int64_t s[2], p[2], d[2];
    if (fl__conv_attr2(op, "strides", 1, s) || fl__conv_attr2(op, "paddings", 0, p) ||
        fl__conv_attr2(op, "dilations", 1, d))
        return "strides, paddings and dilations must be int lists of 1 or 2 entries";
    g->g = fl__attr_i(op, "groups", 1);
    g->sh = s[0], g->sw = s[1], g->ph = p[0], g->pw = p[1], g->dh = d[0], g->dw = d[1];
    if (s[0] < 1 || s[1] < 1 || d[0] < 1 || d[1] < 1 || p[0] < 0 || p[1] < 0 || g->g < 1)
        return "strides, dilations and groups must be >= 1 and paddings >= 0";
    g->n = xs[0], g->c = xs[1], g->h = xs[2], g->w = xs[3];
    g->m = fs[0], g->kh = fs[2], g->kw = fs[3];
    if (g->m < 1 || fs[1] < 1 || g->kh < 1 || g->kw < 1) return "the filter has an empty dimension";
    if (g->m % g->g) return "num_filters (filter dim 0) is not divisible by groups";
    if (g->c >= 0 && g->c != fs[1] * g->g) return "the filter's channels (dim 1) times groups differ from the input's C";
    g->cg = fs[1], g->mg = g->m / g->g, g->k = g->cg * g->kh * g->kw;
    g->oh = conv_out(g->h, g->kh, g->sh, g->ph, g->dh);
    g->ow = conv_out(g->w, g->kw, g->sw, g->pw, g->dw);
    if (g->oh == 0 || g->ow == 0) return "the dilated filter is larger than the padded input";
    g->hw = g->h * g->w, g->ohw = g->oh * g->ow;
    if (g->h > 0 && g->w > 0 && (g->k * g->ohw > INT32_MAX || g->hw > INT32_MAX)) return "the image is too large";
    return NULL;
}

/* Input and Filter: float32, or bfloat16 after fl_amp_decorate (the bias stays float32). */
static int need_f32_or_bf16(fl_op *op, const fl_var *v)
{
    if (v->dtype == FL_BFLOAT16) return FL_OK;
    return fl__op_need_f32(op, v);
}

static int infer_conv2d(fl_op *op)
{
    if (op->in[0].n != 1 || op->in[1].n != 1 || op->in[2].n > 1 || op->in[3].n > 1 || op->out[0].n != 1)
        return fl__op_error(op, "needs one Input, one Filter, at most one Bias and one ResidualData, and one Output");
    fl_var *x = op->in[0].vars[0], *f = op->in[1].vars[0];
    FL_CHECK(need_f32_or_bf16(op, x));
    FL_CHECK(need_f32_or_bf16(op, f));
    FL_CHECK(fl__conv_need_nchw(op, "data_format", x));
    char xs[96], fs[96];
    fl__shape_str(x, xs, sizeof xs);
    fl__shape_str(f, fs, sizeof fs);
    if (x->ndim != 4) return fl__op_error(op, "input '%s' must be 4-D NCHW [N, C, H, W], is %s", x->name, xs);
    if (f->ndim != 4) return fl__op_error(op, "filter '%s' must be 4-D [M, C/groups, kh, kw], is %s", f->name, fs);
    if (fl__conv_act_code(fl__attr_s(op, "act", "")) < 0 || fl__conv_act_code(fl__attr_s(op, "act", "")) > ACT_SIGMOID)
        return fl__op_error(op, "fused activation '%s' (input '%s') must be relu, tanh, sigmoid or empty",
                            fl__attr_s(op, "act", ""), x->name);
    conv_geo g;
    const char *why = conv_geo_make(op, x->shape, f->shape, &g);
    if (why)
        return fl__op_error(op, "input '%s' %s, filter '%s' %s, groups %lld: %s", x->name, xs, f->name, fs,
                            (long long)fl__attr_i(op, "groups", 1), why);
    if (op->in[2].n) {
        fl_var *b = op->in[2].vars[0];
        FL_CHECK(fl__op_need_f32(op, b));
        if (fl__dims_prod(b->shape, 0, b->ndim) != g.m)
            return fl__op_error(op, "bias '%s' must have %lld elements (one per filter of '%s')", b->name, (long long)g.m,
                                f->name);
    }
    int64_t os[4] = {g.n, g.m, g.oh, g.ow};
    if (op->in[3].n) {
        fl_var *r = op->in[3].vars[0];
        FL_CHECK(need_f32_or_bf16(op, r));
        int same = r->ndim == 4;
        for (int i = 0; same && i < 4; i++) same = r->shape[i] < 0 || os[i] < 0 || r->shape[i] == os[i];
        if (!same) {
            char rs[96];
            fl__shape_str(r, rs, sizeof rs);
            return fl__op_error(op, "residual '%s' %s must have the output's shape [%lld, %lld, %lld, %lld] (input '%s')",
                                r->name, rs, (long long)os[0], (long long)os[1], (long long)os[2], (long long)os[3],
                                x->name);
        }
    }
    fl_dtype to = (fl_dtype)fl__attr_i(op, "out_dtype", FL_FLOAT32);
    if (to != FL_FLOAT32 && to != FL_BFLOAT16)
        return fl__op_error(op, "out_dtype %s is not supported (float32 or bfloat16; input '%s')", fl_dtype_name(to),
                            x->name);
    fl__var_set_shape(op->out[0].vars[0], to, 4, os);
    return FL_OK;
}

/* Run-time geometry of Input (slot 0) and Filter (slot 1). */
static int conv_geo_rt(fl_kctx *c, conv_geo *g)
{
    for (int slot = 0; slot < 2; slot++) {
        const fl_tensor *t = FL_IN(c, slot);
        if (t && t->dtype == FL_BFLOAT16 && !t->is_rows) continue;
        FL_CHECK(fl__kctx_dense_f32(c, slot));
    }
    const fl_tensor *x = FL_IN(c, 0), *f = FL_IN(c, 1);
    const char *why = x->ndim != 4 || f->ndim != 4 ? "input and filter must be 4-D"
                                                   : conv_geo_make(c->op, x->shape, f->shape, g);
    if (why) {
        char xs[96], fs[96];
        fl_tensor_describe(x, xs, sizeof xs);
        fl_tensor_describe(f, fs, sizeof fs);
        return fl__err(FL_EINVAL, "%s: input '%s' %s, filter '%s' %s: %s", c->op->def->type, fl__kctx_var_name(c, 0, 0), xs,
                       fl__kctx_var_name(c, 1, 0), fs, why);
    }
    return FL_OK;
}

/* Output columns ow whose input column ow*s + off lies in [0, w): [*lo, *hi). */
static void valid_range(int64_t off, int64_t s, int64_t w, int64_t ow, int64_t *lo, int64_t *hi)
{
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = w - off <= 0 ? 0 : (w - off - 1) / s + 1;
    if (b > ow) b = ow;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* col[(c*kh + i)*kw + j][y*ow + x] = img[c][y*sh - ph + i*dh][x*sw - pw + j*dw] (0 outside),
 * rows of col `ld` apart; with `back` the transpose: img[...] += col[...] (col2im; img
 * zeroed by the caller). */
static void im2col(const conv_geo *g, float *restrict img, float *restrict col, int64_t ld, int back)
{
    for (int64_t c = 0; c < g->cg; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                float *restrict row = col + ((c * g->kh + i) * g->kw + j) * ld;
                const int64_t off = j * g->dw - g->pw, sw = g->sw; /* input column = x*sw + off */
                int64_t lo, hi;
                valid_range(off, sw, g->w, g->ow, &lo, &hi);
                for (int64_t y = 0; y < g->oh; y++) {
                    float *restrict r = row + y * g->ow;
                    const int64_t ih = y * g->sh - g->ph + i * g->dh;
                    if (ih < 0 || ih >= g->h) { /* a padding row */
                        if (!back) memset(r, 0, (size_t)g->ow * sizeof(float));
                        continue;
                    }
                    float *restrict in = img + (c * g->h + ih) * g->w;
                    if (back) {
                        if (sw == 1)
                            for (int64_t x = lo; x < hi; x++) in[x + off] += r[x];
                        else
                            for (int64_t x = lo; x < hi; x++) in[x * sw + off] += r[x];
                        continue;
                    }
                    for (int64_t x = 0; x < lo; x++) r[x] = 0.0f;
                    if (sw == 1) memcpy(r + lo, in + lo + off, (size_t)(hi - lo) * sizeof(float));
                    else
                        for (int64_t x = lo; x < hi; x++) r[x] = in[x * sw + off];
                    for (int64_t x = hi; x < g->ow; x++) r[x] = 0.0f;
                }
            }
}

/* 1x1 filter, stride 1, no padding: the image is its own column matrix. */
static int conv_direct(const conv_geo *g)
{
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* The oneDNN description of g for Input x and Filter f. */
static fl_conv_desc dnn_desc(const conv_geo *g, const fl_tensor *x, const fl_tensor *f)
{
    fl_conv_desc d;
    memset(&d, 0, sizeof d);
    d.n = g->n, d.c = g->c, d.h = g->h, d.w = g->w, d.m = g->m, d.kh = g->kh, d.kw = g->kw, d.oh = g->oh, d.ow = g->ow;
    d.sh = g->sh, d.sw = g->sw, d.ph = g->ph, d.pw = g->pw, d.dh = g->dh, d.dw = g->dw, d.g = g->g;
    d.x_type = x->dtype, d.w_type = f->dtype;
    return d;
}

/* The state's float32 buffer `slot` with room for n floats (grown as needed; what names the
 * contents in the out-of-memory message), or NULL with the message set. */
static float *wide_buf(fl_kctx *c, int slot, int64_t n, const char *what)
{
    fl__conv_state *st = fl__conv_state_get(c);
    if (!st) return NULL;
    if (st->wide_n[slot] < (size_t)n + 1) {
        float *nb = realloc(st->wide[slot], ((size_t)n + 1) * sizeof(float));
        if (!nb) {
            fl__err(FL_ENOMEM, "%s: cannot allocate %s", c->op->def->type, what);
            return NULL;
        }
        st->wide[slot] = nb;
        st->wide_n[slot] = (size_t)n + 1;
    }
    return st->wide[slot];
}

/* The data of Input, Filter, conv2d_grad's Output@GRAD or conv2d's ResidualData (slot 0 / 1 /
 * 2 / 3) as float32: a bfloat16 one widened into the state's buffer for the im2col path (and
 * the bias gradient). */
static float *f32_data(fl_kctx *c, int slot)
{
    fl_tensor *t = FL_IN(c, slot);
    if (t->dtype == FL_FLOAT32) return t->data;
    char what[160];
    snprintf(what, sizeof what, "the float32 copy of '%s'", fl__kctx_var_name(c, slot, 0));
    float *w = wide_buf(c, slot, t->numel, what);
    if (w) fl__cvt_bf16_to_f32(w, t->data, t->numel);
    return w;
}

/* The float32 result of a conv2d writing bfloat16 (out_dtype) on the im2col path, before
 * its rounding into the output: n floats in the state (wide[2], unused by the forward). */
static float *f32_out(fl_kctx *c, int64_t n)
{
    char what[160];
    snprintf(what, sizeof what, "the float32 output of '%s'", fl__kctx_var_name(c, 0, 0));
    return wide_buf(c, 2, n, what);
}

static int run_conv2d(fl_kctx *c)
{
    conv_geo g;
    FL_CHECK(conv_geo_rt(c, &g));
    fl_tensor *x = FL_IN(c, 0), *f = FL_IN(c, 1), *b = FL_IN(c, 2), *res = FL_IN(c, 3), *out = FL_OUT(c, 0);
    if (b && (b->dtype != FL_FLOAT32 || b->numel != g.m))
        return fl__err(FL_EINVAL, "conv2d: bias '%s' must be float32 with %lld elements", fl__kctx_var_name(c, 2, 0),
                       (long long)g.m);
    if (res && ((res->dtype != FL_FLOAT32 && res->dtype != FL_BFLOAT16) || res->is_rows || res->numel != g.n * g.m * g.ohw))
        return fl__err(FL_EINVAL, "conv2d: residual '%s' must be float32 or bfloat16 with the output's %lld elements",
                       fl__kctx_var_name(c, 3, 0), (long long)(g.n * g.m * g.ohw));
    const fl_dtype to = (fl_dtype)fl__attr_i(c->op, "out_dtype", FL_FLOAT32);
    if (to != FL_FLOAT32 && to != FL_BFLOAT16)
        return fl__err(FL_EINVAL, "conv2d: out_dtype %s is not supported (input '%s')", fl_dtype_name(to),
                       fl__kctx_var_name(c, 0, 0));
    int64_t os[4] = {g.n, g.m, g.oh, g.ow};
    FL_CHECK(fl__tensor_reshape_raw(out, to, 4, os));
    out->lod_n = 0;
    const float *bd = b ? (const float *)b->data : NULL;
    int act = fl__conv_act_code(fl__attr_s(c->op, "act", "")), direct = conv_direct(&g);
    int lib = fl__gemm_lib();
    if (lib < 0) return lib;
    if (lib == FL_GEMM_DNNL) {
        fl__conv_state *st = fl__conv_state_get(c);
        if (!st) return fl_last_status();
        fl_conv_desc d = dnn_desc(&g, x, f);
        d.act = act == ACT_RELU ? FL_ACT_RELU : act == ACT_TANH ? FL_ACT_TANH : act == ACT_SIGMOID ? FL_ACT_SIGMOID : 0;
        d.has_bias = bd != NULL, d.y_type = to;
        d.x_lay = x->layout, d.blocked_out = fl__layout_enabled(), d.sum = res != NULL, d.res_lay = res ? res->layout : 0;
        d.res_type = res ? res->dtype : FL_FLOAT32;
        FL_CHECK(fl__conv_filter_stamp(&st->dnn, f));
        if (res) FL_CHECK(fl__conv_fwd_sum(&st->dnn, &d, x->data, f->data, bd, res->data, out->data));
        else FL_CHECK(fl__conv_fwd(&st->dnn, &d, x->data, f->data, bd, out->data));
        return out->numel ? fl__tensor_set_layout(out, fl__conv_out_layout(st->dnn)) : FL_OK;
    }
    FL_CHECK(fl__tensor_to_plain(x));
    if (res) FL_CHECK(fl__tensor_to_plain(res));
    const float *fd = f32_data(c, 1), *xd = fd ? f32_data(c, 0) : NULL;
    float *yd = !xd ? NULL : to == FL_BFLOAT16 ? f32_out(c, out->numel) : out->data;
    const float *rd = !yd || !res ? NULL : f32_data(c, 3);
    if (!yd || (res && !rd)) return fl_last_status();
    /* nb images at a time when K is large: their column matrices side by side
     * [K, nb*Ho*Wo] (about 1 MB of scratch) make one larger sgemm, which amortises
     * OpenBLAS's packing (for small K, per-image products take its faster small-matrix
     * path).  The product prod [M/g, nb*Ho*Wo] stays in cache, and bias and activation
     * are applied on the way to the NCHW output, so the output is written once. */
    int64_t nb = direct || g.k < 64 ? 1 : 262144 / (g.k * g.ohw > 0 ? g.k * g.ohw : 1);
    nb = nb < 1 ? 1 : nb > g.n ? (g.n > 0 ? g.n : 1) : nb;
    float *col = fl__conv_scratch(c, (direct ? 0 : g.k * nb * g.ohw) + g.mg * nb * g.ohw);
    if (!col) return fl_last_status();
    float *prod = direct ? col : col + g.k * nb * g.ohw;
    const int64_t ld = nb * g.ohw;
    for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
        int64_t cnt = g.n - n0 < nb ? g.n - n0 : nb;
        for (int64_t gr = 0; gr < g.g; gr++) {
            const float *xg = xd + (n0 * g.c + gr * g.cg) * g.hw;
            for (int64_t j = 0; !direct && j < cnt; j++) im2col(&g, (float *)xg + j * g.c * g.hw, col + j * g.ohw, ld, 0);
            fl__sgemm(0, 0, g.mg, cnt * g.ohw, g.k, 1.0f, fd + gr * g.mg * g.k, g.k, direct ? xg : col, direct ? g.ohw : ld,
                      0.0f, prod, ld);
            for (int64_t j = 0; j < cnt; j++)
                for (int64_t m = 0; m < g.mg; m++) {
                    const float *restrict src = prod + m * ld + j * g.ohw;
                    float *restrict o = yd + ((n0 + j) * g.m + gr * g.mg + m) * g.ohw;
                    const float v = bd ? bd[gr * g.mg + m] : 0.0f;
                    if (res) {
                        const float *restrict r = rd + ((n0 + j) * g.m + gr * g.mg + m) * g.ohw;
                        for (int64_t i = 0; i < g.ohw; i++) o[i] = src[i] + v + r[i];
                        if (act == ACT_RELU) fl__relu(o, o, g.ohw);
                    } else if (act == ACT_RELU)
                        for (int64_t i = 0; i < g.ohw; i++) o[i] = src[i] + v > 0.0f ? src[i] + v : 0.0f;
                    else
                        for (int64_t i = 0; i < g.ohw; i++) o[i] = src[i] + v;
                    if (act == ACT_TANH || act == ACT_SIGMOID) act_apply(act, o, g.ohw);
                }
        }
    }
    if (to == FL_BFLOAT16) fl__cvt_f32_to_bf16(out->data, yd, out->numel);
    return FL_OK;
}

/* Bias@GRAD = dOut (plain, slot 2) summed per channel (when requested). */
static int bias_grad(fl_kctx *c, const conv_geo *g, fl_tensor *db)
{
    if (!db) return FL_OK;
    const float *dyd = f32_data(c, 2);
    if (!dyd) return fl_last_status();
    int64_t bs[1] = {g->m};
    FL_CHECK(fl__tensor_reshape_raw(db, FL_FLOAT32, 1, bs));
    float *bd = db->data;
    for (int64_t m = 0; m < g->m; m++) {
        double s = 0.0;
        for (int64_t n = 0; n < g->n; n++) s += fl__conv_lane_sum(dyd + (n * g->m + m) * g->ohw, g->ohw);
        bd[m] = (float)s;
    }
    return FL_OK;
}

/* Grad op: inputs Input, Filter, Output@GRAD (after the activation's gradient); outputs
 * Input@GRAD = col2im(W^T dOut), Filter@GRAD = sum over images of dOut col^T,
 * Bias@GRAD = dOut summed per channel; each only when requested. */
static int run_conv2d_grad(fl_kctx *c)
{
    conv_geo g;
    FL_CHECK(conv_geo_rt(c, &g));
    fl_tensor *dy = FL_IN(c, 2); /* float32, or bfloat16 (AMP: the normalisation's gradient, amp_bn.c) */
    if (!dy || dy->dtype != FL_BFLOAT16 || dy->is_rows) FL_CHECK(fl__kctx_dense_f32(c, 2));
    fl_tensor *x = FL_IN(c, 0), *f = FL_IN(c, 1);
    fl_tensor *dx = FL_OUT(c, 0), *df = FL_OUT(c, 1), *db = FL_OUT(c, 2);
    if (dy->numel != g.n * g.m * g.ohw)
        return fl__err(FL_EINVAL, "conv2d_grad: gradient '%s' has %lld elements, the output of '%s' has %lld",
                       fl__kctx_var_name(c, 2, 0), (long long)dy->numel, fl__kctx_var_name(c, 0, 0),
                       (long long)(g.n * g.m * g.ohw));
    if (db) FL_CHECK(fl__tensor_to_plain(dy));
    FL_CHECK(bias_grad(c, &g, db));
    int lib = fl__gemm_lib();
    if (lib < 0) return lib;
    if (lib == FL_GEMM_DNNL) {
        fl__conv_state *st = fl__conv_state_get(c);
        if (!st) return fl_last_status();
        fl_conv_desc d = dnn_desc(&g, x, f);
        if (dx) {
            FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, 4, x->shape));
            dx->lod_n = 0;
        }
        if (df) FL_CHECK(fl__tensor_reshape_raw(df, FL_FLOAT32, 4, f->shape));
        d.x_lay = x->layout, d.y_lay = dy->layout, d.blocked_out = fl__layout_enabled();
        d.dy_type = dy->dtype;
        FL_CHECK(fl__conv_bwd(&st->dnn, &d, x->data, dy->data, f->data, dx ? dx->data : NULL, df ? df->data : NULL));
        return dx && dx->numel ? fl__tensor_set_layout(dx, fl__conv_out_layout(st->dnn)) : FL_OK;
    }
    FL_CHECK(fl__tensor_to_plain(x));
    FL_CHECK(fl__tensor_to_plain(dy));
    const float *fd = f32_data(c, 1), *xd = fd ? f32_data(c, 0) : NULL, *dyd = xd ? f32_data(c, 2) : NULL;
    if (!dyd) return fl_last_status();
    int direct = conv_direct(&g);
    float *col = NULL, *dcol = NULL;
    if (!direct) {
        if (!(col = fl__conv_scratch(c, 2 * g.k * g.ohw))) return fl_last_status();
        dcol = col + g.k * g.ohw;
    }
    if (dx) {
        FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, 4, x->shape));
        if (!direct) memset(dx->data, 0, (size_t)dx->numel * sizeof(float));
        dx->lod_n = 0;
    }
    if (df) {
        FL_CHECK(fl__tensor_reshape_raw(df, FL_FLOAT32, 4, f->shape));
        memset(df->data, 0, (size_t)df->numel * sizeof(float));
    }
    for (int64_t n = 0; n < g.n && (dx || df); n++)
        for (int64_t gr = 0; gr < g.g; gr++) {
            float *xg = (float *)xd + (n * g.c + gr * g.cg) * g.hw;
            const float *og = dyd + (n * g.m + gr * g.mg) * g.ohw;
            if (df) {
                if (!direct) im2col(&g, xg, col, g.ohw, 0);
                fl__sgemm(0, 1, g.mg, g.k, g.ohw, 1.0f, og, g.ohw, direct ? xg : col, g.ohw, 1.0f,
                          (float *)df->data + gr * g.mg * g.k, g.k);
            }
            if (dx) {
                float *dxg = (float *)dx->data + (n * g.c + gr * g.cg) * g.hw;
                fl__sgemm(1, 0, g.k, g.ohw, g.mg, 1.0f, fd + gr * g.mg * g.k, g.k, og, g.ohw, 0.0f, direct ? dxg : dcol,
                          g.ohw);
                if (!direct) im2col(&g, dxg, dcol, g.ohw, 1);
            }
        }
    return FL_OK;
}

static int grad_conv2d(fl_op *op, fl_grad_ctx *g)
{
    fl_prog *p = op->prog;
    fl_var *out = op->out[0].vars[0], *dz = fl__grad_of(g, out);
    if (!dz) return FL_OK;
    fl_var *x = op->in[0].vars[0], *w = op->in[1].vars[0], *b = op->in[2].n ? op->in[2].vars[0] : NULL;
    if (op->in[3].n)
        return fl__op_error(op, "input '%s': a convolution with ResidualData (fused for inference) has no gradient",
                            x->name);
    if (fl__attr_i(op, "out_dtype", FL_FLOAT32) != FL_FLOAT32)
        return fl__op_error(op, "input '%s': a convolution writing bfloat16 (out_dtype, set for inference) has no gradient",
                            x->name);
    fl_var *gv[3] = {fl__grad_for(g, x), fl__grad_for(g, w), b ? fl__grad_for(g, b) : NULL};
    static const char *const names[3] = {"Input@GRAD", "Filter@GRAD", "Bias@GRAD"};
    fl_io o[3];
    int no = 0;
    for (int i = 0; i < 3; i++)
        if (gv[i]) o[no++] = (fl_io){names[i], &gv[i], 1};
    if (!no) return FL_OK;
    int a = fl__conv_act_code(fl__attr_s(op, "act", ""));
    if (a != ACT_NONE) { /* dOut through the fused activation first, as fc does */
        fl_var *dpre = fl__tmp_var(p, out->name, FL_FLOAT32, out->ndim, out->shape);
        if (!dpre) return fl_prog_status(p);
        fl_io ai[2] = {FL_IO1("Out", out), FL_IO1("Out@GRAD", dz)};
        fl_io ao = FL_IO1("X@GRAD", dpre);
        const char *t = a == ACT_RELU ? "relu_grad" : a == ACT_TANH ? "tanh_grad" : "sigmoid_grad";
        if (!fl__op_append(p, t, ai, 2, &ao, 1)) return fl_prog_status(p);
        dz = dpre;
    }
    fl_io in[3] = {FL_IO1("Input", x), FL_IO1("Filter", w), FL_IO1("Output@GRAD", dz)};
    return fl__grad_append(op, "conv2d_grad", in, 3, o, no);
}

static const fl_op_def def_conv2d = {"conv2d",
                                     {"Input", "Filter", "Bias", "ResidualData"},
                                     {"Output"},
                                     infer_conv2d,
                                     run_conv2d,
                                     grad_conv2d,
                                     fl__conv_state_free,
                                     FL_OPDEF_READS_INPUTS};
static const fl_op_def def_conv2d_grad = {"conv2d_grad",
                                          {"Input", "Filter", "Output@GRAD"},
                                          {"Input@GRAD", "Filter@GRAD", "Bias@GRAD"},
                                          fl__infer_nop,
                                          run_conv2d_grad,
                                          NULL,
                                          fl__conv_state_free};

fl_var *fl_layer_conv2d(fl_var *input, int64_t num_filters, int filter_h, int filter_w, const char *act,
                        const fl_conv2d_attr *attr)
{
    fl_prog *p = fl__prog_of(&input, 1);
    if (!p || p->status != FL_OK) return NULL;
    fl_conv2d_attr none;
    memset(&none, 0, sizeof none);
    if (!attr) attr = &none;
    char xs[96];
    fl__shape_str(input, xs, sizeof xs);
    int64_t s[2], pd[2] = {attr->padding[0], attr->padding[1]}, d[2], g = attr->groups ? attr->groups : 1;
    for (int i = 0; i < 2; i++) {
        s[i] = attr->stride[i] ? attr->stride[i] : 1;
        d[i] = attr->dilation[i] ? attr->dilation[i] : 1;
    }
    int a = fl__conv_act_code(act);
    const char *bad = NULL;
    if (input->ndim != 4) bad = "must be 4-D NCHW [N, C, H, W]";
    else if (input->dtype != FL_FLOAT32) bad = "must be float32";
    else if (input->shape[1] <= 0) bad = "needs a known channel count (dim 1)";
    else if (num_filters <= 0 || filter_h <= 0 || filter_w <= 0) bad = "needs num_filters and filter sizes > 0";
    else if (s[0] < 1 || s[1] < 1 || d[0] < 1 || d[1] < 1 || pd[0] < 0 || pd[1] < 0 || g < 1)
        bad = "needs stride, dilation, groups >= 1 and padding >= 0";
    else if (input->shape[1] % g || num_filters % g) bad = "has channels or num_filters not divisible by groups";
    else if (a < 0) bad = "got an unknown activation (expected relu, tanh, sigmoid, softmax, softsign or NULL)";
    if (bad) {
        fl__prog_error(p, FL_EINVAL, "conv2d: input '%s' %s %s (num_filters %lld, filter %dx%d, groups %lld, act %s)",
                       input->name, xs, bad, (long long)num_filters, filter_h, filter_w, (long long)g, act ? act : "NULL");
        return NULL;
    }
    int64_t C = input->shape[1], fs[4] = {num_filters, C / g, filter_h, filter_w};
    char base[128], nm[192];
    fl__unique_name(p, "conv2d", base, sizeof base);
    if (attr->filter.name) snprintf(nm, sizeof nm, "%s", attr->filter.name);
    else snprintf(nm, sizeof nm, "%s.w_0", base);
    fl_var *old = fl_prog_var(p, nm);
    if (old && (old->ndim != 4 || memcmp(old->shape, fs, sizeof fs))) {
        char ws[96];
        fl__shape_str(old, ws, sizeof ws);
        fl__prog_error(p, FL_EINVAL,
                       "conv2d: shared filter '%s' is %s but input '%s' %s with groups %lld needs "
                       "[%lld, %lld, %d, %d]",
                       nm, ws, input->name, xs, (long long)g, (long long)num_filters, (long long)(C / g), filter_h,
                       filter_w);
        return NULL;
    }
    double std = sqrt(2.0 / (double)(filter_h * filter_w * C)); /* Paddle: (2 / (kh*kw*C))^0.5 */
    fl_var *w = fl__param_create(p, nm, 4, fs, &attr->filter, fl_init_normal(0.0f, (float)std), fs[1] * filter_h * filter_w,
                                 num_filters * filter_h * filter_w);
    if (!w) return NULL;
    fl_var *b = NULL;
    if (!attr->no_bias) {
        if (attr->bias.name) snprintf(nm, sizeof nm, "%s", attr->bias.name);
        else snprintf(nm, sizeof nm, "%s.b_0", base);
        int64_t bs[1] = {num_filters};
        if (!(b = fl__param_create(p, nm, 1, bs, &attr->bias, fl_init_constant(0.0f), 0, 0))) return NULL;
    }
    int64_t os[4] = {input->shape[0], num_filters, -1, -1};
    fl_var *out = fl__tmp_var(p, base, FL_FLOAT32, 4, os);
    if (!out) return NULL;
    fl_io ins[3] = {FL_IO1("Input", input), FL_IO1("Filter", w), {"Bias", &b, b ? 1 : 0}};
    fl_io o = FL_IO1("Output", out);
    fl_op *op = fl__op_new(p, "conv2d", ins, 3, &o, 1);
    if (!op || fl__attr_set_ints(op, "strides", s, 2) || fl__attr_set_ints(op, "paddings", pd, 2) ||
        fl__attr_set_ints(op, "dilations", d, 2) || fl__attr_set_i(op, "groups", g) ||
        fl__attr_set_s(op, "data_format", "NCHW") || fl__attr_set_s(op, "act", a <= ACT_SIGMOID && act ? act : "") ||
        fl__op_finish(op))
        return NULL;
    return a > ACT_SIGMOID ? fl__conv_post_act(out, a) : out;
}

const fl_op_def *const fl__ops_conv[] = {&def_conv2d,
                                         &def_conv2d_grad,
                                         &fl__def_pool2d,
                                         &fl__def_pool2d_grad,
                                         &fl__def_batch_norm,
                                         &fl__def_batch_norm_grad,
                                         &fl__def_fused_bn_add_act,
                                         &fl__def_fused_bn_add_act_grad,
                                         &fl__def_conv_bn_fold,
                                         NULL};
