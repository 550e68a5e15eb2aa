"""Places, scopes and the executor (fluid.Executor / paddle.static.Executor).

Executors share Paddle's global scope unless given another one: parameters initialised by
one executor's startup run are seen by every executor.  An executor keeps one C executor
per scope, and a reference to every program it ran (the C executor caches a compiled plan
per program, so a program must not be freed while its executor lives).
"""
import contextlib
import ctypes
import re
import warnings

import numpy as np

from . import _lib
from ._lib import lib
from ._tensor import LoDTensor, from_c, to_c
from .framework import Program, Variable, default_main_program
from .lr import before_run as _lr_before_run

__all__ = ["CPUPlace", "CUDAPlace", "CUDAPinnedPlace", "Executor", "Scope", "global_scope", "scope_guard",
           "CompiledProgram", "ExecutionStrategy", "BuildStrategy", "FetchHandler", "cpu_places", "cuda_places"]


class CPUPlace:
    def __repr__(self):
        return "CPUPlace"


class CUDAPlace(CPUPlace):
    """Fleet's kernels run on the CPU: a CUDAPlace is accepted (so the seeds' programs run
    as written) and runs on the CPU, with a warning the first time."""

    _warned = False

    def __init__(self, device_id=0):
        self.device_id = int(device_id)
        if not CUDAPlace._warned:
            CUDAPlace._warned = True
            warnings.warn("fleet_c runs on the CPU: CUDAPlace(%d) runs on the CPU" % self.device_id, stacklevel=2)

    def __repr__(self):
        return "CUDAPlace(%d) (runs on the CPU)" % self.device_id


class CUDAPinnedPlace(CPUPlace):
    pass


def cpu_places(device_count=None):
    return [CPUPlace() for _ in range(device_count or 1)]


def cuda_places(device_ids=None):
    return [CUDAPlace(i) for i in (device_ids or [0])]


class _ScopeVar:
    """scope.var(name) / find_var(name): get_tensor() is the value (a LoDTensor whose set()
    writes back into the scope).  A name the scope does not hold is an error when read or
    set (Paddle would make a new variable nobody reads: a misspelt name would go unnoticed)."""

    def __init__(self, scope, name, t):
        self._scope, self._name, self._t = scope, name, t

    def _tensor(self, what):
        if not self._t:
            raise _lib.NotFoundError("scope variable '%s': no such variable in the scope (%s); it holds %s"
                                     % (self._name, what, ", ".join(self._scope.local_var_names()[:20]) or "none"))
        return self._t

    def get_tensor(self):
        t = from_c(self._tensor("get_tensor"), return_numpy=False)
        t.__class__ = _ScopeTensor
        t._var = self
        return t

    def set(self, value, place=None):
        src = to_c(value, "scope variable '%s'" % self._name)
        try:
            _lib.check(lib.fl_tensor_copy(self._tensor("set"), src))
        finally:
            lib.fl_tensor_free(src)


class _ScopeTensor(LoDTensor):
    """A scope variable's value: set() changes the variable in the scope too."""

    def set(self, array, place=None):
        self._var.set(array, place)
        LoDTensor.set(self, array, place)


_GENERATED = re.compile(r"^_generated_var_(\d+)$")


