/*
 * table_ssd.c - the disk tier of SSD sparse tables (Paddle's SSDSparseTable) on RocksDB.
 *
 * An SSD table is an ordinary sparse table (table_sparse.c) whose stripes keep at most
 * t->stripe_rows rows in memory; every other row lives in a RocksDB database of its own, one
 * per server and table instance, keyed by the 8 bytes of the id, the value being the whole
 * row as it is in memory (header with show, click, delta_score, unseen_days, then values and
 * optimizer state: `stride` bytes).  A row is in exactly one tier:
 *   - a training touch of a row on disk moves it into memory (fetch: the misses of one
 *     stripe of a request in one MultiGet, the promoted rows deleted in one write batch);
 *   - after a stripe has served a request, rows beyond its budget go to disk, chosen by
 *     CLOCK: the hand sweeps the stripe's rows, clearing reference bits (set by every
 *     training touch) and taking the first rows found without one; their writes go in one
 *     batch before they leave memory, so a row is never lost between tiers;
 *   - pulls that are not training read disk rows without moving them.
 * Save, shrink and the delta / daily save updates visit the disk rows with an iterator while
 * holding the table's write lock; each row is written whole in a write batch, so a
 * checkpoint never sees half a row.  The database is a cache of the table, not a durable
 * copy: the write-ahead log is off, and it is removed when the table is freed (checkpoints
 * are the safetensors files of table_sparse_io.c, the same for both kinds of table).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps_internal.h"

int fl__ps_ssd_check(const fl_ps_table_config *t)
{
    const int has = t->ssd_path && *t->ssd_path;
    if (!has) {
        if (t->mem_budget_mb)
            return fl__err(FL_EINVAL,
                           "sparse table '%s': mem_budget_mb is %lld but ssd_path is not set (the budget is "
                           "that of an SSD table)",
                           t->name, (long long)t->mem_budget_mb);
        return FL_OK;
    }
    if (t->mem_budget_mb < 1 || t->mem_budget_mb > ((int64_t)1 << 30))
        return fl__err(FL_EINVAL, "sparse table '%s': mem_budget_mb must be in [1, 2^30] with ssd_path, got %lld", t->name,
                       (long long)t->mem_budget_mb);
    if (strlen(t->ssd_path) > 3000)
        return fl__err(FL_EINVAL, "sparse table '%s': ssd_path is longer than 3000 characters", t->name);
#ifndef FL_HAVE_ROCKSDB
    return fl__err(FL_EUNSUPPORTED,
                   "sparse table '%s': ssd_path needs RocksDB and this build has none (install librocksdb-dev, "
                   "e.g. with scripts/ensure-deps.sh build, then rebuild)",
                   t->name);
#else
    return FL_OK;
#endif
}

#ifdef FL_HAVE_ROCKSDB
#include <rocksdb/c.h>

#define BATCH_OPS 4096 /* writes per batch while visiting every disk row */

struct fl__ps_ssd {
    rocksdb_t *db;
    rocksdb_column_family_handle_t *cf; /* the default column family, for batched reads */
    rocksdb_options_t *opts;
    rocksdb_block_based_table_options_t *bbo;
    rocksdb_cache_t *cache;
    rocksdb_filterpolicy_t *bloom; /* owned by bbo once set */
    rocksdb_readoptions_t *ro;
    rocksdb_writeoptions_t *wo;
    _Atomic int64_t rows; /* rows on disk */
    char path[3200];
};

static atomic_uint_fast64_t instances; /* a fresh directory per table instance */

/* Takes a RocksDB error string (freed) into the thread's error. */
static int db_err(const fl__ps_sparse *t, char *e, const char *what)
{
    int st = fl__err(FL_EIO, "sparse table '%s': RocksDB %s in '%s': %s", t->cfg.name, what, t->ssd->path, e ? e : "?");
    rocksdb_free(e);
    return st;
}

