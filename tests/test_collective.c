/*
 * test_collective.c - collective (data-parallel) training: N ranks forked on 127.0.0.1
 * train the same model; results are compared with one process training on the
 * concatenated batch.  Tolerance: parameters within 1e-5 (absolute + relative) after the
 * steps; float sums in a different order are the only difference.
 */
#include "testhelp.h"

#define STEPS 5
#define B 8 /* per-rank batch */

typedef enum { M_DP, M_LOCALSGD, M_GM } mode_t_;

typedef struct {
    int sparse; /* add an embedding with a sparse gradient */
    mode_t_ mode;
    int k;                /* localsgd / gradient merge k_steps */
    const char *opt;      /* "sgd", "momentum", "adam" */
    int amp;              /* strategy.amp: 1 bf16 (the local side calls fl_amp_decorate), 2 fp16 with the
                             default loss scaling, 3 the same with a NaN in one sample of rank 1 at
                             step 1 (every rank must skip that step); the local side of 2 and 3 calls
                             fl_amp_decorate_optimizer */
    int meta;             /* 1: strategy.lars (opt momentum), 2: strategy.lamb (opt adam); the local side
                        calls fl_opt_lars / fl_opt_lamb with the same settings */
    const char *ar_dtype; /* strategy.allreduce_dtype (NULL: float32); compared with a float32 local run */
} cfg;

/* cfg.amp 3: global sample 3B (step 1, rank 1's first) holds a NaN.  Rank 0 never sees it,
 * so its parameters match the local run's only if it skips step 1 too: the inf/NaN check
 * must run on the reduced gradients. */
static int64_t poison = -1;

/* After training with cfg.amp 3: one step skipped (the scale kept: decr_every_n_nan_or_inf
 * is 2), the 3 steps after it finite. */
static void check_skipped(const cfg *c, fl_exe *e)
{
    if (c->amp != 3) return;
    fl_tensor *t = fl_scope_find(fl_exe_scope(e), "loss_scaling_0");
    CHECK(t && fl_tensor_f32(t)[0] == 32768.0f);
    t = fl_scope_find(fl_exe_scope(e), "num_good_steps_0");
    CHECK(t && ((const int64_t *)fl_tensor_data(t))[0] == STEPS - 2);
}

/* Samples: x[i] and ids[i] for global sample index i (deterministic). */
static void sample(int64_t i, float *x, int64_t *id, int64_t *y)
{
    for (int j = 0; j < 6; j++) x[j] = (float)sin(0.37 * (double)(i * 6 + j));
    if (i == poison) x[0] = NAN;
    *id = (i * 7) % 11;
    *y = (i % 3) == 0;
}

static fl_prog *build(const cfg *c, fl_var **cost)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(6), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = fl_layer_fc(FL_VARS(x), 16, "tanh");
    if (c->sparse) {
        fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 0);
        fl_embedding_attr ea;
        memset(&ea, 0, sizeof ea);
        ea.is_sparse = 1;
        fl_var *e = fl_layer_embedding(ids, 11, 4, &ea);
        h = fl_layer_fc(FL_VARS(h, e), 16, "tanh");
    }
    fl_var *pr = fl_layer_fc(FL_VARS(h), 2, "softmax");
    *cost = fl_layer_mean(fl_layer_cross_entropy(pr, y));
    return p;
}

#define LARS_EXCLUDE "b_0"
#define LAMB_EXCLUDE ".b_0,embedding_0.w_0"

static fl_opt *make_opt(const cfg *c)
{
    if (!strcmp(c->opt, "momentum")) return fl_opt_momentum(0.1f, 0.9f, 0);
    if (!strcmp(c->opt, "adam")) return fl_opt_adam(0.05f, 0.9f, 0.999f, 1e-8f);
    return fl_opt_sgd(0.5f);
}

/* Runs `steps` steps on samples [first, first+n) of each step's global batch of n_total. */
static void train(fl_prog *p, fl_var *cost, fl_exe *e, int sparse, int n_total, int first, int n, int steps)
{
    float *xs = malloc(sizeof(float) * 6 * (size_t)n);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)n), *ys = malloc(sizeof(int64_t) * (size_t)n);
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < n; i++) sample((int64_t)s * n_total + first + i, xs + 6 * i, ids + i, ys + i);
        fl_tensor *xt = th_f32(2, (const int64_t[]){n, 6}, xs), *yt = th_i64(2, (const int64_t[]){n, 1}, ys);
        fl_tensor *it = th_i64(2, (const int64_t[]){n, 1}, ids);
        fl_feed feed[3] = {{"x", xt}, {"y", yt}, {"ids", it}};
        const char *f[1] = {fl_var_name(cost)};
        fl_tensor *out;
        CHECK_OK(fl_exe_run(e, p, feed, sparse ? 3 : 2, f, 1, &out));
        fl_tensor_free(xt);
        fl_tensor_free(yt);
        fl_tensor_free(it);
    }
    free(xs);
    free(ids);
    free(ys);
}

