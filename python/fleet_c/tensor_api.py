"""Paddle 2.x tensor functions on static programs (paddle.full, paddle.shape, paddle.maximum
...), each the fluid layer of the same op (layers.py, layers_more.py)."""
from . import layers as _L
from ._lib import lib
from .framework import Variable

__all__ = ["full", "zeros", "ones", "shape", "assign", "cast", "sqrt", "abs", "exp", "log", "square", "maximum",
           "minimum", "less_than", "less_equal", "greater_than", "greater_equal", "equal", "not_equal",
           "logical_and", "logical_or", "logical_xor", "logical_not", "matmul", "topk", "subtract", "divide",
           "transpose", "gather", "one_hot", "squeeze", "unsqueeze", "clip", "where"]


def full(shape, fill_value, dtype=None, name=None):
    return _L.fill_constant(shape, dtype or "float32", fill_value)


def zeros(shape, dtype=None, name=None):
    return full(shape, 0.0, dtype)


def ones(shape, dtype=None, name=None):
    return full(shape, 1.0, dtype)


def shape(input):
    return _L.shape(input)


def assign(x, output=None):
    return _L.assign(x, output)


def cast(x, dtype):
    return _L.cast(x, dtype)


def _same(fn):
    def f(x, name=None):
        return fn(x)

    f.__name__ = fn.__name__
    return f


sqrt, abs, exp, log, square = (_same(_L.sqrt), _same(_L.abs), _same(_L.exp), _same(_L.log),  # noqa: A001
                               _same(_L.square))


def maximum(x, y, name=None):
    return _L.elementwise_max(x, y)


def minimum(x, y, name=None):
    return _L.elementwise_min(x, y)


def subtract(x, y, name=None):
    return _L.elementwise_sub(x, y)


def divide(x, y, name=None):
    return _L.elementwise_div(x, y)


def _pair(fn):
    def f(x, y, name=None):
        return fn(x, y)

    f.__name__ = fn.__name__
    return f


less_than, less_equal, greater_than, greater_equal, equal, not_equal = (
    _pair(_L.less_than), _pair(_L.less_equal), _pair(_L.greater_than), _pair(_L.greater_equal), _pair(_L.equal),
    _pair(_L.not_equal))
logical_and, logical_or, logical_xor = _pair(_L.logical_and), _pair(_L.logical_or), _pair(_L.logical_xor)


def logical_not(x, out=None, name=None):
    return _L.logical_not(x, out=out)


def matmul(x, y, transpose_x=False, transpose_y=False, name=None):
    return _L.matmul_v2(x, y, transpose_x, transpose_y)


def topk(x, k, axis=-1, largest=True, sorted=True, name=None):
    if axis not in (-1, len(x.shape) - 1) or not largest:
        raise NotImplementedError("topk: the largest values along the last axis only")
    return _L.topk(x, k)


def transpose(x, perm, name=None):
    return _L.transpose(x, perm)


def gather(x, index, axis=None, name=None):
    if axis not in (None, 0):
        raise NotImplementedError("gather: axis 0 only")
    return _L.gather(x, index)


def one_hot(x, num_classes, name=None):
    return _L.one_hot(x, num_classes)


def _reshape_to(x, dims, what):
    """reshape (op reshape) to dims, where the one unknown dimension (-1) of x stays -1."""
    if sum(1 for d in dims if d < 0) > 1:
        raise ValueError("%s: x has more than one unknown dimension (%s); reshape needs all but one known"
                         % (what, list(x.shape)))
    return _L.reshape(x, [int(d) if d >= 0 else -1 for d in dims])


def _axes(axis, ndim, what):
    axes = [axis] if isinstance(axis, int) else list(axis)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError("%s: axis %d outside [-%d, %d)" % (what, a, ndim, ndim))
        out.append(a % ndim)
    return out


def squeeze(x, axis=None, name=None):
    """Drops the size-1 dimensions (those in axis only, when given): a reshape."""
    shape = list(x.shape)
    drop = [i for i, d in enumerate(shape) if d == 1] if axis is None else \
        [a for a in _axes(axis, len(shape), "squeeze") if shape[a] == 1]
    return _reshape_to(x, [d for i, d in enumerate(shape) if i not in drop], "squeeze")


def unsqueeze(x, axis, name=None):
    """Inserts size-1 dimensions at axis (positions in the output): a reshape."""
    shape = list(x.shape)
    axes = [axis] if isinstance(axis, int) else list(axis)
    for a in axes:
        n = len(shape) + 1
        if not -n <= a < n:
            raise ValueError("unsqueeze: axis %d outside [-%d, %d)" % (a, n, n))
        shape.insert(a % n, 1)
    return _reshape_to(x, shape, "unsqueeze")


def clip(x, min=None, max=None, name=None):
    """min(max(x, min), max) elementwise (ops elementwise_max / elementwise_min with a
    filled scalar)."""
    out = x
    if min is not None:
        out = _L.elementwise_max(out, _L.fill_constant([1], x.dtype, float(min)))
    if max is not None:
        out = _L.elementwise_min(out, _L.fill_constant([1], x.dtype, float(max)))
    return out


def where(condition, x=None, y=None, name=None):
    """condition ? x : y elementwise (op where; condition non-zero is true, e.g. a comparison's
    int32 0 / 1), the three broadcast together; gradients to x where condition holds, to y
    elsewhere.  x or y may be a Python number (a filled [1] tensor of the other's dtype)."""
    if x is None and y is None:
        raise NotImplementedError("where(condition) alone (the indices of the true elements, Paddle's op "
                                  "where_index) is not supported; give x and y")
    if x is None or y is None:
        raise ValueError("where: give both x and y, or neither")
    if not isinstance(condition, Variable):
        raise TypeError("where: condition must be a Variable, got %s" % type(condition).__name__)
    if not isinstance(x, Variable) and not isinstance(y, Variable):
        raise TypeError("where: x or y must be a Variable, got %s and %s" % (type(x).__name__, type(y).__name__))
    if not isinstance(x, Variable):
        x = _L.fill_constant([1], y.dtype, float(x))
    if not isinstance(y, Variable):
        y = _L.fill_constant([1], x.dtype, float(y))
    return x.program._layer_result(lib.fl_layer_where(condition._p, x._p, y._p), "where")
