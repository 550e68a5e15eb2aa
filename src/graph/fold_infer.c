/*
 * fold_infer.c - the inference pass: rewrites of programs that only run forward with
 * batch_norm on its global statistics (a program cloned for test, a loaded inference
 * model), so that each convolution does the work of the ops after it.
 *
 *   conv2d -> batch_norm (is_test or use_global_stats)
 *       batch_norm is folded into the convolution: a conv_bn_fold op, run just before the
 *       conv2d, computes Filter * s and (Bias - Mean) * s + BnBias per output channel, with
 *       s = Scale / sqrt(Variance + epsilon), into two derived, non-persistable variables the
 *       conv2d reads instead of its filter and bias (with AMP, the cast of the filter to bfloat16
 *       becomes the fold's output type: one pass and one rounding).  The parameters in the scope are never
 *       written: saving, training and fetches see them unchanged.  The fold keeps its
 *       outputs between runs (FL_OPDEF_OWN_OUTPUTS) and skips its work while its inputs and
 *       outputs keep the write versions of its last run (tensor_internal.h), so a parameter
 *       changed between runs by any writer (a test program run during training shares the
 *       training scope; a load; a set through the API) is folded again at once, and an
 *       inference program run repeatedly folds once; the conv2d then keeps its reordered
 *       filter too.  batch_norm's fuse_with_relu becomes the conv2d's act, its bfloat16
 *       output (out_dtype, AMP's amp_bn.c in a training program cloned for test) the
 *       conv2d's out_dtype.
 *   conv2d -> fused_bn_add_activation (is_test; relu(batch_norm(X) + Z), the block end of a
 *       program cloned after minimize) as batch_norm, with Z as the residual below and relu
 *       the act;
 *   conv2d (act none) -> relu                        the relu becomes conv2d's act;
 *   conv2d (act none) -> elementwise_add(., Z) [-> relu]
 *       the residual sum: Z becomes conv2d's ResidualData (copied into the output, then
 *       oneDNN's "sum" post-op adds the convolution to it), the relu its act.  Of the add's
 *       two operands the one whose convolution runs later is fused, so that the other is
 *       ready when it runs (a projection shortcut's convolution comes after the branch).
 *
 *   conv2d -> cast to bfloat16 (AMP, each reader of the output)
 *       the convolution writes bfloat16 itself (attribute out_dtype: oneDNN's bf16 destination,
 *       bias, residual and act in float32, rounded once to nearest even as the cast rounds: the
 *       same bits) and the casts go, their readers reading the conv's output.  It is the
 *       convolution's own forward output type, so it lives here with the other rewrites that
 *       only a forward program allows (an op with out_dtype has no gradient) rather than in AMP's
 *       decoration, which also serves training; it runs last, on the fused convolutions.  Only
 *       a conv2d computing in bfloat16 (Input or Filter bf16) whose output is written by it
 *       alone and read by such casts and, by default, later convolutions' ResidualData (the
 *       block ends and projection shortcuts of ResNet: the residual is then rounded to bf16
 *       before the sum, as PyTorch's autocast keeps it; within bf16's tolerance, not the same
 *       bits).  A fetch of that output returns its bfloat16 values (what the cast's output
 *       held).  FLEET_INFER_CONV_BF16: 0 keeps the casts, 1 only convolutions without
 *       ResidualData whose output only casts read (the casts' very bits), 2 (default) all.
 *
 * Each pattern needs the intermediate variable to be non-persistable and read by the next op
 * only; ops with a condition, backward and optimizer ops are left alone.  The intermediate
 * variables disappear from the program (a fetch of one is an error naming it); turn the pass
 * off with FLEET_INFER_FUSE=0 to fetch them.
 *
 * How to add a fusion: a function over the forward ops that finds its pattern with
 * only_reader and rewrites the first op (see fuse_relu), called from fl__infer_fuse.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "../tensor/half.h"
#include "ops_conv.h"

/* ---- conv_bn_fold ------------------------------------------------------------------------ */

/* Inputs Filter [M, ...] (float32 or bfloat16), ConvBias [M] (optional), Scale, Bias, Mean,
 * Variance [M] (batch_norm's); outputs FilterOut (Filter's shape, type out_dtype: float32 or
 * bfloat16, default Filter's) and BiasOut [M]; attribute epsilon. */
