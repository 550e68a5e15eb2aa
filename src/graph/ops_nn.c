/*
 * ops_nn.c - operator group "nn": elementwise_add/sub/mul/div (Paddle broadcasting),
 * scale, dropout, reduce_sum and cos_sim, with their gradients and layer builders.
 * Semantics follow Paddle's fluid static-graph ops; choices where this port differs are
 * noted at each op.  Only float32 is supported (others are rejected at build time).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops_bcast.h"


/* infer(): output `slot` takes the shape and LoD level of input X. */
static fl_var *out_like_x(fl_op *op, int slot)
{
    fl_var *x = op->in[0].vars[0], *o = op->out[slot].vars[0];
    fl__var_set_shape(o, FL_FLOAT32, x->ndim, x->shape);
    o->lod_level = x->lod_level;
    return o;
}

/* Starts a layer: outputs "<type>_<k>.tmp_<j>" as Paddle's LayerHelper names them (infer sets
 * their shapes), op appended; the caller sets attributes and calls fl__op_finish. */
static const char *const OUT1[] = {"Out"};
static fl_op *layer_begin(const char *type, fl_var *x, fl_var *y, int nin, const char *const *slots, int nout, fl_var **o)
{
    fl_var *const xy[2] = {x, y};
    fl_prog *p = fl__prog_of(xy, nin);
    if (!p || p->status != FL_OK) return NULL;
    char base[128];
    fl__unique_name(p, type, base, sizeof base);
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Y", y)}, outs[3];
    for (int i = 0; i < nout; i++) {
        if (!(o[i] = fl__tmp_var(p, base, FL_FLOAT32, x->ndim, x->shape))) return NULL;
        outs[i] = (fl_io){slots[i], &o[i], 1};
    }
    return fl__op_new(p, type, in, nin, outs, nout);
}

/* Grad op of a binary op (inputs X, Y) writing X@GRAD / Y@GRAD only for those that need one. */
static int grad_xy(fl_op *op, fl_grad_ctx *g, const char *type, const fl_io *in, int nin)
{
    fl_var *dx = fl__grad_for(g, op->in[0].vars[0]), *dy = fl__grad_for(g, op->in[1].vars[0]);
    fl_var *dxv[1] = {dx}, *dyv[1] = {dy};
    fl_io o[2];
    int no = 0;
    if (dx) o[no++] = (fl_io){"X@GRAD", dxv, 1};
    if (dy) o[no++] = (fl_io){"Y@GRAD", dyv, 1};
    return no ? fl__grad_append(op, type, in, nin, o, no) : FL_OK;
}

/* ---- elementwise_add / sub / mul / div ------------------------------------------------ */

/* Paddle's broadcast rule (elementwise_op_function.h): with axis -1 meaning
 * rank(x) - rank(y), y's trailing 1s are trimmed and the remaining dims must equal x's
 * dims [axis, axis + rank(y')); a y trimmed to nothing is a scalar.  x is then viewed as
 * [pre, n, post] and y as [n].  Y may not have a higher rank than X (Paddle 1.x; X's
 * shape is the output's).  At build time (build = 1) unknown (-1) dims are also trimmed
 * from y's tail and skipped in comparisons; the run-time check is complete.  Operands that
 * do not fit this layout but broadcast both ways (Paddle 2.x: [N, 1] + [1, M], a Y of
 * higher rank) run the kernels of ops_bcast.c instead. */
enum { EW_ADD, EW_SUB, EW_MUL, EW_DIV };
typedef struct {
    int64_t pre, n, post;
} ew_dims;

/* Returns 0 if x and y broadcast, 1 for a bad rank/axis, 2 for mismatched dims. */
static int ew_layout(const int64_t *xs, int xr, const int64_t *ys, int yr, int axis, int build, ew_dims *d)
{
    if (yr > xr || axis < -1) return 1;
    int ax = axis == -1 ? xr - yr : axis;
    if (xr > 0 && ax >= xr) return 1;
    int yt = yr;
    while (yt > 0 && (ys[yt - 1] == 1 || (build && ys[yt - 1] < 0))) yt--;
    if (yt == 0) ax = xr;
    if (ax + yt > xr) return 1;
    for (int i = 0; i < yt; i++) {
        int64_t a = xs[ax + i], b = ys[i];
        if (a != b && !(build && (a < 0 || b < 0))) return 2;
    }
    if (build) return 0;
    d->pre = fl__dims_prod(xs, 0, ax);
    d->n = fl__dims_prod(ys, 0, yt);
    d->post = fl__dims_prod(xs, ax + yt, xr);
    if (d->n == 1) { /* scalar y: one flat loop */
        d->post *= d->pre;
        d->pre = 1;
    }
    return 0;
}

static int infer_ew(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op)); /* one variable per slot */
    fl_var *x = op->in[0].vars[0], *y = op->in[1].vars[0];
    int f64 = x->dtype == FL_FLOAT64 && y->dtype == FL_FLOAT64; /* forward only, ops_bcast.c's kernel */
    if (!f64) {
        FL_CHECK(fl__op_need_f32(op, x));
        FL_CHECK(fl__op_need_f32(op, y));
    }
    int axis = (int)fl__attr_i(op, "axis", -1);
    ew_dims d;
    int code = ew_layout(x->shape, x->ndim, y->shape, y->ndim, axis, 1, &d);
    fl__bcast b; /* not Paddle 1.x's one-way layout: Paddle 2.x's two-way broadcast (ops_bcast.c) */
    if ((code || f64) && !fl__bcast_plan(x->shape, x->ndim, y->shape, y->ndim, axis, 1, &b)) {
        fl__var_set_shape(op->out[0].vars[0], x->dtype, b.nd, b.out);
        op->out[0].vars[0]->lod_level = fl__shapes_equal(op->out[0].vars[0], x) ? x->lod_level : 0;
        return FL_OK;
    }
    if (code) {
        char xs[96], ys[96];
        fl__shape_str(x, xs, sizeof xs);
        fl__shape_str(y, ys, sizeof ys);
        if (code == 1)
            return fl__op_error(op,
                                "cannot broadcast Y '%s' %s to X '%s' %s with axis %d (rank of Y must be <= rank "
                                "of X and axis in [-1, rank(X)))",
                                y->name, ys, x->name, xs, axis);
        return fl__op_error(op,
                            "shape of Y '%s' %s does not match X '%s' %s at axis %d (Y's dims, trailing 1s "
                            "trimmed, must equal X's dims from axis on)",
                            y->name, ys, x->name, xs, axis == -1 ? x->ndim - y->ndim : axis);
    }
    out_like_x(op, 0);
    return FL_OK;
}

