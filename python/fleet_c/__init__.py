"""fleet_c: Fleet in C from Python, with PaddlePaddle's names.

    import fleet_c as paddle                          # paddle 2.x static-graph names
    import fleet_c.fluid as fluid                     # fluid 1.x names
    from fleet_c.distributed import fleet             # paddle.distributed.fleet
    import fleet_c.distributed.fleet.base.role_maker as role_maker

Programs are static (build, then run with an Executor); everything runs on the CPU through
libfleet.so (see fleet_c._lib for how it is found).  docs/python.md in the repository lists
what is covered and how it differs from Paddle.

Names are loaded on first use (PEP 562), so that ``import
fleet_c.distributed.fleet.data_generator`` in a dataset's pipe_command, started once per
file and pass, loads neither NumPy nor the library.
"""
import importlib as _importlib

__version__ = "0.1.0"

_LAZY = {
    "._lib": ["FleetError", "FleetIOError", "FleetTimeoutError", "InvalidArgumentError", "NotFoundError",
              "UnsupportedError", "library_path", "version"],
    "._tensor": ["FetchedArray", "LoDTensor", "create_lod_tensor"],
    ".executor": ["CPUPlace", "CUDAPinnedPlace", "CUDAPlace", "Executor", "Scope", "global_scope", "scope_guard"],
    ".framework": ["Program", "Variable", "default_main_program", "default_startup_program", "program_guard"],
    ".param_attr": ["ParamAttr"],
    ".reader": ["batch"],
    ".tensor_api": ["full", "zeros", "ones", "shape", "assign", "cast", "sqrt", "abs", "exp", "log", "square",
                    "maximum", "minimum", "less_than", "less_equal", "greater_than", "greater_equal", "equal",
                    "not_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "matmul", "topk",
                    "subtract", "divide", "transpose", "gather", "one_hot", "squeeze", "unsqueeze", "clip",
                    "where"],
}
_WHERE = {name: mod for mod, names in _LAZY.items() for name in names}
_SUBMODULES = ["dataset", "distributed", "fluid", "framework", "initializer", "io", "layers", "metric", "nn",
               "optimizer", "reader", "regularizer", "static", "unique_name", "vision"]

__all__ = sorted(_WHERE) + _SUBMODULES + ["enable_static", "disable_static", "in_dynamic_mode", "mean", "sum",
                                          "concat", "reshape", "add", "multiply"]


def __getattr__(name):
    if name in _WHERE:
        value = getattr(_importlib.import_module(_WHERE[name], __name__), name)
    elif name in _SUBMODULES:
        value = _importlib.import_module("." + name, __name__)
    else:
        raise AttributeError("module 'fleet_c' has no attribute '%s'" % name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


def enable_static():
    """Programs are always static here: nothing to switch."""


def disable_static(place=None):
    raise NotImplementedError("fleet_c runs static programs only (dynamic graph mode is not supported)")


def in_dynamic_mode():
    return False


def mean(x, axis=None, keepdim=False, name=None):
    from . import layers
    return layers.mean(x) if axis is None else layers.reduce_mean(x, axis, keepdim)


def sum(x, axis=None, dtype=None, keepdim=False, name=None):
    from . import layers
    return layers.reduce_sum(x, axis, keepdim)


def concat(x, axis=0, name=None):
    from . import layers
    return layers.concat(x, axis)


def reshape(x, shape, name=None):
    from . import layers
    return layers.reshape(x, shape)


def add(x, y, name=None):
    from . import layers
    return layers.elementwise_add(x, y)


def multiply(x, y, name=None):
    from . import layers
    return layers.elementwise_mul(x, y)
