/*
 * ops_bcast.c - operator group "bcast": two-way (NumPy) broadcasting of binary ops, as
 * Paddle 2.x broadcasts, and the ops that always use it:
 *   elementwise_max / elementwise_min   float32, with gradients (Paddle's: the gradient goes
 *                                       to X where X > Y (max) or X < Y (min), else to Y)
 *   less_than less_equal greater_than greater_equal equal not_equal
 *                                       X, Y of one dtype (float32, float64, int32, int64)
 *   logical_and logical_or logical_xor logical_not (X only)
 *                                       any of those dtypes, non-zero is true
 * The comparisons and logical ops write 0 / 1 as int32 (Paddle writes bool, a dtype this
 * library does not have; cast and the executor's conditions read int32) and have no
 * gradient.  elementwise_add / sub / mul / div (ops_nn.c) fall back to the kernels here
 * when their operands do not fit Paddle 1.x's one-way layout, or are float64 (forward only:
 * float64 arithmetic has no gradient here).
 */
#include <stdio.h>
#include <string.h>

#include "ops_bcast.h"

int fl__bcast_plan(const int64_t *xs, int xr, const int64_t *ys, int yr, int axis, int build, fl__bcast *b)
{
    int nd = xr > yr ? xr : yr;
    int64_t xp[FL_MAX_DIMS], yp[FL_MAX_DIMS];
    if (nd > FL_MAX_DIMS || axis < -1) return 1;
    if (nd == 0) { /* two scalars */
        if (b) b->nd = 1, b->out[0] = 1, b->xst[0] = b->yst[0] = 0;
        return 0;
    }
    for (int d = 0; d < nd; d++) xp[d] = yp[d] = 1;
    /* the operand of lower rank (y when equal) goes to offset `off` of the other's dims */
    const int64_t *ss = xr < yr ? xs : ys;
    int sr = xr < yr ? xr : yr;
    int64_t *sp = xr < yr ? xp : yp, *lp = xr < yr ? yp : xp;
    const int64_t *ls = xr < yr ? ys : xs;
    for (int d = 0; d < nd; d++) lp[d] = ls[d];
    int off = (axis == -1 || sr == nd) ? nd - sr : axis;
    while (sr > 0 && off + sr > nd && (ss[sr - 1] == 1 || (build && ss[sr - 1] < 0))) sr--;
    if (off < 0 || off + sr > nd) return 1;
    for (int d = 0; d < sr; d++) sp[off + d] = ss[d];
    int64_t out[FL_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        int64_t a = xp[d], c = yp[d];
        if (a == c || c == 1) out[d] = a;
        else if (a == 1) out[d] = c;
        else if (build && (a < 0 || c < 0)) out[d] = a < 0 ? c : a;
        else return 2;
    }
    if (!b) return 0;
    b->nd = nd;
    int64_t xs1 = 1, ys1 = 1;
    for (int d = nd - 1; d >= 0; d--) {
        b->out[d] = out[d];
        b->xst[d] = (xp[d] == 1 && out[d] != 1) ? 0 : xs1;
        b->yst[d] = (yp[d] == 1 && out[d] != 1) ? 0 : ys1;
        xs1 *= xp[d] < 0 ? 1 : xp[d];
        ys1 *= yp[d] < 0 ? 1 : yp[d];
    }
    return 0;
}

/* An odometer over the dims before the last: the offsets of X and Y at the start of each of
 * the output's rows. */
typedef struct {
    const fl__bcast *b;
    int64_t idx[FL_MAX_DIMS];
    int64_t xo, yo;
} bc_it;

static void bc_next(bc_it *it)
{
    const fl__bcast *b = it->b;
    for (int d = b->nd - 2; d >= 0; d--) {
        it->xo += b->xst[d], it->yo += b->yst[d];
        if (++it->idx[d] < b->out[d]) return;
        it->xo -= b->xst[d] * b->out[d], it->yo -= b->yst[d] * b->out[d];
        it->idx[d] = 0;
    }
}

#define BC_ROWS(B, BODY)                                                         \
    do {                                                                         \
        bc_it it_ = {.b = (B)};                                                  \
        const int64_t n_ = (B)->out[(B)->nd - 1];                                \
        const int64_t xs_ = (B)->xst[(B)->nd - 1], ys_ = (B)->yst[(B)->nd - 1];  \
        const int64_t rows_ = n_ ? fl__dims_prod((B)->out, 0, (B)->nd) / n_ : 0; \
        for (int64_t r_ = 0; r_ < rows_; r_++, bc_next(&it_))                    \
            for (int64_t k_ = 0; k_ < n_; k_++) {                                \
                const int64_t i = r_ * n_ + k_;                                  \
                const int64_t xi = it_.xo + k_ * xs_, yi = it_.yo + k_ * ys_;    \
                BODY;                                                            \
            }                                                                    \
    } while (0)

