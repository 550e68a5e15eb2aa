/*
 * test_transformer_decode.c - the Transformer's decoding with a key / value cache against
 * the decoder re-run over the whole prefix (the same words, scores within float rounding)
 * on a trained small model (float32 and AMP bf16 O1 / O2) and on decoder variants, and the
 * threaded corpus reader (fleet/transformer.h).
 */
#include <limits.h>
#include <math.h>
#include <time.h>

#include "testhelp.h"
#include "trsmall.h"

static char DIR_[64];

static void setup(void) { th_mktemp(DIR_, sizeof DIR_, "fl_trd"); }

static void cleanup(void) { th_rmtree(DIR_); }

/* The planted task in DIR_/sub: n training pairs of 5..max_len source tokens. */
static void gen(const char *sub, uint64_t seed, int64_t n, int max_len)
{
    char d[256];
    snprintf(d, sizeof d, "%s/%s", DIR_, sub);
    trs_gen(d, seed, n, max_len, 0, NULL);
}

static fl_translation_data *load(const char *sub, const char *split, const fl_translation_opts *o)
{
    char d[256];
    snprintf(d, sizeof d, "%s/%s", DIR_, sub);
    return trs_load(d, split, o);
}

/* The process's CPU seconds (decoding speed per CPU second, whatever else the machine runs). */
static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Decodes the first n pairs of td with and without the cache (beam) and checks the same
 * words and scores; returns the cached and uncached sentences per CPU second. */
static void same_with_and_without_cache(fl_transformer_decoder *dec, const fl_translation_data *td, int n, int beam,
                                        int max_out_len, double *sps_cached, double *sps_full)
{
    const int64_t **src = malloc((size_t)n * sizeof *src);
    int *nsrc = malloc((size_t)n * sizeof *nsrc), *nout[2];
    int64_t **out[2];
    float *sc[2];
    double secs[2];
    CHECK(src && nsrc);
    for (int i = 0; i < n; i++) CHECK_OK(fl_translation_pair(td, i, &src[i], &nsrc[i], NULL, NULL));
    fl_transformer_decode_opts o = fl_transformer_decode_opts_default();
    o.beam_size = beam;
    o.max_out_len = max_out_len;
    o.batch_size = 16; /* several batches, sentences finishing at different steps */
    for (int c = 0; c < 2; c++) {
        o.use_cache = !c;
        out[c] = malloc((size_t)n * sizeof *out[c]);
        nout[c] = malloc((size_t)n * sizeof *nout[c]);
        sc[c] = malloc((size_t)n * sizeof *sc[c]);
        double t0 = cpu_now();
        CHECK_OK(fl_transformer_decode(dec, &o, src, nsrc, n, out[c], nout[c]));
        secs[c] = cpu_now() - t0;
        CHECK_OK(fl_transformer_decoder_scores(dec, sc[c], n));
    }
    int64_t words = 0;
    for (int i = 0; i < n; i++) {
        if (nout[0][i] != nout[1][i])
            TFAIL("beam %d sentence %d: %d words cached, %d without", beam, i, nout[0][i], nout[1][i]);
        for (int k = 0; k < nout[0][i]; k++)
            if (out[0][i][k] != out[1][i][k])
                TFAIL("beam %d sentence %d word %d: %lld cached, %lld without", beam, i, k, (long long)out[0][i][k],
                      (long long)out[1][i][k]);
        CHECK(isfinite(sc[0][i]) && sc[0][i] <= 1e-6f);
        CHECK_NEAR(sc[0][i], sc[1][i], 1e-4 * (1 + fabs(sc[1][i])));
        words += nout[0][i];
        free(out[0][i]), free(out[1][i]);
    }
    CHECK(words > 0);
    *sps_cached = n / secs[0], *sps_full = n / secs[1];
    for (int c = 0; c < 2; c++) free(out[c]), free(nout[c]), free(sc[c]);
    free(src), free(nsrc);
}

