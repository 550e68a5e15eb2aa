/*
 * ops_metric.c - evaluation metrics (no gradients), Paddle fluid semantics:
 *
 *   top_k     X [.., C] -> Out [.., k] (largest values, descending), Indices int64 [.., k]
 *   accuracy  Out, Indices [N, k] (from top_k), Label int64 [N, 1]
 *             -> Accuracy float32 [1], Correct int64 [1], Total int64 [1]
 *   auc       Predict [N, 2], Label int64 [N, 1], StatPos/StatNeg int64 state
 *             -> AUC float64 [1], StatPosOut/StatNegOut (the state, updated in place)
 *
 * fl_layer_accuracy = top_k + accuracy (as fluid.layers.accuracy); fl_layer_auc = two auc
 * ops, one over a sliding window of batches and one global (as fluid.layers.auc).
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"


/* Checks an int64 label var of shape [N, 1] whose N matches x's dim 0 when both are known. */
static int check_label_col(fl_op *op, const fl_var *x, const fl_var *label)
{
    char xs[96], ls[96];
    fl__shape_str(x, xs, sizeof xs);
    fl__shape_str(label, ls, sizeof ls);
    if (label->dtype != FL_INT64)
        return fl__op_error(op, "label '%s' must be int64, is %s", label->name, fl_dtype_name(label->dtype));
    if (label->ndim != 2 || label->shape[1] != 1)
        return fl__op_error(op, "label '%s' %s must have shape [N, 1]", label->name, ls);
    if (x->ndim > 0 && x->shape[0] >= 0 && label->shape[0] >= 0 && x->shape[0] != label->shape[0])
        return fl__op_error(op, "label '%s' %s does not have as many rows as input '%s' %s", label->name, ls, x->name, xs);
    return FL_OK;
}

static void set_shape1(fl_var *v, fl_dtype dt)
{
    int64_t one = 1;
    fl__var_set_shape(v, dt, 1, &one);
}

static int resize1(fl_tensor *t, fl_dtype dt)
{
    int64_t one = 1;
    return fl__tensor_reshape_raw(t, dt, 1, &one);
}

/* ---- top_k ---------------------------------------------------------------------------------
 * Paddle's top_k over the last axis: Out holds the k largest values of each row in
 * descending order, Indices their positions (int64).  Equal values keep their order (the
 * lower index first); NaN never ranks above a number.  Selection is an insertion into the
 * sorted k-prefix, O(C k) per row (k is small for metrics). */

static int infer_top_k(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0];
    int64_t k = fl__attr_i(op, "k", 1);
    char xs[96];
    fl__shape_str(x, xs, sizeof xs);
    if (x->dtype != FL_FLOAT32)
        return fl__op_error(op, "input '%s' must be float32, is %s", x->name, fl_dtype_name(x->dtype));
    if (x->ndim < 1) return fl__op_error(op, "input '%s' must have rank >= 1", x->name);
    if (k < 1) return fl__op_error(op, "attribute k must be >= 1, got %lld", (long long)k);
    int64_t c = x->shape[x->ndim - 1];
    if (c >= 0 && k > c)
        return fl__op_error(op, "k = %lld exceeds the last dimension of input '%s' %s", (long long)k, x->name, xs);
    int64_t sh[FL_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) sh[d] = x->shape[d];
    sh[x->ndim - 1] = k;
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, x->ndim, sh);
    fl__var_set_shape(op->out[1].vars[0], FL_INT64, x->ndim, sh);
    op->out[0].vars[0]->lod_level = op->out[1].vars[0]->lod_level = x->lod_level;
    return FL_OK;
}

/* a ranks above b: larger, or a number against NaN. */
static inline int ranks_above(float a, float b) { return a > b || (b != b && a == a); }

