/*
 * transformer_decode.c - greedy and beam-search decoding of the Transformer through the
 * executor, and its BLEU evaluation (fleet/transformer.h).  The program is split at
 * "enc_output": the encoder runs once per batch of sentences; with the key / value cache
 * (transformer_cache.c, the default) each output position then computes only itself,
 * without it the decoder re-runs over the whole prefix (the reference path).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base_internal.h"
#include "transformer_internal.h"

#define NEG_INF FL_TR_NEG_INF

struct fl_transformer_decoder {
    fl_prog *test, *enc, *dec;
    fl_exe *eenc, *edec;
    char *predict;
    int64_t bos, eos, H, V, max_pos;
    /* feeds, reused */
    fl_tensor *sw, *sp, *sb, *tw, *tp, *tb, *tsb, *eo;
    fl__tr_cache *cache; /* NULL: the program has no cacheable decoder */
    float *scores;       /* of the last fl_transformer_decode's outputs */
    int nscores;
};

fl_transformer_decode_opts fl_transformer_decode_opts_default(void)
{
    fl_transformer_decode_opts o = {4, 0.6f, 256, 32, 1};
    return o;
}

void fl_transformer_decoder_free(fl_transformer_decoder *d)
{
    if (!d) return;
    fl__tr_cache_free(d->cache);
    fl_exe_free(d->eenc);
    fl_exe_free(d->edec);
    fl_prog_free(d->enc);
    fl_prog_free(d->dec);
    fl_prog_free(d->test);
    fl_tensor *t[] = {d->sw, d->sp, d->sb, d->tw, d->tp, d->tb, d->tsb, d->eo};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) fl_tensor_free(t[i]);
    free(d->predict);
    free(d->scores);
    free(d);
}

int fl_transformer_decoder_create(fl_exe *exe, const fl_prog *prog, const char *predict, int64_t bos, int64_t eos,
                                  fl_transformer_decoder **out)
{
    if (!exe || !prog || !predict || !out)
        return fl__err(FL_EINVAL, "fl_transformer_decoder_create: exe, prog, predict or out is NULL");
    *out = NULL;
    fl_transformer_decoder *d = calloc(1, sizeof *d);
    if (!d) return fl__err(FL_ENOMEM, "transformer decoder: out of memory");
    d->bos = bos, d->eos = eos;
    int st = FL_OK;
    if (!(d->test = fl_prog_clone(prog, 1)) || !(d->predict = fl__strdup(predict))) st = fl_last_status();
    fl_var *bias = st == FL_OK ? fl_prog_var(d->test, "src_slf_attn_bias") : NULL;
    fl_var *pv = st == FL_OK ? fl_prog_var(d->test, predict) : NULL;
    if (st == FL_OK &&
        (!bias || fl_var_ndim(bias) != 4 || !pv || fl_var_ndim(pv) != 2 || !fl_prog_var(d->test, "enc_output")))
        st = fl__err(FL_EINVAL,
                     "transformer decoder: the program lacks src_slf_attn_bias [B, H, S, S], enc_output or a predict "
                     "'%s' [N, V] (not a Transformer of fl_model_transformer_build?)",
                     predict);
    if (st == FL_OK) {
        d->H = fl_var_shape(bias)[1];
        d->V = fl_var_shape(pv)[1];
        fl_var *pt = fl_prog_var(d->test, "trg_pos_enc_table");
        d->max_pos = pt ? fl_var_shape(pt)[0] : 1 << 20;
        const char *ef[3] = {"src_word", "src_pos", "src_slf_attn_bias"}, *et[1] = {"enc_output"};
        const char *df[5] = {"enc_output", "trg_word", "trg_pos", "trg_slf_attn_bias", "trg_src_attn_bias"};
        const char *dt[1] = {predict};
        st = fl_prog_prune(d->test, ef, 3, et, 1, &d->enc);
        if (st == FL_OK) st = fl_prog_prune(d->test, df, 5, dt, 1, &d->dec);
        if (st == FL_OK) st = fl__tr_cache_create(d->test, fl_exe_scope(exe), d->H, predict, &d->cache);
    }
    if (st == FL_OK && (!(d->eenc = fl_exe_create(fl_exe_scope(exe))) || !(d->edec = fl_exe_create(fl_exe_scope(exe)))))
        st = fl_last_status();
    fl_tensor **t[] = {&d->sw, &d->sp, &d->sb, &d->tw, &d->tp, &d->tb, &d->tsb, &d->eo};
    for (size_t i = 0; st == FL_OK && i < sizeof t / sizeof t[0]; i++)
        if (!(*t[i] = fl_tensor_create(FL_FLOAT32, 1, (const int64_t[]){1}))) st = fl_last_status();
    if (st != FL_OK) {
        fl_transformer_decoder_free(d);
        return st;
    }
    *out = d;
    return FL_OK;
}

