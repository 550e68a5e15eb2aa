/* params.c - parameters, persistable state variables, initializers and program clone. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

fl_initializer fl_init_constant(float v) { return (fl_initializer){FL_INIT_CONSTANT, v, 0, 0}; }
fl_initializer fl_init_uniform(float lo, float hi) { return (fl_initializer){FL_INIT_UNIFORM, lo, hi, 0}; }
fl_initializer fl_init_normal(float m, float s) { return (fl_initializer){FL_INIT_NORMAL, m, s, 0}; }
fl_initializer fl_init_truncated_normal(float m, float s) { return (fl_initializer){FL_INIT_TRUNCATED_NORMAL, m, s, 0}; }
fl_initializer fl_init_xavier(int normal) { return (fl_initializer){FL_INIT_XAVIER, (float)(normal != 0), 0, 0}; }

/* Appends the initializer op for var `sv` of the startup program. */
static int append_init(fl_prog *sp, fl_var *sv, fl_initializer in, int64_t fan_in, int64_t fan_out)
{
    const char *type;
    float a = in.a, b = in.b;
    switch (in.kind) {
    case FL_INIT_CONSTANT: type = "fill_constant"; break;
    case FL_INIT_UNIFORM: type = "uniform_random"; break;
    case FL_INIT_NORMAL: type = "gaussian_random"; break;
    case FL_INIT_TRUNCATED_NORMAL: type = "truncated_gaussian_random"; break;
    case FL_INIT_ASSIGN: return fl__init_assign_append(sp, sv, in.seed);
    case FL_INIT_XAVIER: {
        double fi = (double)(fan_in > 0 ? fan_in : 1), fo = (double)(fan_out > 0 ? fan_out : 1);
        if (in.a != 0.0f) {
            type = "gaussian_random";
            a = 0.0f;
            b = (float)sqrt(2.0 / (fi + fo));
        } else {
            type = "uniform_random";
            b = (float)sqrt(6.0 / (fi + fo));
            a = -b;
        }
        break;
    }
    default: return fl__prog_error(sp, FL_EINVAL, "variable '%s': unknown initializer kind %d", sv->name, (int)in.kind);
    }
    fl_io out = FL_IO1("Out", sv);
    fl_op *op = fl__op_new(sp, type, NULL, 0, &out, 1);
    if (!op) return fl_prog_status(sp->main ? sp->main : sp);
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, sv->shape, sizeof shape);
    FL_CHECK(fl__attr_set_ints(op, "shape", shape, sv->ndim));
    FL_CHECK(fl__attr_set_i(op, "dtype", sv->dtype));
    if (!strcmp(type, "fill_constant")) {
        FL_CHECK(fl__attr_set_f(op, "value", a));
    } else if (!strcmp(type, "uniform_random")) {
        FL_CHECK(fl__attr_set_f(op, "min", a));
        FL_CHECK(fl__attr_set_f(op, "max", b));
    } else {
        FL_CHECK(fl__attr_set_f(op, "mean", a));
        FL_CHECK(fl__attr_set_f(op, "std", b));
    }
    if (strcmp(type, "fill_constant") != 0) FL_CHECK(fl__attr_set_i(op, "seed", (int64_t)in.seed));
    return fl__op_finish(op);
}

static fl_var *persist_pair(fl_prog *p, const char *name, fl_dtype dt, int ndim, const int64_t *shape)
{
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) {
            fl__prog_error(p, FL_EINVAL, "persistable variable '%s': dimension %d must be positive, got %lld", name, i,
                           (long long)shape[i]);
            return NULL;
        }
    fl_var *v = fl_prog_var(p, name);
    if (v) {
        fl__prog_error(p, FL_EINVAL, "variable '%s' already exists in the program", name);
        return NULL;
    }
    v = fl__var_create(p, name, dt, ndim, shape);
    if (!v) return NULL;
    v->persistable = 1;
    v->stop_gradient = 1;
    fl_var *sv = fl__var_mirror(p->startup, v);
    return sv ? v : NULL;
}

fl_var *fl__param_create(fl_prog *p, const char *name, int ndim, const int64_t *shape, const fl_param_attr *attr,
                         fl_initializer def_init, int64_t fan_in, int64_t fan_out)
{
    if (!p->startup) {
        fl__prog_error(p, FL_EINVAL, "parameters can only be created in a main program");
        return NULL;
    }
    fl_param_attr none;
    memset(&none, 0, sizeof none);
    if (!attr) attr = &none;
    fl_var *old = fl_prog_var(p, name);
    if (old) {
        /* Paddle semantics: naming an existing parameter shares it, if the shapes agree */
        int same = old->is_param && old->ndim == ndim;
        for (int i = 0; same && i < ndim; i++) same = old->shape[i] == shape[i];
        if (same) return old;
        char have[96], want[96] = "[";
        fl__shape_str(old, have, sizeof have);
        for (int i = 0; i < ndim; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)shape[i]);
        snprintf(want + strlen(want), sizeof want - strlen(want), "]");
        fl__prog_error(p, FL_EINVAL, "parameter '%s' already exists with shape %s%s; this use needs shape %s", name, have,
                       old->is_param ? "" : " (and is not a parameter)", want);
        return NULL;
    }
    fl_var *v = persist_pair(p, name, FL_FLOAT32, ndim, shape);
    if (!v) return NULL;
    v->is_param = 1;
    v->stop_gradient = attr->frozen ? 1 : 0;
    v->lr_scale = attr->learning_rate > 0 ? attr->learning_rate : 1.0f;
    v->l2_decay = attr->l2_decay;
    v->l1_decay = attr->l1_decay;
    fl_var *sv = fl_prog_var(p->startup, name);
    sv->is_param = 1;
    sv->stop_gradient = v->stop_gradient;
    sv->lr_scale = v->lr_scale;
    sv->l2_decay = v->l2_decay;
    fl_initializer in = attr->init.kind == FL_INIT_DEFAULT ? def_init : attr->init;
    if (append_init(p->startup, sv, in, fan_in, fan_out) != FL_OK) return NULL;
    return v;
}

