/*
 * fleet/graph.h - static programs, layers, automatic differentiation and optimizers.
 *
 * A program (fl_prog) is a list of variables and operators, built by calling layer
 * functions, exactly as a Paddle static-graph program.  Every main program owns a startup
 * program holding the initializers of its parameters; run the startup program once, then
 * run the main program every step (see fleet/exec.h).
 *
 * Errors while building are sticky: the first failing layer call records the error in the
 * program (fl_prog_status / fl_prog_error, and fl_last_error()) and returns NULL; layer
 * calls given a NULL input return NULL without overwriting it; fl_opt_minimize() returns
 * the recorded status.  So a model can be written as straight-line code and checked once.
 *
 * Programs are not thread safe while being built.  A finished program may be run by many
 * executors at once.
 */
#ifndef FLEET_GRAPH_H
#define FLEET_GRAPH_H

#include "fleet/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fl_prog fl_prog;
typedef struct fl_var fl_var;
typedef struct fl_opt fl_opt;

/* Helpers for literal argument lists:
 *   fl_layer_data(p, "x", FL_SHAPE(32), FL_FLOAT32, 0)
 *   fl_layer_fc(FL_VARS(a, b), 128, "tanh")                                     */
#define FL_SHAPE(...) \
    (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]) { __VA_ARGS__ }
#define FL_VARS(...) (fl_var *const[]){__VA_ARGS__}, (int)(sizeof((fl_var *const[]){__VA_ARGS__}) / sizeof(fl_var *))

/* ---- programs ------------------------------------------------------------------------ */

/* Creates an empty main program with its own empty startup program. */
FL_API fl_prog *fl_prog_create(void);
/* Frees a main program and its startup program. */
FL_API void fl_prog_free(fl_prog *p);
/* The startup program owned by main program p (never NULL for a main program). */
FL_API fl_prog *fl_prog_startup(fl_prog *p);
/* Seed of all initializers and random ops of p (default 1: runs are reproducible). */
FL_API void fl_prog_set_seed(fl_prog *p, uint64_t seed);
/* First build error (FL_OK if none) and its message ("" if none). */
FL_API int fl_prog_status(const fl_prog *p);
FL_API const char *fl_prog_error(const fl_prog *p);
/* Deep copy.  With for_test, backward and optimizer ops are dropped and ops with an
 * is_test attribute (dropout) switch to inference behaviour. Caller frees. */
FL_API fl_prog *fl_prog_clone(const fl_prog *p, int for_test);

/* Variables by name (NULL if absent) or by index 0..fl_prog_num_vars()-1. */
FL_API fl_var *fl_prog_var(const fl_prog *p, const char *name);
FL_API int fl_prog_num_vars(const fl_prog *p);
FL_API fl_var *fl_prog_var_at(const fl_prog *p, int i);
/* Operators: count and type of op i. */
FL_API int fl_prog_num_ops(const fl_prog *p);
FL_API const char *fl_prog_op_type(const fl_prog *p, int i);

/* Readable text form (see docs/program_format.md).  *out is malloc'ed; caller frees. */
FL_API int fl_prog_to_text(const fl_prog *p, char **out, size_t *len);
/* Parses the text form; the startup program of the result is empty. */
FL_API int fl_prog_from_text(const char *text, size_t len, fl_prog **out);
/* New program holding only the ops needed to compute `targets` from `feeds` (forward ops
 * only), with the same variables they touch.  Caller frees. */
/* Rewrite: each fc without activation whose output only feeds a relu, tanh or sigmoid op
 * becomes one fc with that activation (applied in the matrix product's epilogue); the
 * intermediate variable is removed.  Call before fl_opt_minimize (FL_EINVAL naming the op
 * otherwise).  Returns the number of pairs fused (>= 0) or a negative status. */
FL_API int fl_fuse_fc_act(fl_prog *p);
/* Automatic mixed precision (Paddle's static amp.decorate, levels O1 and O2).
 *
 * Level O1 (use_pure_fp16 0): the float32 inputs of white-listed ops (default: fc and
 * matmul) get a cast op to bfloat16 or float16 inserted before them ("<var>.cast_bf16" /
 * "<var>.cast_fp16", visible in the program text); those ops multiply in low precision with
 * float32 accumulation and output, everything else stays float32.
 *
 * Level O2 (use_pure_fp16 1): besides, fc and matmul write their output in low precision
 * when a later op reads it (attribute out_dtype), so their stacks pass bf16/fp16
 * activations with no cast between; relu, tanh and sigmoid on a low-precision input stay in low precision (gray
 * ops); every other op (softmax, losses, reductions, auc, custom_black_list, and here also
 * elementwise_add, dropout, reshape2 and the like) reads float32 through a cast
 * "<var>.cast_fp32".  With fl_amp_decorate_optimizer the weights' casts leave the forward
 * program: each weight's low-precision copy is persistable and refreshed from the float32
 * weight after the update ops (and once in the startup program); docs/engine.md, Mixed
 * precision.
 *
 * Both levels: parameters, their gradients and optimizer state stay float32 (master
 * weights).  Lists are comma-separated op types; custom_white_list may only name ops with
 * a low-precision kernel (fc, matmul, conv2d for bfloat16; Paddle's mul and matmul_v2 are
 * accepted as fc's names), custom_black_list keeps ops in float32.  dtype 0 means bfloat16
 * (no loss scaling: it has float32's range).  float16 needs loss scaling: use
 * fl_amp_decorate_optimizer, which also runs this rewrite.  Call before fl_opt_minimize.
 * Returns the number of white ops rewritten (>= 0) or a negative status with the program
 * error naming the op or list entry. */
