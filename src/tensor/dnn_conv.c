/*
 * dnn_conv.c - 2-D convolutions on oneDNN: forward (bias and activation fused as a post-op),
 * backward-data and backward-weights primitives, created once per shape and direction and
 * kept in the op's cache, as dnn.c keeps matmul primitives.
 *
 * Layout: tensors stay NCHW (filters OIHW, GOIHW with groups) at the boundary.  Each
 * primitive is made with "any" layouts, so oneDNN picks its blocked layouts (nChw16c and
 * the like on AVX-512) and its data type of computation, except where those would pad the
 * channels by more than a quarter of the work: then the activations are NHWC (pick_layout,
 * the same choice in all three directions); every operand whose chosen layout
 * or type differs from the caller's gets a reorder primitive and a buffer, made with the
 * convolution and cached with it.  A step then runs: reorders in, the convolution, reorders
 * out (one stream, waited on once).  The reorders cost one pass over each operand; the
 * numbers are in docs/engine.md.
 *
 * bfloat16: when Input or Filter is bfloat16 (AMP), the products run in bf16 and
 * accumulate in f32, and a float32 output gradient is rounded to bf16 by its reorder; the
 * outputs (Output, Input@GRAD, Filter@GRAD) stay float32, except a forward Output asked for in
 * bfloat16 (y_type, an inference conv2d's out_dtype): the primitive's destination is then
 * bf16, its post-ops (bias, sum, activation) run in f32 and the result is rounded once.  If this oneDNN has no bf16
 * convolution for the CPU at hand, the computation is widened to f32 by the same reorders.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnn_conv.h"

static atomic_uint_fast64_t n_prims, n_shared, n_wskip, n_runs[3];

uint64_t fl__conv_primitives_created(void) { return atomic_load(&n_prims); }
uint64_t fl__conv_dy_reorders_shared(void) { return atomic_load(&n_shared); }
uint64_t fl__conv_filter_reorders_skipped(void) { return atomic_load(&n_wskip); }
uint64_t fl__conv_runs(int dir) { return dir >= 0 && dir < 3 ? atomic_load(&n_runs[dir]) : 0; }

/* FLEET_CONV_ALGO's values, in fl__env_choice order. */
enum { ALGO_AUTO, ALGO_DIRECT, ALGO_WINOGRAD };
static const char *const algo_names[] = {"auto", "direct", "winograd", NULL};

/* Shapes oneDNN 2.6 has Winograd kernels for (F(4x4, 3x3), jit_wino_4x3, AVX-512; bias,
 * relu and sum post-ops, not tanh or sigmoid): float32, groups 1, 3x3, stride 1, dilation 1. */
static int wino_shape(const fl_conv_desc *d)
{
    return d->x_type == FL_FLOAT32 && d->w_type == FL_FLOAT32 && d->g == 1 && d->kh == 3 && d->kw == 3 && d->sh == 1 &&
           d->sw == 1 && d->dh == 1 && d->dw == 1;
}

/* Where Winograd pays, per direction: at least min_ch input and output channels and at least
 * min_px output pixels over the batch (n x oh x ow).  F(4x4, 3x3) does a quarter of the
 * multiplications on 4x4 output tiles, but transforms the filter (c x m x 36) on every call,
 * pads the image to whole tiles and runs its products over the tiles: it takes 0.3-0.6 of
 * direct's time on every 3x3 convolution of ResNet-50 and VGG-16 at batch 8 and 32 (64x56x56
 * at batch 8: 0.41, 512x7x7: 0.80 forward, 0.52 backward-weights), and loses where there are
 * few tiles (512x7x7 at batch 2: 1.65x; 512x4x4 at batch 8: 1.8x forward, 0.93 backward-weights)
 * or few channels (16x14x14 at batch 8: 1.3x); backward-weights wins from fewer pixels.  One
 * thread, oneDNN 2.6.3 on AVX-512, interleaved medians (BENCHMARKS.md, "Winograd for 3x3
 * convolutions").  The rule reads the shape only: every rank and every run choose alike. */
static const struct {
    int64_t min_ch, min_px;
} wino_rule[3] = {{32, 392}, {32, 392}, {32, 128}}; /* FL_CONV_FWD, _BWD_DATA, _BWD_WEIGHTS */

static int wino_pays(const fl_conv_desc *d, int dir)
{
    return d->c >= wino_rule[dir].min_ch && d->m >= wino_rule[dir].min_ch && d->n * d->oh * d->ow >= wino_rule[dir].min_px;
}

int fl__conv_winograd(const fl_conv_desc *d, int dir)
{
    int algo;
    int st = fl__env_choice("FLEET_CONV_ALGO", algo_names, ALGO_AUTO, &algo);
    if (st != FL_OK) return st;
    if (algo == ALGO_DIRECT || !wino_shape(d)) return 0;
    return algo == ALGO_WINOGRAD || wino_pays(d, dir);
}

#ifndef FL_HAVE_DNNL

