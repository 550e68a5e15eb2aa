/*
 * optimizer.c - optimizers appended by minimize(): backward, learning-rate variables and
 * schedules, then one update op per parameter (sgd, momentum, adagrad, adam, lars_momentum
 * and lamb of ops_optim_lars.c, rmsprop of ops_optim_more.c), built from the table of kinds
 * below.  L1 decay (fl_opt_set_l1) rewrites the gradients before the updates.  Each update
 * op applies L2 regularization (grad += l2 * param, optimizer coefficient plus the
 * parameter's own) and the parameter's learning-rate scale, and takes the sparse
 * (SelectedRows) path at run time when the gradient holds rows.
 */
#include <math.h>
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
    fl_opt_hook_fn pre_hook; /* AMP (src/graph/amp_scaling.c): BEFORE_BACKWARD, AFTER_BACKWARD, AFTER_UPDATE */
    void *pre_user;          /* after the runtime's hook */
    fl_amp_opts amp;         /* fl_amp_decorate_optimizer's options (the pre-hook's user data) */
    float lars_coeff;        /* lars_momentum */
    float decay;             /* lars_weight_decay / lamb weight_decay */
    char *exclude;           /* comma-separated names exempt from `decay` (malloc'ed or NULL) */
    char *recompute;         /* comma-separated checkpoint names (malloc'ed or NULL) */
    fl_grad_clip clip;       /* fl_opt_set_grad_clip (ops_nlp_train.c) */
    fl_var *lr_var;          /* fl_opt_set_lr_var: a schedule's learning-rate variable */
    float rho;               /* rmsprop */
    int centered;            /* rmsprop */
    float l1;                /* fl_opt_set_l1 */
};

fl_grad_clip *fl__opt_clip(fl_opt *o) { return o && o->magic == FL_OPT_MAGIC ? &o->clip : NULL; }
fl_var **fl__opt_lr_var(fl_opt *o) { return o && o->magic == FL_OPT_MAGIC ? &o->lr_var : NULL; }

int fl__opt_set_hook(fl_opt *o, fl_opt_hook_fn fn, void *user)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err_handle(o, "optimizer is NULL or invalid");
    o->hook = fn;
    o->hook_user = user;
    return FL_OK;
}

fl_amp_opts *fl__opt_amp_opts(fl_opt *o) { return o && o->magic == FL_OPT_MAGIC ? &o->amp : NULL; }

int fl__opt_set_pre_hook(fl_opt *o, fl_opt_hook_fn fn, void *user)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err_handle(o, "optimizer is NULL or invalid");
    o->pre_hook = fn;
    o->pre_user = user;
    return FL_OK;
}

int fl__opt_rehook(fl_opt *o, fl_prog *p)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err_handle(o, "optimizer is NULL or invalid");
    if (p->status != FL_OK) return p->status;
    if (!o->hook) return FL_OK;
    int n = 0;
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i]->role == FL_ROLE_OPTIMIZE && !strcmp(p->ops[i]->def->type, o->type)) n++;
    if (!n)
        return fl__prog_error(p, FL_EINVAL,
                              "transpile: the program has no %s update op: call minimize with this "
                              "optimizer first",
                              o->type);
    fl_param_grad *pairs = calloc((size_t)n, sizeof *pairs);
    if (!pairs) return fl__prog_error(p, FL_ENOMEM, "out of memory");
    fl_opt_hook_ctx hc = {p, pairs, 0, NULL, o->type};
    for (int i = 0; i < p->nops; i++) {
        fl_op *op = p->ops[i];
        if (op->role != FL_ROLE_OPTIMIZE || strcmp(op->def->type, o->type)) continue;
        pairs[hc.npairs].param = op->in[0].vars[0];
        pairs[hc.npairs++].grad = op->in[1].vars[0];
        if (op->cond) hc.update_cond = op->cond;
    }
    fl__prog_set_role(p, FL_ROLE_BACKWARD);
    int st = o->hook(o->hook_user, FL_HOOK_AFTER_BACKWARD, &hc);
    fl__prog_set_role(p, FL_ROLE_OPTIMIZE);
    if (st == FL_OK) st = o->hook(o->hook_user, FL_HOOK_AFTER_UPDATE, &hc);
    fl__prog_set_role(p, FL_ROLE_FORWARD);
    free(pairs);
    return st == FL_OK ? p->status : st;
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

