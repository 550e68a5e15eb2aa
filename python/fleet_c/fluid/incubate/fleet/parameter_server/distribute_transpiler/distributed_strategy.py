"""fluid.incubate.fleet.parameter_server.distribute_transpiler.distributed_strategy (1.x)."""
from ......strategy import DistributeTranspilerConfig, StrategyFactory  # noqa: F401
