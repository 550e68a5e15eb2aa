/*
 * tensor_internal.h - the tensor struct, visible to the library's kernels only, and the
 * CPU kernel entry points of src/tensor/kernels.c.
 */
#ifndef FL_TENSOR_INTERNAL_H
#define FL_TENSOR_INTERNAL_H

#include <float.h>
#include <math.h>

#include "fleet/tensor.h"
#include "half.h"
#include "layout.h"
#include "../base/base_internal.h"

/* Hot loops are compiled for AVX-512, AVX2 and baseline x86-64 and the loader picks the
 * best the CPU has (GCC function multiversioning); sanitizer builds keep one version. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define FL_CLONE_TARGETS __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define FL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), visibility("hidden")))
#else
#define FL_CLONE_TARGETS
#define FL_CLONES
#endif
/* FL_CLONES for library-wide functions; FL_CLONE_TARGETS (no visibility) for static ones. */

#define FL_TENSOR_MAGIC 0x544e5352u /* "TNSR" */

struct fl_tensor {
    uint32_t magic;
    fl_dtype dtype;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    int64_t numel;
    void *data;
    size_t cap;   /* bytes allocated at data */
    int64_t *lod; /* one level of offsets, lod_n entries (0 = no LoD) */
    int64_t lod_n, lod_cap;
    int64_t *rows; /* SelectedRows indices (is_rows) */
    int64_t rows_cap;
    int is_rows;
    int64_t height; /* SelectedRows: rows of the full matrix */
    int layout;     /* FL_LAYOUT_* (layout.h): how data is ordered; 0 plain */
    uint64_t version; /* write version (fl__tensor_bump); read with fl__tensor_version */
};

/* Write versions.  Every path that writes a tensor's data, shape or layout gives it a new
 * version: a value of one process-wide counter, so no two writes anywhere ever share one,
 * and a struct copied or swapped whole (a loaded checkpoint swapped into the scope) keeps
 * the version of the contents it carries.  So a tensor seen twice with the same pointer and
 * version was not written in between, and a cache derived from it (conv_bn_fold's folded
 * filter, a convolution's reordered filter) is still good.  The writers: the executor after
 * each op (its outputs, and its inputs unless the op's definition says it only reads them),
 * feeds and fl_tensor_copy, resizes, layout conversions, eager deletion's release and reuse
 * of buffers, the public writable accessors (fl_tensor_data / _f32 / _i64: bumped when the
 * pointer is handed out, so a caller writes before its next run and asks again after),
 * fl_scope_zero, loads swapped into the scope, and the parameter-server pulls and
 * communicator copies into parameters outside ops.  Library code writing t->data anywhere
 * else must call fl__tensor_bump after the write.  Thread safe (atomic). */
void fl__tensor_bump(fl_tensor *t);
static inline uint64_t fl__tensor_version(const fl_tensor *t) { return __atomic_load_n(&t->version, __ATOMIC_ACQUIRE); }

/* Resize keeping LoD/rows untouched (kernels set them explicitly). */
int fl__tensor_reshape_raw(fl_tensor *t, fl_dtype dt, int ndim, const int64_t *shape);
/* Shorthand for 2-D float32 outputs. */
static inline int fl__tensor_resize2(fl_tensor *t, int64_t a, int64_t b)
{
    int64_t s[2] = {a, b};
    return fl__tensor_reshape_raw(t, FL_FLOAT32, 2, s);
}
/* Copies LoD of src to dst (clears if src has none). */
int fl__tensor_share_lod(fl_tensor *dst, const fl_tensor *src);
/* Product of dims [from, to). */
static inline int64_t fl__dims_prod(const int64_t *s, int from, int to)
{
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= s[i];
    return p;
}

/* ---- CPU kernels (kernels.c): plain loops over contiguous float arrays ---- */

/* C[m,n] = alpha * op(A) op(B) + beta * C, row-major, through cblas_sgemm. */
void fl__sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
               const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* Runs the sgemm on two threads when FLEET_NUM_THREADS=2 and it is large enough; returns 0
 * (doing nothing) otherwise.  parallel.c. */
/* BLAS single-threaded for a while (trainer threads): returns the previous thread count to
 * hand back to fl__blas_single_end.  parallel.c. */
