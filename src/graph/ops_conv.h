/*
 * ops_conv.h - what the image ops share between ops_conv.c (conv2d and the group's op
 * table), ops_pool.c (pool2d), ops_bn.c (batch_norm), and the layers' activation helpers
 * with ops_deconv.c (conv2d_transpose) and ops_seqconv.c (sequence_conv).  Private to those
 * files.
 */
#ifndef FL_OPS_CONV_H
#define FL_OPS_CONV_H

#include "../tensor/dnn_conv.h"
#include "graph_internal.h"

/* FL_OK when the string attribute `attr` (data_format / data_layout) is NCHW or AnyLayout;
 * else an op error naming the layout and input x. */
int fl__conv_need_nchw(fl_op *op, const char *attr, const fl_var *x);
/* Two-element int attribute (one element means both; absent gives def twice); 0 if absent
 * or well formed, -1 otherwise. */
int fl__conv_attr2(const fl_op *op, const char *name, int64_t def, int64_t v[2]);

/* Layer activations: relu, tanh and sigmoid (codes up to ACT_SIGMOID) can be fused into an
 * op; the others are appended as their own op. */
enum { ACT_NONE = 0, ACT_RELU, ACT_TANH, ACT_SIGMOID, ACT_POST_SOFTMAX, ACT_POST_SOFTSIGN };
/* ACT_* code of a layer's act string (NULL, "", "none", "linear": ACT_NONE); -1 if unknown. */
int fl__conv_act_code(const char *a);
/* Layer tail: activations that are not fused become their own op (as fluid's
 * append_activation); y (NULL passes through) for ACT_NONE. */
fl_var *fl__conv_post_act(fl_var *y, int a);
/* Sum of r[0..n) in 16 float lanes the compiler vectorises (a single running sum is one
 * dependent add per element), then added up in double. */
static inline double fl__conv_lane_sum(const float *restrict r, int64_t n)
{
    enum { L = 16 };
    float acc[L] = {0};
    int64_t i = 0;
    for (; i + L <= n; i += L)
        for (int l = 0; l < L; l++) acc[l] += r[i + l];
    double s = 0.0;
    for (; i < n; i++) s += r[i];
    for (int l = 0; l < L; l++) s += acc[l];
    return s;
}

/* ops_pool.c: pool2d and its gradient, listed in fl__ops_conv. */
extern const fl_op_def fl__def_pool2d, fl__def_pool2d_grad;
/* ops_bn.c: batch_norm and its gradient, listed in fl__ops_conv. */
extern const fl_op_def fl__def_batch_norm, fl__def_batch_norm_grad;
/* batch_norm + elementwise_add + relu as one op (ops_bn.c; made by fl__fuse_bn_add_act). */
extern const fl_op_def fl__def_fused_bn_add_act, fl__def_fused_bn_add_act_grad;
/* fold_infer.c: batch_norm's statistics folded into a filter and bias, listed in fl__ops_conv. */
extern const fl_op_def fl__def_conv_bn_fold;
/* Runs of conv_bn_fold that found their inputs and outputs unchanged and skipped the fold. */
uint64_t fl__conv_bn_fold_hits(void);

/* Per-executor state of conv2d, conv2d_grad and the transposed convolution (ops_deconv.c) in
 * the op's state slot: the oneDNN primitives (dnn_conv.c) and the im2col path's scratch. */
typedef struct {
    fl_conv_cache *dnn;
    size_t n, wide_n[4];
    float *buf, *wide[4]; /* scratch; bfloat16 Input, Filter, Output@GRAD and ResidualData widened
                           * (wide[2]: conv2d's float32 result before its rounding to out_dtype
                           * bfloat16) */
} fl__conv_state;

void fl__conv_state_free(void *p);              /* the ops' state_free */
fl__conv_state *fl__conv_state_get(fl_kctx *c); /* NULL (error set) when out of memory */
float *fl__conv_scratch(fl_kctx *c, int64_t n); /* n + 1 floats kept in the state */

#endif
