/*
 * table_sparse.c - one server's shard of a sparse table: 64 stripes, each a mutex and an
 * open-addressing map id -> row (layout in ps_internal.h), rows created lazily from the
 * per-id seeded initializer, admission by entry policy, per-row optimizer state, and the
 * CtrCommonAccessor statistics with shrink.
 *
 * A request's ids are grouped by stripe first (a counting sort on the stripe number), so
 * each stripe lock is taken once per request and threads pushing different ids mostly
 * work on different stripes.
 *
 * A stripe's index grows by a quarter when it is 3/4 full, so it stays between 3/5 and 3/4
 * full (4 bytes a slot: 5.3-6.7 bytes per row), and the stripes start from 16 different
 * sizes (64..79 slots, spread over one growth step), so that they grow at different row
 * counts: a shard's index grows a few stripes at a time, by about 1/256 of its size,
 * instead of doubling all at once (then 5.3 to 10.7 bytes per row, depending on the count).  A
 * slot's home is the hash's low 32 bits scaled to the size (any size, not only powers of
 * two); a growth reads the rows in storage order (sequential) to place them again.  At
 * these loads the ids inserted last sit at the ends of long runs of full slots, so a pull
 * or push that finds a row 4 or more slots past its home moves it home (move_home): the ids
 * in use are found at the first probe, as in an index that has just doubled.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"

#define MAX_LOAD_NUM 3 /* grow when rows > 3/4 of the slots */
#define MAX_LOAD_DEN 4
#define FIRST_CAP 64 /* slots of stripe k's first index: FIRST_CAP + k / 4 */

int fl__ps_sparse_create(const fl_ps_table_config *cfg, int server, int nservers, fl__ps_sparse **out)
{
    fl__ps_sparse *t = calloc(1, sizeof *t);
    if (!t) return fl__err(FL_ENOMEM, "sparse table '%s': out of memory", cfg->name);
    t->cfg = *cfg;
    t->dim = cfg->dim;
    t->server = server;
    t->nservers = nservers;
    fl__ps_opt_init(&t->opt, &cfg->opt);
    fl__ps_opt_pows_init(&t->opt, t->pows);
    fl__ps_accessor_fill(&cfg->accessor, &t->acc);
    int st = fl__ps_entry_parse(cfg->entry, cfg->name, &t->entry);
    if (st) {
        free(t);
        return st;
    }
    t->stride = (FL__PS_ROW_HDR + (size_t)4 * (size_t)t->dim * (size_t)(1 + t->opt.nstate) + 7) & ~(size_t)7;
    t->chunk_shift = FL__PS_CHUNK_SHIFT;
    t->seed = cfg->init.seed ? cfg->init.seed : 1;
    pthread_mutex_init(&t->pow_mu, NULL);
    pthread_mutex_init(&t->scan_mu, NULL);
    pthread_rwlock_init(&t->lk, NULL);
    for (int i = 0; i < FL__PS_STRIPES; i++) {
        pthread_mutex_init(&t->st[i].mu, NULL);
        t->st[i].rng.s = fl__hash_u64(t->seed ^ ((uint64_t)server << 32) ^ (uint64_t)i);
    }
    if (cfg->ssd_path && *cfg->ssd_path && (st = fl__ps_ssd_open(t)) != FL_OK) {
        fl__ps_sparse_free(t);
        return st;
    }
    *out = t;
    return FL_OK;
}

void fl__ps_sparse_free(fl__ps_sparse *t)
{
    if (!t) return;
    if (t->ssd) fl__ps_ssd_close(t);
    for (int i = 0; i < FL__PS_STRIPES; i++) {
        fl__ps_stripe *s = &t->st[i];
        for (uint32_t c = 0; c < s->nchunks; c++) free(s->chunks[c]);
        free(s->chunks);
        free(s->slots);
        free(s->freel);
        free(s->pkeys);
        free(s->pcounts);
        pthread_mutex_destroy(&s->mu);
    }
    pthread_mutex_destroy(&t->pow_mu);
    pthread_mutex_destroy(&t->scan_mu);
    pthread_rwlock_destroy(&t->lk);
    free(t);
}

int fl__ps_sparse_dim(const fl__ps_sparse *t) { return t->dim; }

/* ---- initial values ------------------------------------------------------------------------ */

