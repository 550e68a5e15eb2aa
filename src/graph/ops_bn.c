/*
 * ops_bn.c - batch_norm (with a fused relu) and its gradient and layer builder, following
 * Paddle's fluid op (NCHW); part of the "conv" op group (listed in ops_conv.c's
 * fl__ops_conv).  The per-channel sums run in float lanes the compiler vectorises, added
 * up in double.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../tensor/half.h"
#include "ops_bn.h"
#include "ops_bn_bf16.h"
#include "ops_conv.h"

enum { LANES = 16 };

/* Whether Y at q lets the gradient through (Y > 0), from yf (float32) or yh (bfloat16). */
#define BN_YPOS(q) (yb ? fl__bf16_to_f32(yh[q]) > 0.0f : yf[q] > 0.0f)

/* Sum of (r[i] - m)^2 in LANES float lanes (vectorised; one running sum would be a chain
 * of dependent adds, four cycles each), added up in double. */
static double lane_sq_dev(const float *restrict r, int64_t n, float m)
{
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += (r[i + l] - m) * (r[i + l] - m);
    double s = 0.0;
    for (; i < n; i++) s += (double)((r[i] - m) * (r[i] - m));
    for (int l = 0; l < LANES; l++) s += acc[l];
    return s;
}

/* *sb += sum g, *ss += sum g * (r - m) over n elements in LANES lanes, where g is dy, or
 * dy masked by y > 0 when y is given (relu fused; float32, or bfloat16 when yb). */
static inline __attribute__((always_inline)) void lane_grad_sums(const float *restrict r, const float *restrict dy,
                                                                 const void *y, const int yb, int64_t n, float m,
                                                                 double *sb, double *ss)
{
    const float *restrict yf = y && !yb ? y : NULL;
    const uint16_t *restrict yh = y && yb ? y : NULL;
    float ab[LANES] = {0}, as[LANES] = {0};
    int64_t i = 0;
    if (y)
        for (; i + LANES <= n; i += LANES)
            for (int l = 0; l < LANES; l++) {
                const float g = BN_YPOS(i + l) ? dy[i + l] : 0.0f;
                ab[l] += g;
                as[l] += g * (r[i + l] - m);
            }
    else
        for (; i + LANES <= n; i += LANES)
            for (int l = 0; l < LANES; l++) {
                ab[l] += dy[i + l];
                as[l] += dy[i + l] * (r[i + l] - m);
            }
    double b = 0.0, s = 0.0;
    for (; i < n; i++) {
        const float g = !y || BN_YPOS(i) ? dy[i] : 0.0f;
        b += g;
        s += (double)(g * (r[i] - m));
    }
    for (int l = 0; l < LANES; l++) b += ab[l], s += as[l];
    *sb += b;
    *ss += s;
}

/* Paddle's batch_norm over axis 1 of X [N, C, ...] (rank 2 to 5; statistics over N and the
 * trailing dims).  Inputs X, Scale, Bias, Mean, Variance (the moving statistics); outputs
 * Y, MeanOut, VarianceOut (the same variables as Mean / Variance: updated in place),
 * SavedMean, SavedVariance (the batch mean and the inverse std 1/sqrt(var + eps), for the
 * gradient).  Training: batch statistics, variance biased (divided by N*S) as Paddle, and
 * moving = moving*momentum + batch*(1 - momentum).  is_test or use_global_stats: the
 * moving statistics normalise, nothing is updated, Saved* hold them (so the gradient then
 * is the one of a fixed affine map).  Attributes momentum, epsilon, is_test,
 * use_global_stats, data_layout, and Paddle's fuse_with_relu: Y = relu(normalised X) in the
 * same pass (fl_layer_batch_norm(..., "relu") sets it instead of appending a relu op: one
 * pass over the activations less each way, and no pre-activation tensor). */
static int infer_batch_norm(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    FL_CHECK(fl__conv_need_nchw(op, "data_layout", x));
    char xs[96];
    fl__shape_str(x, xs, sizeof xs);
    if (x->ndim < 2 || x->ndim > 5)
        return fl__op_error(op, "input '%s' must have rank 2 to 5 ([N, C] or NCHW), is %s", x->name, xs);
    int64_t C = x->shape[1];
    for (int s = 1; s < 5; s++) {
        fl_var *v = op->in[s].vars[0];
        FL_CHECK(fl__op_need_f32(op, v));
        if (C > 0 && fl__dims_prod(v->shape, 0, v->ndim) != C)
            return fl__op_error(op, "%s '%s' must have %lld elements (channels of input '%s' %s)", op->def->in_names[s],
                                v->name, (long long)C, x->name, xs);
    }
    double eps = fl__attr_f(op, "epsilon", 1e-5), mom = fl__attr_f(op, "momentum", 0.9);
    if (!((float)eps >= 0.0f && (float)eps <= 0.001f) || !(mom >= 0.0 && mom <= 1.0)) /* Paddle: float compare */
        return fl__op_error(op, "epsilon %g must be in [0, 0.001] and momentum %g in [0, 1] (input '%s')", eps, mom,
                            x->name);
    fl__var_set_shape(op->out[0].vars[0], fl__bn_out_dtype(op), x->ndim, x->shape); /* AMP: bf16 (amp_bn.c) */
    op->out[0].vars[0]->lod_level = x->lod_level;
    for (int s = 1; s < 5; s++) {
        fl_var *v = op->out[s].vars[0];
        if (!v->persistable) fl__var_set_shape(v, FL_FLOAT32, 1, &C);
    }
    return FL_OK;
}

