/* test_recompute_dist.c - strategy.recompute under the distributed runtimes (test_recompute.c
 * covers it locally): the parameters after STEPS steps with recompute equal those without it
 * (within 1e-6), on two collective ranks (allreduce buckets overlapped with a backward that
 * now recomputes forward ops) and on a parameter-server job of one server and one worker on
 * loopback (sync and half-async): recompute is wired for every runtime (src/fleet/recompute.c),
 * so a PS program takes it, and a bad checkpoint is refused at minimize there too, naming it.
 *
 * Each job is forked processes that find each other through Paddle's launcher variables, as
 * fleetrun sets them; a process reports its losses and parameters in memory shared with the
 * test (MAP_SHARED).  Every process has an alarm and the runtimes' own timeouts are set. */
#include <sys/mman.h>

#include "testhelp.h"

/* activations (BATCH x HID) larger than the hidden weights, as in the models recompute is for */
enum { BATCH = 64, DIM = 32, HID = 64, NLAYER = 4, CLASSES = 4, STEPS = 6 };

#define SECRET "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

typedef enum { COLL, PS_SYNC, PS_HALF_ASYNC } mode;

typedef struct {
    int done;                       /* 1: the process got to the end */
    int recomputed;                 /* its main program holds @RECOMPUTE copies */
    float loss[STEPS];              /* its cost at each step */
    float w[NLAYER + 1][HID * HID]; /* fc_k.w_0 after training (the first elements when smaller) */
} result;

/* x[DIM] -> NLAYER x (fc HID relu) -> fc CLASSES -> softmax cross entropy; cps gets the
 * checkpoints: the outputs of hidden layers 2 and 4. */
static fl_var *build(fl_prog *p, char *cps, size_t cap)
{
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(DIM), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = x;
    cps[0] = 0;
    for (int k = 0; k < NLAYER; k++) {
        h = fl_layer_fc(&h, 1, HID, "relu");
        if (k == 1 || k == 3) {
            size_t n = strlen(cps);
            snprintf(cps + n, cap - n, "%s%s", n ? "," : "", fl_var_name(h));
        }
    }
    fl_var *logits = fl_layer_fc(&h, 1, CLASSES, NULL);
    return fl_layer_mean(fl_layer_softmax_with_cross_entropy(logits, y));
}

/* Sample i (the same whoever reads it): features from a fixed formula, class from the sign
 * pattern of two of them. */
static void sample(int64_t i, float *x, int64_t *y)
{
    for (int j = 0; j < DIM; j++) x[j] = (float)sin(0.377 * (double)(i * DIM + j) + 0.11 * (double)j);
    *y = (x[0] > 0) + 2 * (x[1] > x[2]);
}

