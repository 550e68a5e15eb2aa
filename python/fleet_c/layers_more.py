"""More fluid.layers: elementwise max / min, comparisons and logical ops, fill_constant,
l2_normalize, topk, sqrt / abs / exp / log, shape, assign, create_global_var, the
learning-rate schedules, conv2d_transpose, sequence_conv and Print.  Each is one call of a C layer builder (fleet/graph.h); layers.py
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
from .layers import _apply, _apply_main, _elementwise, _pair, _shape, _unary, _var
from .param_attr import ParamAttr

__all__ = ["elementwise_max", "elementwise_min", "less_than", "less_equal", "greater_than", "greater_equal", "equal",
           "not_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "fill_constant", "l2_normalize",
           "topk", "sqrt", "abs", "exp", "log", "shape", "assign", "create_global_var", "piecewise_decay",
           "cosine_decay", "natural_exp_decay", "inverse_time_decay", "noam_decay", "polynomial_decay",
           "linear_lr_warmup", "exponential_decay_var", "square_error_cost", "matmul_v2", "layer_norm", "gelu",
           "one_hot", "label_smooth", "transpose", "gather", "expand", "conv2d_transpose", "sequence_conv", "Print"]


# ---- elementwise max / min, comparisons, logical ops --------------------------------------------


_MAXMIN_DOC = "%s(x, y) elementwise, broadcast both ways; the gradient goes to the chosen side."
elementwise_max = _elementwise("max", _MAXMIN_DOC)
elementwise_min = _elementwise("min", _MAXMIN_DOC)


def _compare(op):
    def layer(x, y, force_cpu=None, cond=None, name=None):
        if cond is not None:
            raise NotImplementedError("%s: cond (an output variable to write into) is not supported; use the "
                                      "returned variable" % op)
        return _apply(op, lib.fl_layer_compare, [("x", x), ("y", y)], _lib.cstr(op))

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
        if out is not None:
            raise NotImplementedError("%s: out is not supported; use the returned variable" % op)
        if unary:
            return _apply(op, lambda xp: lib.fl_layer_logical(xp, None, _lib.cstr(op)), [("x", x)])
        return _apply(op, lib.fl_layer_logical, [("x", x), ("y", y)], _lib.cstr(op))

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
    arr, n = _shape(list(shape), "fill_constant")
    return _apply_main("fill_constant", lib.fl_layer_fill_constant, n, arr, dtype_code(dtype), float(value))


def l2_normalize(x, axis, epsilon=1e-12, name=None):
    return _apply("l2_normalize", lib.fl_layer_l2_normalize, [("x", x)], int(axis), float(epsilon))


def topk(input, k, name=None):
    """(values, indices) of the k largest entries along the last dim; indices int64."""
    idx = ctypes.c_void_p()
    values = _apply("topk", lib.fl_layer_topk, [("input", input)], int(k), ctypes.byref(idx))
    return values, input.program._wrap(idx.value)


sqrt = _unary("sqrt", lib.fl_layer_unary, _lib.cstr("sqrt"))
abs = _unary("abs", lib.fl_layer_unary, _lib.cstr("abs"))  # noqa: A001 (fluid.layers.abs)
exp = _unary("exp", lib.fl_layer_unary, _lib.cstr("exp"))
log = _unary("log", lib.fl_layer_unary, _lib.cstr("log"))


def shape(input):
    """int32 [rank] holding input's run-time dims."""
    return _apply("shape", lib.fl_layer_shape, [("input", input)])


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
    arr, n = _shape(a.shape, "assign")
    return _apply_main("assign", lib.fl_layer_assign_value, n, arr, dtype_code(a.dtype),
                       a.ctypes.data_as(ctypes.c_void_p))


