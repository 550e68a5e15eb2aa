/*
 * amp.c - automatic mixed precision as a program rewrite (Paddle's static AMP "decorate").
 *
 * Level O1: the float32 inputs of white-listed ops get a cast op to bfloat16 or float16
 * inserted before them, so the op computes in low precision (with float32 accumulation and
 * a float32 output); every other op keeps float32.  Parameters stay float32 (master
 * weights): the cast reads the parameter each step, its gradient op turns the low-precision
 * product's gradient back into the parameter's float32 gradient, and the optimizer updates
 * the float32 parameter with float32 state.
 *
 * Level O2 (use_pure_fp16), in the same pass: a white op that can write low precision (fc,
 * matmul, matmul_v2) does so when a later op reads its output, gray ops with a kernel for
 * the type (relu, tanh, sigmoid) on a low-precision input stay in it, and every other op's
 * low-precision inputs are cast to float32 ("<var>.cast_fp32").  Activation gradients stay
 * float32.  The parameters' casts become the master-weight refresh after the update ops:
 * amp_o2.c.
 *
 * Also here: the cast op (attribute out_dtype; the input's dtype is whatever the tensor
 * holds at run time) and its gradient, which is a cast back.
 *
 * Loss scaling: bfloat16 has float32's exponent range, so gradients neither underflow nor
 * overflow more than in float32 and no loss scaling is done (Paddle and PyTorch do the
 * same for bf16).  float16 (max 65504, smallest normal 6e-5) gets dynamic loss scaling
 * with the step skipped on inf/NaN: amp_scaling.c, through fl_amp_decorate_optimizer.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

/* ---- cast ------------------------------------------------------------------------------ */

static int castable(fl_dtype t) { return t == FL_FLOAT32 || t == FL_BFLOAT16 || t == FL_FLOAT16; }

static int infer_cast(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_dtype to = (fl_dtype)fl__attr_i(op, "out_dtype", FL_FLOAT32);
    if (!castable(to))
        return fl__op_error(op, "out_dtype %s is not supported (float32, bfloat16 or float16)", fl_dtype_name(to));
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    if (!castable(x->dtype))
        return fl__op_error(op, "input '%s' is %s (float32, bfloat16 or float16)", x->name, fl_dtype_name(x->dtype));
    fl__var_set_shape(o, to, x->ndim, x->shape);
    o->lod_level = x->lod_level;
    return FL_OK;
}

/* One range of a cast's elements (fl__parallel_for: the values do not depend on the split). */
typedef struct {
    void *o;
    const void *x;
    fl_dtype to, from;
    atomic_int status;
} cast_job;

static void cast_range(void *arg, int64_t lo, int64_t hi)
{
    cast_job *j = arg;
    const size_t so = fl_dtype_size(j->to), sx = fl_dtype_size(j->from);
    int st = fl__cvt_any((char *)j->o + (size_t)lo * so, j->to, (const char *)j->x + (size_t)lo * sx, j->from, hi - lo);
    if (st != FL_OK) atomic_store(&j->status, st);
}

static int run_cast(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *o = FL_OUT(c, 0);
    fl_dtype to = (fl_dtype)fl__attr_i(c->op, "out_dtype", FL_FLOAT32);
    if (x->is_rows)
        return fl__err(FL_EUNSUPPORTED, "cast: input '%s' holds SelectedRows (only dense tensors are cast)",
                       fl__kctx_var_name(c, 0, 0));
    if (!castable(x->dtype) || !castable(to))
        return fl__err(FL_EINVAL, "cast: input '%s' is %s, out_dtype %s (float32, bfloat16 or float16)",
                       fl__kctx_var_name(c, 0, 0), fl_dtype_name(x->dtype), fl_dtype_name(to));
    FL_CHECK(fl__tensor_reshape_raw(o, to, x->ndim, x->shape));
    if (o->data != x->data) { /* split over the threads (FLEET_NUM_THREADS=2), 64 elements at least a part */
        cast_job j = {.o = o->data, .x = x->data, .to = to, .from = x->dtype};
        atomic_init(&j.status, FL_OK);
        fl__parallel_for(x->numel, 64, (int64_t)(fl_dtype_size(to) + fl_dtype_size(x->dtype)), cast_range, &j);
        FL_CHECK(atomic_load(&j.status));
    }
    return fl__tensor_share_lod(o, x);
}