int fl__ps_ssd_open(fl__ps_sparse *t)
{
    FL_CHECK(fl__ps_ssd_check(&t->cfg));
    fl__ps_ssd *d = calloc(1, sizeof *d);
    if (!d) return fl__err(FL_ENOMEM, "sparse table '%s': out of memory", t->cfg.name);
    if (mkdir(t->cfg.ssd_path, 0755) && errno != EEXIST) {
        int e = errno;
        free(d);
        return fl__err(FL_EIO, "sparse table '%s': cannot create ssd_path '%s': %s", t->cfg.name, t->cfg.ssd_path,
                       strerror(e));
    }
    snprintf(d->path, sizeof d->path, "%s/%s.s%d.p%ld.%llu", t->cfg.ssd_path, t->cfg.name, t->server, (long)getpid(),
             (unsigned long long)atomic_fetch_add(&instances, 1));
    d->opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(d->opts, 1);
    rocksdb_options_set_write_buffer_size(d->opts, (size_t)4 << 20);
    rocksdb_options_set_max_write_buffer_number(d->opts, 2);          /* 2 x 4 MiB */
    rocksdb_options_set_compression(d->opts, rocksdb_no_compression); /* floats barely compress */
    rocksdb_options_set_max_open_files(d->opts, -1);                  /* table readers stay open */
    /* A bloom filter over the memtables' keys: most reads of a training pull are new ids,
     * absent from every tier, and a miss no longer searches the memtables' skip lists. */
    rocksdb_options_set_memtable_prefix_bloom_size_ratio(d->opts, 0.05);
    rocksdb_options_set_memtable_whole_key_filtering(d->opts, 1);
    d->bbo = rocksdb_block_based_options_create();
    d->cache = rocksdb_cache_create_lru((size_t)4 << 20);
    rocksdb_block_based_options_set_block_cache(d->bbo, d->cache);
    /* Index and bloom filter blocks stay with their table readers, outside the small block
     * cache (where they would be evicted and read again at every lookup): about 1.3 bytes of
     * memory per row on disk with 10 bits per key. */
    d->bloom = rocksdb_filterpolicy_create_bloom(10);
    rocksdb_block_based_options_set_filter_policy(d->bbo, d->bloom);
    rocksdb_options_set_block_based_table_factory(d->opts, d->bbo);
    d->ro = rocksdb_readoptions_create();
    d->wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(d->wo, 1);
    t->ssd = d;
    char *e = NULL;
    rocksdb_destroy_db(d->opts, d->path, &e); /* a leftover of a crashed process with this pid */
    rocksdb_free(e);
    e = NULL;
    const char *cf_name = "default";
    const rocksdb_options_t *cf_opts = d->opts;
    d->db = rocksdb_open_column_families(d->opts, d->path, 1, &cf_name, &cf_opts, &d->cf, &e);
    if (!d->db) {
        int st = db_err(t, e, "open");
        fl__ps_ssd_close(t);
        return st;
    }
    /* A stripe's share of the budget holds `fit` rows with their index slots (4 bytes at a
     * load of 3/5..3/4, and room to spare).  Rows are allocated by chunks of about fit/8 (a power of two, 16 to
     * 256 rows), so it keeps 7/8 of fit: the last chunk's slack stays within the share. */
    uint64_t per_row = t->stride + 11, budget = (uint64_t)t->cfg.mem_budget_mb << 20;
    uint64_t fit = budget / per_row / FL__PS_STRIPES, rows = fit - fit / 8;
    uint32_t shift = 4;
    while (shift < FL__PS_CHUNK_SHIFT && (2ull << shift) <= fit / 8) shift++;
    t->chunk_shift = shift;
    t->stripe_rows = rows < 16 ? 16 : rows > FL__PS_MAX_STRIPE_ROWS ? FL__PS_MAX_STRIPE_ROWS : (uint32_t)rows;
    return FL_OK;
}

