/*
 * ops_bn_bf16.c - batch_norm and fused_bn_add_activation with Y in bfloat16 (AMP), and their
 * gradients reading that Y.
 *
 * Under bf16 AMP a convolution reads its Input in bfloat16; the batch_norm (with its fused
 * relu) or block end in front of it wrote float32 that a cast op then read again and rounded.
 * amp_bn.c makes the normalisation write the rounded values itself (attribute out_dtype), so
 * the activation is written once, in half the bytes, and the cast's pass is gone.  X (the
 * convolution's float32 output), the statistics and every gradient stay float32; a block
 * end's Z may be bfloat16 (the previous block end's Y) and is widened as it is read.  Y is
 * the float32 kernel's value rounded to nearest even (fl__f32_to_bf16, as the cast op), so a
 * convolution reads the same bf16 values as before.  The gradient reads the bf16 Y only for
 * the fused relu's mask (Y > 0).
 *
 * Layouts: X in nChw16c / nChw8c (the block's channels as the vector lanes) or plain NCHW
 * (one lane); Z, dY and Y are read in X's layout.  The blocked statistics are ops_bn.h's, as
 * ops_bn.c's kernels; the other sums run in float over CHUNK positions, then in double, as
 * theirs.
 */
#include <math.h>
#include <string.h>

#include "../tensor/half.h"
#include "op_layout.h"
#include "ops_bn.h"
#include "ops_bn_bf16.h"

enum { CHUNK = FL_BN_CHUNK, MAXB = FL_BN_MAXB };
/* The float accumulator of channel lane l at position i: the lane itself in channel blocks,
 * one of 16 over the positions in plain NCHW (B = 1).  Lanes past B stay 0. */
#define LANE(B, i, l) ((B) == 1 ? (int)((i)&15) : (l))

fl_dtype fl__bn_out_dtype(const fl_op *op)
{
    return fl__attr_i(op, "out_dtype", FL_FLOAT32) == FL_BFLOAT16 ? FL_BFLOAT16 : FL_FLOAT32;
}

static int is_fused(const fl_kctx *c) { return !strcmp(c->op->def->type, "fused_bn_add_activation"); }

int fl__bn_bf16_fwd_wanted(const fl_kctx *c)
{
    if (fl__bn_out_dtype(c->op) == FL_BFLOAT16) return 1;
    const fl_tensor *z = is_fused(c) && c->nin[5] ? FL_IN(c, 5) : NULL;
    return z && z->dtype == FL_BFLOAT16;
}

int fl__bn_bf16_grad_wanted(const fl_kctx *c)
{
    const fl_tensor *y = c->nin[5] ? FL_IN(c, 5) : NULL;
    return y && y->dtype == FL_BFLOAT16;
}

/* Input slot `slot`: float32 or bfloat16 with X's shape, in X's layout (X goes plain instead
 * when t is a persistable, which is never converted). */
static int like_x(fl_kctx *c, int slot, fl_tensor *x, const char *what)
{
    fl_tensor *t = FL_IN(c, slot);
    if (!t || t->is_rows || (t->dtype != FL_FLOAT32 && t->dtype != FL_BFLOAT16) || t->ndim != x->ndim ||
        memcmp(t->shape, x->shape, (size_t)x->ndim * sizeof *x->shape)) {
        char ts[96] = "(none)", xs[96];
        if (t) fl_tensor_describe(t, ts, sizeof ts);
        fl_tensor_describe(x, xs, sizeof xs);
        return fl__err(FL_EINVAL, "%s: %s '%s' %s must be float32 or bfloat16 with the shape of X '%s' %s",
                       c->op->def->type, what, fl__kctx_var_name(c, slot, 0), ts, fl__kctx_var_name(c, 0, 0), xs);
    }
    if (t->layout == x->layout) return FL_OK;
    if (c->op->in[slot].vars[0]->persistable) return fl__tensor_to_plain(x);
    return fl__tensor_to_layout(t, x->layout);
}

