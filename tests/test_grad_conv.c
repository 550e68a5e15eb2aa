/* test_grad_conv.c - finite-difference checks of the ops in ops_conv.c.
 *   conv2d: stride 1 and 2, padding 0 and 1, dilation 2, groups 2 and depthwise, 1x1
 *     (no im2col), non-square filters and strides, with and without bias, fused
 *     activations (tanh, sigmoid; relu with eps 1e-3 so that no pre-activation crosses
 *     0), gradients requested for one input only, a filter shared by two layers;
 *   pool2d: max on inputs whose values are a permutation of multiples of 0.1 (so the
 *     argmax of every window is stable under the +-eps perturbation), avg exclusive and
 *     counting padding, global max and avg, ceil_mode;
 *   batch_norm: 2-D and 4-D inputs in training mode (X, Scale and Bias), with a fused-in
 *     activation, relu fused into the op (fuse_with_relu, no relu op either way), and with
 *     use_global_stats / is_test; relu(batch_norm(x) + z) as the one fused_bn_add_activation
 *     append_backward makes of it (Z an input or a second batch_norm's output); the training-mode output does not
 *     depend on the moving statistics that every evaluation updates (checked directly).
 * Every output is first multiplied by frozen random weights of its own shape, so that
 * each element gets its own weight in the loss (gc_loss alone weighs only the last dim).
 * Tolerances, tighter than gradcheck.h's defaults (the gradients here are O(1e-2), where
 * an atol of 2e-3 would hide a 10% error): eps 1e-2, rtol 1e-2, atol 1e-4; for relu eps
 * 1e-3, rtol 1e-2, atol 2e-4. */
#include "gradcheck.h"

#include "graph/graph_internal.h" /* fl__op_register_group */

extern const fl_op_def *const fl__ops_conv[];

static const gc_opts defaults = {1e-2, 1e-2, 1e-4, 0};
static const gc_opts fine_eps = {1e-3, 1e-2, 2e-4, 0};

static fl_prog *newprog(void)
{
    CHECK_OK(fl__op_register_group(fl__ops_conv));
    return fl_prog_create();
}

/* o * frozen uniform(-1, 1) weights of o's shape (broadcast over a run-time batch dim). */
static fl_var *weigh(fl_var *o)
{
    CHECK(o != NULL);
    fl_param_attr a;
    memset(&a, 0, sizeof a);
    a.frozen = 1;
    a.init = fl_init_uniform(-1, 1);
    int batch = fl_var_shape(o)[0] < 0;
    fl_var *w = fl_layer_create_parameter(fl_var_prog(o), fl_var_ndim(o) - batch, fl_var_shape(o) + batch, FL_FLOAT32, &a);
    return fl_layer_elementwise_mul(o, w, batch);
}

/* ---- conv2d ------------------------------------------------------------------------------- */

typedef struct {
    int64_t n, c, h, w, m;
    int kh, kw, sh, sw, ph, pw, dh, dw, g, bias;
    const char *act;
} conv_cfg;

static fl_conv2d_attr conv_attr(const conv_cfg *k)
{
    fl_conv2d_attr a;
    memset(&a, 0, sizeof a);
    a.stride[0] = k->sh, a.stride[1] = k->sw, a.padding[0] = k->ph, a.padding[1] = k->pw;
    a.dilation[0] = k->dh, a.dilation[1] = k->dw, a.groups = k->g, a.no_bias = !k->bias;
    a.filter.init = fl_init_uniform(-1, 1);
    a.bias.init = fl_init_uniform(-0.5f, 0.5f);
    return a;
}

/* Input, filter and bias all parameters: all three gradients are checked. */
static void conv_grad(conv_cfg k, gc_opts o)
{
    fl_prog *p = newprog();
    fl_var *x = gc_input(p, "x", FL_SHAPE(k.n, k.c, k.h, k.w), -1, 1);
    fl_conv2d_attr a = conv_attr(&k);
    fl_var *y = fl_layer_conv2d(x, k.m, k.kh, k.kw, k.act, &a);
    gc_check(gc_loss(weigh(y)), NULL, 0, NULL, o);
    CHECK(fl_prog_var(p, "x@GRAD") && fl_prog_var(p, "conv2d_0.w_0@GRAD"));
    CHECK_EQ_INT(fl_prog_var(p, "conv2d_0.b_0@GRAD") != NULL, k.bias);
    fl_prog_free(p);
}

