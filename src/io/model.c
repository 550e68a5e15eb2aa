/*
 * model.c - checkpoints (every persistable variable of a program) and inference models
 * (a pruned program plus the parameters it reads).  See docs/checkpoints.md.
 *
 *   <dir>/persistables.safetensors   fl_io_save_persistables
 *   <dir>/__model__                  fl_io_save_inference_model: "feed"/"fetch" lines and
 *   <dir>/params.safetensors         the program text; its parameters (tables that are
 *                                    mostly zero rows stored by their rows, rows.c)
 *
 * Loading is all-or-nothing: the file is read and every variable checked (present, same
 * dtype and shape) before the scope is touched; the values are then swapped into the
 * scope's tensors, which cannot fail, so executors that already planned keep their
 * tensor pointers.
 */
#include <stdio.h>
#include <string.h>

#include "io_internal.h"

#define PERSIST_FILE "persistables.safetensors"
#define PARAMS_FILE "params.safetensors"
#define MODEL_FILE "__model__"
#define MODEL_MAX_BYTES ((size_t)256 << 20)

static int expected_numel(const fl_var *v, int64_t *n)
{
    int64_t k = 1;
    for (int d = 0; d < v->ndim; d++) k *= v->shape[d] > 0 ? v->shape[d] : 1;
    *n = k;
    return k > 0;
}

static void tensor_str(char *buf, size_t cap, const fl_tensor *t) { fl_tensor_describe(t, buf, cap); }

static void var_str(char *buf, size_t cap, const fl_var *v)
{
    char sh[160];
    fl__shape_str(v, sh, sizeof sh);
    snprintf(buf, cap, "%s%s", fl_dtype_name(v->dtype), sh);
}

/* Collects the scope tensors of p's persistable variables (borrowed pointers). */
static int gather(fl_exe *e, const fl_prog *p, const char *path, const char ***names, const fl_tensor ***ts, int *n)
{
    *names = NULL;
    *ts = NULL;
    *n = 0;
    int cnt = 0;
    for (int i = 0; i < p->nvars; i++) cnt += p->vars[i]->persistable != 0;
    const char **nm = malloc((size_t)(cnt ? cnt : 1) * sizeof *nm);
    const fl_tensor **tv = malloc((size_t)(cnt ? cnt : 1) * sizeof *tv);
    if (!nm || !tv) {
        free(nm);
        free(tv);
        return fl__err(FL_ENOMEM, "saving '%s': out of memory", path);
    }
    int k = 0;
    for (int i = 0; i < p->nvars; i++) {
        const fl_var *v = p->vars[i];
        if (!v->persistable) continue;
        const fl_tensor *t = fl_scope_find(fl_exe_scope(e), v->name);
        int64_t want;
        if (!t || (t->numel == 0 && expected_numel(v, &want))) {
            free(nm);
            free(tv);
            return fl__err(
                FL_ESTATE,
                "saving '%s': persistable variable '%s' is %s in the executor's scope (run the startup program first)",
                path, v->name, t ? "not initialized" : "missing");
        }
        nm[k] = v->name;
        tv[k++] = t;
    }
    *names = nm;
    *ts = tv;
    *n = k;
    return FL_OK;
}

/* Writes p's persistable variables to path; with pack, mostly-zero tables by their rows
 * (rows.c). */
static int save_vars(fl_exe *e, const fl_prog *p, const char *path, int pack)
{
    const char **names;
    const fl_tensor **ts;
    int n;
    FL_CHECK(gather(e, p, path, &names, &ts, &n));
    fl__rows_pack pk = {0};
    int st = pack ? fl__rows_pack_tables(path, names, ts, n, &pk) : FL_OK;
    if (st == FL_OK && pack)
        st = fl__st_write(path, pk.names, pk.ts, pk.n, (const char *const *)pk.mkeys, (const char *const *)pk.mvals,
                          pk.nmeta);
    else if (st == FL_OK) st = fl_io_write_safetensors(path, names, ts, n);
    fl__rows_pack_free(&pk); /* empty when not packed or when the pack failed */
    free(names);
    free(ts);
    return st;
}

