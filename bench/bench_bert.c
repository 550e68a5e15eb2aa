/*
 * bench_bert - BERT pre-training throughput (examples per second) and peak resident memory
 * of fl_model_bert_build on a synthetic batch: every example seq tokens long (input_mask all
 * 1, no padding), ids drawn uniformly, `mask` predicted positions per example, half the
 * next-sentence labels 1.  The defaults are BERT-base (hidden 768, 12 layers, 12 heads,
 * intermediate 3072, gelu, dropout 0.1) with the demo's vocabulary (21128) at 8 x 128;
 * Adam with BERT's weight decay (0.01, not on layer norms and biases).  --amp 1: AMP bf16
 * (fl_amp_decorate_optimizer; --amp-level 2: O2); --recompute 1: recompute with a checkpoint
 * at each encoder layer's output.  Threads: FLEET_NUM_THREADS.  bench/bert.sh runs it next
 * to bench/bert_torch.py (PyTorch, the same model and batch).
 *
 * Memory: "rss" is getrusage's ru_maxrss (the process's peak resident set, MiB) after the
 * startup program (parameters and optimizer state made) and after the timed steps; startup_s:
 * the wall time of the startup program (the initializers).  cpu_s:
 * the process's user + system CPU seconds over the timed steps (on a shared machine,
 * examples per CPU second at one thread is less disturbed by the other jobs than wall time).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "fleet.h"

#define CLI_NAME "bench_bert"
#define CLI_HELP_HINT                                                                                              \
    "usage: bench_bert [--batch 8] [--seq 128] [--mask 20] [--steps 2] [--warmup 1] [--hidden 768] [--layers 12] " \
    "[--heads 12] [--ffn 3072] [--vocab 21128] [--amp 0|1] [--amp-level 1|2] [--recompute 0|1] [--tag T]"
#include "bench_args.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* user + system CPU seconds of the process (all its threads) */
static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec +
           (double)u.ru_stime.tv_usec * 1e-6;
}

static double maxrss_mib(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_maxrss / 1024.0;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_bert: %s: %s\n", what, fl_last_error());
    exit(1);
}

static uint64_t rng(uint64_t *r)
{
    *r = *r * 6364136223846793005ULL + 1442695040888963407ULL;
    return *r >> 33;
}

