/*
 * ops_optim.c - parameter update ops (sgd, momentum, adagrad, adam) on dense and
 * SelectedRows gradients, and the learning-rate schedule ops (increment,
 * exponential_decay).
 *
 * Every update op reads Param, Grad, LearningRate (plus its state) and writes ParamOut
 * (plus the state outputs).  minimize() binds each output to the matching input variable,
 * so the update runs in place; a program that binds another variable gets the input copied
 * there first and updated there.  Attributes shared by all update ops: l2 (grad += l2 *
 * param, before anything else, on the rows being updated only) and lr_scale (the
 * parameter's multiplier on LearningRate).
 *
 * Sparse (SelectedRows) updates are lazy: only rows present in the gradient change, the
 * parameter and its state alike; duplicate rows are merged (summed) first, so each row is
 * updated once.  This is Paddle's sparse sgd and adagrad, and its adam with lazy_mode=True.
 * Paddle's sparse momentum, and adam with lazy_mode=False, also decay the state of rows
 * absent from the gradient; Fleet does not, so a step costs O(rows touched) even for huge
 * embedding tables.  Adam's beta pow accumulators still advance once per step.
 *
 * Optimizer state (velocity, moments) is flushed to 0 when it falls below FLT_MIN
 * (fl__flush_tiny): the moments of dead units otherwise decay into subnormals, which x86
 * computes on a slow path; what this changes numerically is in docs/engine.md.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "graph_internal.h"

/* ---- build-time checks ------------------------------------------------------------------ */


/* Number of elements when all dims are known, -1 otherwise. */
static int64_t known_numel(const fl_var *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) {
        if (v->shape[i] < 0) return -1;
        n *= v->shape[i];
    }
    return n;
}

/* Input slot updated into output slot `o`: ParamOut <- Param, then each state output <- the
 * state input of the same rank (inputs 3.., after Param, Grad, LearningRate). */
static int in_slot_of_out(int o) { return o == 0 ? 0 : o + 2; }

int fl__optim_infer_update(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *w = op->in[0].vars[0], *g = op->in[1].vars[0], *lr = op->in[2].vars[0];
    char ws[96], vs[96];
    if (w->dtype != FL_FLOAT32 || g->dtype != FL_FLOAT32)
        return fl__op_error(op, "parameter '%s' and gradient '%s' must be float32", w->name, g->name);
    if (!g->is_sparse_grad && !fl__shapes_equal(w, g)) {
        fl__shape_str(w, ws, sizeof ws);
        fl__shape_str(g, vs, sizeof vs);
        return fl__op_error(op, "gradient '%s' shape %s differs from parameter '%s' shape %s", g->name, vs, w->name, ws);
    }
    if (lr->dtype != FL_FLOAT32 || known_numel(lr) > 1 || known_numel(lr) == 0)
        return fl__op_error(op, "learning rate '%s' must be a float32 with one element", lr->name);
    /* state inputs: float32, the parameter's shape, except the one-element beta pows */
    for (int s = 3; s < FL_OP_MAX_SLOTS && op->def->in_names[s]; s++) {
        fl_var *v = op->in[s].vars[0];
        const char *slot = op->def->in_names[s];
        if (v->dtype != FL_FLOAT32)
            return fl__op_error(op, "%s '%s' of parameter '%s' must be float32", slot, v->name, w->name);
        if (strstr(slot, "Pow")) {
            if (known_numel(v) != 1)
                return fl__op_error(op, "%s '%s' of parameter '%s' must hold one element", slot, v->name, w->name);
        } else if (!fl__shapes_equal(v, w)) {
            fl__shape_str(w, ws, sizeof ws);
            fl__shape_str(v, vs, sizeof vs);
            return fl__op_error(op, "%s '%s' has shape %s, parameter '%s' has %s", slot, v->name, vs, w->name, ws);
        }
    }
    for (int o = 0; o < FL_OP_MAX_SLOTS && op->def->out_names[o]; o++) {
        fl_var *ov = op->out[o].vars[0], *iv = op->in[in_slot_of_out(o)].vars[0];
        if (ov != iv) fl__var_set_shape(ov, iv->dtype, iv->ndim, iv->shape);
    }
    double l2 = fl__attr_f(op, "l2", 0.0), scale = fl__attr_f(op, "lr_scale", 1.0);
    if (!(l2 >= 0.0) || !isfinite(l2))
        return fl__op_error(op, "L2 coefficient of parameter '%s' must be finite and >= 0, got %g", w->name, l2);
    if (!isfinite(scale)) return fl__op_error(op, "lr_scale of parameter '%s' must be finite, got %g", w->name, scale);
    return FL_OK;
}

