/* test_models.c - the model builders of fleet/models.h (MLP and CNN; CTR-DNN is exercised by
 * test_ctr.c and test_trainer.c): data and output shapes, parameters, configuration errors,
 * and one training step. */
#include "testhelp.h"

static int count_params(const fl_prog *p)
{
    int n = 0;
    for (int i = 0; i < fl_prog_num_vars(p); i++) n += fl_var_is_param(fl_prog_var_at(p, i));
    return n;
}

/* One SGD step of p on a batch of n; returns the loss. */
static float one_step(fl_prog *p, fl_var *loss, const char *xn, int xdim, const int64_t *xshape, const char *yn, int n,
                      int classes)
{
    fl_opt *o = fl_opt_sgd(0.01f);
    CHECK_OK(fl_opt_minimize(o, loss));
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    int64_t numel = 1;
    for (int i = 0; i < xdim; i++) numel *= xshape[i];
    float *x = malloc((size_t)numel * sizeof *x);
    int64_t *y = malloc((size_t)n * sizeof *y);
    CHECK(x && y);
    th_fill_uniform(x, numel, 0, 1, 7);
    for (int i = 0; i < n; i++) y[i] = i % classes;
    fl_tensor *xt = th_f32(xdim, xshape, x), *yt = th_i64(2, (const int64_t[]){n, 1}, y);
    fl_feed feed[] = {{xn, xt}, {yn, yt}};
    const char *fetch[] = {fl_var_name(loss)};
    fl_tensor *out;
    CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 1, &out));
    float v = fl_tensor_f32(out)[0];
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    free(x);
    free(y);
    fl_exe_free(e);
    fl_opt_free(o);
    return v;
}

TEST(mlp_default_is_the_quick_start_network)
{
    fl_prog *p = fl_prog_create();
    fl_model_mlp_config c = fl_model_mlp_default();
    fl_model_mlp m;
    CHECK_OK(fl_model_mlp_build(p, &c, &m));
    CHECK(!strcmp(fl_var_name(m.input), "x") && !strcmp(fl_var_name(m.label), "y"));
    CHECK_EQ_INT(fl_var_shape(m.input)[1], 32);
    CHECK_EQ_INT(fl_var_dtype(m.label), FL_INT64);
    CHECK_EQ_INT(fl_var_shape(m.predict)[1], 2);
    CHECK_EQ_INT(count_params(p), 6);
    CHECK(fl_prog_var(p, "fc_0.w_0") && fl_prog_var(p, "fc_2.b_0"));
    float loss = one_step(p, m.loss, "x", 2, (const int64_t[]){4, 32}, "y", 4, 2);
    CHECK(isfinite(loss) && loss > 0);
    fl_prog_free(p);
}

TEST(mlp_fmnist_and_named_parameters)
{
    fl_prog *p = fl_prog_create();
    fl_model_mlp_config c = fl_model_mlp_fmnist();
    c.param_prefix = "fc";
    fl_model_mlp m;
    CHECK_OK(fl_model_mlp_build(p, &c, &m));
    CHECK(!strcmp(fl_var_name(m.input), "img") && !strcmp(fl_var_name(m.label), "label"));
    CHECK_EQ_INT(fl_var_shape(m.input)[1], 784);
    CHECK_EQ_INT(fl_var_shape(m.predict)[1], 10);
    const fl_var *w2 = fl_prog_var(p, "fc2.w");
    CHECK(w2 && fl_var_is_param(w2) && fl_prog_var(p, "fc3.b"));
    CHECK_EQ_INT(fl_var_shape(w2)[0], 512);
    CHECK_EQ_INT(fl_var_shape(w2)[1], 256);
    fl_prog_free(p);
}

TEST(cnn_default_and_batch_norm)
{
    for (int bn = 0; bn < 2; bn++) {
        fl_prog *p = fl_prog_create();
        fl_model_cnn_config c = fl_model_cnn_default();
        c.batch_norm = bn;
        fl_model_cnn m;
        CHECK_OK(fl_model_cnn_build(p, &c, &m));
        CHECK_EQ_INT(fl_var_ndim(m.input), 4);
        CHECK_EQ_INT(fl_var_shape(m.input)[1], 1);
        CHECK_EQ_INT(fl_var_shape(m.input)[3], 28);
        CHECK_EQ_INT(fl_var_shape(m.predict)[1], 10);
        /* 2 conv (w, b), [2 batch_norm (scale, bias)], 2 fc (w, b) */
        CHECK_EQ_INT(count_params(p), bn ? 12 : 8);
        float loss = one_step(p, m.loss, "img", 4, (const int64_t[]){3, 1, 28, 28}, "label", 3, 10);
        CHECK(isfinite(loss) && loss > 0);
        fl_prog_free(p);
    }
}

TEST(config_errors_name_the_field)
{
    fl_prog *p = fl_prog_create();
    fl_model_mlp_config c = fl_model_mlp_default();
    fl_model_mlp m;
    c.hidden[1] = 0;
    CHECK_FAILS(fl_model_mlp_build(p, &c, &m), FL_EINVAL, "hidden[1]");
    c = fl_model_mlp_default();
    c.nhidden = FL_MODEL_MLP_MAX_LAYERS + 1;
    CHECK_FAILS(fl_model_mlp_build(p, &c, &m), FL_EINVAL, "nhidden");
    c = fl_model_mlp_default();
    c.num_classes = 1;
    CHECK_FAILS(fl_model_mlp_build(p, &c, &m), FL_EINVAL, "num_classes");
    CHECK_FAILS(fl_model_mlp_build(p, NULL, &m), FL_EINVAL, "NULL");

    fl_model_cnn_config cc = fl_model_cnn_default();
    fl_model_cnn cm;
    cc.height = cc.width = 12; /* 12 -conv5-> 8 -pool2-> 4 -conv5-> 0 */
    CHECK_FAILS(fl_model_cnn_build(p, &cc, &cm), FL_EINVAL, "empty after conv block 1");
    cc = fl_model_cnn_default();
    cc.filters[0] = -3;
    CHECK_FAILS(fl_model_cnn_build(p, &cc, &cm), FL_EINVAL, "filters[0]");
    CHECK_EQ_INT(fl_prog_num_vars(p), 0); /* nothing was built */
    fl_prog_free(p);
}

TEST(build_error_of_the_program_is_returned)
{
    fl_prog *p = fl_prog_create();
    fl_model_mlp_config c = fl_model_mlp_default();
    fl_model_mlp m;
    CHECK_OK(fl_model_mlp_build(p, &c, &m));
    /* the same data names again: the program reports the clash */
    CHECK_FAILS(fl_model_mlp_build(p, &c, &m), FL_EINVAL, "already exists");
    CHECK(fl_prog_status(p) != FL_OK);
    fl_prog_free(p);
}

TEST_MAIN(T(mlp_default_is_the_quick_start_network), T(mlp_fmnist_and_named_parameters), T(cnn_default_and_batch_norm),
          T(config_errors_name_the_field), T(build_error_of_the_program_is_returned))