enum { F_W, F_CB, F_SCALE, F_BIAS, F_MEAN, F_VAR };

static int infer_conv_bn_fold(fl_op *op)
{
    for (int s = 0; s < 6; s++)
        if (op->in[s].n > 1 || (s != F_CB && op->in[s].n != 1))
            return fl__op_error(op, "needs one Filter, Scale, Bias, Mean and Variance and at most one ConvBias");
    if (op->out[0].n != 1 || op->out[1].n != 1) return fl__op_error(op, "needs one FilterOut and one BiasOut");
    fl_var *w = op->in[F_W].vars[0];
    if (w->dtype != FL_BFLOAT16) FL_CHECK(fl__op_need_f32(op, w));
    if (w->ndim < 1 || w->shape[0] < 1) return fl__op_error(op, "filter '%s' needs a known dimension 0", w->name);
    for (int s = F_CB; s <= F_VAR; s++) {
        if (!op->in[s].n) continue;
        fl_var *v = op->in[s].vars[0];
        FL_CHECK(fl__op_need_f32(op, v));
        if (fl__dims_prod(v->shape, 0, v->ndim) != w->shape[0])
            return fl__op_error(op, "%s '%s' must have %lld elements (one per filter of '%s')", op->def->in_names[s],
                                v->name, (long long)w->shape[0], w->name);
    }
    fl_dtype to = (fl_dtype)fl__attr_i(op, "out_dtype", w->dtype);
    if (to != FL_FLOAT32 && to != FL_BFLOAT16)
        return fl__op_error(op, "out_dtype %s is not supported (float32 or bfloat16; filter '%s')", fl_dtype_name(to),
                            w->name);
    fl__var_set_shape(op->out[0].vars[0], to, w->ndim, w->shape);
    fl__var_set_shape(op->out[1].vars[0], FL_FLOAT32, 1, w->shape);
    return FL_OK;
}

/* The last fold: the tensors it read and wrote (inputs in slot order, ConvBias NULL when
 * absent, then FilterOut and BiasOut) and their write versions then. */
enum { FOLD_T = 8 };
typedef struct {
    int valid;
    const fl_tensor *t[FOLD_T];
    uint64_t ver[FOLD_T];
} fold_state;

static atomic_uint_fast64_t n_hits;
uint64_t fl__conv_bn_fold_hits(void) { return atomic_load(&n_hits); }

static void fold_tensors(fl_kctx *c, const fl_tensor *t[FOLD_T])
{
    for (int s = 0; s < 6; s++) t[s] = FL_IN(c, s);
    t[6] = FL_OUT(c, 0), t[7] = FL_OUT(c, 1);
}

/* 1 when the last fold read these very inputs at their current versions and its outputs
 * are unwritten since (no other writer, no buffer released by eager deletion): they still
 * hold the fold of the current inputs. */
static int fold_current(const fold_state *f, const fl_tensor *const t[FOLD_T])
{
    if (!f || !f->valid) return 0;
    for (int k = 0; k < FOLD_T; k++)
        if (t[k] != f->t[k] || (t[k] && fl__tensor_version(t[k]) != f->ver[k])) return 0;
    return 1;
}

static int fold_compute(fl_kctx *c);

static int run_conv_bn_fold(fl_kctx *c)
{
    const fl_tensor *t[FOLD_T];
    fold_tensors(c, t);
    fold_state *f = *c->state;
    if (fold_current(f, t)) {
        atomic_fetch_add(&n_hits, 1);
        return FL_OK;
    }
    if (!f && !(f = *c->state = calloc(1, sizeof *f)))
        return fl__err(FL_ENOMEM, "conv_bn_fold: out of memory (filter '%s')", fl__kctx_var_name(c, F_W, 0));
    /* the inputs' versions before reading them: a write during the fold moves them on */
    f->valid = 0;
    for (int k = 0; k < 6; k++) f->t[k] = t[k], f->ver[k] = t[k] ? fl__tensor_version(t[k]) : 0;
    FL_CHECK(fold_compute(c));
    for (int k = 6; k < FOLD_T; k++) { /* FL_OPDEF_OWN_OUTPUTS: the executor does not bump them */
        fl__tensor_bump(FL_OUT(c, k - 6));
        f->t[k] = t[k], f->ver[k] = fl__tensor_version(t[k]);
    }
    for (int k = 0; k < 6; k++) /* an input the fold converted (a layout) has moved on: next run folds again */
        if (t[k] && fl__tensor_version(t[k]) != f->ver[k]) return FL_OK;
    f->valid = 1;
    return FL_OK;
}

