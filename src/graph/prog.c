/* prog.c - programs, variables, operators and attributes. */
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

static fl_prog *prog_alloc(void)
{
    fl_prog *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->magic = FL_PROG_MAGIC;
    p->seed = 1;
    return p;
}

fl_prog *fl_prog_create(void)
{
    fl_prog *p = prog_alloc();
    if (!p || !(p->startup = prog_alloc())) {
        free(p);
        fl__err(FL_ENOMEM, "fl_prog_create: out of memory");
        return NULL;
    }
    p->startup->main = p;
    return p;
}

static void op_free(fl_op *op)
{
    if (!op) return;
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
        free(op->in[s].vars);
        free(op->out[s].vars);
    }
    for (int i = 0; i < op->nattr; i++) {
        free(op->attr[i].name);
        free(op->attr[i].s);
        free(op->attr[i].ints);
        free(op->attr[i].floats);
    }
    free(op);
}

static void prog_free1(fl_prog *p)
{
    for (int i = 0; i < p->nops; i++) op_free(p->ops[i]);
    for (int i = 0; i < p->nvars; i++) {
        free(p->vars[i]->name);
        p->vars[i]->magic = 0;
        free(p->vars[i]);
    }
    for (int i = 0; i < p->nassign; i++) free(p->assign_vals[i]);
    free(p->assign_vals);
    free(p->assign_n);
    free(p->ops);
    free(p->vars);
    fl__strmap_free(&p->names);
    fl__strmap_free(&p->uniq);
    p->magic = 0;
    free(p);
}

void fl_prog_free(fl_prog *p)
{
    if (!p || p->magic != FL_PROG_MAGIC) return;
    if (p->startup) prog_free1(p->startup);
    prog_free1(p);
}

/* Handle checks for the accessors: NULL or a freed handle is an error naming the call. */
static int prog_ok(const fl_prog *p, const char *fn)
{
    if (p && p->magic == FL_PROG_MAGIC) return 1;
    fl__err_handle(p, "%s: program is NULL or invalid", fn);
    return 0;
}
static int var_ok(const fl_var *v, const char *fn)
{
    if (v && v->magic == FL_VAR_MAGIC) return 1;
    fl__err_handle(v, "%s: variable is NULL or invalid", fn);
    return 0;
}

fl_prog *fl_prog_startup(fl_prog *p) { return prog_ok(p, "fl_prog_startup") ? p->startup : NULL; }
void fl_prog_set_seed(fl_prog *p, uint64_t seed)
{
    if (!prog_ok(p, "fl_prog_set_seed")) return;
    p->seed = seed;
    if (p->startup) p->startup->seed = seed;
    p->version++;
}
int fl_prog_status(const fl_prog *p) { return prog_ok(p, "fl_prog_status") ? p->status : FL_EINVAL; }
const char *fl_prog_error(const fl_prog *p) { return p ? p->err : "program is NULL"; }

int fl__prog_error(fl_prog *p, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p && p->main) p = p->main;
    if (p && p->status == FL_OK) {
        p->status = status;
        snprintf(p->err, sizeof p->err, "%s", msg);
    }
    return fl__err(status, "%s", msg);
}

int fl__op_error(fl_op *op, const char *fmt, ...)
{
    char msg[448];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fl__prog_error(op->prog, FL_EINVAL, "%s: %s", op->def->type, msg);
}

/* ---- variables ------------------------------------------------------------------------ */

fl_var *fl_prog_var(const fl_prog *p, const char *name)
{
    int64_t i;
    if (!prog_ok(p, "fl_prog_var")) return NULL;
    if (!name) {
        fl__err(FL_EINVAL, "fl_prog_var: name is NULL");
        return NULL;
    }
    if (!fl__strmap_get(&p->names, name, &i)) return NULL;
    return p->vars[i];
}
int fl_prog_num_vars(const fl_prog *p) { return prog_ok(p, "fl_prog_num_vars") ? p->nvars : FL_EINVAL; }
fl_var *fl_prog_var_at(const fl_prog *p, int i)
{
    if (!prog_ok(p, "fl_prog_var_at")) return NULL;
    return (i >= 0 && i < p->nvars) ? p->vars[i] : NULL;
}
int fl_prog_num_ops(const fl_prog *p) { return prog_ok(p, "fl_prog_num_ops") ? p->nops : FL_EINVAL; }
const char *fl_prog_op_type(const fl_prog *p, int i)
{
    if (!prog_ok(p, "fl_prog_op_type")) return NULL;
    return (i >= 0 && i < p->nops) ? p->ops[i]->def->type : NULL;
}

