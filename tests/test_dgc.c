/*
 * test_dgc.c - strategy.dgc (Deep Gradient Compression): the dgc op's numerics against a
 * hand computation, the sparsity schedule over rampup, dgc_momentum's switch from momentum
 * to SGD, two ranks forked on 127.0.0.1 training with DGC against plain momentum allreduce
 * (loss, bytes per step), and the refusals (another optimizer, the PS runtime, bad configs).
 */
#include "testhelp.h"
#include "fleet/fleet.h"

#include "graph/graph_internal.h"

/* ---- the ops alone, on a program whose every variable is persistable ------------------------ */

typedef struct {
    fl_prog *p;
    fl_exe *e;
} oprog;

static fl_var *pvar(fl_prog *p, const char *name, fl_dtype dt, int64_t n)
{
    fl_var *v = fl__var_create(p, name, dt, 1, &n);
    CHECK(v);
    v->persistable = 1;
    return v;
}

static fl_tensor *tv(oprog *o, const char *name) { return fl_scope_var(fl_exe_scope(o->e), name); }

static void set_f32(oprog *o, const char *name, const float *x, int64_t n)
{
    fl_tensor *t = tv(o, name);
    CHECK_OK(fl__tensor_reshape_raw(t, FL_FLOAT32, 1, &n));
    memcpy(t->data, x, (size_t)n * sizeof(float));
}

static void set_step(oprog *o, int64_t s)
{
    int64_t one = 1;
    fl_tensor *t = tv(o, "step");
    CHECK_OK(fl__tensor_reshape_raw(t, FL_INT64, 1, &one));
    ((int64_t *)t->data)[0] = s;
}

/* dgc on n elements with momentum m, sparsity list sp[ns] over rampup steps from begin. */
static oprog dgc_prog(int64_t n, float m, const float *sp, int ns, int64_t begin, int64_t rampup, float l2)
{
    oprog o;
    o.p = fl_prog_create();
    fl_prog *p = o.p;
    fl_var *u = pvar(p, "u", FL_FLOAT32, n), *v = pvar(p, "v", FL_FLOAT32, n), *g = pvar(p, "g", FL_FLOAT32, n);
    fl_var *w = pvar(p, "w", FL_FLOAT32, n), *st = pvar(p, "step", FL_INT64, 1);
    fl_var *idx = pvar(p, "idx", FL_INT32, -1), *val = pvar(p, "val", FL_FLOAT32, -1), *k = pvar(p, "k", FL_INT64, 1);
    fl_io in[5] = {FL_IO1("U", u), FL_IO1("V", v), FL_IO1("Grad", g), FL_IO1("Param", w), FL_IO1("current_step", st)};
    fl_io out[6] = {FL_IO1("U_out", u),       FL_IO1("V_out", v),    FL_IO1("EncodeIdx", idx),
                    FL_IO1("EncodeVal", val), FL_IO1("Grad_out", g), FL_IO1("k", k)};
    fl_op *op = fl__op_new(p, "dgc", in, 5, out, 6);
    CHECK(op);
    CHECK_OK(fl__attr_set_f(op, "m", m));
    CHECK_OK(fl__attr_set_floats(op, "sparsity", sp, ns));
    CHECK_OK(fl__attr_set_i(op, "rampup_begin_step", begin));
    CHECK_OK(fl__attr_set_i(op, "rampup_step", rampup));
    CHECK_OK(fl__attr_set_f(op, "regular_coeff", l2));
    CHECK_OK(fl__op_finish(op));
    o.e = fl_exe_create(NULL);
    float *zero = calloc((size_t)n, sizeof(float));
    set_f32(&o, "u", zero, n);
    set_f32(&o, "v", zero, n);
    set_f32(&o, "w", zero, n);
    set_f32(&o, "g", zero, n);
    free(zero);
    return o;
}

static void oprog_free(oprog *o)
{
    fl_exe_free(o->e);
    fl_prog_free(o->p);
}

