/*
 * bench_resnet50.c - ResNet-50 (fl_model_resnet50) training and inference images/s on one
 * synthetic in-memory batch, and the convolution primitives of the same network alone.
 *
 * usage: bench_resnet50 [--mode train|eval|prims] [--batch N] [--steps N] [--warmup N]
 *                       [--size S] [--depth D] [--width W] [--amp 0|1] [--v1 0|1]
 *   train  Momentum 0.9 lr 0.01 steps on one random batch (images uniform [-1, 1), labels
 *          uniform over 1000 classes); reports the median step's images/s and the
 *          convolutions' GFLOP/s over the whole step (forward, backward-data where the input
 *          has a gradient, backward-weights; a multiply-add counted as 2), and images per
 *          second of the process's CPU time (images_per_cpu_s: with 1 thread, the figure a
 *          loaded machine disturbs least).
 *   eval   the forward program cloned for test (batch_norm on the moving statistics).
 *   prims  each convolution of the network as bare oneDNN primitives in the layouts oneDNN
 *          picks (no reorders, no other op), each direction by the algorithm the library
 *          would use (FLEET_CONV_ALGO and its rule: direct or Winograd): the time a training
 *          step and a forward pass would take if they were only their convolutions, and their
 *          GFLOP/s: the limit the step's GFLOP/s is measured against.
 * The network is ResNet v1.5 (stride on each downsampling bottleneck's 3x3, as torchvision's
 * resnet50); --v1 1 puts it on the first 1x1 (stride_in_1x1, ResNet v1; keys get ".v1").
 * --amp 1: bfloat16 AMP (fl_amp_decorate_optimizer; prims: bf16 primitives).  Threads:
 * FLEET_NUM_THREADS (1 or 2).  Output: "R<TAB>key<TAB>value<TAB>unit" lines and "# " comments
 * (ISA, kernels, the CPU time other processes took during the timed steps).
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/graph_internal.h"
#include "graph/ops_conv.h"
#include "tensor/dnn_conv.h"
#include "tensor/tensor_internal.h"

#define CLI_NAME "bench_resnet50"
#define CLI_HELP_HINT                                                                                              \
    "usage: bench_resnet50 [--mode train|eval|prims] [--batch N] [--steps N] [--warmup N] [--size S] [--depth D] " \
    "[--width W] [--amp 0|1] [--v1 0|1]"
#include "bench_args.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_resnet50: %s: %s\n", what, fl_last_error());
    exit(1);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* CPU seconds all processes spent busy (/proc/stat), and this process's. */
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

static double own_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One convolution of the network: its geometry and how many times a step runs it. */
typedef struct {
    int64_t c, h, w, m, k, s, p, oh, ow;
    int count, dgrad;
} conv_shape;

/* The conv2d ops of p (forward) and whether their input gets a gradient (conv2d_grad with
 * Input@GRAD); returns the count of distinct shapes in cs[]. */
static int conv_shapes(const fl_prog *p, conv_shape *cs, int max)
{
    int n = 0;
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        if (strcmp(op->def->type, "conv2d") != 0) continue;
        const fl_var *x = op->in[0].vars[0], *f = op->in[1].vars[0], *y = op->out[0].vars[0];
        int dgrad = 0;
        for (int j = i + 1; j < p->nops; j++)
            if (!strcmp(p->ops[j]->def->type, "conv2d_grad") && p->ops[j]->in[0].vars[0] == x &&
                p->ops[j]->in[1].vars[0] == f)
                dgrad = p->ops[j]->out[0].n > 0;
        int64_t st[2] = {1, 1}, pd[2] = {0, 0};
        fl__conv_attr2(op, "strides", 1, st);
        fl__conv_attr2(op, "paddings", 0, pd);
        conv_shape s = {x->shape[1], x->shape[2], x->shape[3], f->shape[0], f->shape[2], st[0],
                        pd[0],       y->shape[2], y->shape[3], 1,           dgrad};
        int k = 0;
        while (k < n && !(cs[k].c == s.c && cs[k].h == s.h && cs[k].m == s.m && cs[k].k == s.k && cs[k].s == s.s &&
                          cs[k].dgrad == s.dgrad))
            k++;
        if (k < n) cs[k].count++;
        else if (n < max) cs[n++] = s;
    }
    return n;
}