static const char *const PARAMS[] = {"fc_0.w_0", "fc_0.b_0", "fc_1.w_0",        "fc_1.w_1",
                                     "fc_1.b_0", "fc_2.w_0", "embedding_0.w_0", NULL};

/* Writes the parameters of scope to fd as (name-index, numel, floats). */
static void dump(fl_scope *s, int fd)
{
    for (int i = 0; PARAMS[i]; i++) {
        fl_tensor *t = fl_scope_find(s, PARAMS[i]);
        int64_t n = t ? fl_tensor_numel(t) : 0;
        CHECK(write(fd, &n, sizeof n) == sizeof n);
        if (n) CHECK(write(fd, fl_tensor_f32(t), (size_t)n * 4) == (ssize_t)(n * 4));
    }
}

static void run_rank(const cfg *c, int rank, int world, const char *eps, int fd)
{
    th_trainer_env(rank, eps, 10000);
    fl_var *cost;
    fl_prog *p = build(c, &cost);
    fleet_strategy s = fleet_strategy_default();
    if (c->mode == M_LOCALSGD) {
        s.localsgd = 1;
        s.localsgd_configs.k_steps = c->k;
    } else if (c->mode == M_GM) {
        s.gradient_merge = 1;
        s.gradient_merge_configs.k_steps = c->k;
    }
    s.fuse_grad_size_in_MB = 0.0005; /* several buckets even for this small model */
    s.amp = c->amp != 0;
    if (c->amp >= 2) snprintf(s.amp_configs.dtype, FLEET_STRATEGY_STR_MAX, "float16");
    if (c->amp == 3) poison = 3 * B;
    if (c->ar_dtype) snprintf(s.allreduce_dtype, FLEET_STRATEGY_STR_MAX, "%s", c->ar_dtype);
    if (c->meta == 1) {
        s.lars = 1;
        s.lars_configs.lars_coeff = 0.02;
        s.lars_configs.lars_weight_decay = 0.01;
        snprintf(s.lars_configs.exclude_from_weight_decay, FLEET_STRATEGY_STR_MAX, "%s", LARS_EXCLUDE);
    } else if (c->meta == 2) {
        s.lamb = 1;
        s.lamb_configs.lamb_weight_decay = 0.05;
        snprintf(s.lamb_configs.exclude_from_weight_decay, FLEET_STRATEGY_STR_MAX, "%s", LAMB_EXCLUDE);
    }
    fleet_t *f = fleet_init_collective(NULL, &s);
    CHECK(f);
    CHECK_EQ_INT(fleet_worker_num(f), world);
    fl_opt *o = fleet_distributed_optimizer(f, make_opt(c), NULL);
    CHECK(o);
    CHECK_OK(fl_opt_minimize(o, cost));
    fl_exe *e = fl_exe_create(NULL);
    /* different initial values on every rank: the startup broadcast must fix them */
    fl_prog_set_seed(p, 100 + (uint64_t)rank);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    train(p, cost, e, c->sparse, B * world, B * rank, B, STEPS);
    check_skipped(c, e);
    if (rank == 0) dump(fl_exe_scope(e), fd);
    fl_exe_free(e);
    fl_opt_free(o);
    fleet_free(f);
    fl_prog_free(p);
}

