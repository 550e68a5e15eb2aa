/* test_grad_more.c - the ops of ops_bcast.c, ops_more.c, ops_lr.c and ops_rmsprop.c:
 * finite-difference checks of elementwise_add / sub / mul / div broadcast both ways and of
 * elementwise_max / min; the comparisons and logical ops against plain loops; shape errors;
 * where (ops_select.c) and the assign initializer.
 * Tolerances: see gradcheck.h. */
#include "gradcheck.h"

static const gc_opts defaults = {0, 0, 0, 0};

typedef fl_var *(*binop)(fl_var *, fl_var *, int);

/* x [xs], y [ys] parameters, out = op(x, y) of shape [os]. */
static void bc_grad(binop op, int xn, const int64_t *xs, int yn, const int64_t *ys, int on, const int64_t *os, float ylo)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", xn, xs, -1, 1), *y = gc_input(p, "y", yn, ys, ylo, 1);
    fl_var *o = op(x, y, -1);
    if (!o) TFAIL("broadcast op: %s", fl_prog_error(p));
    CHECK_EQ_INT(fl_var_ndim(o), on);
    for (int i = 0; i < on; i++) CHECK_EQ_INT(fl_var_shape(o)[i], os[i]);
    gc_check(gc_loss(o), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_elementwise_two_way_broadcast)
{
    static const binop ops[] = {fl_layer_elementwise_add, fl_layer_elementwise_sub, fl_layer_elementwise_mul,
                                fl_layer_elementwise_div};
    for (int k = 0; k < 4; k++) {
        float ylo = k == 3 ? 0.5f : -1.0f; /* div: keep y away from 0 */
        bc_grad(ops[k], 2, (const int64_t[]){3, 1}, 2, (const int64_t[]){1, 4}, 2, (const int64_t[]){3, 4}, ylo);
        /* y of higher rank than x */
        bc_grad(ops[k], 1, (const int64_t[]){4}, 3, (const int64_t[]){2, 3, 4}, 3, (const int64_t[]){2, 3, 4}, ylo);
        bc_grad(ops[k], 3, (const int64_t[]){2, 1, 4}, 2, (const int64_t[]){3, 1}, 3, (const int64_t[]){2, 3, 4}, ylo);
    }
}

TEST(grad_elementwise_max_min)
{
    for (int k = 0; k < 2; k++) {
        binop op = k ? fl_layer_elementwise_min : fl_layer_elementwise_max;
        bc_grad(op, 2, (const int64_t[]){3, 4}, 2, (const int64_t[]){3, 4}, 2, (const int64_t[]){3, 4}, -1);
        bc_grad(op, 2, (const int64_t[]){3, 4}, 1, (const int64_t[]){4}, 2, (const int64_t[]){3, 4}, -1);
        bc_grad(op, 2, (const int64_t[]){3, 1}, 2, (const int64_t[]){1, 4}, 2, (const int64_t[]){3, 4}, -1);
    }
}

/* Runs out = f(x, y) on fed float32 x [2, 3] and y [3] (or [1, 3]) and returns the result. */
static void run_xy(fl_prog *p, fl_var *o, const float *xv, const float *yv, int yrank, fl_tensor **res, fl_exe **e)
{
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 3}, xv);
    fl_tensor *yt = yrank == 1 ? th_f32(1, (const int64_t[]){3}, yv) : th_f32(2, (const int64_t[]){1, 3}, yv);
    fl_feed feed[2] = {{"x", xt}, {"y", yt}};
    const char *f[1] = {fl_var_name(o)};
    *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(*e, p, feed, 2, f, 1, res));
    fl_tensor_free(xt);
    fl_tensor_free(yt);
}

