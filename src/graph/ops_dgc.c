/*
 * ops_dgc.c - the local half of Deep Gradient Compression (Lin et al. 2018; Paddle's dgc and
 * dgc_momentum ops).  The exchange between ranks is fleet/collective/dgc.c's c_dgc_allreduce.
 *
 *   dgc           U, V, Grad, Param, current_step -> U_out, V_out, EncodeIdx, EncodeVal,
 *                 Grad_out, k.  Always: Grad_out = Grad + regular_coeff * Param (L2, as
 *                 Paddle's dgc op adds the decay before compression).  When current_step >=
 *                 rampup_begin_step (else nothing more):
 *                   momentum correction     u = m * u + g      (Nesterov: u = m * (u + g))
 *                   local accumulation      v = v + u          (Nesterov: v = v + u + g)
 *                   k = max(1, (int)(numel * (1 - sparsity(step))))
 *                   top-k of |v|            EncodeIdx (int32, ascending), EncodeVal = v there
 *                   momentum factor masking u = v = 0 at the selected indices
 *                   Grad_out = 0            (the exchange scatters every rank's pairs into it)
 *                 sparsity(step): the schedule list indexed by (step - rampup_begin_step) *
 *                 len / rampup_step, the last entry once past the end (Paddle's
 *                 get_period_sparcity).  Before rampup EncodeIdx / EncodeVal hold 0 elements
 *                 and k is 0.
 *   dgc_momentum  Param, Grad, LearningRate, Velocity, current_step -> ParamOut,
 *                 VelocityOut: Paddle's momentum before rampup_begin_step, plain SGD after
 *                 (the momentum is then already inside the exchanged values).  Dense only.
 *
 * Paddle scales Grad by nranks in dgc and back by 1/nranks in dgc_momentum because its loss
 * is divided by nranks; here every rank's gradient is already its own mean and
 * c_dgc_allreduce averages, which is the same arithmetic.  current_step is an int64 counter
 * of completed steps (Paddle's float __g_dgc_counter__, 0 on the first step).
 */
#include <math.h>
#include <string.h>

#include "graph_internal.h"

#define DGC_MAX_SPARSITY 32

/* ---- the schedule ------------------------------------------------------------------------- */

/* Sparsity for `since` steps after rampup began (Paddle's get_period_sparcity). */
static double sparsity_at(const fl_attr *sp, int64_t since, int64_t rampup_step)
{
    if (!sp || sp->n < 1) return 0.999;
    if (rampup_step < 1) rampup_step = 1;
    int64_t idx = since * sp->n / rampup_step;
    if (idx >= sp->n) idx = sp->n - 1;
    if (idx < 0) idx = 0;
    return sp->floats[idx];
}

/* ---- dgc ------------------------------------------------------------------------------------ */

static int infer_dgc(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *u = op->in[0].vars[0], *v = op->in[1].vars[0], *g = op->in[2].vars[0], *w = op->in[3].vars[0];
    fl_var *step = op->in[4].vars[0];
    FL_CHECK(fl__op_need_f32(op, w));
    FL_CHECK(fl__op_need_f32(op, g));
    if (g->is_sparse_grad) return fl__op_error(op, "gradient '%s' is sparse; DGC takes dense gradients", g->name);
    fl_var *same[3] = {u, v, g};
    for (int i = 0; i < 3; i++) {
        FL_CHECK(fl__op_need_f32(op, same[i]));
        if (!fl__shapes_equal(same[i], w)) {
            char a[96], b[96];
            fl__shape_str(same[i], a, sizeof a);
            fl__shape_str(w, b, sizeof b);
            return fl__op_error(op, "'%s' has shape %s, parameter '%s' has %s", same[i]->name, a, w->name, b);
        }
    }
    if (step->dtype != FL_INT64) return fl__op_error(op, "current_step '%s' must be int64", step->name);
    const fl_attr *sp = fl__attr_find(op, "sparsity");
    if (!sp || sp->type != FL_ATTR_FLOATS || sp->n < 1 || sp->n > DGC_MAX_SPARSITY)
        return fl__op_error(op, "attribute sparsity must be a list of 1 to %d numbers", DGC_MAX_SPARSITY);
    for (int i = 0; i < sp->n; i++)
        if (!(sp->floats[i] >= 0.0f && sp->floats[i] < 1.0f))
            return fl__op_error(op, "sparsity[%d] = %g must be in [0, 1)", i, (double)sp->floats[i]);
    if (fl__attr_i(op, "rampup_step", 1) < 1) return fl__op_error(op, "rampup_step must be >= 1");
    if (fl__attr_i(op, "rampup_begin_step", 0) < 0) return fl__op_error(op, "rampup_begin_step must be >= 0");
    double m = fl__attr_f(op, "m", 0.9), rc = fl__attr_f(op, "regular_coeff", 0.0);
    if (!isfinite(m)) return fl__op_error(op, "m (momentum) must be finite, got %g", m);
    if (!(rc >= 0.0) || !isfinite(rc)) return fl__op_error(op, "regular_coeff must be finite and >= 0, got %g", rc);
    int64_t one = 1;
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, w->ndim, w->shape);
    fl__var_set_shape(op->out[1].vars[0], FL_FLOAT32, w->ndim, w->shape);
    fl__var_set_shape(op->out[2].vars[0], FL_INT32, 1, (int64_t[]){-1});
    fl__var_set_shape(op->out[3].vars[0], FL_FLOAT32, 1, (int64_t[]){-1});
    fl__var_set_shape(op->out[4].vars[0], FL_FLOAT32, w->ndim, w->shape);
    fl__var_set_shape(op->out[5].vars[0], FL_INT64, 1, &one);
    return FL_OK;
}

