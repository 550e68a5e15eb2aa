/* test_grad_math.c - the ops of ops_math.c: finite-difference checks of square, reduce_mean
 * (each dim, several, all, keep_dim) and cast between float types; reduce_mean's forward
 * against a loop over a batch dimension known only at run time; cast's values (truncation
 * toward zero, int64 kept exactly) and no gradient through an integer type; the build errors
 * name the op and the input.  Tolerances: see gradcheck.h. */
#include "gradcheck.h"

static const gc_opts defaults = {0, 0, 0, 0};

TEST(grad_square)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", 2, (const int64_t[]){3, 4}, -1, 1);
    fl_var *o = fl_layer_square(x);
    if (!o) TFAIL("square: %s", fl_prog_error(p));
    gc_check(gc_loss(o), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

static void mean_grad(const int *dims, int nd, int keep)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", 3, (const int64_t[]){2, 3, 4}, -1, 1);
    fl_var *o = fl_layer_reduce_mean(x, dims, nd, keep);
    if (!o) TFAIL("reduce_mean: %s", fl_prog_error(p));
    gc_check(gc_loss(o), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_reduce_mean_dims)
{
    for (int d = -1; d < 3; d++) {
        mean_grad(&d, 1, 0);
        mean_grad(&d, 1, 1);
    }
    mean_grad((const int[]){0, 2}, 2, 0);
    mean_grad((const int[]){0, 1, 2}, 3, 1);
    mean_grad(NULL, 0, 0);
}

/* x [-1, 3] fed 4 rows: the mean over dim 0 divides by 4 (the run-time batch). */
TEST(reduce_mean_over_the_batch_matches_loop)
{
    float a[12];
    th_fill_uniform(a, 12, -1, 1, 3);
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", 1, (const int64_t[]){3}, FL_FLOAT32, 0);
    fl_var *m0 = fl_layer_reduce_mean(x, (const int[]){0}, 1, 0);
    fl_var *m1 = fl_layer_reduce_mean(x, (const int[]){1}, 1, 1);
    CHECK(m0 && m1);
    CHECK_EQ_INT(fl_var_ndim(m0), 1);
    CHECK_EQ_INT(fl_var_shape(m0)[0], 3);
    fl_tensor *xt = th_f32(2, (const int64_t[]){4, 3}, a);
    fl_feed feed[1] = {{"x", xt}};
    fl_exe *e = fl_exe_create(NULL);
    const char *f[2] = {fl_var_name(m0), fl_var_name(m1)};
    fl_tensor *out[2];
    CHECK_OK(fl_exe_run(e, p, feed, 1, f, 2, out));
    CHECK_EQ_INT(fl_tensor_numel(out[0]), 3);
    CHECK_EQ_INT(fl_tensor_ndim(out[1]), 2);
    CHECK_EQ_INT(fl_tensor_dim(out[1], 0), 4);
    CHECK_EQ_INT(fl_tensor_dim(out[1], 1), 1);
    for (int j = 0; j < 3; j++) {
        float s = 0;
        for (int i = 0; i < 4; i++) s += a[i * 3 + j];
        CHECK_NEAR(fl_tensor_f32(out[0])[j], s / 4, 1e-6);
    }
    for (int i = 0; i < 4; i++) CHECK_NEAR(fl_tensor_f32(out[1])[i], (a[i * 3] + a[i * 3 + 1] + a[i * 3 + 2]) / 3, 1e-6);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

/* float32 -> float64 -> float32: the gradient goes through both casts. */
TEST(grad_cast_between_floats)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", 2, (const int64_t[]){3, 2}, -1, 1);
    fl_var *d = fl_layer_cast(x, FL_FLOAT64);
    CHECK(d != NULL);
    CHECK_EQ_INT(fl_var_dtype(d), FL_FLOAT64);
    fl_var *o = fl_layer_cast(d, FL_FLOAT32);
    if (!o) TFAIL("cast: %s", fl_prog_error(p));
    gc_check(gc_loss(fl_layer_square(o)), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(cast_values_and_no_gradient_through_integers)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", 2, (const int64_t[]){2, 2}, -1, 1);
    fl_var *ids = fl_layer_data(p, "ids", 1, (const int64_t[]){1}, FL_INT64, 0);
    fl_var *xi = fl_layer_cast(x, FL_INT64), *idf = fl_layer_cast(ids, FL_FLOAT32), *idi = fl_layer_cast(ids, FL_INT64);
    CHECK(xi && idf && idi);
    CHECK(fl_var_stop_gradient(xi));
    fl_var *loss = fl_layer_elementwise_add(fl_layer_mean(x), fl_layer_mean(fl_layer_cast(xi, FL_FLOAT32)), -1);
    fl_param_grad *pairs;
    int n;
    CHECK_OK(fl_append_backward(loss, NULL, 0, &pairs, &n));
    CHECK_EQ_INT(n, 1); /* x, through mean only */
    free(pairs);
    float v[3] = {2.9f, -2.9f, 0.5f};
    fl_tensor *vt = th_f32(2, (const int64_t[]){3, 1}, v);
    fl_var *vv = fl_layer_data(p, "v", 1, (const int64_t[]){1}, FL_FLOAT32, 0);
    fl_var *vi = fl_layer_cast(vv, FL_INT32);
    fl_tensor *it = fl_tensor_create(FL_INT64, 2, (const int64_t[]){2, 1});
    fl_tensor_i64(it)[0] = (int64_t)1 << 60;
    fl_tensor_i64(it)[1] = -7;
    fl_feed feed[2] = {{"ids", it}, {"v", vt}};
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    const char *f[3] = {fl_var_name(idf), fl_var_name(idi), fl_var_name(vi)};
    fl_tensor *out[3];
    CHECK_OK(fl_exe_run(e, p, feed, 2, f, 3, out));
    CHECK_NEAR(fl_tensor_f32(out[0])[1], -7.0, 0);
    CHECK(fl_tensor_i64(out[1])[0] == (int64_t)1 << 60);
    const int32_t *w = fl_tensor_data(out[2]);
    CHECK_EQ_INT(w[0], 2);
    CHECK_EQ_INT(w[1], -2);
    CHECK_EQ_INT(w[2], 0);
    fl_exe_free(e);
    fl_tensor_free(it);
    fl_tensor_free(vt);
    fl_prog_free(p);
}

TEST(build_errors_name_the_op_and_input)
{
    fl_prog *p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", 1, (const int64_t[]){1}, FL_INT64, 0);
    CHECK(fl_layer_square(ids) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "square");
    CHECK_STR_HAS(fl_prog_error(p), "'ids'");
    fl_prog_free(p);
    p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", 2, (const int64_t[]){3, 4}, FL_FLOAT32, 0); /* [-1, 3, 4] */
    CHECK(fl_layer_reduce_mean(x, (const int[]){3}, 1, 0) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "reduce_mean");
    CHECK_STR_HAS(fl_prog_error(p), "'x'");
    fl_prog_free(p);
    p = fl_prog_create();
    x = fl_layer_data(p, "x", 1, (const int64_t[]){3}, FL_FLOAT32, 0);
    CHECK(fl_layer_cast(x, FL_BFLOAT16) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "dtype_cast");
    fl_prog_free(p);
}

TEST_MAIN(T(grad_square), T(grad_reduce_mean_dims), T(reduce_mean_over_the_batch_matches_loop), T(grad_cast_between_floats),
          T(cast_values_and_no_gradient_through_integers), T(build_errors_name_the_op_and_input))