static int fold_compute(fl_kctx *c)
{
    fl_tensor *w = FL_IN(c, F_W), *cb = FL_IN(c, F_CB), *wo = FL_OUT(c, 0), *bo = FL_OUT(c, 1);
    if (w->is_rows || (w->dtype != FL_FLOAT32 && w->dtype != FL_BFLOAT16) || w->ndim < 1)
        return fl__err(FL_EINVAL, "conv_bn_fold: filter '%s' must be a dense float32 or bfloat16 tensor",
                       fl__kctx_var_name(c, F_W, 0));
    const int64_t M = w->shape[0], K = M ? w->numel / M : 0;
    for (int s = F_CB; s <= F_VAR; s++) {
        if (s == F_CB && !cb) continue;
        FL_CHECK(fl__kctx_dense_f32(c, s));
        if (FL_IN(c, s)->numel != M)
            return fl__err(FL_EINVAL, "conv_bn_fold: %s '%s' has %lld elements, filter '%s' %lld filters",
                           c->op->def->in_names[s], fl__kctx_var_name(c, s, 0), (long long)FL_IN(c, s)->numel,
                           fl__kctx_var_name(c, F_W, 0), (long long)M);
    }
    const fl_dtype to = (fl_dtype)fl__attr_i(c->op, "out_dtype", w->dtype);
    if (to != FL_FLOAT32 && to != FL_BFLOAT16)
        return fl__err(FL_EINVAL, "conv_bn_fold: out_dtype %s is not supported", fl_dtype_name(to));
    FL_CHECK(fl__tensor_reshape_raw(wo, to, w->ndim, w->shape));
    FL_CHECK(fl__tensor_reshape_raw(bo, FL_FLOAT32, 1, &M));
    const float *scale = FL_IN(c, F_SCALE)->data, *beta = FL_IN(c, F_BIAS)->data;
    const float *mean = FL_IN(c, F_MEAN)->data, *var = FL_IN(c, F_VAR)->data;
    const float *b0 = cb ? (const float *)cb->data : NULL;
    const double eps = fl__attr_f(c->op, "epsilon", 1e-5);
    float *bd = bo->data;
    for (int64_t m = 0; m < M; m++) {
        /* batch_norm's own arithmetic (ops_bn.c): y = x * a + (bias - mean * a) */
        const float a = scale[m] * (float)(1.0 / sqrt((double)var[m] + eps));
        bd[m] = beta[m] - mean[m] * a + (b0 ? b0[m] * a : 0.0f);
        const float *restrict sf = (const float *)w->data + m * K;
        const uint16_t *restrict sh = (const uint16_t *)w->data + m * K;
        float *restrict df = (float *)wo->data + m * K;
        uint16_t *restrict dh = (uint16_t *)wo->data + m * K;
        if (w->dtype == FL_FLOAT32 && to == FL_FLOAT32)
            for (int64_t i = 0; i < K; i++) df[i] = sf[i] * a;
        else if (w->dtype == FL_FLOAT32)
            for (int64_t i = 0; i < K; i++) dh[i] = fl__f32_to_bf16(sf[i] * a);
        else if (to == FL_FLOAT32)
            for (int64_t i = 0; i < K; i++) df[i] = fl__bf16_to_f32(sh[i]) * a;
        else
            for (int64_t i = 0; i < K; i++) dh[i] = fl__f32_to_bf16(fl__bf16_to_f32(sh[i]) * a);
    }
    return FL_OK;
}

const fl_op_def fl__def_conv_bn_fold = {"conv_bn_fold",
                                        {"Filter", "ConvBias", "Scale", "Bias", "Mean", "Variance"},
                                        {"FilterOut", "BiasOut"},
                                        infer_conv_bn_fold,
                                        run_conv_bn_fold,
                                        NULL,
                                        NULL,
                                        FL_OPDEF_READS_INPUTS | FL_OPDEF_OWN_OUTPUTS};

/* ---- the pass ---------------------------------------------------------------------------- */