static double conv_flops(const conv_shape *s, int64_t batch, int train)
{
    double f = 2.0 * (double)batch * (double)(s->m * s->oh * s->ow) * (double)(s->c * s->k * s->k);
    return s->count * f * (train ? 2 + s->dgrad : 1);
}

typedef struct {
    const char *mode;
    int batch, steps, warmup, size, depth, width, amp, v1;
} opts;

static void run_net(const opts *o)
{
    int train = !strcmp(o->mode, "train");
    fl_prog *p = fl_prog_create();
    fl_model_resnet_config cfg = fl_model_resnet50();
    cfg.height = cfg.width = o->size;
    cfg.depth = o->depth;
    cfg.base_filters = o->width;
    cfg.stride_in_1x1 = o->v1;
    fl_model_resnet net;
    if (fl_model_resnet_build(p, &cfg, &net) != FL_OK) die("building the network");
    fl_opt *opt = NULL;
    const char *fetch = fl_var_name(net.loss);
    fl_prog *run = p;
    if (train) {
        opt = fl_opt_momentum(0.01f, 0.9f, 0);
        fl_amp_opts a = {FL_BFLOAT16};
        if (o->amp && fl_amp_decorate_optimizer(opt, &a) != FL_OK) die("AMP");
        if (fl_opt_minimize(opt, net.loss) != FL_OK) die("minimize");
    } else {
        fl_amp_opts a = {FL_BFLOAT16};
        if (o->amp && fl_amp_decorate(p, &a) < 0) die("AMP");
        if (!(run = fl_prog_clone(p, 1))) die("clone for test");
        fetch = fl_var_name(net.predict);
    }
    fl_exe *e = fl_exe_create(NULL);
    if (!e || fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL) != FL_OK) die("startup");
    int64_t B = o->batch;
    fl_tensor *img = fl_tensor_create(FL_FLOAT32, 4, (const int64_t[]){B, 3, o->size, o->size});
    fl_tensor *lab = fl_tensor_create(FL_INT64, 2, (const int64_t[]){B, 1});
    float *xd = fl_tensor_f32(img);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < fl_tensor_numel(img); i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        xd[i] = (float)((r >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    }
    for (int64_t i = 0; i < B; i++) fl_tensor_i64(lab)[i] = (int64_t)((i * 7919) % cfg.num_classes);
    fl_feed feed[2] = {{cfg.input_name, img}, {cfg.label_name, lab}};
    double *dt = calloc((size_t)o->steps, sizeof *dt), *cpu = calloc((size_t)o->steps, sizeof *cpu), busy0 = 0, own0 = 0;
    float loss = 0;
    for (int i = -o->warmup; i < o->steps; i++) {
        if (i == 0) busy0 = sys_busy_s(), own0 = own_cpu_s();
        fl_tensor *out;
        double t0 = fl__now(), c0 = own_cpu_s();
        if (fl_exe_run(e, run, feed, 2, &fetch, 1, &out) != FL_OK) die("step");
        if (i >= 0) dt[i] = fl__now() - t0, cpu[i] = own_cpu_s() - c0;
        loss = fl_tensor_f32(out)[0];
    }
    double others = sys_busy_s() - busy0 - (own_cpu_s() - own0), wall = 0;
    for (int i = 0; i < o->steps; i++) wall += dt[i];
    conv_shape cs[64];
    int ncs = conv_shapes(p, cs, 64);
    double flops = 0;
    for (int i = 0; i < ncs; i++) flops += conv_flops(&cs[i], B, train);
    double med = median(dt, o->steps);
    char key[96];
    snprintf(key, sizeof key, "resnet%d.%s%s%s.s%d.b%d", o->depth, o->mode, o->amp ? ".bf16" : "", o->v1 ? ".v1" : "",
             o->size, o->batch);
    printf("# %s: step median %.3f s (min %.3f max %.3f), last step's fetched value %g, other processes %.2f cores\n", key,
           med, dt[0], dt[o->steps - 1], (double)loss, wall > 0 ? others / wall : 0.0);
    printf("R\t%s.images_per_s\t%.3f\timages/s\n", key, (double)B / med);
    printf("R\t%s.conv_gflops\t%.1f\tGFLOP/s\n", key, flops / med / 1e9);
    /* images per second of this process's CPU time: with 1 thread on a loaded machine, the
     * figure other processes' share of the cores disturbs least */
    printf("R\t%s.images_per_cpu_s\t%.3f\timages/s\n", key, (double)B / median(cpu, o->steps));
    printf("# %s: convolutions %.2f GFLOP per step (%d distinct shapes)\n", key, flops / 1e9, ncs);
    free(dt);
    free(cpu);
    fl_tensor_free(img);
    fl_tensor_free(lab);
    fl_exe_free(e);
    if (run != p) fl_prog_free(run);
    fl_opt_free(opt);
    fl_prog_free(p);
}