static int run_top_k(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *out = FL_OUT(c, 0), *idx = FL_OUT(c, 1);
    int64_t k = fl__attr_i(c->op, "k", 1);
    if (x->dtype != FL_FLOAT32 || x->ndim < 1) return fl__err(FL_EINVAL, "top_k: input must be float32 of rank >= 1");
    int64_t cls = x->shape[x->ndim - 1];
    if (k < 1 || k > cls)
        return fl__err(FL_EINVAL, "top_k: k = %lld out of range [1, %lld] (last dimension of input '%s')", (long long)k,
                       (long long)cls, c->op->in[0].vars[0]->name);
    int64_t m = x->numel / cls, sh[FL_MAX_DIMS];
    memcpy(sh, x->shape, sizeof sh);
    sh[x->ndim - 1] = k;
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, x->ndim, sh));
    FL_CHECK(fl__tensor_reshape_raw(idx, FL_INT64, x->ndim, sh));
    FL_CHECK(fl__tensor_share_lod(out, x));
    FL_CHECK(fl__tensor_share_lod(idx, x));
    const float *xd = x->data;
    float *vo = out->data;
    int64_t *io = idx->data;
    for (int64_t i = 0; i < m; i++) {
        const float *xr = xd + i * cls;
        float *v = vo + i * k;
        int64_t *ix = io + i * k, n = 0;
        for (int64_t j = 0; j < cls; j++) {
            float val = xr[j];
            if (n == k && !ranks_above(val, v[k - 1])) continue;
            int64_t pos = n < k ? n : k - 1; /* the last slot is dropped when full */
            while (pos > 0 && ranks_above(val, v[pos - 1])) {
                v[pos] = v[pos - 1];
                ix[pos] = ix[pos - 1];
                pos--;
            }
            v[pos] = val;
            ix[pos] = j;
            if (n < k) n++;
        }
    }
    return FL_OK;
}

/* The gradient (to X, through Out) is ops_more.c's top_k_grad. */
static const fl_op_def def_top_k = {"top_k", {"X"}, {"Out", "Indices"}, infer_top_k, run_top_k, fl__grad_top_k, NULL};

/* ---- accuracy ------------------------------------------------------------------------------
 * Paddle: a row is correct when its label is among its k top indices.  Accuracy =
 * Correct / Total (0 for an empty batch), Total = N.  Fluid 1.x creates Correct and Total
 * as int64.  Labels outside [0, C) are simply never correct (as Paddle). */

static int infer_accuracy(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *v = op->in[0].vars[0], *ix = op->in[1].vars[0], *label = op->in[2].vars[0];
    char is[96], vs[96];
    fl__shape_str(ix, is, sizeof is);
    fl__shape_str(v, vs, sizeof vs);
    if (ix->dtype != FL_INT64 || ix->ndim != 2)
        return fl__op_error(op, "indices '%s' must be int64 [N, k], is %s %s", ix->name, fl_dtype_name(ix->dtype), is);
    if (!fl__shapes_equal(v, ix))
        return fl__op_error(op, "values '%s' %s must have the shape of indices '%s' %s", v->name, vs, ix->name, is);
    FL_CHECK(check_label_col(op, ix, label));
    set_shape1(op->out[0].vars[0], FL_FLOAT32);
    set_shape1(op->out[1].vars[0], FL_INT64);
    set_shape1(op->out[2].vars[0], FL_INT64);
    return FL_OK;
}

static int run_accuracy(fl_kctx *c)
{
    fl_tensor *ix = FL_IN(c, 1), *lab = FL_IN(c, 2), *acc = FL_OUT(c, 0), *cor = FL_OUT(c, 1), *tot = FL_OUT(c, 2);
    if (ix->dtype != FL_INT64 || ix->ndim != 2) return fl__err(FL_EINVAL, "accuracy: indices must be int64 [N, k]");
    int64_t n = ix->shape[0], k = ix->shape[1];
    if (lab->dtype != FL_INT64 || lab->numel != n)
        return fl__err(FL_EINVAL, "accuracy: label '%s' has %lld %s values for %lld rows (expected int64, one per row)",
                       c->op->in[2].vars[0]->name, (long long)lab->numel, fl_dtype_name(lab->dtype), (long long)n);
    FL_CHECK(resize1(acc, FL_FLOAT32));
    FL_CHECK(resize1(cor, FL_INT64));
    FL_CHECK(resize1(tot, FL_INT64));
    const int64_t *id = ix->data, *l = lab->data;
    int64_t correct = 0;
    for (int64_t i = 0; i < n; i++) {
        int hit = 0;
        for (int64_t j = 0; j < k; j++) hit |= id[i * k + j] == l[i];
        correct += hit;
    }
    ((int64_t *)cor->data)[0] = correct;
    ((int64_t *)tot->data)[0] = n;
    ((float *)acc->data)[0] = n ? (float)correct / (float)n : 0.0f;
    return FL_OK;
}

static const fl_op_def def_accuracy = {
    "accuracy", {"Out", "Indices", "Label"}, {"Accuracy", "Correct", "Total"}, infer_accuracy, run_accuracy, NULL, NULL};