void fl__ps_ssd_close(fl__ps_sparse *t)
{
    fl__ps_ssd *d = t->ssd;
    if (!d) return;
    if (d->db) {
        rocksdb_column_family_handle_destroy(d->cf);
        rocksdb_close(d->db);
        char *e = NULL;
        rocksdb_destroy_db(d->opts, d->path, &e);
        if (e) FL_WARN(FL_SUB_PS, "sparse table '%s': removing '%s': %s", t->cfg.name, d->path, e);
        rocksdb_free(e);
        rmdir(d->path);
    }
    rocksdb_readoptions_destroy(d->ro);
    rocksdb_writeoptions_destroy(d->wo);
    rocksdb_options_destroy(d->opts);
    rocksdb_block_based_options_destroy(d->bbo);
    rocksdb_cache_destroy(d->cache);
    free(d);
    t->ssd = NULL;
}

int64_t fl__ps_ssd_rows(const fl__ps_sparse *t) { return t->ssd ? atomic_load(&t->ssd->rows) : 0; }

static int write_batch(fl__ps_sparse *t, rocksdb_writebatch_t *b)
{
    if (!rocksdb_writebatch_count(b)) return FL_OK;
    char *e = NULL;
    rocksdb_write(t->ssd->db, t->ssd->wo, b, &e);
    rocksdb_writebatch_clear(b);
    return e ? db_err(t, e, "write") : FL_OK;
}

static void set_ref(uint8_t *row)
{
    uint16_t f;
    memcpy(&f, row + offsetof(fl__ps_rowhdr, flags), 2);
    f |= FL__PS_ROW_REF;
    memcpy(row + offsetof(fl__ps_rowhdr, flags), &f, 2);
}

int fl__ps_ssd_fetch(fl__ps_sparse *t, fl__ps_stripe *s, const uint64_t *ids, const uint64_t *hs, const uint32_t *order,
                     uint32_t q0, uint32_t q1, int promote, float *out, uint8_t *found)
{
    fl__ps_ssd *d = t->ssd;
    if (atomic_load(&d->rows) == 0 || q1 <= q0) return FL_OK;
    const uint32_t cap = q1 - q0;
    uint32_t *pos = malloc((size_t)cap * sizeof *pos);
    const char **keys = malloc((size_t)cap * sizeof *keys);
    size_t *klen = malloc((size_t)cap * sizeof *klen);
    rocksdb_pinnableslice_t **vals = calloc(cap, sizeof *vals);
    char **errs = calloc(cap, sizeof *errs);
    int st = FL_OK;
    if (!pos || !keys || !klen || !vals || !errs) {
        st = fl__err(FL_ENOMEM, "sparse table '%s': out of memory reading %u rows from disk", t->cfg.name, cap);
        goto done;
    }
    uint32_t m = 0;
    for (uint32_t q = q0; q < q1; q++) {
        uint32_t i = order[q];
        if (fl__ps_stripe_find(t, s, ids[i], hs[i])) continue;
        pos[m] = i;
        keys[m] = (const char *)&ids[i];
        klen[m++] = 8;
    }
    if (!m) goto done;
    /* one batched lookup (RocksDB sorts the keys and shares index and filter probes) */
    rocksdb_batched_multi_get_cf(d->db, d->ro, d->cf, m, keys, klen, vals, errs, 0);
    rocksdb_writebatch_t *b = promote ? rocksdb_writebatch_create() : NULL;
    int64_t moved = 0;
    for (uint32_t j = 0; j < m && st == FL_OK; j++) {
        uint32_t i = pos[j];
        size_t vlen = 0;
        const char *v = vals[j] ? rocksdb_pinnableslice_value(vals[j], &vlen) : NULL;
        if (errs[j]) {
            st = db_err(t, errs[j], "read");
            errs[j] = NULL;
        } else if (!v) {
            continue; /* on neither tier: absent */
        } else if (vlen != t->stride) {
            st = fl__err(FL_ECORRUPT, "sparse table '%s': the row of id %llu in '%s' has %zu bytes, expected %zu",
                         t->cfg.name, (unsigned long long)ids[i], d->path, vlen, t->stride);
        } else if (!promote) {
            memcpy(out + (size_t)i * t->dim, v + FL__PS_ROW_HDR, (size_t)t->dim * 4);
            found[i] = 1;
        } else if (!fl__ps_stripe_find(t, s, ids[i], hs[i])) { /* a repeated id moves once */
            uint8_t *row = fl__ps_stripe_insert_raw(t, s, ids[i], hs[i], (const uint8_t *)v);
            if (!row) st = fl_last_status() ? fl_last_status() : FL_ENOMEM;
            else {
                set_ref(row);
                rocksdb_writebatch_delete(b, keys[j], 8);
                moved++;
            }
        }
    }
    for (uint32_t j = 0; j < m; j++) {
        if (vals[j]) rocksdb_pinnableslice_destroy(vals[j]);
        rocksdb_free(errs[j]);
    }
    if (b) {
        /* the rows are in memory now: their disk copies go (a failure here leaves a stale
         * copy that a later eviction overwrites, never a lost row) */
        int wst = write_batch(t, b);
        if (st == FL_OK) st = wst;
        if (wst == FL_OK) atomic_fetch_sub(&d->rows, moved);
        rocksdb_writebatch_destroy(b);
    }
done:
    free(pos);
    free(keys);
    free(klen);
    free(vals);
    free(errs);
    return st;
}

