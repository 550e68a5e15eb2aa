/*
 * optimizer.c - optimizers appended by minimize(): backward, learning-rate variables and
 * schedules, then one update op per parameter (sgd, momentum, adagrad, adam).  Each update
 * op applies L2 regularization (grad += l2 * param, optimizer coefficient plus the
 * parameter's own) and the parameter's learning-rate scale, and takes the sparse
 * (SelectedRows) path at run time when the gradient holds rows.
 */
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

#define FL_OPT_MAGIC 0x4f505421u

struct fl_opt {
    uint32_t magic;
    char type[16];
    float lr, mu, beta1, beta2, eps;
    int nesterov;
    float l2;
    int has_decay, staircase; /* has_decay: 1 exponential_decay, 2 cosine_decay */
    int64_t decay_steps;      /* cosine: step_each_epoch */
    float decay_rate;
    int64_t decay_epochs; /* cosine */
    fl_opt_hook_fn hook;
    void *hook_user;
    fl_opt_hook_fn pre_hook; /* FL_HOOK_BEFORE_BACKWARD (AMP, src/fleet/amp.c) */
    void *pre_user;
};

int fl__opt_set_hook(fl_opt *o, fl_opt_hook_fn fn, void *user)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err_handle(o, "optimizer is NULL or invalid");
    o->hook = fn;
    o->hook_user = user;
    return FL_OK;
}

int fl__opt_set_pre_hook(fl_opt *o, fl_opt_hook_fn fn, void *user)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err_handle(o, "optimizer is NULL or invalid");
    o->pre_hook = fn;
    o->pre_user = user;
    return FL_OK;
}

static fl_opt *opt_new(const char *type, float lr)
{
    fl_opt *o = calloc(1, sizeof *o);
    if (!o) {
        fl__err(FL_ENOMEM, "optimizer: out of memory");
        return NULL;
    }
    o->magic = FL_OPT_MAGIC;
    snprintf(o->type, sizeof o->type, "%s", type);
    o->lr = lr;
    return o;
}

fl_opt *fl_opt_sgd(float lr) { return opt_new("sgd", lr); }

fl_opt *fl_opt_momentum(float lr, float momentum, int use_nesterov)
{
    fl_opt *o = opt_new("momentum", lr);
    if (o) {
        o->mu = momentum;
        o->nesterov = use_nesterov;
    }
    return o;
}

fl_opt *fl_opt_adagrad(float lr, float epsilon)
{
    fl_opt *o = opt_new("adagrad", lr);
    if (o) o->eps = epsilon;
    return o;
}

fl_opt *fl_opt_adam(float lr, float beta1, float beta2, float epsilon)
{
    fl_opt *o = opt_new("adam", lr);
    if (o) {
        o->beta1 = beta1;
        o->beta2 = beta2;
        o->eps = epsilon;
    }
    return o;
}

void fl_opt_free(fl_opt *o)
{
    if (!o || o->magic != FL_OPT_MAGIC) return;
    o->magic = 0;
    free(o);
}

const char *fl_opt_type(const fl_opt *o) { return o ? o->type : NULL; }

int fl_opt_set_l2(fl_opt *o, float coeff)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err(FL_EINVAL, "fl_opt_set_l2: optimizer is NULL");
    if (!(coeff >= 0.0f)) return fl__err(FL_EINVAL, "fl_opt_set_l2: coefficient must be >= 0, got %g", (double)coeff);
    o->l2 = coeff;
    return FL_OK;
}

int fl_opt_set_exponential_decay(fl_opt *o, int64_t decay_steps, float decay_rate, int staircase)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err(FL_EINVAL, "fl_opt_set_exponential_decay: optimizer is NULL");
    if (decay_steps <= 0)
        return fl__err(FL_EINVAL, "fl_opt_set_exponential_decay: decay_steps must be > 0, got %lld",
                       (long long)decay_steps);
    if (!(decay_rate > 0.0f))
        return fl__err(FL_EINVAL, "fl_opt_set_exponential_decay: decay_rate must be > 0, got %g", (double)decay_rate);
    o->has_decay = 1;
    o->decay_steps = decay_steps;
    o->decay_rate = decay_rate;
    o->staircase = staircase;
    return FL_OK;
}

