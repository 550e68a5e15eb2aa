/*
 * kernels.c - CPU kernels on contiguous float32 arrays.  Matrix products go to OpenBLAS;
 * everything else is a plain loop the compiler vectorises (no calls per element: exp is
 * an inline polynomial, accurate to about 2 ulp over the float range).
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "fastmath.h"
#include "tensor_internal.h"

/* Hot elementwise kernels carry FL_CLONES (tensor_internal.h). */

void fl__sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
               int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    if (fl__sgemm_parallel(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
                alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

FL_CLONES void fl__vadd(float *restrict y, const float *restrict a, const float *restrict b, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

FL_CLONES void fl__vaxpy(float *restrict y, float alpha, const float *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

FL_CLONES void fl__vscale(float *restrict y, float alpha, const float *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = alpha * x[i];
}

void fl__vscal(float *restrict y, float alpha, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] *= alpha;
}

void fl__vfill(float *y, float v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = v;
}

FL_CLONES void fl__add_rowvec(float *restrict y, const float *restrict b, int64_t m, int64_t n)
{
    for (int64_t i = 0; i < m; i++) {
        float *restrict r = y + i * n;
        for (int64_t j = 0; j < n; j++) r[j] += b[j];
    }
}

FL_CLONES void fl__col_sum(float *restrict db, const float *restrict dy, int64_t m, int64_t n, int accumulate)
{
    if (!accumulate) memset(db, 0, (size_t)n * sizeof *db);
    for (int64_t i = 0; i < m; i++) {
        const float *restrict r = dy + i * n;
        for (int64_t j = 0; j < n; j++) db[j] += r[j];
    }
}

/* tanh as a rational function (odd degree 13 over even degree 6, the minimax fit Eigen
 * uses), clamped where tanh rounds to +-1 in float: one division, no exp; about 6 ulp. */
static inline float tanh1(float v)
{
    const float c = 7.90531110763549805f;
    float x = v < -c ? -c : (v > c ? c : v);
    float x2 = x * x;
    float p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 + -8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    p = p * x;
    float q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    return p / q;
}
static inline float sigmoid1(float v) { return 1.0f / (1.0f + fl__fast_expf(-v)); }
static inline float relu1(float v) { return v > 0.0f ? v : 0.0f; }

/* In-place (y == x) and out-of-place loops are separate so both vectorise: a possibly
 * overlapping pair makes the compiler fall back to scalar code at run time. */
#define UNARY_KERNEL(name, f)                                \
    FL_CLONES void name(float *y, const float *x, int64_t n) \
    {                                                        \
        if (y == x) {                                        \
            float *restrict z = y;                           \
            for (int64_t i = 0; i < n; i++) z[i] = f(z[i]);  \
        } else {                                             \
            float *restrict o = y;                           \
            const float *restrict a = x;                     \
            for (int64_t i = 0; i < n; i++) o[i] = f(a[i]);  \
        }                                                    \
    }
UNARY_KERNEL(fl__tanh, tanh1)

FL_CLONES void fl__act_grad(int act, float *dx, const float *out, const float *dy, int64_t n)
{
    float *restrict d = dx;
    const float *restrict o = out, *restrict g = dy;
    if (dx == dy || dx == out) { /* in place: the compiler cannot assume no overlap */
        for (int64_t i = 0; i < n; i++) {
            float oi = out[i], gi = dy[i];
            dx[i] = act == FL_ACT_RELU   ? (oi > 0.0f ? gi : 0.0f)
                    : act == FL_ACT_TANH ? gi * (1.0f - oi * oi)
                                         : gi * oi * (1.0f - oi);
        }
        return;
    }
    switch (act) {
    case FL_ACT_RELU:
        for (int64_t i = 0; i < n; i++) d[i] = o[i] > 0.0f ? g[i] : 0.0f;
        break;
    case FL_ACT_TANH:
        for (int64_t i = 0; i < n; i++) d[i] = g[i] * (1.0f - o[i] * o[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++) d[i] = g[i] * o[i] * (1.0f - o[i]);
        break;
    }
}
UNARY_KERNEL(fl__sigmoid, sigmoid1)
UNARY_KERNEL(fl__relu, relu1)

FL_CLONES void fl__softmax_rows(float *restrict y, const float *restrict x, int64_t m, int64_t n)
{
    for (int64_t i = 0; i < m; i++) {
        const float *restrict xr = x + i * n;
        float *restrict yr = y + i * n;
        float mx = xr[0];
        for (int64_t j = 1; j < n; j++) mx = xr[j] > mx ? xr[j] : mx;
        float s = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            yr[j] = fl__fast_expf(xr[j] - mx);
            s += yr[j];
        }
        float inv = 1.0f / s;
        for (int64_t j = 0; j < n; j++) yr[j] *= inv;
    }
}
