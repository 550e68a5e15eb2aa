/*
 * collective_ops.c - operators that collective training inserts into programs:
 *   c_broadcast          startup: copies rank 0's initial parameters to every rank
 *   c_allreduce_start    after the last gradient of a fusion bucket is produced: packs the
 *                        bucket and queues its allreduce on the communication thread
 *   c_allreduce_wait     before the optimizer: waits for every bucket, scales by 1/n and
 *                        unpacks into the gradients
 *   c_sparse_allgather   SelectedRows gradients: gathers every rank's rows and values
 *                        (scaled by 1/n), so each rank applies the same sparse update
 *   c_localsgd           after the optimizer: every k steps, parameters averaged
 *   c_adaptive_localsgd  the same with k adapted from the loss (Paddle's adaptive LocalSGD)
 *   gm_accumulate / gm_zero   gradient merge: sum gradients over k steps, apply, clear
 *   c_allreduce          a program's own allreduce (fleet_layer_allreduce: Paddle's
 *                        layers.collective._c_allreduce): Out = X reduced over the workers
 *   c_allgather          a program's own allgather (fleet_layer_allgather): Out = every
 *                        worker's X stacked along the first dimension, in rank order
 * They find their communicator through the ring_id attribute (ring.h).
 */
#include <math.h>
#include <string.h>

#include "../ring.h"


static int get_comm(fl_kctx *c, fl_ring **out)
{
    int64_t id = fl__attr_i(c->op, "ring_id", -1);
    *out = fl__ring_lookup(id);
    if (!*out)
        return fl__err(FL_ESTATE, "%s: no communicator with ring_id %lld (the fleet handle was freed or never initialised)",
                       c->op->def->type, (long long)id);
    return FL_OK;
}

/* ---- c_broadcast: X (list) from root, in place ---------------------------------------------- */

static int run_broadcast(fl_kctx *c)
{
    fl_ring *cm;
    FL_CHECK(get_comm(c, &cm));
    int root = (int)fl__attr_i(c->op, "root", 0);
    for (int i = 0; i < c->nin[0]; i++) {
        fl_tensor *t = c->in[0][i];
        FL_CHECK(fl__ring_broadcast(cm, t->data, (size_t)t->numel, t->dtype, root));
    }
    return FL_OK;
}

/* ---- c_allreduce_start / c_allreduce_wait ----------------------------------------------------- */

static int run_ar_start(fl_kctx *c)
{
    fl_ring *cm;
    FL_CHECK(get_comm(c, &cm));
    int b = (int)fl__attr_i(c->op, "bucket", 0);
    size_t n = 0;
    for (int i = 0; i < c->nin[0]; i++) n += (size_t)c->in[0][i]->numel;
    if (fl__ring_size(cm) == 1) return FL_OK;
    float *buf = fl__ring_bucket(cm, b, n);
    if (!buf) return fl_last_status();
    size_t at = 0;
    for (int i = 0; i < c->nin[0]; i++) {
        fl_tensor *t = c->in[0][i];
        memcpy(buf + at, t->data, (size_t)t->numel * sizeof(float));
        at += (size_t)t->numel;
    }
    return fl__ring_start(cm, b, n);
}

static int run_ar_wait(fl_kctx *c)
{
    fl_ring *cm;
    FL_CHECK(get_comm(c, &cm));
    FL_CHECK(fl__ring_wait_all(cm));
    int n = fl__ring_size(cm);
    if (n == 1) return FL_OK;
    const fl_attr *sizes = fl__attr_find(c->op, "bucket_sizes");
    float scale = 1.0f / (float)n;
    int k = 0;
    for (int b = 0; sizes && b < sizes->n; b++) {
        float *buf = fl__ring_bucket(cm, b, 0);
        size_t at = 0;
        for (int64_t j = 0; j < sizes->ints[b]; j++, k++) {
            if (k >= c->nin[0]) return fl__err(FL_EINVAL, "c_allreduce_wait: bucket sizes exceed the gradients");
            fl_tensor *t = c->out[0][k];
            fl__vscale(t->data, scale, buf + at, t->numel);
            at += (size_t)t->numel;
        }
    }
    return FL_OK;
}

