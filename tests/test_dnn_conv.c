/* test_dnn_conv.c - conv2d on oneDNN (src/tensor/dnn_conv.c) against the im2col + sgemm
 * path of src/graph/ops_conv.c (FLEET_GEMM=dnnl vs openblas) on odd shapes: strides,
 * paddings, dilations, groups, depthwise, 1x1, batch 1, non-square, each fused
 * activation; the primitive cache's steady state (no primitive made after the first
 * step); bfloat16 inputs (AMP) against float32.  Without oneDNN in the build the tests
 * check the errors and return. */
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

/* AMP: conv2d in the bf16 white list computes in bfloat16 on oneDNN and widened on
 * OpenBLAS; the outputs and gradients stay float32 and within bf16 rounding of the
 * float32 program (inputs rounded to 8 significant bits: stated tolerance 3e-2 relative,
 * measured about 5e-3). */
static void amp_case(const char *lib)
{
    cfg k = {2, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "tanh"};
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
    printf("  %s: bf16 AMP vs float32, largest relative difference %.2e\n", lib, w);
    CHECK(w < 3e-2);
    CHECK(w > 0); /* the rounding did happen */
    results_free(&a);
    results_free(&b);
    fl_scope_free(s32);
    fl_scope_free(s16);
    fl_prog_free(p32);
    fl_prog_free(p16);
}

TEST(amp_bf16_conv_dnnl)
{
    if (!have_dnnl()) return;
    amp_case("dnnl");
}

TEST(amp_bf16_conv_openblas) { amp_case("openblas"); }

TEST_MAIN(T(dnnl_matches_im2col_on_odd_shapes), T(dnnl_steady_step_makes_no_primitive), T(amp_bf16_conv_dnnl),
          T(amp_bf16_conv_openblas))
