/* test_optim_lars.c - the LARS (lars_momentum) and LAMB (lamb) optimizers of
 * src/graph/ops_optim_lars.c, checked against double-precision reference implementations
 * written here from Paddle's formulas: a small model (fc over a data input and a free
 * parameter, tanh, mean; four parameters) trains several steps through fl_opt_minimize and
 * every parameter and state variable is compared after each step.  The exclude list (LARS:
 * names containing an entry; LAMB: names ending with one), per-parameter L2 and learning
 * rates, strategy.lars / strategy.lamb through a local fleet, and the errors are covered.
 * The two-rank collective runs are in test_collective.c.  Tolerance: 1e-5 relative plus
 * 1e-7 absolute. */
#include "testhelp.h"
#include "fleet/fleet.h"

#define RTOL 1e-5
#define ATOL 1e-7

#include "optref.h"

enum { STEPS = 5 };

typedef struct {
    int lamb;
    float lr, mu, coeff, wd, eps, b1, b2;
    const char *exclude;
    int excl[NPARAM]; /* what the reference expects excluded */
    int attrs;        /* per-parameter L2 and learning-rate scale */
} lcase;

typedef struct {
    int64_t n;
    double *p, *s1, *s2, pow1, pow2;
} rparam;

static double norm(const double *v, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += v[i] * v[i];
    return sqrt(s);
}

/* One step of Paddle's lars_momentum or lamb on one parameter. */
static void ref_step(const lcase *c, rparam *r, const double *grad, double lr, double l2, int excluded)
{
    double wd = excluded ? 0.0 : c->wd, *g = malloc((size_t)r->n * sizeof(double));
    CHECK(g);
    for (int64_t i = 0; i < r->n; i++) g[i] = grad[i] + l2 * r->p[i];
    double pn = norm(r->p, r->n);
    if (!c->lamb) {
        double gn = norm(g, r->n), local = lr;
        if (wd > 0 && pn > 0 && gn > 0) local = lr * c->coeff * pn / (gn + wd * pn + c->eps);
        for (int64_t i = 0; i < r->n; i++) {
            r->s1[i] = c->mu * r->s1[i] + local * (g[i] + wd * r->p[i]);
            r->p[i] -= r->s1[i];
        }
    } else {
        double *u = malloc((size_t)r->n * sizeof(double));
        CHECK(u);
        for (int64_t i = 0; i < r->n; i++) {
            r->s1[i] = c->b1 * r->s1[i] + (1.0 - c->b1) * g[i];
            r->s2[i] = c->b2 * r->s2[i] + (1.0 - c->b2) * g[i] * g[i];
            u[i] = (r->s1[i] / (1.0 - r->pow1)) / (sqrt(r->s2[i] / (1.0 - r->pow2)) + c->eps) + wd * r->p[i];
        }
        double un = norm(u, r->n), ratio = pn > 0 && un > 0 ? pn / un : 1.0;
        for (int64_t i = 0; i < r->n; i++) r->p[i] -= lr * ratio * u[i];
        r->pow1 *= c->b1;
        r->pow2 *= c->b2;
        free(u);
    }
    free(g);
}

static void check_param(fl_exe *e, const lcase *c, int i, const rparam *r, int step)
{
    char sn[128];
    check_close(e, pname[i], r->p, r->n, step);
    snprintf(sn, sizeof sn, "%s_%s_0", pname[i], c->lamb ? "moment1" : "velocity");
    check_close(e, sn, r->s1, r->n, step);
    if (!c->lamb) return;
    snprintf(sn, sizeof sn, "%s_moment2_0", pname[i]);
    check_close(e, sn, r->s2, r->n, step);
    snprintf(sn, sizeof sn, "%s_beta1_pow_acc_0", pname[i]);
    check_close(e, sn, &r->pow1, 1, step);
}

/* Builds the model; with `fleet_strategy` the optimizer comes from a local fleet's
 * strategy.lars / strategy.lamb, otherwise from fl_opt_lars / fl_opt_lamb. */
