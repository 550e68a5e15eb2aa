/*
 * bert_gen.c - the planted BERT corpus of `fleet-datagen bert` (fleet/models.h,
 * docs/datagen.md): topics, each a first-order Markov chain over its words; lines of the
 * demo format ([CLS] A [SEP] B [SEP], gzip); and the Bayes-optimal masked-LM and
 * next-sentence accuracies under the generator and the reader's masking, computed exactly
 * by forward-backward on the test lines.  Every line draws from its own stream,
 * hash(seed, split, row), so the same options give the same bytes and --files only changes
 * where the lines are cut.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fleet/models.h"
#include "../base/base_internal.h"
#include "../io/io_internal.h"

#define NMARK 5 /* [PAD] [CLS] [SEP] [MASK] [UNK] */
#define ID_CLS 1
#define ID_SEP 2
#define ID_MASK 3
#define MAX_WORDS 100000 /* topic_words, function_words */
#define MAX_TOPICS 10000
#define MAX_SUCC 64
#define MAX_SENT 2000 /* words per sentence */
#define GZ_CHUNK (1 << 20)
/* the reader's masking (bert_data.c): predicted, of those [MASK] / random / kept */
#define P_PRED 0.15f
#define P_MASK_ABOVE 0.03f
#define P_RAND_ABOVE 0.015f

typedef struct {
    const fl_model_bert_datagen *g;
    int n, F, W, K; /* words of a topic (F function + W own), successors */
    int64_t vocab;
    int32_t *succ;       /* [topics][n][K] successors (topic-local indices) */
    double p[MAX_SUCC];  /* successor weights, 2^-k normalised */
    double cp[MAX_SUCC]; /* their cumulative sums */
} planted;

fl_model_bert_datagen fl_model_bert_datagen_default(void)
{
    fl_model_bert_datagen g = {0, -1, 1, 1, 32, 64, 32, 4, 0.1, 0, 8, 60, 4000};
    return g;
}

static double unif(fl_rng *r) { return (double)(fl__rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }
static int pick(fl_rng *r, int n) { return (int)(fl__rng_next(r) % (uint64_t)n); }

/* topic-local index <-> vocabulary id */
static int64_t global_id(const planted *m, int z, int l)
{
    return l < m->F ? NMARK + l : NMARK + m->F + (int64_t)z * m->W + (l - m->F);
}
static int local_id(const planted *m, int z, int64_t id)
{
    if (id >= NMARK && id < NMARK + m->F) return (int)(id - NMARK);
    int64_t o = id - NMARK - m->F - (int64_t)z * m->W;
    return o >= 0 && o < m->W ? m->F + (int)o : -1;
}

static int planted_init(planted *m, const fl_model_bert_datagen *g)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    m->F = g->function_words, m->W = g->topic_words, m->K = g->successors;
    m->n = m->F + m->W;
    m->vocab = NMARK + m->F + (int64_t)g->topics * m->W;
    m->succ = malloc((size_t)g->topics * (size_t)m->n * (size_t)m->K * sizeof *m->succ);
    if (!m->succ) return fl__err(FL_ENOMEM, "bert datagen: out of memory");
    double s = 0;
    for (int k = 0; k < m->K; k++) s += m->p[k] = ldexp(1.0, -k);
    for (int k = 0; k < m->K; k++) m->p[k] /= s, m->cp[k] = (k ? m->cp[k - 1] : 0) + m->p[k];
    m->cp[m->K - 1] = 1.0;
    for (int z = 0; z < g->topics; z++)
        for (int u = 0; u < m->n; u++) {
            int32_t *sl = m->succ + ((int64_t)z * m->n + u) * m->K;
            uint64_t zz = g->shared_grammar ? 0 : (uint64_t)z; /* shared: the same slots in every topic */
            fl_rng r = {fl__hash_u64(fl__hash_u64(g->seed ^ 0x7375636365ULL) + zz * 0x100000001ULL + (uint64_t)u)};
            for (int k = 0; k < m->K; k++) {
                int v, dup;
                do {
                    v = pick(&r, m->n), dup = 0;
                    for (int j = 0; j < k; j++) dup |= sl[j] == v;
                } while (dup);
                sl[k] = v;
            }
        }
    return FL_OK;
}

/* ---- the lines ------------------------------------------------------------------------------ */

