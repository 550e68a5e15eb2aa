/*
 * dnn.c - matrix products with a fused epilogue (bias, accumulate into C, relu / tanh /
 * sigmoid) for fc and mul_grad: oneDNN matmul primitives, created once per shape and kept
 * in the op's cache, or OpenBLAS's sgemm followed by the epilogue loops of kernels.c.
 *
 * FLEET_GEMM (src/base/env.c) picks the library: auto (oneDNN when the build has it),
 * dnnl or openblas.  docs/engine.md says which op uses which and the measurements behind
 * it.  oneDNN's kernels are chosen by oneDNN at run time for the CPU at hand (AVX2,
 * AVX-512, AVX512-BF16, AMX); fl__gemm_info() names the ISA, ONEDNN_VERBOSE=1 prints each
 * primitive's implementation.
 *
 * Threads: Debian's oneDNN runs on OpenMP.  Each call sets the calling thread's OpenMP
 * team size, when it differs from the last call's, to FLEET_NUM_THREADS (1 or 2, default
 * 1), or to 1 while Hogwild trainer threads run (fl__dnn_single), so trainer threads x
 * kernel threads stays within the cores as with OpenBLAS (src/tensor/parallel.c).
 */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "tensor_internal.h"

#ifdef FL_HAVE_DNNL
#include <dnnl.h>
#include <dnnl_debug.h>
/* libgomp's (linked by the Makefile with oneDNN); declared here so no omp.h is needed. */
extern void omp_set_num_threads(int n);
#endif

#define CACHE_MAGIC 0x47454d4du /* "GEMM" */
#define CACHE_SLOTS 8

typedef struct {
    fl_gemm_desc key;
    int used;
    uint64_t last;
#ifdef FL_HAVE_DNNL
    dnnl_primitive_t prim;
    dnnl_memory_t ma, mb, mbias, mc;
#endif
} entry;

struct fl_gemm_cache {
    uint32_t magic;
    uint64_t tick;
#ifdef FL_HAVE_DNNL
    dnnl_stream_t stream;
#endif
    entry e[CACHE_SLOTS];
    void *conv[3]; /* converted A and B of mixed products; float32 C of a low-precision C */
    size_t conv_cap[3];
    void *scratch; /* fl__gemm_scratch */
    size_t scratch_cap;
    int f16_failed; /* oneDNN refused a float16 product of this op: float32 from then on */
};

static atomic_int lib_choice;        /* 0 unread, else FL_GEMM_* or a negative status */
static atomic_uint_fast64_t n_prims; /* primitives created */
static atomic_int single_depth;      /* > 0 while trainer threads run */

int fl__dnn_available(void)
{
#ifdef FL_HAVE_DNNL
    return 1;
#else
    return 0;
#endif
}

uint64_t fl__dnn_primitives_created(void) { return atomic_load(&n_prims); }

