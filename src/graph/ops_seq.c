/*
 * ops_seq.c - operator group "seq": lookup_table (embedding), sequence_pool, concat and
 * reshape2, with their gradients and layer builders.  Semantics follow Paddle fluid 1.x
 * static-graph ops; where this code chooses, the comment at the op says so.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "graph_internal.h"

/* Name of the k-th variable of input / output slot s (for run-time messages). */
static const char *in_name(const fl_kctx *c, int s, int k) { return c->op->in[s].vars[k]->name; }

/* Checks that the first nin input slots and nout output slots hold one variable each. */
static int need_one(fl_op *op, int nin, int nout)
{
    for (int i = 0; i < nin + nout; i++) {
        const fl_slot *sl = i < nin ? &op->in[i] : &op->out[i - nin];
        if (sl->n != 1)
            return fl__op_error(op, "slot '%s' needs exactly one variable, got %d",
                                i < nin ? op->def->in_names[i] : op->def->out_names[i - nin], sl->n);
    }
    return FL_OK;
}

/* dy: gradient of op's output 0; dx: the variable for the gradient of forward input x.
 * Returns 0 when no gradient op is needed. */
static int grad_pair(fl_op *op, fl_grad_ctx *g, fl_var *x, fl_var **dy, fl_var **dx)
{
    *dy = fl__grad_of(g, op->out[0].vars[0]);
    *dx = *dy ? fl__grad_for(g, x) : NULL;
    return *dx != NULL;
}

/* Appends op `type` reading ins and writing a new var "<base>.tmp_k" (shape set by infer)
 * to slot Out and, when mi is not NULL, a new int64 one to slot MaxIndex.  The caller sets
 * attributes and calls fl__op_finish. */
static fl_op *layer_op(fl_prog *p, const char *type, const char *base, fl_dtype dt, const fl_io *ins, int nins,
                       fl_var **out, fl_var **mi)
{
    int64_t one = 1;
    if (!(*out = fl__tmp_var(p, base, dt, 1, &one)) || (mi && !(*mi = fl__tmp_var(p, base, FL_INT64, 1, &one))))
        return NULL;
    fl_io o[2] = {FL_IO1("Out", *out), {"MaxIndex", mi, mi != NULL}};
    return fl__op_new(p, type, ins, nins, o, mi ? 2 : 1);
}

static void ints_str(const int64_t *v, int n, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* ---- lookup_table (embedding) ---------------------------------------------------------
 * Inputs W [vocab, dim] float32 and Ids int64 [..., 1] (Paddle's lookup_table v1: the last
 * dimension of Ids must be 1); Out = Ids.shape[:-1] + [dim] with the LoD of Ids.
 * Attributes as Paddle's: is_sparse, is_distributed, padding_idx (-1: none; otherwise the
 * normalised row in [0, vocab) whose lookups read zeros and give no gradient).
 * is_distributed is only recorded here: in a local program the table is an ordinary local
 * parameter (Paddle's behaviour without a parameter server); the PS rewrite replaces such
 * ops later.  Out-of-range ids are a run-time error, never clamped. */

static int infer_lookup(fl_op *op)
{
    FL_CHECK(need_one(op, 2, 1));
    fl_var *w = op->in[0].vars[0], *ids = op->in[1].vars[0], *o = op->out[0].vars[0];
    char ws[96], is[96];
    fl__shape_str(w, ws, sizeof ws), fl__shape_str(ids, is, sizeof is);
    if (w->dtype != FL_FLOAT32 || w->ndim != 2 || w->shape[0] <= 0 || w->shape[1] <= 0)
        return fl__op_error(op, "table '%s' %s %s must be a float32 [vocab, dim] matrix", w->name, fl_dtype_name(w->dtype),
                            ws);
    if (ids->dtype != FL_INT64)
        return fl__op_error(op, "ids '%s' must be int64, is %s", ids->name, fl_dtype_name(ids->dtype));
    if (ids->ndim < 2 || (ids->shape[ids->ndim - 1] != 1 && ids->shape[ids->ndim - 1] != -1))
        return fl__op_error(op, "ids '%s' %s must have last dimension 1 (shape [N, 1])", ids->name, is);
    int64_t pad = fl__attr_i(op, "padding_idx", -1);
    if (pad < -1 || pad >= w->shape[0])
        return fl__op_error(op, "padding_idx %lld out of range for table '%s' with %lld rows", (long long)pad, w->name,
                            (long long)w->shape[0]);
    int64_t sh[FL_MAX_DIMS];
    for (int d = 0; d + 1 < ids->ndim; d++) sh[d] = ids->shape[d];
    sh[ids->ndim - 1] = w->shape[1];
    fl__var_set_shape(o, FL_FLOAT32, ids->ndim, sh);
    o->lod_level = ids->lod_level;
    return FL_OK;
}

/* Run-time checks shared by the forward and gradient kernels. */
static int lookup_check(const fl_kctx *c, const fl_tensor *w, const fl_tensor *ids)
{
    if (w->dtype != FL_FLOAT32 || w->ndim != 2)
        return fl__err(FL_EINVAL, "%s: table '%s' must be a float32 matrix, is %s of rank %d", c->op->def->type,
                       in_name(c, 0, 0), fl_dtype_name(w->dtype), w->ndim);
    if (ids->dtype != FL_INT64 || ids->ndim < 1 || ids->shape[ids->ndim - 1] != 1) {
        char d[96];
        fl_tensor_describe(ids, d, sizeof d);
        return fl__err(FL_EINVAL, "%s: ids '%s' must be int64 with last dimension 1, got %s", c->op->def->type,
                       in_name(c, 1, 0), d);
    }
    return FL_OK;
}

static int lookup_range_err(const fl_kctx *c, int64_t id, int64_t pos, int64_t vocab)
{
    return fl__err(FL_EINVAL, "%s: id %lld at position %lld of '%s' is out of range [0, %lld) of table '%s' (vocab %lld)",
                   c->op->def->type, (long long)id, (long long)pos, in_name(c, 1, 0), (long long)vocab, in_name(c, 0, 0),
                   (long long)vocab);
}

static int run_lookup(fl_kctx *c)
{
    fl_tensor *w = FL_IN(c, 0), *ids = FL_IN(c, 1), *out = FL_OUT(c, 0);
    FL_CHECK(lookup_check(c, w, ids));
    int64_t vocab = w->shape[0], dim = w->shape[1], n = ids->numel, pad = fl__attr_i(c->op, "padding_idx", -1);
    int64_t sh[FL_MAX_DIMS];
    memcpy(sh, ids->shape, sizeof sh);
    sh[ids->ndim - 1] = dim;
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, ids->ndim, sh));
    const int64_t *id = ids->data;
    const float *tab = w->data;
    float *y = out->data;
    size_t row = (size_t)dim * sizeof(float);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = id[i];
        if (r == pad && pad >= 0) memset(y + i * dim, 0, row);
        else if (FL_UNLIKELY(r < 0 || r >= vocab)) return lookup_range_err(c, r, i, vocab);
        else memcpy(y + i * dim, tab + r * dim, row);
    }
    out->is_rows = 0;
    return fl__tensor_share_lod(out, ids);
}

