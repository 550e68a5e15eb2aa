"""paddle.static: data, programs, the executor and saving inference models (2.x names)."""
from .. import io as _io
from ..executor import BuildStrategy, CompiledProgram, ExecutionStrategy, Executor, Scope, global_scope, scope_guard
from ..framework import Program, Variable, default_main_program, default_startup_program, program_guard
from ..layers import _data
from ..layers import accuracy, auc  # noqa: F401  (paddle.static.accuracy / auc)
from ..layers import create_global_var  # noqa: F401
from ..layers import Print  # noqa: F401  (paddle.static.Print)
from ..param_attr import ParamAttr
from . import nn

__all__ = ["data", "Program", "Variable", "default_main_program", "default_startup_program", "program_guard",
           "Executor", "CompiledProgram", "Scope", "global_scope", "scope_guard", "save_inference_model",
           "load_inference_model", "nn", "ParamAttr", "InputSpec", "BuildStrategy", "ExecutionStrategy",
           "create_global_var", "save", "load", "Print"]


def data(name, shape, dtype=None, lod_level=0):
    """paddle.static.data: the first dimension None or -1 is the batch.  A shape starting
    with a number is taken per example, with a batch dimension put in front (the seeds'
    dataset slots: shape=[13], shape=[1]): Fleet's batch dimension is always variable."""
    return _data(name, shape, dtype or "float32", lod_level, True)


class InputSpec:
    def __init__(self, shape, dtype="float32", name=None):
        self.shape, self.dtype, self.name = shape, dtype, name


def save_inference_model(path_prefix, feed_vars, fetch_vars, executor, program=None, **kwargs):
    """Saves to the directory path_prefix (Fleet writes __model__ and params.safetensors in it)."""
    feeds = feed_vars if isinstance(feed_vars, (list, tuple)) else [feed_vars]
    return _io.save_inference_model(path_prefix, feeds, fetch_vars, executor, program)


def load_inference_model(path_prefix, executor, **kwargs):
    return _io.load_inference_model(path_prefix, executor)


def save(program, model_path, protocol=4, **configs):
    """paddle.static.save: program's persistable variables (parameters, optimizer state) from
    the global scope, as fluid.io.save_persistables writes them: into the directory
    model_path (persistables.safetensors), not Paddle's model_path.pdparams / .pdopt files;
    paddle.static.load reads it back."""
    exe = Executor()
    try:
        _io.save_persistables(exe, model_path, program)
    finally:
        exe.close()


def load(program, model_path, executor=None, var_list=None):
    """paddle.static.load: what paddle.static.save wrote, into the global scope (the
    startup program must have run).  var_list (a subset) is not supported."""
    if var_list is not None:
        raise NotImplementedError("paddle.static.load: var_list is not supported (every persistable variable loads)")
    exe = executor if executor is not None else Executor()
    _io.load_persistables(exe, model_path, program)
