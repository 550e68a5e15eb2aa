/* test_amp.c - mixed precision (src/graph/amp.c): the rewrite, its errors, and bf16
 * training that ends within a stated tolerance of float32 on oneDNN and on OpenBLAS. */
#include "testhelp.h"
#include "graph/graph_internal.h"
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

/* ---- an attention block (Transformer ops) ------------------------------------------------ */

enum { AB = 16, AS = 6, AD = 16, ASTEPS = 40 };

/* x [AB, AS, AD] -> q, k, v = x Wq, x Wk, x Wv (matmul_v2); softmax(q k^T / 4) (matmul with
 * alpha) times v (matmul_v2); layer_norm(att + x); gelu; fc to 2 classes; softmax cross
 * entropy.  SGD lr 0.1 for ASTEPS steps on a planted rule (label = x[0,0..3] sums > 0).
 * level: 0 float32, 1 AMP O1, 2 AMP O2 (bfloat16).  Returns the first and last loss and
 * checks the decorated program: every product reads bfloat16, layer_norm, softmax and the
 * loss read float32. */
static void train_attention(int level, float *first, float *last)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(AS, AD), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *w[3];
    for (int j = 0; j < 3; j++) w[j] = fl_layer_create_parameter(p, 2, (const int64_t[]){AD, AD}, FL_FLOAT32, NULL);
    fl_var *q = fl_layer_matmul_v2(x, w[0], 0, 0), *k = fl_layer_matmul_v2(x, w[1], 0, 0);
    fl_var *v = fl_layer_matmul_v2(x, w[2], 0, 0);
    fl_var *pr = fl_layer_softmax(fl_layer_matmul(q, k, 0, 1, 0.25f));
    fl_var *att = fl_layer_matmul_v2(pr, v, 0, 0);
    fl_var *h = fl_layer_gelu(fl_layer_layer_norm(fl_layer_elementwise_add(att, x, -1), 2, 1e-5f, 1, 1, NULL, NULL), 0);
    fl_var *logits = fl_layer_fc(FL_VARS(h), 2, NULL);
    fl_var *loss = fl_layer_mean(fl_layer_softmax_with_cross_entropy(logits, y));
    if (!loss) TFAIL("attention block: %s", fl_prog_error(p));
    fl_opt *o = fl_opt_sgd(0.1f);
    fl_amp_opts a = {FL_BFLOAT16, NULL, NULL};
    a.use_pure_fp16 = level == 2;
    if (level) CHECK_OK(fl_amp_decorate_optimizer(o, &a));
    CHECK_OK(fl_opt_minimize(o, loss));
    fl_opt_free(o);
    int products = 0, f32 = 0, low_out = 0, casts = 0;
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        const char *t = op->def->type;
        if (op->role != FL_ROLE_FORWARD) continue;
        casts += !strcmp(t, "cast");
        if (!strcmp(t, "matmul_v2") || !strcmp(t, "matmul") || !strcmp(t, "fc")) {
            fl_dtype want = level ? FL_BFLOAT16 : FL_FLOAT32;
            CHECK(op->in[0].vars[0]->dtype == want && op->in[1].vars[0]->dtype == want);
            products++;
            low_out += op->out[0].vars[0]->dtype == FL_BFLOAT16;
        }
        if (!strcmp(t, "layer_norm") || !strcmp(t, "softmax") || !strcmp(t, "softmax_with_cross_entropy") ||
            !strcmp(t, "gelu") || !strcmp(t, "elementwise_add")) {
            CHECK(op->in[0].vars[0]->dtype == FL_FLOAT32);
            if (!strcmp(t, "layer_norm")) CHECK(op->in[1].vars[0]->dtype == FL_FLOAT32);
            f32++;
        }
    }
    CHECK_EQ_INT(products, 6);
    CHECK_EQ_INT(f32, 5);
    /* O2: q, k, v, the scores and att leave their product in bfloat16 (fc's logits too) */
    CHECK_EQ_INT(low_out, level == 2 ? 6 : 0);
    if (level == 1) CHECK_EQ_INT(casts, 10); /* x once, 4 weights, q, k, the softmax's output, v, h */
    if (level == 2) CHECK(casts >= 4);       /* x once, and to float32 before the black ops */
    /* matmul_v2_grad writes the gradients of the variables before the casts itself (no cast
     * back); the weights' gradients are float32 */
    int wgrads = 0;
    for (int i = 0; i < p->nops; i++)
        if (!strcmp(p->ops[i]->def->type, "matmul_v2_grad") && p->ops[i]->out[1].n == 1) {
            const fl_var *g = p->ops[i]->out[1].vars[0];
            CHECK(!strstr(g->name, ".cast_"));
            if (strstr(g->name, "create_parameter")) CHECK(g->dtype == FL_FLOAT32);
            wgrads += strstr(g->name, "create_parameter") != NULL;
        }
    CHECK_EQ_INT(wgrads, 3);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    static float xs[AB * AS * AD];
    int64_t ys[AB];
    fl_rng r = {7};
    const char *fetch[] = {fl_var_name(loss)};
    fl_tensor *out[1];
    for (int s = 0; s < ASTEPS; s++) {
        for (int i = 0; i < AB; i++) {
            float sum = 0;
            for (int j = 0; j < AS * AD; j++) xs[i * AS * AD + j] = 2 * fl__rng_uniform(&r) - 1;
            for (int j = 0; j < 4; j++) sum += xs[i * AS * AD + j];
            ys[i] = sum > 0;
        }
        fl_tensor *xt = th_f32(3, (const int64_t[]){AB, AS, AD}, xs), *yt = th_i64(2, (const int64_t[]){AB, 1}, ys);
        fl_feed feed[] = {{"x", xt}, {"y", yt}};
        CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 1, out));
        float l = fl_tensor_f32(out[0])[0];
        if (s == 0) *first = l;
        *last = l;
        fl_tensor_free(xt);
        fl_tensor_free(yt);
    }
    fl_exe_free(e);
    fl_prog_free(p);
}