/* The variable queries: for a NULL or freed variable, NULL, FL_FLOAT32, FL_EINVAL (counts)
 * or 0 (predicates), with fl_last_error() set. */
const char *fl_var_name(const fl_var *v) { return var_ok(v, "fl_var_name") ? v->name : NULL; }
fl_dtype fl_var_dtype(const fl_var *v) { return var_ok(v, "fl_var_dtype") ? v->dtype : FL_FLOAT32; }
int fl_var_ndim(const fl_var *v) { return var_ok(v, "fl_var_ndim") ? v->ndim : FL_EINVAL; }
const int64_t *fl_var_shape(const fl_var *v) { return var_ok(v, "fl_var_shape") ? v->shape : NULL; }
int fl_var_lod_level(const fl_var *v) { return var_ok(v, "fl_var_lod_level") ? v->lod_level : FL_EINVAL; }
int fl_var_persistable(const fl_var *v) { return var_ok(v, "fl_var_persistable") ? v->persistable : 0; }
int fl_var_is_param(const fl_var *v) { return var_ok(v, "fl_var_is_param") ? v->is_param : 0; }
void fl_var_set_stop_gradient(fl_var *v, int stop)
{
    if (!var_ok(v, "fl_var_set_stop_gradient")) return;
    v->stop_gradient = stop;
    v->prog->version++;
}
int fl_var_stop_gradient(const fl_var *v) { return var_ok(v, "fl_var_stop_gradient") ? v->stop_gradient : 0; }
fl_prog *fl_var_prog(const fl_var *v) { return var_ok(v, "fl_var_prog") ? v->prog : NULL; }

void fl__var_set_shape(fl_var *v, fl_dtype dt, int ndim, const int64_t *shape)
{
    v->dtype = dt;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->shape[i] = shape[i];
}

fl_var *fl__var_create(fl_prog *p, const char *name, fl_dtype dt, int ndim, const int64_t *shape)
{
    if (fl_prog_var(p, name)) {
        fl__prog_error(p, FL_EINVAL, "variable '%s' already exists in the program", name);
        return NULL;
    }
    if (ndim < 0 || ndim > FL_MAX_DIMS) {
        fl__prog_error(p, FL_EINVAL, "variable '%s': rank %d out of range [0, %d]", name, ndim, FL_MAX_DIMS);
        return NULL;
    }
    if (p->nvars == p->cap_vars) {
        int nc = p->cap_vars ? p->cap_vars * 2 : 32;
        fl_var **nv = realloc(p->vars, (size_t)nc * sizeof *nv);
        if (!nv) goto oom;
        p->vars = nv;
        p->cap_vars = nc;
    }
    fl_var *v = calloc(1, sizeof *v);
    if (!v || !(v->name = fl__strdup(name))) {
        free(v);
        goto oom;
    }
    v->magic = FL_VAR_MAGIC;
    v->prog = p;
    v->lr_scale = 1.0f;
    fl__var_set_shape(v, dt, ndim, shape);
    v->idx = p->nvars;
    if (fl__strmap_put(&p->names, name, v->idx) != FL_OK) {
        free(v->name);
        free(v);
        goto oom;
    }
    p->vars[p->nvars++] = v;
    p->version++;
    return v;
oom:
    fl__prog_error(p, FL_ENOMEM, "out of memory creating variable '%s'", name);
    return NULL;
}

void fl__unique_name(fl_prog *p, const char *prefix, char *out, size_t cap)
{
    fl_prog *m = p->main ? p->main : p;
    int64_t k = 0;
    fl__strmap_get(&m->uniq, prefix, &k);
    fl__strmap_put(&m->uniq, prefix, k + 1);
    snprintf(out, cap, "%s_%lld", prefix, (long long)k);
}

fl_var *fl__tmp_var(fl_prog *p, const char *base, fl_dtype dt, int ndim, const int64_t *shape)
{
    char pre[200], name[256];
    snprintf(pre, sizeof pre, "%s.tmp", base);
    do fl__unique_name(p, pre, name, sizeof name);
    while (fl_prog_var(p, name));
    return fl__var_create(p, name, dt, ndim, shape);
}