static int no_dnnl(void)
{
    return fl__err(FL_EUNSUPPORTED, "conv2d: this build has no oneDNN (install libdnnl-dev, then make clean all)");
}
int fl__conv_fwd(fl_conv_cache **cache, const fl_conv_desc *d, const void *x, const void *w, const float *bias, void *y)
{
    (void)cache, (void)d, (void)x, (void)w, (void)bias, (void)y;
    return no_dnnl();
}
int fl__conv_fwd_sum(fl_conv_cache **cache, const fl_conv_desc *d, const void *x, const void *w, const float *bias,
                     const void *res, void *y)
{
    (void)cache, (void)d, (void)x, (void)w, (void)bias, (void)res, (void)y;
    return no_dnnl();
}
int fl__conv_bwd_data(fl_conv_cache **cache, const fl_conv_desc *d, const void *dy, const void *w, float *dx)
{
    (void)cache, (void)d, (void)dy, (void)w, (void)dx;
    return no_dnnl();
}
int fl__conv_bwd_weights(fl_conv_cache **cache, const fl_conv_desc *d, const void *x, const void *dy, float *dw)
{
    (void)cache, (void)d, (void)x, (void)dy, (void)dw;
    return no_dnnl();
}
int fl__conv_bwd(fl_conv_cache **cache, const fl_conv_desc *d, const void *x, const void *dy, const void *w, float *dx,
                 float *dw)
{
    (void)cache, (void)d, (void)x, (void)dy, (void)w, (void)dx, (void)dw;
    return no_dnnl();
}
int fl__conv_filter_stamp(fl_conv_cache **cache, const fl_tensor *w)
{
    (void)cache, (void)w;
    return FL_OK; /* nothing is cached without oneDNN */
}
void fl__conv_cache_free(fl_conv_cache *cache) { (void)cache; }
int fl__conv_out_layout(const fl_conv_cache *cache)
{
    (void)cache;
    return FL_LAYOUT_PLAIN;
}
int fl__conv_channels_last(const fl_conv_desc *d)
{
    (void)d;
    return 0;
}
const char *fl__conv_impl(const fl_conv_cache *cache, int dir)
{
    (void)cache, (void)dir;
    return "";
}

#else

#define SLOTS 8
#define MAX_PORTS 4

enum { FWD = FL_CONV_FWD, BWD_DATA = FL_CONV_BWD_DATA, BWD_WEIGHTS = FL_CONV_BWD_WEIGHTS };
enum { PLAIN_BELOW = 4 }; /* channels per group under which backward-data stays NCHW */
static const char *const dir_name[] = {"forward", "backward-data", "backward-weights"};

typedef struct {
    fl_conv_desc d; /* act and has_bias zero for the backward directions */
    int dir;
    int wino; /* fl__conv_winograd's choice (made direct where oneDNN has no Winograd kernel) */
} conv_key;

/* One operand: the caller's memory and, when oneDNN chose another layout or type, its
 * own buffer with the reorder between the two. */
typedef struct {
    int arg; /* DNNL_ARG_* */
    int out; /* written by the convolution: reordered to the caller's after it */
    dnnl_memory_t user;
    dnnl_memory_t inner; /* NULL: the convolution uses `user` directly */
    dnnl_primitive_t re; /* user -> inner, or inner -> user for an output */
} port;

typedef struct {
    conv_key key;
    int used, np;
    int out_lay; /* layout of the caller's output activation */
    uint64_t last;
    dnnl_primitive_t prim;
    port p[MAX_PORTS];
    dnnl_memory_t res;       /* the sum post-op's residual (layout d.res_lay) */
    dnnl_primitive_t res_re; /* residual -> the memory the convolution writes, before it */
    /* forward: the filter tensor, version and data the reordered filter was made from (w_t
     * NULL: unknown, reorder again) */
    const fl_tensor *w_t;
    uint64_t w_ver;
    const void *w_data;
    char impl[48]; /* oneDNN's name of the convolution's implementation */
} entry;

struct fl_conv_cache {
    uint64_t tick;
    const void *res;      /* fl__conv_fwd_sum's residual, for the call in progress */
    const fl_tensor *w_t; /* fl__conv_filter_stamp's, for the next forward call */
    uint64_t w_ver;
    int out_lay;      /* of the last call */
    char impl[3][48]; /* entry.impl of each direction's last call */
    dnnl_stream_t stream;
    entry e[SLOTS];
};

static void entry_clear(entry *e)
{
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->res_re) dnnl_primitive_destroy(e->res_re);
    if (e->res) dnnl_memory_destroy(e->res);
    for (int i = 0; i < e->np; i++) {
        if (e->p[i].re) dnnl_primitive_destroy(e->p[i].re);
        if (e->p[i].inner) dnnl_memory_destroy(e->p[i].inner);
        if (e->p[i].user) dnnl_memory_destroy(e->p[i].user);
    }
    memset(e, 0, sizeof *e);
}

static dnnl_alg_kind_t act_alg(int act)
{
    return act == FL_ACT_RELU ? dnnl_eltwise_relu : act == FL_ACT_TANH ? dnnl_eltwise_tanh : dnnl_eltwise_logistic;
}

static dnnl_data_type_t dt_of(fl_dtype t) { return t == FL_BFLOAT16 ? dnnl_bf16 : dnnl_f32; }

