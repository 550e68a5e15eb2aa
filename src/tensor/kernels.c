/*
 * kernels.c - CPU kernels on contiguous float32 arrays.  Matrix products go to OpenBLAS;
 * everything else is a plain loop the compiler vectorises (no calls per element: exp is
 * an inline polynomial, accurate to about 2 ulp over the float range).
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "tensor_internal.h"

/* Hot elementwise kernels are compiled for AVX-512, AVX2 and baseline x86-64; the loader
 * picks the best the CPU has (GCC function multiversioning). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define FL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FL_CLONES
#endif

void fl__sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
               const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    if (fl__sgemm_parallel(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m,
                (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
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

/* exp(x) for x in float range: 2^k * p(r), r = x - k ln2, |r| <= ln2/2, degree-6 minimax.
 * Branch-free (selects and integer bit tricks only) so loops calling it vectorise. */
static inline float fast_expf(float x)
{
    x = x < 88.3762626647949f ? x : 88.3762626647949f;
    x = x > -87.3365447504f ? x : -87.3365447504f;
    /* round to nearest with the 1.5*2^23 trick */
    float kf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - kf * 0.693359375f;
    r = r + kf * 2.12194440e-4f;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    int32_t ki = (int32_t)kf;
    uint32_t bits = (uint32_t)(ki + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

static inline float tanh1(float v)
{
    float a = v < 0.0f ? -v : v;
    float e = fast_expf(-2.0f * a);
    float t = (1.0f - e) / (1.0f + e);
    /* small |x|: odd series keeps relative precision where 1-e cancels */
    float v2 = v * v;
    float s = v * (1.0f + v2 * (-0.333333333f + v2 * (0.133333333f + v2 * -0.0539682540f)));
    float r = v < 0.0f ? -t : t;
    return a < 0.0625f ? s : r;
}
static inline float sigmoid1(float v) { return 1.0f / (1.0f + fast_expf(-v)); }
static inline float relu1(float v) { return v > 0.0f ? v : 0.0f; }

/* In-place (y == x) and out-of-place loops are separate so both vectorise: a possibly
 * overlapping pair makes the compiler fall back to scalar code at run time. */
#define UNARY_KERNEL(name, f)                                                                     \
    FL_CLONES void name(float *y, const float *x, int64_t n)                                      \
    {                                                                                             \
        if (y == x) {                                                                             \
            float *restrict z = y;                                                                \
            for (int64_t i = 0; i < n; i++) z[i] = f(z[i]);                                       \
        } else {                                                                                  \
            float *restrict o = y;                                                                \
            const float *restrict a = x;                                                          \
            for (int64_t i = 0; i < n; i++) o[i] = f(a[i]);                                       \
        }                                                                                         \
    }
UNARY_KERNEL(fl__tanh, tanh1)
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
            yr[j] = fast_expf(xr[j] - mx);
            s += yr[j];
        }
        float inv = 1.0f / s;
        for (int64_t j = 0; j < n; j++) yr[j] *= inv;
    }
}
