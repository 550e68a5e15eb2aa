/* test_grad_deconv.c - conv2d_transpose (src/graph/ops_deconv.c), through both of its
 * paths: oneDNN's convolution primitives run backwards (FLEET_GEMM=dnnl, when the build has
 * oneDNN) and col2im + sgemm (FLEET_GEMM=openblas):
 *   - the output against a direct loop in double precision over Paddle's definition
 *     (out[m][y s - pad_top + i d][x s - pad_left + j d] += in[c][y][x] w[c][m][i][j]) on
 *     strides, paddings (asymmetric too), dilations, groups, output_padding, output_size
 *     and SAME / VALID, to 1e-5 relative;
 *   - finite-difference gradients of Input, Filter and the layer's bias on the same
 *     geometries (gradcheck.h; eps 1e-2, rtol 1e-2, atol 1e-4 as test_grad_conv.c), one
 *     of them only the filter's, and a geometry oneDNN's padding rule does not cover
 *     (bottom padding below minus one stride: the other path runs under FLEET_GEMM=dnnl);
 *   - the filter size derived from output_size, Paddle's parameter names and shapes, and
 *     the errors of bad geometries (naming the input and the reason). */
#include "gradcheck.h"

#include "graph/graph_internal.h"
#include "tensor/dnn_conv.h"

static const gc_opts defaults = {1e-2, 1e-2, 1e-4, 0};

typedef struct {
    int64_t n, c, h, w, m;
    int kh, kw, sh, sw, pt, pb, pl, pr, dh, dw, g;
    int osh, osw, oph, opw; /* output_size, output_padding */
    const char *alg;
} dcfg;

static void use_lib(const char *name)
{
    setenv("FLEET_GEMM", name, 1);
    fl__gemm_lib_reload();
}

/* The libraries this build runs conv2d_transpose on. */
static int libs(const char **out)
{
    int n = 0;
    out[n++] = "openblas";
    if (fl__dnn_available()) out[n++] = "dnnl";
    return n;
}

static fl_conv2d_transpose_attr dattr(const dcfg *k, int bias)
{
    fl_conv2d_transpose_attr a;
    memset(&a, 0, sizeof a);
    a.stride[0] = k->sh, a.stride[1] = k->sw, a.dilation[0] = k->dh, a.dilation[1] = k->dw, a.groups = k->g;
    a.padding[0] = k->pt, a.padding[1] = k->pb, a.padding[2] = k->pl, a.padding[3] = k->pr;
    a.output_size[0] = k->osh, a.output_size[1] = k->osw, a.output_padding[0] = k->oph, a.output_padding[1] = k->opw;
    a.padding_algorithm = k->alg;
    a.filter.init = fl_init_uniform(-1, 1);
    a.bias.init = fl_init_uniform(-0.5f, 0.5f);
    a.no_bias = !bias;
    return a;
}

/* o * frozen uniform(-1, 1) weights of o's shape, so each element has its own weight. */
static fl_var *weigh(fl_var *o)
{
    CHECK(o != NULL);
    fl_param_attr a;
    memset(&a, 0, sizeof a);
    a.frozen = 1;
    a.init = fl_init_uniform(-1, 1);
    return fl_layer_elementwise_mul(
        o, fl_layer_create_parameter(fl_var_prog(o), fl_var_ndim(o), fl_var_shape(o), FL_FLOAT32, &a), 0);
}

/* Paddle's definition of the output, in double: the paddings the op used (SAME computed
 * as Paddle's UpdatePaddingAndDilation) and the output size from the fetched tensor. */