/* The gradient ops of the products: they write every gradient in float32, whatever the
 * dtype its variable declares (mul_grad, matmul_grad, matmul_v2_grad, conv2d_grad). */
static int writes_f32_grads(const fl_op *op)
{
    const char *t = op->def->type;
    return !strcmp(t, "mul_grad") || !strcmp(t, "matmul_grad") || !strcmp(t, "matmul_v2_grad") || !strcmp(t, "conv2d_grad");
}

/* Makes the op that wrote v write `to` instead, when that op is a product's gradient and the
 * only op that touches v so far (v is the gradient of a cast's output: nothing else reads
 * it).  Returns 1 when done, 0 when the pattern does not hold. */
static int retarget_grad(fl_prog *p, const fl_var *v, fl_var *to)
{
    fl_op *w = NULL;
    int ws = 0, wk = 0;
    for (int i = 0; i < p->nops; i++) {
        fl_op *o = p->ops[i];
        if (o->cond == v) return 0;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++) {
            for (int k = 0; k < o->in[s].n; k++)
                if (o->in[s].vars[k] == v) return 0;
            for (int k = 0; k < o->out[s].n; k++)
                if (o->out[s].vars[k] == v) {
                    if (w) return 0;
                    w = o, ws = s, wk = k;
                }
        }
    }
    if (!w || !writes_f32_grads(w)) return 0;
    w->out[ws].vars[wk] = to;
    p->version++;
    return 1;
}

/* d(cast)/dx: the output's gradient cast to float32: the input is float32, or a low-precision
 * activation (level O2's cast to float32 in front of a black-list op) whose gradient stays
 * float32, as every activation gradient does (the products' gradient kernels write float32).
 * For a float32 input whose output feeds a product (level O1's casts of inputs and weights),
 * that cast would be a float32 copy of the product's gradient: the product's gradient op
 * writes the input's gradient variable directly instead, and no cast op is added. */
static int grad_cast(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dout = fl__grad_of(g, op->out[0].vars[0]);
    fl_var *dx = dout ? fl__grad_for(g, x) : NULL;
    if (!dx) return FL_OK;
    if (x->dtype == FL_FLOAT32 && !dout->persistable && retarget_grad(op->prog, dout, dx)) return FL_OK;
    fl_io in = FL_IO1("X", dout), out = FL_IO1("Out", dx);
    fl_op *gop = fl__op_new(op->prog, "cast", &in, 1, &out, 1);
    if (!gop) return fl_prog_status(op->prog);
    FL_CHECK(fl__attr_set_i(gop, "out_dtype", FL_FLOAT32));
    return fl__op_finish(gop);
}

static const fl_op_def def_cast = {"cast", {"X"}, {"Out"}, infer_cast, run_cast, grad_cast};

const fl_op_def *const fl__ops_amp[] = {&def_cast, NULL};

/* ---- the rewrite ------------------------------------------------------------------------ */

/* Paddle's AMP lists, one row per op: which list the op is on (Paddle's python/paddle/amp/
 * amp_lists.py and static fp16_lists.py), which of bfloat16 and float16 it computes in here,
 * and whether it can also write its output in that type (level O2; attribute out_dtype for
 * the products: float32 accumulation rounded once at the end).
 *
 * White ops (the products) get their float32 inputs cast to low precision (the first two
 * input slots: fc's Input and W, matmul's and matmul_v2's X and Y, conv2d's Input and
 * Filter).  conv2d has a bfloat16 kernel only (oneDNN's, src/tensor/dnn_conv.c) and writes
 * float32 (its output is cast where a later product reads it, as in O1).
 *
 * Gray ops follow their input: under level O2 a low-precision input keeps them in low
 * precision (values widened to float32 in blocks and rounded back), a float32 one in
 * float32; they are never cast to low precision and cannot be white-listed.  A gray row
 * without a kernel for the type (Paddle lets these follow their input; here their kernels
 * are float32 only) reads float32 through a cast under level O2, as a black op does; setting
 * its bf16 / fp16 column once its kernel takes that type makes it stay in the chain.
 *
 * Black ops (numerically sensitive: normalisations, softmax, the losses) and every op
 * with no row read float32: under level O2 a low-precision input gets a cast to float32
 * in front; under O1 no low-precision tensor reaches them (the products write float32).
 * Paddle's mul is the product this port's layers express as fc, so that name is accepted
 * in the lists as well.  To add an op: a row here, and for a bf16 / fp16 column its
 * infer/run honouring low-precision inputs (and out_dtype when low_out is set). */
