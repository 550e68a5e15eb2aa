/*
 * test_resnet_ref.c - ResNet-50 at 224 against PyTorch, and batch_norm against float64.
 *
 * resnet50_vs_pytorch: fl_model_resnet50 trains 3 Momentum steps (lr 1e-4, momentum 0.9) on one
 * batch of 2 images at 224 x 224 from the same initial weights as torchvision's resnet50 in
 * tests/ref/resnet50.ref (tests/ref/make_resnet50_reference.py; its docstring has the details).
 * The dump holds no weights: both sides make them with the same counter-based hash (fill()
 * below, hashed() there), bit for bit.  Architecture: torchvision's resnet50 as it is, ResNet
 * v1.5 (the stride of each downsampling bottleneck on its 3x3, as PaddleCV's ResNet50), the
 * layout fl_model_resnet50 builds by default.  The dump holds, per parameter, the step-0 gradient's and the 3-step update's sum, sum
 * of squares and 32 sampled elements, from a float32 and a float64 PyTorch run.
 *
 * Conditioning: at batch 2 the float32 gradient of this network is itself only good to about 2%
 * (PyTorch float32 against float64: 1.7% rms on most parameters, from relu masks that flip on
 * rounding in the last stage and batch_norm's backward on 98 values per channel there), and after
 * the first update the gradients diverge further (the 3-step updates of the two PyTorch runs
 * differ by 22% rms, median over parameters), so the checks compare ours with the float64 run at
 * tolerances a few times PyTorch float32's own distance from it:
 *   loss, step 0:           |ours - f32| <= 1e-4                      (PyTorch f32 - f64: 4e-6)
 *   loss, step s = 1, 2:    |ours - f32| <= 1e-4 + 0.01 s |f32 loss change since step 0|
 *   step-0 gradient:        per parameter, |sumsq / sumsq_f64 - 1| <= 0.05, the rms of
 *                           (ours - f64) over the 32 samples <= 0.1 x rms of the f64 samples,
 *                           and |sum - sum_f64| <= 0.02 sqrt(numel sumsq_f64)
 *   update after 3 steps:   the same with 0.3, 0.8 and 0.16 (a coarse check: a missing momentum
 *                           term changes the sum of squares about 3x)
 * Observed (2026-11-29, v1.5 dump from PyPI torch 2.15 / torchvision 0.29, 1 thread): step-0
 * loss equal to 6 digits (2.9e-6), steps 1 and 2 off by 7.8e-5 and 2.2e-3 (PyTorch f32 - f64:
 * 2.8e-4, 6.0e-4); gradient samples 2.0% rms off float64 (median; max 3.5%; PyTorch f32 2.1%,
 * 3.6%), sums of squares within 0.8%; updates 22% (max 39%; PyTorch f32 23%, 43%), sums of
 * squares within 12.4% (PyTorch 12.4%); sums at most 0.0022 (gradients) and 0.034 (updates) of
 * sqrt(numel sumsq).  Closest to tolerance: losses 6%, gradients 34%, updates 48%, with every
 * convolution direct (FLEET_CONV_ALGO=direct); with the default rule, which runs the stride-1 3x3
 * convolutions through Winograd, step 2's loss is 7.8e-3 off and the closest are 23%, 59%, 58%.
 * What fails it (checked by hand): the stride on the bottleneck's first 1x1 instead of its 3x3
 * (stride_in_1x1, ResNet v1: step-0 loss off by 0.0996), Momentum without momentum (step-2
 * loss off by 0.111).  A 2% change in the learning rate does not: the loss responds to it
 * sublinearly here (step 1 moves by 2.7e-3, step 2 by 3.5e-3, against tolerances of 1e-2, 3.4e-2).
 *
 * resnet50_stride_placement: the convolutions that stride 2 in fl_model_resnet50 at 224 - the
 * 7x7 stem, the 1x1 projections and the bottlenecks' 3x3 (v1.5), or their first 1x1 with
 * stride_in_1x1 (v1) - and the multiply-adds of the two (v1.5 about 6% more); stride_in_1x1
 * outside 0, 1 is refused by name.
 *
 * batch_norm_vs_float64: one batch_norm of ResNet-50's shapes (2 x 64 x 56 x 56 and 2 x 2048 x 7
 * x 7; channel means 0, and 20 to 60 with unit spread) in training mode against the same formulas
 * in double: Y and the gradients of X, Scale and Bias.  Observed, max |error| / max |float64|:
 * 1-2e-7 for all four at mean 0 (float32 rounding: its channel sums run in 16 float lanes);
 * at means up to 60, Y 7e-6 and Scale@GRAD 3e-6: one float32 rounding of a mean of 60 (ulp 3.8e-6)
 * shifts X - mean by that much against a spread of 0.58.
 *
 * resnet50_two_ranks_equal_merged_half_batches: ResNet-50's layout at width 8 and 64 x 64, 3
 * Momentum steps on 2 collective ranks of 4 images each (forked, fleet_init_collective) against
 * one process merging the gradients of the same two half batches (gradient merge, k_steps 2):
 * the ranks stay identical and equal the merging process (observed bit for bit; allowed 1e-5),
 * while one process taking the 8 images in one batch ends elsewhere (batch_norm's statistics are
 * each rank's own, as in Paddle without sync_batch_norm).
 *
 * Runtime: about 3 s of CPU (the ResNet case: graph, 25.6 M weights from the hash, 3 steps at
 * batch 2; 15 s wall on the loaded 2-core machine it was written on).
 */
