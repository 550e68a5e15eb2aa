/*
 * manifest.c - the checkpoint manifest <dir>/ps_manifest.json, written last (atomically) by
 * server 0 as the commit point of a save, and the names of the shard files it commits:
 *
 *   {"format": "fleet-ps-checkpoint", "version": 1, "generation": "<16 hex>", "step": S,
 *    "mode": M, "num_servers": N,
 *    "sparse_shard_rule": "fmix64(id) % num_servers",
 *    "dense_split_rule": "server i holds rows [i*ceil(R/N), min((i+1)*ceil(R/N), R))",
 *    "tables": [{"name": "...", "kind": "dense"|"sparse", "rows": R, "cols": C | "dim": D,
 *                "optimizer": "sgd"|"adagrad"|"adam"|"sum",
 *                "files": ["<name>/part-00000-<gen>.safetensors", ...]}, ...]}
 *
 * The reader is a small JSON parser (objects, arrays, strings, integers) sufficient for
 * this file; anything else is FL_ECORRUPT naming the file.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps_internal.h"

char *fl__ps_part_path(const char *dir, const char *table, int server, uint64_t gen)
{
    size_t n = strlen(dir) + strlen(table) + 64;
    char *p = malloc(n);
    if (!p) {
        fl__err(FL_ENOMEM, "out of memory");
        return NULL;
    }
    snprintf(p, n, "%s/%s/part-%05d-%016" PRIx64 ".safetensors", dir, table, server, gen);
    return p;
}

int fl__ps_manifest_write(const char *dir, uint64_t gen, int64_t step, int mode, int nservers,
                          const fl_ps_table_config *tables, int ntables)
{
    fl_buf b = {0};
    fl__buf_printf(&b, "{\n  \"format\": \"fleet-ps-checkpoint\",\n  \"version\": 1,\n  \"generation\": \"%016" PRIx64
                       "\",\n  \"step\": %lld,\n  \"mode\": %d,\n  \"num_servers\": %d,\n",
                   gen, (long long)step, mode, nservers);
    fl__buf_printf(&b, "  \"sparse_shard_rule\": \"fmix64(id) %% num_servers\",\n"
                       "  \"dense_split_rule\": \"server i holds rows [i*ceil(R/N), min((i+1)*ceil(R/N), R))\",\n"
                       "  \"tables\": [");
    for (int i = 0; i < ntables; i++) {
        const fl_ps_table_config *t = &tables[i];
        fl__buf_printf(&b, "%s\n    {\"name\": \"%s\", \"kind\": \"%s\", ", i ? "," : "", t->name,
                       t->kind == FL_PS_DENSE ? "dense" : "sparse");
        if (t->kind == FL_PS_DENSE)
            fl__buf_printf(&b, "\"rows\": %lld, \"cols\": %lld, ", (long long)t->rows, (long long)t->cols);
        else
            fl__buf_printf(&b, "\"dim\": %d, ", t->dim);
        fl__buf_printf(&b, "\"optimizer\": \"%s\", \"files\": [", fl__ps_opt_name(t->opt.kind));
        for (int s = 0; s < nservers; s++)
            fl__buf_printf(&b, "%s\"%s/part-%05d-%016" PRIx64 ".safetensors\"", s ? ", " : "", t->name, s, gen);
        fl__buf_printf(&b, "]}");
    }
    fl__buf_printf(&b, "\n  ]\n}\n");
    if (b.failed) {
        fl__buf_free(&b);
        return fl__err(FL_ENOMEM, "out of memory for the checkpoint manifest");
    }
    char *path = fl__path_join(dir, FL__PS_MANIFEST);
    int st = path ? fl__write_file_atomic(path, b.p, b.len) : FL_ENOMEM;
    free(path);
    fl__buf_free(&b);
    return st;
}

/* ---- a small JSON tree --------------------------------------------------------------------- */

typedef struct jv {
    int type; /* 'o' object, 'a' array, 's' string, 'n' integer, 'b' bool/null */
    char *s;
    long long n;
    int len;
    char **keys;
    struct jv *items;
} jv;

typedef struct {
    const char *t;
    size_t n, i;
    char why[160];
} jp;

static void jv_free(jv *v)
{
    for (int k = 0; k < v->len; k++) {
        if (v->keys) free(v->keys[k]);
        jv_free(&v->items[k]);
    }
    free(v->keys);
    free(v->items);
    free(v->s);
}