/* Element (n, c, s) of a tensor in channel blocks of B lanes (B = 1: plain NCHW) is at
 * ((n * C/B + c/B) * S + s) * B + c%B. */
typedef struct {
    int64_t N, C, S;
    const float *x;
    const void *z; /* NULL, or float32 / bfloat16 (zb) */
    void *y;       /* float32, or bfloat16 (yb) */
    int zb, yb, relu, global;
    const float *scale, *bias, *mean_in, *var_in;
    float *mout, *vout, *smd, *svd;
    float eps, mom;
} fwd_job;

/* Y = act(X * a + b (+ Z)) over the S positions of one image's channel block at offset at;
 * zk: no Z (0), float32 Z (1), bfloat16 Z (2). */
static inline __attribute__((always_inline)) void norm_rows(const fwd_job *j, int64_t at, const float *a, const float *b,
                                                            const int B, const int zk, const int relu, const int yb)
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

/* The sums over channel block cb of X (m NULL) or of (X - m)^2, added into s. */
static inline __attribute__((always_inline)) void stat_sums(const fwd_job *j, int64_t cb, const int B, const float *m,
                                                            double *s)
{
    const int64_t N = j->N, S = j->S, CB = j->C / B;
    for (int64_t n = 0; n < N; n++) {
        const float *restrict r = j->x + (n * CB + cb) * S * B;
        for (int64_t s0 = 0; s0 < S; s0 += CHUNK) {
            const int64_t e = S - s0 < CHUNK ? S : s0 + CHUNK;
            float acc[MAXB] = {0}; /* a lane per channel; B = 1: 16 lanes over positions */
            if (m)
                for (int64_t i = s0; i < e; i++)
                    for (int l = 0; l < B; l++) acc[LANE(B, i, l)] += (r[i * B + l] - m[l]) * (r[i * B + l] - m[l]);
            else
                for (int64_t i = s0; i < e; i++)
                    for (int l = 0; l < B; l++) acc[LANE(B, i, l)] += r[i * B + l];
            for (int q = 0; q < MAXB; q++) s[B == 1 ? 0 : q] += acc[q];
        }
    }
}

/* Channel blocks [cb0, cb1), each on its own (a split over the threads gives the same values). */
static inline __attribute__((always_inline)) void fwd_blk(const fwd_job *j, int64_t cb0, int64_t cb1, const int B)
{
    const int64_t N = j->N, C = j->C, S = j->S, CB = C / B;
    const double M = (double)(N * S);
    for (int64_t cb = cb0; cb < cb1; cb++) {
        float m[MAXB], a[MAXB], b[MAXB];
        double mu[MAXB], va[MAXB];
        if (!j->global && B > 1) { /* ops_bn.c's blocked kernel's statistics */
            fl__bn_blk_stats(j->x, N, CB, cb, S, B, mu, va);
        } else if (!j->global) { /* plain: as ops_bn.c's bn_fwd_range */
            double s1[MAXB] = {0}, s2[MAXB] = {0};
            stat_sums(j, cb, B, NULL, s1);
            for (int l = 0; l < B; l++) m[l] = (float)(s1[l] / M);
            stat_sums(j, cb, B, m, s2);
            for (int l = 0; l < B; l++) mu[l] = s1[l] / M, va[l] = s2[l] / M;
        }
        for (int l = 0; l < B; l++) {
            const int64_t ch = cb * B + l;
            const double mean = j->global ? j->mean_in[ch] : mu[l], var = j->global ? j->var_in[ch] : va[l];
            const float inv = (float)(1.0 / sqrt(var + j->eps));
            j->smd[ch] = (float)mean;
            j->svd[ch] = inv;
            j->mout[ch] = j->global ? j->mean_in[ch] : j->mean_in[ch] * j->mom + (float)mean * (1.0f - j->mom);
            j->vout[ch] = j->global ? j->var_in[ch] : j->var_in[ch] * j->mom + (float)var * (1.0f - j->mom);
            a[l] = j->scale[ch] * inv, b[l] = j->bias[ch] - (float)mean * a[l];
        }
        const int zk = !j->z ? 0 : j->zb ? 2 : 1;
        for (int64_t n = 0; n < N; n++) {
            const int64_t at = (n * CB + cb) * S * B;
            /* one loop per case, each without tests inside */
            if (zk == 0 && !j->relu) norm_rows(j, at, a, b, B, 0, 0, j->yb);
            else if (zk == 0 && j->yb) norm_rows(j, at, a, b, B, 0, 1, 1);
            else if (zk == 0) norm_rows(j, at, a, b, B, 0, 1, 0);
            else if (zk == 1 && j->yb) norm_rows(j, at, a, b, B, 1, 1, 1);
            else if (zk == 1) norm_rows(j, at, a, b, B, 1, 1, 0);
            else if (j->yb) norm_rows(j, at, a, b, B, 2, 1, 1);
            else norm_rows(j, at, a, b, B, 2, 1, 0);
        }
    }
}
static FL_CLONE_TARGETS void fwd_blk16(void *j, int64_t lo, int64_t hi) { fwd_blk(j, lo, hi, 16); }
static FL_CLONE_TARGETS void fwd_blk8(void *j, int64_t lo, int64_t hi) { fwd_blk(j, lo, hi, 8); }
static FL_CLONE_TARGETS void fwd_plain(void *j, int64_t lo, int64_t hi) { fwd_blk(j, lo, hi, 1); }