typedef struct {
    fl_dtype dtype;
    const char *custom_white_list;
    const char *custom_black_list;
    /* Loss scaling of float16 (fl_amp_decorate_optimizer), Paddle's amp_configs; 0 picks
     * Paddle's default given in brackets. */
    double init_loss_scaling;        /* [32768] */
    int64_t incr_every_n_steps;      /* [1000] finite steps in a row before the scale grows */
    int64_t decr_every_n_nan_or_inf; /* [2] steps with inf/NaN before the scale shrinks */
    double incr_ratio;               /* [2.0] */
    double decr_ratio;               /* [0.8] */
    int static_loss_scaling;         /* [0] 1: the scale stays init_loss_scaling (Paddle's
                                      * use_dynamic_loss_scaling = false) */
    int use_pure_fp16;               /* [0] 1: level O2 (low-precision activations between
                                      * white ops, float32 master weights) */
} fl_amp_opts;
FL_API int fl_amp_decorate(fl_prog *p, const fl_amp_opts *opts);
/* AMP on an optimizer (Paddle's static amp.decorate(optimizer, ...)): fl_opt_minimize
 * then runs fl_amp_decorate on the loss's program before backward and, for float16, adds
 * loss scaling after backward (and after a distributed runtime's gradient allreduce):
 * persistable "loss_scaling_0" (float32 [1], init_loss_scaling), "num_good_steps_0" and
 * "num_bad_steps_0" (int64 [1]); the loss gradient multiplied by loss_scaling_0; every
 * gradient divided by it and checked (check_finite_and_unscale -> "find_infinite_scale");
 * update_loss_scaling (unless static_loss_scaling); and every update op runs only on steps
 * whose gradients are all finite, so a step with inf/NaN leaves parameters and optimizer
 * state bit-identical.  bfloat16 adds no loss scaling.  opts is copied (the list strings
 * must stay valid until fl_opt_minimize returns).  FL_EINVAL for a bad ratio or count.
 * Another optimizer hook that sets an update condition of its own (gradient merge) is
 * refused with float16 at minimize. */
FL_API int fl_amp_decorate_optimizer(fl_opt *o, const fl_amp_opts *opts);
FL_API int fl_prog_prune(const fl_prog *p, const char *const *feeds, int nfeed, const char *const *targets, int ntarget,
                         fl_prog **out);

FL_API const char *fl_var_name(const fl_var *v);
FL_API fl_dtype fl_var_dtype(const fl_var *v);
FL_API int fl_var_ndim(const fl_var *v);
/* Build-time shape; -1 marks a dimension known only at run time (the batch). */
FL_API const int64_t *fl_var_shape(const fl_var *v);
FL_API int fl_var_lod_level(const fl_var *v);
FL_API int fl_var_persistable(const fl_var *v);
FL_API int fl_var_is_param(const fl_var *v);
FL_API void fl_var_set_stop_gradient(fl_var *v, int stop);
FL_API int fl_var_stop_gradient(const fl_var *v);
FL_API fl_prog *fl_var_prog(const fl_var *v);

/* ---- parameters and initializers ---------------------------------------------------- */

typedef enum {
    FL_INIT_DEFAULT = 0,      /* the layer's default (Xavier for weights, 0 for biases) */
    FL_INIT_CONSTANT,         /* a = value */
    FL_INIT_UNIFORM,          /* a = low, b = high */
    FL_INIT_NORMAL,           /* a = mean, b = std */
    FL_INIT_TRUNCATED_NORMAL, /* a = mean, b = std, values beyond 2 std redrawn */
    FL_INIT_XAVIER,           /* a = 0: uniform(+-sqrt(6/(fan_in+fan_out))), a = 1: normal */
    FL_INIT_ASSIGN            /* given values (fl_init_assign; seed: the value set's id) */
} fl_init_kind;

typedef struct {
    fl_init_kind kind;
    float a, b;
    uint64_t seed; /* 0: derived from the program seed and the parameter */
} fl_initializer;

FL_API fl_initializer fl_init_constant(float value);
FL_API fl_initializer fl_init_uniform(float low, float high);
FL_API fl_initializer fl_init_normal(float mean, float std);
FL_API fl_initializer fl_init_truncated_normal(float mean, float std);
FL_API fl_initializer fl_init_xavier(int normal);
/* Paddle's NumpyArrayInitializer / nn.initializer.Assign: *out makes a parameter start as
 * these n float32 values (row-major; n must be its element count, else creating it is
 * FL_EINVAL naming it), set by an assign_value op in the startup program.  The values are
 * copied into p (a main program, or its startup program), which owns them until freed;
 * *out is good for parameters of p only.  Returns FL_EINVAL naming the call for bad
 * arguments (1 to 2^24 values), FL_ENOMEM; *out is then an initializer that fails when used. */
FL_API int fl_init_assign(fl_prog *p, const float *values, int64_t n, fl_initializer *out);

/* Zero-initialised means "defaults": automatic name, layer's default initializer,
 * learning-rate scale 1, no extra L2, trainable. */
typedef struct {
    const char *name;
    fl_initializer init;
    float learning_rate; /* scale on the optimizer's rate; 0 means 1 */
    float l2_decay;      /* per-parameter L2 coefficient, added to the optimizer's */
    int frozen;          /* 1: not trained (stop_gradient) */
    float l1_decay;      /* per-parameter L1 coefficient (Paddle's L1Decay in a ParamAttr),
                            added to the optimizer's fl_opt_set_l1 */
} fl_param_attr;

/* ---- layers (Paddle fluid.layers semantics) ------------------------------------------ */

