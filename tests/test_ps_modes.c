/*
 * test_ps_modes.c - parameter-server modes beyond sync (tests/test_ps_fleet.c has sync,
 * the rewrite and the lifecycle) and the dense traffic, with BUILD/tests/bin/ps_train jobs
 * on 127.0.0.1:
 *   - half-async with one worker equals local training step by step (its worker waits
 *     for its own pushes and pulls at the end of every step); with 2 x 2 it converges;
 *   - GEO with one worker equals local training (the servers' "sum" tables follow the
 *     worker's dense parameters exactly), whatever k_steps;
 *   - bf16 on the wire (a_sync_configs.dense_wire_dtype) halves the dense bytes that the
 *     traffic counter reports, and async training with it ends where float32 ends;
 *   - async with merging (max_merge_var_num, send_wait_times, 2 send threads) and with an
 *     independent receive thread converges; CTR-DNN trained async with merging and bf16
 *     dense values ends within 0.005 test AUC of local training;
 *   - the strategy fields and the errors of contradictory combinations (in process);
 *   - the public mode table (fleet_ps_mode_info, fleet_strategy_set_ps_mode,
 *     fleet_strategy_ps_mode) answers from the rows.
 */
#include "ps_job.h"
#include "testhelp.h"
#include "fleet/ps/fleet_ps.h"
#include "ps_fork.h"

static void paths(void)
{
    char self[PATH_MAX - 64];
    th_tests_dir(self, sizeof self);
    snprintf(PS_TRAIN, sizeof PS_TRAIN, "%s/bin/ps_train", self);
}

/* Every "stepN cost = C" of worker (or the local run) w, in order; returns the count. */
static int step_costs(const job *j, int local, int w, double *out, int cap)
{
    for (int i = 0; i < j->n; i++) {
        const proc_t_ *p = &j->p[i];
        if (p->server || p->idx != w || (strstr(p->log, "/local.") != NULL) != local) continue;
        char *s = slurp(p->log), *q = s;
        int n = 0;
        while ((q = strstr(q, " cost = ")) && n < cap) {
            out[n++] = atof(q + 8);
            q++;
        }
        free(s);
        return n;
    }
    return 0;
}

/* A worker's "traffic:" line. */
typedef struct {
    double sent, received, dense_sent, dense_received, examples;
} traffic;

static traffic worker_traffic(const job *j, int w)
{
    traffic t = {0};
    for (int i = 0; i < j->n; i++) {
        if (j->p[i].server || j->p[i].idx != w) continue;
        char *s = slurp(j->p[i].log), *q = strstr(s, "traffic: ");
        if (q)
            sscanf(q, "traffic: sent %lf received %lf dense_sent %lf dense_received %lf examples %lf", &t.sent, &t.received,
                   &t.dense_sent, &t.dense_received, &t.examples);
        free(s);
    }
    if (t.examples <= 0) TFAIL("worker %d printed no traffic line", w);
    return t;
}

/* The distributed job (ns servers, one worker), then the local run of the same arguments;
 * worker 0's step costs must equal the local ones within tol.  remote_table: the sparse
 * table lives on the servers (rows made there from their own seed), so the local run
 * starts from the rows worker 0 pulled before training. */
static void equals_local(const char *const *args, int ns, int remote_table, double tol)
{
    paths();
    job j;
    job_init(&j, ns, 1);
    char dump_init[128], init_table[128];
    snprintf(dump_init, sizeof dump_init, "dump_init=%s/init.st", j.dir);
    snprintf(init_table, sizeof init_table, "init_table=%s/init.st", j.dir);
    const char *w0[] = {dump_init, NULL};
    job_start(&j, args, NULL, remote_table ? w0 : NULL);
    job_wait_ok(&j, 90);
    const char *largs[16];
    int n = 0;
    for (int i = 0; args[i] && n < 14; i++) largs[n++] = args[i];
    if (remote_table) largs[n++] = init_table;
    largs[n] = NULL;
    spawn(&j, 0, 0, 1, largs);
    job_wait_ok(&j, 60);
    double a[64], b[64];
    int na = step_costs(&j, 0, 0, a, 64), nb = step_costs(&j, 1, 0, b, 64);
    CHECK(na > 0);
    CHECK_EQ_INT(na, nb);
    for (int i = 0; i < na; i++)
        if (!(fabs(a[i] - b[i]) <= tol)) {
            dump_logs(&j);
            TFAIL("step %d: cost %.7f distributed, %.7f local", i, a[i], b[i]);
        }
    printf("  %d step costs equal local training within %g\n", na, tol);
    th_rmtree(j.dir);
}

