/* test_grad_nlp.c - the ops of Transformer and BERT programs (ops_nlp.c, ops_nlp_idx.c, and
 * matmul / matmul_v2 of ops_extra.c over 4-D batches, softmax of ops_act.c): finite-
 * difference gradient checks (gradcheck.h tolerances unless stated), forward values against
 * hand-computed numbers, and an attention block (Q K^T scaled, additive mask, softmax, V)
 * checked end to end. */
#include "gradcheck.h"

static const gc_opts defaults = {0, 0, 0, 0};

/* ---- layer_norm ------------------------------------------------------------------------------ */

TEST(grad_layer_norm_scale_bias)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(2, 3, 5), -2, 2);
    fl_param_attr sa, ba;
    memset(&sa, 0, sizeof sa);
    memset(&ba, 0, sizeof ba);
    sa.init = fl_init_uniform(0.5f, 1.5f), ba.init = fl_init_uniform(-1, 1);
    fl_var *y = fl_layer_layer_norm(x, 2, 1e-5f, 1, 1, &sa, &ba);
    if (!y) TFAIL("layer_norm: %s", fl_prog_error(p));
    CHECK_EQ_INT(fl_var_ndim(y), 3);
    gc_check(gc_loss(y), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_layer_norm_plain_axis1)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(3, 2, 4), -2, 2);
    fl_var *y = fl_layer_layer_norm(x, 1, 1e-5f, 0, 0, NULL, NULL);
    if (!y) TFAIL("layer_norm: %s", fl_prog_error(p));
    gc_check(gc_loss(y), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

/* Rows of known mean / variance: [1 2 3 4] (mean 2.5, var 1.25) and [-3 -3 5 5] (1, 16). */
TEST(layer_norm_values)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *y = fl_layer_layer_norm(x, 1, 0.0f, 1, 1, NULL, NULL);
    CHECK(y);
    const float xv[8] = {1, 2, 3, 4, -3, -3, 5, 5};
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 4}, xv);
    fl_feed feed[] = {{"x", xt}};
    const char *f[1] = {fl_var_name(y)};
    fl_tensor *out = NULL;
    fl_exe *e = gc_run_once(p, feed, 1, f, 1, &out);
    const float *o = fl_tensor_f32(out);
    for (int j = 0; j < 4; j++) CHECK_NEAR(o[j], (xv[j] - 2.5) / sqrt(1.25), 1e-5);
    for (int j = 4; j < 8; j++) CHECK_NEAR(o[j], (xv[j] - 1.0) / 4.0, 1e-5);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

/* Rows of 37 (two blocks of the kernel's 16 partial sums and a tail of 5), one far from zero
 * (mean near 1000, so the variance is taken about the mean): values against a double-precision
 * reference, and the gradient check with scale and bias. */