/* The cache variables of the trained small model (2 decoder layers, 4 heads of 16) after a
 * cached decode: in the scope, of dtype dt (the dtype of the AMP program's keys and values),
 * [R, 4, t, 16] with t >= 1 positions: the cached steps ran. */
static void cache_used(const trs_model *t, fl_dtype dt)
{
    for (int l = 0; l < 2; l++)
        for (int kv = 0; kv < 2; kv++) {
            char nm[64];
            snprintf(nm, sizeof nm, "decoder_cache_%s_%d", kv ? "value" : "key", l);
            const fl_tensor *c = fl_scope_find(fl_exe_scope(t->e), nm);
            if (!c) TFAIL("no cache variable %s in the scope: the decoder has no key / value cache", nm);
            if (fl_tensor_dtype(c) != dt || fl_tensor_ndim(c) != 4 || fl_tensor_dim(c, 1) != 4 || fl_tensor_dim(c, 2) < 1 ||
                fl_tensor_dim(c, 3) != 16)
                TFAIL("cache %s is %s of rank %d, expected %s [R, 4, t, 16]", nm, fl_dtype_name(fl_tensor_dtype(c)),
                      fl_tensor_ndim(c), fl_dtype_name(dt));
        }
}

/* A small Transformer trained briefly on the planted task (float32, or AMP bf16 at level
 * amp) decodes the test split to the same words with the cache as without, greedy and beam
 * 4; the cache holds the dtype the program's attention reads. */
static void cache_decodes_at(int amp)
{
    setup();
    gen("t", 3, 1500, 15);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/t", DIR_);
    trs_model t;
    trs_train(dir, &(trs_opts){.steps = 200, .lr_scale = 0.5f, .warmup = 200, .clip = 5.0f, .amp = amp}, &t);
    CHECK(t.last < t.first / 2);
    fl_transformer_decoder *dec = t.dec;
    const fl_translation_data *td = t.test;
    double c1, f1, c4, f4;
    same_with_and_without_cache(dec, td, 100, 1, 40, &c1, &f1);
    cache_used(&t, amp ? FL_BFLOAT16 : FL_FLOAT32);
    same_with_and_without_cache(dec, td, 100, 4, 40, &c4, &f4);
    cache_used(&t, amp ? FL_BFLOAT16 : FL_FLOAT32);
    printf("  %s: loss %.3f -> %.3f; sentences per CPU second: greedy %.1f cached, %.1f without; beam 4 %.1f cached, "
           "%.1f without\n",
           amp ? amp == 1 ? "AMP bf16 O1" : "AMP bf16 O2" : "float32", t.first, t.last, c1, f1, c4, f4);
    float s;
    CHECK_FAILS(fl_transformer_decoder_scores(dec, &s, 101), FL_EINVAL, "exceeds the 100 sentences");
    trs_free(&t);
    cleanup();
}

TEST(cache_decodes_the_words_of_the_full_prefix) { cache_decodes_at(0); }

TEST(cache_decodes_the_words_of_the_full_prefix_amp_o1) { cache_decodes_at(1); }

TEST(cache_decodes_the_words_of_the_full_prefix_amp_o2) { cache_decodes_at(2); }

/* Untrained decoders of other shapes: shared embeddings, post-norm ("dan") layers, three
 * layers of unequal key and value widths, AMP float16 at level O2 (a float16 cache): the
 * cache follows the program's own structure (the same words and scores as the full
 * prefix, greedy and beam 3). */
