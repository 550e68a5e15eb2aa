/*
 * half.h - one float32 <-> bfloat16 / float16 conversion of one value each, inline and
 * branch-free so that a loop over them vectorises.  The only copy of these roundings: the
 * tensor kernels (dnn.c, half.c), the collectives' reductions (src/coll/reduce.c, through
 * the bulk fl__cvt_* of tensor_internal.h) and the parameter server's bfloat16 dense wire
 * (src/ps) all use them.  Needs nothing but <stdint.h> and <string.h>; layers above tensor
 * may include it.
 *
 * Both directions round to nearest even, keep a NaN a quiet NaN with its sign and the top
 * bits of its payload (what x86's VCVTPS2PH does), and float16 makes values from 65520 up
 * infinite and keeps subnormals, so the scalar code, F16C and AVX-512 give the same bits
 * (tests/test_amp_fp16.c compares them).
 */
#ifndef FL_TENSOR_HALF_H
#define FL_TENSOR_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t fl__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float fl__bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* float32 -> bfloat16: the top 16 bits, rounded to nearest even. */
static inline uint16_t fl__f32_to_bf16(float f)
{
    uint32_t u = fl__f32_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

static inline float fl__bf16_to_f32(uint16_t h) { return fl__bits_f32((uint32_t)h << 16); }

/* float16 -> float32, exact (after M. Maratyszcza's FP16 library: normal and subnormal
 * results computed both ways and one selected). */
static inline float fl__f16_to_f32(uint16_t h)
{
    uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
    float norm = fl__bits_f32((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    float denorm = fl__bits_f32((two_w >> 17) | (126u << 23)) - 0.5f;
    return fl__bits_f32(sign | (two_w < (1u << 27) ? fl__f32_bits(denorm) : fl__f32_bits(norm)));
}

/* float32 -> float16 (same source): the rounding is done by the FPU's round-to-nearest-even
 * on a rescaled sum, so it needs the default rounding mode (never changed in this library). */
static inline uint16_t fl__f32_to_f16(float f)
{
    float base = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    uint32_t w = fl__f32_bits(f), shl1_w = w + w, sign = w & 0x80000000u, bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = fl__bits_f32((bias >> 1) + 0x07800000u) + base;
    uint32_t bits = fl__f32_bits(base), nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
    uint32_t nan = 0x7E00u | ((w >> 13) & 0x3ffu);
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? nan : nonsign));
}

#endif
