/*
 * layers_nlp.c - the layer builders of the ops of ops_nlp.c and ops_nlp_idx.c (layer_norm,
 * gelu, transpose2, label_smooth, expand, gather, gather_nd, stack, split, slice, one_hot), as Paddle's
 * fluid.layers functions of the same names build them.
 */
#include <stdio.h>
#include <string.h>

#include "graph_internal.h"

/* The program of x, or NULL with an error naming the layer and its argument. */
static fl_prog *layer_prog(const char *layer, const char *arg, fl_var *x)
{
    if (!x) {
        fl__err(FL_EINVAL, "%s: %s is NULL", layer, arg);
        return NULL;
    }
    fl_prog *p = fl__prog_of(&x, 1);
    return p && p->status == FL_OK ? p : NULL;
}

fl_var *fl_layer_layer_norm(fl_var *x, int begin_norm_axis, float epsilon, int scale, int shift,
                            const fl_param_attr *scale_attr, const fl_param_attr *bias_attr)
{
    fl_prog *p = layer_prog("layer_norm", "x", x);
    if (!p) return NULL;
    if (begin_norm_axis < 1 || begin_norm_axis >= x->ndim) {
        fl__prog_error(p, FL_EINVAL, "layer_norm: begin_norm_axis %d must be in [1, %d) for x '%s'", begin_norm_axis,
                       x->ndim, x->name);
        return NULL;
    }
    int64_t right = fl__dims_prod(x->shape, begin_norm_axis, x->ndim);
    for (int i = begin_norm_axis; i < x->ndim; i++)
        if (x->shape[i] < 0) {
            fl__prog_error(p, FL_EINVAL, "layer_norm: the normalised dims of x '%s' must be known", x->name);
            return NULL;
        }
    char base[128], nm[160];
    fl__unique_name(p, "layer_norm", base, sizeof base);
    fl_param_attr none;
    memset(&none, 0, sizeof none);
    fl_var *params[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        if (!(k ? shift : scale)) continue;
        const fl_param_attr *a = (k ? bias_attr : scale_attr) ? (k ? bias_attr : scale_attr) : &none;
        if (a->name) snprintf(nm, sizeof nm, "%s", a->name);
        else snprintf(nm, sizeof nm, "%s.%s_0", base, k ? "b" : "w");
        params[k] = fl__param_create(p, nm, 1, &right, a, fl_init_constant(k ? 0.0f : 1.0f), 0, 0);
        if (!params[k]) return NULL;
    }
    int64_t one = 1;
    fl_var *y = fl__tmp_var(p, base, FL_FLOAT32, x->ndim, x->shape);
    fl_var *mean = fl__tmp_var(p, base, FL_FLOAT32, 1, &one), *var = fl__tmp_var(p, base, FL_FLOAT32, 1, &one);
    if (!y || !mean || !var) return NULL;
    fl_io in[3] = {FL_IO1("X", x), FL_IO1("Scale", params[0]), FL_IO1("Bias", params[1])};
    fl_io ins[3];
    int nin = 0;
    for (int k = 0; k < 3; k++)
        if (in[k].vars[0]) ins[nin++] = in[k];
    fl_io out[3] = {FL_IO1("Y", y), FL_IO1("Mean", mean), FL_IO1("Variance", var)};
    fl_op *op = fl__op_new(p, "layer_norm", ins, nin, out, 3);
    if (!op || fl__attr_set_i(op, "begin_norm_axis", begin_norm_axis) || fl__attr_set_f(op, "epsilon", epsilon) ||
        fl__op_finish(op))
        return NULL;
    return y;
}

fl_var *fl_layer_gelu(fl_var *x, int approximate)
{
    fl_prog *p = layer_prog("gelu", "x", x);
    if (!p) return NULL;
    fl_var *o = fl__tmp_var(p, "gelu", FL_FLOAT32, x->ndim, x->shape);
    if (!o) return NULL;
    fl_io in = FL_IO1("X", x), out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "gelu", &in, 1, &out, 1);
    if (!op || fl__attr_set_i(op, "approximate", approximate != 0) || fl__op_finish(op)) return NULL;
    return o;
}

fl_var *fl_layer_transpose(fl_var *x, int ndim, const int64_t *perm)
{
    fl_prog *p = layer_prog("transpose", "x", x);
    if (!p) return NULL;
    if (!perm || ndim != x->ndim) {
        fl__prog_error(p, FL_EINVAL, "transpose: perm must list the %d dims of x '%s' (got %d)", x->ndim, x->name, ndim);
        return NULL;
    }
    char base[128];
    fl__unique_name(p, "transpose", base, sizeof base);
    fl_var *o = fl__tmp_var(p, base, FL_FLOAT32, x->ndim, x->shape);
    fl_var *xs = fl__tmp_var(p, base, FL_FLOAT32, x->ndim, x->shape);
    if (!o || !xs) return NULL;
    fl_io in = FL_IO1("X", x), out[2] = {FL_IO1("Out", o), FL_IO1("XShape", xs)};
    fl_op *op = fl__op_new(p, "transpose2", &in, 1, out, 2);
    if (!op || fl__attr_set_ints(op, "axis", perm, ndim) || fl__op_finish(op)) return NULL;
    return o;
}

static fl_var *gather_layer(const char *type, fl_var *x, fl_var *index)
{
    fl_prog *p = layer_prog(type, "x", x);
    if (!p) return NULL;
    if (!index) {
        fl__prog_error(p, FL_EINVAL, "%s: index is NULL", type);
        return NULL;
    }
    fl_var *o = fl__tmp_var(p, type, FL_FLOAT32, x->ndim, x->shape);
    if (!o) return NULL;
    fl_io in[2] = {FL_IO1("X", x), FL_IO1("Index", index)}, out = FL_IO1("Out", o);
    return fl__op_append(p, type, in, 2, &out, 1) ? o : NULL;
}