TEST(cache_follows_decoder_variants)
{
    for (int v = 0; v < 4; v++) {
        fl_model_transformer_config c = fl_model_transformer_small();
        c.src_vocab_size = c.trg_vocab_size = 40;
        c.max_length = 32;
        if (v == 0) c.weight_sharing = 1;
        if (v == 1) c.preprocess_cmd = "", c.postprocess_cmd = "dan";
        if (v == 2) c.n_layer = 3, c.d_key = 8, c.d_value = 12, c.n_head = 2;
        fl_prog *p = fl_prog_create();
        fl_model_transformer m;
        CHECK_OK(fl_model_transformer_build(p, &c, &m));
        fl_opt *opt = NULL;
        if (v == 3) { /* the optimizer's update ops and O2's refreshed parameter copies */
            CHECK(opt = fl_model_transformer_optimizer(p, &c, 1.0f, 100, 0));
            fl_amp_opts a;
            memset(&a, 0, sizeof a);
            a.dtype = FL_FLOAT16;
            a.use_pure_fp16 = 1;
            CHECK_OK(fl_amp_decorate_optimizer(opt, &a));
            CHECK_OK(fl_opt_minimize(opt, m.loss));
        }
        fl_exe *e = fl_exe_create(NULL);
        CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
        fl_transformer_decoder *dec;
        CHECK_OK(fl_transformer_decoder_create(e, p, fl_var_name(m.predict), 0, 1, &dec));
        int64_t s0[] = {5, 6, 7, 8, 1}, s1[] = {9, 1}, s2[] = {10, 11, 12, 13, 14, 15, 16, 17, 1};
        const int64_t *src[3] = {s0, s1, s2};
        int nsrc[3] = {5, 2, 9};
        for (int beam = 1; beam <= 3; beam += 2) {
            fl_transformer_decode_opts o = fl_transformer_decode_opts_default();
            o.beam_size = beam;
            o.max_out_len = 12;
            int64_t *out[2][3];
            int nout[2][3];
            float sc[2][3];
            for (int k = 0; k < 2; k++) {
                o.use_cache = !k;
                CHECK_OK(fl_transformer_decode(dec, &o, src, nsrc, 3, out[k], nout[k]));
                CHECK_OK(fl_transformer_decoder_scores(dec, sc[k], 3));
            }
            for (int i = 0; i < 3; i++) {
                CHECK_EQ_INT(nout[0][i], nout[1][i]);
                for (int k = 0; k < nout[0][i]; k++) CHECK_EQ_INT(out[0][i][k], out[1][i][k]);
                CHECK_NEAR(sc[0][i], sc[1][i], 1e-4 * (1 + fabs(sc[1][i])));
                free(out[0][i]), free(out[1][i]);
            }
        }
        const fl_tensor *k0 = fl_scope_find(fl_exe_scope(e), "decoder_cache_key_0");
        CHECK(k0 && fl_tensor_ndim(k0) == 4);
        CHECK_EQ_INT(fl_tensor_dtype(k0), v == 3 ? FL_FLOAT16 : FL_FLOAT32);
        fl_transformer_decoder_free(dec);
        fl_exe_free(e);
        fl_opt_free(opt);
        fl_prog_free(p);
    }
}

static int same_tensor(const fl_tensor *a, const fl_tensor *b)
{
    if (fl_tensor_ndim(a) != fl_tensor_ndim(b) || fl_tensor_nbytes(a) != fl_tensor_nbytes(b)) return 0;
    for (int i = 0; i < fl_tensor_ndim(a); i++)
        if (fl_tensor_dim(a, i) != fl_tensor_dim(b, i)) return 0;
    return !memcmp(fl_tensor_cdata(a), fl_tensor_cdata(b), fl_tensor_nbytes(a));
}

/* Reads a pass on `threads` reader threads and checks every batch against the one the
 * caller's thread fills (fl_translation_epoch + fl_translation_batch_fill); returns the
 * target tokens of the pass. */
