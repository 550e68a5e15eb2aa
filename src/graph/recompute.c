/*
 * recompute.c - append_backward with checkpoints (Paddle's RecomputeOptimizer and
 * backward.py's _append_backward_ops_with_checkpoints_).
 *
 * The checkpoints cut the forward ops into segments: [0, producer(cp1)], (producer(cp1),
 * producer(cp2)], ...; the ops after the last checkpoint form no segment.  When backward
 * reaches the first gradient op of a segment, the segment's forward ops are appended again
 * (role backward), each output renamed "<var>@RECOMPUTE", and the gradient ops of that
 * segment read the copies instead of the forward activations.  The forward activations of a
 * segment are then dead after the forward pass, and the executor's eager deletion frees
 * them (src/exec/executor.c).  Kept (never recomputed): checkpoints, parameters,
 * persistable and data variables, and the outputs of ops that update persistable state
 * (batch_norm's moving statistics, auc) - re-running those would update the state twice.
 *
 * Random ops: dropout's copy draws the same mask (its rng_name attribute names the
 * original Out variable, the kernel seeds from that name and the executor's step); other
 * random ops in a segment are refused with an error naming them.
 */
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

struct fl_recompute {
    fl_prog *p;
    int nfwd_vars, nfwd_ops;
    int *op_seg;   /* per forward op: its segment, -1 none (tail or not recomputed) */
    int *var_seg;  /* per forward var: segment of the op that writes it, -1 kept */
    fl_var **copy; /* per forward var: its recomputed copy (current segment), or NULL */
    int cur;       /* segment whose copies exist, -1 none yet */
};

/* Op types that draw random numbers: the attribute that makes a copy draw the same
 * numbers, or NULL when the op cannot be recomputed. */
static const struct {
    const char *type;
    const char *same_rng_attr;
} random_ops[] = {
    {"dropout", "rng_name"},
    {"uniform_random", NULL},
    {"gaussian_random", NULL},
    {"truncated_gaussian_random", NULL},
};

static int random_row(const fl_op *op)
{
    for (size_t i = 0; i < sizeof random_ops / sizeof random_ops[0]; i++)
        if (!strcmp(op->def->type, random_ops[i].type)) return (int)i;
    return -1;
}

static int writes_persistable(const fl_op *op)
{
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        for (int k = 0; k < op->out[s].n; k++)
            if (op->out[s].vars[k]->persistable) return 1;
    return 0;
}

void fl__recompute_free(fl_recompute *r)
{
    if (!r) return;
    free(r->op_seg);
    free(r->var_seg);
    free(r->copy);
    free(r);
}

static int producer(const fl_prog *p, int nfwd_ops, const fl_var *v)
{
    for (int i = nfwd_ops - 1; i >= 0; i--) {
        const fl_op *op = p->ops[i];
        if (op->role != FL_ROLE_FORWARD) continue;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < op->out[s].n; k++)
                if (op->out[s].vars[k] == v) return i;
    }
    return -1;
}

