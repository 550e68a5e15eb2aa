/*
 * bench_cnn_ddp.c - training images/s of ResNet-50 (fl_model_resnet50) or VGG-16
 * (fl_model_vgg16) on a synthetic in-memory batch, on one process or data-parallel on the
 * collective processes fleetrun starts (fleet_init_collective: each rank trains its share of
 * the global batch, gradients allreduced every step).
 *
 * usage: bench_cnn_ddp [--model resnet50|vgg16] [--batch GLOBAL] [--steps N] [--warmup N] [--size S] [--v1 0|1]
 *   one process:    FLEET_NUM_THREADS=2 bench_cnn_ddp --batch 8
 *   two processes:  FLEET_NUM_THREADS=1 fleetrun --nproc_per_node 2 bench_cnn_ddp --batch 8
 * ResNet-50 is v1.5 (stride on each downsampling bottleneck's 3x3, as torchvision's resnet50);
 * --v1 1 puts it on the first 1x1 (stride_in_1x1, ResNet v1; said in the '# ' line).
 * Momentum 0.9 lr 0.01 (VGG: dropout 0.5 as built); images uniform [-1, 1) (each rank its
 * own), labels (i * 7919) % 1000.  Each rank times whole steps (a step ends after its
 * allreduce, so the ranks keep in step); rank 0 prints the median step's images/s of the
 * global batch as "R<TAB>key<TAB>value<TAB>unit" with key
 * cnn.MODEL.sSIZE.bGLOBAL.pRANKS.images_per_s, and '# ' lines (ISA, step times, the CPU time
 * other processes took during the timed steps).
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLI_NAME "bench_cnn_ddp"
#define CLI_HELP_HINT \
    "usage: bench_cnn_ddp [--model resnet50|vgg16] [--batch GLOBAL] [--steps N] [--warmup N] [--size S] [--v1 0|1]"
#include "bench_args.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_cnn_ddp: %s: %s\n", what, fl_last_error());
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds all processes spent busy (/proc/stat). */
static double sys_busy_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    if (!f) return 0;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]);
    fclose(f);
    return n < 8 ? 0 : (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / 100.0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *model = "resnet50";
    int batch = 8, steps = 3, warmup = 1, size = 224, v1 = 0;
    const bench_opt t[] = {{"model", BA_STR, &model},   {"batch", BA_INT, &batch}, {"steps", BA_INT, &steps},
                           {"warmup", BA_INT, &warmup}, {"size", BA_INT, &size},   {"v1", BA_INT, &v1}};
    bench_args(argc, argv, 1, t, BA_COUNT(t), NULL, NULL);
    if (batch < 1 || steps < 1 || steps > 100 || warmup < 0 || size < 32 || v1 < 0 || v1 > 1)
        cli_die(2, "--batch >= 1, --steps in [1, 100], --warmup >= 0, --size >= 32, --v1 0|1");

    fl_prog *p = fl_prog_create();
    fl_var *loss = NULL;
    const char *in_name = "img", *lab_name = "label";
    int classes = 1000;
    if (!strcmp(model, "resnet50")) {
        fl_model_resnet_config c = fl_model_resnet50();
        c.height = c.width = size;
        c.stride_in_1x1 = v1;
        fl_model_resnet m;
        if (fl_model_resnet_build(p, &c, &m) != FL_OK) die("building resnet50");
        loss = m.loss;
    } else if (!strcmp(model, "vgg16")) {
        fl_model_vgg_config c = fl_model_vgg16();
        c.height = c.width = size;
        fl_model_vgg m;
        if (fl_model_vgg_build(p, &c, &m) != FL_OK) die("building vgg16");
        loss = m.loss;
    } else {
        cli_die(2, "--model must be resnet50 or vgg16, got '%s'", model);
    }
    if (v1 && strcmp(model, "resnet50") != 0) cli_die(2, "--v1 is for --model resnet50");
    fleet_t *f = fleet_init_collective(NULL, NULL);
    if (!f) die("fleet_init_collective");
    const int nranks = fleet_worker_num(f), rank = fleet_worker_index(f);
    if (batch % nranks) cli_die(2, "--batch %d is not a multiple of the %d processes", batch, nranks);
    fl_opt *opt = fleet_distributed_optimizer(f, fl_opt_momentum(0.01f, 0.9f, 0), NULL);
    if (!opt || fl_opt_minimize(opt, loss) != FL_OK) die("minimize");
    fl_exe *e = fl_exe_create(NULL);
    if (!e || fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL) != FL_OK) die("startup");
    if (fleet_init_worker(f) != FL_OK) die("fleet_init_worker");

    const int64_t B = batch / nranks;
    fl_tensor *img = fl_tensor_create(FL_FLOAT32, 4, (const int64_t[]){B, 3, size, size});
    fl_tensor *lab = fl_tensor_create(FL_INT64, 2, (const int64_t[]){B, 1});
    if (!img || !lab) die("tensors");
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(rank + 1);
    for (int64_t i = 0; i < fl_tensor_numel(img); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        fl_tensor_f32(img)[i] = (float)((double)(s >> 40) / (double)(1 << 24) * 2 - 1);
    }
    for (int64_t i = 0; i < B; i++) fl_tensor_i64(lab)[i] = (int64_t)(((rank * B + i) * 7919) % classes);
    fl_feed feed[2] = {{in_name, img}, {lab_name, lab}};
    const char *fetch = fl_var_name(loss);
    double dt[100], busy0 = 0, t_all = 0, lossv = 0;
    for (int i = -warmup; i < steps; i++) {
        if (i == 0) busy0 = sys_busy_s(), t_all = now_s();
        fl_tensor *out;
        const double t0 = now_s();
        if (fl_exe_run(e, p, feed, 2, &fetch, 1, &out) != FL_OK) die("step");
        if (i >= 0) dt[i] = now_s() - t0;
        lossv = fl_tensor_f32(out)[0];
    }
    t_all = now_s() - t_all;
    const double other = (sys_busy_s() - busy0) / t_all;
    qsort(dt, (size_t)steps, sizeof *dt, cmp_d);
    const double med = steps % 2 ? dt[steps / 2] : (dt[steps / 2 - 1] + dt[steps / 2]) / 2;
    if (rank == 0) {
        printf("# %s%s %dx%d, global batch %d on %d process(es) (%lld each), FLEET_NUM_THREADS %s; step median %.3f s "
               "(min %.3f max %.3f); loss %.4f; all processes together kept %.2f cores busy during the timed steps\n",
               model, v1 ? " (v1 strides)" : "", size, size, batch, nranks, (long long)B,
               getenv("FLEET_NUM_THREADS") ? getenv("FLEET_NUM_THREADS") : "-", med, dt[0], dt[steps - 1], lossv, other);
        printf("R\tcnn.%s.s%d.b%d.p%d.images_per_s\t%.3f\timages/s\n", model, size, batch, nranks, batch / med);
        fflush(stdout);
    }
    if (fleet_stop_worker(f) != FL_OK) die("fleet_stop_worker");
    fl_tensor_free(img);
    fl_tensor_free(lab);
    fl_exe_free(e);
    fl_opt_free(opt);
    fl_prog_free(p);
    fleet_free(f);
    return 0;
}
