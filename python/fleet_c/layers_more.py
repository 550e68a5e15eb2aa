"""More fluid.layers: elementwise max / min, comparisons and logical ops, fill_constant,
l2_normalize, topk, sqrt / abs / exp / log, shape, assign, create_global_var and the
learning-rate schedules.  Each is one call of a C layer builder (fleet/graph.h); layers.py
re-exports them, so they are fluid.layers.* names.

The comparisons and logical ops return int32 0 / 1 variables (Paddle's are bool, a dtype
the C library does not have); cast them, or use them as conditions.  The schedules return
a float32 [1] variable to pass as an optimizer's learning_rate.
"""
import ctypes

import numpy as np

from . import _lib
from ._lib import lib
from ._tensor import dtype_code
from .framework import Variable, current_main
from .layers import _act, _out, _shape, _var
from .param_attr import ParamAttr

__all__ = ["elementwise_max", "elementwise_min", "less_than", "less_equal", "greater_than", "greater_equal", "equal",
           "not_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "fill_constant", "l2_normalize",
           "topk", "sqrt", "abs", "exp", "log", "shape", "assign", "create_global_var", "piecewise_decay",
           "cosine_decay", "natural_exp_decay", "inverse_time_decay", "noam_decay", "polynomial_decay",
           "linear_lr_warmup", "exponential_decay_var", "square_error_cost", "matmul_v2", "layer_norm", "gelu",
           "one_hot", "label_smooth", "transpose", "gather", "expand"]


# ---- elementwise max / min, comparisons, logical ops --------------------------------------------


def _maxmin(kind):
    fn = getattr(lib, "fl_layer_elementwise_" + kind)

    def layer(x, y, axis=-1, act=None, name=None):
        _var(x, "x", "elementwise_" + kind)
        _var(y, "y", "elementwise_" + kind)
        return _act(_out(x, fn(x._p, y._p, int(axis)), "elementwise_" + kind), act, "elementwise_" + kind)

    layer.__name__ = "elementwise_" + kind
    layer.__doc__ = "%s(x, y) elementwise, broadcast both ways; the gradient goes to the chosen side." % kind
    return layer


elementwise_max = _maxmin("max")
elementwise_min = _maxmin("min")


def _compare(op):
    def layer(x, y, force_cpu=None, cond=None, name=None):
        _var(x, "x", op)
        _var(y, "y", op)
        if cond is not None:
            raise NotImplementedError("%s: cond (an output variable to write into) is not supported; use the "
                                      "returned variable" % op)
        return _out(x, lib.fl_layer_compare(x._p, y._p, _lib.cstr(op)), op)

    layer.__name__ = op
    layer.__doc__ = "Paddle's %s: int32 0 / 1 (Paddle: bool), x and y of one dtype, broadcast both ways." % op
    return layer


less_than = _compare("less_than")
less_equal = _compare("less_equal")
greater_than = _compare("greater_than")
greater_equal = _compare("greater_equal")
equal = _compare("equal")
not_equal = _compare("not_equal")


def _logical(op):
    unary = op == "logical_not"

    def layer(x, y=None, out=None, name=None):
        _var(x, "x", op)
        if out is not None:
            raise NotImplementedError("%s: out is not supported; use the returned variable" % op)
        if not unary:
            _var(y, "y", op)
        return _out(x, lib.fl_layer_logical(x._p, None if unary else y._p, _lib.cstr(op)), op)

    layer.__name__ = op
    layer.__doc__ = "Paddle's %s: non-zero is true; int32 0 / 1 (Paddle: bool)." % op
    return layer


logical_and = _logical("logical_and")
logical_or = _logical("logical_or")
logical_xor = _logical("logical_xor")
logical_not = _logical("logical_not")


# ---- constants, normalisation, top-k, unary math ---------------------------------------------------


def fill_constant(shape, dtype, value, force_cpu=False, out=None, name=None):
    """A tensor of shape filled with value, computed each run (no gradient)."""
    if out is not None:
        raise NotImplementedError("fill_constant: out is not supported; use the returned variable")
    prog, h = current_main()
    arr, n = _shape(list(shape), "fill_constant")
    return prog._layer_result(lib.fl_layer_fill_constant(h, n, arr, dtype_code(dtype), float(value)),
                              "fill_constant")


