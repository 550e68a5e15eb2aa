/*
 * test_ps_index.c - the id index of a sparse table shard (table_sparse.c) across many
 * growths: ids inserted one at a time into 64 stripes whose indexes grow by a quarter at
 * 3/4 full; at every growth of a stripe its index is checked whole (every slot points to a
 * live row with its id's tag and every slot between its home and it is full, every live
 * row is found through the index), also after pulls have moved rows home; erased ids
 * are gone and the others stay; a scan of the shard in pages returns every id once; and
 * the index memory stays within 4 bytes / 0.6 per row at every count, because the stripes
 * grow at different counts (an index that doubles every stripe at the same count costs up
 * to 10.7 bytes per row just after).
 */
#include <stdlib.h>

#include "testhelp.h"
#include <fleet/ps.h>
#include "ps/ps_internal.h"

static fl_ps_table_config cfg2(void)
{
    fl_ps_table_config t = {0};
    t.name = "emb";
    t.kind = FL_PS_SPARSE;
    t.dim = 2;
    t.init = fl_init_constant(0.5f);
    t.opt = (fl_ps_optimizer){FL_PS_OPT_SGD, 0.1f, 0, 0, 0, 0, 0, 0};
    return t;
}

static uint64_t id_of(uint64_t i) { return i * 0x9E3779B97F4A7C15ull + 11; }

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The whole index of stripe s against its rows; returns the live rows. */
static uint32_t check_stripe(fl__ps_sparse *t, fl__ps_stripe *s, int k)
{
    uint32_t used = 0, live = 0;
    for (uint64_t i = 0; i < s->cap; i++) {
        uint32_t v = s->slots[i];
        if (!v) continue;
        used++;
        CHECK(FL__PS_SLOT_IDX(v) < s->nalloc);
        fl__ps_rowhdr h;
        memcpy(&h, fl__ps_row(t, s, FL__PS_SLOT_IDX(v)), sizeof h);
        CHECK(!(h.flags & FL__PS_ROW_FREE));
        uint64_t hs = fl__ps_inner_hash(h.key);
        CHECK_EQ_INT((int)(hs >> 58), k);
        CHECK_EQ_INT(v & 63u, FL__PS_SLOT_TAG(hs));
        /* linear probing: every slot from the home slot (the hash's low 32 bits scaled to
         * the size) to this one is full */
        for (uint64_t j = ((hs & 0xffffffffu) * s->cap) >> 32; j != i; j = j + 1 < s->cap ? j + 1 : 0)
            if (!s->slots[j])
                TFAIL("stripe %d: slot %llu is empty between the home and slot %llu of id %llu", k, (unsigned long long)j,
                      (unsigned long long)i, (unsigned long long)h.key);
    }
    for (uint32_t idx = 0; idx < s->nalloc; idx++) {
        uint8_t *row = fl__ps_row(t, s, idx);
        fl__ps_rowhdr h;
        memcpy(&h, row, sizeof h);
        if (h.flags & FL__PS_ROW_FREE) continue;
        live++;
        CHECK(fl__ps_stripe_find(t, s, h.key, fl__ps_inner_hash(h.key)) == row);
    }
    CHECK_EQ_INT(used, s->nrows);
    CHECK_EQ_INT(live, s->nrows);
    CHECK_EQ_INT(s->nrows + s->nfree, s->nalloc);
    CHECK((uint64_t)s->nrows * 4 <= s->cap * 3); /* at most 3/4 full */
    return live;
}

static uint8_t *insert(fl__ps_sparse *t, uint64_t id, int *grew)
{
    uint64_t hs = fl__ps_inner_hash(id);
    int k = (int)(hs >> 58);
    fl__ps_stripe *s = &t->st[k];
    CHECK(fl__ps_stripe_find(t, s, id, hs) == NULL);
    uint64_t cap = s->cap;
    uint8_t *row = fl__ps_stripe_insert(t, s, id, hs);
    CHECK(row != NULL);
    if (s->cap != cap) {
        /* a growth: 5/4 of the slots (the first index: 64..79 slots by stripe), then 3/5 full */
        if (cap) CHECK_EQ_INT(s->cap, cap + cap / 4);
        else CHECK_EQ_INT(s->cap, 64 + k / 4);
        if (cap) CHECK((double)s->nrows / (double)s->cap >= 0.59);
        check_stripe(t, s, k);
        (*grew)++;
    }
    return row;
}

static double index_bytes_per_row(const fl__ps_sparse *t, uint64_t *rows, int *ncaps)
{
    uint64_t slots = 0, n = 0, first = t->st[0].cap;
    *ncaps = 0;
    for (int k = 0; k < FL__PS_STRIPES; k++) {
        slots += t->st[k].cap;
        n += t->st[k].nrows;
        *ncaps += t->st[k].cap != first;
    }
    *rows = n;
    return n ? 4.0 * (double)slots / (double)n : 0;
}

#define N 200000

