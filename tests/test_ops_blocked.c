/* test_ops_blocked.c - the kernels that read oneDNN's blocked layouts themselves and split
 * their work over FLEET_NUM_THREADS=2 (src/tensor/parallel.c's fl__parallel_for):
 * fl__parallel_for covers a range once, in chunks at multiples of the grain, on the helper
 * only when asked and worth it; pool2d and pool2d_grad (max and avg, padded, clipped,
 * ceil_mode and global windows, odd sizes), plain and in nChw16c and nChw8c, on 1 and 2
 * threads, give the values of the plain kernels on 1 thread bit for bit; batch_norm,
 * fused_bn_add_activation and their gradients in both layouts agree with the plain kernels
 * within float rounding, give the same bits on 1 and 2 threads, and keep the batch variance
 * of data far from 0 (mean 1000, std 0.01) to float precision; their bfloat16 forms (AMP: Y
 * and X@GRAD written, Z and the relu's Y read in bf16) give the same bits on 1 and 2 threads,
 * the float32 kernel's values rounded to nearest even. */
#include "testhelp.h"

#include <stdatomic.h>

#include "graph/graph_internal.h"
#include "tensor/half.h"

enum { MAXT = 8 };

/* Runs op's kernel on the tensors given per slot (NULL: slot empty). */
static int run_kernel(const fl_op *op, fl_tensor *const *in, int nin, fl_tensor *const *out, int nout)
{
    static fl_tensor *ip[FL_OP_MAX_SLOTS], *op_[FL_OP_MAX_SLOTS];
    fl_kctx c;
    memset(&c, 0, sizeof c);
    c.op = op;
    for (int s = 0; s < nin; s++) {
        ip[s] = in[s];
        c.in[s] = &ip[s];
        c.nin[s] = in[s] != NULL;
    }
    for (int s = 0; s < nout; s++) {
        op_[s] = out[s];
        c.out[s] = &op_[s];
        c.nout[s] = out[s] != NULL;
    }
    void *state = NULL;
    c.state = &state;
    int st = op->def->run(&c);
    free(state);
    return st;
}

/* A grad op of `type` on fwd's attributes (as append_backward makes it). */
static fl_op *grad_op(fl_prog *p, const fl_op *fwd, const char *type, const fl_io *in, int nin, const fl_io *out, int nout)
{
    fl_op *g = fl__op_new(p, type, in, nin, out, nout);
    if (!g) TFAIL("%s: %s", type, fl_last_error());
    for (int i = 0; i < fwd->nattr; i++) {
        const fl_attr *a = &fwd->attr[i];
        if (a->type == FL_ATTR_INT) fl__attr_set_i(g, a->name, a->i);
        else if (a->type == FL_ATTR_FLOAT) fl__attr_set_f(g, a->name, a->f);
        else if (a->type == FL_ATTR_STR) fl__attr_set_s(g, a->name, a->s);
        else if (a->type == FL_ATTR_INTS) fl__attr_set_ints(g, a->name, a->ints, a->n);
    }
    return g;
}

static fl_tensor *randt(int ndim, const int64_t *shape, unsigned seed, float off, float scale)
{
    fl_tensor *t = fl_tensor_create(FL_FLOAT32, ndim, shape);
    float *d = t->data;
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < t->numel; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        /* a coarse grid of values, so that max windows hold ties */
        d[i] = off + scale * ((float)((s >> 40) % 64) / 32.0f - 1.0f);
    }
    return t;
}

static fl_tensor *copy_as(const fl_tensor *t, int layout)
{
    fl_tensor *c = fl_tensor_create(FL_FLOAT32, 1, (int64_t[]){1});
    CHECK_OK(fl_tensor_copy(c, t));
    CHECK_OK(fl__tensor_to_layout(c, layout));
    return c;
}

static fl_tensor *empty(void) { return fl_tensor_create(FL_FLOAT32, 1, (int64_t[]){1}); }

static void set_threads(int n)
{
    if (fl__parallel_threads() != 2) TFAIL("FLEET_NUM_THREADS=2 did not start the helper");
    fl__parallel_limit(n);
}

static double max_rel_diff(const fl_tensor *a, const fl_tensor *b)
{
    const float *x = fl_tensor_data((fl_tensor *)a), *y = fl_tensor_data((fl_tensor *)b);
    double md = 0.0, mx = 0.0;
    for (int64_t i = 0; i < a->numel; i++) {
        double d = fabs((double)x[i] - y[i]);
        md = d > md ? d : md;
        mx = fabs(y[i]) > mx ? fabs(y[i]) : mx;
    }
    return md / (1.0 + mx);
}

