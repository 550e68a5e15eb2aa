/* test_ops_nn.c - forward values and error messages of the ops in ops_nn.c: elementwise_*
 * (Paddle broadcasting), scale, dropout (statistics, steps, seeds, is_test via clone),
 * reduce_sum and cos_sim. */
#include "testhelp.h"

#include "graph/graph_internal.h" /* only to flip dropout's fix_seed attribute */

static fl_tensor *fetch1(fl_exe *e, fl_prog *p, const fl_feed *feed, int nfeed, fl_var *v)
{
    CHECK(v != NULL);
    const char *f[1] = {fl_var_name(v)};
    fl_tensor *out = NULL;
    CHECK_OK(fl_exe_run(e, p, feed, nfeed, f, 1, &out));
    return out;
}

static void expect_t(fl_tensor *t, int ndim, const int64_t *shape, const float *want, double tol)
{
    CHECK(t != NULL);
    CHECK_EQ_INT(fl_tensor_ndim(t), ndim);
    for (int i = 0; i < ndim; i++) CHECK_EQ_INT(fl_tensor_dim(t, i), shape[i]);
    const float *d = fl_tensor_f32(t);
    for (int64_t i = 0; i < fl_tensor_numel(t); i++) CHECK_NEAR(d[i], want[i], tol);
}
#define EXPECT(t, nd, shape, ...) expect_t((t), nd, shape, (const float[]){__VA_ARGS__}, 1e-6)

typedef fl_var *(*ew_fn)(fl_var *, fl_var *, int);

/* x (fed, shape xs) op y (fed, shape ys) must give `want` with x's shape. */
static void ew_case(ew_fn fn, int axis, int xn, const int64_t *xs, const float *xd, int yn, const int64_t *ys,
                    const float *yd, const float *want)
{
    fl_prog *p = fl_prog_create();
    /* data layers prepend -1: give them the dims after the first */
    fl_var *x = fl_layer_data(p, "x", xn - 1, xs + 1, FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", yn - 1, ys + 1, FL_FLOAT32, 0);
    fl_var *o = fn(x, y, axis);
    fl_tensor *xt = th_f32(xn, xs, xd), *yt = th_f32(yn, ys, yd);
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    fl_exe *e = fl_exe_create(NULL);
    expect_t(fetch1(e, p, feed, 2, o), xn, xs, want, 1e-6);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}
#define EW(fn, axis, xs, xd, ys, yd, ...)                                                               \
    ew_case(fn, axis, (int)(sizeof xs / sizeof xs[0]), xs, xd, (int)(sizeof ys / sizeof ys[0]), ys, yd, \
            (const float[]){__VA_ARGS__})

static const float X23[] = {1, 2, 3, 4, 5, 6};

TEST(ew_rows_all_ops)
{
    const int64_t xs[] = {2, 3}, ys[] = {3};
    const float y[] = {10, 20, 30};
    EW(fl_layer_elementwise_add, -1, xs, X23, ys, y, 11, 22, 33, 14, 25, 36);
    EW(fl_layer_elementwise_sub, -1, xs, X23, ys, y, -9, -18, -27, -6, -15, -24);
    EW(fl_layer_elementwise_mul, 1, xs, X23, ys, y, 10, 40, 90, 40, 100, 180);
    EW(fl_layer_elementwise_div, -1, xs, X23, ys, y, 0.1f, 0.1f, 0.1f, 0.4f, 0.25f, 0.2f);
}

TEST(ew_same_shape)
{
    const int64_t xs[] = {2, 3};
    const float y[] = {6, 5, 4, 3, 2, 1};
    EW(fl_layer_elementwise_add, -1, xs, X23, xs, y, 7, 7, 7, 7, 7, 7);
    EW(fl_layer_elementwise_div, -1, xs, X23, xs, y, 1 / 6.0f, 0.4f, 0.75f, 4 / 3.0f, 2.5f, 6);
}

TEST(ew_middle_axis)
{
    const int64_t xs[] = {2, 3, 2}, ys[] = {3};
    const float x[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, y[] = {1, 2, 3};
    EW(fl_layer_elementwise_add, 1, xs, x, ys, y, 2, 3, 5, 6, 8, 9, 8, 9, 11, 12, 14, 15);
    EW(fl_layer_elementwise_mul, 1, xs, x, ys, y, 1, 2, 6, 8, 15, 18, 7, 8, 18, 20, 33, 36);
    /* y [2, 3] at axis 0 of [2, 3, 2] */
    const int64_t y2s[] = {2, 3};
    EW(fl_layer_elementwise_sub, 0, xs, x, y2s, X23, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6);
}

/* y [M, 1] with x [M, N]: trailing 1 trimmed, y is a column broadcast along rows. */
TEST(ew_trailing_one_trimmed)
{
    const int64_t xs[] = {2, 3}, ys[] = {2, 1};
    const float y[] = {10, 100};
    EW(fl_layer_elementwise_sub, -1, xs, X23, ys, y, -9, -8, -7, -96, -95, -94);
}

TEST(ew_scalar_y)
{
    const int64_t xs[] = {2, 3}, ys[] = {1};
    const float y[] = {2};
    EW(fl_layer_elementwise_mul, -1, xs, X23, ys, y, 2, 4, 6, 8, 10, 12);
    EW(fl_layer_elementwise_div, -1, xs, X23, ys, y, 0.5f, 1, 1.5f, 2, 2.5f, 3);
    EW(fl_layer_elementwise_add, 0, xs, X23, ys, y, 3, 4, 5, 6, 7, 8);
}

TEST(ew_names_and_shapes)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 1);
    fl_var *o = fl_layer_elementwise_add(x, x, -1);
    CHECK(o != NULL);
    CHECK(!strcmp(fl_var_name(o), "elementwise_add_0.tmp_0"));
    CHECK_EQ_INT(fl_var_ndim(o), 2);
    CHECK_EQ_INT(fl_var_shape(o)[0], -1);
    CHECK_EQ_INT(fl_var_shape(o)[1], 3);
    CHECK_EQ_INT(fl_var_lod_level(o), 1);
    CHECK(!strcmp(fl_prog_op_type(p, fl_prog_num_ops(p) - 1), "elementwise_add"));
    fl_prog_free(p);
}

