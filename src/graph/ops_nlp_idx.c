/*
 * ops_nlp_idx.c - operator group "nlp_idx": the index and reshaping ops of Transformer and
 * BERT programs, with Paddle's types, slots and attributes.  Float32 data, int32 / int64
 * indices:
 *   gather     X, Index [N] or [N, 1] -> Out [N, dims of X after 0] (axis 0 only)
 *   gather_nd  X, Index [..., k] -> Out [..., dims of X from k]
 *   stack      X (n equal shapes), axis -> Y with a new dim n at axis
 *   split      X, axis, num or sections (one may be -1) -> Out (a list)
 *   slice      Input, axes, starts, ends (negative counts from the end, clamped),
 *              decrease_axis -> Out
 *   one_hot    X int [..., 1], depth, allow_out_of_range -> Out float32 [..., depth]
 * All but one_hot have gradients (scatter-adds into zeros, or the reverse copies).
 */
#include <string.h>

#include "graph_internal.h"

static int is_index(fl_dtype t) { return t == FL_INT64 || t == FL_INT32; }

static int64_t index_at(const fl_tensor *t, int64_t i)
{
    return t->dtype == FL_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* Run-time check that input slot s is a dense int32 / int64 tensor. */
static int kctx_index(const fl_kctx *c, int s)
{
    const fl_tensor *t = FL_IN(c, s);
    if (!t || t->is_rows || !is_index(t->dtype))
        return fl__err(FL_EINVAL, "%s: index '%s' must be a dense int32 or int64 tensor", c->op->def->type,
                       fl__kctx_var_name(c, s, 0));
    return FL_OK;
}

/* Grad op with inputs `in` writing X@GRAD (slot name xg) for forward input x. */
static int grad_one(fl_op *op, fl_grad_ctx *g, fl_var *x, const char *xg, const char *type, fl_io *in, int nin)
{
    fl_var *dx = fl__grad_for(g, x);
    if (!dx) return FL_OK;
    fl_io out = FL_IO1(xg, dx);
    return fl__grad_append(op, type, in, nin, &out, 1);
}

/* ---- gather, gather_nd -------------------------------------------------------------------- */

static int infer_gather(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0], *idx = op->in[1].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    if (!is_index(idx->dtype) || idx->ndim < 1 || idx->ndim > 2 || (idx->ndim == 2 && idx->shape[1] != 1))
        return fl__op_error(op, "Index '%s' must be int32 / int64 of shape [N] or [N, 1]", idx->name);
    if (fl__attr_i(op, "axis", 0) != 0) return fl__op_error(op, "only axis 0 is supported");
    if (x->ndim < 1) return fl__op_error(op, "X '%s' must have a dim to gather from", x->name);
    int64_t s[FL_MAX_DIMS];
    memcpy(s, x->shape, (size_t)x->ndim * sizeof *s);
    s[0] = idx->shape[0];
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, x->ndim, s);
    return FL_OK;
}

/* For gather (k = 1 column per index, a flat index list) and gather_nd (k columns): the
 * offset, in rows of `inner` elements, of index row r, or -1 when out of range. */
static int64_t nd_offset(const fl_tensor *x, const fl_tensor *idx, int64_t r, int k)
{
    int64_t off = 0;
    for (int j = 0; j < k; j++) {
        int64_t v = index_at(idx, r * k + j);
        if (v < 0 || v >= x->shape[j]) return -1;
        off = off * x->shape[j] + v;
    }
    return off;
}

/* gather (nd = 0) and gather_nd (nd = 1) forward (grad = 0) or gradient (grad = 1: inputs
 * X, Index, Out@GRAD; X@GRAD = zeros with the rows of Out@GRAD added at the indices). */
