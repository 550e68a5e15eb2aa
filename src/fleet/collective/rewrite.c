/*
 * rewrite.c - collective (data-parallel) training: the program rewrite behind
 * fleet_distributed_optimizer() in the collective runtime.
 *
 * After backward, gradients are grouped into fusion buckets of fuse_grad_size_in_MB in the
 * order backward produces them; right after the op that completes a bucket, a
 * c_allreduce_start op packs it and queues its allreduce on the communication thread, so
 * communication overlaps the rest of backward.  One c_allreduce_wait before the optimizer
 * waits for all buckets and writes back sum/n.  Sparse (SelectedRows) gradients are
 * all-gathered (rows and values of every rank, values scaled by 1/n): each rank then
 * applies the same lazy sparse update, and no vocabulary-sized buffer is ever sent.
 * The startup program gets a c_broadcast of every parameter from rank 0.
 * LocalSGD averages parameters every k_steps instead of allreducing gradients; gradient
 * merge sums gradients over k_steps and runs the (conditional) optimizer on the last.
 * strategy.dgc keeps the large parameters' gradients out of the buckets and rewrites their
 * momentum ops after the update (dgc.c).
 */
#include <stdio.h>
#include <string.h>

#include "collective.h"

static fl__coll_rt *rt_of(fleet_t *f) { return f->rt; }

typedef struct {
    fl_param_grad pg;
    int writer; /* index of the last op writing the gradient */
    size_t numel;
} gitem;

static int cmp_writer(const void *a, const void *b)
{
    const gitem *x = a, *y = b;
    return (x->writer > y->writer) - (x->writer < y->writer);
}

/* Ring ops exchange one step per process: single_trainer keeps train_from_dataset at one
 * trainer thread. */
static int set_ring(fl_op *op, fleet_t *f)
{
    FL_CHECK(fl__attr_set_i(op, "single_trainer", 1));
    return fl__attr_set_i(op, "ring_id", fl__ring_id(f->ring));
}

static int append_broadcast(fleet_t *f, fl_prog *p, fl_opt_hook_ctx *h)
{
    fl_prog *sp = p->startup;
    fl_var **vs = malloc((size_t)(h->npairs ? h->npairs : 1) * sizeof *vs);
    if (!vs) return fl__err(FL_ENOMEM, "out of memory");
    int n = 0;
    for (int i = 0; i < h->npairs; i++) {
        fl_var *v = fl_prog_var(sp, h->pairs[i].param->name);
        if (v) vs[n++] = v;
    }
    int st = FL_OK;
    if (n) {
        fl_io in = {"X", vs, n}, out = {"Out", vs, n};
        fl_op *op = fl__op_new(sp, "c_broadcast", &in, 1, &out, 1);
        st = !op ? fl_prog_status(p) : set_ring(op, f);
        if (st == FL_OK) st = fl__attr_set_i(op, "root", 0);
        if (st == FL_OK) st = fl__op_finish(op);
    }
    free(vs);
    return st;
}

/* Appends c_allreduce_start for `items[from, to)` as bucket b, placed right after
 * position `after` (the last writer), and returns how many ops were inserted (1). */
static int insert_start(fleet_t *f, fl_prog *p, gitem *items, int from, int to, int b, int pos, fl_var *cond)
{
    fl_var **vs = malloc((size_t)(to - from) * sizeof *vs);
    if (!vs) return fl__err(FL_ENOMEM, "out of memory");
    for (int i = from; i < to; i++) vs[i - from] = items[i].pg.grad;
    fl_io in = {"X", vs, to - from};
    fl_op *op = fl__op_new(p, "c_allreduce_start", &in, 1, NULL, 0);
    int st = !op ? fl_prog_status(p) : set_ring(op, f);
    if (st == FL_OK) st = fl__attr_set_i(op, "bucket", b);
    if (st == FL_OK) {
        op->cond = cond;
        st = fl__op_finish(op);
    }
    if (st == FL_OK && pos >= 0) st = fl__prog_move_last_op(p, pos);
    free(vs);
    return st;
}