TEST(layer_norm_wide_rows_values_and_grad)
{
    enum { W = 37 };
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(W), FL_FLOAT32, 0);
    fl_var *y = fl_layer_layer_norm(x, 1, 1e-5f, 0, 0, NULL, NULL);
    CHECK(y);
    float xv[2 * W];
    for (int j = 0; j < W; j++) xv[j] = (float)sin(0.7 * j) * 3.0f, xv[W + j] = 1000.0f + (float)(j % 7) * 0.25f;
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, W}, xv);
    fl_feed feed[] = {{"x", xt}};
    const char *f[1] = {fl_var_name(y)};
    fl_tensor *out = NULL;
    fl_exe *e = gc_run_once(p, feed, 1, f, 1, &out);
    const float *o = fl_tensor_f32(out);
    for (int r = 0; r < 2; r++) {
        double m = 0, v = 0;
        for (int j = 0; j < W; j++) m += xv[r * W + j];
        m /= W;
        for (int j = 0; j < W; j++) v += (xv[r * W + j] - m) * (xv[r * W + j] - m);
        v /= W;
        for (int j = 0; j < W; j++) CHECK_NEAR(o[r * W + j], (xv[r * W + j] - m) / sqrt(v + 1e-5), 2e-4);
    }
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);

    p = fl_prog_create();
    x = gc_input(p, "x", FL_SHAPE(2, W), -2, 2);
    fl_param_attr sa, ba;
    memset(&sa, 0, sizeof sa);
    memset(&ba, 0, sizeof ba);
    sa.init = fl_init_uniform(0.5f, 1.5f), ba.init = fl_init_uniform(-1, 1);
    y = fl_layer_layer_norm(x, 1, 1e-5f, 1, 1, &sa, &ba);
    if (!y) TFAIL("layer_norm: %s", fl_prog_error(p));
    gc_check(gc_loss(y), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(layer_norm_build_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    CHECK(!fl_layer_layer_norm(x, 2, 1e-5f, 1, 1, NULL, NULL));
    CHECK_STR_HAS(fl_prog_error(p), "begin_norm_axis");
    fl_prog_free(p);
}

/* ---- gelu ------------------------------------------------------------------------------------ */

TEST(grad_gelu_exact_and_tanh)
{
    for (int approx = 0; approx < 2; approx++) {
        fl_prog *p = fl_prog_create();
        fl_var *x = gc_input(p, "x", FL_SHAPE(3, 7), -3, 3);
        fl_var *y = fl_layer_gelu(x, approx);
        CHECK(y);
        gc_check(gc_loss(y), NULL, 0, NULL, defaults);
        fl_prog_free(p);
    }
}

/* gelu(1) = Phi(1) = 0.8413447, gelu(-1) = -0.1586553, gelu(0) = 0; tanh form at 1:
 * 0.5 (1 + tanh(sqrt(2/pi) 1.044715)) = 0.8411920. */
TEST(gelu_values)
{
    const float xv[3] = {1, -1, 0};
    const double want[2][3] = {{0.8413447, -0.1586553, 0}, {0.8411920, -0.1588080, 0}};
    for (int approx = 0; approx < 2; approx++) {
        fl_prog *p = fl_prog_create();
        fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
        fl_var *y = fl_layer_gelu(x, approx);
        fl_tensor *xt = th_f32(2, (const int64_t[]){1, 3}, xv);
        fl_feed feed[] = {{"x", xt}};
        const char *f[1] = {fl_var_name(y)};
        fl_tensor *out = NULL;
        fl_exe *e = gc_run_once(p, feed, 1, f, 1, &out);
        for (int j = 0; j < 3; j++) CHECK_NEAR(fl_tensor_f32(out)[j], want[approx][j], 1e-6);
        fl_exe_free(e);
        fl_tensor_free(xt);
        fl_prog_free(p);
    }
}

/* ---- transpose2 ------------------------------------------------------------------------------ */

TEST(grad_transpose2)
{
    const int64_t perms[3][4] = {{0, 2, 1, 3}, {3, 1, 0, 2}, {1, 0, 2, 3}};
    for (int k = 0; k < 3; k++) {
        fl_prog *p = fl_prog_create();
        fl_var *x = gc_input(p, "x", FL_SHAPE(2, 3, 2, 4), -1, 1);
        fl_var *y = fl_layer_transpose(x, 4, perms[k]);
        if (!y) TFAIL("transpose: %s", fl_prog_error(p));
        for (int i = 0; i < 4; i++) CHECK_EQ_INT(fl_var_shape(y)[i], fl_var_shape(x)[perms[k][i]]);
        gc_check(gc_loss(y), NULL, 0, NULL, defaults);
        fl_prog_free(p);
    }
}

/* [2, 3] -> [3, 2] and a 3-D permutation against index arithmetic; XShape [0, dims]. */
TEST(transpose2_values)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3, 4), FL_FLOAT32, 0);
    fl_var *y = fl_layer_transpose(x, 3, (const int64_t[]){2, 0, 1});
    CHECK(y);
    float xv[24];
    for (int i = 0; i < 24; i++) xv[i] = (float)i;
    fl_tensor *xt = th_f32(3, (const int64_t[]){2, 3, 4}, xv);
    fl_feed feed[] = {{"x", xt}};
    const char *f[1] = {fl_var_name(y)};
    fl_tensor *out = NULL;
    fl_exe *e = gc_run_once(p, feed, 1, f, 1, &out);
    CHECK_EQ_INT(fl_tensor_dim(out, 0), 4);
    CHECK_EQ_INT(fl_tensor_dim(out, 1), 2);
    CHECK_EQ_INT(fl_tensor_dim(out, 2), 3);
    for (int c = 0; c < 4; c++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++) CHECK_NEAR(fl_tensor_f32(out)[(c * 2 + a) * 3 + b], xv[(a * 3 + b) * 4 + c], 0);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

/* ---- softmax (ops_act.c) over the last axis of a 4-D tensor ---------------------------------- */

TEST(grad_softmax_4d)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(2, 2, 3, 4), -2, 2);
    fl_var *y = fl_layer_softmax(x);
    CHECK(y);
    gc_check(gc_loss(y), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(softmax_rows_sum_to_one)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2, 5), FL_FLOAT32, 0);
    fl_var *y = fl_layer_softmax(x);
    float xv[30];
    th_fill_uniform(xv, 30, -5, 5, 3);
    xv[0] = -1e4f; /* a masked position */
    fl_tensor *xt = th_f32(3, (const int64_t[]){3, 2, 5}, xv);
    fl_feed feed[] = {{"x", xt}};
    const char *f[1] = {fl_var_name(y)};
    fl_tensor *out = NULL;
    fl_exe *e = gc_run_once(p, feed, 1, f, 1, &out);
    for (int r = 0; r < 6; r++) {
        double s = 0;
        for (int j = 0; j < 5; j++) s += fl_tensor_f32(out)[r * 5 + j];
        CHECK_NEAR(s, 1.0, 1e-5);
    }
    CHECK_NEAR(fl_tensor_f32(out)[0], 0.0, 1e-30);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

/* ---- matmul / matmul_v2 over 4-D batches ------------------------------------------------------ */

TEST(grad_matmul_4d_all_transposes)
{
    const int64_t B = 2, H = 2, M = 3, K = 4, N = 2;
    for (int v2 = 0; v2 < 2; v2++)
        for (int t = 0; t < 4; t++) {
            int tx = t & 1, ty = t >> 1;
            fl_prog *p = fl_prog_create();
            fl_var *x = gc_input(p, "x", 4, (const int64_t[]){B, H, tx ? K : M, tx ? M : K}, -1, 1);
            fl_var *y = gc_input(p, "y", 4, (const int64_t[]){B, H, ty ? N : K, ty ? K : N}, -1, 1);
            fl_var *o = v2 ? fl_layer_matmul_v2(x, y, tx, ty) : fl_layer_matmul(x, y, tx, ty, 0.5f);
            if (!o) TFAIL("matmul: %s", fl_prog_error(p));
            CHECK_EQ_INT(fl_var_ndim(o), 4);
            CHECK_EQ_INT(fl_var_shape(o)[1], H);
            CHECK_EQ_INT(fl_var_shape(o)[2], M);
            CHECK_EQ_INT(fl_var_shape(o)[3], N);
            gc_check(gc_loss(o), NULL, 0, NULL, defaults);
            fl_prog_free(p);
        }
}