static void expect_f32(oprog *o, const char *name, const float *want, int64_t n)
{
    fl_tensor *t = tv(o, name);
    CHECK_EQ_INT(fl_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++)
        if (!(fabsf(((float *)t->data)[i] - want[i]) <= 1e-6f))
            TFAIL("%s[%lld] = %.8g, by hand %.8g", name, (long long)i, ((float *)t->data)[i], want[i]);
}

static void expect_idx(oprog *o, const int32_t *want, int64_t k)
{
    CHECK_EQ_INT(((int64_t *)tv(o, "k")->data)[0], k);
    fl_tensor *t = tv(o, "idx");
    CHECK_EQ_INT(fl_tensor_numel(t), k);
    for (int64_t i = 0; i < k; i++) CHECK_EQ_INT(((int32_t *)t->data)[i], want[i]);
}

/* Six elements, m = 0.5, L2 0.1 on w = 1 (g' = g + 0.1), sparsity [0.5, 0.8] over 2 steps
 * from step 1.  Worked by hand:
 *   step 0 (before rampup): Grad_out = g' = [1, -2, .5, 3, -.5, .2]; u, v untouched; k = 0
 *   step 1: sparsity 0.5, k = 3.  u = g'; v = u; top 3 of |v|: indices 0, 1, 3 (values 1,
 *           -2, 3); u = v = [0, 0, .5, 0, -.5, .2]; Grad_out = 0
 *   step 2: sparsity 0.8, k = (int)(6 * 0.2) = 1.  u = .5 u + g' = [1, -2, .75, 3, -.75, .3];
 *           v += u = [1, -2, 1.25, 3, -1.25, .5]; top 1: index 3 (3); zeroed there. */
TEST(dgc_op_by_hand)
{
    const float sp[2] = {0.5f, 0.8f}, ones[6] = {1, 1, 1, 1, 1, 1};
    const float g[6] = {0.9f, -2.1f, 0.4f, 2.9f, -0.6f, 0.1f}, gp[6] = {1, -2, .5f, 3, -.5f, .2f};
    const float zero[6] = {0};
    oprog o = dgc_prog(6, 0.5f, sp, 2, 1, 2, 0.1f);
    set_f32(&o, "w", ones, 6);

    set_step(&o, 0);
    set_f32(&o, "g", g, 6);
    CHECK_OK(fl_exe_run(o.e, o.p, NULL, 0, NULL, 0, NULL));
    expect_f32(&o, "g", gp, 6);
    expect_f32(&o, "u", zero, 6);
    expect_f32(&o, "v", zero, 6);
    expect_idx(&o, NULL, 0);

    set_step(&o, 1);
    set_f32(&o, "g", g, 6);
    CHECK_OK(fl_exe_run(o.e, o.p, NULL, 0, NULL, 0, NULL));
    expect_idx(&o, (const int32_t[]){0, 1, 3}, 3);
    expect_f32(&o, "val", (const float[]){1, -2, 3}, 3);
    expect_f32(&o, "u", (const float[]){0, 0, .5f, 0, -.5f, .2f}, 6);
    expect_f32(&o, "v", (const float[]){0, 0, .5f, 0, -.5f, .2f}, 6);
    expect_f32(&o, "g", zero, 6);

    set_step(&o, 2);
    set_f32(&o, "g", g, 6);
    CHECK_OK(fl_exe_run(o.e, o.p, NULL, 0, NULL, 0, NULL));
    expect_idx(&o, (const int32_t[]){3}, 1);
    expect_f32(&o, "val", (const float[]){3}, 1);
    expect_f32(&o, "u", (const float[]){1, -2, .75f, 0, -.75f, .3f}, 6);
    expect_f32(&o, "v", (const float[]){1, -2, 1.25f, 0, -1.25f, .5f}, 6);
    expect_f32(&o, "g", zero, 6);
    oprog_free(&o);
}

/* Many equal magnitudes (zeros of dead units, ties): exactly k selected, lowest indices first
 * among the ties, and the selection is the k largest. */