#ifdef FL_HAVE_DNNL
/* The primitive descriptor of direction dir (FL_CONV_*) of convolution d over the "any"
 * descriptors x, w, y (dx, dw: the gradients'), by the algorithm the library's convolutions
 * use (fl__conv_winograd: FLEET_CONV_ALGO and its rule; direct where oneDNN has no Winograd
 * kernel), with a forward hint by the same algorithm for a backward direction. */
static dnnl_primitive_desc_t conv_pd(dnnl_engine_t eng, const fl_conv_desc *d, int dir, const dnnl_memory_desc_t *x,
                                     const dnnl_memory_desc_t *w, const dnnl_memory_desc_t *y, const dnnl_memory_desc_t *dx,
                                     const dnnl_memory_desc_t *dw)
{
    dnnl_dims_t str = {d->sh, d->sw}, pl = {d->ph, d->pw};
    dnnl_dims_t pr = {(d->oh - 1) * d->sh + d->kh - d->h - d->ph, (d->ow - 1) * d->sw + d->kw - d->w - d->pw};
    int wino = fl__conv_winograd(d, dir);
    if (wino < 0) die("FLEET_CONV_ALGO");
    for (int a = wino; a >= 0; a--) {
        dnnl_alg_kind_t alg = a ? dnnl_convolution_winograd : dnnl_convolution_direct;
        dnnl_convolution_desc_t cd;
        dnnl_primitive_desc_t fwd = NULL, pd = NULL;
        dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, alg, x, w, NULL, y, str, pl, pr);
        if (dnnl_primitive_desc_create(&fwd, &cd, NULL, eng, NULL) != dnnl_success) continue;
        if (dir == FL_CONV_FWD) return fwd;
        if (dir == FL_CONV_BWD_DATA) dnnl_convolution_backward_data_desc_init(&cd, alg, dx, w, y, str, pl, pr);
        else dnnl_convolution_backward_weights_desc_init(&cd, alg, x, dw, NULL, y, str, pl, pr);
        dnnl_status_t st = dnnl_primitive_desc_create(&pd, &cd, NULL, eng, fwd);
        dnnl_primitive_desc_destroy(fwd);
        if (st == dnnl_success) return pd;
    }
    die(dir == FL_CONV_FWD        ? "forward descriptor"
        : dir == FL_CONV_BWD_DATA ? "backward-data descriptor"
                                  : "backward-weights descriptor");
    return NULL;
}

/* Median ms of `reps` runs of prim with memories in the layouts its descriptor asks for. */
static double time_prim(dnnl_engine_t eng, dnnl_stream_t st, dnnl_primitive_desc_t pd, const int *args, int nargs, int reps)
{
    static const dnnl_query_t q[] = {dnnl_query_src_md,       dnnl_query_weights_md,      dnnl_query_dst_md,
                                     dnnl_query_diff_src_md,  dnnl_query_diff_weights_md, dnnl_query_diff_dst_md,
                                     dnnl_query_scratchpad_md};
    static const int qa[] = {DNNL_ARG_SRC,          DNNL_ARG_WEIGHTS,  DNNL_ARG_DST,       DNNL_ARG_DIFF_SRC,
                             DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST, DNNL_ARG_SCRATCHPAD};
    dnnl_exec_arg_t ea[8];
    int n = 0;
    for (int a = 0; a < nargs; a++)
        for (int k = 0; k < 7; k++)
            if (qa[k] == args[a]) {
                const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, q[k], 0);
                dnnl_memory_t m = NULL;
                if (dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE) != dnnl_success) die("oneDNN memory");
                void *h = NULL;
                dnnl_memory_get_data_handle(m, &h);
                if (h) memset(h, 0, dnnl_memory_desc_get_size(md));
                ea[n++] = (dnnl_exec_arg_t){args[a], m};
            }
    dnnl_primitive_t prim;
    if (dnnl_primitive_create(&prim, pd) != dnnl_success) die("oneDNN primitive");
    double t[16];
    for (int i = -1; i < reps; i++) {
        double t0 = fl__now();
        dnnl_primitive_execute(prim, st, n, ea);
        dnnl_stream_wait(st);
        if (i >= 0) t[i] = (fl__now() - t0) * 1e3;
    }
    dnnl_primitive_destroy(prim);
    for (int i = 0; i < n; i++) dnnl_memory_destroy(ea[i].memory);
    return median(t, reps);
}