class Scope:
    """A name -> tensor map (fluid.Scope); new_scope() makes a child that sees its parent."""

    def __init__(self, _parent=None):
        self._parent = _parent
        self._h = _lib.check_ptr(lib.fl_scope_create(_parent._h if _parent else None), "Scope")

    def new_scope(self):
        return Scope(self)

    def _resolve(self, name):
        """Paddle 1.x's names of the AUC statistics: ``_generated_var_N`` is auc_<k>.tmp_<j>
        with N = 4 k + j - 2 (each auc layer makes four: batch StatPos, StatNeg, then global
        StatPos, StatNeg, in the order Paddle creates them), so the programs' reset idiom
        ``set_zero('_generated_var_0')`` works, also in a scope that holds only some of
        them (an inference model pruned to the global AUC keeps tmp_4 and tmp_5:
        ``_generated_var_2`` and ``_3``)."""
        if lib.fl_scope_find(self._h, _lib.cstr(name)):
            return name
        m = _GENERATED.match(name)
        if m:
            k, j = divmod(int(m.group(1)), 4)
            return "auc_%d.tmp_%d" % (k, j + 2)
        return name

    def find_var(self, name):
        t = lib.fl_scope_find(self._h, _lib.cstr(self._resolve(name)))
        return _ScopeVar(self, name, t) if t else None

    def var(self, name):
        """The variable (see _ScopeVar: an unknown name is an error when used)."""
        return _ScopeVar(self, name, lib.fl_scope_find(self._h, _lib.cstr(self._resolve(name))))

    def local_var_names(self):
        return [_lib._text(lib.fl_scope_name_at(self._h, i)) for i in range(lib.fl_scope_num_vars(self._h))]

    def zero(self, name):
        """Sets the variable's elements to zero (e.g. AUC statistics before evaluating)."""
        _lib.check(lib.fl_scope_zero(self._h, _lib.cstr(name)))

    def __del__(self):
        if self._h and not _lib.shutting_down[0]:
            lib.fl_scope_free(self._h)
            self._h = None


_global_scope = None


def global_scope():
    global _global_scope
    if _global_scope is None:
        _global_scope = Scope()
    return _global_scope


@contextlib.contextmanager
def scope_guard(scope):
    global _global_scope
    prev = global_scope()
    _global_scope = scope
    try:
        yield
    finally:
        _global_scope = prev


class _Hints:
    """fluid.ExecutionStrategy / BuildStrategy: Paddle's graph and thread hints.  Fleet
    compiles and schedules programs itself, so every field is accepted and has no effect
    here; the first field set says so in one info line."""

    _said = False

    def __setattr__(self, name, value):
        if not _Hints._said:
            _Hints._said = True
            import sys
            print("fleet_c: info: %s.%s and the other ExecutionStrategy / BuildStrategy fields have no effect here "
                  "(Fleet compiles and schedules the program itself)" % (type(self).__name__, name), file=sys.stderr)
        object.__setattr__(self, name, value)


class ExecutionStrategy(_Hints):
    pass


class BuildStrategy(_Hints):
    class ReduceStrategy:
        AllReduce = 0
        Reduce = 1

    class GradientScaleStrategy:
        CoeffNumDevice = 0
        One = 1
        Customized = 2


class CompiledProgram:
    """fluid.CompiledProgram: Fleet compiles every program when it first runs, so this only
    wraps one; with_data_parallel is accepted (data parallelism comes from fleet)."""

    def __init__(self, program_or_graph, build_strategy=None):
        self._program = program_or_graph

    def with_data_parallel(self, loss_name=None, build_strategy=None, exec_strategy=None, share_vars_from=None,
                           places=None):
        return self


def _fetch_names(fetch_list):
    names = []
    for i, f in enumerate(fetch_list or []):
        if isinstance(f, Variable):
            names.append(f.name)
        elif isinstance(f, str):
            names.append(f)
        else:
            raise TypeError("fetch_list[%d]: expected a Variable or a name, got %s" % (i, type(f).__name__))
    return names


_stop_on_close = []  # trainers of DistributeTranspiler: Executor.close() stops them