fl_var *fl_layer_gather(fl_var *x, fl_var *index) { return gather_layer("gather", x, index); }
fl_var *fl_layer_gather_nd(fl_var *x, fl_var *index) { return gather_layer("gather_nd", x, index); }

fl_var *fl_layer_stack(fl_var *const *xs, int n, int axis)
{
    if (!xs || n < 1 || n > 64) {
        fl__err(FL_EINVAL, "stack: xs must hold 1 to 64 variables (n %d)", n);
        return NULL;
    }
    fl_prog *p = layer_prog("stack", "xs[0]", xs[0]);
    if (!p) return NULL;
    fl_var *o = fl__tmp_var(p, "stack", FL_FLOAT32, xs[0]->ndim, xs[0]->shape);
    if (!o) return NULL;
    fl_io in = {"X", xs, n}, out = FL_IO1("Y", o);
    fl_op *op = fl__op_new(p, "stack", &in, 1, &out, 1);
    if (!op || fl__attr_set_i(op, "axis", axis) || fl__op_finish(op)) return NULL;
    return o;
}

int fl_layer_split(fl_var *x, int num, const int64_t *sections, int nsections, int axis, fl_var **out)
{
    fl_prog *p = layer_prog("split", "x", x);
    if (!p) return 0;
    int n = sections ? nsections : num;
    if (!out || n < 1 || n > 64) {
        fl__prog_error(p, FL_EINVAL, "split: out must be given and num or nsections in [1, 64] (got %d)", n);
        return 0;
    }
    char base[128];
    fl__unique_name(p, "split", base, sizeof base);
    for (int i = 0; i < n; i++)
        if (!(out[i] = fl__tmp_var(p, base, FL_FLOAT32, x->ndim, x->shape))) return 0;
    fl_io in = FL_IO1("X", x), o = {"Out", out, n};
    fl_op *op = fl__op_new(p, "split", &in, 1, &o, 1);
    if (!op || fl__attr_set_i(op, "axis", axis) || fl__attr_set_i(op, "num", sections ? 0 : num) ||
        (sections && fl__attr_set_ints(op, "sections", sections, nsections)) || fl__op_finish(op))
        return 0;
    return n;
}

fl_var *fl_layer_slice(fl_var *x, int naxes, const int64_t *axes, const int64_t *starts, const int64_t *ends)
{
    fl_prog *p = layer_prog("slice", "x", x);
    if (!p) return NULL;
    if (naxes < 1 || !axes || !starts || !ends) {
        fl__prog_error(p, FL_EINVAL, "slice: axes, starts and ends must hold naxes >= 1 values (naxes %d)", naxes);
        return NULL;
    }
    fl_var *o = fl__tmp_var(p, "slice", FL_FLOAT32, x->ndim, x->shape);
    if (!o) return NULL;
    fl_io in = FL_IO1("Input", x), out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "slice", &in, 1, &out, 1);
    if (!op || fl__attr_set_ints(op, "axes", axes, naxes) || fl__attr_set_ints(op, "starts", starts, naxes) ||
        fl__attr_set_ints(op, "ends", ends, naxes) || fl__op_finish(op))
        return NULL;
    return o;
}

fl_var *fl_layer_one_hot(fl_var *x, int64_t depth)
{
    fl_prog *p = layer_prog("one_hot", "x", x);
    if (!p) return NULL;
    fl_var *o = fl__tmp_var(p, "one_hot", FL_FLOAT32, x->ndim, x->shape);
    if (!o) return NULL;
    fl_io in = FL_IO1("X", x), out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "one_hot", &in, 1, &out, 1);
    if (!op || fl__attr_set_i(op, "depth", depth) || fl__op_finish(op)) return NULL;
    return o;
}

fl_var *fl_layer_label_smooth(fl_var *label, fl_var *prior_dist, float epsilon)
{
    fl_prog *p = layer_prog("label_smooth", "label", label);
    if (!p) return NULL;
    fl_var *o = fl__tmp_var(p, "label_smooth", FL_FLOAT32, label->ndim, label->shape);
    if (!o) return NULL;
    fl_io in[2] = {FL_IO1("X", label), FL_IO1("PriorDist", prior_dist)}, out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "label_smooth", in, prior_dist ? 2 : 1, &out, 1);
    if (!op || fl__attr_set_f(op, "epsilon", epsilon) || fl__op_finish(op)) return NULL;
    return o;
}

fl_var *fl_layer_expand(fl_var *x, int ndim, const int64_t *expand_times)
{
    fl_prog *p = layer_prog("expand", "x", x);
    if (!p) return NULL;
    if (!expand_times || ndim != x->ndim) {
        fl__prog_error(p, FL_EINVAL, "expand: expand_times must hold the %d dims of x '%s' (got %d)", x->ndim, x->name,
                       ndim);
        return NULL;
    }
    fl_var *o = fl__tmp_var(p, "expand", FL_FLOAT32, x->ndim, x->shape);
    if (!o) return NULL;
    fl_io in = FL_IO1("X", x), out = FL_IO1("Out", o);
    fl_op *op = fl__op_new(p, "expand", &in, 1, &out, 1);
    if (!op || fl__attr_set_ints(op, "expand_times", expand_times, ndim) || fl__op_finish(op)) return NULL;
    return o;
}
