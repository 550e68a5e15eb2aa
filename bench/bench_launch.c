/*
 * bench_launch.c - the probe of bench/launch_peers.sh: a collective Fleet job's time from
 * launch to its first training step.  Each rank takes its role from the launcher's
 * environment (fleet_init(NULL): fleetrun, mpirun or srun), builds a one-layer model,
 * minimises it (the ring rendezvous happens here) and runs one step, whose gradient
 * allreduce makes every rank wait for the slowest.  Rank 0 then prints the time since
 * FLEET_BENCH_T0_NS (CLOCK_REALTIME, set by the script just before it starts the
 * launcher) as "R\t<label>.first_step_ms\t<ms>\tms".  With FLEET_BENCH_KILL_FILE set, rank 1
 * of the first attempt (PADDLE_RESTART_COUNT unset or 0) then kills itself, for the restart
 * time under `fleetrun --max_restart`.
 *
 *   FLEET_BENCH_T0_NS=$(date +%s%N) fleetrun --nproc_per_node 4 bench_launch LABEL
 */
#include <fleet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double since_t0_ms(void)
{
    const char *t0 = getenv("FLEET_BENCH_T0_NS");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double now = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
    return t0 ? now - (double)strtoll(t0, NULL, 10) / 1e6 : -1.0;
}

int main(int argc, char **argv)
{
    const char *label = argc > 1 ? argv[1] : "launch";
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
    if (!o || fl_opt_minimize(o, loss) != FL_OK || fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL) != FL_OK ||
        fl_exe_run(e, p, feed, 1, NULL, 0, NULL) != FL_OK) {
        fprintf(stderr, "bench_launch: %s\n", fl_last_error());
        return 1;
    }
    double ms = since_t0_ms();
    if (fleet_worker_index(f) == 0) printf("R\t%s.first_step_ms\t%.1f\tms\n", label, ms);
    fflush(stdout);
    /* the restart measurement: in the first attempt, rank 1 dies after its first step and
     * leaves the time of its death (ms since FLEET_BENCH_T0_NS) in FLEET_BENCH_KILL_FILE */
    const char *kill_file = getenv("FLEET_BENCH_KILL_FILE"), *attempt = getenv("PADDLE_RESTART_COUNT");
    if (kill_file && fleet_worker_index(f) == 1 && (!attempt || !strcmp(attempt, "0"))) {
        FILE *k = fopen(kill_file, "w");
        if (k) {
            fprintf(k, "%.1f\n", since_t0_ms());
            fclose(k);
        }
        raise(SIGKILL);
    }
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_opt_free(o);
    fl_prog_free(p);
    fleet_free(f);
    return 0;
}