TEST(max_min_forward_broadcasts_both_ways)
{
    const float xv[6] = {1, -2, 3, 0.5f, 5, -6}, yv[3] = {0, 1, 2};
    for (int k = 0; k < 2; k++) {
        fl_prog *p = fl_prog_create();
        fl_var *x = fl_layer_data(p, "x", 1, (const int64_t[]){3}, FL_FLOAT32, 0);
        fl_var *y = fl_layer_data(p, "y", 1, (const int64_t[]){3}, FL_FLOAT32, 0);
        fl_var *o = k ? fl_layer_elementwise_min(y, x, -1) : fl_layer_elementwise_max(y, x, -1);
        CHECK(o != NULL);
        fl_tensor *r;
        fl_exe *e;
        run_xy(p, o, xv, yv, 2, &r, &e); /* y [1, 3] against x [2, 3]: y is the first operand */
        CHECK_EQ_INT(fl_tensor_dim(r, 0), 2);
        for (int i = 0; i < 6; i++) {
            float a = xv[i], b = yv[i % 3];
            CHECK_NEAR(fl_tensor_f32(r)[i], k ? fminf(a, b) : fmaxf(a, b), 0);
        }
        fl_exe_free(e);
        fl_prog_free(p);
    }
}

TEST(comparisons_and_logical_ops_match_loops)
{
    static const char *const cmp[] = {"less_than", "less_equal", "greater_than", "greater_equal", "equal", "not_equal"};
    const float xv[6] = {1, -2, 2, 0, 5, -6}, yv[3] = {0, -2, 2};
    for (int k = 0; k < 10; k++) {
        fl_prog *p = fl_prog_create();
        fl_var *x = fl_layer_data(p, "x", 1, (const int64_t[]){3}, FL_FLOAT32, 0);
        fl_var *y = fl_layer_data(p, "y", 1, (const int64_t[]){3}, FL_FLOAT32, 0);
        const char *lg[] = {"logical_and", "logical_or", "logical_xor", "logical_not"};
        fl_var *o = k < 6 ? fl_layer_compare(x, y, cmp[k]) : fl_layer_logical(x, k == 9 ? NULL : y, lg[k - 6]);
        if (!o) TFAIL("%s: %s", k < 6 ? cmp[k] : lg[k - 6], fl_prog_error(p));
        CHECK_EQ_INT(fl_var_dtype(o), FL_INT32);
        CHECK(fl_var_stop_gradient(o));
        fl_tensor *r;
        fl_exe *e;
        run_xy(p, o, xv, yv, 2, &r, &e);
        CHECK_EQ_INT(fl_tensor_dtype(r), FL_INT32);
        for (int i = 0; i < 6; i++) {
            float a = xv[i], b = yv[i % 3];
            int want = k == 0   ? a < b
                       : k == 1 ? a <= b
                       : k == 2 ? a > b
                       : k == 3 ? a >= b
                       : k == 4 ? a == b
                       : k == 5 ? a != b
                       : k == 6 ? (a != 0 && b != 0)
                       : k == 7 ? (a != 0 || b != 0)
                       : k == 8 ? ((a != 0) != (b != 0))
                                : a == 0;
            CHECK_EQ_INT(((const int32_t *)fl_tensor_cdata(r))[i], want);
        }
        fl_exe_free(e);
        fl_prog_free(p);
    }
}

TEST(broadcast_errors_name_the_inputs)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", 2, (const int64_t[]){3, 4}, FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", 2, (const int64_t[]){2, 4}, FL_FLOAT32, 0);
    CHECK(fl_layer_elementwise_max(x, y, -1) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "'x'");
    CHECK_STR_HAS(fl_prog_error(p), "'y'");
    fl_prog_free(p);
    p = fl_prog_create();
    x = fl_layer_data(p, "x", 1, (const int64_t[]){3}, FL_FLOAT32, 0);
    fl_var *i = fl_layer_data(p, "i", 1, (const int64_t[]){3}, FL_INT64, 0);
    CHECK(fl_layer_compare(x, i, "less_than") == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "one dtype");
    fl_prog_free(p);
    CHECK(fl_layer_compare(NULL, NULL, "less") == NULL);
    CHECK_STR_HAS(fl_last_error(), "less");
}

