/* test_fuse_bn.c - batch_norm + elementwise_add + relu fused into one fused_bn_add_activation
 * by append_backward (src/graph/fuse.c, the kernels in src/graph/ops_bn.c): a small ResNet
 * (basic blocks, 16 to 64 channels, 12x12 images) trains three momentum steps with
 * FLEET_FUSE_BN_ADD_ACT=1 and 0, with the blocked layouts on and off, and gives the same
 * losses, filter and batch_norm gradients and parameters; every block end is fused (one
 * fused op per block, no relu or elementwise_add left); a variable named in no_grad is
 * never fused away, nor a block whose residual is the batch_norm's own input.  The finite-difference checks of the fused op are in test_grad_conv. */
#include "gradcheck.h"

#include "graph/op_layout.h"
#include "fleet/models.h"

enum { N = 4, STEPS = 3, NF = 5, BLOCKS = 6 };
/* the loss, the first convolution's filter gradient, a fused block end's Scale and Bias
 * gradients (the last block's second batch_norm), and the last convolution's filter */
static const char *const names[NF] = {NULL, "conv2d_0.w_0@GRAD", "batch_norm_14.w_0@GRAD", "batch_norm_14.b_0@GRAD",
                                      "conv2d_14.w_0"};

typedef struct {
    float loss[STEPS];
    float *v[NF];
    int64_t n[NF];
    int fused, fused_grad, relu, add;
} run_result;

static void count_ops(const fl_prog *p, run_result *r)
{
    for (int i = 0; i < p->nops; i++) {
        const char *t = p->ops[i]->def->type;
        r->fused += !strcmp(t, "fused_bn_add_activation");
        r->fused_grad += !strcmp(t, "fused_bn_add_activation_grad");
        r->relu += !strcmp(t, "relu") || !strcmp(t, "relu_grad");
        r->add += !strcmp(t, "elementwise_add") || !strcmp(t, "elementwise_add_grad");
    }
}

/* ResNet-14 trained STEPS steps with FLEET_FUSE_BN_ADD_ACT=fuse, FLEET_DNN_LAYOUT=layout. */
static void train(int fuse, int layout, run_result *r)
{
    setenv("FLEET_FUSE_BN_ADD_ACT", fuse ? "1" : "0", 1);
    setenv("FLEET_DNN_LAYOUT", layout ? "1" : "0", 1);
    fl__layout_enabled_reload();
    memset(r, 0, sizeof *r);
    fl_prog *p = fl_prog_create();
    fl_model_resnet_config c = fl_model_resnet_default();
    c.channels = 3, c.height = c.width = 12, c.depth = 14, c.base_filters = 16, c.num_classes = 5;
    fl_model_resnet m;
    CHECK_OK(fl_model_resnet_build(p, &c, &m));
    fl_opt *o = fl_opt_momentum(0.05f, 0.9f, 0);
    CHECK_OK(fl_opt_minimize(o, m.loss));
    count_ops(p, r);
    const char *f[NF];
    memcpy(f, names, sizeof f);
    f[0] = fl_var_name(m.loss);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    fl_tensor *x = fl_tensor_create(FL_FLOAT32, FL_SHAPE(N, 3, c.height, c.width));
    fl_tensor *y = fl_tensor_create(FL_INT64, FL_SHAPE(N, 1));
    for (int64_t i = 0; i < x->numel; i++) ((float *)x->data)[i] = (float)sin((double)i * 0.37);
    for (int64_t i = 0; i < N; i++) ((int64_t *)y->data)[i] = i % 5;
    fl_feed feed[2] = {{fl_var_name(m.input), x}, {fl_var_name(m.label), y}};
    fl_tensor *out[NF];
    for (int s = 0; s < STEPS; s++) {
        CHECK_OK(fl_exe_run(e, p, feed, 2, f, NF, out));
        r->loss[s] = ((float *)out[0]->data)[0];
    }
    for (int k = 0; k < NF; k++) {
        r->n[k] = out[k]->numel;
        r->v[k] = malloc((size_t)out[k]->numel * sizeof(float));
        memcpy(r->v[k], out[k]->data, (size_t)out[k]->numel * sizeof(float));
    }
    fl_tensor_free(x), fl_tensor_free(y);
    fl_exe_free(e);
    fl_opt_free(o);
    fl_prog_free(p);
}

