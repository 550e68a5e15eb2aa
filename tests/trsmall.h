/*
 * trsmall.h - the small Transformer of the Transformer tests (test_transformer.c,
 * test_transformer_decode.c, test_nlp_dist.c): the planted translation task written to a
 * directory, its reader, and the one trainer: fl_model_transformer_small() sized to the
 * data's vocabularies, Adam with noam decay and the global-norm clip of
 * fl_model_transformer_optimizer, optionally AMP bf16 (O1 or O2), on token-count batches of
 * the training split in epoch order; the model stays open for decoding the test split.
 */
#ifndef FLEET_TESTS_TRSMALL_H
#define FLEET_TESTS_TRSMALL_H

#include <string.h>
#include <time.h>

#include "testhelp.h"
#include "fleet.h"
#include "fleet/transformer.h"

/* The planted task in dir: n pairs of 5 .. max_len tokens; small_lexicon: 16 nouns, 8
 * adjectives, 8 verbs and 4 adverbs (a task that trains in fewer steps). */
static inline void trs_gen(const char *dir, uint64_t seed, int64_t n, int max_len, int small_lexicon,
                           fl_translation_datagen_info *info)
{
    fl_translation_datagen g = fl_translation_datagen_default();
    g.sentences = n;
    g.seed = seed;
    g.max_len = max_len;
    if (small_lexicon) g.nouns = 16, g.adjectives = 8, g.verbs = 8, g.adverbs = 4;
    fl_translation_datagen_info local;
    CHECK_OK(fl_translation_generate(&g, dir, info ? info : &local));
}

/* The split ("train" or "test") of the task in dir, read with o. */
static inline fl_translation_data *trs_load(const char *dir, const char *split, const fl_translation_opts *o)
{
    char sv[512], tv[512], f[512];
    snprintf(sv, sizeof sv, "%s/src_vocab.txt", dir);
    snprintf(tv, sizeof tv, "%s/trg_vocab.txt", dir);
    snprintf(f, sizeof f, "%s/%s/part-00000", dir, split);
    const char *files[1] = {f};
    fl_translation_data *d = NULL;
    CHECK_OK(fl_translation_load(sv, tv, files, 1, o, &d));
    return d;
}

typedef struct {
    int steps;
    float lr_scale; /* learning rate lr_scale x noam_decay(d_model, warmup) */
    int warmup;
    float clip; /* by the global norm; 0: none */
    int amp;    /* 0 float32, 1 bf16 O1, 2 bf16 O2 */
} trs_opts;

typedef struct {
    fl_translation_data *train, *test; /* batches of 1,024 tokens, 4 heads */
    fl_prog *p;
    fl_model_transformer m;
    fl_opt *opt;
    fl_exe *e;
    fl_transformer_decoder *dec; /* the trained model's decoder (cache on) */
    float first, last;           /* the loss of the first and the last step */
    double seconds;              /* the training steps' wall time */
} trs_model;

static inline double trs_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The feeds of batch b, in the model's order. */
static inline void trs_feeds(const fl_translation_batch *b, fl_feed *feed)
{
    for (int i = 0; i < FL_MODEL_TRANSFORMER_FEEDS; i++)
        feed[i] = (fl_feed){fl_translation_batch_name(i), fl_translation_batch_tensor(b, i)};
}

/* Trains the small Transformer on the task in dir (trs_gen) for o->steps steps. */
static inline void trs_train(const char *dir, const trs_opts *o, trs_model *t)
{
    memset(t, 0, sizeof *t);
    fl_translation_opts to = fl_translation_opts_default();
    to.batch_size = 1024;
    to.n_head = 4;
    t->train = trs_load(dir, "train", &to);
    t->test = trs_load(dir, "test", &to);
    fl_model_transformer_config c = fl_model_transformer_small();
    c.src_vocab_size = fl_translation_vocab_size(t->train, 0);
    c.trg_vocab_size = fl_translation_vocab_size(t->train, 1);
    t->p = fl_prog_create();
    CHECK_OK(fl_model_transformer_build(t->p, &c, &t->m));
    t->opt = fl_model_transformer_optimizer(t->p, &c, o->lr_scale, o->warmup, o->clip);
    CHECK(t->opt);
    if (o->amp) {
        fl_amp_opts a;
        memset(&a, 0, sizeof a);
        a.dtype = FL_BFLOAT16;
        a.use_pure_fp16 = o->amp == 2;
        CHECK_OK(fl_amp_decorate_optimizer(t->opt, &a));
    }
    CHECK_OK(fl_opt_minimize(t->opt, t->m.loss));
    t->e = fl_exe_create(NULL);
    CHECK(t->e);
    CHECK_OK(fl_exe_run(t->e, fl_prog_startup(t->p), NULL, 0, NULL, 0, NULL));
    fl_translation_batch *b = fl_translation_batch_create();
    CHECK(b);
    double t0 = trs_now();
    int step = 0;
    for (int ep = 0; step < o->steps; ep++) {
        int64_t nb = fl_translation_epoch(t->train, ep);
        CHECK(nb > 0);
        for (int64_t k = 0; k < nb && step < o->steps; k++, step++) {
            CHECK_OK(fl_translation_batch_fill(t->train, k, b));
            fl_feed feed[FL_MODEL_TRANSFORMER_FEEDS];
            trs_feeds(b, feed);
            const char *fetch[1] = {fl_var_name(t->m.loss)};
            fl_tensor *loss;
            CHECK_OK(fl_exe_run(t->e, t->p, feed, FL_MODEL_TRANSFORMER_FEEDS, fetch, 1, &loss));
            t->last = *(const float *)fl_tensor_cdata(loss);
            if (!step) t->first = t->last;
        }
    }
    t->seconds = trs_now() - t0;
    fl_translation_batch_free(b);
    CHECK_OK(fl_transformer_decoder_create(t->e, t->p, fl_var_name(t->m.predict), 0, 1, &t->dec));
}

/* The corpus BLEU of the test split, beam search of width beam (1: greedy); *sps (may be
 * NULL): sentences decoded per second. */
static inline double trs_bleu(const trs_model *t, int beam, fl_bleu_score *sc, double *sps)
{
    fl_transformer_decode_opts dop = fl_transformer_decode_opts_default();
    dop.beam_size = beam;
    fl_bleu_score local;
    if (!sc) sc = &local;
    CHECK_OK(fl_transformer_eval_bleu(t->dec, &dop, t->test, NULL, sc, sps));
    return sc->bleu;
}

static inline void trs_free(trs_model *t)
{
    fl_transformer_decoder_free(t->dec);
    fl_exe_free(t->e);
    fl_opt_free(t->opt);
    fl_prog_free(t->p);
    fl_translation_free(t->train), fl_translation_free(t->test);
    memset(t, 0, sizeof *t);
}

#endif
