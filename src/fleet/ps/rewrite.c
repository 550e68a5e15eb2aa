/*
 * rewrite.c - the parameter-server runtime's program rewrite: the table list derived from
 * the program, and the worker-program rewrite behind fleet_distributed_optimizer() (see
 * docs/parameter_server.md).  What it inserts follows the mode's row (modes.c).
 *
 * fl_opt_minimize() appends backward and the update ops, then calls the hook (phase
 * AFTER_UPDATE), which:
 *   1. reads each trainable parameter's update op (rule, learning rate, L2, betas,
 *      epsilon) and derives one table per parameter: a sparse table for an embedding
 *      looked up with is_sparse or is_distributed (rows initialised on the servers from
 *      the parameter's initializer), a dense table (rows x cols) for everything else, plus
 *      the 1x1 "@fleet_status@" table that carries save results to every worker;
 *   2. modes whose servers optimize (sync, async): removes the update ops and their state (the servers optimize), turns
 *      the lookups of sparse tables into distributed_lookup_table (one per table and
 *      padding_idx, pulling the batch's ids from the servers) and their gradients into
 *      distributed_lookup_table_grad (SelectedRows), drops those tables from the worker
 *      (startup initializer and variable), and appends ps_send (every gradient) and
 *      ps_recv (every dense parameter);
 *      modes whose workers optimize (GEO): keeps the local optimizer and appends ps_geo (every k_steps: push
 *      (latest - old) / trainers, pull);
 *   3. appends ps_init to the startup program (worker 0 offers the initial dense values,
 *      barrier, every worker pulls them).
 * The server process builds its program and runs the same hook, so both sides derive the
 * table list from the same code.  The client and server compare names, shapes and what
 * the pushes carry (gradients, gradients scaled by a schedule, GEO deltas); the update
 * rule is the server's own, as Paddle's pserver runs the optimizer of its program while
 * the trainers' update ops are dropped (a trainer minimizing with SGD against servers
 * that minimize with Adam trains with Adam).
 *
 * The update ops are emitted by optimizer.c and removed here, because the optimizer hook
 * has no per-pair "skip update" flag yet; removing them also removes their state
 * variables (moments, learning rate) from the main and startup programs, so a worker holds
 * no optimizer state for server-held parameters.
 */
#include <stdio.h>
#include <string.h>

#include "fleet_ps.h"

/* ---- program surgery ------------------------------------------------------------------------ */

static int slot_has(const fl_slot *s, const fl_var *v)
{
    for (int k = 0; k < s->n; k++)
        if (s->vars[k] == v) return 1;
    return 0;
}

static int op_reads(const fl_op *op, const fl_var *v)
{
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        if (slot_has(&op->in[s], v)) return 1;
    return op->cond == v;
}

static int op_writes(const fl_op *op, const fl_var *v)
{
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        if (slot_has(&op->out[s], v)) return 1;
    return 0;
}

static int var_used(const fl_prog *p, const fl_var *v)
{
    for (int i = 0; i < p->nops; i++)
        if (op_reads(p->ops[i], v) || op_writes(p->ops[i], v)) return 1;
    return 0;
}

/* Removes variable `name` from p and its startup program (with the startup ops writing
 * it) when no op of p uses it any more. */
static int drop_if_unused(fl_prog *p, const char *name)
{
    fl_var *v = fl_prog_var(p, name);
    if (v) {
        if (var_used(p, v)) return FL_OK;
        FL_CHECK(fl__prog_remove_var(p, v));
    }
    fl_prog *sp = p->startup;
    fl_var *sv = sp ? fl_prog_var(sp, name) : NULL;
    if (!sv) return FL_OK;
    for (int i = sp->nops - 1; i >= 0; i--) {
        if (!op_writes(sp->ops[i], sv)) continue;
        int nout = 0;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) nout += sp->ops[i]->out[s].n;
        if (nout > 1) continue; /* an op writing other variables too keeps the variable */
        fl__prog_remove_op(sp, i);
    }
    return var_used(sp, sv) ? FL_OK : fl__prog_remove_var(sp, sv);
}

