/*
 * dnn_conv.h - 2-D convolutions on oneDNN (dnn_conv.c): forward with fused bias and
 * activation, backward-data and backward-weights, NCHW tensors at the boundary.  The
 * conv2d op (src/graph/ops_conv.c) calls these when FLEET_GEMM picks oneDNN
 * (fl__gemm_lib() == FL_GEMM_DNNL) and its own im2col + sgemm otherwise; without oneDNN in
 * the build each call returns FL_EUNSUPPORTED.
 */
#ifndef FL_DNN_CONV_H
#define FL_DNN_CONV_H

#include "tensor_internal.h"

#ifdef FL_HAVE_DNNL
#include <dnnl.h>
#include <dnnl_debug.h>
/* dnn.c: the engine, after setting the calling thread's OpenMP team size under the
 * FLEET_NUM_THREADS / trainer-thread rules; NULL with the message set on failure. */
dnnl_engine_t fl__dnn_enter(void);
#endif

/* One convolution: Input [n, c, h, w] (x_type), Filter [m, c/g, kh, kw] (w_type), each
 * float32 or bfloat16; Output [n, m, oh, ow] (y_type) with oh = (h + 2ph - dh(kh-1) - 1)/sh + 1
 * (likewise ow).  act is 0 or an FL_ACT_* code and has_bias adds Bias [m] (forward only).
 * Build one with memset(0) first: the whole struct is the cache key. */
typedef struct {
    int64_t n, c, h, w, m, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, g;
    int act, has_bias;
    /* Forward only: y = act(conv(x, w) + bias + r) with r the residual (layout res_lay, type
     * res_type: float32 (0) or bfloat16) fl__conv_fwd_sum reorders into y first (oneDNN's
     * "sum" post-op, before the activation). */
    int sum, res_lay;
    fl_dtype res_type;
    fl_dtype x_type, w_type;
    /* Forward only: the type of the output y, float32 (0) or bfloat16 (an inference conv2d
     * with out_dtype, graph/fold_infer.c): the accumulation, bias, residual sum and
     * activation stay float32 inside oneDNN and are rounded once, to nearest even, when
     * written. */
    fl_dtype y_type;
    /* Backward directions: the type of the caller's output gradient dy, float32 (0) or
     * bfloat16 (AMP: written so by the normalisation's gradient, graph/amp_bn.c; read as it
     * is where the convolution computes in bf16, instead of reordered). */
    fl_dtype dy_type;
    /* Layouts (FL_LAYOUT_*, layout.h) of the caller's x (forward, backward-weights) and of
     * its output gradient dy (backward directions); with blocked_out the output activation
     * (forward y, backward-data dx) is left in the layout the convolution computes it in
     * when layout.h has it (fl__conv_out_layout says which), instead of reordered to NCHW. */
    int x_lay, y_lay, blocked_out;
} fl_conv_desc;

/* Primitives of one op in one executor: up to 8 (shape, direction) pairs, the least
 * recently used replaced, each with the reorders between the caller's NCHW tensors and the
 * layout and data type oneDNN chose (cached with it).  Not thread safe. */
typedef struct fl_conv_cache fl_conv_cache;

/* y = act(conv(x, w) + bias); bias is read when d->has_bias.  *cache is created when NULL.
 * Returns FL_OK, FL_EUNSUPPORTED (no oneDNN, or oneDNN failed: the message names the
 * shape and step) or FL_ENOMEM. */
int fl__conv_fwd(fl_conv_cache **cache, const fl_conv_desc *d, const void *x, const void *w, const float *bias, void *y);
/* fl__conv_fwd with d->sum set: res (d->res_type, y's shape, in layout d->res_lay; not y) is
 * reordered into the memory the convolution writes y in (in y_type: a bfloat16 y rounds the
 * residual to bfloat16 first), which it then adds to; the activation comes after the sum. */
int fl__conv_fwd_sum(fl_conv_cache **cache, const fl_conv_desc *d, const void *x, const void *w, const float *bias,
                     const void *res, void *y);