static int run_gather_any(fl_kctx *c, int nd, int grad)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    FL_CHECK(kctx_index(c, 1));
    const fl_tensor *x = FL_IN(c, 0), *idx = FL_IN(c, 1);
    const char *type = c->op->def->type;
    int k = nd ? (int)(idx->ndim ? idx->shape[idx->ndim - 1] : 0) : 1;
    int64_t rows = nd ? (k ? idx->numel / k : idx->numel) : idx->numel;
    if (idx->ndim < 1 || k > x->ndim || (nd && k < 1))
        return fl__err(FL_EINVAL, "%s: Index '%s' of rank %d (last dim %d) does not index X '%s' of rank %d", type,
                       fl__kctx_var_name(c, 1, 0), idx->ndim, k, fl__kctx_var_name(c, 0, 0), x->ndim);
    int64_t inner = fl__dims_prod(x->shape, k, x->ndim);
    int64_t os[FL_MAX_DIMS];
    int on = 0;
    if (nd)
        for (int i = 0; i < idx->ndim - 1; i++) os[on++] = idx->shape[i];
    else os[on++] = rows;
    for (int i = k; i < x->ndim; i++) os[on++] = x->shape[i];
    const float *src;
    float *dst;
    if (grad) {
        FL_CHECK(fl__kctx_dense_f32(c, 2));
        const fl_tensor *dy = FL_IN(c, 2);
        if (dy->numel != rows * inner)
            return fl__err(FL_EINVAL, "%s: Out@GRAD '%s' has %lld elements, expected %lld", type,
                           fl__kctx_var_name(c, 2, 0), (long long)dy->numel, (long long)(rows * inner));
        fl_tensor *dx = FL_OUT(c, 0);
        FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
        memset(dx->data, 0, (size_t)dx->numel * sizeof(float));
        src = dy->data, dst = dx->data;
    } else {
        fl_tensor *o = FL_OUT(c, 0);
        FL_CHECK(fl__tensor_reshape_raw(o, FL_FLOAT32, on, os));
        o->lod_n = 0;
        src = x->data, dst = o->data;
    }
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = nd_offset(x, idx, r, k);
        if (off < 0)
            return fl__err(FL_EINVAL, "%s: index row %lld of '%s' is out of range for X '%s'", type, (long long)r,
                           fl__kctx_var_name(c, 1, 0), fl__kctx_var_name(c, 0, 0));
        if (grad) {
            float *restrict d = dst + off * inner;
            const float *restrict s = src + r * inner;
            for (int64_t j = 0; j < inner; j++) d[j] += s[j];
        } else memcpy(dst + r * inner, src + off * inner, (size_t)inner * sizeof *dst);
    }
    return FL_OK;
}

static int run_gather(fl_kctx *c) { return run_gather_any(c, 0, 0); }
static int run_gather_grad(fl_kctx *c) { return run_gather_any(c, 0, 1); }
static int run_gather_nd(fl_kctx *c) { return run_gather_any(c, 1, 0); }
static int run_gather_nd_grad(fl_kctx *c) { return run_gather_any(c, 1, 1); }

static int infer_gather_nd(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0], *idx = op->in[1].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    int64_t k = idx->ndim ? idx->shape[idx->ndim - 1] : -1;
    if (!is_index(idx->dtype) || idx->ndim < 1 || k < 1 || k > x->ndim)
        return fl__op_error(op, "Index '%s' must be int32 / int64 [..., k] with k known and in [1, %d] (rank of X '%s')",
                            idx->name, x->ndim, x->name);
    int64_t s[2 * FL_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < idx->ndim - 1; i++) s[n++] = idx->shape[i];
    for (int i = (int)k; i < x->ndim; i++) s[n++] = x->shape[i];
    if (n > FL_MAX_DIMS) return fl__op_error(op, "Out would have %d dims (at most %d)", n, FL_MAX_DIMS);
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, n, s);
    return FL_OK;
}