TEST(index_across_growths)
{
    fl_ps_table_config c = cfg2();
    fl__ps_sparse *t;
    CHECK_OK(fl__ps_sparse_create(&c, 0, 1, &t));
    int grew = 0, differ = 0;
    double worst = 0, worst_at = 0;
    for (uint64_t i = 0; i < N; i++) {
        uint8_t *row = insert(t, id_of(i), &grew);
        float v[2] = {(float)i, -(float)i};
        memcpy(row + FL__PS_ROW_HDR, v, sizeof v);
        if (i >= 20000 && i % 500 == 0) { /* past the first indexes' fixed size */
            uint64_t rows;
            int nd;
            double b = index_bytes_per_row(t, &rows, &nd);
            CHECK_EQ_INT(rows, i + 1);
            if (b > worst) {
                worst = b;
                worst_at = (double)i;
            }
            differ += nd > 0;
        }
    }
    printf("  %d growths of a stripe's index for %d ids; index %.2f bytes per row at most (at %.0f rows)\n", grew, N, worst,
           worst_at);
    CHECK(grew > 64 * 12); /* every stripe grew many times */
    CHECK(worst <= 6.7);   /* 4 bytes / 0.6 */
    CHECK(differ > 300);   /* the stripes' sizes differ at (almost) every count */
    /* every id is found with its values */
    for (uint64_t i = 0; i < N; i += 7) {
        float v[2], show;
        CHECK_EQ_INT(fl__ps_sparse_get(t, id_of(i), v, &show, NULL), 1);
        CHECK(v[0] == (float)i && v[1] == -(float)i);
    }
    CHECK_EQ_INT(fl__ps_sparse_get(t, id_of(N + 1), NULL, NULL, NULL), 0);
    /* pulls move the rows they find far from home to their home slot: the index stays whole */
    enum { P = 4096 };
    static uint64_t pid[P];
    static float pv[P * 2];
    for (uint64_t i = 0; i < N; i += P) {
        uint64_t n = N - i < P ? N - i : P;
        for (uint64_t j = 0; j < n; j++) pid[j] = id_of(N - 1 - i - j); /* the newest first */
        CHECK_OK(fl__ps_sparse_pull(t, pid, n, pv, 0));
        for (uint64_t j = 0; j < n; j++) CHECK(pv[j * 2] == (float)(N - 1 - i - j));
    }
    for (int k = 0; k < FL__PS_STRIPES; k++) check_stripe(t, &t->st[k], k);

    /* erase every third id, then insert new ones into the freed rows and grow again */
    for (uint64_t i = 0; i < N; i += 3) {
        uint64_t id = id_of(i), hs = fl__ps_inner_hash(id);
        CHECK_EQ_INT(fl__ps_stripe_remove(t, &t->st[hs >> 58], id, hs), 1);
        CHECK_EQ_INT(fl__ps_stripe_remove(t, &t->st[hs >> 58], id, hs), 0);
    }
    uint64_t live = 0;
    for (int k = 0; k < FL__PS_STRIPES; k++) live += check_stripe(t, &t->st[k], k);
    CHECK_EQ_INT(live, N - (N + 2) / 3);
    for (uint64_t i = 0; i < N; i++) {
        float v[2];
        int want = i % 3 != 0;
        CHECK_EQ_INT(fl__ps_sparse_get(t, id_of(i), v, NULL, NULL), want);
        if (want) CHECK(v[0] == (float)i);
    }
    for (uint64_t i = N; i < 2 * N; i++) insert(t, id_of(i), &grew);
    live = 0;
    for (int k = 0; k < FL__PS_STRIPES; k++) live += check_stripe(t, &t->st[k], k);
    CHECK_EQ_INT(live, 2 * N - (N + 2) / 3);

    /* a scan in pages returns every live id once */
    uint64_t *ids = malloc(live * 8), *want = malloc(live * 8);
    float *vals = malloc(live * 2 * 4);
    const uint64_t page = 9999;
    for (uint64_t first = 0; first < live; first += page)
        CHECK_OK(fl__ps_sparse_scan(t, first, live - first < page ? live - first : page, ids + first, vals + first * 2));
    uint64_t nw = 0;
    for (uint64_t i = 0; i < 2 * N; i++)
        if (i >= N || i % 3) want[nw++] = id_of(i);
    CHECK_EQ_INT(nw, live);
    qsort(ids, live, 8, cmp_u64);
    qsort(want, live, 8, cmp_u64);
    CHECK(memcmp(ids, want, live * 8) == 0);
    free(ids);
    free(want);
    free(vals);
    fl__ps_sparse_free(t);
}

/* Shrink deletes most rows of a grown table; the rest stay reachable and the index whole. */
TEST(index_after_shrink)
{
    fl_ps_table_config c = cfg2();
    c.accessor.delete_threshold = 0.5f; /* a row shown less than once (score 0.1 per show) goes */
    c.accessor.nonclk_coeff = 0.1f;
    c.accessor.show_click_decay_rate = 1.0f;
    fl__ps_sparse *t;
    CHECK_OK(fl__ps_sparse_create(&c, 0, 1, &t));
    enum { M = 50000 };
    static uint64_t ids[M];
    static float g[M * 2], out[M * 2], shows[M];
    for (int i = 0; i < M; i++) {
        ids[i] = id_of((uint64_t)i);
        shows[i] = i % 10 == 0 ? 10.0f : 1.0f; /* score 1.0 stays, 0.1 goes */
    }
    CHECK_OK(fl__ps_sparse_push(t, ids, M, g, shows, NULL, 1.0f, 1));
    int64_t del = fl__ps_sparse_shrink(t);
    CHECK_EQ_INT(del, M - M / 10);
    uint64_t live = 0;
    for (int k = 0; k < FL__PS_STRIPES; k++) live += check_stripe(t, &t->st[k], k);
    CHECK_EQ_INT(live, M / 10);
    CHECK_OK(fl__ps_sparse_pull(t, ids, M, out, 0));
    for (int i = 0; i < M; i++) CHECK(out[i * 2] == (i % 10 == 0 ? 0.5f : 0.0f));
    fl__ps_sparse_free(t);
}

TEST_MAIN(T(index_across_growths), T(index_after_shrink))