/* One worker, half-async: its push is applied before its pull (it waits for its own
 * queue), so each step is a local SGD step.  Sparse table included (the flush covers it). */
TEST(half_async_one_worker_equals_local)
{
    const char *args[] = {"task=tiny", "mode=half_async", "steps=12", "batch=8", NULL};
    equals_local(args, 2, 1, 1e-5);
}

/* One worker, half-async, AMP float16 with dynamic loss scaling from a scale of 1e9: the
 * first steps overflow float16, so the worker skips its push (ps_send runs only when the
 * unscaled gradients are finite, as the local update ops) while the scale halves; then
 * steps apply.  Every step's cost equals local float16 AMP training. */
TEST(half_async_fp16_amp_skips_like_local)
{
    const char *args[] = {"task=tiny",
                          "mode=half_async",
                          "steps=30",
                          "batch=8",
                          "s:amp=true",
                          "s:amp_configs.dtype=float16",
                          "s:amp_configs.init_loss_scaling=1e9",
                          "s:amp_configs.decr_every_n_nan_or_inf=1",
                          "s:amp_configs.decr_ratio=0.5",
                          NULL};
    equals_local(args, 2, 1, 1e-5);
}

/* One worker, GEO with k_steps 3: the worker trains locally; every 3 steps it pushes its
 * dense delta (latest - old) / 1 to the "sum" tables and pulls them back, which are then
 * exactly its own parameters: GEO changes nothing for one worker.  The is_sparse
 * embedding stays on the worker (GEO refuses is_distributed) and is synchronised as a
 * dense table. */
TEST(geo_one_worker_equals_local)
{
    const char *args[] = {"task=tiny", "mode=geo", "k=3", "dist=0", "steps=12", "batch=8", NULL};
    equals_local(args, 2, 0, 1e-5);
}

static void converges(const char *const *args, double threshold)
{
    paths();
    job j;
    job_init(&j, 2, 2);
    job_start(&j, args, NULL, NULL);
    job_wait_ok(&j, 120);
    for (int w = 0; w < 2; w++) {
        double c = worker_cost(&j, w, 50);
        printf("  %s: worker %d mean cost of the last 50 steps %.4f\n", args[1], w, c);
        if (!(c < threshold)) {
            dump_logs(&j);
            TFAIL("%s: worker %d's cost %.4f is not below %.2f", args[1], w, c, threshold);
        }
    }
    th_rmtree(j.dir);
}

/* Cost at the start 0.69; local training averages 0.28 over steps 250-299 (see
 * test_ps_fleet.c's async_converges). */
TEST(half_async_converges)
{
    const char *args[] = {"task=quick", "mode=half_async", "steps=300", "merge=2", "queue=2", NULL};
    converges(args, 0.4);
}

/* Merging of up to 4 gradients (waiting up to 3 x 10 ms for them), 2 send threads, bf16 on
 * the wire, parameters from an independent receive thread. */
TEST(async_merged_bf16_converges)
{
    const char *args[] = {"task=quick",
                          "mode=async",
                          "steps=300",
                          "merge=4",
                          "queue=4",
                          "s:a_sync_configs.send_wait_times=3",
                          "s:a_sync_configs.thread_pool_size=2",
                          "s:a_sync_configs.dense_wire_dtype=bf16",
                          "s:a_sync_configs.independent_recv_thread=true",
                          NULL};
    converges(args, 0.4);
}

/* One async worker, one push and one pull per step (merge 1, the parameter pulled right
 * after its gradient went): the dense bytes of the bf16 run are half those of the float32
 * run, up to the initial exchange (float32 in both), and the training ends alike. */
