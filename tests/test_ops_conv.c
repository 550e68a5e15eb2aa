/* test_ops_conv.c - forward values, names, state and errors of the ops in ops_conv.c:
 * conv2d, pool2d and batch_norm against naive direct-loop references on fixed and random
 * shapes; parameter names and default initializers; batch_norm's moving statistics after
 * two steps against the hand formula and is_test through fl_prog_clone(p, 1); build- and
 * run-time errors naming the op and the variable; a text round trip; a small CNN that
 * trains; and the conv2d forward time against its sgemm time. */
#include <time.h>

#include "testhelp.h"

#include "graph/graph_internal.h" /* fl__op_register_group */

extern const fl_op_def *const fl__ops_conv[];

static void reg(void) { CHECK_OK(fl__op_register_group(fl__ops_conv)); }

static fl_tensor *run1(fl_exe *e, fl_prog *p, const fl_feed *feed, int nfeed, fl_var *v)
{
    CHECK(v != NULL);
    const char *f[1] = {fl_var_name(v)};
    fl_tensor *out = NULL;
    CHECK_OK(fl_exe_run(e, p, feed, nfeed, f, 1, &out));
    return out;
}

static float *rnd(int64_t n, float lo, float hi, unsigned seed)
{
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    th_fill_uniform(x, n, lo, hi, seed);
    return x;
}

static void expect_close(const float *got, const double *want, int64_t n, double rtol, double atol)
{
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i])))
            TFAIL("element %lld: got %.7g, want %.7g", (long long)i, got[i], want[i]);
}

static double act_ref(const char *a, double v)
{
    if (!a) return v;
    if (!strcmp(a, "relu")) return v > 0 ? v : 0;
    if (!strcmp(a, "tanh")) return tanh(v);
    if (!strcmp(a, "sigmoid")) return 1.0 / (1.0 + exp(-v));
    return v;
}

/* ---- conv2d ------------------------------------------------------------------------------ */

typedef struct {
    int64_t n, c, h, w, m;
    int kh, kw, sh, sw, ph, pw, dh, dw, g, bias;
    const char *act;
} conv_cfg;

static int64_t conv_osz(int64_t in, int k, int s, int p, int d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

/* Direct nested loops: y[n][m][oy][ox] = b[m] + sum_{c,i,j} x[n][g*C/G + c][..][..] w[m][c][i][j]. */
static double *ref_conv(const conv_cfg *k, const float *x, const float *w, const float *b)
{
    int64_t oh = conv_osz(k->h, k->kh, k->sh, k->ph, k->dh), ow = conv_osz(k->w, k->kw, k->sw, k->pw, k->dw);
    int64_t cg = k->c / k->g, mg = k->m / k->g;
    double *y = malloc((size_t)(k->n * k->m * oh * ow) * sizeof *y);
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t m = 0; m < k->m; m++)
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    double s = b ? b[m] : 0.0;
                    int64_t grp = m / mg;
                    for (int64_t c = 0; c < cg; c++)
                        for (int i = 0; i < k->kh; i++)
                            for (int j = 0; j < k->kw; j++) {
                                int64_t iy = oy * k->sh - k->ph + i * k->dh, ix = ox * k->sw - k->pw + j * k->dw;
                                if (iy < 0 || iy >= k->h || ix < 0 || ix >= k->w) continue;
                                s += (double)x[((n * k->c + grp * cg + c) * k->h + iy) * k->w + ix] *
                                     w[((m * cg + c) * k->kh + i) * k->kw + j];
                            }
                    y[((n * k->m + m) * oh + oy) * ow + ox] = act_ref(k->act, s);
                }
    return y;
}

static void conv_case(conv_cfg k, unsigned seed)
{
    reg();
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(k.c, k.h, k.w), FL_FLOAT32, 0);
    fl_conv2d_attr a;
    memset(&a, 0, sizeof a);
    a.stride[0] = k.sh, a.stride[1] = k.sw, a.padding[0] = k.ph, a.padding[1] = k.pw;
    a.dilation[0] = k.dh, a.dilation[1] = k.dw, a.groups = k.g, a.no_bias = !k.bias;
    a.filter.init = fl_init_uniform(-1, 1);
    a.bias.init = fl_init_uniform(-1, 1);
    fl_var *y = fl_layer_conv2d(x, k.m, k.kh, k.kw, k.act, &a);
    CHECK(y != NULL);
    int64_t oh = conv_osz(k.h, k.kh, k.sh, k.ph, k.dh), ow = conv_osz(k.w, k.kw, k.sw, k.pw, k.dw);
    const int64_t *ys = fl_var_shape(y);
    CHECK_EQ_INT(fl_var_ndim(y), 4);
    CHECK_EQ_INT(ys[0], -1);
    CHECK_EQ_INT(ys[1], k.m);
    CHECK_EQ_INT(ys[2], oh);
    CHECK_EQ_INT(ys[3], ow);
    fl_scope *sc = fl_scope_create(NULL);
    fl_exe *e = fl_exe_create(sc);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    int64_t xn = k.n * k.c * k.h * k.w;
    float *xd = rnd(xn, -1, 1, seed);
    fl_tensor *xt = th_f32(4, (const int64_t[]){k.n, k.c, k.h, k.w}, xd);
    fl_feed feed[] = {{"x", xt}};
    fl_tensor *out = run1(e, p, feed, 1, y);
    CHECK_EQ_INT(fl_tensor_numel(out), k.n * k.m * oh * ow);
    fl_tensor *wt = fl_scope_find(sc, "conv2d_0.w_0"), *bt = k.bias ? fl_scope_find(sc, "conv2d_0.b_0") : NULL;
    CHECK(wt != NULL);
    CHECK_EQ_INT(fl_tensor_dim(wt, 1), k.c / k.g);
    double *want = ref_conv(&k, xd, fl_tensor_f32(wt), bt ? fl_tensor_f32(bt) : NULL);
    expect_close(fl_tensor_f32(out), want, fl_tensor_numel(out), 1e-4, 1e-4);
    free(want);
    free(xd);
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_scope_free(sc);
    fl_prog_free(p);
}