/* [-1, 3] + [4]: the build fails, naming the op, both variables and their shapes. */
TEST(ew_build_mismatch_error)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_param_attr a = {.name = "y"};
    fl_var *y = fl_layer_create_parameter(p, FL_SHAPE(4), FL_FLOAT32, &a);
    CHECK(fl_layer_elementwise_add(x, y, -1) == NULL);
    CHECK_EQ_INT(fl_prog_status(p), FL_EINVAL);
    const char *m = fl_prog_error(p);
    CHECK_STR_HAS(m, "elementwise_add");
    CHECK_STR_HAS(m, "'x' [-1, 3]");
    CHECK_STR_HAS(m, "'y' [4]");
    CHECK_STR_HAS(fl_last_error(), "elementwise_add");
    /* sticky: later layers return NULL and keep the first error */
    CHECK(fl_layer_scale(x, 2, 0, 1) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "elementwise_add");
    fl_prog_free(p);
}

TEST(ew_build_rank_and_axis_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_param_attr a = {.name = "big"};
    /* a Y of higher rank broadcasts both ways (Paddle 2.x) when its dims fit; these do not */
    fl_var *y = fl_layer_create_parameter(p, FL_SHAPE(2, 2, 5), FL_FLOAT32, &a);
    CHECK(fl_layer_elementwise_mul(x, y, -1) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "elementwise_mul");
    CHECK_STR_HAS(fl_prog_error(p), "'big' [2, 2, 5]");
    fl_prog_free(p);

    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    a.name = "b";
    y = fl_layer_create_parameter(p, FL_SHAPE(3), FL_FLOAT32, &a);
    CHECK(fl_layer_elementwise_div(x, y, 5) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "elementwise_div");
    CHECK_STR_HAS(fl_prog_error(p), "axis 5");
    fl_prog_free(p);

    p = fl_prog_create();
    fl_var *i = fl_layer_data(p, "ids", FL_SHAPE(3), FL_INT64, 0);
    x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    CHECK(fl_layer_elementwise_sub(i, x, -1) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "'ids' must be float32");
    fl_prog_free(p);
}

