/*
 * ops_bn.h - what batch_norm's kernels (ops_bn.c, float32 and their bfloat16 forms) share:
 * the run-time checks of X and the parameters, the statistics of one channel block and the
 * gradient's per-channel coefficients, so that every form normalises with the same mean and
 * variance to the last bit.
 *
 * X in channel blocks of B (nChw16c / nChw8c, layout.h): element (n, c, s) at
 * ((n * C/B + c/B) * S + s) * B + c%B; the B channels of a block are the vector lanes.  One
 * pass: sums of d = x - K and of d^2, K the block's first value per lane (a shift inside the
 * data's range, so that var = E[d^2] - E[d]^2 does not cancel as E[x^2] - E[x]^2 would), in
 * float over FL_BN_CHUNK positions at a time, then in double.
 */
#ifndef FL_OPS_BN_H
#define FL_OPS_BN_H

#include <stdint.h>
#include <string.h>

#include "graph_internal.h"

/* Run-time layout [N, C, S] of batch_norm's X (input 0, float32, rank 2 to 5), with inputs 1 ..
 * nparam (Scale .. Variance) checked to be float32 with C values; the error names the op and
 * the variables. */
int fl__bn_dims(fl_kctx *c, int64_t *n, int64_t *ch, int64_t *s, int nparam);

enum { FL_BN_CHUNK = 256, FL_BN_MAXB = 16 };

/* p1 = sum over positions [s0, e) of d = r - K, p2 = sum of d^2, per lane of B (GCC vector
 * types: one register of B floats, lowered to narrower ones by the baseline clones). */
#define BN_SHIFT_SUMS(NAME, B)                                                                                             \
    static inline __attribute__((always_inline)) void NAME(const float *restrict r, int64_t s0, int64_t e, const float *K, \
                                                           float *p1, float *p2)                                           \
    {                                                                                                                      \
        typedef float v __attribute__((vector_size((B) * sizeof(float))));                                                 \
        v k, a1 = {0}, a2 = {0};                                                                                           \
        memcpy(&k, K, sizeof k);                                                                                           \
        for (int64_t i = s0; i < e; i++) {                                                                                 \
            v x;                                                                                                           \
            memcpy(&x, r + i * (B), sizeof x);                                                                             \
            const v d = x - k;                                                                                             \
            a1 += d;                                                                                                       \
            a2 += d * d;                                                                                                   \
        }                                                                                                                  \
        memcpy(p1, &a1, sizeof a1);                                                                                        \
        memcpy(p2, &a2, sizeof a2);                                                                                        \
    }
BN_SHIFT_SUMS(bn_shift_sums16, 16)
BN_SHIFT_SUMS(bn_shift_sums8, 8)

/* mean[l] and var[l] (biased, >= 0) of the B channels of block cb of X (N images, CB
 * blocks, S positions). */
static inline __attribute__((always_inline)) void fl__bn_blk_stats(const float *x, int64_t N, int64_t CB, int64_t cb,
                                                                   int64_t S, const int B, double *mean, double *var)
{
    const double M = (double)(N * S);
    float K[FL_BN_MAXB];
    double s1[FL_BN_MAXB] = {0}, s2[FL_BN_MAXB] = {0};
    for (int l = 0; l < B; l++) K[l] = x[cb * S * B + l];
    for (int64_t n = 0; n < N; n++) {
        const float *restrict r = x + (n * CB + cb) * S * B;
        for (int64_t s0 = 0; s0 < S; s0 += FL_BN_CHUNK) {
            const int64_t e = S - s0 < FL_BN_CHUNK ? S : s0 + FL_BN_CHUNK;
            float p1[FL_BN_MAXB], p2[FL_BN_MAXB];
            if (B == 16) bn_shift_sums16(r, s0, e, K, p1, p2);
            else bn_shift_sums8(r, s0, e, K, p1, p2);
            for (int l = 0; l < B; l++) s1[l] += p1[l], s2[l] += p2[l];
        }
    }
    for (int l = 0; l < B; l++) {
        const double d1 = s1[l] / M, v = s2[l] / M - d1 * d1;
        mean[l] = K[l] + d1, var[l] = v > 0.0 ? v : 0.0;
    }
}

/* The gradient's coefficients of the B channels from c0, from their sums sb (of dY) and ss (of
 * dY * (X - mean), multiplied here by the inverse std iv): Scale@GRAD ds and Bias@GRAD db (NULL:
 * not wanted), and k, kb, ks of dX = k * (dY - kb - (X - mean) * iv * ks) over M = N*S values
 * (kb = ks = 0 on global statistics). */
static inline __attribute__((always_inline)) void fl__bn_grad_coefs(const int B, int64_t c0, double M, int global,
                                                                    const float *scale, const float *iv, const double *sb,
                                                                    double *ss, float *ds, float *db, float *k, float *kb,
                                                                    float *ks)
{
    for (int l = 0; l < B; l++) {
        ss[l] *= iv[l];
        if (ds) ds[c0 + l] = (float)ss[l];
        if (db) db[c0 + l] = (float)sb[l];
        k[l] = scale[c0 + l] * iv[l];
        kb[l] = global || M == 0 ? 0.0f : (float)(sb[l] / M);
        ks[l] = global || M == 0 ? 0.0f : (float)(ss[l] / M);
    }
}

#endif
