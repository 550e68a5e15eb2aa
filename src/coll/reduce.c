/*
 * reduce.c - reduction kernels of the collectives: SUM/MAX/MIN/AVG over float32, float64,
 * int64, and float16/bfloat16 accumulated in float32 with one round-to-nearest-even store.
 *
 * Two shapes: a fast path for two sources of one plain dtype written to a distinct
 * destination (the common case of the shared-memory and TCP paths), and a blockwise path
 * (blocks of BLK elements accumulated in a stack buffer) for everything else - more sources,
 * half precision, AVG, or a destination that is one of the sources.  Half precision is
 * converted by the tensor layer's fl__cvt_* (half.h's rounding; F16C/AVX-512 for float16).
 * The loops are plain C that GCC vectorises, compiled for AVX-512, AVX2 and baseline x86-64
 * (function multiversioning: tensor_internal.h's FL_CLONES, as in src/tensor/kernels.c).
 */
#include <string.h>

#include "coll_internal.h"
#include "../tensor/tensor_internal.h" /* the float16/bfloat16 conversions, one copy */

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* the loops below are static: the clone list without the visibility attribute */
#undef FL_CLONES
#define FL_CLONES FL_CLONE_TARGETS

#define BLK 2048

void fl__coll_to_f32(float *dst, const void *src, fl_dtype dt, size_t n)
{
    if (dt == FL_FLOAT16) fl__cvt_f16_to_f32(dst, src, (int64_t)n);
    else if (dt == FL_BFLOAT16) fl__cvt_bf16_to_f32(dst, src, (int64_t)n);
    else if ((const void *)dst != src) memcpy(dst, src, n * 4);
}

void fl__coll_from_f32(void *dst, fl_dtype dt, const float *src, size_t n)
{
    if (dt == FL_FLOAT16) fl__cvt_f32_to_f16(dst, src, (int64_t)n);
    else if (dt == FL_BFLOAT16) fl__cvt_f32_to_bf16(dst, src, (int64_t)n);
    else if (dst != (const void *)src) memcpy(dst, src, n * 4);
}

/* Element-wise kernels: d = a op b (three arrays) and d op= a (accumulate). */
#define OP_SUM(x, y) ((x) + (y))
#define OP_MAX(x, y) ((x) > (y) ? (x) : (y))
#define OP_MIN(x, y) ((x) < (y) ? (x) : (y))
#define OP_ISUM(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y))) /* wraps instead of UB */

#define DEF_KERNELS(T, SFX, SUM)                                                                          \
    FL_CLONES static void k3_sum_##SFX(T *restrict d, const T *restrict a, const T *restrict b, size_t n) \
    {                                                                                                     \
        for (size_t i = 0; i < n; i++) d[i] = SUM(a[i], b[i]);                                            \
    }                                                                                                     \
    FL_CLONES static void k3_max_##SFX(T *restrict d, const T *restrict a, const T *restrict b, size_t n) \
    {                                                                                                     \
        for (size_t i = 0; i < n; i++) d[i] = OP_MAX(a[i], b[i]);                                         \
    }                                                                                                     \
    FL_CLONES static void k3_min_##SFX(T *restrict d, const T *restrict a, const T *restrict b, size_t n) \
    {                                                                                                     \
        for (size_t i = 0; i < n; i++) d[i] = OP_MIN(a[i], b[i]);                                         \
    }                                                                                                     \
    FL_CLONES static void k2_sum_##SFX(T *restrict d, const T *restrict a, size_t n)                      \
    {                                                                                                     \
        for (size_t i = 0; i < n; i++) d[i] = SUM(d[i], a[i]);                                            \
    }                                                                                                     \
    FL_CLONES static void k2_max_##SFX(T *restrict d, const T *restrict a, size_t n)                      \
    {                                                                                                     \
        for (size_t i = 0; i < n; i++) d[i] = OP_MAX(d[i], a[i]);                                         \
    }                                                                                                     \
    FL_CLONES static void k2_min_##SFX(T *restrict d, const T *restrict a, size_t n)                      \
    {                                                                                                     \
        for (size_t i = 0; i < n; i++) d[i] = OP_MIN(d[i], a[i]);                                         \
    }                                                                                                     \
    static void k3_##SFX(T *d, const T *a, const T *b, size_t n, fl_coll_op op)                           \
    {                                                                                                     \
        if (op == FL_COLL_MAX) k3_max_##SFX(d, a, b, n);                                                  \
        else if (op == FL_COLL_MIN) k3_min_##SFX(d, a, b, n);                                             \
        else k3_sum_##SFX(d, a, b, n);                                                                    \
    }                                                                                                     \
    static void k2_##SFX(T *d, const T *a, size_t n, fl_coll_op op)                                       \
    {                                                                                                     \
        if (op == FL_COLL_MAX) k2_max_##SFX(d, a, n);                                                     \
        else if (op == FL_COLL_MIN) k2_min_##SFX(d, a, n);                                                \
        else k2_sum_##SFX(d, a, n);                                                                       \
    }

