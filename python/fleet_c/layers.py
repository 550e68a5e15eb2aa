"""Layers with fluid.layers names and arguments, each one call of the C library's layer
builders (fleet/graph.h).  A layer that fails raises the library's message; the program
keeps the error (see framework.py).

Paddle arguments the C library has no counterpart for are accepted when they hold their
default value (use_cudnn, name, ...) and refused with NotImplementedError otherwise.
"""
import ctypes

from . import _lib
from ._lib import lib
from ._tensor import dtype_code
from .framework import Variable, current_main
from .param_attr import ParamAttr

__all__ = ["data", "fc", "embedding", "sequence_pool", "concat", "reshape", "elementwise_add", "elementwise_sub",
           "elementwise_mul", "elementwise_div", "relu", "tanh", "sigmoid", "softsign", "softmax", "cross_entropy",
           "softmax_with_cross_entropy", "sigmoid_cross_entropy_with_logits", "log_loss", "mean", "reduce_sum",
           "reduce_mean", "cos_sim", "scale", "dropout", "accuracy", "auc", "conv2d", "pool2d", "batch_norm",
           "create_parameter", "exponential_decay"]


def _var(x, arg, op):
    if not isinstance(x, Variable):
        raise TypeError("%s: %s must be a Variable, got %s" % (op, arg, type(x).__name__))
    return x


def _out(x, ptr, op):
    return x.program._layer_result(ptr, op)


def _apply(op, fn, inputs, *args, act=None):
    """The one op-appending preamble of the layers (here and in layers_more.py): inputs is a
    list of (argument name, value) pairs that must be Variables; the C layer builder fn gets
    their handles, then args; its result is a Variable of the first input's program (the
    library's build error raised when it failed), with act appended as its own op."""
    for arg, x in inputs:
        _var(x, arg, op)
    ptr = fn(*([x._p for _, x in inputs] + list(args)))
    return _act(_out(inputs[0][1], ptr, op), act, op)


def _apply_main(op, fn, *args):
    """The same for layers without Variable inputs: fn gets the current main program first."""
    prog, h = current_main()
    return prog._layer_result(fn(h, *args), op)


def _shape(dims, op):
    out = []
    for d in dims:
        if d is None:
            out.append(-1)
        else:
            out.append(int(d))
    return (ctypes.c_int64 * max(1, len(out)))(*out), len(out)


def _act(x, act, op):
    """Applies an activation as its own op (for layers whose C builder has none)."""
    if act is None:
        return x
    fns = {"relu": relu, "tanh": tanh, "sigmoid": sigmoid, "softmax": softmax, "softsign": softsign}
    if act not in fns:
        raise ValueError("%s: unknown activation '%s' (expected one of %s)" % (op, act, ", ".join(sorted(fns))))
    return fns[act](x)


def _unsupported(op, **given):
    for k, (v, default) in given.items():
        if v != default:
            raise NotImplementedError("%s: %s=%r is not supported by Fleet (only %r)" % (op, k, v, default))


def _pair(v, op, what):
    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise ValueError("%s: %s must be an int or a pair, got %r" % (op, what, v))
        return int(v[0]), int(v[1])
    return int(v), int(v)


# ---- inputs -------------------------------------------------------------------------------------


def _data(name, shape, dtype, lod_level, batch_included):
    """fl_layer_data always puts a variable batch dimension first.  batch_included: the
    shape's first entry is that dimension (None or -1), as fluid.data / paddle.static.data;
    a first entry that is a number is then taken as a per-example shape all the same (the
    seeds' paddle.static.data(shape=[13]) for a dataset slot)."""
    shape = list(shape)
    if batch_included and shape and (shape[0] is None or shape[0] == -1):
        shape = shape[1:]
    arr, n = _shape(shape, "data")
    return _apply_main("data '%s'" % name, lib.fl_layer_data, _lib.cstr(name), n, arr, dtype_code(dtype or "float32"),
                       int(lod_level))


