/*
 * ops_deconv.c - operator group "deconv": conv2d_transpose and its gradient, with the layer
 * builder, following Paddle's conv2d_transpose op (NCHW, float32).
 *
 * A transposed convolution is a convolution run backwards.  With the convolution whose input
 * is this op's Output [N, M, Ho, Wo], whose output is this op's Input [N, C, H, W] and whose
 * filter is this op's Filter [C, M/g, kh, kw] (Paddle's layout is already the convolution's
 * [out, in/g, kh, kw] for that pairing):
 *   Output       = that convolution's backward-data of Input,
 *   Input@GRAD   = that convolution's forward of Output@GRAD,
 *   Filter@GRAD  = its backward-weights with Output@GRAD as the image and Input as the
 *                  output gradient.
 * When FLEET_GEMM picks oneDNN these are src/tensor/dnn_conv.c's primitives as they are
 * (the padding at the bottom / right is derived there, so asymmetric paddings, output_size
 * and output_padding need no flag: only a bottom padding shorter than minus one stride
 * falls outside oneDNN's rule, and such shapes, or any oneDNN refuses, take the other path).
 * Otherwise, per image and group, col = W^T x (sgemm) scattered into the output by col2im,
 * and for the gradients im2col of Output@GRAD times W (Input@GRAD) and x col^T
 * (Filter@GRAD).
 * Port choices: data_format other than NCHW is refused naming it; Paddle's op for
 * groups == C == num_filters (depthwise_conv2d_transpose) is this same op; the bias and the
 * activation are their own ops, as Paddle's layer appends them; no bfloat16 kernel (AMP
 * leaves the op in float32: it is on no list of amp.c).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../tensor/dnn_conv.h"
#include "ops_conv.h"

/* Geometry of one conv2d_transpose, -1 for dims unknown at build time. */
typedef struct {
    int64_t n, c, h, w; /* Input */
    int64_t m, oh, ow;  /* Output channels and size */
    int64_t kh, kw, sh, sw, dh, dw, g;
    int64_t pt, pb, pl, pr;     /* paddings: top, bottom, left, right */
    int64_t cg, mg, k, hw, ohw; /* C/g, M/g, K = M/g kh kw, H W, Ho Wo */
} dgeo;

enum { PAD_EXPLICIT, PAD_SAME, PAD_VALID };

static int pad_algorithm(const fl_op *op)
{
    const char *a = fl__attr_s(op, "padding_algorithm", "EXPLICIT");
    return !strcasecmp(a, "EXPLICIT") ? PAD_EXPLICIT
           : !strcasecmp(a, "SAME")   ? PAD_SAME
           : !strcasecmp(a, "VALID")  ? PAD_VALID
                                      : -1;
}

/* A list attribute of 0 (absent or empty), 1 (both) or 2 entries into v; -1 if malformed. */
static int attr_pair(const fl_op *op, const char *name, int64_t v[2])
{
    const fl_attr *a = fl__attr_find(op, name);
    v[0] = v[1] = 0;
    if (!a || (a->type == FL_ATTR_INTS && a->n == 0)) return 0;
    if (a->type != FL_ATTR_INTS || a->n > 2) return -1;
    v[0] = a->ints[0];
    v[1] = a->ints[a->n - 1];
    return a->n;
}

/* The output size of one dimension: in (-1 unknown), kernel k, paddings p0 p1; the
 * output_size entry os (0 none) or output_padding op.  Sets *o; returns a reason or NULL. */
static const char *dim_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1, int64_t os, int64_t op,
                           int64_t *o, char *why, size_t cap)
{
    int64_t inf = in < 0 ? -1 : (in - 1) * s - p0 - p1 + d * (k - 1) + 1;
    *o = os > 0 ? os : inf < 0 ? -1 : inf + op;
    if (os > 0 && inf >= 0 && (os < inf || os >= inf + s))
        snprintf(why, cap, "output_size %lld must be in [%lld, %lld) (the inferred size up to one stride more)",
                 (long long)os, (long long)inf, (long long)(inf + s));
    else if (op < 0 || (op && op >= (s > d ? s : d)))
        snprintf(why, cap, "output_padding %lld must be >= 0 and below max(stride, dilation) = %lld", (long long)op,
                 (long long)(s > d ? s : d));
    else if (*o == 0 || *o < -1) snprintf(why, cap, "the output would have size %lld", (long long)*o);
    else return NULL;
    return why;
}