/* Input variable.  A batch dimension -1 is prepended to `shape` (fluid.layers.data).
 * lod_level 1 marks a slot of variable-length id lists (feed with LoD). */
FL_API fl_var *fl_layer_data(fl_prog *p, const char *name, int ndim, const int64_t *shape, fl_dtype dtype, int lod_level);

/* A free-standing float32 parameter (fluid.layers.create_parameter); with attr->name NULL
 * it is named "create_parameter_<k>.w_0".  Default initializer: Xavier. */
FL_API fl_var *fl_layer_create_parameter(fl_prog *p, int ndim, const int64_t *shape, fl_dtype dtype,
                                         const fl_param_attr *attr);

typedef struct {
    int num_flatten_dims; /* 0 means 1 */
    fl_param_attr weight; /* one attribute shared by all inputs' weights; name gets _k */
    fl_param_attr bias;
    int no_bias;
} fl_fc_attr;
/* Fully connected: out = act(sum_k flatten(in_k) W_k + b).  act: NULL, "tanh", "relu",
 * "sigmoid", "softmax", "softsign". */
FL_API fl_var *fl_layer_fc(fl_var *const *inputs, int n, int64_t size, const char *act);
FL_API fl_var *fl_layer_fc_ex(fl_var *const *inputs, int n, int64_t size, const char *act, const fl_fc_attr *attr);

typedef struct {
    int is_sparse;       /* gradient as SelectedRows (only looked-up rows) */
    int is_distributed;  /* table lives on parameter servers (PS mode) */
    int has_padding_idx; /* padding_idx is meaningful */
    int64_t padding_idx; /* rows with this id read as zeros and get no gradient;
                             negative counts from vocab */
    fl_param_attr param;
} fl_embedding_attr;
/* ids: int64 [N, 1] (LoD allowed) -> float32 [N, dim] with the same LoD. */
FL_API fl_var *fl_layer_embedding(fl_var *ids, int64_t vocab, int64_t dim, const fl_embedding_attr *attr);

/* pool_type: "sum", "average", "sqrt", "max".  x with LoD [N, d] -> [nseq, d]. */
FL_API fl_var *fl_layer_sequence_pool(fl_var *x, const char *pool_type);
/* fluid.layers.sequence_conv (op sequence_conv): x float32 [T, D] with one level of LoD ->
 * [T, num_filters] with x's LoD; row t of a sequence is the product of the rows
 * t + context_start .. t + context_start + context_length - 1 of its own sequence (zeros
 * outside it), side by side, with the filter [context_length * D, num_filters] (Xavier
 * unless param names another initializer; naming an existing filter shares it).  Paddle's
 * defaults: context_length 3, context_start -(context_length / 2).  context_stride must be 1
 * (Paddle's op has only that) and the padding is never trainable.  A bias [num_filters]
 * (bias NULL: default name and init 0; no_bias: none) is its own elementwise_add, act its
 * own op (as fl_layer_conv2d_transpose). */
FL_API fl_var *fl_layer_sequence_conv(fl_var *x, int64_t num_filters, int context_length, int context_start,
                                      int context_stride, const char *act, const fl_param_attr *param,
                                      const fl_param_attr *bias, int no_bias);
/* Paddle's Print (op print): a copy of x (any dtype, LoD kept) that, each time it runs,
 * writes x's name, message, LoD, place, shape, layout, dtype and first `summarize` values
 * (-1: all) in Paddle's format to stderr, in one write.  Its gradient is another print op,
 * of the output's gradient, so print_phase "forward", "backward" or "both" (NULL: both;
 * case ignored) chooses which runs write; first_n > 0 stops each op writing after that
 * many runs (per executor).  flags: FL_PRINT_* bits of what to write (Paddle's
 * print_tensor_* arguments; FL_PRINT_ALL as Paddle's defaults). */
enum {
    FL_PRINT_NAME = 1,
    FL_PRINT_TYPE = 2,
    FL_PRINT_SHAPE = 4,
    FL_PRINT_LOD = 8,
    FL_PRINT_LAYOUT = 16,
    FL_PRINT_ALL = 31
};
FL_API fl_var *fl_layer_print(fl_var *x, int first_n, const char *message, int summarize, int flags,
                              const char *print_phase);
FL_API fl_var *fl_layer_concat(fl_var *const *inputs, int n, int axis);
/* Paddle reshape: 0 copies the input dimension, one -1 is inferred. */
FL_API fl_var *fl_layer_reshape(fl_var *x, int ndim, const int64_t *shape);
/* Paddle broadcasting: y's shape matches x's dims [axis, axis+ndim(y)); axis -1 aligns
 * y with x's trailing dims.  Operands that do not fit that one-way rule broadcast both ways
 * as Paddle 2.x and NumPy do (each pair of dims, aligned from the end, equal or one of
 * them 1: [N, 1] + [1, M] -> [N, M]); the gradients sum over the broadcast dims. */
FL_API fl_var *fl_layer_elementwise_add(fl_var *x, fl_var *y, int axis);
FL_API fl_var *fl_layer_elementwise_sub(fl_var *x, fl_var *y, int axis);
FL_API fl_var *fl_layer_elementwise_mul(fl_var *x, fl_var *y, int axis);
FL_API fl_var *fl_layer_elementwise_div(fl_var *x, fl_var *y, int axis);
FL_API fl_var *fl_layer_relu(fl_var *x);
FL_API fl_var *fl_layer_tanh(fl_var *x);
FL_API fl_var *fl_layer_sigmoid(fl_var *x);
FL_API fl_var *fl_layer_softsign(fl_var *x);
/* Softmax over the last axis. */
FL_API fl_var *fl_layer_softmax(fl_var *x);
/* -log(prob[label]) per row; prob [N, C] float, label int64 [N, 1] -> [N, 1]. */
FL_API fl_var *fl_layer_cross_entropy(fl_var *prob, fl_var *label);
/* Numerically stable softmax + cross entropy on logits -> loss [N, 1].  Rows whose label
 * is -100 (Paddle's ignore_index) get loss 0 and no gradient. */