static void ws(jp *p)
{
    while (p->i < p->n && (p->t[p->i] == ' ' || p->t[p->i] == '\n' || p->t[p->i] == '\t' || p->t[p->i] == '\r')) p->i++;
}

static int fail(jp *p, const char *what)
{
    if (!p->why[0]) snprintf(p->why, sizeof p->why, "%s at byte %zu", what, p->i);
    return -1;
}

static int parse(jp *p, jv *v, int depth)
{
    memset(v, 0, sizeof *v);
    if (depth > 8) return fail(p, "nesting too deep");
    ws(p);
    if (p->i >= p->n) return fail(p, "unexpected end");
    char c = p->t[p->i];
    if (c == '"') {
        v->type = 's';
        if (fl__json_unquote(p->t, p->n, &p->i, &v->s, p->why, sizeof p->why)) return -1;
        return 0;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        char *end;
        errno = 0;
        v->type = 'n';
        v->n = strtoll(p->t + p->i, &end, 10);
        if (errno || end == p->t + p->i) return fail(p, "bad integer");
        p->i = (size_t)(end - p->t);
        return 0;
    }
    if (!strncmp(p->t + p->i, "true", 4) || !strncmp(p->t + p->i, "null", 4)) {
        v->type = 'b';
        p->i += 4;
        return 0;
    }
    if (!strncmp(p->t + p->i, "false", 5)) {
        v->type = 'b';
        p->i += 5;
        return 0;
    }
    if (c != '{' && c != '[') return fail(p, "unexpected character");
    char close = c == '{' ? '}' : ']';
    v->type = c == '{' ? 'o' : 'a';
    p->i++;
    ws(p);
    if (p->i < p->n && p->t[p->i] == close) {
        p->i++;
        return 0;
    }
    for (;;) {
        if (v->len >= 100000) return fail(p, "too many items");
        jv *items = realloc(v->items, (size_t)(v->len + 1) * sizeof *items);
        if (!items) return fail(p, "out of memory");
        v->items = items;
        if (v->type == 'o') {
            char **keys = realloc(v->keys, (size_t)(v->len + 1) * sizeof *keys);
            if (!keys) return fail(p, "out of memory");
            v->keys = keys;
            v->keys[v->len] = NULL;
            ws(p);
            memset(&v->items[v->len], 0, sizeof(jv));
            v->len++;
            if (p->i >= p->n || p->t[p->i] != '"') return fail(p, "expected a key");
            if (fl__json_unquote(p->t, p->n, &p->i, &v->keys[v->len - 1], p->why, sizeof p->why)) return -1;
            ws(p);
            if (p->i >= p->n || p->t[p->i] != ':') return fail(p, "expected ':'");
            p->i++;
        } else {
            memset(&v->items[v->len], 0, sizeof(jv));
            v->len++;
        }
        if (parse(p, &v->items[v->len - 1], depth + 1)) return -1;
        ws(p);
        if (p->i < p->n && p->t[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->t[p->i] == close) {
            p->i++;
            return 0;
        }
        return fail(p, "expected ',' or a closing bracket");
    }
}

static const jv *get(const jv *o, const char *key, int type)
{
    if (!o || o->type != 'o') return NULL;
    for (int k = 0; k < o->len; k++)
        if (!strcmp(o->keys[k], key)) return o->items[k].type == type ? &o->items[k] : NULL;
    return NULL;
}

int fl__ps_manifest_read(const char *dir, const fl_ps_table_config *tables, int ntables, int nservers,
                         uint64_t *gen, int64_t *step)
{
    char *path = fl__path_join(dir, FL__PS_MANIFEST), *text = NULL;
    if (!path) return FL_ENOMEM;
    size_t len;
    int st = fl__read_file(path, 16u << 20, &text, &len);
    if (st == FL_ENOTFOUND) st = fl__err(FL_ENOTFOUND, "no PS checkpoint in '%s': '%s' does not exist (a save that "
                                                      "did not finish commits nothing)", dir, path);
    if (st) {
        free(path);
        return st;
    }
    jp p = {text, len, 0, ""};
    jv root;
    if (parse(&p, &root, 0) == 0) {
        ws(&p);
        if (p.i != p.n) fail(&p, "trailing data");
    }
    if (p.why[0]) {
        st = fl__err(FL_ECORRUPT, "'%s' is not valid JSON: %s", path, p.why);
        goto out;
    }
    const jv *fmt = get(&root, "format", 's'), *g = get(&root, "generation", 's'), *sp = get(&root, "step", 'n');
    const jv *ns = get(&root, "num_servers", 'n'), *tl = get(&root, "tables", 'a');
    if (!fmt || strcmp(fmt->s, "fleet-ps-checkpoint") || !g || !sp || !ns || !tl) {
        st = fl__err(FL_ECORRUPT, "'%s' is not a Fleet PS manifest (format, generation, step, num_servers or tables "
                                  "missing)", path);
        goto out;
    }
    char *end;
    errno = 0;
    unsigned long long gv = strtoull(g->s, &end, 16);
    if (errno || *end || strlen(g->s) != 16) {
        st = fl__err(FL_ECORRUPT, "'%s': generation '%s' is not 16 hex digits", path, g->s);
        goto out;
    }
    if (ns->n != nservers) {
        st = fl__err(FL_EINVAL, "checkpoint '%s' was saved by %lld servers, this job has %d: resharding is not "
                                "supported (load with the same number of servers)", dir, ns->n, nservers);
        goto out;
    }
    for (int i = 0; i < ntables && st == FL_OK; i++) {
        const fl_ps_table_config *t = &tables[i];
        const jv *e = NULL;
        for (int k = 0; k < tl->len && !e; k++) {
            const jv *nm = get(&tl->items[k], "name", 's');
            if (nm && !strcmp(nm->s, t->name)) e = &tl->items[k];
        }
        if (!e) {
            st = fl__err(FL_ENOTFOUND, "checkpoint '%s' has no table '%s'", dir, t->name);
            break;
        }
        const jv *kind = get(e, "kind", 's'), *opt = get(e, "optimizer", 's');
        const char *want_kind = t->kind == FL_PS_DENSE ? "dense" : "sparse";
        if (!kind || strcmp(kind->s, want_kind)) {
            st = fl__err(FL_EINVAL, "checkpoint '%s': table '%s' is %s there, %s here", dir, t->name,
                         kind ? kind->s : "?", want_kind);
            break;
        }
        if (!opt || strcmp(opt->s, fl__ps_opt_name(t->opt.kind))) {
            st = fl__err(FL_EINVAL, "checkpoint '%s': table '%s' was trained with optimizer %s, this job uses %s (its "
                                    "state would not match)", dir, t->name, opt ? opt->s : "?", fl__ps_opt_name(t->opt.kind));
            break;
        }
        if (t->kind == FL_PS_DENSE) {
            const jv *r = get(e, "rows", 'n'), *c = get(e, "cols", 'n');
            if (!r || !c || r->n != t->rows || c->n != t->cols)
                st = fl__err(FL_EINVAL, "checkpoint '%s': dense table '%s' has shape %lld x %lld there, %lld x %lld here",
                             dir, t->name, r ? r->n : -1, c ? c->n : -1, (long long)t->rows, (long long)t->cols);
        } else {
            const jv *d = get(e, "dim", 'n');
            if (!d || d->n != t->dim)
                st = fl__err(FL_EINVAL, "checkpoint '%s': sparse table '%s' has dim %lld there, %d here", dir, t->name,
                             d ? d->n : -1, t->dim);
        }
    }
    if (st == FL_OK) {
        *gen = gv;
        *step = sp->n;
    }
out:
    jv_free(&root);
    free(text);
    free(path);
    return st;
}

void fl__ps_remove_old_parts(const char *dir, const fl_ps_table_config *tables, int ntables, int server,
                             uint64_t keep_gen)
{
    char prefix[32], keep[64];
    snprintf(prefix, sizeof prefix, "part-%05d-", server);
    snprintf(keep, sizeof keep, "part-%05d-%016" PRIx64 ".safetensors", server, keep_gen);
    for (int i = 0; i < ntables; i++) {
        char *tdir = fl__path_join(dir, tables[i].name);
        if (!tdir) return;
        DIR *d = opendir(tdir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (strncmp(de->d_name, prefix, strlen(prefix)) || !strcmp(de->d_name, keep)) continue;
            size_t l = strlen(de->d_name);
            int stale_tmp = strstr(de->d_name, ".safetensors.tmp.") != NULL; /* left by a killed save */
            if (!stale_tmp && (l != strlen(keep) || strcmp(de->d_name + l - 12, ".safetensors"))) continue;
            char *f = fl__path_join(tdir, de->d_name);
            if (f && unlink(f) != 0) FL_WARN(FL_SUB_PS, "cannot remove old checkpoint file '%s': %s", f, strerror(errno));
            free(f);
        }
        if (d) closedir(d);
        free(tdir);
    }
}