/* The single-process reference on the whole batch. */
static void run_local(const cfg *c, int world, int fd)
{
    fl_var *cost;
    fl_prog *p = build(c, &cost);
    fl_opt *o = make_opt(c);
    if (c->meta == 1) {
        fl_opt_free(o);
        o = fl_opt_lars(0.1f, 0.9f, 0.02f, 0.01f, 0.0f);
        CHECK_OK(fl_opt_set_exclude_from_weight_decay(o, LARS_EXCLUDE));
    } else if (c->meta == 2) {
        fl_opt_free(o);
        o = fl_opt_lamb(0.05f, 0.9f, 0.999f, 1e-8f, 0.05f);
        CHECK_OK(fl_opt_set_exclude_from_weight_decay(o, LAMB_EXCLUDE));
    }
    if (c->mode == M_GM) {
        /* gradient merge locally: the same program through a non-distributed fleet */
        fleet_strategy s = fleet_strategy_default();
        s.gradient_merge = 1;
        s.gradient_merge_configs.k_steps = c->k;
        fleet_t *f = fleet_init_collective(NULL, &s);
        CHECK(f && fleet_distributed_optimizer(f, o, NULL));
        CHECK_OK(fl_opt_minimize(o, cost));
        fl_exe *e = fl_exe_create(NULL);
        fl_prog_set_seed(p, 100);
        CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
        /* k local steps of B*world samples each = one merged step over k*B*world */
        train(p, cost, e, c->sparse, B * world, 0, B * world, STEPS);
        dump(fl_exe_scope(e), fd);
        fl_exe_free(e);
        fleet_free(f);
    } else {
        if (c->amp == 1) CHECK(fl_amp_decorate(p, NULL) > 0);
        if (c->amp >= 2) CHECK_OK(fl_amp_decorate_optimizer(o, &(fl_amp_opts){FL_FLOAT16}));
        if (c->amp == 3) poison = 3 * B;
        CHECK_OK(fl_opt_minimize(o, cost));
        fl_exe *e = fl_exe_create(NULL);
        fl_prog_set_seed(p, 100);
        CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
        train(p, cost, e, c->sparse, B * world, 0, B * world, STEPS);
        check_skipped(c, e);
        dump(fl_exe_scope(e), fd);
        fl_exe_free(e);
    }
    fl_opt_free(o);
    fl_prog_free(p);
}

/* Returns the largest difference seen. */
static double compare(int fa, int fb, double tol)
{
    double maxd = 0.0;
    for (int i = 0; PARAMS[i]; i++) {
        int64_t na, nb;
        CHECK(read(fa, &na, sizeof na) == sizeof na && read(fb, &nb, sizeof nb) == sizeof nb);
        CHECK_EQ_INT(na, nb);
        float *a = malloc((size_t)(na ? na : 1) * 4), *b = malloc((size_t)(nb ? nb : 1) * 4);
        if (na) CHECK(read(fa, a, (size_t)na * 4) == (ssize_t)(na * 4) && read(fb, b, (size_t)nb * 4) == (ssize_t)(nb * 4));
        for (int64_t j = 0; j < na; j++) {
            if (fabs(a[j] - b[j]) > maxd) maxd = fabs(a[j] - b[j]);
            if (!(fabs(a[j] - b[j]) <= tol * (1 + fabs(b[j]))))
                TFAIL("%s[%lld]: distributed %.8g vs local %.8g", PARAMS[i], (long long)j, a[j], b[j]);
        }
        free(a);
        free(b);
    }
    return maxd;
}

static void check_equivalence(const cfg *c, int world)
{
    char eps[512] = "";
    for (int r = 0; r < world; r++)
        snprintf(eps + strlen(eps), sizeof eps - strlen(eps), "%s127.0.0.1:%d", r ? "," : "", th_free_port());
    int pd[2], pl[2];
    CHECK(pipe(pd) == 0 && pipe(pl) == 0);
    pid_t pids[8];
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            alarm(60);
            run_rank(c, r, world, eps, pd[1]);
            _exit(0);
        }
    }
    pid_t lp = fork();
    if (lp == 0) {
        unsetenv("PADDLE_TRAINER_ENDPOINTS");
        run_local(c, world, pl[1]);
        _exit(0);
    }
    close(pd[1]);
    close(pl[1]);
    for (int r = 0; r < world; r++) {
        int ws;
        CHECK(waitpid(pids[r], &ws, 0) == pids[r]);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws)) TFAIL("rank %d failed (status %d)", r, ws);
    }
    int ws;
    CHECK(waitpid(lp, &ws, 0) == lp && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    /* AMP: the weights are rounded to bf16 each step, so a last-bit float32 difference (sums
     * in another order) could move a bf16 copy by one bf16 step: 1e-4 allowed, within 1e-5 here */
    /* compressed allreduce: gradients rounded to 16 bits each step; 5 steps of lr 0.05-0.5 */
    double maxd = compare(pd[0], pl[0], c->ar_dtype ? 2e-2 : c->amp ? 1e-4 : 1e-5);
    /* and the gradients did travel rounded: far from float32's last-bit differences */
    if (c->ar_dtype && !(maxd > 1e-5)) TFAIL("allreduce_dtype %s: parameters within %g of float32", c->ar_dtype, maxd);
    close(pd[0]);
    close(pl[0]);
}

