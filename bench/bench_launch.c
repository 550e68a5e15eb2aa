/*
 * bench_launch.c - the probe of bench/launch_peers.sh: a Fleet job's time from launch to its
 * first training step, and from a SIGKILL to the first step of the job fleetrun restarts.
 *
 * Collective (any LABEL but "ps"): each rank takes its role from the launcher's environment
 * (fleet_init(NULL): fleetrun, mpirun or srun), builds a one-layer model, minimises it (the
 * ring rendezvous happens here) and runs one step, whose gradient allreduce makes every rank
 * wait for the slowest.  Rank 0 then prints the time since FLEET_BENCH_T0_NS (CLOCK_REALTIME,
 * set by the script just before it starts the launcher) as "R\t<label>.first_step_ms\t<ms>\tms".
 *
 * Parameter server (LABEL "ps", under fleetrun --server_num 1 --worker_num 2): x[64] -> fc64
 * with a distributed sparse embedding (FLEET_BENCH_ROWS ids per step, default 20000, dim 8)
 * -> fc1; servers load the newest checkpoint under FLEET_BENCH_CKPT, workers connect, run the
 * startup program, load their part of the checkpoint and run one step (its first pull).
 * After the first step of the first attempt the workers save a checkpoint.
 *
 * Restart: with FLEET_BENCH_KILL_FILE set, rank 1 of the first attempt (PADDLE_RESTART_COUNT
 * unset or 0) leaves the time of its death (ms since FLEET_BENCH_T0_NS) in that file and
 * kills itself with SIGKILL after its first step (and the checkpoint).  Rank 0 of a restarted
 * attempt prints its phases, ms since FLEET_BENCH_T0_NS, as "R\trestarted.<label>.<phase>_ms":
 * start (main entered: fleetrun's teardown and restart, fork, exec, dynamic loading), init
 * (role, model, minimise; for a collective job the ring rendezvous), connect (PS: connected
 * to the servers, initial dense values exchanged), load (PS: checkpoint loaded), first_step
 * and (PS) second_step, the same step again: what a step costs once nothing is cold.
 *
 *   FLEET_BENCH_T0_NS=$(date +%s%N) fleetrun --nproc_per_node 4 bench_launch LABEL
 */
#include <fleet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PS_DIM 8
#define PS_VOCAB 1000000

static double since_t0_ms(void)
{
    const char *t0 = getenv("FLEET_BENCH_T0_NS");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double now = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
    return t0 ? now - (double)strtoll(t0, NULL, 10) / 1e6 : -1.0;
}

static int fail(const char *what)
{
    fprintf(stderr, "bench_launch: %s: %s\n", what, fl_last_error());
    return 1;
}

/* The first attempt's rank 1 of a restart measurement: records the time and dies. */
static void maybe_die(int rank)
{
    const char *kill_file = getenv("FLEET_BENCH_KILL_FILE"), *attempt = getenv("PADDLE_RESTART_COUNT");
    if (!kill_file || rank != 1 || (attempt && strcmp(attempt, "0") != 0)) return;
    FILE *k = fopen(kill_file, "w");
    if (k) {
        fprintf(k, "%.1f\n", since_t0_ms());
        fclose(k);
    }
    raise(SIGKILL);
}

static int restarted(void)
{
    const char *attempt = getenv("PADDLE_RESTART_COUNT");
    return getenv("FLEET_BENCH_KILL_FILE") && attempt && strcmp(attempt, "0") != 0;
}

static void phases(const char *label, const char *const *name, const double *ms, int n)
{
    for (int i = 0; i < n; i++)
        if (ms[i] >= 0) printf("R\trestarted.%s.%s_ms\t%.1f\tms\n", label, name[i], ms[i]);
}

