/*
 * ops_seqconv.c - operator group "seqconv": sequence_conv and its gradient, with the layer
 * builder, following Paddle's sequence_conv op.
 *
 * X [T, D] float32 with one level of LoD (ops_seq.c's representation: T rows, offsets
 * 0 = o_0 <= ... <= o_n = T), Filter [L D, M] -> Out [T, M] with X's LoD.  Row t of a
 * sequence [b, e) reads the context rows t + start + j (j < L, start = contextStart), zeros
 * for those outside [b, e): col [T, L D] holds them side by side and Out = col Filter (one
 * sgemm).  Gradients: Filter@GRAD = col^T Out@GRAD, and X@GRAD scatters Out@GRAD Filter^T
 * back onto the rows col read.
 * Refused with an error naming them, as Paddle's op has no kernel for them: contextStride
 * other than 1 and trainable padding (paddingTrainable, input PaddingData).
 */
#include <stdio.h>
#include <string.h>

#include "ops_conv.h"

/* Per-executor scratch (the context matrices); freed with free(). */
typedef struct {
    size_t n;
    float data[];
} seqconv_scratch;

static float *scratch_get(fl_kctx *c, int64_t n)
{
    seqconv_scratch *s = *c->state;
    if (!s || s->n < (size_t)n + 1) {
        seqconv_scratch *ns = realloc(s, sizeof *s + ((size_t)n + 1) * sizeof(float));
        if (!ns) {
            fl__err(FL_ENOMEM, "%s: cannot allocate %lld floats of scratch", c->op->def->type, (long long)n);
            return NULL;
        }
        ns->n = (size_t)n + 1;
        *c->state = s = ns;
    }
    return s->data;
}

/* The attributes Paddle's op has no kernel for; FL_OK or an op error naming them. */
static int check_attrs(fl_op *op, const fl_var *x)
{
    int64_t len = fl__attr_i(op, "contextLength", 0), stride = fl__attr_i(op, "contextStride", 1);
    if (len < 1) return fl__op_error(op, "contextLength %lld (input '%s') must be >= 1", (long long)len, x->name);
    if (stride != 1)
        return fl__op_error(op, "contextStride %lld (input '%s') is not supported: only 1 (as Paddle's op)",
                            (long long)stride, x->name);
    if (fl__attr_i(op, "paddingTrainable", 0) || op->in[2].n)
        return fl__op_error(op, "trainable padding (paddingTrainable, PaddingData; input '%s') is not supported", x->name);
    return FL_OK;
}

static int infer_seqconv(fl_op *op)
{
    if (op->in[0].n != 1 || op->in[1].n != 1 || op->out[0].n != 1)
        return fl__op_error(op, "needs one X, one Filter and one Out");
    fl_var *x = op->in[0].vars[0], *f = op->in[1].vars[0], *o = op->out[0].vars[0];
    FL_CHECK(check_attrs(op, x));
    FL_CHECK(fl__op_need_f32(op, x));
    FL_CHECK(fl__op_need_f32(op, f));
    int64_t len = fl__attr_i(op, "contextLength", 0);
    char xs[96], fs[96];
    fl__shape_str(x, xs, sizeof xs);
    fl__shape_str(f, fs, sizeof fs);
    if (x->ndim != 2 || f->ndim != 2 || x->shape[1] < 1 || f->shape[0] != len * x->shape[1])
        return fl__op_error(op,
                            "input '%s' %s must be [T, D] with D known and filter '%s' %s [contextLength * D, M] "
                            "(contextLength %lld)",
                            x->name, xs, f->name, fs, (long long)len);
    int64_t os[2] = {x->shape[0], f->shape[1]};
    fl__var_set_shape(o, FL_FLOAT32, 2, os);
    o->lod_level = x->lod_level;
    return FL_OK;
}

