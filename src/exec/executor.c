/*
 * executor.c - runs programs.  Each program is compiled once per executor into a plan: a
 * flat array of (kernel, resolved input/output tensors).  A plan is rebuilt when the
 * program changes (its version counter moves).  A step then costs one indirect call per
 * op and no name lookups.
 *
 * Eager deletion (Paddle's FLAGS_eager_delete_tensor_gb = 0, src/exec/eager.c): each plan
 * also lists, per op, the non-persistable variables whose last use is that op; their
 * buffers are released after it runs, into a pool the next outputs take from.
 */
#include <stdio.h>
#include <string.h>

#include "exec_internal.h"
#include "../graph/op_layout.h"

typedef struct {
    const fl_op *op;
    fl_kctx ctx;
    void *state;
    /* copied from op->def when planning: a plan may outlive its program (an executor freed
     * after the program it ran), so freeing the state must not read the op */
    void (*state_free)(void *state);
    const fl_tensor *cond; /* run only when its first element is non-zero */
    int lay_kind;          /* FL_OPLAY_* of the op (op_layout.h) */
    unsigned lay_slots;
} plan_op;

typedef struct plan {
    const fl_prog *prog;
    uint64_t version;
    plan_op *ops;
    int nops;
    fl_tensor **tensors; /* per program var index */
    char *is_input;      /* per var: read by some op before any op writes it */
    fl__eager eager;     /* eager.c */
    uint64_t runs;
    struct plan *next;
} plan;

struct fl_exe {
    uint32_t magic;
    fl_scope *scope;
    int own_scope;
    plan *plans;
    fl__exe_metrics metrics; /* metrics.c, trainer.c */
    const fl_prog **noticed; /* programs fl__exe_first_notice has seen */
    int nnoticed;
    int keep_dead;      /* eager deletion off (fl_exe_set_eager_deletion(e, 0)) */
    int64_t peak_bytes; /* high-water mark of non-persistable bytes in the last run */
};

fl_exe *fl_exe_create(fl_scope *scope)
{
    fl_exe *e = calloc(1, sizeof *e);
    if (!e) {
        fl__err(FL_ENOMEM, "fl_exe_create: out of memory");
        return NULL;
    }
    e->magic = FL_EXE_MAGIC;
    if (!scope) {
        scope = fl_scope_create(NULL);
        if (!scope) {
            free(e);
            return NULL;
        }
        e->own_scope = 1;
    }
    e->scope = scope;
    return e;
}

static void plan_free(plan *pl)
{
    if (!pl) return;
    for (int i = 0; i < pl->nops; i++) {
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
            free(pl->ops[i].ctx.in[s]);
            free(pl->ops[i].ctx.out[s]);
        }
        if (pl->ops[i].state && pl->ops[i].state_free) pl->ops[i].state_free(pl->ops[i].state);
        else free(pl->ops[i].state);
    }
    free(pl->ops);
    free(pl->tensors);
    free(pl->is_input);
    fl__eager_free(&pl->eager);
    free(pl);
}

void fl_exe_free(fl_exe *e)
{
    if (!e || e->magic != FL_EXE_MAGIC) return;
    for (plan *pl = e->plans, *nx; pl; pl = nx) {
        nx = pl->next;
        plan_free(pl);
    }
    if (e->own_scope) fl_scope_free(e->scope);
    fl__exe_metrics_free(&e->metrics);
    free(e->noticed);
    e->magic = 0;
    free(e);
}

fl__exe_metrics *fl__exe_metrics_of(fl_exe *e) { return &e->metrics; }
int fl__exe_first_notice(fl_exe *e, const fl_prog *p)
{
    for (int i = 0; i < e->nnoticed; i++)
        if (e->noticed[i] == p) return 0;
    const fl_prog **n = realloc(e->noticed, (size_t)(e->nnoticed + 1) * sizeof *n);
    if (!n) return 0;
    n[e->nnoticed++] = p;
    e->noticed = n;
    return 1;
}

fl_scope *fl_exe_scope(fl_exe *e)
{
    if (!e || e->magic != FL_EXE_MAGIC) {
        fl__err_handle(e, "fl_exe_scope: executor is NULL or invalid");
        return NULL;
    }
    return e->scope;
}

