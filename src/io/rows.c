/*
 * rows.c - tables stored as their non-zero rows (docs/checkpoints.md).
 *
 * An inference model exported from parameter servers holds each sparse table as a local
 * [height, dim] parameter in which only the rows the servers created are non-zero: the CTR
 * demo's 1,000,001 x 10 table has some 800 of them, and stored whole it is 40 MB of zeros.
 * A 2-D tensor with fewer than half of its rows non-zero is therefore written as two
 * ordinary safetensors tensors and one metadata entry:
 *
 *   NAME@ids    I64 [n]        the non-zero rows' indices, ascending
 *   NAME@rows   F32 [n, dim]   those rows, in the same order (the table's dtype)
 *   __metadata__: {"NAME@height": "<height>"}
 *
 * so NumPy or PyTorch rebuild it with zeros((height, dim)) and t[ids] = rows.  A row counts
 * as non-zero when any of its bits is set (-0.0 and NaN rows are kept), so the rebuilt
 * table is bit for bit the saved one.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "io_internal.h"

#define IDS_SUFFIX "@ids"
#define ROWS_SUFFIX "@rows"
#define HEIGHT_SUFFIX "@height"

static int row_nonzero(const unsigned char *r, size_t nbytes)
{
    for (size_t k = 0; k < nbytes; k++)
        if (r[k]) return 1;
    return 0;
}

static char *suffixed(const char *name, const char *suffix)
{
    size_t len = strlen(name) + strlen(suffix) + 1;
    char *s = malloc(len);
    if (s) snprintf(s, len, "%s%s", name, suffix);
    return s;
}

/* Grows the owned arrays of p by one tensor; false when out of memory. */
static int own(fl__rows_pack *p, char *name, fl_tensor *t)
{
    char **nn = realloc(p->own_names, (size_t)(p->nown + 1) * sizeof *nn);
    if (nn) p->own_names = nn;
    fl_tensor **nt = nn ? realloc(p->own_ts, (size_t)(p->nown + 1) * sizeof *nt) : NULL;
    if (nt) p->own_ts = nt;
    if (!name || !t || !nt) {
        free(name);
        fl_tensor_free(t);
        return 0;
    }
    p->own_names[p->nown] = name;
    p->own_ts[p->nown++] = t;
    return 1;
}

static int add_meta(fl__rows_pack *p, const char *name, int64_t height)
{
    char **k = realloc(p->mkeys, (size_t)(p->nmeta + 1) * sizeof *k);
    if (k) p->mkeys = k;
    char **v = k ? realloc(p->mvals, (size_t)(p->nmeta + 1) * sizeof *v) : NULL;
    if (v) p->mvals = v;
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)height);
    char *ks = v ? suffixed(name, HEIGHT_SUFFIX) : NULL, *vs = ks ? fl__strdup(num) : NULL;
    if (!vs) {
        free(ks);
        return 0;
    }
    p->mkeys[p->nmeta] = ks;
    p->mvals[p->nmeta++] = vs;
    return 1;
}

/* Appends NAME@ids and NAME@rows for table t (which has nz non-zero rows) to p. */
static int pack_one(fl__rows_pack *p, const char *name, const fl_tensor *t, int64_t nz)
{
    const int64_t height = fl_tensor_dim(t, 0), dim = fl_tensor_dim(t, 1);
    const size_t rb = (size_t)dim * fl_dtype_size(fl_tensor_dtype(t));
    fl_tensor *ids = fl_tensor_create(FL_INT64, 1, &nz);
    fl_tensor *rows = ids ? fl_tensor_create(fl_tensor_dtype(t), 2, (const int64_t[]){nz, dim}) : NULL;
    if (!rows) {
        fl_tensor_free(ids);
        return FL_ENOMEM;
    }
    const unsigned char *src = fl_tensor_cdata(t);
    unsigned char *dst = fl_tensor_data(rows);
    int64_t *iv = fl_tensor_data(ids), k = 0;
    for (int64_t r = 0; r < height; r++)
        if (row_nonzero(src + (size_t)r * rb, rb)) {
            iv[k] = r;
            memcpy(dst + (size_t)k * rb, src + (size_t)r * rb, rb);
            k++;
        }
    if (!own(p, suffixed(name, IDS_SUFFIX), ids)) {
        fl_tensor_free(rows);
        return FL_ENOMEM;
    }
    p->names[p->n] = p->own_names[p->nown - 1];
    p->ts[p->n++] = ids;
    if (!own(p, suffixed(name, ROWS_SUFFIX), rows)) return FL_ENOMEM;
    p->names[p->n] = p->own_names[p->nown - 1];
    p->ts[p->n++] = rows;
    return add_meta(p, name, height) ? FL_OK : FL_ENOMEM;
}

