/*
 * translation_reader.c - the Transformer benchmark's corpus reader (fleet/transformer.h):
 * vocabularies, the parallel corpus in memory, token-count batches grouped by length, and
 * the padded feeds with their attention biases, prepared ahead by reader threads.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base_internal.h"
#include "transformer_internal.h"

#define MAX_TOKEN 4096
#define MAX_THREADS 32
#define WAIT_S 600 /* how long fl_translation_next waits for a batch */

typedef struct {
    fl_strmap ids;
    char **tok;
    int64_t n;
} vocab;

/* The pass of fl_translation_begin: batch k is prepared by a reader thread into ring slot
 * k mod nslot, at most nslot batches ahead of the consumer. */
typedef struct {
    fl_translation_batch **slot;
    int *ready, *st; /* per slot */
    char (*err)[256];
    int nslot, nth, stop, running;
    int64_t claim, next; /* the next batch to prepare, to hand out */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th[MAX_THREADS];
} tr_pass;

struct fl_translation_data {
    vocab v[2];
    int64_t bos, eos, unk;
    fl_translation_opts o;
    int64_t n, cap;
    int64_t *src_off, *trg_off; /* into ids */
    int32_t *src_len, *trg_len; /* src: tokens + <e>; trg: <s> tokens <e> */
    int64_t *ids, nids, cap_ids;
    int64_t *order, norder;  /* this epoch's pairs, batch after batch */
    int64_t *bstart, nbatch; /* this rank's batches: order[bstart[k] .. bstart[k+1]) */
    tr_pass ps;
};

struct fl_translation_batch {
    fl_tensor *t[FL_MODEL_TRANSFORMER_FEEDS];
    int64_t sentences, tokens;
};

static const char *const feed_names[FL_MODEL_TRANSFORMER_FEEDS] = {"src_word",          "src_pos",  "src_slf_attn_bias",
                                                                   "trg_word",          "trg_pos",  "trg_slf_attn_bias",
                                                                   "trg_src_attn_bias", "lbl_word", "lbl_weight"};

fl_translation_opts fl_translation_opts_default(void)
{
    fl_translation_opts o = {4096, 1, 10000, "pool", 1, 1, 0, 256, 8, 1, 0, 1, 1};
    return o;
}

/* ---- masks and source feeds (shared with the decoder) ------------------------------------- */

void fl__tr_causal_bias(float *b, int64_t B, int64_t H, int64_t T)
{
    for (int64_t m = 0; m < B * H; m++)
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++) b[(m * T + i) * T + j] = j > i ? FL_TR_MASK : 0.0f;
}

void fl__tr_key_bias(float *b, int64_t B, int64_t H, int64_t Q, int64_t S, const int *len)
{
    for (int64_t i = 0; i < B; i++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t q = 0; q < Q; q++) {
                float *r = b + ((i * H + h) * Q + q) * S;
                for (int64_t k = 0; k < S; k++) r[k] = k < len[i] ? 0.0f : FL_TR_MASK;
            }
}

int fl__tr_src_feeds(const int64_t *const *seq, const int *len, int64_t B, int64_t H, int64_t pad, fl_tensor *word,
                     fl_tensor *pos, fl_tensor *bias)
{
    int64_t S = 1;
    for (int64_t i = 0; i < B; i++) S = len[i] > S ? len[i] : S;
    FL_CHECK(fl_tensor_resize(word, FL_INT64, 3, (const int64_t[]){B, S, 1}));
    FL_CHECK(fl_tensor_resize(pos, FL_INT64, 3, (const int64_t[]){B, S, 1}));
    FL_CHECK(fl_tensor_resize(bias, FL_FLOAT32, 4, (const int64_t[]){B, H, S, S}));
    int64_t *w = fl_tensor_i64(word), *p = fl_tensor_i64(pos);
    for (int64_t i = 0; i < B; i++)
        for (int64_t k = 0; k < S; k++) {
            w[i * S + k] = k < len[i] ? seq[i][k] : pad;
            p[i * S + k] = k < len[i] ? k : 0;
        }
    fl__tr_key_bias(fl_tensor_f32(bias), B, H, S, S, len);
    return FL_OK;
}

/* ---- vocabularies and corpus ---------------------------------------------------------------- */