/* Run-time layout of X (slot 0) and Y (slot 1); 1 when they broadcast only both ways (the
 * kernels of ops_bcast.c then run). */
static int ew_runtime(fl_kctx *c, ew_dims *d)
{
    if (c->nin[0] && c->nin[1] && FL_IN(c, 0)->dtype == FL_FLOAT64 && FL_IN(c, 1)->dtype == FL_FLOAT64) return 1;
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    FL_CHECK(fl__kctx_dense_f32(c, 1));
    const fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1);
    int axis = (int)fl__attr_i(c->op, "axis", -1);
    if (ew_layout(x->shape, x->ndim, y->shape, y->ndim, axis, 0, d)) {
        if (!fl__bcast_plan(x->shape, x->ndim, y->shape, y->ndim, axis, 0, NULL)) return 1;
        char xs[96], ys[96];
        fl_tensor_describe(x, xs, sizeof xs);
        fl_tensor_describe(y, ys, sizeof ys);
        return fl__err(FL_EINVAL, "%s: Y '%s' %s does not broadcast to X '%s' %s (axis %d)", c->op->def->type,
                       fl__kctx_var_name(c, 1, 0), ys, fl__kctx_var_name(c, 0, 0), xs, axis);
    }
    return FL_OK;
}

/* o[pre,n,post] = EXPR(a = A[pre,n,post], b = B[n]); rows layout (post == 1: [M,N] op [N],
 * and same shapes) or general (a scalar B is pre = 1, n = 1, post = all). */
#define EW_LOOPS(O, A, B, D, EXPR)                              \
    do {                                                        \
        float *restrict o_ = (O);                               \
        const float *restrict a_ = (A), *restrict b_ = (B);     \
        if ((D).post == 1) {                                    \
            for (int64_t r_ = 0; r_ < (D).pre; r_++) {          \
                const float *restrict ar_ = a_ + r_ * (D).n;    \
                float *restrict or_ = o_ + r_ * (D).n;          \
                for (int64_t j_ = 0; j_ < (D).n; j_++) {        \
                    const float a = ar_[j_], b = b_[j_];        \
                    or_[j_] = (EXPR);                           \
                }                                               \
            }                                                   \
        } else {                                                \
            for (int64_t r_ = 0; r_ < (D).pre * (D).n; r_++) {  \
                const float b = b_[r_ % (D).n];                 \
                const float *restrict ar_ = a_ + r_ * (D).post; \
                float *restrict or_ = o_ + r_ * (D).post;       \
                for (int64_t k_ = 0; k_ < (D).post; k_++) {     \
                    const float a = ar_[k_];                    \
                    or_[k_] = (EXPR);                           \
                }                                               \
            }                                                   \
        }                                                       \
    } while (0)

/* dy[n] = sum over pre and post of EXPR(g = G[...], a = X[...], b = Y[n]). */
#define EW_REDUCE(DY, G, X, Y, D, EXPR)                                                             \
    do {                                                                                            \
        float *restrict dy_ = (DY);                                                                 \
        const float *restrict g_ = (G), *restrict x_ = (X), *restrict y_ = (Y);                     \
        memset(dy_, 0, (size_t)(D).n * sizeof(float));                                              \
        if ((D).post == 1) {                                                                        \
            for (int64_t r_ = 0; r_ < (D).pre; r_++) {                                              \
                const float *restrict gr_ = g_ + r_ * (D).n, *restrict xr_ = x_ + r_ * (D).n;       \
                for (int64_t j_ = 0; j_ < (D).n; j_++) {                                            \
                    const float g = gr_[j_], a = xr_[j_], b = y_[j_];                               \
                    dy_[j_] += ((void)a, (void)b, (EXPR));                                          \
                }                                                                                   \
            }                                                                                       \
        } else {                                                                                    \
            for (int64_t r_ = 0; r_ < (D).pre * (D).n; r_++) {                                      \
                const float b = y_[r_ % (D).n];                                                     \
                const float *restrict gr_ = g_ + r_ * (D).post, *restrict xr_ = x_ + r_ * (D).post; \
                double s_ = 0.0;                                                                    \
                for (int64_t k_ = 0; k_ < (D).post; k_++) {                                         \
                    const float g = gr_[k_], a = xr_[k_];                                           \
                    s_ += ((void)a, (void)b, (EXPR));                                               \
                }                                                                                   \
                dy_[r_ % (D).n] += (float)s_;                                                       \
            }                                                                                       \
        }                                                                                           \
    } while (0)

/* EW_* from the type: "elementwise_<add|sub|mul|div>[_grad]". */
static int ew_kind(const fl_kctx *c)
{
    char k = c->op->def->type[12];
    return k == 'a' ? EW_ADD : k == 's' ? EW_SUB : k == 'm' ? EW_MUL : EW_DIV;
}

