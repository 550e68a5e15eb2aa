/*
 * test_transformer.c - the Transformer of Paddle's translation benchmark
 * (fleet/transformer.h): corpus BLEU against hand-computed cases, the planted translation
 * generator, the token-count batching reader, decoding shapes, convergence of a small
 * model to BLEU >= 90 on the planted task, and the fleet-lightning row locally and on two
 * collective trainers.
 */
#include <limits.h>
#include <math.h>
#include <sys/stat.h>

#include "testhelp.h"
#include "cmdrun.h"
#include "trsmall.h"

static char BIN[PATH_MAX + 8], DIR_[64];

static void setup(void)
{
    char self[PATH_MAX];
    th_tests_dir(self, sizeof self);
    snprintf(BIN, sizeof BIN, "%s/..", self); /* BUILD */
    th_mktemp(DIR_, sizeof DIR_, "fl_tr");
}

static void cleanup(void) { th_rmtree(DIR_); }

/* DIR_/sub */
static const char *sub_dir(const char *sub, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", DIR_, sub);
    return buf;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    CHECK(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    CHECK(s && fread(s, 1, (size_t)n, f) == (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

static double bleu_of(const int64_t *const *h, const int *nh, const int64_t *const *r, const int *nr, int n,
                      fl_bleu_score *out)
{
    fl_bleu_stats s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < n; i++) CHECK_OK(fl_bleu_add(&s, h[i], nh[i], r[i], nr[i]));
    CHECK_OK(fl_bleu_compute(&s, out));
    return out->bleu;
}

/* Cases worked out by hand with multi-bleu.perl's rules. */
TEST(bleu_matches_hand_computed_cases)
{
    fl_bleu_score sc;
    const int64_t a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 2, 3, 4, 5, 7}, c[] = {8, 9, 10, 11}, d[] = {8, 9, 10, 11, 12};
    /* identical: 100 */
    CHECK_NEAR(bleu_of((const int64_t *[]){a}, (int[]){6}, (const int64_t *[]){a}, (int[]){6}, 1, &sc), 100.0, 1e-9);
    /* a prefix: every precision 1, BP = exp(1 - 6/5) */
    CHECK_NEAR(bleu_of((const int64_t *[]){a}, (int[]){5}, (const int64_t *[]){a}, (int[]){6}, 1, &sc), 100 * exp(-0.2),
               1e-9);
    CHECK_NEAR(sc.bp, exp(-0.2), 1e-12);
    CHECK_NEAR(sc.ratio, 5.0 / 6.0, 1e-12);
    /* a corpus of two: n-gram counts summed before dividing (9/10, 7/8, 5/6, 3/4), hyp 10
     * tokens against 11: 100 exp(-0.1) (0.9 0.875 0.8333 0.75)^(1/4) = 75.7885 */
    double v = bleu_of((const int64_t *[]){a, c}, (int[]){6, 4}, (const int64_t *[]){b, d}, (int[]){6, 5}, 2, &sc);
    CHECK_NEAR(v, 75.78847995449105, 1e-9);
    CHECK_NEAR(sc.precision[0], 0.9, 1e-12);
    CHECK_NEAR(sc.precision[1], 0.875, 1e-12);
    CHECK_NEAR(sc.precision[3], 0.75, 1e-12);
    /* clipping: "x x x x" against "x y": 1-grams 1/4, no 2-gram matches, so BLEU 0 */
    const int64_t x[] = {5, 5, 5, 5}, y[] = {5, 6};
    CHECK_NEAR(bleu_of((const int64_t *[]){x}, (int[]){4}, (const int64_t *[]){y}, (int[]){2}, 1, &sc), 0.0, 0);
    CHECK_NEAR(sc.precision[0], 0.25, 1e-12);
    /* a longer hypothesis has no brevity penalty; an empty one scores 0 */
    bleu_of((const int64_t *[]){b}, (int[]){6}, (const int64_t *[]){a}, (int[]){5}, 1, &sc);
    CHECK_NEAR(sc.bp, 1.0, 0);
    CHECK_NEAR(bleu_of((const int64_t *[]){a}, (int[]){0}, (const int64_t *[]){a}, (int[]){3}, 1, &sc), 0.0, 0);
    fl_bleu_stats s;
    memset(&s, 0, sizeof s);
    CHECK_FAILS(fl_bleu_compute(&s, &sc), FL_EINVAL, "references hold no token");
    CHECK_FAILS(fl_bleu_add(NULL, a, 1, a, 1), FL_EINVAL, "fl_bleu_add");
}

static void gen(const char *sub, uint64_t seed, int64_t n, int max_len, fl_translation_datagen_info *info)
{
    char d[256];
    trs_gen(sub_dir(sub, d, sizeof d), seed, n, max_len, 0, info);
}

static char *file_of(const char *sub, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s/%s", DIR_, sub, name);
    return slurp(p);
}

TEST(datagen_is_deterministic_with_a_known_ceiling)
{
    setup();
    fl_translation_datagen_info i1, i2, i3;
    gen("a", 7, 500, 50, &i1);
    gen("b", 7, 500, 50, &i2);
    gen("c", 8, 500, 50, &i3);
    const char *files[] = {"train/part-00000", "test/part-00000", "src_vocab.txt",
                           "trg_vocab.txt",    "vocab_all.txt",   "planted.json"};
    for (int k = 0; k < 6; k++) {
        char *x = file_of("a", files[k]), *y = file_of("b", files[k]);
        CHECK(!strcmp(x, y));
        free(x), free(y);
    }
    char *x = file_of("a", "train/part-00000"), *z = file_of("c", "train/part-00000");
    CHECK(strcmp(x, z) != 0);
    /* every line: source and target of equal length (the transduction maps word to word),
     * 5 to 50 tokens */
    int lines = 0;
    for (char *line = strtok(x, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        char *tab = strchr(line, '\t');
        CHECK(tab);
        int ns = 1, nt = 1;
        for (char *p = line; p < tab; p++) ns += *p == ' ';
        for (char *p = tab + 1; *p; p++) nt += *p == ' ';
        CHECK_EQ_INT(ns, nt);
        CHECK(ns >= 5 && ns <= 50);
    }
    CHECK_EQ_INT(lines, 500);
    free(x), free(z);
    char *v = file_of("a", "src_vocab.txt");
    CHECK(!strncmp(v, "<s>\n<e>\n<unk>\n", 14));
    free(v);
    printf("  test BLEU ceiling %.2f, word-by-word baseline %.2f\n", i1.ceiling_bleu, i1.baseline_bleu);
    CHECK_NEAR(i1.ceiling_bleu, 100.0, 1e-9);
    CHECK(i1.baseline_bleu > 1 && i1.baseline_bleu < 40);
    CHECK_EQ_INT(i1.src_vocab, i2.src_vocab);
    fl_translation_datagen g = fl_translation_datagen_default();
    g.sentences = 10;
    g.max_len = 10;
    CHECK_FAILS(fl_translation_generate(&g, DIR_, &i1), FL_EINVAL, "max_len");
    cleanup();
}

static fl_translation_data *load(const char *sub, const char *split, const fl_translation_opts *o)
{
    char d[256];
    return trs_load(sub_dir(sub, d, sizeof d), split, o);
}

TEST(reader_batches_by_tokens)
{
    setup();
    fl_translation_datagen_info info;
    gen("d", 3, 600, 30, &info);
    fl_translation_opts o = fl_translation_opts_default();
    o.batch_size = 400;
    o.pool_size = 200;
    o.n_head = 2;
    fl_translation_data *d = load("d", "train", &o);
    CHECK_EQ_INT(fl_translation_size(d), 600);
    int64_t bos, eos, unk;
    CHECK_OK(fl_translation_marks(d, &bos, &eos, &unk));
    CHECK(bos == 0 && eos == 1 && unk == 2);
    int64_t nb = fl_translation_epoch(d, 0);
    CHECK(nb > 600 * 12 / 400 && nb < 600);
    fl_translation_batch *b = fl_translation_batch_create();
    int64_t sentences = 0, tokens = 0, spread = 0;
    for (int64_t k = 0; k < nb; k++) {
        CHECK_OK(fl_translation_batch_fill(d, k, b));
        const fl_tensor *sw = fl_translation_batch_tensor(b, 0), *sb = fl_translation_batch_tensor(b, 2);
        const fl_tensor *tw = fl_translation_batch_tensor(b, 3), *tb = fl_translation_batch_tensor(b, 5);
        const fl_tensor *lw = fl_translation_batch_tensor(b, 8);
        int64_t B = fl_tensor_dim(sw, 0), S = fl_tensor_dim(sw, 1), T = fl_tensor_dim(tw, 1), n, t;
        CHECK_OK(fl_translation_batch_counts(b, &n, &t));
        CHECK_EQ_INT(n, B);
        /* the benchmark's rule: longest (with <s> / <e>) x sentences <= batch_size */
        int64_t longest = S > T + 1 ? S : T + 1;
        CHECK(longest * B <= 400 || B == 1);
        CHECK(fl_tensor_dim(sb, 1) == 2 && fl_tensor_dim(sb, 2) == S && fl_tensor_dim(sb, 3) == S);
        CHECK(fl_tensor_dim(tb, 2) == T && fl_tensor_dim(tb, 3) == T);
        CHECK_EQ_INT(fl_tensor_dim(lw, 0), B * T);
        /* causal mask: row 0 sees position 0 only */
        const float *tbv = fl_tensor_cdata(tb);
        CHECK(tbv[0] == 0 && (T == 1 || tbv[1] < -1e8f));
        double wsum = 0;
        for (int64_t i = 0; i < B * T; i++) wsum += ((const float *)fl_tensor_cdata(lw))[i];
        CHECK_NEAR(wsum, (double)t, 0);
        /* a pool sorted by length: lengths in a batch are close */
        const int64_t *sv = fl_tensor_cdata(sw);
        int64_t shortest = S;
        for (int64_t i = 0; i < B; i++) {
            int64_t len = 0;
            while (len < S && sv[i * S + len] != eos) len++;
            shortest = len + 1 < shortest ? len + 1 : shortest;
        }
        spread += S - shortest;
        sentences += B, tokens += t;
    }
    CHECK_EQ_INT(sentences, 600);
    printf("  %lld batches of <= 400 tokens, mean length spread %.2f\n", (long long)nb, (double)spread / (double)nb);
    CHECK((double)spread / (double)nb < 4);
    /* two ranks: the same number of batches each, disjoint */
    fl_translation_opts o0 = o, o1 = o;
    o0.nranks = o1.nranks = 2, o1.rank = 1;
    fl_translation_data *r0 = load("d", "train", &o0), *r1 = load("d", "train", &o1);
    int64_t n0 = fl_translation_epoch(r0, 0), n1 = fl_translation_epoch(r1, 0);
    CHECK_EQ_INT(n0, n1);
    CHECK_EQ_INT(n0, nb / 2);
    CHECK_FAILS(fl_translation_batch_fill(r0, n0, b), FL_EINVAL, "out of range");
    fl_translation_free(r0), fl_translation_free(r1);
    fl_translation_batch_free(b);
    fl_translation_free(d);
    o.sort_type = "bogus";
    fl_translation_data *bad = NULL;
    CHECK_FAILS(fl_translation_load("x", "y", NULL, 0, &o, &bad), FL_EINVAL, "sort_type");
    cleanup();
}

TEST(decoding_shapes)
{
    fl_model_transformer_config c = fl_model_transformer_small();
    c.src_vocab_size = 20, c.trg_vocab_size = 30, c.max_length = 16;
    fl_prog *p = fl_prog_create();
    fl_model_transformer m;
    CHECK_OK(fl_model_transformer_build(p, &c, &m));
    CHECK(!strcmp(fl_var_name(m.enc_output), "enc_output"));
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    /* the position table is Paddle's sinusoid: row 1 = sin(1 * inv_k), cos(1 * inv_k) */
    const float *pe = fl_tensor_cdata(fl_scope_find(fl_exe_scope(e), "src_pos_enc_table"));
    CHECK_NEAR(pe[64 + 0], sin(1.0), 1e-6);
    CHECK_NEAR(pe[64 + 32], cos(1.0), 1e-6);
    CHECK_NEAR(pe[64 + 31], sin(exp(-31 * log(1e4) / 31)), 1e-6);
    fl_transformer_decoder *dec;
    CHECK_OK(fl_transformer_decoder_create(e, p, fl_var_name(m.predict), 0, 1, &dec));
    const int64_t s0[] = {5, 6, 7, 1}, s1[] = {8, 1}, s2[] = {9, 9, 9, 9, 9, 1};
    const int64_t *src[3] = {s0, s1, s2};
    int nsrc[3] = {4, 2, 6};
    for (int beam = 1; beam <= 3; beam += 2) {
        fl_transformer_decode_opts o = fl_transformer_decode_opts_default();
        o.beam_size = beam;
        o.max_out_len = 7;
        o.batch_size = 2;
        int64_t *out[3], *again[3];
        int nout[3], nagain[3];
        CHECK_OK(fl_transformer_decode(dec, &o, src, nsrc, 3, out, nout));
        CHECK_OK(fl_transformer_decode(dec, &o, src, nsrc, 3, again, nagain));
        for (int i = 0; i < 3; i++) {
            CHECK(nout[i] >= 0 && nout[i] <= 7);
            CHECK_EQ_INT(nout[i], nagain[i]);
            for (int k = 0; k < nout[i]; k++) {
                CHECK(out[i][k] >= 0 && out[i][k] < 30 && out[i][k] != 1);
                CHECK_EQ_INT(out[i][k], again[i][k]);
            }
            free(out[i]), free(again[i]);
        }
    }
    fl_transformer_decode_opts o = fl_transformer_decode_opts_default();
    o.beam_size = 0;
    int64_t *out[1];
    int nout[1];
    CHECK_FAILS(fl_transformer_decode(dec, &o, src, nsrc, 1, out, nout), FL_EINVAL, "beam_size");
    int64_t too_long[20] = {0};
    const int64_t *tl[1] = {too_long};
    CHECK_FAILS(fl_transformer_decode(dec, NULL, tl, (int[]){20}, 1, out, nout), FL_EINVAL, "source 0 has 20 ids");
    fl_transformer_decoder_free(dec);
    fl_transformer_decoder *bad;
    CHECK_FAILS(fl_transformer_decoder_create(e, p, "nope", 0, 1, &bad), FL_EINVAL, "predict 'nope'");
    c.weight_sharing = 1;
    fl_prog *q = fl_prog_create();
    CHECK_FAILS(fl_model_transformer_build(q, &c, &m), FL_EINVAL, "weight_sharing needs src_vocab_size == trg_vocab_size");
    fl_prog_free(q);
    fl_exe_free(e);
    fl_prog_free(p);
}

/* A small Transformer (d_model 64, 2 + 2 layers) learns the planted transduction. */
TEST(converges_to_bleu_90_on_the_planted_task)
{
    setup();
    fl_translation_datagen_info info;
    gen("t", 1, 3000, 15, &info);
    char dir[256];
    trs_model t;
    const int steps = 500;
    trs_train(sub_dir("t", dir, sizeof dir), &(trs_opts){.steps = steps, .lr_scale = 0.5f, .warmup = 200, .clip = 5.0f},
              &t);
    fl_bleu_score greedy, beam;
    double sps1, sps4;
    trs_bleu(&t, 1, &greedy, &sps1);
    trs_bleu(&t, 4, &beam, &sps4);
    printf("  %d steps in %.1f s (loss %.3f -> %.3f); test BLEU greedy %.2f (%.0f sentences/s), beam 4 %.2f (%.0f "
           "sentences/s); word-by-word baseline %.2f, ceiling %.2f\n",
           steps, t.seconds, t.first, t.last, greedy.bleu, sps1, beam.bleu, sps4, info.baseline_bleu, info.ceiling_bleu);
    CHECK(t.last < t.first / 3);
    CHECK(greedy.bleu >= 90);
    CHECK(beam.bleu >= 90);
    trs_free(&t);
    cleanup();
}

/* The fleet-lightning row: the planted data (1,500 pairs of 5-15 tokens) and the options of
 * both runs below. */
#define LIGHT_ARGS "--train_data %s/l/train --test_data %s/l/test --epochs 15 --beam_size 2"

static void light_data(void)
{
    fl_translation_datagen_info info;
    gen("l", 2, 1500, 15, &info);
}

/* train, eval and infer locally */
TEST(lightning_row_locally)
{
    setup();
    light_data();
    char *o = th_cmd(DIR_, "list", 30, NULL, "%s/tools/fleet-lightning list", BIN);
    CHECK_STR_HAS(o, "transformer coll   translation bleu");
    free(o);
    o = th_cmd(
        DIR_, "local", 110, NULL,
        "%s/tools/fleet-lightning train --model transformer --mode local --model_dir %s/m1 --batch_size 1024 " LIGHT_ARGS,
        BIN, DIR_, DIR_, DIR_);
    double local = th_after(o, "test BLEU ");
    free(o);
    printf("  fleet-lightning transformer, one process: test BLEU %.2f\n", local);
    CHECK(local > 80);
    o = th_cmd(DIR_, "eval", 60, NULL,
               "%s/tools/fleet-lightning eval --model transformer --model_dir %s/m1 --test_data %s/l/test", BIN, DIR_,
               DIR_);
    CHECK_NEAR(th_after(o, "test BLEU "), local, 1e-9); /* eval reads lightning.conf: beam 2 again */
    free(o);
    o = th_cmd(DIR_, "infer", 60, NULL,
               "%s/tools/fleet-lightning infer --model transformer --model_dir %s/m1 --test_data %s/l/test --output "
               "%s/out.txt",
               BIN, DIR_, DIR_, DIR_);
    CHECK_STR_HAS(o, "150 predictions written");
    free(o);
    char path[256];
    snprintf(path, sizeof path, "%s/out.txt", DIR_);
    char *sents = slurp(path);
    CHECK(sents[0] == 'T'); /* target tokens */
    free(sents);
    cleanup();
}

/* The same training on two collective trainers, each taking every other batch of half the
 * tokens (the same tokens per step): the BLEU of one process within tolerance (measured:
 * 83.14 one process, 83.58 two trainers). */
TEST(lightning_row_collective)
{
    setup();
    light_data();
    int rc;
    char *o = th_cmd(DIR_, "coll", 115, &rc,
                     "%s/tools/fleetrun --nproc_per_node 2 --log_dir %s/log %s/tools/fleet-lightning train --model "
                     "transformer --model_dir %s/m2 --batch_size 512 " LIGHT_ARGS,
                     BIN, DIR_, BIN, DIR_, DIR_, DIR_);
    if (rc) TFAIL("fleetrun failed:\n%s", o);
    CHECK_STR_HAS(o, "mode collective, worker 0 of 2");
    double coll = th_after(o, "test BLEU ");
    printf("  fleet-lightning transformer, 2 collective trainers: test BLEU %.2f\n", coll);
    CHECK(coll > 80);
    free(o);
    cleanup();
}

TEST_MAIN(T(bleu_matches_hand_computed_cases), T(datagen_is_deterministic_with_a_known_ceiling),
          T(reader_batches_by_tokens), T(decoding_shapes), T(converges_to_bleu_90_on_the_planted_task),
          T(lightning_row_locally), T(lightning_row_collective))
