/*
 * test_reference.c - end-to-end numerical reference tests: Fleet trains a model for 5 SGD steps
 * from fixed initial parameters on fixed batches, and every step's loss, the step-0 gradients
 * and the final parameters are compared with PyTorch (torch 1.13, float32 and float64 runs).
 *
 * The reference numbers come from the tests/ref dumps (*.ref files), written by tests/ref/make_reference.py
 * (regenerate: see tests/ref/README.md).  This test
 * needs no Python: the dumps are parsed here with libc only.  Format ("FLREF 1"): a line
 * "FLREF 1", then per tensor a line "NAME DTYPE NDIM D0 D1 ..." (DTYPE f32/f64/i64) followed by
 * the raw little-endian data, and a closing line "end".
 *
 * Models (Paddle fc weight layout [in, out]; the script transposes PyTorch's [out, in]):
 *   mlp: x[32] -> fc128 tanh -> fc128 tanh -> fc2 softmax -> cross_entropy -> mean, SGD 0.01, batch 16
 *        (the quick-start MLP, fl_model_mlp_build with fl_model_mlp_default())
 *   ctr: 3 LoD id slots (2-4 ids per sample) -> one shared embedding (vocab 50, dim 4; run once with
 *        is_sparse = 1, SelectedRows gradient, and once dense: plain SGD gives the same numbers)
 *        -> sequence_pool sum per slot -> concat with 2 dense floats -> fc 8 relu -> fc 2 softmax
 *        -> cross_entropy -> mean, SGD 0.1, batch 8
 *
 * Tolerances (the float32 PyTorch run is the reference; its own distance from the float64 run,
 * stored in the dump, is ~1e-7 on losses and ~5e-8 on parameters, so these leave 100x room for
 * our polynomial tanh/exp (a few ulp) and a different summation order in the GEMMs and reductions):
 *   loss of every step:      |ours - ref| <= 1e-5 + 1e-4 * |ref|
 *   step-0 gradients:        |ours - ref| <= 1e-6 + 1e-4 * |ref|   (elementwise; max |grad| ~ 0.1)
 *   final parameters:        |ours - ref| <= 1e-5 + 1e-4 * |ref|   (elementwise)
 *   update (final - init):   max |d_ours - d_ref| <= 1e-2 * max |d_ref|   (per parameter: the
 *                            5-step change must agree to 1% of its size; this catches gradient
 *                            errors that the absolute tolerance above would hide when the
 *                            change is small, e.g. 2e-5 for the MLP's last bias)
 */
#include "refdump.h"

/* A tensor from the dump; with sub >= 0, the sub-th slice along dim 0 (t[sub]). */
static fl_tensor *ref_tensor_f32(const ref_tensor *t, int sub)
{
    int64_t n = sub >= 0 ? t->numel / t->dims[0] : t->numel, off = sub >= 0 ? sub * n : 0;
    fl_tensor *o = fl_tensor_create(FL_FLOAT32, sub >= 0 ? t->ndim - 1 : t->ndim, sub >= 0 ? t->dims + 1 : t->dims);
    CHECK(o);
    for (int64_t i = 0; i < n; i++) fl_tensor_f32(o)[i] = ref_f32(t, off + i);
    return o;
}
static fl_tensor *ref_tensor_i64(const ref_tensor *t, int sub)
{
    int64_t n = sub >= 0 ? t->numel / t->dims[0] : t->numel, off = sub >= 0 ? sub * n : 0;
    fl_tensor *o = fl_tensor_create(FL_INT64, sub >= 0 ? t->ndim - 1 : t->ndim, sub >= 0 ? t->dims + 1 : t->dims);
    CHECK(o);
    for (int64_t i = 0; i < n; i++) fl_tensor_i64(o)[i] = ref_i64(t, off + i);
    return o;
}

/* ---- helpers ------------------------------------------------------------------------------ */

