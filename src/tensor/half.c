/*
 * half.c - float32 <-> float16 (IEEE binary16) conversions for the cast op and the matrix
 * products of float16 AMP.  Chosen once at run time: AVX-512F (16 values per instruction),
 * F16C (8), or the portable scalar code of half.h; all three round to nearest even, keep NaN a
 * NaN, make values beyond 65504 infinite and produce subnormals, so every path gives the
 * same bits (tests/test_amp_fp16.c compares them).
 */
#include <stdatomic.h>
#include <string.h>

#include "tensor_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FL_HALF_X86 1
#endif

static void to_f16_scalar(uint16_t *restrict y, const float *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = fl__f32_to_f16(x[i]);
}

static void to_f32_scalar(float *restrict y, const uint16_t *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = fl__f16_to_f32(x[i]);
}

#ifdef FL_HALF_X86
__attribute__((target("avx,f16c"))) static void to_f16_f16c(uint16_t *restrict y, const float *restrict x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    to_f16_scalar(y + i, x + i, n - i);
}

__attribute__((target("avx,f16c"))) static void to_f32_f16c(float *restrict y, const uint16_t *restrict x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    to_f32_scalar(y + i, x + i, n - i);
}

__attribute__((target("avx512f"))) static void to_f16_avx512(uint16_t *restrict y, const float *restrict x, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    to_f16_scalar(y + i, x + i, n - i);
}

__attribute__((target("avx512f"))) static void to_f32_avx512(float *restrict y, const uint16_t *restrict x, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))));
    to_f32_scalar(y + i, x + i, n - i);
}
#endif

typedef struct {
    const char *name;
    void (*to_f16)(uint16_t *restrict, const float *restrict, int64_t);
    void (*to_f32)(float *restrict, const uint16_t *restrict, int64_t);
} half_impl;

/* Best first; the scalar row always fits. */
static const half_impl impls[] = {
#ifdef FL_HALF_X86
    {"avx512f", to_f16_avx512, to_f32_avx512},
    {"f16c", to_f16_f16c, to_f32_f16c},
#endif
    {"scalar", to_f16_scalar, to_f32_scalar},
};

static _Atomic(const half_impl *) chosen;
static atomic_int forced = -1; /* tests: an index into impls, -1 for the CPU's best */

static int impl_fits(const half_impl *h)
{
#ifdef FL_HALF_X86
    if (!strcmp(h->name, "avx512f")) return __builtin_cpu_supports("avx512f");
    if (!strcmp(h->name, "f16c")) return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#endif
    return !strcmp(h->name, "scalar");
}

static const half_impl *impl(void)
{
    const half_impl *h = atomic_load(&chosen);
    if (h) return h;
    int f = atomic_load(&forced);
    size_t n = sizeof impls / sizeof impls[0];
    h = &impls[n - 1];
    for (size_t i = 0; i < n; i++)
        if ((f < 0 || (size_t)f == i) && impl_fits(&impls[i])) {
            h = &impls[i];
            break;
        }
    atomic_store(&chosen, h);
    return h;
}

const char *fl__half_impl_force(const char *name)
{
    int ix = -1;
    for (size_t i = 0; name && i < sizeof impls / sizeof impls[0]; i++)
        if (!strcmp(impls[i].name, name) && impl_fits(&impls[i])) ix = (int)i;
    if (name && ix < 0) return NULL;
    atomic_store(&forced, ix);
    atomic_store(&chosen, (const half_impl *)NULL);
    return impl()->name;
}

void fl__cvt_f32_to_f16(uint16_t *restrict y, const float *restrict x, int64_t n) { impl()->to_f16(y, x, n); }

void fl__cvt_f16_to_f32(float *restrict y, const uint16_t *restrict x, int64_t n) { impl()->to_f32(y, x, n); }

static int low_or_f32(fl_dtype t) { return t == FL_FLOAT32 || t == FL_BFLOAT16 || t == FL_FLOAT16; }

int fl__cvt_any(void *y, fl_dtype to, const void *x, fl_dtype from, int64_t n)
{
    if (!low_or_f32(to) || !low_or_f32(from))
        return fl__err(FL_EUNSUPPORTED, "conversion from %s to %s (float32, bfloat16 and float16 only)",
                       fl_dtype_name(from), fl_dtype_name(to));
    if (to == from) {
        memcpy(y, x, (size_t)n * fl_dtype_size(to));
        return FL_OK;
    }
    if (from == FL_FLOAT32) {
        if (to == FL_BFLOAT16) fl__cvt_f32_to_bf16(y, x, n);
        else fl__cvt_f32_to_f16(y, x, n);
        return FL_OK;
    }
    if (to == FL_FLOAT32) {
        if (from == FL_BFLOAT16) fl__cvt_bf16_to_f32(y, x, n);
        else fl__cvt_f16_to_f32(y, x, n);
        return FL_OK;
    }
    /* bfloat16 <-> float16: through float32, a block at a time */
    float tmp[256];
    const char *xs = x;
    char *ys = y;
    for (int64_t i = 0; i < n; i += 256) {
        int64_t k = n - i < 256 ? n - i : 256;
        FL_CHECK(fl__cvt_any(tmp, FL_FLOAT32, xs + i * 2, from, k));
        FL_CHECK(fl__cvt_any(ys + i * 2, to, tmp, FL_FLOAT32, k));
    }
    return FL_OK;
}
