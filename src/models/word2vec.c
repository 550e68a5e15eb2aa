/*
 * word2vec.c - skip-gram with negative sampling (see fleet/models.h): the builder, its
 * dataset and the evaluation on planted clusters and analogies.  The reader is
 * word2vec_data.c.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base_internal.h"
#include "models_internal.h"

fl_model_word2vec_config fl_model_word2vec_default(void)
{
    fl_model_word2vec_config c;
    memset(&c, 0, sizeof c);
    c.embedding_size = 300;
    c.neg_num = 5;
    c.is_sparse = 1;
    return c;
}

static fl_var *lookup(fl_var *ids, const fl_model_word2vec_config *c, const char *name, int dim, fl_initializer init)
{
    fl_embedding_attr ea;
    memset(&ea, 0, sizeof ea);
    ea.is_sparse = c->is_sparse;
    ea.is_distributed = c->is_distributed;
    ea.param.name = name;
    ea.param.init = init;
    return fl_layer_embedding(ids, c->dict_size, dim, &ea);
}

int fl_model_word2vec_build(fl_prog *p, const fl_model_word2vec_config *cfg, fl_model_word2vec *m)
{
    if (!p || !cfg || !m) return fl__err(FL_EINVAL, "fl_model_word2vec_build: program, config or output is NULL");
    memset(m, 0, sizeof *m);
    if (cfg->dict_size < 2)
        return fl__err(FL_EINVAL, "word2vec: dict_size must be >= 2, got %lld", (long long)cfg->dict_size);
    if (cfg->embedding_size < 1)
        return fl__err(FL_EINVAL, "word2vec: embedding_size must be >= 1, got %d", cfg->embedding_size);
    if (cfg->neg_num < 1) return fl__err(FL_EINVAL, "word2vec: neg_num must be >= 1, got %d", cfg->neg_num);
    const int64_t D = cfg->embedding_size, K = cfg->neg_num;
    m->input_word = fl_layer_data(p, "input_word", 1, (const int64_t[]){1}, FL_INT64, 0);
    m->true_word = fl_layer_data(p, "true_word", 1, (const int64_t[]){1}, FL_INT64, 0);
    m->neg_word = fl_layer_data(p, "neg_word", 1, (const int64_t[]){K}, FL_INT64, 0);
    const float w = 0.5f / (float)D;
    m->emb = lookup(m->input_word, cfg, "emb", (int)D, fl_init_uniform(-w, w));
    fl_var *true_w = lookup(m->true_word, cfg, "emb_w", (int)D, fl_init_constant(0));
    fl_var *true_b = lookup(m->true_word, cfg, "emb_b", 1, fl_init_constant(0));
    fl_var *neg_ids = fl_layer_reshape(m->neg_word, 2, (const int64_t[]){-1, 1});
    fl_var *neg_w = fl_layer_reshape(lookup(neg_ids, cfg, "emb_w", (int)D, fl_init_constant(0)), 3,
                                     (const int64_t[]){-1, K, D});
    fl_var *neg_b = fl_layer_reshape(lookup(neg_ids, cfg, "emb_b", 1, fl_init_constant(0)), 2, (const int64_t[]){-1, K});
    const int dim1[1] = {1};
    fl_var *true_logits = fl_layer_elementwise_add(
        fl_layer_reduce_sum(fl_layer_elementwise_mul(m->emb, true_w, -1), dim1, 1, 1), true_b, -1);
    fl_var *in3 = fl_layer_reshape(m->emb, 3, (const int64_t[]){-1, 1, D});
    fl_var *neg_mm = fl_layer_reshape(fl_layer_matmul(in3, neg_w, 0, 1, 1.0f), 2, (const int64_t[]){-1, K});
    fl_var *neg_logits = fl_layer_elementwise_add(neg_mm, neg_b, -1);
    fl_var *ones = fl_layer_fill_constant_batch_size_like(true_logits, 2, (const int64_t[]){-1, 1}, FL_FLOAT32, 1.0f);
    fl_var *zeros = fl_layer_fill_constant_batch_size_like(true_logits, 2, (const int64_t[]){-1, K}, FL_FLOAT32, 0.0f);
    fl_var *true_xent = fl_layer_sigmoid_cross_entropy_with_logits(true_logits, ones);
    fl_var *neg_xent = fl_layer_sigmoid_cross_entropy_with_logits(neg_logits, zeros);
    fl_var *cost = fl_layer_elementwise_add(fl_layer_reduce_sum(true_xent, dim1, 1, 0),
                                            fl_layer_reduce_sum(neg_xent, dim1, 1, 0), -1);
    m->loss = fl_layer_mean(cost);
    if (fl_prog_status(p) != FL_OK) return fl__err(fl_prog_status(p), "word2vec: %s", fl_prog_error(p));
    m->use_var[0] = m->input_word, m->use_var[1] = m->true_word, m->use_var[2] = m->neg_word;
    m->nuse_var = 3;
    return FL_OK;
}

fl_dataset *fl_model_word2vec_dataset(const fl_model_word2vec *m, const char *kind, int batch_size, int thread,
                                      const char *const *files, int nfiles)
{
    if (!m || !m->nuse_var) {
        fl__err(FL_EINVAL, "fl_model_word2vec_dataset: model is NULL or not built");
        return NULL;
    }
    return fl__model_dataset(m->use_var, m->nuse_var, kind, batch_size, thread, files, nfiles);
}

/* ---- evaluation ------------------------------------------------------------------------ */