TEST(bf16_wire_halves_dense_bytes)
{
    paths();
    traffic t[2];
    double cost[2];
    for (int r = 0; r < 2; r++) {
        job j;
        job_init(&j, 1, 1);
        const char *args[] = {"task=quick", "mode=async", "steps=200",
                              "merge=1",    "queue=1",    r ? "s:a_sync_configs.dense_wire_dtype=bf16" : "quiet=0",
                              NULL};
        job_start(&j, args, NULL, NULL);
        job_wait_ok(&j, 90);
        t[r] = worker_traffic(&j, 0);
        cost[r] = worker_cost(&j, 0, 50);
        th_rmtree(j.dir);
    }
    for (int r = 0; r < 2; r++)
        printf("  %s: %.0f examples, per example %.1f bytes sent, %.1f received (dense %.1f, %.1f); cost %.4f\n",
               r ? "bf16" : "float32", t[r].examples, t[r].sent / t[r].examples, t[r].received / t[r].examples,
               t[r].dense_sent / t[r].examples, t[r].dense_received / t[r].examples, cost[r]);
    CHECK_NEAR(t[0].examples, 200.0 * 128, 0.5);
    CHECK_NEAR(t[1].examples, t[0].examples, 0.5);
    /* each way: one float32 initial exchange (worker 0 offers, then pulls) and 200 steps
     * of the dense parameters: (1 + 200 / 2) / (1 + 200) = 0.5025 */
    double rs = t[1].dense_sent / t[0].dense_sent, rr = t[1].dense_received / t[0].dense_received;
    printf("  bf16 / float32: dense bytes sent %.4f, received %.4f; all bytes sent %.4f, received %.4f\n", rs, rr,
           t[1].sent / t[0].sent, t[1].received / t[0].received);
    CHECK_NEAR(rs, 0.5025, 0.002);
    CHECK_NEAR(rr, 0.5025, 0.002);
    CHECK(t[1].sent < 0.6 * t[0].sent);
    CHECK(t[1].received < 0.6 * t[0].received);
    CHECK(cost[0] < 0.45);
    CHECK_NEAR(cost[1], cost[0], 0.03);
}

/* ---- CTR-DNN: merged async with bf16 on the wire keeps the AUC ------------------------------------ */

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define CTR_ROWS "20000"
#define CTR_TOL 0.05
#else
#define CTR_ROWS "200000"
#define CTR_TOL 0.005
#endif

/* Runs a shell command bounded by `seconds`, output to log; returns the log (malloc'd). */
static char *sh(const char *log, int seconds, const char *cmd)
{
    char full[8192];
    snprintf(full, sizeof full, "timeout -k 5 %d %s > %s 2>&1", seconds, cmd, log);
    int rc = system(full);
    char *out = slurp(log);
    if (rc != 0) TFAIL("'%s' failed (status %d):\n%s", cmd, rc, out);
    return out;
}

static double after(const char *s, const char *key)
{
    const char *p = strstr(s, key);
    if (!p) TFAIL("'%s' not found in:\n%s", key, s);
    return atof(p + strlen(key));
}

/* examples/ctr/train under fleetrun (1 server, 2 workers of 2 Hogwild threads, Adam):
 * gradients merged 4 at a time (send_queue_size 4, send_wait_times 2, 2 send threads),
 * dense values as bf16 both ways; the test AUC ends within CTR_TOL of local training on
 * the same data (test_ctr.c's settings), and the workers log their traffic. */