static void reference(const dcfg *k, const float *x, const float *f, int64_t oh, int64_t ow, double *out)
{
    int64_t pt = k->pt, pl = k->pl, dh = k->dh ? k->dh : 1, dw = k->dw ? k->dw : 1;
    int64_t sh = k->sh ? k->sh : 1, sw = k->sw ? k->sw : 1, g = k->g ? k->g : 1;
    if (k->alg && !strcmp(k->alg, "VALID")) pt = pl = 0;
    if (k->alg && !strcmp(k->alg, "SAME")) {
        int64_t sumh = ((k->h + sh - 1) / sh - 1) * sh + k->kh - k->h,
                sumw = ((k->w + sw - 1) / sw - 1) * sw + k->kw - k->w;
        pt = sumh > 0 ? sumh / 2 : 0, pl = sumw > 0 ? sumw / 2 : 0, dh = dw = 1;
    }
    int64_t cg = k->c / g, mg = k->m / g;
    memset(out, 0, (size_t)(k->n * k->m * oh * ow) * sizeof(double));
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t c = 0; c < k->c; c++)
            for (int64_t y = 0; y < k->h; y++)
                for (int64_t xx = 0; xx < k->w; xx++)
                    for (int64_t mm = 0; mm < mg; mm++)
                        for (int64_t i = 0; i < k->kh; i++)
                            for (int64_t j = 0; j < k->kw; j++) {
                                int64_t oy = y * sh - pt + i * dh, ox = xx * sw - pl + j * dw, m = c / cg * mg + mm;
                                if (oy < 0 || oy >= oh || ox < 0 || ox >= ow) continue;
                                out[((n * k->m + m) * oh + oy) * ow + ox] +=
                                    (double)x[((n * k->c + c) * k->h + y) * k->w + xx] *
                                    f[((c * mg + mm) * k->kh + i) * k->kw + j];
                            }
}

/* The output of k on every library against reference(); expect_oh/ow: its size;
 * beyond_dnnl: the geometry is outside oneDNN's padding rule. */
static void forward(dcfg k, int64_t expect_oh, int64_t expect_ow, int beyond_dnnl)
{
    const char *ls[2];
    int nl = libs(ls);
    for (int l = 0; l < nl; l++) {
        use_lib(ls[l]);
        fl_prog *p = fl_prog_create();
        fl_var *x = gc_input(p, "x", FL_SHAPE(k.n, k.c, k.h, k.w), -1, 1);
        fl_conv2d_transpose_attr a = dattr(&k, 0);
        fl_var *y = fl_layer_conv2d_transpose(x, k.m, k.kh, k.kw, NULL, &a);
        CHECK(y != NULL);
        CHECK(!strcmp(fl_var_name(y), "conv2d_transpose_0.tmp_0"));
        CHECK_EQ_INT(fl_var_shape(y)[2], expect_oh);
        CHECK_EQ_INT(fl_var_shape(y)[3], expect_ow);
        const char *fetch[3] = {"x", "conv2d_transpose_0.w_0", "conv2d_transpose_0.tmp_0"};
        fl_tensor *t[3];
        uint64_t prims = fl__conv_primitives_created();
        fl_exe *e = gc_run_once(p, NULL, 0, fetch, 3, t);
        /* the path taken: oneDNN's primitives exactly when FLEET_GEMM=dnnl and its padding rule holds */
        CHECK_EQ_INT(fl__conv_primitives_created() > prims, !strcmp(ls[l], "dnnl") && !beyond_dnnl);
        CHECK_EQ_INT(fl_tensor_dim(t[1], 0), k.c);
        CHECK_EQ_INT(fl_tensor_dim(t[1], 1), k.m / (k.g ? k.g : 1));
        CHECK_EQ_INT(fl_tensor_dim(t[2], 2), expect_oh);
        CHECK_EQ_INT(fl_tensor_dim(t[2], 3), expect_ow);
        int64_t n = fl_tensor_numel(t[2]);
        double *ref = malloc((size_t)n * sizeof *ref);
        reference(&k, fl_tensor_f32(t[0]), fl_tensor_f32(t[1]), expect_oh, expect_ow, ref);
        for (int64_t i = 0; i < n; i++)
            if (fabs(fl_tensor_f32(t[2])[i] - ref[i]) > 1e-5 * (1 + fabs(ref[i])))
                TFAIL("%s: output[%lld] %.7g, reference %.7g", ls[l], (long long)i, fl_tensor_f32(t[2])[i], ref[i]);
        free(ref);
        fl_exe_free(e);
        fl_prog_free(p);
    }
}

