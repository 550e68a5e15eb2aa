/* test_grad_basic.c - finite-difference checks of the ops in ops_basic.c (fc, activations,
 * softmax, cross_entropy, mean, sum through shared use).  Tolerances: see gradcheck.h. */
#include "gradcheck.h"

static const gc_opts defaults = {0, 0, 0, 0};

TEST(grad_fc_multi_input)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(4, 3), -1, 1);
    fl_var *b = gc_input(p, "b", FL_SHAPE(4, 5), -1, 1);
    fl_var *o = fl_layer_fc(FL_VARS(a, b), 6, NULL);
    gc_check(gc_loss(o), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

static void act_case(const char *act)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(5, 7), -2, 2);
    fl_var *o = fl_layer_fc(FL_VARS(a), 4, act);
    gc_check(gc_loss(o), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_fc_tanh) { act_case("tanh"); }
TEST(grad_fc_relu) { act_case("relu"); }
TEST(grad_fc_sigmoid) { act_case("sigmoid"); }
TEST(grad_fc_softmax) { act_case("softmax"); }
TEST(grad_fc_softsign) { act_case("softsign"); }

static void unary_case(fl_var *(*fn)(fl_var *), float lo, float hi)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(3, 6), lo, hi);
    gc_check(gc_loss(fn(a)), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_relu) { unary_case(fl_layer_relu, 0.05f, 1.0f); }
TEST(grad_relu_negative) { unary_case(fl_layer_relu, -1.0f, -0.05f); }
TEST(grad_tanh) { unary_case(fl_layer_tanh, -2, 2); }
TEST(grad_sigmoid) { unary_case(fl_layer_sigmoid, -3, 3); }
TEST(grad_softsign) { unary_case(fl_layer_softsign, -3, 3); }
TEST(grad_softmax) { unary_case(fl_layer_softmax, -2, 2); }

TEST(grad_cross_entropy_mean)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(4, 3), -1, 1);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *loss = fl_layer_mean(fl_layer_cross_entropy(fl_layer_softmax(a), y));
    fl_tensor *yt = th_i64(2, (const int64_t[]){4, 1}, (const int64_t[]){0, 2, 1, 2});
    fl_feed feed[] = {{"y", yt}};
    gc_check(loss, feed, 1, NULL, defaults);
    fl_tensor_free(yt);
    fl_prog_free(p);
}

/* A variable read by two ops gets its gradients summed. */
TEST(grad_shared_input_sum)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(3, 4), -1, 1);
    fl_var *h1 = fl_layer_tanh(a);
    fl_var *h2 = fl_layer_fc(FL_VARS(a, h1), 3, "sigmoid");
    gc_check(gc_loss(h2), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST_MAIN(T(grad_fc_multi_input), T(grad_fc_tanh), T(grad_fc_relu), T(grad_fc_sigmoid), T(grad_fc_softmax),
          T(grad_fc_softsign), T(grad_relu), T(grad_relu_negative), T(grad_tanh), T(grad_sigmoid), T(grad_softsign),
          T(grad_softmax), T(grad_cross_entropy_mean), T(grad_shared_input_sum))