TEST(ctr_merged_async_bf16_matches_local_auc)
{
    char self[512], bin[600], dir[64], cmd[8192], log[128];
    th_tests_dir(self, sizeof self);
    snprintf(bin, sizeof bin, "%s/..", self);
    th_mktemp(dir, sizeof dir, "fl_psmodes");
    snprintf(cmd, sizeof cmd,
             "%s/tools/fleet-datagen criteo --rows " CTR_ROWS
             " --files 4 --out %s/data --seed 5 --vocab-scale 0.002 --dense-scale 0.1",
             bin, dir);
    snprintf(log, sizeof log, "%s/gen.log", dir);
    free(sh(log, 60, cmd));
    const char *common =
        "--epochs 2 --optimizer adam --lr 0.003 --hidden 64,64 --sparse_feature_dim 100003 --print_period 0";
    snprintf(cmd, sizeof cmd,
             "%s/examples/ctr/train --is_local 1 --thread_num 2 --train_data %s/data/train --test_data %s/data/test "
             "--model_dir %s/local_model %s",
             bin, dir, dir, dir, common);
    snprintf(log, sizeof log, "%s/local.log", dir);
    char *loc = sh(log, 120, cmd);
    double a_local = after(loc, "test auc ");
    snprintf(cmd, sizeof cmd,
             "%s/tools/fleetrun --server_num 1 --worker_num 2 --log_level info --log_dir %s/log %s/examples/ctr/train "
             "--thread_num 2 --train_data %s/data/train --test_data %s/data/test --model_dir %s/ps_model "
             "--strategy a_sync_configs.send_queue_size=4 --strategy a_sync_configs.max_merge_var_num=4 "
             "--strategy a_sync_configs.send_wait_times=2 --strategy a_sync_configs.thread_pool_size=2 "
             "--strategy a_sync_configs.dense_wire_dtype=bf16 %s",
             bin, dir, bin, dir, dir, dir, common);
    snprintf(log, sizeof log, "%s/ps.log", dir);
    char *ps = sh(log, 180, cmd);
    double a_ps = after(ps, "test auc ");
    snprintf(log, sizeof log, "%s/log/workerlog.0", dir);
    char *w0 = slurp(log);
    const char *tl = strstr(w0, "traffic (async mode)");
    printf("  test auc: local %.4f, async merged with bf16 dense values %.4f\n", a_local, a_ps);
    if (tl) printf("  worker 0 %.*s\n", (int)strcspn(tl, "\n"), tl);
    CHECK(tl != NULL);
    CHECK_NEAR(a_ps, a_local, CTR_TOL);
    free(w0);
    free(ps);
    free(loc);
    th_rmtree(dir);
}

/* Half-async with 2 Hogwild threads per worker: the threads meet at the end of each step and
 * the last to arrive pushes both threads' gradients, merged (send_queue_size =
 * max_merge_var_num = 2), and pulls once - so the worker makes about half as many pushes
 * per trainer step as with one thread, where every step pushes each variable once. */
static void half_async_run(const char *bin, const char *dir, int threads, double *pushes_per_step, double *auc)
{
    char cmd[8192], log[160];
    snprintf(cmd, sizeof cmd,
             "%s/tools/fleetrun --server_num 1 --worker_num 1 --log_level info --log_dir %s/log%d "
             "%s/examples/ctr/train --thread_num %d --train_data %s/data/train --test_data %s/data/test "
             "--model_dir %s/model%d --epochs 1 --optimizer adam --lr 0.003 --hidden 32,32 "
             "--sparse_feature_dim 100003 --print_period 0 --strategy a_sync_configs.half_async=true "
             "--strategy a_sync_configs.send_queue_size=2 --strategy a_sync_configs.max_merge_var_num=2",
             bin, dir, threads, bin, threads, dir, dir, dir, threads);
    snprintf(log, sizeof log, "%s/half%d.log", dir, threads);
    char *out = sh(log, 180, cmd);
    *auc = after(out, "test auc ");
    snprintf(log, sizeof log, "%s/log%d/workerlog.0", dir, threads);
    char *w = slurp(log);
    double steps = after(w, "stopped after ");
    double pushes = after(w, "communicator made ");
    printf("  half-async, %d thread(s): %.0f steps, %.0f pushes, test auc %.4f\n", threads, steps, pushes, *auc);
    CHECK(steps > 0);
    *pushes_per_step = pushes / steps;
    free(w);
    free(out);
}

