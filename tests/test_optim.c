/* test_optim.c - the update ops (sgd, momentum, nesterov momentum, adagrad, adam) and the
 * learning-rate schedule, checked against double-precision reference implementations
 * written here from Paddle's formulas.
 *
 * Dense cases train a small model through fl_opt_minimize (fc over a data input and a
 * free-standing parameter, tanh, mean) for a few steps and compare every parameter and
 * optimizer state variable, fetched by name from the scope, with the reference.  Sparse
 * cases (1) build the update op directly (internal API, tests see src/) on a data variable
 * marked as a sparse gradient, so they can feed SelectedRows with chosen duplicate rows,
 * and (2) train an is_sparse fl_layer_embedding end to end.  A few cases call a kernel
 * directly for inputs the executor cannot feed.  Dead units' state (zero gradients for 1,000
 * steps) never goes subnormal, locally and in the parameter server's rules alike.
 * Tolerance: 1e-5 relative (plus 1e-8 absolute for values crossing zero). */
#include "testhelp.h"
#include "fleet/fleet.h"

#include "graph/graph_internal.h"
#include "ps/ps_internal.h"

#define RTOL 1e-5
#define ATOL 1e-8
#include "optref.h"

/* ---- reference optimizer ---------------------------------------------------------------- */

typedef struct {
    const char *type; /* sgd, momentum, adagrad, adam */
    float lr, mu, eps, b1, b2;
    int nesterov;
} ocfg;

typedef struct {
    int64_t n;
    double *p, *s1, *s2; /* parameter, velocity / moment / moment1, moment2 */
    double pow1, pow2;   /* adam beta pow accumulators */
} rparam;

static void rparam_init(rparam *r, const ocfg *o, const float *init, int64_t n)
{
    r->n = n;
    r->p = calloc((size_t)n, sizeof(double));
    r->s1 = calloc((size_t)n, sizeof(double));
    r->s2 = calloc((size_t)n, sizeof(double));
    CHECK(r->p && r->s1 && r->s2);
    for (int64_t i = 0; i < n; i++) r->p[i] = init[i];
    r->pow1 = (double)o->b1;
    r->pow2 = (double)o->b2;
}

static void rparam_free(rparam *r)
{
    free(r->p);
    free(r->s1);
    free(r->s2);
}

/* One step of Paddle's update on the elements with mask[i] != 0 (all when mask is NULL). */
static void ref_step(const ocfg *o, rparam *r, const double *grad, const char *mask, double lr, double l2)
{
    const double mu = o->mu, eps = o->eps, b1 = o->b1, b2 = o->b2;
    const double lr_t = lr * sqrt(1.0 - r->pow2) / (1.0 - r->pow1), eps_t = eps * sqrt(1.0 - r->pow2);
    for (int64_t i = 0; i < r->n; i++) {
        if (mask && !mask[i]) continue;
        double g = grad[i] + l2 * r->p[i];
        if (!strcmp(o->type, "sgd")) {
            r->p[i] -= lr * g;
        } else if (!strcmp(o->type, "momentum")) {
            r->s1[i] = mu * r->s1[i] + g;
            r->p[i] -= o->nesterov ? lr * (g + mu * r->s1[i]) : lr * r->s1[i];
        } else if (!strcmp(o->type, "adagrad")) {
            r->s1[i] += g * g;
            r->p[i] -= lr * g / (sqrt(r->s1[i]) + eps);
        } else {
            r->s1[i] = b1 * r->s1[i] + (1.0 - b1) * g;
            r->s2[i] = b2 * r->s2[i] + (1.0 - b2) * g * g;
            r->p[i] -= lr_t * r->s1[i] / (sqrt(r->s2[i]) + eps_t);
        }
    }
    if (!strcmp(o->type, "adam")) {
        r->pow1 *= b1;
        r->pow2 *= b2;
    }
}

static fl_opt *make_opt(const ocfg *o)
{
    fl_opt *opt = NULL;
    if (!strcmp(o->type, "sgd")) opt = fl_opt_sgd(o->lr);
    else if (!strcmp(o->type, "momentum")) opt = fl_opt_momentum(o->lr, o->mu, o->nesterov);
    else if (!strcmp(o->type, "adagrad")) opt = fl_opt_adagrad(o->lr, o->eps);
    else opt = fl_opt_adam(o->lr, o->b1, o->b2, o->eps);
    CHECK(opt != NULL);
    return opt;
}

static const ocfg O_SGD = {"sgd", 0.1f, 0, 0, 0, 0, 0};
static const ocfg O_MOM = {"momentum", 0.1f, 0.9f, 0, 0, 0, 0};
static const ocfg O_NAG = {"momentum", 0.1f, 0.9f, 0, 0, 0, 1};
static const ocfg O_ADAGRAD = {"adagrad", 0.1f, 0, 1e-6f, 0, 0, 0};
static const ocfg O_ADAM = {"adam", 0.01f, 0, 1e-8f, 0.9f, 0.999f, 0};
/* Large epsilons, so where epsilon enters the formula shows in the result. */
static const ocfg O_ADAGRAD_EPS = {"adagrad", 0.1f, 0, 0.01f, 0, 0, 0};
static const ocfg O_ADAM_EPS = {"adam", 0.01f, 0, 1e-3f, 0.8f, 0.99f, 0};

/* ---- comparing scope variables ------------------------------------------------------------ */

/* Compares a parameter and each optimizer state variable optimizer.c created for it. */
static void check_param(fl_exe *e, const ocfg *o, const char *name, const rparam *r, int step)
{
    char sn[256];
    check_close(e, name, r->p, r->n, step);
    if (!strcmp(o->type, "momentum")) {
        snprintf(sn, sizeof sn, "%s_velocity_0", name);
        check_close(e, sn, r->s1, r->n, step);
    } else if (!strcmp(o->type, "adagrad")) {
        snprintf(sn, sizeof sn, "%s_moment_0", name);
        check_close(e, sn, r->s1, r->n, step);
    } else if (!strcmp(o->type, "adam")) {
        snprintf(sn, sizeof sn, "%s_moment1_0", name);
        check_close(e, sn, r->s1, r->n, step);
        snprintf(sn, sizeof sn, "%s_moment2_0", name);
        check_close(e, sn, r->s2, r->n, step);
        snprintf(sn, sizeof sn, "%s_beta1_pow_acc_0", name);
        check_close(e, sn, &r->pow1, 1, step);
        snprintf(sn, sizeof sn, "%s_beta2_pow_acc_0", name);
        check_close(e, sn, &r->pow2, 1, step);
    }
}

/* ---- dense: a model trained through fl_opt_minimize ---------------------------------------- */