static int grad_gather(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]);
    if (!dy) return FL_OK;
    fl_io in[3] = {FL_IO1("X", x), FL_IO1("Index", op->in[1].vars[0]), FL_IO1("Out@GRAD", dy)};
    return grad_one(op, g, x, "X@GRAD", !strcmp(op->def->type, "gather") ? "gather_grad" : "gather_nd_grad", in, 3);
}

static const fl_op_def def_gather = {"gather", {"X", "Index"}, {"Out"}, infer_gather, run_gather, grad_gather};
static const fl_op_def def_gather_grad = {
    "gather_grad", {"X", "Index", "Out@GRAD"}, {"X@GRAD"}, fl__infer_nop, run_gather_grad, NULL};
static const fl_op_def def_gather_nd = {"gather_nd", {"X", "Index"}, {"Out"}, infer_gather_nd, run_gather_nd, grad_gather};
static const fl_op_def def_gather_nd_grad = {"gather_nd_grad", {"X", "Index", "Out@GRAD"}, {"X@GRAD"},
                                             fl__infer_nop,    run_gather_nd_grad,         NULL};

/* ---- stack, split -------------------------------------------------------------------------
 *
 * Both move blocks between one whole tensor viewed as [outer, A, inner] and pieces viewed
 * as [outer, a_j, inner] (a_j = 1 for stack's inputs, whose dim is inserted).  The
 * gradient of each is the reverse move; pieces without a gradient read as zeros. */

/* whole <-> pieces.  to_whole: copy the pieces into whole (a NULL piece zeroes its block);
 * otherwise copy whole's blocks out into the non-NULL pieces. */
static void blocks(float *whole, float *const *pieces, const int64_t *len, int n, int64_t outer, int64_t inner,
                   int to_whole)
{
    int64_t total = 0;
    for (int j = 0; j < n; j++) total += len[j];
    for (int64_t o = 0; o < outer; o++) {
        int64_t at = 0;
        for (int j = 0; j < n; j++) {
            float *w = whole + (o * total + at) * inner;
            size_t bytes = (size_t)(len[j] * inner) * sizeof(float);
            at += len[j];
            if (!pieces[j]) {
                if (to_whole) memset(w, 0, bytes);
                continue;
            }
            float *p = pieces[j] + o * len[j] * inner;
            if (to_whole) memcpy(w, p, bytes);
            else memcpy(p, w, bytes);
        }
    }
}

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

static int infer_stack(fl_op *op)
{
    int n = op->in[0].n;
    if (n < 1 || op->out[0].n != 1) return fl__op_error(op, "needs at least one X and one Y");
    fl_var *x0 = op->in[0].vars[0];
    for (int i = 0; i < n; i++) {
        FL_CHECK(fl__op_need_f32(op, op->in[0].vars[i]));
        if (!fl__shapes_equal(op->in[0].vars[i], x0))
            return fl__op_error(op, "X '%s' and '%s' differ in shape", x0->name, op->in[0].vars[i]->name);
    }
    int axis = norm_axis(fl__attr_i(op, "axis", 0), x0->ndim + 1);
    if (axis < 0 || axis > x0->ndim || x0->ndim + 1 > FL_MAX_DIMS)
        return fl__op_error(op, "axis %lld out of range for X '%s' of rank %d", (long long)fl__attr_i(op, "axis", 0),
                            x0->name, x0->ndim);
    int64_t s[FL_MAX_DIMS];
    for (int i = 0, k = 0; i <= x0->ndim; i++) s[i] = i == axis ? n : x0->shape[k++];
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, x0->ndim + 1, s);
    return FL_OK;
}

/* stack (grad 0: inputs X..., output Y) and stack_grad (grad 1: input Y@GRAD, outputs
 * X@GRAD for the inputs listed in grad_index). */