TEST(half_async_threads_meet_once_per_step)
{
    char self[512], bin[600], dir[64], cmd[8192], log[128];
    th_tests_dir(self, sizeof self);
    snprintf(bin, sizeof bin, "%s/..", self);
    th_mktemp(dir, sizeof dir, "fl_halfasync");
    snprintf(cmd, sizeof cmd,
             "%s/tools/fleet-datagen criteo --rows 20000 --files 2 --out %s/data --seed 7 --vocab-scale 0.002 "
             "--dense-scale 0.1",
             bin, dir);
    snprintf(log, sizeof log, "%s/gen.log", dir);
    free(sh(log, 60, cmd));
    double one = 0, two = 0, auc1 = 0, auc2 = 0;
    half_async_run(bin, dir, 1, &one, &auc1);
    half_async_run(bin, dir, 2, &two, &auc2);
    CHECK(one > 0);
    CHECK(two < 0.75 * one); /* about 0.5: two threads' gradients per push */
    CHECK(auc1 > 0.6);
    CHECK_NEAR(auc2, auc1, 0.05);
    th_rmtree(dir);
}

/* ---- in process: the strategy --------------------------------------------------------------- */

TEST(strategy_fields_and_mode_selection)
{
    fleet_strategy s = fleet_strategy_default();
    CHECK_EQ_INT(s.a_sync_configs.dense_wire_dtype, FL_FLOAT32);
    CHECK_EQ_INT(s.a_sync_configs.half_async, 0);
    CHECK_OK(fleet_strategy_set(&s, "a_sync_configs.dense_wire_dtype", "bf16"));
    CHECK_EQ_INT(s.a_sync_configs.dense_wire_dtype, FL_BFLOAT16);
    CHECK_OK(fleet_strategy_parse(&s, "{\"a_sync_configs\": {\"dense_wire_dtype\": \"float32\", \"half_async\": true}}"));
    CHECK_EQ_INT(s.a_sync_configs.dense_wire_dtype, FL_FLOAT32);
    CHECK_EQ_INT(s.a_sync_configs.half_async, 1);
    CHECK_EQ_INT(fleet_strategy_set(&s, "a_sync_configs.dense_wire_dtype", "float16"), FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "expected float32, bfloat16 or bf16");
    CHECK_OK(fleet_strategy_set(&s, "a_sync_configs.dense_wire_dtype", "bfloat16"));
    char *txt = fleet_strategy_to_text(&s);
    CHECK(txt);
    CHECK_STR_HAS(txt, "a_sync_configs.dense_wire_dtype=bfloat16");
    CHECK_STR_HAS(txt, "a_sync_configs.half_async=true");
    fleet_strategy back = fleet_strategy_default();
    CHECK_OK(fleet_strategy_parse(&back, txt));
    CHECK_EQ_INT(back.a_sync_configs.dense_wire_dtype, FL_BFLOAT16);
    free(txt);
    CHECK_OK(fleet_strategy_check(&s));

    const fl__ps_mode *m = NULL;
    int64_t k = 0;
    CHECK_OK(fl__ps_mode_select(&s, &m, &k)); /* a_sync (default) + half_async */
    CHECK(!strcmp(m->name, "half_async"));
    s.a_sync_configs.half_async = 0;
    CHECK_OK(fl__ps_mode_select(&s, &m, &k));
    CHECK(!strcmp(m->name, "async"));
    /* half_async with GEO or sync: refused, naming the fields */
    s.a_sync_configs.half_async = 1;
    s.a_sync_configs.k_steps = 4;
    CHECK_EQ_INT(fl__ps_mode_select(&s, &m, &k), FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "half_async=true needs a_sync=true and k_steps <= 0");
    s.a_sync_configs.k_steps = 0;
    s.a_sync = 0;
    CHECK_EQ_INT(fl__ps_mode_select(&s, &m, &k), FL_EINVAL);
    /* bf16 on the wire: async and half-async only */
    s.a_sync_configs.half_async = 0;
    CHECK_EQ_INT(fl__ps_mode_select(&s, &m, &k), FL_EUNSUPPORTED);
    CHECK_STR_HAS(fl_last_error(), "dense_wire_dtype=bfloat16 applies to async and half_async mode, not sync mode");
    s.a_sync = 1;
    s.a_sync_configs.k_steps = 5;
    CHECK_EQ_INT(fl__ps_mode_select(&s, &m, &k), FL_EUNSUPPORTED);
    CHECK_STR_HAS(fl_last_error(), "not geo mode");
}