/* Fills g from Input shape xs, Filter shape fs and the attributes; returns a reason (in
 * why) or NULL. */
static const char *dgeo_make(const fl_op *op, const int64_t *xs, const int64_t *fs, dgeo *g, char *why, size_t cap)
{
    int64_t s[2], d[2], os[2], opad[2];
    const fl_attr *pa = fl__attr_find(op, "paddings");
    int alg = pad_algorithm(op);
    if (fl__conv_attr2(op, "strides", 1, s) || fl__conv_attr2(op, "dilations", 1, d) ||
        (pa && (pa->type != FL_ATTR_INTS || (pa->n != 1 && pa->n != 2 && pa->n != 4))) ||
        attr_pair(op, "output_size", os) < 0 || attr_pair(op, "output_padding", opad) < 0)
        return "strides and dilations must be int lists of 1 or 2 entries, paddings of 1, 2 or 4, output_size and "
               "output_padding of 0, 1 or 2";
    if (alg < 0) return "padding_algorithm must be EXPLICIT, SAME or VALID";
    int64_t p[4] = {0, 0, 0, 0};
    if (pa && alg == PAD_EXPLICIT)
        for (int i = 0; i < 4; i++) p[i] = pa->n == 4 ? pa->ints[i] : pa->ints[pa->n == 2 ? i / 2 : 0];
    g->g = fl__attr_i(op, "groups", 1);
    if (s[0] < 1 || s[1] < 1 || d[0] < 1 || d[1] < 1 || p[0] < 0 || p[1] < 0 || p[2] < 0 || p[3] < 0 || g->g < 1)
        return "strides, dilations and groups must be >= 1 and paddings >= 0";
    g->n = xs[0], g->c = xs[1], g->h = xs[2], g->w = xs[3];
    g->kh = fs[2], g->kw = fs[3], g->mg = fs[1], g->m = fs[1] * g->g;
    if (fs[0] < 1 || fs[1] < 1 || g->kh < 1 || g->kw < 1) return "the filter has an empty dimension";
    if (g->c >= 0 && g->c != fs[0]) return "the filter's dim 0 differs from the input's channels";
    if (fs[0] % g->g) return "the input's channels are not divisible by groups";
    if (alg == PAD_SAME) { /* Paddle's UpdatePaddingAndDilation, on the Input's size */
        int64_t in[2] = {g->h, g->w}, k[2] = {g->kh, g->kw};
        for (int i = 0; i < 2; i++) {
            d[i] = 1;
            if (in[i] < 0) continue;
            int64_t o = (in[i] + s[i] - 1) / s[i], sum = (o - 1) * s[i] + k[i] - in[i];
            sum = sum > 0 ? sum : 0;
            p[2 * i] = sum / 2, p[2 * i + 1] = sum - sum / 2;
        }
    }
    g->sh = s[0], g->sw = s[1], g->dh = d[0], g->dw = d[1], g->pt = p[0], g->pb = p[1], g->pl = p[2], g->pr = p[3];
    const char *bad = dim_out(g->h, g->kh, g->sh, g->dh, g->pt, g->pb, os[0], opad[0], &g->oh, why, cap);
    if (!bad) bad = dim_out(g->w, g->kw, g->sw, g->dw, g->pl, g->pr, os[1], opad[1], &g->ow, why, cap);
    if (bad) return bad;
    g->cg = fs[0] / g->g, g->k = g->mg * g->kh * g->kw, g->hw = g->h * g->w, g->ohw = g->oh * g->ow;
    if (g->h > 0 && g->oh > 0 && (g->k * g->hw > INT32_MAX || g->ohw > INT32_MAX)) return "the image is too large";
    return NULL;
}

static int infer_deconv(fl_op *op)
{
    if (op->in[0].n != 1 || op->in[1].n != 1 || op->out[0].n != 1)
        return fl__op_error(op, "needs one Input, one Filter and one Output");
    fl_var *x = op->in[0].vars[0], *f = op->in[1].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    FL_CHECK(fl__op_need_f32(op, f));
    FL_CHECK(fl__conv_need_nchw(op, "data_format", x));
    char xs[96], fs[96], why[160];
    fl__shape_str(x, xs, sizeof xs);
    fl__shape_str(f, fs, sizeof fs);
    if (x->ndim != 4) return fl__op_error(op, "input '%s' must be 4-D NCHW [N, C, H, W], is %s", x->name, xs);
    if (f->ndim != 4) return fl__op_error(op, "filter '%s' must be 4-D [C, M/groups, kh, kw], is %s", f->name, fs);
    dgeo g;
    const char *bad = dgeo_make(op, x->shape, f->shape, &g, why, sizeof why);
    if (bad)
        return fl__op_error(op, "input '%s' %s, filter '%s' %s, groups %lld: %s", x->name, xs, f->name, fs,
                            (long long)fl__attr_i(op, "groups", 1), bad);
    int64_t os[4] = {g.n, g.m, g.oh, g.ow};
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, 4, os);
    return FL_OK;
}