/* Per-check detail lines only with FLEET_REF_VERBOSE=1; by default one summary line per model. */
static int verbose(void)
{
    const char *v = getenv("FLEET_REF_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}
static double worst_frac; /* largest |diff| / tolerance seen in this test case */
static const char *worst_what = "";
static char worst_buf[160];
static void note_worst(const char *what, double frac)
{
    if (frac > worst_frac) {
        worst_frac = frac;
        snprintf(worst_buf, sizeof worst_buf, "%s", what);
        worst_what = worst_buf;
    }
}

/* Overwrites the scope tensor of parameter `name` (after the startup program ran) with the dump. */
static void set_param(fl_exe *exe, const ref_file *rf, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "init.%s", name);
    const ref_tensor *r = ref_get(rf, key, "f32");
    fl_tensor *t = fl_scope_find(fl_exe_scope(exe), name);
    if (!t) TFAIL("parameter %s not in the scope after startup", name);
    if (fl_tensor_numel(t) != r->numel || fl_tensor_ndim(t) != r->ndim)
        TFAIL("parameter %s: shape differs from dump", name);
    for (int i = 0; i < r->ndim; i++) CHECK_EQ_INT(fl_tensor_dim(t, i), r->dims[i]);
    float *d = fl_tensor_f32(t);
    for (int64_t i = 0; i < r->numel; i++) d[i] = ref_f32(r, i);
}

/* Densifies a gradient that may be SelectedRows (rows summed into a [height, width] matrix). */
static float *dense_grad(const fl_tensor *g, int64_t numel)
{
    float *d = calloc((size_t)numel, sizeof *d);
    CHECK(d);
    const float *v = fl_tensor_cdata(g);
    int64_t nrows, height;
    const int64_t *rows = fl_tensor_rows(g, &nrows, &height);
    if (rows) {
        int64_t width = numel / height;
        CHECK_EQ_INT(fl_tensor_numel(g), nrows * width);
        for (int64_t r = 0; r < nrows; r++) {
            CHECK(rows[r] >= 0 && rows[r] < height);
            for (int64_t j = 0; j < width; j++) d[rows[r] * width + j] += v[r * width + j];
        }
    } else {
        CHECK_EQ_INT(fl_tensor_numel(g), numel);
        memcpy(d, v, (size_t)numel * sizeof *d);
    }
    return d;
}

/* Elementwise |ours - ref| <= atol + rtol |ref|; prints the largest error seen. */
static void check_close(const char *what, const float *ours, const ref_tensor *ref, double atol, double rtol)
{
    double worst = 0, worst_ratio = 0;
    int64_t wi = 0;
    for (int64_t i = 0; i < ref->numel; i++) {
        double r = ref_f32(ref, i), e = fabs((double)ours[i] - r), lim = atol + rtol * fabs(r);
        if (!(e <= lim))
            TFAIL("%s[%lld]: ours %.9g, PyTorch %.9g, |diff| %.3g > %.3g", what, (long long)i, ours[i], r, e, lim);
        if (e > worst) worst = e;
        if (e / lim > worst_ratio) {
            worst_ratio = e / lim;
            wi = i;
        }
    }
    note_worst(what, worst_ratio);
    if (verbose())
        printf("  %-22s max |diff| %.2e (worst at [%lld]: %.1f%% of tolerance)\n", what, worst, (long long)wi,
               100 * worst_ratio);
}

/* The whole-training update final - init must match the reference's to 1% of its largest entry. */
static void check_update(const char *name, const float *ours_final, const ref_file *rf)
{
    char k1[128], k2[128];
    snprintf(k1, sizeof k1, "init.%s", name);
    snprintf(k2, sizeof k2, "final.%s", name);
    const ref_tensor *ini = ref_get(rf, k1, "f32"), *fin = ref_get(rf, k2, "f32");
    double dmax = 0, emax = 0;
    for (int64_t i = 0; i < ini->numel; i++) {
        double dref = (double)ref_f32(fin, i) - ref_f32(ini, i), dours = (double)ours_final[i] - ref_f32(ini, i);
        dmax = fmax(dmax, fabs(dref));
        emax = fmax(emax, fabs(dours - dref));
    }
    CHECK(dmax > 0);
    if (!(emax <= 1e-2 * dmax))
        TFAIL("update of %s: max |ours - PyTorch| %.3g > 1%% of max |update| %.3g", name, emax, dmax);
    char what[64];
    snprintf(what, sizeof what, "update of %s", name);
    note_worst(what, emax / (1e-2 * dmax));
    if (verbose())
        printf("  update of %-12s max |update| %.2e, max |diff| %.2e (%.3f%% of it)\n", name, dmax, emax,
               100 * emax / dmax);
}

static void check_losses(const float *loss, int steps, const ref_file *rf)
{
    const ref_tensor *l32 = ref_get(rf, "loss.f32", "f64"), *l64 = ref_get(rf, "loss.f64", "f64");
    CHECK_EQ_INT(l32->numel, steps);
    for (int s = 0; s < steps; s++) {
        double r = ref_f64(l32, s), e = fabs(loss[s] - r);
        if (verbose())
            printf("  step %d loss: ours %.8f  PyTorch f32 %.8f  f64 %.8f  |ours - f32| %.1e\n", s, loss[s], r,
                   ref_f64(l64, s), e);
        if (!(e <= 1e-5 + 1e-4 * fabs(r))) TFAIL("step %d loss %.9g differs from PyTorch %.9g by %.3g", s, loss[s], r, e);
        note_worst("loss", e / (1e-5 + 1e-4 * fabs(r)));
    }
}

/* Runs the startup program, then overwrites every parameter with the dump's initial values. */
static fl_exe *start(fl_prog *prog, const ref_file *rf, const char *const *params, int np)
{
    fl_exe *exe = fl_exe_create(NULL);
    CHECK(exe);
    CHECK_OK(fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL));
    for (int i = 0; i < np; i++) set_param(exe, rf, params[i]);
    return exe;
}