static int run_stack_any(fl_kctx *c, int grad)
{
    int n = grad ? c->nout[0] : c->nin[0];
    const fl_tensor *x0 = grad ? FL_IN(c, 0) : FL_IN(c, 0);
    for (int i = 0; i < (grad ? 1 : n); i++)
        if (c->in[0][i]->dtype != FL_FLOAT32 || c->in[0][i]->is_rows || c->in[0][i]->numel != x0->numel ||
            c->in[0][i]->ndim != x0->ndim)
            return fl__err(FL_EINVAL, "%s: input %d must be a dense float32 tensor shaped like the first", c->op->def->type,
                           i);
    int xr = grad ? x0->ndim - 1 : x0->ndim;
    int axis = norm_axis(fl__attr_i(c->op, "axis", 0), xr + 1);
    if (axis < 0 || axis > xr || xr + 1 > FL_MAX_DIMS)
        return fl__err(FL_EINVAL, "%s: axis out of range for rank %d", c->op->def->type, xr);
    if (!grad) {
        int64_t s[FL_MAX_DIMS];
        for (int i = 0, k = 0; i <= xr; i++) s[i] = i == axis ? n : x0->shape[k++];
        fl_tensor *y = FL_OUT(c, 0);
        FL_CHECK(fl__tensor_reshape_raw(y, FL_FLOAT32, xr + 1, s));
        y->lod_n = 0;
        float *pieces[64];
        int64_t len[64];
        if (n > 64) return fl__err(FL_EINVAL, "stack: at most 64 inputs, got %d", n);
        for (int i = 0; i < n; i++) pieces[i] = c->in[0][i]->data, len[i] = 1;
        blocks(y->data, pieces, len, n, fl__dims_prod(s, 0, axis), fl__dims_prod(s, axis + 1, xr + 1), 1);
        return FL_OK;
    }
    const fl_attr *gi = fl__attr_find(c->op, "grad_index");
    int64_t total = x0->shape[axis];
    if (!gi || gi->type != FL_ATTR_INTS || gi->n != n || total > 64)
        return fl__err(FL_EINVAL, "stack_grad: grad_index must list the %d outputs (at most 64 inputs)", n);
    float *pieces[64] = {NULL};
    int64_t len[64], s[FL_MAX_DIMS];
    for (int i = 0, k = 0; i <= xr; i++)
        if (i != axis) s[k++] = x0->shape[i];
    for (int64_t j = 0; j < total; j++) len[j] = 1;
    for (int i = 0; i < n; i++) {
        if (gi->ints[i] < 0 || gi->ints[i] >= total)
            return fl__err(FL_EINVAL, "stack_grad: grad_index %lld out of range", (long long)gi->ints[i]);
        FL_CHECK(fl__tensor_reshape_raw(c->out[0][i], FL_FLOAT32, xr, s));
        pieces[gi->ints[i]] = c->out[0][i]->data;
    }
    blocks(x0->data, pieces, len, (int)total, fl__dims_prod(x0->shape, 0, axis), fl__dims_prod(x0->shape, axis + 1, xr + 1),
           0);
    return FL_OK;
}

static int run_stack(fl_kctx *c) { return run_stack_any(c, 0); }
static int run_stack_grad(fl_kctx *c) { return run_stack_any(c, 1); }

/* Gradient of a list slot: the grads of the listed vars that need one, with their
 * positions (grad_index).  Returns how many. */
static int list_grads(fl_grad_ctx *g, const fl_slot *sl, int of, fl_var **out, int64_t *pos)
{
    int k = 0;
    for (int i = 0; i < sl->n && i < 64; i++) {
        fl_var *v = of ? fl__grad_of(g, sl->vars[i]) : fl__grad_for(g, sl->vars[i]);
        if (v) out[k] = v, pos[k++] = i;
    }
    return k;
}

