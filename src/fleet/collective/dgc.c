/*
 * dgc.c - strategy.dgc in the collective runtime: Paddle's DGCMomentumOptimizer as a program
 * rewrite, and c_dgc_allreduce, the exchange of the compressed gradients.
 *
 * Which parameters: as Paddle's _is_use_dgc, float32 parameters of at least
 * DGC_MIN_NUMEL elements with a dense gradient; the others keep the fused bucket allreduce
 * and the momentum op.  With one worker nothing is rewritten (Paddle's DGC needs
 * nranks > 1).
 *
 * The rewrite (after minimize appended the momentum ops): for each such parameter W with
 * gradient G, velocity U (the momentum op's, shared with DGC as in Paddle) and a new
 * accumulator V (W_dgc_v_0), the momentum op is replaced by
 *     dgc(U, V, G, W, step)            -> U, V, W__dgc_idx__, W__dgc_val__, G, W__dgc_k__
 *     c_dgc_allreduce(idx, val, k, step, G) -> G
 *     dgc_momentum(W, G, lr, U, step)  -> W, U     (momentum before rampup_begin_step, SGD after)
 * and one increment of the step counter __g_dgc_counter__ ends the program.  The L2
 * coefficient of the momentum op moves into dgc (added to the local gradient before
 * compression, as Paddle's regular_coeff).  The ops run after c_allreduce_wait, on the
 * executor's thread (ring.h's rule).
 *
 * c_dgc_allreduce: before rampup_begin_step, the gradient is allreduced dense and averaged.
 * After: every rank's k (index, value) pairs (k is the same everywhere: same size, same step)
 * travel in one allgather of 2k 32-bit words per rank; each rank adds all of them into the
 * zeroed gradient, each scaled by 1/(number of ranks), so every rank applies the same
 * averaged update.
 */
#include <stdio.h>
#include <string.h>

#include "collective.h"

#define DGC_MIN_NUMEL 16384 /* Paddle's _is_use_dgc threshold */
#define DGC_COUNTER "__g_dgc_counter__"

/* ---- c_dgc_allreduce ------------------------------------------------------------------------- */

typedef struct {
    size_t cap;
    uint32_t w[]; /* send (2k) then receive (n * 2k) */
} xbuf;

