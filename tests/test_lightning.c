/*
 * test_lightning.c - the model registry (fleet/app.h), its models and fleet-lightning:
 * DeepFM, Wide&Deep and ResNet builders (shapes, finite-difference gradients on a tiny
 * batch), ResNet-50 running a few steps on small images, a short convergence run per
 * model on planted data (Criteo rows of fleet-datagen; IDX images with a class-coloured
 * square), the tool's argument errors, eval / infer on a saved model, and one run each
 * under fleetrun: DeepFM with a parameter server, ResNet on two collective trainers;
 * simnet_bow and word2vec on fleet-datagen's planted text data (a short run each, eval and
 * infer of a saved simnet model, word2vec with a parameter server and two workers); any mode
 * of the library's table (half_async) and the mode a strategy file selects (GEO); and
 * --checkpoint_dir resuming a restarted run (locally, bit for bit; with a server); and
 * simnet_bow with 2 Hogwild threads on a server scoring what it scores locally; resnet on
 * JPEG images (a directory of class folders to train, a list file to test) through
 * fleet-lightning, and a bad JPEG named in the error.
 */
#include <limits.h>
#include <stdarg.h>
#include <sys/stat.h>

#include "gradcheck.h"
#include "cmdrun.h"
#ifdef FL_HAVE_TURBOJPEG
#include "jpegmake.h"
#endif

static char BIN[PATH_MAX + 8], DIR_[64];

static void setup(void)
{
    char self[PATH_MAX];
    th_tests_dir(self, sizeof self);
    snprintf(BIN, sizeof BIN, "%s/..", self); /* BUILD */
    th_mktemp(DIR_, sizeof DIR_, "fl_light");
}

static void cleanup(void) { th_rmtree(DIR_); }

#define run_rc(name, seconds, rc, ...) th_cmd(DIR_, name, seconds, rc, __VA_ARGS__)
#define after th_after

/* ---- planted data ------------------------------------------------------------------------- */

/* Criteo rows from fleet-datagen's planted model (small vocabulary: ceiling AUC about 0.79). */
static void criteo_data(int rows)
{
    int rc;
    char *out = run_rc("gen", 60, &rc,
                       "%s/tools/fleet-datagen criteo --rows %d --files 2 --test-rows 4000 --out %s/criteo --seed 3 "
                       "--vocab-scale 0.01 --dense-scale 0.1",
                       BIN, rows, DIR_);
    if (rc) TFAIL("fleet-datagen failed:\n%s", out);
    free(out);
}

static void be32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8), (unsigned char)v};
    CHECK(fwrite(b, 1, 4, f) == 4);
}

/* IDX files DIR/images/{train,t10k}-*: 28 x 28 noise, and a bright 12 x 12 square in the
 * quadrant of the image's class (4 classes): a ResNet separates them almost perfectly. */
static void idx_split(const char *prefix, int n, unsigned seed)
{
    char p[256];
    snprintf(p, sizeof p, "%s/images", DIR_);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/images/%s-images-idx3-ubyte", DIR_, prefix);
    FILE *fi = fopen(p, "wb");
    snprintf(p, sizeof p, "%s/images/%s-labels-idx1-ubyte", DIR_, prefix);
    FILE *fl = fopen(p, "wb");
    CHECK(fi && fl);
    be32(fi, 0x803);
    be32(fi, (uint32_t)n);
    be32(fi, 28);
    be32(fi, 28);
    be32(fl, 0x801);
    be32(fl, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        unsigned char img[28 * 28], c = (unsigned char)(i % 4);
        for (int k = 0; k < 28 * 28; k++) img[k] = (unsigned char)(rand_r(&seed) % 100);
        int r0 = 1 + (c / 2) * 14, c0 = 1 + (c % 2) * 14;
        for (int r = r0; r < r0 + 12; r++)
            for (int q = c0; q < c0 + 12; q++) img[r * 28 + q] = (unsigned char)(155 + rand_r(&seed) % 100);
        CHECK(fwrite(img, 1, sizeof img, fi) == sizeof img);
        CHECK(fwrite(&c, 1, 1, fl) == 1);
    }
    CHECK(!fclose(fi) && !fclose(fl));
}

/* ---- builders ----------------------------------------------------------------------------- */

static fl_model_ctr_config tiny_ctr(fl_model_ctr_config c)
{
    c.sparse_feature_dim = 20;
    c.embedding_size = 3;
    c.num_sparse_slots = 3;
    c.dense_dim = 2;
    c.nhidden = 1;
    c.hidden[0] = 4;
    c.loss_mean = 1;
    return c;
}

/* A batch of 4: dense_input [4, 2], C1..C3 with 1-3 ids each, labels 0/1. */
static void ctr_gradcheck(int (*build)(fl_prog *, const fl_model_ctr_config *, fl_model_ctr *), fl_model_ctr_config cfg)
{
    fl_prog *p = fl_prog_create();
    fl_model_ctr m;
    CHECK_OK(build(p, &cfg, &m));
    CHECK_EQ_INT(m.nuse_var, 5);
    CHECK_EQ_INT(fl_var_ndim(m.predict), 2);
    CHECK_EQ_INT(fl_var_shape(m.predict)[1], 2);
    CHECK(fl_prog_var(p, "SparseFeatFactors") && fl_prog_var(p, "FirstOrderWeights"));
    CHECK_EQ_INT(fl_var_shape(fl_prog_var(p, "FirstOrderWeights"))[1], 1);
    float dense[8];
    th_fill_uniform(dense, 8, 0, 1, 3);
    fl_tensor *td = th_f32(2, (const int64_t[]){4, 2}, dense), *ts[3];
    for (int s = 0; s < 3; s++) {
        int64_t ids[8], lod[5] = {0};
        int n = 0;
        for (int i = 0; i < 4; i++) {
            for (int k = 0; k <= (i + s) % 3; k++) ids[n++] = (i * 7 + s * 3 + k * 5) % 20;
            lod[i + 1] = n;
        }
        ts[s] = th_i64(2, (const int64_t[]){n, 1}, ids);
        CHECK_OK(fl_tensor_set_lod(ts[s], lod, 5));
    }
    fl_tensor *ty = th_i64(2, (const int64_t[]){4, 1}, (const int64_t[]){0, 1, 1, 0});
    fl_feed feed[] = {{"dense_input", td}, {"C1", ts[0]}, {"C2", ts[1]}, {"C3", ts[2]}, {"label", ty}};
    gc_check(m.loss, feed, 5, NULL, (gc_opts){1e-2, 3e-2, 3e-3, 24});
    fl_prog_free(p);
}