static int grad_stack(fl_op *op, fl_grad_ctx *g)
{
    fl_var *dy = fl__grad_of(g, op->out[0].vars[0]);
    if (!dy) return FL_OK;
    fl_var *dx[64];
    int64_t pos[64];
    int k = list_grads(g, &op->in[0], 0, dx, pos);
    if (!k) return FL_OK;
    fl_io in = FL_IO1("Y@GRAD", dy), out = {"X@GRAD", dx, k};
    fl_op *go = fl__op_new(op->prog, "stack_grad", &in, 1, &out, 1);
    if (!go || fl__attr_set_i(go, "axis", fl__attr_i(op, "axis", 0)) || fl__attr_set_ints(go, "grad_index", pos, k))
        return fl_prog_status(op->prog) ? fl_prog_status(op->prog) : FL_EINVAL;
    return fl__op_finish(go);
}

static const fl_op_def def_stack = {"stack", {"X"}, {"Y"}, infer_stack, run_stack, grad_stack};
static const fl_op_def def_stack_grad = {"stack_grad", {"Y@GRAD"}, {"X@GRAD"}, fl__infer_nop, run_stack_grad, NULL};

/* Section lengths of split along a dim of size dim: `num` equal parts or `sections` (one
 * -1 takes the rest).  Returns the count, or -1 if they do not fit (dim < 0: unknown,
 * lengths from sections only, -1 left as is). */
static int split_lens(const fl_op *op, int64_t dim, int64_t *len)
{
    int64_t num = fl__attr_i(op, "num", 0);
    const fl_attr *sec = fl__attr_find(op, "sections");
    if (sec && sec->type == FL_ATTR_INTS && sec->n > 0) {
        if (sec->n > 64) return -1;
        int64_t sum = 0, free_at = -1;
        for (int i = 0; i < sec->n; i++) {
            len[i] = sec->ints[i];
            if (len[i] == -1 && free_at < 0) free_at = i;
            else if (len[i] < 0) return -1;
            else sum += len[i];
        }
        if (dim >= 0) {
            if (free_at >= 0) len[free_at] = dim - sum;
            if ((free_at >= 0 && dim < sum) || (free_at < 0 && sum != dim)) return -1;
        }
        return sec->n;
    }
    if (num < 1 || num > 64 || (dim >= 0 && dim % num)) return -1;
    for (int i = 0; i < num; i++) len[i] = dim < 0 ? -1 : dim / num;
    return (int)num;
}

static int infer_split(fl_op *op)
{
    if (op->in[0].n != 1) return fl__op_error(op, "needs one X");
    fl_var *x = op->in[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    int axis = norm_axis(fl__attr_i(op, "axis", 0), x->ndim);
    if (axis < 0 || axis >= x->ndim) return fl__op_error(op, "axis out of range for X '%s' of rank %d", x->name, x->ndim);
    int64_t len[64];
    int n = split_lens(op, x->shape[axis], len);
    if (n < 0 || n != op->out[0].n)
        return fl__op_error(op, "num / sections do not split dim %d (%lld) of X '%s' into the %d outputs", axis,
                            (long long)x->shape[axis], x->name, op->out[0].n);
    for (int j = 0; j < n; j++) {
        int64_t s[FL_MAX_DIMS];
        memcpy(s, x->shape, (size_t)x->ndim * sizeof *s);
        s[axis] = len[j];
        fl__var_set_shape(op->out[0].vars[j], FL_FLOAT32, x->ndim, s);
    }
    return FL_OK;
}

/* split (grad 0: X -> Out...) and split_grad (grad 1: X, Out@GRAD of the outputs listed in
 * grad_index -> X@GRAD). */
static int run_split_any(fl_kctx *c, int grad)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *x = FL_IN(c, 0);
    int axis = norm_axis(fl__attr_i(c->op, "axis", 0), x->ndim);
    int64_t len[64];
    int n = axis >= 0 && axis < x->ndim ? split_lens(c->op, x->shape[axis], len) : -1;
    if (n < 0 || (!grad && n != c->nout[0]))
        return fl__err(FL_EINVAL, "%s: num / sections / axis do not split X '%s'", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0));
    float *pieces[64] = {NULL};
    int64_t outer = fl__dims_prod(x->shape, 0, axis), inner = fl__dims_prod(x->shape, axis + 1, x->ndim);
    if (!grad) {
        for (int j = 0; j < n; j++) {
            int64_t s[FL_MAX_DIMS];
            memcpy(s, x->shape, (size_t)x->ndim * sizeof *s);
            s[axis] = len[j];
            FL_CHECK(fl__tensor_reshape_raw(c->out[0][j], FL_FLOAT32, x->ndim, s));
            c->out[0][j]->lod_n = 0;
            pieces[j] = c->out[0][j]->data;
        }
        blocks(x->data, pieces, len, n, outer, inner, 0);
        return FL_OK;
    }
    const fl_attr *gi = fl__attr_find(c->op, "grad_index");
    if (!gi || gi->type != FL_ATTR_INTS || gi->n != c->nin[1])
        return fl__err(FL_EINVAL, "split_grad: grad_index must list the %d gradients", c->nin[1]);
    for (int i = 0; i < gi->n; i++) {
        const fl_tensor *t = c->in[1][i];
        int64_t j = gi->ints[i];
        if (j < 0 || j >= n || t->dtype != FL_FLOAT32 || t->is_rows || t->numel != outer * len[j] * inner)
            return fl__err(FL_EINVAL, "split_grad: gradient %d does not match output %lld", i, (long long)j);
        pieces[j] = t->data;
    }
    fl_tensor *dx = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    blocks(dx->data, pieces, len, n, outer, inner, 1);
    return FL_OK;
}

