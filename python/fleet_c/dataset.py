"""QueueDataset and InMemoryDataset (paddle.distributed.* 2.x names with init(...); the
fluid 1.x setters and DatasetFactory too).  The C library parses MultiSlot (default),
Criteo and libsvm text, or a pipe_command's MultiSlot output; a bad line is reported as
FILE:LINE: slot 'NAME' (#K): what.  See docs/data.md in the repository.
"""
from . import _lib
from ._lib import check, lib
from .framework import Variable

__all__ = ["DatasetBase", "QueueDataset", "InMemoryDataset", "DatasetFactory"]


class DatasetBase:
    _kind = None

    def __init__(self):
        self._h = _lib.check_ptr(lib.fl_dataset_create(_lib.cstr(self._kind)), self._kind)
        self._use_var = []
        self._filelist = []

    def __del__(self):
        if getattr(self, "_h", None) and not _lib.shutting_down[0]:
            lib.fl_dataset_free(self._h)
            self._h = None

    def init(self, batch_size=1, thread_num=1, use_var=None, pipe_command="cat", input_type=0, fs_name="",
             fs_ugi="", download_cmd="cat", data_format=None, sparse_feature_dim=None, **kwargs):
        """Paddle 2.x: all settings at once.  data_format ('multislot', 'criteo', 'libsvm')
        and sparse_feature_dim are Fleet's (the C parsers); input_type 0 (one instance per
        line) is the only one."""
        if input_type != 0:
            raise NotImplementedError("dataset.init: input_type=%r is not supported (0 only)" % input_type)
        if fs_name or fs_ugi or download_cmd != "cat":
            raise NotImplementedError("dataset.init: HDFS (fs_name, fs_ugi, download_cmd) is not supported; "
                                      "use a pipe_command that reads the files")
        for k in kwargs:
            raise TypeError("dataset.init: unknown argument '%s'" % k)
        self.set_batch_size(batch_size)
        self.set_thread(thread_num)
        if use_var is not None:
            self.set_use_var(use_var)
        self.set_pipe_command(pipe_command)
        if data_format is not None:
            self.set_format(data_format)
        if sparse_feature_dim is not None:
            self.set_sparse_feature_dim(sparse_feature_dim)

    # fluid 1.x setters ------------------------------------------------------------------------
    def set_batch_size(self, batch_size):
        check(lib.fl_dataset_set_batch_size(self._h, int(batch_size)))

    def set_thread(self, thread_num):
        check(lib.fl_dataset_set_thread(self._h, int(thread_num)))

    def set_use_var(self, var_list):
        vs = list(var_list)
        for i, v in enumerate(vs):
            if not isinstance(v, Variable):
                raise TypeError("set_use_var: entry %d is a %s, not a Variable" % (i, type(v).__name__))
        check(lib.fl_dataset_set_use_var(self._h, _lib.ptr_array([v._p for v in vs]), len(vs)))
        self._use_var = vs  # the programs own the variables: keep them alive

    def set_pipe_command(self, pipe_command):
        check(lib.fl_dataset_set_pipe_command(self._h, _lib.cstr(pipe_command)))

    def set_pipe_timeout(self, seconds):
        check(lib.fl_dataset_set_pipe_timeout(self._h, float(seconds)))

    def set_filelist(self, filelist):
        files = [str(f) for f in filelist]
        check(lib.fl_dataset_set_filelist(self._h, _lib.cstr_array(files), len(files)))
        self._filelist = files

    def get_filelist(self):
        return list(self._filelist)

    def set_format(self, data_format):
        """'multislot' (default), 'criteo' or 'libsvm' (see docs/data.md)."""
        check(lib.fl_dataset_set_format(self._h, _lib.cstr(data_format)))

    def set_sparse_feature_dim(self, dim):
        check(lib.fl_dataset_set_sparse_feature_dim(self._h, int(dim)))

    def set_bad_line_policy(self, policy):
        """'stop' (default: the pass fails with the line's message) or 'skip'."""
        check(lib.fl_dataset_set_bad_line_policy(self._h, _lib.cstr(policy)))

    def bad_lines(self):
        return lib.fl_dataset_bad_lines(self._h)

    def thread_num(self):
        return lib.fl_dataset_thread_num(self._h)

    def set_hdfs_config(self, fs_name, fs_ugi):
        raise NotImplementedError("HDFS is not supported; use a pipe_command that reads the files")

    def desc(self):
        return "%s(batch_size=%d, threads=%d, files=%d)" % (self._kind, lib.fl_dataset_batch_size(self._h),
                                                             self.thread_num(), len(self._filelist))


