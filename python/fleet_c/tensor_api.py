"""Paddle 2.x tensor functions on static programs (paddle.full, paddle.shape, paddle.maximum
...), each the fluid layer of the same op (layers.py, layers_more.py)."""
from . import layers as _L

__all__ = ["full", "zeros", "ones", "shape", "assign", "cast", "sqrt", "abs", "exp", "log", "square", "maximum",
           "minimum", "less_than", "less_equal", "greater_than", "greater_equal", "equal", "not_equal",
           "logical_and", "logical_or", "logical_xor", "logical_not", "matmul", "topk", "subtract", "divide",
           "transpose", "gather", "one_hot"]


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