def data(name, shape, dtype="float32", lod_level=0, append_batch_size=True, type=None, stop_gradient=True):
    """fluid.layers.data: shape is per example; a batch dimension -1 is put in front.
    With append_batch_size=False (or a -1 in shape, as Paddle) the shape must already
    start with the batch dimension -1."""
    shape = list(shape)
    if not append_batch_size or -1 in shape or None in shape:
        if not shape or shape[0] not in (-1, None):
            raise NotImplementedError("data '%s': shape %s: Fleet's batch dimension is always variable and comes "
                                      "first (give -1 or None there)" % (name, shape))
        return _data(name, shape, dtype, lod_level, True)
    return _data(name, shape, dtype, lod_level, False)


# ---- dense layers ---------------------------------------------------------------------------------


def fc(input, size, num_flatten_dims=1, param_attr=None, bias_attr=None, act=None, is_test=False, name=None):
    inputs = list(input) if isinstance(input, (list, tuple)) else [input]
    for i, x in enumerate(inputs):
        _var(x, "input[%d]" % i, "fc")
    attr = _lib.FcAttr()
    attr.num_flatten_dims = int(num_flatten_dims)
    w = ParamAttr._to_attr(param_attr)
    b = ParamAttr._to_attr(bias_attr)
    attr.weight = w._c()
    if b is False:
        attr.no_bias = 1
    else:
        attr.bias = b._c()
    ptrs = _lib.ptr_array([x._p for x in inputs])
    ptr = lib.fl_layer_fc_ex(ptrs, len(inputs), int(size), _lib.cstr(act), ctypes.byref(attr))
    return _out(inputs[0], ptr, "fc")


def embedding(input, size, is_sparse=False, is_distributed=False, padding_idx=None, param_attr=None,
              dtype="float32"):
    """size = [vocabulary, dimension].  ids int64 [N, 1] (LoD allowed) -> [N, dimension]."""
    if dtype_code(dtype) != 0:
        raise NotImplementedError("embedding: dtype %s is not supported (float32 only)" % dtype)
    attr = _lib.EmbeddingAttr()
    attr.is_sparse = 1 if is_sparse else 0
    attr.is_distributed = 1 if is_distributed else 0
    if padding_idx is not None:
        attr.has_padding_idx = 1
        attr.padding_idx = int(padding_idx)
    pa = ParamAttr._to_attr(param_attr)
    if pa is False:
        raise ValueError("embedding: param_attr=False makes no sense for a table")
    attr.param = pa._c()
    return _apply("embedding", lib.fl_layer_embedding, [("input", input)], int(size[0]), int(size[1]),
                  ctypes.byref(attr))


def sequence_pool(input, pool_type, is_test=False, pad_value=0.0):
    _unsupported("sequence_pool", pad_value=(pad_value, 0.0))
    return _apply("sequence_pool", lib.fl_layer_sequence_pool, [("input", input)], _lib.cstr(pool_type.lower()))


def concat(input, axis=0, name=None):
    inputs = list(input)
    for i, x in enumerate(inputs):
        _var(x, "input[%d]" % i, "concat")
    ptr = lib.fl_layer_concat(_lib.ptr_array([x._p for x in inputs]), len(inputs), int(axis))
    return _out(inputs[0], ptr, "concat")


def reshape(x, shape, actual_shape=None, act=None, inplace=False, name=None):
    arr, n = _shape(shape, "reshape")
    return _apply("reshape", lib.fl_layer_reshape, [("x", x)], n, arr, act=act)


def _elementwise(kind, doc="Paddle's elementwise_%s with its broadcasting rule (y matches x's dims from axis)."):
    """elementwise_<kind>(x, y, axis, act) over the C builder fl_layer_elementwise_<kind>
    (layers_more.py makes max and min with it)."""
    op, fn = "elementwise_" + kind, getattr(lib, "fl_layer_elementwise_" + kind)

    def layer(x, y, axis=-1, act=None, name=None):
        return _apply(op, fn, [("x", x), ("y", y)], int(axis), act=act)

    layer.__name__ = op
    layer.__doc__ = doc % kind
    return layer


