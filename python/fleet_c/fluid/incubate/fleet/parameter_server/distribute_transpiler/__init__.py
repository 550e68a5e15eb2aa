"""fluid.incubate.fleet.parameter_server.distribute_transpiler (1.x): the parameter-server
fleet.  As in Paddle 1.x, distributed_optimizer(optimizer) without a strategy trains
synchronously (DistributeTranspilerConfig().sync_mode is True); pass a config with
sync_mode=False, or a DistributedStrategy, for asynchronous training."""
from ......_fleet import Fleet
from ......strategy import DistributedStrategy, DistributeTranspilerConfig, StrategyFactory  # noqa: F401
from . import distributed_strategy  # noqa: F401,E402

fleet = Fleet(default_collective=False, ps_default_sync=True)
