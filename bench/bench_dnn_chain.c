/*
 * bench_dnn_chain.c - the fc stack forward through Fleet's executor against the same chain of
 * oneDNN matmul primitives called directly, in one process, timed in alternating slices.
 *
 * usage: bench_dnn_chain [--batch N] [--seconds S] [--warmup N] [--tag T]
 *
 *   ours   x[273] -> fc400 relu x3 -> fc2 built with the public layer API, run by fl_exe_run with
 *          the batch fed and the output fetched (bench_train fcfwd's program), FLEET_GEMM as set
 *   plain  four oneDNN matmul primitives (src x weights + bias, relu as an eltwise post-op on the
 *          first three) with plain row-major f32 memory, created once; the activations of one
 *          layer are the next one's source (no copies).  The like-for-like reference: the same
 *          layouts Fleet's tensors have.  Target: ours >= 0.9x of it.
 *   any    the same chain with the weights in the layout oneDNN picks (format any, reordered once
 *          at setup): the best the library offers for these shapes, as context.
 * GFLOP/s counts the matrix products only: 2*B*(273*400 + 2*400*400 + 400*2) per pass.  The three
 * are timed in 10 rounds of slices (ours, plain, any; each --seconds / 30), so all see the same
 * machine state.  Threads: oneDNN's OpenMP team is OMP_NUM_THREADS for the bare chains; set
 * FLEET_NUM_THREADS to the same value for ours.  Input: 32 batches of uniform [-1, 1) features,
 * cycled through.
 * Output: "R<TAB>key<TAB>value<TAB>unit" lines (dnnchain.{ours,plain,any}.bB.gflops, the two
 * ratios) and "# " lines naming oneDNN's version and ISA and what Fleet's products ran on.
 * Without oneDNN at build time (no FL_HAVE_DNNL) it says so and exits 0.
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/tensor_internal.h" /* fl__gemm_info */

#define CLI_NAME "bench_dnn_chain"
#define CLI_HELP_HINT "usage: bench_dnn_chain [--batch N > 0] [--seconds S > 0] [--warmup N >= 0] [--tag T]"
#include "bench_args.h"

#ifndef FL_HAVE_DNNL
int main(void)
{
    printf("# bench_dnn_chain: built without oneDNN (libdnnl-dev); nothing to compare\n");
    return 0;
}
#else
#include <dnnl.h>
#include <dnnl_debug.h>

#define POOL 32
#define NL 4

static const int dims[NL + 1] = {273, 400, 400, 400, 2};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, "bench_dnn_chain: %s: %s\n", what, why);
    exit(1);
}

#define TRY(call, what)                                           \
    do {                                                          \
        dnnl_status_t st_ = (call);                               \
        if (st_ != dnnl_success) die(what, dnnl_status2str(st_)); \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static float rng_uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)(rng_state >> 40) / 16777216.0f * 2.0f - 1.0f;
}

static float *falloc(int64_t n, float scale)
{
    float *p = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) / 64 * 64);
    if (!p) die("allocating", "out of memory");
    for (int64_t j = 0; j < n; j++) p[j] = scale * rng_uniform();
    return p;
}

/* one chain of NL matmul primitives over plain activations act[0..NL] */
typedef struct {
    dnnl_primitive_t prim[NL];
    dnnl_memory_t src[NL], wei[NL], bias[NL], dst[NL];
    float *w[NL], *b[NL];
} chain;