/* Dims unknown at build are checked at run time, naming the op and both variables. */
TEST(ew_runtime_mismatch_error)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", 0, NULL, FL_FLOAT32, 0);
    fl_var *o = fl_layer_elementwise_add(x, y, -1);
    CHECK(o != NULL);
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 3}, X23), *yt = th_f32(1, (const int64_t[]){4}, X23);
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    fl_exe *e = fl_exe_create(NULL);
    const char *f[1] = {fl_var_name(o)};
    fl_tensor *out;
    CHECK_FAILS(fl_exe_run(e, p, feed, 2, f, 1, &out), FL_EINVAL, "elementwise_add");
    CHECK_STR_HAS(fl_last_error(), "'y'");
    CHECK_STR_HAS(fl_last_error(), "'x'");
    CHECK_STR_HAS(fl_last_error(), "[4]");
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

/* ---- scale ---- */

TEST(scale_values)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *a = fl_layer_scale(x, 2.0f, 1.0f, 1), *b = fl_layer_scale(x, 2.0f, 1.0f, 0);
    CHECK(!strcmp(fl_var_name(a), "scale_0.tmp_0"));
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 3}, X23);
    fl_feed feed[] = {{"x", xt}};
    fl_exe *e = fl_exe_create(NULL);
    const int64_t s[] = {2, 3};
    EXPECT(fetch1(e, p, feed, 1, a), 2, s, 3, 5, 7, 9, 11, 13);
    EXPECT(fetch1(e, p, feed, 1, b), 2, s, 4, 6, 8, 10, 12, 14);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

/* As Paddle's scale, a SelectedRows input keeps its rows. */
TEST(scale_selected_rows)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *a = fl_layer_scale(x, -1.0f, 0.5f, 1);
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 3}, X23);
    CHECK_OK(fl_tensor_set_rows(xt, (const int64_t[]){4, 1}, 2, 6));
    fl_feed feed[] = {{"x", xt}};
    fl_exe *e = fl_exe_create(NULL);
    fl_tensor *o = fetch1(e, p, feed, 1, a);
    const int64_t s[] = {2, 3};
    EXPECT(o, 2, s, -0.5f, -1.5f, -2.5f, -3.5f, -4.5f, -5.5f);
    int64_t nr, h;
    const int64_t *rows = fl_tensor_rows(o, &nr, &h);
    CHECK(rows != NULL);
    CHECK_EQ_INT(nr, 2);
    CHECK_EQ_INT(h, 6);
    CHECK_EQ_INT(rows[0], 4);
    CHECK_EQ_INT(rows[1], 1);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

/* ---- dropout ---- */

#define DN 400
#define DW 250 /* 100000 elements */

typedef struct {
    fl_prog *p;
    fl_var *out, *mask;
    fl_tensor *xt;
} drop_case;

static drop_case drop_build(float prob, const char *impl)
{
    drop_case d;
    d.p = fl_prog_create();
    fl_var *x = fl_layer_data(d.p, "x", FL_SHAPE(DW), FL_FLOAT32, 0);
    d.out = fl_layer_dropout(x, prob, impl);
    CHECK(d.out != NULL);
    CHECK(!strcmp(fl_var_name(d.out), "dropout_0.tmp_0"));
    d.mask = fl_prog_var(d.p, "dropout_0.tmp_1");
    CHECK(d.mask != NULL);
    CHECK_EQ_INT(fl_var_dtype(d.mask), FL_UINT8);
    float *ones = malloc(sizeof(float) * DN * DW);
    for (int i = 0; i < DN * DW; i++) ones[i] = 1.0f + (float)(i % 7);
    d.xt = th_f32(2, (const int64_t[]){DN, DW}, ones);
    free(ones);
    return d;
}

static void drop_free(drop_case *d)
{
    fl_tensor_free(d->xt);
    fl_prog_free(d->p);
}

