/*
 * ps_train - one process of a parameter-server job for tests/test_ps_fleet.c (and by hand
 * under fleetrun).  The role comes from the environment (TRAINING_ROLE, ...); without a
 * PS environment it trains locally, which is the reference the tests compare with.
 *
 *   ps_train [key=value ...]
 *     task=tiny|quick      tiny: x[6] -> fc16 tanh (+ two id slots looked up in the
 *                          sparse table "emb" [11, 4], one with padding_idx 0) -> fc2
 *                          softmax; quick: the quick-start MLP on gen_data (default tiny)
 *     mode=sync|async|half_async|geo  (default sync)   k=K  GEO k_steps (default 4)
 *     opt=sgd|adam|adagrad|momentum (default sgd)   lr=RATE   l2=COEFF
 *     sparse=0|1           tiny only: add the embedding (default 1)
 *     dist=0|1             embedding is_distributed (default 1; is_sparse always)
 *     steps=N start=S      train steps S..S+N-1 (data depends on the step only)
 *     batch=B              per-worker batch (global batch = B x workers)
 *     order=init_first|startup_first   fleet_init_worker before or after the startup run
 *     dump=PATH            worker 0 (or the local run): parameters after training, as
 *                          safetensors (the sparse table pulled from the servers)
 *     dump_init=PATH       worker 0: the sparse table's initial rows, pulled (creating
 *                          them) before training
 *     init_table=PATH      local run: start the table "emb" from this file
 *     save=DIR             fleet_save_persistables after the last step
 *     infer=DIR            fleet_save_inference_model (feeds x [, id1, id2] -> prediction)
 *     load=DIR             servers: fleet_init_server(DIR)
 *     ckpt=DIR every=N     checkpoints for restart: every N steps fleet_save_checkpoint
 *                          (keep 2); at start the servers load the newest one
 *                          (fleet_checkpoint_latest) and the workers resume from it
 *                          (fleet_load_checkpoint: parameters, optimizer state, step)
 *     kill_self_at=S       SIGKILL itself before step S (only worker kill_rank=R if given)
 *     merge=N queue=N      async: max_merge_var_num and send_queue_size
 *     amp=0|1              strategy.amp (bf16 products, float32 parameters on the servers)
 *     s:KEY=VALUE          any strategy field (fleet_strategy_set), after the above
 *     After fleet_stop_worker a worker prints "traffic: sent S received R dense_sent DS
 *     dense_received DR examples E" (fleet_ps_traffic).
 *     quiet=1              print only the last step's cost
 * Exit status 0 on success, 1 with the error on stderr otherwise.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/ps/fleet_ps.h"
#include "../../examples/quick_start/data.h"

#define VOCAB 11
#define DIM 4

static const char *arg(int argc, char **argv, const char *key, const char *def)
{
    size_t n = strlen(key);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], key, n) && argv[i][n] == '=') return argv[i] + n + 1;
    return def;
}

static int fail(const char *what)
{
    fprintf(stderr, "ps_train: %s: %s\n", what, fl_last_error());
    fflush(stderr);
    return 1;
}

/* Deterministic samples of the tiny task, by global sample index. */
static void sample(int64_t i, float *x, int64_t *id1, int64_t *id2, int64_t *y)
{
    float s = 0;
    for (int j = 0; j < 6; j++) {
        x[j] = (float)((double)((i * 6 + j) * 2654435761u % 1000) / 500.0 - 1.0);
        s += x[j] * (float)(j % 2 ? 1 : -1);
    }
    *id1 = (i * 7) % VOCAB;
    *id2 = (i * 3 + 1) % VOCAB;
    *y = (s + (float)(*id1 % 3) * 0.3f) > 0.2f;
}

static fl_var *g_pred; /* the prediction (softmax) of the model */

static fl_var *build_tiny(fl_prog *p, int sparse, int dist)
{
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(6), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = fl_layer_fc(FL_VARS(x), 16, "tanh");
    if (sparse) {
        fl_var *i1 = fl_layer_data(p, "id1", FL_SHAPE(1), FL_INT64, 0);
        fl_var *i2 = fl_layer_data(p, "id2", FL_SHAPE(1), FL_INT64, 0);
        fl_embedding_attr ea;
        memset(&ea, 0, sizeof ea);
        ea.is_sparse = 1;
        ea.is_distributed = dist;
        ea.param.name = "emb";
        ea.param.init = fl_init_uniform(-0.5f, 0.5f);
        fl_var *e1 = fl_layer_embedding(i1, VOCAB, DIM, &ea);
        ea.has_padding_idx = 1;
        ea.padding_idx = 0;
        fl_var *e2 = fl_layer_embedding(i2, VOCAB, DIM, &ea);
        h = fl_layer_fc(FL_VARS(h, e1, e2), 16, "tanh");
    }
    fl_var *pr = fl_layer_fc(FL_VARS(h), 2, "softmax");
    g_pred = pr;
    return fl_layer_mean(fl_layer_cross_entropy(pr, y));
}