enum { AMP_WHITE, AMP_GRAY, AMP_BLACK };
typedef struct {
    const char *type;
    unsigned char list, bf16, fp16, low_out;
} amp_kernel;
static const amp_kernel kernels[] = {
    {"fc", AMP_WHITE, 1, 1, 1},
    {"matmul", AMP_WHITE, 1, 1, 1},
    {"matmul_v2", AMP_WHITE, 1, 1, 1},
    {"conv2d", AMP_WHITE, 1, 0, 0},
    {"relu", AMP_GRAY, 1, 1, 1},
    {"tanh", AMP_GRAY, 1, 1, 1},
    {"sigmoid", AMP_GRAY, 1, 1, 1},
    {"gelu", AMP_GRAY, 0, 0, 0},
    {"transpose2", AMP_GRAY, 0, 0, 0},
    {"gather", AMP_GRAY, 0, 0, 0},
    {"slice", AMP_GRAY, 0, 0, 0},
    {"stack", AMP_GRAY, 0, 0, 0},
    {"split", AMP_GRAY, 0, 0, 0},
    {"expand", AMP_GRAY, 0, 0, 0},
    {"layer_norm", AMP_BLACK, 0, 0, 0},
    {"softmax", AMP_BLACK, 0, 0, 0},
    {"softmax_with_cross_entropy", AMP_BLACK, 0, 0, 0},
    {"label_smooth", AMP_BLACK, 0, 0, 0}, /* on no Paddle list; it makes the loss's soft labels */
};
static const char *const paddle_aliases[] = {"mul", NULL};

static const amp_kernel *kernel_of(fl_dtype dt, const char *type)
{
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if (!strcmp(kernels[i].type, type))
            return (dt == FL_FLOAT16 ? kernels[i].fp16 : kernels[i].bf16) ? &kernels[i] : NULL;
    return NULL;
}

static int is_product(fl_dtype dt, const char *type)
{
    const amp_kernel *k = kernel_of(dt, type);
    return k && k->list == AMP_WHITE;
}

/* The white ops with a kernel for dt, comma-separated, into buf. */
static const char *products_of(fl_dtype dt, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0] && at < n; i++)
        if (is_product(dt, kernels[i].type))
            at += (size_t)snprintf(buf + at, n - at, "%s%s", at ? ", " : "", kernels[i].type);
    return buf;
}

static int in_list(const char *const *l, const char *s)
{
    for (; *l; l++)
        if (!strcmp(*l, s)) return 1;
    return 0;
}

/* Whether `type` appears in the comma-separated list (spaces allowed around names). */
static int in_csv(const char *csv, const char *type)
{
    size_t n = strlen(type);
    for (const char *p = csv ? csv : ""; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > p && t[-1] == ' ') t--;
        if ((size_t)(t - p) == n && !strncmp(p, type, n)) return 1;
        p = e;
    }
    return 0;
}