typedef struct {
    int topic, la, lb;
    int64_t a[MAX_SENT], b[MAX_SENT]; /* vocabulary ids */
} line;

static void sentence(const planted *m, fl_rng *r, int z, int64_t *out, int len)
{
    const fl_model_bert_datagen *g = m->g;
    int u = m->F + pick(r, m->W);
    out[0] = global_id(m, z, u);
    for (int t = 1; t < len; t++) {
        if (unif(r) < g->noise) {
            u = pick(r, m->n);
        } else {
            double x = unif(r);
            int k = 0;
            while (k + 1 < m->K && x >= m->cp[k]) k++;
            u = m->succ[((int64_t)z * m->n + u) * m->K + k];
        }
        out[t] = global_id(m, z, u);
    }
}

static void make_line(const planted *m, uint64_t split, int64_t row, line *l)
{
    const fl_model_bert_datagen *g = m->g;
    fl_rng r = {fl__hash_u64(fl__hash_u64(g->seed ^ 0x62657274ULL) + split * 0x9e3779b97f4a7c15ULL + (uint64_t)row)};
    l->topic = pick(&r, g->topics);
    l->la = g->min_len + pick(&r, g->max_len - g->min_len + 1);
    l->lb = g->min_len + pick(&r, g->max_len - g->min_len + 1);
    sentence(m, &r, l->topic, l->a, l->la);
    sentence(m, &r, l->topic, l->b, l->lb);
}

/* token_ids;sent_ids;pos_ids;1 as the demo writes them */
static void put_line(fl_buf *b, const line *l)
{
    int n = l->la + l->lb + 3;
    fl__buf_printf(b, "%d", ID_CLS);
    for (int i = 0; i < l->la; i++) fl__buf_printf(b, " %lld", (long long)l->a[i]);
    fl__buf_printf(b, " %d", ID_SEP);
    for (int i = 0; i < l->lb; i++) fl__buf_printf(b, " %lld", (long long)l->b[i]);
    fl__buf_printf(b, " %d;", ID_SEP);
    for (int i = 0; i < n; i++) fl__buf_put(b, i < l->la + 2 ? (i ? " 0" : "0") : " 1", i ? 2 : 1);
    fl__buf_put(b, ";", 1);
    for (int i = 0; i < n; i++) fl__buf_printf(b, i ? " %d" : "%d", i);
    fl__buf_put(b, ";1\n", 3);
}

/* Compresses text (Z_FINISH when last) onto gz. */
static int deflate_put(z_stream *zs, fl_buf *gz, const fl_buf *text, int last)
{
    zs->next_in = (Bytef *)(text->p ? text->p : "");
    zs->avail_in = (uInt)text->len;
    int zr;
    do {
        char out[1 << 16];
        zs->next_out = (Bytef *)out;
        zs->avail_out = sizeof out;
        zr = deflate(zs, last ? Z_FINISH : Z_NO_FLUSH);
        if (zr == Z_STREAM_ERROR) return fl__err(FL_EIO, "bert datagen: deflate failed");
        fl__buf_put(gz, out, sizeof out - zs->avail_out);
    } while (zs->avail_out == 0 || (last && zr != Z_STREAM_END));
    return gz->failed ? fl__err(FL_ENOMEM, "bert datagen: out of memory") : FL_OK;
}

/* Lines [from, to) of a split into path, gzip'ed; *tokens += their tokens. */
static int write_part(const planted *m, const char *path, uint64_t split, int64_t from, int64_t to, int64_t *tokens,
                      line *l)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return fl__err(FL_ENOMEM, "bert datagen: deflateInit2 failed");
    fl_buf text = {0}, gz = {0};
    int st = FL_OK;
    for (int64_t i = from; i < to && st == FL_OK; i++) {
        make_line(m, split, i, l);
        put_line(&text, l);
        *tokens += l->la + l->lb + 3;
        if (text.failed) st = fl__err(FL_ENOMEM, "bert datagen: out of memory");
        else if (text.len >= GZ_CHUNK) st = deflate_put(&zs, &gz, &text, 0), text.len = 0;
    }
    if (st == FL_OK) st = deflate_put(&zs, &gz, &text, 1);
    deflateEnd(&zs);
    if (st == FL_OK) st = fl__write_file_atomic(path, gz.p, gz.len);
    fl__buf_free(&text);
    fl__buf_free(&gz);
    return st;
}

