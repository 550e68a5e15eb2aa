/*
 * The seed's fleet-lightning example (ResNet50, collective, Momentum from configs.lr and
 * configs.momentum, 30 epochs over a loader) in C, line for line; Fashion-MNIST stands in
 * for ImageNet (1 x 28 x 28 images, 10 classes), read by loader.h.
 *
 *   build/examples/lightning/train --max_steps 2                      (one local trainer)
 *   fleetrun --nproc_per_node 2 build/examples/lightning/train --width 16 --batch_size 32
 *
 * Options: fl_app_parse_train_configs (fleet-lightning's, e.g. --lr, --momentum,
 * --batch_size, --width, --max_steps per epoch, --train_data DIR, --config FILE).
 */
#include <fleet.h>
#include <stdio.h>

#include "loader.h"

int main(int argc, char **argv)
{
    fl_app_config configs;
    if (fl_app_parse_train_configs(argc, argv, fl_app_find("resnet"), &configs) != FL_OK) goto fail;

    fleet_role *role;
    if (fleet_role_from_env(1, &role) != FL_OK) goto fail; /* PaddleCloudRoleMaker(is_collective=True) */
    fleet_t *fleet = fleet_init_collective(role, NULL);
    if (!fleet) goto fail;

    fl_prog *main_program = fl_prog_create();
    fl_model_resnet_config resnet50 = fl_model_resnet50(); /* lightning.applications.Resnet50() */
    resnet50.channels = 1, resnet50.height = resnet50.width = 28, resnet50.num_classes = 10;
    resnet50.base_filters = configs.width;
    fl_model_resnet model;
    if (fl_model_resnet_build(main_program, &resnet50, &model) != FL_OK) goto fail;

    loader *ld = load_fmnist_from_dir(configs.train_data, &configs, fleet);
    if (!ld) return 1;

    fl_opt *optimizer = fl_opt_momentum((float)configs.lr, (float)configs.momentum, 0);
    optimizer = fleet_distributed_optimizer(fleet, optimizer, NULL);
    if (!optimizer || fl_opt_minimize(optimizer, model.loss) != FL_OK) goto fail;

    fl_exe *exe = fl_exe_create(NULL);
    if (fl_exe_run(exe, fl_prog_startup(main_program), NULL, 0, NULL, 0, NULL) != FL_OK) goto fail;

    const char *fetch_list[] = {fl_var_name(model.loss)};
    int epoch = 30;
    for (int i = 0; i < epoch; i++) {
        fl_tensor *cost_val = NULL;
        for (fl_feed *data; (data = loader_next(ld));)
            if (fl_exe_run(exe, main_program, data, 2, fetch_list, 1, &cost_val) != FL_OK) goto fail;
        if (cost_val) printf("epoch %d: loss %.4f\n", i + 1, fl_tensor_f32(cost_val)[0]);
    }
    loader_free(ld);
    fl_exe_free(exe);
    fl_opt_free(optimizer);
    fl_prog_free(main_program);
    fleet_free(fleet);
    return 0;
fail:
    fprintf(stderr, "lightning: %s\n", fl_last_error());
    return 1;
}