int fl__gemm_bf16_native(void)
{
#ifdef FL_HAVE_DNNL
    /* the ISA values are bit sets: AVX512-BF16 and AMX both contain avx512_core_bf16's bits */
    return fl__gemm_lib() == FL_GEMM_DNNL &&
           ((unsigned)dnnl_get_effective_cpu_isa() & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
               (unsigned)dnnl_cpu_isa_avx512_core_bf16;
#else
    return 0;
#endif
}

#ifdef FL_HAVE_DNNL
static void dnn_init(void);
static struct {
    pthread_once_t once;
    int native;
} f16 = {PTHREAD_ONCE_INIT, 0};

/* A float16 matmul primitive oneDNN implements with float16 instructions (not its
 * reference code): oneDNN 2.6 has none on CPUs before avx512_core_fp16 / AMX-FP16. */
static void f16_probe(void);
#endif

int fl__gemm_f16_native(void)
{
#ifdef FL_HAVE_DNNL
    if (fl__gemm_lib() != FL_GEMM_DNNL) return 0;
    pthread_once(&f16.once, f16_probe);
    return f16.native;
#else
    return 0;
#endif
}

void fl__dnn_single(int on) { atomic_fetch_add(&single_depth, on ? 1 : -1); }

void fl__gemm_lib_reload(void) { atomic_store(&lib_choice, 0); }

int fl__gemm_lib(void)
{
    int v = atomic_load(&lib_choice);
    if (FL_LIKELY(v > 0)) return v;
    static const char *const names[] = {"auto", "dnnl", "openblas", NULL};
    int ix = 0;
    int st = fl__env_choice("FLEET_GEMM", names, 0, &ix);
    if (st != FL_OK) return st; /* not cached: the message is set for each caller */
    if (ix == 1 && !fl__dnn_available())
        return fl__err(FL_EUNSUPPORTED,
                       "FLEET_GEMM=dnnl but this build has no oneDNN (install libdnnl-dev, then make clean all)");
    v = ix == 2 ? FL_GEMM_OPENBLAS : ix == 1 ? FL_GEMM_DNNL : fl__dnn_available() ? FL_GEMM_DNNL : FL_GEMM_OPENBLAS;
    atomic_store(&lib_choice, v);
    return v;
}

/* half.h's rounding (to nearest even; a NaN stays a quiet NaN).  Branch-free, so each clone is one
 * vector loop (a scalar loop with a branch took 14% of a bfloat16 CTR-DNN step). */
FL_CLONES void fl__cvt_f32_to_bf16(uint16_t *restrict y, const float *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = fl__f32_to_bf16(x[i]);
}

FL_CLONES void fl__cvt_bf16_to_f32(float *restrict y, const uint16_t *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = fl__bf16_to_f32(x[i]);
}

/* ---- OpenBLAS: sgemm, then the epilogue as loops ---- */

static int gemm_openblas(const fl_gemm_desc *d, const void *a, const void *b, const float *bias, float *c)
{
    fl__sgemm(d->trans_a, d->trans_b, d->m, d->n, d->k, 1.0f, a, d->lda, b, d->ldb, d->beta, c, d->ldc);
    for (int64_t i = 0; i < d->m; i++) {
        float *r = c + i * d->ldc;
        if (d->has_bias) fl__vaxpy(r, 1.0f, bias, d->n);
        switch (d->act) {
        case FL_ACT_RELU: fl__relu(r, r, d->n); break;
        case FL_ACT_TANH: fl__tanh(r, r, d->n); break;
        case FL_ACT_SIGMOID: fl__sigmoid(r, r, d->n); break;
        default: break;
        }
    }
    return FL_OK;
}

#ifdef FL_HAVE_DNNL

static struct {
    pthread_once_t once;
    dnnl_engine_t engine;
    int threads; /* FLEET_NUM_THREADS */
    int status;
    char err[256];
} dnn = {PTHREAD_ONCE_INIT, NULL, 1, FL_OK, ""};

static _Thread_local int tl_threads; /* OpenMP team size last set by this thread (0: never) */

static void dnn_init(void)
{
    int64_t n = 1;
    if (fl__env_int("FLEET_NUM_THREADS", 1, 1, 2, &n) != FL_OK) {
        FL_WARN(FL_SUB_TENSOR, "%s; using 1", fl_last_error());
        n = 1;
    }
    dnn.threads = (int)n;
    dnnl_status_t s = dnnl_engine_create(&dnn.engine, dnnl_cpu, 0);
    if (s != dnnl_success) {
        dnn.status = FL_EUNSUPPORTED;
        snprintf(dnn.err, sizeof dnn.err, "oneDNN: could not create the CPU engine: %s", dnnl_status2str(s));
    }
}

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

static dnnl_alg_kind_t act_alg(int act)
{
    return act == FL_ACT_RELU ? dnnl_eltwise_relu : act == FL_ACT_TANH ? dnnl_eltwise_tanh : dnnl_eltwise_logistic;
}

static void entry_clear(entry *e)
{
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->ma) dnnl_memory_destroy(e->ma);
    if (e->mb) dnnl_memory_destroy(e->mb);
    if (e->mbias) dnnl_memory_destroy(e->mbias);
    if (e->mc) dnnl_memory_destroy(e->mc);
    memset(e, 0, sizeof *e);
}

#define DNNL_TRY(call, what)     \
    do {                         \
        s = (call);              \
        if (s != dnnl_success) { \
            step = (what);       \
            goto out;            \
        }                        \
    } while (0)