TEST(conv2d_fixed_configs)
{
    /* n c h w m | kh kw sh sw ph pw dh dw g bias act */
    conv_case((conv_cfg){2, 3, 7, 6, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1, NULL}, 1);
    conv_case((conv_cfg){2, 3, 7, 6, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, "relu"}, 2);
    conv_case((conv_cfg){1, 2, 9, 9, 3, 3, 3, 1, 1, 2, 2, 2, 2, 1, 0, "tanh"}, 3);
    conv_case((conv_cfg){3, 4, 5, 6, 6, 3, 2, 1, 2, 1, 0, 1, 1, 2, 1, "sigmoid"}, 4);
    conv_case((conv_cfg){2, 6, 4, 4, 6, 1, 1, 1, 1, 0, 0, 1, 1, 3, 1, NULL}, 5); /* 1x1: no im2col */
    conv_case((conv_cfg){2, 4, 5, 5, 8, 1, 1, 2, 1, 1, 0, 1, 1, 1, 1, NULL}, 6); /* 1x1 strided, padded */
    conv_case((conv_cfg){1, 1, 3, 3, 2, 5, 5, 1, 1, 2, 2, 1, 1, 1, 1, NULL}, 7); /* filter = padded image */
    conv_case((conv_cfg){2, 4, 8, 7, 4, 3, 3, 3, 2, 1, 2, 1, 2, 4, 0, NULL}, 8); /* depthwise */
    /* K = C/g*kh*kw >= 64: several images per sgemm (here 4 + 3, and 9 + 1) */
    conv_case((conv_cfg){7, 8, 30, 30, 5, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1, "relu"}, 9);
    conv_case((conv_cfg){10, 16, 20, 20, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, 0, "sigmoid"}, 10);
}

/* Random shapes: every parameter drawn from small ranges (output at least 1x1). */
TEST(conv2d_random_shapes)
{
    unsigned s = 12345;
#define R(lo, hi) (s = s * 1103515245u + 12345u, (int)(lo) + (int)((s >> 16) % (unsigned)((hi) - (lo) + 1)))
    for (int t = 0; t < 25; t++) {
        conv_cfg k;
        k.g = R(1, 3);
        k.c = k.g * R(1, 3);
        k.m = k.g * R(1, 3);
        k.n = R(1, 3);
        k.kh = R(1, 4), k.kw = R(1, 4), k.sh = R(1, 3), k.sw = R(1, 3), k.dh = R(1, 2), k.dw = R(1, 2);
        k.ph = R(0, 2), k.pw = R(0, 2);
        k.h = R(1, 9) + k.dh * (k.kh - 1), k.w = R(1, 9) + k.dw * (k.kw - 1);
        k.bias = R(0, 1);
        static const char *acts[] = {NULL, "relu", "tanh", "sigmoid"};
        k.act = acts[R(0, 3)];
        conv_case(k, 100 + (unsigned)t);
    }
#undef R
}

/* Paddle's names and default initializers: conv2d_<k>.w_0 ~ Normal(0, sqrt(2/(kh*kw*C))),
 * conv2d_<k>.b_0 = 0; a second layer gets conv2d_1; softmax as act is its own op. */
TEST(conv2d_names_and_init)
{
    reg();
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(8, 6, 6), FL_FLOAT32, 0);
    fl_var *y = fl_layer_conv2d(x, 64, 3, 3, "relu", NULL);
    fl_var *z = fl_layer_conv2d(y, 2, 1, 1, "softmax", &(fl_conv2d_attr){.no_bias = 1});
    CHECK(z != NULL);
    CHECK(fl_prog_var(p, "conv2d_1.w_0") != NULL && fl_prog_var(p, "conv2d_1.b_0") == NULL);
    CHECK_STR_HAS(fl_prog_op_type(p, fl_prog_num_ops(p) - 1), "softmax");
    fl_var *w = fl_prog_var(p, "conv2d_0.w_0");
    CHECK(w && fl_var_is_param(w));
    CHECK_EQ_INT(fl_var_shape(w)[0], 64);
    CHECK_EQ_INT(fl_var_shape(w)[1], 8);
    CHECK_EQ_INT(fl_var_shape(y)[2], 4);
    fl_scope *sc = fl_scope_create(NULL);
    fl_exe *e = fl_exe_create(sc);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    fl_tensor *wt = fl_scope_find(sc, "conv2d_0.w_0"), *bt = fl_scope_find(sc, "conv2d_0.b_0");
    double s1 = 0, s2 = 0;
    int64_t n = fl_tensor_numel(wt);
    for (int64_t i = 0; i < n; i++) s1 += fl_tensor_f32(wt)[i], s2 += (double)fl_tensor_f32(wt)[i] * fl_tensor_f32(wt)[i];
    double mean = s1 / n, sd = sqrt(s2 / n - mean * mean), want = sqrt(2.0 / (3 * 3 * 8));
    CHECK_NEAR(mean, 0.0, 0.01);
    CHECK_NEAR(sd, want, 0.05 * want);
    for (int64_t i = 0; i < 64; i++) CHECK_NEAR(fl_tensor_f32(bt)[i], 0.0, 0.0);
    fl_exe_free(e);
    fl_scope_free(sc);
    fl_prog_free(p);
}

