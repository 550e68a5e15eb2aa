/* test_metric.c - top_k, accuracy and auc (ops_metric.c): values on hand examples, the
 * AUC state across runs (global vs sliding window), and build/run-time error texts. */
#include "testhelp.h"

static fl_exe *startup(fl_prog *p)
{
    fl_exe *e = fl_exe_create(NULL);
    CHECK(e);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    return e;
}

/* ---- accuracy / top_k ------------------------------------------------------------------------ */

/* Rows (label): [.1 .7 .2] (1), [.5 .3 .2] (1), [.2 .2 .6] (0), [.3 .3 .4] (1).
 * top-1 hits row 0 only; top-2 = {1,2}, {0,1}, {2,0}, {2,0} (ties: lower index first) hits
 * rows 0, 1, 2. */
static const float acc_x[12] = {0.1f, 0.7f, 0.2f, 0.5f, 0.3f, 0.2f, 0.2f, 0.2f, 0.6f, 0.3f, 0.3f, 0.4f};
static const int64_t acc_y[4] = {1, 1, 0, 1};

TEST(accuracy_top1_top2)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *a1 = fl_layer_accuracy(x, y, 1);
    fl_var *a2 = fl_layer_accuracy(x, y, 2);
    CHECK(a1 && a2);
    CHECK_EQ_INT(fl_var_dtype(a1), FL_FLOAT32);
    CHECK_EQ_INT(fl_var_ndim(a1), 1);
    CHECK_EQ_INT(fl_var_shape(a1)[0], 1);
    /* variables: top_k.tmp_{0,1} + accuracy.tmp_{0,1,2} for k=1, then tmp_{2,3} / tmp_{3,4,5} */
    CHECK(fl_prog_var(p, "accuracy.tmp_5"));
    CHECK_EQ_INT(fl_var_dtype(fl_prog_var(p, "accuracy.tmp_1")), FL_INT64);
    CHECK_EQ_INT(fl_var_dtype(fl_prog_var(p, "top_k.tmp_3")), FL_INT64);
    fl_tensor *xt = th_f32(2, (const int64_t[]){4, 3}, acc_x), *yt = th_i64(2, (const int64_t[]){4, 1}, acc_y);
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    const char *fetch[] = {fl_var_name(a1),  "accuracy.tmp_1", "accuracy.tmp_2", fl_var_name(a2),
                           "accuracy.tmp_4", "accuracy.tmp_5", "top_k.tmp_2",    "top_k.tmp_3"};
    fl_tensor *o[8];
    fl_exe *e = startup(p);
    CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 8, o));
    CHECK_NEAR(fl_tensor_f32(o[0])[0], 0.25, 1e-7);
    CHECK_EQ_INT(fl_tensor_i64(o[1])[0], 1);
    CHECK_EQ_INT(fl_tensor_i64(o[2])[0], 4);
    CHECK_NEAR(fl_tensor_f32(o[3])[0], 0.75, 1e-7);
    CHECK_EQ_INT(fl_tensor_i64(o[4])[0], 3);
    CHECK_EQ_INT(fl_tensor_i64(o[5])[0], 4);
    /* top_k (k = 2): values descending and their indices */
    CHECK_EQ_INT(fl_tensor_dim(o[6], 0), 4);
    CHECK_EQ_INT(fl_tensor_dim(o[6], 1), 2);
    const float want_v[8] = {0.7f, 0.2f, 0.5f, 0.3f, 0.6f, 0.2f, 0.4f, 0.3f};
    const int64_t want_i[8] = {1, 2, 0, 1, 2, 0, 2, 0};
    for (int i = 0; i < 8; i++) {
        CHECK_NEAR(fl_tensor_f32(o[6])[i], want_v[i], 0);
        CHECK_EQ_INT(fl_tensor_i64(o[7])[i], want_i[i]);
    }
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