/* Run-time plan of X (slot 0) and Y (slot 1); Y absent (logical_not): X with itself. */
static int bc_runtime(fl_kctx *c, fl__bcast *b)
{
    const fl_tensor *x = FL_IN(c, 0), *y = c->nin[1] ? FL_IN(c, 1) : x;
    if (!x || !y || x->is_rows || y->is_rows)
        return fl__err(FL_EINVAL, "%s: X and Y must be dense tensors", c->op->def->type);
    int axis = (int)fl__attr_i(c->op, "axis", -1);
    if (fl__bcast_plan(x->shape, x->ndim, y->shape, y->ndim, axis, 0, b)) {
        char xs[96], ys[96];
        fl_tensor_describe(x, xs, sizeof xs);
        fl_tensor_describe(y, ys, sizeof ys);
        return fl__err(FL_EINVAL, "%s: X '%s' %s and Y '%s' %s do not broadcast (axis %d)", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0), xs, fl__kctx_var_name(c, 1, 0), ys, axis);
    }
    return FL_OK;
}

/* Out's LoD: X's (or Y's) when Out has its shape. */
static int bc_lod(fl_tensor *out, const fl_tensor *x, const fl_tensor *y)
{
    if (out->ndim == x->ndim && !memcmp(out->shape, x->shape, (size_t)x->ndim * sizeof(int64_t)))
        return fl__tensor_share_lod(out, x);
    if (y && out->ndim == y->ndim && !memcmp(out->shape, y->shape, (size_t)y->ndim * sizeof(int64_t)))
        return fl__tensor_share_lod(out, y);
    out->lod_n = 0;
    return FL_OK;
}

/* Out = f(X, Y) for one element type T. */
#define BC_FORWARD(T, B, XP, YP, OP, KIND)                                           \
    do {                                                                             \
        const T *xp = (const T *)(XP), *yp = (const T *)(YP);                        \
        T *o = (T *)(OP);                                                            \
        switch (KIND) {                                                              \
        case FL_BC_ADD: BC_ROWS(B, o[i] = xp[xi] + yp[yi]); break;                   \
        case FL_BC_SUB: BC_ROWS(B, o[i] = xp[xi] - yp[yi]); break;                   \
        case FL_BC_MUL: BC_ROWS(B, o[i] = xp[xi] * yp[yi]); break;                   \
        case FL_BC_DIV: BC_ROWS(B, o[i] = xp[xi] / yp[yi]); break;                   \
        case FL_BC_MAX: BC_ROWS(B, o[i] = xp[xi] > yp[yi] ? xp[xi] : yp[yi]); break; \
        default: BC_ROWS(B, o[i] = xp[xi] < yp[yi] ? xp[xi] : yp[yi]); break;        \
        }                                                                            \
    } while (0)

int fl__bcast_run(fl_kctx *c, int kind)
{
    const fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1);
    if (!x || !y || x->dtype != y->dtype || (x->dtype != FL_FLOAT32 && x->dtype != FL_FLOAT64))
        return fl__err(FL_EINVAL, "%s: X '%s' and Y '%s' must be float32 or float64 tensors of one dtype", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0), fl__kctx_var_name(c, 1, 0));
    fl__bcast b;
    FL_CHECK(bc_runtime(c, &b));
    fl_tensor *out = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(out, x->dtype, b.nd, b.out));
    if (x->dtype == FL_FLOAT64) BC_FORWARD(double, &b, x->data, y->data, out->data, kind);
    else BC_FORWARD(float, &b, x->data, y->data, out->data, kind);
    return bc_lod(out, x, y);
}

