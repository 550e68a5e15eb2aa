/* test_dnn.c - matrix products with fused epilogues (src/tensor/dnn.c) on oneDNN and
 * OpenBLAS against a double-precision loop, the primitive cache's steady state, FLEET_GEMM,
 * bf16 products, and the fc + activation fusion pass (src/graph/fuse.c). */
#include "testhelp.h"
#include "tensor/tensor_internal.h"

static void use_lib(const char *name)
{
    setenv("FLEET_GEMM", name, 1);
    fl__gemm_lib_reload();
}

static double ref_act(int act, double v)
{
    return act == FL_ACT_RELU ? (v > 0 ? v : 0) : act == FL_ACT_TANH ? tanh(v) : act ? 1 / (1 + exp(-v)) : v;
}

/* Every transpose, accumulate, bias and activation combination on one odd shape, through
 * the library `lib`, against a double loop.  Returns the largest absolute error. */
static double gemm_all_cases(const char *lib)
{
    use_lib(lib);
    enum { M = 37, N = 29, K = 53, LD = 64 };
    fl_rng r = {42};
    static float a[K * LD], b[K * LD], bias[N], c0[M * LD], c[M * LD];
    for (int i = 0; i < K * LD; i++) a[i] = 2 * fl__rng_uniform(&r) - 1, b[i] = 2 * fl__rng_uniform(&r) - 1;
    for (int i = 0; i < N; i++) bias[i] = 2 * fl__rng_uniform(&r) - 1;
    for (int i = 0; i < M * LD; i++) c0[i] = 2 * fl__rng_uniform(&r) - 1;
    fl_gemm_cache *cache = NULL;
    double worst = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int beta = 0; beta < 2; beta++)
                for (int act = 0; act <= FL_ACT_SIGMOID; act++)
                    for (int hb = 0; hb < 2; hb++) {
                        fl_gemm_desc d;
                        memset(&d, 0, sizeof d);
                        d.trans_a = ta, d.trans_b = tb, d.m = M, d.n = N, d.k = K;
                        d.lda = LD, d.ldb = LD, d.ldc = LD; /* leading dims wider than the rows */
                        d.beta = (float)beta, d.act = act, d.has_bias = hb, d.a_type = d.b_type = FL_FLOAT32;
                        memcpy(c, c0, sizeof c);
                        CHECK_OK(fl__gemm(&cache, &d, a, b, bias, c));
                        for (int i = 0; i < M; i++)
                            for (int j = 0; j < N; j++) {
                                double s = 0;
                                for (int p = 0; p < K; p++)
                                    s += (double)(ta ? a[p * LD + i] : a[i * LD + p]) *
                                         (tb ? b[j * LD + p] : b[p * LD + j]);
                                s += (hb ? bias[j] : 0) + (beta ? c0[i * LD + j] : 0);
                                double e = fabs(ref_act(act, s) - c[i * LD + j]);
                                worst = e > worst ? e : worst;
                            }
                        /* columns past n in each row of C are left alone */
                        for (int i = 0; i < M; i++) CHECK(c[i * LD + N] == c0[i * LD + N]);
                    }
    fl__gemm_cache_free(cache);
    return worst;
}

TEST(gemm_openblas_matches_reference) { CHECK(gemm_all_cases("openblas") < 1e-4); }

TEST(gemm_dnnl_matches_reference)
{
    if (!fl__dnn_available()) {
        printf("  (this build has no oneDNN: only the error is checked)\n");
        use_lib("dnnl");
        CHECK(fl__gemm_lib() == FL_EUNSUPPORTED);
        CHECK_STR_HAS(fl_last_error(), "FLEET_GEMM=dnnl but this build has no oneDNN");
        return;
    }
    double w = gemm_all_cases("dnnl");
    CHECK(w < 1e-4);
    /* 8 shapes per cache: 64 descriptors went through one cache, all made afresh */
    CHECK(fl__dnn_primitives_created() == 64);
}

TEST(gemm_env_is_checked)
{
    setenv("FLEET_GEMM", "mkl", 1);
    fl__gemm_lib_reload();
    float a = 1, b = 2, c = 0;
    fl_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.m = d.n = d.k = d.lda = d.ldb = d.ldc = 1;
    fl_gemm_cache *cache = NULL;
    CHECK_FAILS(fl__gemm(&cache, &d, &a, &b, NULL, &c), FL_EINVAL,
                "environment variable FLEET_GEMM='mkl' is invalid: expected auto|dnnl|openblas");
    fl__gemm_cache_free(cache);
}