static int reads(const fl_op *op, const fl_var *v)
{
    if (op->cond == v) return 1;
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        for (int k = 0; k < op->in[s].n; k++)
            if (op->in[s].vars[k] == v) return 1;
    return 0;
}

static int writes(const fl_op *op, const fl_var *v)
{
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        for (int k = 0; k < op->out[s].n; k++)
            if (op->out[s].vars[k] == v) return 1;
    return 0;
}

/* Index of the only op reading v, or -1 when none or several read it. */
static int only_reader(const fl_prog *p, const fl_var *v)
{
    int who = -1;
    for (int i = 0; i < p->nops; i++) {
        if (!reads(p->ops[i], v)) continue;
        if (who >= 0) return -1;
        who = i;
    }
    return who;
}

/* 1 when no op in (lo, hi) reads or writes v (writes only, with write_only). */
static int untouched(const fl_prog *p, int lo, int hi, const fl_var *v, int write_only)
{
    for (int k = lo + 1; k < hi; k++)
        if (writes(p->ops[k], v) || (!write_only && reads(p->ops[k], v))) return 0;
    return 1;
}

/* Index of the last op before `before` writing v (-1: none). */
static int writer_before(const fl_prog *p, const fl_var *v, int before)
{
    for (int k = before - 1; k >= 0; k--)
        if (writes(p->ops[k], v)) return k;
    return -1;
}

static int plain_fwd(const fl_op *op) { return op->role == FL_ROLE_FORWARD && !op->cond; }

/* A conv2d whose output only op j reads, j after it, with no fused act (and no residual
 * unless allow_res). */
static int conv_feeding(const fl_prog *p, int i, int j, int allow_res, const fl_var **out)
{
    const fl_op *cv = p->ops[i];
    if (strcmp(cv->def->type, "conv2d") || !plain_fwd(cv) || (cv->in[3].n && !allow_res)) return 0;
    if (fl__conv_act_code(fl__attr_s(cv, "act", "")) != ACT_NONE) return 0;
    const fl_var *y = cv->out[0].vars[0];
    if (y->persistable || y->is_data || only_reader(p, y) != j || j <= i) return 0;
    *out = y;
    return 1;
}

/* Slot s holds v alone. */
static int slot_set(fl_prog *p, fl_slot *s, fl_var *v)
{
    fl_var **vs = s->n == 1 ? s->vars : realloc(s->vars, sizeof *vs);
    if (!vs) return fl__prog_error(p, FL_ENOMEM, "out of memory rewriting the program");
    vs[0] = v;
    s->vars = vs;
    s->n = 1;
    return FL_OK;
}

/* Removes v when no op refers to it any more. */
static int drop_if_unused(fl_prog *p, fl_var *v)
{
    if (!v || v->persistable || v->is_data) return FL_OK;
    for (int i = 0; i < p->nops; i++)
        if (reads(p->ops[i], v) || writes(p->ops[i], v)) return FL_OK;
    return fl__prog_remove_var(p, v);
}

