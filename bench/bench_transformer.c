/*
 * bench_transformer - Transformer training throughput (target tokens per second) and
 * beam-search decoding speed (sentences per second) of fl_model_transformer_build on a
 * synthetic batch: every sentence seq tokens long (no padding), ids drawn uniformly.  The
 * defaults are Transformer-base (d_model 512, 6 + 6 layers, 8 heads, d_ff 2048, dropout
 * 0.1) at 2048 target tokens per batch.  Threads: FLEET_NUM_THREADS (bench/transformer.sh
 * runs 1 and 2 next to bench/transformer_torch.py, PyTorch on the same model and batch).
 * Beam search runs twice, with the key / value cache and over the whole prefix each step;
 * the two must give the same words (checked, exit 1 otherwise); --decode 0 leaves it out.
 * --amp 1: AMP bf16 (fl_amp_decorate_optimizer; --amp-level 2: O2).  cpu_s: the process's
 * user + system CPU seconds over the timed steps (on a shared machine, tokens per CPU second
 * at one thread is less disturbed by the other jobs than wall time).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "fleet.h"

#define CLI_NAME "bench_transformer"
#define CLI_HELP_HINT                                                                                                \
    "usage: bench_transformer [--d_model 512] [--layers 6] [--heads 8] [--ffn 2048] [--vocab 8000] [--tokens 2048] " \
    "[--seq 32] [--steps 3] [--beam 4] [--decode 8] [--out_len 32] [--amp 0|1] [--amp-level 1|2]"
#include "bench_args.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec +
           (double)u.ru_stime.tv_usec * 1e-6;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_transformer: %s: %s\n", what, fl_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    int d_model = 512, layers = 6, heads = 8, ffn = 2048, vocab = 8000, tokens = 2048, seq = 32, steps = 3, beam = 4;
    int decode = 8, out_len = 32, amp = 0, amp_level = 1;
    const bench_opt opts[] = {{"d_model", BA_INT, &d_model},
                              {"layers", BA_INT, &layers},
                              {"heads", BA_INT, &heads},
                              {"ffn", BA_INT, &ffn},
                              {"vocab", BA_INT, &vocab},
                              {"tokens", BA_INT, &tokens},
                              {"seq", BA_INT, &seq},
                              {"steps", BA_INT, &steps},
                              {"beam", BA_INT, &beam},
                              {"decode", BA_INT, &decode},
                              {"out_len", BA_INT, &out_len},
                              {"amp", BA_INT, &amp},
                              {"amp-level", BA_INT, &amp_level}};
    bench_args(argc, argv, 1, opts, BA_COUNT(opts), NULL, NULL);
    if (seq < 2 || tokens < seq || steps < 1 || heads < 1 || d_model % heads || vocab < 4 || decode < 0 ||
        (amp_level != 1 && amp_level != 2))
        cli_die(2, "need seq >= 2, tokens >= seq, steps >= 1, d_model a multiple of heads, vocab >= 4, decode >= 0, "
                   "amp-level 1 or 2");
    fl_model_transformer_config c = fl_model_transformer_default();
    c.src_vocab_size = c.trg_vocab_size = vocab;
    c.n_layer = layers, c.n_head = heads, c.d_model = d_model, c.d_inner_hid = ffn;
    c.d_key = c.d_value = d_model / heads;
    if (c.max_length < seq + out_len + 2) c.max_length = seq + out_len + 2;
    fl_prog *p = fl_prog_create();
    fl_model_transformer m;
    if (fl_model_transformer_build(p, &c, &m) != FL_OK) die("build");
    fl_opt *o = fl_model_transformer_optimizer(p, &c, 2.0f, 8000, 0);
    if (!o) die("optimizer");
    if (amp) {
        fl_amp_opts a;
        memset(&a, 0, sizeof a);
        a.dtype = FL_BFLOAT16;
        a.use_pure_fp16 = amp_level == 2;
        if (fl_amp_decorate_optimizer(o, &a) != FL_OK) die("amp");
    }
    if (fl_opt_minimize(o, m.loss) != FL_OK) die("minimize");
    fl_exe *e = fl_exe_create(NULL);
    if (fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL) != FL_OK) die("startup");
    /* one batch: B sentences of seq tokens, source and target */
    const int64_t B = tokens / seq, S = seq, T = seq, H = heads;
    fl_tensor *t[FL_MODEL_TRANSFORMER_FEEDS];
    t[0] = fl_tensor_create(FL_INT64, 3, (const int64_t[]){B, S, 1});
    t[1] = fl_tensor_create(FL_INT64, 3, (const int64_t[]){B, S, 1});
    t[2] = fl_tensor_create(FL_FLOAT32, 4, (const int64_t[]){B, H, S, S});
    t[3] = fl_tensor_create(FL_INT64, 3, (const int64_t[]){B, T, 1});
    t[4] = fl_tensor_create(FL_INT64, 3, (const int64_t[]){B, T, 1});
    t[5] = fl_tensor_create(FL_FLOAT32, 4, (const int64_t[]){B, H, T, T});
    t[6] = fl_tensor_create(FL_FLOAT32, 4, (const int64_t[]){B, H, T, S});
    t[7] = fl_tensor_create(FL_INT64, 2, (const int64_t[]){B * T, 1});
    t[8] = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){B * T, 1});
    uint64_t r = 12345;
    for (int64_t i = 0; i < B * S; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        fl_tensor_i64(t[0])[i] = 3 + (int64_t)((r >> 33) % (uint64_t)(vocab - 3));
        fl_tensor_i64(t[1])[i] = i % S;
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        fl_tensor_i64(t[3])[i] = 3 + (int64_t)((r >> 33) % (uint64_t)(vocab - 3));
        fl_tensor_i64(t[4])[i] = i % T;
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        fl_tensor_i64(t[7])[i] = 3 + (int64_t)((r >> 33) % (uint64_t)(vocab - 3));
        fl_tensor_f32(t[8])[i] = 1;
    }
    memset(fl_tensor_data(t[2]), 0, fl_tensor_nbytes(t[2]));
    memset(fl_tensor_data(t[6]), 0, fl_tensor_nbytes(t[6]));
    float *cb = fl_tensor_f32(t[5]);
    for (int64_t k = 0; k < B * H; k++)
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++) cb[(k * T + i) * T + j] = j > i ? -1e9f : 0;
    fl_feed feed[FL_MODEL_TRANSFORMER_FEEDS];
    for (int i = 0; i < FL_MODEL_TRANSFORMER_FEEDS; i++) feed[i] = (fl_feed){fl_translation_batch_name(i), t[i]};
    const char *fetch[1] = {fl_var_name(m.loss)};
    fl_tensor *loss;
    if (fl_exe_run(e, p, feed, FL_MODEL_TRANSFORMER_FEEDS, fetch, 1, &loss) != FL_OK) die("warm-up step");
    double t0 = now(), c0 = cpu_s();
    for (int s = 0; s < steps; s++)
        if (fl_exe_run(e, p, feed, FL_MODEL_TRANSFORMER_FEEDS, fetch, 1, &loss) != FL_OK) die("step");
    double train_s = now() - t0, train_c = cpu_s() - c0;
    printf("fleet train: %.1f tokens/s (%lld x %lld target tokens per batch, %d steps in %.2f s, loss %.3f; amp %d "
           "level %d) cpu_s %.2f\n",
           (double)(B * T * steps) / train_s, (long long)B, (long long)T, steps, train_s,
           *(const float *)fl_tensor_cdata(loss), amp, amp_level, train_c);
    if (!decode) {
        for (int i = 0; i < FL_MODEL_TRANSFORMER_FEEDS; i++) fl_tensor_free(t[i]);
        fl_exe_free(e);
        fl_opt_free(o);
        fl_prog_free(p);
        return 0;
    }
    /* beam search on the first `decode` sources, exactly out_len steps (the model is untrained:
     * max_out_len bounds it) */
    fl_transformer_decoder *dec;
    if (fl_transformer_decoder_create(e, p, fl_var_name(m.predict), 0, 1, &dec) != FL_OK) die("decoder");
    const int64_t **src = malloc((size_t)decode * sizeof *src);
    int *nsrc = malloc((size_t)decode * sizeof *nsrc), *nout = malloc((size_t)decode * sizeof *nout);
    int64_t **out = malloc((size_t)decode * sizeof *out);
    for (int i = 0; i < decode; i++) src[i] = fl_tensor_i64(t[0]) + (i % B) * S, nsrc[i] = (int)S;
    int *nout2 = malloc((size_t)decode * sizeof *nout2);
    int64_t **out2 = malloc((size_t)decode * sizeof *out2);
    fl_transformer_decode_opts d = fl_transformer_decode_opts_default();
    d.beam_size = beam;
    d.max_out_len = out_len;
    d.batch_size = decode;
    double dec_s[2];
    for (int u = 0; u < 2; u++) {
        d.use_cache = !u;
        t0 = now();
        if (fl_transformer_decode(dec, &d, src, nsrc, decode, u ? out2 : out, u ? nout2 : nout) != FL_OK) die("decode");
        dec_s[u] = now() - t0;
    }
    int64_t words = 0, same = 1;
    for (int i = 0; i < decode; i++) {
        same &= nout[i] == nout2[i] && !memcmp(out[i], out2[i], (size_t)nout[i] * sizeof *out[i]);
        words += nout[i], free(out[i]), free(out2[i]);
    }
    for (int u = 0; u < 2; u++)
        printf("fleet beam search, %s: %.2f sentences/s (beam %d, %d sentences of %d source tokens, %lld words out, "
               "%.2f s)\n",
               u ? "full prefix" : "kv cache", decode / dec_s[u], beam, decode, seq, (long long)words, dec_s[u]);
    printf("fleet kv cache / full prefix: %.2fx, the same words: %s\n", dec_s[1] / dec_s[0], same ? "yes" : "NO");
    fl_transformer_decoder_free(dec);
    free(src), free(nsrc), free(nout), free(out), free(nout2), free(out2);
    for (int i = 0; i < FL_MODEL_TRANSFORMER_FEEDS; i++) fl_tensor_free(t[i]);
    fl_exe_free(e);
    fl_opt_free(o);
    fl_prog_free(p);
    return same ? 0 : 1;
}