/* ---- c_sparse_allgather --------------------------------------------------------------------- */

static int run_sparse_allgather(fl_kctx *c)
{
    fl_ring *cm;
    FL_CHECK(get_comm(c, &cm));
    fl_tensor *g = FL_IN(c, 0), *o = FL_OUT(c, 0);
    int n = fl__ring_size(cm);
    if (n == 1) return o == g ? FL_OK : fl_tensor_copy(o, g);
    if (!g->is_rows) {
        /* a dense gradient reaching here (a table used densely somewhere else): allreduce */
        if (o != g) FL_CHECK(fl_tensor_copy(o, g));
        FL_CHECK(fl__ring_allreduce(cm, o->data, (size_t)o->numel, FL_FLOAT32, "sum"));
        fl__vscal(o->data, 1.0f / (float)n, o->numel);
        return FL_OK;
    }
    int64_t rows = g->shape[0], width = rows ? g->numel / rows : (g->ndim > 1 ? fl__dims_prod(g->shape, 1, g->ndim) : 1);
    int64_t *counts = malloc((size_t)n * sizeof *counts);
    if (!counts) return fl__err(FL_ENOMEM, "c_sparse_allgather: out of memory");
    int st = fl__ring_allgather(cm, &rows, counts, 1, FL_INT64);
    int64_t maxr = 0, total = 0;
    for (int i = 0; st == FL_OK && i < n; i++) {
        maxr = counts[i] > maxr ? counts[i] : maxr;
        total += counts[i];
    }
    int64_t *srow = NULL, *arow = NULL;
    float *sval = NULL, *aval = NULL;
    if (st == FL_OK) {
        srow = calloc((size_t)(maxr ? maxr : 1), sizeof *srow);
        arow = calloc((size_t)(maxr ? maxr : 1) * (size_t)n, sizeof *arow);
        size_t vals = (size_t)(maxr * width) + 1;
        sval = calloc(vals, sizeof *sval);
        aval = calloc(vals * (size_t)n, sizeof *aval);
        if (!srow || !arow || !sval || !aval) st = fl__err(FL_ENOMEM, "c_sparse_allgather: out of memory");
    }
    if (st == FL_OK) {
        if (rows) {
            memcpy(srow, g->rows, (size_t)rows * sizeof *srow);
            memcpy(sval, g->data, (size_t)(rows * width) * sizeof *sval);
        }
        st = fl__ring_allgather(cm, srow, arow, (size_t)maxr, FL_INT64);
        if (st == FL_OK) st = fl__ring_allgather(cm, sval, aval, (size_t)(maxr * width), FL_FLOAT32);
    }
    if (st == FL_OK) {
        int64_t height = g->height, sh[FL_MAX_DIMS];
        memcpy(sh, g->shape, sizeof sh);
        sh[0] = total;
        st = fl__tensor_reshape_raw(o, FL_FLOAT32, g->ndim ? g->ndim : 2, sh);
        int64_t at = 0;
        float scale = 1.0f / (float)n;
        for (int r = 0; st == FL_OK && r < n; r++) {
            for (int64_t i = 0; i < counts[r]; i++) arow[at + i] = arow[r * maxr + i];
            fl__vscale((float *)o->data + at * width, scale, aval + r * maxr * width, counts[r] * width);
            at += counts[r];
        }
        if (st == FL_OK) st = fl_tensor_set_rows(o, arow, total, height);
    }
    free(counts);
    free(srow);
    free(arow);
    free(sval);
    free(aval);
    return st;
}

/* ---- LocalSGD: Param (list), Step -> Param, Step ------------------------------------------------ */

