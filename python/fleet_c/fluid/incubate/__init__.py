"""fluid.incubate: fleet (1.x) and data_generator."""
from . import data_generator, fleet  # noqa: F401