/* Per-op scratch: the candidates of the radix selection. */
typedef struct {
    int64_t cap;
    uint32_t a[];
} sel_scratch;

/* |x| as an unsigned key whose order is the order of |x|: the float's bits without the
 * sign.  NaN keys lie above +inf, so a diverged value is sent (and shows) rather than kept. */
static inline uint32_t key_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u & 0x7fffffffu;
}

/* The key of the k-th largest |v[i]| (1 <= k <= n), and in *ties how many elements equal to
 * it belong to the top k.  Radix selection, most significant digit first (11, 11, 10 bits):
 * a histogram of the candidates' digit, the bucket holding the k-th, and the candidates of
 * that bucket kept for the next digit.  Two passes over v, then passes over the (normally
 * few) candidates; no comparison sort, so equal values cost nothing extra. */
static uint32_t kth_key(const float *v, int64_t n, int64_t k, uint32_t *tmp, int64_t *ties)
{
    static const int shift[3] = {21, 10, 0}, width[3] = {11, 11, 10};
    uint32_t prefix = 0, mask = 0;
    int64_t want = k, ncand = n;
    for (int d = 0; d < 3; d++) {
        int64_t hist[2048] = {0};
        uint32_t dm = (1u << width[d]) - 1u;
        if (d == 0)
            for (int64_t i = 0; i < n; i++) hist[key_of(v[i]) >> shift[0]]++;
        else
            for (int64_t i = 0; i < ncand; i++) hist[(tmp[i] >> shift[d]) & dm]++;
        int64_t cum = 0;
        uint32_t b = dm;
        for (;; b--) {
            if (cum + hist[b] >= want) break;
            cum += hist[b];
        }
        want -= cum;
        prefix |= b << shift[d];
        mask |= dm << shift[d];
        if (d == 2) break;
        int64_t m = 0; /* keep the candidates in bucket b (tmp is compacted in place) */
        if (d == 0) {
            for (int64_t i = 0; i < n; i++) {
                uint32_t x = key_of(v[i]);
                if ((x & mask) == prefix) tmp[m++] = x;
            }
        } else {
            for (int64_t i = 0; i < ncand; i++)
                if ((tmp[i] & mask) == prefix) tmp[m++] = tmp[i];
        }
        ncand = m;
    }
    *ties = want;
    return prefix;
}

/* Selects the k indices of largest |v| (ties: lowest indices first), ascending. */
static int select_topk(fl_kctx *c, const float *v, int64_t n, int64_t k, int32_t *idx)
{
    sel_scratch *s = *c->state;
    if (!s || s->cap < n) {
        free(s);
        s = malloc(sizeof *s + (size_t)n * sizeof(uint32_t));
        *c->state = s;
        if (!s)
            return fl__err(FL_ENOMEM, "dgc: out of memory selecting the top %lld of %lld values", (long long)k,
                           (long long)n);
        s->cap = n;
    }
    int64_t ties = 0, at = 0;
    uint32_t thr = kth_key(v, n, k, s->a, &ties);
    for (int64_t i = 0; i < n && at < k; i++) {
        uint32_t x = key_of(v[i]);
        if (x > thr || (x == thr && ties-- > 0)) idx[at++] = (int32_t)i;
    }
    return FL_OK;
}

