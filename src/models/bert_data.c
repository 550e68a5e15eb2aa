/*
 * bert_data.c - the BERT pre-training reader (see fleet/models.h): Paddle's demo format
 * (`token_ids;sent_ids;pos_ids;label` lines, gzip or plain), negative pairs mixed in and
 * 15% of the tokens masked as Paddle's reader/pretraining.py does, batches padded to their
 * longest line and prepared by worker threads.  Every random draw depends only on (seed,
 * epoch) for the order and (seed, epoch, batch index) for the masks, so a pass is the same
 * whatever the number of threads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "fleet/models.h"
#include "../base/base_internal.h"

#define BERT_MAX_THREADS 32
#define BERT_BUFFER 1000 /* Paddle's mixin buffer of positive samples */
#define BERT_WAIT_S 600  /* a batch not prepared in this long is an error */

typedef struct {
    int64_t *tok; /* token ids, then sent ids, then pos ids: 3 * len */
    int len, label;
} bert_rec;

typedef struct {
    fl_tensor *t[7];
    int examples, masked;
    int64_t tokens;
    int ready, st;
} bert_slot;

struct fl_model_bert_reader {
    fl_model_bert_reader_opts o;
    bert_rec *recs; /* positives as read, then the negatives of the pass */
    int64_t nrec, cap, npos;
    /* the pass */
    int64_t *order; /* examples of the pass (indices into recs) */
    int64_t norder;
    int64_t *bstart; /* batch b: order[bstart[b], bstart[b + 1]) */
    int64_t nbatch, mine_next, claim;
    uint64_t pass_seed;
    bert_slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th[BERT_MAX_THREADS];
    int nth, stop;
    char err[512];
};

fl_model_bert_reader_opts fl_model_bert_reader_default(void)
{
    fl_model_bert_reader_opts o;
    memset(&o, 0, sizeof o);
    o.max_seq_len = 512;
    o.batch_size = 32;
    o.generate_neg_sample = 1;
    o.threads = 1;
    o.seed = 1;
    o.vocab_size = 21128;
    o.pad_id = 0, o.cls_id = 1, o.sep_id = 2, o.mask_id = 3;
    o.nranks = 1;
    return o;
}

/* ---- parsing --------------------------------------------------------------------------- */

static int parse_ids(const char *s, const char *end, int64_t *out, int max, int *n, const char *what, const char *file,
                     int64_t line)
{
    int k = 0;
    while (s < end) {
        while (s < end && (*s == ' ' || *s == '\t')) s++;
        if (s >= end) break;
        char *e;
        errno = 0;
        long long v = strtoll(s, &e, 10);
        if (e == s || errno || v < 0 || (e < end && *e != ' ' && *e != '\t'))
            return fl__err(FL_ECORRUPT, "%s:%lld: field %s: '%.*s' is not a non-negative integer", file, (long long)line,
                           what, (int)(strcspn(s, " ;") < 24 ? strcspn(s, " ;") : 24), s);
        if (k >= max)
            return fl__err(FL_ECORRUPT, "%s:%lld: field %s has more than %d ids", file, (long long)line, what, max);
        out[k++] = v;
        s = e;
    }
    *n = k;
    return FL_OK;
}