/* The forward call that comes next with *cache reads its filter from tensor w, at w's current
 * write version (tensor_internal.h): while the same tensor at the same version and data
 * comes again, the forward reuses the filter it reordered into oneDNN's layout last time
 * instead of reordering it again (an inference program's filters; in training the optimizer
 * writes them every step).  Without this call the reorder always runs.  *cache is created
 * when NULL; FL_ENOMEM. */
int fl__conv_filter_stamp(fl_conv_cache **cache, const fl_tensor *w);
/* Forward filter reorders skipped so far by fl__conv_filter_stamp (tests count them). */
uint64_t fl__conv_filter_reorders_skipped(void);
/* dx = the gradient of the convolution's input for output gradient dy (overwritten). */
int fl__conv_bwd_data(fl_conv_cache **cache, const fl_conv_desc *d, const void *dy, const void *w, float *dx);
/* dw = the gradient of the filter for output gradient dy (overwritten). */
int fl__conv_bwd_weights(fl_conv_cache **cache, const fl_conv_desc *d, const void *x, const void *dy, float *dw);
/* Both backward directions, either output NULL to skip it: dx as fl__conv_bwd_data, dw as
 * fl__conv_bwd_weights, with dy reordered once for both when they read it in the same
 * layout (NHWC, or the same blocked one). */
int fl__conv_bwd(fl_conv_cache **cache, const fl_conv_desc *d, const void *x, const void *dy, const void *w, float *dx,
                 float *dw);
/* 1 when the convolutions of d run with NHWC activations (oneDNN's blocked layouts would pad
 * its channels by more than a quarter of the work), 0 when in oneDNN's own layouts or
 * without oneDNN. */
int fl__conv_channels_last(const fl_conv_desc *d);
/* The layout (FL_LAYOUT_*) of the output activation the last call with this cache wrote
 * (y of fl__conv_fwd, dx of fl__conv_bwd_data / fl__conv_bwd); plain when cache is NULL. */
int fl__conv_out_layout(const fl_conv_cache *cache);
/* The three directions of a convolution, as fl__conv_winograd, fl__conv_impl and fl__conv_runs
 * name them. */
enum { FL_CONV_FWD, FL_CONV_BWD_DATA, FL_CONV_BWD_WEIGHTS };
/* 1 when direction dir of d asks oneDNN for its Winograd convolution, 0 for its direct one:
 * FLEET_CONV_ALGO=direct|winograd forces one (float32, groups 1, 3x3, stride 1, dilation 1
 * only: anything else stays direct), auto (the default) follows the rule of dnn_conv.c, which
 * reads only the shape, so every rank and every run choose alike.  Where oneDNN has no
 * Winograd kernel for the shape the convolution is made direct, silently.  A bad value of
 * the variable: FL_EINVAL (negative), the message naming it. */
int fl__conv_winograd(const fl_conv_desc *d, int dir);
/* oneDNN's implementation (dnnl_query_impl_info_str, e.g. "jit_wino_4x3:avx512_core") of the
 * primitive the last call of direction dir made or ran with this cache; "" when none. */
const char *fl__conv_impl(const fl_conv_cache *cache, int dir);
/* Frees a cache (NULL is fine). */
void fl__conv_cache_free(fl_conv_cache *cache);
/* Convolution and reorder primitives created so far (tests check the steady state makes
 * none). */
uint64_t fl__conv_primitives_created(void);
/* Backward-weights steps that read the output gradient backward-data had reordered
 * (fl__conv_bwd; tests check it happens). */
uint64_t fl__conv_dy_reorders_shared(void);
/* Convolution primitives of direction dir (FL_CONV_*) run so far (tests check that a
 * convolution whose input needs no gradient runs no backward-data).  With
 * FLEET_PROFILE_OPS=1 the time of each direction's convolution and of each operand's reorder
 * goes to stderr at exit ("profile: conv ..."). */
uint64_t fl__conv_runs(int dir);

#endif
