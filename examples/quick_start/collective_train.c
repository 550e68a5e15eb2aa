/*
 * Quick start, collective training: the seed's MLP, data-parallel over the trainers that
 * fleetrun starts.  The lines marked "+" are all that differ from local_train.c.
 *
 *   fleetrun --nproc_per_node 2 build/examples/quick_start/collective_train [steps]
 *
 * Run without fleetrun it trains as one local worker.
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>

#include "data.h"

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 1001;

    fl_prog *prog = fl_prog_create();
    fl_model_mlp_config cfg = fl_model_mlp_default(); /* x[32], y[1]: the seed's nets.py */
    fl_model_mlp net;
    if (fl_model_mlp_build(prog, &cfg, &net) != FL_OK) {
        fprintf(stderr, "building the model failed: %s\n", fl_last_error());
        return 1;
    }
    fl_var *cost = net.loss;

    fl_opt *optimizer = fl_opt_sgd(0.01f);
    fleet_role *role;                                /* + */
    if (fleet_role_paddlecloud(1, &role) != FL_OK) { /* + */
        fprintf(stderr, "%s\n", fl_last_error());
        return 1;
    }
    fleet_t *fleet = fleet_init_collective(role, NULL); /* + */
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

    fl_exe *exe = fl_exe_create(NULL);
    if (!exe || fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL) != FL_OK) {
        fprintf(stderr, "startup failed: %s\n", fl_last_error());
        return 1;
    }
    batch_data data = {0};
    for (int i = 0; i < steps; i++) {
        /* each trainer reads its own data: seed by step and trainer */
        gen_data(&data, 128, (unsigned)(i * fleet_worker_num(fleet) + fleet_worker_index(fleet)));
        fl_feed feed[] = {{"x", data.x}, {"y", data.y}};
        const char *fetch[] = {fl_var_name(cost)};
        fl_tensor *cost_val;
        if (fl_exe_run(exe, prog, feed, 2, fetch, 1, &cost_val) != FL_OK) {
            fprintf(stderr, "step %d failed: %s\n", i, fl_last_error());
            return 1;
        }
        if (i % 100 == 0 || i == steps - 1)
            printf("worker_index: %d, step%d cost = %f\n", fleet_worker_index(fleet), i, fl_tensor_f32(cost_val)[0]);
    }
    batch_data_free(&data);
    fl_exe_free(exe);
    fl_opt_free(optimizer);
    fl_prog_free(prog);
    fleet_free(fleet); /* + */
    return 0;
}