/* One line into r (NULL: skipped for its length).  Returns FL_OK or FL_ECORRUPT "FILE:LINE". */
static int parse_line(fl_model_bert_reader *r, char *s, size_t len, const char *file, int64_t line, int64_t *scratch,
                      int smax)
{
    while (len && (s[len - 1] == '\n' || s[len - 1] == '\r')) s[--len] = 0;
    const char *f[4];
    const char *end[4];
    int nf = 0;
    const char *p = s;
    for (;;) {
        const char *q = memchr(p, ';', (size_t)(s + len - p));
        if (nf < 4) f[nf] = p, end[nf] = q ? q : s + len;
        nf++;
        if (!q) break;
        p = q + 1;
    }
    if (nf != 4)
        return fl__err(FL_ECORRUPT, "%s:%lld: expected 4 fields token_ids;sent_ids;pos_ids;label, found %d", file,
                       (long long)line, nf);
    static const char *names[3] = {"token_ids", "sent_ids", "pos_ids"};
    int n[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++)
        FL_CHECK(parse_ids(f[k], end[k], scratch + (int64_t)k * smax, smax, &n[k], names[k], file, line));
    if (n[0] < 2 || n[0] != n[1] || n[0] != n[2])
        return fl__err(FL_ECORRUPT, "%s:%lld: token_ids, sent_ids and pos_ids must have one equal length >= 2 (%d, %d, %d)",
                       file, (long long)line, n[0], n[1], n[2]);
    int lab, nl = 0;
    int64_t lv[2];
    FL_CHECK(parse_ids(f[3], end[3], lv, 2, &nl, "label", file, line));
    if (nl != 1 || lv[0] > 1) return fl__err(FL_ECORRUPT, "%s:%lld: label must be 0 or 1", file, (long long)line);
    lab = (int)lv[0];
    const fl_model_bert_reader_opts *o = &r->o;
    for (int i = 0; i < n[0]; i++) {
        if (scratch[i] >= o->vocab_size)
            return fl__err(FL_ECORRUPT, "%s:%lld: token id %lld at position %d is not below vocab_size %lld", file,
                           (long long)line, (long long)scratch[i], i, (long long)o->vocab_size);
        if (scratch[smax + i] > 1)
            return fl__err(FL_ECORRUPT, "%s:%lld: sent id %lld at position %d is not 0 or 1", file, (long long)line,
                           (long long)scratch[smax + i], i);
    }
    if (n[0] > o->max_seq_len) return FL_OK; /* Paddle's reader skips longer lines */
    if (o->generate_neg_sample && lab != 1)
        return fl__err(FL_ECORRUPT, "%s:%lld: label %d: with generate_neg_sample every line must be a true pair (1)", file,
                       (long long)line, lab);
    if (r->nrec == r->cap) {
        int64_t nc = r->cap ? 2 * r->cap : 1024;
        bert_rec *nr = realloc(r->recs, (size_t)nc * sizeof *nr);
        if (!nr) return fl__err(FL_ENOMEM, "bert reader: out of memory");
        r->recs = nr, r->cap = nc;
    }
    bert_rec *rec = &r->recs[r->nrec];
    rec->tok = malloc((size_t)n[0] * 3 * sizeof *rec->tok);
    if (!rec->tok) return fl__err(FL_ENOMEM, "bert reader: out of memory");
    for (int k = 0; k < 3; k++)
        memcpy(rec->tok + (int64_t)k * n[0], scratch + (int64_t)k * smax, (size_t)n[0] * sizeof(int64_t));
    rec->len = n[0], rec->label = lab;
    r->nrec++;
    return FL_OK;
}

static int read_file(fl_model_bert_reader *r, const char *path)
{
    gzFile g = gzopen(path, "rb");
    if (!g) return fl__err(FL_EIO, "bert reader: cannot open '%s': %s", path, strerror(errno ? errno : ENOENT));
    const int smax = 1 << 16;
    int64_t *scratch = malloc((size_t)smax * 3 * sizeof *scratch);
    size_t cap = 1 << 16;
    char *buf = malloc(cap);
    int st = scratch && buf ? FL_OK : fl__err(FL_ENOMEM, "bert reader: out of memory");
    int64_t line = 0;
    while (st == FL_OK) {
        size_t len = 0;
        int eof = 0;
        for (;;) { /* one whole line, however long */
            if (!gzgets(g, buf + len, (int)(cap - len))) {
                eof = 1;
                break;
            }
            len += strlen(buf + len);
            if (len && buf[len - 1] == '\n') break;
            if (len + 1 < cap) continue; /* a last line without newline: gzgets ends next call */
            char *nb = cap < ((size_t)1 << 30) ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                st = fl__err(FL_ECORRUPT, "%s:%lld: line longer than 1 GiB", path, (long long)line + 1);
                break;
            }
            buf = nb, cap *= 2;
        }
        if (st != FL_OK) break;
        int gerr;
        const char *gmsg = gzerror(g, &gerr);
        if (gerr != Z_OK && gerr != Z_STREAM_END) {
            st = fl__err(FL_ECORRUPT, "%s:%lld: gzip error: %s", path, (long long)line + 1, gmsg);
            break;
        }
        if (eof && len == 0) break;
        line++;
        size_t l = len;
        while (l && (buf[l - 1] == '\n' || buf[l - 1] == '\r' || buf[l - 1] == ' ')) l--;
        if (l == 0) {
            st = fl__err(FL_ECORRUPT, "%s:%lld: empty line", path, (long long)line);
            break;
        }
        buf[l] = 0;
        st = parse_line(r, buf, l, path, line, scratch, smax);
        if (eof) break;
    }
    gzclose(g);
    free(buf);
    free(scratch);
    return st;
}

