"""Feeding an Executor from Python readers: fluid.DataFeeder, fluid.io.DataLoader
(from_generator) and paddle.io.DataLoader, and the 1.x py_reader family
(layers.py_reader, create_py_reader_by_data, read_file, decorate_paddle_reader).

A reader yields samples (or lists of samples, or whole batches); DataFeeder turns one
batch into one feed dict of LoDTensors (as Paddle's), which the executor copies into C
tensors in one call per variable: the C side sees batches, never single examples.
Batches are made ahead in a thread (capacity batches), while the executor, which releases
the interpreter lock in C, trains on the previous one.

Non-iterable loaders (iterable=False, and every py_reader) are bound to their program:
``loader.start()``, then ``exe.run(program)`` without a feed takes the next batch, and the
run after the last batch raises ``fluid.core.EOFException``; ``loader.reset()`` rewinds.
"""
import itertools

import numpy as np

from . import reader as _reader
from ._tensor import LoDTensor, create_lod_tensor
from .framework import Variable, default_main_program

__all__ = ["EOFException", "DataFeeder", "DataLoader", "PyReader", "py_reader", "create_py_reader_by_data",
           "read_file", "Dataset", "IterableDataset"]


class EOFException(Exception):
    """fluid.core.EOFException: a non-iterable loader has no batch left (reset() it)."""


class DataFeeder:
    """fluid.DataFeeder(feed_list, place): feed(minibatch) turns a list of samples (one
    entry per variable of feed_list, in order) into a feed dict."""

    def __init__(self, feed_list, place=None, program=None):
        prog = program or default_main_program()
        self.feed_vars = []
        for v in feed_list:
            if isinstance(v, str):
                v = prog.global_block().var(v)
            if not isinstance(v, Variable):
                raise TypeError("DataFeeder: feed_list holds Variables or names, got %s" % type(v).__name__)
            self.feed_vars.append(v)
        self.feed_names = [v.name for v in self.feed_vars]
        self._specs = [(v.name, np.dtype(v.dtype), tuple(v.shape), v.lod_level) for v in self.feed_vars]

    def feed(self, minibatch):
        minibatch = list(minibatch)
        if not minibatch:
            raise ValueError("DataFeeder.feed: the minibatch is empty")
        out = {}
        for i, (name, dtype, shape, lod) in enumerate(self._specs):
            try:
                column = [s[i] for s in minibatch]
            except (IndexError, TypeError):
                raise ValueError("DataFeeder.feed: every sample must have %d entries (%s), got %r"
                                 % (len(self._specs), ", ".join(self.feed_names), minibatch[0]))
            out[name] = _column(name, column, dtype, shape, lod)
        return out


def _column(name, column, dtype, shape, lod):
    per = [d for d in shape[1:]]
    if lod == 0:
        a = np.asarray(column, dtype=dtype)
        if -1 not in per:
            a = a.reshape([len(column)] + per)
        return LoDTensor(a)
    lens = [len(s) for s in column]
    total = sum(lens)
    if not column or total == 0:
        raise ValueError("feed '%s': the sequences of the batch are all empty" % name)
    try:  # sequences of numbers (ids): one pass, no array per sequence
        flat = np.fromiter(itertools.chain.from_iterable(column), dtype=dtype, count=total)
        flat = flat.reshape([total] + (per if per and -1 not in per else [-1]))
    except (TypeError, ValueError):  # sequences of rows
        flat = np.concatenate([np.asarray(s, dtype=dtype).reshape([len(s)] + ([-1] if not per else per))
                               for s in column if len(s)])
    if flat.ndim == 1:
        flat = flat.reshape(-1, 1)
    return create_lod_tensor(flat, [lens])


def _as_feed(names, batch):
    """A batch generator's yield: a dict, or one array / LoDTensor per feed variable."""
    if isinstance(batch, dict):
        return batch
    if isinstance(batch, (np.ndarray, LoDTensor)) and len(names) == 1:
        batch = [batch]
    batch = list(batch)
    if len(batch) != len(names):
        raise ValueError("the batch generator yielded %d values for %d feed variables (%s)"
                         % (len(batch), len(names), ", ".join(names)))
    return dict(zip(names, batch))


class _BlockingQueue:
    """What a py_reader's ``queue`` attribute answers (Paddle's LoDTensorBlockingQueue):
    size(), the batches made ahead and waiting, and capacity()."""

    def __init__(self, capacity):
        self._capacity = capacity
        self._q = None

    def _attach(self, q):
        self._q = q

    def size(self):
        return self._q.qsize() if self._q is not None else 0

    def capacity(self):
        return self._capacity