static int average_params(fl_kctx *c, fl_ring *cm, int slot)
{
    size_t n = 0;
    for (int i = 0; i < c->nin[slot]; i++) n += (size_t)c->in[slot][i]->numel;
    float *buf = fl__ring_bucket(cm, 0, n);
    if (!buf) return fl_last_status();
    size_t at = 0;
    for (int i = 0; i < c->nin[slot]; i++) {
        memcpy(buf + at, c->in[slot][i]->data, (size_t)c->in[slot][i]->numel * sizeof(float));
        at += (size_t)c->in[slot][i]->numel;
    }
    FL_CHECK(fl__ring_allreduce(cm, buf, n, FL_FLOAT32, "sum"));
    float scale = 1.0f / (float)fl__ring_size(cm);
    at = 0;
    for (int i = 0; i < c->nin[slot]; i++) {
        fl_tensor *t = c->in[slot][i];
        fl__vscale(t->data, scale, buf + at, t->numel);
        at += (size_t)t->numel;
    }
    return FL_OK;
}

static int run_localsgd(fl_kctx *c)
{
    fl_ring *cm;
    FL_CHECK(get_comm(c, &cm));
    int64_t *step = FL_IN(c, 1)->data;
    int64_t k = fl__attr_i(c->op, "k_steps", 1), begin = fl__attr_i(c->op, "begin_step", 1);
    int64_t s = ++step[0]; /* steps completed, 1-based */
    if (fl__ring_size(cm) == 1) return FL_OK;
    /* before begin_step parameters are averaged every step (plain data parallel) */
    if (s < begin || (s - begin) % k == 0) return average_params(c, cm, 0);
    return FL_OK;
}

/* ---- adaptive LocalSGD: Param (list), Step, Loss, LearningRate, State -> Param, Step, State ----------
 * Paddle's AdaptiveLocalSGDOptimizer (Wang and Joshi, "Adaptive Communication Strategies to
 * Achieve the Best Error-Runtime Trade-off in Local-Update SGD"): at step 1 the workers'
 * mean loss and the learning rate are recorded (loss_0, lr_0); parameters are averaged at
 * every step up to begin_step, then whenever k steps have passed since the last average;
 * after each average k = ceil(sqrt(lr_0 * mean loss / (lr * loss_0) * init_k_steps)),
 * clipped to [1, 16].  State (float32[4]): k, the step of the last average, loss_0, lr_0. */

#define ALSGD_MAX_K 16.0

static int mean_loss(fl_ring *cm, const fl_tensor *loss, float *out)
{
    float v = ((const float *)loss->data)[0];
    FL_CHECK(fl__ring_allreduce(cm, &v, 1, FL_FLOAT32, "sum"));
    *out = v / (float)fl__ring_size(cm);
    return FL_OK;
}

static int run_adaptive_localsgd(fl_kctx *c)
{
    fl_ring *cm;
    FL_CHECK(get_comm(c, &cm));
    int64_t *step = FL_IN(c, 1)->data;
    const fl_tensor *loss = FL_IN(c, 2), *lrt = FL_IN(c, 3);
    float *st = FL_IN(c, 4)->data;
    if (loss->dtype != FL_FLOAT32 || loss->numel != 1 || lrt->dtype != FL_FLOAT32 || lrt->numel < 1 ||
        FL_IN(c, 4)->numel != 4)
        return fl__err(FL_EINVAL, "c_adaptive_localsgd: loss and learning rate must be float32 numbers");
    int64_t init_k = fl__attr_i(c->op, "init_k_steps", 1), begin = fl__attr_i(c->op, "begin_step", 1);
    int64_t s = ++step[0];
    float lr = ((const float *)lrt->data)[0];
    if (st[0] < 1.0f) st[0] = (float)init_k;
    if (fl__ring_size(cm) == 1) return FL_OK;
    if (s == 1) {
        FL_CHECK(mean_loss(cm, loss, &st[2]));
        st[3] = lr;
    }
    if (s > begin && s - (int64_t)st[1] != (int64_t)st[0]) return FL_OK;
    FL_CHECK(average_params(c, cm, 0));
    float avg;
    FL_CHECK(mean_loss(cm, loss, &avg));
    double k = ceil(sqrt((double)st[3] * avg / ((double)lr * st[2]) * (double)init_k));
    if (!(k >= 1.0)) k = isnan(k) ? ALSGD_MAX_K : 1.0; /* NaN: a zero loss_0 or rate: average often */
    if (k > ALSGD_MAX_K) k = ALSGD_MAX_K;
    st[0] = (float)k;
    st[1] = (float)s;
    return FL_OK;
}