/* Buckets the dense gradients and inserts start ops (after their writers when overlap is
 * wanted, else at the end) and one wait op at the end. */
static int allreduce_dense(fleet_t *f, fl_prog *p, gitem *items, int n, int overlap, fl_var *cond)
{
    if (!n) return FL_OK;
    if (overlap) qsort(items, (size_t)n, sizeof *items, cmp_writer);
    size_t limit = (size_t)(f->strategy.fuse_grad_size_in_MB * 1024.0 * 1024.0 / 4.0);
    if (limit < 1) limit = 1;
    int64_t *sizes = malloc((size_t)n * sizeof *sizes);
    if (!sizes) return fl__err(FL_ENOMEM, "out of memory");
    int nb = 0, from = 0, inserted = 0, st = FL_OK;
    size_t acc = 0;
    for (int i = 0; i < n && st == FL_OK; i++) {
        acc += items[i].numel;
        int last = i == n - 1;
        int close = last || !f->strategy.fuse_all_reduce_ops || acc + items[i + 1].numel > limit;
        if (!close) continue;
        int pos = overlap ? items[i].writer + 1 + inserted : -1;
        st = insert_start(f, p, items, from, i + 1, nb, pos, cond);
        inserted++;
        sizes[nb++] = i + 1 - from;
        from = i + 1;
        acc = 0;
    }
    if (st == FL_OK) {
        fl_var **vs = malloc((size_t)n * sizeof *vs);
        if (!vs) st = fl__err(FL_ENOMEM, "out of memory");
        for (int i = 0; vs && i < n; i++) vs[i] = items[i].pg.grad;
        fl_io in = {"X", vs, n}, out = {"Out", vs, n};
        fl_op *op = vs ? fl__op_new(p, "c_allreduce_wait", &in, 1, &out, 1) : NULL;
        if (vs && !op) st = fl_prog_status(p);
        if (op && st == FL_OK) st = set_ring(op, f);
        if (op && st == FL_OK) st = fl__attr_set_ints(op, "bucket_sizes", sizes, nb);
        if (op && st == FL_OK) {
            op->cond = cond;
            st = fl__op_finish(op);
        }
        free(vs);
    }
    free(sizes);
    return st;
}

static int last_writer(const fl_prog *p, const fl_var *v)
{
    int w = -1;
    for (int i = 0; i < p->nops; i++)
        for (int s = 0; s < FL_OP_MAX_SLOTS; s++)
            for (int k = 0; k < p->ops[i]->out[s].n; k++)
                if (p->ops[i]->out[s].vars[k] == v) w = i;
    return w;
}

static fl_var *int_state(fl_prog *p, const char *name)
{
    fl_var *v = fl_prog_var(p, name);
    if (v) return v;
    int64_t one = 1;
    return fl__persistable_create(p, name, FL_INT64, 1, &one, 0.0f);
}