/* top_k with k = C sorts the row; NaN ranks below every number. */
TEST(top_k_full_sort_and_nan)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(5), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *a = fl_layer_accuracy(x, y, 5);
    CHECK(a);
    const float xv[10] = {NAN, 3, -1, 3, 7, 0.5f, 0.25f, 2, -4, 1};
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 5}, xv);
    fl_tensor *yt = th_i64(2, (const int64_t[]){2, 1}, (const int64_t[]){0, 9});
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    const char *fetch[] = {"top_k.tmp_0", "top_k.tmp_1", fl_var_name(a)};
    fl_tensor *o[3];
    fl_exe *e = startup(p);
    CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 3, o));
    const int64_t want_i[10] = {4, 1, 3, 2, 0, 2, 4, 0, 1, 3};
    for (int i = 0; i < 10; i++) CHECK_EQ_INT(fl_tensor_i64(o[1])[i], want_i[i]);
    CHECK_NEAR(fl_tensor_f32(o[0])[0], 7, 0);
    CHECK(isnan(fl_tensor_f32(o[0])[4]));
    CHECK_NEAR(fl_tensor_f32(o[0])[9], -4, 0);
    /* label 0 is among all 5 indices; label 9 (out of range) is never correct */
    CHECK_NEAR(fl_tensor_f32(o[2])[0], 0.5, 1e-7);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

TEST(accuracy_build_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    CHECK(fl_layer_accuracy(x, y, 0) == NULL);
    CHECK_EQ_INT(fl_prog_status(p), FL_EINVAL);
    CHECK_STR_HAS(fl_prog_error(p), "accuracy: k must be >= 1, got 0");
    fl_prog_free(p);

    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    CHECK(fl_layer_accuracy(x, y, 4) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "accuracy: k = 4 exceeds the number of classes of input 'x' [-1, 3]");
    fl_prog_free(p);

    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *yf = fl_layer_data(p, "yf", FL_SHAPE(1), FL_FLOAT32, 0);
    CHECK(fl_layer_accuracy(x, yf, 1) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "accuracy: label 'yf' must be int64");
    fl_prog_free(p);

    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *y2 = fl_layer_data(p, "y2", FL_SHAPE(2), FL_INT64, 0);
    CHECK(fl_layer_accuracy(x, y2, 1) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "accuracy: label 'y2' [-1, 2] must have shape [N, 1]");
    fl_prog_free(p);

    p = fl_prog_create();
    fl_var *x3 = fl_layer_data(p, "x3", FL_SHAPE(2, 3), FL_FLOAT32, 0);
    y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    CHECK(fl_layer_accuracy(x3, y, 1) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "accuracy: input 'x3' must be float32 [N, C]");
    fl_prog_free(p);
}

/* Accuracy adds no gradient: a model can train on a loss while reporting accuracy. */
TEST(accuracy_next_to_training)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *prob = fl_layer_fc(FL_VARS(x), 3, "softmax");
    fl_var *acc = fl_layer_accuracy(prob, y, 1);
    fl_var *loss = fl_layer_mean(fl_layer_cross_entropy(prob, y));
    fl_opt *opt = fl_opt_sgd(0.1f);
    CHECK_OK(fl_opt_minimize(opt, loss));
    fl_tensor *xt = th_f32(2, (const int64_t[]){4, 3}, acc_x), *yt = th_i64(2, (const int64_t[]){4, 1}, acc_y);
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    const char *fetch[] = {fl_var_name(acc)};
    fl_tensor *o;
    fl_exe *e = startup(p);
    for (int i = 0; i < 3; i++) {
        CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 1, &o));
        float a = fl_tensor_f32(o)[0];
        CHECK(a == 0.0f || a == 0.25f || a == 0.5f || a == 0.75f || a == 1.0f);
    }
    fl_exe_free(e);
    fl_opt_free(opt);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

/* ---- auc ---------------------------------------------------------------------------------------- */

/* Exact ROC AUC by pairwise comparison (ties count one half). */
static double auc_ref(const float *p, const int64_t *y, int n)
{
    double good = 0, pairs = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (y[i] != 1 || y[j] != 0) continue;
            pairs += 1;
            good += p[i] > p[j] ? 1.0 : p[i] == p[j] ? 0.5 : 0.0;
        }
    return pairs ? good / pairs : 0.0;
}

/* Input [n, 2] with column 1 = p (column 0 holds a junk value the op must ignore). */
static fl_tensor *auc_input(const float *p, int n)
{
    fl_tensor *t = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){n, 2});
    for (int i = 0; i < n; i++) {
        fl_tensor_f32(t)[2 * i] = 5.0f;
        fl_tensor_f32(t)[2 * i + 1] = p[i];
    }
    return t;
}

typedef struct {
    fl_prog *p;
    fl_var *global, *batch;
    fl_exe *e;
} auc_net;