TEST(deepfm_builder_shapes_and_gradients) { ctr_gradcheck(fl_model_deepfm_build, tiny_ctr(fl_model_deepfm_default())); }

TEST(wide_deep_builder_shapes_and_gradients)
{
    ctr_gradcheck(fl_model_wide_deep_build, tiny_ctr(fl_model_wide_deep_default()));
}

TEST(resnet_builder_shapes_gradients_and_errors)
{
    fl_prog *p = fl_prog_create();
    fl_model_resnet_config c = fl_model_resnet_default();
    CHECK_EQ_INT(c.depth, 20);
    fl_model_resnet m;
    CHECK_OK(fl_model_resnet_build(p, &c, &m));
    CHECK_EQ_INT(th_count_ops(p, "conv2d"), 21); /* stem + 9 blocks x 2 + 2 projections */
    CHECK_EQ_INT(th_count_ops(p, "batch_norm"), 21);
    CHECK_EQ_INT(fl_var_shape(m.predict)[1], 10);
    fl_prog_free(p);

    c.depth = 19;
    p = fl_prog_create();
    CHECK_FAILS(fl_model_resnet_build(p, &c, &m), FL_EINVAL, "depth must be 6n+2");
    c = fl_model_resnet_default();
    c.base_filters = 0;
    CHECK_FAILS(fl_model_resnet_build(p, &c, &m), FL_EINVAL, "base_filters must be >= 1");
    fl_prog_free(p);

    /* gradients of a depth-8 network on 3 images of 6 x 6 */
    p = fl_prog_create();
    c = fl_model_resnet_default();
    c.depth = 8;
    c.base_filters = 2;
    c.height = c.width = 6;
    c.num_classes = 3;
    CHECK_OK(fl_model_resnet_build(p, &c, &m));
    float x[3 * 36];
    th_fill_uniform(x, 3 * 36, -1, 1, 11);
    fl_tensor *tx = th_f32(4, (const int64_t[]){3, 1, 6, 6}, x);
    fl_tensor *ty = th_i64(2, (const int64_t[]){3, 1}, (const int64_t[]){0, 2, 1});
    fl_feed feed[] = {{"img", tx}, {"label", ty}};
    /* eps 3e-4: batch_norm over 3 images puts many relu inputs near 0, so a larger step
     * crosses kinks (1e-2 and 1e-3 fail on a different weight each; 3e-4 and 1e-4 pass all) */
    gc_check(m.loss, feed, 2, NULL, (gc_opts){3e-4, 3e-2, 3e-3, 12});
    fl_prog_free(p);
}

TEST(resnet50_builds_and_runs_a_few_steps)
{
    fl_prog *p = fl_prog_create();
    fl_model_resnet_config c = fl_model_resnet50();
    CHECK_EQ_INT(c.depth, 50);
    c.height = c.width = 32;
    c.num_classes = 10;
    fl_model_resnet m;
    CHECK_OK(fl_model_resnet_build(p, &c, &m));
    CHECK_EQ_INT(th_count_ops(p, "conv2d"), 53); /* stem + 16 bottlenecks x 3 + 4 projections */
    fl_opt *o = fl_opt_momentum(0.01f, 0.9f, 0);
    CHECK_OK(fl_opt_set_cosine_decay(o, 2, 2));
    CHECK_OK(fl_opt_minimize(o, m.loss));
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    int64_t params = 0;
    for (int i = 0; i < fl_prog_num_vars(p); i++) {
        fl_var *v = fl_prog_var_at(p, i);
        if (fl_var_is_param(v)) params += fl_tensor_numel(fl_scope_find(fl_exe_scope(e), fl_var_name(v)));
    }
    CHECK(params > 23000000 && params < 24000000); /* ResNet-50's 23.5 M with a 10-class head */
    float x[2 * 3 * 32 * 32];
    th_fill_uniform(x, 2 * 3 * 32 * 32, 0, 1, 5);
    fl_tensor *tx = th_f32(4, (const int64_t[]){2, 3, 32, 32}, x);
    fl_tensor *ty = th_i64(2, (const int64_t[]){2, 1}, (const int64_t[]){3, 7});
    fl_feed feed[] = {{"img", tx}, {"label", ty}};
    const char *fetch[] = {fl_var_name(m.loss)};
    for (int s = 0; s < 3; s++) {
        fl_tensor *out;
        CHECK_OK(fl_exe_run(e, p, feed, 2, fetch, 1, &out));
        CHECK(isfinite(fl_tensor_f32(out)[0]));
    }
    fl_exe_free(e);
    fl_opt_free(o);
    fl_prog_free(p);
}

/* Paddle's cosine_decay: lr = base * 0.5 * (cos(floor(step / step_each_epoch) * pi / epochs) + 1). */
TEST(cosine_decay_follows_paddle)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2), FL_FLOAT32, 0);
    fl_var *loss = fl_layer_mean(fl_layer_fc(FL_VARS(x), 1, NULL));
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK_FAILS(fl_opt_set_cosine_decay(o, 0, 4), FL_EINVAL, "step_each_epoch and epochs must be > 0");
    CHECK_OK(fl_opt_set_cosine_decay(o, 2, 4));
    CHECK_OK(fl_opt_minimize(o, loss));
    const char *lr = NULL;
    for (int i = 0; i < fl_prog_num_vars(p); i++)
        if (!strncmp(fl_var_name(fl_prog_var_at(p, i)), "learning_rate", 13)) lr = fl_var_name(fl_prog_var_at(p, i));
    CHECK(lr);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    fl_tensor *tx = th_f32(2, (const int64_t[]){1, 2}, (const float[]){1, 2});
    fl_feed feed[] = {{"x", tx}};
    for (int step = 0; step < 8; step++) {
        fl_tensor *out;
        CHECK_OK(fl_exe_run(e, p, feed, 1, &lr, 1, &out));
        CHECK_NEAR(fl_tensor_f32(out)[0], 0.1 * 0.5 * (cos((step / 2) * M_PI / 4) + 1), 1e-6);
    }
    fl_tensor_free(tx);
    fl_exe_free(e);
    fl_opt_free(o);
    fl_prog_free(p);
}

