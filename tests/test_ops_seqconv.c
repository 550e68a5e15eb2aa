/* test_ops_seqconv.c - sequence_conv (src/graph/ops_seqconv.c):
 *   - the output against a direct loop over Paddle's definition (row t of a sequence [b, e)
 *     is sum_j x[t + start + j] W_j over the rows inside [b, e)) for context lengths 1 to 4
 *     and starts -3 to 1, on sequences of lengths 3, 0, 1 and 4, its LoD that of the input;
 *   - finite-difference gradients of the filter, the bias and the input (the input is an
 *     embedding of ids fed with LoD, each id once, so the table's gradient is the input's:
 *     parameters carry no LoD, see test_grad_seq.c), tolerances of gradcheck.h;
 *   - the errors: contextStride other than 1 (FL_EUNSUPPORTED) and trainable padding,
 *     a filter of the wrong height, an input without LoD at run time. */
#include "gradcheck.h"

#include "graph/graph_internal.h"

enum { T_ROWS = 8, D = 3, M = 2, NLOD = 5 };
static const int64_t lod[NLOD] = {0, 3, 3, 4, 8}; /* lengths 3, 0, 1, 4 */

static fl_param_attr uniform(const char *name, float a)
{
    fl_param_attr p;
    memset(&p, 0, sizeof p);
    p.name = name;
    p.init = fl_init_uniform(-a, a);
    return p;
}

TEST(forward_matches_direct_loop)
{
    static const int cases[][2] = {{3, -1}, {3, 0}, {2, 1}, {1, 0}, {4, -3}, {3, -2}};
    float xv[T_ROWS * D];
    for (int i = 0; i < T_ROWS * D; i++) xv[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    fl_tensor *xt = th_f32(2, (const int64_t[]){T_ROWS, D}, xv);
    CHECK_OK(fl_tensor_set_lod(xt, lod, NLOD));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int len = cases[c][0], start = cases[c][1];
        fl_prog *p = fl_prog_create();
        fl_var *x = fl_layer_data(p, "x", FL_SHAPE(D), FL_FLOAT32, 1);
        fl_param_attr w = uniform(NULL, 1), b = uniform(NULL, 0.5f);
        fl_var *y = fl_layer_sequence_conv(x, M, len, start, 1, NULL, &w, &b, 0);
        CHECK(y != NULL);
        CHECK_EQ_INT(fl_var_lod_level(y), 1);
        const char *fetch[3] = {"sequence_conv_0.w_0", "sequence_conv_0.b_0", fl_var_name(y)};
        fl_tensor *t[3];
        fl_feed f[] = {{"x", xt}};
        fl_exe *e = gc_run_once(p, f, 1, fetch, 3, t);
        CHECK_EQ_INT(fl_tensor_dim(t[0], 0), len * D);
        CHECK_EQ_INT(fl_tensor_dim(t[2], 0), T_ROWS);
        CHECK_EQ_INT(fl_tensor_dim(t[2], 1), M);
        int64_t nl = 0;
        const int64_t *ol = fl_tensor_lod(t[2], &nl);
        CHECK_EQ_INT(nl, NLOD);
        for (int i = 0; i < NLOD; i++) CHECK_EQ_INT(ol[i], lod[i]);
        const float *wv = fl_tensor_f32(t[0]), *bv = fl_tensor_f32(t[1]), *yv = fl_tensor_f32(t[2]);
        for (int s = 0; s + 1 < NLOD; s++)
            for (int64_t r = lod[s]; r < lod[s + 1]; r++)
                for (int m = 0; m < M; m++) {
                    double want = bv[m];
                    for (int j = 0; j < len; j++) {
                        int64_t src = r + start + j;
                        if (src < lod[s] || src >= lod[s + 1]) continue;
                        for (int k = 0; k < D; k++) want += (double)xv[src * D + k] * wv[(j * D + k) * M + m];
                    }
                    if (fabs(yv[r * M + m] - want) > 1e-5)
                        TFAIL("length %d start %d: out[%lld][%d] %.7g, reference %.7g", len, start, (long long)r, m,
                              yv[r * M + m], want);
                }
        fl_exe_free(e);
        fl_prog_free(p);
    }
    fl_tensor_free(xt);
}

