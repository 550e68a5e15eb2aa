/*
 * backward.c - append_backward: walks the forward ops in reverse and asks each op's
 * gradient maker for its gradient ops.  A variable used by several ops receives one
 * gradient variable per use (<v>@GRAD@RENAME@k) and a `sum` op adds them up just before
 * the gradient is read, as Paddle does.  Variables with stop_gradient, variables named in
 * the no-grad set, and outputs of ops without a gradient get no gradient.  With checkpoints
 * (recompute), each segment's forward ops are appended again before its gradient ops and
 * those read the copies (recompute.c).
 */
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

typedef struct {
    fl_var **v;
    int n, cap;
    fl_var *final;
} contrib;

struct fl_grad_ctx {
    fl_prog *p;
    int nfwd;    /* vars that existed before backward */
    char *needs; /* needs[idx]: forward var wants a gradient */
    contrib *c;
    int status;
};

static int add_sum(fl_grad_ctx *g, fl_var *v, contrib *c)
{
    char name[512];
    /* the first contribution was named v@GRAD; move it aside so the sum can take the name */
    snprintf(name, sizeof name, "%s@GRAD@RENAME@0", v->name);
    FL_CHECK(fl__var_rename(c->v[0], name));
    snprintf(name, sizeof name, "%s@GRAD", v->name);
    fl_var *out = fl__var_create(g->p, name, v->dtype, v->ndim, v->shape);
    if (!out) return fl_prog_status(g->p);
    int sparse = 1;
    for (int i = 0; i < c->n; i++) sparse &= c->v[i]->is_sparse_grad;
    out->is_sparse_grad = sparse;
    out->lod_level = v->lod_level;
    fl_io in = {"X", c->v, c->n};
    fl_io o = FL_IO1("Out", out);
    if (!fl__op_append(g->p, "sum", &in, 1, &o, 1)) return fl_prog_status(g->p);
    c->final = out;
    return FL_OK;
}

fl_var *fl__grad_of(fl_grad_ctx *g, fl_var *v)
{
    if (!v || v->idx >= g->nfwd) return NULL;
    contrib *c = &g->c[v->idx];
    if (c->final) return c->final;
    if (c->n == 0) return NULL;
    if (c->n == 1) {
        c->final = c->v[0];
        return c->final;
    }
    if (add_sum(g, v, c) != FL_OK) {
        g->status = fl_prog_status(g->p);
        return NULL;
    }
    return c->final;
}

fl_var *fl__grad_for(fl_grad_ctx *g, fl_var *v)
{
    if (!v || v->idx >= g->nfwd || !g->needs[v->idx]) return NULL;
    contrib *c = &g->c[v->idx];
    if (c->final) {
        fl__prog_error(g->p, FL_EINVAL, "append_backward: gradient of '%s' written after it was read", v->name);
        g->status = FL_EINVAL;
        return NULL;
    }
    char name[512];
    if (c->n == 0) snprintf(name, sizeof name, "%s@GRAD", v->name);
    else snprintf(name, sizeof name, "%s@GRAD@RENAME@%d", v->name, c->n);
    if (c->n == c->cap) {
        int nc = c->cap ? c->cap * 2 : 2;
        fl_var **nv = realloc(c->v, (size_t)nc * sizeof *nv);
        if (!nv) {
            g->status = fl__prog_error(g->p, FL_ENOMEM, "out of memory");
            return NULL;
        }
        c->v = nv;
        c->cap = nc;
    }
    fl_var *gv = fl__var_create(g->p, name, v->dtype, v->ndim, v->shape);
    if (!gv) {
        g->status = fl_prog_status(g->p);
        return NULL;
    }
    gv->lod_level = v->lod_level;
    c->v[c->n++] = gv;
    return gv;
}

/* Variables made by the backward pass (index >= nfwd) that no op reads or writes, e.g. the
 * gradient of an AMP cast's output once the product's gradient op writes the input's
 * gradient itself (amp.c): removed, so that the program declares only what runs. */