/* ---- the registry --------------------------------------------------------------------------- */

TEST(registry_rows_and_options)
{
    const char *want[] = {"ctr_dnn", "deepfm", "wide_deep",   "simnet_bow", "word2vec",
                          "resnet",  "vgg",    "transformer", "bert"};
    int n = (int)(sizeof want / sizeof *want);
    CHECK_EQ_INT(fl_app_count(), n);
    for (int i = 0; i < n; i++) CHECK(fl_app_at(i) == fl_app_find(want[i]));
    CHECK_EQ_INT(fl_app_find("simnet_bow")->kind, FL_APP_SPARSE);
    CHECK_EQ_INT(fl_app_find("word2vec")->kind, FL_APP_SPARSE);
    CHECK(fl_app_find("nope") == NULL);
    CHECK_STR_HAS(fl_last_error(), "unknown model 'nope' (models: ctr_dnn, deepfm");
    CHECK_EQ_INT(fl_app_find("deepfm")->kind, FL_APP_SPARSE);
    CHECK_EQ_INT(fl_app_find("resnet")->kind, FL_APP_DENSE);
    fl_app_config c;
    fl_app_config_default(fl_app_find("resnet"), &c);
    CHECK(!strcmp(c.optimizer, "momentum") && !strcmp(c.model_dir, "resnet_model"));
    CHECK_OK(fl_app_config_set(&c, "lr", "0.5"));
    CHECK_NEAR(c.lr, 0.5, 1e-12);
    CHECK_FAILS(fl_app_config_set(&c, "lr", "fast"), FL_EINVAL, "option lr: 'fast' is not a number");
    CHECK_FAILS(fl_app_config_set(&c, "batch_size", "0"), FL_EINVAL, "option batch_size: 0 is out of range");
    CHECK_FAILS(fl_app_config_set(&c, "nope", "1"), FL_EINVAL, "unknown option 'nope'");
    setup();
    char path[128];
    snprintf(path, sizeof path, "%s/cfg", DIR_);
    FILE *f = fopen(path, "w");
    fputs("# a config\nepochs = 3\nbatch_size: 16\n\nlr=abc\n", f);
    fclose(f);
    CHECK_FAILS(fl_app_config_load(&c, path), FL_EINVAL, "cfg:5: option lr: 'abc' is not a number");
    CHECK_EQ_INT(c.epochs, 3);
    CHECK_EQ_INT(c.batch_size, 16);
    c.mode[0] = 0;
    CHECK_OK(fl_app_config_set(&c, "mode", "async"));
    CHECK_FAILS(fl_app_train(fl_app_find("resnet"), &c), FL_EINVAL, "trains in modes local,collective, not 'async'");
    /* the idx reader has no Hogwild threads: --thread above 1 is refused, not ignored */
    CHECK_OK(fl_app_config_set(&c, "mode", "local"));
    CHECK_OK(fl_app_config_set(&c, "thread", "2"));
    CHECK_FAILS(fl_app_train(fl_app_find("resnet"), &c), FL_EUNSUPPORTED,
                "option thread: the idx reader trains with one thread per process");
    cleanup();
}

/* ---- convergence ---------------------------------------------------------------------------- */

static double train_ctr(const char *model, const char *mode)
{
    const fl_app_row *row = fl_app_find(model);
    CHECK(row);
    fl_app_config c;
    fl_app_config_default(row, &c);
    snprintf(c.train_data, sizeof c.train_data, "%s/criteo/train", DIR_);
    snprintf(c.test_data, sizeof c.test_data, "%s/criteo/test", DIR_);
    snprintf(c.model_dir, sizeof c.model_dir, "%s/%s_model", DIR_, model);
    CHECK_OK(fl_app_config_set(&c, "mode", mode));
    CHECK_OK(fl_app_config_set(&c, "epochs", "1"));
    CHECK_OK(fl_app_config_set(&c, "batch_size", "64"));
    CHECK_OK(fl_app_config_set(&c, "lr", "0.003"));
    CHECK_OK(fl_app_config_set(&c, "sparse_feature_dim", "10007"));
    CHECK_OK(fl_app_config_set(&c, "embedding_size", "8"));
    CHECK_OK(fl_app_config_set(&c, "hidden", "32,32"));
    CHECK_OK(fl_app_config_set(&c, "thread", "1")); /* one trainer: the same result every run */
    CHECK_OK(fl_app_train(row, &c));
    double auc = 0;
    CHECK_OK(fl_app_eval(row, &c, &auc));
    return auc;
}

/* The planted model's ceiling AUC is about 0.79; one pass over 20,000 rows reaches 0.73
 * (DeepFM) and 0.74 (Wide&Deep); the bound leaves room for other BLAS builds. */
TEST(deepfm_and_wide_deep_converge_on_planted_criteo_data)
{
    setup();
    criteo_data(20000);
    double a = train_ctr("deepfm", "local");
    printf("  deepfm test auc %.4f\n", a);
    CHECK(a > 0.70);
    double b = train_ctr("wide_deep", "local");
    printf("  wide_deep test auc %.4f\n", b);
    CHECK(b > 0.70);
    cleanup();
}

/* Two epochs over 800 planted images: test accuracy above 0.9 (chance 0.25). */
TEST(resnet_converges_on_planted_images)
{
    setup();
    idx_split("train", 800, 1);
    idx_split("t10k", 200, 2);
    const fl_app_row *row = fl_app_find("resnet");
    fl_app_config c;
    fl_app_config_default(row, &c);
    snprintf(c.train_data, sizeof c.train_data, "%s/images", DIR_);
    snprintf(c.test_data, sizeof c.test_data, "%s/images", DIR_);
    snprintf(c.model_dir, sizeof c.model_dir, "%s/rn_model", DIR_);
    CHECK_OK(fl_app_config_set(&c, "depth", "8"));
    CHECK_OK(fl_app_config_set(&c, "width", "4"));
    CHECK_OK(fl_app_config_set(&c, "epochs", "2"));
    CHECK_OK(fl_app_config_set(&c, "batch_size", "32"));
    CHECK_OK(fl_app_train(row, &c));
    double acc = 0;
    CHECK_OK(fl_app_eval(row, &c, &acc));
    printf("  resnet test accuracy %.4f\n", acc);
    CHECK(acc > 0.9);
    cleanup();
}