/* The startup op initialising `name` (NULL if none). */
static fl_op *init_op(fl_prog *p, const char *name)
{
    fl_prog *sp = p->startup;
    fl_var *sv = sp ? fl_prog_var(sp, name) : NULL;
    if (!sv) return NULL;
    for (int i = 0; i < sp->nops; i++)
        if (op_writes(sp->ops[i], sv)) return sp->ops[i];
    return NULL;
}

/* ---- table derivation -------------------------------------------------------------------------- */

typedef struct {
    fl_var *param, *grad;
    fl_op *upd;      /* its update op */
    int sparse;      /* sparse table: distributed lookups */
    int distributed; /* some lookup has is_distributed */
} pinfo;

static fl_op *find_update(fl_prog *p, const char *type, const fl_var *w)
{
    for (int i = 0; i < p->nops; i++) {
        fl_op *op = p->ops[i];
        if (op->role == FL_ROLE_OPTIMIZE && !strcmp(op->def->type, type) && op->in[0].n == 1 && op->in[0].vars[0] == w)
            return op;
    }
    return NULL;
}

/* Classifies how a parameter is used: sparse if an embedding looks it up with is_sparse or
 * is_distributed, in which case it may only be used by lookups (and its update op). */
static int classify(fl_prog *p, pinfo *pi)
{
    const fl_op *other = NULL;
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        if (op == pi->upd || !(op_reads(op, pi->param) || op_writes(op, pi->param))) continue;
        if (!strcmp(op->def->type, "lookup_table") && op->in[0].vars[0] == pi->param) {
            if (fl__attr_i(op, "is_sparse", 0) || fl__attr_i(op, "is_distributed", 0)) pi->sparse = 1;
            if (fl__attr_i(op, "is_distributed", 0)) pi->distributed = 1;
        } else if (!(!strcmp(op->def->type, "lookup_table_grad") && op->in[0].vars[0] == pi->param)) {
            other = op;
        }
    }
    if (pi->sparse && other)
        return fl__prog_error(p, FL_EUNSUPPORTED,
                              "parameter server: table '%s' is looked up with is_sparse/is_distributed and also used by op "
                              "'%s'; a sparse table lives on the servers only and can only be read by embedding lookups",
                              pi->param->name, other->def->type);
    return FL_OK;
}

/* fl_initializer of a sparse table from the startup op of its parameter. */
static int table_init(fl_prog *p, const fl_var *w, fl_initializer *in)
{
    const fl_op *op = init_op(p, w->name);
    memset(in, 0, sizeof *in);
    if (!op)
        return fl__prog_error(p, FL_EINVAL, "parameter server: table '%s' has no initializer in the startup program",
                              w->name);
    const char *t = op->def->type;
    if (!strcmp(t, "fill_constant")) {
        *in = fl_init_constant((float)fl__attr_f(op, "value", 0.0));
    } else if (!strcmp(t, "uniform_random")) {
        *in = fl_init_uniform((float)fl__attr_f(op, "min", -1.0), (float)fl__attr_f(op, "max", 1.0));
    } else if (!strcmp(t, "gaussian_random")) {
        *in = fl_init_normal((float)fl__attr_f(op, "mean", 0.0), (float)fl__attr_f(op, "std", 1.0));
    } else if (!strcmp(t, "truncated_gaussian_random")) {
        *in = fl_init_truncated_normal((float)fl__attr_f(op, "mean", 0.0), (float)fl__attr_f(op, "std", 1.0));
    } else {
        return fl__prog_error(p, FL_EUNSUPPORTED,
                              "parameter server: table '%s' is initialized by %s, which a sparse table "
                              "cannot reproduce per row",
                              w->name, t);
    }
    /* the op's seed, else one derived from the table name: never from the program seed, so
     * a server and workers that seed their programs differently still agree */
    uint64_t seed = (uint64_t)fl__attr_i(op, "seed", 0);
    in->seed = seed ? seed : (fl__hash_bytes(w->name, strlen(w->name)) | 1u);
    return FL_OK;
}