static int drop_unused(fl_prog *p, int nfwd)
{
    char *used = calloc((size_t)p->nvars + 1, 1);
    if (!used) return fl__prog_error(p, FL_ENOMEM, "out of memory");
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        if (op->cond) used[op->cond->idx] = 1;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
            for (int k = 0; k < op->in[s].n; k++) used[op->in[s].vars[k]->idx] = 1;
            for (int k = 0; k < op->out[s].n; k++) used[op->out[s].vars[k]->idx] = 1;
        }
    }
    int st = FL_OK;
    for (int i = p->nvars - 1; i >= nfwd && st == FL_OK; i--)
        if (!used[i] && !p->vars[i]->persistable) st = fl__prog_remove_var(p, p->vars[i]);
    free(used);
    return st;
}

int fl__grad_append(fl_op *op, const char *type, const fl_io *in, int nin, const fl_io *out, int nout)
{
    fl_op *go = fl__op_new(op->prog, type, in, nin, out, nout);
    if (!go) return fl_prog_status(op->prog);
    for (int i = 0; i < op->nattr; i++) {
        const fl_attr *a = &op->attr[i];
        int st = a->type == FL_ATTR_INT     ? fl__attr_set_i(go, a->name, a->i)
                 : a->type == FL_ATTR_FLOAT ? fl__attr_set_f(go, a->name, a->f)
                 : a->type == FL_ATTR_STR   ? fl__attr_set_s(go, a->name, a->s)
                 : a->type == FL_ATTR_INTS  ? fl__attr_set_ints(go, a->name, a->ints, a->n)
                                            : fl__attr_set_floats(go, a->name, a->floats, a->n);
        FL_CHECK(st);
    }
    return fl__op_finish(go);
}