/* ---- the text models: simnet_bow and word2vec on fleet-datagen's planted data ---------------- */

static void text_data(void)
{
    int rc;
    char *o = run_rc("gen_simnet", 60, &rc, "%s/tools/fleet-datagen simnet --rows 10000 --out %s/sn --seed 5", BIN, DIR_);
    if (rc) TFAIL("fleet-datagen simnet failed:\n%s", o);
    free(o);
    o = run_rc("gen_w2v", 60, &rc, "%s/tools/fleet-datagen word2vec --sentences 8000 --files 2 --out %s/w2v --seed 5", BIN,
               DIR_);
    if (rc) TFAIL("fleet-datagen word2vec failed:\n%s", o);
    free(o);
}

/* simnet_bow: 3 epochs over 10,000 triples reach an order rate of about 0.88 (generator's
 * ceiling 0.96, chance 0.5); eval and infer of the saved model agree with training's test.
 * word2vec: 2 epochs over 8,000 sentences place every clustered word next to its cluster
 * (cluster accuracy 1.0, analogy accuracy about 0.99; chance about 0.06).  Bounds: 0.85, 0.9. */
TEST(simnet_bow_and_word2vec_converge_then_eval_the_saved_simnet)
{
    setup();
    text_data();
    const fl_app_row *sn = fl_app_find("simnet_bow"), *w2v = fl_app_find("word2vec");
    fl_app_config c;
    fl_app_config_default(sn, &c);
    snprintf(c.train_data, sizeof c.train_data, "%s/sn/train", DIR_);
    snprintf(c.test_data, sizeof c.test_data, "%s/sn/test", DIR_);
    snprintf(c.model_dir, sizeof c.model_dir, "%s/sn_model", DIR_);
    CHECK_OK(fl_app_config_set(&c, "mode", "local"));
    CHECK_OK(fl_app_config_set(&c, "thread", "1"));
    CHECK_OK(fl_app_train(sn, &c));
    double rate = 0;
    CHECK_OK(fl_app_eval(sn, &c, &rate));
    printf("  simnet_bow test order rate %.4f\n", rate);
    CHECK(rate > 0.85);
    int rc;
    char *o = run_rc("sn_eval", 60, &rc,
                     "%s/tools/fleet-lightning eval --model simnet_bow --model_dir %s/sn_model "
                     "--test_data %s/sn/test",
                     BIN, DIR_, DIR_);
    if (rc) TFAIL("eval failed:\n%s", o);
    CHECK_NEAR(after(o, "test order_rate "), rate, 1e-4);
    CHECK_STR_HAS(o, "on 2000 examples");
    free(o);
    o = run_rc("sn_infer", 60, &rc,
               "%s/tools/fleet-lightning infer --model simnet_bow --model_dir %s/sn_model "
               "--test_data %s/sn/test --output %s/cos",
               BIN, DIR_, DIR_, DIR_);
    if (rc) TFAIL("infer failed:\n%s", o);
    CHECK_STR_HAS(o, "2000 predictions written");
    free(o);

    fl_app_config_default(w2v, &c);
    snprintf(c.train_data, sizeof c.train_data, "%s/w2v/train", DIR_);
    snprintf(c.test_data, sizeof c.test_data, "%s/w2v", DIR_);
    snprintf(c.model_dir, sizeof c.model_dir, "%s/w2v_model", DIR_);
    CHECK_OK(fl_app_config_set(&c, "mode", "local"));
    CHECK_OK(fl_app_config_set(&c, "thread", "1"));
    CHECK_OK(fl_app_train(w2v, &c));
    double acc = 0;
    CHECK_OK(fl_app_eval(w2v, &c, &acc));
    printf("  word2vec test cluster accuracy %.4f\n", acc);
    CHECK(acc > 0.9);
    /* the planted structure is needed: a directory without clusters.txt says so */
    snprintf(c.test_data, sizeof c.test_data, "%s/sn/test", DIR_);
    CHECK_FAILS(fl_app_eval(w2v, &c, &acc), FL_ENOTFOUND, "no clusters.txt there nor in its parent directory");
    CHECK_FAILS(fl_app_infer(w2v, &c), FL_EUNSUPPORTED, "infer over a corpus is not supported");
    cleanup();
}

/* word2vec with one parameter server and two workers (async, one corpus file each). */
TEST(word2vec_under_fleetrun_with_a_server)
{
    setup();
    text_data();
    int rc;
    char *o = run_rc("w2v_ps", 120, &rc,
                     "%s/tools/fleetrun --server_num 1 --worker_num 2 --log_dir %s/log %s/tools/fleet-lightning train "
                     "--model word2vec --train_data %s/w2v/train --test_data %s/w2v --model_dir %s/m "
                     "--metrics_dir %s/metrics",
                     BIN, DIR_, BIN, DIR_, DIR_, DIR_, DIR_);
    if (rc) TFAIL("fleetrun failed:\n%s", o);
    CHECK_STR_HAS(o, "mode async, worker 0 of 2");
    double acc = after(o, "test cluster accuracy ");
    printf("  word2vec (1 server, 2 workers) cluster accuracy %.4f, analogy accuracy %.4f\n", acc,
           after(o, "analogy accuracy "));
    CHECK(acc > 0.9);
    free(o);
    o = run_rc("w2v_eval", 60, &rc,
               "%s/tools/fleet-lightning eval --model word2vec --model_dir %s/m --test_data %s/w2v/train", BIN, DIR_, DIR_);
    if (rc) TFAIL("eval failed:\n%s", o);
    CHECK_NEAR(after(o, "test cluster accuracy "), acc, 1e-4);
    free(o);
    o = run_rc("w2v_csv", 10, &rc, "cat %s/metrics/metrics.rank0.csv %s/metrics/metrics.rank1.csv", DIR_, DIR_);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_HAS(o, ",lightning/test_cluster_acc,");
    CHECK_STR_HAS(o, ",1,1,"); /* rank 1 wrote its epochs too */
    free(o);
    cleanup();
}

