"""paddle.dataset.mnist: MNIST in the idx format (gzipped or not; Fashion-MNIST's files,
e.g. Debian's dataset-fashion-mnist, have the same format and names).  Samples are
(image float32 [784] scaled to [-1, 1], label int), as Paddle's reader."""
import gzip
import struct

import numpy as np

from . import find

__all__ = ["train", "test", "reader_creator"]

_SOURCE = "http://yann.lecun.com/exdb/mnist/"


def _open(path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _idx(path, want_magic):
    with _open(path) as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError("%s: not an idx file (too short)" % path)
        magic, n = struct.unpack(">II", head)
        if magic != want_magic:
            raise ValueError("%s: not an idx %s file (magic %#x, expected %#x)"
                             % (path, "image" if want_magic == 2051 else "label", magic, want_magic))
        if magic == 2051:
            rows, cols = struct.unpack(">II", f.read(8))
            data = np.frombuffer(f.read(n * rows * cols), dtype=np.uint8)
            if data.size != n * rows * cols:
                raise ValueError("%s: truncated (%d of %d bytes)" % (path, data.size, n * rows * cols))
            return data.reshape(n, rows * cols)
        data = np.frombuffer(f.read(n), dtype=np.uint8)
        if data.size != n:
            raise ValueError("%s: truncated (%d of %d labels)" % (path, data.size, n))
        return data


def reader_creator(image_filename, label_filename, buffer_size=100):
    """A reader of (image, label) samples from the two idx files."""

    def reader():
        images = _idx(image_filename, 2051)
        labels = _idx(label_filename, 2049)
        if len(images) != len(labels):
            raise ValueError("%s has %d images but %s %d labels" % (image_filename, len(images), label_filename,
                                                                    len(labels)))
        scaled = images.astype(np.float32) / 255.0 * 2.0 - 1.0
        for i in range(len(labels)):
            yield scaled[i], int(labels[i])

    return reader


def train():
    return reader_creator(find("mnist", ["train-images-idx3-ubyte.gz"], _SOURCE),
                          find("mnist", ["train-labels-idx1-ubyte.gz"], _SOURCE))


def test():
    return reader_creator(find("mnist", ["t10k-images-idx3-ubyte.gz"], _SOURCE),
                          find("mnist", ["t10k-labels-idx1-ubyte.gz"], _SOURCE))