/* Every name of the list is a known op; white-list names must have a bf16 kernel. */
static int check_list(fl_prog *p, const char *csv, const char *what, int white, fl_dtype dt)
{
    for (const char *q = csv ? csv : ""; *q;) {
        while (*q == ' ' || *q == ',') q++;
        const char *e = q;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > q && t[-1] == ' ') t--;
        char name[64];
        if (t > q) {
            snprintf(name, sizeof name, "%.*s", (int)(t - q), q);
            int alias = in_list(paddle_aliases, name);
            if (!alias && !fl__op_lookup(name))
                return fl__prog_error(p, FL_EINVAL, "fl_amp_decorate: %s names unknown op '%s'", what, name);
            char prods[256];
            if (white && !alias && !is_product(dt, name))
                return fl__prog_error(p, FL_EUNSUPPORTED,
                                      "fl_amp_decorate: %s names op '%s', which has no %s kernel (ops with one: %s, "
                                      "and Paddle's mul)",
                                      what, name, fl_dtype_name(dt), products_of(dt, prods, sizeof prods));
        }
        q = e;
    }
    return FL_OK;
}

static int is_white(const fl_amp_opts *o, const char *type)
{
    if (in_csv(o->custom_black_list, type)) return 0;
    /* Paddle's mul stands for fc here: black-listing it keeps fc in float32 */
    if (!strcmp(type, "fc"))
        for (int i = 0; paddle_aliases[i]; i++)
            if (in_csv(o->custom_black_list, paddle_aliases[i])) return 0;
    return is_product(o->dtype, type) || in_csv(o->custom_white_list, type);
}

/* The copy of v in dt (low precision, or float32 in front of an op without a low-precision
 * kernel under level O2), cast by a new op placed at index `at`. */
static fl_var *cast_before(fl_prog *p, fl_var *v, int at, fl_dtype dt)
{
    char nm[256];
    snprintf(nm, sizeof nm, "%s.cast_%s", v->name, dt == FL_FLOAT16 ? "fp16" : dt == FL_BFLOAT16 ? "bf16" : "fp32");
    fl_var *cv = fl_prog_var(p, nm);
    if (cv) return cv; /* a shared input: cast once, before its first reader */
    cv = fl__var_create(p, nm, dt, v->ndim, v->shape);
    if (!cv) return NULL;
    fl_io in = FL_IO1("X", v), out = FL_IO1("Out", cv);
    fl_op *op = fl__op_new(p, "cast", &in, 1, &out, 1);
    if (!op || fl__attr_set_i(op, "out_dtype", dt) || fl__op_finish(op)) return NULL;
    if (fl__prog_move_last_op(p, at) != FL_OK) return NULL;
    return cv;
}

/* Whether a forward op after index i reads v. */
static int read_after(const fl_prog *p, const fl_var *v, int i)
{
    for (int j = i + 1; j < p->nops; j++) {
        const fl_op *op = p->ops[j];
        if (op->role != FL_ROLE_FORWARD) continue;
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < op->in[s].n; k++)
                if (op->in[s].vars[k] == v) return 1;
    }
    return 0;
}

/* Level O2: whether op is a gray op (not black-listed) whose low-precision input another
 * op reads after it in low precision or float32 (not a fetched end of the chain). */
static int stays_low(const fl_amp_opts *o, const fl_op *op, int i)
{
    const amp_kernel *k = kernel_of(o->dtype, op->def->type);
    if (!k || k->list != AMP_GRAY || in_csv(o->custom_black_list, op->def->type)) return 0;
    const fl_var *x = op->in[0].vars[0];
    return x->dtype == o->dtype && read_after(op->prog, op->out[0].vars[0], i);
}