int fl__bn_dims(fl_kctx *c, int64_t *n, int64_t *ch, int64_t *s, int nparam)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *x = FL_IN(c, 0);
    if (x->ndim < 2 || x->ndim > 5)
        return fl__err(FL_EINVAL, "%s: input '%s' must have rank 2 to 5, has %d", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0), x->ndim);
    *n = x->shape[0], *ch = x->shape[1], *s = fl__dims_prod(x->shape, 2, x->ndim);
    for (int k = 1; k <= nparam; k++) {
        FL_CHECK(fl__kctx_dense_f32(c, k));
        if (FL_IN(c, k)->numel != *ch)
            return fl__err(FL_EINVAL, "%s: '%s' has %lld values, input '%s' has %lld channels", c->op->def->type,
                           fl__kctx_var_name(c, k, 0), (long long)FL_IN(c, k)->numel, fl__kctx_var_name(c, 0, 0),
                           (long long)*ch);
    }
    return FL_OK;
}

/* The kernels, one for both dtypes: Y written in float32 or bfloat16 (yb: AMP, amp_bn.c), Z
 * read in either, Y read in either for the fused relu's mask, and X@GRAD written in either
 * (dxb: AMP, for a bfloat16 convolution's gradient), each a compile-time constant of the
 * always_inline functions below, instantiated per combination (FL_CLONE_TARGETS).  A
 * bfloat16 value is the float32 one rounded to nearest even (fl__f32_to_bf16, as the cast op
 * and oneDNN's reorder round), so the values before the rounding are the float32 kernel's to
 * the bit.  X in channel blocks of B (nChw16c / nChw8c, layout.h: element (n, c, s) at
 * ((n * C/B + c/B) * S + s) * B + c%B, the B channels of a block the vector lanes) or plain
 * NCHW (B = 1, a channel at a time); channel blocks [cb0, cb1) each on their own, so a split
 * over the threads gives the same values. */
enum { CHUNK = FL_BN_CHUNK, MAXB = FL_BN_MAXB };

typedef struct {
    int64_t N, C, S;
    const float *x;
    void *y; /* float32, or bfloat16 (the kernel's yb) */
    const float *scale, *bias, *mean_in, *var_in;
    float *mout, *vout, *smd, *svd;
    float eps, mom;
    int global, relu;
    const void *z; /* fused_bn_add_activation: added before the relu (NULL: none); bfloat16 when zb */
    int zb;
} bn_fwd_job;

/* Y = act(X * a + b (+ Z)) over the S positions of one image's channel block at offset at;
 * zk: no Z (0), float32 Z (1), bfloat16 Z (2). */
static inline __attribute__((always_inline)) void bn_norm_rows(const bn_fwd_job *j, int64_t at, const float *a,
                                                               const float *b, const int B, const int zk, const int relu,
                                                               const int yb)
{
    const float *restrict r = j->x + at;
    const float *restrict zf = zk == 1 ? (const float *)j->z + at : NULL;
    const uint16_t *restrict zh = zk == 2 ? (const uint16_t *)j->z + at : NULL;
    float *restrict yf = yb ? NULL : (float *)j->y + at;
    uint16_t *restrict yh = yb ? (uint16_t *)j->y + at : NULL;
    for (int64_t i = 0; i < j->S; i++)
        for (int l = 0; l < B; l++) {
            float v = r[i * B + l] * a[l] + b[l];
            if (zk == 1) v += zf[i * B + l];
            if (zk == 2) v += fl__bf16_to_f32(zh[i * B + l]);
            if (relu) v = v > 0.0f ? v : 0.0f;
            if (yb) yh[i * B + l] = fl__f32_to_bf16(v);
            else yf[i * B + l] = v;
        }
}

/* batch_norm over channel blocks [cb0, cb1): the statistics (blocked: fl__bn_blk_stats,
 * ops_bn.h, in one pass; plain: the sum, then the squares around the mean), then the
 * normalising pass. */