int fl__blas_single_begin(void);
void fl__blas_single_end(int prev);
int fl__sgemm_parallel(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* Parallel-for over [0, n) on the same helper (parallel.c): with FLEET_NUM_THREADS=2 and
 * n * cost >= FL_PAR_MIN_WORK (cost: about the bytes each index touches), fn(arg, lo, hi)
 * runs on chunks of about n/8 (lo a multiple of grain) claimed one at a time by the calling
 * thread and the helper; else (one thread, small work, helper busy) fn(arg, 0, n) here.  fn
 * must not call it again nor depend on the chunks for its values.  Returns 2 when the helper
 * was offered chunks, else 1. */
typedef void (*fl__range_fn)(void *arg, int64_t lo, int64_t hi);
#define FL_PAR_MIN_WORK (1ll << 18)
int fl__parallel_for(int64_t n, int64_t grain, int64_t cost, fl__range_fn fn, void *arg);
/* 2 when the helper runs (FLEET_NUM_THREADS=2), else 1. */
int fl__parallel_threads(void);
/* Tests: at most `parts` (1 or 2) parts per fl__parallel_for from now on; returns the
 * previous limit. */
int fl__parallel_limit(int parts);
void fl__vadd(float *restrict y, const float *restrict a, const float *restrict b, int64_t n);
void fl__vaxpy(float *restrict y, float alpha, const float *restrict x, int64_t n);  /* y += a*x */
void fl__vscale(float *restrict y, float alpha, const float *restrict x, int64_t n); /* y = a*x */
void fl__vscal(float *restrict y, float alpha, int64_t n);                           /* y *= a, in place */
void fl__vfill(float *y, float v, int64_t n);
/* x, or 0 when x is subnormal (0 < |x| < FLT_MIN, 1.2e-38).  Optimizer state stored
 * through this never goes subnormal: the moments of dead units decay geometrically into
 * that range, where x86 arithmetic takes a slow microcode path (CTR-DNN Adam epochs were
 * ~30 % slower after the first).  Vectorises to an and, a compare and a mask: about 11 % on
 * the Adam update alone, against 2.7-3.1x when a tenth of its state is subnormal
 * (bench/bench_subnormal.c). */
static inline float fl__flush_tiny(float x) { return fabsf(x) < FLT_MIN ? 0.0f : x; }
/* Parameter-update loops over one contiguous segment (optim_kernels.c; the formulas are
 * src/graph/ops_optim.c's).  Adam's coefficients: lr and eps already bias-corrected. */
typedef struct {
    float lr, l2, b1, b2, cb1, cb2, eps;
} fl__adam_coef;
void fl__sgd_seg(float *restrict p, const float *restrict g, int64_t n, float lr, float l2);
void fl__momentum_seg(float *restrict p, float *restrict v, const float *restrict g, int64_t n, float lr, float l2,
                      float mu, int nesterov);
void fl__adagrad_seg(float *restrict p, float *restrict m, const float *restrict g, int64_t n, float lr, float l2,
                     float eps);
void fl__adam_seg(float *restrict p, float *restrict m1, float *restrict m2, const float *restrict g, int64_t n,
                  const fl__adam_coef *k);
/* Adam's coefficients for the step whose beta pow accumulators are pow1 = beta1^t and
 * pow2 = beta2^t (Paddle 2.x form: lr_t = lr sqrt(1 - pow2) / (1 - pow1), epsilon scaled by
 * sqrt(1 - pow2)), in double and rounded once.  Returns 0, or -1 (k untouched) when a pow is
 * outside [0, 1); the caller names the parameter in its message.  The local adam op and the
 * servers both use it, so their steps are bit-identical. */
int fl__adam_coef_init(fl__adam_coef *k, float lr, float l2, double b1, double b2, double eps, double pow1, double pow2);
/* A pow accumulator after one step: pow * beta, in double, rounded to float. */
static inline float fl__adam_pow_next(float pow, double beta) { return (float)((double)pow * beta); }
/* Adds row vector b[n] to each of m rows of y[m,n]. */
void fl__add_rowvec(float *restrict y, const float *restrict b, int64_t m, int64_t n);
/* db[n] (+)= column sums of dy[m,n]. accumulate=0 overwrites. */
void fl__col_sum(float *restrict db, const float *restrict dy, int64_t m, int64_t n, int accumulate);
void fl__tanh(float *y, const float *x, int64_t n);
void fl__sigmoid(float *y, const float *x, int64_t n);
void fl__relu(float *y, const float *x, int64_t n);
/* Activation gradients from the activation's output: dx = dy * act'(out). */
enum { FL_ACT_RELU = 1, FL_ACT_TANH = 2, FL_ACT_SIGMOID = 3 };
void fl__act_grad(int act, float *dx, const float *out, const float *dy, int64_t n);
/* Row-wise softmax of x[m,n]. */
void fl__softmax_rows(float *restrict y, const float *restrict x, int64_t m, int64_t n);

/* ---- matrix products with a fused epilogue (dnn.c) ---- */

/* C[m,n] = act(op(A) op(B) + bias + beta * C), row-major with leading dimensions; A and B
 * each float32 or bfloat16 (a_type, b_type), C and bias float32.  beta is 0 or 1; act is 0
 * or an FL_ACT_* code.  Build one with memset(0) first: the whole struct is the cache key.
 * Mixed operands: oneDNN gets the float32 one rounded to bfloat16 (the product is then a
 * bf16 x bf16 product accumulated in float32); OpenBLAS gets bfloat16 ones widened.
 * float16 operands (with float32 ones, never with bfloat16): see fl__gemm_f16_native. */
typedef struct {
    int trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldc;
    float beta;
    int act;
    int has_bias;
    fl_dtype a_type, b_type;
    /* C's type: float32 (0, as memset leaves it), or bfloat16 / float16 (AMP level O2: the
     * float32 accumulation, bias and activation rounded once; beta must be 0).  oneDNN
     * writes it directly when the product runs in that type, otherwise C is computed in
     * float32 in the cache's buffer and converted. */
    fl_dtype c_type;
} fl_gemm_desc;
/* Primitives of one op in one executor (in the op's kernel state slot): up to 8 shapes,
 * the least recently used replaced, and the conversion buffers of mixed operands.  Not
 * thread safe: one cache per executor op. */
typedef struct fl_gemm_cache fl_gemm_cache;
enum { FL_GEMM_OPENBLAS = 1, FL_GEMM_DNNL = 2 };
/* Runs d through the library FLEET_GEMM selects (fl__gemm_lib); with oneDNN the primitive
 * for d is made on the first call with this shape and reused after (*cache is created when NULL in either case).  bias is read when d->has_bias.
 * Returns the status (a oneDNN failure or a bad FLEET_GEMM: FL_EUNSUPPORTED / FL_EINVAL,
 * the message naming the shape; FL_ENOMEM). */
int fl__gemm(fl_gemm_cache **cache, const fl_gemm_desc *d, const void *a, const void *b, const float *bias, void *c);
/* Frees a cache (NULL is fine); signature of fl_op_def.state_free. */
void fl__gemm_cache_free(void *cache);
/* A buffer of at least `bytes` owned by *cache (made when NULL, freed with it), for an
 * operand a caller converts once for several products; NULL with the error set. */
void *fl__gemm_scratch(fl_gemm_cache **cache, size_t bytes);
/* FL_GEMM_OPENBLAS or FL_GEMM_DNNL, from FLEET_GEMM read on first use; FL_EINVAL-style
 * negative status for a bad value.  fl__gemm_lib_reload() reads the variable again (tests). */
int fl__gemm_lib(void);
void fl__gemm_lib_reload(void);
/* 1 when bfloat16 products run on bf16 instructions here (oneDNN chosen, and the CPU has
 * AVX512-BF16 or AMX); 0 when they are emulated or widened to float32 (not faster). */
int fl__gemm_bf16_native(void);
/* 1 when float16 products run on float16 instructions (oneDNN chosen and it has a float16
 * matmul here that is not its reference code); 0: they run in float32 on operands rounded
 * to float16 (float16's numerics, not faster). */
int fl__gemm_f16_native(void);
/* 1 when this build has oneDNN. */
int fl__dnn_available(void);
/* oneDNN primitives created by this process so far (tests check the steady state makes none). */
uint64_t fl__dnn_primitives_created(void);
/* One line naming the libraries and ISAs the products use here ("oneDNN 2.6.3 isa
 * avx512_core_bf16 (OMP); OpenBLAS SkylakeX ..."), for benchmarks and logs. */
const char *fl__gemm_info(char *buf, size_t cap);
/* Trainer threads: oneDNN runs single-threaded in every thread between begin and end
 * (called by fl__blas_single_begin / _end). */
void fl__dnn_single(int on);
/* float32 <-> bfloat16 (round to nearest even; NaN stays NaN): loops over half.h's
 * fl__f32_to_bf16 / fl__bf16_to_f32 (dnn.c). */
void fl__cvt_f32_to_bf16(uint16_t *restrict y, const float *restrict x, int64_t n);
void fl__cvt_bf16_to_f32(float *restrict y, const uint16_t *restrict x, int64_t n);
/* float32 <-> float16 (half.c): round to nearest even, NaN stays NaN, beyond 65504 is
 * infinite, subnormals kept.  AVX-512F, F16C or half.h's scalar code, chosen once at run
 * time.  One value: half.h's fl__f32_to_f16 / fl__f16_to_f32. */
void fl__cvt_f32_to_f16(uint16_t *restrict y, const float *restrict x, int64_t n);
void fl__cvt_f16_to_f32(float *restrict y, const uint16_t *restrict x, int64_t n);
/* Tests: use the named conversion code ("avx512f", "f16c", "scalar"; NULL: the CPU's best).
 * Returns the name in use, or NULL when this CPU cannot run the named one. */
const char *fl__half_impl_force(const char *name);
/* Converts n values between any two of float32, bfloat16 and float16 (same dtype: a copy).
 * FL_EUNSUPPORTED for another dtype. */
int fl__cvt_any(void *y, fl_dtype to, const void *x, fl_dtype from, int64_t n);

#endif
