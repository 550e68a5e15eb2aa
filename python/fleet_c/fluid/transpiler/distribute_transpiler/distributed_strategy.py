"""StrategyFactory (fluid 1.x, ...parameter_server.distribute_transpiler.distributed_strategy):
the four parameter-server modes as configs for fleet.distributed_optimizer."""
from ....strategy import DistributeTranspilerConfig, StrategyFactory  # noqa: F401