/* ---- in process: the async communicator's adaptive default --------------------------------------- */

/* One run of the async communicator (one send thread, parameters pulled after each push)
 * over a dense SGD table of n floats on the server at ep, with the strategy's three
 * merge fields: nsend gradients, gradient i all (i + 1), gap_ms apart; returns the pushes
 * made and checks that the table ends at -lr * the sum of the gradients (none lost or
 * counted twice, whatever was merged). */
static int64_t comm_pushes(const char *ep, fl_ps_table_config *t, const fleet_strategy *s, int nsend, int gap_ms)
{
    const char *eps[1] = {ep};
    fl_ps_client_opts co = {0};
    co.endpoints = eps;
    co.num_servers = 1;
    co.num_workers = 1;
    co.tables = t;
    co.num_tables = 1;
    co.insecure_local = 1;
    co.connect_timeout_ms = 5000;
    co.request_timeout_ms = 20000;
    const int64_t n = t->rows * t->cols;
    float *zero = calloc((size_t)n, sizeof(float)), *w = malloc((size_t)n * sizeof(float));
    CHECK(zero && w);
    fl_ps_client *cl;
    CHECK_OK(fl_ps_client_create(&co, &cl));
    CHECK_OK(fl_ps_client_init_dense(cl, 0, zero, 1, NULL));
    fl__ps_comm_var v = {0, 0, n, 0};
    fl__ps_comm_opts o = {&co,
                          &v,
                          1,
                          s->a_sync_configs.send_queue_size,
                          s->a_sync_configs.max_merge_var_num,
                          s->a_sync_configs.min_send_grad_num_before_recv,
                          s->a_sync_configs.send_wait_times,
                          s->a_sync_configs.thread_pool_size,
                          FL__PS_RECV_AFTER_SEND};
    fl__ps_comm *c;
    CHECK_OK(fl__ps_comm_create(&o, &c));
    int64_t shape[1] = {n};
    fl_tensor *g = fl_tensor_create(FL_FLOAT32, 1, shape);
    CHECK(g);
    double sum = 0;
    for (int i = 0; i < nsend; i++) {
        for (int64_t k = 0; k < n; k++) ((float *)g->data)[k] = (float)(i + 1);
        sum += i + 1;
        CHECK_OK(fl__ps_comm_send(c, 0, g));
        if (gap_ms) usleep((useconds_t)gap_ms * 1000);
    }
    CHECK_OK(fl__ps_comm_flush(c));
    int64_t pushes = fl__ps_comm_pushes(c, NULL);
    fl__ps_comm_free(c);
    CHECK_OK(fl_ps_client_pull_dense(cl, 0, w));
    CHECK_NEAR(w[0], -t->opt.lr * sum, 1e-3 * t->opt.lr * sum);
    CHECK_NEAR(w[n - 1], -t->opt.lr * sum, 1e-3 * t->opt.lr * sum);
    fl_tensor_free(g);
    fl_ps_client_free(cl);
    free(zero);
    free(w);
    return pushes;
}

/* The default strategy (merge fields not set) sends what queued up during a round, merged:
 * gradients of a 1.7 MB tower queued back to back (faster than any link carries them) go
 * in fewer pushes than gradients, with nothing lost; gradients that come slower than a round
 * still go one per push (a fast link changes nothing); a small tower's gradients go one per
 * push however fast they come (a queue of 1: no staleness).  A field set explicitly is honoured
 * exactly: max_merge_var_num = 1 pushes every gradient alone; merge 3 (queue 3) never
 * takes more than 3 in a push. */
