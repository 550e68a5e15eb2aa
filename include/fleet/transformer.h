/*
 * fleet/transformer.h - the Transformer of Paddle's machine-translation benchmark: the
 * builder, its parallel-corpus reader, greedy and beam-search decoding through the
 * executor, corpus BLEU, and the planted translation task of `fleet-datagen translation`.
 *
 * The model (src/models/transformer.c) follows the benchmark's model.py: word embeddings
 * scaled by sqrt(d_model) plus sinusoidal position encodings (a frozen table), n_layer
 * encoder and decoder layers of multi-head attention and a position-wise feed-forward
 * network, each sub-layer wrapped in preprocess_cmd ("n": layer_norm) and postprocess_cmd
 * ("da": dropout, residual add), causal self-attention in the decoder (the mask is the fed
 * trg_slf_attn_bias), cross-attention over the encoder output, and the output projection
 * (the shared embedding's transpose with weight_sharing), with label-smoothed cross-entropy
 * weighted by lbl_weight and divided by the number of real tokens.  Its data layout is the
 * benchmark reader's (reader.py): a data line is `source tokens \t target tokens`; the
 * source gets <e> appended, the target <s> prepended for the decoder input and <e> appended
 * for the label; every batch is padded (with <e>) to its longest sentence.
 *
 * Not here: the training loop (fleet-lightning's `transformer` row, fleet/app.h, or
 * examples) and the attention blocks shared with BERT (src/models/attention.c).
 */
#ifndef FLEET_TRANSFORMER_H
#define FLEET_TRANSFORMER_H

#include <stdio.h>

#include "fleet/exec.h"
#include "fleet/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- corpus BLEU ---------------------------------------------------------------------------
 *
 * BLEU-4 as multi-bleu.perl computes it with one reference: per sentence, the clipped
 * counts of matching n-grams (n = 1..4; an n-gram of the hypothesis counts at most as often
 * as it occurs in the reference) and the n-gram totals of the hypothesis are summed over
 * the corpus, as are the hypothesis and reference lengths; BLEU = 100 * BP *
 * exp(mean of log p_n), p_n = correct_n / total_n, a zero p_n making BLEU 0, and BP =
 * exp(1 - ref_len / hyp_len) when hyp_len < ref_len, else 1.  Tokens are ids (a line's
 * words mapped one to one). */
typedef struct {
    int64_t correct[4], total[4];
    int64_t hyp_len, ref_len;
} fl_bleu_stats;

typedef struct {
    double bleu;         /* 0..100 */
    double precision[4]; /* p_1..p_4 in [0, 1] */
    double bp, ratio;    /* brevity penalty, hyp_len / ref_len */
    int64_t hyp_len, ref_len;
} fl_bleu_score;

/* Adds one hypothesis / reference pair to s (zero it first).  Empty sequences are allowed. */
FL_API int fl_bleu_add(fl_bleu_stats *s, const int64_t *hyp, int64_t nhyp, const int64_t *ref, int64_t nref);
/* The score of the accumulated statistics.  No reference token: FL_EINVAL (multi-bleu.perl
 * refuses too); no hypothesis token: BLEU 0. */
FL_API int fl_bleu_compute(const fl_bleu_stats *s, fl_bleu_score *out);

/* ---- the model ------------------------------------------------------------------------------ */

typedef struct {
    int64_t src_vocab_size, trg_vocab_size; /* required (equal with weight_sharing) */
    int max_length;                         /* rows of the position tables (default 256) */
    int n_layer;                            /* encoder layers = decoder layers (6) */
    int n_head;                             /* 8 */
    int d_key, d_value;                     /* per head (64, 64) */
    int d_model;                            /* 512 */
    int d_inner_hid;                        /* feed-forward width (2048) */
    float prepostprocess_dropout;           /* 0.1 */
    float attention_dropout;                /* 0.1 */
    float relu_dropout;                     /* 0.1 */
    const char *preprocess_cmd;             /* "n" */
    const char *postprocess_cmd;            /* "da" */
    int weight_sharing;                     /* 0: separate source / target embeddings and an fc output */
    float label_smooth_eps;                 /* 0.1 (0: hard labels) */
    int64_t bos_idx;                        /* 0: <s>, the word embeddings' padding_idx */
} fl_model_transformer_config;

/* Transformer-base (the values in brackets above); vocabulary sizes 0 (set them). */
FL_API fl_model_transformer_config fl_model_transformer_default(void);
/* A small configuration for the planted task and tests: d_model 64, 2 + 2 layers, 4 heads
 * of 16, d_ff 128, dropout 0. */