void fl__ps_sparse_init_row(const fl__ps_sparse *t, uint64_t id, float *out)
{
    const fl_initializer *in = &t->cfg.init;
    fl_rng r = {fl__hash_u64(id ^ fl__hash_u64(t->seed))};
    int d = t->dim;
    switch (in->kind) {
    case FL_INIT_CONSTANT:
        for (int j = 0; j < d; j++) out[j] = in->a;
        return;
    case FL_INIT_UNIFORM:
        for (int j = 0; j < d; j++) out[j] = in->a + (in->b - in->a) * fl__rng_uniform(&r);
        return;
    case FL_INIT_NORMAL:
        for (int j = 0; j < d; j++) out[j] = (float)(in->a + in->b * fl__rng_normal(&r));
        return;
    case FL_INIT_TRUNCATED_NORMAL:
        for (int j = 0; j < d; j++) {
            double z;
            do z = fl__rng_normal(&r);
            while (fabs(z) > 2.0);
            out[j] = (float)(in->a + in->b * z);
        }
        return;
    default: /* DEFAULT, XAVIER: fan_in = fan_out = dim */
        if (in->kind == FL_INIT_XAVIER && in->a != 0) {
            double sd = sqrt(1.0 / d);
            for (int j = 0; j < d; j++) out[j] = (float)(sd * fl__rng_normal(&r));
        } else {
            float lim = (float)sqrt(3.0 / d);
            for (int j = 0; j < d; j++) out[j] = -lim + 2 * lim * fl__rng_uniform(&r);
        }
        return;
    }
}

/* ---- the id map ------------------------------------------------------------------------------ */

static inline uint64_t row_key(const fl__ps_sparse *t, const fl__ps_stripe *s, uint32_t idx)
{
    uint64_t k;
    memcpy(&k, fl__ps_row(t, s, idx), 8);
    return k;
}

/* The home slot of inner hash hs in an index of cap slots (cap < 2^32). */
static inline uint64_t home_of(uint64_t cap, uint64_t hs) { return ((hs & 0xffffffffu) * cap) >> 32; }
static inline uint64_t next_slot(uint64_t cap, uint64_t i) { return i + 1 < cap ? i + 1 : 0; }

/* Returns the row pointer of id, or NULL; *slot gets its slot (or the empty slot). */
static inline uint8_t *lookup(const fl__ps_sparse *t, const fl__ps_stripe *s, uint64_t id, uint64_t hs, uint64_t *slot)
{
    if (!s->cap) return NULL;
    const uint32_t tag = FL__PS_SLOT_TAG(hs);
    const uint64_t cap = s->cap;
    uint64_t i = home_of(cap, hs);
    for (;;) {
        uint32_t v = s->slots[i];
        if (!v) {
            *slot = i;
            return NULL;
        }
        if ((v & 63u) == tag) {
            uint8_t *row = fl__ps_row(t, s, FL__PS_SLOT_IDX(v));
            uint64_t k;
            memcpy(&k, row, 8);
            if (k == id) {
                *slot = i;
                return row;
            }
        }
        i = next_slot(cap, i);
    }
}

/* A row found `slot` - home >= MOVE_MIN slots from its home slot trades places with the
 * entry there, so the ids a request touches sit at their home next time (rows inserted
 * last sit at the ends of the longest runs of full slots: the hottest ids often).  Linear
 * probing allows it: every slot from that entry's home to `slot` is full, so both stay
 * reachable; the sum of the displacements does not change. */
#define MOVE_MIN 4
static inline void move_home(fl__ps_stripe *s, uint64_t hs, uint64_t slot)
{
    uint64_t h = home_of(s->cap, hs), d = slot >= h ? slot - h : slot + s->cap - h;
    if (d < MOVE_MIN) return;
    uint32_t v = s->slots[slot];
    s->slots[slot] = s->slots[h];
    s->slots[h] = v;
}

uint8_t *fl__ps_stripe_find(const fl__ps_sparse *t, const fl__ps_stripe *s, uint64_t id, uint64_t hs)
{
    uint64_t slot;
    return lookup(t, s, id, hs, &slot);
}

/* Prefetches the slot of a later id, and the row of the first candidate of a nearer one
 * (the first slot with its tag within 8 of its home: at 3/5-3/4 full the home slot often
 * holds another id). */
static inline void prefetch(const fl__ps_sparse *t, const fl__ps_stripe *s, const uint64_t *hs, const uint32_t *order,
                            uint32_t q, uint32_t end)
{
    if (!s->cap) return;
    if (q + 8 < end) __builtin_prefetch(&s->slots[home_of(s->cap, hs[order[q + 8]])]);
    if (q + 4 < end) {
        const uint64_t h4 = hs[order[q + 4]];
        const uint32_t tag = FL__PS_SLOT_TAG(h4);
        uint64_t i = home_of(s->cap, h4);
        for (int n = 0; n < 8; n++, i = next_slot(s->cap, i)) {
            uint32_t v = s->slots[i];
            if (!v) break;
            if ((v & 63u) == tag) {
                __builtin_prefetch(fl__ps_row(t, s, FL__PS_SLOT_IDX(v)));
                break;
            }
        }
    }
}

