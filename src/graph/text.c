/*
 * text.c - the readable program text format and pruning.  The format (one "var" line per
 * variable, one "op" line per operator, typed attributes; docs/program_format.md) is
 * generic over op types, slots and attributes.  Parsing rebuilds every op through
 * fl__op_new / attributes / fl__op_finish, so shape inference checks the program again;
 * every parse error is FL_ECORRUPT naming the line.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

static const char *const role_names[] = {"forward", "backward", "optimize", "lrsched"};
#define NROLES 4
static const struct {
    const char *name;
    size_t off;
} var_flags[] = {{"persistable", offsetof(fl_var, persistable)},
                 {"param", offsetof(fl_var, is_param)},
                 {"data", offsetof(fl_var, is_data)},
                 {"stop_gradient", offsetof(fl_var, stop_gradient)},
                 {"sparse_grad", offsetof(fl_var, is_sparse_grad)}};
#define VAR_FLAG(v, k) (*(int *)((char *)(v) + var_flags[k].off))

/* ---- writing ------------------------------------------------------------------------------ */

static int bare_char(unsigned char c) { return c > 0x20 && c != 0x7f && !strchr("\"=,[]#\\", c); }

static void put_quoted(fl_buf *b, const char *s)
{
    fl__buf_put(b, "\"", 1);
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        if (*u == '"' || *u == '\\') fl__buf_printf(b, "\\%c", *u);
        else if (*u == '\n') fl__buf_put(b, "\\n", 2);
        else if (*u == '\t') fl__buf_put(b, "\\t", 2);
        else if (*u == '\r') fl__buf_put(b, "\\r", 2);
        else if (*u < 0x20 || *u == 0x7f) fl__buf_printf(b, "\\x%02x", *u);
        else fl__buf_put(b, u, 1);
    }
    fl__buf_put(b, "\"", 1);
}

static void put_name(fl_buf *b, const char *s)
{
    int bare = *s != 0;
    for (const unsigned char *u = (const unsigned char *)s; *u && bare; u++) bare = bare_char(*u);
    if (bare) fl__buf_put(b, s, strlen(s));
    else put_quoted(b, s);
}

/* Shortest decimal that reads back exactly: as a float (%.9g at most) or a double. */
static void put_num(fl_buf *b, double v, int single)
{
    char t[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(t, sizeof t, "%.*g", prec, v);
        if (single ? strtof(t, NULL) == (float)v : strtod(t, NULL) == v) break;
    }
    fl__buf_put(b, t, strlen(t));
}

static void put_shape(fl_buf *b, int ndim, const int64_t *shape)
{
    fl__buf_put(b, "[", 1);
    for (int i = 0; i < ndim; i++) fl__buf_printf(b, "%s%lld", i ? "," : "", (long long)shape[i]);
    fl__buf_put(b, "]", 1);
}

static void put_var(fl_buf *b, const fl_var *v)
{
    fl__buf_put(b, "var ", 4);
    put_name(b, v->name);
    fl__buf_printf(b, " %s ", fl_dtype_name(v->dtype));
    put_shape(b, v->ndim, v->shape);
    if (v->lod_level) fl__buf_printf(b, " lod=%d", v->lod_level);
    for (int k = 0; k < 5; k++)
        if (VAR_FLAG(v, k)) fl__buf_printf(b, " %s", var_flags[k].name);
    if (v->lr_scale != 1.0f) {
        fl__buf_put(b, " lr_scale=", 10);
        put_num(b, v->lr_scale, 1);
    }
    if (v->l2_decay != 0.0f || signbit(v->l2_decay)) {
        fl__buf_put(b, " l2_decay=", 10);
        put_num(b, v->l2_decay, 1);
    }
    if (v->l1_decay != 0.0f || signbit(v->l1_decay)) {
        fl__buf_put(b, " l1_decay=", 10);
        put_num(b, v->l1_decay, 1);
    }
    fl__buf_put(b, "\n", 1);
}

static void put_slots(fl_buf *b, const char *kw, const char *const *names, const fl_slot *slots)
{
    int any = 0;
    for (int s = 0; s < FL_OP_MAX_SLOTS && names[s]; s++) {
        if (!slots[s].n) continue;
        if (!any++) fl__buf_printf(b, " %s", kw);
        fl__buf_put(b, " ", 1);
        put_name(b, names[s]);
        fl__buf_put(b, "=", 1);
        for (int k = 0; k < slots[s].n; k++) {
            if (k) fl__buf_put(b, ",", 1);
            put_name(b, slots[s].vars[k]->name);
        }
    }
}

