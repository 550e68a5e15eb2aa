/*
 * bench_images.c - the JPEG input pipeline (fleet/data.h's image reader).
 *
 * usage: bench_images decode --data PATH [--threads T] [--crop C] [--batch B] [--images N]
 *                            [--eval 0|1] [--dct-scale 0|1]
 *        bench_images step --data PATH [--depth D] [--width W] [--batch B] [--crop C]
 *                          [--threads T] [--steps N] [--rounds R]
 *   decode  images/s of the train transform (decode, random resized crop, flip, normalise;
 *           --eval 1: the eval transform, shorter side to crop * 8 / 7 then the centre crop)
 *           with T decode threads over the first N images of an epoch (the whole set if it is
 *           smaller), per thread and per CPU-second of the process; --dct-scale 0 decodes every JPEG at full size (default 1:
 *           at 1/2, 1/4 or 1/8 when the crop allows it).  bench/images_torch.py measures
 *           torchvision's ImageFolder + DataLoader on the same files (bench/bench_images.sh
 *           runs both).
 *   step    one ResNet training step (fl_exe_run with a fetched loss) fed from the reader, against
 *           the same step fed a batch held in memory: R rounds, each N steps of one then N of the
 *           other (alternating which goes first), medians of the per-step times; the ratio is
 *           the share of the step that the input pipeline adds (the target is within 5%).
 * Output: "R<TAB>key<TAB>value<TAB>unit" lines (the format of shared/peers).
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define CLI_NAME "bench_images"
#define CLI_HELP_HINT                                                                                             \
    "usage: bench_images decode|step --data PATH [--threads T] [--crop C] [--batch B] [--images N] [--eval 0|1] " \
    "[--dct-scale 0|1] [--depth D] [--width W] [--steps N] [--rounds R]"
#include "bench_args.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU seconds of the process (all threads, user + system). */
static double cpu_now(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)u.ru_stime.tv_usec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die_fl(const char *what) { cli_die(1, "%s: %s", what, fl_last_error()); }

static fl_data_image_reader *open_reader(const char *data, int threads, int crop, int batch, int eval, int dct_scale)
{
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    o.threads = threads;
    o.prefetch = 2 * threads;
    o.crop = crop;
    o.batch_size = batch;
    o.train = !eval;
    o.resize = crop * 8 / 7;
    o.dct_scale = dct_scale;
    o.shuffle = 1;
    o.seed = 7;
    fl_data_image_reader *r = fl_data_image_reader_create(data, &o);
    if (!r) die_fl("fl_data_image_reader_create");
    return r;
}

static void bench_decode(const char *data, int threads, int crop, int batch, int64_t images, int eval, int dct_scale)
{
    fl_data_image_reader *r = open_reader(data, threads, crop, batch, eval, dct_scale);
    float *x = malloc(sizeof(float) * 3 * (size_t)crop * crop * (size_t)batch);
    int64_t *y = malloc(sizeof(int64_t) * (size_t)batch);
    if (!x || !y) cli_die(1, "out of memory");
    if (fl_data_image_reader_begin(r, 0)) die_fl("begin");
    int64_t done = 0;
    int n;
    const double t0 = now(), c0 = cpu_now();
    while (done < images && (n = fl_data_image_reader_next(r, x, y)) > 0) done += n;
    const double dt = now() - t0, dc = cpu_now() - c0;
    if (done == 0) die_fl("fl_data_image_reader_next");
    const char *tf = eval ? "eval" : "train";
    printf("# %lld images, %d decode thread(s), %s transform to %d x %d, DCT scaling %s, %.2f s\n", (long long)done,
           threads, tf, crop, crop, dct_scale ? "on" : "off", dt);
    printf("R\tfleet_%s_dct%d_images_per_s_t%d\t%.1f\timages/s\n", tf, dct_scale, threads, (double)done / dt);
    printf("R\tfleet_%s_dct%d_images_per_s_per_thread_t%d\t%.1f\timages/s\n", tf, dct_scale, threads,
           (double)done / dt / threads);
    /* on a loaded machine the wall clock shows the share of the cores the threads got; the CPU
     * time shows what an image costs (threads that contend would raise it) */
    printf("R\tfleet_%s_dct%d_images_per_cpu_s_t%d\t%.1f\timages/s\n", tf, dct_scale, threads, (double)done / dc);
    free(x);
    free(y);
    fl_data_image_reader_free(r);
}

