/*
 * ops_select.c - operator group "select": Paddle's where (paddle.where(condition, x, y)):
 *   Out = Condition ? X : Y   elementwise, a select (no arithmetic: an inf or a NaN in the
 *                             branch not taken never reaches Out or a gradient)
 * Condition of any numeric dtype (non-zero is true; Paddle's is bool, a dtype this library
 * does not have, and the comparisons here write int32 0 / 1), X and Y of one dtype (float32,
 * float64, int32, int64).  The three broadcast together as NumPy does (ops_bcast.h's rule
 * with axis -1, applied to Condition and X, then to that and Y), as paddle.where
 * broadcasts them before its op.  Gradient (float32): X@GRAD = Condition ? Out@GRAD : 0,
 * Y@GRAD = Condition ? 0 : Out@GRAD, each summed over the dims its operand was broadcast
 * along; Condition has none.
 */
#include <string.h>

#include "ops_bcast.h"

static int num_type_ok(fl_dtype t) { return t == FL_FLOAT32 || t == FL_FLOAT64 || t == FL_INT32 || t == FL_INT64; }

/* The output's dims of c, x, y (build = 1: -1 dims match anything); 0 when they broadcast. */
static int where_plan(const int64_t *cs, int cr, const int64_t *xs, int xr, const int64_t *ys, int yr, int build,
                      fl__bcast *out)
{
    fl__bcast cx;
    if (fl__bcast_plan(cs, cr, xs, xr, -1, build, &cx)) return 1;
    return fl__bcast_plan(cx.out, cx.nd, ys, yr, -1, build, out) ? 1 : 0;
}

static int infer_where(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *c = op->in[0].vars[0], *x = op->in[1].vars[0], *y = op->in[2].vars[0];
    if (!num_type_ok(c->dtype) || !num_type_ok(x->dtype) || x->dtype != y->dtype)
        return fl__op_error(op,
                            "Condition '%s' is %s, X '%s' %s, Y '%s' %s: X and Y must be of one dtype, and all three "
                            "float32, float64, int32 or int64",
                            c->name, fl_dtype_name(c->dtype), x->name, fl_dtype_name(x->dtype), y->name,
                            fl_dtype_name(y->dtype));
    fl__bcast b;
    if (where_plan(c->shape, c->ndim, x->shape, x->ndim, y->shape, y->ndim, 1, &b)) {
        char cs[96], xs[96], ys[96];
        fl__shape_str(c, cs, sizeof cs);
        fl__shape_str(x, xs, sizeof xs);
        fl__shape_str(y, ys, sizeof ys);
        return fl__op_error(op,
                            "Condition '%s' %s, X '%s' %s and Y '%s' %s do not broadcast (each dim, aligned from "
                            "the end, must be equal or 1)",
                            c->name, cs, x->name, xs, y->name, ys);
    }
    fl_var *o = op->out[0].vars[0];
    fl__var_set_shape(o, x->dtype, b.nd, b.out);
    o->lod_level = fl__shapes_equal(o, x) ? x->lod_level : 0;
    return FL_OK;
}

/* Run-time plan: out's dims and each operand's element strides over them. */
typedef struct {
    fl__bcast b;
    int64_t st[3][FL_MAX_DIMS]; /* Condition, X, Y */
} where_it;

static int where_runtime(fl_kctx *c, where_it *w)
{
    const fl_tensor *t[3] = {FL_IN(c, 0), FL_IN(c, 1), FL_IN(c, 2)};
    for (int k = 0; k < 3; k++)
        if (!t[k] || t[k]->is_rows || !num_type_ok(t[k]->dtype))
            return fl__err(FL_EINVAL, "where: %s '%s' must be a dense float32, float64, int32 or int64 tensor",
                           k == 0   ? "Condition"
                           : k == 1 ? "X"
                                    : "Y",
                           fl__kctx_var_name(c, k, 0));
    if (where_plan(t[0]->shape, t[0]->ndim, t[1]->shape, t[1]->ndim, t[2]->shape, t[2]->ndim, 0, &w->b)) {
        char d[3][96];
        for (int k = 0; k < 3; k++) fl_tensor_describe(t[k], d[k], sizeof d[k]);
        return fl__err(FL_EINVAL, "where: Condition '%s' %s, X '%s' %s and Y '%s' %s do not broadcast",
                       fl__kctx_var_name(c, 0, 0), d[0], fl__kctx_var_name(c, 1, 0), d[1], fl__kctx_var_name(c, 2, 0),
                       d[2]);
    }
    for (int k = 0; k < 3; k++) {
        fl__bcast one; /* the operand against the output: its strides over the output's dims */
        if (fl__bcast_plan(t[k]->shape, t[k]->ndim, w->b.out, w->b.nd, -1, 0, &one))
            return fl__err(FL_EINVAL, "where: operand %d does not broadcast to the output", k);
        memcpy(w->st[k], one.xst, sizeof w->st[k]);
    }
    return FL_OK;
}

/* Calls BODY with i (output index) and ci, xi, yi (operand indices) for every output element. */
#define WHERE_EACH(W, BODY)                                                            \
    do {                                                                               \
        int64_t idx_[FL_MAX_DIMS] = {0}, off_[3] = {0, 0, 0};                          \
        const int nd_ = (W)->b.nd;                                                     \
        const int64_t n_ = fl__dims_prod((W)->b.out, 0, nd_);                          \
        for (int64_t i = 0; i < n_; i++) {                                             \
            const int64_t ci = off_[0], xi = off_[1], yi = off_[2];                    \
            BODY;                                                                      \
            for (int d_ = nd_ - 1; d_ >= 0; d_--) {                                    \
                for (int k_ = 0; k_ < 3; k_++) off_[k_] += (W)->st[k_][d_];            \
                if (++idx_[d_] < (W)->b.out[d_]) break;                                \
                for (int k_ = 0; k_ < 3; k_++) off_[k_] -= (W)->st[k_][d_] * idx_[d_]; \
                idx_[d_] = 0;                                                          \
            }                                                                          \
        }                                                                              \
    } while (0)