/* W@GRAD: dense [vocab, dim] (rows of the looked-up ids summed) or, with is_sparse,
 * SelectedRows of height vocab whose rows are the ids in order (duplicates kept, they add
 * up downstream).  Padding positions stay in the row list with zero values, so the rows
 * line up with the ids as in Paddle; those zero rows change nothing but the (never read)
 * padding row's optimizer state.  The sparse path touches only n x dim values. */
static int run_lookup_grad(fl_kctx *c)
{
    fl_tensor *w = FL_IN(c, 0), *ids = FL_IN(c, 1), *dy = FL_IN(c, 2), *dw = FL_OUT(c, 0);
    FL_CHECK(lookup_check(c, w, ids));
    int64_t vocab = w->shape[0], dim = w->shape[1], n = ids->numel, pad = fl__attr_i(c->op, "padding_idx", -1);
    if (dy->numel != n * dim)
        return fl__err(FL_EINVAL, "lookup_table_grad: output gradient has %lld elements, expected %lld ids x %lld",
                       (long long)dy->numel, (long long)n, (long long)dim);
    const int64_t *id = ids->data;
    const float *g = dy->data;
    dw->lod_n = 0;
    if (fl__attr_i(c->op, "is_sparse", 0)) {
        FL_CHECK(fl__tensor_resize2(dw, n, dim));
        float *d = dw->data;
        memcpy(d, g, (size_t)(n * dim) * sizeof(float));
        for (int64_t i = 0; i < n; i++) {
            if (id[i] == pad && pad >= 0) memset(d + i * dim, 0, (size_t)dim * sizeof(float));
            else if (FL_UNLIKELY(id[i] < 0 || id[i] >= vocab)) return lookup_range_err(c, id[i], i, vocab);
        }
        return fl_tensor_set_rows(dw, id, n, vocab);
    }
    FL_CHECK(fl__tensor_resize2(dw, vocab, dim));
    dw->is_rows = 0;
    float *d = dw->data;
    memset(d, 0, (size_t)(vocab * dim) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        int64_t r = id[i];
        if (r == pad && pad >= 0) continue;
        if (FL_UNLIKELY(r < 0 || r >= vocab)) return lookup_range_err(c, r, i, vocab);
        float *restrict dst = d + r * dim;
        const float *restrict src = g + i * dim;
        for (int64_t j = 0; j < dim; j++) dst[j] += src[j];
    }
    return FL_OK;
}

static int grad_lookup(fl_op *op, fl_grad_ctx *g)
{
    fl_prog *p = op->prog;
    fl_var *w = op->in[0].vars[0], *dy, *dw;
    if (!grad_pair(op, g, w, &dy, &dw)) return FL_OK;
    int sparse = fl__attr_i(op, "is_sparse", 0) != 0;
    dw->is_sparse_grad = sparse;
    fl_io in[3] = {FL_IO1("W", w), FL_IO1("Ids", op->in[1].vars[0]), FL_IO1("Out@GRAD", dy)};
    fl_io o = FL_IO1("W@GRAD", dw);
    fl_op *go = fl__op_new(p, "lookup_table_grad", in, 3, &o, 1);
    if (!go) return fl_prog_status(p);
    FL_CHECK(fl__attr_set_i(go, "is_sparse", sparse));
    FL_CHECK(fl__attr_set_i(go, "padding_idx", fl__attr_i(op, "padding_idx", -1)));
    return fl__op_finish(go);
}

