/* test_amp_fp16.c - float16 AMP: the conversions (every code path against the compiler's
 * _Float16), float16 training against float32, dynamic and static loss scaling with the
 * step skipped on inf/NaN, matmul in low precision, and the errors. */
#include "testhelp.h"
#include "tensor/tensor_internal.h"
#include "ampnet.h"


/* ---- conversions --------------------------------------------------------------------- */

static uint16_t ref_f16(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

TEST(half_conversions_match_the_compiler)
{
    static const char *const impls[] = {"scalar", "f16c", "avx512f"};
    enum { N = 1 << 16 };
    static float xs[N + 40], back[N];
    static uint16_t hs[N + 40], all[N];
    float special[] = {0.0f,          -0.0f,     65504.0f,      65519.99f,     65520.0f, -65520.0f,      1e9f,
                       5.9604645e-8f, 2.98e-8f,  2.9802322e-8f, 8.9406967e-8f, 6.1e-5f,  6.1035156e-5f,  1e-10f,
                       INFINITY,      -INFINITY, 1.0f / 3,      0.1f,          -2.5f,    1.00048828125f, 1.000732421875f};
    int ns = (int)(sizeof special / sizeof special[0]);
    fl_rng r = {5};
    for (int i = 0; i < N + 40; i++) {
        if (i < ns) xs[i] = special[i];
        else { /* exponents from 2^-30 to 2^18, both signs */ float m = 1.0f + fl__rng_uniform(&r);
            xs[i] = ldexpf(m, (int)(fl__rng_uniform(&r) * 48) - 30) * (fl__rng_uniform(&r) < 0.5f ? -1.0f : 1.0f);
        }
    }
    for (int i = 0; i < N; i++) all[i] = (uint16_t)i;
    int tried = 0;
    for (int k = 0; k < 3; k++) {
        const char *got = fl__half_impl_force(impls[k]);
        if (!got) {
            printf("  %s: not on this CPU\n", impls[k]);
            continue;
        }
        tried++;
        fl__cvt_f32_to_f16(hs, xs, N + 37); /* an odd length: the vector loops' tails */
        for (int i = 0; i < N + 37; i++)
            if (hs[i] != ref_f16(xs[i])) TFAIL("%s: %.9g -> 0x%04x, expected 0x%04x", got, xs[i], hs[i], ref_f16(xs[i]));
        fl__cvt_f16_to_f32(back, all, N);
        for (int i = 0; i < N; i++) {
            _Float16 h;
            memcpy(&h, &all[i], 2);
            float want = (float)h;
            if (isnan(want) ? !isnan(back[i]) : memcmp(&want, &back[i], 4) != 0)
                TFAIL("%s: 0x%04x -> %.9g, expected %.9g", got, all[i], back[i], want);
        }
        float nan = NAN;
        uint16_t hn;
        fl__cvt_f32_to_f16(&hn, &nan, 1);
        CHECK((hn & 0x7c00u) == 0x7c00u && (hn & 0x3ffu)); /* NaN stays NaN */
        printf("  %s: %d values and all 65536 halves agree\n", got, N + 37);
    }
    fl__half_impl_force(NULL);
    CHECK(tried >= 1);
}

/* fl__cvt_any (the cast op's conversions): every pair of float32, bfloat16 and float16;
 * bfloat16 <-> float16 goes through float32 in blocks (600 values: three blocks). */
TEST(cast_conversions_between_all_three)
{
    enum { N = 600 };
    static float x[N], y[N];
    static uint16_t b[N], h[N], h2[N], b2[N];
    for (int i = 0; i < N; i++) x[i] = ldexpf(1.0f + (float)i / N, i % 40 - 20) * (i % 2 ? -1.0f : 1.0f);
    CHECK_OK(fl__cvt_any(b, FL_BFLOAT16, x, FL_FLOAT32, N));
    CHECK_OK(fl__cvt_any(h2, FL_FLOAT16, b, FL_BFLOAT16, N));
    CHECK_OK(fl__cvt_any(y, FL_FLOAT32, b, FL_BFLOAT16, N));
    for (int i = 0; i < N; i++) CHECK_EQ_INT(h2[i], ref_f16(y[i])); /* bf16 -> f16 = bf16 -> f32 -> f16 */
    CHECK_OK(fl__cvt_any(h, FL_FLOAT16, x, FL_FLOAT32, N));
    CHECK_OK(fl__cvt_any(b2, FL_BFLOAT16, h, FL_FLOAT16, N));
    CHECK_OK(fl__cvt_any(y, FL_FLOAT32, h, FL_FLOAT16, N));
    uint16_t want[N];
    fl__cvt_f32_to_bf16(want, y, N);
    CHECK(!memcmp(b2, want, sizeof want));
    CHECK_OK(fl__cvt_any(h2, FL_FLOAT16, h, FL_FLOAT16, N)); /* same type: a copy */
    CHECK(!memcmp(h2, h, sizeof h));
    CHECK_FAILS(fl__cvt_any(y, FL_FLOAT32, x, FL_INT64, N), FL_EUNSUPPORTED, "conversion from int64 to float32");
}

/* ---- training ------------------------------------------------------------------------ */

/* The quick-start MLP with optimizer `opt`; amp NULL: float32 (tests/ampnet.h). */
static void net_make(net *n, fl_opt *opt, const fl_amp_opts *amp) { ampnet_make(n, opt, amp); }

static float scalar_f(net *n, const char *name)
{
    fl_tensor *t = fl_scope_find(fl_exe_scope(n->e), name);
    CHECK(t && fl_tensor_dtype(t) == FL_FLOAT32 && fl_tensor_numel(t) >= 1);
    return fl_tensor_f32(t)[0];
}

static int64_t scalar_i(net *n, const char *name)
{
    fl_tensor *t = fl_scope_find(fl_exe_scope(n->e), name);
    CHECK(t && fl_tensor_dtype(t) == FL_INT64 && fl_tensor_numel(t) >= 1);
    return ((const int64_t *)fl_tensor_data(t))[0];
}

/* float16 products round inputs, weights and the output gradient to 11 significant bits
 * (and the gradient's range to 65504, hence the loss scale 32768 at the default): over 150
 * steps the trajectory stays close to float32's.  Stated tolerance: last loss within 0.01 of
 * float32's (both below half the first), weights within 0.005 (here about 1e-4). */
TEST(fp16_trains_like_f32)
{
    static float w32[32 * 128];
    float f0 = 0, f1 = 0, a0 = 0, a1 = 0, worst = 0;
    for (int amp = 0; amp < 2; amp++) {
        net n;
        net_make(&n, fl_opt_sgd(0.2f), amp ? &(fl_amp_opts){FL_FLOAT16} : NULL);
        for (int s = 0; s < 150; s++) {
            float l = net_step(&n);
            if (!s) *(amp ? &a0 : &f0) = l;
            *(amp ? &a1 : &f1) = l;
        }
        fl_tensor *w = fl_scope_find(fl_exe_scope(n.e), "fc_0.w_0");
        CHECK(w && fl_tensor_dtype(w) == FL_FLOAT32); /* master weights */
        const float *wd = fl_tensor_data(w);
        for (int i = 0; i < 32 * 128; i++) {
            if (!amp) w32[i] = wd[i];
            else worst = fmaxf(worst, fabsf(wd[i] - w32[i]));
        }
        if (amp) {
            CHECK_EQ_INT(scalar_i(&n, "num_bad_steps_0"), 0);
            CHECK_NEAR(scalar_f(&n, "loss_scaling_0"), 32768.0, 0); /* 150 < incr_every_n_steps */
        }
        net_free(&n);
    }
    printf("  float32 loss %.4f -> %.4f, float16 AMP %.4f -> %.4f, largest weight difference %.2g\n", f0, f1, a0, a1,
           worst);
    CHECK(f1 < 0.5f * f0 && a1 < 0.5f * a0);
    CHECK_NEAR(a1, f1, 0.01);
    CHECK(worst < 0.005f);
}

/* Every persistable but the loss-scaling state, as bytes. */
typedef struct {
    int n;
    char *name[64];
    void *bytes[64];
    size_t size[64];
} snap;

static void snap_take(net *n, snap *s)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < fl_prog_num_vars(n->p); i++) {
        fl_var *v = fl_prog_var_at(n->p, i);
        const char *nm = fl_var_name(v);
        if (!fl_var_persistable(v) || strstr(nm, "loss_scaling") || strstr(nm, "_steps_0")) continue;
        fl_tensor *t = fl_scope_find(fl_exe_scope(n->e), nm);
        CHECK(t && s->n < 64);
        s->name[s->n] = strdup(nm);
        s->size[s->n] = fl_tensor_nbytes(t);
        s->bytes[s->n] = malloc(s->size[s->n]);
        memcpy(s->bytes[s->n], fl_tensor_data(t), s->size[s->n]);
        s->n++;
    }
}