fl_var *fl__var_mirror(fl_prog *dst, const fl_var *v)
{
    fl_var *d = fl_prog_var(dst, v->name);
    if (d) return d;
    d = fl__var_create(dst, v->name, v->dtype, v->ndim, v->shape);
    if (!d) return NULL;
    d->lod_level = v->lod_level;
    d->persistable = v->persistable;
    d->stop_gradient = v->stop_gradient;
    d->is_param = v->is_param;
    d->is_data = v->is_data;
    d->is_sparse_grad = v->is_sparse_grad;
    d->lr_scale = v->lr_scale;
    d->l2_decay = v->l2_decay;
    d->l1_decay = v->l1_decay;
    return d;
}

fl_prog *fl__prog_of(fl_var *const *vars, int n)
{
    if (!vars || n <= 0) return NULL;
    for (int i = 0; i < n; i++)
        if (!vars[i] || vars[i]->magic != FL_VAR_MAGIC) return NULL;
    return vars[0]->prog;
}

int fl__shapes_equal(const fl_var *a, const fl_var *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] && a->shape[i] >= 0 && b->shape[i] >= 0) return 0;
    return 1;
}

void fl__shape_str(const fl_var *v, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < v->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)v->shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* ---- attributes ------------------------------------------------------------------------ */

static fl_attr *attr_slot(fl_op *op, const char *name)
{
    for (int i = 0; i < op->nattr; i++)
        if (!strcmp(op->attr[i].name, name)) {
            fl_attr *a = &op->attr[i];
            free(a->s);
            free(a->ints);
            free(a->floats);
            a->s = NULL;
            a->ints = NULL;
            a->floats = NULL;
            a->n = 0;
            return a;
        }
    if (op->nattr == FL_OP_MAX_ATTRS) return NULL;
    fl_attr *a = &op->attr[op->nattr];
    memset(a, 0, sizeof *a);
    if (!(a->name = fl__strdup(name))) return NULL;
    op->nattr++;
    return a;
}

#define ATTR_OR_FAIL(a) \
    if (!(a)) return fl__op_error(op, "cannot set attribute '%s' (too many attributes or no memory)", name)

int fl__attr_set_i(fl_op *op, const char *name, int64_t v)
{
    fl_attr *a = attr_slot(op, name);
    ATTR_OR_FAIL(a);
    a->type = FL_ATTR_INT;
    a->i = v;
    return FL_OK;
}

int fl__attr_set_f(fl_op *op, const char *name, double v)
{
    fl_attr *a = attr_slot(op, name);
    ATTR_OR_FAIL(a);
    a->type = FL_ATTR_FLOAT;
    a->f = v;
    return FL_OK;
}

int fl__attr_set_s(fl_op *op, const char *name, const char *v)
{
    fl_attr *a = attr_slot(op, name);
    ATTR_OR_FAIL(a);
    a->type = FL_ATTR_STR;
    a->s = fl__strdup(v ? v : "");
    return a->s ? FL_OK : fl__op_error(op, "out of memory");
}

int fl__attr_set_ints(fl_op *op, const char *name, const int64_t *v, int n)
{
    fl_attr *a = attr_slot(op, name);
    ATTR_OR_FAIL(a);
    a->type = FL_ATTR_INTS;
    a->ints = malloc((size_t)(n > 0 ? n : 1) * sizeof *a->ints);
    if (!a->ints) return fl__op_error(op, "out of memory");
    if (n > 0) memcpy(a->ints, v, (size_t)n * sizeof *v);
    a->n = n;
    return FL_OK;
}

int fl__attr_set_floats(fl_op *op, const char *name, const float *v, int n)
{
    fl_attr *a = attr_slot(op, name);
    ATTR_OR_FAIL(a);
    a->type = FL_ATTR_FLOATS;
    a->floats = malloc((size_t)(n > 0 ? n : 1) * sizeof *a->floats);
    if (!a->floats) return fl__op_error(op, "out of memory");
    if (n > 0) memcpy(a->floats, v, (size_t)n * sizeof *v);
    a->n = n;
    return FL_OK;
}

const fl_attr *fl__attr_find(const fl_op *op, const char *name)
{
    for (int i = 0; i < op->nattr; i++)
        if (!strcmp(op->attr[i].name, name)) return &op->attr[i];
    return NULL;
}

