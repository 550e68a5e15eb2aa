/*
 * graph_internal.h - program, variable and operator structures, the op registry, the
 * kernel context and the gradient-maker context.  Shared by graph/, exec/ and io/.
 *
 * How to add an operator (see src/graph/ops_basic.c for examples):
 *   1. write `static const fl_op_def def_<type>` with its input and output slot names,
 *      an infer() that checks inputs and sets output var dtype/shape at build time (-1
 *      for run-time dims), a run() kernel and, if it has a gradient, a grad() maker;
 *   2. list it in the group table at the end of the file (fl__ops_<group>[]);
 *   3. write a layer builder (fl_layer_*) that calls fl__op_append();
 *   4. add a finite-difference check to tests/test_grad_<group>.c.
 */
#ifndef FL_GRAPH_INTERNAL_H
#define FL_GRAPH_INTERNAL_H

#include "fleet/graph.h"
#include "../tensor/tensor_internal.h"

#define FL_PROG_MAGIC 0x50524f47u /* "PROG" */
#define FL_VAR_MAGIC 0x56415221u
#define FL_OP_MAX_SLOTS 8
#define FL_OP_MAX_ATTRS 16

/* Op roles, as Paddle's op_role: used by clone(for_test), pruning and fleet rewrites. */
enum { FL_ROLE_FORWARD = 0, FL_ROLE_BACKWARD = 1, FL_ROLE_OPTIMIZE = 2, FL_ROLE_LRSCHED = 3 };

struct fl_var {
    uint32_t magic;
    char *name;
    fl_prog *prog;
    fl_dtype dtype;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    int lod_level;
    int persistable;
    int stop_gradient;
    int is_param;
    int is_data;
    int is_sparse_grad; /* gradient variable that holds SelectedRows at run time */
    float lr_scale;     /* parameters: learning-rate multiplier */
    float l2_decay;     /* parameters: extra L2 coefficient */
    float l1_decay;     /* parameters: extra L1 coefficient (op l1_decay) */
    int idx;            /* position in prog->vars */
};

typedef enum { FL_ATTR_INT, FL_ATTR_FLOAT, FL_ATTR_STR, FL_ATTR_INTS, FL_ATTR_FLOATS } fl_attr_type;

typedef struct {
    char *name;
    fl_attr_type type;
    int64_t i;
    double f;
    char *s;
    int n; /* list length */
    int64_t *ints;
    float *floats;
} fl_attr;

typedef struct {
    int n;
    fl_var **vars;
} fl_slot;

typedef struct fl_op_def fl_op_def;

typedef struct fl_op {
    const fl_op_def *def;
    fl_prog *prog;
    int role;
    fl_slot in[FL_OP_MAX_SLOTS];  /* indexed like def->in_names */
    fl_slot out[FL_OP_MAX_SLOTS]; /* indexed like def->out_names */
    int nattr;
    fl_attr attr[FL_OP_MAX_ATTRS];
    fl_var *cond; /* optional: the op runs only when cond's first element is non-zero */
} fl_op;

struct fl_prog {
    uint32_t magic;
    fl_var **vars;
    int nvars, cap_vars;
    fl_op **ops;
    int nops, cap_ops;
    fl_prog *startup; /* owned; NULL for a startup program */
    fl_prog *main;    /* for a startup program: its main program */
    uint64_t seed;
    uint64_t version; /* bumped on every change; executors re-plan on change */
    int status;
    char err[512];
    fl_strmap names; /* name -> var index */
    fl_strmap uniq;  /* prefix -> next counter for unique names */
    int cur_role;    /* role of ops appended now */
    /* fl_init_assign's value sets of a main program: id k is [k - 1]; freed with it */
    float **assign_vals;
    int64_t *assign_n;
    int nassign;
};

/* ---- kernel context ----------------------------------------------------------------- */

typedef struct fl_kctx {
    const fl_op *op;
    fl_tensor **in[FL_OP_MAX_SLOTS]; /* in[slot][k] */
    int nin[FL_OP_MAX_SLOTS];
    fl_tensor **out[FL_OP_MAX_SLOTS];
    int nout[FL_OP_MAX_SLOTS];
    void **state;  /* per-op, per-executor state slot (kernels may malloc; freed with free()) */
    uint64_t step; /* how many times this executor has run this program before */
} fl_kctx;

#define FL_IN(c, s) ((c)->nin[s] ? (c)->in[s][0] : NULL)
#define FL_OUT(c, s) ((c)->nout[s] ? (c)->out[s][0] : NULL)