/* Inputs X, Y, Out@GRAD (slot 2); outputs X@GRAD, Y@GRAD (either may be absent). */
int fl__bcast_grad_f32(fl_kctx *c, int kind)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    FL_CHECK(fl__kctx_dense_f32(c, 1));
    FL_CHECK(fl__kctx_dense_f32(c, 2));
    fl__bcast b;
    FL_CHECK(bc_runtime(c, &b));
    const fl_tensor *x = FL_IN(c, 0), *y = FL_IN(c, 1), *gt = FL_IN(c, 2);
    fl_tensor *dxt = FL_OUT(c, 0), *dyt = FL_OUT(c, 1);
    if (gt->numel != fl__dims_prod(b.out, 0, b.nd))
        return fl__err(FL_EINVAL, "%s: gradient '%s' has %lld elements, the broadcast output %lld", c->op->def->type,
                       fl__kctx_var_name(c, 2, 0), (long long)gt->numel, (long long)fl__dims_prod(b.out, 0, b.nd));
    float dummy = 0.0f;
    float *dx = &dummy, *dy = &dummy;
    int64_t mx = 0, my = 0; /* offsets are multiplied by these: 0 sends an absent gradient to dummy */
    if (dxt) {
        FL_CHECK(fl__tensor_reshape_raw(dxt, FL_FLOAT32, x->ndim, x->shape));
        memset(dxt->data, 0, (size_t)x->numel * sizeof(float));
        dx = dxt->data, mx = 1;
        FL_CHECK(fl__tensor_share_lod(dxt, x));
    }
    if (dyt) {
        FL_CHECK(fl__tensor_reshape_raw(dyt, FL_FLOAT32, y->ndim, y->shape));
        memset(dyt->data, 0, (size_t)y->numel * sizeof(float));
        dy = dyt->data, my = 1;
        FL_CHECK(fl__tensor_share_lod(dyt, y));
    }
    const float *xp = x->data, *yp = y->data, *g = gt->data;
    switch (kind) {
    case FL_BC_ADD: BC_ROWS(&b, (dx[xi * mx] += g[i], dy[yi * my] += g[i])); break;
    case FL_BC_SUB: BC_ROWS(&b, (dx[xi * mx] += g[i], dy[yi * my] -= g[i])); break;
    case FL_BC_MUL: BC_ROWS(&b, (dx[xi * mx] += g[i] * yp[yi], dy[yi * my] += g[i] * xp[xi])); break;
    case FL_BC_DIV: BC_ROWS(&b, (dx[xi * mx] += g[i] / yp[yi], dy[yi * my] -= g[i] * xp[xi] / (yp[yi] * yp[yi]))); break;
    case FL_BC_MAX: BC_ROWS(&b, *(xp[xi] > yp[yi] ? &dx[xi * mx] : &dy[yi * my]) += g[i]); break;
    default: BC_ROWS(&b, *(xp[xi] < yp[yi] ? &dx[xi * mx] : &dy[yi * my]) += g[i]); break;
    }
    return FL_OK;
}

/* ---- the kinds: one row each -------------------------------------------------------------- */

enum { K_MAX, K_MIN, K_LT, K_LE, K_GT, K_GE, K_EQ, K_NE, K_AND, K_OR, K_XOR, K_NOT };
static const struct {
    const char *type;
    int kind;
} KINDS[] = {{"elementwise_max", K_MAX}, {"elementwise_min", K_MIN}, {"less_than", K_LT},    {"less_equal", K_LE},
             {"greater_than", K_GT},     {"greater_equal", K_GE},    {"equal", K_EQ},        {"not_equal", K_NE},
             {"logical_and", K_AND},     {"logical_or", K_OR},       {"logical_xor", K_XOR}, {"logical_not", K_NOT}};

/* The kind of type ("<type>" or "<type>_grad"), -1 if none. */
static int kind_of(const char *type)
{
    size_t n = strlen(type);
    if (n > 5 && !strcmp(type + n - 5, "_grad")) n -= 5;
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++)
        if (strlen(KINDS[i].type) == n && !strncmp(KINDS[i].type, type, n)) return KINDS[i].kind;
    return -1;
}

static int num_type_ok(fl_dtype t) { return t == FL_FLOAT32 || t == FL_FLOAT64 || t == FL_INT32 || t == FL_INT64; }

static double num_get(const fl_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case FL_FLOAT32: return ((const float *)t->data)[i];
    case FL_FLOAT64: return ((const double *)t->data)[i];
    case FL_INT32: return ((const int32_t *)t->data)[i];
    default: return (double)((const int64_t *)t->data)[i];
    }
}