static auc_net auc_build(int num_thresholds, int slide_steps)
{
    auc_net a;
    a.p = fl_prog_create();
    fl_var *x = fl_layer_data(a.p, "x", FL_SHAPE(2), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(a.p, "y", FL_SHAPE(1), FL_INT64, 0);
    a.batch = NULL;
    a.global = fl_layer_auc(x, y, num_thresholds, slide_steps, &a.batch);
    CHECK(a.global && a.batch);
    a.e = startup(a.p);
    return a;
}

/* Runs one batch; returns the global AUC and stores the batch AUC. */
static double auc_run(auc_net *a, const float *p, const int64_t *y, int n, double *batch)
{
    fl_tensor *xt = auc_input(p, n), *yt = th_i64(2, (const int64_t[]){n, 1}, y);
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    const char *fetch[] = {fl_var_name(a->global), fl_var_name(a->batch)};
    fl_tensor *o[2];
    CHECK_OK(fl_exe_run(a->e, a->p, feed, 2, fetch, 2, o));
    CHECK_EQ_INT(fl_tensor_dtype(o[0]), FL_FLOAT64);
    CHECK_EQ_INT(fl_tensor_numel(o[0]), 1);
    double g = ((const double *)fl_tensor_cdata(o[0]))[0];
    if (batch) *batch = ((const double *)fl_tensor_cdata(o[1]))[0];
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    return g;
}

static void auc_free(auc_net *a)
{
    fl_exe_free(a->e);
    fl_prog_free(a->p);
}

TEST(auc_perfect_and_reversed)
{
    const float p[4] = {0.9f, 0.8f, 0.2f, 0.1f};
    const int64_t up[4] = {1, 1, 0, 0}, down[4] = {0, 0, 1, 1};
    double b;
    auc_net a = auc_build(4095, 1);
    CHECK_NEAR(auc_run(&a, p, up, 4, &b), 1.0, 1e-12);
    CHECK_NEAR(b, 1.0, 1e-12);
    auc_free(&a);
    a = auc_build(4095, 1);
    CHECK_NEAR(auc_run(&a, p, down, 4, &b), 0.0, 1e-12);
    CHECK_NEAR(b, 0.0, 1e-12);
    auc_free(&a);
}

/* Positives {.35, .8, .65} vs negatives {.1, .4, .2}: 8 of 9 pairs ordered -> 8/9.  All six
 * land in distinct buckets of 4095 thresholds. */
TEST(auc_hand_example)
{
    const float p[6] = {0.1f, 0.35f, 0.4f, 0.8f, 0.65f, 0.2f};
    const int64_t y[6] = {0, 1, 0, 1, 1, 0};
    CHECK_NEAR(auc_ref(p, y, 6), 8.0 / 9.0, 1e-12);
    double b;
    auc_net a = auc_build(4095, 1);
    CHECK_NEAR(auc_run(&a, p, y, 6, &b), 8.0 / 9.0, 1e-6);
    CHECK_NEAR(b, 8.0 / 9.0, 1e-6);
    auc_free(&a);
}

/* With 4 thresholds, .3 and .45 share bucket 1: that pair counts one half (Paddle's
 * trapezoid), so AUC = (0.5 + 1 + 2) / 4.  p = 1.0 lands in the top bucket. */
TEST(auc_same_bucket_counts_half)
{
    const float p[5] = {0.45f, 0.3f, 0.9f, 0.1f, 1.0f};
    const int64_t y[5] = {1, 0, 1, 0, -1}; /* a negative label is skipped */
    auc_net a = auc_build(4, 1);
    CHECK_NEAR(auc_run(&a, p, y, 5, NULL), 0.875, 1e-12);
    auc_free(&a);
    const float p2[2] = {1.0f, 0.0f};
    const int64_t y2[2] = {1, 0};
    a = auc_build(1, 0);
    CHECK_NEAR(auc_run(&a, p2, y2, 2, NULL), 1.0, 1e-12);
    auc_free(&a);
}

/* Paddle returns 0 (not 0.5) without positives or without negatives. */
TEST(auc_one_class_is_zero)
{
    const float p[3] = {0.2f, 0.5f, 0.7f};
    const int64_t neg[3] = {0, 0, 0}, pos[3] = {1, 1, 2};
    double b;
    auc_net a = auc_build(4095, 1);
    CHECK_NEAR(auc_run(&a, p, neg, 3, &b), 0.0, 0);
    CHECK_NEAR(b, 0.0, 0);
    auc_free(&a);
    a = auc_build(4095, 1);
    CHECK_NEAR(auc_run(&a, p, pos, 3, &b), 0.0, 0);
    auc_free(&a);
}

/* Three batches: the global AUC covers all seen so far, the batch AUC the last
 * slide_steps batches (1 and 2), slide_steps 0 = cumulative like the global one. */
TEST(auc_global_accumulates_batch_slides)
{
    const float b1p[4] = {0.9f, 0.3f, 0.6f, 0.2f}, b2p[4] = {0.55f, 0.15f, 0.75f, 0.05f},
                b3p[5] = {0.45f, 0.85f, 0.25f, 0.65f, 0.35f};
    const int64_t b1y[4] = {1, 0, 0, 1}, b2y[4] = {1, 0, 1, 0}, b3y[5] = {0, 1, 1, 0, 0};
    const float *bp[3] = {b1p, b2p, b3p};
    const int64_t *by[3] = {b1y, b2y, b3y};
    const int bn[3] = {4, 4, 5};
    float allp[13];
    int64_t ally[13];
    int off[4] = {0, 4, 8, 13};
    for (int k = 0; k < 3; k++) {
        memcpy(allp + off[k], bp[k], (size_t)bn[k] * sizeof(float));
        memcpy(ally + off[k], by[k], (size_t)bn[k] * sizeof(int64_t));
    }
    auc_net a1 = auc_build(4095, 1), a2 = auc_build(4095, 2), a0 = auc_build(4095, 0);
    for (int k = 0; k < 3; k++) {
        double g_want = auc_ref(allp, ally, off[k + 1]);
        double w1 = auc_ref(bp[k], by[k], bn[k]);
        int from = k >= 1 ? off[k - 1] : 0;
        double w2 = auc_ref(allp + from, ally + from, off[k + 1] - from);
        double b1, b2, b0;
        CHECK_NEAR(auc_run(&a1, bp[k], by[k], bn[k], &b1), g_want, 1e-9);
        CHECK_NEAR(auc_run(&a2, bp[k], by[k], bn[k], &b2), g_want, 1e-9);
        CHECK_NEAR(auc_run(&a0, bp[k], by[k], bn[k], &b0), g_want, 1e-9);
        CHECK_NEAR(b1, w1, 1e-9);
        CHECK_NEAR(b2, w2, 1e-9);
        CHECK_NEAR(b0, g_want, 1e-9);
    }
    /* the windows differ from the global AUC, so the test discriminates */
    CHECK(fabs(auc_ref(b3p, b3y, 5) - auc_ref(allp, ally, 13)) > 0.05);
    CHECK(fabs(auc_ref(allp + 4, ally + 4, 9) - auc_ref(allp, ally, 13)) > 0.01);
    /* the window state: [(S + 1) * B + 1] with the batch counter last */
    fl_tensor *w = fl_scope_find(fl_exe_scope(a2.e), "auc_0.tmp_2");
    CHECK(w);
    CHECK_EQ_INT(fl_tensor_numel(w), 3 * 4096 + 1);
    CHECK_EQ_INT(fl_tensor_i64(w)[3 * 4096], 3);
    fl_tensor *g = fl_scope_find(fl_exe_scope(a2.e), "auc_0.tmp_4");
    int64_t npos = 0;
    for (int i = 0; i < 4096; i++) npos += fl_tensor_i64(g)[i];
    CHECK_EQ_INT(npos, 6);
    auc_free(&a1);
    auc_free(&a2);
    auc_free(&a0);
}

/* The state is four persistable int64 variables zeroed by the startup program. */
TEST(auc_state_variables)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *b = NULL, *g = fl_layer_auc(x, y, 15, 3, &b);
    CHECK(g && b);
    CHECK_STR_HAS(fl_var_name(g), "auc_0.tmp_0");
    CHECK_STR_HAS(fl_var_name(b), "auc_0.tmp_1");
    CHECK_EQ_INT(fl_var_dtype(g), FL_FLOAT64);
    const char *names[4] = {"auc_0.tmp_2", "auc_0.tmp_3", "auc_0.tmp_4", "auc_0.tmp_5"};
    const int64_t numel[4] = {4 * 16 + 1, 4 * 16 + 1, 16, 16};
    for (int i = 0; i < 4; i++) {
        fl_var *v = fl_prog_var(p, names[i]);
        CHECK(v);
        CHECK_EQ_INT(fl_var_persistable(v), 1);
        CHECK_EQ_INT(fl_var_is_param(v), 0);
        CHECK_EQ_INT(fl_var_dtype(v), FL_INT64);
        int64_t n = 1;
        for (int d = 0; d < fl_var_ndim(v); d++) n *= fl_var_shape(v)[d];
        CHECK_EQ_INT(n, numel[i]);
        CHECK(fl_prog_var(fl_prog_startup(p), names[i]));
    }
    CHECK_EQ_INT(fl_var_ndim(fl_prog_var(p, "auc_0.tmp_4")), 2);
    CHECK_EQ_INT(fl_prog_num_ops(fl_prog_startup(p)), 4);
    for (int i = 0; i < 4; i++) CHECK_STR_HAS(fl_prog_op_type(fl_prog_startup(p), i), "fill_constant");
    CHECK_EQ_INT(fl_prog_num_ops(p), 2);
    CHECK_STR_HAS(fl_prog_op_type(p, 0), "auc");
    /* no startup: the main program refuses to run */
    fl_exe *e = fl_exe_create(NULL);
    fl_tensor *xt = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){1, 2});
    fl_tensor *yt = fl_tensor_create(FL_INT64, 2, (const int64_t[]){1, 1});
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    CHECK_FAILS(fl_exe_run(e, p, feed, 2, NULL, 0, NULL), FL_ESTATE, "auc_0.tmp_");
    /* a second auc gets its own state */
    fl_var *b2 = NULL;
    CHECK(fl_layer_auc(x, y, 4095, 1, &b2));
    CHECK(fl_prog_var(p, "auc_1.tmp_5"));
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