/* n c h w m | kh kw sh sw ph pw dh dw g bias act */
TEST(grad_conv_s1_p0) { conv_grad((conv_cfg){2, 3, 5, 5, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1, NULL}, defaults); }
TEST(grad_conv_s2_p1) { conv_grad((conv_cfg){2, 3, 6, 7, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, NULL}, defaults); }
TEST(grad_conv_dilation2) { conv_grad((conv_cfg){1, 2, 7, 7, 3, 3, 3, 1, 1, 1, 1, 2, 2, 1, 1, NULL}, defaults); }
TEST(grad_conv_groups2) { conv_grad((conv_cfg){2, 4, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1, NULL}, defaults); }
TEST(grad_conv_depthwise) { conv_grad((conv_cfg){2, 3, 6, 5, 3, 3, 3, 2, 1, 1, 1, 1, 1, 3, 1, NULL}, defaults); }
TEST(grad_conv_no_bias) { conv_grad((conv_cfg){2, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, NULL}, defaults); }
TEST(grad_conv_1x1) { conv_grad((conv_cfg){2, 4, 3, 4, 6, 1, 1, 1, 1, 0, 0, 1, 1, 2, 1, NULL}, defaults); }
TEST(grad_conv_nonsquare) { conv_grad((conv_cfg){2, 2, 7, 6, 3, 2, 3, 2, 1, 0, 1, 1, 2, 1, 1, NULL}, defaults); }
TEST(grad_conv_tanh) { conv_grad((conv_cfg){2, 3, 5, 5, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, "tanh"}, defaults); }
TEST(grad_conv_sigmoid) { conv_grad((conv_cfg){2, 4, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1, "sigmoid"}, defaults); }
TEST(grad_conv_relu) { conv_grad((conv_cfg){2, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "relu"}, fine_eps); }

/* Only the gradients asked for: x fed -> no x@GRAD; frozen filter, no bias -> only x@GRAD. */
TEST(grad_conv_one_input_only)
{
    fl_prog *p = newprog();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2, 5, 5), FL_FLOAT32, 0);
    conv_cfg k = {3, 2, 5, 5, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "tanh"};
    fl_conv2d_attr a = conv_attr(&k);
    fl_var *loss = gc_loss(weigh(fl_layer_conv2d(x, 3, 3, 3, "tanh", &a)));
    float xd[150];
    th_fill_uniform(xd, 150, -1, 1, 5);
    fl_tensor *xt = th_f32(4, (const int64_t[]){3, 2, 5, 5}, xd);
    fl_feed feed[] = {{"x", xt}};
    gc_check(loss, feed, 1, NULL, defaults);
    CHECK(fl_prog_var(p, "x@GRAD") == NULL);
    CHECK(fl_prog_var(p, "conv2d_0.w_0@GRAD") != NULL);
    fl_tensor_free(xt);
    fl_prog_free(p);

    p = newprog();
    x = gc_input(p, "x", FL_SHAPE(3, 2, 5, 5), -1, 1);
    a.filter.frozen = 1;
    a.no_bias = 1;
    gc_check(gc_loss(weigh(fl_layer_conv2d(x, 3, 3, 3, NULL, &a))), NULL, 0, NULL, defaults);
    CHECK(fl_prog_var(p, "x@GRAD") != NULL);
    CHECK(fl_prog_var(p, "conv2d_0.w_0@GRAD") == NULL);
    fl_prog_free(p);
}