fl_opt *fl_opt_rmsprop(float lr, float rho, float epsilon, float momentum, int centered)
{
    if (!(rho >= 0.0f && rho < 1.0f) || !(epsilon > 0.0f) || !isfinite(epsilon) || !(momentum >= 0.0f) ||
        !isfinite(momentum)) {
        fl__err(FL_EINVAL,
                "fl_opt_rmsprop: rho must be in [0, 1), epsilon finite and > 0, momentum finite and >= 0; got "
                "rho %g, epsilon %g, momentum %g",
                (double)rho, (double)epsilon, (double)momentum);
        return NULL;
    }
    fl_opt *o = opt_new("rmsprop", lr);
    if (o) {
        o->rho = rho;
        o->eps = epsilon;
        o->mu = momentum;
        o->centered = centered != 0;
    }
    return o;
}

static int lars_check(const char *fn, float coeff, float wd, float eps)
{
    if (!(coeff >= 0.0f) || !isfinite(coeff))
        return fl__err(FL_EINVAL, "%s: lars_coeff must be finite and >= 0, got %g", fn, (double)coeff);
    if (!(wd >= 0.0f) || !isfinite(wd))
        return fl__err(FL_EINVAL, "%s: lars_weight_decay must be finite and >= 0, got %g", fn, (double)wd);
    if (!(eps >= 0.0f) || !isfinite(eps))
        return fl__err(FL_EINVAL, "%s: epsilon must be finite and >= 0, got %g", fn, (double)eps);
    return FL_OK;
}

fl_opt *fl_opt_lars(float lr, float momentum, float lars_coeff, float lars_weight_decay, float epsilon)
{
    if (lars_check("fl_opt_lars", lars_coeff, lars_weight_decay, epsilon)) return NULL;
    fl_opt *o = opt_new("lars_momentum", lr);
    if (o) {
        o->mu = momentum;
        o->lars_coeff = lars_coeff;
        o->decay = lars_weight_decay;
        o->eps = epsilon;
    }
    return o;
}

fl_opt *fl_opt_lamb(float lr, float beta1, float beta2, float epsilon, float lamb_weight_decay)
{
    if (!(lamb_weight_decay >= 0.0f) || !isfinite(lamb_weight_decay)) {
        fl__err(FL_EINVAL, "fl_opt_lamb: lamb_weight_decay must be finite and >= 0, got %g", (double)lamb_weight_decay);
        return NULL;
    }
    fl_opt *o = fl_opt_adam(lr, beta1, beta2, epsilon);
    if (o) {
        snprintf(o->type, sizeof o->type, "lamb");
        o->decay = lamb_weight_decay;
    }
    return o;
}

int fl_opt_set_exclude_from_weight_decay(fl_opt *o, const char *names)
{
    if (!o || o->magic != FL_OPT_MAGIC)
        return fl__err(FL_EINVAL, "fl_opt_set_exclude_from_weight_decay: optimizer is NULL");
    if (strcmp(o->type, "lars_momentum") && strcmp(o->type, "lamb") && strcmp(o->type, "adam"))
        return fl__err(FL_EINVAL,
                       "fl_opt_set_exclude_from_weight_decay: optimizer '%s' has no weight decay of its own "
                       "(lars_momentum, lamb and adam have)",
                       o->type);
    char *copy = NULL;
    if (names && *names && !(copy = strdup(names)))
        return fl__err(FL_ENOMEM, "fl_opt_set_exclude_from_weight_decay: out of memory");
    free(o->exclude);
    o->exclude = copy;
    return FL_OK;
}