static int run_ew(fl_kctx *c)
{
    int kind = ew_kind(c);
    ew_dims d;
    int st = ew_runtime(c, &d);
    if (st) return st < 0 ? st : fl__bcast_run(c, kind);
    fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1), *out = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, x->ndim, x->shape));
    switch (kind) {
    case EW_ADD: EW_LOOPS(out->data, x->data, y->data, d, a + b); break;
    case EW_SUB: EW_LOOPS(out->data, x->data, y->data, d, a - b); break;
    case EW_MUL: EW_LOOPS(out->data, x->data, y->data, d, a * b); break;
    default: EW_LOOPS(out->data, x->data, y->data, d, a / b); break;
    }
    return fl__tensor_share_lod(out, x);
}

/* Grad op: inputs X, Y, Out@GRAD; outputs X@GRAD and/or Y@GRAD (only those requested).
 * dX = dOut (add, sub), dOut*y (mul), dOut/y (div); dY = sum over broadcast dims of
 * dOut, -dOut, dOut*x, -dOut*x/y^2. */
static int run_ew_grad(fl_kctx *c)
{
    int kind = ew_kind(c);
    ew_dims d;
    int st = ew_runtime(c, &d);
    if (st) return st < 0 ? st : fl__bcast_grad_f32(c, kind);
    FL_CHECK(fl__kctx_dense_f32(c, 2));
    fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1), *gt = FL_IN(c, 2), *dx = FL_OUT(c, 0), *dy = FL_OUT(c, 1);
    if (gt->numel != x->numel)
        return fl__err(FL_EINVAL, "%s: gradient '%s' has %lld elements, X '%s' has %lld", c->op->def->type,
                       fl__kctx_var_name(c, 2, 0), (long long)gt->numel, fl__kctx_var_name(c, 0, 0), (long long)x->numel);
    if (dx) {
        FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
        switch (kind) {
        case EW_ADD:
        case EW_SUB: memcpy(dx->data, gt->data, (size_t)gt->numel * sizeof(float)); break;
        case EW_MUL: EW_LOOPS(dx->data, gt->data, y->data, d, a * b); break;
        default: EW_LOOPS(dx->data, gt->data, y->data, d, a / b); break;
        }
        FL_CHECK(fl__tensor_share_lod(dx, x));
    }
    if (dy) {
        FL_CHECK(fl__tensor_reshape_raw(dy, FL_FLOAT32, y->ndim, y->shape));
        switch (kind) {
        case EW_ADD: EW_REDUCE(dy->data, gt->data, x->data, y->data, d, g); break;
        case EW_SUB: EW_REDUCE(dy->data, gt->data, x->data, y->data, d, -g); break;
        case EW_MUL: EW_REDUCE(dy->data, gt->data, x->data, y->data, d, g * a); break;
        default: EW_REDUCE(dy->data, gt->data, x->data, y->data, d, -g * a / (b * b)); break;
        }
        FL_CHECK(fl__tensor_share_lod(dy, y));
    }
    return FL_OK;
}

static int grad_ew(fl_op *op, fl_grad_ctx *g)
{
    fl_var *dout = fl__grad_of(g, op->out[0].vars[0]);
    char type[64];
    snprintf(type, sizeof type, "%s_grad", op->def->type);
    fl_io in[3] = {FL_IO1("X", op->in[0].vars[0]), FL_IO1("Y", op->in[1].vars[0]), FL_IO1("Out@GRAD", dout)};
    return dout ? grad_xy(op, g, type, in, 3) : FL_OK;
}

#define EW_DEFS(name)                                                                                           \
    static const fl_op_def def_##name = {"elementwise_" #name, {"X", "Y"}, {"Out"}, infer_ew, run_ew, grad_ew}; \
    static const fl_op_def def_##name##_grad = {                                                                \
        "elementwise_" #name "_grad", {"X", "Y", "Out@GRAD"}, {"X@GRAD", "Y@GRAD"}, fl__infer_nop, run_ew_grad, NULL};
EW_DEFS(add)
EW_DEFS(sub)
EW_DEFS(mul)
EW_DEFS(div)

static fl_var *ew_layer(fl_var *x, fl_var *y, int axis, const char *type)
{
    fl_var *o;
    fl_op *op = layer_begin(type, x, y, 2, OUT1, 1, &o);
    return op && !fl__attr_set_i(op, "axis", axis) && !fl__op_finish(op) ? o : NULL;
}
fl_var *fl_layer_elementwise_add(fl_var *x, fl_var *y, int axis) { return ew_layer(x, y, axis, "elementwise_add"); }
fl_var *fl_layer_elementwise_sub(fl_var *x, fl_var *y, int axis) { return ew_layer(x, y, axis, "elementwise_sub"); }
fl_var *fl_layer_elementwise_mul(fl_var *x, fl_var *y, int axis) { return ew_layer(x, y, axis, "elementwise_mul"); }
fl_var *fl_layer_elementwise_div(fl_var *x, fl_var *y, int axis) { return ew_layer(x, y, axis, "elementwise_div"); }

/* ---- scale ------------------------------------------------------------------------------ */

/* Out = scale*X + bias (bias_after_scale, Paddle's default) or scale*(X + bias).  As in
 * Paddle, a SelectedRows X gives a SelectedRows Out with the same rows.  The gradient is
 * another scale op: dX = scale*dOut (bias 0), exactly as Paddle's ScaleGradMaker. */
static int infer_scale(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    out_like_x(op, 0)->is_sparse_grad = x->is_sparse_grad;
    return FL_OK;
}

static int run_scale(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *out = FL_OUT(c, 0);
    if (x->dtype != FL_FLOAT32)
        return fl__err(FL_EINVAL, "scale: input '%s' must be float32, is %s", fl__kctx_var_name(c, 0, 0),
                       fl_dtype_name(x->dtype));
    float s = (float)fl__attr_f(c->op, "scale", 1.0), b = (float)fl__attr_f(c->op, "bias", 0.0);
    if (!fl__attr_i(c->op, "bias_after_scale", 1)) b *= s;
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, x->ndim, x->shape));
    const float *restrict a = x->data;
    float *restrict y = out->data;
    for (int64_t i = 0; i < x->numel; i++) y[i] = s * a[i] + b;
    if (x->is_rows) FL_CHECK(fl_tensor_set_rows(out, x->rows, x->shape[0], x->height));
    else out->is_rows = 0;
    return fl__tensor_share_lod(out, x);
}