/* One filter (by name) used by two conv layers: its two gradients are summed. */
TEST(grad_conv_shared_filter)
{
    fl_prog *p = newprog();
    fl_var *x1 = gc_input(p, "x1", FL_SHAPE(2, 2, 5, 5), -1, 1), *x2 = gc_input(p, "x2", FL_SHAPE(1, 2, 4, 6), -1, 1);
    conv_cfg k = {0, 2, 0, 0, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, NULL};
    fl_conv2d_attr a = conv_attr(&k);
    a.filter.name = "shared_w";
    fl_var *y1 = fl_layer_conv2d(x1, 3, 3, 3, NULL, &a), *y2 = fl_layer_conv2d(x2, 3, 3, 3, "tanh", &a);
    fl_var *l = fl_layer_elementwise_add(gc_loss(weigh(y1)), gc_loss(weigh(y2)), -1);
    gc_check(l, NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

/* ---- pool2d ------------------------------------------------------------------------------ */

typedef struct {
    int64_t n, c, h, w;
    int kh, kw, sh, sw, ph, pw, global, max, inclusive, ceil;
} pool_cfg;

/* x = parameter (initialised to 0) + fed values: a random permutation of 0.1 * i, so the
 * values in any window differ by >= 0.1 > 2 eps and the argmax never moves. */
static void pool_grad(pool_cfg k)
{
    fl_prog *p = newprog();
    int64_t n = k.n * k.c * k.h * k.w;
    fl_var *d = fl_layer_data(p, "d", FL_SHAPE(k.c, k.h, k.w), FL_FLOAT32, 0);
    fl_var *x = gc_input(p, "x", FL_SHAPE(k.n, k.c, k.h, k.w), 0, 0);
    fl_pool2d_attr a = {{k.kh, k.kw}, {k.sh, k.sw}, {k.ph, k.pw}, k.global, k.inclusive, k.ceil};
    fl_var *y = fl_layer_pool2d_ex(fl_layer_elementwise_add(x, d, -1), k.max ? "max" : "avg", &a);
    float *dd = malloc((size_t)n * sizeof *dd);
    unsigned s = 99;
    for (int64_t i = 0; i < n; i++) dd[i] = 0.1f * (float)i - 0.05f * (float)n;
    for (int64_t i = n - 1; i > 0; i--) {
        s = s * 1103515245u + 12345u;
        int64_t j = (int64_t)((s >> 8) % (unsigned)(i + 1));
        float t = dd[i];
        dd[i] = dd[j], dd[j] = t;
    }
    fl_tensor *dt = th_f32(4, (const int64_t[]){k.n, k.c, k.h, k.w}, dd);
    fl_feed feed[] = {{"d", dt}};
    gc_check(gc_loss(weigh(y)), feed, 1, NULL, (gc_opts){1e-2, 1e-2, 1e-4, 256});
    fl_tensor_free(dt);
    free(dd);
    fl_prog_free(p);
}

/* n c h w | kh kw sh sw ph pw global max inclusive ceil */
TEST(grad_pool_max) { pool_grad((pool_cfg){2, 2, 6, 6, 2, 2, 2, 2, 0, 0, 0, 1, 0, 0}); }
TEST(grad_pool_max_overlap_pad) { pool_grad((pool_cfg){2, 2, 5, 6, 3, 3, 2, 1, 1, 1, 0, 1, 0, 0}); }
TEST(grad_pool_avg_exclusive) { pool_grad((pool_cfg){2, 2, 5, 5, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0}); }
TEST(grad_pool_avg_inclusive) { pool_grad((pool_cfg){2, 2, 5, 5, 3, 3, 2, 2, 1, 1, 0, 0, 1, 0}); }

/* 2x2 max windows at stride 2 (ops_pool.c's vectorised kernel) on ties: each window's
 * gradient goes to its first maximum in row order (Paddle: the first x equal to out), and
 * the last row and column of an odd-sized image, in no window, get 0.  Five windows in a
 * row, [a b; c e] = all equal, b = c max, c = e max, a = c = e max, e max; then a row and a
 * column of larger values outside every window.  Loss = mean of the 5 outputs. */
TEST(grad_pool_max2_ties_and_edges)
{
    enum { H = 3, W = 11 };
    static const float win[5][4] = {{0, 0, 0, 0}, {0, 1, 1, 0}, {0, 0, 1, 1}, {1, 0, 1, 1}, {0, 0, 0, 1}};
    static const int first[5] = {0, 1, 2, 0, 3};
    float dd[H * W], want[H * W] = {0};
    for (int i = 0; i < H * W; i++) dd[i] = 5.0f; /* row 2 and column 10 */
    for (int k = 0; k < 5; k++)
        for (int q = 0; q < 4; q++) dd[(q / 2) * W + 2 * k + q % 2] = win[k][q];
    for (int k = 0; k < 5; k++) want[(first[k] / 2) * W + 2 * k + first[k] % 2] = 0.2f;
    fl_prog *p = newprog();
    fl_var *d = fl_layer_data(p, "d", FL_SHAPE(1, H, W), FL_FLOAT32, 0);
    fl_var *x = gc_input(p, "x", FL_SHAPE(1, 1, H, W), 0, 0);
    fl_var *y = fl_layer_pool2d(fl_layer_elementwise_add(x, d, -1), 2, "max", 2, 0, 0, 1);
    fl_var *loss = fl_layer_mean(y);
    CHECK_OK(fl_append_backward(loss, NULL, 0, NULL, NULL));
    fl_scope *sc = fl_scope_create(NULL);
    fl_exe *e = fl_exe_create(sc);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    fl_tensor *dt = th_f32(4, (const int64_t[]){1, 1, H, W}, dd);
    fl_feed feed[] = {{"d", dt}};
    const char *names[2] = {fl_var_name(y), "x@GRAD"};
    fl_tensor *out[2];
    CHECK_OK(fl_exe_run(e, p, feed, 1, names, 2, out));
    CHECK_EQ_INT(fl_tensor_numel(out[0]), 5);
    for (int k = 0; k < 5; k++) CHECK(fl_tensor_f32(out[0])[k] == (k ? 1.0f : 0.0f));
    CHECK_EQ_INT(fl_tensor_numel(out[1]), H * W);
    for (int i = 0; i < H * W; i++)
        if (fl_tensor_f32(out[1])[i] != want[i])
            TFAIL("x@GRAD[%d] (row %d, column %d) = %g, expected %g", i, i / W, i % W, fl_tensor_f32(out[1])[i], want[i]);
    fl_tensor_free(dt);
    fl_exe_free(e);
    fl_scope_free(sc);
    fl_prog_free(p);
}

/* the same kernel where the windows tile the image (no zeroing first) and where they leave
 * the last row and column out, by finite differences */
TEST(grad_pool_max2_tiling_and_odd)
{
    pool_grad((pool_cfg){2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 0, 1, 0, 0});
    pool_grad((pool_cfg){2, 2, 7, 9, 2, 2, 2, 2, 0, 0, 0, 1, 0, 0});
}
TEST(grad_pool_global_max) { pool_grad((pool_cfg){2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0}); }
TEST(grad_pool_global_avg) { pool_grad((pool_cfg){2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}); }
TEST(grad_pool_ceil_mode)
{
    pool_grad((pool_cfg){1, 2, 7, 7, 2, 3, 2, 3, 0, 1, 0, 1, 0, 1});
    pool_grad((pool_cfg){1, 2, 7, 7, 2, 3, 2, 3, 0, 1, 0, 0, 0, 1});
}

/* ---- batch_norm ------------------------------------------------------------------------------ */

static void bn_grad(int nd, const int64_t *shape, const char *act, int is_test, int global)
{
    fl_prog *p = newprog();
    fl_var *x = gc_input(p, "x", nd, shape, -1, 1);
    fl_batch_norm_attr a;
    memset(&a, 0, sizeof a);
    a.scale.init = fl_init_uniform(0.5f, 1.5f);
    a.bias.init = fl_init_uniform(-0.5f, 0.5f);
    a.use_global_stats = global;
    fl_var *y = fl_layer_batch_norm(x, act, is_test, 0.9f, 1e-5f, &a);
    gc_check(gc_loss(weigh(y)), NULL, 0, NULL, defaults);
    CHECK(fl_prog_var(p, "x@GRAD") && fl_prog_var(p, "batch_norm_0.w_0@GRAD") && fl_prog_var(p, "batch_norm_0.b_0@GRAD"));
    fl_prog_free(p);
}

TEST(grad_bn_2d) { bn_grad(2, (const int64_t[]){6, 4}, NULL, 0, 0); }
TEST(grad_bn_4d) { bn_grad(4, (const int64_t[]){3, 4, 3, 2}, NULL, 0, 0); }
TEST(grad_bn_4d_tanh) { bn_grad(4, (const int64_t[]){2, 3, 2, 3}, "tanh", 0, 0); }
TEST(grad_bn_is_test) { bn_grad(4, (const int64_t[]){2, 3, 2, 3}, NULL, 1, 0); }
TEST(grad_bn_use_global_stats) { bn_grad(2, (const int64_t[]){5, 3}, "sigmoid", 0, 1); }

/* relu fused into batch_norm (fuse_with_relu): one op each way, the gradient masked by Y;
 * training mode and is_test, eps 1e-3 so that no pre-activation crosses 0. */
static void bn_relu_grad(int is_test)
{
    fl_prog *p = newprog();
    fl_var *x = gc_input(p, "x", 4, (const int64_t[]){3, 4, 3, 2}, -1, 1);
    fl_batch_norm_attr a;
    memset(&a, 0, sizeof a);
    a.scale.init = fl_init_uniform(0.5f, 1.5f);
    a.bias.init = fl_init_uniform(-0.5f, 0.5f);
    fl_var *y = fl_layer_batch_norm(x, "relu", is_test, 0.9f, 1e-5f, &a);
    gc_check(gc_loss(weigh(y)), NULL, 0, NULL, fine_eps);
    int bn = 0, relu = 0, bng = 0;
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        relu += !strcmp(op->def->type, "relu") || !strcmp(op->def->type, "relu_grad");
        if (!strcmp(op->def->type, "batch_norm")) {
            bn++;
            CHECK(fl__attr_i(op, "fuse_with_relu", 0) == 1);
        }
        if (!strcmp(op->def->type, "batch_norm_grad")) {
            bng++;
            CHECK(op->in[5].n == 1 && op->in[5].vars[0] == y);
        }
    }
    CHECK(bn == 1 && bng == 1 && relu == 0);
    fl_prog_free(p);
}

TEST(grad_bn_relu_fused) { bn_relu_grad(0); }
TEST(grad_bn_relu_fused_is_test) { bn_relu_grad(1); }

/* relu(batch_norm(x) + z), which append_backward fuses into one fused_bn_add_activation and
 * its gradient op (src/graph/fuse.c): the gradients of X, Z, Scale and Bias, with z an input
 * (an identity shortcut) or a second batch_norm's output (a projection shortcut; then the
 * later batch_norm is the fused one), training mode and is_test. */
static void bn_add_relu_grad(int z_bn, int is_test)
{
    fl_prog *p = newprog();
    fl_var *x = gc_input(p, "x", 4, (const int64_t[]){3, 4, 3, 2}, -1, 1);
    fl_var *z = gc_input(p, "z", 4, (const int64_t[]){3, 4, 3, 2}, -1, 1);
    fl_batch_norm_attr a;
    memset(&a, 0, sizeof a);
    a.scale.init = fl_init_uniform(0.5f, 1.5f);
    a.bias.init = fl_init_uniform(-0.5f, 0.5f);
    fl_var *b = fl_layer_batch_norm(x, NULL, is_test, 0.9f, 1e-5f, &a);
    if (z_bn) z = fl_layer_batch_norm(z, NULL, is_test, 0.9f, 1e-5f, &a);
    fl_var *y = fl_layer_relu(fl_layer_elementwise_add(b, z, -1));
    gc_check(gc_loss(weigh(y)), NULL, 0, NULL, fine_eps);
    int fused = 0, fused_grad = 0, bn = 0, bng = 0, other = 0;
    for (int i = 0; i < p->nops; i++) {
        const char *t = p->ops[i]->def->type;
        fused += !strcmp(t, "fused_bn_add_activation");
        fused_grad += !strcmp(t, "fused_bn_add_activation_grad");
        bn += !strcmp(t, "batch_norm");
        bng += !strcmp(t, "batch_norm_grad");
        other += !strncmp(t, "relu", 4) || !strncmp(t, "elementwise_add", 15);
        if (!strcmp(t, "fused_bn_add_activation")) CHECK(p->ops[i]->out[0].vars[0] == y);
    }
    CHECK_EQ_INT(fused, 1);
    CHECK_EQ_INT(fused_grad, 1);
    CHECK_EQ_INT(bn, z_bn);
    CHECK_EQ_INT(bng, z_bn);
    CHECK_EQ_INT(other, 0);
    fl_prog_free(p);
}

TEST(grad_bn_add_relu_fused) { bn_add_relu_grad(0, 0); }
TEST(grad_bn_add_relu_fused_two_bn) { bn_add_relu_grad(1, 0); }
TEST(grad_bn_add_relu_fused_is_test) { bn_add_relu_grad(0, 1); }

/* Each evaluation updates the moving statistics; the training output ignores them. */
TEST(bn_training_output_ignores_moving_stats)
{
    fl_prog *p = newprog();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3, 2, 2), FL_FLOAT32, 0);
    fl_var *y = fl_layer_batch_norm(x, NULL, 0, 0.9f, 1e-5f, NULL);
    fl_scope *sc = fl_scope_create(NULL);
    fl_exe *e = fl_exe_create(sc);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    float xd[48];
    th_fill_uniform(xd, 48, 1, 4, 9);
    fl_tensor *xt = th_f32(4, (const int64_t[]){4, 3, 2, 2}, xd);
    fl_feed feed[] = {{"x", xt}};
    const char *f[1] = {fl_var_name(y)};
    fl_tensor *out, *mm = fl_scope_find(sc, "batch_norm_0.w_1"), *mv = fl_scope_find(sc, "batch_norm_0.w_2");
    float first[48], m1[3];
    CHECK_OK(fl_exe_run(e, p, feed, 1, f, 1, &out));
    memcpy(first, fl_tensor_f32(out), sizeof first);
    memcpy(m1, fl_tensor_f32(mm), sizeof m1);
    CHECK(m1[0] != 0.0f);
    fl_tensor_f32(mv)[1] = 123.0f; /* garbage in the moving variance */
    CHECK_OK(fl_exe_run(e, p, feed, 1, f, 1, &out));
    CHECK(fl_tensor_f32(mm)[0] != m1[0]); /* moved again */
    for (int i = 0; i < 48; i++) CHECK_NEAR(fl_tensor_f32(out)[i], first[i], 0);
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_scope_free(sc);
    fl_prog_free(p);
}

