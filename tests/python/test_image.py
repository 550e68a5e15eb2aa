"""The image reader's eval transform (fl_data_image_load: decode, shorter side to `resize`
with bilinear resampling, centre crop, normalise) against torchvision's recipe written with
Pillow and NumPy: Image.open().convert("RGB"), resize((int(s * w / h), s), BILINEAR), crop at
round((w - c) / 2), ToTensor, Normalize.  Both decode with libjpeg-turbo and resample with
Pillow's filter, so the outputs agree to the last bit up to JPEG decoders' rounding."""
import ctypes
import os

import numpy as np
import pytest

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402


class Options(ctypes.Structure):
    """fl_data_image_options (include/fleet/data.h); checked against the C defaults below."""
    _fields_ = [("batch_size", ctypes.c_int), ("threads", ctypes.c_int), ("prefetch", ctypes.c_int),
                ("train", ctypes.c_int), ("crop", ctypes.c_int), ("resize", ctypes.c_int),
                ("scale", ctypes.c_float * 2), ("ratio", ctypes.c_float * 2), ("flip", ctypes.c_float),
                ("mean", ctypes.c_float * 3), ("std", ctypes.c_float * 3), ("shuffle", ctypes.c_int),
                ("drop_last", ctypes.c_int), ("seed", ctypes.c_uint64), ("rank", ctypes.c_int),
                ("nranks", ctypes.c_int), ("skip_bad", ctypes.c_int)]


@pytest.fixture(scope="module")
def lib():
    path = os.environ.get("FLEET_LIB")
    if not path:
        pytest.fail("FLEET_LIB is not set: run the tests with tests/python/run.sh BUILD")
    L = ctypes.CDLL(path)
    L.fl_data_image_options_init.argtypes = [ctypes.POINTER(Options)]
    L.fl_data_image_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(Options), ctypes.c_uint64,
                                     ctypes.POINTER(ctypes.c_float)]
    L.fl_last_error.restype = ctypes.c_char_p
    o = Options()
    L.fl_data_image_options_init(ctypes.byref(o))
    assert (o.batch_size, o.crop, o.resize, o.nranks) == (32, 224, 256, 1)
    assert abs(o.std[2] - 0.225) < 1e-7 and abs(o.ratio[1] - 4.0 / 3.0) < 1e-7
    st = L.fl_data_image_load(b"/nonexistent.jpg", ctypes.byref(o), 0, (ctypes.c_float * 3)())
    if st == -9:  # FL_EUNSUPPORTED: a build without libjpeg-turbo
        pytest.skip(L.fl_last_error().decode())
    return L


def reference(path, resize, crop, mean, std):
    img = Image.open(path).convert("RGB")
    w, h = img.size
    if w <= h:
        size = (resize, int(resize * h / w))
    else:
        size = (int(resize * w / h), resize)
    img = img.resize(size, Image.BILINEAR)
    w, h = img.size
    top, left = int(round((h - crop) / 2.0)), int(round((w - crop) / 2.0))
    img = img.crop((left, top, left + crop, top + crop))
    x = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / np.float32(255)
    return (x - np.asarray(mean, np.float32)[:, None, None]) / np.asarray(std, np.float32)[:, None, None]


def scene(h, w, seed):
    """A photograph-like image: smooth gradients, a few discs and some noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([x / w * 200 + 30, y / h * 180 + 40, (x + y) / (w + h) * 150 + 60], axis=2)
    for _ in range(4):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(5, min(h, w) / 3)
        img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.uniform(0, 255, 3)
    img += rng.normal(0, 6, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("h,w,resize,crop,quality,sub", [
    (300, 400, 256, 224, 90, "4:2:0"),   # landscape, shrink
    (333, 250, 256, 224, 95, "4:4:4"),   # portrait, odd sizes
    (200, 180, 256, 224, 85, "4:2:0"),   # enlarged
    (257, 300, 257, 224, 75, "4:2:2"),   # the shorter side already at size; odd crop offset
    (480, 640, 64, 56, 90, "4:2:0"),     # a strong shrink
])
def test_eval_transform_matches_pillow(lib, tmp_path, h, w, resize, crop, quality, sub):
    path = str(tmp_path / "img.jpg")
    Image.fromarray(scene(h, w, h * w)).save(path, quality=quality, subsampling=sub)
    o = Options()
    lib.fl_data_image_options_init(ctypes.byref(o))
    o.resize, o.crop = resize, crop
    out = np.zeros((3, crop, crop), np.float32)
    st = lib.fl_data_image_load(path.encode(), ctypes.byref(o), 0, out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    assert st == 0, lib.fl_last_error().decode()
    ref = reference(path, resize, crop, list(o.mean), list(o.std))
    # back to the 0..255 levels the two pipelines rounded to
    levels = np.abs((out - ref) * np.asarray(list(o.std), np.float32)[:, None, None] * 255)
    assert levels.max() <= 1.01, "largest difference %.2f levels" % levels.max()
    assert (levels < 0.01).mean() >= 0.99, "only %.4f of the values are equal" % (levels < 0.01).mean()