int fl_model_bert_reader_create(const char *const *files, int nfiles, const fl_model_bert_reader_opts *opts,
                                fl_model_bert_reader **out)
{
    const char *E = "fl_model_bert_reader_create";
    if (out) *out = NULL;
    if (!files || nfiles < 1 || !out) return fl__err(FL_EINVAL, "%s: files (nfiles >= 1) and out are required", E);
    fl_model_bert_reader_opts o = opts ? *opts : fl_model_bert_reader_default();
    if (o.max_seq_len < 3) return fl__err(FL_EINVAL, "%s: max_seq_len must be >= 3, got %d", E, o.max_seq_len);
    if (o.batch_size < 1) return fl__err(FL_EINVAL, "%s: batch_size must be >= 1, got %d", E, o.batch_size);
    if (o.in_tokens && o.batch_size < o.max_seq_len)
        return fl__err(FL_EINVAL, "%s: batch_size %d in tokens is below max_seq_len %d", E, o.batch_size, o.max_seq_len);
    if (o.threads < 1 || o.threads > BERT_MAX_THREADS)
        return fl__err(FL_EINVAL, "%s: threads must be in [1, %d], got %d", E, BERT_MAX_THREADS, o.threads);
    if (o.nranks < 1 || o.rank < 0 || o.rank >= o.nranks)
        return fl__err(FL_EINVAL, "%s: rank %d must be in [0, nranks %d)", E, o.rank, o.nranks);
    int64_t ids[4] = {o.pad_id, o.cls_id, o.sep_id, o.mask_id};
    for (int i = 0; i < 4; i++)
        if (ids[i] < 0 || ids[i] >= o.vocab_size)
            return fl__err(FL_EINVAL, "%s: pad_id, cls_id, sep_id and mask_id must be in [0, vocab_size %lld)", E,
                           (long long)o.vocab_size);
    fl_model_bert_reader *r = calloc(1, sizeof *r);
    if (!r) return fl__err(FL_ENOMEM, "%s: out of memory", E);
    r->o = o;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    int st = FL_OK;
    for (int i = 0; i < nfiles && st == FL_OK; i++) {
        if (!files[i]) st = fl__err(FL_EINVAL, "%s: files[%d] is NULL", E, i);
        else st = read_file(r, files[i]);
    }
    for (int64_t i = 0; i < r->nrec && st == FL_OK && o.generate_neg_sample; i++) {
        const bert_rec *c = &r->recs[i];
        int has = 0;
        for (int k = 0; k < c->len && !has; k++) has = c->tok[k] == o.sep_id;
        if (!has)
            st = fl__err(FL_ECORRUPT, "%s: example %lld has no sep_id %lld to split its pair at", E, (long long)i,
                         (long long)o.sep_id);
    }
    if (st == FL_OK && r->nrec == 0)
        st = fl__err(FL_EINVAL, "%s: no line of at most max_seq_len %d tokens", E, o.max_seq_len);
    r->npos = r->nrec;
    if (st != FL_OK) {
        fl_model_bert_reader_free(r);
        return st;
    }
    *out = r;
    return FL_OK;
}

int64_t fl_model_bert_reader_num_lines(const fl_model_bert_reader *r)
{
    if (!r) return fl__err(FL_EINVAL, "fl_model_bert_reader_num_lines: reader is NULL");
    return r->npos;
}

static void stop_pass(fl_model_bert_reader *r)
{
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < r->nth; i++) pthread_join(r->th[i], NULL);
    r->nth = 0;
    r->stop = 0;
    for (int64_t b = 0; r->slots && b < r->nbatch; b++)
        for (int k = 0; k < 7; k++) fl_tensor_free(r->slots[b].t[k]);
    free(r->slots);
    r->slots = NULL;
    for (int64_t i = r->npos; i < r->nrec; i++) free(r->recs[i].tok);
    r->nrec = r->npos;
    free(r->order);
    free(r->bstart);
    r->order = r->bstart = NULL;
    r->nbatch = r->norder = 0;
}

