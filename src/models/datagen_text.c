/*
 * datagen_text.c - the data generators of simnet-bow and word2vec (see fleet/models.h and
 * docs/datagen.md); `fleet-datagen simnet` and `fleet-datagen word2vec` parse options and
 * call these.  The random streams are fleet-datagen's (splitmix64 keyed by a hash of the
 * seed, the split and the row), so every byte follows from the configuration.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base_internal.h"
#include "../io/io_internal.h"
#include "models_internal.h"

#define GOLDEN 0x9e3779b97f4a7c15ULL
#define OUT_BUF (1 << 20)
#define MAX_FILES 99999

static uint64_t fmix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c)
{
    return fmix64(fmix64(fmix64(a + GOLDEN) + b + GOLDEN) + c + GOLDEN);
}
typedef struct {
    uint64_t s;
} rng;
static uint64_t rng_next(rng *g) { return fmix64(g->s += GOLDEN); }
static double rng_unif(rng *g) { return (double)(rng_next(g) >> 11) * 0x1p-53; }

static char *put_int(char *w, long long x)
{
    char tmp[24];
    int n = 0;
    unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
    if (x < 0) *w++ = '-';
    do tmp[n++] = (char)('0' + u % 10), u /= 10;
    while (u);
    while (n) *w++ = tmp[--n];
    return w;
}

/* A file written through NAME.tmp and renamed when complete. */
typedef struct {
    FILE *f;
    char path[4096], tmp[4104];
} out_file;

static int out_open(out_file *o, const char *dir, const char *name)
{
    o->f = NULL;
    int n = snprintf(o->path, sizeof o->path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof o->path) return fl__err(FL_EINVAL, "datagen: path '%s/%s' is too long", dir, name);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp", o->path);
    o->f = fopen(o->tmp, "w");
    return o->f ? FL_OK : fl__err(FL_EIO, "cannot create %s: %s", o->tmp, strerror(errno));
}

static int out_write(out_file *o, const char *buf, size_t n)
{
    if (n && fwrite(buf, 1, n, o->f) != n) return fl__err(FL_EIO, "cannot write %s: %s", o->tmp, strerror(errno));
    return FL_OK;
}

/* Closes and renames (st == FL_OK) or removes the temporary (st != FL_OK); returns the status. */
static int out_close(out_file *o, int st)
{
    if (!o->f) return st;
    int c = fclose(o->f);
    o->f = NULL;
    if (st == FL_OK && c != 0) st = fl__err(FL_EIO, "cannot write %s: %s", o->tmp, strerror(errno));
    if (st == FL_OK && rename(o->tmp, o->path) != 0)
        st = fl__err(FL_EIO, "cannot rename %s to %s: %s", o->tmp, o->path, strerror(errno));
    if (st != FL_OK) remove(o->tmp);
    return st;
}

static int write_text(const char *dir, const char *name, const char *text, size_t n)
{
    out_file o;
    int st = out_open(&o, dir, name);
    if (st == FL_OK) st = out_write(&o, text, n);
    return out_close(&o, st);
}

/* ---- simnet ------------------------------------------------------------------------------- */

fl_model_simnet_datagen fl_model_simnet_datagen_default(void)
{
    fl_model_simnet_datagen g = {0, -1, 1, 1, 20, 50, 200, 0.6, 0.2};
    return g;
}

/* One text of topic t into ids; returns its length. */
static int simnet_text(const fl_model_simnet_datagen *m, rng *g, int t, int lo, int hi, uint32_t *ids)
{
    int n = lo + (int)(rng_next(g) % (uint64_t)(hi - lo + 1));
    const int T = m->topics, W = m->topic_words;
    for (int i = 0; i < n; i++) {
        double u = rng_unif(g);
        if (u < m->purity) {
            ids[i] = (uint32_t)(t * W + (int)(rng_next(g) % (uint64_t)W));
        } else if (u < m->purity + m->mix && T > 1) {
            int o = (int)(rng_next(g) % (uint64_t)(T - 1));
            o += o >= t;
            ids[i] = (uint32_t)(o * W + (int)(rng_next(g) % (uint64_t)W));
        } else {
            ids[i] = (uint32_t)(T * W + (int)(rng_next(g) % (uint64_t)m->background));
        }
    }
    return n;
}