static int run_split(fl_kctx *c) { return run_split_any(c, 0); }
static int run_split_grad(fl_kctx *c) { return run_split_any(c, 1); }

static int grad_split(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dx = fl__grad_for(g, x);
    if (!dx) return FL_OK;
    fl_var *dy[64];
    int64_t pos[64];
    int k = list_grads(g, &op->out[0], 1, dy, pos);
    if (!k) return FL_OK;
    fl_io in[2] = {FL_IO1("X", x), {"Out@GRAD", dy, k}}, out = FL_IO1("X@GRAD", dx);
    fl_op *go = fl__op_new(op->prog, "split_grad", in, 2, &out, 1);
    if (!go) return fl_prog_status(op->prog);
    for (int i = 0; i < op->nattr; i++) {
        const fl_attr *a = &op->attr[i];
        int st = a->type == FL_ATTR_INT    ? fl__attr_set_i(go, a->name, a->i)
                 : a->type == FL_ATTR_INTS ? fl__attr_set_ints(go, a->name, a->ints, a->n)
                                           : FL_OK;
        if (st) return st;
    }
    FL_CHECK(fl__attr_set_ints(go, "grad_index", pos, k));
    return fl__op_finish(go);
}

static const fl_op_def def_split = {"split", {"X"}, {"Out"}, infer_split, run_split, grad_split};
static const fl_op_def def_split_grad = {"split_grad", {"X", "Out@GRAD"}, {"X@GRAD"}, fl__infer_nop, run_split_grad, NULL};

/* ---- slice ------------------------------------------------------------------------------------ */

/* Start and length of every dim of a slice of shape s (unknown dims: length -1).  Returns
 * 0, or 1 for bad attributes. */
static int slice_box(const fl_op *op, const int64_t *s, int nd, int64_t *start, int64_t *len)
{
    const fl_attr *ax = fl__attr_find(op, "axes"), *st = fl__attr_find(op, "starts"), *en = fl__attr_find(op, "ends");
    if (!ax || !st || !en || ax->type != FL_ATTR_INTS || st->type != FL_ATTR_INTS || en->type != FL_ATTR_INTS ||
        ax->n != st->n || ax->n != en->n)
        return 1;
    for (int i = 0; i < nd; i++) start[i] = 0, len[i] = s[i];
    for (int i = 0; i < ax->n; i++) {
        int64_t a = ax->ints[i];
        if (a < 0 || a >= nd) return 1;
        int64_t d = s[a];
        if (d < 0) {
            start[a] = 0, len[a] = -1;
            continue;
        }
        int64_t b = st->ints[i], e = en->ints[i];
        if (b < 0) b += d;
        if (e < 0) e += d;
        b = b < 0 ? 0 : b > d ? d : b;
        e = e < 0 ? 0 : e > d ? d : e;
        start[a] = b, len[a] = e > b ? e - b : 0;
    }
    return 0;
}