/* Runs d's program (or `p`) once in e; copies Out and Mask into out/mask (may be NULL). */
static void drop_run(fl_exe *e, fl_prog *p, drop_case *d, float *out, uint8_t *mask)
{
    fl_feed feed[] = {{"x", d->xt}};
    const char *f[2] = {fl_var_name(d->out), fl_var_name(d->mask)};
    fl_tensor *r[2];
    CHECK_OK(fl_exe_run(e, p, feed, 1, f, mask ? 2 : 1, r));
    CHECK_EQ_INT(fl_tensor_numel(r[0]), DN * DW);
    if (out) memcpy(out, fl_tensor_f32(r[0]), sizeof(float) * DN * DW);
    if (mask) {
        CHECK_EQ_INT(fl_tensor_numel(r[1]), DN * DW);
        CHECK_EQ_INT(fl_tensor_dtype(r[1]), FL_UINT8); /* Paddle 2.x's mask dtype, 1 byte */
        memcpy(mask, fl_tensor_cdata(r[1]), DN * DW);
    }
}

static void drop_stats(const char *impl, float prob, float keep_scale)
{
    drop_case d = drop_build(prob, impl);
    float *out = malloc(sizeof(float) * DN * DW);
    uint8_t *mask = malloc(DN * DW);
    fl_exe *e = fl_exe_create(NULL);
    drop_run(e, d.p, &d, out, mask);
    const float *x = fl_tensor_f32(d.xt);
    int64_t kept = 0;
    for (int i = 0; i < DN * DW; i++) {
        CHECK(mask[i] == 0 || mask[i] == 1);
        kept += mask[i] == 1;
        CHECK_NEAR(out[i], mask[i] * x[i] * keep_scale, 1e-5);
    }
    /* binomial: std of the kept fraction is sqrt(p(1-p)/n) < 0.0016; allow 0.01 */
    CHECK_NEAR((double)kept / (DN * DW), 1.0 - prob, 0.01);
    fl_exe_free(e);
    free(out);
    free(mask);
    drop_free(&d);
}

TEST(dropout_downgrade_stats) { drop_stats("downgrade_in_infer", 0.3f, 1.0f); }
TEST(dropout_upscale_stats) { drop_stats("upscale_in_train", 0.3f, 1.0f / 0.7f); }
TEST(dropout_default_impl_high_prob) { drop_stats(NULL, 0.8f, 1.0f); }

/* The mask repeats for the same (program seed, output name, step), changes every step and
 * with the program seed. */
TEST(dropout_mask_steps_and_seeds)
{
    drop_case d = drop_build(0.5f, "upscale_in_train");
    size_t nb = DN * DW;
    uint8_t *m0 = malloc(nb), *m1 = malloc(nb), *m2 = malloc(nb);
    fl_exe *e = fl_exe_create(NULL);
    drop_run(e, d.p, &d, NULL, m0);
    drop_run(e, d.p, &d, NULL, m1);
    CHECK(memcmp(m0, m1, nb) != 0);
    fl_exe *e2 = fl_exe_create(NULL);
    drop_run(e2, d.p, &d, NULL, m2);
    CHECK(memcmp(m0, m2, nb) == 0);
    drop_run(e2, d.p, &d, NULL, m2);
    CHECK(memcmp(m1, m2, nb) == 0);
    fl_exe_free(e2);
    fl_prog_set_seed(d.p, 7);
    e2 = fl_exe_create(NULL);
    drop_run(e2, d.p, &d, NULL, m2);
    CHECK(memcmp(m0, m2, nb) != 0);
    fl_exe_free(e2);
    fl_exe_free(e);
    free(m0);
    free(m1);
    free(m2);
    drop_free(&d);
}

/* fix_seed (Paddle attribute; no layer argument sets it): the mask comes from `seed`
 * alone and repeats every step. */