static void vocab_free(vocab *v)
{
    fl__strmap_free(&v->ids);
    for (int64_t i = 0; i < v->n; i++) free(v->tok[i]);
    free(v->tok);
}

static int vocab_load(vocab *v, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return fl__err(FL_EIO, "vocabulary '%s': %s", path, strerror(errno));
    char *line = NULL;
    size_t lcap = 0;
    int64_t cap = 0;
    ssize_t len;
    int st = FL_OK;
    while (st == FL_OK && (len = getline(&line, &lcap, f)) >= 0) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        int64_t dup;
        if (!len) st = fl__err(FL_ECORRUPT, "%s:%lld: empty token", path, (long long)v->n + 1);
        else if (fl__strmap_get(&v->ids, line, &dup))
            st = fl__err(FL_ECORRUPT, "%s:%lld: token '%.64s' repeated (first on line %lld)", path, (long long)v->n + 1,
                         line, (long long)dup + 1);
        if (st != FL_OK) break;
        if (v->n == cap) {
            cap = cap ? 2 * cap : 1024;
            char **nt = realloc(v->tok, (size_t)cap * sizeof *nt);
            if (!nt) {
                st = fl__err(FL_ENOMEM, "vocabulary '%s': out of memory", path);
                break;
            }
            v->tok = nt;
        }
        if (!(v->tok[v->n] = fl__strdup(line))) st = fl__err(FL_ENOMEM, "vocabulary '%s': out of memory", path);
        else if ((st = fl__strmap_put(&v->ids, line, v->n)) == FL_OK) v->n++;
        else free(v->tok[v->n]);
    }
    free(line);
    if (st == FL_OK && ferror(f)) st = fl__err(FL_EIO, "vocabulary '%s': read error", path);
    fclose(f);
    if (st == FL_OK && !v->n) st = fl__err(FL_ECORRUPT, "vocabulary '%s' is empty", path);
    return st;
}

static int push_id(fl_translation_data *d, int64_t id)
{
    if (d->nids == d->cap_ids) {
        int64_t cap = d->cap_ids ? 2 * d->cap_ids : 1 << 16;
        int64_t *n = realloc(d->ids, (size_t)cap * sizeof *n);
        if (!n) return fl__err(FL_ENOMEM, "translation data: out of memory");
        d->ids = n, d->cap_ids = cap;
    }
    d->ids[d->nids++] = id;
    return FL_OK;
}

/* Token ids of the blank-separated words of s[0..len) into d->ids; *n gets their count. */
static int push_words(fl_translation_data *d, const vocab *v, const char *s, size_t len, int32_t *n)
{
    char tok[MAX_TOKEN];
    *n = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && s[i] == ' ') i++;
        size_t j = i;
        while (j < len && s[j] != ' ') j++;
        if (j == i) break;
        size_t k = j - i < MAX_TOKEN - 1 ? j - i : MAX_TOKEN - 1;
        memcpy(tok, s + i, k);
        tok[k] = 0;
        int64_t id;
        FL_CHECK(push_id(d, fl__strmap_get(&v->ids, tok, &id) ? id : d->unk));
        (*n)++;
        i = j;
    }
    return FL_OK;
}

static int add_pair(fl_translation_data *d, const char *src, size_t ns, const char *trg, size_t nt)
{
    if (d->n == d->cap) {
        int64_t cap = d->cap ? 2 * d->cap : 4096;
        int64_t *so = realloc(d->src_off, (size_t)cap * sizeof *so);
        if (so) d->src_off = so;
        int64_t *to = so ? realloc(d->trg_off, (size_t)cap * sizeof *to) : NULL;
        if (to) d->trg_off = to;
        int32_t *sl = to ? realloc(d->src_len, (size_t)cap * sizeof *sl) : NULL;
        if (sl) d->src_len = sl;
        int32_t *tl = sl ? realloc(d->trg_len, (size_t)cap * sizeof *tl) : NULL;
        if (tl) d->trg_len = tl;
        if (!tl) return fl__err(FL_ENOMEM, "translation data: out of memory");
        d->cap = cap;
    }
    int32_t n;
    d->src_off[d->n] = d->nids;
    FL_CHECK(push_words(d, &d->v[0], src, ns, &n));
    FL_CHECK(push_id(d, d->eos));
    d->src_len[d->n] = n + 1;
    d->trg_off[d->n] = d->nids;
    FL_CHECK(push_id(d, d->bos));
    FL_CHECK(push_words(d, &d->v[1], trg, nt, &n));
    FL_CHECK(push_id(d, d->eos));
    d->trg_len[d->n] = n + 2;
    d->n++;
    return FL_OK;
}