static int run_dgc(fl_kctx *c)
{
    const fl_op *op = c->op;
    fl_tensor *u = FL_IN(c, 0), *v = FL_IN(c, 1), *g = FL_IN(c, 2), *w = FL_IN(c, 3), *st = FL_IN(c, 4);
    fl_tensor *uo = FL_OUT(c, 0), *vo = FL_OUT(c, 1), *ei = FL_OUT(c, 2), *ev = FL_OUT(c, 3), *go = FL_OUT(c, 4);
    fl_tensor *ko = FL_OUT(c, 5);
    const char *wn = op->in[3].vars[0]->name;
    for (int s = 0; s < 4; s++) {
        fl_tensor *t = FL_IN(c, s);
        if (t->dtype != FL_FLOAT32 || t->is_rows || t->numel != w->numel)
            return fl__err(FL_EINVAL, "dgc: %s '%s' must be a dense float32 tensor of %lld elements like parameter '%s'",
                           op->def->in_names[s], op->in[s].vars[0]->name, (long long)w->numel, wn);
    }
    if (st->dtype != FL_INT64 || st->numel < 1)
        return fl__err(FL_EINVAL, "dgc: current_step '%s' must be an int64 with one element", op->in[4].vars[0]->name);
    if (w->numel > INT32_MAX)
        return fl__err(FL_EUNSUPPORTED, "dgc: parameter '%s' has %lld elements; indices are 32-bit", wn,
                       (long long)w->numel);
    if (uo != u) FL_CHECK(fl_tensor_copy(uo, u));
    if (vo != v) FL_CHECK(fl_tensor_copy(vo, v));
    if (go != g) FL_CHECK(fl_tensor_copy(go, g));
    int64_t n = w->numel, one = 1, step = ((const int64_t *)st->data)[0];
    int64_t begin = fl__attr_i(op, "rampup_begin_step", 0), rampup = fl__attr_i(op, "rampup_step", 1);
    const float rc = (float)fl__attr_f(op, "regular_coeff", 0.0), m = (float)fl__attr_f(op, "m", 0.9);
    const int nesterov = fl__attr_i(op, "use_nesterov", 0) != 0;
    float *gv = go->data, *uv = uo->data, *vv = vo->data;
    const float *pv = w->data;
    if (rc != 0.0f)
        for (int64_t i = 0; i < n; i++) gv[i] += rc * pv[i];
    FL_CHECK(fl__tensor_reshape_raw(ko, FL_INT64, 1, &one));
    int64_t k = 0;
    if (step >= begin) {
        double ratio = 1.0 - sparsity_at(fl__attr_find(op, "sparsity"), step - begin, rampup);
        k = (int64_t)((double)n * ratio);
        k = k < 1 ? 1 : k > n ? n : k;
    }
    ((int64_t *)ko->data)[0] = k;
    FL_CHECK(fl__tensor_reshape_raw(ei, FL_INT32, 1, &k));
    FL_CHECK(fl__tensor_reshape_raw(ev, FL_FLOAT32, 1, &k));
    if (step < begin) return FL_OK;
    if (nesterov) {
        for (int64_t i = 0; i < n; i++) {
            uv[i] = m * (uv[i] + gv[i]);
            vv[i] += uv[i] + gv[i];
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            uv[i] = m * uv[i] + gv[i];
            vv[i] += uv[i];
        }
    }
    int32_t *idx = ei->data;
    float *val = ev->data;
    FL_CHECK(select_topk(c, vv, n, k, idx));
    for (int64_t j = 0; j < k; j++) {
        int32_t i = idx[j];
        val[j] = vv[i];
        vv[i] = 0.0f;
        uv[i] = 0.0f;
    }
    memset(gv, 0, (size_t)n * sizeof(float));
    return FL_OK;
}

/* ---- dgc_momentum --------------------------------------------------------------------------- */

