/*
 * gradcheck.h - finite-difference gradient checks for operators.
 *
 * A check builds a small program whose inputs are parameters (so they receive
 * gradients), reduces the op's output to a scalar with a fixed random linear functional
 * (gc_loss: loss = mean(fc(out, 1, no bias, frozen random weights)) so no gradient is
 * hidden by symmetry), appends backward, and compares every analytic gradient element
 * with the central difference (L(p+eps) - L(p-eps)) / 2eps.
 *
 * Tolerances: with float32 kernels, eps = 1e-2 (default) and
 *   |analytic - numeric| <= atol + rtol * max(|analytic|, |numeric|)
 * with rtol = 2e-2 and atol = 2e-3 unless a test states otherwise.
 * SelectedRows gradients are densified (duplicate rows summed) before comparing.
 * Every evaluation runs in a fresh executor over the same scope, so random ops (dropout)
 * draw the same mask for every evaluation.
 */
#ifndef FLEET_GRADCHECK_H
#define FLEET_GRADCHECK_H

#include "testhelp.h"

typedef struct {
    double eps, rtol, atol;
    int max_elems; /* per parameter, checked elements (spread evenly); 0 = 64 */
} gc_opts;

/* Reduces `out` to a scalar loss as described above. */
static inline fl_var *gc_loss(fl_var *out)
{
    fl_fc_attr a;
    memset(&a, 0, sizeof a);
    a.no_bias = 1;
    a.weight.frozen = 1;
    a.weight.init = fl_init_uniform(-1.0f, 1.0f);
    int nd = fl_var_ndim(out);
    a.num_flatten_dims = nd > 1 ? nd - 1 : 1;
    fl_var *s = fl_layer_fc_ex(FL_VARS(out), 1, NULL, &a);
    return fl_layer_mean(s);
}

/* A parameter used as an op input, initialised to uniform(lo, hi). */
static inline fl_var *gc_input(fl_prog *p, const char *name, int ndim, const int64_t *shape, float lo, float hi)
{
    fl_param_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.init = fl_init_uniform(lo, hi);
    return fl_layer_create_parameter(p, ndim, shape, FL_FLOAT32, &a);
}

static inline double gc_eval(fl_scope *scope, fl_prog *p, fl_var *loss, const fl_feed *feed, int nfeed)
{
    fl_exe *e = fl_exe_create(scope);
    const char *f[1] = {fl_var_name(loss)};
    fl_tensor *out = NULL;
    int st = fl_exe_run(e, p, feed, nfeed, f, 1, &out);
    if (st != FL_OK) TFAIL("gradcheck forward failed: %s", fl_last_error());
    double v = fl_tensor_f32(out)[0];
    fl_exe_free(e);
    return v;
}

/* Checks gradients of every trainable parameter of loss's program (or only those whose
 * names are listed in `only`, NULL-terminated).  Returns after TFAIL on mismatch. */
static inline void gc_check(fl_var *loss, const fl_feed *feed, int nfeed, const char *const *only, gc_opts o)
{
    if (!loss) TFAIL("gradcheck: loss is NULL: %s", fl_last_error());
    if (o.eps == 0) o.eps = 1e-2;
    if (o.rtol == 0) o.rtol = 2e-2;
    if (o.atol == 0) o.atol = 2e-3;
    if (o.max_elems == 0) o.max_elems = 64;
    fl_prog *p = fl_var_prog(loss);
    fl_param_grad *pairs = NULL;
    int n = 0;
    CHECK_OK(fl_append_backward(loss, NULL, 0, &pairs, &n));
    fl_scope *scope = fl_scope_create(NULL);
    fl_exe *e = fl_exe_create(scope);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    fl_exe_free(e);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        const char *pn = fl_var_name(pairs[i].param);
        if (only) {
            int want = 0;
            for (const char *const *q = only; *q; q++) want |= !strcmp(*q, pn);
            if (!want) continue;
        }
        /* analytic gradient */
        e = fl_exe_create(scope);
        const char *f[1] = {fl_var_name(pairs[i].grad)};
        fl_tensor *g = NULL;
        CHECK_OK(fl_exe_run(e, p, feed, nfeed, f, 1, &g));
        fl_tensor *w = fl_scope_find(scope, pn);
        int64_t numel = fl_tensor_numel(w);
        double *ana = calloc((size_t)numel, sizeof *ana);
        if (fl_tensor_is_rows(g)) {
            int64_t nr, h;
            const int64_t *rows = fl_tensor_rows(g, &nr, &h);
            int64_t width = numel / h;
            CHECK_EQ_INT(h, fl_tensor_dim(w, 0));
            for (int64_t r = 0; r < nr; r++)
                for (int64_t j = 0; j < width; j++) ana[rows[r] * width + j] += fl_tensor_f32(g)[r * width + j];
        } else {
            CHECK_EQ_INT(fl_tensor_numel(g), numel);
            for (int64_t j = 0; j < numel; j++) ana[j] = fl_tensor_f32(g)[j];
        }
        fl_exe_free(e);
        int64_t stride = numel > o.max_elems ? numel / o.max_elems : 1;
        for (int64_t j = 0; j < numel; j += stride) {
            float *wd = fl_tensor_f32(w);
            float orig = wd[j];
            wd[j] = orig + (float)o.eps;
            double lp = gc_eval(scope, p, loss, feed, nfeed);
            wd[j] = orig - (float)o.eps;
            double lm = gc_eval(scope, p, loss, feed, nfeed);
            wd[j] = orig;
            double num = (lp - lm) / (2 * o.eps);
            double tol = o.atol + o.rtol * fmax(fabs(num), fabs(ana[j]));
            if (!(fabs(num - ana[j]) <= tol))
                TFAIL("gradient of %s[%lld]: analytic %.6g vs numeric %.6g (tol %.3g)", pn, (long long)j, ana[j], num, tol);
            checked++;
        }
        free(ana);
    }
    if (!checked) TFAIL("gradcheck: no parameter was checked");
    free(pairs);
    fl_scope_free(scope);
}

/* Runs the startup program and then p once with the given feeds; fetches n vars into out
 * (owned by the returned executor, which the caller frees). */
static inline fl_exe *gc_run_once(fl_prog *p, const fl_feed *feed, int nfeed, const char *const *fetch, int n,
                                  fl_tensor **out)
{
    fl_exe *e = fl_exe_create(NULL);
    CHECK(e);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    CHECK_OK(fl_exe_run(e, p, feed, nfeed, fetch, n, out));
    return e;
}

#endif