/* Run-time checks of X (slot 0) and Filter (slot 1): X's LoD in *lod / *nseq, D, M. */
static int seqconv_rt(fl_kctx *c, const int64_t **lod, int64_t *nseq, int64_t *d, int64_t *m)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    FL_CHECK(fl__kctx_dense_f32(c, 1));
    const fl_tensor *x = FL_IN(c, 0), *f = FL_IN(c, 1);
    const char *type = c->op->def->type, *xn = fl__kctx_var_name(c, 0, 0);
    int64_t len = fl__attr_i(c->op, "contextLength", 0), nl = 0;
    if (x->ndim != 2 || f->ndim != 2 || f->shape[0] != len * x->shape[1]) {
        char xs[96], fs[96];
        fl_tensor_describe(x, xs, sizeof xs);
        fl_tensor_describe(f, fs, sizeof fs);
        return fl__err(FL_EINVAL, "%s: input '%s' %s and filter '%s' %s must be [T, D] and [%lld * D, M]", type, xn, xs,
                       fl__kctx_var_name(c, 1, 0), fs, (long long)len);
    }
    *lod = fl_tensor_lod(x, &nl);
    if (!*lod || nl < 1)
        return fl__err(FL_EINVAL, "%s: input '%s' has no LoD (it must be fed or computed as a sequence with LoD offsets)",
                       type, xn);
    if ((*lod)[0] != 0 || (*lod)[nl - 1] != x->shape[0])
        return fl__err(FL_EINVAL, "%s: LoD of input '%s' spans rows [%lld, %lld) but it has %lld rows", type, xn,
                       (long long)(*lod)[0], (long long)(*lod)[nl - 1], (long long)x->shape[0]);
    for (int64_t i = 1; i < nl; i++)
        if ((*lod)[i] < (*lod)[i - 1])
            return fl__err(FL_EINVAL, "%s: LoD of input '%s' decreases at entry %lld", type, xn, (long long)i);
    *nseq = nl - 1, *d = x->shape[1], *m = f->shape[1];
    return FL_OK;
}

/* The context matrix col [T, L D] of x [T, D] (back: the transpose, dx[src] += col[t][j]
 * for the rows col reads; dx zeroed by the caller). */
static void context(const int64_t *lod, int64_t nseq, int64_t d, int64_t len, int64_t start, float *restrict x,
                    float *restrict col, int back)
{
    const int64_t ld = len * d;
    for (int64_t s = 0; s < nseq; s++)
        for (int64_t t = lod[s]; t < lod[s + 1]; t++)
            for (int64_t j = 0; j < len; j++) {
                int64_t src = t + start + j;
                float *restrict cr = col + t * ld + j * d;
                int in = src >= lod[s] && src < lod[s + 1];
                if (back) {
                    if (in)
                        for (int64_t k = 0; k < d; k++) x[src * d + k] += cr[k];
                } else if (in) {
                    memcpy(cr, x + src * d, (size_t)d * sizeof(float));
                } else {
                    memset(cr, 0, (size_t)d * sizeof(float));
                }
            }
}

static int run_seqconv(fl_kctx *c)
{
    const int64_t *lod;
    int64_t nseq, d, m;
    FL_CHECK(seqconv_rt(c, &lod, &nseq, &d, &m));
    fl_tensor *x = FL_IN(c, 0), *f = FL_IN(c, 1), *out = FL_OUT(c, 0);
    int64_t len = fl__attr_i(c->op, "contextLength", 0), T = x->shape[0];
    FL_CHECK(fl__tensor_resize2(out, T, m));
    FL_CHECK(fl__tensor_share_lod(out, x));
    float *col = scratch_get(c, T * len * d);
    if (!col) return fl_last_status();
    context(lod, nseq, d, len, fl__attr_i(c->op, "contextStart", 0), x->data, col, 0);
    fl__sgemm(0, 0, T, m, len * d, 1.0f, col, len * d, f->data, m, 0.0f, out->data, m);
    return FL_OK;
}

/* Inputs X, Filter, Out@GRAD; outputs X@GRAD, Filter@GRAD, each only when requested. */
static int run_seqconv_grad(fl_kctx *c)
{
    const int64_t *lod;
    int64_t nseq, d, m;
    FL_CHECK(seqconv_rt(c, &lod, &nseq, &d, &m));
    FL_CHECK(fl__kctx_dense_f32(c, 2));
    fl_tensor *x = FL_IN(c, 0), *f = FL_IN(c, 1), *dy = FL_IN(c, 2), *dx = FL_OUT(c, 0), *df = FL_OUT(c, 1);
    int64_t len = fl__attr_i(c->op, "contextLength", 0), start = fl__attr_i(c->op, "contextStart", 0), T = x->shape[0];
    if (dy->numel != T * m)
        return fl__err(FL_EINVAL, "sequence_conv_grad: gradient '%s' has %lld elements, the output of '%s' has %lld x %lld",
                       fl__kctx_var_name(c, 2, 0), (long long)dy->numel, fl__kctx_var_name(c, 0, 0), (long long)T,
                       (long long)m);
    float *col = scratch_get(c, T * len * d);
    if (!col) return fl_last_status();
    if (df) {
        FL_CHECK(fl__tensor_reshape_raw(df, FL_FLOAT32, 2, f->shape));
        context(lod, nseq, d, len, start, x->data, col, 0);
        fl__sgemm(1, 0, len * d, m, T, 1.0f, col, len * d, dy->data, m, 0.0f, df->data, m);
    }
    if (dx) {
        FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, 2, x->shape));
        FL_CHECK(fl__tensor_share_lod(dx, x));
        memset(dx->data, 0, (size_t)dx->numel * sizeof(float));
        fl__sgemm(0, 1, T, len * d, m, 1.0f, dy->data, m, f->data, m, 0.0f, col, len * d);
        context(lod, nseq, d, len, start, dx->data, col, 1);
    }
    return FL_OK;
}

