"""Fashion-MNIST for the peer scripts of bench/bench_fmnist.sh (fmnist_torch.py, fmnist_paddle.py).

load_split(DIR, "train" | "t10k") reads DIR/<prefix>-images-idx3-ubyte[.gz] and the labels as
Fleet's examples/fmnist/idx.h does (headers checked) and returns float32 pixels / 255 of shape
[N, 784] and int64 labels.  Needs only NumPy.
"""
import gzip
import os
import sys

import numpy as np


def load_idx(path, ndim):
    """An unsigned-byte IDX file, header checked as idx.h does."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (gzip.open if gz else open)(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[:4], "big") if len(data) >= 4 else -1
    if magic != 0x800 | ndim:
        sys.exit("%s: IDX magic is 0x%08x, expected 0x%08x" % (path, magic, 0x800 | ndim))
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    if len(data) - 4 - 4 * ndim != int(np.prod(dims)):
        sys.exit("%s: header says %s, the file has %d data bytes" % (path, dims, len(data) - 4 - 4 * ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_split(d, prefix):
    def path(kind):
        p = os.path.join(d, "%s-%s-ubyte.gz" % (prefix, kind))
        return p if os.path.exists(p) else p[:-3]
    x = load_idx(path("images-idx3"), 3)
    y = load_idx(path("labels-idx1"), 1)
    if x.shape[1:] != (28, 28) or x.shape[0] != y.shape[0] or y.max() > 9:
        sys.exit("%s/%s: unexpected shapes %s / %s or labels" % (d, prefix, x.shape, y.shape))
    return x.reshape(-1, 784).astype(np.float32) / 255.0, y.astype(np.int64)