/* ---- the tool --------------------------------------------------------------------------------- */

TEST(cli_errors_are_clear)
{
    setup();
    int rc;
    char *o = run_rc("e1", 20, &rc, "%s/tools/fleet-lightning train --model nope --train_data x", BIN);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_HAS(o, "unknown model 'nope' (models: ctr_dnn, deepfm, wide_deep, simnet_bow, word2vec, resnet, vgg, "
                     "transformer, bert)");
    free(o);
    o = run_rc("e2", 20, &rc, "%s/tools/fleet-lightning train --model deepfm --train_data x --lr fast", BIN);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_HAS(o, "option lr: 'fast' is not a number");
    free(o);
    o = run_rc("e3", 20, &rc, "%s/tools/fleet-lightning train --model deepfm --train_data %s/missing --mode local", BIN,
               DIR_);
    CHECK_EQ_INT(rc, 1);
    CHECK_STR_HAS(o, "missing': No such file or directory");
    CHECK_STR_HAS(o, "train_data '");
    free(o);
    o = run_rc("e4", 20, &rc, "%s/tools/fleet-lightning train --model deepfm", BIN);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_HAS(o, "train needs --train_data DIR");
    free(o);
    o = run_rc("e5", 20, &rc, "%s/tools/fleet-lightning train --model deepfm --train_data x --batch 5", BIN);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_HAS(o, "unknown option --batch");
    free(o);
    o = run_rc("e6", 20, &rc, "%s/tools/fleet-lightning --help", BIN);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_HAS(o, "--batch_size");
    CHECK_STR_HAS(o, "(default: 64)");
    free(o);
    o = run_rc("e7", 20, &rc, "%s/tools/fleet-lightning list", BIN);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_HAS(o, "deepfm     ps     criteo    auc         local");
    CHECK_STR_HAS(o, "resnet     coll   images    accuracy    local,collective");
    CHECK_STR_HAS(o, "simnet_bow ps     multislot order_rate  local");
    CHECK_STR_HAS(o, "word2vec   ps     word2vec  cluster_acc local");
    free(o);
    cleanup();
}

/* DeepFM with one parameter server and two workers (async), then eval and infer of its saved
 * model with no servers. */
TEST(deepfm_under_fleetrun_with_a_server_then_eval_and_infer)
{
    setup();
    criteo_data(12000);
    int rc;
    char *o = run_rc("ps", 120, &rc,
                     "%s/tools/fleetrun --server_num 1 --worker_num 2 --log_dir %s/log %s/tools/fleet-lightning train "
                     "--model deepfm --train_data %s/criteo/train --test_data %s/criteo/test --model_dir %s/m "
                     "--epochs 1 --batch_size 64 --lr 0.003 --sparse_feature_dim 10007 --embedding_size 8 "
                     "--hidden 32,32 --metrics_dir %s/metrics",
                     BIN, DIR_, BIN, DIR_, DIR_, DIR_, DIR_);
    if (rc) TFAIL("fleetrun failed:\n%s", o);
    CHECK_STR_HAS(o, "mode async, worker 0 of 2");
    double auc = after(o, "test auc ");
    printf("  deepfm async (1 server, 2 workers) test auc %.4f\n", auc);
    /* Local training of the same job on a loaded 2-core machine: 0.709-0.713 (6 runs).
     * Async: with the adaptive queue of 20, 0.690-0.717 over 11 runs; its tower is small,
     * so the default is now the queue of 1 (0.708-0.717 over 11 runs, 0.709-0.716 over 6).
     * The bound checks that it learns as async should; the distance to local is measured in
     * BENCHMARKS.md, not here. */
    CHECK(auc > 0.70);
    free(o);
    o = run_rc("eval", 60, &rc, "%s/tools/fleet-lightning eval --model deepfm --model_dir %s/m --test_data %s/criteo/test",
               BIN, DIR_, DIR_);
    CHECK_EQ_INT(rc, 0);
    CHECK_NEAR(after(o, "test auc "), auc, 1e-4);
    free(o);
    o = run_rc("infer", 60, &rc,
               "%s/tools/fleet-lightning infer --model deepfm --model_dir %s/m --test_data %s/criteo/test --output %s/p",
               BIN, DIR_, DIR_, DIR_);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_HAS(o, "4000 predictions written");
    free(o);
    char path[128];
    char *csv = run_rc("csv", 10, &rc, "cat %s/metrics/metrics.rank0.csv", DIR_);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_HAS(csv, "wall_time,rank,epoch,step,tag,value");
    CHECK_STR_HAS(csv, ",0,0,"); /* rank 0, epoch 0 */
    CHECK_STR_HAS(csv, ",lightning/loss,");
    CHECK_STR_HAS(csv, ",lightning/test_auc,");
    free(csv);
    snprintf(path, sizeof path, "%s/metrics/metrics.rank1.csv", DIR_);
    CHECK(access(path, R_OK) == 0);
    cleanup();
}

/* Any mode of the library's table trains (half_async here), and the mode is the one the
 * strategy selects: --mode async with a strategy file that sets k_steps trains in GEO mode
 * with local tables (it used to build distributed tables that GEO refuses). */