/* Stated tolerance: the bf16 runs' first loss within 0.01 of float32's (one forward pass
 * of 8-bit operands), the last within 0.02 (40 steps of drift; measured: under 1e-3). */
TEST(amp_attention_block_o1_o2_like_f32)
{
    float f0, f1, a0, a1, b0, b1;
    train_attention(0, &f0, &f1);
    train_attention(1, &a0, &a1);
    train_attention(2, &b0, &b1);
    printf("  attention block: float32 %.4f -> %.4f, O1 bf16 %.4f -> %.4f, O2 bf16 %.4f -> %.4f\n", f0, f1, a0, a1, b0, b1);
    CHECK(f1 < 0.8f * f0);
    CHECK_NEAR(a0, f0, 0.01);
    CHECK_NEAR(b0, f0, 0.01);
    CHECK_NEAR(a1, f1, 0.02);
    CHECK_NEAR(b1, f1, 0.02);
}

/* The lists' rows: a black or float32-only op cannot be white-listed; matmul_v2 can be
 * black-listed (it then reads float32) and Paddle's mul still stands for fc. */
TEST(amp_nlp_list_rows)
{
    static const char *const refused[] = {"layer_norm", "softmax", "gelu", "transpose2", "label_smooth"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        fl_prog *p = fl_prog_create();
        fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
        CHECK(fl_layer_softmax(x) != NULL);
        fl_amp_opts o = {FL_BFLOAT16, refused[i], NULL};
        CHECK_FAILS(fl_amp_decorate(p, &o), FL_EUNSUPPORTED, "which has no bfloat16 kernel (ops with one: fc, matmul");
        fl_prog_free(p);
    }
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *wt = fl_layer_create_parameter(p, 2, (const int64_t[]){4, 4}, FL_FLOAT32, NULL);
    CHECK(fl_layer_fc(FL_VARS(fl_layer_matmul_v2(x, wt, 0, 0)), 2, NULL) != NULL);
    fl_amp_opts o = {FL_BFLOAT16, NULL, "matmul_v2"};
    CHECK_EQ_INT(fl_amp_decorate(p, &o), 1); /* fc only */
    fl_prog_free(p);
    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    wt = fl_layer_create_parameter(p, 2, (const int64_t[]){4, 4}, FL_FLOAT32, NULL);
    CHECK(fl_layer_fc(FL_VARS(fl_layer_matmul_v2(x, wt, 0, 0)), 2, NULL) != NULL);
    o = (fl_amp_opts){FL_FLOAT16, NULL, "mul"};
    CHECK_EQ_INT(fl_amp_decorate(p, &o), 1); /* matmul_v2 only, in float16 */
    fl_prog_free(p);

    /* O2: matmul_v2 -> transpose2 (a gray row with a float32 kernel) -> matmul_v2: the
     * bf16 product is cast to float32 in front of transpose2, whose output is cast back
     * for the second product; the program runs */
    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(3, 4), FL_FLOAT32, 0);
    wt = fl_layer_create_parameter(p, 2, (const int64_t[]){4, 4}, FL_FLOAT32, NULL);
    fl_var *t = fl_layer_transpose(fl_layer_matmul_v2(x, wt, 0, 0), 3, (const int64_t[]){0, 2, 1});
    fl_var *out = fl_layer_mean(fl_layer_matmul_v2(t, wt, 1, 0));
    CHECK(out != NULL);
    o = (fl_amp_opts){FL_BFLOAT16, NULL, NULL};
    o.use_pure_fp16 = 1;
    CHECK_EQ_INT(fl_amp_decorate(p, &o), 2);
    int seen = 0;
    for (int i = 0; i < p->nops; i++)
        if (!strcmp(p->ops[i]->def->type, "transpose2")) {
            const fl_var *in = p->ops[i]->in[0].vars[0];
            CHECK(in->dtype == FL_FLOAT32 && strstr(in->name, ".cast_fp32"));
            CHECK(p->ops[i]->out[0].vars[0]->dtype == FL_FLOAT32);
            seen++;
        }
    CHECK_EQ_INT(seen, 1);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    static const float xs[2 * 3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, -1, -2, -3, -4, 0, 1, 0, 1, 2, 2, 2, 2};
    fl_tensor *xt = th_f32(3, (const int64_t[]){2, 3, 4}, xs), *res[1];
    fl_feed feed[] = {{"x", xt}};
    const char *fetch[] = {fl_var_name(out)};
    CHECK_OK(fl_exe_run(e, p, feed, 1, fetch, 1, res));
    CHECK(isfinite(fl_tensor_f32(res[0])[0]));
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST_MAIN(T(amp_bf16_trains_like_f32_dnnl), T(amp_bf16_trains_like_f32_openblas), T(amp_casts_are_in_the_program_text),
          T(amp_lists_and_dtype_are_checked), T(amp_attention_block_o1_o2_like_f32), T(amp_nlp_list_rows))