/* ---- gradient-maker context ---------------------------------------------------------- */

typedef struct fl_grad_ctx fl_grad_ctx;
/* Gradient of forward output `v`, or NULL if no gradient flows into it. */
fl_var *fl__grad_of(fl_grad_ctx *g, fl_var *v);
/* Variable to write the gradient of forward input `v` to, or NULL if v needs none.  When
 * several ops contribute, each gets its own variable and append_backward sums them. */
fl_var *fl__grad_for(fl_grad_ctx *g, fl_var *v);

struct fl_op_def {
    const char *type;
    const char *in_names[FL_OP_MAX_SLOTS]; /* NULL-terminated */
    const char *out_names[FL_OP_MAX_SLOTS];
    /* Build time: validate inputs and set output var dtype/shape.  Return status; use
     * fl__op_error() for messages (names the op and the variable). */
    int (*infer)(fl_op *op);
    /* Run time: compute outputs (resize them first).  Return status. */
    int (*run)(fl_kctx *ctx);
    /* Append gradient ops for op (NULL: the op has no gradient). */
    int (*grad)(fl_op *op, fl_grad_ctx *g);
    /* Frees what run() left in *ctx->state (NULL: plain free()). */
    void (*state_free)(void *state);
    /* FL_OPDEF_* bits: what the executor may assume of run() (0 for most ops). */
    unsigned flags;
};

/* Bits of fl_op_def.flags.  After each op the executor gives every tensor the op may have
 * written a new write version (fl__tensor_bump, tensor_internal.h): its outputs and, unless
 * FL_OPDEF_READS_INPUTS, its inputs (ops that update a state passed as an input). */
enum {
    FL_OPDEF_READS_INPUTS = 1, /* run() never writes its inputs */
    /* run() keeps its outputs between runs as a cache (conv_bn_fold) and bumps their versions
     * itself when it writes them: the executor neither bumps them nor releases their buffers
     * (eager deletion) */
    FL_OPDEF_OWN_OUTPUTS = 2,
};

/* ---- registry and building ------------------------------------------------------------ */

const fl_op_def *fl__op_lookup(const char *type);

typedef struct {
    const char *slot;
    fl_var *const *vars;
    int n;
} fl_io;
/* One-variable slot.  The compound literal lives until the end of the enclosing block:
 * never use it as the body of an unbraced if/for whose result is used afterwards. */
/* clang-format off */
#define FL_IO1(slot, v) {(slot), (fl_var *const[]){(v)}, 1}
/* clang-format on */

/* Building an op is two calls: fl__op_new() checks that the type exists, that every slot
 * name is known to the op and that every var belongs to p, and appends the op (role =
 * FORWARD unless p is in backward/optimize building, see fl__prog_set_role); the builder
 * then sets attributes; fl__op_finish() runs def->infer and, on failure, removes the op
 * again and returns the status (the program error names the op).  fl__op_new returns NULL
 * with the program error set.  fl__op_append() = new + finish for ops without attrs. */
fl_op *fl__op_new(fl_prog *p, const char *type, const fl_io *ins, int nins, const fl_io *outs, int nouts);
int fl__op_finish(fl_op *op);
fl_op *fl__op_append(fl_prog *p, const char *type, const fl_io *ins, int nins, const fl_io *outs, int nouts);
/* For gradient makers (defined in backward.c): appends gradient op `type` with the given
 * slots, carrying all of the forward op's attributes (Paddle's default grad maker).
 * Returns the status; on failure the program error names the op. */
int fl__grad_append(fl_op *op, const char *type, const fl_io *in, int nin, const fl_io *out, int nout);
/* infer() of ops whose outputs are shaped at run time (gradient ops). */
int fl__infer_nop(fl_op *op);
/* Name of the first variable of input (out=0) or output (out=1) slot, "?" if empty. */
const char *fl__kctx_var_name(const fl_kctx *c, int slot, int out);
/* Run-time check: input `slot` is a dense float32 tensor (error names op and variable). */
int fl__kctx_dense_f32(const fl_kctx *c, int slot);
/* Build-time check: v is float32 (error names op and variable). */
int fl__op_need_f32(fl_op *op, const fl_var *v);
/* The reductions' shape rule (ops_nn.c): reduced dims in red, output shape in os / *on. */
int fl__reduce_dims(const fl_op *op, int rank, const int64_t *xs, char *red, int64_t *os, int *on, int all_by_default);
/* For infer(): every declared input and output slot holds exactly one variable (else a
 * build error naming the op and slot).  Ops with optional or list slots check their own. */
