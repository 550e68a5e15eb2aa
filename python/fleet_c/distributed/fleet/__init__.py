"""paddle.distributed.fleet: the process's fleet as module functions (Paddle 2.x).

    from fleet_c.distributed import fleet
    fleet.init(is_collective=True, strategy=strategy)     # or fleet.init(role_maker)
    optimizer = fleet.distributed_optimizer(optimizer, strategy)

The fleet object (fleet_c._fleet.Fleet) and the names below are made on first use, so
that the data_generator submodule imports nothing heavy (see fleet_c/__init__.py).
"""
import importlib as _importlib

_METHODS = ["init", "distributed_optimizer", "is_collective", "is_distributed", "is_first_worker", "is_worker",
            "is_server", "worker_index", "worker_num", "server_index", "server_num", "worker_endpoints",
            "server_endpoints", "barrier_worker", "init_worker", "stop_worker", "init_server", "run_server",
            "save_persistables", "save_inference_model", "split_files", "util", "dgc_stats"]
_CLASSES = {"DistributedStrategy": "...strategy", "PaddleCloudRoleMaker": "...role_maker",
            "UserDefinedRoleMaker": "...role_maker", "Role": "...role_maker", "Fleet": "..._fleet",
            "UtilBase": "..._fleet", "DistributedOptimizer": "..._fleet",
            "MultiSlotDataGenerator": ".data_generator", "MultiSlotStringDataGenerator": ".data_generator"}

__all__ = _METHODS + sorted(_CLASSES) + ["base", "data_generator", "metrics", "utils"]


def __getattr__(name):
    if name == "_fleet":
        value = _importlib.import_module("..._fleet", __name__).Fleet()
    elif name in _METHODS:
        the_fleet = globals().get("_fleet") or __getattr__("_fleet")
        value = getattr(the_fleet, name)
    elif name in _CLASSES:
        value = getattr(_importlib.import_module(_CLASSES[name], __name__), name)
    elif name in ("base", "data_generator", "metrics", "utils"):
        value = _importlib.import_module("." + name, __name__)
    else:
        raise AttributeError("module 'fleet_c.distributed.fleet' has no attribute '%s'" % name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