class QueueDataset(DatasetBase):
    """Streams the files: each reader thread takes the next file from a shared queue."""
    _kind = "QueueDataset"

    def local_shuffle(self):
        raise NotImplementedError("QueueDataset does not shuffle; use InMemoryDataset")

    def global_shuffle(self, fleet=None, thread_num=12):
        raise NotImplementedError("QueueDataset does not shuffle; use InMemoryDataset")


class InMemoryDataset(DatasetBase):
    """Loads the files into memory (load_into_memory), can shuffle locally or across the
    workers (global_shuffle(fleet)), and is split among the trainer threads."""
    _kind = "InMemoryDataset"

    def load_into_memory(self):
        check(lib.fl_dataset_load_into_memory(self._h))

    def preload_into_memory(self, thread_num=None):
        if thread_num is not None:
            self.set_thread(thread_num)
        check(lib.fl_dataset_preload_into_memory(self._h))

    def wait_preload_done(self):
        check(lib.fl_dataset_wait_preload_done(self._h))

    def local_shuffle(self, seed=0):
        check(lib.fl_dataset_local_shuffle(self._h, int(seed)))

    def global_shuffle(self, fleet=None, thread_num=12, seed=0):
        """Every record goes to a seeded random worker (fleet_dataset_global_shuffle); with
        fleet None, a local shuffle, as Paddle on one machine."""
        if fleet is None:
            return self.local_shuffle(seed)
        check(lib.fleet_dataset_global_shuffle(_fleet_handle(fleet), self._h, int(seed)))

    def release_memory(self):
        lib.fl_dataset_release_memory(self._h)

    def get_memory_data_size(self, fleet=None):
        if fleet is None:
            return lib.fl_dataset_get_memory_data_size(self._h)
        n = lib.fleet_dataset_memory_data_size(_fleet_handle(fleet), self._h)
        if n < 0:
            raise _lib.err_from_last("get_memory_data_size")
        return n

    def get_shuffle_data_size(self, fleet=None):
        return self.get_memory_data_size(fleet)


def _fleet_handle(fleet):
    """The C handle of a fleet object: the fleet module (2.x) or a Fleet instance (1.x)."""
    f = getattr(fleet, "_fleet", fleet)
    if not hasattr(f, "_handle"):
        raise TypeError("expected the fleet object, got %s" % type(fleet).__name__)
    return f._handle()


class DatasetFactory:
    """fluid.DatasetFactory().create_dataset("QueueDataset" | "InMemoryDataset")."""

    def create_dataset(self, datafeed_class="QueueDataset"):
        kinds = {"QueueDataset": QueueDataset, "InMemoryDataset": InMemoryDataset}
        if datafeed_class not in kinds:
            raise ValueError("create_dataset: unknown dataset '%s' (QueueDataset or InMemoryDataset)"
                             % datafeed_class)
        return kinds[datafeed_class]()


_READERS = ("mnist", "flowers")


def __getattr__(name):
    """paddle.dataset.mnist etc.: the readers of fleet_c.datasets (local files only)."""
    if name in _READERS:
        import importlib
        return importlib.import_module("fleet_c.datasets." + name)
    raise AttributeError("module 'fleet_c.dataset' has no attribute '%s'" % name)