static const fl_op_def def_lookup = {"lookup_table", {"W", "Ids"}, {"Out"}, infer_lookup, run_lookup, grad_lookup};
static const fl_op_def def_lookup_grad = {
    "lookup_table_grad", {"W", "Ids", "Out@GRAD"}, {"W@GRAD"}, NULL, run_lookup_grad, NULL};

/* Parameter "embedding_<k>.w_0" (or attr->param.name).  A name given in attr->param.name
 * that already names a [vocab, dim] parameter of the program is reused: that is how several
 * slots share one table (Paddle: same ParamAttr name).  The initializer and other attributes
 * of such later calls are ignored, as in Paddle. */
fl_var *fl_layer_embedding(fl_var *ids, int64_t vocab, int64_t dim, const fl_embedding_attr *attr)
{
    fl_prog *p = fl__prog_of(&ids, 1);
    if (!p || p->status != FL_OK) return NULL;
    static const fl_embedding_attr none;
    if (!attr) attr = &none;
    if (vocab <= 0 || dim <= 0) {
        fl__prog_error(p, FL_EINVAL, "embedding: size [%lld, %lld] of the table on '%s' must be positive", (long long)vocab,
                       (long long)dim, ids->name);
        return NULL;
    }
    int64_t pad = -1;
    if (attr->has_padding_idx) {
        pad = attr->padding_idx < 0 ? attr->padding_idx + vocab : attr->padding_idx;
        if (pad < 0 || pad >= vocab) {
            fl__prog_error(p, FL_EINVAL, "embedding: padding_idx %lld out of range [%lld, %lld) for the table on '%s'",
                           (long long)attr->padding_idx, (long long)-vocab, (long long)vocab, ids->name);
            return NULL;
        }
    }
    char base[128], nm[256];
    fl__unique_name(p, "embedding", base, sizeof base);
    if (attr->param.name) snprintf(nm, sizeof nm, "%s", attr->param.name);
    else snprintf(nm, sizeof nm, "%s.w_0", base);
    /* an existing [vocab, dim] parameter of that name is shared (fl__param_create) */
    int64_t wsh[2] = {vocab, dim};
    fl_var *w = fl__param_create(p, nm, 2, wsh, &attr->param, fl_init_xavier(0), vocab, dim);
    if (!w) return NULL;
    fl_io in[2] = {FL_IO1("W", w), FL_IO1("Ids", ids)};
    fl_var *out;
    fl_op *op = layer_op(p, "lookup_table", base, FL_FLOAT32, in, 2, &out, NULL);
    if (!op || fl__attr_set_i(op, "is_sparse", attr->is_sparse != 0) ||
        fl__attr_set_i(op, "is_distributed", attr->is_distributed != 0) || fl__attr_set_i(op, "padding_idx", pad) ||
        fl__op_finish(op))
        return NULL;
    return out;
}

/* ---- sequence_pool ---------------------------------------------------------------------
 * X [N, ...] float32 with one level of LoD (nseq + 1 offsets) -> Out [nseq, ...] without
 * LoD.  Attribute "pooltype" as Paddle's (upper case): SUM, AVERAGE, SQRT (sum / sqrt(len)),
 * MAX, FIRST, LAST.  Empty sequences give zeros (Paddle's default pad_value 0) and no
 * gradient.  MAX also writes MaxIndex (int64, shape of Out): the absolute row of X that
 * won per element (first maximum on ties, -1 for an empty sequence); unlike Paddle, the
 * MaxIndex output exists only for MAX, since no other pool type writes it. */

enum { POOL_SUM, POOL_AVERAGE, POOL_SQRT, POOL_MAX, POOL_FIRST, POOL_LAST, POOL_COUNT };
static const char *const pool_names[POOL_COUNT] = {"SUM", "AVERAGE", "SQRT", "MAX", "FIRST", "LAST"};

static float pool_scale(int code, int64_t len)
{
    return code == POOL_AVERAGE ? 1.0f / (float)len : code == POOL_SQRT ? 1.0f / sqrtf((float)len) : 1.0f;
}

static int pool_code(const char *s)
{
    for (int i = 0; s && i < POOL_COUNT; i++)
        if (!strcasecmp(s, pool_names[i])) return i;
    return -1;
}

static int infer_seqpool(fl_op *op)
{
    FL_CHECK(need_one(op, 1, 1));
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    int code = pool_code(fl__attr_s(op, "pooltype", ""));
    if (code < 0)
        return fl__op_error(op, "unknown pooltype '%s' (expected SUM, AVERAGE, SQRT, MAX, FIRST or LAST)",
                            fl__attr_s(op, "pooltype", ""));
    if (x->dtype != FL_FLOAT32 || x->ndim < 1)
        return fl__op_error(op, "input '%s' must be float32 of rank >= 1, is %s of rank %d", x->name,
                            fl_dtype_name(x->dtype), x->ndim);
    /* Paddle checks the LoD level at compile time too */
    if (x->lod_level < 1)
        return fl__op_error(op, "input '%s' must be a sequence (lod_level 1), it has lod_level %d", x->name, x->lod_level);
    if (code == POOL_MAX && op->out[1].n != 1) return fl__op_error(op, "pooltype MAX needs the output 'MaxIndex'");
    int64_t sh[FL_MAX_DIMS];
    memcpy(sh, x->shape, sizeof sh);
    sh[0] = -1;
    fl__var_set_shape(o, FL_FLOAT32, x->ndim, sh);
    o->lod_level = 0;
    if (op->out[1].n == 1) fl__var_set_shape(op->out[1].vars[0], FL_INT64, x->ndim, sh);
    return FL_OK;
}

