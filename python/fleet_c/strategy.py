"""DistributedStrategy with Paddle 2.x field names (and fluid 1.x's
DistributeTranspilerConfig for parameter-server programs).

Every assignment goes straight to the C strategy through fleet_strategy_set, so a wrong
name or value raises at the line that set it, with the library's message; the C side
also refuses fields this build does not implement when they differ from their default.
Nested configs are dicts and merge: ``s.a_sync_configs = {"k_steps": 100}`` sets one key.
"""
import ctypes

from . import _lib
from ._lib import check, lib

__all__ = ["DistributedStrategy", "DistributeTranspilerConfig", "StrategyFactory"]

# The fields read back, with their Python types.  The values are read from the C default
# (fleet_strategy_get on fleet_strategy_default(), see _c_defaults) for every field the
# library holds; the ones written here are only the types, and the defaults of the few
# fields the library does not hold (Paddle's hints, as in distributed_strategy.proto).
_DEFAULTS = {
    "a_sync": True, "localsgd": False, "adaptive_localsgd": False, "gradient_merge": False, "amp": False,
    "dgc": False, "recompute": False, "lars": False, "lamb": False, "pipeline": False, "sharding": False,
    "tensor_parallel": False, "elastic": False, "auto": False, "sync_batch_norm": False,
    "use_hierarchical_allreduce": False, "hierarchical_allreduce_inter_nranks": 1, "fuse_all_reduce_ops": True,
    "fuse_grad_size_in_MB": 32, "fuse_grad_size_in_TFLOPS": 50, "nccl_comm_num": 1, "sync_nccl_allreduce": True,
    "allreduce_dtype": "float32",
}
_CONFIG_DEFAULTS = {
    "a_sync_configs": {"k_steps": -1, "max_merge_var_num": 0, "send_queue_size": 0,
                       "independent_recv_thread": False, "min_send_grad_num_before_recv": 1,
                       "thread_pool_size": 1, "send_wait_times": 0, "runtime_split_send_recv": False,
                       "launch_barrier": True, "half_async": False, "dense_wire_dtype": "float32"},
    "localsgd_configs": {"k_steps": 1, "begin_step": 1},
    "adaptive_localsgd_configs": {"init_k_steps": 1, "begin_step": 1},
    "gradient_merge_configs": {"k_steps": 1, "avg": True},
    "amp_configs": {"init_loss_scaling": 32768.0, "incr_every_n_steps": 1000, "decr_every_n_nan_or_inf": 2,
                    "incr_ratio": 2.0, "decr_ratio": 0.8, "use_dynamic_loss_scaling": True,
                    "custom_white_list": [], "custom_black_list": [], "use_pure_fp16": False, "dtype": "bfloat16"},
    "dgc_configs": {"rampup_begin_step": 0, "rampup_step": 1, "sparsity": [0.999]},
    "lars_configs": {"lars_coeff": 0.001, "lars_weight_decay": 0.0005, "epsilon": 0.0,
                     "exclude_from_weight_decay": []},
    "lamb_configs": {"lamb_weight_decay": 0.01, "exclude_from_weight_decay": []},
    "recompute_configs": {"checkpoints": []},
}


def _from_text(text, like):
    """The C text of a field as the Python type of `like`."""
    if isinstance(like, bool):
        return text == "true"
    if isinstance(like, int):
        return int(text)
    if isinstance(like, float):
        return float(text)
    if isinstance(like, list):
        items = [t for t in text.split(",") if t]
        return [float(t) for t in items] if like and isinstance(like[0], float) else items
    return text


def _c_defaults():
    """Each field's default as the C library holds it (0 for the async communicator's
    max_merge_var_num / send_queue_size / send_wait_times: "not set", it adapts)."""
    c = lib.fleet_strategy_default()
    buf = ctypes.create_string_buffer(1024)

    def read(key, like):
        if lib.fleet_strategy_get(ctypes.byref(c), _lib.cstr(key), buf, len(buf)) != 0:
            return like  # a hint the library does not hold
        return _from_text(buf.value.decode(), like)

    top = {k: read(k, v) for k, v in _DEFAULTS.items()}
    groups = {g: {k: read("%s.%s" % (g, k), v) for k, v in cfg.items()} for g, cfg in _CONFIG_DEFAULTS.items()}
    return top, groups


_DEFAULTS, _CONFIG_DEFAULTS = _c_defaults()


# Paddle's graph, device and communication hints: they change how Paddle schedules the work
# on GPUs, never the arithmetic.  When the library does not take one, it is accepted here
# with one info line saying it has no effect on this build.
_HINTS = {
    "fuse_elewise_add_act_ops", "fuse_bn_act_ops", "fuse_bn_add_act_ops", "fuse_relu_depthwise_conv",
    "fuse_broadcast_ops", "fuse_all_optimizer_ops", "fuse_all_reduce_ops", "fuse_grad_size_in_MB",
    "fuse_grad_size_in_TFLOPS", "fuse_grad_merge", "nccl_comm_num", "sync_nccl_allreduce", "enable_inplace",
    "enable_sequential_execution", "enable_auto_fusion", "enable_addto", "cudnn_exhaustive_search",
    "conv_workspace_size_limit", "cudnn_batchnorm_spatial_persistent", "use_hierarchical_allreduce",
    "hierarchical_allreduce_inter_nranks", "exec_strategy", "build_strategy", "mode", "collective_mode",
    "find_unused_parameters", "without_graph_optimization", "fuse_memory_size", "fuse_layer_size",
    "last_comm_group_size_MB", "use_dist_fc", "dist_fc_config", "enable_backward_optimizer_op_deps",
    "calc_comm_same_stream", "_fuse_grad_size_in_num", "num_threads", "num_iteration_per_drop_scope",
}
_hint_said = [False]