static inline __attribute__((always_inline)) void bn_fwd_blk(const bn_fwd_job *j, int64_t cb0, int64_t cb1, const int B,
                                                             const int yb)
{
    const int64_t N = j->N, C = j->C, S = j->S, CB = C / B;
    const double M = (double)(N * S);
    for (int64_t cb = cb0; cb < cb1; cb++) {
        const int64_t c0 = cb * B;
        float a[MAXB], b[MAXB];
        double bm[MAXB], bv[MAXB];
        if (!j->global && B > 1) {
            fl__bn_blk_stats(j->x, N, CB, cb, S, B, bm, bv);
        } else if (!j->global) {
            double s1 = 0.0, s2 = 0.0;
            for (int64_t n = 0; n < N; n++) s1 += fl__conv_lane_sum(j->x + (n * C + cb) * S, S);
            bm[0] = s1 / M;
            for (int64_t n = 0; n < N; n++) s2 += lane_sq_dev(j->x + (n * C + cb) * S, S, (float)bm[0]);
            bv[0] = s2 / M;
        }
        for (int l = 0; l < B; l++) {
            const int64_t ch = c0 + l;
            const double mean = j->global ? j->mean_in[ch] : bm[l], var = j->global ? j->var_in[ch] : bv[l];
            const float inv = (float)(1.0 / sqrt(var + j->eps));
            j->smd[ch] = (float)mean;
            j->svd[ch] = inv;
            j->mout[ch] = j->global ? j->mean_in[ch] : j->mean_in[ch] * j->mom + (float)mean * (1.0f - j->mom);
            j->vout[ch] = j->global ? j->var_in[ch] : j->var_in[ch] * j->mom + (float)var * (1.0f - j->mom);
            a[l] = j->scale[ch] * inv, b[l] = j->bias[ch] - (float)mean * a[l];
        }
        for (int64_t n = 0; n < N; n++) { /* one loop per case, each without tests inside */
            const int64_t at = (n * CB + cb) * S * B;
            if (j->z && j->zb) bn_norm_rows(j, at, a, b, B, 2, 1, yb);
            else if (j->z) bn_norm_rows(j, at, a, b, B, 1, 1, yb);
            else if (j->relu) bn_norm_rows(j, at, a, b, B, 0, 1, yb);
            else bn_norm_rows(j, at, a, b, B, 0, 0, yb);
        }
    }
}
#define BN_FWD_KERNEL(NAME, B, YB) \
    static FL_CLONE_TARGETS void NAME(void *arg, int64_t lo, int64_t hi) { bn_fwd_blk(arg, lo, hi, B, YB); }
BN_FWD_KERNEL(bn_fwd16, 16, 0)
BN_FWD_KERNEL(bn_fwd8, 8, 0)
BN_FWD_KERNEL(bn_fwd1, 1, 0)
BN_FWD_KERNEL(bn_fwd16_h, 16, 1)
BN_FWD_KERNEL(bn_fwd8_h, 8, 1)
BN_FWD_KERNEL(bn_fwd1_h, 1, 1)
#undef BN_FWD_KERNEL
/* [Y in bfloat16][16, 8 or 1 lanes] */
static const fl__range_fn bn_fwd_kernels[2][3] = {{bn_fwd16, bn_fwd8, bn_fwd1}, {bn_fwd16_h, bn_fwd8_h, bn_fwd1_h}};

/* The lanes of X's layout: 16 or 8 (channel blocks), else 1 (plain NCHW); and its row of the
 * kernel tables. */
static int bn_lanes(const fl_tensor *x)
{
    const int b = fl__layout_block(x->layout);
    return b == 16 || b == 8 ? b : 1;
}
static int bn_kernel_col(int B) { return B == 16 ? 0 : B == 8 ? 1 : 2; }

/* Input slot `slot` (fused_bn_add_activation's Z, the fused relu's Y): float32 or bfloat16
 * with X's shape, converted to X's layout (or X to plain when it is a persistable, which is
 * never converted). */
static int bn_like_x(fl_kctx *c, int slot, fl_tensor *x, const char *what)
{
    fl_tensor *t = FL_IN(c, slot);
    if (t && t->dtype == FL_FLOAT32) FL_CHECK(fl__kctx_dense_f32(c, slot));
    if (!t || t->is_rows || (t->dtype != FL_FLOAT32 && t->dtype != FL_BFLOAT16) || t->ndim != x->ndim ||
        memcmp(t->shape, x->shape, (size_t)x->ndim * sizeof *x->shape)) {
        char ts[96] = "(none)", xs[96];
        if (t) fl_tensor_describe(t, ts, sizeof ts);
        fl_tensor_describe(x, xs, sizeof xs);
        return fl__err(FL_EINVAL, "%s: %s '%s' %s must be float32 or bfloat16 with the shape of X '%s' %s",
                       c->op->def->type, what, t ? fl__kctx_var_name(c, slot, 0) : "", ts, fl__kctx_var_name(c, 0, 0), xs);
    }
    if (t->layout == x->layout) return FL_OK;
    if (c->op->in[slot].vars[0]->persistable) return fl__tensor_to_plain(x);
    return fl__tensor_to_layout(t, x->layout);
}

fl_dtype fl__bn_out_dtype(const fl_op *op)
{
    return fl__attr_i(op, "out_dtype", FL_FLOAT32) == FL_BFLOAT16 ? FL_BFLOAT16 : FL_FLOAT32;
}