/* The LoD offsets of X (slot 0), checked against its rows. */
static int seq_lod(const fl_kctx *c, const fl_tensor *x, const int64_t **lod, int64_t *nseq)
{
    int64_t nl = 0;
    *lod = fl_tensor_lod(x, &nl);
    if (!*lod || nl < 1)
        return fl__err(FL_EINVAL, "%s: input '%s' has no LoD (it must be fed or computed as a sequence with LoD offsets)",
                       c->op->def->type, in_name(c, 0, 0));
    int64_t rows = x->ndim ? x->shape[0] : 1;
    if ((*lod)[0] != 0 || (*lod)[nl - 1] != rows)
        return fl__err(FL_EINVAL, "%s: LoD of input '%s' spans rows [%lld, %lld) but it has %lld rows", c->op->def->type,
                       in_name(c, 0, 0), (long long)(*lod)[0], (long long)(*lod)[nl - 1], (long long)rows);
    *nseq = nl - 1;
    return FL_OK;
}

static int run_seqpool(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *out = FL_OUT(c, 0), *mi = c->nout[1] ? c->out[1][0] : NULL;
    int code = pool_code(fl__attr_s(c->op, "pooltype", ""));
    const int64_t *lod;
    int64_t nseq;
    if (code < 0) return fl__err(FL_EINVAL, "sequence_pool: unknown pooltype '%s'", fl__attr_s(c->op, "pooltype", ""));
    if (x->dtype != FL_FLOAT32) return fl__err(FL_EINVAL, "sequence_pool: input '%s' must be float32", in_name(c, 0, 0));
    FL_CHECK(seq_lod(c, x, &lod, &nseq));
    int64_t w = fl__dims_prod(x->shape, 1, x->ndim), sh[FL_MAX_DIMS];
    memcpy(sh, x->shape, sizeof sh);
    sh[0] = nseq;
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, x->ndim, sh));
    out->lod_n = 0;
    int64_t *idx = NULL;
    if (code == POOL_MAX && !mi) return fl__err(FL_EINVAL, "sequence_pool: pooltype MAX needs the output 'MaxIndex'");
    if (code == POOL_MAX) {
        FL_CHECK(fl__tensor_reshape_raw(mi, FL_INT64, x->ndim, sh));
        mi->lod_n = 0;
        idx = mi->data;
    }
    const float *a = x->data;
    float *y = out->data;
    size_t row = (size_t)w * sizeof(float);
    for (int64_t s = 0; s < nseq; s++) {
        int64_t b = lod[s], e = lod[s + 1];
        float *restrict yr = y + s * w;
        if (e <= b) {
            memset(yr, 0, row);
            if (idx)
                for (int64_t j = 0; j < w; j++) idx[s * w + j] = -1;
            continue;
        }
        switch (code) {
        case POOL_FIRST: memcpy(yr, a + b * w, row); break;
        case POOL_LAST: memcpy(yr, a + (e - 1) * w, row); break;
        case POOL_MAX: {
            int64_t *restrict ir = idx + s * w;
            memcpy(yr, a + b * w, row);
            for (int64_t j = 0; j < w; j++) ir[j] = b;
            for (int64_t r = b + 1; r < e; r++) {
                const float *restrict ar = a + r * w;
                for (int64_t j = 0; j < w; j++)
                    if (ar[j] > yr[j]) {
                        yr[j] = ar[j];
                        ir[j] = r;
                    }
            }
            break;
        }
        default: {
            memcpy(yr, a + b * w, row);
            for (int64_t r = b + 1; r < e; r++) {
                const float *restrict ar = a + r * w;
                for (int64_t j = 0; j < w; j++) yr[j] += ar[j];
            }
            float sc = pool_scale(code, e - b);
            if (sc != 1.0f)
                for (int64_t j = 0; j < w; j++) yr[j] *= sc;
            break;
        }
        }
    }
    return FL_OK;
}

