/* test_grad_loss.c - the losses of ops_loss.c: finite-difference gradient checks
 * (gradcheck.h tolerances unless stated), forward values against hand-computed numbers,
 * and build/run-time error texts. */
#include "gradcheck.h"

static const gc_opts defaults = {0, 0, 0, 0};

/* ---- softmax_with_cross_entropy ----------------------------------------------------------- */

TEST(grad_softmax_with_cross_entropy)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(4, 5), -2, 2);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *loss = fl_layer_softmax_with_cross_entropy(a, y);
    CHECK(loss);
    CHECK_EQ_INT(fl_var_ndim(loss), 2);
    CHECK_EQ_INT(fl_var_shape(loss)[1], 1);
    fl_tensor *yt = th_i64(2, (const int64_t[]){4, 1}, (const int64_t[]){0, 4, 2, 4});
    fl_feed feed[] = {{"y", yt}};
    gc_check(gc_loss(loss), feed, 1, NULL, defaults);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

/* Rank 3 logits: the class axis is the last one, labels [B, T, 1]. */
TEST(grad_softmax_with_cross_entropy_rank3)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(2, 3, 4), -2, 2);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(3, 1), FL_INT64, 0);
    fl_var *loss = fl_layer_softmax_with_cross_entropy(a, y);
    fl_tensor *yt = th_i64(3, (const int64_t[]){2, 3, 1}, (const int64_t[]){0, 3, 2, 1, 1, 0});
    fl_feed feed[] = {{"y", yt}};
    gc_check(fl_layer_mean(loss), feed, 1, NULL, defaults);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

TEST(softmax_with_cross_entropy_values)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *loss = fl_layer_softmax_with_cross_entropy(x, y);
    CHECK(loss);
    /* row 0: [1, 2, 3] label 2: log(e^1 + e^2 + e^3) - 3 = log(1 + e^-1 + e^-2) = 0.40760596
     * row 1: [0, 0, 0] label 1: log 3 = 1.0986123
     * row 2: [1000, 0, -1000] label 1: 1000 (no overflow)
     * row 3: [-5, 5, 0] label 0: 10 + log(1 + e^-10 + e^-5) = 10.0067604 */
    const float xv[] = {1, 2, 3, 0, 0, 0, 1000, 0, -1000, -5, 5, 0};
    fl_tensor *xt = th_f32(2, (const int64_t[]){4, 3}, xv);
    fl_tensor *yt = th_i64(2, (const int64_t[]){4, 1}, (const int64_t[]){2, 1, 1, 0});
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    char smname[256];
    snprintf(smname, sizeof smname, "%s", fl_var_name(fl_prog_var_at(p, fl_prog_num_vars(p) - 2)));
    const char *fetch[] = {fl_var_name(loss), smname};
    fl_tensor *out[2];
    fl_exe *e = gc_run_once(p, feed, 2, fetch, 2, out);
    CHECK_EQ_INT(fl_tensor_ndim(out[0]), 2);
    CHECK_EQ_INT(fl_tensor_dim(out[0], 0), 4);
    CHECK_EQ_INT(fl_tensor_dim(out[0], 1), 1);
    const float *l = fl_tensor_f32(out[0]), *s = fl_tensor_f32(out[1]);
    CHECK_NEAR(l[0], 0.40760596, 1e-5);
    CHECK_NEAR(l[1], 1.0986123, 1e-5);
    CHECK_NEAR(l[2], 1000.0, 1e-3);
    CHECK_NEAR(l[3], 10.0067604, 1e-4);
    for (int i = 0; i < 12; i++) CHECK(isfinite(s[i]));
    double z = 1 + exp(1.0) + exp(2.0);
    CHECK_NEAR(s[0], 1 / z, 1e-6);
    CHECK_NEAR(s[1], exp(1.0) / z, 1e-6);
    CHECK_NEAR(s[2], exp(2.0) / z, 1e-6);
    CHECK_NEAR(s[6], 1.0, 1e-6);
    CHECK_NEAR(s[8], 0.0, 1e-6);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