static int run_batch_norm(fl_kctx *c)
{
    int64_t N, C, S;
    FL_CHECK(fl__bn_dims(c, &N, &C, &S, 4));
    fl_tensor *x = FL_IN(c, 0), *y = FL_OUT(c, 0), *z = NULL;
    const float *scale = FL_IN(c, 1)->data, *bias = FL_IN(c, 2)->data;
    const float *mean_in = FL_IN(c, 3)->data, *var_in = FL_IN(c, 4)->data;
    float eps = (float)fl__attr_f(c->op, "epsilon", 1e-5), mom = (float)fl__attr_f(c->op, "momentum", 0.9);
    int global = fl__attr_i(c->op, "is_test", 0) || fl__attr_i(c->op, "use_global_stats", 0);
    int relu = fl__attr_i(c->op, "fuse_with_relu", 0) != 0;
    if (c->op->def == &fl__def_fused_bn_add_act) { /* Z, added before the relu, read in X's layout */
        FL_CHECK(bn_like_x(c, 5, x, "Z"));
        z = FL_IN(c, 5);
        relu = 1;
    }
    if (!global && N * S == 0)
        return fl__err(FL_EINVAL, "%s: input '%s' is empty: no batch statistics", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0));
    const int yb = fl__bn_out_dtype(c->op) == FL_BFLOAT16; /* AMP: Y for a bfloat16 convolution */
    FL_CHECK(fl__tensor_reshape_raw(y, yb ? FL_BFLOAT16 : FL_FLOAT32, x->ndim, x->shape));
    FL_CHECK(fl__tensor_share_lod(y, x));
    fl_tensor *mo = FL_OUT(c, 1), *vo = FL_OUT(c, 2), *sm = FL_OUT(c, 3), *sv = FL_OUT(c, 4);
    /* MeanOut / VarianceOut are normally the input tensors themselves: same shape, no
     * reallocation, updated element by element below */
    FL_CHECK(fl__tensor_reshape_raw(mo, FL_FLOAT32, FL_IN(c, 3)->ndim, FL_IN(c, 3)->shape));
    FL_CHECK(fl__tensor_reshape_raw(vo, FL_FLOAT32, FL_IN(c, 4)->ndim, FL_IN(c, 4)->shape));
    FL_CHECK(fl__tensor_reshape_raw(sm, FL_FLOAT32, 1, &C));
    FL_CHECK(fl__tensor_reshape_raw(sv, FL_FLOAT32, 1, &C));
    bn_fwd_job j = {N,
                    C,
                    S,
                    x->data,
                    y->data,
                    scale,
                    bias,
                    mean_in,
                    var_in,
                    mo->data,
                    vo->data,
                    sm->data,
                    sv->data,
                    eps,
                    mom,
                    global,
                    relu,
                    z ? z->data : NULL,
                    z && z->dtype == FL_BFLOAT16};
    /* channels (channel blocks) split over the threads: each one's values do not depend on the split */
    const int B = bn_lanes(x);
    const int64_t bytes = N * S * (8 + (yb ? 2 : 4) + (z ? (j.zb ? 2 : 4) : 0)); /* per channel: X twice, Y, Z */
    fl__parallel_for(C / B, 1, bytes * B, bn_fwd_kernels[yb][bn_kernel_col(B)], &j);
    return fl__tensor_set_layout(y, x->layout);
}

/* batch_norm_grad over channel blocks [cb0, cb1). */
typedef struct {
    int64_t N, C, S;
    const float *x, *dy;
    const void *y; /* the fused relu's Y (NULL: none): float32, or bfloat16 (the kernel's yb) */
    const float *scale, *mean, *inv;
    void *dx; /* float32, or bfloat16 (the kernel's dxb) */
    float *ds, *db;
    int global;
    float *dz; /* fused_bn_add_activation_grad: Z@GRAD, dy masked by Y > 0 (NULL: not asked) */
} bn_grad_job;

/* dX over one image's channel block: dX = k * (g - kb - (X - mean) * iv * ks), g dy masked by
 * Y > 0 (yk 1: float32 Y, 2: bfloat16) or as it is (yk 0). */
static inline __attribute__((always_inline)) void bn_grad_rows(const bn_grad_job *j, int64_t at, const float *g0,
                                                               const float *m, const float *iv, const float *k,
                                                               const float *kb, const float *ks, const int B, const int yk,
                                                               const int dxb)
{
    const int yb = yk == 2;
    const float *restrict r = j->x + at, *restrict g = g0 + at;
    const float *restrict yf = yk == 1 ? (const float *)j->y + at : NULL;
    const uint16_t *restrict yh = yk == 2 ? (const uint16_t *)j->y + at : NULL;
    float *restrict of = dxb ? NULL : (float *)j->dx + at;
    uint16_t *restrict oh = dxb ? (uint16_t *)j->dx + at : NULL;
    for (int64_t i = 0; i < j->S; i++)
        for (int l = 0; l < B; l++) {
            const int64_t q = i * B + l;
            const float gv = yk == 0 || BN_YPOS(q) ? g[q] : 0.0f;
            const float v = k[l] * (gv - kb[l] - (r[q] - m[l]) * iv[l] * ks[l]);
            if (dxb) oh[q] = fl__f32_to_bf16(v);
            else of[q] = v;
        }
}

/* The sums over one image's block at CHUNK positions [s0, e), in one GCC vector of B float
 * lanes (as ops_bn.h's BN_SHIFT_SUMS: the accumulators stay in registers whatever the dtype
 * of Y, where loops over lane arrays left a bfloat16 Y's to the stack), then added into sb and
 * ss in double: g = dy masked by Y > 0 (yk 1: float32 Y, 2: bfloat16; 0: dy as it is), also
 * written to dz with wdz. */