def create_global_var(shape, value, dtype, persistable=False, force_cpu=False, name=None):
    """A variable of the main program.  persistable: filled with value by the startup
    program, kept in the scope between runs and saved with the persistables; not (Paddle's
    default): not saved, and set to value in every run (fl_layer_create_global_var_ex)."""
    arr, n = _shape(list(shape), "create_global_var")
    return _apply_main("create_global_var", lib.fl_layer_create_global_var_ex, _lib.cstr(name), n, arr,
                       dtype_code(dtype), float(value), 1 if persistable else 0)


def square_error_cost(input, label):
    """(input - label)^2 elementwise (an elementwise_sub and a square op)."""
    from .layers import elementwise_sub, square
    _var(input, "input", "square_error_cost")
    _var(label, "label", "square_error_cost")
    return square(elementwise_sub(input, label))


# ---- learning-rate schedules ------------------------------------------------------------------------


def _sched(what, fn, *args):
    """Appends schedule op `what` (the C builder fn gets the current main program, then
    args), unless the program has a paddle.optimizer.lr scheduler."""
    prog, _ = current_main()
    s = getattr(prog, "_lr_scheduler", None)
    if s is not None and s[2]:
        raise ValueError("%s: the program has a paddle.optimizer.lr scheduler (%s), stepped by step(); a fluid.layers "
                         "schedule would read its counter: use one kind" % (what, type(s[0]).__name__))
    return _apply_main(what, fn, *args)


def piecewise_decay(boundaries, values):
    """values[i] while the step (runs of the main program, from 0) is below boundaries[i]."""
    b = [int(x) for x in boundaries]
    v = [float(x) for x in values]
    if len(v) != len(b) + 1:
        raise ValueError("piecewise_decay: len(values) must be len(boundaries) + 1, got %d and %d" % (len(v), len(b)))
    return _sched("piecewise_decay", lib.fl_layer_piecewise_decay, (ctypes.c_int64 * max(1, len(b)))(*b), len(b),
                  (ctypes.c_float * len(v))(*v))


def cosine_decay(learning_rate, step_each_epoch, epochs):
    return _sched("cosine_decay", lib.fl_layer_cosine_decay, float(learning_rate), int(step_each_epoch), int(epochs))


def natural_exp_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    return _sched("natural_exp_decay", lib.fl_layer_natural_exp_decay, float(learning_rate), int(decay_steps),
                  float(decay_rate), 1 if staircase else 0)


def inverse_time_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    return _sched("inverse_time_decay", lib.fl_layer_inverse_time_decay, float(learning_rate), int(decay_steps),
                  float(decay_rate), 1 if staircase else 0)


def exponential_decay_var(learning_rate, decay_steps, decay_rate, staircase=False):
    """exponential_decay as a variable (fluid.layers.exponential_decay returns an object
    that the optimizer turns into the same op)."""
    return _sched("exponential_decay", lib.fl_layer_exponential_decay, float(learning_rate), int(decay_steps),
                  float(decay_rate), 1 if staircase else 0)


def noam_decay(d_model, warmup_steps, learning_rate=1.0):
    return _sched("noam_decay", lib.fl_layer_noam_decay, int(d_model), int(warmup_steps), float(learning_rate))


def polynomial_decay(learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0, cycle=False):
    return _sched("polynomial_decay", lib.fl_layer_polynomial_decay, float(learning_rate), int(decay_steps),
                  float(end_learning_rate), float(power), 1 if cycle else 0)


def linear_lr_warmup(learning_rate, warmup_steps, start_lr, end_lr):
    """Linear from start_lr to end_lr over warmup_steps, then learning_rate (a number or a
    schedule's variable)."""
    inner = learning_rate._p if isinstance(learning_rate, Variable) else None
    const = 0.0 if inner is not None else float(learning_rate)
    return _sched("linear_lr_warmup", lib.fl_layer_linear_lr_warmup, inner, const, int(warmup_steps), float(start_lr),
                  float(end_lr))


# ---- wrappers of existing C layers -----------------------------------------------------------------