/* softmax_with_cross_entropy(x) == cross_entropy(softmax(x)) and its Softmax == softmax(x);
 * their gradients agree too. */
TEST(softmax_with_cross_entropy_matches_softmax_cross_entropy)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(6, 7), -3, 3);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *l1 = fl_layer_softmax_with_cross_entropy(x, y);
    char smname[256];
    snprintf(smname, sizeof smname, "%s", fl_var_name(fl_prog_var_at(p, fl_prog_num_vars(p) - 2)));
    fl_var *sm = fl_layer_softmax(x);
    fl_var *l2 = fl_layer_cross_entropy(sm, y);
    fl_var *total = fl_layer_mean(l1);
    CHECK(total && l2);
    CHECK_OK(fl_append_backward(total, NULL, 0, NULL, NULL));
    fl_tensor *yt = th_i64(2, (const int64_t[]){6, 1}, (const int64_t[]){0, 6, 3, 3, 1, 5});
    fl_feed feed[] = {{"y", yt}};
    const char *fetch[] = {fl_var_name(l1), fl_var_name(l2), smname, fl_var_name(sm), "x@GRAD", "x"};
    fl_tensor *out[6];
    fl_exe *e = gc_run_once(p, feed, 1, fetch, 6, out);
    for (int i = 0; i < 6; i++) {
        CHECK_NEAR(fl_tensor_f32(out[0])[i], fl_tensor_f32(out[1])[i], 2e-5);
        /* the gradient of mean(loss) is (softmax - onehot) / 6 */
        const int64_t lab = fl_tensor_i64(yt)[i];
        for (int j = 0; j < 7; j++) {
            float s1 = fl_tensor_f32(out[2])[i * 7 + j];
            CHECK_NEAR(s1, fl_tensor_f32(out[3])[i * 7 + j], 1e-6);
            CHECK_NEAR(fl_tensor_f32(out[4])[i * 7 + j], (s1 - (j == lab)) / 6.0, 1e-6);
        }
    }
    fl_exe_free(e);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

/* Paddle's default ignore_index -100: the row has loss 0 and no gradient. */
TEST(softmax_with_cross_entropy_ignore_index)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(3, 4), -1, 1);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *loss = fl_layer_softmax_with_cross_entropy(x, y);
    fl_var *total = fl_layer_mean(loss);
    CHECK(total);
    CHECK_OK(fl_append_backward(total, NULL, 0, NULL, NULL));
    fl_tensor *yt = th_i64(2, (const int64_t[]){3, 1}, (const int64_t[]){1, -100, 3});
    fl_feed feed[] = {{"y", yt}};
    const char *fetch[] = {fl_var_name(loss), "x@GRAD"};
    fl_tensor *out[2];
    fl_exe *e = gc_run_once(p, feed, 1, fetch, 2, out);
    CHECK(fl_tensor_f32(out[0])[0] > 0.0f);
    CHECK_EQ_INT(fl_tensor_f32(out[0])[1] == 0.0f, 1);
    CHECK(fl_tensor_f32(out[0])[2] > 0.0f);
    for (int j = 0; j < 4; j++) CHECK_EQ_INT(fl_tensor_f32(out[1])[4 + j] == 0.0f, 1);
    fl_exe_free(e);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