static int run_dgc_allreduce(fl_kctx *c)
{
    const fl_op *op = c->op;
    int64_t id = fl__attr_i(op, "ring_id", -1);
    fl_ring *cm = fl__ring_lookup(id);
    if (!cm) return fl__err(FL_ESTATE, "c_dgc_allreduce: no communicator with ring_id %lld", (long long)id);
    fl_tensor *ei = FL_IN(c, 0), *ev = FL_IN(c, 1), *kt = FL_IN(c, 2), *st = FL_IN(c, 3), *g = FL_IN(c, 4);
    fl_tensor *o = FL_OUT(c, 0);
    const char *gn = op->in[4].vars[0]->name;
    if (st->dtype != FL_INT64 || st->numel < 1 || kt->dtype != FL_INT64 || kt->numel < 1)
        return fl__err(FL_EINVAL, "c_dgc_allreduce: current_step and k of '%s' must be int64 scalars", gn);
    if (g->dtype != FL_FLOAT32 || g->is_rows)
        return fl__err(FL_EINVAL, "c_dgc_allreduce: gradient '%s' must be a dense float32 tensor", gn);
    if (o != g) FL_CHECK(fl_tensor_copy(o, g));
    int n = fl__ring_size(cm);
    int64_t step = ((const int64_t *)st->data)[0], k = ((const int64_t *)kt->data)[0], numel = o->numel;
    float *gv = o->data;
    uint64_t b0 = fl__ring_bytes_sent(cm);
    if (step < fl__attr_i(op, "rampup_begin_step", 0)) {
        FL_CHECK(fl__ring_allreduce(cm, gv, (size_t)numel, FL_FLOAT32, "sum"));
        fl__vscal(gv, 1.0f / (float)n, numel);
        fl__ring_dgc_count(cm, step, 0, fl__ring_bytes_sent(cm) - b0);
        return FL_OK;
    }
    if (k < 1 || k > numel || ei->dtype != FL_INT32 || ev->dtype != FL_FLOAT32 || ei->numel != k || ev->numel != k)
        return fl__err(FL_EINVAL,
                       "c_dgc_allreduce: the encoded gradient of '%s' is malformed (k %lld, %lld indices, "
                       "%lld values, %lld elements)",
                       gn, (long long)k, (long long)ei->numel, (long long)ev->numel, (long long)numel);
    size_t words = (size_t)(2 * k), need = words * (size_t)(n + 1);
    xbuf *b = *c->state;
    if (!b || b->cap < need) {
        free(b);
        b = malloc(sizeof *b + need * sizeof(uint32_t));
        *c->state = b;
        if (!b) return fl__err(FL_ENOMEM, "c_dgc_allreduce: out of memory for %lld pairs of '%s'", (long long)k, gn);
        b->cap = need;
    }
    uint32_t *send = b->w, *recv = b->w + words;
    memcpy(send, ei->data, (size_t)k * sizeof(uint32_t));
    memcpy(send + k, ev->data, (size_t)k * sizeof(uint32_t));
    FL_CHECK(fl__ring_allgather(cm, send, recv, words, FL_INT32));
    memset(gv, 0, (size_t)numel * sizeof(float));
    const float scale = 1.0f / (float)n; /* applied per pair: the rest of the gradient is 0 */
    for (int r = 0; r < n; r++) {
        const uint32_t *ri = recv + (size_t)r * words;
        for (int64_t j = 0; j < k; j++) {
            int32_t i = (int32_t)ri[j];
            float x;
            memcpy(&x, ri + k + j, sizeof x); /* the value's bits, as sent */
            if (i < 0 || i >= numel)
                return fl__err(FL_EPROTO, "c_dgc_allreduce: rank %d sent index %d for '%s', outside its %lld elements", r,
                               i, gn, (long long)numel);
            gv[i] += scale * x;
        }
    }
    fl__ring_dgc_count(cm, step, 1, fl__ring_bytes_sent(cm) - b0);
    return FL_OK;
}

static const fl_op_def def_dgc_allreduce = {"c_dgc_allreduce",
                                            {"EncodeIdx", "EncodeVal", "k", "current_step", "Grad"},
                                            {"Grad_out"},
                                            fl__infer_nop,
                                            run_dgc_allreduce,
                                            NULL,
                                            NULL};

const fl_op_def *const fl__ops_dgc_collective[] = {&def_dgc_allreduce, NULL};

/* ---- the rewrite ------------------------------------------------------------------------------- */

int fl__dgc_applies(const fleet_t *f, const fl_param_grad *pg)
{
    const fl_var *w = pg->param;
    if (!f->strategy.dgc || !f->ring || fl__ring_size(f->ring) < 2) return 0;
    if (w->dtype != FL_FLOAT32 || pg->grad->is_sparse_grad) return 0;
    return fl__dims_prod(w->shape, 0, w->ndim) >= DGC_MIN_NUMEL;
}

static int find_update(const fl_prog *p, const fl_var *w)
{
    for (int i = 0; i < p->nops; i++)
        if (!strcmp(p->ops[i]->def->type, "momentum") && p->ops[i]->in[0].n && p->ops[i]->in[0].vars[0] == w) return i;
    return -1;
}

/* Appends op and moves it to position pos. */
static int place(fl_prog *p, fl_op *op, int pos)
{
    FL_CHECK(fl__op_finish(op));
    return fl__prog_move_last_op(p, pos);
}

static fl_var *tmp(fl_prog *p, const fl_var *w, const char *suffix, fl_dtype dt, int64_t dim)
{
    char name[512];
    snprintf(name, sizeof name, "%s%s", w->name, suffix);
    fl_var *v = fl_prog_var(p, name);
    return v ? v : fl__var_create(p, name, dt, 1, &dim);
}