/* ---- one decoder step over R prefixes of length L ----------------------------------------- */

/* Runs the decoder for rows r (prefix seq + r * stride, L ids; source row src_row[r]) and
 * writes the log-probabilities of the next word to logp [R, V]. */
static int step(fl_transformer_decoder *d, const float *enc, int64_t S, int64_t D, const int *src_len, const int64_t *seq,
                int64_t stride, int64_t L, const int *src_row, int64_t R, float *logp)
{
    const int64_t H = d->H;
    FL_CHECK(fl_tensor_resize(d->tw, FL_INT64, 3, (const int64_t[]){R, L, 1}));
    FL_CHECK(fl_tensor_resize(d->tp, FL_INT64, 3, (const int64_t[]){R, L, 1}));
    FL_CHECK(fl_tensor_resize(d->tb, FL_FLOAT32, 4, (const int64_t[]){R, H, L, L}));
    FL_CHECK(fl_tensor_resize(d->tsb, FL_FLOAT32, 4, (const int64_t[]){R, H, L, S}));
    FL_CHECK(fl_tensor_resize(d->eo, FL_FLOAT32, 3, (const int64_t[]){R, S, D}));
    int64_t *w = fl_tensor_i64(d->tw), *p = fl_tensor_i64(d->tp);
    float *eo = fl_tensor_f32(d->eo);
    int *lens = malloc((size_t)R * sizeof *lens);
    if (!lens) return fl__err(FL_ENOMEM, "transformer decoder: out of memory");
    for (int64_t r = 0; r < R; r++) {
        for (int64_t j = 0; j < L; j++) w[r * L + j] = seq[r * stride + j], p[r * L + j] = j;
        memcpy(eo + r * S * D, enc + (int64_t)src_row[r] * S * D, (size_t)(S * D) * sizeof *eo);
        lens[r] = src_len[src_row[r]];
    }
    fl__tr_causal_bias(fl_tensor_f32(d->tb), R, H, L);
    fl__tr_key_bias(fl_tensor_f32(d->tsb), R, H, L, S, lens);
    free(lens);
    fl_feed feed[5] = {{"enc_output", d->eo},
                       {"trg_word", d->tw},
                       {"trg_pos", d->tp},
                       {"trg_slf_attn_bias", d->tb},
                       {"trg_src_attn_bias", d->tsb}};
    const char *fetch[1] = {d->predict};
    fl_tensor *prob;
    FL_CHECK(fl_exe_run(d->edec, d->dec, feed, 5, fetch, 1, &prob));
    if (fl_tensor_ndim(prob) != 2 || fl_tensor_dim(prob, 0) != R * L || fl_tensor_dim(prob, 1) != d->V)
        return fl__err(FL_EINVAL, "transformer decoder: predict '%s' is not [%lld, %lld]", d->predict, (long long)(R * L),
                       (long long)d->V);
    const float *pr = fl_tensor_cdata(prob);
    for (int64_t r = 0; r < R; r++) {
        const float *row = pr + (r * L + L - 1) * d->V;
        for (int64_t v = 0; v < d->V; v++) logp[r * d->V + v] = row[v] > 0 ? logf(row[v]) : NEG_INF;
    }
    return FL_OK;
}