static void bench_step(const char *data, int threads, int crop, int batch, int depth, int width, int steps, int rounds)
{
    fl_data_image_reader *r = open_reader(data, threads, crop, batch, 0, 1);
    fl_model_resnet_config c = fl_model_resnet50();
    c.depth = depth;
    c.base_filters = width;
    c.height = c.width = crop;
    c.imagenet_stem = crop >= 64;
    c.num_classes = fl_data_image_reader_num_classes(r);
    fl_prog *p = fl_prog_create();
    fl_model_resnet m;
    if (fl_model_resnet_build(p, &c, &m)) die_fl("fl_model_resnet_build");
    fl_opt *o = fl_opt_momentum(0.01f, 0.9f, 0);
    if (fl_opt_minimize(o, m.loss)) die_fl("minimize");
    fl_exe *e = fl_exe_create(NULL);
    if (fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL)) die_fl("startup");
    const int64_t xs[4] = {batch, 3, crop, crop}, ys[2] = {batch, 1};
    fl_tensor *x = fl_tensor_create(FL_FLOAT32, 4, xs), *y = fl_tensor_create(FL_INT64, 2, ys);
    fl_tensor *mx = fl_tensor_create(FL_FLOAT32, 4, xs), *my = fl_tensor_create(FL_INT64, 2, ys);
    const char *fetch[] = {fl_var_name(m.loss)};
    int epoch = 0;
    if (fl_data_image_reader_begin(r, epoch)) die_fl("begin");
    /* the in-memory batch: the reader's first one */
    if (fl_data_image_reader_next(r, fl_tensor_f32(mx), fl_tensor_i64(my)) != batch)
        cli_die(1, "%s holds fewer than %d images", data, batch);
    double *t_mem = malloc(sizeof(double) * (size_t)steps * rounds),
           *t_jpg = malloc(sizeof(double) * (size_t)steps * rounds);
    int nm = 0, nj = 0;
    for (int round = -1; round < rounds; round++) { /* round -1: warm-up, not counted */
        for (int half = 0; half < 2; half++) {
            const int from_reader = (half + round + 1) % 2;
            for (int s = 0; s < steps; s++) {
                const double t0 = now();
                fl_feed feed[2] = {{"img", mx}, {"label", my}};
                if (from_reader) {
                    int n = fl_data_image_reader_next(r, fl_tensor_f32(x), fl_tensor_i64(y));
                    if (n < batch) { /* end of an epoch (or its last partial batch): the next one */
                        if (n < 0 || fl_data_image_reader_begin(r, ++epoch)) die_fl("reader");
                        n = fl_data_image_reader_next(r, fl_tensor_f32(x), fl_tensor_i64(y));
                        if (n != batch) die_fl("reader");
                    }
                    feed[0].value = x;
                    feed[1].value = y;
                }
                fl_tensor *out;
                if (fl_exe_run(e, p, feed, 2, fetch, 1, &out)) die_fl("fl_exe_run");
                const double dt = now() - t0;
                if (round >= 0) {
                    if (from_reader) t_jpg[nj++] = dt;
                    else t_mem[nm++] = dt;
                }
            }
        }
    }
    qsort(t_mem, (size_t)nm, sizeof *t_mem, cmp_d);
    qsort(t_jpg, (size_t)nj, sizeof *t_jpg, cmp_d);
    const double mm = t_mem[nm / 2], mj = t_jpg[nj / 2];
    printf("# ResNet-%d width %d, batch %d of %d x %d, %d decode thread(s); %d rounds of %d steps each way\n", depth, width,
           batch, crop, crop, threads, rounds, steps);
    printf("R\tstep_ms_memory\t%.2f\tms\n", 1e3 * mm);
    printf("R\tstep_ms_jpeg\t%.2f\tms\n", 1e3 * mj);
    printf("R\tstep_jpeg_over_memory\t%.4f\tratio\n", mj / mm);
    printf("R\timages_per_s_jpeg\t%.1f\timages/s\n", batch / mj);
    free(t_mem);
    free(t_jpg);
    fl_tensor_free(x);
    fl_tensor_free(y);
    fl_tensor_free(mx);
    fl_tensor_free(my);
    fl_exe_free(e);
    fl_opt_free(o);
    fl_prog_free(p);
    fl_data_image_reader_free(r);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "decode") && strcmp(argv[1], "step"))) cli_die(2, "expected decode or step");
    const char *data = NULL;
    int threads = 1, crop = 224, batch = 32, depth = 50, width = 64, steps = 5, rounds = 3, eval = 0, dct_scale = 1;
    int64_t images = 2000;
    const bench_opt opts[] = {{"data", BA_STR, &data},   {"threads", BA_INT, &threads},    {"crop", BA_INT, &crop},
                              {"batch", BA_INT, &batch}, {"images", BA_I64, &images},      {"depth", BA_INT, &depth},
                              {"width", BA_INT, &width}, {"steps", BA_INT, &steps},        {"rounds", BA_INT, &rounds},
                              {"eval", BA_INT, &eval},   {"dct-scale", BA_INT, &dct_scale}};
    bench_args(argc, argv, 2, opts, BA_COUNT(opts), NULL, NULL);
    if (!data) cli_die(2, "--data PATH is required (a list file or a directory of class folders)");
    if (threads < 1 || crop < 1 || batch < 1 || images < 1 || steps < 1 || rounds < 1)
        cli_die(2, "--threads, --crop, --batch, --images, --steps and --rounds must be >= 1");
    if ((eval != 0 && eval != 1) || (dct_scale != 0 && dct_scale != 1)) cli_die(2, "--eval and --dct-scale take 0 or 1");
    if (!strcmp(argv[1], "decode")) bench_decode(data, threads, crop, batch, images, eval, dct_scale);
    else bench_step(data, threads, crop, batch, depth, width, steps, rounds);
    return 0;
}