/* Reads path and moves the values of every persistable variable of p into e's scope. */
static int load_vars(fl_exe *e, const fl_prog *p, const char *path)
{
    char **names = NULL;
    fl_tensor **ts = NULL;
    int n = 0, st;
    fl__st_meta meta;
    FL_CHECK(fl__st_read(path, &names, &ts, &n, &meta));
    st = fl__rows_unpack_tables(path, &meta, &names, &ts, &n);
    fl__st_meta_free(&meta);
    if (st != FL_OK) {
        fl_io_free_tensors(names, ts, n);
        return st;
    }
    fl_strmap idx = {0};
    fl_tensor **dst = calloc((size_t)p->nvars + 1, sizeof *dst);
    int *src = calloc((size_t)p->nvars + 1, sizeof *src);
    if (!dst || !src) {
        st = fl__err(FL_ENOMEM, "loading '%s': out of memory", path);
        goto out;
    }
    for (int i = 0; i < n; i++)
        if (fl__strmap_put(&idx, names[i], i) != FL_OK) {
            st = fl__err(FL_ENOMEM, "loading '%s': out of memory", path);
            goto out;
        }
    /* 1. check everything */
    for (int i = 0; i < p->nvars; i++) {
        const fl_var *v = p->vars[i];
        int64_t k;
        if (!v->persistable) continue;
        if (!fl__strmap_get(&idx, v->name, &k)) {
            st = fl__err(FL_ENOTFOUND, "loading '%s': persistable variable '%s' is not in the file", path, v->name);
            goto out;
        }
        const fl_tensor *t = ts[k];
        int ok = t->dtype == v->dtype && t->ndim == v->ndim;
        for (int d = 0; ok && d < v->ndim; d++) ok = v->shape[d] < 0 || v->shape[d] == t->shape[d];
        if (!ok) {
            char want[200], got[200];
            var_str(want, sizeof want, v);
            tensor_str(got, sizeof got, t);
            st = fl__err(FL_EINVAL, "loading '%s': variable '%s': the program expects %s, the file holds %s", path, v->name,
                         want, got);
            goto out;
        }
        src[i] = (int)k;
    }
    /* 2. find or create the destination tensors (where the executor looks them up) */
    fl_scope *sc = fl_exe_scope(e);
    for (int i = 0; i < p->nvars; i++) {
        const fl_var *v = p->vars[i];
        if (!v->persistable) continue;
        dst[i] = fl_scope_find(sc, v->name);
        if (!dst[i]) dst[i] = fl_scope_var(fl__scope_root(sc), v->name);
        if (!dst[i]) {
            st = fl__err(fl_last_status(), "loading '%s': variable '%s': %s", path, v->name, fl_last_error());
            goto out;
        }
    }
    /* 3. swap the loaded contents in (cannot fail; the old contents are freed below) */
    for (int i = 0; i < p->nvars; i++) {
        if (!dst[i]) continue;
        fl_tensor tmp = *dst[i];
        *dst[i] = *ts[src[i]];
        *ts[src[i]] = tmp;
        fl__tensor_bump(dst[i]);
    }
    st = FL_OK;
out:
    free(dst);
    free(src);
    fl__strmap_free(&idx);
    fl_io_free_tensors(names, ts, n);
    return st;
}

static int check_args(fl_exe *e, const char *dir, const fl_prog *p, const char *fn)
{
    if (!e) return fl__err(FL_EINVAL, "%s: executor is NULL", fn);
    if (!dir || !*dir) return fl__err(FL_EINVAL, "%s: directory is NULL or empty", fn);
    if (p && p->magic != FL_PROG_MAGIC) return fl__err(FL_EINVAL, "%s: program is invalid", fn);
    return FL_OK;
}

int fl_io_save_persistables(fl_exe *e, const char *dir, const fl_prog *p)
{
    FL_CHECK(check_args(e, dir, p, "fl_io_save_persistables"));
    if (!p) return fl__err(FL_EINVAL, "fl_io_save_persistables: program is NULL");
    char *path = fl__path_join(dir, PERSIST_FILE);
    if (!path) return FL_ENOMEM;
    int st = save_vars(e, p, path, 0);
    free(path);
    return st;
}