FL_API fl_var *fl_layer_softmax_with_cross_entropy(fl_var *logits, fl_var *label);
/* The same with Paddle's soft_label (label float32 shaped like logits, one distribution per
 * row, as label_smooth writes) and ignore_index (hard labels). */
FL_API fl_var *fl_layer_softmax_with_cross_entropy_ex(fl_var *logits, fl_var *label, int soft_label, int64_t ignore_index);
/* Elementwise max(x,0) - x*z + log(1+exp(-|x|)); label float, same shape as x. */
FL_API fl_var *fl_layer_sigmoid_cross_entropy_with_logits(fl_var *x, fl_var *label);
/* -z*log(p+eps) - (1-z)*log(1-p+eps); p, label float [N, 1]. */
FL_API fl_var *fl_layer_log_loss(fl_var *pred, fl_var *label, float epsilon);
/* Mean of all elements -> [1]. */
FL_API fl_var *fl_layer_mean(fl_var *x);
/* Sum over dims (ndims 0 = all dims -> [1]). */
FL_API fl_var *fl_layer_reduce_sum(fl_var *x, const int *dims, int ndims, int keep_dim);
/* Row-wise cosine similarity of [N, d] and [N or 1, d] -> [N, 1]. */
FL_API fl_var *fl_layer_cos_sim(fl_var *x, fl_var *y);
/* Paddle's matmul: alpha * op(x) op(y) for x [..., M, K] and y [..., K, N] (stored
 * transposed when transpose_x / transpose_y is set) -> [..., M, N]; batched operands (rank
 * 3 to 8) have equal leading dims; a rank-2 operand next to a batched one is shared by
 * every batch. */
FL_API fl_var *fl_layer_matmul(fl_var *x, fl_var *y, int transpose_x, int transpose_y, float alpha);
/* Paddle 2.x's matmul_v2 (trans_x, trans_y, no alpha): the same shapes as fl_layer_matmul. */
FL_API fl_var *fl_layer_matmul_v2(fl_var *x, fl_var *y, int trans_x, int trans_y);
/* Layer normalisation of x's rows [prod(dims[:begin_norm_axis]), rest] (Paddle's
 * layer_norm): (x - mean) / sqrt(var + epsilon), times a learned scale (init 1) when scale,
 * plus a learned bias (init 0) when shift; the attrs (NULL: defaults) name them. */
FL_API fl_var *fl_layer_layer_norm(fl_var *x, int begin_norm_axis, float epsilon, int scale, int shift,
                                   const fl_param_attr *scale_attr, const fl_param_attr *bias_attr);
/* GELU: x/2 (1 + erf(x / sqrt 2)), or with approximate its tanh form. */
FL_API fl_var *fl_layer_gelu(fl_var *x, int approximate);
/* Paddle's transpose (op transpose2): output dim i is x's dim perm[i]. */
FL_API fl_var *fl_layer_transpose(fl_var *x, int ndim, const int64_t *perm);
/* Rows of x (dim 0) at index (int32 / int64, [N] or [N, 1]) -> [N, dims of x after 0]. */
FL_API fl_var *fl_layer_gather(fl_var *x, fl_var *index);
/* index [..., k] (int32 / int64) picks x[i0, .., ik-1] -> [..., dims of x from k]. */
FL_API fl_var *fl_layer_gather_nd(fl_var *x, fl_var *index);
/* n variables of one shape stacked along a new dim at axis (negative counts from the end). */
FL_API fl_var *fl_layer_stack(fl_var *const *xs, int n, int axis);
/* Splits x along axis into num equal parts, or (sections non-NULL) parts of the nsections
 * given lengths (one may be -1: the rest); writes the parts to out and returns their
 * count, 0 on error. */
FL_API int fl_layer_split(fl_var *x, int num, const int64_t *sections, int nsections, int axis, fl_var **out);
/* x[starts:ends] along each of the naxes axes (negative starts / ends count from the end;
 * both are clamped to the dim). */
FL_API fl_var *fl_layer_slice(fl_var *x, int naxes, const int64_t *axes, const int64_t *starts, const int64_t *ends);
/* x int32 / int64 [..., 1] -> float32 [..., depth] one-hot rows (no gradient). */
FL_API fl_var *fl_layer_one_hot(fl_var *x, int64_t depth);
/* (1 - epsilon) label + epsilon * prior_dist (prior_dist [1, C], NULL: uniform 1/C). */
FL_API fl_var *fl_layer_label_smooth(fl_var *label, fl_var *prior_dist, float epsilon);
/* Paddle's expand: x tiled expand_times[i] times along each of its ndim dims. */
FL_API fl_var *fl_layer_expand(fl_var *x, int ndim, const int64_t *expand_times);
/* A tensor of `shape` (dim 0 replaced by input's dim 0, the batch) filled with value, of
 * dtype float32, float64 or int64; no gradient flows through it (labels, margins). */
FL_API fl_var *fl_layer_fill_constant_batch_size_like(fl_var *input, int ndim, const int64_t *shape, fl_dtype dtype,
                                                      float value);
/* ops_math.c: x * x (float32). */
FL_API fl_var *fl_layer_square(fl_var *x);
/* Mean over dims (ndims 0: every dim -> [1], or all 1s with keep_dim); the counts are the
 * run-time sizes, so the batch dimension may be reduced. */
