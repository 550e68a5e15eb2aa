/* test_graph.c - programs, append_backward semantics, initializers, clone. */
#include "gradcheck.h"

static fl_tensor *startup_param(fl_prog *p, fl_exe **e, const char *name)
{
    *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(*e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    fl_tensor *t = fl_scope_find(fl_exe_scope(*e), name);
    CHECK(t != NULL);
    return t;
}

static int has_var(fl_prog *p, const char *n) { return fl_prog_var(p, n) != NULL; }

TEST(backward_stop_gradient_and_no_grad)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *h1 = fl_layer_fc(FL_VARS(x), 4, "tanh");  /* fc_0 */
    fl_var *h2 = fl_layer_fc(FL_VARS(h1), 4, "tanh"); /* fc_1 */
    fl_var *o = fl_layer_fc(FL_VARS(h2), 1, NULL);    /* fc_2 */
    fl_var_set_stop_gradient(h1, 1);                  /* blocks fc_0's gradients */
    fl_param_grad *pg;
    int n;
    const char *no_grad[] = {"fc_2.b_0"};
    CHECK_OK(fl_append_backward(fl_layer_mean(o), no_grad, 1, &pg, &n));
    CHECK_EQ_INT(n, 3); /* fc_1.w_0, fc_1.b_0, fc_2.w_0 */
    for (int i = 0; i < n; i++) {
        const char *nm = fl_var_name(pg[i].param);
        CHECK(strncmp(nm, "fc_0", 4) != 0);
        CHECK(strcmp(nm, "fc_2.b_0") != 0);
    }
    CHECK(!has_var(p, "fc_0.w_0@GRAD"));
    CHECK(!has_var(p, "x@GRAD"));
    CHECK(has_var(p, "fc_1.w_0@GRAD"));
    free(pg);
    fl_prog_free(p);
}

TEST(backward_needs_scalar_loss)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *o = fl_layer_fc(FL_VARS(x), 2, NULL);
    CHECK_FAILS(fl_append_backward(o, NULL, 0, NULL, NULL), FL_EINVAL, "must have one element");
    fl_prog_free(p);
    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    CHECK_FAILS(fl_append_backward(fl_layer_mean(x), NULL, 0, NULL, NULL), FL_EINVAL,
                "does not depend on any trainable parameter");
    fl_prog_free(p);
}

/* One weight shared by two fc layers: its gradient is the sum of both uses. */
TEST(backward_shared_parameter)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(3, 4), -1, 1);
    fl_fc_attr at;
    memset(&at, 0, sizeof at);
    at.weight.name = "W";
    at.no_bias = 1;
    fl_var *h1 = fl_layer_fc_ex(FL_VARS(a), 4, "tanh", &at);
    fl_var *h2 = fl_layer_fc_ex(FL_VARS(h1), 4, "tanh", &at);
    gc_check(gc_loss(h2), NULL, 0, NULL, (gc_opts){0});
    CHECK(has_var(p, "W@GRAD@RENAME@0"));
    fl_prog_free(p);
}