/* Posterior over topics of a text (post[T]). */
static void simnet_posterior(const fl_model_simnet_datagen *m, const uint32_t *ids, int n, double *post)
{
    const int T = m->topics, W = m->topic_words;
    double own = log(m->purity / W), other = T > 1 && m->mix > 0 ? log(m->mix / ((double)(T - 1) * W)) : -1e300;
    double mx = -INFINITY;
    for (int t = 0; t < T; t++) {
        double l = 0;
        for (int i = 0; i < n; i++)
            if (ids[i] < (uint32_t)(T * W)) l += (int)(ids[i] / (uint32_t)W) == t ? own : other;
        post[t] = l;
        if (l > mx) mx = l;
    }
    double z = 0;
    for (int t = 0; t < T; t++) z += (post[t] = exp(post[t] - mx));
    for (int t = 0; t < T; t++) post[t] /= z;
}

static char *put_ids(char *w, const uint32_t *ids, int n)
{
    w = put_int(w, n);
    for (int i = 0; i < n; i++) *w++ = ' ', w = put_int(w, ids[i]);
    return w;
}

/* Writes rows of a split into `files` part files under dir; *rate gets the Bayes order rate. */
static int simnet_split(const fl_model_simnet_datagen *m, int split, const char *dir, int64_t rows, int files, double *rate)
{
    char *buf = malloc(OUT_BUF);
    double *pq = malloc((size_t)m->topics * 3 * sizeof *pq), score = 0;
    int st = buf && pq ? FL_OK : fl__err(FL_ENOMEM, "simnet datagen: out of memory");
    for (int f = 0; st == FL_OK && f < files; f++) {
        double *pp = pq + m->topics, *pn = pp + m->topics;
        int64_t r0 = rows * f / files, r1 = rows * (f + 1) / files;
        char name[32];
        snprintf(name, sizeof name, "part-%05d", f);
        out_file o;
        if ((st = out_open(&o, dir, name)) != FL_OK) break;
        size_t len = 0;
        uint64_t stream = hash3(m->seed, (uint64_t)split, 7);
        for (int64_t i = r0; st == FL_OK && i < r1; i++) {
            rng g = {fmix64(stream + (uint64_t)i * GOLDEN)};
            int t = (int)(rng_next(&g) % (uint64_t)m->topics);
            int ot = (int)(rng_next(&g) % (uint64_t)(m->topics - 1));
            ot += ot >= t;
            uint32_t q[8], p[16], n[16];
            int nq = simnet_text(m, &g, t, 2, 6, q), np = simnet_text(m, &g, t, 4, 12, p);
            int nn = simnet_text(m, &g, ot, 4, 12, n);
            simnet_posterior(m, q, nq, pq);
            simnet_posterior(m, p, np, pp);
            simnet_posterior(m, n, nn, pn);
            double sp = 0, sn = 0;
            for (int k = 0; k < m->topics; k++) sp += pq[k] * pp[k], sn += pq[k] * pn[k];
            score += sp > sn ? 1.0 : sp == sn ? 0.5 : 0.0;
            char *w = buf + len;
            w = put_ids(w, q, nq), *w++ = ' ';
            w = put_ids(w, p, np), *w++ = ' ';
            w = put_ids(w, n, nn), *w++ = '\n';
            len = (size_t)(w - buf);
            if (len > OUT_BUF - 1024) st = out_write(&o, buf, len), len = 0;
        }
        if (st == FL_OK) st = out_write(&o, buf, len);
        st = out_close(&o, st);
    }
    free(buf);
    free(pq);
    *rate = rows ? score / (double)rows : NAN;
    return st;
}

static void fmt_rate(char *s, size_t n, double a) { snprintf(s, n, isnan(a) ? "null" : "%.6f", a); }