static int table_opt(fl__ps_ctx *c, fl_prog *p, const pinfo *pi, fl_ps_optimizer *o)
{
    memset(o, 0, sizeof *o);
    if (!c->mode->server_optimizes) { /* the servers sum what the workers' optimizers did */
        o->kind = FL_PS_OPT_SUM;
        return FL_OK;
    }
    const fl_op *u = pi->upd;
    const char *t = u->def->type;
    fl_var *lrv = u->in[2].vars[0];
    const fl_op *sched = NULL;
    for (int i = 0; i < p->nops && !sched; i++)
        if (op_writes(p->ops[i], lrv)) sched = p->ops[i];
    o->l2 = (float)fl__attr_f(u, "l2", 0.0);
    if (sched) {
        /* Paddle moves the schedule to the servers (its lr decay block, stepped by the
         * workers' batch counts); here the workers run it and push lr * gradient to servers
         * that apply rate 1: the same sgd update, whatever the merging of pushes */
        if (strcmp(t, "sgd") || o->l2 != 0.0f)
            return fl__prog_error(p, FL_EUNSUPPORTED,
                                  "parameter server (%s mode): a learning-rate schedule (%s) with %s%s: the workers "
                                  "push rate * gradient, which is the scheduled update for sgd without L2 only; "
                                  "use sgd, a constant rate, or GEO mode (a_sync_configs.k_steps > 0)",
                                  c->mode->name, sched->def->type, t, o->l2 != 0.0f ? " and L2 decay" : "");
        if (c->lr_sched && c->lr_sched != lrv)
            return fl__prog_error(p, FL_EUNSUPPORTED, "parameter server: two learning-rate schedules ('%s', '%s')",
                                  c->lr_sched->name, lrv->name);
        c->lr_sched = lrv;
        o->lr = (float)fl__attr_f(u, "lr_scale", 1.0);
        o->scaled = 1;
    } else {
        const fl_op *lop = init_op(p, lrv->name);
        if (!lop || strcmp(lop->def->type, "fill_constant") != 0)
            return fl__prog_error(p, FL_EINVAL, "parameter server: learning rate '%s' has no constant initializer",
                                  lrv->name);
        /* the same float product as the local update op: rate * lr_scale */
        o->lr = (float)fl__attr_f(lop, "value", 0.0) * (float)fl__attr_f(u, "lr_scale", 1.0);
    }
    if (!strcmp(t, "sgd")) {
        o->kind = FL_PS_OPT_SGD;
    } else if (!strcmp(t, "momentum")) {
        o->kind = FL_PS_OPT_MOMENTUM;
        o->momentum = fl__attr_f(u, "mu", 0.0);
        o->nesterov = fl__attr_i(u, "use_nesterov", 0) != 0;
    } else if (!strcmp(t, "adagrad")) {
        o->kind = FL_PS_OPT_ADAGRAD;
        o->epsilon = fl__attr_f(u, "epsilon", 1e-6);
    } else if (!strcmp(t, "adam")) {
        o->kind = FL_PS_OPT_ADAM;
        o->beta1 = fl__attr_f(u, "beta1", 0.9);
        o->beta2 = fl__attr_f(u, "beta2", 0.999);
        o->epsilon = fl__attr_f(u, "epsilon", 1e-8);
    } else {
        return fl__prog_error(p, FL_EUNSUPPORTED,
                              "parameter server (%s mode): the servers apply sgd, momentum, adagrad or adam, not "
                              "%s; use GEO mode (a_sync_configs.k_steps > 0) to keep %s on the workers",
                              c->mode->name, t, t);
    }
    /* fleet/ps.h reads 0 as "the default" for these: refuse rather than train differently */
    if ((o->kind != FL_PS_OPT_SGD && o->kind != FL_PS_OPT_MOMENTUM && o->epsilon == 0.0) ||
        (o->kind == FL_PS_OPT_ADAM && (o->beta1 == 0.0 || o->beta2 == 0.0)))
        return fl__prog_error(p, FL_EUNSUPPORTED,
                              "parameter server: %s with epsilon, beta1 or beta2 equal to 0 cannot be "
                              "applied by the servers (0 selects their default there)",
                              t);
    return FL_OK;
}