TEST(grad_l2_normalize)
{
    const int64_t s2[2] = {3, 4}, s3[3] = {2, 3, 4};
    const struct {
        int nd;
        const int64_t *shape;
        int axis;
    } cases[] = {{2, s2, -1}, {2, s2, 0}, {3, s3, 1}};
    for (int c = 0; c < 3; c++) {
        fl_prog *p = fl_prog_create();
        fl_var *x = gc_input(p, "x", cases[c].nd, cases[c].shape, -1, 1);
        fl_var *o = fl_layer_l2_normalize(x, cases[c].axis, 1e-12f);
        if (!o) TFAIL("l2_normalize: %s", fl_prog_error(p));
        gc_check(gc_loss(o), NULL, 0, NULL, defaults);
        fl_prog_free(p);
    }
}

TEST(l2_normalize_rows_have_unit_norm)
{
    const float xv[6] = {3, 4, 0, 1, -2, 2};
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", 1, (const int64_t[]){3}, FL_FLOAT32, 0);
    fl_var *o = fl_layer_l2_normalize(x, 1, 1e-12f);
    CHECK(o != NULL);
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 3}, xv), *r;
    fl_feed feed[1] = {{"x", xt}};
    const char *f[1] = {fl_var_name(o)};
    fl_exe *e = gc_run_once(p, feed, 1, f, 1, &r);
    CHECK_NEAR(fl_tensor_f32(r)[0], 0.6f, 1e-6);
    CHECK_NEAR(fl_tensor_f32(r)[1], 0.8f, 1e-6);
    CHECK_NEAR(fl_tensor_f32(r)[3], 1.0f / 3, 1e-6);
    CHECK_NEAR(fl_tensor_f32(r)[4], -2.0f / 3, 1e-6);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

TEST(grad_topk_and_its_indices)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", 2, (const int64_t[]){3, 5}, -1, 1), *idx = NULL;
    fl_var *v = fl_layer_topk(x, 2, &idx);
    if (!v || !idx) TFAIL("topk: %s", fl_prog_error(p));
    CHECK_EQ_INT(fl_var_dtype(idx), FL_INT64);
    CHECK_EQ_INT(fl_var_shape(v)[1], 2);
    const char *f[3] = {"x", fl_var_name(v), fl_var_name(idx)};
    fl_tensor *r[3];
    fl_exe *e = gc_run_once(p, NULL, 0, f, 3, r);
    for (int row = 0; row < 3; row++) {
        const float *xr = fl_tensor_f32(r[0]) + row * 5;
        const int64_t *ir = (const int64_t *)fl_tensor_cdata(r[2]) + row * 2;
        int best = 0;
        for (int j = 1; j < 5; j++) best = xr[j] > xr[best] ? j : best;
        CHECK_EQ_INT(ir[0], best);
        CHECK_NEAR(fl_tensor_f32(r[1])[row * 2], xr[best], 0);
        CHECK(fl_tensor_f32(r[1])[row * 2 + 1] <= xr[best]);
    }
    fl_exe_free(e);
    gc_check(gc_loss(v), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(fill_constant_values_and_dtypes)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = fl_layer_fill_constant(p, 2, (const int64_t[]){2, 3}, FL_FLOAT32, 1.5);
    fl_var *b = fl_layer_fill_constant(p, 1, (const int64_t[]){1}, FL_INT64, 4000000000.0);
    CHECK(a && b);
    CHECK(fl_var_stop_gradient(a));
    const char *f[2] = {fl_var_name(a), fl_var_name(b)};
    fl_tensor *r[2];
    fl_exe *e = gc_run_once(p, NULL, 0, f, 2, r);
    CHECK_EQ_INT(fl_tensor_numel(r[0]), 6);
    for (int i = 0; i < 6; i++) CHECK_NEAR(fl_tensor_f32(r[0])[i], 1.5f, 0);
    CHECK_EQ_INT(((const int64_t *)fl_tensor_cdata(r[1]))[0], 4000000000LL);
    fl_exe_free(e);
    CHECK(fl_layer_fill_constant(p, 1, (const int64_t[]){0}, FL_FLOAT32, 1) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "shape[0]");
    fl_prog_free(p);
}