static int infer_momentum(fl_op *op)
{
    FL_CHECK(fl__optim_infer_update(op));
    double mu = fl__attr_f(op, "mu", 0.0);
    if (!isfinite(mu)) return fl__op_error(op, "mu of parameter '%s' must be finite, got %g", op->in[0].vars[0]->name, mu);
    return FL_OK;
}

static int infer_adagrad(fl_op *op)
{
    FL_CHECK(fl__optim_infer_update(op));
    double eps = fl__attr_f(op, "epsilon", 1e-6);
    if (!(eps >= 0.0) || !isfinite(eps))
        return fl__op_error(op, "epsilon of parameter '%s' must be finite and >= 0, got %g", op->in[0].vars[0]->name, eps);
    return FL_OK;
}

static int infer_adam(fl_op *op)
{
    FL_CHECK(fl__optim_infer_update(op));
    const char *w = op->in[0].vars[0]->name;
    double b1 = fl__attr_f(op, "beta1", 0.9), b2 = fl__attr_f(op, "beta2", 0.999), eps = fl__attr_f(op, "epsilon", 1e-8);
    if (!(b1 >= 0.0 && b1 < 1.0)) return fl__op_error(op, "beta1 of parameter '%s' must be in [0, 1), got %g", w, b1);
    if (!(b2 >= 0.0 && b2 < 1.0)) return fl__op_error(op, "beta2 of parameter '%s' must be in [0, 1), got %g", w, b2);
    if (!(eps >= 0.0) || !isfinite(eps))
        return fl__op_error(op, "epsilon of parameter '%s' must be finite and >= 0, got %g", w, eps);
    return FL_OK;
}

/* ---- SelectedRows gradients ---------------------------------------------------------------- */

/* Merged view of a SelectedRows gradient: unique rows (in order of first appearance) and
 * their summed values. */
typedef struct {
    int64_t n, width;
    int64_t *rows;
    float *vals;
} merged_rows;

/* Per-op scratch: an index map sized to the parameter rows, and the merged rows. */
typedef struct {
    int64_t height, cap;
    int64_t *slot; /* row -> position+1 in the merged list, 0 = absent (all 0 between calls) */
    int64_t *rows;
    float *vals;
} scratch;

static void scratch_free(void *p)
{
    scratch *s = p;
    if (!s) return;
    free(s->slot);
    free(s->rows);
    free(s->vals);
    free(s);
}

