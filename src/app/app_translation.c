/*
 * app_translation.c - the Transformer's rows of the app tables (see app_internal.h): the
 * "translation" reader over fleet/transformer.h's corpus reader (token-count batches, one
 * per step, this worker's share), and the "bleu" metric, which decodes test_data with the
 * trained or loaded model and scores it (infer writes the decoded sentences).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app_internal.h"
#include "fleet/transformer.h"

typedef struct {
    const fl_app_config *c;
    fl_translation_data *d;
    fl_translation_batch *b;
    const fl_tensor *feed_of[FL_APP_MAX_FEEDS + 1]; /* the batch tensor of each feed, by name */
    const char *names[FL_APP_MAX_FEEDS + 1];
    int nfeeds;
    int64_t planned_epoch; /* the epoch whose batches d holds (-1: none) */
    int64_t max_steps;     /* option max_steps of a training reader (0: none) */
    int64_t nbatch;
} tr_reader;

int fl__app_translation_vocabs(const fl_app_config *c, const char *what, const char *dir, char *src, char *trg, size_t cap)
{
    if (c->weight_sharing) {
        FL_CHECK(fl__app_data_file(what, dir, "vocab_all.txt", src, cap));
        snprintf(trg, cap, "%s", src);
        return FL_OK;
    }
    FL_CHECK(fl__app_data_file(what, dir, "src_vocab.txt", src, cap));
    return fl__app_data_file(what, dir, "trg_vocab.txt", trg, cap);
}

/* The data of dir with the options of c (train: shuffled, this rank's batches). */
static int load(const fl_app_config *c, const char *dir, int train, int rank, int nranks, int n_head,
                fl_translation_data **out)
{
    const char *what = train ? "train_data" : "test_data";
    char sv[FL_APP_PATH + 64], tv[FL_APP_PATH + 64], **files = NULL;
    int n = 0;
    FL_CHECK(fl__app_translation_vocabs(c, what, dir, sv, tv, sizeof sv));
    FL_CHECK(fl__app_list_dir(what, dir, &files, &n));
    fl_translation_opts o = fl_translation_opts_default();
    o.batch_size = c->batch_size;
    o.pool_size = c->pool_size;
    o.shuffle = o.shuffle_batch = train;
    o.max_length = c->max_length;
    o.n_head = n_head;
    o.seed = c->seed;
    o.rank = train ? rank : 0;
    o.nranks = train ? nranks : 1;
    o.threads = c->thread < 1 ? 1 : c->thread > 32 ? 32 : c->thread; /* reader threads of the pass */
    int st = fl_translation_load(sv, tv, (const char *const *)files, n, &o, out);
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
    return st;
}

void fl__app_translation_close(void *p)
{
    tr_reader *r = p;
    if (!r) return;
    fl_translation_free(r->d);
    fl_translation_batch_free(r->b);
    free(r);
}

int fl__app_translation_open(const fl_app_config *c, const char *dir, int train, int rank, int nranks, fl_var *const *feeds,
                             int nfeeds, void **st)
{
    *st = NULL;
    fl_var *bias = NULL;
    for (int i = 0; i < nfeeds; i++)
        if (!strcmp(fl_var_name(feeds[i]), "src_slf_attn_bias")) bias = feeds[i];
    if (!bias || fl_var_ndim(bias) != 4)
        return fl__err(FL_EINVAL, "translation reader: the model has no src_slf_attn_bias [B, H, S, S] input");
    tr_reader *r = calloc(1, sizeof *r);
    if (!r) return fl__err(FL_ENOMEM, "translation reader: out of memory");
    r->c = c;
    r->planned_epoch = -1;
    r->max_steps = train ? c->max_steps : 0;
    int s = load(c, dir, train, rank, nranks, (int)fl_var_shape(bias)[1], &r->d);
    if (s == FL_OK && !(r->b = fl_translation_batch_create())) s = fl_last_status();
    for (int i = 0; s == FL_OK && i < nfeeds; i++) {
        const char *nm = fl_var_name(feeds[i]);
        int k = 0;
        while (fl_translation_batch_name(k) && strcmp(fl_translation_batch_name(k), nm)) k++;
        if (!fl_translation_batch_name(k))
            s = fl__err(FL_EINVAL, "translation reader: input '%s' is none of the Transformer's inputs", nm);
        r->names[i] = fl_translation_batch_name(k);
    }
    r->nfeeds = nfeeds;
    if (s != FL_OK) {
        fl__app_translation_close(r);
        return s;
    }
    *st = r;
    return FL_OK;
}

static int plan(tr_reader *r, int epoch)
{
    if (r->planned_epoch == epoch) return FL_OK;
    int64_t n = fl_translation_epoch(r->d, epoch);
    if (n < 0) return (int)n;
    r->nbatch = r->max_steps && n > r->max_steps ? r->max_steps : n;
    r->planned_epoch = epoch;
    return FL_OK;
}

int64_t fl__app_translation_steps(void *p, int batch_size)
{
    tr_reader *r = p;
    return plan(r, 0) == FL_OK ? r->nbatch : 1;
}

int fl__app_translation_threads(void *p) { return 1; }