/* Each schedule fetched over 7 runs against its formula (step 0 on the first run). */
TEST(lr_schedules_follow_their_formulas)
{
    fl_prog *p = fl_prog_create();
    const int64_t b[2] = {2, 5};
    const float v[3] = {1.0f, 0.5f, 0.1f};
    fl_var *lr[5] = {fl_layer_piecewise_decay(p, b, 2, v), fl_layer_exponential_decay(p, 2.0f, 3, 0.5f, 1),
                     fl_layer_natural_exp_decay(p, 2.0f, 3, 0.5f, 0), fl_layer_inverse_time_decay(p, 2.0f, 3, 0.5f, 1),
                     fl_layer_cosine_decay(p, 2.0f, 2, 4)};
    for (int i = 0; i < 5; i++)
        if (!lr[i]) TFAIL("schedule %d: %s", i, fl_prog_error(p));
    const char *f[5];
    for (int i = 0; i < 5; i++) f[i] = fl_var_name(lr[i]);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    for (int step = 0; step < 7; step++) {
        fl_tensor *r[5];
        CHECK_OK(fl_exe_run(e, p, NULL, 0, f, 5, r));
        double d = step / 3.0, want[5] = {step < 2   ? 1.0
                                          : step < 5 ? 0.5
                                                     : 0.1,
                                          2.0 * pow(0.5, floor(d)), 2.0 * exp(-0.5 * d), 2.0 / (1.0 + 0.5 * floor(d)),
                                          2.0 * 0.5 * (cos(floor(step / 2.0) * M_PI / 4) + 1)};
        for (int i = 0; i < 5; i++) CHECK_NEAR(fl_tensor_f32(r[i])[0], want[i], 1e-6);
    }
    fl_exe_free(e);
    fl_prog_free(p);
    p = fl_prog_create();
    CHECK(fl_layer_piecewise_decay(p, b, 2, NULL) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "piecewise_decay");
    fl_prog_free(p);
}

/* w [4] trained on loss = mean(x * w) (gradient x / 4, x fed) by opt for 3 steps; w starts at
 * init.  Returns w. */
static void train_linear_l1(fl_opt *o, const float *init, const float *xv, float *w_out, float param_l1)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", 1, (const int64_t[]){4}, FL_FLOAT32, 0);
    fl_param_attr a = {.name = "w", .init = fl_init_constant(0), .l1_decay = param_l1};
    fl_var *w = fl_layer_create_parameter(p, 1, (const int64_t[]){4}, FL_FLOAT32, &a);
    fl_var *loss = fl_layer_mean(fl_layer_elementwise_mul(x, w, -1));
    CHECK_OK(fl_opt_minimize(o, loss));
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    fl_tensor *wt = fl_scope_find(fl_exe_scope(e), "w");
    CHECK(wt != NULL);
    memcpy(fl_tensor_f32(wt), init, 4 * sizeof(float));
    fl_tensor *xt = th_f32(2, (const int64_t[]){1, 4}, xv);
    fl_feed feed[1] = {{"x", xt}};
    for (int s = 0; s < 3; s++) CHECK_OK(fl_exe_run(e, p, feed, 1, NULL, 0, NULL));
    memcpy(w_out, fl_tensor_f32(wt), 4 * sizeof(float));
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_prog_free(p);
    fl_opt_free(o);
}

static void train_linear(fl_opt *o, const float *init, const float *xv, float *w_out)
{
    train_linear_l1(o, init, xv, w_out, 0.0f);
}