static int merge_rows(const char *type, const char *wname, const fl_tensor *g, const fl_tensor *w, merged_rows *m,
                      void **state)
{
    if (w->ndim < 1)
        return fl__err(FL_EINVAL, "%s: parameter '%s' is a scalar; it cannot take a sparse gradient", type, wname);
    int64_t n = g->shape[0], width = w->numel / (w->shape[0] ? w->shape[0] : 1);
    if (g->numel != n * width)
        return fl__err(FL_EINVAL, "%s: sparse gradient width %lld differs from parameter '%s' width %lld", type,
                       (long long)(n ? g->numel / n : 0), wname, (long long)width);
    if (g->height != w->shape[0])
        return fl__err(FL_EINVAL, "%s: sparse gradient height %lld differs from parameter '%s' rows %lld", type,
                       (long long)g->height, wname, (long long)w->shape[0]);
    scratch *s = *state;
    if (!s || s->height != w->shape[0]) {
        scratch_free(s);
        s = calloc(1, sizeof *s);
        if (!s || !(s->slot = calloc((size_t)w->shape[0] + 1, sizeof *s->slot))) {
            free(s);
            *state = NULL;
            return fl__err(FL_ENOMEM, "%s: out of memory merging the sparse gradient of '%s'", type, wname);
        }
        s->height = w->shape[0];
        *state = s;
    }
    if (n > s->cap) {
        int64_t *nr = realloc(s->rows, (size_t)n * sizeof *nr);
        if (!nr) return fl__err(FL_ENOMEM, "%s: out of memory merging the sparse gradient of '%s'", type, wname);
        s->rows = nr;
        float *nv = realloc(s->vals, (size_t)(n * width + 1) * sizeof *nv);
        if (!nv) return fl__err(FL_ENOMEM, "%s: out of memory merging the sparse gradient of '%s'", type, wname);
        s->vals = nv;
        s->cap = n;
    }
    int64_t u = 0, bad = -1;
    const float *gv = g->data;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = g->rows[i];
        if (r < 0 || r >= s->height) {
            bad = i;
            break;
        }
        if (!s->slot[r]) {
            s->slot[r] = ++u;
            s->rows[u - 1] = r;
            memcpy(s->vals + (u - 1) * width, gv + i * width, (size_t)width * sizeof(float));
        } else {
            fl__vaxpy(s->vals + (s->slot[r] - 1) * width, 1.0f, gv + i * width, width);
        }
    }
    for (int64_t i = 0; i < u; i++) s->slot[s->rows[i]] = 0;
    if (bad >= 0)
        return fl__err(FL_EINVAL, "%s: sparse gradient row #%lld is %lld, out of range [0, %lld) of parameter '%s'", type,
                       (long long)bad, (long long)g->rows[bad], (long long)s->height, wname);
    m->n = u;
    m->width = width;
    m->rows = s->rows;
    m->vals = s->vals;
    return FL_OK;
}

/* ---- shared run-time preparation ---------------------------------------------------------- */

/* One update: the parameter tensor written, the effective rate and L2 coefficient, and the
 * gradient as segments: dense = one segment of numel; sparse = one per merged row. */
typedef struct {
    fl_tensor *w;
    float lr, l2;
    int64_t nseg, seg;
    const int64_t *rows; /* merged row ids, NULL when dense */
    const float *gv;     /* nseg * seg gradient values */
} update;

static inline int64_t seg_off(const update *u, int64_t i) { return u->rows ? u->rows[i] * u->seg : 0; }

/* The tensor output slot `o` updates in place: its input, or the output after a copy of the
 * input into it when the program binds a different variable.  Checks dtype and size. */
int fl__optim_target(fl_kctx *c, int o, int64_t numel, fl_tensor **t)
{
    int si = in_slot_of_out(o);
    fl_tensor *in = FL_IN(c, si), *out = FL_OUT(c, o);
    const fl_op *op = c->op;
    const char *name = op->in[si].vars[0]->name;
    if (in->dtype != FL_FLOAT32 || (numel >= 0 && in->numel != numel))
        return fl__err(FL_EINVAL, "%s: %s '%s' holds %s with %lld elements, expected float32 with %lld (parameter '%s')",
                       op->def->type, op->def->in_names[si], name, fl_dtype_name(in->dtype), (long long)in->numel,
                       (long long)numel, op->in[0].vars[0]->name);
    if (out && out != in) FL_CHECK(fl_tensor_copy(out, in));
    *t = out ? out : in;
    return FL_OK;
}