/* Checks the step-0 gradients (fetched into g0) and the final parameters. */
static void check_grads_and_params(fl_exe *exe, const ref_file *rf, const ref_file *rg, const char *const *params, int np,
                                   float **g0)
{
    char key[128];
    for (int i = 0; i < np; i++) {
        snprintf(key, sizeof key, "grad0.%s", params[i]);
        const ref_tensor *r = ref_get(rg, key, "f32");
        snprintf(key, sizeof key, "%s@GRAD (step 0)", params[i]);
        check_close(key, g0[i], r, 1e-6, 1e-4);
    }
    for (int i = 0; i < np; i++) {
        fl_tensor *t = fl_scope_find(fl_exe_scope(exe), params[i]);
        CHECK(t);
        snprintf(key, sizeof key, "final.%s", params[i]);
        const ref_tensor *r = ref_get(rf, key, "f32");
        CHECK_EQ_INT(fl_tensor_numel(t), r->numel);
        snprintf(key, sizeof key, "final %s", params[i]);
        check_close(key, fl_tensor_f32(t), r, 1e-5, 1e-4);
        check_update(params[i], fl_tensor_f32(t), rf);
    }
}

/* ---- (a) quick-start MLP ---------------------------------------------------------------- */

static const char *const mlp_params[] = {"fc1.w", "fc1.b", "fc2.w", "fc2.b", "fc3.w", "fc3.b"};

static fl_var *named_fc(fl_var *x, int size, const char *act, const char *w, const char *b)
{
    fl_fc_attr a;
    memset(&a, 0, sizeof a);
    a.weight.name = w;
    a.bias.name = b;
    return fl_layer_fc_ex(FL_VARS(x), size, act, &a);
}