FL_API fl_var *fl_layer_reduce_mean(fl_var *x, const int *dims, int ndims, int keep_dim);
/* x converted to dtype (float32, float64, int32, int64; floats to integers truncate); the
 * gradient flows between float types only. */
FL_API fl_var *fl_layer_cast(fl_var *x, fl_dtype dtype);
/* ops_bcast.c: elementwise max(x, y) / min(x, y) of float32 operands broadcast both ways
 * (axis as for elementwise_add); the gradient goes to x where x > y (max) or x < y (min),
 * else to y, as Paddle's. */
FL_API fl_var *fl_layer_elementwise_max(fl_var *x, fl_var *y, int axis);
FL_API fl_var *fl_layer_elementwise_min(fl_var *x, fl_var *y, int axis);
/* Paddle's comparison ops by type: "less_than", "less_equal", "greater_than",
 * "greater_equal", "equal", "not_equal"; x and y of one dtype (float32, float64, int32,
 * int64), broadcast both ways.  The result is int32 0 / 1 (Paddle's is bool, a dtype this
 * library does not have) and has no gradient. */
FL_API fl_var *fl_layer_compare(fl_var *x, fl_var *y, const char *type);
/* "logical_and", "logical_or", "logical_xor" (x, y broadcast) or "logical_not" (y NULL):
 * non-zero is true; int32 0 / 1, no gradient. */
FL_API fl_var *fl_layer_logical(fl_var *x, fl_var *y, const char *type);
/* ops_select.c: Paddle's where: condition ? x : y elementwise (a select: an inf in the
 * branch not taken stays out of the result and the gradients).  condition of any numeric
 * dtype (non-zero is true, as the comparisons' int32 0 / 1), x and y of one dtype (float32,
 * float64, int32, int64); the three broadcast together as NumPy does.  Gradient (float32)
 * to x where condition holds, to y elsewhere; none to condition. */
FL_API fl_var *fl_layer_where(fl_var *condition, fl_var *x, fl_var *y);
/* ops_more.c: Paddle's fill_constant: a tensor of shape (every dim >= 1) filled with value,
 * dtype float32, float64, int32 or int64, computed in p each run; no gradient. */
FL_API fl_var *fl_layer_fill_constant(fl_prog *p, int ndim, const int64_t *shape, fl_dtype dtype, double value);
/* Paddle's l2_normalize (op norm): x / sqrt(sum over axis of x^2 + epsilon) (axis negative
 * from the end; Paddle's epsilon 1e-12), float32, with its gradient. */
FL_API fl_var *fl_layer_l2_normalize(fl_var *x, int axis, float epsilon);
/* Paddle's topk over the last dim: the k largest values of each row, descending (returned,
 * with a gradient to x at the positions they came from), and their int64 positions in
 * *indices (may be NULL; no gradient). */
FL_API fl_var *fl_layer_topk(fl_var *x, int k, fl_var **indices);
/* Elementwise "sqrt", "abs", "exp" or "log" of float32 x, with gradients. */
FL_API fl_var *fl_layer_unary(fl_var *x, const char *type);
/* Paddle's shape: int32 [rank(x)] holding x's run-time dims; no gradient. */
FL_API fl_var *fl_layer_shape(fl_var *x);
/* Paddle's assign of an array (op assign_value): a constant tensor of `shape` (at most 2^24
 * elements) holding values (float32, int32 or int64 as dtype, row-major), copied. */
FL_API fl_var *fl_layer_assign_value(fl_prog *p, int ndim, const int64_t *shape, fl_dtype dtype, const void *values);
/* Paddle's create_global_var: a persistable variable of p (name NULL: "global_var_<k>"; an
 * existing name is an error) filled with value by the startup program; no gradient. */
FL_API fl_var *fl_layer_create_global_var(fl_prog *p, const char *name, int ndim, const int64_t *shape, fl_dtype dtype,
                                          float value);
/* The same with Paddle's persistable flag (create_global_var(persistable=False) when 0): a
 * non-persistable variable, left out of saved persistables and inference models, which a
 * fill_constant op appended here to p sets to value in every run (Paddle makes its main
 * program's variable afresh in each run: the startup program's copy does not reach it), so
 * no value carries from one run to the next. */
FL_API fl_var *fl_layer_create_global_var_ex(fl_prog *p, const char *name, int ndim, const int64_t *shape, fl_dtype dtype,
                                             float value, int persistable);
/* scale*x + bias (bias_after_scale) or scale*(x + bias). */
FL_API fl_var *fl_layer_scale(fl_var *x, float scale, float bias, int bias_after_scale);
/* implementation: "downgrade_in_infer" (Paddle's default) or "upscale_in_train". */
FL_API fl_var *fl_layer_dropout(fl_var *x, float prob, const char *implementation);
/* Top-k accuracy of probabilities [N, C] against int64 labels [N, 1] -> float32 [1]
 * (built from top_k + accuracy ops; the counts Correct and Total are the int64 [1]
 * variables accuracy.tmp_1 and accuracy.tmp_2). */
FL_API fl_var *fl_layer_accuracy(fl_var *input, fl_var *label, int k);
/* ROC AUC as Paddle's auc op: input [N, 2] probabilities (column 1 = positive), label
 * int64 [N, 1]; num_thresholds buckets; the global AUC accumulates over all batches,
 * the batch AUC over the last slide_steps batches.  Both are float64 [1] (as in Paddle):
 * read them with *(const double *)fl_tensor_cdata(t).  Returns the global AUC. */