/* ---- gradient merge: Grad (list), Step -> Merged (list), Step, Cond -------------------------------- */

static int run_gm_accumulate(fl_kctx *c)
{
    int64_t k = fl__attr_i(c->op, "k_steps", 1);
    int avg = (int)fl__attr_i(c->op, "avg", 1);
    int64_t *step = FL_IN(c, 1)->data, s = ++step[0];
    int apply = s % k == 0;
    for (int i = 0; i < c->nin[0]; i++) {
        fl_tensor *g = c->in[0][i], *m = c->out[0][i];
        if (g->is_rows)
            return fl__err(FL_EUNSUPPORTED, "gradient merge: sparse gradient '%s' is not supported; use a dense embedding",
                           c->op->in[0].vars[i]->name);
        if (m->numel != g->numel)
            return fl__err(FL_EINVAL, "gradient merge: accumulator of '%s' has %lld elements, gradient %lld",
                           c->op->in[0].vars[i]->name, (long long)m->numel, (long long)g->numel);
        fl__vaxpy(m->data, 1.0f, g->data, g->numel);
        if (apply && avg) fl__vscal(m->data, 1.0f / (float)k, m->numel);
    }
    fl_tensor *cond = FL_OUT(c, 1);
    int64_t one = 1;
    FL_CHECK(fl__tensor_reshape_raw(cond, FL_INT64, 1, &one));
    ((int64_t *)cond->data)[0] = apply;
    return FL_OK;
}

static int run_gm_zero(fl_kctx *c)
{
    for (int i = 0; i < c->nin[0]; i++) memset(c->in[0][i]->data, 0, fl_tensor_nbytes(c->in[0][i]));
    return FL_OK;
}

/* ---- c_allreduce: X -> Out, reduce_type sum | max | min (ring_id -1: one worker) ---------------- */

static int infer_allreduce(fl_op *op)
{
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    fl__var_set_shape(o, x->dtype, x->ndim, x->shape);
    o->lod_level = x->lod_level;
    return FL_OK;
}

static int run_allreduce(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *o = FL_OUT(c, 0);
    if (o != x) FL_CHECK(fl_tensor_copy(o, x));
    if (fl__attr_i(c->op, "ring_id", -1) < 0) return FL_OK;
    fl_ring *cm;
    FL_CHECK(get_comm(c, &cm));
    if (fl__ring_size(cm) == 1) return FL_OK;
    return fl__ring_allreduce(cm, o->data, (size_t)o->numel, o->dtype, fl__attr_s(c->op, "reduce_type", "sum"));
}

/* ---- c_allgather: X [n, ...] -> Out [nranks * n, ...] (ring_id -1: one worker) -------------------- */

