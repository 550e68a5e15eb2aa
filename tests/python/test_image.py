"""The image reader's eval transform (fl_data_image_load: decode, shorter side to `resize`
with bilinear resampling, centre crop, normalise) against torchvision's recipe written with
Pillow and NumPy: Image.open().convert("RGB"), resize((int(s * w / h), s), BILINEAR), crop at
round((w - c) / 2), ToTensor, Normalize.  Both decode with libjpeg-turbo and resample with
Pillow's filter, so the outputs agree to the last bit up to JPEG decoders' rounding.

With dct_scale (the default) a JPEG whose resized size is at most half its own decodes at
1/2, 1/4 or 1/8 scale: the reference is then the same recipe after Pillow's
Image.draft("RGB", size), which asks libjpeg for the same scale, and the difference from the
full-size recipe is bounded here.  PNG files (every mode Pillow writes, 16-bit colour written
by hand) and CMYK JPEG files against the same recipe; 16-bit grey, which Pillow clips to 255,
against the high byte."""
import ctypes
import os
import struct
import zlib

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
                ("nranks", ctypes.c_int), ("skip_bad", ctypes.c_int), ("dct_scale", ctypes.c_int)]


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
    assert abs(o.std[2] - 0.225) < 1e-7 and abs(o.ratio[1] - 4.0 / 3.0) < 1e-7 and o.dct_scale == 1
    st = L.fl_data_image_load(b"/nonexistent.jpg", ctypes.byref(o), 0, (ctypes.c_float * 3)())
    if st == -9:  # FL_EUNSUPPORTED: a build without libjpeg-turbo
        pytest.skip(L.fl_last_error().decode())
    return L


def reference(path, resize, crop, mean, std, draft=False):
    img = Image.open(path)
    w, h = img.size
    if w <= h:
        size = (resize, int(resize * h / w))
    else:
        size = (int(resize * w / h), resize)
    if draft:
        img.draft("RGB", size)
    img = img.convert("RGB").resize(size, Image.BILINEAR)
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


def load(lib, path, resize, crop, dct_scale=1):
    o = Options()
    lib.fl_data_image_options_init(ctypes.byref(o))
    o.resize, o.crop, o.dct_scale = resize, crop, dct_scale
    out = np.zeros((3, crop, crop), np.float32)
    st = lib.fl_data_image_load(path.encode(), ctypes.byref(o), 0, out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    assert st == 0, lib.fl_last_error().decode()
    return out, o


def levels(out, ref, o):
    """|out - ref| back on the 0..255 levels the two pipelines rounded to."""
    return np.abs((out - ref) * np.asarray(list(o.std), np.float32)[:, None, None] * 255)


@pytest.mark.parametrize("dct_scale", [0, 1])
@pytest.mark.parametrize("h,w,resize,crop,quality,sub", [
    (300, 400, 256, 224, 90, "4:2:0"),   # landscape, shrink
    (333, 250, 256, 224, 95, "4:4:4"),   # portrait, odd sizes
    (200, 180, 256, 224, 85, "4:2:0"),   # enlarged
    (257, 300, 257, 224, 75, "4:2:2"),   # the shorter side already at size; odd crop offset
    (480, 640, 64, 56, 90, "4:2:0"),     # a strong shrink: 1/4 with dct_scale
    (700, 1100, 256, 224, 95, "4:4:4"),  # 1/2
    (1200, 1600, 256, 224, 90, "4:2:0"), # 1/4
    (2100, 1500, 256, 224, 85, "4:2:2"), # portrait, 1/4
])
def test_eval_transform_matches_pillow(lib, tmp_path, h, w, resize, crop, quality, sub, dct_scale):
    path = str(tmp_path / "img.jpg")
    Image.fromarray(scene(h, w, h * w)).save(path, quality=quality, subsampling=sub)
    out, o = load(lib, path, resize, crop, dct_scale)
    ref = reference(path, resize, crop, list(o.mean), list(o.std), draft=bool(dct_scale))
    lv = levels(out, ref, o)
    assert lv.max() <= 1.01, "largest difference %.2f levels" % lv.max()
    assert (lv < 0.01).mean() >= 0.99, "only %.4f of the values are equal" % (lv < 0.01).mean()
    if dct_scale:
        # what the scaled decode changes against torchvision's full-size recipe, measured on
        # these noisy scenes: 0.34-0.65 levels on average, 3-16 at the 99.9th percentile, the
        # largest 6-30 at the discs' sharp edges (1/4 scale of the 2100 x 1500 one)
        full = levels(out, reference(path, resize, crop, list(o.mean), list(o.std)), o)
        assert full.mean() <= 1.0 and np.percentile(full, 99.9) <= 24.01, \
            "against full size: mean %.3f, 99.9th percentile %.2f levels" % (full.mean(), np.percentile(full, 99.9))


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)


def write_png16(path, a):
    """a: h x w x 3 uint16, or h x w (grey), as a 16-bit PNG (Pillow writes neither)."""
    h, w = a.shape[:2]
    ctype = 2 if a.ndim == 3 else 0
    raw = b"".join(b"\0" + a[y].astype(">u2").tobytes() for y in range(h))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, ctype, 0, 0, 0)) +
                png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA", "P", "1", "RGB16", "L16"])
def test_png_matches_pillow(lib, tmp_path, mode):
    h, w = 150, 210
    rgb = scene(h, w, 7)
    path = str(tmp_path / "img.JPEG")  # a PNG named .JPEG, as one in ImageNet: told by its bytes
    if mode == "RGB16" or mode == "L16":
        rng = np.random.default_rng(3)
        a = rgb.astype(np.uint16) * 257 + rng.integers(0, 256, rgb.shape).astype(np.uint16)
        write_png16(path, a if mode == "RGB16" else a[:, :, 1])
    else:
        img = Image.fromarray(rgb)
        if mode in ("RGBA", "LA"):
            img.putalpha(Image.fromarray((np.arange(h * w).reshape(h, w) % 251).astype(np.uint8)))
        if mode == "P":  # a palette with a transparent entry (tRNS), dropped as Pillow drops it
            img = img.quantize(64)
            img.info["transparency"] = 5
        img = img.convert(mode) if mode not in ("P", "RGBA") else img
        img.save(path, format="PNG")
    out, o = load(lib, path, 128, 112)
    if mode == "L16":  # Pillow opens it as I;16 and clips to 255: the reader takes the high byte
        grey = Image.fromarray((a[:, :, 1] >> 8).astype(np.uint8)).convert("RGB")
        grey.save(str(tmp_path / "ref.png"))
        ref = reference(str(tmp_path / "ref.png"), 128, 112, list(o.mean), list(o.std))
    else:
        ref = reference(path, 128, 112, list(o.mean), list(o.std))
    lv = levels(out, ref, o)
    assert lv.max() <= 0.01, "%s: largest difference %.2f levels" % (mode, lv.max())


@pytest.mark.parametrize("dct_scale", [0, 1])
def test_cmyk_jpeg_matches_pillow(lib, tmp_path, dct_scale):
    path = str(tmp_path / "cmyk.jpg")
    Image.fromarray(scene(600, 520, 11)).convert("CMYK").save(path, quality=95)
    assert Image.open(path).mode == "CMYK"
    out, o = load(lib, path, 256, 224, dct_scale)
    ref = reference(path, 256, 224, list(o.mean), list(o.std), draft=bool(dct_scale))
    lv = levels(out, ref, o)
    assert lv.max() <= 1.01, "largest difference %.2f levels" % lv.max()
    assert (lv < 0.01).mean() >= 0.99, "only %.4f of the values are equal" % (lv < 0.01).mean()