/* The environment of one process of the job (cleared first: the test may run under a launcher). */
static void job_env(mode m, int server, int rank, const char *eps)
{
    static const char *const vars[] = {"PADDLE_TRAINER_ENDPOINTS",
                                       "PADDLE_PSERVERS_IP_PORT_LIST",
                                       "TRAINING_ROLE",
                                       "PADDLE_TRAINERS_NUM",
                                       "PADDLE_TRAINER_ID",
                                       "PADDLE_PORT",
                                       "POD_IP"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    char id[16];
    snprintf(id, sizeof id, "%d", rank);
    setenv("FLEET_JOB_SECRET", SECRET, 1);
    if (m == COLL) {
        setenv("PADDLE_TRAINER_ID", id, 1);
        setenv("PADDLE_TRAINER_ENDPOINTS", eps, 1);
        setenv("FLEET_COLL_TIMEOUT_MS", "20000", 1);
        return;
    }
    setenv("PADDLE_PSERVERS_IP_PORT_LIST", eps, 1);
    setenv("PADDLE_TRAINERS_NUM", "1", 1);
    setenv("FLEET_PS_CONNECT_TIMEOUT_MS", "30000", 1);
    if (server) {
        setenv("TRAINING_ROLE", "PSERVER", 1);
        setenv("POD_IP", "127.0.0.1", 1);
        setenv("PADDLE_PORT", strchr(eps, ':') + 1, 1);
    } else {
        setenv("TRAINING_ROLE", "TRAINER", 1);
        setenv("PADDLE_TRAINER_ID", id, 1);
    }
}

/* One process: a collective rank, a server or a worker; a worker or rank fills *r. */
static void run_proc(mode m, int recompute, int server, int rank, const char *eps, result *r)
{
    job_env(m, server, rank, eps);
    fl_prog *p = fl_prog_create();
    char cps[256];
    fl_var *loss = build(p, cps, sizeof cps);
    CHECK(loss);
    fleet_strategy s = fleet_strategy_default();
    if (m == PS_SYNC) CHECK_OK(fleet_strategy_set(&s, "a_sync", "false"));
    if (m == PS_HALF_ASYNC) CHECK_OK(fleet_strategy_set(&s, "a_sync_configs.half_async", "true"));
    if (recompute) {
        CHECK_OK(fleet_strategy_set(&s, "recompute", "true"));
        CHECK_OK(fleet_strategy_set(&s, "recompute_configs.checkpoints", cps));
    }
    fleet_t *f = m == COLL ? fleet_init_collective(NULL, &s) : fleet_init(NULL, &s);
    CHECK(f);
    CHECK_EQ_INT(fleet_is_collective(f), m == COLL);
    fl_opt *o = fleet_distributed_optimizer(f, m == COLL ? fl_opt_momentum(0.05f, 0.9f, 0) : fl_opt_sgd(0.1f), NULL);
    CHECK(o);
    CHECK_OK(fl_opt_minimize(o, loss));
    if (server) {
        CHECK(fleet_is_server(f));
        CHECK_OK(fleet_init_server(f, NULL));
        CHECK_OK(fleet_run_server(f));
    } else {
        char *text = NULL;
        size_t len = 0;
        CHECK_OK(fl_prog_to_text(p, &text, &len));
        r->recomputed = strstr(text, "@RECOMPUTE") != NULL;
        free(text);
        fl_exe *e = fl_exe_create(NULL);
        fl_prog_set_seed(p, 7);
        if (m != COLL) CHECK_OK(fleet_init_worker(f));
        CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
        if (m == COLL) CHECK_OK(fleet_init_worker(f));
        int W = fleet_worker_num(f);
        float xs[BATCH * DIM];
        int64_t ys[BATCH];
        const char *fetch[] = {fl_var_name(loss)};
        for (int st = 0; st < STEPS; st++) {
            for (int i = 0; i < BATCH; i++) sample(((int64_t)st * W + rank) * BATCH + i, xs + i * DIM, ys + i);
            fl_tensor *xt = th_f32(2, (const int64_t[]){BATCH, DIM}, xs), *yt = th_i64(2, (const int64_t[]){BATCH, 1}, ys);
            fl_feed feed[] = {{"x", xt}, {"y", yt}};
            fl_tensor *out = NULL;
            CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 1, &out));
            r->loss[st] = fl_tensor_f32(out)[0];
            fl_tensor_free(xt);
            fl_tensor_free(yt);
        }
        for (int k = 0; k <= NLAYER; k++) {
            char name[32];
            snprintf(name, sizeof name, "fc_%d.w_0", k);
            fl_tensor *w = fl_scope_find(fl_exe_scope(e), name);
            CHECK(w && fl_tensor_numel(w) <= HID * HID);
            memcpy(r->w[k], fl_tensor_data(w), (size_t)fl_tensor_numel(w) * sizeof(float));
        }
        CHECK_OK(fleet_stop_worker(f));
        fl_exe_free(e);
        r->done = 1;
    }
    fl_opt_free(o);
    fleet_free(f);
    fl_prog_free(p);
}

/* Runs a job of mode m (COLL: ranks 0 and 1; PS: server, then worker 0); out[i] is worker or
 * rank i's result. */
static void run_job(mode m, int recompute, result out[2])
{
    char eps[128];
    if (m == COLL) th_free_endpoints(eps, sizeof eps, 2);
    else snprintf(eps, sizeof eps, "127.0.0.1:%d", th_free_port());
    result *shared = mmap(NULL, 2 * sizeof(result), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(shared != MAP_FAILED);
    memset(shared, 0, 2 * sizeof(result));
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        int server = m != COLL && i == 0, rank = m == COLL ? i : 0;
        fflush(stdout);
        fflush(stderr);
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            alarm(100);
            run_proc(m, recompute, server, rank, eps, &shared[m == COLL ? i : 0]);
            _exit(0);
        }
    }
    int bad = 0;
    for (int i = 0; i < 2; i++) {
        int ws = 0;
        CHECK(waitpid(pids[i], &ws, 0) == pids[i]);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
            fprintf(stderr, "  %s process %d failed (status 0x%x)\n", m == COLL ? "collective" : "PS", i, ws);
            bad++;
        }
    }
    memcpy(out, shared, 2 * sizeof(result));
    munmap(shared, 2 * sizeof(result));
    if (bad)
        TFAIL("the %s job%s failed",
              m == COLL      ? "collective"
              : m == PS_SYNC ? "sync PS"
                             : "half-async PS",
              recompute ? " with recompute" : "");
}