static int same_bits(fl_tensor *a, fl_tensor *b)
{
    return a->dtype == b->dtype && a->numel == b->numel &&
           !memcmp(fl_tensor_data(a), fl_tensor_data(b), (size_t)a->numel * fl_dtype_size(a->dtype));
}

/* A bfloat16 copy of float32 t (rounded to nearest even), in t's layout. */
static fl_tensor *to_bf16(const fl_tensor *t)
{
    fl_tensor *h = fl_tensor_create(FL_BFLOAT16, t->ndim, t->shape);
    const float *d = t->data;
    uint16_t *o = h->data;
    for (int64_t i = 0; i < t->numel; i++) o[i] = fl__f32_to_bf16(d[i]);
    CHECK_OK(fl__tensor_set_layout(h, fl__tensor_layout(t)));
    return h;
}

/* ---- fl__parallel_for --------------------------------------------------------------------- */

typedef struct {
    int *hits;
    atomic_int calls, odd; /* chunks run, and chunks not starting at a multiple of the grain */
} cover_job;

static void cover(void *arg, int64_t lo, int64_t hi)
{
    cover_job *j = arg;
    for (int64_t i = lo; i < hi; i++) j->hits[i]++; /* chunks never overlap: one writer per index */
    atomic_fetch_add(&j->calls, 1);
    if (lo % 16) atomic_fetch_add(&j->odd, 1);
}

TEST(test_parallel_for)
{
    setenv("FLEET_NUM_THREADS", "2", 1);
    CHECK_EQ_INT(fl__parallel_threads(), 2);
    const int64_t n = 100003;
    int *hits = calloc((size_t)n, sizeof *hits);
    cover_job j = {hits, 0, 0};
    CHECK_EQ_INT(fl__parallel_for(n, 16, 64, cover, &j), 2);
    for (int64_t i = 0; i < n; i++)
        if (hits[i] != 1) TFAIL("index %lld covered %d times", (long long)i, hits[i]);
    CHECK(atomic_load(&j.calls) >= 2 && atomic_load(&j.odd) == 0); /* chunks, each at a multiple of 16 */
    CHECK_EQ_INT(fl__parallel_for(100, 16, 64, cover, &j), 1);     /* small: one part, here */
    CHECK_EQ_INT(fl__parallel_for(0, 16, 64, cover, &j), 1);
    fl__parallel_limit(1);
    CHECK_EQ_INT(fl__parallel_for(n, 16, 64, cover, &j), 1);
    fl__parallel_limit(2);
    CHECK_EQ_INT(fl__parallel_for(n, 16, 64, cover, &j), 2);
    for (int64_t i = 0; i < n; i++)
        if (hits[i] != (i < 100 ? 4 : 3)) TFAIL("index %lld covered %d times in four runs", (long long)i, hits[i]);
    free(hits);
}

/* ---- pool2d ---------------------------------------------------------------------------- */

typedef struct {
    const char *type;
    int k, s, pad, ceil, inclusive, global;
} pool_case;

static const pool_case pool_cases[] = {
    {"max", 3, 2, 1, 0, 0, 0}, /* ResNet's stem */
    {"max", 2, 2, 0, 1, 0, 0}, /* ceil_mode: a clipped last window on the odd sizes */
    {"avg", 3, 1, 1, 0, 0, 0}, /* exclusive: divided by the clipped window */
    {"avg", 3, 2, 1, 0, 1, 0}, /* inclusive */
    {"avg", 0, 1, 0, 0, 0, 1}, /* global: ResNet's last pool, 1x1 output */
    {"max", 5, 3, 4, 1, 0, 0}, /* windows entirely in the padding */
};