static int grad_scale(fl_op *op, fl_grad_ctx *g)
{
    fl_var *dout = fl__grad_of(g, op->out[0].vars[0]), *dx = fl__grad_for(g, op->in[0].vars[0]);
    if (!dout || !dx) return FL_OK;
    fl_io in = FL_IO1("X", dout), o = FL_IO1("Out", dx); /* infer_scale copies is_sparse_grad */
    fl_op *go = fl__op_new(op->prog, "scale", &in, 1, &o, 1);
    if (!go) return fl_prog_status(op->prog);
    FL_CHECK(fl__attr_set_f(go, "scale", fl__attr_f(op, "scale", 1.0)));
    FL_CHECK(fl__attr_set_f(go, "bias", 0.0));
    FL_CHECK(fl__attr_set_i(go, "bias_after_scale", 1));
    return fl__op_finish(go);
}

static const fl_op_def def_scale = {"scale", {"X"}, {"Out"}, infer_scale, run_scale, grad_scale};

fl_var *fl_layer_scale(fl_var *x, float scale, float bias, int bias_after_scale)
{
    fl_var *o;
    fl_op *op = layer_begin("scale", x, NULL, 1, OUT1, 1, &o);
    if (!op || fl__attr_set_f(op, "scale", scale) || fl__attr_set_f(op, "bias", bias) ||
        fl__attr_set_i(op, "bias_after_scale", bias_after_scale != 0) || fl__op_finish(op))
        return NULL;
    return o;
}

/* ---- dropout ---------------------------------------------------------------------------- */

/* Paddle's dropout.  Attributes: dropout_prob in [0, 1], is_test (0 at build, 1 after
 * fl_prog_clone(p, 1)), fix_seed, seed, dropout_implementation:
 *   downgrade_in_infer (default): train Out = X*Mask, test Out = X*(1-p);
 *   upscale_in_train: train Out = X*Mask/(1-p) (0 when p = 1, as Paddle), test Out = X.
 * Mask is uint8 0/1 (as Paddle 2.x; a quarter of a float32 mask's memory: BERT-base keeps
 * 37 of them until the backward pass), written in training only and read by dropout_grad.
 * With fix_seed the mask comes from `seed` alone and repeats every step (Paddle); otherwise
 * from the program seed, the name of Out (or the attribute rng_name) and the executor's
 * step: reproducible runs, and a new mask every step. */
static int dropout_impl(const fl_op *op, int *up) /* 0 if known; *up = upscale_in_train */
{
    const char *s = fl__attr_s(op, "dropout_implementation", "downgrade_in_infer");
    *up = !strcmp(s, "upscale_in_train");
    return *up || !strcmp(s, "downgrade_in_infer") ? 0 : 1;
}

static int infer_dropout(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    double p = fl__attr_f(op, "dropout_prob", 0.5);
    int up;
    if (!(p >= 0.0 && p <= 1.0)) return fl__op_error(op, "dropout_prob of '%s' must be in [0, 1], got %g", x->name, p);
    if (dropout_impl(op, &up))
        return fl__op_error(op,
                            "dropout_implementation '%s' (input '%s') must be 'downgrade_in_infer' or "
                            "'upscale_in_train'",
                            fl__attr_s(op, "dropout_implementation", ""), x->name);
    out_like_x(op, 0);
    fl__var_set_shape(out_like_x(op, 1), FL_UINT8, x->ndim, x->shape);
    return FL_OK;
}

/* The mask and output of one dropout: element i draws fl__rng_uniform of an fl_rng seeded
 * `seed` after i draws (splitmix64 is a counter: state seed + (i + 1) * golden), computed
 * from i so the loop vectorises (AVX-512 has the 64-bit multiplies); the same masks as
 * drawing in sequence. */
FL_CLONE_TARGETS static void dropout_mask(uint8_t *restrict m, float *restrict y, const float *restrict a, int64_t n,
                                          uint64_t seed, float p, float k)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t z = seed + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ULL;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        float u = (float)(z >> 40) * (1.0f / 16777216.0f);
        m[i] = u >= p;
        y[i] = u < p ? 0.0f : a[i] * k;
    }
}

static int run_dropout(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    fl_tensor *x = FL_IN(c, 0), *out = FL_OUT(c, 0), *mask = FL_OUT(c, 1);
    float p = (float)fl__attr_f(c->op, "dropout_prob", 0.5);
    int up = 0;
    dropout_impl(c->op, &up);
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, x->ndim, x->shape));
    FL_CHECK(fl__tensor_share_lod(out, x));
    const float *restrict a = x->data;
    float *restrict y = out->data;
    int64_t n = x->numel;
    if (fl__attr_i(c->op, "is_test", 0)) {
        float k = up ? 1.0f : 1.0f - p;
        for (int64_t i = 0; i < n; i++) y[i] = k * a[i];
        return FL_OK;
    }
    FL_CHECK(fl__tensor_reshape_raw(mask, FL_UINT8, x->ndim, x->shape));
    FL_CHECK(fl__tensor_share_lod(mask, x));
    uint8_t *restrict m = mask->data;
    uint64_t seed;
    if (fl__attr_i(c->op, "fix_seed", 0)) {
        seed = fl__hash_u64((uint64_t)fl__attr_i(c->op, "seed", 0) + 0x6a09e667f3bcc909ULL);
    } else {
        /* rng_name: set on recompute's copy (src/graph/recompute.c) to draw the same mask */
        const char *nm = fl__attr_s(c->op, "rng_name", NULL);
        if (!nm) nm = fl__kctx_var_name(c, 0, 1);
        seed = fl__hash_u64(c->op->prog->seed) ^ fl__hash_bytes(nm, strlen(nm));
        seed = fl__hash_u64(seed + 0x9e3779b97f4a7c15ULL * (c->step + 1));
    }
    float k = (up && p < 1.0f) ? 1.0f / (1.0f - p) : up ? 0.0f : 1.0f;
    dropout_mask(m, y, a, n, seed, p, k);
    return FL_OK;
}

