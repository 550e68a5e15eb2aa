/*
 * ampnet.h - the quick-start MLP (x[32] -> fc128 tanh -> fc128 tanh -> fc2 -> softmax ->
 * cross entropy) trained on a planted rule (label = x0+x1+x2+x3 > 0), for the AMP tests
 * (tests/test_amp_fp16.c, tests/test_amp_o2.c).  Eager deletion is off: the tests read a
 * step's temporaries (find_infinite_scale) from the scope after a run.
 */
#ifndef FLEET_TESTS_AMPNET_H
#define FLEET_TESTS_AMPNET_H

#include "testhelp.h"
#include "fleet/fleet.h"

enum { BATCH = 64, DIM = 32 };

typedef struct {
    fl_prog *p;
    fl_exe *e;
    fl_model_mlp m;
    fl_rng r;
} net;

/* The MLP with optimizer `opt` (freed here); amp NULL: float32. */
static void ampnet_make(net *n, fl_opt *opt, const fl_amp_opts *amp)
{
    memset(n, 0, sizeof *n);
    n->p = fl_prog_create();
    fl_model_mlp_config cfg = fl_model_mlp_default();
    CHECK_OK(fl_model_mlp_build(n->p, &cfg, &n->m));
    if (amp) CHECK_OK(fl_amp_decorate_optimizer(opt, amp));
    CHECK_OK(fl_opt_minimize(opt, n->m.loss));
    fl_opt_free(opt);
    n->e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_set_eager_deletion(n->e, 0));
    CHECK_OK(fl_exe_run(n->e, fl_prog_startup(n->p), NULL, 0, NULL, 0, NULL));
    n->r = (fl_rng){11};
}

/* One step on a fresh batch of the planted rule; returns the loss. */
static float net_step(net *n)
{
    static float xs[BATCH * DIM];
    int64_t ys[BATCH];
    for (int i = 0; i < BATCH; i++) {
        float sum = 0;
        for (int j = 0; j < DIM; j++) xs[i * DIM + j] = 2 * fl__rng_uniform(&n->r) - 1;
        for (int j = 0; j < 4; j++) sum += xs[i * DIM + j];
        ys[i] = sum > 0;
    }
    fl_tensor *xt = th_f32(2, (const int64_t[]){BATCH, DIM}, xs), *yt = th_i64(2, (const int64_t[]){BATCH, 1}, ys);
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    const char *fetch[] = {fl_var_name(n->m.loss)};
    fl_tensor *out[1];
    CHECK_OK(fl_exe_run(n->e, n->p, feed, 2, fetch, 1, out));
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    return fl_tensor_f32(out[0])[0];
}

static void net_free(net *n)
{
    fl_exe_free(n->e);
    fl_prog_free(n->p);
}

#endif