TEST(reference_mlp_vs_pytorch)
{
    check_little_endian();
    ref_file *rf = calloc(1, sizeof *rf), *rg = calloc(1, sizeof *rg);
    CHECK(rf && rg);
    ref_load(rf, "mlp.ref");
    ref_load(rg, "mlp_grad0.ref");
    int batch = (int)ref_scalar_i(rf, "config.batch"), steps = (int)ref_scalar_i(rf, "config.steps");
    double lr = ref_f64(ref_get(rf, "config.lr", "f64"), 0);

    fl_prog *prog = fl_prog_create();
    fl_model_mlp_config cfg = fl_model_mlp_default(); /* the quick-start MLP, parameters named as the dump's */
    cfg.param_prefix = "fc";
    fl_model_mlp net;
    CHECK_OK(fl_model_mlp_build(prog, &cfg, &net));
    fl_var *cost = net.loss;
    fl_opt *opt = fl_opt_sgd((float)lr);
    CHECK_OK(fl_opt_minimize(opt, cost));
    fl_exe *exe = start(prog, rf, mlp_params, 6);

    const ref_tensor *xs = ref_get(rf, "x", "f32"), *ys = ref_get(rf, "y", "i64");
    CHECK_EQ_INT(xs->dims[0], steps);
    CHECK_EQ_INT(xs->dims[1], batch);
    float loss[16];
    float *g0[6];
    for (int s = 0; s < steps; s++) {
        fl_tensor *xt = ref_tensor_f32(xs, s), *yt = ref_tensor_i64(ys, s);
        fl_feed feed[] = {{"x", xt}, {"y", yt}};
        const char *fetch[7] = {fl_var_name(cost), "fc1.w@GRAD", "fc1.b@GRAD", "fc2.w@GRAD",
                                "fc2.b@GRAD",      "fc3.w@GRAD", "fc3.b@GRAD"};
        fl_tensor *out[7];
        CHECK_OK(fl_exe_run(exe, prog, feed, 2, fetch, s == 0 ? 7 : 1, out));
        loss[s] = fl_tensor_f32(out[0])[0];
        if (s == 0)
            for (int i = 0; i < 6; i++) {
                char key[64];
                snprintf(key, sizeof key, "init.%s", mlp_params[i]);
                g0[i] = dense_grad(out[i + 1], ref_get(rf, key, "f32")->numel);
            }
        fl_tensor_free(xt);
        fl_tensor_free(yt);
    }
    check_losses(loss, steps, rf);
    check_grads_and_params(exe, rf, rg, mlp_params, 6, g0);
    printf("  mlp: %d losses, 6 step-0 gradients, 6 final parameters and updates match PyTorch; closest to its "
           "tolerance: %s at %.1f%% (FLEET_REF_VERBOSE=1 for details)\n",
           steps, worst_what, 100 * worst_frac);
    for (int i = 0; i < 6; i++) free(g0[i]);
    fl_exe_free(exe);
    fl_opt_free(opt);
    fl_prog_free(prog);
    free(rf->buf);
    free(rg->buf);
    free(rf);
    free(rg);
}

/* ---- (b) small CTR net: LoD slots, shared sparse embedding, sequence_pool, concat ---------- */

static const char *const ctr_params[] = {"emb", "fc1.w", "fc1.b", "fc2.w", "fc2.b"};

/* is_sparse: the table's gradient is SelectedRows and SGD updates only the looked-up rows;
 * otherwise a dense [vocab, dim] gradient.  Plain SGD gives the same numbers either way. */