#include "refdump.h"

#include "graph/graph_internal.h"
#include "graph/ops_conv.h"

/* ---- the weights both sides generate (tests/ref/make_resnet50_reference.py: mix, hashed) ---- */

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

/* out[i] = float(center + bound * u(seed, i)), u in (-1, 1); the volatile keeps the compiler
 * from fusing the multiply and the add (numpy rounds each). */
static void fill(uint32_t seed, int64_t n, double center, double bound, float *out)
{
    const uint32_t s = mix(seed);
    for (int64_t i = 0; i < n; i++) {
        const double u = ((double)(mix((uint32_t)i ^ s) >> 8) + 0.5) * (2.0 / 16777216.0) - 1.0;
        volatile double t = bound * u;
        out[i] = (float)(center + t);
    }
}

/* ---- summaries of one tensor, as the generator stores them ---------------------------------- */

typedef struct {
    double sum, sumsq;
    double val[64];
} summary;

static void summarise(const float *a, int64_t n, const ref_tensor *idx, int p, int k, summary *s)
{
    s->sum = s->sumsq = 0;
    for (int64_t i = 0; i < n; i++) {
        s->sum += a[i];
        s->sumsq += (double)a[i] * a[i];
    }
    for (int j = 0; j < k; j++) {
        int64_t i = ref_i64(idx, (int64_t)p * k + j);
        CHECK(i >= 0 && i < n);
        s->val[j] = a[i];
    }
}

