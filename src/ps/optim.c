/*
 * optim.c - the server-side optimizer rules.  They repeat the float arithmetic of the local
 * update ops (src/graph/ops_optim.c) so that a parameter trained on servers follows the same
 * trajectory as one trained locally:
 *   g = grad * scale + l2 * w
 *   sgd:      w -= lr * g
 *   adagrad:  m += g * g;  w -= lr * g / (sqrt(m) + epsilon)
 *   adam:     lr_t = lr * sqrt(1 - pow2) / (1 - pow1);  eps_t = epsilon * sqrt(1 - pow2)
 *             m1 = b1 m1 + (1 - b1) g;  m2 = b2 m2 + (1 - b2) g^2;  w -= lr_t m1 / (sqrt(m2) + eps_t)
 *             (pow1, pow2 start at b1, b2 and are multiplied by them after each step)
 *   momentum: v = mu v + g;  w -= lr v     (Nesterov: w -= lr (g + mu v), with the new v)
 *   sum:      w += grad * scale           (GEO deltas; no lr, no l2)
 * With scale == 1 the gradient is used unchanged (bit-identical to the local op).  As there,
 * the state (v, m, m1, m2) is flushed to 0 below FLT_MIN (fl__flush_tiny, docs/engine.md).
 */
#include <math.h>

#include "ps_internal.h"

void fl__ps_opt_init(fl__ps_opt *o, const fl_ps_optimizer *c)
{
    o->kind = c->kind;
    o->lr = c->lr;
    o->l2 = c->l2;
    o->b1 = c->beta1 > 0 ? c->beta1 : 0.9;
    o->b2 = c->beta2 > 0 ? c->beta2 : 0.999;
    o->eps = c->epsilon > 0 ? c->epsilon : (c->kind == FL_PS_OPT_ADAGRAD ? 1e-6 : 1e-8);
    o->eps_f = (float)o->eps;
    o->mu = (float)c->momentum;
    o->nesterov = c->nesterov != 0;
    o->nstate = c->kind == FL_PS_OPT_ADAGRAD || c->kind == FL_PS_OPT_MOMENTUM ? 1 : c->kind == FL_PS_OPT_ADAM ? 2 : 0;
}

void fl__ps_opt_pows_init(const fl__ps_opt *o, float pows[2])
{
    pows[0] = (float)o->b1;
    pows[1] = (float)o->b2;
}

void fl__ps_opt_pows_advance(const fl__ps_opt *o, float pows[2])
{
    if (o->kind != FL_PS_OPT_ADAM) return;
    pows[0] = (float)((double)pows[0] * o->b1);
    pows[1] = (float)((double)pows[1] * o->b2);
}

int fl__ps_opt_apply(const fl__ps_opt *o, float *restrict w, float *restrict m1, float *restrict m2,
                     const float *restrict grad, int64_t n, float scale, const float pows[2])
{
    const float lr = o->lr, l2 = o->l2;
    const int unit = scale == 1.0f;
    switch (o->kind) {
    case FL_PS_OPT_SGD:
        if (unit)
            for (int64_t j = 0; j < n; j++) w[j] -= lr * (grad[j] + l2 * w[j]);
        else
            for (int64_t j = 0; j < n; j++) w[j] -= lr * (grad[j] * scale + l2 * w[j]);
        return FL_OK;
    case FL_PS_OPT_SUM:
        if (unit)
            for (int64_t j = 0; j < n; j++) w[j] += grad[j];
        else
            for (int64_t j = 0; j < n; j++) w[j] += grad[j] * scale;
        return FL_OK;
    case FL_PS_OPT_MOMENTUM: {
        const float mu = o->mu;
        for (int64_t j = 0; j < n; j++) {
            float gj = (unit ? grad[j] : grad[j] * scale) + l2 * w[j], vj = fl__flush_tiny(mu * m1[j] + gj);
            m1[j] = vj;
            w[j] -= o->nesterov ? lr * (gj + mu * vj) : lr * vj;
        }
        return FL_OK;
    }
    case FL_PS_OPT_ADAGRAD: {
        const float eps = o->eps_f;
        for (int64_t j = 0; j < n; j++) {
            float gj = (unit ? grad[j] : grad[j] * scale) + l2 * w[j], mj = fl__flush_tiny(m1[j] + gj * gj);
            m1[j] = mj;
            w[j] -= lr * gj / (sqrtf(mj) + eps);
        }
        return FL_OK;
    }
    case FL_PS_OPT_ADAM: {
        const double pw1 = pows[0], pw2 = pows[1];
        if (!(pw1 >= 0.0 && pw1 < 1.0 && pw2 >= 0.0 && pw2 < 1.0))
            return fl__err(FL_EINVAL, "adam: beta pow accumulators must be in [0, 1), got %g and %g", pw1, pw2);
        const float lrt = (float)(o->lr * sqrt(1.0 - pw2) / (1.0 - pw1)), eps_t = (float)(o->eps * sqrt(1.0 - pw2));
        const float fb1 = (float)o->b1, fb2 = (float)o->b2, cb1 = (float)(1.0 - o->b1), cb2 = (float)(1.0 - o->b2);
        for (int64_t j = 0; j < n; j++) {
            float gj = (unit ? grad[j] : grad[j] * scale) + l2 * w[j];
            float a = fl__flush_tiny(fb1 * m1[j] + cb1 * gj), b = fl__flush_tiny(fb2 * m2[j] + cb2 * gj * gj);
            m1[j] = a;
            m2[j] = b;
            w[j] -= lrt * a / (sqrtf(b) + eps_t);
        }
        return FL_OK;
    }
    }
    return fl__err(FL_EINVAL, "unknown optimizer kind %d", (int)o->kind);
}
