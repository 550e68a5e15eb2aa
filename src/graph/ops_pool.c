/*
 * ops_pool.c - pool2d (max / avg over NCHW windows) with its gradient and layer builders,
 * following Paddle's fluid op; part of the "conv" op group (listed in ops_conv.c's
 * fl__ops_conv).  Windows that lie entirely in the padding (possible with ceil_mode or a
 * padding >= the window) output 0 and pass no gradient (Paddle leaves them undefined).
 * pool2d reads an input in a blocked layout (nChw16c / nChw8c, src/tensor/layout.h) as it is,
 * the block's channels as the vector lanes, and leaves its output in that layout.
 */
#include <string.h>

#include "ops_conv.h"

/* ---- pool2d ---------------------------------------------------------------------------- */

/* Paddle's pool2d: X [N, C, H, W] -> Out [N, C, Ho, Wo], Ho = (H - k + 2p) / s + 1 (ceil_mode:
 * rounded up).  Attributes pooling_type ("max" | "avg"), ksize, global_pooling (window =
 * the whole image, no padding), strides, paddings, exclusive (avg divides by the window
 * clipped to the image; else by kh*kw), ceil_mode, adaptive (rejected), data_format.
 * Windows are clipped to the image as Paddle's CPU kernel: max ignores padding. */
typedef struct {
    int64_t n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
    int max, excl;
} pool_geo;

static const char *pool_geo_make(const fl_op *op, const int64_t *xs, pool_geo *g)
{
    const char *t = fl__attr_s(op, "pooling_type", "max");
    int64_t k[2], s[2], p[2];
    if (strcmp(t, "max") && strcmp(t, "avg")) return "pooling_type must be 'max' or 'avg'";
    if (fl__attr_i(op, "adaptive", 0)) return "adaptive pooling is not supported";
    if (fl__conv_attr2(op, "ksize", -1, k) || fl__conv_attr2(op, "strides", 1, s) || fl__conv_attr2(op, "paddings", 0, p))
        return "ksize, strides and paddings must be int lists of 1 or 2 entries";
    g->max = !strcmp(t, "max");
    g->excl = (int)fl__attr_i(op, "exclusive", 1) != 0;
    g->n = xs[0], g->c = xs[1], g->h = xs[2], g->w = xs[3];
    if (fl__attr_i(op, "global_pooling", 0)) {
        g->kh = g->h, g->kw = g->w, g->sh = g->sw = 1, g->ph = g->pw = 0, g->oh = g->ow = 1;
        return NULL;
    }
    g->kh = k[0], g->kw = k[1], g->sh = s[0], g->sw = s[1], g->ph = p[0], g->pw = p[1];
    if (k[0] < 1 || k[1] < 1) return "pool size must be positive (or use global_pooling)";
    if (s[0] < 1 || s[1] < 1 || p[0] < 0 || p[1] < 0) return "strides must be >= 1 and paddings >= 0";
    int ceil = fl__attr_i(op, "ceil_mode", 0) != 0;
    int64_t dims[2] = {g->h, g->w}, out[2];
    for (int i = 0; i < 2; i++) {
        int64_t span = dims[i] + 2 * p[i] - k[i];
        out[i] = dims[i] < 0 ? -1 : span < 0 ? 0 : (span + (ceil ? s[i] - 1 : 0)) / s[i] + 1;
    }
    g->oh = out[0], g->ow = out[1];
    if (!g->oh || !g->ow) return "the pool window is larger than the padded input";
    return NULL;
}

static int infer_pool2d(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    FL_CHECK(fl__conv_need_nchw(op, "data_format", x));
    char xs[96];
    fl__shape_str(x, xs, sizeof xs);
    if (x->ndim != 4) return fl__op_error(op, "input '%s' must be 4-D NCHW [N, C, H, W], is %s", x->name, xs);
    pool_geo g;
    const char *why = pool_geo_make(op, x->shape, &g);
    if (why) {
        int64_t k[2];
        fl__conv_attr2(op, "ksize", -1, k);
        return fl__op_error(op, "input '%s' %s, pool size [%lld, %lld]: %s", x->name, xs, (long long)k[0], (long long)k[1],
                            why);
    }
    int64_t os[4] = {g.n, g.c, g.oh, g.ow};
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, 4, os);
    return FL_OK;
}