int fl_opt_set_weight_decay(fl_opt *o, float coeff)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err(FL_EINVAL, "fl_opt_set_weight_decay: optimizer is NULL");
    if (strcmp(o->type, "adam"))
        return fl__err(FL_EINVAL,
                       "fl_opt_set_weight_decay: optimizer '%s' is not adam (lamb and lars_momentum take "
                       "their decay when created)",
                       o->type);
    if (!(coeff >= 0.0f) || !isfinite(coeff))
        return fl__err(FL_EINVAL, "fl_opt_set_weight_decay: coeff must be finite and >= 0, got %g", (double)coeff);
    o->decay = coeff;
    return FL_OK;
}

int fl_opt_set_recompute(fl_opt *o, const char *checkpoints)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err_handle(o, "fl_opt_set_recompute: optimizer is NULL or invalid");
    char *copy = checkpoints && *checkpoints ? fl__strdup(checkpoints) : NULL;
    if (checkpoints && *checkpoints && !copy) return fl__err(FL_ENOMEM, "fl_opt_set_recompute: out of memory");
    free(o->recompute);
    o->recompute = copy;
    return FL_OK;
}

/* append_backward, with o's recompute checkpoints split at commas (blanks trimmed). */
static int backward(fl_opt *o, fl_var *loss, const char *const *no_grad, int n_no_grad, fl_param_grad **pairs, int *n)
{
    if (!o->recompute) return fl_append_backward(loss, no_grad, n_no_grad, pairs, n);
    char *buf = fl__strdup(o->recompute);
    int cap = 1;
    for (const char *c = o->recompute; *c; c++) cap += *c == ',';
    const char **names = calloc((size_t)cap, sizeof *names);
    if (!buf || !names) {
        free(buf);
        free(names);
        return fl__err(FL_ENOMEM, "minimize: out of memory");
    }
    int nn = 0;
    for (char *tok = buf, *next; tok; tok = next) {
        next = strchr(tok, ',');
        if (next) *next++ = 0;
        while (*tok == ' ' || *tok == '\t') tok++;
        size_t len = strlen(tok);
        while (len && (tok[len - 1] == ' ' || tok[len - 1] == '\t')) tok[--len] = 0;
        if (len) names[nn++] = tok;
    }
    int st = fl_append_backward_recompute(loss, no_grad, n_no_grad, names, nn, pairs, n);
    free(names);
    free(buf);
    return st;
}

int fl__opt_to_lars(fl_opt *o, float lars_coeff, float lars_weight_decay, float epsilon, const char *exclude)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err_handle(o, "strategy.lars: optimizer is NULL or invalid");
    if (strcmp(o->type, "momentum"))
        return fl__err(FL_EUNSUPPORTED,
                       "strategy.lars replaces a Momentum optimizer (as Paddle's LarsOptimizer), "
                       "the inner optimizer is %s",
                       o->type);
    if (o->nesterov)
        return fl__err(FL_EUNSUPPORTED, "strategy.lars: lars_momentum has no Nesterov form; the inner Momentum "
                                        "optimizer has use_nesterov set");
    FL_CHECK(lars_check("strategy.lars_configs", lars_coeff, lars_weight_decay, epsilon));
    snprintf(o->type, sizeof o->type, "lars_momentum");
    o->lars_coeff = lars_coeff;
    o->decay = lars_weight_decay;
    o->eps = epsilon;
    return fl_opt_set_exclude_from_weight_decay(o, exclude);
}

