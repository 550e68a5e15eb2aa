/*
 * fuse.c - program rewrites that merge operators so one kernel does the work of several.
 *
 * fl_fuse_fc_act: an fc without activation whose output feeds only a relu, tanh or
 * sigmoid op becomes one fc with that activation; its matrix product then applies the
 * activation in the same pass (oneDNN eltwise post-op, src/tensor/dnn.c) and the backward
 * program has one op less.  Programs built with fl_layer_fc(..., "relu") are already in
 * this form; the pass is for programs written as fc followed by a separate activation
 * (Paddle's own programs, programs read from text).
 *
 * fl__fuse_bn_add_act (Paddle's fuse_bn_add_act pass): batch_norm (no activation) whose
 * output is read only by an elementwise_add of two same-shaped float32 tensors, whose output
 * is read only by a relu, becomes one fused_bn_add_activation op (src/graph/ops_bn.c) with
 * the add's other input as Z: the block end of a residual network, one pass over the
 * activations each way instead of three (batch_norm, add, relu; relu_grad, add_grad,
 * batch_norm_grad).  append_backward runs it on every program, before the gradient ops are
 * made; FLEET_FUSE_BN_ADD_ACT=0 turns it off.  The two intermediate variables are removed,
 * so they cannot be fetched; recompute checkpoints and no_grad names are never fused away.
 *
 * How to add a fusion: a function that finds the pattern on forward ops, checks that the
 * intermediate variable has no other reader, rewrites the first op and removes the rest.
 */
#include <string.h>

#include "graph_internal.h"

/* Index of the only op reading v, or -1 when none or several read it (cond included). */
static int only_reader(const fl_prog *p, const fl_var *v)
{
    int who = -1;
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        int reads = op->cond == v;
        for (int s = 0; s < FL_OP_MAX_SLOTS && !reads; s++)
            for (int k = 0; k < op->in[s].n; k++)
                if (op->in[s].vars[k] == v) reads = 1;
        if (!reads) continue;
        if (who >= 0) return -1;
        who = i;
    }
    return who;
}

static int fusable_act(const char *type)
{
    return !strcmp(type, "relu") || !strcmp(type, "tanh") || !strcmp(type, "sigmoid");
}

int fl_fuse_fc_act(fl_prog *p)
{
    if (!p || p->magic != FL_PROG_MAGIC) return fl__err(FL_EINVAL, "fl_fuse_fc_act: program is NULL or invalid");
    if (p->status != FL_OK) return p->status;
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i]->role != FL_ROLE_FORWARD)
            return fl__prog_error(p, FL_EINVAL,
                                  "fl_fuse_fc_act: op %d (%s) is a backward or optimizer op: fuse before "
                                  "fl_opt_minimize / append_backward",
                                  i, p->ops[i]->def->type);
    int fused = 0;
    for (int i = 0; i < p->nops; i++) {
        fl_op *fc = p->ops[i];
        if (strcmp(fc->def->type, "fc") != 0 || fc->cond) continue;
        const char *act = fl__attr_s(fc, "act", "");
        if (*act && strcmp(act, "none") != 0 && strcmp(act, "linear") != 0) continue;
        fl_var *mid = fc->out[0].vars[0];
        if (mid->persistable) continue;
        int j = only_reader(p, mid);
        if (j <= i) continue;
        fl_op *a = p->ops[j];
        if (!fusable_act(a->def->type) || a->cond || a->in[0].n != 1 || a->in[0].vars[0] != mid) continue;
        fl_var *out = a->out[0].vars[0];
        /* fc now writes the activation's output; ops between fc and the activation never
         * read it (it is written by the activation only after them) unless written twice */
        int clash = 0;
        for (int k = i + 1; k < j && !clash; k++)
            for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
                for (int q = 0; q < p->ops[k]->in[s].n; q++) clash |= p->ops[k]->in[s].vars[q] == out;
        if (clash) continue;
        FL_CHECK(fl__attr_set_s(fc, "act", a->def->type));
        fc->out[0].vars[0] = out;
        out->lod_level = mid->lod_level;
        fl__prog_remove_op(p, j);
        FL_CHECK(fl__prog_remove_var(p, mid));
        fused++;
    }
    if (fused) FL_DEBUG(FL_SUB_GRAPH, "fl_fuse_fc_act: %d fc + activation pairs fused", fused);
    return fused;
}

