/*
 * ops_lr.c - operator group "lr": learning-rate schedules of Paddle's fluid.layers built as
 * layers (the variable they return goes to fl_opt_set_lr_var), reading the step counter
 * @LR_DECAY_COUNTER@ as noam_decay and polynomial_decay do (ops_nlp_train.c; the step is 0
 * on the first run):
 *   piecewise_decay      values[i] for the first i with step < boundaries[i], else the last
 *   natural_exp_decay    learning_rate * exp(-decay_rate * d)
 *   inverse_time_decay   learning_rate / (1 + decay_rate * d)
 *                        with d = step / decay_steps, floor()ed with staircase
 * and the layer forms of ops_optim.c's exponential_decay and cosine_decay (the schedules
 * fl_opt_set_exponential_decay / fl_opt_set_cosine_decay put into minimize).  No gradient.
 */
#include <math.h>
#include <string.h>

#include "graph_internal.h"

static int infer_lr(fl_op *op)
{
    if (op->in[0].n != 1 || op->out[0].n != 1) return fl__op_error(op, "needs one Step and one Out");
    fl_var *step = op->in[0].vars[0];
    if (step->dtype != FL_INT64) return fl__op_error(op, "step counter '%s' must be int64", step->name);
    if (!strcmp(op->def->type, "piecewise_decay")) {
        const fl_attr *b = fl__attr_find(op, "boundaries"), *v = fl__attr_find(op, "values");
        if (!b || !v || b->type != FL_ATTR_INTS || v->type != FL_ATTR_FLOATS || v->n != b->n + 1)
            return fl__op_error(op, "needs int boundaries and float values, one value more than boundaries");
        for (int i = 1; i < b->n; i++)
            if (b->ints[i] < b->ints[i - 1]) return fl__op_error(op, "boundaries must be non-decreasing");
    } else {
        int64_t ds = fl__attr_i(op, "decay_steps", 1);
        double rate = fl__attr_f(op, "decay_rate", 0.0);
        if (ds < 1) return fl__op_error(op, "decay_steps must be >= 1, got %lld", (long long)ds);
        if (!(rate >= 0.0) || !isfinite(rate)) return fl__op_error(op, "decay_rate must be finite and >= 0, got %g", rate);
    }
    int64_t one = 1;
    fl__var_set_shape(op->out[0].vars[0], FL_FLOAT32, 1, &one);
    return FL_OK;
}

static int run_lr(fl_kctx *c)
{
    const fl_tensor *st = FL_IN(c, 0);
    if (!st || st->dtype != FL_INT64 || st->numel < 1)
        return fl__err(FL_EINVAL, "%s: step counter '%s' must be an int64 with one element", c->op->def->type,
                       fl__kctx_var_name(c, 0, 0));
    int64_t step = ((const int64_t *)st->data)[0];
    const char *type = c->op->def->type;
    double v;
    if (!strcmp(type, "piecewise_decay")) {
        const fl_attr *b = fl__attr_find(c->op, "boundaries"), *vals = fl__attr_find(c->op, "values");
        int i = 0;
        while (i < b->n && step >= b->ints[i]) i++;
        v = vals->floats[i];
    } else {
        double d = (double)step / (double)fl__attr_i(c->op, "decay_steps", 1);
        if (fl__attr_i(c->op, "staircase", 0)) d = floor(d);
        double lr = fl__attr_f(c->op, "learning_rate", 0.0), rate = fl__attr_f(c->op, "decay_rate", 0.0);
        v = !strcmp(type, "natural_exp_decay") ? lr * exp(-rate * d) : lr / (1.0 + rate * d);
    }
    fl_tensor *out = FL_OUT(c, 0);
    int64_t one = 1;
    FL_CHECK(fl__tensor_reshape_raw(out, FL_FLOAT32, 1, &one));
    ((float *)out->data)[0] = (float)v;
    return FL_OK;
}

static const fl_op_def def_piecewise = {"piecewise_decay", {"Step"}, {"Out"}, infer_lr, run_lr, NULL, NULL};
static const fl_op_def def_natural_exp = {"natural_exp_decay", {"Step"}, {"Out"}, infer_lr, run_lr, NULL, NULL};
static const fl_op_def def_inverse_time = {"inverse_time_decay", {"Step"}, {"Out"}, infer_lr, run_lr, NULL, NULL};

fl_var *fl_layer_piecewise_decay(fl_prog *p, const int64_t *boundaries, int nboundaries, const float *values)
{
    if (p && p->magic == FL_PROG_MAGIC && p->status == FL_OK && (nboundaries < 1 || !boundaries || !values)) {
        fl__prog_error(p, FL_EINVAL, "piecewise_decay: needs nboundaries >= 1 boundaries and nboundaries + 1 values");
        return NULL;
    }
    fl_var *lr;
    fl_op *op = fl__lr_sched_begin(p, "piecewise_decay", 0, NULL, "Out", &lr);
    int bad = op && (fl__attr_set_ints(op, "boundaries", boundaries, nboundaries) ||
                     fl__attr_set_floats(op, "values", values, nboundaries + 1));
    return fl__lr_sched_finish(p, op, lr, bad);
}

/* natural_exp_decay, inverse_time_decay and ops_optim.c's exponential_decay (output slot
 * LearningRate) share their attributes. */
static fl_var *rate_layer(fl_prog *p, const char *type, const char *slot, float learning_rate, int64_t decay_steps,
                          float decay_rate, int staircase)
{
    fl_var *lr;
    fl_op *op = fl__lr_sched_begin(p, type, 0, NULL, slot, &lr);
    int bad = op && (fl__attr_set_f(op, "learning_rate", learning_rate) || fl__attr_set_i(op, "decay_steps", decay_steps) ||
                     fl__attr_set_f(op, "decay_rate", decay_rate) || fl__attr_set_i(op, "staircase", staircase != 0));
    return fl__lr_sched_finish(p, op, lr, bad);
}

fl_var *fl_layer_exponential_decay(fl_prog *p, float learning_rate, int64_t decay_steps, float decay_rate, int staircase)
{
    return rate_layer(p, "exponential_decay", "LearningRate", learning_rate, decay_steps, decay_rate, staircase);
}

fl_var *fl_layer_natural_exp_decay(fl_prog *p, float learning_rate, int64_t decay_steps, float decay_rate, int staircase)
{
    return rate_layer(p, "natural_exp_decay", "Out", learning_rate, decay_steps, decay_rate, staircase);
}

fl_var *fl_layer_inverse_time_decay(fl_prog *p, float learning_rate, int64_t decay_steps, float decay_rate, int staircase)
{
    return rate_layer(p, "inverse_time_decay", "Out", learning_rate, decay_steps, decay_rate, staircase);
}

fl_var *fl_layer_cosine_decay(fl_prog *p, float learning_rate, int64_t step_each_epoch, int64_t epochs)
{
    fl_var *lr;
    fl_op *op = fl__lr_sched_begin(p, "cosine_decay", 0, NULL, "LearningRate", &lr);
    int bad = op && (fl__attr_set_f(op, "learning_rate", learning_rate) ||
                     fl__attr_set_i(op, "step_each_epoch", step_each_epoch) || fl__attr_set_i(op, "epochs", epochs));
    return fl__lr_sched_finish(p, op, lr, bad);
}

const fl_op_def *const fl__ops_lr[] = {&def_piecewise, &def_natural_exp, &def_inverse_time, NULL};
