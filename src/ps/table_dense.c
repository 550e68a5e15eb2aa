/*
 * table_dense.c - one server's shard of a dense table: rows [row0, row1) of the parameter,
 * its optimizer state in slabs of the same size, and Adam's pow accumulators.  Pulls take a
 * read lock, pushes and initialization a write lock.
 *
 * Checkpoint tensors (safetensors, one file per shard): "values" F32 [shard rows, cols],
 * "moment1" / "moment2" F32 (Adagrad: moment1; Adam: both), "beta_pow" F32 [2],
 * "row_range" I64 [3] = {row0, row1, total rows}, "initialized" I32 [1].
 */
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"

struct fl__ps_dense {
    fl_ps_table_config cfg;
    fl__ps_opt opt;
    int64_t row0, row1, n;
    float *w, *m1, *m2;
    float pows[2];
    int initialized;
    pthread_rwlock_t lk;
};

static float *zalloc(int64_t n)
{
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    float *p = fl__alloc_aligned(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

int fl__ps_dense_create(const fl_ps_table_config *cfg, int server, int nservers, fl__ps_dense **out)
{
    fl__ps_dense *t = calloc(1, sizeof *t);
    if (!t) return fl__err(FL_ENOMEM, "dense table '%s': out of memory", cfg->name);
    t->cfg = *cfg;
    fl__ps_opt_init(&t->opt, &cfg->opt);
    fl__ps_opt_pows_init(&t->opt, t->pows);
    fl_ps_dense_split(cfg->rows, nservers, server, &t->row0, &t->row1);
    t->n = (t->row1 - t->row0) * cfg->cols;
    t->w = zalloc(t->n);
    if (t->opt.nstate >= 1) t->m1 = zalloc(t->n);
    if (t->opt.nstate >= 2) t->m2 = zalloc(t->n);
    if (!t->w || (t->opt.nstate >= 1 && !t->m1) || (t->opt.nstate >= 2 && !t->m2)) {
        fl__free_aligned(t->w);
        fl__free_aligned(t->m1);
        fl__free_aligned(t->m2);
        long long n = (long long)t->n;
        free(t);
        return fl__err(FL_ENOMEM, "dense table '%s': out of memory for %lld floats", cfg->name, n);
    }
    pthread_rwlock_init(&t->lk, NULL);
    *out = t;
    return FL_OK;
}

void fl__ps_dense_free(fl__ps_dense *t)
{
    if (!t) return;
    pthread_rwlock_destroy(&t->lk);
    fl__free_aligned(t->w);
    fl__free_aligned(t->m1);
    fl__free_aligned(t->m2);
    free(t);
}

int64_t fl__ps_dense_numel(const fl__ps_dense *t) { return t->n; }

void fl__ps_dense_rows(const fl__ps_dense *t, int64_t *row0, int64_t *row1)
{
    *row0 = t->row0;
    *row1 = t->row1;
}

void fl__ps_dense_pull(fl__ps_dense *t, uint64_t off, uint64_t count, float *out)
{
    pthread_rwlock_rdlock(&t->lk);
    memcpy(out, t->w + off, count * sizeof(float));
    pthread_rwlock_unlock(&t->lk);
}

int fl__ps_dense_push(fl__ps_dense *t, uint64_t off, uint64_t count, const float *grad, float scale, int last)
{
    pthread_rwlock_wrlock(&t->lk);
    int st = fl__ps_opt_apply(&t->opt, t->w + off, t->m1 ? t->m1 + off : NULL, t->m2 ? t->m2 + off : NULL, grad,
                              (int64_t)count, scale, t->pows);
    if (st == FL_OK && last) fl__ps_opt_pows_advance(&t->opt, t->pows);
    pthread_rwlock_unlock(&t->lk);
    if (st) return fl__err(st, "dense table '%s': %s", t->cfg.name, fl_last_error());
    return FL_OK;
}

void fl__ps_dense_init(fl__ps_dense *t, uint64_t off, uint64_t count, const float *vals, int force, int last, int *applied)
{
    pthread_rwlock_wrlock(&t->lk);
    *applied = 0;
    if (force || !t->initialized) {
        memcpy(t->w + off, vals, count * sizeof(float));
        *applied = 1;
        if (last) t->initialized = 1;
    }
    pthread_rwlock_unlock(&t->lk);
}

void fl__ps_dense_stats(fl__ps_dense *t, fl_ps_table_stats *out)
{
    memset(out, 0, sizeof *out);
    out->rows = t->row1 - t->row0;
    out->bytes = (int64_t)sizeof *t + t->n * (int64_t)sizeof(float) * (1 + t->opt.nstate);
    out->payload_per_key = (double)t->cfg.cols * sizeof(float) * (1 + t->opt.nstate);
    out->bytes_per_key = out->rows ? (double)out->bytes / (double)out->rows : 0;
}

/* ---- checkpoint -------------------------------------------------------------------------- */

int fl__ps_dense_save(fl__ps_dense *t, const char *path)
{
    int64_t nr = t->row1 - t->row0, cols = t->cfg.cols;
    fl__ps_st_tensor d[6];
    int nd = 0;
    d[nd++] = (fl__ps_st_tensor){"values", FL_FLOAT32, 2, {nr, cols}};
    if (t->m1) d[nd++] = (fl__ps_st_tensor){"moment1", FL_FLOAT32, 2, {nr, cols}};
    if (t->m2) d[nd++] = (fl__ps_st_tensor){"moment2", FL_FLOAT32, 2, {nr, cols}};
    d[nd++] = (fl__ps_st_tensor){"beta_pow", FL_FLOAT32, 1, {2, 0}};
    d[nd++] = (fl__ps_st_tensor){"row_range", FL_INT64, 1, {3, 0}};
    d[nd++] = (fl__ps_st_tensor){"initialized", FL_INT32, 1, {1, 0}};
    fl__afile f;
    FL_CHECK(fl__afile_open(&f, path));
    pthread_rwlock_rdlock(&t->lk);
    int64_t range[3] = {t->row0, t->row1, t->cfg.rows};
    int32_t init = t->initialized;
    int st = fl__ps_st_write_header(&f, d, nd, t->cfg.name);
    if (st == FL_OK) st = fl__afile_write(&f, t->w, (size_t)t->n * 4);
    if (st == FL_OK && t->m1) st = fl__afile_write(&f, t->m1, (size_t)t->n * 4);
    if (st == FL_OK && t->m2) st = fl__afile_write(&f, t->m2, (size_t)t->n * 4);
    if (st == FL_OK) st = fl__afile_write(&f, t->pows, 8);
    if (st == FL_OK) st = fl__afile_write(&f, range, sizeof range);
    if (st == FL_OK) st = fl__afile_write(&f, &init, 4);
    pthread_rwlock_unlock(&t->lk);
    if (st == FL_OK) return fl__afile_commit(&f);
    fl__afile_abort(&f);
    return st;
}

int fl__ps_dense_load(fl__ps_dense *t, const char *path)
{
    char **names = NULL;
    fl_tensor **ts = NULL;
    int n = 0;
    FL_CHECK(fl_io_read_safetensors(path, &names, &ts, &n));
    int64_t nr = t->row1 - t->row0, shp[2] = {nr, t->cfg.cols}, two = 2, three = 3, one = 1;
    fl_tensor *v = NULL, *m1 = NULL, *m2 = NULL, *pw = NULL, *rr = NULL, *in = NULL;
    int st = fl__ps_st_find(names, ts, n, path, "values", FL_FLOAT32, 2, shp, &v);
    if (st == FL_OK && t->m1) st = fl__ps_st_find(names, ts, n, path, "moment1", FL_FLOAT32, 2, shp, &m1);
    if (st == FL_OK && t->m2) st = fl__ps_st_find(names, ts, n, path, "moment2", FL_FLOAT32, 2, shp, &m2);
    if (st == FL_OK) st = fl__ps_st_find(names, ts, n, path, "beta_pow", FL_FLOAT32, 1, &two, &pw);
    if (st == FL_OK) st = fl__ps_st_find(names, ts, n, path, "row_range", FL_INT64, 1, &three, &rr);
    if (st == FL_OK) st = fl__ps_st_find(names, ts, n, path, "initialized", FL_INT32, 1, &one, &in);
    if (st == FL_OK) {
        const int64_t *r = fl_tensor_cdata(rr);
        if (r[0] != t->row0 || r[1] != t->row1 || r[2] != t->cfg.rows)
            st = fl__err(FL_ECORRUPT,
                         "'%s': dense table '%s' shard holds rows [%lld, %lld) of %lld, this server "
                         "expects [%lld, %lld) of %lld",
                         path, t->cfg.name, (long long)r[0], (long long)r[1], (long long)r[2], (long long)t->row0,
                         (long long)t->row1, (long long)t->cfg.rows);
    }
    if (st == FL_OK) {
        pthread_rwlock_wrlock(&t->lk);
        memcpy(t->w, fl_tensor_cdata(v), (size_t)t->n * 4);
        if (m1) memcpy(t->m1, fl_tensor_cdata(m1), (size_t)t->n * 4);
        if (m2) memcpy(t->m2, fl_tensor_cdata(m2), (size_t)t->n * 4);
        memcpy(t->pows, fl_tensor_cdata(pw), 8);
        t->initialized = 1; /* loaded values count as initialized, whatever the flag said */
        pthread_rwlock_unlock(&t->lk);
    }
    fl_io_free_tensors(names, ts, n);
    return st;
}