/* Out's shape from the box, without the decrease_axis dims (each of length 1). */
static int slice_out_shape(const fl_op *op, const int64_t *len, int nd, int64_t *os)
{
    const fl_attr *dec = fl__attr_find(op, "decrease_axis");
    int on = 0;
    for (int i = 0; i < nd; i++) {
        int drop = 0;
        for (int j = 0; dec && dec->type == FL_ATTR_INTS && j < dec->n; j++) drop |= dec->ints[j] == i;
        if (drop && len[i] != 1 && len[i] >= 0) return -1;
        if (!drop) os[on++] = len[i];
    }
    if (on == 0) os[on++] = 1;
    return on;
}

static int infer_slice(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    FL_CHECK(fl__op_need_f32(op, x));
    int64_t start[FL_MAX_DIMS], len[FL_MAX_DIMS], os[FL_MAX_DIMS];
    if (slice_box(op, x->shape, x->ndim, start, len))
        return fl__op_error(op, "axes, starts and ends must be int lists of one length, axes in [0, %d) of Input '%s'",
                            x->ndim, x->name);
    int on = slice_out_shape(op, len, x->ndim, os);
    if (on < 0) return fl__op_error(op, "decrease_axis names a dim of the slice of '%s' whose length is not 1", x->name);
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, on, os);
    return FL_OK;
}

/* slice (grad 0: Input -> Out) or slice_grad (grad 1: Input, Out@GRAD -> Input@GRAD, zeros
 * outside the box). */
static int run_slice_any(fl_kctx *c, int grad)
{
    FL_CHECK(fl__kctx_dense_f32(c, 0));
    const fl_tensor *x = FL_IN(c, 0);
    int nd = x->ndim;
    int64_t start[FL_MAX_DIMS], len[FL_MAX_DIMS], os[FL_MAX_DIMS], st[FL_MAX_DIMS], idx[FL_MAX_DIMS] = {0};
    int on;
    if (nd < 1 || slice_box(c->op, x->shape, nd, start, len) || (on = slice_out_shape(c->op, len, nd, os)) < 0)
        return fl__err(FL_EINVAL, "%s: axes / starts / ends / decrease_axis do not fit Input '%s'", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0));
    int64_t total = fl__dims_prod(len, 0, nd), inner = len[nd - 1];
    st[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) st[i] = st[i + 1] * x->shape[i + 1];
    float *box, *whole;
    if (grad) {
        FL_CHECK(fl__kctx_dense_f32(c, 1));
        const fl_tensor *dy = FL_IN(c, 1);
        if (dy->numel != total)
            return fl__err(FL_EINVAL, "slice_grad: Out@GRAD '%s' has %lld elements, the slice %lld",
                           fl__kctx_var_name(c, 1, 0), (long long)dy->numel, (long long)total);
        fl_tensor *dx = FL_OUT(c, 0);
        FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, nd, x->shape));
        memset(dx->data, 0, (size_t)dx->numel * sizeof(float));
        box = dy->data, whole = dx->data;
    } else {
        fl_tensor *o = FL_OUT(c, 0);
        FL_CHECK(fl__tensor_reshape_raw(o, FL_FLOAT32, on, os));
        o->lod_n = 0;
        box = o->data, whole = x->data;
    }
    for (int64_t done = 0; done < total && inner > 0; done += inner) {
        int64_t off = start[nd - 1];
        for (int i = 0; i < nd - 1; i++) off += (start[i] + idx[i]) * st[i];
        size_t bytes = (size_t)inner * sizeof(float);
        if (grad) memcpy(whole + off, box + done, bytes);
        else memcpy(box + done, whole + off, bytes);
        for (int i = nd - 2; i >= 0; i--) {
            if (++idx[i] < len[i]) break;
            idx[i] = 0;
        }
    }
    return FL_OK;
}

