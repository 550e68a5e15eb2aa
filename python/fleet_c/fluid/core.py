"""fluid.core: the few names programs reach through it."""
from .._tensor import LoDTensor  # noqa: F401
from ..executor import CPUPlace, CUDAPlace, Scope  # noqa: F401
from ..feeding import EOFException  # noqa: F401


def is_compiled_with_cuda():
    """True: programs written for GPUs check this before using CUDAPlace, which this build
    accepts and runs on the CPU (executor.CUDAPlace warns once), so that they run as
    written."""
    return True