#define BN_GRAD_VSUMS(NAME, B)                                                                                      \
    static inline __attribute__((always_inline)) void NAME(                                                         \
        const float *restrict r, const float *restrict g, const void *y, float *restrict dz, int64_t s0, int64_t e, \
        const float *m, const int yk, const int wdz, double *sb, double *ss)                                        \
    {                                                                                                               \
        typedef float vf __attribute__((vector_size((B) * sizeof(float))));                                         \
        typedef int32_t vi __attribute__((vector_size((B) * sizeof(float))));                                       \
        typedef uint32_t vu __attribute__((vector_size((B) * sizeof(float))));                                      \
        typedef uint16_t vh __attribute__((vector_size((B) * sizeof(uint16_t))));                                   \
        const vf zero = {0};                                                                                        \
        vf mv, ab = {0}, as = {0};                                                                                  \
        memcpy(&mv, m, sizeof mv);                                                                                  \
        for (int64_t i = s0; i < e; i++) {                                                                          \
            vf gv, x, yv;                                                                                           \
            memcpy(&gv, g + i * (B), sizeof gv);                                                                    \
            memcpy(&x, r + i * (B), sizeof x);                                                                      \
            if (yk == 2) {                                                                                          \
                vh hv;                                                                                              \
                memcpy(&hv, (const uint16_t *)y + i * (B), sizeof hv);                                              \
                const vu w = __builtin_convertvector(hv, vu) << 16;                                                 \
                memcpy(&yv, &w, sizeof yv);                                                                         \
            } else if (yk == 1) {                                                                                   \
                memcpy(&yv, (const float *)y + i * (B), sizeof yv);                                                 \
            }                                                                                                       \
            if (yk) gv = (vf)((vi)gv & (yv > zero)); /* dy where Y > 0, else +0 */                                  \
            if (wdz) memcpy(dz + i * (B), &gv, sizeof gv);                                                          \
            ab += gv;                                                                                               \
            as += gv * (x - mv);                                                                                    \
        }                                                                                                           \
        float pb[B], ps[B];                                                                                         \
        memcpy(pb, &ab, sizeof pb);                                                                                 \
        memcpy(ps, &as, sizeof ps);                                                                                 \
        for (int l = 0; l < (B); l++) sb[l] += pb[l], ss[l] += ps[l];                                               \
    }
BN_GRAD_VSUMS(bn_grad_vsums16, 16)
BN_GRAD_VSUMS(bn_grad_vsums8, 8)
#undef BN_GRAD_VSUMS

/* batch_norm_grad over channel blocks [cb0, cb1): the sums of dy (masked) and of
 * dy * (X - mean), writing Z@GRAD on the way (blocked: per CHUNK positions in float lanes;
 * plain: lane_grad_sums after Z@GRAD), then dX. */
static inline __attribute__((always_inline)) void bn_grad_blk(const bn_grad_job *j, int64_t cb0, int64_t cb1, const int B,
                                                              const int yb, const int dxb)
{
    const int64_t N = j->N, C = j->C, S = j->S, CB = C / B;
    const double M = (double)(N * S);
    for (int64_t cb = cb0; cb < cb1; cb++) {
        const int64_t c0 = cb * B;
        float m[MAXB], iv[MAXB], k[MAXB], kb[MAXB], ks[MAXB];
        double sb[MAXB] = {0}, ss[MAXB] = {0};
        for (int l = 0; l < B; l++) m[l] = j->mean[c0 + l], iv[l] = j->inv[c0 + l];
        for (int64_t n = 0; n < N; n++) {
            const int64_t at = (n * CB + cb) * S * B;
            const float *restrict r = j->x + at, *restrict g = j->dy + at;
            const float *restrict yf = j->y && !yb ? (const float *)j->y + at : NULL;
            const uint16_t *restrict yh = j->y && yb ? (const uint16_t *)j->y + at : NULL;
            float *restrict dz = j->dz ? j->dz + at : NULL;
            if (B == 1 && dz) { /* Z@GRAD is the masked dy, which then stands for dy and Y */
                for (int64_t i = 0; i < S; i++) dz[i] = BN_YPOS(i) ? g[i] : 0.0f;
                lane_grad_sums(r, dz, NULL, yb, S, m[0], &sb[0], &ss[0]);
            } else if (B == 1) {
                lane_grad_sums(r, g, j->y ? (yb ? (const void *)yh : (const void *)yf) : NULL, yb, S, m[0], &sb[0], &ss[0]);
            } else {
                const void *yr = yb ? (const void *)yh : (const void *)yf;
                for (int64_t s0 = 0; s0 < S; s0 += CHUNK) { /* one call per case, the cases constants */
                    const int64_t e = S - s0 < CHUNK ? S : s0 + CHUNK;
#define BN_VSUMS(YK, WDZ)                                                      \
    do {                                                                       \
        if (B == 16) bn_grad_vsums16(r, g, yr, dz, s0, e, m, YK, WDZ, sb, ss); \
        else bn_grad_vsums8(r, g, yr, dz, s0, e, m, YK, WDZ, sb, ss);          \
    } while (0)
                    if (j->y && dz) BN_VSUMS(yb ? 2 : 1, 1);
                    else if (j->y) BN_VSUMS(yb ? 2 : 1, 0);
                    else BN_VSUMS(0, 0);
#undef BN_VSUMS
                }
            }
        }
        fl__bn_grad_coefs(B, c0, M, j->global, j->scale, iv, sb, ss, j->ds, j->db, k, kb, ks);
        if (!j->dx) continue;
        for (int64_t n = 0; n < N; n++) { /* with Z@GRAD written above, it is dy masked already */
            const int64_t at = (n * CB + cb) * S * B;
            if (j->dz) bn_grad_rows(j, at, j->dz, m, iv, k, kb, ks, B, 0, dxb);
            else if (j->y) bn_grad_rows(j, at, j->dy, m, iv, k, kb, ks, B, yb ? 2 : 1, dxb);
            else bn_grad_rows(j, at, j->dy, m, iv, k, kb, ks, B, 0, dxb);
        }
    }
}
#define BN_GRAD_KERNEL(NAME, B, YB, DXB) \
    static FL_CLONE_TARGETS void NAME(void *arg, int64_t lo, int64_t hi) { bn_grad_blk(arg, lo, hi, B, YB, DXB); }
