/*
 * optim_kernels.c - the inner loops of the dense and lazy-sparse parameter updates
 * (src/graph/ops_optim.c calls them once per contiguous segment: the whole parameter, or
 * one row of a SelectedRows gradient), and so do the parameter servers (src/ps/optim.c, per
 * dense block or sparse row): one copy of each rule for both.
 *
 * Compiled for AVX-512, AVX2 and baseline x86-64 (GCC function multiversioning; the loader
 * picks the best the CPU has).  Each element goes through the same operations in the same
 * order in every clone (ISO C mode: no contraction into FMA; sqrt and division are
 * correctly rounded in every width), so the three clones give bit-identical results.
 * Adam's update of a 430k-parameter tower was 42% of a CTR-DNN step at batch 32 in the
 * baseline (SSE2) build.
 */
#include <math.h>

#include "tensor_internal.h"

/* Without L2 the term is left out, not multiplied by 0: a parameter at +-inf stays there (as
 * Paddle's sgd op leaves it) instead of becoming 0 * inf = NaN. */
FL_CLONES void fl__sgd_seg(float *restrict p, const float *restrict g, int64_t n, float lr, float l2)
{
    if (l2 == 0.0f)
        for (int64_t j = 0; j < n; j++) p[j] -= lr * g[j];
    else
        for (int64_t j = 0; j < n; j++) p[j] -= lr * (g[j] + l2 * p[j]);
}

FL_CLONES void fl__momentum_seg(float *restrict p, float *restrict v, const float *restrict g, int64_t n, float lr,
                                float l2, float mu, int nesterov)
{
    if (nesterov) {
        for (int64_t j = 0; j < n; j++) {
            float gj = g[j] + l2 * p[j], vj = fl__flush_tiny(mu * v[j] + gj);
            v[j] = vj;
            p[j] -= lr * (gj + mu * vj);
        }
    } else {
        for (int64_t j = 0; j < n; j++) {
            float gj = g[j] + l2 * p[j], vj = fl__flush_tiny(mu * v[j] + gj);
            v[j] = vj;
            p[j] -= lr * vj;
        }
    }
}

FL_CLONES void fl__adagrad_seg(float *restrict p, float *restrict m, const float *restrict g, int64_t n, float lr, float l2,
                               float eps)
{
    for (int64_t j = 0; j < n; j++) {
        float gj = g[j] + l2 * p[j], mj = fl__flush_tiny(m[j] + gj * gj);
        m[j] = mj;
        p[j] -= lr * gj / (sqrtf(mj) + eps);
    }
}

FL_CLONES void fl__adam_seg(float *restrict p, float *restrict m1, float *restrict m2, const float *restrict g, int64_t n,
                            const fl__adam_coef *k)
{
    const float lr = k->lr, l2 = k->l2, b1 = k->b1, b2 = k->b2, cb1 = k->cb1, cb2 = k->cb2, eps = k->eps;
    for (int64_t j = 0; j < n; j++) {
        float gj = g[j] + l2 * p[j];
        float a = fl__flush_tiny(b1 * m1[j] + cb1 * gj), b = fl__flush_tiny(b2 * m2[j] + cb2 * gj * gj);
        m1[j] = a;
        m2[j] = b;
        p[j] -= lr * a / (sqrtf(b) + eps);
    }
}

int fl__adam_coef_init(fl__adam_coef *k, float lr, float l2, double b1, double b2, double eps, double pow1, double pow2)
{
    if (!(pow1 >= 0.0 && pow1 < 1.0 && pow2 >= 0.0 && pow2 < 1.0)) return -1;
    k->lr = (float)(lr * sqrt(1.0 - pow2) / (1.0 - pow1));
    k->l2 = l2;
    k->b1 = (float)b1;
    k->b2 = (float)b2;
    k->cb1 = (float)(1.0 - b1);
    k->cb2 = (float)(1.0 - b2);
    k->eps = (float)(eps * sqrt(1.0 - pow2));
    return 0;
}