static void run_prims(const opts *o)
{
    fl_prog *p = fl_prog_create();
    fl_model_resnet_config cfg = fl_model_resnet50();
    cfg.height = cfg.width = o->size;
    cfg.depth = o->depth;
    cfg.base_filters = o->width;
    cfg.stride_in_1x1 = o->v1;
    fl_model_resnet net;
    if (fl_model_resnet_build(p, &cfg, &net) != FL_OK) die("building the network");
    fl_opt *opt = fl_opt_sgd(0.01f);
    if (fl_opt_minimize(opt, net.loss) != FL_OK) die("minimize");
    conv_shape cs[64];
    int ncs = conv_shapes(p, cs, 64);
    dnnl_engine_t eng = fl__dnn_enter();
    if (!eng) die("oneDNN engine");
    dnnl_stream_t st;
    if (dnnl_stream_create(&st, eng, dnnl_stream_default_flags) != dnnl_success) die("oneDNN stream");
    dnnl_data_type_t dt = o->amp ? dnnl_bf16 : dnnl_f32;
    double ms[3] = {0, 0, 0}, fl[3] = {0, 0, 0};
    int reps = o->steps < 16 ? o->steps : 15;
    for (int i = 0; i < ncs; i++) {
        const conv_shape *s = &cs[i];
        dnnl_memory_desc_t x, w, y, dx, dw;
        dnnl_dims_t xd = {o->batch, s->c, s->h, s->w}, yd = {o->batch, s->m, s->oh, s->ow}, wd = {s->m, s->c, s->k, s->k};
        fl_conv_desc cd;
        memset(&cd, 0, sizeof cd);
        cd.n = o->batch, cd.c = s->c, cd.h = s->h, cd.w = s->w, cd.m = s->m, cd.kh = cd.kw = s->k, cd.oh = s->oh;
        cd.ow = s->ow, cd.sh = cd.sw = s->s, cd.ph = cd.pw = s->p, cd.dh = cd.dw = cd.g = 1;
        cd.x_type = cd.w_type = o->amp ? FL_BFLOAT16 : FL_FLOAT32;
        dnnl_memory_desc_init_by_tag(&x, 4, xd, dt, dnnl_format_tag_any);
        dnnl_memory_desc_init_by_tag(&y, 4, yd, dt, dnnl_format_tag_any);
        dnnl_memory_desc_init_by_tag(&w, 4, wd, dt, dnnl_format_tag_any);
        dnnl_memory_desc_init_by_tag(&dx, 4, xd, dnnl_f32, dnnl_format_tag_any);
        dnnl_memory_desc_init_by_tag(&dw, 4, wd, dnnl_f32, dnnl_format_tag_any);
        dnnl_primitive_desc_t fwd = conv_pd(eng, &cd, FL_CONV_FWD, &x, &w, &y, &dx, &dw), pd = NULL;
        const char *impl = "?";
        dnnl_primitive_desc_query(fwd, dnnl_query_impl_info_str, 0, &impl);
        double f1 = conv_flops(&(conv_shape){s->c, s->h, s->w, s->m, s->k, s->s, s->p, s->oh, s->ow, 1, 0}, o->batch, 0);
        double t[3] = {time_prim(eng, st, fwd, (const int[]){DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}, 3, reps), 0, 0};
        char impls[160];
        snprintf(impls, sizeof impls, "%s", impl);
        if (s->dgrad) {
            pd = conv_pd(eng, &cd, FL_CONV_BWD_DATA, &x, &w, &y, &dx, &dw);
            dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
            snprintf(impls + strlen(impls), sizeof impls - strlen(impls), " / %s", impl);
            t[1] = time_prim(eng, st, pd, (const int[]){DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST}, 3, reps);
            dnnl_primitive_desc_destroy(pd);
        }
        pd = conv_pd(eng, &cd, FL_CONV_BWD_WEIGHTS, &x, &w, &y, &dx, &dw);
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        snprintf(impls + strlen(impls), sizeof impls - strlen(impls), " / %s", impl);
        t[2] = time_prim(eng, st, pd, (const int[]){DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST}, 3, reps);
        dnnl_primitive_desc_destroy(pd);
        dnnl_primitive_desc_destroy(fwd);
        for (int d = 0; d < 3; d++) {
            ms[d] += s->count * t[d];
            fl[d] += d == 1 && !s->dgrad ? 0 : s->count * f1;
        }
        printf("# conv %lldx%lldx%lld -> %lld k%lld s%lld x%d: fwd %.2f bwd-data %.2f bwd-weights %.2f ms (%s)\n",
               (long long)s->c, (long long)s->h, (long long)s->w, (long long)s->m, (long long)s->k, (long long)s->s,
               s->count, t[0], t[1], t[2], impls);
    }
    char key[96];
    snprintf(key, sizeof key, "resnet%d.prims%s%s.s%d.b%d", o->depth, o->amp ? ".bf16" : "", o->v1 ? ".v1" : "", o->size,
             o->batch);
    double tt = ms[0] + ms[1] + ms[2], ft = fl[0] + fl[1] + fl[2];
    printf(
        "# %s: forward %.1f ms %.1f GFLOP/s, backward-data %.1f ms %.1f GFLOP/s, backward-weights %.1f ms %.1f GFLOP/s\n",
        key, ms[0], fl[0] / ms[0] / 1e6, ms[1], fl[1] / ms[1] / 1e6, ms[2], fl[2] / ms[2] / 1e6);
    printf("R\t%s.train_images_per_s\t%.3f\timages/s\n", key, o->batch / (tt / 1e3));
    printf("R\t%s.eval_images_per_s\t%.3f\timages/s\n", key, o->batch / (ms[0] / 1e3));
    printf("R\t%s.train_gflops\t%.1f\tGFLOP/s\n", key, ft / tt / 1e6);
    printf("R\t%s.fwd_gflops\t%.1f\tGFLOP/s\n", key, fl[0] / ms[0] / 1e6);
    dnnl_stream_destroy(st);
    fl_opt_free(opt);
    fl_prog_free(p);
}
#else
static void run_prims(const opts *o)
{
    (void)o;
    fprintf(stderr, "bench_resnet50: prims needs oneDNN in the build\n");
    exit(1);
}
#endif