class _Loader:
    """What DataLoader.from_generator and the py_reader functions return."""

    def __init__(self, feed_list, capacity, iterable, return_list, drop_last, program=None):
        if not feed_list:
            raise ValueError("DataLoader: feed_list is required (the data variables to feed)")
        self._feeder = DataFeeder(feed_list, program=program)
        self._names = self._feeder.feed_names
        self._capacity = max(1, int(capacity or 1))
        self._iterable = bool(iterable)
        self._return_list = bool(return_list)
        self._drop_last = bool(drop_last)
        self._batches = None    # a function returning an iterator of feed dicts
        self._it = None
        self._queue = _BlockingQueue(self._capacity)
        if not self._iterable:
            prog = program or default_main_program()
            prog._readers = getattr(prog, "_readers", [])
            prog._readers.append(self)

    # -- what to read ------------------------------------------------------------------------
    def set_sample_generator(self, reader, batch_size, drop_last=True, places=None):
        self._drop_last = bool(drop_last)
        return self.set_sample_list_generator(_reader.batch(reader, batch_size, drop_last=self._drop_last), places)

    def set_sample_list_generator(self, reader, places=None):
        feeder = self._feeder

        def batches():
            for samples in reader():
                yield feeder.feed(samples)
        self._batches = batches
        return self

    def set_batch_generator(self, reader, places=None):
        names = self._names

        def batches():
            for b in reader():
                yield _as_feed(names, b)
        self._batches = batches
        return self

    # the py_reader spellings
    def decorate_paddle_reader(self, reader, places=None):
        return self.set_sample_list_generator(reader, places)

    decorate_sample_list_generator = decorate_paddle_reader

    def decorate_sample_generator(self, sample_generator, batch_size, drop_last=True, places=None):
        return self.set_sample_generator(sample_generator, batch_size, drop_last, places)

    def decorate_batch_generator(self, reader, places=None):
        return self.set_batch_generator(reader, places)

    decorate_tensor_provider = decorate_batch_generator

    def _source(self):
        if self._batches is None:
            raise ValueError("DataLoader: no generator set (set_sample_generator, set_sample_list_generator "
                             "or set_batch_generator)")
        return _reader.buffered(self._batches, self._capacity, self._queue._attach)()

    @property
    def queue(self):
        """The py_reader's blocking queue (size(): batches made ahead, waiting)."""
        return self._queue

    # -- iterable ------------------------------------------------------------------------------
    def __call__(self):
        return iter(self)

    def __iter__(self):
        if not self._iterable:
            raise ValueError("DataLoader: this loader is not iterable (iterable=False): start() it and run the "
                             "program without a feed")
        for feed in self._source():
            if self._return_list:
                yield [feed[n] for n in self._names]
            else:
                yield [feed]

    # -- non-iterable ------------------------------------------------------------------------
    def start(self):
        if self._iterable:
            raise ValueError("DataLoader: start() is for loaders made with iterable=False")
        if self._it is not None:
            raise ValueError("DataLoader: start() called twice without reset()")
        self._it = self._source()

    def reset(self):
        if self._it is not None:
            self._it.close()
        self._it = None

    def _next_feed(self):
        if self._it is None:
            return None
        try:
            return next(self._it)
        except StopIteration:
            raise EOFException("the reader has no batch left: reset() it, then start() the next pass")


def _next_feed(program):
    """The next batch of the started non-iterable loader bound to program, or None."""
    for r in getattr(program, "_readers", ()):
        if r._it is not None:
            return r._next_feed()
    return None


class DataLoader:
    """fluid.io.DataLoader and paddle.io.DataLoader."""

    @staticmethod
    def from_generator(feed_list=None, capacity=None, use_double_buffer=True, iterable=True, return_list=False,
                       use_multiprocess=False, drop_last=True):
        return _Loader(feed_list, capacity, iterable, return_list, drop_last)

    def __init__(self, dataset, feed_list=None, places=None, return_list=False, batch_sampler=None, batch_size=1,
                 shuffle=False, drop_last=False, collate_fn=None, num_workers=0, use_buffer_reader=True,
                 use_shared_memory=True, timeout=0, worker_init_fn=None):
        """paddle.io.DataLoader over a paddle.io.Dataset (map style: __getitem__ / __len__)."""
        if feed_list is None:
            raise NotImplementedError("paddle.io.DataLoader: feed_list is required (static programs only)")
        if collate_fn is not None or batch_sampler is not None:
            raise NotImplementedError("paddle.io.DataLoader: collate_fn and batch_sampler are not supported")
        self._loader = _Loader(feed_list, 4, True, return_list, drop_last)

        def samples():
            idx = list(range(len(dataset)))
            if shuffle:
                np.random.shuffle(idx)
            for i in idx:
                yield dataset[i]
        self._loader.set_sample_generator(samples, batch_size, drop_last)

    def __iter__(self):
        return iter(self._loader)

    def __call__(self):
        return iter(self._loader)


class Dataset:
    """paddle.io.Dataset: subclasses define __getitem__ and __len__."""

    def __getitem__(self, idx):
        raise NotImplementedError("%s must define __getitem__" % type(self).__name__)

    def __len__(self):
        raise NotImplementedError("%s must define __len__" % type(self).__name__)


class IterableDataset(Dataset):
    pass


PyReader = _Loader


def create_py_reader_by_data(capacity, feed_list, name=None, use_double_buffer=True):
    """fluid.layers.create_py_reader_by_data: a non-iterable loader over feed_list."""
    return _Loader(feed_list, capacity, False, False, True)


def py_reader(capacity, shapes, dtypes, lod_levels=None, name=None, use_double_buffer=True):
    """fluid.layers.py_reader: makes the data variables (read_file returns them) and a
    non-iterable loader over them."""
    from . import layers, unique_name
    lod_levels = list(lod_levels or [0] * len(shapes))
    if not (len(shapes) == len(dtypes) == len(lod_levels)):
        raise ValueError("py_reader: shapes, dtypes and lod_levels differ in length (%d, %d, %d)"
                         % (len(shapes), len(dtypes), len(lod_levels)))
    base = name or unique_name.generate("py_reader")
    feed = [layers._data("%s_data_%d" % (base, i), list(s), d, lod, True)
            for i, (s, d, lod) in enumerate(zip(shapes, dtypes, lod_levels))]
    r = _Loader(feed, capacity, False, False, True)
    r._vars = feed
    return r


def read_file(reader):
    """fluid.layers.read_file: the variables the reader feeds."""
    if not isinstance(reader, _Loader):
        raise TypeError("read_file: expected a py_reader, got %s" % type(reader).__name__)
    vs = list(getattr(reader, "_vars", None) or reader._feeder.feed_vars)
    return vs[0] if len(vs) == 1 else vs