static int add_table(fl__ps_ctx *c, fl_prog *p, const fl_ps_table_config *t)
{
    if (c->ntables >= FL_PS_MAX_TABLES)
        return fl__prog_error(p, FL_EUNSUPPORTED, "parameter server: more than %d tables", FL_PS_MAX_TABLES);
    if (fl_ps_table_config_check(t) != FL_OK)
        return fl__prog_error(p, fl_last_status(), "parameter server: %s", fl_last_error());
    fl_ps_table_config *d = &c->tables[c->ntables];
    *d = *t;
    d->entry = NULL;
    if (!(d->name = fl__strdup(t->name))) return fl__prog_error(p, FL_ENOMEM, "out of memory");
    c->ntables++;
    return FL_OK;
}

static int derive_tables(fl__ps_ctx *c, fl_prog *p, pinfo *pi, int n)
{
    c->tables = calloc((size_t)n + 1, sizeof *c->tables);
    c->params = calloc((size_t)(n ? n : 1), sizeof *c->params);
    if (!c->tables || !c->params) return fl__prog_error(p, FL_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        fl_var *w = pi[i].param;
        fl_ps_table_config t;
        memset(&t, 0, sizeof t);
        t.name = w->name;
        FL_CHECK(table_opt(c, p, &pi[i], &t.opt));
        int64_t numel = 1;
        for (int d = 0; d < w->ndim; d++) numel *= w->shape[d];
        if (pi[i].sparse) {
            t.kind = FL_PS_SPARSE;
            t.dim = (int)w->shape[1];
            t.rows = w->shape[0];
            FL_CHECK(table_init(p, w, &t.init));
        } else {
            t.kind = FL_PS_DENSE;
            t.rows = w->ndim ? w->shape[0] : 1;
            t.cols = t.rows ? numel / t.rows : 1;
        }
        fl__ps_param *pp = &c->params[i];
        pp->table = c->ntables;
        pp->sparse = pi[i].sparse;
        pp->numel = numel;
        if (!(pp->name = fl__strdup(w->name))) return fl__prog_error(p, FL_ENOMEM, "out of memory");
        c->nparams++;
        FL_CHECK(add_table(c, p, &t));
    }
    fl_ps_table_config st;
    memset(&st, 0, sizeof st);
    st.name = "@fleet_status@";
    st.kind = FL_PS_DENSE;
    st.rows = st.cols = 1;
    st.opt.kind = FL_PS_OPT_SUM;
    c->status_table = c->ntables;
    return add_table(c, p, &st);
}

/* ---- the rewrite ------------------------------------------------------------------------------- */

static int set_ps_attrs(fl__ps_ctx *c, fl_op *op) { return fl__attr_set_i(op, "ps_id", c->id); }

static int ints_attr(fl_op *op, const char *name, const int64_t *v, int n) { return fl__attr_set_ints(op, name, v, n); }

/* Is every Ids variable of the lookups in `g` ready before op index `first`? */
static int ids_ready(const fl_prog *p, const fl_var *ids, int first)
{
    for (int i = first; i < p->nops; i++)
        if (op_writes(p->ops[i], ids)) return 0;
    return 1;
}

/* lookup_table ops of w become distributed_lookup_table ops: lookups with the same
 * padding_idx whose ids are ready at the first one are merged into it (one pull for all
 * of them); lookup_table_grad becomes distributed_lookup_table_grad. */