static int run_ps(const char *label, double t_start)
{
    const char *ckpt = getenv("FLEET_BENCH_CKPT");
    const char *rows_env = getenv("FLEET_BENCH_ROWS");
    int B = rows_env ? atoi(rows_env) : 20000;
    if (!ckpt || B < 1) {
        fprintf(stderr, "bench_launch ps: set FLEET_BENCH_CKPT (a directory) and FLEET_BENCH_ROWS >= 1\n");
        return 1;
    }
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(64), FL_FLOAT32, 0);
    fl_var *id = fl_layer_data(p, "id", FL_SHAPE(1), FL_INT64, 0);
    fl_embedding_attr ea;
    memset(&ea, 0, sizeof ea);
    ea.is_sparse = ea.is_distributed = 1;
    ea.param.name = "emb";
    fl_var *e = x && id ? fl_layer_embedding(id, PS_VOCAB, PS_DIM, &ea) : NULL;
    fl_var *h = e ? fl_layer_fc(FL_VARS(x, e), 64, "relu") : NULL;
    fl_var *y = h ? fl_layer_fc(FL_VARS(h), 1, NULL) : NULL;
    fl_var *loss = y ? fl_layer_mean(y) : NULL;
    fleet_strategy s = fleet_strategy_default();
    fleet_t *f = loss ? fleet_init(NULL, &s) : NULL;
    fl_opt *o = f ? fleet_distributed_optimizer(f, fl_opt_adam(0.001f, 0.9f, 0.999f, 1e-8f), NULL) : NULL;
    if (!o || fl_opt_minimize(o, loss) != FL_OK) return fail("building the model");
    if (fleet_is_server(f)) {
        char dir[4096];
        int from = fleet_checkpoint_latest(ckpt, dir, sizeof dir, NULL) == FL_OK;
        if (fleet_init_server(f, from ? dir : NULL) != FL_OK || fleet_run_server(f) != FL_OK) return fail("server");
        fleet_free(f);
        return 0;
    }
    double t_init = since_t0_ms();
    fl_exe *ex = fl_exe_create(NULL);
    if (fleet_init_worker(f) != FL_OK) return fail("fleet_init_worker");
    double t_conn = since_t0_ms();
    if (fl_exe_run(ex, fl_prog_startup(p), NULL, 0, NULL, 0, NULL) != FL_OK) return fail("startup");
    fleet_checkpoint_pos pos;
    int st = fleet_load_checkpoint(f, ex, ckpt, p, &pos);
    if (st != FL_OK && st != FL_ENOTFOUND) return fail("fleet_load_checkpoint");
    double t_load = since_t0_ms();
    int rank = fleet_worker_index(f);
    float *xs = calloc((size_t)B * 64, sizeof *xs);
    int64_t *ids = malloc((size_t)B * sizeof *ids);
    if (!xs || !ids) return fail("out of memory");
    for (int i = 0; i < B; i++) ids[i] = ((int64_t)i * 7919 + rank) % PS_VOCAB;
    fl_tensor *xt = fl_tensor_from_data(FL_FLOAT32, 2, (const int64_t[]){B, 64}, xs);
    fl_tensor *it = fl_tensor_from_data(FL_INT64, 2, (const int64_t[]){B, 1}, ids);
    fl_feed feed[2] = {{"x", xt}, {"id", it}};
    if (fl_exe_run(ex, p, feed, 2, NULL, 0, NULL) != FL_OK) return fail("the first step");
    double t_step = since_t0_ms(), t_step2 = -1;
    if (restarted() && fl_exe_run(ex, p, feed, 2, NULL, 0, NULL) != FL_OK) return fail("the second step");
    if (restarted()) t_step2 = since_t0_ms();
    if (rank == 0 && !restarted()) printf("R\t%s.first_step_ms\t%.1f\tms\n", label, t_step);
    if (rank == 0 && restarted()) {
        const char *name[] = {"start", "init", "connect", "load", "first_step", "second_step"};
        phases(label, name, (const double[]){t_start, t_init, t_conn, t_load, t_step, t_step2}, 6);
    }
    fflush(stdout);
    if (getenv("FLEET_BENCH_KILL_FILE") && !restarted()) {
        fleet_checkpoint_pos save = {0, 0, 0, 1};
        if (fleet_save_checkpoint(f, ex, ckpt, p, &save, 2) != FL_OK) return fail("fleet_save_checkpoint");
        maybe_die(rank);
        sleep(60); /* rank 0: fleetrun stops it when rank 1 dies */
        return 1;
    }
    if (fleet_stop_worker(f) != FL_OK) return fail("fleet_stop_worker");
    fl_tensor_free(xt);
    fl_tensor_free(it);
    free(xs);
    free(ids);
    fl_exe_free(ex);
    fl_opt_free(o);
    fl_prog_free(p);
    fleet_free(f);
    return 0;
}

int main(int argc, char **argv)
{
    double t_start = since_t0_ms();
    const char *label = argc > 1 ? argv[1] : "launch";
    if (!strcmp(label, "ps")) return run_ps(label, t_start);
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(8), FL_FLOAT32, 0);
    fl_var *y = x ? fl_layer_fc(FL_VARS(x), 1, NULL) : NULL;
    fl_var *loss = y ? fl_layer_mean(y) : NULL;
    fleet_t *f = loss ? fleet_init_collective(NULL, NULL) : NULL;
    fl_opt *o = f ? fleet_distributed_optimizer(f, fl_opt_sgd(0.01f), NULL) : NULL;
    fl_exe *e = fl_exe_create(NULL);
    float xs[4 * 8] = {0};
    fl_tensor *xt = fl_tensor_from_data(FL_FLOAT32, 2, (const int64_t[]){4, 8}, xs);
    fl_feed feed[1] = {{"x", xt}};
    if (!o || fl_opt_minimize(o, loss) != FL_OK) return fail("building the model");
    double t_init = since_t0_ms();
    if (fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL) != FL_OK ||
        fl_exe_run(e, p, feed, 1, NULL, 0, NULL) != FL_OK)
        return fail("the first step");
    double ms = since_t0_ms();
    if (fleet_worker_index(f) == 0 && !restarted()) printf("R\t%s.first_step_ms\t%.1f\tms\n", label, ms);
    if (fleet_worker_index(f) == 0 && restarted()) {
        const char *name[] = {"start", "init", "first_step"};
        phases(label, name, (const double[]){t_start, t_init, ms}, 3);
    }
    fflush(stdout);
    maybe_die(fleet_worker_index(f)); /* the restart measurement */
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_opt_free(o);
    fl_prog_free(p);
    fleet_free(f);
    return 0;
}