TEST(rmsprop_matches_its_reference)
{
    const float init[4] = {0.5f, -0.3f, 0.2f, 0.0f}, xv[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    for (int centered = 0; centered < 2; centered++) {
        float w[4];
        train_linear(fl_opt_rmsprop(0.1f, 0.9f, 1e-6f, 0.5f, centered), init, xv, w);
        for (int i = 0; i < 4; i++) {
            double p = init[i], ms = 0, mg = 0, mom = 0, g = xv[i] / 4.0;
            for (int s = 0; s < 3; s++) {
                ms = 0.9 * ms + 0.1 * g * g;
                mg = 0.9 * mg + 0.1 * g;
                mom = 0.5 * mom + 0.1 * g / sqrt((centered ? ms - mg * mg : ms) + 1e-6);
                p -= mom;
            }
            CHECK_NEAR(w[i], p, 1e-4);
        }
    }
    CHECK(fl_opt_rmsprop(0.1f, 1.0f, 1e-6f, 0, 0) == NULL);
    CHECK_STR_HAS(fl_last_error(), "rho");
}

TEST(l1_decay_adds_coeff_times_sign)
{
    const float init[4] = {0.5f, -0.3f, 0.2f, 0.0f}, xv[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    float w[4];
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK_OK(fl_opt_set_l1(o, 0.2f));
    train_linear(o, init, xv, w);
    for (int i = 0; i < 4; i++) {
        double p = init[i];
        for (int s = 0; s < 3; s++) p -= 0.1 * (xv[i] / 4.0 + 0.2 * (p > 0 ? 1 : p < 0 ? -1 : 0));
        CHECK_NEAR(w[i], p, 1e-5);
    }
    /* the parameter's own coefficient adds to the optimizer's */
    o = fl_opt_sgd(0.1f);
    CHECK_OK(fl_opt_set_l1(o, 0.05f));
    train_linear_l1(o, init, xv, w, 0.15f);
    for (int i = 0; i < 4; i++) {
        double p = init[i];
        for (int s = 0; s < 3; s++) p -= 0.1 * (xv[i] / 4.0 + 0.2 * (p > 0 ? 1 : p < 0 ? -1 : 0));
        CHECK_NEAR(w[i], p, 1e-5);
    }
    CHECK_FAILS(fl_opt_set_l1(NULL, 0.1f), FL_EINVAL, "fl_opt_set_l1");
}

TEST(grad_sqrt_abs_exp_log)
{
    static const char *const types[] = {"sqrt", "abs", "exp", "log", "abs"};
    for (int k = 0; k < 5; k++) {
        fl_prog *p = fl_prog_create();
        /* on (0.5, 2), away from abs's kink; the second abs sees the negated values */
        fl_var *x = gc_input(p, "x", 2, (const int64_t[]){3, 4}, 0.5f, 2);
        fl_var *o = fl_layer_unary(k == 4 ? fl_layer_scale(x, -1, 0, 1) : x, types[k]);
        if (!o) TFAIL("%s: %s", types[k], fl_prog_error(p));
        gc_check(gc_loss(o), NULL, 0, NULL, defaults);
        fl_prog_free(p);
    }
    CHECK(fl_layer_unary(NULL, "cbrt") == NULL);
    CHECK_STR_HAS(fl_last_error(), "cbrt");
}

TEST(shape_assign_value_and_global_var)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", 2, (const int64_t[]){3, 2}, FL_FLOAT32, 0);
    fl_var *s = fl_layer_shape(x);
    const float fv[4] = {1, 2, 3, 4};
    const int64_t iv[3] = {7, -8, 9000000000LL};
    fl_var *a = fl_layer_assign_value(p, 2, (const int64_t[]){2, 2}, FL_FLOAT32, fv);
    fl_var *b = fl_layer_assign_value(p, 1, (const int64_t[]){3}, FL_INT64, iv);
    fl_var *g = fl_layer_create_global_var(p, "gstep", 1, (const int64_t[]){1}, FL_INT64, 5);
    CHECK(s && a && b && g);
    CHECK(fl_var_persistable(g));
    CHECK(fl_layer_create_global_var(p, "gstep", 1, (const int64_t[]){1}, FL_INT64, 5) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "exists already");
    fl_prog_free(p);
    p = fl_prog_create();
    x = fl_layer_data(p, "x", 2, (const int64_t[]){3, 2}, FL_FLOAT32, 0);
    s = fl_layer_shape(x);
    a = fl_layer_assign_value(p, 2, (const int64_t[]){2, 2}, FL_FLOAT32, fv);
    b = fl_layer_assign_value(p, 1, (const int64_t[]){3}, FL_INT64, iv);
    g = fl_layer_create_global_var(p, "gstep", 1, (const int64_t[]){1}, FL_INT64, 5);
    float xv[30] = {0};
    fl_tensor *xt = th_f32(3, (const int64_t[]){5, 3, 2}, xv), *r[4];
    fl_feed feed[1] = {{"x", xt}};
    const char *f[4] = {fl_var_name(s), fl_var_name(a), fl_var_name(b), "gstep"};
    fl_exe *e = gc_run_once(p, feed, 1, f, 4, r);
    const int32_t *sd = fl_tensor_cdata(r[0]);
    CHECK_EQ_INT(fl_tensor_numel(r[0]), 3);
    CHECK_EQ_INT(sd[0], 5);
    CHECK_EQ_INT(sd[1], 3);
    CHECK_EQ_INT(sd[2], 2);
    for (int i = 0; i < 4; i++) CHECK_NEAR(fl_tensor_f32(r[1])[i], fv[i], 0);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(((const int64_t *)fl_tensor_cdata(r[2]))[i], iv[i]);
    CHECK_EQ_INT(((const int64_t *)fl_tensor_cdata(r[3]))[0], 5);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

/* simnet_bow's accuracy: less_than -> cast float64 -> reduce_sum -> elementwise_div by a
 * float64 fill_constant (float64 forward through reduce_sum and the elementwise ops). */
TEST(float64_accuracy_chain_of_simnet_bow)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = fl_layer_data(p, "a", 1, (const int64_t[]){1}, FL_FLOAT32, 0);
    fl_var *b = fl_layer_data(p, "b", 1, (const int64_t[]){1}, FL_FLOAT32, 0);
    fl_var *cond = fl_layer_cast(fl_layer_compare(a, b, "less_than"), FL_FLOAT64);
    fl_var *acc = fl_layer_elementwise_div(fl_layer_reduce_sum(cond, NULL, 0, 0),
                                           fl_layer_fill_constant(p, 1, (const int64_t[]){1}, FL_FLOAT64, 4.0), -1);
    if (!acc) TFAIL("float64 chain: %s", fl_prog_error(p));
    CHECK_EQ_INT(fl_var_dtype(acc), FL_FLOAT64);
    const float av[4] = {0.1f, 0.5f, -0.2f, 0.9f}, bv[4] = {0.3f, 0.4f, 0.0f, 0.1f};
    fl_tensor *at = th_f32(2, (const int64_t[]){4, 1}, av), *bt = th_f32(2, (const int64_t[]){4, 1}, bv), *r;
    fl_feed feed[2] = {{"a", at}, {"b", bt}};
    const char *f[1] = {fl_var_name(acc)};
    fl_exe *e = gc_run_once(p, feed, 2, f, 1, &r);
    CHECK_EQ_INT(fl_tensor_dtype(r), FL_FLOAT64);
    CHECK_NEAR(((const double *)fl_tensor_cdata(r))[0], 0.5, 0);
    fl_exe_free(e);
    fl_tensor_free(at);
    fl_tensor_free(bt);
    fl_prog_free(p);
}

/* where(c, x, y): x, y parameters, c an int64 0 / 1 feed of shape [cs] (its first dim the
 * batch), checked by finite differences; the result has shape [os]. */
static void where_grad(const int64_t *cs, const int64_t *xs, int xn, const int64_t *ys, int yn, const int64_t *os)
{
    fl_prog *p = fl_prog_create();
    fl_var *c = fl_layer_data(p, "c", 1, &cs[1], FL_INT64, 0);
    fl_var *x = gc_input(p, "x", xn, xs, -1, 1), *y = gc_input(p, "y", yn, ys, -1, 1);
    fl_var *o = fl_layer_where(c, x, y);
    if (!o) TFAIL("where: %s", fl_prog_error(p));
    CHECK_EQ_INT(fl_var_ndim(o), 2);
    CHECK_EQ_INT(fl_var_shape(o)[1], os[1]);
    int64_t cv[12];
    for (int i = 0; i < 12; i++) cv[i] = (i * 7 + 3) % 5 < 2; /* a mix of both branches */
    fl_tensor *ct = th_i64(2, cs, cv);
    fl_feed feed[1] = {{"c", ct}};
    gc_check(gc_loss(o), feed, 1, NULL, defaults);
    fl_tensor_free(ct);
    fl_prog_free(p);
}

TEST(grad_where_broadcasts_three_ways)
{
    where_grad((const int64_t[]){3, 4}, (const int64_t[]){3, 4}, 2, (const int64_t[]){3, 4}, 2, (const int64_t[]){3, 4});
    where_grad((const int64_t[]){3, 4}, (const int64_t[]){3, 4}, 2, (const int64_t[]){4}, 1, (const int64_t[]){3, 4});
    where_grad((const int64_t[]){3, 1}, (const int64_t[]){1, 4}, 2, (const int64_t[]){3, 4}, 2, (const int64_t[]){3, 4});
}

/* An inf or a NaN in the branch not taken reaches neither Out nor a gradient; x and y start
 * from fl_init_assign's values. */
TEST(where_keeps_the_unused_branch_out)
{
    fl_prog *p = fl_prog_create();
    const float xv[4] = {1.0f, INFINITY, 3.0f, NAN}, yv[4] = {-INFINITY, 20.0f, NAN, 40.0f};
    fl_param_attr ax, ay;
    memset(&ax, 0, sizeof ax);
    memset(&ay, 0, sizeof ay);
    ax.name = "x", ay.name = "y";
    CHECK_OK(fl_init_assign(p, xv, 4, &ax.init));
    CHECK_OK(fl_init_assign(p, yv, 4, &ay.init));
    fl_var *c = fl_layer_data(p, "c", 1, (const int64_t[]){4}, FL_INT64, 0);
    fl_var *x = fl_layer_create_parameter(p, 2, (const int64_t[]){1, 4}, FL_FLOAT32, &ax);
    fl_var *y = fl_layer_create_parameter(p, 2, (const int64_t[]){1, 4}, FL_FLOAT32, &ay);
    fl_var *o = fl_layer_where(c, x, y), *loss = fl_layer_reduce_sum(o, NULL, 0, 0);
    if (!loss) TFAIL("where: %s", fl_prog_error(p));
    fl_param_grad *pairs = NULL;
    int n = 0;
    CHECK_OK(fl_append_backward(loss, NULL, 0, &pairs, &n));
    CHECK_EQ_INT(n, 2);
    const int64_t cv[4] = {1, 0, 1, 0};
    fl_tensor *ct = th_i64(2, (const int64_t[]){1, 4}, cv), *r[3];
    fl_feed feed[1] = {{"c", ct}};
    int xi = strcmp(fl_var_name(pairs[0].param), "x") != 0; /* the pair of x */
    const char *f[3] = {fl_var_name(o), fl_var_name(pairs[xi].grad), fl_var_name(pairs[1 - xi].grad)};
    fl_exe *e = gc_run_once(p, feed, 1, f, 3, r);
    const float want[4] = {1.0f, 20.0f, 3.0f, 40.0f};
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(fl_tensor_f32(r[0])[i], want[i], 0);
        CHECK_NEAR(fl_tensor_f32(r[1])[i], (float)cv[i], 0);       /* x@GRAD: 1 where taken */
        CHECK_NEAR(fl_tensor_f32(r[2])[i], (float)(1 - cv[i]), 0); /* y@GRAD: the others */
    }
    fl_exe_free(e);
    fl_tensor_free(ct);
    free(pairs);
    fl_prog_free(p);
}