static int run_slice(fl_kctx *c) { return run_slice_any(c, 0); }
static int run_slice_grad(fl_kctx *c) { return run_slice_any(c, 1); }

static int grad_slice(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]);
    if (!dy) return FL_OK;
    fl_io in[2] = {FL_IO1("Input", x), FL_IO1("Out@GRAD", dy)};
    return grad_one(op, g, x, "Input@GRAD", "slice_grad", in, 2);
}

static const fl_op_def def_slice = {"slice", {"Input"}, {"Out"}, infer_slice, run_slice, grad_slice};
static const fl_op_def def_slice_grad = {"slice_grad",  {"Input", "Out@GRAD"}, {"Input@GRAD"},
                                         fl__infer_nop, run_slice_grad,        NULL};

/* ---- one_hot ---------------------------------------------------------------------------------- */

static int infer_one_hot(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    int64_t depth = fl__attr_i(op, "depth", -1);
    if (!is_index(x->dtype) || x->ndim < 1 || x->shape[x->ndim - 1] != 1)
        return fl__op_error(op, "X '%s' must be int32 / int64 with a last dim of 1", x->name);
    if (depth < 1) return fl__op_error(op, "depth %lld must be >= 1", (long long)depth);
    int64_t s[FL_MAX_DIMS];
    memcpy(s, x->shape, (size_t)x->ndim * sizeof *s);
    s[x->ndim - 1] = depth;
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, x->ndim, s);
    return FL_OK;
}

static int run_one_hot(fl_kctx *c)
{
    FL_CHECK(kctx_index(c, 0));
    const fl_tensor *x = FL_IN(c, 0);
    int64_t depth = fl__attr_i(c->op, "depth", -1);
    int allow = (int)fl__attr_i(c->op, "allow_out_of_range", 0);
    if (depth < 1 || x->ndim < 1 || x->shape[x->ndim - 1] != 1)
        return fl__err(FL_EINVAL, "one_hot: X '%s' needs a last dim of 1 and depth >= 1", fl__kctx_var_name(c, 0, 0));
    int64_t s[FL_MAX_DIMS];
    memcpy(s, x->shape, (size_t)x->ndim * sizeof *s);
    s[x->ndim - 1] = depth;
    fl_tensor *o = FL_OUT(c, 0);
    FL_CHECK(fl__tensor_reshape_raw(o, FL_FLOAT32, x->ndim, s));
    FL_CHECK(fl__tensor_share_lod(o, x));
    float *od = o->data;
    memset(od, 0, (size_t)o->numel * sizeof *od);
    for (int64_t i = 0; i < x->numel; i++) {
        int64_t v = index_at(x, i);
        if (v >= 0 && v < depth) od[i * depth + v] = 1.0f;
        else if (!allow)
            return fl__err(FL_EINVAL, "one_hot: X '%s' holds %lld at %lld, outside [0, %lld)", fl__kctx_var_name(c, 0, 0),
                           (long long)v, (long long)i, (long long)depth);
    }
    return FL_OK;
}

static const fl_op_def def_one_hot = {"one_hot", {"X"}, {"Out"}, infer_one_hot, run_one_hot, NULL};

/* clang-format off */
const fl_op_def *const fl__ops_nlp_idx[] = {
    &def_gather, &def_gather_grad, &def_gather_nd, &def_gather_nd_grad, &def_stack, &def_stack_grad,
    &def_split, &def_split_grad, &def_slice, &def_slice_grad, &def_one_hot, NULL};
/* clang-format on */