static int gradient_merge(fleet_t *f, fl_prog *p, fl_opt_hook_ctx *h, int distributed)
{
    int n = h->npairs;
    fl_var **grads = malloc((size_t)(n ? n : 1) * sizeof *grads), **accs = malloc((size_t)(n ? n : 1) * sizeof *accs);
    gitem *items = calloc((size_t)(n ? n : 1), sizeof *items);
    int st = FL_OK;
    if (!grads || !accs || !items) st = fl__err(FL_ENOMEM, "out of memory");
    fl_var *step = st == FL_OK ? int_state(p, "@GRADIENT_MERGE_STEP@") : NULL;
    int64_t one = 1;
    fl_var *cond = step ? fl__var_create(p, "@GRADIENT_MERGE_COND@", FL_INT64, 1, &one) : NULL;
    if (st == FL_OK && (!step || !cond)) st = fl_prog_status(p);
    for (int i = 0; i < n && st == FL_OK; i++) {
        fl_var *w = h->pairs[i].param;
        char name[512];
        snprintf(name, sizeof name, "%s@GradientMerge", w->name);
        grads[i] = h->pairs[i].grad;
        accs[i] = fl__persistable_create(p, name, FL_FLOAT32, w->ndim, w->shape, 0.0f);
        if (!accs[i]) st = fl_prog_status(p);
    }
    if (st == FL_OK) {
        fl_io in[2] = {{"Grad", grads, n}, FL_IO1("Step", step)};
        fl_io out[3] = {{"Merged", accs, n}, FL_IO1("Cond", cond), FL_IO1("StepOut", step)};
        fl_op *op = fl__op_new(p, "gm_accumulate", in, 2, out, 3);
        st = !op ? fl_prog_status(p) : fl__attr_set_i(op, "k_steps", f->strategy.gradient_merge_configs.k_steps);
        if (st == FL_OK) st = fl__attr_set_i(op, "avg", f->strategy.gradient_merge_configs.avg);
        if (st == FL_OK) st = fl__op_finish(op);
    }
    for (int i = 0; i < n && st == FL_OK; i++) {
        items[i].pg.param = h->pairs[i].param;
        items[i].pg.grad = accs[i];
        items[i].numel = (size_t)fl__dims_prod(h->pairs[i].param->shape, 0, h->pairs[i].param->ndim);
        h->pairs[i].grad = accs[i];
    }
    if (st == FL_OK && distributed) st = allreduce_dense(f, p, items, n, 0, cond);
    if (st == FL_OK) {
        h->update_cond = cond;
        rt_of(f)->gm_cond = cond;
    }
    free(grads);
    free(accs);
    free(items);
    return st;
}

/* Gradient merge, after the update ops: the learning-rate schedule advances once per update,
 * as with the k-times larger batch (not once per micro-batch): its ops (role LRSCHED: the
 * @LR_DECAY_COUNTER@ increment and the schedules, at the front of the program or appended
 * by minimize) move after gm_accumulate, in their order, and run under the apply-step
 * condition.  Only the update ops read the learning rate. */
static int gm_schedule(fl_prog *p, fl_var *cond)
{
    int acc = -1;
    for (int i = 0; i < p->nops && acc < 0; i++)
        if (!strcmp(p->ops[i]->def->type, "gm_accumulate")) acc = i;
    if (acc < 0) return fl__prog_error(p, FL_EINVAL, "gradient merge: the program has no gm_accumulate op");
    fl_op **lr = malloc((size_t)(acc + 1) * sizeof *lr);
    if (!lr) return fl__err(FL_ENOMEM, "out of memory");
    int k = 0, m = 0;
    for (int i = 0; i <= acc; i++) {
        if (p->ops[i]->role == FL_ROLE_LRSCHED) lr[m++] = p->ops[i];
        else p->ops[k++] = p->ops[i];
    }
    memcpy(p->ops + k, lr, (size_t)m * sizeof *lr);
    free(lr);
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i]->role == FL_ROLE_LRSCHED) p->ops[i]->cond = cond;
    p->version++;
    return FL_OK;
}

/* The loss: the variable whose gradient backward seeds with fill_constant (1). */
static fl_var *loss_of(fl_prog *p)
{
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        if (op->role != FL_ROLE_BACKWARD || strcmp(op->def->type, "fill_constant") || op->out[0].n != 1) continue;
        const char *g = op->out[0].vars[0]->name;
        size_t n = strlen(g);
        char name[256];
        if (n <= 5 || n - 5 >= sizeof name || strcmp(g + n - 5, "@GRAD")) continue;
        memcpy(name, g, n - 5);
        name[n - 5] = 0;
        return fl_prog_var(p, name);
    }
    return NULL;
}