static void put_attr(fl_buf *b, const fl_attr *a)
{
    fl__buf_put(b, " ", 1);
    put_name(b, a->name);
    switch (a->type) {
    case FL_ATTR_INT: fl__buf_printf(b, "=int:%lld", (long long)a->i); break;
    case FL_ATTR_FLOAT:
        /* a double that is exactly a float is written in float precision (short and exact) */
        if (isnan(a->f) || (double)(float)a->f == a->f) {
            fl__buf_put(b, "=float:", 7);
            put_num(b, a->f, 1);
        } else {
            fl__buf_put(b, "=double:", 8);
            put_num(b, a->f, 0);
        }
        break;
    case FL_ATTR_STR:
        fl__buf_put(b, "=str:", 5);
        put_quoted(b, a->s ? a->s : "");
        break;
    case FL_ATTR_INTS:
        fl__buf_put(b, "=ints:", 6);
        put_shape(b, a->n, a->ints);
        break;
    case FL_ATTR_FLOATS:
        fl__buf_put(b, "=floats:[", 9);
        for (int k = 0; k < a->n; k++) {
            if (k) fl__buf_put(b, ",", 1);
            put_num(b, a->floats[k], 1);
        }
        fl__buf_put(b, "]", 1);
        break;
    }
}

int fl_prog_to_text(const fl_prog *p, char **out, size_t *len)
{
    if (!out) return fl__err(FL_EINVAL, "fl_prog_to_text: out is NULL");
    *out = NULL;
    if (len) *len = 0;
    if (!p || p->magic != FL_PROG_MAGIC) return fl__err_handle(p, "fl_prog_to_text: program is NULL or invalid");
    fl_buf b = {0};
    fl__buf_printf(&b, "fleet-program 1\nseed %llu\n", (unsigned long long)p->seed);
    for (int i = 0; i < p->nvars; i++) put_var(&b, p->vars[i]);
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        fl__buf_put(&b, "op ", 3);
        put_name(&b, op->def->type);
        if (op->role >= 0 && op->role < NROLES) fl__buf_printf(&b, " role=%s", role_names[op->role]);
        else fl__buf_printf(&b, " role=%d", op->role);
        if (op->cond) {
            fl__buf_put(&b, " cond=", 6);
            put_name(&b, op->cond->name);
        }
        put_slots(&b, "in", op->def->in_names, op->in);
        put_slots(&b, "out", op->def->out_names, op->out);
        if (op->nattr) fl__buf_put(&b, " attr", 5);
        for (int a = 0; a < op->nattr; a++) put_attr(&b, &op->attr[a]);
        fl__buf_put(&b, "\n", 1);
    }
    if (b.failed) {
        fl__buf_free(&b);
        return fl__err(FL_ENOMEM, "fl_prog_to_text: out of memory");
    }
    *out = b.p;
    if (len) *len = b.len;
    return FL_OK;
}

/* ---- reading ------------------------------------------------------------------------------ */

typedef struct {
    const char *s; /* the current line (not NUL-terminated) */
    size_t n, i;
    char err[400];
} lex;

static int lfail(lex *L, const char *fmt, ...) FL_PRINTF(2, 3);
static int lfail(lex *L, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->err, sizeof L->err, fmt, ap);
    va_end(ap);
    return FL_ECORRUPT;
}

/* In parse_var / parse_op: record the error and leave through their cleanup label. */
#define LFAIL_OUT(...)              \
    do {                            \
        st = lfail(L, __VA_ARGS__); \
        goto out;                   \
    } while (0)