int fl__op_check_slots(fl_op *op);
/* Program surgery for rewriters (fleet/): removes op i (later ops shift down), or an
 * unused variable v (later variables shift down; v is freed). */
void fl__prog_remove_op(fl_prog *p, int i);
int fl__prog_remove_var(fl_prog *p, fl_var *v);
/* Moves the last op of p to index pos (later ops shift by one). */
int fl__prog_move_last_op(fl_prog *p, int pos);
/* Role given to ops appended from now on (FL_ROLE_*). */
void fl__prog_set_role(fl_prog *p, int role);
/* fuse.c: batch_norm + elementwise_add + relu on forward ops made one fused_bn_add_activation
 * (unless FLEET_FUSE_BN_ADD_ACT=0), never removing a variable named in keep or keep2; the
 * number fused, or a status < 0.  append_backward calls it first. */
int fl__fuse_bn_add_act(fl_prog *p, const char *const *keep, int nkeep, const char *const *keep2, int nkeep2);

int fl__attr_set_i(fl_op *op, const char *name, int64_t v);
int fl__attr_set_f(fl_op *op, const char *name, double v);
int fl__attr_set_s(fl_op *op, const char *name, const char *v);
int fl__attr_set_ints(fl_op *op, const char *name, const int64_t *v, int n);
int fl__attr_set_floats(fl_op *op, const char *name, const float *v, int n);
const fl_attr *fl__attr_find(const fl_op *op, const char *name);
int64_t fl__attr_i(const fl_op *op, const char *name, int64_t def);
double fl__attr_f(const fl_op *op, const char *name, double def);
const char *fl__attr_s(const fl_op *op, const char *name, const char *def);

/* Records an error on op's program naming the op ("fc: ...") and returns FL_EINVAL. */
int fl__op_error(fl_op *op, const char *fmt, ...) FL_PRINTF(2, 3);
/* Records a build error on p (first one wins) and returns status. */
int fl__prog_error(fl_prog *p, int status, const char *fmt, ...) FL_PRINTF(3, 4);

/* Variables. */
fl_var *fl__var_create(fl_prog *p, const char *name, fl_dtype dt, int ndim, const int64_t *shape);
/* Unique name "<prefix>_<k>.<suffix>_<j>"-style generator (Paddle: fc_0.w_0, fc_0.tmp_0). */
void fl__unique_name(fl_prog *p, const char *prefix, char *out, size_t cap);
/* Temporary output var named "<base>.tmp_<k>". */
fl_var *fl__tmp_var(fl_prog *p, const char *base, fl_dtype dt, int ndim, const int64_t *shape);
void fl__var_set_shape(fl_var *v, fl_dtype dt, int ndim, const int64_t *shape);
/* Creates a parameter in p and its copy in p's startup program with an initializer op.
 * fan_in/fan_out are used by Xavier; def_init is used when attr->init is DEFAULT. */
fl_var *fl__param_create(fl_prog *p, const char *name, int ndim, const int64_t *shape, const fl_param_attr *attr,
                         fl_initializer def_init, int64_t fan_in, int64_t fan_out);
/* Creates a persistable non-parameter var in p and in its startup program, filled with a
 * constant there (optimizer moments, learning rates, counters). */
fl_var *fl__persistable_create(fl_prog *p, const char *name, fl_dtype dt, int ndim, const int64_t *shape, float value);
/* Renames v (the new name must be free). */
int fl__var_rename(fl_var *v, const char *name);
/* Gets or creates the var of the same name/shape in another program. */
fl_var *fl__var_mirror(fl_prog *dst, const fl_var *v);
/* Returns first non-NULL program of the given vars, or NULL (no error) if any var is NULL. */
fl_prog *fl__prog_of(fl_var *const *vars, int n);

/* Shape-check helpers for infer(): */
int fl__shapes_equal(const fl_var *a, const fl_var *b);
void fl__shape_str(const fl_var *v, char *buf, size_t cap);

/* Upper layers (fleet/) add op groups of their own (collective ops) before building
 * programs that use them.  Idempotent; thread safe; at most 8 extra groups. */
int fl__op_register_group(const fl_op_def *const *group);

/* recompute.c: append_backward with checkpoints.  fl__recompute_plan checks the names
 * (FL_EINVAL naming an unknown one; *out NULL when ncps is 0) and cuts the forward ops of
 * p into segments; fl__recompute_enter(r, i) appends the copies of forward op i's segment
 * the first time backward reaches it; fl__recompute_rewrite(r, first) makes the ops
 * appended since `first` read the copies.  NULL r: nothing. */
