/* test_bert_gen.c - the planted BERT corpus (fl_model_bert_generate, `fleet-datagen bert`):
 * byte-identical files for the same options, the demo format the reader takes, the printed
 * ceilings, argument errors; and a small BERT trained on it reaching next-sentence accuracy
 * >= 0.9 and masked-LM accuracy well above the unigram baseline on the test split. */
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

#include "testhelp.h"
#include "cmdrun.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) TFAIL("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    CHECK(b && fread(b, 1, (size_t)sz, f) == (size_t)sz);
    fclose(f);
    b[sz] = 0;
    *n = (size_t)sz;
    return b;
}

static int same_file(const char *d1, const char *d2, const char *name)
{
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/%s", d1, name);
    snprintf(p2, sizeof p2, "%s/%s", d2, name);
    size_t n1, n2;
    char *a = slurp(p1, &n1), *b = slurp(p2, &n2);
    int same = n1 == n2 && !memcmp(a, b, n1);
    free(a);
    free(b);
    return same;
}

/* The decompressed lines of dir/split/part-00000.gz ... part-(files-1).gz, concatenated. */
static char *lines_of(const char *dir, const char *split, int files, size_t *len)
{
    size_t cap = 1 << 20, n = 0;
    char *out = malloc(cap);
    CHECK(out);
    for (int f = 0; f < files; f++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s/part-%05d.gz", dir, split, f);
        gzFile g = gzopen(path, "rb");
        if (!g) TFAIL("cannot open %s", path);
        int k;
        char buf[1 << 15];
        while ((k = gzread(g, buf, sizeof buf)) > 0) {
            if (n + (size_t)k > cap) out = realloc(out, cap = 2 * (n + (size_t)k));
            CHECK(out);
            memcpy(out + n, buf, (size_t)k), n += (size_t)k;
        }
        gzclose(g);
    }
    *len = n;
    return out;
}

static fl_model_bert_datagen small(int64_t lines)
{
    fl_model_bert_datagen g = fl_model_bert_datagen_default();
    g.lines = lines, g.test_lines = lines / 8;
    g.topics = 16, g.topic_words = 16, g.function_words = 16;
    g.min_len = 6, g.max_len = 16;
    return g;
}