/* conv2d -> batch_norm at op j (global statistics): returns 1 when folded. */
static int fold_bn(fl_prog *p, int j)
{
    fl_op *bn = p->ops[j];
    int fused = !strcmp(bn->def->type, "fused_bn_add_activation"); /* relu(batch_norm(X) + Z) */
    if ((!fused && strcmp(bn->def->type, "batch_norm")) || !plain_fwd(bn)) return 0;
    if (!fl__attr_i(bn, "is_test", 0) && !fl__attr_i(bn, "use_global_stats", 0)) return 0;
    if (strcmp(fl__attr_s(bn, "data_layout", "NCHW"), "NCHW") != 0) return 0;
    for (int s = 0; s < 5; s++)
        if (bn->in[s].n != 1) return 0;
    for (int s = 1; s < 5; s++) { /* MeanOut / VarianceOut: Mean / Variance or unread; the saved ones unread */
        if (bn->in[s].vars[0]->dtype != FL_FLOAT32) return 0;
        if (!bn->out[s].n || (s < 3 && bn->out[s].vars[0] == bn->in[s + 2].vars[0])) continue;
        for (int k = 0; k < p->nops; k++)
            if (reads(p->ops[k], bn->out[s].vars[0])) return 0;
    }
    fl_var *x = bn->in[0].vars[0], *y = bn->out[0].vars[0];
    int i = writer_before(p, x, j);
    const fl_var *cy;
    if (i < 0 || !conv_feeding(p, i, j, 0, &cy) || cy != x || y->persistable) return 0;
    /* the fused block end's Z becomes the convolution's residual: final before the conv runs */
    fl_var *z = fused ? bn->in[5].vars[0] : NULL;
    if (fused && (bn->in[5].n != 1 || z == x || z->persistable || z->dtype != FL_FLOAT32 || x->dtype != FL_FLOAT32 ||
                  !fl__shapes_equal(z, x) || writer_before(p, z, i) != writer_before(p, z, j)))
        return 0;
    fl_op *cv = p->ops[i];
    fl_var *w = cv->in[1].vars[0], *cb = cv->in[2].n ? cv->in[2].vars[0] : NULL;
    if (w->ndim != 4 || x->ndim != 4 || (x->shape[1] > 0 && x->shape[1] != w->shape[0])) return 0;
    if ((w->dtype != FL_FLOAT32 && w->dtype != FL_BFLOAT16) || (cb && cb->dtype != FL_FLOAT32)) return 0;
    /* AMP's cast of a float32 filter read by this conv only: the fold reads the float32 one */
    fl_var *wsrc = w;
    int ci = writer_before(p, w, i);
    if (ci >= 0 && !w->persistable && !strcmp(p->ops[ci]->def->type, "cast") && plain_fwd(p->ops[ci]) &&
        p->ops[ci]->in[0].n == 1 && only_reader(p, w) == i) {
        fl_var *src = p->ops[ci]->in[0].vars[0];
        if (src->dtype == FL_FLOAT32 && fl__shapes_equal(src, w) && untouched(p, ci, i, src, 1)) wsrc = src;
    }
    if (wsrc == w) ci = -1;
    /* the statistics and the filter are not written between the two ops */
    for (int s = 1; s < 5; s++)
        if (!untouched(p, i, j, bn->in[s].vars[0], 1)) return 0;
    if (!untouched(p, i, j, y, 0)) return 0;
    char base[160];
    snprintf(base, sizeof base, "%s@bn_fold", w->name);
    fl_var *wf = fl__tmp_var(p, base, w->dtype, w->ndim, w->shape);
    snprintf(base, sizeof base, "%s@bn_fold_bias", w->name);
    fl_var *bf = wf ? fl__tmp_var(p, base, FL_FLOAT32, 1, w->shape) : NULL;
    if (!bf) return fl_prog_status(p);
    fl_var *bnv[4] = {bn->in[1].vars[0], bn->in[2].vars[0], bn->in[3].vars[0], bn->in[4].vars[0]};
    fl_io ins[6] = {FL_IO1("Filter", wsrc), {"ConvBias", &cb, cb ? 1 : 0}, FL_IO1("Scale", bnv[0]),
                    FL_IO1("Bias", bnv[1]), FL_IO1("Mean", bnv[2]),        FL_IO1("Variance", bnv[3])};
    fl_io outs[2] = {FL_IO1("FilterOut", wf), FL_IO1("BiasOut", bf)};
    fl_op *fo = fl__op_new(p, "conv_bn_fold", ins, 6, outs, 2);
    if (!fo || fl__attr_set_f(fo, "epsilon", fl__attr_f(bn, "epsilon", 1e-5)) ||
        fl__attr_set_i(fo, "out_dtype", w->dtype) || fl__op_finish(fo))
        return fl_prog_status(p);
    FL_CHECK(fl__prog_move_last_op(p, i)); /* the conv2d is now i + 1, the batch_norm j + 1 */
    cv->in[1].vars[0] = wf;
    FL_CHECK(slot_set(p, &cv->in[2], bf));
    cv->out[0].vars[0] = y;
    if (fused || fl__attr_i(bn, "fuse_with_relu", 0)) FL_CHECK(fl__attr_set_s(cv, "act", "relu"));
    /* a normalisation writing bfloat16 (AMP training cloned for test, amp_bn.c): so does the conv */
    if (y->dtype == FL_BFLOAT16) FL_CHECK(fl__attr_set_i(cv, "out_dtype", FL_BFLOAT16));
    if (fused) {
        FL_CHECK(slot_set(p, &cv->in[3], z));
        FL_CHECK(fl__attr_set_i(cv, "fuse_residual_connection", 1));
    }
    fl_var *dead[3] = {x, bn->out[3].n ? bn->out[3].vars[0] : NULL, bn->out[4].n ? bn->out[4].vars[0] : NULL};
    fl__prog_remove_op(p, j + 1);
    if (ci >= 0) fl__prog_remove_op(p, ci); /* the cast, before the conv: op j + 1 is now op j */
    for (int k = 0; k < 3; k++) FL_CHECK(drop_if_unused(p, dead[k]));
    if (ci >= 0) FL_CHECK(drop_if_unused(p, w));
    p->version++;
    return 1;
}