static void lspace(lex *L)
{
    while (L->i < L->n && (L->s[L->i] == ' ' || L->s[L->i] == '\t')) L->i++;
}
static int lat_end(lex *L)
{
    lspace(L);
    return L->i >= L->n;
}
static int lpeek(const lex *L) { return L->i < L->n ? (unsigned char)L->s[L->i] : -1; }
static int lexpect(lex *L, char c)
{
    if (lpeek(L) == (unsigned char)c) {
        L->i++;
        return FL_OK;
    }
    return lfail(L, "expected '%c' at column %zu", c, L->i + 1);
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A bare or quoted name; *out is malloc'ed. */
static int lname(lex *L, char **out, const char *what)
{
    *out = NULL;
    size_t start = L->i;
    fl_buf b = {0};
    if (lpeek(L) != '"') {
        while (L->i < L->n && bare_char((unsigned char)L->s[L->i])) L->i++;
        if (L->i == start) return lfail(L, "expected %s at column %zu", what, start + 1);
        fl__buf_put(&b, L->s + start, L->i - start);
    } else {
        L->i++;
        for (;;) {
            if (L->i >= L->n) {
                fl__buf_free(&b);
                return lfail(L, "unterminated string starting at column %zu", start + 1);
            }
            char c = L->s[L->i++];
            if (c == '"') break;
            if (c != '\\') {
                fl__buf_put(&b, &c, 1);
                continue;
            }
            int e = lpeek(L), h1, h2;
            L->i++;
            if (e == '"' || e == '\\') c = (char)e;
            else if (e == 'n') c = '\n';
            else if (e == 't') c = '\t';
            else if (e == 'r') c = '\r';
            else if (e == 'x' && L->i + 1 < L->n && (h1 = hexval((unsigned char)L->s[L->i])) >= 0 &&
                     (h2 = hexval((unsigned char)L->s[L->i + 1])) >= 0 && (h1 | h2)) {
                c = (char)(h1 * 16 + h2);
                L->i += 2;
            } else {
                fl__buf_free(&b);
                return lfail(L, "bad escape sequence at column %zu", L->i - 1);
            }
            fl__buf_put(&b, &c, 1);
        }
        fl__buf_put(&b, "", 0);
    }
    if (b.failed) {
        fl__buf_free(&b);
        return lfail(L, "out of memory");
    }
    *out = b.p;
    return FL_OK;
}

/* A run of [a-z_0-9] (keywords, dtype and attribute type names). */
static int lword(lex *L, char *buf, size_t cap)
{
    size_t k = 0, start = L->i;
    while (L->i < L->n && (L->s[L->i] == '_' || L->s[L->i] == '-' || (L->s[L->i] >= 'a' && L->s[L->i] <= 'z') ||
                           (L->s[L->i] >= '0' && L->s[L->i] <= '9'))) {
        if (k + 1 < cap) buf[k++] = L->s[L->i];
        L->i++;
    }
    buf[k] = 0;
    if (L->i == start) return lfail(L, "expected a word at column %zu", start + 1);
    if (L->i - start >= cap) return lfail(L, "word at column %zu is too long", start + 1);
    return FL_OK;
}

/* A number token: everything up to a space, ',' or ']'. */
static int lnumtok(lex *L, char *buf, size_t cap)
{
    size_t start = L->i;
    while (L->i < L->n && L->s[L->i] != ' ' && L->s[L->i] != '\t' && L->s[L->i] != ',' && L->s[L->i] != ']') L->i++;
    if (L->i == start) return lfail(L, "expected a number at column %zu", start + 1);
    if (L->i - start >= cap) return lfail(L, "number at column %zu is too long", start + 1);
    memcpy(buf, L->s + start, L->i - start);
    buf[L->i - start] = 0;
    return FL_OK;
}

static int lint(lex *L, int64_t *v)
{
    char t[64], *end;
    size_t col = L->i + 1;
    FL_CHECK(lnumtok(L, t, sizeof t));
    errno = 0;
    long long x = strtoll(t, &end, 10);
    if (*end || errno) return lfail(L, "bad integer '%s' at column %zu", t, col);
    *v = x;
    return FL_OK;
}

static int lfloat(lex *L, int dbl, double *v)
{
    char t[64], *end;
    size_t col = L->i + 1;
    FL_CHECK(lnumtok(L, t, sizeof t));
    *v = dbl ? strtod(t, &end) : (double)strtof(t, &end);
    if (*end || end == t) return lfail(L, "bad number '%s' at column %zu", t, col);
    return FL_OK;
}

/* [a,b,...] of integers (kind 0) or floats (kind 1), malloc'ed (at least one slot). */
static int llist(lex *L, int kind, int64_t **ints, float **floats, int *n)
{
    *n = 0;
    *ints = NULL;
    *floats = NULL;
    FL_CHECK(lexpect(L, '['));
    size_t cnt = 1; /* entries <= commas before the closing bracket + 1 */
    for (size_t j = L->i; j < L->n && L->s[j] != ']'; j++) cnt += L->s[j] == ',';
    void *arr = cnt < INT32_MAX ? malloc(cnt * 8) : NULL;
    if (!arr) return lfail(L, "list too long");
    int st = FL_OK;
    if (lpeek(L) == ']') L->i++;
    else
        for (;;) {
            double d;
            if ((st = kind ? lfloat(L, 0, &d) : lint(L, &((int64_t *)arr)[*n])) != FL_OK) break;
            if (kind) ((float *)arr)[*n] = (float)d;
            (*n)++;
            if (lpeek(L) != ',') {
                st = lexpect(L, ']');
                break;
            }
            L->i++;
        }
    if (st != FL_OK) free(arr);
    else if (kind) *floats = arr;
    else *ints = arr;
    return st;
}

static int copy_attr(fl_op *o, const fl_attr *a)
{
    switch (a->type) {
    case FL_ATTR_INT: return fl__attr_set_i(o, a->name, a->i);
    case FL_ATTR_FLOAT: return fl__attr_set_f(o, a->name, a->f);
    case FL_ATTR_STR: return fl__attr_set_s(o, a->name, a->s);
    case FL_ATTR_INTS: return fl__attr_set_ints(o, a->name, a->ints, a->n);
    case FL_ATTR_FLOATS: return fl__attr_set_floats(o, a->name, a->floats, a->n);
    }
    return fl__err(FL_EINVAL, "attribute '%s' has an invalid type", a->name);
}

static void attr_clear(fl_attr *a)
{
    free(a->name);
    free(a->s);
    free(a->ints);
    free(a->floats);
    memset(a, 0, sizeof *a);
}

static int parse_var(lex *L, fl_prog *p)
{
    char *name = NULL, w[32];
    int64_t *shape = NULL;
    float *unused_f = NULL;
    int nd = 0, st;
    int dt = -1;
    FL_CHECK(lname(L, &name, "a variable name"));
    lspace(L);
    if ((st = lword(L, w, sizeof w)) != FL_OK) goto out;
    for (int k = 0; k < FL_DTYPE_COUNT; k++)
        if (!strcmp(w, fl_dtype_name((fl_dtype)k))) dt = k;
    if (dt < 0) LFAIL_OUT("variable '%s': unknown dtype '%s'", name, w);
    lspace(L);
    if ((st = llist(L, 0, &shape, &unused_f, &nd)) != FL_OK) goto out;
    if (nd > FL_MAX_DIMS) LFAIL_OUT("variable '%s': rank %d exceeds %d", name, nd, FL_MAX_DIMS);
    for (int k = 0; k < nd; k++)
        if (shape[k] < -1) LFAIL_OUT("variable '%s': dimension %d is %lld", name, k, (long long)shape[k]);
    fl_var *v = fl__var_create(p, name, (fl_dtype)dt, nd, shape);
    if (!v) LFAIL_OUT("%s", fl_last_error());
    while (!lat_end(L)) {
        if ((st = lword(L, w, sizeof w)) != FL_OK) goto out;
        if (lpeek(L) == '=') {
            L->i++;
            int64_t iv;
            double fv;
            if (!strcmp(w, "lod")) {
                if ((st = lint(L, &iv)) != FL_OK) goto out;
                if (iv < 0 || iv > 8) LFAIL_OUT("variable '%s': lod %lld out of range", name, (long long)iv);
                v->lod_level = (int)iv;
            } else if (!strcmp(w, "lr_scale") || !strcmp(w, "l2_decay") || !strcmp(w, "l1_decay")) {
                if ((st = lfloat(L, 0, &fv)) != FL_OK) goto out;
                *(w[1] == 'r' ? &v->lr_scale : w[1] == '2' ? &v->l2_decay : &v->l1_decay) = (float)fv;
            } else LFAIL_OUT("variable '%s': unknown property '%s='", name, w);
        } else {
            int k = 0;
            while (k < 5 && strcmp(w, var_flags[k].name) != 0) k++;
            if (k == 5) LFAIL_OUT("variable '%s': unknown flag '%s'", name, w);
            VAR_FLAG(v, k) = 1;
        }
    }
    st = FL_OK;
out:
    free(name);
    free(shape);
    free(unused_f);
    return st;
}

typedef struct {
    fl_io io[FL_OP_MAX_SLOTS];
    fl_var **vars[FL_OP_MAX_SLOTS];
    int n;
} ioset;

static int slot_of(const char *const *names, const char *s)
{
    for (int k = 0; k < FL_OP_MAX_SLOTS && names[k]; k++)
        if (!strcmp(names[k], s)) return k;
    return -1;
}

/* Parses "Slot=v,v" (the name is already read) into set. */
static int parse_slot(lex *L, fl_prog *p, const fl_op_def *def, int out, char *slot, ioset *set)
{
    const char *const *names = out ? def->out_names : def->in_names;
    if (slot_of(names, slot) < 0)
        return lfail(L, "operator '%s' has no %s slot '%s'", def->type, out ? "output" : "input", slot);
    for (int k = 0; k < set->n; k++)
        if (!strcmp(set->io[k].slot, slot)) return lfail(L, "operator '%s': slot '%s' given twice", def->type, slot);
    int n = 0, cap = 4;
    fl_var **vs = malloc((size_t)cap * sizeof *vs);
    if (!vs) return lfail(L, "out of memory");
    for (;;) {
        char *vn = NULL;
        int st = lname(L, &vn, "a variable name");
        fl_var *v = st == FL_OK ? fl_prog_var(p, vn) : NULL;
        if (st == FL_OK && !v) st = lfail(L, "operator '%s' slot '%s': unknown variable '%s'", def->type, slot, vn);
        free(vn);
        if (st == FL_OK && n == cap) {
            fl_var **nv = realloc(vs, (size_t)cap * 2 * sizeof *nv);
            if (!nv) st = lfail(L, "out of memory");
            else vs = nv, cap *= 2;
        }
        if (st != FL_OK) {
            free(vs);
            return st;
        }
        vs[n++] = v;
        if (lpeek(L) != ',') break;
        L->i++;
    }
    set->vars[set->n] = vs;
    set->io[set->n] = (fl_io){names[slot_of(names, slot)], vs, n};
    set->n++;
    return FL_OK;
}

static int parse_attr(lex *L, const char *type, char *name, fl_attr *attrs, int *nattr)
{
    char w[16];
    for (int k = 0; k < *nattr; k++)
        if (!strcmp(attrs[k].name, name)) return lfail(L, "operator '%s': attribute '%s' given twice", type, name);
    if (*nattr == FL_OP_MAX_ATTRS) return lfail(L, "operator '%s': more than %d attributes", type, FL_OP_MAX_ATTRS);
    FL_CHECK(lword(L, w, sizeof w));
    FL_CHECK(lexpect(L, ':'));
    fl_attr a;
    memset(&a, 0, sizeof a);
    int st;
    if (!strcmp(w, "int")) {
        a.type = FL_ATTR_INT;
        st = lint(L, &a.i);
    } else if (!strcmp(w, "float") || !strcmp(w, "double")) {
        a.type = FL_ATTR_FLOAT;
        st = lfloat(L, w[0] == 'd', &a.f);
    } else if (!strcmp(w, "str")) {
        a.type = FL_ATTR_STR;
        st = lpeek(L) == '"' ? lname(L, &a.s, "a string") : lfail(L, "attribute '%s': expected a quoted string", name);
    } else if (!strcmp(w, "ints") || !strcmp(w, "floats")) {
        a.type = w[0] == 'i' ? FL_ATTR_INTS : FL_ATTR_FLOATS;
        st = llist(L, w[0] == 'i' ? 0 : 1, &a.ints, &a.floats, &a.n);
    } else {
        st = lfail(L, "attribute '%s': unknown type '%s' (expected int, float, double, str, ints or floats)", name, w);
    }
    if (st != FL_OK) {
        attr_clear(&a);
        return st;
    }
    a.name = name;
    attrs[(*nattr)++] = a;
    return FL_OK;
}

/* Appends op `type` to p with the given slots and attributes and runs shape inference.
 * The output variables keep their declared types (the text, or the pruned program, is
 * authoritative); inference must agree with them up to -1 dimensions. */
static int build_op(fl_prog *p, const char *type, const ioset *ins, const ioset *outs, int role, const fl_attr *attrs,
                    int nattr)
{
    int nout = 0, k = 0, st;
    for (int s = 0; s < outs->n; s++) nout += outs->io[s].n;
    fl_var *decl = malloc((size_t)(nout ? nout : 1) * sizeof *decl); /* declared type of each output */
    if (!decl) return fl__err(FL_ENOMEM, "out of memory");
    for (int s = 0; s < outs->n; s++)
        for (int j = 0; j < outs->io[s].n; j++) decl[k++] = *outs->io[s].vars[j];
    fl_op *op = fl__op_new(p, type, ins->io, ins->n, outs->io, outs->n);
    if (!op) {
        free(decl);
        return fl_last_status() ? fl_last_status() : FL_EINVAL;
    }
    op->role = role;
    st = FL_OK;
    for (int a = 0; a < nattr && st == FL_OK; a++) st = copy_attr(op, &attrs[a]);
    if (st == FL_OK) st = fl__op_finish(op);
    k = 0;
    for (int s = 0; s < outs->n && st == FL_OK; s++)
        for (int j = 0; j < outs->io[s].n && st == FL_OK; j++) {
            fl_var *v = outs->io[s].vars[j];
            const fl_var *d = &decl[k++];
            int ok = v->dtype == d->dtype && v->ndim == d->ndim;
            for (int i = 0; ok && i < d->ndim; i++) ok = v->shape[i] == d->shape[i] || v->shape[i] < 0 || d->shape[i] < 0;
            if (!ok) {
                char a[160], b[160];
                fl__shape_str(v, a, sizeof a);
                fl__shape_str(d, b, sizeof b);
                st = fl__err(FL_ECORRUPT, "shape inference gives %s%s for output '%s', but the variable is declared %s%s",
                             fl_dtype_name(v->dtype), a, v->name, fl_dtype_name(d->dtype), b);
            }
            fl__var_set_shape(v, d->dtype, d->ndim, d->shape);
            v->lod_level = d->lod_level;
        }
    free(decl);
    return st;
}

static int parse_op(lex *L, fl_prog *p)
{
    char *type = NULL, *tok = NULL, *cond = NULL, w[32];
    ioset ins, outs;
    fl_attr attrs[FL_OP_MAX_ATTRS];
    int nattr = 0, section = 0, role = 0, st;
    memset(&ins, 0, sizeof ins);
    memset(&outs, 0, sizeof outs);
    FL_CHECK(lname(L, &type, "an operator type"));
    const fl_op_def *def = fl__op_lookup(type);
    if (!def) LFAIL_OUT("unknown operator type '%s'", type);
    lspace(L);
    if (lword(L, w, sizeof w) != FL_OK || strcmp(w, "role") != 0 || lpeek(L) != '=')
        LFAIL_OUT("operator '%s': expected role= after the type", type);
    L->i++;
    char *end;
    if ((st = lword(L, w, sizeof w)) != FL_OK) goto out;
    for (role = 0; role < NROLES && strcmp(w, role_names[role]) != 0; role++) {
    }
    if (role == NROLES && ((role = (int)strtol(w, &end, 10)) < NROLES || *end))
        LFAIL_OUT("operator '%s': unknown role '%s'", type, w);
    /* optional cond=VAR: the op runs only when VAR's first element is non-zero */
    lspace(L);
    if (L->n - L->i > 5 && !memcmp(L->s + L->i, "cond=", 5)) {
        L->i += 5;
        if ((st = lname(L, &cond, "a condition variable")) != FL_OK) goto out;
        if (!fl_prog_var(p, cond)) LFAIL_OUT("operator '%s': unknown condition variable '%s'", type, cond);
    }
    while (!lat_end(L)) {
        size_t col = L->i + 1;
        if ((st = lname(L, &tok, "a keyword or key=value")) != FL_OK) goto out;
        if (lpeek(L) != '=') {
            int s = !strcmp(tok, "in") ? 1 : !strcmp(tok, "out") ? 2 : !strcmp(tok, "attr") ? 3 : 0;
            if (!s || s <= section) LFAIL_OUT("operator '%s': unexpected '%s' at column %zu", type, tok, col);
            section = s;
        } else {
            L->i++;
            if (section == 0) st = lfail(L, "operator '%s': '%s=' at column %zu comes before in/out/attr", type, tok, col);
            else if (section < 3) st = parse_slot(L, p, def, section == 2, tok, section == 1 ? &ins : &outs);
            else if ((st = parse_attr(L, type, tok, attrs, &nattr)) == FL_OK) tok = NULL; /* owned by attrs */
            if (st != FL_OK) goto out;
        }
        free(tok);
        tok = NULL;
    }
    if (build_op(p, type, &ins, &outs, role, attrs, nattr) != FL_OK) LFAIL_OUT("operator '%s': %s", type, fl_last_error());
    if (cond) p->ops[p->nops - 1]->cond = fl_prog_var(p, cond);
    st = FL_OK;
out:
    free(cond);
    free(type);
    free(tok);
    for (int k = 0; k < ins.n; k++) free(ins.vars[k]);
    for (int k = 0; k < outs.n; k++) free(outs.vars[k]);
    for (int k = 0; k < nattr; k++) attr_clear(&attrs[k]);
    return st;
}

/* Unique-name counters as if the parsed variables had been made here: a layer added to the
 * parsed program gets fc_3 after fc_2, and does not silently share a parameter by name. */
static int restore_uniq(fl_prog *p)
{
    char pre[256];
    for (int i = 0; i < p->nvars; i++) {
        const char *n = p->vars[i]->name;
        for (const char *u = strchr(n, '_'); u; u = strchr(u + 1, '_')) {
            char *end;
            long k = (u[1] >= '0' && u[1] <= '9') ? strtol(u + 1, &end, 10) : -1;
            int64_t cur = 0;
            if (k < 0 || k >= INT32_MAX || (*end && *end != '.') || (size_t)(u - n) >= sizeof pre) continue;
            memcpy(pre, n, (size_t)(u - n));
            pre[u - n] = 0;
            if ((!fl__strmap_get(&p->uniq, pre, &cur) || cur <= k) && fl__strmap_put(&p->uniq, pre, k + 1) != FL_OK)
                return FL_ENOMEM;
        }
    }
    return FL_OK;
}

int fl_prog_from_text(const char *text, size_t len, fl_prog **out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_prog_from_text: out is NULL");
    *out = NULL;
    if (!text) return fl__err(FL_EINVAL, "fl_prog_from_text: text is NULL");
    fl_prog *p = fl_prog_create();
    if (!p) return fl_last_status();
    lex L;
    int lineno = 0, have_header = 0, st = FL_OK;
    size_t pos = 0;
    while (pos < len && st == FL_OK) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        memset(&L, 0, sizeof L);
        L.s = text + pos;
        L.n = end - pos;
        pos = end + 1;
        lineno++;
        if (L.n && L.s[L.n - 1] == '\r') L.n--;
        if (memchr(L.s, 0, L.n)) {
            st = lfail(&L, "NUL byte in the line");
            break;
        }
        lspace(&L);
        if (L.i >= L.n || L.s[L.i] == '#') continue;
        char kw[32];
        if ((st = lword(&L, kw, sizeof kw)) != FL_OK) break;
        lspace(&L);
        if (!have_header) {
            int64_t ver = 0;
            if (strcmp(kw, "fleet-program") != 0) {
                st = lfail(&L, "expected the header 'fleet-program 1', found '%s'", kw);
            } else if ((st = lint(&L, &ver)) == FL_OK && ver != 1) {
                st = lfail(&L, "unsupported program format version %lld (this build reads version 1)", (long long)ver);
            }
            have_header = 1;
        } else if (!strcmp(kw, "seed")) {
            char t[32], *e;
            if ((st = lnumtok(&L, t, sizeof t)) == FL_OK) {
                errno = 0;
                unsigned long long sd = strtoull(t, &e, 10);
                if (*e || errno || t[0] == '-') st = lfail(&L, "bad seed '%s'", t);
                else fl_prog_set_seed(p, sd);
            }
        } else if (!strcmp(kw, "var")) {
            st = parse_var(&L, p);
        } else if (!strcmp(kw, "op")) {
            st = parse_op(&L, p);
        } else {
            st = lfail(&L, "unknown statement '%s' (expected seed, var or op)", kw);
        }
        if (st == FL_OK && !lat_end(&L)) st = lfail(&L, "unexpected text at column %zu", L.i + 1);
    }
    if (st == FL_OK && !have_header) {
        st = FL_ECORRUPT;
        snprintf(L.err, sizeof L.err, "the text has no 'fleet-program 1' header");
        lineno = lineno ? lineno : 1;
    }
    if (st != FL_OK) {
        fl_prog_free(p);
        return fl__err(FL_ECORRUPT, "program text line %d: %s", lineno, L.err);
    }
    if (restore_uniq(p) != FL_OK) {
        fl_prog_free(p);
        return fl__err(FL_ENOMEM, "fl_prog_from_text: out of memory");
    }
    *out = p;
    return FL_OK;
}