/* loss = mean(tanh(x W0 + c W1 + b)); x [N, D] data, c [N, E] a created parameter. */
typedef struct {
    ocfg o;
    int attrs;           /* optimizer L2 + per-parameter l2_decay and learning_rate */
    int64_t decay_steps; /* 0: constant rate */
    float decay_rate;
    int staircase;
    int steps;
} dense_case;

/* Optimizer L2 when attrs is set (the per-parameter ones: p_l2, p_lrs in optref.h). */
static const float OPT_L2 = 0.001f;

static double sched_lr(const dense_case *dc, int step)
{
    double base = dc->o.lr;
    if (!dc->decay_steps) return base;
    double e = (double)step / (double)dc->decay_steps;
    if (dc->staircase) e = floor(e);
    return base * pow((double)dc->decay_rate, e);
}

static void run_dense(const dense_case *dc)
{
    fl_prog *p = fl_prog_create();
    fl_var *loss = ref_model(p, dc->attrs);
    fl_opt *opt = make_opt(&dc->o);
    if (dc->attrs) CHECK_OK(fl_opt_set_l2(opt, OPT_L2));
    if (dc->decay_steps) CHECK_OK(fl_opt_set_exponential_decay(opt, dc->decay_steps, dc->decay_rate, dc->staircase));
    CHECK_OK(fl_opt_minimize(opt, loss));
    CHECK_EQ_INT(strcmp(fl_opt_type(opt), dc->o.type), 0);

    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    rparam r[NPARAM];
    double *pv[NPARAM], *gv[NPARAM];
    for (int i = 0; i < NPARAM; i++) {
        fl_tensor *t = find(e, pname[i]);
        rparam_init(&r[i], &dc->o, fl_tensor_f32(t), fl_tensor_numel(t));
        pv[i] = r[i].p;
        gv[i] = calloc((size_t)r[i].n, sizeof(double));
    }
    CHECK_EQ_INT(r[PW0].n, D * K);
    CHECK_EQ_INT(r[PC].n, N * E);
    for (int step = 0; step < dc->steps; step++) {
        float xv[N * D];
        th_fill_uniform(xv, N * D, -1.0f, 1.0f, 100u + (unsigned)step);
        fl_tensor *xt = th_f32(2, (const int64_t[]){N, D}, xv);
        fl_feed feed[] = {{"x", xt}};
        CHECK_OK(fl_exe_run(e, p, feed, 1, NULL, 0, NULL));
        fl_tensor_free(xt);
        double lr = sched_lr(dc, step);
        if (dc->decay_steps) {
            check_close(e, "learning_rate_0", &lr, 1, step);
            fl_tensor *ctr = find(e, "@LR_DECAY_COUNTER@");
            CHECK_EQ_INT(fl_tensor_i64(ctr)[0], step + 1);
        }
        ref_grads(pv, xv, gv);
        for (int i = 0; i < NPARAM; i++) {
            double l2 = dc->attrs ? (double)OPT_L2 + (double)p_l2[i] : 0.0, scale = dc->attrs ? p_lrs[i] : 1.0;
            ref_step(&dc->o, &r[i], gv[i], NULL, lr * scale, l2);
        }
        for (int i = 0; i < NPARAM; i++) check_param(e, &dc->o, pname[i], &r[i], step);
    }
    for (int i = 0; i < NPARAM; i++) {
        rparam_free(&r[i]);
        free(gv[i]);
    }
    fl_exe_free(e);
    fl_opt_free(opt);
    fl_prog_free(p);
}

static void dense(const ocfg *o, int attrs)
{
    dense_case dc = {*o, attrs, 0, 0, 0, 3};
    run_dense(&dc);
}

TEST(dense_sgd) { dense(&O_SGD, 0); }
TEST(dense_momentum) { dense(&O_MOM, 0); }
TEST(dense_momentum_nesterov) { dense(&O_NAG, 0); }
TEST(dense_adagrad) { dense(&O_ADAGRAD, 0); }
TEST(dense_adam) { dense(&O_ADAM, 0); }
/* optimizer L2 (fl_opt_set_l2) + per-parameter l2_decay and learning_rate scale */
TEST(l2_lr_scale_sgd) { dense(&O_SGD, 1); }
TEST(l2_lr_scale_momentum) { dense(&O_MOM, 1); }
TEST(l2_lr_scale_nesterov) { dense(&O_NAG, 1); }
TEST(l2_lr_scale_adagrad) { dense(&O_ADAGRAD_EPS, 1); }
TEST(l2_lr_scale_adam) { dense(&O_ADAM_EPS, 1); }

/* ---- exponential decay ----------------------------------------------------------------------- */

TEST(exp_decay_continuous_sgd)
{
    dense_case dc = {O_SGD, 0, 2, 0.5f, 0, 5};
    run_dense(&dc);
}
TEST(exp_decay_staircase_sgd)
{
    dense_case dc = {O_SGD, 0, 2, 0.5f, 1, 5};
    run_dense(&dc);
}
TEST(exp_decay_staircase_adam_l2)
{
    dense_case dc = {O_ADAM_EPS, 1, 3, 0.8f, 1, 5};
    run_dense(&dc);
}

/* ---- argument and attribute validation ------------------------------------------------------- */

TEST(setters_reject_bad_arguments)
{
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK_FAILS(fl_opt_set_l2(o, -0.5f), FL_EINVAL, "coefficient must be >= 0");
    CHECK_FAILS(fl_opt_set_l2(o, NAN), FL_EINVAL, "coefficient must be >= 0");
    CHECK_FAILS(fl_opt_set_l2(NULL, 0.1f), FL_EINVAL, "optimizer is NULL");
    CHECK_FAILS(fl_opt_set_exponential_decay(o, 0, 0.5f, 0), FL_EINVAL, "decay_steps must be > 0");
    CHECK_FAILS(fl_opt_set_exponential_decay(o, -3, 0.5f, 1), FL_EINVAL, "decay_steps must be > 0, got -3");
    CHECK_FAILS(fl_opt_set_exponential_decay(o, 10, 0.0f, 0), FL_EINVAL, "decay_rate must be > 0");
    CHECK_FAILS(fl_opt_set_exponential_decay(o, 10, -0.5f, 0), FL_EINVAL, "decay_rate must be > 0");
    CHECK_FAILS(fl_opt_set_exponential_decay(o, 10, NAN, 0), FL_EINVAL, "decay_rate must be > 0");
    CHECK_FAILS(fl_opt_set_exponential_decay(NULL, 10, 0.5f, 0), FL_EINVAL, "optimizer is NULL");
    CHECK_OK(fl_opt_set_l2(o, 0.0f));
    /* the rejected calls changed nothing: no schedule ops, l2 attribute 0 */
    fl_prog *p = fl_prog_create();
    fl_var *v = fl_layer_create_parameter(p, FL_SHAPE(3), FL_FLOAT32, NULL);
    CHECK_OK(fl_opt_minimize(o, fl_layer_mean(fl_layer_tanh(v))));
    CHECK_EQ_INT(th_count_ops(p, "exponential_decay"), 0);
    CHECK_EQ_INT(th_count_ops(p, "sgd"), 1);
    for (int i = 0; i < p->nops; i++)
        if (!strcmp(p->ops[i]->def->type, "sgd")) CHECK_NEAR(fl__attr_f(p->ops[i], "l2", -1.0), 0.0, 0.0);
    fl_opt_free(o);
    fl_prog_free(p);
}

