"""The fleet object: Paddle's process-wide ``fleet`` over one C fleet_t handle.

Paddle's API is a module-level singleton (``fleet.init(role)``, ``fleet.is_server()``, ...);
the C library has none (every call takes the handle).  This class holds the handle; the
modules paddle.distributed.fleet (2.x) and fluid.incubate.fleet.* (1.x) each expose one
instance.  Handles are never freed: a program built with a fleet's distributed optimizer
refers to it for as long as the process runs.

A parameter-server worker that called init_worker() and exits without stop_worker() (the
seed's CTR train.py does) stops at interpreter exit, so that its servers finish and exit
instead of waiting for it.
"""
import atexit
import ctypes

import numpy as np

from . import _lib
from ._lib import check, lib
from ._tensor import dtype_code
from .optimizer import Optimizer, _minimize
from .role_maker import EnvRoleMaker, RoleMakerBase
from .strategy import DistributedStrategy, DistributeTranspilerConfig

__all__ = ["Fleet", "DistributedOptimizer", "UtilBase"]

_all_handles = []   # every fleet_t ever made: kept for the programs that refer to them
_current = []       # the Fleet objects init() was called on, the latest last


def current_fleet():
    """The fleet this process initialised last (None before any fleet.init): the one
    layers.collective's ops run among."""
    return _current[-1] if _current else None
_to_stop = []       # workers to stop at exit


def _stop_at_exit():
    for f in _to_stop:
        if f._worker_started and not f._worker_stopped:
            try:
                f.stop_worker()
            except _lib.FleetError as e:
                import sys
                print("fleet_c: stop_worker at exit failed: %s" % e, file=sys.stderr)


atexit.register(_stop_at_exit)


def _selected_gpus(fleet):
    """Programs written for GPUs read os.environ['FLAGS_selected_gpus'] for their
    CUDAPlace: on this CPU build it is set to the process's rank on its node when the
    launcher did not set it (fleetrun sets it from --gpus)."""
    import os
    import sys
    if "FLAGS_selected_gpus" in os.environ:
        return
    local = os.environ.get("PADDLE_RANK_IN_NODE") or os.environ.get("LOCAL_RANK") or str(fleet.worker_index())
    os.environ["FLAGS_selected_gpus"] = local
    if fleet.worker_index() == 0:
        print("fleet_c: info: FLAGS_selected_gpus set to the rank on this node (%s): CUDAPlace runs on the CPU here"
              % local, file=sys.stderr)


class UtilBase:
    """fleet.util: collectives over the workers on NumPy arrays, and file sharding."""

    def __init__(self, fleet):
        self._fleet = fleet

    def all_reduce(self, input, mode="sum", comm_world="worker"):
        _world(comm_world)
        a = np.array(input, copy=True)
        scalar = a.ndim == 0
        a = np.ascontiguousarray(a.reshape(-1))
        check(lib.fleet_util_all_reduce(self._fleet._handle(), a.ctypes.data_as(ctypes.c_void_p), a.size,
                                        dtype_code(a.dtype), _lib.cstr(mode)))
        return a[0] if scalar else a.reshape(np.shape(input))

    def all_gather(self, input, comm_world="worker"):
        """Returns a list with every worker's input (numbers or arrays of one shape)."""
        _world(comm_world)
        a = np.ascontiguousarray(np.asarray(input).reshape(-1))
        n = self._fleet.worker_num()
        out = np.empty(a.size * n, dtype=a.dtype)
        check(lib.fleet_util_all_gather(self._fleet._handle(), a.ctypes.data_as(ctypes.c_void_p),
                                        out.ctypes.data_as(ctypes.c_void_p), a.size, dtype_code(a.dtype)))
        parts = out.reshape(n, -1)
        if np.ndim(input) == 0:
            return [p[0].item() for p in parts]
        return [p.reshape(np.shape(input)) for p in parts]

    def barrier(self, comm_world="worker"):
        _world(comm_world)
        check(lib.fleet_util_barrier(self._fleet._handle()))

    def get_file_shard(self, files):
        return self._fleet.split_files(files)

    def print_on_rank(self, message, rank_id):
        if self._fleet.worker_index() == rank_id:
            print(message)


def _world(comm_world):
    if comm_world != "worker":
        raise NotImplementedError("fleet.util: comm_world=%r is not supported (workers only)" % comm_world)


