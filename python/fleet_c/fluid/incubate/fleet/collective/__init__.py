"""fluid.incubate.fleet.collective (1.x): the collective fleet (init() without a role maker
is collective here)."""
from ....._fleet import Fleet
from .....strategy import DistributedStrategy  # noqa: F401

fleet = Fleet(default_collective=True)