/* The memory descriptors of a convolution: x, w, y and bias, with the given types; the
 * activations (x, y) in the caller's layout (LAY_PLAIN: NCHW, filters (G)OIHW), in
 * channels-last (LAY_NHWC; filters "any") or all "any" (LAY_ANY: oneDNN's choice). */
typedef struct {
    dnnl_memory_desc_t x, w, y, b;
} conv_mds;

enum { LAY_ANY, LAY_PLAIN, LAY_NHWC };
static const char *const lay_name[] = {"oneDNN's layouts", "NCHW", "NHWC"};

static dnnl_status_t mds_init(conv_mds *m, const fl_conv_desc *d, dnnl_data_type_t xt, dnnl_data_type_t wt,
                              dnnl_data_type_t yt, int lay)
{
    dnnl_dims_t xd = {d->n, d->c, d->h, d->w}, yd = {d->n, d->m, d->oh, d->ow}, bd = {d->m};
    dnnl_dims_t wd = {d->m, d->c / d->g, d->kh, d->kw}, gwd = {d->g, d->m / d->g, d->c / d->g, d->kh, d->kw};
    dnnl_format_tag_t any = dnnl_format_tag_any, act = lay == LAY_PLAIN ? dnnl_nchw : lay == LAY_NHWC ? dnnl_nhwc : any;
    int plain = lay == LAY_PLAIN;
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(&m->x, 4, xd, xt, act);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&m->y, 4, yd, yt, act);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&m->b, 1, bd, dnnl_f32, dnnl_a);
    if (s == dnnl_success)
        s = d->g > 1 ? dnnl_memory_desc_init_by_tag(&m->w, 5, gwd, wt, plain ? dnnl_goihw : any)
                     : dnnl_memory_desc_init_by_tag(&m->w, 4, wd, wt, plain ? dnnl_oihw : any);
    return s;
}

/* The convolution descriptor of one direction over the descriptors m. */
static dnnl_status_t desc_init(dnnl_convolution_desc_t *cd, const fl_conv_desc *d, int dir, const conv_mds *m, int bias,
                               dnnl_alg_kind_t alg)
{
    dnnl_dims_t st = {d->sh, d->sw}, di = {d->dh - 1, d->dw - 1}, pl = {d->ph, d->pw};
    /* right padding so that (h + pl + pr - extent) / s + 1 == oh exactly */
    dnnl_dims_t pr = {(d->oh - 1) * d->sh + (d->kh - 1) * d->dh + 1 - d->h - d->ph,
                      (d->ow - 1) * d->sw + (d->kw - 1) * d->dw + 1 - d->w - d->pw};
    if (dir == FWD)
        return dnnl_dilated_convolution_forward_desc_init(cd, dnnl_forward_training, alg, &m->x, &m->w, bias ? &m->b : NULL,
                                                          &m->y, st, di, pl, pr);
    if (dir == BWD_DATA)
        return dnnl_dilated_convolution_backward_data_desc_init(cd, alg, &m->x, &m->w, &m->y, st, di, pl, pr);
    return dnnl_dilated_convolution_backward_weights_desc_init(cd, alg, &m->x, &m->w, NULL, &m->y, st, di, pl, pr);
}

/* m (NCHW) in layout lay of layout.h instead. */
static dnnl_status_t md_in_layout(dnnl_memory_desc_t *m, int lay)
{
    int b = fl__layout_block(lay);
    dnnl_format_tag_t tag = b == 16 ? dnnl_nChw16c : b == 8 ? dnnl_nChw8c : dnnl_nchw;
    dnnl_dims_t dims;
    memcpy(dims, m->dims, sizeof dims);
    return dnnl_memory_desc_init_by_tag(m, m->ndims, dims, m->data_type, tag);
}

#define TRY(call, what)          \
    do {                         \
        s = (call);              \
        if (s != dnnl_success) { \
            step = (what);       \
            goto out;            \
        }                        \
    } while (0)

/* Adds the operand `arg` (caller's descriptor `user`, the primitive's `want`) to e. */
static dnnl_status_t port_add(entry *e, dnnl_engine_t eng, int arg, int out, const dnnl_memory_desc_t *user,
                              const dnnl_memory_desc_t *want)
{
    port *p = &e->p[e->np++];
    p->arg = arg, p->out = out;
    dnnl_status_t s = dnnl_memory_create(&p->user, user, eng, DNNL_MEMORY_NONE);
    if (s != dnnl_success || dnnl_memory_desc_equal(user, want)) return s;
    if ((s = dnnl_memory_create(&p->inner, want, eng, DNNL_MEMORY_ALLOCATE)) != dnnl_success) return s;
    dnnl_primitive_desc_t rpd = NULL;
    s = out ? dnnl_reorder_primitive_desc_create(&rpd, want, eng, user, eng, NULL)
            : dnnl_reorder_primitive_desc_create(&rpd, user, eng, want, eng, NULL);
    if (s == dnnl_success) s = dnnl_primitive_create(&p->re, rpd);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (s == dnnl_success) atomic_fetch_add(&n_prims, 1);
    return s;
}