BN_GRAD_KERNEL(bn_grad16, 16, 0, 0)
BN_GRAD_KERNEL(bn_grad8, 8, 0, 0)
BN_GRAD_KERNEL(bn_grad1, 1, 0, 0)
BN_GRAD_KERNEL(bn_grad16_y, 16, 1, 0)
BN_GRAD_KERNEL(bn_grad8_y, 8, 1, 0)
BN_GRAD_KERNEL(bn_grad1_y, 1, 1, 0)
BN_GRAD_KERNEL(bn_grad16_x, 16, 0, 1)
BN_GRAD_KERNEL(bn_grad8_x, 8, 0, 1)
BN_GRAD_KERNEL(bn_grad1_x, 1, 0, 1)
BN_GRAD_KERNEL(bn_grad16_yx, 16, 1, 1)
BN_GRAD_KERNEL(bn_grad8_yx, 8, 1, 1)
BN_GRAD_KERNEL(bn_grad1_yx, 1, 1, 1)
#undef BN_GRAD_KERNEL
/* [X@GRAD in bfloat16][Y in bfloat16][16, 8 or 1 lanes] */
static const fl__range_fn bn_grad_kernels[2][2][3] = {
    {{bn_grad16, bn_grad8, bn_grad1}, {bn_grad16_y, bn_grad8_y, bn_grad1_y}},
    {{bn_grad16_x, bn_grad8_x, bn_grad1_x}, {bn_grad16_yx, bn_grad8_yx, bn_grad1_yx}}};

/* Grad op: inputs X, Scale, SavedMean, SavedVariance (inverse std), Y@GRAD, and Y with
 * fuse_with_relu (dy is taken as 0 where Y is 0: relu_grad in the same pass); outputs
 * X@GRAD, Scale@GRAD, Bias@GRAD (as requested).  With xh = (x - mean) * inv, M = N*S:
 *   dBias = sum dy, dScale = sum dy * xh,
 *   dX = scale * inv / M * (M dy - dBias - xh dScale)   (training: the batch statistics
 *        depend on X), or scale * inv * dy (is_test / use_global_stats).
 * Y may be bfloat16 (AMP: read for the relu's mask only); X@GRAD is written in bfloat16 when
 * attribute dx_dtype says so (AMP: read only by bfloat16 convolutions, amp_bn.c). */
static int run_batch_norm_grad(fl_kctx *c)
{
    int64_t N, C, S;
    FL_CHECK(fl__bn_dims(c, &N, &C, &S, 3));
    FL_CHECK(fl__kctx_dense_f32(c, 4));
    fl_tensor *x = FL_IN(c, 0), *dyt = FL_IN(c, 4), *dx = FL_OUT(c, 0), *ds = FL_OUT(c, 1), *db = FL_OUT(c, 2);
    if (dyt->numel != x->numel)
        return fl__err(FL_EINVAL, "%s: gradient '%s' has %lld elements, input '%s' %lld", c->op->def->type,
                       fl__kctx_var_name(c, 4, 0), (long long)dyt->numel, fl__kctx_var_name(c, 0, 0), (long long)x->numel);
    int global = fl__attr_i(c->op, "is_test", 0) || fl__attr_i(c->op, "use_global_stats", 0);
    FL_CHECK(fl__tensor_to_layout(dyt, x->layout));                 /* dy and Y read in X's layout */
    const int fused = c->op->def == &fl__def_fused_bn_add_act_grad; /* relu always, and Z@GRAD */
    fl_tensor *yt = NULL, *dz = fused ? FL_OUT(c, 3) : NULL;
    if (fused || fl__attr_i(c->op, "fuse_with_relu", 0)) { /* Y, whose zeros stop the gradient */
        FL_CHECK(bn_like_x(c, 5, x, "Y"));
        yt = FL_IN(c, 5);
    }
    const int dxb = fl__attr_i(c->op, "dx_dtype", FL_FLOAT32) == FL_BFLOAT16;
    if (dx) {
        FL_CHECK(fl__tensor_reshape_raw(dx, dxb ? FL_BFLOAT16 : FL_FLOAT32, x->ndim, x->shape));
        FL_CHECK(fl__tensor_share_lod(dx, x));
    }
    if (dz) {
        FL_CHECK(fl__tensor_reshape_raw(dz, FL_FLOAT32, x->ndim, x->shape));
        FL_CHECK(fl__tensor_share_lod(dz, x));
    }
    if (ds) FL_CHECK(fl__tensor_reshape_raw(ds, FL_FLOAT32, 1, &C));
    if (db) FL_CHECK(fl__tensor_reshape_raw(db, FL_FLOAT32, 1, &C));
    bn_grad_job j = {N,
                     C,
                     S,
                     x->data,
                     dyt->data,
                     yt ? yt->data : NULL,
                     FL_IN(c, 1)->data,
                     FL_IN(c, 2)->data,
                     FL_IN(c, 3)->data,
                     dx ? dx->data : NULL,
                     ds ? ds->data : NULL,
                     db ? db->data : NULL,
                     global,
                     dz ? dz->data : NULL};
    /* channels (channel blocks) split over the threads, as in run_batch_norm */
    const int B = bn_lanes(x), yb = yt && yt->dtype == FL_BFLOAT16;
    const int64_t bytes = N * S * (8 + (yt ? (yb ? 2 : 4) : 0) + (dxb ? 2 : 4) + (dz ? 4 : 0)); /* X, dY, Y, dX, dZ */
    fl__parallel_for(C / B, 1, bytes * B, bn_grad_kernels[dxb][yb][bn_kernel_col(B)], &j);
    if (dz) FL_CHECK(fl__tensor_set_layout(dz, x->layout));
    return dx ? fl__tensor_set_layout(dx, x->layout) : FL_OK;
}

