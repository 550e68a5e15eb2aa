/*
 * transformer_cache.c - incremental decoding of the Transformer with a key / value cache
 * (used by transformer_decode.c; see fleet/transformer.h).
 *
 * The uncached decoder re-runs the decoder program over the whole prefix at every output
 * position.  Here the test program is split three ways, so that a step computes only the
 * new position:
 *   - "cross": the encoder and, for every decoder layer, the keys and values of its
 *     cross-attention over enc_output ([B, H, S, d]), run once per batch of sentences;
 *   - "first": the decoder at position 0 with those keys / values fed, fetching the
 *     prediction and each layer's self-attention key and value of the position;
 *   - "next": the decoder at position t > 0 for one position, each self-attention's key and
 *     value concatenated after the cached ones of positions 0 .. t-1 (fed) before its two
 *     matmuls, fetching the prediction and the concatenated keys / values (the cache of
 *     the next step).
 * Between steps the cache rows are gathered by parent (beam search reselects hypotheses;
 * finished sentences drop out) straight into the scope's tensors of next's cache variables:
 * those are not data variables of next (nothing is fed, so nothing is copied in), and
 * where every row is its own parent (greedy decoding before a sentence finishes) the last
 * step's keys / values are swapped in without a copy.  The programs are found by the parameter names of
 * fl_model_transformer_build ("decoder_layer_<i>_slf_att_key_fc.w_0", ...): from each
 * key / value projection weight the single-reader chain of forward ops leads to the
 * attention's matmul, and the variable read there is the split-heads key or value.  Under
 * AMP that variable is the matmul's low-precision operand (the cast after split_heads; at
 * level O2 the chain starts from the parameter's cast copy): the cache variables take its
 * dtype from the program, and the cross-attention keys / values, the gathers and the swaps
 * move the bytes of whatever dtype the step wrote, so the cache holds exactly what the
 * uncached decoder's matmuls read.  A program without that structure gets no cache (the
 * decoder falls back to the full prefix).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base_internal.h"
#include "../graph/graph_internal.h"
#include "transformer_internal.h"

#define NM 128

struct fl__tr_cache {
    fl_prog *pcross, *first, *next;
    fl_exe *ecross, *efirst, *enext;
    int nl;          /* decoder layers; the lists below hold 2 * nl names: k0, v0, k1, v1, ... */
    char **cross_kv; /* cross-attention keys / values (fetched from cross, fed to the steps) */
    char **self_kv;  /* the new position's self-attention keys / values (fetched from first) */
    char **full_kv;  /* cache + new position (fetched from next) */
    char **cache_kv; /* variables of next read before written: the cache of positions 0 .. t-1 */
    char *predict;
    int64_t H;
    /* the batch: its cross keys / values [n, H, S, d] (private copies, of dtype cross_dt),
     * source lengths */
    char **cross;
    fl_dtype *cross_dt;
    int64_t n, S, *cross_d;
    int *src_len;
    /* the feeds, reused */
    fl_tensor *tw, *tp, *tb, *tsb, **cfeed;
    fl_tensor **kscope; /* the scope's tensors of cache_kv (borrowed): the step writes them */
    int *rows;          /* source rows of the cross feeds now (NULL: none yet) */
    int64_t nrows;
    int next_fed;     /* 1: enext's scope holds the cross feeds of these rows (fed at its last run) */
    fl_tensor **prev; /* the last step's fetched keys / values (borrowed) */
};