static int rewrite_one(fleet_t *f, fl_prog *p, fl_var *w, fl_var *step, const float *sp, int nsp)
{
    const fleet_strategy *s = &f->strategy;
    int at = find_update(p, w);
    if (at < 0)
        return fl__prog_error(p, FL_ESTATE, "strategy.dgc: no momentum update op found for parameter '%s'", w->name);
    fl_op *mo = p->ops[at];
    fl_var *g = mo->in[1].vars[0], *lr = mo->in[2].vars[0], *u = mo->in[3].vars[0];
    fl_var *wout = mo->out[0].vars[0], *uout = mo->out[1].vars[0], *cond = mo->cond;
    double mu = fl__attr_f(mo, "mu", 0.0), l2 = fl__attr_f(mo, "l2", 0.0), lrs = fl__attr_f(mo, "lr_scale", 1.0);
    int64_t nesterov = fl__attr_i(mo, "use_nesterov", 0), begin = s->dgc_configs.rampup_begin_step;
    char name[512];
    snprintf(name, sizeof name, "%s_dgc_v_0", w->name);
    fl_var *v = fl__persistable_create(p, name, FL_FLOAT32, w->ndim, w->shape, 0.0f);
    fl_var *idx = v ? tmp(p, w, "__dgc_idx__", FL_INT32, -1) : NULL;
    fl_var *val = idx ? tmp(p, w, "__dgc_val__", FL_FLOAT32, -1) : NULL;
    fl_var *k = val ? tmp(p, w, "__dgc_k__", FL_INT64, 1) : NULL;
    if (!k) return fl_prog_status(p);

    fl_io din[5] = {FL_IO1("U", u), FL_IO1("V", v), FL_IO1("Grad", g), FL_IO1("Param", w), FL_IO1("current_step", step)};
    fl_io dout[6] = {FL_IO1("U_out", u),       FL_IO1("V_out", v),    FL_IO1("EncodeIdx", idx),
                     FL_IO1("EncodeVal", val), FL_IO1("Grad_out", g), FL_IO1("k", k)};
    fl_op *op = fl__op_new(p, "dgc", din, 5, dout, 6);
    if (!op) return fl_prog_status(p);
    FL_CHECK(fl__attr_set_f(op, "m", mu));
    FL_CHECK(fl__attr_set_i(op, "use_nesterov", nesterov));
    FL_CHECK(fl__attr_set_floats(op, "sparsity", sp, nsp));
    FL_CHECK(fl__attr_set_i(op, "rampup_begin_step", begin));
    FL_CHECK(fl__attr_set_i(op, "rampup_step", s->dgc_configs.rampup_step));
    FL_CHECK(fl__attr_set_f(op, "regular_coeff", l2));
    op->cond = cond;
    FL_CHECK(place(p, op, at++));

    fl_io ain[5] = {FL_IO1("EncodeIdx", idx), FL_IO1("EncodeVal", val), FL_IO1("k", k), FL_IO1("current_step", step),
                    FL_IO1("Grad", g)};
    fl_io aout = FL_IO1("Grad_out", g);
    op = fl__op_new(p, "c_dgc_allreduce", ain, 5, &aout, 1);
    if (!op) return fl_prog_status(p);
    FL_CHECK(fl__attr_set_i(op, "single_trainer", 1));
    FL_CHECK(fl__attr_set_i(op, "ring_id", fl__ring_id(f->ring)));
    FL_CHECK(fl__attr_set_i(op, "rampup_begin_step", begin));
    op->cond = cond;
    FL_CHECK(place(p, op, at++));

    /* the momentum op (now at `at`) becomes dgc_momentum */
    fl_io min[5] = {FL_IO1("Param", w), FL_IO1("Grad", g), FL_IO1("LearningRate", lr), FL_IO1("Velocity", u),
                    FL_IO1("current_step", step)};
    fl_io mout[2] = {FL_IO1("ParamOut", wout), FL_IO1("VelocityOut", uout)};
    fl__prog_remove_op(p, at);
    op = fl__op_new(p, "dgc_momentum", min, 5, mout, 2);
    if (!op) return fl_prog_status(p);
    FL_CHECK(fl__attr_set_f(op, "mu", mu));
    FL_CHECK(fl__attr_set_i(op, "use_nesterov", nesterov));
    FL_CHECK(fl__attr_set_i(op, "rampup_begin_step", begin));
    FL_CHECK(fl__attr_set_f(op, "l2", 0.0)); /* applied by dgc */
    FL_CHECK(fl__attr_set_f(op, "lr_scale", lrs));
    op->cond = cond;
    return place(p, op, at);
}

