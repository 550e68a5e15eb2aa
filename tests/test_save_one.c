/* test_save_one.c - fleet_save_persistables_alone / fleet_save_inference_model_alone on a
 * local worker: they write what fl_io_save_* write, and their argument errors name the
 * argument.  The parameter-server and collective paths run under fleetrun in
 * tests/python/test_feeding.py (one worker saves, the other never calls). */
#include <sys/stat.h>

#include "testhelp.h"

static int exists(const char *dir, const char *file)
{
    char p[1024];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, file);
    return stat(p, &st) == 0;
}

TEST(a_local_worker_saves_alone)
{
    unsetenv("PADDLE_TRAINER_ID"), unsetenv("TRAINING_ROLE"), unsetenv("PADDLE_TRAINERS_NUM");
    unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("SLURM_PROCID"), unsetenv("PMI_SIZE");
    fleet_t *f = fleet_init(NULL, NULL);
    CHECK(f && !fleet_is_distributed(f));
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", 1, (const int64_t[]){3}, FL_FLOAT32, 0);
    fl_var *y = fl_layer_fc(FL_VARS(x), 2, NULL);
    CHECK(y != NULL);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    char dir[32], sub[64];
    th_mktemp(dir, sizeof dir, "fl_save_one");
    snprintf(sub, sizeof sub, "%s/persist", dir);
    CHECK_OK(fleet_save_persistables_alone(f, e, sub, p));
    CHECK(exists(sub, "persistables.safetensors"));
    snprintf(sub, sizeof sub, "%s/infer", dir);
    const char *feeds[1] = {"x"};
    CHECK_OK(fleet_save_inference_model_alone(f, e, sub, feeds, 1, (fl_var *const[]){y}, 1, p));
    CHECK(exists(sub, "__model__"));

    CHECK(fleet_save_persistables_alone(NULL, e, sub, p) == FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "fleet is NULL");
    CHECK(fleet_save_persistables_alone(f, NULL, sub, p) == FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "executor is NULL");
    CHECK(fleet_save_inference_model_alone(f, e, "", feeds, 1, (fl_var *const[]){y}, 1, p) == FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "fleet_save_inference_model_alone: directory");
    CHECK(fleet_save_persistables_alone(f, e, sub, NULL) == FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "program is NULL");
    th_rmtree(dir);
    fl_exe_free(e);
    fl_prog_free(p);
    fleet_free(f);
}

TEST_MAIN(T(a_local_worker_saves_alone))