fl_var *fl_layer_accuracy(fl_var *input, fl_var *label, int k)
{
    fl_prog *p = fl__prog_of(FL_VARS(input, label));
    if (!p || p->status != FL_OK) return NULL;
    char is[96];
    fl__shape_str(input, is, sizeof is);
    if (k < 1) {
        fl__prog_error(p, FL_EINVAL, "accuracy: k must be >= 1, got %d", k);
        return NULL;
    }
    if (input->dtype != FL_FLOAT32 || input->ndim != 2) {
        fl__prog_error(p, FL_EINVAL, "accuracy: input '%s' must be float32 [N, C], is %s %s", input->name,
                       fl_dtype_name(input->dtype), is);
        return NULL;
    }
    if (input->shape[1] >= 0 && k > input->shape[1]) {
        fl__prog_error(p, FL_EINVAL, "accuracy: k = %d exceeds the number of classes of input '%s' %s", k, input->name, is);
        return NULL;
    }
    int64_t sh[2] = {input->shape[0], k}, one = 1;
    fl_var *vals = fl__tmp_var(p, "top_k", FL_FLOAT32, 2, sh);
    fl_var *idx = vals ? fl__tmp_var(p, "top_k", FL_INT64, 2, sh) : NULL;
    if (!idx) return NULL;
    {
        fl_io in = FL_IO1("X", input);
        fl_io out[2] = {FL_IO1("Out", vals), FL_IO1("Indices", idx)};
        fl_op *op = fl__op_new(p, "top_k", &in, 1, out, 2);
        if (!op || fl__attr_set_i(op, "k", k) || fl__op_finish(op)) return NULL;
    }
    fl_var *acc = fl__tmp_var(p, "accuracy", FL_FLOAT32, 1, &one);
    fl_var *cor = acc ? fl__tmp_var(p, "accuracy", FL_INT64, 1, &one) : NULL;
    fl_var *tot = cor ? fl__tmp_var(p, "accuracy", FL_INT64, 1, &one) : NULL;
    if (!tot) return NULL;
    fl_io in[3] = {FL_IO1("Out", vals), FL_IO1("Indices", idx), FL_IO1("Label", label)};
    fl_io out[3] = {FL_IO1("Accuracy", acc), FL_IO1("Correct", cor), FL_IO1("Total", tot)};
    return fl__op_append(p, "accuracy", in, 3, out, 3) ? acc : NULL;
}

/* ---- auc -----------------------------------------------------------------------------------
 * Paddle's auc op (ROC curve only), as paddle/phi/kernels/cpu/auc_kernel.cc:
 *  - the positive-class probability p of a row is column 1 of Predict [N, 2] and must lie in
 *    [0, 1]; its bucket is (int)(p * num_thresholds) (float product), one of
 *    num_thresholds + 1 buckets; label > 0 counts as positive, label == 0 as negative,
 *    a negative label is skipped;
 *  - AUC is the trapezoid sum over buckets from the highest down of the (negatives,
 *    positives) cumulative curve, divided by positives * negatives; with no positives or
 *    no negatives the area is 0 and so is the AUC (Paddle returns 0.0, not 0.5); two
 *    examples in the same bucket count one half.
 * State layout (Paddle 2.x), B = num_thresholds + 1, S = slide_steps:
 *  - S == 0: [1, B] cumulative histogram (the global AUC);
 *  - S > 0: [(S + 1) * B + 1]: rows 0..S-1 are a ring of per-batch histograms, row S their
 *    running sum (the histogram the AUC is computed on), and the last element counts the
 *    batches seen; the batch with count c uses ring row c % S after subtracting that row's
 *    old contents from the sum.  Both StatPos and StatNeg carry the counter.
 * The AUC output is float64 (as Paddle).  All inputs are checked before the state changes,
 * so a failing batch leaves it untouched. */

#define AUC_MAX_STATE (INT64_C(1) << 31) /* elements per state buffer */

static int64_t auc_state_numel(int64_t nt, int64_t ss) { return ss ? (ss + 1) * (nt + 1) + 1 : nt + 1; }