static int write_split(const planted *m, const char *out, const char *split, uint64_t sid, int64_t rows, int files,
                       int64_t *tokens)
{
    char *dir = fl__path_join(out, split);
    if (!dir) return fl__err(FL_ENOMEM, "bert datagen: out of memory");
    int st = fl__mkdir_p(dir);
    line *l = malloc(sizeof *l);
    if (st == FL_OK && !l) st = fl__err(FL_ENOMEM, "bert datagen: out of memory");
    *tokens = 0;
    for (int f = 0; f < files && st == FL_OK; f++) {
        char name[32];
        snprintf(name, sizeof name, "part-%05d.gz", f);
        char *path = fl__path_join(dir, name);
        st = path ? write_part(m, path, sid, rows * f / files, rows * (f + 1) / files, tokens, l)
                  : fl__err(FL_ENOMEM, "bert datagen: out of memory");
        free(path);
    }
    /* part files of an earlier run with more files would be read with these */
    for (int f = files; st == FL_OK; f++) {
        char name[32];
        snprintf(name, sizeof name, "part-%05d.gz", f);
        char *path = fl__path_join(dir, name);
        int gone = !path || unlink(path) != 0;
        free(path);
        if (gone) break;
    }
    free(l);
    free(dir);
    return st;
}

/* ---- the ceilings ----------------------------------------------------------------------------
 *
 * An example is a sentence pair as the model sees it: A and B with the reader's masks, its
 * label unknown.  The hypotheses are (true pair, topic z) with prior 1/2 * 1/T and (false
 * pair, topic za of A, topic zb of B) with prior 1/2 * 1/T^2, the sentences independent
 * chains given their topics.  With a(z) = P(A | z) and b(z) = P(B | z) (forward algorithm,
 * the masked positions summed over), P(true | A, B) is sum a b / T against (sum a / T)
 * (sum b / T), and a masked word's posterior mixes its posterior under each topic
 * (forward-backward) with the topic's weight.  The expected accuracy of the Bayes decision
 * on an example is its largest posterior; the ceilings average those. */

typedef struct {
    const int64_t *w; /* true ids */
    int64_t o[MAX_SENT];
    unsigned char pred[MAX_SENT];
    int len;
} obs_sent;

typedef struct {
    const planted *m;
    double *alpha, *beta, *g;  /* [max_len][n], [max_len][n], [n] */
    double *la, *lb, *wa, *wb; /* [topics] */
    double *facc, *best;       /* [max_len][F] function-word posterior mass, [max_len] best own word */
} ceil_ws;

/* The emission of position t under topic z into e[n]: a word not predicted is seen as is,
 * a predicted one as [MASK] (0.8), a random id below vocab (0.1) or itself (0.1). */
static void emission(const planted *m, const obs_sent *s, int t, int z, double *e)
{
    int lo = local_id(m, z, s->o[t]);
    if (!s->pred[t]) {
        for (int l = 0; l < m->n; l++) e[l] = 0;
        if (lo >= 0) e[lo] = 1;
        return;
    }
    double c = 0.1 / (double)(m->vocab - 1) + (s->o[t] == ID_MASK ? 0.8 : 0);
    for (int l = 0; l < m->n; l++) e[l] = c;
    if (lo >= 0) e[lo] += 0.1;
}

/* y = x T (forward) or y = T x (backward) for the chain of topic z; sx = sum of x */
static void step(const planted *m, int z, const double *x, double *y, int backward)
{
    const double eps = m->g->noise, u0 = eps / m->n;
    double sx = 0;
    for (int l = 0; l < m->n; l++) sx += x[l];
    const int32_t *sl = m->succ + (int64_t)z * m->n * m->K;
    for (int l = 0; l < m->n; l++) y[l] = u0 * sx;
    for (int u = 0; u < m->n; u++, sl += m->K)
        for (int k = 0; k < m->K; k++) {
            if (backward) y[u] += (1 - eps) * m->p[k] * x[sl[k]];
            else y[sl[k]] += (1 - eps) * m->p[k] * x[u];
        }
}

