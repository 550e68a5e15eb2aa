/*
 * word2vec_data.c - word2vec's reader (see fleet/models.h): the vocabulary of a dict file
 * and the skip-gram training pairs of a corpus with the original word2vec's subsampling,
 * random window and count^0.75 negative sampling.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base_internal.h"
#include "models_internal.h"

struct fl_model_word2vec_vocab {
    fl_strmap ids;
    int64_t n;
    int64_t *count;
    int64_t total;
};

#define MAX_WORD 256
#define NEG_TABLE 1000000 /* entries of the unigram^0.75 table (the original uses 1e8) */

void fl_model_word2vec_vocab_free(fl_model_word2vec_vocab *v)
{
    if (!v) return;
    fl__strmap_free(&v->ids);
    free(v->count);
    free(v);
}

int64_t fl_model_word2vec_vocab_size(const fl_model_word2vec_vocab *v)
{
    return v ? v->n : fl__err(FL_EINVAL, "fl_model_word2vec_vocab_size: vocabulary is NULL");
}

int64_t fl_model_word2vec_vocab_id(const fl_model_word2vec_vocab *v, const char *word, size_t len)
{
    if (!v || !word) return fl__err(FL_EINVAL, "fl_model_word2vec_vocab_id: %s is NULL", v ? "word" : "vocabulary");
    if (len == 0 || len >= MAX_WORD) return -1;
    char w[MAX_WORD];
    memcpy(w, word, len);
    w[len] = 0;
    int64_t id;
    return fl__strmap_get(&v->ids, w, &id) ? id : -1;
}

int fl_model_word2vec_vocab_load(const char *path, fl_model_word2vec_vocab **out)
{
    if (!path || !out) return fl__err(FL_EINVAL, "fl_model_word2vec_vocab_load: path or out is NULL");
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return fl__err(FL_EIO, "word2vec dict '%s': %s", path, strerror(errno));
    fl_model_word2vec_vocab *v = calloc(1, sizeof *v);
    int64_t cap = 0, line = 0;
    char buf[1024];
    int st = v ? FL_OK : fl__err(FL_ENOMEM, "word2vec dict: out of memory");
    while (st == FL_OK && fgets(buf, sizeof buf, f)) {
        line++;
        char word[MAX_WORD], extra[2];
        long long c;
        int k = sscanf(buf, "%255s %lld %1s", word, &c, extra);
        if (k != 2 || c < 1) {
            st = fl__err(FL_ECORRUPT, "%s:%lld: expected 'word count' with count >= 1", path, (long long)line);
            break;
        }
        if (v->n && c > v->count[v->n - 1]) {
            st = fl__err(FL_ECORRUPT, "%s:%lld: counts must not increase (word ids are ranks by count)", path,
                         (long long)line);
            break;
        }
        int64_t dup;
        if (fl__strmap_get(&v->ids, word, &dup)) {
            st = fl__err(FL_ECORRUPT, "%s:%lld: word '%s' repeated (first on line %lld)", path, (long long)line, word,
                         (long long)dup + 1);
            break;
        }
        if (v->n == cap) {
            cap = cap ? 2 * cap : 1024;
            int64_t *nc = realloc(v->count, (size_t)cap * sizeof *nc);
            if (!nc) {
                st = fl__err(FL_ENOMEM, "word2vec dict: out of memory");
                break;
            }
            v->count = nc;
        }
        if ((st = fl__strmap_put(&v->ids, word, v->n)) != FL_OK) break;
        v->count[v->n++] = c;
        v->total += c;
    }
    if (st == FL_OK && ferror(f)) st = fl__err(FL_EIO, "word2vec dict '%s': read error", path);
    if (st == FL_OK && !v->n) st = fl__err(FL_ECORRUPT, "word2vec dict '%s' is empty", path);
    fclose(f);
    if (st != FL_OK) {
        fl_model_word2vec_vocab_free(v);
        return st;
    }
    *out = v;
    return FL_OK;
}

fl_model_word2vec_sampling fl_model_word2vec_sampling_default(void)
{
    fl_model_word2vec_sampling s = {5, 1e-3, 5, 1};
    return s;
}

/* Ids of count^0.75 (the original's unigram table, at NEG_TABLE entries). */
static int32_t *neg_table(const fl_model_word2vec_vocab *v)
{
    int32_t *t = malloc(NEG_TABLE * sizeof *t);
    if (!t) return NULL;
    double z = 0;
    for (int64_t i = 0; i < v->n; i++) z += pow((double)v->count[i], 0.75);
    int64_t i = 0;
    double acc = pow((double)v->count[0], 0.75) / z;
    for (int64_t a = 0; a < NEG_TABLE; a++) {
        t[a] = (int32_t)i;
        if ((double)(a + 1) / NEG_TABLE > acc && i + 1 < v->n) acc += pow((double)v->count[++i], 0.75) / z;
    }
    return t;
}