static void compare(int layout)
{
    run_result on, off;
    train(1, layout, &on);
    train(0, layout, &off);
    unsetenv("FLEET_FUSE_BN_ADD_ACT");
    unsetenv("FLEET_DNN_LAYOUT");
    fl__layout_enabled_reload();
    /* every block end fused: one op each way per block, no relu or add left (the other
     * relus are batch_norm's fuse_with_relu) */
    CHECK_EQ_INT(on.fused, BLOCKS);
    CHECK_EQ_INT(on.fused_grad, BLOCKS);
    CHECK_EQ_INT(on.relu, 0);
    CHECK_EQ_INT(on.add, 0);
    CHECK_EQ_INT(off.fused + off.fused_grad, 0);
    CHECK_EQ_INT(off.relu, 2 * BLOCKS);
    for (int s = 0; s < STEPS; s++) {
        printf("  step %d: loss %.7g fused, %.7g not\n", s, on.loss[s], off.loss[s]);
        CHECK_NEAR(on.loss[s], off.loss[s], 1e-5 * (1.0 + fabs(off.loss[s])));
    }
    for (int k = 1; k < NF; k++) {
        CHECK_EQ_INT((int)on.n[k], (int)off.n[k]);
        double md = 0.0, mx = 0.0;
        for (int64_t i = 0; i < on.n[k]; i++) {
            double d = fabs((double)on.v[k][i] - off.v[k][i]);
            md = d > md ? d : md;
            mx = fabs(off.v[k][i]) > mx ? fabs(off.v[k][i]) : mx;
        }
        printf("  %s: max |fused - not| %.3g (max |value| %.3g)\n", names[k], md, mx);
        if (md > 1e-4 * (1.0 + mx)) TFAIL("%s differs by %g (max |value| %g) fused and not", names[k], md, mx);
    }
    for (int k = 0; k < NF; k++) free(on.v[k]), free(off.v[k]);
}

TEST(fused_same_as_unfused_blocked) { compare(1); }
TEST(fused_same_as_unfused_plain) { compare(0); }

/* A variable named in no_grad (likewise a recompute checkpoint) stays: that block end is
 * left as three ops, the others are fused. */
TEST(kept_name_not_fused)
{
    fl_prog *p = fl_prog_create();
    fl_model_resnet_config c = fl_model_resnet_default();
    c.channels = 3, c.height = c.width = 12, c.depth = 14, c.base_filters = 16, c.num_classes = 5;
    fl_model_resnet m;
    CHECK_OK(fl_model_resnet_build(p, &c, &m));
    const char *keep[1] = {"batch_norm_14.tmp_2"}; /* the last block's batch_norm output */
    CHECK(fl_prog_var(p, keep[0]) != NULL);
    CHECK_OK(fl_append_backward(m.loss, keep, 1, NULL, NULL));
    CHECK(fl_prog_var(p, keep[0]) != NULL);
    run_result r;
    memset(&r, 0, sizeof r);
    count_ops(p, &r);
    CHECK_EQ_INT(r.fused, BLOCKS - 1);
    fl_prog_free(p);
}

/* relu(batch_norm(x) + x): Z would be X, whose two gradients would come from one op; left as
 * three ops.  relu(batch_norm(x) + z) next to it is fused. */
TEST(z_same_as_x_not_fused)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4, 3, 3), FL_FLOAT32, 0);
    fl_var *z = fl_layer_data(p, "z", FL_SHAPE(4, 3, 3), FL_FLOAT32, 0);
    fl_var *a = fl_layer_relu(fl_layer_elementwise_add(fl_layer_batch_norm(x, NULL, 0, 0.9f, 1e-5f, NULL), x, -1));
    fl_var *b = fl_layer_relu(fl_layer_elementwise_add(fl_layer_batch_norm(a, NULL, 0, 0.9f, 1e-5f, NULL), z, -1));
    fl_var *loss = fl_layer_mean(b);
    CHECK(loss != NULL);
    CHECK_OK(fl_append_backward(loss, NULL, 0, NULL, NULL));
    run_result r;
    memset(&r, 0, sizeof r);
    count_ops(p, &r);
    CHECK_EQ_INT(r.fused, 1);
    CHECK_EQ_INT(r.relu, 2);
    fl_prog_free(p);
}

TEST_MAIN(T(fused_same_as_unfused_blocked), T(fused_same_as_unfused_plain), T(kept_name_not_fused),
          T(z_same_as_x_not_fused))
