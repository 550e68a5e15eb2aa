"""fluid.transpiler (1.x): the parameter-server settings programs import from here
(DistributeTranspilerConfig); the transpiling itself is the C fleet's
(fleet.distributed_optimizer(optimizer, config).minimize(loss))."""
from ...strategy import DistributeTranspilerConfig  # noqa: F401
from . import distribute_transpiler  # noqa: F401