/* A 4-D X by a shared 2-D weight ([B, S, H, D] x [D, E]), as the attention projections. */
TEST(grad_matmul_4d_shared_weight)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(2, 2, 3, 4), -1, 1);
    fl_var *w = gc_input(p, "w", FL_SHAPE(4, 3), -1, 1);
    fl_var *o = fl_layer_matmul_v2(x, w, 0, 0);
    CHECK(o);
    CHECK_EQ_INT(fl_var_ndim(o), 4);
    gc_check(gc_loss(o), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(matmul_4d_values_and_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2, 3, 4), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(2, 5, 4), FL_FLOAT32, 0);
    fl_var *o = fl_layer_matmul(x, y, 0, 1, 2.0f);
    CHECK(o);
    float xv[48], yv[80];
    th_fill_uniform(xv, 48, -1, 1, 5);
    th_fill_uniform(yv, 80, -1, 1, 6);
    fl_tensor *xt = th_f32(4, (const int64_t[]){2, 2, 3, 4}, xv), *yt = th_f32(4, (const int64_t[]){2, 2, 5, 4}, yv);
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    const char *f[1] = {fl_var_name(o)};
    fl_tensor *out = NULL;
    fl_exe *e = gc_run_once(p, feed, 2, f, 1, &out);
    CHECK_EQ_INT(fl_tensor_ndim(out), 4);
    for (int b = 0; b < 4; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 5; j++) {
                double s = 0;
                for (int k = 0; k < 4; k++) s += xv[(b * 3 + i) * 4 + k] * yv[(b * 5 + j) * 4 + k];
                CHECK_NEAR(fl_tensor_f32(out)[(b * 3 + i) * 5 + j], 2 * s, 1e-5);
            }
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    /* leading dims must agree */
    fl_var *z = fl_layer_data(p, "z", FL_SHAPE(3, 4, 2), FL_FLOAT32, 0);
    CHECK(!fl_layer_matmul_v2(x, z, 0, 0));
    CHECK_STR_HAS(fl_prog_error(p), "leading dims");
    fl_prog_free(p);
}

/* ---- attention: softmax(alpha Q K^T + mask) V with the mask stacked over heads --------------- */

TEST(grad_attention_block)
{
    const int64_t B = 2, H = 2, S = 3, D = 4;
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(B, S, 3 * D), -1, 1);
    fl_var *qkv[3];
    CHECK_EQ_INT(fl_layer_split(x, 1, (const int64_t[]){D, -1, D}, 3, 2, qkv), 3);
    fl_var *q = NULL, *k = NULL, *v = NULL;
    fl_var **heads[3] = {&q, &k, &v};
    for (int i = 0; i < 3; i++) {                                             /* [B, S, D] repeated over H heads */
        fl_var *st = fl_layer_stack((fl_var *const[]){qkv[i], qkv[i]}, 2, 1); /* [B, H, S, D] */
        CHECK(st);
        *heads[i] = st;
    }
    CHECK_EQ_INT(fl_var_shape(q)[1], H);
    fl_var *mask = fl_layer_data(p, "mask", FL_SHAPE(S, S), FL_FLOAT32, 0);
    fl_var *mh = fl_layer_stack((fl_var *const[]){mask, mask}, 2, 1);
    fl_var *sc = fl_layer_matmul(q, k, 0, 1, 0.5f);
    fl_var *w = fl_layer_softmax(fl_layer_elementwise_add(sc, mh, -1));
    fl_var *ctx = fl_layer_matmul_v2(w, v, 0, 0);
    fl_var *out = fl_layer_transpose(ctx, 4, (const int64_t[]){0, 2, 1, 3});
    if (!out) TFAIL("attention: %s", fl_prog_error(p));
    float mv[B * S * S];
    for (int i = 0; i < B * S * S; i++) mv[i] = (i % S == 2 && i / (S * S) == 1) ? -1e4f : 0.0f;
    fl_tensor *mt = th_f32(3, (const int64_t[]){B, S, S}, mv);
    fl_feed feed[] = {{"mask", mt}};
    gc_check(gc_loss(out), feed, 1, NULL, defaults);
    fl_tensor_free(mt);
    fl_prog_free(p);
}

/* ---- gather, gather_nd -------------------------------------------------------------------------- */