/* ---- batch_norm + elementwise_add + relu ------------------------------------------------ */

static int op_reads(const fl_op *op, const fl_var *v)
{
    if (op->cond == v) return 1;
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        for (int k = 0; k < op->in[s].n; k++)
            if (op->in[s].vars[k] == v) return 1;
    return 0;
}

static int op_writes(const fl_op *op, const fl_var *v)
{
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        for (int k = 0; k < op->out[s].n; k++)
            if (op->out[s].vars[k] == v) return 1;
    return 0;
}

/* Index of the only op writing v, or -1 when none or several write it. */
static int only_writer(const fl_prog *p, const fl_var *v)
{
    int who = -1;
    for (int i = 0; i < p->nops; i++) {
        if (!op_writes(p->ops[i], v)) continue;
        if (who >= 0) return -1;
        who = i;
    }
    return who;
}

static int named_in(const fl_var *v, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (names[i] && !strcmp(names[i], v->name)) return 1;
    return 0;
}

/* A forward op of `type` without a condition, with one variable in its first input and output slots. */
static int plain_op(const fl_op *op, const char *type)
{
    return op->role == FL_ROLE_FORWARD && !op->cond && !strcmp(op->def->type, type) && op->in[0].n == 1 &&
           op->out[0].n == 1;
}

static int same_shape(const fl_var *a, const fl_var *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
}

/* v can vanish: a float32 temporary written by op w only, read by op r only, not kept. */
static int intermediate(const fl_prog *p, const fl_var *v, int w, int r, const char *const *keep, int nkeep,
                        const char *const *keep2, int nkeep2)
{
    return !v->persistable && !v->is_data && v->dtype == FL_FLOAT32 && only_writer(p, v) == w && only_reader(p, v) == r &&
           !named_in(v, keep, nkeep) && !named_in(v, keep2, nkeep2);
}

/* The batch_norm op k may run at position j instead (after the ops between): none of those
 * reads its outputs or writes its inputs or outputs. */
static int movable(const fl_prog *p, int k, int j)
{
    const fl_op *bn = p->ops[k];
    for (int q = k + 1; q < j; q++)
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
            for (int t = 0; t < bn->out[s].n; t++)
                if (op_reads(p->ops[q], bn->out[s].vars[t]) || op_writes(p->ops[q], bn->out[s].vars[t])) return 0;
            for (int t = 0; t < bn->in[s].n; t++)
                if (op_writes(p->ops[q], bn->in[s].vars[t])) return 0;
        }
    return 1;
}

/* Replaces batch_norm k, elementwise_add j and relu i (k < j < i) by one
 * fused_bn_add_activation at j's place reading z; status. */