/* log P(s | z), or -inf; alpha gets the normalised forward rows */
static double forward(ceil_ws *w, int z, const obs_sent *s)
{
    const planted *m = w->m;
    const int n = m->n;
    for (int t = 0; t < s->len; t++) /* quick rejection: a word seen that topic z lacks */
        if (!s->pred[t] && (local_id(m, z, s->o[t]) < 0 || (t == 0 && local_id(m, z, s->o[t]) < m->F))) return -INFINITY;
    double ll = 0;
    for (int t = 0; t < s->len; t++) {
        double *a = w->alpha + (size_t)t * n, c = 0;
        if (t == 0)
            for (int l = 0; l < n; l++) a[l] = l >= m->F ? 1.0 / m->W : 0;
        else step(m, z, a - n, a, 0);
        emission(m, s, t, z, w->g);
        for (int l = 0; l < n; l++) c += a[l] *= w->g[l];
        if (!(c > 0)) return -INFINITY;
        for (int l = 0; l < n; l++) a[l] /= c;
        ll += log(c);
    }
    return ll;
}

/* After forward(w, z, s): adds weight * P(word at t | s, z) for the predicted t */
static void backward_acc(ceil_ws *w, int z, const obs_sent *s, double weight)
{
    const planted *m = w->m;
    const int n = m->n;
    for (int l = 0; l < n; l++) w->beta[(size_t)(s->len - 1) * n + l] = 1;
    for (int t = s->len - 2; t >= 0; t--) {
        double *b = w->beta + (size_t)t * n, mx = 0;
        emission(m, s, t + 1, z, w->g);
        for (int l = 0; l < n; l++) w->g[l] *= b[n + l];
        step(m, z, w->g, b, 1);
        for (int l = 0; l < n; l++) mx = b[l] > mx ? b[l] : mx;
        for (int l = 0; mx > 0 && l < n; l++) b[l] /= mx;
    }
    for (int t = 0; t < s->len; t++) {
        if (!s->pred[t]) continue;
        const double *a = w->alpha + (size_t)t * n, *b = w->beta + (size_t)t * n;
        double sum = 0;
        for (int l = 0; l < n; l++) sum += a[l] * b[l];
        if (!(sum > 0)) continue;
        double *fa = w->facc + (size_t)t * m->F;
        for (int l = 0; l < n; l++) {
            double q = weight * a[l] * b[l] / sum;
            if (l < m->F) fa[l] += q;
            else if (q > w->best[t]) w->best[t] = q;
        }
    }
}

typedef struct {
    double mlm, mlm2, nsp, nsp2;
    int64_t masked, examples;
    int64_t *count; /* predicted true ids */
} ceil_sum;

/* Posterior of each predicted word of s (topic weights wt) into the sums */
static void sentence_mlm(ceil_ws *w, const obs_sent *s, const double *wt, ceil_sum *cs)
{
    const planted *m = w->m;
    memset(w->facc, 0, (size_t)s->len * (size_t)m->F * sizeof *w->facc);
    memset(w->best, 0, (size_t)s->len * sizeof *w->best);
    for (int z = 0; z < m->g->topics; z++)
        if (wt[z] > 1e-12 && forward(w, z, s) > -INFINITY) backward_acc(w, z, s, wt[z]);
    for (int t = 0; t < s->len; t++) {
        if (!s->pred[t]) continue;
        double p = w->best[t];
        for (int l = 0; l < m->F; l++) p = w->facc[(size_t)t * m->F + l] > p ? w->facc[(size_t)t * m->F + l] : p;
        cs->mlm += p, cs->mlm2 += p * p, cs->masked++;
        cs->count[s->w[t]]++;
    }
}

static void example(ceil_ws *w, const obs_sent *A, const obs_sent *B, ceil_sum *cs)
{
    const planted *m = w->m;
    const int T = m->g->topics;
    double ma = -INFINITY, mb = -INFINITY, sa = 0, sb = 0, pos = 0;
    for (int z = 0; z < T; z++) {
        w->la[z] = forward(w, z, A), w->lb[z] = forward(w, z, B);
        ma = w->la[z] > ma ? w->la[z] : ma, mb = w->lb[z] > mb ? w->lb[z] : mb;
    }
    for (int z = 0; z < T; z++) {
        w->la[z] = exp(w->la[z] - ma) / T, w->lb[z] = exp(w->lb[z] - mb) / T; /* a(z) / T, b(z) / T */
        sa += w->la[z], sb += w->lb[z], pos += w->la[z] * w->lb[z] * T;
    }
    double neg = sa * sb, tot = pos + neg, p = (pos > neg ? pos : neg) / tot;
    cs->nsp += p, cs->nsp2 += p * p, cs->examples++;
    for (int z = 0; z < T; z++) {
        w->wa[z] = w->la[z] * (w->lb[z] * T + sb) / tot;
        w->wb[z] = w->lb[z] * (w->la[z] * T + sa) / tot;
    }
    sentence_mlm(w, A, w->wa, cs);
    sentence_mlm(w, B, w->wb, cs);
}