/* Number of variables that differ from the snapshot. */
static int snap_diff(net *n, const snap *s)
{
    int d = 0;
    for (int i = 0; i < s->n; i++) {
        fl_tensor *t = fl_scope_find(fl_exe_scope(n->e), s->name[i]);
        d += fl_tensor_nbytes(t) != s->size[i] || memcmp(fl_tensor_data(t), s->bytes[i], s->size[i]) != 0;
    }
    return d;
}

static void snap_free(snap *s)
{
    for (int i = 0; i < s->n; i++) {
        free(s->name[i]);
        free(s->bytes[i]);
    }
}

/* A scale of 2^100 overflows float16 in every product's gradient: each step finds inf, is
 * skipped (parameters, Adam's moments and beta powers bit-identical), and every second one
 * (decr_every_n_nan_or_inf 2) halves the scale (decr_ratio 0.5). */
TEST(overflow_skips_the_step_and_shrinks_the_scale)
{
    net n;
    fl_amp_opts o = {FL_FLOAT16};
    o.init_loss_scaling = 0x1p100;
    o.decr_every_n_nan_or_inf = 2;
    o.decr_ratio = 0.5;
    net_make(&n, fl_opt_adam(0.01f, 0.9f, 0.999f, 1e-8f), &o);
    snap s;
    snap_take(&n, &s);
    CHECK(s.n >= 6 * 4); /* 3 fc layers x (w, b) x (param, 2 moments, 2 beta powers) */
    const float want[] = {0x1p100f, 0x1p99f, 0x1p99f, 0x1p98f};
    for (int k = 0; k < 4; k++) {
        float l = net_step(&n);
        CHECK(isfinite(l)); /* the loss itself is not scaled */
        CHECK_EQ_INT(scalar_i(&n, "find_infinite_scale"), 1);
        CHECK_EQ_INT(snap_diff(&n, &s), 0);
        CHECK_NEAR(scalar_f(&n, "loss_scaling_0"), want[k], 0);
        CHECK_EQ_INT(scalar_i(&n, "num_bad_steps_0"), (k + 1) % 2);
        CHECK_EQ_INT(scalar_i(&n, "num_good_steps_0"), 0);
    }
    snap_free(&s);
    net_free(&n);
}

