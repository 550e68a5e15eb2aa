"""fluid.transpiler.distribute_transpiler (1.x)."""
from ....strategy import DistributeTranspilerConfig  # noqa: F401
from ....transpiler import DistributeTranspiler  # noqa: F401
from . import distributed_strategy  # noqa: F401
