"""fluid.incubate.fleet.base.role_maker (1.x): the same role makers as 2.x."""
from .....role_maker import *  # noqa: F401,F403
from .....role_maker import __all__  # noqa: F401