static int pool_geo_rt(fl_kctx *c, pool_geo *g)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *x = FL_IN(c, 0);
    const char *why = x->ndim != 4 ? "the input must be 4-D" : pool_geo_make(c->op, x->shape, g);
    if (!why) return FL_OK;
    char xs[96];
    fl_tensor_describe(x, xs, sizeof xs);
    return fl__err(FL_EINVAL, "%s: input '%s' %s: %s", c->op->def->type, fl__kctx_var_name(c, 0, 0), xs, why);
}

/* Window of output (y, x) clipped to the image: rows [w[0], w[1]), columns [w[2], w[3]). */
static int pool_window(const pool_geo *g, int64_t y, int64_t x, int64_t w[4])
{
    int64_t h0 = y * g->sh - g->ph, w0 = x * g->sw - g->pw;
    w[0] = h0 > 0 ? h0 : 0;
    w[1] = h0 + g->kh < g->h ? h0 + g->kh : g->h;
    w[2] = w0 > 0 ? w0 : 0;
    w[3] = w0 + g->kw < g->w ? w0 + g->kw : g->w;
    return w[0] < w[1] && w[2] < w[3]; /* 0: the window lies in the padding only */
}

/* Index (in the image) of the first maximum of the window, -1 if the window is empty. */
static int64_t pool_argmax(const pool_geo *g, const float *img, int64_t y, int64_t x)
{
    int64_t w[4];
    if (!pool_window(g, y, x, w)) return -1;
    int64_t best = w[0] * g->w + w[2];
    for (int64_t i = w[0]; i < w[1]; i++)
        for (int64_t j = w[2]; j < w[3]; j++)
            if (img[i * g->w + j] > img[best]) best = i * g->w + j;
    return best;
}

/* Divisor of an avg window: its clipped size (exclusive) or kh*kw. */
static float pool_div(const pool_geo *g, const int64_t w[4])
{
    return (float)(g->excl ? (w[1] - w[0]) * (w[3] - w[2]) : g->kh * g->kw);
}

/* Every window lies inside the image (no padding, no clipping): the common case
 * (LeNet's 2x2 stride 2) runs loops without the clipping arithmetic of pool_window. */
static int pool_full(const pool_geo *g)
{
    return g->ph == 0 && g->pw == 0 && (g->oh - 1) * g->sh + g->kh <= g->h && (g->ow - 1) * g->sw + g->kw <= g->w;
}

/* Offset in the window at p (rows g->w apart) of its first maximum, and that maximum. */
static inline int64_t window_argmax(const pool_geo *g, const float *restrict p, float *max)
{
    int64_t best = 0;
    float m = p[0];
    for (int64_t i = 0; i < g->kh; i++)
        for (int64_t j = 0; j < g->kw; j++) {
            float v = p[i * g->w + j];
            if (v > m) m = v, best = i * g->w + j;
        }
    *max = m;
    return best;
}

/* Max over 2x2 windows at stride 2 inside the image (LeNet's pools): two input rows per
 * output row, each window's four values compared in window_argmax's order (strict >: the
 * first maximum wins), written with selects instead of branches so that the loops
 * vectorise.  They are compiled for baseline x86-64 on purpose: its 4-float vectors fit
 * rows of 12 and 4 outputs (LeNet's) whole, where AVX-512's 16-float vectors would leave
 * them all to a scalar remainder loop with branches (slower than these on random data). */
static int pool_max2(const pool_geo *g)
{
    return g->max && g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && pool_full(g);
}

/* pool_max2: the windows tile the image exactly (even height and width), so the gradient
 * writes every element of dX and needs no zeroing first. */
static int pool_max2_tiles(const pool_geo *g) { return pool_max2(g) && g->h == 2 * g->oh && g->w == 2 * g->ow; }