/* conv2d (act none) -> relu at op j: returns 1 when fused. */
static int fuse_relu(fl_prog *p, int j)
{
    fl_op *a = p->ops[j];
    if (strcmp(a->def->type, "relu") || !plain_fwd(a) || a->in[0].n != 1 || a->out[0].n != 1) return 0;
    fl_var *x = a->in[0].vars[0], *y = a->out[0].vars[0];
    int i = writer_before(p, x, j);
    const fl_var *cy;
    if (i < 0 || !conv_feeding(p, i, j, 1, &cy) || y->persistable || !untouched(p, i, j, y, 0)) return 0;
    fl_op *cv = p->ops[i];
    FL_CHECK(fl__attr_set_s(cv, "act", "relu"));
    cv->out[0].vars[0] = y;
    fl__prog_remove_op(p, j);
    FL_CHECK(drop_if_unused(p, x));
    return 1;
}

/* conv2d (act none) -> elementwise_add at op j [-> relu]: returns 1 when fused. */
static int fuse_residual(fl_prog *p, int j)
{
    fl_op *add = p->ops[j];
    if (strcmp(add->def->type, "elementwise_add") || !plain_fwd(add) || add->in[0].n != 1 || add->in[1].n != 1 ||
        add->out[0].n != 1)
        return 0;
    fl_var *o = add->out[0].vars[0], *ops[2] = {add->in[0].vars[0], add->in[1].vars[0]};
    if (o->persistable || !fl__shapes_equal(ops[0], ops[1]) || ops[0]->ndim != 4 || ops[0]->dtype != FL_FLOAT32 ||
        ops[1]->dtype != FL_FLOAT32)
        return 0;
    int best = -1, bi = -1;
    for (int w = 0; w < 2; w++) {
        fl_var *z = ops[!w];
        int i = writer_before(p, ops[w], j);
        const fl_var *cy;
        if (i < 0 || i <= bi || !conv_feeding(p, i, j, 0, &cy) || z->persistable || z == ops[w]) continue;
        if (writer_before(p, z, i) != writer_before(p, z, j)) continue; /* z must be final before the conv runs */
        if (!untouched(p, i, j, o, 0)) continue;
        best = w, bi = i;
    }
    if (best < 0) return 0;
    fl_op *cv = p->ops[bi];
    fl_var *mid = ops[best], *z = ops[!best];
    FL_CHECK(slot_set(p, &cv->in[3], z));
    FL_CHECK(fl__attr_set_i(cv, "fuse_residual_connection", 1));
    cv->out[0].vars[0] = o;
    fl__prog_remove_op(p, j);
    FL_CHECK(drop_if_unused(p, mid));
    /* a relu reading the sum only becomes the act */
    int r = only_reader(p, o);
    if (r > bi && fuse_relu(p, r) < 0) return fl_prog_status(p);
    return 1;
}

/* A forward cast of v to bfloat16 whose output is written by it alone. */
static int bf16_cast_of(const fl_prog *p, const fl_op *op, const fl_var *v)
{
    if (strcmp(op->def->type, "cast") || !plain_fwd(op) || op->in[0].n != 1 || op->in[0].vars[0] != v ||
        op->out[0].n != 1 || fl__attr_i(op, "out_dtype", FL_FLOAT32) != FL_BFLOAT16)
        return 0;
    const fl_var *cv = op->out[0].vars[0];
    if (cv->dtype != FL_BFLOAT16 || cv->persistable || cv->is_data || !fl__shapes_equal(cv, v)) return 0;
    for (int k = 0; k < p->nops; k++)
        if (p->ops[k]->cond == cv || (p->ops[k] != op && writes(p->ops[k], cv))) return 0;
    return 1;
}