/* Run-time geometry of Input (slot 0) and Filter (slot 1). */
static int dgeo_rt(fl_kctx *c, dgeo *g)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    FL_CHECK(fl__kctx_dense_f32(c, 1));
    const fl_tensor *x = FL_IN(c, 0), *f = FL_IN(c, 1);
    char why[160];
    const char *bad = x->ndim != 4 || f->ndim != 4 ? "input and filter must be 4-D"
                                                   : dgeo_make(c->op, x->shape, f->shape, g, why, sizeof why);
    if (bad) {
        char xs[96], fs[96];
        fl_tensor_describe(x, xs, sizeof xs);
        fl_tensor_describe(f, fs, sizeof fs);
        return fl__err(FL_EINVAL, "%s: input '%s' %s, filter '%s' %s: %s", c->op->def->type, fl__kctx_var_name(c, 0, 0), xs,
                       fl__kctx_var_name(c, 1, 0), fs, bad);
    }
    return FL_OK;
}

/* ---- kernels ----------------------------------------------------------------------------- */

/* The convolution that g runs backwards, for dnn_conv.c (NCHW in and out). */
static fl_conv_desc dnn_desc(const dgeo *g)
{
    fl_conv_desc d;
    memset(&d, 0, sizeof d);
    d.n = g->n, d.c = g->m, d.h = g->oh, d.w = g->ow, d.m = g->c, d.kh = g->kh, d.kw = g->kw, d.oh = g->h, d.ow = g->w;
    d.sh = g->sh, d.sw = g->sw, d.ph = g->pt, d.pw = g->pl, d.dh = g->dh, d.dw = g->dw, d.g = g->g;
    d.x_type = d.w_type = FL_FLOAT32;
    return d;
}

/* 1 when the oneDNN path runs g: FLEET_GEMM picks it, and the bottom / right padding it
 * derives, (H - 1) s + d (k - 1) + 1 - Ho - top, is above minus one stride. */
static int use_dnn(const dgeo *g)
{
    if (fl__gemm_lib() != FL_GEMM_DNNL) return 0;
    int64_t rh = (g->h - 1) * g->sh + (g->kh - 1) * g->dh + 1 - g->oh - g->pt;
    int64_t rw = (g->w - 1) * g->sw + (g->kw - 1) * g->dw + 1 - g->ow - g->pl;
    return rh + g->sh > 0 && rw + g->sw > 0;
}

/* Runs a dnn_conv.c call's status: FL_EUNSUPPORTED (oneDNN refused the shape) clears the
 * error and returns 1 so that the caller takes the im2col path; else 0 or the status. */
static int dnn_refused(int st)
{
    if (st != FL_EUNSUPPORTED) return st;
    fl_clear_error();
    return 1;
}