/* Build-time checks shared by the op and the builder (errors name the op "auc"). */
static int auc_check(fl_prog *p, const fl_var *pred, const fl_var *label, int64_t nt, int64_t ss)
{
    char ps[96], ls[96];
    fl__shape_str(pred, ps, sizeof ps);
    fl__shape_str(label, ls, sizeof ls);
    if (nt < 1) return fl__prog_error(p, FL_EINVAL, "auc: num_thresholds must be >= 1, got %lld", (long long)nt);
    if (ss < 0) return fl__prog_error(p, FL_EINVAL, "auc: slide_steps must be >= 0, got %lld", (long long)ss);
    if (nt >= AUC_MAX_STATE || (ss + 1) > AUC_MAX_STATE / (nt + 1))
        return fl__prog_error(p, FL_EINVAL, "auc: num_thresholds %lld with slide_steps %lld needs too large a state",
                              (long long)nt, (long long)ss);
    if (pred->dtype != FL_FLOAT32 || pred->ndim != 2 || (pred->shape[1] != 2 && pred->shape[1] != -1))
        return fl__prog_error(p, FL_EINVAL,
                              "auc: input '%s' must be float32 [N, 2] (column 1 = positive probability), is %s %s",
                              pred->name, fl_dtype_name(pred->dtype), ps);
    if (label->dtype != FL_INT64)
        return fl__prog_error(p, FL_EINVAL, "auc: label '%s' must be int64, is %s", label->name,
                              fl_dtype_name(label->dtype));
    if (label->ndim != 2 || label->shape[1] != 1)
        return fl__prog_error(p, FL_EINVAL, "auc: label '%s' %s must have shape [N, 1]", label->name, ls);
    if (pred->shape[0] >= 0 && label->shape[0] >= 0 && pred->shape[0] != label->shape[0])
        return fl__prog_error(p, FL_EINVAL, "auc: label '%s' %s does not have as many rows as input '%s' %s", label->name,
                              ls, pred->name, ps);
    return FL_OK;
}

static int infer_auc(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    int64_t nt = fl__attr_i(op, "num_thresholds", 4095), ss = fl__attr_i(op, "slide_steps", 1);
    const char *curve = fl__attr_s(op, "curve", "ROC");
    if (strcmp(curve, "ROC") != 0) return fl__op_error(op, "attribute curve='%s' is not supported (only \"ROC\")", curve);
    FL_CHECK(auc_check(op->prog, op->in[0].vars[0], op->in[1].vars[0], nt, ss));
    int64_t want = auc_state_numel(nt, ss);
    for (int s = 2; s < 4; s++) {
        fl_var *st = op->in[s].vars[0];
        int64_t n = 1;
        for (int d = 0; d < st->ndim; d++) n = st->shape[d] < 0 || n < 0 ? -1 : n * st->shape[d];
        if (st->dtype != FL_INT64 || n != want)
            return fl__op_error(op,
                                "state '%s' (%s) must be int64 with %lld elements for num_thresholds %lld and "
                                "slide_steps %lld",
                                st->name, op->def->in_names[s], (long long)want, (long long)nt, (long long)ss);
        fl__var_set_shape(op->out[s - 1].vars[0], FL_INT64, st->ndim, st->shape);
    }
    set_shape1(op->out[0].vars[0], FL_FLOAT64);
    return FL_OK;
}

static double auc_area(const int64_t *pos, const int64_t *neg, int64_t nt)
{
    double area = 0.0, tp = 0.0, fp = 0.0;
    for (int64_t b = nt; b >= 0; b--) {
        double tp0 = tp, fp0 = fp;
        tp += (double)pos[b];
        fp += (double)neg[b];
        area += (fp - fp0) * (tp + tp0) / 2.0;
    }
    return tp > 0.0 && fp > 0.0 ? area / tp / fp : area;
}

/* The statistics are persistable and shared by Hogwild trainer threads
 * (fl_exe_train_from_dataset): one update at a time per statistics tensor, so the global
 * and sliding counts stay exact.  A lock of a small striped set is chosen by the address. */
static pthread_mutex_t auc_locks[16] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};

static int run_auc_locked(fl_kctx *c);

static int run_auc(fl_kctx *c)
{
    const fl_tensor *st = FL_IN(c, 2);
    pthread_mutex_t *mu = &auc_locks[((uintptr_t)(st ? st->data : NULL) >> 6) % 16];
    pthread_mutex_lock(mu);
    int r = run_auc_locked(c);
    pthread_mutex_unlock(mu);
    return r;
}