/* The reader's masks over the words of A and B (prepare() in bert_data.c) */
static void mask_pair(const planted *m, fl_rng *r, obs_sent *A, obs_sent *B)
{
    int any = 0;
    obs_sent *s[2] = {A, B};
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < s[k]->len; t++) {
            float u = fl__rng_uniform(r);
            int64_t rep = 1 + (int64_t)(fl__rng_next(r) % (uint64_t)(m->vocab - 1)), x = s[k]->w[t];
            s[k]->pred[t] = u <= P_PRED;
            s[k]->o[t] = u > P_PRED ? x : u > P_MASK_ABOVE ? ID_MASK : u > P_RAND_ABOVE ? rep : x;
            any |= s[k]->pred[t];
        }
    if (!any) { /* one [MASK] at an inner position other than the middle [SEP] */
        int j;
        do j = 1 + pick(r, A->len + B->len + 1);
        while (j == A->len + 1);
        obs_sent *q = j <= A->len ? A : B;
        int t = j <= A->len ? j - 1 : j - A->len - 2;
        q->pred[t] = 1, q->o[t] = ID_MASK;
    }
}

static int ceilings(const planted *m, int64_t nlines, fl_model_bert_datagen_info *info)
{
    const fl_model_bert_datagen *g = m->g;
    ceil_ws w = {m};
    size_t rows = (size_t)g->max_len * (size_t)m->n;
    w.alpha = malloc(rows * sizeof(double)), w.beta = malloc(rows * sizeof(double));
    w.g = malloc((size_t)m->n * sizeof(double));
    w.la = malloc((size_t)g->topics * 4 * sizeof(double));
    w.facc = malloc(((size_t)g->max_len * (size_t)(m->F ? m->F : 1) + (size_t)g->max_len) * sizeof(double));
    ceil_sum cs = {0};
    cs.count = calloc((size_t)m->vocab, sizeof *cs.count);
    line *l1 = malloc(sizeof *l1), *l2 = malloc(sizeof *l2);
    obs_sent *A = malloc(sizeof *A), *B = malloc(sizeof *B);
    int st = FL_OK;
    if (!w.alpha || !w.beta || !w.g || !w.la || !w.facc || !cs.count || !l1 || !l2 || !A || !B)
        st = fl__err(FL_ENOMEM, "bert datagen: out of memory");
    if (st == FL_OK) {
        w.lb = w.la + g->topics, w.wa = w.lb + g->topics, w.wb = w.wa + g->topics;
        w.best = w.facc + (size_t)g->max_len * (size_t)m->F;
    }
    for (int64_t i = 0; i < nlines && st == FL_OK; i++) {
        fl_rng r = {fl__hash_u64(fl__hash_u64(g->seed ^ 0x6365696cULL) + (uint64_t)i)};
        make_line(m, 1, i, l1);
        for (int neg = 0; neg < (nlines > 1 ? 2 : 1); neg++) {
            const line *lb = l1;
            if (neg) {
                make_line(m, 1, (i + 1 + (int64_t)(fl__rng_next(&r) % (uint64_t)(nlines - 1))) % nlines, l2);
                lb = l2;
            }
            A->w = l1->a, A->len = l1->la, B->w = lb->b, B->len = lb->lb;
            mask_pair(m, &r, A, B);
            example(&w, A, B, &cs);
        }
    }
    if (st == FL_OK) {
        int64_t best = 0;
        for (int64_t v = 0; v < m->vocab; v++) best = cs.count[v] > best ? cs.count[v] : best;
        double nm = (double)cs.masked, ne = (double)cs.examples;
        info->ceiling_examples = cs.examples, info->ceiling_masked = cs.masked;
        info->mlm_ceiling = cs.mlm / nm, info->nsp_ceiling = cs.nsp / ne;
        info->mlm_ceiling_se = sqrt(fmax(cs.mlm2 / nm - info->mlm_ceiling * info->mlm_ceiling, 0) / nm);
        info->nsp_ceiling_se = sqrt(fmax(cs.nsp2 / ne - info->nsp_ceiling * info->nsp_ceiling, 0) / ne);
        info->mlm_unigram = (double)best / nm;
    }
    free(w.alpha), free(w.beta), free(w.g), free(w.la), free(w.facc), free(cs.count);
    free(l1), free(l2), free(A), free(B);
    return st;
}