/* ---- pool2d ------------------------------------------------------------------------------ */

typedef struct {
    int64_t n, c, h, w;
    int kh, kw, sh, sw, ph, pw, global, max, inclusive, ceil;
} pool_cfg;

static int64_t pool_osz(int64_t in, int k, int s, int p, int ceil)
{
    return ceil ? (in + 2 * p - k + s - 1) / s + 1 : (in + 2 * p - k) / s + 1;
}

/* Direct loops over the full window; positions outside the image are skipped. */
static double *ref_pool(pool_cfg k, const float *x, int64_t *oh, int64_t *ow)
{
    if (k.global) k.kh = (int)k.h, k.kw = (int)k.w, k.ph = k.pw = 0, k.sh = k.sw = 1, k.ceil = 0;
    *oh = pool_osz(k.h, k.kh, k.sh, k.ph, k.ceil), *ow = pool_osz(k.w, k.kw, k.sw, k.pw, k.ceil);
    double *y = malloc((size_t)(k.n * k.c * *oh * *ow) * sizeof *y);
    for (int64_t nc = 0; nc < k.n * k.c; nc++)
        for (int64_t oy = 0; oy < *oh; oy++)
            for (int64_t ox = 0; ox < *ow; ox++) {
                double best = -INFINITY, sum = 0;
                int cnt = 0;
                for (int i = 0; i < k.kh; i++)
                    for (int j = 0; j < k.kw; j++) {
                        int64_t iy = oy * k.sh - k.ph + i, ix = ox * k.sw - k.pw + j;
                        if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                        double v = x[(nc * k.h + iy) * k.w + ix];
                        best = v > best ? v : best;
                        sum += v;
                        cnt++;
                    }
                double r = !cnt ? 0.0 : k.max ? best : sum / (k.inclusive ? k.kh * k.kw : cnt);
                y[(nc * *oh + oy) * *ow + ox] = r;
            }
    return y;
}