int fl__recompute_plan(fl_prog *p, const char *const *cps, int ncps, fl_recompute **out)
{
    *out = NULL;
    if (ncps <= 0) return FL_OK;
    if (!cps) return fl__prog_error(p, FL_EINVAL, "recompute: checkpoint list is NULL");
    fl_recompute *r = calloc(1, sizeof *r);
    int *ends = calloc((size_t)ncps, sizeof *ends);
    int st = FL_OK, nends = 0;
    if (!r || !ends) goto oom;
    r->p = p;
    r->nfwd_vars = p->nvars;
    r->nfwd_ops = p->nops;
    r->cur = -1;
    r->op_seg = malloc(((size_t)p->nops + 1) * sizeof *r->op_seg);
    r->var_seg = malloc(((size_t)p->nvars + 1) * sizeof *r->var_seg);
    r->copy = calloc((size_t)p->nvars + 1, sizeof *r->copy);
    if (!r->op_seg || !r->var_seg || !r->copy) goto oom;
    char *kept = calloc((size_t)p->nvars + 1, 1);
    if (!kept) goto oom;
    for (int c = 0; c < ncps; c++) {
        fl_var *v = cps[c] && *cps[c] ? fl_prog_var(p, cps[c]) : NULL;
        if (!v) {
            st = fl__prog_error(p, FL_EINVAL, "recompute: checkpoint '%s' is not a variable of the program",
                                cps[c] ? cps[c] : "(null)");
            free(kept);
            goto fail;
        }
        kept[v->idx] = 1;
        int at = producer(p, p->nops, v); /* a parameter or data variable: kept, no boundary */
        if (at < 0) continue;
        int pos = nends;
        while (pos > 0 && ends[pos - 1] > at) pos--;
        if (pos > 0 && ends[pos - 1] == at) continue;
        memmove(ends + pos + 1, ends + pos, (size_t)(nends - pos) * sizeof *ends);
        ends[pos] = at;
        nends++;
    }
    /* segment k: ops (ends[k-1], ends[k]] (k = 0 starts at op 0) */
    for (int i = 0, k = 0; i < p->nops; i++) {
        while (k < nends && i > ends[k]) k++;
        const fl_op *op = p->ops[i];
        r->op_seg[i] = k < nends && op->role == FL_ROLE_FORWARD ? k : -1;
        if (r->op_seg[i] < 0) continue;
        int rr = random_row(op);
        if (writes_persistable(op)) r->op_seg[i] = -1;
        else if (rr >= 0 && !random_ops[rr].same_rng_attr) {
            const char *o0 = op->out[0].n ? op->out[0].vars[0]->name : "-";
            st = fl__prog_error(p, FL_EUNSUPPORTED,
                                "recompute: op %s (output '%s') draws random numbers and cannot be recomputed "
                                "identically; make its output a checkpoint or move the checkpoints",
                                op->def->type, o0);
            free(kept);
            goto fail;
        }
    }
    for (int v = 0; v < p->nvars; v++) r->var_seg[v] = -1;
    for (int i = 0; i < p->nops; i++) {
        if (r->op_seg[i] < 0) continue;
        const fl_op *op = p->ops[i];
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < op->out[s].n; k++) {
                const fl_var *v = op->out[s].vars[k];
                if (!kept[v->idx] && !v->persistable && !v->is_data) r->var_seg[v->idx] = r->op_seg[i];
            }
    }
    /* a variable written by a non-recomputed op too stays as the forward left it */
    for (int i = 0; i < p->nops; i++) {
        if (r->op_seg[i] >= 0) continue;
        const fl_op *op = p->ops[i];
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < op->out[s].n; k++) r->var_seg[op->out[s].vars[k]->idx] = -1;
    }
    free(kept);
    free(ends);
    *out = r;
    return FL_OK;
oom:
    st = fl__prog_error(p, FL_ENOMEM, "recompute: out of memory");
fail:
    free(ends);
    fl__recompute_free(r);
    return st;
}

static fl_var *copy_var(fl_recompute *r, fl_var *v)
{
    if (r->copy[v->idx]) return r->copy[v->idx];
    char name[512];
    snprintf(name, sizeof name, "%s@RECOMPUTE", v->name);
    fl_var *c = fl__var_create(r->p, name, v->dtype, v->ndim, v->shape);
    if (!c) return NULL;
    c->lod_level = v->lod_level;
    r->copy[v->idx] = c;
    return c;
}

static int copy_attrs(fl_op *dst, const fl_op *src)
{
    for (int i = 0; i < src->nattr; i++) {
        const fl_attr *a = &src->attr[i];
        int st = a->type == FL_ATTR_INT     ? fl__attr_set_i(dst, a->name, a->i)
                 : a->type == FL_ATTR_FLOAT ? fl__attr_set_f(dst, a->name, a->f)
                 : a->type == FL_ATTR_STR   ? fl__attr_set_s(dst, a->name, a->s)
                 : a->type == FL_ATTR_INTS  ? fl__attr_set_ints(dst, a->name, a->ints, a->n)
                                            : fl__attr_set_floats(dst, a->name, a->floats, a->n);
        FL_CHECK(st);
    }
    return FL_OK;
}