TEST(dgc_op_ties_and_zeros)
{
    enum { N = 20000 };
    const float sp[1] = {0.99f};
    oprog o = dgc_prog(N, 0.0f, sp, 1, 0, 1, 0.0f);
    float *g = calloc(N, sizeof(float));
    for (int i = 0; i < N; i += 97) g[i] = (i % 3) ? 1.0f : -1.0f; /* 207 entries of |g| = 1 */
    g[500] = 5.0f;
    set_step(&o, 0);
    set_f32(&o, "g", g, N);
    CHECK_OK(fl_exe_run(o.e, o.p, NULL, 0, NULL, 0, NULL));
    int64_t k = (int64_t)((double)N * (1.0 - (double)0.99f));
    CHECK_EQ_INT(((int64_t *)tv(&o, "k")->data)[0], k); /* 199 */
    const int32_t *idx = tv(&o, "idx")->data;
    int saw500 = 0, last = -1;
    for (int64_t j = 0; j < k; j++) {
        CHECK(idx[j] > last);
        last = idx[j];
        saw500 |= idx[j] == 500;
        CHECK(g[idx[j]] != 0.0f);
    }
    CHECK(saw500);
    /* ties broken toward low indices: the 198 entries of magnitude 1 are the first 198 */
    CHECK_EQ_INT(idx[0], 0);
    CHECK(last < 97 * 199);
    free(g);
    oprog_free(&o);
}

/* k over the rampup: Paddle's default schedule over 10 steps from step 3, 1000 elements. */
TEST(sparsity_schedule)
{
    const float sp[5] = {0.75f, 0.9375f, 0.984375f, 0.996f, 0.999f};
    oprog o = dgc_prog(1000, 0.9f, sp, 5, 3, 10, 0.0f);
    /* step: 0-2 before rampup; since rampup s = step - 3, entry s * 5 / 10, the last after */
    const int64_t want[16] = {0, 0, 0, 250, 250, 62, 62, 15, 15, 4, 4, 1, 1, 1, 1, 1};
    for (int s = 0; s < 16; s++) {
        set_step(&o, s);
        CHECK_OK(fl_exe_run(o.e, o.p, NULL, 0, NULL, 0, NULL));
        int64_t k = ((int64_t *)tv(&o, "k")->data)[0];
        if (k != want[s]) TFAIL("step %d: k = %lld, expected %lld", s, (long long)k, (long long)want[s]);
        CHECK_EQ_INT(fl_tensor_numel(tv(&o, "idx")), k);
    }
    oprog_free(&o);
}

/* dgc_momentum: momentum before rampup_begin_step, SGD from it on. */
TEST(dgc_momentum_switches_to_sgd)
{
    fl_prog *p = fl_prog_create();
    fl_var *w = pvar(p, "w", FL_FLOAT32, 2), *g = pvar(p, "g", FL_FLOAT32, 2), *lr = pvar(p, "lr", FL_FLOAT32, 1);
    fl_var *vel = pvar(p, "vel", FL_FLOAT32, 2), *st = pvar(p, "step", FL_INT64, 1);
    fl_io in[5] = {FL_IO1("Param", w), FL_IO1("Grad", g), FL_IO1("LearningRate", lr), FL_IO1("Velocity", vel),
                   FL_IO1("current_step", st)};
    fl_io out[2] = {FL_IO1("ParamOut", w), FL_IO1("VelocityOut", vel)};
    fl_op *op = fl__op_new(p, "dgc_momentum", in, 5, out, 2);
    CHECK(op);
    CHECK_OK(fl__attr_set_f(op, "mu", 0.5));
    CHECK_OK(fl__attr_set_i(op, "rampup_begin_step", 2));
    CHECK_OK(fl__op_finish(op));
    oprog o = {p, fl_exe_create(NULL)};
    set_f32(&o, "w", (const float[]){1, 2}, 2);
    set_f32(&o, "vel", (const float[]){0, 0}, 2);
    set_f32(&o, "lr", (const float[]){0.1f}, 1);
    /* steps 0, 1: momentum (vel = .5 vel + g; w -= .1 vel); 2, 3: sgd (w -= .1 g), vel kept */
    float wv[2] = {1, 2}, vv[2] = {0, 0};
    for (int s = 0; s < 4; s++) {
        const float gr[2] = {1.0f + (float)s, -2.0f};
        set_f32(&o, "g", gr, 2);
        set_step(&o, s);
        CHECK_OK(fl_exe_run(o.e, o.p, NULL, 0, NULL, 0, NULL));
        for (int i = 0; i < 2; i++) {
            if (s < 2) {
                vv[i] = 0.5f * vv[i] + gr[i];
                wv[i] -= 0.1f * vv[i];
            } else {
                wv[i] -= 0.1f * gr[i];
            }
        }
        expect_f32(&o, "w", wv, 2);
        expect_f32(&o, "vel", vv, 2);
    }
    oprog_free(&o);
}