/* Inputs X (for shape and LoD), Out@GRAD and, for MAX, MaxIndex. */
static int run_seqpool_grad(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *dy = FL_IN(c, 1), *mi = FL_IN(c, 2), *dx = FL_OUT(c, 0);
    int code = pool_code(fl__attr_s(c->op, "pooltype", ""));
    const int64_t *lod;
    int64_t nseq;
    if (code < 0) return fl__err(FL_EINVAL, "sequence_pool_grad: unknown pooltype '%s'", fl__attr_s(c->op, "pooltype", ""));
    FL_CHECK(seq_lod(c, x, &lod, &nseq));
    int64_t w = fl__dims_prod(x->shape, 1, x->ndim);
    if (dy->numel != nseq * w)
        return fl__err(FL_EINVAL, "sequence_pool_grad: output gradient of '%s' has %lld elements, expected %lld x %lld",
                       in_name(c, 0, 0), (long long)dy->numel, (long long)nseq, (long long)w);
    if (code == POOL_MAX && (!mi || mi->dtype != FL_INT64 || mi->numel != nseq * w))
        return fl__err(FL_EINVAL, "sequence_pool_grad: MaxIndex of '%s' is missing or does not match", in_name(c, 0, 0));
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    FL_CHECK(fl__tensor_share_lod(dx, x));
    dx->is_rows = 0;
    const float *g = dy->data;
    float *d = dx->data;
    if (code == POOL_MAX || code == POOL_FIRST || code == POOL_LAST) memset(d, 0, (size_t)x->numel * sizeof(float));
    const int64_t *idx = code == POOL_MAX ? mi->data : NULL;
    for (int64_t s = 0; s < nseq; s++) {
        int64_t b = lod[s], e = lod[s + 1];
        const float *restrict gr = g + s * w;
        if (e <= b) continue;
        switch (code) {
        case POOL_FIRST: memcpy(d + b * w, gr, (size_t)w * sizeof(float)); break;
        case POOL_LAST: memcpy(d + (e - 1) * w, gr, (size_t)w * sizeof(float)); break;
        case POOL_MAX:
            for (int64_t j = 0; j < w; j++) {
                int64_t r = idx[s * w + j];
                if (r < b || r >= e)
                    return fl__err(FL_EINVAL,
                                   "sequence_pool_grad: MaxIndex %lld of sequence %lld of '%s' is outside [%lld, %lld)",
                                   (long long)r, (long long)s, in_name(c, 0, 0), (long long)b, (long long)e);
                d[r * w + j] = gr[j];
            }
            break;
        default: {
            float sc = pool_scale(code, e - b);
            for (int64_t r = b; r < e; r++) {
                float *restrict dr = d + r * w;
                for (int64_t j = 0; j < w; j++) dr[j] = gr[j] * sc;
            }
            break;
        }
        }
    }
    return FL_OK;
}

static int grad_seqpool(fl_op *op, fl_grad_ctx *g)
{
    fl_prog *p = op->prog;
    fl_var *x = op->in[0].vars[0], *dy, *dx;
    if (!grad_pair(op, g, x, &dy, &dx)) return FL_OK;
    int max = pool_code(fl__attr_s(op, "pooltype", "")) == POOL_MAX;
    fl_var *mi = max ? op->out[1].vars[0] : NULL;
    fl_io in[3] = {FL_IO1("X", x), FL_IO1("Out@GRAD", dy), {"MaxIndex", &mi, max}};
    fl_io o = FL_IO1("X@GRAD", dx);
    fl_op *go = fl__op_new(p, "sequence_pool_grad", in, 3, &o, 1);
    if (!go) return fl_prog_status(p);
    FL_CHECK(fl__attr_set_s(go, "pooltype", fl__attr_s(op, "pooltype", "")));
    return fl__op_finish(go);
}

static const fl_op_def def_seqpool = {"sequence_pool", {"X"},       {"Out", "MaxIndex"},
                                      infer_seqpool,   run_seqpool, grad_seqpool};
static const fl_op_def def_seqpool_grad = {
    "sequence_pool_grad", {"X", "Out@GRAD", "MaxIndex"}, {"X@GRAD"}, NULL, run_seqpool_grad, NULL};

fl_var *fl_layer_sequence_pool(fl_var *x, const char *pool_type)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p || p->status != FL_OK) return NULL;
    int code = pool_code(pool_type);
    if (code < 0) {
        fl__prog_error(p, FL_EINVAL,
                       "sequence_pool: unknown pool_type '%s' on '%s' (expected sum, average, sqrt, max, first or last)",
                       pool_type ? pool_type : "(null)", x->name);
        return NULL;
    }
    char base[128];
    fl__unique_name(p, "sequence_pool", base, sizeof base);
    fl_io in = FL_IO1("X", x);
    fl_var *out, *mi;
    fl_op *op = layer_op(p, "sequence_pool", base, FL_FLOAT32, &in, 1, &out, code == POOL_MAX ? &mi : NULL);
    if (!op || fl__attr_set_s(op, "pooltype", pool_names[code]) || fl__op_finish(op)) return NULL;
    return out;
}

/* ---- concat ------------------------------------------------------------------------------
 * Inputs X (n >= 1, one dtype, one rank), attribute axis (negative counts from the end, as
 * Paddle).  All dimensions except axis must agree (-1 matches anything at build time; the
 * output takes the known size).  Any dtype is copied; gradients flow for float32.  The
 * output keeps the LoD of X[0] when axis != 0 (rows unchanged), and has none for axis 0
 * (rows of several inputs are stacked; Paddle only defines that for LoD-free inputs). */