/* Duplicate indices sum their gradients; int64 and int32 indices. */
TEST(grad_gather)
{
    for (int i32 = 0; i32 < 2; i32++) {
        fl_prog *p = fl_prog_create();
        fl_var *x = gc_input(p, "x", FL_SHAPE(5, 3), -1, 1);
        fl_var *idx = fl_layer_data(p, "idx", FL_SHAPE(1), i32 ? FL_INT32 : FL_INT64, 0);
        fl_var *o = fl_layer_gather(x, idx);
        if (!o) TFAIL("gather: %s", fl_prog_error(p));
        const int64_t iv[4] = {4, 0, 4, 2};
        const int32_t iv32[4] = {4, 0, 4, 2};
        fl_tensor *it = i32 ? fl_tensor_from_data(FL_INT32, 2, (const int64_t[]){4, 1}, iv32)
                            : th_i64(2, (const int64_t[]){4, 1}, iv);
        fl_feed feed[] = {{"idx", it}};
        gc_check(gc_loss(o), feed, 1, NULL, defaults);
        const char *f[1] = {fl_var_name(o)};
        fl_tensor *out = NULL;
        fl_exe *e = gc_run_once(p, feed, 1, f, 1, &out);
        CHECK_EQ_INT(fl_tensor_dim(out, 0), 4);
        fl_tensor *xt = fl_exe_scope(e) ? fl_scope_find(fl_exe_scope(e), "x") : NULL;
        CHECK(xt);
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 3; j++) CHECK_NEAR(fl_tensor_f32(out)[r * 3 + j], fl_tensor_f32(xt)[iv[r] * 3 + j], 0);
        fl_exe_free(e);
        fl_tensor_free(it);
        fl_prog_free(p);
    }
}

TEST(grad_gather_nd_and_range_error)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(3, 4, 2), -1, 1);
    fl_var *idx = fl_layer_data(p, "idx", FL_SHAPE(2), FL_INT64, 0); /* [N, 2] -> [N, 2] rows of x */
    fl_var *o = fl_layer_gather_nd(x, idx);
    if (!o) TFAIL("gather_nd: %s", fl_prog_error(p));
    CHECK_EQ_INT(fl_var_ndim(o), 2);
    CHECK_EQ_INT(fl_var_shape(o)[1], 2);
    fl_tensor *it = th_i64(2, (const int64_t[]){3, 2}, (const int64_t[]){2, 3, 0, 1, 2, 3});
    fl_feed feed[] = {{"idx", it}};
    gc_check(gc_loss(o), feed, 1, NULL, defaults);
    const char *f[1] = {fl_var_name(o)};
    fl_tensor *out = NULL;
    fl_exe *e = gc_run_once(p, feed, 1, f, 1, &out);
    fl_tensor *xt = fl_scope_find(fl_exe_scope(e), "x");
    CHECK_NEAR(fl_tensor_f32(out)[0], fl_tensor_f32(xt)[(2 * 4 + 3) * 2], 0);
    CHECK_NEAR(fl_tensor_f32(out)[3], fl_tensor_f32(xt)[(0 * 4 + 1) * 2 + 1], 0);
    fl_tensor *bad = th_i64(2, (const int64_t[]){1, 2}, (const int64_t[]){3, 0});
    fl_feed bf[] = {{"idx", bad}};
    CHECK_FAILS(fl_exe_run(e, p, bf, 1, f, 1, &out), FL_EINVAL, "out of range");
    fl_exe_free(e);
    fl_tensor_free(bad);
    fl_tensor_free(it);
    fl_prog_free(p);
}

/* ---- stack, split, slice, one_hot ----------------------------------------------------------- */

TEST(grad_stack_axes)
{
    for (int axis = -3; axis <= 2; axis += 1) {
        fl_prog *p = fl_prog_create();
        fl_var *a = gc_input(p, "a", FL_SHAPE(2, 3), -1, 1), *b = gc_input(p, "b", FL_SHAPE(2, 3), -1, 1);
        fl_var *y = fl_layer_stack((fl_var *const[]){a, b, a}, 3, axis);
        if (!y) TFAIL("stack: %s", fl_prog_error(p));
        int ax = axis < 0 ? axis + 3 : axis;
        CHECK_EQ_INT(fl_var_shape(y)[ax], 3);
        gc_check(gc_loss(y), NULL, 0, NULL, defaults);
        fl_prog_free(p);
    }
}

/* Only two of three parts are used: the unused part's gradient is zero. */
TEST(grad_split_sections_and_num)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(2, 6, 2), -1, 1);
    fl_var *parts[3];
    CHECK_EQ_INT(fl_layer_split(x, 0, (const int64_t[]){1, -1, 2}, 3, 1, parts), 3);
    CHECK_EQ_INT(fl_var_shape(parts[1])[1], 3);
    fl_var *s = fl_layer_elementwise_add(fl_layer_reduce_sum(parts[0], NULL, 0, 0),
                                         fl_layer_reduce_sum(fl_layer_gelu(parts[2], 0), NULL, 0, 0), -1);
    CHECK(s);
    gc_check(s, NULL, 0, NULL, defaults);
    fl_prog_free(p);

    p = fl_prog_create();
    x = gc_input(p, "x", FL_SHAPE(4, 3), -1, 1);
    CHECK_EQ_INT(fl_layer_split(x, 2, NULL, 0, -2, parts), 2);
    CHECK_EQ_INT(fl_var_shape(parts[0])[0], 2);
    gc_check(gc_loss(fl_layer_stack(parts, 2, 0)), NULL, 0, NULL, defaults);
    CHECK_EQ_INT(fl_layer_split(x, 3, NULL, 0, 0, parts), 0);
    CHECK_STR_HAS(fl_prog_error(p), "do not split");
    fl_prog_free(p);
}

