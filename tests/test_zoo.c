/*
 * test_zoo.c - the text models of fleet/models.h end to end: simnet-bow and word2vec
 * builders (shapes, parameter sharing, configuration errors), finite-difference gradients
 * of each whole network on a tiny batch, a short training run per model on data from
 * `fleet-datagen simnet` / `fleet-datagen word2vec` reaching a stated bound on the planted
 * structure, parameter-server runs of the examples under fleetrun against local runs, and
 * the generators' determinism and option errors.
 */
#include <limits.h>
#include <stdarg.h>

#include "gradcheck.h"
#include "cmdrun.h"

static char BIN[4096], DIR_[64];

static void setup(void)
{
    th_build_dirs(BIN, NULL);
    th_mktemp(DIR_, sizeof DIR_, "fl_zoo");
}

static void cleanup(void) { th_rmtree(DIR_); }

#define run(name, seconds, rc, ...) th_cmd(DIR_, name, seconds, rc, __VA_ARGS__)
#define after th_after

static fl_model_simnet_config small_simnet(int64_t dict)
{
    fl_model_simnet_config c = fl_model_simnet_default();
    c.dict_dim = dict, c.emb_dim = 8, c.hid_dim = 6;
    return c;
}

TEST(simnet_builder_shapes_and_errors)
{
    fl_prog *p = fl_prog_create();
    fl_model_simnet_config c = small_simnet(50);
    fl_model_simnet m;
    CHECK_OK(fl_model_simnet_build(p, &c, &m));
    CHECK_EQ_INT(m.nuse_var, 3);
    CHECK(!strcmp(fl_var_name(m.use_var[0]), "query_ids") && !strcmp(fl_var_name(m.use_var[2]), "neg_title_ids"));
    CHECK_EQ_INT(fl_var_lod_level(m.pos_title), 1);
    CHECK_EQ_INT(fl_var_ndim(m.cos_pos), 2);
    CHECK_EQ_INT(fl_var_shape(m.cos_neg)[1], 1);
    CHECK_EQ_INT(fl_var_shape(m.loss)[0], 1);
    fl_var *emb = fl_prog_var(p, "__emb__"), *fc = fl_prog_var(p, "__fc__"), *qfc = fl_prog_var(p, "__q_fc__");
    CHECK(emb && fc && qfc);
    CHECK_EQ_INT(fl_var_shape(emb)[0], 50);
    CHECK_EQ_INT(fl_var_shape(emb)[1], 8);
    CHECK_EQ_INT(fl_var_shape(fc)[1], 6);
    /* one table and two fc layers (titles share theirs): 2 + 2 + 1 parameters */
    int params = 0;
    for (int i = 0; i < fl_prog_num_vars(p); i++) params += fl_var_is_param(fl_prog_var_at(p, i));
    CHECK_EQ_INT(params, 5);
    fl_prog_free(p);
    p = fl_prog_create();
    c.hid_dim = 0;
    CHECK(fl_model_simnet_build(p, &c, &m) == FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "hid_dim");
    fl_prog_free(p);
}

TEST(word2vec_builder_shapes_and_errors)
{
    fl_prog *p = fl_prog_create();
    fl_model_word2vec_config c = fl_model_word2vec_default();
    c.dict_size = 40, c.embedding_size = 6, c.neg_num = 3;
    fl_model_word2vec m;
    CHECK_OK(fl_model_word2vec_build(p, &c, &m));
    CHECK_EQ_INT(m.nuse_var, 3);
    CHECK_EQ_INT(fl_var_shape(m.neg_word)[1], 3);
    CHECK_EQ_INT(fl_var_shape(m.emb)[1], 6);
    CHECK_EQ_INT(fl_var_shape(fl_prog_var(p, "emb_w"))[0], 40);
    CHECK_EQ_INT(fl_var_shape(fl_prog_var(p, "emb_b"))[1], 1);
    int params = 0;
    for (int i = 0; i < fl_prog_num_vars(p); i++) params += fl_var_is_param(fl_prog_var_at(p, i));
    CHECK_EQ_INT(params, 3); /* emb, emb_w, emb_b: true and negative words share emb_w and emb_b */
    fl_prog_free(p);
    p = fl_prog_create();
    c.dict_size = 0;
    CHECK(fl_model_word2vec_build(p, &c, &m) == FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "dict_size");
    fl_prog_free(p);
}

static fl_tensor *ids(int64_t n, const int64_t *v, const int64_t *lod, int64_t nlod)
{
    fl_tensor *t = th_i64(2, (const int64_t[]){n, 1}, v);
    if (lod) CHECK_OK(fl_tensor_set_lod(t, lod, nlod));
    return t;
}