FL_API fl_model_transformer_config fl_model_transformer_small(void);

#define FL_MODEL_TRANSFORMER_FEEDS 9
#define FL_MODEL_TRANSFORMER_MAX_LAYERS 64 /* n_layer at most */

typedef struct {
    /* inputs, the benchmark's names and layout (B sentences, S / T padded lengths, H heads):
     * src_word, src_pos int64 [B, S, 1]; src_slf_attn_bias float32 [B, H, S, S];
     * trg_word, trg_pos int64 [B, T, 1]; trg_slf_attn_bias [B, H, T, T]; trg_src_attn_bias
     * [B, H, T, S]; lbl_word int64 [B * T, 1]; lbl_weight float32 [B * T, 1] */
    fl_var *src_word, *src_pos, *src_slf_attn_bias;
    fl_var *trg_word, *trg_pos, *trg_slf_attn_bias, *trg_src_attn_bias;
    fl_var *lbl_word, *lbl_weight;
    fl_var *enc_output; /* [B, S, d_model], named "enc_output" (decoding splits the program there) */
    fl_var *logits;     /* [B * T, trg_vocab_size] */
    fl_var *predict;    /* softmax of logits */
    fl_var *sum_cost, *token_num;
    fl_var *loss;                                /* avg_cost = sum_cost / token_num */
    fl_var *use_var[FL_MODEL_TRANSFORMER_FEEDS]; /* the inputs above, in that order */
    int nuse_var;
    /* the recompute checkpoints (fl_opt_set_recompute): each encoder layer's output, then
     * each decoder layer's, 2 * n_layer in all */
    fl_var *checkpoints[2 * FL_MODEL_TRANSFORMER_MAX_LAYERS];
    int ncheckpoints;
} fl_model_transformer;

/* Builds the network into p (fleet/models.h's contract).  FL_EINVAL names a bad field. */
FL_API int fl_model_transformer_build(fl_prog *p, const fl_model_transformer_config *cfg, fl_model_transformer *out);
/* The benchmark's optimizer: Adam(beta1 0.9, beta2 0.997, epsilon 1e-9) at learning_rate *
 * noam_decay(d_model, warmup_steps), added to p (which must hold m); clip_norm > 0 adds
 * GradientClipByGlobalNorm(clip_norm).  NULL + error on failure.  The caller minimizes. */
FL_API fl_opt *fl_model_transformer_optimizer(fl_prog *p, const fl_model_transformer_config *cfg, float learning_rate,
                                              int64_t warmup_steps, float clip_norm);

/* ---- the corpus reader ---------------------------------------------------------------------
 *
 * Loads a corpus into memory (every file of the list, lines `src \t trg`; a line with
 * another number of fields is skipped, as the benchmark's reader does) and cuts each epoch
 * into batches as the benchmark's DataProcessor does: the pairs are shuffled (seed, epoch)
 * unless sort_type is "global" (sorted by length); "pool" then sorts each run of pool_size
 * pairs by length, alternately ascending and descending; pairs whose longer side exceeds
 * max_length (or whose shorter side is below min_length) are dropped; a batch grows while
 * (its longest sentence) x (its sentences + 1) <= batch_size tokens (use_token_batch, else
 * batch_size sentences); the batch order is shuffled with shuffle_batch.  Lengths count the
 * added <s> / <e>.  Batch k of an epoch goes to rank k mod nranks. */
typedef struct fl_translation_data fl_translation_data;

typedef struct {
    int batch_size;        /* tokens per batch, padding included (default 4096) */
    int use_token_batch;   /* default 1 */
    int pool_size;         /* default 10000 */
    const char *sort_type; /* "pool" (default), "global" or "none" */
    int shuffle;           /* default 1 */
    int shuffle_batch;     /* default 1 */
    int min_length;        /* default 0 */
    int max_length;        /* default 256 */
    int n_head;            /* heads of the bias tensors (default 8) */
    uint64_t seed;         /* default 1 */
    int rank, nranks;      /* default 0, 1 */
    int threads;           /* reader threads of fl_translation_begin (default 1, at most 32) */
} fl_translation_opts;

FL_API fl_translation_opts fl_translation_opts_default(void);
/* Vocabulary files hold one token per line (id = line number, from 0) and must contain
 * <s>, <e> and <unk> (their ids are the source vocabulary's, as in the benchmark).  Errors
 * name the file and line. */
