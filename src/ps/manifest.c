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
 * The file is written and read with cJSON through src/base/json.c; a manifest that is not
 * valid JSON, lacks a key or has one of the wrong type is FL_ECORRUPT naming the file and
 * the key.
 */
#include <cjson/cJSON.h>
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

/* One table's entry; false when out of memory. */
static int put_table(cJSON *list, const fl_ps_table_config *t, int nservers, uint64_t gen)
{
    cJSON *e = cJSON_CreateObject();
    if (!cJSON_AddItemToArray(list, e)) {
        cJSON_Delete(e);
        return 0;
    }
    int ok = cJSON_AddStringToObject(e, "name", t->name) &&
             cJSON_AddStringToObject(e, "kind", t->kind == FL_PS_DENSE ? "dense" : "sparse");
    if (ok && t->kind == FL_PS_DENSE)
        ok = cJSON_AddItemToObject(e, "rows", fl__json_int_node(t->rows)) &&
             cJSON_AddItemToObject(e, "cols", fl__json_int_node(t->cols));
    else if (ok) ok = cJSON_AddItemToObject(e, "dim", fl__json_int_node(t->dim));
    ok = ok && cJSON_AddStringToObject(e, "optimizer", fl__ps_opt_name(t->opt.kind));
    cJSON *files = ok ? cJSON_AddArrayToObject(e, "files") : NULL;
    ok = files != NULL;
    for (int s = 0; s < nservers && ok; s++) {
        char part[160];
        snprintf(part, sizeof part, "%s/part-%05d-%016" PRIx64 ".safetensors", t->name, s, gen);
        ok = cJSON_AddItemToArray(files, cJSON_CreateString(part));
    }
    return ok;
}

int fl__ps_manifest_write(const char *dir, uint64_t gen, int64_t step, int mode, int nservers,
                          const fl_ps_table_config *tables, int ntables)
{
    char gens[17];
    snprintf(gens, sizeof gens, "%016" PRIx64, gen);
    cJSON *root = cJSON_CreateObject();
    int ok = root && cJSON_AddStringToObject(root, "format", "fleet-ps-checkpoint") &&
             cJSON_AddItemToObject(root, "version", fl__json_int_node(1)) &&
             cJSON_AddStringToObject(root, "generation", gens) &&
             cJSON_AddItemToObject(root, "step", fl__json_int_node(step)) &&
             cJSON_AddItemToObject(root, "mode", fl__json_int_node(mode)) &&
             cJSON_AddItemToObject(root, "num_servers", fl__json_int_node(nservers)) &&
             cJSON_AddStringToObject(root, "sparse_shard_rule", "fmix64(id) % num_servers") &&
             cJSON_AddStringToObject(root, "dense_split_rule",
                                     "server i holds rows [i*ceil(R/N), min((i+1)*ceil(R/N), R))");
    cJSON *list = ok ? cJSON_AddArrayToObject(root, "tables") : NULL;
    ok = list != NULL;
    for (int i = 0; i < ntables && ok; i++) ok = put_table(list, &tables[i], nservers, gen);
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    fl_buf b = {0};
    if (text) {
        fl__buf_put(&b, text, strlen(text));
        fl__buf_put(&b, "\n", 1);
        cJSON_free(text);
    }
    if (!text || b.failed) {
        fl__buf_free(&b);
        return fl__err(FL_ENOMEM, "out of memory for the checkpoint manifest");
    }
    char *path = fl__path_join(dir, FL__PS_MANIFEST);
    int st = path ? fl__write_file_atomic(path, b.p, b.len) : FL_ENOMEM;
    free(path);
    fl__buf_free(&b);
    return st;
}

