"""Initializers (fluid.initializer and paddle.nn.initializer names).

Each maps onto one fl_initializer of the C library (fleet/graph.h); NumpyArrayInitializer
(Assign) onto fl_init_assign, whose values the program holds.  seed 0 derives the
seed from the program's seed and the parameter, so runs are reproducible by default.
"""
import ctypes

import numpy as np

from ._lib import Initializer as _CInit
from ._lib import check, lib

_DEFAULT, _CONSTANT, _UNIFORM, _NORMAL, _TRUNCATED_NORMAL, _XAVIER = range(6)


class Initializer:
    """Base class: subclasses set kind, a, b and seed."""

    kind, a, b, seed = _DEFAULT, 0.0, 0.0, 0

    def _c(self):
        return _CInit(self.kind, float(self.a), float(self.b), int(self.seed or 0))

    def __repr__(self):
        return "%s(a=%g, b=%g, seed=%d)" % (type(self).__name__, self.a, self.b, self.seed or 0)


class Constant(Initializer):
    def __init__(self, value=0.0, force_cpu=False):
        self.kind, self.a = _CONSTANT, value


class Uniform(Initializer):
    def __init__(self, low=-1.0, high=1.0, seed=0, name=None):
        self.kind, self.a, self.b, self.seed = _UNIFORM, low, high, seed


class Normal(Initializer):
    """Normal(loc, scale) in fluid; Normal(mean, std) in paddle.nn.initializer."""

    def __init__(self, loc=0.0, scale=1.0, seed=0, mean=None, std=None, name=None):
        self.kind = _NORMAL
        self.a = loc if mean is None else mean
        self.b = scale if std is None else std
        self.seed = seed


class TruncatedNormal(Initializer):
    def __init__(self, loc=0.0, scale=1.0, seed=0, mean=None, std=None, name=None):
        self.kind = _TRUNCATED_NORMAL
        self.a = loc if mean is None else mean
        self.b = scale if std is None else std
        self.seed = seed


class Xavier(Initializer):
    """Xavier(uniform=True): uniform(+-sqrt(6/(fan_in+fan_out))); uniform=False: normal.
    fan_in/fan_out other than the parameter's own are not supported."""

    def __init__(self, uniform=True, fan_in=None, fan_out=None, seed=0):
        if fan_in is not None or fan_out is not None:
            raise NotImplementedError("Xavier: explicit fan_in/fan_out are not supported; the parameter's own are used")
        self.kind, self.a, self.seed = _XAVIER, 0.0 if uniform else 1.0, seed


class XavierUniform(Xavier):
    def __init__(self, fan_in=None, fan_out=None, name=None):
        super().__init__(True, fan_in, fan_out)


class XavierNormal(Xavier):
    def __init__(self, fan_in=None, fan_out=None, name=None):
        super().__init__(False, fan_in, fan_out)


class NumpyArrayInitializer(Initializer):
    """The parameter starts as the given array (fluid.initializer.NumpyArrayInitializer,
    paddle.nn.initializer.Assign): an assign_value op in the startup program carries the
    values (copied into the program being built, as float32).  Its size must be the
    parameter's element count; otherwise creating the parameter fails naming it."""

    def __init__(self, value, name=None):
        if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
            value = value.numpy()
        self.value = np.ascontiguousarray(np.asarray(value, dtype=np.float32))
        if self.value.size == 0:
            raise ValueError("NumpyArrayInitializer: the array is empty")

    def _c(self):
        from .framework import current_main
        flat = self.value.reshape(-1)
        out = _CInit()
        check(lib.fl_init_assign(current_main()[1], flat.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), flat.size,
                                 ctypes.byref(out)))
        return out

    def __repr__(self):
        return "NumpyArrayInitializer(shape=%s)" % (list(self.value.shape),)


Assign = NumpyArrayInitializer

# fluid 1.x spellings
ConstantInitializer = Constant
UniformInitializer = Uniform
NormalInitializer = Normal
TruncatedNormalInitializer = TruncatedNormal
XavierInitializer = Xavier