/* Gradients of Input, Filter and bias (only the filter's with filter_only) on every library. */
static void grad(dcfg k, int filter_only)
{
    const char *ls[2];
    int nl = libs(ls);
    for (int l = 0; l < nl; l++) {
        use_lib(ls[l]);
        fl_prog *p = fl_prog_create();
        fl_var *x = gc_input(p, "x", FL_SHAPE(k.n, k.c, k.h, k.w), -1, 1);
        fl_conv2d_transpose_attr a = dattr(&k, !filter_only);
        fl_var *y = fl_layer_conv2d_transpose(x, k.m, k.kh, k.kw, NULL, &a);
        static const char *const only[] = {"conv2d_transpose_0.w_0", NULL};
        gc_check(gc_loss(weigh(y)), NULL, 0, filter_only ? only : NULL, defaults);
        CHECK(fl_prog_var(p, "conv2d_transpose_0.w_0@GRAD") != NULL);
        CHECK_EQ_INT(fl_prog_var(p, "conv2d_transpose_0.b_0@GRAD") != NULL, !filter_only);
        fl_prog_free(p);
    }
}

/*                 n  c  h  w  m | kh kw sh sw pt pb pl pr dh dw g | osh osw oph opw alg */
static const dcfg S1 = {2, 3, 4, 5, 4, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, NULL};
static const dcfg S2P1 = {2, 3, 4, 3, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, NULL};
static const dcfg DIL = {1, 2, 3, 4, 3, 3, 2, 1, 2, 1, 1, 0, 0, 2, 2, 1, 0, 0, 0, 0, NULL};
static const dcfg GROUPS = {2, 4, 3, 3, 6, 3, 3, 2, 1, 1, 1, 0, 1, 1, 1, 2, 0, 0, 0, 0, NULL};
static const dcfg ASYM = {1, 2, 4, 4, 3, 3, 3, 2, 2, 0, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, NULL};
static const dcfg OUTPAD = {2, 2, 3, 3, 2, 3, 3, 2, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 2, NULL};
static const dcfg OUTSIZE = {1, 3, 3, 4, 2, 4, 3, 2, 2, 1, 1, 0, 0, 1, 1, 1, 7, 9, 0, 0, NULL};
static const dcfg SAME = {2, 2, 3, 4, 3, 3, 3, 2, 2, 5, 5, 5, 5, 3, 3, 1, 0, 0, 0, 0, "SAME"};
static const dcfg VALID = {1, 2, 3, 3, 2, 2, 3, 3, 1, 4, 4, 4, 4, 1, 1, 1, 0, 0, 0, 0, "VALID"};
/* stride 1, dilation 3, output_padding 2: oneDNN's bottom padding 0 - 2 is below -stride */
static const dcfg BEYOND_DNN = {1, 2, 3, 3, 2, 2, 2, 1, 1, 0, 0, 0, 0, 3, 3, 1, 0, 0, 2, 2, NULL};

TEST(forward_stride1) { forward(S1, 6, 7, 0); }
TEST(forward_stride2_padding1) { forward(S2P1, 7, 5, 0); }
TEST(forward_dilation) { forward(DIL, 5, 9, 0); }
TEST(forward_groups) { forward(GROUPS, 5, 4, 0); }
TEST(forward_asymmetric_padding) { forward(ASYM, 8, 8, 0); }
TEST(forward_output_padding) { forward(OUTPAD, 6, 9, 0); }
TEST(forward_output_size) { forward(OUTSIZE, 7, 9, 0); }
TEST(forward_same) { forward(SAME, 5, 8, 0); }
TEST(forward_valid) { forward(VALID, 8, 5, 0); }
TEST(forward_beyond_dnnl_padding) { forward(BEYOND_DNN, 8, 8, 1); }