static int prep(fl_kctx *c, update *u)
{
    const fl_op *op = c->op;
    const char *type = op->def->type, *wname = op->in[0].vars[0]->name;
    fl_tensor *g = FL_IN(c, 1), *lr = FL_IN(c, 2);
    FL_CHECK(fl__optim_target(c, 0, -1, &u->w));
    if (g->dtype != FL_FLOAT32)
        return fl__err(FL_EINVAL, "%s: gradient of parameter '%s' must be float32, got %s", type, wname,
                       fl_dtype_name(g->dtype));
    if (lr->dtype != FL_FLOAT32 || lr->numel < 1)
        return fl__err(FL_EINVAL, "%s: learning rate '%s' must be a float32 with one element", type,
                       op->in[2].vars[0]->name);
    u->lr = ((const float *)lr->data)[0] * (float)fl__attr_f(op, "lr_scale", 1.0);
    u->l2 = (float)fl__attr_f(op, "l2", 0.0);
    if (g->is_rows) {
        merged_rows mr = {0, 0, NULL, NULL};
        FL_CHECK(merge_rows(type, wname, g, u->w, &mr, c->state));
        u->nseg = mr.n;
        u->seg = mr.width;
        u->rows = mr.rows;
        u->gv = mr.vals;
    } else {
        if (g->numel != u->w->numel)
            return fl__err(FL_EINVAL, "%s: gradient has %lld elements, parameter '%s' %lld", type, (long long)g->numel,
                           wname, (long long)u->w->numel);
        u->nseg = 1;
        u->seg = u->w->numel;
        u->rows = NULL;
        u->gv = g->data;
    }
    return FL_OK;
}

/* ---- the update kernels (g below is the gradient plus l2 * param) ---------------------------- */

/* param -= lr * g */
static int run_sgd(fl_kctx *c)
{
    update u;
    FL_CHECK(prep(c, &u));
    for (int64_t i = 0; i < u.nseg; i++)
        fl__sgd_seg((float *)u.w->data + seg_off(&u, i), u.gv + i * u.seg, u.seg, u.lr, u.l2);
    return FL_OK;
}

/* One dense momentum update, split over the threads by elements (each element's update is
 * the same whichever thread makes it). */
typedef struct {
    float *p, *v;
    const float *g;
    float lr, l2, mu;
    int nesterov;
} momentum_job;

static void momentum_range(void *arg, int64_t lo, int64_t hi)
{
    const momentum_job *j = arg;
    fl__momentum_seg(j->p + lo, j->v + lo, j->g + lo, hi - lo, j->lr, j->l2, j->mu, j->nesterov);
}

/* Paddle's momentum: velocity = mu * velocity + g; param -= lr * velocity, or with Nesterov
 * param -= lr * (g + mu * velocity) using the new velocity. */
static int run_momentum(fl_kctx *c)
{
    update u;
    fl_tensor *vt;
    FL_CHECK(prep(c, &u));
    FL_CHECK(fl__optim_target(c, 1, u.w->numel, &vt));
    const float lr = u.lr, l2 = u.l2, mu = (float)fl__attr_f(c->op, "mu", 0.0);
    const int nesterov = fl__attr_i(c->op, "use_nesterov", 0) != 0;
    if (!u.rows) { /* dense: param, velocity and gradient read and written once (5 floats an element) */
        momentum_job j = {u.w->data, vt->data, u.gv, lr, l2, mu, nesterov};
        fl__parallel_for(u.seg, 16, 5 * (int64_t)sizeof(float), momentum_range, &j);
        return FL_OK;
    }
    for (int64_t i = 0; i < u.nseg; i++)
        fl__momentum_seg((float *)u.w->data + seg_off(&u, i), (float *)vt->data + seg_off(&u, i), u.gv + i * u.seg, u.seg,
                         lr, l2, mu, nesterov);
    return FL_OK;
}

