"""paddle.dataset.flowers: Oxford 102 Flowers, as Paddle's reader: 102flowers.tgz (the jpg
images), imagelabels.mat (labels 1..102) and setid.mat (the splits) in
$FLEET_DATASET_DIR/flowers/.  As in Paddle, train() reads the split named 'tstid' and
test() 'trnid' (Paddle swapped them: the test split is the larger), valid() 'valid'.
Samples are (image float32 [3 * 224 * 224], label int 0..101): the image resized so that
its short side is 256, cropped to 224 (at random and flipped at random for training, in
the centre otherwise), in BGR channel order and CHW layout minus the mean
[103.94, 116.78, 123.68], flattened - Paddle's default mapper (simple_transform).  Images
are decoded with Pillow (Paddle uses OpenCV: decoders may differ in the last bit)."""
import io
import tarfile

import numpy as np

from . import find
from .matfile import loadmat

__all__ = ["train", "test", "valid", "reader_creator", "default_mapper"]

_SOURCE = "https://www.robots.ox.ac.uk/~vgg/data/flowers/102/"
_MEAN = np.array([103.94, 116.78, 123.68], np.float32).reshape(3, 1, 1)


def _files():
    return (find("flowers", ["102flowers.tgz"], _SOURCE), find("flowers", ["imagelabels.mat"], _SOURCE),
            find("flowers", ["setid.mat"], _SOURCE))


def _transform(jpg, train, rng):
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("paddle.dataset.flowers decodes its jpg images with Pillow: pip install pillow") from None
    im = Image.open(io.BytesIO(jpg)).convert("RGB")
    w, h = im.size
    s = 256.0 / min(w, h)
    im = im.resize((max(256, int(round(w * s))), max(256, int(round(h * s)))), Image.BILINEAR)
    a = np.asarray(im, dtype=np.float32)[:, :, ::-1]  # BGR, as OpenCV loads it
    hh, ww = a.shape[:2]
    if train:
        y, x = int(rng.randint(0, hh - 224 + 1)), int(rng.randint(0, ww - 224 + 1))
    else:
        y, x = (hh - 224) // 2, (ww - 224) // 2
    a = a[y:y + 224, x:x + 224]
    if train and rng.randint(0, 2) == 0:
        a = a[:, ::-1]
    return (a.transpose(2, 0, 1) - _MEAN).astype(np.float32).ravel()


def default_mapper(is_train, sample, rng=None):
    jpg, label = sample
    return _transform(jpg, is_train, rng if rng is not None else np.random), label


def reader_creator(data_file, label_file, setid_file, dataset_name, mapper=None, buffered_size=1024, use_xmap=True,
                   cycle=False, is_train=False):
    """A reader of the samples of split dataset_name ('trnid', 'valid' or 'tstid')."""

    def reader():
        labels = loadmat(label_file).get("labels")
        ids = loadmat(setid_file).get(dataset_name)
        if labels is None or ids is None:
            raise ValueError("paddle.dataset.flowers: %s has no 'labels' or %s no '%s'"
                             % (label_file, setid_file, dataset_name))
        labels = labels.ravel()
        want = {"jpg/image_%05d.jpg" % int(i): int(labels[int(i) - 1]) - 1 for i in ids.ravel()}
        while True:
            with tarfile.open(data_file) as tf:
                for m in tf:
                    lab = want.get(m.name)
                    if lab is None:
                        continue
                    jpg = tf.extractfile(m).read()
                    yield (mapper((jpg, lab)) if mapper else default_mapper(is_train, (jpg, lab)))
            if not cycle:
                break

    return reader


def train(mapper=None, buffered_size=1024, use_xmap=True, cycle=False):
    return reader_creator(*_files(), "tstid", mapper, buffered_size, use_xmap, cycle, True)


def test(mapper=None, buffered_size=1024, use_xmap=True, cycle=False):
    return reader_creator(*_files(), "trnid", mapper, buffered_size, use_xmap, cycle, False)


def valid(mapper=None, buffered_size=1024, use_xmap=True):
    return reader_creator(*_files(), "valid", mapper, buffered_size, use_xmap, False, False)