TEST(softmax_with_cross_entropy_label_out_of_range)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(5), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "lbl", FL_SHAPE(1), FL_INT64, 0);
    fl_var *loss = fl_layer_softmax_with_cross_entropy(x, y);
    CHECK(loss);
    float xv[15] = {0};
    fl_tensor *xt = th_f32(2, (const int64_t[]){3, 5}, xv);
    fl_tensor *yt = th_i64(2, (const int64_t[]){3, 1}, (const int64_t[]){0, 4, 7});
    fl_feed feed[] = {{"x", xt}, {"lbl", yt}};
    fl_exe *e = fl_exe_create(NULL);
    const char *fetch[] = {fl_var_name(loss)};
    fl_tensor *out;
    CHECK_FAILS(fl_exe_run(e, p, feed, 2, fetch, 1, &out), FL_EINVAL, "softmax_with_cross_entropy");
    CHECK_STR_HAS(fl_last_error(), "label 'lbl' value 7 at row 2");
    CHECK_STR_HAS(fl_last_error(), "[0, 5)");
    fl_tensor_i64(yt)[2] = -1;
    CHECK_FAILS(fl_exe_run(e, p, feed, 2, fetch, 1, &out), FL_EINVAL, "value -1 at row 2");
    fl_tensor_i64(yt)[2] = 4;
    CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 1, &out));
    CHECK_NEAR(fl_tensor_f32(out)[2], log(5.0), 1e-5);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

TEST(softmax_with_cross_entropy_build_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(5), FL_FLOAT32, 0);
    fl_var *yf = fl_layer_data(p, "yf", FL_SHAPE(1), FL_FLOAT32, 0);
    CHECK(fl_layer_softmax_with_cross_entropy(x, yf) == NULL);
    CHECK_EQ_INT(fl_prog_status(p), FL_EINVAL);
    CHECK_STR_HAS(fl_prog_error(p), "softmax_with_cross_entropy");
    CHECK_STR_HAS(fl_prog_error(p), "'yf'");
    CHECK_STR_HAS(fl_prog_error(p), "int64");
    fl_prog_free(p);

    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(5), FL_FLOAT32, 0);
    fl_var *y2 = fl_layer_data(p, "y2", FL_SHAPE(2), FL_INT64, 0);
    CHECK(fl_layer_softmax_with_cross_entropy(x, y2) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "softmax_with_cross_entropy");
    CHECK_STR_HAS(fl_prog_error(p), "'y2' [-1, 2]");
    fl_prog_free(p);

    p = fl_prog_create();
    fl_var *xi = fl_layer_data(p, "xi", FL_SHAPE(5), FL_INT64, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    CHECK(fl_layer_softmax_with_cross_entropy(xi, y) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "softmax_with_cross_entropy");
    CHECK_STR_HAS(fl_prog_error(p), "'xi'");
    fl_prog_free(p);
}

/* Only Loss is differentiable (Paddle): a gradient reaching Softmax is a build error. */
TEST(softmax_with_cross_entropy_softmax_not_differentiable)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(3, 4), -1, 1);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *loss = fl_layer_softmax_with_cross_entropy(x, y);
    fl_var *sm = fl_prog_var_at(p, fl_prog_num_vars(p) - 2);
    fl_var *total = fl_layer_mean(fl_layer_fc(FL_VARS(loss, sm), 1, NULL));
    CHECK(total);
    CHECK_FAILS(fl_append_backward(total, NULL, 0, NULL, NULL), FL_EINVAL, "'Softmax'");
    CHECK_STR_HAS(fl_prog_error(p), "softmax_with_cross_entropy: a gradient reaches output 'Softmax'");
    fl_prog_free(p);
}

/* ---- sigmoid_cross_entropy_with_logits --------------------------------------------------- */

TEST(grad_sigmoid_cross_entropy_with_logits)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(3, 4), -3, 3);
    fl_var *z = fl_layer_data(p, "z", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *out = fl_layer_sigmoid_cross_entropy_with_logits(a, z);
    CHECK(out);
    const float zv[12] = {0, 1, 0.3f, 1, 1, 0, 0.5f, 0, 0.9f, 1, 0, 0.1f};
    fl_tensor *zt = th_f32(2, (const int64_t[]){3, 4}, zv);
    fl_feed feed[] = {{"z", zt}};
    gc_check(gc_loss(out), feed, 1, NULL, defaults);
    fl_tensor_free(zt);
    fl_prog_free(p);
}

static double sce_ref(double x, double z) { return fmax(x, 0.0) - x * z + log1p(exp(-fabs(x))); }