/* minimize() reports an update op's invalid hyper-parameters, naming the op and parameter. */
static void bad_minimize(fl_opt *o, const fl_param_attr *a, const char *msg)
{
    fl_prog *p = fl_prog_create();
    fl_var *v = fl_layer_create_parameter(p, FL_SHAPE(3), FL_FLOAT32, a);
    CHECK_FAILS(fl_opt_minimize(o, fl_layer_mean(fl_layer_tanh(v))), FL_EINVAL, msg);
    CHECK_STR_HAS(fl_prog_error(p), msg);
    fl_opt_free(o);
    fl_prog_free(p);
}

TEST(update_ops_reject_bad_hyperparameters)
{
    fl_param_attr named = {0};
    named.name = "theta";
    bad_minimize(fl_opt_adam(0.1f, 1.0f, 0.999f, 1e-8f), &named, "adam: beta1 of parameter 'theta' must be in [0, 1)");
    bad_minimize(fl_opt_adam(0.1f, 0.9f, 1.5f, 1e-8f), &named, "beta2 of parameter 'theta'");
    bad_minimize(fl_opt_adam(0.1f, 0.9f, 0.999f, -1.0f), &named, "adam: epsilon");
    bad_minimize(fl_opt_adagrad(0.1f, -1e-6f), &named, "adagrad: epsilon of parameter 'theta'");
    bad_minimize(fl_opt_momentum(0.1f, INFINITY, 0), &named, "momentum: mu");
    fl_param_attr neg = named;
    neg.l2_decay = -0.5f;
    bad_minimize(fl_opt_sgd(0.1f), &neg, "sgd: L2 coefficient of parameter 'theta' must be finite and >= 0");
}

/* ---- sparse (SelectedRows) gradients ----------------------------------------------------------- */

enum { R = 6, W = 3 };

/* A program holding one `o->type` update op on parameter "t" [R, W] whose gradient is the
 * data variable "g" [-1, W], marked as a sparse gradient so it accepts SelectedRows feeds
 * (dense [R, W] feeds work too).  Names of the state follow optimizer.c. */
static fl_var *out_var(fl_prog *p, fl_var *in, int sep)
{
    if (!sep) return in;
    char name[128];
    snprintf(name, sizeof name, "%s@OUT", fl_var_name(in));
    fl_var *v = fl__var_create(p, name, FL_FLOAT32, 1, (const int64_t[]){1});
    CHECK(v != NULL);
    return v;
}

/* With sep, every output is its own variable "<input>@OUT" instead of the input itself. */
static fl_prog *build_update_ex(const ocfg *o, double l2, double lr_scale, int sep)
{
    fl_prog *p = fl_prog_create();
    fl_param_attr a = {0};
    a.name = "t";
    a.init = fl_init_uniform(-1.0f, 1.0f);
    fl_var *w = fl_layer_create_parameter(p, FL_SHAPE(R, W), FL_FLOAT32, &a);
    fl_var *g = fl_layer_data(p, "g", FL_SHAPE(W), FL_FLOAT32, 0);
    CHECK(w && g);
    g->is_sparse_grad = 1;
    int64_t one = 1, shape[2] = {R, W};
    fl_var *lr = fl__persistable_create(p, "learning_rate_0", FL_FLOAT32, 1, &one, o->lr);
    CHECK(lr != NULL);
    fl_var *s[4] = {NULL};
    fl_var *so[4] = {NULL}, *wo = out_var(p, w, sep);
    fl_io in[8] = {FL_IO1("Param", w), FL_IO1("Grad", g), FL_IO1("LearningRate", lr)}, out[6] = {FL_IO1("ParamOut", wo)};
    int ni = 3, no = 1;
    static const char *const sin_m[] = {"Velocity"}, *const sout_m[] = {"VelocityOut"}, *const suf_m[] = {"velocity"};
    static const char *const sin_a[] = {"Moment"}, *const sout_a[] = {"MomentOut"}, *const suf_a[] = {"moment"};
    static const char *const sin_d[] = {"Moment1", "Moment2", "Beta1Pow", "Beta2Pow"};
    static const char *const sout_d[] = {"Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"};
    static const char *const suf_d[] = {"moment1", "moment2", "beta1_pow_acc", "beta2_pow_acc"};
    const char *const *sin = NULL, *const *sout = NULL, *const *suf = NULL;
    int ns = 0;
    if (!strcmp(o->type, "momentum")) sin = sin_m, sout = sout_m, suf = suf_m, ns = 1;
    if (!strcmp(o->type, "adagrad")) sin = sin_a, sout = sout_a, suf = suf_a, ns = 1;
    if (!strcmp(o->type, "adam")) sin = sin_d, sout = sout_d, suf = suf_d, ns = 4;
    for (int i = 0; i < ns; i++) {
        char name[64];
        snprintf(name, sizeof name, "t_%s_0", suf[i]);
        int pw = i >= 2;
        s[i] = fl__persistable_create(p, name, FL_FLOAT32, pw ? 1 : 2, pw ? &one : shape,
                                      pw ? (i == 2 ? o->b1 : o->b2) : 0.0f);
        CHECK(s[i] != NULL);
        so[i] = out_var(p, s[i], sep);
        in[ni++] = (fl_io){sin[i], &s[i], 1};
        out[no++] = (fl_io){sout[i], &so[i], 1};
    }
    fl_op *op = fl__op_new(p, o->type, in, ni, out, no);
    CHECK(op != NULL);
    CHECK_OK(fl__attr_set_f(op, "l2", l2));
    CHECK_OK(fl__attr_set_f(op, "lr_scale", lr_scale));
    CHECK_OK(fl__attr_set_f(op, "mu", o->mu));
    CHECK_OK(fl__attr_set_i(op, "use_nesterov", o->nesterov));
    CHECK_OK(fl__attr_set_f(op, "epsilon", o->eps));
    CHECK_OK(fl__attr_set_f(op, "beta1", o->b1));
    CHECK_OK(fl__attr_set_f(op, "beta2", o->b2));
    CHECK_OK(fl__op_finish(op));
    return p;
}