FL_API fl_var *fl_layer_auc(fl_var *input, fl_var *label, int num_thresholds, int slide_steps, fl_var **batch_auc);
/* The ROC AUC of bucket statistics as the auc op keeps them (its [1, B] global StatPos and
 * StatNeg, B = num_thresholds + 1 counts of positives and negatives per bucket), e.g. summed
 * over every worker (Paddle's fleet.metrics.auc): the auc op's trapezoid sum into *auc.
 * With no positive or no negative example *auc is 0.5, as fleet.metrics.auc answers (the
 * auc op says 0 there).  A NULL pointer, num_buckets < 1 or a negative count is FL_EINVAL,
 * naming the argument.  Pure: thread-safe, reads num_buckets elements of each array. */
FL_API int fl_auc_from_stats(const int64_t *stat_pos, const int64_t *stat_neg, int64_t num_buckets, double *auc);

/* ---- convolution, pooling, batch normalisation (NCHW, float32) ----------------------- */
#define FLEET_GRAPH_HAS_CONV 1

typedef struct {
    int stride[2];        /* [h, w]; 0 means 1 */
    int padding[2];       /* [h, w] zeros added on both sides */
    int dilation[2];      /* [h, w]; 0 means 1 */
    int groups;           /* 0 means 1; C and num_filters must be divisible by it */
    fl_param_attr filter; /* default "conv2d_<k>.w_0", Normal(0, sqrt(2 / (kh * kw * C))) as Paddle;
                             naming an existing filter shares it (shapes must agree) */
    fl_param_attr bias;   /* default "conv2d_<k>.b_0", init 0 */
    int no_bias;
} fl_conv2d_attr;
/* fluid.layers.conv2d: input [N, C, H, W] -> [N, num_filters, Ho, Wo] with
 * Ho = (H + 2 pad - dil (kh - 1) - 1) / stride + 1; filter [num_filters, C/groups, kh, kw],
 * bias added per output channel.  act: NULL, "relu", "tanh", "sigmoid" (fused into the
 * op), "softmax", "softsign" (own op).  attr NULL: stride 1, no padding, dilation 1, 1 group. */
FL_API fl_var *fl_layer_conv2d(fl_var *input, int64_t num_filters, int filter_h, int filter_w, const char *act,
                               const fl_conv2d_attr *attr);

typedef struct {
    int pool_size[2]; /* [h, w]; unused with global_pooling */
    int stride[2];    /* 0 means 1 */
    int padding[2];
    int global_pooling; /* one window over the whole image, no padding */
    int inclusive;      /* avg: 1 divides by the whole window, padding included (Paddle exclusive=False) */
    int ceil_mode;      /* output size rounded up */
} fl_pool2d_attr;
/* fluid.layers.pool2d on [N, C, H, W] with square windows: pool_type "max" or "avg" (NULL:
 * max), pool_stride >= 1, exclusive 1 (Paddle's default): avg divides by the window clipped
 * to the image.  Windows are clipped to the image; max ignores padding. */
FL_API fl_var *fl_layer_pool2d(fl_var *input, int pool_size, const char *pool_type, int pool_stride, int pool_padding,
                               int global_pooling, int exclusive);
/* Per-dimension sizes and ceil_mode; a zeroed attr means stride 1, no padding, exclusive. */
FL_API fl_var *fl_layer_pool2d_ex(fl_var *input, const char *pool_type, const fl_pool2d_attr *attr);

typedef struct {
    fl_param_attr scale;              /* default "batch_norm_<k>.w_0", init 1 */
    fl_param_attr bias;               /* default "batch_norm_<k>.b_0", init 0 */
    const char *moving_mean_name;     /* default "batch_norm_<k>.w_1" (init 0); an existing one is shared */
    const char *moving_variance_name; /* default "batch_norm_<k>.w_2" (init 1) */
    int use_global_stats;             /* 1: normalise with the moving statistics in training too */
} fl_batch_norm_attr;
/* fluid.layers.batch_norm over axis 1 of [N, C] or [N, C, ...] (rank 2 to 5).  Training:
 * batch mean and biased variance per channel; the moving statistics (persistable, not
 * trained) become moving * momentum + batch * (1 - momentum).  is_test (set to 1 by
 * fl_prog_clone(p, 1)): the moving statistics normalise and are not updated.  momentum in
 * [0, 1] (Paddle: 0.9), epsilon in [0, 0.001] (Paddle: 1e-5); act as for conv2d (own op). */
FL_API fl_var *fl_layer_batch_norm(fl_var *input, const char *act, int is_test, float momentum, float epsilon,
                                   const fl_batch_norm_attr *attr);

typedef struct {
    int stride[2];                 /* [h, w]; 0 means 1 */
    int padding[4];                /* [top, bottom, left, right] cut from the output (Paddle's 4-element paddings) */
    int dilation[2];               /* [h, w]; 0 means 1 */
    int groups;                    /* 0 means 1; C and num_filters must be divisible by it */
    int output_size[2];            /* [Ho, Wo] or {0, 0}: each in [inferred, inferred + stride) */
    int output_padding[2];         /* rows / columns added at the bottom / right, < max(stride, dilation) */
    const char *padding_algorithm; /* NULL or "EXPLICIT": padding; "SAME": Paddle's paddings for
                                      H, kh and stride, dilation 1 (Ho = H * stride when kh >= stride);
                                      "VALID": no padding */
    fl_param_attr filter;          /* default "conv2d_transpose_<k>.w_0", Xavier as Paddle; naming an
                                      existing filter shares it (shapes must agree) */
    fl_param_attr bias;            /* default "conv2d_transpose_<k>.b_0", init 0 */
    int no_bias;
} fl_conv2d_transpose_attr;
/* fluid.layers.conv2d_transpose (op conv2d_transpose, the gradient of conv2d with respect to
 * its input): input [N, C, H, W] -> [N, num_filters, Ho, Wo] with
 * Ho = (H - 1) stride - pad_top - pad_bottom + dil (kh - 1) + 1 (+ output_padding, or
 * output_size); filter [C, num_filters / groups, kh, kw]; filter_h / filter_w 0 derive the
 * filter from output_size as Paddle does.  The bias is its own elementwise_add (axis 1) and
 * act (NULL, "relu", "tanh", "sigmoid", "softmax", "softsign") its own op, as Paddle's
 * layer.  attr NULL: stride 1, no padding, dilation 1, 1 group. */