static int load_file(fl_translation_data *d, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return fl__err(FL_EIO, "translation data '%s': %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int st = FL_OK;
    while (st == FL_OK && (len = getline(&line, &cap, f)) >= 0) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        char *tab = memchr(line, '\t', (size_t)len);
        /* the benchmark's reader keeps lines of exactly two fields */
        if (!tab || memchr(tab + 1, '\t', (size_t)(line + len - tab - 1))) continue;
        st = add_pair(d, line, (size_t)(tab - line), tab + 1, (size_t)(line + len - tab - 1));
    }
    free(line);
    if (st == FL_OK && ferror(f)) st = fl__err(FL_EIO, "translation data '%s': read error", path);
    fclose(f);
    return st;
}

static void stop_pass(fl_translation_data *d);

void fl_translation_free(fl_translation_data *d)
{
    if (!d) return;
    stop_pass(d);
    pthread_mutex_destroy(&d->ps.mu);
    pthread_cond_destroy(&d->ps.cv);
    vocab_free(&d->v[0]);
    vocab_free(&d->v[1]);
    free(d->src_off), free(d->trg_off), free(d->src_len), free(d->trg_len), free(d->ids);
    free(d->order), free(d->bstart);
    free(d);
}

int fl_translation_load(const char *src_vocab, const char *trg_vocab, const char *const *files, int nfiles,
                        const fl_translation_opts *o, fl_translation_data **out)
{
    if (!src_vocab || !trg_vocab || !out || nfiles < 0 || (nfiles && !files))
        return fl__err(FL_EINVAL, "fl_translation_load: src_vocab, trg_vocab, files or out is NULL");
    *out = NULL;
    fl_translation_opts def = fl_translation_opts_default();
    if (!o) o = &def;
    if (o->batch_size < 1 || o->pool_size < 1 || o->n_head < 1 || o->max_length < 1 || o->nranks < 1 || o->rank < 0 ||
        o->rank >= o->nranks)
        return fl__err(FL_EINVAL,
                       "fl_translation_load: batch_size, pool_size, n_head, max_length and nranks must be >= 1 and "
                       "rank in [0, nranks) (got %d, %d, %d, %d, %d, %d)",
                       o->batch_size, o->pool_size, o->n_head, o->max_length, o->nranks, o->rank);
    if (o->threads < 1 || o->threads > MAX_THREADS)
        return fl__err(FL_EINVAL, "fl_translation_load: threads must be in [1, %d], got %d", MAX_THREADS, o->threads);
    const char *sort = o->sort_type ? o->sort_type : "pool";
    if (strcmp(sort, "pool") && strcmp(sort, "global") && strcmp(sort, "none"))
        return fl__err(FL_EINVAL, "fl_translation_load: sort_type must be pool, global or none, got '%s'", sort);
    fl_translation_data *d = calloc(1, sizeof *d);
    if (!d) return fl__err(FL_ENOMEM, "translation data: out of memory");
    pthread_mutex_init(&d->ps.mu, NULL);
    pthread_cond_init(&d->ps.cv, NULL);
    d->o = *o;
    d->o.sort_type = !strcmp(sort, "pool") ? "pool" : !strcmp(sort, "global") ? "global" : "none";
    int st = vocab_load(&d->v[0], src_vocab);
    if (st == FL_OK) st = vocab_load(&d->v[1], trg_vocab);
    const char *marks[3] = {"<s>", "<e>", "<unk>"};
    int64_t *mid[3] = {&d->bos, &d->eos, &d->unk};
    for (int k = 0; k < 3 && st == FL_OK; k++) {
        int64_t t;
        if (!fl__strmap_get(&d->v[0].ids, marks[k], mid[k]))
            st = fl__err(FL_ECORRUPT, "vocabulary '%s' has no %s", src_vocab, marks[k]);
        else if (!fl__strmap_get(&d->v[1].ids, marks[k], &t) || t != *mid[k])
            st = fl__err(FL_ECORRUPT, "vocabulary '%s': %s must have the id it has in '%s' (%lld)", trg_vocab, marks[k],
                         src_vocab, (long long)*mid[k]);
    }
    for (int i = 0; i < nfiles && st == FL_OK; i++) st = load_file(d, files[i]);
    if (st != FL_OK) {
        fl_translation_free(d);
        return st;
    }
    *out = d;
    return FL_OK;
}