/* Creates the primitive and the memory objects of d in e. */
static int entry_make(entry *e, const fl_gemm_desc *d)
{
    dnnl_status_t s = dnnl_success;
    const char *step = "";
    dnnl_data_type_t abt = d->a_type == FL_BFLOAT16 ? dnnl_bf16 : d->a_type == FL_FLOAT16 ? dnnl_f16 : dnnl_f32;
    /* a_type == b_type here */
    dnnl_memory_desc_t amd, bmd, cmd, biasmd;
    dnnl_dims_t adims = {d->m, d->k}, bdims = {d->k, d->n}, cdims = {d->m, d->n}, biasdims = {1, d->n};
    dnnl_dims_t astr = {d->trans_a ? 1 : d->lda, d->trans_a ? d->lda : 1};
    dnnl_dims_t bstr = {d->trans_b ? 1 : d->ldb, d->trans_b ? d->ldb : 1};
    dnnl_dims_t cstr = {d->ldc, 1}, biasstr = {d->n, 1};
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_matmul_desc_t md;
    memset(e, 0, sizeof *e);
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&amd, 2, adims, abt, astr), "A descriptor");
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&bmd, 2, bdims, abt, bstr), "B descriptor");
    dnnl_data_type_t ct = d->c_type == FL_BFLOAT16 ? dnnl_bf16 : d->c_type == FL_FLOAT16 ? dnnl_f16 : dnnl_f32;
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&cmd, 2, cdims, ct, cstr), "C descriptor");
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&biasmd, 2, biasdims, dnnl_f32, biasstr), "bias descriptor");
    DNNL_TRY(dnnl_post_ops_create(&po), "post-ops");
    if (d->beta != 0.0f) DNNL_TRY(dnnl_post_ops_append_sum(po, d->beta), "sum post-op");
    if (d->act) DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1.0f, act_alg(d->act), 0.0f, 0.0f), "eltwise post-op");
    DNNL_TRY(dnnl_primitive_attr_create(&attr), "attributes");
    DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, po), "attributes");
    DNNL_TRY(dnnl_matmul_desc_init(&md, &amd, &bmd, d->has_bias ? &biasmd : NULL, &cmd), "matmul descriptor");
    DNNL_TRY(dnnl_primitive_desc_create(&pd, &md, attr, dnn.engine, NULL), "primitive descriptor");
    DNNL_TRY(dnnl_primitive_create(&e->prim, pd), "primitive");
    DNNL_TRY(dnnl_memory_create(&e->ma, &amd, dnn.engine, DNNL_MEMORY_NONE), "A memory");
    DNNL_TRY(dnnl_memory_create(&e->mb, &bmd, dnn.engine, DNNL_MEMORY_NONE), "B memory");
    DNNL_TRY(dnnl_memory_create(&e->mc, &cmd, dnn.engine, DNNL_MEMORY_NONE), "C memory");
    if (d->has_bias) DNNL_TRY(dnnl_memory_create(&e->mbias, &biasmd, dnn.engine, DNNL_MEMORY_NONE), "bias memory");
    atomic_fetch_add(&n_prims, 1);
    if (fl__log_enabled(FL_LOG_DEBUG, FL_SUB_TENSOR)) {
        const char *impl = "?";
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        FL_DEBUG(FL_SUB_TENSOR, "oneDNN matmul %lldx%lldx%lld %s%s: %s", (long long)d->m, (long long)d->n, (long long)d->k,
                 dnnl_dt2str(abt), d->act ? " +act" : "", impl);
    }
out:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (po) dnnl_post_ops_destroy(po);
    if (s != dnnl_success) {
        entry_clear(e);
        return fl__err(FL_EUNSUPPORTED, "oneDNN matmul [%lld x %lld] x [%lld x %lld] (%s%s%s): %s failed: %s",
                       (long long)d->m, (long long)d->k, (long long)d->k, (long long)d->n, dnnl_dt2str(abt),
                       d->has_bias ? ", bias" : "", d->act ? ", activation" : "", step, dnnl_status2str(s));
    }
    e->key = *d;
    e->used = 1;
    return FL_OK;
}

static void f16_probe(void)
{
    pthread_once(&dnn.once, dnn_init);
    if (dnn.status != FL_OK) return;
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t ad = {64, 64}, bd = {64, 64}, cd = {64, 64};
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_memory_desc_init_by_tag(&a, 2, ad, dnnl_f16, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&b, 2, bd, dnnl_f16, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&c, 2, cd, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, dnn.engine, NULL) != dnnl_success)
        return;
    const char *impl = "";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    f16.native = impl && !strstr(impl, "ref");
    FL_DEBUG(FL_SUB_TENSOR, "oneDNN float16 matmul: %s", impl ? impl : "?");
    dnnl_primitive_desc_destroy(pd);
}