static void chain_make(chain *c, dnnl_engine_t eng, dnnl_stream_t st, int batch, float **act, int any_weights)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NL; i++) {
        int k = dims[i], n = dims[i + 1];
        dnnl_memory_desc_t smd, wmd, wplain, bmd, dmd;
        dnnl_dims_t sd = {batch, k}, wd = {k, n}, bd = {1, n}, dd = {batch, n};
        TRY(dnnl_memory_desc_init_by_tag(&smd, 2, sd, dnnl_f32, dnnl_ab), "source descriptor");
        TRY(dnnl_memory_desc_init_by_tag(&wplain, 2, wd, dnnl_f32, dnnl_ab), "weights descriptor");
        TRY(dnnl_memory_desc_init_by_tag(&wmd, 2, wd, dnnl_f32, any_weights ? dnnl_format_tag_any : dnnl_ab),
            "weights descriptor");
        TRY(dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_f32, dnnl_ab), "bias descriptor");
        TRY(dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dnnl_f32, dnnl_ab), "destination descriptor");
        dnnl_post_ops_t po;
        dnnl_primitive_attr_t attr;
        TRY(dnnl_post_ops_create(&po), "post-ops");
        if (i < NL - 1) TRY(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f), "relu post-op");
        TRY(dnnl_primitive_attr_create(&attr), "attributes");
        TRY(dnnl_primitive_attr_set_post_ops(attr, po), "attributes");
        dnnl_matmul_desc_t md;
        dnnl_primitive_desc_t pd;
        TRY(dnnl_matmul_desc_init(&md, &smd, &wmd, &bmd, &dmd), "matmul descriptor");
        TRY(dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL), "matmul primitive descriptor");
        TRY(dnnl_primitive_create(&c->prim[i], pd), "matmul primitive");
        const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        c->w[i] = falloc((int64_t)k * n, 0.05f);
        c->b[i] = falloc(n, 0.01f);
        TRY(dnnl_memory_create(&c->src[i], &smd, eng, act[i]), "source memory");
        TRY(dnnl_memory_create(&c->dst[i], &dmd, eng, act[i + 1]), "destination memory");
        TRY(dnnl_memory_create(&c->bias[i], &bmd, eng, c->b[i]), "bias memory");
        if (dnnl_memory_desc_equal(wq, &wplain)) {
            TRY(dnnl_memory_create(&c->wei[i], &wplain, eng, c->w[i]), "weights memory");
        } else { /* reorder the plain weights once into the layout the primitive wants */
            dnnl_memory_t from;
            dnnl_primitive_desc_t rpd;
            dnnl_primitive_t r;
            TRY(dnnl_memory_create(&from, &wplain, eng, c->w[i]), "weights memory");
            TRY(dnnl_memory_create(&c->wei[i], wq, eng, DNNL_MEMORY_ALLOCATE), "weights memory");
            TRY(dnnl_reorder_primitive_desc_create(&rpd, &wplain, eng, wq, eng, NULL), "reorder descriptor");
            TRY(dnnl_primitive_create(&r, rpd), "reorder");
            dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, c->wei[i]}};
            TRY(dnnl_primitive_execute(r, st, 2, ra), "reorder");
            TRY(dnnl_stream_wait(st), "reorder");
            dnnl_primitive_destroy(r);
            dnnl_primitive_desc_destroy(rpd);
            dnnl_memory_destroy(from);
        }
        dnnl_primitive_desc_destroy(pd);
        dnnl_primitive_attr_destroy(attr);
        dnnl_post_ops_destroy(po);
    }
}

static void chain_run(chain *c, dnnl_stream_t st, float *x)
{
    TRY(dnnl_memory_set_data_handle(c->src[0], x), "source");
    for (int i = 0; i < NL; i++) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, c->src[i]},
                                   {DNNL_ARG_WEIGHTS, c->wei[i]},
                                   {DNNL_ARG_BIAS, c->bias[i]},
                                   {DNNL_ARG_DST, c->dst[i]}};
        TRY(dnnl_primitive_execute(c->prim[i], st, 4, args), "matmul");
    }
    TRY(dnnl_stream_wait(st), "stream");
}

static void chain_free(chain *c)
{
    for (int i = 0; i < NL; i++) {
        dnnl_primitive_destroy(c->prim[i]);
        dnnl_memory_destroy(c->src[i]);
        dnnl_memory_destroy(c->wei[i]);
        dnnl_memory_destroy(c->bias[i]);
        dnnl_memory_destroy(c->dst[i]);
        free(c->w[i]);
        free(c->b[i]);
    }
}

static void fdie(const char *what) { die(what, fl_last_error()); }

static const char *isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