/* A in bf16 and B in bf16 or float32 (mixed: the library rounds B), through `lib`. */
static void bf16_case(const char *lib, int mixed)
{
    enum { M = 64, N = 48, K = 96 };
    static float a[M * K], b[K * N], c[M * N];
    static uint16_t ah[M * K], bh[K * N];
    fl_rng r = {7};
    for (int i = 0; i < M * K; i++) a[i] = 2 * fl__rng_uniform(&r) - 1;
    for (int i = 0; i < K * N; i++) b[i] = 2 * fl__rng_uniform(&r) - 1;
    fl__cvt_f32_to_bf16(ah, a, M * K);
    fl__cvt_f32_to_bf16(bh, b, K * N);
    fl_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.m = M, d.n = N, d.k = K, d.lda = K, d.ldb = N, d.ldc = N;
    d.a_type = FL_BFLOAT16, d.b_type = mixed ? FL_FLOAT32 : FL_BFLOAT16;
    fl_gemm_cache *cache = NULL;
    use_lib(lib);
    CHECK_OK(fl__gemm(&cache, &d, ah, mixed ? (const void *)b : bh, NULL, c));
    /* inputs rounded to 8 bits of mantissa (relative 2^-9 each), products summed in f32 */
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int p = 0; p < K; p++) s += (double)a[i * K + p] * b[p * N + j], mag += fabs(a[i * K + p] * b[p * N + j]);
            CHECK(fabs(s - c[i * N + j]) <= mag * 2 * 0.00390625 + 1e-5);
        }
    fl__gemm_cache_free(cache);
}

TEST(gemm_bf16_within_bf16_rounding)
{
    bf16_case("openblas", 0);
    bf16_case("openblas", 1);
    if (!fl__dnn_available()) return;
    bf16_case("dnnl", 0);
    bf16_case("dnnl", 1);
}

/* x[16] -> fc 32 (act separately or fused) -> fc 32 tanh -> fc 3 softmax -> cross-entropy,
 * trained 5 steps of SGD; returns the losses. */
static void train_mlp(int separate_act, int fuse, float losses[5], int *nops)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(16), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = separate_act ? fl_layer_relu(fl_layer_fc(FL_VARS(x), 32, NULL)) : fl_layer_fc(FL_VARS(x), 32, "relu");
    h = separate_act ? fl_layer_tanh(fl_layer_fc(FL_VARS(h), 32, NULL)) : fl_layer_fc(FL_VARS(h), 32, "tanh");
    fl_var *cost = fl_layer_mean(fl_layer_cross_entropy(fl_layer_fc(FL_VARS(h), 3, "softmax"), y));
    CHECK(cost != NULL);
    if (fuse) CHECK_EQ_INT(fl_fuse_fc_act(p), 2);
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK_OK(fl_opt_minimize(o, cost));
    fl_opt_free(o);
    *nops = fl_prog_num_ops(p);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    float xs[8 * 16];
    int64_t ys[8];
    fl_rng r = {3};
    for (int i = 0; i < 8 * 16; i++) xs[i] = 2 * fl__rng_uniform(&r) - 1;
    for (int i = 0; i < 8; i++) ys[i] = i % 3;
    fl_tensor *xt = th_f32(2, (const int64_t[]){8, 16}, xs), *yt = th_i64(2, (const int64_t[]){8, 1}, ys);
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    const char *fetch[] = {fl_var_name(cost)};
    fl_tensor *out[1];
    for (int s = 0; s < 5; s++) {
        CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 1, out));
        losses[s] = fl_tensor_f32(out[0])[0];
    }
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(fuse_fc_act_same_training)
{
    float sep[5], fused[5], built[5];
    int n_sep, n_fused, n_built;
    train_mlp(1, 0, sep, &n_sep);
    train_mlp(1, 1, fused, &n_fused);
    train_mlp(0, 0, built, &n_built);
    /* two activation ops fewer (backward keeps one activation-gradient op per layer) */
    CHECK_EQ_INT(n_fused, n_sep - 2);
    CHECK_EQ_INT(n_fused, n_built);
    for (int s = 0; s < 5; s++) {
        CHECK_NEAR(fused[s], sep[s], 1e-5);
        CHECK_NEAR(fused[s], built[s], 1e-6);
    }
    CHECK(fused[4] < fused[0]);
}