void fl_model_bert_reader_free(fl_model_bert_reader *r)
{
    if (!r) return;
    stop_pass(r);
    for (int64_t i = 0; i < r->nrec; i++) free(r->recs[i].tok);
    free(r->recs);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static void shuffle(int64_t *a, int64_t n, fl_rng *g)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(fl__rng_next(g) % (uint64_t)(i + 1)), t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

static int find_sep(const bert_rec *c, int64_t sep)
{
    for (int k = 0; k < c->len; k++)
        if (c->tok[k] == sep) return k;
    return -1;
}

/* Paddle's random_pair_neg_samples over pos[0, n) (already shuffled): sentence A of example
 * i (through its first [SEP]) + sentence B of example i + 1, label 0; pairs of max_seq_len
 * tokens or more are missed.  Appends the negatives to recs and their indices to out. */
static int make_negatives(fl_model_bert_reader *r, const int64_t *pos, int64_t n, int64_t *out, int64_t *nout)
{
    *nout = 0;
    for (int64_t i = 0; i < n && n > 1; i++) {
        const bert_rec *a = &r->recs[pos[i]], *b = &r->recs[pos[(i + 1) % n]];
        int sa = find_sep(a, r->o.sep_id), sb = find_sep(b, r->o.sep_id);
        int left = sa + 1, right = b->len - (sb + 1), len = left + right;
        if (len >= r->o.max_seq_len) continue;
        if (r->nrec == r->cap) {
            int64_t nc = 2 * r->cap;
            bert_rec *nr = realloc(r->recs, (size_t)nc * sizeof *nr);
            if (!nr) return fl__err(FL_ENOMEM, "bert reader: out of memory");
            r->recs = nr, r->cap = nc;
            a = &r->recs[pos[i]], b = &r->recs[pos[(i + 1) % n]];
        }
        bert_rec *c = &r->recs[r->nrec];
        c->tok = malloc((size_t)len * 3 * sizeof *c->tok);
        if (!c->tok) return fl__err(FL_ENOMEM, "bert reader: out of memory");
        memcpy(c->tok, a->tok, (size_t)left * sizeof *c->tok);
        memcpy(c->tok + left, b->tok + sb + 1, (size_t)right * sizeof *c->tok);
        for (int k = 0; k < len; k++) c->tok[len + k] = k < left ? 0 : 1, c->tok[2 * len + k] = k;
        c->len = len, c->label = 0;
        out[(*nout)++] = r->nrec++;
    }
    return FL_OK;
}

/* Paddle's mask(): per token other than [CLS] / [SEP], u uniform: u <= 0.15 is predicted,
 * u in (0.03, 0.15] becomes [MASK], (0.015, 0.03] a random id in [1, vocab_size), below
 * stays; a line with nothing predicted gets one [MASK] at a random inner position. */
static int prepare(fl_model_bert_reader *r, int64_t b, bert_slot *s)
{
    const fl_model_bert_reader_opts *o = &r->o;
    const int64_t *idx = r->order + r->bstart[b];
    const int64_t n = r->bstart[b + 1] - r->bstart[b];
    int64_t S = 0, tokens = 0;
    for (int64_t i = 0; i < n; i++) {
        int l = r->recs[idx[i]].len;
        S = l > S ? l : S;
        tokens += l;
    }
    const int64_t sh3[3] = {n, S, 1}, sh2[2] = {n, 1};
    for (int k = 0; k < 4; k++) s->t[k] = fl_tensor_create(k == 3 ? FL_FLOAT32 : FL_INT64, 3, sh3);
    s->t[6] = fl_tensor_create(FL_INT64, 2, sh2);
    int64_t *lab = malloc((size_t)tokens * sizeof *lab), *pos = malloc((size_t)tokens * sizeof *pos);
    if (!s->t[0] || !s->t[1] || !s->t[2] || !s->t[3] || !s->t[6] || !lab || !pos) {
        free(lab);
        free(pos);
        return fl__err(FL_ENOMEM, "bert reader: out of memory");
    }
    int64_t *src = fl_tensor_data(s->t[0]), *pid = fl_tensor_data(s->t[1]), *sid = fl_tensor_data(s->t[2]);
    float *im = fl_tensor_data(s->t[3]);
    int64_t *labels = fl_tensor_data(s->t[6]);
    fl_rng g = {fl__hash_u64(r->pass_seed ^ fl__hash_u64((uint64_t)b + 0x51ed27))};
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        const bert_rec *c = &r->recs[idx[i]];
        labels[i] = c->label;
        int flag = 0;
        for (int64_t j = 0; j < S; j++) {
            int64_t at = i * S + j;
            if (j >= c->len) {
                src[at] = pid[at] = sid[at] = o->pad_id, im[at] = 0;
                continue;
            }
            int64_t t = c->tok[j];
            sid[at] = c->tok[c->len + j], pid[at] = c->tok[2 * c->len + j], im[at] = 1;
            float u = fl__rng_uniform(&g);
            int64_t rep = 1 + (int64_t)(fl__rng_next(&g) % (uint64_t)(o->vocab_size - 1));
            src[at] = t;
            if (u > 0.15f || t == o->cls_id || t == o->sep_id) continue;
            lab[m] = t, pos[m++] = at, flag = 1;
            if (u > 0.03f) src[at] = o->mask_id;
            else if (u > 0.015f) src[at] = rep;
        }
        int inner = 0;
        for (int j = 1; j + 1 < c->len; j++) inner += c->tok[j] != o->cls_id && c->tok[j] != o->sep_id;
        while (!flag && inner) {
            int j = 1 + (int)(fl__rng_next(&g) % (uint64_t)(c->len - 2));
            if (c->tok[j] == o->cls_id || c->tok[j] == o->sep_id) continue;
            lab[m] = c->tok[j], pos[m++] = i * S + j, flag = 1;
            src[i * S + j] = o->mask_id;
        }
    }
    const int64_t shm[2] = {m, 1};
    s->t[4] = fl_tensor_from_data(FL_INT64, 2, shm, lab);
    s->t[5] = fl_tensor_from_data(FL_INT64, 2, shm, pos);
    free(lab);
    free(pos);
    if (!s->t[4] || !s->t[5]) return fl__err(FL_ENOMEM, "bert reader: out of memory");
    s->examples = (int)n, s->masked = (int)m, s->tokens = tokens;
    return FL_OK;
}