/* Channels-last activations (LAY_NHWC) instead of oneDNN's choice (LAY_ANY) for d computing
 * in ct.  oneDNN's blocked layouts (nChw16c and the like) pad the channels to the vector
 * width; where that padding adds more than a quarter to the product's work (input channels
 * x output channels, padded over actual), the NHWC kernels, which do not pad, win: LeNet's
 * second convolution, [32, 20, 12, 12] 5x5 x50 (padded to 32 x 64, 2.05x the work), took
 * forward 0.54 ms against 0.93, backward-data 0.72 against 0.93, backward-weights 0.52
 * against 1.00 (1 thread, AVX-512; the reorders from and to NCHW cost the same in both);
 * held to AVX2 (8-channel blocks: 24 x 56, 1.34x) 0.97 / 1.81 / 1.14 ms against 1.16 / 2.03 /
 * 1.34.  Channels that fill the blocks (no padding) and inputs of under PLAIN_BELOW
 * channels (oneDNN's direct kernels read those NCHW as they are) keep LAY_ANY, as do groups. */
static int pick_layout(dnnl_engine_t eng, const fl_conv_desc *d, dnnl_data_type_t ct)
{
    if (d->g != 1 || d->c < PLAIN_BELOW) return LAY_ANY;
    conv_mds any;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd = NULL;
    if (mds_init(&any, d, ct, ct, dnnl_f32, LAY_ANY) != dnnl_success ||
        desc_init(&cd, d, FWD, &any, 0, dnnl_convolution_direct) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL) != dnnl_success)
        return LAY_ANY;
    const dnnl_memory_desc_t *x = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *y = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    double work = (double)x->padded_dims[1] * (double)y->padded_dims[1] / ((double)d->c * (double)d->m);
    dnnl_primitive_desc_destroy(pd);
    return work > 1.25 ? LAY_NHWC : LAY_ANY;
}

/* The primitive descriptor of key k computing in `ct` (f32 or bf16) with activations in
 * layout `lay` by algorithm `alg`; *hint gets the forward one a backward direction needs (by
 * the same algorithm). */
static dnnl_status_t pd_make_in(dnnl_primitive_desc_t *pd, dnnl_primitive_desc_t *hint, dnnl_engine_t eng,
                                const conv_key *k, dnnl_data_type_t ct, const dnnl_primitive_attr_t attr, int lay,
                                dnnl_alg_kind_t alg)
{
    const fl_conv_desc *d = &k->d;
    conv_mds any;
    dnnl_convolution_desc_t cd;
    /* a bfloat16 forward output is written so by a bf16 convolution; computed in f32 (no bf16
     * kernel here), the output's reorder rounds it */
    dnnl_data_type_t yt = k->dir == FWD && ct == dnnl_bf16 ? dt_of(d->y_type) : dnnl_f32;
    dnnl_status_t s = mds_init(&any, d, ct, ct, yt, lay);
    if (s == dnnl_success && k->dir != FWD) { /* the hint: a forward convolution of the same shape */
        s = desc_init(&cd, d, FWD, &any, 0, alg);
        if (s == dnnl_success) s = dnnl_primitive_desc_create(hint, &cd, NULL, eng, NULL);
    }
    if (s != dnnl_success) return s;
    conv_mds m = any;
    /* the gradients of the inputs are float32; the output gradient is read in ct.  The
     * gradient of an input of few channels per group stays NCHW: blocked layouts pad the
     * channels to 16: for [64, 1, 28, 28] 5x5 x20, 4.5 ms blocked against 2.1 ms in NCHW
     * (oneDNN's gemm-based kernel; ONEDNN_VERBOSE=1 build/bench/bench_conv, loaded machine). */
    if (k->dir == BWD_DATA) s = mds_init(&m, d, dnnl_f32, ct, ct, d->c / d->g < PLAIN_BELOW ? LAY_PLAIN : lay);
    if (k->dir == BWD_WEIGHTS) s = mds_init(&m, d, ct, dnnl_f32, ct, lay);
    if (s == dnnl_success) s = desc_init(&cd, d, k->dir, &m, d->has_bias, alg);
    if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, &cd, attr, eng, *hint);
    return s;
}

/* pd_make_in in the layout pick_layout chooses (*lay), or in oneDNN's layouts when this
 * oneDNN has no NHWC kernel for it; by Winograd when k asks for it and oneDNN has it (in f32
 * only), else direct. */
static dnnl_status_t pd_make(dnnl_primitive_desc_t *pd, dnnl_primitive_desc_t *hint, dnnl_engine_t eng, const conv_key *k,
                             dnnl_data_type_t ct, const dnnl_primitive_attr_t attr, int *lay)
{
    dnnl_status_t s = dnnl_unimplemented;
    *lay = pick_layout(eng, &k->d, ct);
    if (k->wino && ct == dnnl_f32 && *lay == LAY_ANY) {
        s = pd_make_in(pd, hint, eng, k, ct, attr, *lay, dnnl_convolution_winograd);
        if (s != dnnl_unimplemented) return s;
        if (*hint) dnnl_primitive_desc_destroy(*hint);
        *hint = NULL;
    }
    s = pd_make_in(pd, hint, eng, k, ct, attr, *lay, dnnl_convolution_direct);
    if (s == dnnl_unimplemented && *lay == LAY_NHWC) {
        if (*hint) dnnl_primitive_desc_destroy(*hint);
        *hint = NULL;
        *lay = LAY_ANY;
        s = pd_make_in(pd, hint, eng, k, ct, attr, *lay, dnnl_convolution_direct);
    }
    return s;
}