class Executor:
    def __init__(self, place=None):
        self.place = place if place is not None else CPUPlace()
        self._exes = {}      # id(scope) -> (scope, fl_exe *)
        self._programs = {}  # id -> Program: every program run, kept alive (see the module doc)

    def _exe(self, scope):
        scope = scope if scope is not None else global_scope()
        ent = self._exes.get(id(scope))
        if ent is None:
            h = _lib.check_ptr(lib.fl_exe_create(scope._h), "Executor")
            ent = self._exes[id(scope)] = (scope, h)
        return ent[1]

    def close(self):
        """Frees the C executors (Paddle's close); the executor can be used again after.  A
        transpiled trainer stops (Paddle's close tells the parameter servers it is done)."""
        while _stop_on_close:
            f = _stop_on_close.pop()
            if f._worker_started and not f._worker_stopped:
                f.stop_worker()
        self._free()

    def _free(self):
        for _, h in self._exes.values():
            lib.fl_exe_free(h)
        self._exes = {}
        self._programs = {}

    def __del__(self):
        if not _lib.shutting_down[0]:
            self._free()

    def _program(self, program):
        if program is None:
            program = default_main_program()
        if isinstance(program, CompiledProgram):
            program = program._program
        if not isinstance(program, Program):
            raise TypeError("Executor.run: program must be a Program, got %s" % type(program).__name__)
        self._programs[id(program)] = program
        return program

    def run(self, program=None, feed=None, fetch_list=None, feed_var_name="feed", fetch_var_name="fetch",
            scope=None, return_numpy=True, use_program_cache=False, use_prune=False):
        """Runs the program once: feed maps names to NumPy arrays (or LoDTensors), fetch_list
        holds Variables or names; returns one NumPy array per fetch (LoDTensors with
        return_numpy=False).  A wrong feed raises the library's message naming the variable
        and the expected and given shapes."""
        if hasattr(program, "_run_on_executor"):  # a transpiler's parameter-server program
            return program._run_on_executor()
        program = self._program(program)
        exe = self._exe(scope)
        if program._is_startup():
            if feed or fetch_list:
                raise ValueError("Executor.run: a startup program takes no feed or fetch_list")
            for h in program._startup_handles():
                _lib.check(lib.fl_exe_run(exe, h, None, 0, None, 0, None))
            return []
        program._check_built()
        if isinstance(feed, (list, tuple)):  # one dict per device, as DataLoader yields
            if len(feed) != 1:
                raise NotImplementedError("Executor.run: feed is a list of %d dicts (one per device); Fleet runs "
                                          "one device per process" % len(feed))
            feed = feed[0]
        if not feed and getattr(program, "_readers", None):  # a started non-iterable DataLoader / py_reader
            from .feeding import _next_feed
            feed = _next_feed(program)
        feed = feed or {}
        if not isinstance(feed, dict):
            raise TypeError("Executor.run: feed must be a dict of name -> array, got %s" % type(feed).__name__)
        h = program._main()
        names = _fetch_names(fetch_list)
        _lr_before_run(program, scope if scope is not None else global_scope())
        tensors = []
        try:
            feeds = (_lib.Feed * max(1, len(feed)))()
            for i, (name, value) in enumerate(feed.items()):
                name = name.name if isinstance(name, Variable) else str(name)
                hint = None
                if not isinstance(value, (np.ndarray, LoDTensor)):
                    v = lib.fl_prog_var(h, _lib.cstr(name))
                    hint = _dtype_of_var(v) if v else None
                    if isinstance(value, (int, float, np.generic)):  # one number
                        value = np.asarray([value], dtype=hint)
                value = _one_sample(h, name, value)
                tensors.append(to_c(value, "feed '%s'" % name, hint))
                feeds[i].name = _lib.cstr(name)
                feeds[i].value = tensors[-1]
            fetch = _lib.cstr_array(names)
            out = (ctypes.c_void_p * max(1, len(names)))()
            _lib.check(lib.fl_exe_run(exe, h, feeds, len(feed), fetch, len(names), out))
            return [from_c(out[i], return_numpy) for i in range(len(names))]
        finally:
            for t in tensors:
                lib.fl_tensor_free(t)

    def _dataset_pass(self, fn, program, dataset, scope, thread, fetch_list, fetch_info, print_period):
        from .dataset import DatasetBase
        if not isinstance(dataset, DatasetBase):
            raise TypeError("dataset must be a QueueDataset or InMemoryDataset, got %s" % type(dataset).__name__)
        program = self._program(program)
        program._check_built()
        names = _fetch_names(fetch_list)
        info = list(fetch_info) if fetch_info else None
        if info is not None and len(info) != len(names):
            raise ValueError("fetch_info has %d entries for %d fetches" % (len(info), len(names)))
        if len(names) > 16:
            raise ValueError("at most 16 fetches, got %d" % len(names))
        stats = _lib.DatasetStats()
        _lr_before_run(program, scope if scope is not None else global_scope())
        _lib.check(fn(self._exe(scope), program._main(), dataset._h, int(thread or 0), _lib.cstr_array(names),
                      _lib.cstr_array(info) if info else None, len(names), int(print_period), ctypes.byref(stats)))
        return {"instances": stats.instances, "batches": stats.batches, "seconds": stats.seconds,
                "fetch": {n: stats.fetch[i] for i, n in enumerate(info or names)}}

    def train_from_dataset(self, program=None, dataset=None, scope=None, thread=0, debug=False, fetch_list=None,
                           fetch_info=None, print_period=100, fetch_handler=None):
        """Trains one pass over the dataset with Hogwild threads (thread 0: the dataset's
        thread number).  Every print_period batches a line shows the fetched values.
        Returns {instances, batches, seconds, fetch: {name: thread 0's last value}}."""
        if fetch_handler is not None:
            return _with_handler(self, lib.fl_exe_train_from_dataset, program, dataset, scope, thread, fetch_handler,
                                 print_period)
        return self._dataset_pass(lib.fl_exe_train_from_dataset, program, dataset, scope, thread, fetch_list,
                                  fetch_info, print_period)

    def infer_from_dataset(self, program=None, dataset=None, scope=None, thread=0, debug=False, fetch_list=None,
                           fetch_info=None, print_period=100, fetch_handler=None):
        if fetch_handler is not None:
            return _with_handler(self, lib.fl_exe_infer_from_dataset, program, dataset, scope, thread, fetch_handler,
                                 print_period)
        return self._dataset_pass(lib.fl_exe_infer_from_dataset, program, dataset, scope, thread, fetch_list,
                                  fetch_info, print_period)


