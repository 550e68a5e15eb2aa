"""fluid.contrib (1.x): the names programs import from it."""
from . import utils  # noqa: F401
