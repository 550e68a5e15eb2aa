/* test_grad_nn.c - finite-difference checks of the ops in ops_nn.c: elementwise_* for both
 * inputs and the broadcast layouts ([M,N]+[N], [A,B,C]+[B] at axis 1, [M,N]+[M,1],
 * y of shape [1]), gradients requested for one input only, scale, dropout (fixed seed, both
 * implementations), reduce_sum and cos_sim (including a broadcast Y).  Tolerances: see
 * gradcheck.h. */
#include "gradcheck.h"

static const gc_opts defaults = {0, 0, 0, 0};

typedef fl_var *(*ew_fn)(fl_var *, fl_var *, int);

/* gc_loss weighs only along the last dim; for outputs whose last dim is 1 ([N, 1] of
 * cos_sim, keep_dim reductions) multiply first by frozen random weights of the same shape
 * so that every element gets its own weight. */
static fl_var *weigh(fl_var *o)
{
    fl_param_attr a;
    memset(&a, 0, sizeof a);
    a.frozen = 1;
    a.init = fl_init_uniform(-1, 1);
    fl_var *w = fl_layer_create_parameter(fl_var_prog(o), fl_var_ndim(o), fl_var_shape(o), FL_FLOAT32, &a);
    return fl_layer_elementwise_mul(o, w, -1);
}

/* x, y parameters; y in [ylo, yhi] (kept away from 0 for div). */
static void ew_grad(ew_fn fn, int axis, int xn, const int64_t *xs, int yn, const int64_t *ys, float ylo, float yhi)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", xn, xs, -1, 1);
    fl_var *y = gc_input(p, "y", yn, ys, ylo, yhi);
    fl_var *o = fn(x, y, axis);
    CHECK(o != NULL);
    gc_check(gc_loss(o), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

/* All four ops on one layout. */
static void ew_all(int axis, int xn, const int64_t *xs, int yn, const int64_t *ys)
{
    ew_grad(fl_layer_elementwise_add, axis, xn, xs, yn, ys, -1, 1);
    ew_grad(fl_layer_elementwise_sub, axis, xn, xs, yn, ys, -1, 1);
    ew_grad(fl_layer_elementwise_mul, axis, xn, xs, yn, ys, -1, 1);
    ew_grad(fl_layer_elementwise_div, axis, xn, xs, yn, ys, 1, 2);
}

TEST(grad_ew_same_shape) { ew_all(-1, FL_SHAPE(3, 4), FL_SHAPE(3, 4)); }
TEST(grad_ew_rows) { ew_all(-1, FL_SHAPE(5, 4), FL_SHAPE(4)); }
TEST(grad_ew_middle_axis) { ew_all(1, FL_SHAPE(2, 3, 4), FL_SHAPE(3)); }
TEST(grad_ew_leading_axis) { ew_all(0, FL_SHAPE(2, 3, 4), FL_SHAPE(2, 3)); }
TEST(grad_ew_column_trimmed) { ew_all(-1, FL_SHAPE(4, 3), FL_SHAPE(4, 1)); }
TEST(grad_ew_scalar_y) { ew_all(-1, FL_SHAPE(3, 4), FL_SHAPE(1)); }

/* Only the gradient that is needed is computed: x is fed data, so only y@GRAD exists;
 * then y is frozen, so only x@GRAD exists. */
TEST(grad_ew_one_input_only)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *y = gc_input(p, "y", FL_SHAPE(4), 1, 2);
    fl_var *loss = gc_loss(fl_layer_elementwise_div(x, y, -1));
    float xd[12];
    th_fill_uniform(xd, 12, -1, 1, 5);
    fl_tensor *xt = th_f32(2, (const int64_t[]){3, 4}, xd);
    fl_feed feed[] = {{"x", xt}};
    gc_check(loss, feed, 1, NULL, defaults);
    CHECK(fl_prog_var(p, "y@GRAD") != NULL);
    CHECK(fl_prog_var(p, "x@GRAD") == NULL);
    fl_prog_free(p);

    p = fl_prog_create();
    fl_param_attr fa;
    memset(&fa, 0, sizeof fa);
    fa.name = "y";
    fa.frozen = 1;
    fa.init = fl_init_uniform(1, 2);
    y = fl_layer_create_parameter(p, FL_SHAPE(4), FL_FLOAT32, &fa);
    x = gc_input(p, "x", FL_SHAPE(3, 4), -1, 1);
    gc_check(gc_loss(fl_layer_elementwise_mul(x, y, -1)), NULL, 0, NULL, defaults);
    CHECK(fl_prog_var(p, "x@GRAD") != NULL);
    CHECK(fl_prog_var(p, "y@GRAD") == NULL);
    fl_prog_free(p);
    fl_tensor_free(xt);
}