TEST(dropout_fix_seed)
{
    drop_case d = drop_build(0.5f, NULL);
    fl_op *op = NULL;
    for (int i = 0; i < d.p->nops; i++)
        if (!strcmp(d.p->ops[i]->def->type, "dropout")) op = d.p->ops[i];
    CHECK(op != NULL);
    CHECK_EQ_INT(fl__attr_i(op, "fix_seed", -1), 0);
    CHECK_EQ_INT(fl__attr_i(op, "is_test", -1), 0);
    CHECK_OK(fl__attr_set_i(op, "fix_seed", 1));
    CHECK_OK(fl__attr_set_i(op, "seed", 42));
    size_t nb = DN * DW;
    uint8_t *m0 = malloc(nb), *m1 = malloc(nb);
    fl_exe *e = fl_exe_create(NULL);
    drop_run(e, d.p, &d, NULL, m0);
    drop_run(e, d.p, &d, NULL, m1);
    CHECK(memcmp(m0, m1, nb) == 0);
    CHECK_OK(fl__attr_set_i(op, "seed", 43));
    fl_exe_free(e);
    e = fl_exe_create(NULL);
    drop_run(e, d.p, &d, NULL, m1);
    CHECK(memcmp(m0, m1, nb) != 0);
    fl_exe_free(e);
    free(m0);
    free(m1);
    drop_free(&d);
}

/* clone(for_test) sets is_test = 1: downgrade_in_infer scales by 1-p, upscale_in_train is
 * the identity. */
static void drop_test_mode(const char *impl, float prob, float factor)
{
    drop_case d = drop_build(prob, impl);
    fl_prog *t = fl_prog_clone(d.p, 1);
    CHECK(t != NULL);
    float *out = malloc(sizeof(float) * DN * DW);
    fl_exe *e = fl_exe_create(NULL);
    drop_run(e, t, &d, out, NULL);
    const float *x = fl_tensor_f32(d.xt);
    for (int i = 0; i < DN * DW; i++) CHECK_NEAR(out[i], x[i] * factor, 1e-6 * x[i]);
    /* the original program still drops */
    drop_run(e, d.p, &d, out, NULL);
    int zeros = 0;
    for (int i = 0; i < DN * DW; i++) zeros += out[i] == 0.0f;
    CHECK(zeros > DN * DW / 10);
    fl_exe_free(e);
    free(out);
    fl_prog_free(t);
    drop_free(&d);
}

TEST(dropout_is_test_downgrade) { drop_test_mode("downgrade_in_infer", 0.25f, 0.75f); }
TEST(dropout_is_test_upscale) { drop_test_mode("upscale_in_train", 0.25f, 1.0f); }

TEST(dropout_prob_zero_and_one)
{
    const char *impls[2] = {"downgrade_in_infer", "upscale_in_train"};
    float *out = malloc(sizeof(float) * DN * DW);
    for (int k = 0; k < 2; k++) {
        drop_case d = drop_build(0.0f, impls[k]);
        fl_exe *e = fl_exe_create(NULL);
        drop_run(e, d.p, &d, out, NULL);
        CHECK(memcmp(out, fl_tensor_f32(d.xt), sizeof(float) * DN * DW) == 0);
        fl_exe_free(e);
        drop_free(&d);
        d = drop_build(1.0f, impls[k]);
        e = fl_exe_create(NULL);
        drop_run(e, d.p, &d, out, NULL);
        for (int i = 0; i < DN * DW; i++) CHECK(out[i] == 0.0f);
        fl_exe_free(e);
        drop_free(&d);
    }
    free(out);
}

TEST(dropout_bad_attributes)
{
    const float bad[] = {1.5f, -0.1f, NAN};
    for (int i = 0; i < 3; i++) {
        fl_prog *p = fl_prog_create();
        fl_var *x = fl_layer_data(p, "feat", FL_SHAPE(4), FL_FLOAT32, 0);
        CHECK(fl_layer_dropout(x, bad[i], NULL) == NULL);
        CHECK_EQ_INT(fl_prog_status(p), FL_EINVAL);
        CHECK_STR_HAS(fl_prog_error(p), "dropout");
        CHECK_STR_HAS(fl_prog_error(p), "dropout_prob");
        CHECK_STR_HAS(fl_prog_error(p), "'feat'");
        fl_prog_free(p);
    }
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "feat", FL_SHAPE(4), FL_FLOAT32, 0);
    CHECK(fl_layer_dropout(x, 0.5f, "upscale_in_infer") == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "dropout_implementation 'upscale_in_infer'");
    fl_prog_free(p);
}