static void pool_check(int threads)
{
    setenv("FLEET_NUM_THREADS", "2", 1);
    set_threads(threads);
    const int64_t shape[4] = {3, 32, 37, 29};
    for (size_t k = 0; k < sizeof pool_cases / sizeof pool_cases[0]; k++) {
        const pool_case *pc = &pool_cases[k];
        fl_prog *p = fl_prog_create();
        fl_var *xv = fl_layer_data(p, "x", 3, shape + 1, FL_FLOAT32, 0); /* [-1, C, H, W] */
        fl_pool2d_attr a = {{pc->k, pc->k}, {pc->s, pc->s}, {pc->pad, pc->pad}, pc->global, pc->inclusive, pc->ceil};
        fl_var *yv = fl_layer_pool2d_ex(xv, pc->type, &a);
        if (!yv) TFAIL("pool2d: %s", fl_last_error());
        const fl_op *fwd = p->ops[p->nops - 1];
        fl_var *gy = fl__tmp_var(p, "gy", FL_FLOAT32, 4, fl_var_shape(yv));
        fl_var *gx = fl__tmp_var(p, "gx", FL_FLOAT32, 4, shape);
        fl_io gi[3] = {FL_IO1("X", xv), FL_IO1("Out", yv), FL_IO1("Out@GRAD", gy)}, go = FL_IO1("X@GRAD", gx);
        const fl_op *bwd = grad_op(p, fwd, "pool2d_grad", gi, 3, &go, 1);

        /* the reference: the plain kernels on 1 thread; then plain on `threads` and blocked */
        set_threads(1);
        fl_tensor *x = randt(4, shape, (unsigned)k + 1, 0.0f, 1.0f), *y = empty(), *dx = empty();
        CHECK_OK(run_kernel(fwd, (fl_tensor *[]){x}, 1, (fl_tensor *[]){y}, 1));
        fl_tensor *dy = randt(y->ndim, y->shape, (unsigned)k + 100, 0.0f, 1.0f);
        CHECK_OK(run_kernel(bwd, (fl_tensor *[]){x, y, dy}, 3, (fl_tensor *[]){dx}, 1));
        set_threads(threads);
        fl_tensor *y2 = empty(), *dx2 = empty();
        CHECK_OK(run_kernel(fwd, (fl_tensor *[]){x}, 1, (fl_tensor *[]){y2}, 1));
        CHECK_OK(run_kernel(bwd, (fl_tensor *[]){x, y, dy}, 3, (fl_tensor *[]){dx2}, 1));
        if (!same_bits(y2, y) || !same_bits(dx2, dx))
            TFAIL("pool2d %s case %zu: plain on %d threads differs", pc->type, k, threads);
        fl_tensor_free(y2), fl_tensor_free(dx2);
        for (int lay = FL_LAYOUT_NCHW16C; lay <= FL_LAYOUT_NCHW8C; lay++) {
            fl_tensor *xb = copy_as(x, lay), *yb = empty(), *dxb = empty();
            CHECK_OK(run_kernel(fwd, (fl_tensor *[]){xb}, 1, (fl_tensor *[]){yb}, 1));
            /* a 1x1 output stays plain (the same order), anything else keeps X's layout */
            CHECK_EQ_INT(fl__tensor_layout(yb), y->shape[2] * y->shape[3] == 1 ? FL_LAYOUT_PLAIN : lay);
            fl_tensor *dyb = copy_as(dy, fl__tensor_layout(yb));
            CHECK_OK(run_kernel(bwd, (fl_tensor *[]){xb, yb, dyb}, 3, (fl_tensor *[]){dxb}, 1));
            CHECK_EQ_INT(fl__tensor_layout(dxb), lay);
            if (!same_bits(yb, y) || !same_bits(dxb, dx))
                TFAIL("pool2d %s k%d s%d p%d ceil %d (%s, %d threads): blocked differs from plain (out %g, dX %g)",
                      pc->type, pc->k, pc->s, pc->pad, pc->ceil, fl__layout_name(lay), threads, max_rel_diff(yb, y),
                      max_rel_diff(dxb, dx));
            fl_tensor_free(xb), fl_tensor_free(yb), fl_tensor_free(dxb), fl_tensor_free(dyb);
        }
        fl_tensor_free(x), fl_tensor_free(y), fl_tensor_free(dx), fl_tensor_free(dy);
        fl_prog_free(p);
    }
}

TEST(test_pool_blocked_1_thread) { pool_check(1); }
TEST(test_pool_blocked_2_threads) { pool_check(2); }

/* ---- batch_norm ------------------------------------------------------------------------ */

typedef struct {
    fl_tensor *y, *mean, *var, *saved_mean, *saved_inv, *dx, *dscale, *dbias, *dz;
} bn_result;

static void bn_result_free(bn_result *r)
{
    fl_tensor *t[9] = {r->y, r->mean, r->var, r->saved_mean, r->saved_inv, r->dx, r->dscale, r->dbias, r->dz};
    for (int i = 0; i < 9; i++) fl_tensor_free(t[i]);
}

/* batch_norm (+ relu) or fused_bn_add_activation forward and backward on X in `layout`,
 * on `threads` threads; bf: Y and X@GRAD written in bfloat16, Z given in bfloat16. */