/* A bigger index (5/4 of the slots) for the stripe's rows: they are read in storage order,
 * a sequential pass, rather than through the old slots (a random read of every row). */
static int grow_slots(fl__ps_sparse *t, fl__ps_stripe *s)
{
    uint64_t cap = s->cap ? s->cap + s->cap / 4 : FIRST_CAP + (uint64_t)(s - t->st) / 4;
    uint32_t *ns = calloc(cap, sizeof *ns);
    if (!ns)
        return fl__err(FL_ENOMEM, "sparse table '%s': out of memory growing an index to %llu slots", t->cfg.name,
                       (unsigned long long)cap);
    for (uint32_t idx = 0; idx < s->nalloc; idx++) {
        fl__ps_rowhdr h;
        memcpy(&h, fl__ps_row(t, s, idx), sizeof h);
        if (h.flags & FL__PS_ROW_FREE) continue;
        uint64_t hs = fl__ps_inner_hash(h.key), j = home_of(cap, hs);
        while (ns[j]) j = next_slot(cap, j);
        ns[j] = FL__PS_SLOT_MAKE(idx, hs);
    }
    free(s->slots);
    s->slots = ns;
    s->cap = cap;
    return FL_OK;
}

static int alloc_row(fl__ps_sparse *t, fl__ps_stripe *s, uint32_t *idx)
{
    if (s->nfree) {
        *idx = s->freel[--s->nfree];
        return FL_OK;
    }
    if (s->nalloc >= FL__PS_MAX_STRIPE_ROWS)
        return fl__err(FL_ENOMEM,
                       "sparse table '%s': a stripe of this server reached %u rows (the limit is about "
                       "4.3e9 rows per server: add servers)",
                       t->cfg.name, FL__PS_MAX_STRIPE_ROWS);
    const uint32_t chunk = 1u << t->chunk_shift;
    if (s->nalloc % chunk == 0 && s->nalloc / chunk == s->nchunks) {
        if (s->nchunks == s->chunks_cap) {
            uint32_t nc = s->chunks_cap ? s->chunks_cap * 2 : 8;
            uint8_t **p = realloc(s->chunks, nc * sizeof *p);
            if (!p) return fl__err(FL_ENOMEM, "sparse table '%s': out of memory", t->cfg.name);
            s->chunks = p;
            s->chunks_cap = nc;
        }
        uint8_t *c = malloc(chunk * t->stride);
        if (!c) return fl__err(FL_ENOMEM, "sparse table '%s': out of memory for %u rows", t->cfg.name, chunk);
        s->chunks[s->nchunks++] = c;
    }
    *idx = s->nalloc++;
    return FL_OK;
}

/* A row for id (absent) with its slot taken; contents are the caller's. */
static uint8_t *insert_slot(fl__ps_sparse *t, fl__ps_stripe *s, uint64_t hs)
{
    if ((uint64_t)(s->nrows + 1) * MAX_LOAD_DEN > s->cap * MAX_LOAD_NUM && grow_slots(t, s)) return NULL;
    uint32_t idx = 0;
    if (alloc_row(t, s, &idx)) return NULL;
    uint64_t i = home_of(s->cap, hs);
    while (s->slots[i]) i = next_slot(s->cap, i);
    s->slots[i] = FL__PS_SLOT_MAKE(idx, hs);
    s->nrows++;
    atomic_fetch_add_explicit(&t->changes, 1, memory_order_relaxed);
    return fl__ps_row(t, s, idx);
}

uint8_t *fl__ps_stripe_insert_raw(fl__ps_sparse *t, fl__ps_stripe *s, uint64_t id, uint64_t hs, const uint8_t *src)
{
    uint8_t *row = insert_slot(t, s, hs);
    if (!row) return NULL;
    memcpy(row, src, t->stride);
    memcpy(row, &id, 8);
    return row;
}