static int infer_bc(fl_op *op)
{
    int kind = kind_of(op->def->type), unary = kind == K_NOT;
    if (op->in[0].n != 1 || op->out[0].n != 1 || (!unary && op->in[1].n != 1))
        return fl__op_error(op, "needs one X%s and one Out", unary ? "" : ", one Y");
    fl_var *x = op->in[0].vars[0], *y = unary ? x : op->in[1].vars[0], *o = op->out[0].vars[0];
    if (kind <= K_MIN) {
        FL_CHECK(fl__op_need_f32(op, x));
        FL_CHECK(fl__op_need_f32(op, y));
    } else if (!num_type_ok(x->dtype) || !num_type_ok(y->dtype)) {
        return fl__op_error(op, "X '%s' is %s, Y '%s' is %s: float32, float64, int32 and int64 only", x->name,
                            fl_dtype_name(x->dtype), y->name, fl_dtype_name(y->dtype));
    } else if (kind < K_AND && x->dtype != y->dtype) {
        return fl__op_error(op, "X '%s' is %s but Y '%s' is %s (compare values of one dtype; cast one)", x->name,
                            fl_dtype_name(x->dtype), y->name, fl_dtype_name(y->dtype));
    }
    int axis = (int)fl__attr_i(op, "axis", -1);
    fl__bcast b;
    int code = fl__bcast_plan(x->shape, x->ndim, y->shape, y->ndim, axis, 1, &b);
    if (code) {
        char xs[96], ys[96];
        fl__shape_str(x, xs, sizeof xs);
        fl__shape_str(y, ys, sizeof ys);
        return fl__op_error(op,
                            "X '%s' %s and Y '%s' %s do not broadcast with axis %d (each pair of dims, aligned "
                            "from the end, must be equal or hold a 1)",
                            x->name, xs, y->name, ys, axis);
    }
    fl__var_set_shape(o, kind <= K_MIN ? FL_FLOAT32 : FL_INT32, b.nd, b.out);
    o->lod_level = fl__shapes_equal(o, x) ? x->lod_level : 0;
    return FL_OK;
}

static int run_bc(fl_kctx *c)
{
    int kind = kind_of(c->op->def->type);
    if (kind == K_MAX) return fl__bcast_run(c, FL_BC_MAX);
    if (kind == K_MIN) return fl__bcast_run(c, FL_BC_MIN);
    fl__bcast b;
    FL_CHECK(bc_runtime(c, &b));
    const fl_tensor *x = FL_IN(c, 0), *y = c->nin[1] ? FL_IN(c, 1) : x;
    if (!num_type_ok(x->dtype) || !num_type_ok(y->dtype))
        return fl__err(FL_EINVAL, "%s: X '%s' and Y must be float32, float64, int32 or int64", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0));
    fl_tensor *out = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(out, FL_INT32, b.nd, b.out));
    int32_t *o = out->data;
    switch (kind) {
    case K_LT: BC_ROWS(&b, o[i] = num_get(x, xi) < num_get(y, yi)); break;
    case K_LE: BC_ROWS(&b, o[i] = num_get(x, xi) <= num_get(y, yi)); break;
    case K_GT: BC_ROWS(&b, o[i] = num_get(x, xi) > num_get(y, yi)); break;
    case K_GE: BC_ROWS(&b, o[i] = num_get(x, xi) >= num_get(y, yi)); break;
    case K_EQ: BC_ROWS(&b, o[i] = num_get(x, xi) == num_get(y, yi)); break;
    case K_NE: BC_ROWS(&b, o[i] = num_get(x, xi) != num_get(y, yi)); break;
    case K_AND: BC_ROWS(&b, o[i] = num_get(x, xi) != 0 && num_get(y, yi) != 0); break;
    case K_OR: BC_ROWS(&b, o[i] = num_get(x, xi) != 0 || num_get(y, yi) != 0); break;
    case K_XOR: BC_ROWS(&b, o[i] = (num_get(x, xi) != 0) != (num_get(y, yi) != 0)); break;
    default: BC_ROWS(&b, ((void)yi, o[i] = num_get(x, xi) == 0)); break;
    }
    return bc_lod(out, x, c->nin[1] ? y : NULL);
}

static int run_bc_grad(fl_kctx *c)
{
    return fl__bcast_grad_f32(c, kind_of(c->op->def->type) == K_MAX ? FL_BC_MAX : FL_BC_MIN);
}

static int grad_bc(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *y = op->in[1].vars[0], *dout = fl__grad_of(g, op->out[0].vars[0]);
    if (!dout) return FL_OK;
    fl_var *dx = fl__grad_for(g, x), *dy = fl__grad_for(g, y);
    fl_var *dxv[1] = {dx}, *dyv[1] = {dy};
    fl_io in[3] = {FL_IO1("X", x), FL_IO1("Y", y), FL_IO1("Out@GRAD", dout)}, o[2];
    int no = 0;
    if (dx) o[no++] = (fl_io){"X@GRAD", dxv, 1};
    if (dy) o[no++] = (fl_io){"Y@GRAD", dyv, 1};
    char type[64];
    snprintf(type, sizeof type, "%s_grad", op->def->type);
    return no ? fl__grad_append(op, type, in, 3, o, no) : FL_OK;
}