def l2_normalize(x, axis, epsilon=1e-12, name=None):
    _var(x, "x", "l2_normalize")
    return _out(x, lib.fl_layer_l2_normalize(x._p, int(axis), float(epsilon)), "l2_normalize")


def topk(input, k, name=None):
    """(values, indices) of the k largest entries along the last dim; indices int64."""
    _var(input, "input", "topk")
    idx = ctypes.c_void_p()
    values = _out(input, lib.fl_layer_topk(input._p, int(k), ctypes.byref(idx)), "topk")
    return values, input.program._wrap(idx.value)


def _unary(op):
    def layer(x, name=None):
        _var(x, "x", op)
        return _out(x, lib.fl_layer_unary(x._p, _lib.cstr(op)), op)

    layer.__name__ = op
    return layer


sqrt = _unary("sqrt")
abs = _unary("abs")  # noqa: A001 (fluid.layers.abs)
exp = _unary("exp")
log = _unary("log")


def shape(input):
    """int32 [rank] holding input's run-time dims."""
    _var(input, "input", "shape")
    return _out(input, lib.fl_layer_shape(input._p), "shape")


def assign(input, output=None):
    """A copy of a Variable (a scale by 1), or a constant from a NumPy array (float32, int32
    or int64; op assign_value)."""
    if output is not None:
        raise NotImplementedError("assign: output is not supported; use the returned variable")
    if isinstance(input, Variable):
        from .layers import scale
        return scale(input, 1.0)
    a = np.asarray(input)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    if a.dtype == np.bool_:
        a = a.astype(np.int32)
    if a.ndim == 0:
        a = a.reshape(1)
    a = np.ascontiguousarray(a)
    prog, h = current_main()
    arr, n = _shape(a.shape, "assign")
    ptr = lib.fl_layer_assign_value(h, n, arr, dtype_code(a.dtype), a.ctypes.data_as(ctypes.c_void_p))
    return prog._layer_result(ptr, "assign")


def create_global_var(shape, value, dtype, persistable=False, force_cpu=False, name=None):
    """A variable of the main program.  persistable: filled with value by the startup
    program, kept in the scope between runs and saved with the persistables; not (Paddle's
    default): not saved, and set to value in every run (fl_layer_create_global_var_ex)."""
    prog, h = current_main()
    arr, n = _shape(list(shape), "create_global_var")
    ptr = lib.fl_layer_create_global_var_ex(h, _lib.cstr(name), n, arr, dtype_code(dtype), float(value),
                                            1 if persistable else 0)
    return prog._layer_result(ptr, "create_global_var")


def square_error_cost(input, label):
    """(input - label)^2 elementwise (an elementwise_sub and a square op)."""
    from .layers import elementwise_sub, square
    _var(input, "input", "square_error_cost")
    _var(label, "label", "square_error_cost")
    return square(elementwise_sub(input, label))


# ---- learning-rate schedules ------------------------------------------------------------------------


def _sched(ptr, what):
    prog, _ = current_main()
    s = getattr(prog, "_lr_scheduler", None)
    if s is not None and s[2]:
        raise ValueError("%s: the program has a paddle.optimizer.lr scheduler (%s), stepped by step(); a fluid.layers "
                         "schedule would read its counter: use one kind" % (what, type(s[0]).__name__))
    return prog._layer_result(ptr, what)


def piecewise_decay(boundaries, values):
    """values[i] while the step (runs of the main program, from 0) is below boundaries[i]."""
    b = [int(x) for x in boundaries]
    v = [float(x) for x in values]
    if len(v) != len(b) + 1:
        raise ValueError("piecewise_decay: len(values) must be len(boundaries) + 1, got %d and %d" % (len(v), len(b)))
    _, h = current_main()
    ptr = lib.fl_layer_piecewise_decay(h, (ctypes.c_int64 * max(1, len(b)))(*b), len(b),
                                       (ctypes.c_float * len(v))(*v))
    return _sched(ptr, "piecewise_decay")


def cosine_decay(learning_rate, step_each_epoch, epochs):
    _, h = current_main()
    return _sched(lib.fl_layer_cosine_decay(h, float(learning_rate), int(step_each_epoch), int(epochs)),
                  "cosine_decay")


def natural_exp_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    _, h = current_main()
    return _sched(lib.fl_layer_natural_exp_decay(h, float(learning_rate), int(decay_steps), float(decay_rate),
                                                 1 if staircase else 0), "natural_exp_decay")