static int infer_dgc_momentum(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *w = op->in[0].vars[0], *g = op->in[1].vars[0], *lr = op->in[2].vars[0], *vel = op->in[3].vars[0];
    fl_var *step = op->in[4].vars[0];
    FL_CHECK(fl__op_need_f32(op, w));
    FL_CHECK(fl__op_need_f32(op, g));
    FL_CHECK(fl__op_need_f32(op, lr));
    FL_CHECK(fl__op_need_f32(op, vel));
    if (g->is_sparse_grad) return fl__op_error(op, "gradient '%s' is sparse; dgc_momentum is dense only", g->name);
    if (!fl__shapes_equal(w, g) || !fl__shapes_equal(w, vel))
        return fl__op_error(op, "gradient '%s' and velocity '%s' must have the shape of parameter '%s'", g->name, vel->name,
                            w->name);
    if (step->dtype != FL_INT64) return fl__op_error(op, "current_step '%s' must be int64", step->name);
    double mu = fl__attr_f(op, "mu", 0.0), l2 = fl__attr_f(op, "l2", 0.0);
    if (!isfinite(mu)) return fl__op_error(op, "mu of parameter '%s' must be finite, got %g", w->name, mu);
    if (!(l2 >= 0.0) || !isfinite(l2))
        return fl__op_error(op, "L2 coefficient of parameter '%s' must be finite and >= 0, got %g", w->name, l2);
    fl_var *po = op->out[0].vars[0], *vo = op->out[1].vars[0];
    if (po != w) fl__var_set_shape(po, w->dtype, w->ndim, w->shape);
    if (vo != vel) fl__var_set_shape(vo, vel->dtype, vel->ndim, vel->shape);
    return FL_OK;
}

static int run_dgc_momentum(fl_kctx *c)
{
    const fl_op *op = c->op;
    fl_tensor *g = FL_IN(c, 1), *lrt = FL_IN(c, 2), *st = FL_IN(c, 4), *pt, *vt;
    const char *wn = op->in[0].vars[0]->name;
    FL_CHECK(fl__optim_target(c, 0, -1, &pt));
    FL_CHECK(fl__optim_target(c, 1, pt->numel, &vt));
    if (g->dtype != FL_FLOAT32 || g->is_rows || g->numel != pt->numel)
        return fl__err(FL_EINVAL, "dgc_momentum: gradient of '%s' must be a dense float32 tensor of %lld elements", wn,
                       (long long)pt->numel);
    if (lrt->dtype != FL_FLOAT32 || lrt->numel < 1 || st->dtype != FL_INT64 || st->numel < 1)
        return fl__err(FL_EINVAL, "dgc_momentum: learning rate (float32) or current_step (int64) of '%s' is malformed", wn);
    const float lr = ((const float *)lrt->data)[0] * (float)fl__attr_f(op, "lr_scale", 1.0);
    const float l2 = (float)fl__attr_f(op, "l2", 0.0), mu = (float)fl__attr_f(op, "mu", 0.0);
    const int nesterov = fl__attr_i(op, "use_nesterov", 0) != 0;
    const int sgd = ((const int64_t *)st->data)[0] >= fl__attr_i(op, "rampup_begin_step", 0);
    float *restrict p = pt->data, *restrict v = vt->data;
    const float *restrict gr = g->data;
    for (int64_t j = 0; j < pt->numel; j++) {
        float gj = gr[j] + l2 * p[j];
        if (sgd) {
            p[j] -= lr * gj;
            continue;
        }
        float vj = fl__flush_tiny(mu * v[j] + gj);
        v[j] = vj;
        p[j] -= nesterov ? lr * (gj + mu * vj) : lr * vj;
    }
    return FL_OK;
}

/* clang-format off */
static const fl_op_def def_dgc = {
    "dgc", {"U", "V", "Grad", "Param", "current_step"},
    {"U_out", "V_out", "EncodeIdx", "EncodeVal", "Grad_out", "k"}, infer_dgc, run_dgc, NULL, NULL};
static const fl_op_def def_dgc_momentum = {
    "dgc_momentum", {"Param", "Grad", "LearningRate", "Velocity", "current_step"}, {"ParamOut", "VelocityOut"},
    infer_dgc_momentum, run_dgc_momentum, NULL, NULL};
/* clang-format on */

const fl_op_def *const fl__ops_dgc[] = {&def_dgc, &def_dgc_momentum, NULL};
