"""Data generators for a dataset's pipe_command (paddle.distributed.fleet.data_generator,
fluid.incubate.data_generator): a script reads raw lines on standard input and writes
MultiSlot lines, which the C dataset parses.

    class Reader(MultiSlotDataGenerator):
        def generate_sample(self, line):
            def reader():
                ...
                yield [("dense_input", dense), ("C1", [id1]), ..., ("label", [label])]
            return reader
    Reader().run_from_stdin()

Importing it (by either path) loads neither NumPy nor the C library, so a pipe_command,
started once per file and pass, starts quickly.
"""
import sys

__all__ = ["DataGenerator", "MultiSlotDataGenerator", "MultiSlotStringDataGenerator"]


class DataGenerator:
    def __init__(self):
        self._proto_info = None
        self.batch_size_ = 32

    def set_batch(self, batch_size):
        self.batch_size_ = int(batch_size)

    def generate_sample(self, line):
        raise NotImplementedError("generate_sample(line) must return a reader: a function yielding "
                                  "[(slot_name, values), ...] per instance")

    def generate_batch(self, samples):
        """Override to transform a batch of instances; the default passes them through."""
        def local_iter():
            for s in samples:
                yield s
        return local_iter

    def _emit(self, samples, out):
        for s in self.generate_batch(samples)():
            out.write(self._gen_str(s))

    def run_from_stdin(self):
        self._run(sys.stdin, sys.stdout)

    def run_from_memory(self):
        self._run([], sys.stdout)

    def _run(self, lines, out):
        batch = []
        for line in lines:
            reader = self.generate_sample(line)
            if reader is None:
                continue
            for sample in reader():
                if sample is None:
                    continue
                batch.append(sample)
                if len(batch) == self.batch_size_:
                    self._emit(batch, out)
                    batch = []
        if batch:
            self._emit(batch, out)
        out.flush()

    def _gen_str(self, line):
        raise NotImplementedError


class MultiSlotDataGenerator(DataGenerator):
    """Numbers per slot: each instance is written as ``len v1 .. vlen`` per slot, in the
    order given, which must match the dataset's use_var.  An empty slot is an error in the
    C parser (Paddle's too): give at least one value (e.g. [0])."""

    def _gen_str(self, line):
        line = _listed(line)
        if not isinstance(line, (list, tuple)):
            raise ValueError("the reader must yield a list of (name, values) pairs, got %s" % type(line).__name__)
        parts = []
        names = []
        for item in line:
            name, values = item
            if not isinstance(values, (list, tuple)) or not values:
                raise ValueError("slot '%s': values must be a non-empty list, got %r" % (name, values))
            names.append(name)
            parts.append(str(len(values)))
            parts.extend(_num(v, name) for v in values)
        if self._proto_info is None:
            self._proto_info = names
        elif names != self._proto_info:
            raise ValueError("the slots of an instance changed: %s, then %s" % (self._proto_info, names))
        return " ".join(parts) + "\n"


class MultiSlotStringDataGenerator(DataGenerator):
    """As MultiSlotDataGenerator, the values being strings written as they are."""

    def _gen_str(self, line):
        parts = []
        for name, values in _listed(line):
            parts.append(str(len(values)))
            parts.extend(str(v) for v in values)
        return " ".join(parts) + "\n"


def _listed(line):
    """A sample the reader yielded as an iterator (``zip(names, values)``, as Paddle's own
    examples do) is taken as the list it yields, as Paddle does."""
    if not isinstance(line, (list, tuple, str, bytes)) and hasattr(line, "__next__"):
        return list(line)
    return line


def _num(v, name):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError("slot '%s': %r is not a number" % (name, v))
    return str(int(f)) if f.is_integer() and "." not in str(v) else repr(f)
