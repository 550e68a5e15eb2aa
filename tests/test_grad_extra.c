/* test_grad_extra.c - the ops of ops_extra.c: finite-difference checks of matmul on every
 * transpose combination, rank 2 by rank 2, batched rank 3 by rank 3 and a rank-2 operand
 * shared by a batch (both sides); its forward against a plain loop and its shape errors;
 * fill_constant_batch_size_like's values, shapes and the absence of a gradient through it.
 * Tolerances: see gradcheck.h. */
#include "gradcheck.h"

static const gc_opts defaults = {0, 0, 0, 0};

/* x [.., M, K] (or [.., K, M]), y [.., K, N] (or [.., N, K]); bx / by: batch of x / y, 0 for
 * rank 2. */
static void mm_grad(int bx, int by, int tx, int ty, float alpha)
{
    const int64_t M = 3, K = 4, N = 2;
    int64_t xs[3], ys[3];
    int xn = 0, yn = 0;
    if (bx) xs[xn++] = bx;
    xs[xn++] = tx ? K : M, xs[xn++] = tx ? M : K;
    if (by) ys[yn++] = by;
    ys[yn++] = ty ? N : K, ys[yn++] = ty ? K : N;
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", xn, xs, -1, 1), *y = gc_input(p, "y", yn, ys, -1, 1);
    fl_var *o = fl_layer_matmul(x, y, tx, ty, alpha);
    if (!o) TFAIL("matmul: %s", fl_prog_error(p));
    const int64_t *os = fl_var_shape(o);
    int on = fl_var_ndim(o);
    CHECK_EQ_INT(on, (bx || by) ? 3 : 2);
    CHECK_EQ_INT(os[on - 2], M);
    CHECK_EQ_INT(os[on - 1], N);
    gc_check(gc_loss(o), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_matmul_2d_all_transposes)
{
    for (int t = 0; t < 4; t++) mm_grad(0, 0, t & 1, t >> 1, 1.0f);
    mm_grad(0, 0, 0, 0, 0.5f);
}

TEST(grad_matmul_batched_all_transposes)
{
    for (int t = 0; t < 4; t++) mm_grad(2, 2, t & 1, t >> 1, 1.0f);
}

TEST(grad_matmul_shared_operand)
{
    for (int t = 0; t < 4; t++) {
        mm_grad(3, 0, t & 1, t >> 1, 1.0f); /* y shared by x's batches */
        mm_grad(0, 3, t & 1, t >> 1, 1.0f); /* x shared by y's batches */
    }
}

/* word2vec's use: [N, 1, D] x [N, K, D]^T against per-row dot products. */
TEST(matmul_forward_matches_loop)
{
    const int64_t N = 2, K = 3, D = 4;
    float a[8], b[24];
    th_fill_uniform(a, 8, -1, 1, 1);
    th_fill_uniform(b, 24, -1, 1, 2);
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", 2, (const int64_t[]){1, D}, FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", 2, (const int64_t[]){K, D}, FL_FLOAT32, 0);
    fl_var *o = fl_layer_matmul(x, y, 0, 1, 2.0f);
    CHECK(o != NULL);
    fl_tensor *xt = th_f32(3, (const int64_t[]){N, 1, D}, a), *yt = th_f32(3, (const int64_t[]){N, K, D}, b);
    fl_feed feed[2] = {{"x", xt}, {"y", yt}};
    fl_exe *e = fl_exe_create(NULL);
    const char *f[1] = {fl_var_name(o)};
    fl_tensor *out;
    CHECK_OK(fl_exe_run(e, p, feed, 2, f, 1, &out));
    CHECK_EQ_INT(fl_tensor_ndim(out), 3);
    CHECK_EQ_INT(fl_tensor_dim(out, 2), K);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            float s = 0;
            for (int64_t d = 0; d < D; d++) s += a[n * D + d] * b[(n * K + k) * D + d];
            CHECK_NEAR(fl_tensor_f32(out)[n * K + k], 2 * s, 1e-5);
        }
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

TEST(matmul_shape_errors_name_the_inputs)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", 1, (const int64_t[]){4}, FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", 2, (const int64_t[]){5, 2}, FL_FLOAT32, 0);
    CHECK(fl_layer_matmul(x, y, 0, 0, 1.0f) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "inner dimensions");
    CHECK_STR_HAS(fl_prog_error(p), "'x'");
    fl_prog_free(p);
    p = fl_prog_create();
    x = fl_layer_data(p, "x", 3, (const int64_t[]){2, 3, 4}, FL_FLOAT32, 0);
    y = fl_layer_data(p, "y", 2, (const int64_t[]){4, 2}, FL_FLOAT32, 0);
    CHECK(fl_layer_matmul(x, y, 0, 0, 1.0f) == NULL); /* batched [-1, 2] against [-1] */
    CHECK_STR_HAS(fl_prog_error(p), "same leading dims");
    fl_prog_free(p);
}

/* Shaped by the batch of its input, filled, int64 too; the gradient does not go through it. */
TEST(fill_constant_batch_size_like_values_and_no_gradient)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", 2, (const int64_t[]){5, 3}, -1, 1);
    fl_var *ones = fl_layer_fill_constant_batch_size_like(x, 2, (const int64_t[]){-1, 4}, FL_FLOAT32, 1.5f);
    fl_var *ids = fl_layer_fill_constant_batch_size_like(x, 1, (const int64_t[]){-1}, FL_INT64, 7);
    CHECK(ones && ids);
    CHECK_EQ_INT(fl_var_shape(ones)[0], 5);
    CHECK_EQ_INT(fl_var_shape(ones)[1], 4);
    /* loss = mean(x) + mean(ones): only x gets a gradient */
    fl_var *loss = fl_layer_elementwise_add(fl_layer_mean(x), fl_layer_mean(ones), -1);
    fl_param_grad *pairs;
    int n;
    CHECK_OK(fl_append_backward(loss, NULL, 0, &pairs, &n));
    CHECK_EQ_INT(n, 1);
    free(pairs);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    const char *f[3] = {fl_var_name(ones), fl_var_name(ids), fl_var_name(loss)};
    fl_tensor *out[3];
    CHECK_OK(fl_exe_run(e, p, NULL, 0, f, 3, out));
    CHECK_EQ_INT(fl_tensor_numel(out[0]), 20);
    for (int i = 0; i < 20; i++) CHECK_NEAR(fl_tensor_f32(out[0])[i], 1.5, 0);
    CHECK_EQ_INT(fl_tensor_numel(out[1]), 5);
    CHECK_EQ_INT(fl_tensor_i64(out[1])[4], 7);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST_MAIN(T(grad_matmul_2d_all_transposes), T(grad_matmul_batched_all_transposes), T(grad_matmul_shared_operand),
          T(matmul_forward_matches_loop), T(matmul_shape_errors_name_the_inputs),
          T(fill_constant_batch_size_like_values_and_no_gradient))
