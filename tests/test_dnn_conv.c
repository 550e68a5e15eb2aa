/* test_dnn_conv.c - conv2d on oneDNN (src/tensor/dnn_conv.c) against the im2col + sgemm
 * path of src/graph/ops_conv.c (FLEET_GEMM=dnnl vs openblas) on odd shapes: strides,
 * paddings, dilations, groups, depthwise, 1x1, batch 1, non-square, each fused
 * activation; the primitive cache's steady state (no primitive made after the first
 * step); bfloat16 inputs (AMP) against float32; the choice of NHWC activations where
 * oneDNN's blocked layouts would pad the channels (LeNet's 20 and 50), and those NHWC
 * convolutions against im2col, with the output gradient reordered once for both backward
 * directions; oneDNN's Winograd convolutions (FLEET_CONV_ALGO) against its direct ones in each
 * direction, the kernel the switch and the rule choose, and a bad value's error; no
 * backward-data for a convolution whose input needs no gradient.  Without oneDNN in the build
 * the tests check the errors and return. */
#include "gradcheck.h"

#include "tensor/dnn_conv.h"

static void use_lib(const char *name)
{
    setenv("FLEET_GEMM", name, 1);
    fl__gemm_lib_reload();
}

typedef struct {
    int64_t n, c, h, w, m;
    int kh, kw, sh, sw, ph, pw, dh, dw, g, bias;
    const char *act;
} cfg;

enum { NFETCH = 4 };
static const char *const fetch_names[NFETCH] = {"conv2d_0.tmp_0", "x@GRAD", "conv2d_0.w_0@GRAD", "conv2d_0.b_0@GRAD"};

typedef struct {
    float *v[NFETCH];
    int64_t n[NFETCH];
} results;

/* The conv2d of k on a parameter x, a loss of random weights, its gradients; amp
 * decorates the program first.  Returns the program; the scope gets the startup's values. */
static fl_prog *build(const cfg *k, int amp, fl_scope **scope)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(k->n, k->c, k->h, k->w), -1, 1);
    fl_conv2d_attr a;
    memset(&a, 0, sizeof a);
    a.stride[0] = k->sh, a.stride[1] = k->sw, a.padding[0] = k->ph, a.padding[1] = k->pw;
    a.dilation[0] = k->dh, a.dilation[1] = k->dw, a.groups = k->g, a.no_bias = !k->bias;
    a.filter.init = fl_init_uniform(-1, 1);
    a.bias.init = fl_init_uniform(-0.5f, 0.5f);
    fl_var *y = fl_layer_conv2d(x, k->m, k->kh, k->kw, k->act, &a);
    CHECK(y != NULL);
    CHECK(!strcmp(fl_var_name(y), fetch_names[0]));
    if (amp) CHECK(fl_amp_decorate(p, NULL) >= 1);
    fl_var *loss = gc_loss(y);
    CHECK_OK(fl_append_backward(loss, NULL, 0, NULL, NULL));
    *scope = fl_scope_create(NULL);
    fl_exe *e = fl_exe_create(*scope);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    fl_exe_free(e);
    return p;
}

/* One forward and backward step of p through `lib`, `steps` times in one executor;
 * the last step's output and gradients copied into r. */
static void run(fl_prog *p, fl_scope *scope, const char *lib, int bias, int steps, results *r)
{
    use_lib(lib);
    fl_exe *e = fl_exe_create(scope);
    int nf = bias ? NFETCH : NFETCH - 1;
    fl_tensor *out[NFETCH];
    for (int s = 0; s < steps; s++) CHECK_OK(fl_exe_run(e, p, NULL, 0, fetch_names, nf, out));
    memset(r, 0, sizeof *r);
    for (int i = 0; i < nf; i++) {
        CHECK(fl_tensor_dtype(out[i]) == FL_FLOAT32);
        r->n[i] = fl_tensor_numel(out[i]);
        r->v[i] = malloc((size_t)(r->n[i] ? r->n[i] : 1) * sizeof(float));
        memcpy(r->v[i], fl_tensor_data(out[i]), (size_t)r->n[i] * sizeof(float));
    }
    fl_exe_free(e);
}

static void results_free(results *r)
{
    for (int i = 0; i < NFETCH; i++) free(r->v[i]);
}