TEST(grad_slice_negative_and_clamped)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(3, 5, 4), -1, 1);
    fl_var *y = fl_layer_slice(x, 2, (const int64_t[]){1, 2}, (const int64_t[]){-4, 1}, (const int64_t[]){100, -1});
    if (!y) TFAIL("slice: %s", fl_prog_error(p));
    CHECK_EQ_INT(fl_var_shape(y)[0], 3);
    CHECK_EQ_INT(fl_var_shape(y)[1], 4);
    CHECK_EQ_INT(fl_var_shape(y)[2], 2);
    gc_check(gc_loss(y), NULL, 0, NULL, defaults);
    const char *f[2] = {fl_var_name(y), "x"};
    fl_tensor *out[2] = {NULL, NULL};
    fl_exe *e = gc_run_once(p, NULL, 0, f, 2, out);
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 2; c++)
                CHECK_NEAR(fl_tensor_f32(out[0])[(a * 4 + b) * 2 + c], fl_tensor_f32(out[1])[(a * 5 + b + 1) * 4 + c + 1],
                           0);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(one_hot_values_and_range)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(1), FL_INT64, 0);
    fl_var *y = fl_layer_one_hot(x, 4);
    CHECK(y);
    CHECK_EQ_INT(fl_var_shape(y)[1], 4);
    fl_tensor *xt = th_i64(2, (const int64_t[]){3, 1}, (const int64_t[]){2, 0, 3});
    fl_feed feed[] = {{"x", xt}};
    const char *f[1] = {fl_var_name(y)};
    fl_tensor *out = NULL;
    fl_exe *e = gc_run_once(p, feed, 1, f, 1, &out);
    const float want[12] = {0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1};
    for (int i = 0; i < 12; i++) CHECK_NEAR(fl_tensor_f32(out)[i], want[i], 0);
    fl_tensor *bad = th_i64(2, (const int64_t[]){1, 1}, (const int64_t[]){4});
    fl_feed bf[] = {{"x", bad}};
    CHECK_FAILS(fl_exe_run(e, p, bf, 1, f, 1, &out), FL_EINVAL, "outside [0, 4)");
    fl_exe_free(e);
    fl_tensor_free(bad);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

/* ---- label_smooth, soft-label softmax_with_cross_entropy, expand ----------------------------- */

/* The Transformer's loss: one_hot -> label_smooth(0.1) -> soft-label cross entropy. */
TEST(grad_soft_label_cross_entropy_with_label_smooth)
{
    fl_prog *p = fl_prog_create();
    fl_var *logits = gc_input(p, "logits", FL_SHAPE(4, 5), -2, 2);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *soft = fl_layer_label_smooth(fl_layer_one_hot(y, 5), NULL, 0.1f);
    fl_var *loss = fl_layer_softmax_with_cross_entropy_ex(logits, soft, 1, -100);
    if (!loss) TFAIL("soft label loss: %s", fl_prog_error(p));
    CHECK_EQ_INT(fl_var_shape(loss)[1], 1);
    fl_tensor *yt = th_i64(2, (const int64_t[]){4, 1}, (const int64_t[]){0, 4, 2, 4});
    fl_feed feed[] = {{"y", yt}};
    gc_check(gc_loss(loss), feed, 1, NULL, defaults);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

/* Soft labels [0.9 + 0.1/3, 0.1/3, 0.1/3] on logits [1, 2, 3]: loss = sum_j l_j (lse - x_j). */
TEST(soft_label_cross_entropy_and_label_smooth_values)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *soft = fl_layer_label_smooth(fl_layer_one_hot(y, 3), NULL, 0.1f);
    fl_var *loss = fl_layer_softmax_with_cross_entropy_ex(x, soft, 1, -100);
    CHECK(loss);
    fl_tensor *xt = th_f32(2, (const int64_t[]){1, 3}, (const float[]){1, 2, 3});
    fl_tensor *yt = th_i64(2, (const int64_t[]){1, 1}, (const int64_t[]){0});
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    const char *f[2] = {fl_var_name(soft), fl_var_name(loss)};
    fl_tensor *out[2] = {NULL, NULL};
    fl_exe *e = gc_run_once(p, feed, 2, f, 2, out);
    const double l[3] = {0.9 + 0.1 / 3, 0.1 / 3, 0.1 / 3};
    double lse = log(exp(1.0) + exp(2.0) + exp(3.0)), want = 0;
    for (int j = 0; j < 3; j++) {
        CHECK_NEAR(fl_tensor_f32(out[0])[j], l[j], 1e-6);
        want += l[j] * (lse - (j + 1));
    }
    CHECK_NEAR(fl_tensor_f32(out[1])[0], want, 1e-5);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

TEST(grad_label_smooth_with_prior)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(3, 4), 0, 1);
    fl_var *prior = fl_layer_data(p, "prior", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *o = fl_layer_label_smooth(x, prior, 0.2f);
    CHECK(o);
    fl_tensor *pt = th_f32(2, (const int64_t[]){1, 4}, (const float[]){0.1f, 0.2f, 0.3f, 0.4f});
    fl_feed feed[] = {{"prior", pt}};
    gc_check(gc_loss(o), feed, 1, NULL, defaults);
    fl_tensor_free(pt);
    fl_prog_free(p);
}