int64_t fl_translation_size(const fl_translation_data *d)
{
    return d ? d->n : fl__err(FL_EINVAL, "fl_translation_size: data is NULL");
}

int64_t fl_translation_vocab_size(const fl_translation_data *d, int trg)
{
    return d ? d->v[trg != 0].n : fl__err(FL_EINVAL, "fl_translation_vocab_size: data is NULL");
}

int fl_translation_marks(const fl_translation_data *d, int64_t *bos, int64_t *eos, int64_t *unk)
{
    if (!d) return fl__err(FL_EINVAL, "fl_translation_marks: data is NULL");
    if (bos) *bos = d->bos;
    if (eos) *eos = d->eos;
    if (unk) *unk = d->unk;
    return FL_OK;
}

int fl_translation_pair(const fl_translation_data *d, int64_t i, const int64_t **src, int *nsrc, const int64_t **trg,
                        int *ntrg)
{
    if (!d || i < 0 || i >= d->n)
        return fl__err(FL_EINVAL, "fl_translation_pair: data is NULL or pair %lld out of range", (long long)i);
    if (src) *src = d->ids + d->src_off[i];
    if (nsrc) *nsrc = d->src_len[i];
    if (trg) *trg = d->ids + d->trg_off[i] + 1;
    if (ntrg) *ntrg = d->trg_len[i] - 2;
    return FL_OK;
}

const char *fl_translation_token(const fl_translation_data *d, int trg, int64_t id)
{
    if (!d) {
        fl__err(FL_EINVAL, "fl_translation_token: data is NULL");
        return NULL;
    }
    const vocab *v = &d->v[trg != 0];
    return id >= 0 && id < v->n ? v->tok[id] : NULL;
}

/* ---- batching ---------------------------------------------------------------------------- */

typedef struct {
    int64_t i, key, pos;
} info;

static int cmp_up(const void *a, const void *b)
{
    const info *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}
static int cmp_down(const void *a, const void *b)
{
    const info *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos; /* stable, as Python's sorted(reverse=True) */
}

static int64_t max_len_of(const fl_translation_data *d, int64_t i)
{
    return d->src_len[i] > d->trg_len[i] ? d->src_len[i] : d->trg_len[i];
}

static void shuffle_i64(int64_t *a, int64_t n, fl_rng *r)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(fl__rng_next(r) % (uint64_t)(i + 1)), t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