int64_t fl__attr_i(const fl_op *op, const char *name, int64_t def)
{
    const fl_attr *a = fl__attr_find(op, name);
    if (!a) return def;
    return a->type == FL_ATTR_INT ? a->i : a->type == FL_ATTR_FLOAT ? (int64_t)a->f : def;
}

double fl__attr_f(const fl_op *op, const char *name, double def)
{
    const fl_attr *a = fl__attr_find(op, name);
    if (!a) return def;
    return a->type == FL_ATTR_FLOAT ? a->f : a->type == FL_ATTR_INT ? (double)a->i : def;
}

const char *fl__attr_s(const fl_op *op, const char *name, const char *def)
{
    const fl_attr *a = fl__attr_find(op, name);
    return (a && a->type == FL_ATTR_STR) ? a->s : def;
}

/* ---- operators ------------------------------------------------------------------------- */

static int slot_index(const char *const *names, const char *slot)
{
    for (int i = 0; i < FL_OP_MAX_SLOTS && names[i]; i++)
        if (!strcmp(names[i], slot)) return i;
    return -1;
}

static int fill_slots(fl_prog *p, const fl_op_def *def, fl_slot *dst, const char *const *names, const fl_io *ios, int n,
                      const char *what)
{
    for (int i = 0; i < n; i++) {
        int s = slot_index(names, ios[i].slot);
        if (s < 0) return fl__prog_error(p, FL_EINVAL, "%s: unknown %s slot '%s'", def->type, what, ios[i].slot);
        for (int k = 0; k < ios[i].n; k++) {
            fl_var *v = ios[i].vars[k];
            if (!v || v->magic != FL_VAR_MAGIC)
                return fl__prog_error(p, FL_EINVAL, "%s: %s '%s' #%d is not a variable", def->type, what, ios[i].slot, k);
            if (v->prog != p)
                return fl__prog_error(p, FL_EINVAL, "%s: %s '%s' variable '%s' belongs to another program", def->type, what,
                                      ios[i].slot, v->name);
        }
        fl_var **vs = malloc((size_t)(ios[i].n > 0 ? ios[i].n : 1) * sizeof *vs);
        if (!vs) return fl__prog_error(p, FL_ENOMEM, "out of memory");
        if (ios[i].n) memcpy(vs, ios[i].vars, (size_t)ios[i].n * sizeof *vs);
        free(dst[s].vars);
        dst[s].vars = vs;
        dst[s].n = ios[i].n;
    }
    return FL_OK;
}

fl_op *fl__op_new(fl_prog *p, const char *type, const fl_io *ins, int nins, const fl_io *outs, int nouts)
{
    if (p->status != FL_OK && !p->main) return NULL;
    const fl_op_def *def = fl__op_lookup(type);
    if (!def) {
        fl__prog_error(p, FL_ENOTFOUND, "unknown operator type '%s'", type);
        return NULL;
    }
    fl_op *op = calloc(1, sizeof *op);
    if (!op) {
        fl__prog_error(p, FL_ENOMEM, "out of memory");
        return NULL;
    }
    op->def = def;
    op->prog = p;
    op->role = p->cur_role;
    if (fill_slots(p, def, op->in, def->in_names, ins, nins, "input") != FL_OK ||
        fill_slots(p, def, op->out, def->out_names, outs, nouts, "output") != FL_OK)
        goto fail;
    if (p->nops == p->cap_ops) {
        int nc = p->cap_ops ? p->cap_ops * 2 : 32;
        fl_op **no = realloc(p->ops, (size_t)nc * sizeof *no);
        if (!no) {
            fl__prog_error(p, FL_ENOMEM, "out of memory");
            goto fail;
        }
        p->ops = no;
        p->cap_ops = nc;
    }
    p->ops[p->nops++] = op;
    p->version++;
    return op;
fail:
    op_free(op);
    return NULL;
}

int fl__op_finish(fl_op *op)
{
    fl_prog *p = op->prog;
    int st = op->def->infer ? op->def->infer(op) : FL_OK;
    if (st != FL_OK) {
        if (p->nops && p->ops[p->nops - 1] == op) p->nops--;
        op_free(op);
        fl_prog *m = p->main ? p->main : p;
        if (m->status == FL_OK) fl__prog_error(p, st, "operator failed shape inference");
        return st;
    }
    p->version++;
    return FL_OK;
}