/* The learning-rate variable of param's update op. */
static fl_var *lr_of(fl_prog *p, const fl_var *param)
{
    for (int i = 0; i < p->nops; i++) {
        const fl_op *op = p->ops[i];
        if (op->role == FL_ROLE_OPTIMIZE && op->in[0].n == 1 && op->in[0].vars[0] == param && op->in[2].n == 1)
            return op->in[2].vars[0];
    }
    return NULL;
}

static int adaptive_localsgd(fleet_t *f, fl_prog *p, fl_opt_hook_ctx *h)
{
    const fleet_strategy *s = &f->strategy;
    int n = h->npairs;
    if (!n) return FL_OK;
    fl_var *loss = loss_of(p), *lr = lr_of(p, h->pairs[0].param);
    if (!loss || !lr)
        return fl__prog_error(p, FL_EINVAL, "adaptive_localsgd: cannot find the %s of the program",
                              loss ? "learning rate" : "loss");
    fl_var **ps = malloc((size_t)n * sizeof *ps);
    if (!ps) return fl__err(FL_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) ps[i] = h->pairs[i].param;
    int64_t four = 4;
    fl_var *step = int_state(p, "@LOCALSGD_STEP@");
    fl_var *state = step ? fl_prog_var(p, "@ADAPTIVE_LOCALSGD@") : NULL;
    if (step && !state) state = fl__persistable_create(p, "@ADAPTIVE_LOCALSGD@", FL_FLOAT32, 1, &four, 0.0f);
    int st = step && state ? FL_OK : fl_prog_status(p);
    if (st == FL_OK) {
        fl_io in[5] = {{"Param", ps, n},
                       FL_IO1("Step", step),
                       FL_IO1("Loss", loss),
                       FL_IO1("LearningRate", lr),
                       FL_IO1("State", state)};
        fl_io out[3] = {{"ParamOut", ps, n}, FL_IO1("StepOut", step), FL_IO1("StateOut", state)};
        fl_op *op = fl__op_new(p, "c_adaptive_localsgd", in, 5, out, 3);
        st = !op ? fl_prog_status(p) : set_ring(op, f);
        if (st == FL_OK) st = fl__attr_set_i(op, "init_k_steps", s->adaptive_localsgd_configs.init_k_steps);
        if (st == FL_OK) st = fl__attr_set_i(op, "begin_step", s->adaptive_localsgd_configs.begin_step);
        if (st == FL_OK) st = fl__op_finish(op);
    }
    free(ps);
    return st;
}

