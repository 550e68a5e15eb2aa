/*
 * optim.c - the server-side optimizer rules.  They are the local update ops' own kernels
 * (src/tensor/optim_kernels.c, vectorised; Adam's coefficients from fl__adam_coef_init), so
 * a parameter trained on servers follows the same trajectory as one trained locally, bit for
 * bit:
 *   g = grad * scale + l2 * w
 *   sgd:      w -= lr * g
 *   adagrad:  m += g * g;  w -= lr * g / (sqrt(m) + epsilon)
 *   adam:     lr_t = lr * sqrt(1 - pow2) / (1 - pow1);  eps_t = epsilon * sqrt(1 - pow2)
 *             m1 = b1 m1 + (1 - b1) g;  m2 = b2 m2 + (1 - b2) g^2;  w -= lr_t m1 / (sqrt(m2) + eps_t)
 *             (pow1, pow2 start at b1, b2 and are multiplied by them after each step)
 *   momentum: v = mu v + g;  w -= lr v     (Nesterov: w -= lr (g + mu v), with the new v)
 *   sum:      w += grad * scale           (GEO deltas; no lr, no l2)
 * With scale == 1 the gradient goes to the kernel unchanged; otherwise it is scaled into a
 * block of SCALE_BLK floats first (grad * scale rounded to float, as the formula above).  As
 * in the local ops, the state (v, m, m1, m2) is flushed to 0 below FLT_MIN (fl__flush_tiny,
 * docs/engine.md).
 */
#include <math.h>

#include "ps_internal.h"

#define SCALE_BLK 512

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
    pows[0] = fl__adam_pow_next(pows[0], o->b1);
    pows[1] = fl__adam_pow_next(pows[1], o->b2);
}

int fl__ps_step_begin(const fl__ps_opt *o, const float pows[2], float scale, fl__ps_step *s)
{
    s->o = o;
    s->scale = scale;
    if (o->kind == FL_PS_OPT_ADAM && fl__adam_coef_init(&s->adam, o->lr, o->l2, o->b1, o->b2, o->eps, pows[0], pows[1]))
        return fl__err(FL_EINVAL, "adam: beta pow accumulators must be in [0, 1), got %g and %g", (double)pows[0],
                       (double)pows[1]);
    if ((int)o->kind < 0 || (int)o->kind > (int)FL_PS_OPT_MOMENTUM)
        return fl__err(FL_EINVAL, "unknown optimizer kind %d", (int)o->kind);
    return FL_OK;
}

/* The rule on n parameters whose gradient g is already scaled. */
static void apply_unit(const fl__ps_step *s, float *w, float *m1, float *m2, const float *g, int64_t n)
{
    const fl__ps_opt *o = s->o;
    switch (o->kind) {
    case FL_PS_OPT_SGD: fl__sgd_seg(w, g, n, o->lr, o->l2); break;
    case FL_PS_OPT_SUM: fl__vaxpy(w, 1.0f, g, n); break;
    case FL_PS_OPT_MOMENTUM: fl__momentum_seg(w, m1, g, n, o->lr, o->l2, o->mu, o->nesterov); break;
    case FL_PS_OPT_ADAGRAD: fl__adagrad_seg(w, m1, g, n, o->lr, o->l2, o->eps_f); break;
    case FL_PS_OPT_ADAM: fl__adam_seg(w, m1, m2, g, n, &s->adam); break;
    }
}

void fl__ps_step_apply(const fl__ps_step *s, float *w, float *m1, float *m2, const float *grad, int64_t n)
{
    if (s->scale == 1.0f) {
        apply_unit(s, w, m1, m2, grad, n);
        return;
    }
    if (s->o->kind == FL_PS_OPT_SUM) { /* w + scale * grad: no block needed */
        fl__vaxpy(w, s->scale, grad, n);
        return;
    }
    float blk[SCALE_BLK];
    for (int64_t i = 0; i < n; i += SCALE_BLK) {
        int64_t k = n - i < SCALE_BLK ? n - i : SCALE_BLK;
        fl__vscale(blk, s->scale, grad + i, k);
        apply_unit(s, w + i, m1 ? m1 + i : NULL, m2 ? m2 + i : NULL, blk, k);
    }
}

int fl__ps_opt_apply(const fl__ps_opt *o, float *w, float *m1, float *m2, const float *grad, int64_t n, float scale,
                     const float pows[2])
{
    fl__ps_step s;
    FL_CHECK(fl__ps_step_begin(o, pows, scale, &s));
    fl__ps_step_apply(&s, w, m1, m2, grad, n);
    return FL_OK;
}
