/* test_amp.c - mixed precision (src/graph/amp.c): the rewrite, its errors, and bf16
 * training that ends within a stated tolerance of float32 on oneDNN and on OpenBLAS. */
#include "testhelp.h"
#include "tensor/tensor_internal.h"

enum { BATCH = 64, STEPS = 150, DIM = 32 };

/* The quick-start MLP (x[32] -> fc128 tanh -> fc128 tanh -> fc2 softmax), optionally
 * decorated, trained STEPS steps of SGD lr 0.2 on a planted rule (label = x0+x1+x2+x3 > 0).
 * Returns the loss of the first and last step and the final fc_0.w_0. */
static void train(int amp, float *first, float *last, float *w0)
{
    fl_prog *p = fl_prog_create();
    fl_model_mlp_config cfg = fl_model_mlp_default();
    fl_model_mlp m;
    CHECK_OK(fl_model_mlp_build(p, &cfg, &m));
    if (amp) CHECK_EQ_INT(fl_amp_decorate(p, NULL), 3);
    fl_opt *o = fl_opt_sgd(0.2f);
    CHECK_OK(fl_opt_minimize(o, m.loss));
    fl_opt_free(o);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    static float xs[BATCH * DIM];
    int64_t ys[BATCH];
    fl_rng r = {11};
    const char *fetch[] = {fl_var_name(m.loss)};
    fl_tensor *out[1];
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < BATCH; i++) {
            float sum = 0;
            for (int j = 0; j < DIM; j++) xs[i * DIM + j] = 2 * fl__rng_uniform(&r) - 1;
            for (int j = 0; j < 4; j++) sum += xs[i * DIM + j];
            ys[i] = sum > 0;
        }
        fl_tensor *xt = th_f32(2, (const int64_t[]){BATCH, DIM}, xs), *yt = th_i64(2, (const int64_t[]){BATCH, 1}, ys);
        fl_feed feed[] = {{"x", xt}, {"y", yt}};
        CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 1, out));
        float l = fl_tensor_f32(out[0])[0];
        if (s == 0) *first = l;
        *last = l;
        fl_tensor_free(xt);
        fl_tensor_free(yt);
    }
    fl_tensor *w = fl_scope_find(fl_exe_scope(e), "fc_0.w_0");
    CHECK(w && fl_tensor_dtype(w) == FL_FLOAT32); /* master weights stay float32 */
    memcpy(w0, fl_tensor_data(w), 32 * 128 * sizeof(float));
    fl_exe_free(e);
    fl_prog_free(p);
}

/* bf16 products round each input to 8 significant bits: over 150 steps the trajectory
 * drifts from float32's but learns the same rule.  Stated tolerance: last loss within
 * 0.01 of float32's (both below half the first), weights within 0.01 of float32's (here
 * the differences are about 3e-4). */
static void amp_close_to_f32(const char *lib)
{
    setenv("FLEET_GEMM", lib, 1);
    fl__gemm_lib_reload();
    static float w32[32 * 128], w16[32 * 128];
    float f0, f1, a0, a1;
    train(0, &f0, &f1, w32);
    train(1, &a0, &a1, w16);
    printf("  %s: float32 loss %.4f -> %.4f, bf16 AMP %.4f -> %.4f\n", lib, f0, f1, a0, a1);
    CHECK(f1 < 0.5f * f0);
    CHECK(a1 < 0.5f * a0);
    CHECK_NEAR(a1, f1, 0.01);
    double worst = 0;
    for (int i = 0; i < 32 * 128; i++) worst = fmax(worst, fabs(w32[i] - w16[i]));
    printf("  %s: largest weight difference %.4f\n", lib, worst);
    CHECK(worst < 0.01);
}

TEST(amp_bf16_trains_like_f32_dnnl)
{
    if (!fl__dnn_available()) {
        printf("  (this build has no oneDNN)\n");
        return;
    }
    amp_close_to_f32("dnnl");
}

TEST(amp_bf16_trains_like_f32_openblas) { amp_close_to_f32("openblas"); }

