/*
 * hostlist.c - Slurm's compact host lists and task counts, expanded without Slurm's library.
 *
 * Host list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST): comma-separated host expressions; an
 * expression is literal text (letters, digits, '-', '.', '_') and bracket groups of
 * comma-separated numbers or ranges lo-hi:
 *   node[01-04,07],login1  ->  node01 node02 node03 node04 node07 login1
 *   rack[1-2]-n[1-2]       ->  rack1-n1 rack1-n2 rack2-n1 rack2-n2   (last group fastest)
 *   10.0.0.[1-2]           ->  10.0.0.1 10.0.0.2
 * A range keeps the width of its lower bound ([08-10] -> 08 09 10; [8-10] -> 8 9 10).
 *
 * Tasks per node (SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE): comma-separated counts,
 * each N or N(xM) for M nodes with N tasks:  2(x3),1  ->  2 2 2 1.
 */
#include <stdio.h>
#include <string.h>

#include "role_internal.h"

#define HOSTLIST_FORM "expected a Slurm host list such as node[01-04,07],login1"
#define TPN_FORM "expected Slurm tasks per node such as 2(x3),1"
#define NUM_DIGITS_MAX 9

typedef struct {
    unsigned lo, hi;
    int width;
} range;

typedef struct {
    const char *lit; /* literal text before the group (into the expression) */
    size_t litlen;
    range *r; /* ranges of the group; NULL for the trailing literal */
    int nr;
    unsigned count; /* numbers in the group */
} segment;

static int bad(const char *what, const char *list, size_t at, const char *why)
{
    return fl__err(FL_EINVAL, "%s='%s' is malformed: %s at offset %zu: " HOSTLIST_FORM, what, list, why, at);
}

static int is_host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

/* Reads digits at list[*i]; leaves *i after them. */
static int read_num(const char *what, const char *list, size_t *i, unsigned *v, int *ndig)
{
    size_t s = *i;
    unsigned x = 0;
    while (list[*i] >= '0' && list[*i] <= '9') {
        if (*i - s == NUM_DIGITS_MAX) return bad(what, list, s, "a number with more than 9 digits");
        x = x * 10 + (unsigned)(list[*i] - '0');
        (*i)++;
    }
    if (*i == s) return bad(what, list, s, "a number was expected");
    *v = x;
    *ndig = (int)(*i - s);
    return FL_OK;
}

/* Parses the group starting after '[' at list[*i]; leaves *i after ']'. */
static int parse_group(const char *what, const char *list, size_t *i, segment *g)
{
    for (;;) {
        range r;
        FL_CHECK(read_num(what, list, i, &r.lo, &r.width));
        r.hi = r.lo;
        if (list[*i] == '-') {
            (*i)++;
            int w;
            size_t at = *i;
            FL_CHECK(read_num(what, list, i, &r.hi, &w));
            if (r.hi < r.lo) return bad(what, list, at, "a range whose upper bound is below its lower bound");
        }
        range *nr = realloc(g->r, (size_t)(g->nr + 1) * sizeof *nr);
        if (!nr) return fl__err(FL_ENOMEM, "out of memory");
        g->r = nr;
        g->r[g->nr++] = r;
        if ((uint64_t)g->count + (r.hi - r.lo + 1) > FL_HOSTLIST_MAX)
            return fl__err(FL_EINVAL, "%s='%s' lists more than %d hosts", what, list, FL_HOSTLIST_MAX);
        g->count += r.hi - r.lo + 1;
        if (list[*i] == ',') {
            (*i)++;
            continue;
        }
        if (list[*i] == ']') {
            (*i)++;
            return FL_OK;
        }
        return bad(what, list, *i, list[*i] ? "',' or ']' was expected" : "'[' is not closed");
    }
}

/* The n-th number of group g, printed into out. */
static int group_item(const segment *g, unsigned n, char *out, size_t cap)
{
    for (int k = 0; k < g->nr; k++) {
        unsigned c = g->r[k].hi - g->r[k].lo + 1;
        if (n < c) return snprintf(out, cap, "%0*u", g->r[k].width, g->r[k].lo + n);
        n -= c;
    }
    return 0;
}

typedef struct {
    char **v;
    int n;
} strv;