static int infer_concat(fl_op *op)
{
    int n = op->in[0].n;
    if (n < 1) return fl__op_error(op, "needs at least one input");
    FL_CHECK(need_one(op, 0, 1));
    fl_var *x0 = op->in[0].vars[0], *src[FL_MAX_DIMS];
    int rank = x0->ndim, axis = (int)fl__attr_i(op, "axis", 0), a = axis < 0 ? axis + rank : axis;
    if (rank < 1 || a < 0 || a >= rank)
        return fl__op_error(op, "axis %d out of range for input '%s' of rank %d", axis, x0->name, rank);
    int64_t sh[FL_MAX_DIMS];
    for (int d = 0; d < rank; d++) {
        sh[d] = x0->shape[d];
        src[d] = x0;
    }
    for (int i = 1; i < n; i++) {
        fl_var *x = op->in[0].vars[i];
        char xs[96], ss[96];
        fl__shape_str(x, xs, sizeof xs);
        if (x->dtype != x0->dtype || x->ndim != rank) {
            fl__shape_str(x0, ss, sizeof ss);
            return fl__op_error(op, "input '%s' is %s %s but input '%s' is %s %s (dtypes and ranks must agree)", x->name,
                                fl_dtype_name(x->dtype), xs, x0->name, fl_dtype_name(x0->dtype), ss);
        }
        for (int d = 0; d < rank; d++) {
            int64_t v = x->shape[d];
            if (d == a) {
                sh[d] = (sh[d] < 0 || v < 0) ? -1 : sh[d] + v;
            } else if (sh[d] >= 0 && v >= 0 && sh[d] != v) {
                fl__shape_str(src[d], ss, sizeof ss);
                return fl__op_error(
                    op,
                    "input '%s' %s does not match input '%s' %s in dimension %d (all dimensions but axis %d must agree)",
                    x->name, xs, src[d]->name, ss, d, a);
            } else if (sh[d] < 0) {
                sh[d] = v;
                src[d] = x;
            }
        }
    }
    fl_var *o = op->out[0].vars[0];
    fl__var_set_shape(o, x0->dtype, rank, sh);
    o->lod_level = a != 0 ? x0->lod_level : 0;
    return FL_OK;
}

/* Checks the run-time inputs of slot 0 against X[0] and returns the normalised axis and
 * the total size along it. */
static int concat_check(const fl_kctx *c, int *axis, int64_t *total)
{
    const fl_tensor *x0 = c->in[0][0];
    int rank = x0->ndim, a = (int)fl__attr_i(c->op, "axis", 0);
    if (a < 0) a += rank;
    if (a < 0 || a >= rank)
        return fl__err(FL_EINVAL, "%s: axis %d out of range for input '%s' of rank %d", c->op->def->type,
                       (int)fl__attr_i(c->op, "axis", 0), in_name(c, 0, 0), rank);
    int64_t t = 0;
    for (int i = 0; i < c->nin[0]; i++) {
        const fl_tensor *x = c->in[0][i];
        int ok = x->dtype == x0->dtype && x->ndim == rank;
        for (int d = 0; ok && d < rank; d++) ok = d == a || x->shape[d] == x0->shape[d];
        if (!ok) {
            char s0[96], s1[96];
            fl_tensor_describe(x0, s0, sizeof s0);
            fl_tensor_describe(x, s1, sizeof s1);
            return fl__err(FL_EINVAL, "%s: input '%s' is %s but input '%s' is %s (all dimensions but axis %d must agree)",
                           c->op->def->type, in_name(c, 0, i), s1, in_name(c, 0, 0), s0, a);
        }
        t += x->shape[a];
    }
    *axis = a;
    *total = t;
    return FL_OK;
}

static int run_concat(fl_kctx *c)
{
    fl_tensor *x0 = c->in[0][0], *out = FL_OUT(c, 0);
    int a;
    int64_t total, sh[FL_MAX_DIMS];
    FL_CHECK(concat_check(c, &a, &total));
    memcpy(sh, x0->shape, sizeof sh);
    sh[a] = total;
    FL_CHECK(fl__tensor_reshape_raw(out, x0->dtype, x0->ndim, sh));
    size_t es = fl_dtype_size(x0->dtype), orow = (size_t)fl__dims_prod(sh, a, x0->ndim) * es, off = 0;
    int64_t outer = fl__dims_prod(sh, 0, a);
    char *y = out->data;
    for (int i = 0; i < c->nin[0]; i++) {
        const fl_tensor *x = c->in[0][i];
        size_t irow = (size_t)fl__dims_prod(x->shape, a, x->ndim) * es;
        const char *src = x->data;
        for (int64_t o = 0; o < outer; o++) memcpy(y + (size_t)o * orow + off, src + (size_t)o * irow, irow);
        off += irow;
    }
    out->is_rows = 0;
    if (a != 0) return fl__tensor_share_lod(out, x0);
    out->lod_n = 0;
    return FL_OK;
}

/* Inputs X (all forward inputs, for their shapes) and Out@GRAD; outputs X@GRAD for the
 * inputs listed in attribute grad_index (only those that need a gradient). */
static int run_concat_grad(fl_kctx *c)
{
    fl_tensor *x0 = c->in[0][0], *dy = FL_IN(c, 1);
    const fl_attr *gi = fl__attr_find(c->op, "grad_index");
    int a, n = c->nin[0];
    int64_t total;
    FL_CHECK(concat_check(c, &a, &total));
    if (!gi || gi->type != FL_ATTR_INTS || gi->n != c->nout[0])
        return fl__err(FL_EINVAL, "concat_grad: attribute 'grad_index' must list one input per output gradient");
    int64_t outer = fl__dims_prod(x0->shape, 0, a), orow = fl__dims_prod(x0->shape, a + 1, x0->ndim) * total;
    if (dy->dtype != FL_FLOAT32 || dy->numel != outer * orow)
        return fl__err(FL_EINVAL, "concat_grad: output gradient has %lld elements, expected %lld", (long long)dy->numel,
                       (long long)(outer * orow));
    int64_t *off = malloc((size_t)n * sizeof *off), acc = 0; /* column offset of each input */
    if (!off) return fl__err(FL_ENOMEM, "concat_grad: out of memory");
    for (int i = 0; i < n; i++) {
        off[i] = acc;
        acc += fl__dims_prod(c->in[0][i]->shape, a, x0->ndim);
    }
    int st = FL_OK;
    for (int k = 0; k < c->nout[0] && st == FL_OK; k++) {
        int64_t i = gi->ints[k];
        if (i < 0 || i >= n) {
            st = fl__err(FL_EINVAL, "concat_grad: grad_index %lld out of range [0, %d)", (long long)i, n);
            break;
        }
        fl_tensor *x = c->in[0][i], *dx = c->out[0][k];
        if ((st = fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape)) != FL_OK) break;
        dx->is_rows = 0;
        if ((st = fl__tensor_share_lod(dx, x)) != FL_OK) break;
        int64_t irow = fl__dims_prod(x->shape, a, x->ndim);
        const float *g = dy->data;
        float *d = dx->data;
        for (int64_t o = 0; o < outer; o++) memcpy(d + o * irow, g + o * orow + off[i], (size_t)irow * sizeof(float));
    }
    free(off);
    return st;
}