int fl__rows_pack_tables(const char *path, const char *const *names, const fl_tensor *const *ts, int n, fl__rows_pack *out)
{
    *out = (fl__rows_pack){0};
    out->names = malloc((size_t)(2 * n + 1) * sizeof *out->names);
    out->ts = malloc((size_t)(2 * n + 1) * sizeof *out->ts);
    if (!out->names || !out->ts) {
        fl__rows_pack_free(out);
        return fl__err(FL_ENOMEM, "saving '%s': out of memory", path);
    }
    for (int i = 0; i < n; i++) {
        const fl_tensor *t = ts[i];
        int64_t nz = 0, height = fl_tensor_ndim(t) == 2 ? fl_tensor_dim(t, 0) : 0;
        if (height >= 2 && fl_tensor_dim(t, 1) > 0 && !fl_tensor_is_rows(t)) {
            size_t rb = (size_t)fl_tensor_dim(t, 1) * fl_dtype_size(fl_tensor_dtype(t));
            const unsigned char *d = fl_tensor_cdata(t);
            for (int64_t r = 0; r < height && 2 * nz < height; r++) nz += row_nonzero(d + (size_t)r * rb, rb);
        }
        if (height >= 2 && 2 * nz < height) {
            int st = pack_one(out, names[i], t, nz);
            if (st != FL_OK) {
                fl__rows_pack_free(out);
                return fl__err(st, "saving '%s': out of memory packing table '%s'", path, names[i]);
            }
            FL_DEBUG(FL_SUB_IO, "'%s': table '%s' stored as %lld non-zero rows of %lld", path, names[i], (long long)nz,
                     (long long)height);
            continue;
        }
        out->names[out->n] = names[i];
        out->ts[out->n++] = t;
    }
    return FL_OK;
}

void fl__rows_pack_free(fl__rows_pack *p)
{
    for (int i = 0; i < p->nown; i++) {
        free(p->own_names[i]);
        fl_tensor_free(p->own_ts[i]);
    }
    for (int i = 0; i < p->nmeta; i++) {
        free(p->mkeys[i]);
        free(p->mvals[i]);
    }
    free(p->own_names);
    free(p->own_ts);
    free(p->mkeys);
    free(p->mvals);
    free(p->names);
    free(p->ts);
    *p = (fl__rows_pack){0};
}

/* ---- loading ------------------------------------------------------------------------------ */

static int find(char **names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (names[i] && !strcmp(names[i], name)) return i;
    return -1;
}

/* Rebuilds table `name` of `height` rows into a new tensor *out from entries ii (ids) and ir
 * (rows). */