/* Appends the copy of forward op `op` (segment r->cur): inputs of this segment read their
 * copies, outputs are written to copies. */
static int append_copy(fl_recompute *r, const fl_op *op)
{
    fl_io ins[FL_OP_MAX_SLOTS], outs[FL_OP_MAX_SLOTS];
    fl_var *buf[2 * FL_OP_MAX_SLOTS][16];
    int ni = 0, no = 0, st = FL_OK;
    for (int s = 0; s < FL_OP_MAX_SLOTS && op->def->in_names[s]; s++) {
        if (!op->in[s].n) continue;
        if (op->in[s].n > 16)
            return fl__prog_error(r->p, FL_EUNSUPPORTED,
                                  "recompute: op %s has more than 16 inputs in "
                                  "slot %s",
                                  op->def->type, op->def->in_names[s]);
        for (int k = 0; k < op->in[s].n; k++) {
            fl_var *v = op->in[s].vars[k];
            buf[s][k] = v->idx < r->nfwd_vars && r->var_seg[v->idx] == r->cur && r->copy[v->idx] ? r->copy[v->idx] : v;
        }
        ins[ni++] = (fl_io){op->def->in_names[s], buf[s], op->in[s].n};
    }
    for (int s = 0; s < FL_OP_MAX_SLOTS && op->def->out_names[s]; s++) {
        if (!op->out[s].n) continue;
        if (op->out[s].n > 16)
            return fl__prog_error(r->p, FL_EUNSUPPORTED,
                                  "recompute: op %s has more than 16 outputs "
                                  "in slot %s",
                                  op->def->type, op->def->out_names[s]);
        for (int k = 0; k < op->out[s].n; k++) {
            fl_var *c = copy_var(r, op->out[s].vars[k]);
            if (!c) return fl_prog_status(r->p);
            buf[FL_OP_MAX_SLOTS + s][k] = c;
        }
        outs[no++] = (fl_io){op->def->out_names[s], buf[FL_OP_MAX_SLOTS + s], op->out[s].n};
    }
    fl_op *c = fl__op_new(r->p, op->def->type, ins, ni, outs, no);
    if (!c) return fl_prog_status(r->p);
    st = copy_attrs(c, op);
    int rr = random_row(op);
    if (st == FL_OK && rr >= 0 && !fl__attr_find(op, random_ops[rr].same_rng_attr)) {
        /* dropout seeds from the name of its first output (Out) */
        st = fl__attr_set_s(c, random_ops[rr].same_rng_attr, op->out[0].vars[0]->name);
    }
    c->cond = op->cond;
    if (st != FL_OK) return st;
    return fl__op_finish(c);
}

int fl__recompute_enter(fl_recompute *r, int op_index)
{
    if (!r || op_index >= r->nfwd_ops) return FL_OK;
    int seg = r->op_seg[op_index];
    if (seg < 0 || seg == r->cur) return FL_OK;
    r->cur = seg;
    for (int i = 0; i < r->nfwd_ops; i++) {
        if (r->op_seg[i] != seg) continue;
        const fl_op *op = r->p->ops[i];
        int any = 0; /* an op whose outputs are all kept is not run again */
        for (int s = 0; s < FL_OP_MAX_SLOTS && !any; s++)
            for (int k = 0; k < op->out[s].n; k++) any |= r->var_seg[op->out[s].vars[k]->idx] == seg;
        if (any) FL_CHECK(append_copy(r, op));
    }
    return FL_OK;
}

void fl__recompute_rewrite(fl_recompute *r, int first_op)
{
    if (!r || r->cur < 0) return;
    for (int i = first_op; i < r->p->nops; i++) {
        fl_op *op = r->p->ops[i];
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < op->in[s].n; k++) {
                fl_var *v = op->in[s].vars[k];
                if (v->idx < r->nfwd_vars && r->var_seg[v->idx] == r->cur && r->copy[v->idx])
                    op->in[s].vars[k] = r->copy[v->idx];
            }
    }
    r->p->version++;
}