FL_CLONE_TARGETS static void dropout_grad_apply(float *restrict o, const float *restrict d, const uint8_t *restrict m,
                                                int64_t n, float k)
{
    for (int64_t i = 0; i < n; i++) o[i] = d[i] * ((float)m[i] * k);
}

/* dX = dOut*Mask (downgrade_in_infer) or dOut*Mask/(1-p) (upscale_in_train). */
static int run_dropout_grad(fl_kctx *c)
{
    if (fl__attr_i(c->op, "is_test", 0))
        return fl__err(FL_EINVAL, "dropout_grad: the gradient of dropout is only defined when is_test is 0");
    FL_CHECK(fl__kctx_dense_f32(c, 1));
    fl_tensor *mask = FL_IN(c, 0), *g = FL_IN(c, 1), *dx = FL_OUT(c, 0);
    if (!mask || mask->dtype != FL_UINT8 || mask->is_rows)
        return fl__err(FL_EINVAL, "dropout_grad: Mask '%s' must be a dense uint8 tensor (dropout's Mask), is %s",
                       fl__kctx_var_name(c, 0, 0), mask ? fl_dtype_name(mask->dtype) : "missing");
    if (mask->numel != g->numel)
        return fl__err(FL_EINVAL, "dropout_grad: Mask '%s' has %lld elements, gradient '%s' %lld",
                       fl__kctx_var_name(c, 0, 0), (long long)mask->numel, fl__kctx_var_name(c, 1, 0), (long long)g->numel);
    float p = (float)fl__attr_f(c->op, "dropout_prob", 0.5);
    int up = 0;
    dropout_impl(c->op, &up);
    float k = (up && p < 1.0f) ? 1.0f / (1.0f - p) : up ? 0.0f : 1.0f;
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, g->ndim, g->shape));
    dropout_grad_apply(dx->data, g->data, mask->data, g->numel, k);
    return fl__tensor_share_lod(dx, g);
}

static int grad_dropout(fl_op *op, fl_grad_ctx *g)
{
    fl_var *dout = fl__grad_of(g, op->out[0].vars[0]), *dx = fl__grad_for(g, op->in[0].vars[0]);
    if (!dout || !dx) return FL_OK;
    fl_io in[2] = {FL_IO1("Mask", op->out[1].vars[0]), FL_IO1("Out@GRAD", dout)};
    fl_io o = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, "dropout_grad", in, 2, &o, 1);
}

static const fl_op_def def_dropout = {"dropout", {"X"}, {"Out", "Mask"}, infer_dropout, run_dropout, grad_dropout};
static const fl_op_def def_dropout_grad = {"dropout_grad", {"Mask", "Out@GRAD"}, {"X@GRAD"},
                                           fl__infer_nop,  run_dropout_grad,     NULL};

/* dropout_prob and the implementation are checked by infer (error names op and input). */
fl_var *fl_layer_dropout(fl_var *x, float prob, const char *implementation)
{
    fl_var *o[2];
    fl_op *op = layer_begin("dropout", x, NULL, 1, (const char *const[]){"Out", "Mask"}, 2, o);
    if (!op) return NULL;
    o[1]->stop_gradient = 1;
    if (fl__attr_set_f(op, "dropout_prob", prob) || fl__attr_set_i(op, "is_test", 0) || fl__attr_set_i(op, "fix_seed", 0) ||
        fl__attr_set_i(op, "seed", 0) ||
        fl__attr_set_s(op, "dropout_implementation", implementation ? implementation : "downgrade_in_infer") ||
        fl__op_finish(op))
        return NULL;
    return o[0];
}

/* ---- reduce_sum ------------------------------------------------------------------------- */

/* Paddle's reduce_sum: attributes dim (ints, negative counts from the end), keep_dim and
 * reduce_all (the layer sets reduce_all with dim = [0] when no dims are given, as
 * fluid.layers.reduce_sum).  Reduced dims are dropped (or kept as 1 with keep_dim); a
 * result with no dims left is [1].  LoD is shared when dim 0 is kept.  Listing a dim twice
 * is an error here (Paddle leaves it undefined). */
/* Marks the reduced dims in red[] and writes the output shape to os (*on dims); returns
 * 0, -1 when 'dim' is missing (and all_by_default is 0), or 1 + the index of an
 * out-of-range or repeated entry.  reduce_all, or no 'dim' with all_by_default (reduce_mean's
 * rule), reduces every dim.  The one shape rule of the reductions (reduce_sum here,
 * reduce_mean in ops_math.c). */
int fl__reduce_dims(const fl_op *op, int rank, const int64_t *xs, char *red, int64_t *os, int *on, int all_by_default)
{
    memset(red, 0, FL_MAX_DIMS);
    const fl_attr *a = fl__attr_find(op, "dim");
    int given = a && a->type == FL_ATTR_INTS && a->n >= 1;
    if (fl__attr_i(op, "reduce_all", 0) || (!given && all_by_default)) {
        memset(red, 1, (size_t)rank);
    } else {
        if (!given) return -1;
        for (int k = 0; k < a->n; k++) {
            int64_t d = a->ints[k] < 0 ? a->ints[k] + rank : a->ints[k];
            if (d < 0 || d >= rank || red[d]) return k + 1;
            red[d] = 1;
        }
    }
    int keep = (int)fl__attr_i(op, "keep_dim", 0), n = 0;
    for (int d = 0; d < rank; d++)
        if (!red[d] || keep) os[n++] = red[d] ? 1 : xs[d];
    if (n == 0) os[n++] = 1;
    *on = n;
    return 0;
}