static fl_tensor *var_tensor(fl_exe *e, const fl_var *v)
{
    if (v->persistable) {
        fl_tensor *t = fl_scope_find(e->scope, v->name);
        return t ? t : fl_scope_var(fl__scope_root(e->scope), v->name);
    }
    return fl_scope_var(e->scope, v->name);
}

static int plan_build(fl_exe *e, const fl_prog *p, plan **out)
{
    plan *pl = calloc(1, sizeof *pl);
    if (!pl) return fl__err(FL_ENOMEM, "executor: out of memory");
    pl->prog = p;
    pl->version = p->version;
    pl->tensors = calloc((size_t)p->nvars + 1, sizeof *pl->tensors);
    pl->is_input = calloc((size_t)p->nvars + 1, 1);
    pl->ops = calloc((size_t)p->nops + 1, sizeof *pl->ops);
    char *written = calloc((size_t)p->nvars + 1, 1);
    int st = FL_OK;
    if (!pl->tensors || !pl->is_input || !pl->ops || !written) {
        st = fl__err(FL_ENOMEM, "executor: out of memory");
        goto fail;
    }
    for (int i = 0; i < p->nvars; i++) {
        pl->tensors[i] = var_tensor(e, p->vars[i]);
        if (!pl->tensors[i]) {
            st = fl_last_status();
            goto fail;
        }
    }
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        plan_op *po = &pl->ops[pl->nops++];
        po->op = op;
        po->ctx.op = op;
        po->ctx.state = &po->state;
        po->state_free = op->def->state_free;
        po->lay_kind = fl__op_layout_kind(op->def->type, &po->lay_slots);
        if (op->cond) po->cond = pl->tensors[op->cond->idx];
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
            if (op->in[s].n) {
                po->ctx.in[s] = malloc((size_t)op->in[s].n * sizeof(fl_tensor *));
                if (!po->ctx.in[s]) goto oom;
                po->ctx.nin[s] = op->in[s].n;
                for (int k = 0; k < op->in[s].n; k++) {
                    int vi = op->in[s].vars[k]->idx;
                    po->ctx.in[s][k] = pl->tensors[vi];
                    if (!written[vi]) pl->is_input[vi] = 1;
                }
            }
        }
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
            if (op->out[s].n) {
                po->ctx.out[s] = malloc((size_t)op->out[s].n * sizeof(fl_tensor *));
                if (!po->ctx.out[s]) goto oom;
                po->ctx.nout[s] = op->out[s].n;
                for (int k = 0; k < op->out[s].n; k++) {
                    int vi = op->out[s].vars[k]->idx;
                    po->ctx.out[s][k] = pl->tensors[vi];
                    written[vi] = 1;
                }
            }
        }
    }
    free(written);
    written = NULL;
    st = fl__eager_build(&pl->eager, p, pl->is_input);
    if (st != FL_OK) goto fail;
    *out = pl;
    return FL_OK;
oom:
    st = fl__err(FL_ENOMEM, "executor: out of memory");
fail:
    free(written);
    plan_free(pl);
    return st;
}

static int get_plan(fl_exe *e, const fl_prog *p, plan **out)
{
    plan **pp = &e->plans;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->prog == p) break;
    if (*pp && (*pp)->version == p->version) {
        *out = *pp;
        return FL_OK;
    }
    plan *np = NULL;
    FL_CHECK(plan_build(e, p, &np));
    if (*pp) {
        np->next = (*pp)->next;
        np->runs = (*pp)->runs;
        plan_free(*pp);
    }
    *pp = np;
    *out = np;
    return FL_OK;
}

static int cond_true(const fl_tensor *t)
{
    if (!t->numel) return 0;
    switch (t->dtype) {
    case FL_INT64: return ((const int64_t *)t->data)[0] != 0;
    case FL_INT32: return ((const int32_t *)t->data)[0] != 0;
    case FL_FLOAT64: return ((const double *)t->data)[0] != 0.0;
    default: return ((const float *)t->data)[0] != 0.0f;
    }
}

/* New write versions for what op po may have written (tensor_internal.h): its outputs, and
 * its inputs too unless its definition says it only reads them (ops updating a state they
 * take as an input).  Called after the op, whether or not it succeeded. */