/* ---- two ranks ------------------------------------------------------------------------------- */

#define IN 128
#define HID 256 /* fc_0.w_0: 32768 elements, compressed; the rest is below 16384 */
#define NCLS 4
#define B 16 /* per rank */
#define STEPS 60
#define DENSE_STEPS 5

typedef struct {
    float loss[STEPS];
    fleet_dgc_stats st;
} result;

/* A planted linear teacher: class = argmax(T x), deterministic in the global sample index. */
static void sample(int64_t i, float *x, int64_t *y)
{
    float best = -1e30f;
    for (int j = 0; j < IN; j++) x[j] = (float)sin(0.731 * (double)(i * IN + j) + 0.3 * (double)j);
    for (int c = 0; c < NCLS; c++) {
        float z = 0;
        for (int j = 0; j < IN; j++) z += (float)cos(1.3 * (double)(c * IN + j)) * x[j];
        if (z > best) best = z, *y = c;
    }
}

/* dgc: 0 plain momentum; else strategy.dgc with rampup_begin_step = dgc == 1 ? DENSE_STEPS
 * : past the last step (every step dense). */
static void run_rank(int dgc, int rank, const char *eps, int fd)
{
    th_trainer_env(rank, eps, 20000);
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(IN), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = fl_layer_fc(FL_VARS(x), HID, "relu");
    fl_var *pr = fl_layer_fc(FL_VARS(h), NCLS, "softmax");
    fl_var *cost = fl_layer_mean(fl_layer_cross_entropy(pr, y));
    fleet_strategy s = fleet_strategy_default();
    if (dgc) {
        CHECK_OK(fleet_strategy_parse(&s, "{\"dgc\": true, \"dgc_configs\": {\"rampup_begin_step\": 5, "
                                          "\"rampup_step\": 1, \"sparsity\": [0.99]}}"));
        CHECK_EQ_INT(s.dgc_configs.rampup_begin_step, DENSE_STEPS);
        if (dgc == 2) s.dgc_configs.rampup_begin_step = STEPS;
    }
    fleet_t *f = fleet_init_collective(NULL, &s);
    CHECK(f);
    fl_opt *o = fleet_distributed_optimizer(f, fl_opt_momentum(0.05f, 0.9f, 0), NULL);
    CHECK(o);
    CHECK_OK(fl_opt_minimize(o, cost));
    if (dgc) { /* the rewrite is visible in the program text, round-trips, and clones for test */
        char *text = NULL;
        size_t len = 0;
        CHECK_OK(fl_prog_to_text(p, &text, &len));
        CHECK_EQ_INT(th_count(text, "dgc_momentum"), 1);
        CHECK_EQ_INT(th_count(text, "c_dgc_allreduce"), 1);
        fl_prog *back = NULL;
        CHECK_OK(fl_prog_from_text(text, len, &back));
        fl_prog_free(back);
        free(text);
        fl_prog *test = fl_prog_clone(p, 1);
        CHECK(test);
        fl_prog_free(test);
    }
    fl_exe *e = fl_exe_create(NULL);
    fl_prog_set_seed(p, 7);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    CHECK_OK(fleet_init_worker(f));
    result r;
    memset(&r, 0, sizeof r);
    float xs[B * IN];
    int64_t ys[B];
    for (int st = 0; st < STEPS; st++) {
        for (int i = 0; i < B; i++) sample((int64_t)(st % 20) * B * 2 + rank * B + i, xs + i * IN, ys + i);
        fl_tensor *xt = th_f32(2, (const int64_t[]){B, IN}, xs), *yt = th_i64(2, (const int64_t[]){B, 1}, ys);
        fl_feed feed[2] = {{"x", xt}, {"y", yt}};
        const char *fe[1] = {fl_var_name(cost)};
        fl_tensor *out = NULL;
        CHECK_OK(fl_exe_run(e, p, feed, 2, fe, 1, &out));
        r.loss[st] = fl_tensor_f32(out)[0];
        fl_tensor_free(xt);
        fl_tensor_free(yt);
    }
    CHECK_OK(fleet_dgc_stats_get(f, &r.st));
    CHECK_OK(fleet_stop_worker(f));
    if (rank == 0) CHECK(write(fd, &r, sizeof r) == (ssize_t)sizeof r);
    fl_exe_free(e);
    fl_opt_free(o);
    fleet_free(f);
    fl_prog_free(p);
}

