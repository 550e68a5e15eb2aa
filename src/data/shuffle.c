/*
 * shuffle.c - local and global shuffle of an InMemoryDataset.
 *
 * Local: Fisher-Yates over the record references with splitmix64 seeded by `seed`
 * (uniform draws by 128-bit multiply, no modulo bias); the same records and seed give the
 * same order on every machine.
 *
 * Global: each record i (in the current order) goes to rank next() % nranks of a splitmix64
 * stream seeded with seed mixed with the rank.  Records for other ranks are serialized per
 * destination, exchanged with one ex->alltoallv, checked record by record against the slot
 * layout, and the received buffers become chunks of the store as they are.  The new store
 * holds the kept records, then those from rank 0, 1, ...; it is then shuffled locally.
 *
 * Wire form of one buffer: u32 magic "FLGS" | u32 nslots | u64 nrec | nrec x (u32 len | record).
 */
#include <stdio.h>
#include <stdlib.h>

#include "data_internal.h"

#define GS_MAGIC 0x53474c46u /* "FLGS" */
#define GS_HDR 16

static inline uint64_t bounded(fl_rng *r, uint64_t n) { return (uint64_t)(((unsigned __int128)fl__rng_next(r) * n) >> 64); }

static void shuffle_recs(fl__rec *a, size_t n, uint64_t seed)
{
    fl_rng r = {seed};
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)bounded(&r, i);
        fl__rec t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

static int check_shufflable(fl_dataset *ds, const char *fn)
{
    if (!ds || ds->magic != FL_DATASET_MAGIC) return fl__err_handle(ds, "%s: dataset is NULL or invalid", fn);
    if (ds->kind != FL__DS_INMEM)
        return fl__err(FL_EINVAL, "%s: only an InMemoryDataset can be shuffled (this is a QueueDataset)", fn);
    if (ds->in_pass) return fl__err(FL_ESTATE, "%s: a pass is in progress (call fl_dataset_end first)", fn);
    if (ds->preloading)
        return fl__err(FL_ESTATE, "%s: a preload is in progress (call fl_dataset_wait_preload_done first)", fn);
    return FL_OK;
}

int fl_dataset_local_shuffle(fl_dataset *ds, uint64_t seed)
{
    FL_CHECK(check_shufflable(ds, "fl_dataset_local_shuffle"));
    shuffle_recs(ds->store.recs, ds->store.nrec, seed);
    return FL_OK;
}

/* Checks a received buffer and appends references to its records to `out`. */
static int take_received(fl_dataset *ds, int from, const char *buf, size_t len, fl__store *out)
{
    static const char fn[] = "fl_dataset_global_shuffle";
    if (len == 0) return FL_OK;
    uint32_t magic, nslots;
    uint64_t nrec;
    if (len < GS_HDR) goto bad;
    memcpy(&magic, buf, 4);
    memcpy(&nslots, buf + 4, 4);
    memcpy(&nrec, buf + 8, 8);
    if (magic != GS_MAGIC) goto bad;
    if (nslots != (uint32_t)ds->nslots)
        return fl__err(FL_ECORRUPT, "%s: rank %d sent records of %u slots; this dataset has %d", fn, from, nslots,
                       ds->nslots);
    if (nrec > (len - GS_HDR) / 4) goto bad;
    size_t o = GS_HDR;
    for (uint64_t i = 0; i < nrec; i++) {
        uint32_t rl;
        if (len - o < 4) goto bad;
        memcpy(&rl, buf + o, 4);
        o += 4;
        if (len - o < rl || fl__record_size(ds->slots, ds->nslots, buf + o, rl) != rl) goto bad;
        fl__rec r = {buf + o, rl};
        FL_CHECK(fl__store_add_recs(out, &r, 1));
        o += rl;
    }
    if (o != len) goto bad;
    return FL_OK;
bad:
    return fl__err(FL_ECORRUPT, "%s: the %zu bytes received from rank %d are not records of this dataset's slots", fn, len,
                   from);
}

