"""fluid.core: the few names programs reach through it."""
from .._tensor import LoDTensor  # noqa: F401
from ..executor import CPUPlace, CUDAPlace, Scope  # noqa: F401
from ..feeding import EOFException  # noqa: F401