/* FLEET_PROFILE_OPS=1: time inside the convolution ops by direction and part (the reorder
 * of each operand, the residual's copy, the convolution itself), reported at exit after the
 * executor's per-op rows as "profile: conv DIRECTION PART calls N ms T". */
enum { PART_PORT0, PART_RES = MAX_PORTS, PART_CONV, PART_MAKE, PARTS };
static const char *const port_name[3][MAX_PORTS] = {{"reorder of x", "reorder of the filter", "reorder of y", "bias"},
                                                    {"reorder of dx", "reorder of the filter", "reorder of dy", ""},
                                                    {"reorder of x", "reorder of dw", "reorder of dy", ""}};
static struct {
    pthread_once_t once;
    int on;
    atomic_uint_fast64_t ns[3][PARTS], calls[3][PARTS];
} prof = {PTHREAD_ONCE_INIT, 0, {{0}}, {{0}}};

static void prof_report(void)
{
    double total = 0;
    for (int d = 0; d < 3; d++)
        for (int p = 0; p < PARTS; p++) {
            uint64_t n = atomic_load(&prof.calls[d][p]);
            if (!n) continue;
            double ms = (double)atomic_load(&prof.ns[d][p]) / 1e6;
            total += ms;
            fprintf(stderr, "profile: conv %s %s calls %llu ms %.1f\n", dir_name[d],
                    p == PART_RES    ? "residual copy"
                    : p == PART_CONV ? "convolution"
                    : p == PART_MAKE ? "primitive creation"
                                     : port_name[d][p],
                    (unsigned long long)n, ms);
        }
    fprintf(stderr, "profile: conv primitives and reorders ms %.1f\n", total);
}

static void prof_init(void)
{
    int64_t on = 0;
    if (fl__env_int("FLEET_PROFILE_OPS", 0, 0, 1, &on) != FL_OK) on = 0;
    prof.on = (int)on;
    if (on) atexit(prof_report);
}

/* t0 (when profiling) moved to now after adding the time since it to (dir, part). */
static void prof_part(int dir, int part, uint64_t *t0)
{
    if (!*t0) return;
    uint64_t t = fl__now_ns();
    atomic_fetch_add(&prof.ns[dir][part], t - *t0);
    atomic_fetch_add(&prof.calls[dir][part], 1);
    *t0 = t;
}

