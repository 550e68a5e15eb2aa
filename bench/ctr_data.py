"""CTR-DNN data shared by the peer scripts of bench/bench_ctr.sh (ctr_torch.py, ctr_paddle.py).

Parses the first N files of DIR/train and the files of DIR/test as Fleet's Criteo reader does
(label, 13 dense columns scaled with Paddle's constants, 26 categorical columns hashed with FNV-1a 64
over "C<k>:" + field, modulo 1000001) and caches the arrays as DIR/torch_cache_<N>.npz, so every
peer trains on the same rows in the same order.  Needs only NumPy.
"""
import os
import sys

import numpy as np

DIM = 1000001
D_MIN = np.array([0, -3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], dtype=np.float64)
D_DIFF = np.array([20, 603, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50], dtype=np.float64)
FNV_OFF = np.uint64(0xcbf29ce484222325)
FNV_PRIME = np.uint64(0x100000001b3)


def fnv_prefix(k):
    h = int(FNV_OFF)
    for c in b"C%d:" % k:
        h = ((h ^ c) * int(FNV_PRIME)) & 0xFFFFFFFFFFFFFFFF
    return np.uint64(h)


def hash_column(k, fields):
    """fl_data_criteo_id(k, field) % DIM for a list of bytes fields, vectorised over rows."""
    arr = np.array(fields, dtype=bytes)  # fixed width, NUL padded
    width = arr.dtype.itemsize
    lens = np.char.str_len(arr)
    b = arr.view(np.uint8).reshape(len(fields), width).astype(np.uint64)
    h = np.full(len(fields), fnv_prefix(k), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(width):
            nh = (h ^ b[:, j]) * FNV_PRIME
            h = np.where(lens > j, nh, h)
    return (h % np.uint64(DIM)).astype(np.int64)


def parse_files(paths):
    rows = []
    for p in paths:
        with open(p, "rb") as f:
            for no, line in enumerate(f.read().split(b"\n"), 1):
                if line.endswith(b"\r"):
                    line = line[:-1]
                if line:
                    r = line.split(b"\t")
                    if len(r) != 40:
                        sys.exit("ctr_data.py: %s:%d: %d columns, expected 40" % (p, no, len(r)))
                    rows.append(r)
    label = np.array([int(r[0]) for r in rows], dtype=np.int64)
    dense = np.zeros((len(rows), 13), dtype=np.float32)
    for i in range(13):
        col = np.array([float(r[1 + i]) if r[1 + i] else np.nan for r in rows], dtype=np.float64)
        v = (col - D_MIN[i]) / D_DIFF[i]
        dense[:, i] = np.where(np.isnan(col), 0.0, v).astype(np.float32)
    ids = np.zeros((len(rows), 26), dtype=np.int64)
    for i in range(26):
        ids[:, i] = hash_column(i + 1, [r[14 + i] for r in rows])
    return dense, ids, label


def files_of(d, sub, n=None):
    p = os.path.join(d, sub)
    fs = sorted(os.path.join(p, f) for f in os.listdir(p) if not f.startswith(".") and ".tmp" not in f)
    return fs[:n] if n else fs


def load(d, nfiles):
    cache = os.path.join(d, "torch_cache_%d.npz" % nfiles)
    if not os.path.exists(cache):
        tr = parse_files(files_of(d, "train", nfiles))
        te = parse_files(files_of(d, "test"))
        tmp = cache + ".tmp.npz"
        np.savez(tmp, d=tr[0], i=tr[1], l=tr[2], wd=te[0], wi=te[1], wl=te[2])
        os.replace(tmp, cache)
    z = np.load(cache)
    return (z["d"], z["i"], z["l"]), (z["wd"], z["wi"], z["wl"])


def sys_busy_s():
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / 100.0
    except (OSError, ValueError, IndexError):
        return 0.0