/* The next word's log-probabilities for R rows: the cached step when enc is NULL (parent[r]:
 * the row of the previous step that row r extends), else the decoder over the prefix. */
static int next_logp(fl_transformer_decoder *d, const float *enc, int64_t S, int64_t D, const int *src_len,
                     const int64_t *seq, int64_t stride, int64_t L, const int *src_row, const int *parent, int64_t R,
                     float *logp)
{
    if (!enc) return fl__tr_cache_step(d->cache, seq, stride, L - 1, src_row, parent, R, d->V, logp);
    return step(d, enc, S, D, src_len, seq, stride, L, src_row, R, logp);
}

/* ---- beam search --------------------------------------------------------------------------- */

typedef struct {
    float score, logp;
    int beam;
    int64_t id;
} cand;

/* The k best of n candidates (by score, ties: lower beam then lower id) into best[]. */
static int top_k(const cand *c, int64_t n, int k, cand *best)
{
    int m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (m == k && c[i].score <= best[m - 1].score) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && best[j - 1].score < c[i].score) best[j] = best[j - 1], j--;
        best[j] = c[i];
    }
    return m;
}

typedef struct {
    int64_t *alive, *fin; /* [K, T + 1] sequences, bos first */
    float *alive_lp, *fin_score;
    int *fin_flag, *fin_len;
    int *par; /* [K] the alive hypothesis of the previous step that each alive one extends */
    int done;
} beam_state;

static float penalty(int64_t len, float alpha) { return powf((5.0f + (float)len) / 6.0f, alpha); }

/* Decodes sentences [0, n) of a batch whose encoder output is enc (NULL: the cache holds
 * the batch); writes out / nout. */