int main(int argc, char **argv)
{
    int batch = 512, warmup = 20;
    double seconds = 1.5;
    const char *tag = "";
    const bench_opt opts[] = {
        {"batch", BA_INT, &batch}, {"seconds", BA_DOUBLE, &seconds}, {"warmup", BA_INT, &warmup}, {"tag", BA_STR, &tag}};
    bench_args(argc, argv, 1, opts, BA_COUNT(opts), NULL, NULL);
    if (batch <= 0 || !(seconds > 0) || warmup < 0) cli_die(2, "--batch and --seconds must be positive, --warmup >= 0");
    const dnnl_version_t *v = dnnl_version();
    char info[256];
    printf("# bench_dnn_chain: batch %d; oneDNN %d.%d.%d isa %s, OMP_NUM_THREADS=%s FLEET_NUM_THREADS=%s; ours: %s\n",
           batch, v->major, v->minor, v->patch, isa_name(dnnl_get_effective_cpu_isa()),
           getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "(unset)",
           getenv("FLEET_NUM_THREADS") ? getenv("FLEET_NUM_THREADS") : "(unset)", fl__gemm_info(info, sizeof info));

    /* ours: bench_train fcfwd's program */
    fl_prog *p = fl_prog_create();
    fl_var *h = fl_layer_data(p, "x", FL_SHAPE(273), FL_FLOAT32, 0);
    for (int i = 0; i < 3; i++) h = fl_layer_fc(FL_VARS(h), 400, "relu");
    fl_var *out = fl_layer_fc(FL_VARS(h), 2, NULL);
    if (!out) fdie("building the fc stack");
    const char *fetch = fl_var_name(out);
    fl_exe *exe = fl_exe_create(NULL);
    if (!exe || fl_exe_run(exe, fl_prog_startup(p), NULL, 0, NULL, 0, NULL) != FL_OK) fdie("startup");
    fl_tensor *xs[POOL];
    for (int i = 0; i < POOL; i++) {
        xs[i] = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){batch, 273});
        if (!xs[i]) fdie("allocating the inputs");
        float *x = fl_tensor_f32(xs[i]);
        for (int64_t j = 0; j < (int64_t)batch * 273; j++) x[j] = rng_uniform();
    }

    dnnl_engine_t eng;
    dnnl_stream_t st;
    TRY(dnnl_engine_create(&eng, dnnl_cpu, 0), "engine");
    TRY(dnnl_stream_create(&st, eng, dnnl_stream_default_flags), "stream");
    float *act[2][NL + 1];
    chain ch[2];
    for (int c = 0; c < 2; c++) {
        for (int i = 1; i <= NL; i++) act[c][i] = falloc((int64_t)batch * dims[i], 0.0f);
        act[c][0] = fl_tensor_f32(xs[0]);
        chain_make(&ch[c], eng, st, batch, act[c], c);
    }

    double flop = 0;
    for (int i = 0; i < NL; i++) flop += 2.0 * batch * dims[i] * dims[i + 1];
    long n[3] = {0, 0, 0};
    double t[3] = {0, 0, 0};
    fl_tensor *res;
    for (int i = 0; i < warmup; i++) {
        fl_feed feed = {"x", xs[i % POOL]};
        if (fl_exe_run(exe, p, &feed, 1, &fetch, 1, &res) != FL_OK) fdie("fl_exe_run");
        for (int c = 0; c < 2; c++) chain_run(&ch[c], st, fl_tensor_f32(xs[i % POOL]));
    }
    double slice = seconds / 30.0;
    for (int r = 0; r < 10; r++) {
        for (int s = 0; s < 3; s++) {
            double t0 = now(), el;
            do {
                float *x = fl_tensor_f32(xs[n[s] % POOL]);
                if (s == 0) {
                    fl_feed feed = {"x", xs[n[s] % POOL]};
                    if (fl_exe_run(exe, p, &feed, 1, &fetch, 1, &res) != FL_OK) fdie("fl_exe_run");
                } else {
                    chain_run(&ch[s - 1], st, x);
                }
                n[s]++;
                el = now() - t0;
            } while (el < slice);
            t[s] += el;
        }
    }
    static const char *names[3] = {"ours", "plain", "any"};
    double g[3];
    char key[128];
    for (int s = 0; s < 3; s++) {
        g[s] = flop * (double)n[s] / t[s] * 1e-9;
        printf("R\tdnnchain.%s.b%d%s.gflops\t%.1f\tGFLOP/s\n", names[s], batch, tag, g[s]);
    }
    snprintf(key, sizeof key, "dnnchain.ratio.b%d%s", batch, tag);
    printf("R\t%s.ours_over_plain\t%.3f\tx\n", key, g[0] / g[1]);
    printf("R\t%s.ours_over_any\t%.3f\tx\n", key, g[0] / g[2]);
    printf("# %.3f MFLOP per pass; passes: ours %ld in %.3f s, plain %ld in %.3f s, any %ld in %.3f s\n", flop * 1e-6, n[0],
           t[0], n[1], t[1], n[2], t[2]);
    for (int c = 0; c < 2; c++) {
        chain_free(&ch[c]);
        for (int i = 1; i <= NL; i++) free(act[c][i]);
    }
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    for (int i = 0; i < POOL; i++) fl_tensor_free(xs[i]);
    fl_exe_free(exe);
    fl_prog_free(p);
    return 0;
}
#endif