static void pool_case(pool_cfg k, unsigned seed)
{
    reg();
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(k.c, k.h, k.w), FL_FLOAT32, 0);
    fl_pool2d_attr a = {{k.kh, k.kw}, {k.sh, k.sw}, {k.ph, k.pw}, k.global, k.inclusive, k.ceil};
    fl_var *y = fl_layer_pool2d_ex(x, k.max ? "max" : "avg", &a);
    CHECK(y != NULL);
    int64_t oh, ow, xn = k.n * k.c * k.h * k.w;
    float *xd = rnd(xn, -2, 2, seed);
    double *want = ref_pool(k, xd, &oh, &ow);
    CHECK_EQ_INT(fl_var_shape(y)[2], oh);
    CHECK_EQ_INT(fl_var_shape(y)[3], ow);
    fl_tensor *xt = th_f32(4, (const int64_t[]){k.n, k.c, k.h, k.w}, xd);
    fl_feed feed[] = {{"x", xt}};
    fl_exe *e = fl_exe_create(NULL);
    fl_tensor *out = run1(e, p, feed, 1, y);
    CHECK_EQ_INT(fl_tensor_numel(out), k.n * k.c * oh * ow);
    expect_close(fl_tensor_f32(out), want, fl_tensor_numel(out), 1e-5, 1e-6);
    free(want);
    free(xd);
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(pool2d_fixed_configs)
{
    /* n c h w | kh kw sh sw ph pw global max inclusive ceil */
    pool_case((pool_cfg){2, 3, 6, 6, 2, 2, 2, 2, 0, 0, 0, 1, 0, 0}, 1);
    pool_case((pool_cfg){2, 3, 6, 6, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0}, 2);
    pool_case((pool_cfg){1, 2, 7, 5, 3, 3, 2, 2, 1, 1, 0, 1, 0, 0}, 3);
    pool_case((pool_cfg){1, 2, 7, 5, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0}, 4); /* exclusive */
    pool_case((pool_cfg){1, 2, 7, 5, 3, 3, 2, 2, 1, 1, 0, 0, 1, 0}, 5); /* padding counted */
    pool_case((pool_cfg){2, 3, 5, 4, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0}, 6); /* global max */
    pool_case((pool_cfg){2, 3, 5, 4, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, 7); /* global avg */
    pool_case((pool_cfg){1, 2, 7, 7, 2, 3, 2, 3, 0, 1, 0, 1, 0, 1}, 8); /* ceil_mode */
    pool_case((pool_cfg){1, 2, 7, 7, 2, 3, 2, 3, 0, 1, 0, 0, 1, 1}, 9);
    pool_case((pool_cfg){1, 1, 4, 4, 2, 2, 1, 1, 0, 0, 0, 1, 0, 0}, 10); /* overlapping windows */
}

TEST(pool2d_random_shapes)
{
    unsigned s = 777;
#define R(lo, hi) (s = s * 1103515245u + 12345u, (int)(lo) + (int)((s >> 16) % (unsigned)((hi) - (lo) + 1)))
    for (int t = 0; t < 40; t++) {
        pool_cfg k;
        k.n = R(1, 2), k.c = R(1, 3), k.kh = R(1, 4), k.kw = R(1, 4), k.sh = R(1, 3), k.sw = R(1, 3);
        k.ph = R(0, k.kh - 1), k.pw = R(0, k.kw - 1);
        k.h = k.kh + R(0, 6), k.w = k.kw + R(0, 6);
        k.global = R(0, 5) == 0, k.max = R(0, 1), k.inclusive = R(0, 1), k.ceil = R(0, 1);
        pool_case(k, 500 + (unsigned)t);
    }
#undef R
}

/* Paddle's square-window form: pool_size 2, stride 2 -> [N, C, 2, 2]; exclusive flag. */
TEST(pool2d_square_layer)
{
    reg();
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(1, 3, 3), FL_FLOAT32, 0);
    fl_var *a = fl_layer_pool2d(x, 2, "avg", 2, 1, 0, 1), *b = fl_layer_pool2d(x, 2, "avg", 2, 1, 0, 0);
    fl_var *m = fl_layer_pool2d(x, 2, "max", 2, 1, 0, 1);
    CHECK(a && b && m);
    const float xd[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    fl_tensor *xt = th_f32(4, (const int64_t[]){1, 1, 3, 3}, xd);
    fl_feed feed[] = {{"x", xt}};
    fl_exe *e = fl_exe_create(NULL);
    /* windows (padding 1, stride 2): {1}, {2,3}, {4,7}, {5,6,8,9} */
    const double wa[4] = {1, 2.5, 5.5, 7}, wb[4] = {0.25, 1.25, 2.75, 7}, wm[4] = {1, 3, 7, 9};
    expect_close(fl_tensor_f32(run1(e, p, feed, 1, a)), wa, 4, 1e-6, 1e-6);
    expect_close(fl_tensor_f32(run1(e, p, feed, 1, b)), wb, 4, 1e-6, 1e-6);
    expect_close(fl_tensor_f32(run1(e, p, feed, 1, m)), wm, 4, 1e-6, 1e-6);
    CHECK_STR_HAS(fl_var_name(a), "pool2d_0");
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

/* ---- batch_norm ----------------------------------------------------------------------------- */

/* Per-channel batch mean and biased variance of x [N, C, S]. */
static void bn_stats(const float *x, int64_t N, int64_t C, int64_t S, double *mean, double *var)
{
    for (int64_t c = 0; c < C; c++) {
        double s = 0, q = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) s += x[(n * C + c) * S + i];
        mean[c] = s / (N * S);
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) q += pow(x[(n * C + c) * S + i] - mean[c], 2);
        var[c] = q / (N * S);
    }
}

static double *bn_ref(const float *x, int64_t N, int64_t C, int64_t S, const double *mean, const double *var,
                      const float *scale, const float *bias, double eps, const char *act)
{
    double *y = malloc((size_t)(N * C * S) * sizeof *y);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < S; i++) {
                int64_t k = (n * C + c) * S + i;
                y[k] = act_ref(act, (x[k] - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c]);
            }
    return y;
}

/* Builds batch_norm on data x (dims after the batch in `shape`), with random Scale/Bias
 * (named attributes so the test reads them), trains 2 steps on x1 and x2 and checks Y,
 * SavedMean/SavedVariance and the moving statistics against the hand formula; then the
 * for_test clone normalises x3 with the moving statistics and leaves them unchanged. */