static inline __attribute__((always_inline)) void row_fwd_max2(const float *restrict r0, const float *restrict r1,
                                                               float *restrict o, int64_t ow)
{
    for (int64_t x = 0; x < ow; x++) {
        float m = r0[2 * x];
        m = r0[2 * x + 1] > m ? r0[2 * x + 1] : m;
        m = r1[2 * x] > m ? r1[2 * x] : m;
        o[x] = r1[2 * x + 1] > m ? r1[2 * x + 1] : m;
    }
}

static void pool_fwd_max2(const pool_geo *g, const float *img, float *o)
{
    for (int64_t y = 0; y < g->oh; y++) row_fwd_max2(img + 2 * y * g->w, img + (2 * y + 1) * g->w, o + y * g->ow, g->ow);
}

/* pool_max2 gradient: each window's four elements of gi get d at its first maximum and 0
 * elsewhere (so gi need not be zeroed where windows cover it). */
static inline __attribute__((always_inline)) void row_bwd_max2(const float *restrict r0, const float *restrict r1,
                                                               const float *restrict d, float *restrict g0,
                                                               float *restrict g1, int64_t ow)
{
    for (int64_t x = 0; x < ow; x++) {
        const float a = r0[2 * x], b = r0[2 * x + 1], c = r1[2 * x], e = r1[2 * x + 1], v = d[x];
        const float mab = b > a ? b : a; /* then: does c beat a and b, e the best of the three */
        const float mabc = c > mab ? c : mab;
        const float ve = e > mabc ? v : 0.0f, rest = e > mabc ? 0.0f : v;
        const float vc = c > mab ? rest : 0.0f, rest2 = c > mab ? 0.0f : rest;
        g0[2 * x] = b > a ? 0.0f : rest2;
        g0[2 * x + 1] = b > a ? rest2 : 0.0f;
        g1[2 * x] = vc;
        g1[2 * x + 1] = ve;
    }
}

static void pool_bwd_max2(const pool_geo *g, const float *img, const float *d, float *gi)
{
    for (int64_t y = 0; y < g->oh; y++)
        row_bwd_max2(img + 2 * y * g->w, img + (2 * y + 1) * g->w, d + y * g->ow, gi + 2 * y * g->w,
                     gi + (2 * y + 1) * g->w, g->ow);
}

/* pool_full images: forward (max or avg) of image img into o. */
static void pool_fwd_full(const pool_geo *g, const float *restrict img, float *restrict o)
{
    const float div = (float)(g->kh * g->kw); /* as pool_div: the window is not clipped */
    for (int64_t y = 0; y < g->oh; y++)
        for (int64_t x = 0; x < g->ow; x++) {
            const float *restrict p = img + y * g->sh * g->w + x * g->sw;
            float r;
            if (g->max) {
                window_argmax(g, p, &r);
            } else {
                r = 0.0f;
                for (int64_t i = 0; i < g->kh; i++)
                    for (int64_t j = 0; j < g->kw; j++) r += p[i * g->w + j];
                r /= div;
            }
            o[y * g->ow + x] = r;
        }
}

/* pool_full images: dImage += the gradient of output gradient d (gi zeroed by the caller). */
static void pool_bwd_full(const pool_geo *g, const float *restrict img, const float *restrict d, float *restrict gi)
{
    const float div = (float)(g->kh * g->kw); /* as pool_div: the window is not clipped */
    for (int64_t y = 0; y < g->oh; y++)
        for (int64_t x = 0; x < g->ow; x++) {
            const int64_t at = y * g->sh * g->w + x * g->sw;
            const float v = d[y * g->ow + x];
            if (g->max) {
                float m;
                gi[at + window_argmax(g, img + at, &m)] += v;
                continue;
            }
            const float share = v / div;
            for (int64_t i = 0; i < g->kh; i++)
                for (int64_t j = 0; j < g->kw; j++) gi[at + i * g->w + j] += share;
        }
}