def matmul_v2(x, y, transpose_x=False, transpose_y=False, name=None):
    """Paddle 2.x's matmul (op matmul_v2)."""
    return _apply("matmul_v2", lib.fl_layer_matmul_v2, [("x", x), ("y", y)], 1 if transpose_x else 0,
                  1 if transpose_y else 0)


def layer_norm(input, scale=True, shift=True, begin_norm_axis=1, epsilon=1e-05, param_attr=None, bias_attr=None,
               act=None, name=None):
    s, b = ParamAttr._to_attr(param_attr), ParamAttr._to_attr(bias_attr)
    sc = s._c() if s is not False else None
    bc = b._c() if b is not False else None
    return _apply("layer_norm", lib.fl_layer_layer_norm, [("input", input)], int(begin_norm_axis), float(epsilon),
                  1 if scale and sc else 0, 1 if shift and bc else 0, ctypes.byref(sc) if sc else None,
                  ctypes.byref(bc) if bc else None, act=act)


def gelu(x, approximate=False, name=None):
    return _apply("gelu", lib.fl_layer_gelu, [("x", x)], 1 if approximate else 0)


def one_hot(input, depth, allow_out_of_range=False):
    """int ids [..., 1] -> float32 [..., depth]."""
    return _apply("one_hot", lib.fl_layer_one_hot, [("input", input)], int(depth))


def label_smooth(label, prior_dist=None, epsilon=0.1, dtype="float32", name=None):
    if prior_dist is None:
        return _apply("label_smooth", lambda lp: lib.fl_layer_label_smooth(lp, None, float(epsilon)),
                      [("label", label)])
    return _apply("label_smooth", lib.fl_layer_label_smooth, [("label", label), ("prior_dist", prior_dist)],
                  float(epsilon))


def transpose(x, perm, name=None):
    arr, n = _shape(perm, "transpose")
    return _apply("transpose", lib.fl_layer_transpose, [("x", x)], n, arr)


def gather(input, index, overwrite=True):
    return _apply("gather", lib.fl_layer_gather, [("input", input), ("index", index)])


def expand(x, expand_times, name=None):
    arr, n = _shape(expand_times, "expand")
    return _apply("expand", lib.fl_layer_expand, [("x", x)], n, arr)


# ---- transposed convolution, sequence_conv, Print ---------------------------------------------------


def _pads4(padding, op):
    """Paddle's padding forms -> (padding_algorithm, [top, bottom, left, right]): 'SAME' /
    'VALID', an int, [h, w], [top, bottom, left, right] or (NCHW) [[0, 0], [0, 0], [top,
    bottom], [left, right]]."""
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "VALID"):
            raise ValueError("%s: padding must be 'SAME', 'VALID' or sizes, got %r" % (op, padding))
        return padding.upper(), [0, 0, 0, 0]
    if not isinstance(padding, (list, tuple)):
        return "EXPLICIT", [int(padding)] * 4
    p = list(padding)
    if len(p) == 4 and all(isinstance(v, (list, tuple)) for v in p):
        if [list(v) for v in p[:2]] != [[0, 0], [0, 0]]:
            raise ValueError("%s: padding %r pads the batch or channel dims (NCHW: [[0, 0], [0, 0], [top, bottom], "
                             "[left, right]])" % (op, padding))
        return "EXPLICIT", [int(p[2][0]), int(p[2][1]), int(p[3][0]), int(p[3][1])]
    if len(p) == 2:
        return "EXPLICIT", [int(p[0]), int(p[0]), int(p[1]), int(p[1])]
    if len(p) == 4:
        return "EXPLICIT", [int(v) for v in p]
    raise ValueError("%s: padding must be an int, [h, w], [top, bottom, left, right] or 'SAME' / 'VALID', got %r"
                     % (op, padding))