/* One sentence (ids after subsampling) -> pairs written to f. */
static int64_t emit(FILE *f, const int64_t *ids, int64_t n, const fl_model_word2vec_sampling *s, const int32_t *table,
                    fl_rng *g)
{
    int64_t pairs = 0;
    for (int64_t i = 0; i < n; i++) {
        int b = 1 + (int)(fl__rng_next(g) % (uint64_t)s->window); /* the original's reduced window */
        for (int64_t j = i - b; j <= i + b; j++) {
            if (j < 0 || j >= n || j == i) continue;
            fprintf(f, "1 %lld 1 %lld %d", (long long)ids[i], (long long)ids[j], s->neg_num);
            for (int k = 0; k < s->neg_num; k++) {
                int64_t neg;
                do neg = table[fl__rng_next(g) % NEG_TABLE];
                while (neg == ids[j] && table[0] != table[NEG_TABLE - 1]);
                fprintf(f, " %lld", (long long)neg);
            }
            fputc('\n', f);
            pairs++;
        }
    }
    return pairs;
}

int fl_model_word2vec_make_samples(const fl_model_word2vec_vocab *v, const fl_model_word2vec_sampling *s,
                                   const char *corpus, const char *out, int64_t *pairs)
{
    if (!v || !s || !corpus || !out)
        return fl__err(FL_EINVAL, "fl_model_word2vec_make_samples: vocabulary, sampling, corpus or out is NULL");
    if (s->window < 1 || s->neg_num < 1 || s->sample < 0)
        return fl__err(FL_EINVAL, "word2vec sampling: window and neg_num must be >= 1 and sample >= 0 (got %d, %d, %g)",
                       s->window, s->neg_num, s->sample);
    FILE *in = fopen(corpus, "r");
    if (!in) return fl__err(FL_EIO, "word2vec corpus '%s': %s", corpus, strerror(errno));
    size_t tl = strlen(out) + 8;
    char *tmp = malloc(tl);
    int32_t *table = neg_table(v);
    FILE *o = NULL;
    if (tmp) snprintf(tmp, tl, "%s.tmp", out);
    if (tmp) o = fopen(tmp, "w");
    int st = FL_OK;
    if (!tmp || !table) st = fl__err(FL_ENOMEM, "word2vec samples: out of memory");
    else if (!o) st = fl__err(FL_EIO, "word2vec samples '%s': %s", tmp, strerror(errno));
    const char *base = strrchr(corpus, '/') ? strrchr(corpus, '/') + 1 : corpus; /* not the directory */
    fl_rng g = {fl__hash_u64(s->seed ^ fl__hash_bytes(base, strlen(base)))};
    char *line = NULL;
    size_t lcap = 0, icap = 0;
    int64_t *ids = NULL, n_pairs = 0;
    const double thr = s->sample * (double)v->total;
    while (st == FL_OK && getline(&line, &lcap, in) > 0) {
        int64_t n = 0;
        for (char *p = line; *p;) {
            p += strspn(p, " \t\r\n");
            size_t len = strcspn(p, " \t\r\n");
            if (!len) break;
            int64_t id = fl_model_word2vec_vocab_id(v, p, len);
            p += len;
            if (id < 0) continue;
            if (thr > 0) { /* the original's keep probability */
                double f = (double)v->count[id];
                double keep = (sqrt(f / thr) + 1.0) * thr / f;
                if (keep < 1.0 && (double)fl__rng_uniform(&g) > keep) continue;
            }
            if ((size_t)n == icap) {
                icap = icap ? 2 * icap : 256;
                int64_t *ni = realloc(ids, icap * sizeof *ni);
                if (!ni) {
                    st = fl__err(FL_ENOMEM, "word2vec samples: out of memory");
                    break;
                }
                ids = ni;
            }
            ids[n++] = id;
        }
        if (st == FL_OK) n_pairs += emit(o, ids, n, s, table, &g);
    }
    if (st == FL_OK && ferror(in)) st = fl__err(FL_EIO, "word2vec corpus '%s': read error", corpus);
    fclose(in);
    if (o && fclose(o) != 0 && st == FL_OK) st = fl__err(FL_EIO, "word2vec samples '%s': write error", tmp);
    if (st == FL_OK && rename(tmp, out) != 0)
        st = fl__err(FL_EIO, "word2vec samples: rename '%s' to '%s': %s", tmp, out, strerror(errno));
    if (st != FL_OK && tmp) remove(tmp);
    free(line);
    free(ids);
    free(table);
    free(tmp);
    if (st == FL_OK && pairs) *pairs = n_pairs;
    return st;
}