TEST(amp_casts_are_in_the_program_text)
{
    fl_prog *p = fl_prog_create();
    fl_model_mlp_config cfg = fl_model_mlp_default();
    fl_model_mlp m;
    CHECK_OK(fl_model_mlp_build(p, &cfg, &m));
    int before = fl_prog_num_ops(p);
    /* 3 fc: 3 inputs and 3 weights cast */
    CHECK_EQ_INT(fl_amp_decorate(p, NULL), 3);
    CHECK_EQ_INT(fl_prog_num_ops(p), before + 6);
    CHECK_EQ_INT(fl_prog_op_type(p, 0)[0], 'c');
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(fl_prog_to_text(p, &text, &len));
    CHECK_STR_HAS(text, "fc_0.w_0.cast_bf16");
    CHECK_STR_HAS(text, "x.cast_bf16");
    free(text);
    /* decorating again changes nothing: the inputs are bfloat16 already */
    CHECK_EQ_INT(fl_amp_decorate(p, NULL), 0);
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK_OK(fl_opt_minimize(o, m.loss));
    fl_opt_free(o);
    fl_var *g = fl_prog_var(p, "fc_0.w_0@GRAD");
    CHECK(g != NULL && fl_var_dtype(g) == FL_FLOAT32);
    /* the backward program casts nothing back: each mul_grad writes the float32 gradients
     * of the weights and activations itself (before, 5 casts copied them) */
    int casts = 0;
    for (int i = 0; i < fl_prog_num_ops(p); i++) casts += !strcmp(fl_prog_op_type(p, i), "cast");
    CHECK_EQ_INT(casts, 6);
    CHECK_OK(fl_prog_to_text(p, &text, &len));
    CHECK_STR_HAS(text, "Y@GRAD=fc_0.w_0@GRAD");
    CHECK_STR_HAS(text, "X@GRAD=fc_1.tmp_0@GRAD");
    free(text);
    /* nor declares the gradients of the casts' outputs, which nothing writes now */
    CHECK(fl_prog_var(p, "fc_0.w_0.cast_bf16@GRAD") == NULL);
    CHECK(fl_prog_var(p, "fc_0.tmp_0.cast_bf16@GRAD") == NULL);
    CHECK_FAILS(fl_amp_decorate(p, NULL), FL_EINVAL, "decorate before fl_opt_minimize");
    fl_prog_free(p);
}

TEST(amp_lists_and_dtype_are_checked)
{
    fl_prog *p = fl_prog_create();
    fl_model_mlp_config cfg = fl_model_mlp_default();
    fl_model_mlp m;
    CHECK_OK(fl_model_mlp_build(p, &cfg, &m));
    fl_amp_opts o = {FL_INT64, NULL, NULL};
    CHECK_FAILS(fl_amp_decorate(p, &o), FL_EINVAL, "is not a low-precision type");
    fl_prog_free(p);
    p = fl_prog_create(); /* the first build error sticks to a program */
    CHECK_OK(fl_model_mlp_build(p, &cfg, &m));
    o = (fl_amp_opts){FL_BFLOAT16, NULL, NULL};
    o.use_pure_fp16 = 1; /* level O2 (tests/test_amp_o2.c): the same 3 fc compute in bfloat16 */
    CHECK_EQ_INT(fl_amp_decorate(p, &o), 3);
    fl_prog_free(p);

    p = fl_prog_create();
    CHECK_OK(fl_model_mlp_build(p, &cfg, &m));
    o = (fl_amp_opts){FL_BFLOAT16, "fc, pool2d", NULL};
    CHECK_FAILS(fl_amp_decorate(p, &o), FL_EUNSUPPORTED, "names op 'pool2d', which has no bfloat16 kernel");
    fl_prog_free(p);

    p = fl_prog_create();
    CHECK_OK(fl_model_mlp_build(p, &cfg, &m));
    o = (fl_amp_opts){FL_FLOAT16, "fc, conv2d", NULL};
    CHECK_FAILS(fl_amp_decorate(p, &o), FL_EUNSUPPORTED, "names op 'conv2d', which has no float16 kernel");
    fl_prog_free(p);

    p = fl_prog_create();
    CHECK_OK(fl_model_mlp_build(p, &cfg, &m));
    o = (fl_amp_opts){FL_BFLOAT16, NULL, "softmax,sofmax"};
    CHECK_FAILS(fl_amp_decorate(p, &o), FL_EINVAL, "custom_black_list names unknown op 'sofmax'");
    fl_prog_free(p);

    p = fl_prog_create();
    CHECK_OK(fl_model_mlp_build(p, &cfg, &m));
    o = (fl_amp_opts){FL_BFLOAT16, "matmul_v2", "mul"}; /* Paddle's names for the product: black wins */
    CHECK_EQ_INT(fl_amp_decorate(p, &o), 0);
    fl_prog_free(p);
}

TEST_MAIN(T(amp_bf16_trains_like_f32_dnnl), T(amp_bf16_trains_like_f32_openblas), T(amp_casts_are_in_the_program_text),
          T(amp_lists_and_dtype_are_checked))