static int verbose(void)
{
    const char *v = getenv("FLEET_REF_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

/* Compares one parameter's summary with the dump's float64 run (key "grad0" or "update"):
 * sum of squares within rel_sq, sampled elements' rms error within rel_val of their rms, the
 * sum within rel_val / 5 of sqrt(numel x sum of squares) (its largest possible size).
 * Returns the worse of the two as a fraction of its tolerance; *q32 gets PyTorch float32's
 * own sample error against float64 (relative), for the report. */
static double check_summary(const ref_file *rf, const char *key, int p, const char *pname, const summary *s, int k,
                            int64_t numel, double rel_sq, double rel_val, double *q32)
{
    char k64[64], k32[64];
    snprintf(k64, sizeof k64, "%s_f64.sumsq", key);
    const double sq = ref_f64(ref_get(rf, k64, "f64"), p);
    snprintf(k64, sizeof k64, "%s_f64.sum", key);
    const double sum = ref_f64(ref_get(rf, k64, "f64"), p), esum = fabs(s->sum - sum) / sqrt((double)numel * sq);
    snprintf(k64, sizeof k64, "%s_f64.val", key);
    snprintf(k32, sizeof k32, "%s.val", key);
    const ref_tensor *v64 = ref_get(rf, k64, "f32"), *v32 = ref_get(rf, k32, "f32");
    double e2 = 0, r2 = 0, t2 = 0;
    for (int j = 0; j < k; j++) {
        const double r = ref_f32(v64, (int64_t)p * k + j), t = ref_f32(v32, (int64_t)p * k + j);
        e2 += (s->val[j] - r) * (s->val[j] - r);
        t2 += (t - r) * (t - r);
        r2 += r * r;
    }
    CHECK(sq > 0 && r2 > 0);
    const double esq = fabs(s->sumsq / sq - 1), eval = sqrt(e2 / r2);
    *q32 = sqrt(t2 / r2);
    if (verbose())
        printf("  %-8s %3d %-26s sumsq ours/f64 - 1 %+.2e, samples rms err %.2e (PyTorch f32 %.2e), sum err %.2e\n", key, p,
               pname, s->sumsq / sq - 1, eval, *q32, esum);
    if (!(esq <= rel_sq))
        TFAIL("%s of %s (parameter %d): sum of squares %.6g, PyTorch float64 %.6g (relative %.3g > %.3g)", key, pname, p,
              s->sumsq, sq, esq, rel_sq);
    if (!(eval <= rel_val))
        TFAIL("%s of %s (parameter %d): sampled elements off by %.3g of their rms (> %.3g)", key, pname, p, eval, rel_val);
    if (!(esum <= rel_val / 5))
        TFAIL("%s of %s (parameter %d): sum %.6g, PyTorch float64 %.6g (%.3g of sqrt(numel x sumsq) > %.3g)", key, pname, p,
              s->sum, sum, esum, rel_val / 5);
    return fmax(fmax(esq / rel_sq, eval / rel_val), esum / (rel_val / 5));
}

/* ---- ResNet-50 ----------------------------------------------------------------------------- */

#define MAXP 256

TEST(resnet50_vs_pytorch)
{
    check_little_endian();
    setvbuf(stdout, NULL, _IOLBF, 0); /* the lines before a failure reach the log */
    ref_file *rf = calloc(1, sizeof *rf);
    CHECK(rf);
    ref_load(rf, "resnet50.ref");
    const int batch = (int)ref_scalar_i(rf, "config.batch"), size = (int)ref_scalar_i(rf, "config.size");
    const int steps = (int)ref_scalar_i(rf, "config.steps");
    const double lr = ref_f64(ref_get(rf, "config.lr", "f64"), 0), mom = ref_f64(ref_get(rf, "config.momentum", "f64"), 0);
    const ref_tensor *numel = ref_get(rf, "param.numel", "i64"), *dims = ref_get(rf, "param.dims", "i64");
    const ref_tensor *center = ref_get(rf, "param.center", "f64"), *bound = ref_get(rf, "param.bound", "f64");
    const ref_tensor *idx = ref_get(rf, "grad0.idx", "i64"), *labels = ref_get(rf, "config.labels", "i64");
    const int np = (int)numel->numel, k = (int)idx->dims[1];
    CHECK(np <= MAXP && k <= 64 && steps <= 8 && labels->numel == batch);

    fl_prog *prog = fl_prog_create();
    fl_model_resnet_config cfg = fl_model_resnet50();
    cfg.height = cfg.width = size;
    cfg.num_classes = (int)ref_scalar_i(rf, "config.classes");
    fl_model_resnet net;
    CHECK_OK(fl_model_resnet_build(prog, &cfg, &net));
    fl_opt *opt = fl_opt_momentum((float)lr, (float)mom, 0);
    CHECK_OK(fl_opt_minimize(opt, net.loss));
    fl_exe *exe = fl_exe_create(NULL);
    CHECK(exe);
    CHECK_OK(fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL));

    /* the parameters in creation order, torchvision's parameters() order */
    const char *pname[MAXP];
    float *init[MAXP];
    int n = 0;
    for (int i = 0; i < fl_prog_num_vars(prog); i++) {
        fl_var *v = fl_prog_var_at(prog, i);
        if (!fl_var_is_param(v)) continue;
        if (n == np) TFAIL("the network has more than the dump's %d parameters", np);
        pname[n] = fl_var_name(v);
        fl_tensor *t = fl_scope_find(fl_exe_scope(exe), pname[n]);
        CHECK(t);
        const int64_t ne = ref_i64(numel, n);
        if (fl_tensor_numel(t) != ne)
            TFAIL("parameter %d (%s): %lld elements, PyTorch's %lld", n, pname[n], (long long)fl_tensor_numel(t),
                  (long long)ne);
        for (int d = 0; d < fl_tensor_ndim(t); d++) CHECK_EQ_INT(fl_tensor_dim(t, d), ref_i64(dims, 4 * n + d));
        fill((uint32_t)(n + 1), ne, ref_f64(center, n), ref_f64(bound, n), fl_tensor_f32(t));
        init[n] = malloc((size_t)ne * sizeof(float));
        CHECK(init[n]);
        memcpy(init[n], fl_tensor_f32(t), (size_t)ne * sizeof(float));
        n++;
    }
    CHECK_EQ_INT(n, np);

    const int64_t xshape[4] = {batch, 3, size, size}, yshape[2] = {batch, 1};
    fl_tensor *x = fl_tensor_create(FL_FLOAT32, 4, xshape), *y = fl_tensor_create(FL_INT64, 2, yshape);
    CHECK(x && y);
    fill((uint32_t)ref_scalar_i(rf, "config.image_seed"), fl_tensor_numel(x), 0.0, 1.0, fl_tensor_f32(x));
    for (int i = 0; i < batch; i++) fl_tensor_i64(y)[i] = ref_i64(labels, i);
    fl_feed feed[2] = {{fl_var_name(net.input), x}, {fl_var_name(net.label), y}};
    const char **fetch = calloc((size_t)np + 1, sizeof *fetch);
    char **gname = calloc((size_t)np, sizeof *gname);
    fl_tensor **out = calloc((size_t)np + 1, sizeof *out);
    summary *s = calloc((size_t)np, sizeof *s);
    CHECK(fetch && gname && out && s);
    fetch[0] = fl_var_name(net.loss);
    for (int p = 0; p < np; p++) {
        gname[p] = malloc(strlen(pname[p]) + 6);
        CHECK(gname[p]);
        sprintf(gname[p], "%s@GRAD", pname[p]);
        fetch[p + 1] = gname[p];
    }

    const ref_tensor *l32 = ref_get(rf, "loss.f32", "f64"), *l64 = ref_get(rf, "loss.f64", "f64");
    CHECK_EQ_INT(l32->numel, steps);
    double loss[8], worst = 0, q32max = 0, tq;
    for (int st = 0; st < steps; st++) {
        CHECK_OK(fl_exe_run(exe, prog, feed, 2, fetch, st == 0 ? np + 1 : 1, out));
        loss[st] = fl_tensor_f32(out[0])[0];
        if (st == 0)
            for (int p = 0; p < np; p++) {
                CHECK_EQ_INT(fl_tensor_numel(out[p + 1]), ref_i64(numel, p));
                summarise(fl_tensor_f32(out[p + 1]), ref_i64(numel, p), idx, p, k, &s[p]);
            }
    }
    for (int st = 0; st < steps; st++) {
        const double r = ref_f64(l32, st), e = fabs(loss[st] - r);
        const double tol = 1e-4 + 0.01 * st * fabs(r - ref_f64(l32, 0));
        printf("  step %d loss: ours %.7f  PyTorch f32 %.7f  f64 %.7f  |ours - f32| %.2e (tolerance %.2e)\n", st, loss[st],
               r, ref_f64(l64, st), e, tol);
        if (!(e <= tol)) TFAIL("step %d: loss %.7f, PyTorch %.7f (|diff| %.3g > %.3g)", st, loss[st], r, e, tol);
        worst = fmax(worst, e / tol);
    }
    double wg = 0, wu = 0;
    for (int p = 0; p < np; p++) {
        wg = fmax(wg, check_summary(rf, "grad0", p, pname[p], &s[p], k, ref_i64(numel, p), 0.05, 0.1, &tq));
        q32max = fmax(q32max, tq);
    }
    for (int p = 0; p < np; p++) {
        fl_tensor *t = fl_scope_find(fl_exe_scope(exe), pname[p]);
        const int64_t ne = ref_i64(numel, p);
        float *d = malloc((size_t)ne * sizeof *d);
        CHECK(t && d);
        for (int64_t i = 0; i < ne; i++) d[i] = fl_tensor_f32(t)[i] - init[p][i];
        summarise(d, ne, idx, p, k, &s[p]);
        wu = fmax(wu, check_summary(rf, "update", p, pname[p], &s[p], k, ne, 0.3, 0.8, &tq));
        free(d);
    }
    printf("  %d losses, %d step-0 gradients and %d 3-step updates match PyTorch; closest to tolerance: losses %.0f%%, "
           "gradients %.0f%%, updates %.0f%% (PyTorch f32's own gradient samples vs f64: up to %.3f; "
           "FLEET_REF_VERBOSE=1 for every parameter)\n",
           steps, np, np, 100 * worst, 100 * wg, 100 * wu, q32max);
    for (int p = 0; p < np; p++) {
        free(init[p]);
        free(gname[p]);
    }
    free(fetch);
    free(gname);
    free(out);
    free(s);
    fl_tensor_free(x);
    fl_tensor_free(y);
    fl_exe_free(exe);
    fl_opt_free(opt);
    fl_prog_free(prog);
    free(rf->buf);
    free(rf);
}

/* ---- batch_norm against float64 -------------------------------------------------------------- */

/* loss = mean(batch_norm(x) * r): forward Y and the gradients of X, Scale and Bias against the
 * same formulas in double (biased variance, epsilon 1e-5); returns the largest error relative
 * to each tensor's largest reference magnitude. */
static double bn_case(int64_t nb, int64_t c, int64_t hw, double offset)
{
    fl_prog *p = fl_prog_create();
    const int64_t shape[4] = {nb, c, hw, hw}, dshape[3] = {c, hw, hw};
    fl_param_attr xa;
    memset(&xa, 0, sizeof xa);
    xa.name = "x";
    fl_var *xv = fl_layer_create_parameter(p, 4, shape, FL_FLOAT32, &xa);
    fl_var *rv = fl_layer_data(p, "r", 3, dshape, FL_FLOAT32, 0);
    fl_batch_norm_attr a;
    memset(&a, 0, sizeof a);
    a.scale.name = "s";
    a.bias.name = "b";
    fl_var *yv = fl_layer_batch_norm(xv, NULL, 0, 0.9f, 1e-5f, &a);
    fl_var *loss = fl_layer_mean(fl_layer_elementwise_mul(yv, rv, -1));
    fl_param_grad *pairs = NULL;
    int npairs = 0;
    CHECK_OK(fl_append_backward(loss, NULL, 0, &pairs, &npairs));
    CHECK_OK(fl_prog_status(p));
    CHECK_EQ_INT(npairs, 3); /* x, scale, bias */
    free(pairs);
    fl_exe *e = fl_exe_create(NULL);
    CHECK(e);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    const int64_t n = nb * c * hw * hw, m = nb * hw * hw, plane = hw * hw;
    float *x = fl_tensor_f32(fl_scope_find(fl_exe_scope(e), "x"));
    float *sc = fl_tensor_f32(fl_scope_find(fl_exe_scope(e), "s")),
          *bi = fl_tensor_f32(fl_scope_find(fl_exe_scope(e), "b"));
    fill(7, n, 0.0, 1.0, x);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(x[i] + offset * (1 + (i / plane) % c % 3)); /* channel means vary */
    fill(8, c, 1.0, 0.5, sc);
    fill(9, c, 0.0, 0.5, bi);
    fl_tensor *rt = fl_tensor_create(FL_FLOAT32, 4, shape);
    CHECK(rt);
    fill(10, n, 0.0, 1.0, fl_tensor_f32(rt));
    fl_feed feed[1] = {{"r", rt}};
    const char *fetch[4] = {fl_var_name(yv), "x@GRAD", "s@GRAD", "b@GRAD"};
    fl_tensor *out[4];
    CHECK_OK(fl_exe_run(e, p, feed, 1, fetch, 4, out));
    const float *r = fl_tensor_f32(rt), *y = fl_tensor_f32(out[0]), *dx = fl_tensor_f32(out[1]);
    const float *ds = fl_tensor_f32(out[2]), *db = fl_tensor_f32(out[3]);
    double err[4] = {0}, mag[4] = {0};
    for (int64_t ch = 0; ch < c; ch++) {
        double mean = 0, var = 0, sdy = 0, sdyx = 0;
        for (int64_t b = 0; b < nb; b++)
            for (int64_t i = 0; i < plane; i++) mean += x[(b * c + ch) * plane + i];
        mean /= (double)m;
        for (int64_t b = 0; b < nb; b++)
            for (int64_t i = 0; i < plane; i++) {
                const double d = x[(b * c + ch) * plane + i] - mean;
                var += d * d;
            }
        var /= (double)m;
        const double inv = 1 / sqrt(var + 1e-5);
        for (int64_t b = 0; b < nb; b++)
            for (int64_t i = 0; i < plane; i++) {
                const int64_t j = (b * c + ch) * plane + i;
                const double xh = (x[j] - mean) * inv, dy = (double)r[j] / (double)n, yr = sc[ch] * xh + bi[ch];
                err[0] = fmax(err[0], fabs(y[j] - yr));
                mag[0] = fmax(mag[0], fabs(yr));
                sdy += dy;
                sdyx += dy * xh;
            }
        err[2] = fmax(err[2], fabs(ds[ch] - sdyx));
        mag[2] = fmax(mag[2], fabs(sdyx));
        err[3] = fmax(err[3], fabs(db[ch] - sdy));
        mag[3] = fmax(mag[3], fabs(sdy));
        for (int64_t b = 0; b < nb; b++)
            for (int64_t i = 0; i < plane; i++) {
                const int64_t j = (b * c + ch) * plane + i;
                const double xh = (x[j] - mean) * inv, dy = (double)r[j] / (double)n;
                const double g = sc[ch] * inv * (dy - sdy / (double)m - xh * sdyx / (double)m);
                err[1] = fmax(err[1], fabs(dx[j] - g));
                mag[1] = fmax(mag[1], fabs(g));
            }
    }
    double worst = 0;
    static const char *const what[4] = {"Y", "X@GRAD", "Scale@GRAD", "Bias@GRAD"};
    printf("  batch_norm [%lld, %lld, %lld, %lld], channel means up to %.0f:", (long long)nb, (long long)c, (long long)hw,
           (long long)hw, 3 * offset);
    for (int i = 0; i < 4; i++) {
        CHECK(mag[i] > 0);
        printf(" %s %.1e", what[i], err[i] / mag[i]);
        worst = fmax(worst, err[i] / mag[i]);
    }
    printf(" (max |error| / max |float64|)\n");
    fl_tensor_free(rt);
    fl_exe_free(e);
    fl_prog_free(p);
    return worst;
}

TEST(batch_norm_vs_float64)
{
    /* observed 1-2e-7 at mean 0 and 7e-6 at means up to 60 (see the top of the file) */
    CHECK(bn_case(2, 64, 56, 0.0) <= 1e-5);
    CHECK(bn_case(2, 2048, 7, 0.0) <= 1e-5);
    CHECK(bn_case(2, 64, 56, 20.0) <= 1e-4);
}

/* ---- two collective ranks against one process ----------------------------------------------- */

/* Data parallelism with batch_norm: each rank normalises with its own batch's statistics (as
 * Paddle's collective training without sync_batch_norm), so 2 ranks of B images are not one
 * process with 2B images; they are one process that merges the gradients of the two half
 * batches (gradient merge, k_steps 2, avg) - the same arithmetic up to the order of two float
 * additions.  ResNet-50's layout (bottlenecks, projections, max pool) at width 8, 64 x 64. */
#define DP_B 4
#define DP_STEPS 3

static fl_prog *dp_build(fl_var **loss, fl_var **in, fl_var **lab)
{
    fl_prog *p = fl_prog_create();
    fl_model_resnet_config c = fl_model_resnet50();
    c.height = c.width = 64;
    c.base_filters = 8;
    c.num_classes = 10;
    fl_model_resnet m;
    CHECK_OK(fl_model_resnet_build(p, &c, &m));
    *loss = m.loss;
    *in = m.input;
    *lab = m.label;
    return p;
}

/* Trains `micro` steps of b images each: global samples (2i + rank) b .. + b on a rank of 2,
 * i b .. + b on one process. */
static void dp_train(fl_prog *p, fl_var *in, fl_var *lab, fl_exe *e, int rank, int world, int micro, int b)
{
    const int64_t xs[4] = {b, 3, 64, 64}, ys[2] = {b, 1};
    fl_tensor *x = fl_tensor_create(FL_FLOAT32, 4, xs), *y = fl_tensor_create(FL_INT64, 2, ys);
    CHECK(x && y);
    const int64_t per = 3 * 64 * 64;
    float *buf = malloc((size_t)(per * DP_B * 2 * DP_STEPS) * sizeof *buf);
    CHECK(buf);
    fill(2000, per * DP_B * 2 * DP_STEPS, 0.0, 1.0, buf);
    for (int i = 0; i < micro; i++) {
        const int64_t first = (world == 2 ? 2 * i + rank : i) * (int64_t)b;
        memcpy(fl_tensor_f32(x), buf + first * per, (size_t)(b * per) * sizeof *buf);
        for (int j = 0; j < b; j++) fl_tensor_i64(y)[j] = (first + j) * 7 % 10;
        fl_feed feed[2] = {{fl_var_name(in), x}, {fl_var_name(lab), y}};
        CHECK_OK(fl_exe_run(e, p, feed, 2, NULL, 0, NULL));
    }
    free(buf);
    fl_tensor_free(x);
    fl_tensor_free(y);
}

/* Writes every parameter (creation order) to path. */
static void dp_dump(fl_prog *p, fl_exe *e, const char *path)
{
    FILE *f = fopen(path, "wb");
    CHECK(f);
    for (int i = 0; i < fl_prog_num_vars(p); i++) {
        fl_var *v = fl_prog_var_at(p, i);
        if (!fl_var_is_param(v)) continue;
        fl_tensor *t = fl_scope_find(fl_exe_scope(e), fl_var_name(v));
        CHECK(t);
        CHECK(fwrite(fl_tensor_f32(t), sizeof(float), (size_t)fl_tensor_numel(t), f) == (size_t)fl_tensor_numel(t));
    }
    CHECK(fclose(f) == 0);
}

/* world 2: rank `rank` of a collective job; world 1: one process, merging the gradients of 2
 * micro steps of DP_B images (merge 1) or taking 2 DP_B images a step (merge 0); init_path:
 * where to write the parameters before training (NULL: nowhere). */
static void dp_side(int rank, int world, int merge, const char *eps, const char *path, const char *init_path)
{
    if (world == 2) {
        th_trainer_env(rank, eps, 20000);
    } else {
        unsetenv("PADDLE_TRAINER_ENDPOINTS");
    }
    fl_var *loss, *in, *lab;
    fl_prog *p = dp_build(&loss, &in, &lab);
    fleet_strategy s = fleet_strategy_default();
    s.gradient_merge = merge;
    s.gradient_merge_configs.k_steps = 2;
    fleet_t *f = fleet_init_collective(NULL, &s);
    CHECK(f);
    CHECK_EQ_INT(fleet_worker_num(f), world);
    fl_opt *o = fleet_distributed_optimizer(f, fl_opt_momentum(0.01f, 0.9f, 0), NULL);
    CHECK(o);
    CHECK_OK(fl_opt_minimize(o, loss));
    fl_prog_set_seed(p, 100);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    if (init_path) dp_dump(p, e, init_path);
    dp_train(p, in, lab, e, rank, world, merge ? 2 * DP_STEPS : DP_STEPS, world == 1 && !merge ? 2 * DP_B : DP_B);
    dp_dump(p, e, path);
    fl_exe_free(e);
    fl_opt_free(o);
    fleet_free(f);
    fl_prog_free(p);
}

static float *dp_read(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    CHECK(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f) / sizeof(float);
    fseek(f, 0, SEEK_SET);
    float *a = malloc(*n * sizeof *a);
    CHECK(a && fread(a, sizeof *a, *n, f) == *n);
    fclose(f);
    return a;
}

TEST(resnet50_two_ranks_equal_merged_half_batches)
{
    /* 0, 1: the two ranks; 2: one process merging half batches; 3: one process, whole batches;
     * 4: the parameters before training (written by 2) */
    char dir[32], path[5][64], eps[128];
    th_mktemp(dir, sizeof dir, "fl_rndp");
    for (int i = 0; i < 5; i++) snprintf(path[i], sizeof path[i], "%s/p%d", dir, i);
    th_free_endpoints(eps, sizeof eps, 2);
    pid_t pid[4];
    for (int r = 0; r < 4; r++) {
        pid[r] = fork();
        CHECK(pid[r] >= 0);
        if (pid[r] == 0) {
            alarm(100);
            dp_side(r < 2 ? r : 0, r < 2 ? 2 : 1, r == 2, eps, path[r], r == 2 ? path[4] : NULL);
            _exit(0);
        }
    }
    static const char *const who[4] = {"rank 0", "rank 1", "the merging process", "the whole-batch process"};
    for (int r = 0; r < 4; r++) {
        int ws;
        CHECK(waitpid(pid[r], &ws, 0) == pid[r]);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws)) TFAIL("%s failed (status %d)", who[r], ws);
    }
    size_t n[5];
    float *a[5];
    for (int i = 0; i < 5; i++) a[i] = dp_read(path[i], &n[i]);
    for (int i = 1; i < 5; i++) CHECK_EQ_INT(n[i], n[0]);
    double d01 = 0, d02 = 0, d03 = 0, moved = 0;
    for (size_t i = 0; i < n[0]; i++) {
        d01 = fmax(d01, fabs(a[0][i] - a[1][i]));
        d02 = fmax(d02, fabs(a[0][i] - a[2][i]) / (1 + fabs(a[2][i])));
        d03 = fmax(d03, fabs(a[0][i] - a[3][i]) / (1 + fabs(a[3][i])));
        moved = fmax(moved, fabs(a[2][i] - a[4][i]));
    }
    printf("  %zu parameters after %d Momentum steps (largest change %.3g): rank 0 - rank 1 %.3g, rank 0 - merged half "
           "batches %.3g, rank 0 - whole batches %.3g (relative)\n",
           n[0], DP_STEPS, moved, d01, d02, d03);
    CHECK(d01 == 0);               /* the replicas stay identical */
    CHECK(d02 <= 1e-5);            /* the same arithmetic (observed: 0, bit for bit) */
    CHECK(moved > 1e-2);           /* the steps did move the parameters */
    CHECK(d03 > 100 * d02 + 1e-4); /* and whole batches (one batch_norm over 2B) are not the same thing */
    for (int i = 0; i < 5; i++) free(a[i]);
    th_rmtree(dir);
}