/* Every parameter of the network on 2 triples (dense table gradients; margin 2 keeps the
 * hinge away from its kink).  eps 2e-3, rtol 5e-2: the embedding rows start in +-0.1, where
 * eps 1e-2 is too coarse for cos_sim of sums of a few rows. */
TEST(simnet_gradients_on_a_tiny_batch)
{
    fl_prog *p = fl_prog_create();
    fl_model_simnet_config c = small_simnet(12);
    c.is_sparse = 0, c.margin = 2.0f;
    fl_model_simnet m;
    CHECK_OK(fl_model_simnet_build(p, &c, &m));
    fl_tensor *q = ids(5, (const int64_t[]){1, 2, 3, 4, 5}, (const int64_t[]){0, 2, 5}, 3);
    fl_tensor *pt = ids(4, (const int64_t[]){2, 6, 4, 7}, (const int64_t[]){0, 1, 4}, 3);
    fl_tensor *nt = ids(5, (const int64_t[]){8, 9, 10, 11, 0}, (const int64_t[]){0, 3, 5}, 3);
    fl_feed feed[3] = {{"query_ids", q}, {"pos_title_ids", pt}, {"neg_title_ids", nt}};
    gc_check(m.loss, feed, 3, NULL, (gc_opts){2e-3, 5e-2, 0, 0});
    fl_tensor_free(q), fl_tensor_free(pt), fl_tensor_free(nt);
    fl_prog_free(p);
}

/* Every parameter on 3 pairs with 2 negatives each.  emb_w starts at zero (as the
 * example), so emb's gradient is zero at the start: the check covers it as such and emb_w's
 * and emb_b's through the matmul and the true-word path. */
TEST(word2vec_gradients_on_a_tiny_batch)
{
    fl_prog *p = fl_prog_create();
    fl_model_word2vec_config c = fl_model_word2vec_default();
    c.dict_size = 9, c.embedding_size = 4, c.neg_num = 2, c.is_sparse = 0;
    fl_model_word2vec m;
    CHECK_OK(fl_model_word2vec_build(p, &c, &m));
    fl_tensor *in = th_i64(2, (const int64_t[]){3, 1}, (const int64_t[]){0, 3, 5});
    fl_tensor *tr = th_i64(2, (const int64_t[]){3, 1}, (const int64_t[]){1, 4, 6});
    fl_tensor *ng = th_i64(2, (const int64_t[]){3, 2}, (const int64_t[]){7, 8, 2, 1, 8, 0});
    fl_feed feed[3] = {{"input_word", in}, {"true_word", tr}, {"neg_word", ng}};
    gc_check(m.loss, feed, 3, NULL, (gc_opts){0, 0, 0, 0});
    fl_tensor_free(in), fl_tensor_free(tr), fl_tensor_free(ng);
    fl_prog_free(p);
}

static int list(const char *dir, char files[][512], int max)
{
    int n = 0;
    for (int i = 0; i < max; i++) {
        snprintf(files[n], 512, "%s/part-%05d", dir, i);
        if (access(files[n], R_OK) == 0) n++;
    }
    return n;
}

/* Adagrad, 3 epochs over 10,000 generated triples: the test order rate passes 0.85 (chance
 * 0.5; the generator's Bayes ceiling is printed, about 0.97 here). */
TEST(simnet_converges_on_planted_topics)
{
    setup();
    char *g = run("gen", 60, NULL, "%s/tools/fleet-datagen simnet --rows 10000 --files 2 --out %s/s --seed 3", BIN, DIR_);
    double ceiling = after(strstr(g, "  test"), "ceiling order rate ");
    char tr[2][512], te[1][512], d[300];
    snprintf(d, sizeof d, "%s/s/train", DIR_);
    int ntr = list(d, tr, 2);
    snprintf(d, sizeof d, "%s/s/test", DIR_);
    int nte = list(d, te, 1);
    CHECK_EQ_INT(ntr, 2);
    CHECK_EQ_INT(nte, 1);
    fl_prog *p = fl_prog_create();
    fl_model_simnet_config c = small_simnet(1200);
    c.emb_dim = 32, c.hid_dim = 32;
    fl_model_simnet m;
    CHECK_OK(fl_model_simnet_build(p, &c, &m));
    fl_opt *o = fl_opt_adagrad(0.1f, 1e-6f);
    CHECK_OK(fl_opt_minimize(o, m.loss));
    const char *trf[2] = {tr[0], tr[1]}, *tef[1] = {te[0]};
    fl_dataset *ds = fl_model_simnet_dataset(&m, "InMemoryDataset", 64, 1, trf, 2);
    CHECK(ds);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    for (int ep = 0; ep < 3; ep++) CHECK_OK(fl_exe_train_from_dataset(e, p, ds, 1, NULL, NULL, 0, 0, NULL));
    fl_prog *test = fl_prog_clone(p, 1);
    double rate = 0;
    int64_t pairs = 0;
    CHECK_OK(fl_model_simnet_eval(e, test, &m, tef, 1, &rate, &pairs));
    printf("  simnet: test order rate %.4f on %lld triples (ceiling %.4f)\n", rate, (long long)pairs, ceiling);
    fflush(stdout);
    CHECK_EQ_INT(pairs, 2000);
    CHECK(rate > 0.85 && rate <= ceiling + 0.02);
    fl_prog_free(test);
    fl_exe_free(e);
    fl_dataset_free(ds);
    fl_opt_free(o);
    fl_prog_free(p);
    free(g);
    cleanup();
}