/* dropout_grad reads a uint8 Mask; a float32 one (the layout before uint8, or a hand-made
 * program) is refused with the variable's name. */
TEST(dropout_grad_needs_uint8_mask)
{
    fl_prog *p = fl_prog_create();
    fl_var *m = fl_layer_data(p, "m", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *g = fl_layer_data(p, "g", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *dx = fl__tmp_var(p, "dx", FL_FLOAT32, 2, (const int64_t[]){-1, 3});
    CHECK(m && g && dx);
    fl_io in[2] = {FL_IO1("Mask", m), FL_IO1("Out@GRAD", g)}, out = FL_IO1("X@GRAD", dx);
    fl_op *op = fl__op_new(p, "dropout_grad", in, 2, &out, 1);
    CHECK(op != NULL);
    CHECK_OK(fl__attr_set_f(op, "dropout_prob", 0.5));
    CHECK_OK(fl__op_finish(op));
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 3}, X23);
    fl_feed feed[] = {{"m", xt}, {"g", xt}};
    const char *f[1] = {fl_var_name(dx)};
    fl_tensor *r = NULL;
    fl_exe *e = fl_exe_create(NULL);
    CHECK_FAILS(fl_exe_run(e, p, feed, 2, f, 1, &r), FL_EINVAL, "Mask 'm' must be a dense uint8 tensor");
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

/* ---- sum: one to three dense inputs, the first two added in one pass ---- */

static void sum_case(int n)
{
    fl_prog *p = fl_prog_create();
    fl_var *x[3], *o = fl__tmp_var(p, "o", FL_FLOAT32, 2, (const int64_t[]){-1, 3});
    static const char *const names[3] = {"a", "b", "c"};
    for (int i = 0; i < n; i++) x[i] = fl_layer_data(p, names[i], FL_SHAPE(3), FL_FLOAT32, 0);
    fl_io in = {"X", x, n}, out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "sum", &in, 1, &out, 1);
    CHECK(op != NULL);
    CHECK_OK(fl__op_finish(op));
    fl_tensor *t[3];
    fl_feed feed[3];
    for (int i = 0; i < n; i++) {
        float v[6];
        for (int k = 0; k < 6; k++) v[k] = (float)((i + 1) * 10 + k);
        t[i] = th_f32(2, (const int64_t[]){2, 3}, v);
        feed[i] = (fl_feed){names[i], t[i]};
    }
    const char *f[1] = {fl_var_name(o)};
    fl_tensor *r = NULL;
    fl_exe *e = fl_exe_create(NULL);
    for (int run = 0; run < 2; run++) { /* the second run writes the output buffer of the first */
        CHECK_OK(fl_exe_run(e, p, feed, n, f, 1, &r));
        CHECK_EQ_INT((int)r->numel, 6);
        for (int k = 0; k < 6; k++) {
            float want = 0;
            for (int i = 0; i < n; i++) want += (float)((i + 1) * 10 + k);
            CHECK_NEAR(((float *)r->data)[k], want, 0);
        }
    }
    fl_exe_free(e);
    for (int i = 0; i < n; i++) fl_tensor_free(t[i]);
    fl_prog_free(p);
}

TEST(sum_one_two_three_inputs)
{
    for (int n = 1; n <= 3; n++) sum_case(n);
}

/* ---- reduce_sum ---- */

static void reduce_case(const int *dims, int nd, int keep, int on, const int64_t *os, const float *want)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *o = fl_layer_reduce_sum(x, dims, nd, keep);
    CHECK(o != NULL);
    CHECK_EQ_INT(fl_var_ndim(o), on);
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 3}, X23);
    fl_feed feed[] = {{"x", xt}};
    fl_exe *e = fl_exe_create(NULL);
    expect_t(fetch1(e, p, feed, 1, o), on, os, want, 1e-6);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