int fl__ps_ssd_evict(fl__ps_sparse *t, fl__ps_stripe *s)
{
    if (s->nrows <= t->stripe_rows) return FL_OK;
    /* down to 15/16 of the budget, so that evictions come in batches */
    uint32_t target = t->stripe_rows - t->stripe_rows / 16, need = s->nrows - target;
    uint64_t *victims = malloc((size_t)need * sizeof *victims);
    if (!victims) return fl__err(FL_ENOMEM, "sparse table '%s': out of memory evicting %u rows", t->cfg.name, need);
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    uint32_t nv = 0;
    while (nv < need) {
        if (s->hand >= s->nalloc) s->hand = 0;
        uint8_t *row = fl__ps_row(t, s, s->hand++);
        fl__ps_rowhdr h;
        memcpy(&h, row, sizeof h);
        if (h.flags & FL__PS_ROW_FREE) continue;
        if (h.flags & FL__PS_ROW_REF) {
            h.flags &= (uint16_t)~FL__PS_ROW_REF;
            memcpy(row, &h, sizeof h);
            continue;
        }
        victims[nv++] = h.key;
        rocksdb_writebatch_put(b, (const char *)&h.key, 8, (const char *)row, t->stride);
        memcpy(row + offsetof(fl__ps_rowhdr, flags), &(uint16_t){FL__PS_ROW_REF}, 2); /* not taken twice */
    }
    int st = write_batch(t, b);
    rocksdb_writebatch_destroy(b);
    for (uint32_t j = 0; j < nv; j++) {
        if (st == FL_OK) {
            int r = fl__ps_stripe_remove(t, s, victims[j], fl__ps_inner_hash(victims[j]));
            if (r < 0) st = fl_last_status();
            else atomic_fetch_add(&t->ssd->rows, 1);
        } else { /* still in memory: clear the mark */
            uint8_t *row = fl__ps_stripe_find(t, s, victims[j], fl__ps_inner_hash(victims[j]));
            if (row) memcpy(row + offsetof(fl__ps_rowhdr, flags), &(uint16_t){0}, 2);
        }
    }
    free(victims);
    return st;
}

int fl__ps_ssd_get(fl__ps_sparse *t, uint64_t id, uint8_t *row)
{
    size_t len = 0;
    char *e = NULL, *v = rocksdb_get(t->ssd->db, t->ssd->ro, (const char *)&id, 8, &len, &e);
    if (e) return db_err(t, e, "read");
    if (!v) return 0;
    int r = 1;
    if (len != t->stride)
        r = fl__err(FL_ECORRUPT, "sparse table '%s': the row of id %llu in '%s' has %zu bytes, expected %zu", t->cfg.name,
                    (unsigned long long)id, t->ssd->path, len, t->stride);
    else if (row) memcpy(row, v, len);
    rocksdb_free(v);
    return r;
}

int fl__ps_ssd_foreach(fl__ps_sparse *t, fl__ps_ssd_visit_fn fn, void *user)
{
    return fl__ps_ssd_foreach_from(t, NULL, fn, user);
}