static int grad_concat(fl_op *op, fl_grad_ctx *g)
{
    fl_prog *p = op->prog;
    fl_var *dy = fl__grad_of(g, op->out[0].vars[0]);
    if (!dy) return FL_OK;
    int n = op->in[0].n, m = 0;
    fl_var **dx = malloc((size_t)n * sizeof *dx);
    int64_t *gi = malloc((size_t)n * sizeof *gi);
    if (!dx || !gi) {
        free(dx);
        free(gi);
        return fl__prog_error(p, FL_ENOMEM, "concat: out of memory building the gradient");
    }
    for (int i = 0; i < n; i++) {
        fl_var *d = fl__grad_for(g, op->in[0].vars[i]);
        if (d) {
            dx[m] = d;
            gi[m++] = i;
        }
    }
    int st = FL_OK;
    if (m) {
        fl_io in[2] = {{"X", op->in[0].vars, n}, FL_IO1("Out@GRAD", dy)};
        fl_io o = {"X@GRAD", dx, m};
        fl_op *go = fl__op_new(p, "concat_grad", in, 2, &o, 1);
        if (!go) st = fl_prog_status(p);
        if (st == FL_OK) st = fl__attr_set_i(go, "axis", fl__attr_i(op, "axis", 0));
        if (st == FL_OK) st = fl__attr_set_ints(go, "grad_index", gi, m);
        if (st == FL_OK) st = fl__op_finish(go);
    }
    free(dx);
    free(gi);
    return st;
}

static const fl_op_def def_concat = {"concat", {"X"}, {"Out"}, infer_concat, run_concat, grad_concat};
static const fl_op_def def_concat_grad = {"concat_grad", {"X", "Out@GRAD"}, {"X@GRAD"}, NULL, run_concat_grad, NULL};