static int64_t pass_matches_fill(int threads, int rank, int nranks, int epoch)
{
    fl_translation_opts o = fl_translation_opts_default();
    o.batch_size = 300;
    o.pool_size = 200;
    o.n_head = 2;
    o.rank = rank, o.nranks = nranks;
    o.threads = threads;
    fl_translation_data *d = load("r", "train", &o);
    o.threads = 1;
    fl_translation_data *ref = load("r", "train", &o);
    fl_translation_batch *b = fl_translation_batch_create(), *rb = fl_translation_batch_create();
    int64_t nb = fl_translation_begin(d, epoch), tokens = 0;
    CHECK_EQ_INT(nb, fl_translation_epoch(ref, epoch));
    CHECK(nb > 10);
    for (int64_t k = 0; k < nb; k++) {
        CHECK_EQ_INT(fl_translation_next(d, b), 1);
        CHECK_OK(fl_translation_batch_fill(ref, k, rb));
        for (int i = 0; i < FL_MODEL_TRANSFORMER_FEEDS; i++)
            if (!same_tensor(fl_translation_batch_tensor(b, i), fl_translation_batch_tensor(rb, i)))
                TFAIL("%d threads, rank %d of %d, epoch %d: batch %lld input %s differs", threads, rank, nranks, epoch,
                      (long long)k, fl_translation_batch_name(i));
        int64_t n, t;
        CHECK_OK(fl_translation_batch_counts(b, &n, &t));
        tokens += t;
    }
    CHECK_EQ_INT(fl_translation_next(d, b), 0);
    fl_translation_batch_free(b), fl_translation_batch_free(rb);
    fl_translation_free(d), fl_translation_free(ref);
    return tokens;
}

/* Batches built on reader threads: the same for 1 and 3 threads (and as the caller's own
 * fill), per rank of two, per epoch; a pass restarted midway; argument errors. */
TEST(reader_threads_give_the_same_batches)
{
    setup();
    gen("r", 5, 3000, 30);
    int64_t t1 = pass_matches_fill(1, 0, 1, 1), t3 = pass_matches_fill(3, 0, 1, 1);
    CHECK_EQ_INT(t1, t3);
    int64_t r0 = pass_matches_fill(3, 0, 2, 2), r1 = pass_matches_fill(2, 1, 2, 2);
    CHECK(r0 > 0 && r1 > 0 && r0 + r1 <= t1 && r0 + r1 >= t1 - 300); /* two shards, at most one batch dropped */
    /* one data set, two passes: the second begins while the first is midway */
    fl_translation_opts o = fl_translation_opts_default();
    o.batch_size = 300, o.n_head = 2, o.threads = 3;
    fl_translation_data *d = load("r", "train", &o);
    fl_translation_batch *b = fl_translation_batch_create(), *first = fl_translation_batch_create();
    CHECK_FAILS(fl_translation_next(d, b), FL_ESTATE, "fl_translation_begin");
    int64_t nb = fl_translation_begin(d, 0);
    CHECK(nb > 2);
    CHECK_EQ_INT(fl_translation_next(d, first), 1);
    CHECK_EQ_INT(fl_translation_next(d, b), 1);
    CHECK_EQ_INT(fl_translation_begin(d, 0), nb);
    CHECK_EQ_INT(fl_translation_next(d, b), 1);
    for (int i = 0; i < FL_MODEL_TRANSFORMER_FEEDS; i++)
        CHECK(same_tensor(fl_translation_batch_tensor(b, i), fl_translation_batch_tensor(first, i)));
    fl_translation_batch_free(b), fl_translation_batch_free(first);
    fl_translation_free(d); /* ends the pass with batches still prepared */
    o.threads = 0;
    char sv[256];
    snprintf(sv, sizeof sv, "%s/r/src_vocab.txt", DIR_);
    fl_translation_data *bad = NULL;
    CHECK_FAILS(fl_translation_load(sv, sv, NULL, 0, &o, &bad), FL_EINVAL, "threads must be in [1, 32]");
    CHECK_FAILS(fl_translation_begin(NULL, 0), FL_EINVAL, "fl_translation_begin");
    cleanup();
}

TEST_MAIN(T(cache_decodes_the_words_of_the_full_prefix), T(cache_decodes_the_words_of_the_full_prefix_amp_o1),
          T(cache_decodes_the_words_of_the_full_prefix_amp_o2), T(cache_follows_decoder_variants),
          T(reader_threads_give_the_same_batches))