TEST(async_default_merges_what_queues_up)
{
    fl_ps_table_config t[1];
    memset(t, 0, sizeof t);
    t[0].name = "tower";
    t[0].kind = FL_PS_DENSE;
    t[0].rows = 1700;
    t[0].cols = 250;
    t[0].opt = (fl_ps_optimizer){FL_PS_OPT_SGD, 0.001f, 0, 0, 0, 0, 0, 0};
    fl_ps_server_opts so = {0};
    so.server_index = 0;
    so.num_servers = 1;
    so.num_workers = 1;
    so.tables = t;
    so.num_tables = 1;
    so.insecure_local = 1;
    so.worker_timeout_ms = -1;
    char ep[128];
    pid_t pid = ps_fork_server(&so, NULL, 120, ep, sizeof ep);
    CHECK(pid > 0);

    enum { N = 60 };
    fleet_strategy s = fleet_strategy_default();
    CHECK_EQ_INT(s.a_sync_configs.max_merge_var_num, 0); /* "not set" */
    int64_t p = comm_pushes(ep, t, &s, N, 0);
    printf("default, back to back: %d gradients in %lld pushes\n", N, (long long)p);
    CHECK(p >= 1 && p < N / 2);

    /* one gradient every 40 ms, a small table: each round is back before the next gradient */
    fl_ps_table_config small = t[0];
    small.rows = 4;
    fl_ps_server_opts so2 = so;
    so2.tables = &small;
    char ep2[128];
    pid_t pid2 = ps_fork_server(&so2, NULL, 120, ep2, sizeof ep2);
    CHECK(pid2 > 0);
    p = comm_pushes(ep2, &small, &s, 12, 40);
    printf("default, 40 ms apart: 12 gradients in %lld pushes\n", (long long)p);
    CHECK(p >= 10);
    /* a small tower (4 kB, under ADAPT_DEEP_BYTES) queued back to back: merging would save
     * no bytes worth its staleness, so the default is the queue of 1, one gradient a push */
    p = comm_pushes(ep2, &small, &s, N, 0);
    printf("default, small tower back to back: %d gradients in %lld pushes\n", N, (long long)p);
    CHECK_EQ_INT(p, N);

    CHECK_OK(fleet_strategy_set(&s, "a_sync_configs.max_merge_var_num", "1"));
    p = comm_pushes(ep, t, &s, N, 0);
    CHECK_EQ_INT(p, N);
    s = fleet_strategy_default();
    CHECK_OK(fleet_strategy_set(&s, "a_sync_configs.max_merge_var_num", "3"));
    CHECK_OK(fleet_strategy_set(&s, "a_sync_configs.send_queue_size", "3"));
    p = comm_pushes(ep, t, &s, N, 0);
    printf("merge 3: %d gradients in %lld pushes\n", N, (long long)p);
    CHECK(p >= N / 3 && p < N);
    kill(pid, SIGKILL);
    kill(pid2, SIGKILL);
    waitpid(pid, NULL, 0);
    waitpid(pid2, NULL, 0);
}

/* The public mode table (fleet/fleet.h) answers from the rows: what each mode is, the
 * strategy that selects it by name, and the mode a strategy selects. */