TEST(sigmoid_cross_entropy_with_logits_values)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *z = fl_layer_data(p, "z", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *out = fl_layer_sigmoid_cross_entropy_with_logits(x, z);
    CHECK(out);
    const float xv[8] = {-2, 0, 3, 50, -50, 0.001f, -20, 20};
    const float zv[8] = {0, 1, 0.3f, 1, 0, 0.5f, 0, 1};
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 4}, xv), *zt = th_f32(2, (const int64_t[]){2, 4}, zv);
    fl_feed feed[] = {{"x", xt}, {"z", zt}};
    const char *fetch[] = {fl_var_name(out)};
    fl_tensor *o;
    fl_exe *e = gc_run_once(p, feed, 2, fetch, 1, &o);
    CHECK_EQ_INT(fl_tensor_numel(o), 8);
    /* hand values: x=-2,z=0: log(1+e^-2) = 0.126928; x=0: log 2; x=3,z=.3: 3-.9+log(1+e^-3) */
    CHECK_NEAR(fl_tensor_f32(o)[0], 0.12692801, 1e-6);
    CHECK_NEAR(fl_tensor_f32(o)[1], 0.69314718, 1e-6);
    CHECK_NEAR(fl_tensor_f32(o)[2], 2.1485874, 1e-5);
    for (int i = 0; i < 8; i++) {
        double r = sce_ref(xv[i], zv[i]);
        /* relative precision even for the tiny losses at |x| = 20, 50 */
        CHECK_NEAR(fl_tensor_f32(o)[i], r, r < 1e-3 ? 1e-5 * r : 2e-6 * fmax(1.0, r));
    }
    CHECK(fl_tensor_f32(o)[6] > 0.0f); /* log(1 + e^-20) = 2.06e-9, not rounded to 0 */
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(zt);
    fl_prog_free(p);
}

TEST(sigmoid_cross_entropy_with_logits_build_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *z3 = fl_layer_data(p, "z3", FL_SHAPE(3), FL_FLOAT32, 0);
    CHECK(fl_layer_sigmoid_cross_entropy_with_logits(x, z3) == NULL);
    CHECK_EQ_INT(fl_prog_status(p), FL_EINVAL);
    CHECK_STR_HAS(fl_prog_error(p), "sigmoid_cross_entropy_with_logits");
    CHECK_STR_HAS(fl_prog_error(p), "'z3' [-1, 3]");
    fl_prog_free(p);

    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *zi = fl_layer_data(p, "zi", FL_SHAPE(4), FL_INT64, 0);
    CHECK(fl_layer_sigmoid_cross_entropy_with_logits(x, zi) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "sigmoid_cross_entropy_with_logits: label 'zi' must be float32");
    fl_prog_free(p);
}

/* ---- log_loss ------------------------------------------------------------------------------ */

/* Predictions in (0.05, 0.95).  eps 2e-3 instead of 1e-2: the truncation error of a central
 * difference of log(p) is eps^2 / (3 p^2) relative, 1.3% at p = 0.05 with eps 1e-2, too
 * close to the 2% tolerance; with 2e-3 it is 0.05%. */
TEST(grad_log_loss)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(8, 1), 0.05f, 0.95f);
    fl_var *z = fl_layer_data(p, "z", FL_SHAPE(1), FL_FLOAT32, 0);
    fl_var *out = fl_layer_log_loss(a, z, 1e-4f);
    CHECK(out);
    const float zv[8] = {0, 1, 1, 0, 0.3f, 1, 0, 0.8f};
    fl_tensor *zt = th_f32(2, (const int64_t[]){8, 1}, zv);
    fl_feed feed[] = {{"z", zt}};
    gc_opts o = {2e-3, 0, 0, 0};
    gc_check(gc_loss(out), feed, 1, NULL, o);
    fl_tensor_free(zt);
    fl_prog_free(p);
}