TEST(half_async_and_a_strategy_file_selecting_geo_under_fleetrun)
{
    setup();
    criteo_data(8000);
    const char *common = "--model ctr_dnn --epochs 1 --batch_size 64 --lr 0.003 --sparse_feature_dim 10007 "
                         "--embedding_size 8 --hidden 32,32";
    int rc;
    char *o = run_rc("half", 120, &rc,
                     "%s/tools/fleetrun --server_num 1 --worker_num 2 --log_dir %s/log1 %s/tools/fleet-lightning train "
                     "--mode half_async --train_data %s/criteo/train --test_data %s/criteo/test --model_dir %s/m1 %s",
                     BIN, DIR_, BIN, DIR_, DIR_, DIR_, common);
    if (rc) TFAIL("fleetrun --mode half_async failed:\n%s", o);
    CHECK_STR_HAS(o, "mode half_async, worker 0 of 2");
    CHECK(after(o, "test auc ") > 0.65);
    free(o);
    char path[128];
    snprintf(path, sizeof path, "%s/geo.conf", DIR_);
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs("a_sync_configs.k_steps=5\n", f);
    CHECK(fclose(f) == 0);
    o = run_rc("geo", 120, &rc,
               "%s/tools/fleetrun --server_num 1 --worker_num 2 --log_dir %s/log2 %s/tools/fleet-lightning train "
               "--mode async --strategy %s --train_data %s/criteo/train --test_data %s/criteo/test --model_dir %s/m2 %s",
               BIN, DIR_, BIN, path, DIR_, DIR_, DIR_, common);
    if (rc) TFAIL("fleetrun --mode async with a GEO strategy file failed:\n%s", o);
    CHECK_STR_HAS(o, "selects geo mode");
    CHECK_STR_HAS(o, "mode geo, worker 0 of 2");
    CHECK(after(o, "test auc ") > 0.6);
    free(o);
    /* a name outside the table: the modes there are */
    o = run_rc("bad", 20, &rc, "%s/tools/fleet-lightning train --mode halfasync --train_data %s/criteo/train %s", BIN, DIR_,
               common);
    CHECK(rc != 0);
    CHECK_STR_HAS(o, "option mode: expected local, collective or a parameter-server mode (sync, half_async, async, geo)");
    free(o);
    cleanup();
}

/* The text after `key` in out up to the end of its line (into buf; fails without it). */
static const char *line_after(const char *out, const char *key, char *buf, size_t cap)
{
    const char *p = strstr(out, key);
    if (!p) TFAIL("no '%s' in:\n%s", key, out);
    p += strlen(key);
    snprintf(buf, cap, "%.*s", (int)strcspn(p, "\n"), p);
    return buf;
}

/* --checkpoint_dir: a checkpoint after every epoch; a run started again (as fleetrun
 * --max_restart does) resumes after the newest.  Locally with one thread the resumed run
 * ends exactly where an uninterrupted one ends (epoch 3's loss and metric, the test AUC):
 * the parameters, the optimizer state, the step and the data order were restored.  With a
 * parameter server the servers load the checkpoint's tables and the workers resume. */
TEST(checkpoint_dir_resumes_after_a_restart)
{
    setup();
    criteo_data(6000);
    char common[512];
    snprintf(common, sizeof common,
             "--model ctr_dnn --train_data %s/criteo/train --test_data %s/criteo/test --batch_size 64 --lr 0.003 "
             "--sparse_feature_dim 10007 --embedding_size 8 --hidden 32,32",
             DIR_, DIR_);
    int rc;
    char *whole = run_rc("whole", 120, &rc,
                         "%s/tools/fleet-lightning train %s --mode local --thread 1 --epochs 3 --checkpoint_dir %s/ck1 "
                         "--model_dir %s/m1",
                         BIN, common, DIR_, DIR_);
    if (rc) TFAIL("training failed:\n%s", whole);
    CHECK(!strstr(whole, "resumed"));
    char *first = run_rc("first", 120, &rc,
                         "%s/tools/fleet-lightning train %s --mode local --thread 1 --epochs 2 --checkpoint_dir %s/ck2 "
                         "--model_dir %s/m2",
                         BIN, common, DIR_, DIR_);
    if (rc) TFAIL("training failed:\n%s", first);
    char *again = run_rc("again", 120, &rc,
                         "%s/tools/fleet-lightning train %s --mode local --thread 1 --epochs 3 --checkpoint_dir %s/ck2 "
                         "--model_dir %s/m3",
                         BIN, common, DIR_, DIR_);
    if (rc) TFAIL("the restarted training failed:\n%s", again);
    char a[256], b[256];
    /* 6000 rows in 2 files, one thread: 94 batches an epoch */
    CHECK_STR_HAS(again, "ctr_dnn: resumed after epoch 2 (step 188) from checkpoint_dir");
    CHECK(!strstr(again, "epoch 1/3") && !strstr(again, "epoch 2/3"));
    line_after(whole, "epoch 3/3: loss ", a, sizeof a);
    line_after(again, "epoch 3/3: loss ", b, sizeof b);
    CHECK(strstr(a, " in ") && strstr(b, " in "));
    *strstr(a, " in ") = *strstr(b, " in ") = 0; /* the times differ */
    if (strcmp(a, b)) TFAIL("epoch 3 after the restart: %s; uninterrupted: %s", b, a);
    printf("  epoch 3 uninterrupted and resumed: loss %.24s\n", a);
    CHECK_NEAR(after(whole, "test auc "), after(again, "test auc "), 0); /* the same 4 printed digits */
    free(whole);
    free(first);
    free(again);

    /* one server, two workers: epoch 1, then a job of 2 epochs on the same directory */
    char *o = run_rc("ps1", 120, &rc,
                     "%s/tools/fleetrun --server_num 1 --worker_num 2 --log_dir %s/log1 %s/tools/fleet-lightning train "
                     "%s --epochs 1 --checkpoint_dir %s/ck3 --model_dir %s/m4",
                     BIN, DIR_, BIN, common, DIR_, DIR_);
    if (rc) TFAIL("fleetrun failed:\n%s", o);
    free(o);
    o = run_rc("ps2", 120, &rc,
               "env FLEET_LOG_LEVEL=info %s/tools/fleetrun --server_num 1 --worker_num 2 --log_dir %s/log2 "
               "%s/tools/fleet-lightning train %s "
               "--epochs 2 --checkpoint_dir %s/ck3 --model_dir %s/m5",
               BIN, DIR_, BIN, common, DIR_, DIR_);
    if (rc) TFAIL("the restarted fleetrun job failed:\n%s", o);
    CHECK_STR_HAS(o, "resumed after epoch 1 (step ");
    CHECK_STR_HAS(o, "epoch 2/2");
    CHECK(!strstr(o, "epoch 1/2"));
    CHECK(after(o, "test auc ") > 0.6);
    free(o);
    char *log = run_rc("slog", 10, &rc, "cat %s/log2/serverlog.0", DIR_);
    CHECK_STR_HAS(log, "ck3/ckpt-0000000001"); /* the server started from the checkpoint's tables */
    free(log);
    cleanup();
}