static fl_prog *build_update(const ocfg *o, double l2, double lr_scale) { return build_update_ex(o, l2, lr_scale, 0); }

/* SelectedRows gradient: nrows rows of an [R, W] matrix, values in vals. */
static fl_tensor *rows_tensor(const int64_t *rows, int64_t nrows, const float *vals, int64_t height)
{
    fl_tensor *t = th_f32(2, (const int64_t[]){nrows, W}, vals);
    CHECK(t != NULL);
    CHECK_OK(fl_tensor_set_rows(t, rows, nrows, height));
    return t;
}

/* Three steps of rows with duplicates; rows 0 and 3 are never touched. */
static const int64_t step_rows[3][4] = {{1, 4, 1, -1}, {4, 2, -1, -1}, {1, 1, 5, 4}};
static const int step_nrows[3] = {3, 2, 4};

static void sparse_lazy(const ocfg *o, double l2, double lr_scale)
{
    fl_prog *p = build_update(o, l2, lr_scale);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    float init[R * W];
    memcpy(init, fl_tensor_f32(find(e, "t")), sizeof init);
    rparam r;
    rparam_init(&r, o, init, R * W);
    for (int step = 0; step < 3; step++) {
        int nr = step_nrows[step];
        float vals[4 * W];
        th_fill_uniform(vals, nr * W, -1.0f, 1.0f, 7u + (unsigned)step);
        fl_tensor *gt = rows_tensor(step_rows[step], nr, vals, R);
        fl_feed feed[] = {{"g", gt}};
        CHECK_OK(fl_exe_run(e, p, feed, 1, NULL, 0, NULL));
        fl_tensor_free(gt);
        double grad[R * W] = {0};
        char mask[R * W] = {0};
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < W; j++) {
                grad[step_rows[step][i] * W + j] += vals[i * W + j];
                mask[step_rows[step][i] * W + j] = 1;
            }
        ref_step(o, &r, grad, mask, (double)o->lr * lr_scale, (double)(float)l2);
        check_param(e, o, "t", &r, step);
    }
    /* lazy: rows 0 and 3 and their state are exactly as initialised */
    const float *t = fl_tensor_f32(find(e, "t"));
    const char *state = !strcmp(o->type, "momentum")  ? "t_velocity_0"
                        : !strcmp(o->type, "adagrad") ? "t_moment_0"
                        : !strcmp(o->type, "adam")    ? "t_moment1_0"
                                                      : NULL;
    const float *sv = state ? fl_tensor_f32(find(e, state)) : NULL;
    for (int row = 0; row < R; row += 3)
        for (int j = 0; j < W; j++) {
            CHECK(t[row * W + j] == init[row * W + j]);
            if (sv) CHECK(sv[row * W + j] == 0.0f);
        }
    if (!strcmp(o->type, "adam")) {
        const float *m2 = fl_tensor_f32(find(e, "t_moment2_0"));
        for (int j = 0; j < W; j++) CHECK(m2[j] == 0.0f && m2[3 * W + j] == 0.0f);
    }
    rparam_free(&r);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(sparse_lazy_sgd) { sparse_lazy(&O_SGD, 0.0, 1.0); }
TEST(sparse_lazy_momentum) { sparse_lazy(&O_MOM, 0.0, 1.0); }
TEST(sparse_lazy_nesterov) { sparse_lazy(&O_NAG, 0.0, 1.0); }
TEST(sparse_lazy_adagrad) { sparse_lazy(&O_ADAGRAD, 0.0, 1.0); }
TEST(sparse_lazy_adam) { sparse_lazy(&O_ADAM, 0.0, 1.0); }
/* L2 only on touched rows, and lr_scale */
TEST(sparse_l2_lr_scale_sgd) { sparse_lazy(&O_SGD, 0.05, 2.0); }
TEST(sparse_l2_lr_scale_momentum) { sparse_lazy(&O_MOM, 0.05, 2.0); }
TEST(sparse_l2_lr_scale_adagrad) { sparse_lazy(&O_ADAGRAD_EPS, 0.05, 2.0); }
TEST(sparse_l2_lr_scale_adam) { sparse_lazy(&O_ADAM_EPS, 0.05, 2.0); }

/* SGD without L2 leaves a parameter at +-inf where it is (Paddle's sgd op: p - lr * g), with
 * L2 the decay term is applied as before. */
TEST(sgd_without_l2_keeps_infinite_parameters)
{
    float p[4] = {INFINITY, -INFINITY, 1.0f, 2.0f}, g[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    fl__sgd_seg(p, g, 4, 0.1f, 0.0f);
    CHECK(isinf(p[0]) && p[0] > 0);
    CHECK(isinf(p[1]) && p[1] < 0);
    CHECK_NEAR(p[2], 0.95, 1e-7);
    CHECK_NEAR(p[3], 1.95, 1e-7);
    float q[2] = {1.0f, 2.0f};
    fl__sgd_seg(q, g, 2, 0.1f, 0.5f);
    CHECK_NEAR(q[0], 1.0 - 0.1 * (0.5 + 0.5), 1e-7);
    CHECK_NEAR(q[1], 2.0 - 0.1 * (0.5 + 1.0), 1e-7);
}

/* ---- no subnormal state ---------------------------------------------------------------- */

static int64_t count_subnormal(const float *x, int64_t n)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += fpclassify(x[i]) == FP_SUBNORMAL;
    return k;
}

/* A dead unit: one gradient g0, then 1,000 steps of gz (0: the state decays geometrically;
 * adagrad: a gradient whose square is below FLT_MIN).  The state never holds a subnormal
 * (it is flushed to 0 below FLT_MIN, where x86 arithmetic is slow), and the parameter
 * server's rule (src/ps/optim.c) stays bit-identical to the local op all the way. */