static int entry_make(entry *e, dnnl_engine_t eng, const conv_key *k)
{
    const fl_conv_desc *d = &k->d;
    dnnl_status_t s = dnnl_success;
    const char *step = "";
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL, hint = NULL;
    int bf16 = d->x_type == FL_BFLOAT16 || d->w_type == FL_BFLOAT16;
    memset(e, 0, sizeof *e);
    TRY(dnnl_post_ops_create(&po), "post-ops");
    if (d->sum) TRY(dnnl_post_ops_append_sum(po, 1.0f), "sum post-op");
    if (d->act) TRY(dnnl_post_ops_append_eltwise(po, 1.0f, act_alg(d->act), 0.0f, 0.0f), "eltwise post-op");
    TRY(dnnl_primitive_attr_create(&attr), "attributes");
    TRY(dnnl_primitive_attr_set_post_ops(attr, po), "attributes");
    int lay = LAY_ANY;
    s = pd_make(&pd, &hint, eng, k, bf16 ? dnnl_bf16 : dnnl_f32, attr, &lay);
    if (s == dnnl_unimplemented && bf16) { /* no bf16 convolution here: computed in f32 */
        if (hint) dnnl_primitive_desc_destroy(hint);
        hint = NULL;
        s = pd_make(&pd, &hint, eng, k, dnnl_f32, attr, &lay);
    }
    if (s != dnnl_success) {
        step = "primitive descriptor";
        goto out;
    }
    TRY(dnnl_primitive_create(&e->prim, pd), "primitive");
    atomic_fetch_add(&n_prims, 1);
    conv_mds u; /* the caller's tensors: NCHW / (G)OIHW in their own types */
    static const dnnl_query_t q[3][3] = {{dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
                                         {dnnl_query_diff_src_md, dnnl_query_weights_md, dnnl_query_diff_dst_md},
                                         {dnnl_query_src_md, dnnl_query_diff_weights_md, dnnl_query_diff_dst_md}};
    static const int args[3][3] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                                   {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST},
                                   {DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST}};
    static const int outs[3][3] = {{0, 0, 1}, {1, 0, 0}, {0, 1, 0}};
    dnnl_data_type_t xt = k->dir == BWD_DATA ? dnnl_f32 : dt_of(d->x_type);
    dnnl_data_type_t wt = k->dir == BWD_WEIGHTS ? dnnl_f32 : dt_of(d->w_type);
    dnnl_data_type_t yt = k->dir == FWD ? dt_of(d->y_type) : dt_of(d->dy_type);
    TRY(mds_init(&u, d, xt, wt, yt, LAY_PLAIN), "caller's descriptors");
    const dnnl_memory_desc_t *um[3] = {&u.x, &u.w, &u.y};
    if (k->dir != BWD_DATA && d->x_lay) TRY(md_in_layout(&u.x, d->x_lay), "caller's descriptors");
    if (k->dir != FWD && d->y_lay) TRY(md_in_layout(&u.y, d->y_lay), "caller's descriptors");
    if (d->blocked_out && k->dir != BWD_WEIGHTS) { /* the output as the convolution writes it, if layout.h has it */
        dnnl_memory_desc_t *o = k->dir == FWD ? &u.y : &u.x;
        const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, q[k->dir][k->dir == FWD ? 2 : 0], 0);
        for (int ol = 1; ol < FL_LAYOUT_COUNT && !e->out_lay; ol++) {
            dnnl_memory_desc_t m = *o;
            if (fl__layout_fits(ol, 4, m.dims) && md_in_layout(&m, ol) == dnnl_success && dnnl_memory_desc_equal(&m, want))
                *o = m, e->out_lay = ol;
        }
    }
    for (int i = 0; i < 3; i++)
        TRY(port_add(e, eng, args[k->dir][i], outs[k->dir][i], um[i], dnnl_primitive_desc_query_md(pd, q[k->dir][i], 0)),
            "operand reorder");
    if (k->dir == FWD && d->has_bias) TRY(port_add(e, eng, DNNL_ARG_BIAS, 0, &u.b, &u.b), "bias memory");
    if (k->dir == FWD && d->sum) { /* the residual goes in first: a reorder (threaded, any layout) */
        dnnl_memory_desc_t rm;
        dnnl_dims_t yd = {d->n, d->m, d->oh, d->ow};
        dnnl_primitive_desc_t rpd = NULL;
        const dnnl_memory_desc_t *to = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
        TRY(dnnl_memory_desc_init_by_tag(&rm, 4, yd, dt_of(d->res_type), dnnl_nchw), "residual memory");
        if (d->res_lay) TRY(md_in_layout(&rm, d->res_lay), "residual memory");
        TRY(dnnl_memory_create(&e->res, &rm, eng, DNNL_MEMORY_NONE), "residual memory");
        s = dnnl_reorder_primitive_desc_create(&rpd, &rm, eng, to, eng, NULL);
        if (s == dnnl_success) s = dnnl_primitive_create(&e->res_re, rpd);
        if (rpd) dnnl_primitive_desc_destroy(rpd);
        TRY(s, "residual reorder");
        atomic_fetch_add(&n_prims, 1);
    }
    const char *impl = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(e->impl, sizeof e->impl, "%s", impl);
    if (fl__log_enabled(FL_LOG_DEBUG, FL_SUB_TENSOR)) {
        int nre = 0;
        for (int i = 0; i < e->np; i++) nre += e->p[i].re != NULL;
        FL_DEBUG(FL_SUB_TENSOR, "oneDNN conv %s n%lld c%lld %lldx%lld -> m%lld k%lldx%lld g%lld %s: %s in %s, %d reorders",
                 dir_name[k->dir], (long long)d->n, (long long)d->c, (long long)d->h, (long long)d->w, (long long)d->m,
                 (long long)d->kh, (long long)d->kw, (long long)d->g, bf16 ? "bf16" : "f32", impl, lay_name[lay], nre);
    }
out:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (hint) dnnl_primitive_desc_destroy(hint);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (po) dnnl_post_ops_destroy(po);
    if (s != dnnl_success) {
        entry_clear(e);
        return fl__err(FL_EUNSUPPORTED,
                       "oneDNN conv2d %s: input [%lld, %lld, %lld, %lld] %s, filter [%lld, %lld, %lld, %lld] %s, "
                       "strides %lldx%lld, paddings %lldx%lld, dilations %lldx%lld, groups %lld: %s failed: %s",
                       dir_name[k->dir], (long long)d->n, (long long)d->c, (long long)d->h, (long long)d->w,
                       fl_dtype_name(d->x_type), (long long)d->m, (long long)(d->c / d->g), (long long)d->kh,
                       (long long)d->kw, fl_dtype_name(d->w_type), (long long)d->sh, (long long)d->sw, (long long)d->ph,
                       (long long)d->pw, (long long)d->dh, (long long)d->dw, (long long)d->g, step, dnnl_status2str(s));
    }
    e->key = *k;
    e->used = 1;
    return FL_OK;
}

/* Runs direction `dir` of d with the operands' data in port order (x, w, y, bias for the
 * forward; dx, w, dy; x, dw, dy).  A backward direction with `dy_in` (not NULL): when *dy_in
 * is the output gradient already reordered (by the other backward direction of the same
 * step) into the layout this one reads, it is read from there instead of reordered again;
 * when *dy_in is NULL it gets this direction's reordered copy (NULL if none). */