int fl__opt_to_lamb(fl_opt *o, float lamb_weight_decay, const char *exclude)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err_handle(o, "strategy.lamb: optimizer is NULL or invalid");
    if (strcmp(o->type, "adam"))
        return fl__err(FL_EUNSUPPORTED,
                       "strategy.lamb replaces an Adam optimizer (as Paddle's LambOptimizer), "
                       "the inner optimizer is %s",
                       o->type);
    if (!(lamb_weight_decay >= 0.0f) || !isfinite(lamb_weight_decay))
        return fl__err(FL_EINVAL, "strategy.lamb_configs.lamb_weight_decay must be finite and >= 0, got %g",
                       (double)lamb_weight_decay);
    snprintf(o->type, sizeof o->type, "lamb");
    o->decay = lamb_weight_decay;
    return fl_opt_set_exclude_from_weight_decay(o, exclude);
}

void fl_opt_free(fl_opt *o)
{
    if (!o || o->magic != FL_OPT_MAGIC) return;
    o->magic = 0;
    free(o->exclude);
    free(o->recompute);
    free(o);
}

const char *fl_opt_type(const fl_opt *o)
{
    if (!o || o->magic != FL_OPT_MAGIC) {
        fl__err_handle(o, "fl_opt_type: optimizer is NULL or invalid");
        return NULL;
    }
    return o->type;
}

int fl_opt_set_l2(fl_opt *o, float coeff)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err(FL_EINVAL, "fl_opt_set_l2: optimizer is NULL");
    if (!(coeff >= 0.0f)) return fl__err(FL_EINVAL, "fl_opt_set_l2: coefficient must be >= 0, got %g", (double)coeff);
    o->l2 = coeff;
    return FL_OK;
}

int fl_opt_set_l1(fl_opt *o, float coeff)
{
    if (!o || o->magic != FL_OPT_MAGIC) return fl__err(FL_EINVAL, "fl_opt_set_l1: optimizer is NULL");
    if (!(coeff >= 0.0f) || !isfinite(coeff))
        return fl__err(FL_EINVAL, "fl_opt_set_l1: coefficient must be finite and >= 0, got %g", (double)coeff);
    o->l1 = coeff;
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
    if (o->lr_var && o->lr_var->prog != p) {
        fl__prog_error(p, FL_EINVAL, "minimize: learning rate '%s' belongs to another program", o->lr_var->name);
        return NULL;
    }
    if (o->lr_var) return o->lr_var;
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

/* ---- the kinds: one row each ----------------------------------------------------------------
 * How to add an optimizer: a constructor above filling the fl_opt fields it uses, the update
 * op (an ops_*.c group), and a row here naming the op, its state variables (slot names and
 * initial value) and a function setting the op's own attributes. */

enum { INIT_ZERO, INIT_BETA1, INIT_BETA2 };

typedef struct {
    const char *suffix, *in, *out;
    int init; /* INIT_*; a beta pow holds one element, the others the parameter's shape */
} state_spec;

typedef struct {
    const char *type; /* fl_opt type and op type */
    state_spec state[4];
    int (*attrs)(const fl_opt *o, fl_op *op, const fl_var *param);
} opt_kind;

/* 1 when the parameter's name matches an entry of the comma-separated exclude list: contains
 * it (LARS, Paddle's LarsMomentumOptimizer) or ends with it (LAMB, Paddle's fleet lamb). */
static int excluded(const char *list, const char *name, int suffix_only)
{
    const char *s = list;
    while (s && *s) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        while (len && (*s == ' ' || *s == '\t')) s++, len--;
        while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
        if (len) {
            size_t nl = strlen(name);
            if (suffix_only ? (nl >= len && !memcmp(name + nl - len, s, len)) : memmem(name, nl, s, len) != NULL) return 1;
        }
        s = e ? e + 1 : NULL;
    }
    return 0;
}

static int attrs_none(const fl_opt *o, fl_op *op, const fl_var *w) { return (void)o, (void)op, (void)w, FL_OK; }

static int attrs_momentum(const fl_opt *o, fl_op *op, const fl_var *w)
{
    (void)w;
    FL_CHECK(fl__attr_set_f(op, "mu", o->mu));
    return fl__attr_set_i(op, "use_nesterov", o->nesterov);
}