static void bn_run(int fused, int layout, int threads, int bf, const fl_tensor *x0, const fl_tensor *z0,
                   const fl_tensor *dy0, bn_result *r)
{
    set_threads(threads);
    const int64_t C = x0->shape[1];
    fl_prog *p = fl_prog_create();
    fl_var *xv = fl_layer_data(p, "x", 3, x0->shape + 1, FL_FLOAT32, 0); /* [-1, C, H, W] */
    fl_var *yv = fl_layer_batch_norm(xv, "relu", 0, 0.9f, 1e-5f, NULL);
    if (!yv) TFAIL("batch_norm: %s", fl_last_error());
    fl_op *bn = p->ops[p->nops - 1];
    fl_var *zv = fl__tmp_var(p, "z", FL_FLOAT32, 4, x0->shape), *gy = fl__tmp_var(p, "gy", FL_FLOAT32, 4, x0->shape);
    fl_var *gx = fl__tmp_var(p, "gx", FL_FLOAT32, 4, x0->shape), *gz = fl__tmp_var(p, "gz", FL_FLOAT32, 4, x0->shape);
    fl_var *gs = fl__tmp_var(p, "gs", FL_FLOAT32, 1, &C), *gb = fl__tmp_var(p, "gb", FL_FLOAT32, 1, &C);
    fl_op *fwd = bn;
    if (fused) {
        fl_io in[6] = {FL_IO1("X", xv),
                       FL_IO1("Scale", bn->in[1].vars[0]),
                       FL_IO1("Bias", bn->in[2].vars[0]),
                       FL_IO1("Mean", bn->in[3].vars[0]),
                       FL_IO1("Variance", bn->in[4].vars[0]),
                       FL_IO1("Z", zv)};
        fl_io out[5] = {FL_IO1("Y", yv), FL_IO1("MeanOut", bn->out[1].vars[0]), FL_IO1("VarianceOut", bn->out[2].vars[0]),
                        FL_IO1("SavedMean", bn->out[3].vars[0]), FL_IO1("SavedVariance", bn->out[4].vars[0])};
        fwd = grad_op(p, bn, "fused_bn_add_activation", in, 6, out, 5);
    }
    fl_io gin[6] = {FL_IO1("X", xv),
                    FL_IO1("Scale", bn->in[1].vars[0]),
                    FL_IO1("SavedMean", bn->out[3].vars[0]),
                    FL_IO1("SavedVariance", bn->out[4].vars[0]),
                    FL_IO1("Y@GRAD", gy),
                    FL_IO1("Y", yv)};
    fl_io gout[4] = {FL_IO1("X@GRAD", gx), FL_IO1("Scale@GRAD", gs), FL_IO1("Bias@GRAD", gb), FL_IO1("Z@GRAD", gz)};
    if (bf) CHECK_OK(fl__attr_set_i(fwd, "out_dtype", FL_BFLOAT16));
    fl_op *bwd = grad_op(p, fwd, fused ? "fused_bn_add_activation_grad" : "batch_norm_grad", gin, 6, gout, fused ? 4 : 3);

    fl_tensor *scale = randt(1, &C, 7, 1.0f, 0.5f), *bias = randt(1, &C, 8, 0.0f, 0.5f);
    memset(r, 0, sizeof *r);
    r->mean = randt(1, &C, 9, 0.0f, 0.1f), r->var = randt(1, &C, 10, 1.0f, 0.1f);
    r->y = empty(), r->saved_mean = empty(), r->saved_inv = empty();
    r->dx = empty(), r->dscale = empty(), r->dbias = empty(), r->dz = fused ? empty() : NULL;
    if (bf) CHECK_OK(fl__attr_set_i(bwd, "dx_dtype", FL_BFLOAT16));
    fl_tensor *x = copy_as(x0, layout), *z = copy_as(z0, layout), *dy = copy_as(dy0, layout);
    if (bf) {
        fl_tensor *zh = to_bf16(z);
        fl_tensor_free(z);
        z = zh;
    }
    CHECK_OK(run_kernel(fwd, (fl_tensor *[]){x, scale, bias, r->mean, r->var, fused ? z : NULL}, fused ? 6 : 5,
                        (fl_tensor *[]){r->y, r->mean, r->var, r->saved_mean, r->saved_inv}, 5));
    CHECK_EQ_INT(fl__tensor_layout(r->y), layout);
    CHECK_OK(run_kernel(bwd, (fl_tensor *[]){x, scale, r->saved_mean, r->saved_inv, dy, r->y}, 6,
                        (fl_tensor *[]){r->dx, r->dscale, r->dbias, r->dz}, fused ? 4 : 3));
    CHECK_EQ_INT(fl__tensor_layout(r->dx), layout);
    fl_tensor_free(x), fl_tensor_free(z), fl_tensor_free(dy), fl_tensor_free(scale), fl_tensor_free(bias);
    fl_prog_free(p);
}