/* Expands the expression list[b, e) into out. */
static int expand_expr(const char *what, const char *list, size_t b, size_t e, strv *out)
{
    segment *seg = NULL;
    int nseg = 0, st = FL_OK;
    size_t i = b, lit = b;
    uint64_t total = 1;
    while (st == FL_OK) {
        if (i < e && list[i] != '[') {
            if (list[i] == ']') st = bad(what, list, i, "']' without '['");
            else if (!is_host_char(list[i])) st = bad(what, list, i, "a character that cannot be part of a host name");
            i++;
            continue;
        }
        segment *ns = realloc(seg, (size_t)(nseg + 1) * sizeof *ns);
        if (!ns) {
            st = fl__err(FL_ENOMEM, "out of memory");
            break;
        }
        seg = ns;
        segment *g = &seg[nseg++];
        memset(g, 0, sizeof *g);
        g->lit = list + lit;
        g->litlen = i - lit;
        if (i >= e) break; /* the trailing literal */
        i++;
        st = parse_group(what, list, &i, g);
        if (st == FL_OK && (total *= g->count) > FL_HOSTLIST_MAX)
            st = fl__err(FL_EINVAL, "%s='%s' lists more than %d hosts", what, list, FL_HOSTLIST_MAX);
        if (st == FL_OK && i < e && list[i] == '[') st = bad(what, list, i, "two bracket groups without text between them");
        lit = i;
    }
    if (st == FL_OK && out->n + total > FL_HOSTLIST_MAX)
        st = fl__err(FL_EINVAL, "%s='%s' lists more than %d hosts", what, list, FL_HOSTLIST_MAX);
    char **nv = st == FL_OK ? realloc(out->v, (size_t)(out->n + (int)total) * sizeof *nv) : NULL;
    if (st == FL_OK && !nv) st = fl__err(FL_ENOMEM, "out of memory");
    if (st == FL_OK) out->v = nv;
    /* the odometer: idx[k] is the position in group k; the last group varies fastest */
    unsigned *idx = st == FL_OK ? calloc((size_t)nseg, sizeof *idx) : NULL;
    if (st == FL_OK && !idx) st = fl__err(FL_ENOMEM, "out of memory");
    for (uint64_t t = 0; st == FL_OK && t < total; t++) {
        char name[FL_NET_HOST_MAX];
        size_t len = 0;
        for (int k = 0; k < nseg && len < sizeof name; k++) {
            size_t l = seg[k].litlen < sizeof name - len ? seg[k].litlen : sizeof name - len;
            memcpy(name + len, seg[k].lit, l);
            len += l;
            if (seg[k].r && len < sizeof name) len += (size_t)group_item(&seg[k], idx[k], name + len, sizeof name - len);
        }
        if (len >= sizeof name)
            st = fl__err(FL_EINVAL, "%s='%s': a host name is longer than %d characters", what, list, FL_NET_HOST_MAX - 1);
        else if (len == 0) st = bad(what, list, b, "an empty host name");
        if (st != FL_OK) break;
        name[len] = 0;
        if (!(out->v[out->n] = fl__strdup(name))) {
            st = fl__err(FL_ENOMEM, "out of memory");
            break;
        }
        out->n++;
        for (int k = nseg - 1; k >= 0; k--) {
            if (!seg[k].r) continue;
            if (++idx[k] < seg[k].count) break;
            idx[k] = 0;
        }
    }
    free(idx);
    for (int k = 0; k < nseg; k++) free(seg[k].r);
    free(seg);
    return st;
}

int fl__hostlist_expand(const char *list, const char *what, char ***out, int *n)
{
    *out = NULL;
    *n = 0;
    if (!list || !*list) return fl__err(FL_EINVAL, "%s is empty: " HOSTLIST_FORM, what);
    strv v = {0};
    int st = FL_OK;
    size_t b = 0, i = 0;
    int depth = 0;
    for (;; i++) {
        char c = list[i];
        if (c == '[' && depth++) st = bad(what, list, i, "'[' inside brackets");
        if (c == ']' && depth-- == 0) st = bad(what, list, i, "']' without '['");
        if (st == FL_OK && ((c == ',' && depth == 0) || c == 0)) {
            if (c == 0 && depth) st = bad(what, list, i, "'[' is not closed");
            else if (i == b) st = bad(what, list, i, "an empty host name");
            else st = expand_expr(what, list, b, i, &v);
            b = i + 1;
        }
        if (st != FL_OK || c == 0) break;
    }
    if (st != FL_OK) {
        fl__free_strv(v.v, v.n);
        return st;
    }
    *out = v.v;
    *n = v.n;
    return FL_OK;
}

int fl__slurm_tasks_per_node(const char *spec, const char *what, int **out, int *n)
{
    *out = NULL;
    *n = 0;
    if (!spec || !*spec) return fl__err(FL_EINVAL, "%s is empty: " TPN_FORM, what);
    int *v = NULL, k = 0, st = FL_OK;
    size_t i = 0;
    while (st == FL_OK) {
        unsigned tasks, times = 1;
        int w;
        size_t at = i;
        if ((st = read_num(what, spec, &i, &tasks, &w)) != FL_OK || tasks == 0) {
            st = fl__err(FL_EINVAL, "%s='%s' is malformed at offset %zu: a positive task count was expected: " TPN_FORM,
                         what, spec, at);
            break;
        }
        if (!strncmp(spec + i, "(x", 2)) {
            i += 2;
            at = i;
            if (read_num(what, spec, &i, &times, &w) != FL_OK || times == 0 || spec[i] != ')') {
                st = fl__err(FL_EINVAL,
                             "%s='%s' is malformed at offset %zu: N(xM) with a positive M was expected: " TPN_FORM, what,
                             spec, at);
                break;
            }
            i++;
        }
        if ((uint64_t)k + times > FL_HOSTLIST_MAX) {
            st = fl__err(FL_EINVAL, "%s='%s' counts more than %d nodes", what, spec, FL_HOSTLIST_MAX);
            break;
        }
        int *nv = realloc(v, (size_t)(k + (int)times) * sizeof *nv);
        if (!nv) {
            st = fl__err(FL_ENOMEM, "out of memory");
            break;
        }
        v = nv;
        for (unsigned t = 0; t < times; t++) v[k++] = (int)tasks;
        if (spec[i] == 0) break;
        if (spec[i] != ',') {
            st = fl__err(FL_EINVAL, "%s='%s' is malformed at offset %zu: ',' was expected: " TPN_FORM, what, spec, i);
            break;
        }
        i++;
    }
    if (st != FL_OK) {
        free(v);
        return st;
    }
    *out = v;
    *n = k;
    return FL_OK;
}