elementwise_add = _elementwise("add")
elementwise_sub = _elementwise("sub")
elementwise_mul = _elementwise("mul")
elementwise_div = _elementwise("div")


def _unary(cname, fn=None, *args):
    """cname(x) over the C builder fl_layer_<cname>, or fn(x, *args) (layers_more.py's
    fl_layer_unary(x, "sqrt") ...)."""
    fn = fn or getattr(lib, "fl_layer_" + cname)

    def layer(x, name=None):
        return _apply(cname, fn, [("x", x)], *args)

    layer.__name__ = cname
    return layer


relu = _unary("relu")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
softsign = _unary("softsign")


def softmax(input, use_cudnn=False, name=None, axis=-1):
    _var(input, "input", "softmax")
    if axis not in (-1, len(input.shape) - 1):
        raise NotImplementedError("softmax: only the last axis is supported, got axis=%d" % axis)
    return _apply("softmax", lib.fl_layer_softmax, [("input", input)])


# ---- losses -----------------------------------------------------------------------------------------


def cross_entropy(input, label, soft_label=False, ignore_index=-100):
    _unsupported("cross_entropy", soft_label=(soft_label, False), ignore_index=(ignore_index, -100))
    return _apply("cross_entropy", lib.fl_layer_cross_entropy, [("input", input), ("label", label)])


def softmax_with_cross_entropy(logits, label, soft_label=False, ignore_index=-100, numeric_stable_mode=True,
                               return_softmax=False, axis=-1):
    _unsupported("softmax_with_cross_entropy", soft_label=(soft_label, False), ignore_index=(ignore_index, -100))
    loss = _apply("softmax_with_cross_entropy", lib.fl_layer_softmax_with_cross_entropy,
                  [("logits", logits), ("label", label)])
    return (loss, softmax(logits, axis=axis)) if return_softmax else loss


def sigmoid_cross_entropy_with_logits(x, label, ignore_index=-100, name=None, normalize=False):
    _unsupported("sigmoid_cross_entropy_with_logits", ignore_index=(ignore_index, -100), normalize=(normalize, False))
    return _apply("sigmoid_cross_entropy_with_logits", lib.fl_layer_sigmoid_cross_entropy_with_logits,
                  [("x", x), ("label", label)])


def log_loss(input, label, epsilon=1e-4, name=None):
    return _apply("log_loss", lib.fl_layer_log_loss, [("input", input), ("label", label)], float(epsilon))


def mean(x, name=None):
    return _apply("mean", lib.fl_layer_mean, [("x", x)])


def reduce_sum(input, dim=None, keep_dim=False, name=None):
    dims = [] if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    arr = (ctypes.c_int * max(1, len(dims)))(*dims)
    return _apply("reduce_sum", lib.fl_layer_reduce_sum, [("input", input)], arr, len(dims), 1 if keep_dim else 0)


def reduce_mean(input, dim=None, keep_dim=False, name=None):
    """The mean over dims (all of them with dim=None), by the run-time sizes: the batch
    dimension may be reduced."""
    _var(input, "input", "reduce_mean")
    if dim is None and not keep_dim:
        return mean(input)
    dims = [] if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    arr = (ctypes.c_int * max(1, len(dims)))(*dims)
    return _apply("reduce_mean", lib.fl_layer_reduce_mean, [("input", input)], arr, len(dims), 1 if keep_dim else 0)


square = _unary("square")


def cast(x, dtype):
    """x converted to dtype (float32, float64, int32, int64)."""
    return _apply("cast", lib.fl_layer_cast, [("x", x)], dtype_code(dtype))


def cos_sim(X, Y):
    return _apply("cos_sim", lib.fl_layer_cos_sim, [("X", X), ("Y", Y)])


def matmul(x, y, transpose_x=False, transpose_y=False, alpha=1.0, name=None):
    """alpha * op(x) op(y) for rank-2 or rank-3 (batched) operands."""
    return _apply("matmul", lib.fl_layer_matmul, [("x", x), ("y", y)], 1 if transpose_x else 0,
                  1 if transpose_y else 0, float(alpha))