int64_t fl_translation_epoch(fl_translation_data *d, int epoch)
{
    if (!d || epoch < 0) return fl__err(FL_EINVAL, "fl_translation_epoch: data is NULL or epoch %d < 0", epoch);
    stop_pass(d); /* its threads read the plan replaced here */
    const fl_translation_opts *o = &d->o;
    info *in = malloc((size_t)(d->n ? d->n : 1) * sizeof *in);
    int64_t *order = malloc((size_t)(d->n ? d->n : 1) * sizeof *order);
    int64_t *start = malloc((size_t)(d->n + 2) * sizeof *start), *bat = malloc((size_t)(d->n + 2) * sizeof *bat);
    if (!in || !order || !start || !bat) {
        free(in), free(order), free(start), free(bat);
        return fl__err(FL_ENOMEM, "translation batches: out of memory");
    }
    fl_rng r = {fl__hash_u64(o->seed * 0x9e3779b97f4a7c15ULL + (uint64_t)epoch + 1)};
    int64_t perm_n = d->n;
    int64_t *perm = order; /* the pairs in the epoch's order, then cut into batches */
    for (int64_t i = 0; i < d->n; i++) perm[i] = i;
    if (!strcmp(o->sort_type, "global")) {
        for (int64_t i = 0; i < d->n; i++) in[i] = (info){i, max_len_of(d, i), i};
        qsort(in, (size_t)d->n, sizeof *in, cmp_up);
        for (int64_t i = 0; i < d->n; i++) perm[i] = in[i].i;
    } else {
        if (o->shuffle) shuffle_i64(perm, d->n, &r);
        if (!strcmp(o->sort_type, "pool")) {
            int reverse = 1;
            for (int64_t s = 0; s < d->n; s += o->pool_size) {
                reverse = !reverse; /* short next to short: the pools alternate */
                int64_t e = s + o->pool_size < d->n ? s + o->pool_size : d->n;
                for (int64_t i = s; i < e; i++) in[i - s] = (info){perm[i], max_len_of(d, perm[i]), i};
                qsort(in, (size_t)(e - s), sizeof *in, reverse ? cmp_down : cmp_up);
                for (int64_t i = s; i < e; i++) perm[i] = in[i - s].i;
            }
        }
    }
    /* cut: the benchmark's MinMaxFilter over a token (or sentence) batch creator */
    int64_t nb = 0, w = 0, cur_max = 0, cur_n = 0;
    start[0] = 0;
    for (int64_t k = 0; k < perm_n; k++) {
        int64_t i = perm[k], ml = max_len_of(d, i);
        int64_t mn = d->src_len[i] < d->trg_len[i] ? d->src_len[i] : d->trg_len[i];
        if (ml > o->max_length || mn < o->min_length) continue;
        int64_t m = ml > cur_max ? ml : cur_max;
        int full = o->use_token_batch ? m * (cur_n + 1) > o->batch_size : cur_n + 1 > o->batch_size;
        if (full && cur_n) {
            start[++nb] = w;
            cur_max = 0, cur_n = 0;
            m = ml;
        }
        order[w++] = i; /* w <= k: writing behind the reading position */
        cur_max = m, cur_n++;
    }
    if (cur_n) start[++nb] = w;
    /* shuffle the batch order, then deal batches to ranks; every rank gets the same count
     * (collective training steps together), the remainder is dropped */
    for (int64_t b = 0; b < nb; b++) bat[b] = b;
    if (o->shuffle_batch) shuffle_i64(bat, nb, &r);
    int64_t per = nb / o->nranks;
    if (!per && nb) per = 1; /* fewer batches than ranks: each rank repeats one */
    free(d->order), free(d->bstart);
    d->order = malloc((size_t)(w ? w : 1) * sizeof *d->order);
    d->bstart = malloc((size_t)(per + 1) * sizeof *d->bstart);
    if (!d->order || !d->bstart) {
        free(in), free(order), free(start), free(bat);
        d->nbatch = 0;
        return fl__err(FL_ENOMEM, "translation batches: out of memory");
    }
    int64_t pos = 0;
    d->bstart[0] = 0;
    for (int64_t k = 0; k < per; k++) {
        int64_t b = bat[(k * o->nranks + o->rank) % nb];
        for (int64_t j = start[b]; j < start[b + 1]; j++) d->order[pos++] = order[j];
        d->bstart[k + 1] = pos;
    }
    d->nbatch = per;
    free(in), free(order), free(start), free(bat);
    return per;
}

/* ---- batches ----------------------------------------------------------------------------- */

fl_translation_batch *fl_translation_batch_create(void)
{
    fl_translation_batch *b = calloc(1, sizeof *b);
    if (!b) {
        fl__err(FL_ENOMEM, "translation batch: out of memory");
        return NULL;
    }
    for (int i = 0; i < FL_MODEL_TRANSFORMER_FEEDS; i++)
        if (!(b->t[i] = fl_tensor_create((i == 2 || (i >= 5 && i != 7)) ? FL_FLOAT32 : FL_INT64, 1,
                                         (const int64_t[]){1}))) {
            fl_translation_batch_free(b);
            return NULL;
        }
    return b;
}

void fl_translation_batch_free(fl_translation_batch *b)
{
    if (!b) return;
    for (int i = 0; i < FL_MODEL_TRANSFORMER_FEEDS; i++) fl_tensor_free(b->t[i]);
    free(b);
}

const fl_tensor *fl_translation_batch_tensor(const fl_translation_batch *b, int i)
{
    if (b && i >= 0 && i < FL_MODEL_TRANSFORMER_FEEDS) return b->t[i];
    fl__err(FL_EINVAL, "fl_translation_batch_tensor: batch is NULL or input %d out of range", i);
    return NULL;
}