static int gemm_dnnl(fl_gemm_cache **cp, const fl_gemm_desc *d, const void *a, const void *b, const float *bias, void *c)
{
    pthread_once(&dnn.once, dnn_init);
    if (dnn.status != FL_OK) return fl__err(dnn.status, "%s", dnn.err);
    fl_gemm_cache *cache = *cp;
    if (!cache->stream) {
        dnnl_status_t s = dnnl_stream_create(&cache->stream, dnn.engine, dnnl_stream_default_flags);
        if (s != dnnl_success) return fl__err(FL_EUNSUPPORTED, "oneDNN: could not create a stream: %s", dnnl_status2str(s));
    }
    entry *e = NULL, *victim = &cache->e[0];
    for (int i = 0; i < CACHE_SLOTS && !e; i++) {
        entry *x = &cache->e[i];
        if (x->used && !memcmp(&x->key, d, sizeof *d)) e = x;
        else if (!x->used || (victim->used && x->last < victim->last)) victim = x;
    }
    if (!e) {
        entry_clear(victim);
        FL_CHECK(entry_make(victim, d));
        e = victim;
    }
    e->last = ++cache->tick;
    int want = atomic_load(&single_depth) > 0 ? 1 : dnn.threads;
    if (tl_threads != want) {
        omp_set_num_threads(want);
        tl_threads = want;
    }
    dnnl_memory_set_data_handle(e->ma, (void *)a);
    dnnl_memory_set_data_handle(e->mb, (void *)b);
    dnnl_memory_set_data_handle(e->mc, c);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->ma}, {DNNL_ARG_WEIGHTS, e->mb}, {DNNL_ARG_DST, e->mc}};
    int nargs = 3;
    if (d->has_bias) {
        dnnl_memory_set_data_handle(e->mbias, (void *)bias);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->mbias};
    }
    dnnl_status_t s = dnnl_primitive_execute(e->prim, cache->stream, nargs, args);
    if (s == dnnl_success) s = dnnl_stream_wait(cache->stream);
    if (s != dnnl_success)
        return fl__err(FL_EUNSUPPORTED, "oneDNN matmul [%lld x %lld] x [%lld x %lld]: execution failed: %s",
                       (long long)d->m, (long long)d->k, (long long)d->k, (long long)d->n, dnnl_status2str(s));
    return FL_OK;
}
#endif /* FL_HAVE_DNNL */

static int low_or_f32(fl_dtype t) { return t == FL_FLOAT32 || t == FL_BFLOAT16 || t == FL_FLOAT16; }

/* Elements spanned by an operand of `rows` rows of `cols` used columns, leading dim ld. */
static int64_t span(int64_t rows, int64_t cols, int64_t ld) { return (rows - 1) * ld + cols; }

/* Operand `which` (0 A, 1 B) converted to dtype `to` in the cache's buffer. */
static int convert(fl_gemm_cache *cache, int which, const void *x, fl_dtype from, fl_dtype to, int64_t n, const void **out)
{
    size_t need = (size_t)n * fl_dtype_size(to);
    if (cache->conv_cap[which] < need) {
        fl__free_aligned(cache->conv[which]);
        cache->conv[which] = fl__alloc_aligned(need);
        cache->conv_cap[which] = cache->conv[which] ? need : 0;
        if (!cache->conv[which])
            return fl__err(FL_ENOMEM, "matmul: out of memory converting %s to %s", fl_dtype_name(from), fl_dtype_name(to));
    }
    if (from == FL_FLOAT32 && to == FL_FLOAT32) { /* float32 rounded to float16's precision and range */
        uint16_t tmp[512];
        float *y = cache->conv[which];
        const float *xf = x;
        for (int64_t i = 0; i < n; i += 512) {
            int64_t k = n - i < 512 ? n - i : 512;
            fl__cvt_f32_to_f16(tmp, xf + i, k);
            fl__cvt_f16_to_f32(y + i, tmp, k);
        }
    } else {
        FL_CHECK(fl__cvt_any(cache->conv[which], to, x, from, n));
    }
    *out = cache->conv[which];
    return FL_OK;
}

static int gemm_run(fl_gemm_cache **cp, const fl_gemm_desc *dd, const void *a, const void *b, const float *bias, void *c);

