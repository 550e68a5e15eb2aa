"""paddle.dataset readers over local files: flowers (102flowers.tgz, imagelabels.mat,
setid.mat in $FLEET_DATASET_DIR/flowers), written here in their formats (MAT level 5,
plain and zlib-compressed elements as MATLAB 7 writes them)."""
import io
import os
import struct
import subprocess
import sys
import tarfile
import zlib

import numpy as np
import pytest


def _el(t, payload):
    pad = (-len(payload)) % 8
    return struct.pack("<II", t, len(payload)) + payload + b"\0" * pad


def _matrix(name, arr):
    """miMATRIX of a double (class 6, miDOUBLE 9) or uint16 (class 11, miUINT16 4) array."""
    cls, mi = (6, 9) if arr.dtype == np.float64 else (11, 4)
    body = _el(6, struct.pack("<II", cls, 0)) + _el(5, struct.pack("<%di" % arr.ndim, *arr.shape))
    body += _el(1, name.encode()) + _el(mi, arr.tobytes(order="F"))
    return _el(14, body)


def _write_mat(path, arrays, compress):
    out = (b"MATLAB 5.0 MAT-file, written by the tests".ljust(116) + b"\0" * 8 + struct.pack("<H", 0x0100) + b"IM")
    for name, arr in arrays.items():
        m = _matrix(name, arr)
        out += struct.pack("<II", 15, len(zlib.compress(m))) + zlib.compress(m) if compress else m
    with open(path, "wb") as f:
        f.write(out)


@pytest.fixture
def flowers_dir(tmp_path):
    from PIL import Image
    d = tmp_path / "data" / "flowers"
    d.mkdir(parents=True)
    n = 6
    labels = np.array([[3, 1, 102, 7, 7, 2]], np.float64)  # 1-based, as the real file
    with tarfile.open(str(d / "102flowers.tgz"), "w:gz") as tf:
        for i in range(1, n + 1):
            buf = io.BytesIO()
            Image.new("RGB", (300 + 10 * i, 260), (10 * i, 100, 200)).save(buf, "JPEG", quality=95)
            info = tarfile.TarInfo("jpg/image_%05d.jpg" % i)
            info.size = len(buf.getvalue())
            tf.addfile(info, io.BytesIO(buf.getvalue()))
    _write_mat(str(d / "imagelabels.mat"), {"labels": labels}, compress=False)
    _write_mat(str(d / "setid.mat"), {"trnid": np.array([[1, 2]], np.uint16), "valid": np.array([[3]], np.uint16),
                                      "tstid": np.array([[4, 5, 6]], np.uint16)}, compress=True)
    return tmp_path / "data"


def test_flowers_splits_labels_and_images(flowers_dir, env):
    code = r'''
import numpy as np
import fleet_c as paddle
for split in ("train", "test", "valid"):
    for img, label in getattr(paddle.dataset.flowers, split)()():
        print(split, label, img.dtype, img.shape, "%.2f" % float(img.reshape(3, 224, 224)[0].mean()))
'''
    out = subprocess.run([sys.executable, "-c", code], env=dict(env, FLEET_DATASET_DIR=str(flowers_dir)),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60).stdout
    rows = [l.split() for l in out.splitlines() if l.split()[:1] and l.split()[0] in ("train", "test", "valid")]
    # Paddle's splits: train = tstid (images 4, 5, 6), test = trnid (1, 2), valid = valid (3); labels - 1
    assert [(r[0], int(r[1])) for r in rows] == [("train", 6), ("train", 6), ("train", 1), ("test", 2), ("test", 0),
                                                   ("valid", 101)], out
    assert all(r[2] == "float32" and r[3] == "(150528,)" for r in rows), out
    # channel 0 is blue (200) minus its mean 103.94, up to JPEG's rounding
    assert all(abs(float(r[4]) - (200 - 103.94)) < 3 for r in rows), out


def test_flowers_missing_files_say_where_to_put_them(tmp_path, env):
    code = "import fleet_c as paddle\npaddle.dataset.flowers.train()"
    p = subprocess.run([sys.executable, "-c", code], env=dict(env, FLEET_DATASET_DIR=str(tmp_path)),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert p.returncode != 0
    assert "paddle.dataset.flowers: 102flowers.tgz not found in %s" % os.path.join(str(tmp_path), "flowers") in p.stdout
    assert "FLEET_DATASET_DIR" in p.stdout and "robots.ox.ac.uk" in p.stdout, p.stdout