static void no_subnormal_state(const ocfg *o, fl_ps_opt_kind kind, float g0, float gz)
{
    fl_prog *p = build_update(o, 0.0, 1.0);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    const char *sn = !strcmp(o->type, "adagrad") ? "t_moment_0" : !strcmp(o->type, "adam") ? "t_moment1_0" : "t_velocity_0";
    fl_ps_optimizer pc = {kind, o->lr, 0.0f, o->b1, o->b2, o->eps, o->mu, o->nesterov};
    fl__ps_opt po;
    fl__ps_opt_init(&po, &pc);
    float w[W], m1[W] = {0}, m2[W] = {0}, pows[2];
    fl__ps_opt_pows_init(&po, pows);
    memcpy(w, fl_tensor_f32(find(e, "t")) + W, sizeof w);
    int64_t row = 1, flushed = 0;
    for (int step = 0; step < 1000; step++) {
        float vals[W];
        for (int j = 0; j < W; j++) vals[j] = step ? gz : g0 * (float)(j + 1);
        fl_tensor *gt = rows_tensor(&row, 1, vals, R);
        fl_feed feed[] = {{"g", gt}};
        CHECK_OK(fl_exe_run(e, p, feed, 1, NULL, 0, NULL));
        fl_tensor_free(gt);
        CHECK_OK(fl__ps_opt_apply(&po, w, m1, m2, vals, W, 1.0f, pows));
        fl__ps_opt_pows_advance(&po, pows);
        const float *st = fl_tensor_f32(find(e, sn)) + W, *pw = fl_tensor_f32(find(e, "t")) + W;
        if (count_subnormal(st, W))
            TFAIL("%s: step %d: state '%s' holds %lld subnormal values (first %g)", o->type, step, sn,
                  (long long)count_subnormal(st, W), (double)st[0]);
        CHECK(memcmp(st, m1, sizeof m1) == 0 && memcmp(pw, w, sizeof w) == 0);
        if (!strcmp(o->type, "adam")) CHECK(memcmp(fl_tensor_f32(find(e, "t_moment2_0")) + W, m2, sizeof m2) == 0);
        flushed += st[0] == 0.0f;
    }
    CHECK(flushed > 0); /* the decay did reach the flush */
    fl_exe_free(e);
    fl_prog_free(p);
}

/* The servers' rule (src/ps/optim.c, through the tensor kernels) against the local op on
 * random gradients, with L2, for 200 steps: bit-identical, with the gradient used as it is
 * (async, scale 1) and scaled by the server (sync with 2 workers, scale 0.5; the local op is
 * fed the gradient times 0.5, rounded to float as the server rounds it). */
static void server_rule_matches_local(const ocfg *o, fl_ps_opt_kind kind)
{
    const float l2 = 0.05f, scales[2] = {1.0f, 0.5f};
    for (int si = 0; si < 2; si++) {
        fl_prog *p = build_update(o, l2, 1.0);
        fl_exe *e = fl_exe_create(NULL);
        CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
        const char *sn = !strcmp(o->type, "adagrad")    ? "t_moment_0"
                         : !strcmp(o->type, "adam")     ? "t_moment1_0"
                         : !strcmp(o->type, "momentum") ? "t_velocity_0"
                                                        : NULL;
        fl_ps_optimizer pc = {kind, o->lr, l2, o->b1, o->b2, o->eps, o->mu, o->nesterov};
        fl__ps_opt po;
        fl__ps_opt_init(&po, &pc);
        float w[W], m1[W] = {0}, m2[W] = {0}, pows[2];
        fl__ps_opt_pows_init(&po, pows);
        memcpy(w, fl_tensor_f32(find(e, "t")) + 2 * W, sizeof w);
        const int64_t row = 2;
        for (int step = 0; step < 200; step++) {
            float g[W], gs[W];
            th_fill_uniform(g, W, -2.0f, 2.0f, 100u + (unsigned)step);
            for (int j = 0; j < W; j++) gs[j] = g[j] * scales[si];
            fl_tensor *gt = rows_tensor(&row, 1, gs, R);
            fl_feed feed[] = {{"g", gt}};
            CHECK_OK(fl_exe_run(e, p, feed, 1, NULL, 0, NULL));
            fl_tensor_free(gt);
            CHECK_OK(fl__ps_opt_apply(&po, w, m1, m2, g, W, scales[si], pows));
            fl__ps_opt_pows_advance(&po, pows);
            if (memcmp(fl_tensor_f32(find(e, "t")) + 2 * W, w, sizeof w))
                TFAIL("%s, scale %g, step %d: server parameter %.9g, local %.9g", o->type, (double)scales[si], step,
                      (double)w[0], (double)fl_tensor_f32(find(e, "t"))[2 * W]);
            if (sn) CHECK(memcmp(fl_tensor_f32(find(e, sn)) + 2 * W, m1, sizeof m1) == 0);
            if (!strcmp(o->type, "adam")) {
                CHECK(memcmp(fl_tensor_f32(find(e, "t_moment2_0")) + 2 * W, m2, sizeof m2) == 0);
                CHECK(fl_tensor_f32(find(e, "t_beta1_pow_acc_0"))[0] == pows[0]);
                CHECK(fl_tensor_f32(find(e, "t_beta2_pow_acc_0"))[0] == pows[1]);
            }
        }
        fl_exe_free(e);
        fl_prog_free(p);
    }
}

TEST(server_rule_matches_local_sgd) { server_rule_matches_local(&O_SGD, FL_PS_OPT_SGD); }
TEST(server_rule_matches_local_momentum) { server_rule_matches_local(&O_MOM, FL_PS_OPT_MOMENTUM); }
TEST(server_rule_matches_local_nesterov) { server_rule_matches_local(&O_NAG, FL_PS_OPT_MOMENTUM); }
TEST(server_rule_matches_local_adagrad) { server_rule_matches_local(&O_ADAGRAD_EPS, FL_PS_OPT_ADAGRAD); }
TEST(server_rule_matches_local_adam) { server_rule_matches_local(&O_ADAM_EPS, FL_PS_OPT_ADAM); }

TEST(dead_unit_state_momentum) { no_subnormal_state(&O_MOM, FL_PS_OPT_MOMENTUM, 1e-3f, 0.0f); }
TEST(dead_unit_state_nesterov) { no_subnormal_state(&O_NAG, FL_PS_OPT_MOMENTUM, 1e-3f, 0.0f); }
TEST(dead_unit_state_adam) { no_subnormal_state(&O_ADAM, FL_PS_OPT_ADAM, 1e-3f, 0.0f); }
TEST(dead_unit_state_adagrad) { no_subnormal_state(&O_ADAGRAD, FL_PS_OPT_ADAGRAD, 1e-20f, 1e-20f); }

/* Calls op's kernel directly on the given tensors, one per slot in def order; outputs are
 * bound to their inputs as minimize() does (ParamOut = Param, state outputs = state). */
static int call_kernel(const fl_op *op, fl_tensor **ins, int nin, void **state)
{
    static const int out_of[FL_OP_MAX_SLOTS] = {0, 3, 4, 5, 6};
    fl_kctx c;
    memset(&c, 0, sizeof c);
    c.op = op;
    for (int s = 0; s < nin; s++) c.in[s] = &ins[s], c.nin[s] = 1;
    for (int o = 0; o < FL_OP_MAX_SLOTS && op->def->out_names[o]; o++) c.out[o] = &ins[out_of[o]], c.nout[o] = 1;
    c.state = state;
    return op->def->run(&c);
}