/* ---- pruning ------------------------------------------------------------------------------ */

static int prune_copy(const fl_prog *p, const char *keep_op, const char *keep_var, fl_prog **out)
{
    fl_prog *d = fl_prog_create();
    if (!d) return fl_last_status();
    fl_prog_set_seed(d, p->seed);
    int st = FL_OK;
    for (size_t i = 0; i < p->uniq.cap && st == FL_OK; i++)
        if (p->uniq.keys[i]) st = fl__strmap_put(&d->uniq, p->uniq.keys[i], p->uniq.vals[i]);
    for (int i = 0; i < p->nvars && st == FL_OK; i++)
        if (keep_var[i] && !fl__var_mirror(d, p->vars[i])) st = fl_last_status();
    for (int i = 0; i < p->nops && st == FL_OK; i++) {
        if (!keep_op[i]) continue;
        const fl_op *so = p->ops[i];
        ioset set[2];
        memset(set, 0, sizeof set);
        for (int w = 0; w < 2; w++) {
            const fl_slot *ss = w ? so->out : so->in;
            const char *const *names = w ? so->def->out_names : so->def->in_names;
            for (int s = 0; s < FL_OP_MAX_SLOTS && names[s]; s++) {
                if (!ss[s].n) continue;
                /* a program's vars map 1:1 by name into d */
                fl_var **vs = malloc((size_t)ss[s].n * sizeof *vs);
                if (!vs) {
                    st = fl__err(FL_ENOMEM, "fl_prog_prune: out of memory");
                    break;
                }
                for (int k = 0; k < ss[s].n; k++) vs[k] = fl_prog_var(d, ss[s].vars[k]->name);
                set[w].vars[set[w].n] = vs;
                set[w].io[set[w].n++] = (fl_io){names[s], vs, ss[s].n};
            }
        }
        if (st == FL_OK) st = build_op(d, so->def->type, &set[0], &set[1], so->role, so->attr, so->nattr);
        for (int w = 0; w < 2; w++)
            for (int k = 0; k < set[w].n; k++) free(set[w].vars[k]);
        if (st != FL_OK)
            st = fl__err(st, "fl_prog_prune: rebuilding operator #%d '%s' failed: %s", i, so->def->type, fl_last_error());
    }
    if (st != FL_OK) {
        fl_prog_free(d);
        return st;
    }
    *out = d;
    return FL_OK;
}