TEST(where_errors_name_the_inputs)
{
    fl_prog *p = fl_prog_create();
    fl_var *c = fl_layer_data(p, "cond", 1, (const int64_t[]){3}, FL_INT32, 0);
    fl_var *x = fl_layer_data(p, "xa", 1, (const int64_t[]){4}, FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "yb", 1, (const int64_t[]){4}, FL_FLOAT32, 0);
    CHECK(fl_layer_where(c, x, y) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "where");
    CHECK_STR_HAS(fl_prog_error(p), "'cond'");
    CHECK_STR_HAS(fl_prog_error(p), "do not broadcast");
    fl_prog_free(p);
    p = fl_prog_create();
    c = fl_layer_data(p, "cond", 1, (const int64_t[]){4}, FL_INT32, 0);
    x = fl_layer_data(p, "xa", 1, (const int64_t[]){4}, FL_FLOAT32, 0);
    y = fl_layer_data(p, "yb", 1, (const int64_t[]){4}, FL_INT64, 0);
    CHECK(fl_layer_where(c, x, y) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "one dtype");
    fl_prog_free(p);
}

/* fl_init_assign: the parameter holds the values after the startup program; a size that is
 * not the parameter's, or a value set of another program, is an error naming it. */
TEST(assign_initializer_sets_the_parameter)
{
    fl_prog *p = fl_prog_create();
    const float v[6] = {0.5f, -1.0f, 2.0f, 3.5f, -4.0f, 6.25f};
    fl_param_attr a;
    memset(&a, 0, sizeof a);
    a.name = "w_given";
    CHECK_OK(fl_init_assign(p, v, 6, &a.init));
    fl_var *w = fl_layer_create_parameter(p, 2, (const int64_t[]){2, 3}, FL_FLOAT32, &a);
    CHECK(w);
    fl_tensor *r;
    const char *f[1] = {"w_given"};
    fl_exe *e = gc_run_once(p, NULL, 0, f, 1, &r);
    for (int i = 0; i < 6; i++) CHECK_NEAR(fl_tensor_f32(r)[i], v[i], 0);
    fl_exe_free(e);
    a.name = "w_wrong";
    CHECK_OK(fl_init_assign(p, v, 5, &a.init));
    CHECK(fl_layer_create_parameter(p, 2, (const int64_t[]){2, 3}, FL_FLOAT32, &a) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "'w_wrong'");
    CHECK_STR_HAS(fl_prog_error(p), "6 elements, its assigned initial values 5");
    fl_prog *q = fl_prog_create();
    a.name = "w_other";
    CHECK_OK(fl_init_assign(q, v, 6, &a.init));
    fl_prog_free(p);
    p = fl_prog_create();
    CHECK(fl_layer_create_parameter(p, 2, (const int64_t[]){2, 3}, FL_FLOAT32, &a) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "'w_other'");
    fl_prog_free(p);
    fl_prog_free(q);
    CHECK(fl_init_assign(NULL, v, 6, &a.init) == FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "fl_init_assign");
    p = fl_prog_create();
    CHECK(fl_init_assign(p, v, 0, &a.init) == FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "1 to 2^24");
    a.name = "w_failed";
    CHECK(fl_layer_create_parameter(p, 1, (const int64_t[]){6}, FL_FLOAT32, &a) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "'w_failed'");
    fl_prog_free(p);
}

TEST_MAIN(T(grad_elementwise_two_way_broadcast), T(grad_elementwise_max_min), T(max_min_forward_broadcasts_both_ways),
          T(comparisons_and_logical_ops_match_loops), T(broadcast_errors_name_the_inputs), T(grad_l2_normalize),
          T(l2_normalize_rows_have_unit_norm), T(grad_topk_and_its_indices), T(fill_constant_values_and_dtypes),
          T(lr_schedules_follow_their_formulas), T(rmsprop_matches_its_reference), T(l1_decay_adds_coeff_times_sign),
          T(grad_sqrt_abs_exp_log), T(shape_assign_value_and_global_var), T(float64_accuracy_chain_of_simnet_bow),
          T(grad_where_broadcasts_three_ways), T(where_keeps_the_unused_branch_out), T(where_errors_name_the_inputs),
          T(assign_initializer_sets_the_parameter))
