/*
 * Quick start, local training: the seed's MLP on generated data.
 *
 *   x[32] -> fc128 tanh -> fc128 tanh -> fc2 softmax, cross-entropy, mean, SGD 0.01
 *
 * Usage: local_train [steps] (default 1001, as the seed)
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
        gen_data(&data, 128, (unsigned)i);
        fl_feed feed[] = {{"x", data.x}, {"y", data.y}};
        const char *fetch[] = {fl_var_name(cost)};
        fl_tensor *cost_val;
        if (fl_exe_run(exe, prog, feed, 2, fetch, 1, &cost_val) != FL_OK) {
            fprintf(stderr, "step %d failed: %s\n", i, fl_last_error());
            return 1;
        }
        if (i % 100 == 0 || i == steps - 1) printf("step%d cost=%f\n", i, fl_tensor_f32(cost_val)[0]);
    }
    batch_data_free(&data);
    fl_exe_free(exe);
    fl_opt_free(optimizer);
    fl_prog_free(prog);
    return 0;
}
