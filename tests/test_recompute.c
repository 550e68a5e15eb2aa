/* test_recompute.c - recompute (src/graph/recompute.c, strategy.recompute) and the
 * executor's eager deletion: the same parameters with and without recompute, lower peak
 * activation bytes with it, the recomputed ops in the program text, and the errors. */
#include "testhelp.h"
#include "tensor/tensor_internal.h"

/* activations (BATCH x HID) larger than the weights (HID x HID), as in the models recompute
 * is for */
enum { BATCH = 512, DIM = 64, HID = 128, NLAYER = 4, CLASSES = 10, STEPS = 5 };

typedef struct {
    int recompute;  /* 1: checkpoints after hidden layers 2 and 4 */
    int dropout;    /* dropout (upscale_in_train, 0.3) after every hidden layer */
    int via_fleet;  /* 1: strategy.recompute through fleet_distributed_optimizer */
    const char *cp; /* NULL: the default checkpoints */
} cfg;

typedef struct {
    float w[NLAYER + 1][HID * HID]; /* fc_k.w_0 (the first rows used when smaller) */
    float loss;
    int64_t peak;
    char *text;
} result;

/* x[DIM] -> NLAYER x (fc HID relu [dropout]) -> fc CLASSES -> softmax cross entropy. */
static fl_var *build(fl_prog *p, const cfg *c, char *cps, size_t cap)
{
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(DIM), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = x;
    cps[0] = 0;
    for (int k = 0; k < NLAYER; k++) {
        h = fl_layer_fc(&h, 1, HID, "relu");
        if (c->dropout) h = fl_layer_dropout(h, 0.3f, "upscale_in_train");
        if (k == 1 || k == 3) {
            size_t n = strlen(cps);
            snprintf(cps + n, cap - n, "%s%s", n ? "," : "", fl_var_name(h));
        }
    }
    fl_var *logits = fl_layer_fc(&h, 1, CLASSES, NULL);
    return fl_layer_mean(fl_layer_softmax_with_cross_entropy(logits, y));
}

static void train(const cfg *c, result *r)
{
    unsetenv("PADDLE_TRAINER_ENDPOINTS");
    fl_prog *p = fl_prog_create();
    char cps[256];
    fl_var *loss = build(p, c, cps, sizeof cps);
    CHECK(loss);
    const char *use = c->cp ? c->cp : cps;
    fl_opt *o = fl_opt_momentum(0.05f, 0.9f, 0);
    fleet_t *f = NULL;
    if (c->via_fleet) {
        fleet_strategy s = fleet_strategy_default();
        if (c->recompute) {
            CHECK_OK(fleet_strategy_set(&s, "recompute", "true"));
            CHECK_OK(fleet_strategy_set(&s, "recompute_configs.checkpoints", use));
        }
        f = fleet_init_collective(NULL, &s);
        CHECK(f);
        CHECK(fleet_distributed_optimizer(f, o, NULL) == o);
    } else if (c->recompute) {
        CHECK_OK(fl_opt_set_recompute(o, use));
    }
    CHECK_OK(fl_opt_minimize(o, loss));
    fl_opt_free(o);
    size_t len = 0;
    CHECK_OK(fl_prog_to_text(p, &r->text, &len));
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    static float xs[BATCH * DIM];
    int64_t ys[BATCH];
    fl_rng rng = {5};
    const char *fetch[] = {fl_var_name(loss)};
    fl_tensor *out[1];
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < BATCH; i++) {
            for (int j = 0; j < DIM; j++) xs[i * DIM + j] = 2 * fl__rng_uniform(&rng) - 1;
            ys[i] = (int64_t)(fl__rng_uniform(&rng) * CLASSES) % CLASSES;
        }
        fl_tensor *xt = th_f32(2, (const int64_t[]){BATCH, DIM}, xs), *yt = th_i64(2, (const int64_t[]){BATCH, 1}, ys);
        fl_feed feed[] = {{"x", xt}, {"y", yt}};
        CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 1, out));
        r->loss = fl_tensor_f32(out[0])[0];
        fl_tensor_free(xt);
        fl_tensor_free(yt);
    }
    r->peak = fl_exe_peak_activation_bytes(e);
    for (int k = 0; k <= NLAYER; k++) {
        char name[32];
        snprintf(name, sizeof name, "fc_%d.w_0", k);
        fl_tensor *w = fl_scope_find(fl_exe_scope(e), name);
        CHECK(w && fl_tensor_numel(w) <= HID * HID);
        memset(r->w[k], 0, sizeof r->w[k]);
        memcpy(r->w[k], fl_tensor_data(w), (size_t)fl_tensor_numel(w) * sizeof(float));
    }
    fl_exe_free(e);
    if (f) fleet_free(f);
    fl_prog_free(p);
}

static void same_params(const result *a, const result *b)
{
    double worst = 0;
    for (int k = 0; k <= NLAYER; k++)
        for (int i = 0; i < HID * HID; i++) worst = fmax(worst, fabs((double)a->w[k][i] - b->w[k][i]));
    printf("  largest parameter difference %.3g, loss %.6f vs %.6f\n", worst, a->loss, b->loss);
    CHECK(worst <= 1e-6);
}