TEST(datagen_deterministic_demo_format)
{
    char d1[64], d2[64];
    th_mktemp(d1, sizeof d1, "fl_bg1");
    th_mktemp(d2, sizeof d2, "fl_bg2");
    fl_model_bert_datagen g = small(400);
    fl_model_bert_datagen_info i1, i2;
    CHECK_OK(fl_model_bert_generate(&g, d1, &i1));
    g.files = 3;
    CHECK_OK(fl_model_bert_generate(&g, d2, &i2));
    CHECK_EQ_INT(i1.vocab_size, 5 + 16 + 16 * 16);
    CHECK_EQ_INT(i1.train_tokens, i2.train_tokens);
    static const char *names[] = {"vocab.txt", "bert_config.json", "test/part-00000.gz"};
    for (int k = 0; k < 3; k++)
        if (!same_file(d1, d2, names[k])) TFAIL("%s differs between two runs of the same options", names[k]);
    size_t n1, n3;
    char *a = lines_of(d1, "train", 1, &n1), *b = lines_of(d2, "train", 3, &n3);
    CHECK(n1 == n3 && !memcmp(a, b, n1)); /* --files only cuts the same lines */
    /* every line: [CLS] A [SEP] B [SEP], sentence ids 0 through the first [SEP], positions 0.., label 1 */
    int64_t lines = 0;
    for (char *s = a; s < a + n1; lines++) {
        char *nl = memchr(s, '\n', (size_t)(a + n1 - s));
        CHECK(nl);
        *nl = 0;
        char *f[4];
        f[0] = s;
        for (int k = 1; k < 4; k++) {
            f[k] = strchr(f[k - 1], ';');
            CHECK(f[k]);
            *f[k]++ = 0;
        }
        int n = 0, seps = 0;
        char *p = f[0], *q = f[1], *r = f[2];
        for (;; n++) {
            char *e;
            long t = strtol(p, &e, 10), sid = strtol(q, &q, 10), pos = strtol(r, &r, 10);
            if (e == p) break;
            p = e;
            CHECK(t >= 1 && t < i1.vocab_size && t != 3 && t != 4);
            CHECK_EQ_INT(t == 1, n == 0);
            CHECK_EQ_INT(sid, seps > 0);
            CHECK_EQ_INT(pos, n);
            seps += t == 2;
        }
        CHECK_EQ_INT(seps, 2);
        CHECK(n >= 3 + 12 && n <= 3 + 32);
        CHECK(!strcmp(f[3], "1"));
        s = nl + 1;
    }
    CHECK_EQ_INT(lines, 400);
    free(a);
    free(b);
    /* the reader takes the files, ids below the written vocab_size */
    char tr[512];
    snprintf(tr, sizeof tr, "%s/train/part-00000.gz", d1);
    const char *files[1] = {tr};
    fl_model_bert_reader_opts o = fl_model_bert_reader_default();
    o.vocab_size = i1.vocab_size, o.max_seq_len = 64;
    fl_model_bert_reader *r = NULL;
    CHECK_OK(fl_model_bert_reader_create(files, 1, &o, &r));
    CHECK_EQ_INT(fl_model_bert_reader_num_lines(r), 400);
    fl_model_bert_reader_free(r);
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/bert_config.json", d1);
    fl_model_bert_config bc;
    CHECK_OK(fl_model_bert_config_load(cfg, &bc));
    CHECK_EQ_INT(bc.vocab_size, i1.vocab_size);
    CHECK_EQ_INT(bc.hidden_size, 768);
    /* ceilings: probabilities, above the baselines; another seed gives other lines */
    printf("  masked-LM ceiling %.4f +- %.4f (unigram %.4f), next-sentence ceiling %.4f +- %.4f over %lld examples\n",
           i1.mlm_ceiling, i1.mlm_ceiling_se, i1.mlm_unigram, i1.nsp_ceiling, i1.nsp_ceiling_se,
           (long long)i1.ceiling_examples);
    CHECK_EQ_INT(i1.ceiling_examples, 100);
    CHECK(i1.mlm_ceiling > 3 * i1.mlm_unigram && i1.mlm_ceiling <= 1);
    CHECK(i1.nsp_ceiling > 0.9 && i1.nsp_ceiling <= 1);
    CHECK_NEAR(i1.mlm_ceiling, i2.mlm_ceiling, 0);
    g.seed = 2, g.files = 1;
    CHECK_OK(fl_model_bert_generate(&g, d2, &i2));
    CHECK(!same_file(d1, d2, "test/part-00000.gz"));
    char stale[600];
    snprintf(stale, sizeof stale, "%s/train/part-00001.gz", d2);
    CHECK(access(stale, F_OK) != 0); /* the 3 files of the run before are gone */
    /* errors name the argument */
    fl_model_bert_datagen bad = small(10);
    bad.successors = 40;
    CHECK_FAILS(fl_model_bert_generate(&bad, d2, &i2), FL_EINVAL, "successors");
    bad = small(10), bad.min_len = 20;
    CHECK_FAILS(fl_model_bert_generate(&bad, d2, &i2), FL_EINVAL, "min_len");
    bad = small(10), bad.noise = 1.5;
    CHECK_FAILS(fl_model_bert_generate(&bad, d2, &i2), FL_EINVAL, "noise");
    CHECK_FAILS(fl_model_bert_generate(NULL, d2, &i2), FL_EINVAL, "config");
    th_rmtree(d1);
    th_rmtree(d2);
}

/* The ceilings of a noiseless chain with one successor: every masked word but the first of
 * a sentence follows from its left neighbour, so the masked-LM ceiling is high; with one
 * topic no false pair can be told apart, the next-sentence ceiling is 1/2. */