static void ctr_case(int is_sparse)
{
    check_little_endian();
    ref_file *rf = calloc(1, sizeof *rf);
    CHECK(rf);
    ref_load(rf, "ctr.ref");
    int steps = (int)ref_scalar_i(rf, "config.steps");
    int64_t vocab = ref_scalar_i(rf, "config.vocab"), dim = ref_scalar_i(rf, "config.dim");
    double lr = ref_f64(ref_get(rf, "config.lr", "f64"), 0);

    fl_prog *prog = fl_prog_create();
    fl_var *pooled[4];
    fl_embedding_attr ea;
    memset(&ea, 0, sizeof ea);
    ea.is_sparse = is_sparse;
    ea.param.name = "emb"; /* one table shared by the three slots */
    for (int k = 0; k < 3; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "slot%d", k);
        fl_var *ids = fl_layer_data(prog, nm, FL_SHAPE(1), FL_INT64, 1);
        pooled[k] = fl_layer_sequence_pool(fl_layer_embedding(ids, vocab, dim, &ea), "sum");
    }
    pooled[3] = fl_layer_data(prog, "dense", FL_SHAPE(2), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(prog, "label", FL_SHAPE(1), FL_INT64, 0);
    fl_var *h = fl_layer_concat(pooled, 4, 1);
    h = named_fc(h, 8, "relu", "fc1.w", "fc1.b");
    fl_var *pred = named_fc(h, 2, "softmax", "fc2.w", "fc2.b");
    fl_var *cost = fl_layer_mean(fl_layer_cross_entropy(pred, y));
    fl_opt *opt = fl_opt_sgd((float)lr);
    CHECK_OK(fl_opt_minimize(opt, cost));
    fl_exe *exe = start(prog, rf, ctr_params, 5);

    float loss[16];
    float *g0[5];
    for (int s = 0; s < steps; s++) {
        fl_tensor *t[5];
        char key[64];
        fl_feed feed[5];
        static const char *const slot_names[3] = {"slot0", "slot1", "slot2"};
        for (int k = 0; k < 3; k++) {
            snprintf(key, sizeof key, "step%d.slot%d.ids", s, k);
            t[k] = ref_tensor_i64(ref_get(rf, key, "i64"), -1);
            snprintf(key, sizeof key, "step%d.slot%d.lod", s, k);
            const ref_tensor *lod = ref_get(rf, key, "i64");
            int64_t off[64];
            CHECK(lod->numel <= 64);
            for (int64_t i = 0; i < lod->numel; i++) off[i] = ref_i64(lod, i);
            CHECK_OK(fl_tensor_set_lod(t[k], off, lod->numel));
            feed[k] = (fl_feed){slot_names[k], t[k]};
        }
        snprintf(key, sizeof key, "step%d.dense", s);
        t[3] = ref_tensor_f32(ref_get(rf, key, "f32"), -1);
        snprintf(key, sizeof key, "step%d.label", s);
        t[4] = ref_tensor_i64(ref_get(rf, key, "i64"), -1);
        feed[3] = (fl_feed){"dense", t[3]};
        feed[4] = (fl_feed){"label", t[4]};
        const char *fetch[6] = {fl_var_name(cost), "emb@GRAD", "fc1.w@GRAD", "fc1.b@GRAD", "fc2.w@GRAD", "fc2.b@GRAD"};
        fl_tensor *out[6];
        CHECK_OK(fl_exe_run(exe, prog, feed, 5, fetch, s == 0 ? 6 : 1, out));
        loss[s] = fl_tensor_f32(out[0])[0];
        if (s == 0) {
            /* the table's gradient must take the path asked for */
            CHECK_EQ_INT(fl_tensor_is_rows(out[1]) != 0, is_sparse);
            for (int i = 0; i < 5; i++) {
                snprintf(key, sizeof key, "init.%s", ctr_params[i]);
                g0[i] = dense_grad(out[i + 1], ref_get(rf, key, "f32")->numel);
            }
        }
        for (int k = 0; k < 5; k++) fl_tensor_free(t[k]);
    }
    check_losses(loss, steps, rf);
    check_grads_and_params(exe, rf, rf, ctr_params, 5, g0);
    printf("  ctr (%s embedding): %d losses, 5 step-0 gradients, 5 final parameters and updates match PyTorch; "
           "closest to its tolerance: %s at %.1f%% (FLEET_REF_VERBOSE=1 for details)\n",
           is_sparse ? "sparse" : "dense", steps, worst_what, 100 * worst_frac);
    for (int i = 0; i < 5; i++) free(g0[i]);
    fl_exe_free(exe);
    fl_opt_free(opt);
    fl_prog_free(prog);
    free(rf->buf);
    free(rf);
}

TEST(reference_ctr_sparse_vs_pytorch) { ctr_case(1); }
TEST(reference_ctr_dense_vs_pytorch) { ctr_case(0); }

TEST_MAIN(T(reference_mlp_vs_pytorch), T(reference_ctr_sparse_vs_pytorch), T(reference_ctr_dense_vs_pytorch))