/* Adam's beta pow accumulators advance once per step, whatever the number of rows. */
TEST(sparse_adam_pow_once_per_step)
{
    fl_prog *p = build_update(&O_ADAM, 0.0, 1.0);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    float init[R * W];
    memcpy(init, fl_tensor_f32(find(e, "t")), sizeof init);
    const int64_t rows[4] = {2, 2, 2, 2}, row5[1] = {5};
    float vals[4 * W];
    th_fill_uniform(vals, 4 * W, -1.0f, 1.0f, 5u);
    fl_tensor *g4 = rows_tensor(rows, 4, vals, R), *g1 = rows_tensor(row5, 1, vals, R);
    fl_feed f4[] = {{"g", g4}}, f1[] = {{"g", g1}};
    CHECK_OK(fl_exe_run(e, p, f4, 1, NULL, 0, NULL));
    double b1 = (double)0.9f, b2 = (double)0.999f, want1 = b1 * b1, want2 = b2 * b2;
    check_close(e, "t_beta1_pow_acc_0", &want1, 1, 0);
    check_close(e, "t_beta2_pow_acc_0", &want2, 1, 0);
    const float *t = fl_tensor_f32(find(e, "t"));
    for (int i = 0; i < R * W; i++) CHECK((i / W == 2) == (t[i] != init[i]));
    CHECK_OK(fl_exe_run(e, p, f1, 1, NULL, 0, NULL));
    want1 *= b1;
    want2 *= b2;
    check_close(e, "t_beta1_pow_acc_0", &want1, 1, 1);
    check_close(e, "t_beta2_pow_acc_0", &want2, 1, 1);
    fl_tensor_free(g4);
    fl_tensor_free(g1);
    fl_exe_free(e);
    fl_prog_free(p);
}

/* Kernel-level: an empty SelectedRows gradient changes no row, but adam's step still counts
 * (the pows advance).  Called directly because an empty SelectedRows does not survive the
 * executor's feed copy yet (fl_tensor_copy of a 0-row SelectedRows yields a dense tensor). */
TEST(sparse_empty_gradient_kernel)
{
    fl_prog *p = build_update(&O_ADAM, 0.1, 1.0);
    const fl_op *op = p->ops[p->nops - 1];
    CHECK_EQ_INT(strcmp(op->def->type, "adam"), 0);
    float wv[R * W], m[R * W], lrv = 0.01f, b1 = 0.9f, b2 = 0.999f;
    th_fill_uniform(wv, R * W, -1.0f, 1.0f, 9u);
    th_fill_uniform(m, R * W, 0.1f, 1.0f, 10u);
    const int64_t sh[2] = {R, W}, one = 1, rows[1] = {0};
    fl_tensor *ins[7] = {th_f32(2, sh, wv), rows_tensor(rows, 0, wv, R), th_f32(1, &one, &lrv), th_f32(2, sh, m),
                         th_f32(2, sh, m),  th_f32(1, &one, &b1),        th_f32(1, &one, &b2)};
    CHECK(fl_tensor_is_rows(ins[1]));
    void *state = NULL;
    CHECK_OK(call_kernel(op, ins, 7, &state));
    CHECK(!memcmp(fl_tensor_f32(ins[0]), wv, sizeof wv));
    CHECK(!memcmp(fl_tensor_f32(ins[3]), m, sizeof m));
    CHECK(!memcmp(fl_tensor_f32(ins[4]), m, sizeof m));
    CHECK_NEAR(fl_tensor_f32(ins[5])[0], (double)b1 * b1, 1e-7);
    CHECK_NEAR(fl_tensor_f32(ins[6])[0], (double)b2 * b2, 1e-7);
    op->def->state_free(state);
    for (int i = 0; i < 7; i++) fl_tensor_free(ins[i]);
    fl_prog_free(p);
}

TEST(sparse_bad_height_is_an_error)
{
    fl_prog *p = build_update(&O_MOM, 0.0, 1.0);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    const int64_t rows[2] = {0, 1};
    float vals[2 * W] = {1, 2, 3, 4, 5, 6};
    fl_tensor *g = rows_tensor(rows, 2, vals, R - 1);
    fl_feed f[] = {{"g", g}};
    CHECK_FAILS(fl_exe_run(e, p, f, 1, NULL, 0, NULL), FL_EINVAL,
                "sparse gradient height 5 differs from parameter 't' rows 6");
    fl_tensor_free(g);
    fl_exe_free(e);
    fl_prog_free(p);
}

/* Kernel-level: a row index beyond the parameter (which the executor's feed path already
 * refuses, but another kernel could produce) is an error, and the merge scratch stays
 * clean: the next call merges duplicates correctly. */
TEST(sparse_row_out_of_range_kernel)
{
    fl_prog *p = build_update(&O_SGD, 0.0, 1.0);
    const fl_op *op = p->ops[p->nops - 1];
    CHECK_EQ_INT(strcmp(op->def->type, "sgd"), 0);
    float wv[R * W], one = 0.5f;
    for (int i = 0; i < R * W; i++) wv[i] = (float)i;
    fl_tensor *w = th_f32(2, (const int64_t[]){R, W}, wv), *lr = th_f32(1, (const int64_t[]){1}, &one);
    const int64_t rows[3] = {2, 4, 2};
    float vals[3 * W] = {1, 1, 1, 2, 2, 2, 4, 4, 4};
    fl_tensor *g = rows_tensor(rows, 3, vals, R);
    void *state = NULL;
    fl_tensor *ins[3] = {w, g, lr};
    g->rows[1] = R + 3; /* corrupt the second row id */
    CHECK_FAILS(call_kernel(op, ins, 3, &state), FL_EINVAL,
                "sparse gradient row #1 is 9, out of range [0, 6) of parameter 't'");
    for (int i = 0; i < R * W; i++) CHECK(fl_tensor_f32(w)[i] == wv[i]);
    g->rows[1] = 4;
    CHECK_OK(call_kernel(op, ins, 3, &state));
    const float *out = fl_tensor_f32(w);
    for (int i = 0; i < R * W; i++) {
        float want = wv[i] - (i / W == 2 ? 0.5f * 5.0f : i / W == 4 ? 0.5f * 2.0f : 0.0f);
        CHECK_NEAR(out[i], want, 1e-6);
    }
    op->def->state_free(state);
    fl_tensor_free(w);
    fl_tensor_free(lr);
    fl_tensor_free(g);
    fl_prog_free(p);
}

/* A program binding outputs to other variables than the inputs (legal in Paddle): the
 * outputs receive the update, the inputs stay as they were; shapes are inferred. */
