/*
 * optref.h - the small model that test_optim.c and test_optim_lars.c train through
 * fl_opt_minimize and check against their double-precision optimizer references:
 * loss = mean(tanh(x W0 + c W1 + b)), x [N, D] data, c [N, E] a created parameter; its
 * parameters, their per-parameter L2 and learning-rate scales, the exact gradients, and the
 * comparison of a scope variable with a reference.  Define RTOL and ATOL before including.
 */
#ifndef FLEET_TESTS_OPTREF_H
#define FLEET_TESTS_OPTREF_H

#include <math.h>
#include <string.h>

enum { N = 4, D = 3, E = 2, K = 2, NPARAM = 4 };
enum { PW0, PW1, PB, PC };
static const char *const pname[NPARAM] = {"w_0", "w_1", "b", "c"};

/* Per-parameter L2 and rate scale used when a case sets them. */
static const float p_l2[NPARAM] = {0.01f, 0.01f, 0.0f, 0.02f}, p_lrs[NPARAM] = {0.5f, 0.5f, 2.0f, 1.5f};

/* Appends the model to p and returns its loss; attrs: the parameters carry p_l2 and p_lrs. */
static fl_var *ref_model(fl_prog *p, int attrs)
{
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(D), FL_FLOAT32, 0);
    fl_param_attr ca = {0};
    ca.name = "c";
    ca.init = fl_init_uniform(-1.0f, 1.0f);
    fl_fc_attr fa = {0};
    fa.weight.name = "w";
    fa.weight.init = fl_init_uniform(-0.8f, 0.8f);
    fa.bias.name = "b";
    fa.bias.init = fl_init_uniform(-0.3f, 0.3f);
    if (attrs) {
        ca.l2_decay = p_l2[PC];
        ca.learning_rate = p_lrs[PC];
        fa.weight.l2_decay = p_l2[PW0];
        fa.weight.learning_rate = p_lrs[PW0];
        fa.bias.l2_decay = p_l2[PB];
        fa.bias.learning_rate = p_lrs[PB];
    }
    fl_var *c = fl_layer_create_parameter(p, FL_SHAPE(N, E), FL_FLOAT32, &ca);
    fl_var *loss = fl_layer_mean(fl_layer_fc_ex(FL_VARS(x, c), K, "tanh", &fa));
    CHECK(loss != NULL);
    return loss;
}

/* d loss / d each parameter (pv, gv indexed by PW0..PC). */
static void ref_grads(double *const *pv, const float *x, double *const *gv)
{
    double dz[N * K];
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            double z = pv[PB][k];
            for (int d = 0; d < D; d++) z += (double)x[n * D + d] * pv[PW0][d * K + k];
            for (int j = 0; j < E; j++) z += pv[PC][n * E + j] * pv[PW1][j * K + k];
            double o = tanh(z);
            dz[n * K + k] = (1.0 - o * o) / (double)(N * K);
        }
    memset(gv[PW0], 0, D * K * sizeof(double));
    memset(gv[PW1], 0, E * K * sizeof(double));
    memset(gv[PB], 0, K * sizeof(double));
    memset(gv[PC], 0, N * E * sizeof(double));
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            double g = dz[n * K + k];
            for (int d = 0; d < D; d++) gv[PW0][d * K + k] += (double)x[n * D + d] * g;
            for (int j = 0; j < E; j++) {
                gv[PW1][j * K + k] += pv[PC][n * E + j] * g;
                gv[PC][n * E + j] += g * pv[PW1][j * K + k];
            }
            gv[PB][k] += g;
        }
}

static fl_tensor *find(fl_exe *e, const char *name)
{
    fl_tensor *t = fl_scope_find(fl_exe_scope(e), name);
    if (!t) TFAIL("variable '%s' not found in the scope", name);
    return t;
}

/* The float32 variable `name` equals want[0..n) within RTOL relative plus ATOL absolute. */
static void check_close(fl_exe *e, const char *name, const double *want, int64_t n, int step)
{
    fl_tensor *t = find(e, name);
    const float *got = fl_tensor_f32(t);
    if (!got || fl_tensor_numel(t) != n)
        TFAIL("'%s' is not float32 with %lld elements (has %lld)", name, (long long)n, (long long)fl_tensor_numel(t));
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= RTOL * fabs(want[i]) + ATOL))
            TFAIL("%s[%lld] after step %d: got %.9g, reference %.9g", name, (long long)i, step, got[i], want[i]);
}

#endif