TEST(auc_build_errors)
{
    struct {
        int cols, nt, ss;
        fl_dtype ldt;
        int lcols;
        const char *want;
    } cases[] = {
        {2, 0, 1, FL_INT64, 1, "auc: num_thresholds must be >= 1, got 0"},
        {2, 4095, -1, FL_INT64, 1, "auc: slide_steps must be >= 0, got -1"},
        {3, 4095, 1, FL_INT64, 1,
         "auc: input 'x' must be float32 [N, 2] (column 1 = positive probability), is float32 [-1, 3]"},
        {2, 4095, 1, FL_FLOAT32, 1, "auc: label 'y' must be int64, is float32"},
        {2, 4095, 1, FL_INT64, 2, "auc: label 'y' [-1, 2] must have shape [N, 1]"},
        {2, 1 << 30, 4, FL_INT64, 1, "needs too large a state"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fl_prog *p = fl_prog_create();
        fl_var *x = fl_layer_data(p, "x", FL_SHAPE(cases[i].cols), FL_FLOAT32, 0);
        fl_var *y = fl_layer_data(p, "y", FL_SHAPE(cases[i].lcols), cases[i].ldt, 0);
        fl_var *b = (fl_var *)1;
        CHECK(fl_layer_auc(x, y, cases[i].nt, cases[i].ss, &b) == NULL);
        CHECK(b == NULL);
        CHECK_EQ_INT(fl_prog_status(p), FL_EINVAL);
        CHECK_STR_HAS(fl_prog_error(p), cases[i].want);
        CHECK_EQ_INT(fl_prog_num_ops(fl_prog_startup(p)), 0); /* nothing half-built */
        fl_prog_free(p);
    }
}

/* A prediction outside [0, 1] fails the run naming row and value, and leaves the state as
 * it was. */
TEST(auc_bad_prediction_leaves_state)
{
    const float p1[4] = {0.9f, 0.3f, 0.6f, 0.2f}, bad[3] = {0.5f, 1.5f, 0.1f}, p2[4] = {0.55f, 0.15f, 0.75f, 0.05f};
    const int64_t y1[4] = {1, 0, 0, 1}, ybad[3] = {1, 0, 1}, y2[4] = {1, 0, 1, 0};
    auc_net a = auc_build(4095, 2);
    double b;
    auc_run(&a, p1, y1, 4, &b);
    fl_tensor *xt = auc_input(bad, 3), *yt = th_i64(2, (const int64_t[]){3, 1}, ybad);
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    CHECK_FAILS(fl_exe_run(a.e, a.p, feed, 2, NULL, 0, NULL), FL_EINVAL, "auc: prediction 1.5 at row 1 of input 'x'");
    fl_tensor_f32(xt)[3] = NAN;
    CHECK_FAILS(fl_exe_run(a.e, a.p, feed, 2, NULL, 0, NULL), FL_EINVAL, "outside [0, 1]");
    double g = auc_run(&a, p2, y2, 4, &b);
    float allp[8];
    int64_t ally[8];
    memcpy(allp, p1, sizeof p1);
    memcpy(allp + 4, p2, sizeof p2);
    memcpy(ally, y1, sizeof y1);
    memcpy(ally + 4, y2, sizeof y2);
    CHECK_NEAR(g, auc_ref(allp, ally, 8), 1e-9);
    CHECK_NEAR(b, auc_ref(allp, ally, 8), 1e-9); /* window of 2 = both good batches */
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    auc_free(&a);
}

TEST(metric_null_inputs_are_sticky)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2), FL_FLOAT32, 0);
    fl_var *b = (fl_var *)1;
    CHECK(fl_layer_accuracy(NULL, x, 1) == NULL);
    CHECK(fl_layer_auc(x, NULL, 4095, 1, &b) == NULL);
    CHECK(b == NULL);
    CHECK_EQ_INT(fl_prog_status(p), FL_OK);
    fl_prog_free(p);
}