static int rewrite_lookups(fl__ps_ctx *c, fl_prog *p, fl_var *w, int table)
{
    const fl_op_def *dl = fl__op_lookup("distributed_lookup_table");
    const fl_op_def *dg = fl__op_lookup("distributed_lookup_table_grad");
    if (!dl || !dg) return fl__prog_error(p, FL_ENOTFOUND, "parameter server: distributed lookup ops are not registered");
    for (;;) {
        int first = -1;
        for (int i = 0; i < p->nops && first < 0; i++)
            if (!strcmp(p->ops[i]->def->type, "lookup_table") && p->ops[i]->in[0].vars[0] == w) first = i;
        if (first < 0) break;
        fl_op *op = p->ops[first];
        int64_t pad = fl__attr_i(op, "padding_idx", -1);
        int is_dist = (int)fl__attr_i(op, "is_distributed", 0);
        int cap = 4, n = 0;
        fl_var **ids = malloc((size_t)cap * sizeof *ids), **outs = malloc((size_t)cap * sizeof *outs);
        int *members = malloc((size_t)cap * sizeof *members);
        int st = ids && outs && members ? FL_OK : fl__prog_error(p, FL_ENOMEM, "out of memory");
        for (int i = first; st == FL_OK && i < p->nops; i++) {
            fl_op *o = p->ops[i];
            if (strcmp(o->def->type, "lookup_table") != 0 || o->in[0].vars[0] != w) continue;
            if (i != first && (fl__attr_i(o, "padding_idx", -1) != pad || !ids_ready(p, o->in[1].vars[0], first))) continue;
            if (n == cap) {
                cap *= 2;
                fl_var **a = realloc(ids, (size_t)cap * sizeof *ids);
                if (a) ids = a;
                fl_var **b = realloc(outs, (size_t)cap * sizeof *outs);
                if (b) outs = b;
                int *m = realloc(members, (size_t)cap * sizeof *members);
                if (m) members = m;
                if (!a || !b || !m) {
                    st = fl__prog_error(p, FL_ENOMEM, "out of memory");
                    break;
                }
            }
            is_dist |= (int)fl__attr_i(o, "is_distributed", 0);
            ids[n] = o->in[1].vars[0];
            outs[n] = o->out[0].vars[0];
            members[n++] = i;
        }
        if (st == FL_OK) {
            for (int k = 0; k < FL_OP_MAX_SLOTS; k++) {
                free(op->in[k].vars);
                free(op->out[k].vars);
                op->in[k] = (fl_slot){0, NULL};
                op->out[k] = (fl_slot){0, NULL};
            }
            op->in[0] = (fl_slot){n, ids};
            op->out[0] = (fl_slot){n, outs};
            ids = outs = NULL;
            op->def = dl;
            st = set_ps_attrs(c, op);
            if (st == FL_OK) st = fl__attr_set_i(op, "table", table);
            if (st == FL_OK) st = fl__attr_set_i(op, "dim", w->shape[1]);
            if (st == FL_OK) st = fl__attr_set_i(op, "height", w->shape[0]); /* for the inference export */
            if (st == FL_OK) st = fl__attr_set_i(op, "is_distributed", is_dist);
            if (st == FL_OK) st = fl__attr_set_i(op, "is_test", 0);
            if (st == FL_OK) st = dl->infer(op);
            for (int k = n - 1; st == FL_OK && k >= 1; k--) fl__prog_remove_op(p, members[k]);
            p->version++;
        }
        free(ids);
        free(outs);
        free(members);
        FL_CHECK(st);
    }
    for (int i = 0; i < p->nops; i++) {
        fl_op *op = p->ops[i];
        if (strcmp(op->def->type, "lookup_table_grad") != 0 || op->in[0].vars[0] != w) continue;
        free(op->in[0].vars);
        op->in[0] = op->in[1];
        op->in[1] = op->in[2];
        op->in[2] = (fl_slot){0, NULL};
        op->def = dg;
        FL_CHECK(fl__attr_set_i(op, "height", w->shape[0]));
        FL_CHECK(fl__attr_set_i(op, "dim", w->shape[1]));
        FL_CHECK(dg->infer(op));
        p->version++;
    }
    return FL_OK;
}

/* fleet_dist_infer_program: p's lookups of c's remote sparse tables become
 * distributed_lookup_table ops in test mode (a pull that creates no row: an id never trained
 * reads zeros), and those tables leave p and its startup program, as the training rewrite
 * does; the dense parameters and every other op stay (their values are the scope's). */