class FetchHandler:
    """fluid.executor.FetchHandler(var_dict, period_secs): a dataset pass given one calls
    handler({key: value}) with the values of var_dict's variables.  Paddle calls it every
    period_secs from a monitor thread while the pass runs; here the C pass reports thread 0's
    latest values when it ends, so handler is called once per pass, then."""

    def __init__(self, var_dict=None, period_secs=60):
        if not isinstance(var_dict, dict) or not var_dict:
            raise ValueError("FetchHandler: var_dict must be a non-empty dict of name -> Variable")
        self.var_dict = var_dict
        self.period_secs = period_secs

    def handler(self, res_dict):
        for key, value in res_dict.items():
            print("%s: %s" % (key, value))


def _with_handler(exe, fn, program, dataset, scope, thread, handler, print_period):
    if not isinstance(handler, FetchHandler):
        raise TypeError("fetch_handler must be a FetchHandler, got %s" % type(handler).__name__)
    keys = list(handler.var_dict)
    r = exe._dataset_pass(fn, program, dataset, scope, thread, [handler.var_dict[k] for k in keys], keys,
                          print_period)
    handler.handler({k: np.array([r["fetch"][k]]) for k in keys})
    return r


def _one_sample(h, name, value):
    """A feed of one sample without its batch dimension (shape [1] for a [-1, 1] variable,
    as Paddle programs feed a fetched metric back in: Paddle does not check the feeds of
    layers.data) is a batch of one."""
    if not isinstance(value, np.ndarray):
        return value
    v = lib.fl_prog_var(h, _lib.cstr(name))
    if not v:
        return value
    n = lib.fl_var_ndim(v)
    sp = lib.fl_var_shape(v)
    shape = [sp[i] for i in range(n)]
    if n == value.ndim + 1 and shape[0] == -1 and list(value.shape) == shape[1:]:
        return value.reshape((1,) + value.shape)
    return value


def _dtype_of_var(v):
    from ._tensor import NAMES
    return NAMES.get(lib.fl_var_dtype(v))