/* A program text asking for the PR curve is rejected by name; the ROC text round-trips. */
TEST(auc_program_text)
{
    const char *head = "fleet-program 1\nseed 1\nvar x float32 [-1,2] data stop_gradient\n"
                       "var y int64 [-1,1] data stop_gradient\nvar g float64 [1]\n"
                       "var sp int64 [1,5] persistable stop_gradient\nvar sn int64 [1,5] persistable stop_gradient\n";
    char text[1024];
    snprintf(text, sizeof text,
             "%sop auc role=forward in Predict=x Label=y StatPos=sp StatNeg=sn out AUC=g StatPosOut=sp "
             "StatNegOut=sn attr curve=str:\"PR\" num_thresholds=int:4 slide_steps=int:0\n",
             head);
    fl_prog *p = NULL;
    CHECK(fl_prog_from_text(text, strlen(text), &p) != FL_OK);
    CHECK_STR_HAS(fl_last_error(), "auc: attribute curve='PR' is not supported");
    snprintf(text, sizeof text,
             "%sop auc role=forward in Predict=x Label=y StatPos=sp StatNeg=sn out AUC=g StatPosOut=sp "
             "StatNegOut=sn attr curve=str:\"ROC\" num_thresholds=int:5 slide_steps=int:0\n",
             head);
    CHECK(fl_prog_from_text(text, strlen(text), &p) != FL_OK);
    CHECK_STR_HAS(fl_last_error(), "state 'sp' (StatPos) must be int64 with 6 elements");
    snprintf(text, sizeof text,
             "%sop auc role=forward in Predict=x Label=y StatPos=sp StatNeg=sn out AUC=g StatPosOut=sp "
             "StatNegOut=sn attr curve=str:\"ROC\" num_thresholds=int:4 slide_steps=int:0\n",
             head);
    CHECK_OK(fl_prog_from_text(text, strlen(text), &p));
    /* the parsed program has no startup initializers: zero the state by hand */
    fl_exe *e = fl_exe_create(NULL);
    fl_scope *s = fl_exe_scope(e);
    CHECK_OK(fl_tensor_resize(fl_scope_var(s, "sp"), FL_INT64, 2, (const int64_t[]){1, 5}));
    CHECK_OK(fl_tensor_resize(fl_scope_var(s, "sn"), FL_INT64, 2, (const int64_t[]){1, 5}));
    memset(fl_tensor_data(fl_scope_find(s, "sp")), 0, 5 * sizeof(int64_t));
    memset(fl_tensor_data(fl_scope_find(s, "sn")), 0, 5 * sizeof(int64_t));
    const float pv[5] = {0.45f, 0.3f, 0.9f, 0.1f, 1.0f};
    const int64_t yv[5] = {1, 0, 1, 0, -1};
    fl_tensor *xt = auc_input(pv, 5), *yt = th_i64(2, (const int64_t[]){5, 1}, yv);
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    const char *fetch[] = {"g"};
    fl_tensor *o;
    CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 1, &o));
    CHECK_NEAR(((const double *)fl_tensor_cdata(o))[0], 0.875, 1e-12);
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

TEST_MAIN(T(accuracy_top1_top2), T(top_k_full_sort_and_nan), T(accuracy_build_errors), T(accuracy_next_to_training),
          T(auc_perfect_and_reversed), T(auc_hand_example), T(auc_same_bucket_counts_half), T(auc_one_class_is_zero),
          T(auc_global_accumulates_batch_slides), T(auc_state_variables), T(auc_build_errors),
          T(auc_bad_prediction_leaves_state), T(metric_null_inputs_are_sticky), T(auc_program_text))