TEST(grad_stride1) { grad(S1, 0); }
TEST(grad_stride2_padding1) { grad(S2P1, 0); }
TEST(grad_dilation) { grad(DIL, 0); }
TEST(grad_groups) { grad(GROUPS, 0); }
TEST(grad_asymmetric_padding) { grad(ASYM, 0); }
TEST(grad_output_padding) { grad(OUTPAD, 0); }
TEST(grad_output_size_filter_only) { grad(OUTSIZE, 1); }
TEST(grad_same) { grad(SAME, 0); }
TEST(grad_beyond_dnnl_padding) { grad(BEYOND_DNN, 0); }

/* filter_h / filter_w 0: Paddle's size from output_size, (out - (H - 1) s + pads - 1) / d + 1;
 * and the default names, Xavier filter and the act op after the bias add. */
TEST(filter_from_output_size_and_names)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "img", FL_SHAPE(3, 5, 6), FL_FLOAT32, 0);
    fl_conv2d_transpose_attr a;
    memset(&a, 0, sizeof a);
    a.stride[0] = a.stride[1] = 2, a.padding[0] = a.padding[1] = 1, a.output_size[0] = 10, a.output_size[1] = 12;
    fl_var *y = fl_layer_conv2d_transpose(x, 4, 0, 0, "relu", &a);
    CHECK(y != NULL);
    fl_var *w = fl_prog_var(p, "conv2d_transpose_0.w_0");
    CHECK(w && fl_var_is_param(w));
    /* kh = (10 - 4 * 2 + 2 - 1) / 1 + 1 = 4, kw = (12 - 5 * 2 + 0 - 1) + 1 = 2 */
    const int64_t want[4] = {3, 4, 4, 2};
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(fl_var_shape(w)[i], want[i]);
    CHECK(fl_prog_var(p, "conv2d_transpose_0.b_0") != NULL);
    int nops = fl_prog_num_ops(p);
    CHECK(!strcmp(fl_prog_op_type(p, nops - 3), "conv2d_transpose"));
    CHECK(!strcmp(fl_prog_op_type(p, nops - 2), "elementwise_add"));
    CHECK(!strcmp(fl_prog_op_type(p, nops - 1), "relu"));
    CHECK_EQ_INT(fl_var_shape(y)[2], 10);
    CHECK_EQ_INT(fl_var_shape(y)[3], 12);
    fl_prog_free(p);
}

static void build_fails(dcfg k, int filter_h, const char *sub)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "img", FL_SHAPE(k.c, k.h, k.w), FL_FLOAT32, 0);
    fl_conv2d_transpose_attr a = dattr(&k, 1);
    CHECK(fl_layer_conv2d_transpose(x, k.m, filter_h, k.kw, NULL, &a) == NULL);
    CHECK_EQ_INT(fl_prog_status(p), FL_EINVAL);
    CHECK_STR_HAS(fl_prog_error(p), "conv2d_transpose");
    CHECK_STR_HAS(fl_prog_error(p), "img");
    CHECK_STR_HAS(fl_prog_error(p), sub);
    fl_prog_free(p);
}

TEST(bad_geometries_fail_naming_the_reason)
{
    dcfg k = S2P1;
    k.osh = 9, k.osw = 5; /* inferred 7 and 5: 9 is beyond 7 + stride */
    build_fails(k, k.kh, "output_size 9 must be in [7, 9)");
    k = S2P1, k.oph = 2; /* output_padding below max(stride, dilation) = 2 */
    build_fails(k, k.kh, "output_padding 2 must be >= 0 and below max(stride, dilation) = 2");
    k = S1, k.g = 2; /* 3 channels */
    build_fails(k, k.kh, "not divisible by groups");
    k = S1;
    build_fails(k, 0, "output_size and known H and W");
    k = S1, k.alg = "FULL";
    build_fails(k, k.kh, "padding_algorithm");
    k = S1, k.pt = 3; /* output (4 - 1) - 3 + 2 + 1 = 3 rows, fine; 6 more rows of padding leave none */
    k.pb = 3;
    build_fails(k, k.kh, "the output would have size 0");
}