static int beam_batch(fl_transformer_decoder *d, const fl_transformer_decode_opts *o, const float *enc, int64_t S,
                      int64_t D, const int *src_len, int n, int64_t **out, int *nout, float *score)
{
    const int K = o->beam_size;
    const int64_t V = d->V;
    int64_t T = o->max_out_len < d->max_pos - 1 ? o->max_out_len : d->max_pos - 1;
    if (T < 1) T = 1;
    const int64_t W = T + 1; /* room per sequence */
    beam_state *b = calloc((size_t)n, sizeof *b);
    int64_t *seq = malloc((size_t)(n * K * W) * sizeof *seq);
    int *rows = malloc((size_t)(n * K) * sizeof *rows), *sent = malloc((size_t)n * sizeof *sent);
    int *parent = malloc((size_t)(n * K) * sizeof *parent), *blk = calloc((size_t)n, sizeof *blk);
    float *logp = malloc((size_t)(n * K * V) * sizeof *logp);
    cand *c = malloc((size_t)(K * V) * sizeof *c), *top = malloc((size_t)(2 * K) * sizeof *top);
    int st = b && seq && rows && sent && parent && blk && logp && c && top
                 ? FL_OK
                 : fl__err(FL_ENOMEM, "beam search: out of memory");
    for (int s = 0; st == FL_OK && s < n; s++) {
        beam_state *e = &b[s];
        e->alive = calloc((size_t)(K * W), sizeof *e->alive);
        e->fin = calloc((size_t)(K * W), sizeof *e->fin);
        e->alive_lp = malloc((size_t)K * sizeof *e->alive_lp);
        e->fin_score = malloc((size_t)K * sizeof *e->fin_score);
        e->fin_flag = calloc((size_t)K, sizeof *e->fin_flag);
        e->fin_len = calloc((size_t)K, sizeof *e->fin_len);
        e->par = calloc((size_t)K, sizeof *e->par);
        if (!e->alive || !e->fin || !e->alive_lp || !e->fin_score || !e->fin_flag || !e->fin_len || !e->par) {
            st = fl__err(FL_ENOMEM, "beam search: out of memory");
            break;
        }
        for (int k = 0; k < K; k++) {
            e->alive[k * W] = d->bos;
            e->alive_lp[k] = k ? NEG_INF : 0; /* one live hypothesis at first */
            e->fin_score[k] = NEG_INF;
        }
    }
    const float max_lp = penalty(T, o->alpha);
    for (int64_t i = 0; st == FL_OK && i < T; i++) {
        int na = 0;
        for (int s = 0; s < n; s++)
            if (!b[s].done) sent[na++] = s;
        if (!na) break;
        for (int a = 0; a < na; a++)
            for (int k = 0; k < K; k++) {
                memcpy(seq + ((int64_t)a * K + k) * W, b[sent[a]].alive + k * W, (size_t)(i + 1) * sizeof *seq);
                rows[a * K + k] = sent[a];
                parent[a * K + k] = blk[sent[a]] * K + b[sent[a]].par[k];
            }
        if ((st = next_logp(d, enc, S, D, src_len, seq, W, i + 1, rows, parent, (int64_t)na * K, logp)) != FL_OK) break;
        for (int a = 0; a < na; a++) blk[sent[a]] = a;
        const float lp = penalty(i + 1, o->alpha);
        for (int a = 0; a < na; a++) {
            beam_state *e = &b[sent[a]];
            /* grow_topk: the 2K best extensions of the alive hypotheses */
            for (int k = 0; k < K; k++)
                for (int64_t v = 0; v < V; v++) {
                    float l = e->alive_lp[k] <= NEG_INF ? NEG_INF : e->alive_lp[k] + logp[((int64_t)a * K + k) * V + v];
                    c[k * V + v] = (cand){l <= NEG_INF ? NEG_INF : l / lp, l, k, v};
                }
            int m = top_k(c, K * V, 2 * K, top);
            /* grow_finished: the K best of the finished and the new ones ending in <e> */
            cand fc[3 * K];
            int nf = 0;
            for (int k = 0; k < K; k++) fc[nf++] = (cand){e->fin_flag[k] ? e->fin_score[k] : NEG_INF, 0, -1 - k, 0};
            for (int j = 0; j < m; j++)
                if (top[j].id == d->eos) fc[nf++] = (cand){top[j].score, top[j].logp, j, 0};
            cand fbest[K];
            int mf = top_k(fc, nf, K, fbest);
            int64_t nfin[K * W];
            int nflag[K], nlen[K];
            float nscore[K];
            for (int k = 0; k < K; k++) {
                nflag[k] = 0, nscore[k] = NEG_INF, nlen[k] = 0;
                if (k >= mf || fbest[k].score <= NEG_INF) continue;
                if (fbest[k].beam < 0) { /* an old finished one */
                    int f = -1 - fbest[k].beam;
                    memcpy(nfin + k * W, e->fin + f * W, (size_t)W * sizeof *nfin);
                    nlen[k] = e->fin_len[f];
                } else {
                    const cand *t = &top[fbest[k].beam];
                    memcpy(nfin + k * W, e->alive + t->beam * W, (size_t)(i + 1) * sizeof *nfin);
                    nfin[k * W + i + 1] = t->id;
                    nlen[k] = (int)(i + 2);
                }
                nflag[k] = 1, nscore[k] = fbest[k].score;
            }
            memcpy(e->fin, nfin, sizeof nfin);
            memcpy(e->fin_flag, nflag, sizeof nflag);
            memcpy(e->fin_len, nlen, sizeof nlen);
            memcpy(e->fin_score, nscore, sizeof nscore);
            /* grow_alive: the K best extensions not ending in <e> */
            int64_t nal[K * W];
            float nlp[K];
            int q = 0;
            for (int j = 0; j < m && q < K; j++) {
                if (top[j].id == d->eos) continue;
                memcpy(nal + q * W, e->alive + top[j].beam * W, (size_t)(i + 1) * sizeof *nal);
                nal[q * W + i + 1] = top[j].id;
                e->par[q] = top[j].beam;
                nlp[q++] = top[j].logp;
            }
            for (; q < K; q++) {
                memcpy(nal + q * W, e->alive, (size_t)(i + 2) * sizeof *nal);
                e->par[q] = 0;
                nlp[q] = NEG_INF;
            }
            memcpy(e->alive, nal, sizeof nal);
            memcpy(e->alive_lp, nlp, sizeof nlp);
            /* early finish: no alive hypothesis can beat the worst finished one */
            float lowest = 0;
            int any = 0;
            for (int k = 0; k < K; k++)
                if (e->fin_flag[k]) lowest = any++ ? fminf(lowest, e->fin_score[k]) : e->fin_score[k];
            if (any && e->alive_lp[0] / max_lp < lowest) e->done = 1;
            if (e->alive_lp[0] <= NEG_INF) e->done = 1;
        }
    }
    for (int s = 0; st == FL_OK && s < n; s++) {
        beam_state *e = &b[s];
        const int64_t *best = e->fin_flag[0] ? e->fin : e->alive;
        int64_t len = e->fin_flag[0] ? e->fin_len[0] : T + 1;
        score[s] = e->fin_flag[0] ? e->fin_score[0] : e->alive_lp[0] / max_lp;
        int64_t k = 0;
        out[s] = malloc((size_t)(len > 1 ? len : 1) * sizeof **out);
        if (!out[s]) {
            st = fl__err(FL_ENOMEM, "beam search: out of memory");
            break;
        }
        for (int64_t j = 1; j < len && best[j] != d->eos; j++) out[s][k++] = best[j];
        nout[s] = (int)k;
    }
    for (int s = 0; b && s < n; s++) {
        free(b[s].alive), free(b[s].fin), free(b[s].alive_lp), free(b[s].fin_score), free(b[s].fin_flag);
        free(b[s].fin_len), free(b[s].par);
    }
    free(b), free(seq), free(rows), free(sent), free(parent), free(blk), free(logp), free(c), free(top);
    return st;
}

