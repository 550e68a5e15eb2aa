/*
 * Quick start, parameter-server training: the seed's distributed_train.py.  Servers hold
 * the parameters of the same MLP as local_train.c and apply SGD; workers compute
 * gradients on their own data.  The lines marked "+" are all that differ from
 * local_train.c.
 *
 *   fleetrun --server_num 2 --worker_num 2 build/examples/quick_start/distributed_train [steps] [mode] [ckpt_dir]
 *
 * steps: default 1001, as the seed.  mode: sync (a_sync=false), async (Paddle 2.x's
 * default strategy: a_sync=true) or geo (a_sync=true, k_steps=100); default async.
 * ckpt_dir (optional, "-" for none): a checkpoint for restart every 100 steps; started
 * again (e.g. by `fleetrun --max_restart 1`), the job resumes from the newest one.
 * Run without fleetrun it trains as one local worker.
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 1001;
    const char *mode = argc > 2 ? argv[2] : "async";
    const char *ckpt = argc > 3 && strcmp(argv[3], "-") ? argv[3] : NULL;

    fl_prog *prog = fl_prog_create();
    fl_model_mlp_config cfg = fl_model_mlp_default(); /* x[32], y[1]: the seed's nets.py */
    fl_model_mlp net;
    if (fl_model_mlp_build(prog, &cfg, &net) != FL_OK) {
        fprintf(stderr, "building the model failed: %s\n", fl_last_error());
        return 1;
    }
    fl_var *cost = net.loss;

    fl_opt *optimizer = fl_opt_sgd(0.01f);
    fleet_strategy strategy = fleet_strategy_default();         /* + */
    if (fleet_strategy_set_ps_mode(&strategy, mode) != FL_OK) { /* sync, half_async, async, geo */
        fprintf(stderr, "mode: %s\n", fl_last_error());
        return 1;
    }
    fleet_t *fleet = fleet_init(NULL, &strategy); /* role from the environment  + */
    if (!fleet) {
        fprintf(stderr, "fleet_init: %s\n", fl_last_error());
        return 1;
    }
    optimizer = fleet_distributed_optimizer(fleet, optimizer, NULL); /* + */
    if (!optimizer) { /* print the first error: later calls would only see a NULL optimizer */
        fprintf(stderr, "fleet_distributed_optimizer: %s\n", fl_last_error());
        return 1;
    }
    if (fl_opt_minimize(optimizer, cost) != FL_OK) {
        fprintf(stderr, "building the model failed: %s\n", fl_last_error());
        return 1;
    }

    if (fleet_is_server(fleet)) { /* + */
        char dir[4096];           /* restarted: from the newest checkpoint's tables */
        int from = ckpt && fleet_checkpoint_latest(ckpt, dir, sizeof dir, NULL) == FL_OK;
        if (fleet_init_server(fleet, from ? dir : NULL) != FL_OK || fleet_run_server(fleet) != FL_OK) {
            fprintf(stderr, "server: %s\n", fl_last_error());
            return 1;
        }
    } else {
        if (fleet_init_worker(fleet) != FL_OK) { /* + */
            fprintf(stderr, "fleet_init_worker: %s\n", fl_last_error());
            return 1;
        }
        fl_exe *exe = fl_exe_create(NULL);
        if (!exe || fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL) != FL_OK) {
            fprintf(stderr, "startup failed: %s\n", fl_last_error());
            return 1;
        }
        fleet_checkpoint_pos pos = {0, 0, 0, 0};
        int st = ckpt ? fleet_load_checkpoint(fleet, exe, ckpt, prog, &pos) : FL_ENOTFOUND;
        if (st != FL_OK && st != FL_ENOTFOUND) {
            fprintf(stderr, "fleet_load_checkpoint: %s\n", fl_last_error());
            return 1;
        }
        batch_data data = {0};
        for (int i = (int)pos.step; i < steps; i++) {
            /* each worker reads its own data: seed by step and worker */
            gen_data(&data, 128, (unsigned)(i * fleet_worker_num(fleet) + fleet_worker_index(fleet)));
            fl_feed feed[] = {{"x", data.x}, {"y", data.y}};
            const char *fetch[] = {fl_var_name(cost)};
            fl_tensor *cost_val;
            if (fl_exe_run(exe, prog, feed, 2, fetch, 1, &cost_val) != FL_OK) {
                fprintf(stderr, "step %d failed: %s\n", i, fl_last_error());
                return 1;
            }
            printf("worker_index: %d, step%d cost = %f\n", fleet_worker_index(fleet), i, fl_tensor_f32(cost_val)[0]);
            pos.step = i + 1;
            if (ckpt && pos.step % 100 == 0 && fleet_save_checkpoint(fleet, exe, ckpt, prog, &pos, 2) != FL_OK) {
                fprintf(stderr, "fleet_save_checkpoint: %s\n", fl_last_error());
                return 1;
            }
        }
        if (fleet_stop_worker(fleet) != FL_OK) { /* + */
            fprintf(stderr, "fleet_stop_worker: %s\n", fl_last_error());
            return 1;
        }
        batch_data_free(&data);
        fl_exe_free(exe);
    }
    fl_opt_free(optimizer);
    fl_prog_free(prog);
    fleet_free(fleet); /* + */
    return 0;
}
