/*
 * table_sparse_io.c - checkpoint of a sparse table shard.  The shard is written under the
 * table's write lock (a consistent snapshot; requests to this table wait), streamed through a
 * 1 MiB buffer into an atomic file, one pass over the rows per tensor:
 *   "keys" I64 [n]   (uint64 ids stored as their two's-complement I64 bit pattern)
 *   "values" F32 [n, dim]   "moment1", "moment2" F32 [n, dim] (Adagrad: moment1; Adam: both)
 *   "show", "click", "delta_score" F32 [n]   "unseen_days" I32 [n]
 *   "beta_pow" F32 [2]   "pending_keys" I64 [p], "pending_counts" I32 [p] (count_filter_entry)
 *   "rng_state" I64 [64] (probability_entry draws), "shard" I64 [3] = {server, nservers, dim}
 * Loading restores all of it, so a table trained on after a reload behaves bit for bit as
 * the one that was saved.
 */
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"

typedef struct {
    fl__afile *f;
    uint8_t *buf;
    size_t len, cap;
    int st;
} wbuf;

static void wput(wbuf *w, const void *p, size_t n)
{
    if (w->st) return;
    if (w->len + n > w->cap) {
        w->st = fl__afile_write(w->f, w->buf, w->len);
        w->len = 0;
        if (w->st) return;
        if (n > w->cap) {
            w->st = fl__afile_write(w->f, p, n);
            return;
        }
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

static void wflush(wbuf *w)
{
    if (!w->st && w->len) w->st = fl__afile_write(w->f, w->buf, w->len);
    w->len = 0;
}

int fl__ps_row_selected(const fl__ps_sparse *t, const fl__ps_rowhdr *h, int mode)
{
    if (h->flags & FL__PS_ROW_FREE) return 0;
    if (mode == 0 || mode == 3) return 1;
    const fl_ps_accessor *a = &t->acc;
    float sc = (h->show - h->click) * a->nonclk_coeff + h->click * a->click_coeff;
    if (sc < a->base_threshold || h->unseen_days > a->delta_keep_days) return 0;
    return mode == 2 || h->delta_score >= a->delta_threshold;
}

enum { F_COUNT, F_KEY, F_VALUES, F_M1, F_M2, F_SHOW, F_CLICK, F_DELTA, F_UNSEEN, F_AFTER };

/* One pass of a save over the rows of both tiers: memory, then disk (SSD tables). */
typedef struct {
    wbuf *w;
    fl__ps_sparse *t;
    int mode, field;
    int64_t n; /* rows selected (counting pass) */
} pass;

static int put_row(void *user, uint8_t *row)
{
    pass *p = user;
    const size_t vb = (size_t)p->t->dim * 4;
    fl__ps_rowhdr h;
    memcpy(&h, row, sizeof h);
    if (!fl__ps_row_selected(p->t, &h, p->mode)) return FL__PS_VISIT_KEEP;
    int32_t unseen = h.unseen_days;
    switch (p->field) {
    case F_COUNT: p->n++; break;
    case F_KEY: wput(p->w, &h.key, 8); break;
    case F_VALUES: wput(p->w, row + FL__PS_ROW_HDR, vb); break;
    case F_M1: wput(p->w, row + FL__PS_ROW_HDR + vb, vb); break;
    case F_M2: wput(p->w, row + FL__PS_ROW_HDR + 2 * vb, vb); break;
    case F_SHOW: wput(p->w, &h.show, 4); break;
    case F_CLICK: wput(p->w, &h.click, 4); break;
    case F_DELTA: wput(p->w, &h.delta_score, 4); break;
    case F_UNSEEN: wput(p->w, &unseen, 4); break;
    case F_AFTER: /* after a delta save the saved rows' delta_score restarts; a daily save ages rows */
        if (p->mode == 1) h.delta_score = 0;
        else if (h.unseen_days < FL__PS_UNSEEN_MAX) h.unseen_days++;
        memcpy(row, &h, sizeof h);
        return FL__PS_VISIT_WRITE;
    }
    return p->w && p->w->st ? FL__PS_VISIT_STOP : FL__PS_VISIT_KEEP;
}

static int each_row(fl__ps_sparse *t, pass *p)
{
    for (int k = 0; k < FL__PS_STRIPES; k++) {
        fl__ps_stripe *s = &t->st[k];
        for (uint32_t idx = 0; idx < s->nalloc; idx++)
            if (put_row(p, fl__ps_row(t, s, idx)) == FL__PS_VISIT_STOP) return FL_OK;
    }
    return t->ssd ? fl__ps_ssd_foreach(t, put_row, p) : FL_OK;
}

static void write_field(wbuf *w, fl__ps_sparse *t, int mode, int field)
{
    pass p = {w, t, mode, field, 0};
    int st = each_row(t, &p);
    if (st && !w->st) w->st = st;
}

int fl__ps_sparse_save(fl__ps_sparse *t, const char *path, int mode)
{
    pthread_rwlock_wrlock(&t->lk); /* excludes every request to this table */
    int64_t np = 0;
    for (int k = 0; k < FL__PS_STRIPES; k++) np += t->st[k].plen;
    pass count = {NULL, t, mode, F_COUNT, 0};
    int cst = each_row(t, &count);
    if (cst) {
        pthread_rwlock_unlock(&t->lk);
        return cst;
    }
    const int64_t n = count.n;
    const int64_t d = t->dim;
    fl__ps_st_tensor td[14];
    int nt = 0;
    td[nt++] = (fl__ps_st_tensor){"keys", FL_INT64, 1, {n, 0}};
    td[nt++] = (fl__ps_st_tensor){"values", FL_FLOAT32, 2, {n, d}};
    if (t->opt.nstate >= 1) td[nt++] = (fl__ps_st_tensor){"moment1", FL_FLOAT32, 2, {n, d}};
    if (t->opt.nstate >= 2) td[nt++] = (fl__ps_st_tensor){"moment2", FL_FLOAT32, 2, {n, d}};
    td[nt++] = (fl__ps_st_tensor){"show", FL_FLOAT32, 1, {n, 0}};
    td[nt++] = (fl__ps_st_tensor){"click", FL_FLOAT32, 1, {n, 0}};
    td[nt++] = (fl__ps_st_tensor){"delta_score", FL_FLOAT32, 1, {n, 0}};
    td[nt++] = (fl__ps_st_tensor){"unseen_days", FL_INT32, 1, {n, 0}};
    td[nt++] = (fl__ps_st_tensor){"beta_pow", FL_FLOAT32, 1, {2, 0}};
    td[nt++] = (fl__ps_st_tensor){"pending_keys", FL_INT64, 1, {np, 0}};
    td[nt++] = (fl__ps_st_tensor){"pending_counts", FL_INT32, 1, {np, 0}};
    td[nt++] = (fl__ps_st_tensor){"rng_state", FL_INT64, 1, {FL__PS_STRIPES, 0}};
    td[nt++] = (fl__ps_st_tensor){"shard", FL_INT64, 1, {3, 0}};
    fl__afile f;
    wbuf w = {&f, malloc(1u << 20), 0, 1u << 20, FL_OK};
    int st = w.buf ? fl__afile_open(&f, path) : fl__err(FL_ENOMEM, "out of memory for a save buffer");
    int opened = st == FL_OK;
    if (st == FL_OK) st = fl__ps_st_write_header(&f, td, nt, t->cfg.name);
    if (st == FL_OK) {
        write_field(&w, t, mode, F_KEY);
        write_field(&w, t, mode, F_VALUES);
        if (t->opt.nstate >= 1) write_field(&w, t, mode, F_M1);
        if (t->opt.nstate >= 2) write_field(&w, t, mode, F_M2);
        write_field(&w, t, mode, F_SHOW);
        write_field(&w, t, mode, F_CLICK);
        write_field(&w, t, mode, F_DELTA);
        write_field(&w, t, mode, F_UNSEEN);
        wput(&w, t->pows, 8);
        for (int k = 0; k < FL__PS_STRIPES; k++)
            for (uint64_t i = 0; i < t->st[k].pcap; i++)
                if (t->st[k].pcounts[i]) wput(&w, &t->st[k].pkeys[i], 8);
        for (int k = 0; k < FL__PS_STRIPES; k++)
            for (uint64_t i = 0; i < t->st[k].pcap; i++)
                if (t->st[k].pcounts[i]) wput(&w, &t->st[k].pcounts[i], 4);
        for (int k = 0; k < FL__PS_STRIPES; k++) wput(&w, &t->st[k].rng.s, 8);
        int64_t shard[3] = {t->server, t->nservers, t->dim};
        wput(&w, shard, sizeof shard);
        wflush(&w);
        st = w.st;
    }
    if (st == FL_OK) st = fl__afile_commit(&f);
    else if (opened) fl__afile_abort(&f);
    if (st == FL_OK && (mode == 1 || mode == 3)) {
        pass after = {NULL, t, mode, F_AFTER, 0};
        st = each_row(t, &after);
    }
    pthread_rwlock_unlock(&t->lk);
    free(w.buf);
    return st;
}

int fl__ps_sparse_load(fl__ps_sparse *t, const char *path)
{
    char **names = NULL;
    fl_tensor **ts = NULL;
    int nts = 0;
    FL_CHECK(fl_io_read_safetensors(path, &names, &ts, &nts));
    fl_tensor *keys = NULL, *vals = NULL, *m1 = NULL, *m2 = NULL, *show = NULL, *click = NULL, *delta = NULL;
    fl_tensor *unseen = NULL, *pw = NULL, *pk = NULL, *pc = NULL, *rng = NULL, *shard = NULL;
    int64_t any1 = -1, two = 2, three = 3, stripes = FL__PS_STRIPES;
    int st = fl__ps_st_find(names, ts, nts, path, "keys", FL_INT64, 1, &any1, &keys);
    int64_t n = st ? 0 : fl_tensor_shape(keys)[0], nd[2] = {n, t->dim}, n1[1] = {n};
    if (st == FL_OK) st = fl__ps_st_find(names, ts, nts, path, "values", FL_FLOAT32, 2, nd, &vals);
    if (st == FL_OK && t->opt.nstate >= 1) st = fl__ps_st_find(names, ts, nts, path, "moment1", FL_FLOAT32, 2, nd, &m1);
    if (st == FL_OK && t->opt.nstate >= 2) st = fl__ps_st_find(names, ts, nts, path, "moment2", FL_FLOAT32, 2, nd, &m2);
    if (st == FL_OK) st = fl__ps_st_find(names, ts, nts, path, "show", FL_FLOAT32, 1, n1, &show);
    if (st == FL_OK) st = fl__ps_st_find(names, ts, nts, path, "click", FL_FLOAT32, 1, n1, &click);
    if (st == FL_OK) st = fl__ps_st_find(names, ts, nts, path, "delta_score", FL_FLOAT32, 1, n1, &delta);
    if (st == FL_OK) st = fl__ps_st_find(names, ts, nts, path, "unseen_days", FL_INT32, 1, n1, &unseen);
    if (st == FL_OK) st = fl__ps_st_find(names, ts, nts, path, "beta_pow", FL_FLOAT32, 1, &two, &pw);
    if (st == FL_OK) st = fl__ps_st_find(names, ts, nts, path, "pending_keys", FL_INT64, 1, &any1, &pk);
    int64_t np = st ? 0 : fl_tensor_shape(pk)[0];
    if (st == FL_OK) st = fl__ps_st_find(names, ts, nts, path, "pending_counts", FL_INT32, 1, &np, &pc);
    if (st == FL_OK) st = fl__ps_st_find(names, ts, nts, path, "rng_state", FL_INT64, 1, &stripes, &rng);
    if (st == FL_OK) st = fl__ps_st_find(names, ts, nts, path, "shard", FL_INT64, 1, &three, &shard);
    if (st == FL_OK) {
        const int64_t *sh = fl_tensor_cdata(shard);
        if (sh[0] != t->server || sh[1] != t->nservers || sh[2] != t->dim)
            st = fl__err(FL_ECORRUPT, "'%s': shard of server %lld of %lld with dim %lld, expected server %d of %d, dim %d",
                         path, (long long)sh[0], (long long)sh[1], (long long)sh[2], t->server, t->nservers, t->dim);
    }
    const size_t vb = (size_t)t->dim * 4;
    for (int64_t i = 0; st == FL_OK && i < n; i++) {
        uint64_t id = ((const uint64_t *)fl_tensor_cdata(keys))[i];
        if (fl_ps_sparse_server(id, t->nservers) != t->server) {
            st = fl__err(FL_ECORRUPT, "'%s': id %llu belongs to server %d, not %d", path, (unsigned long long)id,
                         fl_ps_sparse_server(id, t->nservers), t->server);
            break;
        }
        uint64_t hs = fl__ps_inner_hash(id);
        fl__ps_stripe *s = &t->st[hs >> 58];
        if (fl__ps_stripe_find(t, s, id, hs) || (t->ssd && fl__ps_ssd_get(t, id, NULL) > 0)) {
            st = fl__err(FL_ECORRUPT, "'%s': id %llu appears twice", path, (unsigned long long)id);
            break;
        }
        uint8_t *row = fl__ps_stripe_insert(t, s, id, hs);
        if (!row) {
            st = FL_ENOMEM;
            break;
        }
        int32_t days = ((const int32_t *)fl_tensor_cdata(unseen))[i];
        if (days < 0) {
            st = fl__err(FL_ECORRUPT, "'%s': unseen_days %d of id %llu is negative", path, days, (unsigned long long)id);
            break;
        }
        fl__ps_rowhdr h = {id,
                           ((const float *)fl_tensor_cdata(show))[i],
                           ((const float *)fl_tensor_cdata(click))[i],
                           ((const float *)fl_tensor_cdata(delta))[i],
                           (uint16_t)(days < (int32_t)FL__PS_UNSEEN_MAX ? days : (int32_t)FL__PS_UNSEEN_MAX),
                           FL__PS_ROW_REF};
        memcpy(row, &h, sizeof h);
        memcpy(row + FL__PS_ROW_HDR, (const float *)fl_tensor_cdata(vals) + i * t->dim, vb);
        if (m1) memcpy(row + FL__PS_ROW_HDR + vb, (const float *)fl_tensor_cdata(m1) + i * t->dim, vb);
        if (m2) memcpy(row + FL__PS_ROW_HDR + 2 * vb, (const float *)fl_tensor_cdata(m2) + i * t->dim, vb);
        if (t->ssd) st = fl__ps_ssd_evict(t, s); /* the budget holds while loading too */
    }
    for (int64_t i = 0; st == FL_OK && i < np; i++) {
        uint64_t id = ((const uint64_t *)fl_tensor_cdata(pk))[i];
        int32_t c = ((const int32_t *)fl_tensor_cdata(pc))[i];
        if (c <= 0) {
            st = fl__err(FL_ECORRUPT, "'%s': pending count %d of id %llu is not positive", path, c, (unsigned long long)id);
            break;
        }
        uint64_t hs = fl__ps_inner_hash(id);
        st = fl__ps_pending_set(&t->st[hs >> 58], id, hs, (uint32_t)c);
    }
    if (st == FL_OK) {
        memcpy(t->pows, fl_tensor_cdata(pw), 8);
        for (int k = 0; k < FL__PS_STRIPES; k++) t->st[k].rng.s = ((const uint64_t *)fl_tensor_cdata(rng))[k];
    }
    fl_io_free_tensors(names, ts, nts);
    return st;
}
