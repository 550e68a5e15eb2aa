"""paddle.dataset.* readers over local files (no downloads).

The files are looked for in the directory named by FLEET_DATASET_DIR (default
``~/.cache/paddle/dataset``, where Paddle itself keeps them), one subdirectory per data
set (``mnist/``, ...).  A missing file is an error naming it and where to put it.
"""
import os

__all__ = ["data_dir", "find"]


def data_dir():
    return os.environ.get("FLEET_DATASET_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "paddle",
                                                               "dataset")


def find(dataset, names, source):
    """The path of the first of names present in <data_dir>/<dataset>/ (each name also
    without its .gz); a FileNotFoundError saying where to put them otherwise."""
    d = os.path.join(data_dir(), dataset)
    for n in names:
        for cand in (n, n[:-3] if n.endswith(".gz") else n + ".gz"):
            p = os.path.join(d, cand)
            if os.path.exists(p):
                return p
    raise FileNotFoundError(
        "paddle.dataset.%s: %s not found in %s (fleet_c downloads nothing: put the file there, from %s, or set "
        "FLEET_DATASET_DIR to the directory holding %s/)" % (dataset, " or ".join(names), d, source, dataset))