/* Greedy: the most probable word at each step, until <e> or T words. */
static int greedy_batch(fl_transformer_decoder *d, const fl_transformer_decode_opts *o, const float *enc, int64_t S,
                        int64_t D, const int *src_len, int n, int64_t **out, int *nout, float *score)
{
    int64_t T = o->max_out_len < d->max_pos - 1 ? o->max_out_len : d->max_pos - 1;
    if (T < 1) T = 1;
    const int64_t W = T + 1, V = d->V;
    int64_t *seq = malloc((size_t)(n * W) * sizeof *seq), *cur = malloc((size_t)(n * W) * sizeof *cur);
    int *rows = malloc((size_t)n * sizeof *rows), *done = calloc((size_t)n, sizeof *done);
    int *parent = malloc((size_t)n * sizeof *parent), *prev = calloc((size_t)n, sizeof *prev);
    float *logp = malloc((size_t)(n * V) * sizeof *logp);
    int st = seq && cur && rows && done && parent && prev && logp ? FL_OK
                                                                  : fl__err(FL_ENOMEM, "greedy decoding: out of memory");
    for (int s = 0; st == FL_OK && s < n; s++) seq[s * W] = d->bos, nout[s] = 0, score[s] = 0;
    for (int64_t i = 0; st == FL_OK && i < T; i++) {
        int na = 0;
        for (int s = 0; s < n; s++)
            if (!done[s]) {
                memcpy(cur + na * W, seq + s * W, (size_t)(i + 1) * sizeof *cur);
                parent[na] = prev[s];
                rows[na++] = s;
            }
        if (!na) break;
        if ((st = next_logp(d, enc, S, D, src_len, cur, W, i + 1, rows, parent, na, logp)) != FL_OK) break;
        for (int a = 0; a < na; a++) prev[rows[a]] = a;
        for (int a = 0; a < na; a++) {
            int64_t best = 0;
            for (int64_t v = 1; v < V; v++)
                if (logp[a * V + v] > logp[a * V + best]) best = v;
            int s = rows[a];
            seq[s * W + i + 1] = best;
            score[s] += logp[a * V + best];
            if (best == d->eos) done[s] = 1;
            else nout[s]++;
        }
    }
    for (int s = 0; st == FL_OK && s < n; s++) {
        if (!(out[s] = malloc((size_t)(nout[s] ? nout[s] : 1) * sizeof **out))) {
            st = fl__err(FL_ENOMEM, "greedy decoding: out of memory");
            break;
        }
        memcpy(out[s], seq + s * W + 1, (size_t)nout[s] * sizeof **out);
    }
    free(seq), free(cur), free(rows), free(done), free(parent), free(prev), free(logp);
    return st;
}