TEST(grad_expand_and_values)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(2, 1, 1, 3), -1, 1);
    fl_var *y = fl_layer_expand(x, 4, (const int64_t[]){1, 2, 3, 2});
    if (!y) TFAIL("expand: %s", fl_prog_error(p));
    CHECK_EQ_INT(fl_var_shape(y)[1], 2);
    CHECK_EQ_INT(fl_var_shape(y)[2], 3);
    CHECK_EQ_INT(fl_var_shape(y)[3], 6);
    gc_check(gc_loss(y), NULL, 0, NULL, defaults);
    const char *f[2] = {fl_var_name(y), "x"};
    fl_tensor *out[2] = {NULL, NULL};
    fl_exe *e = gc_run_once(p, NULL, 0, f, 2, out);
    for (int b = 0; b < 2; b++)
        for (int r = 0; r < 6; r++)
            for (int j = 0; j < 6; j++)
                CHECK_NEAR(fl_tensor_f32(out[0])[(b * 6 + r) * 6 + j], fl_tensor_f32(out[1])[b * 3 + j % 3], 0);
    fl_exe_free(e);
    fl_prog_free(p);
}

/* BERT's mask path in Paddle 2.x programs: [B, 1, 1, S] expanded over heads and query rows. */
TEST(grad_attention_expanded_mask)
{
    const int64_t B = 2, H = 2, S = 3, D = 2;
    fl_prog *p = fl_prog_create();
    fl_var *q = gc_input(p, "q", FL_SHAPE(B, H, S, D), -1, 1), *k = gc_input(p, "k", FL_SHAPE(B, H, S, D), -1, 1);
    fl_var *mask = fl_layer_data(p, "mask", FL_SHAPE(1, 1, S), FL_FLOAT32, 0);
    fl_var *m4 = fl_layer_expand(mask, 4, (const int64_t[]){1, H, S, 1});
    fl_var *w = fl_layer_softmax(fl_layer_elementwise_add(fl_layer_matmul_v2(q, k, 0, 1), m4, -1));
    if (!w) TFAIL("attention: %s", fl_prog_error(p));
    fl_tensor *mt = th_f32(4, (const int64_t[]){B, 1, 1, S}, (const float[]){0, 0, -1e4f, 0, 0, 0});
    fl_feed feed[] = {{"mask", mt}};
    gc_check(gc_loss(w), feed, 1, NULL, defaults);
    const char *f[1] = {fl_var_name(w)};
    fl_tensor *out = NULL;
    fl_exe *e = gc_run_once(p, feed, 1, f, 1, &out);
    for (int r = 0; r < H * S; r++) CHECK_NEAR(fl_tensor_f32(out)[r * S + 2], 0.0, 1e-30); /* masked key */
    fl_exe_free(e);
    fl_tensor_free(mt);
    fl_prog_free(p);
}

/* ---- gradient clipping and learning-rate schedules (ops_nlp_train.c) ------------------------ */

/* loss = sum(3 w) + sum(4 v): gradients 3 (12 elements) and 4 (2 elements), global norm
 * sqrt(108 + 32); one SGD step of rate 1 under each clip against the hand-computed update. */
static void clip_step(int kind, float a, float b, double dw, double dv)
{
    fl_prog *p = fl_prog_create();
    fl_var *w = gc_input(p, "w", FL_SHAPE(3, 4), -1, 1), *v = gc_input(p, "v", FL_SHAPE(2), -1, 1);
    fl_var *loss = fl_layer_elementwise_add(fl_layer_reduce_sum(fl_layer_scale(w, 3, 0, 1), NULL, 0, 0),
                                            fl_layer_reduce_sum(fl_layer_scale(v, 4, 0, 1), NULL, 0, 0), -1);
    fl_opt *o = fl_opt_sgd(1.0f);
    CHECK_OK(fl_opt_set_grad_clip(o, kind, a, b));
    CHECK_OK(fl_opt_minimize(o, loss));
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    fl_scope *sc = fl_exe_scope(e);
    float w0[12], v0[2];
    memcpy(w0, fl_tensor_f32(fl_scope_find(sc, "w")), sizeof w0);
    memcpy(v0, fl_tensor_f32(fl_scope_find(sc, "v")), sizeof v0);
    CHECK_OK(fl_exe_run(e, p, NULL, 0, NULL, 0, NULL));
    for (int i = 0; i < 12; i++) CHECK_NEAR(fl_tensor_f32(fl_scope_find(sc, "w"))[i], w0[i] - dw, 1e-5);
    for (int i = 0; i < 2; i++) CHECK_NEAR(fl_tensor_f32(fl_scope_find(sc, "v"))[i], v0[i] - dv, 1e-5);
    fl_exe_free(e);
    fl_opt_free(o);
    fl_prog_free(p);
}

TEST(grad_clip_by_global_norm_value_and_norm)
{
    double g = sqrt(140.0);
    clip_step(FL_CLIP_GLOBAL_NORM, 1.0f, 0, 3 / g, 4 / g);
    clip_step(FL_CLIP_GLOBAL_NORM, 100.0f, 0, 3, 4); /* under the bound: unchanged */
    clip_step(FL_CLIP_VALUE, 3.5f, -1.0f, 3, 3.5);
    clip_step(FL_CLIP_NORM, 2.0f, 0, 2 / sqrt(12.0), 2 / sqrt(2.0));
    fl_opt *o = fl_opt_sgd(1.0f);
    CHECK_FAILS(fl_opt_set_grad_clip(o, FL_CLIP_GLOBAL_NORM, 0.0f, 0), FL_EINVAL, "norm bound");
    fl_opt_free(o);
}

