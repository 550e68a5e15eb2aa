/*
 * ops_optim.c - parameter update ops (sgd, momentum, adagrad, adam) on dense and
 * SelectedRows gradients, and the learning-rate schedule ops (increment,
 * exponential_decay).  Sparse updates are lazy: only rows present in the gradient change
 * (duplicate rows are merged first, so each row is updated once with its summed gradient).
 */
#include <math.h>
#include <string.h>

#include "graph_internal.h"

static int infer_update(fl_op *op)
{
    fl_var *w = op->in[0].vars[0], *g = op->in[1].vars[0], *lr = op->in[2].vars[0];
    if (w->dtype != FL_FLOAT32 || g->dtype != FL_FLOAT32) return fl__op_error(op, "parameter '%s' and gradient must be float32", w->name);
    if (!g->is_sparse_grad && !fl__shapes_equal(w, g)) return fl__op_error(op, "gradient '%s' shape differs from parameter '%s'", g->name, w->name);
    if (lr->dtype != FL_FLOAT32) return fl__op_error(op, "learning rate '%s' must be float32", lr->name);
    return FL_OK;
}

/* Merged view of a SelectedRows gradient: unique rows (sorted) and summed values. */
typedef struct {
    int64_t n, width;
    int64_t *rows;
    float *vals;
} merged_rows;

/* Per-op scratch: an index map sized to the parameter rows, and the merged rows. */
typedef struct {
    int64_t height, cap;
    int64_t *slot; /* row -> position+1 in the merged list, 0 = absent */
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

static int merge_rows(const fl_tensor *g, const fl_tensor *w, merged_rows *m, void **state)
{
    int64_t n = g->shape[0], width = w->numel / (w->shape[0] ? w->shape[0] : 1);
    if (g->numel != n * width) return fl__err(FL_EINVAL, "sparse gradient width %lld differs from parameter width %lld", (long long)(n ? g->numel / n : 0), (long long)width);
    if (g->height != w->shape[0]) return fl__err(FL_EINVAL, "sparse gradient height %lld differs from parameter rows %lld", (long long)g->height, (long long)w->shape[0]);
    scratch *s = *state;
    if (!s || s->height != w->shape[0]) {
        scratch_free(s);
        s = calloc(1, sizeof *s);
        if (!s || !(s->slot = calloc((size_t)w->shape[0] + 1, sizeof *s->slot))) {
            free(s);
            *state = NULL;
            return fl__err(FL_ENOMEM, "sparse update: out of memory");
        }
        s->height = w->shape[0];
        *state = s;
    }
    if (n > s->cap) {
        int64_t *nr = realloc(s->rows, (size_t)n * sizeof *nr);
        if (!nr) return fl__err(FL_ENOMEM, "sparse update: out of memory");
        s->rows = nr;
        float *nv = realloc(s->vals, (size_t)(n * width) * sizeof *nv);
        if (!nv) return fl__err(FL_ENOMEM, "sparse update: out of memory");
        s->vals = nv;
        s->cap = n;
    }
    int64_t u = 0;
    const float *gv = g->data;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = g->rows[i];
        if (!s->slot[r]) {
            s->slot[r] = ++u;
            s->rows[u - 1] = r;
            memcpy(s->vals + (u - 1) * width, gv + i * width, (size_t)width * sizeof(float));
        } else {
            fl__vaxpy(s->vals + (s->slot[r] - 1) * width, 1.0f, gv + i * width, width);
        }
    }
    for (int64_t i = 0; i < u; i++) s->slot[s->rows[i]] = 0;
    m->n = u;
    m->width = width;
    m->rows = s->rows;
    m->vals = s->vals;
    return FL_OK;
}

