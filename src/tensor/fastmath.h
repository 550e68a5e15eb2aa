/*
 * fastmath.h - branch-free float approximations that loops calling them can vectorise (libm's
 * expf does not): the one home of the exp used by the softmax kernel (kernels.c) and by gelu
 * (src/graph/ops_nlp.c).
 */
#ifndef FLEET_TENSOR_FASTMATH_H
#define FLEET_TENSOR_FASTMATH_H

#include <stdint.h>
#include <string.h>

/* exp(x) for x in float range: 2^k * p(r), r = x - k ln2, |r| <= ln2/2, degree-6 minimax.
 * Branch-free (selects and integer bit tricks only) so loops calling it vectorise. */
static inline float fl__fast_expf(float x)
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

#endif