#define BC_GRAD_DEF(name)                                                                              \
    static const fl_op_def def_##name = {#name, {"X", "Y"}, {"Out"}, infer_bc, run_bc, grad_bc, NULL}; \
    static const fl_op_def def_##name##_grad = {                                                       \
        #name "_grad", {"X", "Y", "Out@GRAD"}, {"X@GRAD", "Y@GRAD"}, fl__infer_nop, run_bc_grad, NULL, NULL};
#define BC_DEF(name) static const fl_op_def def_##name = {#name, {"X", "Y"}, {"Out"}, infer_bc, run_bc, NULL, NULL};
BC_GRAD_DEF(elementwise_max)
BC_GRAD_DEF(elementwise_min)
BC_DEF(less_than)
BC_DEF(less_equal)
BC_DEF(greater_than)
BC_DEF(greater_equal)
BC_DEF(equal)
BC_DEF(not_equal)
BC_DEF(logical_and)
BC_DEF(logical_or)
BC_DEF(logical_xor)
static const fl_op_def def_logical_not = {"logical_not", {"X"}, {"Out"}, infer_bc, run_bc, NULL, NULL};

/* ---- layers ---------------------------------------------------------------------------------- */

static fl_var *bc_layer(const char *type, fl_var *x, fl_var *y, int unary, int axis)
{
    fl_var *const xy[2] = {x, y};
    fl_prog *p = fl__prog_of(xy, unary ? 1 : 2);
    if (!p) {
        fl__err(FL_EINVAL, "%s: %s is NULL", type, !x ? "x" : "y");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    int kind = kind_of(type);
    if (kind < 0) {
        fl__prog_error(p, FL_EINVAL, "%s: not a comparison or logical op", type);
        return NULL;
    }
    char base[128];
    fl__unique_name(p, type, base, sizeof base);
    fl_var *o = fl__tmp_var(p, base, kind <= K_MIN ? FL_FLOAT32 : FL_INT32, x->ndim, x->shape);
    if (!o) return NULL;
    o->stop_gradient = kind > K_MIN;
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Y", y)}, out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, type, in, unary ? 1 : 2, &out, 1);
    if (!op || fl__attr_set_i(op, "axis", axis) || fl__op_finish(op)) return NULL;
    return o;
}

fl_var *fl_layer_elementwise_max(fl_var *x, fl_var *y, int axis) { return bc_layer("elementwise_max", x, y, 0, axis); }
fl_var *fl_layer_elementwise_min(fl_var *x, fl_var *y, int axis) { return bc_layer("elementwise_min", x, y, 0, axis); }

fl_var *fl_layer_compare(fl_var *x, fl_var *y, const char *type)
{
    int k = type ? kind_of(type) : -1;
    if (k < K_LT || k > K_NE || strstr(type, "_grad")) {
        fl__err(FL_EINVAL,
                "fl_layer_compare: type '%s' is not less_than, less_equal, greater_than, greater_equal, "
                "equal or not_equal",
                type ? type : "(null)");
        return NULL;
    }
    return bc_layer(type, x, y, 0, -1);
}

fl_var *fl_layer_logical(fl_var *x, fl_var *y, const char *type)
{
    int k = type ? kind_of(type) : -1;
    if (k < K_AND || strstr(type, "_grad")) {
        fl__err(FL_EINVAL, "fl_layer_logical: type '%s' is not logical_and, logical_or, logical_xor or logical_not",
                type ? type : "(null)");
        return NULL;
    }
    if ((k == K_NOT) != !y) {
        fl__err(FL_EINVAL, "fl_layer_logical: %s %s", type, k == K_NOT ? "takes x only (y must be NULL)" : "needs y");
        return NULL;
    }
    return bc_layer(type, x, y, k == K_NOT, -1);
}

/* clang-format off */
const fl_op_def *const fl__ops_bcast[] = {
    &def_elementwise_max, &def_elementwise_max_grad, &def_elementwise_min, &def_elementwise_min_grad,
    &def_less_than, &def_less_equal, &def_greater_than, &def_greater_equal, &def_equal, &def_not_equal,
    &def_logical_and, &def_logical_or, &def_logical_xor, &def_logical_not, NULL};
/* clang-format on */