static void bn_case(int nd, const int64_t *shape, int64_t N, float momentum, float eps, const char *act)
{
    reg();
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", nd, shape, FL_FLOAT32, 0);
    fl_batch_norm_attr a;
    memset(&a, 0, sizeof a);
    a.scale.init = fl_init_uniform(0.5f, 1.5f);
    a.bias.init = fl_init_uniform(-1, 1);
    fl_var *y = fl_layer_batch_norm(x, act, 0, momentum, eps, &a);
    CHECK(y != NULL);
    fl_prog *tp = fl_prog_clone(p, 1);
    CHECK(tp != NULL);
    int64_t C = shape[0], S = 1, full[8] = {N};
    for (int i = 1; i < nd; i++) S *= shape[i];
    for (int i = 0; i < nd; i++) full[i + 1] = shape[i];
    fl_scope *sc = fl_scope_create(NULL);
    fl_exe *e = fl_exe_create(sc);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    const float *scale = fl_tensor_f32(fl_scope_find(sc, "batch_norm_0.w_0"));
    const float *bias = fl_tensor_f32(fl_scope_find(sc, "batch_norm_0.b_0"));
    double mm[16], mv[16], bm[16], bv[16];
    for (int c = 0; c < C; c++) mm[c] = 0, mv[c] = 1;
    int64_t numel = N * C * S;
    for (int step = 0; step < 2; step++) {
        float *xd = rnd(numel, -2 + step, 3 + 2 * step, 40 + (unsigned)step);
        fl_tensor *xt = th_f32(nd + 1, full, xd);
        fl_feed feed[] = {{"x", xt}};
        const char *f[3] = {fl_var_name(y), "batch_norm_0.tmp_0", "batch_norm_0.tmp_1"};
        fl_tensor *out[3];
        CHECK_OK(fl_exe_run(e, p, feed, 1, f, 3, out));
        bn_stats(xd, N, C, S, bm, bv);
        double *want = bn_ref(xd, N, C, S, bm, bv, scale, bias, eps, act);
        expect_close(fl_tensor_f32(out[0]), want, numel, 1e-4, 1e-4);
        double inv[16];
        for (int c = 0; c < C; c++) inv[c] = 1 / sqrt(bv[c] + eps);
        expect_close(fl_tensor_f32(out[1]), bm, C, 1e-5, 1e-6);  /* SavedMean */
        expect_close(fl_tensor_f32(out[2]), inv, C, 1e-5, 1e-6); /* SavedVariance: inverse std */
        for (int c = 0; c < C; c++) {
            mm[c] = mm[c] * momentum + bm[c] * (1 - momentum);
            mv[c] = mv[c] * momentum + bv[c] * (1 - momentum);
        }
        expect_close(fl_tensor_f32(fl_scope_find(sc, "batch_norm_0.w_1")), mm, C, 1e-5, 1e-6);
        expect_close(fl_tensor_f32(fl_scope_find(sc, "batch_norm_0.w_2")), mv, C, 1e-5, 1e-6);
        free(want);
        free(xd);
        fl_tensor_free(xt);
    }
    /* inference: the moving statistics normalise and stay as they are */
    float *xd = rnd(numel, -1, 1, 99);
    fl_tensor *xt = th_f32(nd + 1, full, xd);
    fl_feed feed[] = {{"x", xt}};
    for (int rep = 0; rep < 2; rep++) {
        fl_tensor *out = run1(e, tp, feed, 1, fl_prog_var(tp, fl_var_name(y)));
        double *want = bn_ref(xd, N, C, S, mm, mv, scale, bias, eps, act);
        expect_close(fl_tensor_f32(out), want, numel, 1e-4, 1e-4);
        free(want);
        expect_close(fl_tensor_f32(fl_scope_find(sc, "batch_norm_0.w_1")), mm, C, 1e-5, 1e-6);
        expect_close(fl_tensor_f32(fl_scope_find(sc, "batch_norm_0.w_2")), mv, C, 1e-5, 1e-6);
    }
    free(xd);
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_scope_free(sc);
    fl_prog_free(tp);
    fl_prog_free(p);
}

TEST(batch_norm_2d) { bn_case(1, (const int64_t[]){5}, 7, 0.9f, 1e-5f, NULL); }
TEST(batch_norm_4d) { bn_case(3, (const int64_t[]){3, 4, 5}, 2, 0.9f, 1e-5f, NULL); }
TEST(batch_norm_3d_momentum_act) { bn_case(2, (const int64_t[]){4, 6}, 3, 0.5f, 1e-3f, "relu"); }
TEST(batch_norm_5d) { bn_case(4, (const int64_t[]){2, 3, 2, 2}, 2, 0.99f, 0.0f, "tanh"); }

TEST(batch_norm_random_shapes)
{
    unsigned s = 4242;
#define R(lo, hi) (s = s * 1103515245u + 12345u, (int)(lo) + (int)((s >> 16) % (unsigned)((hi) - (lo) + 1)))
    for (int t = 0; t < 12; t++) {
        int64_t shape[4];
        int nd = R(1, 4);
        for (int i = 0; i < nd; i++) shape[i] = R(1, 5);
        static const char *acts[] = {NULL, "relu", "tanh", "sigmoid"};
        int64_t n = R(2, 4);
        float mom = 0.1f * (float)R(0, 10);
        const char *act = acts[R(0, 3)];
        bn_case(nd, shape, n, mom, 1e-5f, act);
    }
#undef R
}

/* Names, initial values and roles: Scale/Bias are trainable parameters (w_0 = 1, b_0 = 0);
 * moving mean/variance (w_1 = 0, w_2 = 1) are persistable, not parameters, not trained;
 * is_test given at build time uses them at once; a named moving mean is shared. */