static int append_backward(fl_var *loss, const char *const *no_grad, int n_no_grad, const char *const *cps, int ncps,
                           fl_param_grad **pairs, int *npairs)
{
    if (pairs) *pairs = NULL;
    if (npairs) *npairs = 0;
    if (!loss || loss->magic != FL_VAR_MAGIC) return fl__err(FL_EINVAL, "append_backward: loss is NULL or not a variable");
    fl_prog *p = loss->prog;
    if (p->status != FL_OK) return p->status;
    int64_t lnumel = 1;
    for (int i = 0; i < loss->ndim; i++) lnumel *= loss->shape[i];
    if (lnumel != 1)
        return fl__prog_error(p, FL_EINVAL,
                              "append_backward: loss '%s' must have one element (use mean or reduce_sum), "
                              "its shape has %d dims",
                              loss->name, loss->ndim);
    int nfused = fl__fuse_bn_add_act(p, cps, ncps, no_grad, n_no_grad);
    if (nfused < 0) return nfused;
    fl_recompute *rc = NULL;
    FL_CHECK(fl__recompute_plan(p, cps, ncps, &rc));
    fl_grad_ctx g = {p, p->nvars, calloc((size_t)p->nvars + 1, 1), calloc((size_t)p->nvars + 1, sizeof(contrib)), FL_OK};
    int nfwd_ops = p->nops, st = FL_OK;
    fl_param_grad *out = NULL;
    int nout = 0;
    if (!g.needs || !g.c) {
        st = fl__prog_error(p, FL_ENOMEM, "out of memory");
        goto done;
    }
    /* forward pass: which variables carry a gradient */
    for (int i = 0; i < p->nvars; i++) {
        fl_var *v = p->vars[i];
        int blocked = v->stop_gradient;
        for (int k = 0; k < n_no_grad && !blocked; k++) blocked = no_grad[k] && !strcmp(no_grad[k], v->name);
        g.needs[i] = (char)(v->is_param && !blocked);
        if (blocked) g.needs[i] = 2; /* 2: never */
    }
    for (int i = 0; i < nfwd_ops; i++) {
        fl_op *op = p->ops[i];
        if (op->role != FL_ROLE_FORWARD) continue;
        int any = 0;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < op->in[s].n; k++) any |= g.needs[op->in[s].vars[k]->idx] == 1;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < op->out[s].n; k++) {
                fl_var *o = op->out[s].vars[k];
                if (g.needs[o->idx] != 2 && !o->persistable) g.needs[o->idx] = (char)(any && op->def->grad != NULL);
            }
    }
    for (int i = 0; i < p->nvars; i++)
        if (g.needs[i] == 2) g.needs[i] = 0;
    if (!g.needs[loss->idx]) {
        st = fl__prog_error(p, FL_EINVAL, "append_backward: loss '%s' does not depend on any trainable parameter",
                            loss->name);
        goto done;
    }
    fl__prog_set_role(p, FL_ROLE_BACKWARD);
    /* d loss / d loss = 1 */
    fl_var *lg = fl__grad_for(&g, loss);
    if (!lg) {
        st = fl_prog_status(p);
        goto done;
    }
    {
        fl_io o = FL_IO1("Out", lg);
        fl_op *op = fl__op_new(p, "fill_constant", NULL, 0, &o, 1);
        if (!op) {
            st = fl_prog_status(p);
            goto done;
        }
        fl__attr_set_ints(op, "shape", loss->shape, loss->ndim);
        fl__attr_set_i(op, "dtype", FL_FLOAT32);
        fl__attr_set_f(op, "value", 1.0);
        FL_CHECK_GOTO(fl__op_finish(op), st, done);
    }
    for (int i = nfwd_ops - 1; i >= 0; i--) {
        fl_op *op = p->ops[i];
        if (op->role != FL_ROLE_FORWARD || !op->def->grad) continue;
        int has = 0;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < op->out[s].n; k++) {
                fl_var *o = op->out[s].vars[k];
                has |= o->idx < g.nfwd && g.c[o->idx].n > 0;
            }
        if (!has) continue;
        int any_in = 0;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < op->in[s].n; k++) any_in |= g.needs[op->in[s].vars[k]->idx];
        if (!any_in) continue;
        FL_CHECK_GOTO(fl__recompute_enter(rc, i), st, done);
        int first = p->nops;
        FL_CHECK_GOTO(op->def->grad(op, &g), st, done);
        FL_CHECK_GOTO(g.status, st, done);
        fl__recompute_rewrite(rc, first);
    }
    out = calloc((size_t)g.nfwd + 1, sizeof *out);
    if (!out) {
        st = fl__prog_error(p, FL_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < g.nfwd; i++) {
        fl_var *v = p->vars[i];
        if (!v->is_param || !g.needs[i] || !g.c[i].n) continue;
        fl_var *gv = fl__grad_of(&g, v);
        FL_CHECK_GOTO(g.status, st, done);
        out[nout].param = v;
        out[nout].grad = gv;
        nout++;
    }
    FL_CHECK_GOTO(drop_unused(p, g.nfwd), st, done);
done:
    fl__prog_set_role(p, FL_ROLE_FORWARD);
    fl__recompute_free(rc);
    if (g.c)
        for (int i = 0; i < g.nfwd; i++) free(g.c[i].v);
    free(g.c);
    free(g.needs);
    if (st == FL_OK && pairs) {
        *pairs = out;
        if (npairs) *npairs = nout;
    } else {
        free(out);
    }
    return st;
}

int fl_append_backward(fl_var *loss, const char *const *no_grad, int n_no_grad, fl_param_grad **pairs, int *npairs)
{
    return append_backward(loss, no_grad, n_no_grad, NULL, 0, pairs, npairs);
}

int fl_append_backward_recompute(fl_var *loss, const char *const *no_grad, int n_no_grad, const char *const *checkpoints,
                                 int ncheckpoints, fl_param_grad **pairs, int *npairs)
{
    if (ncheckpoints < 0 || (ncheckpoints && !checkpoints))
        return fl__err(FL_EINVAL, "append_backward: checkpoint list is NULL or its length (%d) is negative", ncheckpoints);
    return append_backward(loss, no_grad, n_no_grad, checkpoints, ncheckpoints, pairs, npairs);
}