static void init_stats(fl_initializer in, double *mean, double *sd, float *mn, float *mx)
{
    fl_prog *p = fl_prog_create();
    fl_param_attr a;
    memset(&a, 0, sizeof a);
    a.name = "w";
    a.init = in;
    CHECK(fl_layer_create_parameter(p, FL_SHAPE(200, 100), FL_FLOAT32, &a));
    fl_exe *e;
    fl_tensor *t = startup_param(p, &e, "w");
    const float *d = fl_tensor_f32(t);
    double s = 0, s2 = 0;
    *mn = d[0];
    *mx = d[0];
    for (int i = 0; i < 20000; i++) {
        s += d[i];
        s2 += (double)d[i] * d[i];
        *mn = fminf(*mn, d[i]);
        *mx = fmaxf(*mx, d[i]);
    }
    *mean = s / 20000;
    *sd = sqrt(s2 / 20000 - *mean * *mean);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(initializers)
{
    double m, s;
    float lo, hi;
    init_stats(fl_init_constant(0.25f), &m, &s, &lo, &hi);
    CHECK(lo == 0.25f && hi == 0.25f);
    init_stats(fl_init_uniform(-2.0f, 3.0f), &m, &s, &lo, &hi);
    CHECK(lo >= -2.0f && hi < 3.0f);
    CHECK_NEAR(m, 0.5, 0.05);
    CHECK_NEAR(s, 5.0 / sqrt(12.0), 0.05);
    init_stats(fl_init_normal(1.0f, 2.0f), &m, &s, &lo, &hi);
    CHECK_NEAR(m, 1.0, 0.05);
    CHECK_NEAR(s, 2.0, 0.05);
    init_stats(fl_init_truncated_normal(0.0f, 1.0f), &m, &s, &lo, &hi);
    CHECK(lo >= -2.0f && hi <= 2.0f);
    CHECK_NEAR(s, 0.88, 0.03); /* std of N(0,1) truncated at 2 sigma */
    init_stats(fl_init_xavier(0), &m, &s, &lo, &hi);
    double lim = sqrt(6.0 / 300.0);
    CHECK(lo >= -lim && hi <= lim);
    CHECK_NEAR(s, lim / sqrt(3.0), 0.01);
    init_stats(fl_init_xavier(1), &m, &s, &lo, &hi);
    CHECK_NEAR(s, sqrt(2.0 / 300.0), 0.01);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* truncated_gaussian_random against the exact law of N(0, 1) truncated to [-2, 2]: the
 * support, the second and fourth moments (E z^n = (n-1) E z^(n-2) - 2 a^(n-1) phi(a) / Z,
 * Z = erf(a / sqrt 2), a = 2), the share inside one std, the Kolmogorov distance to the
 * truncated CDF over 2^20 draws (1.95 / sqrt(n) is the 0.1% critical value), and the same
 * values from a second executor (seeded, deterministic). */
TEST(truncated_normal_distribution)
{
    const float mean = 0.5f, sd = 2.0f;
    const int64_t n = 1 << 20;
    float *z = malloc((size_t)n * sizeof *z);
    CHECK(z != NULL);
    for (int run = 0; run < 2; run++) {
        fl_prog *p = fl_prog_create();
        fl_prog_set_seed(p, 7);
        fl_param_attr a;
        memset(&a, 0, sizeof a);
        a.name = "w";
        a.init = fl_init_truncated_normal(mean, sd);
        CHECK(fl_layer_create_parameter(p, FL_SHAPE(1024, 1024), FL_FLOAT32, &a));
        fl_exe *e;
        const float *d = fl_tensor_f32(startup_param(p, &e, "w"));
        if (run == 0) {
            for (int64_t i = 0; i < n; i++) {
                CHECK(d[i] >= mean - 2 * sd && d[i] <= mean + 2 * sd);
                z[i] = (d[i] - mean) / sd;
            }
        } else {
            int same = 1;
            for (int64_t i = 0; i < n; i++) same &= (d[i] - mean) / sd == z[i];
            CHECK(same);
        }
        fl_exe_free(e);
        fl_prog_free(p);
    }
    const double A = 2.0, phi = exp(-A * A / 2) / sqrt(2 * M_PI), Z = erf(A / sqrt(2.0));
    const double m2 = 1 - 2 * A * phi / Z, m4 = 3 * m2 - 2 * A * A * A * phi / Z;
    double s1 = 0, s2 = 0, s4 = 0, in1 = 0, zmax = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = z[i];
        s1 += v, s2 += v * v, s4 += v * v * v * v, in1 += fabs(v) < 1, zmax = fmax(zmax, fabs(v));
    }
    CHECK_NEAR(s1 / n, 0.0, 0.005);                     /* the mean's sd: 0.0009 */
    CHECK_NEAR(s2 / n, m2, 0.005);                      /* 0.7737; sd 0.0009 */
    CHECK_NEAR(s4 / n, m4, 0.02);                       /* 1.4162; sd 0.002 */
    CHECK_NEAR(in1 / n, erf(1 / sqrt(2.0)) / Z, 0.003); /* 0.7152; sd 0.0004 */
    CHECK(zmax > 1.995);                                /* the whole support is reached */
    qsort(z, (size_t)n, sizeof *z, cmp_float);
    double ks = 0;
    for (int64_t i = 0; i < n; i++) {
        double f = (erf(z[i] / sqrt(2.0)) + Z) / (2 * Z);
        ks = fmax(ks, fmax(fabs(f - (double)i / n), fabs(f - (double)(i + 1) / n)));
    }
    CHECK(ks < 1.95 / sqrt((double)n));
    free(z);
}

TEST(seed_changes_initial_values)
{
    float v[2];
    for (int r = 0; r < 2; r++) {
        fl_prog *p = fl_prog_create();
        fl_prog_set_seed(p, 100 + (uint64_t)r);
        fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
        CHECK(fl_layer_fc(FL_VARS(x), 2, NULL));
        fl_exe *e;
        v[r] = fl_tensor_f32(startup_param(p, &e, "fc_0.w_0"))[0];
        fl_exe_free(e);
        fl_prog_free(p);
    }
    CHECK(v[0] != v[1]);
}

TEST(clone_for_test_drops_training_ops)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *pr = fl_layer_fc(FL_VARS(x), 2, "softmax");
    fl_var *cost = fl_layer_mean(fl_layer_cross_entropy(pr, y));
    fl_prog *test = fl_prog_clone(p, 1);
    fl_opt *o = fl_opt_sgd(0.01f);
    CHECK_OK(fl_opt_set_exponential_decay(o, 10, 0.5f, 1));
    CHECK_OK(fl_opt_minimize(o, cost));
    fl_opt_free(o);
    fl_prog *test2 = fl_prog_clone(p, 1);
    CHECK_EQ_INT(fl_prog_num_ops(test), fl_prog_num_ops(test2));
    CHECK(fl_prog_num_ops(p) > fl_prog_num_ops(test2));
    for (int i = 0; i < fl_prog_num_ops(test2); i++) {
        const char *t = fl_prog_op_type(test2, i);
        CHECK(strstr(t, "_grad") == NULL && strcmp(t, "sgd") != 0 && strcmp(t, "increment") != 0);
    }
    /* a full clone trains like the original */
    fl_prog *full = fl_prog_clone(p, 0);
    CHECK_EQ_INT(fl_prog_num_ops(full), fl_prog_num_ops(p));
    CHECK_EQ_INT(fl_prog_num_ops(fl_prog_startup(full)), fl_prog_num_ops(fl_prog_startup(p)));
    fl_prog_free(full);
    fl_prog_free(test);
    fl_prog_free(test2);
    fl_prog_free(p);
}

TEST(null_inputs_propagate)
{
    CHECK(fl_layer_fc(FL_VARS(NULL), 3, NULL) == NULL);
    CHECK(fl_layer_tanh(NULL) == NULL);
    CHECK(fl_layer_mean(NULL) == NULL);
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK(fl_opt_minimize(o, NULL) != FL_OK);
    CHECK_STR_HAS(fl_last_error(), "loss is NULL");
    fl_opt_free(o);
}

TEST_MAIN(T(backward_stop_gradient_and_no_grad), T(backward_needs_scalar_loss), T(backward_shared_parameter),
          T(initializers), T(truncated_normal_distribution), T(seed_changes_initial_values),
          T(clone_for_test_drops_training_ops), T(null_inputs_propagate))
