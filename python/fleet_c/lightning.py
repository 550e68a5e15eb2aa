"""fleet_c.lightning: the seed's fleet_lightning over the C library (include/fleet/app.h,
fleet/models.h and fleet/data.h's image reader).

    import fleet_c.lightning as lightning
    configs = lightning.parse_train_configs()          # --lr 0.1 --batch_size 32 ... from sys.argv
    model = lightning.applications.Resnet50()          # built into the default main program
    loader = model.load_imagenet_from_file("/pathto/imagenet/train.txt")
    optimizer = fluid.optimizer.Momentum(learning_rate=configs.lr, momentum=configs.momentum)
    optimizer = fleet.distributed_optimizer(optimizer)
    optimizer.minimize(model.loss)
    for data in loader():                              # one epoch: {"img": ..., "label": ...}
        exe.run(fleet.main_program, feed=data, fetch_list=[model.loss.name])

The configuration, the models and the reader are the C ones (fl_app_parse_train_configs,
fl_model_resnet_build / fl_model_vgg_build, fl_data_image_reader): this module only maps
names and hands over arrays.  A loader reads its share of the images when the job is
distributed (fleet's worker_index / worker_num once fleet.init has run), with the train
transform and a new shuffle per call; docs/python.md "lightning".
"""
import ctypes
import sys

from . import _lib
from ._lib import check, lib
from .framework import current_main

__all__ = ["parse_train_configs", "Configs", "applications"]


class Configs:
    """lightning.parse_train_configs()'s result: every fleet-lightning option as an attribute
    (configs.lr, configs.batch_size, ...), read from the C fl_app_config."""

    def __init__(self):
        self._c = _lib.AppConfig()
        lib.fl_app_config_default(None, ctypes.byref(self._c))

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        buf = ctypes.create_string_buffer(2048)
        if lib.fl_app_config_get(ctypes.byref(self._c), name.encode(), buf, len(buf)) != 0:
            raise AttributeError("configs has no option '%s' (%s)" % (name, _lib._text(lib.fl_last_error())))
        text = buf.value.decode()
        for conv in (int, float):
            try:
                return conv(text)
            except ValueError:
                pass
        return text

    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        check(lib.fl_app_config_set(ctypes.byref(self._c), name.encode(), str(value).encode()))


def parse_train_configs(argv=None):
    """The generic defaults, then "--config FILE", then "--name VALUE" / "--name=VALUE" of
    argv (default sys.argv[1:]); an unknown option raises naming it."""
    args = list(sys.argv[1:] if argv is None else argv)
    c = Configs()
    arr = _lib.cstr_array(["lightning"] + args)
    check(lib.fl_app_parse_train_configs(len(args) + 1, arr, None, ctypes.byref(c._c)))
    return c


class _Loader:
    """model.load_imagenet_from_file's result: each call is one epoch of feed dicts."""

    def __init__(self, model, path, batch_size, train, rank, nranks, configs):
        import numpy as np
        self._np = np
        o = _lib.ImageOptions()
        lib.fl_data_image_options_init(ctypes.byref(o))
        o.batch_size = batch_size
        o.threads = configs.decode_threads
        o.prefetch = 2 * o.threads
        o.train = 1 if train else 0
        o.crop = model.image_size
        o.resize = configs.resize or model.image_size * 8 // 7
        o.shuffle = 1 if train else 0
        o.seed = configs.seed
        o.rank, o.nranks = rank, nranks
        o.skip_bad = 1 if configs.bad_data == "skip" else 0
        self._h = _lib.check_ptr(lib.fl_data_image_reader_create(path.encode(), ctypes.byref(o)),
                                 "load_imagenet_from_file")
        self.batch_size, self.image_size = batch_size, model.image_size
        self._names = (model.image.name, model.label.name)
        self.epoch = 0

    def __len__(self):
        return int(lib.fl_data_image_reader_size(self._h))

    @property
    def num_classes(self):
        return int(lib.fl_data_image_reader_num_classes(self._h))

    @property
    def bad_images(self):
        """Images skipped (--bad_data skip) in the current or last epoch."""
        return int(lib.fl_data_image_reader_bad_images(self._h))

    def __call__(self):
        np = self._np
        check(lib.fl_data_image_reader_begin(self._h, self.epoch))
        self.epoch += 1
        s = self.image_size
        while True:
            img = np.empty((self.batch_size, 3, s, s), dtype=np.float32)
            lab = np.empty((self.batch_size, 1), dtype=np.int64)
            n = lib.fl_data_image_reader_next(self._h, img.ctypes.data, lab.ctypes.data)
            if n < 0:
                raise _lib.err_from_last("load_imagenet_from_file")
            if n == 0:
                return
            yield {self._names[0]: img[:n], self._names[1]: lab[:n]}

    def __del__(self):
        if getattr(self, "_h", None) and not _lib.shutting_down[0]:
            lib.fl_data_image_reader_free(self._h)
            self._h = None