def fill_constant_batch_size_like(input, shape, dtype, value, input_dim_idx=0, output_dim_idx=0,
                                  force_cpu=False):
    """A tensor of shape (its first dimension the batch of input) filled with value."""
    _unsupported("fill_constant_batch_size_like", input_dim_idx=(input_dim_idx, 0), output_dim_idx=(output_dim_idx, 0))
    arr, n = _shape(list(shape), "fill_constant_batch_size_like")
    return _apply("fill_constant_batch_size_like", lib.fl_layer_fill_constant_batch_size_like, [("input", input)], n,
                  arr, dtype_code(dtype), float(value))


def scale(x, scale=1.0, bias=0.0, bias_after_scale=True, act=None, name=None):
    return _apply("scale", lib.fl_layer_scale, [("x", x)], float(scale), float(bias), 1 if bias_after_scale else 0,
                  act=act)


def dropout(x, dropout_prob, is_test=False, seed=None, name=None, dropout_implementation="downgrade_in_infer"):
    """A dropout op switched to inference by Program.clone(for_test=True); is_test=True
    builds the inference form directly (a scale by 1 - p, or nothing, per implementation)."""
    _var(x, "x", "dropout")
    if dropout_implementation not in ("downgrade_in_infer", "upscale_in_train"):
        raise ValueError("dropout: dropout_implementation must be downgrade_in_infer or upscale_in_train, got %r"
                         % dropout_implementation)
    if is_test:
        return scale(x, 1.0 - float(dropout_prob)) if dropout_implementation == "downgrade_in_infer" else x
    return _apply("dropout", lib.fl_layer_dropout, [("x", x)], float(dropout_prob), _lib.cstr(dropout_implementation))


# ---- metrics --------------------------------------------------------------------------------------


def accuracy(input, label, k=1, correct=None, total=None):
    if correct is not None or total is not None:
        raise NotImplementedError("accuracy: correct/total variables are not supported (they are "
                                  "accuracy.tmp_1 and accuracy.tmp_2 of the program)")
    return _apply("accuracy", lib.fl_layer_accuracy, [("input", input), ("label", label)], int(k))


def auc(input, label, curve="ROC", num_thresholds=2 ** 12 - 1, topk=1, slide_steps=1):
    """Returns (auc, batch_auc, [batch_stat_pos, batch_stat_neg, stat_pos, stat_neg]) as
    Paddle; both AUCs are float64 [1]."""
    _var(input, "input", "auc")
    _var(label, "label", "auc")
    _unsupported("auc", curve=(curve, "ROC"), topk=(topk, 1))
    prog = input.program
    before = lib.fl_prog_num_vars(prog._h)
    batch = ctypes.c_void_p()
    ptr = lib.fl_layer_auc(input._p, label._p, int(num_thresholds), int(slide_steps), ctypes.byref(batch))
    out = _out(input, ptr, "auc")
    states = [v for v in prog.list_vars()[before:] if v.persistable]
    return out, prog._wrap(batch.value), states


# ---- convolution ---------------------------------------------------------------------------------


def conv2d(input, num_filters, filter_size, stride=1, padding=0, dilation=1, groups=None, param_attr=None,
           bias_attr=None, use_cudnn=True, act=None, name=None, data_format="NCHW"):
    _unsupported("conv2d", data_format=(data_format, "NCHW"))
    if isinstance(padding, str):
        if padding.upper() != "VALID":
            raise NotImplementedError("conv2d: padding=%r is not supported (give the sizes, or 'VALID')" % padding)
        padding = 0
    kh, kw = _pair(filter_size, "conv2d", "filter_size")
    attr = _lib.Conv2dAttr()
    attr.stride[:] = _pair(stride, "conv2d", "stride")
    attr.padding[:] = _pair(padding, "conv2d", "padding")
    attr.dilation[:] = _pair(dilation, "conv2d", "dilation")
    attr.groups = int(groups or 1)
    w = ParamAttr._to_attr(param_attr)
    b = ParamAttr._to_attr(bias_attr)
    attr.filter = w._c()
    if b is False:
        attr.no_bias = 1
    else:
        attr.bias = b._c()
    return _apply("conv2d", lib.fl_layer_conv2d, [("input", input)], int(num_filters), kh, kw, _lib.cstr(act),
                  ctypes.byref(attr))