int fl_prog_prune(const fl_prog *p, const char *const *feeds, int nfeed, const char *const *targets, int ntarget,
                  fl_prog **out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_prog_prune: out is NULL");
    *out = NULL;
    if (!p || p->magic != FL_PROG_MAGIC) return fl__err_handle(p, "fl_prog_prune: program is NULL or invalid");
    if (p->status != FL_OK) return fl__err(p->status, "fl_prog_prune: the program has a build error: %s", p->err);
    if (nfeed < 0 || (nfeed && !feeds)) return fl__err(FL_EINVAL, "fl_prog_prune: bad feed list");
    if (ntarget <= 0 || !targets) return fl__err(FL_EINVAL, "fl_prog_prune: no targets");
    size_t nv = (size_t)p->nvars + 1;
    char *fed = calloc(nv, 1), *needed = calloc(nv, 1), *written = calloc(nv, 1), *keep_var = calloc(nv, 1);
    char *keep_op = calloc((size_t)p->nops + 1, 1);
    int st = FL_OK;
    if (!fed || !needed || !written || !keep_var || !keep_op) {
        st = fl__err(FL_ENOMEM, "fl_prog_prune: out of memory");
        goto out;
    }
    for (int i = 0; i < nfeed; i++) {
        fl_var *v = feeds[i] ? fl_prog_var(p, feeds[i]) : NULL;
        if (!v) {
            st = fl__err(FL_ENOTFOUND, "fl_prog_prune: feed '%s' is not a variable of the program",
                         feeds[i] ? feeds[i] : "(null)");
            goto out;
        }
        fed[v->idx] = keep_var[v->idx] = 1;
    }
    for (int i = 0; i < ntarget; i++) {
        fl_var *v = targets[i] ? fl_prog_var(p, targets[i]) : NULL;
        if (!v) {
            st = fl__err(FL_ENOTFOUND, "fl_prog_prune: target '%s' is not a variable of the program",
                         targets[i] ? targets[i] : "(null)");
            goto out;
        }
        needed[v->idx] = keep_var[v->idx] = 1;
    }
    /* walk backwards: a forward op is kept when it writes a needed, unfed variable */
    for (int i = p->nops - 1; i >= 0; i--) {
        const fl_op *op = p->ops[i];
        if (op->role != FL_ROLE_FORWARD) continue;
        int want = 0;
        for (int s = 0; s < FL_OP_MAX_SLOTS && !want; s++)
            for (int k = 0; k < op->out[s].n && !want; k++) {
                int vi = op->out[s].vars[k]->idx;
                want = needed[vi] && !fed[vi];
            }
        if (!want) continue;
        keep_op[i] = 1;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
            for (int k = 0; k < op->out[s].n; k++) keep_var[op->out[s].vars[k]->idx] = written[op->out[s].vars[k]->idx] = 1;
            for (int k = 0; k < op->in[s].n; k++) keep_var[op->in[s].vars[k]->idx] = needed[op->in[s].vars[k]->idx] = 1;
        }
    }
    for (int i = 0; i < p->nvars; i++) {
        const fl_var *v = p->vars[i];
        if (needed[i] && v->is_data && !fed[i] && !written[i]) {
            st = fl__err(FL_EINVAL,
                         "fl_prog_prune: data variable '%s' is needed to compute the targets but is not among the feeds",
                         v->name);
            goto out;
        }
    }
    st = prune_copy(p, keep_op, keep_var, out);
out:
    free(fed);
    free(needed);
    free(written);
    free(keep_var);
    free(keep_op);
    return st;
}