class DistributedOptimizer:
    """What fleet.distributed_optimizer returns: minimize() builds the distributed program
    for the fleet's mode (parameter server or collective)."""

    def __init__(self, fleet, optimizer, strategy):
        self._fleet = fleet
        self.inner_opt = optimizer
        self.user_defined_strategy = strategy

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        s = self.user_defined_strategy
        dgc = getattr(self.inner_opt, "_dgc_configs", None)
        if dgc is not None and self._fleet.is_collective():  # DGCMomentumOptimizer (fluid 1.x)
            s = s if s is not None else DistributedStrategy()
            s.dgc = True
            s.dgc_configs = dgc
        ptr = s._pointer() if s is not None else None
        out = _minimize(self.inner_opt, loss, startup_program, parameter_list, no_grad_set, self._fleet, ptr)
        from .framework import default_startup_program
        self._fleet._main_program = loss.program
        self._fleet._startup_program = startup_program if startup_program is not None else default_startup_program()
        return out

    def __getattr__(self, name):
        return getattr(self.inner_opt, name)


class Fleet:
    """One process's fleet.  default_collective: the mode of init() without a role maker
    (the 1.x collective module's fleet is collective); ps_default_sync: fluid 1.x's
    parameter-server fleet, whose distributed_optimizer without a strategy is synchronous
    (DistributeTranspilerConfig's default), where 2.x's is asynchronous."""

    def __init__(self, default_collective=False, ps_default_sync=False):
        self._h = None
        self._default_collective = default_collective
        self._ps_default_sync = ps_default_sync
        self._strategy = None
        self._worker_started = False
        self._worker_stopped = False
        self._main_program = None
        self._startup_program = None
        self.util = UtilBase(self)

    # -- fluid 1.x: the programs minimize() built -------------------------------------------------
    # Paddle 1.x's transpiler makes a new trainer program; here the distributed program is the
    # loss's own program (the C optimizer rewrites it in place), so all three are that program
    # (before minimize: the current default programs).
    @property
    def main_program(self):
        from .framework import default_main_program
        return self._main_program if self._main_program is not None else default_main_program()

    @property
    def startup_program(self):
        from .framework import default_startup_program
        return self._startup_program if self._startup_program is not None else default_startup_program()

    @property
    def _origin_program(self):
        return self.main_program

    # -- setup --------------------------------------------------------------------------------
    def init(self, role_maker=None, is_collective=False, strategy=None, log_level=None):
        """Paddle 2.x: init(role_maker=None, is_collective=False, strategy=None); 1.x:
        init(role).  Without a role maker the role comes from whatever launcher started the
        process (fleetrun, torchrun, mpirun, srun), else one local worker."""
        if role_maker is None:
            role_maker = EnvRoleMaker(bool(is_collective) or self._default_collective)
        if not isinstance(role_maker, RoleMakerBase):
            raise TypeError("fleet.init: role_maker must be a role maker, got %s" % type(role_maker).__name__)
        if strategy is not None and not isinstance(strategy, DistributedStrategy):
            raise TypeError("fleet.init: strategy must be a DistributedStrategy, got %s" % type(strategy).__name__)
        role = role_maker._create()
        role_maker._fleet = self
        ptr = strategy._pointer() if strategy is not None else None
        h = lib.fleet_init(role, ptr)
        if not h:
            raise _lib.err_from_last("fleet.init")
        _all_handles.append(h)
        self._h = h
        self._strategy = strategy
        _current.append(self)
        if self.is_collective():
            _selected_gpus(self)
        self._worker_started = self._worker_stopped = False
        return None

    def _handle(self):
        if self._h is None:
            raise _lib.error_for(-10, "fleet.init() has not been called")
        return self._h

    # -- who am I ---------------------------------------------------------------------------------
    def is_collective(self):
        return bool(lib.fleet_is_collective(self._handle()))

    def is_distributed(self):
        return bool(lib.fleet_is_distributed(self._handle()))

    def is_first_worker(self):
        return bool(lib.fleet_is_first_worker(self._handle()))

    def is_worker(self):
        return bool(lib.fleet_is_worker(self._handle()))

    def is_server(self):
        return bool(lib.fleet_is_server(self._handle()))

    def worker_index(self):
        return lib.fleet_worker_index(self._handle())

    def worker_num(self):
        return lib.fleet_worker_num(self._handle())

    def server_index(self):
        return lib.fleet_server_index(self._handle())

    def server_num(self):
        return lib.fleet_server_num(self._handle())

    def worker_endpoints(self, to_string=False):
        s = _lib._text(lib.fleet_worker_endpoints_str(self._handle()))
        return s if to_string else [e for e in s.split(",") if e]

    def server_endpoints(self, to_string=False):
        s = _lib._text(lib.fleet_server_endpoints_str(self._handle()))
        return s if to_string else [e for e in s.split(",") if e]

    # -- training -----------------------------------------------------------------------------------
    def distributed_optimizer(self, optimizer, strategy=None):
        if not isinstance(optimizer, Optimizer):
            raise TypeError("fleet.distributed_optimizer: expected an optimizer, got %s" % type(optimizer).__name__)
        self._handle()
        if isinstance(strategy, DistributeTranspilerConfig):
            strategy = strategy._to_strategy()
        if strategy is None and self._ps_default_sync and not self.is_collective():
            strategy = DistributeTranspilerConfig()._to_strategy()
        if strategy is not None and not isinstance(strategy, DistributedStrategy):
            raise TypeError("fleet.distributed_optimizer: strategy must be a DistributedStrategy, got %s"
                            % type(strategy).__name__)
        return DistributedOptimizer(self, optimizer, strategy)

    def dgc_stats(self):
        """What strategy.dgc exchanged on this worker so far (Fleet's own: Paddle has no
        counterpart), from fleet_dgc_stats_get: a dict of ``params`` (parameters compressed;
        the small ones are allreduced as usual), ``dense_steps`` (steps before
        rampup_begin_step, when those parameters went dense), ``sparse_steps`` (steps that
        exchanged top-k pairs) and ``dense_bytes`` / ``sparse_bytes`` (this rank's bytes on
        the transport during those exchanges).  All zero without DGC, in parameter-server
        mode and on a single worker."""
        s = _lib.DgcStats()
        check(lib.fleet_dgc_stats_get(self._handle(), ctypes.byref(s)))
        return {name: int(getattr(s, name)) for name, _ in _lib.DgcStats._fields_}

    def init_worker(self, scopes=None):
        check(lib.fleet_init_worker(self._handle()))
        if not self.is_collective() and self.is_distributed():
            self._worker_started = True
            if self not in _to_stop:
                _to_stop.append(self)

    def stop_worker(self):
        self._worker_stopped = True
        check(lib.fleet_stop_worker(self._handle()))

    def init_server(self, model_dir=None, *args, **kwargs):
        check(lib.fleet_init_server(self._handle(), _lib.cstr(model_dir)))

    def run_server(self):
        """Serves until every worker has stopped (or one disappears)."""
        check(lib.fleet_run_server(self._handle()))

    def barrier_worker(self):
        check(lib.fleet_barrier_worker(self._handle()))

    def split_files(self, files):
        files = [str(f) for f in files]
        arr = _lib.cstr_array(files)
        out = ctypes.POINTER(ctypes.c_char_p)()
        n = ctypes.c_int()
        check(lib.fleet_split_files(self._handle(), arr, len(files), ctypes.byref(out), ctypes.byref(n)))
        try:
            return [_lib._text(out[i]) for i in range(n.value)]
        finally:
            _lib.c_free(ctypes.cast(out, ctypes.c_void_p).value)

    # -- saving -------------------------------------------------------------------------------------
    # Paddle programs save from the first worker only (``if fleet.is_first_worker():``), and
    # Paddle needs nothing from the other workers: so here the first worker saves alone
    # (fleet_save_*_alone: in a collective job its copy of the model; with parameter servers
    # the servers save their tables and the worker its own state), and another worker's call
    # returns at once (several writers of one directory would race).
    def save_persistables(self, executor, dirname, main_program=None, mode=0):
        from .io import _exe_handle, _main
        p = _main(main_program)
        if not self.is_first_worker():
            return
        check(lib.fleet_save_persistables_alone(self._handle(), _exe_handle(executor, p), _lib.cstr(dirname),
                                                p._main()))

    def save_inference_model(self, executor, dirname, feeded_var_names, target_vars, main_program=None,
                             export_for_deployment=True, mode=0):
        from .framework import Variable
        from .io import _exe_handle, _main, _target_ptrs
        p = _main(main_program)
        if not self.is_first_worker():
            return
        feeds = [f.name if isinstance(f, Variable) else str(f) for f in feeded_var_names]
        ts, tp = _target_ptrs(target_vars)
        check(lib.fleet_save_inference_model_alone(self._handle(), _exe_handle(executor, p), _lib.cstr(dirname),
                                                   _lib.cstr_array(feeds), len(feeds), tp, len(ts), p._main()))