def pool2d(input, pool_size=-1, pool_type="max", pool_stride=1, pool_padding=0, global_pooling=False,
           use_cudnn=True, ceil_mode=False, name=None, exclusive=True, data_format="NCHW"):
    _unsupported("pool2d", data_format=(data_format, "NCHW"))
    attr = _lib.Pool2dAttr()
    if not global_pooling:
        attr.pool_size[:] = _pair(pool_size, "pool2d", "pool_size")
    attr.stride[:] = _pair(pool_stride, "pool2d", "pool_stride")
    if isinstance(pool_padding, str):
        if pool_padding.upper() != "VALID":
            raise NotImplementedError("pool2d: pool_padding=%r is not supported" % pool_padding)
        pool_padding = 0
    attr.padding[:] = _pair(pool_padding, "pool2d", "pool_padding")
    attr.global_pooling = 1 if global_pooling else 0
    attr.inclusive = 0 if exclusive else 1
    attr.ceil_mode = 1 if ceil_mode else 0
    return _apply("pool2d", lib.fl_layer_pool2d_ex, [("input", input)], _lib.cstr(pool_type), ctypes.byref(attr))


def batch_norm(input, act=None, is_test=False, momentum=0.9, epsilon=1e-05, param_attr=None, bias_attr=None,
               data_layout="NCHW", in_place=False, name=None, moving_mean_name=None, moving_variance_name=None,
               do_model_average_for_mean_and_var=True, use_global_stats=False):
    _unsupported("batch_norm", data_layout=(data_layout, "NCHW"))
    attr = _lib.BatchNormAttr()
    s = ParamAttr._to_attr(param_attr)
    b = ParamAttr._to_attr(bias_attr)
    if s is False or b is False:
        raise NotImplementedError("batch_norm: a scale or bias of False is not supported")
    attr.scale = s._c()
    attr.bias = b._c()
    attr.moving_mean_name = _lib.cstr(moving_mean_name)
    attr.moving_variance_name = _lib.cstr(moving_variance_name)
    attr.use_global_stats = 1 if use_global_stats else 0
    return _apply("batch_norm", lib.fl_layer_batch_norm, [("input", input)], _lib.cstr(act), 1 if is_test else 0,
                  float(momentum), float(epsilon), ctypes.byref(attr))


# ---- parameters and schedules --------------------------------------------------------------------


def create_parameter(shape, dtype, name=None, attr=None, is_bias=False, default_initializer=None):
    pa = ParamAttr._to_attr(attr)
    if name is not None:
        pa = ParamAttr(name=name, initializer=pa.initializer, learning_rate=pa.learning_rate,
                       regularizer=pa.regularizer, trainable=pa.trainable)
    c = pa._c(default_initializer)
    arr, n = _shape(shape, "create_parameter")
    return _apply_main("create_parameter", lib.fl_layer_create_parameter, n, arr, dtype_code(dtype), ctypes.byref(c))


class ExponentialDecay:
    """A learning rate base * rate^(step / decay_steps) (floored with staircase), step
    counting runs of the main program.  Pass it as an optimizer's learning_rate."""

    def __init__(self, learning_rate, decay_steps, decay_rate, staircase=False):
        self.learning_rate = float(learning_rate)
        self.decay_steps = int(decay_steps)
        self.decay_rate = float(decay_rate)
        self.staircase = bool(staircase)


def exponential_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    return ExponentialDecay(learning_rate, decay_steps, decay_rate, staircase)


# the py_reader family (feeding.py)
from .feeding import create_py_reader_by_data, py_reader, read_file  # noqa: E402,F401
# elementwise max / min, comparisons, fill_constant, topk, schedules ... (layers_more.py)
from .layers_more import *  # noqa: E402,F401,F403
from . import layers_more as _more  # noqa: E402

__all__ += _more.__all__
