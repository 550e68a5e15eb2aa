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

#endif