/* Runs p `n` times from one startup, fetching lr each time. */
static void lr_series(fl_prog *p, fl_var *lr, int n, const double *want)
{
    if (!lr) TFAIL("schedule: %s", fl_prog_error(p));
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    const char *f[1] = {fl_var_name(lr)};
    for (int i = 0; i < n; i++) {
        fl_tensor *out = NULL;
        CHECK_OK(fl_exe_run(e, p, NULL, 0, f, 1, &out));
        CHECK_NEAR(fl_tensor_f32(out)[0], want[i], 1e-6);
    }
    fl_exe_free(e);
}

TEST(lr_schedules_noam_polynomial_warmup)
{
    fl_prog *p = fl_prog_create();
    /* d_model 4, warmup 2: 0.5 * min(step^-0.5, step * 2^-1.5), steps 1, 2, 3 */
    lr_series(p, fl_layer_noam_decay(p, 4, 2, 1.0f), 3,
              (const double[]){0.5 * pow(2, -1.5), 0.5 * pow(2, -0.5), 0.5 * pow(3, -0.5)});
    fl_prog_free(p);
    p = fl_prog_create();
    lr_series(p, fl_layer_polynomial_decay(p, 1.0f, 4, 0.0f, 2.0f, 0), 6, (const double[]){1, 0.5625, 0.25, 0.0625, 0, 0});
    fl_prog_free(p);
    p = fl_prog_create();
    fl_var *inner = fl_layer_polynomial_decay(p, 1.0f, 4, 0.1f, 1.0f, 0);
    lr_series(p, fl_layer_linear_lr_warmup(p, inner, 0, 2, 0.0f, 1.0f), 4, (const double[]){0, 0.5, 0.55, 0.325});
    fl_prog_free(p);
}

/* SGD driven by a schedule variable: the step uses the scheduled rate. */
TEST(minimize_with_schedule_lr_var)
{
    fl_prog *p = fl_prog_create();
    fl_var *w = gc_input(p, "w", FL_SHAPE(2), -1, 1);
    fl_var *loss = fl_layer_reduce_sum(w, NULL, 0, 0);
    fl_opt *o = fl_opt_sgd(1.0f);
    CHECK_OK(fl_opt_set_lr_var(o, fl_layer_polynomial_decay(p, 0.5f, 2, 0.0f, 1.0f, 0)));
    CHECK_OK(fl_opt_minimize(o, loss));
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    float w0 = fl_tensor_f32(fl_scope_find(fl_exe_scope(e), "w"))[0];
    for (int i = 0; i < 3; i++) CHECK_OK(fl_exe_run(e, p, NULL, 0, NULL, 0, NULL));
    /* rates 0.5, 0.25, 0 at steps 0, 1, 2; gradient 1 */
    CHECK_NEAR(fl_tensor_f32(fl_scope_find(fl_exe_scope(e), "w"))[0], w0 - 0.75, 1e-6);
    fl_exe_free(e);
    fl_opt_free(o);
    fl_prog_free(p);
}

/* ---- program text: the ops and their gradients round-trip ----------------------------------- */

TEST(nlp_program_text_round_trip)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(2, 3, 4), -1, 1);
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = fl_layer_gelu(fl_layer_layer_norm(x, 2, 1e-5f, 1, 1, NULL, NULL), 1);
    fl_var *parts[2];
    CHECK_EQ_INT(fl_layer_split(h, 2, NULL, 0, 2, parts), 2);
    fl_var *st = fl_layer_stack(parts, 2, 1);
    fl_var *t = fl_layer_transpose(st, 4, (const int64_t[]){0, 2, 1, 3});
    fl_var *sl = fl_layer_slice(t, 1, (const int64_t[]){3}, (const int64_t[]){0}, (const int64_t[]){1});
    fl_var *g = fl_layer_gather(fl_layer_expand(sl, 4, (const int64_t[]){1, 1, 1, 3}), ids);
    fl_var *oh = fl_layer_label_smooth(fl_layer_one_hot(ids, 3), NULL, 0.1f);
    fl_var *loss = fl_layer_mean(
        fl_layer_elementwise_add(fl_layer_reduce_sum(g, NULL, 0, 0), fl_layer_reduce_sum(oh, NULL, 0, 0), -1));
    if (!loss) TFAIL("program: %s", fl_prog_error(p));
    fl_param_grad *pairs = NULL;
    int n = 0;
    CHECK_OK(fl_append_backward(loss, NULL, 0, &pairs, &n));
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(fl_prog_to_text(p, &text, &len));
    CHECK_STR_HAS(text, "layer_norm_grad");
    fl_prog *q = NULL;
    CHECK_OK(fl_prog_from_text(text, len, &q));
    fl_tensor *it = th_i64(2, (const int64_t[]){2, 1}, (const int64_t[]){1, 0});
    fl_feed feed[] = {{"ids", it}};
    const char *f[2] = {fl_var_name(loss), "x@GRAD"};
    fl_tensor *a[2] = {NULL, NULL}, *b[2] = {NULL, NULL};
    fl_exe *e = gc_run_once(p, feed, 1, f, 2, a);
    double la = fl_tensor_f32(a[0])[0], ga[24];
    CHECK_EQ_INT(fl_tensor_numel(a[1]), 24);
    for (int i = 0; i < 24; i++) ga[i] = fl_tensor_f32(a[1])[i];
    CHECK_OK(fl_exe_run(e, q, feed, 1, f, 2, b));
    CHECK_NEAR(fl_tensor_f32(b[0])[0], la, 0);
    for (int i = 0; i < 24; i++) CHECK_NEAR(fl_tensor_f32(b[1])[i], ga[i], 0);
    fl_exe_free(e);
    fl_tensor_free(it);
    free(text);
    free(pairs);
    fl_prog_free(q);
    fl_prog_free(p);
}