static int cond_at(const fl_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case FL_FLOAT32: return ((const float *)t->data)[i] != 0.0f;
    case FL_FLOAT64: return ((const double *)t->data)[i] != 0.0;
    case FL_INT32: return ((const int32_t *)t->data)[i] != 0;
    default: return ((const int64_t *)t->data)[i] != 0;
    }
}

static int run_where(fl_kctx *c)
{
    where_it w;
    FL_CHECK(where_runtime(c, &w));
    const fl_tensor *ct = FL_IN(c, 0), *x = FL_IN(c, 1), *y = FL_IN(c, 2);
    if (x->dtype != y->dtype)
        return fl__err(FL_EINVAL, "where: X '%s' and Y '%s' must be of one dtype", fl__kctx_var_name(c, 1, 0),
                       fl__kctx_var_name(c, 2, 0));
    fl_tensor *out = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(out, x->dtype, w.b.nd, w.b.out));
    size_t es = fl_dtype_size(x->dtype);
    const char *xp = x->data, *yp = y->data;
    char *o = out->data;
    WHERE_EACH(&w, memcpy(o + (size_t)i * es, cond_at(ct, ci) ? xp + (size_t)xi * es : yp + (size_t)yi * es, es));
    if (out->ndim == x->ndim && !memcmp(out->shape, x->shape, (size_t)x->ndim * sizeof(int64_t)))
        return fl__tensor_share_lod(out, x);
    out->lod_n = 0;
    return FL_OK;
}

/* Inputs Condition, X, Y, Out@GRAD; outputs X@GRAD, Y@GRAD (either may be absent). */
static int run_where_grad(fl_kctx *c)
{
    FL_CHECK(fl__kctx_dense_f32(c, 3));
    where_it w;
    FL_CHECK(where_runtime(c, &w));
    const fl_tensor *ct = FL_IN(c, 0), *g = FL_IN(c, 3);
    if (g->numel != fl__dims_prod(w.b.out, 0, w.b.nd))
        return fl__err(FL_EINVAL, "where_grad: gradient '%s' has %lld elements, the output %lld",
                       fl__kctx_var_name(c, 3, 0), (long long)g->numel, (long long)fl__dims_prod(w.b.out, 0, w.b.nd));
    float *d[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        fl_tensor *dt = FL_OUT(c, k);
        const fl_tensor *src = FL_IN(c, k + 1);
        if (!dt) continue;
        FL_CHECK(fl__tensor_reshape_raw(dt, FL_FLOAT32, src->ndim, src->shape));
        memset(dt->data, 0, (size_t)src->numel * sizeof(float));
        FL_CHECK(fl__tensor_share_lod(dt, src));
        d[k] = dt->data;
    }
    const float *gp = g->data;
    float *dx = d[0], *dy = d[1];
    WHERE_EACH(&w, {
        if (cond_at(ct, ci)) {
            if (dx) dx[xi] += gp[i];
        } else if (dy) {
            dy[yi] += gp[i];
        }
    });
    return FL_OK;
}

static int grad_where(fl_op *op, fl_grad_ctx *g)
{
    fl_var *cv = op->in[0].vars[0], *x = op->in[1].vars[0], *y = op->in[2].vars[0];
    fl_var *dout = fl__grad_of(g, op->out[0].vars[0]);
    if (!dout) return FL_OK;
    if (x->dtype != FL_FLOAT32)
        return fl__op_error(op, "the gradient of where needs float32 X and Y, '%s' is %s", x->name,
                            fl_dtype_name(x->dtype));
    fl_var *dx = fl__grad_for(g, x), *dy = fl__grad_for(g, y);
    fl_var *dxv[1] = {dx}, *dyv[1] = {dy};
    fl_io in[4] = {FL_IO1("Condition", cv), FL_IO1("X", x), FL_IO1("Y", y), FL_IO1("Out@GRAD", dout)}, o[2];
    int no = 0;
    if (dx) o[no++] = (fl_io){"X@GRAD", dxv, 1};
    if (dy) o[no++] = (fl_io){"Y@GRAD", dyv, 1};
    return no ? fl__grad_append(op, "where_grad", in, 4, o, no) : FL_OK;
}

static const fl_op_def def_where = {"where", {"Condition", "X", "Y"}, {"Out"}, infer_where, run_where, grad_where, NULL};
static const fl_op_def def_where_grad = {
    "where_grad", {"Condition", "X", "Y", "Out@GRAD"}, {"X@GRAD", "Y@GRAD"}, fl__infer_nop, run_where_grad, NULL, NULL};

fl_var *fl_layer_where(fl_var *condition, fl_var *x, fl_var *y)
{
    fl_var *const in3[3] = {condition, x, y};
    fl_prog *p = fl__prog_of(in3, 3);
    if (!p) {
        fl__err(FL_EINVAL, "where: %s is NULL", !condition ? "condition" : !x ? "x" : "y");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    char base[128];
    fl__unique_name(p, "where", base, sizeof base);
    fl_var *o = fl__tmp_var(p, base, x->dtype, x->ndim, x->shape);
    if (!o) return NULL;
    fl_io in[3] = {FL_IO1("Condition", condition), FL_IO1("X", x), FL_IO1("Y", y)}, out = FL_IO1("Out", o);
    return fl__op_append(p, "where", in, 3, &out, 1) ? o : NULL;
}

const fl_op_def *const fl__ops_select[] = {&def_where, &def_where_grad, NULL};