TEST(log_loss_values)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "p", FL_SHAPE(1), FL_FLOAT32, 0);
    fl_var *z = fl_layer_data(p, "z", FL_SHAPE(1), FL_FLOAT32, 0);
    fl_var *out = fl_layer_log_loss(x, z, 1e-4f);
    fl_var *out0 = fl_layer_log_loss(x, z, 0.0f);
    CHECK(out && out0);
    const float pv[4] = {0.9f, 0.2f, 0.5f, 0.0f};
    const float zv[4] = {1, 1, 0.25f, 0};
    fl_tensor *pt = th_f32(2, (const int64_t[]){4, 1}, pv), *zt = th_f32(2, (const int64_t[]){4, 1}, zv);
    fl_feed feed[] = {{"p", pt}, {"z", zt}};
    const char *fetch[] = {fl_var_name(out), fl_var_name(out0)};
    fl_tensor *o[2];
    fl_exe *e = gc_run_once(p, feed, 2, fetch, 2, o);
    const float *l = fl_tensor_f32(o[0]), *l0 = fl_tensor_f32(o[1]);
    CHECK_NEAR(l[0], -log(0.9 + 1e-4), 1e-6);
    CHECK_NEAR(l[1], -log(0.2 + 1e-4), 1e-6);
    CHECK_NEAR(l[2], -0.25 * log(0.5 + 1e-4) - 0.75 * log(0.5 + 1e-4), 1e-6);
    CHECK_NEAR(l[3], -log(1.0 + 1e-4), 1e-7);
    CHECK_NEAR(l0[0], 0.10536052, 1e-6); /* -ln 0.9 */
    CHECK_NEAR(l0[1], 1.60943791, 1e-6); /* -ln 0.2 */
    CHECK_NEAR(l0[2], 0.69314718, 1e-6);
    CHECK(isnan(l0[3])); /* as Paddle: 0 * log(0 + 0) */
    fl_exe_free(e);
    fl_tensor_free(pt);
    fl_tensor_free(zt);
    fl_prog_free(p);
}

TEST(log_loss_build_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "p2", FL_SHAPE(2), FL_FLOAT32, 0);
    fl_var *z = fl_layer_data(p, "z2", FL_SHAPE(2), FL_FLOAT32, 0);
    CHECK(fl_layer_log_loss(x, z, 1e-4f) == NULL);
    CHECK_EQ_INT(fl_prog_status(p), FL_EINVAL);
    CHECK_STR_HAS(fl_prog_error(p), "log_loss: input 'p2' [-1, 2] must have shape [N, 1]");
    fl_prog_free(p);

    p = fl_prog_create();
    x = fl_layer_data(p, "p", FL_SHAPE(1), FL_FLOAT32, 0);
    fl_var *zi = fl_layer_data(p, "zi", FL_SHAPE(1), FL_INT64, 0);
    CHECK(fl_layer_log_loss(x, zi, 1e-4f) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "log_loss: label 'zi' must be float32");
    fl_prog_free(p);

    p = fl_prog_create();
    x = fl_layer_data(p, "p", FL_SHAPE(1), FL_FLOAT32, 0);
    z = fl_layer_data(p, "z", FL_SHAPE(1), FL_FLOAT32, 0);
    CHECK(fl_layer_log_loss(x, z, -1.0f) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "log_loss: attribute epsilon");
    fl_prog_free(p);
}

/* A loss fed a NULL input returns NULL and keeps the first error. */
TEST(loss_null_inputs_are_sticky)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(1), FL_FLOAT32, 0);
    CHECK(fl_layer_softmax_with_cross_entropy(NULL, x) == NULL);
    CHECK(fl_layer_sigmoid_cross_entropy_with_logits(x, NULL) == NULL);
    CHECK(fl_layer_log_loss(NULL, NULL, 1e-4f) == NULL);
    CHECK_EQ_INT(fl_prog_status(p), FL_OK);
    fl_prog_free(p);
}