static int run_auc_locked(fl_kctx *c)
{
    const fl_op *op = c->op;
    fl_tensor *pred = FL_IN(c, 0), *lab = FL_IN(c, 1), *auc = FL_OUT(c, 0);
    int64_t nt = fl__attr_i(op, "num_thresholds", 4095), ss = fl__attr_i(op, "slide_steps", 1), nb = nt + 1;
    int64_t want = auc_state_numel(nt, ss);
    if (pred->dtype != FL_FLOAT32 || pred->ndim != 2 || pred->shape[1] != 2)
        return fl__err(FL_EINVAL, "auc: input '%s' must be float32 [N, 2]", op->in[0].vars[0]->name);
    int64_t n = pred->shape[0];
    if (lab->dtype != FL_INT64 || lab->numel != n)
        return fl__err(FL_EINVAL, "auc: label '%s' has %lld %s values for %lld rows (expected int64, one per row)",
                       op->in[1].vars[0]->name, (long long)lab->numel, fl_dtype_name(lab->dtype), (long long)n);
    const float *pd = pred->data;
    for (int64_t i = 0; i < n; i++) {
        float p = pd[2 * i + 1];
        if (!(p >= 0.0f && p <= 1.0f))
            return fl__err(FL_EINVAL, "auc: prediction %g at row %lld of input '%s' is outside [0, 1]", (double)p,
                           (long long)i, op->in[0].vars[0]->name);
    }
    int64_t *st[2];
    for (int s = 0; s < 2; s++) {
        fl_tensor *in = FL_IN(c, 2 + s), *o = FL_OUT(c, 1 + s);
        if (in->dtype != FL_INT64 || in->numel != want)
            return fl__err(FL_EINVAL,
                           "auc: state '%s' has %lld %s elements, expected %lld int64 (num_thresholds %lld, "
                           "slide_steps %lld)",
                           op->in[2 + s].vars[0]->name, (long long)in->numel, fl_dtype_name(in->dtype), (long long)want,
                           (long long)nt, (long long)ss);
        if (o != in) FL_CHECK(fl_tensor_copy(o, in));
        st[s] = o->data;
    }
    int64_t *pos = st[0], *neg = st[1], cur = 0, sum = 0;
    if (ss > 0) {
        int64_t cnt = pos[(ss + 1) * nb];
        if (cnt < 0) return fl__err(FL_EINVAL, "auc: state '%s' has a negative batch counter", op->in[2].vars[0]->name);
        cur = (cnt % ss) * nb;
        sum = ss * nb;
        for (int64_t b = 0; b < nb; b++) {
            pos[sum + b] -= pos[cur + b];
            neg[sum + b] -= neg[cur + b];
        }
        memset(pos + cur, 0, (size_t)nb * sizeof *pos);
        memset(neg + cur, 0, (size_t)nb * sizeof *neg);
    }
    const int64_t *l = lab->data;
    float fnt = (float)nt;
    for (int64_t i = 0; i < n; i++) {
        int64_t b = (int64_t)(pd[2 * i + 1] * fnt);
        b = b < nt ? b : nt; /* float rounding of a huge num_thresholds */
        if (l[i] > 0) pos[cur + b]++;
        else if (l[i] == 0) neg[cur + b]++;
    }
    if (ss > 0) {
        for (int64_t b = 0; b < nb; b++) {
            pos[sum + b] += pos[cur + b];
            neg[sum + b] += neg[cur + b];
        }
        pos[(ss + 1) * nb]++;
        neg[(ss + 1) * nb]++;
    }
    FL_CHECK(resize1(auc, FL_FLOAT64));
    ((double *)auc->data)[0] = auc_area(pos + sum, neg + sum, nt);
    return FL_OK;
}

static const fl_op_def def_auc = {
    "auc", {"Predict", "Label", "StatPos", "StatNeg"}, {"AUC", "StatPosOut", "StatNegOut"}, infer_auc, run_auc, NULL, NULL};

/* Persistable int64 state named like Paddle's helper variables ("auc_0.tmp_2"), zeroed by
 * the startup program. */
static fl_var *auc_state(fl_prog *p, const char *base, int ndim, const int64_t *shape)
{
    char pre[160], name[200];
    snprintf(pre, sizeof pre, "%s.tmp", base);
    do fl__unique_name(p, pre, name, sizeof name);
    while (fl_prog_var(p, name) || fl_prog_var(p->startup, name));
    return fl__persistable_create(p, name, FL_INT64, ndim, shape, 0.0f);
}