static void bn_check(int fused)
{
    setenv("FLEET_NUM_THREADS", "2", 1);
    /* 48 channels (3 blocks of 16, 6 of 8), odd sizes: 3 x 48 x 23 x 19; one big enough to
     * split (2 x 64 x 56 x 56) */
    const int64_t shapes[2][4] = {{3, 48, 23, 19}, {2, 64, 56, 56}};
    for (int k = 0; k < 2; k++) {
        fl_tensor *x = randt(4, shapes[k], 1, 0.5f, 2.0f), *z = randt(4, shapes[k], 2, 0.0f, 1.0f);
        fl_tensor *dy = randt(4, shapes[k], 3, 0.0f, 1.0f);
        bn_result plain, b1, b2;
        bn_run(fused, FL_LAYOUT_PLAIN, 1, 0, x, z, dy, &plain);
        for (int lay = FL_LAYOUT_NCHW16C; lay <= FL_LAYOUT_NCHW8C; lay++) {
            bn_run(fused, lay, 1, 0, x, z, dy, &b1);
            bn_run(fused, lay, 2, 0, x, z, dy, &b2);
            fl_tensor *const got[8] = {b1.y, b1.mean, b1.var, b1.saved_mean, b1.saved_inv, b1.dx, b1.dscale, b1.dbias};
            fl_tensor *const two[8] = {b2.y, b2.mean, b2.var, b2.saved_mean, b2.saved_inv, b2.dx, b2.dscale, b2.dbias};
            fl_tensor *const want[8] = {plain.y,         plain.mean, plain.var,    plain.saved_mean,
                                        plain.saved_inv, plain.dx,   plain.dscale, plain.dbias};
            static const char *const nm[8] = {"Y",      "MeanOut",    "VarianceOut", "SavedMean", "SavedVariance",
                                              "X@GRAD", "Scale@GRAD", "Bias@GRAD"};
            for (int i = 0; i < 8; i++) {
                double d = max_rel_diff(got[i], want[i]);
                if (!(d <= 2e-5))
                    TFAIL("%s %s (%s): blocked differs from plain by %g", fused ? "fused" : "batch_norm", nm[i],
                          fl__layout_name(lay), d);
                if (!same_bits(got[i], two[i]))
                    TFAIL("%s %s (%s): 1 and 2 threads differ", fused ? "fused" : "batch_norm", nm[i],
                          fl__layout_name(lay));
            }
            if (fused && (!same_bits(b1.dz, b2.dz) || max_rel_diff(b1.dz, plain.dz) != 0.0))
                TFAIL("Z@GRAD (%s): not the masked dY of the plain kernel on 1 and 2 threads", fl__layout_name(lay));
            bn_result_free(&b1), bn_result_free(&b2);
        }
        bn_result_free(&plain);
        fl_tensor_free(x), fl_tensor_free(z), fl_tensor_free(dy);
    }
}

TEST(test_batch_norm_blocked) { bn_check(0); }
TEST(test_fused_bn_add_act_blocked) { bn_check(1); }

/* The bfloat16 forms in each layout (plain, nChw16c, nChw8c): Y and X@GRAD the float32
 * kernel's rounded to nearest even, the statistics, Scale@GRAD, Bias@GRAD and Z@GRAD its very
 * bits (Z is exact in bf16 here, and no positive Y rounds to 0, so the relu's mask is the
 * same); the same bits on 1 and 2 threads. */