/* Blocked input (B channels per block, the lanes; nChw16c / nChw8c): the kernels below
 * work on GCC vector types of B floats (one AVX-512 register for B = 16 in the
 * x86-64-v4 clone, narrower ones in the others).  Selects are written with the compare
 * masks: (a & m) | (b & ~m) on the bits.
 *
 * Forward: each output is the window's max (strict >, from the first) or average per lane,
 * in pool_argmax's and the plain loop's order, so the values are those of the plain path
 * bit for bit.
 *
 * Gradient, per lane: max sends each dOut to the first position of its window holding the
 * window's maximum (found again from X, as pool_argmax: strict > from the first), avg
 * spreads dOut / divisor over the window; the additions to each dX element come in the plain
 * loop's order (windows row by row), so the values are the plain path's bit for bit.  dX
 * rows are zeroed just before the first window that reaches them, while they are in cache,
 * instead of in a separate pass over the whole tensor.  Both take the (image, channel
 * block) pairs [b0, b1): each on its own, so a split over threads gives the same values. */
typedef struct {
    const pool_geo *g;
    const float *x;
    float *out;
} pool_fwd_job;

typedef struct {
    const pool_geo *g;
    const float *x, *dy;
    float *dx;
} pool_bwd_job;

/* The vector types may alias floats at any float's alignment: VLD reads B floats at p,
 * VSEL selects a where m is set, b elsewhere. */
