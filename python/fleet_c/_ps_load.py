"""Local loading of a parameter-server save (fleet.save_persistables / fluid.io.
save_persistables of a worker): the directory holds the worker's persistables.safetensors
(its local state and copies of the dense parameters) and the servers' tables
(ps_manifest.json, <table>/part-<server>-<generation>.safetensors: docs/ps.md).  A local
program (an inference program built with the same names, as distribute_ctr's infer.py)
loads both: each table becomes the program's variable of that name - a dense table's
shards joined by their row ranges, a sparse table's saved rows placed at their ids in the
program's [height, dim] embedding (rows never trained are zeros, as a pull of an unknown
id for inference returns them).  The servers' values replace the worker's copies.  The
files are read and written by the library (fl_io_read_safetensors / write); the merged
set is loaded with fl_io_load_persistables, which checks every shape and dtype."""
import ctypes
import json
import os
import shutil
import tempfile

import numpy as np

from . import _lib
from ._lib import check, lib
from ._tensor import from_c, to_c

MANIFEST = "ps_manifest.json"
PERSIST = "persistables.safetensors"


def _read(path):
    names, ts, n = ctypes.POINTER(ctypes.c_char_p)(), ctypes.POINTER(ctypes.c_void_p)(), ctypes.c_int()
    check(lib.fl_io_read_safetensors(_lib.cstr(path), ctypes.byref(names), ctypes.byref(ts), ctypes.byref(n)))
    try:
        return {_lib._text(names[i]): np.array(from_c(ts[i])) for i in range(n.value)}
    finally:
        lib.fl_io_free_tensors(names, ts, n.value)


def _table(dirname, t, var):
    shards = [_read(os.path.join(dirname, f)) for f in t["files"]]
    where = "%s: table '%s'" % (os.path.join(dirname, MANIFEST), t["name"])
    if t["kind"] == "sparse":
        if len(var.shape) != 2 or var.shape[1] != t["dim"]:
            raise ValueError("%s: a sparse table of dim %d, the program's '%s' is %s" % (where, t["dim"], var.name,
                                                                                       list(var.shape)))
        out = np.zeros(var.shape, np.float32)
        for s in shards:
            keys = s["keys"].view(np.uint64)
            if keys.size and int(keys.max()) >= var.shape[0]:
                raise ValueError("%s: id %d is beyond the %d rows of the program's '%s'"
                                 % (where, int(keys.max()), var.shape[0], var.name))
            out[keys.astype(np.int64)] = s["values"].reshape(-1, t["dim"])
        return out
    out = np.zeros((t["rows"], t["cols"]), np.float32)
    for s in shards:
        r0, r1 = int(s["row_range"][0]), int(s["row_range"][1])
        out[r0:r1] = s["values"].reshape(r1 - r0, t["cols"])
    if int(np.prod(var.shape)) != out.size:
        raise ValueError("%s: %d x %d values, the program's '%s' is %s" % (where, t["rows"], t["cols"], var.name,
                                                                        list(var.shape)))
    return out.reshape(var.shape)


def load(exe_handle, dirname, program):
    """fl_io_load_persistables of program from a parameter-server save in dirname."""
    with open(os.path.join(dirname, MANIFEST)) as f:
        manifest = json.load(f)
    block = program.global_block()
    values = _read(os.path.join(dirname, PERSIST)) if os.path.exists(os.path.join(dirname, PERSIST)) else {}
    for t in manifest.get("tables", []):
        if not t["name"].startswith("@") and block.has_var(t["name"]):
            values[t["name"]] = _table(dirname, t, block.var(t["name"]))
    tmp = tempfile.mkdtemp(prefix="fleet-ps-load-")
    tensors = []
    try:
        names = sorted(values)
        tensors = [to_c(np.ascontiguousarray(values[n]), "tensor '%s'" % n) for n in names]
        arr = (ctypes.c_void_p * max(1, len(tensors)))(*tensors)
        check(lib.fl_io_write_safetensors(_lib.cstr(os.path.join(tmp, PERSIST)), _lib.cstr_array(names), arr,
                                          len(names)))
        check(lib.fl_io_load_persistables(exe_handle, _lib.cstr(tmp), program._main()))
    finally:
        for t in tensors:
            lib.fl_tensor_free(t)
        shutil.rmtree(tmp, ignore_errors=True)