static int attrs_adagrad(const fl_opt *o, fl_op *op, const fl_var *w)
{
    (void)w;
    return fl__attr_set_f(op, "epsilon", o->eps);
}

static int attrs_adam(const fl_opt *o, fl_op *op, const fl_var *w)
{
    FL_CHECK(fl__attr_set_f(op, "beta1", o->beta1));
    FL_CHECK(fl__attr_set_f(op, "beta2", o->beta2));
    /* decoupled weight decay of adam (not lamb, whose decay is its own attribute) */
    if (!strcmp(o->type, "adam") && o->decay > 0 && !excluded(o->exclude, w->name, 0))
        FL_CHECK(fl__attr_set_f(op, "weight_decay", o->decay));
    return fl__attr_set_f(op, "epsilon", o->eps);
}

static int attrs_lars(const fl_opt *o, fl_op *op, const fl_var *w)
{
    FL_CHECK(fl__attr_set_f(op, "mu", o->mu));
    FL_CHECK(fl__attr_set_f(op, "lars_coeff", o->lars_coeff));
    FL_CHECK(fl__attr_set_f(op, "lars_weight_decay", excluded(o->exclude, w->name, 0) ? 0.0 : (double)o->decay));
    return fl__attr_set_f(op, "epsilon", o->eps);
}

static int attrs_lamb(const fl_opt *o, fl_op *op, const fl_var *w)
{
    FL_CHECK(attrs_adam(o, op, w));
    return fl__attr_set_f(op, "weight_decay", excluded(o->exclude, w->name, 1) ? 0.0 : (double)o->decay);
}

static int attrs_rmsprop(const fl_opt *o, fl_op *op, const fl_var *w)
{
    (void)w;
    FL_CHECK(fl__attr_set_f(op, "decay", o->rho));
    FL_CHECK(fl__attr_set_f(op, "epsilon", o->eps));
    FL_CHECK(fl__attr_set_f(op, "momentum", o->mu));
    return fl__attr_set_i(op, "centered", o->centered);
}

#define ADAM_STATE                                                                                        \
    {                                                                                                     \
        {"moment1", "Moment1", "Moment1Out", INIT_ZERO}, {"moment2", "Moment2", "Moment2Out", INIT_ZERO}, \
            {"beta1_pow_acc", "Beta1Pow", "Beta1PowOut", INIT_BETA1},                                     \
        {                                                                                                 \
            "beta2_pow_acc", "Beta2Pow", "Beta2PowOut", INIT_BETA2                                        \
        }                                                                                                 \
    }

static const opt_kind kinds[] = {
    {"sgd", {{NULL}}, attrs_none},
    {"momentum", {{"velocity", "Velocity", "VelocityOut", INIT_ZERO}}, attrs_momentum},
    {"adagrad", {{"moment", "Moment", "MomentOut", INIT_ZERO}}, attrs_adagrad},
    {"adam", ADAM_STATE, attrs_adam},
    {"lars_momentum", {{"velocity", "Velocity", "VelocityOut", INIT_ZERO}}, attrs_lars},
    {"lamb", ADAM_STATE, attrs_lamb},
    {"rmsprop",
     {{"momentum", "Moment", "MomentOut", INIT_ZERO},
      {"mean_square", "MeanSquare", "MeanSquareOut", INIT_ZERO},
      {"mean_grad", "MeanGrad", "MeanGradOut", INIT_ZERO}},
     attrs_rmsprop},
};