/* Every word's input embedding, rows L2-normalised: float [V * D] (caller frees). */
static int embeddings(fl_exe *exe, fl_prog *test, const fl_model_word2vec *m, int64_t V, float **out, int64_t *dim)
{
    const int64_t K = fl_var_shape(m->neg_word)[1], B = 512;
    fl_exe *ev = fl_exe_create(fl_exe_scope(exe)); /* its plan of test goes with it (see simnet.c) */
    fl_tensor *in = fl_tensor_create(FL_INT64, 2, (const int64_t[]){B, 1});
    fl_tensor *neg = fl_tensor_create(FL_INT64, 2, (const int64_t[]){B, K});
    float *E = NULL;
    int st = ev && in && neg ? FL_OK : fl_last_status();
    int64_t D = 0;
    for (int64_t s = 0; st == FL_OK && s < V; s += B) {
        int64_t n = V - s < B ? V - s : B;
        if ((st = fl_tensor_resize(in, FL_INT64, 2, (const int64_t[]){n, 1})) != FL_OK) break;
        if ((st = fl_tensor_resize(neg, FL_INT64, 2, (const int64_t[]){n, K})) != FL_OK) break;
        int64_t *ip = fl_tensor_i64(in), *np = fl_tensor_i64(neg);
        for (int64_t i = 0; i < n; i++) {
            ip[i] = s + i;
            for (int64_t k = 0; k < K; k++) np[i * K + k] = s + i;
        }
        /* the true and negative words are fed too (the network computes its loss) */
        fl_feed feed[3] = {
            {fl_var_name(m->input_word), in}, {fl_var_name(m->true_word), in}, {fl_var_name(m->neg_word), neg}};
        const char *fetch[1] = {fl_var_name(m->emb)};
        fl_tensor *o;
        if ((st = fl_exe_run(ev, test, feed, 3, fetch, 1, &o)) != FL_OK) break;
        if (!E) {
            D = fl_tensor_dim(o, 1);
            if (!(E = malloc((size_t)(V * D) * sizeof *E))) st = fl__err(FL_ENOMEM, "word2vec eval: out of memory");
        }
        if (st == FL_OK) memcpy(E + s * D, fl_tensor_cdata(o), (size_t)(n * D) * sizeof *E);
    }
    fl_tensor_free(in);
    fl_tensor_free(neg);
    fl_exe_free(ev);
    if (st != FL_OK) {
        free(E);
        return st;
    }
    for (int64_t i = 0; i < V; i++) {
        double nn = 0;
        for (int64_t d = 0; d < D; d++) nn += (double)E[i * D + d] * E[i * D + d];
        float inv = nn > 0 ? (float)(1.0 / sqrt(nn)) : 0.0f;
        for (int64_t d = 0; d < D; d++) E[i * D + d] *= inv;
    }
    *out = E;
    *dim = D;
    return FL_OK;
}

static float dot(const float *a, const float *b, int64_t D)
{
    float s = 0;
    for (int64_t d = 0; d < D; d++) s += a[d] * b[d];
    return s;
}