FL_API int fl_translation_load(const char *src_vocab, const char *trg_vocab, const char *const *files, int nfiles,
                               const fl_translation_opts *o, fl_translation_data **out);
FL_API void fl_translation_free(fl_translation_data *d);
/* Pairs loaded; vocabulary sizes (trg 0: source, 1: target); the ids of <s>, <e>, <unk>. */
FL_API int64_t fl_translation_size(const fl_translation_data *d);
FL_API int64_t fl_translation_vocab_size(const fl_translation_data *d, int trg);
FL_API int fl_translation_marks(const fl_translation_data *d, int64_t *bos, int64_t *eos, int64_t *unk);
/* Pair i: source ids (with the final <e>) and target ids (without <s> and <e>: the
 * reference), pointers owned by d. */
FL_API int fl_translation_pair(const fl_translation_data *d, int64_t i, const int64_t **src, int *nsrc, const int64_t **trg,
                               int *ntrg);
/* The token of id in the source (trg 0) or target (trg 1) vocabulary, or NULL. */
FL_API const char *fl_translation_token(const fl_translation_data *d, int trg, int64_t id);

/* Cuts epoch `epoch` into batches (as above); returns how many fall to this rank, or a
 * negative status. */
FL_API int64_t fl_translation_epoch(fl_translation_data *d, int epoch);

/* The nine input tensors of one batch (the model's use_var order), owned by the batch. */
typedef struct fl_translation_batch fl_translation_batch;
FL_API fl_translation_batch *fl_translation_batch_create(void);
FL_API void fl_translation_batch_free(fl_translation_batch *b);
/* Fills b with batch k (0 .. fl_translation_epoch()-1) of this rank. */
FL_API int fl_translation_batch_fill(const fl_translation_data *d, int64_t k, fl_translation_batch *b);
FL_API const fl_tensor *fl_translation_batch_tensor(const fl_translation_batch *b, int i);
FL_API const char *fl_translation_batch_name(int i);
/* The threaded pass (the dataset path): fl_translation_begin cuts epoch `epoch` as
 * fl_translation_epoch does (ending a pass in progress) and starts o.threads reader threads
 * that fill this rank's batches in order, at most 2 x threads batches ahead of the
 * consumer; it returns the number of batches of this rank, or a negative status.
 * fl_translation_next moves the next batch into b (its old tensors go back to the readers):
 * 1, 0 at the end of the pass, or a negative status (a reader's error, or FL_ETIMEDOUT
 * after 600 s).  Batch k is the same whatever the number of threads (the cut depends on
 * (seed, epoch) only, a batch's content on k only).  fl_translation_epoch and
 * fl_translation_free end the pass.  One consumer thread; d is not otherwise used while a
 * pass runs. */
FL_API int64_t fl_translation_begin(fl_translation_data *d, int epoch);
FL_API int fl_translation_next(fl_translation_data *d, fl_translation_batch *b);
/* Sentences and real target tokens (the label weights' sum) of the batch. */
FL_API int fl_translation_batch_counts(const fl_translation_batch *b, int64_t *sentences, int64_t *tokens);

/* ---- decoding --------------------------------------------------------------------------------
 *
 * Greedy (beam_size 1) and beam search over a program holding the model's forward
 * network (a trained main program, its clone for test, or a loaded inference model whose
 * inputs are the seven source and target inputs and whose output is predict).  The
 * program is split once at "enc_output" into an encoder and a decoder program
 * (fl_prog_prune); per batch of sentences the encoder runs once, then the decoder once per
 * output position.  With use_cache (the default) a step computes only the new position: the
 * self-attention keys and values of earlier positions are kept per layer and per hypothesis
 * (gathered when beam search reselects its hypotheses) and the cross-attention keys and
 * values of the encoder output are computed once per batch (src/models/transformer_cache.c;
 * a program whose decoder does not carry fl_model_transformer_build's parameter names is
 * decoded without it).  Without the cache the decoder re-runs over the whole prefix; both
 * give the same words, the scores equal within float rounding.  Beam search is Paddle's (beam_search_v2 of the
 * dygraph Transformer): at step i every alive hypothesis is extended by every word,
 * scored by log-probability / ((5 + i + 1) / 6)^alpha, the best 2 x beam_size
 * candidates are split into finished ones (ending in <e>) and the beam_size best alive
 * ones, and decoding stops at max_out_len or when no alive hypothesis can beat the worst
 * finished one.  The result is the best finished hypothesis (the best alive one if none
 * finished), without <s> and <e>. */