static double worst_diff(const result *a, const result *b)
{
    double worst = 0;
    for (int k = 0; k <= NLAYER; k++)
        for (int i = 0; i < HID * HID; i++) worst = fmax(worst, fabs((double)a->w[k][i] - b->w[k][i]));
    return worst;
}

/* The job with and without recompute: the same losses and parameters within 1e-6, the
 * recomputed ops in the program of the run that asked for them. */
static void same_with_recompute(mode m, int nres)
{
    result plain[2], rc[2];
    run_job(m, 0, plain);
    run_job(m, 1, rc);
    for (int i = 0; i < nres; i++) {
        CHECK(plain[i].done && rc[i].done);
        CHECK(!plain[i].recomputed);
        CHECK(rc[i].recomputed);
        for (int st = 0; st < STEPS; st++) CHECK_NEAR(plain[i].loss[st], rc[i].loss[st], 1e-6);
        double d = worst_diff(&plain[i], &rc[i]);
        printf("  %s: %s %d: largest parameter difference %.3g; loss %.6f -> %.6f\n",
               m == COLL      ? "collective"
               : m == PS_SYNC ? "sync PS"
                              : "half-async PS",
               m == COLL ? "rank" : "worker", i, d, rc[i].loss[0], rc[i].loss[STEPS - 1]);
        if (!(d <= 1e-6)) TFAIL("%s %d: parameters differ by %.3g with recompute", m == COLL ? "rank" : "worker", i, d);
    }
    CHECK(plain[0].loss[STEPS - 1] != plain[0].loss[0]); /* it trained */
}

TEST(collective_two_ranks_same_params_with_recompute)
{
    same_with_recompute(COLL, 2);
    /* data parallel: both ranks hold the same parameters */
    result rc[2];
    run_job(COLL, 1, rc);
    CHECK_NEAR(worst_diff(&rc[0], &rc[1]), 0, 0);
}

TEST(ps_sync_one_server_one_worker_same_params_with_recompute) { same_with_recompute(PS_SYNC, 1); }

/* Half-async with one worker is deterministic: its push is applied before its pull, so each
 * step is an SGD step on the server (test_ps_modes half_async_one_worker_equals_local).  Plain
 * async is not: its receive thread pulls whenever it runs, so two runs differ whatever the
 * program. */
TEST(ps_half_async_one_server_one_worker_same_params_with_recompute) { same_with_recompute(PS_HALF_ASYNC, 1); }

/* A PS program takes recompute at minimize, so a checkpoint that is no variable of it is
 * refused there, by name, as in local training. */
TEST(ps_bad_checkpoint_refused_at_minimize)
{
    job_env(PS_SYNC, 0, 0, "127.0.0.1:1");
    fl_prog *p = fl_prog_create();
    char cps[256];
    fl_var *loss = build(p, cps, sizeof cps);
    fleet_strategy s = fleet_strategy_default();
    CHECK_OK(fleet_strategy_set(&s, "a_sync", "false"));
    CHECK_OK(fleet_strategy_set(&s, "recompute", "true"));
    char bad[300];
    snprintf(bad, sizeof bad, "%s,no_such_var", cps);
    CHECK_OK(fleet_strategy_set(&s, "recompute_configs.checkpoints", bad));
    fleet_t *f = fleet_init(NULL, &s);
    CHECK(f);
    CHECK(!fleet_is_collective(f) && fleet_is_worker(f));
    fl_opt *o = fleet_distributed_optimizer(f, fl_opt_sgd(0.1f), NULL);
    CHECK(o);
    CHECK_FAILS(fl_opt_minimize(o, loss), FL_EINVAL, "checkpoint 'no_such_var' is not a variable of the program");
    fl_opt_free(o);
    fleet_free(f);
    fl_prog_free(p);
}

TEST_MAIN(T(collective_two_ranks_same_params_with_recompute), T(ps_sync_one_server_one_worker_same_params_with_recompute),
          T(ps_half_async_one_server_one_worker_same_params_with_recompute), T(ps_bad_checkpoint_refused_at_minimize))