static int conv_run(fl_conv_cache **cp, const fl_conv_desc *dd, int dir, void *const data[MAX_PORTS], dnnl_memory_t *dy_in)
{
    if (fl__gemm_lib() < 0) return fl__gemm_lib();
    dnnl_engine_t eng = fl__dnn_enter();
    if (!eng) return fl_last_status();
    if (!*cp && !(*cp = calloc(1, sizeof **cp))) return fl__err(FL_ENOMEM, "conv2d: out of memory");
    fl_conv_cache *cache = *cp;
    const fl_tensor *w_t = dir == FWD ? cache->w_t : NULL; /* the stamp serves one call */
    const uint64_t w_ver = cache->w_ver;
    cache->w_t = NULL, cache->w_ver = 0;
    if (!cache->stream) {
        dnnl_status_t s = dnnl_stream_create(&cache->stream, eng, dnnl_stream_default_flags);
        if (s != dnnl_success) return fl__err(FL_EUNSUPPORTED, "oneDNN: could not create a stream: %s", dnnl_status2str(s));
    }
    conv_key k;
    memset(&k, 0, sizeof k);
    k.d = *dd;
    k.dir = dir;
    k.wino = fl__conv_winograd(dd, dir);
    if (k.wino < 0) return k.wino;
    if (dir != FWD) k.d.act = 0, k.d.has_bias = 0, k.d.sum = 0, k.d.res_lay = 0, k.d.y_type = FL_FLOAT32;
    if (!k.d.sum) k.d.res_type = FL_FLOAT32;
    if (dir == FWD) k.d.y_lay = 0, k.d.dy_type = FL_FLOAT32;
    if (dir == BWD_DATA) k.d.x_lay = 0;
    if (dir == BWD_WEIGHTS) k.d.blocked_out = 0;
    entry *e = NULL, *victim = &cache->e[0];
    for (int i = 0; i < SLOTS && !e; i++) {
        entry *x = &cache->e[i];
        if (x->used && !memcmp(&x->key, &k, sizeof k)) e = x;
        else if (!x->used || (victim->used && x->last < victim->last)) victim = x;
    }
    pthread_once(&prof.once, prof_init);
    uint64_t t0 = prof.on ? fl__now_ns() : 0;
    if (!e) {
        entry_clear(victim);
        FL_CHECK(entry_make(victim, eng, &k));
        e = victim;
        prof_part(dir, PART_MAKE, &t0);
    }
    e->last = ++cache->tick;
    dnnl_exec_arg_t args[MAX_PORTS];
    dnnl_status_t s = dnnl_success;
    const char *step = "reorder";
    enum { W = 1, DY = 2 }; /* the filter's port; the output gradient's in both backward directions */
    int reuse = 0;
    if (dy_in && *dy_in && e->p[DY].inner) {
        const dnnl_memory_desc_t *have = NULL, *want = NULL;
        dnnl_memory_get_memory_desc(*dy_in, &have);
        dnnl_memory_get_memory_desc(e->p[DY].inner, &want);
        reuse = have && want && dnnl_memory_desc_equal(have, want);
    }
    if (t0) t0 = fl__now_ns();
    for (int i = 0; i < e->np && s == dnnl_success; i++) {
        port *p = &e->p[i];
        dnnl_memory_set_data_handle(p->user, data[i]);
        args[i] = (dnnl_exec_arg_t){p->arg, p->inner ? p->inner : p->user};
        if (i == DY && reuse) {
            args[i].memory = *dy_in;
            continue;
        }
        if (i == W && dir == FWD && p->re) { /* the reordered filter is still w's: keep it */
            int keep = w_t && e->w_t == w_t && e->w_ver == w_ver && e->w_data == data[i];
            e->w_t = NULL; /* until the reorder below has run */
            if (keep) {
                e->w_t = w_t;
                atomic_fetch_add(&n_wskip, 1);
                continue;
            }
        }
        if (p->re && !p->out) {
            dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, p->user}, {DNNL_ARG_TO, p->inner}};
            s = dnnl_primitive_execute(p->re, cache->stream, 2, ra);
            prof_part(dir, PART_PORT0 + i, &t0);
        }
    }
    if (e->res_re && s == dnnl_success) { /* the sum post-op's residual into the output */
        dnnl_memory_set_data_handle(e->res, (void *)cache->res);
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, e->res}, {DNNL_ARG_TO, e->p[2].inner ? e->p[2].inner : e->p[2].user}};
        s = dnnl_primitive_execute(e->res_re, cache->stream, 2, ra);
        prof_part(dir, PART_RES, &t0);
    }
    if (s == dnnl_success) {
        step = "convolution";
        s = dnnl_primitive_execute(e->prim, cache->stream, e->np, args);
        atomic_fetch_add(&n_runs[dir], 1);
        prof_part(dir, PART_CONV, &t0);
    }
    for (int i = 0; i < e->np && s == dnnl_success; i++) {
        port *p = &e->p[i];
        if (!p->re || !p->out) continue;
        step = "reorder";
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, p->inner}, {DNNL_ARG_TO, p->user}};
        s = dnnl_primitive_execute(p->re, cache->stream, 2, ra);
        prof_part(dir, PART_PORT0 + i, &t0);
    }
    if (s == dnnl_success) s = dnnl_stream_wait(cache->stream);
    if (s != dnnl_success)
        return fl__err(FL_EUNSUPPORTED, "oneDNN conv2d %s: input [%lld, %lld, %lld, %lld]: %s failed: %s", dir_name[dir],
                       (long long)dd->n, (long long)dd->c, (long long)dd->h, (long long)dd->w, step, dnnl_status2str(s));
    if (dy_in && !*dy_in) *dy_in = e->p[DY].inner;
    if (reuse) atomic_fetch_add(&n_shared, 1);
    if (dir == FWD && w_t) e->w_t = w_t, e->w_ver = w_ver, e->w_data = data[W];
    if (dir != BWD_WEIGHTS) cache->out_lay = e->out_lay;
    memcpy(cache->impl[dir], e->impl, sizeof e->impl);
    return FL_OK;
}

