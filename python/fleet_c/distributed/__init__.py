"""paddle.distributed: the datasets and the fleet module (loaded on first use, see
fleet_c/__init__.py)."""
import importlib as _importlib

__all__ = ["QueueDataset", "InMemoryDataset", "fleet", "get_rank", "get_world_size"]


def __getattr__(name):
    if name in ("QueueDataset", "InMemoryDataset"):
        value = getattr(_importlib.import_module("..dataset", __name__), name)
    elif name == "fleet":
        value = _importlib.import_module(".fleet", __name__)
    else:
        raise AttributeError("module 'fleet_c.distributed' has no attribute '%s'" % name)
    globals()[name] = value
    return value


def get_rank():
    """The worker index of the initialised fleet (0 before fleet.init)."""
    from . import fleet
    f = fleet._fleet
    return f.worker_index() if f._h is not None else 0


def get_world_size():
    from . import fleet
    f = fleet._fleet
    return f.worker_num() if f._h is not None else 1