int fl__ps_rewrite_infer(fl__ps_ctx *c, fl_prog *p)
{
    for (int i = 0; i < c->nparams; i++) {
        if (!c->params[i].sparse) continue;
        fl_var *w = fl_prog_var(p, c->params[i].name);
        if (!w) continue;
        const fl_ps_table_config *t = &c->tables[c->params[i].table];
        if (w->ndim != 2 || w->shape[1] != t->dim)
            return fl__prog_error(p, FL_EINVAL,
                                  "fleet_dist_infer_program: '%s' is not a [rows, %lld] table as the servers' "
                                  "sparse table of that name",
                                  w->name, (long long)t->dim);
        FL_CHECK(rewrite_lookups(c, p, w, c->params[i].table));
        FL_CHECK(drop_if_unused(p, c->params[i].name));
    }
    for (int i = 0; i < p->nops; i++)
        if (!strcmp(p->ops[i]->def->type, "distributed_lookup_table")) FL_CHECK(fl__attr_set_i(p->ops[i], "is_test", 1));
    p->version++;
    return FL_OK;
}

/* Appends op `type` with list slot `slot` (and the same list as output `oslot` if given)
 * and the attributes ps_id and tables. */
/* The first data variable of p with a batch dimension (NULL if none): ps_send and ps_geo
 * read its rows to count examples. */
static fl_var *batch_var(fl_prog *p)
{
    for (int i = 0; i < p->nvars; i++)
        if (p->vars[i]->is_data && p->vars[i]->ndim >= 1) return p->vars[i];
    return NULL;
}

/* cond (may be NULL): the op runs only on steps where it holds (ps_send under AMP float16's
 * all-finite flag, as the update ops it replaces) */
static int append_list_op(fl__ps_ctx *c, fl_prog *p, const char *type, const char *slot, const char *oslot, fl_var **vs,
                          const int64_t *tables, int n, int64_t k_steps, fl_var *cond)
{
    fl_var *bv = strcmp(type, "ps_send") && strcmp(type, "ps_geo") ? NULL : batch_var(p);
    fl_io in[2] = {{slot, vs, n}, {"Batch", &bv, 1}}, out = {oslot, vs, n};
    fl_op *op = fl__op_new(p, type, slot ? in : NULL, slot ? (bv ? 2 : 1) : 0, oslot ? &out : NULL, oslot ? 1 : 0);
    if (!op) return fl_prog_status(p->main ? p->main : p);
    FL_CHECK(set_ps_attrs(c, op));
    FL_CHECK(ints_attr(op, "tables", tables, n));
    if (k_steps > 0) FL_CHECK(fl__attr_set_i(op, "k_steps", k_steps));
    /* sync pushes and GEO exchanges count one step per worker process: train_from_dataset
     * keeps such programs at one trainer thread */
    if ((!strcmp(type, "ps_send") || !strcmp(type, "ps_geo")) && c->mode->single_trainer)
        FL_CHECK(fl__attr_set_i(op, "single_trainer", 1));
    op->cond = cond;
    return fl__op_finish(op);
}

/* A schedule in a server-optimizing mode: the gradients are multiplied by this step's rate
 * before ps_send (ps_lr_scale).  The step counter the schedule reads counts the job's
 * batches, as Paddle's servers count every worker's: it advances by the number of workers
 * per step in the asynchronous modes (by 1 in sync mode, where the workers step together). */
static int append_lr_scale(fl__ps_ctx *c, fl_prog *p, fl_var **grads, int n, fl_var *cond)
{
    fl_io in[2] = {{"Grad", grads, n}, FL_IO1("LearningRate", c->lr_sched)}, out = {"GradOut", grads, n};
    fl_op *op = fl__op_new(p, "ps_lr_scale", in, 2, &out, 1);
    if (!op) return fl_prog_status(p);
    op->cond = cond;
    FL_CHECK(fl__op_finish(op));
    if (c->mode->server_sync || c->worker_num <= 1) return FL_OK;
    fl_var *counter = fl_prog_var(p, "@LR_DECAY_COUNTER@");
    for (int i = 0; counter && i < p->nops; i++)
        if (!strcmp(p->ops[i]->def->type, "increment") && op_writes(p->ops[i], counter))
            FL_CHECK(fl__attr_set_f(p->ops[i], "step", (double)c->worker_num));
    return FL_OK;
}