static int auc_append(fl_prog *p, fl_var *pred, fl_var *label, fl_var *spos, fl_var *sneg, fl_var *out, int nt, int ss)
{
    fl_io in[4] = {FL_IO1("Predict", pred), FL_IO1("Label", label), FL_IO1("StatPos", spos), FL_IO1("StatNeg", sneg)};
    fl_io o[3] = {FL_IO1("AUC", out), FL_IO1("StatPosOut", spos), FL_IO1("StatNegOut", sneg)};
    fl_op *op = fl__op_new(p, "auc", in, 4, o, 3);
    if (!op) return fl_prog_status(p);
    FL_CHECK(fl__attr_set_s(op, "curve", "ROC"));
    FL_CHECK(fl__attr_set_i(op, "num_thresholds", nt));
    FL_CHECK(fl__attr_set_i(op, "slide_steps", ss));
    return fl__op_finish(op);
}

/* Variables, in Paddle's order: auc_<k>.tmp_0 global AUC, tmp_1 batch AUC, tmp_2/tmp_3 the
 * sliding-window StatPos/StatNeg, tmp_4/tmp_5 the global StatPos/StatNeg [1, B]. */
fl_var *fl_layer_auc(fl_var *input, fl_var *label, int num_thresholds, int slide_steps, fl_var **batch_auc)
{
    if (batch_auc) *batch_auc = NULL;
    fl_prog *p = fl__prog_of(FL_VARS(input, label));
    if (!p || p->status != FL_OK) return NULL;
    if (!p->startup) {
        fl__prog_error(p, FL_EINVAL, "auc: input '%s' does not belong to a main program", input->name);
        return NULL;
    }
    if (auc_check(p, input, label, num_thresholds, slide_steps) != FL_OK) return NULL;
    char base[128];
    fl__unique_name(p, "auc", base, sizeof base);
    int64_t one = 1, nb = (int64_t)num_thresholds + 1;
    int64_t gsh[2] = {1, nb}, wsh[1] = {auc_state_numel(num_thresholds, slide_steps)};
    fl_var *g = fl__tmp_var(p, base, FL_FLOAT64, 1, &one);
    fl_var *b = g ? fl__tmp_var(p, base, FL_FLOAT64, 1, &one) : NULL;
    if (!b) return NULL;
    int wnd = slide_steps > 0 ? 1 : 2;
    fl_var *bpos = auc_state(p, base, wnd, slide_steps > 0 ? wsh : gsh);
    fl_var *bneg = bpos ? auc_state(p, base, wnd, slide_steps > 0 ? wsh : gsh) : NULL;
    fl_var *gpos = bneg ? auc_state(p, base, 2, gsh) : NULL;
    fl_var *gneg = gpos ? auc_state(p, base, 2, gsh) : NULL;
    if (!gneg) return NULL;
    if (auc_append(p, input, label, bpos, bneg, b, num_thresholds, slide_steps) != FL_OK ||
        auc_append(p, input, label, gpos, gneg, g, num_thresholds, 0) != FL_OK)
        return NULL;
    if (batch_auc) *batch_auc = b;
    return g;
}

int fl_auc_from_stats(const int64_t *stat_pos, const int64_t *stat_neg, int64_t num_buckets, double *auc)
{
    if (!stat_pos || !stat_neg || !auc)
        return fl__err(FL_EINVAL, "fl_auc_from_stats: %s is NULL", !stat_pos ? "stat_pos" : !stat_neg ? "stat_neg" : "auc");
    if (num_buckets < 1)
        return fl__err(FL_EINVAL, "fl_auc_from_stats: num_buckets must be >= 1, got %lld", (long long)num_buckets);
    for (int64_t b = 0; b < num_buckets; b++)
        if (stat_pos[b] < 0 || stat_neg[b] < 0)
            return fl__err(FL_EINVAL, "fl_auc_from_stats: %s[%lld] = %lld is negative (a count)",
                           stat_pos[b] < 0 ? "stat_pos" : "stat_neg", (long long)b,
                           (long long)(stat_pos[b] < 0 ? stat_pos[b] : stat_neg[b]));
    int64_t np = 0, nn = 0;
    for (int64_t b = 0; b < num_buckets; b++) np += stat_pos[b], nn += stat_neg[b];
    *auc = np > 0 && nn > 0 ? auc_area(stat_pos, stat_neg, num_buckets - 1) : 0.5;
    return FL_OK;
}

const fl_op_def *const fl__ops_metric[] = {&def_top_k, &def_accuracy, &def_auc, NULL};