int fl__dgc_rewrite(fleet_t *f, fl_prog *p, fl_opt_hook_ctx *h)
{
    fl__coll_rt *rt = f->rt;
    float sp[FLEET_DGC_MAX_SPARSITY];
    int nsp = 0, st = FL_OK;
    FL_CHECK(fl__strategy_dgc_sparsity(&f->strategy, sp, &nsp));
    fl_var *step = NULL;
    for (int i = 0; i < h->npairs && st == FL_OK; i++) {
        if (!fl__dgc_applies(f, &h->pairs[i])) continue;
        if (!step) {
            int64_t one = 1;
            step = fl_prog_var(p, DGC_COUNTER);
            if (!step) step = fl__persistable_create(p, DGC_COUNTER, FL_INT64, 1, &one, 0.0f);
            if (!step) return fl_prog_status(p);
        }
        st = rewrite_one(f, p, h->pairs[i].param, step, sp, nsp);
        if (st == FL_OK) rt->dgc_params++;
    }
    if (st != FL_OK || !step) return st;
    fl_io in = FL_IO1("X", step), out = FL_IO1("Out", step);
    fl_op *inc = fl__op_new(p, "increment", &in, 1, &out, 1);
    if (!inc) return fl_prog_status(p);
    FL_CHECK(fl__attr_set_f(inc, "step", 1.0));
    FL_CHECK(fl__op_finish(inc));
    FL_INFO(FL_SUB_FLEET, "strategy.dgc: %lld of %d parameters compressed (sparsity %s, rampup from step %lld over %lld)",
            (long long)rt->dgc_params, h->npairs, f->strategy.dgc_configs.sparsity,
            (long long)f->strategy.dgc_configs.rampup_begin_step, (long long)f->strategy.dgc_configs.rampup_step);
    return FL_OK;
}

void fl__dgc_report(fleet_t *f)
{
    fleet_dgc_stats s;
    if (fleet_dgc_stats_get(f, &s) != FL_OK || !s.params) return;
    FL_INFO(FL_SUB_FLEET,
            "strategy.dgc: %lld compressed parameters; %lld dense steps, %.0f bytes sent per step for them; %lld "
            "sparse steps, %.0f bytes sent per step",
            (long long)s.params, (long long)s.dense_steps,
            s.dense_steps ? (double)s.dense_bytes / (double)s.dense_steps : 0.0, (long long)s.sparse_steps,
            s.sparse_steps ? (double)s.sparse_bytes / (double)s.sparse_steps : 0.0);
}

int fleet_dgc_stats_get(fleet_t *f, fleet_dgc_stats *out)
{
    if (!f || f->magic != FLEET_MAGIC || !out)
        return fl__err(FL_EINVAL, "fleet_dgc_stats_get: fleet handle or out is NULL or invalid");
    memset(out, 0, sizeof *out);
    if (f->runtime != &fl__runtime_collective || !f->ring || !f->rt) return FL_OK;
    *out = fl__ring_dgc_stats(f->ring);
    out->params = ((const fl__coll_rt *)f->rt)->dgc_params;
    return FL_OK;
}
