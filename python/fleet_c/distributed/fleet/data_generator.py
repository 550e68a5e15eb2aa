"""paddle.distributed.fleet.data_generator."""
from ...data_generator import DataGenerator, MultiSlotDataGenerator, MultiSlotStringDataGenerator  # noqa: F401