/* Input positions x of [0, count) whose image column x s + off lies in [0, limit): [*lo, *hi). */
static void valid_range(int64_t off, int64_t s, int64_t limit, int64_t count, int64_t *lo, int64_t *hi)
{
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = limit - off <= 0 ? 0 : (limit - off - 1) / s + 1;
    if (b > count) b = count;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* col[(c kh + i) kw + j][y W + x] = img[c][y sh - pt + i dh][x sw - pl + j dw] for one
 * group's Output image img [M/g, Ho, Wo] and the Input positions (y, x) of [H, W], 0 where
 * that falls outside the image; with back the transpose (col2im): img[...] += col[...]
 * (img zeroed by the caller). */
static void im2col(const dgeo *g, float *restrict img, float *restrict col, int back)
{
    for (int64_t c = 0; c < g->mg; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                float *restrict row = col + ((c * g->kh + i) * g->kw + j) * g->hw;
                const int64_t off = j * g->dw - g->pl, sw = g->sw;
                int64_t lo, hi;
                valid_range(off, sw, g->ow, g->w, &lo, &hi);
                for (int64_t y = 0; y < g->h; y++) {
                    float *restrict r = row + y * g->w;
                    const int64_t iy = y * g->sh - g->pt + i * g->dh;
                    if (iy < 0 || iy >= g->oh) {
                        if (!back) memset(r, 0, (size_t)g->w * sizeof(float));
                        continue;
                    }
                    float *restrict im = img + (c * g->oh + iy) * g->ow;
                    if (back) {
                        for (int64_t x = lo; x < hi; x++) im[x * sw + off] += r[x];
                        continue;
                    }
                    for (int64_t x = 0; x < lo; x++) r[x] = 0.0f;
                    for (int64_t x = lo; x < hi; x++) r[x] = im[x * sw + off];
                    for (int64_t x = hi; x < g->w; x++) r[x] = 0.0f;
                }
            }
}

static int run_deconv(fl_kctx *c)
{
    dgeo g;
    FL_CHECK(dgeo_rt(c, &g));
    fl_tensor *x = FL_IN(c, 0), *f = FL_IN(c, 1), *out = FL_OUT(c, 0);
    int64_t os[4] = {g.n, g.m, g.oh, g.ow};
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, 4, os));
    out->lod_n = 0;
    fl__conv_state *st = fl__conv_state_get(c);
    if (!st) return fl_last_status();
    if (use_dnn(&g)) {
        fl_conv_desc d = dnn_desc(&g);
        int r = dnn_refused(fl__conv_bwd_data(&st->dnn, &d, x->data, f->data, out->data));
        if (r != 1) return r;
    }
    float *col = fl__conv_scratch(c, g.k * g.hw);
    if (!col) return fl_last_status();
    memset(out->data, 0, (size_t)out->numel * sizeof(float));
    const float *xd = x->data, *fd = f->data;
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t gr = 0; gr < g.g; gr++) {
            fl__sgemm(1, 0, g.k, g.hw, g.cg, 1.0f, fd + gr * g.cg * g.k, g.k, xd + (n * g.c + gr * g.cg) * g.hw, g.hw, 0.0f,
                      col, g.hw);
            im2col(&g, (float *)out->data + (n * g.m + gr * g.mg) * g.ohw, col, 1);
        }
    return FL_OK;
}

/* Grad op: inputs Input, Filter, Output@GRAD; outputs Input@GRAD and Filter@GRAD, each only
 * when requested. */
static int run_deconv_grad(fl_kctx *c)
{
    dgeo g;
    FL_CHECK(dgeo_rt(c, &g));
    FL_CHECK(fl__kctx_dense_f32(c, 2));
    fl_tensor *x = FL_IN(c, 0), *f = FL_IN(c, 1), *dy = FL_IN(c, 2), *dx = FL_OUT(c, 0), *df = FL_OUT(c, 1);
    if (dy->numel != g.n * g.m * g.ohw)
        return fl__err(FL_EINVAL, "conv2d_transpose_grad: gradient '%s' has %lld elements, the output of '%s' has %lld",
                       fl__kctx_var_name(c, 2, 0), (long long)dy->numel, fl__kctx_var_name(c, 0, 0),
                       (long long)(g.n * g.m * g.ohw));
    if (dx) {
        FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, 4, x->shape));
        dx->lod_n = 0;
    }
    if (df) FL_CHECK(fl__tensor_reshape_raw(df, FL_FLOAT32, 4, f->shape));
    fl__conv_state *st = fl__conv_state_get(c);
    if (!st) return fl_last_status();
    if (use_dnn(&g)) {
        fl_conv_desc d = dnn_desc(&g);
        int r = dx ? dnn_refused(fl__conv_fwd(&st->dnn, &d, dy->data, f->data, NULL, dx->data)) : FL_OK;
        if (r == FL_OK && df) r = dnn_refused(fl__conv_bwd_weights(&st->dnn, &d, dy->data, x->data, df->data));
        if (r != 1) return r;
    }
    float *col = fl__conv_scratch(c, g.k * g.hw);
    if (!col) return fl_last_status();
    if (df) memset(df->data, 0, (size_t)df->numel * sizeof(float));
    const float *xd = x->data, *fd = f->data;
    for (int64_t n = 0; n < g.n && (dx || df); n++)
        for (int64_t gr = 0; gr < g.g; gr++) {
            im2col(&g, (float *)dy->data + (n * g.m + gr * g.mg) * g.ohw, col, 0);
            const int64_t xo = (n * g.c + gr * g.cg) * g.hw;
            if (dx)
                fl__sgemm(0, 0, g.cg, g.hw, g.k, 1.0f, fd + gr * g.cg * g.k, g.k, col, g.hw, 0.0f, (float *)dx->data + xo,
                          g.hw);
            if (df)
                fl__sgemm(0, 1, g.cg, g.k, g.hw, 1.0f, xd + xo, g.hw, col, g.hw, 1.0f, (float *)df->data + gr * g.cg * g.k,
                          g.k);
        }
    return FL_OK;
}