static void run_case(const lcase *c, int via_strategy)
{
    unsetenv("PADDLE_TRAINER_ENDPOINTS");
    fl_prog *p = fl_prog_create();
    fl_var *loss = ref_model(p, c->attrs);
    fl_opt *opt;
    fleet_t *f = NULL;
    if (via_strategy) {
        fleet_strategy s = fleet_strategy_default();
        if (c->lamb) {
            CHECK_OK(fleet_strategy_set(&s, "lamb", "true"));
            s.lamb_configs.lamb_weight_decay = c->wd;
            CHECK_OK(fleet_strategy_set(&s, "lamb_configs.exclude_from_weight_decay", c->exclude));
        } else {
            CHECK_OK(fleet_strategy_set(&s, "lars", "true"));
            s.lars_configs.lars_coeff = c->coeff;
            s.lars_configs.lars_weight_decay = c->wd;
            s.lars_configs.epsilon = c->eps;
            CHECK_OK(fleet_strategy_set(&s, "lars_configs.exclude_from_weight_decay", c->exclude));
        }
        f = fleet_init_collective(NULL, &s);
        CHECK(f);
        fl_opt *inner = c->lamb ? fl_opt_adam(c->lr, c->b1, c->b2, c->eps) : fl_opt_momentum(c->lr, c->mu, 0);
        opt = fleet_distributed_optimizer(f, inner, NULL);
        CHECK(opt == inner);
    } else {
        opt = c->lamb ? fl_opt_lamb(c->lr, c->b1, c->b2, c->eps, c->wd)
                      : fl_opt_lars(c->lr, c->mu, c->coeff, c->wd, c->eps);
        CHECK(opt);
        CHECK_OK(fl_opt_set_exclude_from_weight_decay(opt, c->exclude));
    }
    CHECK_EQ_INT(strcmp(fl_opt_type(opt), c->lamb ? "lamb" : "lars_momentum"), 0);
    if (c->attrs) CHECK_OK(fl_opt_set_l2(opt, 0.001f));
    CHECK_OK(fl_opt_minimize(opt, loss));

    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    rparam r[NPARAM];
    double *pv[NPARAM], *gv[NPARAM];
    for (int i = 0; i < NPARAM; i++) {
        fl_tensor *t = fl_scope_find(fl_exe_scope(e), pname[i]);
        CHECK(t);
        r[i].n = fl_tensor_numel(t);
        r[i].p = calloc((size_t)r[i].n, sizeof(double));
        r[i].s1 = calloc((size_t)r[i].n, sizeof(double));
        r[i].s2 = calloc((size_t)r[i].n, sizeof(double));
        gv[i] = calloc((size_t)r[i].n, sizeof(double));
        CHECK(r[i].p && r[i].s1 && r[i].s2 && gv[i]);
        for (int64_t j = 0; j < r[i].n; j++) r[i].p[j] = fl_tensor_f32(t)[j];
        r[i].pow1 = c->b1;
        r[i].pow2 = c->b2;
        pv[i] = r[i].p;
    }
    for (int step = 0; step < STEPS; step++) {
        float xv[N * D];
        th_fill_uniform(xv, N * D, -1.0f, 1.0f, 300u + (unsigned)step);
        fl_tensor *xt = th_f32(2, (const int64_t[]){N, D}, xv);
        fl_feed feed[] = {{"x", xt}};
        CHECK_OK(fl_exe_run(e, p, feed, 1, NULL, 0, NULL));
        fl_tensor_free(xt);
        ref_grads(pv, xv, gv);
        for (int i = 0; i < NPARAM; i++) {
            double l2 = c->attrs ? 0.001 + (double)p_l2[i] : 0.0, scale = c->attrs ? p_lrs[i] : 1.0;
            ref_step(c, &r[i], gv[i], c->lr * scale, l2, c->excl[i]);
        }
        for (int i = 0; i < NPARAM; i++) check_param(e, c, i, &r[i], step);
    }
    for (int i = 0; i < NPARAM; i++) {
        free(r[i].p);
        free(r[i].s1);
        free(r[i].s2);
        free(gv[i]);
    }
    fl_exe_free(e);
    fl_opt_free(opt);
    fleet_free(f);
    fl_prog_free(p);
}

/* Large coefficients, so the trust ratios and decays show in a few steps.  LARS: "w_" is
 * contained in w_0 and w_1; LAMB: no name ends with "w_", "c" ends c. */
static const lcase LARS = {0, 0.5f, 0.9f, 0.05f, 0.01f, 1e-4f, 0, 0, "", {0, 0, 0, 0}, 0};
static const lcase LARS_EXCL = {0, 0.5f, 0.9f, 0.05f, 0.01f, 1e-4f, 0, 0, "w_, b", {1, 1, 1, 0}, 0};
static const lcase LARS_ATTRS = {0, 0.5f, 0.8f, 0.02f, 0.05f, 0, 0, 0, "c", {0, 0, 0, 1}, 1};
static const lcase LARS_NO_DECAY = {0, 0.1f, 0.9f, 0.05f, 0.0f, 0, 0, 0, "", {0, 0, 0, 0}, 0};
static const lcase LAMB = {1, 0.05f, 0, 0, 0.01f, 1e-6f, 0.9f, 0.999f, "", {0, 0, 0, 0}, 0};
static const lcase LAMB_EXCL = {1, 0.05f, 0, 0, 0.1f, 1e-3f, 0.8f, 0.99f, "w_,c", {0, 0, 0, 1}, 0};
static const lcase LAMB_ATTRS = {1, 0.02f, 0, 0, 0.05f, 1e-6f, 0.9f, 0.999f, "b", {0, 0, 1, 0}, 1};