/* SGD lr 1, batches of 64, 2 epochs over 8,000 sentences' pairs: nearest-neighbour cluster
 * accuracy and analogy accuracy both pass 0.9 (chance 0.055 and 0.002; about 1.0 and 0.997
 * measured). */
TEST(word2vec_learns_planted_clusters_and_analogies)
{
    setup();
    free(run("gen", 60, NULL, "%s/tools/fleet-datagen word2vec --sentences 8000 --out %s/w --seed 4", BIN, DIR_));
    char path[300], corpus[300], samples[300], cl[300], an[300];
    snprintf(path, sizeof path, "%s/w/dict.txt", DIR_);
    snprintf(corpus, sizeof corpus, "%s/w/train/part-00000", DIR_);
    snprintf(samples, sizeof samples, "%s/pairs", DIR_);
    snprintf(cl, sizeof cl, "%s/w/clusters.txt", DIR_);
    snprintf(an, sizeof an, "%s/w/analogies.txt", DIR_);
    fl_model_word2vec_vocab *v;
    CHECK_OK(fl_model_word2vec_vocab_load(path, &v));
    fl_model_word2vec_sampling s = fl_model_word2vec_sampling_default();
    int64_t pairs = 0;
    CHECK_OK(fl_model_word2vec_make_samples(v, &s, corpus, samples, &pairs));
    CHECK(pairs > 50000);
    fl_prog *p = fl_prog_create();
    fl_model_word2vec_config c = fl_model_word2vec_default();
    c.dict_size = fl_model_word2vec_vocab_size(v), c.embedding_size = 16;
    fl_model_word2vec m;
    CHECK_OK(fl_model_word2vec_build(p, &c, &m));
    fl_opt *o = fl_opt_sgd(1.0f);
    CHECK_OK(fl_opt_minimize(o, m.loss));
    const char *f[1] = {samples};
    fl_dataset *ds = fl_model_word2vec_dataset(&m, "InMemoryDataset", 64, 1, f, 1);
    CHECK(ds);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    for (int ep = 0; ep < 2; ep++) CHECK_OK(fl_exe_train_from_dataset(e, p, ds, 1, NULL, NULL, 0, 0, NULL));
    fl_prog *test = fl_prog_clone(p, 1);
    fl_model_word2vec_metrics r;
    CHECK_OK(fl_model_word2vec_eval(e, test, &m, v, cl, an, &r));
    printf("  word2vec: %lld pairs, cluster accuracy %.4f on %lld words, analogy accuracy %.4f on %lld\n", (long long)pairs,
           r.cluster_acc, (long long)r.clustered_words, r.analogy_acc, (long long)r.analogies);
    fflush(stdout);
    CHECK_EQ_INT(r.clustered_words, 128);
    CHECK_EQ_INT(r.analogies, 2880);
    CHECK(r.cluster_acc > 0.9);
    CHECK(r.analogy_acc > 0.9);
    fl_prog_free(test);
    fl_exe_free(e);
    fl_dataset_free(ds);
    fl_opt_free(o);
    fl_prog_free(p);
    fl_model_word2vec_vocab_free(v);
    cleanup();
}

/* The examples with 1 server and 1 synchronous worker end within 0.005 of the same
 * example trained locally (same data, batches and optimizer; the server applies the
 * updates, and initialises the embedding rows from its own random stream: the same
 * distribution, other values), and the metric is printed by the worker. */