TEST(datagen_ceilings_at_the_extremes)
{
    char d[64];
    th_mktemp(d, sizeof d, "fl_bg3");
    fl_model_bert_datagen g = small(200);
    g.topics = 1, g.successors = 1, g.noise = 0;
    fl_model_bert_datagen_info i;
    CHECK_OK(fl_model_bert_generate(&g, d, &i));
    printf("  one topic, one successor, no noise: masked-LM ceiling %.4f, next-sentence ceiling %.4f\n", i.mlm_ceiling,
           i.nsp_ceiling);
    CHECK(i.mlm_ceiling > 0.9);
    CHECK_NEAR(i.nsp_ceiling, 0.5, 1e-9);
    g.topics = 16, g.noise = 1; /* words uniform over the topic: the masked word is a guess among 32 */
    CHECK_OK(fl_model_bert_generate(&g, d, &i));
    printf("  uniform words: masked-LM ceiling %.4f, next-sentence ceiling %.4f\n", i.mlm_ceiling, i.nsp_ceiling);
    CHECK(i.mlm_ceiling < 0.3);
    CHECK(i.nsp_ceiling > 0.94 && i.nsp_ceiling < 0.99); /* 1 - 1/(2 * 16) when topics are always told apart */
    th_rmtree(d);
}

/* `fleet-datagen bert` prints the ceilings and writes the same files as the function. */
TEST(datagen_cli)
{
    char self[4096], dir[64];
    th_tests_dir(self, sizeof self);
    th_mktemp(dir, sizeof dir, "fl_bg4");
    char *o = th_cmd(dir, "gen", 60, NULL,
                     "%s/../tools/fleet-datagen bert --lines 400 --test-lines 50 --out %s/cli --topics 16 --topic-words "
                     "16 --function-words 16 --min-len 6 --max-len 16",
                     self, dir);
    CHECK_STR_HAS(o, "masked-LM accuracy: ceiling ");
    CHECK_STR_HAS(o, "next-sentence accuracy: ceiling ");
    double c = th_after(o, "masked-LM accuracy: ceiling ");
    free(o);
    fl_model_bert_datagen g = small(400);
    g.test_lines = 50;
    fl_model_bert_datagen_info i;
    char fn[512];
    snprintf(fn, sizeof fn, "%s/fn", dir);
    CHECK_OK(fl_model_bert_generate(&g, fn, &i));
    CHECK_NEAR(c, i.mlm_ceiling, 1e-4);
    char cli[512];
    snprintf(cli, sizeof cli, "%s/cli", dir);
    CHECK(same_file(cli, fn, "train/part-00000.gz") && same_file(cli, fn, "planted.json"));
    int rc;
    o = th_cmd(dir, "bad", 30, &rc, "%s/../tools/fleet-datagen bert --lines 10 --out %s/x --noise 2", self, dir);
    CHECK_EQ_INT(rc, 2);
    CHECK_STR_HAS(o, "--noise");
    free(o);
    th_rmtree(dir);
}

/* A small BERT (hidden 64, 2 layers, no dropout) trained with Adam on 4,000 generated lines
 * (16 topics, one shared grammar), epochs until the test split's next-sentence accuracy
 * reaches 0.9 and its masked-LM accuracy 3x the unigram baseline (at most
 * FLEET_BERT_GEN_EPOCHS, default 6; measured: 4 or 5 epochs, 4-5 s of CPU each); both
 * printed with the ceilings. */