static int grad_deconv(fl_op *op, fl_grad_ctx *g)
{
    fl_var *dz = fl__grad_of(g, op->out[0].vars[0]);
    if (!dz) return FL_OK;
    fl_var *x = op->in[0].vars[0], *w = op->in[1].vars[0];
    fl_var *gv[2] = {fl__grad_for(g, x), fl__grad_for(g, w)};
    static const char *const names[2] = {"Input@GRAD", "Filter@GRAD"};
    fl_io o[2];
    int no = 0;
    for (int i = 0; i < 2; i++)
        if (gv[i]) o[no++] = (fl_io){names[i], &gv[i], 1};
    if (!no) return FL_OK;
    fl_io in[3] = {FL_IO1("Input", x), FL_IO1("Filter", w), FL_IO1("Output@GRAD", dz)};
    return fl__grad_append(op, "conv2d_transpose_grad", in, 3, o, no);
}

static const fl_op_def def_deconv = {"conv2d_transpose", {"Input", "Filter"}, {"Output"},         infer_deconv,
                                     run_deconv,         grad_deconv,         fl__conv_state_free};
static const fl_op_def def_deconv_grad = {"conv2d_transpose_grad",
                                          {"Input", "Filter", "Output@GRAD"},
                                          {"Input@GRAD", "Filter@GRAD"},
                                          fl__infer_nop,
                                          run_deconv_grad,
                                          NULL,
                                          fl__conv_state_free};

/* ---- layer ---------------------------------------------------------------------------------- */

/* Paddle's layer: the filter size from output_size when none is given (needs H and W). */
static int64_t filter_from_output(int64_t out, int64_t in, int64_t s, int64_t p0, int64_t p1, int64_t d)
{
    if (out <= 0 || in <= 0) return 0;
    int64_t k = (out - (in - 1) * s + p0 + p1 - 1) / d + 1;
    return k > 0 ? k : 0;
}