static result run_job(int dgc)
{
    char eps[128];
    th_free_endpoints(eps, sizeof eps, 2);
    int pd[2];
    CHECK(pipe(pd) == 0);
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            alarm(100);
            run_rank(dgc, r, eps, pd[1]);
            _exit(0);
        }
    }
    close(pd[1]);
    result res;
    CHECK(read(pd[0], &res, sizeof res) == (ssize_t)sizeof res);
    close(pd[0]);
    for (int r = 0; r < 2; r++) {
        int ws;
        CHECK(waitpid(pids[r], &ws, 0) == pids[r]);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws)) TFAIL("%s rank %d failed (status %d)", dgc ? "DGC" : "momentum", r, ws);
    }
    return res;
}

static double mean(const float *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    return s / n;
}

/* Two ranks with DGC (5 dense steps, then sparsity 0.99) against plain momentum allreduce on
 * the same data.  Losses fall with both; DGC's mean loss over the last 10 steps is within
 * 0.1 (absolute) of momentum's (0.65 over the first 5 steps here); bytes per sparse step for the
 * compressed parameter are under 4 x (1 - 0.99) x those of its dense steps (an allgather of
 * 8-byte pairs costs 2 x (1 - sparsity) x a ring allreduce's 4-byte elements at two ranks). */
TEST(two_ranks_dgc_vs_momentum)
{
    result m = run_job(0), d = run_job(1);
    double m0 = mean(m.loss, 5), m1 = mean(m.loss + STEPS - 10, 10);
    double d0 = mean(d.loss, 5), d1 = mean(d.loss + STEPS - 10, 10);
    printf("  loss first 5 / last 10 steps: momentum %.4f -> %.4f, DGC %.4f -> %.4f\n", m0, m1, d0, d1);
    CHECK(m1 < 0.8 * m0);
    CHECK(d1 < 0.8 * d0);
    if (!(fabs(d1 - m1) <= 0.1)) TFAIL("DGC final loss %.4f vs momentum %.4f: more than 0.1 apart", d1, m1);
    CHECK_EQ_INT(m.st.params, 0);
    CHECK_EQ_INT(d.st.params, 1);
    CHECK_EQ_INT(d.st.dense_steps, DENSE_STEPS);
    CHECK_EQ_INT(d.st.sparse_steps, STEPS - DENSE_STEPS);
    double dense = (double)d.st.dense_bytes / (double)d.st.dense_steps;
    double sparse = (double)d.st.sparse_bytes / (double)d.st.sparse_steps;
    printf("  fc_0.w_0 (%d floats): %.0f bytes per dense step, %.0f per sparse step (%.4f)\n", IN * HID, dense, sparse,
           sparse / dense);
    CHECK(dense >= IN * HID * 4.0 * 0.9);
    if (!(sparse < 4.0 * (1.0 - 0.99) * dense))
        TFAIL("%.0f bytes per sparse step, not under 4 x 0.01 x %.0f", sparse, dense);
}

/* Before rampup_begin_step DGC is the ordinary allreduce with momentum: with the rampup
 * never reached, every step's loss equals the momentum run's (1e-5: sums in another order). */