/* A scale small enough for float16: every incr_every_n_steps (3) finite steps it doubles,
 * and the steps update the parameters. */
TEST(finite_steps_grow_the_scale)
{
    net n;
    fl_amp_opts o = {FL_FLOAT16};
    o.init_loss_scaling = 64;
    o.incr_every_n_steps = 3;
    net_make(&n, fl_opt_momentum(0.05f, 0.9f, 0), &o);
    snap s;
    snap_take(&n, &s);
    const float want[] = {64, 64, 128, 128, 128, 256};
    for (int k = 0; k < 6; k++) {
        net_step(&n);
        CHECK_EQ_INT(scalar_i(&n, "find_infinite_scale"), 0);
        CHECK_NEAR(scalar_f(&n, "loss_scaling_0"), want[k], 0);
        CHECK_EQ_INT(scalar_i(&n, "num_good_steps_0"), (k + 1) % 3);
    }
    CHECK(snap_diff(&n, &s) > 0);
    snap_free(&s);
    net_free(&n);
}

/* use_dynamic_loss_scaling = false: no update_loss_scaling op, the scale never moves, a
 * bad step is still skipped. */
TEST(static_scale_stays_and_still_skips)
{
    net n;
    fl_amp_opts o = {FL_FLOAT16};
    o.init_loss_scaling = 0x1p60;
    o.static_loss_scaling = 1;
    net_make(&n, fl_opt_sgd(0.1f), &o);
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(fl_prog_to_text(n.p, &text, &len));
    CHECK(!strstr(text, "update_loss_scaling"));
    CHECK_STR_HAS(text, "check_finite_and_unscale");
    free(text);
    snap s;
    snap_take(&n, &s);
    for (int k = 0; k < 3; k++) {
        net_step(&n);
        CHECK_EQ_INT(scalar_i(&n, "find_infinite_scale"), 1);
        CHECK_NEAR(scalar_f(&n, "loss_scaling_0"), 0x1p60, 0);
    }
    CHECK_EQ_INT(snap_diff(&n, &s), 0);
    snap_free(&s);
    net_free(&n);
}