int fl__ps_ssd_foreach_from(fl__ps_sparse *t, const uint64_t *from, fl__ps_ssd_visit_fn fn, void *user)
{
    fl__ps_ssd *d = t->ssd;
    uint8_t *buf = malloc(t->stride);
    if (!buf) return fl__err(FL_ENOMEM, "sparse table '%s': out of memory", t->cfg.name);
    rocksdb_iterator_t *it = rocksdb_create_iterator(d->db, d->ro); /* its view is fixed at creation */
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    int st = FL_OK;
    int64_t deleted = 0, pending_del = 0;
    if (from) rocksdb_iter_seek(it, (const char *)from, 8);
    else rocksdb_iter_seek_to_first(it);
    for (; st == FL_OK && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl), *v = rocksdb_iter_value(it, &vl);
        if (kl != 8 || vl != t->stride) {
            st = fl__err(FL_ECORRUPT,
                         "sparse table '%s': a row in '%s' has a %zu-byte key and %zu bytes, expected 8 and %zu",
                         t->cfg.name, d->path, kl, vl, t->stride);
            break;
        }
        memcpy(buf, v, vl);
        int r = fn(user, buf);
        if (r == FL__PS_VISIT_STOP) break;
        if (r == FL__PS_VISIT_WRITE) rocksdb_writebatch_put(b, k, 8, (const char *)buf, t->stride);
        else if (r == FL__PS_VISIT_DELETE) {
            rocksdb_writebatch_delete(b, k, 8);
            pending_del++;
        }
        if (rocksdb_writebatch_count(b) >= BATCH_OPS) {
            st = write_batch(t, b);
            if (st == FL_OK) deleted += pending_del;
            pending_del = 0;
        }
    }
    char *e = NULL;
    rocksdb_iter_get_error(it, &e);
    if (e && st == FL_OK) st = db_err(t, e, "iteration");
    else rocksdb_free(e);
    if (st == FL_OK) {
        st = write_batch(t, b);
        if (st == FL_OK) deleted += pending_del;
    }
    atomic_fetch_sub(&d->rows, deleted);
    if (deleted) atomic_fetch_add(&t->changes, (uint64_t)deleted);
    rocksdb_writebatch_destroy(b);
    rocksdb_iter_destroy(it);
    free(buf);
    return st;
}

#else /* without RocksDB an SSD table cannot be created: fl__ps_ssd_open refuses */

int fl__ps_ssd_open(fl__ps_sparse *t) { return fl__ps_ssd_check(&t->cfg); }
void fl__ps_ssd_close(fl__ps_sparse *t) { t->ssd = NULL; }
int64_t fl__ps_ssd_rows(const fl__ps_sparse *t) { return 0; }
int fl__ps_ssd_fetch(fl__ps_sparse *t, fl__ps_stripe *s, const uint64_t *ids, const uint64_t *hs, const uint32_t *order,
                     uint32_t q0, uint32_t q1, int promote, float *out, uint8_t *found)
{
    return fl__err(FL_EUNSUPPORTED, "sparse table '%s': built without RocksDB", t->cfg.name);
}
int fl__ps_ssd_evict(fl__ps_sparse *t, fl__ps_stripe *s)
{
    return fl__err(FL_EUNSUPPORTED, "sparse table '%s': built without RocksDB", t->cfg.name);
}
int fl__ps_ssd_get(fl__ps_sparse *t, uint64_t id, uint8_t *row)
{
    return fl__err(FL_EUNSUPPORTED, "sparse table '%s': built without RocksDB", t->cfg.name);
}
int fl__ps_ssd_foreach(fl__ps_sparse *t, fl__ps_ssd_visit_fn fn, void *user)
{
    return fl__err(FL_EUNSUPPORTED, "sparse table '%s': built without RocksDB", t->cfg.name);
}
int fl__ps_ssd_foreach_from(fl__ps_sparse *t, const uint64_t *from, fl__ps_ssd_visit_fn fn, void *user)
{
    return fl__err(FL_EUNSUPPORTED, "sparse table '%s': built without RocksDB", t->cfg.name);
}

#endif