fl_op *fl__op_append(fl_prog *p, const char *type, const fl_io *ins, int nins, const fl_io *outs, int nouts)
{
    fl_op *op = fl__op_new(p, type, ins, nins, outs, nouts);
    if (!op || fl__op_finish(op) != FL_OK) return NULL;
    return op;
}

void fl__prog_set_role(fl_prog *p, int role) { p->cur_role = role; }

void fl__prog_remove_op(fl_prog *p, int i)
{
    if (i < 0 || i >= p->nops) return;
    op_free(p->ops[i]);
    memmove(p->ops + i, p->ops + i + 1, (size_t)(p->nops - i - 1) * sizeof *p->ops);
    p->nops--;
    p->version++;
}

int fl__prog_remove_var(fl_prog *p, fl_var *v)
{
    int i = v->idx;
    fl__strmap_del(&p->names, v->name);
    free(v->name);
    v->magic = 0;
    free(v);
    memmove(p->vars + i, p->vars + i + 1, (size_t)(p->nvars - i - 1) * sizeof *p->vars);
    p->nvars--;
    for (int k = i; k < p->nvars; k++) {
        p->vars[k]->idx = k;
        if (fl__strmap_put(&p->names, p->vars[k]->name, k) != FL_OK)
            return fl__prog_error(p, FL_ENOMEM, "out of memory rewriting the program");
    }
    p->version++;
    return FL_OK;
}

int fl__prog_move_last_op(fl_prog *p, int pos)
{
    if (p->nops == 0 || pos < 0 || pos >= p->nops) return fl__err(FL_EINVAL, "move op: position %d out of range", pos);
    fl_op *op = p->ops[p->nops - 1];
    memmove(p->ops + pos + 1, p->ops + pos, (size_t)(p->nops - 1 - pos) * sizeof *p->ops);
    p->ops[pos] = op;
    p->version++;
    return FL_OK;
}

int fl__infer_nop(fl_op *op)
{
    (void)op;
    return FL_OK;
}

const char *fl__kctx_var_name(const fl_kctx *c, int slot, int out)
{
    const fl_slot *s = out ? &c->op->out[slot] : &c->op->in[slot];
    return s->n ? s->vars[0]->name : "?";
}

int fl__kctx_dense_f32(const fl_kctx *c, int slot)
{
    const fl_tensor *t = FL_IN(c, slot);
    if (!t) return fl__err(FL_EINVAL, "%s: input %s is missing", c->op->def->type, c->op->def->in_names[slot]);
    if (t->dtype != FL_FLOAT32 || t->is_rows)
        return fl__err(FL_EINVAL, "%s: input '%s' must be a dense float32 tensor, is %s%s", c->op->def->type,
                       fl__kctx_var_name(c, slot, 0), fl_dtype_name(t->dtype), t->is_rows ? " SelectedRows" : "");
    return FL_OK;
}

int fl__op_need_f32(fl_op *op, const fl_var *v)
{
    if (v->dtype == FL_FLOAT32) return FL_OK;
    return fl__op_error(op, "input '%s' must be float32, is %s", v->name, fl_dtype_name(v->dtype));
}

int fl__op_check_slots(fl_op *op)
{
    const fl_op_def *d = op->def;
    for (int s = 0; s < FL_OP_MAX_SLOTS && d->in_names[s]; s++)
        if (op->in[s].n != 1)
            return fl__op_error(op, "input '%s' needs exactly one variable, got %d", d->in_names[s], op->in[s].n);
    for (int s = 0; s < FL_OP_MAX_SLOTS && d->out_names[s]; s++)
        if (op->out[s].n != 1)
            return fl__op_error(op, "output '%s' needs exactly one variable, got %d", d->out_names[s], op->out[s].n);
    return FL_OK;
}

int fl__var_rename(fl_var *v, const char *name)
{
    fl_prog *p = v->prog;
    if (fl_prog_var(p, name)) return fl__prog_error(p, FL_EINVAL, "cannot rename '%s': '%s' exists", v->name, name);
    char *nn = fl__strdup(name);
    if (!nn || fl__strmap_put(&p->names, name, v->idx) != FL_OK) {
        free(nn);
        return fl__prog_error(p, FL_ENOMEM, "out of memory");
    }
    fl__strmap_del(&p->names, v->name);
    free(v->name);
    v->name = nn;
    p->version++;
    return FL_OK;
}
