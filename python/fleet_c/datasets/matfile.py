"""The numeric arrays of a MATLAB level-5 .mat file (what Paddle's flowers reader reads with
scipy.io.loadmat: imagelabels.mat, setid.mat), without SciPy: {name: ndarray}.  Plain and
zlib-compressed (MATLAB 7's default) elements; cell arrays, structs, sparse and character
arrays are skipped."""
import struct
import zlib

import numpy as np

_TYPES = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 9: "f8", 12: "i8", 13: "u8"}
_MI_MATRIX, _MI_COMPRESSED = 14, 15
_NUMERIC_CLASSES = set(range(6, 16))  # mxDOUBLE_CLASS .. mxUINT64_CLASS


def _elements(buf, end, path):
    """(type, payload) of each data element of buf (little- or big-endian as end)."""
    at = 0
    while at + 8 <= len(buf):
        t, n = struct.unpack(end + "II", buf[at:at + 8])
        if t >> 16:  # small element: type and size in one word, data in the next 4 bytes
            t, n = t & 0xFFFF, t >> 16
            yield t, buf[at + 4:at + 4 + n]
            at += 8
            continue
        if at + 8 + n > len(buf):
            raise ValueError("%s: truncated MAT element (%d bytes at offset %d)" % (path, n, at))
        yield t, buf[at + 8:at + 8 + n]
        at += 8 + n
        if t != _MI_COMPRESSED:
            at = (at + 7) & ~7


def _matrix(payload, end, path):
    parts = list(_elements(payload, end, path))
    if len(parts) < 4:
        return None, None
    cls = struct.unpack(end + "I", parts[0][1][:4])[0] & 0xFF
    dims = np.frombuffer(parts[1][1], dtype=np.dtype("i4").newbyteorder(end))
    name = parts[2][1].decode("latin-1")
    if cls not in _NUMERIC_CLASSES or parts[3][0] not in _TYPES:
        return name, None
    data = np.frombuffer(parts[3][1], dtype=np.dtype(_TYPES[parts[3][0]]).newbyteorder(end))
    return name, data.reshape(tuple(int(d) for d in dims), order="F")


def loadmat(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 128:
        raise ValueError("%s: not a MAT file (too short)" % path)
    end = {b"IM": "<", b"MI": ">"}.get(raw[126:128])
    if end is None:
        raise ValueError("%s: not a MATLAB level-5 MAT file (no endian mark at byte 126)" % path)
    out = {}
    pending = [(t, p) for t, p in _elements(raw[128:], end, path)]
    while pending:
        t, p = pending.pop(0)
        if t == _MI_COMPRESSED:
            pending[0:0] = list(_elements(zlib.decompress(p), end, path))
        elif t == _MI_MATRIX:
            name, arr = _matrix(p, end, path)
            if arr is not None:
                out[name] = arr
    return out