def inverse_time_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    _, h = current_main()
    return _sched(lib.fl_layer_inverse_time_decay(h, float(learning_rate), int(decay_steps), float(decay_rate),
                                                  1 if staircase else 0), "inverse_time_decay")


def exponential_decay_var(learning_rate, decay_steps, decay_rate, staircase=False):
    """exponential_decay as a variable (fluid.layers.exponential_decay returns an object
    that the optimizer turns into the same op)."""
    _, h = current_main()
    return _sched(lib.fl_layer_exponential_decay(h, float(learning_rate), int(decay_steps), float(decay_rate),
                                                 1 if staircase else 0), "exponential_decay")


def noam_decay(d_model, warmup_steps, learning_rate=1.0):
    _, h = current_main()
    return _sched(lib.fl_layer_noam_decay(h, int(d_model), int(warmup_steps), float(learning_rate)), "noam_decay")


def polynomial_decay(learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0, cycle=False):
    _, h = current_main()
    return _sched(lib.fl_layer_polynomial_decay(h, float(learning_rate), int(decay_steps), float(end_learning_rate),
                                                float(power), 1 if cycle else 0), "polynomial_decay")


def linear_lr_warmup(learning_rate, warmup_steps, start_lr, end_lr):
    """Linear from start_lr to end_lr over warmup_steps, then learning_rate (a number or a
    schedule's variable)."""
    _, h = current_main()
    inner = learning_rate._p if isinstance(learning_rate, Variable) else None
    const = 0.0 if inner is not None else float(learning_rate)
    return _sched(lib.fl_layer_linear_lr_warmup(h, inner, const, int(warmup_steps), float(start_lr), float(end_lr)),
                  "linear_lr_warmup")



# ---- wrappers of existing C layers -----------------------------------------------------------------


def matmul_v2(x, y, transpose_x=False, transpose_y=False, name=None):
    """Paddle 2.x's matmul (op matmul_v2)."""
    _var(x, "x", "matmul_v2")
    _var(y, "y", "matmul_v2")
    return _out(x, lib.fl_layer_matmul_v2(x._p, y._p, 1 if transpose_x else 0, 1 if transpose_y else 0), "matmul_v2")


def layer_norm(input, scale=True, shift=True, begin_norm_axis=1, epsilon=1e-05, param_attr=None, bias_attr=None,
               act=None, name=None):
    _var(input, "input", "layer_norm")
    s, b = ParamAttr._to_attr(param_attr), ParamAttr._to_attr(bias_attr)
    sc = s._c() if s is not False else None
    bc = b._c() if b is not False else None
    ptr = lib.fl_layer_layer_norm(input._p, int(begin_norm_axis), float(epsilon), 1 if scale and sc else 0,
                                  1 if shift and bc else 0, ctypes.byref(sc) if sc else None,
                                  ctypes.byref(bc) if bc else None)
    return _act(_out(input, ptr, "layer_norm"), act, "layer_norm")


def gelu(x, approximate=False, name=None):
    _var(x, "x", "gelu")
    return _out(x, lib.fl_layer_gelu(x._p, 1 if approximate else 0), "gelu")


def one_hot(input, depth, allow_out_of_range=False):
    """int ids [..., 1] -> float32 [..., depth]."""
    _var(input, "input", "one_hot")
    return _out(input, lib.fl_layer_one_hot(input._p, int(depth)), "one_hot")


def label_smooth(label, prior_dist=None, epsilon=0.1, dtype="float32", name=None):
    _var(label, "label", "label_smooth")
    return _out(label, lib.fl_layer_label_smooth(label._p, prior_dist._p if prior_dist is not None else None,
                                                 float(epsilon)), "label_smooth")


def transpose(x, perm, name=None):
    _var(x, "x", "transpose")
    arr, n = _shape(perm, "transpose")
    return _out(x, lib.fl_layer_transpose(x._p, n, arr), "transpose")


def gather(input, index, overwrite=True):
    _var(input, "input", "gather")
    _var(index, "index", "gather")
    return _out(input, lib.fl_layer_gather(input._p, index._p), "gather")


def expand(x, expand_times, name=None):
    _var(x, "x", "expand")
    arr, n = _shape(expand_times, "expand")
    return _out(x, lib.fl_layer_expand(x._p, n, arr), "expand")