static int infer_reduce_sum(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    if (x->dtype != FL_FLOAT64) FL_CHECK(fl__op_need_f32(op, x)); /* float64: forward only */
    char red[FL_MAX_DIMS], xs[96];
    int64_t os[FL_MAX_DIMS];
    int n, bad = fl__reduce_dims(op, x->ndim, x->shape, red, os, &n, 0);
    fl__shape_str(x, xs, sizeof xs);
    if (bad < 0) return fl__op_error(op, "attribute 'dim' is missing or empty (input '%s')", x->name);
    if (bad > 0)
        return fl__op_error(op, "dim %lld (entry %d) is out of range or repeated for input '%s' %s (rank %d)",
                            (long long)fl__attr_find(op, "dim")->ints[bad - 1], bad - 1, x->name, xs, x->ndim);
    fl__var_set_shape(o, x->dtype, n, os);
    o->lod_level = (x->ndim > 0 && !red[0]) ? x->lod_level : 0;
    return FL_OK;
}

/* float64 reduce_sum (forward only: simnet_bow's accuracy casts its counts to float64):
 * each element of x added into its output element, found by an odometer over x's dims. */
static void reduce_sum_f64(const double *x, double *out, int64_t onumel, const int64_t *xs, int rank, const char *red,
                           int64_t numel)
{
    int64_t ostr[FL_MAX_DIMS], idx[FL_MAX_DIMS] = {0}, s = 1, o = 0;
    for (int d = rank - 1; d >= 0; d--) {
        ostr[d] = red[d] ? 0 : s;
        if (!red[d]) s *= xs[d];
    }
    memset(out, 0, (size_t)onumel * sizeof *out);
    for (int64_t i = 0; i < numel; i++) {
        out[o] += x[i];
        for (int d = rank - 1; d >= 0; d--) {
            o += ostr[d];
            if (++idx[d] < xs[d]) break;
            o -= ostr[d] * xs[d];
            idx[d] = 0;
        }
    }
}

/* Walks x in row-major order as merged runs of reduced / kept dims (size-1 dims
 * dropped).  backward = 0: out += x summed over reduced runs; backward = 1: x <- out
 * broadcast back (x is then the gradient being written). */
static void reduce_walk(float *restrict x, float *restrict out, const int64_t *xs, int rank, const char *red, int64_t numel,
                        int backward)
{
    int64_t len[FL_MAX_DIMS], ostr[FL_MAX_DIMS], idx[FL_MAX_DIMS] = {0};
    char r[FL_MAX_DIMS];
    int m = 0;
    for (int d = 0; d < rank; d++) {
        if (xs[d] == 1) continue;
        if (m && r[m - 1] == red[d]) {
            len[m - 1] *= xs[d];
        } else {
            len[m] = xs[d];
            r[m++] = red[d];
        }
    }
    if (m == 0) len[m] = 1, r[m++] = 0; /* a single element */
    int64_t s = 1;
    for (int k = m - 1; k >= 0; k--) {
        ostr[k] = r[k] ? 0 : s;
        if (!r[k]) s *= len[k];
    }
    if (!backward) memset(out, 0, (size_t)s * sizeof(float));
    int64_t L = len[m - 1], outer = L ? numel / L : 0, oo = 0; /* r[m - 1]: the inner run is reduced */
    for (int64_t it = 0; it < outer; it++) {
        float *restrict xr = x + it * L;
        if (!backward && r[m - 1]) {
            float acc = 0.0f;
            for (int64_t k = 0; k < L; k++) acc += xr[k];
            out[oo] += acc;
        } else if (!backward) {
            for (int64_t k = 0; k < L; k++) out[oo + k] += xr[k];
        } else if (r[m - 1]) {
            const float v = out[oo];
            for (int64_t k = 0; k < L; k++) xr[k] = v;
        } else {
            memcpy(xr, out + oo, (size_t)L * sizeof(float));
        }
        for (int k = m - 2; k >= 0; k--) { /* odometer over the outer runs */
            oo += ostr[k];
            if (++idx[k] < len[k]) break;
            oo -= ostr[k] * len[k];
            idx[k] = 0;
        }
    }
}

static int reduce_runtime(fl_kctx *c, const fl_tensor *x, char *red, int64_t *os, int *n)
{
    if (fl__reduce_dims(c->op, x->ndim, x->shape, red, os, n, 0))
        return fl__err(FL_EINVAL, "%s: attribute 'dim' does not fit input '%s' of rank %d", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0), x->ndim);
    return FL_OK;
}

static int run_reduce_sum(fl_kctx *c)
{
    int f64 = c->nin[0] && FL_IN(c, 0)->dtype == FL_FLOAT64 && !FL_IN(c, 0)->is_rows;
    if (!f64) FL_CHECK(fl__kctx_dense_f32(c, 0));
    fl_tensor *x = FL_IN(c, 0), *out = FL_OUT(c, 0);
    char red[FL_MAX_DIMS];
    int64_t os[FL_MAX_DIMS];
    int n;
    FL_CHECK(reduce_runtime(c, x, red, os, &n));
    FL_CHECK(fl__tensor_reshape_raw(out, x->dtype, n, os));
    if (f64) reduce_sum_f64(x->data, out->data, out->numel, x->shape, x->ndim, red, x->numel);
    else reduce_walk(x->data, out->data, x->shape, x->ndim, red, x->numel, 0);
    out->lod_n = 0;
    return (x->ndim > 0 && !red[0]) ? fl__tensor_share_lod(out, x) : FL_OK;
}