static int fuse_one(fl_prog *p, int k, int j, int i, fl_var *z)
{
    fl_op *bn = p->ops[k], *add = p->ops[j], *relu = p->ops[i];
    fl_var *t = bn->out[0].vars[0], *u = add->out[0].vars[0], *y = relu->out[0].vars[0];
    fl_var *bo[5] = {y};
    static const char *const in_names[6] = {"X", "Scale", "Bias", "Mean", "Variance", "Z"};
    static const char *const out_names[5] = {"Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"};
    fl_var *iv[6] = {z};
    fl_io ins[6], outs[5];
    for (int s = 0; s < 5; s++) {
        iv[s] = bn->in[s].vars[0];
        if (s) bo[s] = bn->out[s].vars[0];
    }
    iv[5] = z;
    for (int s = 0; s < 6; s++) ins[s] = (fl_io){in_names[s], &iv[s], 1};
    for (int s = 0; s < 5; s++) outs[s] = (fl_io){out_names[s], &bo[s], 1};
    fl_op *f = fl__op_new(p, "fused_bn_add_activation", ins, 6, outs, 5);
    if (!f) return fl_prog_status(p);
    f->role = FL_ROLE_FORWARD;
    for (int a = 0; a < bn->nattr; a++) {
        const fl_attr *at = &bn->attr[a];
        int st = at->type == FL_ATTR_INT     ? fl__attr_set_i(f, at->name, at->i)
                 : at->type == FL_ATTR_FLOAT ? fl__attr_set_f(f, at->name, at->f)
                 : at->type == FL_ATTR_STR   ? fl__attr_set_s(f, at->name, at->s)
                 : at->type == FL_ATTR_INTS  ? fl__attr_set_ints(f, at->name, at->ints, at->n)
                                             : fl__attr_set_floats(f, at->name, at->floats, at->n);
        FL_CHECK(st);
    }
    FL_CHECK(fl__attr_set_s(f, "act_type", "relu"));
    FL_CHECK(fl__op_finish(f));
    FL_CHECK(fl__prog_move_last_op(p, j)); /* add and relu now at j + 1 and i + 1 */
    fl__prog_remove_op(p, i + 1);
    fl__prog_remove_op(p, j + 1);
    fl__prog_remove_op(p, k);
    FL_CHECK(fl__prog_remove_var(p, t));
    return fl__prog_remove_var(p, u);
}

int fl__fuse_bn_add_act(fl_prog *p, const char *const *keep, int nkeep, const char *const *keep2, int nkeep2)
{
    int64_t on = 1;
    FL_CHECK(fl__env_int("FLEET_FUSE_BN_ADD_ACT", 1, 0, 1, &on));
    if (!on) return 0;
    int fused = 0;
    for (int i = 0; i < p->nops; i++) {
        fl_op *relu = p->ops[i];
        if (!plain_op(relu, "relu") || relu->out[0].vars[0]->dtype != FL_FLOAT32) continue;
        fl_var *u = relu->in[0].vars[0], *y = relu->out[0].vars[0];
        int j = only_writer(p, u);
        if (j < 0 || j >= i || !plain_op(p->ops[j], "elementwise_add") || p->ops[j]->in[1].n != 1 ||
            !intermediate(p, u, j, i, keep, nkeep, keep2, nkeep2))
            continue;
        fl_op *add = p->ops[j];
        fl_var *ab[2] = {add->in[0].vars[0], add->in[1].vars[0]};
        if (ab[0] == ab[1] || !same_shape(ab[0], ab[1]) || !same_shape(ab[0], u) || ab[0]->dtype != FL_FLOAT32 ||
            ab[1]->dtype != FL_FLOAT32 || ab[0]->ndim < 2 || ab[0]->ndim > 5)
            continue;
        int k = -1, which = 0;
        for (int w = 0; w < 2; w++) { /* the batch_norm nearer the add: it moves least */
            int q = only_writer(p, ab[w]);
            if (q < 0 || q >= j || q <= k || !plain_op(p->ops[q], "batch_norm") ||
                fl__attr_i(p->ops[q], "fuse_with_relu", 0) || p->ops[q]->out[0].vars[0] != ab[w] ||
                !intermediate(p, ab[w], q, j, keep, nkeep, keep2, nkeep2) || !movable(p, q, j))
                continue;
            k = q, which = w;
        }
        fl_var *z = ab[1 - which];
        /* in place (Y is X or Z) or Z = X (two gradients from one op): left as they are */
        if (k < 0 || z == y || p->ops[k]->in[0].vars[0] == y || p->ops[k]->in[0].vars[0] == z) continue;
        int clash = 0; /* the fused op writes y at j: ops between j and i must not touch it */
        for (int q = j + 1; q < i && !clash; q++) clash = op_reads(p->ops[q], y) || op_writes(p->ops[q], y);
        if (clash) continue;
        FL_CHECK(fuse_one(p, k, j, i, z));
        fused++;
        i = k - 1; /* the ops from k on shifted: look again from there */
    }
    if (fused) FL_DEBUG(FL_SUB_GRAPH, "fl__fuse_bn_add_act: %d batch_norm + elementwise_add + relu fused", fused);
    return fused;
}