uint8_t *fl__ps_stripe_insert(fl__ps_sparse *t, fl__ps_stripe *s, uint64_t id, uint64_t hs)
{
    uint8_t *row = insert_slot(t, s, hs);
    if (!row) return NULL;
    fl__ps_rowhdr h = {id, 0, 0, 0, 0, FL__PS_ROW_REF};
    memcpy(row, &h, sizeof h);
    float *v = (float *)(row + FL__PS_ROW_HDR);
    fl__ps_sparse_init_row(t, id, v);
    memset(v + t->dim, 0, (size_t)4 * t->dim * t->opt.nstate);
    return row;
}

/* Backward-shift deletion of the entry in slot i (linear probing keeps no tombstones). */
static void delete_slot(fl__ps_sparse *t, fl__ps_stripe *s, uint64_t i)
{
    const uint64_t cap = s->cap;
    uint32_t idx = FL__PS_SLOT_IDX(s->slots[i]);
    s->slots[i] = 0;
    for (uint64_t j = next_slot(cap, i); s->slots[j]; j = next_slot(cap, j)) {
        uint64_t home = home_of(cap, fl__ps_inner_hash(row_key(t, s, FL__PS_SLOT_IDX(s->slots[j]))));
        /* move j back to i if its home is not in the cyclic range (i, j] */
        int in_range = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_range) {
            s->slots[i] = s->slots[j];
            s->slots[j] = 0;
            i = j;
        }
    }
    uint8_t *row = fl__ps_row(t, s, idx);
    fl__ps_rowhdr h;
    memcpy(&h, row, sizeof h);
    h.flags = FL__PS_ROW_FREE;
    memcpy(row, &h, sizeof h);
    s->freel[s->nfree++] = idx; /* room reserved by the caller */
    s->nrows--;
    atomic_fetch_add_explicit(&t->changes, 1, memory_order_relaxed);
}

/* Makes room on the free list for `more` rows. */
static int reserve_free(fl__ps_sparse *t, fl__ps_stripe *s, uint32_t more)
{
    if (s->free_cap >= s->nfree + more) return FL_OK;
    uint32_t nc = s->nfree + more;
    if (nc < s->free_cap * 2) nc = s->free_cap * 2;
    uint32_t *p = realloc(s->freel, (size_t)nc * sizeof *p);
    if (!p) return fl__err(FL_ENOMEM, "sparse table '%s': out of memory for a free list", t->cfg.name);
    s->freel = p;
    s->free_cap = nc;
    return FL_OK;
}

int fl__ps_stripe_remove(fl__ps_sparse *t, fl__ps_stripe *s, uint64_t id, uint64_t hs)
{
    uint64_t slot;
    if (!lookup(t, s, id, hs, &slot)) return 0;
    if (reserve_free(t, s, 1)) return -1;
    delete_slot(t, s, slot);
    return 1;
}

/* ---- the pending-count map (count_filter_entry) ------------------------------------------- */

static int pending_grow(fl__ps_stripe *s)
{
    uint64_t cap = s->pcap ? s->pcap * 2 : 64;
    uint64_t *nk = calloc(cap, sizeof *nk);
    uint32_t *nc = calloc(cap, sizeof *nc);
    if (!nk || !nc) {
        free(nk);
        free(nc);
        return fl__err(FL_ENOMEM, "out of memory for the entry filter");
    }
    for (uint64_t i = 0; i < s->pcap; i++) {
        if (!s->pcounts[i]) continue;
        uint64_t j = fl__ps_inner_hash(s->pkeys[i]) & (cap - 1);
        while (nc[j]) j = (j + 1) & (cap - 1);
        nk[j] = s->pkeys[i];
        nc[j] = s->pcounts[i];
    }
    free(s->pkeys);
    free(s->pcounts);
    s->pkeys = nk;
    s->pcounts = nc;
    s->pcap = cap;
    return FL_OK;
}

static uint64_t pending_find(const fl__ps_stripe *s, uint64_t id, uint64_t hs, int *found)
{
    uint64_t mask = s->pcap - 1, i = hs & mask;
    while (s->pcounts[i] && s->pkeys[i] != id) i = (i + 1) & mask;
    *found = s->pcounts[i] != 0;
    return i;
}

static void pending_delete(fl__ps_stripe *s, uint64_t i)
{
    uint64_t mask = s->pcap - 1;
    s->pcounts[i] = 0;
    for (uint64_t j = (i + 1) & mask; s->pcounts[j]; j = (j + 1) & mask) {
        uint64_t home = fl__ps_inner_hash(s->pkeys[j]) & mask;
        int in_range = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_range) {
            s->pkeys[i] = s->pkeys[j];
            s->pcounts[i] = s->pcounts[j];
            s->pcounts[j] = 0;
            i = j;
        }
    }
    s->plen--;
}

