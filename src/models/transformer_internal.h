/*
 * transformer_internal.h - helpers shared by the Transformer's reader
 * (translation_reader.c) and decoder (transformer_decode.c); not exported.
 */
#ifndef FL_TRANSFORMER_INTERNAL_H
#define FL_TRANSFORMER_INTERNAL_H

#include "fleet/transformer.h"

/* The additive mask value of a position not attended to (Paddle's reader: -1e9). */
#define FL_TR_MASK (-1e9f)

/* b [B, H, T, T]: -1e9 above the diagonal (a position attends to itself and earlier ones). */
void fl__tr_causal_bias(float *b, int64_t B, int64_t H, int64_t T);
/* b [B, H, Q, S]: -1e9 at key positions >= len[i] of row i. */
void fl__tr_key_bias(float *b, int64_t B, int64_t H, int64_t Q, int64_t S, const int *len);
/* word, pos int64 [B, S, 1] (padded with pad, positions 0 there) and bias float32
 * [B, H, S, S] of the B sequences seq[i] (len[i] ids); S = the longest. */
int fl__tr_src_feeds(const int64_t *const *seq, const int *len, int64_t B, int64_t H, int64_t pad, fl_tensor *word,
                     fl_tensor *pos, fl_tensor *bias);

/* The score of an impossible word or hypothesis (log 0). */
#define FL_TR_NEG_INF (-1e30f)

/* ---- the decoder's key / value cache (transformer_cache.c) ---------------------------------- */

typedef struct fl__tr_cache fl__tr_cache;
/* Splits the test program `test` into the cross (encoder + cross-attention keys / values),
 * first and next step programs, run by executors on scope; *out NULL (and FL_OK) when the
 * program does not have the structure of fl_model_transformer_build's decoder. */
int fl__tr_cache_create(const fl_prog *test, fl_scope *scope, int64_t H, const char *predict, fl__tr_cache **out);
void fl__tr_cache_free(fl__tr_cache *c);
/* Runs the encoder of a batch of n sentences (the source feeds of fl__tr_src_feeds; src_len
 * their lengths) and keeps its cross-attention keys / values for the steps. */
int fl__tr_cache_encode(fl__tr_cache *c, const fl_tensor *sw, const fl_tensor *sp, const fl_tensor *sb, const int *src_len,
                        int n);
/* Step t: R rows, row r extending the prefix seq + r * stride (its word at t is the new
 * one) for batch sentence src_row[r], its cache being row parent[r] of step t - 1 (unused
 * at t = 0); the log-probabilities of the next word into logp [R, V]. */
int fl__tr_cache_step(fl__tr_cache *c, const int64_t *seq, int64_t stride, int64_t t, const int *src_row, const int *parent,
                      int64_t R, int64_t V, float *logp);

#endif
