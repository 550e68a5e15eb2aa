/* test_exec.c - executor: feeds, fetches, and the error messages users see on bad input. */
#include "testhelp.h"

typedef struct {
    fl_prog *p;
    fl_var *x, *y, *cost;
    fl_exe *exe;
} mlp_t;

static mlp_t build(void)
{
    mlp_t m;
    m.p = fl_prog_create();
    m.x = fl_layer_data(m.p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    m.y = fl_layer_data(m.p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = fl_layer_fc(FL_VARS(m.x), 8, "tanh");
    fl_var *pr = fl_layer_fc(FL_VARS(h), 3, "softmax");
    m.cost = fl_layer_mean(fl_layer_cross_entropy(pr, m.y));
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK_OK(fl_opt_minimize(o, m.cost));
    fl_opt_free(o);
    m.exe = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(m.exe, fl_prog_startup(m.p), NULL, 0, NULL, 0, NULL));
    return m;
}

static void release(mlp_t *m)
{
    fl_exe_free(m->exe);
    fl_prog_free(m->p);
}

TEST(run_and_fetch)
{
    mlp_t m = build();
    float xs[8] = {0.1f, 0.2f, 0.3f, 0.4f, -0.1f, -0.2f, -0.3f, -0.4f};
    int64_t ys[2] = {0, 2};
    fl_tensor *x = th_f32(2, (const int64_t[]){2, 4}, xs), *y = th_i64(2, (const int64_t[]){2, 1}, ys);
    fl_feed feed[] = {{"x", x}, {"y", y}};
    const char *fetch[] = {fl_var_name(m.cost), "fc_0.w_0"};
    fl_tensor *out[2];
    float first = 0;
    for (int i = 0; i < 20; i++) {
        CHECK_OK(fl_exe_run(m.exe, m.p, feed, 2, fetch, 2, out));
        if (i == 0) first = fl_tensor_f32(out[0])[0];
    }
    CHECK(fl_tensor_f32(out[0])[0] < first);
    CHECK_EQ_INT(fl_tensor_ndim(out[1]), 2);
    CHECK_EQ_INT(fl_tensor_dim(out[1], 0), 4);
    CHECK_EQ_INT(fl_tensor_dim(out[1], 1), 8);
    /* a different batch size works with the same plan */
    float x3[12] = {0};
    int64_t y3[3] = {1, 1, 0};
    fl_tensor *xb = th_f32(2, (const int64_t[]){3, 4}, x3), *yb = th_i64(2, (const int64_t[]){3, 1}, y3);
    fl_feed f3[] = {{"x", xb}, {"y", yb}};
    CHECK_OK(fl_exe_run(m.exe, m.p, f3, 2, fetch, 1, out));
    fl_tensor_free(xb);
    fl_tensor_free(yb);
    fl_tensor_free(x);
    fl_tensor_free(y);
    release(&m);
}

TEST(feed_wrong_shape)
{
    mlp_t m = build();
    fl_tensor *x = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){2, 5});
    fl_tensor *y = fl_tensor_create(FL_INT64, 2, (const int64_t[]){2, 1});
    fl_feed feed[] = {{"x", x}, {"y", y}};
    CHECK_FAILS(fl_exe_run(m.exe, m.p, feed, 2, NULL, 0, NULL), FL_EINVAL,
                "feed 'x': expected shape [-1, 4], got float32[2, 5]");
    fl_tensor_free(x);
    x = fl_tensor_create(FL_FLOAT32, 1, (const int64_t[]){8});
    feed[0].value = x;
    CHECK_FAILS(fl_exe_run(m.exe, m.p, feed, 2, NULL, 0, NULL), FL_EINVAL,
                "feed 'x': expected shape [-1, 4], got float32[8]");
    fl_tensor_free(x);
    fl_tensor_free(y);
    release(&m);
}

TEST(feed_wrong_dtype)
{
    mlp_t m = build();
    fl_tensor *x = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){2, 4});
    fl_tensor *y = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){2, 1});
    fl_feed feed[] = {{"x", x}, {"y", y}};
    CHECK_FAILS(fl_exe_run(m.exe, m.p, feed, 2, NULL, 0, NULL), FL_EINVAL,
                "feed 'y': expected dtype int64 shape [-1, 1], got float32[2, 1]");
    fl_tensor_free(x);
    fl_tensor_free(y);
    release(&m);
}

TEST(feed_unknown_and_missing)
{
    mlp_t m = build();
    fl_tensor *x = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){2, 4});
    fl_feed f1[] = {{"nope", x}};
    CHECK_FAILS(fl_exe_run(m.exe, m.p, f1, 1, NULL, 0, NULL), FL_ENOTFOUND, "feed 'nope': no variable of that name");
    fl_feed f2[] = {{"x", x}};
    CHECK_FAILS(fl_exe_run(m.exe, m.p, f2, 1, NULL, 0, NULL), FL_EINVAL,
                "variable 'y' is read by the program but was not fed");
    fl_tensor_free(x);
    release(&m);
}