/* Filter, bias and (through the table) input gradients, with an act op after the bias. */
static void grad_case(int len, int start, const char *act)
{
    fl_prog *p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 1);
    fl_embedding_attr ea;
    memset(&ea, 0, sizeof ea);
    ea.param = uniform("table", 1);
    fl_var *x = fl_layer_embedding(ids, T_ROWS, D, &ea);
    fl_param_attr w = uniform(NULL, 1), b = uniform(NULL, 0.5f);
    fl_var *y = fl_layer_sequence_conv(x, M, len, start, 1, act, &w, &b, 0);
    fl_tensor *it = th_i64(2, (const int64_t[]){T_ROWS, 1}, (const int64_t[]){5, 2, 7, 0, 3, 6, 1, 4});
    CHECK_OK(fl_tensor_set_lod(it, lod, NLOD));
    fl_feed f[] = {{"ids", it}};
    gc_check(gc_loss(y), f, 1, NULL, (gc_opts){0, 0, 0, 0});
    CHECK(fl_prog_var(p, "table@GRAD") && fl_prog_var(p, "sequence_conv_0.w_0@GRAD") &&
          fl_prog_var(p, "sequence_conv_0.b_0@GRAD"));
    fl_tensor_free(it);
    fl_prog_free(p);
}

TEST(grad_centered) { grad_case(3, -1, NULL); }
TEST(grad_positive_start_tanh) { grad_case(2, 1, "tanh"); }
TEST(grad_long_context) { grad_case(4, -3, "sigmoid"); }

TEST(unsupported_attributes_fail)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "words", FL_SHAPE(D), FL_FLOAT32, 1);
    CHECK(fl_layer_sequence_conv(x, M, 3, -1, 2, NULL, NULL, NULL, 0) == NULL);
    CHECK_EQ_INT(fl_prog_status(p), FL_EUNSUPPORTED);
    CHECK_STR_HAS(fl_prog_error(p), "sequence_conv: input 'words'");
    CHECK_STR_HAS(fl_prog_error(p), "filter_stride (contextStride) other than 1");
    fl_prog_free(p);

    /* the op itself (as a loaded Paddle program has it): paddingTrainable and a filter of
     * the wrong height */
    p = fl_prog_create();
    x = fl_layer_data(p, "words", FL_SHAPE(D), FL_FLOAT32, 1);
    fl_param_attr pa = uniform("w", 1);
    fl_var *w = fl_layer_create_parameter(p, FL_SHAPE(3 * D, M), FL_FLOAT32, &pa);
    fl_var *o = fl_layer_data(p, "o", FL_SHAPE(M), FL_FLOAT32, 0);
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Filter", w)};
    fl_io out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "sequence_conv", in, 2, &out, 1);
    CHECK(op != NULL);
    CHECK_OK(fl__attr_set_i(op, "contextLength", 3));
    CHECK_OK(fl__attr_set_i(op, "paddingTrainable", 1));
    CHECK_FAILS(fl__op_finish(op), FL_EINVAL, "trainable padding (paddingTrainable, PaddingData; input 'words')");
    fl_prog_free(p);

    p = fl_prog_create();
    x = fl_layer_data(p, "words", FL_SHAPE(D), FL_FLOAT32, 1);
    w = fl_layer_create_parameter(p, FL_SHAPE(3 * D, M), FL_FLOAT32, &pa);
    o = fl_layer_data(p, "o", FL_SHAPE(M), FL_FLOAT32, 0);
    fl_io in2[2] = {FL_IO1("X", x), FL_IO1("Filter", w)};
    fl_io out2 = FL_IO1("Out", o);
    op = fl__op_new(p, "sequence_conv", in2, 2, &out2, 1);
    CHECK(op != NULL);
    CHECK_OK(fl__attr_set_i(op, "contextLength", 2));
    CHECK_FAILS(fl__op_finish(op), FL_EINVAL, "[contextLength * D, M] (contextLength 2)");
    fl_prog_free(p);
}

/* (a variable of lod_level 1 is refused a feed without LoD by the executor already) */
TEST(input_without_lod_fails_at_run_time)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "words", FL_SHAPE(D), FL_FLOAT32, 0);
    fl_var *y = fl_layer_sequence_conv(x, M, 3, -1, 1, NULL, NULL, NULL, 1);
    CHECK(y != NULL);
    float xv[2 * D] = {0};
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, D}, xv);
    fl_feed f[] = {{"words", xt}};
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    const char *fetch[1] = {fl_var_name(y)};
    fl_tensor *out;
    CHECK_FAILS(fl_exe_run(e, p, f, 1, fetch, 1, &out), FL_EINVAL, "sequence_conv: input 'words' has no LoD");
    fl_exe_free(e);
    fl_tensor_free(xt);
    fl_prog_free(p);
}

TEST_MAIN(T(forward_matches_direct_loop), T(grad_centered), T(grad_positive_start_tanh), T(grad_long_context),
          T(unsupported_attributes_fail), T(input_without_lod_fails_at_run_time))