int fl_amp_decorate(fl_prog *p, const fl_amp_opts *opts)
{
    if (!p || p->magic != FL_PROG_MAGIC) return fl__err(FL_EINVAL, "fl_amp_decorate: program is NULL or invalid");
    if (p->status != FL_OK) return p->status;
    fl_amp_opts o;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    if (o.dtype == FL_FLOAT32) o.dtype = FL_BFLOAT16; /* the CPU default */
    if (o.dtype != FL_BFLOAT16 && o.dtype != FL_FLOAT16)
        return fl__prog_error(p, FL_EINVAL, "fl_amp_decorate: dtype %s is not a low-precision type (bfloat16 or float16)",
                              fl_dtype_name(o.dtype));
    /* learning-rate schedule ops (role LRSCHED, e.g. noam_decay's counter at the front) stay
     * float32 and are no sign that backward was appended */
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i]->role != FL_ROLE_FORWARD && p->ops[i]->role != FL_ROLE_LRSCHED)
            return fl__prog_error(p, FL_EINVAL,
                                  "fl_amp_decorate: op %d (%s) is a backward or optimizer op: decorate before "
                                  "fl_opt_minimize / append_backward",
                                  i, p->ops[i]->def->type);
    FL_CHECK(check_list(p, o.custom_white_list, "custom_white_list", 1, o.dtype));
    FL_CHECK(check_list(p, o.custom_black_list, "custom_black_list", 0, o.dtype));
    int done = 0;
    for (int i = 0; i < p->nops; i++) {
        fl_op *op = p->ops[i];
        if (op->cond || op->role == FL_ROLE_LRSCHED) continue;
        int changed = 0, white = is_white(&o, op->def->type);
        /* white ops: float32 inputs cast to low precision (fc: Input and W; the bias stays
         * float32).  Level O2, other ops (cast excepted): low-precision inputs cast to
         * float32, since they have no low-precision kernel here. */
        fl_dtype to = white ? o.dtype : FL_FLOAT32;
        int nslots = white ? 2 : FL_OP_MAX_SLOTS;
        if (!white && (!o.use_pure_fp16 || !strcmp(op->def->type, "cast"))) continue;
        if (!white && stays_low(&o, op, i)) { /* a gray op on a low-precision input */
            op->out[0].vars[0]->dtype = op->in[0].vars[0]->dtype;
            p->version++;
            continue;
        }
        for (int s = 0; s < nslots; s++)
            for (int k = 0; k < op->in[s].n; k++) {
                fl_var *v = op->in[s].vars[k];
                if (white ? v->dtype != FL_FLOAT32 : v->dtype != FL_BFLOAT16 && v->dtype != FL_FLOAT16) continue;
                int before = p->nops;
                fl_var *cv = cast_before(p, v, i, to);
                if (!cv) return fl_prog_status(p) ? fl_prog_status(p) : fl_last_status();
                if (p->nops > before) i++; /* the op moved one place down */
                op->in[s].vars[k] = cv;
                changed = 1;
            }
        const amp_kernel *kr = white ? kernel_of(o.dtype, op->def->type) : NULL;
        if (o.use_pure_fp16 && kr && kr->low_out && op->out[0].vars[0]->dtype != o.dtype &&
            read_after(p, op->out[0].vars[0], i)) {
            /* level O2: the output stays in low precision for the ops after it */
            FL_CHECK(fl__attr_set_i(op, "out_dtype", o.dtype));
            op->out[0].vars[0]->dtype = o.dtype;
            changed = 1;
        }
        if (changed) {
            p->version++;
            done += white;
        }
    }
    const char *dtn = o.dtype == FL_FLOAT16 ? "float16" : "bfloat16";
    if (done) FL_DEBUG(FL_SUB_GRAPH, "fl_amp_decorate: %d ops compute in %s", done, dtn);
    static atomic_int told, told16;
    if (done && o.dtype == FL_FLOAT16 && !fl__gemm_f16_native() && !atomic_exchange(&told16, 1))
        FL_INFO(FL_SUB_GRAPH,
                "AMP: no float16 matrix product here (%s): float16 products run in float32 on operands rounded to "
                "float16 (float16's numerics, not faster than float32)",
                fl__dnn_available() ? "oneDNN has no float16 matmul for this CPU (it needs avx512_core_fp16 or "
                                      "AMX-FP16), or FLEET_GEMM=openblas"
                                    : "this build has no oneDNN");
    if (done && o.dtype == FL_BFLOAT16 && !fl__gemm_bf16_native() && !atomic_exchange(&told, 1))
        FL_INFO(FL_SUB_GRAPH,
                "AMP: no bfloat16 instructions in use here (%s): bf16 products are emulated or "
                "widened to float32 and will not be faster than float32",
                fl__dnn_available() ? "this CPU has neither AVX512-BF16 nor AMX, or FLEET_GEMM=openblas"
                                    : "this build has no oneDNN");
    return done;
}