/* ---- the files -------------------------------------------------------------------------------- */

static int write_buf(const char *dir, const char *name, fl_buf *b)
{
    if (b->failed) return fl__err(FL_ENOMEM, "bert datagen: out of memory");
    char *path = fl__path_join(dir, name);
    if (!path) return fl__err(FL_ENOMEM, "bert datagen: out of memory");
    int st = fl__write_file_atomic(path, b->p ? b->p : "", b->len);
    free(path);
    return st;
}

static int write_vocab_config(const planted *m, const char *out)
{
    fl_buf v = {0}, c = {0};
    fl__buf_printf(&v, "[PAD]\n[CLS]\n[SEP]\n[MASK]\n[UNK]\n");
    for (int f = 0; f < m->F; f++) fl__buf_printf(&v, "f%d\n", f);
    for (int z = 0; z < m->g->topics; z++)
        for (int k = 0; k < m->W; k++) fl__buf_printf(&v, "t%d_%d\n", z, k);
    /* the demo's bert_config.json (BERT-base), this vocabulary's size */
    fl__buf_printf(&c,
                   "{\n  \"attention_probs_dropout_prob\": 0.1, \n  \"directionality\": \"bidi\", \n  \"hidden_act\": "
                   "\"gelu\", \n  \"hidden_dropout_prob\": 0.1, \n  \"hidden_size\": 768, \n  \"initializer_range\": "
                   "0.02, \n  \"intermediate_size\": 3072, \n  \"max_position_embeddings\": 512, \n  "
                   "\"num_attention_heads\": 12, \n  \"num_hidden_layers\": 12, \n  \"pooler_fc_size\": 768, \n  "
                   "\"pooler_num_attention_heads\": 12, \n  \"pooler_num_fc_layers\": 3, \n  \"pooler_size_per_head\": "
                   "128, \n  \"pooler_type\": \"first_token_transform\", \n  \"type_vocab_size\": 2, \n  "
                   "\"vocab_size\": %lld\n}\n",
                   (long long)m->vocab);
    int st = write_buf(out, "vocab.txt", &v);
    if (st == FL_OK) st = write_buf(out, "bert_config.json", &c);
    fl__buf_free(&v);
    fl__buf_free(&c);
    return st;
}

static int check(const fl_model_bert_datagen *g)
{
    const char *E = "fl_model_bert_generate";
    if (g->lines < 1) return fl__err(FL_EINVAL, "%s: lines must be >= 1, got %lld", E, (long long)g->lines);
    if (g->test_lines < -1 || g->test_lines == 0)
        return fl__err(FL_EINVAL, "%s: test_lines must be >= 1 (or -1: lines / 10), got %lld", E, (long long)g->test_lines);
    if (g->files < 1 || g->files > 99999 || g->files > g->lines)
        return fl__err(FL_EINVAL, "%s: files must be in [1, min(99999, lines)], got %d", E, g->files);
    if (g->topics < 1 || g->topics > MAX_TOPICS)
        return fl__err(FL_EINVAL, "%s: topics must be in [1, %d], got %d", E, MAX_TOPICS, g->topics);
    if (g->topic_words < 1 || g->topic_words > MAX_WORDS || g->function_words < 0 || g->function_words > MAX_WORDS)
        return fl__err(FL_EINVAL, "%s: topic_words must be in [1, %d] and function_words in [0, %d], got %d and %d", E,
                       MAX_WORDS, MAX_WORDS, g->topic_words, g->function_words);
    if ((int64_t)g->topics * g->topic_words > ((int64_t)1 << 30))
        return fl__err(FL_EINVAL, "%s: topics * topic_words is above 2^30", E);
    int n = g->topic_words + g->function_words;
    if (g->successors < 1 || g->successors > MAX_SUCC || g->successors > n)
        return fl__err(FL_EINVAL, "%s: successors must be in [1, min(%d, topic_words + function_words %d)], got %d", E,
                       MAX_SUCC, n, g->successors);
    if (!(g->noise >= 0 && g->noise <= 1)) return fl__err(FL_EINVAL, "%s: noise must be in [0, 1], got %g", E, g->noise);
    if (g->min_len < 1 || g->min_len > g->max_len || g->max_len > MAX_SENT)
        return fl__err(FL_EINVAL, "%s: need 1 <= min_len <= max_len <= %d, got %d and %d", E, MAX_SENT, g->min_len,
                       g->max_len);
    if (g->shared_grammar != 0 && g->shared_grammar != 1)
        return fl__err(FL_EINVAL, "%s: shared_grammar must be 0 or 1, got %d", E, g->shared_grammar);
    if (g->ceiling_lines < 0)
        return fl__err(FL_EINVAL, "%s: ceiling_lines must be >= 0, got %lld", E, (long long)g->ceiling_lines);
    return FL_OK;
}