FL_API fl_var *fl_layer_conv2d_transpose(fl_var *input, int64_t num_filters, int filter_h, int filter_w, const char *act,
                                         const fl_conv2d_transpose_attr *attr);

/* ---- backward and optimizers --------------------------------------------------------- */

typedef struct {
    fl_var *param;
    fl_var *grad;
} fl_param_grad;

/* Appends gradient ops for `loss` (a one-element variable) to its program. Variables named
 * in no_grad get no gradient.  *pairs (malloc'ed, caller frees) lists every trainable
 * parameter reached, with its gradient variable ("<name>@GRAD"). */
FL_API int fl_append_backward(fl_var *loss, const char *const *no_grad, int n_no_grad, fl_param_grad **pairs, int *npairs);

/* The same with recompute (Paddle's append_backward(checkpoints=...)): the forward ops
 * between checkpoints are run again in the backward program, before their gradient ops,
 * writing copies named "<var>@RECOMPUTE" that the gradient ops read instead of the forward
 * activations; the checkpoints, parameters, data and persistable variables are kept.  The
 * ops before the first checkpoint form the first segment, the ops after the last are not
 * recomputed.  Dropout recomputes the same mask; another random op inside a segment is
 * FL_EUNSUPPORTED.  An unknown name is FL_EINVAL naming it.  Memory goes down when the
 * executor frees dead activations (fl_exe_set_eager_deletion, fleet/exec.h). */
FL_API int fl_append_backward_recompute(fl_var *loss, const char *const *no_grad, int n_no_grad,
                                        const char *const *checkpoints, int ncheckpoints, fl_param_grad **pairs,
                                        int *npairs);

FL_API fl_opt *fl_opt_sgd(float learning_rate);
FL_API fl_opt *fl_opt_momentum(float learning_rate, float momentum, int use_nesterov);
FL_API fl_opt *fl_opt_adagrad(float learning_rate, float epsilon);
FL_API fl_opt *fl_opt_adam(float learning_rate, float beta1, float beta2, float epsilon);
/* Paddle's LarsMomentumOptimizer (op lars_momentum; Paddle's defaults: lars_coeff 0.001,
 * lars_weight_decay 0.0005, epsilon 0).  Per parameter, g = grad (+ L2 as for the others):
 *   local_lr = lr * lars_coeff * ||p|| / (||g|| + lars_weight_decay * ||p|| + epsilon)
 *              (lr when lars_weight_decay is 0 or a norm is 0)
 *   velocity = momentum * velocity + local_lr * (g + lars_weight_decay * p);  p -= velocity
 * Dense gradients only (a sparse one is an error at minimize).  NULL with FL_EINVAL for a
 * negative or non-finite lars_coeff, lars_weight_decay or epsilon. */
FL_API fl_opt *fl_opt_lars(float learning_rate, float momentum, float lars_coeff, float lars_weight_decay, float epsilon);
/* Paddle's LambOptimizer (op lamb; Paddle's defaults: beta1 0.9, beta2 0.999, epsilon 1e-6,
 * lamb_weight_decay 0.01): Adam's bias-corrected moments give r = m1_hat / (sqrt(m2_hat) +
 * epsilon) + lamb_weight_decay * p, and p -= lr * (||p|| / ||r||) * r (ratio 1 when a norm
 * is 0).  Dense gradients only. */
FL_API fl_opt *fl_opt_lamb(float learning_rate, float beta1, float beta2, float epsilon, float lamb_weight_decay);
/* Parameters exempt from the weight decay of lars_momentum, lamb or adam: a comma-separated
 * list ("b_0,.b" ...; NULL or "" clears it).  As in Paddle, a LARS or Adam entry matches a
 * parameter whose name contains it, a LAMB entry one whose name ends with it.  Other
 * optimizers: FL_EINVAL.  BERT's recipe is FL_OPT_BERT_NO_DECAY. */
FL_API int fl_opt_set_exclude_from_weight_decay(fl_opt *o, const char *names);
/* Paddle's BERT exclusion (optimization.py): layer-norm parameters and biases. */
#define FL_OPT_BERT_NO_DECAY "layer_norm,_bias,.b_0"
/* Decoupled weight decay of adam (Paddle's BERT optimization.py, AdamW): after each update
 * param -= lr * coeff * param_before, for every parameter not excluded above (0: none, the
 * default).  FL_EINVAL for another optimizer or a negative or non-finite coeff. */
FL_API int fl_opt_set_weight_decay(fl_opt *o, float coeff);
/* L2 regularization coefficient applied to every parameter's gradient (grad += c*param;
 * for sparse gradients only on the touched rows). */