/* Grad op: inputs X, Out@GRAD; X@GRAD = Out@GRAD broadcast over the reduced dims. */
static int run_reduce_sum_grad(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 1));
    fl_tensor *x = FL_IN(c, 0), *g = FL_IN(c, 1), *dx = FL_OUT(c, 0);
    char red[FL_MAX_DIMS];
    int64_t os[FL_MAX_DIMS];
    int n;
    FL_CHECK(reduce_runtime(c, x, red, os, &n));
    if (g->numel != fl__dims_prod(os, 0, n))
        return fl__err(FL_EINVAL, "reduce_sum_grad: gradient '%s' has %lld elements, expected %lld",
                       fl__kctx_var_name(c, 1, 0), (long long)g->numel, (long long)fl__dims_prod(os, 0, n));
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    reduce_walk(dx->data, g->data, x->shape, x->ndim, red, x->numel, 1);
    return fl__tensor_share_lod(dx, x);
}

static int grad_reduce_sum(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dout = fl__grad_of(g, op->out[0].vars[0]), *dx = fl__grad_for(g, x);
    if (!dout || !dx) return FL_OK;
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Out@GRAD", dout)};
    fl_io o = FL_IO1("X@GRAD", dx);
    return fl__grad_append(op, "reduce_sum_grad", in, 2, &o, 1);
}

static const fl_op_def def_reduce_sum = {"reduce_sum", {"X"}, {"Out"}, infer_reduce_sum, run_reduce_sum, grad_reduce_sum};
static const fl_op_def def_reduce_sum_grad = {"reduce_sum_grad", {"X", "Out@GRAD"},   {"X@GRAD"},
                                              fl__infer_nop,     run_reduce_sum_grad, NULL};

fl_var *fl_layer_reduce_sum(fl_var *x, const int *dims, int ndims, int keep_dim)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p || p->status != FL_OK) return NULL;
    if (ndims < 0 || ndims > FL_MAX_DIMS || (ndims && !dims)) {
        fl__prog_error(p, FL_EINVAL, "reduce_sum: %d dims given for input '%s' (expected 0..%d and a dims array)", ndims,
                       x->name, FL_MAX_DIMS);
        return NULL;
    }
    int64_t dv[FL_MAX_DIMS] = {0};
    for (int i = 0; i < ndims; i++) dv[i] = dims[i];
    fl_var *o;
    fl_op *op = layer_begin("reduce_sum", x, NULL, 1, OUT1, 1, &o);
    if (!op || fl__attr_set_ints(op, "dim", dv, ndims ? ndims : 1) || fl__attr_set_i(op, "keep_dim", keep_dim != 0) ||
        fl__attr_set_i(op, "reduce_all", ndims == 0) || fl__op_finish(op))
        return NULL;
    return o;
}

/* ---- cos_sim ---------------------------------------------------------------------------- */

/* Paddle's cos_sim: X [N, ...], Y [N or 1, ...] of equal rank (>= 2) and equal dims after
 * the first, rows flattened to length D -> Out [N, 1], XNorm [N, 1], YNorm [N or 1, 1]
 * (the norms are kept for the gradient); a Y of one row is broadcast.  Choice: a row with
 * a zero norm gives Out = 0 and no gradient (Paddle divides by zero). */
static int infer_cos_sim(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0], *y = op->in[1].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    FL_CHECK(fl__op_need_f32(op, y));
    int ok = x->ndim >= 2 && x->ndim == y->ndim;
    for (int d = 1; ok && d < x->ndim; d++) ok = x->shape[d] == y->shape[d] || x->shape[d] < 0 || y->shape[d] < 0;
    ok = ok && (y->shape[0] == 1 || x->shape[0] == y->shape[0] || x->shape[0] < 0 || y->shape[0] < 0);
    if (!ok) {
        char xs[96], ys[96];
        fl__shape_str(x, xs, sizeof xs);
        fl__shape_str(y, ys, sizeof ys);
        return fl__op_error(op,
                            "X '%s' %s and Y '%s' %s must have equal rank >= 2, equal dims after the first, and Y "
                            "must have as many rows as X or one",
                            x->name, xs, y->name, ys);
    }
    int64_t sx[2] = {x->shape[0], 1}, sy[2] = {y->shape[0], 1};
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, 2, sx);
    fl__var_set_shape(op->out[1].vars[0], FL_FLOAT32, 2, sx);
    fl__var_set_shape(op->out[2].vars[0], FL_FLOAT32, 2, sy);
    op->out[0].vars[0]->lod_level = x->lod_level;
    return FL_OK;
}

/* Run-time shapes: rows of X, rows of Y (N or 1), row length. */
static int cos_dims(fl_kctx *c, int64_t *n, int64_t *ny, int64_t *len)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    FL_CHECK(fl__kctx_dense_f32(c, 1));
    const fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1);
    *n = x->ndim ? x->shape[0] : 1;
    *ny = y->ndim ? y->shape[0] : 1;
    *len = *n ? x->numel / *n : 0;
    if (x->ndim < 2 || x->ndim != y->ndim || (*ny != *n && *ny != 1) || y->numel != *ny * *len) {
        char xs[96], ys[96];
        fl_tensor_describe(x, xs, sizeof xs);
        fl_tensor_describe(y, ys, sizeof ys);
        return fl__err(FL_EINVAL, "%s: X '%s' %s and Y '%s' %s do not match", c->op->def->type, fl__kctx_var_name(c, 0, 0),
                       xs, fl__kctx_var_name(c, 1, 0), ys);
    }
    return FL_OK;
}

static float dotf(const float *restrict a, const float *restrict b, int64_t n)
{
    float s = 0.0f;
    for (int64_t k = 0; k < n; k++) s += a[k] * b[k];
    return s;
}