int fl__run_batch_norm_bf16(fl_kctx *c)
{
    int64_t N, C, S;
    FL_CHECK(fl__bn_dims(c, &N, &C, &S, 4));
    fl_tensor *x = FL_IN(c, 0), *y = FL_OUT(c, 0), *z = NULL;
    const int fused = is_fused(c);
    if (fused) {
        FL_CHECK(like_x(c, 5, x, "Z"));
        z = FL_IN(c, 5);
    }
    const int global = fl__attr_i(c->op, "is_test", 0) || fl__attr_i(c->op, "use_global_stats", 0);
    if (!global && N * S == 0)
        return fl__err(FL_EINVAL, "%s: input '%s' is empty: no batch statistics", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0));
    const fl_dtype yt = fl__bn_out_dtype(c->op);
    FL_CHECK(fl__tensor_reshape_raw(y, yt, x->ndim, x->shape));
    FL_CHECK(fl__tensor_share_lod(y, x));
    fl_tensor *mo = FL_OUT(c, 1), *vo = FL_OUT(c, 2), *sm = FL_OUT(c, 3), *sv = FL_OUT(c, 4);
    FL_CHECK(fl__tensor_reshape_raw(mo, FL_FLOAT32, FL_IN(c, 3)->ndim, FL_IN(c, 3)->shape));
    FL_CHECK(fl__tensor_reshape_raw(vo, FL_FLOAT32, FL_IN(c, 4)->ndim, FL_IN(c, 4)->shape));
    FL_CHECK(fl__tensor_reshape_raw(sm, FL_FLOAT32, 1, &C));
    FL_CHECK(fl__tensor_reshape_raw(sv, FL_FLOAT32, 1, &C));
    fwd_job j = {.N = N,
                 .C = C,
                 .S = S,
                 .x = x->data,
                 .z = z ? z->data : NULL,
                 .y = y->data,
                 .zb = z && z->dtype == FL_BFLOAT16,
                 .yb = yt == FL_BFLOAT16,
                 .relu = fused || fl__attr_i(c->op, "fuse_with_relu", 0) != 0,
                 .global = global,
                 .scale = FL_IN(c, 1)->data,
                 .bias = FL_IN(c, 2)->data,
                 .mean_in = FL_IN(c, 3)->data,
                 .var_in = FL_IN(c, 4)->data,
                 .mout = mo->data,
                 .vout = vo->data,
                 .smd = sm->data,
                 .svd = sv->data,
                 .eps = (float)fl__attr_f(c->op, "epsilon", 1e-5),
                 .mom = (float)fl__attr_f(c->op, "momentum", 0.9)};
    /* channel blocks (channels when plain) split over the threads, as ops_bn.c's kernels */
    const int B = fl__layout_block(x->layout) > 1 ? fl__layout_block(x->layout) : 1;
    const int64_t bytes = N * S * (4 + 2 + (j.z ? 4 : 0)) * (int64_t)B; /* per block: X, Y, Z */
    fl__parallel_for(C / B, 1, bytes, B == 16 ? fwd_blk16 : B == 8 ? fwd_blk8 : fwd_plain, &j);
    return fl__tensor_set_layout(y, x->layout);
}