/* The batches this rank prepares: b = rank, rank + nranks, ... */
static void *worker(void *arg)
{
    fl_model_bert_reader *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        /* at most 2 batches per thread ahead of the consumer */
        while (!r->stop && r->claim < r->nbatch && r->claim >= r->mine_next + 2 * r->o.threads * r->o.nranks)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop || r->claim >= r->nbatch) {
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        int64_t b = r->claim;
        r->claim += r->o.nranks;
        pthread_mutex_unlock(&r->mu);
        bert_slot tmp;
        memset(&tmp, 0, sizeof tmp);
        int st = prepare(r, b, &tmp);
        pthread_mutex_lock(&r->mu);
        r->slots[b] = tmp;
        r->slots[b].st = st;
        r->slots[b].ready = 1;
        if (st != FL_OK && !r->err[0]) snprintf(r->err, sizeof r->err, "%s", fl_last_error());
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
}

int fl_model_bert_reader_begin(fl_model_bert_reader *r, int epoch)
{
    if (!r || epoch < 0) return fl__err(FL_EINVAL, "fl_model_bert_reader_begin: reader is NULL or epoch %d < 0", epoch);
    stop_pass(r);
    const fl_model_bert_reader_opts *o = &r->o;
    r->pass_seed = fl__hash_u64(o->seed * 0x9e3779b97f4a7c15ULL + (uint64_t)epoch + 1);
    fl_rng g = {r->pass_seed};
    int64_t np = r->npos, total = o->generate_neg_sample ? 2 * np : np;
    int64_t *pos = malloc((size_t)(np ? np : 1) * sizeof *pos);
    r->order = malloc((size_t)(total ? total : 1) * sizeof *r->order);
    r->bstart = malloc((size_t)(total + 2) * sizeof *r->bstart);
    if (!pos || !r->order || !r->bstart) {
        free(pos);
        return fl__err(FL_ENOMEM, "fl_model_bert_reader_begin: out of memory");
    }
    for (int64_t i = 0; i < np; i++) pos[i] = i;
    /* Paddle: buffers of 1000 positives (file order), each shuffled, its negatives made,
     * positives and negatives shuffled together */
    int st = FL_OK;
    for (int64_t at = 0; at < np && st == FL_OK; at += BERT_BUFFER) {
        int64_t n = np - at < BERT_BUFFER ? np - at : BERT_BUFFER, nn = 0;
        int64_t *chunk = r->order + r->norder;
        memcpy(chunk, pos + at, (size_t)n * sizeof *chunk);
        if (o->generate_neg_sample) {
            shuffle(chunk, n, &g);
            st = make_negatives(r, chunk, n, chunk + n, &nn);
        }
        if (o->shuffle || o->generate_neg_sample) shuffle(chunk, n + nn, &g);
        r->norder += n + nn;
    }
    free(pos);
    if (st != FL_OK) return st;
    /* batches: batch_size examples, or (in_tokens) as many as fit batch_size padded tokens */
    int64_t nb = 0, i = 0;
    while (i < r->norder) {
        r->bstart[nb++] = i;
        int64_t cnt = 0, mx = 0;
        while (i < r->norder) {
            int64_t l = r->recs[r->order[i]].len, m2 = l > mx ? l : mx;
            if (o->in_tokens ? cnt && (cnt + 1) * m2 > o->batch_size : cnt == o->batch_size) break;
            mx = m2, cnt++, i++;
        }
    }
    r->bstart[nb] = r->norder;
    r->nbatch = nb;
    r->slots = calloc((size_t)(nb ? nb : 1), sizeof *r->slots);
    if (!r->slots) return fl__err(FL_ENOMEM, "fl_model_bert_reader_begin: out of memory");
    r->claim = r->mine_next = o->rank;
    r->err[0] = 0;
    int nth = o->threads;
    for (int t = 0; t < nth; t++) {
        if (pthread_create(&r->th[t], NULL, worker, r)) {
            stop_pass(r);
            return fl__err(FL_EIO, "fl_model_bert_reader_begin: cannot start thread %d", t);
        }
        r->nth = t + 1;
    }
    return FL_OK;
}