static int infer_allgather(fl_op *op)
{
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    int64_t nr = fl__attr_i(op, "nranks", 1), sh[FL_MAX_DIMS];
    if (x->ndim < 1) return fl__op_error(op, "X must have at least one dimension");
    memcpy(sh, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    if (sh[0] >= 0) sh[0] *= nr;
    fl__var_set_shape(o, x->dtype, x->ndim, sh);
    return FL_OK;
}

static int run_allgather(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *o = FL_OUT(c, 0);
    if (fl__attr_i(c->op, "ring_id", -1) < 0) return o == x ? FL_OK : fl_tensor_copy(o, x);
    fl_ring *cm;
    FL_CHECK(get_comm(c, &cm));
    int n = fl__ring_size(cm);
    int64_t sh[FL_MAX_DIMS];
    memcpy(sh, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    sh[0] *= n;
    FL_CHECK(fl__tensor_reshape_raw(o, x->dtype, x->ndim, sh));
    return fl__ring_allgather(cm, x->data, o->data, (size_t)x->numel, x->dtype);
}

static const fl_op_def def_broadcast = {"c_broadcast", {"X"}, {"Out"}, fl__infer_nop, run_broadcast, NULL};
static const fl_op_def def_ar_start = {"c_allreduce_start", {"X"}, {NULL}, fl__infer_nop, run_ar_start, NULL};
static const fl_op_def def_ar_wait = {"c_allreduce_wait", {"X"}, {"Out"}, fl__infer_nop, run_ar_wait, NULL};
static const fl_op_def def_sparse_ag = {"c_sparse_allgather", {"X"}, {"Out"}, fl__infer_nop, run_sparse_allgather, NULL};
static const fl_op_def def_localsgd = {"c_localsgd",  {"Param", "Step"}, {"ParamOut", "StepOut"},
                                       fl__infer_nop, run_localsgd,      NULL};
static const fl_op_def def_alsgd = {"c_adaptive_localsgd",
                                    {"Param", "Step", "Loss", "LearningRate", "State"},
                                    {"ParamOut", "StepOut", "StateOut"},
                                    fl__infer_nop,
                                    run_adaptive_localsgd,
                                    NULL};
static const fl_op_def def_gm_acc = {"gm_accumulate", {"Grad", "Step"},  {"Merged", "Cond", "StepOut"},
                                     fl__infer_nop,   run_gm_accumulate, NULL};
static const fl_op_def def_gm_zero = {"gm_zero", {"Merged"}, {"MergedOut"}, fl__infer_nop, run_gm_zero, NULL};
static const fl_op_def def_allreduce = {"c_allreduce", {"X"}, {"Out"}, infer_allreduce, run_allreduce, NULL};
static const fl_op_def def_allgather = {"c_allgather", {"X"}, {"Out"}, infer_allgather, run_allgather, NULL};

const fl_op_def *const fl__ops_collective[] = {&def_broadcast, &def_ar_start,  &def_ar_wait, &def_sparse_ag,
                                               &def_localsgd,  &def_gm_acc,    &def_gm_zero, &def_allreduce,
                                               &def_alsgd,     &def_allgather, NULL};

fl_var *fl__c_collective_layer(const char *type, fl_var *x, int ring_id, int nranks, const char *reduce_type)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p) {
        fl__err(FL_EINVAL, "fleet_layer_allreduce: x is NULL");
        return NULL;
    }
    if (p->status != FL_OK) return NULL;
    if (fl__op_register_group(fl__ops_collective) != FL_OK) return NULL;
    char base[128];
    fl__unique_name(p, type, base, sizeof base);
    fl_var *o = fl__tmp_var(p, base, x->dtype, x->ndim, x->shape);
    if (!o) return NULL;
    fl_io in = FL_IO1("X", x), out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, type, &in, 1, &out, 1);
    if (!op) return NULL;
    int st = fl__attr_set_i(op, "ring_id", ring_id);
    if (st == FL_OK) st = fl__attr_set_i(op, "single_trainer", 1);
    if (st == FL_OK && reduce_type) st = fl__attr_set_s(op, "reduce_type", reduce_type);
    if (st == FL_OK) st = fl__attr_set_i(op, "nranks", nranks);
    if (st == FL_OK) st = fl__op_finish(op);
    return st == FL_OK ? o : NULL;
}