static fl_opt *make_opt(const char *name, float lr)
{
    if (!strcmp(name, "adam")) return fl_opt_adam(lr, 0.9f, 0.999f, 1e-8f);
    if (!strcmp(name, "adagrad")) return fl_opt_adagrad(lr, 1e-6f);
    if (!strcmp(name, "momentum")) return fl_opt_momentum(lr, 0.9f, 0);
    return fl_opt_sgd(lr);
}

/* The sparse table's rows 0..VOCAB-1, pulled from the servers. */
static int pull_table(fleet_t *f, int training, fl_tensor **out)
{
    const fl_ps_table_config *t;
    int n, table = -1;
    if (fl__ps_fleet_tables(f, &t, &n) != FL_OK) return fl_last_status();
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, "emb")) table = i;
    fl_ps_client *cl = fl__ps_fleet_client(f);
    if (table < 0 || !cl) {
        fprintf(stderr, "ps_train: no sparse table 'emb' or no client\n");
        return FL_ENOTFOUND;
    }
    uint64_t ids[VOCAB];
    for (int i = 0; i < VOCAB; i++) ids[i] = (uint64_t)i;
    *out = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){VOCAB, DIM});
    if (!*out) return fl_last_status();
    return fl_ps_client_pull_sparse(cl, table, ids, VOCAB, fl_tensor_f32(*out), training);
}

static int dump(const char *path, fleet_t *f, fl_prog *p, fl_exe *e, int remote_table)
{
    const char *names[64];
    const fl_tensor *ts[64];
    int n = 0;
    for (int i = 0; i < fl_prog_num_vars(p) && n < 63; i++) {
        fl_var *v = fl_prog_var_at(p, i);
        if (!fl_var_is_param(v)) continue;
        fl_tensor *t = fl_scope_find(fl_exe_scope(e), fl_var_name(v));
        if (!t) continue;
        names[n] = fl_var_name(v);
        ts[n++] = t;
    }
    fl_tensor *emb = NULL;
    if (remote_table) {
        if (pull_table(f, 0, &emb) != FL_OK) return fl_last_status();
        names[n] = "emb";
        ts[n++] = emb;
    }
    int st = fl_io_write_safetensors(path, names, ts, n);
    fl_tensor_free(emb);
    return st;
}

static int load_table(fl_exe *e, const char *path)
{
    char **names;
    fl_tensor **ts;
    int n;
    if (fl_io_read_safetensors(path, &names, &ts, &n) != FL_OK) return fl_last_status();
    int st = FL_ENOTFOUND;
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], "emb")) st = fl_tensor_copy(fl_scope_find(fl_exe_scope(e), "emb"), ts[i]);
    fl_io_free_tensors(names, ts, n);
    return st;
}

