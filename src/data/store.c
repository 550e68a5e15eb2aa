/*
 * store.c - the in-memory record store and batches.
 *
 * The store keeps records in malloc'd chunks of about 4 MiB (a record never straddles two)
 * and one array of {pointer, length} references, so a shuffle permutes 16-byte references
 * and never moves record bytes.  Batches turn a run of references into one tensor per slot.
 */
#include <stdio.h>
#include <stdlib.h>

#include "data_internal.h"

#define CHUNK_BYTES ((size_t)4 << 20)

/* ---- store ----------------------------------------------------------------------------- */

static int grow_array(void **p, size_t *cap, size_t want, size_t elem)
{
    if (want <= *cap) return FL_OK;
    size_t nc = *cap ? *cap : 64;
    while (nc < want) nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return fl__err(FL_ENOMEM, "data: out of memory for %zu records", want);
    *p = np;
    *cap = nc;
    return FL_OK;
}

int fl__store_add_chunk(fl__store *st, char *chunk)
{
    FL_CHECK(grow_array((void **)&st->chunks, &st->chunk_cap, st->nchunks + 1, sizeof(char *)));
    st->chunks[st->nchunks++] = chunk;
    return FL_OK;
}

int fl__store_add_recs(fl__store *st, const fl__rec *r, size_t n)
{
    FL_CHECK(grow_array((void **)&st->recs, &st->rec_cap, st->nrec + n, sizeof(fl__rec)));
    memcpy(st->recs + st->nrec, r, n * sizeof *r);
    st->nrec += n;
    for (size_t i = 0; i < n; i++) st->bytes += r[i].len;
    return FL_OK;
}

int fl__store_append(fl__store *dst, fl__store *src)
{
    FL_CHECK(grow_array((void **)&dst->chunks, &dst->chunk_cap, dst->nchunks + src->nchunks, sizeof(char *)));
    FL_CHECK(grow_array((void **)&dst->recs, &dst->rec_cap, dst->nrec + src->nrec, sizeof(fl__rec)));
    memcpy(dst->chunks + dst->nchunks, src->chunks, src->nchunks * sizeof(char *));
    dst->nchunks += src->nchunks;
    if (src->nrec) memcpy(dst->recs + dst->nrec, src->recs, src->nrec * sizeof(fl__rec));
    dst->nrec += src->nrec;
    dst->bytes += src->bytes;
    free(src->chunks);
    free(src->recs);
    memset(src, 0, sizeof *src);
    return FL_OK;
}

void fl__store_free(fl__store *st)
{
    for (size_t i = 0; i < st->nchunks; i++) free(st->chunks[i]);
    free(st->chunks);
    free(st->recs);
    memset(st, 0, sizeof *st);
}

int fl__builder_commit(fl__store_builder *b, size_t start)
{
    if (b->noffs + 1 > b->offs_cap) FL_CHECK(grow_array((void **)&b->offs, &b->offs_cap, b->noffs + 1, sizeof(size_t)));
    b->offs[b->noffs++] = start;
    if (b->cur.len >= CHUNK_BYTES) return fl__builder_seal(b);
    return FL_OK;
}

int fl__builder_seal(fl__store_builder *b)
{
    if (!b->noffs) return FL_OK;
    FL_CHECK(grow_array((void **)&b->st.recs, &b->st.rec_cap, b->st.nrec + b->noffs, sizeof(fl__rec)));
    char *chunk = b->cur.p;
    if (b->cur.cap - b->cur.len > b->cur.cap / 4) { /* give back a mostly empty tail */
        char *np = realloc(chunk, b->cur.len);
        if (np) chunk = np;
    }
    FL_CHECK(fl__store_add_chunk(&b->st, chunk));
    for (size_t i = 0; i < b->noffs; i++) {
        size_t end = i + 1 < b->noffs ? b->offs[i + 1] : b->cur.len;
        b->st.recs[b->st.nrec++] = (fl__rec){chunk + b->offs[i], end - b->offs[i]};
    }
    b->st.bytes += b->cur.len;
    b->cur.p = NULL;
    b->cur.len = b->cur.cap = 0;
    b->noffs = 0;
    return FL_OK;
}

void fl__builder_free(fl__store_builder *b)
{
    fl__store_free(&b->st);
    fl__arena_free(&b->cur);
    free(b->offs);
    memset(b, 0, sizeof *b);
}

/* ---- batches --------------------------------------------------------------------------- */

typedef struct {
    char *name;
    fl_dtype dtype;
    int dense, width, esize;
    fl_tensor *t;
    int64_t *lod;
    size_t lod_cap;
} batch_slot;

struct fl_data_batch {
    uint32_t magic;
    int nslots;
    int size;
    batch_slot *s;
};

fl_data_batch *fl_data_batch_create(const fl_dataset *ds)
{
    if (!ds || ds->magic != FL_DATASET_MAGIC) {
        fl__err_handle(ds, "fl_data_batch_create: dataset is NULL or invalid");
        return NULL;
    }
    if (ds->nslots <= 0) {
        fl__err(FL_EINVAL, "fl_data_batch_create: the dataset has no slots (call fl_dataset_set_use_var first)");
        return NULL;
    }
    fl_data_batch *b = calloc(1, sizeof *b);
    if (!b || !(b->s = calloc((size_t)ds->nslots, sizeof *b->s))) goto nomem;
    b->magic = FL_BATCH_MAGIC;
    b->nslots = ds->nslots;
    for (int i = 0; i < ds->nslots; i++) {
        const fl__slot *sl = &ds->slots[i];
        batch_slot *bs = &b->s[i];
        bs->dtype = sl->dtype;
        bs->dense = sl->dense;
        bs->width = sl->width;
        bs->esize = sl->esize;
        int64_t shape[2] = {0, sl->dense ? sl->width : 1};
        if (!(bs->name = fl__strdup(sl->name)) || !(bs->t = fl_tensor_create(sl->dtype, 2, shape))) goto nomem;
    }
    return b;
nomem:
    fl_data_batch_free(b);
    fl__err(FL_ENOMEM, "fl_data_batch_create: out of memory");
    return NULL;
}