fl_var *fl_layer_conv2d_transpose(fl_var *input, int64_t num_filters, int filter_h, int filter_w, const char *act,
                                  const fl_conv2d_transpose_attr *attr)
{
    fl_prog *p = fl__prog_of(&input, 1);
    if (!p || p->status != FL_OK) return NULL;
    fl_conv2d_transpose_attr none;
    memset(&none, 0, sizeof none);
    if (!attr) attr = &none;
    char xs[96];
    fl__shape_str(input, xs, sizeof xs);
    int64_t s[2], d[2], pd[4], os[2] = {attr->output_size[0], attr->output_size[1]};
    int64_t opad[2] = {attr->output_padding[0], attr->output_padding[1]}, g = attr->groups ? attr->groups : 1;
    for (int i = 0; i < 2; i++) {
        s[i] = attr->stride[i] ? attr->stride[i] : 1;
        d[i] = attr->dilation[i] ? attr->dilation[i] : 1;
    }
    for (int i = 0; i < 4; i++) pd[i] = attr->padding[i];
    const char *alg = attr->padding_algorithm ? attr->padding_algorithm : "EXPLICIT";
    int same = !strcasecmp(alg, "SAME"), explicit = !strcasecmp(alg, "EXPLICIT");
    int a = fl__conv_act_code(act);
    int64_t kh = filter_h, kw = filter_w;
    if (!explicit) memset(pd, 0, sizeof pd);
    if (kh <= 0 && input->ndim == 4) kh = filter_from_output(os[0], input->shape[2], s[0], pd[0], pd[1], same ? 1 : d[0]);
    if (kw <= 0 && input->ndim == 4) kw = filter_from_output(os[1], input->shape[3], s[1], pd[2], pd[3], same ? 1 : d[1]);
    const char *bad = NULL;
    if (input->ndim != 4) bad = "must be 4-D NCHW [N, C, H, W]";
    else if (input->dtype != FL_FLOAT32) bad = "must be float32";
    else if (input->shape[1] <= 0) bad = "needs a known channel count (dim 1)";
    else if (num_filters <= 0) bad = "needs num_filters > 0";
    else if (kh <= 0 || kw <= 0)
        bad = filter_h > 0 && filter_w > 0
                  ? "has a filter size <= 0"
                  : "needs filter sizes > 0, or an output_size and known H and W to derive them from";
    else if (s[0] < 1 || s[1] < 1 || d[0] < 1 || d[1] < 1 || g < 1) bad = "needs stride, dilation, groups >= 1";
    else if (pd[0] < 0 || pd[1] < 0 || pd[2] < 0 || pd[3] < 0 || opad[0] < 0 || opad[1] < 0 || os[0] < 0 || os[1] < 0)
        bad = "needs padding, output_padding and output_size >= 0";
    else if ((os[0] > 0) != (os[1] > 0)) bad = "needs both output_size entries or neither";
    else if (!same && !explicit && strcasecmp(alg, "VALID"))
        bad = "has a padding_algorithm other than EXPLICIT, SAME or VALID";
    else if (input->shape[1] % g || num_filters % g) bad = "has channels or num_filters not divisible by groups";
    else if (a < 0) bad = "got an unknown activation (expected relu, tanh, sigmoid, softmax, softsign or NULL)";
    if (bad) {
        fl__prog_error(p, FL_EINVAL,
                       "conv2d_transpose: input '%s' %s %s (num_filters %lld, filter %dx%d, groups %lld, act %s)",
                       input->name, xs, bad, (long long)num_filters, filter_h, filter_w, (long long)g, act ? act : "NULL");
        return NULL;
    }
    int64_t C = input->shape[1], fs[4] = {C, num_filters / g, kh, kw};
    char base[128], nm[192];
    fl__unique_name(p, "conv2d_transpose", base, sizeof base);
    if (attr->filter.name) snprintf(nm, sizeof nm, "%s", attr->filter.name);
    else snprintf(nm, sizeof nm, "%s.w_0", base);
    /* Paddle's XavierInitializer on [C, M/g, kh, kw]: fan_in dim 1, fan_out dim 0, times kh kw */
    fl_var *w = fl__param_create(p, nm, 4, fs, &attr->filter, fl_init_xavier(0), fs[1] * kh * kw, C * kh * kw);
    if (!w) return NULL;
    int64_t osh[4] = {input->shape[0], num_filters, -1, -1};
    fl_var *out = fl__tmp_var(p, base, FL_FLOAT32, 4, osh);
    if (!out) return NULL;
    fl_io ins[2] = {FL_IO1("Input", input), FL_IO1("Filter", w)};
    fl_io o = FL_IO1("Output", out);
    fl_op *op = fl__op_new(p, "conv2d_transpose", ins, 2, &o, 1);
    if (!op || fl__attr_set_ints(op, "strides", s, 2) || fl__attr_set_ints(op, "paddings", pd, 4) ||
        fl__attr_set_ints(op, "dilations", d, 2) || fl__attr_set_i(op, "groups", g) ||
        fl__attr_set_ints(op, "output_size", os, os[0] > 0 ? 2 : 0) ||
        fl__attr_set_ints(op, "output_padding", opad, opad[0] || opad[1] ? 2 : 0) ||
        fl__attr_set_s(op, "padding_algorithm",
                       same       ? "SAME"
                       : explicit ? "EXPLICIT"
                                  : "VALID") ||
        fl__attr_set_s(op, "data_format", "NCHW") || fl__op_finish(op))
        return NULL;
    if (!attr->no_bias) {
        if (attr->bias.name) snprintf(nm, sizeof nm, "%s", attr->bias.name);
        else snprintf(nm, sizeof nm, "%s.b_0", base);
        int64_t bs[1] = {num_filters};
        fl_var *b = fl__param_create(p, nm, 1, bs, &attr->bias, fl_init_constant(0.0f), 0, 0);
        if (!b || !(out = fl_layer_elementwise_add(out, b, 1))) return NULL;
    }
    return fl__conv_post_act(out, a);
}

const fl_op_def *const fl__ops_deconv[] = {&def_deconv, &def_deconv_grad, NULL};