int fl_transformer_decode(fl_transformer_decoder *d, const fl_transformer_decode_opts *o, const int64_t *const *src,
                          const int *nsrc, int n, int64_t **out, int *nout)
{
    fl_transformer_decode_opts def = fl_transformer_decode_opts_default();
    if (!o) o = &def;
    if (!d || n < 0 || (n && (!src || !nsrc || !out || !nout)))
        return fl__err(FL_EINVAL, "fl_transformer_decode: decoder, src, nsrc, out or nout is NULL");
    if (o->beam_size < 1 || o->beam_size > 64 || o->max_out_len < 1 || o->batch_size < 1 || !(o->alpha >= 0))
        return fl__err(
            FL_EINVAL,
            "fl_transformer_decode: beam_size in [1, 64], max_out_len >= 1, batch_size >= 1, alpha >= 0 (got %d, "
            "%d, %d, %g)",
            o->beam_size, o->max_out_len, o->batch_size, (double)o->alpha);
    for (int i = 0; i < n; i++) out[i] = NULL;
    d->nscores = 0;
    float *sc = realloc(d->scores, (size_t)(n ? n : 1) * sizeof *sc);
    if (!sc) return fl__err(FL_ENOMEM, "fl_transformer_decode: out of memory");
    d->scores = sc;
    int st = FL_OK;
    for (int s0 = 0; st == FL_OK && s0 < n; s0 += o->batch_size) {
        int m = n - s0 < o->batch_size ? n - s0 : o->batch_size;
        for (int i = 0; i < m; i++)
            if (nsrc[s0 + i] < 1 || nsrc[s0 + i] > d->max_pos || !src[s0 + i]) {
                st = fl__err(FL_EINVAL, "fl_transformer_decode: source %d has %d ids (1 .. %lld, <e> included)", s0 + i,
                             nsrc[s0 + i], (long long)d->max_pos);
                break;
            }
        if (st != FL_OK) break;
        if ((st = fl__tr_src_feeds(src + s0, nsrc + s0, m, d->H, d->eos, d->sw, d->sp, d->sb)) != FL_OK) break;
        if (o->use_cache && d->cache) {
            st = fl__tr_cache_encode(d->cache, d->sw, d->sp, d->sb, nsrc + s0, m);
            if (st == FL_OK)
                st = o->beam_size == 1 ? greedy_batch(d, o, NULL, 0, 0, nsrc + s0, m, out + s0, nout + s0, sc + s0)
                                       : beam_batch(d, o, NULL, 0, 0, nsrc + s0, m, out + s0, nout + s0, sc + s0);
            continue;
        }
        fl_feed feed[3] = {{"src_word", d->sw}, {"src_pos", d->sp}, {"src_slf_attn_bias", d->sb}};
        const char *fetch[1] = {"enc_output"};
        fl_tensor *enc;
        if ((st = fl_exe_run(d->eenc, d->enc, feed, 3, fetch, 1, &enc)) != FL_OK) break;
        const int64_t S = fl_tensor_dim(enc, 1), D = fl_tensor_dim(enc, 2);
        float *e = malloc((size_t)fl_tensor_numel(enc) * sizeof *e); /* the next runs reuse enc's buffer */
        if (!e) {
            st = fl__err(FL_ENOMEM, "decoding: out of memory");
            break;
        }
        memcpy(e, fl_tensor_cdata(enc), (size_t)fl_tensor_numel(enc) * sizeof *e);
        st = o->beam_size == 1 ? greedy_batch(d, o, e, S, D, nsrc + s0, m, out + s0, nout + s0, sc + s0)
                               : beam_batch(d, o, e, S, D, nsrc + s0, m, out + s0, nout + s0, sc + s0);
        free(e);
    }
    if (st != FL_OK)
        for (int i = 0; i < n; i++) free(out[i]), out[i] = NULL;
    else d->nscores = n;
    return st;
}