TEST(fuse_fc_act_leaves_shared_outputs)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *z = fl_layer_fc(FL_VARS(x), 4, NULL);
    fl_var *h = fl_layer_relu(z);
    fl_var *s = fl_layer_elementwise_add(h, z, -1); /* z is read twice: not fused */
    fl_var *cost = fl_layer_mean(s);
    CHECK_EQ_INT(fl_fuse_fc_act(p), 0);
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK_OK(fl_opt_minimize(o, cost));
    fl_opt_free(o);
    CHECK_FAILS(fl_fuse_fc_act(p), FL_EINVAL, "fuse before fl_opt_minimize");
    fl_prog_free(p);
}

TEST(steady_state_makes_no_primitives)
{
    use_lib("auto");
    float l[5];
    int n;
    uint64_t before = fl__dnn_primitives_created();
    train_mlp(0, 0, l, &n);
    uint64_t after = fl__dnn_primitives_created() - before;
    if (!fl__dnn_available()) {
        CHECK(after == 0);
        return;
    }
    /* 3 fc forward + 3 dW + 2 dX products (the input layer has no dX): made in step 1 only */
    CHECK(after == 8);
}

TEST(info_names_the_libraries)
{
    use_lib("auto");
    char buf[256];
    fl__gemm_info(buf, sizeof buf);
    CHECK_STR_HAS(buf, "OpenBLAS core");
    if (fl__dnn_available()) CHECK_STR_HAS(buf, "oneDNN 2.");
}

/* bfloat16 conversions (the vector clones included: odd lengths reach the tails): every
 * bfloat16 value survives f32 and back; ties round to even; a NaN stays a quiet NaN; the
 * largest floats round to infinity. */
static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

TEST(bf16_conversions_round_to_nearest_even)
{
    enum { N = 65536 };
    static uint16_t h[N], back[N];
    static float f[N];
    for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
    fl__cvt_bf16_to_f32(f, h, N);
    for (int i = 0; i < N; i++) CHECK(bits_of(f[i]) == (uint32_t)i << 16);
    fl__cvt_f32_to_bf16(back, f, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        int nan = (i & 0x7fff) > 0x7f80;
        if (nan ? (back[i] & 0x7fc0) != 0x7fc0 || (back[i] & 0x8000) != (i & 0x8000) : back[i] != i) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    /* position k of 37 holds a case, so each lands in a vector body and in a tail */
    static const uint32_t in[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0xbf808000u, 0x7f7fffffu,
                                  0xff7fffffu, 0x7f800000u, 0x7f800001u, 0xffc00000u, 0x00000001u, 0x80008000u,
                                  0x00018000u};
    static const uint16_t want[] = {0x3f80, 0x3f82, 0x3f81, 0x3f80, 0xbf80, 0x7f80, 0xff80,
                                    0x7f80, 0x7fc0, 0xffc0, 0x0000, 0x8000, 0x0002};
    enum { NC = sizeof in / sizeof in[0] };
    for (int shift = 0; shift < 37; shift += 12) {
        float x[37];
        uint16_t y[37];
        for (int k = 0; k < 37; k++) x[k] = float_of(in[(k + shift) % NC]);
        fl__cvt_f32_to_bf16(y, x, 37);
        for (int k = 0; k < 37; k++) {
            int c = (k + shift) % NC;
            if (y[k] != want[c]) {
                fprintf(stderr, "  f32 %08x -> bf16 %04x, expected %04x\n", in[c], y[k], want[c]);
                CHECK(0);
            }
        }
    }
}

TEST_MAIN(T(gemm_openblas_matches_reference), T(gemm_dnnl_matches_reference), T(gemm_env_is_checked),
          T(gemm_bf16_within_bf16_rounding), T(fuse_fc_act_same_training), T(fuse_fc_act_leaves_shared_outputs),
          T(steady_state_makes_no_primitives), T(info_names_the_libraries),
          T(bf16_conversions_round_to_nearest_even))