int fl_dataset_global_shuffle(fl_dataset *ds, const fl_data_exchange *ex, uint64_t seed)
{
    static const char fn[] = "fl_dataset_global_shuffle";
    FL_CHECK(check_shufflable(ds, fn));
    if (!ex) return fl__err(FL_EINVAL, "%s: ex is NULL", fn);
    if (ex->nranks < 1 || ex->rank < 0 || ex->rank >= ex->nranks)
        return fl__err(FL_EINVAL, "%s: rank %d / nranks %d out of range", fn, ex->rank, ex->nranks);
    if (ex->nranks > 1 && !ex->alltoallv) return fl__err(FL_EINVAL, "%s: ex->alltoallv is NULL", fn);
    const int nr = ex->nranks, me = ex->rank;
    uint64_t mixed = fl__hash_u64(seed ^ fl__hash_u64((uint64_t)me + 0x632be59bd9b4e019ULL));
    if (nr == 1) {
        shuffle_recs(ds->store.recs, ds->store.nrec, mixed);
        return FL_OK;
    }
    fl__store *cur = &ds->store;
    int st = FL_OK;
    uint32_t *dest = malloc((cur->nrec ? cur->nrec : 1) * sizeof *dest);
    size_t *send_len = calloc((size_t)nr, sizeof *send_len), *recv_len = calloc((size_t)nr, sizeof *recv_len);
    size_t *fill = calloc((size_t)nr, sizeof *fill);
    char **send = calloc((size_t)nr, sizeof *send), **recv = calloc((size_t)nr, sizeof *recv);
    uint64_t *count = calloc((size_t)nr, sizeof *count);
    fl__store next = {0}, got = {0};
    char *kept = NULL;
    if (!dest || !send_len || !recv_len || !fill || !send || !recv || !count) {
        st = fl__err(FL_ENOMEM, "%s: out of memory", fn);
        goto out;
    }
    /* destinations and sizes */
    fl_rng r = {mixed};
    size_t kept_bytes = 0;
    for (size_t i = 0; i < cur->nrec; i++) {
        int d = (int)bounded(&r, (uint64_t)nr);
        dest[i] = (uint32_t)d;
        count[d]++;
        if (d == me) kept_bytes += cur->recs[i].len;
        else send_len[d] += 4 + cur->recs[i].len;
    }
    for (int d = 0; d < nr; d++) {
        if (d == me) continue;
        send_len[d] += GS_HDR;
        if (!(send[d] = malloc(send_len[d]))) {
            st = fl__err(FL_ENOMEM, "%s: out of memory for %zu bytes to rank %d", fn, send_len[d], d);
            goto out;
        }
        uint32_t magic = GS_MAGIC, ns = (uint32_t)ds->nslots;
        memcpy(send[d], &magic, 4);
        memcpy(send[d] + 4, &ns, 4);
        memcpy(send[d] + 8, &count[d], 8);
        fill[d] = GS_HDR;
    }
    for (size_t i = 0; i < cur->nrec; i++) {
        int d = (int)dest[i];
        if (d == me) continue;
        uint32_t rl = (uint32_t)cur->recs[i].len;
        memcpy(send[d] + fill[d], &rl, 4);
        memcpy(send[d] + fill[d] + 4, cur->recs[i].p, rl);
        fill[d] += 4 + rl;
    }
    FL_LOG(FL_LOG_INFO, FL_SUB_DATA, "%s: rank %d keeps %llu of %zu records and sends the rest to %d ranks", fn, me,
           (unsigned long long)count[me], cur->nrec, nr - 1);
    st = ex->alltoallv(ex->ctx, (const void *const *)send, send_len, (void **)recv, recv_len);
    if (st) {
        if (st > 0) st = FL_EREMOTE;
        st = fl__err(st, "%s: the exchange failed: %s", fn, fl_last_error());
        goto out;
    }
    for (int d = 0; d < nr; d++) {
        free(send[d]);
        send[d] = NULL;
    }
    /* received records: validated before the store changes */
    for (int d = 0; d < nr && st == FL_OK; d++)
        if (d != me) st = take_received(ds, d, recv[d], recv_len[d], &got);
    if (st) goto out;
    /* the new store: kept records (copied into one chunk), then the received ones */
    if (kept_bytes && !(kept = malloc(kept_bytes))) {
        st = fl__err(FL_ENOMEM, "%s: out of memory for %zu bytes", fn, kept_bytes);
        goto out;
    }
    if (kept) FL_CHECK_GOTO(fl__store_add_chunk(&next, kept), st, out);
    char *kp = kept;
    kept = NULL; /* owned by next */
    for (size_t i = 0; i < cur->nrec; i++) {
        if ((int)dest[i] != me) continue;
        memcpy(kp, cur->recs[i].p, cur->recs[i].len);
        fl__rec rec = {kp, cur->recs[i].len};
        FL_CHECK_GOTO(fl__store_add_recs(&next, &rec, 1), st, out);
        kp += cur->recs[i].len;
    }
    for (int d = 0; d < nr; d++) {
        if (!recv[d] || d == me) continue;
        FL_CHECK_GOTO(fl__store_add_chunk(&next, recv[d]), st, out);
        recv[d] = NULL;
    }
    FL_CHECK_GOTO(fl__store_add_recs(&next, got.recs, got.nrec), st, out);
    shuffle_recs(next.recs, next.nrec, mixed ^ 0x5851f42d4c957f2dULL);
    pthread_mutex_lock(&ds->mu);
    fl__store_free(&ds->store);
    ds->store = next;
    memset(&next, 0, sizeof next);
    pthread_mutex_unlock(&ds->mu);
    FL_INFO(FL_SUB_DATA, "%s: rank %d holds %zu records after the exchange", fn, me, ds->store.nrec);
out:
    for (int d = 0; send && d < nr; d++) free(send[d]);
    for (int d = 0; recv && d < nr; d++) free(recv[d]);
    fl__store_free(&next);
    free(got.recs); /* references only: the bytes are in recv[] or next's chunks */
    free(got.chunks);
    free(kept);
    free(dest);
    free(send_len);
    free(recv_len);
    free(fill);
    free(send);
    free(recv);
    free(count);
    return st;
}