TEST(reduce_sum_small)
{
    reduce_case((const int[]){0}, 1, 0, 1, (const int64_t[]){3}, (const float[]){5, 7, 9});
    reduce_case((const int[]){1}, 1, 0, 1, (const int64_t[]){2}, (const float[]){6, 15});
    reduce_case((const int[]){-1}, 1, 1, 2, (const int64_t[]){2, 1}, (const float[]){6, 15});
    reduce_case((const int[]){-2}, 1, 1, 2, (const int64_t[]){1, 3}, (const float[]){5, 7, 9});
    reduce_case(NULL, 0, 0, 1, (const int64_t[]){1}, (const float[]){21});
    reduce_case(NULL, 0, 1, 2, (const int64_t[]){1, 1}, (const float[]){21});
    reduce_case((const int[]){1, 0}, 2, 0, 1, (const int64_t[]){1}, (const float[]){21});
}

/* Every subset of dims of a [2, 1, 3, 4] tensor (size-1 dim included), keep_dim 0 and 1,
 * against a brute-force sum. */
TEST(reduce_sum_all_subsets)
{
    const int64_t xs[4] = {2, 1, 3, 4};
    float xd[24];
    th_fill_uniform(xd, 24, -1, 1, 3);
    fl_tensor *xt = th_f32(4, xs, xd);
    for (int mask = 1; mask < 16; mask++)
        for (int keep = 0; keep < 2; keep++) {
            int dims[4], nd = 0;
            for (int d = 0; d < 4; d++)
                if (mask & (1 << d)) dims[nd++] = d - (d % 2) * 4; /* mix in negative dims */
            fl_prog *p = fl_prog_create();
            fl_var *x = fl_layer_data(p, "x", 3, xs + 1, FL_FLOAT32, 0);
            fl_var *o = fl_layer_reduce_sum(x, dims, nd, keep);
            fl_feed feed[] = {{"x", xt}};
            fl_exe *e = fl_exe_create(NULL);
            fl_tensor *t = fetch1(e, p, feed, 1, o);
            int64_t os[4], on = 0, ostr[4], s = 1;
            for (int d = 0; d < 4; d++)
                if (!(mask & (1 << d)) || keep) os[on++] = (mask & (1 << d)) ? 1 : xs[d];
            if (on == 0) os[on++] = 1;
            for (int d = 3; d >= 0; d--) {
                ostr[d] = (mask & (1 << d)) ? 0 : s;
                if (!(mask & (1 << d))) s *= xs[d];
            }
            float want[24] = {0};
            for (int i = 0, a = 0; a < 2; a++)
                for (int b = 0; b < 1; b++)
                    for (int c = 0; c < 3; c++)
                        for (int dd = 0; dd < 4; dd++, i++)
                            want[a * ostr[0] + b * ostr[1] + c * ostr[2] + dd * ostr[3]] += xd[i];
            expect_t(t, (int)on, os, want, 1e-5);
            fl_exe_free(e);
            fl_prog_free(p);
        }
    fl_tensor_free(xt);
}

TEST(reduce_sum_lod_and_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "seq", FL_SHAPE(3), FL_FLOAT32, 1);
    fl_var *o = fl_layer_reduce_sum(x, (const int[]){1}, 1, 0);
    CHECK(!strcmp(fl_var_name(o), "reduce_sum_0.tmp_0"));
    CHECK_EQ_INT(fl_var_lod_level(o), 1);
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 3}, X23);
    CHECK_OK(fl_tensor_set_lod(xt, (const int64_t[]){0, 1, 2}, 3));
    fl_feed feed[] = {{"seq", xt}};
    fl_exe *e = fl_exe_create(NULL);
    int64_t n;
    CHECK(fl_tensor_lod(fetch1(e, p, feed, 1, o), &n) != NULL);
    CHECK_EQ_INT(n, 3);
    fl_exe_free(e);
    fl_tensor_free(xt);
    CHECK(fl_layer_reduce_sum(x, (const int[]){2}, 1, 0) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "reduce_sum");
    CHECK_STR_HAS(fl_prog_error(p), "'seq' [-1, 3]");
    fl_prog_free(p);
    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    CHECK(fl_layer_reduce_sum(x, (const int[]){1, -1}, 2, 0) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "repeated");
    fl_prog_free(p);
}

/* ---- cos_sim ---- */