int fl_opt_set_cosine_decay(fl_opt *o, int64_t step_each_epoch, int64_t epochs)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err(FL_EINVAL, "fl_opt_set_cosine_decay: optimizer is NULL");
    if (step_each_epoch <= 0 || epochs <= 0)
        return fl__err(FL_EINVAL, "fl_opt_set_cosine_decay: step_each_epoch and epochs must be > 0, got %lld and %lld",
                       (long long)step_each_epoch, (long long)epochs);
    o->has_decay = 2;
    o->decay_steps = step_each_epoch;
    o->decay_epochs = epochs;
    return FL_OK;
}

static fl_var *state_var(fl_prog *p, const fl_var *param, const char *suffix, int ndim, const int64_t *shape, float value)
{
    char name[512];
    snprintf(name, sizeof name, "%s_%s_0", param->name, suffix);
    fl_var *v = fl__persistable_create(p, name, FL_FLOAT32, ndim, shape, value);
    return v;
}

static fl_var *make_lr(fl_opt *o, fl_prog *p)
{
    int64_t one = 1;
    char name[64];
    fl__unique_name(p, "learning_rate", name, sizeof name);
    fl_var *lr = fl__persistable_create(p, name, FL_FLOAT32, 1, &one, o->lr);
    if (!lr || !o->has_decay) return lr;
    fl__prog_set_role(p, FL_ROLE_LRSCHED);
    fl_var *step = fl_prog_var(p, "@LR_DECAY_COUNTER@");
    if (!step) step = fl__persistable_create(p, "@LR_DECAY_COUNTER@", FL_INT64, 1, &one, 0.0f);
    if (!step) return NULL;
    fl_io in = FL_IO1("Step", step), out = FL_IO1("LearningRate", lr);
    /* the schedules: one op each (ops_optim.c), its attributes set here */
    fl_op *op = fl__op_new(p, o->has_decay == 2 ? "cosine_decay" : "exponential_decay", &in, 1, &out, 1);
    if (!op || fl__attr_set_f(op, "learning_rate", o->lr)) return NULL;
    int bad = o->has_decay == 2
                  ? fl__attr_set_i(op, "step_each_epoch", o->decay_steps) || fl__attr_set_i(op, "epochs", o->decay_epochs)
                  : fl__attr_set_i(op, "decay_steps", o->decay_steps) || fl__attr_set_f(op, "decay_rate", o->decay_rate) ||
                        fl__attr_set_i(op, "staircase", o->staircase);
    if (bad) return NULL;
    if (fl__op_finish(op)) return NULL;
    fl_io sin = FL_IO1("X", step), sout = FL_IO1("Out", step);
    fl_op *inc = fl__op_new(p, "increment", &sin, 1, &sout, 1);
    if (!inc || fl__attr_set_f(inc, "step", 1.0) || fl__op_finish(inc)) return NULL;
    return lr;
}