static int run_cos_sim(fl_kctx *c)
{
    int64_t n, ny, d;
    FL_CHECK(cos_dims(c, &n, &ny, &d));
    fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1), *out = FL_OUT(c, 0), *xn = FL_OUT(c, 1), *yn = FL_OUT(c, 2);
    FL_CHECK(fl__tensor_resize2(out, n, 1));
    FL_CHECK(fl__tensor_resize2(xn, n, 1));
    FL_CHECK(fl__tensor_resize2(yn, ny, 1));
    const float *xd = x->data, *yd = y->data;
    float *o = out->data, *xnd = xn->data, *ynd = yn->data;
    for (int64_t i = 0; i < ny; i++) ynd[i] = sqrtf(dotf(yd + i * d, yd + i * d, d));
    for (int64_t i = 0; i < n; i++) {
        const float *xr = xd + i * d, *yr = yd + (ny == 1 ? 0 : i * d);
        xnd[i] = sqrtf(dotf(xr, xr, d));
        float den = xnd[i] * ynd[ny == 1 ? 0 : i];
        o[i] = den > 0.0f ? dotf(xr, yr, d) / den : 0.0f;
    }
    return fl__tensor_share_lod(out, x);
}

/* Grad op: inputs X, Y, Out, XNorm, YNorm, Out@GRAD; outputs X@GRAD, Y@GRAD (as asked):
 *   dX_i = g_i (y_i / (|x_i||y_i|) - out_i x_i / |x_i|^2), dY likewise with x and y
 * swapped, summed over rows when Y is broadcast. */
static int run_cos_sim_grad(fl_kctx *c)
{
    int64_t n, ny, d;
    FL_CHECK(cos_dims(c, &n, &ny, &d));
    fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1), *dx = FL_OUT(c, 0), *dy = FL_OUT(c, 1);
    const float *xd = x->data, *yd = y->data, *o = FL_IN(c, 2)->data, *xn = FL_IN(c, 3)->data, *yn = FL_IN(c, 4)->data;
    const float *g = FL_IN(c, 5)->data;
    if (FL_IN(c, 2)->numel != n || FL_IN(c, 3)->numel != n || FL_IN(c, 4)->numel != ny || FL_IN(c, 5)->numel != n)
        return fl__err(FL_EINVAL, "cos_sim_grad: Out, XNorm, YNorm or Out@GRAD of '%s' has the wrong size",
                       fl__kctx_var_name(c, 0, 0));
    if (dx) FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    if (dy) FL_CHECK(fl__tensor_reshape_raw(dy, FL_FLOAT32, y->ndim, y->shape));
    if (dy) memset(dy->data, 0, (size_t)y->numel * sizeof(float)); /* rows accumulate when Y is broadcast */
    for (int64_t i = 0; i < n; i++) {
        int64_t j = ny == 1 ? 0 : i;
        const float *restrict xr = xd + i * d, *restrict yr = yd + j * d;
        float a = xn[i], b = yn[j], den = a * b;
        if (!(den > 0.0f)) {
            if (dx) memset((float *)dx->data + i * d, 0, (size_t)d * sizeof(float));
            continue;
        }
        float k1 = g[i] / den, kx = g[i] * o[i] / (a * a), ky = g[i] * o[i] / (b * b);
        if (dx) {
            float *restrict r = (float *)dx->data + i * d;
            for (int64_t k = 0; k < d; k++) r[k] = k1 * yr[k] - kx * xr[k];
        }
        if (dy) {
            float *restrict r = (float *)dy->data + j * d;
            for (int64_t k = 0; k < d; k++) r[k] += k1 * xr[k] - ky * yr[k];
        }
    }
    if (dx) FL_CHECK(fl__tensor_share_lod(dx, x));
    return FL_OK;
}

static int grad_cos_sim(fl_op *op, fl_grad_ctx *g)
{
    fl_var *dout = fl__grad_of(g, op->out[0].vars[0]);
    fl_var *out = op->out[0].vars[0], *xn = op->out[1].vars[0], *yn = op->out[2].vars[0];
    fl_io in[6] = {FL_IO1("X", op->in[0].vars[0]),
                   FL_IO1("Y", op->in[1].vars[0]),
                   FL_IO1("Out", out),
                   FL_IO1("XNorm", xn),
                   FL_IO1("YNorm", yn),
                   FL_IO1("Out@GRAD", dout)};
    return dout ? grad_xy(op, g, "cos_sim_grad", in, 6) : FL_OK;
}

static const fl_op_def def_cos_sim = {"cos_sim",     {"X", "Y"},  {"Out", "XNorm", "YNorm"},
                                      infer_cos_sim, run_cos_sim, grad_cos_sim};
static const fl_op_def def_cos_sim_grad = {"cos_sim_grad",       {"X", "Y", "Out", "XNorm", "YNorm", "Out@GRAD"},
                                           {"X@GRAD", "Y@GRAD"}, fl__infer_nop,
                                           run_cos_sim_grad,     NULL};

fl_var *fl_layer_cos_sim(fl_var *x, fl_var *y)
{
    fl_var *o[3];
    fl_op *op = layer_begin("cos_sim", x, y, 2, (const char *const[]){"Out", "XNorm", "YNorm"}, 3, o);
    if (!op) return NULL;
    o[1]->stop_gradient = o[2]->stop_gradient = 1;
    return fl__op_finish(op) == FL_OK ? o[0] : NULL;
}

const fl_op_def *const fl__ops_nn[] = {
    &def_add,          &def_add_grad, &def_sub,     &def_sub_grad,     &def_mul,        &def_mul_grad,        &def_div,
    &def_div_grad,     &def_scale,    &def_dropout, &def_dropout_grad, &def_reduce_sum, &def_reduce_sum_grad, &def_cos_sim,
    &def_cos_sim_grad, NULL};