/* Paddle's adagrad: moment += g * g; param -= lr * g / (sqrt(moment) + epsilon). */
static int run_adagrad(fl_kctx *c)
{
    update u;
    fl_tensor *mt;
    FL_CHECK(prep(c, &u));
    FL_CHECK(fl__optim_target(c, 1, u.w->numel, &mt));
    const float lr = u.lr, l2 = u.l2, eps = (float)fl__attr_f(c->op, "epsilon", 1e-6);
    for (int64_t i = 0; i < u.nseg; i++)
        fl__adagrad_seg((float *)u.w->data + seg_off(&u, i), (float *)mt->data + seg_off(&u, i), u.gv + i * u.seg, u.seg,
                        lr, l2, eps);
    return FL_OK;
}

/* Hogwild trainer threads (fl_exe_train_from_dataset) share each parameter with its moments
 * and beta pows.  SGD, Momentum and Adagrad take their step from the thread's own gradient
 * and state values, so a lost update between threads only loses a little progress.  Adam
 * does not tolerate it: its step is m1 / sqrt(m2), and a thread that reads one moment
 * after another thread's store and the other before it (the other thread's gradient in m1,
 * not yet its square in m2) divides by a near-zero m2 - early in training, or on an
 * embedding row touched for the first time, the step is then lr_t * m1 / epsilon_t, up to
 * 10^8 times too large, and the run diverges.  So one Adam update at a time per parameter:
 * a lock of a small striped set chosen by the parameter's address (as the auc op's
 * statistics, ops_metric.c); the moments and the pows then always describe whole steps,
 * and the pows advance exactly once per update.  Uncontended (one thread) it costs a lock
 * and an unlock per parameter per step. */
static pthread_mutex_t adam_locks[16] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};

/* Paddle's adam op (Paddle 2.x form, epsilon scaled by the bias correction of moment2):
 *   lr_t = lr * sqrt(1 - beta2_pow) / (1 - beta1_pow)
 *   m1 = beta1 * m1 + (1 - beta1) * g;  m2 = beta2 * m2 + (1 - beta2) * g * g
 *   param -= lr_t * m1 / (sqrt(m2) + epsilon * sqrt(1 - beta2_pow))
 *   beta1_pow *= beta1;  beta2_pow *= beta2   (once per step, also for sparse gradients)
 * With attribute weight_decay wd > 0 (fl_opt_set_weight_decay), param -= lr * wd * param too.
 * The pow accumulators start at beta1 and beta2 (optimizer.c), so step t uses beta^t. */
static int run_adam_locked(fl_kctx *c, update *up);

static int run_adam(fl_kctx *c)
{
    update u;
    FL_CHECK(prep(c, &u));
    pthread_mutex_t *mu = &adam_locks[((uintptr_t)FL_IN(c, 0)->data >> 6) % 16];
    pthread_mutex_lock(mu);
    int st = run_adam_locked(c, &u);
    pthread_mutex_unlock(mu);
    return st;
}