static int grad_batch_norm(fl_op *op, fl_grad_ctx *g)
{
    fl_var *dy = fl__grad_of(g, op->out[0].vars[0]);
    if (!dy) return FL_OK;
    const int fused = op->def == &fl__def_fused_bn_add_act; /* Z (input 5) gets dy masked by Y > 0 */
    fl_var *gv[4] = {fl__grad_for(g, op->in[0].vars[0]), fl__grad_for(g, op->in[1].vars[0]),
                     fl__grad_for(g, op->in[2].vars[0]), fused ? fl__grad_for(g, op->in[5].vars[0]) : NULL};
    static const char *const names[4] = {"X@GRAD", "Scale@GRAD", "Bias@GRAD", "Z@GRAD"};
    fl_io o[4];
    int no = 0;
    for (int i = 0; i < 4; i++)
        if (gv[i]) o[no++] = (fl_io){names[i], &gv[i], 1};
    if (!no) return FL_OK;
    fl_io in[6] = {FL_IO1("X", op->in[0].vars[0]),
                   FL_IO1("Scale", op->in[1].vars[0]),
                   FL_IO1("SavedMean", op->out[3].vars[0]),
                   FL_IO1("SavedVariance", op->out[4].vars[0]),
                   FL_IO1("Y@GRAD", dy),
                   FL_IO1("Y", op->out[0].vars[0])};
    if (fused) return fl__grad_append(op, "fused_bn_add_activation_grad", in, 6, o, no);
    return fl__grad_append(op, "batch_norm_grad", in, fl__attr_i(op, "fuse_with_relu", 0) ? 6 : 5, o, no);
}

const fl_op_def fl__def_batch_norm = {"batch_norm",
                                      {"X", "Scale", "Bias", "Mean", "Variance"},
                                      {"Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"},
                                      infer_batch_norm,
                                      run_batch_norm,
                                      grad_batch_norm,
                                      NULL};
const fl_op_def fl__def_batch_norm_grad = {"batch_norm_grad",
                                           {"X", "Scale", "SavedMean", "SavedVariance", "Y@GRAD", "Y"},
                                           {"X@GRAD", "Scale@GRAD", "Bias@GRAD"},
                                           fl__infer_nop,
                                           run_batch_norm_grad,
                                           NULL,
                                           NULL};

/* Paddle's fused_bn_add_activation (its fuse_bn_add_act pass; here fl__fuse_bn_add_act,
 * src/graph/fuse.c): Y = act(batch_norm(X) + Z) in batch_norm's normalising pass, act_type
 * relu only.  Inputs X, Scale, Bias, Mean, Variance as batch_norm's, then Z (X's shape; the
 * slot order is this port's, Paddle's op lists Z second), outputs and the other attributes
 * as batch_norm's.  Its gradient op reads what batch_norm_grad with the fused relu reads and
 * writes Z@GRAD (dy masked by Y > 0) as well, in the pass that sums the gradient. */
static int infer_fused_bn_add_act(fl_op *op)
{
    FL_CHECK(infer_batch_norm(op));
    fl_var *x = op->in[0].vars[0], *z = op->in[5].vars[0];
    if (z->dtype != FL_BFLOAT16) FL_CHECK(fl__op_need_f32(op, z));
    if (z->ndim != x->ndim || memcmp(z->shape, x->shape, (size_t)x->ndim * sizeof *x->shape)) {
        char xs[96], zs[96];
        fl__shape_str(x, xs, sizeof xs);
        fl__shape_str(z, zs, sizeof zs);
        return fl__op_error(op, "Z '%s' %s must have the shape of X '%s' %s", z->name, zs, x->name, xs);
    }
    const char *act = fl__attr_s(op, "act_type", "relu");
    if (strcmp(act, "relu") != 0) return fl__op_error(op, "act_type '%s' (input '%s') must be relu", act, x->name);
    return FL_OK;
}