int64_t fl_model_bert_reader_num_batches(const fl_model_bert_reader *r)
{
    if (!r) return fl__err(FL_EINVAL, "fl_model_bert_reader_num_batches: reader is NULL");
    return r->nbatch > r->o.rank ? (r->nbatch - r->o.rank + r->o.nranks - 1) / r->o.nranks : 0;
}

int64_t fl_model_bert_reader_total_batches(const fl_model_bert_reader *r)
{
    if (!r) return fl__err(FL_EINVAL, "fl_model_bert_reader_total_batches: reader is NULL");
    return r->nbatch;
}

void fl_model_bert_batch_clear(fl_model_bert_batch *b)
{
    if (!b) return;
    for (int k = 0; k < 7; k++) fl_tensor_free(b->t[k]);
    memset(b, 0, sizeof *b);
}

int fl_model_bert_reader_next(fl_model_bert_reader *r, fl_model_bert_batch *b)
{
    if (!r || !b) return fl__err(FL_EINVAL, "fl_model_bert_reader_next: reader or batch is NULL");
    fl_model_bert_batch_clear(b);
    if (!r->slots) return fl__err(FL_ESTATE, "fl_model_bert_reader_next: no pass (call fl_model_bert_reader_begin)");
    if (r->mine_next >= r->nbatch) return 0;
    int64_t k = r->mine_next;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += BERT_WAIT_S;
    pthread_mutex_lock(&r->mu);
    int w = 0;
    while (!r->slots[k].ready && w != ETIMEDOUT) w = pthread_cond_timedwait(&r->cv, &r->mu, &dl);
    bert_slot s = r->slots[k];
    memset(&r->slots[k], 0, sizeof r->slots[k]);
    if (s.ready) r->mine_next += r->o.nranks;
    pthread_cond_broadcast(&r->cv);
    char err[512];
    snprintf(err, sizeof err, "%s", r->err);
    pthread_mutex_unlock(&r->mu);
    if (!s.ready) return fl__err(FL_ETIMEDOUT, "bert reader: batch %lld not prepared in %d s", (long long)k, BERT_WAIT_S);
    if (s.st != FL_OK) {
        for (int j = 0; j < 7; j++) fl_tensor_free(s.t[j]);
        return fl__err(s.st, "%s", err);
    }
    static const char *names[7] = {"src_ids", "pos_ids", "sent_ids", "input_mask", "mask_label", "mask_pos", "labels"};
    for (int j = 0; j < 7; j++) b->t[j] = s.t[j], b->feed[j].name = names[j], b->feed[j].value = s.t[j];
    b->examples = s.examples, b->masked = s.masked, b->tokens = s.tokens;
    return 1;
}
