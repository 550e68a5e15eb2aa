"""fluid: Paddle 1.x names (import fleet_c.fluid as fluid).

fluid.layers, .optimizer, .initializer, .regularizer, .param_attr, .io, .framework and
.unique_name are the
package's own modules under their 1.x names (import fleet_c.fluid.layers works too).
"""
import sys as _sys

from .. import executor, framework, initializer, io, layers, optimizer, param_attr, regularizer, unique_name
from .._tensor import LoDTensor, create_lod_tensor
from ..dataset import DatasetFactory, InMemoryDataset, QueueDataset
from ..executor import (BuildStrategy, CompiledProgram, CPUPlace, CUDAPinnedPlace, CUDAPlace, ExecutionStrategy,
                        Executor, Scope, cpu_places, cuda_places, global_scope, scope_guard)
from ..framework import Program, Variable, default_main_program, default_startup_program, program_guard
from ..layers import _data
from ..param_attr import ParamAttr
from ..feeding import DataFeeder
from ..strategy import DistributeTranspilerConfig
from ..transpiler import DistributeTranspiler
from . import compiler, contrib, core, incubate, metrics, nets, transpiler

from .. import grad_clip as clip  # noqa: E402  fluid.clip.GradientClipBy...
from .. import collective as _collective

layers.collective = _collective  # fluid.layers.collective._c_allreduce
_sys.modules[__name__ + ".layers.collective"] = _collective

for _name in ("clip", "executor", "framework", "initializer", "io", "layers", "optimizer", "param_attr",
              "regularizer", "unique_name"):
    _sys.modules[__name__ + "." + _name] = globals()[_name]


def data(name, shape, dtype="float32", lod_level=0):
    """fluid.data (1.8): the shape includes the batch dimension (None or -1)."""
    return _data(name, shape, dtype, lod_level, True)