/* A low-precision C through float32: the product into the cache's third buffer (ldc kept),
 * then each row converted. */
static int gemm_low_c(fl_gemm_cache **cp, const fl_gemm_desc *dd, const void *a, const void *b, const float *bias, void *c)
{
    fl_gemm_cache *cache = *cp;
    size_t need = (size_t)span(dd->m, dd->n, dd->ldc) * sizeof(float);
    if (cache->conv_cap[2] < need) {
        fl__free_aligned(cache->conv[2]);
        cache->conv[2] = fl__alloc_aligned(need);
        cache->conv_cap[2] = cache->conv[2] ? need : 0;
        if (!cache->conv[2]) return fl__err(FL_ENOMEM, "matmul: out of memory for a float32 product");
    }
    fl_gemm_desc d = *dd;
    d.c_type = FL_FLOAT32;
    float *y = cache->conv[2];
    FL_CHECK(gemm_run(cp, &d, a, b, bias, y));
    uint16_t *h = c;
    for (int64_t i = 0; i < dd->m; i++)
        FL_CHECK(fl__cvt_any(h + i * dd->ldc, dd->c_type, y + i * dd->ldc, FL_FLOAT32, dd->n));
    return FL_OK;
}

int fl__gemm(fl_gemm_cache **cp, const fl_gemm_desc *dd, const void *a, const void *b, const float *bias, void *c)
{
    if (dd->c_type != FL_FLOAT32 && ((dd->c_type != FL_BFLOAT16 && dd->c_type != FL_FLOAT16) || dd->beta != 0.0f))
        return fl__err(FL_EUNSUPPORTED, "matmul: output type %s with beta %g (float32, or bfloat16 / float16 with beta 0)",
                       fl_dtype_name(dd->c_type), (double)dd->beta);
    return gemm_run(cp, dd, a, b, bias, c);
}

/* fl__gemm after the output type's check; C is float32 unless the product runs in c_type
 * on oneDNN (the caller's c_type then reaches the primitive). */
static int gemm_run(fl_gemm_cache **cp, const fl_gemm_desc *dd, const void *a, const void *b, const float *bias, void *c)
{
    if (dd->m == 0 || dd->n == 0) return FL_OK;
    int lib = fl__gemm_lib();
    if (lib < 0) return lib;
    int half = dd->a_type == FL_FLOAT16 || dd->b_type == FL_FLOAT16;
    if (!low_or_f32(dd->a_type) || !low_or_f32(dd->b_type) ||
        (half && (dd->a_type == FL_BFLOAT16 || dd->b_type == FL_BFLOAT16)))
        return fl__err(FL_EUNSUPPORTED,
                       "matmul: operands of %s and %s (expected float32 with bfloat16 or float16, not both)",
                       fl_dtype_name(dd->a_type), fl_dtype_name(dd->b_type));
    if (!*cp) {
        *cp = calloc(1, sizeof **cp);
        if (!*cp) return fl__err(FL_ENOMEM, "matmul: out of memory");
        (*cp)->magic = CACHE_MAGIC;
    }
    int use_dnnl = lib == FL_GEMM_DNNL && dd->k > 0; /* k == 0 (an empty input): the epilogue alone */
    /* oneDNN multiplies bf16 by bf16, f16 by f16 (where fl__gemm_f16_native) or f32 by f32;
     * OpenBLAS f32 only.  A float16 product elsewhere runs in float32 on operands rounded to
     * float16 (float16's numerics: range, overflow to inf, precision; not its speed). */
    fl_dtype want = use_dnnl && (dd->a_type == FL_BFLOAT16 || dd->b_type == FL_BFLOAT16) ? FL_BFLOAT16 : FL_FLOAT32;
    if (half && use_dnnl && !(*cp)->f16_failed && fl__gemm_f16_native()) want = FL_FLOAT16;
    if (dd->c_type != FL_FLOAT32 && dd->c_type != want) return gemm_low_c(cp, dd, a, b, bias, c);
    for (;;) {
        fl_gemm_desc d = *dd;
        const void *pa = a, *pb = b;
        if (d.k > 0 && (d.a_type != want || (half && want == FL_FLOAT32 && d.a_type == FL_FLOAT32))) {
            FL_CHECK(convert(*cp, 0, a, d.a_type, want, span(d.trans_a ? d.k : d.m, d.trans_a ? d.m : d.k, d.lda), &pa));
            d.a_type = want;
        }
        if (d.k > 0 && (d.b_type != want || (half && want == FL_FLOAT32 && d.b_type == FL_FLOAT32))) {
            FL_CHECK(convert(*cp, 1, b, d.b_type, want, span(d.trans_b ? d.n : d.k, d.trans_b ? d.k : d.n, d.ldb), &pb));
            d.b_type = want;
        }
#ifdef FL_HAVE_DNNL
        if (use_dnnl) {
            int st = gemm_dnnl(cp, &d, pa, pb, bias, c);
            if (st == FL_OK || want != FL_FLOAT16) return st;
            /* a shape or epilogue oneDNN's float16 matmul does not take: float32 for this op */
            FL_INFO(FL_SUB_TENSOR, "%s; this op's float16 products run in float32 from now on", fl_last_error());
            (*cp)->f16_failed = 1;
            if (dd->c_type != FL_FLOAT32) return gemm_low_c(cp, dd, a, b, bias, c);
            want = FL_FLOAT32;
            continue;
        }
#else
        (void)use_dnnl;
#endif
        return gemm_openblas(&d, pa, pb, bias, (float *)c);
    }
}