static int run_adam_locked(fl_kctx *c, update *up)
{
    update u = *up;
    fl_tensor *m1t, *m2t, *p1t, *p2t;
    FL_CHECK(fl__optim_target(c, 1, u.w->numel, &m1t));
    FL_CHECK(fl__optim_target(c, 2, u.w->numel, &m2t));
    FL_CHECK(fl__optim_target(c, 3, 1, &p1t));
    FL_CHECK(fl__optim_target(c, 4, 1, &p2t));
    const double b1 = fl__attr_f(c->op, "beta1", 0.9), b2 = fl__attr_f(c->op, "beta2", 0.999);
    const double eps = fl__attr_f(c->op, "epsilon", 1e-8);
    const float pw1 = ((float *)p1t->data)[0], pw2 = ((float *)p2t->data)[0];
    fl__adam_coef k;
    if (fl__adam_coef_init(&k, u.lr, u.l2, b1, b2, eps, pw1, pw2))
        return fl__err(FL_EINVAL, "adam: beta pow accumulators of parameter '%s' must be in [0, 1), got %g and %g",
                       c->op->in[0].vars[0]->name, (double)pw1, (double)pw2);
    /* decoupled weight decay (BERT's recipe): param -= lr * weight_decay * param before the
     * step, the same as subtracting it from the updated value (the Adam step does not read
     * param); sparse gradients decay only their rows */
    const double wd = fl__attr_f(c->op, "weight_decay", 0.0);
    if (wd > 0) {
        const float keep = (float)(1.0 - (double)u.lr * wd);
        for (int64_t i = 0; i < u.nseg; i++) {
            float *w = (float *)u.w->data + seg_off(&u, i);
            for (int64_t j = 0; j < u.seg; j++) w[j] *= keep;
        }
    }
    for (int64_t i = 0; i < u.nseg; i++)
        fl__adam_seg((float *)u.w->data + seg_off(&u, i), (float *)m1t->data + seg_off(&u, i),
                     (float *)m2t->data + seg_off(&u, i), u.gv + i * u.seg, u.seg, &k);
    ((float *)p1t->data)[0] = fl__adam_pow_next(pw1, b1);
    ((float *)p2t->data)[0] = fl__adam_pow_next(pw2, b2);
    return FL_OK;
}

/* clang-format off */
static const fl_op_def def_sgd = {
    "sgd", {"Param", "Grad", "LearningRate"}, {"ParamOut"}, fl__optim_infer_update, run_sgd, NULL, scratch_free};
static const fl_op_def def_momentum = {
    "momentum", {"Param", "Grad", "LearningRate", "Velocity"}, {"ParamOut", "VelocityOut"},
    infer_momentum, run_momentum, NULL, scratch_free};
static const fl_op_def def_adagrad = {
    "adagrad", {"Param", "Grad", "LearningRate", "Moment"}, {"ParamOut", "MomentOut"},
    infer_adagrad, run_adagrad, NULL, scratch_free};
static const fl_op_def def_adam = {
    "adam", {"Param", "Grad", "LearningRate", "Moment1", "Moment2", "Beta1Pow", "Beta2Pow"},
    {"ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"}, infer_adam, run_adam, NULL, scratch_free};
/* clang-format on */

/* ---- learning-rate schedule ---------------------------------------------------------------- */

static int infer_inc(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0], *y = op->out[0].vars[0];
    if (x->dtype != FL_INT64 && x->dtype != FL_FLOAT32) return fl__op_error(op, "'%s' must be int64 or float32", x->name);
    if (known_numel(x) != 1) return fl__op_error(op, "counter '%s' must hold one element", x->name);
    if (y != x) fl__var_set_shape(y, x->dtype, x->ndim, x->shape);
    return FL_OK;
}

static int run_increment(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *y = FL_OUT(c, 0);
    double step = fl__attr_f(c->op, "step", 1.0);
    if ((x->dtype != FL_INT64 && x->dtype != FL_FLOAT32) || x->numel < 1)
        return fl__err(FL_EINVAL, "increment: counter '%s' must be an int64 or float32 with one element",
                       c->op->in[0].vars[0]->name);
    if (y != x) FL_CHECK(fl_tensor_copy(y, x));
    if (y->dtype == FL_INT64) ((int64_t *)y->data)[0] += (int64_t)step;
    else ((float *)y->data)[0] += (float)step;
    return FL_OK;
}

static int infer_decay(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *step = op->in[0].vars[0], *lr = op->out[0].vars[0];
    if (step->dtype != FL_INT64) return fl__op_error(op, "step counter '%s' must be int64", step->name);
    if (lr->dtype != FL_FLOAT32) return fl__op_error(op, "learning rate '%s' must be float32", lr->name);
    int64_t ds = fl__attr_i(op, "decay_steps", 1);
    double rate = fl__attr_f(op, "decay_rate", 1.0);
    if (ds <= 0) return fl__op_error(op, "decay_steps must be > 0, got %lld", (long long)ds);
    if (!(rate > 0.0) || !isfinite(rate)) return fl__op_error(op, "decay_rate must be finite and > 0, got %g", rate);
    return FL_OK;
}