int main(int argc, char **argv)
{
    int batch = 8, seq = 128, mask = 20, steps = 2, warmup = 1, hidden = 768, layers = 12, heads = 12, ffn = 3072;
    int vocab = 21128, amp = 0, amp_level = 1, recompute = 0;
    const char *tag = "";
    const bench_opt opts[] = {
        {"batch", BA_INT, &batch},         {"seq", BA_INT, &seq},       {"mask", BA_INT, &mask},
        {"steps", BA_INT, &steps},         {"warmup", BA_INT, &warmup}, {"hidden", BA_INT, &hidden},
        {"layers", BA_INT, &layers},       {"heads", BA_INT, &heads},   {"ffn", BA_INT, &ffn},
        {"vocab", BA_INT, &vocab},         {"amp", BA_INT, &amp},       {"amp-level", BA_INT, &amp_level},
        {"recompute", BA_INT, &recompute}, {"tag", BA_STR, &tag}};
    bench_args(argc, argv, 1, opts, BA_COUNT(opts), NULL, NULL);
    if (batch < 1 || seq < 2 || seq > 512 || mask < 1 || mask > seq || steps < 1 || warmup < 0 || heads < 1 ||
        hidden % heads || vocab < 8 || (amp_level != 1 && amp_level != 2))
        cli_die(2, "need batch >= 1, seq in [2, 512], mask in [1, seq], steps >= 1, warmup >= 0, hidden a multiple "
                   "of heads, vocab >= 8, amp-level 1 or 2");
    fl_model_bert_config c = fl_model_bert_default();
    c.vocab_size = vocab, c.hidden_size = hidden, c.num_hidden_layers = layers;
    c.num_attention_heads = heads, c.intermediate_size = ffn;
    fl_prog *p = fl_prog_create();
    fl_prog_set_seed(p, 1);
    fl_model_bert m;
    if (fl_model_bert_build(p, &c, &m) != FL_OK) die("build");
    fl_opt *o = fl_opt_adam(1e-4f, 0.9f, 0.999f, 1e-6f);
    if (!o || fl_opt_set_weight_decay(o, 0.01f) != FL_OK ||
        fl_opt_set_exclude_from_weight_decay(o, FL_OPT_BERT_NO_DECAY) != FL_OK)
        die("optimizer");
    if (amp) {
        fl_amp_opts a;
        memset(&a, 0, sizeof a);
        a.dtype = FL_BFLOAT16;
        a.use_pure_fp16 = amp_level == 2;
        if (fl_amp_decorate_optimizer(o, &a) != FL_OK) die("amp");
    }
    if (recompute) {
        char names[FL_MODEL_BERT_MAX_LAYERS * 64] = "";
        size_t n = 0;
        for (int i = 0; i < m.ncheckpoints; i++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? "," : "", fl_var_name(m.checkpoints[i]));
        if (fl_opt_set_recompute(o, names) != FL_OK) die("recompute");
    }
    if (fl_opt_minimize(o, m.loss) != FL_OK) die("minimize");
    fl_exe *e = fl_exe_create(NULL);
    double ts = now();
    if (fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL) != FL_OK) die("startup");
    double startup_s = now() - ts, rss_startup = maxrss_mib();

    const int64_t B = batch, S = seq, M = (int64_t)batch * mask;
    fl_tensor *t[7];
    for (int i = 0; i < 3; i++) t[i] = fl_tensor_create(FL_INT64, 3, (const int64_t[]){B, S, 1});
    t[3] = fl_tensor_create(FL_FLOAT32, 3, (const int64_t[]){B, S, 1});
    t[4] = fl_tensor_create(FL_INT64, 2, (const int64_t[]){M, 1});
    t[5] = fl_tensor_create(FL_INT64, 2, (const int64_t[]){M, 1});
    t[6] = fl_tensor_create(FL_INT64, 2, (const int64_t[]){B, 1});
    uint64_t r = 12345;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t s = 0; s < S; s++) {
            int64_t k = b * S + s;
            fl_tensor_i64(t[0])[k] = s == 0 ? 1 : 4 + (int64_t)(rng(&r) % (uint64_t)(vocab - 4));
            fl_tensor_i64(t[1])[k] = s;
            fl_tensor_i64(t[2])[k] = s >= S / 2;
            fl_tensor_f32(t[3])[k] = 1;
        }
        /* mask positions spread over the example (1 + j * (S - 1) / mask), distinct */
        for (int j = 0; j < mask; j++) {
            int64_t k = b * mask + j;
            fl_tensor_i64(t[5])[k] = b * S + 1 + (int64_t)j * (S - 1) / mask;
            fl_tensor_i64(t[4])[k] = 4 + (int64_t)(rng(&r) % (uint64_t)(vocab - 4));
        }
        fl_tensor_i64(t[6])[b] = b & 1;
    }
    fl_feed feed[7];
    for (int i = 0; i < 7; i++) feed[i] = (fl_feed){fl_var_name(m.feeds[i]), t[i]};
    const char *fetch[1] = {fl_var_name(m.loss)};
    fl_tensor *loss = NULL;
    for (int s = 0; s < warmup; s++)
        if (fl_exe_run(e, p, feed, 7, fetch, 1, &loss) != FL_OK) die("warm-up step");
    double t0 = now(), c0 = cpu_s();
    for (int s = 0; s < steps; s++)
        if (fl_exe_run(e, p, feed, 7, fetch, 1, &loss) != FL_OK) die("step");
    double dt = now() - t0, dc = cpu_s() - c0;
    printf("fleet%s train: %.3f examples/s (%lld x %lld, %d masked each, %d steps in %.2f s, loss %.3f; amp %d "
           "level %d, recompute %d) cpu_s %.2f rss_startup_mib %.0f rss_peak_mib %.0f startup_s %.2f\n",
           tag, (double)(B * steps) / dt, (long long)B, (long long)S, mask, steps, dt,
           *(const float *)fl_tensor_cdata(loss), amp, amp_level, recompute, dc, rss_startup, maxrss_mib(), startup_s);
    for (int i = 0; i < 7; i++) fl_tensor_free(t[i]);
    fl_exe_free(e);
    fl_opt_free(o);
    fl_prog_free(p);
    return 0;
}