FL_API int fl_opt_set_l2(fl_opt *o, float coeff);
/* Paddle's RMSPropOptimizer (op rmsprop; Paddle's defaults: rho 0.95, epsilon 1e-6,
 * momentum 0, centered 0), g the gradient (+ L2):
 *   ms = rho ms + (1 - rho) g^2;  mg = rho mg + (1 - rho) g   (mg with centered only)
 *   mom = momentum mom + lr g / sqrt(ms - mg^2 + epsilon)      (without centered: ms + epsilon)
 *   p -= mom
 * State "<param>_momentum_0", "_mean_square_0", "_mean_grad_0".  Dense gradients only (a
 * sparse one is an error at minimize).  NULL with FL_EINVAL for rho outside [0, 1),
 * epsilon <= 0 or a negative momentum. */
FL_API fl_opt *fl_opt_rmsprop(float learning_rate, float rho, float epsilon, float momentum, int centered);
/* Paddle's L1Decay: minimize adds coeff * sign(param) to every gradient (after clipping;
 * a sparse gradient on its rows only), op l1_decay, coeff plus the parameter's own
 * fl_param_attr.l1_decay.  Adds up with L2. */
FL_API int fl_opt_set_l1(fl_opt *o, float coeff);
/* lr = base * rate^(step / decay_steps), floor()ed with staircase; step counts the runs
 * of the main program, starting at 0. */
FL_API int fl_opt_set_exponential_decay(fl_opt *o, int64_t decay_steps, float decay_rate, int staircase);
/* Paddle's cosine_decay: lr = base * 0.5 * (cos(floor(step / step_each_epoch) * pi / epochs) + 1);
 * replaces an exponential decay set before (and the other way round). */
FL_API int fl_opt_set_cosine_decay(fl_opt *o, int64_t step_each_epoch, int64_t epochs);
/* Gradient clipping applied by minimize after backward (and after the distributed
 * allreduce) and before the updates, as Paddle's GradientClipBy*: FL_CLIP_VALUE clips each
 * element to [min, max] (a = max, b = min); FL_CLIP_NORM scales each gradient to an L2 norm
 * of at most a; FL_CLIP_GLOBAL_NORM scales all gradients by a / max(global norm, a).
 * Dense float32 gradients only (minimize fails naming a sparse one). */
enum { FL_CLIP_NONE = 0, FL_CLIP_VALUE = 1, FL_CLIP_NORM = 2, FL_CLIP_GLOBAL_NORM = 3 };
FL_API int fl_opt_set_grad_clip(fl_opt *o, int kind, float a, float b);
/* The learning rate is this float32 [1] variable (a schedule below) instead of the constant;
 * it must be in the program minimize is given. */
FL_API int fl_opt_set_lr_var(fl_opt *o, fl_var *lr);
/* Learning-rate schedules (Paddle's fluid.layers of the same names) -> float32 [1] variable,
 * computed each run from the step counter @LR_DECAY_COUNTER@ (created with its increment
 * at the start of p by the first schedule; noam counts from 1, the others from 0). */
FL_API fl_var *fl_layer_noam_decay(fl_prog *p, int64_t d_model, int64_t warmup_steps, float learning_rate);
FL_API fl_var *fl_layer_polynomial_decay(fl_prog *p, float learning_rate, int64_t decay_steps, float end_learning_rate,
                                         float power, int cycle);
/* ops_lr.c: piecewise_decay: values[i] while step < boundaries[i] (nboundaries >= 1,
 * non-decreasing), values[nboundaries] after; values holds nboundaries + 1 rates. */
FL_API fl_var *fl_layer_piecewise_decay(fl_prog *p, const int64_t *boundaries, int nboundaries, const float *values);
/* lr * decay_rate^d, lr * exp(-decay_rate d), lr / (1 + decay_rate d), d = step /
 * decay_steps (floor()ed with staircase); cosine: fl_opt_set_cosine_decay's formula. */
FL_API fl_var *fl_layer_exponential_decay(fl_prog *p, float learning_rate, int64_t decay_steps, float decay_rate,
                                          int staircase);
FL_API fl_var *fl_layer_natural_exp_decay(fl_prog *p, float learning_rate, int64_t decay_steps, float decay_rate,
                                          int staircase);
FL_API fl_var *fl_layer_inverse_time_decay(fl_prog *p, float learning_rate, int64_t decay_steps, float decay_rate,
                                           int staircase);
FL_API fl_var *fl_layer_cosine_decay(fl_prog *p, float learning_rate, int64_t step_each_epoch, int64_t epochs);
/* Linear from start_lr to end_lr over warmup_steps, then learning_rate (a schedule's
 * variable) or, when it is NULL, constant_lr. */
FL_API fl_var *fl_layer_linear_lr_warmup(fl_prog *p, fl_var *learning_rate, float constant_lr, int64_t warmup_steps,
                                         float start_lr, float end_lr);
/* Name of the optimizer: "sgd", "momentum", "adagrad", "adam", "lars_momentum", "lamb",
 * "rmsprop". */
FL_API const char *fl_opt_type(const fl_opt *o);
/* Paddle's RecomputeOptimizer: minimize() appends backward with these checkpoints
 * (comma-separated variable names; "" or NULL: none), see fl_append_backward_recompute.
 * The names are checked by minimize (FL_EINVAL naming an unknown one). */
FL_API int fl_opt_set_recompute(fl_opt *o, const char *checkpoints);
/* append_backward + regularization + one optimizer op per parameter + learning-rate ops.
 * Returns the program's build status. */
FL_API int fl_opt_minimize(fl_opt *o, fl_var *loss);
FL_API int fl_opt_minimize_ex(fl_opt *o, fl_var *loss, const char *const *no_grad, int n_no_grad);
FL_API void fl_opt_free(fl_opt *o);

#ifdef __cplusplus
}
#endif
#endif