static int rewrite(fl__ps_ctx *c, fl_opt_hook_ctx *h)
{
    fl_prog *p = h->prog, *sp = p->startup;
    int n = h->npairs, st = FL_OK;
    pinfo *pi = calloc((size_t)(n ? n : 1), sizeof *pi);
    fl_var **vs = calloc((size_t)(n ? n : 1), sizeof *vs), **svs = calloc((size_t)(n ? n : 1), sizeof *svs);
    int64_t *tabs = calloc((size_t)(n ? n : 1), sizeof *tabs);
    if (!pi || !vs || !svs || !tabs) st = fl__prog_error(p, FL_ENOMEM, "out of memory");
    for (int i = 0; st == FL_OK && i < n; i++) {
        pi[i].param = h->pairs[i].param;
        pi[i].grad = h->pairs[i].grad;
        pi[i].upd = find_update(p, h->opt_type, pi[i].param);
        if (!pi[i].upd)
            st = fl__prog_error(p, FL_EINVAL, "parameter server: no %s update op for parameter '%s'", h->opt_type,
                                pi[i].param->name);
        if (st == FL_OK) st = classify(p, &pi[i]);
        if (st == FL_OK && !c->mode->remote_sparse && pi[i].sparse) {
            if (pi[i].distributed)
                st = fl__prog_error(p, FL_EUNSUPPORTED,
                                    "parameter server (%s mode): table '%s' is looked up with "
                                    "is_distributed; %s mode keeps every table on the workers; use "
                                    "is_sparse without is_distributed, or async mode",
                                    c->mode->name, pi[i].param->name, c->mode->name);
            pi[i].sparse = 0; /* a local table, synchronized as a dense one */
        }
        if (st == FL_OK && pi[i].sparse && pi[i].param->ndim != 2)
            st = fl__prog_error(p, FL_EINVAL, "parameter server: sparse table '%s' must be a [vocab, dim] matrix",
                                pi[i].param->name);
    }
    if (st == FL_OK) st = derive_tables(c, p, pi, n);

    if (st == FL_OK && c->mode->server_optimizes) {
        /* the servers optimize: drop the update ops and the state only they used */
        char **names = NULL;
        int nn = 0;
        names = calloc((size_t)n * 8 + 1, sizeof *names);
        if (!names) st = fl__prog_error(p, FL_ENOMEM, "out of memory");
        for (int i = 0; st == FL_OK && i < n; i++) {
            fl_op *u = pi[i].upd;
            for (int s = 2; s < FL_OP_MAX_SLOTS; s++)
                for (int k = 0; k < u->in[s].n && st == FL_OK; k++) {
                    if (s > 2 && u->in[s].vars[k] == pi[i].param) continue;
                    int dup = 0;
                    for (int j = 0; j < nn && !dup; j++) dup = !strcmp(names[j], u->in[s].vars[k]->name);
                    if (!dup && !(names[nn++] = fl__strdup(u->in[s].vars[k]->name)))
                        st = fl__prog_error(p, FL_ENOMEM, "out of memory");
                }
            for (int j = 0; st == FL_OK && j < p->nops; j++)
                if (p->ops[j] == u) {
                    fl__prog_remove_op(p, j);
                    break;
                }
            pi[i].upd = NULL;
        }
        for (int j = 0; st == FL_OK && j < nn; j++) st = drop_if_unused(p, names[j]);
        for (int j = 0; j < nn; j++) free(names[j]);
        free(names);
        /* sparse tables: remote lookups, and the table leaves the worker */
        for (int i = 0; st == FL_OK && i < n; i++) {
            if (!pi[i].sparse) continue;
            char *wname = fl__strdup(pi[i].param->name);
            if (!wname) st = fl__prog_error(p, FL_ENOMEM, "out of memory");
            if (st == FL_OK) st = rewrite_lookups(c, p, pi[i].param, c->params[i].table);
            if (st == FL_OK) pi[i].grad->is_sparse_grad = 1;
            if (st == FL_OK) st = drop_if_unused(p, wname);
            if (st == FL_OK && fl_prog_var(p, wname))
                st = fl__prog_error(p, FL_EUNSUPPORTED, "parameter server: table '%s' is still used after the rewrite",
                                    wname);
            pi[i].param = NULL;
            free(wname);
        }
        /* ps_send: every gradient; ps_recv: every dense parameter */
        int m = 0;
        for (int i = 0; i < n; i++) {
            vs[m] = pi[i].grad;
            tabs[m++] = c->params[i].table;
        }
        if (st == FL_OK && m && c->lr_sched) st = append_lr_scale(c, p, vs, m, h->update_cond);
        if (st == FL_OK && m) st = append_list_op(c, p, "ps_send", "Grad", NULL, vs, tabs, m, 0, h->update_cond);
        m = 0;
        for (int i = 0; i < n; i++)
            if (!c->params[i].sparse) {
                vs[m] = fl_prog_var(p, c->params[i].name);
                tabs[m++] = c->params[i].table;
            }
        if (st == FL_OK && m) st = append_list_op(c, p, "ps_recv", NULL, "Param", vs, tabs, m, 0, NULL);
    } else if (st == FL_OK) {
        for (int i = 0; i < n; i++) {
            vs[i] = pi[i].param;
            tabs[i] = c->params[i].table;
        }
        if (n) st = append_list_op(c, p, "ps_geo", "Param", "ParamOut", vs, tabs, n, c->k_steps, NULL);
    }
    /* startup: the initial exchange of the dense tables */
    int m = 0;
    for (int i = 0; st == FL_OK && i < n; i++)
        if (!c->params[i].sparse) {
            svs[m] = fl_prog_var(sp, c->params[i].name);
            if (!svs[m])
                st = fl__prog_error(p, FL_EINVAL, "parameter server: '%s' is not in the startup program",
                                    c->params[i].name);
            tabs[m++] = c->params[i].table;
        }
    if (st == FL_OK && m) st = append_list_op(c, sp, "ps_init", "Param", "ParamOut", svs, tabs, m, 0, NULL);
    if (st == FL_OK) c->prog = p;
    free(pi);
    free(vs);
    free(svs);
    free(tabs);
    if (st == FL_OK) {
        FL_INFO(FL_SUB_FLEET, "parameter server: %s mode, %d tables (%d parameters) on %d servers", c->mode->name,
                c->ntables, c->nparams, c->nservers);
    }
    return st;
}