int fl__conv_filter_stamp(fl_conv_cache **cache, const fl_tensor *w)
{
    if (!*cache && !(*cache = calloc(1, sizeof **cache))) return fl__err(FL_ENOMEM, "conv2d: out of memory");
    (*cache)->w_t = w;
    (*cache)->w_ver = fl__tensor_version(w);
    return FL_OK;
}

int fl__conv_fwd(fl_conv_cache **cache, const fl_conv_desc *d, const void *x, const void *w, const float *bias, void *y)
{
    if (d->n == 0) return FL_OK;
    void *data[MAX_PORTS] = {(void *)x, (void *)w, y, (void *)bias};
    return conv_run(cache, d, FWD, data, NULL);
}

int fl__conv_fwd_sum(fl_conv_cache **cache, const fl_conv_desc *d, const void *x, const void *w, const float *bias,
                     const void *res, void *y)
{
    if (d->n == 0) return FL_OK;
    if (!*cache && !(*cache = calloc(1, sizeof **cache))) return fl__err(FL_ENOMEM, "conv2d: out of memory");
    void *data[MAX_PORTS] = {(void *)x, (void *)w, y, (void *)bias};
    (*cache)->res = res;
    int st = conv_run(cache, d, FWD, data, NULL);
    (*cache)->res = NULL;
    return st;
}

int fl__conv_bwd_data(fl_conv_cache **cache, const fl_conv_desc *d, const void *dy, const void *w, float *dx)
{
    if (d->n == 0) return FL_OK;
    void *data[MAX_PORTS] = {dx, (void *)w, (void *)dy, NULL};
    return conv_run(cache, d, BWD_DATA, data, NULL);
}

int fl__conv_bwd_weights(fl_conv_cache **cache, const fl_conv_desc *d, const void *x, const void *dy, float *dw)
{
    if (d->n == 0) {
        memset(dw, 0, (size_t)(d->m * (d->c / d->g) * d->kh * d->kw) * sizeof(float));
        return FL_OK;
    }
    void *data[MAX_PORTS] = {(void *)x, dw, (void *)dy, NULL};
    return conv_run(cache, d, BWD_WEIGHTS, data, NULL);
}

int fl__conv_bwd(fl_conv_cache **cache, const fl_conv_desc *d, const void *x, const void *dy, const void *w, float *dx,
                 float *dw)
{
    if (d->n == 0 || !dx || !dw) {
        if (dx) FL_CHECK(fl__conv_bwd_data(cache, d, dy, w, dx));
        return dw ? fl__conv_bwd_weights(cache, d, x, dy, dw) : FL_OK;
    }
    dnnl_memory_t dy_in = NULL; /* the backward-data's reordered dy, if any */
    void *dd[MAX_PORTS] = {dx, (void *)w, (void *)dy, NULL}, *dwd[MAX_PORTS] = {(void *)x, dw, (void *)dy, NULL};
    FL_CHECK(conv_run(cache, d, BWD_DATA, dd, &dy_in));
    return conv_run(cache, d, BWD_WEIGHTS, dwd, &dy_in);
}

int fl__conv_channels_last(const fl_conv_desc *d)
{
    if (fl__gemm_lib() < 0) return 0;
    dnnl_engine_t eng = fl__dnn_enter();
    if (!eng) return 0;
    int bf16 = d->x_type == FL_BFLOAT16 || d->w_type == FL_BFLOAT16;
    return pick_layout(eng, d, bf16 ? dnnl_bf16 : dnnl_f32) == LAY_NHWC;
}

int fl__conv_out_layout(const fl_conv_cache *cache) { return cache ? cache->out_lay : FL_LAYOUT_PLAIN; }

const char *fl__conv_impl(const fl_conv_cache *cache, int dir)
{
    return cache && dir >= FWD && dir <= BWD_WEIGHTS ? cache->impl[dir] : "";
}

void fl__conv_cache_free(fl_conv_cache *cache)
{
    if (!cache) return;
    for (int i = 0; i < SLOTS; i++) entry_clear(&cache->e[i]);
    if (cache->stream) dnnl_stream_destroy(cache->stream);
    free(cache);
}

#endif /* FL_HAVE_DNNL */