class _ImageModel:
    """A model of applications: image, label, predict and loss Variables of the default
    main program, and the loader of its images."""

    def __init__(self, build, cfg, configs, image_size, num_classes):
        self.configs = configs if configs is not None else Configs()
        if image_size is not None:
            cfg.height = cfg.width = image_size
        if num_classes is not None:
            cfg.num_classes = num_classes
        self.image_size, self.num_classes = cfg.height, cfg.num_classes
        prog, handle = current_main()
        out = _lib.ImageModel()
        st = build(handle, ctypes.byref(cfg), ctypes.byref(out))
        if st != 0:
            raise _lib.err_from_last(type(self).__name__)
        self.image, self.label = prog._wrap(out.input), prog._wrap(out.label)
        self.predict, self.loss = prog._wrap(out.predict), prog._wrap(out.loss)
        self.inputs = [self.image, self.label]

    def load_imagenet_from_file(self, path, batch_size=None, train=True, rank=None, nranks=None):
        """A loader of the images that path lists (Paddle's train.txt: "relative/path.jpg label"
        per line) or holds (class folders): loader() yields an epoch of {image, label} feeds.
        The labels must be below the model's num_classes."""
        n = ctypes.c_int(0)
        check(lib.fl_app_load_imagenet_from_file(ctypes.byref(self.configs._c), _lib.cstr(path), ctypes.byref(n)))
        if n.value > self.num_classes:
            raise _lib.InvalidArgumentError("load_imagenet_from_file: '%s' holds %d classes, the model has %d "
                                            "(num_classes=)" % (path, n.value, self.num_classes))
        if rank is None or nranks is None:
            rank, nranks = _worker_share()
        return _Loader(self, path, batch_size or self.configs.batch_size, train, rank, nranks, self.configs)


def _worker_share():
    """(worker_index, worker_num) of the fleet initialised last in this process (either
    fleet_c.distributed.fleet or fluid.incubate.fleet's), else (0, 1)."""
    mod = sys.modules.get("fleet_c._fleet")
    handles = getattr(mod, "_all_handles", None) if mod is not None else None
    if handles:
        h = handles[-1]
        return int(lib.fleet_worker_index(h)), max(int(lib.fleet_worker_num(h)), 1)
    return 0, 1


class applications:
    """The seed's lightning.applications: Resnet50() and VGG16() (the models of Fleet's
    collective benchmark), 3 x 224 x 224 and 1000 classes unless told otherwise."""

    class Resnet50(_ImageModel):
        def __init__(self, configs=None, image_size=None, num_classes=None, depth=50, width=64):
            cfg = lib.fl_model_resnet50()
            cfg.depth, cfg.base_filters = depth, width
            super().__init__(lib.fl_model_resnet_build, cfg, configs, image_size, num_classes)

    class VGG16(_ImageModel):
        def __init__(self, configs=None, image_size=None, num_classes=None, depth=16, width=64, fc_dim=4096):
            cfg = lib.fl_model_vgg16()
            cfg.depth, cfg.base_filters, cfg.fc_dim = depth, width, fc_dim
            super().__init__(lib.fl_model_vgg_build, cfg, configs, image_size, num_classes)