int fl__app_translation_pass(void *p, fl_exe *e, fl_prog *prog, int train, int thread, const char *const *fetch, int nfetch,
                             int epoch, app_pass *out, app_batch_fn fn, void *user)
{
    tr_reader *r = p;
    memset(out, 0, sizeof *out);
    int64_t nb = fl_translation_begin(r->d, epoch); /* batches prepared on reader threads */
    if (nb < 0) return (int)nb;
    r->nbatch = nb, r->planned_epoch = epoch;
    double t0 = fl__now(), loss = 0;
    int64_t tokens = 0;
    fl_feed feed[FL_APP_MAX_FEEDS];
    const char *f[2] = {fetch[0], nfetch > 1 ? fetch[1] : NULL};
    int nf = nfetch > 2 ? 2 : nfetch;
    for (int64_t k = 0; k < r->nbatch; k++) {
        int got = fl_translation_next(r->d, r->b);
        if (got < 0) return got;
        if (!got)
            return fl__err(FL_EINVAL, "translation reader: the pass ended after %lld of %lld batches", (long long)k,
                           (long long)r->nbatch);
        for (int i = 0; i < r->nfeeds; i++) {
            int j = 0;
            while (strcmp(fl_translation_batch_name(j), r->names[i])) j++;
            feed[i] = (fl_feed){r->names[i], fl_translation_batch_tensor(r->b, j)};
        }
        fl_tensor *res[2];
        FL_CHECK(fl_exe_run(e, prog, feed, r->nfeeds, f, nf, res));
        int64_t sentences, toks;
        fl_translation_batch_counts(r->b, &sentences, &toks);
        out->instances += sentences;
        out->batches++;
        tokens += toks;
        if (train) loss += *(const float *)fl_tensor_cdata(res[0]);
        if (fn) FL_CHECK(fn(user, res, nf, (int)sentences));
        if (train && r->c->print_period && out->batches % r->c->print_period == 0) {
            double dt = fl__now() - t0;
            printf("transformer epoch %d batch %lld/%lld: loss %.4f, %.0f tokens/s\n", epoch + 1, (long long)out->batches,
                   (long long)r->nbatch, loss / (double)out->batches, dt > 0 ? (double)tokens / dt : 0);
            fflush(stdout);
        }
    }
    out->seconds = fl__now() - t0;
    out->loss = out->batches ? loss / (double)out->batches : 0;
    if (train && out->batches)
        printf("transformer epoch %d: %lld target tokens in %.2f s (%.0f tokens/s)\n", epoch + 1, (long long)tokens,
               out->seconds, out->seconds > 0 ? (double)tokens / out->seconds : 0);
    return FL_OK;
}

/* ---- the bleu metric --------------------------------------------------------------------- */

static int decode_test(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *predict, FILE *out, fl_bleu_score *score,
                       double *sps, int64_t *n)
{
    if (!c->test_data[0]) return fl__err(FL_EINVAL, "option test_data is not set (a translation corpus to decode)");
    fl_var *bias = fl_prog_var(prog, "src_slf_attn_bias");
    if (!bias || fl_var_ndim(bias) != 4)
        return fl__err(FL_EINVAL, "model_dir '%s': no src_slf_attn_bias input, not a Transformer", c->model_dir);
    fl_translation_data *d;
    FL_CHECK(load(c, c->test_data, 0, 0, 1, (int)fl_var_shape(bias)[1], &d));
    int64_t bos, eos;
    fl_translation_marks(d, &bos, &eos, NULL);
    fl_transformer_decoder *dec;
    int st = fl_transformer_decoder_create(exe, prog, fl_var_name(predict), bos, eos, &dec);
    fl_transformer_decode_opts o = fl_transformer_decode_opts_default();
    o.beam_size = c->beam_size;
    o.alpha = (float)c->alpha;
    o.max_out_len = c->max_out_len;
    if (st == FL_OK) st = fl_transformer_eval_bleu(dec, &o, d, out, score, sps);
    if (n) *n = fl_translation_size(d);
    fl_transformer_decoder_free(dec);
    fl_translation_free(d);
    return st;
}

int fl__app_bleu_evaluate(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *const *feeds, int nfeeds,
                          fl_var *predict, double *metric)
{
    fl_bleu_score s;
    double sps = 0;
    int64_t n = 0;
    FL_CHECK(decode_test(c, exe, prog, predict, NULL, &s, &sps, &n));
    printf("transformer: test BLEU %.2f (%.1f/%.1f/%.1f/%.1f, BP %.3f, ratio %.3f) on %lld sentences, beam %d alpha %g, "
           "%.1f sentences/s\n",
           s.bleu, 100 * s.precision[0], 100 * s.precision[1], 100 * s.precision[2], 100 * s.precision[3], s.bp, s.ratio,
           (long long)n, c->beam_size, c->alpha, sps);
    fflush(stdout);
    *metric = s.bleu;
    return FL_OK;
}

int fl__app_bleu_infer(const fl_app_config *c, fl_exe *exe, fl_prog *prog, fl_var *predict, FILE *out, int64_t *lines)
{
    fl_bleu_score s;
    return decode_test(c, exe, prog, predict, out, &s, NULL, lines);
}