/* Largest |a - b| / (1 + |b|) over the fetched tensors. */
static double worst_diff(const results *a, const results *b)
{
    double w = 0;
    for (int i = 0; i < NFETCH; i++) {
        CHECK_EQ_INT(a->n[i], b->n[i]);
        for (int64_t j = 0; j < a->n[i]; j++) w = fmax(w, fabs(a->v[i][j] - b->v[i][j]) / (1 + fabs(b->v[i][j])));
    }
    return w;
}

static int have_dnnl(void)
{
    if (fl__dnn_available()) return 1;
    printf("  (this build has no oneDNN: only the error is checked)\n");
    fl_conv_desc d;
    memset(&d, 0, sizeof d);
    d.n = 1;
    fl_conv_cache *c = NULL;
    CHECK_FAILS(fl__conv_fwd(&c, &d, NULL, NULL, NULL, NULL), FL_EUNSUPPORTED, "this build has no oneDNN");
    return 0;
}

/* oneDNN's output and gradients equal the im2col path's within 1e-5 relative (float32
 * sums in another order). */
static void compare(cfg k)
{
    fl_scope *sc = NULL;
    fl_prog *p = build(&k, 0, &sc);
    results a, b;
    run(p, sc, "dnnl", k.bias, 1, &a);
    run(p, sc, "openblas", k.bias, 1, &b);
    double w = worst_diff(&a, &b);
    if (w > 1e-5)
        TFAIL("n%lld c%lld %lldx%lld m%lld k%dx%d s%dx%d p%dx%d d%dx%d g%d %s: oneDNN differs from im2col by %g",
              (long long)k.n, (long long)k.c, (long long)k.h, (long long)k.w, (long long)k.m, k.kh, k.kw, k.sh, k.sw, k.ph,
              k.pw, k.dh, k.dw, k.g, k.act ? k.act : "-", w);
    results_free(&a);
    results_free(&b);
    fl_scope_free(sc);
    fl_prog_free(p);
}

TEST(dnnl_matches_im2col_on_odd_shapes)
{
    if (!have_dnnl()) return;
    /* n c h w m | kh kw sh sw ph pw dh dw g bias act */
    compare((cfg){1, 1, 28, 28, 20, 5, 5, 1, 1, 0, 0, 1, 1, 1, 1, "relu"}); /* LeNet's first layer, batch 1 */
    compare((cfg){3, 20, 12, 12, 50, 5, 5, 1, 1, 0, 0, 1, 1, 1, 1, NULL});  /* and its second */
    compare((cfg){2, 3, 7, 6, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, "tanh"});    /* stride 2, padding 1 */
    compare((cfg){1, 2, 9, 8, 3, 3, 3, 1, 1, 2, 2, 2, 2, 1, 0, "sigmoid"}); /* dilation 2 */
    compare((cfg){2, 4, 7, 5, 6, 3, 2, 1, 2, 1, 0, 1, 1, 2, 1, "relu"});    /* groups 2, non-square */
    compare((cfg){2, 4, 8, 7, 4, 3, 3, 3, 2, 1, 2, 1, 2, 4, 0, NULL});      /* depthwise, strides 3x2 */
    compare((cfg){2, 6, 4, 4, 6, 1, 1, 1, 1, 0, 0, 1, 1, 3, 1, NULL});      /* 1x1 */
    compare((cfg){1, 4, 5, 5, 8, 1, 1, 2, 1, 1, 0, 1, 1, 1, 1, NULL});      /* 1x1 strided, padded */
    compare((cfg){2, 2, 7, 6, 3, 2, 3, 2, 1, 0, 1, 1, 2, 1, 1, NULL});      /* right padding -1 */
    compare((cfg){1, 1, 3, 3, 2, 5, 5, 1, 1, 2, 2, 1, 1, 1, 1, NULL});      /* filter = padded image */
    compare((cfg){5, 16, 9, 9, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "relu"});  /* blocked layouts */
}