TEST(fp16_program_text)
{
    fl_prog *p = fl_prog_create();
    fl_model_mlp_config cfg = fl_model_mlp_default();
    fl_model_mlp m;
    CHECK_OK(fl_model_mlp_build(p, &cfg, &m));
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK_OK(fl_amp_decorate_optimizer(o, &(fl_amp_opts){FL_FLOAT16}));
    CHECK_OK(fl_opt_minimize(o, m.loss));
    fl_opt_free(o);
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(fl_prog_to_text(p, &text, &len));
    CHECK_STR_HAS(text, "fc_0.w_0.cast_fp16");
    CHECK_STR_HAS(text, "x.cast_fp16");
    CHECK_STR_HAS(text, "scale_loss_grad");
    CHECK_STR_HAS(text, "check_finite_and_unscale");
    CHECK_STR_HAS(text, "update_loss_scaling");
    CHECK_STR_HAS(text, "loss_scaling_0");
    /* the loss gradient is scaled right after its seed, before any other backward op */
    const char *seed = strstr(text, "fill_constant"), *scale = strstr(text, "scale_loss_grad");
    CHECK(seed && scale && seed < scale);
    free(text);
    CHECK(fl_var_dtype(fl_prog_var(p, "fc_0.w_0@GRAD")) == FL_FLOAT32);
    fl_prog_free(p);
}

/* ---- matmul in low precision ----------------------------------------------------------- */

/* out = x [B, M, K] matmul w [K, N] (alpha 0.5, a shared w), summed; SGD on w for `steps`. */
static void matmul_run(fl_dtype dt, float *out, float *w_after)
{
    enum { Bn = 3, M = 5, K = 24, N = 7 };
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", 2, (const int64_t[]){M, K}, FL_FLOAT32, 0);
    fl_param_attr pa = {.name = "w"};
    fl_var *w = fl_layer_create_parameter(p, 2, (const int64_t[]){K, N}, FL_FLOAT32, &pa);
    fl_var *y = fl_layer_matmul(x, w, 0, 0, 0.5f);
    fl_var *loss = fl_layer_mean(y);
    CHECK(loss);
    fl_opt *o = fl_opt_sgd(1.0f);
    if (dt) CHECK_OK(fl_amp_decorate_optimizer(o, &(fl_amp_opts){dt, NULL, NULL}));
    CHECK_OK(fl_opt_minimize(o, loss));
    fl_opt_free(o);
    fl_exe *e = fl_exe_create(NULL);
    fl_prog_set_seed(p, 3);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    static float xs[Bn * M * K];
    fl_rng r = {9};
    for (int i = 0; i < Bn * M * K; i++) xs[i] = 2 * fl__rng_uniform(&r) - 1;
    fl_tensor *xt = th_f32(3, (const int64_t[]){Bn, M, K}, xs);
    fl_feed feed[] = {{"x", xt}};
    const char *fetch[] = {fl_var_name(y)};
    fl_tensor *res[1];
    CHECK_OK(fl_exe_run(e, p, feed, 1, fetch, 1, res));
    memcpy(out, fl_tensor_data(res[0]), Bn * M * N * sizeof(float));
    memcpy(w_after, fl_tensor_data(fl_scope_find(fl_exe_scope(e), "w")), K * N * sizeof(float));
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_prog_free(p);
}