static int grad_seqconv(fl_op *op, fl_grad_ctx *g)
{
    fl_var *dz = fl__grad_of(g, op->out[0].vars[0]);
    if (!dz) return FL_OK;
    fl_var *x = op->in[0].vars[0], *w = op->in[1].vars[0];
    fl_var *gv[2] = {fl__grad_for(g, x), fl__grad_for(g, w)};
    static const char *const names[2] = {"X@GRAD", "Filter@GRAD"};
    fl_io o[2];
    int no = 0;
    for (int i = 0; i < 2; i++)
        if (gv[i]) o[no++] = (fl_io){names[i], &gv[i], 1};
    if (!no) return FL_OK;
    fl_io in[3] = {FL_IO1("X", x), FL_IO1("Filter", w), FL_IO1("Out@GRAD", dz)};
    return fl__grad_append(op, "sequence_conv_grad", in, 3, o, no);
}

static const fl_op_def def_seqconv = {"sequence_conv", {"X", "Filter", "PaddingData"}, {"Out"}, infer_seqconv, run_seqconv,
                                      grad_seqconv};
static const fl_op_def def_seqconv_grad = {
    "sequence_conv_grad", {"X", "Filter", "Out@GRAD"}, {"X@GRAD", "Filter@GRAD"}, fl__infer_nop, run_seqconv_grad, NULL};

fl_var *fl_layer_sequence_conv(fl_var *x, int64_t num_filters, int context_length, int context_start, int context_stride,
                               const char *act, const fl_param_attr *param, const fl_param_attr *bias, int no_bias)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p || p->status != FL_OK) return NULL;
    char xs[96];
    fl__shape_str(x, xs, sizeof xs);
    int a = fl__conv_act_code(act), st = FL_EINVAL;
    const char *bad = NULL;
    if (x->ndim != 2 || x->shape[1] <= 0) bad = "must be [T, D] with D known";
    else if (x->dtype != FL_FLOAT32) bad = "must be float32";
    else if (num_filters <= 0 || context_length <= 0) bad = "needs num_filters and filter_size (contextLength) > 0";
    else if (a < 0) bad = "got an unknown activation (expected relu, tanh, sigmoid, softmax, softsign or NULL)";
    else if (context_stride != 1) {
        bad = "has a filter_stride (contextStride) other than 1, which Paddle's op does not support either";
        st = FL_EUNSUPPORTED;
    }
    if (bad) {
        fl__prog_error(p, st, "sequence_conv: input '%s' %s %s (num_filters %lld, filter_size %d, stride %d, act %s)",
                       x->name, xs, bad, (long long)num_filters, context_length, context_stride, act ? act : "NULL");
        return NULL;
    }
    int64_t fs[2] = {(int64_t)context_length * x->shape[1], num_filters};
    char base[128], nm[192];
    fl__unique_name(p, "sequence_conv", base, sizeof base);
    if (param && param->name) snprintf(nm, sizeof nm, "%s", param->name);
    else snprintf(nm, sizeof nm, "%s.w_0", base);
    fl_var *w = fl__param_create(p, nm, 2, fs, param, fl_init_xavier(0), fs[0], fs[1]);
    if (!w) return NULL;
    int64_t os[2] = {x->shape[0], num_filters};
    fl_var *out = fl__tmp_var(p, base, FL_FLOAT32, 2, os);
    if (!out) return NULL;
    fl_io ins[2] = {FL_IO1("X", x), FL_IO1("Filter", w)};
    fl_io o = FL_IO1("Out", out);
    fl_op *op = fl__op_new(p, "sequence_conv", ins, 2, &o, 1);
    if (!op || fl__attr_set_i(op, "contextLength", context_length) || fl__attr_set_i(op, "contextStart", context_start) ||
        fl__attr_set_i(op, "contextStride", context_stride) || fl__attr_set_i(op, "paddingTrainable", 0) ||
        fl__op_finish(op))
        return NULL;
    if (!no_bias) {
        if (bias && bias->name) snprintf(nm, sizeof nm, "%s", bias->name);
        else snprintf(nm, sizeof nm, "%s.b_0", base);
        int64_t bs[1] = {num_filters};
        fl_var *b = fl__param_create(p, nm, 1, bs, bias, fl_init_constant(0.0f), 0, 0);
        if (!b || !(out = fl_layer_elementwise_add(out, b, 1))) return NULL;
    }
    return fl__conv_post_act(out, a);
}

const fl_op_def *const fl__ops_seqconv[] = {&def_seqconv, &def_seqconv_grad, NULL};