const char *fl_translation_batch_name(int i) { return i >= 0 && i < FL_MODEL_TRANSFORMER_FEEDS ? feed_names[i] : NULL; }

int fl_translation_batch_counts(const fl_translation_batch *b, int64_t *sentences, int64_t *tokens)
{
    if (!b) return fl__err(FL_EINVAL, "fl_translation_batch_counts: batch is NULL");
    if (sentences) *sentences = b->sentences;
    if (tokens) *tokens = b->tokens;
    return FL_OK;
}

int fl_translation_batch_fill(const fl_translation_data *d, int64_t k, fl_translation_batch *b)
{
    if (!d || !b) return fl__err(FL_EINVAL, "fl_translation_batch_fill: data or batch is NULL");
    if (k < 0 || k >= d->nbatch)
        return fl__err(FL_EINVAL,
                       "fl_translation_batch_fill: batch %lld out of range [0, %lld) (call fl_translation_epoch)",
                       (long long)k, (long long)d->nbatch);
    const int64_t *idx = d->order + d->bstart[k];
    const int64_t B = d->bstart[k + 1] - d->bstart[k], H = d->o.n_head;
    const int64_t **src = malloc((size_t)B * sizeof *src);
    int *slen = malloc((size_t)B * sizeof *slen);
    if (!src || !slen) {
        free(src), free(slen);
        return fl__err(FL_ENOMEM, "translation batch: out of memory");
    }
    int64_t T = 1;
    for (int64_t i = 0; i < B; i++) {
        src[i] = d->ids + d->src_off[idx[i]];
        slen[i] = d->src_len[idx[i]];
        T = d->trg_len[idx[i]] - 1 > T ? d->trg_len[idx[i]] - 1 : T;
    }
    int st = fl__tr_src_feeds(src, slen, B, H, d->eos, b->t[0], b->t[1], b->t[2]);
    const int64_t S = fl_tensor_dim(b->t[0], 1);
    if (st == FL_OK) st = fl_tensor_resize(b->t[3], FL_INT64, 3, (const int64_t[]){B, T, 1});
    if (st == FL_OK) st = fl_tensor_resize(b->t[4], FL_INT64, 3, (const int64_t[]){B, T, 1});
    if (st == FL_OK) st = fl_tensor_resize(b->t[5], FL_FLOAT32, 4, (const int64_t[]){B, H, T, T});
    if (st == FL_OK) st = fl_tensor_resize(b->t[6], FL_FLOAT32, 4, (const int64_t[]){B, H, T, S});
    if (st == FL_OK) st = fl_tensor_resize(b->t[7], FL_INT64, 2, (const int64_t[]){B * T, 1});
    if (st == FL_OK) st = fl_tensor_resize(b->t[8], FL_FLOAT32, 2, (const int64_t[]){B * T, 1});
    if (st != FL_OK) {
        free(src), free(slen);
        return st;
    }
    int64_t *tw = fl_tensor_i64(b->t[3]), *tp = fl_tensor_i64(b->t[4]), *lw = fl_tensor_i64(b->t[7]);
    float *wt = fl_tensor_f32(b->t[8]);
    b->tokens = 0;
    for (int64_t i = 0; i < B; i++) {
        const int64_t *t = d->ids + d->trg_off[idx[i]];
        int64_t n = d->trg_len[idx[i]] - 1; /* decoder input <s> w..., label w... <e> */
        for (int64_t j = 0; j < T; j++) {
            tw[i * T + j] = j < n ? t[j] : d->eos;
            tp[i * T + j] = j < n ? j : 0;
            lw[i * T + j] = j < n ? t[j + 1] : d->eos;
            wt[i * T + j] = j < n ? 1.0f : 0.0f;
        }
        b->tokens += n;
    }
    fl__tr_causal_bias(fl_tensor_f32(b->t[5]), B, H, T);
    fl__tr_key_bias(fl_tensor_f32(b->t[6]), B, H, T, S, slen);
    free(src), free(slen);
    b->sentences = B;
    return FL_OK;
}

/* ---- the threaded pass ------------------------------------------------------------------- */