/* bf16 keeps 8 significant bits, fp16 11: products of 24 terms in [-1, 1] within 0.02 and
 * 0.002 of float32's, the updated weights (gradient = mean of x's rows, 1/70 per element)
 * within 5e-4 and 5e-5 (here about 2e-3 / 2e-4 and 5e-5 / 7e-6). */
TEST(matmul_low_precision_near_f32)
{
    static float o32[105], w32[168], olp[105], wlp[168];
    matmul_run(0, o32, w32);
    const fl_dtype dts[] = {FL_BFLOAT16, FL_FLOAT16};
    const double tol_o[] = {0.02, 0.002}, tol_w[] = {5e-4, 5e-5};
    for (int k = 0; k < 2; k++) {
        matmul_run(dts[k], olp, wlp);
        double wo = 0, ww = 0;
        for (int i = 0; i < 105; i++) wo = fmax(wo, fabs(olp[i] - o32[i]));
        for (int i = 0; i < 168; i++) ww = fmax(ww, fabs(wlp[i] - w32[i]));
        printf("  %s matmul: output within %.2g, updated weight within %.2g of float32\n", fl_dtype_name(dts[k]), wo, ww);
        CHECK(wo > 0 && wo < tol_o[k]); /* > 0: it did run in low precision */
        CHECK(ww < tol_w[k]);
    }
}

/* ---- errors ------------------------------------------------------------------------------ */

TEST(fp16_errors_are_clear)
{
    fl_opt *o = fl_opt_sgd(0.1f);
    fl_amp_opts a = {FL_FLOAT16};
    a.decr_ratio = 1.5;
    CHECK_FAILS(fl_amp_decorate_optimizer(o, &a), FL_EINVAL, "decr_ratio 1.5 in (0, 1)");
    a = (fl_amp_opts){FL_FLOAT16};
    a.init_loss_scaling = -1;
    CHECK_FAILS(fl_amp_decorate_optimizer(o, &a), FL_EINVAL, "init_loss_scaling");
    CHECK_FAILS(fl_amp_decorate_optimizer(NULL, &a), FL_EINVAL, "optimizer is NULL");
    /* an op without a low-precision kernel in the white list is named at minimize */
    fl_prog *p = fl_prog_create();
    fl_model_mlp_config cfg = fl_model_mlp_default();
    fl_model_mlp m;
    CHECK_OK(fl_model_mlp_build(p, &cfg, &m));
    a = (fl_amp_opts){FL_FLOAT16, "fc, softmax", NULL};
    CHECK_OK(fl_amp_decorate_optimizer(o, &a));
    CHECK_FAILS(fl_opt_minimize(o, m.loss), FL_EUNSUPPORTED, "names op 'softmax', which has no float16 kernel");
    fl_prog_free(p);
    fl_opt_free(o);
    /* strategy: float16 with parameter servers is refused by name */
    fleet_strategy s = fleet_strategy_default();
    s.amp = 1;
    snprintf(s.amp_configs.dtype, FLEET_STRATEGY_STR_MAX, "float16");
    CHECK_OK(fleet_strategy_check(&s));
    s.amp_configs.use_pure_fp16 = 1; /* level O2: tests/test_amp_o2.c */
    CHECK_OK(fleet_strategy_check(&s));
}

TEST_MAIN(T(half_conversions_match_the_compiler), T(cast_conversions_between_all_three), T(fp16_trains_like_f32),
          T(overflow_skips_the_step_and_shrinks_the_scale), T(finite_steps_grow_the_scale),
          T(static_scale_stays_and_still_skips), T(fp16_program_text), T(matmul_low_precision_near_f32),
          T(fp16_errors_are_clear))