typedef struct fl_transformer_decoder fl_transformer_decoder;

typedef struct {
    int beam_size;   /* default 4 (1: greedy) */
    float alpha;     /* length penalty exponent, default 0.6 */
    int max_out_len; /* default 256; the output never exceeds the model's max_length - 1 */
    int batch_size;  /* sentences per encoder run (default 32) */
    int use_cache;   /* default 1: the key / value cache; 0: the decoder over the whole prefix */
} fl_transformer_decode_opts;

FL_API fl_transformer_decode_opts fl_transformer_decode_opts_default(void);
/* Splits a test clone of prog at "enc_output" for decoding with exe's scope, which holds
 * the trained parameters (the decoder runs its own executors on that scope; exe must
 * outlive it).  predict: the name of the model's predict variable (a loaded inference
 * model's output).  bos / eos: the target ids of <s> and <e>. */
FL_API int fl_transformer_decoder_create(fl_exe *exe, const fl_prog *prog, const char *predict, int64_t bos, int64_t eos,
                                         fl_transformer_decoder **out);
FL_API void fl_transformer_decoder_free(fl_transformer_decoder *d);
/* Decodes n source sentences src[i] (nsrc[i] ids, <e> included) into out[i] (malloc'ed,
 * caller frees each) of nout[i] ids. */
FL_API int fl_transformer_decode(fl_transformer_decoder *d, const fl_transformer_decode_opts *o, const int64_t *const *src,
                                 const int *nsrc, int n, int64_t **out, int *nout);

/* The scores of the outputs of the last successful fl_transformer_decode on d (its first
 * n sentences): beam search, the length-penalised log-probability of the hypothesis;
 * greedy, the sum of the chosen words' log-probabilities (<e> included).  FL_EINVAL when n
 * exceeds the sentences last decoded. */
FL_API int fl_transformer_decoder_scores(const fl_transformer_decoder *d, float *scores, int n);

/* Decodes every pair of data and scores the outputs against the references; *score gets
 * the BLEU, *sentences_per_s (may be NULL) the decoding speed.  fout (may be NULL) gets one
 * line of target tokens per pair, in corpus order. */
FL_API int fl_transformer_eval_bleu(fl_transformer_decoder *dec, const fl_transformer_decode_opts *o,
                                    const fl_translation_data *data, FILE *fout, fl_bleu_score *score,
                                    double *sentences_per_s);

/* ---- the planted translation task (`fleet-datagen translation`) ------------------------------
 *
 * A source language of determiners, adjectives, nouns (each of one of two genders),
 * verbs, adverbs, prepositions and conjunctions, sentences being clauses
 * `NP verb [adverb] NP [preposition NP]` joined by conjunctions (NP = determiner, 0-2
 * adjectives, noun), of min_len..max_len tokens.  The target is a deterministic
 * transduction: every word has its own translation; adjectives follow their noun, in
 * reverse order; determiners and adjectives agree with the noun's gender, the verb with
 * its subject's; the adverb precedes the verb; prepositions become postpositions.  The
 * reference of every line is therefore known (BLEU 100 is reachable); the baseline is the
 * word-by-word translation (each word's first form, source order).  docs/datagen.md. */
typedef struct {
    int64_t sentences;                     /* training pairs (required, >= 1) */
    int64_t test_sentences;                /* default -1: sentences / 10, at least 1 */
    uint64_t seed;                         /* default 1 */
    int min_len, max_len;                  /* source tokens per sentence (default 5, 50; max_len >= 15) */
    int nouns, adjectives, verbs, adverbs; /* default 40, 20, 20, 10 */
} fl_translation_datagen;

typedef struct {
    int64_t src_vocab, trg_vocab; /* vocabulary sizes (with the three marks) */
    int64_t train_tokens, test_tokens;
    double ceiling_bleu;  /* BLEU of the planted translation on the test split: 100 */
    double baseline_bleu; /* word-by-word mapping without reordering or agreement */
} fl_translation_datagen_info;

FL_API fl_translation_datagen fl_translation_datagen_default(void);
/* DIR/train/part-00000, DIR/test/part-00000, DIR/src_vocab.txt, DIR/trg_vocab.txt,
 * DIR/vocab_all.txt (both, for weight sharing) and DIR/planted.json; atomically written,
 * byte-identical for the same configuration. */
FL_API int fl_translation_generate(const fl_translation_datagen *g, const char *out, fl_translation_datagen_info *info);

#ifdef __cplusplus
}
#endif
#endif