TEST(train_generated_nsp_and_mlm)
{
    alarm(600); /* 20-25 s of CPU; minutes on a loaded machine or under a sanitizer (asan: 280 s) */
    char d[64];
    th_mktemp(d, sizeof d, "fl_bg5");
    fl_model_bert_datagen g = small(4000);
    g.test_lines = 500;
    g.shared_grammar = 1; /* learnt in a few epochs; per-topic chains take many more */
    fl_model_bert_datagen_info info;
    CHECK_OK(fl_model_bert_generate(&g, d, &info));
    char tr[512], te[512];
    snprintf(tr, sizeof tr, "%s/train/part-00000.gz", d);
    snprintf(te, sizeof te, "%s/test/part-00000.gz", d);
    const char *ftr[1] = {tr}, *fte[1] = {te};
    fl_model_bert_reader_opts ro = fl_model_bert_reader_default();
    ro.max_seq_len = 40, ro.batch_size = 32, ro.threads = 1, ro.vocab_size = info.vocab_size, ro.shuffle = 1;
    fl_model_bert_reader *rtr = NULL, *rte = NULL;
    CHECK_OK(fl_model_bert_reader_create(ftr, 1, &ro, &rtr));
    ro.batch_size = 128;
    CHECK_OK(fl_model_bert_reader_create(fte, 1, &ro, &rte));
    fl_prog *p = fl_prog_create();
    fl_prog_set_seed(p, 7);
    fl_model_bert_config c = fl_model_bert_default();
    c.vocab_size = info.vocab_size;
    c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4, c.intermediate_size = 128;
    c.max_position_embeddings = 40;
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0;
    fl_model_bert m;
    CHECK_OK(fl_model_bert_build(p, &c, &m));
    fl_prog *test = fl_prog_clone(p, 1);
    CHECK(test);
    fl_opt *opt = fl_opt_adam(2e-3f, 0.9f, 0.999f, 1e-6f);
    CHECK_OK(fl_opt_minimize(opt, m.loss));
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    const char *env = getenv("FLEET_BERT_GEN_EPOCHS");
    int epochs = env ? atoi(env) : 6;
    const char *f[3] = {fl_var_name(m.loss), fl_var_name(m.mlm_acc), fl_var_name(m.nsp_acc)};
    int64_t *counts = calloc((size_t)info.vocab_size, sizeof *counts);
    CHECK(counts);
    double mlm = 0, nsp = 0, unigram = 0, t0 = now_s();
    fl_model_bert_batch b;
    memset(&b, 0, sizeof b);
    for (int ep = 0; ep < epochs; ep++) {
        CHECK_OK(fl_model_bert_reader_begin(rtr, ep));
        double sl = 0;
        int nb = 0, got;
        while ((got = fl_model_bert_reader_next(rtr, &b)) == 1) {
            fl_tensor *o[1];
            CHECK_OK(fl_exe_run(e, p, b.feed, 7, f, 1, o));
            sl += fl_tensor_f32(o[0])[0], nb++;
        }
        CHECK_EQ_INT(got, 0);
        /* the test split, the same masks every epoch */
        CHECK_OK(fl_model_bert_reader_begin(rte, 0));
        double sm = 0, sn = 0;
        int64_t nm = 0, nn = 0, best = 0;
        memset(counts, 0, (size_t)info.vocab_size * sizeof *counts);
        while ((got = fl_model_bert_reader_next(rte, &b)) == 1) {
            fl_tensor *o[3];
            CHECK_OK(fl_exe_run(e, test, b.feed, 7, f, 3, o));
            sm += fl_tensor_f32(o[1])[0] * b.masked, nm += b.masked;
            sn += fl_tensor_f32(o[2])[0] * b.examples, nn += b.examples;
            const int64_t *ml = fl_tensor_data(b.t[4]);
            for (int j = 0; j < b.masked; j++) best = ++counts[ml[j]] > best ? counts[ml[j]] : best;
        }
        CHECK_EQ_INT(got, 0);
        mlm = sm / (double)nm, nsp = sn / (double)nn, unigram = (double)best / (double)nm;
        fprintf(stderr, "  epoch %d: train loss %.3f; test masked-LM accuracy %.3f, next-sentence accuracy %.3f (%.1f s)\n",
                ep, sl / nb, mlm, nsp, now_s() - t0);
        if (nsp >= 0.9 && mlm >= 3 * unigram) break;
    }
    printf("  generated data: masked-LM accuracy %.3f (ceiling %.3f, unigram baseline %.3f), next-sentence accuracy "
           "%.3f (ceiling %.3f), %.1f s\n",
           mlm, info.mlm_ceiling, unigram, nsp, info.nsp_ceiling, now_s() - t0);
    CHECK(nsp >= 0.9);
    CHECK(mlm >= 3 * unigram);
    CHECK(mlm <= info.mlm_ceiling + 4 * info.mlm_ceiling_se + 0.02 && nsp <= info.nsp_ceiling + 0.03);
    fl_model_bert_batch_clear(&b);
    free(counts);
    fl_exe_free(e);
    fl_opt_free(opt);
    fl_prog_free(test);
    fl_prog_free(p);
    fl_model_bert_reader_free(rtr);
    fl_model_bert_reader_free(rte);
    th_rmtree(d);
}

TEST_MAIN(T(datagen_deterministic_demo_format), T(datagen_ceilings_at_the_extremes), T(datagen_cli),
          T(train_generated_nsp_and_mlm))