static void bump_written(const plan_op *po)
{
    const unsigned fl = po->op->def->flags;
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
        for (int k = 0; !(fl & FL_OPDEF_OWN_OUTPUTS) && k < po->ctx.nout[s]; k++) fl__tensor_bump(po->ctx.out[s][k]);
        for (int k = 0; !(fl & FL_OPDEF_READS_INPUTS) && k < po->ctx.nin[s]; k++) fl__tensor_bump(po->ctx.in[s][k]);
    }
}

static int check_feed(const fl_prog *p, const fl_feed *f, fl_var **vout)
{
    if (!f->name) return fl__err(FL_EINVAL, "feed: name is NULL");
    fl_var *v = fl_prog_var(p, f->name);
    if (!v) return fl__err(FL_ENOTFOUND, "feed '%s': no variable of that name in the program", f->name);
    if (!f->value) return fl__err(FL_EINVAL, "feed '%s': tensor is NULL", f->name);
    const fl_tensor *t = f->value;
    int ok = t->dtype == v->dtype && t->ndim == v->ndim && (v->lod_level == 0 || t->lod_n);
    for (int i = 0; ok && i < v->ndim; i++) ok = v->shape[i] < 0 || v->shape[i] == t->shape[i];
    if (ok) {
        *vout = v;
        return FL_OK;
    }
    /* the messages are built only on the error path */
    char want[128], got[128];
    fl__shape_str(v, want, sizeof want);
    fl_tensor_describe(t, got, sizeof got);
    if (t->dtype != v->dtype)
        return fl__err(FL_EINVAL, "feed '%s': expected dtype %s shape %s, got %s", f->name, fl_dtype_name(v->dtype), want,
                       got);
    ok = t->ndim == v->ndim;
    for (int i = 0; ok && i < v->ndim; i++) ok = v->shape[i] < 0 || v->shape[i] == t->shape[i];
    if (!ok) return fl__err(FL_EINVAL, "feed '%s': expected shape %s, got %s", f->name, want, got);
    if (v->lod_level > 0 && !t->lod_n)
        return fl__err(FL_EINVAL, "feed '%s': the variable has lod_level %d; feed a tensor with LoD offsets (%s)", f->name,
                       v->lod_level, got);
    *vout = v;
    return FL_OK;
}

