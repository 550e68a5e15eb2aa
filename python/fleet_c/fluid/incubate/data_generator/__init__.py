"""fluid.incubate.data_generator (1.x path of the data generators)."""
from ....data_generator import DataGenerator, MultiSlotDataGenerator, MultiSlotStringDataGenerator  # noqa: F401