/* ---- an encoder layer under recompute: the same gradients, dropout masks included ---------- */

/* x -> layer_norm -> Q, K, V (matmul_v2 by shared weights, heads by reshape + transpose2) ->
 * softmax(Q K^T / sqrt(D)) with dropout -> context -> gelu -> dropout; checkpoint at the
 * layer_norm output when `rc`.  Returns x@GRAD and wq@GRAD flattened into g. */
static void encoder_grads(int rc, float *g)
{
    const int64_t B = 2, S = 3, H = 2, D = 2;
    fl_prog *p = fl_prog_create();
    fl_prog_set_seed(p, 7);
    fl_var *x = gc_input(p, "x", FL_SHAPE(B, S, H * D), -1, 1);
    fl_var *w[3];
    for (int i = 0; i < 3; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "w%c", "qkv"[i]);
        w[i] = gc_input(p, nm, FL_SHAPE(H * D, H * D), -1, 1);
    }
    fl_var *ln = fl_layer_layer_norm(x, 2, 1e-5f, 1, 1, NULL, NULL), *hd[3];
    for (int i = 0; i < 3; i++)
        hd[i] = fl_layer_transpose(fl_layer_reshape(fl_layer_matmul_v2(ln, w[i], 0, 0), 4, (const int64_t[]){0, S, H, D}),
                                   4, (const int64_t[]){0, 2, 1, 3});
    fl_var *att = fl_layer_dropout(fl_layer_softmax(fl_layer_matmul(hd[0], hd[1], 0, 1, 1.0f / sqrtf((float)D))), 0.3f,
                                   "upscale_in_train");
    fl_var *ctx = fl_layer_transpose(fl_layer_matmul_v2(att, hd[2], 0, 0), 4, (const int64_t[]){0, 2, 1, 3});
    fl_var *out = fl_layer_dropout(fl_layer_gelu(ctx, 0), 0.3f, "upscale_in_train");
    fl_var *loss = gc_loss(out);
    if (!loss) TFAIL("encoder: %s", fl_prog_error(p));
    fl_param_grad *pairs = NULL;
    int n = 0;
    const char *cps[1] = {fl_var_name(ln)};
    if (rc) CHECK_OK(fl_append_backward_recompute(loss, NULL, 0, cps, 1, &pairs, &n));
    else CHECK_OK(fl_append_backward(loss, NULL, 0, &pairs, &n));
    const char *f[2] = {"x@GRAD", "wq@GRAD"};
    fl_tensor *o[2] = {NULL, NULL};
    fl_exe *e = gc_run_once(p, NULL, 0, f, 2, o);
    CHECK_EQ_INT(fl_tensor_numel(o[0]), 24);
    CHECK_EQ_INT(fl_tensor_numel(o[1]), 16);
    memcpy(g, fl_tensor_f32(o[0]), 24 * sizeof *g);
    memcpy(g + 24, fl_tensor_f32(o[1]), 16 * sizeof *g);
    fl_exe_free(e);
    free(pairs);
    fl_prog_free(p);
}

TEST(encoder_layer_recompute_same_gradients)
{
    float a[40], b[40];
    encoder_grads(0, a);
    encoder_grads(1, b);
    double mx = 0;
    for (int i = 0; i < 40; i++) {
        CHECK_NEAR(b[i], a[i], 1e-6);
        mx = fmax(mx, fabs(a[i]));
    }
    CHECK(mx > 0);
}

TEST_MAIN(T(grad_layer_norm_scale_bias), T(grad_layer_norm_plain_axis1), T(layer_norm_values),
          T(layer_norm_wide_rows_values_and_grad), T(layer_norm_build_errors), T(grad_gelu_exact_and_tanh), T(gelu_values),
          T(grad_transpose2), T(transpose2_values), T(grad_softmax_4d), T(softmax_rows_sum_to_one),
          T(grad_matmul_4d_all_transposes), T(grad_matmul_4d_shared_weight), T(matmul_4d_values_and_errors),
          T(grad_attention_block), T(grad_gather), T(grad_gather_nd_and_range_error), T(grad_stack_axes),
          T(grad_split_sections_and_num), T(grad_slice_negative_and_clamped), T(one_hot_values_and_range),
          T(grad_soft_label_cross_entropy_with_label_smooth), T(soft_label_cross_entropy_and_label_smooth_values),
          T(grad_label_smooth_with_prior), T(grad_expand_and_values), T(grad_attention_expanded_mask),
          T(grad_clip_by_global_norm_value_and_norm), T(lr_schedules_noam_polynomial_warmup),
          T(minimize_with_schedule_lr_var), T(nlp_program_text_round_trip), T(encoder_layer_recompute_same_gradients))