TEST(dp_equals_local_sgd_2) { check_equivalence(&(cfg){0, M_DP, 1, "sgd"}, 2); }
TEST(dp_equals_local_adam_3) { check_equivalence(&(cfg){0, M_DP, 1, "adam"}, 3); }
TEST(dp_sparse_embedding_2) { check_equivalence(&(cfg){1, M_DP, 1, "sgd"}, 2); }
TEST(dp_sparse_embedding_momentum_3) { check_equivalence(&(cfg){1, M_DP, 1, "momentum"}, 3); }
TEST(dp_amp_bf16_equals_local_amp_2) { check_equivalence(&(cfg){1, M_DP, 1, "adam", 1}, 2); }
TEST(dp_amp_fp16_equals_local_amp_2) { check_equivalence(&(cfg){1, M_DP, 1, "adam", 2}, 2); }
TEST(dp_amp_fp16_nan_on_one_rank_skips_every_rank_2) { check_equivalence(&(cfg){0, M_DP, 1, "momentum", 3}, 2); }
TEST(dp_lars_equals_local_lars_2) { check_equivalence(&(cfg){0, M_DP, 1, "momentum", 0, 1}, 2); }
TEST(dp_lamb_equals_local_lamb_2) { check_equivalence(&(cfg){0, M_DP, 1, "adam", 0, 2}, 2); }
TEST(dp_bf16_allreduce_near_float32_local_2) { check_equivalence(&(cfg){0, M_DP, 1, "adam", 0, 0, "bfloat16"}, 2); }
TEST(dp_fp16_allreduce_near_float32_local_2) { check_equivalence(&(cfg){0, M_DP, 1, "momentum", 0, 0, "fp16"}, 2); }
TEST(localsgd_k1_equals_dp) { check_equivalence(&(cfg){0, M_LOCALSGD, 1, "sgd"}, 2); }
TEST(gradient_merge_equals_big_batch)
{
    /* GM k=1 with 2 ranks: identical to DP; the local side runs GM k=1 too */
    check_equivalence(&(cfg){0, M_GM, 1, "momentum"}, 2);
}

/* Gradient merge k=2 locally: two half batches merged (avg) equal one full batch. */
TEST(gradient_merge_k2_local)
{
    unsetenv("PADDLE_TRAINER_ENDPOINTS");
    float got[2][96];
    for (int variant = 0; variant < 2; variant++) {
        cfg c = {0, variant ? M_GM : M_DP, 2, "sgd"};
        fl_var *cost;
        fl_prog *p = build(&c, &cost);
        fl_opt *o = make_opt(&c);
        fleet_strategy s = fleet_strategy_default();
        s.gradient_merge = variant;
        s.gradient_merge_configs.k_steps = 2;
        fleet_t *f = fleet_init_collective(NULL, &s);
        CHECK(f && fleet_distributed_optimizer(f, o, NULL));
        CHECK_OK(fl_opt_minimize(o, cost));
        fl_exe *e = fl_exe_create(NULL);
        CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
        if (variant) train(p, cost, e, 0, B / 2, 0, B / 2, 2 * 3); /* 6 half batches = 3 merged steps */
        else train(p, cost, e, 0, B, 0, B, 3);
        memcpy(got[variant], fl_tensor_f32(fl_scope_find(fl_exe_scope(e), "fc_0.w_0")), 96 * sizeof(float));
        fl_exe_free(e);
        fl_opt_free(o);
        fleet_free(f);
        fl_prog_free(p);
    }
    for (int j = 0; j < 6 * 16; j++)
        if (!(fabs(got[0][j] - got[1][j]) <= 1e-5 * (1 + fabs(got[0][j]))))
            TFAIL("fc_0.w_0[%d]: merged %.8g vs full batch %.8g", j, got[1][j], got[0][j]);
}

TEST_MAIN(T(dp_equals_local_sgd_2), T(dp_equals_local_adam_3), T(dp_sparse_embedding_2), T(dp_sparse_embedding_momentum_3),
          T(dp_amp_bf16_equals_local_amp_2), T(dp_amp_fp16_equals_local_amp_2),
          T(dp_amp_fp16_nan_on_one_rank_skips_every_rank_2), T(dp_lars_equals_local_lars_2), T(dp_lamb_equals_local_lamb_2),
          T(dp_bf16_allreduce_near_float32_local_2), T(dp_fp16_allreduce_near_float32_local_2), T(localsgd_k1_equals_dp),
          T(gradient_merge_equals_big_batch), T(gradient_merge_k2_local))