int fl__ps_pending_set(fl__ps_stripe *s, uint64_t id, uint64_t hs, uint32_t count)
{
    if ((uint64_t)(s->plen + 1) * MAX_LOAD_DEN > s->pcap * MAX_LOAD_NUM) FL_CHECK(pending_grow(s));
    int found;
    uint64_t i = pending_find(s, id, hs, &found);
    if (!found) s->plen++;
    s->pkeys[i] = id;
    s->pcounts[i] = count;
    return FL_OK;
}

/* A training touch of an absent id: 1 if it is admitted now (then the caller creates it),
 * 0 if not (yet), < 0 on error. */
static int admit(fl__ps_sparse *t, fl__ps_stripe *s, uint64_t id, uint64_t hs)
{
    switch (t->entry.kind) {
    case 1: {
        int found = 0;
        uint64_t i = 0;
        if (s->pcap) i = pending_find(s, id, hs, &found);
        uint32_t c = found ? s->pcounts[i] + 1 : 1;
        if (c >= t->entry.count) {
            if (found) pending_delete(s, i);
            return 1;
        }
        if (found) {
            s->pcounts[i] = c;
            return 0;
        }
        return fl__ps_pending_set(s, id, hs, c) ? -1 : 0;
    }
    case 2: return (double)fl__rng_uniform(&s->rng) < t->entry.prob;
    default: return 1;
    }
}

/* ---- grouping a request by stripe ------------------------------------------------------------ */

typedef struct {
    uint32_t *order; /* positions sorted by stripe */
    uint64_t *hs;    /* inner hash per position */
    uint32_t start[FL__PS_STRIPES + 1];
} groups;

static int group(const uint64_t *ids, uint64_t n, groups *g)
{
    if (n > UINT32_MAX) return fl__err(FL_EINVAL, "too many ids in one request (%llu)", (unsigned long long)n);
    g->order = malloc((size_t)(n ? n : 1) * sizeof *g->order);
    g->hs = malloc((size_t)(n ? n : 1) * sizeof *g->hs);
    if (!g->order || !g->hs) {
        free(g->order);
        free(g->hs);
        return fl__err(FL_ENOMEM, "out of memory grouping %llu ids", (unsigned long long)n);
    }
    uint32_t cnt[FL__PS_STRIPES] = {0};
    for (uint64_t i = 0; i < n; i++) {
        g->hs[i] = fl__ps_inner_hash(ids[i]);
        cnt[g->hs[i] >> 58]++;
    }
    g->start[0] = 0;
    for (int k = 0; k < FL__PS_STRIPES; k++) g->start[k + 1] = g->start[k] + cnt[k];
    uint32_t at[FL__PS_STRIPES];
    memcpy(at, g->start, sizeof at);
    for (uint64_t i = 0; i < n; i++) g->order[at[g->hs[i] >> 58]++] = (uint32_t)i;
    return FL_OK;
}

static void groups_free(groups *g)
{
    free(g->order);
    free(g->hs);
}

/* ---- pull and push ------------------------------------------------------------------------------ */