fl_var *fl_layer_concat(fl_var *const *inputs, int n, int axis)
{
    fl_prog *p = fl__prog_of(inputs, n);
    if (!p) {
        if (n <= 0 || !inputs) fl__err(FL_EINVAL, "concat: no inputs");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    char base[128];
    fl__unique_name(p, "concat", base, sizeof base);
    fl_io in = {"X", inputs, n};
    fl_var *out;
    fl_op *op = layer_op(p, "concat", base, inputs[0]->dtype, &in, 1, &out, NULL);
    if (!op || fl__attr_set_i(op, "axis", axis) || fl__op_finish(op)) return NULL;
    return out;
}

/* ---- reshape2 ------------------------------------------------------------------------------
 * Attribute shape (ints), as Paddle's reshape2: 0 copies the input dimension at the same
 * index, one -1 is inferred from the element count.  Build time checks what is known: the
 * input dimensions copied by a 0 cancel out, so [-1, 6] -> [0, 2, 3] is checked while
 * [-1, 6] -> [4, -1] is left to run time.  The output keeps the LoD of X when its first
 * dimension equals X's (Paddle's rule; at build time two -1 count as equal).  Paddle's
 * XShape output is not needed: reshape2_grad reads the run-time shape of X itself. */

static int infer_reshape(fl_op *op)
{
    FL_CHECK(need_one(op, 1, 1));
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    const fl_attr *sa = fl__attr_find(op, "shape");
    if (!sa || sa->type != FL_ATTR_INTS || sa->n < 1 || sa->n > FL_MAX_DIMS)
        return fl__op_error(op, "attribute 'shape' must list 1 to %d dimensions", FL_MAX_DIMS);
    char xs[96], ss[160];
    fl__shape_str(x, xs, sizeof xs);
    ints_str(sa->ints, sa->n, ss, sizeof ss);
    int nd = sa->n, infer_at = -1, copied[FL_MAX_DIMS] = {0}, x_known = 1;
    int64_t sh[FL_MAX_DIMS], kx = 1, ko = 1;
    for (int i = 0; i < nd; i++) {
        int64_t v = sa->ints[i];
        if (v == -1) {
            if (infer_at >= 0) return fl__op_error(op, "shape %s for input '%s' has more than one -1", ss, x->name);
            infer_at = i;
            sh[i] = -1;
        } else if (v == 0) {
            if (i >= x->ndim)
                return fl__op_error(op, "shape %s: dimension %d is 0 (copy) but input '%s' %s has rank %d", ss, i, x->name,
                                    xs, x->ndim);
            sh[i] = x->shape[i];
            copied[i] = 1;
        } else if (v < 0) {
            return fl__op_error(op,
                                "shape %s for input '%s': dimension %d is %lld (expected > 0, 0 to copy or -1 to infer)",
                                ss, x->name, i, (long long)v);
        } else {
            sh[i] = v;
            ko *= v;
        }
    }
    for (int d = 0; d < x->ndim; d++) {
        if (d < nd && copied[d]) continue;
        if (x->shape[d] < 0) x_known = 0;
        else kx *= x->shape[d];
    }
    /* kx, ko: element counts of input and output apart from the copied dimensions */
    if (x_known && (infer_at >= 0 ? kx % ko != 0 : kx != ko))
        return fl__op_error(op, "cannot reshape input '%s' %s to %s (%lld elements to %s%lld)", x->name, xs, ss,
                            (long long)kx, infer_at >= 0 ? "a multiple of " : "", (long long)ko);
    if (x_known && infer_at >= 0) sh[infer_at] = kx / ko;
    fl__var_set_shape(o, x->dtype, nd, sh);
    o->lod_level = (x->ndim && sh[0] == x->shape[0]) ? x->lod_level : 0;
    return FL_OK;
}

static int run_reshape(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *out = FL_OUT(c, 0);
    const fl_attr *sa = fl__attr_find(c->op, "shape");
    int nd = sa->n, infer_at = -1, ok = 1;
    int64_t sh[FL_MAX_DIMS], known = 1;
    char xd[96], ss[160];
    for (int i = 0; i < nd; i++) {
        int64_t v = sa->ints[i];
        if (v == 0) v = i < x->ndim ? x->shape[i] : -2;
        if (v == -1 && infer_at < 0) infer_at = i;
        else if (v < 0) ok = 0;
        else known *= v;
        sh[i] = v;
    }
    if (ok && infer_at >= 0) {
        ok = known ? x->numel % known == 0 : x->numel == 0;
        sh[infer_at] = known ? x->numel / known : 0;
    } else {
        ok = ok && known == x->numel;
    }
    if (!ok) {
        fl_tensor_describe(x, xd, sizeof xd);
        ints_str(sa->ints, nd, ss, sizeof ss);
        return fl__err(FL_EINVAL, "reshape2: cannot reshape input '%s' %s (%lld elements) to shape %s", in_name(c, 0, 0),
                       xd, (long long)x->numel, ss);
    }
    FL_CHECK(fl__tensor_reshape_raw(out, x->dtype, nd, sh));
    memcpy(out->data, x->data, fl_tensor_nbytes(x));
    out->is_rows = 0;
    if (x->ndim && sh[0] == x->shape[0]) return fl__tensor_share_lod(out, x);
    out->lod_n = 0;
    return FL_OK;
}

static int run_reshape_grad(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *dy = FL_IN(c, 1), *dx = FL_OUT(c, 0);
    if (dy->numel != x->numel || dy->dtype != FL_FLOAT32)
        return fl__err(FL_EINVAL, "reshape2_grad: output gradient has %lld elements, input '%s' %lld", (long long)dy->numel,
                       in_name(c, 0, 0), (long long)x->numel);
    FL_CHECK(fl__tensor_reshape_raw(dx, FL_FLOAT32, x->ndim, x->shape));
    memcpy(dx->data, dy->data, (size_t)x->numel * sizeof(float));
    dx->is_rows = 0;
    return fl__tensor_share_lod(dx, x);
}

static int grad_reshape(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy, *dx;
    if (!grad_pair(op, g, x, &dy, &dx)) return FL_OK;
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Out@GRAD", dy)};
    fl_io o = FL_IO1("X@GRAD", dx);
    return fl__op_append(op->prog, "reshape2_grad", in, 2, &o, 1) ? FL_OK : fl_prog_status(op->prog);
}

static const fl_op_def def_reshape = {"reshape2", {"X"}, {"Out"}, infer_reshape, run_reshape, grad_reshape};
static const fl_op_def def_reshape_grad = {"reshape2_grad", {"X", "Out@GRAD"}, {"X@GRAD"}, NULL, run_reshape_grad, NULL};

fl_var *fl_layer_reshape(fl_var *x, int ndim, const int64_t *shape)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p || p->status != FL_OK) return NULL;
    if (ndim < 1 || ndim > FL_MAX_DIMS || !shape) {
        fl__prog_error(p, FL_EINVAL, "reshape2: rank %d of the new shape for '%s' out of range [1, %d]", ndim, x->name,
                       FL_MAX_DIMS);
        return NULL;
    }
    char base[128];
    fl__unique_name(p, "reshape2", base, sizeof base);
    fl_io in = FL_IO1("X", x);
    fl_var *out;
    fl_op *op = layer_op(p, "reshape2", base, x->dtype, &in, 1, &out, NULL);
    if (!op || fl__attr_set_ints(op, "shape", shape, ndim) || fl__op_finish(op)) return NULL;
    return out;
}

const fl_op_def *const fl__ops_seq[] = {&def_lookup,       &def_lookup_grad,  &def_seqpool,
                                        &def_seqpool_grad, &def_concat,       &def_concat_grad,
                                        &def_reshape,      &def_reshape_grad, NULL};