/* ---- where the bottlenecks stride ---------------------------------------------------------- */

/* Builds fl_model_resnet50 at 224 with stride_in_1x1 v1; counts its stride-2 convolutions by
 * kernel size (k1, k3, k7) and returns the multiply-adds of its convolutions per image. */
static double stride_census(int v1, int *k1, int *k3, int *k7)
{
    fl_prog *p = fl_prog_create();
    fl_model_resnet_config c = fl_model_resnet50();
    c.stride_in_1x1 = v1;
    fl_model_resnet m;
    CHECK_OK(fl_model_resnet_build(p, &c, &m));
    double macs = 0;
    *k1 = *k3 = *k7 = 0;
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        if (strcmp(op->def->type, "conv2d") != 0) continue;
        const fl_var *f = op->in[1].vars[0], *y = op->out[0].vars[0];
        int64_t st[2] = {1, 1};
        CHECK_OK(fl__conv_attr2(op, "strides", 1, st));
        macs += (double)(y->shape[1] * y->shape[2] * y->shape[3]) * (double)(f->shape[1] * f->shape[2] * f->shape[3]);
        if (st[0] == 2) *(f->shape[2] == 1 ? k1 : f->shape[2] == 3 ? k3 : k7) += 1;
    }
    fl_prog_free(p);
    return macs;
}