static int hook(void *user, int phase, fl_opt_hook_ctx *h)
{
    fl__ps_ctx *c = user;
    if (phase == FL_HOOK_AFTER_BACKWARD) {
        if (c->prog || c->tables)
            return fl__prog_error(h->prog, FL_ESTATE,
                                  "parameter server: this fleet handle already built a program; "
                                  "one fleet handle trains one program");
        if (c->mode->server_optimizes && strcmp(h->opt_type, "sgd") && strcmp(h->opt_type, "momentum") &&
            strcmp(h->opt_type, "adagrad") && strcmp(h->opt_type, "adam"))
            return fl__prog_error(
                h->prog, FL_EUNSUPPORTED,
                "parameter server (%s mode): the servers apply sgd, momentum, adagrad or adam, not %s; use GEO mode "
                "(a_sync=true, a_sync_configs.k_steps > 0) to keep %s on the workers",
                c->mode->name, h->opt_type, h->opt_type);
        return FL_OK;
    }
    if (h->update_cond && c->mode->server_sync)
        return fl__prog_error(h->prog, FL_EUNSUPPORTED,
                              "parameter server (%s mode): the updates run only on some steps (AMP float16 skips a "
                              "step with inf/NaN gradients on one worker), but sync mode's servers wait for every "
                              "worker's push of every step; use async, half-async or GEO mode (a_sync=true), or "
                              "amp_configs.dtype=bfloat16, which needs no loss scaling",
                              c->mode->name);
    return rewrite(c, h);
}

int fl__ps_install(fl__ps_ctx *c, fl_opt *opt)
{
    FL_CHECK(fl__op_register_group(fl__ops_ps));
    return fl__opt_set_hook(opt, hook, c);
}