/* ---- gradient ---------------------------------------------------------------------------- */

typedef struct {
    int64_t N, C, S;
    const float *x, *dy, *scale, *mean, *inv;
    const uint16_t *y; /* bfloat16: dy counts where Y > 0 */
    float *dx, *ds, *db, *dz;
    int global;
} grad_job;

/* Channel blocks [cb0, cb1), as fwd_blk. */
static inline __attribute__((always_inline)) void grad_blk(const grad_job *j, int64_t cb0, int64_t cb1, const int B)
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
            const uint16_t *restrict yr = j->y + at;
            for (int64_t s0 = 0; s0 < S; s0 += CHUNK) {
                const int64_t e = S - s0 < CHUNK ? S : s0 + CHUNK;
                float ab[MAXB] = {0}, as[MAXB] = {0};
                if (j->dz) {
                    float *restrict dz = j->dz + at;
                    for (int64_t i = s0; i < e; i++)
                        for (int l = 0; l < B; l++) {
                            const float gv = fl__bf16_to_f32(yr[i * B + l]) > 0.0f ? g[i * B + l] : 0.0f;
                            dz[i * B + l] = gv;
                            ab[LANE(B, i, l)] += gv;
                            as[LANE(B, i, l)] += gv * (r[i * B + l] - m[l]);
                        }
                } else {
                    for (int64_t i = s0; i < e; i++)
                        for (int l = 0; l < B; l++) {
                            const float gv = fl__bf16_to_f32(yr[i * B + l]) > 0.0f ? g[i * B + l] : 0.0f;
                            ab[LANE(B, i, l)] += gv;
                            as[LANE(B, i, l)] += gv * (r[i * B + l] - m[l]);
                        }
                }
                for (int q = 0; q < MAXB; q++) sb[B == 1 ? 0 : q] += ab[q], ss[B == 1 ? 0 : q] += as[q];
            }
        }
        fl__bn_grad_coefs(B, c0, M, j->global, j->scale, iv, sb, ss, j->ds, j->db, k, kb, ks);
        if (!j->dx) continue;
        for (int64_t n = 0; n < N; n++) {
            const int64_t at = (n * CB + cb) * S * B;
            const float *restrict r = j->x + at, *restrict g = (j->dz ? j->dz : j->dy) + at;
            const uint16_t *restrict yr = j->y + at;
            float *restrict o = j->dx + at;
            if (j->dz) /* Z@GRAD written above is dy masked already */
                for (int64_t i = 0; i < S; i++)
                    for (int l = 0; l < B; l++)
                        o[i * B + l] = k[l] * (g[i * B + l] - kb[l] - (r[i * B + l] - m[l]) * iv[l] * ks[l]);
            else
                for (int64_t i = 0; i < S; i++)
                    for (int l = 0; l < B; l++)
                        o[i * B + l] = k[l] * ((fl__bf16_to_f32(yr[i * B + l]) > 0.0f ? g[i * B + l] : 0.0f) - kb[l] -
                                               (r[i * B + l] - m[l]) * iv[l] * ks[l]);
        }
    }
}
static FL_CLONE_TARGETS void grad_blk16(void *j, int64_t lo, int64_t hi) { grad_blk(j, lo, hi, 16); }
static FL_CLONE_TARGETS void grad_blk8(void *j, int64_t lo, int64_t hi) { grad_blk(j, lo, hi, 8); }
static FL_CLONE_TARGETS void grad_plain(void *j, int64_t lo, int64_t hi) { grad_blk(j, lo, hi, 1); }