static int rebuild(const char *path, const char *name, int64_t height, const fl_tensor *ids, const fl_tensor *rows,
                   fl_tensor **out)
{
    if (fl_tensor_dtype(ids) != FL_INT64 || fl_tensor_ndim(ids) != 1)
        return fl__err(FL_ECORRUPT, "'%s': table '%s': '%s" IDS_SUFFIX "' must be I64 of rank 1", path, name, name);
    int64_t n = fl_tensor_dim(ids, 0);
    if (fl_tensor_ndim(rows) != 2 || fl_tensor_dim(rows, 0) != n)
        return fl__err(FL_ECORRUPT, "'%s': table '%s': '%s" ROWS_SUFFIX "' must be [%lld, dim] to match its %lld ids", path,
                       name, name, (long long)n, (long long)n);
    const int64_t *iv = fl_tensor_cdata(ids);
    for (int64_t k = 0; k < n; k++) {
        if (iv[k] < 0 || iv[k] >= height)
            return fl__err(FL_ECORRUPT,
                           "'%s': table '%s': id %lld (entry #%lld of '%s" IDS_SUFFIX "') is out of range [0, %lld)", path,
                           name, (long long)iv[k], (long long)k, name, (long long)height);
        if (k && iv[k] <= iv[k - 1])
            return fl__err(FL_ECORRUPT, "'%s': table '%s': ids must be ascending, but #%lld is %lld after %lld", path, name,
                           (long long)k, (long long)iv[k], (long long)iv[k - 1]);
    }
    int64_t dim = fl_tensor_dim(rows, 1);
    fl_tensor *t = fl_tensor_create(fl_tensor_dtype(rows), 2, (const int64_t[]){height, dim});
    if (!t) return fl__err(fl_last_status(), "'%s': table '%s': %s", path, name, fl_last_error());
    size_t rb = (size_t)dim * fl_dtype_size(fl_tensor_dtype(rows));
    unsigned char *d = fl_tensor_data(t);
    const unsigned char *s = fl_tensor_cdata(rows);
    memset(d, 0, (size_t)height * rb);
    for (int64_t k = 0; k < n; k++) memcpy(d + (size_t)iv[k] * rb, s + (size_t)k * rb, rb);
    *out = t;
    return FL_OK;
}

int fl__rows_unpack_tables(const char *path, const fl__st_meta *meta, char ***names, fl_tensor ***ts, int *n)
{
    for (int m = 0; meta && m < meta->n; m++) {
        const char *key = meta->keys[m];
        size_t kl = strlen(key), sl = strlen(HEIGHT_SUFFIX);
        if (kl <= sl || strcmp(key + kl - sl, HEIGHT_SUFFIX) != 0) continue;
        char name[512];
        if (kl - sl >= sizeof name) return fl__err(FL_ECORRUPT, "'%s': metadata key '%.100s...' is too long", path, key);
        memcpy(name, key, kl - sl);
        name[kl - sl] = 0;
        char *end;
        errno = 0;
        long long height = strtoll(meta->vals[m], &end, 10);
        if (errno || end == meta->vals[m] || *end || height < 1)
            return fl__err(FL_ECORRUPT, "'%s': metadata '%s' is '%.40s', expected the table's height (an integer >= 1)",
                           path, key, meta->vals[m]);
        char ids_name[520], rows_name[520];
        snprintf(ids_name, sizeof ids_name, "%s" IDS_SUFFIX, name);
        snprintf(rows_name, sizeof rows_name, "%s" ROWS_SUFFIX, name);
        int ii = find(*names, *n, ids_name), ir = find(*names, *n, rows_name);
        if (ii < 0 || ir < 0)
            return fl__err(FL_ECORRUPT, "'%s': metadata '%s' announces table '%s' by rows, but tensor '%s' is missing",
                           path, key, name, ii < 0 ? ids_name : rows_name);
        if (find(*names, *n, name) >= 0)
            return fl__err(FL_ECORRUPT, "'%s': table '%s' is stored both whole and by rows", path, name);
        fl_tensor *full = NULL;
        FL_CHECK(rebuild(path, name, height, (*ts)[ii], (*ts)[ir], &full));
        char *nm = fl__strdup(name);
        if (!nm) {
            fl_tensor_free(full);
            return fl__err(FL_ENOMEM, "'%s': out of memory", path);
        }
        /* NAME takes the place of NAME@ids; NAME@rows leaves the arrays */
        free((*names)[ii]);
        fl_tensor_free((*ts)[ii]);
        (*names)[ii] = nm;
        (*ts)[ii] = full;
        free((*names)[ir]);
        fl_tensor_free((*ts)[ir]);
        for (int k = ir; k + 1 < *n; k++) {
            (*names)[k] = (*names)[k + 1];
            (*ts)[k] = (*ts)[k + 1];
        }
        (*n)--;
    }
    return FL_OK;
}