#define VLD(V, p) (*(const V *)(p))
#define VSEL(VI, V, m, a, b) ((V)(((VI)(a) & (m)) | ((VI)(b) & ~(m))))
#define POOL_BLK(B)                                                                                                 \
    typedef float v##B __attribute__((vector_size((B) * sizeof(float)), aligned(sizeof(float)), may_alias));        \
    typedef int32_t vi##B __attribute__((vector_size((B) * sizeof(float)), aligned(sizeof(float)), may_alias));     \
    static FL_CLONE_TARGETS void pool_fwd_blk##B(void *arg, int64_t b0, int64_t b1)                                 \
    {                                                                                                               \
        const pool_fwd_job *jf = arg;                                                                               \
        const pool_geo *g = jf->g;                                                                                  \
        const int64_t hw = g->h * g->w, ohw = g->oh * g->ow;                                                        \
        for (int64_t b = b0; b < b1; b++) {                                                                         \
            const float *img = jf->x + b * hw * (B);                                                                \
            float *o = jf->out + b * ohw * (B);                                                                     \
            for (int64_t y = 0; y < g->oh; y++)                                                                     \
                for (int64_t xx = 0; xx < g->ow; xx++) {                                                            \
                    int64_t w[4];                                                                                   \
                    v##B acc = {0};                                                                                 \
                    if (pool_window(g, y, xx, w)) {                                                                 \
                        if (g->max) acc = VLD(v##B, img + (w[0] * g->w + w[2]) * (B));                              \
                        for (int64_t i = w[0]; i < w[1]; i++)                                                       \
                            for (int64_t j = w[2]; j < w[3]; j++) {                                                 \
                                const v##B v = VLD(v##B, img + (i * g->w + j) * (B));                               \
                                if (g->max) acc = VSEL(vi##B, v##B, v > acc, v, acc);                               \
                                else acc += v;                                                                      \
                            }                                                                                       \
                        if (!g->max) acc /= pool_div(g, w);                                                         \
                    }                                                                                               \
                    *(v##B *)(o + (y * g->ow + xx) * (B)) = acc;                                                    \
                }                                                                                                   \
        }                                                                                                           \
    }                                                                                                               \
    static FL_CLONE_TARGETS void pool_bwd_blk##B(void *arg, int64_t b0, int64_t b1)                                 \
    {                                                                                                               \
        const pool_bwd_job *jb = arg;                                                                               \
        const pool_geo *g = jb->g;                                                                                  \
        const int64_t hw = g->h * g->w, ohw = g->oh * g->ow, rowlen = g->w * (B);                                   \
        for (int64_t b = b0; b < b1; b++) {                                                                         \
            const float *img = jb->x + b * hw * (B), *d = jb->dy + b * ohw * (B);                                   \
            float *gi = jb->dx + b * hw * (B);                                                                      \
            int64_t zeroed = 0; /* rows [0, zeroed) of gi are zeroed */                                             \
            for (int64_t y = 0; y < g->oh; y++) {                                                                   \
                int64_t h1 = y * g->sh - g->ph + g->kh;                                                             \
                h1 = h1 < g->h ? h1 : g->h;                                                                         \
                if (h1 > zeroed) {                                                                                  \
                    memset(gi + zeroed * rowlen, 0, (size_t)((h1 - zeroed) * rowlen) * sizeof(float));              \
                    zeroed = h1;                                                                                    \
                }                                                                                                   \
                for (int64_t xx = 0; xx < g->ow; xx++) {                                                            \
                    int64_t w[4];                                                                                   \
                    if (!pool_window(g, y, xx, w)) continue;                                                        \
                    const v##B dv = VLD(v##B, d + (y * g->ow + xx) * (B));                                          \
                    if (!g->max) {                                                                                  \
                        const v##B share = dv / pool_div(g, w);                                                     \
                        for (int64_t i = w[0]; i < w[1]; i++)                                                       \
                            for (int64_t j = w[2]; j < w[3]; j++) {                                                 \
                                float *o = gi + (i * g->w + j) * (B);                                               \
                                *(v##B *)o += share;                                                                \
                            }                                                                                       \
                        continue;                                                                                   \
                    }                                                                                               \
                    v##B m = VLD(v##B, img + (w[0] * g->w + w[2]) * (B)), left = dv;                                \
                    for (int64_t i = w[0]; i < w[1]; i++)                                                           \
                        for (int64_t j = w[2]; j < w[3]; j++) {                                                     \
                            const v##B v = VLD(v##B, img + (i * g->w + j) * (B));                                   \
                            m = VSEL(vi##B, v##B, v > m, v, m);                                                     \
                        }                                                                                           \
                    /* the first position equal to the maximum takes dOut; `left` is what is */                     \
                    /* still to be placed there (dOut, then 0 once placed) */                                       \
                    for (int64_t i = w[0]; i < w[1]; i++)                                                           \
                        for (int64_t j = w[2]; j < w[3]; j++) {                                                     \
                            const vi##B hit = VLD(v##B, img + (i * g->w + j) * (B)) == m;                           \
                            float *o = gi + (i * g->w + j) * (B);                                                   \
                            *(v##B *)o += (v##B)((vi##B)left & hit);                                                \
                            left = (v##B)((vi##B)left & ~hit);                                                      \
                        }                                                                                           \
                }                                                                                                   \
            }                                                                                                       \
            if (zeroed < g->h) memset(gi + zeroed * rowlen, 0, (size_t)((g->h - zeroed) * rowlen) * sizeof(float)); \
        }                                                                                                           \
    }
POOL_BLK(16)
POOL_BLK(8)
#undef POOL_BLK
#undef VLD
#undef VSEL

/* Plain NCHW images [lo, hi) (image = one channel of one sample): forward and gradient, the
 * gradient zeroing each image of dX just before its windows add into it (in cache), except
 * where pool_max2's windows tile the image and write every element.  Each image on its own,
 * so a split over threads gives the same values. */
static void pool_fwd_plain(void *arg, int64_t lo, int64_t hi)
{
    const pool_fwd_job *jf = arg;
    const pool_geo *g = jf->g;
    const int64_t hw = g->h * g->w;
    const int full = pool_full(g), max2 = pool_max2(g);
    for (int64_t nc = lo; nc < hi; nc++) {
        const float *img = jf->x + nc * hw;
        float *o = jf->out + nc * g->oh * g->ow;
        if (max2) {
            pool_fwd_max2(g, img, o);
            continue;
        }
        if (full) {
            pool_fwd_full(g, img, o);
            continue;
        }
        for (int64_t y = 0; y < g->oh; y++)
            for (int64_t xx = 0; xx < g->ow; xx++) {
                if (g->max) {
                    int64_t a = pool_argmax(g, img, y, xx);
                    o[y * g->ow + xx] = a < 0 ? 0.0f : img[a];
                    continue;
                }
                int64_t w[4];
                float s = 0.0f;
                if (!pool_window(g, y, xx, w)) {
                    o[y * g->ow + xx] = 0.0f;
                    continue;
                }
                for (int64_t i = w[0]; i < w[1]; i++)
                    for (int64_t j = w[2]; j < w[3]; j++) s += img[i * g->w + j];
                o[y * g->ow + xx] = s / pool_div(g, w);
            }
    }
}

static void pool_bwd_plain(void *arg, int64_t lo, int64_t hi)
{
    const pool_bwd_job *jb = arg;
    const pool_geo *g = jb->g;
    const int64_t hw = g->h * g->w, ohw = g->oh * g->ow;
    const int full = pool_full(g), max2 = pool_max2(g), tiles = pool_max2_tiles(g);
    for (int64_t nc = lo; nc < hi; nc++) {
        const float *img = jb->x + nc * hw, *d = jb->dy + nc * ohw;
        float *gi = jb->dx + nc * hw;
        if (!tiles) memset(gi, 0, (size_t)hw * sizeof(float));
        if (max2) {
            pool_bwd_max2(g, img, d, gi);
            continue;
        }
        if (full) {
            pool_bwd_full(g, img, d, gi);
            continue;
        }
        for (int64_t y = 0; y < g->oh; y++)
            for (int64_t xx = 0; xx < g->ow; xx++) {
                float v = d[y * g->ow + xx];
                if (g->max) {
                    int64_t a = pool_argmax(g, img, y, xx);
                    if (a >= 0) gi[a] += v;
                    continue;
                }
                int64_t w[4];
                if (!pool_window(g, y, xx, w)) continue;
                v /= pool_div(g, w);
                for (int64_t i = w[0]; i < w[1]; i++)
                    for (int64_t j = w[2]; j < w[3]; j++) gi[i * g->w + j] += v;
            }
    }
}

static int run_pool2d(fl_kctx *c)
{
    pool_geo g;
    FL_CHECK(pool_geo_rt(c, &g));
    fl_tensor *x = FL_IN(c, 0), *out = FL_OUT(c, 0);
    int64_t os[4] = {g.n, g.c, g.oh, g.ow}, hw = g.h * g.w;
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, 4, os));
    out->lod_n = 0;
    const int B = fl__layout_block(x->layout);
    if (B == 16 || B == 8) {
        pool_fwd_job jf = {&g, x->data, out->data};
        fl__parallel_for(g.n * (g.c / B), 1, hw * B * (int64_t)sizeof(float), B == 16 ? pool_fwd_blk16 : pool_fwd_blk8,
                         &jf);
        /* a 1x1 output is ordered the same in both layouts: plain, converted by nobody */
        return fl__tensor_set_layout(out, g.oh * g.ow == 1 ? FL_LAYOUT_PLAIN : x->layout);
    }
    FL_CHECK(fl__tensor_to_plain(x));
    pool_fwd_job jf = {&g, x->data, out->data};
    fl__parallel_for(g.n * g.c, 1, hw * (int64_t)sizeof(float), pool_fwd_plain, &jf);
    return FL_OK;
}

/* Grad op: inputs X, Out, Out@GRAD -> X@GRAD.  max: each dOut goes to the first maximum
 * of its window (Paddle: the first x equal to out); avg: dOut / divisor over the window. */
static int run_pool2d_grad(fl_kctx *c)
{
    pool_geo g;
    FL_CHECK(pool_geo_rt(c, &g));
    FL_CHECK(fl__kctx_dense_f32(c, 2));
    fl_tensor *x = FL_IN(c, 0), *dy = FL_IN(c, 2), *dx = FL_OUT(c, 0);
    int64_t hw = g.h * g.w, ohw = g.oh * g.ow;
    if (dy->numel != g.n * g.c * ohw)
        return fl__err(FL_EINVAL, "pool2d_grad: gradient '%s' has %lld elements, expected %lld", fl__kctx_var_name(c, 2, 0),
                       (long long)dy->numel, (long long)(g.n * g.c * ohw));
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, 4, x->shape));
    const int B = fl__layout_block(x->layout);
    if (B == 16 || B == 8) {
        /* a 1x1 dOut (global pooling) is ordered the same in both layouts: read as it is */
        if (ohw != 1) FL_CHECK(fl__tensor_to_layout(dy, x->layout));
        dx->lod_n = 0;
        pool_bwd_job jb = {&g, x->data, dy->data, dx->data};
        fl__parallel_for(g.n * (g.c / B), 1, hw * B * 3 * (int64_t)sizeof(float), B == 16 ? pool_bwd_blk16 : pool_bwd_blk8,
                         &jb);
        return fl__tensor_set_layout(dx, x->layout);
    }
    FL_CHECK(fl__tensor_to_plain(dy));
    dx->lod_n = 0;
    pool_bwd_job jb = {&g, x->data, dy->data, dx->data};
    fl__parallel_for(g.n * g.c, 1, hw * 3 * (int64_t)sizeof(float), pool_bwd_plain, &jb);
    return FL_OK;
}

static int grad_pool2d(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *out = op->out[0].vars[0];
    fl_var *dout = fl__grad_of(g, out), *dx = fl__grad_for(g, x);
    if (!dout || !dx) return FL_OK;
    fl_io in[3] = {FL_IO1("X", x), FL_IO1("Out", out), FL_IO1("Out@GRAD", dout)};
    fl_io o = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, "pool2d_grad", in, 3, &o, 1);
}

const fl_op_def fl__def_pool2d = {"pool2d", {"X"}, {"Out"}, infer_pool2d, run_pool2d, grad_pool2d, NULL};
const fl_op_def fl__def_pool2d_grad = {
    "pool2d_grad", {"X", "Out", "Out@GRAD"}, {"X@GRAD"}, fl__infer_nop, run_pool2d_grad, NULL, NULL};

fl_var *fl_layer_pool2d_ex(fl_var *input, const char *pool_type, const fl_pool2d_attr *attr)
{
    fl_prog *p = fl__prog_of(&input, 1);
    if (!p || p->status != FL_OK) return NULL;
    fl_pool2d_attr none;
    memset(&none, 0, sizeof none);
    if (!attr) attr = &none;
    const char *t = pool_type ? pool_type : "max";
    if (strcmp(t, "max") && strcmp(t, "avg")) {
        fl__prog_error(p, FL_EINVAL, "pool2d: pool_type '%s' (input '%s') must be 'max' or 'avg'", t, input->name);
        return NULL;
    }
    int64_t k[2], s[2], pd[2];
    for (int i = 0; i < 2; i++) {
        k[i] = attr->global_pooling ? -1 : attr->pool_size[i];
        s[i] = attr->stride[i] ? attr->stride[i] : 1;
        pd[i] = attr->padding[i];
    }
    char base[128];
    fl__unique_name(p, "pool2d", base, sizeof base);
    int64_t os[4] = {-1, -1, -1, -1};
    fl_var *out = fl__tmp_var(p, base, FL_FLOAT32, 4, os);
    if (!out) return NULL;
    fl_io in = FL_IO1("X", input), o = FL_IO1("Out", out);
    fl_op *op = fl__op_new(p, "pool2d", &in, 1, &o, 1);
    if (!op || fl__attr_set_s(op, "pooling_type", t) || fl__attr_set_ints(op, "ksize", k, 2) ||
        fl__attr_set_i(op, "global_pooling", attr->global_pooling != 0) || fl__attr_set_ints(op, "strides", s, 2) ||
        fl__attr_set_ints(op, "paddings", pd, 2) || fl__attr_set_i(op, "exclusive", !attr->inclusive) ||
        fl__attr_set_i(op, "adaptive", 0) || fl__attr_set_i(op, "ceil_mode", attr->ceil_mode != 0) ||
        fl__attr_set_s(op, "data_format", "NCHW") || fl__op_finish(op))
        return NULL;
    return out;
}

fl_var *fl_layer_pool2d(fl_var *input, int pool_size, const char *pool_type, int pool_stride, int pool_padding,
                        int global_pooling, int exclusive)
{
    fl_prog *p = fl__prog_of(&input, 1);
    if (!p || p->status != FL_OK) return NULL;
    if (pool_stride < 1) {
        fl__prog_error(p, FL_EINVAL, "pool2d: pool_stride %d (input '%s') must be >= 1", pool_stride, input->name);
        return NULL;
    }
    fl_pool2d_attr a = {
        {pool_size, pool_size}, {pool_stride, pool_stride}, {pool_padding, pool_padding}, global_pooling, !exclusive, 0};
    return fl_layer_pool2d_ex(input, pool_type, &a);
}