static void separate_outputs(const ocfg *o, int sparse)
{
    fl_prog *p = build_update_ex(o, 0.02, 1.0, 1);
    CHECK_EQ_INT(fl_var_ndim(fl_prog_var(p, "t@OUT")), 2);
    CHECK_EQ_INT(fl_var_shape(fl_prog_var(p, "t@OUT"))[0], R);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_set_eager_deletion(e, 0)); /* t@OUT is read from the scope after the run */
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    float init[R * W];
    memcpy(init, fl_tensor_f32(find(e, "t")), sizeof init);
    rparam r;
    rparam_init(&r, o, init, R * W);
    const int64_t rows[3] = {3, 0, 3};
    float vals[3 * W];
    th_fill_uniform(vals, 3 * W, -1.0f, 1.0f, 77u);
    double grad[R * W] = {0};
    char mask[R * W] = {0};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < W; j++) grad[rows[i] * W + j] += vals[i * W + j], mask[rows[i] * W + j] = 1;
    fl_tensor *gt;
    if (sparse) {
        gt = rows_tensor(rows, 3, vals, R);
    } else {
        float dense[R * W];
        for (int i = 0; i < R * W; i++) dense[i] = (float)grad[i];
        gt = th_f32(2, (const int64_t[]){R, W}, dense);
    }
    fl_feed feed[] = {{"g", gt}};
    for (int rep = 0; rep < 2; rep++) CHECK_OK(fl_exe_run(e, p, feed, 1, NULL, 0, NULL)); /* same inputs: same result */
    fl_tensor_free(gt);
    ref_step(o, &r, grad, sparse ? mask : NULL, o->lr, (double)0.02f);
    check_close(e, "t@OUT", r.p, R * W, 0);
    CHECK(!memcmp(init, fl_tensor_f32(find(e, "t")), sizeof init));
    if (!strcmp(o->type, "momentum")) {
        check_close(e, "t_velocity_0@OUT", r.s1, R * W, 0);
        const float *v = fl_tensor_f32(find(e, "t_velocity_0"));
        for (int i = 0; i < R * W; i++) CHECK(v[i] == 0.0f);
    } else if (!strcmp(o->type, "adam")) {
        check_close(e, "t_moment1_0@OUT", r.s1, R * W, 0);
        check_close(e, "t_moment2_0@OUT", r.s2, R * W, 0);
        check_close(e, "t_beta1_pow_acc_0@OUT", &r.pow1, 1, 0);
        check_close(e, "t_beta2_pow_acc_0@OUT", &r.pow2, 1, 0);
        double b1 = o->b1;
        check_close(e, "t_beta1_pow_acc_0", &b1, 1, 0);
    }
    rparam_free(&r);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(separate_outputs_sgd_sparse) { separate_outputs(&O_SGD, 1); }
TEST(separate_outputs_momentum_dense) { separate_outputs(&O_MOM, 0); }
TEST(separate_outputs_momentum_sparse) { separate_outputs(&O_MOM, 1); }
TEST(separate_outputs_adagrad_sparse) { separate_outputs(&O_ADAGRAD_EPS, 1); }
TEST(separate_outputs_adam_dense) { separate_outputs(&O_ADAM_EPS, 0); }
TEST(separate_outputs_adam_sparse) { separate_outputs(&O_ADAM_EPS, 1); }

/* ---- sparse end to end: fl_layer_embedding with is_sparse ----------------------------------- */

/* loss = mean(tanh(embedding(ids))) over a [V, DM] table "emb"; rows 0 and 3 never looked up. */
enum { V = 6, DM = 3, NI = 4 };
static const int64_t emb_ids[3][NI] = {{1, 4, 1, 5}, {4, 2, 2, 4}, {1, 1, 5, 4}};

static fl_prog *build_embedding(const ocfg *o, int sparse, float opt_l2, float emb_l2, float emb_lrs)
{
    fl_prog *p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 0);
    fl_embedding_attr ea = {0};
    ea.is_sparse = sparse;
    ea.param.name = "emb";
    ea.param.init = fl_init_uniform(-1.0f, 1.0f);
    ea.param.l2_decay = emb_l2;
    ea.param.learning_rate = emb_lrs;
    fl_var *loss = fl_layer_mean(fl_layer_tanh(fl_layer_embedding(ids, V, DM, &ea)));
    CHECK(loss != NULL);
    fl_opt *opt = make_opt(o);
    CHECK_OK(fl_opt_set_l2(opt, opt_l2));
    CHECK_OK(fl_opt_minimize(opt, loss));
    fl_opt_free(opt);
    return p;
}

static void run_embedding_step(fl_exe *e, fl_prog *p, int step)
{
    fl_tensor *it = th_i64(2, (const int64_t[]){NI, 1}, emb_ids[step]);
    fl_feed feed[] = {{"ids", it}};
    CHECK_OK(fl_exe_run(e, p, feed, 1, NULL, 0, NULL));
    fl_tensor_free(it);
}

static void embedding_lazy(const ocfg *o, float opt_l2, float emb_l2, float emb_lrs)
{
    fl_prog *p = build_embedding(o, 1, opt_l2, emb_l2, emb_lrs);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_set_eager_deletion(e, 0)); /* emb@GRAD is read from the scope after each step */
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    float init[V * DM];
    memcpy(init, fl_tensor_f32(find(e, "emb")), sizeof init);
    rparam r;
    rparam_init(&r, o, init, V * DM);
    for (int step = 0; step < 3; step++) {
        double grad[V * DM] = {0};
        char mask[V * DM] = {0};
        for (int i = 0; i < NI; i++)
            for (int j = 0; j < DM; j++) {
                int64_t k = emb_ids[step][i] * DM + j;
                double y = tanh(r.p[k]);
                grad[k] += (1.0 - y * y) / (double)(NI * DM);
                mask[k] = 1;
            }
        run_embedding_step(e, p, step);
        /* the gradient really is SelectedRows, one row per id (duplicates kept) */
        fl_tensor *g = find(e, "emb@GRAD");
        int64_t nrows = 0, height = 0;
        CHECK(fl_tensor_rows(g, &nrows, &height) != NULL);
        CHECK_EQ_INT(nrows, NI);
        CHECK_EQ_INT(height, V);
        double lrs = emb_lrs > 0 ? emb_lrs : 1.0;
        ref_step(o, &r, grad, mask, (double)o->lr * lrs, (double)opt_l2 + (double)emb_l2);
        check_param(e, o, "emb", &r, step);
    }
    const float *t = fl_tensor_f32(find(e, "emb"));
    for (int row = 0; row < V; row += 3)
        for (int j = 0; j < DM; j++) CHECK(t[row * DM + j] == init[row * DM + j]);
    rparam_free(&r);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(embedding_sparse_sgd) { embedding_lazy(&O_SGD, 0.0f, 0.0f, 0.0f); }