fl_var *fl__persistable_create(fl_prog *p, const char *name, fl_dtype dt, int ndim, const int64_t *shape, float value)
{
    if (!p->startup) {
        fl__prog_error(p, FL_EINVAL, "persistable state can only be created in a main program");
        return NULL;
    }
    fl_var *v = persist_pair(p, name, dt, ndim, shape);
    if (!v) return NULL;
    if (append_init(p->startup, fl_prog_var(p->startup, name), fl_init_constant(value), 0, 0) != FL_OK) return NULL;
    return v;
}

/* ---- clone -------------------------------------------------------------------------------- */

static fl_prog *clone1(const fl_prog *src, int for_test)
{
    fl_prog *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->magic = FL_PROG_MAGIC;
    d->seed = src->seed;
    for (int i = 0; i < src->nvars; i++)
        if (!fl__var_mirror(d, src->vars[i])) goto fail;
    for (size_t i = 0; i < src->uniq.cap; i++)
        if (src->uniq.keys[i] && fl__strmap_put(&d->uniq, src->uniq.keys[i], src->uniq.vals[i]) != FL_OK) goto fail;
    for (int i = 0; i < src->nops; i++) {
        const fl_op *so = src->ops[i];
        if (for_test && so->role != FL_ROLE_FORWARD) continue;
        fl_op *o = calloc(1, sizeof *o);
        if (!o) goto fail;
        o->def = so->def;
        o->prog = d;
        o->role = so->role;
        if (d->nops == d->cap_ops) {
            int nc = d->cap_ops ? d->cap_ops * 2 : 32;
            fl_op **no = realloc(d->ops, (size_t)nc * sizeof *no);
            if (!no) {
                free(o);
                goto fail;
            }
            d->ops = no;
            d->cap_ops = nc;
        }
        d->ops[d->nops++] = o;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
            const fl_slot *ss[2] = {&so->in[s], &so->out[s]};
            fl_slot *ds[2] = {&o->in[s], &o->out[s]};
            for (int w = 0; w < 2; w++) {
                if (!ss[w]->n) continue;
                ds[w]->vars = malloc((size_t)ss[w]->n * sizeof(fl_var *));
                if (!ds[w]->vars) goto fail;
                ds[w]->n = ss[w]->n;
                for (int k = 0; k < ss[w]->n; k++) ds[w]->vars[k] = fl_prog_var(d, ss[w]->vars[k]->name);
            }
        }
        for (int a = 0; a < so->nattr; a++) {
            const fl_attr *sa = &so->attr[a];
            int st = FL_OK;
            switch (sa->type) {
            case FL_ATTR_INT: st = fl__attr_set_i(o, sa->name, sa->i); break;
            case FL_ATTR_FLOAT: st = fl__attr_set_f(o, sa->name, sa->f); break;
            case FL_ATTR_STR: st = fl__attr_set_s(o, sa->name, sa->s); break;
            case FL_ATTR_INTS: st = fl__attr_set_ints(o, sa->name, sa->ints, sa->n); break;
            case FL_ATTR_FLOATS: st = fl__attr_set_floats(o, sa->name, sa->floats, sa->n); break;
            }
            if (st != FL_OK) goto fail;
        }
        if (for_test && fl__attr_find(o, "is_test") && fl__attr_set_i(o, "is_test", 1) != FL_OK) goto fail;
        if (so->cond) o->cond = fl_prog_var(d, so->cond->name);
    }
    return d;
fail:
    d->startup = NULL;
    fl_prog_free(d);
    return NULL;
}

fl_prog *fl_prog_clone(const fl_prog *p, int for_test)
{
    if (!p || p->magic != FL_PROG_MAGIC) {
        fl__err_handle(p, "fl_prog_clone: program is NULL or invalid");
        return NULL;
    }
    fl_prog *d = clone1(p, for_test);
    if (!d) {
        fl__err(FL_ENOMEM, "fl_prog_clone: out of memory");
        return NULL;
    }
    if (for_test && p->status == FL_OK && fl__infer_fuse(d) < 0) {
        fl_prog_free(d);
        return NULL;
    }
    if (p->startup) {
        d->startup = clone1(p->startup, 0);
        if (!d->startup) {
            fl_prog_free(d);
            fl__err(FL_ENOMEM, "fl_prog_clone: out of memory");
            return NULL;
        }
        d->startup->main = d;
    }
    d->status = p->status;
    memcpy(d->err, p->err, sizeof d->err);
    return d;
}