int fl_model_simnet_generate(const fl_model_simnet_datagen *g, const char *out, fl_model_simnet_datagen_info *info)
{
    if (!g || !out || !*out) return fl__err(FL_EINVAL, "fl_model_simnet_generate: configuration or out is NULL");
    if (g->rows < 1) return fl__err(FL_EINVAL, "simnet datagen: rows must be >= 1");
    if (g->files < 1 || g->files > MAX_FILES) return fl__err(FL_EINVAL, "simnet datagen: files must be in [1, 99999]");
    if (g->topics < 2 || g->topic_words < 1 || g->background < 1)
        return fl__err(FL_EINVAL, "simnet datagen: topics must be >= 2, topic_words and background >= 1");
    if (!(g->purity > 0 && g->mix >= 0 && g->purity + g->mix <= 1))
        return fl__err(FL_EINVAL, "simnet datagen: purity %g plus mix %g must be in (0, 1]", g->purity, g->mix);
    if ((int64_t)g->topics * g->topic_words + g->background > 2000000000)
        return fl__err(FL_EINVAL, "simnet datagen: topics * topic_words + background exceeds 2e9 ids");
    fl_model_simnet_datagen m = *g;
    int64_t test_rows = m.test_rows < 0 ? m.rows / 5 : m.test_rows;
    char train[4000], test[4000];
    if (strlen(out) > 3900) return fl__err(FL_EINVAL, "simnet datagen: output path is too long");
    snprintf(train, sizeof train, "%s/train", out);
    snprintf(test, sizeof test, "%s/test", out);
    FL_CHECK(fl__mkdir_p(train));
    FL_CHECK(fl__mkdir_p(test));
    double c_train, c_test;
    FL_CHECK(simnet_split(&m, 0, train, m.rows, m.files, &c_train));
    FL_CHECK(simnet_split(&m, 1, test, test_rows, 1, &c_test));
    int64_t dict = (int64_t)m.topics * m.topic_words + m.background;
    char a[32], b[32], j[1024];
    fmt_rate(a, sizeof a, c_train), fmt_rate(b, sizeof b, c_test);
    int jn = snprintf(j, sizeof j,
                      "{\"format\":\"simnet\",\"rows\":%lld,\"test_rows\":%lld,\"files\":%d,\"seed\":%llu,"
                      "\"dict_dim\":%lld,\"topics\":%d,\"topic_words\":%d,\"background\":%d,\"purity\":%g,\"mix\":%g,"
                      "\"ceiling_order_rate_train\":%s,\"ceiling_order_rate_test\":%s}\n",
                      (long long)m.rows, (long long)test_rows, m.files, (unsigned long long)m.seed, (long long)dict,
                      m.topics, m.topic_words, m.background, m.purity, m.mix, a, b);
    FL_CHECK(write_text(out, "planted.json", j, (size_t)jn));
    if (info) info->dict_dim = dict, info->ceiling_train = c_train, info->ceiling_test = c_test;
    return FL_OK;
}

/* ---- word2vec ----------------------------------------------------------------------------- */

fl_model_word2vec_datagen fl_model_word2vec_datagen_default(void)
{
    fl_model_word2vec_datagen g = {0, 1, 1, 16, 8, 4, 6, 300, 12};
    return g;
}

typedef struct {
    const fl_model_word2vec_datagen *c;
    int nwords;     /* background, topic, role, grid words */
    uint32_t *name; /* word index -> the number in its name w<number> */
    double *zipf;   /* cumulative background distribution */
    int64_t *count;
} w2v;

static int topic_word(const w2v *m, int t, int j) { return m->c->background + t * m->c->topic_words + j; }
static int role_word(const w2v *m, int r, int j)
{
    return m->c->background + m->c->topics * m->c->topic_words + r * m->c->role_words + j;
}
static int grid_word(const w2v *m, int t, int r)
{
    const fl_model_word2vec_datagen *c = m->c;
    return c->background + c->topics * c->topic_words + c->roles * c->role_words + t * c->roles + r;
}