TEST(resnet50_stride_placement)
{
    int k1, k3, k7;
    const double v15 = stride_census(0, &k1, &k3, &k7);
    CHECK_EQ_INT(k7, 1); /* the stem */
    CHECK_EQ_INT(k3, 3); /* the first bottleneck of stages 2-4 */
    CHECK_EQ_INT(k1, 3); /* their projections */
    const double v1 = stride_census(1, &k1, &k3, &k7);
    CHECK_EQ_INT(k7, 1);
    CHECK_EQ_INT(k3, 0);
    CHECK_EQ_INT(k1, 6); /* the bottlenecks' first 1x1 and the projections */
    printf("  convolutions per image at 224: v1.5 %.3f G multiply-adds, v1 (stride_in_1x1) %.3f G (v1.5 / v1 %.3f)\n",
           v15 / 1e9, v1 / 1e9, v15 / v1);
    CHECK(v15 / v1 > 1.04 && v15 / v1 < 1.08);

    fl_prog *p = fl_prog_create();
    fl_model_resnet_config c = fl_model_resnet50();
    c.stride_in_1x1 = 2;
    fl_model_resnet m;
    CHECK_FAILS(fl_model_resnet_build(p, &c, &m), FL_EINVAL, "stride_in_1x1 must be 0 or 1");
    fl_prog_free(p);
}

TEST_MAIN(T(resnet50_vs_pytorch), T(batch_norm_vs_float64), T(resnet50_two_ranks_equal_merged_half_batches),
          T(resnet50_stride_placement))