TEST(batch_norm_state_and_is_test_attr)
{
    reg();
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3, 2, 2), FL_FLOAT32, 0);
    fl_var *y = fl_layer_batch_norm(x, NULL, 1, 0.9f, 1e-5f, NULL);
    CHECK(y != NULL);
    static const char *const nm[4] = {"batch_norm_0.w_0", "batch_norm_0.b_0", "batch_norm_0.w_1", "batch_norm_0.w_2"};
    for (int i = 0; i < 4; i++) {
        fl_var *v = fl_prog_var(p, nm[i]);
        CHECK(v != NULL && fl_var_persistable(v));
        CHECK_EQ_INT(fl_var_is_param(v), i < 2);
        CHECK_EQ_INT(fl_var_stop_gradient(v), i >= 2);
        CHECK_EQ_INT(fl_var_shape(v)[0], 3);
    }
    fl_batch_norm_attr a;
    memset(&a, 0, sizeof a);
    a.moving_mean_name = "batch_norm_0.w_1";
    a.moving_variance_name = "batch_norm_0.w_2";
    fl_var *y2 = fl_layer_batch_norm(y, NULL, 1, 0.9f, 1e-5f, &a);
    CHECK(y2 != NULL);
    CHECK(fl_prog_var(p, "batch_norm_1.w_1") == NULL);
    fl_scope *sc = fl_scope_create(NULL);
    fl_exe *e = fl_exe_create(sc);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    const double init[4] = {1, 0, 0, 1};
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3; c++) CHECK_NEAR(fl_tensor_f32(fl_scope_find(sc, nm[i]))[c], init[i], 0);
    float xd[24];
    th_fill_uniform(xd, 24, -3, 3, 8);
    fl_tensor *xt = th_f32(4, (const int64_t[]){2, 3, 2, 2}, xd);
    fl_feed feed[] = {{"x", xt}};
    const float *o = fl_tensor_f32(run1(e, p, feed, 1, y2));
    float k = 1.0f / sqrtf(1.0f + 1e-5f);
    for (int i = 0; i < 24; i++) CHECK_NEAR(o[i], xd[i] * k * k, 1e-5);
    /* use_global_stats in training: also the moving statistics, none updated */
    fl_prog *q = fl_prog_create();
    fl_var *qx = fl_layer_data(q, "x", FL_SHAPE(3, 2, 2), FL_FLOAT32, 0);
    a.moving_mean_name = a.moving_variance_name = NULL;
    a.use_global_stats = 1;
    fl_var *qy = fl_layer_batch_norm(qx, NULL, 0, 0.9f, 1e-5f, &a);
    fl_scope *sq = fl_scope_create(NULL);
    fl_exe *eq = fl_exe_create(sq);
    CHECK_OK(fl_exe_run(eq, fl_prog_startup(q), NULL, 0, NULL, 0, NULL));
    o = fl_tensor_f32(run1(eq, q, feed, 1, qy));
    for (int i = 0; i < 24; i++) CHECK_NEAR(o[i], xd[i] * k, 1e-5);
    CHECK_NEAR(fl_tensor_f32(fl_scope_find(sq, "batch_norm_0.w_2"))[1], 1.0, 0);
    fl_exe_free(eq);
    fl_scope_free(sq);
    fl_prog_free(q);
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_scope_free(sc);
    fl_prog_free(p);
}

/* ---- errors ------------------------------------------------------------------------------------ */

static void expect_build_error(fl_prog *p, fl_var *v, const char *a, const char *b, const char *c)
{
    CHECK(v == NULL);
    CHECK(fl_prog_status(p) != FL_OK);
    CHECK_STR_HAS(fl_prog_error(p), a);
    CHECK_STR_HAS(fl_prog_error(p), b);
    if (c) CHECK_STR_HAS(fl_prog_error(p), c);
    fl_prog_free(p);
}

TEST(build_errors)
{
    reg();
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x3d", FL_SHAPE(3, 8), FL_FLOAT32, 0);
    expect_build_error(p, fl_layer_conv2d(x, 4, 3, 3, NULL, NULL), "conv2d", "'x3d'", "4-D");
    p = fl_prog_create();
    x = fl_layer_data(p, "x3d", FL_SHAPE(3, 8), FL_FLOAT32, 0);
    expect_build_error(p, fl_layer_pool2d(x, 2, "max", 2, 0, 0, 1), "pool2d", "'x3d'", "4-D");

    /* a filter shared by name between inputs of 3 and 4 channels */
    p = fl_prog_create();
    fl_var *x1 = fl_layer_data(p, "x1", FL_SHAPE(3, 8, 8), FL_FLOAT32, 0);
    fl_var *x2 = fl_layer_data(p, "x2", FL_SHAPE(4, 8, 8), FL_FLOAT32, 0);
    fl_conv2d_attr ca;
    memset(&ca, 0, sizeof ca);
    ca.filter.name = "shared_w";
    CHECK(fl_layer_conv2d(x1, 5, 3, 3, NULL, &ca) != NULL);
    CHECK(fl_layer_conv2d(x1, 5, 3, 3, NULL, &ca) != NULL); /* same shape: shared */
    expect_build_error(p, fl_layer_conv2d(x2, 5, 3, 3, NULL, &ca), "conv2d", "'x2'", "'shared_w'");

    p = fl_prog_create();
    x = fl_layer_data(p, "img", FL_SHAPE(3, 8, 8), FL_FLOAT32, 0);
    ca.filter.name = NULL;
    ca.groups = 2;
    expect_build_error(p, fl_layer_conv2d(x, 4, 3, 3, NULL, &ca), "conv2d", "'img'", "groups");
    p = fl_prog_create();
    x = fl_layer_data(p, "img", FL_SHAPE(3, 8, 8), FL_FLOAT32, 0);
    expect_build_error(p, fl_layer_conv2d(x, 4, 3, 3, "gelu", NULL), "conv2d", "'img'", "activation");
    p = fl_prog_create();
    x = fl_layer_data(p, "img", FL_SHAPE(3, 4, 4), FL_FLOAT32, 0);
    expect_build_error(p, fl_layer_conv2d(x, 4, 6, 3, NULL, NULL), "conv2d", "'img'", "larger than the padded input");

    /* pool sizes */
    p = fl_prog_create();
    x = fl_layer_data(p, "img", FL_SHAPE(3, 4, 4), FL_FLOAT32, 0);
    expect_build_error(p, fl_layer_pool2d(x, 0, "max", 1, 0, 0, 1), "pool2d", "'img'", "pool size");
    p = fl_prog_create();
    x = fl_layer_data(p, "img", FL_SHAPE(3, 4, 4), FL_FLOAT32, 0);
    expect_build_error(p, fl_layer_pool2d(x, 5, "avg", 1, 0, 0, 1), "pool2d", "'img'", "larger than the padded input");
    p = fl_prog_create();
    x = fl_layer_data(p, "img", FL_SHAPE(3, 4, 4), FL_FLOAT32, 0);
    expect_build_error(p, fl_layer_pool2d(x, 2, "min", 1, 0, 0, 1), "pool2d", "'img'", "'min'");
    p = fl_prog_create();
    x = fl_layer_data(p, "img", FL_SHAPE(3, 4, 4), FL_FLOAT32, 0);
    expect_build_error(p, fl_layer_pool2d(x, 2, "max", 0, 0, 0, 1), "pool2d", "'img'", "pool_stride");

    /* batch_norm */
    p = fl_prog_create();
    x = fl_layer_data(p, "v", 0, NULL, FL_FLOAT32, 0);
    expect_build_error(p, fl_layer_batch_norm(x, NULL, 0, 0.9f, 1e-5f, NULL), "batch_norm", "'v'", "rank 2 to 5");
    p = fl_prog_create();
    x = fl_layer_data(p, "img", FL_SHAPE(3, 4, 4), FL_FLOAT32, 0);
    expect_build_error(p, fl_layer_batch_norm(x, NULL, 0, 0.9f, 0.5f, NULL), "batch_norm", "'img'", "epsilon");
    p = fl_prog_create();
    x = fl_layer_data(p, "img", FL_SHAPE(3, 4, 4), FL_FLOAT32, 0);
    fl_var *s4 = fl_layer_create_parameter(p, FL_SHAPE(4), FL_FLOAT32, &(fl_param_attr){.name = "mm4"});
    CHECK(s4 != NULL);
    expect_build_error(p, fl_layer_batch_norm(x, NULL, 0, 0.9f, 1e-5f, &(fl_batch_norm_attr){.moving_mean_name = "mm4"}),
                       "batch_norm", "'img'", "'mm4'");

    /* sticky errors: a NULL input gives NULL without a new error */
    p = fl_prog_create();
    CHECK(fl_layer_conv2d(NULL, 4, 3, 3, NULL, NULL) == NULL);
    CHECK(fl_layer_pool2d(NULL, 2, "max", 2, 0, 0, 1) == NULL);
    CHECK(fl_layer_batch_norm(NULL, NULL, 0, 0.9f, 1e-5f, NULL) == NULL);
    fl_prog_free(p);
}

