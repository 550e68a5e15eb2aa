"""NumPy arrays to and from the library's tensors, and Paddle's LoDTensor.

A feed is copied into a new fl_tensor (its dtype is the array's: the executor checks it
against the variable and names both on a mismatch); a fetched tensor is copied out into a
new array, because the executor reuses its buffers on the next run.
"""
import ctypes

import numpy as np

from ._lib import check, check_ptr, lib

FLOAT32, INT64, FLOAT64, INT32, FLOAT16, BFLOAT16, UINT8 = range(7)

_NP_TO_FL = {np.dtype(np.float32): FLOAT32, np.dtype(np.int64): INT64, np.dtype(np.float64): FLOAT64,
             np.dtype(np.int32): INT32, np.dtype(np.float16): FLOAT16, np.dtype(np.uint8): UINT8}
_FL_TO_NP = {v: k for k, v in _NP_TO_FL.items()}
NAMES = {FLOAT32: "float32", INT64: "int64", FLOAT64: "float64", INT32: "int32", FLOAT16: "float16",
         BFLOAT16: "bfloat16", UINT8: "uint8"}


def dtype_code(dtype):
    """'float32', np.float32, np.dtype(...) -> the library's dtype code."""
    if isinstance(dtype, int) and dtype in NAMES:
        return dtype
    if isinstance(dtype, str) and dtype.lower() in ("bfloat16", "bf16"):
        return BFLOAT16
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise TypeError("unsupported dtype %r (expected float32, int64, float64, int32 or float16)" % (dtype,))
    if d not in _NP_TO_FL:
        raise TypeError("unsupported dtype %s (expected float32, int64, float64, int32 or float16)" % d)
    return _NP_TO_FL[d]


class FetchedArray(np.ndarray):
    """A NumPy array as returned by Executor.run.  It behaves as any ndarray; in addition a
    one-element array (a loss of shape [1], as Paddle fetches it) converts with float(),
    int() and format specs, so Paddle-era code such as ``"cost=%f" % cost_val[0]`` keeps
    working under NumPy 2, which refuses that for arrays with dimensions."""

    def __float__(self):
        if self.size == 1:
            return float(self.reshape(-1)[0])
        return np.ndarray.__float__(self)

    def __int__(self):
        if self.size == 1:
            return int(self.reshape(-1)[0])
        return np.ndarray.__int__(self)

    def __format__(self, spec):
        if spec and self.size == 1:
            return format(self.reshape(-1)[0].item(), spec)
        return np.ndarray.__format__(self, spec)


class LoDTensor:
    """Paddle's LoDTensor on the Python side: a NumPy array plus one level of LoD (Fleet
    supports one level).  Feed it for a variable with lod_level=1; Executor.run(...,
    return_numpy=False) returns these."""

    def __init__(self, array=None, lod=None):
        self._array = None if array is None else np.asarray(array)
        self._lod = [list(l) for l in lod] if lod else []

    def set(self, array, place=None):
        self._array = np.asarray(array)

    def set_lod(self, lod):
        """lod: offsets, e.g. [[0, 2, 5]]."""
        self._lod = [list(map(int, l)) for l in lod]

    def set_recursive_sequence_lengths(self, lengths):
        """lengths: sequence lengths, e.g. [[2, 3]]."""
        self._lod = [list(np.concatenate([[0], np.cumsum(l)]).astype(int)) for l in lengths]

    def lod(self):
        return [list(l) for l in self._lod]

    def recursive_sequence_lengths(self):
        return [list(np.diff(l).astype(int)) for l in self._lod]

    def shape(self):
        return list(self._array.shape) if self._array is not None else []

    def _get_dims(self):
        return self.shape()

    def __array__(self, dtype=None, copy=None):
        a = self._array if self._array is not None else np.zeros((0,), np.float32)
        return a.astype(dtype) if dtype is not None else a

    def __repr__(self):
        return "LoDTensor(lod=%r, array=%r)" % (self._lod, self._array)


def create_lod_tensor(data, recursive_seq_lens, place=None):
    """fluid.create_lod_tensor: data is an array of shape [total, ...] or a list of
    sequences (lists of ids); recursive_seq_lens one list of lengths, e.g. [[2, 3]]."""
    if isinstance(data, LoDTensor):
        t = LoDTensor(data._array)
    elif isinstance(data, list) and data and isinstance(data[0], (list, tuple, np.ndarray)):
        flat = np.concatenate([np.asarray(s).reshape(-1) for s in data])
        t = LoDTensor(flat.reshape(-1, 1).astype(np.int64) if flat.dtype.kind in "iu" else flat.reshape(-1, 1))
    else:
        t = LoDTensor(np.asarray(data))
    if len(recursive_seq_lens) > 1:
        raise ValueError("create_lod_tensor: Fleet supports one level of LoD, got %d" % len(recursive_seq_lens))
    t.set_recursive_sequence_lengths(recursive_seq_lens)
    total = int(sum(recursive_seq_lens[0])) if recursive_seq_lens else 0
    if t._array.shape[0] != total:
        raise ValueError("create_lod_tensor: the lengths add up to %d but the data has %d rows"
                         % (total, t._array.shape[0]))
    return t


def to_c(value, what, dtype_hint=None):
    """A new fl_tensor (caller frees with lib.fl_tensor_free) holding a copy of value: an
    ndarray, a LoDTensor, or anything np.asarray takes (then converted to dtype_hint)."""
    lod = None
    if isinstance(value, LoDTensor):
        lod = value._lod
        value = value._array
    if not isinstance(value, np.ndarray):
        value = np.asarray(value, dtype=dtype_hint)
    if value.dtype not in _NP_TO_FL:
        raise TypeError("%s: unsupported dtype %s (expected float32, int64, float64, int32 or float16)"
                        % (what, value.dtype))
    value = np.ascontiguousarray(value)
    shape = (ctypes.c_int64 * max(1, value.ndim))(*value.shape)
    t = check_ptr(lib.fl_tensor_from_data(_NP_TO_FL[value.dtype], value.ndim, shape,
                                          value.ctypes.data_as(ctypes.c_void_p)), what)
    if lod:
        if len(lod) > 1:
            lib.fl_tensor_free(t)
            raise ValueError("%s: Fleet supports one level of LoD, got %d" % (what, len(lod)))
        offs = (ctypes.c_int64 * len(lod[0]))(*lod[0])
        try:
            check(lib.fl_tensor_set_lod(t, offs, len(lod[0])))
        except Exception:
            lib.fl_tensor_free(t)
            raise
    return t


def from_c(t, return_numpy=True):
    """Copies a borrowed fl_tensor into a FetchedArray (or a LoDTensor with its LoD)."""
    code = lib.fl_tensor_dtype(t)
    ndim = lib.fl_tensor_ndim(t)
    sp = lib.fl_tensor_shape(t)
    shape = tuple(sp[i] for i in range(ndim))
    if code == BFLOAT16:
        dt = np.dtype(np.uint16)  # raw bfloat16 bits: NumPy has no bfloat16
    else:
        dt = _FL_TO_NP[code]
    nbytes = lib.fl_tensor_nbytes(t)
    out = np.empty(shape, dtype=dt)
    if nbytes:
        ctypes.memmove(out.ctypes.data, lib.fl_tensor_cdata(t), nbytes)
    if return_numpy:
        return out.view(FetchedArray)
    n = ctypes.c_int64(0)
    offs = lib.fl_tensor_lod(t, ctypes.byref(n))
    lod = [[offs[i] for i in range(n.value)]] if offs and n.value else []
    return LoDTensor(out, lod)