/* The same variable as both inputs: its two contributions are summed (d(a*a) = 2a). */
TEST(grad_ew_same_var_both_inputs)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(3, 4), -1, 1);
    gc_check(gc_loss(fl_layer_elementwise_mul(a, a, -1)), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_scale)
{
    for (int after = 0; after < 2; after++) {
        fl_prog *p = fl_prog_create();
        fl_var *a = gc_input(p, "a", FL_SHAPE(3, 4), -1, 1);
        gc_check(gc_loss(fl_layer_scale(fl_layer_tanh(a), -2.5f, 0.75f, after)), NULL, 0, NULL, defaults);
        fl_prog_free(p);
    }
}

/* Every evaluation runs at step 0 of a fresh executor, so the mask repeats. */
static void dropout_grad_case(const char *impl, float prob)
{
    fl_prog *p = fl_prog_create();
    fl_prog_set_seed(p, 1234);
    fl_var *a = gc_input(p, "a", FL_SHAPE(6, 8), -1, 1);
    fl_var *o = fl_layer_dropout(fl_layer_tanh(a), prob, impl);
    gc_check(gc_loss(o), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_dropout_downgrade) { dropout_grad_case("downgrade_in_infer", 0.4f); }
TEST(grad_dropout_upscale) { dropout_grad_case("upscale_in_train", 0.4f); }
TEST(grad_dropout_prob_one_upscale) { dropout_grad_case("upscale_in_train", 1.0f); }

static void reduce_grad(const int *dims, int nd, int keep)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(2, 3, 4), -1, 1);
    fl_var *o = fl_layer_reduce_sum(fl_layer_tanh(a), dims, nd, keep);
    gc_check(gc_loss(weigh(o)), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_reduce_sum_middle) { reduce_grad((const int[]){1}, 1, 0); }
TEST(grad_reduce_sum_last) { reduce_grad((const int[]){2}, 1, 0); }
TEST(grad_reduce_sum_outer_inner_keep) { reduce_grad((const int[]){0, -1}, 2, 1); }
TEST(grad_reduce_sum_leading) { reduce_grad((const int[]){0}, 1, 0); }
TEST(grad_reduce_sum_all) { reduce_grad(NULL, 0, 0); }

/* reduce_sum as the loss itself ([1]). */
TEST(grad_reduce_sum_as_loss)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(3, 5), -1, 1);
    fl_var *loss = fl_layer_reduce_sum(fl_layer_sigmoid(a), NULL, 0, 0);
    gc_check(loss, NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

static void cos_grad(int64_t ny)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(4, 5), -1, 1);
    fl_var *y = gc_input(p, "y", 2, (const int64_t[]){ny, 5}, -1, 1);
    gc_check(gc_loss(weigh(fl_layer_cos_sim(x, y))), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_cos_sim) { cos_grad(4); }
TEST(grad_cos_sim_broadcast_y) { cos_grad(1); }

/* A chain mixing the nn ops: scale(reduce_sum(dropout(x) * y + b)). */
TEST(grad_nn_chain)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(4, 3, 2), -1, 1);
    fl_var *y = gc_input(p, "y", FL_SHAPE(3, 2), -1, 1);
    fl_var *b = gc_input(p, "b", FL_SHAPE(3), -1, 1);
    fl_var *h = fl_layer_elementwise_mul(fl_layer_dropout(x, 0.3f, "upscale_in_train"), y, -1);
    h = fl_layer_elementwise_add(h, b, 1);
    h = fl_layer_scale(fl_layer_reduce_sum(h, (const int[]){2}, 1, 0), 0.5f, 0.1f, 1);
    gc_check(gc_loss(h), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST_MAIN(T(grad_ew_same_shape), T(grad_ew_rows), T(grad_ew_middle_axis), T(grad_ew_leading_axis),
          T(grad_ew_column_trimmed), T(grad_ew_scalar_y), T(grad_ew_one_input_only), T(grad_ew_same_var_both_inputs),
          T(grad_scale), T(grad_dropout_downgrade), T(grad_dropout_upscale), T(grad_dropout_prob_one_upscale),
          T(grad_reduce_sum_middle), T(grad_reduce_sum_last), T(grad_reduce_sum_outer_inner_keep),
          T(grad_reduce_sum_leading), T(grad_reduce_sum_all), T(grad_reduce_sum_as_loss), T(grad_cos_sim),
          T(grad_cos_sim_broadcast_y), T(grad_nn_chain))