/* conv2d at op i computing in bfloat16 whose float32 output only casts to bfloat16 read
 * (with res, also a later conv2d's ResidualData, and the conv may have one itself): returns 1
 * when it writes bfloat16 and the casts are gone. */
static int conv_bf16_out(fl_prog *p, int i, int res)
{
    fl_op *cv = p->ops[i];
    if (strcmp(cv->def->type, "conv2d") || !plain_fwd(cv) || (cv->in[3].n && !res) || cv->out[0].n != 1) return 0;
    if (fl__attr_i(cv, "out_dtype", FL_FLOAT32) != FL_FLOAT32) return 0;
    if (cv->in[0].vars[0]->dtype != FL_BFLOAT16 && cv->in[1].vars[0]->dtype != FL_BFLOAT16) return 0;
    fl_var *y = cv->out[0].vars[0];
    if (y->persistable || y->is_data || y->dtype != FL_FLOAT32) return 0;
    int casts = 0, readers = 0; /* the casts; the ResidualData readers */
    for (int k = 0; k < p->nops; k++) {
        const fl_op *o = p->ops[k];
        if (o->cond == y || (k != i && writes(o, y))) return 0;
        if (k == i || !reads(o, y)) continue;
        if (k < i) return 0;
        if (bf16_cast_of(p, o, y)) {
            casts++;
            continue;
        }
        if (!res || strcmp(o->def->type, "conv2d") || !plain_fwd(o) || o->in[3].n != 1 || o->in[3].vars[0] != y ||
            o->in[0].vars[0] == y || o->in[1].vars[0] == y || (o->in[2].n && o->in[2].vars[0] == y))
            return 0;
        readers++;
    }
    if (!casts && !readers) return 0;
    FL_CHECK(fl__attr_set_i(cv, "out_dtype", FL_BFLOAT16));
    y->dtype = FL_BFLOAT16;
    for (int k = p->nops - 1; k > i; k--) {
        fl_op *o = p->ops[k];
        if (!reads(o, y) || strcmp(o->def->type, "cast")) continue;
        fl_var *c = o->out[0].vars[0];
        for (int q = 0; q < p->nops; q++) /* every reader of the copy reads y */
            for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
                for (int m = 0; m < p->ops[q]->in[s].n; m++)
                    if (p->ops[q]->in[s].vars[m] == c) p->ops[q]->in[s].vars[m] = y;
        fl__prog_remove_op(p, k);
        FL_CHECK(drop_if_unused(p, c));
    }
    p->version++;
    return 1;
}

/* The two modes of the pass (FLEET_INFER_CONV_BF16 1 and 2), for fl__infer_fuse's table. */
static int conv_bf16_plain(fl_prog *p, int i) { return conv_bf16_out(p, i, 0); }
static int conv_bf16_res(fl_prog *p, int i) { return conv_bf16_out(p, i, 1); }

int fl__infer_fuse(fl_prog *p)
{
    int64_t on = 1;
    if (fl__env_int("FLEET_INFER_FUSE", 1, 0, 1, &on) != FL_OK || !on || !p || p->status != FL_OK) return 0;
    /* FLEET_INFER_CONV_BF16: 0 off, 1 the convolutions without ResidualData, 2 (default) also
     * those with it and those whose output is a ResidualData */
    int64_t bf16_out = 2;
    FL_CHECK(fl__env_int("FLEET_INFER_CONV_BF16", 2, 0, 2, &bf16_out));
    int n[4] = {0, 0, 0, 0};
    int (*const pass[4])(fl_prog *, int) = {fold_bn, fuse_relu, fuse_residual,
                                            bf16_out == 2 ? conv_bf16_res : conv_bf16_plain};
    for (int k = 0; k < (bf16_out ? 4 : 3); k++)
        for (int j = 0; j < p->nops; j++) {
            int r = pass[k](p, j);
            if (r < 0) return r;
            if (r) n[k]++, j--; /* ops at or before j were removed: look at op j again (a no-op if it was seen) */
        }
    if (n[0] + n[1] + n[2] + n[3])
        FL_DEBUG(FL_SUB_GRAPH,
                 "inference pass: %d batch_norm folded, %d relu and %d residual sums fused, %d conv2d write bfloat16", n[0],
                 n[1], n[2], n[3]);
    return n[0] + n[1] + n[2] + n[3];
}