int fl_io_load_persistables(fl_exe *e, const char *dir, const fl_prog *p)
{
    FL_CHECK(check_args(e, dir, p, "fl_io_load_persistables"));
    if (!p) return fl__err(FL_EINVAL, "fl_io_load_persistables: program is NULL");
    char *path = fl__path_join(dir, PERSIST_FILE);
    if (!path) return FL_ENOMEM;
    int st = load_vars(e, p, path);
    free(path);
    return st;
}

/* ---- inference models ---------------------------------------------------------------------- */

void fl_io_free_names(char **names, int n)
{
    if (!names) return;
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

int fl_io_save_inference_model(fl_exe *e, const char *dir, const char *const *feeds, int nfeed, fl_var *const *targets,
                               int ntarget, const fl_prog *p)
{
    FL_CHECK(check_args(e, dir, p, "fl_io_save_inference_model"));
    if (!p) return fl__err(FL_EINVAL, "fl_io_save_inference_model: program is NULL");
    if (ntarget <= 0 || !targets) return fl__err(FL_EINVAL, "fl_io_save_inference_model: no targets");
    if (nfeed < 0 || (nfeed && !feeds)) return fl__err(FL_EINVAL, "fl_io_save_inference_model: bad feed list");
    const char **tn = malloc((size_t)ntarget * sizeof *tn);
    if (!tn) return fl__err(FL_ENOMEM, "fl_io_save_inference_model: out of memory");
    for (int i = 0; i < ntarget; i++) {
        if (!targets[i] || targets[i]->magic != FL_VAR_MAGIC || targets[i]->prog != p) {
            free(tn);
            return fl__err(FL_EINVAL, "fl_io_save_inference_model: target #%d is not a variable of the program", i);
        }
        tn[i] = targets[i]->name;
    }
    fl_prog *q = NULL;
    char *text = NULL, *ppath = NULL, *mpath = NULL;
    fl_buf b = {0};
    int st = fl_prog_prune(p, feeds, nfeed, tn, ntarget, &q);
    if (st != FL_OK) goto out;
    /* inference behaviour for ops that have it (dropout), as fl_prog_clone(for_test) */
    for (int i = 0; i < q->nops && st == FL_OK; i++)
        if (fl__attr_find(q->ops[i], "is_test")) st = fl__attr_set_i(q->ops[i], "is_test", 1);
    if (st != FL_OK) goto out;
    q->version++;
    ppath = fl__path_join(dir, PARAMS_FILE);
    mpath = fl__path_join(dir, MODEL_FILE);
    if (!ppath || !mpath) {
        st = FL_ENOMEM;
        goto out;
    }
    FL_CHECK_GOTO(save_vars(e, q, ppath, 1), st, out);
    size_t tlen;
    FL_CHECK_GOTO(fl_prog_to_text(q, &text, &tlen), st, out);
    fl__buf_printf(&b, "# Fleet inference model: the feed and fetch lines name the model's inputs and outputs;\n"
                       "# the rest is the program (docs/program_format.md). Parameters: " PARAMS_FILE "\n");
    for (int w = 0; w < 2 && st == FL_OK; w++)
        for (int i = 0; i < (w ? ntarget : nfeed) && st == FL_OK; i++) {
            fl__buf_printf(&b, "%s ", w ? "fetch" : "feed");
            st = fl__json_quote(&b, w ? tn[i] : feeds[i]);
            fl__buf_put(&b, "\n", 1);
        }
    if (st != FL_OK) {
        st = fl__err(st, "fl_io_save_inference_model '%s': %s", mpath, fl_last_error());
        goto out;
    }
    fl__buf_put(&b, text, tlen);
    if (b.failed) {
        st = fl__err(FL_ENOMEM, "fl_io_save_inference_model: out of memory");
        goto out;
    }
    st = fl__write_file_atomic(mpath, b.p, b.len);
out:
    fl__buf_free(&b);
    free(text);
    free(ppath);
    free(mpath);
    free(tn);
    fl_prog_free(q);
    return st;
}

/* Takes the feed/fetch lines out of the model text (turning them into comments, so the
 * program parser's line numbers stay those of the file). */
static int take_names(char *buf, size_t len, const char *path, char ***feeds, int *nfeed, char ***fetches, int *nfetch)
{
    int lineno = 0;
    size_t pos = 0;
    while (pos < len) {
        char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        lineno++;
        size_t i = pos;
        while (i < end && (buf[i] == ' ' || buf[i] == '\t')) i++;
        int w = 0;
        if (end - i > 5 && !strncmp(buf + i, "feed ", 5)) w = 1;
        else if (end - i > 6 && !strncmp(buf + i, "fetch ", 6)) w = 2;
        if (w) {
            size_t at = i + (w == 1 ? 5 : 6), lend = end;
            while (at < end && buf[at] == ' ') at++;
            if (lend > at && buf[lend - 1] == '\r') lend--;
            while (lend > at && buf[lend - 1] == ' ') lend--;
            char *name = NULL, why[200];
            size_t q = at;
            int st = fl__json_unquote(buf, lend, &q, &name, why, sizeof why);
            if (st == FL_OK && q != lend) {
                free(name);
                st = FL_ECORRUPT;
                snprintf(why, sizeof why, "unexpected text after the name");
            }
            if (st != FL_OK)
                return fl__err(st, "'%s' line %d: bad %s line: %s", path, lineno, w == 1 ? "feed" : "fetch", why);
            char ***arr = w == 1 ? feeds : fetches;
            int *cnt = w == 1 ? nfeed : nfetch;
            char **na = realloc(*arr, (size_t)(*cnt + 1) * sizeof *na);
            if (!na) {
                free(name);
                return fl__err(FL_ENOMEM, "'%s': out of memory", path);
            }
            *arr = na;
            na[(*cnt)++] = name;
            buf[i] = '#';
        }
        pos = end + 1;
    }
    return FL_OK;
}

int fl_io_load_inference_model(fl_exe *e, const char *dir, fl_prog **prog, char ***feeds, int *nfeed, char ***fetches,
                               int *nfetch)
{
    FL_CHECK(check_args(e, dir, NULL, "fl_io_load_inference_model"));
    if (!prog || !feeds || !nfeed || !fetches || !nfetch)
        return fl__err(FL_EINVAL, "fl_io_load_inference_model: output pointer is NULL");
    *prog = NULL;
    *feeds = *fetches = NULL;
    *nfeed = *nfetch = 0;
    char *mpath = fl__path_join(dir, MODEL_FILE), *ppath = fl__path_join(dir, PARAMS_FILE), *text = NULL;
    char **fd = NULL, **ft = NULL;
    int nfd = 0, nft = 0, st;
    fl_prog *p = NULL;
    size_t len;
    if (!mpath || !ppath) {
        st = FL_ENOMEM;
        goto out;
    }
    FL_CHECK_GOTO(fl__read_file(mpath, MODEL_MAX_BYTES, &text, &len), st, out);
    FL_CHECK_GOTO(take_names(text, len, mpath, &fd, &nfd, &ft, &nft), st, out);
    st = fl_prog_from_text(text, len, &p);
    if (st != FL_OK) {
        st = fl__err(st, "'%s': %s", mpath, fl_last_error());
        goto out;
    }
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < (w ? nft : nfd); i++) {
            const char *nm = w ? ft[i] : fd[i];
            if (!fl_prog_var(p, nm)) {
                st = fl__err(FL_ECORRUPT, "'%s': %s variable '%s' is not declared in the program", mpath,
                             w ? "fetch" : "feed", nm);
                goto out;
            }
        }
    FL_CHECK_GOTO(load_vars(e, p, ppath), st, out);
    if ((st = fl__infer_fuse(p)) < 0) goto out;
    st = FL_OK;
    *prog = p;
    *feeds = fd;
    *nfeed = nfd;
    *fetches = ft;
    *nfetch = nft;
    p = NULL;
    fd = ft = NULL;
    nfd = nft = 0;
out:
    fl_prog_free(p);
    fl_io_free_names(fd, nfd);
    fl_io_free_names(ft, nft);
    free(text);
    free(mpath);
    free(ppath);
    return st;
}