int main(int argc, char **argv)
{
    opts o = {"train", 8, 5, 1, 224, 50, 64, 0, 0};
    const bench_opt t[] = {{"mode", BA_STR, &o.mode},     {"batch", BA_INT, &o.batch}, {"steps", BA_INT, &o.steps},
                           {"warmup", BA_INT, &o.warmup}, {"size", BA_INT, &o.size},   {"depth", BA_INT, &o.depth},
                           {"width", BA_INT, &o.width},   {"amp", BA_INT, &o.amp},     {"v1", BA_INT, &o.v1}};
    bench_args(argc, argv, 1, t, BA_COUNT(t), NULL, NULL);
    if (o.batch < 1 || o.steps < 1 || o.warmup < 0 || o.size < 32 || o.width < 1 || o.amp < 0 || o.amp > 1 || o.v1 < 0 ||
        o.v1 > 1)
        cli_die(2, "--batch, --steps >= 1, --warmup >= 0, --size >= 32, --width >= 1, --amp 0|1, --v1 0|1");
    char info[256];
    printf("# %s\n", fl__gemm_info(info, sizeof info));
    if (!strcmp(o.mode, "prims")) run_prims(&o);
    else if (!strcmp(o.mode, "train") || !strcmp(o.mode, "eval")) run_net(&o);
    else cli_die(2, "--mode must be train, eval or prims, got '%s'", o.mode);
    return 0;
}