int fl_model_bert_generate(const fl_model_bert_datagen *g, const char *out, fl_model_bert_datagen_info *info)
{
    if (!g || !out || !info) return fl__err(FL_EINVAL, "fl_model_bert_generate: config, out or info is NULL");
    memset(info, 0, sizeof *info);
    FL_CHECK(check(g));
    int64_t test = g->test_lines < 0 ? (g->lines / 10 > 0 ? g->lines / 10 : 1) : g->test_lines;
    int64_t clines = g->ceiling_lines && g->ceiling_lines < test ? g->ceiling_lines : test;
    planted m;
    int st = planted_init(&m, g);
    if (st == FL_OK) st = fl__mkdir_p(out);
    if (st == FL_OK) st = write_vocab_config(&m, out);
    if (st == FL_OK) st = write_split(&m, out, "train", 0, g->lines, g->files, &info->train_tokens);
    if (st == FL_OK) st = write_split(&m, out, "test", 1, test, 1, &info->test_tokens);
    if (st == FL_OK) st = ceilings(&m, clines, info);
    info->vocab_size = m.vocab;
    if (st == FL_OK) {
        fl_buf j = {0};
        fl__buf_printf(
            &j,
            "{\n  \"task\": \"bert\",\n  \"seed\": %llu,\n  \"lines\": %lld,\n  \"test_lines\": %lld,\n  "
            "\"files\": %d,\n  \"topics\": %d,\n  \"topic_words\": %d,\n  \"function_words\": %d,\n  "
            "\"successors\": %d,\n  \"noise\": %g,\n  \"shared_grammar\": %d,\n  \"min_len\": %d,\n  \"max_len\": %d,\n  "
            "\"vocab_size\": %lld,\n  \"train_tokens\": %lld,\n  \"test_tokens\": %lld,\n  "
            "\"rules\": \"a line is a document: topic z uniform; sentences A and B each a Markov chain over "
            "z's words (function words, then z's own); first word uniform over z's own words; next word: "
            "with probability 1 - noise successor k of the previous word in z (weight 2^-k), else uniform "
            "over z's words; lengths uniform in [min_len, max_len]; every label 1 (the reader makes the "
            "negatives)\",\n  \"ceiling_lines\": %lld,\n  \"ceiling_examples\": %lld,\n  "
            "\"ceiling_masked\": %lld,\n  \"mlm_ceiling\": %.6f,\n  \"mlm_ceiling_se\": %.6f,\n  "
            "\"nsp_ceiling\": %.6f,\n  \"nsp_ceiling_se\": %.6f,\n  \"mlm_unigram\": %.6f,\n  "
            "\"ceilings\": \"Bayes-optimal accuracies under the generator and the reader's masking (15%%: "
            "80%% [MASK], 10%% random id below vocab_size, 10%% kept) with half the examples false pairs, "
            "exact by forward-backward, averaged over the first ceiling_lines test lines\"\n}\n",
            (unsigned long long)g->seed, (long long)g->lines, (long long)test, g->files, g->topics, g->topic_words,
            g->function_words, g->successors, g->noise, g->shared_grammar, g->min_len, g->max_len, (long long)m.vocab,
            (long long)info->train_tokens, (long long)info->test_tokens, (long long)clines,
            (long long)info->ceiling_examples, (long long)info->ceiling_masked, info->mlm_ceiling, info->mlm_ceiling_se,
            info->nsp_ceiling, info->nsp_ceiling_se, info->mlm_unigram);
        st = write_buf(out, "planted.json", &j);
        fl__buf_free(&j);
    }
    free(m.succ);
    return st;
}