static void stop_pass(fl_translation_data *d)
{
    tr_pass *p = &d->ps;
    if (!p->running) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nth; i++) pthread_join(p->th[i], NULL);
    for (int i = 0; i < p->nslot; i++) fl_translation_batch_free(p->slot[i]);
    free(p->slot), free(p->ready), free(p->st), free(p->err);
    p->slot = NULL, p->ready = p->st = NULL, p->err = NULL;
    p->nslot = p->nth = p->stop = p->running = 0;
}

/* A reader thread: claims the next batch while the ring has room, fills its slot. */
static void *pass_worker(void *arg)
{
    fl_translation_data *d = arg;
    tr_pass *p = &d->ps;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->claim < d->nbatch && p->claim >= p->next + p->nslot) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop || p->claim >= d->nbatch) break;
        int64_t k = p->claim++;
        int s = (int)(k % p->nslot);
        pthread_mutex_unlock(&p->mu);
        /* the slot is free: its previous batch (k - nslot) was handed out */
        int st = fl_translation_batch_fill(d, k, p->slot[s]);
        pthread_mutex_lock(&p->mu);
        p->st[s] = st;
        if (st != FL_OK) snprintf(p->err[s], sizeof p->err[s], "%s", fl_last_error());
        p->ready[s] = 1;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int64_t fl_translation_begin(fl_translation_data *d, int epoch)
{
    if (!d || epoch < 0) return fl__err(FL_EINVAL, "fl_translation_begin: data is NULL or epoch %d < 0", epoch);
    int64_t nb = fl_translation_epoch(d, epoch); /* ends the pass in progress */
    if (nb < 0) return nb;
    tr_pass *p = &d->ps;
    p->nslot = 2 * d->o.threads;
    p->slot = calloc((size_t)p->nslot, sizeof *p->slot);
    p->ready = calloc((size_t)p->nslot, sizeof *p->ready);
    p->st = calloc((size_t)p->nslot, sizeof *p->st);
    p->err = calloc((size_t)p->nslot, sizeof *p->err);
    p->running = 1;
    int st = p->slot && p->ready && p->st && p->err ? FL_OK : fl__err(FL_ENOMEM, "translation pass: out of memory");
    for (int i = 0; st == FL_OK && i < p->nslot; i++)
        if (!(p->slot[i] = fl_translation_batch_create())) st = fl_last_status();
    p->claim = p->next = 0;
    for (int t = 0; st == FL_OK && t < d->o.threads; t++) {
        if (pthread_create(&p->th[t], NULL, pass_worker, d)) {
            st = fl__err(FL_EIO, "fl_translation_begin: cannot start reader thread %d", t);
            break;
        }
        p->nth = t + 1;
    }
    if (st != FL_OK) {
        if (!p->slot) p->nslot = 0;
        stop_pass(d);
        return st;
    }
    return nb;
}

int fl_translation_next(fl_translation_data *d, fl_translation_batch *b)
{
    if (!d || !b) return fl__err(FL_EINVAL, "fl_translation_next: data or batch is NULL");
    tr_pass *p = &d->ps;
    if (!p->running) return fl__err(FL_ESTATE, "fl_translation_next: no pass (call fl_translation_begin)");
    if (p->next >= d->nbatch) return 0;
    const int s = (int)(p->next % p->nslot);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += WAIT_S;
    pthread_mutex_lock(&p->mu);
    int w = 0;
    while (!p->ready[s] && w != ETIMEDOUT) w = pthread_cond_timedwait(&p->cv, &p->mu, &dl);
    int ready = p->ready[s], st = p->st[s];
    char err[256];
    snprintf(err, sizeof err, "%s", p->err[s]);
    if (ready && st == FL_OK) {
        /* hand the slot's tensors over; the caller's old ones are refilled later */
        fl_translation_batch tmp = *b;
        *b = *p->slot[s];
        *p->slot[s] = tmp;
        p->ready[s] = 0;
        p->next++;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    if (!ready)
        return fl__err(FL_ETIMEDOUT, "translation reader: batch %lld not prepared in %d s", (long long)p->next, WAIT_S);
    if (st != FL_OK) return fl__err(st, "translation reader: batch %lld: %s", (long long)p->next, err);
    return 1;
}