static int append_update(fl_opt *o, fl_prog *p, fl_var *lr, fl_param_grad pg, fl_var *cond)
{
    fl_var *w = pg.param, *gr = pg.grad;
    fl_io in[8], out[6];
    int ni = 0, no = 0;
    in[ni++] = (fl_io)FL_IO1("Param", w);
    in[ni++] = (fl_io)FL_IO1("Grad", gr);
    in[ni++] = (fl_io)FL_IO1("LearningRate", lr);
    out[no++] = (fl_io)FL_IO1("ParamOut", w);
    fl_var *s[4] = {NULL};
    int64_t one = 1;
    if (!strcmp(o->type, "momentum")) {
        if (!(s[0] = state_var(p, w, "velocity", w->ndim, w->shape, 0.0f))) return fl_prog_status(p);
        in[ni++] = (fl_io){"Velocity", &s[0], 1};
        out[no++] = (fl_io){"VelocityOut", &s[0], 1};
    } else if (!strcmp(o->type, "adagrad")) {
        if (!(s[0] = state_var(p, w, "moment", w->ndim, w->shape, 0.0f))) return fl_prog_status(p);
        in[ni++] = (fl_io){"Moment", &s[0], 1};
        out[no++] = (fl_io){"MomentOut", &s[0], 1};
    } else if (!strcmp(o->type, "adam")) {
        if (!(s[0] = state_var(p, w, "moment1", w->ndim, w->shape, 0.0f)) ||
            !(s[1] = state_var(p, w, "moment2", w->ndim, w->shape, 0.0f)) ||
            !(s[2] = state_var(p, w, "beta1_pow_acc", 1, &one, o->beta1)) ||
            !(s[3] = state_var(p, w, "beta2_pow_acc", 1, &one, o->beta2)))
            return fl_prog_status(p);
        static const char *const ins[4] = {"Moment1", "Moment2", "Beta1Pow", "Beta2Pow"};
        static const char *const outs[4] = {"Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"};
        for (int i = 0; i < 4; i++) {
            in[ni++] = (fl_io){ins[i], &s[i], 1};
            out[no++] = (fl_io){outs[i], &s[i], 1};
        }
    }
    fl_op *op = fl__op_new(p, o->type, in, ni, out, no);
    if (!op) return fl_prog_status(p);
    FL_CHECK(fl__attr_set_f(op, "l2", (double)o->l2 + (double)w->l2_decay));
    FL_CHECK(fl__attr_set_f(op, "lr_scale", w->lr_scale));
    if (!strcmp(o->type, "momentum")) {
        FL_CHECK(fl__attr_set_f(op, "mu", o->mu));
        FL_CHECK(fl__attr_set_i(op, "use_nesterov", o->nesterov));
    } else if (!strcmp(o->type, "adagrad")) {
        FL_CHECK(fl__attr_set_f(op, "epsilon", o->eps));
    } else if (!strcmp(o->type, "adam")) {
        FL_CHECK(fl__attr_set_f(op, "beta1", o->beta1));
        FL_CHECK(fl__attr_set_f(op, "beta2", o->beta2));
        FL_CHECK(fl__attr_set_f(op, "epsilon", o->eps));
    }
    op->cond = cond;
    return fl__op_finish(op);
}

int fl_opt_minimize_ex(fl_opt *o, fl_var *loss, const char *const *no_grad, int n_no_grad)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err_handle(o, "minimize: optimizer is NULL or invalid");
    if (!loss) {
        int st = fl_last_status();
        return fl__err(st ? st : FL_EINVAL, "minimize: loss is NULL (an earlier layer call failed: %s)", fl_last_error());
    }
    if (loss->magic != FL_VAR_MAGIC) return fl__err(FL_EINVAL, "minimize: loss is not a variable");
    fl_prog *p = loss->prog;
    if (p->status != FL_OK) return p->status;
    fl_param_grad *pairs = NULL;
    int n = 0;
    if (o->pre_hook) {
        fl_opt_hook_ctx pre = {p, NULL, 0, NULL, o->type};
        FL_CHECK(o->pre_hook(o->pre_user, FL_HOOK_BEFORE_BACKWARD, &pre));
    }
    FL_CHECK(fl_append_backward(loss, no_grad, n_no_grad, &pairs, &n));
    int st = FL_OK;
    fl_opt_hook_ctx hc = {p, pairs, n, NULL, o->type};
    if (o->hook) {
        fl__prog_set_role(p, FL_ROLE_BACKWARD);
        st = o->hook(o->hook_user, FL_HOOK_AFTER_BACKWARD, &hc);
        fl__prog_set_role(p, FL_ROLE_FORWARD);
    }
    fl_var *lr = st == FL_OK ? make_lr(o, p) : NULL;
    fl__prog_set_role(p, FL_ROLE_OPTIMIZE);
    if (!lr && st == FL_OK) st = fl_prog_status(p);
    for (int i = 0; i < n && st == FL_OK; i++) st = append_update(o, p, lr, pairs[i], hc.update_cond);
    if (st == FL_OK && o->hook) st = o->hook(o->hook_user, FL_HOOK_AFTER_UPDATE, &hc);
    fl__prog_set_role(p, FL_ROLE_FORWARD);
    free(pairs);
    return st == FL_OK ? p->status : st;
}

int fl_opt_minimize(fl_opt *o, fl_var *loss) { return fl_opt_minimize_ex(o, loss, NULL, 0); }