static int hook(void *user, int phase, fl_opt_hook_ctx *h)
{
    fleet_t *f = user;
    fl_prog *p = h->prog;
    int distributed = f->ring && fl__ring_size(f->ring) > 1;
    const fleet_strategy *s = &f->strategy;
    if (phase == FL_HOOK_AFTER_BACKWARD) {
        if ((s->localsgd || s->adaptive_localsgd) && strcmp(h->opt_type, "sgd") != 0 &&
            strcmp(h->opt_type, "momentum") != 0)
            return fl__prog_error(p, FL_EUNSUPPORTED, "%s works with the sgd or momentum optimizer, not %s",
                                  s->localsgd ? "localsgd" : "adaptive_localsgd", h->opt_type);
        if (distributed) FL_CHECK(append_broadcast(f, p, h));
        if (s->gradient_merge) return gradient_merge(f, p, h, distributed);
        if (!distributed || s->localsgd || s->adaptive_localsgd) return FL_OK;
        gitem *items = calloc((size_t)(h->npairs ? h->npairs : 1), sizeof *items);
        if (!items) return fl__err(FL_ENOMEM, "out of memory");
        int nd = 0, st = FL_OK;
        for (int i = 0; i < h->npairs; i++) {
            if (h->pairs[i].grad->is_sparse_grad || fl__dgc_applies(f, &h->pairs[i])) continue;
            items[nd].pg = h->pairs[i];
            items[nd].writer = last_writer(p, h->pairs[i].grad);
            items[nd].numel = (size_t)fl__dims_prod(h->pairs[i].param->shape, 0, h->pairs[i].param->ndim);
            nd++;
        }
        st = allreduce_dense(f, p, items, nd, 1, NULL);
        /* sparse gradients after the wait: one thread at a time talks on the communicator */
        for (int i = 0; i < h->npairs && st == FL_OK; i++) {
            fl_var *g = h->pairs[i].grad;
            if (!g->is_sparse_grad) continue;
            fl_io in = FL_IO1("X", g), out = FL_IO1("Out", g);
            fl_op *op = fl__op_new(p, "c_sparse_allgather", &in, 1, &out, 1);
            st = !op ? fl_prog_status(p) : set_ring(op, f);
            if (st == FL_OK) st = fl__op_finish(op);
        }
        free(items);
        return st;
    }
    /* after the update ops */
    if (s->dgc) {
        if (distributed) return fl__dgc_rewrite(f, p, h);
        FL_INFO(FL_SUB_FLEET, "strategy.dgc: one worker, nothing to compress (plain momentum)");
        return FL_OK;
    }
    if (s->gradient_merge && rt_of(f)->gm_cond) {
        int n = h->npairs;
        fl_var **accs = malloc((size_t)(n ? n : 1) * sizeof *accs);
        if (!accs) return fl__err(FL_ENOMEM, "out of memory");
        /* the accumulators by name: h->pairs' gradients may be their clipped copies now */
        for (int i = 0; i < n; i++) {
            char name[512];
            snprintf(name, sizeof name, "%s@GradientMerge", h->pairs[i].param->name);
            if (!(accs[i] = fl_prog_var(p, name))) {
                free(accs);
                return fl__prog_error(p, FL_EINVAL, "gradient merge: no accumulator '%s'", name);
            }
        }
        fl_io in = {"Merged", accs, n}, out = {"MergedOut", accs, n};
        fl_op *op = fl__op_new(p, "gm_zero", &in, 1, &out, 1);
        int st = !op ? fl_prog_status(p) : FL_OK;
        if (op) {
            op->cond = rt_of(f)->gm_cond;
            st = fl__op_finish(op);
        }
        free(accs);
        return st == FL_OK ? gm_schedule(p, rt_of(f)->gm_cond) : st;
    }
    if (s->adaptive_localsgd && distributed) return adaptive_localsgd(f, p, h);
    if (s->localsgd && distributed) {
        int n = h->npairs;
        fl_var **ps = malloc((size_t)(n ? n : 1) * sizeof *ps);
        if (!ps) return fl__err(FL_ENOMEM, "out of memory");
        for (int i = 0; i < n; i++) ps[i] = h->pairs[i].param;
        fl_var *step = int_state(p, "@LOCALSGD_STEP@");
        int st = step ? FL_OK : fl_prog_status(p);
        if (st == FL_OK) {
            fl_io in[2] = {{"Param", ps, n}, FL_IO1("Step", step)};
            fl_io out[2] = {{"ParamOut", ps, n}, FL_IO1("StepOut", step)};
            fl_op *op = fl__op_new(p, "c_localsgd", in, 2, out, 2);
            st = !op ? fl_prog_status(p) : set_ring(op, f);
            if (st == FL_OK) st = fl__attr_set_i(op, "k_steps", s->localsgd_configs.k_steps);
            if (st == FL_OK) st = fl__attr_set_i(op, "begin_step", s->localsgd_configs.begin_step);
            if (st == FL_OK) st = fl__op_finish(op);
        }
        free(ps);
        return st;
    }
    return FL_OK;
}

int fl__collective_install(fleet_t *f, fl_opt *opt)
{
    FL_CHECK(fl__op_register_group(fl__ops_collective));
    FL_CHECK(fl__op_register_group(fl__ops_dgc_collective));
    return fl__opt_set_hook(opt, hook, f);
}