typedef struct fl_recompute fl_recompute;
int fl__recompute_plan(fl_prog *p, const char *const *cps, int ncps, fl_recompute **out);
int fl__recompute_enter(fl_recompute *r, int op_index);
void fl__recompute_rewrite(fl_recompute *r, int first_op);
void fl__recompute_free(fl_recompute *r);

/* fold_infer.c: the inference pass of a program that runs forward only with batch_norm on
 * its global statistics (fl_prog_clone(p, 1), fl_io_load_inference_model): batch_norm folded
 * into the convolution before it, relu and the residual elementwise_add fused into it.
 * FLEET_INFER_FUSE=0 turns it off.  Returns the number of rewrites or a negative status. */
int fl__infer_fuse(fl_prog *p);

/* Optimizer hook, used by fleet/ to turn minimize() into a distributed minimize.
 * Phase AFTER_BACKWARD runs after append_backward and before the learning-rate and update
 * ops: it may append ops (allreduce of gradients), replace pairs[i].grad, and set
 * update_cond (update ops then run only on steps where it is non-zero).  Phase
 * AFTER_UPDATE runs after the update ops (LocalSGD parameter averaging). */
enum { FL_HOOK_AFTER_BACKWARD = 1, FL_HOOK_AFTER_UPDATE = 2, FL_HOOK_BEFORE_BACKWARD = 3 };
typedef struct {
    fl_prog *prog;
    fl_param_grad *pairs;
    int npairs;
    fl_var *update_cond;
    const char *opt_type;
} fl_opt_hook_ctx;
typedef int (*fl_opt_hook_fn)(void *user, int phase, fl_opt_hook_ctx *ctx);
int fl__opt_set_hook(fl_opt *o, fl_opt_hook_fn fn, void *user);
/* A second hook, independent of the runtime's, called with phase BEFORE_BACKWARD (pairs
 * empty) before append_backward (forward-program rewrites such as AMP's casts), then with
 * AFTER_BACKWARD after the runtime's hook (AMP's loss scaling on reduced gradients), and
 * AFTER_UPDATE after the runtime's (AMP level O2's master-weight refresh). */
int fl__opt_set_pre_hook(fl_opt *o, fl_opt_hook_fn fn, void *user);
/* fleet_transpile: runs o's runtime hook (AFTER_BACKWARD, then AFTER_UPDATE) on p, which
 * minimize already built with o and no hook; the pairs are read back from p's update ops
 * of o's type.  No hook: nothing. */
int fl__opt_rehook(fl_opt *o, fl_prog *p);
/* AMP level O2 (amp_o2.c), from the pre-hook's AFTER_UPDATE phase: moves the forward casts
 * of float32 parameters to their low-precision copies after the update ops (optimizer
 * role), makes the copies persistable and casts them once in the startup program.
 * Returns how many moved, or a negative status. */
int fl__amp_o2_master_refresh(fl_prog *p);
/* Storage in the optimizer for fl_amp_decorate_optimizer's options (NULL for a bad handle). */
fl_amp_opts *fl__opt_amp_opts(fl_opt *o);

/* strategy.lars / strategy.lamb (src/fleet/meta_optim.c), as Paddle's meta optimizers: turn
 * a momentum optimizer into lars_momentum, an adam one into lamb, in place (same handle,
 * same learning rate, momentum or betas and epsilon, schedules and L2).  Another inner
 * optimizer is FL_EUNSUPPORTED naming it.  exclude: comma-separated names (or NULL). */
int fl__opt_to_lars(fl_opt *o, float lars_coeff, float lars_weight_decay, float epsilon, const char *exclude);
int fl__opt_to_lamb(fl_opt *o, float lamb_weight_decay, const char *exclude);