static void compare(int dropout, int via_fleet)
{
    static result plain, rc;
    cfg c0 = {0, dropout, via_fleet, NULL}, c1 = {1, dropout, via_fleet, NULL};
    train(&c0, &plain);
    train(&c1, &rc);
    same_params(&plain, &rc);
    printf("  peak activation bytes: %lld without recompute, %lld with (%.2fx)\n", (long long)plain.peak,
           (long long)rc.peak, (double)rc.peak / (double)plain.peak);
    CHECK(plain.peak > 0);
    CHECK(rc.peak < plain.peak);
    /* the recomputed ops: fc_0 and fc_2 (before each checkpoint) again, writing copies */
    CHECK(!strstr(plain.text, "@RECOMPUTE"));
    CHECK_STR_HAS(rc.text, "out Out=fc_0.tmp_0@RECOMPUTE");
    CHECK_STR_HAS(rc.text, "out Out=fc_2.tmp_0@RECOMPUTE");
    if (!dropout) CHECK(!strstr(rc.text, "fc_3.tmp_0@RECOMPUTE")); /* a checkpoint is not recomputed */
    if (dropout) CHECK_STR_HAS(rc.text, "rng_name");
    free(plain.text);
    free(rc.text);
}

TEST(recompute_same_params_lower_peak) { compare(0, 0); }
TEST(recompute_dropout_same_mask) { compare(1, 0); }
TEST(recompute_through_fleet_strategy) { compare(0, 1); }

TEST(recompute_bad_checkpoint)
{
    fl_prog *p = fl_prog_create();
    char cps[256];
    cfg c = {1, 0, 0, NULL};
    fl_var *loss = build(p, &c, cps, sizeof cps);
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK_OK(fl_opt_set_recompute(o, "fc_0.tmp_0, no_such_var"));
    CHECK_FAILS(fl_opt_minimize(o, loss), FL_EINVAL, "checkpoint 'no_such_var' is not a variable of the program");
    fl_opt_free(o);
    fl_prog_free(p);
    CHECK_FAILS(fl_append_backward_recompute(NULL, NULL, 0, NULL, 1, NULL, NULL), FL_EINVAL, "checkpoint list is NULL");
    /* the strategy: recompute without checkpoints is refused; JSON lists are accepted */
    fleet_strategy s = fleet_strategy_default();
    CHECK_OK(fleet_strategy_set(&s, "recompute", "true"));
    CHECK_FAILS(fleet_strategy_check(&s), FL_EINVAL, "recompute_configs.checkpoints is empty");
    CHECK_OK(fleet_strategy_parse(&s, "{\"recompute\": true, \"recompute_configs\": {\"checkpoints\": [\"a\", \"b\"]}}"));
    CHECK_EQ_INT(strcmp(s.recompute_configs.checkpoints, "a,b"), 0);
    CHECK_OK(fleet_strategy_check(&s));
}

/* Eager deletion alone: same results, lower peak, and fetched variables survive the run. */
TEST(eager_deletion_keeps_fetched)
{
    fl_prog *p = fl_prog_create();
    char cps[256];
    cfg c = {0, 0, 0, NULL};
    fl_var *loss = build(p, &c, cps, sizeof cps);
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK_OK(fl_opt_minimize(o, loss));
    fl_opt_free(o);
    int64_t peak[2];
    float l[2];
    for (int keep = 0; keep < 2; keep++) {
        fl_exe *e = fl_exe_create(NULL);
        CHECK_OK(fl_exe_set_eager_deletion(e, !keep));
        CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
        static float xs[BATCH * DIM];
        int64_t ys[BATCH];
        th_fill_uniform(xs, BATCH * DIM, -1, 1, 3u);
        for (int i = 0; i < BATCH; i++) ys[i] = i % CLASSES;
        fl_tensor *xt = th_f32(2, (const int64_t[]){BATCH, DIM}, xs), *yt = th_i64(2, (const int64_t[]){BATCH, 1}, ys);
        fl_feed feed[] = {{"x", xt}, {"y", yt}};
        const char *fetch[] = {fl_var_name(loss), "fc_1.tmp_0"};
        fl_tensor *out[2];
        for (int step = 0; step < 3; step++) CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 2, out));
        l[keep] = fl_tensor_f32(out[0])[0];
        CHECK_EQ_INT(fl_tensor_numel(out[1]), BATCH * HID);
        /* not fetched: freed after its last use unless eager deletion is off */
        CHECK_EQ_INT(fl_tensor_numel(fl_scope_find(fl_exe_scope(e), "fc_2.tmp_0")), keep ? BATCH * HID : 0);
        peak[keep] = fl_exe_peak_activation_bytes(e);
        fl_tensor_free(xt);
        fl_tensor_free(yt);
        fl_exe_free(e);
    }
    printf("  peak activation bytes: %lld with eager deletion, %lld without\n", (long long)peak[0], (long long)peak[1]);
    CHECK(l[0] == l[1]);
    CHECK(peak[0] < peak[1]);
    CHECK_FAILS(fl_exe_set_eager_deletion(NULL, 1), FL_EINVAL, "executor is NULL");
    CHECK(fl_exe_peak_activation_bytes(NULL) < 0);
    fl_prog_free(p);
}

TEST_MAIN(T(recompute_same_params_lower_peak), T(recompute_dropout_same_mask), T(recompute_through_fleet_strategy),
          T(recompute_bad_checkpoint), T(eager_deletion_keeps_fetched))