static void bn_bf16_check(int fused)
{
    setenv("FLEET_NUM_THREADS", "2", 1);
    const int64_t shapes[2][4] = {{3, 48, 23, 19}, {2, 64, 56, 56}};
    for (int k = 0; k < 2; k++) {
        fl_tensor *x = randt(4, shapes[k], 1, 0.5f, 2.0f), *z = randt(4, shapes[k], 2, 0.0f, 1.0f);
        fl_tensor *dy = randt(4, shapes[k], 3, 0.0f, 1.0f);
        for (int lay = FL_LAYOUT_PLAIN; lay <= FL_LAYOUT_NCHW8C; lay++) {
            bn_result f, h1, h2;
            bn_run(fused, lay, 1, 0, x, z, dy, &f);
            bn_run(fused, lay, 1, 1, x, z, dy, &h1);
            bn_run(fused, lay, 2, 1, x, z, dy, &h2);
            CHECK_EQ_INT(h1.y->dtype, FL_BFLOAT16);
            CHECK_EQ_INT(h1.dx->dtype, FL_BFLOAT16);
            fl_tensor *fy = to_bf16(f.y), *fdx = to_bf16(f.dx);
            fl_tensor *const want[9] = {fy, f.mean, f.var, f.saved_mean, f.saved_inv, fdx, f.dscale, f.dbias, f.dz};
            fl_tensor *const one[9] = {h1.y,  h1.mean,   h1.var,   h1.saved_mean, h1.saved_inv,
                                       h1.dx, h1.dscale, h1.dbias, h1.dz};
            fl_tensor *const two[9] = {h2.y,  h2.mean,   h2.var,   h2.saved_mean, h2.saved_inv,
                                       h2.dx, h2.dscale, h2.dbias, h2.dz};
            static const char *const nm[9] = {"Y",      "MeanOut",    "VarianceOut", "SavedMean", "SavedVariance",
                                              "X@GRAD", "Scale@GRAD", "Bias@GRAD",   "Z@GRAD"};
            for (int i = 0; i < (fused ? 9 : 8); i++) {
                if (!same_bits(one[i], want[i]))
                    TFAIL("%s %s (%s): the bf16 form is not the float32 kernel's value rounded",
                          fused ? "fused" : "batch_norm", nm[i], fl__layout_name(lay));
                if (!same_bits(one[i], two[i]))
                    TFAIL("%s %s (%s, bf16): 1 and 2 threads differ", fused ? "fused" : "batch_norm", nm[i],
                          fl__layout_name(lay));
            }
            fl_tensor_free(fy), fl_tensor_free(fdx);
            bn_result_free(&f), bn_result_free(&h1), bn_result_free(&h2);
        }
        fl_tensor_free(x), fl_tensor_free(z), fl_tensor_free(dy);
    }
}

TEST(test_batch_norm_bf16) { bn_bf16_check(0); }
TEST(test_fused_bn_add_act_bf16) { bn_bf16_check(1); }

/* Mean 1000, spread 0.01: the one-pass statistics of the blocked kernel (sums of the
 * differences from a value of the data) keep the variance, 1e-4, to float precision where
 * sums of squares would lose it entirely. */
TEST(test_batch_norm_variance_far_from_zero)
{
    setenv("FLEET_NUM_THREADS", "2", 1);
    const int64_t shape[4] = {4, 16, 30, 30};
    fl_tensor *x = randt(4, shape, 5, 1000.0f, 0.0173f), *z = randt(4, shape, 2, 0.0f, 1.0f);
    fl_tensor *dy = randt(4, shape, 3, 0.0f, 1.0f);
    bn_result r;
    bn_run(0, FL_LAYOUT_NCHW16C, 1, 0, x, z, dy, &r);
    const float *xd = x->data, *inv = fl_tensor_data(r.saved_inv), *sm = fl_tensor_data(r.saved_mean);
    const int64_t N = shape[0], C = shape[1], S = shape[2] * shape[3];
    for (int64_t c = 0; c < C; c++) {
        double s = 0.0, s2 = 0.0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) s += xd[(n * C + c) * S + i];
        const double mean = s / (double)(N * S);
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) s2 += (xd[(n * C + c) * S + i] - mean) * (xd[(n * C + c) * S + i] - mean);
        const double var = s2 / (double)(N * S), want = 1.0 / sqrt(var + 1e-5);
        CHECK_NEAR(sm[c], mean, 1e-4);
        if (!(fabs(inv[c] - want) <= 1e-5 * want))
            TFAIL("channel %lld: inverse std %.7g, want %.7g", (long long)c, inv[c], want);
    }
    bn_result_free(&r);
    fl_tensor_free(x), fl_tensor_free(z), fl_tensor_free(dy);
}

TEST_MAIN(T(test_parallel_for), T(test_pool_blocked_1_thread), T(test_pool_blocked_2_threads), T(test_batch_norm_blocked),
          T(test_fused_bn_add_act_blocked), T(test_batch_norm_bf16), T(test_fused_bn_add_act_bf16),
          T(test_batch_norm_variance_far_from_zero))