/* A filter that does not match the input fails at build time, naming both. */
TEST(foreign_filter_fails)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "img", FL_SHAPE(3, 4, 4), FL_FLOAT32, 0);
    fl_param_attr pa;
    memset(&pa, 0, sizeof pa);
    pa.name = "shared_w";
    CHECK(fl_layer_create_parameter(p, FL_SHAPE(2, 4, 3, 3), FL_FLOAT32, &pa) != NULL);
    fl_conv2d_transpose_attr a;
    memset(&a, 0, sizeof a);
    a.filter.name = "shared_w";
    CHECK(fl_layer_conv2d_transpose(x, 4, 3, 3, NULL, &a) == NULL);
    CHECK_STR_HAS(fl_prog_error(p), "shared_w");
    fl_prog_free(p);
}

/* The program text (fl_prog_to_text / from_text) keeps the op, its gradient and their
 * attributes, empty lists (output_size) included, and the reloaded program computes the same. */
TEST(text_round_trip)
{
    dcfg k = OUTPAD;
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(k.n, k.c, k.h, k.w), -1, 1);
    fl_conv2d_transpose_attr a = dattr(&k, 1);
    CHECK_OK(fl_append_backward(gc_loss(fl_layer_conv2d_transpose(x, k.m, k.kh, k.kw, "tanh", &a)), NULL, 0, NULL, NULL));
    char *t1, *t2;
    size_t n1, n2;
    CHECK_OK(fl_prog_to_text(p, &t1, &n1));
    CHECK_STR_HAS(t1, "conv2d_transpose_grad");
    CHECK_STR_HAS(t1, "output_size=ints:[]");
    CHECK_STR_HAS(t1, "output_padding=ints:[1,2]");
    fl_prog *q;
    CHECK_OK(fl_prog_from_text(t1, n1, &q));
    CHECK_OK(fl_prog_to_text(q, &t2, &n2));
    CHECK(n1 == n2 && !memcmp(t1, t2, n1));
    const char *fetch[1] = {"x@GRAD"};
    fl_tensor *g1, *g2;
    fl_scope *sc = fl_scope_create(NULL);
    fl_exe *e = fl_exe_create(sc);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    CHECK_OK(fl_exe_run(e, p, NULL, 0, fetch, 1, &g1));
    fl_exe *e2 = fl_exe_create(sc);
    CHECK_OK(fl_exe_run(e2, q, NULL, 0, fetch, 1, &g2));
    CHECK_EQ_INT(fl_tensor_numel(g1), fl_tensor_numel(g2));
    for (int64_t i = 0; i < fl_tensor_numel(g1); i++) CHECK_EQ_INT(fl_tensor_f32(g1)[i] == fl_tensor_f32(g2)[i], 1);
    fl_exe_free(e2);
    fl_exe_free(e);
    fl_scope_free(sc);
    fl_prog_free(q);
    fl_prog_free(p);
    free(t1);
    free(t2);
}

TEST_MAIN(T(forward_stride1), T(forward_stride2_padding1), T(forward_dilation), T(forward_groups),
          T(forward_asymmetric_padding), T(forward_output_padding), T(forward_output_size), T(forward_same),
          T(forward_valid), T(forward_beyond_dnnl_padding), T(grad_stride1), T(grad_stride2_padding1), T(grad_dilation),
          T(grad_groups), T(grad_asymmetric_padding), T(grad_output_padding), T(grad_output_size_filter_only), T(grad_same),
          T(grad_beyond_dnnl_padding), T(filter_from_output_size_and_names), T(bad_geometries_fail_naming_the_reason),
          T(foreign_filter_fails), T(text_round_trip))