DEF_KERNELS(float, f32, OP_SUM)
DEF_KERNELS(double, f64, OP_SUM)
DEF_KERNELS(int64_t, i64, OP_ISUM)

FL_CLONES static void div_f32(float *restrict d, float k, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = d[i] / k;
}
FL_CLONES static void div_f64(double *restrict d, double k, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = d[i] / k;
}
static void div_i64(int64_t *d, int64_t k, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = d[i] / k;
}

/* Loads n source elements (dtype sdt) as the accumulation type into acc. */
static void load_acc(void *acc, const void *src, fl_dtype sdt, size_t n)
{
    if (fl__is_half(sdt)) fl__coll_to_f32(acc, src, sdt, n);
    else memcpy(acc, src, n * fl_dtype_size(sdt));
}

void fl__coll_reduce(void *dst, fl_dtype ddt, const void *const *srcs, int nsrc, fl_dtype sdt, size_t n, fl_coll_op op,
                     int avg_div)
{
    if (n == 0) return;
    fl_dtype adt = (ddt == FL_FLOAT64) ? FL_FLOAT64 : (ddt == FL_INT64) ? FL_INT64 : FL_FLOAT32;
    int alias = 0;
    for (int k = 0; k < nsrc; k++) alias |= srcs[k] == dst;
    int avg = op == FL_COLL_AVG && avg_div != 1;
    if (op == FL_COLL_AVG) op = FL_COLL_SUM;
    /* fast paths: no conversion, no scaling, distinct destination */
    if (sdt == ddt && !fl__is_half(ddt) && !avg && !alias) {
        if (nsrc == 1) {
            memcpy(dst, srcs[0], n * fl_dtype_size(ddt));
            return;
        }
        if (adt == FL_FLOAT32) {
            k3_f32(dst, srcs[0], srcs[1], n, op);
            for (int k = 2; k < nsrc; k++) k2_f32(dst, srcs[k], n, op);
        } else if (adt == FL_FLOAT64) {
            k3_f64(dst, srcs[0], srcs[1], n, op);
            for (int k = 2; k < nsrc; k++) k2_f64(dst, srcs[k], n, op);
        } else {
            k3_i64(dst, srcs[0], srcs[1], n, op);
            for (int k = 2; k < nsrc; k++) k2_i64(dst, srcs[k], n, op);
        }
        return;
    }
    /* blockwise: accumulate each block of every source in a stack buffer, then store */
    _Alignas(64) unsigned char accb[BLK * 8], tmpb[BLK * 8];
    size_t ss = fl_dtype_size(sdt), ds = fl_dtype_size(ddt);
    for (size_t o = 0; o < n; o += BLK) {
        size_t m = n - o < BLK ? n - o : BLK;
        load_acc(accb, (const char *)srcs[0] + o * ss, sdt, m);
        for (int k = 1; k < nsrc; k++) {
            const void *s = (const char *)srcs[k] + o * ss;
            if (fl__is_half(sdt)) {
                load_acc(tmpb, s, sdt, m);
                s = tmpb;
            }
            if (adt == FL_FLOAT32) k2_f32((float *)accb, s, m, op);
            else if (adt == FL_FLOAT64) k2_f64((double *)accb, s, m, op);
            else k2_i64((int64_t *)accb, s, m, op);
        }
        if (avg) {
            if (adt == FL_FLOAT32) div_f32((float *)accb, (float)avg_div, m);
            else if (adt == FL_FLOAT64) div_f64((double *)accb, (double)avg_div, m);
            else div_i64((int64_t *)accb, avg_div, m);
        }
        void *d = (char *)dst + o * ds;
        if (fl__is_half(ddt)) fl__coll_from_f32(d, ddt, (const float *)accb, m);
        else memcpy(d, accb, m * ds);
    }
}

/* Copies with non-temporal (streaming) stores where the CPU has them: the destination lines
 * are not read first (no read-for-ownership) and do not evict the working set. */
static void nt_copy(void *dst, const void *src, size_t bytes)
{
#if defined(__x86_64__)
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > bytes) head = bytes;
    memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, bytes);
#else
    memcpy(dst, src, bytes);
#endif
}

void fl__coll_reduce_nt(void *dst, fl_dtype ddt, const void *const *srcs, int nsrc, fl_dtype sdt, size_t n, fl_coll_op op,
                        int avg_div)
{
    _Alignas(64) unsigned char blk[BLK * 8];
    const void *bs[nsrc];
    size_t ss = fl_dtype_size(sdt), ds = fl_dtype_size(ddt);
    for (size_t o = 0; o < n; o += BLK) {
        size_t m = n - o < BLK ? n - o : BLK;
        for (int k = 0; k < nsrc; k++) bs[k] = (const char *)srcs[k] + o * ss;
        fl__coll_reduce(blk, ddt, bs, nsrc, sdt, m, op, avg_div);
        nt_copy((char *)dst + o * ds, blk, m * ds);
    }
#if defined(__x86_64__)
    _mm_sfence();
#endif
}