TEST(embedding_sparse_momentum) { embedding_lazy(&O_MOM, 0.0f, 0.0f, 0.0f); }
TEST(embedding_sparse_nesterov) { embedding_lazy(&O_NAG, 0.0f, 0.0f, 0.0f); }
TEST(embedding_sparse_adagrad) { embedding_lazy(&O_ADAGRAD, 0.0f, 0.0f, 0.0f); }
TEST(embedding_sparse_adam) { embedding_lazy(&O_ADAM, 0.0f, 0.0f, 0.0f); }
TEST(embedding_sparse_l2_lr_scale_momentum) { embedding_lazy(&O_MOM, 0.01f, 0.04f, 3.0f); }
TEST(embedding_sparse_l2_lr_scale_adam) { embedding_lazy(&O_ADAM_EPS, 0.01f, 0.04f, 3.0f); }

/* is_sparse and dense tables trained by SGD agree on the rows looked up (in every step when
 * L2 is on); never-looked-up rows stay put with is_sparse, and shrink densely under L2. */
static void embedding_sparse_vs_dense(float opt_l2)
{
    fl_prog *ps = build_embedding(&O_SGD, 1, opt_l2, 0.0f, 0.0f), *pd = build_embedding(&O_SGD, 0, opt_l2, 0.0f, 0.0f);
    fl_exe *es = fl_exe_create(NULL), *ed = fl_exe_create(NULL);
    CHECK_OK(fl_exe_set_eager_deletion(es, 0)); /* emb@GRAD is read from the scope after the run */
    CHECK_OK(fl_exe_set_eager_deletion(ed, 0));
    CHECK_OK(fl_exe_run(es, fl_prog_startup(ps), NULL, 0, NULL, 0, NULL));
    CHECK_OK(fl_exe_run(ed, fl_prog_startup(pd), NULL, 0, NULL, 0, NULL));
    float init[V * DM];
    memcpy(init, fl_tensor_f32(find(es, "emb")), sizeof init);
    CHECK(!memcmp(init, fl_tensor_f32(find(ed, "emb")), sizeof init));
    for (int step = 0; step < 3; step++) {
        run_embedding_step(es, ps, step);
        run_embedding_step(ed, pd, step);
    }
    CHECK(fl_tensor_is_rows(find(es, "emb@GRAD")) && !fl_tensor_is_rows(find(ed, "emb@GRAD")));
    const float *ts = fl_tensor_f32(find(es, "emb")), *td = fl_tensor_f32(find(ed, "emb"));
    static const int every[V] = {0, 0, 0, 0, 1, 0}, never[V] = {1, 0, 0, 1, 0, 0};
    for (int row = 0; row < V; row++)
        for (int j = 0; j < DM; j++) {
            int i = row * DM + j;
            if (never[row]) {
                CHECK(ts[i] == init[i]);
                if (opt_l2 > 0) CHECK(fabs(td[i]) < fabs(init[i]));
                else CHECK(td[i] == init[i]);
            } else if (every[row] || opt_l2 == 0) {
                CHECK_NEAR(ts[i], td[i], 1e-6 * fabs(td[i]) + 1e-9);
                CHECK(ts[i] != init[i]);
            }
        }
    fl_exe_free(es);
    fl_exe_free(ed);
    fl_prog_free(ps);
    fl_prog_free(pd);
}

TEST(embedding_sparse_equals_dense_sgd) { embedding_sparse_vs_dense(0.0f); }
TEST(embedding_sparse_vs_dense_sgd_l2) { embedding_sparse_vs_dense(0.05f); }

/* A NULL handle passed on after a failed constructor keeps the first error in the message:
 * fl_opt_minimize(NULL) after fleet_distributed_optimizer failed names why it failed. */
TEST(null_handle_keeps_the_earlier_error)
{
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK(fleet_distributed_optimizer(NULL, o, NULL) == NULL);
    CHECK_STR_HAS(fl_last_error(), "fleet_distributed_optimizer: fleet handle is NULL");
    CHECK_FAILS(fl_opt_minimize(NULL, NULL), FL_EINVAL,
                "minimize: optimizer is NULL or invalid (an earlier call "
                "failed: fleet_distributed_optimizer: fleet handle is NULL");
    fl_clear_error(); /* no earlier error: the plain message */
    CHECK_FAILS(fl_opt_minimize(NULL, NULL), FL_EINVAL, "minimize: optimizer is NULL or invalid");
    CHECK(!strstr(fl_last_error(), "earlier"));
    CHECK_FAILS(fl_exe_run(NULL, NULL, NULL, 0, NULL, 0, NULL), FL_EINVAL, "(an earlier call failed: minimize:");
    fl_opt_free(o);
}

TEST_MAIN(T(null_handle_keeps_the_earlier_error), T(dense_sgd), T(sgd_without_l2_keeps_infinite_parameters),
          T(dense_momentum), T(dense_momentum_nesterov), T(dense_adagrad), T(dense_adam), T(l2_lr_scale_sgd),
          T(l2_lr_scale_momentum), T(l2_lr_scale_nesterov), T(l2_lr_scale_adagrad), T(l2_lr_scale_adam),
          T(exp_decay_continuous_sgd), T(exp_decay_staircase_sgd), T(exp_decay_staircase_adam_l2),
          T(setters_reject_bad_arguments), T(update_ops_reject_bad_hyperparameters), T(sparse_lazy_sgd),
          T(sparse_lazy_momentum), T(sparse_lazy_nesterov), T(sparse_lazy_adagrad), T(sparse_lazy_adam),
          T(sparse_l2_lr_scale_sgd), T(sparse_l2_lr_scale_momentum), T(sparse_l2_lr_scale_adagrad),
          T(sparse_l2_lr_scale_adam), T(sparse_adam_pow_once_per_step), T(sparse_empty_gradient_kernel),
          T(sparse_bad_height_is_an_error), T(sparse_row_out_of_range_kernel), T(embedding_sparse_sgd),
          T(embedding_sparse_momentum), T(embedding_sparse_nesterov), T(embedding_sparse_adagrad), T(embedding_sparse_adam),
          T(embedding_sparse_l2_lr_scale_momentum), T(embedding_sparse_l2_lr_scale_adam),
          T(embedding_sparse_equals_dense_sgd), T(embedding_sparse_vs_dense_sgd_l2), T(separate_outputs_sgd_sparse),
          T(separate_outputs_momentum_dense), T(separate_outputs_momentum_sparse), T(separate_outputs_adagrad_sparse),
          T(separate_outputs_adam_dense), T(separate_outputs_adam_sparse), T(dead_unit_state_momentum),
          T(dead_unit_state_nesterov), T(dead_unit_state_adam), T(dead_unit_state_adagrad),
          T(server_rule_matches_local_sgd), T(server_rule_matches_local_momentum), T(server_rule_matches_local_nesterov),
          T(server_rule_matches_local_adagrad), T(server_rule_matches_local_adam))
