"""paddle.reader and paddle.batch: Paddle's reader decorators.

A reader is a function of no arguments that returns an iterable of samples; a decorator
takes readers and returns a new one.  These move samples around (order, grouping,
buffering, threads); they compute nothing on the samples themselves, so they are plain
Python as in Paddle.  Batches feed an Executor through fluid.DataFeeder, or a DataLoader.
"""
import itertools
import queue
import random
import threading

__all__ = ["batch", "shuffle", "buffered", "xmap_readers", "compose", "chain", "firstn", "map_readers", "cache",
           "ComposeNotAligned"]

_DEADLINE_S = 600.0  # the longest a consumer waits for a producer thread's next sample


def _check_reader(reader, who):
    if not callable(reader):
        raise TypeError("%s: reader must be a function returning an iterable, got %s" % (who, type(reader).__name__))


def batch(reader, batch_size, drop_last=False):
    """Groups the samples of reader into lists of batch_size (the last one shorter unless
    drop_last)."""
    _check_reader(reader, "paddle.batch")
    batch_size = int(batch_size)
    if batch_size <= 0:
        raise ValueError("paddle.batch: batch_size must be a positive integer, got %d" % batch_size)

    def batch_reader():
        b = []
        for sample in reader():
            b.append(sample)
            if len(b) == batch_size:
                yield b
                b = []
        if b and not drop_last:
            yield b

    return batch_reader


def shuffle(reader, buf_size):
    """Shuffles within windows of buf_size samples."""
    _check_reader(reader, "paddle.reader.shuffle")
    if int(buf_size) <= 0:
        raise ValueError("paddle.reader.shuffle: buf_size must be positive, got %r" % (buf_size,))

    def shuffled():
        buf = []
        for sample in reader():
            buf.append(sample)
            if len(buf) >= buf_size:
                random.shuffle(buf)
                yield from buf
                buf = []
        if buf:
            random.shuffle(buf)
            yield from buf

    return shuffled


def chain(*readers):
    """The samples of each reader in turn."""
    for r in readers:
        _check_reader(r, "paddle.reader.chain")

    def chained():
        for r in readers:
            yield from r()

    return chained


class ComposeNotAligned(ValueError):
    pass


def compose(*readers, **kwargs):
    """Zips readers: each output sample is the concatenation of one sample of each (a
    sample that is not a tuple counts as a 1-tuple).  check_alignment (default True):
    readers of different lengths raise ComposeNotAligned."""
    check_alignment = kwargs.pop("check_alignment", True)
    if kwargs:
        raise TypeError("paddle.reader.compose: unexpected arguments %s" % sorted(kwargs))
    for r in readers:
        _check_reader(r, "paddle.reader.compose")

    def as_tuple(x):
        return x if isinstance(x, tuple) else (x,)

    def composed():
        its = [r() for r in readers]
        if not check_alignment:
            for outputs in zip(*its):
                yield sum(map(as_tuple, outputs), ())
            return
        for outputs in itertools.zip_longest(*its):
            if any(o is None for o in outputs):
                raise ComposeNotAligned("paddle.reader.compose: the readers have different lengths")
            yield sum(map(as_tuple, outputs), ())

    return composed


def firstn(reader, n):
    """The first n samples."""
    _check_reader(reader, "paddle.reader.firstn")

    def first():
        return itertools.islice(reader(), int(n))

    return first


def map_readers(func, *readers):
    """func applied to one sample of each reader at a time."""
    for r in readers:
        _check_reader(r, "paddle.reader.map_readers")

    def mapped():
        return map(func, *[r() for r in readers])

    return mapped


def cache(reader):
    """Reads reader once; later passes replay its samples."""
    _check_reader(reader, "paddle.reader.cache")
    data = []
    done = [False]

    def cached():
        if not done[0]:
            data.extend(reader())
            done[0] = True
        return iter(data)

    return cached


class _End:
    pass


class _Failed:
    def __init__(self, exc):
        self.exc = exc


def _get(q, who):
    try:
        return q.get(timeout=_DEADLINE_S)
    except queue.Empty:
        raise TimeoutError("%s: no sample from the producer thread in %.0f s" % (who, _DEADLINE_S))


def buffered(reader, size, _observe=None):
    """Reads ahead up to size samples in a thread.  (_observe, internal: called with each
    pass's queue, for the loaders' queue.size().)"""
    _check_reader(reader, "paddle.reader.buffered")

    def read_ahead():
        q = queue.Queue(maxsize=max(1, int(size)))
        stop = threading.Event()
        if _observe is not None:
            _observe(q)

        def produce():
            try:
                for s in reader():
                    if not _put(q, s, stop):
                        return
                _put(q, _End(), stop)
            except BaseException as e:  # handed to the consumer, which raises it
                _put(q, _Failed(e), stop)

        t = threading.Thread(target=produce, daemon=True)
        t.start()
        try:
            while True:
                s = _get(q, "paddle.reader.buffered")
                if isinstance(s, _End):
                    return
                if isinstance(s, _Failed):
                    raise s.exc
                yield s
        finally:
            stop.set()

    return read_ahead


def _put(q, item, stop):
    """q.put that gives up when stop is set (the consumer went away); False then."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def xmap_readers(mapper, reader, process_num, buffer_size, order=False):
    """mapper applied to the samples of reader by process_num threads (order=True keeps
    the reader's order).  The threads end when the reader is exhausted, or when the
    consumer stops reading (the generator is closed)."""
    _check_reader(reader, "paddle.reader.xmap_readers")
    process_num = int(process_num)
    if process_num <= 0:
        raise ValueError("paddle.reader.xmap_readers: process_num must be positive, got %d" % process_num)

    def xreader():
        in_q = queue.Queue(maxsize=max(1, int(buffer_size)))
        out_q = queue.Queue(maxsize=max(1, int(buffer_size)))
        stop = threading.Event()

        def feed():
            try:
                for i, s in enumerate(reader()):
                    if not _put(in_q, (i, s), stop):
                        return
            except BaseException as e:  # handed to the consumer, which raises it
                _put(out_q, _Failed(e), stop)
            for _ in range(process_num):
                _put(in_q, _End(), stop)

        def work():
            while not stop.is_set():
                try:
                    item = in_q.get(timeout=0.1)
                except queue.Empty:
                    continue
                if isinstance(item, _End):
                    _put(out_q, _End(), stop)
                    return
                i, s = item
                try:
                    r = (i, mapper(s))
                except BaseException as e:
                    _put(out_q, _Failed(e), stop)
                    _put(out_q, _End(), stop)
                    return
                if not _put(out_q, r, stop):
                    return

        threads = [threading.Thread(target=feed, daemon=True)]
        threads += [threading.Thread(target=work, daemon=True) for _ in range(process_num)]
        for t in threads:
            t.start()
        try:
            ended, pending, want = 0, {}, 0
            while ended < process_num:
                item = _get(out_q, "paddle.reader.xmap_readers")
                if isinstance(item, _End):
                    ended += 1
                    continue
                if isinstance(item, _Failed):
                    raise item.exc
                if not order:
                    yield item[1]
                    continue
                pending[item[0]] = item[1]
                while want in pending:
                    yield pending.pop(want)
                    want += 1
            for i in sorted(pending):
                yield pending[i]
        finally:
            stop.set()

    return xreader