TEST(ps_runs_match_local_runs)
{
    setup();
    free(run("gs", 60, NULL, "%s/tools/fleet-datagen simnet --rows 20000 --out %s/s --seed 5", BIN, DIR_));
    free(run("gw", 60, NULL, "%s/tools/fleet-datagen word2vec --sentences 8000 --out %s/w --seed 5", BIN, DIR_));
    const char *sc = "--dict_dim 1200 --emb_dim 32 --hid_dim 32 --epochs 3 --batch_size 64 --optimizer adagrad "
                     "--lr 0.1 --thread_num 1 --print_period 0";
    char *sl = run("sl", 60, NULL, "%s/examples/simnet/train --is_local 1 --train_data %s/s/train --test_data %s/s/test %s",
                   BIN, DIR_, DIR_, sc);
    char *sp = run("sp", 120, NULL,
                   "%s/tools/fleetrun --server_num 1 --worker_num 1 --log_dir %s/slog %s/examples/simnet/train "
                   "--mode sync --train_data %s/s/train --test_data %s/s/test %s",
                   BIN, DIR_, BIN, DIR_, DIR_, sc);
    CHECK_STR_HAS(sp, "all 2 processes on this node succeeded");
    double a = after(sl, "test order rate "), b = after(sp, "test order rate ");
    const char *wc = "--embedding_size 32 --epochs 2 --batch_size 64 --lr 1 --thread_num 1 --print_period 0";
    char *wl = run("wl", 60, NULL, "%s/examples/word2vec/train --is_local 1 --data_dir %s/w --sample_dir %s %s", BIN, DIR_,
                   DIR_, wc);
    char *wp = run("wp", 120, NULL,
                   "%s/tools/fleetrun --server_num 1 --worker_num 1 --log_dir %s/wlog %s/examples/word2vec/train "
                   "--mode sync --data_dir %s/w --sample_dir %s %s",
                   BIN, DIR_, BIN, DIR_, DIR_, wc);
    double cl = after(wl, "cluster accuracy "), cp = after(wp, "cluster accuracy ");
    double al = after(wl, "analogy accuracy "), ap = after(wp, "analogy accuracy ");
    printf("  simnet order rate: local %.4f, PS %.4f; word2vec cluster / analogy accuracy: local %.4f / %.4f, PS "
           "%.4f / %.4f\n",
           a, b, cl, al, cp, ap);
    fflush(stdout);
    CHECK(a > 0.85);
    CHECK_NEAR(b, a, 0.005);
    CHECK(cl > 0.9 && al > 0.9);
    CHECK_NEAR(cp, cl, 0.005);
    CHECK_NEAR(ap, al, 0.005);
    free(sl), free(sp), free(wl), free(wp);
    cleanup();
}

/* The same options give identical files; bad options are usage errors naming them. */
TEST(text_generators_are_deterministic_and_check_options)
{
    setup();
    free(run("a", 30, NULL, "%s/tools/fleet-datagen simnet --rows 300 --out %s/a --seed 9 --files 2", BIN, DIR_));
    free(run("b", 30, NULL, "%s/tools/fleet-datagen simnet --rows 300 --out %s/b --seed 9 --files 2", BIN, DIR_));
    free(run("c", 30, NULL, "%s/tools/fleet-datagen word2vec --sentences 2000 --out %s/c --seed 9", BIN, DIR_));
    free(run("d", 30, NULL, "%s/tools/fleet-datagen word2vec --sentences 2000 --out %s/d --seed 9", BIN, DIR_));
    int rc;
    free(run("cmp", 30, &rc, "diff -r %s/a %s/b && diff -r %s/c %s/d", DIR_, DIR_, DIR_, DIR_));
    CHECK_EQ_INT(rc, 0);
    char *o = run("e1", 30, &rc, "%s/tools/fleet-datagen simnet --rows 10 --out %s/e --purity 0.9 --mix 0.5", BIN, DIR_);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_HAS(o, "--mix");
    free(o);
    o = run("e2", 30, &rc, "%s/tools/fleet-datagen word2vec --sentences 10 --out %s/e", BIN, DIR_);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_HAS(o, "never occur in 10 sentences");
    free(o);
    o = run("e3", 30, &rc, "%s/tools/fleet-datagen word2vec --sentence 10 --out %s/e", BIN, DIR_);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_HAS(o, "unknown option '--sentence'");
    free(o);
    /* the library functions behind them name the bad field */
    fl_model_simnet_datagen sg = fl_model_simnet_datagen_default();
    CHECK(fl_model_simnet_generate(&sg, DIR_, NULL) == FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "rows");
    fl_model_word2vec_datagen wg = fl_model_word2vec_datagen_default();
    wg.sentences = 100, wg.roles = 1;
    CHECK(fl_model_word2vec_generate(&wg, DIR_, NULL) == FL_EINVAL);
    CHECK_STR_HAS(fl_last_error(), "roles");
    cleanup();
}

TEST_MAIN(T(simnet_builder_shapes_and_errors), T(word2vec_builder_shapes_and_errors), T(simnet_gradients_on_a_tiny_batch),
          T(word2vec_gradients_on_a_tiny_batch), T(simnet_converges_on_planted_topics),
          T(word2vec_learns_planted_clusters_and_analogies), T(ps_runs_match_local_runs),
          T(text_generators_are_deterministic_and_check_options))