int fl__ps_sparse_pull(fl__ps_sparse *t, const uint64_t *ids, uint64_t n, float *out, int training)
{
    groups g;
    FL_CHECK(group(ids, n, &g));
    const size_t vb = (size_t)t->dim * 4;
    int st = FL_OK;
    uint8_t *found = NULL; /* SSD tables, not training: positions read from disk */
    if (t->ssd && !training && !(found = calloc(n ? n : 1, 1))) {
        groups_free(&g);
        return fl__err(FL_ENOMEM, "out of memory pulling %llu ids", (unsigned long long)n);
    }
    pthread_rwlock_rdlock(&t->lk);
    for (int k = 0; k < FL__PS_STRIPES && st == FL_OK; k++) {
        if (g.start[k] == g.start[k + 1]) continue;
        fl__ps_stripe *s = &t->st[k];
        pthread_mutex_lock(&s->mu);
        if (t->ssd) st = fl__ps_ssd_fetch(t, s, ids, g.hs, g.order, g.start[k], g.start[k + 1], training, out, found);
        for (uint32_t q = g.start[k]; q < g.start[k + 1] && st == FL_OK; q++) {
            uint32_t i = g.order[q];
            uint64_t slot;
            prefetch(t, s, g.hs, g.order, q, g.start[k + 1]);
            uint8_t *row = lookup(t, s, ids[i], g.hs[i], &slot);
            if (row) move_home(s, g.hs[i], slot);
            if (!row && training) {
                int a = admit(t, s, ids[i], g.hs[i]);
                if (a > 0) row = fl__ps_stripe_insert(t, s, ids[i], g.hs[i]);
                if (a < 0 || (a > 0 && !row)) {
                    st = fl_last_status() ? fl_last_status() : FL_ENOMEM;
                    break;
                }
            }
            if (row) {
                memcpy(out + (size_t)i * t->dim, row + FL__PS_ROW_HDR, vb);
                if (t->ssd && training) {
                    uint16_t f;
                    memcpy(&f, row + offsetof(fl__ps_rowhdr, flags), 2);
                    f |= FL__PS_ROW_REF;
                    memcpy(row + offsetof(fl__ps_rowhdr, flags), &f, 2);
                }
            } else if (!found || !found[i]) {
                memset(out + (size_t)i * t->dim, 0, vb);
            }
        }
        if (t->ssd && training && st == FL_OK) st = fl__ps_ssd_evict(t, s);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_rwlock_unlock(&t->lk);
    groups_free(&g);
    free(found);
    return st;
}

static inline float score(const fl_ps_accessor *a, float show, float click)
{
    return (show - click) * a->nonclk_coeff + click * a->click_coeff;
}

int fl__ps_sparse_push(fl__ps_sparse *t, const uint64_t *ids, uint64_t n, const float *grads, const float *shows,
                       const float *clicks, float scale, int last)
{
    float pows[2];
    groups g;
    FL_CHECK(group(ids, n, &g));
    pthread_rwlock_rdlock(&t->lk);
    pthread_mutex_lock(&t->pow_mu);
    memcpy(pows, t->pows, sizeof pows);
    if (last) fl__ps_opt_pows_advance(&t->opt, t->pows);
    pthread_mutex_unlock(&t->pow_mu);
    const int d = t->dim;
    float *m1 = NULL, *m2 = NULL;
    fl__ps_step step;
    int st = fl__ps_step_begin(&t->opt, pows, scale, &step);
    for (int k = 0; k < FL__PS_STRIPES && st == FL_OK; k++) {
        if (g.start[k] == g.start[k + 1]) continue;
        fl__ps_stripe *s = &t->st[k];
        pthread_mutex_lock(&s->mu);
        if (t->ssd) st = fl__ps_ssd_fetch(t, s, ids, g.hs, g.order, g.start[k], g.start[k + 1], 1, NULL, NULL);
        for (uint32_t q = g.start[k]; q < g.start[k + 1] && st == FL_OK; q++) {
            uint32_t i = g.order[q];
            uint64_t slot;
            prefetch(t, s, g.hs, g.order, q, g.start[k + 1]);
            uint8_t *row = lookup(t, s, ids[i], g.hs[i], &slot);
            if (row) move_home(s, g.hs[i], slot);
            else {
                int a = admit(t, s, ids[i], g.hs[i]);
                if (a > 0) row = fl__ps_stripe_insert(t, s, ids[i], g.hs[i]);
                if (a < 0 || (a > 0 && !row)) {
                    st = fl_last_status() ? fl_last_status() : FL_ENOMEM;
                    break;
                }
                if (!row) continue; /* not admitted: the gradient is dropped */
            }
            fl__ps_rowhdr h;
            memcpy(&h, row, sizeof h);
            float sh = shows ? shows[i] : 1.0f, ck = clicks ? clicks[i] : 0.0f;
            h.show += sh;
            h.click += ck;
            h.delta_score += score(&t->acc, sh, ck);
            h.unseen_days = 0;
            h.flags |= FL__PS_ROW_REF;
            memcpy(row, &h, sizeof h);
            float *w = (float *)(row + FL__PS_ROW_HDR);
            if (t->opt.nstate >= 1) m1 = w + d;
            if (t->opt.nstate >= 2) m2 = w + 2 * d;
            fl__ps_step_apply(&step, w, m1, m2, grads + (size_t)i * d, d);
        }
        if (t->ssd && st == FL_OK) st = fl__ps_ssd_evict(t, s);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_rwlock_unlock(&t->lk);
    groups_free(&g);
    if (st) return fl__err(st, "sparse table '%s': %s", t->cfg.name, fl_last_error());
    return FL_OK;
}

int fl__ps_sparse_get(fl__ps_sparse *t, uint64_t id, float *vals, float *show, float *click)
{
    uint64_t hs = fl__ps_inner_hash(id), slot;
    fl__ps_stripe *s = &t->st[hs >> 58];
    pthread_rwlock_rdlock(&t->lk);
    pthread_mutex_lock(&s->mu);
    uint8_t *row = lookup(t, s, id, hs, &slot), *disk = NULL;
    int got = row != NULL;
    if (!row && t->ssd && (disk = malloc(t->stride)) != NULL && fl__ps_ssd_get(t, id, disk) > 0) {
        row = disk;
        got = 1;
    }
    if (row) {
        fl__ps_rowhdr h;
        memcpy(&h, row, sizeof h);
        if (vals) memcpy(vals, row + FL__PS_ROW_HDR, (size_t)t->dim * 4);
        if (show) *show = h.show;
        if (click) *click = h.click;
    }
    pthread_mutex_unlock(&s->mu);
    pthread_rwlock_unlock(&t->lk);
    free(disk);
    return got;
}

/* ---- shrink and statistics ----------------------------------------------------------------- */

int fl__ps_row_shrink(const fl__ps_sparse *t, fl__ps_rowhdr *h)
{
    const fl_ps_accessor *a = &t->acc;
    h->show *= a->show_click_decay_rate;
    h->click *= a->show_click_decay_rate;
    return score(a, h->show, h->click) < a->delete_threshold || h->unseen_days > a->delete_after_unseen_days;
}

static int shrink_disk_row(void *user, uint8_t *row)
{
    fl__ps_rowhdr h;
    memcpy(&h, row, sizeof h);
    if (fl__ps_row_shrink(user, &h)) return FL__PS_VISIT_DELETE;
    memcpy(row, &h, sizeof h);
    return FL__PS_VISIT_WRITE;
}

int64_t fl__ps_sparse_shrink(fl__ps_sparse *t)
{
    int64_t deleted = 0;
    /* an SSD table is shrunk whole: no request may move a row between tiers meanwhile */
    if (t->ssd) pthread_rwlock_wrlock(&t->lk);
    else pthread_rwlock_rdlock(&t->lk);
    for (int k = 0; k < FL__PS_STRIPES; k++) {
        fl__ps_stripe *s = &t->st[k];
        pthread_mutex_lock(&s->mu);
        /* reserve free-list room for every row that might go */
        if (reserve_free(t, s, s->nrows)) {
            pthread_mutex_unlock(&s->mu);
            FL_WARN(FL_SUB_PS, "sparse table '%s': out of memory during shrink; stripe %d skipped", t->cfg.name, k);
            continue;
        }
        for (uint32_t idx = 0; idx < s->nalloc; idx++) {
            uint8_t *row = fl__ps_row(t, s, idx);
            fl__ps_rowhdr h;
            memcpy(&h, row, sizeof h);
            if (h.flags & FL__PS_ROW_FREE) continue;
            int del = fl__ps_row_shrink(t, &h);
            memcpy(row, &h, sizeof h);
            if (del) {
                uint64_t slot;
                if (lookup(t, s, h.key, fl__ps_inner_hash(h.key), &slot)) {
                    delete_slot(t, s, slot);
                    deleted++;
                }
            }
        }
        pthread_mutex_unlock(&s->mu);
    }
    if (t->ssd) {
        int64_t before = fl__ps_ssd_rows(t);
        if (fl__ps_ssd_foreach(t, shrink_disk_row, t))
            FL_WARN(FL_SUB_PS, "sparse table '%s': shrink of the rows on disk failed: %s", t->cfg.name, fl_last_error());
        deleted += before - fl__ps_ssd_rows(t);
    }
    pthread_rwlock_unlock(&t->lk);
    return deleted;
}

void fl__ps_sparse_stats(fl__ps_sparse *t, fl_ps_table_stats *out)
{
    memset(out, 0, sizeof *out);
    int64_t bytes = (int64_t)sizeof *t;
    pthread_rwlock_rdlock(&t->lk);
    for (int k = 0; k < FL__PS_STRIPES; k++) {
        fl__ps_stripe *s = &t->st[k];
        pthread_mutex_lock(&s->mu);
        out->rows += s->nrows;
        out->pending += s->plen;
        bytes += (int64_t)(s->cap * 4 + ((uint64_t)s->nchunks << t->chunk_shift) * t->stride + s->chunks_cap * 8 +
                           (uint64_t)s->free_cap * 4 + s->pcap * 12);
        pthread_mutex_unlock(&s->mu);
    }
    if (t->ssd) out->rows += fl__ps_ssd_rows(t);
    pthread_rwlock_unlock(&t->lk);
    out->bytes = bytes;
    out->payload_per_key = 4.0 * t->dim * (1 + t->opt.nstate);
    out->bytes_per_key = out->rows ? (double)bytes / (double)out->rows : 0;
}

/* ---- export -------------------------------------------------------------------------------- */

typedef struct {
    fl__ps_sparse *t;
    uint64_t skip, want, got;
    uint64_t *ids;
    float *vals;
    int after_set; /* rows with this key are skipped (the last row of the previous page) */
    uint64_t after, last;
} scan_state;

static int scan_disk_row(void *user, uint8_t *row)
{
    scan_state *z = user;
    uint64_t key;
    memcpy(&key, row, 8);
    if (z->after_set && key == z->after) return FL__PS_VISIT_KEEP;
    if (z->skip) {
        z->skip--;
        return FL__PS_VISIT_KEEP;
    }
    z->ids[z->got] = key;
    z->last = key;
    memcpy(z->vals + z->got * (uint64_t)z->t->dim, row + FL__PS_ROW_HDR, (size_t)z->t->dim * 4);
    return ++z->got == z->want ? FL__PS_VISIT_STOP : FL__PS_VISIT_KEEP;
}

/* Pages of a scan go in order (fl_ps_client_scan_sparse asks for rows [0, p), [p, 2p), ...):
 * each page starts where the previous one ended (t->scan) instead of counting rows from the
 * start, so a whole export is one pass over the memory rows and one over the disk rows. */
int fl__ps_sparse_scan(fl__ps_sparse *t, uint64_t first, uint64_t n, uint64_t *ids, float *vals)
{
    const size_t d = (size_t)t->dim;
    uint64_t rank = 0, got = 0;
    pthread_rwlock_rdlock(&t->lk);
    const uint64_t changes = atomic_load(&t->changes);
    pthread_mutex_lock(&t->scan_mu);
    const int resume = t->scan.valid && t->scan.rank == first && t->scan.changes == changes;
    int k = 0, disk_key_set = 0;
    uint32_t idx = 0;
    uint64_t disk_key = 0;
    if (resume) {
        k = t->scan.stripe;
        idx = t->scan.idx;
        disk_key_set = t->scan.disk_key_set;
        disk_key = t->scan.disk_key;
        rank = first;
    }
    pthread_mutex_unlock(&t->scan_mu);
    for (; k < FL__PS_STRIPES && got < n; k++, idx = 0) {
        fl__ps_stripe *s = &t->st[k];
        pthread_mutex_lock(&s->mu);
        if (idx == 0 && rank + s->nrows <= first) { /* the whole stripe lies before the page */
            rank += s->nrows;
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        for (; idx < s->nalloc && got < n; idx++) {
            const uint8_t *row = fl__ps_row(t, s, idx);
            fl__ps_rowhdr h;
            memcpy(&h, row, sizeof h);
            if (h.flags & FL__PS_ROW_FREE) continue;
            if (rank++ < first) continue;
            ids[got] = h.key;
            memcpy(vals + got * d, row + FL__PS_ROW_HDR, d * 4);
            got++;
        }
        pthread_mutex_unlock(&s->mu);
        if (got == n) break; /* the next page starts at row idx of this stripe */
    }
    if (k >= FL__PS_STRIPES) k = FL__PS_STRIPES;
    if (t->ssd && got < n) { /* then the rows on disk, in key order */
        scan_state z = {t, first > rank ? first - rank : 0, n - got, 0, ids + got, vals + got * d, disk_key_set, disk_key,
                        0};
        if (fl__ps_ssd_foreach_from(t, disk_key_set ? &disk_key : NULL, scan_disk_row, &z) == FL_OK) got += z.got;
        if (z.got) {
            disk_key_set = 1;
            disk_key = z.last;
        }
    }
    pthread_mutex_lock(&t->scan_mu);
    t->scan.valid = got == n;
    t->scan.stripe = k;
    t->scan.idx = k < FL__PS_STRIPES ? idx : 0;
    t->scan.disk_key_set = disk_key_set;
    t->scan.disk_key = disk_key;
    t->scan.rank = first + got;
    t->scan.changes = changes;
    pthread_mutex_unlock(&t->scan_mu);
    pthread_rwlock_unlock(&t->lk);
    if (got < n)
        return fl__err(FL_ESTATE,
                       "sparse table '%s': rows %llu..%llu were asked for but the shard holds %llu rows (rows "
                       "were deleted during the export)",
                       t->cfg.name, (unsigned long long)first, (unsigned long long)(first + n),
                       (unsigned long long)(first + got));
    return FL_OK;
}