/* The conv2d of k as the cache sees it (float32). */
static fl_conv_desc desc_of(cfg k)
{
    fl_conv_desc d;
    memset(&d, 0, sizeof d);
    d.n = k.n, d.c = k.c, d.h = k.h, d.w = k.w, d.m = k.m, d.kh = k.kh, d.kw = k.kw, d.sh = k.sh, d.sw = k.sw;
    d.ph = k.ph, d.pw = k.pw, d.dh = k.dh, d.dw = k.dw, d.g = k.g;
    d.oh = (k.h + 2 * k.ph - k.dh * (k.kh - 1) - 1) / k.sh + 1;
    d.ow = (k.w + 2 * k.pw - k.dw * (k.kw - 1) - 1) / k.sw + 1;
    d.x_type = d.w_type = FL_FLOAT32;
    return d;
}

/* Channels that blocked layouts would pad (20 -> 32 and 50 -> 64 with AVX-512's 16-float
 * blocks, 24 and 56 with AVX2's 8) run NHWC; channels that fill the blocks, inputs of 1
 * channel and groups keep oneDNN's layouts.  The NHWC convolutions (strides, paddings,
 * dilations, batch 1, every activation) equal im2col's as the others do. */
TEST(dnnl_nhwc_where_blocks_would_pad)
{
    if (!have_dnnl()) return;
    cfg lenet2 = {32, 20, 12, 12, 50, 5, 5, 1, 1, 0, 0, 1, 1, 1, 1, "relu"};
    cfg full = {32, 16, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "relu"};
    cfg lenet1 = {32, 1, 28, 28, 20, 5, 5, 1, 1, 0, 0, 1, 1, 1, 1, "relu"};
    cfg grouped = {2, 20, 9, 9, 50, 3, 3, 1, 1, 1, 1, 1, 1, 5, 1, NULL};
    fl_conv_desc d = desc_of(lenet2);
    int isa = (int)dnnl_get_effective_cpu_isa();
    printf("  LeNet's second convolution: %s (oneDNN ISA %d)\n", fl__conv_channels_last(&d) ? "NHWC" : "oneDNN's layouts",
           isa);
    if ((isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2) CHECK_EQ_INT(fl__conv_channels_last(&d), 1);
    d = desc_of(full);
    CHECK_EQ_INT(fl__conv_channels_last(&d), 0);
    d = desc_of(lenet1);
    CHECK_EQ_INT(fl__conv_channels_last(&d), 0);
    d = desc_of(grouped);
    CHECK_EQ_INT(fl__conv_channels_last(&d), 0);
    uint64_t shared = fl__conv_dy_reorders_shared();
    /* n c h w m | kh kw sh sw ph pw dh dw g bias act */
    compare((cfg){1, 20, 12, 12, 50, 5, 5, 1, 1, 0, 0, 1, 1, 1, 1, "relu"});  /* batch 1 */
    compare((cfg){2, 20, 9, 8, 50, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0, "tanh"});    /* strides, padding */
    compare((cfg){3, 6, 10, 9, 10, 3, 2, 1, 2, 2, 0, 2, 1, 1, 1, "sigmoid"}); /* dilation, non-square */
    compare((cfg){4, 20, 12, 12, 50, 5, 5, 1, 1, 0, 0, 1, 1, 1, 1, NULL});    /* no activation */
    /* both backward directions read dy in NHWC: reordered once for the two */
    d = desc_of(lenet2);
    if (fl__conv_channels_last(&d)) CHECK(fl__conv_dy_reorders_shared() >= shared + 4);
}

TEST(dnnl_steady_step_makes_no_primitive)
{
    if (!have_dnnl()) return;
    cfg k = {4, 3, 10, 10, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "relu"};
    fl_scope *sc = NULL;
    fl_prog *p = build(&k, 0, &sc);
    use_lib("dnnl");
    fl_exe *e = fl_exe_create(sc);
    CHECK_OK(fl_exe_run(e, p, NULL, 0, NULL, 0, NULL));
    uint64_t made = fl__conv_primitives_created();
    CHECK(made >= 3); /* forward, backward-data, backward-weights (+ reorders) */
    for (int s = 0; s < 5; s++) CHECK_OK(fl_exe_run(e, p, NULL, 0, NULL, 0, NULL));
    CHECK_EQ_INT(fl__conv_primitives_created(), made);
    fl_exe_free(e);
    fl_scope_free(sc);
    fl_prog_free(p);
}

/* Two convolutions on an input that needs no gradient (a frozen parameter, as a network's
 * images): each step runs 2 forward and 2 backward-weights convolutions and 1 backward-data,
 * the second's (the first convolution's input gradient is never computed). */
TEST(dnnl_no_backward_data_for_an_input_without_gradient)
{
    if (!have_dnnl()) return;
    fl_prog *p = fl_prog_create();
    fl_param_attr xa;
    memset(&xa, 0, sizeof xa);
    xa.name = "img";
    xa.frozen = 1;
    xa.init = fl_init_uniform(-1, 1);
    fl_var *x = fl_layer_create_parameter(p, FL_SHAPE(2, 16, 8, 8), FL_FLOAT32, &xa);
    fl_conv2d_attr a;
    memset(&a, 0, sizeof a);
    a.padding[0] = a.padding[1] = 1, a.no_bias = 1;
    fl_var *y = fl_layer_conv2d(fl_layer_conv2d(x, 16, 3, 3, "relu", &a), 16, 3, 3, NULL, &a);
    CHECK(y != NULL);
    CHECK_OK(fl_append_backward(gc_loss(y), NULL, 0, NULL, NULL));
    CHECK(fl_prog_var(p, "img@GRAD") == NULL);
    fl_scope *sc = fl_scope_create(NULL);
    use_lib("dnnl");
    fl_exe *e = fl_exe_create(sc);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    uint64_t r0[3];
    for (int d = 0; d < 3; d++) r0[d] = fl__conv_runs(d);
    for (int s = 0; s < 3; s++) CHECK_OK(fl_exe_run(e, p, NULL, 0, NULL, 0, NULL));
    CHECK_EQ_INT(fl__conv_runs(FL_CONV_FWD) - r0[FL_CONV_FWD], 6);
    CHECK_EQ_INT(fl__conv_runs(FL_CONV_BWD_DATA) - r0[FL_CONV_BWD_DATA], 3);
    CHECK_EQ_INT(fl__conv_runs(FL_CONV_BWD_WEIGHTS) - r0[FL_CONV_BWD_WEIGHTS], 6);
    fl_exe_free(e);
    fl_scope_free(sc);
    fl_prog_free(p);
}

/* AMP: conv2d in the bf16 white list computes in bfloat16 on oneDNN and widened on
 * OpenBLAS; the outputs and gradients stay float32 and within bf16 rounding of the
 * float32 program (inputs rounded to 8 significant bits: stated tolerance 3e-2 relative,
 * measured 7.6e-3 with 27 products per output, 1.9e-2 with 80: the same on both paths). */
static void amp_case(const char *lib, cfg k)
{
    fl_scope *s32 = NULL, *s16 = NULL;
    fl_prog *p32 = build(&k, 0, &s32), *p16 = build(&k, 1, &s16);
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(fl_prog_to_text(p16, &text, &len));
    CHECK_STR_HAS(text, "x.cast_bf16");
    free(text);
    results a, b;
    run(p32, s32, lib, 1, 1, &a);
    run(p16, s16, lib, 1, 1, &b);
    double w = worst_diff(&b, &a);
    printf("  %s, c%lld m%lld: bf16 AMP vs float32, largest relative difference %.2e\n", lib, (long long)k.c,
           (long long)k.m, w);
    CHECK(w < 3e-2);
    CHECK(w > 0); /* the rounding did happen */
    results_free(&a);
    results_free(&b);
    fl_scope_free(s32);
    fl_scope_free(s16);
    fl_prog_free(p32);
    fl_prog_free(p16);
}

static const cfg amp_small = {2, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "tanh"};
static const cfg amp_nhwc = {2, 20, 9, 9, 50, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, "tanh"}; /* channels as LeNet's */

TEST(amp_bf16_conv_dnnl)
{
    if (!have_dnnl()) return;
    amp_case("dnnl", amp_small);
    fl_conv_desc d = desc_of(amp_nhwc);
    d.x_type = d.w_type = FL_BFLOAT16;
    printf("  c%lld m%lld in bf16: %s\n", (long long)d.c, (long long)d.m,
           fl__conv_channels_last(&d) ? "NHWC" : "oneDNN's layouts");
    amp_case("dnnl", amp_nhwc);
}

TEST(amp_bf16_conv_openblas)
{
    amp_case("openblas", amp_small);
    amp_case("openblas", amp_nhwc);
}

/* Uniform [-1, 1) from a fixed seed. */
static float *rand_buf(int64_t n, uint64_t seed)
{
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((seed >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    }
    return v;
}

/* The three directions of d (bias and relu fused in the forward) by FLEET_CONV_ALGO=algo, in
 * a fresh cache: y, dx, dw, and each direction's kernel name into impl[0..2]; ys gets the
 * forward with the residual r added by the sum post-op before the relu (the inference
 * pass's), its kernel name into impl[3]. */
static void conv3(const char *algo, const fl_conv_desc *d, const float *x, const float *w, const float *b, const float *dy,
                  const float *r, float *y, float *ys, float *dx, float *dw, char impl[4][48])
{
    setenv("FLEET_CONV_ALGO", algo, 1);
    fl_conv_cache *c = NULL;
    fl_conv_desc ds = *d;
    ds.sum = 1;
    CHECK_OK(fl__conv_fwd_sum(&c, &ds, x, w, b, r, ys));
    snprintf(impl[3], 48, "%s", fl__conv_impl(c, FL_CONV_FWD));
    CHECK_OK(fl__conv_fwd(&c, d, x, w, b, y));
    snprintf(impl[0], 48, "%s", fl__conv_impl(c, FL_CONV_FWD));
    CHECK_OK(fl__conv_bwd(&c, d, x, dy, w, dx, dw));
    snprintf(impl[1], 48, "%s", fl__conv_impl(c, FL_CONV_BWD_DATA));
    snprintf(impl[2], 48, "%s", fl__conv_impl(c, FL_CONV_BWD_WEIGHTS));
    fl__conv_cache_free(c);
    unsetenv("FLEET_CONV_ALGO");
}

/* Largest |a - b| over the largest |b|: the error on the tensor's own scale. */
static double scaled_diff(const float *a, const float *b, int64_t n)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i])), m = fmax(m, fabs((double)b[i]));
    return m > 0 ? e / m : e;
}