static int background_word(const w2v *m, rng *g)
{
    double u = rng_unif(g);
    int lo = 0, hi = m->c->background - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (m->zipf[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* One sentence into w[]; returns its length. */
static int sentence(const w2v *m, rng *g, int *w)
{
    const fl_model_word2vec_datagen *c = m->c;
    int n = c->length / 2 + (int)(rng_next(g) % (uint64_t)(c->length / 2 + 1));
    int t = (int)(rng_next(g) % (uint64_t)c->topics), r = (int)(rng_next(g) % (uint64_t)c->roles);
    int grid = rng_unif(g) < 0.5;
    for (int i = 0; i < n; i++) {
        double u = rng_unif(g);
        if (!grid)
            w[i] = u < 0.75 ? topic_word(m, t, (int)(rng_next(g) % (uint64_t)c->topic_words)) : background_word(m, g);
        else if (u < 0.25) w[i] = grid_word(m, t, r);
        else if (u < 0.55) w[i] = topic_word(m, t, (int)(rng_next(g) % (uint64_t)c->topic_words));
        else if (u < 0.85) w[i] = role_word(m, r, (int)(rng_next(g) % (uint64_t)c->role_words));
        else w[i] = background_word(m, g);
    }
    return n;
}

static char *word_name(const w2v *m, int k, char *w)
{
    *w++ = 'w';
    return put_int(w, m->name[k]);
}

static void buf_word(fl_buf *b, const w2v *m, int k, int first)
{
    char nm[16];
    *word_name(m, k, nm) = 0;
    fl__buf_printf(b, "%s%s", first ? "" : " ", nm);
}

/* Words by decreasing count, ties by index (insertion sort on a merge of runs would do; qsort
 * has no user pointer, so a plain merge sort over an index array). */
static void sort_by_count(int *a, int *tmp, int n, const int64_t *count)
{
    if (n < 2) return;
    int h = n / 2;
    sort_by_count(a, tmp, h, count);
    sort_by_count(a + h, tmp, n - h, count);
    int i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int x = a[i], y = a[j];
        int take_y = count[y] > count[x] || (count[y] == count[x] && y < x);
        tmp[k++] = take_y ? a[j++] : a[i++];
    }
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, (size_t)n * sizeof *a);
}

static int w2v_corpus(w2v *m, const char *dir, int64_t *tokens)
{
    const fl_model_word2vec_datagen *c = m->c;
    char *buf = malloc(OUT_BUF);
    int *w = malloc((size_t)c->length * sizeof *w);
    int st = buf && w ? FL_OK : fl__err(FL_ENOMEM, "word2vec datagen: out of memory");
    *tokens = 0;
    for (int f = 0; st == FL_OK && f < c->files; f++) {
        int64_t r0 = c->sentences * f / c->files, r1 = c->sentences * (f + 1) / c->files;
        char name[32];
        snprintf(name, sizeof name, "part-%05d", f);
        out_file o;
        if ((st = out_open(&o, dir, name)) != FL_OK) break;
        size_t len = 0;
        uint64_t stream = hash3(c->seed, 11, 0);
        for (int64_t i = r0; st == FL_OK && i < r1; i++) {
            rng g = {fmix64(stream + (uint64_t)i * GOLDEN)};
            int n = sentence(m, &g, w);
            char *p = buf + len;
            for (int k = 0; k < n; k++) {
                if (k) *p++ = ' ';
                p = word_name(m, w[k], p);
                m->count[w[k]]++;
            }
            *p++ = '\n';
            *tokens += n;
            len = (size_t)(p - buf);
            if (len > OUT_BUF - 32 * (size_t)c->length) st = out_write(&o, buf, len), len = 0;
        }
        if (st == FL_OK) st = out_write(&o, buf, len);
        st = out_close(&o, st);
    }
    free(buf);
    free(w);
    return st;
}

/* dict.txt, clusters.txt, analogies.txt, planted.json. */
static int w2v_files(const w2v *m, const char *out, int64_t tokens, fl_model_word2vec_datagen_info *info)
{
    const fl_model_word2vec_datagen *c = m->c;
    int *order = malloc((size_t)m->nwords * 2 * sizeof *order), nseen = 0, missing = 0;
    if (!order) return fl__err(FL_ENOMEM, "word2vec datagen: out of memory");
    for (int i = 0; i < m->nwords; i++)
        if (m->count[i]) order[nseen++] = i;
    for (int i = c->background; i < m->nwords; i++) missing += !m->count[i];
    if (missing) {
        free(order);
        return fl__err(FL_EINVAL, "word2vec datagen: %d planted words never occur in %lld sentences: give more sentences",
                       missing, (long long)c->sentences);
    }
    sort_by_count(order, order + m->nwords, nseen, m->count);
    fl_buf t = {0};
    for (int i = 0; i < nseen; i++) {
        buf_word(&t, m, order[i], 1);
        fl__buf_printf(&t, " %lld\n", (long long)m->count[order[i]]);
    }
    free(order);
    int st = t.failed ? fl__err(FL_ENOMEM, "word2vec datagen: out of memory") : write_text(out, "dict.txt", t.p, t.len);
    t.len = 0;
    for (int k = 0; k < c->topics; k++) {
        for (int j = 0; j < c->topic_words; j++) buf_word(&t, m, topic_word(m, k, j), j == 0);
        fl__buf_printf(&t, "\n");
    }
    if (st == FL_OK) st = t.failed ? fl__err(FL_ENOMEM, "out of memory") : write_text(out, "clusters.txt", t.p, t.len);
    t.len = 0;
    int64_t nan_ = 0;
    for (int t1 = 0; t1 < c->topics; t1++)
        for (int t2 = 0; t2 < c->topics; t2++)
            for (int r1 = 0; r1 < c->roles; r1++)
                for (int r2 = 0; r2 < c->roles; r2++) {
                    if (t1 == t2 || r1 == r2) continue;
                    int q[4] = {grid_word(m, t1, r1), grid_word(m, t1, r2), grid_word(m, t2, r1), grid_word(m, t2, r2)};
                    for (int k = 0; k < 4; k++) buf_word(&t, m, q[k], k == 0);
                    fl__buf_printf(&t, "\n");
                    nan_++;
                }
    if (st == FL_OK) st = t.failed ? fl__err(FL_ENOMEM, "out of memory") : write_text(out, "analogies.txt", t.p, t.len);
    fl__buf_free(&t);
    double cc = (double)(c->topic_words - 1) / (double)(c->topics * c->topic_words - 1), ca = 1.0 / (double)(nseen - 3);
    char j[1024];
    int jn = snprintf(j, sizeof j,
                      "{\"format\":\"word2vec\",\"sentences\":%lld,\"tokens\":%lld,\"files\":%d,\"seed\":%llu,"
                      "\"dict_size\":%d,\"topics\":%d,\"topic_words\":%d,\"roles\":%d,\"role_words\":%d,"
                      "\"background\":%d,\"analogies\":%lld,\"ceiling_cluster_acc\":1,\"ceiling_analogy_acc\":1,"
                      "\"chance_cluster_acc\":%.6f,\"chance_analogy_acc\":%.6f}\n",
                      (long long)c->sentences, (long long)tokens, c->files, (unsigned long long)c->seed, nseen, c->topics,
                      c->topic_words, c->roles, c->role_words, c->background, (long long)nan_, cc, ca);
    if (st == FL_OK) st = write_text(out, "planted.json", j, (size_t)jn);
    if (st == FL_OK && info) {
        info->dict_size = nseen, info->tokens = tokens, info->analogies = nan_;
        info->clustered_words = (int64_t)c->topics * c->topic_words;
        info->chance_cluster_acc = cc, info->chance_analogy_acc = ca;
    }
    return st;
}

int fl_model_word2vec_generate(const fl_model_word2vec_datagen *g, const char *out, fl_model_word2vec_datagen_info *info)
{
    if (!g || !out || !*out) return fl__err(FL_EINVAL, "fl_model_word2vec_generate: configuration or out is NULL");
    if (g->sentences < 1) return fl__err(FL_EINVAL, "word2vec datagen: sentences must be >= 1");
    if (g->files < 1 || g->files > MAX_FILES) return fl__err(FL_EINVAL, "word2vec datagen: files must be in [1, 99999]");
    if (g->topics < 2 || g->topic_words < 2 || g->roles < 2 || g->role_words < 1 || g->background < 1 || g->length < 2 ||
        g->length > 200 || g->topics > 10000 || g->topic_words > 10000 || g->roles > 100 || g->role_words > 10000 ||
        g->background > 1000000)
        return fl__err(FL_EINVAL, "word2vec datagen: topics in [2, 10000], topic_words in [2, 10000], roles in [2, 100], "
                                  "role_words in [1, 10000], background in [1, 1000000], length in [2, 200]");
    w2v m;
    memset(&m, 0, sizeof m);
    m.c = g;
    m.nwords = g->background + g->topics * g->topic_words + g->roles * g->role_words + g->topics * g->roles;
    m.name = malloc((size_t)m.nwords * sizeof *m.name);
    m.zipf = malloc((size_t)g->background * sizeof *m.zipf);
    m.count = calloc((size_t)m.nwords, sizeof *m.count);
    int st = m.name && m.zipf && m.count ? FL_OK : fl__err(FL_ENOMEM, "word2vec datagen: out of memory");
    if (st == FL_OK) {
        rng pg = {hash3(g->seed, 99, 0)};
        for (int i = 0; i < m.nwords; i++) m.name[i] = (uint32_t)i;
        for (int i = m.nwords - 1; i > 0; i--) { /* names in a random order: ids say nothing */
            int j = (int)(rng_next(&pg) % (uint64_t)(i + 1));
            uint32_t x = m.name[i];
            m.name[i] = m.name[j], m.name[j] = x;
        }
        double z = 0;
        for (int i = 0; i < g->background; i++) z += 1.0 / (i + 1);
        for (int i = 0; i < g->background; i++) m.zipf[i] = (i ? m.zipf[i - 1] : 0) + 1.0 / (i + 1) / z;
        m.zipf[g->background - 1] = 1.0;
    }
    char dir[4000];
    if (strlen(out) > 3900) st = fl__err(FL_EINVAL, "word2vec datagen: output path is too long");
    snprintf(dir, sizeof dir, "%s/train", out);
    int64_t tokens = 0;
    if (st == FL_OK) st = fl__mkdir_p(dir);
    if (st == FL_OK) st = w2v_corpus(&m, dir, &tokens);
    if (st == FL_OK) st = w2v_files(&m, out, tokens, info);
    free(m.name);
    free(m.zipf);
    free(m.count);
    return st;
}