/* Op groups (each a NULL-terminated list), registered by graph/registry.c. */
extern const fl_op_def *const fl__ops_basic[];  /* ops_basic.c: fill, init, fc, sum, cross_entropy, mean */
extern const fl_op_def *const fl__ops_act[];    /* ops_act.c: relu, tanh, sigmoid, softsign, softmax */
extern const fl_op_def *const fl__ops_nn[];     /* ops_nn.c */
extern const fl_op_def *const fl__ops_seq[];    /* ops_seq.c: embedding, sequence_pool, concat, reshape */
extern const fl_op_def *const fl__ops_loss[];   /* ops_loss.c */
extern const fl_op_def *const fl__ops_metric[]; /* ops_metric.c */
extern const fl_op_def *const fl__ops_optim[];  /* ops_optim.c */
extern const fl_op_def *const fl__ops_conv[];   /* ops_conv.c: conv2d; ops_pool.c, ops_bn.c */
extern const fl_op_def *const fl__ops_extra[];  /* ops_extra.c: matmul, fill_constant_batch_size_like */
extern const fl_op_def *const fl__ops_math[];   /* ops_math.c: square, reduce_mean, dtype_cast */
extern const fl_op_def *const fl__ops_amp[];    /* amp.c: cast */
/* amp_scaling.c: scale_loss_grad, check_finite_and_unscale, update_loss_scaling */
extern const fl_op_def *const fl__ops_amp_scaling[];
extern const fl_op_def *const fl__ops_optim_lars[]; /* ops_optim_lars.c: lars_momentum, lamb */
extern const fl_op_def *const fl__ops_dgc[];        /* ops_dgc.c: dgc, dgc_momentum */
extern const fl_op_def *const fl__ops_nlp[], *const fl__ops_nlp_idx[], *const fl__ops_nlp_train[]; /* ops_nlp*.c */
/* ops_bcast.c: elementwise_max / min, comparisons, logical ops; ops_more.c: fill_constant's
 * layer, l2_normalize, top_k's gradient; ops_lr.c: piecewise and other schedules; ops_optim_more.c:
 * rmsprop, l1_decay */
extern const fl_op_def *const fl__ops_bcast[], *const fl__ops_more[], *const fl__ops_lr[], *const fl__ops_optim_more[];
extern const fl_op_def *const fl__ops_select[]; /* ops_select.c: where */
/* ops_deconv.c: conv2d_transpose; ops_seqconv.c: sequence_conv; ops_print.c: print */
extern const fl_op_def *const fl__ops_deconv[], *const fl__ops_seqconv[], *const fl__ops_print[];
/* ops_more.c: top_k's gradient maker (top_k_grad), named in ops_metric.c's top_k. */
int fl__grad_top_k(fl_op *op, fl_grad_ctx *g);
/* Learning-rate schedules (ops_nlp_train.c): begin appends schedule op `type` in the LR role
 * reading the step counter @LR_DECAY_COUNTER@ (made on first use, counting from begin) and
 * inner (NULL: none), writing *lr (float32 [1]) through output slot out_slot; the caller sets
 * attributes, then finish runs infer (bad: an attribute failed) and returns lr or NULL. */
fl_op *fl__lr_sched_begin(fl_prog *p, const char *type, int64_t begin, fl_var *inner, const char *out_slot, fl_var **lr);
fl_var *fl__lr_sched_finish(fl_prog *p, fl_op *op, fl_var *lr, int bad);
/* ops_optim_more.c: minimize's L1 decay (Paddle's L1Decay): each pair's gradient becomes
 * grad + (coeff + the parameter's l1_decay) * sign(param) (op l1_decay); nothing where that
 * sum is 0. */
int fl__l1_decay_apply(fl_prog *p, fl_param_grad *pairs, int n, float coeff);
/* ops_more.c: the startup op of a parameter initialised by FL_INIT_ASSIGN: assign_value of
 * value set `id` of sp's main program into sv (FL_EINVAL naming the parameter when the set
 * is not the program's or its size differs from the parameter's). */
int fl__init_assign_append(fl_prog *sp, fl_var *sv, uint64_t id);
/* Gradient clipping set on an optimizer (FL_CLIP_*; a: max / max_norm / clip_norm, b: min),
 * appended by minimize after backward (ops_nlp_train.c); the optimizer's fields. */
typedef struct {
    int kind;
    float a, b;
} fl_grad_clip;
int fl__grad_clip_apply(fl_prog *p, fl_param_grad *pairs, int n, const fl_grad_clip *c);
fl_grad_clip *fl__opt_clip(fl_opt *o);
fl_var **fl__opt_lr_var(fl_opt *o);

/* Shared by the update-op files (ops_optim.c defines them).  fl__optim_infer_update checks
 * an update op's Param, Grad, LearningRate and state slots (float32, the parameter's shape,
 * one element for slots named *Pow) and the l2 / lr_scale attributes.  fl__optim_target
 * returns the tensor output slot `o` updates in place (its input, or the output after a
 * copy of the input into it), checking float32 and `numel` (-1: any). */
int fl__optim_infer_update(fl_op *op);
int fl__optim_target(fl_kctx *c, int o, int64_t numel, fl_tensor **t);

#endif