const fl_op_def fl__def_fused_bn_add_act = {"fused_bn_add_activation",
                                            {"X", "Scale", "Bias", "Mean", "Variance", "Z"},
                                            {"Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"},
                                            infer_fused_bn_add_act,
                                            run_batch_norm,
                                            grad_batch_norm,
                                            NULL};
const fl_op_def fl__def_fused_bn_add_act_grad = {"fused_bn_add_activation_grad",
                                                 {"X", "Scale", "SavedMean", "SavedVariance", "Y@GRAD", "Y"},
                                                 {"X@GRAD", "Scale@GRAD", "Bias@GRAD", "Z@GRAD"},
                                                 fl__infer_nop,
                                                 run_batch_norm_grad,
                                                 NULL,
                                                 NULL};

/* Moving statistic: an existing persistable [C] variable of that name is shared. */
static fl_var *bn_moving(fl_prog *p, const char *name, int64_t C, float init, const fl_var *x)
{
    fl_var *v = fl_prog_var(p, name);
    if (!v) return fl__persistable_create(p, name, FL_FLOAT32, 1, &C, init);
    if (v->persistable && v->dtype == FL_FLOAT32 && fl__dims_prod(v->shape, 0, v->ndim) == C) return v;
    char vs[96];
    fl__shape_str(v, vs, sizeof vs);
    fl__prog_error(p, FL_EINVAL,
                   "batch_norm: moving statistic '%s' %s cannot be shared with input '%s' of %lld "
                   "channels (needs a persistable float32 [%lld])",
                   name, vs, x->name, (long long)C, (long long)C);
    return NULL;
}

fl_var *fl_layer_batch_norm(fl_var *input, const char *act, int is_test, float momentum, float epsilon,
                            const fl_batch_norm_attr *attr)
{
    fl_prog *p = fl__prog_of(&input, 1);
    if (!p || p->status != FL_OK) return NULL;
    fl_batch_norm_attr none;
    memset(&none, 0, sizeof none);
    if (!attr) attr = &none;
    char xs[96];
    fl__shape_str(input, xs, sizeof xs);
    int a = fl__conv_act_code(act);
    if (input->ndim < 2 || input->ndim > 5 || input->shape[1] <= 0 || a < 0) {
        fl__prog_error(p, FL_EINVAL,
                       "batch_norm: input '%s' %s must have rank 2 to 5 with a known channel count "
                       "(dim 1), and act '%s' must be relu, tanh, sigmoid, softmax, softsign or NULL",
                       input->name, xs, act ? act : "NULL");
        return NULL;
    }
    int64_t C = input->shape[1];
    char base[128], nm[4][192];
    fl__unique_name(p, "batch_norm", base, sizeof base);
    const char *given[4] = {attr->scale.name, attr->bias.name, attr->moving_mean_name, attr->moving_variance_name};
    static const char *const suffix[4] = {"w_0", "b_0", "w_1", "w_2"}; /* Paddle's names */
    for (int i = 0; i < 4; i++) {
        if (given[i]) snprintf(nm[i], sizeof nm[i], "%s", given[i]);
        else snprintf(nm[i], sizeof nm[i], "%s.%s", base, suffix[i]);
    }
    fl_var *v[5];
    v[0] = input;
    if (!(v[1] = fl__param_create(p, nm[0], 1, &C, &attr->scale, fl_init_constant(1.0f), 0, 0)) ||
        !(v[2] = fl__param_create(p, nm[1], 1, &C, &attr->bias, fl_init_constant(0.0f), 0, 0)) ||
        !(v[3] = bn_moving(p, nm[2], C, 0.0f, input)) || !(v[4] = bn_moving(p, nm[3], C, 1.0f, input)))
        return NULL;
    fl_var *sm = fl__tmp_var(p, base, FL_FLOAT32, 1, &C), *sv = sm ? fl__tmp_var(p, base, FL_FLOAT32, 1, &C) : NULL;
    fl_var *y = sv ? fl__tmp_var(p, base, FL_FLOAT32, input->ndim, input->shape) : NULL;
    if (!y) return NULL;
    sm->stop_gradient = sv->stop_gradient = 1;
    static const char *const in_names[5] = {"X", "Scale", "Bias", "Mean", "Variance"};
    static const char *const out_names[5] = {"Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"};
    fl_var *ov[5] = {y, v[3], v[4], sm, sv};
    fl_io ins[5], outs[5];
    for (int i = 0; i < 5; i++) {
        ins[i] = (fl_io){in_names[i], &v[i], 1};
        outs[i] = (fl_io){out_names[i], &ov[i], 1};
    }
    fl_op *op = fl__op_new(p, "batch_norm", ins, 5, outs, 5);
    if (!op || fl__attr_set_f(op, "momentum", momentum) || fl__attr_set_f(op, "epsilon", epsilon) ||
        fl__attr_set_i(op, "is_test", is_test != 0) ||
        fl__attr_set_i(op, "use_global_stats", attr->use_global_stats != 0) || fl__attr_set_s(op, "data_layout", "NCHW") ||
        (a == ACT_RELU && fl__attr_set_i(op, "fuse_with_relu", 1)) || fl__op_finish(op))
        return NULL;
    return a == ACT_RELU ? y : fl__conv_post_act(y, a);
}