static int append_update(fl_opt *o, fl_prog *p, fl_var *lr, fl_param_grad pg, fl_var *cond)
{
    const opt_kind *k = NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && !k; i++)
        if (!strcmp(kinds[i].type, o->type)) k = &kinds[i];
    if (!k) return fl__prog_error(p, FL_EINVAL, "minimize: optimizer type '%s' has no update op", o->type);
    fl_var *w = pg.param, *gr = pg.grad;
    fl_io in[8], out[6];
    int ni = 0, no = 0;
    in[ni++] = (fl_io)FL_IO1("Param", w);
    in[ni++] = (fl_io)FL_IO1("Grad", gr);
    in[ni++] = (fl_io)FL_IO1("LearningRate", lr);
    out[no++] = (fl_io)FL_IO1("ParamOut", w);
    fl_var *s[4] = {NULL};
    int64_t one = 1;
    for (int i = 0; i < 4 && k->state[i].suffix; i++) {
        const state_spec *ss = &k->state[i];
        if (ss->init == INIT_ZERO) s[i] = state_var(p, w, ss->suffix, w->ndim, w->shape, 0.0f);
        else s[i] = state_var(p, w, ss->suffix, 1, &one, ss->init == INIT_BETA1 ? o->beta1 : o->beta2);
        if (!s[i]) return fl_prog_status(p);
        in[ni++] = (fl_io){ss->in, &s[i], 1};
        out[no++] = (fl_io){ss->out, &s[i], 1};
    }
    fl_op *op = fl__op_new(p, k->type, in, ni, out, no);
    if (!op) return fl_prog_status(p);
    FL_CHECK(fl__attr_set_f(op, "l2", (double)o->l2 + (double)w->l2_decay));
    FL_CHECK(fl__attr_set_f(op, "lr_scale", w->lr_scale));
    FL_CHECK(k->attrs(o, op, w));
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
    FL_CHECK(backward(o, loss, no_grad, n_no_grad, &pairs, &n));
    int st = FL_OK;
    fl_opt_hook_ctx hc = {p, pairs, n, NULL, o->type};
    if (o->hook) {
        fl__prog_set_role(p, FL_ROLE_BACKWARD);
        st = o->hook(o->hook_user, FL_HOOK_AFTER_BACKWARD, &hc);
        fl__prog_set_role(p, FL_ROLE_FORWARD);
    }
    if (o->pre_hook && st == FL_OK) { /* AMP's loss scaling: on the reduced gradients */
        fl__prog_set_role(p, FL_ROLE_BACKWARD);
        st = o->pre_hook(o->pre_user, FL_HOOK_AFTER_BACKWARD, &hc);
        fl__prog_set_role(p, FL_ROLE_FORWARD);
    }
    if (st == FL_OK && o->clip.kind) { /* on the reduced, unscaled gradients */
        fl__prog_set_role(p, FL_ROLE_BACKWARD);
        st = fl__grad_clip_apply(p, hc.pairs, hc.npairs, &o->clip);
        fl__prog_set_role(p, FL_ROLE_FORWARD);
    }
    if (st == FL_OK) { /* Paddle's L1Decay (the optimizer's and parameters' own): on the clipped gradients */
        fl__prog_set_role(p, FL_ROLE_BACKWARD);
        st = fl__l1_decay_apply(p, hc.pairs, hc.npairs, o->l1);
        fl__prog_set_role(p, FL_ROLE_FORWARD);
    }
    fl_var *lr = st == FL_OK ? make_lr(o, p) : NULL;
    fl__prog_set_role(p, FL_ROLE_OPTIMIZE);
    if (!lr && st == FL_OK) st = fl_prog_status(p);
    for (int i = 0; i < n && st == FL_OK; i++) st = append_update(o, p, lr, pairs[i], hc.update_cond);
    if (st == FL_OK && o->hook) st = o->hook(o->hook_user, FL_HOOK_AFTER_UPDATE, &hc);
    if (st == FL_OK && o->pre_hook) st = o->pre_hook(o->pre_user, FL_HOOK_AFTER_UPDATE, &hc);
    fl__prog_set_role(p, FL_ROLE_FORWARD);
    free(pairs);
    return st == FL_OK ? p->status : st;
}

int fl_opt_minimize(fl_opt *o, fl_var *loss) { return fl_opt_minimize_ex(o, loss, NULL, 0); }