int fl_exe_run(fl_exe *e, fl_prog *p, const fl_feed *feed, int nfeed, const char *const *fetch, int nfetch, fl_tensor **out)
{
    if (!e || e->magic != FL_EXE_MAGIC) return fl__err_handle(e, "fl_exe_run: executor is NULL or invalid");
    if (!p || p->magic != FL_PROG_MAGIC) return fl__err_handle(p, "fl_exe_run: program is NULL or invalid");
    if (p->status != FL_OK || (p->main && p->main->status != FL_OK))
        return fl__err(p->main ? p->main->status : p->status, "fl_exe_run: the program has a build error: %s",
                       p->main ? p->main->err : p->err);
    if ((nfeed && !feed) || nfeed < 0) return fl__err(FL_EINVAL, "fl_exe_run: feed list is NULL");
    if ((nfetch && (!fetch || !out)) || nfetch < 0) return fl__err(FL_EINVAL, "fl_exe_run: fetch list or out is NULL");
    plan *pl;
    FL_CHECK(get_plan(e, p, &pl));
    /* validate every feed before touching anything */
    fl_var *fv[64];
    fl_var **fvars = nfeed <= 64 ? fv : malloc((size_t)nfeed * sizeof *fvars);
    if (!fvars) return fl__err(FL_ENOMEM, "out of memory");
    int st = FL_OK;
    for (int i = 0; i < nfeed; i++) FL_CHECK_GOTO(check_feed(p, &feed[i], &fvars[i]), st, out);
    for (int i = 0; i < nfetch; i++) {
        if (!fetch[i]) {
            st = fl__err(FL_EINVAL, "fetch #%d: name is NULL", i);
            goto out;
        }
        if (!fl_prog_var(p, fetch[i]) && !fl_scope_find(e->scope, fetch[i])) {
            st = fl__err(FL_ENOTFOUND, "fetch '%s': no variable of that name in the program or scope", fetch[i]);
            goto out;
        }
    }
    /* every data variable an op reads must be fed; persistables must be initialised */
    for (int i = 0; i < p->nvars; i++) {
        if (!pl->is_input[i]) continue;
        const fl_var *v = p->vars[i];
        if (v->is_data) {
            int fed = 0;
            for (int k = 0; k < nfeed && !fed; k++) fed = fvars[k] == v;
            if (!fed) {
                st = fl__err(FL_EINVAL, "variable '%s' is read by the program but was not fed", v->name);
                goto out;
            }
        } else if (v->persistable && pl->tensors[i]->numel == 0) {
            int64_t want = 1;
            for (int d = 0; d < v->ndim; d++) want *= v->shape[d] > 0 ? v->shape[d] : 1;
            if (want > 0) {
                st = fl__err(FL_ESTATE, "variable '%s' is not initialized: run the startup program first", v->name);
                goto out;
            }
        }
    }
    for (int i = 0; i < nfetch; i++) {
        fl_var *v = fl_prog_var(p, fetch[i]);
        if (v) pl->eager.fetched[v->idx] = 1;
    }
    int fed[64];
    for (int i = 0; i < nfeed && i < 64; i++) fed[i] = fvars[i]->idx;
    pl->eager.on = !e->keep_dead;
    fl__eager_begin(&pl->eager, pl->tensors, fed, nfeed < 64 ? nfeed : 64);
    for (int i = 0; i < nfeed; i++) FL_CHECK_GOTO(fl_tensor_copy(pl->tensors[fvars[i]->idx], feed[i].value), st, out);
    const int prof = fl__prof_on();
    for (int i = 0; i < pl->nops; i++) {
        plan_op *po = &pl->ops[i];
        if (po->cond && !cond_true(po->cond)) continue;
        po->ctx.step = pl->runs;
        fl__eager_before_op(&pl->eager, po->op, pl->tensors);
        uint64_t t0 = prof ? fl__now_ns() : 0;
        int same = 0;
        uint64_t nconv = prof ? fl__layout_conversions() : 0;
        st = fl__op_layout_before(&po->ctx, po->lay_kind, po->lay_slots, &same);
        if (prof && fl__layout_conversions() != nconv) fl__prof_add("(to plain)", fl__now_ns() - t0), t0 = fl__now_ns();
        if (st == FL_OK) st = po->op->def->run(&po->ctx);
        if (st == FL_OK && same) st = fl__op_layout_after(&po->ctx, same);
        bump_written(po);
        if (prof) fl__prof_add(po->op->def->type, fl__now_ns() - t0);
        if (st == FL_OK) fl__eager_after_op(&pl->eager, i, po->op, pl->tensors);
        if (st != FL_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", fl_last_error());
            const fl_op *op = po->op;
            const char *o0 = op->out[0].n ? op->out[0].vars[0]->name : "-";
            st = fl__err(st, "op #%d %s (output %s): %s", i, op->def->type, o0, msg);
            goto out;
        }
    }
    pl->runs++;
    e->peak_bytes = (int64_t)pl->eager.peak;
    /* what outlives the run (fetches, variables read from the scope later) is plain */
    for (int i = 0; i < p->nvars; i++)
        if (pl->tensors[i]->layout) FL_CHECK_GOTO(fl__tensor_to_plain(pl->tensors[i]), st, out);
    for (int i = 0; i < nfetch; i++) {
        fl_var *v = fl_prog_var(p, fetch[i]);
        out[i] = v ? pl->tensors[v->idx] : fl_scope_find(e->scope, fetch[i]);
    }
out:
    for (int i = 0; i < nfetch && fetch && fetch[i]; i++) {
        fl_var *v = fl_prog_var(p, fetch[i]);
        if (v) pl->eager.fetched[v->idx] = 0;
    }
    fl__eager_end(&pl->eager);
    if (fvars != fv) free(fvars);
    return st;
}

int fl_exe_set_eager_deletion(fl_exe *e, int on)
{
    if (!e || e->magic != FL_EXE_MAGIC) return fl__err_handle(e, "fl_exe_set_eager_deletion: executor is NULL or invalid");
    e->keep_dead = !on;
    return FL_OK;
}

int64_t fl_exe_peak_activation_bytes(const fl_exe *e)
{
    if (!e || e->magic != FL_EXE_MAGIC)
        return fl__err_handle(e, "fl_exe_peak_activation_bytes: executor is NULL or invalid");
    return e->peak_bytes;
}