/* batch_norm_grad (fuse_with_relu) and fused_bn_add_activation_grad on a bfloat16 Y: inputs
 * X, Scale, SavedMean, SavedVariance, Y@GRAD (float32), Y; outputs X@GRAD, Scale@GRAD,
 * Bias@GRAD and the fused op's Z@GRAD, float32, as ops_bn.c's run_batch_norm_grad. */
int fl__run_batch_norm_grad_bf16(fl_kctx *c)
{
    int64_t N, C, S;
    FL_CHECK(fl__bn_dims(c, &N, &C, &S, 3));
    FL_CHECK(fl__kctx_dense_f32(c, 4));
    fl_tensor *x = FL_IN(c, 0), *dyt = FL_IN(c, 4), *dx = FL_OUT(c, 0), *ds = FL_OUT(c, 1), *db = FL_OUT(c, 2);
    const int fused = !strcmp(c->op->def->type, "fused_bn_add_activation_grad");
    if (!fused && !fl__attr_i(c->op, "fuse_with_relu", 0))
        return fl__err(FL_EINVAL, "%s: a bfloat16 Y '%s' is read only for the fused relu (fuse_with_relu is not set)",
                       c->op->def->type, fl__kctx_var_name(c, 5, 0));
    if (dyt->numel != x->numel)
        return fl__err(FL_EINVAL, "%s: gradient '%s' has %lld elements, input '%s' %lld", c->op->def->type,
                       fl__kctx_var_name(c, 4, 0), (long long)dyt->numel, fl__kctx_var_name(c, 0, 0), (long long)x->numel);
    FL_CHECK(like_x(c, 5, x, "Y")); /* dy and Y read in X's layout */
    FL_CHECK(fl__tensor_to_layout(dyt, x->layout));
    fl_tensor *yt = FL_IN(c, 5), *dz = fused ? FL_OUT(c, 3) : NULL;
    if (dx) {
        FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
        FL_CHECK(fl__tensor_share_lod(dx, x));
    }
    if (dz) {
        FL_CHECK(fl__tensor_reshape_raw(dz, FL_FLOAT32, x->ndim, x->shape));
        FL_CHECK(fl__tensor_share_lod(dz, x));
    }
    if (ds) FL_CHECK(fl__tensor_reshape_raw(ds, FL_FLOAT32, 1, &C));
    if (db) FL_CHECK(fl__tensor_reshape_raw(db, FL_FLOAT32, 1, &C));
    grad_job j = {.N = N,
                  .C = C,
                  .S = S,
                  .x = x->data,
                  .dy = dyt->data,
                  .scale = FL_IN(c, 1)->data,
                  .mean = FL_IN(c, 2)->data,
                  .inv = FL_IN(c, 3)->data,
                  .y = yt->data,
                  .dx = dx ? dx->data : NULL,
                  .ds = ds ? ds->data : NULL,
                  .db = db ? db->data : NULL,
                  .dz = dz ? dz->data : NULL,
                  .global = fl__attr_i(c->op, "is_test", 0) || fl__attr_i(c->op, "use_global_stats", 0)};
    const int B = fl__layout_block(x->layout) > 1 ? fl__layout_block(x->layout) : 1;
    const int64_t bytes = N * S * (4 + 4 + 2 + 4 + (j.dz ? 4 : 0)) * (int64_t)B; /* per block: X, dY, Y, dX, dZ */
    fl__parallel_for(C / B, 1, bytes, B == 16 ? grad_blk16 : B == 8 ? grad_blk8 : grad_plain, &j);
    if (dz) FL_CHECK(fl__tensor_set_layout(dz, x->layout));
    return dx ? fl__tensor_set_layout(dx, x->layout) : FL_OK;
}