void fl_data_batch_free(fl_data_batch *b)
{
    if (!b) return;
    for (int i = 0; b->s && i < b->nslots; i++) {
        free(b->s[i].name);
        fl_tensor_free(b->s[i].t);
        free(b->s[i].lod);
    }
    free(b->s);
    b->magic = 0;
    free(b);
}

/* The batch queries: a NULL or freed batch sets the error and answers 0 or NULL. */
static int batch_ok(const fl_data_batch *b, const char *fn)
{
    if (b && b->magic == FL_BATCH_MAGIC) return 1;
    fl__err_handle(b, "%s: batch is NULL or invalid", fn);
    return 0;
}
int fl_data_batch_size(const fl_data_batch *b) { return batch_ok(b, "fl_data_batch_size") ? b->size : 0; }
int fl_data_batch_num_slots(const fl_data_batch *b) { return batch_ok(b, "fl_data_batch_num_slots") ? b->nslots : 0; }
const char *fl_data_batch_name(const fl_data_batch *b, int i)
{
    return batch_ok(b, "fl_data_batch_name") && i >= 0 && i < b->nslots ? b->s[i].name : NULL;
}
fl_tensor *fl_data_batch_tensor(fl_data_batch *b, int i)
{
    return batch_ok(b, "fl_data_batch_tensor") && i >= 0 && i < b->nslots ? b->s[i].t : NULL;
}

int fl__batch_check(const fl_data_batch *b, const fl_dataset *ds, const char *fn)
{
    if (!b || b->magic != FL_BATCH_MAGIC) return fl__err_handle(b, "%s: batch is NULL or invalid", fn);
    if (b->nslots != ds->nslots) goto bad;
    for (int i = 0; i < b->nslots; i++)
        if (b->s[i].dtype != ds->slots[i].dtype || b->s[i].dense != ds->slots[i].dense ||
            b->s[i].width != ds->slots[i].width)
            goto bad;
    return FL_OK;
bad:
    return fl__err(FL_EINVAL, "%s: the batch was made for different slots (create it after fl_dataset_set_use_var)", fn);
}

int fl__batch_fill(fl_data_batch *b, const fl__rec *recs, int n)
{
    /* pass 1: per-slot counts -> LoD offsets */
    for (int k = 0; k < b->nslots; k++) {
        batch_slot *bs = &b->s[k];
        if (bs->dense) continue;
        if ((size_t)n + 1 > bs->lod_cap) {
            size_t nc = (size_t)n + 1 < 64 ? 64 : (size_t)n + 1;
            int64_t *nl = realloc(bs->lod, nc * sizeof *nl);
            if (!nl) return fl__err(FL_ENOMEM, "data: out of memory for a batch of %d", n);
            bs->lod = nl;
            bs->lod_cap = nc;
        }
        bs->lod[0] = 0;
    }
    for (int i = 0; i < n; i++) {
        const char *p = recs[i].p;
        for (int k = 0; k < b->nslots; k++) {
            batch_slot *bs = &b->s[k];
            uint32_t c = (uint32_t)bs->width;
            if (!bs->dense) {
                memcpy(&c, p, 4);
                p += 4;
                bs->lod[i + 1] = bs->lod[i] + c;
            }
            p += (size_t)c * (size_t)bs->esize;
        }
    }
    /* pass 2: shapes, then values */
    char **dst = NULL, *dst_small[64];
    dst = b->nslots <= 64 ? dst_small : malloc((size_t)b->nslots * sizeof *dst);
    if (!dst) return fl__err(FL_ENOMEM, "data: out of memory for a batch");
    int st = FL_OK;
    for (int k = 0; k < b->nslots; k++) {
        batch_slot *bs = &b->s[k];
        int64_t shape[2] = {bs->dense ? n : bs->lod[n], bs->dense ? bs->width : 1};
        FL_CHECK_GOTO(fl_tensor_resize(bs->t, bs->dtype, 2, shape), st, out);
        if (!bs->dense) FL_CHECK_GOTO(fl_tensor_set_lod(bs->t, bs->lod, (int64_t)n + 1), st, out);
        dst[k] = fl_tensor_data(bs->t);
    }
    for (int i = 0; i < n; i++) {
        const char *p = recs[i].p;
        for (int k = 0; k < b->nslots; k++) {
            const batch_slot *bs = &b->s[k];
            uint32_t c = (uint32_t)bs->width;
            if (!bs->dense) {
                memcpy(&c, p, 4);
                p += 4;
            }
            size_t nb = (size_t)c * (size_t)bs->esize;
            memcpy(dst[k], p, nb);
            dst[k] += nb;
            p += nb;
        }
    }
    b->size = n;
out:
    if (dst != dst_small) free(dst);
    return st;
}