TEST(two_ranks_before_rampup_is_momentum)
{
    result m = run_job(0), d = run_job(2);
    for (int i = 0; i < STEPS; i++)
        if (!(fabs(m.loss[i] - d.loss[i]) <= 1e-5 * (1 + fabs(m.loss[i]))))
            TFAIL("step %d: loss %.8g with DGC before rampup, %.8g with momentum", i, d.loss[i], m.loss[i]);
    CHECK_EQ_INT(d.st.params, 1);
    CHECK_EQ_INT(d.st.dense_steps, STEPS);
    CHECK_EQ_INT(d.st.sparse_steps, 0);
}

/* ---- refusals and configuration ------------------------------------------------------------- */

TEST(refuses_non_momentum_and_ps)
{
    unsetenv("PADDLE_TRAINER_ENDPOINTS");
    fleet_strategy s = fleet_strategy_default();
    s.dgc = 1;
    fleet_t *f = fleet_init_collective(NULL, &s);
    CHECK(f);
    fl_opt *o = fl_opt_adam(0.01f, 0.9f, 0.999f, 1e-8f);
    CHECK(fleet_distributed_optimizer(f, o, NULL) == NULL);
    CHECK_STR_HAS(fl_last_error(), "strategy.dgc works with the Momentum optimizer only");
    CHECK_STR_HAS(fl_last_error(), "adam");
    fl_opt_free(o);
    fleet_free(f);

    const char *servers[] = {"127.0.0.1:6001"};
    fleet_user_role u = {0, 0, FLEET_ROLE_WORKER, 1, NULL, 0, servers, 1};
    fleet_role *r;
    CHECK_OK(fleet_role_user_defined(&u, &r));
    f = fleet_init(r, &s);
    CHECK(f);
    o = fl_opt_momentum(0.1f, 0.9f, 0);
    CHECK(fleet_distributed_optimizer(f, o, NULL) == NULL);
    CHECK_STR_HAS(fl_last_error(), "strategy.dgc works with collective training");
    fl_opt_free(o);
    fleet_free(f);
}

TEST(strategy_fields)
{
    fleet_strategy s = fleet_strategy_default();
    CHECK(!strcmp(s.dgc_configs.sparsity, "0.999"));
    CHECK_OK(fleet_strategy_parse(&s, "dgc=true\ndgc_configs.rampup_begin_step=100\ndgc_configs.rampup_step=50\n"
                                      "dgc_configs.sparsity=0.75,0.9375,0.999\n"));
    CHECK_OK(fleet_strategy_check(&s));
    CHECK(s.dgc && s.dgc_configs.rampup_begin_step == 100 && s.dgc_configs.rampup_step == 50);
    char *text = fleet_strategy_to_text(&s);
    CHECK_STR_HAS(text, "dgc_configs.sparsity=0.75,0.9375,0.999\n");
    free(text);
    s = fleet_strategy_default();
    CHECK_OK(fleet_strategy_parse(&s, "{\"dgc\": true, \"dgc_configs\": {\"sparsity\": [0.9, 0.99]}}"));
    CHECK(!strcmp(s.dgc_configs.sparsity, "0.9,0.99"));
    CHECK_OK(fleet_strategy_check(&s));
    CHECK_OK(fleet_strategy_set(&s, "dgc_configs.sparsity", "0.9,1.5"));
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "entry 2 is not a number in [0, 1)");
    CHECK_OK(fleet_strategy_set(&s, "dgc_configs.sparsity", "0.9,0.99,"));
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "a number is missing after the last comma");
    CHECK_OK(fleet_strategy_set(&s, "dgc_configs.sparsity", ""));
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "is empty");
    CHECK_FAILS(fleet_strategy_set(&s, "dgc_configs.rampup_step", "0"), FL_EINVAL, "out of range");
    s = fleet_strategy_default();
    s.dgc = s.gradient_merge = 1;
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "dgc cannot be combined with gradient_merge");
}

TEST_MAIN(T(dgc_op_by_hand), T(dgc_op_ties_and_zeros), T(sparsity_schedule), T(dgc_momentum_switches_to_sgd),
          T(two_ranks_dgc_vs_momentum), T(two_ranks_before_rampup_is_momentum), T(refuses_non_momentum_and_ps),
          T(strategy_fields))