TEST(lars_dense) { run_case(&LARS, 0); }
TEST(lars_exclude_substring) { run_case(&LARS_EXCL, 0); }
TEST(lars_l2_lr_scale) { run_case(&LARS_ATTRS, 0); }
TEST(lars_zero_decay_is_momentum_like) { run_case(&LARS_NO_DECAY, 0); }
TEST(lamb_dense) { run_case(&LAMB, 0); }
TEST(lamb_exclude_suffix) { run_case(&LAMB_EXCL, 0); }
TEST(lamb_l2_lr_scale) { run_case(&LAMB_ATTRS, 0); }
TEST(strategy_lars_replaces_momentum) { run_case(&LARS_EXCL, 1); }
TEST(strategy_lamb_replaces_adam) { run_case(&LAMB_EXCL, 1); }

TEST(strategy_rejects_other_inner_optimizers)
{
    unsetenv("PADDLE_TRAINER_ENDPOINTS");
    fleet_strategy s = fleet_strategy_default();
    CHECK_OK(fleet_strategy_parse(&s, "{\"lars\": true, \"lars_configs\": {\"lars_coeff\": 0.01, "
                                      "\"exclude_from_weight_decay\": [\"b_0\", \"bn\"]}}"));
    CHECK_EQ_INT(strcmp(s.lars_configs.exclude_from_weight_decay, "b_0,bn"), 0);
    CHECK_NEAR(s.lars_configs.lars_coeff, 0.01, 1e-12);
    fleet_t *f = fleet_init_collective(NULL, &s);
    CHECK(f);
    fl_opt *sgd = fl_opt_sgd(0.1f), *adam = fl_opt_adam(0.1f, 0.9f, 0.999f, 1e-8f), *nag = fl_opt_momentum(0.1f, 0.9f, 1);
    CHECK(!fleet_distributed_optimizer(f, sgd, NULL));
    CHECK_STR_HAS(fl_last_error(), "replaces a Momentum optimizer");
    CHECK_STR_HAS(fl_last_error(), "sgd");
    CHECK(!fleet_distributed_optimizer(f, nag, NULL));
    CHECK_STR_HAS(fl_last_error(), "use_nesterov");
    s.lars = 0;
    s.lamb = 1;
    CHECK(!fleet_distributed_optimizer(f, sgd, &s));
    CHECK_STR_HAS(fl_last_error(), "replaces an Adam optimizer");
    CHECK(fleet_distributed_optimizer(f, adam, &s) == adam);
    CHECK_EQ_INT(strcmp(fl_opt_type(adam), "lamb"), 0);
    s.lars = 1;
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "lars and lamb cannot be combined");
    s.lamb = 0;
    s.lars_configs.lars_weight_decay = -1;
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "lars_configs.lars_weight_decay");
    fl_opt_free(sgd);
    fl_opt_free(adam);
    fl_opt_free(nag);
    fleet_free(f);
}

TEST(bad_arguments_and_sparse_gradients)
{
    CHECK(!fl_opt_lars(0.1f, 0.9f, -1.0f, 0.0f, 0.0f));
    CHECK_STR_HAS(fl_last_error(), "lars_coeff must be finite and >= 0");
    CHECK(!fl_opt_lars(0.1f, 0.9f, 0.001f, NAN, 0.0f));
    CHECK_STR_HAS(fl_last_error(), "lars_weight_decay");
    CHECK(!fl_opt_lamb(0.1f, 0.9f, 0.999f, 1e-6f, -0.1f));
    CHECK_STR_HAS(fl_last_error(), "lamb_weight_decay");
    fl_opt *sgd = fl_opt_sgd(0.1f);
    CHECK_FAILS(fl_opt_set_exclude_from_weight_decay(sgd, "b"), FL_EINVAL, "has no weight decay of its own");
    fl_opt_free(sgd);
    /* a sparse embedding gradient: refused at minimize, naming the parameter */
    for (int lamb = 0; lamb < 2; lamb++) {
        fl_prog *p = fl_prog_create();
        fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 0);
        fl_embedding_attr ea;
        memset(&ea, 0, sizeof ea);
        ea.is_sparse = 1;
        ea.param.name = "emb";
        fl_var *loss = fl_layer_mean(fl_layer_embedding(ids, 10, 4, &ea));
        fl_opt *o = lamb ? fl_opt_lamb(0.1f, 0.9f, 0.999f, 1e-6f, 0.01f) : fl_opt_lars(0.1f, 0.9f, 0.001f, 0.0005f, 0);
        CHECK_FAILS(fl_opt_minimize(o, loss), FL_EINVAL, "sparse gradient");
        CHECK_STR_HAS(fl_prog_error(p), "emb");
        fl_opt_free(o);
        fl_prog_free(p);
    }
}

TEST_MAIN(T(lars_dense), T(lars_exclude_substring), T(lars_l2_lr_scale), T(lars_zero_decay_is_momentum_like), T(lamb_dense),
          T(lamb_exclude_suffix), T(lamb_l2_lr_scale), T(strategy_lars_replaces_momentum), T(strategy_lamb_replaces_adam),
          T(strategy_rejects_other_inner_optimizers), T(bad_arguments_and_sparse_gradients))