/* Options a program text may carry but Fleet does not implement are rejected by name. */
static void text_rejected(const char *ops, const char *want)
{
    char text[2048];
    snprintf(text, sizeof text,
             "fleet-program 1\nseed 1\n"
             "var a float32 [-1,3] data stop_gradient\nvar y int64 [-1,1] data stop_gradient\n"
             "var z float32 [-1,3] data stop_gradient\n"
             "var s float32 [-1,3]\nvar l float32 [-1,1]\n%s\n",
             ops);
    fl_prog *p = NULL;
    int st = fl_prog_from_text(text, strlen(text), &p);
    if (st == FL_OK) TFAIL("program text with '%s' was accepted", ops);
    CHECK_STR_HAS(fl_last_error(), want);
    fl_prog_free(p);
}

TEST(loss_unsupported_attributes_rejected)
{
    text_rejected("op softmax_with_cross_entropy role=forward in Logits=a Label=y out Softmax=s Loss=l "
                  "attr soft_label=int:1",
                  "softmax_with_cross_entropy: input 'y' must be float32, is int64"); /* soft labels are float */
    text_rejected("op softmax_with_cross_entropy role=forward in Logits=a Label=y out Softmax=s Loss=l "
                  "attr axis=int:0",
                  "softmax_with_cross_entropy: attribute axis=0 is not supported");
    text_rejected("op sigmoid_cross_entropy_with_logits role=forward in X=a Label=z out Out=s attr normalize=int:1",
                  "sigmoid_cross_entropy_with_logits: attribute normalize=1 is not supported");
    text_rejected("op sigmoid_cross_entropy_with_logits role=forward in X=a Label=z out Out=s attr ignore_index=int:0",
                  "sigmoid_cross_entropy_with_logits: attribute ignore_index is not supported");
    text_rejected("op softmax_with_cross_entropy role=forward in Logits=a out Softmax=s Loss=l",
                  "softmax_with_cross_entropy: input 'Label' needs exactly one variable, got 0");
    /* the accepted spelling of the same op round-trips */
    char text[1024];
    snprintf(text, sizeof text,
             "fleet-program 1\nseed 1\nvar a float32 [-1,3] data stop_gradient\nvar y int64 [-1,1] data "
             "stop_gradient\nvar s float32 [-1,3]\nvar l float32 [-1,1]\nop softmax_with_cross_entropy "
             "role=forward in Logits=a Label=y out Softmax=s Loss=l attr soft_label=int:0 ignore_index=int:2 "
             "axis=int:1\n");
    fl_prog *p = NULL;
    CHECK_OK(fl_prog_from_text(text, strlen(text), &p));
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 3}, (const float[]){0, 0, 0, 1, 2, 3});
    fl_tensor *yt = th_i64(2, (const int64_t[]){2, 1}, (const int64_t[]){2, 0});
    fl_feed feed[] = {{"a", xt}, {"y", yt}};
    const char *fetch[] = {"l"};
    fl_tensor *o;
    fl_exe *e = gc_run_once(p, feed, 2, fetch, 1, &o);
    CHECK_NEAR(fl_tensor_f32(o)[0], 0.0, 0);           /* label 2 == ignore_index */
    CHECK_NEAR(fl_tensor_f32(o)[1], 2.40760596, 1e-5); /* log(e^1+e^2+e^3) - 1 */
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

TEST_MAIN(T(grad_softmax_with_cross_entropy), T(grad_softmax_with_cross_entropy_rank3),
          T(softmax_with_cross_entropy_values), T(softmax_with_cross_entropy_matches_softmax_cross_entropy),
          T(softmax_with_cross_entropy_ignore_index), T(softmax_with_cross_entropy_label_out_of_range),
          T(softmax_with_cross_entropy_build_errors), T(softmax_with_cross_entropy_softmax_not_differentiable),
          T(grad_sigmoid_cross_entropy_with_logits), T(sigmoid_cross_entropy_with_logits_values),
          T(sigmoid_cross_entropy_with_logits_build_errors), T(grad_log_loss), T(log_loss_values), T(log_loss_build_errors),
          T(loss_null_inputs_are_sticky), T(loss_unsupported_attributes_rejected))