/* conv -> batch_norm (relu-free, smooth) -> avg pool: every parameter of the chain. */
TEST(grad_conv_bn_pool_chain)
{
    fl_prog *p = newprog();
    fl_var *x = gc_input(p, "x", FL_SHAPE(3, 2, 6, 6), -1, 1);
    conv_cfg k = {0, 2, 0, 0, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1, "tanh"};
    fl_conv2d_attr a = conv_attr(&k);
    fl_var *h = fl_layer_conv2d(x, 4, 3, 3, "tanh", &a);
    fl_batch_norm_attr ba;
    memset(&ba, 0, sizeof ba);
    ba.scale.init = fl_init_uniform(0.5f, 1.5f);
    ba.bias.init = fl_init_uniform(-0.5f, 0.5f);
    h = fl_layer_batch_norm(h, "sigmoid", 0, 0.9f, 1e-5f, &ba);
    h = fl_layer_pool2d(h, 2, "avg", 2, 0, 0, 1);
    gc_check(gc_loss(weigh(h)), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST_MAIN(T(grad_conv_s1_p0), T(grad_conv_s2_p1), T(grad_conv_dilation2), T(grad_conv_groups2), T(grad_conv_depthwise),
          T(grad_conv_no_bias), T(grad_conv_1x1), T(grad_conv_nonsquare), T(grad_conv_tanh), T(grad_conv_sigmoid),
          T(grad_conv_relu), T(grad_conv_one_input_only), T(grad_conv_shared_filter), T(grad_pool_max),
          T(grad_pool_max_overlap_pad), T(grad_pool_avg_exclusive), T(grad_pool_avg_inclusive),
          T(grad_pool_max2_ties_and_edges), T(grad_pool_max2_tiling_and_odd), T(grad_pool_global_max),
          T(grad_pool_global_avg), T(grad_pool_ceil_mode), T(grad_bn_2d), T(grad_bn_4d), T(grad_bn_4d_tanh),
          T(grad_bn_is_test), T(grad_bn_use_global_stats), T(grad_bn_relu_fused), T(grad_bn_relu_fused_is_test),
          T(grad_bn_add_relu_fused), T(grad_bn_add_relu_fused_two_bn), T(grad_bn_add_relu_fused_is_test),
          T(bn_training_output_ignores_moving_stats), T(grad_conv_bn_pool_chain))