/* Iterates over (param row pointer, grad row pointer, state offset) for dense or sparse. */
#define UPDATE_PREP(c)                                                                                    \
    fl_tensor *w = FL_IN(c, 0), *g = FL_IN(c, 1);                                                         \
    float lr = ((float *)FL_IN(c, 2)->data)[0] * (float)fl__attr_f((c)->op, "lr_scale", 1.0);            \
    float l2 = (float)fl__attr_f((c)->op, "l2", 0.0);                                                    \
    merged_rows mr = {0, 0, NULL, NULL};                                                                  \
    if (g->is_rows) FL_CHECK(merge_rows(g, w, &mr, (c)->state));                                         \
    else if (g->numel != w->numel)                                                                        \
        return fl__err(FL_EINVAL, "%s: gradient has %lld elements, parameter %lld", (c)->op->def->type,  \
                       (long long)g->numel, (long long)w->numel);                                         \
    int64_t nseg = g->is_rows ? mr.n : 1, seg = g->is_rows ? mr.width : w->numel;

#define SEG_OFF(i) (g->is_rows ? mr.rows[i] * mr.width : 0)
#define SEG_GRAD(i) (g->is_rows ? mr.vals + (i) * mr.width : (const float *)g->data)

static int run_sgd(fl_kctx *c)
{
    UPDATE_PREP(c);
    for (int64_t i = 0; i < nseg; i++) {
        float *restrict p = (float *)w->data + SEG_OFF(i);
        const float *restrict gr = SEG_GRAD(i);
        if (l2 != 0.0f)
            for (int64_t j = 0; j < seg; j++) p[j] -= lr * (gr[j] + l2 * p[j]);
        else
            for (int64_t j = 0; j < seg; j++) p[j] -= lr * gr[j];
    }
    return FL_OK;
}

static const fl_op_def def_sgd = {"sgd", {"Param", "Grad", "LearningRate"}, {"ParamOut"}, infer_update, run_sgd, NULL, scratch_free};

/* ---- learning-rate schedule ---------------------------------------------------------------- */

static int infer_inc(fl_op *op)
{
    fl_var *x = op->in[0].vars[0];
    if (x->dtype != FL_INT64 && x->dtype != FL_FLOAT32) return fl__op_error(op, "'%s' must be int64 or float32", x->name);
    return FL_OK;
}

static int run_increment(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *y = FL_OUT(c, 0);
    double step = fl__attr_f(c->op, "step", 1.0);
    if (y != x) FL_CHECK(fl_tensor_copy(y, x));
    if (y->dtype == FL_INT64)
        ((int64_t *)y->data)[0] += (int64_t)step;
    else
        ((float *)y->data)[0] += (float)step;
    return FL_OK;
}

static int infer_decay(fl_op *op)
{
    if (op->in[0].vars[0]->dtype != FL_INT64) return fl__op_error(op, "step counter must be int64");
    return FL_OK;
}

static int run_exp_decay(fl_kctx *c)
{
    int64_t step = ((int64_t *)FL_IN(c, 0)->data)[0];
    double base = fl__attr_f(c->op, "learning_rate", 0.0), rate = fl__attr_f(c->op, "decay_rate", 1.0);
    double ds = (double)fl__attr_i(c->op, "decay_steps", 1), e = (double)step / ds;
    if (fl__attr_i(c->op, "staircase", 0)) e = floor(e);
    fl_tensor *lr = FL_OUT(c, 0);
    int64_t one = 1;
    FL_CHECK(fl__tensor_reshape_raw(lr, FL_FLOAT32, 1, &one));
    ((float *)lr->data)[0] = (float)(base * pow(rate, e));
    return FL_OK;
}

static const fl_op_def def_increment = {"increment", {"X"}, {"Out"}, infer_inc, run_increment, NULL};
static const fl_op_def def_exp_decay = {"exponential_decay", {"Step"}, {"LearningRate"}, infer_decay, run_exp_decay, NULL};

const fl_op_def *const fl__ops_optim[] = {&def_sgd, &def_increment, &def_exp_decay, NULL};