/* Reads `path` as lines of blank-separated words mapped to ids; calls fn per line. */
static int read_word_lines(const char *path, const fl_model_word2vec_vocab *v,
                           int (*fn)(void *u, const int64_t *ids, int n, const char *path, int64_t line), void *u)
{
    FILE *f = fopen(path, "r");
    if (!f) return fl__err(FL_EIO, "word2vec eval '%s': %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0;
    int64_t line = 0, ids[1024];
    int st = FL_OK;
    while (st == FL_OK && getline(&buf, &cap, f) > 0) {
        line++;
        int n = 0;
        for (char *p = buf; *p && st == FL_OK;) {
            p += strspn(p, " \t\r\n");
            size_t len = strcspn(p, " \t\r\n");
            if (!len) break;
            int64_t id = fl_model_word2vec_vocab_id(v, p, len);
            if (id < 0)
                st = fl__err(FL_ENOTFOUND, "%s:%lld: word '%.*s' is not in the dictionary", path, (long long)line,
                             (int)(len < 64 ? len : 64), p);
            else if (n == 1024) st = fl__err(FL_EINVAL, "%s:%lld: more than 1024 words", path, (long long)line);
            else ids[n++] = id;
            p += len;
        }
        if (st == FL_OK && n) st = fn(u, ids, n, path, line);
    }
    free(buf);
    fclose(f);
    return st;
}

typedef struct {
    const float *E;
    int64_t V, D;
    int32_t *cluster; /* per word: cluster index or -1 */
    int64_t *members, nmem, capmem;
    int32_t nclusters;
    int64_t hits, total;
} eval_ctx;

static int add_cluster(void *u, const int64_t *ids, int n, const char *path, int64_t line)
{
    eval_ctx *c = u;
    for (int i = 0; i < n; i++) {
        if (c->cluster[ids[i]] >= 0)
            return fl__err(FL_EINVAL, "%s:%lld: word id %lld is in two clusters", path, (long long)line, (long long)ids[i]);
        c->cluster[ids[i]] = c->nclusters;
        if (c->nmem == c->capmem) {
            c->capmem = c->capmem ? 2 * c->capmem : 256;
            int64_t *nm = realloc(c->members, (size_t)c->capmem * sizeof *nm);
            if (!nm) return fl__err(FL_ENOMEM, "word2vec eval: out of memory");
            c->members = nm;
        }
        c->members[c->nmem++] = ids[i];
    }
    c->nclusters++;
    return FL_OK;
}

static int score_analogy(void *u, const int64_t *ids, int n, const char *path, int64_t line)
{
    eval_ctx *c = u;
    if (n != 4) return fl__err(FL_EINVAL, "%s:%lld: an analogy is 4 words 'a b c d', got %d", path, (long long)line, n);
    const int64_t D = c->D;
    float q[1024];
    if (D > 1024) return fl__err(FL_EINVAL, "word2vec eval: embedding_size %lld > 1024", (long long)D);
    for (int64_t d = 0; d < D; d++) q[d] = c->E[ids[1] * D + d] - c->E[ids[0] * D + d] + c->E[ids[2] * D + d];
    int64_t best = -1;
    float bs = -INFINITY;
    for (int64_t w = 0; w < c->V; w++) {
        if (w == ids[0] || w == ids[1] || w == ids[2]) continue;
        float s = dot(q, c->E + w * D, D);
        if (s > bs) bs = s, best = w;
    }
    c->hits += best == ids[3];
    c->total++;
    return FL_OK;
}

int fl_model_word2vec_eval(fl_exe *exe, fl_prog *test, const fl_model_word2vec *m, const fl_model_word2vec_vocab *v,
                           const char *clusters, const char *analogies, fl_model_word2vec_metrics *out)
{
    if (!exe || !test || !m || !m->emb || !v || !clusters || !analogies || !out)
        return fl__err(FL_EINVAL, "fl_model_word2vec_eval: an argument is NULL");
    memset(out, 0, sizeof *out);
    eval_ctx c;
    memset(&c, 0, sizeof c);
    c.V = fl_model_word2vec_vocab_size(v);
    float *E = NULL;
    FL_CHECK(embeddings(exe, test, m, c.V, &E, &c.D));
    c.E = E;
    c.cluster = malloc((size_t)c.V * sizeof *c.cluster);
    int st = c.cluster ? FL_OK : fl__err(FL_ENOMEM, "word2vec eval: out of memory");
    if (st == FL_OK) memset(c.cluster, 0xff, (size_t)c.V * sizeof *c.cluster);
    if (st == FL_OK) st = read_word_lines(clusters, v, add_cluster, &c);
    if (st == FL_OK && c.nmem < 2) st = fl__err(FL_EINVAL, "word2vec eval: '%s' holds fewer than 2 words", clusters);
    for (int64_t i = 0; st == FL_OK && i < c.nmem; i++) { /* nearest clustered neighbour */
        int64_t a = c.members[i], best = -1;
        float bs = -INFINITY;
        for (int64_t j = 0; j < c.nmem; j++) {
            if (j == i) continue;
            float s = dot(E + a * c.D, E + c.members[j] * c.D, c.D);
            if (s > bs) bs = s, best = c.members[j];
        }
        c.hits += c.cluster[best] == c.cluster[a];
    }
    if (st == FL_OK) {
        out->cluster_acc = (double)c.hits / (double)c.nmem;
        out->clustered_words = c.nmem;
        c.hits = 0;
        st = read_word_lines(analogies, v, score_analogy, &c);
    }
    if (st == FL_OK && !c.total) st = fl__err(FL_EINVAL, "word2vec eval: '%s' holds no analogy", analogies);
    if (st == FL_OK) {
        out->analogy_acc = (double)c.hits / (double)c.total;
        out->analogies = c.total;
    }
    free(E);
    free(c.cluster);
    free(c.members);
    return st;
}
