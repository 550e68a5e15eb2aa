"""paddle.distributed.fleet.base.role_maker."""
from ....role_maker import *  # noqa: F401,F403
from ....role_maker import __all__  # noqa: F401