TEST(fetch_unknown)
{
    mlp_t m = build();
    fl_tensor *x = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){2, 4});
    fl_tensor *y = fl_tensor_create(FL_INT64, 2, (const int64_t[]){2, 1});
    fl_feed feed[] = {{"x", x}, {"y", y}};
    const char *fetch[] = {"no_such_var"};
    fl_tensor *out;
    CHECK_FAILS(fl_exe_run(m.exe, m.p, feed, 2, fetch, 1, &out), FL_ENOTFOUND, "fetch 'no_such_var'");
    fl_tensor_free(x);
    fl_tensor_free(y);
    release(&m);
}

TEST(label_out_of_range_is_reported)
{
    mlp_t m = build();
    fl_tensor *x = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){2, 4});
    fl_tensor *y = th_i64(2, (const int64_t[]){2, 1}, (const int64_t[]){0, 7});
    fl_feed feed[] = {{"x", x}, {"y", y}};
    CHECK_FAILS(fl_exe_run(m.exe, m.p, feed, 2, NULL, 0, NULL), FL_EINVAL,
                "cross_entropy: label 7 at row 1 out of range [0, 3)");
    fl_tensor_free(x);
    fl_tensor_free(y);
    release(&m);
}

TEST(main_before_startup)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *h = fl_layer_fc(FL_VARS(x), 2, NULL);
    CHECK(h != NULL);
    fl_exe *e = fl_exe_create(NULL);
    fl_tensor *xt = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){1, 4});
    fl_feed feed[] = {{"x", xt}};
    CHECK_FAILS(fl_exe_run(e, p, feed, 1, NULL, 0, NULL), FL_ESTATE, "run the startup program first");
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(fc_shape_mismatch_at_build)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_fc_attr a;
    memset(&a, 0, sizeof a);
    a.weight.name = "shared_w";
    fl_var *h = fl_layer_fc_ex(FL_VARS(x), 3, NULL, &a);
    CHECK(h != NULL);
    fl_var *x2 = fl_layer_data(p, "x2", FL_SHAPE(5), FL_FLOAT32, 0);
    /* naming the same weight shares it; a different input width cannot */
    fl_var *h1 = fl_layer_fc_ex(FL_VARS(x), 3, NULL, &a);
    CHECK(h1 != NULL);
    CHECK(fl_prog_var(p, "shared_w") != NULL);
    fl_var *h2 = fl_layer_fc_ex(FL_VARS(x2), 3, NULL, &a);
    CHECK(h2 == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "parameter 'shared_w' already exists with shape [4, 3]; this use needs shape [5, 3]");
    CHECK(fl_prog_status(p) == FL_EINVAL);
    /* errors are sticky: later calls return NULL and minimize reports the first error */
    CHECK(fl_layer_mean(h2) == NULL);
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK(fl_opt_minimize(o, fl_layer_mean(h)) == FL_EINVAL);
    fl_opt_free(o);
    fl_prog_free(p);
}

TEST(cross_entropy_label_shape_at_build)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "lbl", FL_SHAPE(2), FL_INT64, 0);
    fl_var *pr = fl_layer_fc(FL_VARS(x), 3, "softmax");
    CHECK(fl_layer_cross_entropy(pr, y) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "cross_entropy: label 'lbl' [-1, 2] must have the rank of input");
    fl_prog_free(p);
}

TEST(data_layer_bad_args)
{
    fl_prog *p = fl_prog_create();
    CHECK(fl_layer_data(p, "x", FL_SHAPE(0), FL_FLOAT32, 0) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "data 'x': dimension 0 is 0");
    fl_prog_free(p);
    p = fl_prog_create();
    CHECK(fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0) != NULL);
    CHECK(fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "variable 'x' already exists");
    fl_prog_free(p);
}

TEST(fc_unknown_activation)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    CHECK(fl_layer_fc(FL_VARS(x), 3, "gelu_typo") == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "fc: unknown activation 'gelu_typo'");
    fl_prog_free(p);
}

TEST(startup_is_reproducible)
{
    float a[32], b[32];
    for (int r = 0; r < 2; r++) {
        fl_prog *p = fl_prog_create();
        fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
        CHECK(fl_layer_fc(FL_VARS(x), 8, "tanh") != NULL);
        fl_exe *e = fl_exe_create(NULL);
        CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
        fl_tensor *w = fl_scope_find(fl_exe_scope(e), "fc_0.w_0");
        CHECK(w && fl_tensor_numel(w) == 32);
        memcpy(r ? b : a, fl_tensor_f32(w), sizeof a);
        fl_exe_free(e);
        fl_prog_free(p);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* Xavier uniform bound sqrt(6/(4+8)) */
    for (int i = 0; i < 32; i++) CHECK(fabsf(a[i]) <= sqrtf(6.0f / 12.0f));
}

TEST_MAIN(T(run_and_fetch), T(feed_wrong_shape), T(feed_wrong_dtype), T(feed_unknown_and_missing), T(fetch_unknown),
          T(label_out_of_range_is_reported), T(main_before_startup), T(fc_shape_mismatch_at_build),
          T(cross_entropy_label_shape_at_build), T(data_layer_bad_args), T(fc_unknown_activation),
          T(startup_is_reproducible))