/* The ops' shape inference itself (as a parsed program runs it) names op and variables. */
TEST(infer_errors_from_text)
{
    reg();
    const char *t = "fleet-program 1\n"
                    "var x float32 [-1,3,8,8] data stop_gradient\n"
                    "var w float32 [4,2,3,3] persistable param\n"
                    "var y float32 [-1,4,6,6]\n"
                    "op conv2d role=forward in Input=x Filter=w out Output=y attr strides=ints:[1,1] "
                    "paddings=ints:[0,0] dilations=ints:[1,1] groups=int:1\n";
    fl_prog *p = NULL;
    CHECK(fl_prog_from_text(t, strlen(t), &p) != FL_OK);
    CHECK_STR_HAS(fl_last_error(), "conv2d");
    CHECK_STR_HAS(fl_last_error(), "'x'");
    CHECK_STR_HAS(fl_last_error(), "'w'");
    const char *t2 = "fleet-program 1\n"
                     "var x float32 [-1,3,8,8] data stop_gradient\n"
                     "var y float32 [-1,3,4,4]\n"
                     "op pool2d role=forward in X=x out Out=y attr pooling_type=str:\"max\" ksize=ints:[2,2] "
                     "strides=ints:[2,2] paddings=ints:[0,0] data_format=str:\"NHWC\"\n";
    CHECK(fl_prog_from_text(t2, strlen(t2), &p) != FL_OK);
    CHECK_STR_HAS(fl_last_error(), "pool2d");
    CHECK_STR_HAS(fl_last_error(), "NHWC");
    CHECK_STR_HAS(fl_last_error(), "'x'");
}

/* Spatial dims known only at run time: a too small image fails at run time, naming them. */
TEST(runtime_shape_error)
{
    reg();
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(1, -1, -1), FL_FLOAT32, 0);
    fl_var *y = fl_layer_conv2d(x, 2, 3, 3, NULL, NULL);
    CHECK(y != NULL);
    CHECK_EQ_INT(fl_var_shape(y)[2], -1);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    float xd[4] = {1, 2, 3, 4};
    fl_tensor *xt = th_f32(4, (const int64_t[]){1, 1, 2, 2}, xd);
    fl_feed feed[] = {{"x", xt}};
    const char *f[1] = {fl_var_name(y)};
    fl_tensor *out;
    CHECK_FAILS(fl_exe_run(e, p, feed, 1, f, 1, &out), FL_EINVAL, "conv2d");
    CHECK_STR_HAS(fl_last_error(), "'x'");
    CHECK_STR_HAS(fl_last_error(), "larger than the padded input");
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_prog_free(p);
}