int main(int argc, char **argv)
{
    const char *task = arg(argc, argv, "task", "tiny"), *mode = arg(argc, argv, "mode", "sync");
    const char *optname = arg(argc, argv, "opt", "sgd"), *order = arg(argc, argv, "order", "init_first");
    const char *dump_path = arg(argc, argv, "dump", NULL), *dump_init = arg(argc, argv, "dump_init", NULL);
    const char *init_table = arg(argc, argv, "init_table", NULL), *save = arg(argc, argv, "save", NULL);
    const char *load = arg(argc, argv, "load", NULL), *infer = arg(argc, argv, "infer", NULL);
    const char *ckpt = arg(argc, argv, "ckpt", NULL);
    int every = atoi(arg(argc, argv, "every", "0"));
    char ckpt_dir[4096];
    int quick = !strcmp(task, "quick");
    int sparse = !quick && atoi(arg(argc, argv, "sparse", "1"));
    int dist = atoi(arg(argc, argv, "dist", "1"));
    int steps = atoi(arg(argc, argv, "steps", "10")), start = atoi(arg(argc, argv, "start", "0"));
    int batch = atoi(arg(argc, argv, "batch", quick ? "128" : "8"));
    int kill_at = atoi(arg(argc, argv, "kill_self_at", "-1")), quiet = atoi(arg(argc, argv, "quiet", "0"));
    int kill_rank = atoi(arg(argc, argv, "kill_rank", "-1"));
    float lr = (float)atof(arg(argc, argv, "lr", quick ? "0.01" : "0.1"));
    float l2 = (float)atof(arg(argc, argv, "l2", "0"));

    fl_prog *prog = fl_prog_create();
    fl_var *cost;
    if (quick) {
        fl_model_mlp_config cfg = fl_model_mlp_default();
        fl_model_mlp net;
        if (fl_model_mlp_build(prog, &cfg, &net) != FL_OK) return fail("building the quick-start MLP");
        cost = net.loss;
    } else {
        cost = build_tiny(prog, sparse, dist);
    }
    fl_opt *opt = make_opt(optname, lr);
    if (l2 > 0) fl_opt_set_l2(opt, l2);
    fleet_strategy s = fleet_strategy_default();
    if (!strcmp(mode, "sync")) {
        s.a_sync = 0;
    } else if (!strcmp(mode, "geo")) {
        s.a_sync = 1;
        s.a_sync_configs.k_steps = atoi(arg(argc, argv, "k", "4"));
    } else if (!strcmp(mode, "half_async")) {
        s.a_sync_configs.half_async = 1;
    }
    s.a_sync_configs.max_merge_var_num = atoi(arg(argc, argv, "merge", "1"));
    s.a_sync_configs.send_queue_size = atoi(arg(argc, argv, "queue", "16"));
    s.amp = atoi(arg(argc, argv, "amp", "0"));
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "s:", 2) != 0) continue;
        char kv[256];
        snprintf(kv, sizeof kv, "%s", argv[i] + 2);
        char *eq = strchr(kv, '=');
        if (!eq) {
            fprintf(stderr, "ps_train: '%s' is not s:KEY=VALUE\n", argv[i]);
            return 1;
        }
        *eq = 0;
        if (fleet_strategy_set(&s, kv, eq + 1) != FL_OK) return fail(argv[i]);
    }
    fleet_t *fleet = fleet_init(NULL, &s);
    if (!fleet) return fail("fleet_init");
    opt = fleet_distributed_optimizer(fleet, opt, NULL);
    if (!opt) return fail("fleet_distributed_optimizer");
    if (fl_opt_minimize(opt, cost) != FL_OK) return fail("minimize");

    if (fleet_is_server(fleet)) {
        if (ckpt && fleet_checkpoint_latest(ckpt, ckpt_dir, sizeof ckpt_dir, NULL) == FL_OK) load = ckpt_dir;
        if (fleet_init_server(fleet, load) != FL_OK) return fail("fleet_init_server");
        if (fleet_run_server(fleet) != FL_OK) return fail("fleet_run_server");
        fl_opt_free(opt);
        fl_prog_free(prog);
        fleet_free(fleet);
        return 0;
    }

    int W = fleet_worker_num(fleet), me = fleet_worker_index(fleet);
    int remote = sparse && fleet_is_distributed(fleet) && strcmp(mode, "geo") != 0 && dist;
    fl_exe *exe = fl_exe_create(NULL);
    if (!strcmp(order, "init_first") && fleet_init_worker(fleet) != FL_OK) return fail("fleet_init_worker");
    if (fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL) != FL_OK) return fail("startup");
    if (strcmp(order, "init_first") != 0 && fleet_init_worker(fleet) != FL_OK) return fail("fleet_init_worker");
    if (init_table && load_table(exe, init_table) != FL_OK) return fail("init_table");
    if (dump_init && me == 0 && remote) {
        fl_tensor *t;
        if (pull_table(fleet, 1, &t) != FL_OK) return fail("pulling the initial table");
        const char *nm[1] = {"emb"};
        const fl_tensor *tv[1] = {t};
        if (fl_io_write_safetensors(dump_init, nm, tv, 1) != FL_OK) return fail("dump_init");
        fl_tensor_free(t);
    }

    if (ckpt) { /* resume where the newest checkpoint left off */
        fleet_checkpoint_pos pos;
        int st = fleet_load_checkpoint(fleet, exe, ckpt, prog, &pos);
        if (st == FL_OK) {
            steps -= (int)pos.step - start;
            start = (int)pos.step;
            printf("worker_index: %d, resumed at step %d\n", me, start);
        } else if (st != FL_ENOTFOUND) {
            return fail("fleet_load_checkpoint");
        }
    }

    batch_data qd = {0};
    int B = batch;
    float *xs = malloc(sizeof(float) * 6 * (size_t)B);
    int64_t *i1 = malloc(sizeof(int64_t) * (size_t)B), *i2 = malloc(sizeof(int64_t) * (size_t)B);
    int64_t *ys = malloc(sizeof(int64_t) * (size_t)B);
    float last = 0;
    for (int step = start; step < start + steps; step++) {
        if (step == kill_at && (kill_rank < 0 || kill_rank == me)) raise(SIGKILL);
        fl_tensor *out, *xt = NULL, *yt = NULL, *t1 = NULL, *t2 = NULL;
        fl_feed feed[4];
        int nf;
        if (quick) {
            gen_data(&qd, B, (unsigned)(step * W + me));
            feed[0] = (fl_feed){"x", qd.x};
            feed[1] = (fl_feed){"y", qd.y};
            nf = 2;
        } else {
            for (int i = 0; i < B; i++)
                sample((int64_t)step * B * W + (int64_t)me * B + i, xs + 6 * i, i1 + i, i2 + i, ys + i);
            xt = fl_tensor_from_data(FL_FLOAT32, 2, (const int64_t[]){B, 6}, xs);
            yt = fl_tensor_from_data(FL_INT64, 2, (const int64_t[]){B, 1}, ys);
            t1 = fl_tensor_from_data(FL_INT64, 2, (const int64_t[]){B, 1}, i1);
            t2 = fl_tensor_from_data(FL_INT64, 2, (const int64_t[]){B, 1}, i2);
            feed[0] = (fl_feed){"x", xt};
            feed[1] = (fl_feed){"y", yt};
            feed[2] = (fl_feed){"id1", t1};
            feed[3] = (fl_feed){"id2", t2};
            nf = sparse ? 4 : 2;
        }
        const char *fetch[1] = {fl_var_name(cost)};
        int st = fl_exe_run(exe, prog, feed, nf, fetch, 1, &out);
        fl_tensor_free(xt);
        fl_tensor_free(yt);
        fl_tensor_free(t1);
        fl_tensor_free(t2);
        if (st != FL_OK) {
            fprintf(stderr, "ps_train: worker %d step %d failed: %s\n", me, step, fl_last_error());
            return 1;
        }
        last = fl_tensor_f32(out)[0];
        if (!quiet) printf("worker_index: %d, step%d cost = %f\n", me, step, last);
        if (ckpt && every > 0 && (step + 1) % every == 0) {
            fleet_checkpoint_pos pos = {0, 0, 0, step + 1};
            if (fleet_save_checkpoint(fleet, exe, ckpt, prog, &pos, 2) != FL_OK) return fail("fleet_save_checkpoint");
        }
    }
    if (quiet) printf("worker_index: %d, step%d cost = %f\n", me, start + steps - 1, last);
    fflush(stdout);
    if (save && fleet_save_persistables(fleet, exe, save, prog) != FL_OK) return fail("fleet_save_persistables");
    if (infer && !quick) {
        const char *feeds[3] = {"x", "id1", "id2"};
        if (fleet_save_inference_model(fleet, exe, infer, feeds, sparse ? 3 : 1, &g_pred, 1, prog) != FL_OK)
            return fail("fleet_save_inference_model");
    }
    if (dump_path && me == 0 && dump(dump_path, fleet, prog, exe, remote) != FL_OK) return fail("dump");
    if (fleet_stop_worker(fleet) != FL_OK) return fail("fleet_stop_worker");
    fl_ps_traffic tr;
    int64_t ex = 0;
    if (fleet_is_distributed(fleet)) {
        if (fleet_ps_traffic(fleet, &tr, &ex) != FL_OK) return fail("fleet_ps_traffic");
        printf("traffic: sent %llu received %llu dense_sent %llu dense_received %llu examples %lld\n",
               (unsigned long long)tr.bytes_sent, (unsigned long long)tr.bytes_received,
               (unsigned long long)tr.dense_bytes_sent, (unsigned long long)tr.dense_bytes_received, (long long)ex);
        fflush(stdout);
    }
    batch_data_free(&qd);
    free(xs);
    free(i1);
    free(i2);
    free(ys);
    fl_exe_free(exe);
    fl_opt_free(opt);
    fl_prog_free(prog);
    fleet_free(fleet);
    return 0;
}
