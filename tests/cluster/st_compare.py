#!/usr/bin/env python3
"""st_compare.py WANT GOT TOL - compares two safetensors files of float tensors.

Every tensor of WANT must be in GOT with the same shape and, element by element,
|want - got| <= TOL * (1 + |want|) (the criterion of tests/test_ps_fleet.c).  Prints one
line per tensor and the largest difference; exit status 0 if all agree, 1 otherwise, 2 if
a file cannot be read.  Python's standard library only (no NumPy), so it runs wherever
python3 does.
"""
import json
import struct
import sys
from array import array

FORMATS = {"F32": "f", "F64": "d", "I64": "q"}


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: shorter than a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(blob[8 : 8 + n])
    data = blob[8 + n :]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        fmt = FORMATS.get(t["dtype"])
        if fmt is None:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {t['dtype']}")
        lo, hi = t["data_offsets"]
        a = array(fmt)
        a.frombytes(data[lo:hi])
        if sys.byteorder != "little":
            a.byteswap()
        out[name] = (tuple(t["shape"]), a)
    return out


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    try:
        want, got, tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
    except (OSError, ValueError, KeyError) as e:
        print(f"st_compare: {e}", file=sys.stderr)
        return 2
    worst, bad = 0.0, 0
    for name, (shape, a) in sorted(want.items()):
        if name not in got:
            print(f"  {name}: missing from {sys.argv[2]}")
            bad += 1
            continue
        gshape, b = got[name]
        if gshape != shape:
            print(f"  {name}: shape {list(gshape)}, expected {list(shape)}")
            bad += 1
            continue
        d = max((abs(x - y) for x, y in zip(a, b)), default=0.0)
        off = sum(1 for x, y in zip(a, b) if abs(x - y) > tol * (1 + abs(x)))
        worst = max(worst, d)
        print(f"  {name} {list(shape)}: largest difference {d:.3g}" + (f", {off} elements beyond {tol:g}" if off else ""))
        bad += off > 0
    print(f"  {len(want)} tensors, largest difference {worst:.3g} (tolerance {tol:g} abs + rel)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
