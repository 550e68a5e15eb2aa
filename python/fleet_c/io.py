"""Saving and loading (fluid.io names; paddle.static.save/load_inference_model in static).

Files are safetensors (readable by NumPy and PyTorch without this package) and the
program's text form; see docs/checkpoints.md in the repository.  The ``filename``
arguments of Paddle (one file for all variables) are not needed: Fleet always writes one
file per directory.
"""
import ctypes

from . import _lib
from ._lib import check, lib
from .framework import Program, Variable, default_main_program

__all__ = ["save_persistables", "load_persistables", "save_inference_model", "load_inference_model"]


def _main(program):
    p = program if program is not None else default_main_program()
    p = getattr(p, "_program", p)  # a CompiledProgram
    if not isinstance(p, Program):
        raise TypeError("expected a Program, got %s" % type(p).__name__)
    return p


def _exe_handle(executor, program=None):
    if program is not None:
        executor._programs[id(program)] = program
    return executor._exe(None)


def _ps_fleet(p):
    """The parameter-server fleet whose distributed optimizer built p, or None."""
    from ._fleet import Fleet
    for k in p._keep:
        if isinstance(k, Fleet) and k._h is not None and k.is_distributed() and not k.is_collective():
            return k
    return None


def save_persistables(executor, dirname, main_program=None, filename=None):
    """Every persistable variable (parameters, optimizer state, counters) into
    dirname/persistables.safetensors.  A parameter-server worker's program: the servers'
    tables too, as Paddle's (fleet_save_persistables_alone: no other worker takes part)."""
    p = _main(main_program)
    f = _ps_fleet(p)
    if f is not None:
        check(lib.fleet_save_persistables_alone(f._handle(), _exe_handle(executor, p), _lib.cstr(dirname), p._main()))
        return
    check(lib.fl_io_save_persistables(_exe_handle(executor, p), _lib.cstr(dirname), p._main()))


def load_persistables(executor, dirname, main_program=None, filename=None):
    """The persistable variables of main_program from dirname; a parameter-server save
    (ps_manifest.json: the servers' tables, docs/python.md) loads into a local program."""
    import os
    p = _main(main_program)
    if os.path.exists(os.path.join(str(dirname), "ps_manifest.json")) and _ps_fleet(p) is None:
        from . import _ps_load
        _ps_load.load(_exe_handle(executor, p), str(dirname), p)
        return
    check(lib.fl_io_load_persistables(_exe_handle(executor, p), _lib.cstr(dirname), p._main()))


def _target_ptrs(target_vars):
    ts = list(target_vars) if isinstance(target_vars, (list, tuple)) else [target_vars]
    for i, t in enumerate(ts):
        if not isinstance(t, Variable):
            raise TypeError("target_vars[%d] must be a Variable, got %s" % (i, type(t).__name__))
    return ts, _lib.ptr_array([t._p for t in ts])


def save_inference_model(dirname, feeded_var_names, target_vars, executor, main_program=None, model_filename=None,
                         params_filename=None, export_for_deployment=True, program_only=False):
    """The program pruned to feeded_var_names -> target_vars, with the parameters it needs."""
    p = _main(main_program)
    feeds = [f.name if isinstance(f, Variable) else str(f) for f in feeded_var_names]
    ts, tp = _target_ptrs(target_vars)
    check(lib.fl_io_save_inference_model(_exe_handle(executor, p), _lib.cstr(dirname), _lib.cstr_array(feeds),
                                         len(feeds), tp, len(ts), p._main()))
    return [t.name for t in ts]


def load_inference_model(dirname, executor, model_filename=None, params_filename=None, pserver_endpoints=None):
    """Returns [program, feed_target_names, fetch_targets] as Paddle; the parameters go into
    the executor's (global) scope."""
    prog = ctypes.c_void_p()
    feeds, fetches = _lib.SP(), _lib.SP()
    nfeed, nfetch = ctypes.c_int(), ctypes.c_int()
    check(lib.fl_io_load_inference_model(_exe_handle(executor), _lib.cstr(dirname), ctypes.byref(prog),
                                         ctypes.byref(feeds), ctypes.byref(nfeed), ctypes.byref(fetches),
                                         ctypes.byref(nfetch)))
    p = Program._adopt(prog.value)
    try:
        feed_names = [_lib._text(feeds[i]) for i in range(nfeed.value)]
        fetch_names = [_lib._text(fetches[i]) for i in range(nfetch.value)]
    finally:
        lib.fl_io_free_names(feeds, nfeed.value)
        lib.fl_io_free_names(fetches, nfetch.value)
    block = p.global_block()
    return [p, feed_names, [block.var(n) for n in fetch_names]]


# fluid.io.DataLoader / PyReader and paddle.io.DataLoader / Dataset (feeding.py)
from .feeding import DataFeeder, DataLoader, Dataset, IterableDataset, PyReader  # noqa: E402,F401