/* Checks the entry of table t against this job's configuration. */
static int check_table(const fl_json *j, const char *dir, const cJSON *list, const fl_ps_table_config *t)
{
    const cJSON *e = NULL;
    char key[64];
    int k = 0;
    for (const cJSON *c = list->child; c && !e; c = c->next, k++) {
        const char *name;
        snprintf(key, sizeof key, "tables[%d]", k);
        FL_CHECK(fl__json_obj(j, c, key));
        snprintf(key, sizeof key, "tables[%d].name", k);
        FL_CHECK(fl__json_str(j, fl__json_find(c, "name"), key, &name));
        if (!strcmp(name, t->name)) e = c;
    }
    if (!e) return fl__err(FL_ENOTFOUND, "checkpoint '%s' has no table '%s'", dir, t->name);
    k--;
    const char *kind, *opt, *want_kind = t->kind == FL_PS_DENSE ? "dense" : "sparse";
    snprintf(key, sizeof key, "tables[%d].kind", k);
    FL_CHECK(fl__json_str(j, fl__json_find(e, "kind"), key, &kind));
    snprintf(key, sizeof key, "tables[%d].optimizer", k);
    FL_CHECK(fl__json_str(j, fl__json_find(e, "optimizer"), key, &opt));
    if (strcmp(kind, want_kind))
        return fl__err(FL_EINVAL, "checkpoint '%s': table '%s' is %s there, %s here", dir, t->name, kind, want_kind);
    if (strcmp(opt, fl__ps_opt_name(t->opt.kind)))
        return fl__err(FL_EINVAL,
                       "checkpoint '%s': table '%s' was trained with optimizer %s, this job uses %s (its "
                       "state would not match)",
                       dir, t->name, opt, fl__ps_opt_name(t->opt.kind));
    int64_t r = 0, c = 0, d = 0;
    if (t->kind == FL_PS_DENSE) {
        snprintf(key, sizeof key, "tables[%d].rows", k);
        FL_CHECK(fl__json_int(j, fl__json_find(e, "rows"), key, 1, INT64_MAX, &r));
        snprintf(key, sizeof key, "tables[%d].cols", k);
        FL_CHECK(fl__json_int(j, fl__json_find(e, "cols"), key, 1, INT64_MAX, &c));
        if (r != t->rows || c != t->cols)
            return fl__err(FL_EINVAL, "checkpoint '%s': dense table '%s' has shape %lld x %lld there, %lld x %lld here",
                           dir, t->name, (long long)r, (long long)c, (long long)t->rows, (long long)t->cols);
    } else {
        snprintf(key, sizeof key, "tables[%d].dim", k);
        FL_CHECK(fl__json_int(j, fl__json_find(e, "dim"), key, 1, INT32_MAX, &d));
        if (d != t->dim)
            return fl__err(FL_EINVAL, "checkpoint '%s': sparse table '%s' has dim %lld there, %d here", dir, t->name,
                           (long long)d, t->dim);
    }
    return FL_OK;
}

int fl__ps_manifest_read(const char *dir, const fl_ps_table_config *tables, int ntables, int nservers, uint64_t *gen,
                         int64_t *step)
{
    char *path = fl__path_join(dir, FL__PS_MANIFEST), *text = NULL, *src = NULL;
    if (!path) return FL_ENOMEM;
    size_t len;
    int st = fl__read_file(path, 16u << 20, &text, &len);
    if (st == FL_ENOTFOUND)
        st = fl__err(FL_ENOTFOUND,
                     "no PS checkpoint in '%s': '%s' does not exist (a save that "
                     "did not finish commits nothing)",
                     dir, path);
    if (st == FL_OK && !(src = malloc(strlen(path) + 3))) st = fl__err(FL_ENOMEM, "out of memory");
    if (st) {
        free(text);
        free(path);
        return st;
    }
    sprintf(src, "'%s'", path);
    fl_json j = {NULL, src, FL_ECORRUPT};
    const char *fmt, *g;
    int64_t version, sp, ns;
    const cJSON *list;
    int nlist;
    FL_CHECK_GOTO(fl__json_parse(&j, text, len, 16u << 20, 1u << 20), st, out);
    const cJSON *root = j.root;
    if (!cJSON_IsObject(root)) {
        st = fl__json_fail(&j, "the manifest must be a JSON object");
        goto out;
    }
    FL_CHECK_GOTO(fl__json_str(&j, fl__json_find(root, "format"), "format", &fmt), st, out);
    if (strcmp(fmt, "fleet-ps-checkpoint")) {
        st = fl__json_fail(&j, "not a Fleet PS manifest: format is '%.40s', expected 'fleet-ps-checkpoint'", fmt);
        goto out;
    }
    FL_CHECK_GOTO(fl__json_int(&j, fl__json_find(root, "version"), "version", 1, 1, &version), st, out);
    FL_CHECK_GOTO(fl__json_str(&j, fl__json_find(root, "generation"), "generation", &g), st, out);
    char *end;
    errno = 0;
    unsigned long long gv = strtoull(g, &end, 16);
    if (errno || *end || strlen(g) != 16) {
        st = fl__json_fail(&j, "key 'generation' must be 16 hex digits, not '%.40s'", g);
        goto out;
    }
    FL_CHECK_GOTO(fl__json_int(&j, fl__json_find(root, "step"), "step", INT64_MIN, INT64_MAX, &sp), st, out);
    FL_CHECK_GOTO(fl__json_int(&j, fl__json_find(root, "num_servers"), "num_servers", 1, INT32_MAX, &ns), st, out);
    list = fl__json_find(root, "tables");
    FL_CHECK_GOTO(fl__json_arr(&j, list, "tables", 1 << 16, &nlist), st, out);
    if (ns != nservers) {
        st = fl__err(FL_EINVAL,
                     "checkpoint '%s' was saved by %lld servers, this job has %d: resharding is not "
                     "supported (load with the same number of servers)",
                     dir, (long long)ns, nservers);
        goto out;
    }
    for (int i = 0; i < ntables && st == FL_OK; i++) st = check_table(&j, dir, list, &tables[i]);
    if (st == FL_OK) {
        *gen = gv;
        *step = sp;
    }
out:
    fl__json_free(&j);
    free(src);
    free(text);
    free(path);
    return st;
}

void fl__ps_remove_old_parts(const char *dir, const fl_ps_table_config *tables, int ntables, int server, uint64_t keep_gen)
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