/* Paddle's exponential_decay: lr = learning_rate * decay_rate^(step / decay_steps), the
 * exponent floor()ed with staircase; step is the counter before this run's increment. */
static int run_exp_decay(fl_kctx *c)
{
    const fl_tensor *st = FL_IN(c, 0);
    if (st->dtype != FL_INT64 || st->numel < 1)
        return fl__err(FL_EINVAL, "exponential_decay: step counter '%s' must be an int64 with one element",
                       c->op->in[0].vars[0]->name);
    int64_t step = ((const int64_t *)st->data)[0];
    double base = fl__attr_f(c->op, "learning_rate", 0.0), rate = fl__attr_f(c->op, "decay_rate", 1.0);
    double ds = (double)fl__attr_i(c->op, "decay_steps", 1), e = (double)step / ds;
    if (fl__attr_i(c->op, "staircase", 0)) e = floor(e);
    fl_tensor *lr = FL_OUT(c, 0);
    int64_t one = 1;
    FL_CHECK(fl__tensor_reshape_raw(lr, FL_FLOAT32, 1, &one));
    ((float *)lr->data)[0] = (float)(base * pow(rate, e));
    return FL_OK;
}

static int infer_cosine(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *step = op->in[0].vars[0], *lr = op->out[0].vars[0];
    if (step->dtype != FL_INT64) return fl__op_error(op, "step counter '%s' must be int64", step->name);
    if (lr->dtype != FL_FLOAT32) return fl__op_error(op, "learning rate '%s' must be float32", lr->name);
    int64_t se = fl__attr_i(op, "step_each_epoch", 1), ep = fl__attr_i(op, "epochs", 1);
    if (se <= 0 || ep <= 0)
        return fl__op_error(op, "step_each_epoch and epochs must be > 0, got %lld and %lld", (long long)se, (long long)ep);
    return FL_OK;
}

/* Paddle's cosine_decay: lr = learning_rate * 0.5 * (cos(epoch * pi / epochs) + 1), epoch =
 * floor(step / step_each_epoch), step the counter before this run's increment. */
static int run_cosine(fl_kctx *c)
{
    const fl_tensor *st = FL_IN(c, 0);
    if (st->dtype != FL_INT64 || st->numel < 1)
        return fl__err(FL_EINVAL, "cosine_decay: step counter '%s' must be an int64 with one element",
                       c->op->in[0].vars[0]->name);
    int64_t step = ((const int64_t *)st->data)[0];
    double base = fl__attr_f(c->op, "learning_rate", 0.0);
    double epoch = floor((double)step / (double)fl__attr_i(c->op, "step_each_epoch", 1));
    double epochs = (double)fl__attr_i(c->op, "epochs", 1);
    fl_tensor *lr = FL_OUT(c, 0);
    int64_t one = 1;
    FL_CHECK(fl__tensor_reshape_raw(lr, FL_FLOAT32, 1, &one));
    ((float *)lr->data)[0] = (float)(base * 0.5 * (cos(epoch * M_PI / epochs) + 1.0));
    return FL_OK;
}

static const fl_op_def def_increment = {"increment", {"X"}, {"Out"}, infer_inc, run_increment, NULL};
static const fl_op_def def_cosine = {"cosine_decay", {"Step"}, {"LearningRate"}, infer_cosine, run_cosine, NULL};
static const fl_op_def def_exp_decay = {"exponential_decay", {"Step"}, {"LearningRate"}, infer_decay, run_exp_decay, NULL};

const fl_op_def *const fl__ops_optim[] = {&def_sgd,       &def_momentum,  &def_adagrad, &def_adam,
                                          &def_increment, &def_exp_decay, &def_cosine,  NULL};