def _conv2d_transpose(op, input, num_filters, output_size, filter_size, padding, stride, dilation, groups,
                      param_attr, bias_attr, act, data_format, output_padding=0):
    _var(input, "input", op)
    if data_format != "NCHW":
        raise NotImplementedError("%s: data_format %r is not supported (NCHW only)" % (op, data_format))
    a = _lib.Conv2dTransposeAttr()
    alg, pads = _pads4(padding, op)
    a.padding_algorithm = _lib.cstr(alg)
    a.padding[:] = pads
    a.stride[:] = _pair(stride, op, "stride")
    a.dilation[:] = _pair(dilation, op, "dilation")
    a.groups = int(groups or 1)
    if output_size is not None:
        a.output_size[:] = _pair(output_size, op, "output_size")
    a.output_padding[:] = _pair(output_padding, op, "output_padding")
    kh, kw = (0, 0) if filter_size is None else _pair(filter_size, op, "filter_size")
    w, b = ParamAttr._to_attr(param_attr), ParamAttr._to_attr(bias_attr)
    if w is False:
        raise ValueError("%s: param_attr=False makes no sense for the filter" % op)
    a.filter = w._c()
    if b is False:
        a.no_bias = 1
    else:
        a.bias = b._c()
    return _apply(op, lib.fl_layer_conv2d_transpose, [("input", input)], int(num_filters), kh, kw, _lib.cstr(act),
                  ctypes.byref(a))


def conv2d_transpose(input, num_filters, output_size=None, filter_size=None, padding=0, stride=1, dilation=1,
                     groups=None, param_attr=None, bias_attr=None, use_cudnn=True, act=None, name=None,
                     data_format="NCHW"):
    """NCHW transposed convolution (op conv2d_transpose), filter [C, num_filters / groups, kh,
    kw] (Xavier), bias and act as their own ops; filter_size None derives it from
    output_size as Paddle does."""
    return _conv2d_transpose("conv2d_transpose", input, num_filters, output_size, filter_size, padding, stride,
                             dilation, groups, param_attr, bias_attr, act, data_format)


def sequence_conv(input, num_filters, filter_size=3, filter_stride=1, padding=True, padding_start=None,
                  bias_attr=None, param_attr=None, act=None, name=None):
    """Convolution over the rows of each sequence of a LoD input [T, D] (op sequence_conv):
    filter [filter_size * D, num_filters] (Xavier), zeros outside each sequence; padding
    is ignored, as Paddle's (the output always has the input's rows)."""
    _var(input, "input", "sequence_conv")
    start = -(int(filter_size) // 2) if padding_start is None else int(padding_start)  # Paddle's layer default
    w, b = ParamAttr._to_attr(param_attr), ParamAttr._to_attr(bias_attr)
    if w is False:
        raise ValueError("sequence_conv: param_attr=False makes no sense for the filter")
    wc = w._c()
    bc = b._c() if b is not False else None
    return _apply("sequence_conv", lib.fl_layer_sequence_conv, [("input", input)], int(num_filters),
                  int(filter_size), start, int(filter_stride), _lib.cstr(act), ctypes.byref(wc),
                  ctypes.byref(bc) if bc is not None else None, 1 if b is False else 0)


def Print(input, first_n=-1, message=None, summarize=20, print_tensor_name=True, print_tensor_type=True,
          print_tensor_shape=True, print_tensor_layout=True, print_tensor_lod=True, print_phase="both"):
    """Paddle's Print (op print): returns a copy of input that writes input's name,
    message, LoD, shape, layout, dtype and first summarize values to stderr each time it
    runs (print_phase 'backward' or 'both': its gradient's too); first_n > 0 stops after
    that many records."""
    flags = ((_lib.PRINT_NAME if print_tensor_name else 0) | (_lib.PRINT_TYPE if print_tensor_type else 0) |
             (_lib.PRINT_SHAPE if print_tensor_shape else 0) | (_lib.PRINT_LOD if print_tensor_lod else 0) |
             (_lib.PRINT_LAYOUT if print_tensor_layout else 0))
    return _apply("Print", lib.fl_layer_print, [("input", input)], int(first_n), _lib.cstr(message or ""),
                  int(summarize), flags, _lib.cstr(print_phase))