/* Winograd against direct on the same inputs, each direction, on ResNet-50's 3x3 shapes made
 * small (the 56/28/14/7 stages' channels at batch 2) and an odd size (tiles cut at the edge),
 * the forward with bias and relu, and with the sum post-op too (the inference pass's fused
 * residual): each output's largest difference within WINO_TOL_E6 millionths of its largest magnitude
 * (F(4x4, 3x3) rounds more than a direct sum: measured up to 2.5e-6 forward, 3.0e-6
 * backward-data and 8.5e-7 backward-weights with inputs, filters and output gradients uniform
 * in [-1, 1), against float32's 6e-8 per rounding).  Where this oneDNN has
 * Winograd kernels (AVX-512) the forced switch runs them, named jit_wino; direct's kernels
 * are not; elsewhere the convolution is made direct silently and the results agree exactly. */
enum { WINO_TOL_E6 = 20 };
static void wino_case(int64_t n, int64_t c, int64_t h, int64_t m)
{
    fl_conv_desc d = desc_of((cfg){n, c, h, h, m, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "relu"});
    d.has_bias = 1, d.act = FL_ACT_RELU;
    int64_t nx = n * c * h * h, nw = m * c * 9, ny = n * m * h * h;
    float *x = rand_buf(nx, 1), *w = rand_buf(nw, 2), *b = rand_buf(m, 3), *dy = rand_buf(ny, 4), *r = rand_buf(ny, 5);
    float *y[2], *ys[2], *dx[2], *dw[2];
    char impl[2][4][48];
    for (int a = 0; a < 2; a++) {
        y[a] = malloc((size_t)ny * sizeof(float)), ys[a] = malloc((size_t)ny * sizeof(float));
        dx[a] = malloc((size_t)nx * sizeof(float)), dw[a] = malloc((size_t)nw * sizeof(float));
        conv3(a ? "winograd" : "direct", &d, x, w, b, dy, r, y[a], ys[a], dx[a], dw[a], impl[a]);
    }
    double e[4] = {scaled_diff(y[1], y[0], ny), scaled_diff(dx[1], dx[0], nx), scaled_diff(dw[1], dw[0], nw),
                   scaled_diff(ys[1], ys[0], ny)};
    int isa = (int)dnnl_get_effective_cpu_isa(), avx512 = (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
    printf("  n%lld c%lld %lldx%lld m%lld: winograd vs direct %.1e / %.1e / %.1e, with the sum post-op %.1e (%s / %s / %s "
           "/ %s against %s)\n",
           (long long)n, (long long)c, (long long)h, (long long)h, (long long)m, e[0], e[1], e[2], e[3], impl[1][0],
           impl[1][1], impl[1][2], impl[1][3], impl[0][0]);
    for (int i = 0; i < 4; i++) {
        CHECK(e[i] <= WINO_TOL_E6 * 1e-6);
        CHECK(!strstr(impl[0][i], "wino"));
        if (avx512) CHECK_STR_HAS(impl[1][i], "wino");
        if (!strstr(impl[1][i], "wino")) CHECK(e[i] == 0); /* made direct: the same kernel */
    }
    if (avx512) CHECK(e[0] > 0); /* another algorithm did run */
    for (int a = 0; a < 2; a++) free(y[a]), free(ys[a]), free(dx[a]), free(dw[a]);
    free(x), free(w), free(b), free(dy), free(r);
}

TEST(dnnl_winograd_matches_direct)
{
    if (!have_dnnl()) return;
    wino_case(2, 64, 14, 64);  /* the 56x56 stage's channels */
    wino_case(2, 128, 7, 128); /* 28's, on 7x7: one tile and the edge of the next */
    wino_case(1, 256, 9, 256); /* 14's, odd size */
    wino_case(1, 512, 7, 512); /* 7's */
}

/* FLEET_CONV_ALGO: the rule (auto) and the forced values, for the shape alone: float32 3x3
 * stride 1 convolutions of 32 channels and more over enough pixels take Winograd, the first
 * layer's 3 channels, 16 channels and few pixels direct; bf16 (AMP), strides, 1x1, dilations
 * and groups stay direct whatever the switch says; a bad
 * value is an error naming the variable, from the rule and from a convolution; a cache keeps
 * the two algorithms' primitives apart (the key holds the choice); a forced Winograd that
 * oneDNN has no kernel for (tanh post-op) is made direct. */
TEST(conv_algo_switch)
{
    fl_conv_desc rn = desc_of((cfg){8, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NULL});
    fl_conv_desc first = desc_of((cfg){8, 3, 224, 224, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NULL});
    fl_conv_desc bf = rn, strided = desc_of((cfg){8, 64, 56, 56, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, NULL});
    fl_conv_desc one = desc_of((cfg){8, 64, 56, 56, 256, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, NULL});
    fl_conv_desc dil = desc_of((cfg){8, 64, 56, 56, 64, 3, 3, 1, 1, 2, 2, 2, 2, 1, 1, NULL});
    fl_conv_desc grp = desc_of((cfg){8, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1, NULL});
    bf.x_type = FL_BFLOAT16;
    const fl_conv_desc *never[] = {&bf, &strided, &one, &dil, &grp};
    unsetenv("FLEET_CONV_ALGO");
    for (int dir = FL_CONV_FWD; dir <= FL_CONV_BWD_WEIGHTS; dir++) {
        CHECK_EQ_INT(fl__conv_winograd(&rn, dir), 1);
        setenv("FLEET_CONV_ALGO", "direct", 1);
        CHECK_EQ_INT(fl__conv_winograd(&rn, dir), 0);
        setenv("FLEET_CONV_ALGO", "winograd", 1);
        CHECK_EQ_INT(fl__conv_winograd(&rn, dir), 1);
        CHECK_EQ_INT(fl__conv_winograd(&first, dir), 1);
        for (int i = 0; i < 5; i++) CHECK_EQ_INT(fl__conv_winograd(never[i], dir), 0);
        setenv("FLEET_CONV_ALGO", "auto", 1);
        CHECK_EQ_INT(fl__conv_winograd(&rn, dir), 1);
        for (int i = 0; i < 5; i++) CHECK_EQ_INT(fl__conv_winograd(never[i], dir), 0);
        unsetenv("FLEET_CONV_ALGO");
    }
    /* auto: the first layer's 3 channels, 16 channels, few pixels stay direct; backward-weights
     * takes Winograd from fewer pixels than the other two */
    fl_conv_desc c16 = desc_of((cfg){8, 16, 56, 56, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NULL});
    fl_conv_desc last8 = desc_of((cfg){8, 512, 7, 7, 512, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NULL});
    fl_conv_desc last2 = last8, tiny = desc_of((cfg){8, 64, 4, 4, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NULL});
    last2.n = 2;
    for (int dir = FL_CONV_FWD; dir <= FL_CONV_BWD_WEIGHTS; dir++) {
        CHECK_EQ_INT(fl__conv_winograd(&first, dir), 0);
        CHECK_EQ_INT(fl__conv_winograd(&c16, dir), 0);
        CHECK_EQ_INT(fl__conv_winograd(&last8, dir), 1);
        CHECK_EQ_INT(fl__conv_winograd(&last2, dir), 0);
        CHECK_EQ_INT(fl__conv_winograd(&tiny, dir), dir == FL_CONV_BWD_WEIGHTS);
    }
    setenv("FLEET_CONV_ALGO", "fast", 1);
    CHECK_FAILS(fl__conv_winograd(&rn, FL_CONV_FWD), FL_EINVAL, "FLEET_CONV_ALGO='fast'");
    CHECK_STR_HAS(fl_last_error(), "auto|direct|winograd");
    unsetenv("FLEET_CONV_ALGO");
    if (!have_dnnl()) return;
    fl_conv_desc d = desc_of((cfg){2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NULL});
    float *x = rand_buf(2 * 16 * 64, 5), *w = rand_buf(16 * 16 * 9, 6), *y = malloc(2 * 16 * 64 * sizeof(float));
    fl_conv_cache *c = NULL;
    setenv("FLEET_CONV_ALGO", "fast", 1);
    CHECK_FAILS(fl__conv_fwd(&c, &d, x, w, NULL, y), FL_EINVAL, "FLEET_CONV_ALGO");
    setenv("FLEET_CONV_ALGO", "direct", 1);
    CHECK_OK(fl__conv_fwd(&c, &d, x, w, NULL, y));
    CHECK(!strstr(fl__conv_impl(c, FL_CONV_FWD), "wino"));
    uint64_t made = fl__conv_primitives_created();
    setenv("FLEET_CONV_ALGO", "winograd", 1);
    CHECK_OK(fl__conv_fwd(&c, &d, x, w, NULL, y));
    int isa = (int)dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core) {
        CHECK_STR_HAS(fl__conv_impl(c, FL_CONV_FWD), "wino");
        CHECK(fl__conv_primitives_created() > made); /* its own entry, not direct's */
    }
    setenv("FLEET_CONV_ALGO", "direct", 1);
    made = fl__conv_primitives_created();
    CHECK_OK(fl__conv_fwd(&c, &d, x, w, NULL, y)); /* direct's entry again, still cached */
    CHECK(!strstr(fl__conv_impl(c, FL_CONV_FWD), "wino"));
    CHECK_EQ_INT(fl__conv_primitives_created(), made);
    /* no Winograd kernel with a tanh post-op: made direct, without an error */
    setenv("FLEET_CONV_ALGO", "winograd", 1);
    d.act = FL_ACT_TANH;
    CHECK_OK(fl__conv_fwd(&c, &d, x, w, NULL, y));
    CHECK(!strstr(fl__conv_impl(c, FL_CONV_FWD), "wino"));
    CHECK(*fl__conv_impl(c, FL_CONV_FWD) != 0);
    unsetenv("FLEET_CONV_ALGO");
    fl__conv_cache_free(c);
    free(x), free(w), free(y);
}

TEST_MAIN(T(dnnl_matches_im2col_on_odd_shapes), T(dnnl_nhwc_where_blocks_would_pad), T(dnnl_steady_step_makes_no_primitive),
          T(dnnl_no_backward_data_for_an_input_without_gradient), T(amp_bf16_conv_dnnl), T(amp_bf16_conv_openblas),
          T(dnnl_winograd_matches_direct), T(conv_algo_switch))