TEST(public_mode_table)
{
    /* name, server_optimizes, remote_sparse, single_trainer, server_sync, dense_wire */
    static const struct {
        const char *name;
        int so, rs, st, ss, dw;
    } want[] = {{"sync", 1, 1, 1, 1, 0}, {"half_async", 1, 1, 0, 0, 1}, {"async", 1, 1, 0, 0, 1}, {"geo", 0, 0, 1, 0, 0}};
    CHECK_EQ_INT(fleet_ps_mode_count(), 4);
    for (int i = 0; i < 4; i++) {
        fleet_ps_mode m, at;
        CHECK_OK(fleet_ps_mode_info(want[i].name, &m));
        CHECK_OK(fleet_ps_mode_at(i, &at));
        CHECK(!strcmp(m.name, want[i].name) && !strcmp(at.name, want[i].name));
        CHECK(m.summary && m.summary[0]);
        CHECK_EQ_INT(m.server_optimizes, want[i].so);
        CHECK_EQ_INT(m.remote_sparse, want[i].rs);
        CHECK_EQ_INT(m.single_trainer, want[i].st);
        CHECK_EQ_INT(m.server_sync, want[i].ss);
        CHECK_EQ_INT(m.dense_wire, want[i].dw);
        /* the strategy set by name selects that mode, in the runtime's selection too */
        fleet_strategy s = fleet_strategy_default();
        CHECK_OK(fleet_strategy_set_ps_mode(&s, want[i].name));
        fleet_ps_mode back;
        CHECK_OK(fleet_strategy_ps_mode(&s, &back));
        CHECK(!strcmp(back.name, want[i].name));
        const fl__ps_mode *r = NULL;
        int64_t k = -1;
        CHECK_OK(fl__ps_mode_select(&s, &r, &k));
        CHECK(!strcmp(r->name, want[i].name));
        CHECK_EQ_INT(k, strcmp(want[i].name, "geo") ? 0 : 100);
        /* from any other mode's strategy as well */
        for (int j = 0; j < 4; j++) {
            fleet_strategy o = fleet_strategy_default();
            CHECK_OK(fleet_strategy_set_ps_mode(&o, want[j].name));
            CHECK_OK(fleet_strategy_set_ps_mode(&o, want[i].name));
            CHECK_OK(fleet_strategy_ps_mode(&o, &back));
            CHECK(!strcmp(back.name, want[i].name));
        }
    }
    /* GEO keeps a period already chosen */
    fleet_strategy s = fleet_strategy_default();
    s.a_sync_configs.k_steps = 7;
    CHECK_OK(fleet_strategy_set_ps_mode(&s, "geo"));
    CHECK_EQ_INT(s.a_sync_configs.k_steps, 7);
    /* a strategy file that turns async into GEO: the strategy says so */
    s = fleet_strategy_default();
    CHECK_OK(fleet_strategy_set_ps_mode(&s, "async"));
    CHECK_OK(fleet_strategy_parse(&s, "a_sync_configs.k_steps=5"));
    fleet_ps_mode m;
    CHECK_OK(fleet_strategy_ps_mode(&s, &m));
    CHECK(!strcmp(m.name, "geo") && !m.remote_sparse);
    /* errors name the call, the argument and the modes there are */
    CHECK_FAILS(fleet_ps_mode_info("halfasync", &m), FL_EINVAL,
                "fleet_ps_mode_info: name: expected a parameter-server mode, sync, half_async, async or geo, got "
                "'halfasync'");
    CHECK_FAILS(fleet_ps_mode_info(NULL, &m), FL_EINVAL, "got '(null)'");
    CHECK_FAILS(fleet_ps_mode_info("sync", NULL), FL_EINVAL, "fleet_ps_mode_info: out is NULL");
    CHECK_FAILS(fleet_ps_mode_at(4, &m), FL_EINVAL, "fleet_ps_mode_at: i=4 outside [0, 4)");
    CHECK_FAILS(fleet_ps_mode_at(-1, &m), FL_EINVAL, "i=-1");
    CHECK_FAILS(fleet_strategy_set_ps_mode(NULL, "sync"), FL_EINVAL, "fleet_strategy_set_ps_mode: strategy is NULL");
    CHECK_FAILS(fleet_strategy_set_ps_mode(&s, "collective"), FL_EINVAL, "got 'collective'");
    CHECK_FAILS(fleet_strategy_ps_mode(NULL, &m), FL_EINVAL, "fleet_strategy_ps_mode: strategy is NULL");
    s = fleet_strategy_default();
    s.a_sync = 0;
    s.a_sync_configs.k_steps = 3;
    CHECK_FAILS(fleet_strategy_ps_mode(&s, &m), FL_EINVAL,
                "fleet_strategy_ps_mode: a_sync_configs.k_steps=3 needs a_sync=true");
}

TEST_MAIN(T(public_mode_table), T(strategy_fields_and_mode_selection), T(half_async_one_worker_equals_local),
          T(half_async_fp16_amp_skips_like_local), T(geo_one_worker_equals_local), T(bf16_wire_halves_dense_bytes),
          T(half_async_converges), T(async_merged_bf16_converges), T(ctr_merged_async_bf16_matches_local_auc),
          T(half_async_threads_meet_once_per_step), T(async_default_merges_what_queues_up))