TEST(cos_sim_values)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(2), FL_FLOAT32, 0);
    fl_var *o = fl_layer_cos_sim(x, y);
    CHECK(!strcmp(fl_var_name(o), "cos_sim_0.tmp_0"));
    CHECK_EQ_INT(fl_var_ndim(o), 2);
    CHECK_EQ_INT(fl_var_shape(o)[1], 1);
    fl_tensor *xt = th_f32(2, (const int64_t[]){3, 2}, (const float[]){1, 0, 3, 4, 0, 0});
    fl_tensor *yt = th_f32(2, (const int64_t[]){3, 2}, (const float[]){2, 0, 4, 3, 1, 1});
    fl_tensor *y1 = th_f32(2, (const int64_t[]){1, 2}, (const float[]){0, 2});
    fl_exe *e = fl_exe_create(NULL);
    const int64_t s31[] = {3, 1}, s11[] = {1, 1};
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    EXPECT(fetch1(e, p, feed, 2, o), 2, s31, 1, 0.96f, 0); /* a zero row gives 0 */
    EXPECT(fetch1(e, p, feed, 2, fl_prog_var(p, "cos_sim_0.tmp_1")), 2, s31, 1, 5, 0);
    EXPECT(fetch1(e, p, feed, 2, fl_prog_var(p, "cos_sim_0.tmp_2")), 2, s31, 2, 5, sqrtf(2));
    fl_feed feed1[] = {{"x", xt}, {"y", y1}}; /* one row of Y is broadcast */
    EXPECT(fetch1(e, p, feed1, 2, o), 2, s31, 0, 0.8f, 0);
    EXPECT(fetch1(e, p, feed1, 2, fl_prog_var(p, "cos_sim_0.tmp_2")), 2, s11, 2);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_tensor_free(y1);
    fl_prog_free(p);
}

TEST(cos_sim_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "q", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "d", FL_SHAPE(4), FL_FLOAT32, 0);
    CHECK(fl_layer_cos_sim(x, y) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "cos_sim");
    CHECK_STR_HAS(fl_prog_error(p), "'q' [-1, 3]");
    CHECK_STR_HAS(fl_prog_error(p), "'d' [-1, 4]");
    fl_prog_free(p);
    /* rows of Y must be N or 1 at run time */
    p = fl_prog_create();
    x = fl_layer_data(p, "q", FL_SHAPE(2), FL_FLOAT32, 0);
    y = fl_layer_data(p, "d", FL_SHAPE(2), FL_FLOAT32, 0);
    fl_var *o = fl_layer_cos_sim(x, y);
    fl_tensor *xt = th_f32(2, (const int64_t[]){3, 2}, X23), *yt = th_f32(2, (const int64_t[]){2, 2}, X23);
    fl_feed feed[] = {{"q", xt}, {"d", yt}};
    fl_exe *e = fl_exe_create(NULL);
    const char *f[1] = {fl_var_name(o)};
    fl_tensor *out;
    CHECK_FAILS(fl_exe_run(e, p, feed, 2, f, 1, &out), FL_EINVAL, "cos_sim");
    CHECK_STR_HAS(fl_last_error(), "'d'");
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

TEST_MAIN(T(ew_rows_all_ops), T(ew_same_shape), T(ew_middle_axis), T(ew_trailing_one_trimmed), T(ew_scalar_y),
          T(ew_names_and_shapes), T(ew_build_mismatch_error), T(ew_build_rank_and_axis_errors),
          T(ew_runtime_mismatch_error), T(scale_values), T(scale_selected_rows), T(dropout_downgrade_stats),
          T(dropout_upscale_stats), T(dropout_default_impl_high_prob), T(dropout_mask_steps_and_seeds), T(dropout_fix_seed),
          T(dropout_is_test_downgrade), T(dropout_is_test_upscale), T(dropout_prob_zero_and_one), T(dropout_bad_attributes),
          T(dropout_grad_needs_uint8_mask), T(sum_one_two_three_inputs), T(reduce_sum_small), T(reduce_sum_all_subsets),
          T(reduce_sum_lod_and_errors), T(cos_sim_values), T(cos_sim_errors))