/* ResNet on two collective trainers (fleetrun --nproc_per_node 2). */
TEST(resnet_under_fleetrun_collective)
{
    setup();
    idx_split("train", 640, 1);
    idx_split("t10k", 200, 2);
    int rc;
    char *o = run_rc("coll", 120, &rc,
                     "%s/tools/fleetrun --nproc_per_node 2 --log_dir %s/log %s/tools/fleet-lightning train --model resnet "
                     "--train_data %s/images --test_data %s/images --model_dir %s/m --depth 8 --width 4 --epochs 2 "
                     "--batch_size 16",
                     BIN, DIR_, BIN, DIR_, DIR_, DIR_);
    if (rc) TFAIL("fleetrun failed:\n%s", o);
    CHECK_STR_HAS(o, "mode collective, worker 0 of 2");
    CHECK(after(o, "test accuracy ") > 0.9);
    free(o);
    cleanup();
}

/* simnet_bow with 2 Hogwild threads on a parameter server scores what it scores locally
 * with 2 threads.  The data is cut into 4 files: a dataset has one reader per file, so on
 * one file --thread 2 trains with 1 thread (the tool now says so, and a worker that the file
 * split leaves without a file is named).  Half-async has no staleness on one worker (the
 * threads meet at every step end), so any gap is in the threads' handling: their split of
 * the data (each epoch reads all 10,000 triples once), their updates, their metric.
 * Measured over 32 seeds, interleaved: local 0.8820, half_async on 1 server and 1 worker
 * 0.8799, async 0.8765 (the communicator's staleness; docs/models_text.md).  One run's sd
 * is 0.006-0.009 and seeds 1-8 favour local (means of 8 differed by 0.008-0.013 in repeated
 * runs), so the bound on the means is 0.03: the sharp checks are the thread count and
 * every epoch reading 10,000 examples. */
TEST(simnet_bow_hogwild_threads_on_a_server_match_local)
{
    setup();
    int rc;
    char *o = run_rc("gen_sn4", 60, &rc, "%s/tools/fleet-datagen simnet --rows 10000 --files 4 --out %s/sn4 --seed 5", BIN,
                     DIR_);
    if (rc) TFAIL("fleet-datagen simnet failed:\n%s", o);
    free(o);
    const char *common = "--model simnet_bow --thread 2";
    double local = 0, ps = 0;
    const int runs = 8;
    for (int seed = 1; seed <= runs; seed++) {
        o = run_rc("sn_local", 60, &rc,
                   "%s/tools/fleet-lightning train --mode local --seed %d --train_data %s/sn4/train "
                   "--test_data %s/sn4/test --model_dir %s/snl %s",
                   BIN, seed, DIR_, DIR_, DIR_, common);
        if (rc) TFAIL("local training failed:\n%s", o);
        CHECK_STR_HAS(o, "3 epoch(s), 2 thread(s)\n");
        CHECK_STR_HAS(o, "epoch 3/3: loss");
        local += after(o, "test order_rate ");
        free(o);
        o = run_rc("sn_ps", 120, &rc,
                   "%s/tools/fleetrun --server_num 1 --worker_num 1 --log_dir %s/snlog %s/tools/fleet-lightning train "
                   "--mode half_async --seed %d --train_data %s/sn4/train --test_data %s/sn4/test --model_dir %s/snp %s",
                   BIN, DIR_, BIN, seed, DIR_, DIR_, DIR_, common);
        if (rc) TFAIL("fleetrun --mode half_async failed:\n%s", o);
        CHECK_STR_HAS(o, "mode half_async, worker 0 of 1");
        CHECK_STR_HAS(o, "3 epoch(s), 2 thread(s)\n");
        for (int ep = 1; ep <= 3; ep++) {
            char key[64];
            snprintf(key, sizeof key, "epoch %d/3: loss ", ep);
            char line[256];
            CHECK(strstr(line_after(o, key, line, sizeof line), ", 10000 examples in "));
        }
        ps += after(o, "test order_rate ");
        free(o);
    }
    local /= runs;
    ps /= runs;
    printf("  simnet_bow 2 threads: local %.4f, half_async 1 server 1 worker %.4f (means of %d seeds)\n", local, ps, runs);
    CHECK(local > 0.86);
    CHECK_NEAR(ps, local, 0.03);
    /* one file: one reader, so one thread, and the banner says why */
    text_data();
    o = run_rc("sn_one", 60, &rc,
               "%s/tools/fleet-lightning train --mode local --epochs 1 --train_data %s/sn/train --model_dir %s/sn1 %s", BIN,
               DIR_, DIR_, common);
    if (rc) TFAIL("local training failed:\n%s", o);
    CHECK_STR_HAS(o, "1 thread(s) (thread 2: train_data gives this worker 1 file(s), one reader each)");
    free(o);
    o = run_rc("sn_two", 60, &rc,
               "%s/tools/fleetrun --server_num 1 --worker_num 2 --log_dir %s/snlog2 %s/tools/fleet-lightning train "
               "--mode async --epochs 1 --train_data %s/sn/train --model_dir %s/sn2 %s",
               BIN, DIR_, BIN, DIR_, DIR_, common);
    CHECK(rc != 0);
    CHECK_STR_HAS(o, "holds 1 file(s) for 2 workers: worker 1 gets none");
    free(o);
    cleanup();
}

/* ---- resnet on JPEG images ---------------------------------------------------------------------- */

#ifdef FL_HAVE_TURBOJPEG
/* Image i of class k (36 x 44): a solid colour per class (red, green, blue) with noise and a
 * darker band whose place varies, so no two files are the same. */
static void class_jpeg(const char *path, int k, int i)
{
    enum { H = 36, W = 44 };
    static uint8_t px[H * W * 3];
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(k * 100 + i + 1);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int ch = 0; ch < 3; ch++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                int v = (ch == k ? 200 : 40) + (int)(s >> 59) - 16 - ((y / 6) == i % 6 ? 30 : 0);
                px[(y * W + x) * 3 + ch] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    th_write_jpeg(path, px, H, W, 90);
}
#endif

/* resnet through fleet-lightning on JPEG images: a directory of 3 class folders (24 images)
 * to train at image_size 32, a list file to test (eval transform), the classes from the
 * reader; the test accuracy well above chance (1/3).  fl_app_load_imagenet_from_file sets
 * train_data; a corrupt JPEG in the training data fails naming the file. */