def _hint(name):
    if not _hint_said[0]:
        _hint_said[0] = True
        import sys
        print("fleet_c: info: strategy.%s (and Paddle's other graph and GPU hints) has no effect on this build: "
              "accepted, not applied" % name, file=sys.stderr)


def _str(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):  # op lists (amp_configs.custom_white_list): comma-separated
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return ",".join(repr(float(v)) for v in value)  # dgc_configs.sparsity
        if not all(isinstance(v, str) for v in value):
            raise TypeError("list values of Fleet's strategy fields are lists of strings or of numbers")
        return ",".join(value)
    return str(value)


class DistributedStrategy:
    def __init__(self):
        object.__setattr__(self, "_c", lib.fleet_strategy_default())
        object.__setattr__(self, "_values", {})

    def _apply(self, key, value):
        c = ctypes.byref(self._c)
        if key not in _HINTS:
            check(lib.fleet_strategy_set(c, _lib.cstr(key), _lib.cstr(_str(value))))
            return
        # a hint the library refuses (unknown, or a value it does not implement): kept at its
        # default there, accepted here
        ok_before = lib.fleet_strategy_check(c) == 0
        st = lib.fleet_strategy_set(c, _lib.cstr(key), _lib.cstr(_str(value)))
        if st == 0 and (not ok_before or lib.fleet_strategy_check(c) == 0):
            return
        if st == 0 and key in _DEFAULTS:
            check(lib.fleet_strategy_set(c, _lib.cstr(key), _lib.cstr(_str(_DEFAULTS[key]))))
        _hint(key)

    def __setattr__(self, name, value):
        if name in _CONFIG_DEFAULTS:
            if not isinstance(value, dict):
                raise TypeError("%s must be a dict, got %s" % (name, type(value).__name__))
            for k, v in value.items():
                self._apply("%s.%s" % (name, k), v)
            merged = dict(self._values.get(name, {}))
            merged.update(value)
            self._values[name] = merged
            return
        self._apply(name, value)
        self._values[name] = value
        if name == "a_sync":  # as in Paddle, setting a_sync resets a_sync_configs.k_steps to 0
            cfg = dict(self._values.get("a_sync_configs", {}))
            cfg["k_steps"] = 0
            self._values["a_sync_configs"] = cfg

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name in _CONFIG_DEFAULTS:
            out = dict(_CONFIG_DEFAULTS[name])
            out.update(values.get(name, {}))
            return out
        if name in values:
            return values[name]
        if name in _DEFAULTS:
            return _DEFAULTS[name]
        raise AttributeError("DistributedStrategy has no field '%s'" % name)

    def _pointer(self):
        """The C strategy, checked (fields this build does not implement are refused)."""
        check(lib.fleet_strategy_check(ctypes.byref(self._c)))
        return ctypes.byref(self._c)

    def to_text(self):
        """key=value lines of the fields that differ from the defaults."""
        p = lib.fleet_strategy_to_text(ctypes.byref(self._c))
        if not p:
            raise _lib.err_from_last("DistributedStrategy")
        try:
            return ctypes.string_at(p).decode()
        finally:
            _lib.c_free(p)

    def __repr__(self):
        return "DistributedStrategy(%s)" % ", ".join(self.to_text().split())


class DistributeTranspilerConfig:
    """fluid 1.x parameter-server settings: sync_mode (default True, Paddle 1.x's default),
    geo_sgd_mode with geo_sgd_need_push_nums (GEO: push every k steps)."""

    def __init__(self):
        self.sync_mode = True
        self.geo_sgd_mode = False
        self.geo_sgd_need_push_nums = 100
        self.runtime_split_send_recv = False
        self.half_async = False

    def _to_strategy(self):
        s = DistributedStrategy()
        s.a_sync = not self.sync_mode or self.geo_sgd_mode or self.half_async
        if self.geo_sgd_mode:
            s.a_sync_configs = {"k_steps": int(self.geo_sgd_need_push_nums)}
        elif self.half_async:
            s.a_sync_configs = {"half_async": True}
        return s


class StrategyFactory:
    """Paddle 1.x's parameter-server modes (distributed_strategy.StrategyFactory): each
    returns a DistributeTranspilerConfig for fleet.distributed_optimizer."""

    @staticmethod
    def create_sync_strategy():
        return DistributeTranspilerConfig()

    @staticmethod
    def create_async_strategy():
        c = DistributeTranspilerConfig()
        c.sync_mode = False
        return c

    @staticmethod
    def create_half_async_strategy():
        c = DistributeTranspilerConfig()
        c.sync_mode = False
        c.half_async = True
        return c

    @staticmethod
    def create_geo_strategy(update_frequency=100):
        c = DistributeTranspilerConfig()
        c.sync_mode = False
        c.geo_sgd_mode = True
        c.geo_sgd_need_push_nums = int(update_frequency)
        return c