void *fl__gemm_scratch(fl_gemm_cache **cp, size_t bytes)
{
    if (!*cp) {
        *cp = calloc(1, sizeof **cp);
        if (!*cp) return fl__err(FL_ENOMEM, "matmul: out of memory"), NULL;
        (*cp)->magic = CACHE_MAGIC;
    }
    fl_gemm_cache *cache = *cp;
    if (cache->scratch_cap < bytes) {
        fl__free_aligned(cache->scratch);
        cache->scratch = fl__alloc_aligned(bytes ? bytes : 1);
        cache->scratch_cap = cache->scratch ? bytes : 0;
        if (!cache->scratch) return fl__err(FL_ENOMEM, "matmul: out of memory for %zu bytes of scratch", bytes), NULL;
    }
    return cache->scratch;
}

void fl__gemm_cache_free(void *p)
{
    fl_gemm_cache *cache = p;
    if (!cache || cache->magic != CACHE_MAGIC) return;
#ifdef FL_HAVE_DNNL
    for (int i = 0; i < CACHE_SLOTS; i++) entry_clear(&cache->e[i]);
    if (cache->stream) dnnl_stream_destroy(cache->stream);
#endif
    fl__free_aligned(cache->conv[0]);
    fl__free_aligned(cache->conv[1]);
    fl__free_aligned(cache->conv[2]);
    fl__free_aligned(cache->scratch);
    cache->magic = 0;
    free(cache);
}

const char *fl__gemm_info(char *buf, size_t cap)
{
    size_t at = 0;
    int lib = fl__gemm_lib();
    int w = snprintf(buf, cap, "gemm %s", lib == FL_GEMM_DNNL ? "oneDNN" : lib == FL_GEMM_OPENBLAS ? "OpenBLAS" : "?");
    if (w > 0 && (size_t)w < cap) at = (size_t)w;
#ifdef FL_HAVE_DNNL
    const dnnl_version_t *v = dnnl_version();
    w = snprintf(buf + at, cap - at, "; oneDNN %d.%d.%d isa %s (OpenMP)", v->major, v->minor, v->patch,
                 isa_name(dnnl_get_effective_cpu_isa()));
    if (w > 0 && (size_t)w < cap - at) at += (size_t)w;
#endif
    snprintf(buf + at, cap - at, "; OpenBLAS core %s", openblas_get_corename());
    return buf;
}

#ifdef FL_HAVE_DNNL
/* For the other oneDNN callers (dnn_conv.c): the engine, after setting this thread's
 * OpenMP team size as gemm_dnnl does.  NULL with the message set when oneDNN failed. */
dnnl_engine_t fl__dnn_enter(void)
{
    pthread_once(&dnn.once, dnn_init);
    if (dnn.status != FL_OK) {
        fl__err(dnn.status, "%s", dnn.err);
        return NULL;
    }
    int want = atomic_load(&single_depth) > 0 ? 1 : dnn.threads;
    if (tl_threads != want) {
        omp_set_num_threads(want);
        tl_threads = want;
    }
    return dnn.engine;
}
#endif