static void free_names(char **v, int n)
{
    for (int i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

void fl__tr_cache_free(fl__tr_cache *c)
{
    if (!c) return;
    fl_exe_free(c->ecross), fl_exe_free(c->efirst), fl_exe_free(c->enext);
    fl_prog_free(c->pcross), fl_prog_free(c->first), fl_prog_free(c->next);
    int n2 = 2 * c->nl;
    free_names(c->cross_kv, n2), free_names(c->self_kv, n2), free_names(c->full_kv, n2), free_names(c->cache_kv, n2);
    for (int i = 0; c->cross && i < n2; i++) free(c->cross[i]);
    for (int i = 0; c->cfeed && i < n2; i++) fl_tensor_free(c->cfeed[i]);
    free(c->cross), free(c->cross_dt), free(c->cross_d), free(c->cfeed), free(c->kscope), free(c->prev), free(c->src_len),
        free(c->rows);
    fl_tensor_free(c->tw), fl_tensor_free(c->tp), fl_tensor_free(c->tb), fl_tensor_free(c->tsb);
    free(c->predict);
    free(c);
}

static int reads_var(const fl_op *op, const fl_var *v)
{
    if (op->cond == v) return 1;
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        for (int k = 0; k < op->in[s].n; k++)
            if (op->in[s].vars[k] == v) return 1;
    return 0;
}

/* The variable of p that a cast in program q (any role) writes from the variable named
 * `name`: a parameter's low-precision copy whose cast is not a forward op of p (AMP level
 * O2 refreshes the copy after the update and in the startup program).  NULL if none. */
static fl_var *cast_copy(const fl_prog *p, const fl_prog *q, const char *name)
{
    for (int i = 0; q && i < q->nops; i++) {
        const fl_op *op = q->ops[i];
        if (!strcmp(op->def->type, "cast") && op->in[0].n && !strcmp(op->in[0].vars[0]->name, name) && op->out[0].n)
            return fl_prog_var(p, op->out[0].vars[0]->name);
    }
    return NULL;
}

/* The variable that the attention matmul reads, reached from parameter `param` through a
 * chain of forward ops each the only reader of the previous one's first output (the fc,
 * reshape2 and transpose2 of split_heads, and under AMP the casts to low precision: the
 * variable is then the matmul's bfloat16 / float16 operand); a parameter that no forward
 * op reads continues from its cast copy (level O2).  *mm gets the matmul's index.  NULL
 * if none. */
static fl_var *follow_to_matmul(const fl_prog *p, const char *param, int *mm)
{
    fl_var *v = fl_prog_var(p, param);
    for (int hop = 0; v && hop < 10; hop++) {
        int who = -1, readers = 0;
        for (int i = 0; i < p->nops; i++)
            if (p->ops[i]->role == FL_ROLE_FORWARD && reads_var(p->ops[i], v)) readers++, who = i;
        if (!readers && !hop) {
            fl_var *cv = cast_copy(p, p, param);
            if (!cv) cv = cast_copy(p, p->startup, param);
            if (cv && cv != v) {
                v = cv;
                continue;
            }
        }
        if (readers != 1) return NULL;
        const fl_op *op = p->ops[who];
        if (!strncmp(op->def->type, "matmul", 6)) {
            *mm = who;
            return v->persistable ? NULL : v; /* the parameter (or its copy) itself is not a key */
        }
        v = op->out[0].n ? op->out[0].vars[0] : NULL;
    }
    return NULL;
}

static char *name_of(const fl_var *v) { return v ? fl__strdup(v->name) : NULL; }

/* Inserts concat(cache, v) before the matmul mm of p reading v; returns the concat's output. */
static fl_var *insert_cache(fl_prog *p, fl_var *v, int mm, const char *cache_name)
{
    const int64_t *sh = fl_var_shape(v);
    if (fl_var_ndim(v) != 4 || sh[3] < 1) return NULL;
    /* in the dtype the matmul reads (bfloat16 / float16 under AMP) */
    fl_var *cache = fl_layer_data(p, cache_name, 3, (const int64_t[]){sh[1], -1, sh[3]}, v->dtype, 0);
    fl_var *ins[2] = {cache, v};
    fl_var *full = cache ? fl_layer_concat(ins, 2, 2) : NULL;
    if (!full || fl__prog_move_last_op(p, mm) != FL_OK) return NULL;
    fl_op *op = p->ops[mm + 1];
    for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
        for (int k = 0; k < op->in[s].n; k++)
            if (op->in[s].vars[k] == v) op->in[s].vars[k] = full;
    p->version++;
    return full;
}

int fl__tr_cache_create(const fl_prog *test, fl_scope *scope, int64_t H, const char *predict, fl__tr_cache **out)
{
    *out = NULL;
    int nl = 0;
    char nm[NM];
    while (snprintf(nm, sizeof nm, "decoder_layer_%d_slf_att_key_fc.w_0", nl), fl_prog_var(test, nm)) nl++;
    if (!nl) return FL_OK;
    fl__tr_cache *c = calloc(1, sizeof *c);
    if (!c) return fl__err(FL_ENOMEM, "transformer decoder: out of memory");
    c->nl = nl, c->H = H;
    const int n2 = 2 * nl;
    c->cross_kv = calloc((size_t)n2, sizeof *c->cross_kv);
    c->self_kv = calloc((size_t)n2, sizeof *c->self_kv);
    c->full_kv = calloc((size_t)n2, sizeof *c->full_kv);
    c->cache_kv = calloc((size_t)n2, sizeof *c->cache_kv);
    c->cross = calloc((size_t)n2, sizeof *c->cross);
    c->cross_d = calloc((size_t)n2, sizeof *c->cross_d);
    c->cross_dt = calloc((size_t)n2, sizeof *c->cross_dt);
    c->cfeed = calloc((size_t)n2, sizeof *c->cfeed);
    c->kscope = calloc((size_t)n2, sizeof *c->kscope);
    c->prev = calloc((size_t)n2, sizeof *c->prev);
    fl_prog *re = fl_prog_clone(test, 1); /* the copy that gets the concats */
    int st = c->cross_kv && c->self_kv && c->full_kv && c->cache_kv && c->cross && c->cross_d && c->cross_dt && c->cfeed &&
                     c->kscope && c->prev && re && (c->predict = fl__strdup(predict))
                 ? FL_OK
                 : fl__err(FL_ENOMEM, "transformer decoder: out of memory");
    int found = st == FL_OK;
    if (re) fl__prog_set_role(re, FL_ROLE_FORWARD);
    for (int i = 0; found && i < n2; i++) {
        const char *kv = i % 2 ? "value" : "key";
        int mm;
        snprintf(nm, sizeof nm, "decoder_layer_%d_cross_att_%s_fc.w_0", i / 2, kv);
        fl_var *x = follow_to_matmul(test, nm, &mm);
        snprintf(nm, sizeof nm, "decoder_layer_%d_slf_att_%s_fc.w_0", i / 2, kv);
        fl_var *s = follow_to_matmul(test, nm, &mm);
        fl_var *r = s ? follow_to_matmul(re, nm, &mm) : NULL;
        snprintf(nm, sizeof nm, "decoder_cache_%s_%d", kv, i / 2);
        fl_var *full = r && x ? insert_cache(re, r, mm, nm) : NULL;
        if (!full) {
            found = 0;
            break;
        }
        c->cross_d[i] = fl_var_shape(x)[3];
        if (!(c->cross_kv[i] = name_of(x)) || !(c->self_kv[i] = name_of(s)) || !(c->full_kv[i] = name_of(full)) ||
            !(c->cache_kv[i] = fl__strdup(nm)))
            st = fl__err(FL_ENOMEM, "transformer decoder: out of memory"), found = 0;
        if (c->cross_d[i] < 1) found = 0;
    }
    if (found) {
        /* feeds and targets of the three programs */
        const char **f = calloc((size_t)(2 * n2 + 4), sizeof *f), **t = calloc((size_t)(n2 + 1), sizeof *t);
        if (!f || !t) st = fl__err(FL_ENOMEM, "transformer decoder: out of memory");
        if (st == FL_OK) {
            const char *src[3] = {"src_word", "src_pos", "src_slf_attn_bias"};
            const char *trg[4] = {"trg_word", "trg_pos", "trg_slf_attn_bias", "trg_src_attn_bias"};
            memcpy(f, trg, sizeof trg);
            for (int i = 0; i < n2; i++) f[4 + i] = c->cross_kv[i], f[4 + n2 + i] = c->cache_kv[i];
            t[0] = predict;
            for (int i = 0; i < n2; i++) t[1 + i] = c->self_kv[i];
            /* a program without the expected split gets no cache: the errors of prune are not ours */
            if (fl_prog_prune(test, src, 3, (const char *const *)c->cross_kv, n2, &c->pcross) != FL_OK ||
                fl_prog_prune(test, f, 4 + n2, t, 1 + n2, &c->first) != FL_OK)
                found = 0;
            for (int i = 0; i < n2; i++) t[1 + i] = c->full_kv[i];
            if (found && fl_prog_prune(re, f, 4 + 2 * n2, t, 1 + n2, &c->next) != FL_OK) found = 0;
            /* the cache is written into the scope, not fed */
            for (int i = 0; found && i < n2; i++) {
                fl_var *v = fl_prog_var(c->next, c->cache_kv[i]);
                if (v) v->is_data = 0;
                else found = 0;
            }
        }
        free(f), free(t);
    }
    fl_prog_free(re);
    if (st == FL_OK && found) {
        if (!(c->ecross = fl_exe_create(scope)) || !(c->efirst = fl_exe_create(scope)) ||
            !(c->enext = fl_exe_create(scope)) || fl_exe_set_eager_deletion(c->enext, 0) != FL_OK)
            st = fl_last_status();
        fl_tensor **t[4] = {&c->tw, &c->tp, &c->tb, &c->tsb};
        for (int i = 0; st == FL_OK && i < 4; i++)
            if (!(*t[i] = fl_tensor_create(FL_FLOAT32, 1, (const int64_t[]){1}))) st = fl_last_status();
        for (int i = 0; st == FL_OK && i < n2; i++)
            if (!(c->cfeed[i] = fl_tensor_create(FL_FLOAT32, 1, (const int64_t[]){1})) ||
                !(c->kscope[i] = fl_scope_var(scope, c->cache_kv[i])))
                st = fl_last_status();
    }
    if (st != FL_OK || !found) {
        fl__tr_cache_free(c);
        return st;
    }
    *out = c;
    return FL_OK;
}

int fl__tr_cache_encode(fl__tr_cache *c, const fl_tensor *sw, const fl_tensor *sp, const fl_tensor *sb, const int *src_len,
                        int n)
{
    const int n2 = 2 * c->nl;
    fl_feed feed[3] = {{"src_word", sw}, {"src_pos", sp}, {"src_slf_attn_bias", sb}};
    fl_tensor **kv = malloc((size_t)n2 * sizeof *kv);
    if (!kv) return fl__err(FL_ENOMEM, "transformer decoder: out of memory");
    int st = fl_exe_run(c->ecross, c->pcross, feed, 3, (const char *const *)c->cross_kv, n2, kv);
    int *len = st == FL_OK ? realloc(c->src_len, (size_t)(n ? n : 1) * sizeof *len) : NULL;
    if (st == FL_OK && !len) st = fl__err(FL_ENOMEM, "transformer decoder: out of memory");
    if (len) c->src_len = len, memcpy(len, src_len, (size_t)n * sizeof *len);
    c->n = n;
    c->S = st == FL_OK ? fl_tensor_dim(kv[0], 2) : 0;
    /* private copies: the step programs feed variables of the same names into the scope */
    for (int i = 0; st == FL_OK && i < n2; i++) {
        if (fl_tensor_ndim(kv[i]) != 4 || fl_tensor_dim(kv[i], 0) != n || fl_tensor_dim(kv[i], 1) != c->H ||
            fl_tensor_dim(kv[i], 2) != c->S || fl_tensor_dim(kv[i], 3) != c->cross_d[i]) {
            st = fl__err(FL_EINVAL, "transformer decoder: cross-attention '%s' is not [%d, %lld, %lld, %lld]",
                         c->cross_kv[i], n, (long long)c->H, (long long)c->S, (long long)c->cross_d[i]);
            break;
        }
        char *b = realloc(c->cross[i], fl_tensor_nbytes(kv[i]));
        if (!b) {
            st = fl__err(FL_ENOMEM, "transformer decoder: out of memory");
            break;
        }
        c->cross[i] = b;
        c->cross_dt[i] = fl_tensor_dtype(kv[i]);
        memcpy(b, fl_tensor_cdata(kv[i]), fl_tensor_nbytes(kv[i]));
    }
    free(kv);
    free(c->rows), c->rows = NULL, c->nrows = 0; /* the cross feeds are refilled at the first step */
    c->next_fed = 0;
    return st;
}

/* The cross feeds for rows src_row[0 .. R), unless they hold these rows already. */
static int cross_feeds(fl__tr_cache *c, const int *src_row, int64_t R)
{
    if (c->rows && c->nrows == R && !memcmp(c->rows, src_row, (size_t)R * sizeof *src_row)) return FL_OK;
    c->next_fed = 0;
    const int64_t S = c->S, H = c->H;
    for (int i = 0; i < 2 * c->nl; i++) {
        const size_t blk = (size_t)(H * S * c->cross_d[i]) * fl_dtype_size(c->cross_dt[i]);
        FL_CHECK(fl_tensor_resize(c->cfeed[i], c->cross_dt[i], 4, (const int64_t[]){R, H, S, c->cross_d[i]}));
        char *o = fl_tensor_data(c->cfeed[i]);
        for (int64_t r = 0; r < R; r++) memcpy(o + (size_t)r * blk, c->cross[i] + (size_t)src_row[r] * blk, blk);
    }
    FL_CHECK(fl_tensor_resize(c->tsb, FL_FLOAT32, 4, (const int64_t[]){R, H, 1, S}));
    int *lens = malloc((size_t)(R ? R : 1) * sizeof *lens), *rows = realloc(c->rows, (size_t)(R ? R : 1) * sizeof *rows);
    if (rows) c->rows = rows;
    if (!lens || !rows) {
        free(lens);
        return fl__err(FL_ENOMEM, "transformer decoder: out of memory");
    }
    for (int64_t r = 0; r < R; r++) lens[r] = c->src_len[src_row[r]];
    fl__tr_key_bias(fl_tensor_f32(c->tsb), R, H, 1, S, lens);
    free(lens);
    memcpy(c->rows, src_row, (size_t)R * sizeof *src_row);
    c->nrows = R;
    return FL_OK;
}

int fl__tr_cache_step(fl__tr_cache *c, const int64_t *seq, int64_t stride, int64_t t, const int *src_row, const int *parent,
                      int64_t R, int64_t V, float *logp)
{
    const int n2 = 2 * c->nl;
    const int64_t H = c->H;
    FL_CHECK(cross_feeds(c, src_row, R));
    FL_CHECK(fl_tensor_resize(c->tw, FL_INT64, 3, (const int64_t[]){R, 1, 1}));
    FL_CHECK(fl_tensor_resize(c->tp, FL_INT64, 3, (const int64_t[]){R, 1, 1}));
    FL_CHECK(fl_tensor_resize(c->tb, FL_FLOAT32, 4, (const int64_t[]){R, H, 1, t + 1}));
    for (int64_t r = 0; r < R; r++) fl_tensor_i64(c->tw)[r] = seq[r * stride + t], fl_tensor_i64(c->tp)[r] = t;
    memset(fl_tensor_data(c->tb), 0, fl_tensor_nbytes(c->tb)); /* every earlier position is visible */
    /* the cache of positions 0 .. t-1: the last step's keys / values gathered by parent into
     * the scope's tensors that next reads, or swapped in when every row is its own parent */
    int same_rows = t > 0 && fl_tensor_dim(c->prev[0], 0) == R;
    for (int64_t r = 0; same_rows && r < R; r++) same_rows = parent[r] == r;
    for (int i = 0; t > 0 && i < n2; i++) {
        fl_tensor *pv = c->prev[i], *o = c->kscope[i];
        const int64_t d = fl_tensor_dim(pv, 3), np = fl_tensor_dim(pv, 0);
        const size_t blk = (size_t)(H * t * d) * fl_dtype_size(pv->dtype);
        if (fl_tensor_dim(pv, 2) != t)
            return fl__err(FL_EINVAL, "transformer decoder: cached '%s' holds %lld positions, expected %lld", c->full_kv[i],
                           (long long)fl_tensor_dim(pv, 2), (long long)t);
        if (same_rows && !pv->layout && !pv->lod_n && !o->layout && !o->lod_n) {
            fl_tensor tmp = *o;
            *o = *pv, *pv = tmp;
            continue;
        }
        /* in the dtype the step wrote (bfloat16 / float16 under AMP) */
        FL_CHECK(fl_tensor_resize(o, pv->dtype, 4, (const int64_t[]){R, H, t, d}));
        char *ov = fl_tensor_data(o);
        const char *in = fl_tensor_cdata(pv);
        for (int64_t r = 0; r < R; r++) {
            if (parent[r] < 0 || parent[r] >= np)
                return fl__err(FL_EINVAL, "transformer decoder: parent row %d of %lld", parent[r], (long long)np);
            memcpy(ov + (size_t)r * blk, in + (size_t)parent[r] * blk, blk);
        }
    }
    fl_feed *feed = malloc((size_t)(4 + n2) * sizeof *feed);
    const char **fetch = malloc((size_t)(1 + n2) * sizeof *fetch);
    fl_tensor **res = malloc((size_t)(1 + n2) * sizeof *res);
    int st = feed && fetch && res ? FL_OK : fl__err(FL_ENOMEM, "transformer decoder: out of memory");
    if (st == FL_OK) {
        int nf = 0;
        feed[nf++] = (fl_feed){"trg_word", c->tw};
        feed[nf++] = (fl_feed){"trg_pos", c->tp};
        feed[nf++] = (fl_feed){"trg_slf_attn_bias", c->tb};
        feed[nf++] = (fl_feed){"trg_src_attn_bias", c->tsb};
        /* the cross keys / values only when next's scope lacks them (it keeps its buffers) */
        int cross = t == 0 || !c->next_fed;
        for (int i = 0; cross && i < n2; i++) feed[nf++] = (fl_feed){c->cross_kv[i], c->cfeed[i]};
        fetch[0] = c->predict;
        for (int i = 0; i < n2; i++) fetch[1 + i] = t > 0 ? c->full_kv[i] : c->self_kv[i];
        st = t > 0 ? fl_exe_run(c->enext, c->next, feed, nf, fetch, 1 + n2, res)
                   : fl_exe_run(c->efirst, c->first, feed, nf, fetch, 1 + n2, res);
        if (t > 0) c->next_fed = st == FL_OK;
    }
    if (st == FL_OK && (fl_tensor_ndim(res[0]) != 2 || fl_tensor_dim(res[0], 0) != R || fl_tensor_dim(res[0], 1) != V))
        st = fl__err(FL_EINVAL, "transformer decoder: predict '%s' is not [%lld, %lld]", c->predict, (long long)R,
                     (long long)V);
    for (int i = 0; st == FL_OK && i < n2; i++) {
        c->prev[i] = res[1 + i];
        if (fl_tensor_ndim(res[1 + i]) != 4 || fl_tensor_dim(res[1 + i], 0) != R)
            st = fl__err(FL_EINVAL, "transformer decoder: '%s' is not [%lld, H, t, d]", fetch[1 + i], (long long)R);
    }
    if (st == FL_OK) {
        const float *pr = fl_tensor_cdata(res[0]);
        for (int64_t i = 0; i < R * V; i++) logp[i] = pr[i] > 0 ? logf(pr[i]) : FL_TR_NEG_INF;
    }
    free(feed), free(fetch), free(res);
    return st;
}
