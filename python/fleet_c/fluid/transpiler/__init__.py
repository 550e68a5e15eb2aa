"""fluid.transpiler (1.x): DistributeTranspiler and its config (fleet_c.transpiler: the
transpiler API over the parameter-server runtime)."""
from ...strategy import DistributeTranspilerConfig  # noqa: F401
from ...transpiler import DistributeTranspiler  # noqa: F401
from . import distribute_transpiler  # noqa: F401