TEST(resnet_trains_on_jpeg_images_from_a_directory_and_a_list)
{
#ifndef FL_HAVE_TURBOJPEG
    printf("  skipped: built without libjpeg-turbo\n");
#else
    setup();
    const char *cls[3] = {"0_red", "1_green", "2_blue"}; /* labels in byte order of the names */
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/jpg", DIR_);
    CHECK(mkdir(p, 0755) == 0);
    snprintf(p, sizeof p, "%s/jpg/train", DIR_);
    CHECK(mkdir(p, 0755) == 0);
    snprintf(p, sizeof p, "%s/jpg/val.txt", DIR_);
    FILE *list = fopen(p, "w");
    CHECK(list != NULL);
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s/jpg/train/%s", DIR_, cls[k]);
        CHECK(mkdir(p, 0755) == 0);
        for (int i = 0; i < 8; i++) {
            snprintf(p, sizeof p, "%s/jpg/train/%s/%d.jpg", DIR_, cls[k], i);
            class_jpeg(p, k, i);
        }
        for (int i = 0; i < 4; i++) {
            snprintf(p, sizeof p, "%s/jpg/val_%d_%d.jpg", DIR_, k, i);
            class_jpeg(p, k, 20 + i);
            fprintf(list, "val_%d_%d.jpg %d\n", k, i, k);
        }
    }
    CHECK(fclose(list) == 0);

    int rc;
    char *o = run_rc("rn_jpeg", 300, &rc,
                     "%s/tools/fleet-lightning train --model resnet --mode local --depth 8 --width 4 "
                     "--image_size 32 --batch_size 8 --epochs 8 --lr 0.05 --train_data %s/jpg/train "
                     "--test_data %s/jpg/val.txt --model_dir %s/rn_jpeg_model",
                     BIN, DIR_, DIR_, DIR_);
    CHECK_EQ_INT(rc, 0);
    char buf[128];
    double acc = atof(line_after(o, "resnet: test accuracy ", buf, sizeof buf));
    printf("  resnet on JPEG images: test accuracy %.4f\n", acc);
    CHECK(acc > 0.6);
    CHECK_STR_HAS(o, "on 12 examples");
    free(o);

    /* two collective trainers on a list of 23 images: shares of 12 and 11, one batch of 11
     * each per epoch (the smaller share's count), so neither waits for the other */
    snprintf(p, sizeof p, "%s/jpg/train.txt", DIR_);
    list = fopen(p, "w");
    CHECK(list != NULL);
    for (int j = 0; j < 23; j++) fprintf(list, "train/%s/%d.jpg %d\n", cls[j % 3], j / 3, j % 3);
    CHECK(fclose(list) == 0);
    o = run_rc("rn_jpeg_coll", 120, &rc,
               "%s/tools/fleetrun --nproc_per_node 2 --log_dir %s/jlog %s/tools/fleet-lightning train --model resnet "
               "--depth 8 --width 4 --image_size 32 --batch_size 11 --epochs 2 --train_data %s/jpg/train.txt "
               "--test_data %s/jpg/val.txt --model_dir %s/rn_jpeg_coll",
               BIN, DIR_, BIN, DIR_, DIR_, DIR_);
    if (rc) TFAIL("fleetrun failed:\n%s", o);
    CHECK_STR_HAS(o, "mode collective, worker 0 of 2");
    CHECK_STR_HAS(o, "epoch 2/2: loss");
    CHECK_STR_HAS(o, "11 examples in");
    CHECK_STR_HAS(o, "on 12 examples");
    free(o);

    const fl_app_row *row = fl_app_find("resnet");
    fl_app_config c;
    fl_app_config_default(row, &c);
    CHECK_EQ_INT(c.image_size, 224);
    int nc = 0;
    snprintf(p, sizeof p, "%s/jpg/train", DIR_);
    CHECK_OK(fl_app_load_imagenet_from_file(&c, p, &nc));
    CHECK_EQ_INT(nc, 3);
    CHECK(!strcmp(c.train_data, p));
    CHECK_FAILS(fl_app_load_imagenet_from_file(&c, NULL, NULL), FL_EINVAL, "path is NULL");
    snprintf(p, sizeof p, "%s/nothing_here", DIR_);
    CHECK_FAILS(fl_app_load_imagenet_from_file(&c, p, NULL), FL_ENOTFOUND, "nothing_here");
    /* a corrupt JPEG among the training images: the error names it */
    snprintf(p, sizeof p, "%s/jpg/train/1_green/bad.jpg", DIR_);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    CHECK(fputs("\xff\xd8\xff not really a JPEG", f) >= 0);
    CHECK(fclose(f) == 0);
    CHECK_OK(fl_app_config_set(&c, "depth", "8"));
    CHECK_OK(fl_app_config_set(&c, "width", "4"));
    CHECK_OK(fl_app_config_set(&c, "image_size", "32"));
    CHECK_OK(fl_app_config_set(&c, "batch_size", "25"));
    snprintf(c.model_dir, sizeof c.model_dir, "%s/rn_bad_model", DIR_);
    CHECK_FAILS(fl_app_train(row, &c), FL_ECORRUPT, "bad.jpg");
    cleanup();
#endif
}

TEST_MAIN(T(deepfm_builder_shapes_and_gradients), T(wide_deep_builder_shapes_and_gradients),
          T(resnet_builder_shapes_gradients_and_errors), T(resnet50_builds_and_runs_a_few_steps),
          T(cosine_decay_follows_paddle), T(registry_rows_and_options),
          T(deepfm_and_wide_deep_converge_on_planted_criteo_data), T(resnet_converges_on_planted_images),
          T(cli_errors_are_clear), T(deepfm_under_fleetrun_with_a_server_then_eval_and_infer),
          T(half_async_and_a_strategy_file_selecting_geo_under_fleetrun), T(resnet_under_fleetrun_collective),
          T(checkpoint_dir_resumes_after_a_restart), T(simnet_bow_and_word2vec_converge_then_eval_the_saved_simnet),
          T(word2vec_under_fleetrun_with_a_server), T(simnet_bow_hogwild_threads_on_a_server_match_local),
          T(resnet_trains_on_jpeg_images_from_a_directory_and_a_list))