int fl_transformer_decoder_scores(const fl_transformer_decoder *d, float *scores, int n)
{
    if (!d || !scores || n < 0)
        return fl__err(FL_EINVAL, "fl_transformer_decoder_scores: decoder or scores is NULL, or n %d < 0", n);
    if (n > d->nscores)
        return fl__err(FL_EINVAL, "fl_transformer_decoder_scores: n %d exceeds the %d sentences last decoded", n,
                       d->nscores);
    memcpy(scores, d->scores, (size_t)n * sizeof *scores);
    return FL_OK;
}

int fl_transformer_eval_bleu(fl_transformer_decoder *dec, const fl_transformer_decode_opts *o,
                             const fl_translation_data *data, FILE *fout, fl_bleu_score *score, double *sentences_per_s)
{
    if (!dec || !data || !score) return fl__err(FL_EINVAL, "fl_transformer_eval_bleu: decoder, data or score is NULL");
    fl_transformer_decode_opts def = fl_transformer_decode_opts_default();
    if (!o) o = &def;
    const int64_t n = fl_translation_size(data);
    if (n < 1) return fl__err(FL_EINVAL, "fl_transformer_eval_bleu: the data holds no pair");
    fl_bleu_stats bs;
    memset(&bs, 0, sizeof bs);
    const int chunk = o->batch_size;
    const int64_t **src = malloc((size_t)chunk * sizeof *src);
    int *nsrc = malloc((size_t)chunk * sizeof *nsrc), *nout = malloc((size_t)chunk * sizeof *nout);
    int64_t **out = calloc((size_t)chunk, sizeof *out);
    int st = src && nsrc && nout && out ? FL_OK : fl__err(FL_ENOMEM, "BLEU evaluation: out of memory");
    double t0 = fl__now();
    for (int64_t s0 = 0; st == FL_OK && s0 < n; s0 += chunk) {
        int m = (int)(n - s0 < chunk ? n - s0 : chunk);
        for (int i = 0; i < m; i++) fl_translation_pair(data, s0 + i, &src[i], &nsrc[i], NULL, NULL);
        if ((st = fl_transformer_decode(dec, o, src, nsrc, m, out, nout)) != FL_OK) break;
        for (int i = 0; i < m && st == FL_OK; i++) {
            const int64_t *ref;
            int nref;
            fl_translation_pair(data, s0 + i, NULL, NULL, &ref, &nref);
            st = fl_bleu_add(&bs, out[i], nout[i], ref, nref);
            for (int k = 0; fout && k < nout[i]; k++) {
                const char *t = fl_translation_token(data, 1, out[i][k]);
                fprintf(fout, "%s%s", k ? " " : "", t ? t : "<unk>");
            }
            if (fout) fputc('\n', fout);
        }
        for (int i = 0; i < m; i++) free(out[i]), out[i] = NULL;
    }
    double secs = fl__now() - t0;
    if (st == FL_OK) st = fl_bleu_compute(&bs, score);
    if (st == FL_OK && sentences_per_s) *sentences_per_s = secs > 0 ? (double)n / secs : 0;
    free(src), free(nsrc), free(nout), free(out);
    return st;
}