/* to_text / from_text keep every attribute: the parsed program computes the same. */
TEST(text_round_trip)
{
    reg();
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2, 6, 6), FL_FLOAT32, 0);
    fl_conv2d_attr ca;
    memset(&ca, 0, sizeof ca);
    ca.stride[0] = 2, ca.padding[1] = 1, ca.groups = 2;
    fl_var *h = fl_layer_conv2d(x, 4, 3, 2, "tanh", &ca);
    h = fl_layer_batch_norm(h, "relu", 0, 0.8f, 1e-4f, NULL);
    h = fl_layer_pool2d(h, 2, "avg", 1, 1, 0, 0);
    CHECK(h != NULL);
    char *txt = NULL;
    size_t len = 0;
    CHECK_OK(fl_prog_to_text(p, &txt, &len));
    fl_prog *q = NULL;
    CHECK_OK(fl_prog_from_text(txt, len, &q));
    fl_scope *sc = fl_scope_create(NULL);
    fl_exe *e = fl_exe_create(sc);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    float xd[144];
    th_fill_uniform(xd, 144, -1, 1, 3);
    fl_tensor *xt = th_f32(4, (const int64_t[]){2, 2, 6, 6}, xd);
    fl_feed feed[] = {{"x", xt}};
    fl_tensor *a = fl_tensor_create(FL_FLOAT32, 1, (const int64_t[]){1});
    CHECK_OK(fl_tensor_copy(a, run1(e, p, feed, 1, h)));
    fl_tensor *b = run1(e, q, feed, 1, fl_prog_var(q, fl_var_name(h)));
    CHECK_EQ_INT(fl_tensor_numel(a), fl_tensor_numel(b));
    for (int64_t i = 0; i < fl_tensor_numel(a); i++) CHECK_NEAR(fl_tensor_f32(b)[i], fl_tensor_f32(a)[i], 1e-5);
    fl_tensor_free(a);
    fl_tensor_free(xt);
    free(txt);
    fl_exe_free(e);
    fl_scope_free(sc);
    fl_prog_free(q);
    fl_prog_free(p);
}

/* A small CNN learns which half of an 8x8 image is brighter: conv-bn-relu-pool-fc-softmax. */
TEST(cnn_trains)
{
    reg();
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(1, 8, 8), FL_FLOAT32, 0);
    fl_var *lab = fl_layer_data(p, "label", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = fl_layer_conv2d(x, 4, 3, 3, NULL, &(fl_conv2d_attr){.padding = {1, 1}});
    h = fl_layer_batch_norm(h, "relu", 0, 0.9f, 1e-5f, NULL);
    h = fl_layer_pool2d(h, 2, "max", 2, 0, 0, 1);
    fl_var *prob = fl_layer_fc(FL_VARS(h), 2, "softmax");
    fl_var *loss = fl_layer_mean(fl_layer_cross_entropy(prob, lab));
    fl_opt *o = fl_opt_sgd(0.2f);
    CHECK_OK(fl_opt_minimize(o, loss));
    CHECK(fl_prog_var(p, "conv2d_0.w_0@GRAD") != NULL);
    CHECK(fl_prog_var(p, "batch_norm_0.w_0@GRAD") != NULL);
    CHECK(fl_prog_var(p, "batch_norm_0.w_1@GRAD") == NULL);
    fl_prog *tp = fl_prog_clone(p, 1);
    fl_scope *sc = fl_scope_create(NULL);
    fl_exe *e = fl_exe_create(sc);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    float xd[16 * 64];
    int64_t ld[16];
    double first = 0, last = 0;
    for (int step = 0; step < 60; step++) {
        th_fill_uniform(xd, 16 * 64, 0, 1, 1000 + (unsigned)step);
        for (int n = 0; n < 16; n++) {
            ld[n] = (n + step) % 2;
            for (int i = 0; i < 64; i++)
                if ((i % 8 < 4) == (ld[n] == 1)) xd[n * 64 + i] += 0.5f;
        }
        fl_tensor *xt = th_f32(4, (const int64_t[]){16, 1, 8, 8}, xd), *lt = th_i64(2, (const int64_t[]){16, 1}, ld);
        fl_feed feed[] = {{"x", xt}, {"label", lt}};
        float l = fl_tensor_f32(run1(e, p, feed, 2, loss))[0];
        if (step < 5) first += l / 5;
        if (step >= 55) last += l / 5;
        if (step == 59) { /* inference through the moving statistics classifies the batch */
            const float *pr = fl_tensor_f32(run1(e, tp, feed, 2, fl_prog_var(tp, fl_var_name(prob))));
            int right = 0;
            for (int n = 0; n < 16; n++) right += (pr[2 * n + 1] > pr[2 * n]) == (ld[n] == 1);
            CHECK(right >= 14);
        }
        fl_tensor_free(xt);
        fl_tensor_free(lt);
    }
    CHECK(last < 0.5 * first);
    fl_opt_free(o);
    fl_exe_free(e);
    fl_scope_free(sc);
    fl_prog_free(tp);
    fl_prog_free(p);
}

TEST_MAIN(T(conv2d_fixed_configs), T(conv2d_random_shapes), T(conv2d_names_and_init), T(pool2d_fixed_configs),
          T(pool2d_random_shapes), T(pool2d_square_layer), T(batch_norm_2d), T(batch_norm_4d),
          T(batch_norm_3d_momentum_act), T(batch_norm_5d), T(batch_norm_random_shapes),
          T(batch_norm_state_and_is_test_attr), T(build_errors), T(infer_errors_from_text), T(runtime_shape_error),
          T(text_round_trip), T(cnn_trains))
